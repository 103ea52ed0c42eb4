//! The bearer-token authenticator for service-account JWTs, after upstream's
//! `pkg/serviceaccount`.
//!
//! Bound tokens (TokenRequest) must name a service account that still exists with the same
//! uid, and, when bound to a Secret, Pod or Node, that object still existing with the same uid
//! (a pod-bound token's node claim is carried into the user's extra, not checked). Legacy
//! tokens (issuer `kubernetes/serviceaccount`) must be the `data.token` of a live
//! `kubernetes.io/service-account-token` Secret; their use is recorded in the
//! `kubernetes.io/legacy-token-last-used` label (at most one write per Secret and day), and
//! the `kubernetes.io/legacy-token-invalid-since` label disables them.
//!
//! The decisions are pure functions of the claims, the stored objects and `now`
//! ([`audiences_for`], [`check_bound`], [`check_legacy`]...), failing with a [`Rejection`];
//! the authenticator only fetches objects and applies them. Tokens never reach logs or error
//! messages.
//!
//! Elsewhere: the issuer and its keys in `pki::service_account`, TokenRequest in
//! `api::serviceaccount_token`, OIDC discovery in `api::oidc`, the
//! legacy token tracking ConfigMap in [`legacy_tracking`].

pub mod legacy_tracking;

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use kustos_ca::jwt::{self, BoundClaims, JwtError, LegacyClaims, LegacyClaimsError, TimeError};
use serde_json::{json, Map, Value};

use crate::authn::{TokenAuthenticator, TokenResult, UserInfo};
use crate::meta;
use crate::pki::service_account::ServiceAccountTokens;
use crate::registry::{Registry, ResourceDef};
use crate::storage::{KeyValue, Storage};

/// Group of every service account.
pub const ALL_SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
pub use super::user::CREDENTIAL_ID_EXTRA;
/// The user extras of a pod-bound token: the pod's name and uid.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// The user extras of a token that names a Node (bound to it, or to a pod on it).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
pub const NODE_UID_EXTRA: &str = "authentication.kubernetes.io/node-uid";
/// The Secret type holding legacy tokens.
pub const SERVICE_ACCOUNT_TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Label with the day (UTC, `YYYY-MM-DD`) a legacy token was last used.
pub const LEGACY_TOKEN_LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
/// Label marking a legacy token invalid (set by the legacy token cleaner or by hand).
pub const LEGACY_TOKEN_INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";

