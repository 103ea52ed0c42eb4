//! Generic REST handlers for every registered kind: get, list, create, update, patch,
//! delete, deletecollection (watch lives in `watch.rs`). Each handler does the I/O and calls
//! the kind's `Strategy` hooks in a fixed order (see `registry`).

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::admission::{self, Attributes, Operation};
use crate::api::dupcheck::{FieldPath, StrictErrors};
use crate::api::patch::{self, PatchType};
use crate::api::selectors::{FieldSelector, LabelSelector};
use crate::api::table::{self, IncludeObject};
use crate::authn::UserInfo;
use crate::error::{ApiError, FieldError, Result};
use crate::http::negotiate::Output;
use crate::http::request_info::RequestInfo;
use crate::meta;
use crate::registry::{ResourceDef, Role};
use crate::storage::{self, ListOptions, Rev, Storage};
use crate::validation;
use crate::AppState;

/// Request bodies above this size are refused (413), like kube-apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Responses at least this big are gzipped when the client accepts it.
pub const GZIP_MIN: usize = 128 * 1024;
/// How long a continue token stays valid after its snapshot revision left the history.
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Parsed query parameters of a resource request.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pub pairs: Vec<(String, String)>,
}

impl Params {
    pub fn parse(query: Option<&str>) -> Self {
        Params { pairs: query.map(crate::http::request_info::url_pairs).unwrap_or_default() }
    }
    pub fn get(&self, k: &str) -> Option<&str> {
        self.pairs.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str())
    }
    pub fn all(&self, k: &str) -> Vec<&str> {
        self.pairs.iter().filter(|(pk, _)| pk == k).map(|(_, v)| v.as_str()).collect()
    }
    pub fn flag(&self, k: &str) -> Result<bool> {
        match self.get(k) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(v) => Err(ApiError::BadRequest(format!("invalid value for {k}: {v:?}: expected true or false"))),
        }
    }
    pub fn int(&self, k: &str) -> Result<Option<i64>> {
        match self.get(k) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| ApiError::BadRequest(format!("invalid value for {k}: {v:?}: not an integer"))),
        }
    }
    /// `dryRun=All` (repeatable); anything else is an error, a bare `dryRun` is a normal write.
    pub fn dry_run(&self) -> Result<bool> {
        let vals: Vec<&str> = self.all("dryRun").into_iter().filter(|v| !v.is_empty()).collect();
        for v in &vals {
            if *v != "All" {
                return Err(ApiError::BadRequest(format!("Invalid dry run value: {v:?}: supported values: \"All\"")));
            }
        }
        Ok(!vals.is_empty())
    }
    pub fn field_validation(&self) -> Result<FieldValidation> {
        match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(v) => Err(ApiError::BadRequest(format!(
                "fieldValidation: Unsupported value: {v:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

/// A JSON response with optional `Warning` headers, rendered per `Output`.
pub struct Reply {
    pub code: StatusCode,
    pub body: Value,
    pub warnings: Vec<String>,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Reply { code: StatusCode::OK, body, warnings: Vec::new() }
    }
}

/// Serialize a body per the negotiated output (JSON or YAML), gzip when big and accepted.
pub fn render(
    code: StatusCode,
    body: &Value,
    out: &Output,
    headers: &HeaderMap,
    pretty: bool,
    warnings: &[String],
) -> Response {
    let (bytes, ctype) = if out.yaml {
        match serde_yaml::to_string(body) {
            Ok(s) => (s.into_bytes(), "application/yaml"),
            Err(e) => return ApiError::internal(e).into_response(),
        }
    } else {
        let r = if pretty { serde_json::to_vec_pretty(body) } else { serde_json::to_vec(body) };
        match r {
            Ok(b) => (b, "application/json"),
            Err(e) => return ApiError::internal(e).into_response(),
        }
    };
    send_bytes(code, bytes, ctype, headers, warnings)
}

/// Send serialized bytes: gzip when big and accepted, plus `Warning` headers.
pub fn send_bytes(
    code: StatusCode,
    bytes: Vec<u8>,
    ctype: &'static str,
    headers: &HeaderMap,
    warnings: &[String],
) -> Response {
    let gzip = bytes.len() >= GZIP_MIN
        && headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let mut resp = if gzip {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        match enc.write_all(&bytes).and_then(|_| enc.finish()) {
            Ok(z) => {
                let mut r = (code, z).into_response();
                r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                r
            }
            Err(e) => return ApiError::internal(e).into_response(),
        }
    } else {
        (code, bytes).into_response()
    };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    for v in warning_headers(warnings) {
        resp.headers_mut().append(header::WARNING, v);
    }
    resp
}

/// Warning text kept per response, in characters, before items are truncated
/// (k8s.io/apiserver `filters/warning.go` `truncateAtTotalRunes`).
pub const WARNING_TOTAL_CHARS: usize = 4 * 1024;
/// Characters an item keeps once the total is exceeded (`truncateItemRunes`).
pub const WARNING_ITEM_CHARS: usize = 256;

/// The `Warning` header values for `warnings`, bounded as upstream's warning recorder
/// bounds them: empty and repeated texts dropped, and once the texts add up to more than
/// [`WARNING_TOTAL_CHARS`] characters every item is cut to [`WARNING_ITEM_CHARS`] and
/// items stop being added when the total is reached. A text that cannot be a header value
/// (control characters) is left out.
pub fn warning_headers(warnings: &[String]) -> Vec<HeaderValue> {
    let cut = |t: &str| -> (String, usize) {
        match t.char_indices().nth(WARNING_ITEM_CHARS) {
            Some((i, _)) => (t[..i].to_string(), WARNING_ITEM_CHARS),
            None => (t.to_string(), t.chars().count()),
        }
    };
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut out: Vec<HeaderValue> = Vec::new();
    let mut written = 0usize;
    let mut truncating = false;
    for w in warnings {
        if w.is_empty() {
            continue;
        }
        if truncating && written >= WARNING_TOTAL_CHARS {
            break;
        }
        if !seen.insert(w.as_str()) {
            continue;
        }
        kept.push(w);
        let (text, chars) = if truncating { cut(w) } else { (w.clone(), w.chars().count()) };
        let Some(value) = warning_value(&text) else { continue };
        if truncating || written + chars <= WARNING_TOTAL_CHARS {
            written += chars;
            out.push(value);
            continue;
        }
        // Over the budget: start again with every item so far cut short.
        truncating = true;
        written = 0;
        out.clear();
        for k in &kept {
            let (text, chars) = cut(k);
            if let Some(v) = warning_value(&text) {
                written += chars;
                out.push(v);
            }
        }
    }
    out
}

/// `299 - "<text>"` with `\` and `"` escaped (apimachinery `NewWarningHeader`); `None` for
/// text with control characters.
fn warning_value(text: &str) -> Option<HeaderValue> {
    if text.chars().any(char::is_control) {
        return None;
    }
    let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
    HeaderValue::from_bytes(format!("299 - \"{quoted}\"").as_bytes()).ok()
}

/// Everything a handler needs about the request.
pub struct Call<'a> {
    pub state: &'a Arc<AppState>,
    pub def: &'a ResourceDef,
    pub info: &'a RequestInfo,
    pub user: &'a UserInfo,
    pub params: Params,
    pub out: Output,
}

impl Call<'_> {
    fn store(&self) -> &Arc<dyn Storage> {
        &self.state.storage
    }
    fn ns(&self) -> Option<&str> {
        if self.def.namespaced && !self.info.namespace.is_empty() {
            Some(self.info.namespace.as_str())
        } else {
            None
        }
    }
    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(self.def.group, self.def.resource, name)
    }
    fn storage_err(&self, name: &str, e: storage::Error) -> ApiError {
        map_storage_error(self.def, name, e)
    }
    fn include_object(&self) -> IncludeObject {
        IncludeObject::parse(self.params.get("includeObject"))
    }
    /// Render one object per the negotiated output (Table/metadata/full).
    pub fn object_body(&self, obj: Value) -> Value {
        if self.out.table {
            let list_meta = json!({"resourceVersion": meta::rv(&obj)});
            table::table(self.def, &[obj], self.include_object(), list_meta, true)
        } else if self.out.metadata_only {
            table::partial_object_metadata(&obj)
        } else {
            obj
        }
    }
}

