//! Bootstrap storm: N simulated kubelets do the TLS bootstrap flow at the same time against
//! the real `kustos server` (release build, controllers in-process, SQLite store), on a free
//! port of this machine.
//!
//! Each simulated kubelet, on a TLS connection of its own, as a kubelet does it:
//! 1. creates a CertificateSigningRequest for `system:node:<name>` (signer
//!    `kubernetes.io/kube-apiserver-client-kubelet`, a P-256 key) with a bootstrap token;
//! 2. lists and then watches that CSR by name (`fieldSelector=metadata.name=<name>`) until
//!    `status.certificate` is set (the csrapproving controller approves it after a
//!    SubjectAccessReview, csrsigning signs it);
//! 3. opens a second connection with the issued certificate and asks who it is
//!    (SelfSubjectReview), which must answer `system:node:<name>` in `system:nodes`.
//!
//! Keys and CSRs are generated before the clock starts (the load generator shares the two
//! cores with the server; what is measured is the server's flow).
//!
//! Run: `cargo bench --bench bootstrap_storm` (env: BENCH_NODES, default 10000;
//! BENCH_CONCURRENCY, default all at once; BENCH_TIMEOUT_SECS, default 300). Figures are
//! printed as a Markdown table; see docs/BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use common::{admin_client, ca_pem, cpu_time, env_u64, ms, pct, peak_rss_kib, rss_kib, start};
use futures::StreamExt as _;
use serde_json::{json, Value};

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// One simulated node's key material, made before the storm.
struct Node {
    name: String,
    csr_pem: String,
    key_pem: String,
}

/// What one kubelet measured, from the moment it started its create.
struct Outcome {
    created: Duration,
    /// When it first saw Approved without a certificate (not seen when approval and signing
    /// both happened before its watch delivered anything).
    approved: Option<Duration>,
    certified: Duration,
    done: Duration,
}

