//! Deletion follow-ups that upstream's controllers do, kept inside the apiserver so a
//! standalone server behaves like a cluster:
//!
//! - namespace lifecycle: a Terminating namespace has its contents deleted, then its
//!   `kubernetes` finalizer removed, then it is gone;
//! - owner references: dependents of a deleted owner are deleted (Background), or lose
//!   their reference (`orphan` finalizer), or are deleted before the owner (`foregroundDeletion`).
//!
//! Work is triggered by the delete that needs it and retried until done; a sweep at
//! start-up picks up what a crash interrupted. Each piece of work is a job of the
//! apiserver's supervisor ([`crate::tasks::Tasks::spawn_job`]), stopped with the server; it
//! holds the state weakly across its pauses.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};

use super::{delete_one, DeleteOptions};
use crate::api::rest::{Call, Params};
use crate::authn::UserInfo;
use crate::http::request_info::RequestInfo;
use crate::meta;
use crate::registry::ResourceDef;
use crate::storage::ListOptions;
use crate::wire::negotiate::Output;
use crate::AppState;

const RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(15);

fn system_user() -> UserInfo {
    UserInfo {
        name: crate::authn::user::KUBE_CONTROLLER_MANAGER_USER.into(),
        groups: vec![crate::authn::AUTHENTICATED_GROUP.into()],
        ..Default::default()
    }
}

fn call_info(def: &ResourceDef, ns: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource_request: true,
        verb: "delete".into(),
        api_group: def.group.into(),
        api_version: def.version.into(),
        resource: def.resource.into(),
        namespace: ns.into(),
        name: name.into(),
        ..Default::default()
    }
}

/// Delete one object as the system (NotFound is fine: someone else got there first).
/// Boxed: deletes trigger cleanup that deletes again, so the future type is recursive.
fn delete_as_system<'a>(
    state: &'a Arc<AppState>,
    def: &'a ResourceDef,
    ns: &'a str,
    name: &'a str,
    propagation: &'a str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
    Box::pin(delete_as_system_inner(state, def, ns, name, propagation))
}

async fn delete_as_system_inner(state: &Arc<AppState>, def: &ResourceDef, ns: &str, name: &str, propagation: &str) {
    let info = call_info(def, ns, name);
    let user = system_user();
    let c = Call { state, def, info: &info, user: &user, params: Params::default(), out: Output::default() };
    let opts = DeleteOptions { propagation: Some(propagation.into()), ..Default::default() };
    if let Err(e) = delete_one(&c, name, &opts).await {
        if !matches!(e, crate::error::ApiError::NotFound { .. }) {
            tracing::warn!(resource = def.resource, namespace = ns, name, error = %e, "cleanup delete failed");
        }
    }
}

/// After an object is gone: its dependents go too (Background).
pub fn after_delete(state: &Arc<AppState>, def: &ResourceDef, obj: &Value) {
    let uid = meta::uid(obj).to_string();
    if uid.is_empty() {
        return;
    }
    let weak = Arc::downgrade(state);
    let owner_ns = if def.namespaced { Some(meta::namespace(obj).to_string()) } else { None };
    state.tasks.spawn_job("gc-dependents", async move {
        // One pass, no pause: the state is held for the pass.
        let Some(state) = weak.upgrade() else { return Ok(()) };
        for (d, dep) in dependents(&state, owner_ns.as_deref(), &uid).await {
            let ns = meta::namespace(&dep).to_string();
            let name = meta::name(&dep).to_string();
            if other_owners_alive(&state, &dep, &uid).await {
                strip_owner(&state, &d, &dep, &uid).await;
            } else {
                delete_as_system(&state, &d, &ns, &name, "Background").await;
            }
        }
        Ok(())
    });
}

/// After an object got its deletionTimestamp with finalizers kustos itself handles.
pub fn after_mark_deleting(state: &Arc<AppState>, def: &ResourceDef, obj: &Value) {
    let weak = Arc::downgrade(state);
    let def = def.clone();
    let ns = meta::namespace(obj).to_string();
    let name = meta::name(obj).to_string();
    let is_ns = def.strategy.role() == crate::registry::Role::Namespace;
    let fins = meta::finalizers(obj);
    if !is_ns && !fins.iter().any(|f| f == "orphan" || f == "foregroundDeletion") {
        return;
    }
    let job = if is_ns { "gc-namespace" } else { "gc-finalizers" };
    state.tasks.spawn_job(job, async move {
        if is_ns {
            finish_namespace(&weak, &name).await;
        } else {
            finish_owner(&weak, &def, &ns, &name).await;
        }
        Ok(())
    });
}

