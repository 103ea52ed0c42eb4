//! Per-object reconciliation, for controllers that handle each object on its own (the CSR
//! controllers): kube-runtime's `Controller` calls the reconciler for each changed object of
//! a reflector store — never twice at once for the same object, up to `concurrency` objects
//! in parallel. A change costs one reconcile of that object, not a pass over all of them.
//!
//! Controllers of the same kind share one list and watch ([`SharedInformer`], as
//! kube-controller-manager's shared informers): one store, one stream of changes fanned out
//! to each controller's queue.
//!
//! Failures are retried per object with a growing delay ([`Backoff`], like client-go's
//! per-item exponential rate limiter); a success forgets the object's failures.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, store::Writer, ReflectHandle, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;

use crate::metrics::Metrics;

/// Per-object retry delays: `base`, doubled at each consecutive failure, at most `max`.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

/// Objects tracked at most; past this the record is reset (delays start over).
const BACKOFF_MAX_TRACKED: usize = 100_000;

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max, failures: Mutex::new(HashMap::new()) }
    }

    /// The delay before retrying `key`, counting this failure.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= BACKOFF_MAX_TRACKED && !failures.contains_key(key) {
            failures.clear();
        }
        let n = failures.entry(key.to_string()).or_insert(0);
        let delay = self.base.saturating_mul(2u32.saturating_pow(*n)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// `key` succeeded (or no longer needs retrying).
    pub fn forget(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

impl Default for Backoff {
    /// 100 ms doubling up to 1000 s (client-go's item limiter caps at 1000 s too).
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(1000))
    }
}

/// What every per-object controller context offers the runner.
pub trait Context: Send + Sync + 'static {
    fn backoff(&self) -> &Backoff;
}

/// One list and watch of `K`, shared by the controllers that [`subscribe`](Self::subscribe)
/// before it [runs](Self::run).
pub struct SharedInformer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    api: Api<K>,
    wc: watcher::Config,
    reader: Store<K>,
    writer: Writer<K>,
}

/// What a controller gets from a [`SharedInformer`]: the store and its stream of changes.
pub struct Subscription<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    changes: ReflectHandle<K>,
    reader: Store<K>,
}

impl<K> Subscription<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// The stream of changes and the store, for a controller that builds its own loop.
    pub fn into_parts(self) -> (ReflectHandle<K>, Store<K>) {
        (self.changes, self.reader)
    }
}

/// Changes a subscriber may lag behind before the watch waits for it.
const SHARED_BUFFER: usize = 4096;

impl<K> SharedInformer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    pub fn new(api: Api<K>, wc: watcher::Config) -> Self {
        let (reader, writer) = reflector::store_shared(SHARED_BUFFER);
        SharedInformer { api, wc, reader, writer }
    }

    pub fn subscribe(&self) -> anyhow::Result<Subscription<K>> {
        let changes =
            self.writer.subscribe().ok_or_else(|| anyhow::anyhow!("the informer's store cannot be subscribed to"))?;
        Ok(Subscription { changes, reader: self.reader.clone() })
    }

    /// List and watch until the task is dropped (watch errors are retried with a backoff).
    pub async fn run(self) -> anyhow::Result<()> {
        watcher(self.api, self.wc)
            .default_backoff()
            .reflect_shared(self.writer)
            .for_each(|ev| async move {
                if let Err(e) = ev {
                    tracing::debug!(error = %e, "shared informer watch error; retrying");
                }
            })
            .await;
        Ok(())
    }
}

