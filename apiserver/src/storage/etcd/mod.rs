//! The [`Storage`] trait on etcd v3, for several apiservers on one cluster state.
//!
//! - A key `/registry/<rest>` lives at `<prefix>/<rest>` in etcd (`--etcd-prefix`, default
//!   `/registry`); values are stored as they are.
//! - The revision is etcd's: a resourceVersion is the key's `mod_revision`, and a list reads at
//!   one etcd revision.
//! - create, update and delete are transactions comparing `create_revision` and
//!   `mod_revision`, so optimistic concurrency holds across every apiserver on the same etcd.
//! - Watches: one etcd watch per process feeds a window of recent events in memory. A watch
//!   starting inside that window is served from it and then from the live feed; an older one,
//!   or one that falls behind, gets an etcd watch of its own from its revision. After an
//!   outage the feed resumes where it stopped, so watches continue.
//! - Reads: the same feed keeps the watch cache of `cache.rs` (every key's latest value, in
//!   memory). A read of the current state asks etcd for its current revision (one small,
//!   linearizable request, shared when several are under way: [`RevProbe`]), waits until the
//!   cache has seen that revision and answers from memory, as kube-apiserver's consistent
//!   reads from its watch cache; a read at an exact revision the cache cannot prove unchanged,
//!   and any read the cache cannot serve within [`CACHE_WAIT`], goes to etcd.
//! - History: the compactor compacts etcd like the SQLite backend compacts its history (keep
//!   `--history-revisions`), and reads or watches older than the compaction are `Compacted`.
//! - Every unary call is bounded by [`REQUEST_TIMEOUT`]; an unreachable etcd is
//!   `Unavailable` (503), a slow one `Timeout` (504).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, GetResponse, KvClient, Txn, TxnOp,
    TxnOpResponse, WatchOptions, WatchStream,
};
use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::broadcast;

mod cache;
mod config;
mod watch;
pub use config::{EtcdConfig, EtcdConfigError};

use cache::{Cache, Change, Read};
use watch::{etcd_range, run_feed, watch_step, KeyGuard, Source, WatchState};

use super::compactor::{self, Compact};
use super::fanout::{next_live, Live, Scope};
use super::memo::Memo;
use super::{Error, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Rev, Storage};
use crate::work;

/// The prefix every trait key starts with.
const TRAIT_ROOT: &str = "/registry";
/// Longest wait for one etcd request before the caller gets a 504.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys read per range request when a list pages through a prefix.
const RANGE_CHUNK: usize = 1000;
/// Recent events kept in memory for watches that start a little in the past.
const WINDOW_EVENTS: usize = 4096;
/// Live events buffered per watcher before it is moved to an etcd watch of its own.
const BROADCAST_CAPACITY: usize = 4096;
/// Live events buffered per single-key watcher.
const KEY_CAPACITY: usize = 64;
/// Largest gRPC message accepted from etcd (a range page or a batch of watch events).
const MAX_MESSAGE: usize = 64 << 20;
/// Pause between attempts to re-open the process's etcd watch after it broke.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Longest wait for the watch cache to reach etcd's current revision before a read goes to
/// etcd instead.
pub const CACHE_WAIT: Duration = Duration::from_secs(3);

/// Maps trait keys (`/registry/...`) to etcd keys under the configured prefix and back.
#[derive(Debug, Clone)]
struct Keys {
    /// The prefix without its trailing `/`.
    root: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Keys { root: prefix.trim_end_matches('/').to_string() }
    }

    fn etcd_key(&self, key: &str) -> Result<Vec<u8>> {
        let rest = key
            .strip_prefix(TRAIT_ROOT)
            .filter(|r| r.is_empty() || r.starts_with('/'))
            .ok_or_else(|| Error::Backend(format!("key {key:?} is outside {TRAIT_ROOT}")))?;
        Ok(format!("{}{rest}", self.root).into_bytes())
    }

    fn trait_key(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.root)?;
        (rest.is_empty() || rest.starts_with('/')).then(|| format!("{TRAIT_ROOT}{rest}"))
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: to the end of the keyspace.
    vec![0]
}

