//! Kubernetes protobuf end to end, as client-go (1.35 and later: protobuf bodies, Accept
//! `application/vnd.kubernetes.protobuf,application/json`) speaks it: raw HTTPS against the
//! real binary, bodies built and answers read with the project's own protobuf tables.

mod common;

use std::time::Duration;

use common::{send, shared_apiserver, Server};
use futures::StreamExt;
use kustos_apiserver::wire::protobuf;
use serde_json::{json, Value};

const PB: &str = "application/vnd.kubernetes.protobuf";
/// client-go's default Accept for typed clients.
const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const METADATA_LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const METADATA_WATCH_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const WAIT: Duration = Duration::from_secs(20);

fn cms(s: &Server, ns: &str) -> String {
    format!("{}/api/v1/namespaces/{ns}/configmaps", s.url)
}

/// An object's protobuf body (`apiVersion` and `kind` in the JSON).
fn body(obj: &Value) -> Vec<u8> {
    protobuf::encode::encode(obj).unwrap_or_else(|e| panic!("encoding {obj}: {e}"))
}

/// A protobuf answer: code, Content-Type and the decoded object.
struct Answer {
    code: u16,
    content_type: String,
    obj: Value,
}

async fn call(req: reqwest::RequestBuilder) -> Answer {
    let resp = req.send().await.expect("the request");
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let bytes = resp.bytes().await.expect("the answer");
    let obj = if content_type == PB {
        protobuf::decode(&bytes).unwrap_or_else(|e| panic!("{code} {content_type}: not protobuf: {e}: {bytes:02x?}"))
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    Answer { code, content_type, obj }
}

fn expect_pb(a: &Answer, code: u16, what: &str) {
    assert_eq!((a.code, a.content_type.as_str()), (code, PB), "{what}: {}", a.obj);
}

/// Reads protobuf watch frames (4-byte big-endian length + body) off a streaming answer.
struct Frames {
    stream: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buf: Vec<u8>,
}

impl Frames {
    async fn open(req: reqwest::RequestBuilder) -> (String, Frames) {
        let resp = req.send().await.expect("the watch");
        assert_eq!(resp.status().as_u16(), 200, "the watch opens");
        let ct = resp.headers().get("content-type").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        (
            ct.unwrap_or_default(),
            Frames { stream: resp.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed(), buf: Vec::new() },
        )
    }

    /// The next event (type, object), or None when nothing comes within `WAIT`.
    async fn next(&mut self) -> Option<(String, Value)> {
        for _ in 0..1000 {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                if self.buf.len() >= 4 + len {
                    let frame: Vec<u8> = self.buf.drain(..4 + len).collect();
                    let ev = protobuf::decode_watch_event(&frame[4..])
                        .unwrap_or_else(|e| panic!("a protobuf watch event: {e}: {frame:02x?}"));
                    return Some(ev);
                }
            }
            match tokio::time::timeout(WAIT, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
        None
    }

    async fn next_non_bookmark(&mut self) -> Option<(String, Value)> {
        for _ in 0..20 {
            match self.next().await {
                Some((t, _)) if t == "BOOKMARK" => continue,
                other => return other,
            }
        }
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_is_created_read_listed_and_deleted_in_protobuf() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pb").await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "one", "labels": {"app": "web"}},
                    "data": {"greeting": "hello"}, "binaryData": {"bin": "AAEC"}});
    // A User-Agent names the field manager (an empty manager has no protobuf form but "").
    let created = call(
        http.post(cms(&s, &ns))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .header("User-Agent", "protobuf-e2e/v0.0.0")
            .body(body(&cm)),
    )
    .await;
    expect_pb(&created, 201, "create");
    assert_eq!(created.obj["kind"], "ConfigMap");
    assert_eq!(created.obj["metadata"]["namespace"], ns.as_str(), "{}", created.obj);
    assert_eq!(created.obj["data"], cm["data"]);
    assert_eq!(created.obj["binaryData"], cm["binaryData"]);
    let uid = created.obj["metadata"]["uid"].as_str().expect("a uid").to_string();
    assert!(created.obj["metadata"]["creationTimestamp"].is_string(), "{}", created.obj);

    // GET in protobuf answers what JSON answers.
    let got = call(http.get(format!("{}/one", cms(&s, &ns))).header("Accept", CLIENT_GO_ACCEPT)).await;
    expect_pb(&got, 200, "get");
    let json_form = send(http.get(format!("{}/one", cms(&s, &ns)))).await;
    assert_eq!(got.obj, json_form.body, "protobuf and JSON forms agree");

    // LIST: a ConfigMapList with its ListMeta.
    call(http.post(cms(&s, &ns)).header("Content-Type", PB).body(body(&json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}}))))
    .await;
    let list = call(http.get(cms(&s, &ns)).header("Accept", CLIENT_GO_ACCEPT)).await;
    expect_pb(&list, 200, "list");
    assert_eq!(list.obj["kind"], "ConfigMapList");
    assert!(list.obj["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()), "{}", list.obj);
    let names: Vec<&str> =
        list.obj["items"].as_array().into_iter().flatten().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["one", "two"], "{}", list.obj);
    // Paged: the continue token travels in the ListMeta.
    let page = call(http.get(cms(&s, &ns)).query(&[("limit", "1")]).header("Accept", CLIENT_GO_ACCEPT)).await;
    expect_pb(&page, 200, "paged list");
    assert!(page.obj["metadata"]["continue"].as_str().is_some_and(|c| !c.is_empty()), "{}", page.obj);
    assert_eq!(page.obj["metadata"]["remainingItemCount"], 1, "{}", page.obj);

    // UPDATE and PATCH answers are protobuf too.
    let mut upd = got.obj.clone();
    upd["data"]["greeting"] = json!("hi");
    let updated = call(
        http.put(format!("{}/one", cms(&s, &ns)))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(body(&upd)),
    )
    .await;
    expect_pb(&updated, 200, "update");
    assert_eq!(updated.obj["data"]["greeting"], "hi");
    let patched = call(
        http.patch(format!("{}/one", cms(&s, &ns)))
            .header("Content-Type", "application/merge-patch+json")
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(r#"{"data":{"more":"yes"}}"#),
    )
    .await;
    expect_pb(&patched, 200, "patch");
    assert_eq!(patched.obj["data"]["more"], "yes");

    // DELETE with a protobuf DeleteOptions, as client-go sends it for a core-group kind.
    let wrong = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "not-the-uid"}});
    let refused = call(
        http.delete(format!("{}/one", cms(&s, &ns)))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(body(&wrong)),
    )
    .await;
    expect_pb(&refused, 409, "delete with a wrong uid precondition");
    assert_eq!(refused.obj["kind"], "Status");
    assert_eq!(refused.obj["reason"], "Conflict", "{}", refused.obj);
    assert_eq!(refused.obj["code"], 409, "{}", refused.obj);
    let opts = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid},
                      "propagationPolicy": "Background", "gracePeriodSeconds": 0});
    let deleted = call(
        http.delete(format!("{}/one", cms(&s, &ns)))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(body(&opts)),
    )
    .await;
    assert_eq!(deleted.code, 200, "delete: {}", deleted.obj);
    assert_eq!(deleted.content_type, PB);
    let gone = call(http.get(format!("{}/one", cms(&s, &ns))).header("Accept", CLIENT_GO_ACCEPT)).await;
    expect_pb(&gone, 404, "get after delete");
    assert_eq!(
        (
            gone.obj["kind"].as_str(),
            gone.obj["apiVersion"].as_str(),
            gone.obj["reason"].as_str(),
            gone.obj["code"].as_i64()
        ),
        (Some("Status"), Some("v1"), Some("NotFound"), Some(404)),
        "{}",
        gone.obj
    );
    assert_eq!(gone.obj["details"], json!({"name": "one", "kind": "configmaps"}), "{}", gone.obj);
}

