//! The request-path filter: after authentication and impersonation, before authorization
//! (as upstream's handler chain). Every request is classified, tagged with the
//! `X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID` response headers,
//! and executes once its priority level grants it seats; a rejected request gets 429
//! `TooManyRequests` with `Retry-After`.
//!
//! With `--enable-priority-and-fairness=false` the upstream max-in-flight filter applies
//! instead: at most `--max-requests-inflight` read-only and `--max-mutating-requests-inflight`
//! mutating requests at once (watches and `system:masters` not counted), the rest 429.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use tokio::sync::Semaphore;

use super::classify::RequestDigest;
use super::dispatcher::{FlowControl, RequestDetails};
use super::estimate;
use super::metrics::KindLabels;
use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::http::request_info::{query_param, RequestInfo};

pub const FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";
pub const PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";
/// Seconds a client rejected by the max-in-flight limits is asked to wait (with APF, the
/// level's [`super::dropped::DroppedRequests`] decides).
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// How the apiserver limits concurrent requests.
pub enum Limiter {
    /// API Priority and Fairness.
    Apf(Arc<FlowControl>),
    /// The max-in-flight fallback.
    MaxInFlight(Box<MaxInFlight>),
}

/// Upstream's max-in-flight limits; `None`: no limit (a flag set to 0).
pub struct MaxInFlight {
    pub read_only: Option<Arc<Semaphore>>,
    pub mutating: Option<Arc<Semaphore>>,
    pub metrics: super::metrics::Metrics,
}

impl MaxInFlight {
    pub fn new(read_only: u32, mutating: u32) -> Self {
        let sem = |n: u32| (n > 0).then(|| Arc::new(Semaphore::new(n as usize)));
        MaxInFlight { read_only: sem(read_only), mutating: sem(mutating), metrics: super::metrics::Metrics::new() }
    }
}

/// Object counts and LIST estimates are kept per `group/resource`.
pub fn count_key(group: &str, resource: &str) -> String {
    format!("{group}/{resource}")
}

fn too_many_requests(retry_after: u64) -> Response {
    let mut r = ApiError::TooManyRequests("Too many requests, please try again later.".into()).into_response();
    r.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(retry_after));
    r
}

fn mutating(verb: &str) -> bool {
    !matches!(verb, "get" | "list" | "watch" | "head")
}

/// What holds the request limiter (the server state; none in tests that build it by hand).
pub trait Limited: Send + Sync + 'static {
    fn limiter(&self) -> Option<&Limiter>;
}

pub async fn filter<S: Limited>(State(state): State<Arc<S>>, req: Request, next: Next) -> Response {
    let Some(limiter) = state.limiter() else { return next.run(req).await };
    match limiter {
        Limiter::Apf(fc) => apf(fc, req, next).await,
        Limiter::MaxInFlight(m) => max_in_flight(m, req, next).await,
    }
}

/// The user and the request's information, borrowed from the request: a request without
/// them is not limited.
fn identity(req: &Request) -> Option<(&UserInfo, &RequestInfo)> {
    Some((req.extensions().get::<UserInfo>()?, req.extensions().get::<Arc<RequestInfo>>()?))
}

async fn apf(fc: &Arc<FlowControl>, req: Request, next: Next) -> Response {
    let Some((user, info)) = identity(&req) else { return next.run(req).await };
    let digest = RequestDigest {
        user: &user.name,
        groups: &user.groups,
        verb: &info.verb,
        is_resource_request: info.is_resource_request,
        api_group: &info.api_group,
        resource: &info.resource,
        subresource: &info.subresource,
        namespace: &info.namespace,
        path: &info.path,
    };
    let Some(c) = fc.classify(&digest) else {
        // Only possible while no configuration has been loaded yet.
        return next.run(req).await;
    };
    let seats = if info.verb == "list" {
        let limit = query_param(req.uri().query(), "limit").and_then(|l| l.parse::<u64>().ok());
        // `info.name` is set for a list pinned to one name by its field selector.
        let single = !info.name.is_empty();
        estimate::seats("list", single, limit, fc.object_count(&count_key(&info.api_group, &info.resource)))
    } else {
        1
    };
    // Only requests that may wait are shown in the debug dumps: built for those alone.
    let details = || RequestDetails {
        user: user.name.clone(),
        verb: info.verb.clone(),
        path: info.path.clone(),
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        api_version: if info.api_group.is_empty() {
            info.api_version.clone()
        } else {
            format!("{}/{}", info.api_group, info.api_version)
        },
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
    };
    let mut resp = match fc.admit(&c, seats, info.verb == "watch", details).await {
        Ok(ticket) => {
            // Requests executing, by kind, as upstream's APF filter reports them.
            let kind = if mutating(&info.verb) { "mutating" } else { "readOnly" };
            let gauge = fc.metrics.inflight.get_or_create(&KindLabels { request_kind: kind.into() }).clone();
            gauge.inc();
            // A watch answers once its initial state is read; the rest streams seat-free.
            let resp = next.run(req).await;
            gauge.dec();
            drop(ticket);
            resp
        }
        Err(_) => {
            let retry_after = fc.note_rejection(&c.level.name, chrono::Utc::now().timestamp());
            too_many_requests(u64::try_from(retry_after).unwrap_or(RETRY_AFTER_SECONDS))
        }
    };
    for (name, value) in [(FLOW_SCHEMA_UID, &c.schema_uid), (PRIORITY_LEVEL_UID, &c.level_uid)] {
        if let Ok(v) = HeaderValue::from_str(value) {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}

async fn max_in_flight(m: &MaxInFlight, req: Request, next: Next) -> Response {
    let Some((user, info)) = identity(&req) else { return next.run(req).await };
    if info.verb == "watch" || user.groups.iter().any(|g| g == crate::authn::MASTERS_GROUP) {
        return next.run(req).await;
    }
    let (sem, kind) = if mutating(&info.verb) { (&m.mutating, "mutating") } else { (&m.read_only, "readOnly") };
    let Some(sem) = sem else { return next.run(req).await };
    let Ok(permit) = sem.clone().try_acquire_owned() else { return too_many_requests(RETRY_AFTER_SECONDS) };
    let gauge = m.metrics.inflight.get_or_create(&KindLabels { request_kind: kind.into() }).clone();
    gauge.inc();
    let resp = next.run(req).await;
    gauge.dec();
    drop(permit);
    resp
}
