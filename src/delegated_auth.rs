//! Delegated authentication and authorization of the controller-manager's secure port, as
//! kube-controller-manager's (k8s.io/apiserver's delegating authenticator and authorizer).
//!
//! Authentication, in order: a client certificate that verifies against the client CA (when
//! one is configured; CN → user, each O → a group); else a bearer token, checked with a
//! `TokenReview` against the apiserver (answers, both ways, remembered for the token cache
//! TTL); else, with neither presented, `system:anonymous`. An invalid certificate without a
//! valid token, or a token the apiserver does not accept, is a 401 `Unauthorized` Status.
//! Authenticated users get `system:authenticated`.
//!
//! Authorization: the always-allowed paths (exact, or a prefix ending in `*`) and members of
//! `system:masters` pass without asking; anyone else is allowed what a `SubjectAccessReview`
//! (non-resource: the lowercase HTTP method as verb, the path) allows, answers remembered for
//! the allowed and denied TTLs. A refusal is a 403 `Forbidden` Status naming user, verb and
//! path; a review that could not be made (within 10 s) is a 500, as upstream.
//!
//! In: the request's client certificate chain ([`PeerCertificates`]) and headers. Out: the
//! request passed on, or the refusal. The reviews go through [`Reviewer`] (the apiserver in
//! production), so the decisions and caches here are tested without one.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kustos_apiserver::authn::token_cache::{TokenKeys, TtlCache, DEFAULT_MAX_ENTRIES};
use kustos_apiserver::authn::{bearer_token, AuthResult, UserInfo, X509Authenticator, AUTHENTICATED_GROUP};
use kustos_apiserver::error::ApiError;

/// `--authorization-always-allow-paths`' default: the probes need no credentials.
pub const DEFAULT_ALWAYS_ALLOW_PATHS: &str = "/healthz,/readyz,/livez";
/// Groups allowed everything without a review (the apiserver allows them everything anyway).
pub const ALWAYS_ALLOW_GROUPS: &[&str] = &[kustos_apiserver::authn::MASTERS_GROUP];
/// How long one review may take (upstream's client timeout).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// A review's answer, bounded by [`REVIEW_TIMEOUT`].
async fn within<T>(review: impl Future<Output = kube::Result<T>>) -> anyhow::Result<T> {
    match tokio::time::timeout(REVIEW_TIMEOUT, review).await {
        Ok(answer) => Ok(answer?),
        Err(_) => anyhow::bail!("no answer from the apiserver within {REVIEW_TIMEOUT:?}"),
    }
}

/// The reviews the apiserver makes for us.
pub trait Reviewer: Send + Sync + 'static {
    /// `TokenReview`: the user the token belongs to, `None` when it is not valid.
    fn review_token(&self, token: &str) -> impl Future<Output = anyhow::Result<Option<UserInfo>>> + Send;
    /// `SubjectAccessReview`: whether allowed, and the reason given.
    fn review_access(
        &self,
        spec: SubjectAccessReviewSpec,
    ) -> impl Future<Output = anyhow::Result<(bool, String)>> + Send;
}

/// The production [`Reviewer`]: `TokenReview` and `SubjectAccessReview` created on the
/// apiserver through the authentication and the authorization client.
pub struct KubeReviewer {
    pub authentication: kube::Client,
    pub authorization: kube::Client,
}

impl Reviewer for KubeReviewer {
    async fn review_token(&self, token: &str) -> anyhow::Result<Option<UserInfo>> {
        let api: kube::Api<TokenReview> = kube::Api::all(self.authentication.clone());
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_string(), ..Default::default() },
            ..Default::default()
        };
        // The error names the request only; the token is in the body, never in the error.
        let status = within(api.create(&Default::default(), &review)).await?.status.unwrap_or_default();
        if let Some(e) = status.error.as_deref().filter(|e| !e.is_empty()) {
            tracing::debug!(error = %e, "TokenReview: not authenticated");
        }
        Ok(kustos_apiserver::authn::webhook::reviewed_user(&status))
    }

    async fn review_access(&self, spec: SubjectAccessReviewSpec) -> anyhow::Result<(bool, String)> {
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.authorization.clone());
        let review = SubjectAccessReview { spec, ..Default::default() };
        let status = within(api.create(&Default::default(), &review)).await?.status.unwrap_or_default();
        Ok((status.allowed, status.reason.unwrap_or_default()))
    }
}

