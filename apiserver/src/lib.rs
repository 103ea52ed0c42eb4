//! kustos-apiserver: a minimal Kubernetes-compatible apiserver.
//!
//! The request path, outermost first, one folder per stage (docs/ARCHITECTURE.md draws it
//! with every file):
//!
//! ```text
//! TLS (http/serve.rs: rustls, client certificate captured per connection; pki/)
//!  → request info (http/request_info.rs: verb, group, version, resource, namespace, name)
//!  → audit ID (audit/: the Audit-Id header) → panic catch → authentication (authn/: x509
//!    client cert, bootstrap token, service-account JWT; none → anonymous; bad → 401)
//!  → the audit log's filter, when on (audit/) → impersonation (authn/impersonation.rs)
//!  → flow control (flowcontrol/: API Priority and Fairness; 429)
//!  → authorization (authz/: system:masters, the Node authorizer, RBAC; deny → 403)
//!  → dispatch: api/discovery.rs, openapi/, http/health.rs, or the endpoint handlers
//!    (api/: rest/, watch.rs, reviews.rs)
//!      → bodies in and out (wire/: JSON, YAML, protobuf, content negotiation; patches and
//!        apply in machinery/)
//!      → the kind's strategy (registry/: defaults, validation, subresources, Table columns)
//!      → admission (admission/: the ordered chain of named plugins)
//!      → storage (storage/: revisioned KV with compare-and-swap, history and watch)
//! ```
//!
//! Imports go one way, bottom to top; the layer table in docs/ARCHITECTURE.md says which
//! folder may import which, and `kustos-layout` checks it.
//!
//! Objects travel as `serde_json::Value` in wire form and are checked against the
//! `k8s-openapi` types by each kind's strategy.

pub mod admission;
pub mod api;
pub mod audit;
mod config;
pub use config::{Config, StorageConfig};
pub mod authn;
pub mod authz;
pub mod error;
pub mod flowcontrol;
pub mod http;
pub mod identity;
pub mod loops;
pub mod machinery;
pub mod meta;
pub mod openapi;
pub mod pki;
pub mod registry;
pub mod storage;
pub mod tasks;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod validation;
pub mod wire;
pub mod work;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ::http::{header, HeaderValue, StatusCode};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;

use crate::api::rest::{Call, Params, Reply};
use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::registry::Registry;
use crate::storage::Storage;

/// Everything the handlers share.
pub struct AppState {
    /// The built-in kinds (fixed; looked up first on every request).
    pub registry: Registry,
    pub storage: Arc<dyn Storage>,
    /// The storage of each built-in kind kept in another kind's storage (events.k8s.io/v1
    /// Events): a converting view of `storage` ([`registry::storage_of`]), by group, version
    /// and resource. See [`AppState::store_for`].
    views: Vec<(ResourceId, Arc<dyn Storage>)>,
    /// Built-in kinds plus the resources of established CRDs, and the OpenAPI documents:
    /// swapped when CRDs change (`crd`).
    pub crds: loops::crd::Dynamic,
    pub health: http::health::Health,
    /// `host:port` clients use (for `/api` serverAddressByClientCIDRs).
    pub server_address: String,
    pub security: Security,
    /// How concurrent requests are limited (API Priority and Fairness or max-in-flight); set
    /// once at start, unset (no limits) in tests that build the state by hand.
    pub limiter: std::sync::OnceLock<flowcontrol::filter::Limiter>,
    /// Request metrics, the access log and unserved-path warnings (`api::observe`).
    pub observe: api::observe::Observer,
    /// The audit log, when `--audit-policy-file` and `--audit-log-path` are given (set at start).
    pub audit: std::sync::OnceLock<Arc<audit::Auditor>>,
    /// The background loops (CRDs, flow control, CA files, ...): stopped by [`Running::stop`],
    /// aborted when the state is dropped. A loop holds a `Weak` of this state, never an `Arc`.
    pub tasks: tasks::Tasks,
    /// This state itself, for the writes made through [`registry::loopback::Loopback`] (the
    /// REST handlers take the `Arc`).
    me: std::sync::Weak<AppState>,
}