/// Every object whose ownerReferences name `uid`, with its kind.
async fn dependents(state: &Arc<AppState>, ns: Option<&str>, uid: &str) -> Vec<(ResourceDef, Value)> {
    let mut out = Vec::new();
    let served = state.crds.current();
    for d in &served.registry.resources {
        if ns.is_some() && !d.namespaced {
            continue;
        }
        let prefix = d.ns_prefix(ns);
        let Ok(page) = state.storage.list(&prefix, ListOptions::default()).await else { continue };
        for kv in &page.items {
            let Ok(o) = meta::from_stored(kv) else { continue };
            let owned = o
                .get("metadata")
                .and_then(|m| m.get("ownerReferences"))
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid)));
            if owned {
                out.push((d.clone(), o));
            }
        }
    }
    out
}

/// True if an owner other than `gone_uid` still exists.
async fn other_owners_alive(state: &Arc<AppState>, dep: &Value, gone_uid: &str) -> bool {
    let refs = dep
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for r in refs {
        let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
        if uid == gone_uid {
            continue;
        }
        let api_version = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(d) = state.crds.current().registry.find_kind(group, kind).cloned() else { continue };
        let ns = if d.namespaced { Some(meta::namespace(dep)) } else { None };
        if let Ok(Some(kv)) = state.storage.get(&d.key(ns, name)).await {
            if meta::from_stored(&kv).map(|o| meta::uid(&o) == uid).unwrap_or(false) {
                return true;
            }
        }
    }
    false
}

/// Remove the reference to `uid` from a dependent (CAS on its revision; retried).
async fn strip_owner(state: &Arc<AppState>, def: &ResourceDef, dep: &Value, uid: &str) {
    let ns = if def.namespaced { Some(meta::namespace(dep)) } else { None };
    let key = def.key(ns, meta::name(dep));
    for _ in 0..5 {
        let Ok(Some(kv)) = state.storage.get(&key).await else { return };
        let Ok(mut o) = meta::from_stored(&kv) else { return };
        let m = meta::meta_mut(&mut o);
        let refs: Vec<Value> = m
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid)).cloned().collect())
            .unwrap_or_default();
        if refs.is_empty() {
            m.remove("ownerReferences");
        } else {
            m.insert("ownerReferences".into(), json!(refs));
        }
        let Ok(bytes) = meta::to_stored(&o) else { return };
        match state.storage.update(&key, bytes, kv.mod_rev).await {
            Ok(_) => return,
            Err(crate::storage::Error::Conflict { .. }) => continue,
            Err(_) => return,
        }
    }
}

/// Remove `finalizer` from a stored object; delete it if it is deleting and none remain.
/// An object already gone is done; any other failure is logged and left for the next pass.
async fn remove_finalizer(state: &Arc<AppState>, key: &str, field: &[&str], finalizer: &str) {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        tracing::warn!(key, finalizer, error = %e, "removing a finalizer failed: {what}");
    };
    for _ in 0..10 {
        let kv = match state.storage.get(key).await {
            Ok(Some(kv)) => kv,
            Ok(None) => return,
            Err(e) => return fail("read", &e),
        };
        let mut o = match meta::from_stored(&kv) {
            Ok(o) => o,
            Err(e) => return fail("decode", &e),
        };
        let mut target = &mut o;
        for f in field {
            target = &mut target[*f];
        }
        if let Some(a) = target.as_array_mut() {
            a.retain(|v| v.as_str() != Some(finalizer));
        }
        let done = meta::is_deleting(&o) && meta::finalizers(&o).is_empty();
        let spec_done =
            o.get("spec").and_then(|s| s.get("finalizers")).and_then(Value::as_array).is_none_or(|a| a.is_empty());
        let r = if done && spec_done {
            state.storage.delete(key, kv.mod_rev).await.map(|_| ())
        } else {
            match meta::to_stored(&o) {
                Ok(b) => state.storage.update(key, b, kv.mod_rev).await.map(|_| ()),
                Err(e) => return fail("encode", &e),
            }
        };
        match r {
            Ok(()) | Err(crate::storage::Error::NotFound(_)) => return,
            Err(crate::storage::Error::Conflict { .. }) => continue,
            Err(e) => return fail("write", &e),
        }
    }
    fail("write", &"10 conflicting writes in a row")
}

