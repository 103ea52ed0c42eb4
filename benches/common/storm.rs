//! The bootstrap storm shared by `bootstrap_storm` and `apf_storm`: N simulated kubelets do
//! the TLS bootstrap flow at the same time, each on TLS connections of its own, as a kubelet
//! does it:
//! 1. create a CertificateSigningRequest for `system:node:<name>` (signer
//!    `kubernetes.io/kube-apiserver-client-kubelet`, a P-256 key) with a bootstrap token;
//! 2. list and then watch that CSR by name (`fieldSelector=metadata.name=<name>`) until
//!    `status.certificate` is set;
//! 3. open a second connection with the issued certificate and ask who it is
//!    (SelfSubjectReview), which must answer `system:node:<name>` in `system:nodes`.
//!
//! Every request that is answered 429 with a `Retry-After` of whole seconds is sent again after
//! that many seconds, as client-go does (at most [`MAX_RETRIES_PER_STEP`] times per step); the
//! retries are counted. Any other failure fails the node's flow.
//!
//! [`bench`] runs the whole benchmark against a `kustos server` it starts (used by
//! `bootstrap_storm` and `storage_backends`); `apf_storm` drives [`run`] itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use futures::StreamExt as _;
use serde_json::{json, Value};

use super::{admin_client, ca_pem, cpu_time, env_u64, ms, pct, peak_rss_kib, rss_kib, scrape, start, work};

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// How many times one step (one request) is sent again after a 429 before the flow fails.
pub const MAX_RETRIES_PER_STEP: u32 = 100;

/// What to do with a response.
#[derive(Debug, PartialEq)]
pub enum Retry {
    /// Use the response as it is (success or an error for the caller to report).
    No,
    /// Send the request again after this long.
    After(Duration),
    /// Too many retries already: the step fails with this message.
    GiveUp(String),
}

/// The retry decision for one response, as client-go makes it for 429: only with a
/// `Retry-After` header holding whole seconds (without one client-go does not retry either),
/// and at most `max` times per request.
pub fn after_429(status: u16, retry_after: Option<&str>, retried: u32, max: u32) -> Retry {
    if status != 429 {
        return Retry::No;
    }
    let Some(secs) = retry_after.and_then(|v| v.parse::<u64>().ok()) else {
        return Retry::No;
    };
    if retried >= max {
        return Retry::GiveUp(format!("HTTP 429 after {retried} retries"));
    }
    Retry::After(Duration::from_secs(secs))
}

/// Send the request made by `make`, again after every 429 that [`after_429`] says to retry;
/// `retries` counts those retries.
pub async fn send_retrying<F>(what: &str, retries: &mut u32, make: F) -> Result<reqwest::Response, String>
where
    F: Fn() -> reqwest::RequestBuilder,
{
    let mut step = 0;
    loop {
        let r = make().send().await.map_err(|e| format!("{what}: {e}"))?;
        let header = r.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok());
        match after_429(r.status().as_u16(), header, step, MAX_RETRIES_PER_STEP) {
            Retry::No => return Ok(r),
            Retry::After(d) => {
                // Read the body to the end so the connection stays usable.
                let _ = r.bytes().await;
                step += 1;
                *retries += 1;
                tokio::time::sleep(d).await;
            }
            Retry::GiveUp(why) => {
                let _ = r.bytes().await;
                return Err(format!("{what}: {why}"));
            }
        }
    }
}

/// One simulated node's key material, made before the storm.
pub struct Node {
    pub name: String,
    csr_pem: String,
    key_pem: String,
}

/// What one kubelet measured, from the moment it started its create.
pub struct Outcome {
    pub created: Duration,
    /// When it first saw Approved without a certificate (not seen when approval and signing
    /// both happened before its watch delivered anything).
    pub approved: Option<Duration>,
    pub certified: Duration,
    pub done: Duration,
}

/// One kubelet's result and how many of its requests were retried after a 429.
pub struct NodeResult {
    pub outcome: Result<Outcome, String>,
    pub retries_429: u32,
}

