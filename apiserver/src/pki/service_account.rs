//! The service-account token issuer: the issuers (the first one signs), where tokens are
//! signed and the keys that verify them come from ([`KeySource`]), the API audiences and the
//! maximum token lifetime. What the authenticator (`authn::serviceaccount`), TokenRequest
//! (`api::serviceaccount_token`) and OIDC discovery (`api::oidc`) share; the
//! claims and the signing itself are `kustos_ca::jwt`'s.
//!
//! The keys are either [`LocalKeys`] (the data directory's `sa.key` signs; `sa.pub`, the
//! retired keys of `pki::sa_keys` and the `--service-account-key-file`s verify; followed by
//! [`spawn_follower`]), or, with `--service-account-signing-endpoint`, an external signer's
//! (`pki::externaljwt::client`): then the data directory's keys neither sign nor verify.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};

use anyhow::Context as _;
use kustos_ca::jwt::{self, BoundClaims, PublicKey, SigningKey};
use serde_json::Value;

use super::externaljwt::client::{ExternalSigner, MIN_TOKEN_SECONDS, SETUP_TIMEOUT};
use super::externaljwt::endpoint::Endpoint;
pub use super::key_source::KeySource;

/// The default `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Where the JWK set of the verification keys is served.
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// The longest token lifetime a TokenRequest may ask for (2^32 seconds).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// `--service-account-max-token-expiration` when it is not given: a year, the longest
/// lifetime upstream gives projected tokens by default (its extended expiration). `0` means
/// no cap, as upstream's default (tokens of up to 2^32 seconds, and retired keys that verify
/// as long). With an external signer, not given (or 0) means the signer's maximum.
pub const DEFAULT_MAX_EXPIRATION: std::time::Duration = std::time::Duration::from_secs(8760 * 3600);
/// `KUSTOS_EXTERNALJWT_SETUP_TIMEOUT_SECONDS`: how long the start waits for an external
/// signer (default [`SETUP_TIMEOUT`], as kube-apiserver); a test hook.
const SETUP_TIMEOUT_ENV: &str = "KUSTOS_EXTERNALJWT_SETUP_TIMEOUT_SECONDS";

/// The server settings the token keys are started from (`--service-account-*`,
/// `--api-audiences`), given by the server.
pub struct KeySettings<'a> {
    pub issuers: &'a [String],
    pub api_audiences: &'a [String],
    pub max_token_expiration: Option<std::time::Duration>,
    /// `--service-account-key-file`s: more keys that verify tokens.
    pub key_files: &'a [PathBuf],
    /// `--service-account-signing-endpoint`: an external signer instead of the PKI's key.
    pub signing_endpoint: Option<&'a str>,
    /// How often the key files under `DIR/pki` are looked at again.
    pub reload_interval: std::time::Duration,
    /// `--service-account-extend-token-expiration` ([`ServiceAccountTokens::extended_seconds`]).
    pub extend_expiration: bool,
}

/// The lifetime kubelets ask for in the transition to bound tokens (an hour and 7 s): such a
/// pod-bound token for the API is extended ([`ServiceAccountTokens::extended_seconds`]).
pub const WARN_ONLY_EXPIRATION_SECONDS: i64 = 3607;
/// How long such a token lasts instead: a year (upstream's `ExpirationExtensionSeconds`).
pub const EXPIRATION_EXTENSION_SECONDS: i64 = 365 * 24 * 3600;

/// Everything tokens are issued and checked with.
pub struct ServiceAccountTokens {
    issuers: Vec<String>,
    keys: Arc<dyn KeySource>,
    /// The data directory's keys, when they are the ones in use.
    local: Option<Arc<LocalKeys>>,
    /// The external signer, when it is the one in use.
    external: Option<Arc<ExternalSigner>>,
    api_audiences: Vec<String>,
    max_expiration_seconds: Option<i64>,
    /// `https://<external address>/openid/v1/jwks`
    jwks_uri: String,
    /// `--service-account-extend-token-expiration` (default on).
    extend_expiration: bool,
}

