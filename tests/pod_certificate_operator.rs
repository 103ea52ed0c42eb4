//! Operator mode for pod certificates: `kustos controller-manager` running `signers` and
//! `podcertificaterequest-cleaner` against an apiserver it does not run in, as a user holding
//! only the roles `manifests/` ships for them (`kustos:controller:signers`, its kube-system
//! Role, `kustos:controller:podcertificaterequest-cleaner`), signs and then deletes a node's
//! PodCertificateRequest:
//! - against `kustos apiserver` serving `certificates.k8s.io/v1` (a stub request), and
//! - against one started with `--runtime-config=certificates.k8s.io/v1/podcertificaterequests=false`,
//!   serving PodCertificateRequests only as `v1beta1` (as kube-apiserver 1.34–1.36), with a
//!   request of the deprecated form (`pkixPublicKey` and `proofOfPossession`, no stub).
//!
//! The chain verifies against the Signer's ClusterTrustBundle and names the service account
//! as a SPIFFE ID. Needs `kubectl` and `openssl` (fails without them). Every wait is bounded.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::{issue_user, send, unique, ControllerManager, Server};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);
const CTBS: &str = "/apis/certificates.k8s.io/v1/clustertrustbundles";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

async fn create(s: &Server, path: &str, obj: Value) -> Value {
    let r = send(s.http().post(format!("{}{path}", s.url)).json(&obj)).await;
    assert!(r.code == 201 || r.code == 200, "POST {path}: {} {}", r.code, r.text);
    r.body
}

/// The roles manifests/ ships for the two controllers, bound to a user of their own.
async fn shipped_roles_user(s: &Server) -> common::User {
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/rbac-controller-manager.yaml"))
        .expect("reading the manifests' RBAC");
    let docs: Vec<Value> =
        format!("\n{rbac}").split("\n---\n").filter_map(|doc| serde_yaml::from_str::<Value>(doc).ok()).collect();
    let user = issue_user(s, &unique("pcr-operator"), &[]);
    let wanted = [
        ("ClusterRole", "kustos:controller:signers"),
        ("Role", "kustos:controller:signers"),
        ("ClusterRole", "kustos:controller:podcertificaterequest-cleaner"),
    ];
    for (kind, name) in wanted {
        let mut role = docs
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} in manifests/"))
            .clone();
        let own = unique("shipped");
        role["metadata"]["name"] = json!(own);
        let ns = role["metadata"]["namespace"].as_str().map(str::to_string);
        let base = match &ns {
            Some(ns) => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"),
            None => "/apis/rbac.authorization.k8s.io/v1".to_string(),
        };
        let plural = if kind == "Role" { "roles" } else { "clusterroles" };
        create(s, &format!("{base}/{plural}"), role).await;
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": format!("{kind}Binding"),
            "metadata": {"name": own},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": own},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user.name}]});
        create(s, &format!("{base}/{plural}").replace("roles", "rolebindings"), binding).await;
    }
    user
}

