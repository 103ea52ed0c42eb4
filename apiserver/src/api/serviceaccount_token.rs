//! TokenRequest: POST `serviceaccounts/<name>/token`, the `token` subresource of a
//! ServiceAccount (upstream's `pkg/registry/core/serviceaccount/storage/token.go`, 1.34). The
//! request passes admission (NodeRestriction holds a node to its own pods), is checked
//! ([`validate_token_request`], [`bound_kind`], [`check_service_account_uid`]: a
//! `metadata.uid` must be the service account's), the service account and the bound Secret,
//! Pod (which must run as that service account) or Node are read, and a token is signed by
//! the issuer (`pki::service_account`) with a fresh `jti`. A pod-bound token also names the
//! pod's Node (`kubernetes.io.node`: its name, and its uid when it exists). Nothing is
//! stored; tokens never reach logs or errors.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use http::StatusCode;
use k8s_openapi::api::authentication::v1 as authnv1;
use kustos_ca::jwt::{BoundClaims, ObjectRef};
use serde_json::{json, Map, Value};

use crate::admission::{self, Attributes, Operation, Phase};
use crate::api::rest::{self, Call, Params, Reply};
use crate::error::{ApiError, FieldError};
use crate::meta;
use crate::pki::service_account::MAX_EXPIRATION_SECONDS;
use crate::registry::{typed_roundtrip, ResourceDef, Strategy};
use crate::AppState;

/// `spec.expirationSeconds` when unset.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest token lifetime a TokenRequest may ask for.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

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

/// The audit annotation naming the credential a TokenRequest issued.
pub const ISSUED_CREDENTIAL_ID: &str = "authentication.kubernetes.io/issued-credential-id";

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
    Pod,
    Node,
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

/// The kind of object a token may be bound to: a Secret, Pod or Node of the core group (any
/// version, as upstream).
pub fn bound_kind(api_version: &str, kind: &str) -> Result<BoundKind, ApiError> {
    let (group, shown) = gvk_string(api_version, kind);
    match (group.as_str(), kind) {
        ("", "Secret") => Ok(BoundKind::Secret),
        ("", "Pod") => Ok(BoundKind::Pod),
        ("", "Node") => Ok(BoundKind::Node),
        _ => Err(ApiError::BadRequest(format!("cannot bind token to object of type {shown}"))),
    }
}

/// The service account a pod runs as (the ServiceAccount admission plugin's default,
/// `default`, when the stored pod names none).
pub fn pod_service_account(pod: &Value) -> &str {
    pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("default")
}

/// The node a pod is bound to (`spec.nodeName`), empty when it is not scheduled.
pub fn pod_node_name(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default()
}

/// The TokenRequest's `metadata.uid` against the service account's, as upstream's
/// TokenRequestServiceAccountUIDValidation (on by default since 1.34): given and different
/// is a 409.
pub fn check_service_account_uid(requested: &str, sa_name: &str, sa_uid: &str) -> Result<(), ApiError> {
    if requested.is_empty() || requested == sa_uid {
        return Ok(());
    }
    Err(ApiError::conflict(
        AUTHENTICATION_GROUP,
        "TokenRequest",
        sa_name,
        &format!("the UID in the token request ({requested}) does not match the UID of the service account ({sa_uid})"),
    ))
}

/// What a token is bound to, read from the store.
#[derive(Debug, Default)]
struct Bound {
    secret: Option<ObjectRef>,
    pod: Option<ObjectRef>,
    node: Option<ObjectRef>,
}

impl Bound {
    fn apply(self, claims: BoundClaims) -> BoundClaims {
        match (self.secret, self.pod, self.node) {
            (Some(s), _, _) => claims.with_secret(s),
            (None, Some(p), node) => claims.with_pod(p, node),
            (None, None, Some(n)) => claims.with_node(n),
            (None, None, None) => claims,
        }
    }
}

