//! The well-known `kubernetes.io/kube-apiserver-client-pod` signer end to end against
//! `kustos server`: a node (a `system:node:<name>` certificate) requests a certificate for a
//! pod bound to it; the key and the issued chain then authenticate as the pod's service
//! account with the pod and node bound in (SelfSubjectReview, `kubectl auth whoami`,
//! `kubectl auth can-i` and a real request under RBAC), until the pod is deleted. Refusals:
//! a key type the API refuses (422), user annotations (`Denied`). An ordinary client
//! certificate naming the service account as CN gets no service-account groups or pod
//! extras, as upstream. Every wait is bounded.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::{issue_user, send, unique, Server, User};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);
const SIGNER: &str = "kubernetes.io/kube-apiserver-client-pod";
const REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// A stub request Go made for `name`'s key (ca/src/testdata).
fn go_stub(name: &str) -> Vec<u8> {
    let v: Value = serde_json::from_str(include_str!("../ca/src/testdata/pod_certificate_keys.json")).expect("vectors");
    let k = v["keys"].as_array().and_then(|ks| ks.iter().find(|k| k["name"] == name)).expect("a Go key");
    base64::engine::general_purpose::STANDARD.decode(k["stub"].as_str().unwrap_or_default()).expect("base64")
}

async fn create(s: &Server, path: &str, obj: Value) -> Value {
    let r = send(s.http().post(format!("{}{path}", s.url)).json(&obj)).await;
    assert!(r.code == 201 || r.code == 200, "POST {path}: {} {}", r.code, r.text);
    r.body
}

