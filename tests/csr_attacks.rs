//! CertificateSigningRequests crafted to be checked as one identity and signed as another,
//! end to end against `kustos server`, with the credentials an attacker has: a bootstrap
//! token, a node certificate, an admin who approves what `kubectl describe csr` (Go) shows.
//!
//! - a kubelet client CSR with `O=system:nodes` (UTF8String) and `O=system:masters`
//!   (T61String), from a bootstrap token;
//! - a node renewal with `CN=system:node:<n1>` then `CN=system:node:<victim>`, from n1's
//!   certificate;
//! - `CN=cluster-root-alice, CN=intern-bob` for the kube-apiserver-client signer;
//! - `O=system:masters` as T61String for the kube-apiserver-client signer;
//! - a mangled PEM block A (END line of another type) followed by a clean block B.
//!
//! Each is refused at create: 422 on `spec.request`, saying why (the node's renewal: 403 from
//! NodeRestriction, which reads the CN first). And a certificate from the cluster CA with such
//! a subject authenticates as Go reads it (last CN, every O).
//!
//! And a node asking for a kubelet client or serving certificate in another node's name is
//! refused at create by NodeRestriction (403, upstream's message), whoever might approve it.

mod common;

use base64::Engine as _;
use common::x509::*;
use common::{assert_status, issue_user, send, shared, unique, Server};
use serde_json::{json, Value};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CLIENT: &str = "kubernetes.io/kube-apiserver-client";
const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A PEM request for `subject` (a DER Name), with a new key.
fn request(subject: &[u8]) -> String {
    pem("CERTIFICATE REQUEST", &csr_der(subject, &rcgen::KeyPair::generate().expect("key")))
}

fn manifest(name: &str, signer: &str, request_pem: &str, usages: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(request_pem.as_bytes()), "signerName": signer, "usages": usages}})
}

/// The create was refused as invalid, on `spec.request`, with `why` in the message; and
/// nothing was stored.
async fn assert_refused(s: &Server, reply: &common::Reply, name: &str, why: &str, what: &str) {
    assert_status(reply, 422, Some("Invalid"), what);
    assert_eq!(reply.body["details"]["causes"][0]["field"], "spec.request", "{what}: {}", reply.text);
    let message = reply.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(why), "{what}: the message says why ({why:?}): {}", reply.text);
    let stored = send(s.http().get(format!("{}{CSRS}/{name}", s.url))).await;
    assert_eq!(stored.code, 404, "{what}: nothing stored: {}", stored.text);
}

/// A client certificate for `subject` (a DER Name) from the cluster CA; key then
/// certificate, PEM.
fn identity_from_cluster_ca(s: &Server, subject: &[u8]) -> Vec<u8> {
    let pki = s.data_dir.join("pki");
    let ca = kustos_ca::Ca::from_pem(
        &std::fs::read_to_string(pki.join("ca.crt")).expect("ca.crt"),
        &std::fs::read_to_string(pki.join("ca.key")).expect("ca.key"),
    )
    .expect("the cluster CA");
    let issued = ca
        .issue(
            kustos_ca::IssueParams {
                raw_subject: Some(subject.to_vec()),
                usages: vec![kustos_ca::Usage::ClientAuth],
                validity: chrono::Duration::hours(1),
                ..Default::default()
            },
            chrono::Utc::now(),
        )
        .expect("issuing");
    let mut identity = issued.key_pem.expect("a generated key").into_bytes();
    identity.push(b'\n');
    identity.extend_from_slice(issued.cert_pem.as_bytes());
    identity
}

