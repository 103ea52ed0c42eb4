//! Bootstrap tokens end to end against `kustos server`: the `kustos token` and
//! `kustos kubeconfig bootstrap` commands run as subprocesses, kubectl authenticating with
//! what they print, the token cleaner deleting an expired token, and the public,
//! signed `kube-public/cluster-info` (its signatures checked with Python's `hmac`, not with
//! kustos' code).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{assert_status, kustos, kustos_ok, run_bounded, send, shared, unique, Server};
use serde_json::{json, Value};

/// Bound for waiting on a controller (the cleaner, the signer).
const CONTROLLER_WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
const CLUSTER_INFO: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
const DEFAULT_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// `kustos <args>`, which must fail with one line on stderr and nothing on stdout; returns
/// that line.
fn kustos_err(args: &[&str]) -> String {
    let out = kustos(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "kustos {} should have failed; stdout:\n{stdout}", args.join(" "));
    assert!(stdout.is_empty(), "kustos {}: nothing on stdout, got {stdout:?}", args.join(" "));
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(!line.is_empty() && !line.contains('\n'), "kustos {}: one line on stderr, got {stderr:?}", args.join(" "));
    line.to_string()
}

fn admin(s: &Server) -> String {
    s.kubeconfig.display().to_string()
}

/// Asserts `token` is `[a-z0-9]{6}.[a-z0-9]{16}` and returns (id, secret).
fn split(token: &str) -> (String, String) {
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let (id, secret) = token.split_once('.').unwrap_or_else(|| panic!("token {token:?} has no dot"));
    assert!(ok(id, 6) && ok(secret, 16), "token {token:?} is not [a-z0-9]{{6}}.[a-z0-9]{{16}}");
    (id.to_string(), secret.to_string())
}

/// `kustos token create` with `args`; checks stdout is exactly one well-formed token.
fn create(s: &Server, args: &[&str]) -> (String, String, String) {
    let mut all = vec!["token", "create", "--kubeconfig"];
    let kc = admin(s);
    all.push(&kc);
    all.extend_from_slice(args);
    let out = kustos_ok(&all);
    let token = out.strip_suffix('\n').unwrap_or_else(|| panic!("token create output ends in a newline: {out:?}"));
    assert!(!token.contains('\n'), "token create prints only the token: {out:?}");
    let (id, secret) = split(token);
    (token.to_string(), id, secret)
}

/// A token with an id unique in this process (for tests that choose the token).
fn chosen_token() -> (String, String) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let id = format!("t{:03}{:02}", std::process::id() % 1000, n % 100);
    (format!("{id}.0123456789abcdef"), id)
}

/// The bootstrap kubeconfig `kustos kubeconfig bootstrap` prints for `token`, written to a file.
fn bootstrap_kubeconfig(s: &Server, token: &str) -> PathBuf {
    let yaml = kustos_ok(&["kubeconfig", "bootstrap", "--kubeconfig", &admin(s), "--token", token]);
    let path = s.work_dir().join(format!("{}.kubeconfig", unique("boot")));
    std::fs::write(&path, yaml).expect("writing the bootstrap kubeconfig");
    path
}

/// `kubectl --kubeconfig <file> <args>` (not the admin's).
fn kubectl_as(s: &Server, kubeconfig: &Path, args: &[&str]) -> Output {
    common::ensure_kubectl();
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(s.work_dir().join(unique("cache")))
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", s.work_dir());
    run_bounded(&mut cmd, None, common::KUBECTL_TIMEOUT, &format!("kubectl {}", args.join(" ")))
}

async fn secret_code(s: &Server, id: &str) -> u16 {
    let url = format!("{}/api/v1/namespaces/kube-system/secrets/bootstrap-token-{id}", s.url);
    send(s.http().get(url)).await.code
}

