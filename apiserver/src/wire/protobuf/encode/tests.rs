use serde_json::{json, Value};

use super::*;
use crate::registry::Registry;
use crate::wire::protobuf::decode;

fn meta(name: &str, ns: Option<&str>) -> Value {
    let mut m = json!({
        "name": name,
        "uid": "6f1d0c9e-8f43-4a43-9d0c-2b8a1f0e7c11",
        "resourceVersion": "1042",
        "generation": 3,
        "creationTimestamp": "2024-05-01T10:20:30Z",
        "labels": {"app": "web", "tier": ""},
        "annotations": {"note": "hello"},
        "finalizers": ["example.com/keep"],
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": "0b0e1b35-b0b8-4cd9-9a39-3f0a1f3c2d22", "controller": true, "blockOwnerDeletion": false,
        }],
        "managedFields": [{
            "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
            "time": "2024-05-01T10:20:30Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
        }],
    });
    if let Some(ns) = ns {
        m["namespace"] = json!(ns);
    }
    m
}

/// Realistic objects of every served kind (and the meta.k8s.io bodies clients exchange).
fn objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cm", Some("default")),
               "data": {"a": "1", "empty": ""}, "binaryData": {"b": "AAEC"}, "immutable": false}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("s", Some("default")),
               "type": "kubernetes.io/service-account-token", "data": {"token": "c2VjcmV0"},
               "stringData": {"x": "y"}}),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team", "deletionTimestamp": "2024-05-02T00:00:00Z", "deletionGracePeriodSeconds": 0},
               "spec": {"finalizers": ["kubernetes"]},
               "status": {"phase": "Terminating", "conditions": [{
                   "type": "NamespaceDeletionContentFailure", "status": "False",
                   "lastTransitionTime": "2024-05-02T00:00:01Z", "reason": "ContentDeleted", "message": "All content successfully deleted"}]}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("builder", Some("ci")),
               "secrets": [{"name": "builder-token"}], "imagePullSecrets": [{"name": "registry"}],
               "automountServiceAccountToken": false}),
        json!({"apiVersion": "v1", "kind": "Event", "metadata": meta("ev.17c", Some("default")),
               "involvedObject": {"kind": "ConfigMap", "namespace": "default", "name": "cm", "uid": "u1",
                                  "apiVersion": "v1", "resourceVersion": "5", "fieldPath": "data"},
               "reason": "Synced", "message": "synced", "source": {"component": "kustos"},
               "firstTimestamp": "2024-05-01T10:20:30Z", "lastTimestamp": "2024-05-01T10:21:30Z", "count": 2,
               "type": "Normal", "eventTime": "2024-05-01T10:20:30.123456Z",
               "series": {"count": 2, "lastObservedTime": "2024-05-01T10:21:30.000001Z"},
               "action": "Sync", "reportingComponent": "kustos", "reportingInstance": "node-1"}),
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta("ev.18d", Some("default")),
               "eventTime": "2024-05-01T10:20:30.654321Z", "reportingController": "kustos.dev/ctl",
               "reportingInstance": "ctl-1", "action": "Approve", "reason": "Approved", "note": "approved",
               "type": "Normal", "regarding": {"kind": "CertificateSigningRequest", "name": "csr-1"},
               "related": {"kind": "Node", "name": "n1"},
               "series": {"count": 3, "lastObservedTime": "2024-05-01T10:25:00.000002Z"},
               "deprecatedCount": 3, "deprecatedSource": {"component": "kustos", "host": "h"}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("node-1", Some("kube-node-lease")),
               "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40,
                        "acquireTime": "2024-05-01T10:20:30.000000Z", "renewTime": "2024-05-01T10:20:40.500000Z",
                        "leaseTransitions": 0}}),
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": meta("csr-1", None),
               "spec": {"request": "LS0tLS1CRUdJTg==", "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "expirationSeconds": 3600, "usages": ["digital signature", "client auth"],
                        "username": "system:node:n1", "uid": "u", "groups": ["system:nodes", "system:authenticated"],
                        "extra": {"scopes": ["a", "b"]}},
               "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved",
                                          "message": "ok", "lastUpdateTime": "2024-05-01T10:20:31Z",
                                          "lastTransitionTime": "2024-05-01T10:20:31Z"}],
                          "certificate": "Q0VSVA=="}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("r", Some("default")),
               "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("cr", None),
               "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"},
                   "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta("rb", Some("default")),
               "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": "ci"},
                            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta("crb", None),
               "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:nodes"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": meta("fs", None),
               "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 1000,
                        "distinguisherMethod": {"type": "ByUser"},
                        "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "*", "namespace": "kube-system"}},
                                                {"kind": "User", "user": {"name": "alice"}},
                                                {"kind": "Group", "group": {"name": "system:nodes"}}],
                                   "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                      "clusterScope": true, "namespaces": ["*"]}],
                                   "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}]},
               "status": {"conditions": [{"type": "Dangling", "status": "False", "lastTransitionTime": "2024-05-01T10:20:30Z",
                                          "reason": "Found", "message": "ok"}]}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": meta("pl", None),
               "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 50,
                        "borrowingLimitPercent": 0,
                        "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50}}}}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": meta("exempt", None),
               "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta("widgets.example.com", None),
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                                  "shortNames": ["wd"], "categories": ["all"]},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                            "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"],
                                "properties": {
                                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": false,
                                        "properties": {
                                            "size": {"type": "integer", "minimum": 1, "maximum": 10.5, "default": 3,
                                                     "format": "int32", "multipleOf": 0.5},
                                            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                                            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                                                     "x-kubernetes-list-type": "set", "maxItems": 5},
                                            "tuple": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
                                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                            "closed": {"type": "object", "additionalProperties": false},
                                            "ref": {"type": "object", "x-kubernetes-embedded-resource": true,
                                                    "x-kubernetes-preserve-unknown-fields": true, "nullable": true,
                                                    "example": {"kind": "ConfigMap"}},
                                        }},
                                    "status": {"type": "object", "x-kubernetes-validations": [
                                        {"rule": "self.x > 0", "message": "positive", "reason": "FieldValueInvalid", "fieldPath": ".x"}]},
                                }}},
                            "subresources": {"status": {}},
                            "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                            "deprecated": true, "deprecationWarning": "use v2"}],
                        "conversion": {"strategy": "None"}},
               "status": {"conditions": [{"type": "Established", "status": "True", "lastTransitionTime": "2024-05-01T10:20:30Z",
                                          "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}],
                          "acceptedNames": {"plural": "widgets", "kind": "Widget"}, "storedVersions": ["v1"]}}),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": meta("builder", Some("ci")),
               "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600,
                        "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "anchor", "uid": "1234"}},
               "status": {"token": "eyJ...", "expirationTimestamp": "2024-05-01T11:20:30Z"}}),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
               "spec": {"resourceAttributes": {"namespace": "default", "verb": "get", "resource": "configmaps",
                        "fieldSelector": {"rawSelector": "metadata.name=x"}}},
               "status": {"allowed": true, "reason": "RBAC: allowed"}}),
        json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
               "message": "ConfigMap \"x\" is invalid: data: Invalid value", "reason": "Invalid", "code": 422,
               "details": {"name": "x", "kind": "ConfigMap", "retryAfterSeconds": 1,
                           "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value", "field": "data"}]}}),
        json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "orphanDependents": false,
               "propagationPolicy": "Foreground", "dryRun": ["All"],
               "preconditions": {"uid": "u1", "resourceVersion": "7"}}),
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta("cm", Some("default"))}),
        json!({"apiVersion": "meta.k8s.io/v1beta1", "kind": "PartialObjectMetadata", "metadata": meta("cm", Some("default"))}),
    ]
}

