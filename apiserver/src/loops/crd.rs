//! Serving CustomResourceDefinitions: the registry of served kinds changes at runtime.
//!
//! The built-in kinds stay in `AppState::registry` (looked up first, unchanged cost per
//! request). Everything that depends on CRDs — the full registry (built-ins plus the
//! resources of established CRDs) and the OpenAPI documents — is one immutable [`Served`]
//! snapshot behind an `RwLock<Arc<_>>`: a request takes the `Arc` (one read lock, one
//! reference count) and keeps a consistent view; a CRD change builds a new snapshot and
//! swaps it in.
//!
//! [`spawn`] runs the controller that upstream splits into the naming, establishing and
//! finalizing controllers: it lists the CRDs, writes the status each should have
//! (`registry::apiextensions::decide_status`), deletes the custom resources of deleted CRDs
//! and releases their `customresourcecleanup` finalizer, then rebuilds the snapshot. It runs
//! once before the server listens (CRDs survive restarts) and again after every change
//! under the CRD prefix.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::meta;
use crate::openapi::OpenApi;
use crate::registry::apiextensions::{self, TakenNames, CLEANUP_FINALIZER};
use crate::registry::Registry;
use crate::storage::{ListOptions, Rev};
use crate::AppState;

/// Storage prefix of the CRD objects.
pub const PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

/// One consistent view of everything served.
pub struct Served {
    /// Built-in kinds and the served versions of established CRDs.
    pub registry: Registry,
    pub openapi: OpenApi,
    /// What the snapshot was built from (served CRDs' specs and accepted names).
    fingerprint: String,
}

/// The current snapshot, swapped on CRD changes.
pub struct Dynamic {
    current: RwLock<Arc<Served>>,
}

impl Dynamic {
    /// A snapshot of the built-in kinds only.
    pub fn new(builtin: &Registry) -> Self {
        let served = Served { registry: builtin.clone(), openapi: OpenApi::new(builtin), fingerprint: String::new() };
        Dynamic { current: RwLock::new(Arc::new(served)) }
    }

    /// The current snapshot.
    pub fn current(&self) -> Arc<Served> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn swap(&self, served: Served) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(served);
    }
}

/// Outcome of one pass.
struct Pass {
    /// The revision the CRDs were listed at (watch from here).
    rev: Rev,
    /// Some work could not finish (a write conflicted, instances remain): run again soon.
    again: bool,
}

fn sort_key(crd: &Value) -> (String, String) {
    (meta::meta_str(crd, "creationTimestamp").unwrap_or("").to_string(), meta::name(crd).to_string())
}

/// One pass: statuses, cleanup of deleted CRDs, snapshot.
async fn sync(state: &Arc<AppState>) -> anyhow::Result<Pass> {
    let store = &state.storage;
    let listed = store.list(PREFIX, ListOptions::default()).await?;
    let mut crds: Vec<(String, Rev, Value)> = Vec::new();
    for kv in &listed.items {
        match meta::from_stored(kv) {
            Ok(v) => crds.push((kv.key.clone(), kv.mod_rev, v)),
            Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping an unreadable CustomResourceDefinition"),
        }
    }
    crds.sort_by_key(|(_, _, v)| sort_key(v));
    let now = meta::now_rfc3339();
    let mut again = false;
    // Terminating CRDs keep their names (nobody else may take them until they are gone)
    // but are not served.
    let mut deleting = vec![false; crds.len()];
    // CRDs whose status must be written (after the snapshot serves them: a client that sees
    // Established finds the endpoints).
    let mut changed = Vec::new();
    for i in 0..crds.len() {
        if meta::is_deleting(&crds[i].2) {
            deleting[i] = true;
            continue;
        }
        let group = crds[i].2["spec"]["group"].as_str().unwrap_or("").to_string();
        let mut taken = TakenNames::builtin(&state.registry, &group);
        for (j, (_, _, other)) in crds.iter().enumerate() {
            if j != i && other["spec"]["group"] == group.as_str() {
                taken.add_accepted(&other["status"]["acceptedNames"]);
            }
        }
        let status = apiextensions::decide_status(&crds[i].2, &taken, &now);
        if crds[i].2.get("status") != Some(&status) {
            crds[i].2["status"] = status;
            changed.push(i);
        }
    }
    let served: Vec<&Value> =
        crds.iter().zip(&deleting).filter(|(c, g)| !**g && apiextensions::is_served(&c.2)).map(|(c, _)| &c.2).collect();
    let fingerprint = fingerprint(&served);
    if fingerprint != state.crds.current().fingerprint {
        let mut registry = state.registry.clone();
        for crd in served {
            match apiextensions::served_resources(crd) {
                Ok(defs) => registry.resources.extend(defs),
                Err(e) => tracing::warn!(crd = %meta::name(crd), error = %e, "not serving a CustomResourceDefinition"),
            }
        }
        let openapi = OpenApi::new(&registry);
        state.crds.swap(Served { registry, openapi, fingerprint });
    }
    for i in changed {
        let (key, rev, crd) = &mut crds[i];
        let mut updated = crd.clone();
        meta::meta_mut(&mut updated).remove("resourceVersion");
        match store.update(key, meta::to_stored(&updated)?, *rev).await {
            Ok(new_rev) => *rev = new_rev,
            Err(crate::storage::Error::Conflict { .. }) | Err(crate::storage::Error::NotFound(_)) => again = true,
            Err(e) => return Err(e.into()),
        }
    }
    // Deleted CRDs are no longer served (above); now remove their custom resources.
    for (key, rev, crd) in crds.iter().filter(|(_, _, c)| meta::is_deleting(c)) {
        match finalize(state, key, *rev, crd).await {
            Ok(true) => {}
            Ok(false) => again = true,
            Err(e) => {
                tracing::warn!(crd = %meta::name(crd), error = %e, "cleaning up custom resources");
                again = true;
            }
        }
    }
    Ok(Pass { rev: listed.rev, again })
}

