//! The platform load benchmark shared by `load` and `storage_backends`: the real
//! `kustos apiserver` (release build) on a free port, driven over HTTPS with the admin client
//! certificate:
//! - cold start (first start creates the PKI), then a restart on the same data directory;
//! - GET and durable creates at a fixed rate (open loop);
//! - a list of many objects in one namespace (after creating them, 64 in flight);
//! - watch fan-out: many watches on one namespace, then writes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::StreamExt;
use serde_json::json;

use super::{admin_client, cpu_time, env_u64, ms, pct, read_ok, rss_kib, start};

/// Sizes of one load run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Seconds of each fixed-rate phase (GET, create).
    pub secs: u64,
    /// Requests per second of each fixed-rate phase.
    pub rate: u64,
    /// Objects created, then listed.
    pub list_objects: u64,
    /// Watches of the fan-out phase.
    pub watchers: u64,
}

/// Events written in the watch fan-out phase, 100 ms apart.
pub const WATCH_EVENTS: u64 = 20;
/// Creates in flight while the list's objects are made.
pub const SEED_CONCURRENCY: usize = 64;

impl LoadConfig {
    /// From BENCH_SECONDS, BENCH_RATE, BENCH_LIST_OBJECTS and BENCH_WATCHERS.
    pub fn from_env() -> Self {
        LoadConfig {
            secs: env_u64("BENCH_SECONDS", 10),
            rate: env_u64("BENCH_RATE", 1000),
            list_objects: env_u64("BENCH_LIST_OBJECTS", 10_000),
            watchers: env_u64("BENCH_WATCHERS", 1000),
        }
    }
}

/// Sorted latencies of the requests of one phase and how many of them failed.
pub struct Latencies {
    pub sorted: Vec<Duration>,
    pub errors: usize,
}

impl Latencies {
    pub fn p50_p99(&self) -> String {
        format!("{} / {}", ms(pct(&self.sorted, 0.5)), ms(pct(&self.sorted, 0.99)))
    }
}

/// What one load run measured.
pub struct LoadFigures {
    pub config: LoadConfig,
    /// First start to /readyz (creates the PKI).
    pub first_ready: Duration,
    /// Start to /readyz on the existing data directory.
    pub ready: Duration,
    pub idle_rss_kib: Option<u64>,
    pub get: Latencies,
    pub create: Latencies,
    /// Objects created for the list (of `config.list_objects`), and how long that took.
    pub seeded: u64,
    pub seed_time: Duration,
    /// Median of five lists of the `seeded` objects.
    pub list_median: Duration,
    /// Sorted delivery latencies of the watch fan-out (`watchers` x [`WATCH_EVENTS`] wanted).
    pub deliveries: Vec<Duration>,
    pub rss_after_kib: Option<u64>,
    /// The server's CPU time from its restart to the end of the run.
    pub server_cpu: Option<Duration>,
    /// The store process's (etcd's) CPU time during the same span and its RSS at the end,
    /// when one was given.
    pub store_cpu: Option<Duration>,
    pub store_rss_kib: Option<u64>,
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

impl LoadFigures {
    /// The `load` benchmark's table rows, (measurement, result).
    pub fn rows(&self) -> Vec<(String, String)> {
        let c = &self.config;
        let mut rows = vec![
            ("first start to /readyz (creates PKI)".to_string(), ms(self.first_ready)),
            ("start to /readyz (existing data dir)".into(), ms(self.ready)),
        ];
        if let Some(kib) = self.idle_rss_kib {
            rows.push(("idle RSS".into(), mib(kib)));
        }
        for (what, l) in [("GET", &self.get), ("create", &self.create)] {
            rows.push((
                format!("{what} p50 / p99 at {} req/s ({} requests, {} errors)", c.rate, l.sorted.len(), l.errors),
                l.p50_p99(),
            ));
        }
        rows.push((format!("list of {} objects (~0.6 KiB each), median of 5", self.seeded), ms(self.list_median)));
        rows.push((
            format!(
                "watch delivery p50 / p99, {} watchers x {WATCH_EVENTS} events ({} delivered)",
                c.watchers,
                self.deliveries.len()
            ),
            format!("{} / {}", ms(pct(&self.deliveries, 0.5)), ms(pct(&self.deliveries, 0.99))),
        ));
        if let Some(kib) = self.rss_after_kib {
            rows.push(("RSS after the run".into(), mib(kib)));
        }
        rows
    }

