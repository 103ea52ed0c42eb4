//! node.k8s.io/v1 `runtimeclasses`, after upstream's `pkg/registry/node/runtimeclass` and
//! `pkg/apis/node/validation`: `handler` is a DNS label and immutable; `scheduling` has
//! valid node-selector labels and tolerations. A kubelet lists and watches them at start.
//!
//! Not validated: `overhead.podFixed` quantities (accepted as they come).

use std::sync::Arc;

use k8s_openapi::api::node::v1 as nodev1;
use serde_json::{json, Value};

use super::core::pod_validation::tolerations_errors;
use super::shared::{age_column, col, creation_age, get_at, str_at};
use super::{decode, typed_roundtrip, Column, ResourceDef, Strategy, TableStrategy, WriteStrategy};
use crate::error::FieldError;
use crate::validation;

/// All node.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![ResourceDef {
        group: "node.k8s.io",
        version: "v1",
        resource: "runtimeclasses",
        singular: "runtimeclass",
        kind: "RuntimeClass",
        namespaced: false,
        short_names: &[],
        categories: &[],
        subresources: &[],
        create_only: false,
        strategy: Arc::new(RuntimeClassStrategy),
        schema: |g| g.subschema_for::<nodev1::RuntimeClass>(),
    }]
}

/// `runtimeclasses`.
pub struct RuntimeClassStrategy;

impl Strategy for RuntimeClassStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<nodev1::RuntimeClass>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for RuntimeClassStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let _: nodev1::RuntimeClass = crate::typed!(decode(obj));
        let handler = str_at(obj, &["handler"]).unwrap_or("");
        let mut errs: Vec<FieldError> = validation::is_dns1123_label(handler)
            .into_iter()
            .map(|m| FieldError::invalid("handler", &json!(handler), m))
            .collect();
        errs.extend(validation::validate_labels(
            get_at(obj, &["scheduling", "nodeSelector"]),
            "scheduling.nodeSelector",
        ));
        let tolerations = get_at(obj, &["scheduling", "tolerations"]).and_then(Value::as_array);
        errs.extend(tolerations_errors(tolerations.map(Vec::as_slice).unwrap_or(&[]), "scheduling.tolerations"));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (n, o) = (str_at(new, &["handler"]).unwrap_or(""), str_at(old, &["handler"]).unwrap_or(""));
        if n == o {
            Vec::new()
        } else {
            vec![FieldError::immutable("handler", &json!(n))]
        }
    }
}

impl TableStrategy for RuntimeClassStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Handler",
                "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(str_at(obj, &["handler"]).unwrap_or("")), creation_age(obj, now)]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Mutation = fn(&mut Value);

    fn rc() -> Value {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "gvisor", "creationTimestamp": "2024-05-01T11:00:00Z"}, "handler": "runsc"})
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    #[test]
    fn runtimeclass_validation() {
        let label_msg = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
        let cases: &[(&str, Mutation, Vec<String>)] = &[
            ("valid", |_| {}, vec![]),
            ("no handler", |o| { o.as_object_mut().unwrap().remove("handler"); },
             vec![format!("handler: Invalid value: \"\": {label_msg}")]),
            ("dotted handler", |o| o["handler"] = json!("run.sc"),
             vec!["handler: Invalid value: \"run.sc\": must not contain dots".to_string()]),
            ("scheduling", |o| o["scheduling"] = json!({"nodeSelector": {"runtime": "gvisor"},
                "tolerations": [{"key": "runtime", "operator": "Exists", "effect": "NoSchedule"}]}), vec![]),
            ("bad toleration", |o| o["scheduling"] = json!({"tolerations": [{"key": "k", "operator": "Maybe"}]}),
             vec!["scheduling.tolerations[0].operator: Unsupported value: \"Maybe\": supported values: \"Equal\", \"Exists\"".to_string()]),
        ];
        for (name, mutate, want) in cases {
            let mut o = rc();
            mutate(&mut o);
            assert_eq!(&rendered(&RuntimeClassStrategy.validate(&o)), want, "{name}");
        }
    }

    #[test]
    fn handler_is_immutable() {
        let old = rc();
        let mut new = rc();
        new["metadata"]["labels"] = json!({"a": "b"});
        assert!(RuntimeClassStrategy.validate_update(&new, &old).is_empty());
        new["handler"] = json!("kata");
        assert_eq!(
            rendered(&RuntimeClassStrategy.validate_update(&new, &old)),
            ["handler: Invalid value: \"kata\": field is immutable"]
        );
    }

    #[test]
    fn runtimeclass_table() {
        let names: Vec<&str> = RuntimeClassStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Handler", "Age"]);
        let now = chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
        assert_eq!(RuntimeClassStrategy.cells(&rc(), now), vec![json!("runsc"), json!("60m")]);
    }
}
