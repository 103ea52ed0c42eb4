//! The one controller runtime: a work queue as client-go's ([`queue`]: per-key deduplication,
//! never one key run twice at once, first in, first out, delayed requeues), whose workers run
//! a controller's reconcile up to `concurrency` at once and requeue each key after the
//! [`Action`] its reconcile returned or its error policy chose. Every controller of this crate
//! runs on it, in one of two registrations:
//!
//! - [`per_object`]: the keys are the objects of a [`SharedInformer`]'s store; a change to an
//!   object costs one reconcile of that object (the CSR controllers, `tokencleaner`).
//! - [`whole_world`]: one key for the whole controller, for controllers whose decision reads
//!   everything they watch at once (`serviceaccount`, `root-ca-cert-publisher`, …). Any
//!   trigger ([`changes`], [`file_changes`]) requests that key; a trigger arriving while a sync
//!   runs queues exactly one more sync after it (as client-go's workqueue with a single key,
//!   which is how upstream's bootstrap signer runs).
//!
//! Why a queue of our own rather than kube-runtime's `Controller`: that one kept every key
//! waiting for its turn as a running future in its scheduler, scanned its pending set on
//! every poll, and took a backlog in hash order once at its limit; in the bootstrap storm its
//! runner was 5–8 % of the server's CPU outside the reconciles (docs/BENCHMARKS.md,
//! "Speed II"). The work queue keeps keys, not futures, and serves them in order.
//!
//! Resync and backoff: a successful reconcile returns when to look again ([`Action`]; a
//! whole-world sync runs again after the resync period at the latest); a failed one is
//! retried after its key's [`Backoff`] delay (doubling per consecutive failure, forgotten on
//! success). Each reconcile counts in [`Metrics`] (`kustos_controller_reconciles_total`,
//! `..._reconcile_errors_total`); per-object controllers also report their queue depth.
//!
//! Ownership: a registration is a future, never a spawned task; its workers, its informer, CA
//! file pollers and a deletion watch are joined into that same future. [`crate::run`] owns
//! every controller future in one `JoinSet` and, at shutdown (or leadership loss), aborts them
//! and awaits their end: when it returns, nothing a controller started is left running, so
//! nothing writes any more.

mod queue;

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt as _};
use kube::runtime::reflector::{self, store::Writer, ObjectRef, ReflectHandle, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::metrics::Metrics;
use queue::WorkQueue;

/// What a reconcile asks of the runtime when it has succeeded (or its error policy, when it
/// failed): look at the object again after a delay, or only when it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again after `after`, even if nothing changes.
    pub const fn requeue(after: Duration) -> Self {
        Action { requeue_after: Some(after) }
    }

    /// Reconcile again only when the object changes.
    pub const fn await_change() -> Self {
        Action { requeue_after: None }
    }

    /// When to reconcile again without a change (`None`: never).
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

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
            let now = kustos_filework::read(path.clone()).await.ok();
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
    whole_world_until(name, triggers, period, metrics, move || {
        let fut = sync();
        async move { fut.await.map(|()| None) }
    })
    .await
}

/// Like [`whole_world`], for a `sync` that knows when the world changes without an event
/// (a token expiring): it returns how soon to run again at the latest (`None`: `period`).
/// A failed sync is logged and retried after a delay that doubles per consecutive failure
/// (0.25 s up to 30 s), or at the next trigger if that comes first.
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
    // Ended trigger streams (or none at all) leave only the timer.
    let mut triggers = futures::stream::select_all(triggers).chain(futures::stream::pending());
    let backoff = Backoff::new(WORLD_BACKOFF_BASE, WORLD_BACKOFF_MAX);
    // Whether a sync is due at once: at start, and after a trigger that came while one ran.
    let mut due = true;
    let mut wait = period;
    loop {
        if !due {
            tokio::select! {
                _ = triggers.next() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
        due = false;
        let run = sync();
        tokio::pin!(run);
        let start = std::time::Instant::now();
        let result = loop {
            tokio::select! {
                r = &mut run => break r,
                _ = triggers.next() => due = true,
            }
        };
        metrics.worked(name, start.elapsed());
        metrics.reconciled(name, result.is_ok());
        wait = match result {
            Ok(next) => {
                backoff.forget(name);
                next.map_or(period, |n| n.min(period))
            }
            Err(e) => retry_delay(name, name, &format_args!("{e:#}"), &backoff),
        };
    }
}

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
/// `concurrency` workers (at least one) take the changed objects' keys from a work queue
/// ([`queue`]) in the order they changed, each run with the store's current object: an object
/// deleted before its turn is not reconciled (as a workqueue key whose object the lister no
/// longer has). A key is never run twice at once; one that changes while it runs is run again
/// after.
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
    let Subscription { changes, reader } = source;
    let queue = WorkQueue::<ObjectRef<K>>::new(name, metrics.clone());
    let feed = changes.for_each(|obj| {
        queue.add(ObjectRef::from_obj(&*obj));
        std::future::ready(())
    });
    let redo = redo_all.for_each(|()| {
        queue.add_all(reader.state().iter().map(|obj| ObjectRef::from_obj(&**obj)));
        std::future::ready(())
    });
    let reconcile = Mutex::new(reconcile);
    let workers = futures::future::join_all(
        (0..concurrency.max(1)).map(|_| work(name, &queue, &reader, metrics, &ctx, &reconcile)),
    );
    tokio::join!(feed, redo, workers);
    Ok(())
}

