//! The data directory is private to the user running kustos: the directory and `pki/` 0700,
//! the store (`kustos.db`, `-wal`, `-shm`, `.lock`) and the admin kubeconfig 0600, on a fresh start
//! and, tightened at start, on an install that was left open to other users.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use common::{configmap, send, Server};
use serde_json::json;

const TIGHTENED: &str = "data directory was open to other users";

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// Every path of the data dir that must be private, with the mode it must have.
fn private_paths(data_dir: &Path) -> Vec<(std::path::PathBuf, u32)> {
    vec![
        (data_dir.to_path_buf(), 0o700),
        (data_dir.join("pki"), 0o700),
        (data_dir.join("kustos.db"), 0o600),
        (data_dir.join("kustos.db-wal"), 0o600),
        (data_dir.join("kustos.db-shm"), 0o600),
        (data_dir.join("kustos.db.lock"), 0o600),
        (data_dir.join("admin.kubeconfig"), 0o600),
        (data_dir.join("pki").join("ca.key"), 0o600),
    ]
}

fn assert_private(s: &Server, when: &str) {
    for (path, want) in private_paths(&s.data_dir) {
        assert_eq!(mode(&path), want, "{when}: mode of {} is {:o}", path.display(), mode(&path));
    }
}

/// A write, so that the store has certainly created its WAL and shared-memory files.
async fn write_something(s: &Server) {
    let ns = s.create_namespace("files").await;
    send(
        s.http().post(format!("{}/api/v1/namespaces/{ns}/configmaps", s.url)).json(&configmap("c", json!({"k": "v"}))),
    )
    .await
    .expect_code(201, "creating a configmap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_data_dir_is_private_and_an_open_one_is_tightened_at_start() {
    // The store's files exist only on SQLite: this test pins it.
    let mut s = Server::start_with(&["--storage", "sqlite"]);
    write_something(&s).await;
    assert_private(&s, "fresh start");
    let first_log = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("reading the first log");
    assert!(!first_log.contains(TIGHTENED), "nothing to tighten on a fresh start:\n{first_log}");

    // An install made before the directory was private: 0755 directories, 0644 files.
    s.kill9();
    for (path, want) in private_paths(&s.data_dir) {
        chmod(&path, if want == 0o700 { 0o755 } else { 0o644 });
    }
    s.restart();
    write_something(&s).await;
    assert_private(&s, "restart of an open install");
    let log = std::fs::read_to_string(s.work_dir().join("stderr-1.log")).expect("reading the second log");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(TIGHTENED)).collect();
    assert_eq!(lines.len(), 1, "one line says what was tightened:\n{log}");
    for name in ["kustos.db", "kustos.db-wal", "kustos.db-shm", "kustos.db.lock"] {
        assert!(lines[0].contains(&*s.data_dir.join(name).to_string_lossy()), "{name} named in: {}", lines[0]);
    }
}
