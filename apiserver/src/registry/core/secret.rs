//! `secrets` (`pkg/registry/core/secret`): `type` defaults to `Opaque` and is immutable,
//! `stringData` is merged into `data`, per-type required keys, the 1 MiB limit and `immutable`.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use super::data::{is_immutable, map_len, same_map, IMMUTABLE_WHEN_SET, MAX_SECRET_SIZE};
use crate::error::FieldError;
use crate::registry::shared::{age_column, col, creation_age, str_at, too_long};
use crate::registry::{
    decode, decode_update, typed_roundtrip, Column, FieldSelectors, Strategy, TableStrategy, WriteStrategy,
};
use crate::validation;

/// `secrets`: `type` defaults to `Opaque` and is immutable, `stringData` is merged into `data`,
/// per-type required keys, the 1 MiB limit and `immutable`.
pub struct SecretStrategy;

const SECRET_TYPE_OPAQUE: &str = "Opaque";

/// v1 defaulting and conversion, on every decode: `type` → `Opaque`; `stringData` overwrites
/// `data` keys (base64 on the wire) and is never stored.
fn normalize_secret(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    if m.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        m.insert("type".into(), json!(SECRET_TYPE_OPAQUE));
    }
    let Some(string_data) = m.remove("stringData") else { return };
    let Some(string_data) = string_data.as_object().filter(|sd| !sd.is_empty()) else { return };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let plain = v.as_str().unwrap_or("");
            data.insert(k.clone(), json!(base64::engine::general_purpose::STANDARD.encode(plain)));
        }
    }
}

/// What Go's `json.Unmarshal(b, &map[string]interface{}{})` reports, if anything.
fn go_json_object_error(b: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(b) {
        Ok(Value::Object(_) | Value::Null) => None,
        Ok(v) => {
            let kind = match v {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Bool(_) => "bool",
                _ => "number",
            };
            Some(format!("json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"))
        }
        Err(e) if e.is_eof() => Some("unexpected end of JSON input".into()),
        Err(e) => {
            // Point at the offending byte like Go's scanner does.
            let offending = b
                .split(|c| *c == b'\n')
                .nth(e.line().saturating_sub(1))
                .and_then(|line| line.get(e.column().saturating_sub(1)))
                .copied()
                .unwrap_or(b'?');
            Some(format!("invalid character {:?} looking for beginning of value", offending as char))
        }
    }
}

fn validate_secret(secret: &corev1::Secret, annotations: Option<&BTreeMap<String, String>>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let data = secret.data.clone().unwrap_or_default();
    let mut total = 0usize;
    for (key, value) in &data {
        for msg in validation::is_config_map_key(key) {
            errs.push(FieldError::invalid(format!("data[{key}]"), &json!(key), msg));
        }
        total += value.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(too_long("data", MAX_SECRET_SIZE));
    }
    let required = |key: &str| FieldError::required(format!("data[{key}]"), "");
    let json_key = |errs: &mut Vec<FieldError>, key: &str| match data.get(key) {
        None => errs.push(required(key)),
        Some(bytes) => {
            if let Some(e) = go_json_object_error(&bytes.0) {
                errs.push(FieldError::invalid(format!("data[{key}]"), &json!("<secret contents redacted>"), e));
            }
        }
    };
    match secret.type_.as_deref().unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let key = "kubernetes.io/service-account.name";
            if annotations.and_then(|a| a.get(key)).is_none_or(String::is_empty) {
                errs.push(FieldError::required(format!("metadata.annotations[{key}]"), ""));
            }
        }
        "kubernetes.io/dockercfg" => json_key(&mut errs, ".dockercfg"),
        "kubernetes.io/dockerconfigjson" => json_key(&mut errs, ".dockerconfigjson"),
        // Username or password may be empty, but one of them must be present.
        "kubernetes.io/basic-auth" if !data.contains_key("username") && !data.contains_key("password") => {
            errs.push(required("username"));
            errs.push(required("password"));
        }
        "kubernetes.io/ssh-auth" if data.get("ssh-privatekey").is_none_or(|v| v.0.is_empty()) => {
            errs.push(required("ssh-privatekey"));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !data.contains_key(key) {
                    errs.push(required(key));
                }
            }
        }
        // Opaque, "", bootstrap.kubernetes.io/token and any other type: no rules upstream.
        _ => {}
    }
    errs
}

impl Strategy for SecretStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Secret>(obj)
    }

    /// As upstream's conversion of a v1 Secret: `stringData` is in `data` once decoded, so the
    /// field manager sees (and owns) `data` as it is stored, never `stringData`.
    fn converted(&self, obj: &mut Value) {
        normalize_secret(obj);
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for SecretStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        normalize_secret(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        normalize_secret(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let secret: corev1::Secret = crate::typed!(decode(obj));
        validate_secret(&secret, secret.metadata.annotations.as_ref())
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (corev1::Secret, corev1::Secret) = crate::typed!(decode_update(new, old));
        let mut errs = Vec::new();
        let new_type = new.type_.clone().unwrap_or_default();
        if new_type != old.type_.clone().unwrap_or_default() {
            errs.push(FieldError::immutable("type", &json!(new_type)));
        }
        if is_immutable(old.immutable) {
            if !is_immutable(new.immutable) {
                errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
            }
            if !same_map(&new.data, &old.data) {
                errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
            }
        }
        errs
    }
}

impl FieldSelectors for SecretStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "type" => Some(str_at(obj, &["type"]).unwrap_or("").to_string()),
            _ => None,
        }
    }
}

