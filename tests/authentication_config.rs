//! `--authentication-config` end to end: a second kustos trusts the first one's
//! service-account issuer (OIDC discovery and JWKS over TLS), maps the tokens' claims to
//! users (a claim with a prefix, CEL expressions), refuses a token by a CEL claim validation
//! rule, follows a changed file and keeps the last good one when the new file is bad (and the
//! metrics say so); anonymous access limited to the health paths by `conditions`; bad files
//! and flag conflicts refuse the start with one line.

mod common;

use std::time::Duration;

use common::{kustos, send, token_user, unique, Reply, Server};
use serde_json::{json, Value};

const ISSUER: &str = "https://issuer.kustos.test";
const AUDIENCE: &str = "kustos-b";
const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// POST a SelfSubjectReview with the token.
async fn whoami(s: &Server, token: &str) -> Reply {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body)).await
}

fn indent(text: &str, by: usize) -> String {
    text.lines().map(|l| format!("{}{l}\n", " ".repeat(by))).collect()
}

/// The configuration trusting `issuer` (found through its discovery URL, its CA given).
fn config(issuer: &Server, username_prefix: &str) -> String {
    let ca = String::from_utf8(issuer.ca_pem()).expect("the CA is PEM");
    format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: {ISSUER}
    discoveryURL: {}/.well-known/openid-configuration
    audiences: [{AUDIENCE}]
    certificateAuthority: |
{}  claimValidationRules:
  - expression: \"claims['kubernetes.io'].serviceaccount.name != 'intruder'\"
    message: intruders are not welcome
  claimMappings:
    username:
      claim: sub
      prefix: \"{username_prefix}\"
    groups:
      expression: \"['issuer-a:' + claims['kubernetes.io'].namespace]\"
    uid:
      expression: \"claims['kubernetes.io'].serviceaccount.uid\"
    extra:
    - key: example.com/issuer
      valueExpression: claims.iss
  userValidationRules:
  - expression: \"!user.username.startsWith('system:')\"
    message: no system users from outside
",
        issuer.url,
        indent(&ca, 6)
    )
}

async fn metrics(s: &Server) -> String {
    let r = send(s.http().get(format!("{}/metrics", s.url))).await;
    r.expect_code(200, "GET /metrics");
    r.text
}

