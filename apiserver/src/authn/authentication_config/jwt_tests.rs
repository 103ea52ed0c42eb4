#![allow(clippy::unwrap_used, clippy::type_complexity)]

use super::*;
use chrono::Duration;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::json;

const RSA_PKCS8: &str = include_str!("../../../../ca/src/testdata/jwt_rsa_pkcs8.key");

fn b64j(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

/// An ES256 key, its JWK (with `kid`) and a signer of (header, claims).
struct Ec {
    pair: EcdsaKeyPair,
    kid: String,
}

impl Ec {
    fn new(kid: &str) -> Ec {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        Ec {
            pair: EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap(),
            kid: kid.into(),
        }
    }

    fn jwk(&self) -> Value {
        let p = self.pair.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig",
               "x": URL_SAFE_NO_PAD.encode(&p[1..33]), "y": URL_SAFE_NO_PAD.encode(&p[33..])})
    }

    fn sign(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", b64j(header), b64j(claims));
        let sig = self.pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    fn token(&self, claims: &Value) -> String {
        self.sign(&json!({"alg": "ES256", "kid": self.kid}), claims)
    }
}

fn keys(jwks: &[Value]) -> Vec<Jwk> {
    parse_jwks(&serde_json::to_vec(&json!({ "keys": jwks })).unwrap()).unwrap()
}

fn check(token: &str, keys: &[Jwk]) -> Result<(), SignatureError> {
    let parts = split(token).expect("a JWT").map_err(SignatureError::Malformed)?;
    verify_signature(&parts, keys)
}