fn fingerprint(served: &[&Value]) -> String {
    let parts: Vec<String> =
        served.iter().map(|c| format!("{}|{}|{}", meta::name(c), c["spec"], c["status"]["acceptedNames"])).collect();
    parts.join("\n")
}

/// A deleted CRD: delete its custom resources, then release the cleanup finalizer (the
/// CRD is gone when no finalizer is left). Ok(true) when the CRD object is gone.
async fn finalize(state: &Arc<AppState>, key: &str, rev: Rev, crd: &Value) -> anyhow::Result<bool> {
    let finalizers = meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        return Ok(false);
    }
    let store = &state.storage;
    let accepted = &crd["status"]["acceptedNames"];
    let plural = accepted["plural"].as_str().unwrap_or("");
    let group = crd["spec"]["group"].as_str().unwrap_or("");
    let was_established = crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    if was_established && !plural.is_empty() && !group.is_empty() {
        let prefix = format!("/registry/{group}/{plural}/");
        let items = store.list(&prefix, ListOptions::default()).await?.items;
        let mut left = 0;
        for kv in items {
            match store.delete(&kv.key, kv.mod_rev).await {
                Ok(_) | Err(crate::storage::Error::NotFound(_)) => {}
                Err(crate::storage::Error::Conflict { .. }) => left += 1,
                Err(e) => return Err(e.into()),
            }
        }
        if left > 0 {
            return Ok(false);
        }
    }
    let rest: Vec<String> = finalizers.into_iter().filter(|f| f != CLEANUP_FINALIZER).collect();
    if rest.is_empty() {
        match store.delete(key, rev).await {
            Ok(_) | Err(crate::storage::Error::NotFound(_)) => Ok(true),
            Err(crate::storage::Error::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    } else {
        let mut updated = crd.clone();
        meta::meta_mut(&mut updated).insert("finalizers".into(), serde_json::json!(rest));
        meta::meta_mut(&mut updated).remove("resourceVersion");
        match store.update(key, meta::to_stored(&updated)?, rev).await {
            Ok(_) => Ok(false),
            Err(crate::storage::Error::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Load the CRDs once (before serving), then follow changes in the loop `crds` of the
/// state's supervisor (holding the state weakly: it ends once the state is gone).
pub async fn start(state: &Arc<AppState>) -> anyhow::Result<()> {
    let first = sync(state).await?;
    let weak = Arc::downgrade(state);
    state.tasks.spawn("crds", async move {
        let mut pass = Pass { rev: first.rev, again: first.again };
        loop {
            if pass.again {
                tokio::time::sleep(Duration::from_millis(200)).await;
            } else {
                let Some(storage) = weak.upgrade().map(|s| s.storage.clone()) else { return Ok(()) };
                wait_for_change(&storage, pass.rev).await;
            }
            let Some(state) = weak.upgrade() else { return Ok(()) };
            match sync(&state).await {
                Ok(p) => pass = p,
                Err(e) => {
                    tracing::warn!(error = %e, "syncing CustomResourceDefinitions");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    pass.again = true;
                }
            }
        }
    });
    Ok(())
}

/// Return at the first change under the CRD prefix after `rev` (or when the watch ends).
async fn wait_for_change(storage: &Arc<dyn crate::storage::Storage>, rev: Rev) {
    match storage.watch(PREFIX, rev).await {
        Ok(mut events) => {
            let _ = events.next().await;
        }
        Err(e) => {
            tracing::debug!(error = %e, "watching CustomResourceDefinitions");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
