//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) both ways: request bodies →
//! the object's JSON form, and the JSON form → protobuf responses ([`encode`]).
//!
//! client-go's typed clients (since 1.35 by default; kubectl's `create configmap|namespace|
//! secret|…`, `certificate approve`) send protobuf bodies, DeleteOptions included, and ask
//! for protobuf answers. A body is the magic `k8s\0`, then a `runtime.Unknown` envelope whose
//! `typeMeta` names the kind and whose `raw` field holds the object's message. Both ways are
//! driven by the field tables in `schema.rs` (generated from upstream's generated.proto by
//! `scripts/gen-protobuf-schema.py`): every kind kustos serves and its list, events.k8s.io/v1
//! Event, the meta.k8s.io messages every group shares (DeleteOptions, Status, WatchEvent,
//! PartialObjectMetadata[List]) and what they refer to. Decoding yields the JSON the client
//! would have sent: plain scalar fields at their zero value are left out (Go's `omitempty`),
//! pointer fields keep theirs (`automountServiceAccountToken: false`), `bytes` become base64,
//! and the well-known messages have their JSON forms (Time, MicroTime, Duration,
//! IntOrString, Quantity, FieldsV1, RawExtension, ExtraValue, apiextensions' JSON and
//! JSONSchemaPropsOr{Array,Bool,StringArray}).
//!
//! Kinds without a message (custom resources, `Table`) have no protobuf form: content
//! negotiation (`wire/negotiate.rs`) passes protobuf over for them, as upstream does.

mod duration;
pub mod encode;
mod schema;

use base64::Engine;
use serde_json::{Map, Value};

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// Content type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const MAGIC: &[u8] = b"k8s\x00";
const MAX_DEPTH: usize = 64;
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

/// How often a field occurs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    One,
    Repeated,
    /// `map<string, T>`: entries with key = 1, value = 2.
    Map,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    Str,
    Bytes,
    Bool,
    Int,
    Double,
    Msg(&'static str),
}

#[derive(Debug)]
pub(crate) struct Field {
    pub number: u64,
    pub json: &'static str,
    pub ty: Type,
    pub card: Card,
    /// A pointer in Go: a zero value on the wire is a value, not an absent field.
    pub opt: bool,
}

#[derive(Debug)]
pub(crate) struct Message {
    pub name: &'static str,
    pub fields: &'static [Field],
}

/// The message description named `name`, from an index built once (a body of a million
/// small messages looks one up per message).
fn message(name: &str) -> Option<&'static Message> {
    static INDEX: std::sync::OnceLock<std::collections::HashMap<&'static str, &'static Message>> =
        std::sync::OnceLock::new();
    INDEX.get_or_init(|| schema::MESSAGES.iter().map(|m| (m.name, m)).collect()).get(name).copied()
}

/// The protobuf package of each API group kustos has messages for.
const PACKAGES: &[(&str, &str)] = &[
    ("", "k8s.io.api.core"),
    ("meta.k8s.io", "k8s.io.apimachinery.pkg.apis.meta"),
    ("coordination.k8s.io", "k8s.io.api.coordination"),
    ("certificates.k8s.io", "k8s.io.api.certificates"),
    ("rbac.authorization.k8s.io", "k8s.io.api.rbac"),
    ("authentication.k8s.io", "k8s.io.api.authentication"),
    ("authorization.k8s.io", "k8s.io.api.authorization"),
    ("flowcontrol.apiserver.k8s.io", "k8s.io.api.flowcontrol"),
    ("events.k8s.io", "k8s.io.api.events"),
    ("storage.k8s.io", "k8s.io.api.storage"),
    ("node.k8s.io", "k8s.io.api.node"),
    ("apiextensions.k8s.io", "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions"),
];

/// The meta.k8s.io kinds every group version carries (upstream's `AddToGroupVersion`): a
/// core-group DeleteOptions (`v1`/`DeleteOptions`) is meta/v1's message.
const SHARED_KINDS: &[&str] = &["DeleteOptions", "Status", "WatchEvent", "List"];

