//! Storage backends side by side (issue 7): the platform load benchmark and the bootstrap storm
//! against the real `kustos` (release build) on SQLite and on etcd, in one run, with etcd's own
//! write rate on this machine as the ceiling.
//!
//! One run:
//! 1. starts an etcd of its own (`etcd` on PATH, Debian's `etcd-server`; fails when it is
//!    missing) on 127.0.0.1, free ports, a fresh data directory (tests/common/etcd.rs);
//! 2. measures etcd's raw write rate with the `etcd-client` crate, tasks sharing one client,
//!    1 KiB values under fresh keys, for BENCH_PUT_SECONDS each: a put at 1 and at 64 in
//!    flight, and at 64 in flight the transaction kustos makes for a create (put if
//!    `create_revision == 0`);
//! 3. the platform load benchmark (benches/common/load.rs) against `kustos apiserver` on
//!    SQLite, then on etcd (`--storage etcd --etcd-servers URL --etcd-prefix /load`);
//! 4. the bootstrap storm (benches/common/storm.rs) against `kustos server` on SQLite, then on
//!    etcd (`--etcd-prefix /storm`).
//!
//! Every run's directory (SQLite database, etcd data) is kept until the end: deleting large
//! files just before a measurement slows this disk's fsync for a while.
//!
//! Prints one Markdown table (rows: figures; columns: SQLite, etcd), then the raw etcd rates.
//! Exits non-zero when a storm flow failed.
//!
//! Run (about 5 minutes): `cargo bench --bench storage_backends`
//! Env: BENCH_PUT_SECONDS (default 5); the load benchmark's BENCH_SECONDS (10), BENCH_RATE
//! (1000), BENCH_LIST_OBJECTS (10000), BENCH_WATCHERS (1000); the storm's BENCH_NODES (2000
//! here), BENCH_CONCURRENCY (all at once), BENCH_TIMEOUT_SECS (300). A quick check:
//! `BENCH_PUT_SECONDS=1 BENCH_SECONDS=2 BENCH_RATE=200 BENCH_LIST_OBJECTS=500 BENCH_WATCHERS=50
//! BENCH_NODES=50 cargo bench --bench storage_backends`. See docs/BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::load::{self, LoadConfig, LoadFigures, SEED_CONCURRENCY, WATCH_EVENTS};
use common::storm::{self, p50_p99, secs, StormConfig, StormFigures};
use common::{env_u64, markdown_table, ms, pct};
use etcd_client::{Compare, CompareOp, KvClient, Txn, TxnOp};

/// Size of each raw put's value.
const VALUE_BYTES: usize = 1024;
/// Default storm size here: the whole run takes about five minutes.
const DEFAULT_NODES: u64 = 2000;
const NOT_APPLICABLE: &str = "–";

/// How a raw write is made.
#[derive(Clone, Copy)]
enum Write {
    /// A plain put.
    Put,
    /// A transaction: put if the key's `create_revision` is 0 (kustos's create).
    CreateTxn,
}

/// What one raw write run measured.
struct PutFigures {
    what: String,
    sorted: Vec<Duration>,
    errors: u64,
    elapsed: Duration,
}

impl PutFigures {
    fn per_sec(&self) -> f64 {
        (self.sorted.len() as u64 - self.errors) as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

/// One write of `value` under the fresh key `key`; Err when it failed or did not apply.
async fn write(kv: &mut KvClient, how: Write, key: String, value: Vec<u8>) -> Result<(), String> {
    match how {
        Write::Put => kv.put(key, value, None).await.map(|_| ()).map_err(|e| e.to_string()),
        Write::CreateTxn => {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, value, None)]);
            match kv.txn(txn).await {
                Ok(r) if r.succeeded() => Ok(()),
                Ok(_) => Err("the create transaction did not apply".into()),
                Err(e) => Err(e.to_string()),
            }
        }
    }
}

