//! The audit middlewares. What enters: a request (its `RequestInfo`, its `UserInfo` once
//! authenticated); what leaves: the response, with an `Audit-Id` header, and the request's
//! events handed to the sink.
//!
//! - [`init`] (outermost but request info): the audit ID, the client's own `Audit-ID` header
//!   when it sent one (kept as is, as upstream), else a new UUID; echoed in the response's
//!   `Audit-Id` header on every response. When the log is on, a request refused by
//!   authentication (401) is recorded there, at `ResponseStarted`, without a user, as
//!   upstream's failed-authentication audit.
//! - [`filter`] (after authentication, before impersonation): the policy's level for the
//!   request; `RequestReceived` at once; for a long-running request (watch) `ResponseStarted`
//!   when the headers are ready and `ResponseComplete` when the stream ends, else
//!   `ResponseComplete` when the handler answers; `Panic` if the handler panics. Completed
//!   events carry the impersonated user, the response code (and an error's Status fields)
//!   and the authorizer's decision as `authorization.k8s.io/decision` and `/reason`.
//! - [`impersonated`] (after impersonation): who the request acts as.
//!
//! The handler hands over what it has anyway through a [`Capture`] in the request's
//! extensions: the request body it read (a shared handle, not a copy; at most
//! [`MAX_EVENT_BYTES`](super::event::MAX_EVENT_BYTES)) and, at `RequestResponse`, the object
//! it answered with. Nothing is parsed or encoded here: the sink's thread does that.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use axum::body::{Body, HttpBody as _};
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{FutureExt as _, StreamExt as _};
use http::{HeaderMap, HeaderValue, Uri};
use serde_json::Value;

use super::event::{timestamp, Event, ObjectReference, Pending, ResponseStatus, User, MAX_EVENT_BYTES};
use super::policy::{Attributes, Decision, Level, Stage};
use super::{Auditor, Mode};
use crate::authn::UserInfo;
use crate::authz::Decided;
use crate::error::ApiError;
use crate::http::annotations::Annotations;
use crate::http::request_info::RequestInfo;

/// The request and response header of the audit ID.
pub const HEADER: &str = "audit-id";
/// The largest error body read for `responseStatus`.
const MAX_STATUS_BYTES: u64 = 64 * 1024;
/// `X-Forwarded-For` addresses recorded at most.
const MAX_FORWARDED: usize = 16;

/// The request's audit ID, in its extensions.
#[derive(Debug, Clone)]
pub struct AuditId(pub Arc<str>);

/// On a response the filter saw (so [`init`] does not record it again).
#[derive(Debug, Clone, Copy)]
struct Audited;

/// Who the request acts as, set after impersonation.
#[derive(Debug, Clone, Default)]
struct ImpersonatedSlot(Arc<Mutex<Option<UserInfo>>>);

/// What the handler hands the audit log: see the module doc.
#[derive(Debug, Clone)]
pub struct Capture(Arc<CaptureInner>);

