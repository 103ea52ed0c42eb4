//! Shared harness for the end-to-end tests: starts the real `kustos` binary on a free port
//! in a temporary directory and hands out kubectl, kube-rs and raw HTTPS clients for it.
//!
//! Every wait here is bounded in count and time; nothing asserts on wall-clock timings.
//!
//! Storage backend, from the environment (`scripts/test.sh` runs the suites once per backend):
//! - `KUSTOS_TEST_STORAGE`: `sqlite` (the default when unset) or `etcd`; anything else fails
//!   every test that starts a server.
//! - `KUSTOS_TEST_ETCD_SERVERS`: with `etcd`, the `--etcd-servers` of every server started
//!   here (e.g. `http://127.0.0.1:2379`); required then. (Tests of etcd itself start an
//!   etcd of their own, [`etcd::Etcd`], and pin `--storage`.)
//!
//! With `etcd`, each [`Server`] gets `--storage etcd --etcd-servers ... --etcd-prefix
//! /kustos-e2e/<unique>`, its own cluster on the shared etcd; the prefix is kept across
//! [`Server::restart`] like the data dir. A test that passes `--storage` itself pins its
//! backend and gets nothing added. etcd compacts its whole keyspace, every prefix at once:
//! a test that makes its server compact (a small `--history-revisions`) must have `compact`
//! in its name, so that the etcd pass runs it alone (`.config/nextest.toml`).
#![allow(dead_code)]

pub mod etcd;
pub mod kubelet;
pub mod x509;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// How long a server may take to print its two ready lines.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound for one kubectl invocation.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound for one HTTP request made by the raw clients.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `kustos server` child process and where to reach it.
pub struct Server {
    /// Owns the temporary directory; removed on drop.
    tmp: tempfile::TempDir,
    child: Mutex<Option<Child>>,
    /// `127.0.0.1:PORT`
    pub addr: String,
    /// `https://127.0.0.1:PORT`
    pub url: String,
    pub kubeconfig: PathBuf,
    pub data_dir: PathBuf,
    extra_args: Vec<String>,
    /// `server` (apiserver and controllers) or `apiserver` (the apiserver alone).
    subcommand: &'static str,
    /// Number of the current run (0 for the first start), used to name log files.
    runs: u32,
    /// With the etcd backend, where this server's objects live in etcd (`--etcd-prefix`);
    /// `None` on SQLite or when the test chose the storage itself.
    pub etcd_prefix: Option<String>,
    /// The storage flags the harness adds (empty on SQLite), the same on every run.
    storage_args: Vec<String>,
    /// The hard memory limit the server runs under, if any (the same on every run).
    limit: Option<MemoryLimit>,
}

/// A hard memory limit for a server: its address space (`RLIMIT_AS`, set by util-linux's
/// `prlimit` before it execs the binary, so the server keeps the child's pid) and the
/// environment its allocators read at start.
#[derive(Debug, Clone)]
pub struct MemoryLimit {
    /// Bytes of address space; an allocation past it fails and the process aborts.
    pub address_space: u64,
    pub env: Vec<(String, String)>,
}

static SHARED: Mutex<Weak<Server>> = Mutex::new(Weak::new());
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A server shared by the tests of one test binary that run at the same time. It is
/// stopped when the last test holding it ends (so nothing outlives the test process, also
/// under nextest, which runs every test in its own process). Tests sharing it must not
/// interfere: each one works in namespaces of its own ([`unique`]).
pub fn shared() -> Arc<Server> {
    let mut guard = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = guard.upgrade() {
        return s;
    }
    let s = Arc::new(Server::start());
    *guard = Arc::downgrade(&s);
    s
}

static SHARED_APISERVER: Mutex<Weak<Server>> = Mutex::new(Weak::new());

/// Like [`shared`], for `kustos apiserver` ([`Server::start_apiserver`]).
pub fn shared_apiserver() -> Arc<Server> {
    let mut guard = SHARED_APISERVER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = guard.upgrade() {
        return s;
    }
    let s = Arc::new(Server::start_apiserver());
    *guard = Arc::downgrade(&s);
    s
}

/// A name unique within this test process: `prefix-<pid>-<n>`, a valid DNS label.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{prefix}-{}-{n}", std::process::id())
}

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kustos"))
}

/// The storage backend the suites run against: `"sqlite"` or `"etcd"`, from
/// `KUSTOS_TEST_STORAGE` (see the top of this file). Panics on any other value, and on
/// `etcd` without `KUSTOS_TEST_ETCD_SERVERS`: a misconfigured run must not pass quietly on
/// the wrong backend.
pub fn storage_backend() -> &'static str {
    storage_env().0
}

