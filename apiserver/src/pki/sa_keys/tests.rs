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
    RetiredKey { kid: kid.into(), public_key: String::new(), retired_at: at, tokens_expire_by: until, revoked_at: None }
}

fn revoked(kid: &str, at: DateTime<Utc>, until: Option<DateTime<Utc>>, revoked: DateTime<Utc>) -> RetiredKey {
    RetiredKey { revoked_at: Some(revoked), ..retired(kid, at, until) }
}

#[test]
fn each_apiserver_records_its_end_and_the_longest_wins() {
    let hour = 3600;
    let mine = t0() + Duration::seconds(hour + PRUNE_MARGIN_SECONDS);
    let mut s = KeyState {
        retired: vec![
            retired("A", t0(), None),
            retired("B", t0(), Some(t0())),
            retired("C", t0(), Some(t0() + Duration::days(2))),
        ],
    };
    assert!(extend_ends(&mut s, hour));
    assert_eq!(s.retired[0].tokens_expire_by, Some(mine), "not recorded: this apiserver's");
    assert_eq!(s.retired[1].tokens_expire_by, Some(mine), "an earlier end is extended");
    assert_eq!(s.retired[2].tokens_expire_by, Some(t0() + Duration::days(2)), "a later end is kept");
    assert!(!extend_ends(&mut s, hour), "nothing left to change");
    // The default cap (a year) bounds the end; no cap (2^32 seconds) is upstream's default.
    let year = crate::pki::service_account::DEFAULT_MAX_EXPIRATION.as_secs() as i64;
    let mut s = KeyState { retired: vec![retired("A", t0(), None)] };
    extend_ends(&mut s, year);
    assert_eq!(s.retired[0].tokens_expire_by, Some(t0() + Duration::seconds(year + PRUNE_MARGIN_SECONDS)));
    assert!(s.retired[0].tokens_expire_by < Some(t0() + Duration::days(366)));
    let mut s = KeyState { retired: vec![retired("A", t0(), None)] };
    extend_ends(&mut s, crate::pki::service_account::MAX_EXPIRATION_SECONDS);
    assert_eq!(s.retired[0].tokens_expire_by, Some(t0() + Duration::seconds((1 << 32) + PRUNE_MARGIN_SECONDS)));
}

#[test]
fn a_retired_key_verifies_until_its_end_and_a_revoked_one_not_at_all() {
    let hour = 3600;
    let until = t0() + Duration::hours(1);
    let own = t0() + Duration::seconds(hour + PRUNE_MARGIN_SECONDS);
    let kept = Duration::seconds(REVOKED_KEPT_SECONDS);
    // (what, key, now, verifies, pruned)
    let cases: Vec<(&str, RetiredKey, DateTime<Utc>, bool, bool)> = vec![
        ("recorded end ahead", retired("A", t0(), Some(until)), t0(), true, false),
        ("one second before the end", retired("A", t0(), Some(until)), until - Duration::seconds(1), true, false),
        ("at the end", retired("A", t0(), Some(until)), until, false, true),
        ("past the end", retired("A", t0(), Some(until)), until + Duration::days(1), false, true),
        ("not recorded: this apiserver's end", retired("A", t0(), None), own - Duration::seconds(1), true, false),
        ("not recorded, past this apiserver's end", retired("A", t0(), None), own, false, true),
        ("revoked: at once", revoked("A", t0(), Some(until), t0()), t0(), false, false),
        ("revoked, entry kept a while", revoked("A", t0(), None, t0()), t0() + Duration::minutes(10), false, false),
        (
            "revoked, entry dropped after a day",
            revoked("A", t0(), Some(t0() + Duration::days(9)), t0()),
            t0() + kept,
            false,
            true,
        ),
        ("revoked, entry dropped at its end", revoked("A", t0(), Some(until), t0()), until, false, true),
    ];
    for (what, key, now, verifies_now, pruned) in cases {
        assert_eq!(verifies(&key, hour, now), verifies_now, "{what}: verifies");
        let state = KeyState { retired: vec![key.clone()] };
        assert_eq!(!prunable(&state, hour, now).is_empty(), pruned, "{what}: pruned");
        assert_eq!(verifying_retired(&state, hour, now).len(), usize::from(verifies_now), "{what}: the verifying set");
    }
}

