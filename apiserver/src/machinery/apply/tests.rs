//! Table tests from the Kubernetes "Server-Side Apply" reference page: field management of
//! the `test-cm` ConfigMap, conflicts and `force`, shared ownership, fields dropped from an
//! apply, ownership moved by updates (the HorizontalPodAutoscaler hand-over), and the merge
//! strategies of lists and maps.

use serde_json::{json, Value};

use super::*;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

fn configmap_schema() -> Schema {
    let reg = crate::registry::Registry::builtin();
    let doc: Value = serde_json::from_slice(crate::openapi::OpenApi::new(&reg).v2()).unwrap();
    Schema::from_definitions(doc["definitions"].as_object().unwrap(), "io.k8s.api.core.v1.ConfigMap").unwrap()
}

/// A Deployment-shaped custom resource (its schema as a CRD would give it).
fn deployment_schema() -> Schema {
    let v = json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
                "finalizers": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}},
                "containers": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"}}}}
            }}
        }
    });
    let props: JSONSchemaProps = serde_json::from_value(v).unwrap();
    Schema::from_crd(&props).unwrap()
}

fn writer<'a>(manager: &'a str, api_version: &'a str, time: &'a str, reset: &'a FieldSet) -> Writer<'a> {
    Writer { manager, api_version, subresource: "", time, reset_fields: reset }
}

/// Manager, operation and `fieldsV1` text of each entry.
type Owners = Vec<(String, String, String)>;

fn managed(obj: &Value) -> Owners {
    decode_managed_fields(obj)
        .unwrap()
        .into_iter()
        .map(|e| (e.manager.clone(), e.operation.as_str().to_string(), e.fields.to_fields_v1_string()))
        .collect()
}

fn m(manager: &str, op: &str, fields: &str) -> (String, String, String) {
    (manager.to_string(), op.to_string(), fields.to_string())
}

fn test_cm(data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
        "data": data,
    })
}

/// The page's field management example: `kubectl apply --server-side` of `test-cm` records
/// one Apply entry owning the label and `data.key`.
#[test]
fn apply_creates_with_managed_fields() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let out =
        apply(&s, None, &test_cm(json!({"key": "some value"})), &writer("kubectl", "v1", T0, &none), false).unwrap();
    assert!(out.changed);
    assert_eq!(out.object["data"], json!({"key": "some value"}));
    assert_eq!(
        out.object["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:test-label": {}}}, "f:data": {"f:key": {}}},
        }])
    );
}

/// Creating with an Update (`kubectl create`): the maps the write added are members too.
#[test]
fn apply_update_on_create_owns_containers() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let out = update(&s, None, test_cm(json!({"key": "v"})), &writer("kubectl-create", "v1", T0, &none));
    assert_eq!(
        managed(&out.object),
        [m(
            "kubectl-create",
            "Update",
            r#"{"f:data":{"f:key":{},".":{}},"f:metadata":{"f:labels":{"f:test-label":{},".":{}}}}"#
        )]
    );
}

struct Step {
    manager: &'static str,
    /// Apply (with the flag: force) or Update.
    apply: Option<bool>,
    /// The configuration (apply) or the new object (update).
    body: Value,
    /// Ok: the expected data and owners afterwards; Err: the conflict message.
    want: Result<(Value, Owners), &'static str>,
}

fn run(schema: &Schema, steps: Vec<Step>, field: &str) {
    let none = FieldSet::new();
    let mut live: Option<Value> = None;
    for (i, step) in steps.into_iter().enumerate() {
        let version = step.body["apiVersion"].as_str().unwrap_or("v1").to_string();
        let w = writer(step.manager, &version, T0, &none);
        let got = match step.apply {
            Some(force) => apply(schema, live.as_ref(), &step.body, &w, force),
            None => Ok(update(schema, live.as_ref(), step.body.clone(), &w)),
        };
        match (got, step.want) {
            (Ok(out), Ok((data, owners))) => {
                assert_eq!(out.object[field], data, "step {i}");
                assert_eq!(managed(&out.object), owners, "step {i}");
                live = Some(out.object);
            }
            (Err(e), Err(msg)) => assert_eq!(e.to_string(), msg, "step {i}"),
            (got, want) => panic!("step {i}: got {got:?}, want {want:?}"),
        }
    }
}

