//! NodeRestriction: a node (its own client certificate, group `system:nodes`) manages only
//! its own Lease in `kube-node-lease`, also when the name comes in the body of a create.

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