/// `KUSTOS_TEST_STORAGE` and `KUSTOS_TEST_ETCD_SERVERS`, checked once.
fn storage_env() -> &'static (&'static str, Option<String>) {
    static ENV: std::sync::OnceLock<(&'static str, Option<String>)> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let storage = std::env::var("KUSTOS_TEST_STORAGE").ok();
        let servers = std::env::var("KUSTOS_TEST_ETCD_SERVERS").ok().filter(|s| !s.trim().is_empty());
        match decide_storage(storage.as_deref(), servers) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    })
}

/// The backend and etcd servers for the values of `KUSTOS_TEST_STORAGE` and
/// `KUSTOS_TEST_ETCD_SERVERS` (an empty one counts as unset).
pub fn decide_storage(
    storage: Option<&str>,
    etcd_servers: Option<String>,
) -> Result<(&'static str, Option<String>), String> {
    match storage {
        None | Some("sqlite") => Ok(("sqlite", None)),
        Some("etcd") => match etcd_servers {
            Some(servers) => Ok(("etcd", Some(servers))),
            None => Err("KUSTOS_TEST_STORAGE=etcd needs KUSTOS_TEST_ETCD_SERVERS (e.g. http://127.0.0.1:2379, \
                         the etcd the servers store their objects in); `bash scripts/test.sh` starts one"
                .to_string()),
        },
        Some(other) => Err(format!("KUSTOS_TEST_STORAGE={other:?}: expected sqlite or etcd (or unset for sqlite)")),
    }
}

/// The storage flags to add to a server started with `args` on `backend` (as
/// [`decide_storage`] answers), with `prefix` as its etcd prefix: none when the test chose
/// `--storage` itself or the backend is SQLite.
pub fn storage_flags(args: &[String], backend: &(&str, Option<String>), prefix: &str) -> Vec<String> {
    if args.iter().any(|a| a == "--storage" || a.starts_with("--storage=")) {
        return Vec::new();
    }
    match backend {
        ("etcd", Some(servers)) => ["--storage", "etcd", "--etcd-servers", servers, "--etcd-prefix", prefix]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// [`storage_flags`] for this run's backend, with a fresh prefix, and that prefix when the
/// flags use it.
fn storage_args(args: &[String]) -> (Vec<String>, Option<String>) {
    let prefix = unique_etcd_prefix();
    let flags = storage_flags(args, storage_env(), &prefix);
    let used = flags.iter().any(|f| f == "--etcd-prefix");
    (flags, used.then_some(prefix))
}

/// `/kustos-e2e/<pid>-<ns since the epoch>-<n>`: unique across every test process of a run
/// on the one etcd (a pid alone may come back during a run).
fn unique_etcd_prefix() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("/kustos-e2e/{}-{nanos}-{n}", std::process::id())
}

/// A reqwest client that trusts only the CA `ca_der` and presents no client certificate.
pub fn client_trusting_only(ca_der: &[u8]) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_der(ca_der).expect("a CA certificate"))
        .timeout(Duration::from_secs(10))
        .no_proxy()
        .build()
        .expect("building a client")
}

impl Server {
    /// `kustos server --data-dir D --secure-port 0` in a fresh temporary directory.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Like [`Server::start`], with extra command-line arguments.
    pub fn start_with(args: &[&str]) -> Server {
        Server::launch("server", args)
    }

    /// `kustos apiserver` (no controllers: nothing but the client writes objects), for the
    /// suites that check API machinery to the object.
    pub fn start_apiserver() -> Server {
        Server::launch("apiserver", &[])
    }

    /// Like [`Server::start_apiserver`], with extra command-line arguments.
    pub fn apiserver_with(args: &[&str]) -> Server {
        Server::launch("apiserver", args)
    }

    /// Like [`Server::start_with`], under a hard memory limit.
    pub fn start_limited(args: &[&str], limit: MemoryLimit) -> Server {
        let tmp = tempfile::Builder::new().prefix("kustos-e2e-").tempdir().expect("creating a temporary directory");
        let data_dir = tmp.path().join("data");
        Server::launch_at("server", tmp, data_dir, args, Some(limit))
    }

    fn launch(subcommand: &'static str, args: &[&str]) -> Server {
        let tmp = tempfile::Builder::new().prefix("kustos-e2e-").tempdir().expect("creating a temporary directory");
        let data_dir = tmp.path().join("data");
        Server::launch_at(subcommand, tmp, data_dir, args, None)
    }