pub fn map_storage_error(def: &ResourceDef, name: &str, e: storage::Error) -> ApiError {
    match e {
        storage::Error::NotFound(_) => ApiError::not_found(def.group, def.resource, name),
        storage::Error::AlreadyExists(_) => ApiError::already_exists(def.group, def.resource, name),
        storage::Error::Conflict { .. } => ApiError::conflict(
            def.group,
            def.resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ),
        storage::Error::Compacted { requested, compacted } => ApiError::Expired {
            message: format!("too old resource version: {requested} ({compacted})"),
            continue_token: None,
        },
        storage::Error::FutureRevision { .. } => {
            ApiError::Timeout { message: "Too large resource version".into(), retry_after: Some(1) }
        }
        storage::Error::Backend(m) => ApiError::internal(m),
        storage::Error::Unavailable(m) => ApiError::ServiceUnavailable(m),
        storage::Error::Timeout(m) => ApiError::Timeout { message: m, retry_after: Some(1) },
    }
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

/// Parse a resourceVersion query value.
fn parse_rv(s: &str) -> Result<Rev> {
    s.parse::<Rev>().map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s:?}")))
}

/// Wait (bounded) until the store has reached `rv`; else 504 "Too large resource version".
pub async fn wait_for_rv(store: &Arc<dyn Storage>, rv: Rev) -> Result<()> {
    for _ in 0..30 {
        if store.current_rev() >= rv {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ApiError::Timeout {
        message: format!("Timeout: Too large resource version: {rv}, current: {}", store.current_rev()),
        retry_after: Some(1),
    })
}

pub async fn get(c: &Call<'_>) -> Result<Reply> {
    if let Some(rv) = c.params.get("resourceVersion").filter(|v| !v.is_empty() && *v != "0") {
        let rv = parse_rv(rv)?;
        wait_for_rv(c.store(), rv).await?;
    }
    let name = &c.info.name;
    let key = c.def.key(c.ns(), name);
    let kv = c.store().get(&key).await.map_err(|e| c.storage_err(name, e))?;
    let Some(kv) = kv else { return Err(c.not_found(name)) };
    let obj = meta::from_stored(&kv)?;
    Ok(Reply::ok(c.object_body(obj)))
}

/// The continue token: base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"<key suffix>"}`.
fn encode_continue(rv: Rev, start_after: &str) -> String {
    use base64::Engine;
    let doc = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start_after});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(doc.to_string())
}

fn decode_continue(token: &str) -> Result<(Rev, String)> {
    use base64::Engine;
    let bad = || ApiError::BadRequest(format!("continue key is not valid: {token:?}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|_| bad())?;
    let doc: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    if doc.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad());
    }
    let rv = doc.get("rv").and_then(Value::as_u64).filter(|r| *r > 0).ok_or_else(bad)?;
    let start = doc.get("start").and_then(Value::as_str).ok_or_else(bad)?.to_string();
    if start.contains("..") || start.starts_with('/') {
        return Err(bad());
    }
    Ok((rv, start))
}

/// Label and field selectors of a list/watch/deletecollection, with field names checked
/// against what the kind supports.
pub struct Filter {
    pub labels: Option<LabelSelector>,
    pub fields: Option<FieldSelector>,
}

impl Filter {
    pub fn from_params(def: &ResourceDef, params: &Params) -> Result<Self> {
        let labels = match params.get("labelSelector").filter(|s| !s.trim().is_empty()) {
            Some(s) => Some(LabelSelector::parse(s).map_err(|e| ApiError::BadRequest(e.to_string()))?),
            None => None,
        };
        let fields = match params.get("fieldSelector").filter(|s| !s.trim().is_empty()) {
            Some(s) => {
                let fs = FieldSelector::parse(s).map_err(|e| ApiError::BadRequest(e.to_string()))?;
                let probe = json!({"metadata": {}});
                for f in fs.fields() {
                    let supported =
                        f == "metadata.name" || f == "metadata.namespace" || def.strategy.field(&probe, &f).is_some();
                    if !supported {
                        return Err(ApiError::BadRequest(format!("field label not supported: {f}")));
                    }
                }
                Some(fs)
            }
            None => None,
        };
        Ok(Filter { labels, fields })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_none() && self.fields.is_none()
    }

    pub fn matches(&self, def: &ResourceDef, obj: &Value) -> bool {
        if let Some(l) = &self.labels {
            if !l.matches(&meta::labels(obj)) {
                return false;
            }
        }
        if let Some(f) = &self.fields {
            let get = |field: &str| -> Option<String> {
                match field {
                    "metadata.name" => Some(meta::name(obj).to_string()),
                    "metadata.namespace" => Some(meta::namespace(obj).to_string()),
                    other => def.strategy.field(obj, other),
                }
            };
            if !f.matches(get) {
                return false;
            }
        }
        true
    }

    /// The one storage key this filter can match, when `metadata.name=X` (and, for a
    /// namespaced kind, the namespace) pins it: lists and watches of it then read that key
    /// alone instead of scanning the collection (a kubelet waiting for its CSR among
    /// thousands).
    pub fn pinned_key(&self, def: &ResourceDef, ns: Option<&str>) -> Option<String> {
        let fields = self.fields.as_ref()?;
        let name = fields.requires_exact_match("metadata.name")?;
        let ns = match (def.namespaced, ns) {
            (false, _) => None,
            (true, Some(ns)) => Some(ns),
            (true, None) => Some(fields.requires_exact_match("metadata.namespace")?),
        };
        Some(def.key(ns, name))
    }
}