/// DeleteOptions in every group's version (upstream registers it in each), and
/// deletecollection's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_options_decode_for_every_group() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pbdel").await;
    let rbac = "rbac.authorization.k8s.io/v1";
    let roles = format!("{}/apis/{rbac}/namespaces/{ns}/roles", s.url);
    let role = json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "r"},
                      "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]});
    expect_pb(
        &call(http.post(&roles).header("Content-Type", PB).header("Accept", PB).body(body(&role))).await,
        201,
        "role",
    );
    let opts = json!({"apiVersion": rbac, "kind": "DeleteOptions", "propagationPolicy": "Foreground"});
    let deleted =
        call(http.delete(format!("{roles}/r")).header("Content-Type", PB).header("Accept", PB).body(body(&opts))).await;
    assert_eq!((deleted.code, deleted.content_type.as_str()), (200, PB), "{}", deleted.obj);

    let coord = "coordination.k8s.io/v1";
    let leases = format!("{}/apis/{coord}/namespaces/{ns}/leases", s.url);
    for name in ["a", "b"] {
        let lease = json!({"apiVersion": coord, "kind": "Lease", "metadata": {"name": name},
                           "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                                    "renewTime": "2024-05-01T10:20:30.123456Z"}});
        let r = call(http.post(&leases).header("Content-Type", PB).header("Accept", PB).body(body(&lease))).await;
        expect_pb(&r, 201, "lease");
        assert_eq!(r.obj["spec"]["renewTime"], "2024-05-01T10:20:30.123456Z", "MicroTime both ways: {}", r.obj);
    }
    let opts = json!({"apiVersion": coord, "kind": "DeleteOptions", "dryRun": ["All"]});
    let r = call(http.delete(&leases).header("Content-Type", PB).header("Accept", PB).body(body(&opts))).await;
    expect_pb(&r, 200, "deletecollection, dry run");
    assert_eq!(r.obj["kind"], "LeaseList");
    assert_eq!(r.obj["items"].as_array().map(Vec::len), Some(2), "{}", r.obj);

    // The cluster-scoped kinds of the other groups.
    let cert = "certificates.k8s.io/v1";
    let csr_url = format!("{}/apis/{cert}/certificatesigningrequests/{ns}", s.url);
    let opts = json!({"apiVersion": cert, "kind": "DeleteOptions"});
    let r = call(http.delete(&csr_url).header("Content-Type", PB).header("Accept", PB).body(body(&opts))).await;
    expect_pb(&r, 404, "a missing CSR: the options decoded, the object is not there");
    assert_eq!(r.obj["reason"], "NotFound", "{}", r.obj);
    let fc = "flowcontrol.apiserver.k8s.io/v1";
    let fs_url = format!("{}/apis/{fc}/flowschemas/{ns}", s.url);
    let opts = json!({"apiVersion": fc, "kind": "DeleteOptions"});
    let r = call(http.delete(&fs_url).header("Content-Type", PB).header("Accept", PB).body(body(&opts))).await;
    expect_pb(&r, 404, "a missing FlowSchema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_watch_frames_every_event_as_upstream() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pbw").await;
    let (ct, mut w) = Frames::open(http.get(cms(&s, &ns)).header("Accept", CLIENT_GO_ACCEPT).query(&[
        ("watch", "1"),
        ("sendInitialEvents", "true"),
        ("resourceVersionMatch", "NotOlderThan"),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    assert_eq!(ct, protobuf::WATCH_MEDIA_TYPE);
    // No objects yet: the initial-events-end bookmark first.
    let (ty, obj) = w.next().await.expect("the initial-events-end bookmark");
    assert_eq!(ty, "BOOKMARK", "{obj}");
    assert_eq!(obj["kind"], "ConfigMap", "{obj}");
    assert_eq!(obj["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "{obj}");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "data": {"v": "1"}});
    let created = call(http.post(cms(&s, &ns)).header("Content-Type", PB).header("Accept", PB).body(body(&cm))).await;
    expect_pb(&created, 201, "create");
    let mut upd = created.obj.clone();
    upd["data"]["v"] = json!("2");
    expect_pb(
        &call(http.put(format!("{}/w", cms(&s, &ns))).header("Content-Type", PB).header("Accept", PB).body(body(&upd)))
            .await,
        200,
        "update",
    );
    let del = call(http.delete(format!("{}/w", cms(&s, &ns))).header("Accept", PB)).await;
    assert_eq!(del.code, 200, "{}", del.obj);
    for (want, v) in [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "2")] {
        let (ty, obj) = w.next_non_bookmark().await.expect("an event");
        assert_eq!(ty, want, "{obj}");
        assert_eq!(obj["kind"], "ConfigMap", "{obj}");
        assert_eq!(obj["apiVersion"], "v1", "{obj}");
        assert_eq!(obj["metadata"]["name"], "w", "{obj}");
        assert_eq!(obj["metadata"]["uid"], created.obj["metadata"]["uid"], "{obj}");
        assert_eq!(obj["data"]["v"], v, "{obj}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_revision_gets_a_protobuf_error_event() {
    let s = Server::apiserver_with(&["--history-revisions", "5", "--compaction-interval", "200ms"]);
    let http = s.http();
    let ns = s.create_namespace("pbe").await;
    for i in 0..20 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
        call(http.post(cms(&s, &ns)).header("Content-Type", PB).body(body(&cm))).await;
    }
    // Bounded wait for compaction to pass revision 2.
    let mut event = None;
    for _ in 0..30 {
        let (_, mut w) = Frames::open(http.get(cms(&s, &ns)).header("Accept", CLIENT_GO_ACCEPT).query(&[
            ("watch", "1"),
            ("resourceVersion", "2"),
            ("timeoutSeconds", "5"),
        ]))
        .await;
        match w.next().await {
            Some((ty, obj)) if ty == "ERROR" => {
                event = Some(obj);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let obj = event.expect("an ERROR event once revision 2 is compacted");
    assert_eq!(obj["kind"], "Status", "{obj}");
    assert_eq!(obj["code"], 410, "{obj}");
    assert_eq!(obj["reason"], "Expired", "{obj}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_list_and_watch_in_protobuf() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pbm").await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "labels": {"x": "y"}},
                    "data": {"secret-ish": "not in metadata"}});
    call(http.post(cms(&s, &ns)).header("Content-Type", PB).body(body(&cm))).await;
    let list = call(http.get(cms(&s, &ns)).header("Accept", METADATA_LIST_ACCEPT)).await;
    expect_pb(&list, 200, "metadata list");
    assert_eq!(
        (list.obj["kind"].as_str(), list.obj["apiVersion"].as_str()),
        (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
    );
    let item = &list.obj["items"][0];
    assert_eq!(item["metadata"]["labels"], json!({"x": "y"}), "{}", list.obj);
    assert!(item.get("data").is_none(), "{}", list.obj);
    let rv = list.obj["metadata"]["resourceVersion"].as_str().expect("list RV").to_string();

    let (ct, mut w) = Frames::open(http.get(cms(&s, &ns)).header("Accept", METADATA_WATCH_ACCEPT).query(&[
        ("watch", "1"),
        ("resourceVersion", rv.as_str()),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    assert_eq!(ct, protobuf::WATCH_MEDIA_TYPE);
    let patched = call(
        http.patch(format!("{}/m", cms(&s, &ns)))
            .header("Content-Type", "application/merge-patch+json")
            .body(r#"{"metadata":{"labels":{"x":"z"}}}"#),
    )
    .await;
    assert_eq!(patched.code, 200, "{}", patched.obj);
    let (ty, obj) = w.next_non_bookmark().await.expect("an event");
    assert_eq!(ty, "MODIFIED", "{obj}");
    assert_eq!(
        (obj["kind"].as_str(), obj["apiVersion"].as_str()),
        (Some("PartialObjectMetadata"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(obj["metadata"]["labels"], json!({"x": "z"}), "{obj}");
    assert!(obj.get("data").is_none(), "{obj}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_has_no_protobuf_form() {
    let s = shared_apiserver();
    let http = s.http();
    let group = format!("{}.pb.example.com", common::unique("g"));
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}}}}}}]}});
    // The CRD itself is a built-in kind: sent and answered in protobuf.
    let created = call(
        http.post(format!("{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", s.url))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(body(&crd)),
    )
    .await;
    expect_pb(&created, 201, "create the CRD");
    assert_eq!(created.obj["spec"]["versions"][0]["schema"], crd["spec"]["versions"][0]["schema"], "{}", created.obj);
    let ns = s.create_namespace("pbcr").await;
    let url = format!("{}/apis/{group}/v1/namespaces/{ns}/gadgets", s.url);
    let gadget =
        json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"size": 2}});
    let mut made = None;
    for _ in 0..40 {
        let r = send(http.post(&url).json(&gadget)).await;
        if r.code == 201 {
            made = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(made.is_some(), "the custom resource is served");
    // client-go's protobuf-first Accept: JSON.
    let got = call(http.get(format!("{url}/g1")).header("Accept", CLIENT_GO_ACCEPT)).await;
    assert_eq!(got.code, 200, "{}", got.obj);
    assert!(got.content_type.starts_with("application/json"), "{}", got.content_type);
    assert_eq!(got.obj["spec"]["size"], 2, "{}", got.obj);
    let list = call(http.get(&url).header("Accept", CLIENT_GO_ACCEPT)).await;
    assert!(list.content_type.starts_with("application/json"), "{}", list.content_type);
    assert_eq!(list.obj["kind"], "GadgetList", "{}", list.obj);
    // Protobuf only: 406, its Status in protobuf (upstream negotiates errors apart).
    let refused = call(http.get(format!("{url}/g1")).header("Accept", PB)).await;
    expect_pb(&refused, 406, "protobuf-only Accept for a custom resource");
    assert_eq!(refused.obj["reason"], "NotAcceptable", "{}", refused.obj);
    // A protobuf body for it: 415, as upstream (custom resources take JSON and YAML).
    // (An envelope around an empty message: there is no Gadget message to encode.)
    let envelope = protobuf::encode::envelope(&format!("{group}/v1"), "Gadget", &[]);
    let unsupported =
        call(http.post(&url).header("Content-Type", PB).header("Accept", CLIENT_GO_ACCEPT).body(envelope)).await;
    assert_eq!(unsupported.code, 415, "{}", unsupported.obj);
    assert_eq!(unsupported.obj["reason"], "UnsupportedMediaType", "{}", unsupported.obj);
    // Its metadata is served in protobuf, as for every kind.
    let meta = call(http.get(&url).header("Accept", METADATA_LIST_ACCEPT)).await;
    expect_pb(&meta, 200, "metadata list of custom resources");
    assert_eq!(meta.obj["items"][0]["metadata"]["name"], "g1", "{}", meta.obj);
    let del = call(
        http.delete(format!("{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{group}", s.url))
            .header("Accept", CLIENT_GO_ACCEPT),
    )
    .await;
    expect_pb(&del, 200, "delete the CRD");
}

/// client-go's `tools/events` recorder (1.35 and later) posts events.k8s.io/v1 Events in
/// protobuf and patches their series: the Event is stored once and read through core/v1 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_k8s_io_event_is_recorded_in_protobuf() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pbev").await;
    let url = format!("{}/apis/events.k8s.io/v1/namespaces/{ns}/events", s.url);
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "pod-a.1"},
        "eventTime": "2026-11-26T03:00:00.123456Z",
        "reportingController": "kustos.dev/e2e", "reportingInstance": "e2e-1",
        "action": "Binding", "reason": "Scheduled", "type": "Normal",
        "note": "assigned pod-a to node-1",
        "regarding": {"kind": "Pod", "namespace": ns, "name": "pod-a", "apiVersion": "v1"},
    });
    let created = call(
        http.post(&url)
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .header("User-Agent", "protobuf-e2e/v0.0.0")
            .body(body(&ev)),
    )
    .await;
    expect_pb(&created, 201, "create the event");
    assert_eq!(created.obj["kind"], "Event");
    assert_eq!(created.obj["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created.obj["note"], "assigned pod-a to node-1", "{}", created.obj);
    assert_eq!(created.obj["eventTime"], "2026-11-26T03:00:00.123456Z", "MicroTime keeps microseconds");
    // The same Event through core/v1, in protobuf.
    let core =
        call(http.get(format!("{}/api/v1/namespaces/{ns}/events/pod-a.1", s.url)).header("Accept", CLIENT_GO_ACCEPT))
            .await;
    expect_pb(&core, 200, "read through core/v1");
    assert_eq!(core.obj["message"], "assigned pod-a to node-1", "{}", core.obj);
    assert_eq!(core.obj["involvedObject"]["name"], "pod-a", "{}", core.obj);
    assert_eq!(core.obj["reportingComponent"], "kustos.dev/e2e", "{}", core.obj);
    // The recorder's series update is a merge patch (JSON body), answered in protobuf.
    let patched = call(
        http.patch(format!("{url}/pod-a.1"))
            .header("Content-Type", "application/merge-patch+json")
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(r#"{"series":{"count":2,"lastObservedTime":"2026-11-26T03:00:05.000001Z"}}"#),
    )
    .await;
    expect_pb(&patched, 200, "patch the series");
    assert_eq!(patched.obj["series"]["count"], 2, "{}", patched.obj);
    assert_eq!(patched.obj["series"]["lastObservedTime"], "2026-11-26T03:00:05.000001Z", "{}", patched.obj);
    // A protobuf DeleteOptions ends it.
    let del = call(
        http.delete(format!("{url}/pod-a.1"))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(body(&json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}))),
    )
    .await;
    assert_eq!(del.code, 200, "delete: {}", del.obj);
}

/// Errors from before a handler runs (authentication, authorization) are protobuf Status too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_before_the_handler_are_protobuf_status() {
    let s = shared_apiserver();
    let r = call(
        s.anonymous().get(format!("{}/api/v1/namespaces/default/secrets", s.url)).header("Accept", CLIENT_GO_ACCEPT),
    )
    .await;
    expect_pb(&r, 403, "anonymous list of secrets");
    assert_eq!(r.obj["kind"], "Status");
    assert_eq!(r.obj["reason"], "Forbidden", "{}", r.obj);
    // A broken protobuf body: 400 BadRequest, in protobuf.
    let r = call(
        s.http()
            .post(format!("{}/api/v1/namespaces/default/configmaps", s.url))
            .header("Content-Type", PB)
            .header("Accept", CLIENT_GO_ACCEPT)
            .body(b"k8s\x00\x0a\xff".to_vec()),
    )
    .await;
    expect_pb(&r, 400, "broken body");
    assert_eq!(r.obj["reason"], "BadRequest", "{}", r.obj);
}

