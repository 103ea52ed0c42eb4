//! What every request leaves behind: its counts in `/metrics` (`http::metrics`), an access
//! log line at `--v=2` and above, and a warning when a client asks for a path no kind serves.
//!
//! The access line is upstream's httplog line in tracing fields: `verb`, `path`, `user`,
//! `code`, `latency`, `user_agent`. A 404 on a path that no kind (built-in or custom) and
//! no endpoint serves is logged at WARN even without `--v`, so a client that needs an API
//! kustos lacks shows up at once; each such path (its resource, not the object name) is
//! reported at most once a minute, and at most [`MAX_WARNED`] distinct ones are remembered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::header;

use crate::authn::UserInfo;
use crate::http::metrics::{self, RequestLabels, RequestMetrics};
use crate::http::request_info::{query_param, RequestInfo};
use crate::AppState;

/// Verbosity from which every request is logged (klog's `-v=2`).
pub const ACCESS_LOG_LEVEL: u8 = 2;
/// Distinct unserved paths remembered for rate limiting their warnings.
pub const MAX_WARNED: usize = 1024;
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Metrics that live outside the apiserver (the controllers of `kustos server`): a function
/// returning their OpenMetrics text.
pub type MetricsSource = Box<dyn Fn() -> String + Send + Sync>;

/// The per-server state of this module.
#[derive(Default)]
pub struct Observer {
    pub requests: RequestMetrics,
    /// `--v`: 2 and above log every request.
    pub verbosity: AtomicU8,
    /// More metrics appended to `/metrics`, set once at start.
    pub extra: OnceLock<MetricsSource>,
    warned: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").field("verbosity", &self.verbosity).finish_non_exhaustive()
    }
}

impl Observer {
    /// Whether a warning for `key` is due at `now`, remembering that it was given.
    fn warn_due(&self, key: &str, now: Instant) -> bool {
        let Ok(mut warned) = self.warned.lock() else { return false };
        match warned.get(key) {
            Some(last) if now.duration_since(*last) < WARN_EVERY => false,
            _ => {
                if warned.len() >= MAX_WARNED && !warned.contains_key(key) {
                    warned.retain(|_, last| now.duration_since(*last) < WARN_EVERY);
                    if warned.len() >= MAX_WARNED {
                        return false;
                    }
                }
                warned.insert(key.to_string(), now);
                true
            }
        }
    }
}

/// Whether the request's resource is served: a built-in kind or a custom resource of an
/// established CRD, with the subresource it names.
fn served(state: &AppState, info: &RequestInfo) -> bool {
    let check = |reg: &crate::registry::Registry| {
        reg.find(&info.api_group, &info.api_version, &info.resource)
            .is_some_and(|d| info.subresource.is_empty() || d.subresources.contains(&info.subresource.as_str()))
    };
    info.extra_parts == 0 && (check(&state.registry) || check(&state.crds.current().registry))
}

/// The key an unserved path is warned under: the path up to its resource (names left out).
fn unserved_key(info: &RequestInfo, path: &str) -> String {
    if !info.is_resource_request {
        return path.to_string();
    }
    let group = if info.api_group.is_empty() { "core" } else { info.api_group.as_str() };
    format!("{group}/{}/{}/{}", info.api_version, info.resource, info.subresource)
}

/// The middleware: runs inside authentication and request-info resolution, so it sees who
/// asked and what for, and outside flow control and authorization, so their refusals count.
pub async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let Some(info) = req.extensions().get::<Arc<RequestInfo>>().cloned() else { return next.run(req).await };
    let user = req.extensions().get::<UserInfo>().map(|u| u.name.clone()).unwrap_or_default();
    let method = req.method().clone();
    let is_apply = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch"));
    let dry_run = metrics::clean_dry_run(query_param(req.uri().query(), "dryRun").as_deref()).to_string();
    let path = req.uri().path().to_string();

    let resp = next.run(req).await;
    let took = start.elapsed();
    let code = resp.status().as_u16();
    let observer = &state.observe;

    let is_served = !info.is_resource_request || served(&state, &info);
    let (group, version, resource, subresource) = if info.is_resource_request && is_served {
        (info.api_group.clone(), info.api_version.clone(), info.resource.clone(), info.subresource.clone())
    } else {
        Default::default()
    };
    observer.requests.observe(
        RequestLabels {
            verb: metrics::reported_verb(&info, &method, is_apply),
            dry_run,
            group,
            version,
            resource,
            subresource,
            scope: metrics::scope(&info).to_string(),
            component: "apiserver".to_string(),
        },
        code,
        took,
    );
    if observer.verbosity.load(Ordering::Relaxed) >= ACCESS_LOG_LEVEL {
        tracing::info!(
            verb = %method,
            path = %path,
            user = %user,
            code,
            latency = ?took,
            user_agent = %info.user_agent,
            "HTTP"
        );
    }
    if code == 404 && !(info.is_resource_request && is_served) {
        let key = unserved_key(&info, &path);
        if observer.warn_due(&key, Instant::now()) {
            tracing::warn!(
                verb = %method,
                path = %path,
                user = %user,
                user_agent = %info.user_agent,
                "no kind or endpoint serves this path (404)"
            );
        }
    }
    resp
}

