//! Service-account tokens, after upstream's `pkg/serviceaccount` and
//! `pkg/registry/core/serviceaccount/storage/token.go`:
//!
//! - [`ServiceAccountTokens`]: the issuers (the first one signs), the signing key, the
//!   verification keys (the apiserver's own `sa.pub` plus `--service-account-key-file`s),
//!   the API audiences and the maximum token lifetime.
//! - [`ServiceAccountAuthenticator`]: the bearer-token authenticator for service-account
//!   JWTs. Bound tokens (TokenRequest) must name a service account that still exists with the
//!   same uid, and, when bound to a Secret, a Secret that still exists with the same uid.
//!   Legacy tokens (issuer `kubernetes/serviceaccount`) must be the `data.token` of a live
//!   `kubernetes.io/service-account-token` Secret; their use is recorded in the
//!   `kubernetes.io/legacy-token-last-used` label (at most one write per Secret and day), and
//!   the `kubernetes.io/legacy-token-invalid-since` label disables them.
//! - [`token_request`]: POST `serviceaccounts/<name>/token` (TokenRequest).
//! - OIDC discovery: `/.well-known/openid-configuration` and `/openid/v1/jwks`.
//!
//! The decisions are pure functions of the claims, the stored objects and `now`
//! ([`audiences_for`], [`check_bound`], [`check_legacy`], [`validate_token_request`]...);
//! the authenticator and the handler only fetch objects and apply them. Tokens never reach
//! logs or error messages.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use axum::response::{IntoResponse as _, Response};
use base64::Engine as _;
use bytes::Bytes;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use http::{header, HeaderValue, StatusCode};
use k8s_openapi::api::authentication::v1 as authnv1;
use kustos_ca::jwt::{self, BoundClaims, JwtError, LegacyClaims, ObjectRef, PublicKey, SigningKey};
use serde_json::{json, Map, Value};

use crate::api::rest::{self, Call, Params, Reply};
use crate::authn::{TokenAuthenticator, TokenResult, UserInfo};
use crate::error::{ApiError, FieldError};
use crate::http::request_info::RequestInfo;
use crate::meta;
use crate::registry::{typed_roundtrip, Registry, ResourceDef, Strategy};
use crate::storage::{KeyValue, Storage};
use crate::AppState;

/// The default `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Where the OIDC provider configuration is served.
pub const OPENID_CONFIG_PATH: &str = "/.well-known/openid-configuration";
/// Where the JWK set of the verification keys is served.
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// Group of every service account.
pub const ALL_SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// The user extra naming the credential (`JTI=<jti>` for bound tokens).
pub const CREDENTIAL_ID_EXTRA: &str = "authentication.kubernetes.io/credential-id";
/// The Secret type holding legacy tokens.
pub const SERVICE_ACCOUNT_TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Label with the day (UTC, `YYYY-MM-DD`) a legacy token was last used.
pub const LEGACY_TOKEN_LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
/// Label marking a legacy token invalid (set by the legacy token cleaner or by hand).
pub const LEGACY_TOKEN_INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
/// The ConfigMap (in `kube-system`) recording since when legacy token use is tracked.
pub const LEGACY_TOKEN_TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
/// Its data key: the day tracking started.
pub const LEGACY_TOKEN_TRACKING_SINCE_KEY: &str = "since";
/// `spec.expirationSeconds` when unset.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest token lifetime a TokenRequest may ask for.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest token lifetime a TokenRequest may ask for (2^32 seconds).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// How long discovery documents may be cached (upstream's static key getter).
const DISCOVERY_MAX_AGE_SECONDS: u32 = 3600;
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
const TOKEN_INVALIDATED: &str = "service account token has been invalidated";
const LEGACY_TOKEN_INVALIDATED: &str = "token has been invalidated";

// ---------------------------------------------------------------------------------------
// Settings and keys
// ---------------------------------------------------------------------------------------

/// Everything tokens are issued and checked with.
pub struct ServiceAccountTokens {
    issuers: Vec<String>,
    signing: SigningKey,
    keys: Vec<PublicKey>,
    api_audiences: Vec<String>,
    max_expiration_seconds: Option<i64>,
    /// `https://<external address>/openid/v1/jwks`
    jwks_uri: String,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("issuers", &self.issuers)
            .field("signing_key_id", &self.signing.public_key().key_id())
            .field("keys", &self.keys)
            .field("api_audiences", &self.api_audiences)
            .field("max_expiration_seconds", &self.max_expiration_seconds)
            .finish()
    }
}

/// Check the flags as upstream does: at least one issuer, none empty or repeated, and a
/// maximum lifetime (when set) between one hour and 2^32 seconds.
pub fn validate_options(issuers: &[String], max_expiration: Option<std::time::Duration>) -> Result<(), String> {
    if issuers.is_empty() {
        return Err("service-account-issuer is a required flag".into());
    }
    for (i, iss) in issuers.iter().enumerate() {
        if iss.is_empty() {
            return Err("service-account-issuer should not be an empty string".into());
        }
        if iss.chars().any(char::is_whitespace) && iss.contains(':') {
            return Err("service-account-issuer contained a ':' but was not a valid URL".into());
        }
        if issuers[..i].contains(iss) {
            return Err(format!("service-account-issuer {iss:?} is already specified"));
        }
    }
    if let Some(max) = max_expiration {
        if max < std::time::Duration::from_secs(3600) || max.as_secs() > MAX_EXPIRATION_SECONDS as u64 {
            return Err("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds".into());
        }
    }
    Ok(())
}

/// Whether OIDC discovery can be served for `issuer`: an `https` URL without query or
/// fragment (upstream does not install the endpoints otherwise).
pub fn discovery_enabled(issuer: &str) -> bool {
    issuer.strip_prefix("https://").is_some_and(|rest| !rest.is_empty() && !rest.contains(['?', '#']))
}

impl ServiceAccountTokens {
    /// `signing_key_pem` signs; `own_public_pem` and each of `extra_key_pems` (the contents of
    /// `--service-account-key-file`s) verify. Empty `api_audiences` means the issuers.
    pub fn new(
        issuers: Vec<String>,
        signing_key_pem: &str,
        own_public_pem: &str,
        extra_key_pems: &[(String, String)],
        api_audiences: Vec<String>,
        max_expiration: Option<std::time::Duration>,
        external_address: &str,
    ) -> anyhow::Result<Self> {
        validate_options(&issuers, max_expiration).map_err(anyhow::Error::msg)?;
        let signing = SigningKey::from_pem(signing_key_pem).context("loading the service-account signing key")?;
        let mut keys: Vec<PublicKey> = Vec::new();
        let mut add = |found: Vec<PublicKey>| {
            for k in found {
                if !keys.iter().any(|have| have.key_id() == k.key_id()) {
                    keys.push(k);
                }
            }
        };
        add(jwt::public_keys_from_pem(own_public_pem).context("loading the service-account public key")?);
        for (name, pem) in extra_key_pems {
            add(jwt::public_keys_from_pem(pem).with_context(|| format!("loading --service-account-key-file {name}"))?);
        }
        if !keys.iter().any(|k| k.key_id() == signing.public_key().key_id()) {
            anyhow::bail!("the service-account public key does not belong to the signing key");
        }
        let api_audiences = if api_audiences.is_empty() { issuers.clone() } else { api_audiences };
        Ok(ServiceAccountTokens {
            issuers,
            signing,
            keys,
            api_audiences,
            max_expiration_seconds: max_expiration.map(|d| d.as_secs() as i64),
            jwks_uri: format!("https://{external_address}{JWKS_PATH}"),
        })
    }

