//! Tests of the service-account authenticator's pure decisions (the authenticator over a
//! store, with TokenRequest issuing its tokens, is tested in `crate::testing::serviceaccount_tests`).

#![allow(clippy::unwrap_used, clippy::type_complexity)]
use chrono::TimeZone as _;
use kustos_ca::jwt::ObjectRef;

use super::*;
use crate::pki::service_account::DEFAULT_ISSUER;

pub(crate) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).unwrap()
}

// ------------------------------------------------------------------ pure decisions

#[test]
fn audience_intersection() {
    let api = strings(&["https://kubernetes.default.svc.cluster.local", "k8s"]);
    let cases: Vec<(&str, Vec<String>, Vec<String>, Result<Vec<String>, String>)> = vec![
        ("bound token, default audiences", strings(&["k8s"]), vec![], Ok(strings(&["k8s"]))),
        ("bound token, asked for its audience", strings(&["x", "y"]), strings(&["y"]), Ok(strings(&["y"]))),
        ("keeps the token's order", strings(&["b", "a"]), strings(&["a", "b"]), Ok(strings(&["b", "a"]))),
        (
            "bound token, other audience",
            strings(&["x"]),
            vec![],
            Err(r#"token audiences ["x"] is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local" "k8s"]"#.into()),
        ),
        ("legacy token, default audiences", vec![], vec![], Ok(api.clone())),
        ("legacy token, asked for an API audience", vec![], strings(&["k8s"]), Ok(strings(&["k8s"]))),
        (
            "legacy token, asked for another audience",
            vec![],
            strings(&["vault"]),
            Err(r#"token audiences ["https://kubernetes.default.svc.cluster.local" "k8s"] is invalid for the target audiences ["vault"]"#.into()),
        ),
    ];
    for (what, token, requested, want) in cases {
        assert_eq!(audiences_for(&token, &api, &requested).map_err(|e| e.to_string()), want, "{what}");
    }
    // An apiserver without audiences accepts anything (with no audiences).
    assert_eq!(audiences_for(&strings(&["x"]), &[], &strings(&["y"])).unwrap(), Vec::<String>::new());
}

#[test]
fn service_account_users() {
    let u = service_account_user("ns", "sa", "uid-1", Some("JTI=abc".into()));
    assert_eq!(u.name, "system:serviceaccount:ns:sa");
    assert_eq!(u.uid, "uid-1");
    assert_eq!(u.groups, ["system:serviceaccounts", "system:serviceaccounts:ns"]);
    assert_eq!(u.extra.get(CREDENTIAL_ID_EXTRA), Some(&strings(&["JTI=abc"])));
    assert!(service_account_user("ns", "sa", "u", None).extra.is_empty());
    assert!(service_account_user("ns", "sa", "u", Some(String::new())).extra.is_empty());
}

fn obj(uid: &str, deletion: Option<&str>) -> Value {
    let mut m = json!({"metadata": {"name": "x", "uid": uid}});
    if let Some(d) = deletion {
        m["metadata"]["deletionTimestamp"] = json!(d);
    }
    m
}

#[test]
fn bound_token_checks() {
    let now = at(1_700_000_000);
    let base = BoundClaims::new(
        DEFAULT_ISSUER,
        "ns",
        ObjectRef::new("sa", "sa-uid"),
        strings(&["api"]),
        now - Duration::seconds(100),
        3600,
        "jti-1",
    );
    let bound = base.clone().with_secret(ObjectRef::new("s", "secret-uid"));
    let pod_bound = base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", "node-uid")));
    let node_bound = base.clone().with_node(ObjectRef::new("n1", "node-uid"));
    let sa = obj("sa-uid", None);
    let secret = obj("secret-uid", None);
    let just_deleted = "2023-11-14T22:13:00Z"; // 20 s before now
    let long_deleted = "2023-11-14T22:00:00Z";
    let not_found = || Err::<(), String>("serviceaccounts \"sa\" not found".into());
    let invalidated = || Err::<(), String>(Rejection::TokenInvalidated.to_string());
    let cases: Vec<(&str, BoundClaims, Option<Value>, Option<Value>, DateTime<Utc>, Result<(), String>)> = vec![
        ("valid", base.clone(), Some(sa.clone()), None, now, Ok(())),
        ("valid, secret bound", bound.clone(), Some(sa.clone()), Some(secret.clone()), now, Ok(())),
        (
            "expired",
            base.clone(),
            Some(sa.clone()),
            None,
            now + Duration::hours(2),
            Err("service account token has expired".into()),
        ),
        (
            "not yet valid",
            base.clone(),
            Some(sa.clone()),
            None,
            now - Duration::hours(1),
            Err("service account token is not valid yet".into()),
        ),
        ("sa gone", base.clone(), None, None, now, not_found()),
        (
            "sa uid differs",
            base.clone(),
            Some(obj("other", None)),
            None,
            now,
            Err("service account UID (other) does not match claim (sa-uid)".into()),
        ),
        (
            "sa deleted long ago",
            base.clone(),
            Some(obj("sa-uid", Some(long_deleted))),
            None,
            now,
            Err("service account ns/sa has been deleted".into()),
        ),
        ("sa deletion within the leeway", base.clone(), Some(obj("sa-uid", Some(just_deleted))), None, now, Ok(())),
        ("secret gone", bound.clone(), Some(sa.clone()), None, now, invalidated()),
        (
            "secret deleted long ago",
            bound.clone(),
            Some(sa.clone()),
            Some(obj("secret-uid", Some(long_deleted))),
            now,
            invalidated(),
        ),
        (
            "secret deleted, unreadable time",
            bound.clone(),
            Some(sa.clone()),
            Some(obj("secret-uid", Some("yesterday"))),
            now,
            invalidated(),
        ),
        (
            "secret recreated",
            bound.clone(),
            Some(sa.clone()),
            Some(obj("new", None)),
            now,
            Err("secret UID (new) does not match service account secret ref claim (secret-uid)".into()),
        ),
        ("pod bound", pod_bound.clone(), Some(sa.clone()), Some(obj("pod-uid", None)), now, Ok(())),
        ("pod gone", pod_bound.clone(), Some(sa.clone()), None, now, invalidated()),
        (
            "pod recreated",
            pod_bound.clone(),
            Some(sa.clone()),
            Some(obj("new", None)),
            now,
            Err("pod UID (new) does not match service account pod ref claim (pod-uid)".into()),
        ),
        (
            "pod deleted long ago",
            pod_bound.clone(),
            Some(sa.clone()),
            Some(obj("pod-uid", Some(long_deleted))),
            now,
            invalidated(),
        ),
        (
            "pod deletion within the leeway",
            pod_bound.clone(),
            Some(sa.clone()),
            Some(obj("pod-uid", Some(just_deleted))),
            now,
            Ok(()),
        ),
        ("node bound", node_bound.clone(), Some(sa.clone()), Some(obj("node-uid", None)), now, Ok(())),
        ("node gone", node_bound.clone(), Some(sa.clone()), None, now, invalidated()),
        (
            "node replaced",
            node_bound.clone(),
            Some(sa.clone()),
            Some(obj("new", None)),
            now,
            Err("node UID (new) does not match service account node ref claim (node-uid)".into()),
        ),
        (
            "node deleted long ago",
            node_bound.clone(),
            Some(sa.clone()),
            Some(obj("node-uid", Some(long_deleted))),
            now,
            invalidated(),
        ),
        (
            "no namespace claim",
            BoundClaims { namespace: String::new(), ..base.clone() },
            Some(sa.clone()),
            None,
            now,
            not_found(),
        ),
    ];
    for (what, claims, sa, bound_to, now, want) in cases {
        // The bound object stands for whichever kind the claims name.
        let b = bound_to.as_ref();
        let stored = Stored { service_account: sa.as_ref(), secret: b, pod: b, node: b };
        let got = check_bound(&claims, &stored, now);
        assert_eq!(got.as_ref().map(|_| ()).map_err(ToString::to_string), want, "{what}");
        if let Ok(u) = got {
            assert_eq!(u.name, "system:serviceaccount:ns:sa", "{what}");
            assert_eq!(u.uid, "sa-uid", "{what}");
            assert_eq!(u.extra.get(CREDENTIAL_ID_EXTRA), Some(&strings(&["JTI=jti-1"])), "{what}");
        }
    }
}

#[test]
fn bound_token_user_extra() {
    let now = at(1_700_000_000);
    let base = BoundClaims::new(DEFAULT_ISSUER, "ns", ObjectRef::new("sa", "sa-uid"), vec![], now, 3600, "j1");
    let sa = obj("sa-uid", None);
    let extra = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<String>> {
        pairs.iter().map(|(k, v)| (k.to_string(), vec![v.to_string()])).collect()
    };
    let cases: Vec<(&str, BoundClaims, Value, BTreeMap<String, Vec<String>>)> = vec![
        ("unbound", base.clone(), json!(null), extra(&[(CREDENTIAL_ID_EXTRA, "JTI=j1")])),
        ("no jti: no credential id", BoundClaims { jti: String::new(), ..base.clone() }, json!(null), extra(&[])),
        (
            "pod on a node",
            base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", "node-uid"))),
            obj("pod-uid", None),
            extra(&[
                (CREDENTIAL_ID_EXTRA, "JTI=j1"),
                (POD_NAME_EXTRA, "p"),
                (POD_UID_EXTRA, "pod-uid"),
                (NODE_NAME_EXTRA, "n1"),
                (NODE_UID_EXTRA, "node-uid"),
            ]),
        ),
        (
            "pod on a node that did not exist: name only",
            base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", ""))),
            obj("pod-uid", None),
            extra(&[
                (CREDENTIAL_ID_EXTRA, "JTI=j1"),
                (POD_NAME_EXTRA, "p"),
                (POD_UID_EXTRA, "pod-uid"),
                (NODE_NAME_EXTRA, "n1"),
            ]),
        ),
        (
            "pod not scheduled",
            base.clone().with_pod(ObjectRef::new("p", "pod-uid"), None),
            obj("pod-uid", None),
            extra(&[(CREDENTIAL_ID_EXTRA, "JTI=j1"), (POD_NAME_EXTRA, "p"), (POD_UID_EXTRA, "pod-uid")]),
        ),
        (
            "node",
            base.clone().with_node(ObjectRef::new("n1", "node-uid")),
            obj("node-uid", None),
            extra(&[(CREDENTIAL_ID_EXTRA, "JTI=j1"), (NODE_NAME_EXTRA, "n1"), (NODE_UID_EXTRA, "node-uid")]),
        ),
    ];
    for (what, claims, bound_to, want) in cases {
        let b = Some(&bound_to).filter(|v| !v.is_null());
        let stored = Stored { service_account: Some(&sa), secret: b, pod: b, node: b };
        assert_eq!(check_bound(&claims, &stored, now).unwrap().extra, want, "{what}");
    }
}

fn legacy_secret(token: &str, kind: &str, labels: Value, deleting: bool) -> Value {
    let mut s = json!({
        "metadata": {"name": "sa-token", "namespace": "ns", "uid": "secret-uid", "labels": labels},
        "type": kind,
        "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)},
    });
    if deleting {
        s["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:00Z");
    }
    s
}

#[test]
fn legacy_token_checks() {
    let claims = LegacyClaims::new("ns", "sa", "sa-uid", "sa-token");
    let token = "header.payload.sig";
    let t = SERVICE_ACCOUNT_TOKEN_SECRET_TYPE;
    let sa = obj("sa-uid", None);
    let good = legacy_secret(token, t, json!({}), false);
    let invalidated = || Err::<(), String>(Rejection::LegacyTokenInvalidated.to_string());
    let cases: Vec<(&str, LegacyClaims, Option<Value>, Option<Value>, Result<(), String>)> = vec![
        ("valid", claims.clone(), Some(good.clone()), Some(sa.clone()), Ok(())),
        ("secret gone", claims.clone(), None, Some(sa.clone()), invalidated()),
        (
            "secret being deleted",
            claims.clone(),
            Some(legacy_secret(token, t, json!({}), true)),
            Some(sa.clone()),
            invalidated(),
        ),
        (
            "opaque secret",
            claims.clone(),
            Some(legacy_secret(token, "Opaque", json!({}), false)),
            Some(sa.clone()),
            invalidated(),
        ),
        (
            "other token in the secret",
            claims.clone(),
            Some(legacy_secret("other", t, json!({}), false)),
            Some(sa.clone()),
            Err("token does not match server's copy".into()),
        ),
        (
            "no token in the secret",
            claims.clone(),
            Some(json!({"type": t, "metadata": {}})),
            Some(sa.clone()),
            Err("token does not match server's copy".into()),
        ),
        ("sa gone", claims.clone(), Some(good.clone()), None, Err("serviceaccounts \"sa\" not found".into())),
        (
            "sa being deleted",
            claims.clone(),
            Some(good.clone()),
            Some(obj("sa-uid", Some("2023-11-14T22:13:00Z"))),
            Err("service account ns/sa has been deleted".into()),
        ),
        (
            "sa recreated",
            claims.clone(),
            Some(good.clone()),
            Some(obj("new", None)),
            Err("service account UID (new) does not match claim (sa-uid)".into()),
        ),
        (
            "claims incomplete",
            LegacyClaims { secret_name: String::new(), ..claims.clone() },
            Some(good.clone()),
            Some(sa.clone()),
            Err("secretName claim is missing".into()),
        ),
    ];
    for (what, claims, secret, sa, want) in cases {
        let got = check_legacy(&claims, token, secret.as_ref(), sa.as_ref());
        assert_eq!(got.as_ref().map(|_| ()).map_err(ToString::to_string), want, "{what}");
        if let Ok(u) = got {
            assert_eq!(u.name, "system:serviceaccount:ns:sa");
            assert!(u.extra.is_empty(), "legacy tokens carry no credential id");
        }
    }
    assert!(legacy_invalidated(&claims, &good).is_none());
    let marked = legacy_secret(token, t, json!({LEGACY_TOKEN_INVALID_SINCE_LABEL: "2023-01-01"}), false);
    assert_eq!(
        legacy_invalidated(&claims, &marked).unwrap().to_string(),
        "the token in secret ns/sa-token for service account ns/sa has been marked invalid. Use tokens from the TokenRequest API or manually created secret-based tokens, or remove the 'kubernetes.io/legacy-token-invalid-since' label from the secret to temporarily allow use of this token"
    );
    let empty_label = legacy_secret(token, t, json!({LEGACY_TOKEN_INVALID_SINCE_LABEL: ""}), false);
    assert!(legacy_invalidated(&claims, &empty_label).is_none());
}

#[test]
fn last_used_label_updates() {
    let now = Utc.with_ymd_and_hms(2024, 3, 9, 23, 30, 0).unwrap();
    let labels = |v: Option<&str>| -> BTreeMap<String, String> {
        v.map(|v| [(LEGACY_TOKEN_LAST_USED_LABEL.to_string(), v.to_string())].into()).unwrap_or_default()
    };
    let cases = [
        (None, Some("2024-03-09")),
        (Some("2024-03-08"), Some("2024-03-09")),
        (Some("garbage"), Some("2024-03-09")),
        (Some("2024-03-09"), None),
        (Some("2024-03-10"), None),
    ];
    for (have, want) in cases {
        assert_eq!(last_used_update(&labels(have), now).as_deref(), want, "{have:?}");
    }
}
