//! `configmaps` (`pkg/registry/core/configmap`): key rules, the 1 MiB limit and `immutable`.

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use super::data::{is_immutable, map_len, same_map, IMMUTABLE_WHEN_SET, MAX_SECRET_SIZE};
use crate::error::FieldError;
use crate::registry::shared::{age_column, col, creation_age, too_long};
use crate::registry::{decode, decode_update, typed_roundtrip, Column, Strategy, TableStrategy, WriteStrategy};
use crate::validation;

/// `configmaps`: key rules, the 1 MiB limit and `immutable`.
pub struct ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::ConfigMap>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for ConfigMapStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let cm: corev1::ConfigMap = crate::typed!(decode(obj));
        let mut errs = Vec::new();
        let mut total = 0usize;
        let binary = cm.binary_data.unwrap_or_default();
        for (key, value) in cm.data.unwrap_or_default() {
            let field = format!("data[{key}]");
            for msg in validation::is_config_map_key(&key) {
                errs.push(FieldError::invalid(&field, &json!(key), msg));
            }
            if binary.contains_key(&key) {
                errs.push(FieldError::invalid(&field, &json!(key), "duplicate of key present in binaryData"));
            }
            total += value.len();
        }
        for (key, value) in &binary {
            for msg in validation::is_config_map_key(key) {
                errs.push(FieldError::invalid(format!("binaryData[{key}]"), &json!(key), msg));
            }
            total += value.0.len();
        }
        if total > MAX_SECRET_SIZE {
            // The empty path means "the whole object", as upstream.
            errs.push(too_long("", MAX_SECRET_SIZE));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (corev1::ConfigMap, corev1::ConfigMap) = crate::typed!(decode_update(new, old));
        let mut errs = Vec::new();
        if is_immutable(old.immutable) {
            if !is_immutable(new.immutable) {
                errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
            }
            if !same_map(&new.data, &old.data) {
                errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
            }
            if !same_map(&new.binary_data, &old.binary_data) {
                errs.push(FieldError::forbidden("binaryData", IMMUTABLE_WHEN_SET));
            }
        }
        errs
    }
}

impl TableStrategy for ConfigMapStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Data",
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let n = map_len(obj, "data") + map_len(obj, "binaryData");
        vec![json!(n), creation_age(obj, now)]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::core::test_util::*;

    fn base_cm() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "data": {"a.txt": "hello"}, "binaryData": {"b.bin": "AAEC"}})
    }

    #[test]
    fn configmap_validation() {
        let big = "x".repeat(MAX_SECRET_SIZE);
        let cases: Vec<(&str, Mutate, Vec<String>)> = vec![
            ("valid", Box::new(|_| {}), vec![]),
            ("bad data key", Box::new(|o| set(o, &["data"], json!({"a b": "x"}))), vec![
                "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".into(),
            ]),
            ("dot-dot binary key", Box::new(|o| set(o, &["binaryData"], json!({"..x": ""}))), vec![
                "binaryData[..x]: Invalid value: \"..x\": must not start with '..'".into(),
            ]),
            ("key in both", Box::new(|o| set(o, &["binaryData"], json!({"a.txt": ""}))), vec![
                "data[a.txt]: Invalid value: \"a.txt\": duplicate of key present in binaryData".into(),
            ]),
            ("too big", Box::new(move |o| set(o, &["data", "big"], json!(big))), vec![
                "Too long: may not be more than 1048576 bytes".into(),
            ]),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base_cm();
            mutate(&mut obj);
            assert_eq!(rendered(&ConfigMapStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn configmap_immutable_updates() {
        let forbidden = |f: &str| format!("{f}: Forbidden: field is immutable when `immutable` is set");
        let cases: Vec<(&str, Mutation, Mutation, Vec<String>)> = vec![
            ("mutable: anything goes", |_| {}, |n| set(n, &["data"], json!({})), vec![]),
            (
                "immutable: unchanged ok",
                |o| set(o, &["immutable"], json!(true)),
                |n| set(n, &["immutable"], json!(true)),
                vec![],
            ),
            (
                "immutable: metadata only ok",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    set(n, &["metadata", "labels"], json!({"a": "b"}));
                },
                vec![],
            ),
            (
                "immutable: cannot unset",
                |o| set(o, &["immutable"], json!(true)),
                |n| set(n, &["immutable"], json!(false)),
                vec![forbidden("immutable")],
            ),
            (
                "immutable: data change",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    set(n, &["data", "a.txt"], json!("bye"));
                },
                vec![forbidden("data")],
            ),
            (
                "immutable: binaryData removed",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    n.as_object_mut().unwrap().remove("binaryData");
                },
                vec![forbidden("binaryData")],
            ),
        ];
        for (name, old_m, new_m, want) in cases {
            let mut old = base_cm();
            old_m(&mut old);
            let mut new = base_cm();
            new_m(&mut new);
            assert_eq!(rendered(&ConfigMapStrategy.validate_update(&new, &old)), want, "{name}");
        }
    }

    #[test]
    fn configmap_table() {
        let names: Vec<&str> = ConfigMapStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Data", "Age"], "configmap columns");
        assert_eq!(ConfigMapStrategy.cells(&base_cm(), now()), vec![json!(2), json!("60m")], "configmap cells");
    }
}
