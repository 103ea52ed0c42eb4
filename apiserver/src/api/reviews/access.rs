//! The access reviews of `authorization.k8s.io/v1`, after upstream's
//! `pkg/registry/authorization/*` and `pkg/apis/authorization/validation`:
//!
//! - SubjectAccessReview: may `user` (with exactly the given `groups`, `extra` and `uid`: a
//!   user with no groups is in no group) do this? Needs a user or a group.
//! - LocalSubjectAccessReview: the same, confined to the namespace of the URL;
//!   `spec.resourceAttributes.namespace` must equal it, non-resource checks are refused.
//! - SelfSubjectAccessReview: may the requester do this?
//! - SelfSubjectRulesReview: what may the requester do in `spec.namespace`?
//!
//! `status.allowed` is true on an Allow, `status.denied` only on an explicit Deny; when no
//! authorizer has an opinion both are false. Field and label selectors in
//! `resourceAttributes` are validated; the authorizers here do not use them, but selectors
//! that do not parse are reported in `status.evaluationError` as upstream does.

use k8s_openapi::api::authorization::v1 as authzv1;
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{json, Map, Value};

use super::{invalid, invalid_rendered, metadata_is_empty, metadata_of, omit_empty, render_go_object_meta, typed};
use super::{response_metadata, AUTHORIZATION_GROUP};
use crate::api::selectors::{self, Operator};
use crate::authn::UserInfo;
use crate::authz::{Attributes, Authorizer, Decision, Verdict};
use crate::error::{ApiError, FieldError};
use crate::http::request_info::RequestInfo;
use crate::validation;

/// What an access review asks about: exactly one of the two must be set.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    pub resource: Option<&'a authzv1::ResourceAttributes>,
    pub non_resource: Option<&'a authzv1::NonResourceAttributes>,
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

/// Go renders the internal `NonResourceAttributes` (no JSON tags) with its field names.
fn render_non_resource(nr: Option<&authzv1::NonResourceAttributes>) -> String {
    match nr {
        None => "null".into(),
        Some(nr) => format!("{{\"Path\":{},\"Verb\":{}}}", json!(s(&nr.path)), json!(s(&nr.verb))),
    }
}

