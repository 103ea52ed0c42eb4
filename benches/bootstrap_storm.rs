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
//! BENCH_CONCURRENCY, default all at once; BENCH_TIMEOUT_SECS, default 300; BENCH_TOKENS,
//! bootstrap tokens shared out over the nodes, a flow each, default 1; BENCH_PERF_EVENTS,
//! `perf stat` events counted during the storm, e.g. uprobes on the allocator). Figures are
//! printed as a Markdown table; see docs/BENCHMARKS.md. The run itself is in
//! benches/common/storm.rs ([`common::storm::bench`]), shared with `storage_backends`.

mod common;

use anyhow::{bail, Result};
use common::storm::{self, StormConfig};

#[tokio::main]
async fn main() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let figures = storm::bench(StormConfig::from_env(10_000), tmp.path(), &[], None).await?;
    println!("| measurement | result |\n| --- | --- |");
    for (k, v) in figures.rows() {
        println!("| {k} | {v} |");
    }
    if !figures.work.is_empty() {
        println!("\n| work per certified node (/metrics, after less before) | per node |\n| --- | --- |");
        for (k, v) in &figures.work {
            println!("| {k} | {v} |");
        }
    }
    let error_count = figures.summary.error_count();
    if error_count > 0 {
        bail!("{error_count} of {} flows failed", figures.config.nodes);
    }
    Ok(())
}