fn rev_of(r: i64) -> Rev {
    Rev::try_from(r).unwrap_or(0)
}

fn etcd_rev(r: Rev) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

/// What an etcd error means to the apiserver.
fn map_err(e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => {
            let msg = s.message().to_string();
            match s.code() {
                tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Aborted => {
                    Error::Unavailable(format!("etcd is unavailable: {msg}"))
                }
                tonic::Code::DeadlineExceeded => Error::Timeout(format!("etcd did not answer in time: {msg}")),
                // The connection broke during the call (etcd went away mid-request).
                tonic::Code::Unknown if std::error::Error::source(&s).is_some() || msg.contains("transport error") => {
                    Error::Unavailable(format!("lost the connection to etcd: {msg}"))
                }
                _ => Error::Backend(format!("etcd: {msg}")),
            }
        }
        E::TransportError(t) => Error::Unavailable(format!("etcd is unreachable: {t}")),
        E::IoError(io) => Error::Unavailable(format!("etcd is unreachable: {io}")),
        other => Error::Backend(format!("etcd: {other}")),
    }
}

/// The message etcd gives for reads below its compaction revision.
fn is_compacted(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("required revision has been compacted"))
}

fn is_future(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("future revision"))
}

/// Run one etcd call, bounded by [`REQUEST_TIMEOUT`].
async fn bounded<T>(
    what: &str,
    f: impl std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> std::result::Result<T, EtcdCallError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map_err(EtcdCallError::Etcd),
        Err(_) => Err(EtcdCallError::TimedOut(format!("etcd did not answer {what} within {REQUEST_TIMEOUT:?}"))),
    }
}

enum EtcdCallError {
    Etcd(etcd_client::Error),
    TimedOut(String),
}

impl From<EtcdCallError> for Error {
    fn from(e: EtcdCallError) -> Self {
        match e {
            EtcdCallError::Etcd(e) => map_err(e),
            EtcdCallError::TimedOut(m) => Error::Timeout(m),
        }
    }
}

/// The shared part of the store: the client, revisions, and the event window.
struct Inner {
    client: Client,
    keys: Keys,
    /// Newest revision seen in any response or event.
    rev: AtomicU64,
    /// Oldest readable revision, as far as this process knows (its own compactions, and
    /// compactions reported by etcd).
    compacted: AtomicU64,
    window: Mutex<Window>,
    /// Every key's latest state, fed with the window.
    cache: Cache,
    /// Shares one request for etcd's current revision among the reads waiting at once.
    current: RevProbe,
}

/// etcd's current revision for consistent reads, one request for many readers: a reader may
/// use the answer of any request sent after it arrived (that answer is at least as new as
/// every write completed before the read began).
///
/// Up to [`PROBES_IN_FLIGHT`] requests run at once: a reader that finds none usable sends
/// its own while a slot is free, and waits for the next answer only when every slot is
/// taken. With one request at a time, a reader arriving just after a request left waited for
/// that request and then for its own: two round trips, the GET latency tail.
struct RevProbe {
    /// Requests started so far (each request's number is the count when it started).
    started: AtomicU64,
    /// The completed request started last (its number, its revision); every freed slot
    /// (a request answered, failed or cancelled) notifies the readers waiting.
    done: tokio::sync::watch::Sender<(u64, Rev)>,
    slots: tokio::sync::Semaphore,
}

/// etcd requests for the current revision in flight at once (see [`RevProbe`]).
const PROBES_IN_FLIGHT: usize = 4;

/// One of [`RevProbe`]'s slots: when dropped, also by a reader cancelled mid-request, it is
/// freed and the waiting readers are woken to take it.
struct ProbeSlot<'a> {
    permit: Option<tokio::sync::SemaphorePermit<'a>>,
    done: &'a tokio::sync::watch::Sender<(u64, Rev)>,
}

impl Drop for ProbeSlot<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.done.send_modify(|_| {});
    }
}