/// One worker of [`per_object`]: take a key, reconcile the store's object, requeue as the
/// result says; for ever.
async fn work<K, C, E, F, Fut>(
    name: &'static str,
    queue: &WorkQueue<ObjectRef<K>>,
    reader: &Store<K>,
    metrics: &Metrics,
    ctx: &Arc<C>,
    reconcile: &Mutex<F>,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
    C: Context,
    E: std::error::Error,
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    loop {
        let key = queue.get().await;
        let Some(obj) = reader.get(&key) else {
            queue.done(&key);
            continue;
        };
        // Boxed: a worker waiting for a key then holds a pointer, not a reconcile's whole
        // state (kilobytes for one that awaits a request), times `concurrency`, for ever.
        let run = {
            let mut reconcile = reconcile.lock().unwrap_or_else(|e| e.into_inner());
            Box::pin((*reconcile)(obj.clone(), ctx.clone()))
        };
        let start = std::time::Instant::now();
        let result = run.await;
        metrics.worked(name, start.elapsed());
        metrics.reconciled(name, result.is_ok());
        let action = match result {
            Ok(action) => action,
            Err(e) => Action::requeue(retry_delay(name, &obj.name_any(), &e, ctx.backoff())),
        };
        if let Some(after) = action.requeue_after() {
            queue.add_after(key.clone(), after);
        }
        queue.done(&key);
    }
}

/// [`per_object`] over a list and watch of its own (`api`, filtered by `wc`), joined into the
/// same future; `redo_all` as there.
pub async fn per_object_watching<K, C, E, F, Fut>(
    name: &'static str,
    api: Api<K>,
    wc: watcher::Config,
    metrics: &Metrics,
    ctx: Arc<C>,
    reconcile: F,
    redo_all: impl futures::Stream<Item = ()> + Send + 'static,
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
    let controller = per_object(name, source, 1, metrics, ctx, reconcile, redo_all);
    tokio::try_join!(informer.run(), controller).map(|_| ())
}

/// What a failed reconcile (or whole-world sync) of `object` does: log, and wait its key's
/// [`Backoff`] delay before the retry.
fn retry_delay(controller: &str, object: &str, error: &dyn std::fmt::Display, backoff: &Backoff) -> Duration {
    let delay = backoff.next(object);
    tracing::warn!(controller, object = %object, error = %error, retry_in = ?delay, "reconcile failed");
    delay
}