/// The list RV semantics of the seed table (§5): returns the revision to read at, if any.
fn list_read_rev(params: &Params, has_limit: bool, has_continue: bool) -> Result<Option<Rev>> {
    let rv = params.get("resourceVersion").filter(|v| !v.is_empty());
    let rvm = params.get("resourceVersionMatch").filter(|v| !v.is_empty());
    if has_continue {
        if rv.is_some_and(|v| v != "0") {
            return Err(ApiError::BadRequest("specifying resource version is not allowed when using continue".into()));
        }
        if rvm.is_some() {
            return Err(ApiError::BadRequest("resourceVersionMatch is forbidden when continue is provided".into()));
        }
        return Ok(None);
    }
    match (rvm, rv) {
        (Some(m), None) => Err(invalid_list_options(format!(
            "resourceVersionMatch is forbidden unless resourceVersion is provided (got {m:?})"
        ))),
        (Some("Exact"), Some("0")) => {
            Err(invalid_list_options("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into()))
        }
        (Some("Exact"), Some(v)) => Ok(Some(parse_rv(v)?)),
        (Some("NotOlderThan"), Some(v)) => {
            let _ = parse_rv(v)?;
            Ok(None)
        }
        (Some(m), Some(_)) => Err(invalid_list_options(format!(
            "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\""
        ))),
        (None, Some("0")) | (None, None) => Ok(None),
        (None, Some(v)) => {
            let r = parse_rv(v)?;
            // With a limit, a given RV means Exact; without one, NotOlderThan.
            if has_limit {
                Ok(Some(r))
            } else {
                Ok(None)
            }
        }
    }
}

fn invalid_list_options(msg: String) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", vec![FieldError::forbidden("resourceVersionMatch", msg)])
}

/// Read a list: items, list RV, continue token, remaining count.
pub struct Listed {
    /// Decoded items (empty unless `read_list` was asked to decode).
    pub items: Vec<Value>,
    /// The stored form of every returned item (always filled).
    pub raw: Vec<crate::storage::KeyValue>,
    pub rev: Rev,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

pub async fn read_list(
    store: &Arc<dyn Storage>,
    def: &ResourceDef,
    ns: Option<&str>,
    params: &Params,
    filter: &Filter,
    decode: bool,
) -> Result<Listed> {
    let limit = params.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let cont = params.get("continue").filter(|c| !c.is_empty());
    let mut at_rev = list_read_rev(params, limit.is_some(), cont.is_some())?;
    if let Some(v) = params.get("resourceVersion").filter(|v| !v.is_empty() && *v != "0") {
        if at_rev.is_none() && cont.is_none() {
            wait_for_rv(store, parse_rv(v)?).await?;
        }
    }
    if let (None, Some(key)) = (cont, filter.pinned_key(def, ns)) {
        let (kv, rev) = store.get_at(&key, at_rev).await.map_err(|e| map_storage_error(def, "", e))?;
        let mut items = Vec::new();
        let mut raw = Vec::new();
        if let Some(kv) = kv {
            let obj = meta::from_stored(&kv)?;
            if filter.matches(def, &obj) {
                raw.push(kv);
                if decode {
                    items.push(obj);
                }
            }
        }
        return Ok(Listed { items, raw, rev, continue_token: None, remaining: None });
    }
    let prefix = def.ns_prefix(ns);
    let mut start_after = None;
    if let Some(token) = cont {
        let (rv, start) = decode_continue(token)?;
        at_rev = Some(rv);
        start_after = Some(format!("{prefix}{start}"));
    }
    if let Some(r) = at_rev {
        if r > store.current_rev() {
            wait_for_rv(store, r).await?;
        }
    }
    let mut items = Vec::new();
    let mut raw = Vec::new();
    let mut read_rev = at_rev;
    let mut cursor = start_after;
    // Key of the last returned item and how many keys follow it, when more remain.
    let mut more: Option<(String, u64)> = None;
    // Page through the store until `limit` matches are found or the prefix is exhausted.
    loop {
        let need = limit.map(|l| l - raw.len());
        let page_limit = match need {
            Some(n) if filter.is_empty() => Some(n),
            Some(n) => Some(n.max(256)),
            None => None,
        };
        let page = store
            .list(&prefix, ListOptions { at_rev: read_rev, start_after: cursor.clone(), limit: page_limit })
            .await
            .map_err(|e| match e {
                storage::Error::Compacted { .. } if cont.is_some() => ApiError::Expired {
                    message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
                    continue_token: cursor
                        .as_deref()
                        .map(|k| encode_continue(store.current_rev(), k.strip_prefix(&prefix).unwrap_or(k))),
                },
                other => map_storage_error(def, "", other),
            })?;
        read_rev = Some(page.rev);
        let mut filled_at = None;
        for (i, kv) in page.items.iter().enumerate() {
            let obj = if decode || !filter.is_empty() { Some(meta::from_stored(kv)?) } else { None };
            if obj.as_ref().is_none_or(|o| filter.matches(def, o)) {
                raw.push(kv.clone());
                if decode {
                    items.extend(obj);
                }
                if limit == Some(raw.len()) {
                    filled_at = Some(i);
                    break;
                }
            }
        }
        if let Some(i) = filled_at {
            let left = (page.items.len() - i - 1) as u64 + page.remaining;
            if left > 0 {
                more = Some((page.items[i].key.clone(), left));
            }
            break;
        }
        match page.items.last() {
            Some(last) if limit.is_some() && page.remaining > 0 => cursor = Some(last.key.clone()),
            _ => break,
        }
    }
    let rev = read_rev.unwrap_or_else(|| store.current_rev());
    let continue_token = more.as_ref().map(|(k, _)| encode_continue(rev, k.strip_prefix(&prefix).unwrap_or(k)));
    let remaining = more.as_ref().filter(|_| filter.is_empty()).map(|(_, n)| *n);
    Ok(Listed { items, raw, rev, continue_token, remaining })
}

/// Serve a list. Plain JSON (the common case, and the big one) is written straight from the
/// stored bytes with each resourceVersion spliced in; Table, metadata-only, YAML and pretty
/// output go through `render`.
pub async fn list(c: &Call<'_>, headers: &HeaderMap, pretty: bool) -> Result<Response> {
    let filter = Filter::from_params(c.def, &c.params)?;
    let plain = !c.out.table && !c.out.metadata_only && !c.out.yaml && !pretty;
    let l = read_list(c.store(), c.def, c.ns(), &c.params, &filter, !plain).await?;
    let mut list_meta = Map::new();
    if let Some(t) = &l.continue_token {
        list_meta.insert("continue".into(), json!(t));
    }
    if let Some(r) = l.remaining {
        list_meta.insert("remainingItemCount".into(), json!(r));
    }
    list_meta.insert("resourceVersion".into(), json!(l.rev.to_string()));
    if plain {
        // Same key order as serde_json's sorted maps: apiVersion, items, kind, metadata.
        let mut out = Vec::with_capacity(64 + l.raw.iter().map(|kv| kv.value.len() + 32).sum::<usize>());
        out.extend_from_slice(b"{\"apiVersion\":");
        serde_json::to_writer(&mut out, c.def.api_version().as_str()).map_err(ApiError::internal)?;
        out.extend_from_slice(b",\"items\":[");
        for (i, kv) in l.raw.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            meta::write_with_rv(&mut out, &kv.value, kv.mod_rev)?;
        }
        out.extend_from_slice(b"],\"kind\":");
        serde_json::to_writer(&mut out, c.def.list_kind().as_str()).map_err(ApiError::internal)?;
        out.extend_from_slice(b",\"metadata\":");
        serde_json::to_writer(&mut out, &list_meta).map_err(ApiError::internal)?;
        out.push(b'}');
        return Ok(send_bytes(StatusCode::OK, out, "application/json", headers, &[]));
    }
    let body = if c.out.table {
        table::table(c.def, &l.items, c.include_object(), Value::Object(list_meta), true)
    } else if c.out.metadata_only {
        json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": list_meta,
            "items": l.items.iter().map(table::partial_object_metadata).collect::<Vec<_>>(),
        })
    } else {
        json!({
            "kind": c.def.list_kind(),
            "apiVersion": c.def.api_version(),
            "metadata": list_meta,
            "items": l.items,
        })
    };
    Ok(render(StatusCode::OK, &body, &c.out, headers, pretty, &[]))
}

