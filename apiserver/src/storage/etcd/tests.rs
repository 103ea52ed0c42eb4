//! Unit tests of the etcd backend's pure parts.

use super::*;

#[test]
fn keys_map_under_the_prefix_and_back() {
    // name, prefix, trait key, etcd key
    let cases: &[(&str, &str, &str, &str)] = &[
        ("default prefix", "/registry", "/registry/core/pods/a", "/registry/core/pods/a"),
        ("trailing slash", "/registry/", "/registry/core/pods/a", "/registry/core/pods/a"),
        ("own prefix", "/kustos/one", "/registry/core/pods/a", "/kustos/one/core/pods/a"),
        ("a whole prefix", "/k", "/registry/", "/k/"),
    ];
    for (name, prefix, key, etcd) in cases {
        let keys = Keys::new(prefix);
        let mapped = keys.etcd_key(key).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&mapped), *etcd, "{name}");
        assert_eq!(keys.trait_key(etcd.as_bytes()).as_deref(), Some(*key), "{name}: back");
    }
    let keys = Keys::new("/k");
    assert!(keys.etcd_key("/other/x").is_err(), "a key outside /registry is refused");
    assert!(keys.etcd_key("/registryx/a").is_err(), "a look-alike root is refused");
    assert_eq!(keys.trait_key(b"/kx/a"), None, "a neighbour prefix is not ours");
}

#[test]
fn prefix_ends() {
    let cases: &[(&str, &[u8], &[u8])] =
        &[("plain", b"/a/", b"/a0"), ("carries over 0xff", b"/a\xff", b"/b"), ("all 0xff", b"\xff\xff", b"\x00")];
    for (name, prefix, end) in cases {
        assert_eq!(prefix_end(prefix), end.to_vec(), "{name}");
    }
}

#[test]
fn settings_are_checked() {
    let cfg = |servers: &[&str], f: fn(&mut EtcdConfig)| {
        let mut c = EtcdConfig::new(servers.iter().map(|s| s.to_string()).collect());
        f(&mut c);
        c.validate()
    };
    // name, result, error fragment ("" = valid)
    let cases: Vec<(&str, std::result::Result<(), EtcdConfigError>, &str)> = vec![
        ("one http server", cfg(&["http://127.0.0.1:2379"], |_| {}), ""),
        (
            "two https with files",
            cfg(&["https://a:2379", "https://b:2379"], |c| {
                c.ca_file = Some("ca".into());
                c.cert_file = Some("c".into());
                c.key_file = Some("k".into());
            }),
            "",
        ),
        ("none", cfg(&[], |_| {}), "--etcd-servers is required"),
        ("no scheme", cfg(&["127.0.0.1:2379"], |_| {}), "is not http://HOST:PORT"),
        ("a path", cfg(&["http://a:1/x"], |_| {}), "is not http://HOST:PORT"),
        ("mixed schemes", cfg(&["http://a:1", "https://b:1"], |_| {}), "every server or for none"),
        ("tls files on http", cfg(&["http://a:1"], |c| c.ca_file = Some("ca".into())), "need https://"),
        ("cert without key", cfg(&["https://a:1"], |c| c.cert_file = Some("c".into())), "go together"),
        ("relative prefix", cfg(&["http://a:1"], |c| c.prefix = "registry".into()), "must start with /"),
    ];
    for (name, got, want) in cases {
        match (got, want) {
            (Ok(()), "") => {}
            (Err(e), w) if !w.is_empty() => assert!(e.to_string().contains(w), "{name}: {e}"),
            (got, _) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}
