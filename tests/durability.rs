//! Durability of the embedded store: every write acknowledged to a client survives a
//! `kill -9` of the server, and a SIGTERM shuts it down cleanly.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{configmap, send, Server};
use futures::StreamExt;
use serde_json::json;

const OBJECTS: usize = 200;
const CONCURRENCY: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_create_survives_kill_9_with_the_same_resource_version_and_data() {
    let mut s = Server::start_apiserver();
    let http = s.http();
    let ns = s.create_namespace("dur").await;
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);

    type Acked = Result<(String, String), String>;
    let results: Vec<(String, Acked)> = futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let name = format!("d{i:03}");
                let value = format!("value-{i}-{}", "z".repeat(i % 17));
                let r = send(http.post(&url).json(&configmap(&name, json!({ "v": value })))).await;
                if r.code != 201 {
                    return (name, Err(format!("HTTP {}: {}", r.code, r.text)));
                }
                let rv = r.body["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
                (name, Ok((rv, value)))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    // Kill immediately after the last acknowledgement, before looking at anything.
    s.kill9();

    let mut acked: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut failures = Vec::new();
    for (name, r) in results {
        match r {
            Ok(v) => {
                acked.insert(name, v);
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "every create should be acknowledged with 201:\n{}", failures.join("\n"));
    assert_eq!(acked.len(), OBJECTS);
    let mut rvs: Vec<&str> = acked.values().map(|(rv, _)| rv.as_str()).collect();
    rvs.sort();
    rvs.dedup();
    assert_eq!(rvs.len(), OBJECTS, "every create got a distinct resourceVersion");

    s.restart();
    let http = s.http();
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let mut problems = Vec::new();
    for (name, (rv, value)) in &acked {
        let r = send(http.get(format!("{url}/{name}"))).await;
        if r.code != 200 {
            problems.push(format!("{name}: GET → HTTP {} {}", r.code, r.text));
            continue;
        }
        let got_rv = r.body["metadata"]["resourceVersion"].as_str().unwrap_or_default();
        let got_v = r.body["data"]["v"].as_str().unwrap_or_default();
        if got_rv != rv || got_v != value {
            problems.push(format!("{name}: acked rv={rv} v={value}, after restart rv={got_rv} v={got_v}"));
        }
    }
    assert!(problems.is_empty(), "{} acknowledged objects lost or changed:\n{}", problems.len(), problems.join("\n"));
    let list = send(http.get(&url)).await;
    assert_eq!(list.body["items"].as_array().map(|a| a.len()), Some(OBJECTS), "list after restart");

    // The store keeps working after recovery: the next write gets a newer RV.
    let max_rv: u64 = acked.values().filter_map(|(rv, _)| rv.parse().ok()).max().unwrap_or(0);
    let r = send(http.post(&url).json(&configmap("after-restart", json!({})))).await;
    r.expect_code(201, "create after restart");
    let rv: u64 = r.body["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(rv > max_rv, "resourceVersion keeps increasing across restarts: {rv} after {max_rv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly_and_a_restart_serves_the_same_data() {
    let mut s = Server::start_apiserver();
    let http = s.http();
    let ns = s.create_namespace("term").await;
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let created = send(http.post(&url).json(&configmap("kept", json!({"k": "v"})))).await;
    created.expect_code(201, "create");
    let status = s.terminate(Duration::from_secs(30));
    assert!(status.success(), "kustos exits 0 on SIGTERM, got {status}; stderr:\n{}", s.stderr_tail());
    s.restart();
    let http = s.http();
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let r = send(http.get(format!("{url}/kept"))).await;
    r.expect_code(200, "GET after a clean restart");
    assert_eq!(r.body["data"]["k"], "v");
    assert_eq!(r.body["metadata"]["resourceVersion"], created.body["metadata"]["resourceVersion"]);
    // The kubeconfig was rewritten for the new port and the CA kept: kubectl still works.
    let out = s.kubectl_ok(&["get", "cm", "kept", "-n", &ns, "-o", "name"]);
    assert_eq!(out.trim(), "configmap/kept");
    let ready = send(s.anonymous().get(format!("{}/readyz", s.url))).await;
    ready.expect_code(200, "/readyz after restart");
}

/// One process writes a store: a second `kustos server` on a data dir in use, and a
/// migration from it, are refused at once with an error naming the lock, and the first
/// server keeps serving with nothing lost. Once the first has stopped, the data dir opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_a_data_dir_in_use_is_refused_and_the_first_keeps_serving() {
    // SQLite named: the lock is the embedded store's, whatever the suite runs on.
    let mut s = Server::start_with(&["--storage", "sqlite"]);
    let http = s.http();
    let ns = s.create_namespace("lock").await;
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    send(http.post(&url).json(&configmap("before", json!({"k": "1"})))).await.expect_code(201, "create");

    let dir = s.data_dir.display().to_string();
    let in_use = format!(
        "{} is in use: another process holds {}",
        s.data_dir.join("kustos.db").display(),
        s.data_dir.join("kustos.db.lock").display()
    );
    let refused = |args: &[&str], what: &str| {
        let out = common::kustos(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{what}: exit code; stderr:\n{stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("error: ") && last.contains(&in_use), "{what}: {last:?}\nwhole stderr:\n{stderr}");
    };
    refused(&["server", "--data-dir", &dir, "--secure-port", "0"], "a second server");
    refused(&["storage", "migrate", "--from", &format!("sqlite:{dir}"), "--to", "etcd:http://127.0.0.1:1"], "migrate");

    // The first still reads and writes.
    let got = send(http.get(format!("{url}/before"))).await;
    got.expect_code(200, "GET after the refusals");
    assert_eq!(got.body["data"]["k"], "1");
    send(http.post(&url).json(&configmap("after", json!({"k": "2"})))).await.expect_code(201, "create after");

    // A server that stopped, even by kill -9, holds nothing: the data dir starts again.
    s.restart();
    let http = s.http();
    let list = send(http.get(format!("{}/api/v1/namespaces/{ns}/configmaps", s.url))).await;
    list.expect_code(200, "list after restart");
    let names: Vec<&str> = list.body["items"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["metadata"]["name"].as_str()).collect())
        .unwrap_or_default();
    // Besides kube-root-ca.crt, which the controllers publish in every namespace.
    assert!(names.contains(&"before") && names.contains(&"after"), "{names:?}");
}

/// SQLite's writer syncs each commit with `fdatasync`, as SQLite's own Linux build does:
/// `.cargo/config.toml` gives the bundled amalgamation `HAVE_FDATASYNC`, without which it calls
/// `fsync` and so also journals the WAL file's timestamps on every commit. Watched with
/// strace on the writer thread (`kustos-sqlite-w`) while one client creates objects one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_writer_syncs_commits_with_fdatasync() {
    const CREATES: usize = 5;
    let s = Server::start_with(&["--storage", "sqlite"]);
    let http = s.http();
    let ns = s.create_namespace("sync").await;
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let pid = s.pid();
    let tasks = std::path::PathBuf::from(format!("/proc/{pid}/task"));
    let writer = std::fs::read_dir(&tasks)
        .expect("reading the server's threads")
        .filter_map(|t| t.ok())
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "kustos-sqlite-w"))
        .and_then(|t| t.file_name().to_str().map(str::to_owned))
        .expect("the server has a thread named kustos-sqlite-w");

    let trace = s.work_dir().join("sync.strace");
    let mut strace = std::process::Command::new("strace")
        .args(["-qq", "-f", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&trace)
        .args(["-p", &writer])
        .spawn()
        .expect("running strace (scripts/test.sh installs it: apt-get install strace)");
    // Attached once the kernel names a tracer for the thread.
    let status = tasks.join(&writer).join("status");
    let attached = || {
        std::fs::read_to_string(&status)
            .ok()
            .and_then(|st| st.lines().find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim() != "0")))
            .unwrap_or(false)
    };
    for _ in 0..200 {
        if attached() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(attached(), "strace did not attach to the writer thread {writer} within 10 s");

    for i in 0..CREATES {
        let name = format!("s{i}");
        send(http.post(&url).json(&configmap(&name, json!({"k": "v"})))).await.expect_code(201, "create");
    }
    let stopped = std::process::Command::new("kill").args(["-INT", &strace.id().to_string()]).status();
    assert!(stopped.is_ok_and(|st| st.success()), "stopping strace");
    let done = strace.wait().expect("waiting for strace");
    let text = std::fs::read_to_string(&trace).expect("reading strace's output");
    let count =
        |call: &str| text.lines().filter(|l| l.split_whitespace().nth(1).is_some_and(|c| c.starts_with(call))).count();
    assert!(count("fdatasync(") >= CREATES, "one fdatasync per commit at least ({done}):\n{text}");
    assert_eq!(count("fsync("), 0, "no fsync on the writer thread:\n{text}");
}
