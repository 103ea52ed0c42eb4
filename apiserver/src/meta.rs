//! Object helpers: stored form ↔ wire form, metadata accessors, timestamps.
//!
//! The store keeps an object's JSON without `metadata.resourceVersion`; the key's `mod_rev`
//! is the resourceVersion and is put back on every read.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::storage::{KeyValue, Rev};
use crate::work::{self, Format, Site};

/// Decode a stored value and set its resourceVersion.
pub fn from_stored(kv: &KeyValue) -> Result<Value, ApiError> {
    decode_at(&kv.value, kv.mod_rev)
}

/// Decode stored bytes and set `metadata.resourceVersion` to `rev`.
pub fn decode_at(bytes: &[u8], rev: Rev) -> Result<Value, ApiError> {
    decode_counted(bytes, rev, Site::Storage)
}

/// [`decode_at`] for a watcher: a storage event's value (counted at the `watch` site).
pub fn decode_event(bytes: &[u8], rev: Rev) -> Result<Value, ApiError> {
    decode_counted(bytes, rev, Site::Watch)
}

fn decode_counted(bytes: &[u8], rev: Rev, site: Site) -> Result<Value, ApiError> {
    work::decoded(Format::Json, site);
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::internal(format!("corrupt stored object: {e}")))?;
    set_rv(&mut v, rev);
    Ok(v)
}

/// Write a stored object to `out` with `metadata.resourceVersion` set, without decoding
/// the rest of it: top-level fields are copied as raw JSON, only `metadata` is rebuilt.
/// The output equals `serde_json::to_vec(&decode_at(bytes, rev))`. Counted as one decode
/// (`storage`) and one encode (`response`): it writes a list response's item.
pub fn write_with_rv(out: &mut Vec<u8>, bytes: &[u8], rev: Rev) -> Result<(), ApiError> {
    work::decoded(Format::Json, Site::Storage);
    work::encoded(Format::Json, Site::Response);
    splice_rv(out, bytes, rev)
}

/// [`write_with_rv`] for a watch event's object: counted as one decode and one encode at
/// the `watch` site.
pub fn write_event_with_rv(out: &mut Vec<u8>, bytes: &[u8], rev: Rev) -> Result<(), ApiError> {
    work::decoded(Format::Json, Site::Watch);
    work::encoded(Format::Json, Site::Watch);
    splice_rv(out, bytes, rev)
}

fn splice_rv(out: &mut Vec<u8>, bytes: &[u8], rev: Rev) -> Result<(), ApiError> {
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
///
/// Every write goes through here, and here the limits of a stored object hold: at most
/// [`MAX_OBJECT_BYTES`] (413 RequestEntityTooLarge) and at most [`MAX_OBJECT_DEPTH`] levels
/// of nesting (400, as a body that deep is refused).
pub fn to_stored(obj: &Value) -> Result<Vec<u8>, ApiError> {
    to_stored_within(obj, MAX_OBJECT_BYTES)
}

/// [`to_stored`] for a new object: at most [`MAX_CREATE_OBJECT_BYTES`], leaving room for
/// the status the server adds later (a CSR's approval and certificate) within
/// [`MAX_OBJECT_BYTES`].
pub fn to_stored_new(obj: &Value) -> Result<Vec<u8>, ApiError> {
    to_stored_within(obj, MAX_CREATE_OBJECT_BYTES)
}

/// [`to_stored`] for a client's update or patch: at most [`MAX_UPDATE_OBJECT_BYTES`], so
/// that marking the object deleting (a deletion timestamp, finalizers) always fits.
pub fn to_stored_update(obj: &Value) -> Result<Vec<u8>, ApiError> {
    to_stored_within(obj, MAX_UPDATE_OBJECT_BYTES)
}

fn to_stored_within(obj: &Value, limit: usize) -> Result<Vec<u8>, ApiError> {
    let depth = nesting_depth(obj);
    if depth > MAX_OBJECT_DEPTH {
        return Err(ApiError::BadRequest(format!(
            "the object nests {depth} levels deep, more than the {MAX_OBJECT_DEPTH} a request body may"
        )));
    }
    work::encoded(Format::Json, Site::Storage);
    let bytes = serde_json::to_vec(&WithoutResourceVersion(obj)).map_err(ApiError::internal)?;
    check_object_size(bytes.len(), limit)?;
    Ok(bytes)
}

/// An object that serializes without `metadata.resourceVersion`, the rest as it is: the
/// stored form, written without a copy of the object.
struct WithoutResourceVersion<'a>(&'a Value);

