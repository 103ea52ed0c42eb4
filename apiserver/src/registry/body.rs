//! Request bodies: JSON, YAML or protobuf into an object, its `apiVersion`/`kind` checked,
//! then through the kind's typed model (unknown and duplicate fields per `fieldValidation`).
//!
//! In: a body, its content type and the kind's registration. Out: the object and the strict
//! decoding problems, or a 400/415 `Status`. Filed with the registry, below the handlers,
//! because a kind's own handler (the review kinds', TokenRequest's) decodes with it as the
//! generic handlers do (`api::rest` re-exports it).

use bytes::Bytes;
use serde_json::{json, Value};

use super::call::FieldValidation;
use super::ResourceDef;
use crate::error::{ApiError, Result};
use crate::wire::dupcheck::{FieldPath, StrictErrors};
use crate::work::{self, Format, Site};

/// Decode a JSON, YAML or protobuf request body into an object, with the duplicate fields
/// `fieldValidation` is told of (none under Ignore), as problems [`typed_check`] reports:
/// `duplicate field "<path>"` in JSON, `line N: key "<key>" already set in map` in YAML
/// (upstream's strict YAML decoder). YAML is read by [`crate::wire::yaml`], whose cost is
/// bounded by the body's size.
pub fn decode_body(
    def: &ResourceDef,
    body: &Bytes,
    content_type: &str,
    mode: FieldValidation,
) -> Result<(Value, Vec<String>)> {
    if body.is_empty() {
        return Err(ApiError::BadRequest("request body is empty".into()));
    }
    let mut duplicates = Vec::new();
    let v: Value = match content_type {
        ct if reads_as_json(ct) => {
            work::decoded(Format::Json, Site::Request);
            let v = serde_json::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}")))?;
            if mode != FieldValidation::Ignore {
                duplicates = duplicate_fields(body);
            }
            v
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            work::decoded(Format::Yaml, Site::Request);
            let decoded = crate::wire::yaml::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))?;
            if mode != FieldValidation::Ignore {
                duplicates = decoded.duplicates;
            }
            decoded.value
        }
        // Kinds without a protobuf form (custom resources) refuse it as upstream does: 415.
        crate::wire::protobuf::MEDIA_TYPE
            if !crate::wire::protobuf::encode::has_message(&def.api_version(), def.kind) =>
        {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml".into(),
            ))
        }
        crate::wire::protobuf::MEDIA_TYPE => {
            work::decoded(Format::Protobuf, Site::Request);
            crate::wire::protobuf::decode(body).map_err(|e| {
                ApiError::BadRequest(format!("{} in version \"{}\" cannot be handled as a {}: {e}", def.kind, def.version, def.kind))
            })?
        }
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
    Ok((v, duplicates))
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

/// `obj` decoded into the kind's typed form and encoded back (within the typed decoding
/// budget), or the 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: ...`.
pub fn typed_roundtrip(def: &ResourceDef, obj: &Value) -> Result<Value> {
    def.strategy.roundtrip(obj).map_err(|e| undecodable(def, e))
}

/// The 400 for an object of `def`'s kind that its typed form does not decode.
pub fn undecodable(def: &ResourceDef, e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!(
        "{} in version \"{}\" cannot be handled as a {}: {e}",
        def.kind, def.version, def.kind
    ))
}

/// Decode through the typed model: type errors → 400; unknown fields pruned and reported,
/// after the `duplicates` [`decode_body`] found, per `fieldValidation` (Strict → 400, Warn →
/// warnings, Ignore → nothing). Takes the object by value: no copy of it lives beside its
/// typed and pruned forms.
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
    let pruned = typed_roundtrip(def, &for_check)?;
    // At most MAX_STRICT_ERRORS distinct problems, as upstream's strict decoder keeps.
    let mut found = StrictErrors::default();
    for problem in duplicates {
        found.add(problem.clone());
    }
    unknown_fields(&for_check, &pruned, &mut FieldPath::default(), &mut found);
    drop(for_check);
    let mut pruned = pruned;
    def.strategy.converted(&mut pruned);
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

