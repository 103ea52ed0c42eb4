//! Object helpers: stored form ↔ wire form, metadata accessors, timestamps.
//!
//! The store keeps an object's JSON without `metadata.resourceVersion`; the key's `mod_rev`
//! is the resourceVersion and is put back on every read.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::storage::{KeyValue, Rev};

/// Decode a stored value and set its resourceVersion.
pub fn from_stored(kv: &KeyValue) -> Result<Value, ApiError> {
    decode_at(&kv.value, kv.mod_rev)
}

/// Decode stored bytes and set `metadata.resourceVersion` to `rev`.
pub fn decode_at(bytes: &[u8], rev: Rev) -> Result<Value, ApiError> {
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::internal(format!("corrupt stored object: {e}")))?;
    set_rv(&mut v, rev);
    Ok(v)
}

/// Write a stored object to `out` with `metadata.resourceVersion` set, without decoding
/// the rest of it: top-level fields are copied as raw JSON, only `metadata` is rebuilt.
/// The output equals `serde_json::to_vec(&decode_at(bytes, rev))`.
pub fn write_with_rv(out: &mut Vec<u8>, bytes: &[u8], rev: Rev) -> Result<(), ApiError> {
    use serde_json::value::RawValue;
    let corrupt = |e: serde_json::Error| ApiError::internal(format!("corrupt stored object: {e}"));
    let top: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(bytes).map_err(corrupt)?;
    let mut metadata: Map<String, Value> = match top.get("metadata") {
        Some(m) => serde_json::from_str(m.get()).map_err(corrupt)?,
        None => Map::new(),
    };
    metadata.insert("resourceVersion".into(), Value::String(rev.to_string()));
    let mut with_meta = top;
    let meta_raw = serde_json::value::to_raw_value(&metadata).map_err(corrupt)?;
    with_meta.insert("metadata".into(), &meta_raw);
    serde_json::to_writer(out, &with_meta).map_err(corrupt)
}

/// Encode for the store (resourceVersion left out).
pub fn to_stored(obj: &Value) -> Result<Vec<u8>, ApiError> {
    let mut obj = obj.clone();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(&obj).map_err(ApiError::internal)
}

pub fn set_rv(obj: &mut Value, rev: Rev) {
    meta_mut(obj).insert("resourceVersion".into(), Value::String(rev.to_string()));
}

/// `metadata` as a mutable map, created if missing or not an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(map) = obj else { unreachable_map() };
    let entry = map.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable_map(),
    }
}

#[allow(clippy::panic)]
fn unreachable_map() -> ! {
    // Both callers replace non-objects with objects right before matching.
    unreachable!("value was just made an object")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub fn rv(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or("")
}

pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata").and_then(|m| m.get("deletionTimestamp")).is_some_and(|v| !v.is_null())
}

/// RFC 3339 UTC with second precision, as metav1.Time renders.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn write_with_rv_matches_a_full_decode_and_encode() {
        let cases = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "v \" \\ \u{e9}"}}),
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "n"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque"}),
        ];
        for obj in cases {
            let stored = to_stored(&obj).unwrap();
            let mut fast = Vec::new();
            write_with_rv(&mut fast, &stored, 42).unwrap();
            let slow = serde_json::to_vec(&decode_at(&stored, 42).unwrap()).unwrap();
            assert_eq!(String::from_utf8_lossy(&fast), String::from_utf8_lossy(&slow), "{obj}");
        }
        assert!(write_with_rv(&mut Vec::new(), b"not json", 1).is_err());
    }
}