// ---------------------------------------------------------------------------------------
// Body decoding and field validation
// ---------------------------------------------------------------------------------------

/// Decode a JSON or YAML request body into an object.
pub fn decode_body(def: &ResourceDef, body: &Bytes, content_type: &str) -> Result<Value> {
    if body.is_empty() {
        return Err(ApiError::BadRequest("request body is empty".into()));
    }
    let v: Value = match content_type {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}")))?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))?,
        crate::api::protobuf::MEDIA_TYPE => crate::api::protobuf::decode(body).map_err(|e| {
            ApiError::BadRequest(format!("{} in version \"{}\" cannot be handled as a {}: {e}", def.kind, def.version, def.kind))
        })?,
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other:?})"
            )))
        }
    };
    if !v.is_object() {
        return Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: the body must be a JSON object",
            def.kind, def.version, def.kind
        )));
    }
    check_type_meta(def, &v)?;
    Ok(v)
}

/// apiVersion/kind in a body must name this resource's kind (when present).
pub fn check_type_meta(def: &ResourceDef, v: &Value) -> Result<()> {
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() && api_version.is_empty() {
        return Ok(());
    }
    if (!api_version.is_empty() && api_version != def.api_version()) || (!kind.is_empty() && kind != def.kind) {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({}) or the kind ({kind}) does not match {}",
            def.api_version(),
            def.kind
        )));
    }
    Ok(())
}

/// Paths present (non-null) in `input` but gone from `pruned`: unknown fields, as
/// `unknown field "<path>"` reports added to `out` (which caps and dedups them).
fn unknown_fields(input: &Value, pruned: &Value, path: &mut FieldPath, out: &mut StrictErrors) {
    if out.is_full() {
        return;
    }
    match (input, pruned) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                path.push_key(k);
                match b.get(k) {
                    None if !v.is_null() => out.add(format!("unknown field \"{}\"", path.render())),
                    None => {}
                    Some(bv) => unknown_fields(v, bv, path, out),
                }
                path.pop();
                if out.is_full() {
                    return;
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                path.push_index(i);
                unknown_fields(x, y, path, out);
                path.pop();
                if out.is_full() {
                    return;
                }
            }
        }
        _ => {}
    }
}

/// Decode through the typed model: type errors → 400; unknown fields pruned and reported
/// per `fieldValidation` (Strict → 400, Warn → warnings, Ignore → nothing).
pub fn typed_check(
    def: &ResourceDef,
    obj: &Value,
    mode: FieldValidation,
    duplicates: &[String],
) -> Result<(Value, Vec<String>)> {
    let mut for_check = obj.clone();
    // apiVersion/kind are always known.
    if let Some(m) = for_check.as_object_mut() {
        m.insert("apiVersion".into(), json!(def.api_version()));
        m.insert("kind".into(), json!(def.kind));
    }
    let pruned = def.strategy.roundtrip(&for_check).map_err(|e| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            def.kind, def.version, def.kind
        ))
    })?;
    // At most MAX_STRICT_ERRORS distinct problems, as upstream's strict decoder keeps.
    let mut found = StrictErrors::default();
    unknown_fields(&for_check, &pruned, &mut FieldPath::default(), &mut found);
    for p in duplicates {
        found.add(format!("duplicate field \"{p}\""));
    }
    let problems = found.into_vec();
    match mode {
        FieldValidation::Strict if !problems.is_empty() => Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            def.kind,
            def.version,
            def.kind,
            problems.join(", ")
        ))),
        FieldValidation::Warn => Ok((pruned, problems)),
        _ => Ok((pruned, Vec::new())),
    }
}

/// Keys that appear twice in one JSON object of `body`, as dotted paths (bounded: see
/// [`crate::api::dupcheck`]).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    crate::api::dupcheck::duplicate_keys(body)
}

// ---------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------

fn validate_meta(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let name_fn = def.strategy.name_rule();
    let empty = json!({});
    let m = obj.get("metadata").unwrap_or(&empty);
    validation::validate_object_meta(m, def.namespaced, name_fn, "metadata")
}

/// The one 422 `Invalid` for every field error found, or a 500 when one of them is the
/// server's (a stored object that does not decode: [`FieldError::internal`]).
fn invalid(def: &ResourceDef, obj: &Value, errs: Vec<FieldError>) -> ApiError {
    if let Some(e) = errs.iter().find(|e| e.reason == crate::error::INTERNAL_ERROR) {
        return ApiError::internal(e.render());
    }
    ApiError::invalid(def.group, def.kind, meta::name(obj), errs)
}

/// Run the admission chain for a write or delete through `c`.
async fn admit(c: &Call<'_>, op: Operation, new: Option<&Value>, old: Option<&Value>) -> Result<()> {
    let a = Attributes { op, def: c.def, info: c.info, user: c.user, field_selector: None };
    admission::chain().admit(c.state, &a, new, old).await
}

/// Server-owned metadata on create.
fn init_metadata(def: &ResourceDef, obj: &mut Value, ns: Option<&str>) {
    let tracks = def.strategy.tracks_generation();
    let m = meta::meta_mut(obj);
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    for k in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"] {
        m.remove(k);
    }
    if tracks {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    match ns {
        Some(ns) if def.namespaced => {
            m.insert("namespace".into(), json!(ns));
        }
        // Cluster-scoped kinds: an empty namespace is dropped, a set one fails validation.
        _ if !def.namespaced && m.get("namespace").and_then(Value::as_str).is_some_and(str::is_empty) => {
            m.remove("namespace");
        }
        _ => {}
    }
    if m.get("generateName").and_then(Value::as_str).is_some_and(str::is_empty) {
        m.remove("generateName");
    }
}