    /// Creates per second while the list's objects were made ([`SEED_CONCURRENCY`] in flight).
    pub fn seed_rate(&self) -> f64 {
        self.seeded as f64 / self.seed_time.as_secs_f64().max(f64::EPSILON)
    }
}

/// Open-loop load at `rate` req/s for `secs`: every request is its own task, started on
/// schedule whether or not earlier ones finished (a slow server cannot hold the load back);
/// latency is measured from the moment the request task starts sending, so the load
/// generator's timer lateness (tokio timers have 1 ms resolution) is not counted.
pub async fn fixed_rate<F, Fut>(rate: u64, secs: u64, f: F) -> Result<Latencies>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let f = Arc::new(f);
    let total = rate * secs;
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let ok = f(i).await;
            (sent.elapsed(), ok)
        }));
    }
    let mut sorted = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (d, ok) = t.await?;
        if !ok {
            errors += 1;
        }
        sorted.push(d);
    }
    sorted.sort();
    Ok(Latencies { sorted, errors })
}

/// Run the load benchmark against `kustos apiserver --data-dir DIR/data <extra>` (the server's
/// log goes to `DIR/apiserver.log`); `store_pid` is a process whose CPU time during the run is
/// reported too (etcd).
pub async fn run(config: LoadConfig, dir: &Path, extra: &[&str], store_pid: Option<u32>) -> Result<LoadFigures> {
    let LoadConfig { secs, rate, list_objects: list_n, watchers } = config.clone();

    // Cold start (first start creates the PKI), then a restart on the same directory.
    let (first, first_ready) = start("apiserver", &dir.join("data"), extra).await?;
    drop(first);
    let (server, ready) = start("apiserver", &dir.join("data"), extra).await?;
    let server_cpu_before = cpu_time(server.child.id());
    let store_cpu_before = store_pid.and_then(cpu_time);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss_kib = rss_kib(server.child.id());
    let client = admin_client(&server.dir)?;
    let base = server.url.clone();
    let cms = format!("{base}/api/v1/namespaces/default/configmaps");

    // GET at a fixed rate.
    let r = client.post(&cms).json(&json!({"metadata": {"name": "bench-get"}, "data": {"k": "v"}})).send().await?;
    if !r.status().is_success() {
        bail!("seed create failed: {}", r.status());
    }
    let (c, u) = (client.clone(), format!("{cms}/bench-get"));
    let get = fixed_rate(rate, secs, move |_| {
        let (c, u) = (c.clone(), u.clone());
        async move { read_ok(c.get(&u).send().await, 200).await }
    })
    .await?;

    // Durable creates at a fixed rate.
    let (c, u) = (client.clone(), cms.clone());
    let create = fixed_rate(rate, secs, move |i| {
        let (c, u) = (c.clone(), u.clone());
        async move {
            let body = json!({"metadata": {"name": format!("bench-create-{i}")}, "data": {"k": "v".repeat(200)}});
            read_ok(c.post(&u).json(&body).send().await, 201).await
        }
    })
    .await?;

    // List of `list_n` objects in one namespace.
    // A namespace of its own (kube-public holds cluster-info, kube-node-lease the nodes' leases).
    let r = client
        .post(format!("{base}/api/v1/namespaces"))
        .json(&json!({"metadata": {"name": "bench-list"}}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("creating the list namespace failed: {}", r.status());
    }
    let list_ns = format!("{base}/api/v1/namespaces/bench-list/configmaps");
    let seed_start = Instant::now();
    let mut pending = futures::stream::iter(0..list_n)
        .map(|i| {
            let c = client.clone();
            let u = list_ns.clone();
            async move {
                let body = json!({"metadata": {"name": format!("list-{i:05}"), "labels": {"bench": "list"}}, "data": {"payload": "x".repeat(512)}});
                match c.post(&u).json(&body).send().await {
                    Ok(r) if r.status().as_u16() == 201 => r.bytes().await.map(|_| ()).map_err(|e| format!("{e:?}")),
                    Ok(r) => Err(format!("HTTP {}: {}", r.status(), r.text().await.unwrap_or_default())),
                    Err(e) => Err(format!("{e:?}")),
                }
            }
        })
        .buffer_unordered(SEED_CONCURRENCY);
    let mut seeded = 0;
    while let Some(res) = pending.next().await {
        match res {
            Ok(()) => seeded += 1,
            Err(e) => eprintln!("create failed: {e}"),
        }
    }
    let seed_time = seed_start.elapsed();
    let mut list_lat = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = client.get(&list_ns).send().await?;
        let body: serde_json::Value = r.json().await?;
        let n = body["items"].as_array().map(|a| a.len()).unwrap_or(0);
        list_lat.push(t.elapsed());
        if n as u64 != seeded {
            bail!("list returned {n} items, expected {seeded}");
        }
    }
    list_lat.sort();
    let list_median = pct(&list_lat, 0.5);

    // Watch fan-out: `watchers` watches on one namespace, then writes; delivery latency is
    // from just before each write is sent to each watcher's receipt of its event.
    let fan_ns = format!("{base}/api/v1/namespaces/kube-node-lease/configmaps");
    let rv = {
        let body: serde_json::Value = client.get(&fan_ns).send().await?.json().await?;
        body["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string()
    };
    let events = WATCH_EVENTS;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let mut handles = Vec::new();
    // Spread watchers over several clients (connections), as many kubelets would.
    let clients: Vec<reqwest::Client> = (0..10).map(|_| admin_client(&server.dir)).collect::<Result<_>>()?;
    for w in 0..watchers {
        let c = clients[(w % 10) as usize].clone();
        let url = format!("{fan_ns}?watch=true&resourceVersion={rv}&timeoutSeconds=120");
        let tx = tx.clone();
        handles.push(tokio::spawn(async move {
            let Ok(r) = c.get(&url).send().await else { return };
            let mut s = r.bytes_stream();
            let mut buf = Vec::new();
            let mut seen = 0;
            while let Some(Ok(chunk)) = s.next().await {
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) {
                        let name = v["object"]["metadata"]["name"].as_str().unwrap_or("").to_string();
                        let _ = tx.send((name, Instant::now()));
                        seen += 1;
                    }
                }
                if seen >= events {
                    return;
                }
            }
        }));
    }
    drop(tx);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut sent_at = HashMap::new();
    for i in 0..events {
        let name = format!("fan-{i}");
        sent_at.insert(name.clone(), Instant::now());
        client.post(&fan_ns).json(&json!({"metadata": {"name": name}})).send().await?.bytes().await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut deliveries = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while deliveries.len() < (watchers * events) as usize {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((name, at))) => {
                if let Some(s) = sent_at.get(&name) {
                    deliveries.push(at.saturating_duration_since(*s));
                }
            }
            _ => break,
        }
    }
    deliveries.sort();
    for h in handles {
        h.abort();
    }
    let since = |before: Option<Duration>, pid: u32| Some(cpu_time(pid)?.saturating_sub(before?));
    Ok(LoadFigures {
        config,
        first_ready,
        ready,
        idle_rss_kib,
        get,
        create,
        seeded,
        seed_time,
        list_median,
        deliveries,
        rss_after_kib: rss_kib(server.child.id()),
        server_cpu: since(server_cpu_before, server.child.id()),
        store_cpu: store_pid.and_then(|pid| since(store_cpu_before, pid)),
        store_rss_kib: store_pid.and_then(rss_kib),
    })
}