/// The user name and groups the server sees for a client presenting `identity`.
async fn whoami(s: &Server, identity: &[u8]) -> (String, Vec<String>) {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = send(
        s.http_with_identity(identity)
            .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url))
            .json(&review),
    )
    .await;
    r.expect_code(201, "SelfSubjectReview");
    let info = &r.body["status"]["userInfo"];
    let groups = info["groups"].as_array().expect("groups").iter().filter_map(|g| g.as_str().map(String::from));
    (info["username"].as_str().unwrap_or_default().to_string(), groups.collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_token_cannot_slip_system_masters_in_as_a_t61_organization() {
    let s = shared();
    let token = common::kubelet::bootstrap_token(&s, 'm').await;
    let node = unique("system:node:t61");
    let name = unique("t61-masters");
    let req =
        request(&simple_name(&[(O, UTF8, b"system:nodes"), (O, T61, b"system:masters"), (CN, UTF8, node.as_bytes())]));
    let r = send(s.anonymous().post(format!("{}{CSRS}", s.url)).bearer_auth(&token).json(&manifest(
        &name,
        KUBELET_CLIENT,
        &req,
        &["digital signature", "client auth"],
    )))
    .await;
    assert_refused(&s, &r, &name, "subject O \"system:masters\" is a T61String", "T61 O from a bootstrap token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_renew_into_another_node_with_a_second_common_name() {
    let s = shared();
    let n1 = unique("system:node:n1");
    let victim = unique("system:node:victim");
    let node = issue_user(&s, &n1, &["system:nodes"]);
    let name = unique("two-cn-renewal");
    let req =
        request(&simple_name(&[(O, UTF8, b"system:nodes"), (CN, UTF8, n1.as_bytes()), (CN, UTF8, victim.as_bytes())]));
    let r = send(s.http_with_identity(&node.identity).post(format!("{}{CSRS}", s.url)).json(&manifest(
        &name,
        KUBELET_CLIENT,
        &req,
        &["digital signature", "client auth"],
    )))
    .await;
    // From a node, NodeRestriction reads the CN first (as upstream's admission runs before
    // validation): the one CSR reader refuses the request, so the answer is its 403.
    assert_status(&r, 403, Some("Forbidden"), "a renewal with two CNs");
    let message = r.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("unable to parse csr: subject has 2 common names"), "says why: {}", r.text);
    let stored = send(s.http().get(format!("{}{CSRS}/{name}", s.url))).await;
    assert_eq!(stored.code, 404, "nothing stored: {}", stored.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_common_names_are_refused_and_a_certificate_with_them_is_the_last_one() {
    let s = shared();
    let subject = simple_name(&[(CN, UTF8, b"cluster-root-alice"), (CN, UTF8, b"intern-bob")]);
    let name = unique("two-cns");
    let r = send(s.http().post(format!("{}{CSRS}", s.url)).json(&manifest(
        &name,
        CLIENT,
        &request(&subject),
        &["client auth"],
    )))
    .await;
    assert_refused(&s, &r, &name, "subject has 2 common names", "CN=cluster-root-alice, CN=intern-bob").await;

    // A certificate that does carry both (from any CA) is the user Go sees: the last CN.
    let (user, _) = whoami(&s, &identity_from_cluster_ca(&s, &subject)).await;
    assert_eq!(user, "intern-bob", "the x509 authenticator reads the last CN, as kube-apiserver does");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_masters_as_t61_does_not_pass_the_subject_restriction() {
    let s = shared();
    let subject = simple_name(&[(O, T61, b"system:masters"), (CN, UTF8, b"t61-admin")]);
    let name = unique("t61-client");
    let r = send(s.http().post(format!("{}{CSRS}", s.url)).json(&manifest(
        &name,
        CLIENT,
        &request(&subject),
        &["client auth"],
    )))
    .await;
    assert_refused(&s, &r, &name, "is a T61String", "O=system:masters as T61String").await;

    // Such a certificate, from the cluster CA, is in system:masters for Go, and so for kustos.
    let (user, groups) = whoami(&s, &identity_from_cluster_ca(&s, &subject)).await;
    assert_eq!(user, "t61-admin");
    assert!(groups.iter().any(|g| g == "system:masters"), "every O, whatever its string type: {groups:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mangled_pem_block_before_a_clean_one_is_refused() {
    let s = shared();
    // A: what the attacker wants signed; its END line names another type, so Go's decoder
    // (and kubectl describe) skip it and show B.
    let a = request(&simple_name(&[(O, UTF8, b"cluster-admins"), (CN, UTF8, b"cluster-root-alice")]))
        .replace("-----END CERTIFICATE REQUEST-----", "-----END CERTIFICATE-----");
    let b = request(&simple_name(&[(CN, UTF8, b"intern-bob")]));
    let name = unique("mangled-pem");
    let r = send(s.http().post(format!("{}{CSRS}", s.url)).json(&manifest(
        &name,
        CLIENT,
        &format!("{a}{b}"),
        &["client auth"],
    )))
    .await;
    assert_refused(
        &s,
        &r,
        &name,
        "the request must be exactly one CERTIFICATE REQUEST PEM block",
        "mangled block A, clean block B",
    )
    .await;

    // B alone is an ordinary request.
    let name = unique("clean-pem");
    let r = send(s.http().post(format!("{}{CSRS}", s.url)).json(&manifest(&name, CLIENT, &b, &["client auth"]))).await;
    r.expect_code(201, "the clean block alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_ask_for_a_kubelet_certificate_in_another_nodes_name() {
    let s = shared();
    let n1 = unique("system:node:n1");
    let victim = unique("system:node:victim");
    let node = issue_user(&s, &n1, &["system:nodes"]);
    let as_node = s.http_with_identity(&node.identity);
    let subject = |cn: &str| simple_name(&[(O, UTF8, b"system:nodes"), (CN, UTF8, cn.as_bytes())]);
    let cases = [
        (KUBELET_CLIENT, &["digital signature", "client auth"][..]),
        ("kubernetes.io/kubelet-serving", &["digital signature", "server auth"][..]),
    ];
    for (signer, usages) in cases {
        let name = unique("neighbour");
        let r = send(as_node.post(format!("{}{CSRS}", s.url)).json(&manifest(
            &name,
            signer,
            &request(&subject(&victim)),
            usages,
        )))
        .await;
        assert_status(&r, 403, Some("Forbidden"), signer);
        assert_eq!(
            r.body["message"],
            json!(format!(
                "certificatesigningrequests.certificates.k8s.io \"{name}\" is forbidden: can only create a node CSR \
                 with CN={n1}"
            )),
            "{signer}: {}",
            r.text
        );
        let stored = send(s.http().get(format!("{}{CSRS}/{name}", s.url))).await;
        assert_eq!(stored.code, 404, "{signer}: nothing stored: {}", stored.text);

        let own = unique("own");
        send(as_node.post(format!("{}{CSRS}", s.url)).json(&manifest(&own, signer, &request(&subject(&n1)), usages)))
            .await
            .expect_code(201, "a request in its own name");
    }

    // A bootstrap token is no node: it asks for the client certificate of the node it is
    // about to become.
    let token = common::kubelet::bootstrap_token(&s, 'v').await;
    let name = unique("bootstrap");
    let r = send(s.anonymous().post(format!("{}{CSRS}", s.url)).bearer_auth(&token).json(&manifest(
        &name,
        KUBELET_CLIENT,
        &request(&subject(&victim)),
        &["digital signature", "client auth"],
    )))
    .await;
    r.expect_code(201, "a bootstrap token's request");
}
