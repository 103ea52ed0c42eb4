//! Tests of the service-account token authenticator over a store, with TokenRequest issuing
//! its tokens, and of the legacy token tracking ConfigMap: what needs the whole server
//! ([`super::serviceaccount`]).

#![allow(clippy::unwrap_used)]

use base64::Engine as _;
use chrono::{Duration, TimeZone as _, Utc};
use kustos_ca::jwt::{self, BoundClaims, SigningKey};
use serde_json::{json, Value};

use super::serviceaccount::{authenticated, env, invalid};
use crate::authn::serviceaccount::legacy_tracking::{ensure_legacy_token_tracking, LEGACY_TOKEN_TRACKING_CONFIGMAP};
use crate::authn::serviceaccount::{
    Rejection, LEGACY_TOKEN_INVALID_SINCE_LABEL, LEGACY_TOKEN_LAST_USED_LABEL, SERVICE_ACCOUNT_TOKEN_SECRET_TYPE,
};
use crate::authn::TokenResult;
use crate::meta;

#[tokio::test]
async fn not_mine_and_invalid_tokens() {
    let e = env().await;
    e.namespace("team").await;
    e.service_account("team", "builder").await;
    let good = e.token("team", "builder", json!({})).await;
    authenticated(e.check(&good, &[]).await);
    let other_key = SigningKey::from_pem(&kustos_ca::generate_sa_keypair().unwrap().private_key_pem).unwrap();
    let claims = jwt::decode_unverified(&good).unwrap().1;
    let mut foreign = claims.clone();
    foreign.insert("iss".into(), json!("https://someone-else.example"));
    let mut flipped = good.clone().into_bytes();
    let i = flipped.len() - 3;
    flipped[i] = if flipped[i] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let mut expired = BoundClaims::from_claims(&claims).unwrap();
    expired.expiry = Some(Utc::now().timestamp() - 3600);
    // Signed by the cluster's own key with `exp` as given (`None`: no `exp` at all).
    let own_key = SigningKey::from_pem(&e.signing_pem).unwrap();
    let with_exp = |exp: Option<Value>| {
        let mut c = claims.clone();
        match exp {
            Some(v) => c.insert("exp".into(), v),
            None => c.remove("exp"),
        };
        own_key.sign(&Value::Object(c)).unwrap()
    };
    let cases: Vec<(&str, String, Option<&str>)> = vec![
        ("opaque token", "abcdef.0123456789abcdef".into(), None),
        ("bootstrap-looking token", "07401b.f395accd246ae52d".into(), None),
        ("unknown issuer", other_key.sign(&Value::Object(foreign)).unwrap(), None),
        ("flipped signature byte", flipped, Some("invalid signature")),
        (
            "signed by an unknown key",
            other_key.sign(&Value::Object(claims.clone())).unwrap(),
            Some("invalid signature, no keys found"),
        ),
        ("expired", e.tokens.issue(&expired).await.unwrap(), Some("service account token has expired")),
        ("exp 0 is the epoch", with_exp(Some(json!(0))), Some("service account token has expired")),
        ("exp negative", with_exp(Some(json!(-1))), Some("service account token has expired")),
        ("exp fraction of the first second", with_exp(Some(json!(0.5))), Some("service account token has expired")),
        ("no exp", with_exp(None), Some("")),
        ("exp null", with_exp(Some(Value::Null)), Some("")),
        (
            "second issuer accepted",
            e.tokens
                .issue(&BoundClaims {
                    issuer: "https://old-issuer.example".into(),
                    ..BoundClaims::from_claims(&claims).unwrap()
                })
                .await
                .unwrap(),
            Some(""),
        ),
    ];
    for (what, token, want) in cases {
        match (e.check(&token, &[]).await, want) {
            (TokenResult::NotMine, None) => {}
            (TokenResult::Authenticated { .. }, Some("")) => {}
            (TokenResult::Invalid(reason), Some(w)) if !w.is_empty() => assert_eq!(reason, w, "{what}"),
            (other, _) => panic!("{what}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn legacy_tokens() {
    let e = env().await;
    e.namespace("team").await;
    let sa = e.service_account("team", "old").await;
    let token = jwt::legacy_token(&e.signing_pem, "team", "old", meta::uid(&sa), "old-token", "").unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&token);
    e.create(
        "secrets",
        "team",
        json!({
            "metadata": {"name": "old-token", "annotations": {"kubernetes.io/service-account.name": "old"}},
            "type": SERVICE_ACCOUNT_TOKEN_SECRET_TYPE,
            "data": {"token": b64},
        }),
    )
    .await;
    let (user, auds) = authenticated(e.check(&token, &[]).await);
    assert_eq!(user.name, "system:serviceaccount:team:old");
    assert_eq!(user.uid, meta::uid(&sa));
    assert!(user.extra.is_empty());
    assert_eq!(auds, e.tokens.api_audiences());
    // Audience-agnostic only within the API audiences.
    assert!(invalid(e.check(&token, &["vault"]).await).contains("is invalid for the target audiences [\"vault\"]"));

    // The use was recorded once for today.
    let kv = e.stored("secrets", "team", "old-token").await.unwrap();
    let secret: Value = serde_json::from_slice(&kv.value).unwrap();
    let today = Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(meta::labels(&secret)[LEGACY_TOKEN_LAST_USED_LABEL], today);
    authenticated(e.check(&token, &[]).await);
    assert_eq!(e.stored("secrets", "team", "old-token").await.unwrap().mod_rev, kv.mod_rev, "one write a day");

    // Marked invalid.
    let mut marked = secret.clone();
    marked["metadata"]["labels"][LEGACY_TOKEN_INVALID_SINCE_LABEL] = json!("2024-01-01");
    e.state.storage.update(&kv.key, meta::to_stored(&marked).unwrap(), kv.mod_rev).await.unwrap();
    assert!(invalid(e.check(&token, &[]).await).contains("has been marked invalid"));

    // A token that is not the Secret's copy (another signature over the same claims).
    let other = jwt::legacy_token(&e.signing_pem, "team", "old", meta::uid(&sa), "old-token", "").unwrap();
    assert_ne!(other, token);
    assert_eq!(invalid(e.check(&other, &[]).await), "token does not match server's copy");
    // Secret gone.
    e.remove("secrets", "team", "old-token").await;
    assert_eq!(invalid(e.check(&token, &[]).await), Rejection::LegacyTokenInvalidated.to_string());
}

#[tokio::test]
async fn tracking_configmap_created_once() {
    let e = env().await;
    let now = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
    ensure_legacy_token_tracking(&*e.state, now).await.unwrap();
    let kv = e.stored("configmaps", "kube-system", LEGACY_TOKEN_TRACKING_CONFIGMAP).await.unwrap();
    let cm: Value = serde_json::from_slice(&kv.value).unwrap();
    assert_eq!(cm["data"], json!({"since": "2024-05-01"}));
    ensure_legacy_token_tracking(&*e.state, now + Duration::days(3)).await.unwrap();
    let again = e.stored("configmaps", "kube-system", LEGACY_TOKEN_TRACKING_CONFIGMAP).await.unwrap();
    assert_eq!(again.mod_rev, kv.mod_rev);
}
