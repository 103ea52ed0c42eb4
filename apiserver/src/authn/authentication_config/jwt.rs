//! JWT checks for the `jwt` authenticators: the compact JWS split, its signature against the
//! issuer's JSON Web Key Set, the times and the audiences, as upstream's OIDC authenticator
//! (go-oidc) checks them.
//!
//! What enters: a bearer token, the keys of a JWKS document, the time and the configured
//! audiences. What leaves: the verified claims, or why not. Pure: no I/O.
//!
//! Algorithms, as upstream: RS256/384/512, PS256/384/512, ES256, ES384 (ring), ES512
//! (`p521`, which ring lacks); `none` and the HMAC ones are refused.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

/// Larger tokens are not read.
pub const MAX_TOKEN_LEN: usize = kustos_ca::jwt::MAX_TOKEN_LEN;
/// Most keys read from one JWKS document.
pub const MAX_KEYS: usize = 100;
/// How far in the future `nbf` may be (go-oidc's leeway).
pub const NBF_LEEWAY_SECONDS: i64 = 60;
/// The algorithms upstream accepts that this build verifies.
pub const ALGORITHMS: &[&str] = &["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"];

/// A JSON Web Key that verifies signatures.
#[derive(Clone, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    /// The `alg` the key is restricted to, if any.
    pub alg: Option<String>,
    key: KeyMaterial,
}

impl std::fmt::Debug for Jwk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwk").field("kid", &self.kid).field("alg", &self.alg).finish_non_exhaustive()
    }
}

#[derive(Clone, PartialEq, Eq)]
enum KeyMaterial {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// Uncompressed point; `ES256`, `ES384` or `ES512`.
    Ec {
        alg: &'static str,
        point: Vec<u8>,
    },
}

fn b64(v: Option<&Value>, what: &str) -> Result<Vec<u8>, String> {
    let s = v.and_then(Value::as_str).ok_or_else(|| format!("the key has no {what}"))?;
    URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).map_err(|_| format!("the key's {what} is not base64url"))
}

/// The signing keys of a JWKS document (`{"keys": [...]}`); keys of other kinds or uses are
/// skipped; a document with no usable key is an error.
pub fn parse_jwks(doc: &[u8]) -> Result<Vec<Jwk>, String> {
    let v: Value = serde_json::from_slice(doc).map_err(|e| format!("the key set is not JSON: {e}"))?;
    let keys = v.get("keys").and_then(Value::as_array).ok_or("the key set has no keys")?;
    let mut out = Vec::new();
    for k in keys.iter().take(MAX_KEYS) {
        if k.get("use").and_then(Value::as_str).is_some_and(|u| u != "sig") {
            continue;
        }
        let key = match k.get("kty").and_then(Value::as_str) {
            Some("RSA") => match (b64(k.get("n"), "n"), b64(k.get("e"), "e")) {
                (Ok(n), Ok(e)) => KeyMaterial::Rsa { n, e },
                _ => continue,
            },
            Some("EC") => {
                let (alg, len) = match k.get("crv").and_then(Value::as_str) {
                    Some("P-256") => ("ES256", 32),
                    Some("P-384") => ("ES384", 48),
                    Some("P-521") => ("ES512", 66),
                    _ => continue,
                };
                match (b64(k.get("x"), "x"), b64(k.get("y"), "y")) {
                    (Ok(x), Ok(y)) if x.len() == len && y.len() == len => {
                        KeyMaterial::Ec { alg, point: [&[4u8][..], &x, &y].concat() }
                    }
                    _ => continue,
                }
            }
            _ => continue,
        };
        let text = |f: &str| k.get(f).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        out.push(Jwk { kid: text("kid"), alg: text("alg"), key });
    }
    if out.is_empty() {
        return Err("the key set has no usable signing key".into());
    }
    Ok(out)
}

/// Why a token's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    Malformed(String),
    /// No key has the token's `kid` (the key set may need a refresh).
    UnknownKey,
    Invalid(String),
}

/// The parts of a compact JWS, nothing verified.
pub struct Parts<'t> {
    pub alg: String,
    pub kid: Option<String>,
    pub claims: Map<String, Value>,
    signing_input: &'t [u8],
    signature: Vec<u8>,
}

fn json_object(segment: &str, what: &str) -> Result<Map<String, Value>, String> {
    let bytes = URL_SAFE_NO_PAD.decode(segment).map_err(|_| format!("the {what} is not base64url"))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(format!("the {what} is not a JSON object")),
    }
}

/// Split a compact JWS; `None` when the token is not one at all (not this authenticator's).
pub fn split(token: &str) -> Option<Result<Parts<'_>, String>> {
    if token.len() > MAX_TOKEN_LEN {
        return None;
    }
    let segments: Vec<&str> = token.split('.').collect();
    let [header, payload, sig] = segments.as_slice() else { return None };
    let header = match json_object(header, "header") {
        Ok(h) => h,
        Err(_) => return None,
    };
    let claims = match json_object(payload, "payload") {
        Ok(c) => c,
        Err(_) => return None,
    };
    Some((|| {
        if header.contains_key("crit") {
            return Err("critical header parameters are not supported".to_string());
        }
        let alg = header.get("alg").and_then(Value::as_str).ok_or("the header has no alg")?.to_string();
        let kid = header.get("kid").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        let signature = URL_SAFE_NO_PAD.decode(sig).map_err(|_| "the signature is not base64url".to_string())?;
        let signing_input = &token.as_bytes()[..token.len() - sig.len() - 1];
        Ok(Parts { alg, kid, claims, signing_input, signature })
    })())
}

