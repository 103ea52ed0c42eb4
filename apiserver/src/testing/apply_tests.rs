//! Server-side apply and field ownership through the whole request path: apply creating,
//! re-applying, conflicting, forcing and dropping fields; ordinary writes recorded as
//! Update entries; `fieldManager` checks; dry runs.

use axum::body::Body;
use http::{header, Method, Request};
use serde_json::{json, Value};

use super::{read, Caller, Reply, TestServer};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const APPLY: &str = "application/apply-patch+yaml";

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

async fn server() -> TestServer {
    TestServer::new().await.unwrap()
}

/// PATCH `path` with a raw body of `content_type`, sending `user_agent`.
async fn send_raw(
    srv: &TestServer,
    method: Method,
    path: &str,
    content_type: &str,
    user_agent: &str,
    body: &str,
) -> Reply {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, content_type)
        .header(header::USER_AGENT, user_agent)
        .body(Body::from(body.to_string()))
        .unwrap();
    read(srv.send(&Caller::admin(), req).await).await
}

async fn apply(srv: &TestServer, name: &str, query: &str, body: &Value) -> Reply {
    srv.patch(&Caller::admin(), &format!("{CMS}/{name}?{query}"), APPLY, body).await
}

/// `(manager, operation, fieldsV1)` of every managedFields entry, in order.
fn entries(obj: &Value) -> Vec<(String, String, Value)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_string(),
                        e["operation"].as_str().unwrap_or_default().to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn apply_creates_and_reapplying_changes_nothing() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["data"], json!({"k": "v"}));
    assert_eq!(r.body["metadata"]["namespace"], "default");
    assert!(!r.body["metadata"]["uid"].as_str().unwrap_or_default().is_empty(), "{r}");
    assert_eq!(entries(&r.body), vec![("m1".into(), "Apply".into(), json!({"f:data": {"f:k": {}}}))]);
    let entry = &r.body["metadata"]["managedFields"][0];
    assert_eq!(entry["apiVersion"], "v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].as_str().is_some_and(|t| t.ends_with('Z') && t.len() == 20), "{entry}");
    let got = srv.get(&Caller::admin(), &format!("{CMS}/a")).await;
    assert_eq!(got.body["metadata"]["managedFields"], r.body["metadata"]["managedFields"]);

    let again = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(again.status, 200, "{again}");
    assert_eq!(again.resource_version(), r.resource_version(), "a no-op apply stores nothing");
    assert_eq!(again.body["metadata"]["managedFields"], r.body["metadata"]["managedFields"]);
}

#[tokio::test]
async fn a_yaml_body_applies() {
    let srv = server().await;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y1\ndata:\n  k: v\n";
    let r = send_raw(&srv, Method::PATCH, &format!("{CMS}/y1?fieldManager=m1"), APPLY, "test/1.0", yaml).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["data"], json!({"k": "v"}));
    // YAML 1.1, as upstream's decoder reads it: a bare `y` is the boolean true, not a name.
    let yes = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\n";
    let r = send_raw(&srv, Method::PATCH, &format!("{CMS}/y?fieldManager=m1"), APPLY, "test/1.0", yes).await;
    assert_eq!(r.status, 400, "{r}");
    assert!(r.body["message"].as_str().unwrap_or_default().contains("boolean `true`"), "{r}");
    let bad = send_raw(&srv, Method::PATCH, &format!("{CMS}/y1?fieldManager=m1"), APPLY, "test/1.0", "[1, 2").await;
    assert_eq!(bad.status, 400, "{bad}");
    assert_eq!(bad.reason(), "BadRequest");
}

#[tokio::test]
async fn a_second_manager_conflicts_until_it_forces() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v", "x": "1"}))).await;
    assert_eq!(r.status, 201, "{r}");
    let conflict = apply(&srv, "a", "fieldManager=m2", &cm("a", json!({"k": "other"}))).await;
    assert_eq!(conflict.status, 409, "{conflict}");
    assert_eq!(conflict.reason(), "Conflict");
    assert_eq!(conflict.message(), "Apply failed with 1 conflict: conflict with \"m1\": .data.k");
    assert_eq!(
        conflict.body["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"m1\"", "field": ".data.k"}])
    );
    let unchanged = srv.get(&Caller::admin(), &format!("{CMS}/a")).await;
    assert_eq!(unchanged.body["data"]["k"], "v");
    assert_eq!(unchanged.resource_version(), r.resource_version());

    // The same value is shared, not a conflict.
    let shared = apply(&srv, "a", "fieldManager=m3", &cm("a", json!({"x": "1"}))).await;
    assert_eq!(shared.status, 200, "{shared}");

    let forced = apply(&srv, "a", "fieldManager=m2&force=true", &cm("a", json!({"k": "other"}))).await;
    assert_eq!(forced.status, 200, "{forced}");
    assert_eq!(forced.body["data"], json!({"k": "other", "x": "1"}));
    let got = entries(&forced.body);
    let find = |m: &str| got.iter().find(|e| e.0 == m).map(|e| e.2.clone());
    assert_eq!(find("m1"), Some(json!({"f:data": {"f:x": {}}})), "{got:?}");
    assert_eq!(find("m2"), Some(json!({"f:data": {"f:k": {}}})), "{got:?}");
    assert_eq!(find("m3"), Some(json!({"f:data": {"f:x": {}}})), "{got:?}");

    let bad_force = apply(&srv, "a", "fieldManager=m2&force=maybe", &cm("a", json!({}))).await;
    assert_eq!(bad_force.status, 400, "{bad_force}");
}

