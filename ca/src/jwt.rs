//! JSON Web Tokens for service accounts, as kube-apiserver issues and checks them.
//!
//! - Compact JWS (RFC 7515) signed with ES256 (ECDSA P-256), ES384 (P-384) or RS256
//!   (RSA PKCS#1 v1.5, SHA-256), through `ring`. The header is `{"alg":..,"kid":..}`. ES512
//!   (P-521, SHA-512) is verified too (an external signer may sign with it), not signed.
//! - The key id is upstream's: base64url (no padding) of the SHA-256 of the public key's
//!   PKIX (SubjectPublicKeyInfo) DER, so relying parties can match tokens to the JWKS.
//! - Verification keys come from PEM: public keys, certificates and private keys, several
//!   per file, RSA or ECDSA ([`public_keys_from_pem`]); [`jwks`] renders them as a JWK set.
//! - Claims of bound tokens ([`BoundClaims`]: `iss`, `sub`, `aud`, `exp`, `iat`, `nbf`,
//!   `jti` and the private `kubernetes.io` claim) and of legacy Secret-based tokens
//!   ([`LegacyClaims`]: issuer `kubernetes/serviceaccount` and the
//!   `kubernetes.io/serviceaccount/*` claims).
//!
//! Nothing here does I/O or reads the clock: times are parameters. Every failure on input
//! (malformed segments, bad base64 or JSON, unknown algorithms, `alg: none`, a signature
//! that does not verify, oversized tokens) is an error value, never a panic. Errors never
//! contain the token.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use ring::signature;
use serde_json::{json, Map, Value};

use super::der::{self, pem_decode_all, PemBlock};
use super::key::KeyPair;
use super::KeyAlgorithm;

/// Whether two byte strings are equal, in time that depends on their lengths only (for
/// comparing secrets such as tokens).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

/// The issuer of legacy (Secret-based) service-account tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
/// Tokens longer than this are refused before any decoding.
pub const MAX_TOKEN_LEN: usize = 128 * 1024;
/// Clock skew tolerated on `exp`, `nbf` and `iat` (go-jose's default leeway).
pub const LEEWAY_SECONDS: i64 = 60;
/// The prefix of service-account user names.
pub use crate::users::SERVICE_ACCOUNT_USER_PREFIX as SERVICE_ACCOUNT_USERNAME_PREFIX;

/// `1.2.840.113549.1.1.1`
const OID_RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
/// `1.2.840.10045.2.1`
const OID_EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
/// `1.2.840.10045.3.1.7` (prime256v1)
const OID_P256: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
/// `1.3.132.0.34` (secp384r1)
const OID_P384: &[u64] = &[1, 3, 132, 0, 34];
/// secp521r1 (P-521).
const OID_P521: &[u64] = &[1, 3, 132, 0, 35];

/// What can go wrong signing, verifying or loading keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Not a compact JWS at all (segments, base64, JSON, size).
    #[error("malformed token: {0}")]
    Malformed(String),
    #[error("unsupported signing algorithm {0:?}")]
    UnsupportedAlgorithm(String),
    /// No verification key has the token's key id.
    #[error("invalid signature, no keys found")]
    NoKeys,
    /// Keys with the token's key id exist, but none is for the token's algorithm.
    #[error("invalid signature, no key for algorithm {0}")]
    AlgorithmMismatch(String),
    #[error("invalid signature")]
    BadSignature,
    /// A claim has the wrong type.
    #[error("invalid claims: {0}")]
    Claims(String),
    #[error("invalid key: {0}")]
    Key(String),
    #[error("signing the token failed")]
    Sign,
}

pub type Result<T, E = JwtError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------

/// A JWS signature algorithm this module signs and verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    Es256,
    Es384,
    /// ECDSA P-521 with SHA-512: verified (an external signer's keys may be P-521, as
    /// kube-apiserver takes them), never signed with here.
    Es512,
    Rs256,
}

impl Algorithm {
    /// The JOSE name: `ES256`, `ES384`, `ES512`, `RS256`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::Es512 => "ES512",
            Algorithm::Rs256 => "RS256",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "ES256" => Some(Algorithm::Es256),
            "ES384" => Some(Algorithm::Es384),
            "ES512" => Some(Algorithm::Es512),
            "RS256" => Some(Algorithm::Rs256),
            _ => None,
        }
    }

    /// ring's verifier (None for ES512: ring has no P-521).
    fn verification(self) -> Option<&'static dyn signature::VerificationAlgorithm> {
        match self {
            Algorithm::Es256 => Some(&signature::ECDSA_P256_SHA256_FIXED),
            Algorithm::Es384 => Some(&signature::ECDSA_P384_SHA384_FIXED),
            Algorithm::Es512 => None,
            Algorithm::Rs256 => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
        }
    }

    /// Bytes of one EC coordinate.
    fn coordinate_len(self) -> usize {
        match self {
            Algorithm::Es256 => 32,
            Algorithm::Es384 => 48,
            Algorithm::Es512 => 66,
            Algorithm::Rs256 => 0,
        }
    }

    /// The curve of an EC algorithm, and its JWK name.
    fn curve(self) -> Option<(&'static [u64], &'static str)> {
        match self {
            Algorithm::Es256 => Some((OID_P256, "P-256")),
            Algorithm::Es384 => Some((OID_P384, "P-384")),
            Algorithm::Es512 => Some((OID_P521, "P-521")),
            Algorithm::Rs256 => None,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key id of a public key: base64url (no padding) of SHA-256 over its PKIX DER.
pub fn key_id(spki_der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, spki_der))
}

/// A verification key: RSA or ECDSA (P-256, P-384), with its key id.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    alg: Algorithm,
    key_id: String,
    /// Canonical PKIX DER (as Go's `x509.MarshalPKIXPublicKey` writes it).
    spki_der: Vec<u8>,
    /// What `ring` verifies with: the uncompressed EC point, or the PKCS#1 RSAPublicKey DER.
    raw: Vec<u8>,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey").field("alg", &self.alg).field("key_id", &self.key_id).finish()
    }
}

