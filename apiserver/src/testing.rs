//! An in-process apiserver for tests: the router `main` serves ([`crate::router`]) over the
//! state `start` builds ([`crate::prepare`]: system namespaces, CRDs, default RBAC policy,
//! flow-control objects), on a throwaway SQLite store, with no TLS, no listener and no
//! process. Requests go through the whole request path — authentication, impersonation,
//! request info, authorization, admission, the registry's strategies, storage and watch —
//! by calling the router as a `tower` service.
//!
//! A test picks who is asking with a [`Caller`]: a user with groups (`Caller::admin()`,
//! `Caller::node("n1")`, `Caller::user(..)`), a raw bearer token (e.g. a bootstrap token,
//! checked by the real bootstrap-token authenticator), or nobody (anonymous). Users are
//! carried by a bearer token that only this server's authentication chain understands, so
//! the authentication middleware runs as it does for a client certificate.
//!
//! ```ignore
//! let srv = TestServer::new().await?;
//! let r = srv.post(&Caller::admin(), "/api/v1/namespaces/default/configmaps", &json!({..})).await;
//! assert_eq!(r.status, 201, "{r}");
//! let mut w = srv.watch(&Caller::admin(), "/api/v1/namespaces/default/configmaps?watch=1").await?;
//! let event = w.next().await; // bounded by `Watch::WAIT`
//! ```
//!
//! No flow control (the limiter stays unset), no cluster-info, no start-up garbage sweep: the
//! background work deletes trigger (`gc`) and the CRD task do run, on the test's runtime.

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod apply_tests;
#[cfg(test)]
mod gc_tests;
#[cfg(test)]
mod list_watch_tests;
#[cfg(test)]
pub(crate) mod serviceaccount;
#[cfg(test)]
mod serviceaccount_tests;
#[cfg(test)]
mod shutdown_tests;
#[cfg(test)]
mod write_tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Body;
use axum::Router;
use base64::Engine as _;
use http::{header, HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tower::ServiceExt as _;

use crate::authn::{AuthnChain, TokenAuthenticator, TokenResult, UserInfo};
use crate::storage::sqlite::SqliteStorage;
use crate::storage::Storage;
use crate::{AppState, Security};

/// Bearer tokens of [`Caller::User`] start with this; the rest is the user as base64url JSON.
const USER_TOKEN_PREFIX: &str = "kustos-test-user.";

/// Who sends a request.
#[derive(Debug, Clone)]
pub enum Caller {
    /// An authenticated user (also put into `system:authenticated` by authentication).
    User(UserInfo),
    /// A bearer token for the server's real token authenticators (bootstrap tokens).
    Token(String),
    /// No credentials: `system:anonymous`.
    Anonymous,
}

impl Caller {
    /// `kustos-admin` in `system:masters`, as the admin kubeconfig.
    pub fn admin() -> Self {
        Caller::user("kustos-admin", &["system:masters"])
    }

    /// A kubelet: `system:node:<name>` in `system:nodes`.
    pub fn node(name: &str) -> Self {
        Caller::user(&format!("system:node:{name}"), &["system:nodes"])
    }

    pub fn user(name: &str, groups: &[&str]) -> Self {
        Caller::User(UserInfo::with_groups(name, groups))
    }

    /// A bootstrap token `<id>.<secret>` (see [`TestServer::create_bootstrap_token`]).
    pub fn bootstrap_token(id: &str, secret: &str) -> Self {
        Caller::Token(format!("{id}.{secret}"))
    }

    pub fn bearer(&self) -> Option<String> {
        match self {
            Caller::User(u) => {
                let json = serde_json::json!({"name": u.name, "uid": u.uid, "groups": u.groups, "extra": u.extra});
                Some(format!(
                    "{USER_TOKEN_PREFIX}{}",
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
                ))
            }
            Caller::Token(t) => Some(t.clone()),
            Caller::Anonymous => None,
        }
    }
}

/// Authenticates the tokens of [`Caller::User`] (and nothing else).
struct TestUsers;

#[async_trait::async_trait]
impl TokenAuthenticator for TestUsers {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let Some(encoded) = token.strip_prefix(USER_TOKEN_PREFIX) else { return TokenResult::NotMine };
        let Ok(json) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded) else {
            return TokenResult::Invalid("test user token: not base64url".into());
        };
        let Ok(v) = serde_json::from_slice::<Value>(&json) else {
            return TokenResult::Invalid("test user token: not JSON".into());
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
        };
        let user = UserInfo {
            name: v["name"].as_str().unwrap_or_default().to_string(),
            uid: v["uid"].as_str().unwrap_or_default().to_string(),
            groups: strings(&v["groups"]),
            extra: v["extra"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default(),
        };
        TokenResult::Authenticated { user, audiences: audiences.to_vec() }
    }
}

