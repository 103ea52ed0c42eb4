//! TokenRequest: POST `serviceaccounts/<name>/token`, the `token` subresource of a
//! ServiceAccount (upstream's `pkg/registry/core/serviceaccount/storage/token.go`). The
//! request is checked ([`validate_token_request`], [`bound_kind`]), the service account and
//! any bound Secret are read, and a bound token is signed by the issuer
//! (`pki::service_account`). Nothing is stored; tokens never reach logs or errors.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use http::StatusCode;
use k8s_openapi::api::authentication::v1 as authnv1;
use kustos_ca::jwt::{BoundClaims, ObjectRef};
use serde_json::{json, Map, Value};

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
        tokens.issue(&claims).await.map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?
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
    let kv =
        state.storage.get(&def.key(Some(namespace), name)).await.map_err(|e| rest::map_storage_error(def, name, e))?;
    kv.map(|kv| meta::from_stored(&kv)).transpose()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::type_complexity)]
    use kustos_ca::jwt;

    use super::*;
    use crate::authn::serviceaccount::fixture::{authenticated, env, env_with, invalid};
    use crate::authn::serviceaccount::{Rejection, CREDENTIAL_ID_EXTRA};
    use crate::pki::service_account::DEFAULT_ISSUER;

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
}