/// The data directory's keys: `sa.key` signs; it, the retired keys and the key files' keys
/// verify. [`LocalKeys::set_keys`] follows a `kustos sa-key rotate` without a restart.
pub struct LocalKeys {
    keys: RwLock<Keys>,
    /// The keys of `--service-account-key-file`s: they verify whatever signs.
    extra: Vec<PublicKey>,
}

/// The key that signs and those that verify, swapped together.
#[derive(Clone)]
struct Keys {
    signing: Arc<SigningKey>,
    verifying: Arc<[PublicKey]>,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("issuers", &self.issuers)
            .field("signing_key_id", &self.local.as_ref().map(|l| l.signing_key().public_key().key_id().to_string()))
            .field("external", &self.external)
            .field("keys", &self.keys.verification_keys())
            .field("api_audiences", &self.api_audiences)
            .field("max_expiration_seconds", &self.max_expiration_seconds)
            .finish()
    }
}

/// A bad `--service-account-issuer` or `--service-account-max-token-expiration`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("service-account-issuer is a required flag")]
    NoIssuer,
    #[error("service-account-issuer should not be an empty string")]
    EmptyIssuer,
    #[error("service-account-issuer contained a ':' but was not a valid URL")]
    InvalidUrl,
    #[error("service-account-issuer {0:?} is already specified")]
    RepeatedIssuer(String),
    #[error("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds")]
    MaxExpiration,
}

/// Check the flags as upstream does: at least one issuer, none empty or repeated, and a
/// maximum lifetime (when set and not 0) between one hour and 2^32 seconds.
pub fn validate_options(issuers: &[String], max_expiration: Option<std::time::Duration>) -> Result<(), OptionsError> {
    if issuers.is_empty() {
        return Err(OptionsError::NoIssuer);
    }
    for (i, iss) in issuers.iter().enumerate() {
        if iss.is_empty() {
            return Err(OptionsError::EmptyIssuer);
        }
        if iss.chars().any(char::is_whitespace) && iss.contains(':') {
            return Err(OptionsError::InvalidUrl);
        }
        if issuers[..i].contains(iss) {
            return Err(OptionsError::RepeatedIssuer(iss.clone()));
        }
    }
    if let Some(max) = max_expiration.filter(|m| !m.is_zero()) {
        if max < std::time::Duration::from_secs(3600) || max.as_secs() > MAX_EXPIRATION_SECONDS as u64 {
            return Err(OptionsError::MaxExpiration);
        }
    }
    Ok(())
}

/// `--service-account-signing-endpoint` with the key file flags, checked as kube-apiserver
/// does (every error, in its words). `None`: no external signer.
pub fn signing_endpoint(endpoint: Option<&str>, key_files: &[PathBuf]) -> Result<Option<Endpoint>, String> {
    let Some(value) = endpoint.filter(|e| !e.is_empty()) else { return Ok(None) };
    let mut errors = Vec::new();
    if !key_files.is_empty() {
        errors.push("can't set `--service-account-signing-key-file` and/or `--service-account-key-file` with `--service-account-signing-endpoint` (They are mutually exclusive)".to_string());
    }
    let parsed = Endpoint::parse(value).map_err(|e| errors.push(e)).ok();
    match parsed {
        Some(p) if errors.is_empty() => Ok(Some(p)),
        _ => Err(errors.join("; ")),
    }
}

/// A duration as Go prints it (`48h0m0s`, `10m0s`, `30s`), for messages in upstream's words.
pub fn go_duration(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, (seconds % 3600) / 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// The cap on token lifetimes with an external signer whose `Metadata` says `signer_max`
/// seconds, and `--service-account-max-token-expiration` `flag` (as kube-apiserver: not
/// given or 0 takes the signer's, longer than the signer's is an error).
pub fn external_max_expiration(flag: Option<std::time::Duration>, signer_max: i64) -> Result<i64, String> {
    if signer_max < MIN_TOKEN_SECONDS {
        return Err(format!(
            "max token life supported by external-jwt-signer ({signer_max}s) is less than acceptable (min {MIN_TOKEN_SECONDS}s)"
        ));
    }
    match flag.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)).filter(|s| *s > 0) {
        None => Ok(signer_max),
        Some(f) if f > signer_max => Err(format!(
            "service-account-max-token-expiration cannot be set longer than the token expiration supported by service-account-signing-endpoint: {} > {}",
            go_duration(f),
            go_duration(signer_max)
        )),
        Some(f) => Ok(f),
    }
}