/// The answer to one request: status, headers and the body (JSON when it parses, else
/// `Value::Null` with the text in `text`).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// `reason` of a Status body ("" when absent).
    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or_default()
    }

    /// `message` of a Status body ("" when absent).
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }

    /// `metadata.resourceVersion` of the body ("" when absent).
    pub fn resource_version(&self) -> &str {
        self.body["metadata"]["resourceVersion"].as_str().unwrap_or_default()
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.text)
    }
}

/// An open watch: its events, one JSON object per line.
pub struct Watch {
    body: Body,
    buf: Vec<u8>,
}

impl Watch {
    /// How long [`Watch::next`] waits for an event before it gives up.
    pub const WAIT: Duration = Duration::from_secs(10);

    /// The next event, or `None` when the stream ended or none came within [`Watch::WAIT`].
    pub async fn next(&mut self) -> Option<Value> {
        self.next_within(Self::WAIT).await
    }

    /// The next event within `wait`, or `None` (stream ended, nothing in time, or a line
    /// that is not JSON).
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line).ok();
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame()).await.ok()??.ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    /// Events until none comes within `quiet` (at most `max`): what a watch has to say now.
    pub async fn drain(&mut self, quiet: Duration, max: usize) -> Vec<Value> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.next_within(quiet).await {
                Some(e) => out.push(e),
                None => break,
            }
        }
        out
    }
}

/// The in-process server.
pub struct TestServer {
    pub state: Arc<AppState>,
    router: Router,
}

impl TestServer {
    /// A fresh server on an empty store, prepared as `start` prepares a real one.
    pub async fn new() -> anyhow::Result<Self> {
        let store: Arc<dyn Storage> = Arc::new(SqliteStorage::open_in_memory().context("opening the store")?);
        Self::with_storage(store).await
    }

    /// A server over `store` (e.g. one whose history a test compacts).
    pub async fn with_storage(store: Arc<dyn Storage>) -> anyhow::Result<Self> {
        let (store, rbac) = crate::authz::rbac::cache::install(store);
        let registry = crate::registry::Registry::builtin();
        let tasks = crate::tasks::Tasks::default();
        let bootstrap_tokens = crate::authn::bootstrap_token::BootstrapTokenAuthenticator::for_registry(
            store.clone(),
            &registry,
            Vec::new(),
            &tasks,
        )?;
        let authn = AuthnChain::from_parts(None, vec![Arc::new(TestUsers), Arc::new(bootstrap_tokens)], true);
        let security = Security {
            authn: Arc::new(authn),
            authz: crate::default_authorizer(rbac.clone()),
            rbac,
            service_accounts: None,
        };
        let state = AppState::with_registry(registry, store, "127.0.0.1:6443".into(), security, tasks);
        let policy = crate::authz::rbac::defaults::PolicyOptions { tls_bootstrap_bindings: true };
        crate::prepare(&state, &policy, chrono::Utc::now()).await?;
        state.health.started.store(true, std::sync::atomic::Ordering::SeqCst);
        let router = crate::router(state.clone());
        Ok(TestServer { state, router })
    }

    /// Stop the background loops (as [`crate::Running::stop`] does) and drop the server.
    pub async fn stop(self) {
        self.state.tasks.shutdown().await;
    }