/// The protobuf message of a kind (`v1`/`ConfigMap` → `k8s.io.api.core.v1.ConfigMap`,
/// `rbac.authorization.k8s.io/v1`/`DeleteOptions` → meta/v1's), or `None` when the kind
/// has no protobuf form.
pub fn message_for(api_version: &str, kind: &str) -> Option<&'static str> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let own = PACKAGES.iter().find(|(g, _)| *g == group).map(|(_, p)| format!("{p}.{version}.{kind}"));
    let shared = SHARED_KINDS.contains(&kind).then(|| format!("k8s.io.apimachinery.pkg.apis.meta.v1.{kind}"));
    // meta.k8s.io/v1beta1's PartialObjectMetadata is v1's type.
    let meta_v1 = (group == "meta.k8s.io" && kind == "PartialObjectMetadata")
        .then(|| format!("k8s.io.apimachinery.pkg.apis.meta.v1.{kind}"));
    [own, shared, meta_v1].into_iter().flatten().find_map(|c| message(&c).map(|m| m.name))
}

/// One wire value.
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// Why a protobuf body could not be decoded. The texts end up in a 400's message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("the body does not start with the Kubernetes protobuf magic")]
    NoMagic,
    #[error("content encodings are not supported")]
    ContentEncoding,
    /// A kind (of the envelope's `typeMeta`) there is no message description for.
    #[error("no protobuf decoding for {kind} in {api_version:?}")]
    UnknownKind { kind: String, api_version: String },
    #[error("unknown protobuf message {0}")]
    UnknownMessage(String),
    #[error("message nesting too deep")]
    TooDeep,
    /// The bytes are not a protobuf encoding (truncated, a varint too long, field 0, ...).
    #[error("{0}")]
    Wire(&'static str),
    #[error("unsupported wire type {0}")]
    WireType(u64),
    #[error("wire type does not match field type {0}")]
    TypeMismatch(String),
    /// A map field whose entries are not (string key, value) messages.
    #[error("{field}: {problem}")]
    MapEntry { field: &'static str, problem: &'static str },
    #[error("timestamp out of range")]
    TimestampOutOfRange,
    #[error("{0}")]
    Utf8(#[from] std::string::FromUtf8Error),
    #[error("{0}")]
    Base64(#[from] base64::DecodeError),
    /// A message carrying JSON (`FieldsV1`, `RawExtension`) whose JSON does not parse.
    #[error("{message}: {source}")]
    EmbeddedJson { message: String, source: serde_json::Error },
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else { return Err(DecodeError::Wire("truncated varint")) };
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Wire("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Wire("truncated field"));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    /// Next (field number, value), or None at the end.
    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return Err(DecodeError::Wire("field number 0"));
        }
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(
                self.take(8)?.try_into().map_err(|_| DecodeError::Wire("bad fixed64"))?,
            )),
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| DecodeError::Wire("length too large"))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().map_err(|_| DecodeError::Wire("bad fixed32"))?,
            )),
            t => return Err(DecodeError::WireType(t)),
        };
        Ok(Some((number, wire)))
    }
}

/// Decode a `k8s\0`-prefixed body into the object's JSON form (with apiVersion/kind).
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let (api_version, kind, inner) = unwrap_envelope(body)?;
    let name = message_for(&api_version, &kind)
        .ok_or_else(|| DecodeError::UnknownKind { kind: kind.clone(), api_version: api_version.clone() })?;
    let mut obj = decode_message(&inner, name, 0)?;
    if let Value::Object(m) = &mut obj {
        m.insert("apiVersion".into(), Value::String(api_version));
        m.insert("kind".into(), Value::String(kind));
    }
    Ok(obj)
}

/// One event of a protobuf watch stream (a frame without its 4-byte length: the bare
/// `metav1.WatchEvent` message, as upstream's raw serializer writes it): the event's type and
/// its object's JSON form (the object keeps its own `k8s\0` envelope).
pub fn decode_watch_event(body: &[u8]) -> Result<(String, Value), DecodeError> {
    let (mut event_type, mut raw) = (String::new(), Vec::new());
    let mut r = Reader { buf: body };
    while let Some((n, w)) = r.next()? {
        match (n, w) {
            (1, Wire::Bytes(b)) => event_type = String::from_utf8(b.to_vec())?,
            (2, Wire::Bytes(b)) => {
                let mut er = Reader { buf: b };
                while let Some((en, ew)) = er.next()? {
                    if let (1, Wire::Bytes(rb)) = (en, ew) {
                        raw = rb.to_vec();
                    }
                }
            }
            _ => {}
        }
    }
    Ok((event_type, decode(&raw)?))
}

