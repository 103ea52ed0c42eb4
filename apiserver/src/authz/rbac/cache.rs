//! The RBAC objects in memory, always current for the requests that follow a write.
//!
//! [`install`] wraps the store: every write under the rbac.authorization.k8s.io prefix bumps
//! a generation counter once it has returned. [`RbacCache::snapshot`] hands out the loaded
//! [`Snapshot`] while the generation it was loaded at is still current (an atomic load and a
//! read lock), and otherwise reloads every RBAC object in one list (one revision). So a
//! request that starts after a write has been acknowledged sees it, whichever path wrote it
//! (REST, garbage collection, bootstrap).
//!
//! The snapshot is also the rule resolver: the rules that apply to a user in a namespace
//! (cluster bindings, then that namespace's bindings), and the rules a roleRef points at.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use futures::stream::BoxStream;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::rules::{applies_to, describe_subject};
use crate::authn::UserInfo;
use crate::machinery::selectors::go_quote;
use crate::registry::rbac::GROUP;
use crate::storage::{self, Event, KeyValue, ListOptions, ListResult, Rev, Storage};

/// Storage prefix of every RBAC object.
pub fn rbac_prefix() -> String {
    format!("/registry/{GROUP}/")
}

/// A store that counts its writes under the RBAC prefix.
struct CountingStorage {
    inner: Arc<dyn Storage>,
    prefix: String,
    generation: Arc<AtomicU64>,
}

impl CountingStorage {
    fn touched(&self, key: &str) {
        if key.starts_with(&self.prefix) {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Storage for CountingStorage {
    async fn get(&self, key: &str) -> storage::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str, opts: ListOptions) -> storage::Result<ListResult> {
        self.inner.list(prefix, opts).await
    }
    async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> storage::Result<(Option<KeyValue>, Rev)> {
        self.inner.get_at(key, at_rev).await
    }
    async fn get_recent(&self, key: &str) -> storage::Result<Option<KeyValue>> {
        self.inner.get_recent(key).await
    }
    async fn count(&self, prefix: &str) -> storage::Result<u64> {
        self.inner.count(prefix).await
    }
    async fn counts(&self, prefixes: &[String]) -> Vec<storage::Result<u64>> {
        self.inner.counts(prefixes).await
    }
    async fn create(&self, key: &str, value: Vec<u8>) -> storage::Result<Rev> {
        let r = self.inner.create(key, value).await;
        self.touched(key);
        r
    }
    async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> storage::Result<Rev> {
        let r = self.inner.update(key, value, expected_rev).await;
        self.touched(key);
        r
    }
    async fn delete(&self, key: &str, expected_rev: Rev) -> storage::Result<Rev> {
        let r = self.inner.delete(key, expected_rev).await;
        self.touched(key);
        r
    }
    async fn watch(&self, prefix: &str, after_rev: Rev) -> storage::Result<BoxStream<'static, storage::Result<Event>>> {
        self.inner.watch(prefix, after_rev).await
    }
    async fn watch_key(
        &self,
        key: &str,
        after_rev: Rev,
    ) -> storage::Result<BoxStream<'static, storage::Result<Event>>> {
        self.inner.watch_key(key, after_rev).await
    }
    fn current_rev(&self) -> Rev {
        self.inner.current_rev()
    }
    fn compacted_rev(&self) -> Rev {
        self.inner.compacted_rev()
    }
    async fn compact(&self, rev: Rev) -> storage::Result<()> {
        self.inner.compact(rev).await
    }
}

/// Wrap `store` so that RBAC writes invalidate the returned cache. Every writer must use the
/// returned store.
pub fn install(store: Arc<dyn Storage>) -> (Arc<dyn Storage>, Arc<RbacCache>) {
    let generation = Arc::new(AtomicU64::new(1));
    let wrapped: Arc<dyn Storage> =
        Arc::new(CountingStorage { inner: store, prefix: rbac_prefix(), generation: generation.clone() });
    let cache = Arc::new(RbacCache {
        store: wrapped.clone(),
        generation,
        current: RwLock::new(None),
        reload: tokio::sync::Mutex::new(()),
    });
    (wrapped, cache)
}