    /// Send a request as `caller` and return the raw response.
    pub async fn send(&self, caller: &Caller, mut req: Request<Body>) -> http::Response<Body> {
        if let Some(token) = caller.bearer() {
            if let Ok(v) = http::HeaderValue::from_str(&format!("Bearer {token}")) {
                req.headers_mut().insert(header::AUTHORIZATION, v);
            }
        }
        match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// Send a request with an optional body of `content_type` and read the whole answer.
    pub async fn request(
        &self,
        caller: &Caller,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> Reply {
        let mut b = Request::builder().method(method).uri(path).header(header::ACCEPT, "application/json");
        if body.is_some() {
            b = b.header(header::CONTENT_TYPE, content_type);
        }
        let body = body.map(|v| Body::from(v.to_string())).unwrap_or_else(Body::empty);
        let req = match b.body(body) {
            Ok(r) => r,
            Err(e) => return Reply::invalid(format!("building the request: {e}")),
        };
        let resp = self.send(caller, req).await;
        read(resp).await
    }

    pub async fn get(&self, caller: &Caller, path: &str) -> Reply {
        self.request(caller, Method::GET, path, "", None).await
    }

    pub async fn post(&self, caller: &Caller, path: &str, body: &Value) -> Reply {
        self.request(caller, Method::POST, path, "application/json", Some(body)).await
    }

    pub async fn put(&self, caller: &Caller, path: &str, body: &Value) -> Reply {
        self.request(caller, Method::PUT, path, "application/json", Some(body)).await
    }

    /// PATCH with `content_type` (`application/merge-patch+json`,
    /// `application/strategic-merge-patch+json`, `application/json-patch+json`).
    pub async fn patch(&self, caller: &Caller, path: &str, content_type: &str, body: &Value) -> Reply {
        self.request(caller, Method::PATCH, path, content_type, Some(body)).await
    }

    /// DELETE, with DeleteOptions when `options` is given.
    pub async fn delete(&self, caller: &Caller, path: &str, options: Option<&Value>) -> Reply {
        self.request(caller, Method::DELETE, path, "application/json", options).await
    }

    /// Open a watch (`path` carries `?watch=1` or is a `/watch/` path); a refused watch is
    /// the error `Reply`.
    pub async fn watch(&self, caller: &Caller, path: &str) -> Result<Watch, Reply> {
        self.watch_accepting(caller, path, "application/json").await
    }

    /// [`TestServer::watch`] with the given `Accept` header (e.g. a metadata-only watch).
    pub async fn watch_accepting(&self, caller: &Caller, path: &str, accept: &str) -> Result<Watch, Reply> {
        let req = match Request::builder().uri(path).header(header::ACCEPT, accept).body(Body::empty()) {
            Ok(r) => r,
            Err(e) => return Err(Reply::invalid(format!("building the request: {e}"))),
        };
        let resp = self.send(caller, req).await;
        if resp.status() != StatusCode::OK {
            return Err(read(resp).await);
        }
        Ok(Watch { body: resp.into_body(), buf: Vec::new() })
    }

    /// A valid bootstrap token `<id>.<secret>` (Secret `kube-system/bootstrap-token-<id>`,
    /// usable for authentication, in `system:bootstrappers` as kubeadm's).
    pub async fn create_bootstrap_token(&self, id: &str, secret: &str) -> Reply {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {
                "token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
            },
        });
        self.post(&Caller::admin(), "/api/v1/namespaces/kube-system/secrets", &body).await
    }

    /// Poll `check` until it returns `Some` or `within` passes (for work done in background
    /// tasks, e.g. garbage collection).
    pub async fn eventually<T, F, Fut>(&self, within: Duration, mut check: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(v) = check().await {
                return Some(v);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            // Let background tasks run; a short pause between polls.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Reply {
    fn invalid(text: String) -> Self {
        Reply { status: StatusCode::BAD_REQUEST, headers: HeaderMap::new(), body: Value::Null, text }
    }
}

async fn read(resp: http::Response<Body>) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = match resp.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => return Reply { status, headers, body: Value::Null, text: format!("reading the body: {e}") },
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply { status, headers, body, text }
}
