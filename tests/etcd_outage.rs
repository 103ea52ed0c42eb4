//! etcd stopped (kill -9) and started again under a `kustos apiserver` that keeps running:
//! requests fail with a 503/504 Status while it is away and `/readyz` says so, writes succeed
//! again once it is back (no restart of kustos), every ConfigMap acknowledged with a 201 is
//! there, and a watch opened before the outage either delivers every later write or ends
//! (possibly with a 410), after which a relist and a new watch work.
//!
//! Every wait is bounded; nothing asserts on how long anything took.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::{assert_status, configmap, send, Reply, Server, WatchLines};
use serde_json::json;

/// Bound for each wait on the server or the watch.
const WAIT: Duration = Duration::from_secs(60);

fn cms(url: &str, ns: &str) -> String {
    format!("{url}/api/v1/namespaces/{ns}/configmaps")
}

/// What the writer saw: acknowledged ConfigMaps (name → uid), names whose create failed
/// (outcome unknown: they may exist), and the failures.
#[derive(Default)]
struct Written {
    acked: BTreeMap<String, String>,
    unknown: BTreeSet<String>,
    failures: Vec<Reply>,
}

/// The reply is the 503 or 504 Status of a request etcd could not serve; `logs` explain
/// anything else.
fn assert_unavailable(r: &Reply, what: &str, logs: impl Fn() -> String) {
    match r.code {
        503 => assert_status(r, 503, Some("ServiceUnavailable"), what),
        504 => assert_status(r, 504, Some("Timeout"), what),
        other => panic!(
            "{what}: expected a 503 or 504 Status while etcd is down, got HTTP {other}: {}\nserver log:\n{}",
            r.text,
            logs()
        ),
    }
}

