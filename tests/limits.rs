//! Request resource limits end to end: bodies of a few hundred KB built to make the server
//! allocate without bound (duplicate and unknown fields under a long key, `Warning`
//! headers, self-copying JSON patches, patches nesting an object thousands of levels deep,
//! objects over etcd's request size, forged `managedFields` owning many fields below a long
//! key) are refused with a `Status`, and the server keeps serving. Each attack is sent by the
//! identity that could send it in a cluster: a node.

mod common;

use common::{assert_status, issue_user, send, shared, unique, Server};
use serde_json::{json, Value};

const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

/// A client for a fresh node identity `system:node:<name>` and the node's name.
fn node(s: &Server) -> (reqwest::Client, String) {
    let name = unique("limits-node");
    let user = issue_user(s, &format!("system:node:{name}"), &["system:nodes"]);
    (s.http_with_identity(&user.identity), name)
}

/// The server still answers: `/readyz` is 200.
async fn still_serving(s: &Server, what: &str) {
    let r = send(s.http().get(format!("{}/readyz", s.url))).await;
    assert_eq!(r.code, 200, "{what}: /readyz after the attack: {}", r.text);
}

/// `kind` with an unknown top-level field whose key is 300,000 bytes long, holding 10,000
/// distinct children each given twice: ~460 KB, 10,000 duplicate fields whose full paths
/// would be 3 GB.
fn duplicate_bomb(api_version: &str, kind: &str) -> String {
    let long = "p".repeat(300_000);
    let children: Vec<String> = (0..10_000).map(|i| format!("\"c{i}\":1,\"c{i}\":2")).collect();
    format!(
        "{{\"apiVersion\":\"{api_version}\",\"kind\":\"{kind}\",\"metadata\":{{\"generateName\":\"limits-\"}},\"{long}\":{{{}}}}}",
        children.join(",")
    )
}