#[test]
fn every_kind_round_trips() {
    for obj in objects() {
        let body = encode(&obj).unwrap_or_else(|e| panic!("{}: {e}", obj["kind"]));
        let back = decode(&body).unwrap_or_else(|e| panic!("{}: {e}", obj["kind"]));
        assert_eq!(back, obj, "{} {}", obj["apiVersion"], obj["kind"]);
    }
}

#[test]
fn lists_round_trip_with_their_list_meta() {
    let strip = |mut o: Value| {
        // Items carry no TypeMeta in protobuf lists (upstream's neither).
        if let Some(m) = o.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        o
    };
    let list_meta =
        json!({"resourceVersion": "99", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", "remainingItemCount": 4});
    for obj in objects() {
        let (av, kind) = (obj["apiVersion"].as_str().unwrap_or(""), obj["kind"].as_str().unwrap_or(""));
        let list_kind = format!("{kind}List");
        if !has_message(av, &list_kind) {
            continue;
        }
        let list =
            json!({"apiVersion": av, "kind": list_kind, "metadata": list_meta, "items": [obj.clone(), obj.clone()]});
        let back = decode(&encode(&list).expect("encode list")).expect("decode list");
        let want = json!({"apiVersion": av, "kind": list_kind, "metadata": list_meta,
                          "items": [strip(obj.clone()), strip(obj.clone())]});
        assert_eq!(back, want, "{list_kind}");
    }
    // An empty list: no items field at all on the wire.
    let empty = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"}, "items": []});
    let back = decode(&encode(&empty).expect("encode")).expect("decode");
    assert_eq!(back, json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"}}));
}

#[test]
fn every_served_kind_and_its_list_has_a_message() {
    for def in &Registry::builtin().resources {
        let av = def.api_version();
        // Reviews are created, never listed.
        if def.create_only {
            assert!(has_message(&av, def.kind), "{av} {}", def.kind);
            continue;
        }
        assert!(has_message(&av, def.kind), "{av} {}", def.kind);
        assert!(has_message(&av, &def.list_kind()), "{av} {}", def.list_kind());
    }
    for (av, kind) in [
        ("events.k8s.io/v1", "Event"),
        ("events.k8s.io/v1", "EventList"),
        ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        ("meta.k8s.io/v1beta1", "PartialObjectMetadataList"),
        ("meta.k8s.io/v1", "Status"),
        ("meta.k8s.io/v1", "WatchEvent"),
        ("v1", "List"),
    ] {
        assert!(has_message(av, kind), "{av} {kind}");
    }
    // The shared meta.k8s.io kinds in every group's version.
    for av in [
        "v1",
        "rbac.authorization.k8s.io/v1",
        "coordination.k8s.io/v1",
        "certificates.k8s.io/v1",
        "flowcontrol.apiserver.k8s.io/v1",
        "apiextensions.k8s.io/v1",
        "events.k8s.io/v1",
    ] {
        for kind in ["DeleteOptions", "Status", "WatchEvent"] {
            assert!(has_message(av, kind), "{av} {kind}");
        }
    }
    // No protobuf form: custom resources (even in a group whose first label is a built-in's),
    // Table.
    for (av, kind) in [("example.com/v1", "Widget"), ("rbac.example.com/v1", "Role"), ("meta.k8s.io/v1", "Table")] {
        assert!(!has_message(av, kind), "{av} {kind}");
    }
}

const MAGIC_BYTES: [u8; 4] = [0x6b, 0x38, 0x73, 0x00];

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn bytes_match_upstreams_encoding_of_small_messages() {
    // ConfigMap{metadata{name: "a"}, data{"k": "v"}} as upstream's serializer writes it.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    let want = cat(&[
        &MAGIC_BYTES,
        &[0x0a, 0x0f, 0x0a, 0x02, b'v', b'1', 0x12, 0x09],
        b"ConfigMap",
        &[0x12, 0x0d],
        &[0x0a, 0x03, 0x0a, 0x01, b'a'],
        &[0x12, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v'],
        &[0x1a, 0x00, 0x22, 0x00],
    ]);
    assert_eq!(encode(&cm).expect("encode"), want);

    // A negative int32 is a ten-byte sign-extended varint, as Go writes it.
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
                       "spec": {"leaseDurationSeconds": -1}});
    let want = cat(&[
        &MAGIC_BYTES,
        &[0x0a, 0x1f, 0x0a, 0x16],
        b"coordination.k8s.io/v1",
        &[0x12, 0x05],
        b"Lease",
        &[0x12, 0x12],
        &[0x0a, 0x03, 0x0a, 0x01, b'l'],
        &[0x12, 0x0b, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        &[0x1a, 0x00, 0x22, 0x00],
    ]);
    assert_eq!(encode(&lease).expect("encode"), want);

    // Time: seconds then nanos, both written.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "n", "creationTimestamp": "2023-11-14T22:13:20Z"}});
    let want_raw: &[u8] = &[0x0a, 0x0d, 0x0a, 0x01, b'n', 0x42, 0x08, 0x08, 0x80, 0xe2, 0xcf, 0xaa, 0x06, 0x10, 0x00];
    let body = encode(&ns).expect("encode");
    assert!(body.windows(want_raw.len()).any(|w| w == want_raw), "{body:02x?}");
}

#[test]
fn watch_frames_are_length_prefixed_watch_events_holding_the_objects_body() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    let inner = encode(&cm).expect("encode");
    let frame = watch_frame("ADDED", &cm).expect("frame");
    // The bare WatchEvent (type = 1, object = 2 holding a RawExtension whose raw = 1 is the
    // object's enveloped body): no envelope around the event itself.
    let mut event = cat(&[&[0x0a, 0x05], b"ADDED", &[0x12, (inner.len() + 2) as u8, 0x0a, inner.len() as u8]]);
    event.extend(&inner);
    assert!(inner.starts_with(&MAGIC_BYTES), "the object keeps its envelope");
    let want = cat(&[&(event.len() as u32).to_be_bytes(), &event]);
    assert_eq!(frame, want);
    let (ty, obj) = super::super::decode_watch_event(&frame[4..]).expect("decode");
    assert_eq!((ty.as_str(), obj), ("ADDED", cm));
}

#[test]
fn values_that_do_not_fit_their_fields_are_errors() {
    let cases = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 5}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": ["x"]}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": {"k": "not base64!"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"creationTimestamp": "yesterday"}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {}, "spec": {"leaseDurationSeconds": "x"}}),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {}}),
    ];
    for c in cases {
        assert!(encode(&c).is_err(), "{c}");
    }
}
