//! A Signer of your own (`signers.kustos.dev`) with `spec.podCertificates` signs
//! PodCertificateRequests end to end against `kustos server`: a node (a `system:node:<name>`
//! certificate) requests a certificate for a pod bound to it that mounts the signer, and the
//! `signers` controller issues a chain that verifies against the Signer's v1
//! ClusterTrustBundle, naming the pod's service account as a SPIFFE ID, certifying the
//! request's key, for the Signer's capped lifetime; a request with a key type the Signer does
//! not list is `Denied` (`UnsupportedKeyType`). Needs `openssl` (fails without it). Every
//! wait is bounded.

mod common;

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use common::{issue_user, send, unique, Server};
use serde_json::{json, Value};

const SIGNERS: &str = "/apis/kustos.dev/v1alpha1/signers";
const CTBS: &str = "/apis/certificates.k8s.io/v1/clustertrustbundles";
const WAIT: Duration = Duration::from_secs(60);

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().expect("a time")).expect("RFC 3339").with_timezone(&Utc)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_issues_spiffe_certificates_to_pods() {
    common::ensure_kubectl();
    let s = Server::start();
    let crds = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds");
    s.kubectl_ok(&["apply", "-f", crds.to_str().expect("path")]);
    s.kubectl_ok(&["wait", "--for=condition=Established", "crd/signers.kustos.dev", "--timeout=60s"]);
    let obj = unique("mesh");
    let signer_name = format!("example.com/{obj}");
    let signer = json!({"apiVersion": "kustos.dev/v1alpha1", "kind": "Signer", "metadata": {"name": obj},
        "spec": {"signerName": signer_name, "usages": ["digital signature"],
                 "podCertificates": {"trustDomain": "cluster.local", "maxExpirationSeconds": 7200,
                                     "keyTypes": ["ECDSAP256"]}}});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&signer.to_string()));
    assert!(out.status.success(), "kubectl create signer: {}", String::from_utf8_lossy(&out.stderr));
    let ready = s
        .wait_for_object(&format!("{SIGNERS}/{obj}"), "Ready", WAIT, |o| {
            condition(o, "Ready").is_some_and(|c| c["status"] == "True") && o["status"]["trustBundle"].is_string()
        })
        .await;
    assert_eq!(ready["spec"]["podCertificates"]["trustDomain"], "cluster.local", "the field is kept: {ready}");
    let bundle_name = ready["status"]["trustBundle"].as_str().expect("trustBundle");
    let ctb = send(s.http().get(format!("{}{CTBS}/{bundle_name}", s.url))).await;
    ctb.expect_code(200, "the Signer's v1 ClusterTrustBundle");
    assert_eq!(ctb.body["spec"]["signerName"], signer_name.as_str(), "{}", ctb.text);
    let trusted = kustos_ca::certificates_from_pem(ctb.body["spec"]["trustBundle"].as_str().unwrap_or_default())
        .expect("the bundle's certificates");
    assert_eq!(trusted.len(), 1, "{}", ctb.text);

    // A node, a pod bound to it running as service account `web` and mounting the signer.
    let ns = s.create_namespace("pcs").await;
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
    let kubelet = issue_user(&s, &format!("system:node:{node}"), &["system:nodes"]);
    let as_node = s.http_with_identity(&kubelet.identity);
    let pcrs = format!("/apis/certificates.k8s.io/v1/namespaces/{ns}/podcertificaterequests");
    let request = |name: &str, stub: &[u8]| {
        json!({"metadata": {"name": name}, "spec": {
            "signerName": signer_name, "podName": pod_name, "podUID": pod["metadata"]["uid"],
            "serviceAccountName": "web", "serviceAccountUID": sa["metadata"]["uid"],
            "nodeName": node, "nodeUID": node_obj["metadata"]["uid"], "maxExpirationSeconds": 86400,
            "stubPKCS10Request": b64(stub)}})
    };

    // A fresh P-256 key: Issued.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let pkix = rcgen::PublicKeyData::subject_public_key_info(&key);
    let stub = rcgen::CertificateParams::default().serialize_request(&key).expect("stub").der().to_vec();
    let name = unique("req");
    send(as_node.post(format!("{}{pcrs}", s.url)).json(&request(&name, &stub)))
        .await
        .expect_code(201, "the node's request");
    let done = s
        .wait_for_object(&format!("{pcrs}/{name}"), "Issued", WAIT, |o| {
            ["Issued", "Denied", "Failed"].iter().any(|t| condition(o, t).is_some())
        })
        .await;
    let issued = condition(&done, "Issued").unwrap_or_else(|| panic!("not issued: {done}"));
    assert_eq!(issued["status"], "True", "{done}");
    let chain = kustos_ca::certificates_from_pem(done["status"]["certificateChain"].as_str().expect("a chain"))
        .expect("PEM certificates");
    assert_eq!(chain.len(), 2, "leaf, then the Signer's CA: {done}");
    assert_eq!(chain[1], trusted[0], "the chain ends at the CA the bundle publishes");
    assert!(kustos_ca::signed_by(&chain[0], &trusted[0]), "the leaf verifies against the ClusterTrustBundle");
    // openssl agrees (the leaf's critical SAN with an empty subject, its usages).
    let dir = tempfile::tempdir().expect("tempdir");
    let (chain_file, ca_file) = (dir.path().join("chain.pem"), dir.path().join("ca.pem"));
    std::fs::write(&chain_file, done["status"]["certificateChain"].as_str().unwrap_or_default()).expect("write");
    std::fs::write(&ca_file, ctb.body["spec"]["trustBundle"].as_str().unwrap_or_default()).expect("write");
    let out = std::process::Command::new("openssl")
        .args(["verify", "-purpose", "sslclient", "-CAfile"])
        .args([&ca_file, &chain_file])
        .output()
        .expect("openssl must be installed for this test");
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let leaf = kustos_ca::parse_certificate_der(&chain[0]).expect("the leaf");
    assert_eq!(leaf.uris, [format!("spiffe://cluster.local/ns/{ns}/sa/web")], "the SPIFFE ID");
    assert!(leaf.common_name.is_empty() && leaf.dns_names.is_empty(), "no other name: {leaf:?}");
    assert_eq!(leaf.public_key_der, pkix, "the request's key");
    let mut usages: Vec<&str> = leaf.usages.iter().map(|u| u.as_k8s()).collect();
    usages.sort_unstable();
    assert_eq!(usages, ["client auth", "digital signature", "server auth"]);
    let (not_before, not_after) = (time(&done["status"]["notBefore"]), time(&done["status"]["notAfter"]));
    assert_eq!((not_before, not_after), (leaf.not_before, leaf.not_after), "the status carries the leaf's times");
    assert_eq!(not_after - not_before, chrono::Duration::seconds(7200), "the Signer's cap beats the request's day");
    let refresh = time(&done["status"]["beginRefreshAt"]);
    assert!(refresh > not_before && refresh < not_after, "beginRefreshAt {refresh} within the validity");

    // A key type the Signer does not list: Denied.
    let name = unique("ed");
    send(as_node.post(format!("{}{pcrs}", s.url)).json(&request(&name, &go_stub("ed25519"))))
        .await
        .expect_code(201, "an Ed25519 request (the API takes it)");
    let done = s
        .wait_for_object(&format!("{pcrs}/{name}"), "Denied", WAIT, |o| {
            ["Issued", "Denied", "Failed"].iter().any(|t| condition(o, t).is_some())
        })
        .await;
    let denied = condition(&done, "Denied").unwrap_or_else(|| panic!("not denied: {done}"));
    assert_eq!((&denied["status"], &denied["reason"]), (&json!("True"), &json!("UnsupportedKeyType")), "{done}");
    assert!(done["status"]["certificateChain"].is_null(), "no certificate: {done}");
}