/// Waits (bounded) until `done` holds for what the writer has seen.
async fn wait_written(w: &Mutex<Written>, what: &str, logs: impl Fn() -> String, done: impl Fn(&Written) -> bool) {
    let start = Instant::now();
    loop {
        {
            let w = w.lock().unwrap_or_else(|e| e.into_inner());
            if done(&w) {
                return;
            }
            if start.elapsed() > WAIT {
                panic!(
                    "{what} did not happen within {WAIT:?} ({} acknowledged, {} failed); logs:\n{}",
                    w.acked.len(),
                    w.failures.len(),
                    logs()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `GET /readyz?verbose` (bounded) until `done(code, body)`.
async fn wait_readyz(s: &Server, what: &str, done: impl Fn(u16, &str) -> bool) -> String {
    let http = s.http();
    let start = Instant::now();
    loop {
        let r = send(http.get(format!("{}/readyz?verbose", s.url))).await;
        if done(r.code, &r.text) {
            return r.text;
        }
        assert!(start.elapsed() < WAIT, "{what}: /readyz?verbose is still HTTP {}:\n{}", r.code, r.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_an_etcd_outage_and_the_apiserver_recovers_without_a_restart() {
    let mut etcd = Etcd::start();
    let flags = etcd.server_args();
    let s = Server::apiserver_with(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let logs = || s.stderr_tail();
    let http = s.http();
    let ns = s.create_namespace("outage").await;

    // A watch opened before the outage, from a list.
    let list = send(http.get(cms(&s.url, &ns))).await;
    list.expect_code(200, "listing before the outage");
    let from = list.body["metadata"]["resourceVersion"].as_str().expect("a list resourceVersion").to_string();
    let mut watch = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[
        ("watch", "1"),
        ("resourceVersion", from.as_str()),
        ("timeoutSeconds", "600"),
    ]))
    .await;
    assert_eq!(watch.code, 200, "opening the watch");

    // A writer creating ConfigMaps one after another, the whole time.
    let written = Arc::new(Mutex::new(Written::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let (written, stop, http, url) = (written.clone(), stop.clone(), http.clone(), cms(&s.url, &ns));
        async move {
            for i in 0u64.. {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let name = format!("w-{i}");
                let r = send(http.post(&url).json(&configmap(&name, json!({"i": i.to_string()})))).await;
                let failed = r.code != 201;
                {
                    let mut w = written.lock().unwrap_or_else(|e| e.into_inner());
                    if failed {
                        w.unknown.insert(name);
                        w.failures.push(r);
                    } else {
                        let uid = r.body["metadata"]["uid"].as_str().expect("a uid").to_string();
                        w.acked.insert(name, uid);
                    }
                }
                if failed {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    wait_written(&written, "ten acknowledged writes", logs, |w| w.acked.len() >= 10).await;

    // etcd dies mid-load.
    etcd.stop();
    let probe = send(http.post(cms(&s.url, &ns)).json(&configmap("probe-down", json!({})))).await;
    written.lock().unwrap_or_else(|e| e.into_inner()).unknown.insert("probe-down".into());
    assert_unavailable(&probe, "a create while etcd is down", logs);
    let read = send(http.get(cms(&s.url, &ns))).await;
    assert_unavailable(&read, "a list while etcd is down", logs);
    let readyz = wait_readyz(&s, "etcd down", |code, body| code != 200 && body.contains("[-]etcd failed")).await;
    assert!(readyz.contains("readyz check failed"), "/readyz?verbose while etcd is down:\n{readyz}");
    wait_written(&written, "a failed write", logs, |w| !w.failures.is_empty()).await;

    // etcd comes back; writes succeed again, kustos untouched.
    let acked_while_down = written.lock().unwrap_or_else(|e| e.into_inner()).acked.len();
    etcd.start_again();
    wait_written(&written, "an acknowledged write after etcd returned", logs, |w| {
        w.acked.len() >= acked_while_down + 10
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(WAIT, writer).await.expect("the writer stops").expect("the writer task");
    wait_readyz(&s, "etcd back", |code, _| code == 200).await;

    let w = std::mem::take(&mut *written.lock().unwrap_or_else(|e| e.into_inner()));
    for r in &w.failures {
        assert_unavailable(r, "a create of the writer during the outage", logs);
    }

    // Every acknowledged ConfigMap is there, with the uid it was acknowledged with.
    let after = send(http.get(cms(&s.url, &ns))).await;
    after.expect_code(200, "listing after the outage");
    let listed: BTreeMap<String, String> = after.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            (o["metadata"]["name"].as_str().unwrap_or("").into(), o["metadata"]["uid"].as_str().unwrap_or("").into())
        })
        .collect();
    for (name, uid) in &w.acked {
        assert_eq!(listed.get(name), Some(uid), "acknowledged ConfigMap {name} after the outage");
    }
    for name in listed.keys() {
        assert!(w.acked.contains_key(name) || w.unknown.contains(name), "{name} listed but never written");
    }

    // The watch from before the outage: every later write in order, or an end (after which
    // the relist above holds everything, and a new watch works).
    let mut seen = BTreeSet::new();
    let mut last_rv = 0u64;
    let outcome = loop {
        if w.acked.keys().all(|n| seen.contains(n)) {
            break "delivered";
        }
        let Some(ev) = watch.next(WAIT).await else { break "ended" };
        match ev["type"].as_str() {
            Some("ADDED") => {
                let name = ev["object"]["metadata"]["name"].as_str().expect("a name").to_string();
                let rv: u64 = ev["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|r| r.parse().ok())
                    .expect("a numeric resourceVersion");
                assert!(rv > last_rv, "watch events in revision order: {rv} after {last_rv}");
                last_rv = rv;
                assert!(w.acked.contains_key(&name) || w.unknown.contains(&name), "watch: {name} was never written");
                assert!(seen.insert(name.clone()), "watch: {name} added twice");
            }
            Some("BOOKMARK") => {}
            Some("ERROR") => {
                // 410 Expired (or another Status): the watch must end here; the client relists.
                assert_eq!(ev["object"]["kind"], "Status", "a watch ERROR carries a Status: {ev}");
                let end = watch.next(WAIT).await;
                assert!(end.is_none(), "the watch goes on after an ERROR event ({ev}): {end:?}");
                break if ev["object"]["code"] == 410 { "expired" } else { "ended" };
            }
            _ => panic!("unexpected watch event: {ev}"),
        }
    };
    eprintln!("the watch from before the outage: {outcome} ({} of {} acknowledged seen)", seen.len(), w.acked.len());
    if outcome != "delivered" {
        let rv = after.body["metadata"]["resourceVersion"].as_str().expect("the relist's resourceVersion");
        let mut again = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[
            ("watch", "1"),
            ("resourceVersion", rv),
            ("timeoutSeconds", "120"),
        ]))
        .await;
        assert_eq!(again.code, 200, "a watch from the relist");
        send(http.post(cms(&s.url, &ns)).json(&configmap("after-relist", json!({}))))
            .await
            .expect_code(201, "a create after the relist");
        let ev = again.next_non_bookmark(WAIT).await.expect("the new watch ended");
        assert_eq!(
            (ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some("after-relist"))
        );
    }
}