    /// From the server settings: the PKI's `sa.key`/`sa.pub` and the key files named in `cfg`.
    pub fn load(cfg: &crate::Config, pki: &crate::pki::Pki, external_address: &str) -> anyhow::Result<Self> {
        let mut extra = Vec::new();
        for path in &cfg.service_account_key_files {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading --service-account-key-file {}", path.display()))?;
            extra.push((path.display().to_string(), pem));
        }
        Self::new(
            cfg.service_account_issuers.clone(),
            &pki.sa_key_pem,
            &pki.sa_pub_pem,
            &extra,
            cfg.api_audiences.clone(),
            cfg.service_account_max_token_expiration,
            external_address,
        )
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

    /// `--service-account-max-token-expiration`, in seconds.
    pub fn max_expiration_seconds(&self) -> Option<i64> {
        self.max_expiration_seconds
    }

    pub fn signing_key(&self) -> &SigningKey {
        &self.signing
    }

    pub fn verification_keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// The JWK set of the verification keys.
    pub fn jwks(&self) -> Value {
        jwt::jwks(&self.keys)
    }

    /// The OIDC provider configuration, when discovery is enabled.
    pub fn openid_configuration(&self) -> Option<String> {
        if !discovery_enabled(self.issuer()) {
            return None;
        }
        // Field order as upstream's struct renders it.
        Some(format!(
            "{{\"issuer\":{},\"jwks_uri\":{},\"response_types_supported\":[\"id_token\"],\"subject_types_supported\":[\"public\"],\"id_token_signing_alg_values_supported\":{}}}",
            json!(self.issuer()),
            json!(self.jwks_uri),
            json!(jwt::signing_algorithms(&self.keys)),
        ))
    }

    /// Sign a bound token.
    pub fn issue(&self, claims: &BoundClaims) -> Result<String, JwtError> {
        self.signing.sign(&claims.to_json())
    }
}

// ---------------------------------------------------------------------------------------
// Decisions (pure)
// ---------------------------------------------------------------------------------------

/// Go's `%q` of a string list: `["a" "b"]`.
fn quote_list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "))
}

/// The audiences a token is good for among those requested. A token without audiences (a
/// legacy token) counts as made for the API audiences; no requested audiences means the
/// API audiences. No overlap is an error (unless the apiserver has no audiences at all).
pub fn audiences_for(
    token_audiences: &[String],
    api_audiences: &[String],
    requested: &[String],
) -> Result<Vec<String>, String> {
    let token_audiences = if token_audiences.is_empty() { api_audiences } else { token_audiences };
    let requested = if requested.is_empty() { api_audiences } else { requested };
    let both: Vec<String> = token_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
    if both.is_empty() && !api_audiences.is_empty() {
        return Err(format!(
            "token audiences {} is invalid for the target audiences {}",
            quote_list(token_audiences),
            quote_list(requested)
        ));
    }
    Ok(both)
}

/// The user of a service account: `system:serviceaccount:<ns>:<name>` with its uid, in
/// `system:serviceaccounts` and `system:serviceaccounts:<ns>`.
pub fn service_account_user(namespace: &str, name: &str, uid: &str, credential_id: Option<String>) -> UserInfo {
    let mut extra = BTreeMap::new();
    if let Some(id) = credential_id.filter(|id| !id.is_empty()) {
        extra.insert(CREDENTIAL_ID_EXTRA.to_string(), vec![id]);
    }
    UserInfo {
        name: jwt::service_account_username(namespace, name),
        uid: uid.into(),
        groups: vec![ALL_SERVICE_ACCOUNTS_GROUP.into(), format!("{ALL_SERVICE_ACCOUNTS_GROUP}:{namespace}")],
        extra,
    }
}

/// When the object is being deleted: its `deletionTimestamp` (an unreadable one counts as
/// long ago).
fn deletion_time(obj: &Value) -> Option<DateTime<Utc>> {
    let ts = obj.get("metadata")?.get("deletionTimestamp")?;
    if ts.is_null() {
        return None;
    }
    Some(
        ts.as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or(DateTime::<Utc>::MIN_UTC),
    )
}

/// A bound token's claims against the stored service account and bound Secret (`None` =
/// not found) at `now`. Objects deleted more than the leeway ago count as gone, as upstream.
pub fn check_bound(
    claims: &BoundClaims,
    service_account: Option<&Value>,
    secret: Option<&Value>,
    now: DateTime<Utc>,
) -> Result<UserInfo, String> {
    claims.check_time(now).map_err(|e| e.to_string())?;
    let ns = &claims.namespace;
    let sa_ref = &claims.service_account;
    let deleted_long_ago =
        |obj: &Value| deletion_time(obj).is_some_and(|t| t < now - Duration::seconds(jwt::LEEWAY_SECONDS));
    let sa = service_account
        .filter(|_| !ns.is_empty() && !sa_ref.name.is_empty())
        .ok_or_else(|| format!("serviceaccounts {:?} not found", sa_ref.name))?;
    if deleted_long_ago(sa) {
        return Err(format!("service account {ns}/{} has been deleted", sa_ref.name));
    }
    if meta::uid(sa) != sa_ref.uid {
        return Err(format!("service account UID ({}) does not match claim ({})", meta::uid(sa), sa_ref.uid));
    }
    if let Some(secret_ref) = &claims.secret {
        let secret = secret.ok_or(TOKEN_INVALIDATED)?;
        if deleted_long_ago(secret) {
            return Err(TOKEN_INVALIDATED.into());
        }
        if meta::uid(secret) != secret_ref.uid {
            return Err(format!(
                "secret UID ({}) does not match service account secret ref claim ({})",
                meta::uid(secret),
                secret_ref.uid
            ));
        }
    }
    // Pods and nodes are not served here: a token bound to one cannot be checked.
    if claims.pod.is_some() || claims.node.is_some() {
        return Err(TOKEN_INVALIDATED.into());
    }
    let credential_id = (!claims.jti.is_empty()).then(|| format!("JTI={}", claims.jti));
    Ok(service_account_user(ns, &sa_ref.name, &sa_ref.uid, credential_id))
}