/// The apiserver's own metrics after flow control's: requests, stored objects, process.
pub async fn encode(state: &AppState) -> String {
    let mut text = state.observe.requests.encode();
    // One count per resource (its first version), those in the main store asked together.
    let mut labels: Vec<String> = Vec::new();
    let mut direct: Vec<(String, String)> = Vec::new();
    let mut counts = Vec::new();
    for def in &state.registry.resources {
        let label =
            if def.group.is_empty() { def.resource.to_string() } else { format!("{}.{}", def.resource, def.group) };
        if def.create_only || labels.contains(&label) {
            continue;
        }
        labels.push(label.clone());
        let store = state.store_for(def);
        if Arc::ptr_eq(store, &state.storage) {
            direct.push((label, def.prefix()));
        } else if let Ok(n) = store.count(&def.prefix()).await {
            counts.push((label, n));
        }
    }
    let prefixes: Vec<String> = direct.iter().map(|(_, prefix)| prefix.clone()).collect();
    for ((label, _), n) in direct.into_iter().zip(state.storage.counts(&prefixes).await) {
        if let Ok(n) = n {
            counts.push((label, n));
        }
    }
    counts.sort_by_key(|(label, _)| labels.iter().position(|l| l == label));
    text.push_str(&metrics::encode_storage_objects(&counts));
    text.push_str(&crate::work::encode(kustos_ca::signed_by_checks()));
    if let Some(stats) = metrics::process_stats() {
        text.push_str(&metrics::encode_process(&stats));
    }
    // Reads of certificate signing requests (the process-wide memo of kustos-ca).
    text.push_str(&kustos_ca::csr::memo::metrics_text());
    if let Some(signer) = state.security.service_accounts.as_ref().and_then(|t| t.external_signer()) {
        let more = signer.metrics.encode();
        text.push_str(more.trim_end().strip_suffix("# EOF").unwrap_or(&more));
    }
    if let Some(cfg) = state.security.authn.authentication_config() {
        text.push_str(&cfg.metrics.encode());
    }
    if let Some(extra) = state.observe.extra.get() {
        let more = extra();
        text.push_str(more.trim_end().strip_suffix("# EOF").unwrap_or(&more));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unserved_paths_warn_once_a_minute_within_a_bound() {
        let o = Observer::default();
        let t0 = Instant::now();
        assert!(o.warn_due("core/v1/nodes/", t0));
        assert!(!o.warn_due("core/v1/nodes/", t0 + Duration::from_secs(10)));
        assert!(o.warn_due("core/v1/pods/", t0 + Duration::from_secs(10)));
        assert!(o.warn_due("core/v1/nodes/", t0 + Duration::from_secs(61)));
        // Many distinct paths within a minute: no more than MAX_WARNED remembered, the rest
        // not warned until the old ones age out.
        let o = Observer::default();
        let warned = (0..MAX_WARNED + 10).filter(|i| o.warn_due(&format!("/x/{i}"), t0)).count();
        assert_eq!(warned, MAX_WARNED);
        assert!(o.warn_due("/later", t0 + Duration::from_secs(61)));
        assert!(o.warned.lock().is_ok_and(|w| w.len() <= MAX_WARNED));
    }

    #[test]
    fn unserved_keys_leave_names_out() {
        let info = RequestInfo {
            is_resource_request: true,
            api_version: "v1".into(),
            resource: "nodes".into(),
            name: "node-a".into(),
            ..Default::default()
        };
        assert_eq!(unserved_key(&info, "/api/v1/nodes/node-a"), "core/v1/nodes/");
        let plain = RequestInfo::default();
        assert_eq!(unserved_key(&plain, "/nothing/here"), "/nothing/here");
    }
}
