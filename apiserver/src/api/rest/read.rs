//! get and list: resourceVersion semantics, continue tokens, label and field selectors
//! ([`Filter`]), and the list written straight from the stored bytes.

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

use super::*;
use crate::api::table;
use crate::error::{ApiError, FieldError, Result};
use crate::machinery::selectors::{FieldSelector, LabelSelector};
use crate::meta;
use crate::registry::ResourceDef;
use crate::storage::{self, ListOptions, Rev, Storage};

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
    // As upstream: a list form cannot be made of one object (nor the other way, in `list`).
    if c.out.metadata_list {
        return Err(ApiError::NotAcceptable(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            c.def.kind
        )));
    }
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
                    let supported = f == "metadata.name"
                        || f == "metadata.namespace"
                        || def.strategy.field_selectors().and_then(|s| s.field(&probe, &f)).is_some();
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
                    other => def.strategy.field_selectors().and_then(|s| s.field(obj, other)),
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

/// Objects read from the store at a time by a list with a selector.
const FILTERED_PAGE: usize = 64;

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
        // A filtered list reads the store a page at a time, whatever `limit` says: only the
        // matches are kept, so a selector that matches few objects among many large ones
        // holds one page of them, not all.
        let page_limit = match need {
            Some(n) if filter.is_empty() => Some(n),
            Some(n) => Some(n.max(FILTERED_PAGE)),
            None if !filter.is_empty() => Some(FILTERED_PAGE),
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
        // The page's objects move into the answer (a list holds each stored object once).
        let (count, last_key) = (page.items.len(), page.items.last().map(|kv| kv.key.clone()));
        let mut filled_at = None;
        for (i, kv) in page.items.into_iter().enumerate() {
            let obj = if decode || !filter.is_empty() { Some(meta::from_stored(&kv)?) } else { None };
            if obj.as_ref().is_none_or(|o| filter.matches(def, o)) {
                let key = kv.key.clone();
                raw.push(kv);
                if decode {
                    items.extend(obj);
                }
                if limit == Some(raw.len()) {
                    filled_at = Some((i, key));
                    break;
                }
            }
        }
        if let Some((i, key)) = filled_at {
            let left = (count - i - 1) as u64 + page.remaining;
            if left > 0 {
                more = Some((key, left));
            }
            break;
        }
        match last_key {
            Some(last) if (limit.is_some() || !filter.is_empty()) && page.remaining > 0 => cursor = Some(last),
            _ => break,
        }
    }
    let rev = read_rev.unwrap_or_else(|| store.current_rev());
    let continue_token = more.as_ref().map(|(k, _)| encode_continue(rev, k.strip_prefix(&prefix).unwrap_or(k)));
    let remaining = more.as_ref().filter(|_| filter.is_empty()).map(|(_, n)| *n);
    Ok(Listed { items, raw, rev, continue_token, remaining })
}

/// Serve a list. Plain JSON (the common case, and the big one) is written straight from the
/// stored bytes with each resourceVersion spliced in; Table, metadata-only, YAML, protobuf and
/// pretty output go through `render`.
pub async fn list(c: &Call<'_>, headers: &HeaderMap, pretty: bool) -> Result<Response> {
    if c.out.metadata_only && !c.out.metadata_list {
        return Err(ApiError::NotAcceptable(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            c.def.list_kind()
        )));
    }
    let filter = Filter::from_params(c.def, &c.params)?;
    let plain = !c.out.table && !c.out.metadata_only && !c.out.yaml && !c.out.protobuf && !pretty;
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
        // Each stored object is freed once written: the list is held about once, not twice.
        for (i, kv) in l.raw.into_iter().enumerate() {
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
        let version = c.out.meta_api_version();
        let item = |o: &Value| {
            let mut p = table::partial_object_metadata(o);
            p["apiVersion"] = json!(version);
            p
        };
        json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": version,
            "metadata": list_meta,
            "items": l.items.iter().map(item).collect::<Vec<_>>(),
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
}
