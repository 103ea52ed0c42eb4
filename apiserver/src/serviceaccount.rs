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

use crate::authn::{TokenAuthenticator, TokenResult, UserInfo};
use crate::error::{ApiError, FieldError};
use crate::meta;
use crate::registry::{typed_roundtrip, Registry, ResourceDef, Strategy};
use crate::request_info::RequestInfo;
use crate::rest::{self, Call, Params, Reply};
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
    claims.check()?;
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
        claims.check()?;
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
    fn roundtrip(&self, obj: &Value) -> Result<Value, String> {
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
    let (obj, mut warnings) = crate::reviews::decode(&def, &c.params, body, content_type, &c.info.namespace)?;
    let (namespace, name) = (c.info.namespace.as_str(), c.info.name.as_str());
    let req: authnv1::TokenRequest = serde_json::from_value(obj.clone()).map_err(|e| {
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
