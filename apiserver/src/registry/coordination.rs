//! coordination.k8s.io/v1 `leases`, after upstream's `pkg/registry/coordination/lease/strategy.go`
//! and `pkg/apis/coordination/validation`.
//!
//! `spec.strategy` and `spec.preferredHolder` belong to the CoordinatedLeaderElection feature,
//! off by default (beta since 1.33, still off in kube-apiserver 1.35): they are dropped on
//! create, and on update unless the stored lease already uses them.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1 as coordv1;
use serde_json::{json, Value};

use super::shared::{age_column, col, creation_age, get_at, str_at};
use super::{typed_roundtrip, Column, ResourceDef, Strategy, TableStrategy, WriteStrategy};
use crate::error::FieldError;
use crate::validation;

/// All coordination.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![ResourceDef {
        group: "coordination.k8s.io",
        version: "v1",
        resource: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
        create_only: false,
        strategy: Arc::new(LeaseStrategy),
        schema: |g| g.subschema_for::<coordv1::Lease>(),
    }]
}

/// Whether the CoordinatedLeaderElection feature gate is on (1.35 default: off).
const COORDINATED_LEADER_ELECTION: bool = false;
/// The Kubernetes-defined lease strategies.
const VALID_LEASE_STRATEGIES: &[&str] = &["OldestEmulationVersion"];

/// `leases`: spec validation only; no status, no selectable fields beyond metadata.
pub struct LeaseStrategy;

fn drop_spec_field(obj: &mut Value, key: &str) {
    if let Some(Value::Object(spec)) = obj.as_object_mut().and_then(|m| m.get_mut("spec")) {
        spec.remove(key);
    }
}

fn has_spec_field(obj: &Value, key: &str) -> bool {
    get_at(obj, &["spec", key]).is_some_and(|v| !v.is_null())
}

/// `ValidateCoordinatedLeaseStrategy`; `field` is `spec.strategy`, and upstream reports at
/// `<field>.strategy`.
fn validate_lease_strategy(strategy: &str, field: &str) -> Vec<FieldError> {
    let path = format!("{field}.strategy");
    if strategy.split('/').count() == 1 {
        if !VALID_LEASE_STRATEGIES.contains(&strategy) {
            return vec![FieldError::not_supported(path, &json!(strategy), VALID_LEASE_STRATEGIES)];
        }
        return Vec::new();
    }
    validation::is_qualified_name(strategy)
        .into_iter()
        .map(|m| FieldError::invalid(&path, &json!(strategy), m))
        .collect()
}

impl Strategy for LeaseStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<coordv1::Lease>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for LeaseStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if !COORDINATED_LEADER_ELECTION {
            drop_spec_field(obj, "strategy");
            drop_spec_field(obj, "preferredHolder");
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if !COORDINATED_LEADER_ELECTION {
            for key in ["strategy", "preferredHolder"] {
                if !has_spec_field(old, key) {
                    drop_spec_field(new, key);
                }
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let int = |key: &str| get_at(obj, &["spec", key]).and_then(Value::as_i64);
        if let Some(d) = int("leaseDurationSeconds").filter(|d| *d <= 0) {
            errs.push(FieldError::invalid("spec.leaseDurationSeconds", &json!(d), "must be greater than 0"));
        }
        if let Some(t) = int("leaseTransitions").filter(|t| *t < 0) {
            errs.push(FieldError::invalid("spec.leaseTransitions", &json!(t), "must be greater than or equal to 0"));
        }
        let strategy = str_at(obj, &["spec", "strategy"]);
        if let Some(s) = strategy {
            errs.extend(validate_lease_strategy(s, "spec.strategy"));
        }
        let preferred = str_at(obj, &["spec", "preferredHolder"]).unwrap_or("");
        if !preferred.is_empty() && strategy.unwrap_or("").is_empty() {
            errs.push(FieldError::forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"));
        }
        errs
    }
}

impl TableStrategy for LeaseStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Holder",
                "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(str_at(obj, &["spec", "holderIdentity"]).unwrap_or("")), creation_age(obj, now)]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Mutation = fn(&mut Value);

    fn base() -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "kustos-leader", "namespace": "kube-system", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "leaseTransitions": 2,
                        "renewTime": "2024-05-01T11:59:59.000000Z"}})
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    #[test]
    fn lease_validation() {
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("zero duration", |o| o["spec"]["leaseDurationSeconds"] = json!(0),
             &["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]),
            ("negative transitions", |o| o["spec"]["leaseTransitions"] = json!(-1),
             &["spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"]),
            ("unknown strategy", |o| o["spec"]["strategy"] = json!("Newest"),
             &["spec.strategy.strategy: Unsupported value: \"Newest\": supported values: \"OldestEmulationVersion\""]),
            ("custom strategy", |o| o["spec"]["strategy"] = json!("example.com/mine"), &[]),
            ("preferred holder without strategy", |o| o["spec"]["preferredHolder"] = json!("pod-b"),
             &["spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"]),
            ("no spec", |o| { o.as_object_mut().unwrap().remove("spec"); }, &[]),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base();
            mutate(&mut obj);
            assert_eq!(rendered(&LeaseStrategy.validate(&obj)), *want, "{name}");
        }
    }

    #[test]
    fn gated_fields_are_dropped() {
        let mut obj = base();
        obj["spec"]["strategy"] = json!("OldestEmulationVersion");
        obj["spec"]["preferredHolder"] = json!("pod-b");
        LeaseStrategy.prepare_for_create(&mut obj);
        assert!(obj["spec"].get("strategy").is_none(), "create drops strategy");
        assert!(obj["spec"].get("preferredHolder").is_none(), "create drops preferredHolder");

        let mut old = base();
        old["spec"]["strategy"] = json!("OldestEmulationVersion");
        let mut new = base();
        new["spec"]["strategy"] = json!("OldestEmulationVersion");
        new["spec"]["preferredHolder"] = json!("pod-b");
        LeaseStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["spec"]["strategy"], "OldestEmulationVersion", "update keeps a field in use");
        assert!(new["spec"].get("preferredHolder").is_none(), "update drops a field not in use");
    }

    #[test]
    fn lease_table() {
        let names: Vec<&str> = LeaseStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Holder", "Age"], "lease columns");
        let now = chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
        assert_eq!(LeaseStrategy.cells(&base(), now), vec![json!("pod-a"), json!("60m")], "lease cells");
        assert_eq!(LeaseStrategy.cells(&json!({}), now), vec![json!(""), json!("<unknown>")], "empty lease cells");
        let field = LeaseStrategy.field_selectors().and_then(|f| f.field(&base(), "spec.holderIdentity"));
        assert_eq!(field, None, "no spec fields selectable");
    }
}