/// The `typeMeta` and `raw` of a body's `runtime.Unknown` envelope.
fn unwrap_envelope(body: &[u8]) -> Result<(String, String, Vec<u8>), DecodeError> {
    let raw = body.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    let envelope = decode_message(raw, UNKNOWN, 0)?;
    let type_meta = envelope.get("typeMeta").cloned().unwrap_or(Value::Null);
    let api_version = type_meta.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let kind = type_meta.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if envelope.get("contentEncoding").and_then(Value::as_str).is_some_and(|e| !e.is_empty()) {
        return Err(DecodeError::ContentEncoding);
    }
    // `raw` came back base64 (it is a bytes field); decode it again.
    let inner = match envelope.get("raw").and_then(Value::as_str) {
        Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64)?,
        None => Vec::new(),
    };
    Ok((api_version, kind, inner))
}

fn decode_message(buf: &[u8], name: &str, depth: usize) -> Result<Value, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    if let Some(v) = special(buf, name, depth)? {
        return Ok(v);
    }
    let msg = message(name).ok_or_else(|| DecodeError::UnknownMessage(name.to_string()))?;
    let mut out = Map::new();
    let mut r = Reader { buf };
    while let Some((number, wire)) = r.next()? {
        let Some(field) = msg.fields.iter().find(|f| f.number == number) else { continue };
        match field.card {
            Card::One => {
                let v = scalar_or_message(wire, field.ty, depth)?;
                if !v.is_null() && (field.opt || !is_zero(&v)) {
                    out.insert(field.json.to_string(), v);
                } else {
                    out.remove(field.json);
                }
            }
            Card::Repeated => {
                let list = out.entry(field.json).or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(items) = list else { continue };
                match (wire, field.ty) {
                    // Packed repeated numbers.
                    (Wire::Bytes(b), Type::Int | Type::Bool) => {
                        let mut pr = Reader { buf: b };
                        while !pr.buf.is_empty() {
                            items.push(scalar_or_message(Wire::Varint(pr.varint()?), field.ty, depth)?);
                        }
                    }
                    (w, ty) => items.push(scalar_or_message(w, ty, depth)?),
                }
            }
            Card::Map => {
                let Wire::Bytes(entry) = wire else {
                    return Err(DecodeError::MapEntry { field: field.json, problem: "map entry is not a message" });
                };
                let mut er = Reader { buf: entry };
                let (mut key, mut value) = (String::new(), None);
                while let Some((n, w)) = er.next()? {
                    match n {
                        1 => match w {
                            Wire::Bytes(b) => key = String::from_utf8(b.to_vec())?,
                            _ => {
                                return Err(DecodeError::MapEntry {
                                    field: field.json,
                                    problem: "map key is not a string",
                                })
                            }
                        },
                        2 => value = Some(scalar_or_message(w, field.ty, depth)?),
                        _ => {}
                    }
                }
                let value = value.unwrap_or_else(|| zero_of(field.ty));
                let map = out.entry(field.json).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = map {
                    m.insert(key, value);
                }
            }
        }
    }
    Ok(reshape_decoded(name, Value::Object(out)))
}

const APIEXTENSIONS_V1: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1";

/// Messages holding raw JSON in their field 1 (`raw`), whose JSON form is that JSON.
pub(crate) fn is_json_message(name: &str) -> bool {
    matches!(name, "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" | "k8s.io.apimachinery.pkg.runtime.RawExtension")
        || name.strip_prefix(APIEXTENSIONS_V1) == Some(".JSON")
}

/// The JSON form of apiextensions' `JSONSchemaPropsOr*` messages, from their fields (as
/// their Go `MarshalJSON` writes them).
fn reshape_decoded(name: &str, v: Value) -> Value {
    let Some(short) = name.strip_prefix(APIEXTENSIONS_V1) else { return v };
    let non_empty = |k: &str| v.get(k).filter(|x| x.as_array().is_some_and(|a| !a.is_empty())).cloned();
    match short {
        ".JSONSchemaPropsOrArray" => {
            non_empty("jSONSchemas").or_else(|| v.get("schema").cloned()).unwrap_or(Value::Null)
        }
        ".JSONSchemaPropsOrBool" => match v.get("schema") {
            Some(s) => s.clone(),
            None => Value::Bool(v.get("allows").and_then(Value::as_bool).unwrap_or(false)),
        },
        ".JSONSchemaPropsOrStringArray" => {
            non_empty("property").or_else(|| v.get("schema").cloned()).unwrap_or(Value::Null)
        }
        _ => v,
    }
}

