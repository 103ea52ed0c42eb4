//! events.k8s.io/v1 Events and the served API level (1.37) against the real binary: raw HTTP
//! as client-go's `tools/events` recorder speaks it (POST, then a strategic-merge PATCH of the
//! series), the same objects read and written through core/v1, validation, selectors, patch
//! types and server-side apply, watch, discovery and OpenAPI; kubectl (the default one and
//! every older one beside it: 1.27 to 1.33) and the Python client's `EventsV1Api`.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{assert_status, run_bounded, send, shared, unique, Server, WatchLines};
use serde_json::{json, Value};

const STRATEGIC: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

fn micro_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// An Event as client-go's recorder (`tools/events`) makes it for a Pod.
fn recorder_event(ns: &str, name: &str, pod: &str) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "eventTime": micro_now(),
        "reportingController": "default-scheduler", "reportingInstance": "default-scheduler-node-1",
        "action": "Binding", "reason": "Scheduled",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod, "uid": "0b8d8a4e-1b1c-4c1e-9a3a-2f4b7d2c9e11"},
        "note": format!("Successfully assigned {ns}/{pod} to node-1"),
        "type": "Normal",
    })
}

fn events_url(s: &Server, ns: &str) -> String {
    format!("{}/apis/events.k8s.io/v1/namespaces/{ns}/events", s.url)
}

fn core_url(s: &Server, ns: &str) -> String {
    format!("{}/api/v1/namespaces/{ns}/events", s.url)
}