fn prepare(n: u64) -> Result<Vec<Node>> {
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

async fn create_bootstrap_token(admin: &reqwest::Client, url: &str) -> Result<String> {
    let (id, secret) = ("storm0", "0123456789abcdef");
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

async fn json_of(r: reqwest::Result<reqwest::Response>, want: u16, what: &str) -> Result<Value, String> {
    let r = r.map_err(|e| format!("{what}: {e}"))?;
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

async fn kubelet(url: Arc<str>, ca: reqwest::Certificate, token: Arc<str>, node: Node) -> Result<Outcome, String> {
    let t = Instant::now();
    let boot = tls_client(&ca, None)?;
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
    json_of(boot.post(&csrs).bearer_auth(&*token).json(&body).send().await, 201, "create").await?;
    let created = t.elapsed();

    let selector = format!("metadata.name={}", node.name);
    let list =
        json_of(boot.get(&csrs).bearer_auth(&*token).query(&[("fieldSelector", &selector)]).send().await, 200, "list")
            .await?;
    let mut approved_at = None;
    let mut cert = None;
    if let Some(item) = list["items"].as_array().and_then(|a| a.first()) {
        cert = issued(item)?;
    }
    if cert.is_none() {
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
        let r = boot
            .get(&csrs)
            .bearer_auth(&*token)
            .query(&[
                ("fieldSelector", selector.as_str()),
                ("watch", "true"),
                ("resourceVersion", rv.as_str()),
                ("timeoutSeconds", "600"),
            ])
            .send()
            .await
            .map_err(|e| format!("watch: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("watch: HTTP {}", r.status()));
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
    let as_node = tls_client(&ca, Some(identity))?;
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let who = json_of(
        as_node.post(format!("{url}/apis/authentication.k8s.io/v1/selfsubjectreviews")).json(&review).send().await,
        201,
        "whoami",
    )
    .await?;
    let user = &who["status"]["userInfo"];
    let want = format!("system:node:{}", node.name);
    let in_nodes = user["groups"].as_array().into_iter().flatten().any(|g| g == "system:nodes");
    if user["username"] != want.as_str() || !in_nodes {
        return Err(format!("whoami with the issued certificate: {user}"));
    }
    Ok(Outcome { created, approved: approved_at, certified, done: t.elapsed() })
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn sorted(mut v: Vec<Duration>) -> Vec<Duration> {
    v.sort();
    v
}

fn p50_p99(v: &[Duration]) -> String {
    format!("{} / {}", ms(pct(v, 0.5)), ms(pct(v, 0.99)))
}

#[tokio::main]
async fn main() -> Result<()> {
    let n = env_u64("BENCH_NODES", 10_000);
    let concurrency = env_u64("BENCH_CONCURRENCY", n).max(1) as usize;
    let timeout = Duration::from_secs(env_u64("BENCH_TIMEOUT_SECS", 300));
    let tmp = tempfile::tempdir()?;
    let (server, _) = start("server", &tmp.path().join("data"), &[]).await?;
    let pid = server.child.id();
    let admin = admin_client(&server.dir)?;
    let token: Arc<str> = create_bootstrap_token(&admin, &server.url).await?.into();
    let ca = reqwest::Certificate::from_pem(&ca_pem(&server.dir)?)?;
    let prep_start = Instant::now();
    let nodes = prepare(n)?;
    eprintln!("prepared {n} keys and CSRs in {:.2?}", prep_start.elapsed());
    // Let start-up work (controllers' first lists, default policy) settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let url: Arc<str> = server.url.clone().into();
    let cpu_before = cpu_time(pid).context("reading the server's CPU time")?;
    let t0 = Instant::now();
    let results: Vec<Result<Outcome, String>> = tokio::time::timeout(
        timeout,
        futures::stream::iter(nodes)
            .map(|node| {
                let (url, ca, token) = (url.clone(), ca.clone(), token.clone());
                async move {
                    match tokio::spawn(kubelet(url, ca, token, node)).await {
                        Ok(r) => r,
                        Err(e) => Err(format!("task: {e}")),
                    }
                }
            })
            .buffer_unordered(concurrency)
            .collect(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the storm did not finish within {timeout:?}"))?;
    let wall = t0.elapsed();
    let server_cpu = cpu_time(pid).unwrap_or_default().saturating_sub(cpu_before);
    let rss = rss_kib(pid).unwrap_or(0);
    let peak = peak_rss_kib(pid).unwrap_or(0);

    let mut errors: std::collections::BTreeMap<String, usize> = Default::default();
    let mut ok = Vec::new();
    for r in results {
        match r {
            Ok(o) => ok.push(o),
            Err(e) => *errors.entry(e.chars().take(200).collect()).or_default() += 1,
        }
    }
    let certified_all = ok.iter().map(|o| o.certified).max().unwrap_or_default();
    let created = sorted(ok.iter().map(|o| o.created).collect());
    let approved = sorted(ok.iter().filter_map(|o| o.approved).collect());
    let certified = sorted(ok.iter().map(|o| o.certified).collect());
    let done = sorted(ok.iter().map(|o| o.done).collect());
    let error_count: usize = errors.values().sum();

    println!("| measurement | result |\n| --- | --- |");
    println!("| nodes (concurrency) | {n} ({concurrency}) |");
    println!("| nodes certified, errors | {}, {error_count} |", ok.len());
    println!("| wall time, all flows done (incl. the call as the node) | {} |", secs(wall));
    println!("| nodes/s (certified / wall time) | {:.0} |", ok.len() as f64 / wall.as_secs_f64());
    println!("| time-to-certificate p50 / p99 | {} |", p50_p99(&certified));
    println!("| CSR create p50 / p99 | {} |", p50_p99(&created));
    println!(
        "| Approved first seen p50 / p99 ({} of {} saw it before the certificate) | {} |",
        approved.len(),
        ok.len(),
        p50_p99(&approved)
    );
    println!("| whole flow incl. the node's first call p50 / p99 | {} |", p50_p99(&done));
    println!("| last certificate after | {} |", secs(certified_all));
    println!(
        "| server CPU time during the storm (per node) | {} ({}) |",
        secs(server_cpu),
        ms(server_cpu / n.max(1) as u32)
    );
    println!("| server RSS after / peak | {:.1} MiB / {:.1} MiB |", rss as f64 / 1024.0, peak as f64 / 1024.0);
    for (e, count) in &errors {
        println!("| error ({count}x) | {} |", e.replace('|', "\\|"));
    }
    drop(server);
    if error_count > 0 {
        bail!("{error_count} of {n} flows failed");
    }
    Ok(())
}