impl PublicKey {
    /// From the raw key of `alg` (EC point or RSAPublicKey DER), checking its shape.
    fn from_raw(alg: Algorithm, raw: Vec<u8>) -> Result<Self> {
        let alg_id = match alg {
            Algorithm::Rs256 => {
                let (n, _) = rsa_components(&raw)?;
                let bits = n.len() * 8;
                if !(2048..=8192).contains(&bits) {
                    return Err(JwtError::Key(format!("RSA keys must have 2048 to 8192 bits, got {bits}")));
                }
                der::constructed(der::TAG_SEQUENCE, &[&der::oid(OID_RSA_ENCRYPTION), &der::tlv(der::TAG_NULL, &[])])
            }
            Algorithm::Es256 | Algorithm::Es384 | Algorithm::Es512 => {
                let len = alg.coordinate_len();
                if raw.len() != 1 + 2 * len || raw.first() != Some(&0x04) {
                    return Err(JwtError::Key("the EC public key is not an uncompressed point of its curve".into()));
                }
                if alg == Algorithm::Es512 && p521::ecdsa::VerifyingKey::from_sec1_bytes(&raw).is_err() {
                    return Err(JwtError::Key("the EC public key is not a point of P-521".into()));
                }
                let curve = alg.curve().map_or(OID_P256, |(oid, _)| oid);
                der::constructed(der::TAG_SEQUENCE, &[&der::oid(OID_EC_PUBLIC_KEY), &der::oid(curve)])
            }
        };
        let mut bits = Vec::with_capacity(raw.len() + 1);
        bits.push(0);
        bits.extend_from_slice(&raw);
        let spki_der = der::constructed(der::TAG_SEQUENCE, &[&alg_id, &der::tlv(der::TAG_BIT_STRING, &bits)]);
        Ok(PublicKey { alg, key_id: key_id(&spki_der), spki_der, raw })
    }

    /// From PKIX SubjectPublicKeyInfo DER (`PUBLIC KEY`).
    pub fn from_spki_der(spki: &[u8]) -> Result<Self> {
        let bad = |what: &str| JwtError::Key(format!("malformed public key: {what}"));
        let (outer, rest) = der::read_tlv(spki).map_err(|_| bad("not DER"))?;
        if outer.tag != der::TAG_SEQUENCE || !rest.is_empty() {
            return Err(bad("not a SubjectPublicKeyInfo"));
        }
        let parts = der::children(outer.content).map_err(|_| bad("not DER"))?;
        let [alg_id, key] = parts.as_slice() else {
            return Err(bad("not a SubjectPublicKeyInfo"));
        };
        if alg_id.tag != der::TAG_SEQUENCE || key.tag != der::TAG_BIT_STRING {
            return Err(bad("not a SubjectPublicKeyInfo"));
        }
        let raw = match key.content.split_first() {
            Some((0, raw)) => raw.to_vec(),
            _ => return Err(bad("the key bit string has unused bits")),
        };
        let alg_parts = der::children(alg_id.content).map_err(|_| bad("not DER"))?;
        let oid = alg_parts.first().map(|t| t.raw).unwrap_or_default();
        let param = alg_parts.get(1).map(|t| t.raw).unwrap_or_default();
        if oid == der::oid(OID_RSA_ENCRYPTION).as_slice() {
            PublicKey::from_raw(Algorithm::Rs256, raw)
        } else if oid == der::oid(OID_EC_PUBLIC_KEY).as_slice() {
            if param == der::oid(OID_P256).as_slice() {
                PublicKey::from_raw(Algorithm::Es256, raw)
            } else if param == der::oid(OID_P384).as_slice() {
                PublicKey::from_raw(Algorithm::Es384, raw)
            } else if param == der::oid(OID_P521).as_slice() {
                PublicKey::from_raw(Algorithm::Es512, raw)
            } else {
                Err(JwtError::Key("unsupported EC curve: must be P-256, P-384 or P-521".into()))
            }
        } else {
            Err(JwtError::Key("unsupported public key type: must be RSA or ECDSA".into()))
        }
    }

    /// From a PKCS#1 RSAPublicKey DER (`RSA PUBLIC KEY`).
    pub fn from_rsa_public_key_der(der: &[u8]) -> Result<Self> {
        PublicKey::from_raw(Algorithm::Rs256, der.to_vec())
    }

    /// The public half of a private key (RSA or ECDSA P-256/P-384).
    pub fn from_key_pair(key: &KeyPair) -> Result<Self> {
        let alg = match key.algorithm() {
            KeyAlgorithm::EcdsaP256 => Algorithm::Es256,
            KeyAlgorithm::EcdsaP384 => Algorithm::Es384,
            KeyAlgorithm::Rsa => Algorithm::Rs256,
            KeyAlgorithm::Ed25519 => return Err(JwtError::Key("Ed25519 keys cannot sign tokens".into())),
        };
        PublicKey::from_raw(alg, key.public_key_raw().to_vec())
    }

    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The same key under another key id: the one an external signer names it by.
    pub fn with_key_id(mut self, key_id: impl Into<String>) -> Self {
        self.key_id = key_id.into();
        self
    }

    /// Canonical PKIX DER.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The JWK (RFC 7517) of this key: `use: sig`, its `kid` and `alg`.
    pub fn to_jwk(&self) -> Value {
        match self.alg {
            Algorithm::Rs256 => {
                let (n, e) = rsa_components(&self.raw).unwrap_or_default();
                json!({
                    "use": "sig",
                    "kty": "RSA",
                    "kid": self.key_id,
                    "alg": self.alg.as_str(),
                    "n": URL_SAFE_NO_PAD.encode(n),
                    "e": URL_SAFE_NO_PAD.encode(e),
                })
            }
            Algorithm::Es256 | Algorithm::Es384 | Algorithm::Es512 => {
                let len = self.alg.coordinate_len();
                let point = self.raw.get(1..).unwrap_or_default();
                let (x, y) = point.split_at(len.min(point.len()));
                json!({
                    "use": "sig",
                    "kty": "EC",
                    "kid": self.key_id,
                    "crv": self.alg.curve().map_or("", |(_, name)| name),
                    "alg": self.alg.as_str(),
                    "x": URL_SAFE_NO_PAD.encode(x),
                    "y": URL_SAFE_NO_PAD.encode(y),
                })
            }
        }
    }

    fn verifies(&self, message: &[u8], sig: &[u8]) -> bool {
        match self.alg.verification() {
            Some(alg) => signature::UnparsedPublicKey::new(alg, &self.raw).verify(message, sig).is_ok(),
            None => {
                use p521::ecdsa::signature::Verifier as _;
                let (Ok(key), Ok(sig)) =
                    (p521::ecdsa::VerifyingKey::from_sec1_bytes(&self.raw), p521::ecdsa::Signature::from_slice(sig))
                else {
                    return false;
                };
                key.verify(message, &sig).is_ok()
            }
        }
    }
}

/// Modulus and exponent of a PKCS#1 RSAPublicKey, without leading zero bytes.
fn rsa_components(der_bytes: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let bad = || JwtError::Key("malformed RSA public key".into());
    let (seq, rest) = der::read_tlv(der_bytes).map_err(|_| bad())?;
    if seq.tag != der::TAG_SEQUENCE || !rest.is_empty() {
        return Err(bad());
    }
    let parts = der::children(seq.content).map_err(|_| bad())?;
    let [n, e] = parts.as_slice() else { return Err(bad()) };
    if n.tag != der::TAG_INTEGER || e.tag != der::TAG_INTEGER {
        return Err(bad());
    }
    let strip = |b: &[u8]| -> Vec<u8> {
        let skip = b.iter().take_while(|&&x| x == 0).count();
        b[skip..].to_vec()
    };
    let (n, e) = (strip(n.content), strip(e.content));
    if n.is_empty() || e.is_empty() {
        return Err(bad());
    }
    Ok((n, e))
}