/// A served resource by group, version and resource name.
type ResourceId = (&'static str, &'static str, &'static str);

/// Who is asking and what they may do: used on the request path and by the handlers that
/// answer reviews, issue tokens and check escalation.
#[derive(Clone)]
pub struct Security {
    pub authn: Arc<authn::AuthnChain>,
    pub authz: Arc<dyn authz::Authorizer>,
    /// The RBAC objects (roleRef resolution for escalation checks), current after writes.
    pub rbac: Arc<authz::rbac::cache::RbacCache>,
    /// Service-account token issuing and checking (None: TokenRequest and OIDC discovery
    /// are not served).
    pub service_accounts: Option<Arc<pki::service_account::ServiceAccountTokens>>,
}

impl AppState {
    pub fn new(storage: Arc<dyn Storage>, server_address: String, security: Security) -> Arc<Self> {
        Self::with_registry(Registry::builtin(), storage, server_address, security, tasks::Tasks::default())
    }

    /// Serving the kinds of `registry` (the built-in ones, less what `--runtime-config` turns off),
    /// with `tasks` the supervisor of the loops already started for it.
    pub fn with_registry(
        registry: Registry,
        storage: Arc<dyn Storage>,
        server_address: String,
        security: Security,
        tasks: tasks::Tasks,
    ) -> Arc<Self> {
        let crds = loops::crd::Dynamic::new(&registry);
        let views = registry
            .resources
            .iter()
            .filter(|def| def.strategy.stored_as().is_some())
            .map(|def| ((def.group, def.version, def.resource), registry::storage_of(def, &storage)))
            .collect();
        Arc::new_cyclic(|me| AppState {
            me: me.clone(),
            registry,
            storage,
            views,
            crds,
            health: http::health::Health::default(),
            server_address,
            security,
            limiter: std::sync::OnceLock::new(),
            observe: api::observe::Observer::default(),
            audit: std::sync::OnceLock::new(),
            tasks,
        })
    }

    /// This state, held weakly, as the apiserver's own reads and writes see it (for a
    /// background loop below the top layer).
    pub fn loopback(&self) -> std::sync::Weak<dyn registry::loopback::Loopback> {
        self.me.clone()
    }

    /// The storage the objects of `def` are read from and written to: `storage`, or the
    /// converting view of it for a kind kept in another kind's storage.
    pub fn store_for(&self, def: &registry::ResourceDef) -> &Arc<dyn Storage> {
        let id = (def.group, def.version, def.resource);
        self.views.iter().find(|(k, _)| *k == id).map_or(&self.storage, |(_, s)| s)
    }
}

/// The one way to build the HTTP service, in `main` and in tests.
///
/// The layers are stacked on the handler once, outermost first, and the stack is the router's
/// one service. (`Router::layer` would box each layer around the one before it, so that every
/// request cloned the whole chain of boxes again at each layer.)
pub fn router(state: Arc<AppState>) -> Router {
    use axum::middleware::{from_fn, from_fn_with_state};
    let authn = state.security.authn.clone();
    let authz = state.security.authz.clone();
    let auditor = state.audit.get().cloned();
    let handler = Router::new().fallback(dispatch).with_state(state.clone());
    let stack = tower::ServiceBuilder::new()
        .layer(from_fn(resolve_request_info))
        .layer(from_fn_with_state(auditor.clone(), audit::init))
        .layer(from_fn(api::rest::status_errors_negotiated))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::internal("the server panicked while handling the request").into_response()
        }))
        .layer(from_fn_with_state(authn, authn::authenticate))
        // With the log on, impersonation sits between the audit filter (outside) and the layer
        // recording who the request acts as (inside).
        .option_layer(auditor.clone().map(|a| from_fn_with_state(a, audit::filter)))
        .layer(from_fn_with_state(authz.clone(), authn::impersonation::impersonate))
        .option_layer(auditor.map(|_| from_fn(audit::impersonated)))
        .layer(from_fn_with_state(state.clone(), api::observe::observe))
        .layer(from_fn_with_state(state, flowcontrol::filter::filter::<AppState>))
        .layer(from_fn_with_state(authz, authz::authorize))
        .service(handler);
    Router::new().fallback_service(stack)
}

