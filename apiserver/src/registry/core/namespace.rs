//! `namespaces` (`pkg/registry/core/namespace`): status is server-owned, `spec.finalizers`
//! change only through `finalize`, and the `kubernetes.io/metadata.name` label is forced on
//! every write.

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use crate::error::FieldError;
use crate::registry::shared::{age_column, carry, child_obj, col, creation_age, get_at, str_at};
use crate::registry::{
    typed_roundtrip, Column, DeleteStrategy, FieldSelectors, StatusStrategy, Strategy, SubresourceStrategy,
    TableStrategy, WriteStrategy,
};
use crate::validation;

/// The label every namespace carries with its own name (`v1.LabelMetadataName`).
pub const LABEL_METADATA_NAME: &str = "kubernetes.io/metadata.name";
const FINALIZER_KUBERNETES: &str = "kubernetes";
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// `namespaces`: status is server-owned (`status` subresource), `spec.finalizers` only change
/// through `finalize`, and the `kubernetes.io/metadata.name` label is forced on every write.
pub struct NamespaceStrategy;

/// `SetDefaults_Namespace` + `Canonicalize`: the name label, when the name is known.
/// Public because a name generated from `generateName` after `prepare_for_create` needs it too.
pub fn force_name_label(obj: &mut Value) {
    let name = str_at(obj, &["metadata", "name"]).unwrap_or("").to_string();
    if name.is_empty() {
        return;
    }
    if let Some(labels) = child_obj(obj, &["metadata", "labels"]) {
        labels.insert(LABEL_METADATA_NAME.into(), Value::String(name));
    }
}

