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
//! Requests answered 429 with `Retry-After` are sent again after it, as client-go does, and
//! counted (benches/common/storm.rs has the flow).
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
use common::storm::{self, secs, Summary};
use common::{admin_client, ca_pem, cpu_time, env_u64, ms, peak_rss_kib, rss_kib, start};

#[tokio::main]
async fn main() -> Result<()> {
    let n = env_u64("BENCH_NODES", 10_000);
    let concurrency = env_u64("BENCH_CONCURRENCY", n).max(1) as usize;
    let timeout = Duration::from_secs(env_u64("BENCH_TIMEOUT_SECS", 300));
    let tmp = tempfile::tempdir()?;
    let (server, _) = start("server", &tmp.path().join("data"), &[]).await?;
    let pid = server.child.id();
    let admin = admin_client(&server.dir)?;
    let token: Arc<str> = storm::create_bootstrap_token(&admin, &server.url).await?.into();
    let ca = reqwest::Certificate::from_pem(&ca_pem(&server.dir)?)?;
    let prep_start = Instant::now();
    let nodes = storm::prepare(n)?;
    eprintln!("prepared {n} keys and CSRs in {:.2?}", prep_start.elapsed());
    // Let start-up work (controllers' first lists, default policy) settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let url: Arc<str> = server.url.clone().into();
    let cpu_before = cpu_time(pid).context("reading the server's CPU time")?;
    let (results, wall) = storm::run(url, ca, token, nodes, concurrency, timeout).await?;
    let server_cpu = cpu_time(pid).unwrap_or_default().saturating_sub(cpu_before);
    let rss = rss_kib(pid).unwrap_or(0);
    let peak = peak_rss_kib(pid).unwrap_or(0);
    let summary = Summary::of(results, wall);

    println!("| measurement | result |\n| --- | --- |");
    println!("| nodes (concurrency) | {n} ({concurrency}) |");
    for (k, v) in summary.rows().into_iter().chain(summary.error_rows()) {
        println!("| {k} | {v} |");
    }
    println!(
        "| server CPU time during the storm (per node) | {} ({}) |",
        secs(server_cpu),
        ms(server_cpu / n.max(1) as u32)
    );
    println!("| server RSS after / peak | {:.1} MiB / {:.1} MiB |", rss as f64 / 1024.0, peak as f64 / 1024.0);
    drop(server);
    let error_count = summary.error_count();
    if error_count > 0 {
        bail!("{error_count} of {n} flows failed");
    }
    Ok(())
}
