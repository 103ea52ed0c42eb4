//! An object's JSON form → its Kubernetes protobuf encoding: the reverse of [`super::decode`],
//! driven by the same field tables.
//!
//! Fields present in the JSON are written (in field-number order, map entries sorted by key,
//! repeated numbers unpacked, as Go's generated marshallers write them); absent and `null`
//! ones are left out, which a Go reader takes as the zero value. The well-known messages are
//! written as upstream marshals them: `Time`/`MicroTime` as seconds + nanos, `Duration` as
//! nanoseconds, `IntOrString` as type + both values, `Quantity` as its string, `FieldsV1`,
//! `RawExtension` and apiextensions' `JSON` as raw JSON bytes, `ExtraValue`/`Verbs` as
//! repeated strings. A body is `k8s\0` then a `runtime.Unknown` whose `raw` holds the message,
//! with empty `contentEncoding` and `contentType` written after it, as upstream's serializer
//! does.

use base64::Engine;
use serde_json::Value;

use super::{is_json_message, message, message_for, reshape_for_encoding, Card, Type, MAGIC, MAX_DEPTH};

/// Why an object could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// No protobuf message for the object's kind (custom resources, `Table`).
    #[error("no protobuf encoding for {kind} in {api_version:?}")]
    UnknownKind { kind: String, api_version: String },
    #[error("unknown protobuf message {0}")]
    UnknownMessage(String),
    #[error("message nesting too deep")]
    TooDeep,
    /// A JSON value whose type does not fit its field.
    #[error("{field}: {problem}")]
    Value { field: String, problem: String },
}

/// Append a varint.
pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Append field `n` as length-delimited bytes.
pub fn ld(n: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint(n << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Append field `n` as a varint.
fn vi(n: u64, v: u64, out: &mut Vec<u8>) {
    varint(n << 3, out);
    varint(v, out);
}

/// A body as upstream's serializer writes it: `k8s\0`, then
/// `runtime.Unknown{typeMeta{apiVersion, kind}, raw, contentEncoding: "", contentType: ""}`.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    ld(1, api_version.as_bytes(), &mut type_meta);
    ld(2, kind.as_bytes(), &mut type_meta);
    let mut out = MAGIC.to_vec();
    ld(1, &type_meta, &mut out);
    ld(2, raw, &mut out);
    ld(3, b"", &mut out);
    ld(4, b"", &mut out);
    out
}

/// Whether objects of this `apiVersion`/`kind` have a protobuf form.
pub fn has_message(api_version: &str, kind: &str) -> bool {
    message_for(api_version, kind).is_some()
}

/// Encode an object (with `apiVersion` and `kind`) as a protobuf body, envelope included.
pub fn encode(obj: &Value) -> Result<Vec<u8>, EncodeError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = message_for(api_version, kind)
        .ok_or_else(|| EncodeError::UnknownKind { kind: kind.to_string(), api_version: api_version.to_string() })?;
    let raw = encode_message(obj, name, 0)?;
    Ok(envelope(api_version, kind, &raw))
}

/// One watch event as upstream's protobuf watch stream carries it: a 4-byte big-endian
/// length, then the bare `metav1.WatchEvent` message (upstream writes the stream with its raw
/// protobuf serializer: no `k8s\0`, no `runtime.Unknown` around the event) holding
/// `event_type` and, in its `object.raw`, the object's own full body ([`encode`], with its
/// envelope). client-go's watch decoder reads exactly this.
pub fn watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>, EncodeError> {
    let inner = encode(object)?;
    let mut raw_ext = Vec::new();
    ld(1, &inner, &mut raw_ext);
    let mut event = Vec::new();
    ld(1, event_type.as_bytes(), &mut event);
    ld(2, &raw_ext, &mut event);
    let body = event;
    let len = u32::try_from(body.len())
        .map_err(|_| EncodeError::Value { field: "WatchEvent".into(), problem: "event too large".into() })?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend(body);
    Ok(out)
}

fn bad(field: &str, problem: impl Into<String>) -> EncodeError {
    EncodeError::Value { field: field.to_string(), problem: problem.into() }
}

