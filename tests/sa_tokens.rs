//! Service-account tokens end to end: the real binary, `kubectl create token`, bearer tokens
//! on requests (401 when authentication fails, 403 when it succeeds but RBAC says no),
//! revocation by deleting the service account or the bound Secret, legacy Secret-based
//! tokens, and OIDC discovery. Service accounts are created explicitly.

mod common;

use base64::Engine as _;
use common::{send, shared, token_user, unique, Reply, Server};
use serde_json::{json, Value};

const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

fn namespace(s: &Server, prefix: &str) -> String {
    let ns = unique(prefix);
    s.kubectl_ok(&["create", "namespace", &ns]);
    ns
}

fn create_token(s: &Server, args: &[&str]) -> String {
    let mut all = vec!["create", "token"];
    all.extend_from_slice(args);
    let token = s.kubectl_ok(&all).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "kubectl create token printed a JWT: {token}");
    token
}

/// The unverified header and claims of a JWT.
fn decode(token: &str) -> (Value, Value) {
    let part = |i: usize| -> Value {
        let seg = token.split('.').nth(i).expect("JWT segment");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(seg).expect("base64url segment");
        serde_json::from_slice(&bytes).expect("JSON segment")
    };
    (part(0), part(1))
}

/// POST a SelfSubjectReview with the token: 201 with the identity, or 401.
async fn whoami(s: &Server, token: &str) -> Reply {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body)).await
}

async fn get_with(s: &Server, token: &str, path: &str) -> Reply {
    send(s.anonymous().get(format!("{}{path}", s.url)).bearer_auth(token)).await
}

fn assert_unauthorized(r: &Reply, what: &str) {
    common::assert_status(r, 401, Some("Unauthorized"), what);
}

