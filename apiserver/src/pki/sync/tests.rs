use super::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;

fn files(items: &[(&str, &str)]) -> Files {
    items.iter().map(|(n, c)| (n.to_string(), c.as_bytes().to_vec())).collect()
}

fn write(name: &'static str, c: &str) -> (&'static str, Option<Vec<u8>>) {
    (name, Some(c.as_bytes().to_vec()))
}

struct Case {
    name: &'static str,
    local: Files,
    base: Option<Files>,
    remote: Option<Files>,
    local_changes: Vec<(&'static str, Option<Vec<u8>>)>,
    push: Option<Files>,
    conflicts: Vec<&'static str>,
}

fn cases() -> Vec<Case> {
    let ca = files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa.key", "s")]);
    vec![
        Case {
            name: "no record: this directory's files become it",
            local: ca.clone(),
            base: None,
            remote: None,
            local_changes: vec![],
            push: Some(ca.clone()),
            conflicts: vec![],
        },
        Case {
            name: "no record and no files: nothing",
            local: Files::new(),
            base: None,
            remote: None,
            local_changes: vec![],
            push: None,
            conflicts: vec![],
        },
        Case {
            name: "in agreement",
            local: ca.clone(),
            base: Some(ca.clone()),
            remote: Some(ca.clone()),
            local_changes: vec![],
            push: None,
            conflicts: vec![],
        },
        Case {
            name: "a new directory takes the record's files",
            local: files(&[("ca.crt", "X"), ("ca.key", "x")]),
            base: None,
            remote: Some(ca.clone()),
            local_changes: vec![write("ca.crt", "A"), write("ca.key", "a"), write("sa.key", "s")],
            push: None,
            conflicts: vec![],
        },
        Case {
            name: "changed here: pushed",
            local: files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s"), ("ca-next.key", "b")]),
            base: Some(ca.clone()),
            remote: Some(ca.clone()),
            local_changes: vec![],
            push: Some(files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s"), ("ca-next.key", "b")])),
            conflicts: vec![],
        },
        Case {
            name: "changed in the record: pulled, new files before the bundle, removals last",
            local: files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa.key", "s"), ("rotation.json", "r")]),
            base: Some(files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa.key", "s"), ("rotation.json", "r")])),
            remote: Some(files(&[
                ("ca.crt", "AB"),
                ("ca.key", "a"),
                ("sa.key", "s"),
                ("ca-next.key", "b"),
                ("ca-next.crt", "B"),
            ])),
            local_changes: vec![
                write("ca-next.key", "b"),
                write("ca-next.crt", "B"),
                write("ca.crt", "AB"),
                ("rotation.json", None),
            ],
            push: None,
            conflicts: vec![],
        },
        Case {
            name: "different files changed on each side: both kept",
            local: files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa.key", "s2")]),
            base: Some(ca.clone()),
            remote: Some(files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s")])),
            local_changes: vec![write("ca.crt", "AB")],
            push: Some(files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s2")])),
            conflicts: vec![],
        },
        Case {
            name: "the same file changed on both sides: the record's kept",
            local: files(&[("ca.crt", "AC"), ("ca.key", "a"), ("sa.key", "s")]),
            base: Some(ca.clone()),
            remote: Some(files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s")])),
            local_changes: vec![write("ca.crt", "AB")],
            push: None,
            conflicts: vec!["ca.crt"],
        },
        Case {
            name: "the same change on both sides: no conflict",
            local: files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s")]),
            base: Some(ca.clone()),
            remote: Some(files(&[("ca.crt", "AB"), ("ca.key", "a"), ("sa.key", "s")])),
            local_changes: vec![],
            push: None,
            conflicts: vec![],
        },
        Case {
            name: "removed here (a finished rotation): removed from the record",
            local: ca.clone(),
            base: Some(files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa.key", "s"), ("ca-cross.crt", "c")])),
            remote: Some(files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa.key", "s"), ("ca-cross.crt", "c")])),
            local_changes: vec![],
            push: Some(ca.clone()),
            conflicts: vec![],
        },
    ]
}

#[test]
fn plan_table() {
    for c in cases() {
        let base = c.base.as_ref().map(hashes);
        let p = plan(&c.local, base.as_ref(), c.remote.as_ref());
        assert_eq!(p.local, c.local_changes, "{}: local changes", c.name);
        assert_eq!(p.push, c.push, "{}: push", c.name);
        assert_eq!(p.conflicts, c.conflicts, "{}: conflicts", c.name);
        // What both sides hold afterwards.
        let mut after = c.local.clone();
        for (name, contents) in &p.local {
            match contents {
                Some(b) => after.insert(name.to_string(), b.clone()),
                None => after.remove(*name),
            };
        }
        assert_eq!(p.agreed, hashes(&after), "{}: agreed = this directory afterwards", c.name);
        let record = p.push.clone().or(c.remote.clone()).unwrap_or_default();
        assert_eq!(p.agreed, hashes(&record), "{}: agreed = the record afterwards", c.name);
    }
}

#[test]
fn retired_service_account_keys_of_both_sides_survive_a_conflict() {
    let key = |kid: &str, expire: Option<&str>| json!({"kid": kid, "publicKey": "PEM", "retiredAt": "2026-01-01T00:00:00Z", "tokensExpireBy": expire});
    let state = |keys: Vec<serde_json::Value>| {
        let keys: Vec<serde_json::Value> = keys
            .into_iter()
            .map(|mut k| {
                if k["tokensExpireBy"].is_null() {
                    k.as_object_mut().unwrap().remove("tokensExpireBy");
                }
                k
            })
            .collect();
        serde_json::to_vec(&json!({ "retired": keys })).unwrap()
    };
    let with = |json: Vec<u8>| -> Files { [("sa-keys.json".to_string(), json)].into_iter().collect() };
    let base = with(state(vec![key("k1", None)]));
    // Here: a rotation retired k2. There: another apiserver recorded k1's token window.
    let local = with(state(vec![key("k1", None), key("k2", None)]));
    let remote = with(state(vec![key("k1", Some("2026-02-01T00:00:00Z"))]));
    let p = plan(&local, Some(&hashes(&base)), Some(&remote));
    assert_eq!(p.conflicts, ["sa-keys.json"]);
    let merged = p.push.expect("the joined state is pushed");
    let joined: sa_keys::KeyState = serde_json::from_slice(&merged["sa-keys.json"]).unwrap();
    assert_eq!(joined.retired_kids(), ["k1", "k2"]);
    assert!(joined.retired[0].tokens_expire_by.is_some(), "k1's window kept");
    assert_eq!(p.local, vec![("sa-keys.json", Some(merged["sa-keys.json"].clone()))], "and written here");
    // A side that does not parse: the record's version is kept.
    let garbled = with(b"{".to_vec());
    let p = plan(&garbled, Some(&hashes(&base)), Some(&remote));
    assert_eq!(p.push, None);
    assert_eq!(p.local, vec![("sa-keys.json", Some(remote["sa-keys.json"].clone()))]);
}

#[test]
fn sealed_records_open_only_with_their_key_and_untouched() {
    let (key, text) = SealKey::generate().unwrap();
    let (other, _) = SealKey::generate().unwrap();
    let content = files(&[("ca.key", "-----BEGIN PRIVATE KEY-----secret"), ("ca.crt", "cert")]);
    let value = key.seal(&content).unwrap();
    assert!(!String::from_utf8_lossy(&value).contains("secret"), "the record holds no key in clear");
    assert_eq!(key.open(&value).unwrap(), content);
    assert_eq!(SealKey::from_text(&text).unwrap().open(&value).unwrap(), content, "the key's text is the key");
    assert!(format!("{:#}", other.open(&value).unwrap_err()).contains("another key"));
    // Any changed byte of the sealed data is refused.
    let record: serde_json::Value = serde_json::from_slice(&value).unwrap();
    let mut sealed = B64.decode(record["sealed"].as_str().unwrap()).unwrap();
    let last = sealed.len() - 1;
    sealed[last] ^= 1;
    let tampered = serde_json::to_vec(&serde_json::json!({ "sealed": B64.encode(&sealed) })).unwrap();
    assert!(key.open(&tampered).is_err());
    for bad in [&b"not json"[..], br#"{"sealed":"!!"}"#, br#"{"sealed":"AAAA"}"#] {
        assert!(key.open(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
    for bad in ["", "AAAA", "not base64!"] {
        assert!(SealKey::from_text(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn files_round_trip_with_private_keys_0600() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path();
    assert_eq!(read_local(pki).unwrap(), Files::new());
    let changes =
        vec![write("ca.crt", "A"), write("ca.key", "a"), write("sa-keys.json", "{}"), write("rotation.json", "{}")];
    write_local(pki, &changes).unwrap();
    let mode = |n: &str| fs::metadata(pki.join(n)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("ca.key"), 0o600);
    assert_eq!(mode("ca.crt"), 0o644);
    assert_eq!(
        read_local(pki).unwrap(),
        files(&[("ca.crt", "A"), ("ca.key", "a"), ("sa-keys.json", "{}"), ("rotation.json", "{}")])
    );
    write_local(pki, &[("rotation.json", None), ("ca-cross.crt", None)]).unwrap();
    assert!(!pki.join("rotation.json").exists());
    // Files that are not shared are never read.
    fs::write(pki.join("apiserver.key"), "mine").unwrap();
    assert!(!read_local(pki).unwrap().contains_key("apiserver.key"));
    let key = ensure_seal_key(pki).unwrap();
    assert_eq!(mode(SEAL_KEY_FILE), 0o600);
    let again = ensure_seal_key(pki).unwrap();
    let sealed = key.seal(&files(&[("ca.crt", "A")])).unwrap();
    assert!(again.open(&sealed).is_ok(), "an existing sync.key is kept");
}

fn ca_count(dir: &Path) -> usize {
    kustos_ca::bundle::ca_certificates(&fs::read_to_string(dir.join("pki/ca.crt")).unwrap()).unwrap().len()
}

fn same(a: &Path, b: &Path, name: &str) -> bool {
    fs::read(a.join("pki").join(name)).ok() == fs::read(b.join("pki").join(name)).ok()
}

/// Two apiservers' directories on one store, with real files: a rotation made in one is
/// followed by the other, whose own serving certificate keeps its own names.
#[tokio::test]
async fn a_second_directory_follows_rotations_made_in_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let store: Arc<dyn Storage> = Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap());
    let now = Utc::now();

    let sync_a = PkiSync::start(store.clone(), &a).await.unwrap();
    let pki_a = super::super::ensure(&a, &[], now).unwrap();
    super::super::write_admin_kubeconfig(&a, &pki_a, "https://127.0.0.1:1", now).unwrap();
    assert!(sync_a.round().await.unwrap().pushed, "the first directory makes the record");

    // The second directory starts with only the seal key.
    fs::create_dir_all(b.join("pki")).unwrap();
    fs::copy(a.join("pki").join(SEAL_KEY_FILE), b.join("pki").join(SEAL_KEY_FILE)).unwrap();
    let sync_b = PkiSync::start(store.clone(), &b).await.unwrap();
    for name in ["ca.crt", "ca.key", "sa.key", "sa.pub"] {
        assert!(same(&a, &b, name), "{name} taken from the record");
    }
    let pki_b = super::super::ensure(&b, &["b.example".to_string()], now).unwrap();
    super::super::write_admin_kubeconfig(&b, &pki_b, "https://127.0.0.1:2", now).unwrap();
    let round = sync_b.round().await.unwrap();
    assert!(round.pulled.is_empty() && !round.pushed && round.conflicts.is_empty(), "nothing of b's own is shared");
    assert!(round.revision > 0, "b agrees with the record at its revision");
    assert_eq!(sync_b.follow().unwrap(), vec![]);

    let paths_a = Paths::new(&a);
    let sync_both = || async {
        sync_a.round().await.unwrap();
        let round = sync_b.round().await.unwrap();
        let followed = sync_b.follow().unwrap();
        (round, followed)
    };
    let goals = [
        Goal::Begin { import: None },
        Goal::Switch { signer_max_duration_seconds: None },
        Goal::Finish { allowed: true },
    ];
    let mut followed_steps = Vec::new();
    for goal in &goals {
        rotation::run(&paths_a, goal, &NewCa::default(), now, |_| {}).unwrap();
        let (round, followed) = sync_both().await;
        assert!(!round.pulled.is_empty(), "{goal:?}: b pulled");
        for name in SHARED {
            assert!(same(&a, &b, name.name), "{goal:?}: {} the same in both", name.name);
        }
        let obs = rotation::observe(&Paths::new(&b), now).unwrap();
        assert_eq!(rotation::next_step(&Goal::Follow, &obs), Ok(None), "{goal:?}: b followed");
        assert_eq!(obs.serving_issuer.as_deref(), Some(obs.signer.as_str()));
        assert_eq!(obs.serving_chained, goal == &goals[1], "{goal:?}: chained only while switched");
        followed_steps.extend(followed);
    }
    assert_eq!(ca_count(&b), 1);
    assert_ne!(fs::read(b.join("pki/ca.key")).unwrap(), pki_a.ca_key_pem().into_bytes(), "the new CA signs");
    assert!(followed_steps.contains(&rotation::Step::IssueServing), "{followed_steps:?}");
    let serving = kustos_ca::parse_certificate_pem(&fs::read_to_string(b.join("pki/apiserver.crt")).unwrap()).unwrap();
    assert!(serving.dns_names.contains(&"b.example".to_string()), "b's own names kept: {:?}", serving.dns_names);

    // A service-account key rotation made in b reaches a.
    let (key_pem, target) = sa_keys::target_key(&b.join("pki"), None).unwrap();
    sa_keys::run(&b.join("pki"), &key_pem, &target, now, |_| {}).unwrap();
    sync_b.round().await.unwrap();
    sync_a.round().await.unwrap();
    for name in [sa_keys::SIGNING_KEY, sa_keys::SIGNING_PUB, sa_keys::STATE_FILE] {
        assert!(same(&a, &b, name), "{name} the same in both");
    }
    assert_eq!(sa_keys::read_state(&a.join("pki")).unwrap().retired.len(), 1);

    // A directory without the seal key, or with another one, does not join.
    let c = tmp.path().join("c");
    let Err(err) = PkiSync::start(store.clone(), &c).await else { panic!("c joined without a seal key") };
    assert!(format!("{err:#}").contains("sync.key is missing"), "{err:#}");
    assert!(!c.join("pki").join(SEAL_KEY_FILE).exists(), "no key of its own was made");
    ensure_seal_key(&c.join("pki")).unwrap();
    let Err(err) = PkiSync::start(store.clone(), &c).await else { panic!("c joined a PKI sealed with another key") };
    assert!(format!("{err:#}").contains("does not open"), "{err:#}");
}
