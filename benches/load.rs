//! Load benchmark: starts the real `kustos apiserver` (release build) on a free port and
//! drives it over HTTPS with the admin client certificate.
//!
//! Run: `cargo bench --bench load` (settings via env: BENCH_SECONDS, BENCH_RATE,
//! BENCH_LIST_OBJECTS, BENCH_WATCHERS). Figures are printed as a Markdown table; see
//! docs/BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use common::{admin_client, env_u64, ms, pct, read_ok, rss_kib, start};
use futures::StreamExt;
use serde_json::json;

/// Open-loop load at `rate` req/s for `secs`: every request is its own task, started on
/// schedule whether or not earlier ones finished (a slow server cannot hold the load back);
/// latency is measured from the moment the request task starts sending, so the load
/// generator's timer lateness (tokio timers have 1 ms resolution) is not counted.
async fn fixed_rate<F, Fut>(rate: u64, secs: u64, f: F) -> Result<(Vec<Duration>, usize)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let f = Arc::new(f);
    let total = rate * secs;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
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
    let mut lat = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (d, ok) = t.await?;
        if !ok {
            errors += 1;
        }
        lat.push(d);
    }
    lat.sort();
    Ok((lat, errors))
}

#[tokio::main]
async fn main() -> Result<()> {
    let secs = env_u64("BENCH_SECONDS", 10);
    let rate = env_u64("BENCH_RATE", 1000);
    let list_n = env_u64("BENCH_LIST_OBJECTS", 10_000);
    let watchers = env_u64("BENCH_WATCHERS", 1000);
    let tmp = tempfile::tempdir()?;
    let mut rows: Vec<(String, String)> = Vec::new();

    // Cold start (first start creates the PKI), then a restart on the same directory.
    let (first, first_ready) = start("apiserver", &tmp.path().join("data"), &[]).await?;
    drop(first);
    let (server, ready) = start("apiserver", &tmp.path().join("data"), &[]).await?;
    rows.push(("first start to /readyz (creates PKI)".into(), ms(first_ready)));
    rows.push(("start to /readyz (existing data dir)".into(), ms(ready)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    if let Some(kib) = rss_kib(server.child.id()) {
        rows.push(("idle RSS".into(), format!("{:.1} MiB", kib as f64 / 1024.0)));
    }
    let client = admin_client(&server.dir)?;
    let base = server.url.clone();
    let cms = format!("{base}/api/v1/namespaces/default/configmaps");

    // GET at a fixed rate.
    let r = client.post(&cms).json(&json!({"metadata": {"name": "bench-get"}, "data": {"k": "v"}})).send().await?;
    if !r.status().is_success() {
        bail!("seed create failed: {}", r.status());
    }
    let (c, u) = (client.clone(), format!("{cms}/bench-get"));
    let (lat, errs) = fixed_rate(rate, secs, move |_| {
        let (c, u) = (c.clone(), u.clone());
        async move { read_ok(c.get(&u).send().await, 200).await }
    })
    .await?;
    rows.push((
        format!("GET p50 / p99 at {rate} req/s ({} requests, {errs} errors)", lat.len()),
        format!("{} / {}", ms(pct(&lat, 0.5)), ms(pct(&lat, 0.99))),
    ));

    // Durable creates at a fixed rate.
    let (c, u) = (client.clone(), cms.clone());
    let (lat, errs) = fixed_rate(rate, secs, move |i| {
        let (c, u) = (c.clone(), u.clone());
        async move {
            let body = json!({"metadata": {"name": format!("bench-create-{i}")}, "data": {"k": "v".repeat(200)}});
            read_ok(c.post(&u).json(&body).send().await, 201).await
        }
    })
    .await?;
    rows.push((
        format!("create p50 / p99 at {rate} req/s ({} requests, {errs} errors)", lat.len()),
        format!("{} / {}", ms(pct(&lat, 0.5)), ms(pct(&lat, 0.99))),
    ));

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
        .buffer_unordered(64);
    let mut created = 0;
    while let Some(res) = pending.next().await {
        match res {
            Ok(()) => created += 1,
            Err(e) => eprintln!("create failed: {e}"),
        }
    }
    let mut list_lat = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = client.get(&list_ns).send().await?;
        let body: serde_json::Value = r.json().await?;
        let n = body["items"].as_array().map(|a| a.len()).unwrap_or(0);
        list_lat.push(t.elapsed());
        if n as u64 != created {
            bail!("list returned {n} items, expected {created}");
        }
    }
    list_lat.sort();
    rows.push((format!("list of {created} objects (~0.6 KiB each), median of 5"), ms(pct(&list_lat, 0.5))));

    // Watch fan-out: `watchers` watches on one namespace, then writes; delivery latency is
    // from just before each write is sent to each watcher's receipt of its event.
    let fan_ns = format!("{base}/api/v1/namespaces/kube-node-lease/configmaps");
    let rv = {
        let body: serde_json::Value = client.get(&fan_ns).send().await?.json().await?;
        body["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string()
    };
    let events = 20u64;
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
    let mut sent_at = std::collections::HashMap::new();
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
    rows.push((
        format!("watch delivery p50 / p99, {watchers} watchers x {events} events ({} delivered)", deliveries.len()),
        format!("{} / {}", ms(pct(&deliveries, 0.5)), ms(pct(&deliveries, 0.99))),
    ));
    for h in handles {
        h.abort();
    }
    if let Some(kib) = rss_kib(server.child.id()) {
        rows.push(("RSS after the run".into(), format!("{:.1} MiB", kib as f64 / 1024.0)));
    }

    println!("| measurement | result |\n| --- | --- |");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    Ok(())
}
