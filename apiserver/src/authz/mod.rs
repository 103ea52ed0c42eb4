//! Authorization: a chain of authorizers, each answering Allow, Deny or NoOpinion; the first
//! Allow or Deny wins, and a chain where nobody decides answers NoOpinion. Only Allow lets a
//! request through (fail closed). RBAC slots in as one more link.
//!
//! Besides the request path, the same [`Authorizer`] answers SubjectAccessReviews, the
//! `impersonate`, `escalate`, `bind`, `approve` and `sign` checks, and (through
//! [`Authorizer::rules_for`]) SelfSubjectRulesReview and RBAC escalation prevention.
//!
//! In this folder: what enters is a request with its user and `RequestInfo`; what leaves is
//! the request, or a 403 Status. [`rbac`] holds the RBAC authorizer, its cache, the Node
//! authorizer, escalation checks and the default policy.

pub mod rbac;

use std::sync::Arc;

use axum::response::IntoResponse;
use axum::{extract::Request, middleware::Next, response::Response};

use crate::authn::UserInfo;
use crate::authn::MASTERS_GROUP;
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;

/// What is asked: who does what to which thing.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    pub user: &'a UserInfo,
    pub info: &'a RequestInfo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Decision {
    #[default]
    Deny,
    Allow,
    NoOpinion,
}

/// A decision with upstream's explanation (SubjectAccessReview `status.reason`) and any
/// error met while deciding (`status.evaluationError`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    pub decision: Decision,
    pub reason: String,
    pub error: String,
}

impl Verdict {
    pub fn allow(reason: impl Into<String>) -> Self {
        Verdict { decision: Decision::Allow, reason: reason.into(), error: String::new() }
    }
    pub fn no_opinion() -> Self {
        Verdict { decision: Decision::NoOpinion, ..Default::default() }
    }
    pub fn allowed(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// The rules an authorizer grants a user in a namespace (SelfSubjectRulesReview), in the
/// RBAC `PolicyRule` shape: resource rules have apiGroups/resources/resourceNames,
/// non-resource rules nonResourceURLs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleSet {
    pub resource_rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    pub non_resource_rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    /// True when the list may be missing rules (an authorizer cannot enumerate its rules or
    /// met an error).
    pub incomplete: bool,
    pub evaluation_error: String,
}

#[async_trait::async_trait]
pub trait Authorizer: Send + Sync {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict;

    /// The rules granted to `user` in `namespace` ("" = cluster scope). Authorizers that
    /// cannot enumerate rules return `incomplete`.
    async fn rules_for(&self, _user: &UserInfo, _namespace: &str) -> RuleSet {
        RuleSet { incomplete: true, ..Default::default() }
    }
}

/// Members of `system:masters` may do everything.
pub struct MastersAuthorizer;

#[async_trait::async_trait]
impl Authorizer for MastersAuthorizer {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
        if attrs.user.groups.iter().any(|g| g == MASTERS_GROUP) {
            Verdict::allow("")
        } else {
            Verdict::no_opinion()
        }
    }

