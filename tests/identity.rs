//! Every kind of identity against the real binary with kubectl: the admin (client cert in
//! system:masters), a bootstrap token, a node client certificate, a service account token
//! and an anonymous client — what each may do (`kubectl auth can-i`), who each is
//! (`kubectl auth whoami`), and the token life cycle.

mod common;

use std::time::{Duration, Instant};

use common::{issue_user, send, shared, token_user, unique, Server, User};
use serde_json::{json, Value};

/// Creates `kube-system/bootstrap-token-<id>` and returns the token.
fn bootstrap_token(s: &Server, extra: Value) -> String {
    let id: String = unique("").chars().filter(|c| c.is_ascii_digit()).collect::<String>();
    let id = format!("{:0>6}", &id[id.len().saturating_sub(6)..]);
    let secret = "0123456789abcdef";
    let mut string_data = json!({
        "token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
    });
    if let (Some(m), Some(extra)) = (string_data.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    let manifest = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": string_data,
    });
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()));
    assert!(out.status.success(), "creating the bootstrap token: {}", String::from_utf8_lossy(&out.stderr));
    format!("{id}.{secret}")
}

fn can_i(s: &Server, u: &User, args: &[&str]) -> bool {
    let mut full = vec!["auth", "can-i"];
    full.extend_from_slice(args);
    let out = u.kubectl(s, &full);
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // "yes", or "no" optionally followed by " - <reason>".
    match stdout.split(" - ").next().unwrap_or_default() {
        "yes" => true,
        "no" => false,
        _ => panic!(
            "kubectl (as {}) auth can-i {}: unexpected answer {stdout:?}; stderr:\n{}",
            u.name,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn whoami(s: &Server, u: &User) -> Value {
    let out = u.kubectl_ok(s, &["auth", "whoami", "-o", "json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("whoami output is JSON ({e}): {out}"))
}

fn groups(review: &Value) -> Vec<String> {
    review["status"]["userInfo"]["groups"]
        .as_array()
        .map(|g| g.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// A namespace with a ServiceAccount `robot` and a token for it.
fn service_account(s: &Server) -> (String, String) {
    let ns = unique("ident");
    s.kubectl_ok(&["create", "namespace", &ns]);
    s.kubectl_ok(&["create", "serviceaccount", "robot", "-n", &ns]);
    let token = s.kubectl_ok(&["create", "token", "robot", "-n", &ns, "--duration", "20m"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    (ns, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_i_matrix_for_every_identity() {
    let s = shared();
    let admin = issue_user(&s, "matrix-admin", &["system:masters"]);
    let boot = token_user(&s, "bootstrapper", &bootstrap_token(&s, json!({})));
    let node = issue_user(&s, "system:node:matrix-n1", &["system:nodes"]);
    let (ns, token) = service_account(&s);
    let sa = token_user(&s, "robot", &token);

    // (question, admin, bootstrap token, node, service account)
    let csr = "certificatesigningrequests.certificates.k8s.io";
    let cases: &[(&[&str], [bool; 4])] = &[
        (&["create", csr], [true, true, true, false]),
        (&["create", csr, "--subresource=nodeclient"], [true, true, false, false]),
        (&["create", csr, "--subresource=selfnodeclient"], [true, false, true, false]),
        (&["list", "secrets", "-n", "kube-system"], [true, false, false, false]),
        (&["get", "secrets", "-n", &ns], [true, false, false, false]),
        (&["create", "serviceaccounts/token", "-n", &ns], [true, false, false, false]),
        (&["create", "clusterroles"], [true, false, false, false]),
        (&["get", "/version"], [true, true, true, true]),
        (&["get", "/api"], [true, true, true, true]),
        (&["get", "/openid/v1/jwks"], [true, false, false, true]),
        (&["approve", "signers.certificates.k8s.io/kubernetes.io/kubelet-serving"], [true, false, false, false]),
    ];
    for (question, want) in cases {
        for (u, want) in [&admin, &boot, &node, &sa].into_iter().zip(want) {
            assert_eq!(can_i(&s, u, question), *want, "{} can-i {}", u.name, question.join(" "));
        }
    }

    // Anonymous: only the public info (and it may not even ask can-i: no system:basic-user).
    let anon = s.anonymous();
    send(anon.get(format!("{}/version", s.url))).await.expect_code(200, "anonymous /version");
    send(anon.get(format!("{}/readyz", s.url))).await.expect_code(200, "anonymous /readyz");
    send(anon.get(format!("{}/api", s.url))).await.expect_code(403, "anonymous /api");
    send(anon.get(format!("{}/api/v1/namespaces/default/configmaps", s.url))).await.expect_code(403, "anonymous list");
    // Nor may it ask what it may do (no system:basic-user for the unauthenticated). kubectl
    // itself prompts for a password when a kubeconfig has no credentials, so ask over HTTP.
    let ssar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}});
    let r =
        send(anon.post(format!("{}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", s.url)).json(&ssar)).await;
    common::assert_status(&r, 403, Some("Forbidden"), "anonymous SelfSubjectAccessReview");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_for_every_identity() {
    let s = shared();
    let me = whoami(&s, &issue_user(&s, "who-admin", &["system:masters"]));
    assert_eq!(me["status"]["userInfo"]["username"], "who-admin");
    assert_eq!(groups(&me), vec!["system:masters", "system:authenticated"]);

    let token = bootstrap_token(&s, json!({"auth-extra-groups": "system:bootstrappers:worker"}));
    let me = whoami(&s, &token_user(&s, "boot", &token));
    let id = token.split('.').next().unwrap_or_default();
    assert_eq!(me["status"]["userInfo"]["username"], format!("system:bootstrap:{id}"));
    assert_eq!(groups(&me), vec!["system:bootstrappers", "system:bootstrappers:worker", "system:authenticated"]);

    let me = whoami(&s, &issue_user(&s, "system:node:who-n1", &["system:nodes"]));
    assert_eq!(me["status"]["userInfo"]["username"], "system:node:who-n1");
    assert_eq!(groups(&me), vec!["system:nodes", "system:authenticated"]);

    let (ns, token) = service_account(&s);
    let me = whoami(&s, &token_user(&s, "robot", &token));
    assert_eq!(me["status"]["userInfo"]["username"], format!("system:serviceaccount:{ns}:robot"));
    assert_eq!(
        groups(&me),
        vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into()
        ]
    );
    let uid = s.kubectl_ok(&["get", "serviceaccount", "robot", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(me["status"]["userInfo"]["uid"], uid.trim());
    let credential = &me["status"]["userInfo"]["extra"]["authentication.kubernetes.io/credential-id"][0];
    assert!(credential.as_str().is_some_and(|c| c.starts_with("JTI=")), "{me}");

    // Anonymous users may not ask who they are (no system:basic-user), as upstream.
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r =
        send(s.anonymous().post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url)).json(&review))
            .await;
    common::assert_status(&r, 403, Some("Forbidden"), "anonymous SelfSubjectReview");
    // With --anonymous-auth=false the same request is not even authenticated.
    let closed = Server::start_with(&["--anonymous-auth=false"]);
    let r = send(
        closed
            .anonymous()
            .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", closed.url))
            .json(&review),
    )
    .await;
    common::assert_status(&r, 401, Some("Unauthorized"), "no anonymous access");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_works_until_its_service_account_is_deleted() {
    let s = shared();
    let (ns, token) = service_account(&s);
    let robot = token_user(&s, "robot", &token);
    s.kubectl_ok(&["create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", &ns]);
    s.kubectl_ok(&[
        "create",
        "rolebinding",
        "robot-reads",
        "--role=cm-reader",
        &format!("--serviceaccount={ns}:robot"),
        "-n",
        &ns,
    ]);
    s.kubectl_ok(&["create", "configmap", "c1", "-n", &ns, "--from-literal=a=b"]);
    assert!(robot.kubectl_ok(&s, &["get", "configmap", "c1", "-n", &ns, "-o", "name"]).contains("configmap/c1"));
    let err = robot.kubectl_err(&s, &["get", "secrets", "-n", &ns]);
    assert!(err.contains("cannot list resource \"secrets\""), "{err}");

    s.kubectl_ok(&["delete", "serviceaccount", "robot", "-n", &ns]);
    let err = robot.kubectl_err(&s, &["get", "configmap", "c1", "-n", &ns]);
    assert!(err.contains("Unauthorized"), "a deleted ServiceAccount's token is rejected: {err}");
    // A new ServiceAccount of the same name has another uid: the old token stays invalid.
    s.kubectl_ok(&["create", "serviceaccount", "robot", "-n", &ns]);
    let err = robot.kubectl_err(&s, &["get", "configmap", "c1", "-n", &ns]);
    assert!(err.contains("Unauthorized"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_token_cannot_read_secrets_or_other_csrs() {
    let s = shared();
    let boot = token_user(&s, "boot", &bootstrap_token(&s, json!({})));
    let err = boot.kubectl_err(&s, &["get", "secrets", "-n", "kube-system"]);
    assert!(err.contains("forbidden"), "{err}");
    let err = boot.kubectl_err(&s, &["get", "csr"]);
    assert!(err.contains("forbidden"), "{err}");
    // An expired token is rejected, not treated as anonymous.
    let expired = token_user(&s, "expired", &bootstrap_token(&s, json!({"expiration": "2020-01-01T00:00:00Z"})));
    let err = expired.kubectl_err(&s, &["auth", "whoami"]);
    assert!(err.contains("Unauthorized"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_roles_bindings_and_aggregated_cluster_roles() {
    let s = shared();
    let label = unique("agg");
    let agg = format!("{label}-parent");
    s.kubectl_ok(&["create", "clusterrole", &agg, &format!("--aggregation-rule=kustos.test/{label}=true")]);
    let child = format!("{label}-child");
    s.kubectl_ok(&["create", "clusterrole", &child, "--verb=get,list", "--resource=configmaps"]);
    s.kubectl_ok(&["label", "clusterrole", &child, &format!("kustos.test/{label}=true")]);
    let rules = || s.kubectl_ok(&["get", "clusterrole", &agg, "-o", "jsonpath={.rules}"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rules().contains("configmaps") {
        assert!(Instant::now() < deadline, "the aggregated role never got the child's rules: {}", rules());
        std::thread::sleep(Duration::from_millis(200));
    }
    s.kubectl_ok(&["delete", "clusterrole", &child]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while rules().contains("configmaps") {
        assert!(Instant::now() < deadline, "the aggregated role kept the deleted child's rules: {}", rules());
        std::thread::sleep(Duration::from_millis(200));
    }

    // The default aggregated roles are filled too: view can list configmaps.
    let view = s.kubectl_ok(&["get", "clusterrole", "view", "-o", "json"]);
    assert!(view.contains("configmaps"), "view is aggregated: {view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_credentials_get_401_never_a_crash() {
    use base64::Engine as _;
    let s = shared();
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let none_alg = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(
            &json!({"iss": "https://kubernetes.default.svc.cluster.local", "sub": "system:serviceaccount:kube-system:default",
                    "aud": ["https://kubernetes.default.svc.cluster.local"], "exp": 4102444800u64})
        )
    );
    let mut tokens: Vec<Vec<u8>> = vec![
        b"abcdef.0123456789abcdef".to_vec(),
        b"ABCDEF.0123456789ABCDEF".to_vec(),
        b"a.b.c".to_vec(),
        b"eyJ.eyJ.sig".to_vec(),
        none_alg.into_bytes(),
        "x".repeat(8 * 1024).into_bytes(),
        b"\x80\x81\xfe\xff".to_vec(),
        "токен.токен".as_bytes().to_vec(),
        b"....".to_vec(),
    ];
    // Random printable-or-not bytes (deterministic).
    let mut x: u32 = 0x2545_f491;
    for len in [1usize, 7, 23, 22, 100] {
        tokens.push(
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x % 94 + 33) as u8
                })
                .collect(),
        );
    }
    let anon = s.anonymous();
    for t in &tokens {
        let mut value = b"Bearer ".to_vec();
        value.extend_from_slice(t);
        let Ok(header) = reqwest::header::HeaderValue::from_bytes(&value) else { continue };
        let r = send(anon.get(format!("{}/api/v1/namespaces", s.url)).header("Authorization", header)).await;
        assert_eq!(r.code, 401, "token {:?}: {}", String::from_utf8_lossy(&t[..t.len().min(40)]), r.text);
    }
    // Odd impersonation headers from the admin: a clear error, never a 500 panic body.
    for value in [&b"\x80\xff"[..], b"", b"system:serviceaccount:", b"system:serviceaccount:a:b:c"] {
        let Ok(header) = reqwest::header::HeaderValue::from_bytes(value) else { continue };
        let r = send(s.http().get(format!("{}/api/v1/namespaces", s.url)).header("Impersonate-User", header)).await;
        assert!(r.code < 500 || r.body["reason"] == "InternalError", "impersonating {value:?}: {} {}", r.code, r.text);
        assert!(!r.text.contains("panicked"), "{}", r.text);
    }
    send(anon.get(format!("{}/readyz", s.url))).await.expect_code(200, "still healthy");
}

/// A CSR object for `signer` whose request has CN `cn` and O `orgs`.
fn csr_manifest(name: &str, signer: &str, cn: &str, orgs: &[&str]) -> Value {
    use base64::Engine as _;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    for o in orgs {
        params.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
    }
    let pem = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
           "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem), "signerName": signer,
                    "usages": ["client auth"]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_and_signing_need_rights_on_the_signer() {
    use base64::Engine as _;
    let s = shared();
    let tag = unique("appr");
    let approver = issue_user(&s, &format!("{tag}-approver"), &[]);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("{tag}-csr")},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list", "watch"]},
                  {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval", "certificatesigningrequests/status"], "verbs": ["update", "patch"]}]});
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&role.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{tag}-csr"),
        &format!("--clusterrole={tag}-csr"),
        &format!("--user={}", approver.name),
    ]);

    let name = format!("{tag}-one");
    let out = s.kubectl_with_stdin(
        &["create", "-f", "-"],
        Some(&csr_manifest(&name, "example.com/foo", "someone", &[]).to_string()),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Update on /approval alone is not enough: `approve` on the signer is needed.
    let err = approver.kubectl_err(&s, &["certificate", "approve", &name]);
    assert!(err.contains("user not permitted to approve requests with signerName \"example.com/foo\""), "{err}");
    // `approve` on example.com/* covers example.com/foo.
    let signers = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("{tag}-signer")},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"], "resourceNames": ["example.com/*"]}]});
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&signers.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{tag}-signer"),
        &format!("--clusterrole={tag}-signer"),
        &format!("--user={}", approver.name),
    ]);
    approver.kubectl_ok(&s, &["certificate", "approve", &name]);

    // Setting status.certificate needs `sign`.
    let csr = s.kubectl_ok(&["get", "csr", &name, "-o", "json"]);
    let mut csr: Value = serde_json::from_str(&csr).expect("CSR JSON");
    let some_cert = std::fs::read(s.data_dir.join("pki/ca.crt")).expect("reading ca.crt");
    csr["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(some_cert));
    let r = send(
        s.http_with_identity(&approver.identity)
            .put(format!("{}/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status", s.url))
            .json(&csr),
    )
    .await;
    common::assert_status(&r, 403, Some("Forbidden"), "setting a certificate without sign");
    assert!(r.text.contains("user not permitted to sign requests with signerName"), "{}", r.text);

    // system:masters may not be requested from the kube-apiserver-client signer.
    let masters =
        csr_manifest(&format!("{tag}-masters"), "kubernetes.io/kube-apiserver-client", "evil", &["system:masters"]);
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&masters.to_string()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err
                .contains("use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"),
        "{err}"
    );
}