/// kubectl 1.33's typed clients (`create configmap`, `create token`) send protobuf and accept
/// it first: the answers (objects and error Status) are protobuf and kubectl reads them.
/// Fails loudly when `kubectl.1.33` is missing.
#[test]
fn kubectl_reads_protobuf_answers() {
    let kubectl = common::kubectl_version("1.33");
    // Some response's headers (kubectl -v=8 logs them after `"Response"`) say protobuf.
    let answered_in_protobuf = |log: &str| {
        log.split("\"Response\"")
            .skip(1)
            .any(|r| r.lines().take(10).any(|l| l.trim() == "Content-Type: application/vnd.kubernetes.protobuf"))
    };
    let s = shared_apiserver();
    let ns = common::unique("pbk");
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(&kubectl);
        cmd.arg("--kubeconfig")
            .arg(&s.kubeconfig)
            .arg("--cache-dir")
            .arg(s.work_dir().join(format!("{}-cache", common::unique("kc"))))
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", s.work_dir());
        let out = common::run_bounded(&mut cmd, None, Duration::from_secs(60), &args.join(" "));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(&["create", "namespace", &ns]);
    assert!(ok, "{stdout}\n{stderr}");
    let (ok, stdout, stderr) =
        run(&["-n", &ns, "create", "configmap", "greeting", "--from-literal=hello=world", "-v=8"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "configmap/greeting created", "{stderr}");
    assert!(answered_in_protobuf(&stderr), "no answer was protobuf:\n{stderr}");
    // A 409 Status in protobuf, its message shown as upstream's.
    let (ok, stdout, stderr) = run(&["-n", &ns, "create", "configmap", "greeting", "--from-literal=hello=again"]);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("configmaps \"greeting\" already exists"), "{stderr}");
    let (ok, stdout, stderr) = run(&["-n", &ns, "get", "configmap", "greeting", "-o", "jsonpath={.data.hello}"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "world");
    // A TokenRequest (a subresource's own kind) answered in protobuf; the apiserver runs no
    // controllers, so the ServiceAccount is made first.
    let (ok, _, stderr) = run(&["-n", &ns, "create", "serviceaccount", "builder"]);
    assert!(ok, "{stderr}");
    let (ok, stdout, stderr) = run(&["-n", &ns, "create", "token", "builder", "-v=8"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim().split('.').count(), 3, "a JWT: {stdout}");
    assert!(answered_in_protobuf(&stderr), "no answer was protobuf:\n{stderr}");
}
