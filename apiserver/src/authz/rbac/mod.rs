//! Role-based access control: the default policy, rule matching, the authorizer and its
//! memo of decisions, escalation prevention and reconciliation of the defaults.

pub mod authorizer;
pub mod cache;
pub mod decisions;
pub mod defaults;
pub mod escalation;
pub mod node;
pub mod reconcile;
pub mod rules;

/// Test helpers: a store holding the default policy.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub mod testutil {
    use std::sync::Arc;

    use serde::Serialize;

    use super::cache::{install, rbac_prefix, RbacCache};
    use super::defaults::{default_policy, PolicyOptions};
    use crate::storage::Storage;

    /// Store an RBAC object (any serializable form) under its key.
    pub async fn put<T: Serialize>(store: &Arc<dyn Storage>, resource: &str, obj: &T) {
        let v = serde_json::to_value(obj).unwrap();
        let ns = v["metadata"]["namespace"].as_str().map(|s| format!("{s}/")).unwrap_or_default();
        let key = format!("{}{resource}/{ns}{}", rbac_prefix(), v["metadata"]["name"].as_str().unwrap());
        store.create(&key, serde_json::to_vec(&v).unwrap()).await.unwrap();
    }

    /// An in-memory store with the default policy, and its RBAC cache.
    pub async fn default_policy_store() -> (Arc<dyn Storage>, Arc<RbacCache>) {
        let (store, cache) = install(Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap()));
        let p = default_policy(&PolicyOptions { tls_bootstrap_bindings: true });
        for r in &p.cluster_roles {
            put(&store, "clusterroles", r).await;
        }
        for b in &p.cluster_role_bindings {
            put(&store, "clusterrolebindings", b).await;
        }
        for r in &p.roles {
            put(&store, "roles", r).await;
        }
        for b in &p.role_bindings {
            put(&store, "rolebindings", b).await;
        }
        (store, cache)
    }
}
