//! `kustos storage migrate`: a `kustos server` on SQLite gets a mix of objects and is
//! stopped; its state is copied into a fixture etcd (a second run is refused without
//! `--force`, then accepted with it); `kustos server --storage etcd` on the same data dir
//! serves every object exactly as SQLite did, resourceVersions aside, and accepts a token
//! issued before the move; the way back (etcd → SQLite) copies etcd's content byte for byte.
//! Bad `--from`/`--to` are a one-line error and exit code 1, and create nothing.
//!
//! Every wait is bounded; nothing asserts on how long anything took.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::etcd::Etcd;
use common::{kustos, send, unique, Server};
use kustos_apiserver::storage::etcd::{EtcdConfig, EtcdStorage};
use kustos_apiserver::storage::sqlite::SqliteStorage;
use kustos_apiserver::storage::{ListOptions, Storage};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// Every collection compared, listed across namespaces.
const COLLECTIONS: &[&str] = &[
    "/api/v1/namespaces",
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/serviceaccounts",
    "/apis/rbac.authorization.k8s.io/v1/roles",
    "/apis/rbac.authorization.k8s.io/v1/rolebindings",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/certificates.k8s.io/v1/certificatesigningrequests",
    "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
    "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
];

/// What a server serves: `collection namespace/name` → the object without
/// `metadata.resourceVersion`.
async fn served(s: &Server) -> BTreeMap<String, Value> {
    let http = s.http();
    let mut out = BTreeMap::new();
    for c in COLLECTIONS {
        let r = send(http.get(format!("{}{c}", s.url))).await;
        r.expect_code(200, &format!("listing {c}"));
        for item in r.body["items"].as_array().unwrap_or_else(|| panic!("{c}: no items: {}", r.text)) {
            let mut item = item.clone();
            let meta = item["metadata"].as_object_mut().unwrap_or_else(|| panic!("{c}: an item without metadata"));
            assert!(meta.remove("resourceVersion").is_some(), "{c}: an item without resourceVersion");
            let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
            let name =
                meta.get("name").and_then(Value::as_str).unwrap_or_else(|| panic!("{c}: unnamed item")).to_string();
            out.insert(format!("{c} {ns}/{name}"), item);
        }
    }
    out
}

/// Every key and value of a store under `/registry/`.
async fn contents(store: &dyn Storage) -> BTreeMap<String, Vec<u8>> {
    let page = store.list("/registry/", ListOptions::default()).await.expect("listing the store");
    assert_eq!(page.remaining, 0, "one page holds everything");
    page.items.into_iter().map(|kv| (kv.key, kv.value)).collect()
}

async fn sqlite_contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let db = dir.join("kustos.db");
    assert!(db.is_file(), "{} exists", db.display());
    let store = SqliteStorage::open(&db).expect("opening the SQLite store");
    contents(&store).await
}

