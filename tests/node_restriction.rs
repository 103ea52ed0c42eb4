//! NodeRestriction: a node (its own client certificate, group `system:nodes`) manages only
//! its own Lease in `kube-node-lease`, also when the name comes in the body of a create, and
//! also when RBAC would let it delete more.

mod common;

use common::{assert_status, issue_user, send, unique};
use serde_json::{json, Value};

fn lease(name: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_creates_its_own_lease_and_not_another_nodes() {
    let s = common::shared();
    let me = unique("node-a");
    let other = unique("node-b");
    let node = issue_user(&s, &format!("system:node:{me}"), &["system:nodes"]);
    let as_node = s.http_with_identity(&node.identity);
    let leases = format!("{}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", s.url);

    let created = send(as_node.post(&leases).json(&lease(&me))).await;
    created.expect_code(201, "the node creating its own Lease");
    let mut renewed = created.body.clone();
    renewed["spec"]["leaseDurationSeconds"] = json!(41);
    send(as_node.put(format!("{leases}/{me}")).json(&renewed)).await.expect_code(200, "the node renewing its Lease");

    let refused = send(as_node.post(&leases).json(&lease(&other))).await;
    assert_status(&refused, 403, Some("Forbidden"), "the node creating another node's Lease");
    assert_eq!(
        refused.body["message"],
        json!(format!(
            "leases.coordination.k8s.io \"{other}\" is forbidden: can only access node lease with the same name as \
             the requesting node"
        )),
        "{}",
        refused.text
    );
    assert_eq!(refused.body["details"]["name"], json!(other));
    send(s.http().get(format!("{leases}/{other}"))).await.expect_code(404, "no Lease was written for the other node");

    // The admin is no node: it may create any node's Lease.
    send(s.http().post(&leases).json(&lease(&other))).await.expect_code(201, "the admin creating a node Lease");
}

/// RBAC may grant a node more deletes than the Node authorizer does; NodeRestriction still
/// keeps it to its own Lease, one by one and in a delete-collection alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_granted_more_by_rbac_deletes_only_its_own_lease() {
    let s = common::shared();
    let me = unique("node-c");
    let other = unique("node-d");
    let node = issue_user(&s, &format!("system:node:{me}"), &["system:nodes"]);
    let as_node = s.http_with_identity(&node.identity);
    let leases = format!("{}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", s.url);
    let rbac = format!("{}/apis/rbac.authorization.k8s.io/v1", s.url);
    let grant = unique("lease-deleter");
    send(s.http().post(format!("{rbac}/clusterroles")).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": grant},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["delete", "deletecollection", "list"]}]
    })))
    .await
    .expect_code(201, "the ClusterRole");
    send(s.http().post(format!("{rbac}/clusterrolebindings")).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": grant},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": grant},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("system:node:{me}")}]
    })))
    .await
    .expect_code(201, "the ClusterRoleBinding");
    send(s.http().post(&leases).json(&lease(&other))).await.expect_code(201, "the other node's Lease");

    let want = format!(
        "leases.coordination.k8s.io \"{other}\" is forbidden: can only access node lease with the same name as the \
         requesting node"
    );
    // RBAC bindings reach the authorizer's cache asynchronously: retry while it is RBAC's 403.
    let mut refused = send(as_node.delete(format!("{leases}/{other}"))).await;
    for _ in 0..50 {
        if refused.body["message"] == json!(want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        refused = send(as_node.delete(format!("{leases}/{other}"))).await;
    }
    assert_status(&refused, 403, Some("Forbidden"), "the node deleting another node's Lease");
    assert_eq!(refused.body["message"], json!(want), "{}", refused.text);

    let selector = format!("{leases}?fieldSelector=metadata.name%3D{other}");
    let refused = send(as_node.delete(&selector)).await;
    assert_status(&refused, 403, Some("Forbidden"), "the node deleting a collection holding another node's Lease");
    assert_eq!(refused.body["message"], json!(want), "{}", refused.text);
    send(s.http().get(format!("{leases}/{other}"))).await.expect_code(200, "the other node's Lease is still there");

    send(as_node.post(&leases).json(&lease(&me))).await.expect_code(201, "the node's own Lease");
    send(as_node.delete(format!("{leases}/{me}"))).await.expect_code(200, "the node deleting its own Lease");
}
