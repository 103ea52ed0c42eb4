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
use crate::authn::UserInfo;
use crate::authz::{Attributes, Authorizer, Decision, Verdict};
use crate::error::{ApiError, FieldError};
use crate::http::request_info::RequestInfo;
use crate::machinery::selectors::{self, Operator};
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
mod tests;