/// Keys and CSRs for `n` nodes named `storm-00000`, ….
pub fn prepare(n: u64) -> Result<Vec<Node>> {
    (0..n)
        .map(|i| {
            let name = format!("storm-{i:05}");
            let key = rcgen::KeyPair::generate()?;
            let mut params = rcgen::CertificateParams::default();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
            params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{name}"));
            let csr_pem = params.serialize_request(&key)?.pem()?;
            Ok(Node { name, csr_pem, key_pem: key.serialize_pem() })
        })
        .collect()
}

/// One bootstrap token for every node, as a kubeadm cluster has (`kubeadm join` with the
/// cluster's token): all the storm's requests before the certificate come from one user.
pub async fn create_bootstrap_token(admin: &reqwest::Client, url: &str) -> Result<String> {
    create_numbered_token(admin, url, 0).await
}

/// `count` bootstrap tokens (a token per rack, say): each is a user of its own, so each is a
/// flow of its own to flow control.
pub async fn create_bootstrap_tokens(admin: &reqwest::Client, url: &str, count: usize) -> Result<Vec<Arc<str>>> {
    let mut tokens = Vec::with_capacity(count);
    for i in 0..count.max(1) {
        tokens.push(create_numbered_token(admin, url, i).await?.into());
    }
    Ok(tokens)
}

/// Bootstrap token `storm<i>` (token ids are six characters: `i` < 10).
async fn create_numbered_token(admin: &reqwest::Client, url: &str, i: usize) -> Result<String> {
    if i > 9 {
        bail!("at most 10 bootstrap tokens (BENCH_TOKENS)");
    }
    let (id, secret) = (format!("storm{i}"), "0123456789abcdef");
    let expiration =
        (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let body = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id, "token-secret": secret, "expiration": expiration,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        },
    });
    let r = admin.post(format!("{url}/api/v1/namespaces/kube-system/secrets")).json(&body).send().await?;
    if r.status().as_u16() != 201 {
        bail!("creating the bootstrap token: HTTP {}: {}", r.status(), r.text().await.unwrap_or_default());
    }
    Ok(format!("{id}.{secret}"))
}

fn tls_client(ca: &reqwest::Certificate, identity: Option<reqwest::Identity>) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca.clone())
        .timeout(Duration::from_secs(600));
    if let Some(id) = identity {
        b = b.identity(id);
    }
    b.build().map_err(|e| format!("client: {e}"))
}

async fn json_of(r: reqwest::Response, want: u16, what: &str) -> Result<Value, String> {
    let code = r.status().as_u16();
    let body = r.bytes().await.map_err(|e| format!("{what}: reading the body: {e}"))?;
    if code != want {
        return Err(format!("{what}: HTTP {code}: {}", String::from_utf8_lossy(&body)));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{what}: {e}"))
}

/// The PEM certificate of a CSR object, once issued; Err when it failed or was denied.
fn issued(csr: &Value) -> Result<Option<String>, String> {
    for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
        if matches!(c["type"].as_str(), Some("Denied" | "Failed")) && c["status"] == "True" {
            return Err(format!("CSR {}: {}", c["type"], c["message"]));
        }
    }
    match csr["status"]["certificate"].as_str() {
        Some(b64) if !b64.is_empty() => {
            let pem = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("certificate: {e}"))?;
            String::from_utf8(pem).map(Some).map_err(|e| format!("certificate: {e}"))
        }
        _ => Ok(None),
    }
}

fn approved(csr: &Value) -> bool {
    csr["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Approved")
}

/// One simulated kubelet's whole flow.
pub async fn kubelet(url: Arc<str>, ca: reqwest::Certificate, token: Arc<str>, node: Node) -> NodeResult {
    let mut retries = 0;
    let outcome = flow(&url, &ca, &token, node, &mut retries).await;
    NodeResult { outcome, retries_429: retries }
}

