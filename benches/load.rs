//! Load benchmark: starts the real `kustos apiserver` (release build) on a free port and
//! drives it over HTTPS with the admin client certificate.
//!
//! Run: `cargo bench --bench load` (settings via env: BENCH_SECONDS, BENCH_RATE,
//! BENCH_LIST_OBJECTS, BENCH_WATCHERS). Figures are printed as a Markdown table; see
//! docs/BENCHMARKS.md. The run itself is in benches/common/load.rs, shared with
//! `storage_backends`.

mod common;

use anyhow::Result;
use common::load::{self, LoadConfig};

#[tokio::main]
async fn main() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let figures = load::run(LoadConfig::from_env(), tmp.path(), &[], None).await?;
    println!("| measurement | result |\n| --- | --- |");
    for (k, v) in figures.rows() {
        println!("| {k} | {v} |");
    }
    Ok(())
}