fn verifies(key: &KeyMaterial, alg: &str, msg: &[u8], sig: &[u8]) -> bool {
    let rsa: Option<&'static signature::RsaParameters> = match alg {
        "RS256" => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
        "RS384" => Some(&signature::RSA_PKCS1_2048_8192_SHA384),
        "RS512" => Some(&signature::RSA_PKCS1_2048_8192_SHA512),
        "PS256" => Some(&signature::RSA_PSS_2048_8192_SHA256),
        "PS384" => Some(&signature::RSA_PSS_2048_8192_SHA384),
        "PS512" => Some(&signature::RSA_PSS_2048_8192_SHA512),
        _ => None,
    };
    match (key, rsa) {
        (KeyMaterial::Rsa { n, e }, Some(params)) => RsaPublicKeyComponents { n, e }.verify(params, msg, sig).is_ok(),
        (KeyMaterial::Ec { alg: key_alg, point }, None) if *key_alg == alg && alg == "ES512" => {
            use p521::ecdsa::signature::Verifier as _;
            match (p521::ecdsa::VerifyingKey::from_sec1_bytes(point), p521::ecdsa::Signature::from_slice(sig)) {
                (Ok(key), Ok(sig)) => key.verify(msg, &sig).is_ok(),
                _ => false,
            }
        }
        (KeyMaterial::Ec { alg: key_alg, point }, None) if *key_alg == alg => {
            let params =
                if alg == "ES256" { &signature::ECDSA_P256_SHA256_FIXED } else { &signature::ECDSA_P384_SHA384_FIXED };
            UnparsedPublicKey::new(params, point).verify(msg, sig).is_ok()
        }
        _ => false,
    }
}

/// Check the signature of `parts` with the keys (those with its `kid`, or all when it has
/// none); the algorithm must be one of [`ALGORITHMS`].
pub fn verify_signature(parts: &Parts<'_>, keys: &[Jwk]) -> Result<(), SignatureError> {
    if !ALGORITHMS.contains(&parts.alg.as_str()) {
        return Err(SignatureError::Malformed(format!(
            "unexpected signature algorithm {:?}; expected {:?}",
            parts.alg, ALGORITHMS
        )));
    }
    let candidates: Vec<&Jwk> =
        keys.iter().filter(|k| parts.kid.is_none() || k.kid.is_none() || k.kid == parts.kid).collect();
    if candidates.is_empty() {
        return Err(SignatureError::UnknownKey);
    }
    let ok = candidates.iter().any(|k| {
        k.alg.as_deref().is_none_or(|a| a == parts.alg)
            && verifies(&k.key, &parts.alg, parts.signing_input, &parts.signature)
    });
    if ok {
        Ok(())
    } else {
        Err(SignatureError::Invalid("failed to verify signature: failed to verify id token signature".into()))
    }
}

fn seconds(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, String> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64().map(|f| f as i64)),
        Some(_) => Err(format!("malformed claim {name:?}")),
    }
}

/// `exp` must be present and not passed; `nbf`, if present, not further than the leeway
/// ahead.
pub fn check_times(claims: &Map<String, Value>, now: DateTime<Utc>) -> Result<(), String> {
    let now_s = now.timestamp();
    match seconds(claims, "exp")? {
        Some(exp) if exp > now_s => {}
        Some(exp) => return Err(format!("token is expired (Token Expiry: {})", fmt_time(exp))),
        None => return Err("token is expired (Token Expiry: 0001-01-01 00:00:00 +0000 UTC)".into()),
    }
    if let Some(nbf) = seconds(claims, "nbf")? {
        if now_s + NBF_LEEWAY_SECONDS < nbf {
            return Err(format!(
                "current time {} before the nbf (not before) time: {}",
                fmt_time(now_s),
                fmt_time(nbf)
            ));
        }
    }
    Ok(())
}

fn fmt_time(secs: i64) -> String {
    DateTime::from_timestamp(secs, 0).map(|t| t.format("%Y-%m-%d %H:%M:%S %z UTC").to_string()).unwrap_or_default()
}

/// The token's audiences (`aud`: a string or a list of strings).
pub fn audiences(claims: &Map<String, Value>) -> Result<Vec<String>, String> {
    match claims.get("aud") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => {
            a.iter().map(|x| x.as_str().map(str::to_string).ok_or_else(|| "malformed claim \"aud\"".into())).collect()
        }
        Some(_) => Err("malformed claim \"aud\"".into()),
    }
}

/// `MatchAny`: one of the token's audiences is a configured one.
pub fn check_audience(claims: &Map<String, Value>, configured: &[String]) -> Result<(), String> {
    let aud = audiences(claims)?;
    if aud.iter().any(|a| configured.contains(a)) {
        Ok(())
    } else {
        Err(format!("expected audience in {configured:?} got {aud:?}"))
    }
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