/// Read the object `r` names (a Secret or Pod in `namespace`, a Node) and check it against
/// the reference: a pod must run as service account `sa_name`; a uid in the reference must be
/// the stored one. A pod-bound token also names the pod's Node (its uid when that Node exists).
async fn resolve_bound(
    c: &Call<'_>,
    namespace: &str,
    sa_name: &str,
    r: &k8s_openapi::api::authentication::v1::BoundObjectReference,
) -> Result<Bound, ApiError> {
    let kind = r.kind.as_deref().unwrap_or("");
    let api_version = r.api_version.as_deref().unwrap_or("");
    let ref_name = r.name.as_deref().unwrap_or("");
    let read = |resource: &'static str, ns: Option<&'static str>| async move {
        let Some(def) = c.state.registry.find("", "v1", resource) else { return Err(not_served()) };
        let ns = ns.map_or(namespace, |n| n);
        read_object(c.state, def, ns, ref_name).await?.ok_or_else(|| ApiError::not_found("", resource, ref_name))
    };
    let mut bound = Bound::default();
    let uid = match bound_kind(api_version, kind)? {
        BoundKind::Secret => {
            let secret = read("secrets", None).await?;
            let uid = meta::uid(&secret).to_string();
            bound.secret = Some(ObjectRef::new(ref_name, &uid));
            uid
        }
        BoundKind::Pod => {
            let pod = read("pods", None).await?;
            if pod_service_account(&pod) != sa_name {
                return Err(ApiError::BadRequest(format!(
                    "cannot bind token for serviceaccount {sa_name:?} to pod running with different serviceaccount name."
                )));
            }
            let uid = meta::uid(&pod).to_string();
            let node_name = pod_node_name(&pod);
            if !node_name.is_empty() {
                // A Node that does not exist leaves its name alone in the claims.
                let node_uid = match c.state.registry.find("", "v1", "nodes") {
                    Some(def) => read_object(c.state, def, "", node_name)
                        .await?
                        .map(|n| meta::uid(&n).to_string())
                        .unwrap_or_default(),
                    None => String::new(),
                };
                bound.node = Some(ObjectRef::new(node_name, node_uid));
            }
            bound.pod = Some(ObjectRef::new(ref_name, &uid));
            uid
        }
        BoundKind::Node => {
            let node = read("nodes", Some("")).await?;
            let uid = meta::uid(&node).to_string();
            bound.node = Some(ObjectRef::new(ref_name, &uid));
            uid
        }
    };
    if let Some(want) = r.uid.as_deref().filter(|u| !u.is_empty()) {
        if want != uid {
            return Err(ApiError::conflict("", kind, ref_name, &format!("the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated")));
        }
    }
    Ok(bound)
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

/// POST `serviceaccounts/<name>/token`: the body decoded ([`decode_token_request`]), then
/// the token made ([`create_token`]).
pub async fn token_request(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply, ApiError> {
    if c.state.security.service_accounts.is_none() {
        return Err(not_served());
    }
    let def = token_request_def();
    let dry_run = c.params.dry_run()?;
    let (obj, warnings) = decode_token_request(&def, &c.params, body, content_type, &c.info.namespace)?;
    create_token(c, obj, warnings, dry_run).await
}

/// A token for the service account `c` names, from the decoded TokenRequest `obj` (as
/// upstream's `TokenREST.Create` is given the object); `warnings` are the decoder's.
pub async fn create_token(
    c: &Call<'_>,
    obj: Value,
    mut warnings: Vec<String>,
    dry_run: bool,
) -> Result<Reply, ApiError> {
    let Some(tokens) = c.state.security.service_accounts.clone() else { return Err(not_served()) };
    let (namespace, name) = (c.info.namespace.as_str(), c.info.name.as_str());
    // The status is the server's to fill (protobuf bodies carry an empty one).
    let mut spec_only = obj.clone();
    if let Some(m) = spec_only.as_object_mut() {
        m.remove("status");
    }
    let req: authnv1::TokenRequest = serde_json::from_value(spec_only).map_err(|e| {
        ApiError::BadRequest(format!("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: {e}"))
    })?;
    // Admission (NodeRestriction) sees the request before the service account is read, as
    // upstream's create handler runs mutating admission before the registry.
    let attrs = Attributes::new(Operation::Create, c.def, c.info, c.user, Some(&obj), None);
    let services = c.state.admission_services();
    admission::chain().admit_phase(&services, &attrs, Phase::Mutating).await?;
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
    let requested_uid = req.metadata.uid.clone().unwrap_or_default();
    check_service_account_uid(&requested_uid, name, meta::uid(&sa))?;
    let now = Utc::now();
    let spec = req.spec.clone().unwrap_or_default();
    let mut audiences = spec.audiences.clone().unwrap_or_default();
    if audiences.is_empty() {
        audiences = tokens.api_audiences().to_vec();
    }
    let mut expiration = spec.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    let errs = validate_token_request(expiration);
    if !errs.is_empty() {
        return Err(ApiError::invalid(AUTHENTICATION_GROUP, "TokenRequest", "", errs));
    }
    admission::chain().admit_phase(&services, &attrs, Phase::Validating).await?;
    let bound = match &spec.bound_object_ref {
        Some(r) => resolve_bound(c, namespace, name, r).await?,
        None => Bound::default(),
    };
    if let Some(max) = tokens.max_expiration_seconds().filter(|m| *m > 0 && expiration > *m) {
        warnings.push(format!("requested expiration of {expiration} seconds shortened to {max} seconds"));
        expiration = max;
    }
    let token = if dry_run {
        String::new()
    } else {
        let sa_ref = ObjectRef::new(meta::name(&sa), meta::uid(&sa));
        let jti = uuid::Uuid::new_v4().to_string();
        let extended = tokens.extended_seconds(expiration, bound.pod.is_some(), &audiences);
        let lifetime = extended.unwrap_or(expiration);
        let mut claims =
            bound.apply(BoundClaims::new(tokens.issuer(), namespace, sa_ref, audiences.clone(), now, lifetime, &jti));
        if extended.is_some() {
            // The asked end, after which a use is reported stale; the answer shows it too.
            claims.warn_after = Some(now.timestamp() + expiration);
        }
        let token =
            tokens.issue(&claims).await.map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?;
        // As upstream (KEP-4193): the audit event of the issue names the credential, so that
        // its later uses (credential-id `JTI=<jti>`) can be traced back to it.
        crate::http::annotations::annotate(ISSUED_CREDENTIAL_ID, format!("JTI={jti}"));
        token
    };
    let mut metadata = obj.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    metadata.insert("name".into(), json!(name));
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("creationTimestamp".into(), json!(rfc3339(now)));
    if requested_uid.is_empty() {
        metadata.insert("uid".into(), json!(meta::uid(&sa)));
    }
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
    let (mut raw, dups) = rest::decode_body(def, body, content_type, mode)?;
    if let Some(m) = raw.as_object_mut() {
        m.remove("status");
    }
    let (mut obj, warnings) = rest::typed_check(def, raw, mode, &dups)?;
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
    let kv = state
        .storage
        .get(&def.key(Some(namespace), name))
        .await
        .map_err(|e| crate::registry::call::map_storage_error(def, name, e))?;
    kv.map(|kv| meta::from_stored(&kv)).transpose()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::type_complexity)]
    use kustos_ca::jwt;

    use super::*;
    use crate::authn::serviceaccount::{
        Rejection, CREDENTIAL_ID_EXTRA, NODE_NAME_EXTRA, NODE_UID_EXTRA, POD_NAME_EXTRA, POD_UID_EXTRA,
    };
    use crate::pki::service_account::DEFAULT_ISSUER;
    use crate::testing::serviceaccount::{authenticated, env, env_with, invalid};

    /// A subresource the registry calls create-only is served by a handler (else it would be
    /// taken for an ordinary subresource of the stored object).
    #[test]
    fn every_create_only_subresource_has_a_handler() {
        let registry = crate::registry::Registry::builtin();
        let mut seen = Vec::new();
        for def in &registry.resources {
            for sub in def.subresources.iter().filter(|s| crate::registry::create_only_subresource(def, s)) {
                assert!(crate::api::create_handler(def, sub).is_some(), "{}/{sub}", def.resource);
                seen.push(format!("{}/{sub}", def.resource));
            }
        }
        assert_eq!(seen, ["serviceaccounts/token"]);
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
        assert_eq!(bound_kind("v1", "Pod").unwrap(), BoundKind::Pod);
        assert_eq!(bound_kind("v1", "Node").unwrap(), BoundKind::Node);
        let rejected = [
            ("v1", "Namespace", "cannot bind token to object of type /v1, Kind=Namespace"),
            ("apps/v1", "Pod", "cannot bind token to object of type apps/v1, Kind=Pod"),
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

        let claims = BoundClaims::from_claims(&jwt::verify(token, &e.tokens.verification_keys()).unwrap()).unwrap();
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
        assert_eq!(header.kid.as_deref(), Some(e.tokens.signing_key().unwrap().public_key().key_id()));

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
        assert_eq!(invalid(e.check(&token, &[]).await), Rejection::TokenInvalidated.to_string());
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
        e.create("nodes", "", json!({"metadata": {"name": "n1"}})).await;
        e.create("pods", "team", pod("other-sa", "n1", "other")).await;
        e.create("pods", "team", pod("no-sa", "n1", "")).await;
        let sa_uid = meta::uid(&e.stored_object("serviceaccounts", "team", "builder").await).to_string();
        let sa_uid_conflict = format!("Operation cannot be fulfilled on TokenRequest.authentication.k8s.io \"builder\": the UID in the token request (someone-else) does not match the UID of the service account ({sa_uid})");
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
            ("bound to a missing pod", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}})), 404,
             "pods \"p\" not found"),
            ("bound to another service account's pod", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "other-sa"}})), 400,
             "cannot bind token for serviceaccount \"builder\" to pod running with different serviceaccount name."),
            ("bound to a pod without a service account", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "no-sa"}})), 400,
             "cannot bind token for serviceaccount \"builder\" to pod running with different serviceaccount name."),
            ("bound to a missing node", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": "ghost"}})), 404,
             "nodes \"ghost\" not found"),
            ("bound node uid differs", "builder", "", tr(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "old"}})), 409,
             "Operation cannot be fulfilled on Node \"n1\": the UID in the bound object reference (old) does not match the UID in record. The object might have been deleted and then recreated"),
            ("service account uid differs", "builder", "", json!({"metadata": {"uid": "someone-else"}, "spec": {}}), 409,
             &sa_uid_conflict),
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

    /// A pod `name` in the test namespace on `node` running as `sa` (none when empty).
    fn pod(name: &str, node: &str, sa: &str) -> Value {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        if !sa.is_empty() {
            spec["serviceAccountName"] = json!(sa);
        }
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn claims_of(token: &str) -> BoundClaims {
        BoundClaims::from_claims(&jwt::decode_unverified(token).unwrap().1).unwrap()
    }

    #[tokio::test]
    async fn pod_and_node_bound_tokens() {
        let e = env().await;
        e.namespace("team").await;
        let sa = e.service_account("team", "builder").await;
        let node = e.create("nodes", "", json!({"metadata": {"name": "n1"}})).await;
        let node_uid = meta::uid(&node).to_string();
        let web = e.create("pods", "team", pod("web", "n1", "builder")).await;
        let pod_uid = meta::uid(&web).to_string();
        e.create("pods", "team", pod("elsewhere", "gone-node", "builder")).await;
        e.create("pods", "team", pod("pending", "", "builder")).await;
        let bind = |kind: &str, name: &str| json!({"boundObjectRef": {"apiVersion": "v1", "kind": kind, "name": name}});

        // Pod-bound: the pod and its Node in the claims and in the user's extra.
        let token = e.token("team", "builder", bind("Pod", "web")).await;
        let claims = claims_of(&token);
        assert_eq!(claims.pod, Some(ObjectRef::new("web", &pod_uid)));
        assert_eq!(claims.node, Some(ObjectRef::new("n1", &node_uid)));
        assert_eq!(claims.secret, None);
        let (user, _) = authenticated(e.check(&token, &[]).await);
        assert_eq!(user.uid, meta::uid(&sa));
        let extra = |k: &str| user.extra.get(k).cloned().unwrap_or_default();
        assert_eq!(extra(POD_NAME_EXTRA), ["web"]);
        assert_eq!(extra(POD_UID_EXTRA), [pod_uid.as_str()]);
        assert_eq!(extra(NODE_NAME_EXTRA), ["n1"]);
        assert_eq!(extra(NODE_UID_EXTRA), [node_uid.as_str()]);
        assert_eq!(extra(CREDENTIAL_ID_EXTRA), [format!("JTI={}", claims.jti)]);
        // A pod on a Node that does not exist: the node's name only; not scheduled: no node.
        let on_missing = claims_of(&e.token("team", "builder", bind("Pod", "elsewhere")).await);
        assert_eq!(on_missing.node, Some(ObjectRef::new("gone-node", "")));
        assert_eq!(claims_of(&e.token("team", "builder", bind("Pod", "pending")).await).node, None);

        // Node-bound: dies with the Node, and with its replacement.
        let node_token = e.token("team", "builder", bind("Node", "n1")).await;
        let claims = claims_of(&node_token);
        assert_eq!((claims.node, claims.pod), (Some(ObjectRef::new("n1", &node_uid)), None));
        let (user, _) = authenticated(e.check(&node_token, &[]).await);
        assert_eq!(user.extra.get(NODE_UID_EXTRA), Some(&vec![node_uid.clone()]));
        assert!(!user.extra.contains_key(POD_NAME_EXTRA));
        e.remove("nodes", "", "n1").await;
        assert_eq!(invalid(e.check(&node_token, &[]).await), Rejection::TokenInvalidated.to_string());
        // The pod-bound token names the node, but is bound to the pod only.
        authenticated(e.check(&token, &[]).await);
        let replaced = e.create("nodes", "", json!({"metadata": {"name": "n1"}})).await;
        assert_eq!(
            invalid(e.check(&node_token, &[]).await),
            format!("node UID ({}) does not match service account node ref claim ({node_uid})", meta::uid(&replaced))
        );

        // The pod-bound token dies with its pod.
        e.remove("pods", "team", "web").await;
        assert_eq!(invalid(e.check(&token, &[]).await), Rejection::TokenInvalidated.to_string());
        e.create("pods", "team", pod("web", "n1", "builder")).await;
        assert!(invalid(e.check(&token, &[]).await).starts_with("pod UID ("));
    }

    #[tokio::test]
    async fn service_account_uid_precondition() {
        let e = env().await;
        e.namespace("team").await;
        let sa = e.service_account("team", "builder").await;
        let uid = meta::uid(&sa);
        // The service account's uid, given or not, is the TokenRequest's.
        for given in [json!({"spec": {}}), json!({"metadata": {"uid": uid}, "spec": {}})] {
            let r = e.request_token("team", "builder", "", given).await.unwrap();
            assert_eq!(r.body["metadata"]["uid"], json!(uid));
        }
        let cases = [(String::new(), true), (uid.to_string(), true), ("other".to_string(), false)];
        for (given, ok) in cases {
            assert_eq!(check_service_account_uid(&given, "builder", uid).is_ok(), ok, "{given:?}");
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
}
