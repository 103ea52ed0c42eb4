//! `kustos sa-signer` (the `k8s.io/externaljwt` v1 signer on a Unix socket) and an apiserver
//! started with `--service-account-signing-endpoint` pointing at it:
//! - a gRPC client of this test's own signs, fetches the keys and reads the metadata, on a
//!   socket path (mode 0600; 0660 and the group's with `--socket-group`) and on an abstract
//!   socket; the assembled token verifies with the key `FetchKeys` serves; the signer's
//!   `/metrics` counts the calls;
//! - `kubectl create token` on the apiserver gives tokens the signer signed, which
//!   authenticate, whose key `/openid/v1/jwks` publishes, capped at the signer's lifetime; a
//!   `--legacy-key-file` key is served excluded from discovery: its tokens verify, the JWKS
//!   leaves it out;
//! - `kustos sa-key rotate` on the signer's data directory under a load of token requests and
//!   authenticated calls: no request fails, nothing restarts, the old key keeps verifying,
//!   `sa-key status` shows it retired, the apiserver's `apiserver_externaljwt_*` metrics count
//!   the calls; `kustos sa-key revoke` then makes the old key's tokens fail within a key
//!   refresh;
//! - `kustos server` signs through the signer too; on etcd the signer follows a rotation
//!   made on another member of the shared PKI;
//! - bad endpoints and conflicting flags stop the start with a one-line error.
//!
//! Every wait is bounded; nothing asserts on how long anything took.

mod common;

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use common::{kustos_ok, run_bounded, send, unique, Server};
use kustos_apiserver::pki::externaljwt::proto::external_jwt_signer_client::ExternalJwtSignerClient;
use kustos_apiserver::pki::externaljwt::proto::{FetchKeysRequest, MetadataRequest, SignJwtRequest};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);
const SSR_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// A running `kustos sa-signer`; killed on drop.
struct Signer {
    child: Child,
    socket: String,
    metrics: Option<String>,
    stderr: PathBuf,
}

impl Signer {
    /// `kustos sa-signer --socket SOCKET --data-dir DATA_DIR ARGS`, once it serves.
    fn start(socket: &str, data_dir: &Path, args: &[&str]) -> Signer {
        let stderr = data_dir.with_extension("stderr.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_kustos"))
            .args(["sa-signer", "--socket", socket, "--data-dir"])
            .arg(data_dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("creating the signer's log"))
            .spawn()
            .expect("starting kustos sa-signer");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut signer = Signer { child, socket: socket.to_string(), metrics: None, stderr };
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.starts_with("kustos sa-signer is serving on ") => break,
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("metrics: ") {
                        signer.metrics = Some(url.to_string());
                    }
                }
                Err(_) => panic!("kustos sa-signer did not start; its log:\n{}", signer.log()),
            }
        }
        signer
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn client(&self) -> ExternalJwtSignerClient<tonic::transport::Channel> {
        client(&self.socket).await
    }
}

impl Drop for Signer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gRPC client of the signer at `socket` (a path, or `@name`).
async fn client(socket: &str) -> ExternalJwtSignerClient<tonic::transport::Channel> {
    ExternalJwtSignerClient::new(channel(socket).await)
}

/// A channel to the signer at `socket`.
async fn channel(socket: &str) -> tonic::transport::Channel {
    let target = socket.to_string();
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let target = target.clone();
            async move {
                let addr = match target.strip_prefix('@') {
                    Some(name) => {
                        use std::os::linux::net::SocketAddrExt as _;
                        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?
                    }
                    None => std::os::unix::net::SocketAddr::from_pathname(&target)?,
                };
                let stream = tokio::net::UnixStream::connect_addr(&addr.into()).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("connecting to the signer")
}

/// Call `method` of the service in `package` (`v1`, `v1alpha1`) with `request`, as a client
/// generated from that package's proto does (the messages are the same in both).
async fn call<Req, Resp>(socket: &str, package: &str, method: &str, request: Req) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel(socket).await);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path: http::uri::PathAndQuery =
        format!("/{package}.ExternalJWTSigner/{method}").parse().map_err(|_| tonic::Status::internal("path"))?;
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(tonic::Request::new(request), path, codec).await.map(tonic::Response::into_inner)
}

