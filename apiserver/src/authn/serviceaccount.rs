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
//! `registry::core::serviceaccount_token`, OIDC discovery in `http::oidc`, the
//! legacy token tracking ConfigMap in [`legacy_tracking`].

#[cfg(test)]
pub(crate) mod fixture;
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
/// The user extra naming the credential (`JTI=<jti>` for bound tokens).
pub const CREDENTIAL_ID_EXTRA: &str = "authentication.kubernetes.io/credential-id";
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
        check_bound(&claims, &stored, now)
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

#[async_trait::async_trait]
impl TokenAuthenticator for ServiceAccountAuthenticator {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let now = Utc::now();
        let Some(issuer) = jwt::unverified_issuer(token) else { return TokenResult::NotMine };
        let legacy = issuer == jwt::LEGACY_ISSUER;
        if !legacy && !self.tokens.issuers().contains(&issuer) {
            return TokenResult::NotMine;
        }
        let claims = match jwt::verify(token, &self.tokens.verification_keys()) {
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::type_complexity)]
    use chrono::TimeZone as _;
    use kustos_ca::jwt::{ObjectRef, SigningKey};

    use super::fixture::{authenticated, env, invalid, strings};
    use super::*;
    use crate::pki::service_account::DEFAULT_ISSUER;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).unwrap()
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
            assert_eq!(audiences_for(&token, &api, &requested).map_err(|e| e.to_string()), want, "{what}");
        }
        // An apiserver without audiences accepts anything (with no audiences).
        assert_eq!(audiences_for(&strings(&["x"]), &[], &strings(&["y"])).unwrap(), Vec::<String>::new());
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
        let pod_bound = base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", "node-uid")));
        let node_bound = base.clone().with_node(ObjectRef::new("n1", "node-uid"));
        let sa = obj("sa-uid", None);
        let secret = obj("secret-uid", None);
        let just_deleted = "2023-11-14T22:13:00Z"; // 20 s before now
        let long_deleted = "2023-11-14T22:00:00Z";
        let not_found = || Err::<(), String>("serviceaccounts \"sa\" not found".into());
        let invalidated = || Err::<(), String>(Rejection::TokenInvalidated.to_string());
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
            ("pod bound", pod_bound.clone(), Some(sa.clone()), Some(obj("pod-uid", None)), now, Ok(())),
            ("pod gone", pod_bound.clone(), Some(sa.clone()), None, now, invalidated()),
            (
                "pod recreated",
                pod_bound.clone(),
                Some(sa.clone()),
                Some(obj("new", None)),
                now,
                Err("pod UID (new) does not match service account pod ref claim (pod-uid)".into()),
            ),
            (
                "pod deleted long ago",
                pod_bound.clone(),
                Some(sa.clone()),
                Some(obj("pod-uid", Some(long_deleted))),
                now,
                invalidated(),
            ),
            (
                "pod deletion within the leeway",
                pod_bound.clone(),
                Some(sa.clone()),
                Some(obj("pod-uid", Some(just_deleted))),
                now,
                Ok(()),
            ),
            ("node bound", node_bound.clone(), Some(sa.clone()), Some(obj("node-uid", None)), now, Ok(())),
            ("node gone", node_bound.clone(), Some(sa.clone()), None, now, invalidated()),
            (
                "node replaced",
                node_bound.clone(),
                Some(sa.clone()),
                Some(obj("new", None)),
                now,
                Err("node UID (new) does not match service account node ref claim (node-uid)".into()),
            ),
            (
                "node deleted long ago",
                node_bound.clone(),
                Some(sa.clone()),
                Some(obj("node-uid", Some(long_deleted))),
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
        for (what, claims, sa, bound_to, now, want) in cases {
            // The bound object stands for whichever kind the claims name.
            let b = bound_to.as_ref();
            let stored = Stored { service_account: sa.as_ref(), secret: b, pod: b, node: b };
            let got = check_bound(&claims, &stored, now);
            assert_eq!(got.as_ref().map(|_| ()).map_err(ToString::to_string), want, "{what}");
            if let Ok(u) = got {
                assert_eq!(u.name, "system:serviceaccount:ns:sa", "{what}");
                assert_eq!(u.uid, "sa-uid", "{what}");
                assert_eq!(u.extra.get(CREDENTIAL_ID_EXTRA), Some(&strings(&["JTI=jti-1"])), "{what}");
            }
        }
    }

    #[test]
    fn bound_token_user_extra() {
        let now = at(1_700_000_000);
        let base = BoundClaims::new(DEFAULT_ISSUER, "ns", ObjectRef::new("sa", "sa-uid"), vec![], now, 3600, "j1");
        let sa = obj("sa-uid", None);
        let extra = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<String>> {
            pairs.iter().map(|(k, v)| (k.to_string(), vec![v.to_string()])).collect()
        };
        let cases: Vec<(&str, BoundClaims, Value, BTreeMap<String, Vec<String>>)> = vec![
            ("unbound", base.clone(), json!(null), extra(&[(CREDENTIAL_ID_EXTRA, "JTI=j1")])),
            ("no jti: no credential id", BoundClaims { jti: String::new(), ..base.clone() }, json!(null), extra(&[])),
            (
                "pod on a node",
                base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", "node-uid"))),
                obj("pod-uid", None),
                extra(&[
                    (CREDENTIAL_ID_EXTRA, "JTI=j1"),
                    (POD_NAME_EXTRA, "p"),
                    (POD_UID_EXTRA, "pod-uid"),
                    (NODE_NAME_EXTRA, "n1"),
                    (NODE_UID_EXTRA, "node-uid"),
                ]),
            ),
            (
                "pod on a node that did not exist: name only",
                base.clone().with_pod(ObjectRef::new("p", "pod-uid"), Some(ObjectRef::new("n1", ""))),
                obj("pod-uid", None),
                extra(&[
                    (CREDENTIAL_ID_EXTRA, "JTI=j1"),
                    (POD_NAME_EXTRA, "p"),
                    (POD_UID_EXTRA, "pod-uid"),
                    (NODE_NAME_EXTRA, "n1"),
                ]),
            ),
            (
                "pod not scheduled",
                base.clone().with_pod(ObjectRef::new("p", "pod-uid"), None),
                obj("pod-uid", None),
                extra(&[(CREDENTIAL_ID_EXTRA, "JTI=j1"), (POD_NAME_EXTRA, "p"), (POD_UID_EXTRA, "pod-uid")]),
            ),
            (
                "node",
                base.clone().with_node(ObjectRef::new("n1", "node-uid")),
                obj("node-uid", None),
                extra(&[(CREDENTIAL_ID_EXTRA, "JTI=j1"), (NODE_NAME_EXTRA, "n1"), (NODE_UID_EXTRA, "node-uid")]),
            ),
        ];
        for (what, claims, bound_to, want) in cases {
            let b = Some(&bound_to).filter(|v| !v.is_null());
            let stored = Stored { service_account: Some(&sa), secret: b, pod: b, node: b };
            assert_eq!(check_bound(&claims, &stored, now).unwrap().extra, want, "{what}");
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
        let invalidated = || Err::<(), String>(Rejection::LegacyTokenInvalidated.to_string());
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
            assert_eq!(got.as_ref().map(|_| ()).map_err(ToString::to_string), want, "{what}");
            if let Ok(u) = got {
                assert_eq!(u.name, "system:serviceaccount:ns:sa");
                assert!(u.extra.is_empty(), "legacy tokens carry no credential id");
            }
        }
        assert!(legacy_invalidated(&claims, &good).is_none());
        let marked = legacy_secret(token, t, json!({LEGACY_TOKEN_INVALID_SINCE_LABEL: "2023-01-01"}), false);
        assert_eq!(
            legacy_invalidated(&claims, &marked).unwrap().to_string(),
            "the token in secret ns/sa-token for service account ns/sa has been marked invalid. Use tokens from the TokenRequest API or manually created secret-based tokens, or remove the 'kubernetes.io/legacy-token-invalid-since' label from the secret to temporarily allow use of this token"
        );
        let empty_label = legacy_secret(token, t, json!({LEGACY_TOKEN_INVALID_SINCE_LABEL: ""}), false);
        assert!(legacy_invalidated(&claims, &empty_label).is_none());
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
        assert_eq!(invalid(e.check(&token, &[]).await), Rejection::LegacyTokenInvalidated.to_string());
    }
}
