//! Create, update, patch and delete through the whole request path.

use serde_json::{json, Value};

use super::{Caller, TestServer};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

async fn server() -> TestServer {
    TestServer::new().await.unwrap()
}

#[tokio::test]
async fn create_get_and_duplicate_create() {
    let srv = server().await;
    let admin = Caller::admin();
    let r = srv.post(&admin, CMS, &cm("a", json!({"k": "v"}))).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["metadata"]["namespace"], "default");
    assert!(!r.body["metadata"]["uid"].as_str().unwrap_or_default().is_empty(), "{r}");
    assert!(!r.resource_version().is_empty(), "{r}");
    let got = srv.get(&admin, &format!("{CMS}/a")).await;
    assert_eq!(got.status, 200, "{got}");
    assert_eq!(got.body["data"], json!({"k": "v"}));
    assert_eq!(got.resource_version(), r.resource_version());
    let again = srv.post(&admin, CMS, &cm("a", json!({}))).await;
    assert_eq!(again.status, 409, "{again}");
    assert_eq!(again.reason(), "AlreadyExists");
    assert_eq!(again.message(), "configmaps \"a\" already exists");
}

#[tokio::test]
async fn generate_name_gives_distinct_names_with_the_prefix() {
    let srv = server().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}});
    let mut names = Vec::new();
    for _ in 0..3 {
        let r = srv.post(&Caller::admin(), CMS, &body).await;
        assert_eq!(r.status, 201, "{r}");
        let name = r.body["metadata"]["name"].as_str().unwrap().to_string();
        assert!(name.starts_with("gen-") && name.len() > "gen-".len(), "{name}");
        assert_eq!(r.body["metadata"]["generateName"], "gen-");
        names.push(name);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let srv = server().await;
    let admin = Caller::admin();
    let r = srv.post(&admin, &format!("{CMS}?dryRun=All"), &cm("dry", json!({"k": "v"}))).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["data"], json!({"k": "v"}));
    assert_eq!(srv.get(&admin, &format!("{CMS}/dry")).await.status, 404);

    let created = srv.post(&admin, CMS, &cm("real", json!({"k": "v"}))).await;
    assert_eq!(created.status, 201, "{created}");
    let patched = srv
        .patch(&admin, &format!("{CMS}/real?dryRun=All"), "application/merge-patch+json", &json!({"data": {"k": "w"}}))
        .await;
    assert_eq!(patched.status, 200, "{patched}");
    assert_eq!(patched.body["data"]["k"], "w");
    let deleted = srv.delete(&admin, &format!("{CMS}/real?dryRun=All"), None).await;
    assert_eq!(deleted.status, 200, "{deleted}");
    let now = srv.get(&admin, &format!("{CMS}/real")).await;
    assert_eq!(now.status, 200, "{now}");
    assert_eq!(now.body["data"]["k"], "v", "dry-run patch and delete left the object as it was");
    assert_eq!(now.resource_version(), created.resource_version());

    let bad = srv.post(&admin, &format!("{CMS}?dryRun=Some"), &cm("x", json!({}))).await;
    assert_eq!(bad.status, 400, "{bad}");
}

