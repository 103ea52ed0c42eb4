//! Signers of your own (`signers.kustos.dev`) end to end against `kustos server`: a Signer
//! gets a generated CA and a ClusterTrustBundle, issues for its own signer name within its
//! rules (and fails what breaks them), leaves CSRs for unknown signer names alone, cannot
//! claim a `kubernetes.io` name, and has its CA rotated with `kustos ca rotate … --signer`
//! while a certificate from the old CA keeps verifying until `finish`. Every wait is bounded.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::{send, unique, Server};
use serde_json::{json, Value};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const SIGNERS: &str = "/apis/kustos.dev/v1alpha1/signers";
const CTBS: &str = "/apis/certificates.k8s.io/v1beta1/clustertrustbundles";
const WAIT: Duration = Duration::from_secs(60);

fn repo(path: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// A CSR for `signer` with CN `cn`, a URI SAN and DNS names.
fn csr(name: &str, signer: &str, cn: &str, uris: &[&str], dns: &[&str]) -> Value {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    for u in uris {
        params.subject_alt_names.push(rcgen::SanType::URI((*u).try_into().expect("URI")));
    }
    for d in dns {
        params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().expect("DNS")));
    }
    let pem = params.serialize_request(&key).expect("CSR").pem().expect("PEM");
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
           "metadata": {"name": name},
           "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem), "signerName": signer,
                    "usages": ["digital signature", "client auth"], "expirationSeconds": 7200}})
}

/// Create `obj` as the admin and approve it with kubectl.
async fn create_and_approve(s: &Server, obj: &Value) {
    send(s.http().post(format!("{}{CSRS}", s.url)).json(obj)).await.expect_code(201, "creating a CSR");
    s.kubectl_ok(&["certificate", "approve", obj["metadata"]["name"].as_str().expect("name")]);
}

async fn wait_csr(s: &Server, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    s.wait_for_object(&format!("{CSRS}/{name}"), what, WAIT, done).await
}

fn issued_der(csr: &Value) -> Vec<u8> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["status"]["certificate"].as_str().expect("a certificate"))
        .expect("base64");
    kustos_ca::certificates_from_pem(std::str::from_utf8(&pem).expect("PEM")).expect("certificates").remove(0)
}