#[derive(Debug)]
struct CaptureInner {
    level: Level,
    request_body: Mutex<Option<Bytes>>,
    response: Mutex<Option<Value>>,
    /// Annotations the handler added (`http::annotations`).
    annotations: Annotations,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Capture {
    fn new(level: Level) -> Self {
        Capture(Arc::new(CaptureInner {
            level,
            request_body: Mutex::new(None),
            response: Mutex::new(None),
            annotations: Annotations::default(),
        }))
    }

    /// Where the handler's annotations go ([`crate::http::annotations::scoped`]).
    pub fn annotations(&self) -> Annotations {
        self.0.annotations.clone()
    }

    /// The body the handler read (kept when small enough to be logged).
    pub fn request_body(&self, body: &Bytes) {
        if body.len() <= MAX_EVENT_BYTES {
            *lock(&self.0.request_body) = Some(body.clone());
        }
    }

    /// The object the handler answered with (kept at `RequestResponse` only).
    pub fn response_object(&self, object: Value) {
        if self.0.level >= Level::RequestResponse {
            *lock(&self.0.response) = Some(object);
        }
    }
}

fn attributes<'a>(info: &'a RequestInfo, user: Option<&'a UserInfo>) -> Attributes<'a> {
    Attributes {
        user,
        verb: &info.verb,
        is_resource_request: info.is_resource_request,
        path: &info.path,
        api_group: &info.api_group,
        namespace: &info.namespace,
        resource: &info.resource,
        subresource: &info.subresource,
        name: &info.name,
    }
}

/// Upstream's `SourceIPs`: `X-Forwarded-For` (else `X-Real-Ip`), then the peer's address
/// unless it is the last one already.
fn source_ips(headers: &HeaderMap, remote: Option<IpAddr>) -> Vec<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut ips: Vec<IpAddr> =
        header("x-forwarded-for").split(',').filter_map(|p| p.trim().parse().ok()).take(MAX_FORWARDED).collect();
    if ips.is_empty() {
        ips.extend(header("x-real-ip").trim().parse::<IpAddr>().ok());
    }
    if let Some(remote) = remote {
        if ips.last() != Some(&remote) {
            ips.push(remote);
        }
    }
    ips.iter().map(ToString::to_string).collect()
}

/// Upstream's long-running requests: their `ResponseComplete` waits for the body's end.
fn long_running(info: &RequestInfo) -> bool {
    matches!(info.verb.as_str(), "watch" | "proxy")
        || matches!(info.subresource.as_str(), "attach" | "exec" | "proxy" | "log" | "portforward")
}

struct Base<'a> {
    source_ips: Vec<String>,
    uri: &'a Uri,
    info: &'a RequestInfo,
    id: &'a str,
}

impl Base<'_> {
    fn event(self, user: Option<&UserInfo>, level: Level, received: chrono::DateTime<chrono::Utc>) -> Event {
        let info = self.info;
        let received = timestamp(received);
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level,
            audit_id: self.id.to_string(),
            stage: Stage::RequestReceived,
            request_uri: self.uri.path_and_query().map_or_else(|| self.uri.path().to_string(), |p| p.to_string()),
            verb: info.verb.clone(),
            user: user.map(User::from).unwrap_or_default(),
            impersonated_user: None,
            source_ips: self.source_ips,
            user_agent: info.user_agent.clone(),
            object_ref: info.is_resource_request.then(|| ObjectReference {
                resource: info.resource.clone(),
                namespace: info.namespace.clone(),
                name: info.name.clone(),
                api_group: info.api_group.clone(),
                api_version: info.api_version.clone(),
                subresource: info.subresource.clone(),
                ..Default::default()
            }),
            response_status: None,
            request_object: None,
            response_object: None,
            stage_timestamp: received.clone(),
            request_received_timestamp: received,
            annotations: BTreeMap::new(),
        }
    }
}

fn remote(req: &Request) -> Option<IpAddr> {
    req.extensions().get::<ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip())
}

fn pending(event: Event, decision: &Decision) -> Pending {
    Pending {
        event,
        request_body: None,
        response_object: None,
        response_bytes: 0,
        status_body: None,
        omit_managed_fields: decision.omit_managed_fields,
    }
}

fn at(mut event: Event, stage: Stage) -> Event {
    event.stage = stage;
    event.stage_timestamp = timestamp(chrono::Utc::now());
    event
}