impl Default for RevProbe {
    fn default() -> Self {
        RevProbe {
            started: AtomicU64::new(0),
            done: tokio::sync::watch::channel((0, 0)).0,
            slots: tokio::sync::Semaphore::new(PROBES_IN_FLIGHT),
        }
    }
}

/// Recent events and the live feeds, behind one lock so that a new watcher takes the past
/// from the window and the future from a channel without a gap or a repeat.
struct Window {
    events: VecDeque<Arc<Event>>,
    /// Every event with revision > `start` and ≤ `pos` is in `events`.
    start: Rev,
    /// The feed has delivered every event with revision ≤ `pos`.
    pos: Rev,
    all: broadcast::Sender<Arc<Event>>,
    by_key: HashMap<String, broadcast::Sender<Arc<Event>>>,
}

impl Window {
    fn new(pos: Rev) -> Self {
        Window {
            events: VecDeque::new(),
            start: pos,
            pos,
            all: broadcast::channel(BROADCAST_CAPACITY).0,
            by_key: HashMap::new(),
        }
    }

    fn push(&mut self, ev: Event) {
        let ev = Arc::new(ev);
        self.pos = self.pos.max(ev.rev);
        if let Some(tx) = self.by_key.get(&ev.key) {
            let _ = tx.send(ev.clone());
        }
        let _ = self.all.send(ev.clone());
        self.events.push_back(ev);
        while self.events.len() > WINDOW_EVENTS {
            if let Some(old) = self.events.pop_front() {
                self.start = old.rev;
            }
        }
    }

    /// The feed could not continue from `pos` (history compacted while it was away): every
    /// watcher fed so far is ended (they see `Compacted` and start over), and the window
    /// restarts at `pos`.
    fn reset(&mut self, pos: Rev) {
        *self = Window::new(pos);
    }
}

impl Inner {
    fn kv(&self) -> KvClient {
        self.client.kv_client().max_decoding_message_size(MAX_MESSAGE)
    }

    fn saw(&self, rev: i64) {
        self.rev.fetch_max(rev_of(rev), Ordering::SeqCst);
    }

    fn saw_header(&self, h: Option<&etcd_client::ResponseHeader>) -> Rev {
        let r = h.map(|h| h.revision()).unwrap_or(0);
        self.saw(r);
        rev_of(r)
    }

    fn compacted_error(&self, requested: Rev) -> Error {
        let compacted = self.compacted.load(Ordering::SeqCst).max(requested.saturating_add(1));
        Error::Compacted { requested, compacted }
    }

    fn key_value(&self, kv: &etcd_client::KeyValue) -> Option<KeyValue> {
        Some(KeyValue {
            key: self.keys.trait_key(kv.key())?,
            value: kv.value().to_vec(),
            create_rev: rev_of(kv.create_revision()),
            mod_rev: rev_of(kv.mod_revision()),
        })
    }

