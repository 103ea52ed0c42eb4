//! The compactor both backends run: at every tick, compact the history down to the newest
//! `keep_revisions` revisions (a revision count rather than a time window: it bounds the size
//! of the history whatever the write rate). What compaction does is the backend's; when and
//! how far is decided here.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;

use super::{Result, Rev, Storage};

/// How often the compactor looks at the history size, unless told otherwise.
pub const COMPACT_INTERVAL: Duration = Duration::from_secs(30);

/// A store the compactor can run on.
#[async_trait]
pub(super) trait Compact: Storage {
    /// Names the backend in the log line of a failed compaction.
    const LOG_NAME: &'static str;

    /// A tick with nothing new to compact. SQLite finishes here a compaction that a crash
    /// interrupted; etcd has nothing to do.
    async fn resume_compaction(&self) -> Result<()> {
        Ok(())
    }
}

/// The compaction revision that keeps the newest `keep_revisions` revisions of `current`,
/// and whether it is newer than the compaction already done.
pub(super) fn target(current: Rev, compacted: Rev, keep_revisions: u64) -> (Rev, bool) {
    let target = current.saturating_sub(keep_revisions);
    (target, target > compacted)
}

/// [`run`] as a task of its own.
pub(super) fn spawn<S: Compact>(store: Arc<S>, keep_revisions: u64, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store, keep_revisions, every))
}

/// Compact `store` every `every`, keeping the newest `keep_revisions` revisions. The loop
/// holds only a weak reference and ends when the store is dropped.
pub(super) fn run<S: Compact>(
    store: Arc<S>,
    keep_revisions: u64,
    every: Duration,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let weak: Weak<S> = Arc::downgrade(&store);
    drop(store);
    async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(store) = weak.upgrade() else { return };
            let (target, newer) = target(store.current_rev(), store.compacted_rev(), keep_revisions);
            let res = if newer { store.compact(target).await } else { store.resume_compaction().await };
            if let Err(e) = res {
                tracing::warn!(error = %e, target, "{} compaction failed", S::LOG_NAME);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_keeps_the_newest_revisions_and_never_goes_back() {
        // (current, compacted, keep) → (target, compact now)
        let cases = [
            ((100, 0, 10), (90, true)),
            ((100, 90, 10), (90, false)),
            ((100, 95, 10), (90, false)),
            ((5, 0, 10), (0, false)),
            ((10, 0, 10), (0, false)),
            ((11, 0, 10), (1, true)),
            ((100, 0, 0), (100, true)),
        ];
        for ((current, compacted, keep), want) in cases {
            assert_eq!(target(current, compacted, keep), want, "current {current}, compacted {compacted}, keep {keep}");
        }
    }
}