/// Keep the cache current with RBAC writes made by other apiservers on the same store (etcd):
/// every change a watch of the RBAC prefix delivers makes the loaded snapshot stale. Writes
/// through this process already do that as they return; this covers the rest, a moment after
/// they happen. A broken watch also makes the snapshot stale, and is re-opened.
/// The loop holds the cache weakly and ends once it is dropped.
pub fn follower(cache: &Arc<RbacCache>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let weak = Arc::downgrade(cache);
    async move {
        use futures::StreamExt as _;
        loop {
            let Some(cache) = weak.upgrade() else { return };
            let (store, generation) = (cache.store.clone(), cache.generation.clone());
            drop(cache);
            let from = store.current_rev();
            match store.watch(&rbac_prefix(), from).await {
                Ok(mut events) => {
                    // Changes before the watch started may have been missed.
                    generation.fetch_add(1, Ordering::SeqCst);
                    while let Some(ev) = events.next().await {
                        generation.fetch_add(1, Ordering::SeqCst);
                        if ev.is_err() || weak.strong_count() == 0 {
                            break;
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "RBAC cache: watch not open yet"),
            }
            if weak.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}

/// The loaded RBAC objects, reloaded when a write made them stale.
pub struct RbacCache {
    store: Arc<dyn Storage>,
    generation: Arc<AtomicU64>,
    current: RwLock<Option<(u64, Arc<Snapshot>)>>,
    reload: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for RbacCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbacCache").field("generation", &self.generation.load(Ordering::SeqCst)).finish()
    }
}

/// Why the RBAC objects could not be read (the storage error's text, as the authorizer
/// reports it).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Storage(#[from] storage::Error),
}

impl RbacCache {
    fn loaded_at(&self, generation: u64) -> Option<Arc<Snapshot>> {
        let guard = self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.as_ref().filter(|(g, _)| *g == generation).map(|(_, s)| s.clone())
    }

    /// The current objects (reloaded if any RBAC write happened since the last load).
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>, LoadError> {
        if let Some(s) = self.loaded_at(self.generation.load(Ordering::SeqCst)) {
            return Ok(s);
        }
        let _one_loader = self.reload.lock().await;
        // Read the generation before the objects: a write finishing during the load bumps
        // it again and the next caller reloads.
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some(s) = self.loaded_at(generation) {
            return Ok(s);
        }
        let snapshot = Arc::new(Snapshot::load(self.store.as_ref()).await?);
        let mut guard = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = Some((generation, snapshot.clone()));
        Ok(snapshot)
    }
}

/// Why a roleRef could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefError {
    /// `resource` is `roles` or `clusterroles`.
    NotFound {
        resource: &'static str,
        name: String,
    },
    UnsupportedKind(String),
}

impl RefError {
    /// As the authorizer's listers word it: `clusterrole.rbac.authorization.k8s.io "x" not found`.
    pub fn lister_message(&self) -> String {
        match self {
            RefError::NotFound { resource, name } => {
                format!("{}.{GROUP} {} not found", resource.trim_end_matches('s'), go_quote(name))
            }
            RefError::UnsupportedKind(kind) => format!("unsupported role reference kind: {}", go_quote(kind)),
        }
    }
}

/// One source of rules for a user, as authorization reasons name it.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    Cluster(&'a ClusterRoleBinding, usize),
    Namespaced(&'a RoleBinding, usize),
}

impl Source<'_> {
    /// `ClusterRoleBinding "b" of ClusterRole "r" to User "u"` /
    /// `RoleBinding "b/ns" of Role "r" to Group "g"`.
    pub fn describe(&self) -> String {
        match *self {
            Source::Cluster(b, i) => {
                let name = b.metadata.name.as_deref().unwrap_or("");
                let subject = b.subjects.as_ref().and_then(|s| s.get(i)).map(|s| describe_subject(s, ""));
                format!(
                    "ClusterRoleBinding {} of {} {} to {}",
                    go_quote(name),
                    b.role_ref.kind,
                    go_quote(&b.role_ref.name),
                    subject.unwrap_or_default()
                )
            }
            Source::Namespaced(b, i) => {
                let ns = b.metadata.namespace.as_deref().unwrap_or("");
                let name = format!("{}/{ns}", b.metadata.name.as_deref().unwrap_or(""));
                let subject = b.subjects.as_ref().and_then(|s| s.get(i)).map(|s| describe_subject(s, ns));
                format!(
                    "RoleBinding {} of {} {} to {}",
                    go_quote(&name),
                    b.role_ref.kind,
                    go_quote(&b.role_ref.name),
                    subject.unwrap_or_default()
                )
            }
        }
    }
}

