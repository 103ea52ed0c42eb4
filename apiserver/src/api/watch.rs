//! Watch: a chunked stream of `{"type":..,"object":..}` lines, one JSON event per line.
//!
//! Start (seed §6): resourceVersion unset or "0" → synthetic ADDED for every object, then
//! changes; "X" → changes after X; `sendInitialEvents=true` (needs
//! `resourceVersionMatch=NotOlderThan`) → ADDED per object, then a BOOKMARK annotated
//! `k8s.io/initial-events-end`. Under a selector, an object leaving it is DELETED and one
//! entering it ADDED. A start revision older than the kept history → an ERROR event (410).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

use crate::api::rest::{Call, Filter};
use crate::api::table::{self, IncludeObject};
use crate::error::{ApiError, FieldError, Result};
use crate::meta;
use crate::registry::ResourceDef;
use crate::storage::{self, EventKind, ListOptions, Rev, Storage};

/// How often a watch with `allowWatchBookmarks` gets a progress BOOKMARK.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// Channel depth between the event source and the HTTP body.
const BUFFER: usize = 256;

struct Plan {
    /// Objects to send as ADDED first (already filtered).
    initial: Vec<Value>,
    /// Watch changes after this revision.
    after: Rev,
    /// Send the initial-events-end bookmark after `initial`.
    end_bookmark: bool,
}

fn parse_rv(s: &str) -> Result<Rev> {
    s.parse::<Rev>().map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s:?}")))
}

async fn plan(c: &Call<'_>, filter: &Filter) -> Result<std::result::Result<Plan, storage::Error>> {
    let p = &c.params;
    let rv = p.get("resourceVersion").unwrap_or("");
    let rvm = p.get("resourceVersionMatch").unwrap_or("");
    let bookmarks = p.flag("allowWatchBookmarks")?;
    let send_initial = match p.get("sendInitialEvents") {
        None | Some("") => None,
        Some(_) => Some(p.flag("sendInitialEvents")?),
    };
    if send_initial.is_some() && rvm != "NotOlderThan" {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
            )],
        ));
    }
    if !rvm.is_empty() && send_initial.is_none() {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )],
        ));
    }
    if !rvm.is_empty() && rvm != "NotOlderThan" {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![FieldError::not_supported("resourceVersionMatch", &json!(rvm), &["NotOlderThan"])],
        ));
    }
    let initial = match send_initial {
        Some(s) => s,
        None => rv.is_empty() || rv == "0",
    };
    if !initial {
        return Ok(Ok(Plan { initial: Vec::new(), after: parse_rv(rv)?, end_bookmark: false }));
    }
    if !rv.is_empty() && rv != "0" {
        crate::api::rest::wait_for_rv(&c.state.storage, parse_rv(rv)?).await?;
    }
    // A consistent snapshot, then changes after it.
    let store = &c.state.storage;
    let page = match filter.pinned_key(c.def, ns(c)) {
        Some(key) => store.get_at(&key, None).await.map(|(kv, rev)| storage::ListResult {
            items: kv.into_iter().collect(),
            rev,
            remaining: 0,
        }),
        None => store.list(&c.def.ns_prefix(ns(c)), ListOptions::default()).await,
    };
    let page = match page {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let mut objs = Vec::with_capacity(page.items.len());
    for kv in &page.items {
        let o = meta::from_stored(kv)?;
        if filter.matches(c.def, &o) {
            objs.push(o);
        }
    }
    Ok(Ok(Plan { initial: objs, after: page.rev, end_bookmark: send_initial == Some(true) && bookmarks }))
}

fn ns<'a>(c: &'a Call<'_>) -> Option<&'a str> {
    if c.def.namespaced && !c.info.namespace.is_empty() {
        Some(c.info.namespace.as_str())
    } else {
        None
    }
}

/// Renders events for one watcher (JSON line per event; Table rows when asked).
#[derive(Clone)]
struct Encoder {
    def: ResourceDef,
    table: bool,
    include: IncludeObject,
}

