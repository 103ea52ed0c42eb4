//! The signer's side (`kustos sa-signer`): `v1.ExternalJWTSigner` served from a key set.
//!
//! In: `Sign`, `FetchKeys` and `Metadata` calls, and the key set of a [`KeySetSource`] (the
//! data directory's service-account keys: [`super::dir_keys`]). Out: signatures, keys, the
//! signer's metrics ([`super::signer_metrics`]).
//!
//! - `Sign` signs the payload segment it is sent, as it is, with the key that signs now
//!   (`sa.key`); the header is `{"alg", "kid", "typ": "JWT"}`. The payload must be base64url
//!   (no padding) of a JSON object, at most [`MAX_CLAIMS_LEN`] long, and a token whose `exp`
//!   lies further out than the longest lifetime this signer signs (+ [`EXP_LEEWAY_SECONDS`])
//!   is refused (`InvalidArgument`).
//! - `FetchKeys` answers every key that verifies ([`served_keys`]): the signing key, the next
//!   key of an unfinished rotation (published before it signs, so that verifiers that cache
//!   the JWKS know it when it does), each retired key until its end (unless revoked), all
//!   published; and the `--legacy-key-file` keys, which verify but are kept out of discovery
//!   (`exclude_from_oidc_discovery`: keys that sign legacy token Secrets elsewhere, never
//!   bound tokens, upstream's intended use of the flag). Each key once, by key id.
//! - `Metadata` answers the longest token lifetime.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use kustos_ca::jwt::{PublicKey, SigningKey};
use serde_json::{json, Value};

use super::client::ServedKey;
use super::proto::external_jwt_signer_server::ExternalJwtSigner;
use super::proto::{
    FetchKeysRequest, FetchKeysResponse, Key, MetadataRequest, MetadataResponse, SignJwtRequest, SignJwtResponse,
};
pub use super::signer_metrics::Roles;
use super::signer_metrics::SignerMetrics;
use crate::pki::sa_keys::{self, RetiredKey};

/// The longest payload segment signed (a longer token would not verify on kustos anyway).
pub const MAX_CLAIMS_LEN: usize = kustos_ca::jwt::MAX_TOKEN_LEN;
/// Clock difference allowed between the caller and the signer when checking `exp`.
pub const EXP_LEEWAY_SECONDS: i64 = 60;

/// The keys the signer serves from, as loaded.
pub struct KeySet {
    pub signing: Arc<SigningKey>,
    /// `sa-next.key`'s public key, during a rotation.
    pub next: Option<PublicKey>,
    /// Every key of `sa-keys.json` (whether each verifies is decided per call, by time).
    pub retired: Vec<(RetiredKey, PublicKey)>,
    /// Keys that verify, never sign, and are not published.
    pub legacy: Vec<PublicKey>,
    /// When the key set was read.
    pub loaded_at: SystemTime,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field("signing", &self.signing.public_key().key_id())
            .field("next", &self.next.as_ref().map(PublicKey::key_id))
            .field("retired", &self.retired.iter().map(|(k, _)| &k.kid).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where a key set comes from.
pub trait KeySetSource: Send + Sync + 'static {
    /// The key set as it is now (read again when its source changed).
    fn current(&self) -> Result<Arc<KeySet>, String>;
}

/// The keys `FetchKeys` answers at `now` (`max_token_seconds`: this signer's longest token
/// lifetime, which counts a retired key's end until one is recorded), and how many of each
/// role.
pub fn served_keys(set: &KeySet, max_token_seconds: i64, now: DateTime<Utc>) -> (Vec<ServedKey>, Roles) {
    let mut out: Vec<ServedKey> = Vec::new();
    let mut roles = Roles::default();
    let mut add = |key: &PublicKey, excluded: bool| {
        if out.iter().any(|k| k.key.key_id() == key.key_id()) {
            return false;
        }
        out.push(ServedKey { key: key.clone(), exclude_from_oidc_discovery: excluded });
        true
    };
    roles.signing += usize::from(add(set.signing.public_key(), false));
    if let Some(next) = &set.next {
        roles.next += usize::from(add(next, false));
    }
    for (meta, key) in &set.retired {
        if sa_keys::verifies(meta, max_token_seconds, now) {
            roles.retired += usize::from(add(key, false));
        }
    }
    for key in &set.legacy {
        roles.legacy += usize::from(add(key, true));
    }
    (out, roles)
}

/// Check a `Sign` payload segment; the reason when it is refused.
pub fn check_claims(claims: &str, max_token_seconds: i64, now: DateTime<Utc>) -> Result<(), String> {
    if claims.len() > MAX_CLAIMS_LEN {
        return Err(format!("the claims are longer than {MAX_CLAIMS_LEN} bytes"));
    }
    let json =
        URL_SAFE_NO_PAD.decode(claims).map_err(|_| "the claims are not base64url without padding".to_string())?;
    let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&json) else {
        return Err("the claims are not a JSON object".into());
    };
    match m.get("exp") {
        None => Ok(()),
        Some(Value::Number(n)) => {
            let latest = now.timestamp().saturating_add(max_token_seconds).saturating_add(EXP_LEEWAY_SECONDS);
            match n.as_f64() {
                Some(exp) if exp <= latest as f64 => Ok(()),
                _ => Err(format!(
                    "the token would expire later than the longest lifetime this signer signs ({max_token_seconds}s) allows"
                )),
            }
        }
        Some(_) => Err("the claims' exp is not a number".into()),
    }
}

