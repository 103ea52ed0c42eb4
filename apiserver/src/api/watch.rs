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

impl Encoder {
    /// The object an event of `kind` carries for `obj`.
    fn object(&mut self, kind: &str, obj: Value) -> Value {
        if kind == "ERROR" {
            return obj;
        }
        match &mut self.form {
            Form::Full => obj,
            Form::Metadata { api_version } => {
                let mut p = table::partial_object_metadata(&obj);
                p["apiVersion"] = json!(*api_version);
                p
            }
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
        if self.protobuf {
            return match protobuf::encode::watch_frame(kind, &object) {
                Ok(frame) => Bytes::from(frame),
                // Every served kind has a protobuf form; should one not encode, the watcher
                // is told so in an ERROR event (a Status always encodes).
                Err(e) => protobuf::encode::watch_frame("ERROR", &ApiError::internal(e).status())
                    .map(Bytes::from)
                    .unwrap_or_default(),
            };
        }
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    fn bookmark(&mut self, rev: Rev, initial_end: bool) -> Bytes {
        let obj = bookmark_object(&self.def, rev, initial_end);
        self.event("BOOKMARK", obj)
    }

    fn error(&mut self, e: &ApiError) -> Bytes {
        self.event("ERROR", e.status())
    }
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
    let def = c.def.clone();
    // A job of the supervisor: it ends with the client, its timeout, or the server.
    c.state.tasks.spawn_job("watch", async move {
        let work = run(store, scope, def, filter, planned, enc, bookmarks, tx.clone());
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
    filter: Filter,
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
                let Some(line) = translate(&def, &filter, &mut enc, &ev) else { continue };
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
fn translate(def: &ResourceDef, filter: &Filter, enc: &mut Encoder, ev: &storage::Event) -> Option<Bytes> {
    let obj = meta::decode_event(&ev.value, ev.rev).ok()?;
    match ev.kind {
        EventKind::Created => filter.matches(def, &obj).then(|| enc.event("ADDED", obj)),
        EventKind::Deleted => filter.matches(def, &obj).then(|| enc.event("DELETED", obj)),
        EventKind::Updated => {
            let now = filter.matches(def, &obj);
            let before = match (&ev.prev_value, filter.is_empty()) {
                (_, true) => true,
                (Some(p), false) => meta::decode_event(p, ev.rev).map(|o| filter.matches(def, &o)).unwrap_or(false),
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