/// The `data.token` of a Secret, decoded.
fn secret_token(secret: &Value) -> Option<Vec<u8>> {
    let b64 = secret.get("data")?.get("token")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// A legacy token against its Secret and service account (`None` = not found): the claims
/// are complete, the Secret is a live service-account-token Secret holding exactly this
/// token, and the service account exists with the claimed uid. The invalid-since label is
/// checked apart ([`legacy_invalidated`]) so that the use is recorded first.
pub fn check_legacy(
    claims: &LegacyClaims,
    token: &str,
    secret: Option<&Value>,
    service_account: Option<&Value>,
) -> Result<UserInfo, String> {
    claims.check().map_err(|e| e.to_string())?;
    let secret = secret.ok_or(LEGACY_TOKEN_INVALIDATED)?;
    if deletion_time(secret).is_some()
        || secret.get("type").and_then(Value::as_str) != Some(SERVICE_ACCOUNT_TOKEN_SECRET_TYPE)
    {
        return Err(LEGACY_TOKEN_INVALIDATED.into());
    }
    let stored = secret_token(secret).unwrap_or_default();
    if !jwt::constant_time_eq(&stored, token.as_bytes()) {
        return Err("token does not match server's copy".into());
    }
    let (ns, name) = (&claims.namespace, &claims.service_account_name);
    let sa = service_account.ok_or_else(|| format!("serviceaccounts {name:?} not found"))?;
    if deletion_time(sa).is_some() {
        return Err(format!("service account {ns}/{name} has been deleted"));
    }
    if meta::uid(sa) != claims.service_account_uid {
        return Err(format!(
            "service account UID ({}) does not match claim ({})",
            meta::uid(sa),
            claims.service_account_uid
        ));
    }
    Ok(service_account_user(ns, name, &claims.service_account_uid, None))
}

/// The rejection of a legacy token whose Secret carries the invalid-since label.
pub fn legacy_invalidated(claims: &LegacyClaims, secret: &Value) -> Option<String> {
    let labels = meta::labels(secret);
    labels.get(LEGACY_TOKEN_INVALID_SINCE_LABEL).filter(|v| !v.is_empty())?;
    Some(format!(
        "the token in secret {ns}/{secret} for service account {ns}/{sa} has been marked invalid. Use tokens from the TokenRequest API or manually created secret-based tokens, or remove the '{LEGACY_TOKEN_INVALID_SINCE_LABEL}' label from the secret to temporarily allow use of this token",
        ns = claims.namespace,
        secret = claims.secret_name,
        sa = claims.service_account_name,
    ))
}

/// The day to write into the last-used label, if it needs a write: not when it already
/// says today or tomorrow (clock skew between apiservers).
pub fn last_used_update(labels: &BTreeMap<String, String>, now: DateTime<Utc>) -> Option<String> {
    let today = now.format("%Y-%m-%d").to_string();
    let tomorrow = (now + Duration::days(1)).format("%Y-%m-%d").to_string();
    match labels.get(LEGACY_TOKEN_LAST_USED_LABEL) {
        Some(v) if *v == today || *v == tomorrow => None,
        _ => Some(today),
    }
}

// ---------------------------------------------------------------------------------------
// The authenticator
// ---------------------------------------------------------------------------------------

/// Authenticates service-account JWTs: tokens of other issuers, and what is not a JWT, are
/// not its business.
pub struct ServiceAccountAuthenticator {
    tokens: Arc<ServiceAccountTokens>,
    store: Arc<dyn Storage>,
    service_accounts: ResourceDef,
    secrets: ResourceDef,
}

fn core_def(registry: &Registry, resource: &str) -> anyhow::Result<ResourceDef> {
    registry.find("", "v1", resource).cloned().with_context(|| format!("{resource} are not registered"))
}

impl ServiceAccountAuthenticator {
    pub fn new(tokens: Arc<ServiceAccountTokens>, store: Arc<dyn Storage>) -> anyhow::Result<Self> {
        let registry = Registry::builtin();
        Ok(ServiceAccountAuthenticator {
            tokens,
            store,
            service_accounts: core_def(&registry, "serviceaccounts")?,
            secrets: core_def(&registry, "secrets")?,
        })
    }

    async fn read(&self, def: &ResourceDef, namespace: &str, name: &str) -> Result<Option<(KeyValue, Value)>, String> {
        if namespace.is_empty() || name.is_empty() {
            return Ok(None);
        }
        let kv = self.store.get(&def.key(Some(namespace), name)).await.map_err(|e| e.to_string())?;
        match kv {
            None => Ok(None),
            Some(kv) => {
                let obj = serde_json::from_slice(&kv.value).map_err(|e| format!("stored {}: {e}", def.resource))?;
                Ok(Some((kv, obj)))
            }
        }
    }

    async fn authenticate_bound(&self, claims: &Map<String, Value>, now: DateTime<Utc>) -> Result<UserInfo, String> {
        let claims = BoundClaims::from_claims(claims).map_err(|e| e.to_string())?;
        let ns = &claims.namespace;
        let sa = self.read(&self.service_accounts, ns, &claims.service_account.name).await?;
        let secret = match &claims.secret {
            Some(r) => self.read(&self.secrets, ns, &r.name).await?,
            None => None,
        };
        check_bound(&claims, sa.as_ref().map(|(_, o)| o), secret.as_ref().map(|(_, o)| o), now)
    }

    async fn authenticate_legacy(
        &self,
        token: &str,
        claims: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<UserInfo, String> {
        let claims = LegacyClaims::from_claims(claims).map_err(|e| e.to_string())?;
        claims.check().map_err(|e| e.to_string())?;
        let ns = &claims.namespace;
        let secret = self.read(&self.secrets, ns, &claims.secret_name).await?;
        let sa = self.read(&self.service_accounts, ns, &claims.service_account_name).await?;
        let user = check_legacy(&claims, token, secret.as_ref().map(|(_, o)| o), sa.as_ref().map(|(_, o)| o))?;
        let Some((kv, secret)) = secret else { return Err(LEGACY_TOKEN_INVALIDATED.into()) };
        self.record_legacy_use(&kv, &secret, now).await;
        if let Some(reason) = legacy_invalidated(&claims, &secret) {
            return Err(reason);
        }
        Ok(user)
    }

    /// Set the last-used label to today, once a day. A failed write (a concurrent change)
    /// does not fail the request.
    async fn record_legacy_use(&self, kv: &KeyValue, secret: &Value, now: DateTime<Utc>) {
        let Some(today) = last_used_update(&meta::labels(secret), now) else { return };
        let mut updated = secret.clone();
        let m = meta::meta_mut(&mut updated);
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        if let Some(l) = labels.as_object_mut() {
            l.insert(LEGACY_TOKEN_LAST_USED_LABEL.into(), json!(today));
        }
        let result = match meta::to_stored(&updated) {
            Ok(bytes) => self.store.update(&kv.key, bytes, kv.mod_rev).await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            tracing::debug!(secret = %kv.key, error = %e, "recording the use of a legacy service-account token");
        }
    }
}

#[async_trait::async_trait]
impl TokenAuthenticator for ServiceAccountAuthenticator {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let now = Utc::now();
        let Some(issuer) = jwt::unverified_issuer(token) else { return TokenResult::NotMine };
        let legacy = issuer == jwt::LEGACY_ISSUER;
        if !legacy && !self.tokens.issuers.contains(&issuer) {
            return TokenResult::NotMine;
        }
        let claims = match jwt::verify(token, &self.tokens.keys) {
            Ok(c) => c,
            Err(JwtError::Malformed(_)) => return TokenResult::NotMine,
            Err(e) => return TokenResult::Invalid(e.to_string()),
        };
        let token_audiences = match BoundClaims::from_claims(&claims) {
            Ok(c) => c.audiences,
            Err(e) => return TokenResult::Invalid(e.to_string()),
        };
        let valid_for = match audiences_for(&token_audiences, &self.tokens.api_audiences, audiences) {
            Ok(a) => a,
            Err(e) => return TokenResult::Invalid(e),
        };
        let user = if legacy {
            self.authenticate_legacy(token, &claims, now).await
        } else {
            self.authenticate_bound(&claims, now).await
        };
        match user {
            Ok(user) => TokenResult::Authenticated { user, audiences: valid_for },
            Err(reason) => TokenResult::Invalid(reason),
        }
    }
}

// ---------------------------------------------------------------------------------------
// TokenRequest
// ---------------------------------------------------------------------------------------

struct TokenRequestStrategy;

impl Strategy for TokenRequestStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<authnv1::TokenRequest>(obj)
    }
}

