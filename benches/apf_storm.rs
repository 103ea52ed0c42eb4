//! APF storm: does a bootstrap storm starve the admin and the controllers? Two runs against
//! the real `kustos server` (release build), each on a fresh server and data directory:
//!
//! 1. the bootstrap storm alone (benches/common/storm.rs: N simulated kubelets sharing one
//!    bootstrap token, each creating its CSR, watching it until it is signed and calling as
//!    the node; 429 + `Retry-After` is retried as client-go does, and counted);
//! 2. the same storm while
//!    - an admin (the admin kubeconfig's client certificate, `system:masters`) issues a
//!      `kubectl get configmaps -n kube-system`-like request every 100 ms (Table, `limit=500`)
//!      on its own connection; every latency is recorded, a failure (429 included) counts;
//!    - a controller (a client certificate for `system:kube-controller-manager` issued from
//!      the cluster CA) renews the `kube-system/kube-controller-manager` Lease as client-go's
//!      leader election does: GET, then PUT with the read resourceVersion, 2 s after the
//!      previous renewal ended; a renewal fails on any error, a non-2xx answer, or when it
//!      takes longer than the 10 s renew deadline.
//!
//! Reported as Markdown: both runs side by side, then the targets (throughput of (2)
//! within 10 % of (1), admin p99 ≤ 100 ms, no failed renewal). Exits non-zero when a storm
//! flow fails; missed targets are reported, not an error.
//!
//! Run: `cargo bench --bench apf_storm` (env: BENCH_NODES, default 10000; BENCH_CONCURRENCY,
//! default all at once; BENCH_TIMEOUT_SECS per storm, default 300; BENCH_SERVER_ARGS,
//! whitespace-separated, appended to `kustos server`'s arguments; BENCH_ROUNDS, default 1:
//! rounds of the two runs, alternating, the targets judged on all rounds pooled). See
//! docs/BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::apf::{throughput, verdicts, AdminFigures, AdminSample, LeaseFigures, Renewal};
use common::storm::{self, secs, Summary};
use common::{admin_client, ca_pem, cpu_time, env_u64, lease, ms, start, user_client};
use tokio::sync::watch;

/// What kubectl sends to get a Table.
const TABLE_ACCEPT: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const ADMIN_PERIOD: Duration = Duration::from_millis(100);
/// An admin request still unanswered after this long is a failure.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// kube-controller-manager's leader election defaults: retry period and renew deadline.
const RETRY_PERIOD: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "kube-controller-manager";
const CONTROLLER_USER: &str = "system:kube-controller-manager";

struct Settings {
    nodes: u64,
    concurrency: usize,
    timeout: Duration,
    server_args: Vec<String>,
}

struct RunFigures {
    storm: Summary,
    server_cpu: Duration,
    /// With the side loads only.
    load: Option<SideLoad>,
}

/// What the admin and the controller recorded during one storm.
struct SideLoad {
    admin: Vec<AdminSample>,
    renewals: Vec<Renewal>,
    /// When the side loads were stopped, from their start.
    end: Duration,
}

impl SideLoad {
    /// Distinct failure messages.
    fn failures(&self) -> Vec<String> {
        let mut f: Vec<String> = self
            .admin
            .iter()
            .filter_map(|s| s.failure.clone().map(|f| format!("admin: {f}")))
            .chain(self.renewals.iter().filter_map(|r| r.failure.clone().map(|f| format!("lease renewal: {f}"))))
            .collect();
        f.sort();
        f.dedup();
        f
    }
}

/// The admin's requests: one every [`ADMIN_PERIOD`], each its own task (a slow answer does not
/// hold the next one back), all on the admin's one client, until `stop`.
async fn admin_load(client: reqwest::Client, url: String, mut stop: watch::Receiver<bool>) -> Vec<AdminSample> {
    let url = format!("{url}/api/v1/namespaces/kube-system/configmaps?limit=500");
    let mut tick = tokio::time::interval(ADMIN_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = tokio::time::timeout(ADMIN_TIMEOUT, async {
                let r = client.get(&url).header(reqwest::header::ACCEPT, TABLE_ACCEPT).send().await?;
                let code = r.status().as_u16();
                let body = r.bytes().await?;
                Ok::<_, reqwest::Error>((code, body))
            })
            .await;
            let latency = t.elapsed();
            let (failure, http_429) = match r {
                Ok(Ok((200, body)))
                    if serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|v| v["kind"] == "Table") =>
                {
                    (None, false)
                }
                Ok(Ok((200, _))) => (Some("HTTP 200 without a Table".to_string()), false),
                Ok(Ok((code, _))) => (Some(format!("HTTP {code}")), code == 429),
                Ok(Err(e)) => (Some(e.to_string()), false),
                Err(_) => (Some(format!("no answer within {ADMIN_TIMEOUT:?}")), false),
            };
            AdminSample { latency, failure, http_429 }
        }));
    }
    let mut samples = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok(s) => samples.push(s),
            Err(e) => samples.push(AdminSample {
                latency: ADMIN_TIMEOUT,
                failure: Some(format!("task: {e}")),
                http_429: false,
            }),
        }
    }
    samples
}

