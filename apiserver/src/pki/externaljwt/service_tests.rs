#![allow(clippy::unwrap_used)]
use std::sync::Mutex;

use chrono::Duration as ChronoDuration;
use kustos_ca::jwt;

use super::*;

fn key() -> SigningKey {
    SigningKey::from_pem(&kustos_ca::generate_sa_keypair().unwrap().private_key_pem).unwrap()
}

fn retired(
    key: &SigningKey,
    retired_at: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    revoked: bool,
) -> (RetiredKey, PublicKey) {
    let meta = RetiredKey {
        kid: key.public_key().key_id().to_string(),
        public_key: String::new(),
        retired_at,
        tokens_expire_by: end,
        revoked_at: revoked.then_some(retired_at),
    };
    (meta, key.public_key().clone())
}

#[test]
fn fetch_keys_serves_every_key_that_verifies_once() {
    let now = Utc::now();
    let (signing, next, live, ended, revoked, unrecorded, legacy) = (key(), key(), key(), key(), key(), key(), key());
    let set = KeySet {
        signing: Arc::new(signing),
        next: Some(next.public_key().clone()),
        retired: vec![
            retired(&live, now - ChronoDuration::hours(1), Some(now + ChronoDuration::hours(1)), false),
            retired(&ended, now - ChronoDuration::hours(3), Some(now - ChronoDuration::seconds(1)), false),
            retired(&revoked, now - ChronoDuration::hours(1), Some(now + ChronoDuration::hours(1)), true),
            // No end recorded yet: retiredAt + the signer's maximum + 5 min.
            retired(&unrecorded, now - ChronoDuration::seconds(3600 + 299), None, false),
        ],
        // A legacy key that is also a retired key stays published, once.
        legacy: vec![legacy.public_key().clone(), live.public_key().clone()],
        loaded_at: SystemTime::now(),
    };
    let (keys, roles) = served_keys(&set, 3600, now);
    let got: Vec<(String, bool)> =
        keys.iter().map(|k| (k.key.key_id().to_string(), k.exclude_from_oidc_discovery)).collect();
    let kid = |k: &SigningKey| k.public_key().key_id().to_string();
    assert_eq!(
        got,
        vec![
            (kid(set.signing.as_ref()), false),
            (kid(&next), false),
            (kid(&live), false),
            (kid(&unrecorded), false),
            (kid(&legacy), true),
        ]
    );
    assert_eq!(roles, Roles { signing: 1, next: 1, retired: 2, legacy: 1 });
    // One second later the unrecorded key's own end has passed.
    let (later, _) = served_keys(&set, 3600, now + ChronoDuration::seconds(2));
    assert!(!later.iter().any(|k| k.key.key_id() == kid(&unrecorded)));
    // A next key equal to the signing key (the end of a rotation) is served once.
    let same = KeySet { next: Some(set.signing.public_key().clone()), retired: vec![], legacy: vec![], ..set };
    assert_eq!(served_keys(&same, 3600, now).0.len(), 1);
}

#[test]
fn sign_refuses_what_it_should_not_sign() {
    let now = Utc::now();
    let b64 = |v: &str| URL_SAFE_NO_PAD.encode(v);
    let exp = |secs: i64| b64(&format!("{{\"iss\":\"a\",\"exp\":{}}}", now.timestamp() + secs));
    let cases: Vec<(String, Result<(), &str>)> = vec![
        (b64("{\"iss\":\"a\",\"sub\":\"b\"}"), Ok(())),
        (exp(3600), Ok(())),
        (exp(3600 + EXP_LEEWAY_SECONDS), Ok(())),
        (exp(3600 + EXP_LEEWAY_SECONDS + 1), Err("would expire later")),
        (b64("{\"exp\":1e300}"), Err("would expire later")),
        (b64("{\"exp\":\"soon\"}"), Err("exp is not a number")),
        (b64("[1,2]"), Err("not a JSON object")),
        (b64("not json"), Err("not a JSON object")),
        (format!("{}=", b64("{\"a\":1}")), Err("not base64url")),
        (URL_SAFE_NO_PAD.encode([0xff, 0xfe]), Err("not a JSON object")),
        ("a+b/".into(), Err("not base64url")),
        ("x".repeat(MAX_CLAIMS_LEN + 1), Err("longer than")),
    ];
    for (claims, want) in cases {
        let got = check_claims(&claims, 3600, now);
        match (want, &got) {
            (Ok(()), Ok(())) => {}
            (Err(w), Err(e)) if e.contains(w) => {}
            _ => panic!("{}: {got:?}, want {want:?}", &claims[..claims.len().min(40)]),
        }
    }
}

struct Fixed(Mutex<Arc<KeySet>>);

impl KeySetSource for Fixed {
    fn current(&self) -> Result<Arc<KeySet>, String> {
        Ok(self.0.lock().unwrap().clone())
    }
}

#[tokio::test]
async fn the_assembled_token_verifies_with_the_served_key() {
    let signing = Arc::new(key());
    let set =
        KeySet { signing: signing.clone(), next: None, retired: vec![], legacy: vec![], loaded_at: SystemTime::now() };
    let metrics = Arc::new(SignerMetrics::default());
    let svc =
        SignerService::new(Arc::new(Fixed(Mutex::new(Arc::new(set)))), 3600, Duration::from_secs(7), metrics.clone());
    let claims = URL_SAFE_NO_PAD.encode(r#"{"iss":"https://issuer","sub":"system:serviceaccount:ns:sa"}"#);
    let resp = svc.sign(tonic::Request::new(SignJwtRequest { claims: claims.clone() })).await.unwrap().into_inner();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&resp.header).unwrap()).unwrap();
    assert_eq!(header, json!({"alg": "ES256", "kid": signing.public_key().key_id(), "typ": "JWT"}));
    let keys = svc.fetch_keys(tonic::Request::new(FetchKeysRequest {})).await.unwrap().into_inner();
    assert_eq!(keys.refresh_hint_seconds, 7);
    assert_eq!(keys.keys.len(), 1);
    let served = PublicKey::from_spki_der(&keys.keys[0].key).unwrap().with_key_id(keys.keys[0].key_id.clone());
    let token = format!("{}.{claims}.{}", resp.header, resp.signature);
    let verified = jwt::verify(&token, &[served]).unwrap();
    assert_eq!(verified["sub"], "system:serviceaccount:ns:sa");
    let meta = svc.metadata(tonic::Request::new(MetadataRequest {})).await.unwrap().into_inner();
    assert_eq!(meta.max_token_expiration_seconds, 3600);
    let refused = svc.sign(tonic::Request::new(SignJwtRequest { claims: "%%".into() })).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let text = metrics.encode();
    for want in [
        "kustos_sa_signer_requests_total{method=\"Sign\",code=\"OK\"} 1",
        "kustos_sa_signer_requests_total{method=\"Sign\",code=\"InvalidArgument\"} 1",
        "kustos_sa_signer_requests_total{method=\"FetchKeys\",code=\"OK\"} 1",
        "kustos_sa_signer_requests_total{method=\"Metadata\",code=\"OK\"} 1",
        "kustos_sa_signer_keys{role=\"signing\"} 1",
        "kustos_sa_signer_keys{role=\"retired\"} 0",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}