/// The page's conflict rules on `test-cm`: a field another manager set to a different value
/// conflicts; the same value is shared; `force` takes the field over.
#[test]
fn apply_conflicts_and_force() {
    let cm = |v: &str| test_cm(json!({"key": v}));
    let kubectl = r#"{"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}"#;
    run(
        &configmap_schema(),
        vec![
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: cm("some value"),
                want: Ok((json!({"key": "some value"}), vec![m("kubectl", "Apply", kubectl)])),
            },
            // A controller's update (PUT) changes the value: the field moves to it.
            Step {
                manager: "kube-controller-manager",
                apply: None,
                body: cm("controller value"),
                want: Ok((
                    json!({"key": "controller value"}),
                    vec![
                        m("kubectl", "Apply", r#"{"f:metadata":{"f:labels":{"f:test-label":{}}}}"#),
                        m("kube-controller-manager", "Update", r#"{"f:data":{"f:key":{}}}"#),
                    ],
                )),
            },
            // kubectl applies its value again: conflict, nothing written.
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: cm("some value"),
                want: Err(
                    r#"Apply failed with 1 conflict: conflict with "kube-controller-manager" using v1: .data.key"#,
                ),
            },
            // Applying the controller's value is no conflict: both own it.
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: cm("controller value"),
                want: Ok((
                    json!({"key": "controller value"}),
                    vec![
                        m("kubectl", "Apply", kubectl),
                        m("kube-controller-manager", "Update", r#"{"f:data":{"f:key":{}}}"#),
                    ],
                )),
            },
            // --force-conflicts: the value is kubectl's and so is the field, alone.
            Step {
                manager: "kubectl",
                apply: Some(true),
                body: cm("forced"),
                want: Ok((json!({"key": "forced"}), vec![m("kubectl", "Apply", kubectl)])),
            },
        ],
        "data",
    );
}