fn lease_url(url: &str) -> String {
    format!("{url}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}")
}

/// Acquire the Lease (create it), as the new leader does.
async fn acquire(client: &reqwest::Client, url: &str, identity: &str) -> Result<()> {
    let body = lease::acquired(LEASE_NAMESPACE, LEASE_NAME, identity, chrono::Utc::now());
    let r = client
        .post(format!("{url}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"))
        .json(&body)
        .send()
        .await?;
    if r.status().as_u16() != 201 {
        bail!("acquiring the Lease as {CONTROLLER_USER}: HTTP {}: {}", r.status(), r.text().await.unwrap_or_default());
    }
    Ok(())
}

async fn renew(client: &reqwest::Client, url: &str, identity: &str) -> Result<(), String> {
    let r = client.get(lease_url(url)).send().await.map_err(|e| format!("get: {e}"))?;
    let code = r.status().as_u16();
    let body = r.bytes().await.map_err(|e| format!("get: {e}"))?;
    if !(200..300).contains(&code) {
        return Err(format!("get: HTTP {code}"));
    }
    let read: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("get: {e}"))?;
    let renewed = lease::renewed(&read, identity, chrono::Utc::now())?;
    let r = client.put(lease_url(url)).json(&renewed).send().await.map_err(|e| format!("put: {e}"))?;
    let code = r.status().as_u16();
    let _ = r.bytes().await;
    if !(200..300).contains(&code) {
        return Err(format!("put: HTTP {code}"));
    }
    Ok(())
}

/// The controller's renewals until `stop` (a renewal under way is finished first).
async fn lease_load(
    client: reqwest::Client,
    url: String,
    identity: String,
    t0: Instant,
    mut stop: watch::Receiver<bool>,
) -> Vec<Renewal> {
    let mut out = Vec::new();
    loop {
        let started = t0.elapsed();
        let t = Instant::now();
        let failure = match tokio::time::timeout(RENEW_DEADLINE, renew(&client, &url, &identity)).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(format!("not renewed within the {RENEW_DEADLINE:?} renew deadline")),
        };
        out.push(Renewal { started, took: t.elapsed(), failure });
        tokio::select! {
            _ = tokio::time::sleep(RETRY_PERIOD) => {}
            _ = stop.changed() => break,
        }
    }
    out
}

async fn one_run(s: &Settings, with_load: bool) -> Result<RunFigures> {
    let tmp = tempfile::tempdir()?;
    let args: Vec<&str> = s.server_args.iter().map(String::as_str).collect();
    let (server, _) = start("server", &tmp.path().join("data"), &args).await?;
    let pid = server.child.id();
    let admin = admin_client(&server.dir)?;
    let token: Arc<str> = storm::create_bootstrap_token(&admin, &server.url).await?.into();
    let ca = reqwest::Certificate::from_pem(&ca_pem(&server.dir)?)?;
    let prep_start = Instant::now();
    let nodes = storm::prepare(s.nodes)?;
    eprintln!("prepared {} keys and CSRs in {:.2?}", s.nodes, prep_start.elapsed());
    let identity = format!("apf-storm-bench_{}", std::process::id());
    // The admin and the controller are programs of their own, not part of the kubelets'
    // process: their requests (and their clients' connection tasks) run on a runtime of their
    // own, so that the 10,000 kubelet tasks of this load generator do not delay them here —
    // that delay would be measured as the server's latency.
    let side = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("apf-storm-admin")
        .enable_all()
        .build()
        .context("building the admin's runtime")?;
    let controller = if with_load {
        let c = user_client(&server.dir, CONTROLLER_USER, &[])?;
        let (url, id) = (server.url.clone(), identity.clone());
        let acquired = side.spawn(async move { acquire(&c, &url, &id).await.map(|()| c) });
        Some(acquired.await.context("the lease acquisition task")??)
    } else {
        None
    };
    // Let start-up work (controllers' first lists, default policy) settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (stop_tx, stop_rx) = watch::channel(false);
    let t0 = Instant::now();
    let (admin_task, lease_task) = match controller {
        Some(controller) => {
            // The admin's own client: its own connection, not shared with the setup above.
            let admin = admin_client(&server.dir)?;
            let url = server.url.clone();
            (
                Some(side.spawn(admin_load(admin, url.clone(), stop_rx.clone()))),
                Some(side.spawn(lease_load(controller, url, identity, t0, stop_rx))),
            )
        }
        None => (None, None),
    };

    let url: Arc<str> = server.url.clone().into();
    let cpu_before = cpu_time(pid).context("reading the server's CPU time")?;
    let storm_result = storm::run(url, ca, vec![token], nodes, s.concurrency, s.timeout).await;
    let server_cpu = cpu_time(pid).unwrap_or_default().saturating_sub(cpu_before);
    let end = t0.elapsed();
    let _ = stop_tx.send(true);
    let load = match (admin_task, lease_task) {
        (Some(a), Some(l)) => Some(SideLoad {
            admin: a.await.context("the admin task")?,
            renewals: l.await.context("the lease task")?,
            end,
        }),
        _ => None,
    };
    side.shutdown_background();
    let (results, wall) = storm_result?;
    drop(server);
    Ok(RunFigures { storm: Summary::of(results, wall), server_cpu, load })
}