/// `validateFinalizerName`: a qualified name, and a standard one when it has no `/`.
fn validate_finalizer_name(name: &str, field: &str) -> Vec<FieldError> {
    let mut errs: Vec<FieldError> =
        validation::is_qualified_name(name).into_iter().map(|m| FieldError::invalid(field, &json!(name), m)).collect();
    if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
        errs.push(FieldError::invalid(
            field,
            &json!(name),
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
    errs
}

fn spec_finalizers(obj: &Value) -> Vec<String> {
    get_at(obj, &["spec", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|f| f.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

impl Strategy for NamespaceStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Namespace>(obj)
    }

    fn role(&self) -> crate::registry::Role {
        crate::registry::Role::Namespace
    }

    fn name_rule(&self) -> crate::registry::NameRule {
        validation::is_dns1123_label
    }

    fn merge_keys(&self) -> crate::registry::MergeKeys {
        &[(&["status", "conditions"], crate::registry::ListStrategy::MergeByKey("type"))]
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn status(&self) -> Option<&dyn StatusStrategy> {
        Some(self)
    }

    fn subresources(&self) -> Option<&dyn SubresourceStrategy> {
        Some(self)
    }

    fn delete(&self) -> Option<&dyn DeleteStrategy> {
        Some(self)
    }

    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for NamespaceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        force_name_label(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Active"}));
        }
        let mut finalizers = spec_finalizers(obj);
        if !finalizers.iter().any(|f| f == FINALIZER_KUBERNETES) {
            finalizers.push(FINALIZER_KUBERNETES.into());
            if let Some(spec) = child_obj(obj, &["spec"]) {
                spec.insert("finalizers".into(), json!(finalizers));
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        force_name_label(new);
        carry(new, old, &["spec", "finalizers"]);
        carry(new, old, &["status"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        // ValidateNamespace: the (unindexed) path is upstream's.
        spec_finalizers(obj).iter().flat_map(|f| validate_finalizer_name(f, "spec.finalizers")).collect()
    }
}

impl StatusStrategy for NamespaceStrategy {
    /// `/finalize` sets only `spec.finalizers`.
    fn reset_fields(&self, sub: &str) -> crate::registry::ResetFields {
        match sub {
            "finalize" => &[&["status"]],
            _ => crate::registry::status_reset_fields(sub),
        }
    }

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        force_name_label(new);
        match sub {
            "status" => {
                carry(new, old, &["spec"]);
                // SetDefaults_NamespaceStatus
                if str_at(new, &["status", "phase"]).unwrap_or("").is_empty() {
                    if let Some(status) = child_obj(new, &["status"]) {
                        status.insert("phase".into(), json!("Active"));
                    }
                }
            }
            "finalize" => carry(new, old, &["status"]),
            _ => {}
        }
    }

    fn validate_subresource(&self, sub: &str, new: &Value, _old: &Value) -> Vec<FieldError> {
        match sub {
            // ValidateNamespaceStatusUpdate (the capital P is upstream's).
            "status" => {
                let phase = str_at(new, &["status", "phase"]).unwrap_or("");
                let deleting = get_at(new, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null());
                if !deleting && phase != "Active" {
                    vec![FieldError::invalid(
                        "status.Phase",
                        &json!(phase),
                        "may only be 'Active' if `deletionTimestamp` is empty",
                    )]
                } else if deleting && phase != "Terminating" {
                    vec![FieldError::invalid(
                        "status.Phase",
                        &json!(phase),
                        "may only be 'Terminating' if `deletionTimestamp` is not empty",
                    )]
                } else {
                    Vec::new()
                }
            }
            // ValidateNamespaceFinalizeUpdate
            "finalize" => spec_finalizers(new)
                .iter()
                .enumerate()
                .flat_map(|(i, f)| validate_finalizer_name(f, &format!("spec.finalizers[{i}]")))
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl SubresourceStrategy for NamespaceStrategy {
    fn subresource_verbs(&self, sub: &str) -> &'static [&'static str] {
        // `finalize` only replaces the finalizers, with a PUT; `status` reads and writes.
        if sub == "finalize" {
            &["update"]
        } else {
            &["get", "patch", "update"]
        }
    }
}

impl DeleteStrategy for NamespaceStrategy {
    fn mark_deleting(&self, obj: &mut Value) {
        if !obj.get("status").is_some_and(Value::is_object) {
            obj["status"] = json!({});
        }
        obj["status"]["phase"] = json!("Terminating");
    }
}

impl FieldSelectors for NamespaceStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "status.phase" => Some(str_at(obj, &["status", "phase"]).unwrap_or("").to_string()),
            _ => None,
        }
    }
}

impl TableStrategy for NamespaceStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![col("Status", "The status of the namespace", 0), age_column()]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(str_at(obj, &["status", "phase"]).unwrap_or("")), creation_age(obj, now)]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::core::test_util::*;

    fn base_ns() -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team-a", "creationTimestamp": "2024-05-01T11:55:00Z"},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    }

    #[test]
    fn namespace_create_defaults() {
        let cases: &[(&str, Mutation, Value)] = &[
            (
                "no spec gets the kubernetes finalizer",
                |o| {
                    o.as_object_mut().unwrap().remove("spec");
                },
                json!(["kubernetes"]),
            ),
            (
                "other finalizers keep order and gain kubernetes",
                |o| set(o, &["spec", "finalizers"], json!(["example.com/x"])),
                json!(["example.com/x", "kubernetes"]),
            ),
            ("kubernetes present is kept once", |_| {}, json!(["kubernetes"])),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base_ns();
            mutate(&mut obj);
            set(&mut obj, &["status"], json!({"phase": "Terminating", "conditions": []}));
            set(&mut obj, &["metadata", "labels"], json!({LABEL_METADATA_NAME: "evil"}));
            NamespaceStrategy.prepare_for_create(&mut obj);
            assert_eq!(obj["spec"]["finalizers"], *want, "{name}");
            assert_eq!(obj["status"], json!({"phase": "Active"}), "{name}");
            assert_eq!(obj["metadata"]["labels"][LABEL_METADATA_NAME], "team-a", "{name}");
        }
    }

    #[test]
    fn namespace_update_keeps_status_finalizers_and_label() {
        let old = base_ns();
        let mut new = base_ns();
        set(&mut new, &["spec", "finalizers"], json!([]));
        set(&mut new, &["status", "phase"], json!("Terminating"));
        set(&mut new, &["metadata", "labels"], json!({"a": "b"}));
        NamespaceStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]), "update keeps finalizers");
        assert_eq!(new["status"]["phase"], "Active", "update keeps status");
        assert_eq!(
            new["metadata"]["labels"],
            json!({"a": "b", LABEL_METADATA_NAME: "team-a"}),
            "update forces the name label"
        );
    }

    #[test]
    fn namespace_subresources() {
        // status: spec from old, empty phase defaults to Active.
        let old = base_ns();
        let mut new = base_ns();
        set(&mut new, &["spec", "finalizers"], json!([]));
        set(&mut new, &["status"], json!({}));
        NamespaceStrategy.prepare_for_subresource("status", &mut new, &old);
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]), "status keeps spec");
        assert_eq!(new["status"]["phase"], "Active", "status phase defaults");
        // finalize: spec from the request, status from old.
        let mut new = base_ns();
        set(&mut new, &["spec", "finalizers"], json!([]));
        set(&mut new, &["status", "phase"], json!("Terminating"));
        NamespaceStrategy.prepare_for_subresource("finalize", &mut new, &old);
        assert_eq!(new["spec"]["finalizers"], json!([]), "finalize changes spec");
        assert_eq!(new["status"]["phase"], "Active", "finalize keeps status");
    }

    #[test]
    fn namespace_validation() {
        let cases: &[(&str, &str, Mutation, &[&str])] = &[
            ("valid", "", |_| {}, &[]),
            ("unqualified finalizer", "", |o| set(o, &["spec", "finalizers"], json!(["custom"])),
             &["spec.finalizers: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified"]),
            ("finalize indexes its paths", "finalize", |o| set(o, &["spec", "finalizers"], json!(["kubernetes", "custom"])),
             &["spec.finalizers[1]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified"]),
            ("status active without deletion", "status", |_| {}, &[]),
            ("status terminating without deletion", "status", |o| set(o, &["status", "phase"], json!("Terminating")),
             &["status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty"]),
            ("status active while deleting", "status", |o| set(o, &["metadata", "deletionTimestamp"], json!("2024-05-01T12:00:00Z")),
             &["status.Phase: Invalid value: \"Active\": may only be 'Terminating' if `deletionTimestamp` is not empty"]),
        ];
        for (name, sub, mutate, want) in cases {
            let mut obj = base_ns();
            mutate(&mut obj);
            let errs = if sub.is_empty() {
                NamespaceStrategy.validate(&obj)
            } else {
                NamespaceStrategy.validate_subresource(sub, &obj, &base_ns())
            };
            assert_eq!(rendered(&errs), *want, "{name}");
        }
    }

    #[test]
    fn namespace_fields_and_table() {
        let ns = base_ns();
        assert_eq!(NamespaceStrategy.field(&ns, "status.phase").as_deref(), Some("Active"), "status.phase selectable");
        assert_eq!(NamespaceStrategy.field(&json!({}), "status.phase").as_deref(), Some(""), "supported on probe");
        assert_eq!(NamespaceStrategy.field(&ns, "spec.finalizers"), None, "spec.finalizers not selectable");
        let names: Vec<&str> = NamespaceStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Status", "Age"], "namespace columns");
        assert_eq!(NamespaceStrategy.cells(&ns, now()), vec![json!("Active"), json!("5m")], "namespace cells");
    }
}