    /// One range request; `at` None reads the newest revision.
    async fn range(&self, key: Vec<u8>, opts: GetOptions, at: Option<Rev>) -> Result<GetResponse> {
        let opts = match at {
            Some(r) => opts.with_revision(etcd_rev(r)),
            None => opts,
        };
        match bounded("a read", self.kv().get(key, Some(opts))).await {
            Ok(resp) => {
                self.saw_header(resp.header());
                Ok(resp)
            }
            Err(EtcdCallError::Etcd(e)) if is_compacted(&e) => Err(self.compacted_error(at.unwrap_or(0))),
            Err(EtcdCallError::Etcd(e)) if is_future(&e) => {
                Err(Error::FutureRevision { requested: at.unwrap_or(0), current: self.rev.load(Ordering::SeqCst) })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One page of keys under `prefix`, read from etcd.
    async fn list_etcd(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        let inner = self;
        let start_key = inner.keys.etcd_key(prefix)?;
        let end = prefix_end(&start_key);
        let mut from = match &opts.start_after {
            // The first key after `start_after`.
            Some(k) => {
                let mut k = inner.keys.etcd_key(k)?;
                k.push(0);
                k.max(start_key)
            }
            None => start_key,
        };
        let want = opts.limit.filter(|l| *l > 0);
        let mut at = opts.at_rev;
        let mut items = Vec::new();
        loop {
            let chunk = want.map(|w| w - items.len()).unwrap_or(RANGE_CHUNK).min(RANGE_CHUNK);
            let o = GetOptions::new().with_range(end.clone()).with_limit(i64::try_from(chunk).unwrap_or(i64::MAX));
            let resp = inner.range(from.clone(), o, at).await?;
            let read_at = at.unwrap_or_else(|| rev_of(resp.header().map(|h| h.revision()).unwrap_or(0)));
            at = Some(read_at);
            let kvs = resp.kvs();
            let total = u64::try_from(resp.count()).unwrap_or(0);
            items.extend(kvs.iter().filter_map(|kv| inner.key_value(kv)));
            let last = kvs.last().map(|kv| kv.key().to_vec());
            let got = kvs.len() as u64;
            let full = want.is_some_and(|w| items.len() >= w);
            match last {
                Some(last) if total > got && !full => {
                    from = last;
                    from.push(0);
                }
                _ => {
                    let remaining = total.saturating_sub(got);
                    return Ok(ListResult { items, rev: read_at, remaining });
                }
            }
        }
    }

    /// Everything under the prefix at one revision, to load the watch cache.
    async fn load(&self) -> Result<(Vec<KeyValue>, Rev)> {
        let all = self.list_etcd(&format!("{TRAIT_ROOT}/"), ListOptions::default()).await?;
        Ok((all.items, all.rev))
    }

    /// etcd's current revision, from a request sent after this call began (shared with the
    /// other callers waiting at the same time).
    async fn etcd_current_rev(&self) -> Result<Rev> {
        let probe = &self.current;
        let mut done = probe.done.subscribe();
        let arrived = probe.started.load(Ordering::SeqCst);
        loop {
            let (n, rev) = *done.borrow_and_update();
            if n > arrived {
                return Ok(rev);
            }
            if let Ok(permit) = probe.slots.try_acquire() {
                let slot = ProbeSlot { permit: Some(permit), done: &probe.done };
                let n = probe.started.fetch_add(1, Ordering::SeqCst) + 1;
                let key = self.keys.root.clone().into_bytes();
                let got = self.range(key, GetOptions::new().with_count_only(), None).await;
                let got = got.map(|resp| rev_of(resp.header().map(|h| h.revision()).unwrap_or(0)));
                if let Ok(rev) = &got {
                    probe.done.send_if_modified(|last| {
                        let newer = n > last.0;
                        if newer {
                            *last = (n, *rev);
                        }
                        newer
                    });
                }
                drop(slot);
                return got;
            }
            // Every slot is taken: the next completion frees one or answers this reader.
            if done.changed().await.is_err() {
                return Err(Error::Backend("the etcd revision probe is gone".into()));
            }
        }
    }

    /// For a read of the current state: etcd's current revision once the watch cache has
    /// reached it, or None when the cache is not ready or does not get there in
    /// [`CACHE_WAIT`] (the read then goes to etcd).
    async fn fresh(&self) -> Result<Option<Rev>> {
        if self.cache.rev() == 0 {
            return Ok(None);
        }
        let rev = self.etcd_current_rev().await?;
        if self.cache.wait_for(rev, CACHE_WAIT).await {
            Ok(Some(rev))
        } else {
            tracing::debug!(rev, cache = self.cache.rev(), "watch cache behind etcd; reading etcd");
            Ok(None)
        }
    }

    /// A transaction that writes `then` when `when` holds, else reads the key (to say why).
    async fn txn(&self, key: &[u8], when: Vec<Compare>, then: TxnOp) -> Result<std::result::Result<Rev, Option<Rev>>> {
        let txn = Txn::new().when(when).and_then(vec![then]).or_else(vec![TxnOp::get(key.to_vec(), None)]);
        let resp = bounded("a write", self.kv().txn(txn)).await?;
        let rev = self.saw_header(resp.header());
        if resp.succeeded() {
            return Ok(Ok(rev));
        }
        let current = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(|kv| rev_of(kv.mod_revision()))),
            _ => None,
        });
        Ok(Err(current.flatten()))
    }