fn username(r: &Reply) -> String {
    r.body["status"]["userInfo"]["username"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_and_use_it() {
    let s = shared();
    let ns = namespace(&s, "sat");
    s.kubectl_ok(&["create", "serviceaccount", "builder", "-n", &ns]);
    let sa: Value = serde_json::from_str(&s.kubectl_ok(&["get", "serviceaccount", "builder", "-n", &ns, "-o", "json"]))
        .expect("SA JSON");
    let sa_uid = sa["metadata"]["uid"].as_str().expect("SA uid").to_string();

    // A token for another audience, 20 minutes.
    let token_x = create_token(&s, &["builder", "-n", &ns, "--duration", "20m", "--audience", "x"]);
    let (header, claims) = decode(&token_x);
    assert_eq!(header["alg"], "ES256", "{header}");
    assert_eq!(claims["aud"], json!(["x"]), "{claims}");
    assert_eq!(claims["iss"], "https://kubernetes.default.svc.cluster.local", "{claims}");
    assert_eq!(claims["sub"], format!("system:serviceaccount:{ns}:builder"), "{claims}");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["uid"], sa_uid.as_str(), "{claims}");
    assert_eq!(claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0), 1200, "{claims}");
    // Not meant for the apiserver: 401.
    assert_unauthorized(&whoami(&s, &token_x).await, "a token for audience x on a request");

    // A token for the apiserver.
    let token = create_token(&s, &["builder", "-n", &ns]);
    let r = whoami(&s, &token).await;
    r.expect_code(201, "SelfSubjectReview with the SA token");
    assert_eq!(username(&r), format!("system:serviceaccount:{ns}:builder"), "{}", r.text);
    let info = &r.body["status"]["userInfo"];
    assert_eq!(info["uid"], sa_uid.as_str(), "{}", r.text);
    let groups: Vec<&str> =
        info["groups"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    assert_eq!(
        groups,
        ["system:serviceaccounts", &format!("system:serviceaccounts:{ns}"), "system:authenticated"],
        "{}",
        r.text
    );
    let jti = decode(&token).1["jti"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        info["extra"]["authentication.kubernetes.io/credential-id"],
        json!([format!("JTI={jti}")]),
        "{}",
        r.text
    );
    // kubectl with the token: whoami works, reading what RBAC does not grant is 403.
    let user = token_user(&s, "builder", &token);
    let out = user.kubectl_ok(&s, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(out.trim(), format!("system:serviceaccount:{ns}:builder"));
    let r = get_with(&s, &token, &format!("/api/v1/namespaces/{ns}/configmaps")).await;
    common::assert_status(&r, 403, Some("Forbidden"), "authenticated but not authorized");
    assert!(r.text.contains(&format!("system:serviceaccount:{ns}:builder")), "{}", r.text);

    // A flipped signature byte: 401.
    let mut bytes = token.clone().into_bytes();
    let i = bytes.len() - 4;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(bytes).unwrap_or_default();
    assert_unauthorized(&whoami(&s, &forged).await, "a token with a flipped signature byte");

    // The token's key is published.
    let r = send(s.http().get(format!("{}/openid/v1/jwks", s.url))).await;
    r.expect_code(200, "GET /openid/v1/jwks");
    assert_eq!(r.header("content-type").as_deref(), Some("application/jwk-set+json"));
    let kids: Vec<&str> =
        r.body["keys"].as_array().map(|a| a.iter().filter_map(|k| k["kid"].as_str()).collect()).unwrap_or_default();
    assert!(kids.contains(&header["kid"].as_str().unwrap_or("?")), "kid {} in {}", header["kid"], r.text);
    // Service accounts may read the discovery documents themselves.
    let r = get_with(&s, &token, "/.well-known/openid-configuration").await;
    r.expect_code(200, "openid-configuration as the service account");
    assert_eq!(r.body["issuer"], "https://kubernetes.default.svc.cluster.local", "{}", r.text);
    assert_eq!(r.body["jwks_uri"], format!("https://{}/openid/v1/jwks", s.addr), "{}", r.text);
    assert_eq!(r.body["id_token_signing_alg_values_supported"], json!(["ES256"]), "{}", r.text);

    // Deleting the service account revokes the token, also once it is recreated.
    s.kubectl_ok(&["delete", "serviceaccount", "builder", "-n", &ns]);
    assert_unauthorized(&whoami(&s, &token).await, "token of a deleted service account");
    s.kubectl_ok(&["create", "serviceaccount", "builder", "-n", &ns]);
    assert_unauthorized(&whoami(&s, &token).await, "token of a deleted and recreated service account");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_request_errors_over_http() {
    let s = shared();
    let ns = namespace(&s, "sat-err");
    s.kubectl_ok(&["create", "serviceaccount", "builder", "-n", &ns]);
    let url = |sa: &str| format!("{}/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", s.url);
    let tr = |spec: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});

    let r = send(s.http().post(url("builder")).json(&tr(json!({"expirationSeconds": 60})))).await;
    common::assert_status(&r, 422, Some("Invalid"), "expirationSeconds below 10 minutes");
    assert_eq!(
        r.body["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
        "{}",
        r.text
    );
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.expirationSeconds", "{}", r.text);
    let r = send(s.http().post(url("ghost")).json(&tr(json!({})))).await;
    common::assert_status(&r, 404, Some("NotFound"), "no such service account");
    let r = send(
        s.http()
            .post(url("builder"))
            .json(&tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "p"}}))),
    )
    .await;
    common::assert_status(&r, 400, Some("BadRequest"), "bound to a ConfigMap");
    assert_eq!(r.body["message"], "cannot bind token to object of type /v1, Kind=ConfigMap", "{}", r.text);
    // Pods and Nodes are served: binding to one that does not exist is a 404.
    let r = send(
        s.http()
            .post(url("builder"))
            .json(&tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}}))),
    )
    .await;
    common::assert_status(&r, 404, Some("NotFound"), "bound to a missing pod");
    assert_eq!(r.body["message"], "pods \"p\" not found", "{}", r.text);
    // Only create is served on the subresource.
    let r = send(s.http().get(url("builder"))).await;
    common::assert_status(&r, 405, Some("MethodNotAllowed"), "GET of serviceaccounts/token");
    // dryRun issues nothing.
    let r = send(s.http().post(format!("{}?dryRun=All", url("builder"))).json(&tr(json!({})))).await;
    r.expect_code(201, "dry-run TokenRequest");
    assert_eq!(r.body["status"]["token"], "", "{}", r.text);
    // The real thing.
    let r = send(s.http().post(url("builder")).json(&tr(json!({"audiences": ["a", "b"]})))).await;
    r.expect_code(201, "TokenRequest");
    assert_eq!(r.body["spec"], json!({"audiences": ["a", "b"], "expirationSeconds": 3600}), "{}", r.text);
    assert_eq!(r.body["metadata"]["name"], "builder", "{}", r.text);
    assert!(r.body["status"]["expirationTimestamp"].is_string(), "{}", r.text);
    // TokenReview: valid for the audiences asked for that it has.
    let token = r.body["status"]["token"].as_str().unwrap_or_default();
    let review = |auds: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": auds}});
    let r = send(
        s.http().post(format!("{}/apis/authentication.k8s.io/v1/tokenreviews", s.url)).json(&review(json!(["b", "c"]))),
    )
    .await;
    r.expect_code(201, "TokenReview");
    assert_eq!(r.body["status"]["authenticated"], true, "{}", r.text);
    assert_eq!(r.body["status"]["audiences"], json!(["b"]), "{}", r.text);
    let r =
        send(s.http().post(format!("{}/apis/authentication.k8s.io/v1/tokenreviews", s.url)).json(&review(json!([]))))
            .await;
    assert_eq!(r.body["status"]["authenticated"], Value::Null, "not for the API audiences: {}", r.text);
    assert!(r.body["status"]["error"].as_str().unwrap_or_default().contains("token audiences"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_bound_token_dies_with_the_secret() {
    let s = shared();
    let ns = namespace(&s, "sat-bound");
    s.kubectl_ok(&["create", "serviceaccount", "runner", "-n", &ns]);
    s.kubectl_ok(&["create", "secret", "generic", "anchor", "-n", &ns, "--from-literal", "k=v"]);
    let token =
        create_token(&s, &["runner", "-n", &ns, "--bound-object-kind", "Secret", "--bound-object-name", "anchor"]);
    let claims = decode(&token).1;
    assert_eq!(claims["kubernetes.io"]["secret"]["name"], "anchor", "{claims}");
    let r = whoami(&s, &token).await;
    r.expect_code(201, "SelfSubjectReview with a Secret-bound token");
    assert_eq!(username(&r), format!("system:serviceaccount:{ns}:runner"));
    s.kubectl_ok(&["delete", "secret", "anchor", "-n", &ns]);
    assert_unauthorized(&whoami(&s, &token).await, "token bound to a deleted Secret");
    // kubectl reports a missing bound object.
    let out = s.kubectl(&[
        "create",
        "token",
        "runner",
        "-n",
        &ns,
        "--bound-object-kind",
        "Secret",
        "--bound-object-name",
        "anchor",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secrets \"anchor\" not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_sends_the_bound_object_uid() {
    // kubectl sends the TokenRequest as protobuf, where the uid is field `uID`.
    let s = shared();
    let ns = namespace(&s, "sat-bound-uid");
    s.kubectl_ok(&["create", "serviceaccount", "runner", "-n", &ns]);
    s.kubectl_ok(&["create", "secret", "generic", "anchor", "-n", &ns, "--from-literal", "k=v"]);
    let uid = s.kubectl_ok(&["get", "secret", "anchor", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);
    let bound = ["runner", "-n", &ns, "--bound-object-kind", "Secret", "--bound-object-name", "anchor"];
    let token = create_token(&s, &[&bound[..], &["--bound-object-uid", uid.trim()]].concat());
    let claims = decode(&token).1;
    assert_eq!(claims["kubernetes.io"]["secret"]["uid"], uid.trim(), "{claims}");
    // A uid that is not the Secret's is refused, as upstream does, rather than ignored.
    let stale = "0b0c0d0e-0000-4000-8000-000000000000";
    let mut args = vec!["create", "token"];
    args.extend_from_slice(&bound);
    args.extend_from_slice(&["--bound-object-uid", stale]);
    let out = s.kubectl(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a token bound to a stale uid was issued: {}", String::from_utf8_lossy(&out.stdout));
    assert!(
        stderr.contains(&format!("the UID in the bound object reference ({stale}) does not match the UID in record")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_secret_tokens() {
    let s = shared();
    let ns = namespace(&s, "sat-legacy");
    s.kubectl_ok(&["create", "serviceaccount", "old", "-n", &ns]);
    let uid = s.kubectl_ok(&["get", "serviceaccount", "old", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);
    let key = std::fs::read_to_string(s.data_dir.join("pki/sa.key")).expect("reading sa.key");
    let token =
        kustos_ca::jwt::legacy_token(&key, &ns, "old", uid.trim(), "old-token", "").expect("signing a legacy token");
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "old-token", "namespace": ns, "annotations": {"kubernetes.io/service-account.name": "old"}},
        "type": "kubernetes.io/service-account-token",
        "stringData": {"token": token},
    });
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&secret.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let r = whoami(&s, &token).await;
    r.expect_code(201, "SelfSubjectReview with a legacy token");
    assert_eq!(username(&r), format!("system:serviceaccount:{ns}:old"));
    assert!(r.body["status"]["userInfo"]["extra"].is_null(), "no credential id: {}", r.text);
    // The use is recorded on the Secret, best effort as upstream: a write that loses to a
    // concurrent change of the Secret (the tokens controller filling it in) is tried again
    // on a later use. Bounded: 40 uses.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let mut labels = Value::Null;
    for _ in 0..40 {
        labels = serde_json::from_str(&s.kubectl_ok(&[
            "get",
            "secret",
            "old-token",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.labels}",
        ]))
        .unwrap_or(Value::Null);
        if labels["kubernetes.io/legacy-token-last-used"] == today.as_str() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        whoami(&s, &token).await.expect_code(201, "SelfSubjectReview with a legacy token");
    }
    assert_eq!(labels["kubernetes.io/legacy-token-last-used"], today.as_str(), "{labels}");

    s.kubectl_ok(&["label", "secret", "old-token", "-n", &ns, "kubernetes.io/legacy-token-invalid-since=2024-01-01"]);
    assert_unauthorized(&whoami(&s, &token).await, "legacy token marked invalid");
    s.kubectl_ok(&["label", "secret", "old-token", "-n", &ns, "kubernetes.io/legacy-token-invalid-since-"]);
    whoami(&s, &token).await.expect_code(201, "legacy token after the label is removed");

    // The tracking ConfigMap exists from the start.
    let since = s.kubectl_ok(&[
        "get",
        "configmap",
        "kube-apiserver-legacy-service-account-token-tracking",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.data.since}",
    ]);
    assert_eq!(since.trim().len(), 10, "a YYYY-MM-DD date: {since}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuer_audience_and_expiration_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = kustos_ca::generate_sa_keypair().expect("a key");
    let key_file = dir.path().join("extra.key");
    std::fs::write(&key_file, &extra.private_key_pem).expect("writing the key file");
    let key_arg = key_file.display().to_string();
    let s = Server::start_with(&[
        "--service-account-issuer",
        "https://issuer-a.example",
        "--service-account-issuer",
        "https://issuer-b.example",
        "--api-audiences",
        "api-one,api-two",
        "--service-account-max-token-expiration",
        "2h",
        "--service-account-key-file",
        &key_arg,
    ]);
    let ns = namespace(&s, "sat-flags");
    s.kubectl_ok(&["create", "serviceaccount", "svc", "-n", &ns]);
    let uid = s.kubectl_ok(&["get", "serviceaccount", "svc", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);

    let url = format!("{}/api/v1/namespaces/{ns}/serviceaccounts/svc/token", s.url);
    let r = send(s.http().post(&url).json(&json!({"spec": {"expirationSeconds": 86400}}))).await;
    r.expect_code(201, "TokenRequest");
    assert_eq!(r.body["spec"]["audiences"], json!(["api-one", "api-two"]), "{}", r.text);
    assert_eq!(r.body["spec"]["expirationSeconds"], 7200, "{}", r.text);
    let warning = r.header("warning").unwrap_or_default();
    assert!(warning.contains("requested expiration of 86400 seconds shortened to 7200 seconds"), "{warning}");
    let token = r.body["status"]["token"].as_str().unwrap_or_default().to_string();
    assert_eq!(decode(&token).1["iss"], "https://issuer-a.example");
    whoami(&s, &token).await.expect_code(201, "token with the first issuer");

    // A token of the second issuer, signed by the extra key, is accepted too.
    let now = chrono::Utc::now();
    let claims = kustos_ca::jwt::BoundClaims::new(
        "https://issuer-b.example",
        &ns,
        kustos_ca::jwt::ObjectRef::new("svc", uid.trim()),
        vec!["api-two".into()],
        now,
        600,
        "e2e-jti",
    );
    let signer = kustos_ca::jwt::SigningKey::from_pem(&extra.private_key_pem).expect("signer");
    let other = signer.sign(&claims.to_json()).expect("signing");
    let r = whoami(&s, &other).await;
    r.expect_code(201, "token of the second issuer signed by --service-account-key-file");
    assert_eq!(
        r.body["status"]["userInfo"]["extra"]["authentication.kubernetes.io/credential-id"],
        json!(["JTI=e2e-jti"])
    );
    // ... but not one for another audience or issuer.
    let wrong_aud = kustos_ca::jwt::BoundClaims { audiences: vec!["elsewhere".into()], ..claims.clone() };
    assert_unauthorized(&whoami(&s, &signer.sign(&wrong_aud.to_json()).expect("signing")).await, "wrong audience");
    let wrong_iss = kustos_ca::jwt::BoundClaims { issuer: "https://issuer-c.example".into(), ..claims };
    assert_unauthorized(&whoami(&s, &signer.sign(&wrong_iss.to_json()).expect("signing")).await, "unknown issuer");

    let r = send(s.http().get(format!("{}/.well-known/openid-configuration", s.url))).await;
    r.expect_code(200, "openid-configuration");
    assert_eq!(r.body["issuer"], "https://issuer-a.example", "{}", r.text);
    let r = send(s.http().get(format!("{}/openid/v1/jwks", s.url))).await;
    let kid = signer.public_key().key_id();
    assert!(r.text.contains(kid), "the extra key {kid} is published: {}", r.text);
    assert_eq!(r.body["keys"].as_array().map(Vec::len), Some(2), "{}", r.text);
}