/// `concurrency` tasks sharing `client`, each writing 1 KiB values under fresh keys below
/// `prefix` until `duration` has passed; every write's latency is kept.
async fn put_rate(
    client: &etcd_client::Client,
    prefix: &str,
    how: Write,
    concurrency: usize,
    duration: Duration,
) -> Result<PutFigures> {
    let value = vec![b'x'; VALUE_BYTES];
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (mut kv, value, prefix, first_error) =
                (client.kv_client(), value.clone(), prefix.to_string(), first_error.clone());
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::new(), 0u64);
                let mut i = 0u64;
                while t0.elapsed() < duration {
                    let key = format!("{prefix}/{task}/{i}");
                    i += 1;
                    let sent = Instant::now();
                    let res = write(&mut kv, how, key, value.clone()).await;
                    lat.push(sent.elapsed());
                    if let Err(e) = res {
                        errors += 1;
                        if let Ok(mut first) = first_error.lock() {
                            first.get_or_insert(e);
                        }
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let (mut sorted, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (lat, e) = t.await?;
        sorted.extend(lat);
        errors += e;
    }
    let elapsed = t0.elapsed();
    sorted.sort();
    if let Some(e) = first_error.lock().ok().and_then(|f| f.clone()) {
        eprintln!("etcd write failed ({errors}x), first: {e}");
    }
    let what = match how {
        Write::Put => format!("put, {concurrency} in flight"),
        Write::CreateTxn => format!("create transaction (put if create_revision = 0), {concurrency} in flight"),
    };
    Ok(PutFigures { what, sorted, errors, elapsed })
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or(NOT_APPLICABLE.into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

fn cpu(d: Option<Duration>) -> String {
    d.map_or(NOT_APPLICABLE.into(), secs)
}

/// The load run's figures under labels that do not depend on the run, (label, value).
fn load_cells(f: &LoadFigures) -> Vec<(String, String)> {
    let c = &f.config;
    let deliveries = &f.deliveries;
    let list = if f.seeded == c.list_objects {
        ms(f.list_median)
    } else {
        format!("{} ({} objects)", ms(f.list_median), f.seeded)
    };
    vec![
        ("first start to /readyz (creates the PKI)".to_string(), ms(f.first_ready)),
        ("start to /readyz (existing data dir)".into(), ms(f.ready)),
        (format!("GET p50 / p99 at {} req/s for {} s", c.rate, c.secs), f.get.p50_p99()),
        (format!("create p50 / p99 at {} req/s for {} s", c.rate, c.secs), f.create.p50_p99()),
        ("failed GETs, creates".into(), format!("{}, {}", f.get.errors, f.create.errors)),
        (
            format!("creates/s, {SEED_CONCURRENCY} in flight ({} objects of ~0.6 KiB)", c.list_objects),
            format!("{:.0}", f.seed_rate()),
        ),
        (format!("list of {} objects, median of 5", c.list_objects), list),
        (
            format!("watch delivery p50 / p99, {} watchers x {WATCH_EVENTS} events (delivered)", c.watchers),
            format!("{} / {} ({})", ms(pct(deliveries, 0.5)), ms(pct(deliveries, 0.99)), deliveries.len()),
        ),
        ("apiserver CPU time, restart to end".into(), cpu(f.server_cpu)),
        ("etcd CPU time, same span".into(), cpu(f.store_cpu)),
        ("apiserver RSS idle / at the end".into(), format!("{} / {}", mib(f.idle_rss_kib), mib(f.rss_after_kib))),
        ("etcd RSS at the end".into(), mib(f.store_rss_kib)),
    ]
}

/// The storm's figures under labels that do not depend on the run, (label, value).
fn storm_cells(f: &StormFigures) -> Vec<(String, String)> {
    let s = &f.summary;
    let n = f.config.nodes.max(1) as u32;
    vec![
        ("nodes certified, failed flows".to_string(), format!("{}, {}", s.certified, s.error_count())),
        ("wall time, every flow done".into(), secs(s.wall)),
        ("nodes/s (certified / wall time)".into(), format!("{:.0}", s.nodes_per_sec())),
        ("requests retried after 429 (nodes with any)".into(), format!("{} ({})", s.retries_429, s.nodes_retried)),
        ("time-to-certificate p50 / p99".into(), p50_p99(&s.certificate)),
        ("CSR create p50 / p99".into(), p50_p99(&s.created)),
        ("whole flow incl. the node's first call p50 / p99".into(), p50_p99(&s.done)),
        ("server CPU time (per node)".into(), format!("{} ({})", secs(f.server_cpu), ms(f.cpu_per_node()))),
        (
            "etcd CPU time (per node)".into(),
            f.store_cpu.map_or(NOT_APPLICABLE.into(), |c| format!("{} ({})", secs(c), ms(c / n))),
        ),
        ("server RSS after / peak".into(), format!("{} / {}", mib(Some(f.rss_kib)), mib(Some(f.peak_rss_kib)))),
        ("etcd RSS after".into(), mib(f.store_rss_kib)),
    ]
}

/// Rows of two columns side by side; both come from the same `cells` function, so their
/// labels are the same, in the same order.
fn side_by_side(a: Vec<(String, String)>, b: Vec<(String, String)>) -> Vec<Vec<String>> {
    a.into_iter().zip(b).map(|((label, x), (_, y))| vec![label, x, y]).collect()
}

#[tokio::main]
async fn main() -> Result<()> {
    let put_for = Duration::from_secs(env_u64("BENCH_PUT_SECONDS", 5));
    let load_config = LoadConfig::from_env();
    let storm_config = StormConfig::from_env(DEFAULT_NODES);
    // Every directory lives until the end (no large deletes between measurements).
    let tmp = tempfile::tempdir()?;
    let dir = |name: &str| -> Result<std::path::PathBuf> {
        let d = tmp.path().join(name);
        std::fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    };

    let etcd = common::etcd::Etcd::start();
    let url = etcd.client_url();
    let etcd_pid = etcd.pid().context("etcd is not running")?;
    eprintln!("etcd {url} (pid {etcd_pid})");
    let client = etcd_client::Client::connect([url.as_str()], None).await.context("connecting to etcd")?;
    let mut puts = Vec::new();
    for (how, concurrency) in [(Write::Put, 1), (Write::Put, 64), (Write::CreateTxn, 64)] {
        let prefix = format!("/bench-put/{}", puts.len());
        let p = put_rate(&client, &prefix, how, concurrency, put_for).await?;
        eprintln!("etcd {}: {:.0}/s", p.what, p.per_sec());
        puts.push(p);
    }
    drop(client);

    let etcd_args = |prefix: &'static str| ["--storage", "etcd", "--etcd-servers", &url, "--etcd-prefix", prefix];
    eprintln!("load benchmark on SQLite");
    let load_sqlite = load::run(load_config.clone(), &dir("load-sqlite")?, &[], None).await?;
    eprintln!("load benchmark on etcd");
    let load_etcd = load::run(load_config, &dir("load-etcd")?, &etcd_args("/load"), Some(etcd_pid)).await?;
    eprintln!("bootstrap storm on SQLite");
    let storm_sqlite = storm::bench(storm_config.clone(), &dir("storm-sqlite")?, &[], None).await?;
    eprintln!("bootstrap storm on etcd");
    let storm_etcd =
        storm::bench(storm_config.clone(), &dir("storm-etcd")?, &etcd_args("/storm"), Some(etcd_pid)).await?;

    let mut rows = vec![vec!["**platform load** (`kustos apiserver`)".to_string()]];
    rows.extend(side_by_side(load_cells(&load_sqlite), load_cells(&load_etcd)));
    rows.push(vec![format!(
        "**bootstrap storm** (`kustos server`, {} nodes, {} at once)",
        storm_config.nodes, storm_config.concurrency
    )]);
    rows.extend(side_by_side(storm_cells(&storm_sqlite), storm_cells(&storm_etcd)));
    for (column, f) in [(1, &storm_sqlite), (2, &storm_etcd)] {
        for (label, message) in f.summary.error_rows() {
            let mut row = vec![label, String::new(), String::new()];
            row[column] = message;
            rows.push(row);
        }
    }
    print!("{}", markdown_table(&["measurement", "SQLite", "etcd"], &rows));

    println!();
    let mut raw: Vec<Vec<String>> = puts
        .iter()
        .map(|p| {
            vec![
                p.what.clone(),
                format!("{:.0}", p.per_sec()),
                format!("{} / {}", ms(pct(&p.sorted, 0.5)), ms(pct(&p.sorted, 0.99))),
                p.errors.to_string(),
            ]
        })
        .collect();
    raw.push(vec![
        format!("for comparison: kustos creates through the API on etcd, {SEED_CONCURRENCY} in flight"),
        format!("{:.0}", load_etcd.seed_rate()),
        NOT_APPLICABLE.into(),
        NOT_APPLICABLE.into(),
    ]);
    let header = format!("etcd alone, {VALUE_BYTES} B values, fresh keys, {} s each", put_for.as_secs());
    print!("{}", markdown_table(&[&header, "writes/s", "p50 / p99", "errors"], &raw));

    drop(etcd);
    let failed = storm_sqlite.summary.error_count() + storm_etcd.summary.error_count();
    if failed > 0 {
        bail!(
            "{failed} storm flows failed (SQLite {}, etcd {})",
            storm_sqlite.summary.error_count(),
            storm_etcd.summary.error_count()
        );
    }
    Ok(())
}
