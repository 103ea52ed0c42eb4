//! The apiserver's side of an external signer (`--service-account-signing-endpoint`), as
//! kube-apiserver's external JWT plugin: tokens are signed by the signer's `Sign`, verified
//! with the keys of its `FetchKeys` (cached), and `/openid/v1/jwks` publishes those keys that
//! are not kept out of discovery.
//!
//! In: the socket, claims to sign, the key id of a token to verify. Out: signed tokens, the
//! cached keys, the `apiserver_externaljwt_*` metrics ([`super::metrics`]).
//!
//! - At start the keys are fetched until the signer answers (or [`SETUP_TIMEOUT`] passes: a
//!   start-up error naming the socket); `Metadata` says the longest token lifetime it signs.
//! - The keys are fetched again `refresh_hint_seconds` after each fetch (10 s after a failed
//!   one; the keys held stay), and when a token names a key id the cache does not hold. Such
//!   fetches are shared: one that starts after a caller asked answers it, and they start at
//!   most once per [`MISS_REFETCH_INTERVAL`], so tokens with made-up key ids cost the signer
//!   no more than one `FetchKeys` a second.
//! - `Sign`'s header must hold only `alg` (RS256, ES256, ES384, ES512, as kube-apiserver),
//!   `kid` (1 to 1024 characters)
//!   and `typ` (`JWT`); the key it names must not be one kept out of discovery
//!   ([`check_header`]). A `FetchKeys` answer without keys, with a refresh hint of zero or
//!   less, a bad timestamp or a key id that is empty or longer than 1024 characters is
//!   refused whole ([`check_keys`]); a well-formed key kustos cannot verify with (Ed25519, an
//!   EC point off its curve) is left out with a warning.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use kustos_ca::jwt::PublicKey;
use serde::Deserialize;
use serde_json::Value;
use tonic::transport::Channel;

use super::endpoint::Endpoint;
use super::metrics::{code_name, Metrics, NON_GRPC};
use super::proto::external_jwt_signer_client::ExternalJwtSignerClient;
use super::proto::{FetchKeysRequest, FetchKeysResponse, MetadataRequest, SignJwtRequest};

/// How long the start waits for the signer's keys (kube-apiserver's key sync timeout).
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one `FetchKeys` may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `Metadata` may take (asked once, at start).
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one `Sign` may take.
const SIGN_TIMEOUT: Duration = Duration::from_secs(30);
/// After a failed fetch, the next one (kube-apiserver's fallback).
const FALLBACK_REFRESH: Duration = Duration::from_secs(10);
/// Fetches for unknown key ids start at most this often.
pub const MISS_REFETCH_INTERVAL: Duration = Duration::from_secs(1);
/// The longest refresh hint followed (a larger one is taken as this).
const MAX_REFRESH: Duration = Duration::from_secs(24 * 3600);
/// Longest key id.
const MAX_KEY_ID: usize = 1024;
/// Upstream's lower bound on the signer's maximum token lifetime.
pub const MIN_TOKEN_SECONDS: i64 = 600;

const SIGN_METHOD: &str = "/v1.ExternalJWTSigner/Sign";
const FETCH_METHOD: &str = "/v1.ExternalJWTSigner/FetchKeys";
const METADATA_METHOD: &str = "/v1.ExternalJWTSigner/Metadata";

/// One key of a `FetchKeys` answer that kustos can verify with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedKey {
    pub key: PublicKey,
    pub exclude_from_oidc_discovery: bool,
}

/// A checked `FetchKeys` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySnapshot {
    pub keys: Vec<ServedKey>,
    /// The signer's `data_timestamp`, Unix seconds.
    pub data_timestamp: f64,
    pub refresh: Duration,
    /// The key ids of well-formed keys kustos cannot verify with, and why.
    pub skipped: Vec<(String, String)>,
}

impl KeySnapshot {
    fn has(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.key.key_id() == kid)
    }
}