/// The fields of apiextensions' `JSONSchemaPropsOr*` messages for their JSON form (as their
/// Go `UnmarshalJSON` reads it); `None` for every other message.
pub(crate) fn reshape_for_encoding(name: &str, v: &Value) -> Option<Value> {
    let short = name.strip_prefix(APIEXTENSIONS_V1)?;
    Some(match (short, v) {
        (".JSONSchemaPropsOrArray", Value::Array(_)) => serde_json::json!({"jSONSchemas": v}),
        (".JSONSchemaPropsOrArray", _) => serde_json::json!({"schema": v}),
        (".JSONSchemaPropsOrBool", Value::Bool(b)) => serde_json::json!({"allows": b}),
        (".JSONSchemaPropsOrBool", _) => serde_json::json!({"allows": true, "schema": v}),
        (".JSONSchemaPropsOrStringArray", Value::Array(_)) => serde_json::json!({"property": v}),
        (".JSONSchemaPropsOrStringArray", _) => serde_json::json!({"schema": v}),
        _ => return None,
    })
}

/// The JSON value of an absent map value (protobuf drops zero values).
fn zero_of(ty: Type) -> Value {
    match ty {
        Type::Str => Value::String(String::new()),
        Type::Bytes => Value::String(String::new()),
        Type::Bool => Value::Bool(false),
        Type::Int => Value::from(0),
        Type::Double => Value::from(0),
        Type::Msg(_) => Value::Object(Map::new()),
    }
}

/// Zero scalars and null are left out, like Go's `omitempty`.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn scalar_or_message(wire: Wire<'_>, ty: Type, depth: usize) -> Result<Value, DecodeError> {
    Ok(match (ty, wire) {
        (Type::Str, Wire::Bytes(b)) => Value::String(String::from_utf8(b.to_vec())?),
        (Type::Bytes, Wire::Bytes(b)) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        (Type::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        // int32/int64 travel as two's-complement varints.
        (Type::Int, Wire::Varint(v)) => Value::from(v as i64),
        // Go writes a whole float64 without a fraction (`1`, not `1.0`).
        (Type::Double, Wire::Fixed64(v)) => {
            let f = f64::from_bits(v);
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                Value::from(f as i64)
            } else {
                serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)
            }
        }
        (Type::Msg(name), Wire::Bytes(b)) => decode_message(b, name, depth + 1)?,
        (ty, _) => return Err(DecodeError::TypeMismatch(format!("{ty:?}"))),
    })
}