#[test]
fn signatures_and_algorithms() {
    let a = Ec::new("a");
    let b = Ec::new("b");
    let rsa = kustos_ca::jwt::SigningKey::from_pem(RSA_PKCS8).unwrap();
    let mut rsa_jwk = rsa.public_key().to_jwk();
    rsa_jwk["kid"] = json!("r");
    let set = keys(&[a.jwk(), rsa_jwk.clone()]);
    let claims = json!({"iss": "https://idp", "sub": "x"});
    let rs256 = rsa.sign(&claims).unwrap();
    // kustos signs with its own kid; give the key that kid too.
    let rsa_kid = kustos_ca::jwt::decode_unverified(&rs256).unwrap().0.kid.unwrap();
    rsa_jwk["kid"] = json!(rsa_kid);
    let set_rsa = keys(&[a.jwk(), rsa_jwk]);
    let unsigned = format!("{}.{}.", b64j(&json!({"alg": "none"})), b64j(&claims));
    let hs = format!("{}.{}.c2ln", b64j(&json!({"alg": "HS256", "kid": "a"})), b64j(&claims));
    let mut tampered = a.token(&claims);
    tampered.insert_str(tampered.find('.').unwrap() + 1, "eyJ4IjoxfQ");
    let cases: Vec<(&str, String, &[Jwk], Result<(), &str>)> = vec![
        ("ES256 with the right key", a.token(&claims), &set, Ok(())),
        ("RS256", rs256.clone(), &set_rsa, Ok(())),
        ("unknown kid", b.token(&claims), &set, Err("unknown")),
        ("b's token under a's kid", b.sign(&json!({"alg": "ES256", "kid": "a"}), &claims), &set, Err("invalid")),
        ("alg none", unsigned, &set, Err("malformed")),
        ("HMAC", hs, &set, Err("malformed")),
        (
            "RS256 token claiming ES256",
            rs256.replacen(&rs256[..rs256.find('.').unwrap()], &b64j(&json!({"alg": "ES256", "kid": rsa_kid})), 1),
            &set_rsa,
            Err("invalid"),
        ),
        ("no kid: every key is tried", a.sign(&json!({"alg": "ES256"}), &claims), &set, Ok(())),
    ];
    for (name, token, keys, want) in cases {
        let got = check(&token, keys);
        match (got, want) {
            (Ok(()), Ok(())) => {}
            (Err(SignatureError::UnknownKey), Err("unknown")) => {}
            (Err(SignatureError::Invalid(_)), Err("invalid")) => {}
            (Err(SignatureError::Malformed(_)), Err("malformed")) => {}
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    assert!(split(&tampered).is_none() || check(&tampered, &set).is_err(), "a changed payload fails");
    assert!(split("not-a-jwt").is_none());
    assert!(split("a.b").is_none());
    assert!(split(&"x".repeat(MAX_TOKEN_LEN + 1)).is_none());
}

#[test]
fn key_sets() {
    let a = Ec::new("a");
    let cases: Vec<(Value, Result<usize, &str>)> = vec![
        (json!({"keys": [a.jwk()]}), Ok(1)),
        (json!({"keys": [a.jwk(), {"kty": "oct", "k": "c2VjcmV0"}]}), Ok(1)),
        (json!({"keys": [{"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"}]}), Err("no usable signing key")),
        (json!({"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}), Err("no usable signing key")),
        (
            json!({"keys": [json!({"use": "enc"}).as_object().unwrap().clone().into_iter().chain(a.jwk().as_object().unwrap().clone().into_iter().filter(|(k, _)| k != "use")).collect::<serde_json::Map<_, _>>()]}),
            Err("no usable signing key"),
        ),
        (json!({"nokeys": []}), Err("has no keys")),
    ];
    for (doc, want) in cases {
        match (parse_jwks(&serde_json::to_vec(&doc).unwrap()), want) {
            (Ok(k), Ok(n)) => assert_eq!(k.len(), n, "{doc}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{doc}: {e}"),
            (got, want) => panic!("{doc}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn times_and_audiences() {
    let now = Utc::now();
    let t = |d: Duration| (now + d).timestamp();
    let obj = |v: Value| v.as_object().unwrap().clone();
    let cases: Vec<(&str, Value, bool)> = vec![
        ("valid", json!({"exp": t(Duration::minutes(5))}), true),
        ("expired", json!({"exp": t(Duration::seconds(-1))}), false),
        ("no exp", json!({}), false),
        ("nbf within the leeway", json!({"exp": t(Duration::minutes(5)), "nbf": t(Duration::seconds(30))}), true),
        ("nbf beyond the leeway", json!({"exp": t(Duration::minutes(5)), "nbf": t(Duration::minutes(2))}), false),
        ("exp not a number", json!({"exp": "soon"}), false),
    ];
    for (name, claims, ok) in cases {
        assert_eq!(check_times(&obj(claims), now).is_ok(), ok, "{name}");
    }
    let configured = vec!["a".to_string(), "b".to_string()];
    let cases: Vec<(Value, bool)> = vec![
        (json!({"aud": "a"}), true),
        (json!({"aud": ["x", "b"]}), true),
        (json!({"aud": ["x"]}), false),
        (json!({"aud": "x"}), false),
        (json!({}), false),
        (json!({"aud": 7}), false),
    ];
    for (claims, ok) in cases {
        assert_eq!(check_audience(&obj(claims.clone()), &configured).is_ok(), ok, "{claims}");
    }
}

/// ES512 (P-521, SHA-512; ring has no P-521): a token verifies with its key, not with a
/// tampered payload, another P-521 key or a key of another curve under the same kid.
#[test]
fn es512() {
    use p521::ecdsa::signature::Signer as _;
    let key = |byte: u8| {
        let mut scalar = [0x5a_u8; 66];
        scalar[0] = 0;
        scalar[65] = byte;
        p521::ecdsa::SigningKey::from_slice(&scalar).unwrap()
    };
    let jwk = |k: &p521::ecdsa::SigningKey| {
        let point = p521::ecdsa::VerifyingKey::from(k).to_encoded_point(false);
        json!({"kty": "EC", "crv": "P-521", "kid": "p", "use": "sig",
               "x": URL_SAFE_NO_PAD.encode(point.x().unwrap()), "y": URL_SAFE_NO_PAD.encode(point.y().unwrap())})
    };
    let sign = |k: &p521::ecdsa::SigningKey, claims: &Value| {
        let input = format!("{}.{}", b64j(&json!({"alg": "ES512", "kid": "p"})), b64j(claims));
        let sig: p521::ecdsa::Signature = k.sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.to_bytes()))
    };
    let (a, b) = (key(1), key(2));
    let claims = json!({"iss": "https://idp", "sub": "x"});
    let token = sign(&a, &claims);
    assert_eq!(check(&token, &keys(&[jwk(&a)])), Ok(()));
    assert!(matches!(check(&token, &keys(&[jwk(&b)])), Err(SignatureError::Invalid(_))));
    let other = sign(&a, &json!({"iss": "https://idp", "sub": "y"}));
    let (head, _) = token.rsplit_once('.').unwrap();
    let (_, other_sig) = other.rsplit_once('.').unwrap();
    assert!(matches!(check(&format!("{head}.{other_sig}"), &keys(&[jwk(&a)])), Err(SignatureError::Invalid(_))));
    let mut p256 = Ec::new("p").jwk();
    p256["kid"] = json!("p");
    assert!(matches!(check(&token, &keys(&[p256])), Err(SignatureError::Invalid(_))));
}