impl LocalKeys {
    fn new(signing: SigningKey, others: &[PublicKey], extra: Vec<PublicKey>) -> Self {
        let keys = LocalKeys {
            keys: RwLock::new(Keys { signing: Arc::new(signing), verifying: Arc::from(Vec::new()) }),
            extra,
        };
        let signing = keys.current().signing;
        keys.install(signing, others);
        keys
    }

    fn current(&self) -> Keys {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sign with `signing`; verify with it, `others` and the key files' keys.
    fn install(&self, signing: Arc<SigningKey>, others: &[PublicKey]) -> bool {
        let mut verifying = super::sa_keys::verifying(signing.public_key(), others);
        for k in &self.extra {
            if !verifying.iter().any(|have| have.key_id() == k.key_id()) {
                verifying.push(k.clone());
            }
        }
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let same = keys.signing.public_key() == signing.public_key() && *keys.verifying == *verifying;
        if !same {
            *keys = Keys { signing, verifying: Arc::from(verifying) };
        }
        !same
    }

    /// Sign with the private key `signing_pem` from now on, and verify with it, the
    /// `retired` keys and the key files' keys. Whether anything changed.
    pub fn set_keys(&self, signing_pem: &str, retired: &[PublicKey]) -> anyhow::Result<bool> {
        let signing = SigningKey::from_pem(signing_pem).context("loading the service-account signing key")?;
        Ok(self.install(Arc::new(signing), retired))
    }

    /// The key that signs new tokens.
    pub fn signing_key(&self) -> Arc<SigningKey> {
        self.current().signing
    }
}

#[async_trait::async_trait]
impl KeySource for LocalKeys {
    async fn sign(&self, claims: &Value) -> anyhow::Result<String> {
        Ok(self.signing_key().sign(claims)?)
    }

    async fn keys_for(&self, _: Option<&str>) -> Arc<[PublicKey]> {
        self.current().verifying
    }

    fn verification_keys(&self) -> Arc<[PublicKey]> {
        self.current().verifying
    }

    fn published_keys(&self) -> Arc<[PublicKey]> {
        self.current().verifying
    }
}

impl ServiceAccountTokens {
    /// `signing_key_pem` signs; `own_public_pem` and each of `extra_key_pems` (the contents of
    /// `--service-account-key-file`s) verify. Empty `api_audiences` means the issuers.
    /// `max_expiration`: `None` is [`DEFAULT_MAX_EXPIRATION`], zero is no cap.
    pub fn new(
        issuers: Vec<String>,
        signing_key_pem: &str,
        own_public_pem: &str,
        extra_key_pems: &[(String, String)],
        api_audiences: Vec<String>,
        max_expiration: Option<std::time::Duration>,
        external_address: &str,
    ) -> anyhow::Result<Self> {
        validate_options(&issuers, max_expiration)?;
        let signing = SigningKey::from_pem(signing_key_pem).context("loading the service-account signing key")?;
        let own = jwt::public_keys_from_pem(own_public_pem).context("loading the service-account public key")?;
        if !own.iter().any(|k| k.key_id() == signing.public_key().key_id()) {
            anyhow::bail!("the service-account public key does not belong to the signing key");
        }
        let mut extra: Vec<PublicKey> = Vec::new();
        for (name, pem) in extra_key_pems {
            for k in
                jwt::public_keys_from_pem(pem).with_context(|| format!("loading --service-account-key-file {name}"))?
            {
                if !extra.iter().any(|have| have.key_id() == k.key_id()) {
                    extra.push(k);
                }
            }
        }
        let local = Arc::new(LocalKeys::new(signing, &own, extra));
        let max_expiration_seconds = match max_expiration.unwrap_or(DEFAULT_MAX_EXPIRATION) {
            d if d.is_zero() => None,
            d => Some(d.as_secs() as i64),
        };
        Ok(Self::with_keys(
            issuers,
            local.clone(),
            Some(local),
            None,
            api_audiences,
            max_expiration_seconds,
            external_address,
        ))
    }

