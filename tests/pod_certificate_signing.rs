//! A Signer of your own (`signers.kustos.dev`) with `spec.podCertificates` signs
//! PodCertificateRequests end to end against `kustos server`: a node (a `system:node:<name>`
//! certificate) requests a certificate for a pod bound to it that mounts the signer, and the
//! `signers` controller issues a chain that verifies against the Signer's v1
//! ClusterTrustBundle, naming the pod's service account as a SPIFFE ID, certifying the
//! request's key, for the Signer's capped lifetime; a request with a key type the Signer does
//! not list is `Denied` (`UnsupportedKeyType`); whoever creates a request, one naming a service
//! account its pod does not run as, or a pod that does not exist, is `Denied`
//! (`PodIdentityMismatch`), and one with annotations a Signer does not recognize too; a P-521
//! key is certified. The Signer counts its answers in
//! `status.podCertificates` and `/metrics` (`kustos_pcr_*_total`).
//!
//! Its CA rotates (`kustos ca rotate begin|switch|finish --signer`) without breaking a pod:
//! pod certificates issued before, during each phase and after all verify (`openssl verify`)
//! against the Signer's current ClusterTrustBundles (every bundle for its signer name, as a
//! kubelet's projection by signer name reads them); after `switch` says so, requests are
//! signed by the new CA; `finish` is refused while a pod certificate from the old CA may be
//! valid. Needs `openssl` (fails without it). Every wait is bounded.

mod common;

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use common::{issue_user, send, unique, Server};
use serde_json::{json, Value};

const SIGNERS: &str = "/apis/kustos.dev/v1alpha1/signers";
const CTBS: &str = "/apis/certificates.k8s.io/v1/clustertrustbundles";
const WAIT: Duration = Duration::from_secs(60);
const PCR_CONDITIONS: [&str; 3] = ["Issued", "Denied", "Failed"];

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

/// A Signer with `podCertificates`, and a pod on a node mounting it: what a kubelet needs to
/// request the pod's certificates.
struct Workload {
    signer_obj: String,
    signer_name: String,
    ns: String,
    pcrs: String,
    as_node: reqwest::Client,
    /// A request's spec but for its stub request.
    spec: Value,
}

async fn workload(s: &Server, pod_certificates: Value) -> Workload {
    let crds = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds");
    s.kubectl_ok(&["apply", "-f", crds.to_str().expect("path")]);
    s.kubectl_ok(&["wait", "--for=condition=Established", "crd/signers.kustos.dev", "--timeout=60s"]);
    let signer_obj = unique("mesh");
    let signer_name = format!("example.com/{signer_obj}");
    let signer = json!({"apiVersion": "kustos.dev/v1alpha1", "kind": "Signer", "metadata": {"name": signer_obj},
        "spec": {"signerName": signer_name, "usages": ["digital signature"], "podCertificates": pod_certificates}});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&signer.to_string()));
    assert!(out.status.success(), "kubectl create signer: {}", String::from_utf8_lossy(&out.stderr));
    // A node, a pod bound to it running as service account `web` and mounting the signer.
    let ns = s.create_namespace("pcs").await;
    let node = unique("node");
    let node_obj =
        create(s, "/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})).await;
    let sa = create(s, &format!("/api/v1/namespaces/{ns}/serviceaccounts"), json!({"metadata": {"name": "web"}})).await;
    let pod_name = unique("pod");
    let pod = create(
        s,
        &format!("/api/v1/namespaces/{ns}/pods"),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name},
               "spec": {"nodeName": node, "serviceAccountName": "web",
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                        "volumes": [{"name": "certs", "projected": {"sources": [{"podCertificate": {
                            "signerName": signer_name, "keyType": "ECDSAP256",
                            "credentialBundlePath": "bundle.pem"}}]}}]}}),
    )
    .await;
    let kubelet = issue_user(s, &format!("system:node:{node}"), &["system:nodes"]);
    let spec = json!({"signerName": signer_name, "podName": pod_name, "podUID": pod["metadata"]["uid"],
        "serviceAccountName": "web", "serviceAccountUID": sa["metadata"]["uid"],
        "nodeName": node, "nodeUID": node_obj["metadata"]["uid"], "maxExpirationSeconds": 86400});
    Workload {
        signer_obj,
        signer_name,
        pcrs: format!("/apis/certificates.k8s.io/v1/namespaces/{ns}/podcertificaterequests"),
        ns,
        as_node: s.http_with_identity(&kubelet.identity),
        spec,
    }
}

