//! CertificateSigningRequests end to end against `kustos server`: an admin approving and
//! denying with kubectl, the kubelet client auto-approval for bootstrap tokens and node
//! renewals, the signer's rules and lifetimes, the cleaner, and a CA rotation without a
//! restart. CSRs are made with rcgen; every wait is bounded.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{assert_status, issue_user, send, shared, token_user, unique, Server, User};
use serde_json::{json, Value};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CLIENT: &str = "kubernetes.io/kube-apiserver-client";
const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Bound for one wait on the controllers.
const WAIT: Duration = Duration::from_secs(60);

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A PEM CSR (and its PEM key) with CN `cn` and one O per `orgs`.
fn request(cn: &str, orgs: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    // rcgen keeps one value per attribute type: a second O goes in under a custom type with
    // O's OID (2.5.4.10), which encodes the same.
    assert!(orgs.len() <= 2, "at most two organizations");
    for (i, o) in orgs.iter().enumerate() {
        let t = if i == 0 { rcgen::DnType::OrganizationName } else { rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]) };
        params.distinguished_name.push(t, *o);
    }
    let pem = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    (pem, key.serialize_pem())
}

/// A CSR object.
fn manifest(name: &str, signer: &str, request_pem: &str, usages: &[&str], expiration: Option<i64>) -> Value {
    let mut m = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(request_pem.as_bytes()), "signerName": signer, "usages": usages}});
    if let Some(secs) = expiration {
        m["spec"]["expirationSeconds"] = json!(secs);
    }
    m
}

fn apply(s: &Server, obj: &Value) {
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&obj.to_string()));
    assert!(out.status.success(), "kubectl apply {obj}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn get_csr(s: &Server, name: &str) -> common::Reply {
    send(s.http().get(format!("{}{CSRS}/{name}", s.url))).await
}

fn condition<'a>(csr: &'a Value, type_: &str) -> Option<&'a Value> {
    csr["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn certificate(csr: &Value) -> Option<Vec<u8>> {
    csr["status"]["certificate"].as_str().map(|c| base64::engine::general_purpose::STANDARD.decode(c).expect("base64"))
}

/// Poll the CSR until `done` holds (bounded by [`WAIT`]); returns it.
async fn wait_for(s: &Server, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    s.wait_for_object(&format!("{CSRS}/{name}"), what, WAIT, done).await
}

async fn wait_issued(s: &Server, name: &str) -> Value {
    wait_for(s, name, "a certificate", |c| certificate(c).is_some_and(|c| !c.is_empty())).await
}

