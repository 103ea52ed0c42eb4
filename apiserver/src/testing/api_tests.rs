//! Who may do what (authentication, authorization, admission), unknown paths and kinds, and
//! custom resources served from a CRD, through the whole request path.

use std::time::Duration;

use axum::body::Body;
use http::Request;
use serde_json::{json, Value};

use super::{Caller, TestServer};

/// A CSR for `system:node:node-1` in `system:nodes` (ECDSA P-256).
const NODE_CSR_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHvMIGWAgEAMDQxFTATBgNVBAoMDHN5c3RlbTpub2RlczEbMBkGA1UEAwwSc3lz
dGVtOm5vZGU6bm9kZS0xMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEW9g/3BZn
qQq89W8OdvxQn2gQm4pNFYUONw1s+aV85g+5uaaym4bpiSymI5VZHpe8cQdrPRqV
G52KcgW+OfOqZKAAMAoGCCqGSM49BAMCA0gAMEUCIDBFTQJB6qa28AZSVCFmOoDk
PRLJEzRcnmAxHPak8K9RAiEAmpHPNQJo6I+M3cOtjbc3KW01pfAcHKAljUSvSnLA
TdQ=
-----END CERTIFICATE REQUEST-----
";

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

#[tokio::test]
async fn unknown_paths_and_kinds_are_404_statuses() {
    let srv = TestServer::new().await.unwrap();
    let cases = [
        ("unknown resource", "/api/v1/namespaces/default/widgets"),
        ("unknown group", "/apis/example.com/v1/widgets"),
        ("unknown version", "/api/v9/namespaces"),
        ("missing object", "/api/v1/namespaces/default/configmaps/nope"),
        ("unknown subresource", "/api/v1/namespaces/default/bogus"),
        (
            "cluster-scoped kind under a namespace",
            "/apis/certificates.k8s.io/v1/namespaces/default/certificatesigningrequests",
        ),
        ("not an API path", "/nothing/here"),
    ];
    for (name, path) in cases {
        let r = srv.get(&Caller::admin(), path).await;
        assert_eq!(r.status, 404, "{name}: {r}");
        assert_eq!(r.body["kind"], "Status", "{name}: {r}");
        assert_eq!(r.reason(), "NotFound", "{name}: {r}");
    }
}

#[tokio::test]
async fn who_may_do_what_table() {
    let srv = TestServer::new().await.unwrap();
    let created = srv.create_bootstrap_token("abcdef", "0123456789abcdef").await;
    assert_eq!(created.status, 201, "{created}");
    let token = Caller::bootstrap_token("abcdef", "0123456789abcdef");
    let bad_token = Caller::bootstrap_token("abcdef", "ffffffffffffffff");
    let alice = Caller::user("alice", &[]);
    let admin = Caller::admin();
    let node = Caller::node("n1");
    let unknown_token = Caller::Token("nope".into());
    let one_csr = format!("{CSRS}?fieldSelector=metadata.name%3Dmine");
    let cases: Vec<(&str, &Caller, &str, u16)> = vec![
        ("anonymous reads the version", &Caller::Anonymous, "/version", 200),
        ("admin lists configmaps", &admin, "/api/v1/namespaces/default/configmaps", 200),
        ("anonymous may not list configmaps", &Caller::Anonymous, "/api/v1/namespaces/default/configmaps", 403),
        ("anonymous may not list namespaces", &Caller::Anonymous, "/api/v1/namespaces", 403),
        ("a user without bindings may not list secrets", &alice, "/api/v1/namespaces/default/secrets", 403),
        ("a user may discover", &alice, "/apis", 200),
        ("a node may not read secrets", &node, "/api/v1/namespaces/default/secrets/x", 403),
        ("a node may not list namespaces", &node, "/api/v1/namespaces", 403),
        ("a bootstrap token may not list every CSR", &token, CSRS, 403),
        ("a bootstrap token lists one CSR by name", &token, &one_csr, 200),
        ("a wrong token secret is a 401", &bad_token, CSRS, 401),
        ("an unknown token is a 401", &unknown_token, "/version", 401),
    ];
    for (name, caller, path, code) in cases {
        let r = srv.get(caller, path).await;
        assert_eq!(r.status.as_u16(), code, "{name}: {r}");
        if code >= 400 {
            assert_eq!(r.body["kind"], "Status", "{name}: {r}");
        }
    }
    let denied = srv.get(&Caller::Anonymous, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(
        denied.message(),
        "configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() {
    let srv = TestServer::new().await.unwrap();
    let req =
        |path: &str| Request::builder().uri(path).header("Impersonate-User", "alice").body(Body::empty()).unwrap();
    let as_alice = srv.send(&Caller::admin(), req("/api/v1/namespaces/default/configmaps")).await;
    assert_eq!(as_alice.status(), 403, "the admin acts as alice, who may not list");
    let r = srv.send(&Caller::user("bob", &[]), req("/api/v1/namespaces/default/configmaps")).await;
    assert_eq!(r.status(), 403, "bob may not impersonate");
}

fn csr(name: &str) -> Value {
    use base64::Engine as _;
    json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(NODE_CSR_PEM),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        },
    })
}