/// Check a `FetchKeys` answer as kube-apiserver does (the error is its message).
pub fn check_keys(resp: &FetchKeysResponse) -> Result<KeySnapshot, String> {
    if resp.refresh_hint_seconds <= 0 {
        return Err(format!("found invalid refresh hint ({}s)", resp.refresh_hint_seconds));
    }
    if resp.keys.is_empty() {
        return Err("found no keys".into());
    }
    let data_timestamp =
        check_timestamp(resp.data_timestamp.as_ref()).map_err(|e| format!("invalid data timestamp: {e}"))?;
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for k in &resp.keys {
        if k.key_id.is_empty() || k.key_id.len() > MAX_KEY_ID {
            return Err(format!("found invalid public key id {:?}", k.key_id));
        }
        if k.key.is_empty() {
            return Err("found empty public key".into());
        }
        match <x509_parser::x509::SubjectPublicKeyInfo as x509_parser::prelude::FromDer<_>>::from_der(&k.key) {
            Ok(([], _)) => {}
            _ => return Err("while parsing external public keys: not a PKIX public key".into()),
        }
        match PublicKey::from_spki_der(&k.key) {
            Ok(key) => keys.push(ServedKey {
                key: key.with_key_id(k.key_id.clone()),
                exclude_from_oidc_discovery: k.exclude_from_oidc_discovery,
            }),
            Err(e) => skipped.push((k.key_id.clone(), e.to_string())),
        }
    }
    if keys.is_empty() {
        let why: Vec<String> = skipped.iter().map(|(kid, e)| format!("{kid}: {e}")).collect();
        return Err(format!("found no keys kustos can verify with ({})", why.join("; ")));
    }
    let refresh = u64::try_from(resp.refresh_hint_seconds).map_or(MAX_REFRESH, Duration::from_secs).min(MAX_REFRESH);
    Ok(KeySnapshot { keys, data_timestamp, refresh, skipped })
}

/// A protobuf timestamp as Unix seconds, checked as Go's `CheckValid`.
fn check_timestamp(t: Option<&prost_types::Timestamp>) -> Result<f64, String> {
    // 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
    const MIN: i64 = -62_135_596_800;
    const MAX: i64 = 253_402_300_799;
    let Some(t) = t else { return Err("timestamp: nil Timestamp".into()) };
    if t.seconds < MIN {
        return Err(format!("timestamp: seconds:{} before 0001-01-01", t.seconds));
    }
    if t.seconds > MAX {
        return Err(format!("timestamp: seconds:{} after 9999-12-31", t.seconds));
    }
    if !(0..1_000_000_000).contains(&t.nanos) {
        return Err(format!("timestamp: nanos:{} not in range [0, 1e9)", t.nanos));
    }
    Ok(t.seconds as f64 + f64::from(t.nanos) / 1e9)
}

/// The header of a `Sign` answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedHeader {
    #[serde(default)]
    alg: String,
    #[serde(default)]
    kid: String,
    #[serde(default)]
    typ: String,
}

/// Check the header segment of a `Sign` answer; its key id when it is fine. `excluded`: the
/// key ids kept out of discovery (they must not sign).
pub fn check_header(header: &str, excluded: &BTreeSet<String>) -> Result<String, String> {
    let json = URL_SAFE_NO_PAD.decode(header).map_err(|e| format!("while unwrapping header: {e}"))?;
    let h: SignedHeader = serde_json::from_slice(&json).map_err(|e| format!("while parsing header JSON: {e}"))?;
    if h.typ != "JWT" {
        return Err("bad type".into());
    }
    if h.kid.is_empty() {
        return Err("key id missing".into());
    }
    if h.kid.len() > MAX_KEY_ID {
        return Err("key id longer than 1 kb".into());
    }
    match h.alg.as_str() {
        "RS256" | "ES256" | "ES384" | "ES512" => {}
        other => return Err(format!("bad signing algorithm {other:?}")),
    }
    if excluded.contains(&h.kid) {
        return Err(format!("key used for signing JWT (kid: {}) is excluded from OIDC discovery docs", h.kid));
    }
    Ok(h.kid)
}

/// Why a token could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("while signing jwt: {0}")]
    Call(tonic::Status),
    #[error("while validating header: {0}")]
    Header(String),
    #[error("empty signature returned")]
    NoSignature,
    #[error("while merging claims: {0}")]
    Claims(String),
}

impl SignError {
    /// The `code` label of `apiserver_externaljwt_sign_request_total`.
    pub fn code(&self) -> &'static str {
        match self {
            SignError::Call(s) => code_name(s.code()),
            _ => NON_GRPC,
        }
    }
}

/// The keys as cached, with what discovery publishes.
struct Cache {
    snapshot: KeySnapshot,
    all: Arc<[PublicKey]>,
    published: Arc<[PublicKey]>,
    excluded: BTreeSet<String>,
}

impl Cache {
    fn new(snapshot: KeySnapshot) -> Self {
        let all: Vec<PublicKey> = snapshot.keys.iter().map(|k| k.key.clone()).collect();
        let published: Vec<PublicKey> =
            snapshot.keys.iter().filter(|k| !k.exclude_from_oidc_discovery).map(|k| k.key.clone()).collect();
        let excluded = snapshot
            .keys
            .iter()
            .filter(|k| k.exclude_from_oidc_discovery)
            .map(|k| k.key.key_id().to_string())
            .collect();
        Cache { snapshot, all: all.into(), published: published.into(), excluded }
    }
}