pub async fn create(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    if !c.info.subresource.is_empty() {
        return Err(ApiError::MethodNotAllowed(format!(
            "create is not supported on {}/{}",
            c.def.resource, c.info.subresource
        )));
    }
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    let raw = decode_body(c.def, body, content_type)?;
    let dups =
        if content_type.is_empty() || content_type == "application/json" { duplicate_fields(body) } else { Vec::new() };
    let (mut obj, warnings) = typed_check(c.def, &raw, mode, &dups)?;
    // Namespace in the body must agree with the path.
    if c.def.namespaced {
        let body_ns = meta::namespace(&obj).to_string();
        let Some(path_ns) = c.ns() else {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        };
        if !body_ns.is_empty() && body_ns != path_ns {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    obj["apiVersion"] = json!(c.def.api_version());
    obj["kind"] = json!(c.def.kind);
    init_metadata(c.def, &mut obj, c.ns());
    let generate = meta::name(&obj).is_empty() && meta::meta_str(&obj, "generateName").is_some();
    if generate {
        let prefix = meta::meta_str(&obj, "generateName").unwrap_or("").to_string();
        meta::meta_mut(&mut obj).insert("name".into(), json!(validation::generate_name(&prefix)));
    }
    c.def.strategy.prepare_for_create(&mut obj);
    c.def.strategy.prepare_for_create_by(&mut obj, c.user);
    let mut errs = validate_meta(c.def, &obj);
    errs.extend(c.def.strategy.validate(&obj));
    if !errs.is_empty() {
        return Err(invalid(c.def, &obj, errs));
    }
    admit(c, Operation::Create, Some(&obj), None).await?;
    // The size and depth limits of a stored object, checked on a dry run too.
    let mut stored = meta::to_stored_new(&obj)?;
    if dry_run {
        return Ok(Reply { code: StatusCode::CREATED, body: c.object_body(obj), warnings });
    }
    let mut attempts = 0;
    loop {
        let name = meta::name(&obj).to_string();
        let key = c.def.key(c.ns(), &name);
        match c.store().create(&key, std::mem::take(&mut stored)).await {
            Ok(rev) => {
                meta::set_rv(&mut obj, rev);
                return Ok(Reply { code: StatusCode::CREATED, body: c.object_body(obj), warnings });
            }
            Err(storage::Error::AlreadyExists(_)) if generate && attempts + 1 < GENERATE_NAME_ATTEMPTS => {
                attempts += 1;
                let prefix = meta::meta_str(&obj, "generateName").unwrap_or("").to_string();
                meta::meta_mut(&mut obj).insert("name".into(), json!(validation::generate_name(&prefix)));
                stored = meta::to_stored_new(&obj)?;
            }
            Err(e) => return Err(c.storage_err(&name, e)),
        }
    }
}

/// The metadata a subresource write may not change (upstream ResetObjectMetaForStatus).
const STATUS_RESET_META: &[&str] =
    &["labels", "annotations", "finalizers", "ownerReferences", "deletionTimestamp", "generation"];
/// Metadata that always comes from the stored object.
const SERVER_META: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "managedFields",
];

/// Spec changes bump generation for kinds that track it.
fn spec_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(new) != strip(old)
}