/// The metadata a snapshot keeps.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Names {
    name: Option<String>,
    namespace: Option<String>,
}

impl Names {
    /// (namespace, name), each "" when absent.
    fn key(&self) -> (String, String) {
        (self.namespace.clone().unwrap_or_default(), self.name.clone().unwrap_or_default())
    }
}

impl From<Names> for ObjectMeta {
    fn from(n: Names) -> ObjectMeta {
        ObjectMeta { name: n.name, namespace: n.namespace, ..Default::default() }
    }
}

/// A stored Role or ClusterRole, as resolution reads it (an aggregation rule is the
/// aggregation controller's business; its result is in `rules`).
#[derive(serde::Deserialize)]
struct StoredRole {
    #[serde(default)]
    metadata: Names,
    rules: Option<Vec<PolicyRule>>,
}

/// A stored RoleBinding or ClusterRoleBinding, as resolution reads it.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredBinding {
    #[serde(default)]
    metadata: Names,
    role_ref: RoleRef,
    subjects: Option<Vec<Subject>>,
}

/// All RBAC objects at one revision.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub cluster_roles: HashMap<String, ClusterRole>,
    /// namespace → name → role.
    pub roles: HashMap<String, HashMap<String, Role>>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// namespace → bindings, in key order.
    pub role_bindings: HashMap<String, Vec<RoleBinding>>,
}

impl Snapshot {
    async fn load(store: &dyn Storage) -> Result<Snapshot, LoadError> {
        let prefix = rbac_prefix();
        let page = store.list(&prefix, ListOptions::default()).await?;
        let mut s = Snapshot::default();
        for kv in &page.items {
            let rest = kv.key.strip_prefix(&prefix).unwrap_or("");
            let resource = rest.split('/').next().unwrap_or("");
            if let Err(e) = s.add(resource, &kv.value) {
                tracing::warn!(key = %kv.key, error = %e, "skipping an undecodable RBAC object");
            }
        }
        Ok(s)
    }

    /// Add one stored object of `resource` (JSON), keeping only what resolution reads: rules,
    /// roleRef, subjects, name and namespace. The rest of the metadata (managedFields, labels,
    /// annotations) is skipped while decoding, so it takes no memory for as long as the
    /// snapshot lives.
    fn add(&mut self, resource: &str, bytes: &[u8]) -> Result<(), serde_json::Error> {
        match resource {
            "clusterroles" => {
                let r: StoredRole = serde_json::from_slice(bytes)?;
                let name = r.metadata.name.clone().unwrap_or_default();
                let role = ClusterRole { metadata: r.metadata.into(), rules: r.rules, aggregation_rule: None };
                self.cluster_roles.insert(name, role);
            }
            "roles" => {
                let r: StoredRole = serde_json::from_slice(bytes)?;
                let (ns, name) = r.metadata.key();
                self.roles.entry(ns).or_default().insert(name, Role { metadata: r.metadata.into(), rules: r.rules });
            }
            "clusterrolebindings" => {
                let b: StoredBinding = serde_json::from_slice(bytes)?;
                let binding =
                    ClusterRoleBinding { metadata: b.metadata.into(), role_ref: b.role_ref, subjects: b.subjects };
                self.cluster_role_bindings.push(binding);
            }
            "rolebindings" => {
                let b: StoredBinding = serde_json::from_slice(bytes)?;
                let (ns, _) = b.metadata.key();
                let binding = RoleBinding { metadata: b.metadata.into(), role_ref: b.role_ref, subjects: b.subjects };
                self.role_bindings.entry(ns).or_default().push(binding);
            }
            _ => {}
        }
        Ok(())
    }

