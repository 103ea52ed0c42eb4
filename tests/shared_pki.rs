//! The shared PKI record of apiservers on etcd (a fixture etcd of each test's own):
//! - an older record put back into etcd after a CA rotation is refused: the apiserver keeps
//!   the new CA, logs an ERROR, `kustos ca status` shows the refusal, and a certificate of
//!   the old CA does not authenticate again;
//! - `kustos pki sync-key rotate` re-seals the record under a new `pki/sync.key` on two
//!   apiservers while a client of the second keeps working; a run killed after a step is
//!   finished by the next, and a CA rotation still reaches both afterwards.
//!
//! Every wait is bounded; nothing asserts on how long anything took.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::{kustos, kustos_ok, run_bounded, send, unique, Server};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::Api;
use kustos_apiserver::pki::sync::SealKey;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const PREFIX: &str = "/shared-pki";

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn etcd_flags(etcd: &Etcd) -> Vec<String> {
    let mut flags = etcd.server_args();
    flags.extend(["--etcd-prefix".to_string(), PREFIX.to_string(), "--log-format".into(), "json".into()]);
    flags
}

/// A data dir for another apiserver beside `first`, holding a copy of `first`'s `pki/`.
fn peer_data_dir(first: &Server) -> PathBuf {
    let dir = first.work_dir().join(unique("peer-data"));
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).expect("creating the peer's pki dir");
    for entry in std::fs::read_dir(first.data_dir.join("pki")).expect("reading the first server's pki dir") {
        let entry = entry.expect("a pki dir entry");
        if entry.file_type().expect("a file type").is_file() {
            std::fs::copy(entry.path(), pki.join(entry.file_name())).expect("copying a pki file");
        }
    }
    dir
}

async fn etcd_client(etcd: &Etcd) -> etcd_client::Client {
    etcd_client::Client::connect([etcd.client_url()], None).await.expect("a plain etcd client")
}

/// The record's etcd key and value.
async fn record(client: &mut etcd_client::Client) -> (String, Vec<u8>) {
    let opts = etcd_client::GetOptions::new().with_prefix();
    let resp = client.get(format!("{PREFIX}/"), Some(opts)).await.expect("reading etcd");
    let kv = resp
        .kvs()
        .iter()
        .find(|kv| kv.key_str().is_ok_and(|k| k.ends_with("/kustos.dev/pki.sealed")))
        .expect("the shared PKI record in etcd");
    (kv.key_str().expect("a UTF-8 key").to_string(), kv.value().to_vec())
}

fn pki_file(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join("pki").join(name)).unwrap_or_default()
}

fn fingerprints(pem: &str) -> Vec<String> {
    kustos_ca::certificates_from_pem(pem).unwrap_or_default().iter().map(|d| kustos_ca::fingerprint(d)).collect()
}