#[tokio::main]
async fn main() -> Result<()> {
    let nodes = env_u64("BENCH_NODES", 10_000);
    let settings = Settings {
        nodes,
        concurrency: env_u64("BENCH_CONCURRENCY", nodes).max(1) as usize,
        timeout: Duration::from_secs(env_u64("BENCH_TIMEOUT_SECS", 300)),
        server_args: std::env::var("BENCH_SERVER_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect(),
    };
    let rounds = env_u64("BENCH_ROUNDS", 1).max(1);
    println!(
        "nodes: {nodes} (concurrency {}), server args: {:?}, rounds: {rounds}",
        settings.concurrency,
        settings.server_args.join(" ")
    );
    let (mut alone_runs, mut loaded_runs) = (Vec::new(), Vec::new());
    let (mut admin, mut failed_renewals, mut errors) = (Vec::new(), 0, 0);
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}: the storm alone");
        let alone = one_run(&settings, false).await?;
        eprintln!("round {round} of {rounds}: the storm with the admin and the lease renewals");
        let loaded = one_run(&settings, true).await?;
        let Some(side) = &loaded.load else { bail!("the loaded run recorded no side load") };
        println!("\n### round {round} of {rounds}\n");
        print_round(nodes, &alone, &loaded, side);
        alone_runs.push((alone.storm.certified, alone.storm.wall));
        loaded_runs.push((loaded.storm.certified, loaded.storm.wall));
        admin.extend(side.admin.iter().cloned());
        failed_renewals += LeaseFigures::of(&side.renewals, side.end).failed;
        errors += alone.storm.error_count() + loaded.storm.error_count();
    }

    let ratio = throughput(&loaded_runs) / throughput(&alone_runs).max(f64::EPSILON);
    let pooled = if rounds > 1 { format!(", {rounds} rounds pooled") } else { String::new() };
    println!("\n### targets{pooled}\n");
    println!("| target | measured | verdict |\n| --- | --- | --- |");
    for (target, measured, verdict) in verdicts(ratio, AdminFigures::of(&admin).p99, failed_renewals) {
        println!("| {target} | {measured} | {verdict} |");
    }
    if errors > 0 {
        bail!("{errors} of {} storm flows failed", 2 * nodes * rounds);
    }
    Ok(())
}

/// One round's table: the two runs side by side.
fn print_round(nodes: u64, alone: &RunFigures, loaded: &RunFigures, side: &SideLoad) {
    println!("| measurement | storm alone | storm + admin + lease |\n| --- | --- | --- |");
    for ((k, a), (_, b)) in alone.storm.rows().into_iter().zip(loaded.storm.rows()) {
        println!("| {k} | {a} | {b} |");
    }
    let cpu = |f: &RunFigures| format!("{} ({})", secs(f.server_cpu), ms(f.server_cpu / nodes.max(1) as u32));
    println!("| server CPU time during the storm (per node) | {} | {} |", cpu(alone), cpu(loaded));
    for (k, v) in alone.storm.error_rows() {
        println!("| storm {k} | {v} | — |");
    }
    for (k, v) in loaded.storm.error_rows() {
        println!("| storm {k} | — | {v} |");
    }
    let admin = AdminFigures::of(&side.admin);
    let lease = LeaseFigures::of(&side.renewals, side.end);
    println!(
        "| admin requests (every {ADMIN_PERIOD:?}), failures (of which 429) | — | {}, {} ({}) |",
        admin.requests, admin.failures, admin.rejected_429
    );
    println!("| admin p50 / p99 / max | — | {} / {} / {} |", ms(admin.p50), ms(admin.p99), ms(admin.max));
    println!("| Lease renewals ok / failed | — | {} / {} |", lease.ok, lease.failed);
    println!(
        "| Lease renewal max / longest time without a renewal | — | {} / {} |",
        ms(lease.max),
        secs(lease.longest_gap)
    );
    for f in side.failures().iter().take(10) {
        println!("| side-load failure | — | {} |", f.replace('|', "\\|"));
    }
}