async fn resolve_request_info(mut req: Request, next: Next) -> Response {
    let mut info = http::request_info::resolve(req.method(), req.uri().path(), req.uri().query());
    if let Some(agent) = req.headers().get(header::USER_AGENT) {
        info.user_agent = String::from_utf8_lossy(agent.as_bytes()).into_owned();
    }
    // Shared, not copied, by the layers that keep it past the handler's answer.
    req.extensions_mut().insert(Arc::new(info));
    next.run(req).await
}

fn not_found_path() -> ApiError {
    ApiError::NotFound {
        message: "the server could not find the requested resource".into(),
        subject: Default::default(),
    }
}

async fn dispatch(State(state): State<Arc<AppState>>, mut req: Request) -> Response {
    // Taken out: nothing below the handler reads them from the request.
    let (Some(info), Some(user)) =
        (req.extensions_mut().remove::<Arc<RequestInfo>>(), req.extensions_mut().remove::<UserInfo>())
    else {
        return ApiError::internal("request without identity").into_response();
    };
    if !info.is_resource_request {
        return non_resource(&state, &info, req).await.unwrap_or_else(IntoResponse::into_response);
    }
    match resource(&state, &info, &user, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn json_response(body: &serde_json::Value, content_type: &'static str) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = (StatusCode::OK, bytes).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

async fn non_resource(state: &Arc<AppState>, info: &RequestInfo, req: Request) -> Result<Response, ApiError> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let query = req.uri().query().map(str::to_string);
    if req.method() != ::http::Method::GET && req.method() != ::http::Method::HEAD {
        return Err(ApiError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({})",
            info.verb
        )));
    }
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if let Some((code, body)) = http::health::respond(&path, query.as_deref(), &state.health, &state.storage).await {
        let mut r = (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        return Ok(r);
    }
    let served = state.crds.current();
    let reg = &served.registry;
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api"] => Ok(match api::discovery::wants_aggregated(&accept) {
            Some(v) => aggregated_response(api::discovery::aggregated(reg, true, v), v),
            None => json_response(&api::discovery::api_versions(&state.server_address), "application/json"),
        }),
        ["apis"] => Ok(match api::discovery::wants_aggregated(&accept) {
            Some(v) => aggregated_response(api::discovery::aggregated(reg, false, v), v),
            None => json_response(&api::discovery::api_group_list(reg), "application/json"),
        }),
        ["api", v] => api::discovery::api_resource_list(reg, "", v)
            .map(|b| json_response(&b, "application/json"))
            .ok_or_else(not_found_path),
        ["apis", g] => {
            api::discovery::api_group(reg, g).map(|b| json_response(&b, "application/json")).ok_or_else(not_found_path)
        }
        ["apis", g, v] => api::discovery::api_resource_list(reg, g, v)
            .map(|b| json_response(&b, "application/json"))
            .ok_or_else(not_found_path),
        ["version"] => Ok(json_response(&api::discovery::version_info(), "application/json")),
        ["metrics"] => Ok(metrics_response(state).await),
        ["debug", "api_priority_and_fairness", dump] => {
            flowcontrol_dump(state, dump, query.as_deref()).ok_or_else(not_found_path)
        }
        [".well-known", "openid-configuration"] => {
            api::oidc::openid_configuration_response(state).ok_or_else(not_found_path)
        }
        ["openid", "v1", "jwks"] => api::oidc::jwks_response(state).ok_or_else(not_found_path),
        ["openapi", "v2"] => Ok(served.openapi.v2_response(&accept)),
        ["openapi", "v3"] => Ok(served.openapi.v3_index_response()),
        ["openapi", "v3", rest @ ..] => {
            served.openapi.v3_response(&rest.join("/"), query.as_deref()).ok_or_else(not_found_path)
        }
        _ => Err(not_found_path()),
    }
}