#[tokio::test]
async fn fields_dropped_from_an_apply_are_removed_unless_someone_else_owns_them() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"a": "1", "b": "2", "c": "3"}))).await;
    assert_eq!(r.status, 201, "{r}");
    let shared = apply(&srv, "a", "fieldManager=m2", &cm("a", json!({"c": "3"}))).await;
    assert_eq!(shared.status, 200, "{shared}");
    let r = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"a": "1"}))).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.body["data"], json!({"a": "1", "c": "3"}), "b is gone, c stays with m2");
    let got = srv.get(&Caller::admin(), &format!("{CMS}/a")).await;
    assert_eq!(got.body["data"], json!({"a": "1", "c": "3"}));
}

#[tokio::test]
async fn ordinary_writes_take_ownership_as_updates() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v", "x": "1"}))).await;
    assert_eq!(r.status, 201, "{r}");
    // A PUT by kubectl edit (manager from the user agent) moves `k`.
    let mut body = r.body.clone();
    body["data"]["k"] = json!("edited");
    let put = send_raw(
        &srv,
        Method::PUT,
        &format!("{CMS}/a"),
        "application/json",
        "kubectl-edit/v1.32.0 (linux/amd64) kubernetes/abc",
        &body.to_string(),
    )
    .await;
    assert_eq!(put.status, 200, "{put}");
    assert_eq!(
        entries(&put.body),
        vec![
            ("m1".into(), "Apply".into(), json!({"f:data": {"f:x": {}}})),
            ("kubectl-edit".into(), "Update".into(), json!({"f:data": {"f:k": {}}})),
        ]
    );
    // m1 re-applying its old value now conflicts with the Update manager.
    let conflict = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v", "x": "1"}))).await;
    assert_eq!(conflict.status, 409, "{conflict}");
    assert_eq!(conflict.message(), "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.k");

    // A merge patch with ?fieldManager= records that manager.
    let p = srv
        .patch(
            &Caller::admin(),
            &format!("{CMS}/a?fieldManager=patcher"),
            "application/merge-patch+json",
            &json!({"data": {"p": "1"}}),
        )
        .await;
    assert_eq!(p.status, 200, "{p}");
    assert!(entries(&p.body).contains(&("patcher".into(), "Update".into(), json!({"f:data": {"f:p": {}}}))), "{p}");

    // A create records an Update entry for everything it set.
    let created = send_raw(
        &srv,
        Method::POST,
        CMS,
        "application/json",
        "kubectl-create/v1.32.0",
        &cm("b", json!({"k": "v"})).to_string(),
    )
    .await;
    assert_eq!(created.status, 201, "{created}");
    assert_eq!(
        entries(&created.body),
        vec![("kubectl-create".into(), "Update".into(), json!({"f:data": {".": {}, "f:k": {}}}))]
    );
}

#[tokio::test]
async fn a_write_that_only_changes_managed_fields_is_stored() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(r.status, 201, "{r}");
    // The same value applied by a second manager: only managedFields change.
    let shared = apply(&srv, "a", "fieldManager=m2", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(shared.status, 200, "{shared}");
    assert_ne!(shared.resource_version(), r.resource_version());
    let got = srv.get(&Caller::admin(), &format!("{CMS}/a")).await;
    let mut managers: Vec<String> = entries(&got.body).into_iter().map(|e| e.0).collect();
    managers.sort();
    assert_eq!(managers, vec!["m1", "m2"]);
    // A JSON patch may edit managedFields (kubectl's client-side to server-side upgrade).
    let Some(i) = entries(&got.body).iter().position(|e| e.0 == "m2") else { panic!("no m2 entry: {got}") };
    let p = srv
        .patch(
            &Caller::admin(),
            &format!("{CMS}/a"),
            "application/json-patch+json",
            &json!([{"op": "replace", "path": format!("/metadata/managedFields/{i}/manager"), "value": "renamed"}]),
        )
        .await;
    assert_eq!(p.status, 200, "{p}");
    let mut managers: Vec<String> = entries(&p.body).into_iter().map(|e| e.0).collect();
    managers.sort();
    assert_eq!(managers, vec!["m1", "renamed"]);
}

