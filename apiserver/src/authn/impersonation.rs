//! Impersonation: `Impersonate-User`, `Impersonate-Group` (repeatable), `Impersonate-Uid` and
//! `Impersonate-Extra-<key>` headers (kubectl `--as`, `--as-group`, `--as-uid`), as upstream.
//!
//! The requester must be authorized for verb `impersonate` on each value asked for: core
//! `users` (or `serviceaccounts` in the account's namespace for `system:serviceaccount:<ns>:<name>`),
//! core `groups`, `authentication.k8s.io` `uids` and `userextras/<key>`. The request then
//! continues as the impersonated user: its groups (a service account's fixed groups when none
//! are given) plus `system:authenticated` — or `system:unauthenticated` for `system:anonymous`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http::HeaderMap;

use crate::authn::{UserInfo, ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP};
use crate::authz::{forbidden_with_reason, Attributes, Authorizer};
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
use crate::authn::user::SERVICE_ACCOUNTS_GROUP as SA_GROUP;
use kustos_ca::users::SERVICE_ACCOUNT_USER_PREFIX as SA_PREFIX;

/// One thing the requester asks to act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Impersonation {
    User(String),
    ServiceAccount { namespace: String, name: String },
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

/// `system:serviceaccount:<ns>:<name>` → (ns, name), when the namespace is a DNS-1123 label
/// and the name a DNS-1123 subdomain (as upstream; anything else is an ordinary user name).
pub fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let (ns, name) = user.strip_prefix(SA_PREFIX)?.split_once(':')?;
    let valid = !name.contains(':')
        && crate::validation::is_dns1123_label(ns).is_empty()
        && crate::validation::is_dns1123_subdomain(name).is_empty();
    valid.then_some((ns, name))
}

/// An extra key as upstream reads it: lowercased, then percent-decoded; a key with a
/// malformed escape (or one decoding to something that is not UTF-8) is kept as it came.
pub fn extra_key(raw: &str) -> String {
    let key = raw.to_ascii_lowercase();
    let b = key.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
            _ => return key,
        }
        i += 3;
    }
    String::from_utf8(out).unwrap_or(key)
}

/// A header value as text; anything but UTF-8 is a bad request.
fn text(name: &str, v: &http::HeaderValue) -> Result<String, ApiError> {
    std::str::from_utf8(v.as_bytes())
        .map(str::to_string)
        .map_err(|_| ApiError::BadRequest(format!("the {name} header is not valid UTF-8")))
}

/// The impersonation requests of a header set, in upstream's order (user, groups, extras,
/// uid). Err (400): a value that is not UTF-8, or groups/extras/uid without a user.
pub fn requests(headers: &HeaderMap) -> Result<Vec<Impersonation>, ApiError> {
    let mut out = Vec::new();
    let user = match headers.get(USER) {
        Some(v) => text("Impersonate-User", v)?,
        None => String::new(),
    };
    if !user.is_empty() {
        out.push(match split_service_account(&user) {
            Some((namespace, name)) => Impersonation::ServiceAccount { namespace: namespace.into(), name: name.into() },
            None => Impersonation::User(user.clone()),
        });
    }
    for v in headers.get_all(GROUP) {
        out.push(Impersonation::Group(text("Impersonate-Group", v)?));
    }
    for name in headers.keys() {
        let Some(raw) = name.as_str().strip_prefix(EXTRA_PREFIX) else { continue };
        let key = extra_key(raw);
        for v in headers.get_all(name) {
            out.push(Impersonation::Extra { key: key.clone(), value: text(name.as_str(), v)? });
        }
    }
    let uid = match headers.get(UID) {
        Some(v) => text("Impersonate-Uid", v)?,
        None => String::new(),
    };
    if !uid.is_empty() {
        out.push(Impersonation::Uid(uid));
    }
    if user.is_empty() && !out.is_empty() {
        return Err(ApiError::BadRequest(format!("requested {} without impersonating a user", go_format(&out))));
    }
    Ok(out)
}

