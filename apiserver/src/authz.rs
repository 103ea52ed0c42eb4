//! Authorization: a chain of authorizers, each answering Allow, Deny or NoOpinion; the first
//! Allow or Deny wins and the zero value is Deny (fail closed). RBAC slots in as one more link.

use std::sync::Arc;

use axum::response::IntoResponse;
use axum::{extract::Request, middleware::Next, response::Response};

use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::request_info::RequestInfo;

/// What is asked: who does what to which thing.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    pub user: &'a UserInfo,
    pub info: &'a RequestInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Decision {
    #[default]
    Deny,
    Allow,
    NoOpinion,
}

pub trait Authorizer: Send + Sync {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision;
}

/// Members of `system:masters` may do everything.
pub struct MastersAuthorizer;

impl Authorizer for MastersAuthorizer {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        if attrs.user.groups.iter().any(|g| g == "system:masters") {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

/// Upstream's default public paths: anyone may GET the health and version endpoints
/// (`system:public-info-viewer`); authenticated users may also read discovery and OpenAPI
/// (`system:discovery`).
pub struct PublicPathsAuthorizer;

const PUBLIC_INFO: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];
const DISCOVERY: &[&str] = &["/api", "/apis", "/openapi"];

fn path_matches(path: &str, allowed: &str) -> bool {
    path == allowed || path == format!("{allowed}/") || path.starts_with(&format!("{allowed}/"))
}

impl Authorizer for PublicPathsAuthorizer {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        let info = attrs.info;
        if info.is_resource_request || info.verb != "get" {
            return Decision::NoOpinion;
        }
        if PUBLIC_INFO.iter().any(|p| path_matches(&info.path, p)) {
            return Decision::Allow;
        }
        let authenticated = attrs.user.groups.iter().any(|g| g == "system:authenticated");
        if authenticated && DISCOVERY.iter().any(|p| path_matches(&info.path, p)) {
            return Decision::Allow;
        }
        Decision::NoOpinion
    }
}

/// The chain: first Allow or Deny wins; all NoOpinion → Deny.
pub struct Chain(pub Vec<Arc<dyn Authorizer>>);

impl Chain {
    pub fn default_chain() -> Self {
        Chain(vec![Arc::new(MastersAuthorizer), Arc::new(PublicPathsAuthorizer)])
    }
}

impl Authorizer for Chain {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        for a in &self.0 {
            match a.authorize(attrs) {
                Decision::NoOpinion => continue,
                d => return d,
            }
        }
        Decision::Deny
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
    let what = if i.name.is_empty() || i.verb == "create" {
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

/// Middleware: needs `UserInfo` and `RequestInfo` in the extensions (set by earlier layers).
pub async fn authorize(
    axum::extract::State(authz): axum::extract::State<Arc<dyn Authorizer>>,
    req: Request,
    next: Next,
) -> Response {
    let (Some(user), Some(info)) = (req.extensions().get::<UserInfo>(), req.extensions().get::<RequestInfo>()) else {
        return ApiError::internal("request reached authorization without identity").into_response();
    };
    let attrs = Attributes { user, info };
    match authz.authorize(&attrs) {
        Decision::Allow => next.run(req).await,
        _ => forbidden(&attrs).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::resolve;
    use http::Method;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { name: name.into(), groups: groups.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn chain_decides_like_the_default_policy() {
        let chain = Chain::default_chain();
        let admin = user("kustos-admin", &["system:masters", "system:authenticated"]);
        let bob = user("bob", &["system:authenticated"]);
        let anon = user("system:anonymous", &["system:unauthenticated"]);
        let cases: &[(&str, &UserInfo, Method, &str, Decision)] = &[
            ("masters may list secrets", &admin, Method::GET, "/api/v1/secrets", Decision::Allow),
            ("masters may delete", &admin, Method::DELETE, "/api/v1/namespaces/a/configmaps/b", Decision::Allow),
            ("anyone may read livez", &anon, Method::GET, "/livez", Decision::Allow),
            ("anyone may read readyz checks", &anon, Method::GET, "/readyz/etcd", Decision::Allow),
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
            let got = chain.authorize(&Attributes { user: u, info: &info });
            assert_eq!(&got, want, "{name}");
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