async fn whoami(client: &reqwest::Client, s: &Server) -> common::Reply {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(client.post(format!("{}{REVIEWS}", s.url)).json(&review)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_authenticate_with_their_client_certificates() {
    common::ensure_kubectl();
    let s = Server::start();
    let ns = s.create_namespace("pcc").await;
    let node = unique("node");
    let node_obj =
        create(&s, "/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})).await;
    let sa =
        create(&s, &format!("/api/v1/namespaces/{ns}/serviceaccounts"), json!({"metadata": {"name": "web"}})).await;
    let pod_name = unique("pod");
    let pod = create(
        &s,
        &format!("/api/v1/namespaces/{ns}/pods"),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name},
               "spec": {"nodeName": node, "serviceAccountName": "web", "automountServiceAccountToken": false,
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                        "volumes": [{"name": "kube-api", "projected": {"sources": [{"podCertificate": {
                            "signerName": SIGNER, "keyType": "ECDSAP256",
                            "credentialBundlePath": "credentialbundle.pem"}}]}}]}}),
    )
    .await;
    let kubelet = issue_user(&s, &format!("system:node:{node}"), &["system:nodes"]);
    let as_node = s.http_with_identity(&kubelet.identity);
    let pcrs = format!("/apis/certificates.k8s.io/v1/namespaces/{ns}/podcertificaterequests");
    let request = |name: &str, stub: &[u8], annotations: Option<Value>| {
        let mut r = json!({"metadata": {"name": name}, "spec": {
            "signerName": SIGNER, "podName": pod_name, "podUID": pod["metadata"]["uid"],
            "serviceAccountName": "web", "serviceAccountUID": sa["metadata"]["uid"],
            "nodeName": node, "nodeUID": node_obj["metadata"]["uid"],
            "stubPKCS10Request": b64(stub)}});
        if let Some(a) = annotations {
            r["spec"]["unverifiedUserAnnotations"] = a;
        }
        r
    };
    let finished = |o: &Value| ["Issued", "Denied", "Failed"].iter().any(|t| condition(o, t).is_some());

    // The kubelet's request for a fresh P-256 key: Issued, with the leaf alone.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let stub = rcgen::CertificateParams::default().serialize_request(&key).expect("stub").der().to_vec();
    let name = unique("req");
    send(as_node.post(format!("{}{pcrs}", s.url)).json(&request(&name, &stub, None)))
        .await
        .expect_code(201, "the node's request");
    let done = s.wait_for_object(&format!("{pcrs}/{name}"), "Issued", WAIT, finished).await;
    let issued = condition(&done, "Issued").unwrap_or_else(|| panic!("not issued: {done}"));
    assert_eq!(issued["status"], "True", "{done}");
    let chain_pem = done["status"]["certificateChain"].as_str().expect("a chain").to_string();
    let chain = kustos_ca::certificates_from_pem(&chain_pem).expect("PEM certificates");
    assert_eq!(chain.len(), 1, "the leaf alone: {done}");
    let leaf = kustos_ca::parse_certificate_der(&chain[0]).expect("the leaf");
    assert_eq!(leaf.not_after - leaf.not_before, chrono::Duration::hours(24), "a day: {leaf:?}");
    assert!(leaf.common_name.is_empty() && leaf.uris.is_empty() && leaf.dns_names.is_empty(), "{leaf:?}");

    // The pod's credential bundle: key, then chain.
    let bundle = format!("{}{chain_pem}", key.serialize_pem());
    let as_pod = s.http_with_identity(bundle.as_bytes());
    let review = whoami(&as_pod, &s).await;
    review.expect_code(201, "SelfSubjectReview with the pod certificate");
    let info = &review.body["status"]["userInfo"];
    assert_eq!(info["username"], format!("system:serviceaccount:{ns}:web"), "{}", review.text);
    assert_eq!(info["uid"], sa["metadata"]["uid"], "the service account's UID: {}", review.text);
    assert_eq!(
        info["groups"],
        json!(["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"]),
        "{}",
        review.text
    );
    let extra = &info["extra"];
    assert_eq!(extra["authentication.kubernetes.io/pod-name"], json!([pod_name]), "{}", review.text);
    assert_eq!(extra["authentication.kubernetes.io/pod-uid"], json!([pod["metadata"]["uid"]]), "{}", review.text);
    assert_eq!(extra["authentication.kubernetes.io/node-name"], json!([node]), "{}", review.text);
    assert_eq!(extra["authentication.kubernetes.io/node-uid"], json!([node_obj["metadata"]["uid"]]), "{}", review.text);
    let credential = format!("X509SHA256={}", kustos_ca::pod_identity::sha256_hex(&chain[0]));
    assert_eq!(extra["authentication.kubernetes.io/credential-id"], json!([credential]), "{}", review.text);

    // kubectl with the bundle: whoami, can-i, and RBAC for the service account.
    let ca_crt = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("ca.crt");
    let yaml = kustos_apiserver::pki::kubeconfig_yaml(
        &s.url,
        &ca_crt,
        "web",
        kustos_apiserver::pki::KubeconfigAuth::ClientCert { cert_pem: chain_pem.clone(), key_pem: key.serialize_pem() },
    );
    let file = unique("pod");
    let kubeconfig = s.work_dir().join(format!("{file}.kubeconfig"));
    std::fs::write(&kubeconfig, yaml).expect("kubeconfig");
    let pod_user = User {
        name: "pod".into(),
        kubeconfig,
        identity: bundle.clone().into_bytes(),
        cache_dir: s.work_dir().join(format!("{file}-cache")),
    };
    let who = pod_user.kubectl_ok(&s, &["auth", "whoami", "-o", "json"]);
    assert!(who.contains(&format!("system:serviceaccount:{ns}:web")) && who.contains(&pod_name), "{who}");
    // `can-i` answers "no" with exit status 1.
    let can_i = |verb: &str, resource: &str| {
        let out = pod_user.kubectl(&s, &["auth", "can-i", verb, resource, "-n", &ns]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(can_i("list", "configmaps"), "no");
    s.kubectl_ok(&["create", "role", "cm-reader", "--verb=list", "--resource=configmaps", "-n", &ns]);
    s.kubectl_ok(&[
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        &format!("--serviceaccount={ns}:web"),
        "-n",
        &ns,
    ]);
    let mut allowed = String::new();
    for _ in 0..50 {
        allowed = can_i("list", "configmaps");
        if allowed == "yes" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(allowed, "yes", "the service account's binding applies to the pod certificate");
    pod_user.kubectl_ok(&s, &["get", "configmaps", "-n", &ns]);
    assert_eq!(can_i("list", "secrets"), "no");

    // An ordinary client certificate with the service account's name as CN: that user name,
    // none of the service-account groups, no pod extras (upstream's CN/O mapping): only the
    // certificate's credential id, as every client certificate's user has.
    let impostor = issue_user(&s, &format!("system:serviceaccount:{ns}:web"), &[]);
    let review = whoami(&s.http_with_identity(&impostor.identity), &s).await;
    review.expect_code(201, "SelfSubjectReview with a CN certificate");
    let info = &review.body["status"]["userInfo"];
    assert_eq!(info["groups"], json!(["system:authenticated"]), "{}", review.text);
    let extra: Vec<&String> = info["extra"].as_object().map(|m| m.keys().collect()).unwrap_or_default();
    assert_eq!(extra, ["authentication.kubernetes.io/credential-id"], "no pod extras: {}", review.text);
    assert!(
        info["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .is_some_and(|id| id.starts_with("X509SHA256=")),
        "{}",
        review.text
    );

    // Refusals: a key type the API refuses; user annotations the signer does not recognize.
    let r =
        send(as_node.post(format!("{}{pcrs}", s.url)).json(&request(&unique("rsa"), &go_stub("rsa2048"), None))).await;
    common::assert_status(&r, 422, Some("Invalid"), "an RSA-2048 key");
    let name = unique("ann");
    send(as_node.post(format!("{}{pcrs}", s.url)).json(&request(&name, &stub, Some(json!({"example.com/x": "1"})))))
        .await
        .expect_code(201, "a request with user annotations");
    let done = s.wait_for_object(&format!("{pcrs}/{name}"), "Denied", WAIT, finished).await;
    let denied = condition(&done, "Denied").unwrap_or_else(|| panic!("not denied: {done}"));
    assert_eq!(denied["reason"], "InvalidUnverifiedUserAnnotations", "{done}");
    assert!(done["status"]["certificateChain"].is_null(), "no certificate: {done}");

    // The pod is gone: its certificate authenticates nobody.
    let r = send(
        s.http()
            .delete(format!("{}/api/v1/namespaces/{ns}/pods/{pod_name}", s.url))
            .json(&json!({"gracePeriodSeconds": 0})),
    )
    .await;
    assert!(r.code == 200 || r.code == 202, "deleting the pod: {} {}", r.code, r.text);
    let mut code = 0;
    for _ in 0..100 {
        code = whoami(&as_pod, &s).await.code;
        if code == 401 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(code, 401, "the deleted pod's certificate");
}