fn text_response(body: String, content_type: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `/metrics` (OpenMetrics text): flow control's, then requests, stored objects, the process
/// and, in `kustos server`, the controllers'.
async fn metrics_response(state: &AppState) -> Response {
    let flow = match state.limiter.get() {
        Some(flowcontrol::filter::Limiter::Apf(fc)) => fc.metrics.encode(),
        Some(flowcontrol::filter::Limiter::MaxInFlight(m)) => m.metrics.encode(),
        None => String::new(),
    };
    let mut text = flow.trim_end().strip_suffix("# EOF").unwrap_or(&flow).to_string();
    text.push_str(&api::observe::encode(state).await);
    text.push_str(&state.tasks.encode());
    if let Some(a) = state.audit.get() {
        text.push_str(&a.encode_metrics());
    }
    text.push_str("# EOF\n");
    text_response(text, flowcontrol::metrics::CONTENT_TYPE)
}

/// `/debug/api_priority_and_fairness/<dump>` (404 when flow control is off).
fn flowcontrol_dump(state: &AppState, dump: &str, query: Option<&str>) -> Option<Response> {
    let Some(flowcontrol::filter::Limiter::Apf(fc)) = state.limiter.get() else { return None };
    let text = match dump {
        "dump_priority_levels" => flowcontrol::debug::priority_levels(fc),
        "dump_queues" => flowcontrol::debug::queues(fc),
        "dump_requests" => {
            let details =
                http::request_info::query_param(query, "includeRequestDetails").is_some_and(|v| !v.is_empty());
            flowcontrol::debug::requests(fc, details)
        }
        _ => return None,
    };
    Some(text_response(text, "text/plain; charset=utf-8"))
}

fn aggregated_response(body: serde_json::Value, version: &'static str) -> Response {
    let ct = if version == "v2" {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    };
    json_response(&body, ct)
}

async fn resource(
    state: &Arc<AppState>,
    info: &RequestInfo,
    user: &UserInfo,
    req: Request,
) -> Result<Response, ApiError> {
    // Built-in kinds first (no lock); custom resources from the current snapshot.
    let served;
    let def = match state.registry.find(&info.api_group, &info.api_version, &info.resource) {
        Some(def) => def,
        None => {
            served = state.crds.current();
            served.registry.find(&info.api_group, &info.api_version, &info.resource).ok_or_else(not_found_path)?
        }
    };
    let is_namespaces = def.strategy.role() == registry::Role::Namespace;
    if info.extra_parts > 0 {
        return Err(not_found_path());
    }
    if !def.namespaced && !info.namespace.is_empty() && !is_namespaces {
        return Err(not_found_path());
    }
    if def.namespaced && info.namespace.is_empty() && !matches!(info.verb.as_str(), "list" | "watch") {
        return Err(if info.verb == "create" || info.verb == "deletecollection" {
            ApiError::MethodNotAllowed(format!(
                "the server does not allow this method on the requested resource ({})",
                info.verb
            ))
        } else {
            not_found_path()
        });
    }
    if !info.subresource.is_empty() && !def.subresources.contains(&info.subresource.as_str()) {
        return Err(not_found_path());
    }
    // A verb the kind does not serve (namespaces have no deletecollection, as upstream) is
    // refused here, before any handler could act on it.
    if info.subresource.is_empty() && !registry::resource_verbs(def).contains(&info.verb.as_str()) {
        return Err(ApiError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({})",
            info.verb
        )));
    }
    let handler = api::create_handler(def, &info.subresource);
    let special = def.create_only || handler.is_some();
    if special && info.verb != "create" {
        return Err(ApiError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({})",
            info.verb
        )));
    }
    if info.verb == "create" && !info.name.is_empty() && !special {
        return Err(ApiError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({})",
            error::group_resource(def.group, def.resource)
        )));
    }
    let headers = req.headers().clone();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
    let out = wire::negotiate::negotiate(
        accept.as_deref(),
        wire::protobuf::encode::has_message(&def.api_version(), def.kind),
    )?;
    let params = Params::parse(req.uri().query());
    if matches!(info.verb.as_str(), "list" | "watch") {
        let a = admission::Attributes::read(def, info, user, params.get("fieldSelector"));
        admission::chain().admit(&state.admission_services(), &a).await?;
    }
    let pretty = params.flag("pretty").unwrap_or(false);
    let content_type = wire::negotiate::essence(headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
    let capture = req.extensions().get::<audit::Capture>().cloned();
    let body = http::body::read_limited(req.into_body(), api::rest::MAX_BODY).await?;
    if let Some(c) = &capture {
        c.request_body(&body);
    }
    let call = Call { state, def, info, user, params, out: out.clone() };
    let reply: Reply = match (info.verb.as_str(), handler) {
        ("create", _) if def.create_only => api::reviews::create(&call, &body, &content_type).await?,
        ("create", Some(h)) => {
            http::annotations::scoped(capture.as_ref().map(audit::Capture::annotations), h(&call, &body, &content_type))
                .await?
        }
        ("get", _) => api::rest::get(&call).await?,
        ("list", _) => return api::rest::list(&call, &headers, pretty).await,
        ("watch", _) => return api::watch::watch(&call).await,
        ("create", _) => api::rest::create(&call, &body, &content_type).await?,
        ("update", _) => api::rest::update(&call, &body, &content_type).await?,
        ("patch", _) => api::rest::patch(&call, &body, &content_type).await?,
        ("delete", _) => api::rest::delete(&call, &body, &content_type).await?,
        ("deletecollection", _) => api::rest::delete_collection(&call, &body, &content_type).await?,
        (other, _) => {
            return Err(ApiError::MethodNotAllowed(format!(
                "the server does not allow this method on the requested resource ({other})"
            )))
        }
    };
    let resp = api::rest::render(reply.code, &reply.body, &out, &headers, pretty, &reply.warnings);
    if let Some(c) = capture {
        c.response_object(reply.body);
    }
    Ok(resp)
}