/// The key id of a data directory's `sa.key`.
fn signing_kid(data_dir: &Path) -> String {
    let pem = std::fs::read_to_string(data_dir.join("pki/sa.key")).expect("reading sa.key");
    kustos_ca::jwt::SigningKey::from_pem(&pem).expect("sa.key").public_key().key_id().to_string()
}

fn kid(token: &str) -> String {
    let seg = token.split('.').next().unwrap_or_default();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(seg).expect("base64url")).expect("JSON header");
    header["kid"].as_str().unwrap_or_default().to_string()
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_client_is_answered_as_a_v1_one() {
    use kustos_apiserver::pki::externaljwt::proto::{FetchKeysResponse, MetadataResponse, SignJwtResponse};
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket = tmp.path().join("signer.sock");
    let signer = Signer::start(
        socket.to_str().expect("UTF-8"),
        &tmp.path().join("signer"),
        &["--service-account-max-token-expiration", "2h"],
    );
    let socket = socket.to_str().expect("UTF-8");
    for package in ["v1", "v1alpha1"] {
        let meta: MetadataResponse = call(socket, package, "Metadata", MetadataRequest {}).await.expect(package);
        assert_eq!(meta.max_token_expiration_seconds, 7200, "{package}");
        let keys: FetchKeysResponse = call(socket, package, "FetchKeys", FetchKeysRequest {}).await.expect(package);
        assert!(!keys.keys.is_empty(), "{package}: {keys:?}");
        let now = chrono::Utc::now().timestamp();
        let claims = serde_json::json!({"iss": "https://kustos", "sub": "system:serviceaccount:a:b", "aud": ["x"],
                                        "iat": now, "nbf": now, "exp": now + 600});
        let signed: SignJwtResponse =
            call(socket, package, "Sign", SignJwtRequest { claims: b64(&claims) }).await.expect(package);
        assert!(!signed.header.is_empty() && !signed.signature.is_empty(), "{package}: {signed:?}");
    }
    let unknown = call::<MetadataRequest, MetadataResponse>(socket, "v2", "Metadata", MetadataRequest {}).await;
    assert_eq!(unknown.map_err(|s| s.code()).err(), Some(tonic::Code::Unimplemented), "another package is not served");
    drop(signer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_signs_fetches_keys_and_reads_metadata() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket = tmp.path().join("signer.sock");
    let data_dir = tmp.path().join("signer");
    let signer = Signer::start(
        socket.to_str().expect("UTF-8"),
        &data_dir,
        &[
            "--service-account-max-token-expiration",
            "2h",
            "--refresh-hint",
            "7s",
            "--metrics-bind-address",
            "127.0.0.1:0",
        ],
    );
    let mode = std::fs::metadata(&socket).expect("the socket").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is the owner's only");
    let mut c = signer.client().await;

    let meta = c.metadata(MetadataRequest {}).await.expect("Metadata").into_inner();
    assert_eq!(meta.max_token_expiration_seconds, 7200);

    let keys = c.fetch_keys(FetchKeysRequest {}).await.expect("FetchKeys").into_inner();
    assert_eq!(keys.refresh_hint_seconds, 7);
    assert!(keys.data_timestamp.as_ref().is_some_and(|t| t.seconds > 1_600_000_000), "{:?}", keys.data_timestamp);
    let kid_now = signing_kid(&data_dir);
    assert_eq!(keys.keys.iter().map(|k| k.key_id.as_str()).collect::<Vec<_>>(), [kid_now.as_str()]);
    assert!(!keys.keys[0].exclude_from_oidc_discovery);
    let served = kustos_ca::jwt::PublicKey::from_spki_der(&keys.keys[0].key).expect("a PKIX key");

    let exp = chrono::Utc::now().timestamp() + 3600;
    let claims =
        b64(&json!({"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:ns:robot", "exp": exp}));
    let signed = c.sign(SignJwtRequest { claims: claims.clone() }).await.expect("Sign").into_inner();
    let header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&signed.header).expect("base64url")).expect("JSON");
    assert_eq!(header, json!({"alg": "ES256", "kid": kid_now, "typ": "JWT"}));
    let token = format!("{}.{claims}.{}", signed.header, signed.signature);
    let verified = kustos_ca::jwt::verify(&token, &[served]).expect("the token verifies with the served key");
    assert_eq!(verified["sub"], "system:serviceaccount:ns:robot");

    // What it does not sign.
    for (what, claims) in [
        ("not base64url", "%%%".to_string()),
        ("not an object", b64(&json!(["a"]))),
        ("outlives the maximum", b64(&json!({"exp": chrono::Utc::now().timestamp() + 3 * 3600}))),
    ] {
        let err = c.sign(SignJwtRequest { claims }).await.expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err}");
    }

    // Its metrics.
    let url = signer.metrics.clone().expect("the metrics address");
    let text = reqwest::get(&url).await.expect("GET /metrics").text().await.expect("metrics text");
    for want in [
        "kustos_sa_signer_requests_total{method=\"Sign\",code=\"OK\"} 1",
        "kustos_sa_signer_requests_total{method=\"Sign\",code=\"InvalidArgument\"} 3",
        "kustos_sa_signer_requests_total{method=\"FetchKeys\",code=\"OK\"} 1",
        "kustos_sa_signer_keys{role=\"signing\"} 1",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }

    // The same on an abstract socket.
    let name = format!("@{}", unique("kustos-signer-test"));
    let abstract_signer = Signer::start(&name, &tmp.path().join("abstract"), &[]);
    let mut c = abstract_signer.client().await;
    assert_eq!(
        c.metadata(MetadataRequest {}).await.expect("Metadata").into_inner().max_token_expiration_seconds,
        8760 * 3600
    );
    let keys = c.fetch_keys(FetchKeysRequest {}).await.expect("FetchKeys").into_inner();
    assert_eq!(keys.keys[0].key_id, signing_kid(&tmp.path().join("abstract")));

    // With --socket-group: 0660, owned by that group. As root, a group other than its own, by
    // name (from /etc/group); otherwise its own group, by id.
    use std::os::unix::fs::MetadataExt as _;
    let mine = std::fs::metadata(tmp.path()).expect("the temporary directory");
    let (group, gid) = if mine.uid() == 0 {
        let groups = std::fs::read_to_string("/etc/group").expect("reading /etc/group");
        groups
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                Some((f.first()?.to_string(), f.get(2)?.parse::<u32>().ok()?))
            })
            .find(|(_, gid)| *gid != mine.gid())
            .expect("a second group in /etc/group")
    } else {
        (mine.gid().to_string(), mine.gid())
    };
    let grouped = tmp.path().join("grouped.sock");
    let grouped_signer =
        Signer::start(grouped.to_str().expect("UTF-8"), &tmp.path().join("grouped"), &["--socket-group", &group]);
    let meta = std::fs::metadata(&grouped).expect("the socket");
    assert_eq!((meta.permissions().mode() & 0o777, meta.gid()), (0o660, gid), "0660, the group's");
    assert!(grouped_signer.client().await.metadata(MetadataRequest {}).await.is_ok());
}