    /// Turn an etcd watch event into the trait's event (None for keys outside the cluster).
    fn event(&self, ev: &etcd_client::Event) -> Option<Event> {
        let kv = ev.kv()?;
        let key = self.keys.trait_key(kv.key())?;
        let rev = rev_of(kv.mod_revision());
        let prev = ev.prev_kv().map(|p| p.value().to_vec());
        Some(match ev.event_type() {
            EventType::Put if kv.create_revision() == kv.mod_revision() => Event {
                kind: EventKind::Created,
                rev,
                key,
                value: kv.value().to_vec(),
                prev_value: None,
                memo: Memo::default(),
            },
            EventType::Put => Event {
                kind: EventKind::Updated,
                rev,
                key,
                value: kv.value().to_vec(),
                prev_value: prev,
                memo: Memo::default(),
            },
            EventType::Delete => {
                let last = prev.unwrap_or_default();
                Event {
                    kind: EventKind::Deleted,
                    rev,
                    key,
                    value: last.clone(),
                    prev_value: Some(last),
                    memo: Memo::default(),
                }
            }
        })
    }

    /// Open an etcd watch of `[key, end)` from revision `after + 1`.
    async fn open_watch(&self, key: Vec<u8>, end: Option<Vec<u8>>, after: Rev) -> Result<WatchStream> {
        let mut opts = WatchOptions::new().with_start_revision(etcd_rev(after.saturating_add(1))).with_prev_key();
        if let Some(end) = end {
            opts = opts.with_range(end);
        }
        let mut client = self.client.watch_client().max_decoding_message_size(MAX_MESSAGE);
        Ok(bounded("a watch", client.watch(key, Some(opts))).await?)
    }
}

/// etcd as the apiserver's store.
pub struct EtcdStorage {
    inner: Arc<Inner>,
    feed: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field("prefix", &self.inner.keys.root)
            .field("rev", &self.inner.rev.load(Ordering::SeqCst))
            .finish()
    }
}

impl Drop for EtcdStorage {
    fn drop(&mut self) {
        self.feed.abort();
    }
}

impl EtcdStorage {
    /// Connect, check that etcd answers (one read), and start the event feed. Must run inside
    /// a Tokio runtime.
    pub async fn connect(cfg: &EtcdConfig) -> Result<EtcdStorage> {
        cfg.validate().map_err(|e| Error::Backend(e.to_string()))?;
        let opts = cfg.connect_options().map_err(|e| Error::Backend(e.to_string()))?;
        let client = bounded("the connection", Client::connect(&cfg.servers, Some(opts))).await?;
        let keys = Keys::new(&cfg.prefix);
        let inner = Arc::new(Inner {
            client,
            keys,
            rev: AtomicU64::new(0),
            compacted: AtomicU64::new(0),
            window: Mutex::new(Window::new(0)),
            cache: Cache::default(),
            current: RevProbe::default(),
        });
        let (items, pos) = inner.load().await.map_err(|e| match e {
            Error::Unavailable(m) | Error::Timeout(m) => {
                Error::Unavailable(format!("{m} (--etcd-servers {})", cfg.servers.join(",")))
            }
            other => other,
        })?;
        inner.cache.reset(items, pos);
        *lock(&inner.window) = Window::new(pos);
        let feed = tokio::spawn(run_feed(Arc::downgrade(&inner), pos));
        Ok(EtcdStorage { inner, feed })
    }

    /// Compact etcd every `every`, keeping the newest `keep_revisions` revisions (as the
    /// SQLite backend keeps its history). Each apiserver runs one; a compaction another one
    /// already did is not an error.
    pub fn compactor_every(
        store: Arc<Self>,
        keep_revisions: u64,
        every: Duration,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        compactor::run(store, keep_revisions, every)
    }