/// `ValidateSubjectAccessReviewSpec` (with a subject) or `ValidateSelfSubjectAccessReviewSpec`.
pub fn validate_access(access: Access<'_>, subject: Option<(&str, &[String])>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rendered = render_non_resource(access.non_resource);
    match (access.resource, access.non_resource) {
        (Some(_), Some(_)) => errs.push(invalid_rendered(
            "spec.nonResourceAttributes",
            &rendered,
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errs.push(invalid_rendered(
            "spec.resourceAttributes",
            &rendered,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if let Some((user, groups)) = subject {
        if user.is_empty() && groups.is_empty() {
            errs.push(FieldError::invalid(
                "spec.user",
                &json!(user),
                "at least one of user or group must be specified",
            ));
        }
    }
    if let Some(ra) = access.resource {
        errs.extend(validate_selectors(ra));
    }
    errs
}

/// Upstream's checks on `resourceAttributes.fieldSelector` and `.labelSelector` (unknown
/// operators are allowed so that newer clients can still be authorized).
fn validate_selectors(ra: &authzv1::ResourceAttributes) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let base = "spec.resourceAttributes";
    if let Some(fs) = &ra.field_selector {
        let path = format!("{base}.fieldSelector");
        let reqs = fs.requirements.as_deref().unwrap_or(&[]);
        errs.extend(raw_versus_requirements(&path, s(&fs.raw_selector), reqs.is_empty()));
        for (i, r) in reqs.iter().enumerate() {
            let p = format!("{path}.requirements[{i}]");
            if r.key.is_empty() {
                errs.push(FieldError::required(format!("{p}.key"), "must be specified"));
            }
            errs.extend(operator_values(&p, &r.operator, r.values.as_deref().unwrap_or(&[])));
        }
    }
    if let Some(ls) = &ra.label_selector {
        let path = format!("{base}.labelSelector");
        let reqs = ls.requirements.as_deref().unwrap_or(&[]);
        errs.extend(raw_versus_requirements(&path, s(&ls.raw_selector), reqs.is_empty()));
        for (i, r) in reqs.iter().enumerate() {
            let p = format!("{path}.requirements[{i}]");
            let values = r.values.as_deref().unwrap_or(&[]);
            errs.extend(operator_values(&p, &r.operator, values));
            for msg in validation::is_qualified_name(&r.key) {
                errs.push(FieldError::invalid(format!("{p}.key"), &json!(r.key), msg));
            }
            for (j, v) in values.iter().enumerate() {
                for msg in validation::is_valid_label_value(v) {
                    errs.push(FieldError::invalid(format!("{p}.values[{j}]"), &json!(v), msg));
                }
            }
        }
    }
    errs
}

fn raw_versus_requirements(path: &str, raw: &str, no_requirements: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !raw.is_empty() && !no_requirements {
        errs.push(FieldError::invalid(
            format!("{path}.rawSelector"),
            &json!(raw),
            "may not specified at the same time as requirements",
        ));
    }
    if raw.is_empty() && no_requirements {
        errs.push(FieldError::required(
            format!("{path}.requirements"),
            format!("when {path} is specified, requirements or rawSelector is required"),
        ));
    }
    errs
}

fn operator_values(path: &str, operator: &str, values: &[String]) -> Vec<FieldError> {
    match operator {
        "In" | "NotIn" if values.is_empty() => {
            vec![FieldError::required(format!("{path}.values"), "must be specified when `operator` is 'In' or 'NotIn'")]
        }
        "Exists" | "DoesNotExist" if !values.is_empty() => vec![FieldError::forbidden(
            format!("{path}.values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )],
        _ => Vec::new(),
    }
}

/// How much of a selector could be used: Ok, or Err(some requirements survived).
type SelectorUse = Result<(), bool>;

fn label_selector_use(ls: &authzv1::LabelSelectorAttributes) -> SelectorUse {
    let reqs = ls.requirements.as_deref().unwrap_or(&[]);
    if !reqs.is_empty() {
        let mut good = 0;
        let mut bad = 0;
        for r in reqs {
            let op = match r.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                _ => {
                    bad += 1;
                    continue;
                }
            };
            match selectors::Requirement::new(&r.key, op, r.values.clone().unwrap_or_default()) {
                Ok(_) => good += 1,
                Err(_) => bad += 1,
            }
        }
        return if bad == 0 { Ok(()) } else { Err(good > 0) };
    }
    let raw = s(&ls.raw_selector);
    if !raw.is_empty() && selectors::LabelSelector::parse(raw).is_err() {
        return Err(false);
    }
    Ok(())
}

fn field_selector_use(fs: &authzv1::FieldSelectorAttributes) -> SelectorUse {
    let reqs = fs.requirements.as_deref().unwrap_or(&[]);
    if !reqs.is_empty() {
        let mut good = 0;
        let mut bad = 0;
        for r in reqs {
            let n = r.values.as_ref().map_or(0, Vec::len);
            match r.operator.as_str() {
                "In" | "NotIn" if n == 1 => good += 1,
                _ => bad += 1,
            }
        }
        return if bad == 0 { Ok(()) } else { Err(good > 0) };
    }
    let raw = s(&fs.raw_selector);
    if !raw.is_empty() && selectors::FieldSelector::parse(raw).is_err() {
        return Err(false);
    }
    Ok(())
}

/// `status.evaluationError`: the authorizer's error, then selectors that were (partly) ignored.
pub fn evaluation_error(verdict_error: &str, access: Access<'_>) -> String {
    let mut out = Vec::new();
    if !verdict_error.is_empty() {
        out.push(verdict_error.to_string());
    }
    if let Some(ra) = access.resource {
        let mut note = |what: &str, used: SelectorUse| match used {
            Ok(()) => {}
            Err(true) => out.push(format!("spec.resourceAttributes.{what} partially ignored due to parse error")),
            Err(false) => out.push(format!("spec.resourceAttributes.{what} ignored due to parse error")),
        };
        if let Some(fs) = &ra.field_selector {
            note("fieldSelector", field_selector_use(fs));
        }
        if let Some(ls) = &ra.label_selector {
            note("labelSelector", label_selector_use(ls));
        }
    }
    out.join("; ")
}

/// The request an access review describes, in the shape the authorizers read. An empty
/// version means every version (`*`).
pub fn request_info(access: Access<'_>) -> RequestInfo {
    match (access.resource, access.non_resource) {
        (Some(ra), _) => {
            let version = s(&ra.version);
            RequestInfo {
                is_resource_request: true,
                verb: s(&ra.verb).to_string(),
                api_group: s(&ra.group).to_string(),
                api_version: if version.is_empty() { "*".into() } else { version.to_string() },
                namespace: s(&ra.namespace).to_string(),
                resource: s(&ra.resource).to_string(),
                subresource: s(&ra.subresource).to_string(),
                name: s(&ra.name).to_string(),
                ..Default::default()
            }
        }
        (None, Some(nr)) => RequestInfo {
            is_resource_request: false,
            path: s(&nr.path).to_string(),
            verb: s(&nr.verb).to_string(),
            ..Default::default()
        },
        (None, None) => RequestInfo::default(),
    }
}

/// The user a SubjectAccessReview asks about: exactly what the spec says.
pub fn subject(spec: &authzv1::SubjectAccessReviewSpec) -> UserInfo {
    UserInfo {
        name: s(&spec.user).to_string(),
        uid: s(&spec.uid).to_string(),
        groups: spec.groups.clone().unwrap_or_default(),
        extra: spec.extra.clone().unwrap_or_default(),
    }
}

/// `SubjectAccessReviewStatus` from a verdict.
pub fn status(verdict: &Verdict, access: Access<'_>) -> Value {
    let mut m = Map::new();
    m.insert("allowed".into(), json!(verdict.decision == Decision::Allow));
    if verdict.decision == Decision::Deny {
        m.insert("denied".into(), json!(true));
    }
    if !verdict.reason.is_empty() {
        m.insert("reason".into(), json!(verdict.reason));
    }
    let err = evaluation_error(&verdict.error, access);
    if !err.is_empty() {
        m.insert("evaluationError".into(), json!(err));
    }
    Value::Object(m)
}

async fn decide(authz: &dyn Authorizer, user: &UserInfo, access: Access<'_>) -> Value {
    let info = request_info(access);
    let verdict = authz.authorize(&Attributes { user, info: &info }).await;
    status(&verdict, access)
}

fn spec_json(spec: &impl serde::Serialize) -> Value {
    let mut v = serde_json::to_value(spec).unwrap_or_else(|_| json!({}));
    omit_empty(&mut v, &["key", "operator"], &["extra"]);
    v
}

/// POST `subjectaccessreviews`.
pub async fn subject_access_review(authz: &dyn Authorizer, obj: &Value) -> Result<Value, ApiError> {
    let sar: authzv1::SubjectAccessReview = typed("SubjectAccessReview", obj)?;
    let spec = &sar.spec;
    let access =
        Access { resource: spec.resource_attributes.as_ref(), non_resource: spec.non_resource_attributes.as_ref() };
    let groups = spec.groups.clone().unwrap_or_default();
    let mut errs = validate_access(access, Some((s(&spec.user), &groups)));
    let meta = metadata_of(obj);
    if !metadata_is_empty(&meta, &[]) {
        errs.push(invalid_rendered("metadata", &render_go_object_meta(&meta), "must be empty"));
    }
    if !errs.is_empty() {
        return Err(invalid(AUTHORIZATION_GROUP, errs));
    }
    let status = decide(authz, &subject(spec), access).await;
    Ok(json!({"metadata": response_metadata(&meta), "spec": spec_json(spec), "status": status}))
}

/// POST `namespaces/<ns>/localsubjectaccessreviews` (`metadata.namespace` is already the
/// URL's namespace, see `reviews::decode`).
pub async fn local_subject_access_review(authz: &dyn Authorizer, obj: &Value) -> Result<Value, ApiError> {
    let lsar: authzv1::LocalSubjectAccessReview = typed("LocalSubjectAccessReview", obj)?;
    let spec = &lsar.spec;
    let access =
        Access { resource: spec.resource_attributes.as_ref(), non_resource: spec.non_resource_attributes.as_ref() };
    let groups = spec.groups.clone().unwrap_or_default();
    let mut errs = validate_access(access, Some((s(&spec.user), &groups)));
    let meta = metadata_of(obj);
    let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
    if !metadata_is_empty(&meta, &["namespace"]) {
        errs.push(invalid_rendered("metadata", &render_go_object_meta(&meta), "must be empty except for namespace"));
    }
    if let Some(ra) = access.resource {
        if s(&ra.namespace) != namespace {
            errs.push(FieldError::invalid(
                "spec.resourceAttributes.namespace",
                &json!(s(&ra.namespace)),
                "must match metadata.namespace",
            ));
        }
    }
    if access.non_resource.is_some() {
        errs.push(invalid_rendered(
            "spec.nonResourceAttributes",
            &render_non_resource(access.non_resource),
            "disallowed on this kind of request",
        ));
    }
    if !errs.is_empty() {
        return Err(invalid(AUTHORIZATION_GROUP, errs));
    }
    if namespace.is_empty() {
        return Err(ApiError::BadRequest("namespace is required on this type: ".into()));
    }
    let status = decide(authz, &subject(spec), access).await;
    Ok(json!({"metadata": response_metadata(&meta), "spec": spec_json(spec), "status": status}))
}

/// POST `selfsubjectaccessreviews`: the requester is the subject.
pub async fn self_subject_access_review(
    authz: &dyn Authorizer,
    requester: &UserInfo,
    obj: &Value,
) -> Result<Value, ApiError> {
    let ssar: authzv1::SelfSubjectAccessReview = typed("SelfSubjectAccessReview", obj)?;
    let spec = &ssar.spec;
    let access =
        Access { resource: spec.resource_attributes.as_ref(), non_resource: spec.non_resource_attributes.as_ref() };
    let mut errs = validate_access(access, None);
    let meta = metadata_of(obj);
    if !metadata_is_empty(&meta, &[]) {
        errs.push(invalid_rendered("metadata", &render_go_object_meta(&meta), "must be empty"));
    }
    if !errs.is_empty() {
        return Err(invalid(AUTHORIZATION_GROUP, errs));
    }
    let status = decide(authz, requester, access).await;
    Ok(json!({"metadata": response_metadata(&meta), "spec": spec_json(spec), "status": status}))
}

fn strings_if_any(m: &mut Map<String, Value>, key: &str, v: &Option<Vec<String>>) {
    if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
        m.insert(key.into(), json!(v));
    }
}

/// A granted resource rule as `authorization.k8s.io/v1` `ResourceRule`.
pub fn resource_rule(r: &PolicyRule) -> Value {
    let mut m = Map::new();
    m.insert("verbs".into(), json!(r.verbs));
    strings_if_any(&mut m, "apiGroups", &r.api_groups);
    strings_if_any(&mut m, "resources", &r.resources);
    strings_if_any(&mut m, "resourceNames", &r.resource_names);
    Value::Object(m)
}

/// A granted non-resource rule as `NonResourceRule`.
pub fn non_resource_rule(r: &PolicyRule) -> Value {
    let mut m = Map::new();
    m.insert("verbs".into(), json!(r.verbs));
    strings_if_any(&mut m, "nonResourceURLs", &r.non_resource_urls);
    Value::Object(m)
}

/// POST `selfsubjectrulesreviews`: answered with a fresh object (no spec, no metadata), as
/// upstream does.
pub async fn self_subject_rules_review(
    authz: &dyn Authorizer,
    requester: &UserInfo,
    obj: &Value,
) -> Result<Value, ApiError> {
    let ssrr: authzv1::SelfSubjectRulesReview = typed("SelfSubjectRulesReview", obj)?;
    let namespace = s(&ssrr.spec.namespace);
    if namespace.is_empty() {
        return Err(ApiError::BadRequest("no namespace on request".into()));
    }
    let rules = authz.rules_for(requester, namespace).await;
    let mut st = Map::new();
    st.insert("resourceRules".into(), Value::Array(rules.resource_rules.iter().map(resource_rule).collect()));
    st.insert(
        "nonResourceRules".into(),
        Value::Array(rules.non_resource_rules.iter().map(non_resource_rule).collect()),
    );
    st.insert("incomplete".into(), json!(rules.incomplete));
    if !rules.evaluation_error.is_empty() {
        st.insert("evaluationError".into(), json!(rules.evaluation_error));
    }
    Ok(json!({"metadata": {"creationTimestamp": null}, "spec": {}, "status": st}))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{compute, Env};
    use super::*;
    use crate::registry::Registry;

    async fn run(resource: &str, requester: &UserInfo, obj: Value) -> Result<Value, ApiError> {
        let reg = Registry::builtin();
        let def = reg.find(AUTHORIZATION_GROUP, "v1", resource).unwrap();
        let authn = chain();
        let env = Env { authz: &FakeAuthorizer, authn: &authn, user: requester, now: chrono::Utc::now() };
        compute(def, &env, obj).await
    }

    fn pods(verb: &str, ns: &str) -> Value {
        json!({"resourceAttributes": {"namespace": ns, "verb": verb, "resource": "pods"}})
    }

    fn with(mut spec: Value, extra: Value) -> Value {
        if let (Some(a), Some(b)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in b {
                a.insert(k.clone(), v.clone());
            }
        }
        spec
    }

    #[tokio::test]
    async fn subject_access_review_decisions() {
        let admin = user("admin", &["system:masters"]);
        // (name, spec, allowed, denied, reason, evaluationError)
        let cases: Vec<(&str, Value, bool, bool, &str, &str)> = vec![
            // §16 check 23: the permission is granted to Group devs only; alice with no groups
            // is in no group.
            ("user without groups is in no group", with(pods("get", "a"), json!({"user": "alice"})), false, false, "", ""),
            (
                "the same user in devs",
                with(pods("get", "a"), json!({"user": "alice", "groups": ["devs"]})),
                true,
                false,
                "devs read pods",
                "",
            ),
            ("a group alone is a subject", with(pods("list", ""), json!({"groups": ["devs"]})), true, false, "devs read pods", ""),
            (
                "devs may not delete",
                with(pods("delete", "a"), json!({"user": "alice", "groups": ["devs"]})),
                false,
                false,
                "",
                "",
            ),
            (
                "another group does not inherit",
                with(pods("get", "a"), json!({"user": "alice", "groups": ["system:authenticated"]})),
                false,
                false,
                "",
                "",
            ),
            (
                "explicit deny sets denied, never allowed",
                with(pods("get", "a"), json!({"user": "mallory", "groups": ["devs"]})),
                false,
                true,
                "mallory is banned",
                "",
            ),
            (
                "an authorizer error is reported",
                with(pods("get", "a"), json!({"user": "broken"})),
                false,
                false,
                "",
                "rule store unavailable",
            ),
            (
                "uid and extra reach the authorizer",
                with(pods("delete", "a"), json!({"user": "svc", "uid": "u-7", "extra": {"scopes": ["admin"]}})),
                true,
                false,
                "scoped admin",
                "",
            ),
            (
                "non-resource path",
                json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}, "groups": ["health"]}),
                true,
                false,
                "",
                "",
            ),
            (
                "subresource is part of the question",
                json!({"resourceAttributes": {"verb": "get", "resource": "pods", "subresource": "log"}, "groups": ["devs"]}),
                false,
                false,
                "",
                "",
            ),
            (
                "unparsable raw selectors are reported, not fatal",
                json!({"resourceAttributes": {"verb": "list", "resource": "pods",
                        "fieldSelector": {"rawSelector": "spec.nodeName"},
                        "labelSelector": {"rawSelector": "a in (b"}}, "groups": ["devs"]}),
                true,
                false,
                "devs read pods",
                "spec.resourceAttributes.fieldSelector ignored due to parse error; spec.resourceAttributes.labelSelector ignored due to parse error",
            ),
            (
                "partly usable selector requirements",
                json!({"resourceAttributes": {"verb": "list", "resource": "pods",
                        "fieldSelector": {"requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]},
                                                           {"key": "a", "operator": "Exists"}]},
                        "labelSelector": {"requirements": [{"key": "x", "operator": "Gt", "values": ["1"]}]}},
                       "user": "broken"}),
                false,
                false,
                "",
                "rule store unavailable; spec.resourceAttributes.fieldSelector partially ignored due to parse error; spec.resourceAttributes.labelSelector ignored due to parse error",
            ),
            (
                "valid selectors are not reported",
                json!({"resourceAttributes": {"verb": "list", "resource": "pods",
                        "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
                        "labelSelector": {"requirements": [{"key": "app", "operator": "In", "values": ["web"]}]}},
                       "groups": ["devs"]}),
                true,
                false,
                "devs read pods",
                "",
            ),
        ];
        for (name, spec, allowed, denied, reason, eval) in cases {
            let obj = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": spec.clone()});
            let out = run("subjectaccessreviews", &admin, obj).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            let st = &out["status"];
            assert_eq!(st["allowed"], json!(allowed), "{name}: {out}");
            assert_eq!(st.get("denied").cloned().unwrap_or(json!(false)), json!(denied), "{name}: {out}");
            assert!(!(st["allowed"] == json!(true) && st.get("denied") == Some(&json!(true))), "{name}: both set");
            assert_eq!(st.get("reason").and_then(Value::as_str).unwrap_or(""), reason, "{name}: {out}");
            assert_eq!(st.get("evaluationError").and_then(Value::as_str).unwrap_or(""), eval, "{name}: {out}");
            // The answer carries the question back (empty strings dropped, as Go's omitempty).
            let mut want_spec = spec.clone();
            super::super::omit_empty(&mut want_spec, &["key", "operator"], &["extra"]);
            assert_eq!(out["spec"], want_spec, "{name}");
            assert_eq!(out["metadata"], json!({"creationTimestamp": null}), "{name}");
            assert_eq!(out["kind"], "SubjectAccessReview");
            assert_eq!(out["apiVersion"], "authorization.k8s.io/v1");
        }
    }

    #[tokio::test]
    async fn a_user_with_no_groups_gets_none_added() {
        // Recording authorizer: the review must not add system:authenticated.
        struct Record(std::sync::Mutex<Vec<UserInfo>>);
        #[async_trait::async_trait]
        impl Authorizer for Record {
            async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
                if let Ok(mut v) = self.0.lock() {
                    v.push(attrs.user.clone());
                }
                Verdict::no_opinion()
            }
        }
        let rec = Record(Default::default());
        let obj = json!({"spec": with(pods("get", "a"), json!({"user": "alice"}))});
        let out = subject_access_review(&rec, &obj).await.unwrap();
        assert_eq!(out["status"], json!({"allowed": false}));
        let seen = rec.0.lock().unwrap().clone();
        assert_eq!(seen, vec![user("alice", &[])]);
    }

    #[tokio::test]
    async fn through_the_authorizer_chain_only_an_explicit_deny_is_denied() {
        use std::sync::Arc;
        let chain = crate::authz::Chain(vec![Arc::new(crate::authz::MastersAuthorizer), Arc::new(FakeAuthorizer)]);
        let ask = |spec: Value| json!({"spec": spec});
        let cases = [
            ("nobody has an opinion", with(pods("get", "a"), json!({"user": "alice"})), json!({"allowed": false})),
            (
                "masters",
                with(pods("get", "a"), json!({"user": "alice", "groups": ["system:masters"]})),
                json!({"allowed": true}),
            ),
            (
                "explicit deny",
                with(pods("get", "a"), json!({"user": "mallory"})),
                json!({"allowed": false, "denied": true, "reason": "mallory is banned"}),
            ),
        ];
        for (name, spec, want) in cases {
            let out = subject_access_review(&chain, &ask(spec)).await.unwrap();
            assert_eq!(out["status"], want, "{name}");
        }
    }

    #[test]
    fn request_info_from_attributes() {
        let ra: authzv1::ResourceAttributes = serde_json::from_value(json!({
            "namespace": "ns", "verb": "update", "group": "apps", "resource": "deployments",
            "subresource": "scale", "name": "web"}))
        .unwrap();
        let info = request_info(Access { resource: Some(&ra), non_resource: None });
        assert_eq!(
            info,
            RequestInfo {
                is_resource_request: true,
                verb: "update".into(),
                api_group: "apps".into(),
                api_version: "*".into(),
                namespace: "ns".into(),
                resource: "deployments".into(),
                subresource: "scale".into(),
                name: "web".into(),
                ..Default::default()
            }
        );
        let nr = authzv1::NonResourceAttributes { path: Some("/metrics".into()), verb: Some("get".into()) };
        let info = request_info(Access { resource: None, non_resource: Some(&nr) });
        assert!(!info.is_resource_request);
        assert_eq!((info.path.as_str(), info.verb.as_str()), ("/metrics", "get"));
    }

    /// Status of the 422 and its causes as (field, reason, message).
    fn causes(e: &ApiError) -> (String, Vec<(String, String, String)>) {
        let st = e.status();
        let causes = st["details"]["causes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                (
                    c["field"].as_str().unwrap_or("").to_string(),
                    c["reason"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        (st["message"].as_str().unwrap_or("").to_string(), causes)
    }

    #[tokio::test]
    async fn validation_errors_like_upstream() {
        let admin = user("admin", &["system:masters"]);
        let c = |f: &str, r: &str, m: &str| (f.to_string(), r.to_string(), m.to_string());
        // (name, resource, object, causes)
        type Cause = (String, String, String);
        let cases: Vec<(&str, &str, Value, Vec<Cause>)> = vec![
            (
                "empty spec",
                "subjectaccessreviews",
                json!({"spec": {}}),
                vec![
                    c("spec.resourceAttributes", "FieldValueInvalid", "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"),
                    c("spec.user", "FieldValueInvalid", "Invalid value: \"\": at least one of user or group must be specified"),
                ],
            ),
            (
                "both attributes",
                "subjectaccessreviews",
                json!({"spec": {"user": "me", "resourceAttributes": {}, "nonResourceAttributes": {"path": "/x", "verb": "get"}}}),
                vec![c(
                    "spec.nonResourceAttributes",
                    "FieldValueInvalid",
                    "Invalid value: {\"Path\":\"/x\",\"Verb\":\"get\"}: cannot be specified in combination with resourceAttributes",
                )],
            ),
            (
                "empty groups list is no subject",
                "subjectaccessreviews",
                json!({"spec": {"groups": [], "nonResourceAttributes": {}}}),
                vec![c("spec.user", "FieldValueInvalid", "Invalid value: \"\": at least one of user or group must be specified")],
            ),
            (
                "metadata must be empty",
                "subjectaccessreviews",
                json!({"metadata": {"name": "x"}, "spec": {"user": "me", "resourceAttributes": {}}}),
                vec![c("metadata", "FieldValueInvalid", "Invalid value: {\"name\":\"x\",\"creationTimestamp\":null}: must be empty")],
            ),
            (
                "self review metadata must be empty",
                "selfsubjectaccessreviews",
                json!({"metadata": {"labels": {"a": "b"}}, "spec": {"resourceAttributes": {}}}),
                vec![c("metadata", "FieldValueInvalid", "Invalid value: {\"creationTimestamp\":null,\"labels\":{\"a\":\"b\"}}: must be empty")],
            ),
            (
                "self review needs attributes but no user",
                "selfsubjectaccessreviews",
                json!({"spec": {}}),
                vec![c("spec.resourceAttributes", "FieldValueInvalid", "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified")],
            ),
            (
                "field selector: both raw and requirements",
                "subjectaccessreviews",
                json!({"spec": {"user": "me", "resourceAttributes": {"fieldSelector": {"rawSelector": "foo", "requirements": [{"key": "a", "operator": "In", "values": ["b"]}]}}}}),
                vec![c("spec.resourceAttributes.fieldSelector.rawSelector", "FieldValueInvalid", "Invalid value: \"foo\": may not specified at the same time as requirements")],
            ),
            (
                "field selector: neither",
                "selfsubjectaccessreviews",
                json!({"spec": {"resourceAttributes": {"fieldSelector": {}}}}),
                vec![c(
                    "spec.resourceAttributes.fieldSelector.requirements",
                    "FieldValueRequired",
                    "Required value: when spec.resourceAttributes.fieldSelector is specified, requirements or rawSelector is required",
                )],
            ),
            (
                "field selector requirement checks",
                "subjectaccessreviews",
                json!({"spec": {"user": "me", "resourceAttributes": {"fieldSelector": {"requirements": [
                    {"key": "", "operator": "In"},
                    {"key": "a", "operator": "Exists", "values": ["x"]},
                    {"key": "b", "operator": "Matches", "values": ["x"]}]}}}}),
                vec![
                    c("spec.resourceAttributes.fieldSelector.requirements[0].key", "FieldValueRequired", "Required value: must be specified"),
                    c("spec.resourceAttributes.fieldSelector.requirements[0].values", "FieldValueRequired", "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
                    c("spec.resourceAttributes.fieldSelector.requirements[1].values", "FieldValueForbidden", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
                ],
            ),
            (
                "label selector requirement checks",
                "subjectaccessreviews",
                json!({"spec": {"user": "me", "resourceAttributes": {"labelSelector": {"requirements": [
                    {"key": "bad key", "operator": "NotIn", "values": ["-x-"]}]}}}}),
                vec![
                    c("spec.resourceAttributes.labelSelector.requirements[0].key", "FieldValueInvalid", &format!("Invalid value: \"bad key\": {}", validation::is_qualified_name("bad key").join(""))),
                    c("spec.resourceAttributes.labelSelector.requirements[0].values[0]", "FieldValueInvalid", &format!("Invalid value: \"-x-\": {}", validation::is_valid_label_value("-x-").join(""))),
                ],
            ),
            (
                "local review: namespace must match",
                "localsubjectaccessreviews",
                json!({"metadata": {"namespace": "ns1"}, "spec": {"user": "me", "resourceAttributes": {"namespace": "ns2", "verb": "get", "resource": "pods"}}}),
                vec![c("spec.resourceAttributes.namespace", "FieldValueInvalid", "Invalid value: \"ns2\": must match metadata.namespace")],
            ),
            (
                "local review: empty resource namespace does not match either",
                "localsubjectaccessreviews",
                json!({"metadata": {"namespace": "ns1"}, "spec": {"user": "me", "resourceAttributes": {"verb": "get", "resource": "pods"}}}),
                vec![c("spec.resourceAttributes.namespace", "FieldValueInvalid", "Invalid value: \"\": must match metadata.namespace")],
            ),
            (
                "local review: no non-resource checks, metadata only namespace",
                "localsubjectaccessreviews",
                json!({"metadata": {"namespace": "ns1", "name": "n"}, "spec": {"user": "me", "nonResourceAttributes": {"path": "/x", "verb": "get"}}}),
                vec![
                    c("metadata", "FieldValueInvalid", "Invalid value: {\"name\":\"n\",\"namespace\":\"ns1\",\"creationTimestamp\":null}: must be empty except for namespace"),
                    c("spec.nonResourceAttributes", "FieldValueInvalid", "Invalid value: {\"Path\":\"/x\",\"Verb\":\"get\"}: disallowed on this kind of request"),
                ],
            ),
        ];
        for (name, resource, obj, want) in cases {
            let err = run(resource, &admin, obj).await.err().unwrap_or_else(|| panic!("{name}: accepted"));
            assert_eq!(err.code().as_u16(), 422, "{name}: {err}");
            assert_eq!(err.reason(), "Invalid", "{name}");
            let (message, got) = causes(&err);
            assert_eq!(got, want, "{name}");
            assert!(message.starts_with(".authorization.k8s.io \"\" is invalid: "), "{name}: {message}");
            assert_eq!(err.status()["details"]["group"], "authorization.k8s.io", "{name}");
        }
    }

    #[tokio::test]
    async fn local_subject_access_review_in_its_namespace() {
        let admin = user("admin", &["system:masters"]);
        let obj =
            json!({"metadata": {"namespace": "ns1"}, "spec": with(pods("get", "ns1"), json!({"groups": ["devs"]}))});
        let out = run("localsubjectaccessreviews", &admin, obj).await.unwrap();
        assert_eq!(out["metadata"], json!({"namespace": "ns1", "creationTimestamp": null}));
        assert_eq!(out["status"], json!({"allowed": true, "reason": "devs read pods"}));
        assert_eq!(out["kind"], "LocalSubjectAccessReview");
        let obj = json!({"spec": with(pods("get", ""), json!({"groups": ["devs"]}))});
        let err = run("localsubjectaccessreviews", &admin, obj).await.unwrap_err();
        assert_eq!(err.code().as_u16(), 400, "{err}");
    }

    #[tokio::test]
    async fn self_subject_access_review_asks_about_the_requester() {
        let mut me = user("svc", &["team"]);
        me.uid = "u-7".into();
        me.extra.insert("scopes".into(), vec!["admin".into()]);
        let (dev, mallory) = (user("dev", &["devs"]), user("mallory", &["devs"]));
        let cases: Vec<(&str, &UserInfo, Value, Value)> = vec![
            (
                "uid and extra of the requester count",
                &me,
                pods("delete", "x"),
                json!({"allowed": true, "reason": "scoped admin"}),
            ),
            ("a dev may get pods", &dev, pods("get", ""), json!({"allowed": true, "reason": "devs read pods"})),
            ("nobody has an opinion", &dev, pods("delete", ""), json!({"allowed": false})),
            (
                "explicit deny",
                &mallory,
                pods("get", ""),
                json!({"allowed": false, "denied": true, "reason": "mallory is banned"}),
            ),
        ];
        for (name, requester, spec, want) in cases {
            let obj = json!({"metadata": {}, "spec": spec});
            let out = run("selfsubjectaccessreviews", requester, obj).await.unwrap();
            assert_eq!(out["status"], want, "{name}");
        }
    }

    #[tokio::test]
    async fn self_subject_rules_review_lists_the_requesters_rules() {
        let out = run("selfsubjectrulesreviews", &user("dev", &["devs"]), json!({"spec": {"namespace": "team"}}))
            .await
            .unwrap();
        assert_eq!(
            out,
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectRulesReview",
                "metadata": {"creationTimestamp": null},
                "spec": {},
                "status": {
                    "resourceRules": [
                        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
                        {"verbs": ["update"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"]},
                    ],
                    "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                    "incomplete": false,
                },
            })
        );
        let out =
            run("selfsubjectrulesreviews", &user("broken", &[]), json!({"spec": {"namespace": "x"}})).await.unwrap();
        assert_eq!(
            out["status"],
            json!({"resourceRules": [], "nonResourceRules": [], "incomplete": true, "evaluationError": "rule store unavailable"})
        );
        let err = run("selfsubjectrulesreviews", &user("dev", &[]), json!({"spec": {}})).await.unwrap_err();
        assert_eq!((err.code().as_u16(), err.to_string()), (400, "no namespace on request".to_string()));
    }
}