#[tokio::test]
async fn update_with_a_stale_resource_version_is_a_conflict() {
    let srv = server().await;
    let admin = Caller::admin();
    let first = srv.post(&admin, CMS, &cm("u", json!({"n": "1"}))).await;
    assert_eq!(first.status, 201, "{first}");
    let mut v1 = first.body.clone();
    v1["data"]["n"] = json!("2");
    let second = srv.put(&admin, &format!("{CMS}/u"), &v1).await;
    assert_eq!(second.status, 200, "{second}");
    assert_ne!(second.resource_version(), first.resource_version());
    // The same resourceVersion again: someone else wrote in between.
    v1["data"]["n"] = json!("3");
    let stale = srv.put(&admin, &format!("{CMS}/u"), &v1).await;
    assert_eq!(stale.status, 409, "{stale}");
    assert_eq!(stale.reason(), "Conflict");
    assert!(
        stale.message().contains("the object has been modified; please apply your changes to the latest version"),
        "{stale}"
    );
    // Without a resourceVersion an update is unconditional.
    let mut blind = cm("u", json!({"n": "4"}));
    blind["metadata"]["namespace"] = json!("default");
    let r = srv.put(&admin, &format!("{CMS}/u"), &blind).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.body["data"]["n"], "4");
    // An update of a missing object is a 404 (configmaps do not create on update).
    let missing = srv.put(&admin, &format!("{CMS}/nope"), &cm("nope", json!({}))).await;
    assert_eq!(missing.status, 404, "{missing}");
    // The name in the body must match the path.
    let mismatch = srv.put(&admin, &format!("{CMS}/u"), &cm("other", json!({}))).await;
    assert_eq!(mismatch.status, 400, "{mismatch}");
}

#[tokio::test]
async fn patch_types_table() {
    struct Case {
        name: &'static str,
        content_type: &'static str,
        patch: Value,
        want_status: u16,
        want_data: Option<Value>,
    }
    let cases = [
        Case {
            name: "merge patch sets and removes keys",
            content_type: "application/merge-patch+json",
            patch: json!({"data": {"a": "x", "b": null}}),
            want_status: 200,
            want_data: Some(json!({"a": "x"})),
        },
        Case {
            name: "strategic merge patch on a map",
            content_type: "application/strategic-merge-patch+json",
            patch: json!({"data": {"c": "3"}}),
            want_status: 200,
            want_data: Some(json!({"a": "1", "b": "2", "c": "3"})),
        },
        Case {
            name: "JSON patch replace and remove",
            content_type: "application/json-patch+json",
            patch: json!([{"op": "replace", "path": "/data/a", "value": "9"}, {"op": "remove", "path": "/data/b"}]),
            want_status: 200,
            want_data: Some(json!({"a": "9"})),
        },
        Case {
            name: "JSON patch test that fails is a 422",
            content_type: "application/json-patch+json",
            patch: json!([{"op": "test", "path": "/data/a", "value": "nope"}]),
            want_status: 422,
            want_data: None,
        },
        Case {
            name: "JSON patch that is not a list is a 400",
            content_type: "application/json-patch+json",
            patch: json!({"op": "add"}),
            want_status: 400,
            want_data: None,
        },
        Case {
            name: "merge patch with a stale resourceVersion is a conflict",
            content_type: "application/merge-patch+json",
            patch: json!({"metadata": {"resourceVersion": "1"}, "data": {"a": "x"}}),
            want_status: 409,
            want_data: None,
        },
        Case {
            name: "unsupported patch type is a 415",
            content_type: "text/plain",
            patch: json!({"data": {}}),
            want_status: 415,
            want_data: None,
        },
    ];
    let srv = server().await;
    let admin = Caller::admin();
    for (i, case) in cases.iter().enumerate() {
        let name = format!("p{i}");
        let created = srv.post(&admin, CMS, &cm(&name, json!({"a": "1", "b": "2"}))).await;
        assert_eq!(created.status, 201, "{}: {created}", case.name);
        let r = srv.patch(&admin, &format!("{CMS}/{name}"), case.content_type, &case.patch).await;
        assert_eq!(r.status.as_u16(), case.want_status, "{}: {r}", case.name);
        if r.status.is_client_error() {
            assert_eq!(r.body["kind"], "Status", "{}: {r}", case.name);
        }
        let stored = srv.get(&admin, &format!("{CMS}/{name}")).await;
        let want = case.want_data.clone().unwrap_or(json!({"a": "1", "b": "2"}));
        assert_eq!(stored.body["data"], want, "{}: stored {stored}", case.name);
    }
}