/// Why a service-account token is refused: the reason of [`TokenResult::Invalid`].
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// The signature, the keys or the claims' form.
    #[error(transparent)]
    Jwt(#[from] JwtError),
    /// Expired, not yet valid or issued in the future.
    #[error(transparent)]
    Time(#[from] TimeError),
    /// A legacy token missing a claim.
    #[error(transparent)]
    LegacyClaims(#[from] LegacyClaimsError),
    /// No overlap of the token's audiences and the requested ones (Go's `%q` of each list).
    #[error("token audiences {token} is invalid for the target audiences {requested}")]
    Audiences { token: String, requested: String },
    #[error("serviceaccounts {0:?} not found")]
    ServiceAccountNotFound(String),
    #[error("service account {namespace}/{name} has been deleted")]
    ServiceAccountDeleted { namespace: String, name: String },
    #[error("service account UID ({stored}) does not match claim ({claimed})")]
    ServiceAccountUid { stored: String, claimed: String },
    /// A bound token whose Secret, Pod or Node is gone (or being deleted for longer than the
    /// leeway).
    #[error("service account token has been invalidated")]
    TokenInvalidated,
    #[error("secret UID ({stored}) does not match service account secret ref claim ({claimed})")]
    SecretUid { stored: String, claimed: String },
    #[error("pod UID ({stored}) does not match service account pod ref claim ({claimed})")]
    PodUid { stored: String, claimed: String },
    #[error("node UID ({stored}) does not match service account node ref claim ({claimed})")]
    NodeUid { stored: String, claimed: String },
    /// A legacy token whose Secret is gone, being deleted or not a service-account-token one.
    #[error("token has been invalidated")]
    LegacyTokenInvalidated,
    #[error("token does not match server's copy")]
    LegacyTokenMismatch,
    /// The Secret carries the invalid-since label.
    #[error(
        "the token in secret {namespace}/{secret} for service account {namespace}/{service_account} has been marked invalid. Use tokens from the TokenRequest API or manually created secret-based tokens, or remove the '{label}' label from the secret to temporarily allow use of this token",
        label = LEGACY_TOKEN_INVALID_SINCE_LABEL
    )]
    MarkedInvalid { namespace: String, secret: String, service_account: String },
    /// Reading the service account or Secret failed.
    #[error(transparent)]
    Storage(#[from] crate::storage::Error),
    #[error("stored {resource}: {source}")]
    Stored { resource: &'static str, source: serde_json::Error },
}

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
) -> Result<Vec<String>, Rejection> {
    let token_audiences = if token_audiences.is_empty() { api_audiences } else { token_audiences };
    let requested = if requested.is_empty() { api_audiences } else { requested };
    let both: Vec<String> = token_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
    if both.is_empty() && !api_audiences.is_empty() {
        return Err(Rejection::Audiences { token: quote_list(token_audiences), requested: quote_list(requested) });
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

/// The stored objects a bound token is checked against (`None` = not found): its service
/// account, and the Secret, Pod or Node it is bound to.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stored<'a> {
    pub service_account: Option<&'a Value>,
    pub secret: Option<&'a Value>,
    pub pod: Option<&'a Value>,
    /// Read only for a token bound to a Node itself (a pod-bound token's node claim is
    /// information, not a binding, as upstream).
    pub node: Option<&'a Value>,
}

/// A bound token's claims against the stored objects at `now`. Objects deleted more than the
/// leeway ago count as gone, as upstream. The user carries the credential id, and the pod's
/// and node's name and uid from the claims (`authentication.kubernetes.io/pod-name`...).
pub fn check_bound(claims: &BoundClaims, stored: &Stored<'_>, now: DateTime<Utc>) -> Result<UserInfo, Rejection> {
    let Stored { service_account, secret, pod, node } = *stored;
    claims.check_time(now)?;
    let ns = &claims.namespace;
    let sa_ref = &claims.service_account;
    let deleted_long_ago =
        |obj: &Value| deletion_time(obj).is_some_and(|t| t < now - Duration::seconds(jwt::LEEWAY_SECONDS));
    let sa = service_account
        .filter(|_| !ns.is_empty() && !sa_ref.name.is_empty())
        .ok_or_else(|| Rejection::ServiceAccountNotFound(sa_ref.name.clone()))?;
    if meta::uid(sa) != sa_ref.uid {
        return Err(Rejection::ServiceAccountUid { stored: meta::uid(sa).into(), claimed: sa_ref.uid.clone() });
    }
    if deleted_long_ago(sa) {
        return Err(Rejection::ServiceAccountDeleted { namespace: ns.clone(), name: sa_ref.name.clone() });
    }
    if let Some(secret_ref) = &claims.secret {
        let secret = secret.ok_or(Rejection::TokenInvalidated)?;
        if meta::uid(secret) != secret_ref.uid {
            return Err(Rejection::SecretUid { stored: meta::uid(secret).into(), claimed: secret_ref.uid.clone() });
        }
        if deleted_long_ago(secret) {
            return Err(Rejection::TokenInvalidated);
        }
    }
    if let Some(pod_ref) = &claims.pod {
        let pod = pod.ok_or(Rejection::TokenInvalidated)?;
        if meta::uid(pod) != pod_ref.uid {
            return Err(Rejection::PodUid { stored: meta::uid(pod).into(), claimed: pod_ref.uid.clone() });
        }
        if deleted_long_ago(pod) {
            return Err(Rejection::TokenInvalidated);
        }
    }
    if let (Some(node_ref), None) = (&claims.node, &claims.pod) {
        let node = node.ok_or(Rejection::TokenInvalidated)?;
        if meta::uid(node) != node_ref.uid {
            return Err(Rejection::NodeUid { stored: meta::uid(node).into(), claimed: node_ref.uid.clone() });
        }
        if deleted_long_ago(node) {
            return Err(Rejection::TokenInvalidated);
        }
    }
    let credential_id = (!claims.jti.is_empty()).then(|| format!("JTI={}", claims.jti));
    let mut user = service_account_user(ns, &sa_ref.name, &sa_ref.uid, credential_id);
    let mut extra = |key: &str, value: &str| {
        user.extra.insert(key.to_string(), vec![value.to_string()]);
    };
    if let Some(p) = claims.pod.as_ref().filter(|p| !p.name.is_empty() && !p.uid.is_empty()) {
        extra(POD_NAME_EXTRA, &p.name);
        extra(POD_UID_EXTRA, &p.uid);
    }
    if let Some(n) = claims.node.as_ref().filter(|n| !n.name.is_empty()) {
        extra(NODE_NAME_EXTRA, &n.name);
        if !n.uid.is_empty() {
            extra(NODE_UID_EXTRA, &n.uid);
        }
    }
    Ok(user)
}

/// The `data.token` of a Secret, decoded.
fn secret_token(secret: &Value) -> Option<Vec<u8>> {
    let b64 = secret.get("data")?.get("token")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// A legacy token against its Secret and service account (`None` = not found): the claims
/// are complete, the Secret is a live service-account-token Secret holding exactly this
/// token (or naming it as the one a key rotation replaced), and the service account exists with the claimed uid. The invalid-since label is
/// checked apart ([`legacy_invalidated`]) so that the use is recorded first.
pub fn check_legacy(
    claims: &LegacyClaims,
    token: &str,
    secret: Option<&Value>,
    service_account: Option<&Value>,
) -> Result<UserInfo, Rejection> {
    claims.check()?;
    let secret = secret.ok_or(Rejection::LegacyTokenInvalidated)?;
    if deletion_time(secret).is_some()
        || secret.get("type").and_then(Value::as_str) != Some(SERVICE_ACCOUNT_TOKEN_SECRET_TYPE)
    {
        return Err(Rejection::LegacyTokenInvalidated);
    }
    let stored = secret_token(secret).unwrap_or_default();
    // The token a signing-key rotation replaced is still this Secret's (its key verified it).
    let previous = secret.pointer("/metadata/annotations").and_then(|a| a.get(jwt::PREVIOUS_TOKEN_ANNOTATION));
    let digest = jwt::token_digest(token);
    let mut replaced =
        previous.and_then(Value::as_str).unwrap_or_default().split(',').filter_map(|e| e.split_once('='));
    if !jwt::constant_time_eq(&stored, token.as_bytes())
        && !replaced.any(|(_, d)| jwt::constant_time_eq(d.as_bytes(), digest.as_bytes()))
    {
        return Err(Rejection::LegacyTokenMismatch);
    }
    let (ns, name) = (&claims.namespace, &claims.service_account_name);
    let sa = service_account.ok_or_else(|| Rejection::ServiceAccountNotFound(name.clone()))?;
    if deletion_time(sa).is_some() {
        return Err(Rejection::ServiceAccountDeleted { namespace: ns.clone(), name: name.clone() });
    }
    if meta::uid(sa) != claims.service_account_uid {
        return Err(Rejection::ServiceAccountUid {
            stored: meta::uid(sa).into(),
            claimed: claims.service_account_uid.clone(),
        });
    }
    Ok(service_account_user(ns, name, &claims.service_account_uid, None))
}

/// The rejection of a legacy token whose Secret carries the invalid-since label.
pub fn legacy_invalidated(claims: &LegacyClaims, secret: &Value) -> Option<Rejection> {
    let labels = meta::labels(secret);
    labels.get(LEGACY_TOKEN_INVALID_SINCE_LABEL).filter(|v| !v.is_empty())?;
    Some(Rejection::MarkedInvalid {
        namespace: claims.namespace.clone(),
        secret: claims.secret_name.clone(),
        service_account: claims.service_account_name.clone(),
    })
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

/// Authenticates service-account JWTs: tokens of other issuers, and what is not a JWT, are
/// not its business.
pub struct ServiceAccountAuthenticator {
    tokens: Arc<ServiceAccountTokens>,
    store: Arc<dyn Storage>,
    service_accounts: ResourceDef,
    secrets: ResourceDef,
    pods: ResourceDef,
    nodes: ResourceDef,
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
            pods: core_def(&registry, "pods")?,
            nodes: core_def(&registry, "nodes")?,
        })
    }

    async fn read(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(KeyValue, Value)>, Rejection> {
        if (def.namespaced && namespace.is_empty()) || name.is_empty() {
            return Ok(None);
        }
        let namespace = def.namespaced.then_some(namespace);
        let kv = self.store.get(&def.key(namespace, name)).await?;
        match kv {
            None => Ok(None),
            Some(kv) => {
                let obj = serde_json::from_slice(&kv.value)
                    .map_err(|source| Rejection::Stored { resource: def.resource, source })?;
                Ok(Some((kv, obj)))
            }
        }
    }

    async fn authenticate_bound(&self, claims: &Map<String, Value>, now: DateTime<Utc>) -> Result<UserInfo, Rejection> {
        let claims = BoundClaims::from_claims(claims)?;
        self.check_claims(&claims, now).await
    }

    /// Bound claims against the stored objects they name.
    async fn check_claims(&self, claims: &BoundClaims, now: DateTime<Utc>) -> Result<UserInfo, Rejection> {
        let ns = &claims.namespace;
        let sa = self.read(&self.service_accounts, ns, &claims.service_account.name).await?;
        let secret = match &claims.secret {
            Some(r) => self.read(&self.secrets, ns, &r.name).await?,
            None => None,
        };
        let pod = match &claims.pod {
            Some(r) => self.read(&self.pods, ns, &r.name).await?,
            None => None,
        };
        let node = match (&claims.node, &claims.pod) {
            (Some(r), None) => self.read(&self.nodes, "", &r.name).await?,
            _ => None,
        };
        let stored = Stored {
            service_account: sa.as_ref().map(|(_, o)| o),
            secret: secret.as_ref().map(|(_, o)| o),
            pod: pod.as_ref().map(|(_, o)| o),
            node: node.as_ref().map(|(_, o)| o),
        };
        check_bound(claims, &stored, now)
    }

    async fn authenticate_legacy(
        &self,
        token: &str,
        claims: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<UserInfo, Rejection> {
        let claims = LegacyClaims::from_claims(claims)?;
        claims.check()?;
        let ns = &claims.namespace;
        let secret = self.read(&self.secrets, ns, &claims.secret_name).await?;
        let sa = self.read(&self.service_accounts, ns, &claims.service_account_name).await?;
        let user = check_legacy(&claims, token, secret.as_ref().map(|(_, o)| o), sa.as_ref().map(|(_, o)| o))?;
        let Some((kv, secret)) = secret else { return Err(Rejection::LegacyTokenInvalidated) };
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

/// Pod certificates are bound as pod-bound tokens are: the service account and the pod.
#[async_trait::async_trait]
impl crate::authn::pod_certificate::PodBindings for ServiceAccountAuthenticator {
    async fn pod_user(
        &self,
        claims: &crate::authn::pod_certificate::PodClaims,
        now: DateTime<Utc>,
    ) -> Result<UserInfo, String> {
        let bound = crate::authn::pod_certificate::bound_claims(&claims.identity);
        let mut user = self.check_claims(&bound, now).await.map_err(|e| e.to_string())?;
        user.extra.insert(CREDENTIAL_ID_EXTRA.to_string(), vec![claims.credential_id.clone()]);
        Ok(user)
    }
}

#[async_trait::async_trait]
impl TokenAuthenticator for ServiceAccountAuthenticator {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let now = Utc::now();
        let Some(issuer) = jwt::unverified_issuer(token) else { return TokenResult::NotMine };
        let legacy = issuer == jwt::LEGACY_ISSUER;
        if !legacy && !self.tokens.issuers().contains(&issuer) {
            return TokenResult::NotMine;
        }
        let claims = match jwt::verify(token, &self.tokens.verification_keys_for(token).await) {
            Ok(c) => c,
            Err(JwtError::Malformed(_)) => return TokenResult::NotMine,
            Err(e) => return TokenResult::Invalid(e.to_string()),
        };
        let token_audiences = match BoundClaims::from_claims(&claims) {
            Ok(c) => c.audiences,
            Err(e) => return TokenResult::Invalid(e.to_string()),
        };
        let valid_for = match audiences_for(&token_audiences, self.tokens.api_audiences(), audiences) {
            Ok(a) => a,
            Err(e) => return TokenResult::Invalid(e.to_string()),
        };
        let user = if legacy {
            self.authenticate_legacy(token, &claims, now).await
        } else {
            self.authenticate_bound(&claims, now).await
        };
        match user {
            Ok(user) => TokenResult::Authenticated { user, audiences: valid_for },
            Err(reason) => TokenResult::Invalid(reason.to_string()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