/// Sum of the characters of every `Warning` header.
fn warning_chars(r: &common::Reply) -> (usize, usize) {
    let all: Vec<String> =
        r.headers.get_all("warning").iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
    (all.len(), all.iter().map(|w| w.chars().count()).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_fields_from_a_node_are_bounded() {
    let s = shared();
    let (client, _) = node(&s);
    for (what, path, api_version, kind) in [
        ("SelfSubjectReview", SSR, "authentication.k8s.io/v1", "SelfSubjectReview"),
        ("CSR create", CSRS, "certificates.k8s.io/v1", "CertificateSigningRequest"),
    ] {
        let body = duplicate_bomb(api_version, kind);
        // Strict: one 400 naming the problems, at most 100 of them, none of them huge.
        let r = send(
            client
                .post(format!("{}{path}?fieldValidation=Strict", s.url))
                .header("content-type", "application/json")
                .body(body.clone()),
        )
        .await;
        assert_status(&r, 400, Some("BadRequest"), what);
        let message = r.body["message"].as_str().unwrap_or_default();
        assert!(message.contains("strict decoding error"), "{what}: {}", &message[..message.len().min(500)]);
        assert!(message.contains("duplicate field \""), "{what}: duplicates reported");
        let reported = message.matches("duplicate field \"").count() + message.matches("unknown field \"").count();
        assert!(reported <= 100, "{what}: {reported} problems reported");
        assert!(r.text.len() < 200_000, "{what}: a {}-byte Status", r.text.len());
        still_serving(&s, what).await;
    }
    // Warn on a review (nothing is stored): the answer comes with its warnings capped.
    let r = send(
        client
            .post(format!("{}{SSR}?fieldValidation=Warn", s.url))
            .header("content-type", "application/json")
            .body(duplicate_bomb("authentication.k8s.io/v1", "SelfSubjectReview")),
    )
    .await;
    r.expect_code(201, "SelfSubjectReview with fieldValidation=Warn");
    let (count, chars) = warning_chars(&r);
    assert!(count > 0, "warnings are sent");
    // 4096 characters of text, at most one 256-character item over, plus `299 - "…"`.
    assert!(chars <= 4096 + 256 + count * 8, "{count} warnings, {chars} characters");
    still_serving(&s, "Warn").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patches_from_a_node_cannot_blow_up_its_lease() {
    let s = shared();
    let (client, name) = node(&s);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}
    });
    let r = send(client.post(format!("{}{LEASES}", s.url)).json(&lease)).await;
    r.expect_code(201, "the node creates its Lease");
    let rv = r.body["metadata"]["resourceVersion"].clone();
    let url = format!("{}{LEASES}/{name}", s.url);
    let patch =
        |ops: Value| client.patch(&url).header("content-type", "application/json-patch+json").body(ops.to_string());

    // 21 copies of the whole object into itself: 2^21 times its size without a limit.
    let copies: Vec<Value> =
        (0..21).map(|i| json!({"op": "copy", "from": "", "path": format!("/spec/x{i}")})).collect();
    assert!(Value::Array(copies.clone()).to_string().len() < 2048, "a 2 KB patch");
    let r = send(patch(Value::Array(copies))).await;
    assert_status(&r, 422, Some("Invalid"), "21 self-copies");
    still_serving(&s, "21 self-copies").await;

    // 80 adds, each a 126-level value at the end of the previous one: ~10,000 levels deep.
    let mut ops = Vec::new();
    let mut at = String::from("/spec/d");
    let chain = |n: usize| (0..n).fold(json!({}), |v, _| json!({ "a": v }));
    ops.push(json!({"op": "add", "path": at, "value": chain(120)}));
    for _ in 0..80 {
        at.push_str(&"/a".repeat(120));
        ops.push(json!({"op": "add", "path": format!("{at}/a"), "value": chain(120)}));
        at.push_str("/a");
    }
    let r = send(patch(Value::Array(ops))).await;
    assert_status(&r, 422, Some("Invalid"), "a patch nesting the Lease 10,000 levels deep");
    still_serving(&s, "deep nesting").await;

    // More operations than upstream allows: 413.
    let many = vec![json!({"op": "test", "path": "/kind", "value": "Lease"}); 10_001];
    let r = send(patch(Value::Array(many))).await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "10,001 operations");

    // Nothing of it was stored.
    let r = send(client.get(&url)).await;
    r.expect_code(200, "the Lease");
    assert_eq!(r.body["metadata"]["resourceVersion"], rv, "the Lease is unchanged: {}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_over_the_etcd_request_size_are_refused() {
    let s = shared();
    let ns = s.create_namespace("limits").await;
    let http = s.http();
    // Leases: no field of theirs has a length limit of its own (ConfigMap data has 1 MiB).
    let leases = format!("{}/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", s.url);
    let lease = |name: &str, bytes: usize| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
               "spec": {"holderIdentity": "x".repeat(bytes)}})
    };

    // 1.6 MiB: within the 3 MiB body limit, over etcd's 1.5 MiB request limit.
    let r = send(http.post(&leases).json(&lease("big", 1_600_000))).await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "a 1.6 MiB Lease");
    let r = send(http.get(format!("{leases}/big"))).await;
    r.expect_code(404, "the refused Lease was not stored");

    // 1.4 MiB is stored; a patch taking it over the limit is refused and changes nothing.
    let r = send(http.post(&leases).json(&lease("near", 1_400_000))).await;
    r.expect_code(201, "a 1.4 MiB Lease");
    let rv = r.body["metadata"]["resourceVersion"].clone();
    let grow = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"holderIdentity": "y".repeat(1_580_000)}});
    let r = send(
        http.patch(format!("{leases}/near"))
            .header("content-type", "application/merge-patch+json")
            .body(grow.to_string()),
    )
    .await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "a patch over the limit");
    let r = send(http.get(format!("{leases}/near"))).await;
    r.expect_code(200, "the Lease");
    assert_eq!(r.body["metadata"]["resourceVersion"], rv, "unchanged");
    // A create between the create limit and the update limit: refused at create, so the
    // status a server writes later always fits.
    let r = send(http.post(&leases).json(&lease("edge", 1_540_000))).await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "a Lease above the create limit");
    let cms = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let cm = |name: &str, bytes: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "x".repeat(bytes)}});

    // Bodies over 3 MiB are refused before they are read in full.
    let r = send(http.post(&cms).json(&cm("huge", 3 * 1024 * 1024))).await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "a 3 MiB body");
    // A gzip body is not inflated: the server does not take Content-Encoding on requests.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, cm("zipped", 50_000_000).to_string().as_bytes()).expect("gzip");
    let zipped = gz.finish().expect("gzip");
    assert!(zipped.len() < 1_000_000, "{} bytes", zipped.len());
    let r = send(
        http.post(&cms).header("content-type", "application/json").header("content-encoding", "gzip").body(zipped),
    )
    .await;
    assert_status(&r, 400, Some("BadRequest"), "a gzip-encoded body");
    still_serving(&s, "large objects").await;
}