#[tokio::test]
async fn field_manager_is_required_for_apply_and_checked_everywhere() {
    let srv = server().await;
    let r = apply(&srv, "a", "", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(r.status, 422, "{r}");
    assert_eq!(r.reason(), "Invalid");
    assert_eq!(
        r.message(),
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(r.body["details"]["kind"], "PatchOptions");
    assert_eq!(r.body["details"]["group"], "meta.k8s.io");
    let long = "m".repeat(129);
    let r = srv.post(&Caller::admin(), &format!("{CMS}?fieldManager={long}"), &cm("b", json!({}))).await;
    assert_eq!(r.status, 422, "{r}");
    assert!(r.message().starts_with("CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long"), "{r}");
    let r = srv.post(&Caller::admin(), &format!("{CMS}?fieldManager=a%07b"), &cm("b", json!({}))).await;
    assert_eq!(r.status, 422, "{r}");
    assert!(r.message().contains("invalid character U+0007 (at position 1)"), "{r}");
    // Many unprintable characters: one cause, not one per character.
    let bells = "%07".repeat(2_000);
    let r = srv.post(&Caller::admin(), &format!("{CMS}?fieldManager={bells}"), &cm("b", json!({}))).await;
    assert_eq!(r.status, 422, "{r}");
    let causes = r.body["details"]["causes"].as_array().map(Vec::len);
    assert_eq!(causes, Some(2), "too long and the first unprintable character: {}", &r.text[..r.text.len().min(300)]);
    let r =
        srv.patch(&Caller::admin(), &format!("{CMS}/b?force=true"), "application/merge-patch+json", &json!({})).await;
    assert_eq!(r.status, 422, "{r}");
    assert_eq!(
        r.message(),
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    // Nothing was created by the refused writes.
    assert_eq!(srv.get(&Caller::admin(), &format!("{CMS}/a")).await.status, 404);
    assert_eq!(srv.get(&Caller::admin(), &format!("{CMS}/b")).await.status, 404);
}

#[tokio::test]
async fn apply_checks_identity_and_version() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1", &cm("other", json!({}))).await;
    assert_eq!(r.status, 400, "{r}");
    assert_eq!(r.message(), "the name of the object (other) does not match the name on the URL (a)");
    let r = apply(&srv, "a", "fieldManager=m1", &json!({"kind": "ConfigMap", "metadata": {"name": "a"}})).await;
    assert_eq!(r.status, 400, "{r}");
    let r = apply(
        &srv,
        "a",
        "fieldManager=m1",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "managedFields": [{"manager": "x"}]}}),
    )
    .await;
    assert_eq!(r.status, 400, "{r}");
    assert_eq!(r.message(), "metadata.managedFields must be nil");
    // Applying to the status of an object that does not exist finds nothing.
    let r = srv
        .patch(
            &Caller::admin(),
            "/api/v1/namespaces/nope/status?fieldManager=m1",
            APPLY,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nope"}}),
        )
        .await;
    assert_eq!(r.status, 404, "{r}");
}

#[tokio::test]
async fn dry_run_apply_stores_nothing() {
    let srv = server().await;
    let r = apply(&srv, "a", "fieldManager=m1&dryRun=All", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["data"], json!({"k": "v"}));
    assert_eq!(entries(&r.body).len(), 1, "{r}");
    assert_eq!(srv.get(&Caller::admin(), &format!("{CMS}/a")).await.status, 404);
    let created = apply(&srv, "a", "fieldManager=m1", &cm("a", json!({"k": "v"}))).await;
    assert_eq!(created.status, 201, "{created}");
    let r = apply(&srv, "a", "fieldManager=m2&dryRun=All&force=true", &cm("a", json!({"k": "w"}))).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.body["data"]["k"], "w");
    let got = srv.get(&Caller::admin(), &format!("{CMS}/a")).await;
    assert_eq!(got.body["data"]["k"], "v");
    assert_eq!(got.resource_version(), created.resource_version());
    assert_eq!(entries(&got.body).len(), 1);
}

#[tokio::test]
async fn status_writes_own_status_and_main_writes_do_not() {
    let srv = server().await;
    let admin = Caller::admin();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "owned", "labels": {"a": "b"}}, "status": {"phase": "Terminating"}});
    let r = srv.patch(&admin, "/api/v1/namespaces/owned?fieldManager=m1", APPLY, &ns).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["status"]["phase"], "Active", "the main resource does not set status");
    // The applier owns no status field (reset on the main resource).
    assert_eq!(
        entries(&r.body),
        vec![("m1".into(), "Apply".into(), json!({"f:metadata": {"f:labels": {"f:a": {}}}}))],
        "{r}"
    );
    let mut body = r.body.clone();
    body["spec"] = json!({"finalizers": ["kubernetes", "x/y"]});
    body["metadata"]["labels"] = json!({"l": "v"});
    let s = srv.put(&admin, "/api/v1/namespaces/owned/status?fieldManager=statuser", &body).await;
    assert_eq!(s.status, 200, "{s}");
    let entry = s.body["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == "statuser").cloned());
    // Nothing changed through /status but fields it may not set: no entry.
    assert_eq!(entry, None, "{s}");
}
