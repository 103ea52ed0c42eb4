//! `/livez`, `/readyz`, `/healthz`: named checks, `?verbose`, `?exclude=`, `/<endpoint>/<check>`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::http::request_info::url_pairs;
use crate::storage::Storage;

/// Readiness flags the server flips as it starts and stops.
#[derive(Debug, Default)]
pub struct Health {
    pub started: AtomicBool,
    pub shutting_down: AtomicBool,
}

/// Why a check failed (never sent: a client reads "reason withheld").
#[derive(Debug, Clone, thiserror::Error)]
enum CheckFailed {
    #[error(transparent)]
    Storage(#[from] crate::storage::Error),
    #[error("not finished")]
    NotFinished,
    #[error("process is shutting down")]
    ShuttingDown,
}

/// The checks of an endpoint, in order, with their outcome.
async fn checks(
    endpoint: &str,
    health: &Health,
    store: &Arc<dyn Storage>,
) -> Vec<(&'static str, Result<(), CheckFailed>)> {
    let storage_ok = match store.count("/registry/core/namespaces/").await {
        Ok(_) => Ok(()),
        Err(e) => Err(CheckFailed::from(e)),
    };
    let started = if health.started.load(Ordering::SeqCst) { Ok(()) } else { Err(CheckFailed::NotFinished) };
    let mut out = vec![("ping", Ok(())), ("log", Ok(())), ("etcd", storage_ok)];
    if endpoint == "readyz" {
        out.push(("informer-sync", Ok(())));
    }
    out.push(("poststarthook/bootstrap-namespaces", started.clone()));
    out.push(("poststarthook/start-apiextensions-informers", Ok(())));
    if endpoint == "readyz" {
        let shutdown =
            if health.shutting_down.load(Ordering::SeqCst) { Err(CheckFailed::ShuttingDown) } else { Ok(()) };
        out.push(("shutdown", shutdown));
    }
    out
}

/// Answer a health request: (HTTP code, text body).
pub async fn respond(
    path: &str,
    query: Option<&str>,
    health: &Health,
    store: &Arc<dyn Storage>,
) -> Option<(u16, String)> {
    let trimmed = path.trim_start_matches('/');
    let (endpoint, single) = match trimmed.split_once('/') {
        Some((e, rest)) => (e, Some(rest.trim_end_matches('/'))),
        None => (trimmed, None),
    };
    if !matches!(endpoint, "livez" | "readyz" | "healthz") {
        return None;
    }
    let pairs = query.map(url_pairs).unwrap_or_default();
    let verbose = pairs.iter().any(|(k, _)| k == "verbose");
    let excluded: Vec<&str> = pairs.iter().filter(|(k, _)| k == "exclude").map(|(_, v)| v.as_str()).collect();
    let all = checks(endpoint, health, store).await;
    if let Some(name) = single.filter(|s| !s.is_empty()) {
        let found = all.iter().find(|(n, _)| *n == name)?;
        return Some(match &found.1 {
            Ok(()) => (200, "ok".into()),
            Err(_) => (500, "internal server error: check failed".into()),
        });
    }
    let mut lines = Vec::new();
    let mut failed = false;
    for (name, r) in &all {
        if excluded.contains(name) {
            lines.push(format!("[+]{name} excluded: ok"));
            continue;
        }
        match r {
            Ok(()) => lines.push(format!("[+]{name} ok")),
            Err(_) => {
                failed = true;
                lines.push(format!("[-]{name} failed: reason withheld"));
            }
        }
    }
    for e in &excluded {
        if !all.iter().any(|(n, _)| n == e) {
            lines.push(format!("warn: some health checks cannot be excluded: no matches for \"{e}\""));
        }
    }
    if failed {
        lines.push(format!("{endpoint} check failed"));
        return Some((500, lines.join("\n") + "\n"));
    }
    if verbose {
        lines.push(format!("{endpoint} check passed"));
        Some((200, lines.join("\n") + "\n"))
    } else {
        Some((200, "ok".into()))
    }
}
