//! API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`).
//!
//! - [`classify`]: which FlowSchema a request matches, its flow distinguisher (pure).
//! - [`config`]: FlowSchemas and PriorityLevelConfigurations digested for the dispatcher (pure).
//! - [`limits`]: the server's seats split into per-level limits, lending and borrowing (pure).
//! - [`shuffle`], [`queueset`]: shuffle sharding and fair queuing of one level (pure, virtual time).
//! - [`estimate`]: how many seats a request takes (pure).
//! - [`dispatcher`]: the levels' queue sets behind locks, waiting and waking requests.
//! - [`filter`]: the request-path middleware (headers, 429) and the max-in-flight fallback.
//! - [`bootstrap`], [`maintain`]: upstream's mandatory and suggested objects, kept as upstream
//!   keeps them; the FlowSchemas' `Dangling` condition.
//! - [`metrics`], [`debug`]: `/metrics` and `/debug/api_priority_and_fairness/*`.
//!
//! [`spawn`] keeps a [`dispatcher::FlowControl`] in step with storage: it lists both kinds,
//! puts them into effect, and does so again whenever either changes; every
//! [`dispatcher::BORROW_PERIOD`] it re-derives the levels' limits and refreshes the object
//! counts LIST estimates use.

pub mod bootstrap;
pub mod classify;
pub mod config;
pub mod debug;
pub mod dispatcher;
pub mod dropped;
pub mod estimate;
pub mod feed;
pub mod filter;
pub mod limits;
pub mod maintain;
pub mod metrics;
pub mod queueset;
pub mod shuffle;

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::flowcontrol::v1 as fc;

use crate::registry::loopback::Loopback;
use crate::storage::{ListOptions, Rev};
use dispatcher::FlowControl;

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

fn prefix(resource: &str) -> String {
    format!("/registry/{GROUP}/{resource}/")
}

async fn list_typed<T: serde::de::DeserializeOwned>(
    state: &dyn Loopback,
    resource: &str,
) -> anyhow::Result<(Vec<T>, Rev)> {
    let page = state.storage().list(&prefix(resource), ListOptions::default()).await?;
    let mut out = Vec::with_capacity(page.items.len());
    for kv in page.items {
        match serde_json::from_slice::<T>(&kv.value) {
            Ok(v) => out.push(v),
            Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping an undecodable flowcontrol object"),
        }
    }
    Ok((out, page.rev))
}

/// Read both kinds from storage and put them into effect; the revision they were read at.
pub async fn load(state: &dyn Loopback, fc: &FlowControl) -> anyhow::Result<Rev> {
    let (levels, rev_a) = list_typed::<fc::PriorityLevelConfiguration>(state, "prioritylevelconfigurations").await?;
    let (schemas, rev_b) = list_typed::<fc::FlowSchema>(state, "flowschemas").await?;
    let digest = config::digest(
        &schemas,
        &levels,
        &bootstrap::mandatory_flow_schemas(),
        &bootstrap::mandatory_priority_levels(),
    );
    fc.apply(digest);
    Ok(rev_a.min(rev_b))
}

/// Refresh the object counts LIST estimates use, for every served resource.
async fn count_objects(state: &dyn Loopback, fc: &FlowControl) {
    let served = state.served_prefixes();
    let prefixes: Vec<String> = served.iter().map(|(_, _, prefix)| prefix.clone()).collect();
    let counted = state.storage().counts(&prefixes).await;
    let mut counts = HashMap::new();
    for ((group, resource, _), n) in served.into_iter().zip(counted) {
        if let Ok(n) = n {
            counts.insert(filter::count_key(group, resource), n);
        }
    }
    fc.set_object_counts(counts);
}

/// Keep `fc` in step with storage (following `changes`, the shared watch of [`feed`]), and
/// rebalance its limits, in two loops of `tasks` (`flowcontrol-config`,
/// `flowcontrol-rebalance`) that end once `state` is gone.
pub fn spawn(tasks: &crate::tasks::Tasks, state: Weak<dyn Loopback>, fc: Arc<FlowControl>, changes: feed::Changes) {
    let (s, f) = (state.clone(), fc.clone());
    tasks.spawn("flowcontrol-config", async move {
        let mut changes = changes;
        while s.strong_count() > 0 {
            if let Err(e) = follow(&s, &f, &mut changes).await {
                tracing::warn!(error = %e, "following the flowcontrol configuration; retrying");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok(())
    });
    tasks.spawn("flowcontrol-rebalance", async move {
        let mut tick = tokio::time::interval(dispatcher::BORROW_PERIOD);
        loop {
            tick.tick().await;
            let Some(state) = state.upgrade() else { return Ok(()) };
            count_objects(&*state, &fc).await;
            fc.rebalance();
        }
    });
}

/// Load, then reload after every change `changes` reports (changes arriving together are
/// taken in one load), until the shared watch is gone (or the state). The state is held only
/// while loading, never while waiting.
async fn follow(state: &Weak<dyn Loopback>, fc: &FlowControl, changes: &mut feed::Changes) -> anyhow::Result<()> {
    let up = || state.upgrade().ok_or_else(|| anyhow::anyhow!("the server is gone"));
    loop {
        // Marked before reading: a change after the read moves the value again.
        changes.borrow_and_update();
        load(&*up()?, fc).await?;
        if changes.changed().await.is_err() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