/// Shared tail of update and patch: prepare, validate, store. `old_rev` is the revision
/// the caller read `old` at (the CAS precondition).
pub async fn finish_update(
    c: &Call<'_>,
    old: &Value,
    old_rev: Rev,
    mut new: Value,
    warnings: Vec<String>,
    dry_run: bool,
) -> Result<Reply> {
    let sub = c.info.subresource.as_str();
    let name = meta::name(old).to_string();
    // Identity and server-owned metadata come from the stored object.
    new["apiVersion"] = json!(c.def.api_version());
    new["kind"] = json!(c.def.kind);
    {
        let old_meta = old.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
        let m = meta::meta_mut(&mut new);
        for k in SERVER_META {
            match old_meta.get(*k) {
                Some(v) => m.insert((*k).to_string(), v.clone()),
                None => m.remove(*k),
            };
        }
        if !sub.is_empty() {
            for k in STATUS_RESET_META {
                match old_meta.get(*k) {
                    Some(v) => m.insert((*k).to_string(), v.clone()),
                    None => m.remove(*k),
                };
            }
        }
        if m.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty) {
            if let Some(ns) = old_meta.get("namespace") {
                m.insert("namespace".into(), ns.clone());
            }
        }
        if m.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("name".into(), json!(name));
        }
        m.remove("resourceVersion");
    }
    if sub.is_empty() {
        c.def.strategy.prepare_for_update(&mut new, old);
    } else {
        c.def.strategy.prepare_for_subresource(sub, &mut new, old);
    }
    if sub.is_empty() && c.def.strategy.tracks_generation() && spec_changed(&new, old) {
        let g = old.get("metadata").and_then(|m| m.get("generation")).and_then(Value::as_i64).unwrap_or(0);
        meta::meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    // Validation.
    let mut errs = validate_meta(c.def, &new);
    let empty = json!({});
    errs.extend(validation::validate_object_meta_update(
        new.get("metadata").unwrap_or(&empty),
        old.get("metadata").unwrap_or(&empty),
    ));
    if meta::is_deleting(old) {
        let old_f = meta::finalizers(old);
        if meta::finalizers(&new).iter().any(|f| !old_f.contains(f)) {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                "no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    errs.extend(c.def.strategy.validate_on_update(&new, old));
    if sub.is_empty() {
        errs.extend(c.def.strategy.validate_update(&new, old));
    } else {
        errs.extend(c.def.strategy.validate_subresource(sub, &new, old));
    }
    if !errs.is_empty() {
        return Err(invalid(c.def, &new, errs));
    }
    admit(c, Operation::Update, Some(&new), Some(old)).await?;
    let key = c.def.key(c.ns(), &name);
    // A write that changes nothing is not stored (the resourceVersion stays).
    let mut old_cmp = old.clone();
    meta::meta_mut(&mut old_cmp).remove("resourceVersion");
    if new == old_cmp {
        let mut same = new;
        meta::set_rv(&mut same, old_rev);
        return Ok(Reply { code: StatusCode::OK, body: c.object_body(same), warnings });
    }
    // The last finalizer removed from a deleting object completes its deletion.
    let completes_deletion = meta::is_deleting(&new) && meta::finalizers(&new).is_empty() && !is_namespace(c.def);
    // The size and depth limits of a stored object, checked on a dry run too.
    let stored = if completes_deletion { Vec::new() } else { meta::to_stored(&new)? };
    if dry_run {
        meta::set_rv(&mut new, old_rev);
        return Ok(Reply { code: StatusCode::OK, body: c.object_body(new), warnings });
    }
    if completes_deletion {
        let rev = c.store().delete(&key, old_rev).await.map_err(|e| c.storage_err(&name, e))?;
        meta::set_rv(&mut new, rev);
        crate::api::gc::after_delete(c.state, c.def, &new);
        return Ok(Reply { code: StatusCode::OK, body: c.object_body(new), warnings });
    }
    let rev = c.store().update(&key, stored, old_rev).await.map_err(|e| c.storage_err(&name, e))?;
    meta::set_rv(&mut new, rev);
    Ok(Reply { code: StatusCode::OK, body: c.object_body(new), warnings })
}

fn is_namespace(def: &ResourceDef) -> bool {
    def.strategy.role() == Role::Namespace
}

fn check_subresource(c: &Call<'_>, verb: &str) -> Result<()> {
    let sub = c.info.subresource.as_str();
    if !sub.is_empty() && !c.def.subresources.contains(&sub) {
        return Err(ApiError::not_found(c.def.group, &format!("{}/{sub}", c.def.resource), &c.info.name));
    }
    if !sub.is_empty() && !crate::api::discovery::subresource_verbs(sub).contains(&verb) {
        return Err(ApiError::MethodNotAllowed(format!("{verb} is not supported on {}/{sub}", c.def.resource)));
    }
    Ok(())
}

pub async fn update(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    check_subresource(c, "update")?;
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    let raw = decode_body(c.def, body, content_type)?;
    let dups =
        if content_type.is_empty() || content_type == "application/json" { duplicate_fields(body) } else { Vec::new() };
    let (new, warnings) = typed_check(c.def, &raw, mode, &dups)?;
    let name = c.info.name.clone();
    let body_name = meta::name(&new);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if c.def.namespaced {
        let body_ns = meta::namespace(&new);
        if !body_ns.is_empty() && Some(body_ns) != c.ns() {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    let key = c.def.key(c.ns(), &name);
    let kv = c.store().get(&key).await.map_err(|e| c.storage_err(&name, e))?;
    let Some(kv) = kv else { return Err(c.not_found(&name)) };
    let old = meta::from_stored(&kv)?;
    let body_rv = meta::rv(&new);
    if !body_rv.is_empty() && body_rv != kv.mod_rev.to_string() {
        return Err(ApiError::conflict(
            c.def.group,
            c.def.resource,
            &name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    finish_update(c, &old, kv.mod_rev, new, warnings, dry_run).await
}

pub async fn patch(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    check_subresource(c, "patch")?;
    let Some(pt) = PatchType::from_content_type(content_type) else {
        return Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
        )));
    };
    if pt == PatchType::StrategicMerge && !c.def.strategy.strategic_merge_patch() {
        return Err(ApiError::UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
        ));
    }
    if pt == PatchType::Apply {
        return Err(ApiError::UnsupportedMediaType(
            "server-side apply (application/apply-patch+yaml) is not supported by this server yet".into(),
        ));
    }
    if c.params.get("force").is_some() {
        return Err(ApiError::BadRequest("force: Forbidden: may not be specified for non-apply patch".into()));
    }
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    if body.len() > MAX_BODY {
        return Err(ApiError::RequestEntityTooLarge("Request entity too large: limit is 3145728".into()));
    }
    let name = c.info.name.clone();
    let key = c.def.key(c.ns(), &name);
    let keys = patch::TableMergeKeys(c.def.strategy.merge_keys());
    // Retry on write conflicts unless the patch itself pins a resourceVersion.
    for _ in 0..8 {
        let kv = c.store().get(&key).await.map_err(|e| c.storage_err(&name, e))?;
        let Some(kv) = kv else { return Err(c.not_found(&name)) };
        let old = meta::from_stored(&kv)?;
        let patched = patch::apply_patch(&old, body, pt, &keys).map_err(|e| match e {
            patch::PatchError::BadRequest(m) => ApiError::BadRequest(m),
            patch::PatchError::TooLarge(m) => ApiError::RequestEntityTooLarge(m),
            patch::PatchError::Invalid(m) => ApiError::Invalid {
                message: m,
                subject: crate::error::Subject {
                    group: c.def.group.into(),
                    kind: c.def.kind.into(),
                    name: name.clone(),
                },
                causes: Vec::new(),
            },
        })?;
        if !patched.is_object() {
            return Err(ApiError::BadRequest("the patch produced a value that is not an object".into()));
        }
        check_type_meta(c.def, &patched)?;
        let patched_rv = meta::rv(&patched).to_string();
        let pinned = patched_rv != kv.mod_rev.to_string();
        if pinned && !patched_rv.is_empty() {
            return Err(ApiError::conflict(
                c.def.group,
                c.def.resource,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if meta::name(&patched) != name {
            return Err(invalid(
                c.def,
                &patched,
                vec![FieldError::immutable("metadata.name", &json!(meta::name(&patched)))],
            ));
        }
        let (new, warnings) = typed_check(c.def, &patched, mode, &[])?;
        match finish_update(c, &old, kv.mod_rev, new, warnings, dry_run).await {
            Err(ApiError::Conflict { .. }) if !pinned => continue,
            other => return other,
        }
    }
    Err(ApiError::conflict(c.def.group, c.def.resource, &name, "too many concurrent writes, please retry"))
}

/// DeleteOptions from the body (JSON) and query.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub rv: Option<String>,
    pub dry_run: bool,
}

pub fn delete_options(params: &Params, body: &Bytes, content_type: &str) -> Result<DeleteOptions> {
    let mut o = DeleteOptions {
        grace_period: params.int("gracePeriodSeconds")?,
        dry_run: params.dry_run()?,
        ..Default::default()
    };
    if let Some(p) = params.get("propagationPolicy").filter(|p| !p.is_empty()) {
        o.propagation = Some(p.to_string());
    }
    if params.flag("orphanDependents").unwrap_or(false) {
        o.propagation.get_or_insert_with(|| "Orphan".into());
    }
    if !body.is_empty() {
        let v: Value = if content_type == crate::api::protobuf::MEDIA_TYPE {
            crate::api::protobuf::decode(body)
                .map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
        } else {
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
        };
        if !v.is_object() {
            return Err(ApiError::BadRequest("invalid DeleteOptions: not an object".into()));
        }
        if let Some(g) = v.get("gracePeriodSeconds").filter(|g| !g.is_null()) {
            o.grace_period =
                Some(g.as_i64().ok_or_else(|| ApiError::BadRequest("gracePeriodSeconds must be an integer".into()))?);
        }
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(p.to_string());
        }
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            if o.propagation.is_some() {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "DeleteOptions",
                    "",
                    vec![FieldError::invalid(
                        "propagationPolicy",
                        &json!(o.propagation),
                        "orphanDependents and deletionPropagation cannot be both set",
                    )],
                ));
            }
            o.propagation = Some("Orphan".into());
        }
        if let Some(pre) = v.get("preconditions") {
            o.uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            o.rv = pre.get("resourceVersion").and_then(Value::as_str).map(str::to_string);
        }
        if let Some(d) = v.get("dryRun").and_then(Value::as_array) {
            for x in d {
                match x.as_str() {
                    Some("All") => o.dry_run = true,
                    _ => {
                        return Err(ApiError::BadRequest(format!(
                            "Invalid dry run value: {x}: supported values: \"All\""
                        )))
                    }
                }
            }
        }
    }
    if let Some(g) = o.grace_period {
        if g < 0 {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![FieldError::invalid("gracePeriodSeconds", &json!(g), "must be greater than or equal to 0")],
            ));
        }
    }
    if let Some(p) = &o.propagation {
        if !["Orphan", "Background", "Foreground"].contains(&p.as_str()) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![FieldError::not_supported(
                    "propagationPolicy",
                    &json!(p),
                    &["Foreground", "Background", "Orphan", "nil"],
                )],
            ));
        }
    }
    Ok(o)
}