/// Create what a fresh cluster has: the four system namespaces.
pub async fn bootstrap(state: &Arc<AppState>) -> anyhow::Result<()> {
    let Some(def) = state.registry.namespace_kind() else {
        anyhow::bail!("namespaces are not registered");
    };
    let user = UserInfo::apiserver();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        if state.storage.get(&def.key(None, ns)).await?.is_some() {
            continue;
        }
        let info = RequestInfo {
            is_resource_request: true,
            verb: "create".into(),
            api_version: "v1".into(),
            resource: "namespaces".into(),
            ..Default::default()
        };
        let call = Call { state, def, info: &info, user: &user, params: Params::default(), out: Default::default() };
        let body =
            bytes::Bytes::from(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).to_string());
        match api::rest::create(&call, &body, "application/json").await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => anyhow::bail!("creating namespace {ns}: {e}"),
        }
    }
    Ok(())
}

/// The authorizers every server asks, in order: `system:masters`, the Node authorizer, RBAC
/// (over `rbac`, the cache [`authz::rbac::cache::install`] returned with the store).
pub fn default_authorizer(rbac: Arc<authz::rbac::cache::RbacCache>) -> Arc<dyn authz::Authorizer> {
    Arc::new(authz::Chain(vec![
        Arc::new(authz::MastersAuthorizer),
        Arc::new(authz::rbac::node::NodeAuthorizer::from_default_policy()),
        Arc::new(authz::rbac::authorizer::RbacAuthorizer::new(rbac)),
    ]))
}