/// The JSON log records of a server's first run.
fn log_records(s: &Server) -> Vec<Value> {
    let text = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("reading the server log");
    text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

/// The shared PKI revision each live apiserver follows (identity Leases).
async fn followed_revisions(s: &Server) -> Vec<u64> {
    let leases: Api<Lease> = Api::namespaced(s.kube_client().await, "kube-system");
    let list = leases
        .list(&ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver"))
        .await
        .expect("listing the identity Leases");
    list.items
        .iter()
        .filter_map(|l| l.metadata.annotations.as_ref()?.get("kustos.dev/shared-pki-revision")?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_record_put_back_into_etcd_does_not_bring_the_old_ca_back() {
    let etcd = Etcd::start();
    let s = Server::apiserver_with(&args(&etcd_flags(&etcd)));
    let dir = s.data_dir.to_str().expect("UTF-8 path").to_string();
    let mut client = etcd_client(&etcd).await;
    let ns = s.create_namespace("rollback").await;
    let path = format!("{}/api/v1/namespaces/{ns}", s.url);

    // Before the rotation: the record, and the admin's identity from the old CA.
    let (key, old_record) = record(&mut client).await;
    let (cert, key_pem) = s.admin_identity_pem();
    let old_admin = s.http_with_identity(&[key_pem, b"\n".to_vec(), cert].concat());
    send(old_admin.get(&path)).await.expect_code(200, "the old CA's admin before the rotation");
    let old_ca = fingerprints(&pki_file(&s.data_dir, "ca.crt"));

    for step in ["begin", "switch", "finish"] {
        kustos_ok(&["ca", "rotate", step, "--data-dir", &dir]);
    }
    let new_ca = fingerprints(&pki_file(&s.data_dir, "ca.crt"));
    assert_eq!(new_ca.len(), 1);
    assert_ne!(new_ca, old_ca);
    let start = Instant::now();
    while send(old_admin.get(&path)).await.code != 401 {
        assert!(start.elapsed() < WAIT, "the old CA is still trusted after finish\n{}", s.stderr_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The old record is put back; the revision of that write.
    let put = client.put(key.as_str(), old_record.clone(), None).await.expect("putting the old record back");
    let put_rev = u64::try_from(put.header().expect("a response header").revision()).expect("a revision");

    // The apiserver follows the record at that revision or later, and has reloaded its
    // files once more (its Lease says so only after a whole quiet interval).
    let start = Instant::now();
    loop {
        let ca = fingerprints(&pki_file(&s.data_dir, "ca.crt"));
        assert_eq!(ca, new_ca, "the apiserver took the old record: its ca.crt holds the old CA again");
        if followed_revisions(&s).await.iter().any(|r| *r >= put_rev) {
            break;
        }
        assert!(start.elapsed() < WAIT, "the apiserver never followed revision {put_rev}\n{}", s.stderr_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(fingerprints(&pki_file(&s.data_dir, "ca.crt")), new_ca, "the new CA is kept");
    assert_eq!(send(old_admin.get(&path)).await.code, 401, "a certificate of the old CA works again");
    send(s.http().get(&path)).await.expect_code(200, "the admin of the new CA");
    assert_ne!(record(&mut client).await.1, old_record, "the apiserver sealed its PKI over the old record");

    // An ERROR names both generations (and no key material).
    let refusals: Vec<Value> = log_records(&s)
        .into_iter()
        .filter(|r| r["fields"]["message"].as_str().is_some_and(|m| m.starts_with("refused the shared PKI record")))
        .collect();
    let first = refusals.first().unwrap_or_else(|| panic!("no refusal logged:\n{}", s.stderr_tail()));
    assert_eq!(first["level"], "ERROR", "{first}");
    let (old_gen, highest) =
        (first["fields"]["record_generation"].as_u64(), first["fields"]["highest_generation"].as_u64());
    assert!(old_gen.is_some() && highest.is_some() && old_gen < highest, "{first}");
    let log = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("the log");
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");

    // `kustos ca status` shows the refusal.
    let status = kustos_ok(&["ca", "status", "--data-dir", &dir]);
    let want = format!(
        "refused a record of generation {}, older than generation {}",
        old_gen.unwrap_or(0),
        highest.unwrap_or(0)
    );
    assert!(status.contains("shared PKI: REFUSED: ") && status.contains(&want), "{status}");
}

/// A client of `s` that reads its admin kubeconfig before every request, until stopped.
fn load(s: Arc<Server>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    tokio::spawn(async move {
        let (mut ok, mut failures) = (0u64, Vec::new());
        for _ in 0..100_000 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            match s.http().get(format!("{}/api/v1/namespaces/kube-system", s.url)).send().await {
                Ok(r) if r.status().is_success() => ok += 1,
                Ok(r) => failures.push(format!("HTTP {}", r.status())),
                Err(e) => failures.push(format!("{e:?}")),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (ok, failures)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seal_key_rotates_on_two_apiservers_while_they_serve() {
    let etcd = Etcd::start();
    let flags = etcd_flags(&etcd);
    let a = Server::apiserver_with(&args(&flags));
    let b = Arc::new(Server::launch_in("apiserver", &peer_data_dir(&a), &args(&flags)));
    let dir_a = a.data_dir.to_str().expect("UTF-8 path").to_string();
    let mut client = etcd_client(&etcd).await;
    let old_key = pki_file(&a.data_dir, "sync.key");
    assert_eq!(pki_file(&b.data_dir, "sync.key"), old_key, "one seal key");
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = load(b.clone(), stop.clone());

    // Killed after its second step: both apiservers go on; a run again finishes.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kustos"));
    cmd.args(["pki", "sync-key", "rotate", "--data-dir", &dir_a])
        .env("KUSTOS_PKI_SYNC_KEY_ROTATE_ABORT_AFTER_STEPS", "2");
    let out = run_bounded(&mut cmd, None, WAIT * 3, "an interrupted sync-key rotation");
    assert!(!out.status.success(), "aborted after its second step");
    let out = kustos_ok(&["pki", "sync-key", "rotate", "--data-dir", &dir_a]);
    assert!(out.contains("going on with the rotation under way"), "{out}");
    assert!(out.contains("sealed under the new sync.key on every apiserver"), "{out}");

    let new_key = pki_file(&a.data_dir, "sync.key");
    assert_ne!(new_key, old_key);
    assert_eq!(pki_file(&b.data_dir, "sync.key"), new_key, "b seals with the new key");
    for d in [&a.data_dir, &b.data_dir] {
        for name in ["sync-next.key", "sync-prev.key", "sync-rotation.json"] {
            assert!(!d.join("pki").join(name).exists(), "{name} left in {}", d.display());
        }
    }
    let (_, value) = record(&mut client).await;
    assert!(SealKey::from_text(&old_key).expect("a key").open(&value).is_err(), "the old key opens the record");
    SealKey::from_text(&new_key).expect("a key").open(&value).expect("the new key opens the record");

    // The shared PKI still works: a CA rotation begun on a reaches b.
    let out = kustos_ok(&["ca", "rotate", "begin", "--data-dir", &dir_a]);
    assert!(out.contains("every apiserver follows the shared PKI (2 of 2)"), "{out}");
    assert_eq!(fingerprints(&pki_file(&b.data_dir, "ca.crt")).len(), 2, "b trusts both CAs");

    // Again, without interruption: a second rotation.
    let out = kustos_ok(&["pki", "sync-key", "rotate", "--data-dir", &dir_a]);
    assert!(out.contains("wrote the new key"), "{out}");
    assert_ne!(pki_file(&b.data_dir, "sync.key"), new_key);
    assert_eq!(pki_file(&b.data_dir, "sync.key"), pki_file(&a.data_dir, "sync.key"));

    stop.store(true, Ordering::SeqCst);
    let (ok, failures) = traffic.await.expect("the load task");
    assert!(failures.is_empty(), "{} failed requests of b's client: {failures:?}\n{}", failures.len(), b.stderr_tail());
    assert!(ok > 0, "the load ran");

    // Without etcd there is no seal key: a clear error.
    let lone = Server::apiserver_with(&["--storage", "sqlite"]);
    let out = kustos(&["pki", "sync-key", "rotate", "--data-dir", lone.data_dir.to_str().expect("UTF-8 path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not share its PKI through etcd") && err.lines().count() == 1, "{err}");
}
