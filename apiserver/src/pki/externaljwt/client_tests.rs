#![allow(clippy::unwrap_used)]
use std::sync::Arc;

use kustos_ca::jwt::SigningKey;
use serde_json::json;

use super::super::dir_keys::DirKeys;
use super::super::proto::external_jwt_signer_server::ExternalJwtSignerServer;
use super::super::proto::Key;
use super::super::service::SignerService;
use super::super::signer_metrics::SignerMetrics;
use super::*;
use crate::pki::key_source::KeySource as _;

fn spki(kind: &str) -> Vec<u8> {
    match kind {
        "p256" => SigningKey::from_pem(&kustos_ca::generate_sa_keypair().unwrap().private_key_pem)
            .unwrap()
            .public_key()
            .spki_der()
            .to_vec(),
        // A P-521 key (SEQUENCE { id-ecPublicKey, secp521r1 }, BIT STRING of an uncompressed
        // point) whose point is not on the curve: well-formed PKIX, not a key.
        "p521-off-curve" => {
            let mut der = vec![0x30, 0x81, 0x9b, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
            der.extend([0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23, 0x03, 0x81, 0x86, 0x00, 0x04]);
            der.extend([7u8; 132]);
            der
        }
        "p521" => {
            use p521::elliptic_curve::sec1::ToEncodedPoint as _;
            let mut scalar = [0u8; 66];
            scalar[65] = 3;
            let point = p521::SecretKey::from_slice(&scalar).unwrap().public_key().to_encoded_point(false);
            let mut der = vec![0x30, 0x81, 0x9b, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
            der.extend([0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23, 0x03, 0x81, 0x86, 0x00]);
            der.extend(point.as_bytes());
            der
        }
        _ => unreachable!(),
    }
}

fn answer(keys: Vec<Key>, hint: i64, ts: Option<prost_types::Timestamp>) -> FetchKeysResponse {
    FetchKeysResponse { keys, data_timestamp: ts, refresh_hint_seconds: hint }
}

fn key(kid: &str, der: Vec<u8>, excluded: bool) -> Key {
    Key { key_id: kid.into(), key: der, exclude_from_oidc_discovery: excluded }
}

#[test]
fn fetch_keys_answers_are_checked_as_kube_apiserver_checks_them() {
    let ts = || Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 500_000_000 });
    let good = || vec![key("a", spki("p256"), false)];
    let cases: Vec<(&str, FetchKeysResponse, Result<usize, &str>)> = vec![
        ("fine", answer(good(), 60, ts()), Ok(1)),
        ("refresh hint zero", answer(good(), 0, ts()), Err("found invalid refresh hint (0s)")),
        ("refresh hint negative", answer(good(), -5, ts()), Err("found invalid refresh hint (-5s)")),
        ("no keys", answer(vec![], 60, ts()), Err("found no keys")),
        ("no timestamp", answer(good(), 60, None), Err("invalid data timestamp: timestamp: nil Timestamp")),
        (
            "nanos out of range",
            answer(good(), 60, Some(prost_types::Timestamp { seconds: 1, nanos: 1_000_000_000 })),
            Err("invalid data timestamp: timestamp: nanos:1000000000 not in range [0, 1e9)"),
        ),
        (
            "before year 1",
            answer(good(), 60, Some(prost_types::Timestamp { seconds: -62_135_596_801, nanos: 0 })),
            Err("before 0001-01-01"),
        ),
        ("empty key id", answer(vec![key("", spki("p256"), false)], 60, ts()), Err("found invalid public key id \"\"")),
        (
            "key id over 1 KiB",
            answer(vec![key(&"k".repeat(1025), spki("p256"), false)], 60, ts()),
            Err("found invalid public key id"),
        ),
        ("empty key", answer(vec![key("a", vec![], false)], 60, ts()), Err("found empty public key")),
        (
            "not DER",
            answer(vec![key("a", b"junk".to_vec(), false)], 60, ts()),
            Err("while parsing external public keys"),
        ),
        (
            "an EC key off its curve beside a usable one is left out",
            answer(vec![key("big", spki("p521-off-curve"), false), key("a", spki("p256"), true)], 60, ts()),
            Ok(1),
        ),
        (
            "a P-521 key is taken",
            answer(vec![key("p5", spki("p521"), false), key("a", spki("p256"), true)], 60, ts()),
            Ok(2),
        ),
        (
            "only keys kustos cannot use",
            answer(vec![key("big", spki("p521-off-curve"), false)], 60, ts()),
            Err("found no keys kustos can verify with (big: "),
        ),
    ];
    for (what, resp, want) in cases {
        match (check_keys(&resp), want) {
            (Ok(s), Ok(n)) => {
                assert_eq!(s.keys.len(), n, "{what}");
                assert!(
                    s.keys.iter().all(|k| resp.keys.iter().any(|r| r.key_id == k.key.key_id())),
                    "{what}: kids kept"
                );
            }
            (Err(e), Err(w)) => assert!(e.contains(w), "{what}: {e}"),
            (got, want) => panic!("{what}: {got:?}, want {want:?}"),
        }
    }
    let s = check_keys(&answer(good(), 1 << 40, ts())).unwrap();
    assert_eq!(s.refresh, MAX_REFRESH, "a huge hint is capped");
    assert_eq!(s.data_timestamp, 1_700_000_000.5);
}