/// The kind a TokenRequest body is decoded as.
fn token_request_def() -> ResourceDef {
    ResourceDef {
        group: AUTHENTICATION_GROUP,
        version: "v1",
        resource: "tokenrequests",
        singular: "tokenrequest",
        kind: "TokenRequest",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
        create_only: true,
        strategy: Arc::new(TokenRequestStrategy),
        schema: |g| g.subschema_for::<authnv1::TokenRequest>(),
    }
}

/// Upstream's `ValidateTokenRequest` for what TokenRequest v1 can carry.
pub fn validate_token_request(expiration_seconds: i64) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if expiration_seconds < MIN_EXPIRATION_SECONDS {
        errs.push(FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration_seconds),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration_seconds > MAX_EXPIRATION_SECONDS {
        errs.push(FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration_seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    errs
}

/// What a `boundObjectRef` may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundKind {
    Secret,
}

/// `schema.FromAPIVersionAndKind(..).String()`: `group/version, Kind=kind`.
fn gvk_string(api_version: &str, kind: &str) -> (String, String) {
    let parts: Vec<&str> = api_version.split('/').collect();
    let (group, version) = match parts.as_slice() {
        [""] => ("", ""),
        [v] => ("", *v),
        [g, v] => (*g, *v),
        _ => ("", ""),
    };
    (group.to_string(), format!("{group}/{version}, Kind={kind}"))
}

/// The kind of object a token may be bound to: Secrets (core group). Pods and Nodes are not
/// served by this apiserver, so binding to them is refused like any other kind.
pub fn bound_kind(api_version: &str, kind: &str) -> Result<BoundKind, ApiError> {
    let (group, shown) = gvk_string(api_version, kind);
    if group.is_empty() && kind == "Secret" {
        return Ok(BoundKind::Secret);
    }
    Err(ApiError::BadRequest(format!("cannot bind token to object of type {shown}")))
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn not_served() -> ApiError {
    ApiError::NotFound {
        message: "the server could not find the requested resource".into(),
        subject: Default::default(),
    }
}

/// POST `serviceaccounts/<name>/token`.
pub async fn token_request(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply, ApiError> {
    let Some(tokens) = c.state.security.service_accounts.clone() else { return Err(not_served()) };
    let def = token_request_def();
    let dry_run = c.params.dry_run()?;
    let (obj, mut warnings) = decode_token_request(&def, &c.params, body, content_type, &c.info.namespace)?;
    let (namespace, name) = (c.info.namespace.as_str(), c.info.name.as_str());
    // The status is the server's to fill (protobuf bodies carry an empty one).
    let mut spec_only = obj.clone();
    if let Some(m) = spec_only.as_object_mut() {
        m.remove("status");
    }
    let req: authnv1::TokenRequest = serde_json::from_value(spec_only).map_err(|e| {
        ApiError::BadRequest(format!("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: {e}"))
    })?;
    let body_name = req.metadata.name.clone().unwrap_or_default();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::invalid(
            AUTHENTICATION_GROUP,
            "TokenRequest",
            name,
            vec![FieldError::invalid(
                "metadata.name",
                &json!(body_name),
                "must match the service account name if specified",
            )],
        ));
    }
    let sa = read_object(c.state, c.def, namespace, name)
        .await?
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
    let now = Utc::now();
    let mut audiences = req.spec.audiences.clone();
    if audiences.is_empty() {
        audiences = tokens.api_audiences().to_vec();
    }
    let mut expiration = req.spec.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    let errs = validate_token_request(expiration);
    if !errs.is_empty() {
        return Err(ApiError::invalid(AUTHENTICATION_GROUP, "TokenRequest", "", errs));
    }
    let mut secret_ref = None;
    if let Some(r) = &req.spec.bound_object_ref {
        let kind = r.kind.as_deref().unwrap_or("");
        let api_version = r.api_version.as_deref().unwrap_or("");
        let ref_name = r.name.as_deref().unwrap_or("");
        match bound_kind(api_version, kind)? {
            BoundKind::Secret => {
                let Some(secrets) = c.state.registry.find("", "v1", "secrets") else { return Err(not_served()) };
                let secret = read_object(c.state, secrets, namespace, ref_name)
                    .await?
                    .ok_or_else(|| ApiError::not_found("", "secrets", ref_name))?;
                let uid = meta::uid(&secret);
                if let Some(want) = r.uid.as_deref().filter(|u| !u.is_empty()) {
                    if want != uid {
                        return Err(ApiError::conflict("", kind, ref_name, &format!("the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated")));
                    }
                }
                secret_ref = Some(ObjectRef::new(ref_name, uid));
            }
        }
    }
    if let Some(max) = tokens.max_expiration_seconds().filter(|m| *m > 0 && expiration > *m) {
        warnings.push(format!("requested expiration of {expiration} seconds shortened to {max} seconds"));
        expiration = max;
    }
    let token = if dry_run {
        String::new()
    } else {
        let sa_ref = ObjectRef::new(meta::name(&sa), meta::uid(&sa));
        let jti = uuid::Uuid::new_v4().to_string();
        let mut claims = BoundClaims::new(tokens.issuer(), namespace, sa_ref, audiences.clone(), now, expiration, &jti);
        if let Some(s) = secret_ref {
            claims = claims.with_secret(s);
        }
        tokens.issue(&claims).map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?
    };
    let mut metadata = obj.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    metadata.insert("name".into(), json!(name));
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("creationTimestamp".into(), json!(rfc3339(now)));
    metadata.retain(|_, v| !v.is_null());
    let mut spec = Map::new();
    spec.insert("audiences".into(), json!(audiences));
    spec.insert("expirationSeconds".into(), json!(expiration));
    if let Some(r) = obj.get("spec").and_then(|s| s.get("boundObjectRef")).filter(|r| !r.is_null()) {
        spec.insert("boundObjectRef".into(), r.clone());
    }
    let out = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "token": token,
            "expirationTimestamp": rfc3339(now + Duration::seconds(expiration)),
        },
    });
    Ok(Reply { code: StatusCode::CREATED, body: out, warnings })
}