    async fn rules_for(&self, user: &UserInfo, _namespace: &str) -> RuleSet {
        if !user.groups.iter().any(|g| g == MASTERS_GROUP) {
            return RuleSet::default();
        }
        let star = || Some(vec!["*".to_string()]);
        RuleSet {
            resource_rules: vec![k8s_openapi::api::rbac::v1::PolicyRule {
                verbs: vec!["*".into()],
                api_groups: star(),
                resources: star(),
                ..Default::default()
            }],
            non_resource_rules: vec![k8s_openapi::api::rbac::v1::PolicyRule {
                verbs: vec!["*".into()],
                non_resource_urls: star(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }
}

/// The chain: first Allow or Deny wins; when all have no opinion the answer is NoOpinion (the request
/// path and every check treat anything but Allow as a denial).
pub struct Chain(pub Vec<Arc<dyn Authorizer>>);

#[async_trait::async_trait]
impl Authorizer for Chain {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
        let (mut errors, mut reasons) = (Vec::new(), Vec::new());
        for a in &self.0 {
            let v = a.authorize(attrs).await;
            if !v.error.is_empty() {
                errors.push(v.error.clone());
            }
            if v.decision != Decision::NoOpinion {
                return Verdict { error: errors.join("; "), ..v };
            }
            if !v.reason.is_empty() {
                reasons.push(v.reason);
            }
        }
        // Nobody decided: NoOpinion, as upstream's union authorizer reports it (the request
        // path still refuses anything but Allow; SubjectAccessReview shows denied=false).
        Verdict { decision: Decision::NoOpinion, reason: reasons.join("\n"), error: errors.join("; ") }
    }

    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleSet {
        let mut out = RuleSet::default();
        let mut errors = Vec::new();
        for a in &self.0 {
            let r = a.rules_for(user, namespace).await;
            out.resource_rules.extend(r.resource_rules);
            out.non_resource_rules.extend(r.non_resource_rules);
            out.incomplete |= r.incomplete;
            if !r.evaluation_error.is_empty() {
                errors.push(r.evaluation_error);
            }
        }
        out.evaluation_error = errors.join("; ");
        out
    }
}

/// The 403 message upstream gives.
pub fn forbidden(attrs: &Attributes<'_>) -> ApiError {
    let i = attrs.info;
    let user = &attrs.user.name;
    if !i.is_resource_request {
        return ApiError::forbidden(
            "",
            "",
            "",
            format!("forbidden: User \"{user}\" cannot {} path \"{}\"", i.verb, i.path),
        );
    }
    let resource =
        if i.subresource.is_empty() { i.resource.clone() } else { format!("{}/{}", i.resource, i.subresource) };
    // The name, when the request has one (a create of a subresource names its parent).
    let what = if i.name.is_empty() {
        crate::error::group_resource(&i.api_group, &i.resource)
    } else {
        format!("{} \"{}\"", crate::error::group_resource(&i.api_group, &i.resource), i.name)
    };
    let scope = if i.namespace.is_empty() || (i.resource == "namespaces" && i.api_group.is_empty()) {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", i.namespace)
    };
    ApiError::forbidden(
        &i.api_group,
        &i.resource,
        &i.name,
        format!(
            "{what} is forbidden: User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            i.verb, i.api_group
        ),
    )
}

/// Like [`forbidden`], with upstream's `: <reason>` suffix when the authorizer gave one.
pub fn forbidden_with_reason(attrs: &Attributes<'_>, reason: &str) -> ApiError {
    let e = forbidden(attrs);
    if reason.is_empty() {
        return e;
    }
    match e {
        ApiError::Forbidden { message, subject } => {
            ApiError::Forbidden { message: format!("{message}: {reason}"), subject }
        }
        other => other,
    }
}

/// Middleware: needs `UserInfo` and `RequestInfo` in the extensions (set by earlier layers).
pub async fn authorize(
    axum::extract::State(authz): axum::extract::State<Arc<dyn Authorizer>>,
    req: Request,
    next: Next,
) -> Response {
    let (Some(user), Some(info)) = (req.extensions().get::<UserInfo>(), req.extensions().get::<Arc<RequestInfo>>())
    else {
        return ApiError::internal("request reached authorization without identity").into_response();
    };
    let attrs = Attributes { user, info: info.as_ref() };
    let verdict = authz.authorize(&attrs).await;
    if verdict.allowed() {
        let mut resp = next.run(req).await;
        resp.extensions_mut().insert(Decided { allowed: true, reason: verdict.reason });
        return resp;
    }
    let mut resp = forbidden_with_reason(&attrs, &verdict.reason).into_response();
    resp.extensions_mut().insert(Decided { allowed: false, reason: verdict.reason });
    resp
}

/// The authorizer's answer to a request, in its response's extensions (for the audit log's
/// `authorization.k8s.io/decision` and `authorization.k8s.io/reason`).
#[derive(Debug, Clone)]
pub struct Decided {
    pub allowed: bool,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request_info::resolve;
    use http::Method;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    #[tokio::test]
    async fn chain_decides_like_the_default_policy() {
        let (_, cache) = crate::authz::rbac::testutil::default_policy_store().await;
        let chain = Chain(vec![
            Arc::new(MastersAuthorizer),
            Arc::new(crate::authz::rbac::authorizer::RbacAuthorizer::new(cache)),
        ]);
        let admin = user("kustos-admin", &["system:masters", "system:authenticated"]);
        let bob = user("bob", &["system:authenticated"]);
        let anon = user("system:anonymous", &["system:unauthenticated"]);
        let cases: &[(&str, &UserInfo, Method, &str, Decision)] = &[
            ("masters may list secrets", &admin, Method::GET, "/api/v1/secrets", Decision::Allow),
            ("masters may delete", &admin, Method::DELETE, "/api/v1/namespaces/a/configmaps/b", Decision::Allow),
            ("anyone may read livez", &anon, Method::GET, "/livez", Decision::Allow),
            ("anyone may read readyz", &anon, Method::GET, "/readyz", Decision::Allow),
            ("but not single readyz checks", &anon, Method::GET, "/readyz/etcd", Decision::Deny),
            ("authenticated may read openapi", &bob, Method::GET, "/openapi/v3/api/v1", Decision::Allow),
            ("anyone may read version", &anon, Method::GET, "/version", Decision::Allow),
            ("anonymous may not read discovery", &anon, Method::GET, "/api", Decision::Deny),
            (
                "authenticated may read discovery",
                &bob,
                Method::GET,
                "/apis/rbac.authorization.k8s.io/v1",
                Decision::Allow,
            ),
            ("authenticated may not list configmaps", &bob, Method::GET, "/api/v1/configmaps", Decision::Deny),
            ("nobody but masters may post to healthz", &bob, Method::POST, "/healthz", Decision::Deny),
        ];
        for (name, u, m, p, want) in cases {
            let info = resolve(m, p, None);
            let got = chain.authorize(&Attributes { user: u, info: &info }).await;
            assert_eq!(got.allowed(), *want == Decision::Allow, "{name}");
        }
    }

    #[test]
    fn forbidden_message_names_user_verb_and_resource() {
        let bob = user("bob", &["system:authenticated"]);
        let info = resolve(&Method::GET, "/api/v1/namespaces/default/configmaps", None);
        let e = forbidden(&Attributes { user: &bob, info: &info });
        assert_eq!(
            e.to_string(),
            "configmaps is forbidden: User \"bob\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
        );
        assert_eq!(e.code(), http::StatusCode::FORBIDDEN);
    }
}