/// What a server writes and loads before it serves (the same for `start` and the
/// in-process test server): the system namespaces, the served CRDs (and the task following
/// them), legacy token tracking, the default RBAC policy and the flow-control objects.
pub async fn prepare(
    state: &Arc<AppState>,
    policy: &authz::rbac::defaults::PolicyOptions,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    bootstrap(state).await?;
    loops::crd::start(state).await?;
    authn::serviceaccount::legacy_tracking::ensure_legacy_token_tracking(&**state, now).await?;
    authz::rbac::reconcile::ensure_default_policy(&**state, policy).await?;
    flowcontrol::maintain::ensure(&**state).await?;
    Ok(())
}

/// A started server.
pub struct Running {
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    pub state: Arc<AppState>,
    pub pki: pki::Pki,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stop accepting, finish, and wait for the serve loop; then stop every background loop
    /// ([`tasks::Tasks::shutdown`]) and wait until each has ended.
    pub async fn stop(mut self) {
        self.state.health.shutting_down.store(true, Ordering::SeqCst);
        // The CA-file loop ends with the listener: expected from here on.
        self.state.tasks.begin_stop();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = self.task.await;
        self.state.tasks.shutdown().await;
    }

    /// Wait until the serve loop ends.
    pub async fn wait(self) {
        let _ = self.task.await;
        self.state.tasks.shutdown().await;
    }
}

/// Put the configured request limiter in place (after the default flowcontrol objects exist).
async fn start_flow_control(
    state: &Arc<AppState>,
    cfg: &Config,
    changes: flowcontrol::feed::Changes,
) -> anyhow::Result<()> {
    let limiter = if cfg.enable_priority_and_fairness {
        let total = cfg.max_requests_inflight.saturating_add(cfg.max_mutating_requests_inflight);
        if total == 0 {
            anyhow::bail!(
                "--max-requests-inflight plus --max-mutating-requests-inflight must be positive with API Priority and Fairness"
            );
        }
        let fc = flowcontrol::dispatcher::FlowControl::new(total, flowcontrol::dispatcher::MAX_QUEUE_WAIT);
        flowcontrol::load(&**state, &fc).await?;
        flowcontrol::spawn(&state.tasks, state.loopback(), fc.clone(), changes);
        flowcontrol::filter::Limiter::Apf(fc)
    } else {
        flowcontrol::filter::Limiter::MaxInFlight(Box::new(flowcontrol::filter::MaxInFlight::new(
            cfg.max_requests_inflight,
            cfg.max_mutating_requests_inflight,
        )))
    };
    if state.limiter.set(limiter).is_err() {
        anyhow::bail!("the request limiter was already set");
    }
    Ok(())
}

/// Connections waiting to be accepted: room for thousands of kubelets connecting at once
/// (the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 4096;

fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A boxed background loop, to be run by the state's supervisor once the state exists.
type Loop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Open the configured store; also its compactor loop (holding the store weakly).
async fn open_storage(cfg: &Config) -> anyhow::Result<(Arc<dyn Storage>, Loop)> {
    Ok(match &cfg.storage {
        StorageConfig::Sqlite => {
            let store = Arc::new(storage::sqlite::SqliteStorage::open(&cfg.data_dir.join("kustos.db"))?);
            let compactor = storage::sqlite::SqliteStorage::compactor_every(
                store.clone(),
                cfg.history_revisions,
                cfg.compaction_interval,
            );
            (store, Box::pin(compactor))
        }
        StorageConfig::Etcd(etcd) => {
            let store = Arc::new(storage::etcd::EtcdStorage::connect(etcd).await?);
            tracing::info!(servers = %etcd.servers.join(","), prefix = %etcd.prefix, "storing objects in etcd");
            let compactor = storage::etcd::EtcdStorage::compactor_every(
                store.clone(),
                cfg.history_revisions,
                cfg.compaction_interval,
            );
            (store, Box::pin(compactor))
        }
    })
}