    /// Start `kustos <subcommand>` on `data_dir`, with logs and kubectl's cache in `tmp`,
    /// adding the storage flags of the run ([`storage_flags`]).
    fn launch_at(
        subcommand: &'static str,
        tmp: tempfile::TempDir,
        data_dir: PathBuf,
        args: &[&str],
        limit: Option<MemoryLimit>,
    ) -> Server {
        let extra_args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (storage_args, etcd_prefix) = storage_args(&extra_args);
        let all_args: Vec<String> = storage_args.iter().chain(&extra_args).cloned().collect();
        let (child, addr, kubeconfig) = spawn(subcommand, tmp.path(), &data_dir, &all_args, 0, limit.as_ref());
        let server = Server {
            url: format!("https://{addr}"),
            addr,
            kubeconfig,
            data_dir,
            child: Mutex::new(Some(child)),
            tmp,
            extra_args,
            subcommand,
            runs: 0,
            etcd_prefix,
            storage_args,
            limit,
        };
        if server.etcd_prefix.is_some() {
            // Started on etcd: nothing may have opened the SQLite store instead.
            let db = server.data_dir.join("kustos.db");
            assert!(!db.exists(), "the server was given --storage etcd but created {}", db.display());
        }
        server
    }

    /// The directory holding the data dir, logs and kubectl's cache.
    pub fn work_dir(&self) -> &Path {
        self.tmp.path()
    }