/// The CA certificates of the Signer's published ClusterTrustBundle (the one its
/// `status.trustBundle` names), once it holds `want` of them. Both are read again on every
/// try: a rotation step replaces the bundle (a new content is a new name).
async fn published(s: &Server, signer_obj: &str, want: usize) -> Vec<Vec<u8>> {
    let deadline = std::time::Instant::now() + WAIT;
    let mut last = Value::Null;
    while std::time::Instant::now() < deadline {
        let signer = send(s.http().get(format!("{}{SIGNERS}/{signer_obj}", s.url))).await.body;
        if let Some(name) = signer["status"]["trustBundle"].as_str() {
            let ctb = send(s.http().get(format!("{}{CTBS}/{name}", s.url))).await.body;
            let certs = kustos_ca::certificates_from_pem(ctb["spec"]["trustBundle"].as_str().unwrap_or_default());
            if let Some(certs) = certs.ok().filter(|v| v.len() == want) {
                assert_eq!(ctb["spec"]["signerName"], signer["spec"]["signerName"], "linked to the signer: {ctb}");
                return certs;
            }
            last = ctb;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "Signer {signer_obj}: no published bundle of {want} CA(s) within {WAIT:?}; last seen {last}\n{}",
        s.stderr_tail()
    );
}

fn verifies(cert: &[u8], bundle: &[Vec<u8>]) -> bool {
    bundle.iter().any(|ca| kustos_ca::signed_by(cert, ca))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_of_your_own_issues_publishes_and_rotates() {
    common::ensure_kubectl();
    let s = Server::start();
    s.kubectl_ok(&["apply", "-f", repo("crds").to_str().expect("path")]);
    s.kubectl_ok(&["wait", "--for=condition=Established", "crd/signers.kustos.dev", "--timeout=60s"]);
    let obj = unique("mesh");
    let signer_name = format!("example.com/{obj}");
    let signer = json!({"apiVersion": "kustos.dev/v1alpha1", "kind": "Signer", "metadata": {"name": obj},
        "spec": {"signerName": signer_name, "usages": ["digital signature", "client auth"],
                 "maxExpirationSeconds": 3600, "uris": true}});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&signer.to_string()));
    assert!(out.status.success(), "kubectl create signer: {}", String::from_utf8_lossy(&out.stderr));

    // Ready, with a generated CA in kube-system and a ClusterTrustBundle.
    let ready = s
        .wait_for_object(&format!("{SIGNERS}/{obj}"), "Ready", WAIT, |o| {
            condition(o, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await;
    assert_eq!(condition(&ready, "Ready").expect("Ready")["reason"], "CALoaded", "{ready}");
    let secret = format!("/api/v1/namespaces/kube-system/secrets/kustos-signer-{obj}");
    send(s.http().get(format!("{}{secret}", s.url))).await.expect_code(200, "the generated CA Secret");
    let first_bundle = published(&s, &obj, 1).await;
    let table = s.kubectl_ok(&["get", "signers", &obj]);
    assert!(table.contains("SIGNERNAME") && table.contains(&signer_name) && table.contains("True"), "{table}");

    // A CSR within its rules: issued from its CA, capped at an hour.
    let good = unique("workload");
    create_and_approve(&s, &csr(&good, &signer_name, "web", &["spiffe://example.com/ns/default/sa/web"], &[])).await;
    let issued = wait_csr(&s, &good, "issued", |c| c["status"]["certificate"].as_str().is_some()).await;
    let cert = issued_der(&issued);
    assert!(verifies(&cert, &first_bundle), "issued by the published CA");
    let info = kustos_ca::parse_certificate_der(&cert).expect("certificate");
    // Capped at the hour (NotBefore is backdated five minutes, as for every signer).
    assert!(info.not_after - info.not_before <= chrono::Duration::seconds(3600 + 300), "capped: {info:?}");
    assert_eq!(info.uris, ["spiffe://example.com/ns/default/sa/web"]);

    // A CSR breaking its rules (a DNS name, which it allows none of): Failed, never issued.
    let bad = unique("workload");
    create_and_approve(&s, &csr(&bad, &signer_name, "web", &[], &["web.example"])).await;
    let failed = wait_csr(&s, &bad, "failed", |c| condition(c, "Failed").is_some()).await;
    let f = condition(&failed, "Failed").expect("Failed");
    assert_eq!(f["reason"], "SignerValidationFailure", "{failed}");
    assert!(f["message"].as_str().unwrap_or_default().contains("DNS subjectAltNames are not allowed"), "{failed}");
    s.wait_for_object(&format!("{SIGNERS}/{obj}"), "the counts", WAIT, |o| {
        o["status"]["issued"] == 1 && o["status"]["failed"] == 1
    })
    .await;

    // Nobody's signer name, and a Signer claiming a kubernetes.io name: nothing signs.
    let claim = unique("claim");
    let k8s = json!({"apiVersion": "kustos.dev/v1alpha1", "kind": "Signer", "metadata": {"name": claim},
        "spec": {"signerName": "kubernetes.io/kube-apiserver-client-evil", "usages": ["client auth"]}});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&k8s.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let refused = s
        .wait_for_object(&format!("{SIGNERS}/{claim}"), "refused", WAIT, |o| {
            condition(o, "Ready").is_some_and(|c| c["status"] == "False")
        })
        .await;
    let c = condition(&refused, "Ready").expect("Ready");
    assert_eq!(c["reason"], "InvalidSpec", "{refused}");
    assert!(c["message"].as_str().unwrap_or_default().contains("belongs to Kubernetes"), "{refused}");
    let orphan = unique("orphan");
    create_and_approve(&s, &csr(&orphan, "example.com/nobody", "x", &[], &[])).await;
    let claimed = unique("claimed");
    create_and_approve(&s, &csr(&claimed, "kubernetes.io/kube-apiserver-client-evil", "x", &[], &[])).await;
    // A later CSR of the real Signer is issued: by then the two before it were looked at.
    let marker = unique("workload");
    create_and_approve(&s, &csr(&marker, &signer_name, "web", &[], &[])).await;
    wait_csr(&s, &marker, "issued", |c| c["status"]["certificate"].as_str().is_some()).await;
    for name in [&orphan, &claimed] {
        let c = send(s.http().get(format!("{}{CSRS}/{name}", s.url))).await.body;
        assert!(c["status"]["certificate"].as_str().is_none(), "{name}: no certificate: {c}");
        assert!(condition(&c, "Failed").is_none(), "{name}: left alone: {c}");
    }

    // Rotation: begin publishes both CAs; switch signs from the new one while the old
    // certificate still verifies; finish is refused while it is valid, then forced.
    let kubeconfig = s.kubeconfig.to_string_lossy().into_owned();
    let ca_cmd = |args: &[&str]| -> std::process::Output {
        let mut all = vec!["ca"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--signer", &obj, "--kubeconfig", &kubeconfig]);
        common::kustos(&all)
    };
    common::succeeded("ca rotate begin --signer", ca_cmd(&["rotate", "begin"]));
    let both = published(&s, &obj, 2).await;
    assert!(verifies(&cert, &both), "the old certificate verifies mid-rotation");
    let again = common::succeeded("begin again", ca_cmd(&["rotate", "begin"]));
    assert!(again.contains("already done"), "{again}");
    common::succeeded("ca rotate switch --signer", ca_cmd(&["rotate", "switch"]));
    let after = unique("workload");
    // The controller may still sign from the old CA for an instant: wait until the switch is
    // seen (the Signer's Ready message names the new CA).
    s.wait_for_object(&format!("{SIGNERS}/{obj}"), "the switch seen", WAIT, |o| {
        condition(o, "Ready").and_then(|c| c["message"].as_str()).is_some_and(|m| m.contains(" CA 2"))
    })
    .await;
    create_and_approve(&s, &csr(&after, &signer_name, "web", &[], &[])).await;
    let new_cert = issued_der(&wait_csr(&s, &after, "issued", |c| c["status"]["certificate"].as_str().is_some()).await);
    assert!(!first_bundle.iter().any(|ca| kustos_ca::signed_by(&new_cert, ca)), "issued by the new CA");
    assert!(verifies(&new_cert, &published(&s, &obj, 2).await), "the new certificate verifies");
    let status = common::succeeded("ca status --signer", ca_cmd(&["status"]));
    assert!(status.contains("finish: not safe: 2 certificate(s)"), "{status}");
    let refused = ca_cmd(&["rotate", "finish"]);
    assert!(!refused.status.success(), "finish is refused while old certificates are valid");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("still valid"), "{refused:?}");
    common::succeeded("ca rotate finish --force", ca_cmd(&["rotate", "finish", "--force"]));
    let last = published(&s, &obj, 1).await;
    assert!(!verifies(&cert, &last), "the old CA is gone from the bundle");
    assert!(verifies(&new_cert, &last));
}
