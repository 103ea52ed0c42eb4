//! The end-to-end harness's own decisions (tests/common): which storage backend the suites
//! run against and which flags a server gets for it.

mod common;

use common::{decide_storage, storage_flags};

/// A backend and its etcd servers, or a piece of the error message.
type Want = Result<(&'static str, Option<String>), &'static str>;

#[test]
fn the_backend_follows_kustos_test_storage() {
    let servers = || Some("http://127.0.0.1:2379".to_string());
    let cases: Vec<(&str, Option<&str>, Option<String>, Want)> = vec![
        ("unset is sqlite", None, None, Ok(("sqlite", None))),
        ("sqlite", Some("sqlite"), None, Ok(("sqlite", None))),
        ("sqlite ignores etcd servers", Some("sqlite"), servers(), Ok(("sqlite", None))),
        ("etcd with servers", Some("etcd"), servers(), Ok(("etcd", servers()))),
        ("etcd without servers", Some("etcd"), None, Err("needs KUSTOS_TEST_ETCD_SERVERS")),
        ("an unknown backend", Some("postgres"), servers(), Err("expected sqlite or etcd")),
        ("empty is not unset", Some(""), None, Err("expected sqlite or etcd")),
        ("case matters", Some("ETCD"), servers(), Err("expected sqlite or etcd")),
    ];
    for (name, storage, etcd, want) in cases {
        let got = decide_storage(storage, etcd);
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_eq!(&(g.0, g.1.clone()), w, "{name}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{name}: {e:?} should contain {w:?}"),
            _ => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn servers_get_etcd_flags_unless_the_test_pins_the_storage() {
    let etcd = ("etcd", Some("http://127.0.0.1:2379,http://127.0.0.1:2380".to_string()));
    let sqlite = ("sqlite", None);
    let injected: Vec<String> = [
        "--storage",
        "etcd",
        "--etcd-servers",
        "http://127.0.0.1:2379,http://127.0.0.1:2380",
        "--etcd-prefix",
        "/kustos-e2e/p",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases = vec![
        ("etcd, no args", &etcd, args(&[]), injected.clone()),
        ("etcd, other args", &etcd, args(&["--history-revisions", "5"]), injected.clone()),
        ("etcd, pinned to sqlite", &etcd, args(&["--storage", "sqlite"]), vec![]),
        ("etcd, pinned with =", &etcd, args(&["--storage=etcd", "--etcd-servers=http://x:1"]), vec![]),
        ("etcd, a flag that only starts alike", &etcd, args(&["--storage-x"]), injected.clone()),
        ("sqlite, no args", &sqlite, args(&[]), vec![]),
        ("sqlite, other args", &sqlite, args(&["--history-revisions", "5"]), vec![]),
    ];
    for (name, backend, a, want) in cases {
        assert_eq!(storage_flags(&a, backend, "/kustos-e2e/p"), want, "{name}");
    }
}
