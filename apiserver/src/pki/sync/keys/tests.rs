use super::*;

fn rot(phase: Phase, key: &str) -> Option<KeyRotation> {
    Some(KeyRotation { phase, key: key.into() })
}

fn obs(current: &str, next: Option<&str>, previous: bool, state: Option<KeyRotation>) -> Observed {
    Observed { current: current.into(), next: next.map(str::to_string), previous, state }
}

#[test]
fn rotation_steps() {
    type Case<'a> = (&'a str, Observed, Result<Option<Step>, &'a str>);
    let cases: Vec<Case> = vec![
        ("nothing under way", obs("A", None, false, None), Ok(None)),
        ("the new key written: every apiserver learns it", obs("A", Some("B"), false, None), Ok(Some(Step::Begin))),
        ("begun: the new key seals", obs("A", Some("B"), false, rot(Phase::Begun, "B")), Ok(Some(Step::Switch))),
        (
            "switched: the new key becomes sync.key here",
            obs("A", Some("B"), false, rot(Phase::Switched, "B")),
            Ok(Some(Step::Promote)),
        ),
        ("promoted: the state goes", obs("B", Some("B"), true, rot(Phase::Switched, "B")), Ok(Some(Step::RemoveState))),
        ("then sync-next.key", obs("B", Some("B"), true, None), Ok(Some(Step::RemoveNext))),
        ("then the old key", obs("B", None, true, None), Ok(Some(Step::RemovePrev))),
        ("done", obs("B", None, false, None), Ok(None)),
        (
            "a state naming another key than sync-next.key",
            obs("A", Some("C"), false, rot(Phase::Begun, "B")),
            Err("names the key B but sync-next.key is the key C"),
        ),
        ("a state without its key", obs("A", None, false, rot(Phase::Switched, "B")), Err("there is no sync-next.key")),
        (
            "switched and promoted, sync-next.key gone",
            obs("B", None, true, rot(Phase::Switched, "B")),
            Ok(Some(Step::RemoveState)),
        ),
    ];
    for (what, o, want) in cases {
        match (next_step(&o), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{what}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{what}: {got}"),
            (got, want) => panic!("{what}: {got:?}, want {want:?}"),
        }
    }
    assert!(!obs("A", None, false, None).under_way());
    assert!(obs("B", None, true, None).under_way());
}

#[test]
fn what_an_apiserver_does_with_its_keys() {
    let f = |names: &[&str]| -> Files { names.iter().map(|n| (n.to_string(), b"x".to_vec())).collect() };
    let cases: Vec<(&str, Which, Files, bool, Follow)> = vec![
        ("opened with sync.key", Which::Current, f(&["ca.crt"]), false, Follow::Nothing),
        (
            "opened with the new key: it becomes sync.key",
            Which::Next,
            f(&[NEXT_KEY, STATE_FILE]),
            false,
            Follow::Promote,
        ),
        ("opened with the old key (a lagging write)", Which::Previous, f(&[NEXT_KEY]), true, Follow::Nothing),
        ("a rotation still under way keeps the old key", Which::Current, f(&[NEXT_KEY]), true, Follow::Nothing),
        ("state still there", Which::Current, f(&[STATE_FILE]), true, Follow::Nothing),
        ("the rotation is over: the old key goes", Which::Current, f(&["ca.crt"]), true, Follow::DropPrevious),
    ];
    for (what, which, files, has_previous, want) in cases {
        assert_eq!(follow_step(which, &files, has_previous), want, "{what}");
    }
}

/// A directory's key files as `PkiSync::start` leaves them.
fn pki_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    fs::create_dir(&pki).unwrap();
    super::super::ensure_seal_key(&pki).unwrap();
    (tmp, pki)
}

#[test]
fn a_rotation_killed_after_any_step_opens_every_record_of_it_and_resumes() {
    use std::os::unix::fs::PermissionsExt as _;
    let files: Files = [("ca.crt".to_string(), b"A".to_vec())].into_iter().collect();
    for stop_after in 0..7 {
        let (_tmp, pki) = pki_dir();
        let old_text = fs::read_to_string(pki.join(SEAL_KEY_FILE)).unwrap();
        let sealed_old = SealKey::from_text(&old_text).unwrap().seal(&files, 1).unwrap();
        apply(&pki, &Step::WriteNext).unwrap();
        let new_text = fs::read_to_string(pki.join(NEXT_KEY)).unwrap();
        let sealed_new = SealKey::from_text(&new_text).unwrap().seal(&files, 2).unwrap();
        let mut n = 1;
        while n < stop_after {
            let Some(step) = next_step(&observe(&pki).unwrap()).unwrap() else { break };
            apply(&pki, &step).unwrap();
            n += 1;
            let ring = KeyRing::read(&pki).unwrap();
            // Whatever the step, a record sealed under either key opens until the end.
            if n < 7 {
                assert!(ring.open(&sealed_old).is_ok() && ring.open(&sealed_new).is_ok(), "after {n} steps: {ring:?}");
            }
        }
        // Run again, as a new process would: it goes on from the files.
        assert!(observe(&pki).unwrap().under_way(), "after {stop_after}");
        for _ in 0..MAX_STEPS {
            let Some(step) = next_step(&observe(&pki).unwrap()).unwrap() else { break };
            apply(&pki, &step).unwrap();
        }
        let o = observe(&pki).unwrap();
        assert!(!o.under_way(), "after {stop_after}: {o:?}");
        assert_eq!(fs::read_to_string(pki.join(SEAL_KEY_FILE)).unwrap(), new_text, "after {stop_after}");
        let ring = KeyRing::read(&pki).unwrap();
        assert!(ring.open(&sealed_old).is_err(), "the old key is gone");
        assert_eq!(ring.open(&sealed_new).unwrap().1, Which::Current);
        let mode = fs::metadata(pki.join(SEAL_KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!format!("{ring:?}").contains(new_text.trim()), "Debug shows ids only");
    }
}

#[test]
fn the_sealing_key_follows_the_shared_state() {
    let (_tmp, pki) = pki_dir();
    apply(&pki, &Step::WriteNext).unwrap();
    let ring = KeyRing::read(&pki).unwrap();
    let next = ring.text(Which::Next).unwrap().to_string();
    let mut files: Files = [(NEXT_KEY.to_string(), next.clone().into_bytes())].into_iter().collect();
    let opened_with = |files: &Files| {
        let value = sealing_key(files, &ring).unwrap().seal(files, 1).unwrap();
        ring.open(&value).unwrap().1
    };
    assert_eq!(opened_with(&files), Which::Current, "no state: sync.key");
    let state = |phase| serde_json::to_vec(&KeyRotation { phase, key: key_id(&next).unwrap() }).unwrap();
    files.insert(STATE_FILE.into(), state(Phase::Begun));
    assert_eq!(opened_with(&files), Which::Current, "begun: still sync.key");
    files.insert(STATE_FILE.into(), state(Phase::Switched));
    assert_eq!(opened_with(&files), Which::Next, "switched: the new key");
}