    /// A watch served from the window and the live feed, or None when `after` is older than
    /// the window (the caller then opens an etcd watch).
    fn subscribe(&self, scope: &Scope, after: Rev) -> Option<WatchState> {
        let mut w = lock(&self.inner.window);
        if after < w.start {
            return None;
        }
        let backlog: VecDeque<Event> =
            w.events.iter().filter(|e| e.rev > after && scope.matches(&e.key)).map(|e| Event::clone(e)).collect();
        let (rx, guard) = match scope {
            Scope::Prefix(_) => (w.all.subscribe(), None),
            Scope::Key(k) => {
                let tx = w.by_key.entry(k.clone()).or_insert_with(|| broadcast::channel(KEY_CAPACITY).0);
                (tx.subscribe(), Some(KeyGuard { inner: Arc::downgrade(&self.inner), key: k.clone() }))
            }
        };
        let pos = after.max(w.pos);
        Some(WatchState {
            inner: self.inner.clone(),
            scope: scope.clone(),
            pos,
            backlog,
            source: Source::Live(rx),
            _guard: guard,
            done: false,
        })
    }

    async fn watch_scope(&self, scope: Scope, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        let compacted = self.compacted_rev();
        if after_rev < compacted {
            return Err(Error::Compacted { requested: after_rev, compacted });
        }
        let state = match self.subscribe(&scope, after_rev) {
            Some(s) => s,
            None => {
                let (key, end) = etcd_range(&scope, &self.inner.keys)?;
                let ws = self.inner.open_watch(key, end, after_rev).await?;
                WatchState {
                    inner: self.inner.clone(),
                    scope,
                    pos: after_rev,
                    backlog: VecDeque::new(),
                    source: Source::Etcd(Box::new(ws)),
                    _guard: None,
                    done: false,
                }
            }
        };
        Ok(stream::unfold(state, watch_step).boxed())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EtcdStorage {
    /// [`Storage::get_at`], uncounted (for [`Storage::get`] and [`Storage::get_recent`] too).
    async fn read_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)> {
        if let Some(at) = at_rev {
            let compacted = self.compacted_rev();
            if at < compacted {
                return Err(Error::Compacted { requested: at, compacted });
            }
        }
        let read = match at_rev {
            Some(at) => Some(Read::Exact(at)),
            None => self.inner.fresh().await?.map(Read::AtLeast),
        };
        if let Some(got) = read.and_then(|r| self.inner.cache.get(key, r)) {
            return Ok(got);
        }
        let k = self.inner.keys.etcd_key(key)?;
        let resp = self.inner.range(k, GetOptions::new(), at_rev).await?;
        let read_at = at_rev.unwrap_or_else(|| rev_of(resp.header().map(|h| h.revision()).unwrap_or(0)));
        Ok((resp.kvs().first().and_then(|kv| self.inner.key_value(kv)), read_at))
    }
}

#[async_trait]
impl Storage for EtcdStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        work::storage_read(work::Read::Get);
        Ok(self.read_at(key, None).await?.0)
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        work::storage_read(work::Read::List);
        let read = match opts.at_rev {
            Some(at) => {
                let compacted = self.compacted_rev();
                if at < compacted {
                    return Err(Error::Compacted { requested: at, compacted });
                }
                Read::Exact(at)
            }
            None => match self.inner.fresh().await? {
                Some(r) => Read::AtLeast(r),
                None => return self.inner.list_etcd(prefix, opts).await,
            },
        };
        match self.inner.cache.list(prefix, &opts, read) {
            Some(page) => Ok(page),
            None => self.inner.list_etcd(prefix, opts).await,
        }
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        work::storage_read(work::Read::Count);
        if let Some(r) = self.inner.fresh().await? {
            if let Some(n) = self.inner.cache.count(prefix, Read::AtLeast(r)) {
                return Ok(n);
            }
        }
        let key = self.inner.keys.etcd_key(prefix)?;
        let end = prefix_end(&key);
        let resp = self.inner.range(key, GetOptions::new().with_range(end).with_count_only(), None).await?;
        Ok(u64::try_from(resp.count()).unwrap_or(0))
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Rev> {
        work::storage_write(work::Write::Create, key);
        let k = self.inner.keys.etcd_key(key)?;
        let when = vec![Compare::create_revision(k.clone(), CompareOp::Equal, 0)];
        match self.inner.txn(&k, when, TxnOp::put(k.clone(), value, None)).await? {
            Ok(rev) => Ok(rev),
            Err(_) => Err(Error::AlreadyExists(key.to_string())),
        }
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> Result<Rev> {
        work::storage_write(work::Write::Update, key);
        let k = self.inner.keys.etcd_key(key)?;
        let when = vec![
            Compare::create_revision(k.clone(), CompareOp::Greater, 0),
            Compare::mod_revision(k.clone(), CompareOp::Equal, etcd_rev(expected_rev)),
        ];
        match self.inner.txn(&k, when, TxnOp::put(k.clone(), value, None)).await? {
            Ok(rev) => Ok(rev),
            Err(None) => Err(Error::NotFound(key.to_string())),
            Err(Some(current_rev)) => Err(Error::Conflict { key: key.to_string(), current_rev }),
        }
    }

    async fn delete(&self, key: &str, expected_rev: Rev) -> Result<Rev> {
        work::storage_write(work::Write::Delete, key);
        let k = self.inner.keys.etcd_key(key)?;
        let when = vec![
            Compare::create_revision(k.clone(), CompareOp::Greater, 0),
            Compare::mod_revision(k.clone(), CompareOp::Equal, etcd_rev(expected_rev)),
        ];
        match self.inner.txn(&k, when, TxnOp::delete(k.clone(), None)).await? {
            Ok(rev) => Ok(rev),
            Err(None) => Err(Error::NotFound(key.to_string())),
            Err(Some(current_rev)) => Err(Error::Conflict { key: key.to_string(), current_rev }),
        }
    }

    async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)> {
        work::storage_read(work::Read::GetAt);
        self.read_at(key, at_rev).await
    }

