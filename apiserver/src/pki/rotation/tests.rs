use super::*;
use chrono::Duration;

const OLD: &str = "aaaa";
const NEW: &str = "bbbb";

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn state(phase: Phase, cap: Option<i64>) -> Option<RotationState> {
    Some(RotationState { phase, old: OLD.into(), new: NEW.into(), signer_max_duration_seconds: cap })
}

/// Before any rotation: one CA signs, everything issued by it.
fn idle() -> Observed {
    Observed {
        state: None,
        bundle: v(&[OLD]),
        trust: v(&[OLD]),
        signer: OLD.into(),
        next: None,
        cross_ok: false,
        rotation_files: false,
        serving_issuer: Some(OLD.into()),
        serving_chained: false,
        admin: Some(AdminView { issuer: Some(OLD.into()), ca: v(&[OLD]) }),
    }
}

fn begun() -> Observed {
    Observed {
        state: state(Phase::Begun, None),
        bundle: v(&[OLD, NEW]),
        trust: v(&[OLD, NEW]),
        next: Some(NEW.into()),
        cross_ok: true,
        rotation_files: true,
        admin: Some(AdminView { issuer: Some(OLD.into()), ca: v(&[OLD, NEW]) }),
        ..idle()
    }
}

fn switched() -> Observed {
    Observed {
        state: state(Phase::Switched, None),
        signer: NEW.into(),
        serving_issuer: Some(NEW.into()),
        serving_chained: true,
        admin: Some(AdminView { issuer: Some(NEW.into()), ca: v(&[OLD, NEW]) }),
        ..begun()
    }
}

fn begin() -> Goal {
    Goal::Begin { import: None }
}
fn switch() -> Goal {
    Goal::Switch { signer_max_duration_seconds: None }
}
fn finish(allowed: bool) -> Goal {
    Goal::Finish { allowed }
}

