//! Service-account tokens bound to pods and nodes, end to end against the real binary: a node
//! (client certificate `system:node:<name>` in `system:nodes`) asks for tokens of the pods
//! bound to it, for the audiences their volumes use; the tokens carry the pod and its Node
//! (`kubernetes.io.pod`, `kubernetes.io.node`) and a `jti`, and SelfSubjectReview shows them
//! as the user's extra; a token bound to a Node stops verifying once the Node is deleted or
//! replaced; a TokenRequest naming another service account's uid is a conflict.

mod common;

use base64::Engine as _;
use common::{assert_status, issue_user, send, shared, unique, Reply, Server};
use serde_json::{json, Value};

const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// The unverified claims of a JWT.
fn claims(token: &str) -> Value {
    let seg = token.split('.').nth(1).expect("JWT payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(seg).expect("base64url payload");
    serde_json::from_slice(&bytes).expect("JSON payload")
}

async fn whoami(s: &Server, token: &str) -> Reply {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body)).await
}

async fn create(client: &reqwest::Client, s: &Server, path: &str, body: Value) -> Value {
    let r = send(client.post(format!("{}{path}", s.url)).json(&body)).await;
    r.expect_code(201, path);
    r.body
}

/// POST a TokenRequest for `sa` in `ns` as `client`.
async fn request_token(client: &reqwest::Client, s: &Server, ns: &str, sa: &str, body: Value) -> Reply {
    let url = format!("{}/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", s.url);
    send(client.post(url).json(&body)).await
}

fn token_request(bound: Value, audiences: &[&str]) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
           "spec": {"boundObjectRef": bound, "audiences": audiences}})
}

fn pod_ref(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid})
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().expect("metadata.uid").to_string()
}

/// A pod on `node` running as `sa`, with the API token volume and one for `vault`.
fn pod(name: &str, node: &str, sa: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": node, "serviceAccountName": sa,
        "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [
            {"name": "api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "vault", "projected": {"sources": [{"serviceAccountToken": {"path": "vault", "audience": "vault"}}]}},
        ],
    }})
}

