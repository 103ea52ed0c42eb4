//! `serviceaccounts` (`pkg/registry/core/serviceaccount`): secret references keep only their
//! name; the `token` subresource is TokenRequest, create-only (served by
//! `api::serviceaccount_token`).

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use crate::registry::shared::{age_column, creation_age, get_at_mut};
use crate::registry::{typed_roundtrip, Column, Strategy, SubresourceStrategy, TableStrategy, WriteStrategy};

/// `serviceaccounts`: secret references keep only their name (`cleanSecretReferences`).
/// Strategic merge patch: `secrets` merges by `name`.
pub struct ServiceAccountStrategy;

fn clean_secret_references(obj: &mut Value) {
    let Some(Value::Array(secrets)) = get_at_mut(obj, &["secrets"]) else { return };
    for s in secrets.iter_mut() {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        *s = if name.is_empty() { json!({}) } else { json!({ "name": name }) };
    }
}

impl Strategy for ServiceAccountStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::ServiceAccount>(obj)
    }

    fn merge_keys(&self) -> crate::registry::MergeKeys {
        &[(&["secrets"], crate::registry::ListStrategy::MergeByKey("name"))]
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn subresources(&self) -> Option<&dyn SubresourceStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for ServiceAccountStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        clean_secret_references(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        clean_secret_references(new);
    }
}

impl SubresourceStrategy for ServiceAccountStrategy {
    fn create_only(&self, sub: &str) -> bool {
        sub == "token"
    }

    fn subresource_kind(&self, sub: &str) -> Option<crate::registry::Gvk> {
        (sub == "token").then_some(("authentication.k8s.io", "v1", "TokenRequest"))
    }

    fn subresource_schema(&self, sub: &str) -> Option<crate::registry::SchemaFn> {
        (sub == "token").then_some(|g| g.subschema_for::<k8s_openapi::api::authentication::v1::TokenRequest>())
    }
}

impl TableStrategy for ServiceAccountStrategy {
    /// Since 1.35 upstream prints no `Secrets` count (the field is rarely set since 1.24 and
    /// the count misled): Name and Age only.
    fn columns(&self) -> Vec<Column> {
        vec![age_column()]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![creation_age(obj, now)]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::core::test_util::*;

    #[test]
    fn serviceaccount_secret_refs_and_table() {
        let mut sa = json!({"metadata": {"name": "sa", "namespace": "default", "creationTimestamp": "2024-05-01T09:00:00Z"},
                            "secrets": [{"name": "tok", "namespace": "x", "uid": "u"}, {"kind": "Secret"}]});
        ServiceAccountStrategy.prepare_for_create(&mut sa);
        assert_eq!(sa["secrets"], json!([{"name": "tok"}, {}]), "create keeps names only");
        let mut upd = sa.clone();
        set(&mut upd, &["secrets"], json!([{"name": "b", "fieldPath": "x"}]));
        ServiceAccountStrategy.prepare_for_update(&mut upd, &sa);
        assert_eq!(upd["secrets"], json!([{"name": "b"}]), "update keeps names only");
        let names: Vec<&str> = ServiceAccountStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Age"], "serviceaccount columns");
        assert_eq!(ServiceAccountStrategy.cells(&sa, now()), vec![json!("3h")], "serviceaccount cells");
    }
}
