//! The loop every controller runs: sync now, then again whenever something it watches
//! changes or the resync period passes; failures are retried with a growing delay.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt as _};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt as _;
use kube::{Api, Resource};
use serde_json::Value;

use crate::metrics::Metrics;

/// Fires when something changed.
pub type Trigger = BoxStream<'static, ()>;

/// Fires on every change to the objects `api` (filtered by `config`) can see.
pub fn changes<K>(api: Api<K>, config: watcher::Config) -> Trigger
where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config).default_backoff().map(|_| ()).boxed()
}

/// Fires when the contents of `path` change (polled every `every`).
pub fn file_changes(path: std::path::PathBuf, every: Duration) -> Trigger {
    futures::stream::unfold((path, None::<Vec<u8>>), move |(path, last)| async move {
        loop {
            tokio::time::sleep(every).await;
            let now = tokio::fs::read(&path).await.ok();
            if now != last {
                return Some(((), (path, now)));
            }
        }
    })
    .boxed()
}

const DEBOUNCE: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Run `sync` until the task is dropped: at once, then after each trigger (changes arriving
/// within a short window are handled by one sync) or every `period`.
pub async fn level_loop<F, Fut>(
    name: &'static str,
    triggers: Vec<Trigger>,
    period: Duration,
    metrics: Metrics,
    mut sync: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    level_loop_until(name, triggers, period, metrics, move || {
        let fut = sync();
        async move { fut.await.map(|()| None) }
    })
    .await
}

/// Like [`level_loop`], for a `sync` that knows when the world changes without an event
/// (a token expiring): it returns how soon to run again at the latest (`None`: `period`).
///
/// Each sync counts as one reconcile of `name` in `metrics`.
pub async fn level_loop_until<F, Fut>(
    name: &'static str,
    triggers: Vec<Trigger>,
    period: Duration,
    metrics: Metrics,
    mut sync: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<Duration>>>,
{
    // Ended trigger streams (or none at all) must not wake the loop.
    let mut merged = futures::stream::select_all(triggers).chain(futures::stream::pending());
    let mut backoff = Duration::from_millis(250);
    loop {
        let result = sync().await;
        metrics.reconciled(name, result.is_ok());
        let wait = match result {
            Ok(next) => {
                backoff = Duration::from_millis(250);
                next.map_or(period, |n| n.min(period))
            }
            Err(e) => {
                tracing::warn!(controller = name, error = %e, "sync failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        tokio::select! {
            _ = merged.next() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        let window = tokio::time::sleep(DEBOUNCE);
        tokio::pin!(window);
        loop {
            tokio::select! {
                _ = merged.next() => {}
                _ = &mut window => break,
            }
        }
    }
}

/// Whether a kube error is the apiserver saying `code`.
pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Ignore "already exists", "not found" and "conflict": the next sync sees the new state.
pub fn tolerate_races<T>(res: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match res {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A JSON merge patch body.
pub fn merge_patch(v: Value) -> kube::api::Patch<Value> {
    kube::api::Patch::Merge(v)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// On Tokio's paused clock: each sync runs when the previous one asked (plus the debounce
    /// window), never later than the period.
    #[tokio::test(start_paused = true)]
    async fn level_loop_until_wakes_when_asked_and_at_the_period() {
        let period = Duration::from_secs(300);
        let asks = [Some(Duration::from_secs(10)), Some(Duration::from_secs(900)), None, None];
        let seen: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let start = tokio::time::Instant::now();
        let task = tokio::spawn({
            let seen = seen.clone();
            level_loop_until("test", Vec::new(), period, Metrics::default(), move || {
                let seen = seen.clone();
                async move {
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    s.push(tokio::time::Instant::now());
                    Ok(asks.get(s.len() - 1).copied().flatten())
                }
            })
        });
        tokio::time::sleep(Duration::from_secs(700)).await;
        task.abort();
        let offsets: Vec<Duration> =
            seen.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|t| *t - start).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            offsets,
            vec![
                ms(0),
                ms(10_000 + 100),                       // asked for 10 s
                ms(10_000 + 100 + 300_000 + 100),       // asked for 900 s: the period wins
                ms(10_000 + 100 + 2 * (300_000 + 100)), // nothing asked: the period
            ],
            "sync times"
        );
    }
}
