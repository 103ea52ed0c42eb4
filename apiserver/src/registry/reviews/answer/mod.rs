//! The answers of the create-only kinds that are never stored: TokenReview and
//! SelfSubjectReview (`authentication.k8s.io/v1`), SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview and SelfSubjectRulesReview
//! (`authorization.k8s.io/v1`); their registrations are `registry/reviews.rs`, their POST
//! handler `api/reviews.rs`.
//!
//! A POST decodes the object (JSON, YAML or protobuf) through its typed model like any create
//! (unknown fields per `fieldValidation`), puts the namespace of the URL into
//! `metadata.namespace` as the generic create handler does, computes `status` and answers
//! 201 Created with the object. Nothing is stored, so `dryRun` changes nothing.
//!
//! - [`access`]: the access reviews, asked of the [`Authorizer`](crate::authz::Authorizer).
//! - [`identity`]: TokenReview (the token authenticators) and SelfSubjectReview (the requester).
//!
//! Layer: above `authz/` and `authn/` (a review asks the authorizer and the token
//! authenticators), below the handlers: files here import `registry/`, `authz/`, `authn/`,
//! `machinery/` and the ground, never `api/`, `admission/` or `lib.rs`.
//!
//! Responses are rendered like upstream's Go types: fields tagged `omitempty` are left out
//! when empty, and `metadata.creationTimestamp` is `null` unless set.

pub mod access;
pub mod identity;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::authn::{AuthnChain, UserInfo};
use crate::authz::Authorizer;
use crate::error::{ApiError, FieldError};
use crate::registry::body::{decode_body, typed_check};
use crate::registry::call::Params;
pub use crate::registry::reviews::{AUTHENTICATION_GROUP, AUTHORIZATION_GROUP};
use crate::registry::ResourceDef;

/// Everything a review is computed from besides the object.
pub struct Env<'a> {
    pub authz: &'a dyn Authorizer,
    pub authn: &'a AuthnChain,
    /// The requester (self reviews).
    pub user: &'a UserInfo,
    pub now: DateTime<Utc>,
}