/// "Fields dropped from an apply are removed when no other manager owns them": kubectl
/// drops `b` (removed) and `c` (kept: another applier owns it too, with the same value).
#[test]
fn apply_removes_dropped_fields() {
    let cm = |data: Value| test_cm(data);
    run(
        &configmap_schema(),
        vec![
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: cm(json!({"a": "1", "b": "2", "c": "3"})),
                want: Ok((
                    json!({"a": "1", "b": "2", "c": "3"}),
                    vec![m(
                        "kubectl",
                        "Apply",
                        r#"{"f:data":{"f:a":{},"f:b":{},"f:c":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}"#,
                    )],
                )),
            },
            // Applying a value already there changes nothing: the entry gets no time, and
            // entries without one sort first, as upstream sorts them.
            Step {
                manager: "other",
                apply: Some(false),
                body: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm"}, "data": {"c": "3"}}),
                want: Ok((
                    json!({"a": "1", "b": "2", "c": "3"}),
                    vec![
                        m("other", "Apply", r#"{"f:data":{"f:c":{}}}"#),
                        m(
                            "kubectl",
                            "Apply",
                            r#"{"f:data":{"f:a":{},"f:b":{},"f:c":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}"#,
                        ),
                    ],
                )),
            },
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: cm(json!({"a": "1"})),
                want: Ok((
                    json!({"a": "1", "c": "3"}),
                    vec![
                        m("other", "Apply", r#"{"f:data":{"f:c":{}}}"#),
                        m("kubectl", "Apply", r#"{"f:data":{"f:a":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}"#),
                    ],
                )),
            },
            // Dropping all of `data`'s own keys: `data` keeps only what `other` owns.
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm"}}),
                want: Ok((json!({"c": "3"}), vec![m("other", "Apply", r#"{"f:data":{"f:c":{}}}"#)])),
            },
        ],
        "data",
    );
}

/// Dropping every applied field of a map drops the map itself.
#[test]
fn apply_drops_emptied_struct_fields() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let w = writer("kubectl", "v1", T0, &none);
    let first = apply(&s, None, &test_cm(json!({"a": "1"})), &w, false).unwrap();
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm", "labels": {"test-label": "test"}}});
    let second = apply(&s, Some(&first.object), &cfg, &w, false).unwrap();
    assert_eq!(second.object.get("data"), None);
    // Without any metadata in the configuration: the labels go, the name stays.
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}});
    let third = apply(&s, Some(&second.object), &bare, &w, false).unwrap();
    assert_eq!(
        third.object["metadata"],
        json!({"name": "test-cm", "namespace": "default", "managedFields": third.object["metadata"]["managedFields"]})
    );
    assert_eq!(managed(&third.object), [m("kubectl", "Apply", r#"{"f:data":{"f:a":{}}}"#)]);
    assert_eq!(managed(&second.object), [m("kubectl", "Apply", r#"{"f:metadata":{"f:labels":{"f:test-label":{}}}}"#)]);
}

/// The page's "Transferring ownership" between a user and the HorizontalPodAutoscaler:
/// once the controller's update owns `spec.replicas`, the user drops it from the
/// configuration and the controller's value stays.
#[test]
fn apply_transfers_ownership_to_a_controller() {
    let deploy = |spec: Value| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx-deployment"}, "spec": spec});
    let containers = json!([{"name": "nginx", "image": "nginx:1.14.2"}]);
    let user_all =
        r#"{"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{"f:image":{},"f:name":{},".":{}}},"f:replicas":{}}}"#;
    let user_no_replicas =
        r#"{"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{"f:image":{},"f:name":{},".":{}}}}}"#;
    run(
        &deployment_schema(),
        vec![
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: deploy(json!({"replicas": 3, "containers": containers})),
                want: Ok((json!({"replicas": 3, "containers": containers}), vec![m("kubectl", "Apply", user_all)])),
            },
            Step {
                manager: "kube-controller-manager",
                apply: None,
                body: deploy(json!({"replicas": 5, "containers": containers})),
                want: Ok((
                    json!({"replicas": 5, "containers": containers}),
                    vec![
                        m("kubectl", "Apply", user_no_replicas),
                        m("kube-controller-manager", "Update", r#"{"f:spec":{"f:replicas":{}}}"#),
                    ],
                )),
            },
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: deploy(json!({"containers": containers})),
                want: Ok((
                    json!({"replicas": 5, "containers": containers}),
                    vec![
                        m("kubectl", "Apply", user_no_replicas),
                        m("kube-controller-manager", "Update", r#"{"f:spec":{"f:replicas":{}}}"#),
                    ],
                )),
            },
            Step {
                manager: "kubectl",
                apply: Some(false),
                body: deploy(json!({"replicas": 3, "containers": containers})),
                want: Err(
                    r#"Apply failed with 1 conflict: conflict with "kube-controller-manager" using apps/v1: .spec.replicas"#,
                ),
            },
        ],
        "spec",
    );
}

/// Merge strategies: two appliers share a map list and a set item by item; an atomic list
/// or map belongs to one manager as a whole.
#[test]
fn apply_merge_strategies_between_managers() {
    let d =
        |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec});
    run(
        &deployment_schema(),
        vec![
            Step {
                manager: "a",
                apply: Some(false),
                body: d(
                    json!({"containers": [{"name": "x", "image": "1"}], "finalizers": ["f1"], "args": ["-v"], "selector": {"matchLabels": {"k": "v"}}}),
                ),
                want: Ok((
                    json!({"containers": [{"name": "x", "image": "1"}], "finalizers": ["f1"], "args": ["-v"], "selector": {"matchLabels": {"k": "v"}}}),
                    vec![m(
                        "a",
                        "Apply",
                        r#"{"f:spec":{"f:args":{},"f:containers":{"k:{\"name\":\"x\"}":{"f:image":{},"f:name":{},".":{}}},"f:finalizers":{"v:\"f1\"":{}},"f:selector":{}}}"#,
                    )],
                )),
            },
            Step {
                manager: "b",
                apply: Some(false),
                body: d(json!({"containers": [{"name": "y", "image": "2"}], "finalizers": ["f2"]})),
                want: Ok((
                    json!({"containers": [{"name": "x", "image": "1"}, {"name": "y", "image": "2"}], "finalizers": ["f1", "f2"], "args": ["-v"], "selector": {"matchLabels": {"k": "v"}}}),
                    vec![
                        m(
                            "a",
                            "Apply",
                            r#"{"f:spec":{"f:args":{},"f:containers":{"k:{\"name\":\"x\"}":{"f:image":{},"f:name":{},".":{}}},"f:finalizers":{"v:\"f1\"":{}},"f:selector":{}}}"#,
                        ),
                        m(
                            "b",
                            "Apply",
                            r#"{"f:spec":{"f:containers":{"k:{\"name\":\"y\"}":{"f:image":{},"f:name":{},".":{}}},"f:finalizers":{"v:\"f2\"":{}}}}"#,
                        ),
                    ],
                )),
            },
            // An atomic list and an atomic map are wholes: changing one item conflicts.
            Step {
                manager: "b",
                apply: Some(false),
                body: d(
                    json!({"containers": [{"name": "y", "image": "2"}], "finalizers": ["f2"], "args": ["-v", "-q"], "selector": {"matchLabels": {"k": "v", "l": "w"}}}),
                ),
                want: Err("Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.args\n- .spec.selector"),
            },
            // a drops its items: they go, b's stay.
            Step {
                manager: "a",
                apply: Some(false),
                body: d(json!({"args": ["-v"]})),
                want: Ok((
                    json!({"containers": [{"name": "y", "image": "2"}], "finalizers": ["f2"], "args": ["-v"]}),
                    vec![
                        m("a", "Apply", r#"{"f:spec":{"f:args":{}}}"#),
                        m(
                            "b",
                            "Apply",
                            r#"{"f:spec":{"f:containers":{"k:{\"name\":\"y\"}":{"f:image":{},"f:name":{},".":{}}},"f:finalizers":{"v:\"f2\"":{}}}}"#,
                        ),
                    ],
                )),
            },
        ],
        "spec",
    );
}

/// The 409 body: reason Conflict, one `FieldManagerConflict` cause per field, managers
/// named as upstream names them.
#[test]
fn apply_conflict_status() {
    let path = |names: &[&str]| Path::fields(names);
    let conflicts = vec![
        Conflict { manager: "\"kubectl\"".into(), path: path(&["data", "a"]) },
        Conflict { manager: "\"ctrl\" with subresource \"status\" using v1".into(), path: path(&["status", "x"]) },
    ];
    let status = conflict_status(&conflicts);
    assert_eq!(status["code"], 409);
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 2 conflicts: conflicts with \"ctrl\" with subresource \"status\" using v1:\n- .status.x\nconflicts with \"kubectl\":\n- .data.a"
    );
    assert_eq!(
        status["details"]["causes"],
        json!([
            {"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".data.a"},
            {"reason": "FieldManagerConflict", "message": "conflict with \"ctrl\" with subresource \"status\" using v1", "field": ".status.x"},
        ])
    );
    let entry = ManagedEntry {
        manager: "ctrl".into(),
        operation: Operation::Update,
        api_version: "apps/v1".into(),
        time: None,
        subresource: "scale".into(),
        fields: FieldSet::new(),
    };
    assert_eq!(entry.display(), "\"ctrl\" with subresource \"scale\" using apps/v1");
}

/// An apply that changes nothing keeps the entry's time; one that changes something, or an
/// update that takes fields, sets it.
#[test]
fn apply_times() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let first = apply(&s, None, &test_cm(json!({"k": "v"})), &writer("kubectl", "v1", T0, &none), false).unwrap();
    let again = apply(&s, Some(&first.object), &test_cm(json!({"k": "v"})), &writer("kubectl", "v1", T1, &none), false)
        .unwrap();
    assert!(!again.changed);
    assert_eq!(again.object["metadata"]["managedFields"][0]["time"], T0);
    let changed =
        apply(&s, Some(&first.object), &test_cm(json!({"k": "w"})), &writer("kubectl", "v1", T1, &none), false)
            .unwrap();
    assert!(changed.changed);
    assert_eq!(changed.object["metadata"]["managedFields"][0]["time"], T1);
}

/// Bad input: managedFields in the configuration, list items without their key, unreadable
/// managedFields on the live object.
#[test]
fn apply_bad_requests() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let w = writer("kubectl", "v1", T0, &none);
    let mut cfg = test_cm(json!({"k": "v"}));
    cfg["metadata"]["managedFields"] =
        json!([{"manager": "x", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
    assert!(
        matches!(apply(&s, None, &cfg, &w, false), Err(ApplyError::BadRequest(m)) if m == "metadata.managedFields must be nil")
    );
    let cfg = json!({"apiVersion": "v1", "metadata": {"name": "x", "ownerReferences": [{"name": "no uid"}]}});
    assert!(
        matches!(apply(&s, None, &cfg, &w, false), Err(ApplyError::BadRequest(m)) if m.contains("omits key field \"uid\""))
    );
    let mut live = test_cm(json!({"k": "v"}));
    live["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Patch", "fieldsType": "FieldsV1"}]);
    assert!(matches!(apply(&s, Some(&live), &test_cm(json!({})), &w, false), Err(ApplyError::BadRequest(_))));
    assert!(matches!(apply(&s, None, &json!([1]), &w, false), Err(ApplyError::BadRequest(_))));
    let other_version = json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}});
    assert!(matches!(apply(&s, None, &other_version, &w, false), Err(ApplyError::BadRequest(m))
        if m == "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1"));
}

/// An update whose object carries edited managedFields (kubectl's move from client-side to
/// server-side apply renames the manager with a JSON patch): those entries are used.
#[test]
fn apply_update_takes_edited_managed_fields() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let created = update(&s, None, test_cm(json!({"k": "v"})), &writer("kubectl-client-side-apply", "v1", T0, &none));
    let mut edited = created.object.clone();
    edited["metadata"]["managedFields"][0]["manager"] = json!("kubectl");
    edited["metadata"]["managedFields"][0]["operation"] = json!("Apply");
    let out = update(&s, Some(&created.object), edited, &writer("kubectl-patch", "v1", T1, &none));
    assert_eq!(
        managed(&out.object),
        [m("kubectl", "Apply", r#"{"f:data":{"f:k":{},".":{}},"f:metadata":{"f:labels":{"f:test-label":{},".":{}}}}"#)]
    );
    // kubectl now applies a different value without a conflict: the fields are its own.
    let next =
        apply(&s, Some(&out.object), &test_cm(json!({"k": "w"})), &writer("kubectl", "v1", T1, &none), false).unwrap();
    assert_eq!(next.object["data"], json!({"k": "w"}));
}

/// Fields the strategy resets (status on the main resource) are never owned by the write
/// and never conflict, whoever owns them.
#[test]
fn apply_reset_fields_not_owned() {
    let s = deployment_schema();
    let none = FieldSet::new();
    let mut reset = FieldSet::new();
    reset.insert(&Path::fields(&["spec", "replicas"]));
    let live = json!({"apiVersion": "v1", "metadata": {"name": "t"}, "spec": {"replicas": 5}});
    let live = update(&s, None, live, &writer("ctrl", "v1", T0, &none)).object;
    let cfg = json!({"apiVersion": "v1", "metadata": {"name": "t"}, "spec": {"replicas": 2, "args": ["a"]}});
    let out = apply(&s, Some(&live), &cfg, &writer("kubectl", "v1", T0, &reset), false).unwrap();
    assert_eq!(
        managed(&out.object),
        [
            m("kubectl", "Apply", r#"{"f:spec":{"f:args":{}}}"#),
            m("ctrl", "Update", r#"{"f:spec":{"f:replicas":{},".":{}}}"#)
        ]
    );
}

/// Beyond ten Update entries the oldest of an API version are merged into
/// `ancient-changes`.
#[test]
fn apply_caps_update_managers() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let mut obj = update(&s, None, test_cm(json!({})), &writer("creator", "v1", "2026-01-01T00:00:00Z", &none)).object;
    let times: Vec<String> = (1..=11).map(|i| format!("2026-01-01T00:{i:02}:00Z")).collect();
    for (i, t) in times.iter().enumerate() {
        let mut next = obj.clone();
        next["data"][format!("k{i}")] = json!("v");
        obj = update(&s, Some(&obj), next, &writer(&format!("m{i:02}"), "v1", t, &none)).object;
    }
    let entries = decode_managed_fields(&obj).unwrap();
    assert_eq!(entries.len(), managed::MAX_UPDATE_MANAGERS);
    let names: Vec<&str> = entries.iter().map(|e| e.manager.as_str()).collect();
    assert_eq!(names, ["ancient-changes", "m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10"]);
    // The bucket holds the creator's, m00's and m01's fields, with m01's time.
    assert_eq!(entries[0].time.as_deref(), Some("2026-01-01T00:02:00Z"));
    assert_eq!(
        entries[0].fields.to_fields_v1_string(),
        r#"{"f:data":{"f:k0":{},"f:k1":{},".":{}},"f:metadata":{"f:labels":{"f:test-label":{},".":{}}}}"#
    );
}

/// Which entries an Update starts from: `[{}]` clears them (the reference page's way to
/// strip managedFields), and so does a written `[]` (upstream's `isResetManagedFields`; a Go
/// client's empty list is left out of its body, which clears nothing); a subresource write
/// ignores the body's.
#[test]
fn apply_update_managed_fields_sources() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let created =
        apply(&s, None, &test_cm(json!({"k": "v"})), &writer("kubectl", "v1", T0, &none), false).unwrap().object;

    let mut reset = created.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    let out = update(&s, Some(&created), reset, &writer("kubectl-patch", "v1", T1, &none));
    assert_eq!(out.object["metadata"].get("managedFields"), None);

    let mut emptied = created.clone();
    emptied["metadata"]["managedFields"] = json!([]);
    let out = update(&s, Some(&created), emptied, &writer("kubectl-patch", "v1", T1, &none));
    assert_eq!(out.object["metadata"].get("managedFields"), None);

    let mut left_out = created.clone();
    left_out["metadata"].as_object_mut().unwrap().remove("managedFields");
    let out = update(&s, Some(&created), left_out, &writer("kubectl-patch", "v1", T1, &none));
    assert_eq!(managed(&out.object), managed(&created));

    let mut forged = created.clone();
    forged["metadata"]["managedFields"][0]["manager"] = json!("someone-else");
    let status = Writer { subresource: "status", ..writer("ctrl", "v1", T1, &none) };
    let out = update(&s, Some(&created), forged, &status);
    assert_eq!(managed(&out.object), managed(&created));
}

/// An Update that deletes a field takes it from its owner; one that cannot be read with the
/// schema (a list item without its key) drops managedFields instead of failing the write.
#[test]
fn apply_update_removals_and_unreadable_objects() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let created = apply(&s, None, &test_cm(json!({"a": "1", "b": "2"})), &writer("kubectl", "v1", T0, &none), false)
        .unwrap()
        .object;
    let mut edited = created.clone();
    edited["data"].as_object_mut().unwrap().remove("b");
    let out = update(&s, Some(&created), edited, &writer("kubectl-edit", "v1", T1, &none));
    assert_eq!(
        managed(&out.object),
        [m("kubectl", "Apply", r#"{"f:data":{"f:a":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}"#)]
    );

    let mut bad = created.clone();
    bad["metadata"]["ownerReferences"] = json!([{"name": "no uid"}]);
    let out = update(&s, Some(&created), bad.clone(), &writer("kubectl-edit", "v1", T1, &none));
    assert_eq!(out.object["metadata"].get("managedFields"), None);
    assert_eq!(out.object["metadata"]["ownerReferences"], bad["metadata"]["ownerReferences"]);
}

/// A writer with neither `fieldManager` nor User-Agent has no manager: its entry leaves the key
/// out (Go's `omitempty`), so JSON and protobuf answers agree, and reads back as "".
#[test]
fn an_empty_manager_is_left_out() {
    let entry = managed::ManagedEntry {
        manager: String::new(),
        operation: managed::Operation::Update,
        api_version: "v1".into(),
        time: None,
        subresource: String::new(),
        fields: FieldSet::new(),
    };
    let v = entry.to_value();
    assert!(v.get("manager").is_none(), "{v}");
    assert_eq!(v["operation"], "Update");
    let back = managed::ManagedEntry::from_value(&v).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.manager, "");
    let named = managed::ManagedEntry { manager: "kubectl".into(), ..back };
    assert_eq!(named.to_value()["manager"], "kubectl");
}