async fn flow(
    url: &str,
    ca: &reqwest::Certificate,
    token: &str,
    node: Node,
    retries: &mut u32,
) -> Result<Outcome, String> {
    let t = Instant::now();
    let boot = tls_client(ca, None)?;
    let csrs = format!("{url}/apis/certificates.k8s.io/v1/certificatesigningrequests");
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": node.name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(&node.csr_pem),
            "signerName": SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    });
    let r = send_retrying("create", retries, || boot.post(&csrs).bearer_auth(token).json(&body)).await?;
    json_of(r, 201, "create").await?;
    let created = t.elapsed();

    let selector = format!("metadata.name={}", node.name);
    let r =
        send_retrying("list", retries, || boot.get(&csrs).bearer_auth(token).query(&[("fieldSelector", &selector)]))
            .await?;
    let list = json_of(r, 200, "list").await?;
    let mut approved_at = None;
    let mut cert = None;
    if let Some(item) = list["items"].as_array().and_then(|a| a.first()) {
        cert = issued(item)?;
    }
    if cert.is_none() {
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
        let r = send_retrying("watch", retries, || {
            boot.get(&csrs).bearer_auth(token).query(&[
                ("fieldSelector", selector.as_str()),
                ("watch", "true"),
                ("resourceVersion", rv.as_str()),
                ("timeoutSeconds", "600"),
            ])
        })
        .await?;
        if !r.status().is_success() {
            let code = r.status().as_u16();
            let body = r.bytes().await.unwrap_or_default();
            return Err(format!("watch: HTTP {code}: {}", String::from_utf8_lossy(&body)));
        }
        let mut stream = r.bytes_stream();
        let mut buf = Vec::new();
        'watch: while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk.map_err(|e| format!("watch: {e}"))?);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let ev: Value = serde_json::from_slice(&line).map_err(|e| format!("watch event: {e}"))?;
                if ev["type"] == "ERROR" {
                    return Err(format!("watch error: {}", ev["object"]));
                }
                if approved_at.is_none() && approved(&ev["object"]) {
                    approved_at = Some(t.elapsed());
                }
                if let Some(c) = issued(&ev["object"])? {
                    cert = Some(c);
                    break 'watch;
                }
            }
        }
    }
    let cert = cert.ok_or("the watch ended without a certificate")?;
    let certified = t.elapsed();
    drop(boot);

    // The node's own identity, on a new connection.
    let identity = reqwest::Identity::from_pem(format!("{cert}{}", node.key_pem).as_bytes())
        .map_err(|e| format!("identity: {e}"))?;
    let as_node = tls_client(ca, Some(identity))?;
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let reviews = format!("{url}/apis/authentication.k8s.io/v1/selfsubjectreviews");
    let r = send_retrying("whoami", retries, || as_node.post(&reviews).json(&review)).await?;
    let who = json_of(r, 201, "whoami").await?;
    let user = &who["status"]["userInfo"];
    let want = format!("system:node:{}", node.name);
    let in_nodes = user["groups"].as_array().into_iter().flatten().any(|g| g == "system:nodes");
    if user["username"] != want.as_str() || !in_nodes {
        return Err(format!("whoami with the issued certificate: {user}"));
    }
    Ok(Outcome { created, approved: approved_at, certified, done: t.elapsed() })
}

