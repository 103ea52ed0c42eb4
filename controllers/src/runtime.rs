//! The one controller runtime: kube-runtime's `Controller` (its `applier`: a scheduler that
//! deduplicates requests per key, never runs one key twice at once, and requeues each key
//! after the [`Action`] its reconcile returned or its error policy chose), with runs taking
//! turns first come, first served, up to `concurrency` at once ([`in_turn`]: kube-runtime's
//! own limit serves a backlog in hash order). Every controller of this crate runs on it, in
//! one of two registrations:
//!
//! - [`per_object`]: the keys are the objects of a [`SharedInformer`]'s store; a change to an
//!   object costs one reconcile of that object (the CSR controllers, `tokencleaner`).
//! - [`whole_world`]: one key for the whole controller, for controllers whose decision reads
//!   everything they watch at once (`serviceaccount`, `root-ca-cert-publisher`, …). Any
//!   trigger ([`changes`], [`file_changes`]) requests that key; a trigger arriving while a sync
//!   runs queues exactly one more sync after it (as client-go's workqueue with a single key,
//!   which is how upstream's bootstrap signer runs).
//!
//! Why kube-runtime's `Controller` rather than a loop of our own: it already is client-go's
//! workqueue (per-key deduplication, no concurrent reconcile of one key, delayed requeues),
//! the per-object controllers need exactly that, and a whole-world controller is the
//! one-key case of it; so the scheduling, retry and metrics code exists once.
//!
//! Resync and backoff: a successful reconcile returns when to look again ([`Action`]; a
//! whole-world sync runs again after the resync period at the latest); a failed one is
//! retried after its key's [`Backoff`] delay (doubling per consecutive failure, forgotten on
//! success). Each reconcile counts in [`Metrics`] (`kustos_controller_reconciles_total`,
//! `..._reconcile_errors_total`); per-object controllers also report their queue depth.
//!
//! Ownership: a registration is a future, never a spawned task; everything a controller
//! needs besides (its informer, CA file pollers, a deletion watch) is joined into that same
//! future. [`crate::run`] owns every controller future in one `JoinSet` and, at shutdown
//! (or leadership loss), aborts them and awaits their end: when it returns, nothing a
//! controller started is left running, so nothing writes any more.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt as _};
use futures::FutureExt as _;
use kube::api::ObjectMeta;
use kube::runtime::controller::{self, Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, store::Writer, ObjectRef, ReflectHandle, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::metrics::Metrics;

/// Fires when something changed.
pub type Trigger = BoxStream<'static, ()>;

/// Fires on every change to the objects `api` (filtered by `config`) can see.
pub fn changes<K>(api: Api<K>, config: watcher::Config) -> Trigger
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watch(api, config).map(|_| ()).boxed()
}

/// A list and watch of `api` (filtered by `config`) that waits after each error before it
/// tries again: 0.8 s, doubling up to 30 s (with jitter), back to the start once the watch
/// makes progress. That is kube-runtime's `default_backoff()` and client-go's reflector
/// backoff, with one difference: kube-runtime's watcher yields `Event::Init` before every
/// list attempt, and its backoff takes any event as progress, so a list that keeps failing
/// (a CRD not installed: 404; missing RBAC: 403) was retried every ~0.8 s for ever. Here
/// `Init` is not progress.
pub fn watch<K>(api: Api<K>, config: watcher::Config) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    with_backoff(watcher(api, config).boxed(), watcher::DefaultBackoff::default())
}

/// `events` with `backoff` applied as [`watch`] describes.
fn with_backoff<K, B>(
    events: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    backoff: B,
) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Send + 'static,
    B: kube::runtime::utils::Backoff + Send + 'static,
{
    futures::stream::unfold((events, backoff, None::<Duration>), |(mut events, mut backoff, wait)| async move {
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
        let item = events.next().await?;
        let wait = match &item {
            Err(_) => backoff.next(),
            Ok(watcher::Event::Init) => None,
            Ok(_) => {
                backoff.reset();
                None
            }
        };
        Some((item, (events, backoff, wait)))
    })
    .boxed()
}

/// Yields every object of `api` (filtered by `config`) that is deleted while it watches.
pub fn deletions<K>(api: Api<K>, config: watcher::Config) -> BoxStream<'static, K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watch(api, config)
        .filter_map(|ev| std::future::ready(if let Ok(watcher::Event::Delete(obj)) = ev { Some(obj) } else { None }))
        .boxed()
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