    /// The process id of the running server.
    pub fn pid(&self) -> u32 {
        let guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|c| c.id()).expect("the server is not running")
    }

    /// GET `path` as the admin until the object satisfies `done`, every 100 ms for at most
    /// `wait`; returns it. Fails naming `what`, with the last reply and the server's log.
    pub async fn wait_for_object(
        &self,
        path: &str,
        what: &str,
        wait: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        let mut last = Value::Null;
        for _ in 0..(wait.as_millis() / 100).max(1) {
            let r = send(self.http().get(format!("{}{path}", self.url))).await;
            if r.code == 200 && done(&r.body) {
                return r.body;
            }
            last = r.body;
            if start.elapsed() > wait {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{path}: {what} did not happen within {wait:?}; last seen: {last}\nserver log:\n{}", self.stderr_tail());
    }

    /// SIGKILL the server and reap it, without any chance to clean up.
    pub fn kill9(&self) {
        kill9_child(&self.child);
    }

    /// SIGTERM the server and wait (bounded) for it to exit; returns its exit status.
    /// Panics if it has not exited after `within`.
    pub fn terminate(&self, within: Duration) -> std::process::ExitStatus {
        terminate_child(&self.child, within, "kustos", || tail(&self.stderr_log(self.runs), 4000))
    }

    /// Start the server again on the same data dir (and etcd prefix), on a new free port.
    /// Any running instance is killed first.
    pub fn restart(&mut self) {
        self.kill9();
        self.runs += 1;
        let all_args: Vec<String> = self.storage_args.iter().chain(&self.extra_args).cloned().collect();
        let (child, addr, kubeconfig) =
            spawn(self.subcommand, self.tmp.path(), &self.data_dir, &all_args, self.runs, self.limit.as_ref());
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        self.url = format!("https://{addr}");
        self.addr = addr;
        self.kubeconfig = kubeconfig;
    }

    fn stderr_log(&self, run: u32) -> PathBuf {
        self.tmp.path().join(format!("stderr-{run}.log"))
    }

    /// The server's stderr (logs) of the current run, for failure messages.
    pub fn stderr_tail(&self) -> String {
        tail(&self.stderr_log(self.runs), 4000)
    }

    /// All of the server's stderr (logs) of the current run, to look for a line in.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_log(self.runs)).unwrap_or_default()
    }

    // ---------------------------------------------------------------- kubectl

    /// `kubectl --kubeconfig <admin> <args>`, bounded by [`KUBECTL_TIMEOUT`].
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_stdin(args, None)
    }

    /// Like [`Server::kubectl`] and panics, with both outputs, unless it succeeded;
    /// returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        succeeded(&format!("kubectl {}", args.join(" ")), self.kubectl(args))
    }

    /// kubectl with `stdin` fed to it (for `-f -`).
    pub fn kubectl_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.kubectl_command(args);
        run_bounded(&mut cmd, stdin, KUBECTL_TIMEOUT, &format!("kubectl {}", args.join(" ")))
    }

    /// A `kubectl` command with the admin kubeconfig and a private cache dir, not started.
    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        ensure_kubectl();
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.tmp.path().join("kubectl-cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", self.tmp.path());
        cmd
    }

    /// The kubectl binary `bin` (see [`kubectl_version`]) with the admin kubeconfig and a cache
    /// dir of its own, fed `stdin`, bounded by [`KUBECTL_TIMEOUT`].
    pub fn kubectl_bin(&self, bin: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let cache = self.tmp.path().join(format!("{}-cache", unique("kc")));
        let mut cmd = Command::new(bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(cache)
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", self.tmp.path());
        run_bounded(&mut cmd, stdin, KUBECTL_TIMEOUT, &format!("{bin:?} {}", args.join(" ")))
    }

    // ---------------------------------------------------------------- raw HTTPS

    /// The cluster CA, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        let kc = self.kubeconfig_value();
        let cluster = &kc["clusters"][0]["cluster"];
        if let Some(data) = cluster["certificate-authority-data"].as_str() {
            return b64(data);
        }
        if let Some(path) = cluster["certificate-authority"].as_str() {
            return std::fs::read(path).expect("reading the kubeconfig's certificate-authority");
        }
        std::fs::read(self.data_dir.join("pki/ca.crt")).expect("reading DIR/pki/ca.crt")
    }

    /// The admin client certificate and key, PEM, as the kubeconfig has them.
    pub fn admin_identity_pem(&self) -> (Vec<u8>, Vec<u8>) {
        let kc = self.kubeconfig_value();
        let user = &kc["users"][0]["user"];
        let cert = match (user["client-certificate-data"].as_str(), user["client-certificate"].as_str()) {
            (Some(d), _) => b64(d),
            (None, Some(p)) => std::fs::read(p).expect("reading the kubeconfig's client-certificate"),
            _ => panic!("admin kubeconfig has no client certificate: {kc}"),
        };
        let key = match (user["client-key-data"].as_str(), user["client-key"].as_str()) {
            (Some(d), _) => b64(d),
            (None, Some(p)) => std::fs::read(p).expect("reading the kubeconfig's client-key"),
            _ => panic!("admin kubeconfig has no client key: {kc}"),
        };
        (cert, key)
    }

    fn kubeconfig_value(&self) -> Value {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("reading the admin kubeconfig");
        serde_yaml::from_str(&text).expect("the admin kubeconfig is YAML")
    }

    /// A reqwest client that trusts only the cluster CA and presents the admin client cert.
    pub fn http(&self) -> reqwest::Client {
        let (cert, key) = self.admin_identity_pem();
        let mut pem = key;
        pem.push(b'\n');
        pem.extend_from_slice(&cert);
        let id = reqwest::Identity::from_pem(&pem).expect("admin identity PEM");
        self.http_builder().identity(id).build().expect("building the admin HTTP client")
    }

    /// A reqwest client that trusts the cluster CA and presents no client certificate.
    pub fn anonymous(&self) -> reqwest::Client {
        self.http_builder().build().expect("building the anonymous HTTP client")
    }

    /// A reqwest client trusting the cluster CA and presenting the given identity
    /// (PEM key + certificate chain).
    pub fn http_with_identity(&self, key_and_cert_pem: &[u8]) -> reqwest::Client {
        let id = reqwest::Identity::from_pem(key_and_cert_pem).expect("identity PEM");
        self.http_builder().identity(id).build().expect("building an HTTP client")
    }

    fn http_builder(&self) -> reqwest::ClientBuilder {
        // Every CA of the bundle (during a CA rotation it holds two), as client-go reads it.
        let cas = reqwest::Certificate::from_pem_bundle(&self.ca_pem()).expect("cluster CA PEM");
        let mut builder = reqwest::Client::builder().use_rustls_tls().tls_built_in_root_certs(false);
        for ca in cas {
            builder = builder.add_root_certificate(ca);
        }
        builder.timeout(HTTP_TIMEOUT).no_proxy()
    }

    /// A kube-rs client from the admin kubeconfig, used as is.
    pub async fn kube_client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kube-rs reads the admin kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube-rs accepts the admin kubeconfig");
        kube::Client::try_from(cfg).expect("building the kube-rs client")
    }

    /// Create a namespace with a unique name (through raw HTTPS) and return its name.
    pub async fn create_namespace(&self, prefix: &str) -> String {
        let name = unique(prefix);
        let resp = self
            .http()
            .post(format!("{}/api/v1/namespaces", self.url))
            .json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
            .send()
            .await
            .expect("POST namespace");
        let code = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert_eq!(code.as_u16(), 201, "creating namespace {name}: {body}");
        name
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Spawn the binary and wait (bounded) for both ready lines. Returns child, addr, kubeconfig.
fn spawn(
    subcommand: &str,
    work: &Path,
    data_dir: &Path,
    extra: &[String],
    run: u32,
    limit: Option<&MemoryLimit>,
) -> (Child, String, PathBuf) {
    let stderr_path = work.join(format!("stderr-{run}.log"));
    let stderr = std::fs::File::create(&stderr_path).expect("creating the stderr log");
    let mut cmd = match limit {
        None => Command::new(binary()),
        Some(limit) => {
            ensure_prlimit();
            let mut cmd = Command::new("prlimit");
            cmd.arg(format!("--as={}", limit.address_space)).arg("--").arg(binary());
            cmd.envs(limit.env.iter().map(|(k, v)| (k, v)));
            cmd
        }
    };
    cmd.arg(subcommand)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--secure-port")
        .arg("0")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr));
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawning {}: {e}", binary().display()));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        // Keep draining stdout for the child's whole life so it never blocks on a full pipe.
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    let mut url: Option<String> = None;
    let mut kubeconfig: Option<PathBuf> = None;
    let mut seen = Vec::new();
    while url.is_none() || kubeconfig.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix("kustos is serving on ") {
                    url = Some(rest.trim().to_string());
                } else if let Some(rest) = line.strip_prefix("admin kubeconfig: ") {
                    kubeconfig = Some(PathBuf::from(rest.trim()));
                }
                seen.push(line);
            }
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!(
                    "kustos server did not print its ready lines ({}; {e:?}); exit status {status:?}\n\
                     stdout so far:\n{}\nstderr tail:\n{}",
                    if matches!(e, mpsc::RecvTimeoutError::Timeout) { "timed out after 30 s" } else { "stdout closed" },
                    seen.join("\n"),
                    tail(&stderr_path, 4000)
                );
            }
        }
    }
    let url = url.unwrap_or_default();
    let addr = url.strip_prefix("https://").unwrap_or_else(|| panic!("serving URL is not https: {url}")).to_string();
    let mut kubeconfig = kubeconfig.unwrap_or_default();
    if kubeconfig.is_relative() {
        kubeconfig = std::env::current_dir().expect("cwd").join(kubeconfig);
    }
    assert!(kubeconfig.exists(), "the printed admin kubeconfig {} does not exist", kubeconfig.display());
    (child, addr, kubeconfig)
}