/// Poll (bounded) until `done` holds for what `probe` returns; panics with `what` otherwise.
async fn wait_for<T, F, Fut>(what: &str, mut probe: F, done: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
    T: std::fmt::Debug,
{
    let deadline = Instant::now() + CONTROLLER_WAIT;
    let mut last = None;
    for _ in 0..(CONTROLLER_WAIT.as_millis() / POLL.as_millis()) {
        let v = probe().await;
        if done(&v) {
            return v;
        }
        last = Some(v);
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{what}: not within {CONTROLLER_WAIT:?}; last seen: {last:?}");
}

/// cluster-info as an anonymous client reads it.
async fn cluster_info(s: &Server) -> Value {
    let r = send(s.anonymous().get(format!("{}{CLUSTER_INFO}", s.url))).await;
    r.expect_code(200, "anonymous GET of cluster-info");
    r.body
}

fn cluster_of(kubeconfig: &str) -> (String, Vec<u8>) {
    use base64::Engine as _;
    let v: serde_yaml::Value = serde_yaml::from_str(kubeconfig).expect("cluster-info kubeconfig is YAML");
    let cluster = &v["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().expect("a server").to_string();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster["certificate-authority-data"].as_str().expect("CA data"))
        .expect("CA data is base64");
    (server, ca)
}

/// Verify the detached JWS `sig` of `content` for token `id` with key `key` using Python's
/// `hmac` and `base64`: the header must be exactly `{"alg":"HS256","kid":"<id>"}`.
fn python_verifies(sig: &str, content: &str, id: &str, key: &str) -> Result<(), String> {
    const SCRIPT: &str = r#"
import base64, hashlib, hmac, json, sys
d = json.load(sys.stdin)
parts = d["jws"].split(".")
if len(parts) != 3 or parts[1] != "":
    sys.exit("not a detached JWS (header..signature): %r" % d["jws"])
h, _, s = parts
header = base64.urlsafe_b64decode(h + "=" * (-len(h) % 4)).decode()
want_header = '{"alg":"HS256","kid":"%s"}' % d["id"]
if header != want_header:
    sys.exit("header %r, want %r" % (header, want_header))
payload = base64.urlsafe_b64encode(d["content"].encode()).rstrip(b"=").decode()
mac = hmac.new(d["key"].encode(), (h + "." + payload).encode(), hashlib.sha256).digest()
want = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
if not hmac.compare_digest(want, s):
    sys.exit("signature does not verify")
print("verified")
"#;
    let input = json!({"jws": sig, "content": content, "id": id, "key": key}).to_string();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", SCRIPT]);
    if let Err(e) = Command::new("python3").arg("--version").output() {
        panic!("python3 is not runnable ({e}); this test checks cluster-info signatures with Python's hmac");
    }
    let out = run_bounded(&mut cmd, Some(&input), Duration::from_secs(60), "python3 verify-jws");
    if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "verified" {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_token_authenticates_is_listed_and_deleted() {
    let s = shared();
    let description = unique("e2e token");
    let (token, id, _) = create(&s, &["--description", &description]);

    // kubectl with the bootstrap kubeconfig is the bootstrap user of that token.
    let boot = bootstrap_kubeconfig(&s, &token);
    let text = std::fs::read_to_string(&boot).unwrap_or_default();
    let (server, _) = cluster_of(&text);
    assert_eq!(server, s.url, "the bootstrap kubeconfig points at the server");
    let out = kubectl_as(&s, &boot, &["auth", "whoami", "-o", "json"]);
    assert!(out.status.success(), "whoami with the bootstrap kubeconfig: {}", String::from_utf8_lossy(&out.stderr));
    let review: Value = serde_json::from_slice(&out.stdout).expect("whoami JSON");
    assert_eq!(review["status"]["userInfo"]["username"], format!("system:bootstrap:{id}"));
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        json!(["system:bootstrappers", DEFAULT_GROUP, "system:authenticated"]),
        "the default extra group"
    );

    // Listed with kubeadm's columns.
    let listing = kustos_ok(&["token", "list", "--kubeconfig", &admin(&s)]);
    let header = listing.lines().next().unwrap_or_default();
    let columns: Vec<&str> = header.split("   ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(columns, ["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS"], "{listing}");
    let line =
        listing.lines().find(|l| l.starts_with(&token)).unwrap_or_else(|| panic!("{token} not listed:\n{listing}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells.first(), Some(&token.as_str()), "{line}");
    assert!(matches!(cells.get(1), Some(&"23h") | Some(&"24h")), "TTL of a fresh 24h token: {line}");
    assert!(cells.get(2).is_some_and(|e| e.len() == 20 && e.ends_with('Z')), "EXPIRES in RFC 3339: {line}");
    assert_eq!(cells.get(3), Some(&"authentication,signing"), "{line}");
    assert!(line.contains(&description), "{line}");
    assert_eq!(cells.last(), Some(&DEFAULT_GROUP), "{line}");

    // Deleted by its full token: gone, and it no longer authenticates.
    let out = kustos_ok(&["token", "delete", "--kubeconfig", &admin(&s), &token]);
    assert_eq!(out, format!("bootstrap token \"{id}\" deleted\n"));
    assert_eq!(secret_code(&s, &id).await, 404, "the Secret is gone");
    let r = send(s.anonymous().get(format!("{}/api/v1/namespaces", s.url)).bearer_auth(&token)).await;
    assert_status(&r, 401, Some("Unauthorized"), "a deleted token");
    let out = kubectl_as(&s, &boot, &["auth", "whoami"]);
    assert!(!out.status.success(), "whoami after delete must fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unauthorized"), "{}", String::from_utf8_lossy(&out.stderr));
    let listing = kustos_ok(&["token", "list", "--kubeconfig", &admin(&s)]);
    assert!(!listing.contains(&id), "not listed after delete:\n{listing}");

    // Deleting it again is an error naming the token.
    let err = kustos_err(&["token", "delete", "--kubeconfig", &admin(&s), &id]);
    assert!(err.starts_with(&format!("error: failed to delete bootstrap token \"{id}\": ")), "{err}");
    assert!(err.contains("not found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chosen_token_with_options_is_stored_as_kubeadm_stores_it() {
    let s = shared();
    let (token, id) = chosen_token();
    let printed = create(
        &s,
        &[
            &token,
            "--ttl",
            "0",
            "--usages",
            "authentication",
            "--groups",
            "system:bootstrappers:worker,system:bootstrappers:rack7",
        ],
    );
    assert_eq!(printed.0, token, "the chosen token is printed back");
    let out = s.kubectl_ok(&["get", "secret", "-n", "kube-system", &format!("bootstrap-token-{id}"), "-o", "json"]);
    let secret: Value = serde_json::from_str(&out).expect("Secret JSON");
    assert_eq!(secret["type"], "bootstrap.kubernetes.io/token");
    let data: std::collections::BTreeMap<String, String> = secret["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or_default());
            (k.clone(), String::from_utf8(bytes.expect("base64")).expect("UTF-8"))
        })
        .collect();
    let want: std::collections::BTreeMap<String, String> = [
        ("auth-extra-groups", "system:bootstrappers:worker,system:bootstrappers:rack7"),
        ("token-id", id.as_str()),
        ("token-secret", "0123456789abcdef"),
        ("usage-bootstrap-authentication", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(data, want, "--ttl 0 writes no expiration; only the usages asked for");

    let listing = kustos_ok(&["token", "list", "--kubeconfig", &admin(&s)]);
    let line = listing.lines().find(|l| l.starts_with(&token)).unwrap_or_else(|| panic!("not listed:\n{listing}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            &token,
            "<forever>",
            "<never>",
            "authentication",
            "<none>",
            "system:bootstrappers:worker,system:bootstrappers:rack7"
        ],
        "{line}"
    );

    // The same token again: refused, as kubeadm refuses it.
    let err = kustos_err(&["token", "create", "--kubeconfig", &admin(&s), &token]);
    assert_eq!(err, format!("error: a token with id \"{id}\" already exists"));

    // Deleted by id.
    assert_eq!(
        kustos_ok(&["token", "delete", "--kubeconfig", &admin(&s), &id]),
        format!("bootstrap token \"{id}\" deleted\n")
    );
    assert_eq!(secret_code(&s, &id).await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_one_line_error() {
    let s = shared();
    let kc = admin(&s);
    let (token, id) = chosen_token();
    let missing = s.work_dir().join("no-such.kubeconfig").display().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "malformed token",
            vec!["token", "create", "--kubeconfig", &kc, "ABCDEF.0123456789abcdef"],
            r#"error: the bootstrap token was not of the form "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z""#,
        ),
        (
            "unknown usage",
            vec!["token", "create", "--kubeconfig", &kc, &token, "--usages", "authentication,bogus"],
            "error: invalid bootstrap token usage string: bogus, valid usage options: signing,authentication",
        ),
        (
            "group outside system:bootstrappers:",
            vec!["token", "create", "--kubeconfig", &kc, &token, "--groups", "system:masters"],
            r#"error: bootstrap group "system:masters" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
        ),
        (
            "groups without the authentication usage",
            vec!["token", "create", "--kubeconfig", &kc, &token, "--usages", "signing"],
            r#"error: token groups cannot be specified unless --usages includes "authentication""#,
        ),
        (
            "bad ttl",
            vec!["token", "create", "--kubeconfig", &kc, &token, "--ttl", "1d"],
            r#"error: invalid argument "1d" for "--ttl" flag: time: unknown unit "d" in duration "1d""#,
        ),
        (
            "negative ttl",
            vec!["token", "create", "--kubeconfig", &kc, &token, "--ttl", "-1h"],
            r#"error: invalid argument "-1h" for "--ttl" flag: must not be negative (0 means never expires)"#,
        ),
        (
            "no kubeconfig at all",
            vec!["token", "create"],
            "error: no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG",
        ),
        (
            "no kubeconfig to list with",
            vec!["token", "list"],
            "error: no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG",
        ),
        ("kubeconfig file missing", vec!["token", "list", "--kubeconfig", &missing], "error: kubeconfig "),
        (
            "malformed token to delete",
            vec!["token", "delete", "--kubeconfig", &kc, "abcdef", "not-a-token"],
            r#"error: given token didn't match pattern "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z" or "\\A([a-z0-9]{6})\\z""#,
        ),
        (
            "nothing to delete",
            vec!["token", "delete", "--kubeconfig", &kc],
            r#"error: missing argument; 'token delete' is missing token of form "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z" or "\\A([a-z0-9]{6})\\z""#,
        ),
        (
            "malformed bootstrap kubeconfig token",
            vec!["kubeconfig", "bootstrap", "--kubeconfig", &kc, "--token", "abc.def"],
            r#"error: the bootstrap token was not of the form "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z""#,
        ),
        (
            "bootstrap kubeconfig without a token",
            vec!["kubeconfig", "bootstrap", "--kubeconfig", &kc],
            "error: --token is required",
        ),
        (
            "bootstrap kubeconfig without a kubeconfig",
            vec!["kubeconfig", "bootstrap", "--token", &token],
            "error: no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG",
        ),
    ];
    for (name, args, want) in cases {
        let line = kustos_err(&args);
        assert!(line.starts_with(want), "{name}: got {line:?}, want it to start with {want:?}");
        assert!(!line.contains("0123456789abcdef"), "{name}: the token secret is never echoed: {line}");
    }
    // None of the refused creates wrote anything.
    assert_eq!(secret_code(&s, &id).await, 404, "no Secret for a refused token");
    // A kubeconfig file missing is named.
    let line = kustos_err(&["token", "list", "--kubeconfig", &missing]);
    assert!(line.contains(&missing) && line.contains("does not exist"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_cleaner_deletes_a_token_once_it_expires() {
    let s = shared();
    let (_, short_id, _) = create(&s, &["--ttl", "3s", "--description", "expires soon"]);
    let (_, day_id, _) = create(&s, &["--ttl", "24h"]);
    let (_, forever_id, _) = create(&s, &["--ttl", "0"]);
    assert_eq!(secret_code(&s, &short_id).await, 200, "present after create");

    wait_for("the token cleaner deleting an expired token", || secret_code(&s, &short_id), |c| *c == 404).await;
    assert_eq!(secret_code(&s, &day_id).await, 200, "an unexpired token stays");
    assert_eq!(secret_code(&s, &forever_id).await, 200, "a token without expiration stays");
    for id in [&day_id, &forever_id] {
        kustos_ok(&["token", "delete", "--kubeconfig", &admin(&s), id]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_info_is_public_and_signed_for_signing_tokens() {
    let s = shared();

    // Anyone may read cluster-info: the server and the cluster CA, no users.
    let cm = cluster_info(&s).await;
    let kubeconfig = cm["data"]["kubeconfig"].as_str().expect("a kubeconfig key").to_string();
    let (server, ca) = cluster_of(&kubeconfig);
    assert_eq!(server, s.url, "cluster-info names this server");
    let ca_crt = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("reading ca.crt");
    assert!(String::from_utf8_lossy(&ca).contains(ca_crt.trim()), "the CA bundle holds the cluster CA");
    let v: serde_yaml::Value = serde_yaml::from_str(&kubeconfig).unwrap_or_default();
    assert!(v["users"].as_sequence().is_none_or(Vec::is_empty), "no users in cluster-info: {kubeconfig}");

    // ... and nothing else in kube-public, nor any other ConfigMap.
    let other = unique("other");
    let r = send(
        s.http()
            .post(format!("{}/api/v1/namespaces/kube-public/configmaps", s.url))
            .json(&common::configmap(&other, json!({"k": "v"}))),
    )
    .await;
    r.expect_code(201, "admin creates another ConfigMap in kube-public");
    for path in [
        format!("/api/v1/namespaces/kube-public/configmaps/{other}"),
        "/api/v1/namespaces/kube-public/configmaps".to_string(),
        "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt".to_string(),
    ] {
        let r = send(s.anonymous().get(format!("{}{path}", s.url))).await;
        assert_status(&r, 403, Some("Forbidden"), &format!("anonymous GET {path}"));
    }
    let r = send(s.anonymous().put(format!("{}{CLUSTER_INFO}", s.url)).json(&cm)).await;
    assert_status(&r, 403, Some("Forbidden"), "anonymous update of cluster-info");

    // An authentication-only token signs nothing; a signing token is signed for.
    let (_, auth_only, _) = create(&s, &["--usages", "authentication"]);
    let (token, id, secret) = create(&s, &[]);
    let key = format!("jws-kubeconfig-{id}");
    let cm =
        wait_for("the bootstrap signer signing cluster-info", || cluster_info(&s), |cm| cm["data"][&key].is_string())
            .await;
    assert!(cm["data"][format!("jws-kubeconfig-{auth_only}")].is_null(), "no signature for a non-signing token: {cm}");
    let sig = cm["data"][&key].as_str().unwrap_or_default();
    let content = cm["data"]["kubeconfig"].as_str().unwrap_or_default();
    assert_eq!(content, kubeconfig, "signing leaves the kubeconfig alone");
    // Keyed by the token secret alone, as kubeadm's discovery and cluster-bootstrap's
    // DetachedTokenIsValid verify it (not the full token the reference docs name).
    python_verifies(sig, content, &id, &secret).unwrap_or_else(|e| panic!("Python's hmac rejects {sig}: {e}"));
    assert!(python_verifies(sig, content, &id, &token).is_err(), "the full token is not the key");
    assert!(python_verifies(sig, "tampered", &id, &secret).is_err(), "other content does not verify");

    // Deleting the token removes its signature.
    kustos_ok(&["token", "delete", "--kubeconfig", &admin(&s), &token]);
    wait_for("the signature of a deleted token going away", || cluster_info(&s), |cm| cm["data"][&key].is_null()).await;
    kustos_ok(&["token", "delete", "--kubeconfig", &admin(&s), &auth_only]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_info_follows_the_server_to_a_new_port() {
    let mut s = Server::start();
    let before = cluster_info(&s).await;
    let (server, _) = cluster_of(before["data"]["kubeconfig"].as_str().unwrap_or_default());
    assert_eq!(server, s.url);
    s.restart();
    let after = cluster_info(&s).await;
    let (server, _) = cluster_of(after["data"]["kubeconfig"].as_str().unwrap_or_default());
    assert_eq!(server, s.url, "refreshed for the restarted server (also when the port happens to be the same)");
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"], "the same ConfigMap, updated");
}

/// The rotated tokens on the server: (id, still valid), newest last by id order of the
/// annotation the rotation writes.
async fn rotated(s: &Server) -> Vec<(String, bool)> {
    let url =
        format!("{}/api/v1/namespaces/kube-system/secrets?labelSelector=kustos.dev%2Frotated-by%3Dtoken-rotate", s.url);
    let r = send(s.http().get(url)).await;
    assert_eq!(r.code, 200, "listing rotated tokens: {}", r.text);
    let now = chrono::Utc::now();
    let b64 = |v: &Value| {
        use base64::Engine as _;
        let text = v.as_str().unwrap_or_default();
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(text).expect("base64")).expect("utf-8")
    };
    let mut out: Vec<(String, String, bool)> = r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let id = b64(&item["data"]["token-id"]);
            let expires = chrono::DateTime::parse_from_rfc3339(&b64(&item["data"]["expiration"])).expect("expiration");
            let created =
                item["metadata"]["annotations"]["kustos.dev/created-at"].as_str().expect("created-at").to_string();
            (created, id, expires > now)
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, id, valid)| (id, valid)).collect()
}

fn rotate(s: &Server, args: &[&str]) -> Output {
    let kc = admin(s);
    let mut all = vec!["token", "rotate", "--kubeconfig", kc.as_str()];
    all.extend_from_slice(args);
    kustos(&all)
}

/// The token in the published Secret `ns/name`, checked to authenticate as its bootstrap user.
fn published(s: &Server, ns: &str, name: &str) -> (String, String) {
    let out = s.kubectl_ok(&["get", "secret", "-n", ns, name, "-o", "jsonpath={.data.token}"]);
    use base64::Engine as _;
    let token = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(out.trim()).expect("base64"))
        .expect("utf-8");
    let (id, _) = split(&token);
    let boot = bootstrap_kubeconfig(s, &token);
    let who = kubectl_as(s, &boot, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(who.status.success(), "the published token authenticates: {}", String::from_utf8_lossy(&who.stderr));
    assert_eq!(
        String::from_utf8_lossy(&who.stdout),
        format!("system:bootstrap:{id}"),
        "whoami with the published token"
    );
    (token, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_rotate_keeps_the_newest_publishes_one_and_is_safe_concurrently() {
    let s = shared();
    let ns = unique("provisioning");
    s.kubectl_ok(&["create", "namespace", &ns]);
    let target = format!("{ns}/join-token");

    // Arguments are checked before anything is written.
    for (args, part) in [
        (vec!["--keep", "0"], "must be at least 1"),
        (vec!["--ttl", "0"], "rotated tokens must expire"),
        (vec!["--publish-secret", "no-slash"], "expected NAMESPACE/NAME"),
    ] {
        let mut all = vec!["token", "rotate", "--kubeconfig"];
        let kc = admin(&s);
        all.push(&kc);
        all.extend_from_slice(&args);
        let line = kustos_err(&all);
        assert!(line.contains(part), "{args:?}: {line}");
    }
    assert!(rotated(&s).await.is_empty(), "nothing was written by refused runs");

    // Sequential runs: one new token each, at most --keep valid, the newest published.
    for run in 1..=3 {
        let out = rotate(&s, &["--keep", "2", "--publish-secret", &target]);
        assert!(out.status.success(), "run {run}: {}", String::from_utf8_lossy(&out.stderr));
        let tokens = rotated(&s).await;
        let valid: Vec<&String> = tokens.iter().filter(|t| t.1).map(|t| &t.0).collect();
        assert_eq!(valid.len(), run.min(2), "run {run}: valid rotated tokens {tokens:?}");
        let newest = &tokens.last().expect("a rotated token").0;
        let (token, id) = published(&s, &ns, "join-token");
        assert_eq!(&id, newest, "run {run}: the newest token is published");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("created bootstrap token {id:?}")), "run {run}: {stdout}");
        assert!(
            !stdout.contains(&token) && !String::from_utf8_lossy(&out.stderr).contains(&token),
            "run {run}: the token is never printed"
        );
    }
    let first = rotated(&s).await.first().map(|t| t.0.clone()).expect("first token");

    // Two runs at once, keeping one: never zero valid tokens, the published one works.
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let s = s.clone();
            let target = target.clone();
            std::thread::spawn(move || rotate(&s, &["--keep", "1", "--publish-secret", &target]))
        })
        .collect();
    for r in runs {
        let out = r.join().expect("rotate thread");
        assert!(out.status.success(), "concurrent run: {}", String::from_utf8_lossy(&out.stderr));
    }
    let tokens = rotated(&s).await;
    let valid = tokens.iter().filter(|t| t.1).count();
    assert!((1..=2).contains(&valid), "concurrent runs leave one or two valid tokens: {tokens:?}");
    let (_, published_id) = published(&s, &ns, "join-token");
    assert!(tokens.iter().any(|t| t.0 == published_id && t.1), "the published token is valid: {tokens:?}");

    // A later run converges to exactly --keep.
    let out = rotate(&s, &["--keep", "1", "--publish-secret", &target]);
    assert!(out.status.success(), "converging run: {}", String::from_utf8_lossy(&out.stderr));
    let tokens = rotated(&s).await;
    assert_eq!(tokens.iter().filter(|t| t.1).count(), 1, "one valid token after --keep 1: {tokens:?}");

    // The token cleaner deletes what rotation expired.
    wait_for("the token cleaner deleting an expired rotated token", || secret_code(&s, &first), |c| *c == 404).await;

    // Leave no valid rotated tokens behind for other tests.
    for (id, _) in rotated(&s).await {
        kustos_ok(&["token", "delete", "--kubeconfig", &admin(&s), &id]);
    }
}