impl Workload {
    /// The node requests a certificate for `stub`; the request once it is answered.
    async fn request(&self, s: &Server, stub: &[u8]) -> Value {
        let name = unique("req");
        let mut spec = self.spec.clone();
        spec["stubPKCS10Request"] = json!(b64(stub));
        send(
            self.as_node
                .post(format!("{}{}", s.url, self.pcrs))
                .json(&json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await
        .expect_code(201, "the node's request");
        s.wait_for_object(&format!("{}/{name}", self.pcrs), "answered", WAIT, |o| {
            PCR_CONDITIONS.iter().any(|t| condition(o, t).is_some())
        })
        .await
    }

    /// A fresh P-256 key's certificate chain (PEM), which must be issued.
    async fn issue(&self, s: &Server) -> String {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let stub = rcgen::CertificateParams::default().serialize_request(&key).expect("stub").der().to_vec();
        let done = self.request(s, &stub).await;
        assert!(condition(&done, "Issued").is_some_and(|c| c["status"] == "True"), "not issued: {done}");
        done["status"]["certificateChain"].as_str().expect("a chain").to_string()
    }

    /// The CA certificates (DER, deduplicated) of every ClusterTrustBundle for the signer name,
    /// once they are `want` many.
    async fn trusted(&self, s: &Server, want: usize) -> Vec<Vec<u8>> {
        let deadline = std::time::Instant::now() + WAIT;
        let mut last = Vec::new();
        while std::time::Instant::now() < deadline {
            let list = send(s.http().get(format!("{}{CTBS}", s.url))).await;
            list.expect_code(200, "list ClusterTrustBundles");
            let mut cas: Vec<Vec<u8>> = Vec::new();
            for item in list.body["items"].as_array().into_iter().flatten() {
                if item["spec"]["signerName"] == self.signer_name.as_str() {
                    let pem = item["spec"]["trustBundle"].as_str().unwrap_or_default();
                    for der in kustos_ca::certificates_from_pem(pem).expect("the bundle's certificates") {
                        if !cas.contains(&der) {
                            cas.push(der);
                        }
                    }
                }
            }
            if cas.len() == want {
                return cas;
            }
            last = cas;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{}: {} CA(s) published, not {want}\n{}", self.signer_name, last.len(), s.stderr_tail());
    }
}

/// Whether `openssl verify` accepts the chain's leaf against `trusted` (PEM written out).
fn openssl_verifies(dir: &std::path::Path, chain: &str, trusted: &[Vec<u8>]) -> bool {
    let (chain_file, ca_file) = (dir.join("chain.pem"), dir.join("ca.pem"));
    std::fs::write(&chain_file, chain).expect("write");
    let bundle: String = trusted.iter().map(|d| kustos_ca::pem_encode("CERTIFICATE", d)).collect();
    std::fs::write(&ca_file, bundle).expect("write");
    let out = std::process::Command::new("openssl")
        .args(["verify", "-purpose", "sslclient", "-CAfile"])
        .args([&ca_file, &chain_file])
        .output()
        .expect("openssl must be installed for this test");
    out.status.success()
}

/// Which of `trusted` signed the chain's leaf (its index), if one did.
fn issuer(chain: &str, trusted: &[Vec<u8>]) -> Option<usize> {
    let leaf = kustos_ca::certificates_from_pem(chain).expect("PEM").remove(0);
    trusted.iter().position(|ca| kustos_ca::signed_by(&leaf, ca))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_issues_spiffe_certificates_to_pods() {
    common::ensure_kubectl();
    let s = Server::start();
    let w =
        workload(&s, json!({"trustDomain": "cluster.local", "maxExpirationSeconds": 7200, "keyTypes": ["ECDSAP256"]}))
            .await;
    let (obj, ns) = (&w.signer_obj, &w.ns);
    let ready = s
        .wait_for_object(&format!("{SIGNERS}/{obj}"), "Ready", WAIT, |o| {
            condition(o, "Ready").is_some_and(|c| c["status"] == "True") && o["status"]["trustBundle"].is_string()
        })
        .await;
    assert_eq!(ready["spec"]["podCertificates"]["trustDomain"], "cluster.local", "the field is kept: {ready}");
    let bundle_name = ready["status"]["trustBundle"].as_str().expect("trustBundle");
    let ctb = send(s.http().get(format!("{}{CTBS}/{bundle_name}", s.url))).await;
    ctb.expect_code(200, "the Signer's v1 ClusterTrustBundle");
    assert_eq!(ctb.body["spec"]["signerName"], w.signer_name.as_str(), "{}", ctb.text);
    let trusted = kustos_ca::certificates_from_pem(ctb.body["spec"]["trustBundle"].as_str().unwrap_or_default())
        .expect("the bundle's certificates");
    assert_eq!(trusted.len(), 1, "{}", ctb.text);
    assert_eq!(
        ready["status"]["caFingerprint"].as_str(),
        Some(kustos_ca::fingerprint(&trusted[0]).as_str()),
        "the status names the CA that signs: {ready}"
    );

    // A fresh P-256 key: Issued.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let pkix = rcgen::PublicKeyData::subject_public_key_info(&key);
    let stub = rcgen::CertificateParams::default().serialize_request(&key).expect("stub").der().to_vec();
    let done = w.request(&s, &stub).await;
    let issued = condition(&done, "Issued").unwrap_or_else(|| panic!("not issued: {done}"));
    assert_eq!(issued["status"], "True", "{done}");
    let chain_pem = done["status"]["certificateChain"].as_str().expect("a chain");
    let chain = kustos_ca::certificates_from_pem(chain_pem).expect("PEM certificates");
    assert_eq!(chain.len(), 2, "leaf, then the Signer's CA: {done}");
    assert_eq!(chain[1], trusted[0], "the chain ends at the CA the bundle publishes");
    assert!(kustos_ca::signed_by(&chain[0], &trusted[0]), "the leaf verifies against the ClusterTrustBundle");
    // openssl agrees (the leaf's critical SAN with an empty subject, its usages).
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(openssl_verifies(dir.path(), chain_pem, &trusted), "openssl verify: {chain_pem}");
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
    let done = w.request(&s, &go_stub("ed25519")).await;
    let denied = condition(&done, "Denied").unwrap_or_else(|| panic!("not denied: {done}"));
    assert_eq!((&denied["status"], &denied["reason"]), (&json!("True"), &json!("UnsupportedKeyType")), "{done}");
    assert!(done["status"]["certificateChain"].is_null(), "no certificate: {done}");

    // Both answers are counted: on the Signer and in /metrics.
    s.wait_for_object(&format!("{SIGNERS}/{obj}"), "the answers counted", WAIT, |o| {
        o["status"]["podCertificates"] == json!({"issued": 1, "denied": 1, "failed": 0})
    })
    .await;
    let metrics = send(s.http().get(format!("{}/metrics", s.url))).await;
    metrics.expect_code(200, "/metrics");
    for (series, want) in [("kustos_pcr_issued_total", 1), ("kustos_pcr_denied_total", 1)] {
        let line = format!("{series}{{signer=\"{}\"}} {want}", w.signer_name);
        assert!(metrics.text.lines().any(|l| l == line), "{line} in /metrics:\n{}", metrics.text);
    }
}

/// Whoever creates a request, only the identity the pod runs as is certified; a Signer denies
/// annotations it does not recognize; every key type the API takes is signed (P-521 too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_the_pod_is_gets_certified_whoever_asks() {
    common::ensure_kubectl();
    let s = Server::start();
    let w = workload(&s, json!({"trustDomain": "td.example"})).await;
    let powerful =
        create(&s, &format!("/api/v1/namespaces/{}/serviceaccounts", w.ns), json!({"metadata": {"name": "powerful"}}))
            .await;
    // Not a node (no NodeRestriction at create): the admin names the pod but another service
    // account, or a pod that does not exist.
    let ask = |edit: &dyn Fn(&mut Value)| {
        let mut spec = w.spec.clone();
        spec["stubPKCS10Request"] = json!(b64(&go_stub("p256")));
        edit(&mut spec);
        spec
    };
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "another service account of the namespace",
            ask(&|s| {
                s["serviceAccountName"] = json!("powerful");
                s["serviceAccountUID"] = powerful["metadata"]["uid"].clone();
            }),
            "PodIdentityMismatch",
            "runs as service account \"web\", not \"powerful\"",
        ),
        (
            "a pod that does not exist",
            ask(&|s| s["podName"] = json!("nobody")),
            "PodIdentityMismatch",
            "does not exist",
        ),
        (
            "an annotation the Signer does not recognize",
            ask(&|s| s["unverifiedUserAnnotations"] = json!({"evil.example/dns-names": "api.example.com"})),
            "InvalidUnverifiedUserAnnotations",
            "evil.example/dns-names",
        ),
    ];
    for (what, spec, reason, says) in cases {
        let name = unique("req");
        send(s.http().post(format!("{}{}", s.url, w.pcrs)).json(&json!({"metadata": {"name": name}, "spec": spec})))
            .await
            .expect_code(201, what);
        let done = s
            .wait_for_object(&format!("{}/{name}", w.pcrs), "answered", WAIT, |o| {
                PCR_CONDITIONS.iter().any(|t| condition(o, t).is_some())
            })
            .await;
        let denied = condition(&done, "Denied").unwrap_or_else(|| panic!("{what}: not denied: {done}"));
        assert_eq!(denied["reason"], reason, "{what}: {done}");
        assert!(denied["message"].as_str().is_some_and(|m| m.contains(says)), "{what}: {done}");
        assert!(done["status"]["certificateChain"].is_null(), "{what}: no certificate: {done}");
    }
    // The node's own request for a P-521 key: issued, for that key.
    let done = w.request(&s, &go_stub("p521")).await;
    assert!(condition(&done, "Issued").is_some_and(|c| c["status"] == "True"), "P-521: {done}");
    let chain = kustos_ca::certificates_from_pem(done["status"]["certificateChain"].as_str().unwrap_or_default())
        .expect("PEM certificates");
    let leaf = kustos_ca::parse_certificate_der(&chain[0]).expect("the leaf");
    let stub = kustos_ca::pod_certificate::parse_stub_request(&go_stub("p521")).expect("the stub");
    assert_eq!(leaf.public_key_der, stub.public_key_der, "the request's P-521 key");
    assert!(kustos_ca::signed_by(&chain[0], &chain[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_certificates_keep_verifying_through_a_ca_rotation() {
    common::ensure_kubectl();
    let s = Server::start();
    let w = workload(&s, json!({"trustDomain": "cluster.local", "maxExpirationSeconds": 3600})).await;
    let kubeconfig = s.kubeconfig.to_string_lossy().into_owned();
    let ca_cmd = |args: &[&str]| -> std::process::Output {
        let mut all = vec!["ca"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--signer", &w.signer_obj, "--kubeconfig", &kubeconfig]);
        common::kustos(&all)
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // Every chain issued so far, by phase: each must verify against the bundles at every later
    // step (none expires within the test: they last an hour).
    let mut chains: Vec<(&str, String)> = Vec::new();
    let check_all = |chains: &[(&str, String)], trusted: &[Vec<u8>], step: &str| {
        for (phase, chain) in chains {
            assert!(
                openssl_verifies(dir.path(), chain, trusted),
                "{step}: the pod certificate issued {phase} does not verify against the ClusterTrustBundles"
            );
        }
    };

    let old = w.trusted(&s, 1).await;
    chains.push(("before the rotation", w.issue(&s).await));
    assert_eq!(issuer(&chains[0].1, &old), Some(0));
    check_all(&chains, &old, "before");

    common::succeeded("ca rotate begin --signer", ca_cmd(&["rotate", "begin"]));
    let both = w.trusted(&s, 2).await;
    let new: Vec<Vec<u8>> = both.iter().filter(|c| !old.contains(c)).cloned().collect();
    assert_eq!(new.len(), 1, "begin publishes the new CA beside the old one");
    chains.push(("after begin", w.issue(&s).await));
    assert_eq!(issuer(&chains[1].1, &old), Some(0), "after begin the old CA still signs");
    check_all(&chains, &w.trusted(&s, 2).await, "begun");

    let out = common::succeeded("ca rotate switch --signer", ca_cmd(&["rotate", "switch"]));
    assert!(out.contains("signs from the new CA"), "switch waits for the controller: {out}");
    // From the moment switch says so, with no wait: the new CA signs.
    chains.push(("after switch", w.issue(&s).await));
    assert_eq!(issuer(&chains[2].1, &new), Some(0), "after switch the new CA signs");
    let trusted = w.trusted(&s, 2).await;
    check_all(&chains, &trusted, "switched");
    let signer = send(s.http().get(format!("{}{SIGNERS}/{}", s.url, w.signer_obj))).await.body;
    assert_eq!(signer["status"]["caFingerprint"].as_str(), Some(kustos_ca::fingerprint(&new[0]).as_str()), "{signer}");

    // No CSR was issued: only the pod certificates hold the old CA in the bundle.
    let status = common::succeeded("ca status --signer", ca_cmd(&["status"]));
    assert!(status.contains("finish: not safe: pod certificates from the previous CA may be valid until"), "{status}");
    let refused = ca_cmd(&["rotate", "finish"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "finish is refused while the old CA's pod certificates may be valid");
    assert!(stderr.contains("pod certificates issued by the previous CA"), "{stderr}");
    chains.push(("after a refused finish", w.issue(&s).await));
    check_all(&chains, &w.trusted(&s, 2).await, "after the refused finish");

    // Forced: the old CA leaves the bundle, and with it its pod certificates' trust (as told);
    // what the new CA signed keeps verifying, and it signs on.
    let forced = ca_cmd(&["rotate", "finish", "--force"]);
    common::succeeded("ca rotate finish --force", forced.clone());
    assert!(String::from_utf8_lossy(&forced.stderr).contains("pod certificates from the previous CA"), "{forced:?}");
    let last = w.trusted(&s, 1).await;
    assert_eq!(last, new, "only the new CA is published");
    chains.push(("after finish", w.issue(&s).await));
    for (phase, chain) in &chains {
        let from_old = issuer(chain, &old).is_some();
        assert_eq!(openssl_verifies(dir.path(), chain, &last), !from_old, "after the forced finish: {phase}");
    }
    s.wait_for_object(&format!("{SIGNERS}/{}", w.signer_obj), "the answers counted", WAIT, |o| {
        o["status"]["podCertificates"]["issued"] == 5
    })
    .await;
}