fn tail(path: &Path, max: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s.trim()).expect("base64 in the kubeconfig")
}

/// Bound for one run of the `kustos` CLI.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// `kustos <args>` (the binary under test) run to completion, bounded by [`CLI_TIMEOUT`],
/// without `$KUBECONFIG` from the environment.
pub fn kustos(args: &[&str]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.args(args).env_remove("KUBECONFIG");
    run_bounded(&mut cmd, None, CLI_TIMEOUT, &format!("kustos {}", args.join(" ")))
}

/// `kustos <args>`, which must succeed; returns stdout.
pub fn kustos_ok(args: &[&str]) -> String {
    succeeded(&format!("kustos {}", args.join(" ")), kustos(args))
}

/// The stdout of a command that must have succeeded; otherwise panics with `what`, the
/// exit status and both outputs.
pub fn succeeded(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Panics with a clear message when `kubectl` cannot be run: the tests must fail loudly.
/// `kubectl.<version>` beside the real kubectl binary (this machine has 1.27 to 1.33 there).
/// Fails loudly when it is missing.
pub fn kubectl_version(version: &str) -> PathBuf {
    ensure_kubectl();
    let out = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v kubectl)\""])
        .output()
        .unwrap_or_else(|e| panic!("cannot locate kubectl: {e}"));
    let resolved = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let dir = resolved.parent().unwrap_or_else(|| panic!("kubectl resolves to {resolved:?}, which has no directory"));
    let kubectl = dir.join(format!("kubectl.{version}"));
    assert!(kubectl.is_file(), "{kubectl:?} is missing: this test drives kubectl {version}");
    kubectl
}

pub fn ensure_kubectl() {
    static CHECKED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    CHECKED.get_or_init(|| match Command::new("kubectl").args(["version", "--client"]).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`kubectl version --client` failed: {}; the end-to-end tests need kubectl (v1.32) on PATH",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "kubectl is not on PATH ({e}); the end-to-end tests drive the server with kubectl v1.32: install it \
             and run `bash scripts/test.sh`"
        ),
    });
}

/// Run a command to completion, with an optional stdin, killing it after `timeout`.
pub fn run_bounded(cmd: &mut Command, stdin: Option<&str>, timeout: Duration, what: &str) -> Output {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("running {what}: {e}"));
    if let Some(input) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().expect("piped stdin");
        let input = input.to_string();
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let mut out_pipe = child.stdout.take().expect("piped stdout");
    let mut err_pipe = child.stderr.take().expect("piped stderr");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for a child") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out_t.join().unwrap_or_default();
            let stderr = err_t.join().unwrap_or_default();
            panic!(
                "{what} did not finish within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    Output { status, stdout, stderr }
}

// -------------------------------------------------------------------- HTTP helpers