impl Encoder {
    fn event(&self, kind: &str, obj: Value) -> Bytes {
        let object = if self.table && kind != "BOOKMARK" && kind != "ERROR" {
            table::table(
                &self.def,
                std::slice::from_ref(&obj),
                self.include,
                json!({"resourceVersion": meta::rv(&obj)}),
                true,
            )
        } else {
            obj
        };
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    fn bookmark(&self, rev: Rev, initial_end: bool) -> Bytes {
        let mut m = json!({"resourceVersion": rev.to_string()});
        if initial_end {
            m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": m});
        self.event("BOOKMARK", obj)
    }

    fn error(&self, e: &ApiError) -> Bytes {
        self.event("ERROR", e.status())
    }
}

/// Serve a watch request.
pub async fn watch(c: &Call<'_>) -> Result<Response> {
    let filter = Filter::from_params(c.def, &c.params)?;
    let timeout = match c.params.int("timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        Some(_) => Duration::from_secs(1800),
        None => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
    };
    let bookmarks = c.params.flag("allowWatchBookmarks")?;
    let enc = Encoder {
        def: c.def.clone(),
        table: c.out.table,
        include: IncludeObject::parse(c.params.get("includeObject")),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(BUFFER);
    let planned = plan(c, &filter).await?;
    let store = c.state.storage.clone();
    let scope = match filter.pinned_key(c.def, ns(c)) {
        Some(key) => Scope::Key(key),
        None => Scope::Prefix(c.def.ns_prefix(ns(c))),
    };
    let def = c.def.clone();
    tokio::spawn(async move {
        let work = run(store, scope, def, filter, planned, enc, bookmarks, tx.clone());
        let _ = tokio::time::timeout(timeout, work).await;
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>);
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    Ok(resp)
}

/// What a watch listens to in storage.
enum Scope {
    /// Every key under the collection's (or namespace's) prefix.
    Prefix(String),
    /// The one key a `metadata.name` field selector pins.
    Key(String),
}

#[allow(clippy::too_many_arguments)]
async fn run(
    store: Arc<dyn Storage>,
    scope: Scope,
    def: ResourceDef,
    filter: Filter,
    planned: std::result::Result<Plan, storage::Error>,
    enc: Encoder,
    bookmarks: bool,
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let plan = match planned {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(enc.error(&crate::api::rest::map_storage_error(&def, "", e))).await;
            return;
        }
    };
    for o in plan.initial {
        if tx.send(enc.event("ADDED", o)).await.is_err() {
            return;
        }
    }
    if plan.end_bookmark && tx.send(enc.bookmark(plan.after, true)).await.is_err() {
        return;
    }
    let events = match &scope {
        Scope::Prefix(prefix) => store.watch(prefix, plan.after).await,
        Scope::Key(key) => store.watch_key(key, plan.after).await,
    };
    let mut events = match events {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(enc.error(&crate::api::rest::map_storage_error(&def, "", e))).await;
            return;
        }
    };
    let mut last = plan.after;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
    loop {
        tokio::select! {
            ev = events.next() => {
                let Some(ev) = ev else { return };
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        let _ = tx.send(enc.error(&crate::api::rest::map_storage_error(&def, "", e))).await;
                        return;
                    }
                };
                last = ev.rev;
                let Some(line) = translate(&def, &filter, &enc, &ev) else { continue };
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            _ = ticker.tick(), if bookmarks => {
                // Everything up to `last` has been sent.
                if tx.send(enc.bookmark(last, false)).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}

/// One storage event → zero or one watch line, applying selector transitions.
fn translate(def: &ResourceDef, filter: &Filter, enc: &Encoder, ev: &storage::Event) -> Option<Bytes> {
    let obj = meta::decode_at(&ev.value, ev.rev).ok()?;
    match ev.kind {
        EventKind::Created => filter.matches(def, &obj).then(|| enc.event("ADDED", obj)),
        EventKind::Deleted => filter.matches(def, &obj).then(|| enc.event("DELETED", obj)),
        EventKind::Updated => {
            let now = filter.matches(def, &obj);
            let before = match (&ev.prev_value, filter.is_empty()) {
                (_, true) => true,
                (Some(p), false) => meta::decode_at(p, ev.rev).map(|o| filter.matches(def, &o)).unwrap_or(false),
                (None, false) => now,
            };
            match (before, now) {
                (true, true) => Some(enc.event("MODIFIED", obj)),
                (false, true) => Some(enc.event("ADDED", obj)),
                (true, false) => Some(enc.event("DELETED", obj)),
                (false, false) => None,
            }
        }
    }
}