/// The audit ID and the `Audit-Id` header; failed authentications in the log.
pub async fn init(State(auditor): State<Option<Arc<Auditor>>>, mut req: Request, next: Next) -> Response {
    let sent = req.headers().get(HEADER).filter(|v| !v.is_empty()).cloned();
    let id: Arc<str> = match &sent {
        Some(v) => String::from_utf8_lossy(v.as_bytes()).into(),
        None => uuid::Uuid::new_v4().to_string().into(),
    };
    let header = sent.or_else(|| HeaderValue::from_str(&id).ok());
    req.extensions_mut().insert(AuditId(id.clone()));
    // Only what a 401 event needs, and only when the log is on.
    let before = auditor.as_ref().and_then(|_| {
        let info = req.extensions().get::<Arc<RequestInfo>>()?.clone();
        let ips = source_ips(req.headers(), remote(&req));
        let bearer = req.headers().contains_key(http::header::AUTHORIZATION);
        Some((chrono::Utc::now(), info, req.uri().clone(), ips, bearer))
    });
    let mut resp = next.run(req).await;
    if let Some(h) = header {
        resp.headers_mut().entry(HEADER).or_insert(h);
    }
    if let (Some(auditor), Some((received, info, uri, source_ips, bearer))) = (auditor, before) {
        if resp.status() == http::StatusCode::UNAUTHORIZED && resp.extensions().get::<Audited>().is_none() {
            let decision = auditor.policy.evaluate(&attributes(&info, None));
            auditor.sink.metrics.observe_level(decision.level);
            if decision.level > Level::None && !decision.omits(Stage::ResponseStarted) {
                let base = Base { source_ips, uri: &uri, info: &info, id: &id };
                let mut event = at(base.event(None, decision.level, received), Stage::ResponseStarted);
                let attempted = if bearer { "bearer" } else { "" };
                event.response_status = Some(ResponseStatus {
                    code: 401,
                    message: format!("Authentication failed, attempted: {attempted}").trim_end().to_string(),
                    ..Default::default()
                });
                auditor.sink.send(pending(event, &decision));
            }
        }
    }
    resp
}

/// Who the request acts as (after impersonation), for the filter's completed events.
pub async fn impersonated(req: Request, next: Next) -> Response {
    if let (Some(slot), Some(user)) = (req.extensions().get::<ImpersonatedSlot>(), req.extensions().get::<UserInfo>()) {
        *lock(&slot.0) = Some(user.clone());
    }
    next.run(req).await
}

/// Sends `ResponseComplete` when a long-running response's body ends or is dropped.
struct OnEnd {
    auditor: Arc<Auditor>,
    pending: Option<Pending>,
}