/// The settings (kube-controller-manager's flags and defaults).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--authentication-token-webhook-cache-ttl` (10s).
    pub token_ttl: Duration,
    /// `--authorization-webhook-cache-authorized-ttl` (10s).
    pub allow_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl` (10s).
    pub deny_ttl: Duration,
    /// `--authorization-always-allow-paths`.
    pub always_allow_paths: Vec<String>,
}

/// What authorization concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Refused, with the reviewer's reason (may be empty).
    Deny(String),
    /// The review could not be made.
    Error(String),
}

/// The authenticator and authorizer of the secure port.
pub struct Delegated<R> {
    reviewer: R,
    /// Client certificates are authenticated only with a client CA.
    x509: Option<Arc<X509Authenticator>>,
    settings: Settings,
    /// Salted hash of the token → the user (`None`: not valid).
    tokens: TtlCache<[u8; 32], Option<UserInfo>>,
    token_keys: TokenKeys,
    /// SHA-256 of the review's spec (JSON) → allowed, reason.
    decisions: TtlCache<String, (bool, String)>,
}

/// Whether `path` is among `allowed`: equal, or starting with an entry's part before `*`.
pub fn always_allowed(allowed: &[String], path: &str) -> bool {
    allowed.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => p == path,
    })
}

/// Checks `--authorization-always-allow-paths` as upstream: each a path, `*` only at its end.
pub fn parse_always_allow_paths(paths: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for p in paths.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        if !p.starts_with('/') && p != "*" {
            anyhow::bail!("--authorization-always-allow-paths: {p:?} is not a path (it must start with /)");
        }
        if p.find('*').is_some_and(|i| i != p.len() - 1) {
            anyhow::bail!("--authorization-always-allow-paths: {p:?}: * is allowed only at the end");
        }
        out.push(p.to_string());
    }
    Ok(out)
}

/// `user` with `system:authenticated` among its groups.
fn authenticated(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        user.groups.push(AUTHENTICATED_GROUP.into());
    }
    user
}

/// The non-resource `SubjectAccessReview` for `user` doing `verb` on `path`.
pub fn access_review_spec(user: &UserInfo, verb: &str, path: &str) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
        groups: Some(user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
        non_resource_attributes: Some(NonResourceAttributes { path: Some(path.into()), verb: Some(verb.into()) }),
        ..Default::default()
    }
}

impl<R: Reviewer> Delegated<R> {
    pub fn new(reviewer: R, x509: Option<Arc<X509Authenticator>>, settings: Settings) -> Self {
        Delegated {
            reviewer,
            x509,
            settings,
            tokens: TtlCache::new(DEFAULT_MAX_ENTRIES),
            token_keys: TokenKeys::new(),
            decisions: TtlCache::new(DEFAULT_MAX_ENTRIES),
        }
    }

    /// Who sent the request; `None`: 401.
    pub async fn authenticate(&self, req: &http::request::Parts) -> Option<UserInfo> {
        let mut cert_error = None;
        if let Some(x509) = &self.x509 {
            match x509.authenticate(req) {
                AuthResult::Authenticated(user) => return Some(authenticated(user)),
                AuthResult::Invalid(e) => cert_error = Some(e),
                AuthResult::NoCredentials => {}
            }
        }
        if let Some(token) = bearer_token(req) {
            return self.token_user(token).await.map(authenticated);
        }
        if let Some(e) = cert_error {
            tracing::info!(error = %e, "client certificate not accepted");
            return None;
        }
        Some(UserInfo::anonymous())
    }

    async fn token_user(&self, token: &str) -> Option<UserInfo> {
        let key = self.token_keys.key(&[], token);
        if let Some(user) = self.tokens.get(&key, Instant::now()) {
            return user;
        }
        match self.reviewer.review_token(token).await {
            Ok(user) => {
                self.tokens.put(key, user.clone(), self.settings.token_ttl, Instant::now());
                user
            }
            Err(e) => {
                tracing::warn!(error = %e, "TokenReview failed: the request is not authenticated");
                None
            }
        }
    }

    /// Whether `user` may `verb` (lowercase HTTP method) `path`.
    pub async fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Decision {
        if always_allowed(&self.settings.always_allow_paths, path)
            || user.groups.iter().any(|g| ALWAYS_ALLOW_GROUPS.contains(&g.as_str()))
        {
            return Decision::Allow;
        }
        let spec = access_review_spec(user, verb, path);
        // Hashed: a key holds no path of unbounded length.
        let key = kustos_ca::fingerprint(serde_json::to_string(&spec).unwrap_or_default().as_bytes());
        let answer = match self.decisions.get(&key, Instant::now()) {
            Some(answer) => answer,
            None => match self.reviewer.review_access(spec).await {
                Ok(answer) => {
                    let ttl = if answer.0 { self.settings.allow_ttl } else { self.settings.deny_ttl };
                    self.decisions.put(key, answer.clone(), ttl, Instant::now());
                    answer
                }
                Err(e) => return Decision::Error(e.to_string()),
            },
        };
        match answer {
            (true, _) => Decision::Allow,
            (false, reason) => Decision::Deny(reason),
        }
    }
}

/// The 403 body upstream gives for a non-resource request.
pub fn forbidden(user: &str, verb: &str, path: &str, reason: &str) -> Response {
    let mut message = format!("forbidden: User {user:?} cannot {verb} path {path:?}");
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    ApiError::forbidden("", "", "", message).into_response()
}

/// The middleware: authentication, then authorization, then the handler.
pub async fn guard<R: Reviewer>(State(auth): State<Arc<Delegated<R>>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Some(user) = auth.authenticate(&parts).await else {
        return ApiError::Unauthorized("Unauthorized".into()).into_response();
    };
    let verb = parts.method.as_str().to_ascii_lowercase();
    let path = parts.uri.path().to_string();
    match auth.authorize(&user, &verb, &path).await {
        Decision::Allow => next.run(Request::from_parts(parts, body)).await,
        Decision::Deny(reason) => {
            tracing::debug!(user = %user.name, verb = %verb, path = %path, reason = %reason, "forbidden");
            forbidden(&user.name, &verb, &path, &reason)
        }
        Decision::Error(e) => {
            tracing::warn!(user = %user.name, path = %path, error = %e, "SubjectAccessReview failed");
            let body = format!("Internal Server Error: {:?}: {e}", parts.uri.to_string());
            let mut resp = (http::StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
            resp.headers_mut().insert("x-content-type-options", http::HeaderValue::from_static("nosniff"));
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens `good-<name>` are user `<name>`; `fail` makes the review fail. Users named in
    /// `allowed` may anything; `broken` makes the access review fail.
    #[derive(Default)]
    struct Fake {
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
        allowed: Vec<&'static str>,
    }

    impl Reviewer for Fake {
        async fn review_token(&self, token: &str) -> anyhow::Result<Option<UserInfo>> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            if token == "fail" {
                anyhow::bail!("connection refused");
            }
            Ok(token.strip_prefix("good-").map(|n| UserInfo::with_groups(n, &["team"])))
        }
        async fn review_access(&self, spec: SubjectAccessReviewSpec) -> anyhow::Result<(bool, String)> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            let user = spec.user.unwrap_or_default();
            if user == "broken" {
                anyhow::bail!("the apiserver is away");
            }
            let allowed = self.allowed.contains(&user.as_str());
            Ok((allowed, if allowed { String::new() } else { "no RBAC rule".into() }))
        }
    }

    fn settings() -> Settings {
        Settings {
            token_ttl: Duration::from_secs(10),
            allow_ttl: Duration::from_secs(10),
            deny_ttl: Duration::from_secs(10),
            always_allow_paths: parse_always_allow_paths(&[
                "/healthz".into(),
                "/readyz".into(),
                "/livez".into(),
                "/debug/*".into(),
            ])
            .unwrap_or_default(),
        }
    }

    fn parts(auth: Option<&str>) -> http::request::Parts {
        let mut b = http::Request::get("/metrics");
        if let Some(a) = auth {
            b = b.header(http::header::AUTHORIZATION, a);
        }
        b.body(()).unwrap_or_default().into_parts().0
    }

    #[tokio::test]
    async fn authentication_table() {
        let d = Delegated::new(Fake::default(), None, settings());
        // authorization header, wanted user name and groups (None: 401)
        type Want = Option<(&'static str, &'static [&'static str])>;
        let cases: &[(Option<&str>, Want)] = &[
            (None, Some(("system:anonymous", &["system:unauthenticated"]))),
            (Some("Bearer good-prometheus"), Some(("prometheus", &["team", "system:authenticated"]))),
            (Some("bearer good-p2"), Some(("p2", &["team", "system:authenticated"]))),
            (Some("Bearer bad"), None),
            (Some("Bearer fail"), None),
            // Not a bearer token: no credentials, as upstream.
            (Some("Basic dXNlcjpwYXNz"), Some(("system:anonymous", &["system:unauthenticated"]))),
        ];
        for (header, want) in cases {
            let got = d.authenticate(&parts(*header)).await;
            let got = got.as_ref().map(|u| (u.name.as_str(), u.groups.iter().map(String::as_str).collect::<Vec<_>>()));
            assert_eq!(got, want.map(|(n, g)| (n, g.to_vec())), "{header:?}");
        }
    }

    #[tokio::test]
    async fn token_answers_are_cached_both_ways_but_failures_are_not() {
        let d = Delegated::new(Fake::default(), None, settings());
        for _ in 0..3 {
            assert!(d.authenticate(&parts(Some("Bearer good-a"))).await.is_some());
            assert!(d.authenticate(&parts(Some("Bearer bad"))).await.is_none());
            assert!(d.authenticate(&parts(Some("Bearer fail"))).await.is_none());
        }
        assert_eq!(d.reviewer.token_reviews.load(Ordering::SeqCst), 2 + 3, "one review per token, every failure again");

        let no_cache = Delegated::new(Fake::default(), None, Settings { token_ttl: Duration::ZERO, ..settings() });
        for _ in 0..3 {
            assert!(no_cache.authenticate(&parts(Some("Bearer good-a"))).await.is_some());
        }
        assert_eq!(no_cache.reviewer.token_reviews.load(Ordering::SeqCst), 3, "a zero TTL caches nothing");
    }

    #[tokio::test]
    async fn authorization_table() {
        let fake = Fake { allowed: vec!["prometheus"], ..Default::default() };
        let d = Delegated::new(fake, None, settings());
        let anonymous = UserInfo::anonymous();
        let prometheus = UserInfo::with_groups("prometheus", &["system:authenticated"]);
        let nobody = UserInfo::with_groups("nobody", &["system:authenticated"]);
        let master = UserInfo::with_groups("admin", &["system:masters"]);
        let broken = UserInfo::with_groups("broken", &[]);
        // user, verb, path, decision, whether a review was asked
        let cases: &[(&UserInfo, &str, &str, Decision, bool)] = &[
            (&anonymous, "get", "/healthz", Decision::Allow, false),
            (&anonymous, "get", "/readyz", Decision::Allow, false),
            (&anonymous, "get", "/livez", Decision::Allow, false),
            (&anonymous, "get", "/debug/pprof", Decision::Allow, false),
            (&anonymous, "get", "/healthz/extra", Decision::Deny("no RBAC rule".into()), true),
            (&anonymous, "get", "/metrics", Decision::Deny("no RBAC rule".into()), true),
            (&nobody, "get", "/metrics", Decision::Deny("no RBAC rule".into()), true),
            (&prometheus, "get", "/metrics", Decision::Allow, true),
            (&master, "get", "/metrics", Decision::Allow, false),
            (&broken, "get", "/metrics", Decision::Error("the apiserver is away".into()), true),
        ];
        for (user, verb, path, want, asked) in cases {
            let before = d.reviewer.access_reviews.load(Ordering::SeqCst);
            assert_eq!(d.authorize(user, verb, path).await, *want, "{} {verb} {path}", user.name);
            let after = d.reviewer.access_reviews.load(Ordering::SeqCst);
            assert_eq!(after - before, usize::from(*asked), "{} {verb} {path}: reviews", user.name);
        }
        // Answers are remembered (allowed and denied), errors are not.
        let before = d.reviewer.access_reviews.load(Ordering::SeqCst);
        assert_eq!(d.authorize(&prometheus, "get", "/metrics").await, Decision::Allow);
        assert_eq!(d.authorize(&nobody, "get", "/metrics").await, Decision::Deny("no RBAC rule".into()));
        assert_eq!(d.reviewer.access_reviews.load(Ordering::SeqCst), before, "cached answers");
        assert!(matches!(d.authorize(&broken, "get", "/metrics").await, Decision::Error(_)));
        assert_eq!(d.reviewer.access_reviews.load(Ordering::SeqCst), before + 1, "errors are asked again");
        // Another verb or path is another question.
        assert_eq!(d.authorize(&prometheus, "post", "/metrics").await, Decision::Allow);
        assert_eq!(d.reviewer.access_reviews.load(Ordering::SeqCst), before + 2);
    }

    #[test]
    fn the_review_asks_about_the_path_for_the_whole_user() {
        let mut user = UserInfo::with_groups("system:serviceaccount:monitoring:prometheus", &["system:authenticated"]);
        user.uid = "42".into();
        user.extra.insert("authentication.kubernetes.io/pod-name".into(), vec!["p".into()]);
        let spec = access_review_spec(&user, "get", "/metrics");
        let v = serde_json::to_value(&spec).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({
                "user": "system:serviceaccount:monitoring:prometheus",
                "uid": "42",
                "groups": ["system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"}
            })
        );
    }

    #[test]
    fn always_allow_paths_parse_and_match() {
        let ok = parse_always_allow_paths(&["/healthz".into(), " /debug/* ".into(), "".into()]).unwrap_or_default();
        assert_eq!(ok, ["/healthz", "/debug/*"]);
        for bad in ["healthz", "/a*b", "/**"] {
            assert!(parse_always_allow_paths(&[bad.into()]).is_err(), "{bad}");
        }
        // path, allowed
        let cases =
            [("/healthz", true), ("/healthz/", false), ("/healthzz", false), ("/debug/", true), ("/debug", false)];
        for (path, want) in cases {
            assert_eq!(always_allowed(&ok, path), want, "{path}");
        }
    }

    #[tokio::test]
    async fn refusals_are_upstream_status_bodies() {
        let resp = forbidden("system:anonymous", "get", "/metrics", "");
        assert_eq!(resp.status(), 403);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap_or_default();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v["message"], "forbidden: User \"system:anonymous\" cannot get path \"/metrics\"");
        assert_eq!((v["reason"].as_str(), v["code"].as_u64()), (Some("Forbidden"), Some(403)));
        let with_reason = forbidden("u", "get", "/metrics", "no RBAC rule");
        let body = axum::body::to_bytes(with_reason.into_body(), 1 << 16).await.unwrap_or_default();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v["message"], "forbidden: User \"u\" cannot get path \"/metrics\": no RBAC rule");
    }
}
