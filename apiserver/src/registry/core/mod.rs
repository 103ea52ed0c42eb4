//! core/v1 kinds, one file per kind: [`namespace`], [`configmap`], [`secret`],
//! [`serviceaccount`] (its `token` subresource, TokenRequest, is served by
//! `api::serviceaccount_token`), [`event`], [`node`], [`pod`] (its validation in [`pod_validation`])
//! and [`service`]; [`data`] holds what ConfigMaps and Secrets share.
//!
//! Each strategy mirrors upstream's `pkg/registry/core/<kind>/strategy.go`, the v1 defaulting and
//! conversion that happen on decode (`pkg/apis/core/v1`), `pkg/apis/core/validation` and the
//! printer in `pkg/printers/internalversion/printers.go` (with `Wide: true`, as the apiserver
//! renders Tables). Iteration over maps is in key order, where upstream's is random.

pub mod configmap;
mod data;
pub mod event;
pub mod namespace;
pub mod node;
pub mod pod;
pub mod pod_validation;
pub mod secret;
pub mod service;
pub mod serviceaccount;

use std::sync::Arc;

use k8s_openapi::api::core::v1 as corev1;

use configmap::ConfigMapStrategy;
use event::EventStrategy;
use namespace::NamespaceStrategy;
use node::NodeStrategy;
use pod::PodStrategy;
use secret::SecretStrategy;
use service::ServiceStrategy;
use serviceaccount::ServiceAccountStrategy;

use super::ResourceDef;

/// All core/v1 resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "",
            version: "v1",
            resource: "namespaces",
            singular: "namespace",
            kind: "Namespace",
            namespaced: false,
            short_names: &["ns"],
            categories: &[],
            subresources: &["status", "finalize"],
            create_only: false,
            strategy: Arc::new(NamespaceStrategy),
            schema: |g| g.subschema_for::<corev1::Namespace>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "configmaps",
            singular: "configmap",
            kind: "ConfigMap",
            namespaced: true,
            short_names: &["cm"],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(ConfigMapStrategy),
            schema: |g| g.subschema_for::<corev1::ConfigMap>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "secrets",
            singular: "secret",
            kind: "Secret",
            namespaced: true,
            short_names: &[],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(SecretStrategy),
            schema: |g| g.subschema_for::<corev1::Secret>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "serviceaccounts",
            singular: "serviceaccount",
            kind: "ServiceAccount",
            namespaced: true,
            short_names: &["sa"],
            categories: &[],
            subresources: &["token"],
            create_only: false,
            strategy: Arc::new(ServiceAccountStrategy),
            schema: |g| g.subschema_for::<corev1::ServiceAccount>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "events",
            singular: "event",
            kind: "Event",
            namespaced: true,
            short_names: &["ev"],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(EventStrategy),
            schema: |g| g.subschema_for::<corev1::Event>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "nodes",
            singular: "node",
            kind: "Node",
            namespaced: false,
            short_names: &["no"],
            categories: &[],
            subresources: &["status"],
            create_only: false,
            strategy: Arc::new(NodeStrategy),
            schema: |g| g.subschema_for::<corev1::Node>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "pods",
            singular: "pod",
            kind: "Pod",
            namespaced: true,
            short_names: &["po"],
            categories: &["all"],
            subresources: &["status"],
            create_only: false,
            strategy: Arc::new(PodStrategy),
            schema: |g| g.subschema_for::<corev1::Pod>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "services",
            singular: "service",
            kind: "Service",
            namespaced: true,
            short_names: &["svc"],
            categories: &["all"],
            subresources: &["status"],
            create_only: false,
            strategy: Arc::new(ServiceStrategy),
            schema: |g| g.subschema_for::<corev1::Service>(),
        },
    ]
}

/// What the kinds' tests share.
#[cfg(test)]
mod test_util {
    #![allow(clippy::unwrap_used)]
    use serde_json::Value;

    use crate::error::FieldError;
    use crate::registry::shared::child_obj;

    pub(super) type Mutation = fn(&mut Value);
    pub(super) type Mutate = Box<dyn Fn(&mut Value)>;

    pub(super) fn set(obj: &mut Value, path: &[&str], v: Value) {
        let (last, parents) = path.split_last().unwrap();
        child_obj(obj, parents).unwrap().insert((*last).to_string(), v);
    }

    pub(super) fn now() -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc)
    }

    pub(super) fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::test_util::now;
    use super::*;
    use crate::registry::Strategy;
    use serde_json::json;

    #[test]
    fn no_panics_on_odd_json() {
        let odd = [
            json!(null),
            json!([]),
            json!("x"),
            json!({"metadata": 5, "spec": [], "status": "x", "data": 1, "secrets": {}}),
        ];
        for s in [
            &NamespaceStrategy as &dyn Strategy,
            &ConfigMapStrategy,
            &SecretStrategy,
            &ServiceAccountStrategy,
            &EventStrategy,
            &NodeStrategy,
            &PodStrategy,
            &ServiceStrategy,
        ] {
            for o in &odd {
                let mut a = o.clone();
                if let Some(w) = s.write() {
                    w.prepare_for_create(&mut a);
                    w.prepare_for_update(&mut a, o);
                }
                if let Some(st) = s.status() {
                    st.prepare_for_subresource("status", &mut a, o);
                    st.prepare_for_subresource("finalize", &mut a, o);
                }
                if let Some(w) = s.write() {
                    let _ = w.validate(o);
                    let _ = w.validate_update(o, o);
                }
                if let Some(st) = s.status() {
                    let _ = st.validate_subresource("status", o, o);
                }
                if let Some(t) = s.table() {
                    let _ = t.cells(o, now());
                }
                let _ = s.roundtrip(o);
            }
        }
    }
}
