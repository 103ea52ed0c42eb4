use super::*;
use chrono::TimeZone as _;
use serde_json::{json, Value};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 6, 1, 0, 0, 0).unwrap()
}

fn obs(signing: &str, pub_matches: bool, next: Option<&str>, retired: &[&str]) -> Observed {
    Observed {
        signing: signing.into(),
        pub_matches,
        next: next.map(str::to_string),
        next_exists: next.is_some(),
        retired: retired.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn rotation_steps() {
    let cases: Vec<(&str, Observed, Option<Step>)> = vec![
        ("nothing yet: the new key is written", obs("A", true, None, &[]), Some(Step::WriteNext)),
        ("a next key of another rotation is replaced", obs("A", true, Some("C"), &[]), Some(Step::WriteNext)),
        (
            "the signing key is retired before it stops signing",
            obs("A", true, Some("B"), &[]),
            Some(Step::RetireCurrent),
        ),
        ("then the new key signs", obs("A", true, Some("B"), &["A"]), Some(Step::InstallNext)),
        ("sa.pub follows", obs("B", false, Some("B"), &["A"]), Some(Step::WritePub)),
        ("sa-next.key goes last", obs("B", true, Some("B"), &["A"]), Some(Step::RemoveNext)),
        ("done", obs("B", true, None, &["A"]), None),
        ("an imported key that signs already: nothing to do", obs("B", true, None, &[]), None),
        (
            "a broken sa-next.key is replaced",
            Observed { next_exists: true, ..obs("A", true, None, &[]) },
            Some(Step::WriteNext),
        ),
    ];
    for (what, o, want) in cases {
        assert_eq!(next_step("B", &o), want, "{what}");
    }
}

fn retired(kid: &str, at: DateTime<Utc>, until: Option<DateTime<Utc>>) -> RetiredKey {
    RetiredKey { kid: kid.into(), public_key: String::new(), retired_at: at, tokens_expire_by: until }
}

#[test]
fn token_windows_are_filled_once() {
    let hour = 3600;
    let mut s = KeyState { retired: vec![retired("A", t0(), None), retired("B", t0(), Some(t0()))] };
    assert!(fill_expiry(&mut s, hour));
    assert_eq!(s.retired[0].tokens_expire_by, Some(t0() + Duration::seconds(hour + PRUNE_MARGIN_SECONDS)));
    assert_eq!(s.retired[1].tokens_expire_by, Some(t0()), "a recorded window is kept");
    assert!(!fill_expiry(&mut s, 2 * hour), "nothing left to fill");
    // No maximum: the longest TokenRequest lifetime (2^32 seconds) bounds the window.
    let mut s = KeyState { retired: vec![retired("A", t0(), None)] };
    fill_expiry(&mut s, crate::pki::service_account::MAX_EXPIRATION_SECONDS);
    assert_eq!(s.retired[0].tokens_expire_by, Some(t0() + Duration::seconds((1 << 32) + PRUNE_MARGIN_SECONDS)));
}

#[test]
fn prune_decisions() {
    let until = t0() + Duration::hours(1);
    let legacy: BTreeMap<String, usize> = [("L".to_string(), 2)].into();
    let cases: Vec<(&str, RetiredKey, DateTime<Utc>, Keep)> = vec![
        ("window not recorded yet", retired("A", t0(), None), t0() + Duration::days(9999), Keep::WindowUnknown),
        ("bound tokens may still be valid", retired("A", t0(), Some(until)), t0(), Keep::TokensUntil(until)),
        (
            "one second before the end",
            retired("A", t0(), Some(until)),
            until - Duration::seconds(1),
            Keep::TokensUntil(until),
        ),
        ("window over, no legacy secret", retired("A", t0(), Some(until)), until, Keep::Prunable),
        ("window over, legacy secrets left", retired("L", t0(), Some(until)), until, Keep::LegacySecrets(2)),
        ("legacy secrets keep it, window or not", retired("L", t0(), Some(until)), t0(), Keep::TokensUntil(until)),
    ];
    for (what, key, now, want) in cases {
        assert_eq!(keep(&key, &legacy, now), want, "{what}");
    }
    let state = KeyState {
        retired: vec![retired("A", t0(), Some(until)), retired("L", t0(), Some(until)), retired("N", t0(), None)],
    };
    assert_eq!(prunable(&state, &legacy, until), ["A"]);
    assert!(prunable(&state, &legacy, t0()).is_empty());
}

fn signing(pem: &str) -> jwt::SigningKey {
    jwt::SigningKey::from_pem(pem).unwrap()
}

#[test]
fn which_keys_verify_and_which_signs() {
    let (a, b) = (kustos_ca::generate_sa_keypair().unwrap(), kustos_ca::generate_sa_keypair().unwrap());
    let (ka, kb) = (signing(&a.private_key_pem), signing(&b.private_key_pem));
    let cases: Vec<(&str, &jwt::SigningKey, Vec<PublicKey>, Vec<&str>)> = vec![
        ("before a rotation", &ka, vec![], vec![ka.public_key().key_id()]),
        (
            "retired and signing",
            &kb,
            vec![ka.public_key().clone()],
            vec![kb.public_key().key_id(), ka.public_key().key_id()],
        ),
        (
            "the signing key recorded as retired is listed once",
            &ka,
            vec![ka.public_key().clone()],
            vec![ka.public_key().key_id()],
        ),
    ];
    for (what, signer, retired, want) in cases {
        let keys = verifying(signer.public_key(), &retired);
        let kids: Vec<&str> = keys.iter().map(PublicKey::key_id).collect();
        assert_eq!(kids, want, "{what}");
        // What the signer signs verifies, and carries its kid.
        let token = signer.sign(&json!({"iss": "x"})).unwrap();
        assert!(jwt::verify(&token, &keys).is_ok(), "{what}");
        assert_eq!(token_kid(&token).as_deref(), Some(signer.public_key().key_id()), "{what}");
    }
}

/// A pki dir with `sa.key`/`sa.pub` as `pki::ensure` leaves them.
fn pki_dir() -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    fs::create_dir(&pki).unwrap();
    let pair = kustos_ca::generate_sa_keypair().unwrap();
    write_private(&pki.join(SIGNING_KEY), &pair.private_key_pem).unwrap();
    write_public(&pki.join(SIGNING_PUB), &pair.public_key_pem).unwrap();
    let kid = kid_of_private(&pair.private_key_pem).unwrap();
    (tmp, pki, kid)
}

fn verifying_kids(pki: &Path) -> (String, Vec<String>) {
    let loaded = load(pki).unwrap();
    let s = signing(&loaded.signing_pem);
    let kids = verifying(s.public_key(), &loaded.retired).iter().map(|k| k.key_id().to_string()).collect();
    (s.public_key().key_id().to_string(), kids)
}

#[test]
fn a_rotation_killed_after_any_step_resumes_and_never_drops_the_old_key() {
    use std::os::unix::fs::PermissionsExt as _;
    // Killed after the fifth step, the rotation was complete: a run again is a new rotation.
    for stop_after in 0..5 {
        let (_tmp, pki, old) = pki_dir();
        let (pem, new) = target_key(&pki, None).unwrap();
        // The first run stops after `stop_after` steps (a kill): the files work as they are.
        let mut n = 0;
        for _ in 0..stop_after {
            let Some(step) = next_step(&new, &observe(&pki).unwrap()) else { break };
            apply(&pki, &step, &pem, t0()).unwrap();
            n += 1;
            let (signs, kids) = verifying_kids(&pki);
            assert!(kids.contains(&old) && kids.contains(&signs), "after {n} steps: {signs} {kids:?}");
        }
        // Run again, as a new process would: the same key is taken up from sa-next.key.
        let (pem2, new2) = target_key(&pki, None).unwrap();
        if stop_after > 0 {
            assert_eq!(new2, new, "after {stop_after} steps the rotation goes on with its key");
        }
        run(&pki, &pem2, &new2, t0(), |_| {}).unwrap();
        let (signs, kids) = verifying_kids(&pki);
        assert_eq!(signs, new2, "after {stop_after}");
        assert_eq!(kids, [new2.clone(), old.clone()], "after {stop_after}");
        assert!(!pki.join(NEXT_KEY).exists());
        assert_eq!(observe(&pki).unwrap(), obs(&new2, true, None, &[&old]));
        let mode = fs::metadata(pki.join(SIGNING_KEY)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let state = read_state(&pki).unwrap();
        assert_eq!(state.retired.len(), 1);
        assert_eq!(state.retired[0].retired_at, t0());
    }
}

#[test]
fn import_maintain_and_prune() {
    let (_tmp, pki, old) = pki_dir();
    let imported = kustos_ca::generate_sa_keypair().unwrap();
    let (pem, kid) = target_key(&pki, Some(&imported.private_key_pem)).unwrap();
    assert_eq!(kid, kid_of_private(&imported.private_key_pem).unwrap());
    assert_eq!(run(&pki, &pem, &kid, t0(), |_| {}).unwrap().len(), 5);
    // Importing it again: it signs already.
    let (pem, again) = target_key(&pki, Some(&imported.private_key_pem)).unwrap();
    assert!(run(&pki, &pem, &again, t0(), |_| {}).unwrap().is_empty());
    // A left-over sa-next.key of another key refuses an import.
    let other = kustos_ca::generate_sa_keypair().unwrap();
    write_private(&pki.join(NEXT_KEY), &other.private_key_pem).unwrap();
    let err = target_key(&pki, Some(&imported.private_key_pem)).unwrap_err();
    assert!(err.to_string().contains("interrupted rotation"), "{err}");
    fs::remove_file(pki.join(NEXT_KEY)).unwrap();
    // The server fills the window, and prunes once it is over and no legacy Secret is left.
    let legacy = BTreeMap::from([(old.clone(), 1)]);
    assert!(maintain(&pki, 3600, &legacy, t0()).unwrap().is_empty());
    let until = read_state(&pki).unwrap().retired[0].tokens_expire_by.unwrap();
    assert_eq!(until, t0() + Duration::seconds(3600 + PRUNE_MARGIN_SECONDS));
    assert!(maintain(&pki, 3600, &legacy, until).unwrap().is_empty(), "a legacy Secret keeps it");
    assert_eq!(maintain(&pki, 3600, &BTreeMap::new(), until).unwrap(), vec![old.clone()]);
    assert_eq!(verifying_kids(&pki).1, [kid]);
    // Garbage in the state file is an error naming it, never a silent reset.
    fs::write(pki.join(STATE_FILE), "{").unwrap();
    assert!(format!("{:#}", load(&pki).err().unwrap()).contains(STATE_FILE));
}

#[test]
fn a_replaced_legacy_token_keeps_authenticating_through_its_secret() {
    use crate::authn::serviceaccount::check_legacy;
    use base64::Engine as _;
    let claims = jwt::LegacyClaims::new("ns", "sa", "sa-uid", "sa-token");
    let sa = json!({"metadata": {"name": "sa", "namespace": "ns", "uid": "sa-uid"}});
    let secret = |token: &str, previous: Option<&str>| {
        let mut s = json!({
            "metadata": {"name": "sa-token", "namespace": "ns", "annotations": {}},
            "type": "kubernetes.io/service-account-token",
            "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)},
        });
        if let Some(p) = previous {
            let entries = format!("K0=x,K1={}", jwt::token_digest(p));
            s["metadata"]["annotations"][jwt::PREVIOUS_TOKEN_ANNOTATION] = json!(entries);
        }
        s
    };
    let with_entries = |mut s: Value, entries: &str| {
        s["metadata"]["annotations"][jwt::PREVIOUS_TOKEN_ANNOTATION] = json!(entries);
        s
    };
    let cases: Vec<(&str, Value, &str, bool)> = vec![
        ("the current token", secret("new", Some("old")), "new", true),
        ("the token it replaced", secret("new", Some("old")), "old", true),
        ("another token", secret("new", Some("old")), "other", false),
        ("no replaced token recorded", secret("new", None), "old", false),
        ("an empty annotation matches nothing", with_entries(secret("new", None), ""), "old", false),
        ("an entry without a digest matches nothing", with_entries(secret("new", None), "K1"), "old", false),
    ];
    for (what, secret, token, ok) in cases {
        assert_eq!(check_legacy(&claims, token, Some(&secret), Some(&sa)).is_ok(), ok, "{what}");
    }
}