/// The stored size of an object as the server reads it back: its JSON without
/// `metadata.resourceVersion`.
fn stored_len(obj: &Value) -> usize {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(&o).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// Updates keep 4 KiB below the stored-object limit, so an object grown by updates can
/// always be marked deleting: a patch into that reserve is refused, and an object just
/// under it takes its deletion timestamp (also on a dry run, which checks the same limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_grown_by_updates_can_still_be_deleted() {
    // meta.rs: MAX_OBJECT_BYTES and MAX_UPDATE_OBJECT_BYTES.
    const MAX_OBJECT: usize = 1_568_768;
    const MAX_UPDATE: usize = MAX_OBJECT - 4 * 1024;
    let s = shared();
    let http = s.http();
    let ns = unique("limits-delete");
    send(http.post(format!("{}/api/v1/namespaces", s.url)).json(&json!({"metadata": {"name": ns}})))
        .await
        .expect_code(201, "namespace");
    let leases = format!("{}/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", s.url);
    let created = send(http.post(&leases).json(&json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "grown", "finalizers": ["example.com/hold"]},
        "spec": {"holderIdentity": "x".repeat(1_400_000)}
    })))
    .await;
    created.expect_code(201, "a large Lease with a finalizer");
    // A merge patch growing the Lease's stored form to `target` bytes.
    let grow_to = |target: usize, now: &Value| {
        let cur = now["spec"]["holderIdentity"].as_str().map(str::len).unwrap_or(0);
        let len = (cur + target).saturating_sub(stored_len(now));
        json!({"spec": {"holderIdentity": "y".repeat(len)}}).to_string()
    };
    let merge = |body: String| {
        http.patch(format!("{leases}/grown")).header("content-type", "application/merge-patch+json").body(body)
    };

    // Into the reserve: 20 bytes under the stored-object limit.
    let r = send(merge(grow_to(MAX_OBJECT - 20, &created.body))).await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "a patch into the deletion reserve");
    // Just under the update limit (1.5 KiB of slack for the server's own metadata).
    let r = send(merge(grow_to(MAX_UPDATE - 1536, &created.body))).await;
    r.expect_code(200, "a patch just under the update limit");
    assert!(stored_len(&r.body) > MAX_UPDATE - 4096, "grown to {} bytes", stored_len(&r.body));

    let r = send(http.delete(format!("{leases}/grown?dryRun=All"))).await;
    r.expect_code(200, "a dry-run delete of the grown object");
    let r = send(http.delete(format!("{leases}/grown"))).await;
    r.expect_code(200, "deleting the grown object");
    assert!(
        r.body["metadata"]["deletionTimestamp"].is_string(),
        "marked deleting: {}",
        &r.text[..200.min(r.text.len())]
    );
    // Let it go.
    let r = send(
        http.patch(format!("{leases}/grown"))
            .header("content-type", "application/merge-patch+json")
            .body(json!({"metadata": {"finalizers": null}}).to_string()),
    )
    .await;
    r.expect_code(200, "the finalizer removed");
}

/// A managedFields entry as a client would write it.
fn managed_entry(manager: &str, operation: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
           "fieldsType": "FieldsV1", "fieldsV1": fields})
}

/// A mirror pod of node `node`: one container named by `key_len` bytes with `envs` variables.
/// A mirror pod of `node` (whose Node has uid `node_uid`), as NodeRestriction lets a node
/// create one: bound to itself and owned by its own Node.
fn mirror_pod(node: &str, node_uid: &str, name: &str, key_len: usize, envs: usize) -> Value {
    let env: Vec<Value> = (0..envs).map(|i| json!({"name": format!("e{i}"), "value": "v"})).collect();
    let owner = json!({"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true});
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "annotations": {"kubernetes.io/config.mirror": "x"},
                        "ownerReferences": [owner]},
           "spec": {"nodeName": node, "containers": [{"name": "c".repeat(key_len), "image": "busybox", "env": env}]}})
}