/// Delete one object (used by delete and deletecollection). Returns the response body.
pub async fn delete_one(c: &Call<'_>, name: &str, opts: &DeleteOptions) -> Result<Value> {
    let key = c.def.key(c.ns(), name);
    for _ in 0..8 {
        let kv = c.store().get(&key).await.map_err(|e| c.storage_err(name, e))?;
        let Some(kv) = kv else { return Err(c.not_found(name)) };
        let mut obj = meta::from_stored(&kv)?;
        if let Some(u) = &opts.uid {
            if u != meta::uid(&obj) {
                return Err(ApiError::conflict(
                    c.def.group,
                    c.def.resource,
                    name,
                    &format!("Precondition failed: UID in precondition: {u}, UID in object meta: {}", meta::uid(&obj)),
                ));
            }
        }
        if let Some(r) = &opts.rv {
            if *r != kv.mod_rev.to_string() {
                return Err(ApiError::conflict(
                    c.def.group,
                    c.def.resource,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {r}, ResourceVersion in object meta: {}",
                        kv.mod_rev
                    ),
                ));
            }
        }
        let mut finalizers = meta::finalizers(&obj);
        if !meta::is_deleting(&obj) {
            c.def.strategy.prepare_for_delete(&mut obj, &mut finalizers);
        }
        match opts.propagation.as_deref() {
            Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                finalizers.push("foregroundDeletion".into())
            }
            Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
            _ => {}
        }
        let graceful = !finalizers.is_empty() || is_namespace(c.def);
        if !graceful {
            if opts.dry_run {
                return Ok(deleted_status(c.def, &obj));
            }
            match c.store().delete(&key, kv.mod_rev).await {
                Ok(_) => {
                    crate::api::gc::after_delete(c.state, c.def, &obj);
                    return Ok(deleted_status(c.def, &obj));
                }
                Err(storage::Error::Conflict { .. }) => continue,
                Err(e) => return Err(c.storage_err(name, e)),
            }
        }
        if meta::is_deleting(&obj) && meta::finalizers(&obj) == finalizers {
            return Ok(obj);
        }
        {
            let m = meta::meta_mut(&mut obj);
            if m.get("deletionTimestamp").is_none_or(Value::is_null) {
                m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if c.def.strategy.tracks_generation() {
                    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            m.insert("finalizers".into(), json!(finalizers));
            m.remove("resourceVersion");
        }
        c.def.strategy.mark_deleting(&mut obj);
        if opts.dry_run {
            meta::set_rv(&mut obj, kv.mod_rev);
            return Ok(obj);
        }
        match c.store().update(&key, meta::to_stored(&obj)?, kv.mod_rev).await {
            Ok(rev) => {
                meta::set_rv(&mut obj, rev);
                crate::api::gc::after_mark_deleting(c.state, c.def, &obj);
                return Ok(obj);
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(c.storage_err(name, e)),
        }
    }
    Err(ApiError::conflict(c.def.group, c.def.resource, name, "too many concurrent writes, please retry"))
}

/// `Status{Success}` for an object that is gone.
fn deleted_status(def: &ResourceDef, obj: &Value) -> Value {
    let mut details = json!({"name": meta::name(obj), "kind": def.resource, "uid": meta::uid(obj)});
    if !def.group.is_empty() {
        details["group"] = json!(def.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

pub async fn delete(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    admit(c, Operation::Delete, None, None).await?;
    if !c.info.subresource.is_empty() {
        return Err(ApiError::MethodNotAllowed(format!(
            "delete is not supported on {}/{}",
            c.def.resource, c.info.subresource
        )));
    }
    let opts = delete_options(&c.params, body, content_type)?;
    let out = delete_one(c, &c.info.name.clone(), &opts).await?;
    let body = if out.get("kind").and_then(Value::as_str) == Some("Status") { out } else { c.object_body(out) };
    Ok(Reply::ok(body))
}

pub async fn delete_collection(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    let opts = delete_options(&c.params, body, content_type)?;
    let filter = Filter::from_params(c.def, &c.params)?;
    let mut params = c.params.clone();
    params.pairs.retain(|(k, _)| k != "limit" && k != "continue");
    let l = read_list(c.store(), c.def, c.ns(), &params, &filter, true).await?;
    let mut deleted = Vec::new();
    for obj in l.items {
        let ns = meta::namespace(&obj).to_string();
        let info = RequestInfo { namespace: ns, name: meta::name(&obj).to_string(), ..c.info.clone() };
        let call = Call {
            state: c.state,
            def: c.def,
            info: &info,
            user: c.user,
            params: c.params.clone(),
            out: Output::default(),
        };
        match delete_one(&call, &info.name, &opts).await {
            Ok(v) if v.get("kind").and_then(Value::as_str) == Some("Status") => deleted.push(obj),
            Ok(v) => deleted.push(v),
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let body = json!({
        "kind": c.def.list_kind(),
        "apiVersion": c.def.api_version(),
        "metadata": {"resourceVersion": c.store().current_rev().to_string()},
        "items": deleted,
    });
    Ok(Reply::ok(body))
}

/// The apiserver's own identity, for the writes it makes itself (default objects).
pub fn apiserver_user() -> UserInfo {
    UserInfo {
        name: "system:apiserver".into(),
        groups: vec![crate::authz::MASTERS_GROUP.into(), crate::authn::AUTHENTICATED_GROUP.into()],
        ..Default::default()
    }
}

/// A write the apiserver makes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Update,
    Delete,
}

impl Write {
    /// The request verb.
    pub fn verb(self) -> &'static str {
        match self {
            Write::Create => "create",
            Write::Update => "update",
            Write::Delete => "delete",
        }
    }
}

/// One write through the REST handlers as the apiserver itself: the same defaults,
/// validation and admission as a client's write.
pub async fn write_as_apiserver(
    state: &Arc<AppState>,
    def: &ResourceDef,
    write: Write,
    namespace: &str,
    name: &str,
    subresource: &str,
    body: &Value,
) -> Result<()> {
    let user = apiserver_user();
    let info = RequestInfo {
        is_resource_request: true,
        verb: write.verb().into(),
        api_prefix: if def.group.is_empty() { "api".into() } else { "apis".into() },
        api_group: def.group.into(),
        api_version: def.version.into(),
        resource: def.resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: if write == Write::Create { String::new() } else { name.into() },
        ..Default::default()
    };
    let call = Call { state, def, info: &info, user: &user, params: Params::default(), out: Default::default() };
    let bytes = Bytes::from(body.to_string());
    match write {
        Write::Create => create(&call, &bytes, "application/json").await.map(|_| ()),
        Write::Update => update(&call, &bytes, "application/json").await.map(|_| ()),
        Write::Delete => delete(&call, &bytes, "application/json").await.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = encode_continue(42, "default/b");
        assert_eq!(decode_continue(&t).ok(), Some((42, "default/b".to_string())));
        for bad in ["", "not-base64!", "eyJ2IjoxfQ", &encode_continue(0, "x")] {
            assert!(decode_continue(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn list_resource_version_rules_follow_the_seed_table() {
        let p = |q: &str| Params::parse(Some(q));
        struct Case {
            name: &'static str,
            q: &'static str,
            limit: bool,
            cont: bool,
            want: std::result::Result<Option<Rev>, u16>,
        }
        let cases = [
            Case { name: "unset is most recent", q: "", limit: false, cont: false, want: Ok(None) },
            Case { name: "zero is any", q: "resourceVersion=0", limit: true, cont: false, want: Ok(None) },
            Case {
                name: "rv without limit is not-older-than",
                q: "resourceVersion=5",
                limit: false,
                cont: false,
                want: Ok(None),
            },
            Case {
                name: "rv with limit is exact",
                q: "resourceVersion=5",
                limit: true,
                cont: false,
                want: Ok(Some(5)),
            },
            Case {
                name: "exact",
                q: "resourceVersion=7&resourceVersionMatch=Exact",
                limit: false,
                cont: false,
                want: Ok(Some(7)),
            },
            Case {
                name: "match without rv is invalid",
                q: "resourceVersionMatch=NotOlderThan",
                limit: false,
                cont: false,
                want: Err(422),
            },
            Case {
                name: "exact zero is invalid",
                q: "resourceVersion=0&resourceVersionMatch=Exact",
                limit: false,
                cont: false,
                want: Err(422),
            },
            Case {
                name: "continue with rv is a bad request",
                q: "resourceVersion=123",
                limit: true,
                cont: true,
                want: Err(400),
            },
            Case {
                name: "continue with rv zero is fine",
                q: "resourceVersion=0",
                limit: true,
                cont: true,
                want: Ok(None),
            },
            Case { name: "garbage rv", q: "resourceVersion=abc", limit: false, cont: false, want: Err(400) },
        ];
        for c in cases {
            let got = list_read_rev(&p(c.q), c.limit, c.cont).map_err(|e| e.code().as_u16());
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn unknown_fields_are_paths_missing_after_the_roundtrip() {
        let input = json!({"metadata": {"name": "a", "bogus": 1, "labels": null}, "data": {"k": "v"}, "spec": {"x": 1}, "items": [{"a": 1, "b": 2}]});
        let pruned = json!({"metadata": {"name": "a"}, "data": {"k": "v"}, "items": [{"a": 1}]});
        let mut out = StrictErrors::default();
        unknown_fields(&input, &pruned, &mut FieldPath::default(), &mut out);
        assert_eq!(
            out.into_vec(),
            vec!["unknown field \"items[0].b\"", "unknown field \"metadata.bogus\"", "unknown field \"spec\""]
        );
    }

    #[test]
    fn unknown_fields_are_bounded() {
        let long = "k".repeat(300_000);
        let children: Map<String, Value> = (0..10_000).map(|i| (format!("c{i}"), json!(1))).collect();
        let input = json!({ "spec": { long.clone(): children } });
        let pruned = json!({ "spec": { long: {} } });
        let mut out = StrictErrors::default();
        unknown_fields(&input, &pruned, &mut FieldPath::default(), &mut out);
        let got = out.into_vec();
        assert_eq!(got.len(), crate::api::dupcheck::MAX_STRICT_ERRORS);
        for p in &got {
            assert!(p.len() <= crate::api::dupcheck::MAX_FIELD_PATH_BYTES + 20, "{} bytes", p.len());
            assert!(p.contains("..."), "{p}");
        }
    }

    fn header_texts(warnings: &[String]) -> Vec<String> {
        warning_headers(warnings).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect()
    }

    #[test]
    fn warning_headers_are_quoted_and_deduplicated() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: Vec<(&str, Vec<String>, Vec<String>)> = vec![
            ("none", vec![], vec![]),
            ("one", s(&["x"]), s(&[r#"299 - "x""#])),
            ("quotes and backslashes", s(&[r#"a "b" \c"#]), s(&[r#"299 - "a \"b\" \\c""#])),
            ("duplicates once", s(&["x", "y", "x"]), s(&[r#"299 - "x""#, r#"299 - "y""#])),
            ("empty dropped", s(&["", "x"]), s(&[r#"299 - "x""#])),
            ("control characters dropped", s(&["a\nb", "x"]), s(&[r#"299 - "x""#])),
            ("non-ASCII kept", s(&["é"]), s(&["299 - \"é\""])),
        ];
        for (name, input, want) in cases {
            assert_eq!(header_texts(&input), want, "{name}");
        }
    }

    #[test]
    fn warning_headers_are_bounded() {
        let item = |c: char, n: usize| c.to_string().repeat(n);
        // Under the budget: as they are.
        let fits: Vec<String> = (0..4).map(|i| item(char::from(b'a' + i), 1000)).collect();
        let got = header_texts(&fits);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|h| h.len() == 1000 + 8));
        // Over it: every item cut to 256 characters, and no more once 4096 are written.
        let many: Vec<String> = (0..10_000).map(|i| format!("{i:05}{}", item('w', 1000))).collect();
        let got = header_texts(&many);
        let chars: usize = got.iter().map(|h| h.chars().count() - 8).sum();
        assert!(got.iter().all(|h| h.chars().count() - 8 <= WARNING_ITEM_CHARS), "items cut");
        assert_eq!(got.len(), WARNING_TOTAL_CHARS / WARNING_ITEM_CHARS, "items kept");
        assert!(chars <= WARNING_TOTAL_CHARS + WARNING_ITEM_CHARS, "{chars} characters");
        assert!(got[0].starts_with("299 - \"00000w"), "order kept: {}", got[0]);
        // Cuts count characters, not bytes.
        let wide: Vec<String> = (0..20).map(|i| format!("{i:02}{}", item('é', 500))).collect();
        for h in header_texts(&wide) {
            assert_eq!(h.chars().count() - 8, WARNING_ITEM_CHARS, "{h}");
        }
    }

    #[test]
    fn yaml_bodies_cannot_expand() {
        let def = crate::registry::Registry::builtin();
        let Some(def) = def.find("", "v1", "configmaps") else { panic!("configmaps registered") };
        let mut laughs = String::from("apiVersion: v1\nkind: ConfigMap\na0: &a0 [\"lol\"]\n");
        for i in 1..12 {
            let prev = format!("*a{}", i - 1);
            laughs.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(",")));
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        for (name, body) in [("billion laughs", laughs), ("deep nesting", deep)] {
            let got = decode_body(def, &Bytes::from(body), "application/yaml");
            assert_eq!(got.err().map(|e| e.code().as_u16()), Some(400), "{name}");
        }
    }

    #[test]
    fn delete_options_are_validated() {
        let q = Params::parse(Some("gracePeriodSeconds=-1"));
        assert_eq!(delete_options(&q, &Bytes::new(), "").err().map(|e| e.code().as_u16()), Some(422));
        let q = Params::parse(None);
        let body = Bytes::from_static(br#"{"propagationPolicy":"Sideways"}"#);
        assert_eq!(delete_options(&q, &body, "application/json").err().map(|e| e.code().as_u16()), Some(422));
        let body = Bytes::from_static(
            br#"{"preconditions":{"uid":"u1","resourceVersion":"3"},"propagationPolicy":"Background"}"#,
        );
        let o = delete_options(&q, &body, "application/json").ok();
        assert_eq!(o.as_ref().and_then(|o| o.uid.clone()).as_deref(), Some("u1"));
        assert_eq!(o.as_ref().and_then(|o| o.rv.clone()).as_deref(), Some("3"));
        let body = Bytes::from_static(b"[1,2]");
        assert_eq!(delete_options(&q, &body, "application/json").err().map(|e| e.code().as_u16()), Some(400));
    }
}