type Case = (&'static str, Goal, fn() -> Observed, Result<Option<Step>, Refusal>);

fn cases() -> Vec<Case> {
    let begun_state =
        RotationState { phase: Phase::Begun, old: OLD.into(), new: NEW.into(), signer_max_duration_seconds: None };
    vec![
        // begin, from the start and from every point a kill may leave it at
        ("begin: a new CA first", begin(), idle, Ok(Some(Step::WriteNext))),
        (
            "begin: half-written new CA is written again",
            begin(),
            || Observed { rotation_files: true, ..idle() },
            Ok(Some(Step::WriteNext)),
        ),
        (
            "begin: then cross-signed",
            begin(),
            || Observed { next: Some(NEW.into()), ..idle() },
            Ok(Some(Step::WriteCross)),
        ),
        (
            "begin: then trusted",
            begin(),
            || Observed { next: Some(NEW.into()), cross_ok: true, ..idle() },
            Ok(Some(Step::AddNextToBundle)),
        ),
        (
            "begin: then the admin kubeconfig trusts both",
            begin(),
            || Observed {
                next: Some(NEW.into()),
                cross_ok: true,
                bundle: v(&[OLD, NEW]),
                trust: v(&[OLD, NEW]),
                ..idle()
            },
            Ok(Some(Step::AdminCaData)),
        ),
        (
            "begin: recorded last",
            begin(),
            || Observed { state: None, ..begun() },
            Ok(Some(Step::WriteState(begun_state.clone()))),
        ),
        (
            "begin: no admin kubeconfig, nothing to rewrite",
            begin(),
            || Observed { state: None, admin: None, ..begun() },
            Ok(Some(Step::WriteState(begun_state.clone()))),
        ),
        ("begin: run again when done", begin(), begun, Ok(None)),
        (
            "begin: importing another CA than the one begun",
            Goal::Begin { import: Some("cccc".into()) },
            begun,
            Err(Refusal::OtherRotation(NEW.into())),
        ),
        (
            "begin: importing replaces a new CA not recorded yet",
            Goal::Begin { import: Some("cccc".into()) },
            || Observed { next: Some(NEW.into()), ..idle() },
            Ok(Some(Step::WriteNext)),
        ),
        (
            "begin: importing the signing CA",
            Goal::Begin { import: Some(OLD.into()) },
            || Observed { next: Some(OLD.into()), ..idle() },
            Err(Refusal::SameCa),
        ),
        ("begin: after switch", begin(), switched, Err(Refusal::AlreadySwitched)),
        // switch
        ("switch: before begin", switch(), idle, Err(Refusal::NotBegun)),
        ("switch: the key first", switch(), begun, Ok(Some(Step::InstallNextKey))),
        (
            "switch: the cap is recorded before anything",
            Goal::Switch { signer_max_duration_seconds: Some(3600) },
            begun,
            Ok(Some(Step::WriteState(RotationState {
                signer_max_duration_seconds: Some(3600),
                ..begun_state.clone()
            }))),
        ),
        (
            "switch: the new CA's files are gone",
            switch(),
            || Observed { next: None, ..begun() },
            Err(Refusal::NextMissing(NEW.into())),
        ),
        (
            "switch: then the serving certificate",
            switch(),
            || Observed { signer: NEW.into(), ..begun() },
            Ok(Some(Step::IssueServing)),
        ),
        (
            "switch: a serving certificate without the chain is issued again",
            switch(),
            || Observed { signer: NEW.into(), serving_issuer: Some(NEW.into()), ..begun() },
            Ok(Some(Step::IssueServing)),
        ),
        (
            "switch: then the admin certificate",
            switch(),
            || Observed { signer: NEW.into(), serving_issuer: Some(NEW.into()), serving_chained: true, ..begun() },
            Ok(Some(Step::IssueAdmin)),
        ),
        (
            "switch: recorded last",
            switch(),
            || Observed { state: state(Phase::Begun, None), ..switched() },
            Ok(Some(Step::WriteState(RotationState { phase: Phase::Switched, ..begun_state.clone() }))),
        ),
        ("switch: run again when done", switch(), switched, Ok(None)),
        ("switch: the key is not needed once installed", switch(), || Observed { next: None, ..switched() }, Ok(None)),
        // finish
        ("finish: nothing in progress", finish(false), idle, Ok(None)),
        ("finish: before switch", finish(true), begun, Err(Refusal::NotSwitched)),
        ("finish: not safe", finish(false), switched, Err(Refusal::Unsafe)),
        ("finish: the chain goes first", finish(true), switched, Ok(Some(Step::UnchainServing))),
        (
            "finish: then the old CA",
            finish(true),
            || Observed { serving_chained: false, ..switched() },
            Ok(Some(Step::DropOld(OLD.into()))),
        ),
        (
            "finish: an interrupted finish needs no safety check",
            finish(false),
            || Observed { serving_chained: false, bundle: v(&[NEW]), trust: v(&[NEW]), ..switched() },
            Ok(Some(Step::AdminCaData)),
        ),
        (
            "finish: then the rotation files",
            finish(false),
            || Observed {
                serving_chained: false,
                bundle: v(&[NEW]),
                trust: v(&[NEW]),
                admin: Some(AdminView { issuer: Some(NEW.into()), ca: v(&[NEW]) }),
                ..switched()
            },
            Ok(Some(Step::RemoveRotationFiles)),
        ),
        (
            "finish: the state file last",
            finish(false),
            || Observed {
                serving_chained: false,
                bundle: v(&[NEW]),
                trust: v(&[NEW]),
                next: None,
                rotation_files: false,
                admin: Some(AdminView { issuer: Some(NEW.into()), ca: v(&[NEW]) }),
                ..switched()
            },
            Ok(Some(Step::RemoveState)),
        ),
        // Another apiserver's directory following the shared files (sync.rs).
        ("follow: nothing to do before a rotation", Goal::Follow, idle, Ok(None)),
        (
            "follow: begun elsewhere: the admin kubeconfig trusts both",
            Goal::Follow,
            || Observed { admin: Some(AdminView { issuer: Some(OLD.into()), ca: v(&[OLD]) }), ..begun() },
            Ok(Some(Step::AdminCaData)),
        ),
        ("follow: begun and followed", Goal::Follow, begun, Ok(None)),
        (
            "follow: switched elsewhere: the serving certificate from the new CA, chained",
            Goal::Follow,
            || Observed {
                serving_issuer: Some(OLD.into()),
                serving_chained: false,
                admin: Some(AdminView { issuer: Some(OLD.into()), ca: v(&[OLD, NEW]) }),
                ..switched()
            },
            Ok(Some(Step::IssueServing)),
        ),
        (
            "follow: switched elsewhere: then the admin certificate",
            Goal::Follow,
            || Observed { admin: Some(AdminView { issuer: Some(OLD.into()), ca: v(&[OLD, NEW]) }), ..switched() },
            Ok(Some(Step::IssueAdmin)),
        ),
        (
            "follow: switched while the state file still says begun (pulled mid-switch): chained already",
            Goal::Follow,
            || Observed { state: state(Phase::Begun, None), serving_chained: false, ..switched() },
            Ok(Some(Step::IssueServing)),
        ),
        ("follow: switched and followed", Goal::Follow, switched, Ok(None)),
        (
            "follow: finished elsewhere: the chain comes off",
            Goal::Follow,
            || Observed {
                state: None,
                bundle: v(&[NEW]),
                trust: v(&[NEW]),
                next: None,
                cross_ok: false,
                rotation_files: false,
                ..switched()
            },
            Ok(Some(Step::UnchainServing)),
        ),
        (
            "follow: finished while this apiserver was down: a serving certificate of the dropped CA is re-issued",
            Goal::Follow,
            || Observed {
                state: None,
                bundle: v(&[NEW]),
                trust: v(&[NEW]),
                signer: NEW.into(),
                next: None,
                rotation_files: false,
                serving_issuer: None,
                serving_chained: false,
                admin: Some(AdminView { issuer: None, ca: v(&[OLD]) }),
                ..idle()
            },
            Ok(Some(Step::IssueServing)),
        ),
        (
            "follow: never touches the shared files (a begun rotation's key stays where it is)",
            Goal::Follow,
            || Observed { signer: OLD.into(), ..begun() },
            Ok(None),
        ),
    ]
}

#[test]
fn next_step_table() {
    for (name, goal, obs, want) in cases() {
        assert_eq!(next_step(&goal, &obs()), want, "{name}");
    }
}

fn issued(ca: &Ca, now: DateTime<Utc>, lifetime: Duration) -> IssuedCert {
    let c = ca.issue(IssueParams::client("u", vec![], lifetime), now - Duration::hours(2)).unwrap();
    IssuedCert { der: c.cert_der, not_after: c.not_after }
}

#[test]
fn counting_and_finish_safety() {
    let now = Utc::now();
    let old = Ca::generate("old", Duration::days(365), now).unwrap();
    let new = Ca::generate("new", Duration::days(365), now).unwrap();
    let stranger = Ca::generate("stranger", Duration::days(365), now).unwrap();
    let cas = ca_certificates(&format!("{}{}", old.cert_pem(), new.cert_pem())).unwrap();
    let long = issued(&old, now, Duration::days(30));
    let short = issued(&old, now, Duration::days(1));
    let expired = issued(&old, now, Duration::hours(1));
    let from_new = issued(&new, now, Duration::days(2));
    let foreign = issued(&stranger, now, Duration::days(2));
    let (ofp, nfp) = (fingerprint(old.cert_der()), fingerprint(new.cert_der()));
    let st = |phase| RotationState { phase, old: ofp.clone(), new: nfp.clone(), signer_max_duration_seconds: None };

    type Want = (usize, Option<DateTime<Utc>>, usize, FinishSafety);
    let cases: Vec<(&str, Vec<IssuedCert>, Option<RotationState>, Want)> = vec![
        ("nothing issued", vec![], Some(st(Phase::Switched)), (0, None, 0, FinishSafety::Safe)),
        (
            "old certificates still valid",
            vec![long.clone(), short.clone(), expired.clone(), from_new.clone(), foreign.clone()],
            Some(st(Phase::Switched)),
            (2, Some(long.not_after), 1, FinishSafety::Unsafe { valid: 2, latest_expiry: Some(long.not_after) }),
        ),
        (
            "only expired ones from the old CA",
            vec![expired.clone(), from_new.clone()],
            Some(st(Phase::Switched)),
            (0, None, 1, FinishSafety::Safe),
        ),
        ("before switch", vec![], Some(st(Phase::Begun)), (0, None, 0, FinishSafety::NotSwitched)),
        ("no rotation", vec![short.clone()], None, (1, Some(short.not_after), 0, FinishSafety::NoRotation)),
    ];
    for (name, certs, state, (old_n, old_latest, new_n, safety)) in cases {
        let counts = count_issued(&cas, &certs, now);
        assert_eq!(counts.len(), 2, "{name}");
        assert_eq!((counts[0].valid_issued, counts[0].latest_expiry), (old_n, old_latest), "{name}: old");
        assert_eq!(counts[1].valid_issued, new_n, "{name}: new");
        assert_eq!(finish_safety(state.as_ref(), &counts), safety, "{name}");
    }
    // The old CA already out of the bundle.
    let only_new = ca_certificates(new.cert_pem()).unwrap();
    let counts = count_issued(&only_new, &[long], now);
    assert_eq!(finish_safety(Some(&st(Phase::Switched)), &counts), FinishSafety::OldGone);
}

/// The whole sequence on real files, with a "kill" (the command stopping) after every
/// single step: each run resumes, and the files load at every point.
#[test]
fn every_prefix_of_every_command_leaves_loadable_files_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let now = Utc::now();
    let pki = super::super::ensure(tmp.path(), &[], now).unwrap();
    super::super::write_admin_kubeconfig(tmp.path(), &pki, "https://127.0.0.1:1", now).unwrap();
    let paths = Paths::new(tmp.path());
    let old = fingerprint(pki.ca().cert_der());
    let mut all = Vec::new();
    for goal in [begin(), switch(), finish(true)] {
        // One step per run, as if killed right after it.
        for _ in 0..MAX_STEPS {
            let obs = observe(&paths, now).unwrap();
            let Some(step) = next_step(&goal, &obs).unwrap() else { break };
            apply(&paths, &step, &NewCa::default(), now).unwrap();
            all.push(step);
            // What a restarted server loads.
            let again = super::super::ensure(tmp.path(), &[], now).unwrap();
            assert!(again
                .ca_bundle_der()
                .unwrap()
                .iter()
                .any(|d| fingerprint(d) == fingerprint(again.ca().cert_der())));
            assert!(key_matches(&again.serving_cert_pem, &again.serving_key_pem));
        }
        assert_eq!(run(&paths, &goal, &NewCa::default(), now, |_| {}).unwrap(), vec![], "{goal:?} settled");
    }
    assert!(all.contains(&Step::InstallNextKey) && all.contains(&Step::DropOld(old.clone())), "{all:?}");
    let end = observe(&paths, now).unwrap();
    assert_eq!(end.state, None);
    assert_eq!(end.bundle.len(), 1);
    assert_ne!(end.signer, old);
    assert_eq!(end.serving_issuer.as_deref(), Some(end.signer.as_str()));
    assert!(!end.serving_chained && !end.rotation_files);
    assert_eq!(end.admin, Some(AdminView { issuer: Some(end.signer.clone()), ca: vec![end.signer.clone()] }));
}

#[test]
fn an_imported_ca_is_checked_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let now = Utc::now();
    super::super::ensure(tmp.path(), &[], now).unwrap();
    let paths = Paths::new(tmp.path());
    let a = Ca::generate("a", Duration::days(10), now).unwrap();
    let b = Ca::generate("b", Duration::days(10), now).unwrap();
    let bad = NewCa { import: Some((a.cert_pem().to_string(), b.key_pem())) };
    let goal = Goal::Begin { import: Some(fingerprint(a.cert_der())) };
    assert!(run(&paths, &goal, &bad, now, |_| {}).is_err());
    assert!(!paths.at(NEXT_KEY).exists());
    let good = NewCa { import: Some((a.cert_pem().to_string(), a.key_pem())) };
    run(&paths, &goal, &good, now, |_| {}).unwrap();
    let obs = observe(&paths, now).unwrap();
    assert_eq!(obs.next, Some(fingerprint(a.cert_der())));
    assert_eq!(obs.state.map(|s| s.new), Some(fingerprint(a.cert_der())));
}