    fn with_keys(
        issuers: Vec<String>,
        keys: Arc<dyn KeySource>,
        local: Option<Arc<LocalKeys>>,
        external: Option<Arc<ExternalSigner>>,
        api_audiences: Vec<String>,
        max_expiration_seconds: Option<i64>,
        external_address: &str,
    ) -> Self {
        let api_audiences = if api_audiences.is_empty() { issuers.clone() } else { api_audiences };
        ServiceAccountTokens {
            issuers,
            keys,
            local,
            external,
            api_audiences,
            max_expiration_seconds,
            jwks_uri: format!("https://{external_address}{JWKS_PATH}"),
            extend_expiration: true,
        }
    }

    /// With `--service-account-extend-token-expiration` set to `on`.
    pub fn with_extended_expiration(mut self, on: bool) -> Self {
        self.extend_expiration = on;
        self
    }

    /// The lifetime a TokenRequest for `expiration_seconds`, bound to a pod (`pod_bound`), for
    /// `audiences`, is issued for instead, when it is extended, as kube-apiserver's
    /// `--service-account-extend-token-expiration` extends it: asked for
    /// [`WARN_ONLY_EXPIRATION_SECONDS`] by a kubelet for the API's audiences only, it lasts
    /// [`EXPIRATION_EXTENSION_SECONDS`], carrying `kubernetes.io.warnafter` at the asked end.
    /// Capped by the maximum ([`Self::max_token_seconds`]): upstream caps it by the external
    /// signer's only, kustos by the maximum always, which is also how long a retired key keeps
    /// verifying, so an extended token never outlives its key.
    pub fn extended_seconds(&self, expiration_seconds: i64, pod_bound: bool, audiences: &[String]) -> Option<i64> {
        let for_the_api = !audiences.is_empty() && audiences.iter().all(|a| self.api_audiences.contains(a));
        (self.extend_expiration && pod_bound && expiration_seconds == WARN_ONLY_EXPIRATION_SECONDS && for_the_api)
            .then(|| EXPIRATION_EXTENSION_SECONDS.min(self.max_token_seconds()))
            .filter(|extended| *extended > expiration_seconds)
    }

    /// Tokens signed and verified by the external signer `signer`, whose `Metadata` says it
    /// signs tokens of up to `signer_max` seconds.
    pub fn external(
        issuers: Vec<String>,
        signer: Arc<ExternalSigner>,
        signer_max: i64,
        api_audiences: Vec<String>,
        max_expiration: Option<std::time::Duration>,
        external_address: &str,
    ) -> anyhow::Result<Self> {
        validate_options(&issuers, max_expiration)?;
        let max = external_max_expiration(max_expiration, signer_max).map_err(anyhow::Error::msg)?;
        Ok(Self::with_keys(issuers, signer.clone(), None, Some(signer), api_audiences, Some(max), external_address))
    }

    /// Sign with the private key `signing_pem` from now on (the data directory's keys only).
    pub fn set_keys(&self, signing_pem: &str, retired: &[PublicKey]) -> anyhow::Result<bool> {
        match &self.local {
            Some(local) => local.set_keys(signing_pem, retired),
            None => anyhow::bail!("the tokens are signed by an external signer"),
        }
    }

