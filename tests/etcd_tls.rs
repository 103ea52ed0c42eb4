//! kustos on an etcd that serves clients over TLS only and requires client certificates
//! (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`): the apiserver stores objects there,
//! and without a client certificate it refuses to start with a one-line error.

mod common;

use std::path::{Path, PathBuf};

use common::etcd::{Etcd, Tls};
use common::Server;
use kustos_apiserver::storage::etcd::{EtcdConfig, EtcdStorage};
use kustos_apiserver::storage::Storage;

/// Files of a small PKI for etcd: CA, serving certificate for 127.0.0.1, a client certificate.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn write_key(path: &Path, pem: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    f.write_all(pem.as_bytes()).expect("writing a key");
}

fn make_pki(dir: &Path) -> Pki {
    let now = chrono::Utc::now();
    let ca = kustos_ca::Ca::generate("etcd-test-ca", chrono::Duration::days(1), now).expect("making a CA");
    let day = chrono::Duration::days(1);
    let server = ca
        .issue(kustos_ca::IssueParams::server("etcd", vec!["localhost".into()], vec![[127, 0, 0, 1].into()], day), now)
        .expect("issuing etcd's serving certificate");
    let client =
        ca.issue(kustos_ca::IssueParams::client("kustos", vec![], day), now).expect("issuing a client certificate");
    let pki = Pki {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    };
    std::fs::write(&pki.ca, ca.cert_pem()).expect("writing ca.crt");
    std::fs::write(&pki.server_cert, &server.cert_pem).expect("writing server.crt");
    write_key(&pki.server_key, server.key_pem.as_deref().expect("a generated key"));
    std::fs::write(&pki.client_cert, &client.cert_pem).expect("writing client.crt");
    write_key(&pki.client_key, client.key_pem.as_deref().expect("a generated key"));
    pki
}

#[test]
fn apiserver_on_etcd_over_mutual_tls() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pki = make_pki(dir.path());
    let etcd = Etcd::start_tls(Tls {
        ca_file: pki.ca.clone(),
        cert_file: pki.server_cert.clone(),
        key_file: pki.server_key.clone(),
    });
    let url = etcd.client_url();
    assert!(url.starts_with("https://"), "the fixture serves TLS: {url}");
    let path = |p: &PathBuf| p.display().to_string();
    let (ca, cert, key) = (path(&pki.ca), path(&pki.client_cert), path(&pki.client_key));
    let s = Server::apiserver_with(&[
        "--storage",
        "etcd",
        "--etcd-servers",
        &url,
        "--etcd-prefix",
        "/tls-test",
        "--etcd-cafile",
        &ca,
        "--etcd-certfile",
        &cert,
        "--etcd-keyfile",
        &key,
    ]);
    s.kubectl_ok(&["create", "configmap", "over-tls", "--from-literal=a=b"]);
    let uid = s.kubectl_ok(&["get", "configmap", "over-tls", "-o", "jsonpath={.metadata.uid}"]);

    // The object is in etcd under the prefix, read with the same client certificate.
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let stored = rt.block_on(async {
        let cfg = EtcdConfig {
            servers: vec![url.clone()],
            prefix: "/tls-test".into(),
            ca_file: Some(pki.ca.clone()),
            cert_file: Some(pki.client_cert.clone()),
            key_file: Some(pki.client_key.clone()),
        };
        let store = EtcdStorage::connect(&cfg).await.expect("connecting with the client certificate");
        store.get("/registry/core/configmaps/default/over-tls").await.expect("reading the ConfigMap from etcd")
    });
    let stored = stored.expect("the ConfigMap is stored in etcd");
    let json: serde_json::Value = serde_json::from_slice(&stored.value).expect("stored JSON");
    assert_eq!(json["metadata"]["uid"].as_str(), Some(uid.trim()), "the stored object is the one served");

    // Without a client certificate etcd refuses the connection: the apiserver does not start.
    let out = common::kustos(&[
        "apiserver",
        "--data-dir",
        &dir.path().join("no-cert").display().to_string(),
        "--secure-port",
        "0",
        "--storage",
        "etcd",
        "--etcd-servers",
        &url,
        "--etcd-cafile",
        &ca,
    ]);
    assert!(!out.status.success(), "started without a client certificate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("etcd"), "a one-line error naming etcd: {stderr}");

    // TLS files with an http:// server are a flag error.
    let out = common::kustos(&[
        "apiserver",
        "--data-dir",
        &dir.path().join("bad-flags").display().to_string(),
        "--storage",
        "etcd",
        "--etcd-servers",
        "http://127.0.0.1:1",
        "--etcd-cafile",
        &ca,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("need https://"), "flag error: {stderr}");
}
