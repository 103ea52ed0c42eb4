//! The audit log end to end: `kustos server` with the shipped policy
//! (`manifests/audit/audit-policy.yaml`) and `--audit-log-path`. A user creates a CSR (with
//! an `Audit-ID` of its own), the admin approves it with kubectl, the signing controller
//! signs it, the admin asks for a token (TokenRequest) and grants RBAC; the log holds each
//! with its user, stage and level, `Audit-Id` headers equal the events' IDs, and no token
//! reaches the log. A bad policy file stops the server with one line.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{issue_user, kustos, send, unique, Server};
use serde_json::{json, Value};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const WAIT: Duration = Duration::from_secs(60);

fn policy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/audit/audit-policy.yaml")
}

fn csr(name: &str) -> Value {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, "audited");
    let pem = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})
}

fn events(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

/// Wait (bounded) until an event matching `want` is in the log; returns all events.
async fn wait_event(log: &Path, what: &str, want: impl Fn(&Value) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let all = events(log);
        if all.iter().any(&want) {
            return all;
        }
        assert!(start.elapsed() < WAIT, "no event for {what} within {WAIT:?}; the log:\n{}", all.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn find<'a>(all: &'a [Value], what: &str, want: impl Fn(&Value) -> bool) -> &'a Value {
    all.iter().find(|e| want(e)).unwrap_or_else(|| {
        let lines: Vec<String> = all
            .iter()
            .map(|e| format!("{} {} {} {}", e["stage"], e["verb"], e["user"]["username"], e["objectRef"]))
            .collect();
        panic!("no event for {what} in:\n{}", lines.join("\n"))
    })
}

fn is(e: &Value, verb: &str, resource: &str, sub: &str, name: &str, stage: &str) -> bool {
    e["verb"] == verb
        && e["objectRef"]["resource"] == resource
        && e["objectRef"]["subresource"].as_str().unwrap_or("") == sub
        && e["objectRef"]["name"] == name
        && e["stage"] == stage
}

#[tokio::test]
async fn the_shipped_policy_records_csrs_signing_tokens_and_rbac_by_their_users() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("audit").join("audit.log");
    let (policy, log_arg) = (policy(), log.to_string_lossy().into_owned());
    let s = Server::start_with(&["--audit-policy-file", policy.to_str().expect("path"), "--audit-log-path", &log_arg]);
    let alice_name = unique("alice");
    let alice = issue_user(&s, &alice_name, &["system:authenticated"]);
    let binding = unique("alice-csr");
    s.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=system:node-bootstrapper",
        "--user",
        &alice_name,
    ]);

    // A CSR created by alice, with her own audit ID.
    let name = unique("audited");
    let client = s.http_with_identity(&alice.identity);
    let reply =
        send(client.post(format!("{}{CSRS}", s.url)).header("Audit-ID", "alice-chose-this-id").json(&csr(&name))).await;
    reply.expect_code(201, "alice creates a CSR");
    assert_eq!(reply.header("audit-id").as_deref(), Some("alice-chose-this-id"), "a client's Audit-ID is kept");

    s.kubectl_ok(&["certificate", "approve", &name]);
    s.wait_for_object(&format!("{CSRS}/{name}"), "a certificate", WAIT, |c| {
        c["status"]["certificate"].as_str().is_some_and(|c| !c.is_empty())
    })
    .await;

    // A TokenRequest by the admin: its Audit-Id header is a fresh UUID.
    s.kubectl_ok(&["create", "serviceaccount", "audited-sa", "-n", "default"]);
    let reply = send(
        s.http()
            .post(format!("{}/api/v1/namespaces/default/serviceaccounts/audited-sa/token", s.url))
            .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})),
    )
    .await;
    reply.expect_code(201, "a TokenRequest");
    let token = reply.body["status"]["token"].as_str().expect("a token").to_string();
    let token_id = reply.header("audit-id").expect("an Audit-Id header");
    assert!(uuid_like(&token_id), "a generated audit ID is a UUID: {token_id}");

    // A refusal: alice may not read Secrets.
    let reply = send(client.get(format!("{}/api/v1/namespaces/default/secrets", s.url))).await;
    reply.expect_code(403, "alice lists secrets");
    let forbidden_id = reply.header("audit-id").expect("an Audit-Id header on a 403");

    let signed = |e: &Value| is(e, "update", "certificatesigningrequests", "status", &name, "ResponseComplete");
    let all = wait_event(&log, "the signing", signed).await;
    let all = if all.iter().any(|e| e["auditID"] == forbidden_id.as_str() && e["stage"] == "ResponseComplete") {
        all
    } else {
        wait_event(&log, "the refusal", |e| e["auditID"] == forbidden_id.as_str() && e["stage"] == "ResponseComplete")
            .await
    };

    for e in &all {
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
        assert!(e["stageTimestamp"].as_str().is_some_and(|t| t.len() == "2026-01-01T00:00:00.000000Z".len()), "{e}");
    }

    // The create: alice, Request level, both stages, her ID, the CSR as requestObject. The
    // name comes from the request object, which RequestReceived precedes (as upstream).
    for stage in ["RequestReceived", "ResponseComplete"] {
        let e = find(&all, "the create", |e| e["auditID"] == "alice-chose-this-id" && e["stage"] == stage);
        assert_eq!(e["verb"], "create", "{e}");
        assert_eq!(e["objectRef"]["resource"], "certificatesigningrequests", "{e}");
        assert_eq!(e["user"]["username"], alice_name.as_str(), "{e}");
        assert_eq!(e["level"], "Request", "{e}");
        assert_eq!(e["auditID"], "alice-chose-this-id", "{e}");
        assert_eq!(e["objectRef"]["apiGroup"], "certificates.k8s.io", "{e}");
        assert_eq!(e["objectRef"]["apiVersion"], "v1", "{e}");
        assert!(e.get("responseObject").is_none(), "{e}");
    }
    let created =
        find(&all, "the create", |e| is(e, "create", "certificatesigningrequests", "", &name, "ResponseComplete"));
    assert_eq!(created["auditID"], "alice-chose-this-id", "{created}");
    assert_eq!(created["responseStatus"]["code"], 201, "{created}");
    assert_eq!(created["requestObject"]["kind"], "CertificateSigningRequest", "{created}");
    assert_eq!(created["annotations"]["authorization.k8s.io/decision"], "allow", "{created}");
    assert!(created["sourceIPs"][0] == "127.0.0.1", "{created}");

    // The approval: the admin, through the approval subresource.
    let approved = find(&all, "the approval", |e| {
        is(e, "update", "certificatesigningrequests", "approval", &name, "ResponseComplete")
    });
    assert_eq!(approved["user"]["username"], "kustos-admin", "{approved}");
    assert_eq!(approved["level"], "Request", "{approved}");
    assert_eq!(approved["responseStatus"]["code"], 200, "{approved}");
    assert!(approved["userAgent"].as_str().is_some_and(|a| a.starts_with("kubectl")), "{approved}");

    // The signing: the controllers' own user.
    let signing = find(&all, "the signing", signed);
    assert_eq!(signing["user"]["username"], "system:kube-controller-manager", "{signing}");
    assert_eq!(signing["level"], "Request", "{signing}");
    assert!(signing["requestObject"]["status"]["certificate"].is_string(), "{signing}");
    assert!(signing["requestObject"]["metadata"].get("managedFields").is_none(), "omitManagedFields: {signing}");

    // The TokenRequest: Metadata, no bodies, the header's ID.
    let issued = find(&all, "the token request", |e| {
        is(e, "create", "serviceaccounts", "token", "audited-sa", "ResponseComplete")
    });
    assert_eq!(issued["level"], "Metadata", "{issued}");
    assert_eq!(issued["auditID"], token_id.as_str(), "{issued}");
    assert_eq!(issued["objectRef"]["namespace"], "default", "{issued}");
    assert!(issued.get("requestObject").is_none() && issued.get("responseObject").is_none(), "{issued}");
    // The issued credential is named, as the token's later uses name it (credential-id JTI=...).
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims).expect("base64url"),
    )
    .expect("JSON claims");
    let jti = claims["jti"].as_str().expect("a jti");
    assert_eq!(
        issued["annotations"]["authentication.kubernetes.io/issued-credential-id"],
        format!("JTI={jti}").as_str(),
        "{issued}"
    );

    // The refusal: Metadata, the Status' reason, the authorizer's decision.
    let refused =
        find(&all, "the refusal", |e| e["auditID"] == forbidden_id.as_str() && e["stage"] == "ResponseComplete");
    assert_eq!(refused["verb"], "list", "{refused}");
    assert_eq!(refused["responseStatus"]["code"], 403, "{refused}");
    assert_eq!(refused["responseStatus"]["reason"], "Forbidden", "{refused}");
    assert_eq!(refused["annotations"]["authorization.k8s.io/decision"], "forbid", "{refused}");

    // RBAC: the binding at Request with its body.
    let granted =
        find(&all, "the binding", |e| is(e, "create", "clusterrolebindings", "", &binding, "ResponseComplete"));
    assert_eq!(granted["level"], "Request", "{granted}");
    assert_eq!(granted["requestObject"]["roleRef"]["name"], "system:node-bootstrapper", "{granted}");

    // Health checks are not logged; no token reaches the log.
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(!text.contains(&token), "the issued token is in the audit log");
    assert!(!all.iter().any(|e| e["requestURI"].as_str().is_some_and(|u| u.starts_with("/readyz"))));

    // Metrics.
    let metrics = send(s.http().get(format!("{}/metrics", s.url))).await;
    for line in [
        "apiserver_audit_event_total ",
        "apiserver_audit_level_total{level=\"Request\"} ",
        "apiserver_audit_error_total{plugin=\"buffered\"} 0",
    ] {
        assert!(metrics.text.contains(line), "/metrics lacks {line}");
    }
}

fn uuid_like(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[test]
fn a_bad_policy_file_stops_the_server_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("policy.yaml");
    std::fs::write(&bad, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n").expect("write");
    let data = dir.path().join("data");
    let out = kustos(&[
        "server",
        "--data-dir",
        data.to_str().expect("path"),
        "--secure-port",
        "0",
        "--audit-policy-file",
        bad.to_str().expect("path"),
        "--audit-log-path",
        dir.path().join("audit.log").to_str().expect("path"),
    ]);
    assert!(!out.status.success(), "the server started with a bad policy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("audit policy")).collect();
    assert_eq!(lines.len(), 1, "one line about the policy: {stderr}");
    assert!(lines[0].contains("policy.yaml") && lines[0].contains("Loud"), "{stderr}");
}