#[test]
fn sign_headers_are_checked_as_kube_apiserver_checks_them() {
    let h = |v: serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let excluded: BTreeSet<String> = ["legacy".to_string()].into();
    let cases: Vec<(&str, String, Result<&str, &str>)> = vec![
        ("fine", h(json!({"alg": "ES256", "kid": "k1", "typ": "JWT"})), Ok("k1")),
        ("RS256", h(json!({"alg": "RS256", "kid": "k1", "typ": "JWT"})), Ok("k1")),
        ("no typ", h(json!({"alg": "ES256", "kid": "k1"})), Err("bad type")),
        ("other typ", h(json!({"alg": "ES256", "kid": "k1", "typ": "JOSE"})), Err("bad type")),
        ("no kid", h(json!({"alg": "ES256", "typ": "JWT"})), Err("key id missing")),
        ("long kid", h(json!({"alg": "ES256", "kid": "k".repeat(1025), "typ": "JWT"})), Err("key id longer than 1 kb")),
        ("none", h(json!({"alg": "none", "kid": "k1", "typ": "JWT"})), Err("bad signing algorithm \"none\"")),
        ("HS256", h(json!({"alg": "HS256", "kid": "k1", "typ": "JWT"})), Err("bad signing algorithm \"HS256\"")),
        ("ES512", h(json!({"alg": "ES512", "kid": "k1", "typ": "JWT"})), Ok("k1")),
        (
            "extra field",
            h(json!({"alg": "ES256", "kid": "k1", "typ": "JWT", "jku": "https://x"})),
            Err("while parsing header JSON"),
        ),
        (
            "excluded key",
            h(json!({"alg": "ES256", "kid": "legacy", "typ": "JWT"})),
            Err("(kid: legacy) is excluded from OIDC discovery docs"),
        ),
        ("not base64url", "eyJ+".into(), Err("while unwrapping header")),
        (
            "padded",
            format!("{}=", h(json!({"alg": "ES256", "kid": "k1", "typ": "JWT"}))),
            Err("while unwrapping header"),
        ),
        ("not JSON", URL_SAFE_NO_PAD.encode("nope"), Err("while parsing header JSON")),
    ];
    for (what, header, want) in cases {
        match (check_header(&header, &excluded), want) {
            (Ok(kid), Ok(w)) => assert_eq!(kid, w, "{what}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{what}: {e}"),
            (got, want) => panic!("{what}: {got:?}, want {want:?}"),
        }
    }
}

