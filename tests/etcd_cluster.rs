//! Several kustos processes on one etcd (a fixture etcd of each test's own; no environment
//! variable needed):
//! - two `kustos apiserver` (same prefix, shared `pki/`): a watch on one sees a write made
//!   through the other; optimistic concurrency holds across them (a stale update through one
//!   is a 409 after an update through the other, and concurrent read-modify-write loops
//!   through both lose nothing); a kubelet-client CSR created through one is approved and
//!   signed by a `kustos controller-manager` talking to the other; NamespaceLifecycle
//!   follows namespaces created and deleted through the other;
//! - two `kustos server`: exactly one holds the Lease kube-system/kustos-controller-manager
//!   and runs the controllers, and every CSR is signed once;
//! - a CA rotation and a service-account key rotation run on the first apiserver's directory
//!   are followed by the second (the shared PKI in etcd), while a client of the second keeps
//!   working: its trust bundle, its own serving certificate and admin kubeconfig, its tokens.
//!
//! Every wait is bounded; nothing asserts on how long anything took.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::kubelet::{
    bootstrap_token, client_for, replica_args, request_node_certificate, watch_certificates, Seen, KUBELET_CLIENT,
};
use common::{assert_status, configmap, kustos_ok, send, token_user, unique, ControllerManager, Server, WatchLines};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::{json, Value};

/// Bound for each wait on a watch, the controllers or the election.
const WAIT: Duration = Duration::from_secs(60);
/// The Lease `kustos server` elects its controllers' leader on.
const SERVER_LEASE: &str = "kustos-controller-manager";

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A data dir for another server beside `first`, holding a copy of `first`'s `pki/` (same
/// CA and service-account keys), inside `first`'s work dir.
fn peer_data_dir(first: &Server) -> PathBuf {
    let dir = first.work_dir().join(unique("peer-data"));
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).expect("creating the peer's pki dir");
    for entry in std::fs::read_dir(first.data_dir.join("pki")).expect("reading the first server's pki dir") {
        let entry = entry.expect("a pki dir entry");
        if entry.file_type().expect("a file type").is_file() {
            // std::fs::copy keeps the permission bits (keys stay 0600).
            std::fs::copy(entry.path(), pki.join(entry.file_name())).expect("copying a pki file");
        }
    }
    dir
}

/// Two `kustos <subcommand>` on `etcd`, the second with a copy of the first's PKI.
fn two_on(etcd: &Etcd, subcommand: &'static str, extra: &[&str]) -> (Server, Server) {
    let mut flags = etcd.server_args();
    flags.extend(extra.iter().map(|s| s.to_string()));
    let first = match subcommand {
        "server" => Server::start_with(&args(&flags)),
        _ => Server::apiserver_with(&args(&flags)),
    };
    let second = Server::launch_in(subcommand, &peer_data_dir(&first), &args(&flags));
    (first, second)
}

fn cms(url: &str, ns: &str) -> String {
    format!("{url}/api/v1/namespaces/{ns}/configmaps")
}

fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"].as_str().unwrap_or_else(|| panic!("no resourceVersion in {obj}")).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_apiserver_reaches_a_watch_on_the_other_and_no_update_is_lost() {
    let etcd = Etcd::start();
    let (a, b) = two_on(&etcd, "apiserver", &[]);
    let (ha, hb) = (a.http(), b.http());
    let ns = a.create_namespace("cluster").await;

    // A watch on B, from B's list.
    let list = send(hb.get(cms(&b.url, &ns))).await;
    list.expect_code(200, "listing ConfigMaps through B");
    let from = rv(&list.body);
    let mut w = WatchLines::open(hb.get(cms(&b.url, &ns)).query(&[
        ("watch", "1"),
        ("resourceVersion", from.as_str()),
        ("timeoutSeconds", "300"),
    ]))
    .await;
    assert_eq!(w.code, 200, "opening the watch on B");

    // Created through A: B's watch delivers it, same uid and resourceVersion.
    let created = send(ha.post(cms(&a.url, &ns)).json(&configmap("shared", json!({"v": "0"})))).await;
    created.expect_code(201, "creating a ConfigMap through A");
    let ev = w.next_non_bookmark(WAIT).await.expect("the watch on B ended before the create");
    assert_eq!(ev["type"], "ADDED", "B's watch event for A's create: {ev}");
    assert_eq!(ev["object"]["metadata"]["uid"], created.body["metadata"]["uid"], "uid seen on B: {ev}");
    assert_eq!(rv(&ev["object"]), rv(&created.body), "resourceVersion seen on B: {ev}");

    // Both read the same revision; A updates; B's update from the old revision is a 409.
    let path = |url: &str| format!("{}/shared", cms(url, &ns));
    let read_a = send(ha.get(path(&a.url))).await;
    let read_b = send(hb.get(path(&b.url))).await;
    read_a.expect_code(200, "GET through A");
    read_b.expect_code(200, "GET through B");
    assert_eq!(rv(&read_a.body), rv(&read_b.body), "both servers read the same revision");
    let mut via_a = read_a.body.clone();
    via_a["data"]["v"] = json!("a");
    let updated = send(ha.put(path(&a.url)).json(&via_a)).await;
    updated.expect_code(200, "update through A");
    let mut via_b = read_b.body.clone();
    via_b["data"]["v"] = json!("b");
    let stale = send(hb.put(path(&b.url)).json(&via_b)).await;
    assert_status(&stale, 409, Some("Conflict"), "update through B from the revision A replaced");
    let now = send(hb.get(path(&b.url))).await;
    now.expect_code(200, "GET through B after the conflict");
    assert_eq!(now.body["data"], json!({"v": "a"}), "A's change is kept: {}", now.text);
    assert_eq!(rv(&now.body), rv(&updated.body), "B serves A's revision");

    // B's watch: A's update, then A's next one; B's refused write never shows.
    let mut again = now.body.clone();
    again["data"]["v"] = json!("a2");
    send(ha.put(path(&a.url)).json(&again)).await.expect_code(200, "second update through A");
    for want in ["a", "a2"] {
        let ev = w.next_non_bookmark(WAIT).await.expect("the watch on B ended");
        assert_eq!(ev["type"], "MODIFIED", "B's watch event for A's update to {want}: {ev}");
        assert_eq!(ev["object"]["data"]["v"], want, "B's watch: A's updates in order, nothing else: {ev}");
    }

    // Read-modify-write loops through both servers at once, retrying on 409: every
    // increment lands.
    const PER_SERVER: u64 = 15;
    let counter = configmap("counter", json!({"n": "0"}));
    send(ha.post(cms(&a.url, &ns)).json(&counter)).await.expect_code(201, "creating the counter");
    let increments = |http: reqwest::Client, url: String| async move {
        let path = format!("{url}/counter");
        let (mut done, mut conflicts) = (0, 0);
        for _ in 0..(PER_SERVER * 50) {
            if done == PER_SERVER {
                break;
            }
            let cur = send(http.get(&path)).await;
            cur.expect_code(200, "reading the counter");
            let n: u64 = cur.body["data"]["n"].as_str().and_then(|n| n.parse().ok()).expect("a number");
            let mut next = cur.body.clone();
            next["data"]["n"] = json!((n + 1).to_string());
            let put = send(http.put(&path).json(&next)).await;
            match put.code {
                200 => done += 1,
                409 => conflicts += 1,
                other => panic!("updating the counter: HTTP {other}: {}", put.text),
            }
        }
        assert_eq!(done, PER_SERVER, "increments through {url} ({conflicts} conflicts on the way)");
        conflicts
    };
    let (ca, cb) = tokio::join!(
        tokio::spawn(increments(ha.clone(), cms(&a.url, &ns))),
        tokio::spawn(increments(hb.clone(), cms(&b.url, &ns)))
    );
    let (ca, cb) = (ca.expect("A's loop"), cb.expect("B's loop"));
    let fin = send(ha.get(format!("{}/counter", cms(&a.url, &ns)))).await;
    assert_eq!(
        fin.body["data"]["n"],
        json!((2 * PER_SERVER).to_string()),
        "no lost update ({ca} + {cb} conflicts retried): {}",
        fin.text
    );
}

