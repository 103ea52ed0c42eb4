//! `kustos sa-key rotate` against a running `kustos server`: clients holding a bound token
//! (TokenRequest) and a legacy Secret token keep authenticating throughout, new tokens carry
//! the new kid, the JWKS serves old and new keys, the legacy Secret is re-issued with the
//! new key, `sa-key status` says when the old key can go, and a rotation killed after any
//! step leaves a working server and resumes when run again. Every wait is bounded.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{kustos_ok, run_bounded, send, Server};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);
const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// The `kid` of a JWT's header.
fn kid(token: &str) -> String {
    let seg = token.split('.').next().unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(seg).expect("base64url header");
    let header: Value = serde_json::from_slice(&bytes).expect("JSON header");
    header["kid"].as_str().expect("a kid").to_string()
}

async fn token_request(s: &Server, ns: &str, sa: &str) -> String {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let r =
        send(s.http().post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", s.url)).json(&body)).await;
    r.expect_code(201, "TokenRequest");
    r.body["status"]["token"].as_str().expect("a token").to_string()
}

/// The token of the legacy Secret, once the controller has filled it.
async fn secret_token(s: &Server, ns: &str, name: &str, done: impl Fn(&str) -> bool) -> String {
    let path = format!("/api/v1/namespaces/{ns}/secrets/{name}");
    let decode = |v: &Value| -> String {
        let b64 = v["data"]["token"].as_str().unwrap_or_default();
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap_or_default()).unwrap_or_default()
    };
    let got = s.wait_for_object(&path, "the legacy token", WAIT, |v| done(&decode(v))).await;
    decode(&got)
}

async fn jwks_kids(s: &Server) -> Vec<String> {
    let r = send(s.http().get(format!("{}/openid/v1/jwks", s.url))).await;
    r.expect_code(200, "GET /openid/v1/jwks");
    r.body["keys"].as_array().expect("keys").iter().map(|k| k["kid"].as_str().unwrap_or_default().to_string()).collect()
}

/// Clients that authenticate with service-account tokens in a loop: the tokens they start
/// with, the legacy Secret's token as it is now, and a fresh bound token now and then.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