/// Decode the body like a create (JSON, YAML or protobuf; unknown fields per
/// `fieldValidation`). The status a client sends is dropped first (clients send an empty
/// one, which the typed model cannot hold); the namespace must match the URL's.
fn decode_token_request(
    def: &ResourceDef,
    params: &Params,
    body: &Bytes,
    content_type: &str,
    url_namespace: &str,
) -> Result<(Value, Vec<String>), ApiError> {
    let mode = params.field_validation()?;
    let mut raw = rest::decode_body(def, body, content_type)?;
    if let Some(m) = raw.as_object_mut() {
        m.remove("status");
    }
    let json_body = content_type.is_empty() || content_type == "application/json";
    let dups = if json_body { rest::duplicate_fields(body) } else { Vec::new() };
    let (mut obj, warnings) = rest::typed_check(def, &raw, mode, &dups)?;
    let in_body = meta::namespace(&obj).to_string();
    if in_body.is_empty() {
        meta::meta_mut(&mut obj).insert("namespace".into(), json!(url_namespace));
    } else if in_body != url_namespace {
        return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        ));
    }
    Ok((obj, warnings))
}

async fn read_object(
    state: &Arc<AppState>,
    def: &ResourceDef,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, ApiError> {
    if name.is_empty() {
        return Ok(None);
    }
    let kv =
        state.storage.get(&def.key(Some(namespace), name)).await.map_err(|e| rest::map_storage_error(def, name, e))?;
    kv.map(|kv| meta::from_stored(&kv)).transpose()
}

// ---------------------------------------------------------------------------------------
// OIDC discovery and legacy-token tracking
// ---------------------------------------------------------------------------------------

fn discovery_response(body: Vec<u8>, content_type: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={DISCOVERY_MAX_AGE_SECONDS}")) {
        r.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    r
}

/// GET `/.well-known/openid-configuration` (None: discovery is not served).
pub fn openid_configuration_response(state: &AppState) -> Option<Response> {
    let tokens = state.security.service_accounts.as_ref()?;
    let body = tokens.openid_configuration()?;
    Some(discovery_response(body.into_bytes(), "application/json"))
}

/// GET `/openid/v1/jwks` (None: discovery is not served).
pub fn jwks_response(state: &AppState) -> Option<Response> {
    let tokens = state.security.service_accounts.as_ref()?;
    if !discovery_enabled(tokens.issuer()) {
        return None;
    }
    let body = serde_json::to_vec(&tokens.jwks()).unwrap_or_default();
    Some(discovery_response(body, "application/jwk-set+json"))
}

/// Create the ConfigMap `kube-system/kube-apiserver-legacy-service-account-token-tracking`
/// (`data.since` = today) unless it exists.
pub async fn ensure_legacy_token_tracking(state: &Arc<AppState>, now: DateTime<Utc>) -> anyhow::Result<()> {
    let def = core_def(&state.registry, "configmaps")?;
    if state.storage.get(&def.key(Some("kube-system"), LEGACY_TOKEN_TRACKING_CONFIGMAP)).await?.is_some() {
        return Ok(());
    }
    let user =
        UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() };
    let info = RequestInfo {
        is_resource_request: true,
        verb: "create".into(),
        api_version: "v1".into(),
        resource: "configmaps".into(),
        namespace: "kube-system".into(),
        ..Default::default()
    };
    let call = Call { state, def: &def, info: &info, user: &user, params: Params::default(), out: Default::default() };
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": LEGACY_TOKEN_TRACKING_CONFIGMAP, "namespace": "kube-system"},
        "data": {LEGACY_TOKEN_TRACKING_SINCE_KEY: now.format("%Y-%m-%d").to_string()},
    });
    match rest::create(&call, &Bytes::from(body.to_string()), "application/json").await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => anyhow::bail!("creating the legacy token tracking ConfigMap: {e}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::authn::AuthnChain;
    use crate::authz::{Attributes, Authorizer, Verdict};
    use crate::storage::sqlite::SqliteStorage;
    use crate::Security;
    use chrono::TimeZone as _;
    use tower::ServiceExt as _;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
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
            assert_eq!(audiences_for(&token, &api, &requested), want, "{what}");
        }
        // An apiserver without audiences accepts anything (with no audiences).
        assert_eq!(audiences_for(&strings(&["x"]), &[], &strings(&["y"])), Ok(vec![]));
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
        let sa = obj("sa-uid", None);
        let secret = obj("secret-uid", None);
        let just_deleted = "2023-11-14T22:13:00Z"; // 20 s before now
        let long_deleted = "2023-11-14T22:00:00Z";
        let not_found = || Err::<(), String>("serviceaccounts \"sa\" not found".into());
        let invalidated = || Err::<(), String>(TOKEN_INVALIDATED.into());
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
            (
                "pod bound",
                BoundClaims { pod: Some(ObjectRef::new("p", "u")), ..base.clone() },
                Some(sa.clone()),
                None,
                now,
                invalidated(),
            ),
            (
                "node bound",
                BoundClaims { node: Some(ObjectRef::new("n", "u")), ..base.clone() },
                Some(sa.clone()),
                None,
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
        for (what, claims, sa, secret, now, want) in cases {
            let got = check_bound(&claims, sa.as_ref(), secret.as_ref(), now);
            assert_eq!(got.as_ref().map(|_| ()).map_err(Clone::clone), want, "{what}");
            if let Ok(u) = got {
                assert_eq!(u.name, "system:serviceaccount:ns:sa", "{what}");
                assert_eq!(u.uid, "sa-uid", "{what}");
                assert_eq!(u.extra.get(CREDENTIAL_ID_EXTRA), Some(&strings(&["JTI=jti-1"])), "{what}");
            }
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
        let invalidated = || Err::<(), String>(LEGACY_TOKEN_INVALIDATED.into());
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
            assert_eq!(got.as_ref().map(|_| ()).map_err(Clone::clone), want, "{what}");
            if let Ok(u) = got {
                assert_eq!(u.name, "system:serviceaccount:ns:sa");
                assert!(u.extra.is_empty(), "legacy tokens carry no credential id");
            }
        }
        assert_eq!(legacy_invalidated(&claims, &good), None);
        let marked = legacy_secret(token, t, json!({LEGACY_TOKEN_INVALID_SINCE_LABEL: "2023-01-01"}), false);
        assert_eq!(
            legacy_invalidated(&claims, &marked).unwrap(),
            "the token in secret ns/sa-token for service account ns/sa has been marked invalid. Use tokens from the TokenRequest API or manually created secret-based tokens, or remove the 'kubernetes.io/legacy-token-invalid-since' label from the secret to temporarily allow use of this token"
        );
        let empty_label = legacy_secret(token, t, json!({LEGACY_TOKEN_INVALID_SINCE_LABEL: ""}), false);
        assert_eq!(legacy_invalidated(&claims, &empty_label), None);
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

    #[test]
    fn token_request_validation() {
        assert!(validate_token_request(600).is_empty());
        assert!(validate_token_request(3600).is_empty());
        assert!(validate_token_request(1 << 32).is_empty());
        let cases = [
            (599, "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"),
            (-1, "spec.expirationSeconds: Invalid value: -1: may not specify a duration less than 10 minutes"),
            ((1 << 32) + 1, "spec.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds"),
        ];
        for (exp, want) in cases {
            let errs = validate_token_request(exp);
            assert_eq!(errs.len(), 1, "{exp}");
            assert_eq!(errs[0].render(), want, "{exp}");
        }
    }

    #[test]
    fn bound_object_kinds() {
        assert_eq!(bound_kind("v1", "Secret").unwrap(), BoundKind::Secret);
        let rejected = [
            ("v1", "Pod", "cannot bind token to object of type /v1, Kind=Pod"),
            ("v1", "Node", "cannot bind token to object of type /v1, Kind=Node"),
            ("v1", "ConfigMap", "cannot bind token to object of type /v1, Kind=ConfigMap"),
            ("apps/v1", "Secret", "cannot bind token to object of type apps/v1, Kind=Secret"),
            ("a/b/c", "Thing", "cannot bind token to object of type /, Kind=Thing"),
        ];
        for (api_version, kind, want) in rejected {
            match bound_kind(api_version, kind) {
                Err(ApiError::BadRequest(m)) => assert_eq!(m, want),
                other => panic!("{api_version} {kind}: {other:?}"),
            }
        }
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
            assert_eq!(validate_options(&issuers, max), want.map_err(str::to_string), "{issuers:?} {max:?}");
        }
        for (iss, want) in [
            (DEFAULT_ISSUER, true),
            ("https://issuer.example/path", true),
            ("http://insecure", false),
            ("https://", false),
            ("https://a?b=c", false),
            ("https://a#frag", false),
            ("kubernetes/serviceaccount", false),
        ] {
            assert_eq!(discovery_enabled(iss), want, "{iss}");
        }
    }

    // ------------------------------------------------------------------ handler tests

    struct AllowAll;

    #[async_trait::async_trait]
    impl Authorizer for AllowAll {
        async fn authorize(&self, _attrs: &Attributes<'_>) -> Verdict {
            Verdict::allow("")
        }
    }

    struct Env {
        state: Arc<AppState>,
        tokens: Arc<ServiceAccountTokens>,
        authn: ServiceAccountAuthenticator,
        signing_pem: String,
    }

    async fn env_with(max: Option<std::time::Duration>) -> Env {
        let pair = kustos_ca::generate_sa_keypair().unwrap();
        let tokens = Arc::new(
            ServiceAccountTokens::new(
                strings(&[DEFAULT_ISSUER, "https://old-issuer.example"]),
                &pair.private_key_pem,
                &pair.public_key_pem,
                &[],
                vec![],
                max,
                "127.0.0.1:6443",
            )
            .unwrap(),
        );
        let (store, rbac) = crate::authz::rbac::cache::install(Arc::new(SqliteStorage::open_in_memory().unwrap()));
        let authenticator = ServiceAccountAuthenticator::new(tokens.clone(), store.clone()).unwrap();
        let chain = AuthnChain::from_parts(
            None,
            vec![Arc::new(ServiceAccountAuthenticator::new(tokens.clone(), store.clone()).unwrap())],
            true,
        )
        .with_api_audiences(tokens.api_audiences().to_vec());
        let security = Security {
            authn: Arc::new(chain),
            authz: Arc::new(AllowAll),
            rbac,
            service_accounts: Some(tokens.clone()),
        };
        let state = AppState::new(store, "127.0.0.1:6443".into(), security);
        crate::bootstrap(&state).await.unwrap();
        Env { state, tokens, authn: authenticator, signing_pem: pair.private_key_pem }
    }

    async fn env() -> Env {
        env_with(None).await
    }

    fn admin() -> UserInfo {
        UserInfo { name: "admin".into(), groups: vec!["system:masters".into()], ..Default::default() }
    }

    impl Env {
        async fn create(&self, resource: &str, ns: &str, body: Value) -> Value {
            let def = self.state.registry.find("", "v1", resource).unwrap();
            let info = RequestInfo {
                is_resource_request: true,
                verb: "create".into(),
                api_version: "v1".into(),
                resource: resource.into(),
                namespace: ns.into(),
                ..Default::default()
            };
            let user = admin();
            let call = Call {
                state: &self.state,
                def,
                info: &info,
                user: &user,
                params: Params::default(),
                out: Default::default(),
            };
            rest::create(&call, &Bytes::from(body.to_string()), "application/json").await.unwrap().body
        }

        async fn namespace(&self, name: &str) {
            self.create("namespaces", "", json!({"metadata": {"name": name}})).await;
        }

        async fn service_account(&self, ns: &str, name: &str) -> Value {
            self.create("serviceaccounts", ns, json!({"metadata": {"name": name}})).await
        }

        async fn remove(&self, resource: &str, ns: &str, name: &str) {
            let def = self.state.registry.find("", "v1", resource).unwrap();
            let key = def.key(Some(ns), name);
            let kv = self.state.storage.get(&key).await.unwrap().unwrap();
            self.state.storage.delete(&key, kv.mod_rev).await.unwrap();
        }

        async fn stored(&self, resource: &str, ns: &str, name: &str) -> Option<KeyValue> {
            let def = self.state.registry.find("", "v1", resource).unwrap();
            self.state.storage.get(&def.key(Some(ns), name)).await.unwrap()
        }

        async fn request_token(&self, ns: &str, sa: &str, query: &str, body: Value) -> Result<Reply, ApiError> {
            let def = self.state.registry.find("", "v1", "serviceaccounts").unwrap();
            let info = RequestInfo {
                is_resource_request: true,
                verb: "create".into(),
                api_version: "v1".into(),
                resource: "serviceaccounts".into(),
                subresource: "token".into(),
                namespace: ns.into(),
                name: sa.into(),
                ..Default::default()
            };
            let user = admin();
            let call = Call {
                state: &self.state,
                def,
                info: &info,
                user: &user,
                params: Params::parse(Some(query)),
                out: Default::default(),
            };
            token_request(&call, &Bytes::from(body.to_string()), "application/json").await
        }

        async fn token(&self, ns: &str, sa: &str, spec: Value) -> String {
            let r = self
                .request_token(
                    ns,
                    sa,
                    "",
                    json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "spec": spec}),
                )
                .await
                .unwrap();
            r.body["status"]["token"].as_str().unwrap().to_string()
        }

        async fn check(&self, token: &str, audiences: &[&str]) -> TokenResult {
            self.authn.authenticate_token(token, &strings(audiences)).await
        }
    }

    fn invalid(r: TokenResult) -> String {
        match r {
            TokenResult::Invalid(reason) => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn authenticated(r: TokenResult) -> (UserInfo, Vec<String>) {
        match r {
            TokenResult::Authenticated { user, audiences } => (user, audiences),
            other => panic!("expected Authenticated, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn token_request_issues_bound_tokens() {
        let e = env().await;
        e.namespace("team").await;
        let sa = e.service_account("team", "builder").await;
        let before = Utc::now().timestamp();
        let r = e
            .request_token("team", "builder", "", json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": ["x"], "expirationSeconds": 1200}}))
            .await
            .unwrap();
        assert_eq!(r.code, StatusCode::CREATED);
        assert!(r.warnings.is_empty());
        let b = &r.body;
        assert_eq!(b["kind"], "TokenRequest");
        assert_eq!(b["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(b["metadata"]["name"], "builder");
        assert_eq!(b["metadata"]["namespace"], "team");
        assert!(b["metadata"]["creationTimestamp"].is_string());
        assert_eq!(b["spec"], json!({"audiences": ["x"], "expirationSeconds": 1200}));
        let token = b["status"]["token"].as_str().unwrap();
        let expires = DateTime::parse_from_rfc3339(b["status"]["expirationTimestamp"].as_str().unwrap()).unwrap();

        let claims = BoundClaims::from_claims(&jwt::verify(token, e.tokens.verification_keys()).unwrap()).unwrap();
        assert_eq!(claims.issuer, DEFAULT_ISSUER);
        assert_eq!(claims.subject, "system:serviceaccount:team:builder");
        assert_eq!(claims.audiences, ["x"]);
        assert_eq!(claims.service_account, ObjectRef::new("builder", meta::uid(&sa)));
        let iat = claims.issued_at.unwrap();
        assert!(iat >= before && iat <= Utc::now().timestamp());
        assert_eq!(claims.expiry, Some(iat + 1200));
        assert_eq!(expires.timestamp(), iat + 1200);
        assert!(uuid::Uuid::parse_str(&claims.jti).is_ok());
        let (header, _) = jwt::decode_unverified(token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(e.tokens.signing_key().public_key().key_id()));

        let (user, auds) = authenticated(e.check(token, &["x"]).await);
        assert_eq!(auds, ["x"]);
        assert_eq!(user.name, "system:serviceaccount:team:builder");
        assert_eq!(user.uid, meta::uid(&sa));
        assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:team"]);
        assert_eq!(user.extra[CREDENTIAL_ID_EXTRA], [format!("JTI={}", claims.jti)]);
        // Not for the API: the apiserver's audiences do not include x.
        assert!(invalid(e.check(token, &[]).await).starts_with("token audiences [\"x\"] is invalid"));

        // Defaults: the API audiences, one hour. A status sent along is ignored.
        let r = e.request_token("team", "builder", "", json!({"spec": {}, "status": {"token": "mine"}})).await.unwrap();
        assert_ne!(r.body["status"]["token"], "mine");
        assert_eq!(
            r.body["spec"],
            json!({"audiences": [DEFAULT_ISSUER, "https://old-issuer.example"], "expirationSeconds": 3600})
        );
        let token = r.body["status"]["token"].as_str().unwrap();
        let (_, auds) = authenticated(e.check(token, &[]).await);
        assert_eq!(auds, [DEFAULT_ISSUER, "https://old-issuer.example"]);

        // Deleting the service account revokes its tokens; a new one of the same name does
        // not bring them back.
        e.remove("serviceaccounts", "team", "builder").await;
        assert_eq!(invalid(e.check(token, &[]).await), "serviceaccounts \"builder\" not found");
        let again = e.service_account("team", "builder").await;
        assert_eq!(
            invalid(e.check(token, &[]).await),
            format!("service account UID ({}) does not match claim ({})", meta::uid(&again), meta::uid(&sa))
        );
    }

    #[tokio::test]
    async fn secret_bound_tokens_die_with_the_secret() {
        let e = env().await;
        e.namespace("team").await;
        e.service_account("team", "builder").await;
        let secret = e.create("secrets", "team", json!({"metadata": {"name": "anchor"}})).await;
        let uid = meta::uid(&secret).to_string();
        let r = e
            .request_token("team", "builder", "", json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "anchor", "uid": uid}}}))
            .await
            .unwrap();
        assert_eq!(r.body["spec"]["boundObjectRef"]["name"], "anchor");
        let token = r.body["status"]["token"].as_str().unwrap().to_string();
        let claims = BoundClaims::from_claims(&jwt::decode_unverified(&token).unwrap().1).unwrap();
        assert_eq!(claims.secret, Some(ObjectRef::new("anchor", &uid)));
        authenticated(e.check(&token, &[]).await);
        // Without a uid in the reference, the current one is bound.
        let token2 = e
            .token(
                "team",
                "builder",
                json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "anchor"}}),
            )
            .await;
        authenticated(e.check(&token2, &[]).await);

        e.remove("secrets", "team", "anchor").await;
        assert_eq!(invalid(e.check(&token, &[]).await), TOKEN_INVALIDATED);
        let recreated = e.create("secrets", "team", json!({"metadata": {"name": "anchor"}})).await;
        assert_eq!(
            invalid(e.check(&token, &[]).await),
            format!("secret UID ({}) does not match service account secret ref claim ({uid})", meta::uid(&recreated))
        );
    }

    #[tokio::test]
    async fn token_request_errors() {
        let e = env().await;
        e.namespace("team").await;
        e.service_account("team", "builder").await;
        e.create("secrets", "team", json!({"metadata": {"name": "anchor"}})).await;
        let tr = |spec: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        let cases: Vec<(&str, &str, &str, Value, u16, &str)> = vec![
            ("too short", "builder", "", tr(json!({"expirationSeconds": 10})), 422,
             "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 10: may not specify a duration less than 10 minutes"),
            ("too long", "builder", "", tr(json!({"expirationSeconds": 4_294_967_297i64})), 422,
             "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds"),
            ("no such service account", "ghost", "", tr(json!({})), 404, "serviceaccounts \"ghost\" not found"),
            ("name mismatch", "builder", "", json!({"metadata": {"name": "other"}, "spec": {}}), 422,
             "TokenRequest.authentication.k8s.io \"builder\" is invalid: metadata.name: Invalid value: \"other\": must match the service account name if specified"),
            ("namespace mismatch", "builder", "", json!({"metadata": {"namespace": "elsewhere"}, "spec": {}}), 400,
             "the namespace of the provided object does not match the namespace sent on the request"),
            ("bound to a pod", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}})), 400,
             "cannot bind token to object of type /v1, Kind=Pod"),
            ("bound to a missing secret", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "nope"}})), 404,
             "secrets \"nope\" not found"),
            ("bound secret uid differs", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "anchor", "uid": "old"}})), 409,
             "Operation cannot be fulfilled on Secret \"anchor\": the UID in the bound object reference (old) does not match the UID in record. The object might have been deleted and then recreated"),
            ("wrong kind in body", "builder", "", json!({"apiVersion": "v1", "kind": "ServiceAccount"}), 400,
             "the API version in the data (v1) does not match the expected API version (authentication.k8s.io/v1) or the kind (ServiceAccount) does not match TokenRequest"),
            ("wrong field type", "builder", "", tr(json!({"expirationSeconds": "long"})), 400, ""),
            ("bad dryRun", "builder", "dryRun=Some", tr(json!({})), 400, ""),
        ];
        for (what, sa, query, body, code, message) in cases {
            let err =
                e.request_token("team", sa, query, body).await.err().unwrap_or_else(|| panic!("{what}: no error"));
            assert_eq!(err.code().as_u16(), code, "{what}: {err}");
            if !message.is_empty() {
                assert_eq!(err.to_string(), message, "{what}");
            }
        }
    }

    #[tokio::test]
    async fn dry_run_and_max_expiration() {
        let e = env_with(Some(std::time::Duration::from_secs(2 * 3600))).await;
        e.namespace("team").await;
        e.service_account("team", "builder").await;
        let r = e
            .request_token("team", "builder", "dryRun=All", json!({"spec": {"expirationSeconds": 1200}}))
            .await
            .unwrap();
        assert_eq!(r.code, StatusCode::CREATED);
        assert_eq!(r.body["status"]["token"], "", "dry run issues no token");
        assert!(r.body["status"]["expirationTimestamp"].is_string());
        // Dry run still checks.
        assert_eq!(
            e.request_token("team", "ghost", "dryRun=All", json!({"spec": {}})).await.err().unwrap().code(),
            404
        );

        let r =
            e.request_token("team", "builder", "", json!({"spec": {"expirationSeconds": 48 * 3600}})).await.unwrap();
        assert_eq!(r.body["spec"]["expirationSeconds"], 7200);
        assert_eq!(r.warnings, ["requested expiration of 172800 seconds shortened to 7200 seconds"]);
        let claims =
            BoundClaims::from_claims(&jwt::decode_unverified(r.body["status"]["token"].as_str().unwrap()).unwrap().1)
                .unwrap();
        assert_eq!(claims.expiry.unwrap() - claims.issued_at.unwrap(), 7200);
    }

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
            ("expired", e.tokens.issue(&expired).unwrap(), Some("service account token has expired")),
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
        assert_eq!(invalid(e.check(&token, &[]).await), LEGACY_TOKEN_INVALIDATED);
    }

    #[tokio::test]
    async fn tracking_configmap_created_once() {
        let e = env().await;
        let now = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        ensure_legacy_token_tracking(&e.state, now).await.unwrap();
        let kv = e.stored("configmaps", "kube-system", LEGACY_TOKEN_TRACKING_CONFIGMAP).await.unwrap();
        let cm: Value = serde_json::from_slice(&kv.value).unwrap();
        assert_eq!(cm["data"], json!({"since": "2024-05-01"}));
        ensure_legacy_token_tracking(&e.state, now + Duration::days(3)).await.unwrap();
        let again = e.stored("configmaps", "kube-system", LEGACY_TOKEN_TRACKING_CONFIGMAP).await.unwrap();
        assert_eq!(again.mod_rev, kv.mod_rev);
    }

    async fn get(state: &Arc<AppState>, path: &str) -> (u16, Option<String>, Option<String>, Value) {
        let req = http::Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
        let resp = crate::router(state.clone()).oneshot(req).await.unwrap();
        let code = resp.status().as_u16();
        let h = |n: header::HeaderName| resp.headers().get(n).map(|v| v.to_str().unwrap().to_string());
        let (ct, cc) = (h(header::CONTENT_TYPE), h(header::CACHE_CONTROL));
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (code, ct, cc, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn oidc_discovery_documents() {
        let e = env().await;
        let (code, ct, cc, body) = get(&e.state, OPENID_CONFIG_PATH).await;
        assert_eq!(code, 200);
        assert_eq!(ct.as_deref(), Some("application/json"));
        assert_eq!(cc.as_deref(), Some("public, max-age=3600"));
        assert_eq!(
            body,
            json!({
                "issuer": DEFAULT_ISSUER,
                "jwks_uri": "https://127.0.0.1:6443/openid/v1/jwks",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"],
            })
        );
        let raw = e.tokens.openid_configuration().unwrap();
        assert!(raw.starts_with("{\"issuer\":"), "{raw}");
        let (code, ct, _, body) = get(&e.state, JWKS_PATH).await;
        assert_eq!(code, 200);
        assert_eq!(ct.as_deref(), Some("application/jwk-set+json"));
        let kid = e.tokens.signing_key().public_key().key_id();
        assert_eq!(body["keys"][0]["kid"], kid);
        assert_eq!(body["keys"][0]["alg"], "ES256");
        assert!(body["keys"][0].get("d").is_none());

        // Not served when the issuer is not an https URL.
        let mut e2 = env().await;
        let pair = kustos_ca::generate_sa_keypair().unwrap();
        let plain = ServiceAccountTokens::new(
            strings(&["kubernetes/serviceaccount-issuer"]),
            &pair.private_key_pem,
            &pair.public_key_pem,
            &[],
            vec![],
            None,
            "127.0.0.1:6443",
        )
        .unwrap();
        assert!(plain.openid_configuration().is_none());
        let mut security = e2.state.security.clone();
        security.service_accounts = Some(Arc::new(plain));
        e2.state = AppState::new(e2.state.storage.clone(), "127.0.0.1:6443".into(), security);
        assert_eq!(get(&e2.state, OPENID_CONFIG_PATH).await.0, 404);
        assert_eq!(get(&e2.state, JWKS_PATH).await.0, 404);
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
        assert!(jwt::verify(&old_signed, t.verification_keys()).is_ok());
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
}