#[tokio::test]
async fn strategic_merge_patch_merges_lists_by_key() {
    let srv = server().await;
    let admin = Caller::admin();
    let owner = |uid: &str, name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid});
    let mut body = cm("s", json!({}));
    body["metadata"]["ownerReferences"] = json!([owner("u1", "one"), owner("u2", "two")]);
    body["metadata"]["finalizers"] = json!(["example.com/a"]);
    let r = srv.post(&admin, CMS, &body).await;
    assert_eq!(r.status, 201, "{r}");
    let patch = json!({"metadata": {"ownerReferences": [owner("u1", "renamed")], "finalizers": ["example.com/b"]}});
    let path = format!("{CMS}/s");
    let strategic = srv.patch(&admin, &path, "application/strategic-merge-patch+json", &patch).await;
    assert_eq!(strategic.status, 200, "{strategic}");
    let names: Vec<&str> = strategic.body["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(names, ["renamed", "two"], "owner references merged by uid");
    let mut finalizers: Vec<&str> =
        strategic.body["metadata"]["finalizers"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    finalizers.sort_unstable();
    assert_eq!(finalizers, ["example.com/a", "example.com/b"], "finalizers merged as a set");
    let merge = srv.patch(&admin, &path, "application/merge-patch+json", &patch).await;
    assert_eq!(merge.status, 200, "{merge}");
    assert_eq!(merge.body["metadata"]["ownerReferences"].as_array().map(Vec::len), Some(1), "merge patch replaces");
    assert_eq!(merge.body["metadata"]["finalizers"], json!(["example.com/b"]));
}

#[tokio::test]
async fn validation_errors_are_one_422_with_every_cause() {
    let srv = server().await;
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "Bad_Name", "labels": {"in valid": "x"}},
        "data": {"not a key!": "v"}});
    let r = srv.post(&Caller::admin(), CMS, &bad).await;
    assert_eq!(r.status, 422, "{r}");
    assert_eq!(r.reason(), "Invalid");
    assert_eq!(r.body["details"]["kind"], "ConfigMap", "{r}");
    let fields: Vec<&str> =
        r.body["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    for want in ["metadata.name", "metadata.labels", "data[not a key!]"] {
        assert!(fields.iter().any(|f| f.starts_with(want)), "cause for {want} in {fields:?}");
    }
    assert!(r.message().starts_with("ConfigMap \"Bad_Name\" is invalid: ["), "{r}");
}

