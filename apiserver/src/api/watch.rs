//! Watch: a chunked stream of `{"type":..,"object":..}` lines, one JSON event per line, or,
//! when the client prefers protobuf, upstream's protobuf watch stream
//! (`application/vnd.kubernetes.protobuf;stream=watch`): each event a 4-byte big-endian
//! length, then the bare `metav1.WatchEvent` message (no `k8s\0` envelope, as upstream's raw
//! stream serializer writes it) whose `object.raw` is the object's own enveloped protobuf body.
//!
//! Each event's object is converted as the Accept header asked (upstream's
//! `watchEmbeddedEncoder`): `as=PartialObjectMetadata` → a `PartialObjectMetadata` of the
//! version asked (client-go's metadata informers), `as=Table` → a one-row Table with the
//! column definitions on the first event only; BOOKMARK objects are converted too, an
//! ERROR's `Status` never is.
//!
//! Start (seed §6): resourceVersion unset or "0" → synthetic ADDED for every object, then
//! changes; "X" → changes after X; `sendInitialEvents=true` (needs
//! `resourceVersionMatch=NotOlderThan`) → ADDED per object, then a BOOKMARK annotated
//! `k8s.io/initial-events-end`. Under a selector, an object leaving it is DELETED and one
//! entering it ADDED. A start revision older than the kept history → an ERROR event (410).
//!
//! Rendered once per change: a change's frame depends only on the event type sent, the
//! wire format and the object form (full, or PartialObjectMetadata of one version), so the
//! first watcher to send it keeps the frame in the change's [`storage::memo::Memo`] and
//! every other watcher with the same three sends those bytes (a Table, built per watcher
//! with its own options and column state, is never shared). A watch whose selector asks only
//! for the name (and namespace) of the one key it watches filters without decoding.

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
use crate::wire::negotiate::Output;
use crate::wire::protobuf;
use crate::work::{self, Format, Site, WatchEvents};

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
        crate::api::rest::wait_for_rv(c.store(), parse_rv(rv)?).await?;
    }
    // A consistent snapshot, then changes after it.
    let store = c.store();
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