#[test]
fn revoking_refuses_the_signing_key_the_next_key_and_unknown_ids() {
    let base = KeyState { retired: vec![retired("OLD", t0(), None)] };
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, Result<bool, RevokeError>);
    let cases: Vec<Case> = vec![
        ("a retired key", "OLD", None, Ok(true)),
        ("the key that signs", "CUR", None, Err(RevokeError::Signing("CUR".into()))),
        ("the next key of a rotation", "NXT", Some("NXT"), Err(RevokeError::Next("NXT".into()))),
        ("an unknown id", "NOPE", None, Err(RevokeError::Unknown("NOPE".into()))),
    ];
    for (what, kid, next, want) in cases {
        let mut s = base.clone();
        assert_eq!(revoke(&mut s, kid, "CUR", next, t0()), want, "{what}");
        let changed = s != base;
        assert_eq!(changed, want == Ok(true), "{what}: the state changes only when revoked");
    }
    let mut s = base.clone();
    revoke(&mut s, "OLD", "CUR", None, t0()).unwrap();
    assert_eq!(s.retired[0].revoked_at, Some(t0()));
    assert_eq!(revoke(&mut s, "OLD", "CUR", None, t0() + Duration::hours(1)), Ok(false), "again: no change");
    assert_eq!(s.retired[0].revoked_at, Some(t0()));
    assert!(RevokeError::Signing("CUR".into()).to_string().contains("rotate first"));
}

#[test]
fn joining_two_versions_keeps_the_later_end_and_the_revocation() {
    let a = KeyState { retired: vec![retired("K", t0(), Some(t0() + Duration::hours(1))), retired("A", t0(), None)] };
    let b =
        KeyState { retired: vec![revoked("K", t0(), Some(t0() + Duration::hours(2)), t0()), retired("B", t0(), None)] };
    for joined in [a.clone().join(b.clone()), b.join(a)] {
        let k = joined.retired.iter().find(|k| k.kid == "K").unwrap();
        assert_eq!(k.tokens_expire_by, Some(t0() + Duration::hours(2)));
        assert_eq!(k.revoked_at, Some(t0()), "a revocation is never undone by a merge");
        let mut kids = joined.retired_kids();
        kids.sort();
        assert_eq!(kids, ["A", "B", "K"]);
    }
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
    let retired = loaded.retired_verifying(3600, t0()).unwrap();
    let kids = verifying(s.public_key(), &retired).iter().map(|k| k.key_id().to_string()).collect();
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
    // The server records its end, and drops the key once it is over.
    assert!(maintain(&pki, 3600, t0()).unwrap().is_empty());
    let until = read_state(&pki).unwrap().retired[0].tokens_expire_by.unwrap();
    assert_eq!(until, t0() + Duration::seconds(3600 + PRUNE_MARGIN_SECONDS));
    assert!(maintain(&pki, 3600, until - Duration::seconds(1)).unwrap().is_empty(), "before its end: kept");
    assert_eq!(maintain(&pki, 3600, until).unwrap(), vec![old.clone()]);
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

#[test]
fn only_keys_that_sign_tokens_have_a_kid_here() {
    let ed25519 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap().serialize_pem();
    let e = kid_of_private(&ed25519).unwrap_err();
    assert!(format!("{e:#}").contains("Ed25519 keys cannot sign tokens"), "{e:#}");
    let (_tmp, pki, _) = pki_dir();
    assert!(target_key(&pki, Some(&ed25519)).is_err(), "a rotation to an Ed25519 key is refused before it starts");
    let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap().serialize_pem();
    assert!(kid_of_private(&p256).is_ok());
}

#[test]
fn a_revoked_key_is_not_imported_again_and_rotations_run_one_at_a_time() {
    let (_tmp, pki, kid) = pki_dir();
    let old_pem = fs::read_to_string(pki.join(SIGNING_KEY)).unwrap();
    // The key that signed is retired, then revoked; importing it again is refused.
    let state = KeyState { retired: vec![revoked(&kid, t0(), None, t0())] };
    write_state(&pki, &state).unwrap();
    let e = target_key(&pki, Some(&old_pem)).unwrap_err();
    assert!(format!("{e:#}").contains("was revoked: it cannot sign again"), "{e:#}");
    // Another key imports.
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap().serialize_pem();
    assert!(target_key(&pki, Some(&other)).is_ok());
    // While one rotation holds the lock, another is refused at once.
    let inner = as_only_rotation(&pki, || Ok(as_only_rotation(&pki, || Ok(())))).unwrap();
    let e = inner.unwrap_err();
    assert!(format!("{e:#}").contains("another `kustos sa-key rotate` is running"), "{e:#}");
    assert!(as_only_rotation(&pki, || Ok(())).is_ok(), "free again once the first is done");
}