/// The value of the first metric line starting with `prefix` (0 when absent).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Poll (bounded: 120 rounds of 250 ms) until `check` is true; panics with `what` otherwise.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..120 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{what} did not happen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_kustos_issuer_signs_people_in() {
    let issuer = Server::start_with(&["--service-account-issuer", ISSUER]);
    // Upstream-style unauthenticated discovery on the issuer.
    issuer.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "oidc-discovery-public",
        "--clusterrole=system:service-account-issuer-discovery",
        "--group=system:unauthenticated",
    ]);
    let ns = unique("jwt");
    issuer.kubectl_ok(&["create", "namespace", &ns]);
    issuer.kubectl_ok(&["create", "serviceaccount", "robot", "-n", &ns]);
    issuer.kubectl_ok(&["create", "serviceaccount", "intruder", "-n", &ns]);
    let token = |sa: &str, aud: &str| {
        issuer.kubectl_ok(&["create", "token", sa, "-n", &ns, "--audience", aud]).trim().to_string()
    };
    let robot = token("robot", AUDIENCE);
    let intruder = token("intruder", AUDIENCE);
    let elsewhere = token("robot", "somebody-else");
    let robot_uid = issuer.kubectl_ok(&["get", "serviceaccount", "robot", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);

    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("authn.yaml");
    std::fs::write(&file, config(&issuer, "issuer-a:")).expect("writing the configuration");
    let file_arg = file.to_string_lossy().to_string();
    let s =
        Server::start_with(&["--authentication-config", &file_arg, "--authentication-config-reload-interval", "1s"]);

    // The robot's token authenticates on the second server as the mapped user.
    let r = whoami(&s, &robot).await;
    r.expect_code(201, "SelfSubjectReview with the robot's token");
    let info = &r.body["status"]["userInfo"];
    let sub = format!("system:serviceaccount:{ns}:robot");
    assert_eq!(info["username"], format!("issuer-a:{sub}"), "{}", r.text);
    assert_eq!(info["groups"], json!([format!("issuer-a:{ns}"), "system:authenticated"]), "{}", r.text);
    assert_eq!(info["uid"], robot_uid.trim(), "{}", r.text);
    assert_eq!(info["extra"]["example.com/issuer"], json!([ISSUER]), "{}", r.text);

    // kubectl auth whoami says the same.
    let user = token_user(&s, "robot", &robot);
    let out = user.kubectl_ok(&s, &["auth", "whoami", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).expect("whoami prints JSON");
    assert_eq!(v["status"]["userInfo"]["username"], format!("issuer-a:{sub}"), "{out}");

    // The CEL claim validation rule refuses the intruder; a token for another audience and a
    // forged one are refused too; none of them is anonymous.
    common::assert_status(&whoami(&s, &intruder).await, 401, Some("Unauthorized"), "the intruder's token");
    common::assert_status(&whoami(&s, &elsewhere).await, 401, Some("Unauthorized"), "a token for another audience");
    let mut forged = robot.clone();
    forged.pop();
    forged.push(if robot.ends_with('A') { 'B' } else { 'A' });
    common::assert_status(&whoami(&s, &forged).await, 401, Some("Unauthorized"), "a token with a bad signature");
    // A token for the issuer itself is the issuer's business, not the second server's.
    let own = token("robot", ISSUER);
    whoami(&issuer, &own).await.expect_code(201, "the issuer's own token on the issuer");
    common::assert_status(&whoami(&s, &own).await, 401, Some("Unauthorized"), "a token for the issuer's audience");

    let text = metrics(&s).await;
    let issuer_hash = kustos_hash(ISSUER);
    assert!(
        metric(&text, &format!("apiserver_authentication_jwt_authenticator_latency_seconds_count{{result=\"success\",jwt_issuer_hash=\"{issuer_hash}\"}}")) >= 1.0,
        "{text}"
    );
    assert!(
        metric(&text, &format!("apiserver_authentication_jwt_authenticator_latency_seconds_count{{result=\"failure\",jwt_issuer_hash=\"{issuer_hash}\"}}")) >= 1.0,
        "{text}"
    );
    assert!(text.contains("apiserver_authentication_jwt_authenticator_jwks_fetch_last_key_set_info{"), "{text}");

    // A changed file takes effect without a restart.
    std::fs::write(&file, config(&issuer, "issuer-b:")).expect("rewriting the configuration");
    let want = format!("issuer-b:{sub}");
    eventually("the new username prefix", || {
        let (s, robot, want) = (&s, &robot, &want);
        async move { whoami(s, robot).await.body["status"]["userInfo"]["username"] == *want.as_str() }
    })
    .await;
    let text = metrics(&s).await;
    let success = |t: &str| reload_count(t, "success");
    assert_eq!(success(&text), 1.0, "{text}");

    // A broken file: the last good one stays, and the metrics count a failure.
    std::fs::write(&file, config(&issuer, "issuer-c:").replace("      prefix: \"issuer-c:\"\n", ""))
        .expect("breaking the configuration");
    eventually("a failed reload in the metrics", || {
        let s = &s;
        async move { reload_count(&metrics(s).await, "failure") >= 1.0 }
    })
    .await;
    let r = whoami(&s, &robot).await;
    r.expect_code(201, "the robot after a bad reload");
    assert_eq!(r.body["status"]["userInfo"]["username"], want, "the last good configuration stays: {}", r.text);
    let text = metrics(&s).await;
    assert_eq!(success(&text), 1.0, "{text}");
    assert!(
        text.contains("apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds{"),
        "{text}"
    );
}

/// `automatic_reloads_total` for `status` (any apiserver identity).
fn reload_count(text: &str, status: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("apiserver_authentication_config_controller_automatic_reloads_total{"))
        .filter(|l| l.contains(&format!("status=\"{status}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Upstream's metric hash of a value: `sha256:<hex>`.
fn kustos_hash(s: &str) -> String {
    kustos_apiserver::authn::authentication_config::metrics::hash(s.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_only_on_the_health_paths() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("authn.yaml");
    std::fs::write(
        &file,
        "apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
anonymous:
  enabled: true
  conditions:
  - path: /livez
  - path: /readyz
  - path: /healthz
",
    )
    .expect("writing the configuration");
    let file_arg = file.to_string_lossy().to_string();
    let s = Server::start_with(&["--authentication-config", &file_arg]);
    for path in ["/livez", "/readyz", "/healthz"] {
        send(s.anonymous().get(format!("{}{path}", s.url))).await.expect_code(200, path);
    }
    for path in ["/version", "/api", "/livez/ping", "/.well-known/openid-configuration", "/apis"] {
        common::assert_status(
            &send(s.anonymous().get(format!("{}{path}", s.url))).await,
            401,
            Some("Unauthorized"),
            path,
        );
    }
    // Credentials still work everywhere.
    send(s.http().get(format!("{}/version", s.url))).await.expect_code(200, "/version as admin");
}

#[test]
fn bad_files_and_flag_conflicts_refuse_the_start() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n";
    let cases: Vec<(&str, String, &[&str], &str)> = vec![
        (
            "http issuer",
            format!("{head}jwt:\n- issuer: {{url: http://idp.example, audiences: [a]}}\n  claimMappings: {{username: {{claim: sub, prefix: ''}}}}\n"),
            &[],
            "jwt[0].issuer.url: Invalid value: \"http://idp.example\": URL scheme must be https",
        ),
        (
            "claim without prefix",
            format!("{head}jwt:\n- issuer: {{url: https://idp.example, audiences: [a]}}\n  claimMappings: {{username: {{claim: sub}}}}\n"),
            &[],
            "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set",
        ),
        (
            "bad CEL",
            format!("{head}jwt:\n- issuer: {{url: https://idp.example, audiences: [a]}}\n  claimMappings: {{username: {{expression: 'claims.sub +'}}}}\n"),
            &[],
            "jwt[0].claimMappings.username.expression: Invalid value: \"claims.sub +\": compilation failed",
        ),
        (
            "anonymous flag and section",
            format!("{head}anonymous: {{enabled: true}}\n"),
            &["--anonymous-auth=true"],
            "anonymous: Forbidden: --anonymous-auth flag cannot be set when anonymous field is configured in authentication configuration file",
        ),
        ("unknown field", format!("{head}jwts: []\n"), &[], "unknown field `jwts`"),
    ];
    for (name, text, flags, want) in cases {
        let file = dir.path().join(format!("{}.yaml", name.replace(' ', "-")));
        std::fs::write(&file, text).expect("writing the file");
        let data = dir.path().join(format!("data-{}", name.replace(' ', "-")));
        let (file, data) = (file.to_string_lossy().to_string(), data.to_string_lossy().to_string());
        let mut args = vec!["apiserver", "--data-dir", &data, "--secure-port", "0", "--authentication-config", &file];
        args.extend_from_slice(flags);
        let out = kustos(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: the start was refused");
        assert!(stderr.contains(want), "{name}: {stderr}");
    }
}