    /// From the server settings, and kept current: with `--service-account-signing-endpoint`
    /// the external signer's keys (fetched again as it says); else the PKI's `sa.key`/`sa.pub`,
    /// the retired keys and the key files named in `cfg`, following `DIR/pki`.
    /// The loop that follows the keys runs under `tasks`.
    pub async fn start(
        cfg: &KeySettings<'_>,
        pki: &crate::pki::Pki,
        external_address: &str,
        tasks: &crate::tasks::Tasks,
    ) -> anyhow::Result<Self> {
        let endpoint = signing_endpoint(cfg.signing_endpoint, cfg.key_files).map_err(anyhow::Error::msg)?;
        let Some(endpoint) = endpoint else {
            let tokens = Self::load(cfg, pki, external_address)?.with_extended_expiration(cfg.extend_expiration);
            if let Some(local) = &tokens.local {
                spawn_follower(
                    tasks,
                    Arc::downgrade(local),
                    tokens.max_token_seconds(),
                    pki.dir.clone(),
                    cfg.reload_interval,
                );
            }
            return Ok(tokens);
        };
        validate_options(cfg.issuers, cfg.max_token_expiration)?;
        let timeout = std::env::var(SETUP_TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(SETUP_TIMEOUT, std::time::Duration::from_secs);
        let setup = |e: anyhow::Error| e.context("while setting up external-jwt-signer");
        let signer = ExternalSigner::connect(&endpoint, timeout).await.map_err(setup)?;
        let signer_max = signer.max_token_expiration_seconds().await.map_err(setup)?;
        let tokens = Self::external(
            cfg.issuers.to_vec(),
            signer.clone(),
            signer_max,
            cfg.api_audiences.to_vec(),
            cfg.max_token_expiration,
            external_address,
        )?
        .with_extended_expiration(cfg.extend_expiration);
        ExternalSigner::spawn_refresh(&signer, tasks);
        tracing::info!(endpoint = %endpoint, max_token_seconds = signer_max, "service-account tokens are signed by the external signer");
        Ok(tokens)
    }

    /// From the server settings: the PKI's `sa.key`/`sa.pub` and the key files named in `cfg`.
    pub fn load(cfg: &KeySettings<'_>, pki: &crate::pki::Pki, external_address: &str) -> anyhow::Result<Self> {
        let mut extra = Vec::new();
        for path in cfg.key_files {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading --service-account-key-file {}", path.display()))?;
            extra.push((path.display().to_string(), pem));
        }
        let tokens = Self::new(
            cfg.issuers.to_vec(),
            &pki.sa_key_pem,
            &pki.sa_pub_pem,
            &extra,
            cfg.api_audiences.to_vec(),
            cfg.max_token_expiration,
            external_address,
        )?;
        // The keys a `kustos sa-key rotate` retired keep verifying until their end.
        let loaded = super::sa_keys::load(&pki.dir)?;
        let retired = loaded.retired_verifying(tokens.max_token_seconds(), chrono::Utc::now())?;
        tokens.set_keys(&loaded.signing_pem, &retired)?;
        Ok(tokens)
    }

    /// The issuer new tokens carry (the first `--service-account-issuer`).
    pub fn issuer(&self) -> &str {
        self.issuers.first().map(String::as_str).unwrap_or(DEFAULT_ISSUER)
    }

    /// Every accepted issuer.
    pub fn issuers(&self) -> &[String] {
        &self.issuers
    }

    /// `--api-audiences` (default: the issuers).
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// The cap on token lifetimes (`--service-account-max-token-expiration`, else
    /// [`DEFAULT_MAX_EXPIRATION`], or the external signer's), in seconds; `None`: no cap.
    pub fn max_expiration_seconds(&self) -> Option<i64> {
        self.max_expiration_seconds
    }

    /// The longest bound token lifetime this server issues: the maximum, else 2^32 seconds.
    pub fn max_token_seconds(&self) -> i64 {
        self.max_expiration_seconds.filter(|m| *m > 0).unwrap_or(MAX_EXPIRATION_SECONDS)
    }

    /// The data directory's keys, when they sign (no external signer).
    pub fn local(&self) -> Option<&Arc<LocalKeys>> {
        self.local.as_ref()
    }

    /// The external signer, when there is one.
    pub fn external_signer(&self) -> Option<&Arc<ExternalSigner>> {
        self.external.as_ref()
    }

    /// The data directory's key that signs new tokens (`None` with an external signer).
    pub fn signing_key(&self) -> Option<Arc<SigningKey>> {
        self.local.as_ref().map(|l| l.signing_key())
    }

    /// The keys that verify, as held: the signing key, retired keys, the key files' keys (or
    /// the external signer's).
    pub fn verification_keys(&self) -> Arc<[PublicKey]> {
        self.keys.verification_keys()
    }

    /// The keys that may verify `token` (by its header's key id; an external signer's keys
    /// are fetched again for a key id they do not hold).
    pub async fn verification_keys_for(&self, token: &str) -> Arc<[PublicKey]> {
        let kid = super::sa_keys::token_kid(token);
        self.keys.keys_for(kid.as_deref()).await
    }

    /// The keys OIDC discovery publishes.
    pub fn published_keys(&self) -> Arc<[PublicKey]> {
        self.keys.published_keys()
    }

    /// The JWK set OIDC discovery publishes.
    pub fn jwks(&self) -> Value {
        jwt::jwks(&self.published_keys())
    }

    /// `https://<external address>/openid/v1/jwks`, the `jwks_uri` of OIDC discovery.
    pub fn jwks_uri(&self) -> &str {
        &self.jwks_uri
    }

    /// Sign a bound token.
    pub async fn issue(&self, claims: &BoundClaims) -> anyhow::Result<String> {
        self.keys.sign(&claims.to_json()).await
    }
}

/// Follow `DIR/pki`'s service-account keys (`sa.key`, `sa-keys.json`): every `every`, until
/// `keys` are dropped. Each pass records this apiserver's end (`max`: its longest token
/// lifetime) on the retired keys and drops those past it ([`super::sa_keys::maintain`]), then
/// verifies with the keys that verify now: a revoked key or one past its end stops verifying
/// within one pass. A state that does not load is reported once and the keys in use stay.
pub fn spawn_follower(
    tasks: &crate::tasks::Tasks,
    keys: Weak<LocalKeys>,
    max: i64,
    pki: PathBuf,
    every: std::time::Duration,
) {
    tasks.spawn("service-account-keys", async move {
        let mut reported: Option<String> = None;
        // What was last applied (the signing key's PEM, the retired keys' ids that verify):
        // unchanged, nothing is swapped.
        let mut applied_from: Option<(String, Vec<String>)> = None;
        loop {
            tokio::time::sleep(every).await;
            let Some(keys) = keys.upgrade() else { return Ok(()) };
            let pki = pki.clone();
            let loaded = kustos_filework::run(move || {
                let now = chrono::Utc::now();
                for kid in super::sa_keys::maintain(&pki, max, now)? {
                    tracing::info!(kid = %kid, "dropped a retired service-account key: past its end or revoked");
                }
                let loaded = super::sa_keys::load(&pki)?;
                let retired = loaded.retired_verifying(max, now)?;
                Ok::<_, anyhow::Error>((loaded.signing_pem, retired))
            })
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r);
            let applied = loaded.and_then(|(signing_pem, retired)| {
                let from = (signing_pem.clone(), retired.iter().map(|k| k.key_id().to_string()).collect());
                if applied_from.as_ref() == Some(&from) {
                    return Ok(false);
                }
                let changed = keys.set_keys(&signing_pem, &retired)?;
                applied_from = Some(from);
                Ok(changed)
            });
            match applied {
                Ok(changed) => {
                    if reported.take().is_some() {
                        tracing::info!("the service-account keys load again");
                    }
                    if changed {
                        let k = keys.current();
                        tracing::info!(
                            signing_kid = %k.signing.public_key().key_id(),
                            verifying = k.verifying.len(),
                            "following the new service-account keys"
                        );
                    }
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    if reported.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(error = %msg, "the service-account keys do not load; keeping the keys in use");
                        reported = Some(msg);
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::type_complexity)]
    use super::*;
    use serde_json::json;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn option_validation() {
        let h = |n: u64| Some(std::time::Duration::from_secs(n * 3600));
        let cases: Vec<(Vec<String>, Option<std::time::Duration>, Result<(), &str>)> = vec![
            (strings(&[DEFAULT_ISSUER]), None, Ok(())),
            (strings(&["a", "https://b"]), h(48), Ok(())),
            (vec![], None, Err("service-account-issuer is a required flag")),
            (strings(&[""]), None, Err("service-account-issuer should not be an empty string")),
            (strings(&["a", "a"]), None, Err("service-account-issuer \"a\" is already specified")),
            (
                strings(&["a"]),
                Some(std::time::Duration::from_secs(600)),
                Err("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"),
            ),
            (
                strings(&["a"]),
                Some(std::time::Duration::from_secs((1 << 32) + 1)),
                Err("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"),
            ),
        ];
        for (issuers, max, want) in cases {
            assert_eq!(
                validate_options(&issuers, max).map_err(|e| e.to_string()),
                want.map_err(str::to_string),
                "{issuers:?} {max:?}"
            );
        }
    }

    #[test]
    fn external_signer_flags_as_kube_apiserver() {
        let d = |s: u64| Some(std::time::Duration::from_secs(s));
        // (flag, the signer's maximum) -> the cap, or the error
        let cases: Vec<(Option<std::time::Duration>, i64, Result<i64, &str>)> = vec![
            (None, 86_400, Ok(86_400)),
            (d(0), 86_400, Ok(86_400)),
            (d(3600), 86_400, Ok(3600)),
            (d(86_400), 86_400, Ok(86_400)),
            (
                d(172_800),
                86_400,
                Err("service-account-max-token-expiration cannot be set longer than the token expiration supported by service-account-signing-endpoint: 48h0m0s > 24h0m0s"),
            ),
            (None, 600, Ok(600)),
            (None, 599, Err("max token life supported by external-jwt-signer (599s) is less than acceptable (min 600s)")),
        ];
        for (flag, signer, want) in cases {
            assert_eq!(external_max_expiration(flag, signer), want.map_err(str::to_string), "{flag:?} {signer}");
        }
        for (secs, want) in [(30, "30s"), (600, "10m0s"), (3601, "1h0m1s"), (31_536_000, "8760h0m0s")] {
            assert_eq!(go_duration(secs), want);
        }
        let files = vec![PathBuf::from("/etc/kubernetes/pki/sa.pub")];
        let exclusive = "can't set `--service-account-signing-key-file` and/or `--service-account-key-file` with `--service-account-signing-endpoint` (They are mutually exclusive)";
        let cases: Vec<(Option<&str>, &[PathBuf], Result<Option<Endpoint>, String>)> = vec![
            (None, &files, Ok(None)),
            (Some(""), &[], Ok(None)),
            (Some("@signer"), &[], Ok(Some(Endpoint::Abstract("signer".into())))),
            (Some("/run/s.sock"), &files, Err(exclusive.to_string())),
            (
                Some("rel.sock"),
                &files,
                Err(format!("{exclusive}; invalid value \"rel.sock\" passed for `--service-account-signing-endpoint`, should be a valid location on the filesystem or must be prefixed with @ to name UDS in abstract namespace")),
            ),
        ];
        for (endpoint, key_files, want) in cases {
            assert_eq!(signing_endpoint(endpoint, key_files), want, "{endpoint:?}");
        }
    }

    #[test]
    fn kubelets_transition_tokens_are_extended() {
        let own = kustos_ca::generate_sa_keypair().unwrap();
        let with_max = |max: Option<u64>| {
            let max = max.map(std::time::Duration::from_secs);
            ServiceAccountTokens::new(
                strings(&["api"]),
                &own.private_key_pem,
                &own.public_key_pem,
                &[],
                vec![],
                max,
                "h:1",
            )
            .unwrap()
        };
        let (t, api) = (with_max(None), strings(&["api"]));
        let year = Some(EXPIRATION_EXTENSION_SECONDS);
        let cases: Vec<(&str, &ServiceAccountTokens, i64, bool, Vec<String>, Option<i64>)> = vec![
            ("a kubelet's pod-bound token for the API", &t, 3607, true, api.clone(), year),
            ("another lifetime", &t, 3600, true, api.clone(), None),
            ("not bound to a pod", &t, 3607, false, api.clone(), None),
            ("for another audience", &t, 3607, true, strings(&["vault"]), None),
            ("for the API and another", &t, 3607, true, strings(&["api", "vault"]), None),
        ];
        for (what, t, asked, pod, auds, want) in cases {
            assert_eq!(t.extended_seconds(asked, pod, &auds), want, "{what}");
        }
        assert_eq!(
            with_max(Some(48 * 3600)).extended_seconds(3607, true, &api),
            Some(48 * 3600),
            "capped by the maximum"
        );
        let off = with_max(None).with_extended_expiration(false);
        assert_eq!(off.extended_seconds(3607, true, &api), None, "--service-account-extend-token-expiration=false");
    }

    #[test]
    fn keys_from_extra_files_verify_and_dedupe() {
        let own = kustos_ca::generate_sa_keypair().unwrap();
        let old = kustos_ca::generate_sa_keypair().unwrap();
        let extra = vec![
            ("old.key".to_string(), old.private_key_pem.clone()),
            ("own.pub".to_string(), own.public_key_pem.clone()),
        ];
        let t = ServiceAccountTokens::new(
            strings(&["a"]),
            &own.private_key_pem,
            &own.public_key_pem,
            &extra,
            vec![],
            None,
            "h:1",
        )
        .unwrap();
        assert_eq!(t.verification_keys().len(), 2);
        assert_eq!(t.api_audiences(), ["a"]);
        let old_signed = SigningKey::from_pem(&old.private_key_pem).unwrap().sign(&json!({"iss": "a"})).unwrap();
        assert!(jwt::verify(&old_signed, &t.verification_keys()).is_ok());
        // A broken key file and a public key that is not the signing key's are errors.
        let broken = vec![("broken.pem".to_string(), "nothing".to_string())];
        let err = ServiceAccountTokens::new(
            strings(&["a"]),
            &own.private_key_pem,
            &own.public_key_pem,
            &broken,
            vec![],
            None,
            "h:1",
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("broken.pem"), "{err:#}");
        assert!(ServiceAccountTokens::new(
            strings(&["a"]),
            &own.private_key_pem,
            &old.public_key_pem,
            &[],
            vec![],
            None,
            "h:1"
        )
        .is_err());
        assert!(!format!("{t:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_new_signing_key_signs_and_the_retired_one_keeps_verifying() {
        let (old, new, file) = (
            kustos_ca::generate_sa_keypair().unwrap(),
            kustos_ca::generate_sa_keypair().unwrap(),
            kustos_ca::generate_sa_keypair().unwrap(),
        );
        let extra = vec![("file.pub".to_string(), file.public_key_pem.clone())];
        let t = ServiceAccountTokens::new(
            strings(&["a"]),
            &old.private_key_pem,
            &old.public_key_pem,
            &extra,
            vec![],
            None,
            "h:1",
        )
        .unwrap();
        let kid = |pem: &str| SigningKey::from_pem(pem).unwrap().public_key().key_id().to_string();
        let by_old = t.signing_key().unwrap().sign(&json!({"iss": "a"})).unwrap();
        let old_pub = t.signing_key().unwrap().public_key().clone();
        let kids = |t: &ServiceAccountTokens| -> Vec<String> {
            t.verification_keys().iter().map(|k| k.key_id().to_string()).collect()
        };
        assert_eq!(kids(&t), [kid(&old.private_key_pem), kid(&file.private_key_pem)]);
        // (signing key, retired keys) -> changed, kids that verify
        let cases: Vec<(&str, Vec<PublicKey>, bool, Vec<String>)> = vec![
            (
                &new.private_key_pem,
                vec![old_pub.clone()],
                true,
                vec![kid(&new.private_key_pem), kid(&old.private_key_pem), kid(&file.private_key_pem)],
            ),
            (
                &new.private_key_pem,
                vec![old_pub.clone()],
                false,
                vec![kid(&new.private_key_pem), kid(&old.private_key_pem), kid(&file.private_key_pem)],
            ),
            (&new.private_key_pem, vec![], true, vec![kid(&new.private_key_pem), kid(&file.private_key_pem)]),
        ];
        for (signing, retired, changed, want) in cases {
            assert_eq!(t.set_keys(signing, &retired).unwrap(), changed);
            assert_eq!(kids(&t), want);
            assert_eq!(t.signing_key().unwrap().public_key().key_id(), kid(&new.private_key_pem));
            assert_eq!(jwt::verify(&by_old, &t.verification_keys()).is_ok(), retired.contains(&old_pub));
            assert_eq!(t.jwks()["keys"].as_array().map(Vec::len), Some(want.len()));
        }
        assert!(t.set_keys("junk", &[]).is_err());
        assert_eq!(
            t.signing_key().unwrap().public_key().key_id(),
            kid(&new.private_key_pem),
            "a bad key changes nothing"
        );
    }
}