/// Every RSA or ECDSA public key in `pem`, like upstream's `keyutil.ParsePublicKeysPEM`:
/// `PUBLIC KEY`, `RSA PUBLIC KEY`, `CERTIFICATE` (its key) and private keys (`PRIVATE KEY`,
/// `RSA PRIVATE KEY`, `EC PRIVATE KEY`: their public half). Other blocks, and keys of other
/// types, are skipped; no key at all is an error.
pub fn public_keys_from_pem(pem: &str) -> Result<Vec<PublicKey>> {
    let blocks = pem_decode_all(pem).map_err(|e| JwtError::Key(e.to_string()))?;
    let keys: Vec<PublicKey> = blocks.iter().filter_map(|b| public_key_from_block(b).ok()).collect();
    if keys.is_empty() {
        return Err(JwtError::Key("data does not contain any valid RSA or ECDSA public keys".into()));
    }
    Ok(keys)
}

fn public_key_from_block(block: &PemBlock) -> Result<PublicKey> {
    match block.label.as_str() {
        "PUBLIC KEY" => PublicKey::from_spki_der(&block.der),
        "RSA PUBLIC KEY" => PublicKey::from_rsa_public_key_der(&block.der),
        "CERTIFICATE" => {
            use x509_parser::prelude::FromDer as _;
            let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&block.der)
                .map_err(|e| JwtError::Key(format!("invalid certificate: {e}")))?;
            PublicKey::from_spki_der(cert.public_key().raw)
        }
        "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" => {
            let key = KeyPair::from_block(block).map_err(|e| JwtError::Key(e.to_string()))?;
            PublicKey::from_key_pair(&key)
        }
        other => Err(JwtError::Key(format!("not a key block: {other}"))),
    }
}

/// A JWK set (`{"keys": [...]}`) of the given keys.
pub fn jwks(keys: &[PublicKey]) -> Value {
    json!({ "keys": keys.iter().map(PublicKey::to_jwk).collect::<Vec<_>>() })
}

/// The distinct algorithms of `keys`, sorted by name.
pub fn signing_algorithms(keys: &[PublicKey]) -> Vec<String> {
    let mut algs: Vec<String> = keys.iter().map(|k| k.alg.as_str().to_string()).collect();
    algs.sort();
    algs.dedup();
    algs
}

enum Signer {
    Ecdsa(signature::EcdsaKeyPair),
    Rsa(signature::RsaKeyPair),
}

/// A private key that signs tokens: ECDSA P-256 (ES256), P-384 (ES384) or RSA (RS256).
/// `Debug` never shows key material.
pub struct SigningKey {
    public: PublicKey,
    signer: Signer,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey").field("public", &self.public).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The first private key of `pem` (`PRIVATE KEY`, `RSA PRIVATE KEY`, `EC PRIVATE KEY`).
    pub fn from_pem(pem: &str) -> Result<Self> {
        let key = KeyPair::from_pem(pem).map_err(|e| JwtError::Key(e.to_string()))?;
        Self::from_key_pair(&key)
    }

    pub fn from_key_pair(key: &KeyPair) -> Result<Self> {
        let public = PublicKey::from_key_pair(key)?;
        let rejected = |e: ring::error::KeyRejected| JwtError::Key(format!("the private key was rejected: {e}"));
        let pkcs8 = key.private_key_der();
        let rng = ring::rand::SystemRandom::new();
        let signer = match public.alg {
            Algorithm::Es256 => Signer::Ecdsa(
                signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
                    .map_err(rejected)?,
            ),
            Algorithm::Es384 => Signer::Ecdsa(
                signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P384_SHA384_FIXED_SIGNING, pkcs8, &rng)
                    .map_err(rejected)?,
            ),
            Algorithm::Rs256 => Signer::Rsa(signature::RsaKeyPair::from_pkcs8(pkcs8).map_err(rejected)?),
            Algorithm::Es512 => return Err(JwtError::Key("P-521 keys cannot sign tokens here".into())),
        };
        Ok(SigningKey { public, signer })
    }

    /// The verification key (and key id) of this key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// A compact JWS of `claims` (a JSON object): header `{"alg":..,"kid":..}`.
    pub fn sign(&self, claims: &Value) -> Result<String> {
        if !claims.is_object() {
            return Err(JwtError::Claims("the claims must be a JSON object".into()));
        }
        let header = json!({"alg": self.public.alg.as_str(), "kid": self.public.key_id});
        let header = serde_json::to_vec(&header).map_err(|_| JwtError::Sign)?;
        let payload = serde_json::to_vec(claims).map_err(|_| JwtError::Sign)?;
        let signing_input = format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(payload));
        let sig = self.sign_input(signing_input.as_bytes())?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }

    /// The JWS signature (raw bytes) of a signing input `base64url(header).base64url(payload)`
    /// built elsewhere (an external signer's `Sign`).
    pub fn sign_input(&self, signing_input: &[u8]) -> Result<Vec<u8>> {
        let rng = ring::rand::SystemRandom::new();
        match &self.signer {
            Signer::Ecdsa(k) => Ok(k.sign(&rng, signing_input).map_err(|_| JwtError::Sign)?.as_ref().to_vec()),
            Signer::Rsa(k) => {
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, signing_input, &mut sig).map_err(|_| JwtError::Sign)?;
                Ok(sig)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parsing and verification
// ---------------------------------------------------------------------------------------

/// The protected header of a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub alg: String,
    pub kid: Option<String>,
}

/// A token split and decoded, nothing verified.
struct Parts {
    header: Header,
    claims: Map<String, Value>,
    /// `header.payload` as sent.
    signing_input_len: usize,
    signature: Vec<u8>,
}

fn b64_json_object(segment: &str, what: &str) -> Result<Map<String, Value>> {
    let bytes =
        URL_SAFE_NO_PAD.decode(segment).map_err(|_| JwtError::Malformed(format!("the {what} is not base64url")))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(JwtError::Malformed(format!("the {what} is not a JSON object"))),
        Err(_) => Err(JwtError::Malformed(format!("the {what} is not JSON"))),
    }
}