/// Run the storm: every node's flow as a task of its own, at most `concurrency` at a time,
/// within `timeout`. Returns every node's result and the wall time until the last was done.
pub async fn run(
    url: Arc<str>,
    ca: reqwest::Certificate,
    tokens: Vec<Arc<str>>,
    nodes: Vec<Node>,
    concurrency: usize,
    timeout: Duration,
) -> Result<(Vec<NodeResult>, Duration)> {
    let t0 = Instant::now();
    let results = tokio::time::timeout(
        timeout,
        futures::stream::iter(nodes.into_iter().enumerate())
            .map(|(i, node)| {
                // Node i uses token i mod the number of tokens.
                let token = tokens[i % tokens.len().max(1)].clone();
                let (url, ca) = (url.clone(), ca.clone());
                async move {
                    match tokio::spawn(kubelet(url, ca, token, node)).await {
                        Ok(r) => r,
                        Err(e) => NodeResult { outcome: Err(format!("task: {e}")), retries_429: 0 },
                    }
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the storm did not finish within {timeout:?}"))?;
    Ok((results, t0.elapsed()))
}

/// The storm's figures.
pub struct Summary {
    pub nodes: usize,
    pub certified: usize,
    /// Error messages (first 200 characters) and how often each happened.
    pub errors: BTreeMap<String, usize>,
    pub wall: Duration,
    pub retries_429: u64,
    /// Nodes with at least one 429 retry.
    pub nodes_retried: usize,
    /// Sorted latencies from each node's start.
    pub created: Vec<Duration>,
    pub approved: Vec<Duration>,
    pub certificate: Vec<Duration>,
    pub done: Vec<Duration>,
}

fn sorted(mut v: Vec<Duration>) -> Vec<Duration> {
    v.sort();
    v
}

impl Summary {
    pub fn of(results: Vec<NodeResult>, wall: Duration) -> Summary {
        let nodes = results.len();
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        let mut ok = Vec::new();
        let (mut retries_429, mut nodes_retried) = (0u64, 0usize);
        for r in results {
            retries_429 += u64::from(r.retries_429);
            nodes_retried += usize::from(r.retries_429 > 0);
            match r.outcome {
                Ok(o) => ok.push(o),
                Err(e) => *errors.entry(e.chars().take(200).collect()).or_default() += 1,
            }
        }
        Summary {
            nodes,
            certified: ok.len(),
            errors,
            wall,
            retries_429,
            nodes_retried,
            created: sorted(ok.iter().map(|o| o.created).collect()),
            approved: sorted(ok.iter().filter_map(|o| o.approved).collect()),
            certificate: sorted(ok.iter().map(|o| o.certified).collect()),
            done: sorted(ok.iter().map(|o| o.done).collect()),
        }
    }

    pub fn error_count(&self) -> usize {
        self.errors.values().sum()
    }

    /// Nodes certified per second of wall time.
    pub fn nodes_per_sec(&self) -> f64 {
        self.certified as f64 / self.wall.as_secs_f64().max(f64::EPSILON)
    }

    /// The table rows shared by the storm benchmarks, (measurement, result), the same rows
    /// for every run (errors: [`Summary::error_rows`]).
    pub fn rows(&self) -> Vec<(String, String)> {
        vec![
            ("nodes certified, errors".to_string(), format!("{}, {}", self.certified, self.error_count())),
            ("wall time, all flows done (incl. the call as the node)".into(), secs(self.wall)),
            ("nodes/s (certified / wall time)".into(), format!("{:.0}", self.nodes_per_sec())),
            (
                "requests retried after 429 + Retry-After (nodes with any)".into(),
                format!("{} ({})", self.retries_429, self.nodes_retried),
            ),
            ("time-to-certificate p50 / p99".into(), p50_p99(&self.certificate)),
            ("CSR create p50 / p99".into(), p50_p99(&self.created)),
            (
                format!(
                    "Approved first seen p50 / p99 ({} of {} saw it before the certificate)",
                    self.approved.len(),
                    self.certified
                ),
                p50_p99(&self.approved),
            ),
            ("whole flow incl. the node's first call p50 / p99".into(), p50_p99(&self.done)),
            ("last certificate after".into(), secs(self.certificate.last().copied().unwrap_or_default())),
        ]
    }

    /// One row per distinct error: ("error (Nx)", message).
    pub fn error_rows(&self) -> Vec<(String, String)> {
        self.errors.iter().map(|(e, count)| (format!("error ({count}x)"), e.replace('|', "\\|"))).collect()
    }
}

/// Sizes of one bootstrap-storm run.
#[derive(Debug, Clone)]
pub struct StormConfig {
    pub nodes: u64,
    /// Kubelets in flight at most.
    pub concurrency: usize,
    /// Longest the storm may take.
    pub timeout: Duration,
    /// Bootstrap tokens the nodes share out (node i uses token i mod `tokens`), 1 to 10.
    pub tokens: usize,
    /// `perf stat` events counted on the whole machine during the storm (BENCH_PERF_EVENTS,
    /// comma-separated: uprobes on the server's allocator, docs/BENCHMARKS.md).
    pub perf_events: Option<String>,
}

impl StormConfig {
    /// From BENCH_NODES (default `default_nodes`), BENCH_CONCURRENCY (default all at once),
    /// BENCH_TIMEOUT_SECS (default 300) and BENCH_TOKENS (default 1, as a kubeadm cluster).
    pub fn from_env(default_nodes: u64) -> Self {
        let nodes = env_u64("BENCH_NODES", default_nodes);
        StormConfig {
            nodes,
            concurrency: env_u64("BENCH_CONCURRENCY", nodes).max(1) as usize,
            tokens: env_u64("BENCH_TOKENS", 1).clamp(1, 10) as usize,
            timeout: Duration::from_secs(env_u64("BENCH_TIMEOUT_SECS", 300)),
            perf_events: std::env::var("BENCH_PERF_EVENTS").ok().filter(|e| !e.is_empty()),
        }
    }
}

/// What one storm against a server of its own measured.
pub struct StormFigures {
    pub config: StormConfig,
    pub summary: Summary,
    /// The server's CPU time during the storm.
    pub server_cpu: Duration,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    /// The store process's (etcd's) CPU time during the storm and its RSS after it, when one
    /// was given.
    pub store_cpu: Option<Duration>,
    pub store_rss_kib: Option<u64>,
    /// What the server's `/metrics` counted during the storm: its CPU seconds
    /// (`process_cpu_seconds_total`), certificates signed (`kustos_csr_signed_total`) and
    /// requests by verb, resource and code (`apiserver_request_total`), largest first.
    pub metrics_cpu: Option<Duration>,
    pub metrics_signed: Option<f64>,
    pub requests: Vec<(String, f64)>,
    /// Requests flow control rejected (`apiserver_flowcontrol_rejected_requests_total`) by
    /// priority level and reason, largest first.
    pub rejected: Vec<(String, f64)>,
    /// The work per node ([`work::rows`]): empty when `/metrics` could not be read.
    pub work: Vec<(String, String)>,
}

impl StormFigures {
    /// Server CPU time per node.
    pub fn cpu_per_node(&self) -> Duration {
        self.server_cpu / self.config.nodes.max(1) as u32
    }

    /// The `bootstrap_storm` benchmark's table rows, (measurement, result).
    pub fn rows(&self) -> Vec<(String, String)> {
        let c = &self.config;
        let mut rows = vec![("nodes (concurrency)".to_string(), format!("{} ({})", c.nodes, c.concurrency))];
        if c.tokens > 1 {
            rows.push(("bootstrap tokens (a flow each)".to_string(), c.tokens.to_string()));
        }
        rows.extend(self.summary.rows().into_iter().chain(self.summary.error_rows()));
        rows.push((
            "server CPU time during the storm (per node)".into(),
            format!("{} ({})", secs(self.server_cpu), ms(self.cpu_per_node())),
        ));
        rows.push((
            "server RSS after / peak".into(),
            format!("{:.1} MiB / {:.1} MiB", self.rss_kib as f64 / 1024.0, self.peak_rss_kib as f64 / 1024.0),
        ));
        if let Some(cpu) = self.metrics_cpu {
            rows.push(("server CPU time per /metrics (process_cpu_seconds_total)".into(), secs(cpu)));
        }
        if let Some(signed) = self.metrics_signed {
            rows.push(("certificates signed per /metrics (kustos_csr_signed_total)".into(), format!("{signed}")));
        }
        let nodes = self.config.nodes.max(1) as f64;
        let total: f64 = self.requests.iter().map(|(_, n)| n).sum();
        if total > 0.0 {
            // The six largest, and every answer that was not a success.
            let shown = self
                .requests
                .iter()
                .enumerate()
                .filter(|(i, (k, _))| *i < 6 || !k.ends_with(" 200") && !k.ends_with(" 201"));
            let top: Vec<String> = shown.map(|(_, (k, n))| format!("{k}: {:.3}", n / nodes)).collect();
            rows.push((
                "requests per node per /metrics (apiserver_request_total)".into(),
                format!("{:.2} ({})", total / nodes, top.join("; ")),
            ));
        }
        if self.metrics_cpu.is_some() {
            let rejected: Vec<String> = self.rejected.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            rows.push((
                "requests rejected by flow control per /metrics (priority level, reason)".into(),
                if rejected.is_empty() { "none".into() } else { rejected.join("; ") },
            ));
        }
        rows
    }
}

/// The bootstrap storm against `kustos server --data-dir DIR/data <extra>` (its log in
/// `DIR/server.log`): one bootstrap token, keys and CSRs made before the clock starts, the
/// server's CPU time and memory read from /proc; `store_pid` is a process whose CPU time during
/// the storm, and RSS after it, are reported too (etcd). Failed flows are in the summary, not
/// an error.
pub async fn bench(config: StormConfig, dir: &Path, extra: &[&str], store_pid: Option<u32>) -> Result<StormFigures> {
    let n = config.nodes;
    let (server, _) = start("server", &dir.join("data"), extra).await?;
    let pid = server.child.id();
    let admin = admin_client(&server.dir)?;
    let tokens = create_bootstrap_tokens(&admin, &server.url, config.tokens).await?;
    let ca = reqwest::Certificate::from_pem(&ca_pem(&server.dir)?)?;
    let prep_start = Instant::now();
    let nodes = prepare(n)?;
    eprintln!("prepared {n} keys and CSRs in {:.2?}", prep_start.elapsed());
    // Let start-up work (controllers' first lists, default policy) settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let url: Arc<str> = server.url.clone().into();
    let metrics_before = scrape_metrics(&admin, &server.url).await;
    let cpu_before = cpu_time(pid).context("reading the server's CPU time")?;
    let store_before = store_pid.and_then(cpu_time);
    let perf = config.perf_events.as_deref().map(|e| work::PerfStat::start(e, dir)).transpose()?;
    let (results, wall) = run(url, ca, tokens, nodes, config.concurrency, config.timeout).await?;
    let allocations = match perf {
        Some(p) => p.stop()?,
        None => Vec::new(),
    };
    let server_cpu = cpu_time(pid).unwrap_or_default().saturating_sub(cpu_before);
    let store_cpu = store_pid.and_then(|p| Some(cpu_time(p)?.saturating_sub(store_before?)));
    let store_rss_kib = store_pid.and_then(rss_kib);
    let rss = rss_kib(pid).unwrap_or(0);
    let peak = peak_rss_kib(pid).unwrap_or(0);
    let metrics_after = scrape_metrics(&admin, &server.url).await;
    let (metrics_cpu, metrics_signed, requests, rejected, work) = match (&metrics_before, &metrics_after) {
        (Some(b), Some(a)) => {
            let delta = |name: &str| scrape::sum(a, name, &[]) - scrape::sum(b, name, &[]);
            (
                Some(Duration::from_secs_f64(delta("process_cpu_seconds_total").max(0.0))),
                Some(delta("kustos_csr_signed_total")),
                scrape::request_deltas(b, a),
                scrape::rejection_deltas(b, a),
                work::rows(b, a, n, &allocations),
            )
        }
        _ => (None, None, Vec::new(), Vec::new(), Vec::new()),
    };
    drop(server);
    Ok(StormFigures {
        config,
        summary: Summary::of(results, wall),
        server_cpu,
        rss_kib: rss,
        peak_rss_kib: peak,
        store_cpu,
        store_rss_kib,
        metrics_cpu,
        metrics_signed,
        requests,
        rejected,
        work,
    })
}

/// The server's `/metrics` samples, or None (with a note) when they cannot be read.
async fn scrape_metrics(admin: &reqwest::Client, url: &str) -> Option<Vec<scrape::Sample>> {
    let text = async { admin.get(format!("{url}/metrics")).send().await?.error_for_status()?.text().await };
    match text.await {
        Ok(t) => Some(scrape::parse(&t)),
        Err(e) => {
            eprintln!("reading {url}/metrics: {e}");
            None
        }
    }
}

pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

pub fn p50_p99(v: &[Duration]) -> String {
    format!("{} / {}", ms(pct(v, 0.5)), ms(pct(v, 0.99)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_429_retries_only_what_client_go_retries() {
        let s = Duration::from_secs;
        let cases: &[(&str, u16, Option<&str>, u32, Retry)] = &[
            ("success is used as it is", 200, None, 0, Retry::No),
            ("a 429 with Retry-After is retried after it", 429, Some("1"), 0, Retry::After(s(1))),
            ("a longer Retry-After is honoured", 429, Some("7"), 3, Retry::After(s(7))),
            ("Retry-After 0 retries at once", 429, Some("0"), 0, Retry::After(s(0))),
            ("a 429 without Retry-After is an error", 429, None, 0, Retry::No),
            ("a Retry-After that is not whole seconds is an error", 429, Some("1.5"), 0, Retry::No),
            ("an HTTP-date Retry-After is an error", 429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), 0, Retry::No),
            ("other errors are not retried", 503, Some("1"), 0, Retry::No),
            ("the last allowed retry", 429, Some("1"), 99, Retry::After(s(1))),
            ("too many retries fail the step", 429, Some("1"), 100, Retry::GiveUp("HTTP 429 after 100 retries".into())),
        ];
        for (name, status, header, retried, want) in cases {
            assert_eq!(after_429(*status, *header, *retried, 100), *want, "{name}");
        }
    }

    fn done(at: u64) -> NodeResult {
        let d = Duration::from_millis(at);
        NodeResult { outcome: Ok(Outcome { created: d / 4, approved: None, certified: d, done: d }), retries_429: 0 }
    }

    struct Case {
        name: &'static str,
        results: Vec<NodeResult>,
        certified: usize,
        errors: usize,
        retries: u64,
        nodes_retried: usize,
    }

    #[test]
    fn summary_counts_errors_and_retries() {
        let failed = |retries_429| NodeResult { outcome: Err("create: HTTP 500".into()), retries_429 };
        let cases = [
            Case {
                name: "all certified",
                results: vec![done(20), done(10)],
                certified: 2,
                errors: 0,
                retries: 0,
                nodes_retried: 0,
            },
            Case {
                name: "errors are counted, retries of failed nodes too",
                results: vec![done(10), failed(2), failed(0), NodeResult { retries_429: 3, ..done(30) }],
                certified: 2,
                errors: 2,
                retries: 5,
                nodes_retried: 2,
            },
            Case { name: "nothing ran", results: vec![], certified: 0, errors: 0, retries: 0, nodes_retried: 0 },
        ];
        for c in cases {
            let name = c.name;
            let s = Summary::of(c.results, Duration::from_secs(2));
            assert_eq!(s.certified, c.certified, "{name}: certified");
            assert_eq!(s.error_count(), c.errors, "{name}: errors");
            assert_eq!(s.errors.len(), usize::from(c.errors > 0), "{name}: one message for the same error");
            assert_eq!(s.retries_429, c.retries, "{name}: retries");
            assert_eq!(s.nodes_retried, c.nodes_retried, "{name}: nodes retried");
            assert_eq!(s.nodes_per_sec(), c.certified as f64 / 2.0, "{name}: nodes/s");
            assert!(s.certificate.windows(2).all(|w| w[0] <= w[1]), "{name}: sorted");
        }
    }

    /// A local HTTP server answering 429 (with `retry_after` when given) to the first
    /// `rejections` requests and 200 after that; returns its URL.
    async fn rejecting(rejections: usize, retry_after: Option<&'static str>) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let seen = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let seen = seen.clone();
                async move {
                    let mut resp = axum::response::IntoResponse::into_response("ok");
                    if seen.fetch_add(1, Ordering::SeqCst) < rejections {
                        *resp.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                        if let Some(v) = retry_after {
                            resp.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static(v));
                        }
                    }
                    resp
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn send_retrying_sends_again_after_429_and_counts() {
        struct Case {
            name: &'static str,
            rejections: usize,
            retry_after: Option<&'static str>,
            want: Result<u16, &'static str>,
            retries: u32,
        }
        let cases = [
            Case { name: "answered at once", rejections: 0, retry_after: Some("0"), want: Ok(200), retries: 0 },
            Case { name: "two 429s, then served", rejections: 2, retry_after: Some("0"), want: Ok(200), retries: 2 },
            Case {
                name: "a 429 without Retry-After is the answer",
                rejections: 1,
                retry_after: None,
                want: Ok(429),
                retries: 0,
            },
            Case {
                name: "the last allowed retry is served",
                rejections: MAX_RETRIES_PER_STEP as usize,
                retry_after: Some("0"),
                want: Ok(200),
                retries: MAX_RETRIES_PER_STEP,
            },
            Case {
                name: "one 429 too many fails the step",
                rejections: MAX_RETRIES_PER_STEP as usize + 1,
                retry_after: Some("0"),
                want: Err("step: HTTP 429 after 100 retries"),
                retries: MAX_RETRIES_PER_STEP,
            },
        ];
        for c in cases {
            let url = rejecting(c.rejections, c.retry_after).await;
            let client = reqwest::Client::new();
            let mut retries = 0;
            let got = send_retrying("step", &mut retries, || client.get(&url)).await.map(|r| r.status().as_u16());
            assert_eq!(got, c.want.map_err(String::from), "{}", c.name);
            assert_eq!(retries, c.retries, "{}: retries", c.name);
        }
    }
}