/// A client CSR for `user`, PEM.
fn csr_pem(user: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, user);
    params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM")
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// `kustos storage migrate <args>`: (exit code, stdout, stderr).
fn migrate(args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["storage", "migrate"];
    all.extend_from_slice(args);
    let out = kustos(&all);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_created_on_sqlite_are_served_identically_from_etcd_after_migrate() {
    // A standalone server on SQLite, with a mix of objects.
    // SQLite named explicitly: this is the store migrated from, whatever the suite runs on.
    let s = Server::start_with(&["--storage", "sqlite"]);
    let (a, b) = (unique("mig-a"), unique("mig-b"));
    let csr = unique("mig-csr");
    let manifest = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": a, "labels": {"team": "x"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": b}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": a,
            "labels": {"app": "web"}, "annotations": {"note": "ünïcode ✓"}},
            "data": {"k": "v", "multi": "line one\nline two"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "binary", "namespace": b},
            "binaryData": {"blob": "AAEC/w=="}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": a},
            "type": "Opaque", "stringData": {"password": "s3cret"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "basic", "namespace": b},
            "type": "kubernetes.io/basic-auth", "stringData": {"username": "u", "password": "p"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder", "namespace": b}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader", "namespace": b},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "builder-reads", "namespace": b},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": b}]},
        {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": csr},
            "spec": {"request": b64(&csr_pem("jane")), "signerName": "kubernetes.io/kube-apiserver-client",
                "usages": ["client auth"], "expirationSeconds": 3600}},
    ]});
    for item in manifest["items"].as_array().expect("items") {
        let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&item.to_string()));
        common::succeeded(&format!("kubectl apply of {item}"), out);
    }
    s.kubectl_ok(&["certificate", "approve", &csr]);
    s.wait_for_object(
        &format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{csr}"),
        "signing",
        WAIT,
        |o| o["status"]["certificate"].as_str().is_some_and(|c| !c.is_empty()),
    )
    .await;
    // The controllers' own objects: the SA's ConfigMap of the root CA in both namespaces.
    for ns in [&a, &b] {
        s.wait_for_object(&format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt"), "publishing", WAIT, |_| {
            true
        })
        .await;
    }
    let token = s.kubectl_ok(&["create", "token", "builder", "-n", &b, "--duration=1h"]).trim().to_string();
    let before = served(&s).await;
    for key in [
        format!("/api/v1/namespaces /{a}"),
        format!("/api/v1/configmaps {a}/settings"),
        format!("/api/v1/configmaps {b}/binary"),
        format!("/api/v1/secrets {a}/creds"),
        format!("/api/v1/secrets {b}/basic"),
        format!("/api/v1/serviceaccounts {b}/builder"),
        format!("/apis/rbac.authorization.k8s.io/v1/roles {b}/reader"),
        format!("/apis/rbac.authorization.k8s.io/v1/rolebindings {b}/builder-reads"),
        format!("/apis/certificates.k8s.io/v1/certificatesigningrequests /{csr}"),
        "/api/v1/namespaces /kube-system".into(),
        "/api/v1/namespaces /default".into(),
    ] {
        assert!(before.contains_key(&key), "SQLite serves {key}");
    }
    let status = s.terminate(WAIT);
    assert!(status.success(), "kustos server exits 0 on SIGTERM: {status}\n{}", s.stderr_tail());
    let stored = sqlite_contents(&s.data_dir).await;

    // Into etcd; the same again is refused; --force writes anyway.
    let etcd = Etcd::start();
    let url = etcd.client_url();
    let from = format!("sqlite:{}", s.data_dir.display());
    let to = format!("etcd:{url}");
    let n = stored.len();
    let (code, stdout, stderr) = migrate(&["--from", &from, "--to", &to]);
    assert_eq!(code, Some(0), "first migrate: {stderr}");
    assert_eq!(stdout, format!("copied {n} objects from {from} to {to} (prefix /registry)\n"), "first migrate");
    let (code, stdout, stderr) = migrate(&["--from", &from, "--to", &to]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "second migrate without --force: {stderr}");
    assert_eq!(
        stderr,
        format!("error: {to} (prefix /registry) already holds {n} objects under /registry/; --force writes into it anyway\n"),
        "second migrate without --force"
    );
    let (code, stdout, stderr) = migrate(&["--from", &from, "--to", &to, "--force"]);
    assert_eq!(code, Some(0), "migrate --force: {stderr}");
    assert_eq!(
        stdout,
        format!(
            "copied {n} objects from {from} to {to} (prefix /registry); {n} of them replaced objects {to} (prefix \
             /registry) held\n"
        ),
        "migrate --force"
    );
    let etcd_store = EtcdStorage::connect(&EtcdConfig::new(vec![url.clone()])).await.expect("connecting to etcd");
    assert_eq!(contents(&etcd_store).await, stored, "etcd holds SQLite's keys and values, byte for byte");

    // kustos on etcd, same data dir (same PKI): everything served as before.
    let mut flags = etcd.server_args();
    flags.extend(["--log-format".to_string(), "json".to_string()]);
    let e = Server::launch_in("server", &s.data_dir, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let after = served(&e).await;
    let mut differ = Vec::new();
    for (key, was) in &before {
        match after.get(key) {
            None => differ.push(format!("{key}: gone")),
            Some(now) if now != was => differ.push(format!("{key}:\n  sqlite: {was}\n  etcd:   {now}")),
            Some(_) => {}
        }
    }
    // kube-public/cluster-info holds the server's URL: the new server's port is another.
    let cluster_info = "/api/v1/configmaps kube-public/cluster-info";
    differ.retain(|d| !d.starts_with(&format!("{cluster_info}:\n")));
    assert!(differ.is_empty(), "objects differ after the move:\n{}", differ.join("\n"));
    assert_eq!(
        after[cluster_info]["metadata"]["uid"], before[cluster_info]["metadata"]["uid"],
        "cluster-info is the same object (uid)"
    );

    // A token issued on SQLite authenticates on etcd (same service-account key, same SA uid).
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let who = send(
        e.anonymous()
            .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", e.url))
            .bearer_auth(&token)
            .json(&review),
    )
    .await;
    who.expect_code(201, "SelfSubjectReview with the token from before the move");
    assert_eq!(
        who.body["status"]["userInfo"]["username"],
        format!("system:serviceaccount:{b}:builder"),
        "the token's user: {}",
        who.text
    );

    // And back: etcd → SQLite (a new data dir) copies etcd's content byte for byte.
    let status = e.terminate(WAIT);
    assert!(status.success(), "kustos server on etcd exits 0 on SIGTERM: {status}\n{}", e.stderr_tail());
    let back = e.work_dir().join("back");
    std::fs::create_dir(&back).expect("creating the data dir to migrate back into");
    let now_in_etcd = contents(&etcd_store).await;
    let back_spec = format!("sqlite:{}", back.display());
    let nowhere = format!("sqlite:{}", e.work_dir().join("nope").display());
    let (code, _, stderr) = migrate(&["--from", &to, "--to", &nowhere]);
    assert_eq!(code, Some(1), "migrate into a data dir that does not exist: {stderr}");
    assert!(stderr.ends_with("nope is not a directory\n"), "migrate into a data dir that does not exist: {stderr}");
    let (code, stdout, stderr) = migrate(&["--from", &to, "--to", &back_spec]);
    assert_eq!(code, Some(0), "migrate back: {stderr}");
    assert_eq!(
        stdout,
        format!("copied {} objects from {to} (prefix /registry) to {back_spec}\n", now_in_etcd.len()),
        "migrate back"
    );
    assert_eq!(sqlite_contents(&back).await, now_in_etcd, "SQLite holds etcd's keys and values, byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_and_missing_stores_are_one_line_errors_with_exit_code_1_and_create_nothing() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = |name: &str| {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d).expect("creating a dir");
        d
    };
    let empty = dir("empty");
    let target = dir("target");
    let no_db = dir("no-db");
    // A store without objects (a wrong data dir, never a cluster).
    let blank = dir("blank");
    drop(SqliteStorage::open(&blank.join("kustos.db")).expect("creating an empty store"));
    // A port nothing listens on.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        format!("etcd:http://{}", l.local_addr().expect("its address"))
    };
    let sq = |d: &Path| format!("sqlite:{}", d.display());
    let spec_err = "must be sqlite:DATA_DIR or etcd:URL[,URL...]";
    let case = |name: &'static str, from: &str, to: &str, extra: &[&str], want: &str| {
        let mut args = vec!["--from".to_string(), from.to_string(), "--to".to_string(), to.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        (name, args, want.to_string())
    };
    let (bad_from, bad_to) = (format!("error: --from {spec_err}"), format!("error: --to {spec_err}"));
    let unreachable = format!("error: opening {closed} (prefix /registry): ");
    let cases = [
        case("--from without a scheme", "./data", &closed, &[], &bad_from),
        case("--from sqlite without a dir", "sqlite:", &closed, &[], &bad_from),
        case("--to with an unknown scheme", &sq(&no_db), "mysql:db", &[], &bad_to),
        case("--to etcd without a URL", &sq(&no_db), "etcd:", &[], &bad_to),
        case("--to etcd with an empty URL", &sq(&no_db), "etcd:http://127.0.0.1:1,", &[], &bad_to),
        case("--to etcd URL without a scheme", &sq(&no_db), "etcd:127.0.0.1:2379", &[], &bad_to),
        case("both sqlite", &sq(&no_db), &sq(&target), &[], "error: --from and --to are both sqlite"),
        case("both etcd", &closed, &closed, &[], "error: --from and --to are both etcd"),
        case("a data dir without kustos.db", &sq(&no_db), &closed, &[], "kustos.db does not exist"),
        case("a data dir that does not exist", &sq(&tmp.path().join("nope")), &closed, &[], "kustos.db does not exist"),
        case("a store without objects", &sq(&blank), &closed, &[], "holds no objects under /registry/"),
        case("an unreachable etcd source", &closed, &sq(&target), &[], &unreachable),
        case("TLS files for an http etcd", &closed, &sq(&empty), &["--etcd-cafile", "/dev/null"], "need https://"),
    ];
    for (name, args, want) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = migrate(&args);
        assert_eq!(code, Some(1), "{name}: exit code; stderr: {stderr}");
        assert_eq!(stdout, "", "{name}: nothing on stdout");
        assert!(stderr.starts_with("error: "), "{name}: {stderr:?}");
        assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr:?}");
        assert!(stderr.contains(want.as_str()), "{name}: {stderr:?} does not say {want:?}");
    }
    for d in [&empty, &target, &no_db] {
        let left: Vec<_> = std::fs::read_dir(d).expect("reading a dir").collect();
        assert!(left.is_empty(), "{}: nothing created in it: {left:?}", d.display());
    }
    assert!(!tmp.path().join("nope").exists(), "no data dir created");
}