impl TableStrategy for SecretStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Type",
                "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
                0,
            ),
            col(
                "Data",
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(str_at(obj, &["type"]).unwrap_or("")), json!(map_len(obj, "data")), creation_age(obj, now)]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::core::test_util::*;

    fn base_secret() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "s", "namespace": "default", "creationTimestamp": "2024-05-01T11:59:30Z"},
               "type": "Opaque", "data": {"a": "YQ=="}})
    }

    #[test]
    fn secret_defaults_and_string_data() {
        let mut obj = base_secret();
        obj.as_object_mut().unwrap().remove("type");
        set(&mut obj, &["stringData"], json!({"a": "override", "b": "bee"}));
        SecretStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["type"], "Opaque", "type defaults");
        assert_eq!(obj["data"], json!({"a": "b3ZlcnJpZGU=", "b": "YmVl"}), "stringData merged, wins");
        assert!(obj.get("stringData").is_none(), "stringData dropped");
        let mut upd = json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
        SecretStrategy.prepare_for_update(&mut upd, &base_secret());
        assert_eq!(upd["data"], json!({"k": "dg=="}), "update merges too");
    }

    #[test]
    fn secret_validation() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("opaque", json!({"type": "Opaque", "data": {"x": b64("1")}}), vec![]),
            ("bad key", json!({"type": "Opaque", "data": {"a/b": b64("1")}}), vec![
                "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ]),
            ("sa token without annotation", json!({"type": "kubernetes.io/service-account-token"}), vec![
                "metadata.annotations[kubernetes.io/service-account.name]: Required value",
            ]),
            ("sa token with annotation", json!({"type": "kubernetes.io/service-account-token",
                "metadata": {"annotations": {"kubernetes.io/service-account.name": "default"}}}), vec![]),
            ("dockerconfigjson missing", json!({"type": "kubernetes.io/dockerconfigjson"}), vec![
                "data[.dockerconfigjson]: Required value",
            ]),
            ("dockerconfigjson not json", json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("{")}}), vec![
                "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": unexpected end of JSON input",
            ]),
            ("dockercfg array", json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("[]")}}), vec![
                "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            ]),
            ("dockercfg garbage", json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("x")}}), vec![
                "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": invalid character 'x' looking for beginning of value",
            ]),
            ("dockerconfigjson ok", json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("{\"auths\":{}}")}}), vec![]),
            ("basic-auth empty", json!({"type": "kubernetes.io/basic-auth"}), vec![
                "data[username]: Required value", "data[password]: Required value",
            ]),
            ("basic-auth password only", json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}}), vec![]),
            ("ssh-auth empty key", json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}}), vec![
                "data[ssh-privatekey]: Required value",
            ]),
            ("tls missing key", json!({"type": "kubernetes.io/tls", "data": {"tls.crt": ""}}), vec![
                "data[tls.key]: Required value",
            ]),
            ("bootstrap token: no rules", json!({"type": "bootstrap.kubernetes.io/token"}), vec![]),
            ("too big", json!({"type": "Opaque", "data": {"big": b64(&"x".repeat(MAX_SECRET_SIZE + 1))}}), vec![
                "data: Too long: may not be more than 1048576 bytes",
            ]),
        ];
        for (name, patch, want) in cases {
            let mut obj = base_secret();
            obj.as_object_mut().unwrap().remove("data");
            for (k, v) in patch.as_object().unwrap() {
                if k == "metadata" {
                    set(&mut obj, &["metadata", "annotations"], v["annotations"].clone());
                } else {
                    obj[k.as_str()] = v.clone();
                }
            }
            assert_eq!(rendered(&SecretStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn secret_updates() {
        let cases: Vec<(&str, Mutation, Mutation, Vec<&str>)> = vec![
            ("same type", |_| {}, |_| {}, vec![]),
            (
                "type change",
                |_| {},
                |n| set(n, &["type"], json!("kubernetes.io/tls")),
                vec!["type: Invalid value: \"kubernetes.io/tls\": field is immutable"],
            ),
            (
                "immutable data change",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    set(n, &["data"], json!({"a": "Yg=="}));
                },
                vec!["data: Forbidden: field is immutable when `immutable` is set"],
            ),
            (
                "immutable unset",
                |o| set(o, &["immutable"], json!(true)),
                |_| {},
                vec!["immutable: Forbidden: field is immutable when `immutable` is set"],
            ),
        ];
        for (name, old_m, new_m, want) in cases {
            let mut old = base_secret();
            old_m(&mut old);
            let mut new = base_secret();
            new_m(&mut new);
            assert_eq!(rendered(&SecretStrategy.validate_update(&new, &old)), want, "{name}");
        }
    }

    #[test]
    fn secret_fields_and_table() {
        let s = base_secret();
        assert_eq!(SecretStrategy.field(&s, "type").as_deref(), Some("Opaque"), "type selectable");
        assert_eq!(SecretStrategy.field(&s, "data"), None, "data not selectable");
        let names: Vec<&str> = SecretStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Type", "Data", "Age"], "secret columns");
        assert_eq!(SecretStrategy.cells(&s, now()), vec![json!("Opaque"), json!(1), json!("30s")], "secret cells");
    }
}