#[tokio::test]
async fn delete_with_preconditions() {
    let srv = server().await;
    let admin = Caller::admin();
    let created = srv.post(&admin, CMS, &cm("d", json!({}))).await;
    assert_eq!(created.status, 201, "{created}");
    let uid = created.body["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created.resource_version().to_string();
    let cases = [
        ("wrong uid", json!({"preconditions": {"uid": "not-the-uid"}}), 409),
        ("wrong resourceVersion", json!({"preconditions": {"resourceVersion": "1"}}), 409),
        ("bad propagation policy", json!({"propagationPolicy": "Sideways"}), 422),
    ];
    for (name, options, want) in cases {
        let r = srv.delete(&admin, &format!("{CMS}/d"), Some(&options)).await;
        assert_eq!(r.status.as_u16(), want, "{name}: {r}");
        assert_eq!(srv.get(&admin, &format!("{CMS}/d")).await.status, 200, "{name}: still there");
    }
    let ok = json!({"preconditions": {"uid": uid, "resourceVersion": rv}});
    let r = srv.delete(&admin, &format!("{CMS}/d"), Some(&ok)).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(srv.get(&admin, &format!("{CMS}/d")).await.status, 404);
    let again = srv.delete(&admin, &format!("{CMS}/d"), None).await;
    assert_eq!(again.status, 404, "{again}");
    assert_eq!(again.reason(), "NotFound");
}

#[tokio::test]
async fn finalizers_hold_a_delete_until_removed() {
    let srv = server().await;
    let admin = Caller::admin();
    let mut body = cm("f", json!({}));
    body["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(srv.post(&admin, CMS, &body).await.status, 201);
    let r = srv.delete(&admin, &format!("{CMS}/f"), None).await;
    assert_eq!(r.status, 200, "{r}");
    let held = srv.get(&admin, &format!("{CMS}/f")).await;
    assert_eq!(held.status, 200, "{held}");
    assert!(held.body["metadata"]["deletionTimestamp"].is_string(), "{held}");
    let released = srv
        .patch(&admin, &format!("{CMS}/f"), "application/merge-patch+json", &json!({"metadata": {"finalizers": null}}))
        .await;
    assert_eq!(released.status, 200, "{released}");
    assert_eq!(srv.get(&admin, &format!("{CMS}/f")).await.status, 404, "gone once the last finalizer is removed");
}

/// A delete-collection is no way around admission or around the verbs a kind serves:
/// namespaces have no deletecollection (405, the protected ones stay), and every item of
/// another kind's collection passes the admission chain as its own delete would.
#[tokio::test]
async fn delete_collection_keeps_to_verbs_and_admission() {
    let srv = server().await;
    let admin = Caller::admin();
    let r = srv.delete(&admin, "/api/v1/namespaces", None).await;
    assert_eq!(r.status, 405, "{r}");
    assert_eq!(r.reason(), "MethodNotAllowed");
    for ns in ["default", "kube-system", "kube-public"] {
        let got = srv.get(&admin, &format!("/api/v1/namespaces/{ns}")).await;
        assert_eq!(got.status, 200, "{ns}: {got}");
        assert!(got.body["metadata"]["deletionTimestamp"].is_null(), "{ns} not deleting: {got}");
    }

    // NodeRestriction refuses a node another node's Lease, inside a collection too.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
               "spec": {"holderIdentity": name}})
    };
    for name in ["n1", "n2"] {
        let r = srv.post(&admin, leases, &lease(name)).await;
        assert_eq!(r.status, 201, "{r}");
    }
    let grant = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "lease-deleter"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["deletecollection", "list"]}]
    });
    let r = srv.post(&admin, "/apis/rbac.authorization.k8s.io/v1/clusterroles", &grant).await;
    assert_eq!(r.status, 201, "{r}");
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "lease-deleter"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "lease-deleter"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
    });
    let r = srv.post(&admin, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &binding).await;
    assert_eq!(r.status, 201, "{r}");
    let node = Caller::node("n1");
    let refused = srv
        .eventually(std::time::Duration::from_secs(10), || async {
            let r = srv.delete(&node, leases, None).await;
            (r.status == 403 && r.message().contains("same name as the requesting node")).then_some(r)
        })
        .await;
    let Some(refused) = refused else { panic!("the node's collection delete was never refused by NodeRestriction") };
    assert_eq!(refused.reason(), "Forbidden", "{refused}");
    assert_eq!(srv.get(&admin, &format!("{leases}/n2")).await.status, 200, "n2's Lease is still there");
}

/// Mutating admission runs before the strategy validates, validating admission after, as
/// upstream: an invalid Lease a node may not write at all is refused by NodeRestriction
/// (403), an invalid one of its own by validation (422).
#[tokio::test]
async fn mutating_admission_answers_before_validation() {
    let srv = server().await;
    let node = Caller::node("n1");
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let bad = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
               "spec": {"holderIdentity": name, "leaseDurationSeconds": -1}})
    };
    let cases = [("another node's", "n2", 403, "Forbidden"), ("its own", "n1", 422, "Invalid")];
    for (what, name, code, reason) in cases {
        let r = srv.post(&node, leases, &bad(name)).await;
        assert_eq!(r.status.as_u16(), code, "{what}: {r}");
        assert_eq!(r.reason(), reason, "{what}: {r}");
    }
}