/// Retry delays of a failing whole-world sync.
const WORLD_BACKOFF_BASE: Duration = Duration::from_millis(250);
const WORLD_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The one key of a whole-world controller (named after it). It lives only in that
/// controller's store and is never sent to an apiserver.
#[derive(Clone, Debug)]
pub struct World {
    metadata: ObjectMeta,
}

impl Resource for World {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "World".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "controllers.kustos.internal".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "worlds".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A failed whole-world sync.
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct SyncError(anyhow::Error);

struct WorldContext {
    backoff: Backoff,
}

impl Context for WorldContext {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

/// Register a whole-world controller: run `sync` at once, then after each trigger (one more
/// sync covers every trigger that arrived while one ran) or every `period`, until the future
/// is dropped. See [`whole_world_until`] for a `sync` that knows when to look again.
pub async fn whole_world<F, Fut>(
    name: &'static str,
    triggers: Vec<Trigger>,
    period: Duration,
    metrics: Metrics,
    mut sync: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    whole_world_until(name, triggers, period, metrics, move || sync().map(|r| r.map(|()| None))).await
}

/// Like [`whole_world`], for a `sync` that knows when the world changes without an event
/// (a token expiring): it returns how soon to run again at the latest (`None`: `period`).
///
/// Each sync counts as one reconcile of `name` in `metrics`.
pub async fn whole_world_until<F, Fut>(
    name: &'static str,
    triggers: Vec<Trigger>,
    period: Duration,
    metrics: Metrics,
    mut sync: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<Duration>>> + Send + 'static,
{
    let world = World { metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() } };
    let (store, mut writer) = reflector::store::<World>();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(world.clone()));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let key = ObjectRef::from_obj(&world);
    // Once at start, then on every trigger; ended trigger streams (or none at all) must not
    // end the queue (that would shut the controller down).
    let queue = futures::stream::once(std::future::ready(()))
        .chain(futures::stream::select_all(triggers))
        .chain(futures::stream::pending())
        .map(move |()| Ok::<_, std::convert::Infallible>(key.clone()));
    let ctx = Arc::new(WorldContext { backoff: Backoff::new(WORLD_BACKOFF_BASE, WORLD_BACKOFF_MAX) });
    let reconcile = move |_: Arc<World>, ctx: Arc<WorldContext>| -> BoxFuture<'static, Result<Action, SyncError>> {
        let fut = sync();
        async move {
            let next = fut.await.map_err(SyncError)?;
            ctx.backoff.forget(name);
            Ok(Action::requeue(next.map_or(period, |n| n.min(period))))
        }
        .boxed()
    };
    drive(
        name,
        None,
        controller::applier(
            counted(name, &metrics, None, reconcile),
            error_policy(name),
            ctx,
            store,
            queue,
            ControllerConfig::default(),
        ),
    )
    .await;
    Ok(())
}

/// Wrap `reconcile` to count each run in `metrics` (and take its key off the queue depth).
fn counted<K, C, E, F, Fut>(
    name: &'static str,
    metrics: &Metrics,
    queue: Option<Queue>,
    mut reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
where
    K: Resource,
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let metrics = metrics.clone();
    move |obj: Arc<K>, ctx: Arc<C>| {
        if let Some(q) = &queue {
            q.done(&key(obj.meta().namespace.as_deref(), &obj.name_any()));
        }
        let fut = reconcile(obj, ctx);
        let metrics = metrics.clone();
        async move {
            let start = std::time::Instant::now();
            let res = fut.await;
            metrics.worked(name, start.elapsed());
            metrics.reconciled(name, res.is_ok());
            res
        }
        .boxed()
    }
}

/// Consume a controller's result stream until it ends (it ends only with its queue).
async fn drive<K, E, QE>(
    name: &'static str,
    queue: Option<Queue>,
    results: impl futures::Stream<Item = Result<(ObjectRef<K>, Action), controller::Error<E, QE>>>,
) where
    K: Resource,
    E: std::error::Error + 'static,
    QE: std::error::Error + 'static,
{
    results
        .for_each(|res| {
            let queue = queue.clone();
            async move {
                // Reconcile errors were handled by the error policy; what is left here are
                // queue errors (e.g. an object gone from the store), which need nothing.
                match res {
                    Err(controller::Error::ObjectNotFound(r)) => {
                        if let Some(q) = queue {
                            q.done(&key(r.namespace.as_deref(), &r.name));
                        }
                    }
                    Err(controller::Error::ReconcilerFailed(..)) | Ok(_) => {}
                    Err(e) => tracing::debug!(controller = name, error = %e, "controller stream error"),
                }
            }
        })
        .await;
}