impl serde::Serialize for WithoutResourceVersion<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let Value::Object(top) = self.0 else { return self.0.serialize(serializer) };
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in top {
            match v {
                Value::Object(meta) if k == "metadata" => {
                    let kept: std::collections::BTreeMap<&String, &Value> =
                        meta.iter().filter(|(mk, _)| *mk != "resourceVersion").collect();
                    map.serialize_entry(k, &kept)?;
                }
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

/// etcd's default `--max-request-bytes` (1.5 MiB): the largest write etcd accepts, and the
/// reference for the size of a stored object on every backend.
pub const ETCD_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// The largest stored object (its JSON): etcd's request limit less room for the key and
/// the transaction around the value, so that a write kustos accepts is one etcd accepts.
pub const MAX_OBJECT_BYTES: usize = ETCD_MAX_REQUEST_BYTES - 4 * 1024;

/// The largest object a create may store: [`MAX_OBJECT_BYTES`] less 64 KiB for what the
/// server writes into it afterwards (conditions, an issued certificate), so that an object
/// accepted at create never has a status write refused for its size.
pub const MAX_CREATE_OBJECT_BYTES: usize = MAX_OBJECT_BYTES - 64 * 1024;

/// The largest object a client's update may store: [`MAX_OBJECT_BYTES`] less 4 KiB kept for
/// what a graceful delete adds (`deletionTimestamp`, `deletionGracePeriodSeconds`, the
/// `orphan` or `foregroundDeletion` finalizer), so that no object is too big to delete.
pub const MAX_UPDATE_OBJECT_BYTES: usize = MAX_OBJECT_BYTES - 4 * 1024;

const _: () = assert!(
    MAX_CREATE_OBJECT_BYTES < MAX_UPDATE_OBJECT_BYTES
        && MAX_UPDATE_OBJECT_BYTES < MAX_OBJECT_BYTES
        && MAX_OBJECT_BYTES < ETCD_MAX_REQUEST_BYTES
);

/// The deepest nesting of arrays and objects a stored object may have: what a JSON request
/// body may have (serde_json's recursion limit of 128 reads 127 levels), so that every
/// stored object reads back.
pub const MAX_OBJECT_DEPTH: usize = 127;

/// 413 RequestEntityTooLarge when `len` bytes exceed `limit`.
pub fn check_object_size(len: usize, limit: usize) -> Result<(), ApiError> {
    if len > limit {
        return Err(ApiError::RequestEntityTooLarge(format!(
            "Request entity too large: the object would be {len} bytes when stored, limit is {limit}"
        )));
    }
    Ok(())
}

/// Levels of nesting of arrays and objects in `v` (a scalar is 0, `{}` and `[]` are 1),
/// counted without recursion so that any depth is safe to measure.
pub fn nesting_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d + 1);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            Value::Object(m) => {
                max = max.max(d + 1);
                stack.extend(m.values().map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    max
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

    #[test]
    fn the_stored_form_is_the_object_without_its_resource_version() {
        let cases = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "7", "uid": "u"}, "data": {"k": "v"}}),
            json!({"kind": "Namespace", "metadata": {"resourceVersion": "1"}}),
            json!({"kind": "Secret", "metadata": "not an object"}),
            json!({"kind": "Secret"}),
        ];
        for obj in cases {
            let mut want = obj.clone();
            if let Some(m) = want.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            assert_eq!(to_stored(&obj).unwrap(), serde_json::to_vec(&want).unwrap(), "{obj}");
        }
    }

    fn nested(levels: usize) -> Value {
        let mut v = json!("leaf");
        for i in 0..levels {
            v = if i % 2 == 0 { json!({"a": v}) } else { json!([v]) };
        }
        v
    }

    #[test]
    fn nesting_depth_counts_containers() {
        let cases = [
            ("scalar", json!(1), 0),
            ("empty object", json!({}), 1),
            ("empty array", json!([]), 1),
            ("flat", json!({"a": 1, "b": "x"}), 1),
            ("deepest branch wins", json!({"a": [1], "b": {"c": {"d": []}}}), 4),
            ("127", nested(127), 127),
            ("500", nested(500), 500),
        ];
        for (name, v, want) in cases {
            assert_eq!(nesting_depth(&v), want, "{name}");
        }
        // The deepest an object may be is exactly what a JSON body may be.
        let at_limit = serde_json::to_string(&nested(MAX_OBJECT_DEPTH)).unwrap();
        assert!(serde_json::from_str::<Value>(&at_limit).is_ok());
        let over = serde_json::to_string(&nested(MAX_OBJECT_DEPTH + 1)).unwrap();
        assert!(serde_json::from_str::<Value>(&over).is_err());
    }

    #[test]
    fn stored_objects_are_bounded() {
        let big = |n: usize| json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "x".repeat(n)}});
        // The JSON around the value is this many bytes.
        let frame = serde_json::to_vec(&big(0)).unwrap().len();
        type Encode = fn(&Value) -> Result<Vec<u8>, ApiError>;
        let (server, update, create): (Encode, Encode, Encode) = (to_stored, to_stored_update, to_stored_new);
        let cases: Vec<(&str, Value, Encode, Option<u16>)> = vec![
            ("small", big(10), server, None),
            ("at the limit", big(MAX_OBJECT_BYTES - frame), server, None),
            ("one byte over the limit", big(MAX_OBJECT_BYTES - frame + 1), server, Some(413)),
            ("at the update limit", big(MAX_UPDATE_OBJECT_BYTES - frame), update, None),
            ("one byte over the update limit", big(MAX_UPDATE_OBJECT_BYTES - frame + 1), update, Some(413)),
            ("at the create limit", big(MAX_CREATE_OBJECT_BYTES - frame), create, None),
            ("one byte over the create limit", big(MAX_CREATE_OBJECT_BYTES - frame + 1), create, Some(413)),
            ("127 levels", json!({"metadata": {"name": "a"}, "x": nested(MAX_OBJECT_DEPTH - 1)}), server, None),
            ("128 levels", json!({"metadata": {"name": "a"}, "x": nested(MAX_OBJECT_DEPTH)}), server, Some(400)),
        ];
        for (name, obj, encode, want) in cases {
            let got = encode(&obj);
            match (got, want) {
                (Ok(bytes), None) => assert!(bytes.len() <= MAX_OBJECT_BYTES, "{name}"),
                (Err(e), Some(code)) => assert_eq!(e.code().as_u16(), code, "{name}: {e}"),
                (got, want) => panic!("{name}: got {:?}, want {want:?}", got.map(|b| b.len())),
            }
        }
    }
}