/// A finished HTTP exchange: status code, headers, and the body (JSON when it parses,
/// else a JSON string holding the text).
pub struct Reply {
    pub code: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// Panics unless the code is `code`, showing the body.
    pub fn expect_code(&self, code: u16, what: &str) -> &Self {
        assert_eq!(self.code, code, "{what}: expected HTTP {code}, got {} with body {}", self.code, self.text);
        self
    }
}

/// Send a request and collect the whole reply.
pub async fn send(req: reqwest::RequestBuilder) -> Reply {
    let resp = req.send().await.expect("sending the request");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("reading the response body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(text.clone()));
    Reply { code, headers, body, text }
}

/// Asserts that `reply` is the HTTP code `code` with a `metav1.Status` body (kind Status,
/// apiVersion v1, status Failure, matching code and, when given, reason).
pub fn assert_status(reply: &Reply, code: u16, reason: Option<&str>, what: &str) {
    assert_eq!(reply.code, code, "{what}: expected HTTP {code}, got {} with body {}", reply.code, reply.text);
    let b = &reply.body;
    assert_eq!(b["kind"], "Status", "{what}: body is not a Status: {}", reply.text);
    assert_eq!(b["apiVersion"], "v1", "{what}: Status apiVersion: {}", reply.text);
    assert_eq!(b["status"], "Failure", "{what}: Status.status: {}", reply.text);
    assert_eq!(b["code"].as_u64(), Some(code as u64), "{what}: Status.code: {}", reply.text);
    if let Some(r) = reason {
        assert_eq!(b["reason"], r, "{what}: Status.reason: {}", reply.text);
    }
}

/// Reads a watch response one JSON document per `\n`-terminated line.
pub struct WatchLines {
    resp: reqwest::Response,
    buf: Vec<u8>,
    pub code: u16,
    pub headers: reqwest::header::HeaderMap,
}

impl WatchLines {
    pub async fn open(req: reqwest::RequestBuilder) -> WatchLines {
        let resp = req.send().await.expect("opening the watch");
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        WatchLines { resp, buf: Vec::new(), code, headers }
    }

    /// The next event, `None` at the end of the stream. Panics after `within` with no
    /// complete line.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                return Some(
                    serde_json::from_slice(line)
                        .unwrap_or_else(|e| panic!("watch line is not JSON ({e}): {}", String::from_utf8_lossy(line))),
                );
            }
            let chunk = match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(c) => c.expect("reading the watch stream"),
                Err(_) => {
                    panic!("no watch event within {within:?}; partial data: {}", String::from_utf8_lossy(&self.buf))
                }
            };
            match chunk {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => {
                    if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
                        return None;
                    }
                    let rest = std::mem::take(&mut self.buf);
                    return Some(serde_json::from_slice(&rest).unwrap_or_else(|e| {
                        panic!("last watch data is not JSON ({e}): {}", String::from_utf8_lossy(&rest))
                    }));
                }
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn next_non_bookmark(&mut self, within: Duration) -> Option<Value> {
        for _ in 0..1000 {
            let ev = self.next(within).await?;
            if ev["type"] != "BOOKMARK" {
                return Some(ev);
            }
        }
        panic!("more than 1000 bookmarks in a row");
    }
}

/// A ConfigMap body.
pub fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// A user of the cluster: a kubeconfig for kubectl and a PEM identity for raw HTTPS.
pub struct User {
    pub name: String,
    pub kubeconfig: PathBuf,
    /// Client key and certificate, PEM (empty for token and anonymous users).
    pub identity: Vec<u8>,
    pub cache_dir: PathBuf,
}

pub fn issue_user(s: &Server, name: &str, groups: &[&str]) -> User {
    let pki = s.data_dir.join("pki");
    let ca_crt = std::fs::read_to_string(pki.join("ca.crt")).expect("reading ca.crt");
    let ca_key = std::fs::read_to_string(pki.join("ca.key")).expect("reading ca.key");
    let ca = kustos_ca::Ca::from_pem(&ca_crt, &ca_key).expect("loading the cluster CA");
    let params = kustos_ca::IssueParams::client(
        name,
        groups.iter().map(|g| g.to_string()).collect(),
        chrono::Duration::hours(2),
    );
    let issued = ca.issue(params, chrono::Utc::now()).expect("issuing a client certificate");
    let key_pem = issued.key_pem.clone().expect("a generated key");
    let yaml = kustos_apiserver::pki::kubeconfig_yaml(
        &s.url,
        &ca_crt,
        name,
        kustos_apiserver::pki::KubeconfigAuth::ClientCert {
            cert_pem: issued.cert_pem.clone(),
            key_pem: key_pem.clone(),
        },
    );
    let file = unique(name);
    let kubeconfig = s.work_dir().join(format!("{file}.kubeconfig"));
    std::fs::write(&kubeconfig, yaml).expect("writing the user kubeconfig");
    let mut identity = key_pem.into_bytes();
    identity.push(b'\n');
    identity.extend_from_slice(issued.cert_pem.as_bytes());
    User { name: name.to_string(), kubeconfig, identity, cache_dir: s.work_dir().join(format!("{file}-cache")) }
}