/// Keys that appear twice in one object of a JSON `body`, as `duplicate field "<path>"`
/// (bounded: see [`crate::wire::dupcheck`]).
fn duplicate_fields(body: &[u8]) -> Vec<String> {
    crate::wire::dupcheck::duplicate_keys(body).into_iter().map(|p| format!("duplicate field \"{p}\"")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn configmaps() -> &'static ResourceDef {
        static REGISTRY: std::sync::OnceLock<crate::registry::Registry> = std::sync::OnceLock::new();
        let registry = REGISTRY.get_or_init(crate::registry::Registry::builtin);
        let Some(def) = registry.find("", "v1", "configmaps") else { panic!("configmaps registered") };
        def
    }

    #[test]
    fn duplicates_are_reported_unless_ignored() {
        let json = Bytes::from_static(br#"{"kind":"ConfigMap","a":1,"a":2}"#);
        let yaml = Bytes::from_static(b"kind: ConfigMap\na: 1\na: 2\n");
        let json_dup = vec!["duplicate field \"a\"".to_string()];
        let yaml_dup = vec!["line 3: key \"a\" already set in map".to_string()];
        let cases: &[(&str, &Bytes, FieldValidation, &[String])] = &[
            ("", &json, FieldValidation::Strict, &json_dup),
            ("application/json", &json, FieldValidation::Strict, &json_dup),
            ("*/*", &json, FieldValidation::Strict, &json_dup),
            ("application/json", &json, FieldValidation::Warn, &json_dup),
            ("application/json", &json, FieldValidation::Ignore, &[]),
            ("*/*", &json, FieldValidation::Ignore, &[]),
            ("application/yaml", &yaml, FieldValidation::Strict, &yaml_dup),
            ("application/yaml", &yaml, FieldValidation::Warn, &yaml_dup),
            ("application/yaml", &yaml, FieldValidation::Ignore, &[]),
            // JSON is YAML: a JSON body sent as YAML is reported as upstream's YAML reader does.
            ("application/yaml", &json, FieldValidation::Strict, &["line 1: key \"a\" already set in map".to_string()]),
        ];
        for (content_type, body, mode, want) in cases {
            let (obj, got) = decode_body(configmaps(), body, content_type, *mode)
                .unwrap_or_else(|e| panic!("{content_type:?}: {e:?}"));
            assert_eq!(got, *want, "{content_type:?} under {mode:?}");
            assert_eq!(obj["a"], json!(2), "{content_type:?}: the last value is kept");
        }
    }

    #[test]
    fn yaml_duplicates_come_first_among_strict_problems() {
        let dups = vec!["line 3: key \"a\" already set in map".to_string()];
        let obj = json!({"kind": "ConfigMap", "a": 2});
        let got = typed_check(configmaps(), obj.clone(), FieldValidation::Warn, &dups).map(|(_, w)| w);
        assert_eq!(got.ok(), Some(vec![dups[0].clone(), "unknown field \"a\"".to_string()]));
        let err = typed_check(configmaps(), obj, FieldValidation::Strict, &dups).err().map(|e| e.to_string());
        let want = "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
                    line 3: key \"a\" already set in map, unknown field \"a\"";
        assert!(err.as_deref().is_some_and(|e| e.contains(want)), "{err:?}");
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
        assert_eq!(got.len(), crate::wire::dupcheck::MAX_STRICT_ERRORS);
        for p in &got {
            assert!(p.len() <= crate::wire::dupcheck::MAX_FIELD_PATH_BYTES + 20, "{} bytes", p.len());
            assert!(p.contains("..."), "{p}");
        }
    }

    #[test]
    fn yaml_bodies_cannot_expand() {
        let mut laughs = String::from("apiVersion: v1\nkind: ConfigMap\na0: &a0 [\"lol\"]\n");
        for i in 1..12 {
            let prev = format!("*a{}", i - 1);
            laughs.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(",")));
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let cases = [
            ("billion laughs", laughs, "error converting YAML to JSON: yaml: document contains excessive aliasing"),
            ("deep nesting", deep, "error converting YAML to JSON: yaml: the document nests more than 127 levels deep"),
        ];
        for (name, body, want) in cases {
            let got = decode_body(configmaps(), &Bytes::from(body), "application/yaml", FieldValidation::Warn);
            match got {
                Err(ApiError::BadRequest(message)) => assert_eq!(message, want, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