fn start_load(s: Arc<Server>, ns: String, bound: String, legacy: String) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let (st, o, f) = (stop.clone(), ok.clone(), failures.clone());
    let task = tokio::spawn(async move {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let mut fresh = bound.clone();
        // Bounded: at most this many rounds, however long the rotation takes.
        for round in 0..20_000u32 {
            if st.load(Ordering::SeqCst) {
                return;
            }
            if round % 10 == 0 {
                fresh = token_request(&s, &ns, "robot").await;
            }
            let current = secret_token(&s, &ns, "robot-token", |t| !t.is_empty()).await;
            for (what, token) in
                [("bound", &bound), ("legacy", &legacy), ("fresh bound", &fresh), ("current legacy", &current)]
            {
                let r = s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body).send().await;
                match r {
                    Ok(r) if r.status().as_u16() == 201 => {
                        o.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(r) => f.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{what}: HTTP {}", r.status())),
                    Err(e) => f.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{what}: {e:?}")),
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    Load { stop, ok, failures, task }
}

impl Load {
    /// Wait until `more` further requests succeeded (bounded).
    async fn progress(&self, more: u64) {
        let start = self.ok.load(Ordering::SeqCst);
        let deadline = Instant::now() + WAIT;
        while self.ok.load(Ordering::SeqCst) < start + more {
            assert!(Instant::now() < deadline, "the clients made no progress; failures: {:?}", self.failures());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn rotate_command(dir: &str, abort_after: Option<usize>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kustos"));
    cmd.args(["sa-key", "rotate", "--data-dir", dir]);
    if let Some(n) = abort_after {
        cmd.env("KUSTOS_SA_KEY_ROTATE_ABORT_AFTER_STEPS", n.to_string());
    }
    cmd
}

fn status(dir: &str) -> String {
    kustos_ok(&["sa-key", "status", "--data-dir", dir])
}

/// The row of `kid` in `sa-key status`.
fn row(status: &str, kid: &str) -> Vec<String> {
    let line = status.lines().find(|l| l.starts_with(&format!("{kid}\t"))).unwrap_or_default();
    line.split('\t').map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_key_rotates_under_load_with_zero_401s() {
    let s = Arc::new(Server::start_with(&["--service-account-max-token-expiration", "2h"]));
    let dir = s.data_dir.to_str().expect("UTF-8 path").to_string();
    let ns = s.create_namespace("sakey").await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}});
    send(s.http().post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts", s.url)).json(&sa))
        .await
        .expect_code(201, "service account");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}}});
    send(s.http().post(format!("{}/api/v1/namespaces/{ns}/secrets", s.url)).json(&secret))
        .await
        .expect_code(201, "legacy token secret");
    let legacy = secret_token(&s, &ns, "robot-token", |t| !t.is_empty()).await;
    let bound = token_request(&s, &ns, "robot").await;
    let old = kid(&bound);
    assert_eq!(kid(&legacy), old, "both signed by the one key");
    assert_eq!(jwks_kids(&s).await, vec![old.clone()]);

    let load = start_load(s.clone(), ns.clone(), bound.clone(), legacy.clone());
    load.progress(20).await;

    let out = kustos_ok(&["sa-key", "rotate", "--data-dir", &dir]);
    assert!(out.contains("the new key signs from now on"), "{out}");
    let new = out
        .lines()
        .find_map(|l| l.strip_prefix("signing key: "))
        .unwrap_or_else(|| panic!("the new kid in:\n{out}"))
        .to_string();
    assert_ne!(new, old);

    // The running server follows: new tokens carry the new kid, the JWKS serves both.
    let deadline = Instant::now() + WAIT;
    loop {
        if kid(&token_request(&s, &ns, "robot").await) == new {
            break;
        }
        assert!(Instant::now() < deadline, "new tokens never carried the new kid {new}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kids = jwks_kids(&s).await;
    assert!(kids.contains(&old) && kids.contains(&new), "JWKS {kids:?}");
    // The legacy Secret is re-issued with the new key; the token it held keeps working.
    let reissued = secret_token(&s, &ns, "robot-token", |t| !t.is_empty() && kid(t) == new).await;
    assert_ne!(reissued, legacy);
    load.progress(40).await;

    // Status: both keys, the new one signs (current), the old one verifies until its end
    // (the server records it at its next pass) and holds no legacy Secret any more.
    let deadline = Instant::now() + WAIT;
    let text = loop {
        let text = status(&dir);
        if !text.contains("not recorded yet") && !text.contains("unknown") {
            break text;
        }
        assert!(Instant::now() < deadline, "the old key's end was never recorded:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (new_row, old_row) = (row(&text, &new), row(&text, &old));
    assert_eq!(new_row.get(1).map(String::as_str), Some("current"), "{text}");
    assert_eq!(new_row.get(4).map(String::as_str), Some("1"), "{text}");
    assert_eq!(old_row.get(1).map(String::as_str), Some("retired"), "{text}");
    assert_eq!(old_row.get(4).map(String::as_str), Some("0"), "{text}");
    // Which is the retirement plus the 2h maximum plus a margin.
    let retired = chrono::DateTime::parse_from_rfc3339(&old_row[2]).expect("retired at");
    let until = chrono::DateTime::parse_from_rfc3339(&old_row[3]).expect("verifies until");
    assert_eq!((until - retired).num_seconds(), 2 * 3600 + 300, "{text}");

    // A rotation killed after each of its steps: the server keeps working, a re-run resumes.
    for step in 1..=4 {
        let out = run_bounded(&mut rotate_command(&dir, Some(1)), None, WAIT, "an interrupted rotation");
        assert!(!out.status.success(), "aborted after step {step}");
        load.progress(8).await;
    }
    let out = run_bounded(&mut rotate_command(&dir, None), None, WAIT, "resuming the rotation");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("removed sa-next.key"), "only the last step was left:\n{text}");
    let third = text.lines().find_map(|l| l.strip_prefix("signing key: ")).expect("the kid").to_string();
    assert!(![&old, &new].contains(&&third));
    secret_token(&s, &ns, "robot-token", |t| !t.is_empty() && kid(t) == third).await;
    let kids = jwks_kids(&s).await;
    for k in [&old, &new, &third] {
        assert!(kids.contains(k), "{k} in JWKS {kids:?}");
    }
    load.progress(40).await;

    load.stop.store(true, Ordering::SeqCst);
    let _ = tokio::time::timeout(WAIT, load.task).await;
    assert_eq!(load.failures.lock().unwrap_or_else(|e| e.into_inner()).clone(), Vec::<String>::new());
    assert!(load.ok.load(Ordering::SeqCst) >= 108);
    // The server restarts onto the rotated keys: the old tokens still authenticate.
    let mut s = Arc::into_inner(s).expect("the load is done");
    s.restart();
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    for token in [&bound, &legacy, &reissued] {
        send(s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body))
            .await
            .expect_code(201, "an old token after a restart");
    }
    assert_eq!(kid(&token_request(&s, &ns, "robot").await), third);
}

async fn self_review(s: &Server, token: &str) -> u16 {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body)).await.code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_key_verifies_for_a_year_by_default_and_revoke_drops_it_at_once() {
    let s = Server::start();
    let dir = s.data_dir.to_str().expect("UTF-8 path").to_string();
    let ns = s.create_namespace("sarevoke").await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}});
    send(s.http().post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts", s.url)).json(&sa))
        .await
        .expect_code(201, "service account");
    let before = token_request(&s, &ns, "robot").await;
    let old = kid(&before);

    let out = kustos_ok(&["sa-key", "rotate", "--data-dir", &dir]);
    let new = out.lines().find_map(|l| l.strip_prefix("signing key: ")).expect("the new kid").to_string();
    // The old key's end: retired + a year (the default cap) + 5 minutes, not 2^32 seconds.
    let deadline = Instant::now() + WAIT;
    let text = loop {
        let text = status(&dir);
        if !text.contains("not recorded yet") {
            break text;
        }
        assert!(Instant::now() < deadline, "the old key's end was never recorded:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let old_row = row(&text, &old);
    assert_eq!(old_row.get(1).map(String::as_str), Some("retired"), "{text}");
    let retired = chrono::DateTime::parse_from_rfc3339(&old_row[2]).expect("retired at");
    let until = chrono::DateTime::parse_from_rfc3339(&old_row[3]).expect("verifies until");
    assert_eq!((until - retired).num_seconds(), 8760 * 3600 + 300, "{text}");
    assert_eq!(self_review(&s, &before).await, 201, "the old key's token verifies until then");

    // The key that signs, and an unknown one, are refused: one line, non-zero exit.
    for (kid, want) in [(new.as_str(), "is the key that signs"), ("no-such-kid", "no service-account key no-such-kid")]
    {
        let out = common::kustos(&["sa-key", "revoke", kid, "--data-dir", &dir]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want) && err.trim().lines().count() == 1, "{kid}: {err}");
    }
    assert_eq!(self_review(&s, &token_request(&s, &ns, "robot").await).await, 201, "the signing key is untouched");

    // Revoked: the old key's token gets 401 from the server's next pass, and the JWKS drops it.
    let out = kustos_ok(&["sa-key", "revoke", &old, "--data-dir", &dir]);
    assert!(out.contains(&format!("revoked {old}")), "{out}");
    let deadline = Instant::now() + WAIT;
    while self_review(&s, &before).await != 401 {
        assert!(Instant::now() < deadline, "the revoked key's token still authenticates\n{}", s.stderr_tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(jwks_kids(&s).await, vec![new.clone()]);
    assert_eq!(row(&status(&dir), &old).get(1).map(String::as_str), Some("revoked"));
    assert_eq!(self_review(&s, &token_request(&s, &ns, "robot").await).await, 201, "tokens of the new key");
    let again = kustos_ok(&["sa-key", "revoke", &old, "--data-dir", &dir]);
    assert!(again.contains("revoked already"), "{again}");
}
