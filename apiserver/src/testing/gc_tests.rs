//! Deletion follow-ups (`gc`): namespace lifecycle and owner references with each
//! propagation policy. The work runs in background tasks, so results are awaited with a
//! bounded poll.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Caller, TestServer};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
/// Bound on background work (the first attempt runs at once; retries are 500 ms apart).
const WITHIN: Duration = Duration::from_secs(10);

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

async fn gone(srv: &TestServer, path: &str) -> bool {
    let admin = Caller::admin();
    srv.eventually(WITHIN, || async { (srv.get(&admin, path).await.status == 404).then_some(()) }).await.is_some()
}

#[tokio::test]
async fn a_terminating_namespace_refuses_new_content_then_goes_away() {
    let srv = TestServer::new().await.unwrap();
    let admin = Caller::admin();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    let r = srv.post(&admin, "/api/v1/namespaces", &ns).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["status"]["phase"], "Active", "{r}");
    assert_eq!(r.body["spec"]["finalizers"], json!(["kubernetes"]), "{r}");
    let team_cms = "/api/v1/namespaces/team/configmaps";
    let mut hold = cm("held");
    hold["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(srv.post(&admin, team_cms, &hold).await.status, 201);
    assert_eq!(srv.post(&admin, team_cms, &cm("plain")).await.status, 201);

    let del = srv.delete(&admin, "/api/v1/namespaces/team", None).await;
    assert_eq!(del.status, 200, "{del}");
    let terminating = srv.get(&admin, "/api/v1/namespaces/team").await;
    assert_eq!(terminating.body["status"]["phase"], "Terminating", "{terminating}");

    let refused = srv.post(&admin, team_cms, &cm("new")).await;
    assert_eq!(refused.status, 403, "{refused}");
    assert_eq!(refused.reason(), "Forbidden");
    assert!(refused.message().contains("because it is being terminated"), "{refused}");

    // Contents are deleted; the finalized one waits for its finalizer.
    assert!(gone(&srv, &format!("{team_cms}/plain")).await, "contents deleted");
    let held = srv.get(&admin, &format!("{team_cms}/held")).await;
    assert_eq!(held.status, 200, "{held}");
    assert!(held.body["metadata"]["deletionTimestamp"].is_string(), "{held}");
    assert_eq!(srv.get(&admin, "/api/v1/namespaces/team").await.status, 200, "waits for its contents");
    let release = json!({"metadata": {"finalizers": null}});
    let r = srv.patch(&admin, &format!("{team_cms}/held"), "application/merge-patch+json", &release).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(gone(&srv, "/api/v1/namespaces/team").await, "the namespace goes once empty");

    let missing = srv.post(&admin, "/api/v1/namespaces/nowhere/configmaps", &cm("x")).await;
    assert_eq!(missing.status, 404, "{missing}");
    assert_eq!(missing.message(), "namespaces \"nowhere\" not found");
}

/// An owner and two dependents in `default`; returns the owner's uid.
async fn family(srv: &TestServer) -> String {
    let admin = Caller::admin();
    let owner = srv.post(&admin, CMS, &cm("owner")).await;
    assert_eq!(owner.status, 201, "{owner}");
    let uid = owner.body["metadata"]["uid"].as_str().unwrap().to_string();
    for name in ["child1", "child2"] {
        let mut c = cm(name);
        c["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
        let r = srv.post(&admin, CMS, &c).await;
        assert_eq!(r.status, 201, "{r}");
    }
    uid
}

#[tokio::test]
async fn background_propagation_deletes_dependents() {
    let srv = TestServer::new().await.unwrap();
    family(&srv).await;
    let r = srv.delete(&Caller::admin(), &format!("{CMS}/owner"), None).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(srv.get(&Caller::admin(), &format!("{CMS}/owner")).await.status, 404, "the owner goes at once");
    for child in ["child1", "child2"] {
        assert!(gone(&srv, &format!("{CMS}/{child}")).await, "{child} deleted");
    }
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents_without_the_reference() {
    let srv = TestServer::new().await.unwrap();
    let admin = Caller::admin();
    family(&srv).await;
    let r = srv.delete(&admin, &format!("{CMS}/owner"), Some(&json!({"propagationPolicy": "Orphan"}))).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(gone(&srv, &format!("{CMS}/owner")).await, "the owner goes once its dependents are orphaned");
    for child in ["child1", "child2"] {
        let c = srv.get(&admin, &format!("{CMS}/{child}")).await;
        assert_eq!(c.status, 200, "{child}: {c}");
        assert!(c.body["metadata"].get("ownerReferences").is_none(), "{child}: {c}");
    }
}

#[tokio::test]
async fn foreground_propagation_deletes_dependents_first() {
    let srv = TestServer::new().await.unwrap();
    let admin = Caller::admin();
    family(&srv).await;
    // A dependent that cannot go yet holds the owner in foreground deletion.
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    let r = srv.patch(&admin, &format!("{CMS}/child1"), "application/merge-patch+json", &hold).await;
    assert_eq!(r.status, 200, "{r}");
    let r = srv.delete(&admin, &format!("{CMS}/owner"), Some(&json!({"propagationPolicy": "Foreground"}))).await;
    assert_eq!(r.status, 200, "{r}");
    let owner = srv.get(&admin, &format!("{CMS}/owner")).await;
    assert_eq!(owner.status, 200, "{owner}");
    assert!(owner.body["metadata"]["deletionTimestamp"].is_string(), "{owner}");
    assert!(
        owner.body["metadata"]["finalizers"].as_array().is_some_and(|f| f.contains(&json!("foregroundDeletion"))),
        "{owner}"
    );
    assert!(gone(&srv, &format!("{CMS}/child2")).await, "child2 deleted");
    assert_eq!(srv.get(&admin, &format!("{CMS}/owner")).await.status, 200, "the owner waits for child1");
    let release = json!({"metadata": {"finalizers": null}});
    let r = srv.patch(&admin, &format!("{CMS}/child1"), "application/merge-patch+json", &release).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(gone(&srv, &format!("{CMS}/owner")).await, "the owner goes after its last dependent");
}
