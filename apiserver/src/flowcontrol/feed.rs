//! One watch of the API Priority and Fairness configuration (FlowSchemas and
//! PriorityLevelConfigurations), shared by every loop that follows it: the dispatcher's
//! configuration (`flowcontrol-config`) and the default objects' maintenance
//! (`flowcontrol-maintain`).
//!
//! In: the store, through a weak [`Loopback`]. Out: a [`Changes`] receiver whose value, a
//! counter, moves on every change to either kind, and once each time the watch is opened
//! (changes before it may have been missed). A follower marks the value seen, then reads the
//! objects afresh: nothing older than the mark is missed, and changes arriving together are
//! taken in one read. The loop (`flowcontrol-watch`, supervised by `tasks`) holds the state
//! only while opening the watch.

use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::watch;

use super::maintain::ConfigKind;
use crate::registry::flowcontrol::GROUP;
use crate::registry::loopback::Loopback;

/// Moves on every change to the configuration (see the module doc).
pub type Changes = watch::Receiver<u64>;

/// One stream of the changes to FlowSchemas and priority levels after `rev`.
async fn watch_changes(
    state: &dyn Loopback,
    rev: crate::storage::Rev,
) -> anyhow::Result<futures::stream::BoxStream<'static, crate::storage::Result<crate::storage::Event>>> {
    let mut streams = Vec::new();
    for kind in [ConfigKind::FlowSchema, ConfigKind::PriorityLevel] {
        let def = state.find(GROUP, "v1", kind.resource())?;
        streams.push(state.storage().watch(&def.prefix(), rev).await?);
    }
    Ok(futures::stream::select_all(streams).boxed())
}

/// Start the shared watch under `tasks`; every follower takes a clone of what it returns.
pub fn spawn(tasks: &crate::tasks::Tasks, state: Weak<dyn Loopback>) -> Changes {
    let (tx, rx) = watch::channel(0u64);
    tasks.spawn("flowcontrol-watch", async move {
        loop {
            let Some(st) = state.upgrade() else { return Ok(()) };
            let from = st.storage().current_rev();
            let watched = watch_changes(&*st, from).await;
            drop(st);
            match watched {
                Ok(mut events) => {
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                    while let Some(Ok(_)) = events.next().await {
                        tx.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    tracing::debug!("the APF configuration watch ended; watching again");
                }
                Err(e) => tracing::warn!(error = %e, "watching the APF configuration failed; retrying"),
            }
            if state.strong_count() == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    rx
}
