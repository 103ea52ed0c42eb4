//! Request bodies: JSON, YAML or protobuf into an object, its `apiVersion`/`kind` checked,
//! then through the kind's typed model (unknown and duplicate fields per `fieldValidation`).

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::api::dupcheck::{FieldPath, StrictErrors};
use crate::error::{ApiError, Result};
use crate::registry::ResourceDef;

/// Decode a JSON or YAML request body into an object.
pub fn decode_body(def: &ResourceDef, body: &Bytes, content_type: &str) -> Result<Value> {
    if body.is_empty() {
        return Err(ApiError::BadRequest("request body is empty".into()));
    }
    let v: Value = match content_type {
        ct if reads_as_json(ct) => serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}")))?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))?,
        // Kinds without a protobuf form (custom resources) refuse it as upstream does: 415.
        crate::api::protobuf::MEDIA_TYPE
            if !crate::api::protobuf::encode::has_message(&def.api_version(), def.kind) =>
        {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml".into(),
            ))
        }
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
/// per `fieldValidation` (Strict → 400, Warn → warnings, Ignore → nothing). Takes the object
/// by value: no copy of it lives beside its typed and pruned forms.
pub fn typed_check(
    def: &ResourceDef,
    obj: Value,
    mode: FieldValidation,
    duplicates: &[String],
) -> Result<(Value, Vec<String>)> {
    let mut for_check = obj;
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
    drop(for_check);
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

/// Whether [`decode_body`] reads a body of this content type as JSON (no content type and
/// `*/*` included).
fn reads_as_json(content_type: &str) -> bool {
    matches!(content_type, "" | "application/json" | "*/*")
}

/// Keys that appear twice in one JSON object of `body`, as dotted paths (bounded: see
/// [`crate::api::dupcheck`]), for a body [`decode_body`] reads as JSON. Under
/// `fieldValidation=Ignore` nobody is told, so the body is not searched.
pub fn duplicate_fields(body: &[u8], content_type: &str, mode: FieldValidation) -> Vec<String> {
    if mode == FieldValidation::Ignore || !reads_as_json(content_type) {
        return Vec::new();
    }
    crate::api::dupcheck::duplicate_keys(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    #[test]
    fn duplicates_are_searched_in_json_bodies_unless_ignored() {
        let body = br#"{"a":1,"a":2}"#;
        let cases: &[(&str, FieldValidation, bool)] = &[
            ("", FieldValidation::Strict, true),
            ("application/json", FieldValidation::Strict, true),
            ("*/*", FieldValidation::Strict, true),
            ("application/json", FieldValidation::Warn, true),
            ("application/json", FieldValidation::Ignore, false),
            ("*/*", FieldValidation::Ignore, false),
            ("application/yaml", FieldValidation::Strict, false),
        ];
        for (content_type, mode, found) in cases {
            let got = duplicate_fields(body, content_type, *mode);
            assert_eq!(!got.is_empty(), *found, "{content_type:?} under {mode:?}: {got:?}");
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
}