impl User {
    /// `kubectl <args>` as this user, not started (e.g. to feed it stdin).
    pub fn command(&self, s: &Server, args: &[&str]) -> Command {
        ensure_kubectl();
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", s.work_dir());
        cmd
    }

    pub fn kubectl(&self, s: &Server, args: &[&str]) -> Output {
        let mut cmd = self.command(s, args);
        run_bounded(&mut cmd, None, KUBECTL_TIMEOUT, &format!("kubectl (as {}) {}", self.name, args.join(" ")))
    }

    pub fn kubectl_ok(&self, s: &Server, args: &[&str]) -> String {
        succeeded(&format!("kubectl (as {}) {}", self.name, args.join(" ")), self.kubectl(s, args))
    }

    /// Runs kubectl, expects failure, returns stderr.
    pub fn kubectl_err(&self, s: &Server, args: &[&str]) -> String {
        let out = self.kubectl(s, args);
        assert!(
            !out.status.success(),
            "kubectl (as {}) {} should have failed; stdout:\n{}",
            self.name,
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// A user authenticating with a bearer token (`name` only names the kubeconfig).
pub fn token_user(s: &Server, name: &str, token: &str) -> User {
    let ca_crt = std::fs::read_to_string(s.data_dir.join("pki/ca.crt")).expect("reading ca.crt");
    let yaml = kustos_apiserver::pki::kubeconfig_yaml(
        &s.url,
        &ca_crt,
        name,
        kustos_apiserver::pki::KubeconfigAuth::Token(token.to_string()),
    );
    user_with_kubeconfig(s, name, &yaml, Vec::new())
}

fn user_with_kubeconfig(s: &Server, name: &str, yaml: &str, identity: Vec<u8>) -> User {
    let file = unique("user");
    let kubeconfig = s.work_dir().join(format!("{file}.kubeconfig"));
    std::fs::write(&kubeconfig, yaml).expect("writing the user kubeconfig");
    User { name: name.to_string(), kubeconfig, identity, cache_dir: s.work_dir().join(format!("{file}-cache")) }
}

// -------------------------------------------------------------------- controller-manager

/// A running `kustos controller-manager` child process (killed on drop) and the address of
/// its health and metrics server.
pub struct ControllerManager {
    child: Mutex<Option<Child>>,
    /// `https://127.0.0.1:PORT` (`--bind-address 127.0.0.1 --secure-port 0`, as printed).
    pub url: String,
    log: PathBuf,
    /// The admin's client key and certificate (PEM), which [`ControllerManager::get`] shows.
    admin: Vec<u8>,
}

/// The credentials of a request to the controller-manager's secure port.
pub enum Credentials<'a> {
    None,
    Token(&'a str),
    /// Client key and certificate, PEM.
    Identity(&'a [u8]),
}

impl ControllerManager {
    /// `kustos controller-manager --kubeconfig <admin of s> --bind-address 127.0.0.1
    /// --secure-port 0 --client-ca-file <s's CA> <args>`; waits (bounded) for the line naming
    /// the secure address.
    pub fn start(s: &Server, args: &[&str]) -> ControllerManager {
        ControllerManager::start_with_kubeconfig(s, &s.kubeconfig, args)
    }

    /// Like [`ControllerManager::start`], with another kubeconfig. `--client-ca-file` is left
    /// out when `args` name one or pass `--authentication-skip-lookup=false` (the lookup).
    pub fn start_with_kubeconfig(s: &Server, kubeconfig: &Path, args: &[&str]) -> ControllerManager {
        let log = s.work_dir().join(format!("{}.log", unique("controller-manager")));
        let stderr = std::fs::File::create(&log).expect("creating the controller-manager log");
        let own_ca =
            args.iter().any(|a| a.starts_with("--client-ca-file") || *a == "--authentication-skip-lookup=false");
        let client_ca = s.data_dir.join("pki/ca.crt");
        let client_ca_args: Vec<&OsStr> =
            if own_ca { Vec::new() } else { vec![OsStr::new("--client-ca-file"), client_ca.as_os_str()] };
        let mut child = Command::new(binary())
            .arg("controller-manager")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--bind-address", "127.0.0.1", "--secure-port", "0"])
            .args(client_ca_args)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", binary().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        const PREFIX: &str = "kustos controller-manager serving health and metrics on ";
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.starts_with(PREFIX) => {
                let (cert, key) = s.admin_identity_pem();
                let admin = [key, b"\n".to_vec(), cert].concat();
                let url = line[PREFIX.len()..].trim().to_string();
                ControllerManager { child: Mutex::new(Some(child)), url, log, admin }
            }
            other => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!(
                    "kustos controller-manager did not print its metrics address ({other:?}); exit status \
                     {status:?}\nstderr tail:\n{}",
                    tail(&log, 4000)
                );
            }
        }
    }

    /// The controller-manager's stderr (logs), for failure messages.
    pub fn stderr_tail(&self) -> String {
        tail(&self.log, 6000)
    }

    /// Everything the controller-manager wrote on stderr (its logs).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).expect("reading the controller-manager log")
    }

    /// SIGKILL it and reap it, without any chance to clean up.
    pub fn kill9(&self) {
        kill9_child(&self.child);
    }

    /// SIGTERM it and wait (bounded) for it to exit; its exit status. Panics if it has not
    /// exited after `within`.
    pub fn terminate(&self, within: Duration) -> std::process::ExitStatus {
        terminate_child(&self.child, within, "the controller-manager", || self.stderr_tail())
    }

    /// `GET <url><path>` as the admin (`system:masters`, allowed without a review): (status,
    /// body). The serving certificate is self-signed, so it is not verified.
    pub async fn get(&self, path: &str) -> (u16, String) {
        self.get_as(path, Credentials::Identity(&self.admin)).await
    }

    /// `GET <url><path>` with these credentials: (status, body).
    pub async fn get_as(&self, path: &str, credentials: Credentials<'_>) -> (u16, String) {
        let mut client = reqwest::Client::builder()
            .use_rustls_tls()
            .danger_accept_invalid_certs(true)
            .timeout(HTTP_TIMEOUT)
            .no_proxy();
        if let Credentials::Identity(pem) = credentials {
            client = client.identity(reqwest::Identity::from_pem(pem).expect("a client identity PEM"));
        }
        let mut req = client.build().expect("an HTTP client").get(format!("{}{path}", self.url));
        if let Credentials::Token(token) = credentials {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let code = resp.status().as_u16();
        (code, resp.text().await.unwrap_or_default())
    }

    /// The value of the sample `series` (name and labels exactly as exposed) in `/metrics`;
    /// `None` when it is not there.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (code, text) = self.get("/metrics").await;
        assert_eq!(code, 200, "GET /metrics: {text}");
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// SIGKILL the child in `slot` (if any) and reap it.
fn kill9_child(slot: &Mutex<Option<Child>>) {
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(mut child) = guard.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// SIGTERM the child in `slot` and wait (bounded) for it to exit; its exit status. Past
/// `within` it is killed and the test fails with `logs()`.
fn terminate_child(
    slot: &Mutex<Option<Child>>,
    within: Duration,
    what: &str,
    logs: impl Fn() -> String,
) -> std::process::ExitStatus {
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = guard.take().unwrap_or_else(|| panic!("{what} is not running"));
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().expect("running kill -TERM");
    assert!(status.success(), "kill -TERM {} failed", child.id());
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().expect("waiting for a child process") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {within:?} after SIGTERM; stderr tail:\n{}", logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Server {
    /// `kustos <subcommand> --data-dir <data_dir> --secure-port 0 <args>` on a data dir that
    /// already exists: one whose `pki/` was copied from another server's (several apiservers
    /// on one etcd), or one a stopped server used. Logs and kubectl's cache go to a temporary
    /// directory of its own; `data_dir` is left in place on drop. Without `--storage` in
    /// `args`, the run's backend applies as for [`Server::start_with`]: on etcd that is a
    /// fresh prefix, so to reach a stopped server's objects pass its storage flags (or use
    /// [`Server::restart`]).
    pub fn launch_in(subcommand: &'static str, data_dir: &Path, args: &[&str]) -> Server {
        let tmp = tempfile::Builder::new().prefix("kustos-e2e-").tempdir().expect("creating a temporary directory");
        Server::launch_at(subcommand, tmp, data_dir.to_path_buf(), args, None)
    }
}

/// Panics with a clear message when util-linux's `prlimit` cannot be run.
fn ensure_prlimit() {
    static CHECKED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    CHECKED.get_or_init(|| match Command::new("prlimit").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        other => panic!(
            "`prlimit --version` failed ({other:?}): the memory-limited tests start the server under util-linux's \
             prlimit; install util-linux"
        ),
    });
}