fn extra(r: &Reply, key: &str) -> Value {
    r.body["status"]["userInfo"]["extra"][key].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_tokens_of_their_own_pods_bound_to_pod_and_node() {
    let s = shared();
    let admin = s.http();
    let ns = unique("ntok");
    create(&admin, &s, "/api/v1/namespaces", json!({"metadata": {"name": ns}})).await;
    let sa = create(
        &admin,
        &s,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        json!({"metadata": {"name": "builder"}}),
    )
    .await;
    let (n1, n2) = (unique("node-a"), unique("node-b"));
    let node1 = create(&admin, &s, "/api/v1/nodes", json!({"metadata": {"name": n1}})).await;
    create(&admin, &s, "/api/v1/nodes", json!({"metadata": {"name": n2}})).await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let web = create(&admin, &s, &pods, pod("web", &n1, "builder")).await;
    let elsewhere = create(&admin, &s, &pods, pod("elsewhere", &n2, "builder")).await;
    let kubelet = issue_user(&s, &format!("system:node:{n1}"), &["system:nodes"]);
    let kubelet = s.http_with_identity(&kubelet.identity);

    // The node asks for its pod's token, for the API and for an audience the pod uses.
    let r = request_token(&kubelet, &s, &ns, "builder", token_request(pod_ref("web", &uid(&web)), &[])).await;
    r.expect_code(201, "a node's token for its own pod");
    let token = r.body["status"]["token"].as_str().expect("a token").to_string();
    let c = claims(&token);
    let jti = c["jti"].as_str().expect("a jti").to_string();
    assert_eq!(jti.len(), 36, "jti is a UUID: {jti}");
    assert_eq!(c["kubernetes.io"]["pod"], json!({"name": "web", "uid": uid(&web)}));
    assert_eq!(c["kubernetes.io"]["node"], json!({"name": n1, "uid": uid(&node1)}));
    let vault =
        request_token(&kubelet, &s, &ns, "builder", token_request(pod_ref("web", &uid(&web)), &["vault"])).await;
    vault.expect_code(201, "an audience the pod's volumes use");
    assert_ne!(claims(vault.body["status"]["token"].as_str().unwrap_or_default())["jti"], json!(jti), "one jti each");

    // The pod's identity, as SelfSubjectReview shows it.
    let me = whoami(&s, &token).await;
    me.expect_code(201, "SelfSubjectReview with the pod-bound token");
    assert_eq!(me.body["status"]["userInfo"]["username"], format!("system:serviceaccount:{ns}:builder"));
    assert_eq!(me.body["status"]["userInfo"]["uid"], json!(uid(&sa)));
    assert_eq!(extra(&me, "authentication.kubernetes.io/credential-id"), json!([format!("JTI={jti}")]));
    assert_eq!(extra(&me, "authentication.kubernetes.io/pod-name"), json!(["web"]));
    assert_eq!(extra(&me, "authentication.kubernetes.io/pod-uid"), json!([uid(&web)]));
    assert_eq!(extra(&me, "authentication.kubernetes.io/node-name"), json!([n1]));
    assert_eq!(extra(&me, "authentication.kubernetes.io/node-uid"), json!([uid(&node1)]));

    // What a node may not ask for.
    let forbidden = |why: &str| format!("serviceaccounts \"builder\" is forbidden: {why}");
    let cases: Vec<(&str, Value, String)> = vec![
        (
            "another node's pod",
            token_request(pod_ref("elsewhere", &uid(&elsewhere)), &[]),
            forbidden("node requested token bound to a pod scheduled on a different node"),
        ),
        (
            "an audience no volume of the pod uses",
            token_request(pod_ref("web", &uid(&web)), &["attacker.example"]),
            forbidden(&format!(
                "audience \"attacker.example\" not found in pod spec volume, system:node:{n1} is not authorized to \
                 request tokens for this audience"
            )),
        ),
        (
            "two audiences",
            token_request(pod_ref("web", &uid(&web)), &["", "vault"]),
            forbidden("node may only request 0 or 1 audiences"),
        ),
        (
            "a token bound to its Node",
            token_request(json!({"apiVersion": "v1", "kind": "Node", "name": n1, "uid": uid(&node1)}), &[]),
            forbidden("node requested token not bound to a pod"),
        ),
        ("an unbound token", token_request(Value::Null, &[]), forbidden("node requested token not bound to a pod")),
        (
            "a pod binding without its uid",
            token_request(json!({"apiVersion": "v1", "kind": "Pod", "name": "web"}), &[]),
            forbidden("node requested token with a pod binding without a uid"),
        ),
        (
            "a pod that was replaced",
            token_request(pod_ref("web", "0b0e1c9a-0000-4000-8000-000000000000"), &[]),
            forbidden(
                "the UID in the bound object reference (0b0e1c9a-0000-4000-8000-000000000000) does not match the UID \
                 in record. The object might have been deleted and then recreated",
            ),
        ),
    ];
    for (what, body, message) in cases {
        let r = request_token(&kubelet, &s, &ns, "builder", body).await;
        assert_status(&r, 403, Some("Forbidden"), what);
        assert_eq!(r.body["message"], json!(message), "{what}");
    }
    let r = request_token(&kubelet, &s, &ns, "builder", token_request(pod_ref("ghost", "u"), &[])).await;
    assert_status(&r, 404, Some("NotFound"), "a pod that does not exist");
    // A service account no pod bound to the node runs as: 403 as upstream's Node authorizer
    // words it, whatever the pod named (none, or another node's), so nothing about other
    // namespaces' pods shows.
    let other_ns = unique("hidden");
    create(&admin, &s, "/api/v1/namespaces", json!({"metadata": {"name": other_ns}})).await;
    create(&admin, &s, &format!("/api/v1/namespaces/{other_ns}/serviceaccounts"), json!({"metadata": {"name": "db"}}))
        .await;
    let theirs = create(&admin, &s, &format!("/api/v1/namespaces/{other_ns}/pods"), pod("db-0", &n2, "db")).await;
    for (what, bound) in
        [("no such pod", pod_ref("nobody", "u")), ("another node's pod", pod_ref("db-0", &uid(&theirs)))]
    {
        let r = request_token(&kubelet, &s, &other_ns, "db", token_request(bound, &[])).await;
        assert_status(&r, 403, Some("Forbidden"), what);
        assert_eq!(
            r.body["message"],
            json!(format!(
                "serviceaccounts \"db\" is forbidden: User \"system:node:{n1}\" cannot create resource \
                 \"serviceaccounts/token\" in API group \"\" in the namespace \"{other_ns}\": no relationship found \
                 between node '{n1}' and this object"
            )),
            "{what}"
        );
    }

    // A token bound to the Node itself (an administrator's), refused once the Node is gone
    // and when a Node of the same name replaces it; the pod-bound token lives on (its pod does).
    let bound_node = json!({"apiVersion": "v1", "kind": "Node", "name": n1});
    let r = request_token(&admin, &s, &ns, "builder", token_request(bound_node, &[])).await;
    r.expect_code(201, "a Node-bound token");
    let node_token = r.body["status"]["token"].as_str().expect("a token").to_string();
    assert_eq!(claims(&node_token)["kubernetes.io"]["node"], json!({"name": n1, "uid": uid(&node1)}));
    assert_eq!(claims(&node_token)["kubernetes.io"]["pod"], Value::Null);
    let me = whoami(&s, &node_token).await;
    me.expect_code(201, "SelfSubjectReview with the Node-bound token");
    assert_eq!(extra(&me, "authentication.kubernetes.io/node-uid"), json!([uid(&node1)]));
    assert_eq!(extra(&me, "authentication.kubernetes.io/pod-name"), Value::Null);

    send(admin.delete(format!("{}/api/v1/nodes/{n1}", s.url))).await.expect_code(200, "deleting the Node");
    assert_status(&whoami(&s, &node_token).await, 401, Some("Unauthorized"), "the Node is gone");
    whoami(&s, &token).await.expect_code(201, "the pod-bound token names the Node but is bound to the pod");
    let replaced = create(&admin, &s, "/api/v1/nodes", json!({"metadata": {"name": n1}})).await;
    assert_ne!(uid(&replaced), uid(&node1));
    assert_status(&whoami(&s, &node_token).await, 401, Some("Unauthorized"), "the Node was replaced");

    // kubectl binds to a Node too.
    let by_kubectl = s.kubectl_ok(&[
        "create",
        "token",
        "builder",
        "-n",
        &ns,
        "--bound-object-kind",
        "Node",
        "--bound-object-name",
        &n2,
    ]);
    let node2 = send(admin.get(format!("{}/api/v1/nodes/{n2}", s.url))).await;
    assert_eq!(claims(by_kubectl.trim())["kubernetes.io"]["node"], json!({"name": n2, "uid": uid(&node2.body)}));
    whoami(&s, by_kubectl.trim()).await.expect_code(201, "kubectl's Node-bound token");

    // The TokenRequest's uid must be the service account's.
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                      "metadata": {"uid": "8c0ab2f4-0000-4000-8000-000000000000"}, "spec": {}});
    let r = request_token(&admin, &s, &ns, "builder", body).await;
    assert_status(&r, 409, Some("Conflict"), "another uid");
    assert_eq!(
        r.body["message"],
        json!(format!(
            "Operation cannot be fulfilled on TokenRequest.authentication.k8s.io \"builder\": the UID in the token \
             request (8c0ab2f4-0000-4000-8000-000000000000) does not match the UID of the service account ({})",
            uid(&sa)
        ))
    );
    let r = request_token(&admin, &s, &ns, "builder", json!({"metadata": {"uid": uid(&sa)}, "spec": {}})).await;
    r.expect_code(201, "the service account's own uid");
    assert_eq!(r.body["metadata"]["uid"], json!(uid(&sa)));
}
