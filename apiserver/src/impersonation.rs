//! Impersonation: `Impersonate-User`, `Impersonate-Group` (repeatable), `Impersonate-Uid` and
//! `Impersonate-Extra-<key>` headers (kubectl `--as`, `--as-group`, `--as-uid`), as upstream.
//!
//! The requester must be authorized for verb `impersonate` on each value asked for: core
//! `users` (or `serviceaccounts` in the account's namespace for `system:serviceaccount:<ns>:<name>`),
//! core `groups`, `authentication.k8s.io` `uids` and `userextras/<key>`. The request then
//! continues as the impersonated user: its groups (a service account's fixed groups when none
//! are given) plus `system:authenticated` — or `system:unauthenticated` for `system:anonymous`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http::HeaderMap;

use crate::authn::{UserInfo, ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP};
use crate::authz::{forbidden_with_reason, Attributes, Authorizer};
use crate::error::ApiError;
use crate::request_info::RequestInfo;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
const SA_PREFIX: &str = "system:serviceaccount:";

/// One thing the requester asks to act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Impersonation {
    User(String),
    ServiceAccount { namespace: String, name: String },
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

/// `system:serviceaccount:<ns>:<name>` → (ns, name).
pub fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let (ns, name) = user.strip_prefix(SA_PREFIX)?.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// Percent-decoding of an extra key (upstream unescapes `%XX`; invalid escapes are kept).
fn unescape(key: &str) -> String {
    let b = key.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// The impersonation requests of a header set, in upstream's order (user, groups, extras,
/// uid). Err: a header that is not valid text, or groups/extras/uid without a user.
pub fn requests(headers: &HeaderMap) -> Result<Vec<Impersonation>, String> {
    let text = |v: &http::HeaderValue| {
        v.to_str().map(str::to_string).map_err(|_| "impersonation header values must be text".to_string())
    };
    let mut out = Vec::new();
    let user = match headers.get(USER) {
        Some(v) => text(v)?,
        None => String::new(),
    };
    if !user.is_empty() {
        out.push(match split_service_account(&user) {
            Some((namespace, name)) => Impersonation::ServiceAccount { namespace: namespace.into(), name: name.into() },
            None => Impersonation::User(user.clone()),
        });
    }
    for v in headers.get_all(GROUP) {
        out.push(Impersonation::Group(text(v)?));
    }
    let mut extras: Vec<(String, Vec<String>)> = Vec::new();
    for name in headers.keys() {
        let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) else { continue };
        let values = headers.get_all(name).iter().map(text).collect::<Result<Vec<_>, _>>()?;
        extras.push((unescape(key), values));
    }
    for (key, values) in extras {
        out.extend(values.into_iter().map(|value| Impersonation::Extra { key: key.clone(), value }));
    }
    let uid = match headers.get(UID) {
        Some(v) => text(v)?,
        None => String::new(),
    };
    if !uid.is_empty() {
        out.push(Impersonation::Uid(uid));
    }
    if user.is_empty() && !out.is_empty() {
        return Err(format!("requested {} without impersonating a user", describe(&out)));
    }
    Ok(out)
}

fn describe(reqs: &[Impersonation]) -> String {
    let parts: Vec<String> = reqs
        .iter()
        .map(|r| match r {
            Impersonation::User(n) => format!("User {n}"),
            Impersonation::ServiceAccount { namespace, name } => format!("ServiceAccount {namespace}/{name}"),
            Impersonation::Group(g) => format!("Group {g}"),
            Impersonation::Extra { key, value } => format!("UserExtra {key}={value}"),
            Impersonation::Uid(u) => format!("UID {u}"),
        })
        .collect();
    format!("[{}]", parts.join(" "))
}

/// The attributes checked for one request (verb `impersonate`).
pub fn attributes(r: &Impersonation) -> RequestInfo {
    let (group, version, resource, subresource, namespace, name) = match r {
        Impersonation::User(n) => ("", "", "users", "", "", n.clone()),
        Impersonation::ServiceAccount { namespace, name } => {
            ("", "", "serviceaccounts", "", namespace.as_str(), name.clone())
        }
        Impersonation::Group(g) => ("", "", "groups", "", "", g.clone()),
        Impersonation::Extra { key, value } => {
            ("authentication.k8s.io", "v1", "userextras", key.as_str(), "", value.clone())
        }
        Impersonation::Uid(u) => ("authentication.k8s.io", "v1", "uids", "", "", u.clone()),
    };
    RequestInfo {
        is_resource_request: true,
        verb: "impersonate".into(),
        api_group: group.into(),
        api_version: version.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name,
        ..Default::default()
    }
}

/// The identity the request continues as.
pub fn impersonated(reqs: &[Impersonation], groups_given: bool) -> UserInfo {
    let mut user = UserInfo::default();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in reqs {
        match r {
            Impersonation::User(n) => user.name = n.clone(),
            Impersonation::ServiceAccount { namespace, name } => {
                user.name = format!("{SA_PREFIX}{namespace}:{name}");
                if !groups_given {
                    user.groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")];
                }
            }
            Impersonation::Group(g) => user.groups.push(g.clone()),
            Impersonation::Extra { key, value } => extra.entry(key.clone()).or_default().push(value.clone()),
            Impersonation::Uid(u) => user.uid = u.clone(),
        }
    }
    if user.name != ANONYMOUS_USER {
        if !user.groups.iter().any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP) {
            user.groups.push(AUTHENTICATED_GROUP.into());
        }
    } else if !user.groups.iter().any(|g| g == UNAUTHENTICATED_GROUP) {
        user.groups.push(UNAUTHENTICATED_GROUP.into());
    }
    user.extra = extra;
    user
}