async fn token_request(s: &Server, ns: &str, sa: &str) -> Result<String, String> {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let r = s
        .http()
        .post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", s.url))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("TokenRequest: {e:?}"))?;
    let code = r.status().as_u16();
    let body: Value = r.json().await.map_err(|e| format!("TokenRequest body: {e:?}"))?;
    match (code, body["status"]["token"].as_str()) {
        (201, Some(t)) => Ok(t.to_string()),
        _ => Err(format!("TokenRequest: HTTP {code} {body}")),
    }
}

/// The user a token authenticates as, or the HTTP code it got.
async fn whoami(s: &Server, token: &str) -> Result<String, u16> {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = send(s.anonymous().post(format!("{}{SSR_PATH}", s.url)).bearer_auth(token).json(&body)).await;
    match r.code {
        201 => Ok(r.body["status"]["userInfo"]["username"].as_str().unwrap_or_default().to_string()),
        code => Err(code),
    }
}

async fn jwks_kids(s: &Server) -> Vec<String> {
    let r = send(s.http().get(format!("{}/openid/v1/jwks", s.url))).await;
    r.expect_code(200, "GET /openid/v1/jwks");
    r.body["keys"].as_array().expect("keys").iter().map(|k| k["kid"].as_str().unwrap_or_default().to_string()).collect()
}

