//! Webhook token authentication against the real binary: a TokenReview webhook served over
//! HTTPS by this test process, named by `--authentication-token-webhook-config-file`; one
//! token is a user with groups, any other is refused; both TokenReview versions; the cache.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_status, ensure_kubectl, kustos, run_bounded, send, Server};
use serde_json::{json, Value};

const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
/// The token kustos presents to the webhook (the kubeconfig's user).
const HOOK_CREDENTIAL: &str = "apiserver-to-webhook-credential";
const GROUP: &str = "webhook-readers";

/// The test webhook: every review it receives, by token; reviews of the wrong version or
/// without the kubeconfig's credential are answered 400 and counted as `wrong`.
struct Webhook {
    url: String,
    reviews: Arc<Mutex<HashMap<String, usize>>>,
    wrong: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Webhook {
    fn reviews_of(&self, token: &str) -> usize {
        self.reviews.lock().expect("the webhook's counters").get(token).copied().unwrap_or(0)
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
    }
}

/// Serve the webhook over HTTPS with a CA of its own in `dir/pki`, answering
/// `authentication.k8s.io/<version>`: `good` is user `webhook-jane`, the rest are refused.
async fn start_webhook(dir: &Path, version: &'static str, good: &'static str) -> Webhook {
    let pki = kustos_apiserver::pki::ensure(dir, &[], chrono::Utc::now()).expect("the webhook's PKI");
    let tls = kustos_apiserver::http::serve::tls_config(&pki).expect("the webhook's TLS configuration");
    let (_tls_tx, tls_rx) = tokio::sync::watch::channel(tls);
    let reviews: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let wrong: Arc<Mutex<Vec<String>>> = Arc::default();
    let (r, w) = (reviews.clone(), wrong.clone());
    let app = axum::Router::new().route(
        "/authenticate",
        axum::routing::post(move |headers: http::HeaderMap, body: axum::body::Bytes| {
            let (reviews, wrong) = (r.clone(), w.clone());
            async move {
                let review: Value = serde_json::from_slice(&body).unwrap_or_default();
                let api_version = format!("authentication.k8s.io/{version}");
                let credential = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
                if review["apiVersion"] != api_version.as_str()
                    || review["kind"] != "TokenReview"
                    || credential != format!("Bearer {HOOK_CREDENTIAL}")
                {
                    wrong
                        .lock()
                        .expect("the webhook's counters")
                        .push(format!("{} {credential:?}", review["apiVersion"]));
                    return (http::StatusCode::BAD_REQUEST, "wrong version or credential".to_string());
                }
                let token = review["spec"]["token"].as_str().unwrap_or_default().to_string();
                let audiences = review["spec"]["audiences"].clone();
                *reviews.lock().expect("the webhook's counters").entry(token.clone()).or_default() += 1;
                let status = if token == good {
                    json!({"authenticated": true, "audiences": audiences, "user": {
                        "username": "webhook-jane", "uid": "jane-uid-1", "groups": [GROUP],
                        "extra": {"example.com/team": ["blue"]}}})
                } else {
                    json!({"authenticated": false})
                };
                let answer = json!({"apiVersion": api_version, "kind": "TokenReview", "status": status});
                (http::StatusCode::OK, answer.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding the webhook");
    let addr = listener.local_addr().expect("the webhook's address");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(kustos_apiserver::http::serve::serve_dynamic(listener, tls_rx, app, async move {
        let _ = rx.await;
    }));
    Webhook { url: format!("https://{addr}/authenticate"), reviews, wrong, stop: Some(tx), task }
}

/// The kubeconfig a newcomer would write: the CA file relative to the kubeconfig.
fn write_kubeconfig(dir: &Path, url: &str) -> String {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: token-webhook\n  cluster:\n    server: {url}\n    \
         certificate-authority: pki/ca.crt\nusers:\n- name: kube-apiserver\n  user:\n    token: {HOOK_CREDENTIAL}\n\
         contexts:\n- name: webhook\n  context:\n    cluster: token-webhook\n    user: kube-apiserver\n\
         current-context: webhook\n"
    );
    let path = dir.join("webhook.kubeconfig");
    std::fs::write(&path, text).expect("writing the kubeconfig");
    path.to_string_lossy().into_owned()
}

async fn whoami(s: &Server, token: &str) -> common::Reply {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(s.anonymous().post(format!("{}{SSR}", s.url)).bearer_auth(token).json(&body)).await
}

/// `kubectl auth whoami` with the token only (no client certificate).
fn kubectl_whoami(s: &Server, token: &str) -> std::process::Output {
    ensure_kubectl();
    let ca = s.data_dir.join("pki").join("ca.crt");
    let mut cmd = Command::new("kubectl");
    cmd.env_remove("KUBECONFIG").args([
        "--kubeconfig=/dev/null",
        &format!("--server={}", s.url),
        &format!("--certificate-authority={}", ca.display()),
        &format!("--token={token}"),
        "auth",
        "whoami",
        "-o",
        "json",
    ]);
    run_bounded(&mut cmd, None, Duration::from_secs(60), "kubectl auth whoami")
}

async fn exercise(version: &'static str, flags: &[&str]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let good: &'static str = if version == "v1" { "good-token-v1" } else { "good-token-v1beta1" };
    let hook = start_webhook(dir.path(), version, good).await;
    let kubeconfig = write_kubeconfig(dir.path(), &hook.url);
    let mut args = vec!["--authentication-token-webhook-config-file", kubeconfig.as_str()];
    args.extend_from_slice(flags);
    let s = Server::start_with(&args);

    // The good token is the webhook's user, with its groups, uid and extra.
    let reply = whoami(&s, good).await;
    assert_eq!(reply.code, 201, "{version}: SelfSubjectReview: {}", reply.text);
    let info = &reply.body["status"]["userInfo"];
    assert_eq!(info["username"], "webhook-jane", "{version}: {info}");
    assert_eq!(info["uid"], "jane-uid-1", "{version}: {info}");
    assert_eq!(info["groups"], json!([GROUP, "system:authenticated"]), "{version}: {info}");
    assert_eq!(info["extra"], json!({"example.com/team": ["blue"]}), "{version}: {info}");
    let out = kubectl_whoami(&s, good);
    assert!(out.status.success(), "{version}: kubectl auth whoami: {}", String::from_utf8_lossy(&out.stderr));
    let kubectl_view: Value = serde_json::from_slice(&out.stdout).expect("kubectl auth whoami -o json prints JSON");
    assert_eq!(kubectl_view["status"]["userInfo"]["username"], "webhook-jane", "{version}");

    // RBAC applies to the webhook's groups: nothing until a binding names the group.
    let namespaces = format!("{}/api/v1/namespaces", s.url);
    assert_status(&send(s.anonymous().get(&namespaces).bearer_auth(good)).await, 403, Some("Forbidden"), version);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "webhook-namespace-reader"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "webhook-namespace-readers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "webhook-namespace-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}]});
    let rbac = format!("{}/apis/rbac.authorization.k8s.io/v1", s.url);
    send(s.http().post(format!("{rbac}/clusterroles")).json(&role)).await.expect_code(201, "ClusterRole");
    send(s.http().post(format!("{rbac}/clusterrolebindings")).json(&binding)).await.expect_code(201, "binding");
    for _ in 0..3 {
        let list = send(s.anonymous().get(&namespaces).bearer_auth(good)).await;
        list.expect_code(200, &format!("{version}: list namespaces as webhook-jane"));
        assert_eq!(list.body["kind"], "NamespaceList");
    }

    // Another token is refused: 401, every time.
    for _ in 0..3 {
        assert_status(
            &send(s.anonymous().get(&namespaces).bearer_auth("bad-token")).await,
            401,
            Some("Unauthorized"),
            version,
        );
        assert_status(&whoami(&s, "bad-token").await, 401, Some("Unauthorized"), version);
    }

    // Within the cache TTL the webhook saw each token once, in the version it expects.
    assert_eq!(
        hook.wrong.lock().expect("the webhook's counters").clone(),
        Vec::<String>::new(),
        "{version}: reviews it could not accept"
    );
    assert_eq!(hook.reviews_of(good), 1, "{version}: reviews of the good token");
    assert_eq!(hook.reviews_of("bad-token"), 1, "{version}: reviews of the bad token");
    let log = s.stderr_tail();
    assert!(!log.contains(good) && !log.contains("bad-token"), "{version}: a token reached the log:\n{log}");
    drop(s);
    hook.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_v1_authenticates_one_token_and_refuses_another() {
    exercise(
        "v1",
        &["--authentication-token-webhook-version", "v1", "--authentication-token-webhook-cache-ttl", "10m"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_v1beta1_is_the_default_version() {
    exercise("v1beta1", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_or_version_stops_the_start_with_one_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    let data = data.to_string_lossy();
    let good = write_kubeconfig(dir.path(), "https://127.0.0.1:1/authenticate");
    let garbage = dir.path().join("garbage.kubeconfig");
    std::fs::write(&garbage, "current-context: [").expect("writing a bad kubeconfig");
    let garbage = garbage.to_string_lossy();
    let missing = dir.path().join("missing.kubeconfig");
    let missing = missing.to_string_lossy();
    // flags, part of the message
    let cases: [(&[&str], &str); 4] = [
        (&["--authentication-token-webhook-config-file", &missing], "--authentication-token-webhook-config-file"),
        (&["--authentication-token-webhook-config-file", &garbage], "not a kubeconfig"),
        (
            &["--authentication-token-webhook-config-file", &good, "--authentication-token-webhook-version", "v2"],
            "unsupported authentication webhook version \"v2\"",
        ),
        (
            &["--authentication-token-webhook-config-file", &good, "--authentication-token-webhook-cache-ttl", "soon"],
            "invalid duration",
        ),
    ];
    for (flags, want) in cases {
        let mut args = vec!["server", "--data-dir", &data, "--secure-port", "0"];
        args.extend_from_slice(flags);
        let out = kustos(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}: started");
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
        if !want.contains("duration") {
            assert_eq!(stderr.trim().lines().count(), 1, "{flags:?}: one line: {stderr}");
        }
    }
}