fn approval(mut obj: Value) -> Value {
    obj["status"]["conditions"] = json!([{
        "type": "Approved", "status": "True", "reason": "Test", "message": "approved in a test",
    }]);
    obj
}

#[tokio::test]
async fn csr_approval_needs_approve_on_the_signer() {
    let srv = TestServer::new().await.unwrap();
    let admin = Caller::admin();
    let created = srv.post(&admin, CSRS, &csr("node-csr")).await;
    assert_eq!(created.status, 201, "{created}");
    // carol may update the approval subresource, but has no `approve` on any signer.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "csr-approval-writer"},
        "rules": [{"apiGroups": ["certificates.k8s.io"],
                   "resources": ["certificatesigningrequests", "certificatesigningrequests/approval"],
                   "verbs": ["get", "update"]}]});
    let r = srv.post(&admin, "/apis/rbac.authorization.k8s.io/v1/clusterroles", &role).await;
    assert_eq!(r.status, 201, "{r}");
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "carol-csr-approval-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "csr-approval-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]});
    let r = srv.post(&admin, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &binding).await;
    assert_eq!(r.status, 201, "{r}");

    let carol = Caller::user("carol", &[]);
    let path = format!("{CSRS}/node-csr/approval");
    let refused = srv.put(&carol, &path, &approval(created.body.clone())).await;
    assert_eq!(refused.status, 403, "{refused}");
    assert_eq!(refused.reason(), "Forbidden");
    assert!(refused.message().contains("user not permitted to approve requests with signerName"), "{refused}");
    let still = srv.get(&admin, &format!("{CSRS}/node-csr")).await;
    assert!(still.body["status"]["conditions"].is_null(), "not approved: {still}");

    let approved = srv.put(&admin, &path, &approval(still.body.clone())).await;
    assert_eq!(approved.status, 200, "{approved}");
    assert_eq!(approved.body["status"]["conditions"][0]["type"], "Approved");
}

#[tokio::test]
async fn csr_validation_errors_come_together() {
    let srv = TestServer::new().await.unwrap();
    let mut bad = csr("bad");
    bad["spec"]["signerName"] = json!("not a signer");
    bad["spec"]["usages"] = json!(["digital signature", "flying"]);
    bad["spec"]["expirationSeconds"] = json!(10);
    let r = srv.post(&Caller::admin(), CSRS, &bad).await;
    assert_eq!(r.status, 422, "{r}");
    assert_eq!(r.reason(), "Invalid");
    let fields: Vec<&str> =
        r.body["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    for want in ["spec.signerName", "spec.usages[1]", "spec.expirationSeconds"] {
        assert!(fields.contains(&want), "a cause for {want} in {fields:?}: {r}");
    }
}

#[tokio::test]
async fn a_crd_serves_its_custom_resources() {
    let srv = TestServer::new().await.unwrap();
    let admin = Caller::admin();
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    assert_eq!(srv.get(&admin, widgets).await.status, 404, "not served before the CRD");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}}},
            }}}],
        },
    });
    let r = srv.post(&admin, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await;
    assert_eq!(r.status, 201, "{r}");
    // The kind is served first and its Established condition written next (a client that
    // sees Established finds the endpoints): wait for both.
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
    let established = |crd: &Value| {
        crd["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
    };
    let ready = srv
        .eventually(Duration::from_secs(10), || async {
            let crd_now = srv.get(&admin, crd_path).await;
            (established(&crd_now.body) && srv.get(&admin, widgets).await.status == 200).then_some(())
        })
        .await;
    assert!(ready.is_some(), "widgets are served and the CRD is established: {}", srv.get(&admin, crd_path).await);

    let widget = |name: &str, size: i64| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}});
    let r = srv.post(&admin, widgets, &widget("w1", 3)).await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.body["spec"]["size"], 3);
    let invalid = srv.post(&admin, widgets, &widget("w2", 0)).await;
    assert_eq!(invalid.status, 422, "the schema is enforced: {invalid}");
    let list = srv.get(&admin, widgets).await;
    assert_eq!(list.status, 200, "{list}");
    assert_eq!(list.body["kind"], "WidgetList", "{list}");
    assert_eq!(list.body["items"].as_array().map(Vec::len), Some(1), "{list}");
    let patched = srv
        .patch(&admin, &format!("{widgets}/w1"), "application/merge-patch+json", &json!({"spec": {"size": 5}}))
        .await;
    assert_eq!(patched.status, 200, "{patched}");
    assert_eq!(patched.body["spec"]["size"], 5);
    let discovery = srv.get(&admin, "/apis/example.com/v1").await;
    assert_eq!(discovery.status, 200, "{discovery}");
    assert!(discovery.text.contains("\"widgets\""), "{discovery}");
}