/// What each event's object becomes, per the negotiated output (upstream's
/// `watchEmbeddedEncoder`: every event's object is converted but an ERROR's `Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The object as stored.
    Full,
    /// `as=PartialObjectMetadata`: `kind`, `apiVersion` (the version asked), `metadata`.
    Metadata { api_version: &'static str },
    /// `as=Table`: a one-row Table; only the first event carries `columnDefinitions`.
    Table { include: IncludeObject, api_version: &'static str, columns_sent: bool },
}

impl Form {
    fn from_output(out: &Output, include: IncludeObject) -> Form {
        let api_version = out.meta_api_version();
        if out.table {
            Form::Table { include, api_version, columns_sent: false }
        } else if out.metadata_only && !out.metadata_list {
            Form::Metadata { api_version }
        } else {
            // `as=PartialObjectMetadataList` names a list; upstream cannot convert a watch
            // event's object to it and sends the object unconverted.
            Form::Full
        }
    }
}

/// Renders events for one watcher (JSON line or protobuf frame per event).
struct Encoder {
    def: ResourceDef,
    form: Form,
    /// Protobuf frames instead of JSON lines.
    protobuf: bool,
    /// `apiserver_watch_events_total` of this kind.
    sent: WatchEvents,
}

#[cfg(test)]
thread_local! {
    /// Frames encoded on this thread (tests count them).
    static ENCODED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The memo slot of a change's frame for an event type, wire format and object form, or
/// None when the frame is not shared (a Table; a type no change has).
fn slot(kind: &str, protobuf: bool, form: &Form) -> Option<usize> {
    let kind = match kind {
        "ADDED" => 0,
        "MODIFIED" => 1,
        "DELETED" => 2,
        _ => return None,
    };
    let form = match form {
        Form::Full => 0,
        Form::Metadata { api_version: "meta.k8s.io/v1" } => 1,
        Form::Metadata { api_version: "meta.k8s.io/v1beta1" } => 2,
        Form::Metadata { .. } | Form::Table { .. } => return None,
    };
    Some(kind * 6 + usize::from(protobuf) * 3 + form)
}

impl Encoder {
    /// The object an event of `kind` carries for `obj`.
    fn object(&mut self, kind: &str, obj: Value) -> Value {
        if kind == "ERROR" {
            return obj;
        }
        match &mut self.form {
            Form::Full => obj,
            Form::Metadata { api_version } => metadata_object(&obj, api_version),
            Form::Table { include, api_version, columns_sent } => {
                let list_meta = json!({"resourceVersion": meta::rv(&obj)});
                let mut t = table::table(&self.def, std::slice::from_ref(&obj), *include, list_meta, !*columns_sent);
                t["apiVersion"] = json!(*api_version);
                if let Some(rows) = t["rows"].as_array_mut() {
                    for row in rows {
                        if row["object"]["kind"] == "PartialObjectMetadata" {
                            row["object"]["apiVersion"] = json!(*api_version);
                        }
                    }
                }
                t
            }
        }
    }

    /// One event for the response, counted as sent (`apiserver_watch_events_total`) and
    /// as one encode at the `watch` site.
    fn event(&mut self, kind: &str, obj: Value) -> Bytes {
        self.sent.sent();
        work::encoded(if self.protobuf { Format::Protobuf } else { Format::Json }, Site::Watch);
        let object = self.object(kind, obj);
        if let Form::Table { columns_sent, .. } = &mut self.form {
            // Upstream stops sending headers after the first event, whatever it was.
            *columns_sent = true;
        }
        frame(self.protobuf, kind, &object)
    }

    /// The frame of a stored change sent as `kind`: from the change's memo when another
    /// watcher rendered it alike, else rendered (from `decoded`, the change's object if the
    /// caller has it) and kept there. None for an object that does not decode.
    fn change(&mut self, kind: &str, ev: &storage::Event, decoded: Option<Value>) -> Option<Bytes> {
        let decode = |decoded: Option<Value>| match decoded {
            Some(o) => Some(o),
            None => meta::decode_event(&ev.value, ev.rev).ok(),
        };
        let Some(slot) = slot(kind, self.protobuf, &self.form) else {
            return Some(self.event(kind, decode(decoded)?));
        };
        let (protobuf, form) = (self.protobuf, self.form);
        // An object that does not decode is kept as no frame (every watcher skips it).
        let line = ev.memo.get_or_render(slot, || {
            if decoded.is_none() && !protobuf && matches!(form, Form::Full) {
                // The stored bytes with the resourceVersion put in: what decoding and encoding
                // again would write, without building the object.
                return json_line(kind, ev).unwrap_or_default();
            }
            match decode(decoded) {
                Some(obj) => {
                    // Encoded once per change and slot, whatever the number of watchers.
                    work::encoded(if protobuf { Format::Protobuf } else { Format::Json }, Site::Watch);
                    match form {
                        Form::Metadata { api_version } => frame(protobuf, kind, &metadata_object(&obj, api_version)),
                        _ => frame(protobuf, kind, &obj),
                    }
                }
                None => Bytes::new(),
            }
        });
        if line.is_empty() {
            return None;
        }
        // Sent to this watcher, whether rendered here or by another.
        self.sent.sent();
        Some(line)
    }

    fn bookmark(&mut self, rev: Rev, initial_end: bool) -> Bytes {
        let obj = bookmark_object(&self.def, rev, initial_end);
        self.event("BOOKMARK", obj)
    }

    fn error(&mut self, e: &ApiError) -> Bytes {
        self.event("ERROR", e.status())
    }
}

/// `obj` as a PartialObjectMetadata of `api_version`.
fn metadata_object(obj: &Value, api_version: &str) -> Value {
    let mut p = table::partial_object_metadata(obj);
    p["apiVersion"] = json!(api_version);
    p
}

/// One event on the wire: a protobuf frame or a JSON line.
fn frame(protobuf: bool, kind: &str, object: &Value) -> Bytes {
    #[cfg(test)]
    ENCODED.with(|n| n.set(n.get() + 1));
    if protobuf {
        return match protobuf::encode::watch_frame(kind, object) {
            Ok(frame) => Bytes::from(frame),
            // Every served kind has a protobuf form; should one not encode, the watcher
            // is told so in an ERROR event (a Status always encodes).
            Err(e) => protobuf::encode::watch_frame("ERROR", &ApiError::internal(e).status())
                .map(Bytes::from)
                .unwrap_or_default(),
        };
    }
    let mut line = serde_json::to_vec(&Line { object, kind }).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// A JSON watch event of a stored change: the bytes of [`frame`] for the decoded object (the
/// keys of `{"object", "type"}` in the order [`Line`] writes them), its object written from
/// the stored bytes (`meta::write_event_with_rv`). None for an object that does not decode.
fn json_line(kind: &str, ev: &storage::Event) -> Option<Bytes> {
    #[cfg(test)]
    ENCODED.with(|n| n.set(n.get() + 1));
    let mut line = Vec::with_capacity(ev.value.len() + 40);
    line.extend_from_slice(b"{\"object\":");
    meta::write_event_with_rv(&mut line, &ev.value, ev.rev).ok()?;
    line.extend_from_slice(b",\"type\":");
    serde_json::to_writer(&mut line, kind).ok()?;
    line.extend_from_slice(b"}\n");
    Some(Bytes::from(line))
}

/// A JSON watch event, written straight from the borrowed object: the bytes of
/// `json!({"type": kind, "object": object})` (keys in the map's sorted order) without the
/// deep copy `json!` makes of the object.
#[derive(serde::Serialize)]
struct Line<'a> {
    object: &'a Value,
    #[serde(rename = "type")]
    kind: &'a str,
}

/// The object of a BOOKMARK: the kind with only `metadata.resourceVersion` (and the
/// initial-events-end annotation) set.
fn bookmark_object(def: &ResourceDef, rev: Rev, initial_end: bool) -> Value {
    let mut m = json!({"resourceVersion": rev.to_string()});
    if initial_end {
        m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": m})
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
        form: Form::from_output(&c.out, IncludeObject::parse(c.params.get("includeObject"))),
        protobuf: c.out.protobuf,
        sent: WatchEvents::of(c.def.group, c.def.version, c.def.resource),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(BUFFER);
    let planned = plan(c, &filter).await?;
    let store = c.store().clone();
    let scope = match filter.pinned_key(c.def, ns(c)) {
        Some(key) => Scope::Key(key),
        None => Scope::Prefix(c.def.ns_prefix(ns(c))),
    };
    let filter_by_key = matches!(scope, Scope::Key(_)) && holds_for_pinned_key(c.def, &filter, ns(c));
    let def = c.def.clone();
    // A job of the supervisor: it ends with the client, its timeout, or the server.
    c.state.tasks.spawn_job("watch", async move {
        let work = run(store, scope, def, (filter, filter_by_key), planned, enc, bookmarks, tx.clone());
        let _ = tokio::time::timeout(timeout, work).await;
        Ok(())
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>);
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let ctype = if c.out.protobuf { protobuf::WATCH_MEDIA_TYPE } else { "application/json" };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
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
    (filter, filter_by_key): (Filter, bool),
    planned: std::result::Result<Plan, storage::Error>,
    mut enc: Encoder,
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
                let Some(line) = translate(&def, &filter, filter_by_key, &mut enc, &ev) else { continue };
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

/// Whether `filter` holds for every object a watch of the key it pins sees: it has no label
/// selector and asks only for the name and namespace the key fixes. Such a watch's events
/// need no decoding to be filtered.
fn holds_for_pinned_key(def: &ResourceDef, filter: &Filter, ns: Option<&str>) -> bool {
    if filter.labels.is_some() {
        return false;
    }
    let Some(fields) = &filter.fields else { return true };
    let Some(name) = fields.requires_exact_match("metadata.name") else { return false };
    if !fields.requirements().iter().all(|r| r.field == "metadata.name" || r.field == "metadata.namespace") {
        return false;
    }
    // The namespace of the key `Filter::pinned_key` builds.
    let ns = match (def.namespaced, ns) {
        (false, _) => None,
        (true, Some(ns)) => Some(ns),
        (true, None) => fields.requires_exact_match("metadata.namespace"),
    };
    let mut probe = json!({"metadata": {"name": name}});
    if let Some(ns) = ns {
        probe["metadata"]["namespace"] = json!(ns);
    }
    filter.matches(def, &probe)
}

/// One storage event → zero or one watch line, applying selector transitions.
/// `filter_by_key`: the filter holds for every object the watch sees (no decoding needed).
fn translate(
    def: &ResourceDef,
    filter: &Filter,
    filter_by_key: bool,
    enc: &mut Encoder,
    ev: &storage::Event,
) -> Option<Bytes> {
    if filter.is_empty() || filter_by_key {
        let kind = match ev.kind {
            EventKind::Created => "ADDED",
            EventKind::Updated => "MODIFIED",
            EventKind::Deleted => "DELETED",
        };
        return enc.change(kind, ev, None);
    }
    let obj = meta::decode_event(&ev.value, ev.rev).ok()?;
    let now = filter.matches(def, &obj);
    let kind = match ev.kind {
        EventKind::Created => now.then_some("ADDED")?,
        EventKind::Deleted => now.then_some("DELETED")?,
        EventKind::Updated => {
            let before = match &ev.prev_value {
                Some(p) => meta::decode_event(p, ev.rev).map(|o| filter.matches(def, &o)).unwrap_or(false),
                None => now,
            };
            match (before, now) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            }
        }
    };
    enc.change(kind, ev, Some(obj))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::wire::negotiate::{negotiate, MetaVersion};

    fn test_counter() -> WatchEvents {
        WatchEvents::of("watch.test.kustos.dev", "v1", "encoders")
    }

    fn configmaps() -> ResourceDef {
        Registry::builtin().find("", "v1", "configmaps").cloned().expect("configmaps are built in")
    }

    fn cm() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": "7", "labels": {"x": "y"}},
            "data": {"k": "v"},
        })
    }

    fn decode(line: &Bytes) -> Value {
        assert_eq!(line.last(), Some(&b'\n'), "one event per line");
        serde_json::from_slice(line).expect("a JSON event")
    }

    #[test]
    fn the_accept_header_picks_the_form_of_every_event() {
        let cases: &[(&str, &str, Form)] = &[
            ("plain JSON", "application/json", Form::Full),
            (
                "metadata informer (protobuf first)",
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
                Form::Metadata { api_version: "meta.k8s.io/v1" },
            ),
            (
                "metadata v1beta1",
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
                Form::Metadata { api_version: "meta.k8s.io/v1beta1" },
            ),
            ("a list form cannot be a watch event", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", Form::Full),
            (
                "table",
                "application/json;as=Table;g=meta.k8s.io;v=v1",
                Form::Table { include: IncludeObject::Metadata, api_version: "meta.k8s.io/v1", columns_sent: false },
            ),
        ];
        for (name, accept, want) in cases {
            let out = negotiate(Some(accept), true).expect(name);
            assert_eq!(Form::from_output(&out, IncludeObject::Metadata), *want, "{name}");
        }
        let beta = Output { metadata_only: true, meta_version: MetaVersion::V1beta1, ..Default::default() };
        assert_eq!(
            Form::from_output(&beta, IncludeObject::None),
            Form::Metadata { api_version: "meta.k8s.io/v1beta1" }
        );
    }

    #[test]
    fn metadata_events_carry_metadata_only_and_errors_stay_status() {
        let mut enc = Encoder {
            def: configmaps(),
            form: Form::Metadata { api_version: "meta.k8s.io/v1" },
            protobuf: false,
            sent: test_counter(),
        };
        for kind in ["ADDED", "MODIFIED", "DELETED"] {
            let e = decode(&enc.event(kind, cm()));
            assert_eq!(e["type"], kind);
            assert_eq!(
                e["object"],
                json!({
                    "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"name": "a", "namespace": "default", "resourceVersion": "7", "labels": {"x": "y"}},
                }),
                "{kind}"
            );
        }
        let b = decode(&enc.bookmark(9, true));
        assert_eq!(
            b,
            json!({"type": "BOOKMARK", "object": {
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}},
            }})
        );
        let err = decode(
            &enc.error(&ApiError::Expired { message: "too old resource version: 1 (5)".into(), continue_token: None }),
        );
        assert_eq!(err["type"], "ERROR");
        assert_eq!(err["object"]["kind"], "Status", "{err}");
        assert_eq!(err["object"]["code"], 410, "{err}");
    }

    #[test]
    fn metadata_events_in_v1beta1() {
        let mut enc = Encoder {
            def: configmaps(),
            form: Form::Metadata { api_version: "meta.k8s.io/v1beta1" },
            protobuf: false,
            sent: test_counter(),
        };
        let e = decode(&enc.event("ADDED", cm()));
        assert_eq!(e["object"]["apiVersion"], "meta.k8s.io/v1beta1", "{e}");
        let b = decode(&enc.bookmark(3, false));
        assert_eq!(b["object"]["apiVersion"], "meta.k8s.io/v1beta1", "{b}");
        assert_eq!(b["object"]["metadata"], json!({"resourceVersion": "3"}), "{b}");
    }

    #[test]
    fn full_events_are_the_objects() {
        let mut enc = Encoder { def: configmaps(), form: Form::Full, protobuf: false, sent: test_counter() };
        assert_eq!(decode(&enc.event("ADDED", cm())), json!({"type": "ADDED", "object": cm()}));
        let b = decode(&enc.bookmark(4, false));
        assert_eq!(b["object"], json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "4"}}));
    }

    #[test]
    fn protobuf_events_are_length_prefixed_watch_events() {
        let frame = |b: &Bytes| -> (String, Value) {
            let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            assert_eq!(b.len(), 4 + len, "one frame per event");
            protobuf::decode_watch_event(&b[4..]).expect("a protobuf WatchEvent")
        };
        let mut enc = Encoder { def: configmaps(), form: Form::Full, protobuf: true, sent: test_counter() };
        assert_eq!(frame(&enc.event("MODIFIED", cm())), ("MODIFIED".to_string(), cm()));
        let (ty, b) = frame(&enc.bookmark(12, true));
        assert_eq!(ty, "BOOKMARK");
        assert_eq!(
            b,
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
                "resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}})
        );
        let (ty, err) = frame(&enc.error(&ApiError::Expired { message: "too old".into(), continue_token: None }));
        assert_eq!(ty, "ERROR");
        assert_eq!((err["kind"].as_str(), err["code"].as_i64()), (Some("Status"), Some(410)), "{err}");
        assert_eq!(err["reason"], "Expired", "{err}");
        let mut meta = Encoder {
            def: configmaps(),
            form: Form::Metadata { api_version: "meta.k8s.io/v1" },
            protobuf: true,
            sent: test_counter(),
        };
        let (_, m) = frame(&meta.event("ADDED", cm()));
        assert_eq!(m["kind"], "PartialObjectMetadata", "{m}");
        assert_eq!(m["metadata"]["labels"], json!({"x": "y"}), "{m}");
        assert!(m.get("data").is_none(), "{m}");
    }

    fn csrs() -> ResourceDef {
        Registry::builtin()
            .find("certificates.k8s.io", "v1", "certificatesigningrequests")
            .cloned()
            .expect("CSRs are built in")
    }

    /// A CSR as stored (no resourceVersion), with `labels`.
    fn stored_csr(labels: Value, approved: bool) -> Vec<u8> {
        let mut csr = json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": "node-1", "labels": labels, "uid": "u1"},
            "spec": {"request": "LS0t", "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "usages": ["client auth"], "username": "system:bootstrap:abcdef"},
        });
        if approved {
            csr["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved"}]});
        }
        serde_json::to_vec(&csr).expect("JSON")
    }

    fn update(prev: Vec<u8>, value: Vec<u8>) -> storage::Event {
        storage::Event {
            kind: EventKind::Updated,
            rev: 42,
            key: "/registry/certificates.k8s.io/certificatesigningrequests/node-1".into(),
            value,
            prev_value: Some(prev),
            memo: Default::default(),
        }
    }

    /// One watcher: its output form, wire format, selectors, and whether it watches the key
    /// its field selector pins.
    struct Watcher {
        form: Form,
        protobuf: bool,
        labels: Option<&'static str>,
        fields: Option<&'static str>,
    }

    const FULL: Form = Form::Full;
    const META_V1: Form = Form::Metadata { api_version: "meta.k8s.io/v1" };
    const META_V1BETA1: Form = Form::Metadata { api_version: "meta.k8s.io/v1beta1" };
    const TABLE: Form =
        Form::Table { include: IncludeObject::Metadata, api_version: "meta.k8s.io/v1", columns_sent: false };

    fn w(form: Form, protobuf: bool) -> Watcher {
        Watcher { form, protobuf, labels: None, fields: None }
    }

    impl Watcher {
        fn filter(&self) -> Filter {
            Filter {
                labels: self.labels.map(|l| crate::machinery::selectors::LabelSelector::parse(l).expect("labels")),
                fields: self.fields.map(|f| crate::machinery::selectors::FieldSelector::parse(f).expect("fields")),
            }
        }

        /// This watcher's frame for `ev` (its own copy of the change, as the fan-out hands it).
        fn send(&self, ev: &storage::Event) -> Option<Bytes> {
            let (def, filter) = (csrs(), self.filter());
            let by_key = filter.pinned_key(&def, None).is_some() && holds_for_pinned_key(&def, &filter, None);
            let mut enc = Encoder { def: def.clone(), form: self.form, protobuf: self.protobuf, sent: test_counter() };
            translate(&def, &filter, by_key, &mut enc, &ev.clone())
        }

        /// The frame an encoder of its own, sharing nothing, makes of `kind` for `ev`.
        fn unshared(&self, kind: &str, ev: &storage::Event) -> Bytes {
            let mut enc = Encoder { def: csrs(), form: self.form, protobuf: self.protobuf, sent: test_counter() };
            enc.event(kind, meta::decode_at(&ev.value, ev.rev).expect("decodes"))
        }
    }

    fn encoded() -> usize {
        ENCODED.with(std::cell::Cell::get)
    }

    #[test]
    fn watchers_rendering_a_change_alike_get_one_encoding_and_others_their_own() {
        let labelled = stored_csr(json!({"x": "y"}), false);
        let unlabelled = stored_csr(json!({}), true);
        let kubelet = Watcher { fields: Some("metadata.name=node-1"), ..w(FULL, false) };
        let selected = Watcher { labels: Some("x=y"), ..w(FULL, false) };
        // (name, the change, its watchers and the event type each gets, encodings wanted)
        type Case = (&'static str, storage::Event, Vec<(Watcher, &'static str)>, usize);
        let cases: Vec<Case> = vec![
            (
                "the kubelet's watch by name and the controllers' informer: one JSON encoding",
                update(labelled.clone(), labelled.clone()),
                vec![(kubelet, "MODIFIED"), (w(FULL, false), "MODIFIED")],
                1,
            ),
            (
                "two protobuf watchers",
                update(labelled.clone(), labelled.clone()),
                vec![(w(FULL, true), "MODIFIED"), (w(FULL, true), "MODIFIED")],
                1,
            ),
            (
                "JSON and protobuf each their own",
                update(labelled.clone(), labelled.clone()),
                vec![
                    (w(FULL, false), "MODIFIED"),
                    (w(FULL, true), "MODIFIED"),
                    (w(FULL, false), "MODIFIED"),
                    (w(FULL, true), "MODIFIED"),
                ],
                2,
            ),
            (
                "full and PartialObjectMetadata of two versions",
                update(labelled.clone(), labelled.clone()),
                vec![
                    (w(META_V1, false), "MODIFIED"),
                    (w(META_V1BETA1, false), "MODIFIED"),
                    (w(FULL, false), "MODIFIED"),
                    (w(META_V1BETA1, false), "MODIFIED"),
                    (w(META_V1, true), "MODIFIED"),
                ],
                4,
            ),
            (
                "an object leaving a selector is DELETED for that watcher only",
                update(labelled.clone(), unlabelled.clone()),
                vec![(w(FULL, false), "MODIFIED"), (selected, "DELETED"), (w(FULL, false), "MODIFIED")],
                2,
            ),
            (
                "and entering it ADDED",
                update(unlabelled.clone(), labelled.clone()),
                vec![(Watcher { labels: Some("x=y"), ..w(FULL, false) }, "ADDED"), (w(FULL, false), "MODIFIED")],
                2,
            ),
            (
                "tables are built per watcher",
                update(labelled.clone(), labelled.clone()),
                vec![(w(TABLE, false), "MODIFIED"), (w(TABLE, false), "MODIFIED")],
                2,
            ),
        ];
        for (name, ev, watchers, want) in cases {
            let before = encoded();
            let frames: Vec<Bytes> = watchers.iter().map(|(w, _)| w.send(&ev).expect(name)).collect();
            assert_eq!(encoded() - before, want, "{name}: encodings");
            for ((w, kind), frame) in watchers.iter().zip(&frames) {
                assert_eq!(*frame, w.unshared(kind, &ev), "{name}: {kind} as an unshared encoder makes it");
            }
            for (i, (a, fa)) in watchers.iter().zip(&frames).enumerate() {
                for (b, fb) in watchers.iter().zip(&frames).skip(i + 1) {
                    let alike = a.0.form == b.0.form && a.0.protobuf == b.0.protobuf && a.1 == b.1;
                    if alike && !matches!(a.0.form, Form::Table { .. }) {
                        assert!(fa.as_ptr() == fb.as_ptr(), "{name}: watchers rendering alike share the bytes");
                    }
                }
            }
        }
        // Out of the selector before and after: nothing, and nothing encoded.
        let before = encoded();
        let ev = update(unlabelled.clone(), unlabelled);
        assert_eq!(Watcher { labels: Some("x=y"), ..w(FULL, false) }.send(&ev), None);
        assert_eq!(encoded(), before);
    }

    #[test]
    fn a_change_that_does_not_decode_is_skipped_by_every_watcher() {
        let ev = update(b"{".to_vec(), b"not json".to_vec());
        let kubelet = Watcher { fields: Some("metadata.name=node-1"), ..w(FULL, false) };
        for watcher in [&kubelet, &w(FULL, false), &w(META_V1, true), &w(TABLE, false)] {
            assert_eq!(watcher.send(&ev), None);
        }
    }

    #[test]
    fn a_selector_holds_for_the_pinned_key_when_it_asks_only_for_its_name_and_namespace() {
        let cases: &[(&str, Option<&str>, Option<&str>, bool)] = &[
            ("metadata.name=a", None, None, true),
            ("metadata.name=a", None, Some("default"), true),
            ("metadata.name=a,metadata.namespace=default", None, Some("default"), true),
            ("metadata.name=a,metadata.namespace=default", None, None, true),
            ("metadata.name=a,metadata.namespace=other", None, Some("default"), false),
            ("metadata.name=a,metadata.name!=a", None, None, false),
            ("metadata.name=a,metadata.namespace!=default", None, Some("default"), false),
            ("metadata.name=a", Some("x=y"), None, false),
            ("metadata.name!=b", None, None, false),
        ];
        let def = configmaps();
        for (fields, labels, ns, want) in cases {
            let filter = Watcher { form: FULL, protobuf: false, labels: *labels, fields: Some(fields) }.filter();
            assert_eq!(holds_for_pinned_key(&def, &filter, *ns), *want, "{fields} {labels:?} {ns:?}");
            if *want {
                // It holds for the object the key names, as the full filter says.
                let obj = json!({"metadata": {"name": "a", "namespace": ns.unwrap_or("default")}});
                assert!(filter.matches(&def, &obj), "{fields}");
            }
        }
        let csr =
            Watcher { form: FULL, protobuf: false, labels: None, fields: Some("spec.signerName=x,metadata.name=a") };
        assert!(!holds_for_pinned_key(&csrs(), &csr.filter(), None), "another field needs the object");
    }

    #[test]
    fn json_lines_are_the_bytes_of_the_type_and_object_map() {
        for kind in ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"] {
            let mut want = serde_json::to_vec(&json!({"type": kind, "object": cm()})).expect("JSON");
            want.push(b'\n');
            assert_eq!(frame(false, kind, &cm()), want, "{kind}");
        }
    }

    #[test]
    fn every_event_written_is_counted_once() {
        // A kind no other test watches: its count is this test's alone.
        let sent = WatchEvents::of("watch.test.kustos.dev", "v1", "counted");
        for protobuf in [false, true] {
            let mut enc = Encoder { def: configmaps(), form: Form::Full, protobuf, sent: sent.clone() };
            enc.event("ADDED", cm());
            enc.event("MODIFIED", cm());
            enc.bookmark(5, false);
            enc.error(&ApiError::Expired { message: "gone".into(), continue_token: None });
        }
        assert_eq!(sent.count(), 8, "four events each in JSON and in protobuf");
    }

    #[test]
    fn table_events_send_columns_once() {
        let form =
            Form::Table { include: IncludeObject::Metadata, api_version: "meta.k8s.io/v1beta1", columns_sent: false };
        let mut enc = Encoder { def: configmaps(), form, protobuf: false, sent: test_counter() };
        let first = decode(&enc.event("ADDED", cm()));
        let t = &first["object"];
        assert_eq!(t["kind"], "Table", "{t}");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1", "{t}");
        assert_eq!(t["metadata"]["resourceVersion"], "7", "{t}");
        assert!(t["columnDefinitions"].as_array().is_some_and(|c| !c.is_empty()), "{t}");
        assert_eq!(t["rows"][0]["cells"][0], "a", "{t}");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata", "{t}");
        assert_eq!(t["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1", "{t}");
        let second = decode(&enc.event("MODIFIED", cm()));
        assert_eq!(second["object"]["columnDefinitions"], Value::Null, "{second}");
        assert_eq!(second["object"]["rows"][0]["cells"][0], "a", "{second}");
        let b = decode(&enc.bookmark(8, false));
        assert_eq!(b["object"]["kind"], "Table", "{b}");
        assert_eq!(b["object"]["metadata"]["resourceVersion"], "8", "{b}");
        let err = decode(&enc.error(&ApiError::Expired { message: "gone".into(), continue_token: None }));
        assert_eq!(err["object"]["kind"], "Status", "{err}");
    }
}