    /// From the watch cache once it has seen every revision this process knows of (its own
    /// acknowledged writes included), without asking etcd for its current revision: the
    /// round trip a consistent read pays is what made every namespaced create wait twice
    /// (the NamespaceLifecycle check, then the write). Falls back to a consistent read when
    /// the cache is not ready or does not get there in [`CACHE_WAIT`].
    async fn get_recent(&self, key: &str) -> Result<Option<KeyValue>> {
        work::storage_read(work::Read::GetRecent);
        let known = self.inner.rev.load(Ordering::SeqCst);
        if self.inner.cache.rev() > 0 && self.inner.cache.wait_for(known, CACHE_WAIT).await {
            if let Some((kv, _)) = self.inner.cache.get(key, Read::AtLeast(known)) {
                return Ok(kv);
            }
        }
        Ok(self.read_at(key, None).await?.0)
    }

    async fn watch(&self, prefix: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        work::storage_read(work::Read::Watch);
        self.watch_scope(Scope::Prefix(prefix.to_string()), after_rev).await
    }

    async fn watch_key(&self, key: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        work::storage_read(work::Read::WatchKey);
        self.watch_scope(Scope::Key(key.to_string()), after_rev).await
    }

    fn current_rev(&self) -> Rev {
        self.inner.rev.load(Ordering::SeqCst)
    }

    fn compacted_rev(&self) -> Rev {
        self.inner.compacted.load(Ordering::SeqCst)
    }

    async fn compact(&self, rev: Rev) -> Result<()> {
        let mut client = self.inner.client.clone();
        match bounded("a compaction", client.compact(etcd_rev(rev), None)).await {
            Ok(_) => {}
            // Another apiserver compacted at least this far already.
            Err(EtcdCallError::Etcd(e)) if is_compacted(&e) => {}
            Err(e) => return Err(e.into()),
        }
        self.inner.compacted.fetch_max(rev, Ordering::SeqCst);
        Ok(())
    }
}

impl Compact for EtcdStorage {
    const LOG_NAME: &'static str = "etcd";
}

#[cfg(test)]
mod tests;