/// Messages whose JSON form is not an object of their fields.
fn special(buf: &[u8], name: &str, depth: usize) -> Result<Option<Value>, DecodeError> {
    let fields = |buf: &[u8]| -> Result<Vec<(u64, Value)>, DecodeError> {
        let mut r = Reader { buf };
        let mut out = Vec::new();
        while let Some((n, w)) = r.next()? {
            let v = match w {
                Wire::Varint(v) => Value::from(v as i64),
                Wire::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
                Wire::Fixed64(v) => Value::from(v),
                Wire::Fixed32(v) => Value::from(v),
            };
            out.push((n, v));
        }
        Ok(out)
    };
    let get = |fs: &[(u64, Value)], n: u64| fs.iter().rev().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
    let short = name.rsplit('.').next().unwrap_or(name);
    Ok(match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let fs = fields(buf)?;
            let secs = get(&fs, 1).and_then(|v| v.as_i64()).unwrap_or(0);
            let nanos = get(&fs, 2).and_then(|v| v.as_i64()).unwrap_or(0);
            if secs == 0 && nanos == 0 {
                return Ok(Some(Value::Null));
            }
            let t = chrono::DateTime::from_timestamp(secs, u32::try_from(nanos).unwrap_or(0))
                .ok_or(DecodeError::TimestampOutOfRange)?;
            let s = if short == "MicroTime" {
                t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
            } else {
                t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
            };
            Some(Value::String(s))
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let fs = fields(buf)?;
            let nanos = get(&fs, 1).and_then(|v| v.as_i64()).unwrap_or(0);
            Some(Value::String(duration::format(nanos)))
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            let fs = fields(buf)?;
            let is_str = get(&fs, 1).and_then(|v| v.as_i64()).unwrap_or(0) == 1;
            Some(if is_str {
                get(&fs, 3).unwrap_or(Value::String(String::new()))
            } else {
                get(&fs, 2).unwrap_or(Value::from(0))
            })
        }
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            Some(get(&fields(buf)?, 1).unwrap_or(Value::String("0".into())))
        }
        _ if is_json_message(name) => {
            let mut r = Reader { buf };
            let mut raw: &[u8] = &[];
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Bytes(b)) = (n, w) {
                    raw = b;
                }
            }
            if raw.is_empty() {
                Some(Value::Null)
            } else {
                Some(
                    serde_json::from_slice(raw)
                        .map_err(|e| DecodeError::EmbeddedJson { message: short.to_string(), source: e })?,
                )
            }
        }
        _ if short == "ExtraValue" || name == "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs" => {
            let mut r = Reader { buf };
            let mut items = Vec::new();
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Bytes(b)) = (n, w) {
                    items.push(Value::String(String::from_utf8(b.to_vec())?));
                }
            }
            let _ = depth;
            Some(Value::Array(items))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::encode::{ld, varint};
    use super::*;
    use serde_json::json;
    fn vi(n: u64, v: u64, out: &mut Vec<u8>) {
        varint(n << 3, out);
        varint(v, out);
    }
    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        ld(1, k.as_bytes(), &mut e);
        ld(2, v, &mut e);
        e
    }
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = Vec::new();
        ld(1, api_version.as_bytes(), &mut tm);
        ld(2, kind.as_bytes(), &mut tm);
        let mut u = Vec::new();
        ld(1, &tm, &mut u);
        ld(2, raw, &mut u);
        ld(4, b"application/vnd.kubernetes.protobuf", &mut u);
        let mut body = MAGIC.to_vec();
        body.extend(u);
        body
    }
    fn meta(name: &str, ns: &str) -> Vec<u8> {
        let mut m = Vec::new();
        ld(1, name.as_bytes(), &mut m);
        ld(2, b"", &mut m); // generateName: empty, as Go always writes it
        ld(3, ns.as_bytes(), &mut m);
        ld(8, b"", &mut m); // creationTimestamp: zero Time
        ld(11, &entry("app", b"web"), &mut m);
        m
    }

    #[test]
    fn decodes_a_configmap_like_kubectl_create_configmap_sends_it() {
        let mut cm = Vec::new();
        ld(1, &meta("demo", "default"), &mut cm);
        ld(2, &entry("greeting", b"hello"), &mut cm);
        ld(2, &entry("empty", b""), &mut cm);
        ld(3, &entry("bin", &[0, 1, 2]), &mut cm);
        let got = decode(&envelope("v1", "ConfigMap", &cm)).unwrap();
        assert_eq!(
            got,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "demo", "namespace": "default", "labels": {"app": "web"}},
                "data": {"greeting": "hello", "empty": ""},
                "binaryData": {"bin": "AAEC"},
            })
        );
    }

    #[test]
    fn decodes_a_clusterrole_with_non_resource_urls_and_a_csr_with_times_and_extra() {
        let mut rule = Vec::new();
        ld(1, b"get", &mut rule);
        ld(5, b"/healthz", &mut rule);
        let mut cr = Vec::new();
        ld(1, &meta("r", ""), &mut cr);
        ld(2, &rule, &mut cr);
        let got = decode(&envelope("rbac.authorization.k8s.io/v1", "ClusterRole", &cr)).unwrap();
        assert_eq!(got["rules"], json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]));

        let mut extra_val = Vec::new();
        ld(1, b"a", &mut extra_val);
        ld(1, b"b", &mut extra_val);
        let mut spec = Vec::new();
        ld(1, b"CSR", &mut spec);
        ld(7, b"kubernetes.io/kube-apiserver-client", &mut spec);
        vi(8, 600, &mut spec);
        ld(5, b"client auth", &mut spec);
        ld(6, &entry("k", &extra_val), &mut spec);
        let mut time = Vec::new();
        vi(1, 1_700_000_000, &mut time);
        let mut cond = Vec::new();
        ld(1, b"Approved", &mut cond);
        ld(6, b"True", &mut cond);
        ld(4, &time, &mut cond);
        let mut status = Vec::new();
        ld(1, &cond, &mut status);
        let mut csr = Vec::new();
        ld(1, &meta("c", ""), &mut csr);
        ld(2, &spec, &mut csr);
        ld(3, &status, &mut csr);
        let got = decode(&envelope("certificates.k8s.io/v1", "CertificateSigningRequest", &csr)).unwrap();
        assert_eq!(got["spec"]["request"], json!("Q1NS"));
        assert_eq!(got["spec"]["expirationSeconds"], json!(600));
        assert_eq!(got["spec"]["usages"], json!(["client auth"]));
        assert_eq!(got["spec"]["extra"], json!({"k": ["a", "b"]}));
        assert_eq!(
            got["status"]["conditions"],
            json!([{"type": "Approved", "status": "True", "lastUpdateTime": "2023-11-14T22:13:20Z"}])
        );
    }

    #[test]
    fn a_token_request_keeps_the_uid_of_its_bound_object() {
        // `kubectl create token --bound-object-kind Secret --bound-object-name anchor
        // --bound-object-uid 1234`: the uid is protobuf field `uID` (4), JSON `uid`.
        let mut bound = Vec::new();
        ld(1, b"Secret", &mut bound);
        ld(2, b"v1", &mut bound);
        ld(3, b"anchor", &mut bound);
        ld(4, b"1234", &mut bound);
        let mut spec = Vec::new();
        vi(4, 3600, &mut spec);
        ld(3, &bound, &mut spec);
        let mut tr = Vec::new();
        ld(1, &meta("builder", "team"), &mut tr);
        ld(2, &spec, &mut tr);
        let got = decode(&envelope("authentication.k8s.io/v1", "TokenRequest", &tr)).unwrap();
        assert_eq!(
            got["spec"],
            json!({
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "anchor", "uid": "1234"},
            })
        );
        let typed: k8s_openapi::api::authentication::v1::TokenRequest = serde_json::from_value(got).unwrap();
        let bound = typed.spec.unwrap().bound_object_ref.unwrap();
        assert_eq!(bound.uid.as_deref(), Some("1234"));
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        let good = envelope("v1", "ConfigMap", &[]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("no magic", b"{}".to_vec()),
            ("magic only", MAGIC.to_vec()),
            ("truncated varint", [MAGIC, &[0x0a, 0xff]].concat()),
            ("length past the end", [MAGIC, &[0x12, 0x7f, 0x01]].concat()),
            ("unknown kind", envelope("v1", "PersistentVolume", &[])),
            ("field zero", [MAGIC, &[0x00, 0x01]].concat()),
            ("wire type 3", [MAGIC, &[0x0b]].concat()),
        ];
        assert!(decode(&good).is_ok());
        for (name, body) in cases {
            assert!(decode(&body).is_err(), "{name}");
        }
        // Nested garbage inside a message is an error or ignored, never a panic.
        let mut deep = Vec::new();
        for _ in 0..200 {
            let mut outer = Vec::new();
            ld(1, &deep, &mut outer);
            deep = outer;
        }
        let _ = decode(&envelope("v1", "ConfigMap", &deep));
    }

    #[test]
    fn every_referenced_message_is_in_the_table() {
        for m in schema::MESSAGES {
            for f in m.fields {
                if let Type::Msg(n) = f.ty {
                    let handled = message(n).is_some()
                        || is_json_message(n)
                        || n.ends_with(".Time")
                        || n.ends_with(".MicroTime")
                        || n.ends_with(".Duration")
                        || n.ends_with(".FieldsV1")
                        || n.ends_with(".RawExtension")
                        || n.ends_with(".Quantity")
                        || n.ends_with(".IntOrString");
                    assert!(handled, "{} refers to {n}", m.name);
                }
            }
        }
    }

    #[test]
    fn decode_errors_keep_their_texts() {
        let cases: Vec<(&[u8], &str)> = vec![
            (b"{}", "the body does not start with the Kubernetes protobuf magic"),
            (b"k8s\0\x08", "truncated varint"),
            (b"k8s\0\x00", "field number 0"),
            (b"k8s\0\x0b", "unsupported wire type 3"),
            (b"k8s\0\x0a\x05ab", "truncated field"),
        ];
        for (body, want) in cases {
            match decode(body) {
                Err(e) => assert_eq!(e.to_string(), want, "{body:?}"),
                Ok(v) => panic!("{body:?} decoded to {v}"),
            }
        }
    }
}