/// Middleware (after authentication): check and apply impersonation headers.
pub async fn impersonate(State(authz): State<Arc<dyn Authorizer>>, mut req: Request, next: Next) -> Response {
    let reqs = match requests(req.headers()) {
        Ok(r) => r,
        Err(e) => return ApiError::internal(e).into_response(),
    };
    if reqs.is_empty() {
        return next.run(req).await;
    }
    let Some(requester) = req.extensions().get::<UserInfo>().cloned() else {
        return ApiError::internal("no user found for request").into_response();
    };
    for r in &reqs {
        let info = attributes(r);
        let attrs = Attributes { user: &requester, info: &info };
        let verdict = authz.authorize(&attrs).await;
        if !verdict.allowed() {
            tracing::debug!(requester = %requester.name, what = %describe(std::slice::from_ref(r)), "impersonation forbidden");
            return forbidden_with_reason(&attrs, &verdict.reason).into_response();
        }
    }
    let user = impersonated(&reqs, req.headers().contains_key(GROUP));
    tracing::debug!(requester = %requester.name, user = %user.name, "impersonating");
    let headers = req.headers_mut();
    let names: Vec<http::HeaderName> =
        headers.keys().filter(|n| n.as_str().starts_with("impersonate-")).cloned().collect();
    for n in names {
        headers.remove(n);
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn requests_from_headers() {
        let h = headers(&[
            ("Impersonate-User", b"jane"),
            ("Impersonate-Group", b"devs"),
            ("Impersonate-Group", b"ops"),
            ("Impersonate-Extra-Scopes", b"view"),
            ("Impersonate-Extra-Example.com%2Fkey", b"v"),
            ("Impersonate-Uid", b"u-1"),
        ]);
        let r = requests(&h).unwrap();
        assert_eq!(r[0], Impersonation::User("jane".into()));
        assert_eq!(r[1], Impersonation::Group("devs".into()));
        assert_eq!(r[2], Impersonation::Group("ops".into()));
        assert!(r.contains(&Impersonation::Extra { key: "scopes".into(), value: "view".into() }));
        assert!(r.contains(&Impersonation::Extra { key: "example.com/key".into(), value: "v".into() }));
        assert_eq!(r.last(), Some(&Impersonation::Uid("u-1".into())));

        let sa = requests(&headers(&[("Impersonate-User", b"system:serviceaccount:ns1:robot")])).unwrap();
        assert_eq!(sa, vec![Impersonation::ServiceAccount { namespace: "ns1".into(), name: "robot".into() }]);
        assert!(requests(&HeaderMap::new()).unwrap().is_empty());

        for bad in [
            headers(&[("Impersonate-Group", b"devs")]),
            headers(&[("Impersonate-Uid", b"u")]),
            headers(&[("Impersonate-Extra-a", b"b")]),
            headers(&[("Impersonate-User", b"\xff\xfe")]),
        ] {
            assert!(requests(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(unescape("a%2Fb%zz%"), "a/b%zz%");
    }

    #[test]
    fn impersonated_identity() {
        let cases: Vec<(&str, Vec<Impersonation>, bool, &str, Vec<&str>)> = vec![
            ("user alone", vec![Impersonation::User("jane".into())], false, "jane", vec!["system:authenticated"]),
            (
                "user and group",
                vec![Impersonation::User("jane".into()), Impersonation::Group("devs".into())],
                true,
                "jane",
                vec!["devs", "system:authenticated"],
            ),
            (
                "explicit unauthenticated group",
                vec![Impersonation::User("jane".into()), Impersonation::Group("system:unauthenticated".into())],
                true,
                "jane",
                vec!["system:unauthenticated"],
            ),
            (
                "service account gets its groups",
                vec![Impersonation::ServiceAccount { namespace: "ns".into(), name: "sa".into() }],
                false,
                "system:serviceaccount:ns:sa",
                vec!["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"],
            ),
            (
                "service account with given groups",
                vec![
                    Impersonation::ServiceAccount { namespace: "ns".into(), name: "sa".into() },
                    Impersonation::Group("g".into()),
                ],
                true,
                "system:serviceaccount:ns:sa",
                vec!["g", "system:authenticated"],
            ),
            (
                "anonymous",
                vec![Impersonation::User("system:anonymous".into())],
                false,
                "system:anonymous",
                vec!["system:unauthenticated"],
            ),
        ];
        for (what, reqs, given, name, groups) in cases {
            let u = impersonated(&reqs, given);
            assert_eq!(u.name, name, "{what}");
            assert_eq!(u.groups, groups, "{what}");
        }
    }

    #[test]
    fn attributes_name_the_right_resource() {
        let a = attributes(&Impersonation::ServiceAccount { namespace: "ns".into(), name: "sa".into() });
        assert_eq!((a.resource.as_str(), a.namespace.as_str(), a.name.as_str()), ("serviceaccounts", "ns", "sa"));
        let a = attributes(&Impersonation::Extra { key: "scopes".into(), value: "view".into() });
        assert_eq!(
            (a.api_group.as_str(), a.resource.as_str(), a.subresource.as_str()),
            ("authentication.k8s.io", "userextras", "scopes")
        );
        let attrs_user = UserInfo { name: "bob".into(), ..Default::default() };
        let info = attributes(&Impersonation::User("jane".into()));
        let msg = crate::authz::forbidden(&Attributes { user: &attrs_user, info: &info }).to_string();
        assert_eq!(msg, "users \"jane\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
    }
}