/// The message `name` for the JSON `v` (an object, or the JSON form of a well-known message).
pub(crate) fn encode_message(v: &Value, name: &str, depth: usize) -> Result<Vec<u8>, EncodeError> {
    if depth > MAX_DEPTH {
        return Err(EncodeError::TooDeep);
    }
    if let Some(b) = special(v, name)? {
        return Ok(b);
    }
    let reshaped = reshape_for_encoding(name, v);
    let v = reshaped.as_ref().unwrap_or(v);
    let msg = message(name).ok_or_else(|| EncodeError::UnknownMessage(name.to_string()))?;
    let Value::Object(obj) = v else { return Err(bad(name, format!("expected an object, got {v}"))) };
    let mut out = Vec::new();
    for f in msg.fields {
        let Some(value) = obj.get(f.json).filter(|v| !v.is_null()) else { continue };
        match f.card {
            Card::One => field(f.number, value, f.ty, f.json, depth, &mut out)?,
            Card::Repeated => {
                let Value::Array(items) = value else { return Err(bad(f.json, "expected a list")) };
                for item in items {
                    field(f.number, item, f.ty, f.json, depth, &mut out)?;
                }
            }
            Card::Map => {
                let Value::Object(m) = value else { return Err(bad(f.json, "expected a map")) };
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                for k in keys {
                    let mut entry = Vec::new();
                    ld(1, k.as_bytes(), &mut entry);
                    let item = &m[k.as_str()];
                    if item.is_null() {
                        // Go writes the zero value; for a message that is an empty one.
                        if let Type::Msg(_) = f.ty {
                            ld(2, b"", &mut entry);
                        }
                    } else {
                        field(2, item, f.ty, f.json, depth, &mut entry)?;
                    }
                    ld(f.number, &entry, &mut out);
                }
            }
        }
    }
    Ok(out)
}

/// Append one value of field `number`.
fn field(number: u64, v: &Value, ty: Type, json: &str, depth: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    match ty {
        Type::Str => {
            let s = v.as_str().ok_or_else(|| bad(json, format!("expected a string, got {v}")))?;
            ld(number, s.as_bytes(), out);
        }
        Type::Bytes => {
            let s = v.as_str().ok_or_else(|| bad(json, "expected base64 bytes"))?;
            let b = base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| bad(json, e.to_string()))?;
            ld(number, &b, out);
        }
        Type::Bool => {
            let b = v.as_bool().ok_or_else(|| bad(json, format!("expected a boolean, got {v}")))?;
            vi(number, u64::from(b), out);
        }
        Type::Int => {
            // Negative numbers as ten-byte two's-complement varints, as Go writes int32s too.
            let n = v
                .as_i64()
                .or_else(|| v.as_u64().map(|u| u as i64))
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| bad(json, format!("expected an integer, got {v}")))?;
            vi(number, n as u64, out);
        }
        Type::Double => {
            let f = v.as_f64().ok_or_else(|| bad(json, format!("expected a number, got {v}")))?;
            varint(number << 3 | 1, out);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Type::Msg(name) => {
            let b = encode_message(v, name, depth + 1)?;
            ld(number, &b, out);
        }
    }
    Ok(())
}

/// Messages whose JSON form is not an object of their fields.
fn special(v: &Value, name: &str) -> Result<Option<Vec<u8>>, EncodeError> {
    let short = name.rsplit('.').next().unwrap_or(name);
    let mut out = Vec::new();
    match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let s = v.as_str().ok_or_else(|| bad(short, format!("expected a timestamp, got {v}")))?;
            let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| bad(short, format!("{s:?}: {e}")))?;
            vi(1, t.timestamp() as u64, &mut out);
            vi(2, u64::from(t.timestamp_subsec_nanos()), &mut out);
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let s = v.as_str().ok_or_else(|| bad(short, "expected a duration"))?;
            let nanos = super::duration::parse(s).ok_or_else(|| bad(short, format!("invalid duration {s:?}")))?;
            vi(1, nanos as u64, &mut out);
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => match v {
            Value::String(s) => {
                vi(1, 1, &mut out);
                vi(2, 0, &mut out);
                ld(3, s.as_bytes(), &mut out);
            }
            _ => {
                let n = v.as_i64().ok_or_else(|| bad(short, format!("expected an integer or a string, got {v}")))?;
                vi(1, 0, &mut out);
                vi(2, n as u64, &mut out);
                ld(3, b"", &mut out);
            }
        },
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(bad(short, format!("expected a quantity, got {v}"))),
            };
            ld(1, s.as_bytes(), &mut out);
        }
        _ if is_json_message(name) => {
            let raw = serde_json::to_vec(v).map_err(|e| bad(short, e.to_string()))?;
            ld(1, &raw, &mut out);
        }
        _ if short == "ExtraValue" || name == "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs" => {
            let Value::Array(items) = v else { return Err(bad(short, "expected a list of strings")) };
            for i in items {
                let s = i.as_str().ok_or_else(|| bad(short, "expected a list of strings"))?;
                ld(1, s.as_bytes(), &mut out);
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests;