async fn finish_owner(weak: &Weak<AppState>, def: &ResourceDef, ns: &str, name: &str) {
    let key = def.key(if def.namespaced { Some(ns) } else { None }, name);
    let owner_ns = if def.namespaced { Some(ns) } else { None };
    let (uid, fins) = {
        let Some(state) = weak.upgrade() else { return };
        let Ok(Some(kv)) = state.storage.get(&key).await else { return };
        let Ok(owner) = meta::from_stored(&kv) else { return };
        let uid = meta::uid(&owner).to_string();
        let fins = meta::finalizers(&owner);
        if fins.iter().any(|f| f == "orphan") {
            for (d, dep) in dependents(&state, owner_ns, &uid).await {
                strip_owner(&state, &d, &dep, &uid).await;
            }
            remove_finalizer(&state, &key, &["metadata", "finalizers"], "orphan").await;
        }
        (uid, fins)
    };
    if fins.iter().any(|f| f == "foregroundDeletion") {
        for _ in 0..600 {
            let Some(state) = weak.upgrade() else { return };
            let deps = dependents(&state, owner_ns, &uid).await;
            if deps.is_empty() {
                break;
            }
            for (d, dep) in deps {
                if !meta::is_deleting(&dep) {
                    delete_as_system(&state, &d, meta::namespace(&dep), meta::name(&dep), "Background").await;
                }
            }
            drop(state);
            tokio::time::sleep(RETRY).await;
        }
        let Some(state) = weak.upgrade() else { return };
        remove_finalizer(&state, &key, &["metadata", "finalizers"], "foregroundDeletion").await;
    }
}

/// Delete everything in a Terminating namespace, then the namespace.
async fn finish_namespace(weak: &Weak<AppState>, ns: &str) {
    let Some(key) = weak.upgrade().and_then(|s| s.registry.namespace_kind().map(|d| d.key(None, ns))) else {
        return;
    };
    // Objects held by someone else's finalizer keep the namespace Terminating (as upstream);
    // check again with a growing pause, up to MAX_RETRY.
    let mut pause = RETRY;
    loop {
        let Some(state) = weak.upgrade() else { return };
        if namespace_pass(&state, &key, ns).await {
            return;
        }
        drop(state);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_RETRY);
    }
}

/// One pass over a Terminating namespace: true when our part is done (the namespace is
/// gone or not terminating, or it was empty and its `kubernetes` finalizer is removed).
async fn namespace_pass(state: &Arc<AppState>, key: &str, ns: &str) -> bool {
    match state.storage.get(key).await {
        Ok(Some(kv)) => match meta::from_stored(&kv) {
            Ok(o) if meta::is_deleting(&o) => {}
            _ => return true,
        },
        _ => return true,
    }
    let mut remaining = 0usize;
    let served = state.crds.current();
    for d in served.registry.resources.iter().filter(|d| d.namespaced) {
        let Ok(page) = state.storage.list(&d.ns_prefix(Some(ns)), ListOptions::default()).await else {
            remaining += 1;
            continue;
        };
        for kv in &page.items {
            remaining += 1;
            let Ok(o) = meta::from_stored(kv) else { continue };
            if !meta::is_deleting(&o) {
                delete_as_system(state, d, ns, meta::name(&o), "Background").await;
            }
        }
    }
    if remaining == 0 {
        remove_finalizer(state, key, &["spec", "finalizers"], "kubernetes").await;
        // Gone, or waiting for someone else's finalizer: either way our part is done.
        return true;
    }
    false
}

/// At start-up: resume namespace deletions and owner finalizers a crash interrupted. One
/// pass over the stored objects (a job, not a loop), holding the state weakly.
pub fn spawn_startup_sweep(state: &Arc<AppState>) {
    let weak = Arc::downgrade(state);
    state.tasks.spawn_job("gc-startup-sweep", async move {
        let Some(resources) = weak.upgrade().map(|s| s.crds.current().registry.resources.clone()) else {
            return Ok(());
        };
        for def in resources {
            let Some(state) = weak.upgrade() else { return Ok(()) };
            let Ok(page) = state.storage.list(&def.prefix(), ListOptions::default()).await else { continue };
            for kv in &page.items {
                let Ok(o) = meta::from_stored(kv) else { continue };
                if meta::is_deleting(&o) {
                    after_mark_deleting(&state, &def, &o);
                }
            }
        }
        Ok(())
    });
}
