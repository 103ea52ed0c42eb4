//! NodeRestriction: a node (its own client certificate, group `system:nodes`) manages only
//! its own Lease in `kube-node-lease`, also when the name comes in the body of a create, and
//! also when RBAC would let it delete more; it deletes only the pods bound to it (one by one
//! and in a delete-collection), creates only mirror pods owned by its own Node, and evicts
//! nothing (`pods/eviction` is not served).

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

fn pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
}

/// Bind `node` (a user) to a new ClusterRole with `rules`, as the admin.
async fn grant(s: &common::Server, node: &str, rules: Value) {
    let rbac = format!("{}/apis/rbac.authorization.k8s.io/v1", s.url);
    let name = unique("node-grant");
    send(s.http().post(format!("{rbac}/clusterroles")).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules
    })))
    .await
    .expect_code(201, "the ClusterRole");
    send(s.http().post(format!("{rbac}/clusterrolebindings")).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": node}]
    })))
    .await
    .expect_code(201, "the ClusterRoleBinding");
}

/// A node may delete pods (the `system:node` rules grant it), but only those bound to it:
/// upstream's NodeRestriction reads the stored pod. A delete-collection that RBAC allows is
/// checked item by item. Evictions are not served at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deletes_only_the_pods_bound_to_it() {
    let s = common::shared();
    let ns = s.create_namespace("node-pods").await;
    let me = unique("node-e");
    let other = unique("node-f");
    let user = format!("system:node:{me}");
    let node = issue_user(&s, &user, &["system:nodes"]);
    let as_node = s.http_with_identity(&node.identity);
    let pods = format!("{}/api/v1/namespaces/{ns}/pods", s.url);
    let (mine, theirs) = (unique("mine"), unique("theirs"));
    send(s.http().post(&pods).json(&pod(&mine, &me))).await.expect_code(201, "a pod bound to the node");
    send(s.http().post(&pods).json(&pod(&theirs, &other))).await.expect_code(201, "a pod bound to another node");

    let want =
        format!("pods \"{theirs}\" is forbidden: node \"{me}\" can only delete pods with spec.nodeName set to itself");
    let refused = send(as_node.delete(format!("{pods}/{theirs}"))).await;
    assert_status(&refused, 403, Some("Forbidden"), "the node deleting another node's pod");
    assert_eq!(refused.body["message"], json!(want), "{}", refused.text);
    assert_eq!(refused.body["details"], json!({"name": theirs, "kind": "pods"}), "{}", refused.text);
    send(s.http().get(format!("{pods}/{theirs}"))).await.expect_code(200, "the other node's pod is still there");

    // As upstream: the pod is read first, so a pod that is not there is 404.
    let missing = send(as_node.delete(format!("{pods}/{}", unique("gone")))).await;
    assert_status(&missing, 404, Some("NotFound"), "the node deleting a pod that does not exist");

    // Evictions are not served (upstream lets a node evict only its own pods).
    let eviction =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": theirs, "namespace": ns}});
    let evicted = send(as_node.post(format!("{pods}/{theirs}/eviction")).json(&eviction)).await;
    assert_eq!(evicted.code, 404, "pods/eviction is not served: {}", evicted.text);
    send(s.http().get(format!("{pods}/{theirs}"))).await.expect_code(200, "the other node's pod is still there");

    // RBAC may grant deletecollection; every item still passes NodeRestriction.
    grant(&s, &user, json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["deletecollection"]}])).await;
    let selector = format!("{pods}?fieldSelector=metadata.name%3D{theirs}");
    // RBAC bindings reach the authorizer's cache asynchronously: retry while it is RBAC's 403.
    let mut refused = send(as_node.delete(&selector)).await;
    for _ in 0..50 {
        if refused.body["message"] == json!(want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        refused = send(as_node.delete(&selector)).await;
    }
    assert_status(&refused, 403, Some("Forbidden"), "the node deleting a collection holding another node's pod");
    assert_eq!(refused.body["message"], json!(want), "{}", refused.text);
    send(s.http().get(format!("{pods}/{theirs}"))).await.expect_code(200, "the other node's pod is still there");

    send(as_node.delete(format!("{pods}/{mine}"))).await.expect_code(200, "the node deleting its own pod");
    send(s.http().get(format!("{pods}/{mine}"))).await.expect_code(404, "its own pod is gone");
}

/// A node creates only mirror pods owned by its own Node object, as upstream: one owner
/// reference, to its Node by name and by the stored uid (a Node deleted and registered again
/// has a new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_creates_only_mirror_pods_owned_by_its_own_node() {
    let s = common::shared();
    let ns = s.create_namespace("mirror-pods").await;
    let me = unique("node-g");
    let node = issue_user(&s, &format!("system:node:{me}"), &["system:nodes"]);
    let as_node = s.http_with_identity(&node.identity);
    let pods = format!("{}/api/v1/namespaces/{ns}/pods", s.url);
    let mirror = |name: &str, owners: Value| {
        let mut p = pod(name, &me);
        p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
        p["metadata"]["ownerReferences"] = owners;
        p
    };
    let owner = |uid: &str| json!([{"apiVersion": "v1", "kind": "Node", "name": me, "uid": uid, "controller": true}]);
    let forbidden = |name: &str, why: &str| format!("pods \"{name}\" is forbidden: {why}");

    // Before its Node exists: upstream's 404 for the owner it cannot check.
    let early = unique("early");
    let r = send(as_node.post(&pods).json(&mirror(&early, owner("whatever")))).await;
    assert_status(&r, 404, Some("NotFound"), "a mirror pod before the node registered");

    let registered = send(as_node.post(format!("{}/api/v1/nodes", s.url)).json(&json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": me}
    })))
    .await;
    registered.expect_code(201, "the node registering itself");
    let uid = registered.body["metadata"]["uid"].as_str().expect("the Node's uid").to_string();

    let unowned = unique("unowned");
    let r = send(as_node.post(&pods).json(&mirror(&unowned, json!([])))).await;
    assert_status(&r, 403, Some("Forbidden"), "a mirror pod without an owner");
    let why = format!("node \"{me}\" can only create pods with an owner reference set to itself");
    assert_eq!(r.body["message"], json!(forbidden(&unowned, &why)), "{}", r.text);

    let stale = unique("stale");
    let r = send(as_node.post(&pods).json(&mirror(&stale, owner("not-the-uid")))).await;
    assert_status(&r, 403, Some("Forbidden"), "a mirror pod owned by an older Node of the same name");
    let why = format!("node {me} UID mismatch: expected not-the-uid got {uid}");
    assert_eq!(r.body["message"], json!(forbidden(&stale, &why)), "{}", r.text);

    let good = unique("etcd");
    send(as_node.post(&pods).json(&mirror(&good, owner(&uid)))).await.expect_code(201, "its own mirror pod");
    for name in [&early, &unowned, &stale] {
        send(s.http().get(format!("{pods}/{name}"))).await.expect_code(404, "no refused pod was stored");
    }
}