/// The DER ECDSA signature (SHA-256) of `msg` by `key`, made by openssl.
fn openssl_sign(key: &rcgen::KeyPair, msg: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, msg_file) = (dir.path().join("key.pem"), dir.path().join("msg"));
    std::fs::write(&key_file, key.serialize_pem()).expect("write");
    std::fs::write(&msg_file, msg).expect("write");
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .args([&key_file, &msg_file])
        .output()
        .expect("openssl must be installed for this test");
    assert!(out.status.success(), "openssl dgst: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The whole flow; `version` is the one PodCertificateRequests are served in.
async fn operator_signs_and_cleans(apiserver_args: &[&str], version: &str) {
    common::ensure_kubectl();
    let s = Server::apiserver_with(apiserver_args);
    let other = if version == "v1" { "v1beta1" } else { "v1" };
    let served_other = send(s.http().get(format!("{}/apis/certificates.k8s.io/{other}", s.url))).await;
    let lists_other = served_other.body["resources"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r["name"] == "podcertificaterequests"));
    assert_eq!(lists_other, version == "v1", "v1beta1 is served beside v1, v1 only when not turned off");
    let crds = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds");
    s.kubectl_ok(&["apply", "-f", crds.to_str().expect("path")]);
    s.kubectl_ok(&["wait", "--for=condition=Established", "crd/signers.kustos.dev", "--timeout=60s"]);
    let user = shipped_roles_user(&s).await;

    let obj = unique("mesh");
    let signer_name = format!("example.com/{obj}");
    create(
        &s,
        "/apis/kustos.dev/v1alpha1/signers",
        json!({"apiVersion": "kustos.dev/v1alpha1", "kind": "Signer", "metadata": {"name": obj},
               "spec": {"signerName": signer_name, "usages": ["digital signature"],
                        "podCertificates": {"trustDomain": "cluster.local", "maxExpirationSeconds": 7200}}}),
    )
    .await;
    let cm = ControllerManager::start_with_kubeconfig(
        &s,
        &user.kubeconfig,
        &["--controllers=signers", "--leader-elect=false"],
    );
    let ready = s
        .wait_for_object(&format!("/apis/kustos.dev/v1alpha1/signers/{obj}"), "Ready", WAIT, |o| {
            condition(o, "Ready").is_some_and(|c| c["status"] == "True") && o["status"]["trustBundle"].is_string()
        })
        .await;
    let bundle_name = ready["status"]["trustBundle"].as_str().expect("trustBundle");
    let ctb = send(s.http().get(format!("{}{CTBS}/{bundle_name}", s.url))).await;
    ctb.expect_code(200, "the Signer's ClusterTrustBundle, published with the shipped role");
    let trusted = kustos_ca::certificates_from_pem(ctb.body["spec"]["trustBundle"].as_str().unwrap_or_default())
        .expect("the bundle's certificates");

    // A node, a pod bound to it as service account `web`, and the node's request.
    let ns = s.create_namespace("pcop").await;
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
               "spec": {"nodeName": node, "serviceAccountName": "web",
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                        "volumes": [{"name": "certs", "projected": {"sources": [{"podCertificate": {
                            "signerName": signer_name, "keyType": "ECDSAP256",
                            "credentialBundlePath": "bundle.pem"}}]}}]}}),
    )
    .await;
    let pod_uid = pod["metadata"]["uid"].as_str().expect("pod uid");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let pkix = rcgen::PublicKeyData::subject_public_key_info(&key);
    let key_fields = if version == "v1" {
        let stub = rcgen::CertificateParams::default().serialize_request(&key).expect("stub").der().to_vec();
        json!({"stubPKCS10Request": b64(&stub)})
    } else {
        json!({"pkixPublicKey": b64(&pkix), "proofOfPossession": b64(&openssl_sign(&key, pod_uid))})
    };
    let mut spec = json!({"signerName": signer_name, "podName": pod_name, "podUID": pod_uid,
        "serviceAccountName": "web", "serviceAccountUID": sa["metadata"]["uid"],
        "nodeName": node, "nodeUID": node_obj["metadata"]["uid"], "maxExpirationSeconds": 86400});
    spec.as_object_mut().expect("object").extend(key_fields.as_object().expect("object").clone());
    let kubelet = issue_user(&s, &format!("system:node:{node}"), &["system:nodes"]);
    let pcrs = format!("/apis/certificates.k8s.io/{version}/namespaces/{ns}/podcertificaterequests");
    let name = unique("req");
    send(s.http_with_identity(&kubelet.identity).post(format!("{}{pcrs}", s.url)).json(&json!({
        "apiVersion": format!("certificates.k8s.io/{version}"), "kind": "PodCertificateRequest",
        "metadata": {"name": name}, "spec": spec})))
    .await
    .expect_code(201, "the node's request");
    let done = s
        .wait_for_object(&format!("{pcrs}/{name}"), "Issued", WAIT, |o| {
            ["Issued", "Denied", "Failed"].iter().any(|t| condition(o, t).is_some())
        })
        .await;
    let issued = condition(&done, "Issued").unwrap_or_else(|| panic!("not issued: {done}\n{}", cm.stderr_tail()));
    assert_eq!(issued["status"], "True", "{done}");
    let chain_pem = done["status"]["certificateChain"].as_str().expect("a chain");
    let chain = kustos_ca::certificates_from_pem(chain_pem).expect("PEM certificates");
    assert_eq!(chain.len(), 2, "leaf, then the Signer's CA: {done}");
    assert!(trusted.contains(&chain[1]), "the chain ends at the CA the bundle publishes");
    assert!(kustos_ca::signed_by(&chain[0], &chain[1]), "the leaf verifies against the ClusterTrustBundle");
    let dir = tempfile::tempdir().expect("tempdir");
    let (chain_file, ca_file) = (dir.path().join("chain.pem"), dir.path().join("ca.pem"));
    std::fs::write(&chain_file, chain_pem).expect("write");
    std::fs::write(&ca_file, ctb.body["spec"]["trustBundle"].as_str().unwrap_or_default()).expect("write");
    let out = std::process::Command::new("openssl")
        .args(["verify", "-purpose", "sslclient", "-CAfile"])
        .args([&ca_file, &chain_file])
        .output()
        .expect("openssl must be installed for this test");
    assert!(out.status.success(), "openssl verify: {}", String::from_utf8_lossy(&out.stderr));
    let leaf = kustos_ca::parse_certificate_der(&chain[0]).expect("the leaf");
    assert_eq!(leaf.uris, [format!("spiffe://cluster.local/ns/{ns}/sa/web")], "the SPIFFE ID");
    assert_eq!(leaf.public_key_der, pkix, "the request's key");
    assert!(!cm.stderr().contains("Forbidden"), "the shipped roles were enough:\n{}", cm.stderr_tail());
    drop(cm);

    // The cleaner, with the shipped role alone, deletes the request once it is old enough.
    let cleaner = ControllerManager::start_with_kubeconfig(
        &s,
        &user.kubeconfig,
        &[
            "--controllers=podcertificaterequest-cleaner",
            "--leader-elect=false",
            "--pod-certificate-request-cleaner-threshold=1s",
        ],
    );
    let path = format!("{}{pcrs}/{name}", s.url);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = send(s.http().get(&path)).await;
        if r.code == 404 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the request was not deleted:\n{}", cleaner.stderr_tail());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!cleaner.stderr().contains("Forbidden"), "the shipped role was enough:\n{}", cleaner.stderr_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_signs_and_cleans_v1_requests_with_the_shipped_roles() {
    operator_signs_and_cleans(&[], "v1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_signs_and_cleans_v1beta1_requests_where_only_v1beta1_is_served() {
    operator_signs_and_cleans(&["--runtime-config=certificates.k8s.io/v1/podcertificaterequests=false"], "v1beta1")
        .await;
}