/// Reconcile every object of `source` until the task is dropped. An error from `reconcile`
/// is logged and the object is retried after its [`Backoff`] delay.
///
/// Each reconcile is counted in `metrics` (`kustos_controller_reconciles_total`, and
/// `..._reconcile_errors_total` when it fails), and the objects changed and not yet
/// reconciled are its `kustos_controller_queue_depth` (requeues waiting for their delay are
/// not, as upstream's workqueue depth leaves out its delayed items).
pub async fn run<K, C, E, F, Fut>(
    name: &'static str,
    source: Subscription<K>,
    concurrency: u16,
    metrics: &Metrics,
    ctx: Arc<C>,
    mut reconcile: F,
) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin,
    C: Context,
    E: std::error::Error + Send + 'static,
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let queue = Queue::new(name, metrics.clone());
    let changes = {
        let queue = queue.clone();
        source.changes.inspect(move |obj| queue.add(key(obj.namespace().as_deref(), &obj.name_any())))
    };
    let counted = {
        let (queue, metrics) = (queue.clone(), metrics.clone());
        move |obj: Arc<K>, ctx: Arc<C>| {
            queue.done(&key(obj.namespace().as_deref(), &obj.name_any()));
            let fut = reconcile(obj, ctx);
            let metrics = metrics.clone();
            async move {
                let res = fut.await;
                metrics.reconciled(name, res.is_ok());
                res
            }
        }
    };
    Controller::for_shared_stream(changes, source.reader)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .run(counted, error_policy(name), ctx)
        .for_each(|res| {
            let queue = queue.clone();
            async move {
                // Reconcile errors were handled by the error policy; what is left here are
                // queue errors (e.g. an object gone from the store), which need nothing.
                match res {
                    Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
                        queue.done(&key(r.namespace.as_deref(), &r.name));
                    }
                    Err(kube::runtime::controller::Error::ReconcilerFailed(..)) | Ok(_) => {}
                    Err(e) => tracing::debug!(controller = name, error = %e, "controller stream error"),
                }
            }
        })
        .await;
    Ok(())
}

/// What a failed reconcile does: log, and retry the object after its [`Backoff`] delay.
pub fn error_policy<K, E, C>(name: &'static str) -> impl Fn(Arc<K>, &E, Arc<C>) -> Action
where
    K: Resource,
    E: std::error::Error,
    C: Context,
{
    move |obj: Arc<K>, err: &E, ctx: Arc<C>| {
        let delay = ctx.backoff().next(&obj.name_any());
        tracing::warn!(controller = name, object = %obj.name_any(), error = %err, retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }
}

fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The keys changed and not yet picked up by a reconcile (the queue depth metric).
#[derive(Clone)]
struct Queue {
    name: &'static str,
    metrics: Metrics,
    keys: Arc<Mutex<HashSet<String>>>,
}

impl Queue {
    fn new(name: &'static str, metrics: Metrics) -> Self {
        metrics.set_queue_depth(name, 0);
        Queue { name, metrics, keys: Arc::default() }
    }

    fn add(&self, key: String) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.insert(key);
        self.metrics.set_queue_depth(self.name, keys.len());
    }

    fn done(&self, key: &str) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.remove(key);
        self.metrics.set_queue_depth(self.name, keys.len());
    }
}

/// The delay until `deadline`, at least `min` (for requeues at a wall-clock time).
pub fn until(deadline: chrono::DateTime<chrono::Utc>, now: chrono::DateTime<chrono::Utc>, min: Duration) -> Duration {
    (deadline - now).to_std().unwrap_or(Duration::ZERO).max(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_object_caps_and_forgets() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let ms = |d: Duration| d.as_millis();
        // name, key, wanted delay (ms); in order, on one Backoff.
        let steps: &[(&str, &str, u128)] = &[
            ("first failure", "a", 100),
            ("second", "a", 200),
            ("third", "a", 400),
            ("another object starts over", "b", 100),
            ("fourth", "a", 800),
            ("capped", "a", 1000),
            ("still capped", "a", 1000),
        ];
        for (name, key, want) in steps {
            assert_eq!(ms(b.next(key)), *want, "{name}");
        }
        b.forget("a");
        assert_eq!(ms(b.next("a")), 100, "forgotten: starts over");
        assert_eq!(ms(b.next("b")), 200, "the other object kept its count");
    }

    #[test]
    fn until_a_deadline() {
        use chrono::TimeZone as _;
        let now = chrono::Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let min = Duration::from_secs(1);
        let cases: &[(&str, i64, u64)] = &[("in an hour", 3600, 3600), ("past: the minimum", -10, 1), ("now", 0, 1)];
        for (name, secs, want) in cases {
            assert_eq!(until(now + chrono::Duration::seconds(*secs), now, min).as_secs(), *want, "{name}");
        }
    }
}