/// Token requests and authenticated calls in a loop (bounded in rounds), counting failures.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

fn start_load(s: Arc<Server>, ns: String, first: String) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let (st, o, f) = (stop.clone(), ok.clone(), failures.clone());
    let task = tokio::spawn(async move {
        let fail = |what: String| f.lock().unwrap_or_else(|e| e.into_inner()).push(what);
        for _ in 0..20_000u32 {
            if st.load(Ordering::SeqCst) {
                return;
            }
            match token_request(&s, &ns, "robot").await {
                Ok(fresh) => {
                    for (what, token) in [("fresh token", &fresh), ("first token", &first)] {
                        match whoami(&s, token).await {
                            Ok(_) => {
                                o.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(code) => fail(format!("{what} (kid {}): HTTP {code}", kid(token))),
                        }
                    }
                }
                Err(e) => fail(e),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    Load { stop, ok, failures, task }
}

impl Load {
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

    async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(WAIT, self.task).await;
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_signs_through_kustos_sa_signer_and_follows_rotate_and_revoke() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket = tmp.path().join("signer.sock");
    let signer_dir = tmp.path().join("signer");
    // A key that signs elsewhere (legacy tokens): it verifies, is never published, never signs.
    let legacy_pem = rcgen::KeyPair::generate().expect("a key").serialize_pem();
    let legacy_file = tmp.path().join("legacy.key");
    std::fs::write(&legacy_file, &legacy_pem).expect("writing the legacy key");
    let legacy = kustos_ca::jwt::SigningKey::from_pem(&legacy_pem).expect("the legacy key");
    let legacy_kid = legacy.public_key().key_id().to_string();
    let signer = Signer::start(
        socket.to_str().expect("UTF-8"),
        &signer_dir,
        &[
            "--service-account-max-token-expiration",
            "2h",
            "--refresh-hint",
            "2s",
            "--legacy-key-file",
            legacy_file.to_str().expect("UTF-8"),
        ],
    );
    let served = signer.client().await.fetch_keys(FetchKeysRequest {}).await.expect("FetchKeys").into_inner();
    let excluded: Vec<(&str, bool)> =
        served.keys.iter().map(|k| (k.key_id.as_str(), k.exclude_from_oidc_discovery)).collect();
    assert_eq!(excluded, [(signing_kid(&signer_dir).as_str(), false), (legacy_kid.as_str(), true)]);
    let s = Arc::new(Server::apiserver_with(&[
        "--service-account-signing-endpoint",
        socket.to_str().expect("UTF-8"),
        "--service-account-issuer",
        "https://kustos.example",
    ]));
    let own = signing_kid(&s.data_dir);
    let old = signing_kid(&signer_dir);
    assert_ne!(own, old);
    let ns = s.create_namespace("extsign").await;
    s.kubectl_ok(&["create", "serviceaccount", "robot", "-n", &ns]);

    // kubectl create token: signed by the signer, authenticates, published in the JWKS.
    let first = s.kubectl_ok(&["create", "token", "robot", "-n", &ns]).trim().to_string();
    assert_eq!(kid(&first), old, "signed with the signer's key");
    assert_eq!(whoami(&s, &first).await, Ok(format!("system:serviceaccount:{ns}:robot")));
    assert_eq!(jwks_kids(&s).await, vec![old.clone()], "the JWKS is the signer's, not the data directory's");
    // Cacheable until the keys are fetched again (refresh hint 2 s), not for an hour.
    let r = send(s.http().get(format!("{}/openid/v1/jwks", s.url))).await;
    let cache = r.headers.get("cache-control").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let age: u64 = cache.strip_prefix("public, max-age=").and_then(|a| a.parse().ok()).unwrap_or(u64::MAX);
    assert!(age <= 2, "Cache-Control {cache:?}");
    // The signer's 2h is the cap: a longer request is shortened, with a warning.
    let out = s.kubectl(&["create", "token", "robot", "-n", &ns, "--duration", "10h", "-o", "json"]);
    let body: Value = serde_json::from_slice(&out.stdout).expect("a TokenRequest");
    assert_eq!(body["spec"]["expirationSeconds"], 7200, "{body}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("shortened to 7200 seconds"), "{out:?}");
    // A token signed by the data directory's own key does not verify; one signed by the
    // signer's legacy key does, though the JWKS does not publish that key.
    let uid = s.kubectl_ok(&["get", "serviceaccount", "robot", "-n", &ns, "-o", "jsonpath={.metadata.uid}"]);
    let now = chrono::Utc::now().timestamp();
    let claims = json!({"iss": "https://kustos.example", "sub": format!("system:serviceaccount:{ns}:robot"),
        "aud": ["https://kustos.example"], "exp": now + 600, "iat": now, "nbf": now,
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": "robot", "uid": uid.trim()}}});
    let pem = std::fs::read_to_string(s.data_dir.join("pki/sa.key")).expect("sa.key");
    let forged = kustos_ca::jwt::SigningKey::from_pem(&pem).expect("a key").sign(&claims).expect("signing");
    assert_eq!(whoami(&s, &forged).await, Err(401));
    let by_legacy = legacy.sign(&claims).expect("signing");
    assert_eq!(kid(&by_legacy), legacy_kid);
    assert_eq!(whoami(&s, &by_legacy).await, Ok(format!("system:serviceaccount:{ns}:robot")));

    // Rotation under load.
    let (server_pid, signer_pid) = (s.pid(), signer.pid());
    let load = start_load(s.clone(), ns.clone(), first.clone());
    load.progress(20).await;
    let dir = signer_dir.to_str().expect("UTF-8");
    let out = kustos_ok(&["sa-key", "rotate", "--data-dir", dir]);
    let new = out.lines().find_map(|l| l.strip_prefix("signing key: ")).expect("the new kid").to_string();
    assert_ne!(new, old);
    let deadline = Instant::now() + WAIT;
    let fresh = loop {
        let t = token_request(&s, &ns, "robot").await.expect("a token");
        if kid(&t) == new {
            break t;
        }
        assert!(Instant::now() < deadline, "new tokens never carried the new kid {new}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    load.progress(40).await;
    let failures = load.finish().await;
    assert!(failures.is_empty(), "requests failed during the rotation: {failures:?}");
    assert_eq!((s.pid(), signer.pid()), (server_pid, signer_pid), "nothing restarted");
    let kids = jwks_kids(&s).await;
    assert!(kids.contains(&old) && kids.contains(&new), "JWKS {kids:?}");
    assert!(whoami(&s, &first).await.is_ok(), "the old key verifies until its end");
    let metrics = send(s.http().get(format!("{}/metrics", s.url))).await;
    for want in [
        "apiserver_externaljwt_sign_request_total{code=\"OK\"} ",
        "apiserver_externaljwt_fetch_keys_request_total{code=\"OK\"} ",
        "apiserver_externaljwt_fetch_keys_success_timestamp ",
        "apiserver_externaljwt_fetch_keys_data_timestamp ",
        "apiserver_externaljwt_request_duration_seconds_count{method=\"/v1.ExternalJWTSigner/Sign\",code=\"OK\"} ",
        "apiserver_externaljwt_request_duration_seconds_count{method=\"/v1.ExternalJWTSigner/FetchKeys\",code=\"OK\"} ",
        "apiserver_externaljwt_request_duration_seconds_count{method=\"/v1.ExternalJWTSigner/Metadata\",code=\"OK\"} 1",
    ] {
        assert!(metrics.text.contains(want), "{want} missing from /metrics:\n{}", metrics.text);
    }
    // `kustos sa-key status` on the signer's directory.
    let status = kustos_ok(&["sa-key", "status", "--data-dir", dir, "--kubeconfig", "/dev/null"]);
    for want in [format!("{new}\tcurrent\t"), format!("{old}\tretired\t")] {
        assert!(status.contains(&want), "{want:?} missing from:\n{status}");
    }

    // Revocation: the old key's tokens fail once the apiserver fetches the keys again.
    let out = kustos_ok(&["sa-key", "revoke", &old, "--data-dir", dir]);
    assert!(out.contains(&format!("revoked {old}")), "{out}");
    let deadline = Instant::now() + WAIT;
    loop {
        match whoami(&s, &first).await {
            Err(401) => break,
            Ok(_) => {}
            Err(code) => panic!("the revoked key's token got HTTP {code}"),
        }
        assert!(Instant::now() < deadline, "a token of the revoked key {old} still authenticates");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(whoami(&s, &fresh).await.is_ok(), "the new key's tokens still authenticate");
    assert_eq!(jwks_kids(&s).await, vec![new.clone()]);
    assert!(whoami(&s, &by_legacy).await.is_ok(), "the legacy key still verifies");
}

/// `kustos <args>` must fail with one line on stderr containing `want`.
fn fails_with(args: &[&str], env: &[(&str, &str)], want: &str) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kustos"));
    cmd.args(args).env_remove("KUBECONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_bounded(&mut cmd, None, WAIT, &format!("kustos {}", args.join(" ")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kustos {args:?} must fail");
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains(want), "kustos {args:?}: want {want:?} in:\n{stderr}");
}

/// A start that must fail: its arguments, its environment, what its error says.
type Case<'a> = (Vec<String>, Vec<(&'a str, &'a str)>, &'a str);

#[test]
fn bad_endpoints_and_conflicting_flags_stop_the_start() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let data = data.to_str().expect("UTF-8");
    let plain = tmp.path().join("plain-file");
    std::fs::write(&plain, "").expect("a plain file");
    let plain = plain.to_str().expect("UTF-8");
    let absent = tmp.path().join("absent.sock");
    let absent = absent.to_str().expect("UTF-8");
    let server = |extra: &[&str]| -> Vec<String> {
        ["apiserver", "--data-dir", data, "--secure-port", "0"].iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let (not_socket, no_answer) = (
        format!("{plain} is not a Unix socket"),
        format!("while setting up external-jwt-signer: while initially filling key cache from {absent}"),
    );
    let cases: Vec<Case> = vec![
        (
            server(&["--service-account-signing-endpoint", "relative.sock"]),
            vec![],
            "invalid value \"relative.sock\" passed for `--service-account-signing-endpoint`, should be a valid location on the filesystem or must be prefixed with @ to name UDS in abstract namespace",
        ),
        (
            server(&["--service-account-signing-endpoint", "@a", "--service-account-key-file", plain]),
            vec![],
            "can't set `--service-account-signing-key-file` and/or `--service-account-key-file` with `--service-account-signing-endpoint` (They are mutually exclusive)",
        ),
        (server(&["--service-account-signing-endpoint", plain]), vec![], &not_socket),
        (
            server(&["--service-account-signing-endpoint", absent]),
            vec![("KUSTOS_EXTERNALJWT_SETUP_TIMEOUT_SECONDS", "1")],
            &no_answer,
        ),
        (
            vec!["sa-signer".into(), "--socket".into(), "signer.sock".into(), "--data-dir".into(), data.into()],
            vec![],
            "invalid value \"signer.sock\" passed for `--socket`",
        ),
        (
            vec!["sa-signer".into(), "--socket".into(), format!("{}/no-such-dir/s.sock", tmp.path().display()), "--data-dir".into(), data.into()],
            vec![],
            "no-such-dir does not exist",
        ),
        (
            vec!["sa-signer".into(), "--socket".into(), plain.into(), "--data-dir".into(), data.into()],
            vec![],
            "exists and is not a socket",
        ),
        (
            vec!["sa-signer".into(), "--socket".into(), "@x".into(), "--socket-group".into(), "0".into(), "--data-dir".into(), data.into()],
            vec![],
            "--socket-group needs a socket path",
        ),
        (
            vec!["sa-signer".into(), "--socket".into(), "@x".into(), "--service-account-max-token-expiration".into(), "5m".into()],
            vec![],
            "must be between 10m and 2^32 seconds",
        ),
    ];
    for (args, env, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&args, &env, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_maximum_than_the_signer_signs_and_a_second_signer_on_one_socket_are_refused_and_kustos_server_signs_through_it(
) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket = tmp.path().join("signer.sock");
    let socket = socket.to_str().expect("UTF-8");
    let _signer = Signer::start(socket, &tmp.path().join("signer"), &["--service-account-max-token-expiration", "2h"]);
    let data = tmp.path().join("data");
    fails_with(
        &[
            "apiserver",
            "--data-dir",
            data.to_str().expect("UTF-8"),
            "--secure-port",
            "0",
            "--service-account-signing-endpoint",
            socket,
            "--service-account-max-token-expiration",
            "3h",
        ],
        &[],
        "service-account-max-token-expiration cannot be set longer than the token expiration supported by service-account-signing-endpoint: 3h0m0s > 2h0m0s",
    );
    let second = tmp.path().join("second");
    fails_with(
        &["sa-signer", "--socket", socket, "--data-dir", second.to_str().expect("UTF-8")],
        &[],
        &format!("another process serves on {socket}"),
    );
    // The first still serves.
    let mut c = client(socket).await;
    assert!(c.metadata(MetadataRequest {}).await.is_ok());
    // `kustos server` signs through it too; its serviceaccount-token controller does not run,
    // as kube-controller-manager's without a key of its own.
    let server = Server::start_with(&["--service-account-signing-endpoint", socket]);
    let ns = server.create_namespace("extsrv").await;
    server.kubectl_ok(&["create", "serviceaccount", "robot", "-n", &ns]);
    let token = server.kubectl_ok(&["create", "token", "robot", "-n", &ns]);
    assert_eq!(kid(token.trim()), signing_kid(&tmp.path().join("signer")));
    assert_eq!(whoami(&server, token.trim()).await, Ok(format!("system:serviceaccount:{ns}:robot")));
    let log = std::fs::read_to_string(server.work_dir().join("stderr-0.log")).expect("the server's log");
    assert!(log.contains("no service-account private key to sign tokens with"), "{}", server.stderr_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_the_signer_takes_part_in_the_shared_pki_and_follows_a_rotation_made_elsewhere() {
    let etcd = common::etcd::Etcd::start();
    let mut flags = etcd.server_args();
    flags.extend(["--etcd-prefix".to_string(), "/ext-signer".to_string()]);
    let s = Server::start_with(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let old = signing_kid(&s.data_dir);
    // The signer's directory holds nothing but the key that opens the shared record.
    let tmp = tempfile::tempdir().expect("tempdir");
    let signer_dir = tmp.path().join("signer");
    std::fs::create_dir_all(signer_dir.join("pki")).expect("creating pki/");
    std::fs::set_permissions(signer_dir.join("pki"), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::copy(s.data_dir.join("pki/sync.key"), signer_dir.join("pki/sync.key")).expect("copying sync.key");
    let socket = tmp.path().join("signer.sock");
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--refresh-hint", "1s"]);
    let signer = Signer::start(socket.to_str().expect("UTF-8"), &signer_dir, &args);
    assert_eq!(signing_kid(&signer_dir), old, "the signer took the cluster's key from etcd");
    let mut c = signer.client().await;
    let kids = |r: &kustos_apiserver::pki::externaljwt::proto::FetchKeysResponse| {
        r.keys.iter().map(|k| k.key_id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(kids(&c.fetch_keys(FetchKeysRequest {}).await.expect("FetchKeys").into_inner()), [old.as_str()]);

    // A rotation on the apiserver's directory reaches the signer through etcd.
    let out = kustos_ok(&["sa-key", "rotate", "--data-dir", s.data_dir.to_str().expect("UTF-8")]);
    let new = out.lines().find_map(|l| l.strip_prefix("signing key: ")).expect("the new kid").to_string();
    let claims = b64(&json!({"sub": "system:serviceaccount:ns:robot"}));
    let deadline = Instant::now() + WAIT;
    loop {
        let signed = c.sign(SignJwtRequest { claims: claims.clone() }).await.expect("Sign").into_inner();
        if kid(&format!("{}.{claims}.{}", signed.header, signed.signature)) == new {
            break;
        }
        assert!(Instant::now() < deadline, "the signer never signed with the new key {new}:\n{}", signer.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let served = kids(&c.fetch_keys(FetchKeysRequest {}).await.expect("FetchKeys").into_inner());
    assert!(served.contains(&old) && served.contains(&new), "{served:?}");
}