    /// Build a snapshot from objects (tests, tools).
    pub fn from_objects(
        cluster_roles: Vec<ClusterRole>,
        roles: Vec<Role>,
        cluster_role_bindings: Vec<ClusterRoleBinding>,
        role_bindings: Vec<RoleBinding>,
    ) -> Snapshot {
        let mut s = Snapshot { cluster_role_bindings, ..Default::default() };
        for r in cluster_roles {
            s.cluster_roles.insert(r.metadata.name.clone().unwrap_or_default(), r);
        }
        for r in roles {
            let ns = r.metadata.namespace.clone().unwrap_or_default();
            s.roles.entry(ns).or_default().insert(r.metadata.name.clone().unwrap_or_default(), r);
        }
        for b in role_bindings {
            s.role_bindings.entry(b.metadata.namespace.clone().unwrap_or_default()).or_default().push(b);
        }
        s
    }

    /// The rules `role_ref` grants in a binding of `binding_namespace` ("" for a cluster binding).
    pub fn role_ref_rules(&self, role_ref: &RoleRef, binding_namespace: &str) -> Result<&[PolicyRule], RefError> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(binding_namespace)
                .and_then(|m| m.get(&role_ref.name))
                .map(|r| r.rules.as_deref().unwrap_or_default())
                .ok_or_else(|| RefError::NotFound { resource: "roles", name: role_ref.name.clone() }),
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(|r| r.rules.as_deref().unwrap_or_default())
                .ok_or_else(|| RefError::NotFound { resource: "clusterroles", name: role_ref.name.clone() }),
            other => Err(RefError::UnsupportedKind(other.to_string())),
        }
    }

    /// Walk the rules that apply to `user` in `namespace`: cluster bindings first, then (for a
    /// non-empty namespace) that namespace's bindings. The visitor gets each rule with its
    /// source, or a resolution error; it stops the walk with `Break`.
    pub fn visit_rules_for<'s>(
        &'s self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(Result<(Source<'s>, &'s PolicyRule), RefError>) -> ControlFlow<()>,
    ) {
        for b in &self.cluster_role_bindings {
            let Some(i) = applies_to(user, b.subjects.as_deref().unwrap_or_default(), "") else { continue };
            match self.role_ref_rules(&b.role_ref, "") {
                Ok(rules) => {
                    for r in rules {
                        if visit(Ok((Source::Cluster(b, i), r))).is_break() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if visit(Err(e)).is_break() {
                        return;
                    }
                }
            }
        }
        if namespace.is_empty() {
            return;
        }
        for b in self.role_bindings.get(namespace).into_iter().flatten() {
            let Some(i) = applies_to(user, b.subjects.as_deref().unwrap_or_default(), namespace) else { continue };
            match self.role_ref_rules(&b.role_ref, namespace) {
                Ok(rules) => {
                    for r in rules {
                        if visit(Ok((Source::Namespaced(b, i), r))).is_break() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if visit(Err(e)).is_break() {
                        return;
                    }
                }
            }
        }
    }

    /// Every rule that applies to `user` in `namespace`, and the resolution errors met.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<RefError>) {
        let (mut rules, mut errors) = (Vec::new(), Vec::new());
        self.visit_rules_for(user, namespace, |item| {
            match item {
                Ok((_, r)) => rules.push(r.clone()),
                Err(e) => errors.push(e),
            }
            ControlFlow::Continue(())
        });
        (rules, errors)
    }
}