fn split(token: &str) -> Result<Parts> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::Malformed("the token is too large".into()));
    }
    let segments: Vec<&str> = token.split('.').collect();
    let [header, payload, sig] = segments.as_slice() else {
        return Err(JwtError::Malformed("compact JWS must have three segments".into()));
    };
    let h = b64_json_object(header, "header")?;
    if h.contains_key("crit") {
        return Err(JwtError::Malformed("critical header parameters are not supported".into()));
    }
    let alg = match h.get("alg") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(JwtError::Malformed("the header has no alg".into())),
    };
    let kid = match h.get("kid") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(JwtError::Malformed("the header's kid is not a string".into())),
    };
    let claims = b64_json_object(payload, "payload")?;
    let signature =
        URL_SAFE_NO_PAD.decode(sig).map_err(|_| JwtError::Malformed("the signature is not base64url".into()))?;
    Ok(Parts { header: Header { alg, kid }, claims, signing_input_len: header.len() + 1 + payload.len(), signature })
}

/// Header and claims of a token without checking the signature. Do not trust the result.
pub fn decode_unverified(token: &str) -> Result<(Header, Map<String, Value>)> {
    let p = split(token)?;
    Ok((p.header, p.claims))
}

/// The `iss` claim of what looks like a compact JWS, unverified (upstream's issuer pre-check
/// that decides whether a token is a service-account token at all). `None` for anything
/// else (JSON serialization, wrong segment count, bad base64 or JSON, no string `iss`).
pub fn unverified_issuer(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_LEN || token.trim_start().starts_with('{') {
        return None;
    }
    let segments: Vec<&str> = token.split('.').collect();
    let [_, payload, _] = segments.as_slice() else { return None };
    let claims = b64_json_object(payload, "payload").ok()?;
    match claims.get("iss") {
        Some(Value::String(s)) => Some(s.clone()),
        // Go decodes a missing or null iss as "".
        None | Some(Value::Null) => Some(String::new()),
        Some(_) => None,
    }
}

/// Verify a token against `keys` (the ones with the token's `kid`, or all when it has
/// none; each only for its own algorithm) and return its claims.
pub fn verify(token: &str, keys: &[PublicKey]) -> Result<Map<String, Value>> {
    let p = split(token)?;
    let Some(alg) = Algorithm::parse(&p.header.alg) else {
        return Err(JwtError::UnsupportedAlgorithm(p.header.alg));
    };
    let candidates: Vec<&PublicKey> =
        keys.iter().filter(|k| p.header.kid.as_deref().is_none_or(|kid| kid == k.key_id)).collect();
    if candidates.is_empty() {
        return Err(JwtError::NoKeys);
    }
    let usable: Vec<&&PublicKey> = candidates.iter().filter(|k| k.alg == alg).collect();
    if usable.is_empty() {
        return Err(JwtError::AlgorithmMismatch(alg.as_str().into()));
    }
    let signing_input = token.as_bytes().get(..p.signing_input_len).unwrap_or_default();
    if usable.iter().any(|k| k.verifies(signing_input, &p.signature)) {
        Ok(p.claims)
    } else {
        Err(JwtError::BadSignature)
    }
}