/// The delay until `deadline`, at least `min` (for requeues at a wall-clock time).
pub fn until(deadline: chrono::DateTime<chrono::Utc>, now: chrono::DateTime<chrono::Utc>, min: Duration) -> Duration {
    (deadline - now).to_std().unwrap_or(Duration::ZERO).max(min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

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

    struct TestContext(Backoff);

    impl Context for TestContext {
        fn backoff(&self) -> &Backoff {
            &self.0
        }
    }

    type Events = futures::channel::mpsc::UnboundedSender<watcher::Result<watcher::Event<ConfigMap>>>;

    fn config_map(name: &str, v: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.data = Some([("v".to_string(), v.to_string())].into());
        c
    }

    /// A `per_object` controller over a store fed by the returned sender, its informer and
    /// controller joined in one spawned task.
    fn start<F, Fut>(concurrency: u16, reconcile: F) -> (Events, tokio::task::JoinHandle<()>)
    where
        F: FnMut(Arc<ConfigMap>, Arc<TestContext>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Action, std::io::Error>> + Send + 'static,
    {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (reader, writer) = reflector::store_shared(SHARED_BUFFER);
        let changes = writer.subscribe().unwrap();
        let informer = rx.reflect_shared(writer).for_each(|_| std::future::ready(()));
        let ctx = Arc::new(TestContext(Backoff::new(Duration::from_millis(100), Duration::from_secs(1))));
        let source = Subscription { changes, reader };
        let task = tokio::spawn(async move {
            let metrics = Metrics::new();
            let controller =
                per_object("test", source, concurrency, &metrics, ctx, reconcile, futures::stream::pending());
            let ((), _) = tokio::join!(informer, controller);
        });
        (tx, task)
    }

    /// A worker keeps its reconcile's future boxed: a reconcile holding 16 KiB across an await
    /// does not make every idle worker (32 per CSR controller) 16 KiB.
    #[test]
    fn an_idle_worker_is_small_whatever_its_reconcile_holds() {
        let (reader, _writer) = reflector::store::<ConfigMap>();
        let metrics = Metrics::new();
        let queue = WorkQueue::<ObjectRef<ConfigMap>>::new("test", metrics.clone());
        let ctx = Arc::new(TestContext(Backoff::new(Duration::from_millis(100), Duration::from_secs(1))));
        let reconcile = Mutex::new(|obj: Arc<ConfigMap>, _: Arc<TestContext>| async move {
            let held = [obj.name_any().len() as u8; 16 * 1024];
            tokio::task::yield_now().await;
            Ok::<_, std::io::Error>(if held.iter().all(|b| *b == 0) {
                Action::await_change()
            } else {
                Action::requeue(Duration::from_secs(1))
            })
        });
        let reconcile_size =
            std::mem::size_of_val(&(reconcile.lock().unwrap())(Arc::new(config_map("a", "v")), ctx.clone()));
        assert!(reconcile_size >= 16 * 1024, "the reconcile future holds its buffer: {reconcile_size} bytes");
        let worker = work("test", &queue, &reader, &metrics, &ctx, &reconcile);
        let size = std::mem::size_of_val(&worker);
        assert!(size < 1024, "an idle worker is {size} bytes; its reconcile future is {reconcile_size}");
    }

    /// Runs start in the order the objects changed, at most `concurrency` at once; each
    /// reconciles the store's current object; an object gone from the store is skipped.
    #[tokio::test(start_paused = true)]
    async fn runs_take_turns_first_come_first_served_with_the_latest_object() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let ran: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (events, task) = start(3, {
            let (ran, running, most) = (ran.clone(), running.clone(), most.clone());
            move |obj: Arc<ConfigMap>, _| {
                let (ran, running, most) = (ran.clone(), running.clone(), most.clone());
                async move {
                    let now = running.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    let v = obj.data.as_ref().and_then(|d| d.get("v")).cloned().unwrap_or_default();
                    ran.lock().unwrap().push((obj.name_any(), v));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    running.fetch_sub(1, SeqCst);
                    Ok(Action::await_change())
                }
            }
        });
        // Names whose hash order is unlikely to be their order here.
        let names: Vec<String> = (0..40).map(|i| format!("n{}", (i * 7919) % 100)).collect();
        for n in &names {
            events.unbounded_send(Ok(watcher::Event::Apply(config_map(n, "old")))).unwrap();
        }
        // Everything runnable runs before the paused clock moves: the first three are running.
        tokio::time::sleep(Duration::from_millis(1)).await;
        // While the rest wait: one object changes, one is deleted.
        let (changed, deleted) = (names[30].clone(), names[35].clone());
        events.unbounded_send(Ok(watcher::Event::Apply(config_map(&changed, "new")))).unwrap();
        events.unbounded_send(Ok(watcher::Event::Delete(config_map(&deleted, "old")))).unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        task.abort();
        let ran = ran.lock().unwrap().clone();
        let want: Vec<(String, String)> = names
            .iter()
            .filter(|n| **n != deleted)
            .map(|n| (n.clone(), if *n == changed { "new" } else { "old" }.to_string()))
            .collect();
        assert_eq!(ran, want, "in the order changed, once each, the latest object, the deleted one skipped");
        assert_eq!(most.load(SeqCst), 3, "at most the limit at once, and the limit used");
    }

    /// A key is never run twice at once; a change during its run brings one more run after it;
    /// a failure is retried after the key's backoff; a requeue comes after its delay.
    #[tokio::test(start_paused = true)]
    async fn one_run_per_key_at_a_time_then_backoff_and_requeue() {
        let start_at = tokio::time::Instant::now();
        let ran: Arc<Mutex<Vec<(u128, String)>>> = Arc::default();
        let (events, task) = start(4, {
            let ran = ran.clone();
            move |obj: Arc<ConfigMap>, _| {
                let ran = ran.clone();
                async move {
                    let v = obj.data.as_ref().and_then(|d| d.get("v")).cloned().unwrap_or_default();
                    let at = (tokio::time::Instant::now() - start_at).as_millis();
                    ran.lock().unwrap().push((at, v.clone()));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    match v.as_str() {
                        "fail" => Err(std::io::Error::other("failing")),
                        _ => Ok(Action::requeue(Duration::from_secs(60))),
                    }
                }
            }
        });
        events.unbounded_send(Ok(watcher::Event::Apply(config_map("a", "fail")))).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Changed twice while its first run is under way: one more run, after it.
        events.unbounded_send(Ok(watcher::Event::Apply(config_map("a", "fail")))).unwrap();
        events.unbounded_send(Ok(watcher::Event::Apply(config_map("a", "fail")))).unwrap();
        // 50 ms later the second run starts; it fails at 100 ms, the third starts 200 ms
        // after (the second failure's delay), fails at 350 ms; then it succeeds.
        tokio::time::sleep(Duration::from_millis(320)).await;
        events.unbounded_send(Ok(watcher::Event::Apply(config_map("a", "ok")))).unwrap();
        tokio::time::sleep(Duration::from_secs(70)).await;
        task.abort();
        let ran = ran.lock().unwrap().clone();
        let want: Vec<(u128, String)> = [
            (0, "fail"),    // first run; fails at 50 ms and asks for 100 ms, but the key is dirty
            (50, "fail"),   // the change during the first run, at once after it
            (300, "fail"),  // after the second failure's 200 ms (at 100 ms)
            (350, "ok"),    // the change at 330 ms waits for the run to end
            (60_400, "ok"), // the requeue the success asked for, 60 s after it ended
        ]
        .into_iter()
        .map(|(t, v)| (t, v.to_string()))
        .collect();
        assert_eq!(ran, want);
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

    /// On Tokio's paused clock: triggers during a sync bring exactly one more sync, at once
    /// after it; a failed sync is retried after 0.25 s, then 0.5 s, or at the next trigger if
    /// that comes first; a success forgets the failures.
    #[tokio::test(start_paused = true)]
    async fn whole_world_triggers_during_a_sync_and_failures() {
        // What each sync does, in turn: how long it takes, and whether it fails.
        let plan: &[(u64, bool)] = &[(100, false), (100, true), (0, true), (0, true), (0, false), (0, true)];
        let (tx, rx) = futures::channel::mpsc::unbounded::<()>();
        let seen: Arc<Mutex<Vec<u128>>> = Arc::default();
        let start = tokio::time::Instant::now();
        let task = tokio::spawn({
            let seen = seen.clone();
            let period = Duration::from_secs(3600);
            whole_world("test", vec![rx.boxed()], period, Metrics::default(), move || {
                let seen = seen.clone();
                async move {
                    let n = {
                        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                        s.push((tokio::time::Instant::now() - start).as_millis());
                        s.len() - 1
                    };
                    let (takes, fails) = plan.get(n).copied().unwrap_or((0, false));
                    tokio::time::sleep(Duration::from_millis(takes)).await;
                    if fails {
                        anyhow::bail!("sync {n} fails");
                    }
                    Ok(())
                }
            })
        });
        let at = |ms: u64| tokio::time::sleep_until(start + Duration::from_millis(ms));
        // Three triggers during the first sync (0–100 ms): one more sync, at 100 ms.
        for ms in [10, 20, 30] {
            at(ms).await;
            tx.unbounded_send(()).unwrap();
        }
        // The second sync fails at 200 ms: retried at 450 ms, that one fails: retried 0.5 s
        // later, at 950 ms; it fails too, but a trigger at 1000 ms comes before its 1 s delay.
        at(1000).await;
        tx.unbounded_send(()).unwrap();
        // The sync at 1000 ms succeeds; the next trigger brings a sync that fails, retried
        // after 0.25 s again (the success forgot the failures).
        at(2000).await;
        tx.unbounded_send(()).unwrap();
        at(3000).await;
        task.abort();
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(seen, vec![0, 100, 450, 950, 1000, 2000, 2250], "sync times (ms)");
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