/// Poll until the CSR is gone (bounded by [`WAIT`]).
async fn wait_deleted(s: &Server, name: &str) {
    let start = Instant::now();
    for _ in 0..600 {
        if get_csr(s, name).await.code == 404 {
            return;
        }
        assert!(start.elapsed() < WAIT, "CSR {name} was not deleted within {WAIT:?}\nserver log:\n{}", s.stderr_tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("CSR {name} was not deleted");
}

/// The first certificate of a PEM text.
fn cert_info(pem: &[u8]) -> kustos_ca::CertInfo {
    kustos_ca::parse_certificate_pem(std::str::from_utf8(pem).expect("PEM text")).expect("a certificate")
}

/// A kubectl user presenting `cert_pem` and `key_pem`, trusting `ca_pem` for the server.
fn cert_user(s: &Server, name: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> User {
    let yaml = kustos_apiserver::pki::kubeconfig_yaml(
        &s.url,
        ca_pem,
        name,
        kustos_apiserver::pki::KubeconfigAuth::ClientCert { cert_pem: cert_pem.into(), key_pem: key_pem.into() },
    );
    let file = unique("csr-user");
    let kubeconfig = s.work_dir().join(format!("{file}.kubeconfig"));
    std::fs::write(&kubeconfig, yaml).expect("writing a kubeconfig");
    let mut identity = key_pem.as_bytes().to_vec();
    identity.push(b'\n');
    identity.extend_from_slice(cert_pem.as_bytes());
    User { name: name.into(), kubeconfig, identity, cache_dir: s.work_dir().join(format!("{file}-cache")) }
}

/// `kubectl auth whoami` as `u`: user name and groups, or kubectl's error.
fn whoami(s: &Server, u: &User) -> Result<(String, Vec<String>), String> {
    let out = u.kubectl(s, &["auth", "whoami", "-o", "json"]);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_slice(&out.stdout).expect("whoami JSON");
    let info = &v["status"]["userInfo"];
    let groups = info["groups"].as_array().map(|g| g.iter().filter_map(|x| x.as_str().map(String::from)).collect());
    Ok((info["username"].as_str().unwrap_or_default().to_string(), groups.unwrap_or_default()))
}

/// Creates `kube-system/bootstrap-token-<id>` (valid, authentication allowed); the token.
fn bootstrap_token(s: &Server) -> String {
    let digits: String = unique("").chars().filter(char::is_ascii_digit).collect();
    let id = format!("c{:0>5}", &digits[digits.len().saturating_sub(5)..]);
    let secret = "0123456789abcdef";
    apply(
        s,
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
            "stringData": {"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
                           "expiration": "2099-01-01T00:00:00Z"}}),
    );
    format!("{id}.{secret}")
}

/// Create, approve with kubectl and wait for a good kube-apiserver-client CSR: a marker
/// that the controllers have worked through everything queued before it.
async fn approved_and_issued_marker(s: &Server, tag: &str) {
    let name = unique(&format!("{tag}-marker"));
    let (req, _) = request(&name, &[]);
    apply(s, &manifest(&name, CLIENT, &req, &["client auth"], None));
    s.kubectl_ok(&["certificate", "approve", &name]);
    wait_issued(s, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_approves_with_kubectl_and_the_issued_certificate_authenticates() {
    let s = shared();
    let name = unique("jane");
    let (req, key) = request(&name, &["devs", "qa"]);
    apply(&s, &manifest(&name, CLIENT, &req, &["digital signature", "client auth"], Some(3600)));

    // kubectl get csr: upstream's columns.
    let table = s.kubectl_ok(&["get", "csr", &name]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"], "{table}");
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[0], name, "{table}");
    assert_eq!(&row[2..], [CLIENT, "kustos-admin", "60m", "Pending"], "{table}");

    s.kubectl_ok(&["certificate", "approve", &name]);
    let csr = wait_issued(&s, &name).await;
    let approved = condition(&csr, "Approved").expect("an Approved condition");
    assert_eq!(approved["status"], "True", "{csr}");
    assert_eq!(approved["reason"], "KubectlApprove", "{csr}");
    assert!(condition(&csr, "Failed").is_none(), "{csr}");

    // What was issued: the request's subject, client auth, 1 h (+ 5 min backdate), from the CA.
    let pem = certificate(&csr).expect("certificate");
    let info = cert_info(&pem);
    assert_eq!(info.common_name, name);
    assert_eq!(info.organizations, ["devs", "qa"]);
    assert!(!info.is_ca);
    assert_eq!(
        info.usages,
        [kustos_ca::Usage::DigitalSignature, kustos_ca::Usage::ClientAuth],
        "extensions only from spec.usages"
    );
    assert_eq!((info.not_after - info.not_before).num_seconds(), 3600 + 300, "expirationSeconds 3600 + backdate");
    let ca_pem = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("ca.crt");
    let ca_key = std::fs::read_to_string(s.data_dir.join("pki/ca.key")).expect("ca.key");
    let ca = kustos_ca::Ca::from_pem(&ca_pem, &ca_key).expect("the cluster CA");
    let leaf = kustos_ca::certificates_from_pem(std::str::from_utf8(&pem).expect("PEM")).expect("PEM");
    assert!(ca.signed(&leaf[0]), "signed by the cluster CA");

    // The certificate and the request's key authenticate as the request's subject.
    let jane = cert_user(&s, &name, &ca_pem, std::str::from_utf8(&pem).expect("PEM"), &key);
    let (user, groups) = whoami(&s, &jane).expect("whoami with the issued certificate");
    assert_eq!(user, name);
    assert_eq!(groups, ["devs", "qa", "system:authenticated"]);

    let table = s.kubectl_ok(&["get", "csr", &name, "--no-headers"]);
    assert!(table.split_whitespace().last() == Some("Approved,Issued"), "{table}");

    // Denied: the condition, and never a certificate.
    let denied = unique("denied");
    let (req, _) = request(&denied, &[]);
    apply(&s, &manifest(&denied, CLIENT, &req, &["client auth"], None));
    s.kubectl_ok(&["certificate", "deny", &denied]);
    let csr = wait_for(&s, &denied, "a Denied condition", |c| condition(c, "Denied").is_some()).await;
    assert_eq!(condition(&csr, "Denied").map(|c| c["reason"].clone()), Some(json!("KubectlDeny")), "{csr}");
    // Once a CSR approved after it has been signed, the signer has seen the denied one too
    // (events arrive in order), and left it alone.
    approved_and_issued_marker(&s, "after-deny").await;
    let csr = get_csr(&s, &denied).await.body;
    assert!(certificate(&csr).is_none(), "a denied CSR never gets a certificate: {csr}");
    assert!(condition(&csr, "Approved").is_none(), "{csr}");
    let table = s.kubectl_ok(&["get", "csr", &denied, "--no-headers"]);
    assert_eq!(table.split_whitespace().last(), Some("Denied"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_expiration_seconds_the_certificate_lasts_the_signing_duration() {
    let s = shared();
    let name = unique("year");
    let (req, _) = request(&name, &[]);
    apply(&s, &manifest(&name, CLIENT, &req, &["client auth"], None));
    s.kubectl_ok(&["certificate", "approve", &name]);
    let info = cert_info(&certificate(&wait_issued(&s, &name).await).expect("certificate"));
    // 8760h: NotBefore and NotAfter are both backdated 5 minutes.
    assert_eq!((info.not_after - info.not_before).num_hours(), 8760);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_422_403_or_a_failed_condition() {
    let s = shared();
    let admin = s.http();
    // Garbage and a PEM block that is not a CSR: 422 at create (validation runs before the
    // signer-specific admission, which would say 403).
    let ca_pem = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("ca.crt");
    for (what, body) in [("garbage", "garbage".to_string()), ("a certificate", ca_pem.clone())] {
        let name = unique("bad");
        let mut m = manifest(&name, CLIENT, "x", &["client auth"], None);
        m["spec"]["request"] = json!(b64(body.as_bytes()));
        let r = send(admin.post(format!("{}{CSRS}", s.url)).json(&m)).await;
        assert_status(&r, 422, Some("Invalid"), what);
        assert_eq!(r.body["details"]["causes"][0]["field"], "spec.request", "{what}: {}", r.text);
        assert!(r.body["message"].as_str().unwrap_or_default().contains("CERTIFICATE REQUEST"), "{what}: {}", r.text);
    }

    // system:masters from the kube-apiserver-client signer: 403.
    let name = unique("masters");
    let (req, _) = request("evil", &["system:masters"]);
    let r =
        send(admin.post(format!("{}{CSRS}", s.url)).json(&manifest(&name, CLIENT, &req, &["client auth"], None))).await;
    assert_status(&r, 403, Some("Forbidden"), "system:masters");
    assert!(
        r.text.contains("use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"),
        "{}",
        r.text
    );

    // A valid CSR that breaks the signer's rules, approved: Failed, no certificate.
    let name = unique("serverauth");
    let (req, _) = request(&name, &[]);
    apply(&s, &manifest(&name, CLIENT, &req, &["client auth", "server auth"], None));
    s.kubectl_ok(&["certificate", "approve", &name]);
    let csr = wait_for(&s, &name, "a Failed condition", |c| condition(c, "Failed").is_some()).await;
    let failed = condition(&csr, "Failed").expect("Failed");
    assert_eq!(failed["status"], "True", "{csr}");
    assert_eq!(failed["reason"], "SignerValidationFailure", "{csr}");
    assert_eq!(failed["message"], "invalid usage for client certificate: server auth", "{csr}");
    assert!(certificate(&csr).is_none(), "{csr}");
    let table = s.kubectl_ok(&["get", "csr", &name, "--no-headers"]);
    assert_eq!(table.split_whitespace().last(), Some("Approved,Failed"), "{table}");

    // A kubelet client CSR with another organization, approved by the admin: Failed too.
    let name = unique("kubelet-o");
    let (req, _) = request("system:node:somewhere", &["system:nodes", "extra"]);
    apply(&s, &manifest(&name, KUBELET_CLIENT, &req, &["digital signature", "client auth"], None));
    s.kubectl_ok(&["certificate", "approve", &name]);
    let csr = wait_for(&s, &name, "a Failed condition", |c| condition(c, "Failed").is_some()).await;
    assert_eq!(
        condition(&csr, "Failed").map(|c| c["message"].clone()),
        Some(json!("subject organization is not system:nodes"))
    );
    assert!(certificate(&csr).is_none(), "{csr}");

    // Approving without `approve` on the signer: 403.
    let tag = unique("noapprove");
    let approver = issue_user(&s, &tag, &[]);
    apply(
        &s,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": tag},
            "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update", "patch"]}]}),
    );
    s.kubectl_ok(&["create", "clusterrolebinding", &tag, &format!("--clusterrole={tag}"), &format!("--user={tag}")]);
    let name = unique("not-yours");
    let (req, _) = request(&name, &[]);
    apply(&s, &manifest(&name, CLIENT, &req, &["client auth"], None));
    let err = approver.kubectl_err(&s, &["certificate", "approve", &name]);
    assert!(err.contains("Forbidden") || err.contains("forbidden"), "{err}");
    assert!(
        err.contains("user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""),
        "{err}"
    );
    // The same over raw HTTPS: 403 with a Status.
    let mut csr = get_csr(&s, &name).await.body;
    csr["status"]["conditions"] = json!([{"type": "Approved", "status": "True", "reason": "E2E", "message": "m"}]);
    let r =
        send(s.http_with_identity(&approver.identity).put(format!("{}{CSRS}/{name}/approval", s.url)).json(&csr)).await;
    assert_status(&r, 403, Some("Forbidden"), "approving without approve on the signer");
    let csr = get_csr(&s, &name).await.body;
    assert!(condition(&csr, "Approved").is_none(), "{csr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_client_csrs_are_approved_for_bootstrap_tokens_and_for_a_node_renewing_itself_only() {
    let s = shared();
    let token = bootstrap_token(&s);
    let boot = token_user(&s, "kubelet-bootstrap", &token);

    // A bootstrap-token user asks for a node certificate: nodeclient.
    let node = unique("system:node:x");
    let name = unique("node-csr");
    let (req, key) = request(&node, &["system:nodes"]);
    let out = boot.kubectl_with_input(
        &s,
        &["create", "-f", "-"],
        &manifest(&name, KUBELET_CLIENT, &req, &["digital signature", "client auth"], None),
    );
    assert!(out.status.success(), "creating the CSR with the token: {}", String::from_utf8_lossy(&out.stderr));
    let csr = wait_issued(&s, &name).await;
    let approved = condition(&csr, "Approved").expect("Approved");
    assert_eq!(approved["reason"], "AutoApproved", "{csr}");
    assert_eq!(approved["message"], "Auto approving kubelet client certificate after SubjectAccessReview.", "{csr}");
    assert_eq!(csr["spec"]["username"], format!("system:bootstrap:{}", &token[..6]), "{csr}");
    let pem = certificate(&csr).expect("certificate");
    let info = cert_info(&pem);
    assert_eq!(info.common_name, node);
    assert_eq!(info.organizations, ["system:nodes"]);

    // The node, with its new certificate, is who the certificate says.
    let ca_pem = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("ca.crt");
    let n1 = cert_user(&s, &node, &ca_pem, std::str::from_utf8(&pem).expect("PEM"), &key);
    assert_eq!(whoami(&s, &n1).expect("whoami as the node").0, node);

    // The node asks for another node's certificate: NodeRestriction refuses it at create,
    // as upstream does since 1.31 (a node's kubelet CSR names the node itself).
    let other = unique("system:node:y");
    let stolen = unique("stolen");
    let (req, _) = request(&other, &["system:nodes"]);
    let out = n1.kubectl_with_input(
        &s,
        &["create", "-f", "-"],
        &manifest(&stolen, KUBELET_CLIENT, &req, &["digital signature", "client auth"], None),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the node creates a CSR in another node's name");
    assert!(
        stderr.contains("Forbidden") && stderr.contains(&format!("can only create a node CSR with CN={node}")),
        "{stderr}"
    );

    // The node renews its own certificate: selfnodeclient, approved and issued.
    let renewal = unique("renewal");
    let (req, _) = request(&node, &["system:nodes"]);
    let out = n1.kubectl_with_input(
        &s,
        &["create", "-f", "-"],
        &manifest(&renewal, KUBELET_CLIENT, &req, &["digital signature", "client auth"], None),
    );
    assert!(out.status.success(), "the node creates its renewal: {}", String::from_utf8_lossy(&out.stderr));
    let csr = wait_issued(&s, &renewal).await;
    assert_eq!(
        condition(&csr, "Approved").map(|c| c["message"].clone()),
        Some(json!("Auto approving self kubelet client certificate after SubjectAccessReview.")),
        "{csr}"
    );
    assert_eq!(get_csr(&s, &stolen).await.code, 404, "the refused CSR was never stored");
}

trait WithInput {
    fn kubectl_with_input(&self, s: &Server, args: &[&str], input: &Value) -> std::process::Output;
}

impl WithInput for User {
    fn kubectl_with_input(&self, s: &Server, args: &[&str], input: &Value) -> std::process::Output {
        let mut cmd = self.command(s, args);
        common::run_bounded(
            &mut cmd,
            Some(&input.to_string()),
            common::KUBECTL_TIMEOUT,
            &format!("kubectl (as {})", self.name),
        )
    }
}

/// PUT `/approval` with one condition whose lastUpdateTime is `ago` in the past.
async fn decide_in_the_past(s: &Server, name: &str, type_: &str, ago: chrono::Duration) {
    let mut csr = get_csr(s, name).await.body;
    let when = (chrono::Utc::now() - ago).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    csr["status"]["conditions"] = json!([{"type": type_, "status": "True", "reason": "E2E", "message": "decided in the past",
        "lastUpdateTime": when, "lastTransitionTime": when}]);
    let r = send(s.http().put(format!("{}{CSRS}/{name}/approval", s.url)).json(&csr)).await;
    r.expect_code(200, "PUT /approval");
    assert_eq!(
        condition(&r.body, type_).map(|c| c["lastUpdateTime"].clone()),
        Some(json!(when)),
        "the time is kept: {}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_deletes_csrs_decided_more_than_an_hour_ago() {
    let s = shared();
    let fresh = unique("fresh-denied");
    let old_denied = unique("old-denied");
    let old_approved = unique("old-approved");
    for name in [&fresh, &old_denied, &old_approved] {
        let (req, _) = request(name, &[]);
        apply(&s, &manifest(name, CLIENT, &req, &["client auth"], None));
    }
    // Denied just now: kept (for an hour).
    s.kubectl_ok(&["certificate", "deny", &fresh]);
    decide_in_the_past(&s, &old_denied, "Denied", chrono::Duration::hours(2)).await;
    decide_in_the_past(&s, &old_approved, "Approved", chrono::Duration::hours(2)).await;
    wait_deleted(&s, &old_denied).await;
    // Approved two hours ago: issued by the signer, then deleted by the cleaner.
    wait_deleted(&s, &old_approved).await;
    // The fresh one was decided before the old ones, so the cleaner has seen it: still here.
    let r = get_csr(&s, &fresh).await;
    r.expect_code(200, "a CSR denied just now stays");
    assert!(condition(&r.body, "Denied").is_some(), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_rotation_takes_effect_without_a_restart() {
    // Its own server: the rotation must not disturb the other tests.
    let s = Server::start();
    let pki = s.data_dir.join("pki");
    let old_pem = std::fs::read_to_string(pki.join("ca.crt")).expect("ca.crt");
    let old_key = std::fs::read_to_string(pki.join("ca.key")).expect("ca.key");
    let old = kustos_ca::Ca::from_pem(&old_pem, &old_key).expect("the old CA");

    // Something signed before the rotation, to prove the switch later.
    let before = unique("before");
    let (req, _) = request(&before, &[]);
    apply(&s, &manifest(&before, CLIENT, &req, &["client auth"], None));
    s.kubectl_ok(&["certificate", "approve", &before]);
    let der = kustos_ca::certificates_from_pem(
        std::str::from_utf8(&certificate(&wait_issued(&s, &before).await).expect("cert")).expect("PEM"),
    )
    .expect("PEM");
    assert!(old.signed(&der[0]), "signed by the old CA before the rotation");

    // A new CA and key; the certificate file holds the new and the old CA.
    let new = kustos_ca::Ca::generate("kustos-ca-2", chrono::Duration::days(3650), chrono::Utc::now()).expect("new CA");
    let bundle = format!("{}{}", new.cert_pem(), old.cert_pem());
    std::fs::write(pki.join("ca.crt"), &bundle).expect("writing ca.crt");
    std::fs::write(pki.join("ca.key"), new.key_pem()).expect("writing ca.key");

    // The next issued certificate chains to the new CA.
    let after = unique("after");
    let (req, key) = request(&after, &["rotated"]);
    apply(&s, &manifest(&after, CLIENT, &req, &["client auth"], None));
    s.kubectl_ok(&["certificate", "approve", &after]);
    let pem = certificate(&wait_issued(&s, &after).await).expect("cert");
    let pem = String::from_utf8(pem).expect("PEM");
    let der = kustos_ca::certificates_from_pem(&pem).expect("PEM");
    assert!(new.signed(&der[0]), "signed by the new CA after the rotation");
    assert!(!old.signed(&der[0]));

    // Clients of the new CA authenticate without a restart (the apiserver polls ca.crt);
    // the old CA's clients (the admin) still do. The server still presents its old-CA
    // serving certificate, which the bundle in the kubeconfig covers.
    let rotated = cert_user(&s, &after, &bundle, &pem, &key);
    let direct = new
        .issue(
            kustos_ca::IssueParams::client("new-ca-user", vec!["team".into()], chrono::Duration::hours(1)),
            chrono::Utc::now(),
        )
        .expect("issuing from the new CA");
    let direct_user = cert_user(&s, "new-ca-user", &bundle, &direct.cert_pem, direct.key_pem.as_deref().expect("key"));
    let start = Instant::now();
    loop {
        match whoami(&s, &rotated) {
            Ok((user, groups)) => {
                assert_eq!(user, after);
                assert_eq!(groups, ["rotated", "system:authenticated"]);
                break;
            }
            Err(e) => {
                assert!(start.elapsed() < WAIT, "the new CA is not trusted after {WAIT:?}: {e}\n{}", s.stderr_tail())
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(whoami(&s, &direct_user).expect("new-CA user").0, "new-ca-user");
    assert_eq!(whoami(&s, &issue_user_with(&s, &old, "old-ca-user")).expect("old-CA user").0, "old-ca-user");
    s.kubectl_ok(&["get", "namespaces"]);

    // A broken ca.crt is reported and the last good trust set stays.
    std::fs::write(pki.join("ca.crt"), "garbage").expect("writing ca.crt");
    let start = Instant::now();
    while !s.stderr().contains("the client CA file does not load") {
        assert!(start.elapsed() < WAIT, "no report of the broken ca.crt:\n{}", s.stderr_tail());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(whoami(&s, &direct_user).expect("new-CA user after a bad file").0, "new-ca-user");
    s.kubectl_ok(&["get", "namespaces"]);
    // The signer keeps its last good CA too.
    let last = unique("last-good");
    let (req, _) = request(&last, &[]);
    apply(&s, &manifest(&last, CLIENT, &req, &["client auth"], None));
    s.kubectl_ok(&["certificate", "approve", &last]);
    let pem = String::from_utf8(certificate(&wait_issued(&s, &last).await).expect("cert")).expect("PEM");
    assert!(new.signed(&kustos_ca::certificates_from_pem(&pem).expect("PEM")[0]), "the last good CA signs");
    let log = s.stderr_tail();
    assert!(!log.contains("PRIVATE KEY"), "no key material in the log:\n{log}");
}

/// A kubectl user with a client certificate from `ca` (trusting the server's current CA
/// file for the connection).
fn issue_user_with(s: &Server, ca: &kustos_ca::Ca, name: &str) -> User {
    let issued = ca
        .issue(kustos_ca::IssueParams::client(name, vec![], chrono::Duration::hours(1)), chrono::Utc::now())
        .expect("issuing");
    let ca_pem = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("ca.crt");
    cert_user(s, name, &ca_pem, &issued.cert_pem, issued.key_pem.as_deref().expect("key"))
}