mod claims;
pub use claims::*;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    // Keys generated by openssl (testdata/), with key ids computed by openssl as
    // `openssl pkey -pubout -outform DER | sha256 | base64url`.
    const RSA_PKCS8: &str = include_str!("testdata/jwt_rsa_pkcs8.key");
    const RSA_SPKI: &str = include_str!("testdata/jwt_rsa.pub");
    const RSA_PKCS1_PUB: &str = include_str!("testdata/jwt_rsa_pkcs1.pub");
    const RSA_KID: &str = "-RhGoJAA3qyTIHF7LeEvHQm1TLXulGC14hPIWYOWaSc";
    const EC384_SEC1: &str = include_str!("testdata/jwt_ec384_sec1.key");
    const EC384_KID: &str = "FEWIkM5UQJnrjEjU7GwuWNS0gbDcoaX8KzmUByCfLG0";
    const EC256_SEC1: &str = include_str!("testdata/ec_sec1.pem");
    const EC256_KID: &str = "ixA5dYjyI1laJ8nQWuO3jMaxAqFdv4esnkFhGYo-41k";
    const RSA_CA_CERT: &str = include_str!("testdata/rsa_ca.crt");
    const RSA_CA_KEY: &str = include_str!("testdata/rsa_ca_pkcs1.key");
    const RSA_CA_KID: &str = "F_SBxB1sw4I2SKbJEbhlEg8z_57e2WAp-pqhs76SKfo";
    /// Tokens signed by openssl (`<alg> <token>` per line) with the keys above.
    const OPENSSL_TOKENS: &str = include_str!("testdata/jwt_openssl_tokens.txt");

    fn one_key(pem: &str) -> PublicKey {
        let keys = public_keys_from_pem(pem).unwrap();
        assert_eq!(keys.len(), 1);
        keys.into_iter().next().unwrap()
    }

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).unwrap()
    }

    fn flip(token: &str, index: usize) -> String {
        let mut b = token.as_bytes().to_vec();
        b[index] = if b[index] == b'A' { b'B' } else { b'A' };
        String::from_utf8(b).unwrap()
    }

    fn b64j(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    }

    #[test]
    fn key_ids_match_openssl_for_every_key_form() {
        let cases: &[(&str, &str, Algorithm)] = &[
            ("RSA PKCS#8 private key", RSA_PKCS8, Algorithm::Rs256),
            ("RSA SubjectPublicKeyInfo", RSA_SPKI, Algorithm::Rs256),
            ("RSA PKCS#1 public key", RSA_PKCS1_PUB, Algorithm::Rs256),
            ("EC P-384 SEC1 private key", EC384_SEC1, Algorithm::Es384),
            ("EC P-256 SEC1 private key", EC256_SEC1, Algorithm::Es256),
            ("RSA certificate", RSA_CA_CERT, Algorithm::Rs256),
            ("RSA PKCS#1 private key", RSA_CA_KEY, Algorithm::Rs256),
        ];
        let expected = [RSA_KID, RSA_KID, RSA_KID, EC384_KID, EC256_KID, RSA_CA_KID, RSA_CA_KID];
        for ((what, pem, alg), kid) in cases.iter().zip(expected) {
            let k = one_key(pem);
            assert_eq!(k.key_id(), kid, "{what}");
            assert_eq!(k.algorithm(), *alg, "{what}");
            assert_eq!(key_id(k.spki_der()), kid, "{what}");
            // The canonical DER parses back to the same key.
            assert_eq!(PublicKey::from_spki_der(k.spki_der()).unwrap(), k, "{what}");
        }
        // A generated key: the SPKI rcgen writes is the canonical one.
        let gen = KeyPair::generate().unwrap();
        let pk = PublicKey::from_key_pair(&gen).unwrap();
        assert_eq!(pk.spki_der(), gen.public_key_der().as_slice());
    }

    #[test]
    fn several_keys_per_file_and_non_key_blocks_skipped() {
        let other = der::pem_encode("X509 CRL", b"not a key");
        let ed25519 = include_str!("testdata/ed25519_pkcs8.pem");
        let bundle = format!("comment\n{RSA_SPKI}{other}{EC256_SEC1}{ed25519}{RSA_CA_CERT}{EC384_SEC1}");
        let kids: Vec<String> = public_keys_from_pem(&bundle).unwrap().iter().map(|k| k.key_id().to_string()).collect();
        assert_eq!(kids, [RSA_KID, EC256_KID, RSA_CA_KID, EC384_KID]);

        let none: &[(&str, String)] = &[
            ("empty", String::new()),
            ("text only", "hello".into()),
            ("only Ed25519", ed25519.into()),
            ("only garbage blocks", der::pem_encode("PUBLIC KEY", b"junk")),
            ("unterminated block", "-----BEGIN PUBLIC KEY-----\nAAAA\n".into()),
        ];
        for (what, pem) in none {
            assert!(public_keys_from_pem(pem).is_err(), "{what}");
        }
    }

    #[test]
    fn malformed_public_keys_are_errors() {
        let ec = one_key(EC256_SEC1);
        let mut truncated = ec.spki_der().to_vec();
        truncated.truncate(truncated.len() - 3);
        let mut trailing = ec.spki_der().to_vec();
        trailing.push(0);
        let mut compressed_point = vec![0x02];
        compressed_point.extend_from_slice(&[7; 32]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("truncated", truncated),
            ("trailing bytes", trailing),
            ("not a sequence", der::tlv(der::TAG_INTEGER, &[1])),
            ("compressed EC point", {
                let alg = der::constructed(der::TAG_SEQUENCE, &[&der::oid(OID_EC_PUBLIC_KEY), &der::oid(OID_P256)]);
                let mut bits = vec![0];
                bits.extend_from_slice(&compressed_point);
                der::constructed(der::TAG_SEQUENCE, &[&alg, &der::tlv(der::TAG_BIT_STRING, &bits)])
            }),
            ("unknown curve", {
                let alg = der::constructed(
                    der::TAG_SEQUENCE,
                    &[&der::oid(OID_EC_PUBLIC_KEY), &der::oid(&[1, 3, 132, 0, 35])],
                );
                der::constructed(der::TAG_SEQUENCE, &[&alg, &der::tlv(der::TAG_BIT_STRING, &[0, 4, 1, 2])])
            }),
            ("small RSA key", {
                let rsa = der::constructed(
                    der::TAG_SEQUENCE,
                    &[&der::tlv(der::TAG_INTEGER, &[0, 0xc3, 0x11]), &der::tlv(der::TAG_INTEGER, &[1, 0, 1])],
                );
                let alg = der::constructed(
                    der::TAG_SEQUENCE,
                    &[&der::oid(OID_RSA_ENCRYPTION), &der::tlv(der::TAG_NULL, &[])],
                );
                let mut bits = vec![0];
                bits.extend_from_slice(&rsa);
                der::constructed(der::TAG_SEQUENCE, &[&alg, &der::tlv(der::TAG_BIT_STRING, &bits)])
            }),
        ];
        for (what, der_bytes) in cases {
            assert!(PublicKey::from_spki_der(&der_bytes).is_err(), "{what}");
        }
    }

    #[test]
    fn signs_and_verifies_with_each_algorithm() {
        let gen = KeyPair::generate().unwrap().private_key_pem();
        let claims = json!({"iss": "https://issuer", "sub": "someone", "n": 1});
        for (what, pem, alg) in [
            ("generated P-256", gen.as_str(), Algorithm::Es256),
            ("SEC1 P-384", EC384_SEC1, Algorithm::Es384),
            ("PKCS#8 RSA", RSA_PKCS8, Algorithm::Rs256),
            ("PKCS#1 RSA", RSA_CA_KEY, Algorithm::Rs256),
        ] {
            let key = SigningKey::from_pem(pem).unwrap();
            assert_eq!(key.public_key().algorithm(), alg, "{what}");
            let token = key.sign(&claims).unwrap();
            let (header, unverified) = decode_unverified(&token).unwrap();
            assert_eq!(header, Header { alg: alg.as_str().into(), kid: Some(key.public_key().key_id().into()) });
            assert_eq!(Value::Object(unverified), claims, "{what}");
            let verified = verify(&token, std::slice::from_ref(key.public_key())).unwrap();
            assert_eq!(Value::Object(verified), claims, "{what}");
            // Among other keys too.
            let keys = vec![one_key(RSA_SPKI), one_key(EC256_SEC1), key.public_key().clone()];
            assert!(verify(&token, &keys).is_ok(), "{what}");
            assert!(!format!("{key:?}").contains("PRIVATE"), "{what}");
        }
        assert!(matches!(SigningKey::from_pem(RSA_SPKI), Err(JwtError::Key(_))));
        let ed = include_str!("testdata/ed25519_pkcs8.pem");
        assert!(matches!(SigningKey::from_pem(ed), Err(JwtError::Key(_))));
        let key = SigningKey::from_pem(&gen).unwrap();
        assert!(matches!(key.sign(&json!(["not", "an", "object"])), Err(JwtError::Claims(_))));
    }

    #[test]
    fn verifies_tokens_signed_by_openssl() {
        let keys = public_keys_from_pem(&format!("{RSA_SPKI}{EC256_SEC1}{EC384_SEC1}")).unwrap();
        let mut seen = 0;
        for line in OPENSSL_TOKENS.lines() {
            let (alg, token) = line.split_once(' ').unwrap();
            let claims = verify(token, &keys).unwrap_or_else(|e| panic!("{alg}: {e}"));
            assert_eq!(claims["sub"], "system:serviceaccount:default:openssl", "{alg}");
            let bound = BoundClaims::from_claims(&claims).unwrap();
            assert_eq!(bound.service_account, ObjectRef::new("openssl", "uid-1"));
            assert_eq!(bound.expiry, Some(2_000_000_000));
            // The same token with a flipped signature byte fails.
            let bad = flip(token, token.len() - 5);
            assert_eq!(verify(&bad, &keys), Err(JwtError::BadSignature), "{alg}");
            seen += 1;
        }
        assert_eq!(seen, 3);
    }

    #[test]
    fn rejects_bad_tokens_with_errors() {
        let key = SigningKey::from_pem(EC256_SEC1).unwrap();
        let rsa = SigningKey::from_pem(RSA_PKCS8).unwrap();
        let keys = vec![key.public_key().clone(), rsa.public_key().clone()];
        let good = key.sign(&json!({"iss": "x"})).unwrap();
        let parts: Vec<&str> = good.split('.').collect();
        let (h, p, s) = (parts[0], parts[1], parts[2]);
        let kid = key.public_key().key_id().to_string();
        let with_header = |header: Value| format!("{}.{p}.{s}", b64j(&header));
        let other = SigningKey::from_pem(&KeyPair::generate().unwrap().private_key_pem()).unwrap();
        let other_no_kid = {
            let t = other.sign(&json!({"iss": "x"})).unwrap();
            let ps: Vec<&str> = t.split('.').collect();
            format!("{}.{}.{}", b64j(&json!({"alg": "ES256"})), ps[1], ps[2])
        };
        let huge = format!("{h}.{}.{s}", "A".repeat(MAX_TOKEN_LEN));

        let cases: Vec<(&str, String, JwtError)> = vec![
            ("flipped signature byte", flip(&good, good.len() - 3), JwtError::BadSignature),
            ("payload of another token", format!("{h}.{}.{s}", b64j(&json!({"iss": "y"}))), JwtError::BadSignature),
            ("truncated signature", format!("{h}.{p}.{}", &s[..s.len() - 2]), JwtError::BadSignature),
            ("empty signature", format!("{h}.{p}."), JwtError::BadSignature),
            ("signed by an unknown key", other.sign(&json!({"iss": "x"})).unwrap(), JwtError::NoKeys),
            ("unknown key, no kid", other_no_kid, JwtError::BadSignature),
            (
                "alg none",
                with_header(json!({"alg": "none", "kid": kid})),
                JwtError::UnsupportedAlgorithm("none".into()),
            ),
            (
                "alg HS256",
                with_header(json!({"alg": "HS256", "kid": kid})),
                JwtError::UnsupportedAlgorithm("HS256".into()),
            ),
            (
                "alg RS256 with an EC key",
                with_header(json!({"alg": "RS256", "kid": kid})),
                JwtError::AlgorithmMismatch("RS256".into()),
            ),
            (
                "alg ES384 with an EC P-256 key",
                with_header(json!({"alg": "ES384", "kid": kid})),
                JwtError::AlgorithmMismatch("ES384".into()),
            ),
            ("alg RS256 without kid", with_header(json!({"alg": "RS256"})), JwtError::BadSignature),
            ("missing alg", with_header(json!({"kid": kid})), JwtError::Malformed("the header has no alg".into())),
            ("alg not a string", with_header(json!({"alg": 256})), JwtError::Malformed("the header has no alg".into())),
            (
                "kid not a string",
                with_header(json!({"alg": "ES256", "kid": 7})),
                JwtError::Malformed("the header's kid is not a string".into()),
            ),
            (
                "crit header",
                with_header(json!({"alg": "ES256", "kid": kid, "crit": ["exp"]})),
                JwtError::Malformed("critical header parameters are not supported".into()),
            ),
            (
                "header is an array",
                with_header(json!(["ES256"])),
                JwtError::Malformed("the header is not a JSON object".into()),
            ),
            (
                "header is not JSON",
                format!("{}.{p}.{s}", URL_SAFE_NO_PAD.encode("{alg")),
                JwtError::Malformed("the header is not JSON".into()),
            ),
            (
                "header is not base64url",
                format!("h*h.{p}.{s}"),
                JwtError::Malformed("the header is not base64url".into()),
            ),
            ("padded header", format!("{h}=.{p}.{s}"), JwtError::Malformed("the header is not base64url".into())),
            (
                "payload is not JSON",
                format!("{h}.{}.{s}", URL_SAFE_NO_PAD.encode("nope")),
                JwtError::Malformed("the payload is not JSON".into()),
            ),
            (
                "payload is a string",
                format!("{h}.{}.{s}", b64j(&json!("iss"))),
                JwtError::Malformed("the payload is not a JSON object".into()),
            ),
            (
                "payload is not base64url",
                format!("{h}.p+p.{s}"),
                JwtError::Malformed("the payload is not base64url".into()),
            ),
            (
                "signature is not base64url",
                format!("{h}.{p}.s/s"),
                JwtError::Malformed("the signature is not base64url".into()),
            ),
            ("two segments", format!("{h}.{p}"), JwtError::Malformed("compact JWS must have three segments".into())),
            (
                "four segments",
                format!("{good}.{s}"),
                JwtError::Malformed("compact JWS must have three segments".into()),
            ),
            ("empty", String::new(), JwtError::Malformed("compact JWS must have three segments".into())),
            ("dots only", "..".into(), JwtError::Malformed("the header is not JSON".into())),
            (
                "JSON serialization",
                json!({"payload": p, "signature": s}).to_string(),
                JwtError::Malformed("compact JWS must have three segments".into()),
            ),
            ("huge", huge, JwtError::Malformed("the token is too large".into())),
        ];
        for (what, token, want) in cases {
            assert_eq!(verify(&token, &keys), Err(want), "{what}");
        }
        assert_eq!(verify(&good, &[]), Err(JwtError::NoKeys));
        assert!(verify(&good, &keys).is_ok());
    }

    #[test]
    fn mutated_tokens_never_panic_and_never_verify() {
        let key = SigningKey::from_pem(EC256_SEC1).unwrap();
        let keys = vec![key.public_key().clone()];
        let good = key.sign(&json!({"iss": "x", "aud": ["a"]})).unwrap();
        for i in 0..good.len() {
            for replacement in [".", "A", "{", "=", "\u{e9}", ""] {
                let mut t = good.clone();
                t.replace_range(i..i + 1, replacement);
                if t == good {
                    continue;
                }
                assert!(verify(&t, &keys).is_err(), "mutation at {i} with {replacement:?}");
                let _ = unverified_issuer(&t);
                let _ = decode_unverified(&t);
            }
        }
    }

    #[test]
    fn unverified_issuer_peeks_like_upstream() {
        let key = SigningKey::from_pem(EC256_SEC1).unwrap();
        let p = |v: Value| format!("e30.{}.sig", b64j(&v));
        let cases: Vec<(&str, String, Option<&str>)> = vec![
            ("signed token", key.sign(&json!({"iss": "https://a"})).unwrap(), Some("https://a")),
            ("unsigned, any header", p(json!({"iss": "kubernetes/serviceaccount"})), Some(LEGACY_ISSUER)),
            ("no iss", p(json!({"sub": "x"})), Some("")),
            ("iss not a string", p(json!({"iss": 5})), None),
            ("payload array", p(json!(["iss"])), None),
            ("JSON serialization", r#"{"payload":"x"}"#.into(), None),
            ("leading space and JSON", "  {\"a\":1}".into(), None),
            ("two segments", "a.b".into(), None),
            ("opaque token", "abcdef.0123456789abcdef".into(), None),
            ("bad base64", "a.***.c".into(), None),
        ];
        for (what, token, want) in cases {
            assert_eq!(unverified_issuer(&token).as_deref(), want, "{what}");
        }
    }

    #[test]
    fn jwks_has_public_parameters_only() {
        let keys = public_keys_from_pem(&format!("{EC256_SEC1}{RSA_PKCS8}{EC384_SEC1}")).unwrap();
        let set = jwks(&keys);
        let list = set["keys"].as_array().unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[0]["kty"], "EC");
        assert_eq!(list[0]["crv"], "P-256");
        assert_eq!(list[0]["alg"], "ES256");
        assert_eq!(list[0]["use"], "sig");
        assert_eq!(list[0]["kid"], EC256_KID);
        assert_eq!(URL_SAFE_NO_PAD.decode(list[0]["x"].as_str().unwrap()).unwrap().len(), 32);
        assert_eq!(URL_SAFE_NO_PAD.decode(list[0]["y"].as_str().unwrap()).unwrap().len(), 32);
        assert_eq!(list[1]["kty"], "RSA");
        assert_eq!(list[1]["alg"], "RS256");
        assert_eq!(list[1]["kid"], RSA_KID);
        assert_eq!(list[1]["e"], "AQAB");
        assert_eq!(URL_SAFE_NO_PAD.decode(list[1]["n"].as_str().unwrap()).unwrap().len(), 256);
        assert_eq!(list[2]["crv"], "P-384");
        assert_eq!(URL_SAFE_NO_PAD.decode(list[2]["x"].as_str().unwrap()).unwrap().len(), 48);
        for k in list {
            assert!(k.get("d").is_none() && k.get("p").is_none(), "no private parameters: {k}");
        }
        assert_eq!(signing_algorithms(&keys), ["ES256", "ES384", "RS256"]);
    }

    #[test]
    fn bound_claims_round_trip() {
        let c = BoundClaims::new(
            "https://kubernetes.default.svc.cluster.local",
            "ns1",
            ObjectRef::new("builder", "sa-uid"),
            vec!["api".into(), "vault".into()],
            at(1_700_000_000),
            3600,
            "jti-1",
        )
        .with_secret(ObjectRef::new("s1", "secret-uid"));
        let v = c.to_json();
        assert_eq!(
            v,
            json!({
                "iss": "https://kubernetes.default.svc.cluster.local",
                "sub": "system:serviceaccount:ns1:builder",
                "aud": ["api", "vault"],
                "exp": 1_700_003_600i64,
                "iat": 1_700_000_000i64,
                "nbf": 1_700_000_000i64,
                "jti": "jti-1",
                "kubernetes.io": {
                    "namespace": "ns1",
                    "serviceaccount": {"name": "builder", "uid": "sa-uid"},
                    "secret": {"name": "s1", "uid": "secret-uid"},
                },
            })
        );
        assert_eq!(BoundClaims::from_claims(v.as_object().unwrap()).unwrap(), c);
    }

    #[test]
    fn pod_and_node_bound_claims() {
        let base = BoundClaims::new("iss", "ns1", ObjectRef::new("sa", "sa-uid"), vec!["api".into()], at(0), 600, "j");
        let k8s = |c: &BoundClaims| c.to_json()["kubernetes.io"].clone();
        let cases: Vec<(&str, BoundClaims, Value)> = vec![
            (
                "pod on a node",
                base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", "node-uid"))),
                json!({"pod": {"name": "p", "uid": "pod-uid"}, "node": {"name": "n1", "uid": "node-uid"}}),
            ),
            (
                "pod on a node that does not exist: its name only",
                base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", ""))),
                json!({"pod": {"name": "p", "uid": "pod-uid"}, "node": {"name": "n1"}}),
            ),
            (
                "pod not scheduled",
                base.clone().with_pod(ObjectRef::new("p", "pod-uid"), None),
                json!({"pod": {"name": "p", "uid": "pod-uid"}}),
            ),
            (
                "node",
                base.clone().with_node(ObjectRef::new("n1", "node-uid")),
                json!({"node": {"name": "n1", "uid": "node-uid"}}),
            ),
        ];
        for (what, c, bound) in cases {
            let mut want = json!({"namespace": "ns1", "serviceaccount": {"name": "sa", "uid": "sa-uid"}});
            for (k, v) in bound.as_object().unwrap() {
                want[k] = v.clone();
            }
            assert_eq!(k8s(&c), want, "{what}");
            assert_eq!(BoundClaims::from_claims(c.to_json().as_object().unwrap()).unwrap(), c, "{what}");
        }
    }

    #[test]
    fn bound_claims_decoding_table() {
        let obj = |v: Value| v.as_object().unwrap().clone();
        let ok: Vec<(&str, Value, fn(&BoundClaims) -> bool)> = vec![
            ("aud as a string", json!({"iss": "i", "aud": "one"}), |c| c.audiences == ["one"]),
            ("fractional exp", json!({"exp": 10.9}), |c| c.expiry == Some(10)),
            ("nothing", json!({}), |c| *c == BoundClaims::default()),
            (
                "pod and node",
                json!({"kubernetes.io": {"pod": {"name": "p"}, "node": {"name": "n", "uid": "u"}}}),
                |c| c.pod == Some(ObjectRef::new("p", "")) && c.node == Some(ObjectRef::new("n", "u")),
            ),
            ("null refs", json!({"kubernetes.io": {"secret": null, "serviceaccount": null}}), |c| c.secret.is_none()),
        ];
        for (what, v, check) in ok {
            let c = BoundClaims::from_claims(&obj(v)).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(check(&c), "{what}: {c:?}");
        }
        let bad = [
            ("iss number", json!({"iss": 1})),
            ("aud number", json!({"aud": 1})),
            ("aud list of numbers", json!({"aud": [1]})),
            ("exp string", json!({"exp": "soon"})),
            ("kubernetes.io string", json!({"kubernetes.io": "x"})),
            ("serviceaccount list", json!({"kubernetes.io": {"serviceaccount": []}})),
            ("secret name number", json!({"kubernetes.io": {"secret": {"name": 1}}})),
            ("namespace object", json!({"kubernetes.io": {"namespace": {}}})),
        ];
        for (what, v) in bad {
            assert!(matches!(BoundClaims::from_claims(&obj(v)), Err(JwtError::Claims(_))), "{what}");
        }
    }

    #[test]
    fn time_checks_with_leeway() {
        let c = BoundClaims { expiry: Some(1000), not_before: Some(500), issued_at: Some(500), ..Default::default() };
        let cases = [
            (500, Ok(())),
            (1000, Ok(())),
            (1060, Ok(())),
            (1061, Err(TimeError::Expired)),
            (440, Ok(())),
            (439, Err(TimeError::NotValidYet)),
        ];
        for (now, want) in cases {
            assert_eq!(c.check_time(at(now)), want, "now={now}");
        }
        let future_iat = BoundClaims { issued_at: Some(1000), ..Default::default() };
        assert_eq!(future_iat.check_time(at(900)), Err(TimeError::IssuedInTheFuture));
        assert_eq!(BoundClaims::default().check_time(at(4_000_000_000)), Ok(()));
        assert_eq!(TimeError::Expired.to_string(), "service account token has expired");
    }

    #[test]
    fn zero_and_negative_dates_are_dates_not_absent() {
        // As go-jose: a present NumericDate is a time, the epoch for 0; only an absent (or
        // null) claim means "none".
        let now = at(1_700_000_000);
        let cases: &[(&str, Value, Option<i64>, Result<(), TimeError>)] = &[
            ("exp 0", json!({"exp": 0}), Some(0), Err(TimeError::Expired)),
            ("exp 0.0", json!({"exp": 0.0}), Some(0), Err(TimeError::Expired)),
            ("exp 0.5", json!({"exp": 0.5}), Some(0), Err(TimeError::Expired)),
            ("exp negative", json!({"exp": -1}), Some(-1), Err(TimeError::Expired)),
            ("exp most negative", json!({"exp": i64::MIN}), Some(i64::MIN), Err(TimeError::Expired)),
            ("exp missing", json!({}), None, Ok(())),
            ("exp null", json!({"exp": null}), None, Ok(())),
            ("exp in an hour", json!({"exp": 1_700_003_600}), Some(1_700_003_600), Ok(())),
            ("nbf 0 and iat 0", json!({"nbf": 0, "iat": 0, "exp": 1_700_003_600}), Some(1_700_003_600), Ok(())),
        ];
        for (what, v, expiry, want) in cases {
            let c = BoundClaims::from_claims(v.as_object().unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(c.expiry, *expiry, "{what}");
            assert_eq!(c.check_time(now), *want, "{what}");
        }
        // Dates Go has no defined conversion for are refused, never read as "far future".
        for (what, v) in [
            ("exp 1e300", json!({"exp": 1e300})),
            ("exp -1e300", json!({"exp": -1e300})),
            ("exp above i64", json!({"exp": u64::MAX})),
            ("nbf 1e19", json!({"nbf": 1e19})),
        ] {
            let err = BoundClaims::from_claims(v.as_object().unwrap()).unwrap_err();
            assert!(err.to_string().contains("out of range"), "{what}: {err}");
        }
        let c = BoundClaims::from_claims(json!({"nbf": 0, "iat": 0}).as_object().unwrap()).unwrap();
        assert_eq!((c.not_before, c.issued_at), (Some(0), Some(0)));
        let c = BoundClaims::from_claims(json!({"kubernetes.io": {"warnafter": 0}}).as_object().unwrap()).unwrap();
        assert_eq!(c.warn_after, Some(0));
    }

    #[test]
    fn legacy_claims_checks() {
        let good = LegacyClaims::new("ns", "sa", "uid", "sa-token-x");
        assert_eq!(good.check(), Ok(()));
        let v = good.to_json();
        assert_eq!(v["iss"], "kubernetes/serviceaccount");
        assert_eq!(v["sub"], "system:serviceaccount:ns:sa");
        assert_eq!(v["kubernetes.io/serviceaccount/namespace"], "ns");
        assert_eq!(v["kubernetes.io/serviceaccount/secret.name"], "sa-token-x");
        assert_eq!(v["kubernetes.io/serviceaccount/service-account.name"], "sa");
        assert_eq!(v["kubernetes.io/serviceaccount/service-account.uid"], "uid");
        assert_eq!(LegacyClaims::from_claims(v.as_object().unwrap()).unwrap(), good);

        let with = |f: fn(&mut LegacyClaims)| {
            let mut c = good.clone();
            f(&mut c);
            c.check()
        };
        let cases: Vec<(&str, fn(&mut LegacyClaims), &str)> = vec![
            ("no sub", |c| c.subject.clear(), "sub claim is missing"),
            ("no namespace", |c| c.namespace.clear(), "namespace claim is missing"),
            ("no secret", |c| c.secret_name.clear(), "secretName claim is missing"),
            ("no sa name", |c| c.service_account_name.clear(), "serviceAccountName claim is missing"),
            ("no sa uid", |c| c.service_account_uid.clear(), "serviceAccountUID claim is missing"),
            ("sub of another sa", |c| c.subject = "system:serviceaccount:ns:other".into(), "sub claim is invalid"),
            ("sub of another ns", |c| c.subject = "system:serviceaccount:x:sa".into(), "sub claim is invalid"),
            ("sub not an sa", |c| c.subject = "admin".into(), "sub claim is invalid"),
        ];
        for (what, f, want) in cases {
            assert_eq!(with(f).map_err(|e| e.to_string()), Err(want.to_string()), "{what}");
        }
        let bad_type = json!({"iss": LEGACY_ISSUER, "kubernetes.io/serviceaccount/namespace": 3});
        assert!(LegacyClaims::from_claims(bad_type.as_object().unwrap()).is_err());
    }

    #[test]
    fn legacy_token_is_signed_and_decodes() {
        let token = legacy_token(EC256_SEC1, "ns", "sa", "sa-uid", "sa-token-1", "secret-uid").unwrap();
        let claims = verify(&token, &[one_key(EC256_SEC1)]).unwrap();
        let c = LegacyClaims::from_claims(&claims).unwrap();
        assert_eq!(c, LegacyClaims::new("ns", "sa", "sa-uid", "sa-token-1"));
        assert_eq!(unverified_issuer(&token).as_deref(), Some(LEGACY_ISSUER));
        assert!(legacy_token("not a key", "ns", "sa", "u", "s", "u").is_err());
    }

    #[test]
    fn constant_time_comparison() {
        let cases: &[(&[u8], &[u8], bool)] = &[
            (b"", b"", true),
            (b"abc", b"abc", true),
            (b"abc", b"abd", false),
            (b"abc", b"ab", false),
            (b"", b"a", false),
        ];
        for (a, b, want) in cases {
            assert_eq!(constant_time_eq(a, b), *want, "{a:?} {b:?}");
        }
    }

    #[test]
    fn service_account_usernames() {
        let cases = [
            ("system:serviceaccount:ns:name", Some(("ns", "name"))),
            ("system:serviceaccount:ns:a.b-c", Some(("ns", "a.b-c"))),
            ("system:serviceaccount:ns:", None),
            ("system:serviceaccount::name", None),
            ("system:serviceaccount:ns:a:b", None),
            ("system:serviceaccount:NS:name", None),
            ("system:serviceaccounts:ns:name", None),
            ("ns:name", None),
        ];
        for (user, want) in cases {
            assert_eq!(split_service_account_username(user), want, "{user}");
        }
        assert_eq!(service_account_username("a", "b"), "system:serviceaccount:a:b");
    }
}