/// A node creating its own mirror pod may write the pod's `managedFields`. A 2.2 MB dry-run
/// create whose three forged entries each own the 27,000 fields of 9,000 variables below a
/// 100 KB container key (copied per field: 8 GB) gets an answer, and the server keeps
/// serving; entries that do not decode are reset, and names metadata validation refuses are
/// refused. A large server-side apply by a node (of its own Node) is answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_managed_fields_from_a_node_are_bounded() {
    let s = shared();
    let (client, node_name) = node(&s);
    // The node registers its Node first: its mirror pods are owned by it.
    let r = send(client.post(format!("{}/api/v1/nodes", s.url)).json(&json!({"metadata": {"name": node_name}}))).await;
    r.expect_code(201, "the node registers its Node");
    let node_uid = r.body["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let pods = format!("{}/api/v1/namespaces/default/pods?dryRun=All&fieldManager=kubelet", s.url);

    let long = "c".repeat(100_000);
    let owned: serde_json::Map<String, Value> = (0..9_000)
        .map(|i| (format!("k:{{\"name\":\"e{i}\"}}"), json!({".": {}, "f:name": {}, "f:value": {}})))
        .collect();
    let fields = json!({"f:spec": {"f:containers": {format!("k:{}", json!({"name": long})): {"f:env": owned}}}});
    let mut forged = mirror_pod(&node_name, &node_uid, "forged", 100_000, 9_000);
    forged["metadata"]["managedFields"] =
        json!((0..3).map(|i| managed_entry(&format!("m{i}"), "Update", fields.clone())).collect::<Vec<_>>());
    let body = forged.to_string();
    assert!(body.len() > 2_100_000 && body.len() < 3_145_728, "{} bytes", body.len());
    let r = send(client.post(&pods).header("content-type", "application/json").body(body)).await;
    // A 100 KB container name is no DNS label.
    assert_status(&r, 422, Some("Invalid"), "the forged mirror pod");
    assert!(r.text.contains("spec.containers[0].name"), "{}", &r.text[..r.text.len().min(300)]);
    still_serving(&s, "the forged mirror pod").await;

    // Entries that do not decode (here an unknown operation) are reset: the create records
    // the writer alone.
    let mut reset = mirror_pod(&node_name, &node_uid, "reset", 1, 1);
    reset["metadata"]["managedFields"] = json!([managed_entry("forger", "Steal", json!({"f:spec": {}}))]);
    let r = send(client.post(&pods).json(&reset)).await;
    r.expect_code(201, "a mirror pod with an entry that does not decode");
    let managers: Vec<&Value> = r.body["metadata"]["managedFields"]
        .as_array()
        .map(|l| l.iter().map(|e| &e["manager"]).collect())
        .unwrap_or_default();
    assert_eq!(managers, [&json!("kubelet")], "{}", r.text);

    // Entries that decode keep what the pod does not set, and are validated as metadata.
    let mut named = mirror_pod(&node_name, &node_uid, "named", 1, 1);
    named["metadata"]["managedFields"] =
        json!([managed_entry(&"m".repeat(129), "Update", json!({"f:spec": {"f:hostname": {}}}))]);
    let r = send(client.post(&pods).json(&named)).await;
    assert_status(&r, 422, Some("Invalid"), "a mirror pod with an overlong manager");
    let causes = r.body["details"]["causes"].as_array().cloned().unwrap_or_default();
    assert!(
        causes.iter().any(|c| c["field"]
            .as_str()
            .is_some_and(|f| f.starts_with("metadata.managedFields[") && f.ends_with("].manager"))
            && c["message"].as_str().is_some_and(|m| m.contains("Too long: may not be more than 128 bytes"))),
        "{}",
        r.text
    );

    // A 1.2 MB server-side apply of the node's own Node: 15,000 conditions.
    let conditions: Vec<Value> = (0..15_000)
        .map(|i| json!({"type": format!("T{i}-{}", "t".repeat(20)), "status": "True", "reason": "R", "message": "m"}))
        .collect();
    let config = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}, "status": {"conditions": conditions}});
    let r = send(
        client
            .patch(format!("{}/api/v1/nodes/{node_name}?fieldManager=kubelet&dryRun=All", s.url))
            .header("content-type", "application/apply-patch+yaml")
            .body(config.to_string()),
    )
    .await;
    r.expect_code(200, "a large apply of the node's Node");
    still_serving(&s, "a large apply").await;
}