/// Whether a kube error is the apiserver saying `code`.
/// Status writes retried on Conflict at most this many times.
const STATUS_ATTEMPTS: usize = 5;

/// Read object `name`, let `f` make its next state (`None`: nothing to write), and write
/// that through `/status` with the read resourceVersion; a Conflict starts over (at most
/// [`STATUS_ATTEMPTS`] times, then it gives up quietly: the next change tries again). An
/// object that is gone needs nothing.
pub async fn update_status<K>(api: &Api<K>, name: &str, f: impl Fn(&K) -> Option<K>) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + Debug,
{
    for _ in 0..STATUS_ATTEMPTS {
        let current = match api.get(name).await {
            Ok(obj) => obj,
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(next) = f(&current) else { return Ok(()) };
        match api.replace_status(name, &kube::api::PostParams::default(), &next).await {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 409) => continue,
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    tracing::debug!(object = %name, "status kept conflicting; giving up this update");
    Ok(())
}

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

    /// List and watch until the future is dropped (watch errors are retried with a backoff).
    pub async fn run(self) -> anyhow::Result<()> {
        watch(self.api, self.wc)
            .modify(trim_managed_fields)
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

/// Drops `metadata.managedFields` from an object before an informer stores it, as
/// kube-controller-manager's shared informers do (their transform "to trim ManagedFields for
/// memory efficiency"). No controller reads them, and they are most of a cached object's
/// memory: a CSR created by its kubelet, approved and signed carries three entries of field
/// sets, about half of its size in the store (10,000 of them held ~50 MiB of the storm's peak
/// RSS). Writing back a trimmed object keeps the stored entries: an update whose object
/// carries no `managedFields` starts from the live object's, upstream's rule and ours.
pub fn trim_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Register a per-object controller: reconcile every object of `source` until the future is
/// dropped, and every object at once each time `redo_all` fires (pass
/// `futures::stream::pending()` when nothing but the objects matters). An error from
/// `reconcile` is logged and the object is retried after its [`Backoff`] delay.
///
/// Each reconcile is counted in `metrics` (`kustos_controller_reconciles_total`, and
/// `..._reconcile_errors_total` when it fails), and the objects changed and not yet
/// reconciled are its `kustos_controller_queue_depth` (requeues waiting for their delay are
/// not, as upstream's workqueue depth leaves out its delayed items).
pub async fn per_object<K, C, E, F, Fut>(
    name: &'static str,
    source: Subscription<K>,
    concurrency: u16,
    metrics: &Metrics,
    ctx: Arc<C>,
    reconcile: F,
    redo_all: impl futures::Stream<Item = ()> + Send + 'static,
) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin,
    C: Context,
    E: std::error::Error + Send + 'static,
    F: FnMut(Arc<K>, Arc<C>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let queue = Queue::new(name, metrics.clone());
    let changes = {
        let queue = queue.clone();
        source.changes.inspect(move |obj| queue.add(key(obj.namespace().as_deref(), &obj.name_any())))
    };
    let reader = source.reader.clone();
    let counted = counted(name, metrics, Some(queue.clone()), reconcile);
    // Unbounded in kube-runtime, bounded (first come, first served) by `in_turn`.
    let results = Controller::for_shared_stream(changes, source.reader)
        .with_config(ControllerConfig::default().concurrency(0))
        .reconcile_all_on(redo_all)
        .run(in_turn(concurrency, reader, queue.clone(), counted), error_policy(name), ctx);
    drive(name, Some(queue), results).await;
    Ok(())
}

/// Run `reconcile` for at most `limit` keys at once, the keys in the order they became due,
/// each with the latest state of its object once its turn comes.
///
/// Why not kube-runtime's own concurrency limit: once its runner is at the limit, it moves
/// every key that falls due into a hash set and, as runs finish, takes the next from that set
/// in hash order. Under a sustained backlog some keys then wait until the backlog is gone:
/// in the bootstrap storm (docs/BENCHMARKS.md) CSRs approved in the first second were signed
/// 14 s later while thousands of younger ones went first. client-go's workqueue, which
/// upstream's controllers run on, is first in, first out. So the runner takes every due key
/// at once (no limit; it still never runs one key twice at once, and a key that changes while
/// its run waits or runs is run again after it), and each run first waits its turn on a fair
/// semaphore (tokio's grants permits in the order they were asked for).
///
/// A run that waited reads its object again from the store: it acts on what is current, and an
/// object deleted meanwhile is not reconciled (as a workqueue key whose object the lister no
/// longer has), only taken off the queue depth.
fn in_turn<K, C, E, F>(
    limit: u16,
    reader: Store<K>,
    queue: Queue,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    C: Send + Sync + 'static,
    E: Send + 'static,
    F: FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>> + Send + 'static,
{
    let permits = Arc::new(tokio::sync::Semaphore::new(usize::from(limit.max(1))));
    let reconcile = Arc::new(Mutex::new(reconcile));
    move |obj: Arc<K>, ctx: Arc<C>| {
        let (permits, reconcile, reader, queue) = (permits.clone(), reconcile.clone(), reader.clone(), queue.clone());
        async move {
            // The semaphore is never closed; should it be, the run goes ahead unbounded.
            let _permit = permits.acquire_owned().await.ok();
            let Some(latest) = reader.get(&ObjectRef::from_obj(&*obj)) else {
                queue.done(&key(obj.meta().namespace.as_deref(), &obj.name_any()));
                return Ok(Action::await_change());
            };
            let run = {
                let mut reconcile = reconcile.lock().unwrap_or_else(|e| e.into_inner());
                (*reconcile)(latest, ctx)
            };
            run.await
        }
        .boxed()
    }
}

/// [`per_object`] over a list and watch of its own (`api`, filtered by `wc`), joined into the
/// same future.
pub async fn per_object_watching<K, C, E, F, Fut>(
    name: &'static str,
    api: Api<K>,
    wc: watcher::Config,
    metrics: &Metrics,
    ctx: Arc<C>,
    reconcile: F,
) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin + Send + Sync,
    C: Context,
    E: std::error::Error + Send + 'static,
    F: FnMut(Arc<K>, Arc<C>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let informer = SharedInformer::new(api, wc);
    let source = informer.subscribe()?;
    let controller = per_object(name, source, 1, metrics, ctx, reconcile, futures::stream::pending());
    tokio::try_join!(informer.run(), controller).map(|_| ())
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
    /// Each waiting key and when it entered.
    keys: Arc<Mutex<HashMap<String, std::time::Instant>>>,
}

impl Queue {
    fn new(name: &'static str, metrics: Metrics) -> Self {
        metrics.set_queue_depth(name, 0);
        Queue { name, metrics, keys: Arc::default() }
    }

    fn add(&self, key: String) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let std::collections::hash_map::Entry::Vacant(e) = keys.entry(key) {
            e.insert(std::time::Instant::now());
            self.metrics.queue_added(self.name);
        }
        self.metrics.set_queue_depth(self.name, keys.len());
    }

    fn done(&self, key: &str) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(added) = keys.remove(key) {
            self.metrics.queue_waited(self.name, added.elapsed());
        }
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

    /// A list that keeps failing is retried less and less often (0.8 s doubling to 30 s):
    /// kube-runtime's own backoff retried it every ~0.8 s, as its watcher's `Init` before each
    /// attempt reset it.
    #[tokio::test(start_paused = true)]
    async fn a_list_that_keeps_failing_is_retried_with_a_growing_delay() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let mock = crate::mock::Mock::new((0..200).map(|_| (404, crate::mock::status(404, "NotFound"))).collect());
        let api = Api::<ConfigMap>::all(mock.client());
        let events = watch(api, watcher::Config::default());
        let minute = tokio::time::sleep(Duration::from_secs(60));
        tokio::pin!(minute);
        futures::pin_mut!(events);
        let mut errors = 0;
        loop {
            tokio::select! {
                _ = &mut minute => break,
                ev = events.next() => match ev {
                    Some(Err(_)) => errors += 1,
                    Some(Ok(_)) => {}
                    None => panic!("the watch ended"),
                },
            }
        }
        let lists = mock.lines().iter().filter(|l| l.starts_with("GET /api/v1/configmaps")).count();
        assert_eq!(lists, errors, "one error per failed list: {:?}", mock.lines());
        // Waits of 0.8, 1.6, 3.2, 6.4, 12.8, 25.6 s (each ±jitter) fit 5 to 8 attempts in a
        // minute; a delay that never grew would make ~75.
        assert!((5..=8).contains(&lists), "{lists} lists in a minute");
    }

    /// `in_turn`: runs start in the order they were asked for, at most `limit` at once; each
    /// reconciles the store's current object; an object gone from the store is skipped.
    #[tokio::test(start_paused = true)]
    async fn runs_take_turns_first_come_first_served_with_the_latest_object() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let cm = |name: &str, v: &str| {
            let mut c = ConfigMap::default();
            c.metadata.name = Some(name.into());
            c.metadata.namespace = Some("ns".into());
            c.data = Some([("v".to_string(), v.to_string())].into());
            Arc::new(c)
        };
        let (reader, mut writer) = reflector::store();
        // Names whose hash order is unlikely to be their order here.
        let names: Vec<String> = (0..40).map(|i| format!("n{}", (i * 7919) % 100)).collect();
        for n in &names {
            writer.apply_watcher_event(&watcher::Event::Apply((*cm(n, "old")).clone()));
        }
        let queue = Queue::new("test", Metrics::new());
        let ran: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let reconcile = {
            let (ran, running, most) = (ran.clone(), running.clone(), most.clone());
            move |obj: Arc<ConfigMap>, _: Arc<()>| {
                let (ran, running, most) = (ran.clone(), running.clone(), most.clone());
                async move {
                    use std::sync::atomic::Ordering::SeqCst;
                    let now = running.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    let v = obj.data.as_ref().and_then(|d| d.get("v")).cloned().unwrap_or_default();
                    ran.lock().unwrap().push((obj.name_any(), v));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    running.fetch_sub(1, SeqCst);
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                }
                .boxed()
            }
        };
        let mut run = in_turn(3, reader, queue, reconcile);
        let mut tasks = Vec::new();
        for n in &names {
            tasks.push(tokio::spawn(run(cm(n, "old"), Arc::new(()))));
            // Let each run ask for its turn before the next is started.
            tokio::task::yield_now().await;
        }
        // While they wait: one object changes, one is deleted.
        let (changed, deleted) = (names[30].clone(), names[35].clone());
        writer.apply_watcher_event(&watcher::Event::Apply((*cm(&changed, "new")).clone()));
        writer.apply_watcher_event(&watcher::Event::Delete((*cm(&deleted, "old")).clone()));
        for t in tasks {
            assert!(t.await.unwrap().is_ok());
        }
        let ran = ran.lock().unwrap().clone();
        let want: Vec<(String, String)> = names
            .iter()
            .filter(|n| **n != deleted)
            .map(|n| (n.clone(), if *n == changed { "new" } else { "old" }.to_string()))
            .collect();
        assert_eq!(ran, want, "in the order asked, the latest object, the deleted one skipped");
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 3, "at most the limit at once, and the limit used");
    }

    /// The store a controller reads holds the objects without `metadata.managedFields` and
    /// otherwise as listed.
    #[tokio::test]
    async fn the_shared_informer_stores_objects_without_managed_fields() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let item = serde_json::json!({
            "metadata": {
                "name": "a", "namespace": "ns", "resourceVersion": "5", "labels": {"k": "v"},
                "managedFields": [{
                    "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:x": {}}},
                }],
            },
            "data": {"x": "1"},
        });
        let list = serde_json::json!({
            "kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": [item],
        });
        let mock = crate::mock::Mock::new(vec![(200, list)]);
        let informer = SharedInformer::new(Api::<ConfigMap>::all(mock.client()), watcher::Config::default());
        let (_changes, store) = informer.subscribe().unwrap().into_parts();
        let task = tokio::spawn(informer.run());
        tokio::time::timeout(Duration::from_secs(10), store.wait_until_ready()).await.unwrap().unwrap();
        task.abort();
        let cached = store.state();
        assert_eq!(cached.len(), 1);
        let cm = &cached[0];
        assert_eq!(cm.metadata.managed_fields, None);
        assert_eq!(cm.metadata.name.as_deref(), Some("a"));
        assert_eq!(cm.metadata.labels.as_ref().and_then(|l| l.get("k")).map(String::as_str), Some("v"));
        assert_eq!(cm.data.as_ref().and_then(|d| d.get("x")).map(String::as_str), Some("1"));
        assert!(mock.lines()[0].starts_with("GET /api/v1/configmaps"), "{:?}", mock.lines());
    }

    /// On Tokio's paused clock: each sync runs when the previous one asked, never later than
    /// the period.
    #[tokio::test(start_paused = true)]
    async fn whole_world_until_wakes_when_asked_and_at_the_period() {
        let period = Duration::from_secs(300);
        let asks = [Some(Duration::from_secs(10)), Some(Duration::from_secs(900)), None, None];
        let seen: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let start = tokio::time::Instant::now();
        let task = tokio::spawn({
            let seen = seen.clone();
            whole_world_until("test", Vec::new(), period, Metrics::default(), move || {
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
                ms(10_000),           // asked for 10 s
                ms(10_000 + 300_000), // asked for 900 s: the period wins
                ms(10_000 + 600_000), // nothing asked: the period
            ],
            "sync times"
        );
    }
}
