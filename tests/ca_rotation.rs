//! `kustos ca rotate begin|switch|finish` against a running `kustos server`: clients keep
//! working throughout (the admin's certificate, a service-account token, a watch), a node's
//! certificate renewed across the switch verifies before and after, every published bundle
//! (`kube-root-ca.crt`, `cluster-info`, the signers' ClusterTrustBundles) holds the right CAs
//! at each step and the old CA is gone from all of them at the end, and a command or server
//! killed between steps resumes. Every wait is bounded.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{kustos, kustos_ok, send, unique, Server, WatchLines};
use serde_json::{json, Value};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const WAIT: Duration = Duration::from_secs(60);

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn fingerprints(pem: &str) -> Vec<String> {
    if pem.trim().is_empty() {
        return vec![];
    }
    kustos_ca::certificates_from_pem(pem).expect("PEM certificates").iter().map(|d| kustos_ca::fingerprint(d)).collect()
}

fn ca_file(s: &Server) -> String {
    std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("reading ca.crt")
}

/// A kubelet client CSR `name` for `node`, approved by the admin; returns the issued
/// certificate (DER) and the identity (key + certificate PEM).
async fn node_certificate_as(s: &Server, name: &str, node: &str) -> (Vec<u8>, Vec<u8>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(request.as_bytes()), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"]}});
    send(s.http().post(format!("{}{CSRS}", s.url)).json(&csr)).await.expect_code(201, "creating the CSR");
    // Approve; a write racing with a controller's (409) is retried on a fresh read.
    for attempt in 0..20 {
        let mut got = send(s.http().get(format!("{}{CSRS}/{name}", s.url))).await.body;
        if got["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Approved")) {
            break;
        }
        got["status"]["conditions"] =
            json!([{"type": "Approved", "status": "True", "reason": "E2E", "message": "test"}]);
        let r = send(s.http().put(format!("{}{CSRS}/{name}/approval", s.url)).json(&got)).await;
        if r.code == 200 {
            break;
        }
        assert!(r.code == 409 && attempt < 19, "approving {name}: {} {}", r.code, r.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = s
        .wait_for_object(&format!("{CSRS}/{name}"), "a certificate", WAIT, |c| {
            c["status"]["certificate"].as_str().is_some_and(|c| !c.is_empty())
        })
        .await;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(done["status"]["certificate"].as_str().unwrap_or_default())
        .expect("base64 certificate");
    let der = kustos_ca::certificates_from_pem(std::str::from_utf8(&pem).expect("PEM")).expect("PEM")[0].clone();
    let mut identity = key.serialize_pem().into_bytes();
    identity.extend_from_slice(&pem);
    (der, identity)
}

/// [`node_certificate_as`] with the CSR named after the node.
async fn node_certificate(s: &Server, node: &str) -> (Vec<u8>, Vec<u8>) {
    node_certificate_as(s, node, node).await
}

fn signed_by_one_of(der: &[u8], bundle_pem: &str) -> bool {
    kustos_ca::certificates_from_pem(bundle_pem).expect("bundle").iter().any(|ca| kustos_ca::signed_by(der, ca))
}

/// Wait until the ConfigMap at `path` satisfies `done` on `data[key]`.
async fn wait_configmap(s: &Server, path: &str, key: &str, what: &str, done: impl Fn(&str) -> bool) {
    s.wait_for_object(path, what, WAIT, |cm| cm["data"][key].as_str().is_some_and(&done)).await;
}

/// The CA fingerprints of cluster-info's kubeconfig.
fn cluster_info_cas(kubeconfig: &str) -> Vec<String> {
    let v: Value = serde_yaml::from_str(kubeconfig).unwrap_or(Value::Null);
    let data = v["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap_or_default();
    let pem = base64::engine::general_purpose::STANDARD.decode(data).unwrap_or_default();
    fingerprints(&String::from_utf8_lossy(&pem))
}

/// Wait until every bundle kustos publishes holds exactly the CAs `want`: `kube-root-ca.crt`,
/// `cluster-info` and the ClusterTrustBundle of each kubernetes.io signer.
async fn published(s: &Server, want: &[String], what: &str) {
    wait_configmap(s, "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt", "ca.crt", what, |c| {
        fingerprints(c) == want
    })
    .await;
    wait_configmap(s, "/api/v1/namespaces/kube-public/configmaps/cluster-info", "kubeconfig", what, |k| {
        cluster_info_cas(k) == want
    })
    .await;
    for signer in [
        "kubernetes.io/kube-apiserver-serving",
        "kubernetes.io/kube-apiserver-client",
        "kubernetes.io/kube-apiserver-client-kubelet",
        "kubernetes.io/kubelet-serving",
    ] {
        let path =
            format!("/apis/certificates.k8s.io/v1beta1/clustertrustbundles?fieldSelector=spec.signerName%3D{signer}");
        let start = Instant::now();
        loop {
            let items = send(s.http().get(format!("{}{path}", s.url))).await.body["items"].clone();
            let bundles: Vec<Vec<String>> = items
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| fingerprints(b["spec"]["trustBundle"].as_str().unwrap_or_default()))
                .collect();
            if bundles.len() == 1 && bundles[0] == want {
                break;
            }
            assert!(start.elapsed() < WAIT, "{what}: the ClusterTrustBundle of {signer}: {bundles:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A client that reads the admin kubeconfig before every request (as a client that follows
/// its kubeconfig does), presenting the admin certificate and a service-account token in turn,
/// and counts what failed.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

fn start_load(s: Arc<Server>, token: String) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let (st, o, f) = (stop.clone(), ok.clone(), failures.clone());
    let task = tokio::spawn(async move {
        // Bounded: at most this many requests, however long the rotation takes.
        for _ in 0..100_000 {
            if st.load(Ordering::SeqCst) {
                return;
            }
            // The admin's certificate, then a service-account token, in turn.
            let r = if o.load(Ordering::SeqCst) % 2 == 0 {
                s.http().get(format!("{}/api/v1/namespaces/kube-system", s.url)).send().await
            } else {
                let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
                s.anonymous()
                    .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url))
                    .bearer_auth(&token)
                    .json(&review)
                    .send()
                    .await
            };
            match r {
                Ok(r) if r.status().is_success() => {
                    o.fetch_add(1, Ordering::SeqCst);
                }
                Ok(r) => f.lock().unwrap_or_else(|e| e.into_inner()).push(format!("HTTP {}", r.status())),
                Err(e) => f.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{e:?}")),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    Load { stop, ok, failures, task }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_ca_rotates_under_load_with_zero_failed_requests() {
    let s = Arc::new(Server::start());
    let dir = s.data_dir.to_str().expect("UTF-8 path").to_string();
    let old_pem = ca_file(&s);
    let old = fingerprints(&old_pem);
    assert_eq!(old.len(), 1);
    // A client as configured before the rotation: it trusts only the old CA.
    let old_only = s.http();
    let ns = unique("rot");
    send(s.http().post(format!("{}/api/v1/namespaces", s.url)).json(&json!({"metadata": {"name": ns}})))
        .await
        .expect_code(201, "namespace");
    let mut watch = WatchLines::open(
        s.http().get(format!("{}/api/v1/namespaces/{ns}/configmaps?watch=1&timeoutSeconds=600", s.url)),
    )
    .await;
    assert_eq!(watch.code, 200);
    // A node whose certificate is renewed across the switch (CSRs <node>-1, <node>-2).
    let node = unique("node-a");
    let (node_before, node_before_identity) = node_certificate_as(&s, &format!("{node}-1"), &node).await;
    assert!(signed_by_one_of(&node_before, &old_pem));
    send(
        s.http()
            .post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts", s.url))
            .json(&json!({"metadata": {"name": "robot"}})),
    )
    .await
    .expect_code(201, "service account");
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let token =
        send(s.http().post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts/robot/token", s.url)).json(&review))
            .await
            .body["status"]["token"]
            .as_str()
            .expect("a service-account token")
            .to_string();
    let load = start_load(s.clone(), token);

    // begin, killed after its second step, then run again.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kustos"));
    cmd.args(["ca", "rotate", "begin", "--data-dir", &dir]).env("KUSTOS_CA_ROTATE_ABORT_AFTER_STEPS", "2");
    let aborted = common::run_bounded(&mut cmd, None, common::CLI_TIMEOUT, "kustos ca rotate begin (aborted)");
    assert!(!aborted.status.success(), "the aborted run must die: {aborted:?}");
    kustos_ok(&["ca", "rotate", "begin", "--data-dir", &dir]);
    let both = ca_file(&s);
    let both_fps = fingerprints(&both);
    assert_eq!(both_fps.len(), 2, "old + new trusted");
    assert_eq!(both_fps[0], old[0]);
    let new = both_fps[1].clone();
    published(&s, &both_fps, "after begin: both CAs published").await;
    let status = kustos_ok(&["ca", "status", "--data-dir", &dir]);
    assert!(status.contains("rotation: Begun") && status.contains("finish: not yet"), "{status}");

    // switch: the new CA signs; the serving certificate comes from it, chained to the old.
    kustos_ok(&["ca", "rotate", "switch", "--data-dir", &dir, "--force-renewal-before", "2h"]);
    let serving = std::fs::read_to_string(s.data_dir.join("pki/apiserver.crt")).expect("apiserver.crt");
    let serving_ders = kustos_ca::certificates_from_pem(&serving).expect("serving chain");
    assert_eq!(serving_ders.len(), 2, "leaf + cross-signed CA");
    let new_ca_der = kustos_ca::certificates_from_pem(&both).expect("bundle")[1].clone();
    assert!(kustos_ca::signed_by(&serving_ders[0], &new_ca_der));
    // The served chain changes within the reload interval: the client that trusts only the
    // old CA still verifies it (through the cross-signed certificate).
    let admin = kustos_ca::certificates_from_pem(&String::from_utf8_lossy(&s.admin_identity_pem().0)).expect("admin");
    assert!(kustos_ca::signed_by(&admin[0], &new_ca_der), "the admin kubeconfig is re-issued");
    let new_only = common::client_trusting_only(&new_ca_der);
    let start = Instant::now();
    loop {
        let r = send(old_only.get(format!("{}/api/v1/namespaces/default", s.url))).await;
        assert_eq!(r.code, 200, "a client trusting only the old CA: {}", r.text);
        let fresh = s.anonymous().get(format!("{}/readyz", s.url)).send().await;
        assert!(fresh.is_ok(), "a client trusting both CAs: {fresh:?}");
        // The served leaf is the new one once a client trusting only the new CA verifies it.
        if new_only.get(format!("{}/readyz", s.url)).send().await.is_ok() {
            break;
        }
        assert!(start.elapsed() < WAIT, "the new serving certificate was not picked up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Once more with the old-only client, now that the new chain is served.
    send(old_only.get(format!("{}/api/v1/namespaces/default", s.url))).await.expect_code(200, "old-only client");
    published(&s, &both_fps, "after switch: both CAs still published").await;
    // The node renews: its new certificate comes from the new CA, and both authenticate.
    let (node_after, node_after_identity) = node_certificate_as(&s, &format!("{node}-2"), &node).await;
    for (what, id) in [("before", &node_before_identity), ("after", &node_after_identity)] {
        let r = send(s.http_with_identity(id).get(format!("{}/api/v1/nodes/{node}", s.url))).await;
        assert_ne!(r.code, 401, "the node's certificate from {what} the switch: {}", r.text);
    }
    assert!(kustos_ca::signed_by(&node_after, &new_ca_der), "issued from the new CA after switch");
    let lifetime = kustos_ca::parse_certificate_der(&node_after).expect("cert");
    assert!(lifetime.not_after - lifetime.not_before <= chrono::Duration::hours(2) + kustos_ca::BACKDATE);
    assert!(signed_by_one_of(&node_before, &ca_file(&s)) && signed_by_one_of(&node_after, &ca_file(&s)));

    // finish is refused while the old CA's node certificate is known and valid.
    let status = kustos_ok(&["ca", "status", "--data-dir", &dir]);
    assert!(status.contains("finish: not safe: 1 certificate(s)"), "{status}");
    let refused = kustos(&["ca", "rotate", "finish", "--data-dir", &dir]);
    assert!(!refused.status.success(), "finish must refuse");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("still valid"), "{refused:?}");
    // The node moved to the new CA; its old CSR goes, as the CSR cleaner removes it.
    send(s.http().delete(format!("{}{CSRS}/{node}-1", s.url))).await.expect_code(200, "deleting the old CSR");
    let status = kustos_ok(&["ca", "status", "--data-dir", &dir]);
    assert!(status.contains("finish: safe"), "{status}");
    kustos_ok(&["ca", "rotate", "finish", "--data-dir", &dir]);

    // The old CA is gone everywhere.
    assert_eq!(fingerprints(&ca_file(&s)), vec![new.clone()]);
    published(&s, std::slice::from_ref(&new), "after finish: only the new CA").await;
    assert_eq!(fingerprints(&String::from_utf8_lossy(&s.ca_pem())), vec![new.clone()], "admin kubeconfig CA data");
    // The old admin certificate no longer authenticates (within the reload interval); the
    // node's new one does.
    let start = Instant::now();
    while send(old_only.get(format!("{}/api/v1/namespaces/default", s.url))).await.code != 401 {
        assert!(start.elapsed() < WAIT, "the old CA is still trusted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = send(s.http_with_identity(&node_after_identity).get(format!("{}/api/v1/nodes/{node}", s.url))).await;
    assert_ne!(r.code, 401, "the node's renewed certificate authenticates: {}", r.text);
    let r = send(s.http_with_identity(&node_before_identity).get(format!("{}/api/v1/nodes/{node}", s.url))).await;
    assert_eq!(r.code, 401, "the node's certificate from the old CA: {}", r.text);
    // The controllers still work: a CSR is issued after finish.
    let (node_last, _) = node_certificate(&s, &unique("node-last")).await;
    assert!(signed_by_one_of(&node_last, &ca_file(&s)));

    // The watch opened before the rotation still delivers.
    send(
        s.http()
            .post(format!("{}/api/v1/namespaces/{ns}/configmaps", s.url))
            .json(&json!({"metadata": {"name": "after"}})),
    )
    .await
    .expect_code(201, "configmap");
    // (kube-root-ca.crt's own events come first; bounded.)
    let mut seen = Vec::new();
    for _ in 0..20 {
        let ev = watch.next_non_bookmark(WAIT).await.expect("a watch event");
        let got = (
            ev["type"].as_str().unwrap_or_default().to_string(),
            ev["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string(),
        );
        if got == ("ADDED".to_string(), "after".to_string()) {
            break;
        }
        seen.push(got);
        assert!(seen.len() < 20, "the watch did not deliver the new ConfigMap: {seen:?}");
    }

    load.stop.store(true, Ordering::SeqCst);
    load.task.await.expect("load task");
    let failures = load.failures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(failures.is_empty(), "{} failed requests: {failures:?}\nserver log:\n{}", failures.len(), s.stderr_tail());
    assert!(load.ok.load(Ordering::SeqCst) > 0, "the load ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_between_steps_restarts_into_the_rotation_and_finishes_it() {
    let mut s = Server::start();
    let dir = s.data_dir.to_str().expect("UTF-8 path").to_string();
    let old = fingerprints(&ca_file(&s));
    kustos_ok(&["ca", "rotate", "begin", "--data-dir", &dir]);
    s.kill9();
    s.restart();
    send(s.http().get(format!("{}/api/v1/namespaces/default", s.url))).await.expect_code(200, "after begin");
    // switch killed after the key was installed, then the server killed too.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kustos"));
    cmd.args(["ca", "rotate", "switch", "--data-dir", &dir]).env("KUSTOS_CA_ROTATE_ABORT_AFTER_STEPS", "1");
    let aborted = common::run_bounded(&mut cmd, None, common::CLI_TIMEOUT, "kustos ca rotate switch (aborted)");
    assert!(!aborted.status.success());
    s.kill9();
    s.restart();
    send(s.http().get(format!("{}/api/v1/namespaces/default", s.url))).await.expect_code(200, "mid-switch");
    kustos_ok(&["ca", "rotate", "switch", "--data-dir", &dir]);
    let again = kustos_ok(&["ca", "rotate", "switch", "--data-dir", &dir]);
    assert!(again.contains("already done"), "{again}");
    s.kill9();
    s.restart();
    kustos_ok(&["ca", "rotate", "finish", "--data-dir", &dir]);
    let now = fingerprints(&ca_file(&s));
    assert_eq!(now.len(), 1);
    assert_ne!(now, old);
    s.wait_for_object("/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt", "only the new CA", WAIT, |cm| {
        cm["data"]["ca.crt"].as_str().is_some_and(|c| fingerprints(c) == now)
    })
    .await;
    // A restart after the rotation serves as before.
    s.kill9();
    s.restart();
    send(s.http().get(format!("{}/api/v1/namespaces/default", s.url))).await.expect_code(200, "after finish");
    for f in ["rotation.json", "ca-next.crt", "ca-next.key", "ca-cross.crt"] {
        assert!(!s.data_dir.join("pki").join(f).exists(), "{f} left behind");
    }
}