impl Drop for OnEnd {
    fn drop(&mut self) {
        if let Some(mut p) = self.pending.take() {
            p.event = at(p.event.clone(), Stage::ResponseComplete);
            self.auditor.sink.send(p);
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// The audit filter: see the module doc.
pub async fn filter(State(auditor): State<Arc<Auditor>>, mut req: Request, next: Next) -> Response {
    let received = chrono::Utc::now();
    let (Some(info), Some(user), Some(id)) = (
        req.extensions().get::<Arc<RequestInfo>>(),
        req.extensions().get::<UserInfo>(),
        req.extensions().get::<AuditId>(),
    ) else {
        return next.run(req).await;
    };
    let decision = auditor.policy.evaluate(&attributes(info, Some(user)));
    auditor.sink.metrics.observe_level(decision.level);
    if decision.level == Level::None {
        let mut resp = next.run(req).await;
        resp.extensions_mut().insert(Audited);
        return resp;
    }
    let base = Base { source_ips: source_ips(req.headers(), remote(&req)), uri: req.uri(), info, id: &id.0 };
    let event = base.event(Some(user), decision.level, received);
    let long = long_running(info);
    let slot = ImpersonatedSlot::default();
    let capture = Capture::new(decision.level);
    req.extensions_mut().insert(slot.clone());
    req.extensions_mut().insert(capture.clone());
    if !decision.omits(Stage::RequestReceived) {
        let queued = auditor.sink.send(pending(event.clone(), &decision));
        if !queued && auditor.mode == Mode::BlockingStrict {
            let mut resp = ApiError::internal("the audit log could not record the request").into_response();
            resp.extensions_mut().insert(Audited);
            return resp;
        }
    }
    let resp = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let mut ev = at(event, Stage::Panic);
            ev.response_status = Some(ResponseStatus {
                code: 500,
                status: "Failure".into(),
                reason: "InternalError".into(),
                message: format!("APIServer panic'd: {}", panic_message(&*panic)),
                ..Default::default()
            });
            auditor.sink.send(pending(ev, &decision));
            std::panic::resume_unwind(panic);
        }
    };
    let (mut parts, mut body) = resp.into_parts();
    parts.extensions.insert(Audited);
    let mut event = event;
    let code = parts.status.as_u16();
    event.response_status = Some(ResponseStatus { code, ..Default::default() });
    if let Some(d) = parts.extensions.get::<Decided>() {
        let decision = if d.allowed { "allow" } else { "forbid" };
        event.annotations.insert("authorization.k8s.io/decision".into(), decision.into());
        event.annotations.insert("authorization.k8s.io/reason".into(), d.reason.clone());
    }
    event.annotations.extend(capture.0.annotations.take());
    let acting = lock(&slot.0).take();
    event.impersonated_user = acting.map(|u| User::from(&u)).filter(|u| *u != event.user);
    let mut status_body = None;
    if code >= 400 && body.size_hint().upper().is_some_and(|n| n <= MAX_STATUS_BYTES) {
        if let Ok(collected) = http_body_util::BodyExt::collect(body).await {
            let bytes = collected.to_bytes();
            status_body = Some(bytes.clone());
            body = Body::from(bytes);
        } else {
            body = Body::empty();
        }
    }
    let response_bytes = body.size_hint().exact().unwrap_or(0) as usize;
    let mut p = pending(event, &decision);
    p.request_body = lock(&capture.0.request_body).take();
    p.response_object = lock(&capture.0.response).take();
    p.response_bytes = response_bytes;
    p.status_body = status_body;
    if !long {
        if !decision.omits(Stage::ResponseComplete) {
            p.event = at(p.event, Stage::ResponseComplete);
            auditor.sink.send(p);
        }
        return Response::from_parts(parts, body);
    }
    if !decision.omits(Stage::ResponseStarted) {
        let mut started = p.clone();
        started.event = at(started.event, Stage::ResponseStarted);
        auditor.sink.send(started);
    }
    if decision.omits(Stage::ResponseComplete) {
        return Response::from_parts(parts, body);
    }
    let guard = OnEnd { auditor, pending: Some(p) };
    let stream = body.into_data_stream().map(move |chunk| {
        let _ = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_as_upstream() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
            }
            m
        };
        let peer: Option<IpAddr> = Some("10.0.0.9".parse().unwrap());
        let cases: Vec<(HeaderMap, Option<IpAddr>, Vec<&str>)> = vec![
            (h(&[]), peer, vec!["10.0.0.9"]),
            (h(&[]), None, vec![]),
            (h(&[("x-forwarded-for", "1.2.3.4, bogus, 5.6.7.8")]), peer, vec!["1.2.3.4", "5.6.7.8", "10.0.0.9"]),
            (h(&[("x-forwarded-for", "1.2.3.4,10.0.0.9")]), peer, vec!["1.2.3.4", "10.0.0.9"]),
            (h(&[("x-real-ip", "::1")]), peer, vec!["::1", "10.0.0.9"]),
            (h(&[("x-forwarded-for", &"1.1.1.1,".repeat(100))]), None, vec!["1.1.1.1"; MAX_FORWARDED]),
        ];
        for (headers, remote, want) in cases {
            assert_eq!(source_ips(&headers, remote), want, "{headers:?}");
        }
    }

    #[test]
    fn long_running_as_upstream() {
        let info =
            |verb: &str, sub: &str| RequestInfo { verb: verb.into(), subresource: sub.into(), ..Default::default() };
        assert!(long_running(&info("watch", "")));
        assert!(long_running(&info("get", "log")));
        assert!(!long_running(&info("list", "")));
        assert!(!long_running(&info("update", "approval")));
    }
}