fn causes(reply: &common::Reply) -> Vec<(String, String)> {
    reply.body["details"]["causes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (c["field"].as_str().unwrap_or("").to_string(), c["message"].as_str().unwrap_or("").to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_discovery_and_openapi_serve_1_37_and_events_k8s_io() {
    let s = shared();
    let http = s.http();
    let v = send(http.get(format!("{}/version", s.url))).await;
    v.expect_code(200, "/version");
    assert_eq!((v.body["major"].as_str(), v.body["minor"].as_str()), (Some("1"), Some("37")), "{}", v.text);
    assert_eq!(v.body["emulationMinor"], "37", "{}", v.text);
    assert_eq!(v.body["minCompatibilityMinor"], "36", "{}", v.text);
    assert!(v.body["gitVersion"].as_str().unwrap_or("").starts_with("v1.37."), "{}", v.text);

    let groups = send(http.get(format!("{}/apis", s.url))).await;
    let group = groups.body["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["name"] == "events.k8s.io"))
        .cloned()
        .unwrap_or_else(|| panic!("events.k8s.io missing from /apis: {}", groups.text));
    assert_eq!(group["preferredVersion"]["groupVersion"], "events.k8s.io/v1");
    send(http.get(format!("{}/apis/events.k8s.io", s.url))).await.expect_code(200, "/apis/events.k8s.io");

    let list = send(http.get(format!("{}/apis/events.k8s.io/v1", s.url))).await;
    list.expect_code(200, "/apis/events.k8s.io/v1");
    let res = &list.body["resources"][0];
    assert_eq!(res["name"], "events", "{}", list.text);
    assert_eq!((res["kind"].as_str(), res["namespaced"].as_bool()), (Some("Event"), Some(true)));
    assert_eq!(res["shortNames"], json!(["ev"]));
    let core = send(http.get(format!("{}/api/v1", s.url))).await;
    let core_events = core.body["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == "events"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(res["storageVersionHash"], core_events["storageVersionHash"], "both are stored as core/v1 Events");

    let aggregated = send(
        http.get(format!("{}/apis", s.url))
            .header("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
    )
    .await;
    let item = aggregated.body["items"]
        .as_array()
        .and_then(|is| is.iter().find(|i| i["metadata"]["name"] == "events.k8s.io"))
        .cloned()
        .unwrap_or_else(|| panic!("events.k8s.io missing from aggregated discovery: {}", aggregated.text));
    assert_eq!(item["versions"][0]["resources"][0]["responseKind"]["kind"], "Event");

    let index = send(http.get(format!("{}/openapi/v3", s.url))).await;
    let link = index.body["paths"]["apis/events.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("no OpenAPI v3 document for events.k8s.io/v1: {}", index.text))
        .to_string();
    let doc = send(http.get(format!("{}{link}", s.url))).await;
    let schema = &doc.body["components"]["schemas"]["io.k8s.api.events.v1.Event"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "events.k8s.io", "kind": "Event", "version": "v1"}]),
        "{}",
        &doc.text[..doc.text.len().min(2000)]
    );
    assert!(schema["properties"]["regarding"].is_object() && schema["properties"]["note"].is_object());
    let v2 = send(http.get(format!("{}/openapi/v2", s.url)).header("Accept", "application/json")).await;
    assert!(v2.body["definitions"]["io.k8s.api.events.v1.Event"].is_object(), "OpenAPI v2 has the Event");
    assert!(v2.body["paths"]["/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}"].is_object());
    assert_eq!(v2.body["info"]["version"], "v1.37.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_posts_and_patches_a_series_read_through_core_and_watched() {
    let s = shared();
    let ns = s.create_namespace("evrec").await;
    let http = s.http();
    let mut watch = WatchLines::open(http.get(format!("{}?watch=1", events_url(&s, &ns)))).await;
    assert_eq!(watch.code, 200);

    let name = "web.17a5c0ffee000001";
    let created = send(http.post(events_url(&s, &ns)).json(&recorder_event(&ns, name, "web"))).await;
    created.expect_code(201, "the recorder's POST");
    assert_eq!(created.body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created.body["regarding"]["name"], "web");
    let rv = created.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();

    // The same object through core/v1, with core's field names.
    let core = send(http.get(format!("{}/{name}", core_url(&s, &ns)))).await;
    core.expect_code(200, "reading the event through core/v1");
    assert_eq!(core.body["apiVersion"], "v1");
    assert_eq!(core.body["involvedObject"]["name"], "web");
    assert_eq!(core.body["message"], format!("Successfully assigned {ns}/web to node-1"));
    assert_eq!(core.body["reportingComponent"], "default-scheduler");
    assert_eq!(core.body["metadata"]["resourceVersion"], rv.as_str());
    assert!(core.body.get("regarding").is_none() && core.body.get("note").is_none(), "{}", core.text);

    // The recorder's series update: a strategic merge patch of `series`.
    let last = micro_now();
    let patched = send(
        http.patch(format!("{}/{name}", events_url(&s, &ns)))
            .header("Content-Type", STRATEGIC)
            .body(json!({"series": {"count": 2, "lastObservedTime": last}}).to_string()),
    )
    .await;
    patched.expect_code(200, "the recorder's series PATCH");
    assert_eq!(patched.body["series"]["count"], 2);
    let core = send(http.get(format!("{}/{name}", core_url(&s, &ns)))).await;
    assert_eq!(core.body["series"]["count"], 2, "{}", core.text);

    let added = watch.next_non_bookmark(Duration::from_secs(10)).await.unwrap_or_default();
    assert_eq!(
        (added["type"].as_str(), added["object"]["apiVersion"].as_str()),
        (Some("ADDED"), Some("events.k8s.io/v1"))
    );
    assert_eq!(added["object"]["note"], created.body["note"]);
    let modified = watch.next_non_bookmark(Duration::from_secs(10)).await.unwrap_or_default();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["series"]["count"], 2);

    // A series that breaks the rules, and a change of what may not change: 422 with causes.
    let bad_series = send(
        http.patch(format!("{}/{name}", events_url(&s, &ns)))
            .header("Content-Type", STRATEGIC)
            .body(json!({"series": {"count": 1}}).to_string()),
    )
    .await;
    assert_status(&bad_series, 422, Some("Invalid"), "a series of one");
    // The patch merges into the stored series, so its lastObservedTime stays.
    assert_eq!(causes(&bad_series), vec![("series.count".into(), "Invalid value: \"\": should be at least 2".into())]);
    let immutable = send(
        http.patch(format!("{}/{name}", events_url(&s, &ns)))
            .header("Content-Type", MERGE)
            .body(json!({"note": "changed", "reason": "Other"}).to_string()),
    )
    .await;
    assert_status(&immutable, 422, Some("Invalid"), "changing note and reason");
    let fields: Vec<String> = causes(&immutable).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["reason", "message", "reason"], "{}", immutable.text);
    assert!(immutable.body["message"].as_str().unwrap_or("").contains("field is immutable"), "{}", immutable.text);
    // Through core/v1 only the legacy rules apply: the message may change, and shows as the note.
    let core_patch = send(
        http.patch(format!("{}/{name}", core_url(&s, &ns)))
            .header("Content-Type", MERGE)
            .body(json!({"message": "rewritten through core"}).to_string()),
    )
    .await;
    core_patch.expect_code(200, "a core/v1 merge patch of the message");
    let got = send(http.get(format!("{}/{name}", events_url(&s, &ns)))).await;
    assert_eq!(got.body["note"], "rewritten through core");

    // Delete through events.k8s.io: gone through core too, and watched.
    let del = send(http.delete(format!("{}/{name}", events_url(&s, &ns)))).await;
    del.expect_code(200, "delete through events.k8s.io");
    let gone = send(http.get(format!("{}/{name}", core_url(&s, &ns)))).await;
    assert_status(&gone, 404, Some("NotFound"), "the core/v1 view after the delete");
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let ev = watch.next_non_bookmark(Duration::from_secs(10)).await.unwrap_or_default();
        kinds.push(ev["type"].as_str().unwrap_or("").to_string());
        if ev["type"] == "DELETED" {
            assert_eq!(ev["object"]["apiVersion"], "events.k8s.io/v1");
            break;
        }
    }
    assert_eq!(kinds.last().map(String::as_str), Some("DELETED"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_selectors_patches_and_apply_through_events_k8s_io() {
    let s = shared();
    let ns = s.create_namespace("evval").await;
    let http = s.http();

    // Upstream's strict create rules of events.k8s.io/v1.
    let mut bad = recorder_event(&ns, "bad", "web");
    let m = bad.as_object_mut().expect("an object");
    m.remove("eventTime");
    m.insert("type".into(), json!("Info"));
    m.insert("deprecatedCount".into(), json!(3));
    m.insert("reportingController".into(), json!("my-contr@ller"));
    let r = send(http.post(events_url(&s, &ns)).json(&bad)).await;
    assert_status(&r, 422, Some("Invalid"), "an event breaking the events.k8s.io rules");
    let fields: Vec<String> = causes(&r).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["eventTime", "type", "count"], "{}", r.text);
    assert_eq!(r.body["details"]["group"], "events.k8s.io");
    assert_eq!(r.body["details"]["kind"], "Event");
    // A new-style event names its reporter.
    let mut bad = recorder_event(&ns, "bad2", "web");
    bad["reportingController"] = json!("my-contr@ller");
    let r = send(http.post(events_url(&s, &ns)).json(&bad)).await;
    assert_status(&r, 422, Some("Invalid"), "a reportingController that is no qualified name");
    assert_eq!(causes(&r).first().map(|(f, _)| f.as_str()), Some("reportingController"), "{}", r.text);

    // An old-style event written through core/v1 reads through events.k8s.io.
    let core_event = json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "old.1", "namespace": ns},
        "involvedObject": {"kind": "ConfigMap", "namespace": ns, "name": "settings"},
        "reason": "Updated", "message": "settings changed", "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2024-05-01T11:00:00Z", "lastTimestamp": "2024-05-01T11:05:00Z", "count": 3,
    });
    send(http.post(core_url(&s, &ns)).json(&core_event)).await.expect_code(201, "a core/v1 event");
    let got = send(http.get(format!("{}/old.1", events_url(&s, &ns)))).await;
    got.expect_code(200, "the core/v1 event through events.k8s.io");
    assert_eq!(got.body["regarding"]["name"], "settings");
    assert_eq!(got.body["note"], "settings changed");
    assert_eq!(got.body["deprecatedSource"], json!({"component": "kubelet", "host": "node-1"}));
    assert_eq!(got.body["deprecatedCount"], 3);
    assert_eq!(got.body["deprecatedFirstTimestamp"], "2024-05-01T11:00:00Z");
    assert_eq!(got.body["deprecatedLastTimestamp"], "2024-05-01T11:05:00Z");
    assert!(got.body.get("involvedObject").is_none() && got.body.get("message").is_none(), "{}", got.text);
    send(http.post(events_url(&s, &ns)).json(&recorder_event(&ns, "new.1", "web"))).await.expect_code(201, "new");

    // Lists, with upstream's events.k8s.io field labels (core's names).
    let all = send(http.get(events_url(&s, &ns))).await;
    assert_eq!(all.body["kind"], "EventList");
    assert_eq!(all.body["apiVersion"], "events.k8s.io/v1");
    let names: Vec<&str> = all.body["items"]
        .as_array()
        .map(|is| is.iter().filter_map(|i| i["metadata"]["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["new.1", "old.1"]);
    assert!(all.body["items"].as_array().is_some_and(|is| is.iter().all(|i| i.get("involvedObject").is_none())));
    for (selector, want) in [
        ("involvedObject.name=settings", vec!["old.1"]),
        ("involvedObject.kind=Pod", vec!["new.1"]),
        ("reportingComponent=default-scheduler", vec!["new.1"]),
        ("source=kubelet", vec!["old.1"]),
        ("type=Warning,reason=Updated", vec!["old.1"]),
    ] {
        let r = send(http.get(events_url(&s, &ns)).query(&[("fieldSelector", selector)])).await;
        r.expect_code(200, selector);
        let got: Vec<&str> = r.body["items"]
            .as_array()
            .map(|is| is.iter().filter_map(|i| i["metadata"]["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(got, want, "{selector}");
    }
    let r = send(http.get(events_url(&s, &ns)).query(&[("fieldSelector", "regarding.name=web")])).await;
    assert_status(&r, 400, Some("BadRequest"), "a field label upstream does not support");
    assert!(r.text.contains("field label not supported: regarding.name"), "{}", r.text);

    // Merge, JSON and strategic patches of what may change.
    let url = format!("{}/new.1", events_url(&s, &ns));
    let r = send(http.patch(&url).header("Content-Type", MERGE).body(r#"{"metadata":{"labels":{"a":"1"}}}"#)).await;
    r.expect_code(200, "merge patch");
    let r = send(
        http.patch(&url)
            .header("Content-Type", JSON_PATCH)
            .body(r#"[{"op":"add","path":"/metadata/labels/b","value":"2"}]"#),
    )
    .await;
    r.expect_code(200, "JSON patch");
    let r = send(http.patch(&url).header("Content-Type", STRATEGIC).body(r#"{"metadata":{"labels":{"c":"3"}}}"#)).await;
    r.expect_code(200, "strategic merge patch");
    assert_eq!(r.body["metadata"]["labels"], json!({"a": "1", "b": "2", "c": "3"}));

    // Server-side apply creates, and owns the fields under events.k8s.io/v1.
    let mut applied = recorder_event(&ns, "applied.1", "db");
    applied["metadata"]["labels"] = json!({"team": "x"});
    let r = send(
        http.patch(format!("{}/applied.1", events_url(&s, &ns)))
            .query(&[("fieldManager", "event-applier")])
            .header("Content-Type", APPLY)
            .body(applied.to_string()),
    )
    .await;
    r.expect_code(201, "server-side apply creating an event");
    let mf = &r.body["metadata"]["managedFields"][0];
    assert_eq!((mf["manager"].as_str(), mf["operation"].as_str()), (Some("event-applier"), Some("Apply")));
    assert_eq!(mf["apiVersion"], "events.k8s.io/v1");
    assert!(mf["fieldsV1"]["f:note"].is_object(), "{}", r.text);
    let core = send(http.get(format!("{}/applied.1", core_url(&s, &ns)))).await;
    assert_eq!(core.body["involvedObject"]["name"], "db");

    // deletecollection through events.k8s.io empties the core/v1 list too.
    send(http.delete(events_url(&s, &ns))).await.expect_code(200, "deletecollection");
    let left = send(http.get(core_url(&s, &ns))).await;
    assert_eq!(left.body["items"], json!([]), "{}", left.text);
}

fn kubectl_dir() -> PathBuf {
    let path = which_kubectl();
    let real = std::fs::canonicalize(&path).unwrap_or(path);
    real.parent().map(PathBuf::from).unwrap_or_default()
}

fn which_kubectl() -> PathBuf {
    common::ensure_kubectl();
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("kubectl is not on PATH"))
}

/// `kubectl` at `bin` with the admin kubeconfig and a cache of its own.
fn kubectl_at(s: &Server, bin: &PathBuf, args: &[&str]) -> (bool, String, String) {
    let version = bin.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let mut cmd = Command::new(bin);
    cmd.arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .arg("--cache-dir")
        .arg(s.work_dir().join(format!("cache-{version}")))
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", s.work_dir());
    let out = run_bounded(&mut cmd, None, Duration::from_secs(60), &format!("{version} {}", args.join(" ")));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const EVENT_YAML: &str = r#"apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: NAME
  namespace: NS
eventTime: "EVENT_TIME"
reportingController: example.com/yaml-controller
reportingInstance: yaml-controller-1
action: Reconcile
reason: Synced
type: Warning
note: synced from a manifest
regarding:
  apiVersion: v1
  kind: ConfigMap
  namespace: NS
  name: settings
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_gets_and_deletes_events_k8s_io_events() {
    let s = shared();
    let ns = s.create_namespace("evctl").await;
    let name = unique("ev");
    let yaml = EVENT_YAML.replace("NAME", &name).replace("NS", &ns).replace("EVENT_TIME", &micro_now());
    let file = s.work_dir().join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("writing the manifest");
    let out = s.kubectl_ok(&["create", "-f", &file.to_string_lossy()]);
    assert!(out.contains(&format!("event.events.k8s.io/{name} created")), "{out}");

    let out = s.kubectl_ok(&["get", "events.v1.events.k8s.io", "-n", &ns]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], "{out}");
    let row = lines.next().unwrap_or_default();
    for cell in ["Warning", "Synced", "configmap/settings", "synced from a manifest"] {
        assert!(row.contains(cell), "{cell} missing from {row:?} in:\n{out}");
    }
    let wide = s.kubectl_ok(&["get", "events.v1.events.k8s.io", "-n", &ns, "-o", "wide"]);
    assert!(wide.lines().next().unwrap_or_default().contains("NAME"), "{wide}");
    assert!(wide.contains("example.com/yaml-controller, yaml-controller-1"), "{wide}");

    // The same object through core/v1, as `kubectl get events` shows it.
    let core = s.kubectl_ok(&["get", "events", "-n", &ns, &name, "-o", "json"]);
    let core: Value = serde_json::from_str(&core).expect("kubectl -o json");
    assert_eq!(core["message"], "synced from a manifest");
    assert_eq!(core["involvedObject"]["name"], "settings");

    let yaml = s.kubectl_ok(&["get", "events.v1.events.k8s.io", &name, "-n", &ns, "-o", "yaml"]);
    assert!(yaml.contains("apiVersion: events.k8s.io/v1") && yaml.contains("regarding:"), "{yaml}");
    let out = s.kubectl_ok(&["delete", "events.v1.events.k8s.io", &name, "-n", &ns]);
    assert!(out.contains(&format!("event.events.k8s.io \"{name}\" deleted")), "{out}");
    let out = s.kubectl(&["get", "events", &name, "-n", &ns]);
    assert!(!out.status.success(), "the core/v1 event is gone too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_from_1_27_reads_the_1_37_server() {
    let s = shared();
    let ns = s.create_namespace("evskew").await;
    let http = s.http();
    send(http.post(events_url(&s, &ns)).json(&recorder_event(&ns, "skew.1", "web"))).await.expect_code(201, "event");
    let dir = kubectl_dir();
    let mut bins: Vec<PathBuf> = (27..=33).map(|m| dir.join(format!("kubectl.1.{m}"))).collect();
    bins.push(which_kubectl());
    for bin in &bins {
        assert!(bin.is_file(), "{bin:?} is missing: this test drives every kubectl from 1.27 on");
        let (ok, out, err) = kubectl_at(&s, bin, &["version", "-o", "json"]);
        assert!(ok, "{bin:?} version: {err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{bin:?} version -o json ({e}): {out}"));
        assert_eq!(v["serverVersion"]["minor"], "37", "{bin:?}: {out}");
        assert!(v["serverVersion"]["gitVersion"].as_str().unwrap_or("").starts_with("v1.37."), "{out}");
        let (ok, out, err) = kubectl_at(&s, bin, &["get", "events.v1.events.k8s.io", "-n", &ns]);
        assert!(ok, "{bin:?} get events.v1.events.k8s.io: {err}");
        assert!(out.contains("Scheduled") && out.contains("pod/web"), "{bin:?}:\n{out}");
        let (ok, out, err) = kubectl_at(&s, bin, &["get", "serviceaccounts", "-n", "default"]);
        assert!(ok, "{bin:?} get serviceaccounts: {err}");
        let header: Vec<&str> = out.lines().next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(header, ["NAME", "AGE"], "{bin:?}: 1.37 prints no SECRETS column:\n{out}");
    }
}

const PYTHON: &str = r#"
import sys, datetime
from kubernetes import client, config
from kubernetes.client.rest import ApiException

kubeconfig, ns = sys.argv[1], sys.argv[2]
config.load_kube_config(config_file=kubeconfig)
core = client.CoreV1Api()
events = client.EventsV1Api()
core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))

now = datetime.datetime.now(datetime.timezone.utc)
ev = client.EventsV1Event(
    metadata=client.V1ObjectMeta(name="py.1", namespace=ns),
    event_time=now, reporting_controller="example.com/py", reporting_instance="py-1",
    action="Test", reason="Tested", type="Normal", note="from python",
    regarding=client.V1ObjectReference(api_version="v1", kind="ConfigMap", namespace=ns, name="cfg"))
created = events.create_namespaced_event(ns, ev)
assert created.note == "from python", created
assert created.regarding.name == "cfg", created.regarding

got = events.read_namespaced_event("py.1", ns)
assert got.reporting_controller == "example.com/py", got
listed = events.list_namespaced_event(ns)
assert [e.metadata.name for e in listed.items] == ["py.1"], listed.items

as_core = core.read_namespaced_event("py.1", ns)
assert as_core.message == "from python", as_core.message
assert as_core.involved_object.name == "cfg", as_core.involved_object
assert as_core.reporting_component == "example.com/py", as_core.reporting_component

series = {"series": {"count": 2, "lastObservedTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
patched = events.patch_namespaced_event("py.1", ns, series)
assert patched.series.count == 2, patched.series

bad = client.EventsV1Event(
    metadata=client.V1ObjectMeta(name="py.2", namespace=ns),
    event_time=now, reporting_controller="example.com/py", reporting_instance="py-1",
    action="Test", reason="Tested", type="Informational",
    regarding=client.V1ObjectReference(kind="ConfigMap", namespace=ns, name="cfg"))
try:
    events.create_namespaced_event(ns, bad)
    raise AssertionError("an event of type Informational was accepted")
except ApiException as e:
    assert e.status == 422, e
    assert "has invalid value: Informational" in e.body, e.body

events.delete_namespaced_event("py.1", ns)
try:
    core.read_namespaced_event("py.1", ns)
    raise AssertionError("read through core after the delete succeeded")
except ApiException as e:
    assert e.status == 404, e
core.delete_namespace(ns)
print("python events OK")
"#;

#[test]
fn the_python_clients_events_v1_api() {
    let check = Command::new("python3").args(["-c", "import kubernetes"]).output();
    match check {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the Python `kubernetes` package is not installed ({}); run the README test command \
             `bash scripts/test.sh`, which installs it",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("python3 is not runnable ({e}); run the README test command `bash scripts/test.sh`"),
    }
    let s = Server::start_apiserver();
    let script = s.work_dir().join("events_test.py");
    std::fs::write(&script, PYTHON).expect("writing the Python script");
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(&s.kubeconfig).arg(unique("pyev")).env_remove("KUBECONFIG");
    let out = run_bounded(&mut cmd, None, Duration::from_secs(120), "python3 events_test.py");
    assert!(
        out.status.success(),
        "the Python script failed ({}):\nstdout:\n{}\nstderr:\n{}\nserver log tail:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.stderr_tail()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python events OK"));
}