/// A connection to an external signer and its cached keys.
pub struct ExternalSigner {
    endpoint: Endpoint,
    client: ExternalJwtSignerClient<Channel>,
    cache: RwLock<Arc<Cache>>,
    /// Held while fetching: one fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    /// When the last fetch started.
    last_fetch: Mutex<Option<Instant>>,
    /// When the next scheduled fetch is due.
    next_refresh: Mutex<Instant>,
    pub metrics: Metrics,
}

impl std::fmt::Debug for ExternalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalSigner").field("endpoint", &self.endpoint.to_string()).finish_non_exhaustive()
    }
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl ExternalSigner {
    /// Connect to the signer at `endpoint` and fetch its keys, retrying until it answers or
    /// `timeout` passes. A path that exists and is not a socket fails at once.
    pub async fn connect(endpoint: &Endpoint, timeout: Duration) -> anyhow::Result<Arc<Self>> {
        if let Some(path) = endpoint.path() {
            use std::os::unix::fs::FileTypeExt as _;
            if let Ok(meta) = std::fs::metadata(path) {
                if !meta.file_type().is_socket() {
                    anyhow::bail!("{} is not a Unix socket", path.display());
                }
            }
        }
        let target = endpoint.clone();
        // The authority kube-apiserver uses; the connection itself is the socket.
        let channel = tonic::transport::Endpoint::from_static("http://localhost").connect_with_connector_lazy(
            tower::service_fn(move |_: http::Uri| {
                let target = target.clone();
                async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(target.connect().await?)) }
            }),
        );
        let signer = Arc::new(ExternalSigner {
            endpoint: endpoint.clone(),
            client: ExternalJwtSignerClient::new(channel),
            cache: RwLock::new(Arc::new(Cache::new(KeySnapshot {
                keys: Vec::new(),
                data_timestamp: 0.0,
                refresh: FALLBACK_REFRESH,
                skipped: Vec::new(),
            }))),
            fetching: tokio::sync::Mutex::new(()),
            last_fetch: Mutex::new(None),
            next_refresh: Mutex::new(Instant::now()),
            metrics: Metrics::default(),
        });
        let deadline = Instant::now() + timeout;
        loop {
            match signer.fetch().await {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    anyhow::bail!("while initially filling key cache from {endpoint}: {e}");
                }
                Err(e) => tracing::debug!(endpoint = %endpoint, error = %e, "the external signer does not answer yet"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(signer)
    }

    /// `Metadata`: the longest token lifetime the signer signs, in seconds.
    pub async fn max_token_expiration_seconds(&self) -> anyhow::Result<i64> {
        let mut client = self.client.clone();
        let resp = self
            .call(METADATA_METHOD, METADATA_TIMEOUT, async move { client.metadata(MetadataRequest {}).await })
            .await
            .with_context(|| format!("asking {} for its metadata", self.endpoint))?;
        Ok(resp.max_token_expiration_seconds)
    }

    /// One call: bounded in time, measured.
    async fn call<T>(
        &self,
        method: &'static str,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        let start = Instant::now();
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(r) => r.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded(format!("no answer within {}s", timeout.as_secs()))),
        };
        let code = result.as_ref().map_or_else(tonic::Status::code, |_| tonic::Code::Ok);
        self.metrics.call(method, code, start.elapsed());
        result
    }

    fn cache(&self) -> Arc<Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fetch the keys now and keep them when they pass [`check_keys`].
    async fn fetch(&self) -> Result<(), String> {
        *self.last_fetch.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let mut client = self.client.clone();
        let answer: Result<FetchKeysResponse, tonic::Status> =
            self.call(FETCH_METHOD, FETCH_TIMEOUT, async move { client.fetch_keys(FetchKeysRequest {}).await }).await;
        let checked = match answer {
            Err(status) => Err((
                code_name(status.code()),
                format!("while getting externally supported jwt signing keys: {status}"),
            )),
            Ok(resp) => check_keys(&resp).map_err(|e| (NON_GRPC, e)),
        };
        match checked {
            Ok(snapshot) => {
                self.metrics.fetch_keys(code_name(tonic::Code::Ok), Some(snapshot.data_timestamp), now_unix());
                let old = self.cache();
                for (kid, why) in &snapshot.skipped {
                    if !old.snapshot.skipped.iter().any(|(k, _)| k == kid) {
                        tracing::warn!(endpoint = %self.endpoint, kid = %kid, reason = %why, "left out a key of the external signer that kustos cannot verify with");
                    }
                }
                *self.next_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now() + snapshot.refresh;
                let kids = |c: &KeySnapshot| {
                    c.keys
                        .iter()
                        .map(|k| (k.key.key_id().to_string(), k.exclude_from_oidc_discovery))
                        .collect::<Vec<_>>()
                };
                if kids(&old.snapshot) != kids(&snapshot) && !old.snapshot.keys.is_empty() {
                    tracing::info!(endpoint = %self.endpoint, keys = snapshot.keys.len(), "the external signer's keys changed");
                }
                *self.cache.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Cache::new(snapshot));
                Ok(())
            }
            Err((code, e)) => {
                self.metrics.fetch_keys(code, None, now_unix());
                *self.next_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now() + FALLBACK_REFRESH;
                Err(format!("while fetching token verification keys: {e}"))
            }
        }
    }

    /// Fetch again unless a fetch that started after `asked` has already answered; fetches
    /// start at most once per [`MISS_REFETCH_INTERVAL`].
    async fn refetch(&self, asked: Instant) {
        let _one = self.fetching.lock().await;
        let last = *self.last_fetch.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|l| l >= asked) {
            return;
        }
        if let Some(l) = last {
            let due = l + MISS_REFETCH_INTERVAL;
            if due > Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        if let Err(e) = self.fetch().await {
            tracing::warn!(endpoint = %self.endpoint, error = %e, "fetching the external signer's keys; the keys held stay");
        }
    }

    /// Seconds until the keys are fetched again (at least 0): how long a copy of the JWKS
    /// may be kept (kube-apiserver's key cache `GetCacheAgeMaxSeconds`).
    pub fn cache_max_age_seconds(&self) -> u64 {
        let next = *self.next_refresh.lock().unwrap_or_else(|e| e.into_inner());
        next.saturating_duration_since(Instant::now()).as_secs()
    }

    /// Fetch the keys every refresh hint while `this` lives, as a loop of `tasks`.
    pub fn spawn_refresh(this: &Arc<Self>, tasks: &crate::tasks::Tasks) {
        let weak = Arc::downgrade(this);
        tasks.spawn("external-jwt-signer-keys", async move {
            loop {
                let due = match weak.upgrade() {
                    Some(s) => *s.next_refresh.lock().unwrap_or_else(|e| e.into_inner()),
                    None => return Ok(()),
                };
                tokio::time::sleep_until(due.into()).await;
                let Some(s) = weak.upgrade() else { return Ok(()) };
                let due_now = *s.next_refresh.lock().unwrap_or_else(|e| e.into_inner());
                if due_now > Instant::now() {
                    continue; // a fetch for an unknown key id moved it
                }
                let _one = s.fetching.lock().await;
                if let Err(e) = s.fetch().await {
                    tracing::error!(endpoint = %s.endpoint, error = %e, "when syncing supported public keys (stale set of keys will be supported)");
                }
            }
        });
    }

    /// Sign `claims` through the signer.
    pub async fn sign_claims(&self, claims: &Value) -> Result<String, SignError> {
        let result = self.sign_inner(claims).await;
        self.metrics.sign(match &result {
            Ok(_) => code_name(tonic::Code::Ok),
            Err(e) => e.code(),
        });
        result
    }

    async fn sign_inner(&self, claims: &Value) -> Result<String, SignError> {
        if !claims.is_object() {
            return Err(SignError::Claims("the claims must be a JSON object".into()));
        }
        let payload = serde_json::to_vec(claims).map_err(|e| SignError::Claims(e.to_string()))?;
        let payload = URL_SAFE_NO_PAD.encode(payload);
        let mut client = self.client.clone();
        let request = SignJwtRequest { claims: payload.clone() };
        let resp = self
            .call(SIGN_METHOD, SIGN_TIMEOUT, async move { client.sign(request).await })
            .await
            .map_err(SignError::Call)?;
        // Which keys are kept out of discovery, with the key it names fetched if new.
        let named = check_header(&resp.header, &BTreeSet::new()).map_err(SignError::Header)?;
        if !self.cache().snapshot.has(&named) {
            self.refetch(Instant::now()).await;
        }
        check_header(&resp.header, &self.cache().excluded).map_err(SignError::Header)?;
        if resp.signature.is_empty() {
            return Err(SignError::NoSignature);
        }
        Ok(format!("{}.{payload}.{}", resp.header, resp.signature))
    }
}

#[async_trait::async_trait]
impl crate::pki::key_source::KeySource for ExternalSigner {
    async fn sign(&self, claims: &Value) -> anyhow::Result<String> {
        Ok(self.sign_claims(claims).await?)
    }

    async fn keys_for(&self, kid: Option<&str>) -> Arc<[PublicKey]> {
        let cache = self.cache();
        match kid {
            Some(kid) if !cache.snapshot.has(kid) => {
                self.refetch(Instant::now()).await;
                self.cache().all.clone()
            }
            _ => cache.all.clone(),
        }
    }

    fn verification_keys(&self) -> Arc<[PublicKey]> {
        self.cache().all.clone()
    }

    fn published_keys(&self) -> Arc<[PublicKey]> {
        self.cache().published.clone()
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