/// Upstream's error aggregate: one message as is; several (deduplicated) as `[a, b]`.
pub fn aggregate(messages: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for m in messages {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    async fn put(store: &Arc<dyn Storage>, resource: &str, obj: serde_json::Value) {
        let ns = obj["metadata"]["namespace"].as_str().map(|s| format!("{s}/")).unwrap_or_default();
        let key = format!("{}{resource}/{ns}{}", rbac_prefix(), obj["metadata"]["name"].as_str().unwrap());
        match store.get(&key).await.unwrap() {
            Some(kv) => store.update(&key, serde_json::to_vec(&obj).unwrap(), kv.mod_rev).await.unwrap(),
            None => store.create(&key, serde_json::to_vec(&obj).unwrap()).await.unwrap(),
        };
    }

    fn memory() -> (Arc<dyn Storage>, Arc<RbacCache>) {
        install(Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap()))
    }

    #[tokio::test]
    async fn snapshot_follows_writes_and_stays_put_otherwise() {
        let (store, cache) = memory();
        let first = cache.snapshot().await.unwrap();
        assert!(first.cluster_roles.is_empty());
        let again = cache.snapshot().await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "no write: same snapshot");
        store.create("/registry/core/configmaps/default/x", b"{}".to_vec()).await.unwrap();
        assert!(Arc::ptr_eq(&first, &cache.snapshot().await.unwrap()), "non-RBAC writes do not reload");
        put(
            &store,
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        )
        .await;
        let s = cache.snapshot().await.unwrap();
        assert_eq!(s.cluster_roles["r"].rules.as_ref().unwrap().len(), 1, "a write is seen by the next read");
        put(
            &store,
            "rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "b", "namespace": "ns1"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "User", "apiGroup": GROUP, "name": "alice"}]}),
        )
        .await;
        let s = cache.snapshot().await.unwrap();
        assert_eq!(s.role_bindings["ns1"].len(), 1);
        let key = format!("{}clusterroles/r", rbac_prefix());
        let rev = store.get(&key).await.unwrap().unwrap().mod_rev;
        store.delete(&key, rev).await.unwrap();
        assert!(cache.snapshot().await.unwrap().cluster_roles.is_empty(), "deletes are seen");
    }

    #[tokio::test]
    async fn undecodable_objects_are_skipped() {
        let (store, cache) = memory();
        store.create(&format!("{}clusterroles/bad", rbac_prefix()), b"{\"rules\": 5}".to_vec()).await.unwrap();
        put(&store, "clusterroles", json!({"metadata": {"name": "good"}})).await;
        let s = cache.snapshot().await.unwrap();
        assert_eq!(s.cluster_roles.keys().collect::<Vec<_>>(), ["good"]);
    }

    /// A snapshot keeps rules, roleRef, subjects, name and namespace of each object; the rest
    /// of its metadata (managedFields, labels, annotations, uid) and an aggregation rule are
    /// not kept.
    #[tokio::test]
    async fn snapshot_keeps_what_resolution_reads_and_no_more() {
        let (store, cache) = memory();
        let meta = |name: &str, ns: Option<&str>| {
            let mut m = json!({"name": name, "uid": "u-1", "resourceVersion": "7",
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "rbac.authorization.k8s.io/v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:rules": {}}}]});
            if let Some(ns) = ns {
                m["namespace"] = json!(ns);
            }
            m
        };
        let rules = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
        let subjects = json!([{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]);
        put(
            &store,
            "clusterroles",
            json!({"metadata": meta("cr", None), "rules": rules,
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}}),
        )
        .await;
        put(&store, "roles", json!({"metadata": meta("r", Some("ns1")), "rules": rules})).await;
        put(
            &store,
            "clusterrolebindings",
            json!({"metadata": meta("crb", None), "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"}}),
        )
        .await;
        put(
            &store,
            "rolebindings",
            json!({"metadata": meta("rb", Some("ns1")), "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}}),
        )
        .await;
        let s = cache.snapshot().await.unwrap();
        let only = |name: &str, ns: Option<&str>| ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            ..Default::default()
        };
        let want_rules: Vec<PolicyRule> = serde_json::from_value(rules).unwrap();
        let want_subjects: Vec<Subject> = serde_json::from_value(subjects).unwrap();
        let cr = &s.cluster_roles["cr"];
        assert_eq!(
            (&cr.metadata, cr.rules.as_ref(), &cr.aggregation_rule),
            (&only("cr", None), Some(&want_rules), &None)
        );
        let r = &s.roles["ns1"]["r"];
        assert_eq!((&r.metadata, r.rules.as_ref()), (&only("r", Some("ns1")), Some(&want_rules)));
        let crb = &s.cluster_role_bindings[0];
        assert_eq!(
            (&crb.metadata, crb.subjects.as_ref(), crb.role_ref.name.as_str()),
            (&only("crb", None), Some(&want_subjects), "cr")
        );
        let rb = &s.role_bindings["ns1"][0];
        assert_eq!(
            (&rb.metadata, rb.subjects.as_ref(), rb.role_ref.kind.as_str()),
            (&only("rb", Some("ns1")), Some(&want_subjects), "Role")
        );
        let (got, errors) = s.rules_for(&user("u", &[]), "ns1");
        assert_eq!((got.len(), errors), (2, vec![]), "the cluster binding's rule, then the namespace's");
    }

    #[test]
    fn rules_for_walks_cluster_then_namespace_bindings() {
        let rule = |r: &str| PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![r.to_string()]),
            verbs: vec!["get".into()],
            ..Default::default()
        };
        let cr = |name: &str, r: &str| ClusterRole {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            rules: Some(vec![rule(r)]),
            ..Default::default()
        };
        let role_ref =
            |kind: &str, name: &str| RoleRef { api_group: Some(GROUP.into()), kind: kind.into(), name: name.into() };
        let subj = |kind: &str, name: &str| k8s_openapi::api::rbac::v1::Subject {
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        };
        let meta = |name: &str, ns: Option<&str>| k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(String::from),
            ..Default::default()
        };
        let s = Snapshot::from_objects(
            vec![cr("pods", "pods"), cr("secrets", "secrets")],
            vec![Role { metadata: meta("cm", Some("a")), rules: Some(vec![rule("configmaps")]) }],
            vec![
                ClusterRoleBinding {
                    metadata: meta("c1", None),
                    role_ref: role_ref("ClusterRole", "pods"),
                    subjects: Some(vec![subj("Group", "devs")]),
                },
                ClusterRoleBinding {
                    metadata: meta("c2", None),
                    role_ref: role_ref("ClusterRole", "gone"),
                    subjects: Some(vec![subj("User", "alice")]),
                },
            ],
            vec![
                RoleBinding {
                    metadata: meta("r1", Some("a")),
                    role_ref: role_ref("Role", "cm"),
                    subjects: Some(vec![subj("User", "alice")]),
                },
                RoleBinding {
                    metadata: meta("r2", Some("a")),
                    role_ref: role_ref("ClusterRole", "secrets"),
                    subjects: Some(vec![subj("User", "bob"), subj("User", "alice")]),
                },
                RoleBinding {
                    metadata: meta("r3", Some("b")),
                    role_ref: role_ref("Role", "missing"),
                    subjects: Some(vec![subj("User", "alice")]),
                },
            ],
        );
        let alice = user("alice", &["devs"]);
        let names = |rules: &[PolicyRule]| -> Vec<String> {
            rules.iter().map(|r| r.resources.as_ref().unwrap()[0].clone()).collect()
        };
        let errs = |e: &[RefError]| -> Vec<String> { e.iter().map(RefError::lister_message).collect() };
        let (rules, e) = s.rules_for(&alice, "");
        assert_eq!(names(&rules), ["pods"]);
        assert_eq!(errs(&e), ["clusterrole.rbac.authorization.k8s.io \"gone\" not found"]);
        let (rules, _) = s.rules_for(&alice, "a");
        assert_eq!(names(&rules), ["pods", "configmaps", "secrets"]);
        let (rules, e) = s.rules_for(&alice, "b");
        assert_eq!(names(&rules), ["pods"]);
        assert_eq!(errs(&e).len(), 2);
        assert_eq!(aggregate(&errs(&e)), "[clusterrole.rbac.authorization.k8s.io \"gone\" not found, role.rbac.authorization.k8s.io \"missing\" not found]");
        let (rules, e) = s.rules_for(&user("carol", &[]), "a");
        assert!(rules.is_empty() && e.is_empty());
        let mut sources = Vec::new();
        s.visit_rules_for(&alice, "a", |item| {
            if let Ok((src, _)) = item {
                sources.push(src.describe());
            }
            ControlFlow::Continue(())
        });
        assert_eq!(
            sources,
            [
                "ClusterRoleBinding \"c1\" of ClusterRole \"pods\" to Group \"devs\"",
                "RoleBinding \"r1/a\" of Role \"cm\" to User \"alice\"",
                "RoleBinding \"r2/a\" of ClusterRole \"secrets\" to User \"alice\"",
            ]
        );
        assert_eq!(aggregate(&["x".into(), "x".into()]), "x");
        assert_eq!(aggregate(&[]), "");
    }
}