/// NamespaceLifecycle reads the namespace as its apiserver knows it (upstream's informer),
/// and the latest state only when it knows no such namespace: a namespace created through A
/// takes content through B at once; one A marked for deletion refuses content through A at
/// once, and through B as soon as B has seen the deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_lifecycle_follows_namespaces_made_and_deleted_through_the_other_apiserver() {
    let etcd = Etcd::start();
    let (a, b) = two_on(&etcd, "apiserver", &[]);
    let (ha, hb) = (a.http(), b.http());
    for i in 0..5 {
        let ns = a.create_namespace("lifecycle").await;
        let cm = configmap(&format!("first-{i}"), json!({}));
        send(hb.post(cms(&b.url, &ns)).json(&cm)).await.expect_code(201, "content through B in A's new namespace");
    }
    let ns = a.create_namespace("lifecycle").await;
    // A finalizer on a content object keeps the namespace Terminating.
    let mut anchor = configmap("anchor", json!({}));
    anchor["metadata"]["finalizers"] = json!(["example.com/hold"]);
    send(hb.post(cms(&b.url, &ns)).json(&anchor)).await.expect_code(201, "the anchor through B");
    let d = send(ha.delete(format!("{}/api/v1/namespaces/{ns}", a.url))).await;
    assert!(d.code == 200 || d.code == 202, "DELETE the namespace through A: {} {}", d.code, d.text);
    let r = send(ha.post(cms(&a.url, &ns)).json(&configmap("late-a", json!({})))).await;
    assert_status(&r, 403, Some("Forbidden"), "a create through A right after A's delete");
    let deadline = Instant::now() + WAIT;
    let mut accepted = 0;
    loop {
        let r = send(hb.post(cms(&b.url, &ns)).json(&configmap(&format!("late-b-{accepted}"), json!({})))).await;
        match r.code {
            403 => {
                assert_status(&r, 403, Some("Forbidden"), "a create through B after A's delete");
                break;
            }
            201 => accepted += 1,
            other => panic!("a create through B after A's delete: HTTP {other}: {}", r.text),
        }
        assert!(Instant::now() < deadline, "B still accepts content in the terminating namespace ({accepted})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until the watch saw a certificate for `name`, then checks through
/// `admin` that the CSR is Approved and holds that certificate. `logs` explain a timeout.
async fn wait_signed(seen: &Seen, admin: &kube::Client, name: &str, logs: impl Fn() -> String) {
    let start = Instant::now();
    for _ in 0..600 {
        let cert = seen.lock().unwrap_or_else(|e| e.into_inner()).get(name).and_then(|c| c.iter().next().cloned());
        if let Some(cert) = cert {
            let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
            let status = api.get(name).await.expect("reading the CSR").status.unwrap_or_default();
            let conditions = status.conditions.unwrap_or_default();
            assert!(
                conditions.iter().any(|c| c.type_ == "Approved" && c.status == "True"),
                "CSR {name} was signed without an Approved condition: {conditions:?}"
            );
            assert_eq!(status.certificate.map(|c| c.0), Some(cert.clone()), "CSR {name}: the certificate read back");
            assert!(
                String::from_utf8_lossy(&cert).starts_with("-----BEGIN CERTIFICATE-----"),
                "CSR {name}: a PEM certificate"
            );
            return;
        }
        if start.elapsed() > WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("CSR {name} was not signed within {WAIT:?}; logs:\n{}", logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csr_created_through_one_apiserver_is_signed_by_a_controller_manager_talking_to_the_other() {
    let etcd = Etcd::start();
    let (a, b) = two_on(&etcd, "apiserver", &[]);
    let through_a = a.kube_client().await;
    let (seen, watch) = watch_certificates(through_a.clone());

    // The controller-manager knows only B: B's admin kubeconfig, the (shared) cluster CA.
    let lease = unique("kcm");
    let cm_args = replica_args(&b, &lease);
    let cm = ControllerManager::start_with_kubeconfig(&b, &b.kubeconfig, &args(&cm_args));

    // A kubelet with a bootstrap token asks A; the certificate shows through A.
    let token = bootstrap_token(&a, 'e').await;
    let boot = client_for(&token_user(&a, "kubelet-bootstrap", &token).kubeconfig).await;
    let name = unique("node-csr");
    request_node_certificate(&boot, &name, &unique("n")).await;
    wait_signed(&seen, &through_a, &name, || {
        format!("controller-manager:\n{}\n---- A:\n{}\n---- B:\n{}", cm.stderr_tail(), a.stderr_tail(), b.stderr_tail())
    })
    .await;
    let signed = format!("kustos_csr_signed_total{{signer=\"{KUBELET_CLIENT}\"}}");
    assert_eq!(cm.metric(&signed).await, Some(1.0), "the controller-manager on B signed it");
    let leases: Api<Lease> = Api::namespaced(through_a, "kube-system");
    let holder = leases.get(&lease).await.expect("the controller-manager's Lease, read through A");
    assert!(
        holder.spec.and_then(|s| s.holder_identity).is_some_and(|h| !h.is_empty()),
        "the Lease the controller-manager took through B is held, seen through A"
    );
    watch.abort();
}

/// The JSON log records of a server's first run with `message`.
fn log_records(s: &Server, message: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("reading the server log");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == message)
        .collect()
}

/// The identity a server stands for election with, from its log.
fn candidate(s: &Server) -> Option<String> {
    let records = log_records(s, "attempting to acquire the leader lease");
    records.first().and_then(|r| r["fields"]["identity"].as_str()).map(str::to_string)
}

fn acquired(s: &Server) -> usize {
    log_records(s, "successfully acquired the lease; starting the controllers").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_servers_on_one_etcd_one_runs_the_controllers_and_each_csr_is_signed_once() {
    let etcd = Etcd::start();
    let (s1, s2) = two_on(&etcd, "server", &["--log-format", "json"]);
    let servers = [&s1, &s2];
    let logs = || servers.iter().map(|s| s.stderr_tail()).collect::<Vec<_>>().join("\n----\n");

    // Both stand for election; the Lease names one of them, and only that one leads.
    let leases: Api<Lease> = Api::namespaced(s1.kube_client().await, "kube-system");
    let start = Instant::now();
    let (ids, holder) = loop {
        let ids: Vec<Option<String>> = servers.iter().map(|s| candidate(s)).collect();
        let holder = leases
            .get_opt(SERVER_LEASE)
            .await
            .expect("reading the Lease")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty());
        if let ([Some(i1), Some(i2)], Some(h)) = (ids.as_slice(), &holder) {
            if servers.iter().map(|s| acquired(s)).sum::<usize>() >= 1 {
                break ([i1.clone(), i2.clone()], h.clone());
            }
        }
        assert!(
            start.elapsed() < WAIT,
            "no election within {WAIT:?} (candidates {ids:?}, holder {holder:?}):\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(ids[0], ids[1], "the servers stand with identities of their own");
    let leader = ids
        .iter()
        .position(|i| *i == holder)
        .unwrap_or_else(|| panic!("the Lease holder {holder:?} is neither server ({ids:?}):\n{}", logs()));
    let standby = 1 - leader;

    // Kubelets ask through either server; a watch through the standby sees each certificate.
    let (seen, watch) = watch_certificates(servers[standby].kube_client().await);
    let token = bootstrap_token(&s1, 'e').await;
    let mut names = Vec::new();
    for s in servers {
        let boot = client_for(&token_user(s, "kubelet-bootstrap", &token).kubeconfig).await;
        let name = unique("node-csr");
        request_node_certificate(&boot, &name, &unique("n")).await;
        wait_signed(&seen, &s.kube_client().await, &name, logs).await;
        names.push(name);
    }

    // Each CSR's certificate was set once: one distinct value seen by the watch.
    {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        for name in &names {
            assert_eq!(seen.get(name).map(BTreeSet::len), Some(1), "distinct certificates seen for {name}");
        }
    }
    // Still one leader, the same: the standby never started its controllers.
    assert_eq!(acquired(servers[leader]), 1, "the leader acquired the Lease once:\n{}", logs());
    assert_eq!(acquired(servers[standby]), 0, "the standby never led:\n{}", logs());
    let lease = leases.get(SERVER_LEASE).await.expect("the Lease").spec.unwrap_or_default();
    assert_eq!(lease.holder_identity.as_deref(), Some(holder.as_str()), "the Lease's holder");
    assert_eq!(lease.lease_transitions.unwrap_or(0), 0, "the Lease never changed hands");
    watch.abort();
}

fn pki_file(s: &Server, name: &str) -> String {
    std::fs::read_to_string(s.data_dir.join("pki").join(name)).unwrap_or_default()
}

fn fingerprints(pem: &str) -> Vec<String> {
    kustos_ca::certificates_from_pem(pem).unwrap_or_default().iter().map(|d| kustos_ca::fingerprint(d)).collect()
}

async fn token_through(s: &Server, ns: &str) -> String {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let r =
        send(s.http().post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts/robot/token", s.url)).json(&body)).await;
    r.expect_code(201, "TokenRequest");
    r.body["status"]["token"].as_str().expect("a token").to_string()
}

/// Who `token` is on `s` (SelfSubjectReview), or the HTTP code when it is refused.
async fn whoami(s: &Server, token: &str) -> Result<String, u16> {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = send(
        s.anonymous()
            .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url))
            .bearer_auth(token)
            .json(&body),
    )
    .await;
    match r.code {
        201 => Ok(r.body["status"]["userInfo"]["username"].as_str().unwrap_or_default().to_string()),
        code => Err(code),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_run_on_one_apiservers_directory_are_followed_by_the_other() {
    let etcd = Etcd::start();
    let (a, b) = two_on(&etcd, "apiserver", &[]);
    let dir_a = a.data_dir.to_str().expect("UTF-8 path").to_string();
    let ns = a.create_namespace("pki").await;
    send(
        b.http()
            .post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts", b.url))
            .json(&json!({"metadata": {"name": "robot"}})),
    )
    .await
    .expect_code(201, "service account");
    let token_before = token_through(&b, &ns).await;
    let robot = format!("system:serviceaccount:{ns}:robot");

    // A client of the second apiserver that reads its admin kubeconfig before every request.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let b = std::sync::Arc::new(b);
    let load = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut ok, mut failures) = (0u64, Vec::new());
            for _ in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                match b.http().get(format!("{}/api/v1/namespaces/kube-system", b.url)).send().await {
                    Ok(r) if r.status().is_success() => ok += 1,
                    Ok(r) => failures.push(format!("HTTP {}", r.status())),
                    Err(e) => failures.push(format!("{e:?}")),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (ok, failures)
        })
    };

    let old = fingerprints(&pki_file(&a, "ca.crt"));
    assert_eq!(old.len(), 1);
    assert_eq!(fingerprints(&pki_file(&b, "ca.crt")), old, "one cluster CA");

    // begin: the second apiserver trusts both CAs, and so does its admin kubeconfig.
    // Each command returns once every apiserver follows.
    let out = kustos_ok(&["ca", "rotate", "begin", "--data-dir", &dir_a]);
    assert!(out.contains("every apiserver follows the shared PKI (2 of 2)"), "{out}");
    let both = fingerprints(&pki_file(&a, "ca.crt"));
    assert_eq!(both.len(), 2);
    assert_eq!(fingerprints(&pki_file(&b, "ca.crt")), both, "b trusts both CAs");
    assert_eq!(fingerprints(&String::from_utf8_lossy(&b.ca_pem())), both, "b's admin kubeconfig trusts both CAs");

    // switch: the second apiserver's serving certificate comes from the new CA, with its own
    // names, chained with the cross-signed CA; its admin certificate too.
    let (cert, key) = b.admin_identity_pem();
    let b_old_admin = b.http_with_identity(&[key, b"\n".to_vec(), cert].concat());
    let out = kustos_ok(&["ca", "rotate", "switch", "--data-dir", &dir_a]);
    assert!(out.contains("every apiserver follows the shared PKI (2 of 2)"), "{out}");
    let new_ca_der = kustos_ca::certificates_from_pem(&pki_file(&a, "ca.crt")).expect("bundle")[1].clone();
    let chain_of_b = || kustos_ca::certificates_from_pem(&pki_file(&b, "apiserver.crt")).unwrap_or_default();
    let chain = chain_of_b();
    assert!(
        chain.len() == 2 && kustos_ca::signed_by(&chain[0], &new_ca_der),
        "b's certificate from the new CA, chained"
    );
    let cert = kustos_ca::certificates_from_pem(&String::from_utf8_lossy(&b.admin_identity_pem().0)).expect("cert");
    assert!(kustos_ca::signed_by(&cert[0], &new_ca_der), "b's admin certificate from the new CA");
    let new_only = common::client_trusting_only(&new_ca_der);
    let start = Instant::now();
    while new_only.get(format!("{}/readyz", b.url)).send().await.is_err() {
        assert!(start.elapsed() < WAIT, "b does not serve the new chain\n{}", b.stderr_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The first apiserver's new admin certificate authenticates on the second.
    let (cert, key) = a.admin_identity_pem();
    let identity = [key, b"\n".to_vec(), cert].concat();
    send(b.http_with_identity(&identity).get(format!("{}/api/v1/namespaces/{ns}", b.url)))
        .await
        .expect_code(200, "a's new admin certificate on b");

    // finish: the old CA is gone from the second apiserver's bundle and chain.
    let out = kustos_ok(&["ca", "rotate", "finish", "--data-dir", &dir_a]);
    assert!(out.contains("every apiserver follows the shared PKI (2 of 2)"), "{out}");
    let new = vec![kustos_ca::fingerprint(&new_ca_der)];
    assert_eq!(fingerprints(&pki_file(&b, "ca.crt")), new, "b trusts only the new CA");
    assert_eq!(chain_of_b().len(), 1, "b's chain is the leaf alone");
    assert_eq!(fingerprints(&String::from_utf8_lossy(&b.ca_pem())), new, "b's admin kubeconfig");
    // b's admin certificate from before the switch (old CA) no longer authenticates on b.
    let start = Instant::now();
    while send(b_old_admin.get(format!("{}/api/v1/namespaces/{ns}", b.url))).await.code != 401 {
        assert!(start.elapsed() < WAIT, "b still trusts the old CA\n{}", b.stderr_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A service-account key rotation on the first directory: tokens of the new key verify on
    // the second, and the token issued before still does on both.
    let kid_before = pki_file(&a, "sa.pub");
    let out = kustos_ok(&["sa-key", "rotate", "--data-dir", &dir_a]);
    assert!(out.contains("every apiserver follows the shared PKI (2 of 2)"), "{out}");
    assert_ne!(pki_file(&b, "sa.pub"), kid_before, "b signs with the new service-account key");
    let start = Instant::now();
    loop {
        let token_after = token_through(&a, &ns).await;
        match (whoami(&b, &token_after).await, whoami(&a, &token_through(&b, &ns).await).await) {
            (Ok(u1), Ok(u2)) if u1 == robot && u2 == robot => break,
            other => assert!(start.elapsed() < WAIT, "tokens of the new key: {other:?}\n{}", b.stderr_tail()),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for s in [&a, &*b] {
        assert_eq!(whoami(s, &token_before).await, Ok(robot.clone()), "the token from before the rotation");
    }

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (ok, failures) = load.await.expect("load task");
    assert!(failures.is_empty(), "{} failed requests of b's client: {failures:?}\n{}", failures.len(), b.stderr_tail());
    assert!(ok > 0, "the load ran");
}