/// Decode the body like a create: query parameters checked, typed roundtrip with
/// fieldValidation, and `metadata.namespace` set from the URL (a namespaced kind) or cleared
/// (a cluster-scoped one); a different namespace in the body is a 400, as upstream.
pub fn decode(
    def: &ResourceDef,
    params: &Params,
    body: &Bytes,
    content_type: &str,
    url_namespace: &str,
) -> Result<(Value, Vec<String>), ApiError> {
    params.dry_run()?;
    let mode = params.field_validation()?;
    let (mut raw, dups) = decode_body(def, body, content_type, mode)?;
    // The status is computed by the server; what a client sends there (protobuf bodies carry
    // an empty one) is ignored.
    if let Some(m) = raw.as_object_mut() {
        m.remove("status");
    }
    let (mut obj, warnings) = typed_check(def, raw, mode, &dups)?;
    let expected = if def.namespaced { url_namespace } else { "" };
    let in_body = crate::meta::namespace(&obj).to_string();
    if in_body != expected {
        if in_body.is_empty() {
            crate::meta::meta_mut(&mut obj).insert("namespace".into(), json!(expected));
        } else if expected.is_empty() {
            crate::meta::meta_mut(&mut obj).remove("namespace");
        } else {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    Ok((obj, warnings))
}

/// The answer to a decoded review: the object with `status` (and, for the kinds that answer
/// with a fresh object, without what was sent).
pub async fn compute(def: &ResourceDef, env: &Env<'_>, obj: Value) -> Result<Value, ApiError> {
    let mut out = match def.kind {
        "TokenReview" => identity::token_review(env, &obj).await?,
        "SelfSubjectReview" => identity::self_subject_review(env.user, env.now),
        "SubjectAccessReview" => access::subject_access_review(env.authz, &obj).await?,
        "LocalSubjectAccessReview" => access::local_subject_access_review(env.authz, &obj).await?,
        "SelfSubjectAccessReview" => access::self_subject_access_review(env.authz, env.user, &obj).await?,
        "SelfSubjectRulesReview" => access::self_subject_rules_review(env.authz, env.user, &obj).await?,
        other => return Err(ApiError::internal(format!("{other} is not a review kind"))),
    };
    out["apiVersion"] = json!(def.api_version());
    out["kind"] = json!(def.kind);
    Ok(out)
}

/// A typed view of the decoded object (it already went through the typed roundtrip).
fn typed<T: serde::de::DeserializeOwned>(def_kind: &str, obj: &Value) -> Result<T, ApiError> {
    T::deserialize(obj).map_err(|e| {
        ApiError::BadRequest(format!("{def_kind} in version \"v1\" cannot be handled as a {def_kind}: {e}"))
    })
}

/// The 422 upstream gives for these kinds: the decoded internal object carries no kind, so
/// the message reads `.authorization.k8s.io "" is invalid: ...`.
fn invalid(group: &str, errs: Vec<FieldError>) -> ApiError {
    ApiError::invalid(group, "", "", errs)
}

/// An Invalid cause whose value is already rendered (Go renders structs as JSON).
fn invalid_rendered(field: &str, rendered: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: {rendered}: {detail}"),
    }
}

/// True for the values Go's `omitempty` drops and `DeepEqual` against a zero struct ignores.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `metav1.ObjectMeta` fields in Go's declaration order (how Go renders the struct).
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn metadata_of(obj: &Value) -> Map<String, Value> {
    obj.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default()
}

/// Whether metadata is empty as upstream's review validation sees it (managedFields and,
/// for LocalSubjectAccessReview, namespace ignored).
fn metadata_is_empty(meta: &Map<String, Value>, ignore: &[&str]) -> bool {
    meta.iter().all(|(k, v)| k == "managedFields" || ignore.contains(&k.as_str()) || is_zero(v))
}

/// The metadata as Go's JSON encoder renders an `ObjectMeta` in an error message.
fn render_go_object_meta(meta: &Map<String, Value>) -> String {
    let mut parts = Vec::new();
    for k in OBJECT_META_FIELDS {
        match meta.get(*k) {
            Some(v) if !is_zero(v) => {
                parts.push(format!("{}:{}", json!(k), serde_json::to_string(v).unwrap_or_default()))
            }
            _ if *k == "creationTimestamp" => parts.push("\"creationTimestamp\":null".into()),
            _ => {}
        }
    }
    format!("{{{}}}", parts.join(","))
}

/// Metadata in a response: what was sent, zero values dropped, `creationTimestamp` null
/// unless set (Go's `metav1.Time` is never omitted).
fn response_metadata(meta: &Map<String, Value>) -> Value {
    let mut out: Map<String, Value> =
        meta.iter().filter(|(_, v)| !is_zero(v)).map(|(k, v)| (k.clone(), v.clone())).collect();
    out.entry("creationTimestamp").or_insert(Value::Null);
    Value::Object(out)
}

/// Drop what Go's `omitempty` drops from a spec: null, empty strings and empty lists (except
/// under `keep`, fields without omitempty), and empty objects only under `maps` (map fields;
/// an empty struct pointer stays).
fn omit_empty(v: &mut Value, keep: &[&str], maps: &[&str]) {
    match v {
        Value::Object(m) => {
            m.retain(|k, x| {
                if keep.contains(&k.as_str()) {
                    return true;
                }
                match x {
                    Value::Null => false,
                    Value::String(s) => !s.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !(o.is_empty() && maps.contains(&k.as_str())),
                    _ => true,
                }
            });
            for x in m.values_mut() {
                omit_empty(x, keep, maps);
            }
        }
        Value::Array(a) => {
            for x in a {
                omit_empty(x, keep, maps);
            }
        }
        _ => {}
    }
}

/// `user.Info` as the review kinds render it (`authentication.k8s.io/v1` `UserInfo`).
fn user_info_json(user: &UserInfo) -> Value {
    let mut m = Map::new();
    if !user.name.is_empty() {
        m.insert("username".into(), json!(user.name));
    }
    if !user.uid.is_empty() {
        m.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        m.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        m.insert("extra".into(), json!(user.extra));
    }
    Value::Object(m)
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Fakes shared by the review tests.

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::rbac::v1::PolicyRule;

    use crate::authn::{AuthnChain, TokenAuthenticator, TokenResult, UserInfo};
    use crate::authz::{Attributes, Authorizer, Decision, RuleSet, Verdict};

    /// Decides by attributes:
    /// - group `devs` may `get`/`list` `pods` in any namespace (Allow, reason "devs read pods");
    /// - user `mallory` is explicitly denied everything (Deny, reason "mallory is banned");
    /// - user `broken` gets NoOpinion with an evaluation error;
    /// - group `health` may `get` the non-resource path `/healthz`;
    /// - the user with uid `u-7` and extra `scopes: [admin]` may do everything;
    /// - everything else: NoOpinion.
    pub struct FakeAuthorizer;

    #[async_trait::async_trait]
    impl Authorizer for FakeAuthorizer {
        async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
            let (u, i) = (attrs.user, attrs.info);
            let in_group = |g: &str| u.groups.iter().any(|x| x == g);
            if u.name == "mallory" {
                return Verdict { decision: Decision::Deny, reason: "mallory is banned".into(), error: String::new() };
            }
            if u.name == "broken" {
                return Verdict {
                    decision: Decision::NoOpinion,
                    reason: String::new(),
                    error: "rule store unavailable".into(),
                };
            }
            if u.uid == "u-7" && u.extra.get("scopes").is_some_and(|s| s.iter().any(|x| x == "admin")) {
                return Verdict::allow("scoped admin");
            }
            if i.is_resource_request
                && in_group("devs")
                && (i.verb == "get" || i.verb == "list")
                && i.api_group.is_empty()
                && i.resource == "pods"
                && i.subresource.is_empty()
            {
                return Verdict::allow("devs read pods");
            }
            if !i.is_resource_request && in_group("health") && i.verb == "get" && i.path == "/healthz" {
                return Verdict::allow("");
            }
            Verdict::no_opinion()
        }

        async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleSet {
            let strs = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            let mut set = RuleSet::default();
            if user.groups.iter().any(|g| g == "devs") {
                set.resource_rules.push(PolicyRule {
                    verbs: vec!["get".into(), "list".into()],
                    api_groups: strs(&[""]),
                    resources: strs(&["pods"]),
                    ..Default::default()
                });
                set.non_resource_rules.push(PolicyRule {
                    verbs: vec!["get".into()],
                    non_resource_urls: strs(&["/healthz"]),
                    ..Default::default()
                });
            }
            if namespace == "team" {
                set.resource_rules.push(PolicyRule {
                    verbs: vec!["update".into()],
                    api_groups: strs(&[""]),
                    resources: strs(&["configmaps"]),
                    resource_names: strs(&["settings"]),
                    ..Default::default()
                });
            }
            if user.name == "broken" {
                set.incomplete = true;
                set.evaluation_error = "rule store unavailable".into();
            }
            set
        }
    }

    /// Tokens: `good` → alice (for audience `api` or `other`), `pod-bound` → a service account
    /// with extra (audience `api` only), `lying` → authenticated but with no audience in
    /// common with the request; tokens starting with `bad` are invalid; others not claimed.
    pub struct FakeTokens;

    #[async_trait::async_trait]
    impl TokenAuthenticator for FakeTokens {
        async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
            let wants = |a: &str| audiences.iter().any(|x| x == a);
            match token {
                "good" if wants("api") || wants("other") => TokenResult::Authenticated {
                    user: UserInfo {
                        name: "alice".into(),
                        uid: "alice-uid".into(),
                        groups: vec!["devs".into()],
                        ..Default::default()
                    },
                    audiences: audiences.iter().filter(|a| *a == "api" || *a == "other").cloned().collect(),
                },
                "pod-bound" if wants("api") => TokenResult::Authenticated {
                    user: UserInfo {
                        name: "system:serviceaccount:ns1:sa1".into(),
                        uid: "sa-uid".into(),
                        groups: vec!["system:serviceaccounts".into(), "system:serviceaccounts:ns1".into()],
                        extra: BTreeMap::from([
                            ("authentication.kubernetes.io/pod-name".to_string(), vec!["p".to_string()]),
                            ("authentication.kubernetes.io/pod-uid".to_string(), vec!["p-uid".to_string()]),
                        ]),
                    },
                    audiences: vec!["api".into()],
                },
                "lying" => TokenResult::Authenticated {
                    user: UserInfo { name: "liar".into(), ..Default::default() },
                    audiences: vec!["nobody".into()],
                },
                "good" | "pod-bound" => TokenResult::Invalid("token audiences do not match".into()),
                t if t.starts_with("bad") => TokenResult::Invalid("token has expired".into()),
                _ => TokenResult::NotMine,
            }
        }
    }

    pub fn chain() -> AuthnChain {
        AuthnChain::from_parts(None, vec![Arc::new(FakeTokens)], true).with_api_audiences(vec!["api".into()])
    }

    pub fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::registry::Registry;

    fn def(resource: &str) -> ResourceDef {
        let reg = Registry::builtin();
        let group = if resource.ends_with("accessreviews") || resource == "selfsubjectrulesreviews" {
            AUTHORIZATION_GROUP
        } else {
            AUTHENTICATION_GROUP
        };
        reg.find(group, "v1", resource).cloned().unwrap()
    }

    fn body(v: Value) -> Bytes {
        Bytes::from(v.to_string())
    }

    #[test]
    fn decode_checks_the_body_and_places_the_namespace() {
        let p = Params::default();
        let sar = def("subjectaccessreviews");
        let lsar = def("localsubjectaccessreviews");
        // (name, def, query, body, content type, url namespace, Ok(namespace) | Err(code))
        type Case<'a> = (&'a str, &'a ResourceDef, &'a str, Bytes, &'a str, &'a str, Result<Option<&'a str>, u16>);
        let cases: Vec<Case> = vec![
            ("bad JSON", &sar, "", Bytes::from_static(b"{\"spec\": "), "application/json", "", Err(400)),
            ("not an object", &sar, "", Bytes::from_static(b"[1]"), "application/json", "", Err(400)),
            (
                "bad protobuf",
                &sar,
                "",
                Bytes::from_static(b"k8s\x00\xff\xff"),
                crate::wire::protobuf::MEDIA_TYPE,
                "",
                Err(400),
            ),
            (
                "wrong kind",
                &sar,
                "",
                body(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"})),
                "application/json",
                "",
                Err(400),
            ),
            ("wrong field type", &sar, "", body(json!({"spec": {"user": 5}})), "application/json", "", Err(400)),
            (
                "unknown field, strict",
                &sar,
                "fieldValidation=Strict",
                body(json!({"spec": {"usr": "x"}})),
                "application/json",
                "",
                Err(400),
            ),
            ("bad dryRun", &sar, "dryRun=Some", body(json!({})), "application/json", "", Err(400)),
            ("dryRun accepted", &sar, "dryRun=All", body(json!({})), "application/json", "", Ok(None)),
            (
                "cluster scope drops a namespace",
                &sar,
                "",
                body(json!({"metadata": {"namespace": "x"}})),
                "application/json",
                "",
                Ok(None),
            ),
            (
                "local review gets the URL namespace",
                &lsar,
                "",
                body(json!({})),
                "application/json",
                "ns1",
                Ok(Some("ns1")),
            ),
            (
                "local review keeps an equal namespace",
                &lsar,
                "",
                body(json!({"metadata": {"namespace": "ns1"}})),
                "application/json",
                "ns1",
                Ok(Some("ns1")),
            ),
            (
                "local review with another namespace",
                &lsar,
                "",
                body(json!({"metadata": {"namespace": "ns2"}})),
                "application/json",
                "ns1",
                Err(400),
            ),
            ("YAML", &sar, "", Bytes::from_static(b"spec:\n  user: bob\n"), "application/yaml", "", Ok(None)),
        ];
        for (name, d, q, b, ct, ns, want) in cases {
            let params = if q.is_empty() { p.clone() } else { Params::parse(Some(q)) };
            let got = decode(d, &params, &b, ct, ns);
            match (got, want) {
                (Ok((obj, _)), Ok(want_ns)) => {
                    assert_eq!(obj["metadata"].get("namespace").and_then(Value::as_str), want_ns, "{name}: {obj}")
                }
                (Err(e), Err(code)) => assert_eq!(e.code().as_u16(), code, "{name}: {e}"),
                (got, want) => panic!("{name}: got {:?}, want {want:?}", got.map(|(o, _)| o)),
            }
        }
        // Unknown fields are warnings by default and pruned.
        let (obj, warnings) =
            decode(&sar, &p, &body(json!({"spec": {"user": "bob", "usr": "x"}})), "application/json", "").unwrap();
        assert_eq!(warnings, vec!["unknown field \"spec.usr\"".to_string()]);
        assert_eq!(obj["spec"], json!({"user": "bob"}));
    }

    /// A protobuf body as client-go sends it.
    fn protobuf_body(api_version: &str, kind: &str, raw: &[u8]) -> Bytes {
        Bytes::from(crate::wire::protobuf::encode::envelope(api_version, kind, raw))
    }

    #[tokio::test]
    async fn protobuf_self_subject_access_review_like_kubectl_auth_can_i() {
        fn ld(n: u64, bytes: &[u8], out: &mut Vec<u8>) {
            out.push(((n << 3) | 2) as u8);
            out.push(bytes.len() as u8);
            out.extend_from_slice(bytes);
        }
        // metadata {creationTimestamp: zero}, spec {resourceAttributes {namespace, verb, resource}}
        let mut meta = Vec::new();
        ld(8, b"", &mut meta);
        let mut ra = Vec::new();
        ld(1, b"default", &mut ra);
        ld(2, b"get", &mut ra);
        ld(5, b"pods", &mut ra);
        let mut spec = Vec::new();
        ld(1, &ra, &mut spec);
        let mut raw = Vec::new();
        ld(1, &meta, &mut raw);
        ld(2, &spec, &mut raw);
        ld(3, b"", &mut raw);
        let d = def("selfsubjectaccessreviews");
        let b = protobuf_body("authorization.k8s.io/v1", "SelfSubjectAccessReview", &raw);
        let (obj, _) = decode(&d, &Params::default(), &b, crate::wire::protobuf::MEDIA_TYPE, "").unwrap();
        let authn = chain();
        let dev = user("dev", &["devs", "system:authenticated"]);
        let env = Env { authz: &FakeAuthorizer, authn: &authn, user: &dev, now: Utc::now() };
        let out = compute(&d, &env, obj).await.unwrap();
        assert_eq!(
            out,
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "metadata": {"creationTimestamp": null},
                "spec": {"resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}},
                "status": {"allowed": true, "reason": "devs read pods"},
            })
        );
    }

    #[test]
    fn registered_like_upstream_discovery() {
        let reg = Registry::builtin();
        let list = crate::api::discovery::api_resource_list(&reg, AUTHORIZATION_GROUP, "v1").unwrap();
        assert_eq!(
            list["resources"],
            json!([
                {"name": "localsubjectaccessreviews", "singularName": "localsubjectaccessreview", "namespaced": true,
                 "kind": "LocalSubjectAccessReview", "verbs": ["create"]},
                {"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview", "namespaced": false,
                 "kind": "SelfSubjectAccessReview", "verbs": ["create"]},
                {"name": "selfsubjectrulesreviews", "singularName": "selfsubjectrulesreview", "namespaced": false,
                 "kind": "SelfSubjectRulesReview", "verbs": ["create"]},
                {"name": "subjectaccessreviews", "singularName": "subjectaccessreview", "namespaced": false,
                 "kind": "SubjectAccessReview", "verbs": ["create"]},
            ])
        );
        let list = crate::api::discovery::api_resource_list(&reg, AUTHENTICATION_GROUP, "v1").unwrap();
        let names: Vec<&str> =
            list["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
        assert_eq!(names, ["selfsubjectreviews", "tokenreviews"]);
        for r in reg.resources.iter().filter(|r| r.create_only) {
            assert!(crate::wire::protobuf::message_for(&r.api_version(), r.kind).is_some(), "{}", r.kind);
        }
    }

    #[test]
    fn openapi_has_post_only_paths_and_no_list_types() {
        let reg = Registry::builtin();
        let api = crate::openapi::OpenApi::new(&reg);
        let v2: Value = serde_json::from_slice(api.v2()).unwrap();
        let paths = v2["paths"].as_object().unwrap();
        for (path, op) in [
            ("/apis/authentication.k8s.io/v1/tokenreviews", "createAuthenticationV1TokenReview"),
            ("/apis/authentication.k8s.io/v1/selfsubjectreviews", "createAuthenticationV1SelfSubjectReview"),
            ("/apis/authorization.k8s.io/v1/subjectaccessreviews", "createAuthorizationV1SubjectAccessReview"),
            (
                "/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews",
                "createAuthorizationV1NamespacedLocalSubjectAccessReview",
            ),
            ("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "createAuthorizationV1SelfSubjectAccessReview"),
            ("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "createAuthorizationV1SelfSubjectRulesReview"),
        ] {
            let item = paths.get(path).unwrap_or_else(|| panic!("{path} missing"));
            let methods: Vec<&String> = item.as_object().unwrap().keys().filter(|k| *k != "parameters").collect();
            assert_eq!(methods, ["post"], "{path}");
            assert_eq!(item["post"]["operationId"], op, "{path}");
        }
        assert!(!paths.keys().any(|p| p.contains("subjectaccessreviews/{name}")));
        let defs = v2["definitions"].as_object().unwrap();
        assert!(defs.contains_key("io.k8s.api.authorization.v1.SubjectAccessReview"));
        assert!(!defs.keys().any(|k| k.ends_with("ReviewList")), "no list types for reviews");
    }

    #[test]
    fn go_rendering_helpers() {
        let meta: Map<String, Value> =
            serde_json::from_value(json!({"labels": {"a": "b"}, "name": "x", "generation": 0})).unwrap();
        assert_eq!(render_go_object_meta(&meta), r#"{"name":"x","creationTimestamp":null,"labels":{"a":"b"}}"#);
        assert!(!metadata_is_empty(&meta, &[]));
        let meta: Map<String, Value> =
            serde_json::from_value(json!({"name": "", "labels": {}, "managedFields": [{"manager": "m"}]})).unwrap();
        assert!(metadata_is_empty(&meta, &[]));
        assert_eq!(response_metadata(&meta), json!({"creationTimestamp": null, "managedFields": [{"manager": "m"}]}));
        let mut spec = json!({"user": "", "groups": [], "extra": {}, "resourceAttributes": {"verb": "", "labelSelector": {"requirements": [{"key": "", "operator": "In", "values": []}]}}});
        omit_empty(&mut spec, &["key", "operator"], &["extra"]);
        assert_eq!(
            spec,
            json!({"resourceAttributes": {"labelSelector": {"requirements": [{"key": "", "operator": "In"}]}}})
        );
    }
}