/// The requests as upstream prints its list of object references (`%v`): each as
/// `{Kind Namespace Name UID APIVersion ResourceVersion FieldPath}`.
fn go_format(reqs: &[Impersonation]) -> String {
    const AUTHN_V1: &str = "authentication.k8s.io/v1";
    let parts: Vec<String> = reqs
        .iter()
        .map(|r| {
            let (kind, ns, name, api_version, field_path) = match r {
                Impersonation::User(n) => ("User", "", n.as_str(), "", ""),
                Impersonation::ServiceAccount { namespace, name } => {
                    ("ServiceAccount", namespace.as_str(), name.as_str(), "", "")
                }
                Impersonation::Group(g) => ("Group", "", g.as_str(), "", ""),
                Impersonation::Extra { key, value } => ("UserExtra", "", value.as_str(), AUTHN_V1, key.as_str()),
                Impersonation::Uid(u) => ("UID", "", u.as_str(), AUTHN_V1, ""),
            };
            format!("{{{kind} {ns} {name}  {api_version}  {field_path}}}")
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

/// The identity the request continues as: the given user, uid, extras and groups; a
/// service account without given groups gets its fixed groups; then `system:authenticated`
/// unless a given group is `system:authenticated` or `system:unauthenticated` — or, for
/// `system:anonymous`, `system:unauthenticated` unless given.
pub fn impersonated(reqs: &[Impersonation]) -> UserInfo {
    let groups_given = reqs.iter().any(|r| matches!(r, Impersonation::Group(_)));
    let mut user = UserInfo::default();
    for r in reqs {
        match r {
            Impersonation::User(n) => user.name = n.clone(),
            Impersonation::ServiceAccount { namespace, name } => {
                user.name = format!("{SA_PREFIX}{namespace}:{name}");
                if !groups_given {
                    user.groups = vec![SA_GROUP.into(), format!("{SA_GROUP}:{namespace}")];
                }
            }
            Impersonation::Group(g) => user.groups.push(g.clone()),
            Impersonation::Extra { key, value } => user.extra.entry(key.clone()).or_default().push(value.clone()),
            Impersonation::Uid(u) => user.uid = u.clone(),
        }
    }
    let has = |user: &UserInfo, g: &str| user.groups.iter().any(|x| x == g);
    if user.name != ANONYMOUS_USER {
        if !has(&user, AUTHENTICATED_GROUP) && !has(&user, UNAUTHENTICATED_GROUP) {
            user.groups.push(AUTHENTICATED_GROUP.into());
        }
    } else if !has(&user, UNAUTHENTICATED_GROUP) {
        user.groups.push(UNAUTHENTICATED_GROUP.into());
    }
    user
}

/// Is this one of the impersonation headers removed once they are applied?
fn is_impersonation_header(name: &http::HeaderName) -> bool {
    let n = name.as_str();
    n == USER || n == GROUP || n == UID || n.starts_with(EXTRA_PREFIX)
}

/// Middleware (after authentication, before the request is resolved and authorized): check
/// and apply the impersonation headers.
pub async fn impersonate(State(authz): State<Arc<dyn Authorizer>>, mut req: Request, next: Next) -> Response {
    let reqs = match requests(req.headers()) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
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
            tracing::debug!(requester = %requester.name, verb = "impersonate", resource = %info.resource, "impersonation forbidden");
            return forbidden_with_reason(&attrs, &verdict.reason).into_response();
        }
    }
    let user = impersonated(&reqs);
    tracing::debug!(requester = %requester.name, user = %user.name, "impersonating");
    let headers = req.headers_mut();
    let names: Vec<http::HeaderName> = headers.keys().filter(|n| is_impersonation_header(n)).cloned().collect();
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
    use crate::authz::Verdict;
    use axum::body::Body;
    use tower::ServiceExt as _;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    fn user(n: &str) -> Impersonation {
        Impersonation::User(n.into())
    }
    fn group(g: &str) -> Impersonation {
        Impersonation::Group(g.into())
    }
    fn extra(k: &str, v: &str) -> Impersonation {
        Impersonation::Extra { key: k.into(), value: v.into() }
    }
    fn sa(ns: &str, n: &str) -> Impersonation {
        Impersonation::ServiceAccount { namespace: ns.into(), name: n.into() }
    }

    #[test]
    fn requests_from_headers() {
        let cases: Vec<(&str, HeaderMap, Vec<Impersonation>)> = vec![
            ("none", HeaderMap::new(), vec![]),
            ("unrelated headers", headers(&[("Accept", b"*/*"), ("Impersonate", b"x")]), vec![]),
            ("empty user alone", headers(&[("Impersonate-User", b"")]), vec![]),
            ("user", headers(&[("Impersonate-User", b"jane")]), vec![user("jane")]),
            (
                "first user wins",
                headers(&[("Impersonate-User", b"jane"), ("Impersonate-User", b"bob")]),
                vec![user("jane")],
            ),
            ("UTF-8 user", headers(&[("Impersonate-User", "jäne".as_bytes())]), vec![user("jäne")]),
            (
                "user, groups, uid",
                headers(&[
                    ("Impersonate-Uid", b"u-1"),
                    ("Impersonate-Group", b"devs"),
                    ("Impersonate-User", b"jane"),
                    ("Impersonate-Group", b"ops"),
                ]),
                vec![user("jane"), group("devs"), group("ops"), Impersonation::Uid("u-1".into())],
            ),
            (
                "an empty group counts",
                headers(&[("Impersonate-User", b"jane"), ("Impersonate-Group", b"")]),
                vec![user("jane"), group("")],
            ),
            (
                "empty uid is none",
                headers(&[("Impersonate-User", b"jane"), ("Impersonate-Uid", b"")]),
                vec![user("jane")],
            ),
            (
                "extras: key lowercased and decoded, values repeatable",
                headers(&[
                    ("Impersonate-User", b"jane"),
                    ("Impersonate-Extra-Scopes", b"view"),
                    ("Impersonate-Extra-Scopes", b"edit"),
                    ("Impersonate-Extra-Example.com%2FKey", b"v"),
                ]),
                vec![user("jane"), extra("scopes", "view"), extra("scopes", "edit"), extra("example.com/key", "v")],
            ),
            (
                "service account",
                headers(&[("Impersonate-User", b"system:serviceaccount:ns1:robot")]),
                vec![sa("ns1", "robot")],
            ),
            (
                "not quite a service account",
                headers(&[("Impersonate-User", b"system:serviceaccount:a:b:c")]),
                vec![user("system:serviceaccount:a:b:c")],
            ),
            (
                "no namespace",
                headers(&[("Impersonate-User", b"system:serviceaccount::b")]),
                vec![user("system:serviceaccount::b")],
            ),
            (
                "no name",
                headers(&[("Impersonate-User", b"system:serviceaccount:a:")]),
                vec![user("system:serviceaccount:a:")],
            ),
            (
                "dotted account name",
                headers(&[("Impersonate-User", b"system:serviceaccount:ns1:robot.v2")]),
                vec![sa("ns1", "robot.v2")],
            ),
            (
                "namespace is not a DNS label",
                headers(&[("Impersonate-User", b"system:serviceaccount:ns.1:robot")]),
                vec![user("system:serviceaccount:ns.1:robot")],
            ),
            (
                "uppercase account name",
                headers(&[("Impersonate-User", b"system:serviceaccount:ns1:Robot")]),
                vec![user("system:serviceaccount:ns1:Robot")],
            ),
            (
                "prefix only",
                headers(&[("Impersonate-User", b"system:serviceaccount:")]),
                vec![user("system:serviceaccount:")],
            ),
        ];
        for (what, h, want) in cases {
            assert_eq!(requests(&h).unwrap(), want, "{what}");
        }
    }

    #[test]
    fn bad_impersonation_headers_are_bad_requests() {
        let cases: Vec<(&str, HeaderMap, &str)> = vec![
            (
                "group without user",
                headers(&[("Impersonate-Group", b"devs")]),
                "requested [{Group  devs    }] without impersonating a user",
            ),
            (
                "groups with an empty user",
                headers(&[("Impersonate-User", b""), ("Impersonate-Group", b"a"), ("Impersonate-Group", b"b")]),
                "requested [{Group  a    } {Group  b    }] without impersonating a user",
            ),
            (
                "uid without user",
                headers(&[("Impersonate-Uid", b"u")]),
                "requested [{UID  u  authentication.k8s.io/v1  }] without impersonating a user",
            ),
            (
                "extra without user",
                headers(&[("Impersonate-Extra-Scopes", b"view")]),
                "requested [{UserExtra  view  authentication.k8s.io/v1  scopes}] without impersonating a user",
            ),
            (
                "non-UTF-8 user",
                headers(&[("Impersonate-User", b"\xff\xfe")]),
                "Impersonate-User header is not valid UTF-8",
            ),
            (
                "non-UTF-8 group",
                headers(&[("Impersonate-User", b"jane"), ("Impersonate-Group", b"\x80")]),
                "Impersonate-Group header is not valid UTF-8",
            ),
            (
                "non-UTF-8 extra",
                headers(&[("Impersonate-User", b"jane"), ("Impersonate-Extra-A", b"\xc3(")]),
                "impersonate-extra-a header is not valid UTF-8",
            ),
            (
                "non-UTF-8 uid",
                headers(&[("Impersonate-User", b"jane"), ("Impersonate-Uid", b"\xff")]),
                "Impersonate-Uid header",
            ),
        ];
        for (what, h, want) in cases {
            let e = requests(&h).unwrap_err();
            assert_eq!(e.code(), http::StatusCode::BAD_REQUEST, "{what}");
            assert!(e.to_string().contains(want), "{what}: {e}");
        }
    }

    #[test]
    fn extra_keys_like_upstream() {
        let cases = [
            ("scopes", "scopes"),
            ("Scopes", "scopes"),
            ("example.com%2fkey", "example.com/key"),
            ("example.com%2Fkey", "example.com/key"),
            ("a%20b", "a b"),
            ("a+b", "a+b"),
            ("%e4%b8%ad", "中"),
            ("bad%zzescape%2f", "bad%zzescape%2f"),
            ("trailing%", "trailing%"),
            ("short%2", "short%2"),
            ("notutf8%ff", "notutf8%ff"),
            ("", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(extra_key(raw), want, "{raw}");
        }
    }

    #[test]
    fn impersonated_identity() {
        let cases: Vec<(&str, Vec<Impersonation>, &str, Vec<&str>)> = vec![
            ("user alone", vec![user("jane")], "jane", vec!["system:authenticated"]),
            ("user and group", vec![user("jane"), group("devs")], "jane", vec!["devs", "system:authenticated"]),
            (
                "system:authenticated given",
                vec![user("jane"), group("system:authenticated"), group("devs")],
                "jane",
                vec!["system:authenticated", "devs"],
            ),
            (
                "system:unauthenticated given",
                vec![user("jane"), group("system:unauthenticated")],
                "jane",
                vec!["system:unauthenticated"],
            ),
            (
                "service account gets its groups",
                vec![sa("ns", "sa")],
                "system:serviceaccount:ns:sa",
                vec!["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"],
            ),
            (
                "service account with given groups",
                vec![sa("ns", "sa"), group("g")],
                "system:serviceaccount:ns:sa",
                vec!["g", "system:authenticated"],
            ),
            ("anonymous", vec![user("system:anonymous")], "system:anonymous", vec!["system:unauthenticated"]),
            (
                "anonymous with a group",
                vec![user("system:anonymous"), group("g")],
                "system:anonymous",
                vec!["g", "system:unauthenticated"],
            ),
            (
                "anonymous in system:authenticated",
                vec![user("system:anonymous"), group("system:authenticated")],
                "system:anonymous",
                vec!["system:authenticated", "system:unauthenticated"],
            ),
        ];
        for (what, reqs, name, groups) in cases {
            let u = impersonated(&reqs);
            assert_eq!(u.name, name, "{what}");
            assert_eq!(u.groups, groups, "{what}");
        }
        let u = impersonated(&[
            user("jane"),
            extra("scopes", "a"),
            extra("scopes", "b"),
            extra("k", "v"),
            Impersonation::Uid("u1".into()),
        ]);
        assert_eq!(u.uid, "u1");
        assert_eq!(u.extra.get("scopes"), Some(&vec!["a".to_string(), "b".to_string()]));
        assert_eq!(u.extra.get("k"), Some(&vec!["v".to_string()]));
    }

    #[test]
    fn attributes_and_denials_name_the_right_resource() {
        let bob = UserInfo::with_groups("bob", &["system:authenticated"]);
        let cases: Vec<(Impersonation, (&str, &str, &str, &str, &str), &str)> = vec![
            (
                user("jane"),
                ("", "users", "", "", "jane"),
                "users \"jane\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
            ),
            (
                sa("ns", "robot"),
                ("", "serviceaccounts", "", "ns", "robot"),
                "serviceaccounts \"robot\" is forbidden: User \"bob\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"ns\"",
            ),
            (
                group("devs"),
                ("", "groups", "", "", "devs"),
                "groups \"devs\" is forbidden: User \"bob\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope",
            ),
            (
                extra("scopes", "view"),
                ("authentication.k8s.io", "userextras", "scopes", "", "view"),
                "userextras.authentication.k8s.io \"view\" is forbidden: User \"bob\" cannot impersonate resource \"userextras/scopes\" in API group \"authentication.k8s.io\" at the cluster scope",
            ),
            (
                Impersonation::Uid("u-1".into()),
                ("authentication.k8s.io", "uids", "", "", "u-1"),
                "uids.authentication.k8s.io \"u-1\" is forbidden: User \"bob\" cannot impersonate resource \"uids\" in API group \"authentication.k8s.io\" at the cluster scope",
            ),
        ];
        for (r, (g, res, sub, ns, name), msg) in cases {
            let a = attributes(&r);
            assert!(a.is_resource_request, "{r:?}");
            assert_eq!(a.verb, "impersonate", "{r:?}");
            assert_eq!(
                (
                    a.api_group.as_str(),
                    a.resource.as_str(),
                    a.subresource.as_str(),
                    a.namespace.as_str(),
                    a.name.as_str()
                ),
                (g, res, sub, ns, name),
                "{r:?}"
            );
            let e = crate::authz::forbidden(&Attributes { user: &bob, info: &a });
            assert_eq!(e.to_string(), msg, "{r:?}");
            assert_eq!(e.code(), http::StatusCode::FORBIDDEN);
        }
    }

    /// Allows `impersonate` on the listed (resource, name) pairs, and everything else.
    struct Allow(Vec<(&'static str, &'static str)>);

    #[async_trait::async_trait]
    impl Authorizer for Allow {
        async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
            let i = attrs.info;
            if i.verb != "impersonate" || self.0.iter().any(|(r, n)| i.resource == *r && i.name == *n) {
                Verdict::allow("")
            } else {
                Verdict::no_opinion()
            }
        }
    }

    /// Echoes the identity the handler sees and whether impersonation headers reached it.
    async fn run(allowed: Vec<(&'static str, &'static str)>, hdrs: &[(&str, &[u8])]) -> (u16, serde_json::Value) {
        let authz: Arc<dyn Authorizer> = Arc::new(Allow(allowed));
        let app = axum::Router::new()
            .fallback(|req: Request| async move {
                let u = req.extensions().get::<UserInfo>().cloned().unwrap_or_default();
                let leaked = req.headers().keys().any(|k| k.as_str().starts_with("impersonate-"));
                axum::Json(serde_json::json!({"name": u.name, "groups": u.groups, "uid": u.uid, "extra": u.extra, "leaked": leaked}))
            })
            .layer(axum::middleware::from_fn_with_state(authz, impersonate))
            .layer(axum::middleware::from_fn(|mut req: Request, next: Next| async move {
                req.extensions_mut().insert(UserInfo::with_groups("bob", &["system:authenticated"]));
                next.run(req).await
            }));
        let mut req = http::Request::builder().uri("/api/v1/configmaps");
        for (k, v) in hdrs {
            req = req.header(*k, http::HeaderValue::from_bytes(v).unwrap());
        }
        let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let code = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (code, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn middleware_checks_each_value_then_switches_identity() {
        // Nothing asked: the requester goes on.
        let (code, body) = run(vec![], &[]).await;
        assert_eq!((code, body["name"].as_str()), (200, Some("bob")));

        let all = vec![("users", "jane"), ("groups", "devs"), ("userextras", "view"), ("uids", "u-1")];
        let h: &[(&str, &[u8])] = &[
            ("Impersonate-User", b"jane"),
            ("Impersonate-Group", b"devs"),
            ("Impersonate-Extra-Scopes", b"view"),
            ("Impersonate-Uid", b"u-1"),
        ];
        let (code, body) = run(all.clone(), h).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["name"], "jane");
        assert_eq!(body["groups"], serde_json::json!(["devs", "system:authenticated"]));
        assert_eq!(body["uid"], "u-1");
        assert_eq!(body["extra"], serde_json::json!({"scopes": ["view"]}));
        assert_eq!(body["leaked"], false, "impersonation headers are removed");

        // Each value needs its own grant.
        for (missing, msg) in [
            (("users", "jane"), "users \"jane\" is forbidden"),
            (("groups", "devs"), "groups \"devs\" is forbidden"),
            (("userextras", "view"), "userextras.authentication.k8s.io \"view\" is forbidden"),
            (("uids", "u-1"), "uids.authentication.k8s.io \"u-1\" is forbidden"),
        ] {
            let allowed: Vec<_> = all.iter().copied().filter(|g| *g != missing).collect();
            let (code, body) = run(allowed, h).await;
            assert_eq!(code, 403, "{missing:?}: {body}");
            assert_eq!(body["reason"], "Forbidden");
            let m = body["message"].as_str().unwrap_or_default();
            assert!(m.starts_with(msg) && m.contains("User \"bob\" cannot impersonate"), "{missing:?}: {m}");
        }

        // A service account is checked as serviceaccounts in its namespace.
        let (code, body) =
            run(vec![("serviceaccounts", "robot")], &[("Impersonate-User", b"system:serviceaccount:ns1:robot")]).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            body["groups"],
            serde_json::json!(["system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"])
        );
        let (code, _) = run(
            vec![("users", "system:serviceaccount:ns1:robot")],
            &[("Impersonate-User", b"system:serviceaccount:ns1:robot")],
        )
        .await;
        assert_eq!(code, 403);

        // Malformed requests: 400, never a panic.
        let (code, body) = run(all.clone(), &[("Impersonate-Group", b"devs")]).await;
        assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")), "{body}");
        let (code, body) = run(all, &[("Impersonate-User", b"\xff")]).await;
        assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")), "{body}");
    }
}
