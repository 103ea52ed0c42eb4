//! ServiceAccounts end to end in `kustos server`: the in-process controllers (default
//! account, `kube-root-ca.crt`, legacy token Secrets and their clean-up), legacy token use
//! tracking, OIDC discovery, and impersonation through kubectl.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{issue_user, send, shared, token_user, unique, Server};
use serde_json::{json, Value};

/// Poll `f` (≤ 30 s) until it returns Some.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get_json(s: &Server, args: &[&str]) -> Option<Value> {
    let mut full = vec!["get"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["-o", "json"]);
    let out = s.kubectl(&full);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_gets_a_default_account_and_the_root_ca() {
    let s = shared();
    let ns = unique("sa");
    s.kubectl_ok(&["create", "namespace", &ns]);
    eventually("the default ServiceAccount", || get_json(&s, &["serviceaccount", "default", "-n", &ns]));
    let ca = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("reading ca.crt");
    let cm = eventually("kube-root-ca.crt", || get_json(&s, &["configmap", "kube-root-ca.crt", "-n", &ns]));
    assert_eq!(cm["data"]["ca.crt"], ca.as_str());
    assert!(cm["metadata"]["annotations"]["kubernetes.io/description"]
        .as_str()
        .is_some_and(|d| d.starts_with("Contains a CA bundle")));

    // Deleted or edited, both come back as they were.
    s.kubectl_ok(&["delete", "serviceaccount", "default", "-n", &ns]);
    s.kubectl_ok(&[
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"data":{"ca.crt":"tampered"}}"#,
    ]);
    eventually("the default ServiceAccount again", || get_json(&s, &["serviceaccount", "default", "-n", &ns]));
    eventually("kube-root-ca.crt restored", || {
        get_json(&s, &["configmap", "kube-root-ca.crt", "-n", &ns]).filter(|cm| cm["data"]["ca.crt"] == ca.as_str())
    });
    // Also the system namespaces.
    for system in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        eventually("kube-root-ca.crt in a system namespace", || {
            get_json(&s, &["configmap", "kube-root-ca.crt", "-n", system])
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_ca_configmaps_follow_the_ca_file() {
    let s = Server::start();
    let ns = unique("ca");
    s.kubectl_ok(&["create", "namespace", &ns]);
    eventually("kube-root-ca.crt", || get_json(&s, &["configmap", "kube-root-ca.crt", "-n", &ns]));
    // A CA rotation adds the new CA to the bundle file: every ConfigMap follows.
    let path = s.data_dir.join("pki/ca.crt");
    let mut bundle = std::fs::read_to_string(&path).expect("reading ca.crt");
    let extra = kustos_ca::Ca::generate("rotated", chrono::Duration::days(30), chrono::Utc::now()).expect("a CA");
    bundle.push_str(extra.cert_pem());
    std::fs::write(&path, &bundle).expect("writing ca.crt");
    for n in [ns.as_str(), "default"] {
        eventually("the new bundle", || {
            get_json(&s, &["configmap", "kube-root-ca.crt", "-n", n])
                .filter(|cm| cm["data"]["ca.crt"] == bundle.as_str())
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_token_secrets_are_filled_tracked_and_revoked() {
    let s = shared();
    let ns = unique("legacy");
    s.kubectl_ok(&["create", "namespace", &ns]);
    s.kubectl_ok(&["create", "serviceaccount", "old-style", "-n", &ns]);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "old-style-token", "namespace": ns,
                     "annotations": {"kubernetes.io/service-account.name": "old-style"}}});
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&secret.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let filled = eventually("the token controller to fill the secret", || {
        get_json(&s, &["secret", "old-style-token", "-n", &ns]).filter(|s| s["data"]["token"].is_string())
    });
    let b64 = |v: &Value| {
        base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or_default()).expect("base64 data")
    };
    let ca = std::fs::read(s.data_dir.join("pki/ca.crt")).expect("reading ca.crt");
    assert_eq!(b64(&filled["data"]["ca.crt"]), ca);
    assert_eq!(b64(&filled["data"]["namespace"]), ns.as_bytes());
    let uid = s.kubectl_ok(&["get", "serviceaccount", "old-style", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(filled["metadata"]["annotations"]["kubernetes.io/service-account.uid"], uid.trim());
    let token = String::from_utf8(b64(&filled["data"]["token"])).expect("a text token");

    // The token works and its use is tracked on the Secret.
    let robot = token_user(&s, "old-style", &token);
    let me = robot.kubectl_ok(&s, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(me, format!("system:serviceaccount:{ns}:old-style"));
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    eventually("the last-used label", || {
        get_json(&s, &["secret", "old-style-token", "-n", &ns])
            .filter(|s| s["metadata"]["labels"]["kubernetes.io/legacy-token-last-used"] == today.as_str())
    });
    assert!(get_json(&s, &["configmap", "kube-apiserver-legacy-service-account-token-tracking", "-n", "kube-system"])
        .is_some());

    // Labelled invalid: rejected. Label removed: accepted again.
    s.kubectl_ok(&[
        "label",
        "secret",
        "old-style-token",
        "-n",
        &ns,
        "kubernetes.io/legacy-token-invalid-since=2020-01-01",
    ]);
    let err = robot.kubectl_err(&s, &["auth", "whoami"]);
    assert!(err.contains("Unauthorized"), "{err}");
    s.kubectl_ok(&["label", "secret", "old-style-token", "-n", &ns, "kubernetes.io/legacy-token-invalid-since-"]);
    robot.kubectl_ok(&s, &["auth", "whoami"]);

    // Deleting the ServiceAccount deletes its token Secret.
    s.kubectl_ok(&["delete", "serviceaccount", "old-style", "-n", &ns]);
    eventually("the token secret to go", || {
        get_json(&s, &["secret", "old-style-token", "-n", &ns]).is_none().then_some(())
    });
    let err = robot.kubectl_err(&s, &["auth", "whoami"]);
    assert!(err.contains("Unauthorized"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_discovery_serves_the_keys_of_issued_tokens() {
    let s = shared();
    let ns = unique("oidc");
    s.kubectl_ok(&["create", "namespace", &ns]);
    s.kubectl_ok(&["create", "serviceaccount", "reader", "-n", &ns]);
    let token = s
        .kubectl_ok(&["create", "token", "reader", "-n", &ns, "--audience", "https://example.test"])
        .trim()
        .to_string();
    let header = token.split('.').next().unwrap_or_default();
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).expect("base64url header"),
    )
    .expect("JSON header");
    // Service accounts may read the discovery documents (system:service-account-issuer-discovery).
    let reader = token_user(&s, "reader", s.kubectl_ok(&["create", "token", "reader", "-n", &ns]).trim());
    let config: Value =
        serde_json::from_str(&reader.kubectl_ok(&s, &["get", "--raw", "/.well-known/openid-configuration"]))
            .expect("openid configuration is JSON");
    assert_eq!(config["issuer"], "https://kubernetes.default.svc.cluster.local");
    let jwks: Value =
        serde_json::from_str(&reader.kubectl_ok(&s, &["get", "--raw", "/openid/v1/jwks"])).expect("JWKS is JSON");
    let kids: Vec<&str> = jwks["keys"].as_array().into_iter().flatten().filter_map(|k| k["kid"].as_str()).collect();
    assert!(kids.contains(&header["kid"].as_str().unwrap_or_default()), "{kids:?} vs {header}");
    // Anonymous users may not (upstream binds the role to service accounts only).
    let r = send(s.anonymous().get(format!("{}/openid/v1/jwks", s.url))).await;
    common::assert_status(&r, 403, Some("Forbidden"), "anonymous JWKS");
    // A token for another audience does not work on the API.
    let other = token_user(&s, "elsewhere", &token);
    let err = other.kubectl_err(&s, &["auth", "whoami"]);
    assert!(err.contains("Unauthorized"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_impersonation_needs_the_impersonate_verb() {
    let s = shared();
    let ns = unique("imp");
    s.kubectl_ok(&["create", "namespace", &ns]);
    // The admin may impersonate anyone; jane has no rights.
    let out = s.kubectl(&["get", "configmaps", "-n", &ns, "--as=jane", "--as-group=devs"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("User \"jane\" cannot list resource \"configmaps\""), "{err}");
    let me =
        s.kubectl_ok(&["auth", "whoami", "--as=jane", "--as-group=devs", "-o", "jsonpath={.status.userInfo.groups}"]);
    assert_eq!(me, r#"["devs","system:authenticated"]"#);
    s.kubectl_ok(&["create", "rolebinding", "devs-view", "--clusterrole=view", "--group=devs", "-n", &ns]);
    // `view` gets its rules from the aggregation controller a moment after the server starts.
    eventually("view to let devs list config maps", || {
        s.kubectl(&["get", "configmaps", "-n", &ns, "--as=jane", "--as-group=devs"]).status.success().then_some(())
    });

    // bob may impersonate only jane.
    let bob = issue_user(&s, "bob", &[]);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{ns}-impersonate-jane")},
        "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["jane"]}]});
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&role.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{ns}-bob"),
        &format!("--clusterrole={ns}-impersonate-jane"),
        "--user=bob",
    ]);
    let me = bob.kubectl_ok(&s, &["auth", "whoami", "--as=jane", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(me, "jane");
    // Denials over HTTP (kubectl's discovery already fails under a forbidden impersonation).
    let bob_http = s.http_with_identity(&bob.identity);
    let cms = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let r = send(bob_http.get(&cms).header("Impersonate-User", "alice")).await;
    common::assert_status(&r, 403, Some("Forbidden"), "bob impersonating alice");
    let msg = r.body["message"].as_str().unwrap_or_default().to_string();
    assert_eq!(msg, "users \"alice\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
    let r = send(bob_http.get(&cms).header("Impersonate-User", "jane").header("Impersonate-Group", "admins")).await;
    common::assert_status(&r, 403, Some("Forbidden"), "bob impersonating a group");
    assert!(
        r.body["message"].as_str().is_some_and(|m| m.contains("cannot impersonate resource \"groups\"")),
        "{}",
        r.text
    );
    let r = send(bob_http.get(&cms).header("Impersonate-User", "jane")).await;
    common::assert_status(&r, 403, Some("Forbidden"), "jane herself may not list configmaps");
    assert!(r.body["message"].as_str().is_some_and(|m| m.contains("User \"jane\" cannot list")), "{}", r.text);
    // Groups without a user are refused (400 BadRequest, as current upstream).
    let r = send(s.http().get(format!("{}/api/v1/namespaces", s.url)).header("Impersonate-Group", "devs")).await;
    common::assert_status(&r, 400, Some("BadRequest"), "Impersonate-Group without Impersonate-User");
}
