use super::*;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

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
    let value = key.seal(&content, 7).unwrap();
    assert!(!String::from_utf8_lossy(&value).contains("secret"), "the record holds no key in clear");
    let want = seal::Opened { files: content.clone(), generation: Some(7) };
    assert_eq!(key.open(&value).unwrap(), want);
    assert_eq!(SealKey::from_text(&text).unwrap().open(&value).unwrap(), want, "the key's text is the key");
    assert!(format!("{:#}", other.open(&value).unwrap_err()).contains("another key"));
    // Any changed byte of the sealed data is refused: the generation cannot be changed.
    let record: serde_json::Value = serde_json::from_slice(&value).unwrap();
    let sealed = B64.decode(record["sealed"].as_str().unwrap()).unwrap();
    for i in [0, 12, 20, sealed.len() - 1] {
        let mut tampered = sealed.clone();
        tampered[i] ^= 1;
        let tampered = serde_json::to_vec(&serde_json::json!({ "sealed": B64.encode(&tampered) })).unwrap();
        assert!(key.open(&tampered).is_err(), "byte {i} changed");
    }
    for bad in [&b"not json"[..], br#"{"sealed":"!!"}"#, br#"{"sealed":"AAAA"}"#] {
        assert!(key.open(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
    for bad in ["", "AAAA", "not base64!"] {
        assert!(SealKey::from_text(bad).is_err(), "{bad:?}");
    }
    // A record sealed before records had a generation opens, without one.
    let old = key.seal_without_generation(&content);
    assert_eq!(key.open(&old).unwrap(), seal::Opened { files: content, generation: None });
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
    let sealed = key.seal(&files(&[("ca.crt", "A")]), 1).unwrap();
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

/// Two directories `a` and `b` sharing a PKI on one in-memory store, both having agreed.
async fn two_directories() -> (tempfile::TempDir, PathBuf, PathBuf, Arc<dyn Storage>, PkiSync, PkiSync) {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let store: Arc<dyn Storage> = Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap());
    let now = Utc::now();
    let sync_a = PkiSync::start(store.clone(), &a).await.unwrap();
    let pki_a = super::super::ensure(&a, &[], now).unwrap();
    super::super::write_admin_kubeconfig(&a, &pki_a, "https://127.0.0.1:1", now).unwrap();
    sync_a.round().await.unwrap();
    fs::create_dir_all(b.join("pki")).unwrap();
    fs::copy(a.join("pki").join(SEAL_KEY_FILE), b.join("pki").join(SEAL_KEY_FILE)).unwrap();
    let sync_b = PkiSync::start(store.clone(), &b).await.unwrap();
    let pki_b = super::super::ensure(&b, &[], now).unwrap();
    super::super::write_admin_kubeconfig(&b, &pki_b, "https://127.0.0.1:2", now).unwrap();
    sync_b.round().await.unwrap();
    (tmp, a, b, store, sync_a, sync_b)
}

async fn record(store: &Arc<dyn Storage>) -> crate::storage::KeyValue {
    store.get(RECORD_KEY).await.unwrap().expect("the record")
}

/// Put `value` into the record as someone with etcd access would.
async fn put_back(store: &Arc<dyn Storage>, value: Vec<u8>) {
    let rev = record(store).await.mod_rev;
    store.update(RECORD_KEY, value, rev).await.unwrap();
}

fn generation_of(dir: &Path) -> u64 {
    generation::read(&dir.join("pki")).unwrap().expect("sync-generation.json").generation
}

#[tokio::test]
async fn an_older_record_put_back_is_refused_and_the_newer_pki_sealed_over_it() {
    let (_tmp, a, b, store, sync_a, sync_b) = two_directories().await;
    let old_value = record(&store).await.value;
    let old_generation = generation_of(&a);
    let old_ca_key = fs::read(a.join("pki/ca.key")).unwrap();

    // A CA rotation, followed by both.
    let now = Utc::now();
    for goal in [
        Goal::Begin { import: None },
        Goal::Switch { signer_max_duration_seconds: None },
        Goal::Finish { allowed: true },
    ] {
        rotation::run(&Paths::new(&a), &goal, &NewCa::default(), now, |_| {}).unwrap();
        sync_a.round().await.unwrap();
        sync_b.round().await.unwrap();
        sync_b.follow().unwrap();
    }
    let new_ca_key = fs::read(b.join("pki/ca.key")).unwrap();
    assert_ne!(new_ca_key, old_ca_key);
    let highest = generation_of(&b);
    assert!(highest > old_generation, "every write increments the generation ({old_generation} → {highest})");

    // The record from before the rotation is put back: refused, and b seals its own over it.
    put_back(&store, old_value.clone()).await;
    let round = sync_b.round().await.unwrap();
    let refused = round.refused.expect("the old record is refused");
    assert_eq!((refused.generation, refused.highest, refused.fork), (old_generation, highest, false));
    assert_eq!(refused.resealed_as, Some(highest + 1));
    assert!(round.pulled.is_empty() && round.pushed);
    assert_eq!(fs::read(b.join("pki/ca.key")).unwrap(), new_ca_key, "b keeps the new CA");
    let seen = generation::read(&b.join("pki")).unwrap().unwrap();
    assert_eq!(seen.generation, highest + 1);
    assert_eq!(seen.refused.as_ref().map(|r| r.generation), Some(old_generation), "the refusal is recorded");
    // a takes the record sealed over the old one: nothing changes there.
    let round = sync_a.round().await.unwrap();
    assert!(round.refused.is_none() && round.pulled.is_empty(), "{round:?}");
    assert_eq!(fs::read(a.join("pki/ca.key")).unwrap(), new_ca_key);

    // Put back again while a restarts: a refuses it at start too, and keeps its files.
    put_back(&store, old_value.clone()).await;
    let sync_a = PkiSync::start(store.clone(), &a).await.unwrap();
    assert_eq!(fs::read(a.join("pki/ca.key")).unwrap(), new_ca_key, "not taken at start");
    assert!(sync_a.round().await.unwrap().refused.is_some());
    assert_eq!(fs::read(a.join("pki/ca.key")).unwrap(), new_ca_key);

    // A record of the generation seen but other contents (a fork) is refused too.
    let current = record(&store).await;
    let seen = generation::read(&b.join("pki")).unwrap().unwrap();
    sync_b.round().await.unwrap();
    let ring = keys::KeyRing::read(&b.join("pki")).unwrap();
    let (opened, _) = ring.open(&current.value).unwrap();
    let mut forked_files = opened.files.clone();
    forked_files.insert("ca.key".into(), old_ca_key.clone());
    let generation = generation_of(&b);
    let forked = ring.get(keys::Which::Current).unwrap().seal(&forked_files, generation).unwrap();
    put_back(&store, forked).await;
    let refused = sync_b.round().await.unwrap().refused.expect("a fork is refused");
    assert!(refused.fork, "{refused:?}");
    assert!(seen.generation <= generation);
    assert_eq!(fs::read(b.join("pki/ca.key")).unwrap(), new_ca_key);
}

#[tokio::test]
async fn a_record_no_sync_key_opens_is_refused_once_one_was_followed() {
    let (_tmp, _a, b, store, _sync_a, sync_b) = two_directories().await;
    let ca_key = fs::read(b.join("pki/ca.key")).unwrap();
    let highest = generation_of(&b);
    // A record sealed under a key b does not hold (as one sealed under a sync key retired
    // since, put back).
    let (retired, _) = SealKey::generate().unwrap();
    let foreign = retired.seal(&files(&[("ca.key", "old key"), ("ca.crt", "old cert")]), highest + 5).unwrap();
    put_back(&store, foreign.clone()).await;
    let round = sync_b.round().await.unwrap();
    assert!(!round.pushed && round.pulled.is_empty(), "{round:?}");
    let refused = round.refused.expect("refused");
    assert!(refused.unopened && refused.resealed_as.is_none() && refused.highest == highest, "{refused:?}");
    assert_eq!(record(&store).await.value, foreign, "not sealed over: it may be another cluster's");
    assert_eq!(fs::read(b.join("pki/ca.key")).unwrap(), ca_key, "b keeps its PKI");
    let seen = generation::read(&b.join("pki")).unwrap().unwrap();
    assert!(seen.refused.as_ref().is_some_and(|r| r.unopened), "recorded for `kustos ca status`");
    assert!(seen.refused.unwrap().to_string().contains("does not open with this apiserver's sync keys"));
    // At a restart too: b starts with what it has.
    let restarted = PkiSync::start(store.clone(), &b).await.expect("starts");
    assert!(restarted.round().await.unwrap().refused.is_some_and(|r| r.unopened));
    assert_eq!(fs::read(b.join("pki/ca.key")).unwrap(), ca_key);
    // A directory that never followed a record still fails to start on it (it has nothing).
    let fresh = tempfile::tempdir().unwrap();
    fs::create_dir_all(fresh.path().join("pki")).unwrap();
    fs::copy(b.join("pki").join(SEAL_KEY_FILE), fresh.path().join("pki").join(SEAL_KEY_FILE)).unwrap();
    assert!(PkiSync::start(store.clone(), fresh.path()).await.is_err());
}

#[tokio::test]
async fn a_record_without_a_generation_is_taken_once_and_sealed_again_with_one() {
    let (_tmp, a, b, store, sync_a, sync_b) = two_directories().await;
    // The record as the code before generations wrote it; a and b forget what they saw.
    let key = ensure_seal_key(&a.join("pki")).unwrap();
    let files = read_local(&a.join("pki")).unwrap();
    let legacy = key.seal_without_generation(&files);
    put_back(&store, legacy.clone()).await;
    for dir in [&a, &b] {
        fs::remove_file(dir.join("pki").join(generation::FILE)).unwrap();
    }
    let round = sync_a.round().await.unwrap();
    assert!(round.refused.is_none() && round.pushed, "taken and sealed again at once: {round:?}");
    assert_eq!(key.open(&record(&store).await.value).unwrap().generation, Some(1));
    assert_eq!(generation_of(&a), 1);
    assert!(sync_b.round().await.unwrap().refused.is_none());
    assert_eq!(generation_of(&b), 1);
    // Put back once more, it is older than generation 1: refused.
    put_back(&store, legacy).await;
    let refused = sync_b.round().await.unwrap().refused.expect("refused");
    assert_eq!((refused.generation, refused.highest), (0, 1));
}

/// Every apiserver follows what the other did (what the command waits for).
async fn rounds(syncs: &[&PkiSync]) {
    for _ in 0..2 {
        for s in syncs {
            let round = s.round().await.unwrap();
            assert!(round.refused.is_none(), "{round:?}");
        }
    }
}

#[tokio::test]
async fn the_seal_key_rotates_step_by_step_while_both_directories_follow() {
    let (_tmp, a, b, store, sync_a, sync_b) = two_directories().await;
    let (pa, pb) = (a.join("pki"), b.join("pki"));
    let old_key = fs::read_to_string(pa.join(SEAL_KEY_FILE)).unwrap();
    let old = SealKey::from_text(&old_key).unwrap();
    let start = keys::observe(&pa).unwrap();
    assert!(!start.under_way());
    keys::apply(&pa, &keys::Step::WriteNext).unwrap();
    let mut steps = vec![keys::Step::WriteNext];
    loop {
        rounds(&[&sync_a, &sync_b]).await;
        // Each apiserver opens the record in every state a rotation leaves.
        for p in [&pa, &pb] {
            keys::KeyRing::read(p).unwrap().open(&record(&store).await.value).unwrap();
        }
        let Some(step) = keys::next_step(&keys::observe(&pa).unwrap()).unwrap() else { break };
        keys::apply(&pa, &step).unwrap();
        steps.push(step);
        assert!(steps.len() <= keys::MAX_STEPS, "{steps:?}");
    }
    use keys::Step::*;
    // The apiserver of a makes a's new key its sync.key and drops the old one itself, as
    // every apiserver does: the command has nothing left to do there.
    assert_eq!(steps, [WriteNext, Begin, Switch, RemoveState, RemoveNext]);
    let new_key = fs::read_to_string(pa.join(SEAL_KEY_FILE)).unwrap();
    assert_ne!(new_key, old_key);
    assert_eq!(fs::read_to_string(pb.join(SEAL_KEY_FILE)).unwrap(), new_key, "b seals with the new key");
    for p in [&pa, &pb] {
        for name in [keys::NEXT_KEY, keys::PREV_KEY, keys::STATE_FILE] {
            assert!(!p.join(name).exists(), "{name} left in {}", p.display());
        }
        assert_eq!(fs::metadata(p.join(SEAL_KEY_FILE)).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let value = record(&store).await.value;
    assert!(old.open(&value).is_err(), "the record no longer opens with the old key");
    assert!(SealKey::from_text(&new_key).unwrap().open(&value).is_ok());
    // b restarts on the new key.
    PkiSync::start(store.clone(), &b).await.unwrap();
}