/// Start the apiserver: PKI, store, bootstrap objects, admin kubeconfig, HTTPS listener.
pub async fn start(cfg: Config) -> anyhow::Result<Running> {
    pki::service_account::signing_endpoint(
        cfg.service_account_signing_endpoint.as_deref(),
        &cfg.service_account_key_files,
    )
    .map_err(anyhow::Error::msg)?;
    // Read before anything is created, so a bad file stops the start.
    let token_webhook = cfg.token_webhook.as_ref().map(authn::webhook::WebhookAuthenticator::load).transpose()?;
    let registry =
        registry::runtime_config::apply(&Registry::builtin(), &cfg.runtime_config).map_err(anyhow::Error::msg)?;
    let auditor = audit::Auditor::start(&cfg.audit).map_err(anyhow::Error::msg)?;
    pki::data_dir::secure(&cfg.data_dir)?;
    let now = chrono::Utc::now();
    let (store, compactor) = open_storage(&cfg).await?;
    // On etcd the CA and the service-account keys are shared with the cluster's other
    // apiservers: take the cluster's before loading them.
    let pki_sync = match cfg.storage {
        StorageConfig::Etcd(_) => Some(pki::sync::PkiSync::start(store.clone(), &cfg.data_dir).await?),
        StorageConfig::Sqlite => None,
    };
    let mut pki = pki::ensure(&cfg.data_dir, &cfg.tls_sans, now)?;
    if let Some(sync) = &pki_sync {
        let round = sync.round().await.map_err(|e| e.context("sharing the PKI through etcd"))?;
        if !sync.follow()?.is_empty() {
            pki = pki::ensure(&cfg.data_dir, &cfg.tls_sans, now)?;
        }
        sync.set_followed(round.revision);
    }
    let listener = listen(SocketAddr::new(cfg.bind_address, cfg.secure_port))?;
    let addr = listener.local_addr()?;
    let host = if cfg.bind_address.is_unspecified() { IpAddr::from([127, 0, 0, 1]) } else { cfg.bind_address };
    let server_address = SocketAddr::new(host, addr.port()).to_string();
    // Every writer uses the wrapped store, so RBAC writes are seen by the next request.
    let (store, rbac_cache) = authz::rbac::cache::install(store);
    // Other apiservers write RBAC objects too.
    let rbac_follower =
        matches!(cfg.storage, StorageConfig::Etcd(_)).then(|| authz::rbac::cache::follower(&rbac_cache));
    let tasks = tasks::Tasks::default();
    let key_settings = pki::service_account::KeySettings {
        issuers: &cfg.service_account_issuers,
        api_audiences: &cfg.api_audiences,
        max_token_expiration: cfg.service_account_max_token_expiration,
        key_files: &cfg.service_account_key_files,
        signing_endpoint: cfg.service_account_signing_endpoint.as_deref(),
        reload_interval: cfg.client_ca_reload_interval,
        extend_expiration: cfg.service_account_extend_token_expiration,
    };
    let sa_tokens = Arc::new(
        pki::service_account::ServiceAccountTokens::start(&key_settings, &pki, &server_address, &tasks).await?,
    );
    let sa_authn = Arc::new(authn::serviceaccount::ServiceAccountAuthenticator::new(sa_tokens.clone(), store.clone())?);
    let api_audiences = sa_tokens.api_audiences().to_vec();
    let mut chain = authn::AuthnChain::new(&pki, cfg.anonymous_auth)?
        .with(sa_authn.clone())
        .with_pod_bindings(sa_authn)
        .with_api_audiences(api_audiences.clone());
    if cfg.enable_bootstrap_token_auth {
        chain = chain.with(Arc::new(authn::bootstrap_token::BootstrapTokenAuthenticator::for_registry(
            store.clone(),
            &registry,
            api_audiences.clone(),
            &tasks,
        )?));
    }
    let authn_config = match &cfg.authentication_config {
        Some(path) => {
            let id = identity::Identity::for_data_dir(&cfg.data_dir);
            let loaded = authn::authentication_config::AuthenticationConfig::load(
                path,
                cfg.service_account_issuers.clone(),
                chain.api_audiences().to_vec(),
                cfg.anonymous_auth_flag_set,
                &id.name,
                &tasks,
            )?;
            chain = chain.with_authentication_config(loaded.clone());
            Some(loaded)
        }
        None => None,
    };
    // Last, as upstream: the remote one after every local token authenticator.
    if let Some(webhook) = token_webhook {
        chain = chain.with(Arc::new(webhook.with_implicit_audiences(api_audiences)));
    }
    let authn = Arc::new(chain);
    let authz = default_authorizer(rbac_cache.clone());
    let state = AppState::with_registry(
        registry,
        store,
        server_address.clone(),
        Security { authn, authz, rbac: rbac_cache, service_accounts: Some(sa_tokens) },
        tasks,
    );
    state.observe.verbosity.store(cfg.verbosity, Ordering::Relaxed);
    if let Some(a) = auditor {
        let _ = state.audit.set(a);
    }
    let ok = |f: Loop| async move {
        f.await;
        Ok(())
    };
    state.tasks.spawn("compactor", ok(compactor));
    if let Some(follower) = rbac_follower {
        state.tasks.spawn("rbac-follower", ok(Box::pin(follower)));
    }
    let policy = authz::rbac::defaults::PolicyOptions { tls_bootstrap_bindings: cfg.tls_bootstrap_bindings };
    prepare(&state, &policy, now).await?;
    let apf_changes = flowcontrol::feed::spawn(&state.tasks, state.loopback());
    flowcontrol::maintain::spawn(&state.tasks, state.loopback(), flowcontrol::maintain::PERIOD, apf_changes.clone());
    pki::cluster_info::ensure(&*state, &format!("https://{server_address}"), &pki.ca_bundle_pem).await?;
    start_flow_control(&state, &cfg, apf_changes).await?;
    api::rest::delete::gc::spawn_startup_sweep(&state);
    let kubeconfig = pki::write_admin_kubeconfig(&cfg.data_dir, &pki, &format!("https://{server_address}"), now)?;
    let app = router(state.clone());
    let (tls_tx, tls_rx) = tokio::sync::watch::channel(http::serve::tls_config(&pki)?);
    let client_ca_files = authn::client_ca::follow(
        pki.dir.join("ca.crt"),
        authn::client_ca::State::new(kustos_ca::bundle::ca_certificates(&pki.ca_bundle_pem)?, now),
        state.security.authn.clone(),
        tls_tx,
        authn::client_ca::Serving {
            cert_path: pki.dir.join("apiserver.crt"),
            key_path: pki.dir.join("apiserver.key"),
            current: (pki.serving_cert_pem.clone(), pki.serving_key_pem.clone()),
        },
        cfg.client_ca_reload_interval,
        pki::cluster_info::follower(state.loopback(), state.tasks.clone(), format!("https://{server_address}")),
    );
    state.tasks.spawn("client-ca-files", client_ca_files);
    if let Some(c) = authn_config {
        let interval = cfg.authentication_config_reload_interval;
        let config = Arc::downgrade(&c);
        state.tasks.spawn("authentication-config", async move {
            authn::authentication_config::AuthenticationConfig::follow(config, interval).await;
            Ok(())
        });
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(http::serve::serve_dynamic(listener, tls_rx, app, async move {
        let _ = rx.await;
    }));
    if let Some(sync) = pki_sync {
        // On etcd, as kube-apiserver: an identity Lease per apiserver, here also saying which
        // shared PKI it follows.
        let id = identity::Identity::for_data_dir(&cfg.data_dir);
        identity::spawn(&state.tasks, state.loopback(), id, sync.followed());
        sync.spawn(&state.tasks, Arc::downgrade(&state), cfg.client_ca_reload_interval);
    }
    state.health.started.store(true, Ordering::SeqCst);
    Ok(Running { addr, kubeconfig, state, pki, shutdown: Some(tx), task })
}