/// The header segment for a key.
pub fn header_for(key: &PublicKey) -> String {
    let header = json!({"alg": key.algorithm().as_str(), "kid": key.key_id(), "typ": "JWT"});
    URL_SAFE_NO_PAD.encode(header.to_string())
}

/// `v1.ExternalJWTSigner` over a key set.
pub struct SignerService {
    source: Arc<dyn KeySetSource>,
    max_token_seconds: i64,
    refresh_hint: Duration,
    metrics: Arc<SignerMetrics>,
}

impl SignerService {
    pub fn new(
        source: Arc<dyn KeySetSource>,
        max_token_seconds: i64,
        refresh_hint: Duration,
        metrics: Arc<SignerMetrics>,
    ) -> Self {
        SignerService { source, max_token_seconds, refresh_hint, metrics }
    }

    fn key_set(&self) -> Result<Arc<KeySet>, tonic::Status> {
        self.source.current().map_err(|e| {
            tracing::error!(error = %e, "the service-account keys do not load");
            tonic::Status::unavailable("the signer's keys do not load; see its log")
        })
    }

    fn measured<T>(
        &self,
        method: &'static str,
        start: Instant,
        r: Result<T, tonic::Status>,
    ) -> Result<tonic::Response<T>, tonic::Status> {
        self.metrics.request(method, r.as_ref().map_or_else(tonic::Status::code, |_| tonic::Code::Ok), start.elapsed());
        r.map(tonic::Response::new)
    }

    fn sign_now(&self, claims: &str) -> Result<SignJwtResponse, tonic::Status> {
        check_claims(claims, self.max_token_seconds, Utc::now()).map_err(tonic::Status::invalid_argument)?;
        let set = self.key_set()?;
        let header = header_for(set.signing.public_key());
        let signature = set
            .signing
            .sign_input(format!("{header}.{claims}").as_bytes())
            .map_err(|e| tonic::Status::internal(format!("signing: {e}")))?;
        Ok(SignJwtResponse { header, signature: URL_SAFE_NO_PAD.encode(signature) })
    }

    fn keys_now(&self) -> Result<FetchKeysResponse, tonic::Status> {
        let set = self.key_set()?;
        let (keys, roles) = served_keys(&set, self.max_token_seconds, Utc::now());
        self.metrics.served(roles, set.loaded_at);
        let loaded: DateTime<Utc> = set.loaded_at.into();
        Ok(FetchKeysResponse {
            keys: keys
                .into_iter()
                .map(|k| Key {
                    key_id: k.key.key_id().to_string(),
                    key: k.key.spki_der().to_vec(),
                    exclude_from_oidc_discovery: k.exclude_from_oidc_discovery,
                })
                .collect(),
            data_timestamp: Some(prost_types::Timestamp {
                seconds: loaded.timestamp(),
                nanos: i32::try_from(loaded.timestamp_subsec_nanos()).unwrap_or(0),
            }),
            refresh_hint_seconds: i64::try_from(self.refresh_hint.as_secs()).unwrap_or(i64::MAX).max(1),
        })
    }
}

#[tonic::async_trait]
impl ExternalJwtSigner for SignerService {
    async fn sign(
        &self,
        request: tonic::Request<SignJwtRequest>,
    ) -> Result<tonic::Response<SignJwtResponse>, tonic::Status> {
        let start = Instant::now();
        let r = self.sign_now(&request.get_ref().claims);
        self.measured("Sign", start, r)
    }

    async fn fetch_keys(
        &self,
        _: tonic::Request<FetchKeysRequest>,
    ) -> Result<tonic::Response<FetchKeysResponse>, tonic::Status> {
        let start = Instant::now();
        let r = self.keys_now();
        self.measured("FetchKeys", start, r)
    }

    async fn metadata(
        &self,
        _: tonic::Request<MetadataRequest>,
    ) -> Result<tonic::Response<MetadataResponse>, tonic::Status> {
        let start = Instant::now();
        self.measured("Metadata", start, Ok(MetadataResponse { max_token_expiration_seconds: self.max_token_seconds }))
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