/// A `kustos sa-signer` service on a socket in `dir`, over `DIR/pki`.
async fn serve(dir: &std::path::Path, metrics: Arc<SignerMetrics>) -> Endpoint {
    crate::pki::ensure_sa_keys(dir).unwrap();
    let keys = DirKeys::open(dir.join("pki"), vec![], metrics.clone()).unwrap();
    let svc = SignerService::new(Arc::new(keys), 7200, Duration::from_secs(3600), metrics);
    let endpoint = Endpoint::Path(dir.join("signer.sock"));
    let listener = tokio::net::UnixListener::bind(endpoint.path().unwrap()).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ExternalJwtSignerServer::new(svc))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    endpoint
}

fn fetches(metrics: &SignerMetrics) -> usize {
    let text = metrics.encode();
    let line =
        text.lines().find(|l| l.starts_with("kustos_sa_signer_requests_total{method=\"FetchKeys\",code=\"OK\"}"));
    line.and_then(|l| l.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signs_verifies_and_shares_fetches_for_unknown_key_ids() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(SignerMetrics::default());
    let endpoint = serve(dir.path(), metrics.clone()).await;
    let signer = ExternalSigner::connect(&endpoint, Duration::from_secs(10)).await.unwrap();
    assert_eq!(signer.max_token_expiration_seconds().await.unwrap(), 7200);
    let claims = json!({"iss": "https://issuer", "sub": "system:serviceaccount:ns:sa", "exp": chrono::Utc::now().timestamp() + 600});
    let token = signer.sign_claims(&claims).await.unwrap();
    let verified =
        kustos_ca::jwt::verify(&token, &signer.keys_for(crate::pki::sa_keys::token_kid(&token).as_deref()).await)
            .unwrap();
    assert_eq!(verified["sub"], "system:serviceaccount:ns:sa");
    assert_eq!(signer.published_keys().len(), 1);
    let before = fetches(&metrics);
    // Fifty tokens with made-up key ids at once: one or two fetches answer them all.
    let misses = (0..50).map(|i| {
        let signer = signer.clone();
        async move { signer.keys_for(Some(&format!("made-up-{i}"))).await.len() }
    });
    let lens = futures::future::join_all(misses).await;
    assert!(lens.iter().all(|n| *n == 1));
    let extra = fetches(&metrics) - before;
    assert!((1..=2).contains(&extra), "{extra} fetches for 50 unknown key ids");
    // A rotation: the first Sign names the new key, fetched at once, and the token verifies.
    let pki = dir.path().join("pki");
    let (pem, new) = crate::pki::sa_keys::target_key(&pki, None).unwrap();
    crate::pki::sa_keys::run(&pki, &pem, &new, chrono::Utc::now(), |_| {}).unwrap();
    let token = signer.sign_claims(&claims).await.unwrap();
    assert_eq!(crate::pki::sa_keys::token_kid(&token).as_deref(), Some(new.as_str()));
    assert!(kustos_ca::jwt::verify(&token, &signer.verification_keys()).is_ok(), "the new key is held");
    assert_eq!(signer.verification_keys().len(), 2, "the retired key still verifies");
    let text = signer.metrics.encode();
    for want in [
        "apiserver_externaljwt_sign_request_total{code=\"OK\"} 2",
        "apiserver_externaljwt_request_duration_seconds_count{method=\"/v1.ExternalJWTSigner/Metadata\",code=\"OK\"} 1",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}

#[tokio::test]
async fn a_path_that_is_not_a_socket_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, "").unwrap();
    let err = ExternalSigner::connect(&Endpoint::Path(file.clone()), Duration::from_secs(600)).await.unwrap_err();
    assert!(format!("{err:#}").contains("is not a Unix socket"), "{err:#}");
    // Nobody listening: the last error once the time is up.
    let err =
        ExternalSigner::connect(&Endpoint::Path(dir.path().join("absent.sock")), Duration::ZERO).await.unwrap_err();
    assert!(format!("{err:#}").contains("absent.sock"), "{err:#}");
}
