//! The embedded storage backend: one SQLite file with etcd-style MVCC history.
//!
//! # Schema
//!
//! - `kv(rev INTEGER PRIMARY KEY, key, create_rev, deleted, value)`: one row per revision.
//!   Every write gets its own revision, so the revision is the rowid (a free index on it).
//!   A delete writes a tombstone row (`deleted = 1`) whose value is the last value.
//!   Index `kv_key_rev(key, rev)` serves per-key history and reads at old revisions.
//! - `cur(key PRIMARY KEY, rev) WITHOUT ROWID`: the live keys and the `kv` row holding their
//!   current value. It makes `get`, `count` and lists at the current revision a plain range
//!   scan (no per-key "newest row" search), and it costs no second copy of the value.
//! - `meta(name, value)`: `rev` (current revision, persisted so that it never goes backwards,
//!   even when compaction removed the newest rows), `compact_rev` (reads below it are refused)
//!   and `compact_cursor` (how far the deletions of compaction have got; a compaction
//!   interrupted by a crash resumes from there).
//!
//! # Writes: group commit
//!
//! All writes go through one writer thread that owns the only writing connection. It takes
//! every request queued at the time (up to `MAX_BATCH`), applies them in one transaction
//! (each compare-and-swap checked on its own, inside a savepoint, so one failing request
//! fails alone), commits (WAL + `synchronous=FULL`: the commit is fsynced), then publishes
//! the events in revision order and answers the callers. Nothing is acknowledged before it
//! is durable.
//!
//! # Reads
//!
//! A small pool of query-only connections, used from `spawn_blocking`. Every read that needs
//! more than one statement runs in one read transaction (a WAL snapshot), and checks the
//! compaction revision from `meta` inside that snapshot.
//!
//! # Compaction
//!
//! `compact(rev)` first records `compact_rev` (from then on reads below it fail with
//! `Compacted`), then deletes superseded rows in steps of `COMPACT_STEP` revisions, each step
//! its own short transaction on the writer thread, so writes queued meanwhile go in between.
//! [`SqliteStorage::spawn_compactor`] keeps the last N revisions (a revision count rather than
//! a time window: it bounds the size of the history whatever the write rate).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, TryLockError, Weak};
use std::thread;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, Value, ValueRef};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, ToSql};
use tokio::sync::{broadcast, oneshot, Notify, Semaphore};

use super::{Error, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Rev, Storage};

/// Most write requests committed in one transaction.
const MAX_BATCH: usize = 1024;
/// Read connections in the pool.
const READERS: usize = 4;
/// History rows a watch reads per query while catching up.
const WATCH_CHUNK: usize = 1000;
/// Revisions one compaction step covers (one short transaction each).
const COMPACT_STEP: u64 = 5000;
/// Live events buffered per watcher before it lags (and re-reads the gap from history).
const BROADCAST_CAPACITY: usize = 4096;
/// How often the compactor looks at the history size.
const COMPACT_INTERVAL: Duration = Duration::from_secs(30);
/// How long a connection waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS kv (
    rev INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    create_rev INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_key_rev ON kv (key, rev);
CREATE TABLE IF NOT EXISTS cur (
    key TEXT PRIMARY KEY,
    rev INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('rev', 0), ('compact_rev', 0), ('compact_cursor', 0);
COMMIT;
";

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Backend(format!("sqlite: {e}"))
    }
}

fn writer_gone() -> Error {
    Error::Backend("sqlite writer thread has stopped".to_string())
}

/// Tunables (tests shrink them to reach the edge cases quickly).
#[derive(Debug, Clone)]
struct Config {
    /// `synchronous=FULL` (durable) or `OFF` (throwaway stores).
    durable: bool,
    broadcast_capacity: usize,
    compact_step: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self { durable: true, broadcast_capacity: BROADCAST_CAPACITY, compact_step: COMPACT_STEP }
    }
}

/// State shared by the storage handle and the writer thread.
struct Shared {
    rev: AtomicU64,
    compacted: AtomicU64,
    /// Every event, for prefix watches.
    events: broadcast::Sender<Arc<Event>>,
    /// Single-key watches, woken only by changes to their key.
    keyed: Mutex<KeyWatchers>,
    /// The writer has stopped: no event will come any more.
    closed: AtomicBool,
}

/// The single-key watches: key → (watch id, its wake-up).
#[derive(Default)]
struct KeyWatchers {
    next_id: u64,
    by_key: HashMap<String, Vec<(u64, Arc<Notify>)>>,
}

impl Shared {
    fn keyed(&self) -> std::sync::MutexGuard<'_, KeyWatchers> {
        self.keyed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake the single-key watches of these keys (each wake-up is kept until taken, so a
    /// watch that is between two reads misses nothing).
    fn wake_keys<'a>(&self, keys: impl Iterator<Item = &'a str>) {
        let keyed = self.keyed();
        if keyed.by_key.is_empty() {
            return;
        }
        for key in keys {
            for (_, n) in keyed.by_key.get(key).into_iter().flatten() {
                n.notify_one();
            }
        }
    }

    /// The writer is gone: wake every single-key watch so it can end.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, n) in self.keyed().by_key.values().flatten() {
            n.notify_one();
        }
    }
}

/// A single-key watch's entry in [`KeyWatchers`], removed when the watch is dropped. It does
/// not keep the store alive.
struct KeyRegistration {
    shared: Weak<Shared>,
    key: String,
    id: u64,
    notify: Arc<Notify>,
}

impl KeyRegistration {
    fn new(shared: &Arc<Shared>, key: &str) -> Self {
        let notify = Arc::new(Notify::new());
        let mut keyed = shared.keyed();
        keyed.next_id += 1;
        let id = keyed.next_id;
        keyed.by_key.entry(key.to_owned()).or_default().push((id, notify.clone()));
        drop(keyed);
        KeyRegistration { shared: Arc::downgrade(shared), key: key.to_owned(), id, notify }
    }
}

impl Drop for KeyRegistration {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else { return };
        let mut keyed = shared.keyed();
        if let Some(list) = keyed.by_key.get_mut(&self.key) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                keyed.by_key.remove(&self.key);
            }
        }
    }
}

/// SQLite implementation of [`Storage`].
pub struct SqliteStorage {
    shared: Arc<Shared>,
    reads: Arc<ReadPool>,
    tx: Option<mpsc::Sender<Msg>>,
    writer: Option<thread::JoinHandle<()>>,
    /// Directory removed on drop (stores from [`SqliteStorage::open_in_memory`]).
    temp_dir: Option<TempDir>,
}

impl std::fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStorage")
            .field("rev", &self.current_rev())
            .field("compacted_rev", &self.compacted_rev())
            .finish_non_exhaustive()
    }
}

impl SqliteStorage {
    /// Open (creating if needed) the database file at `path`. Writes are durable when
    /// acknowledged (WAL, `synchronous=FULL`).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, Config::default(), None)
    }

    /// A throwaway store for tests: a fresh database in a temporary directory that is removed
    /// when the store is dropped, with fsync turned off (nothing survives anyway). Same
    /// semantics as [`SqliteStorage::open`] otherwise.
    pub fn open_in_memory() -> Result<Self> {
        Self::open_temp(Config { durable: false, ..Config::default() })
    }

    fn open_temp(cfg: Config) -> Result<Self> {
        let dir = TempDir::new()?;
        let path = dir.0.join("kustos.db");
        Self::open_with(&path, cfg, Some(dir))
    }

    fn open_with(path: &Path, cfg: Config, temp_dir: Option<TempDir>) -> Result<Self> {
        create_private(path)?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Backend(format!("sqlite: could not enable WAL (journal_mode={mode})")));
        }
        conn.pragma_update(None, "synchronous", if cfg.durable { "FULL" } else { "OFF" })?;
        stable_plans(&conn)?;
        conn.execute_batch(SCHEMA)?;
        conn.set_prepared_statement_cache_capacity(32);
        let rev = read_meta_value(&conn, "rev")?;
        let compacted = read_meta_value(&conn, "compact_rev")?;
        let cursor = read_meta_value(&conn, "compact_cursor")?;

        let mut conns = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            conns.push(Mutex::new(open_reader(path)?));
        }
        let reads = Arc::new(ReadPool { conns, next: AtomicUsize::new(0), permits: Arc::new(Semaphore::new(READERS)) });

        let (events, _) = broadcast::channel(cfg.broadcast_capacity.max(1));
        let shared = Arc::new(Shared {
            rev: AtomicU64::new(rev),
            compacted: AtomicU64::new(compacted),
            events,
            keyed: Mutex::new(KeyWatchers::default()),
            closed: AtomicBool::new(false),
        });
        let writer =
            Writer { conn, shared: shared.clone(), rev, compacted, cursor, compact_step: cfg.compact_step.max(1) };
        let (tx, rx) = mpsc::channel();
        let handle = thread::Builder::new()
            .name("kustos-sqlite-writer".to_string())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::Backend(format!("spawning the sqlite writer thread: {e}")))?;
        Ok(Self { shared, reads, tx: Some(tx), writer: Some(handle), temp_dir })
    }

    /// Periodically compact the history, keeping the last `keep_revisions` revisions
    /// (compaction revision = current − keep_revisions, checked every 30 s). Also finishes a
    /// compaction a crash interrupted. The task holds only a weak reference and ends when the
    /// store is dropped.
    pub fn spawn_compactor(self: Arc<Self>, keep_revisions: u64) -> tokio::task::JoinHandle<()> {
        Self::spawn_compactor_every(self, keep_revisions, COMPACT_INTERVAL)
    }

    /// Like `spawn_compactor`, with the interval between compactions given.
    pub fn spawn_compactor_every(
        store: Arc<Self>,
        keep_revisions: u64,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Self> = Arc::downgrade(&store);
        drop(store);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(store) = weak.upgrade() else { return };
                let target = store.current_rev().saturating_sub(keep_revisions);
                let res = if target > store.compacted_rev() {
                    store.compact(target).await
                } else {
                    store.finish_compaction().await
                };
                if let Err(e) = res {
                    tracing::warn!(error = %e, target, "storage compaction failed");
                }
            }
        })
    }

    fn send(&self, msg: Msg) -> Result<()> {
        let tx = self.tx.as_ref().ok_or_else(writer_gone)?;
        tx.send(msg).map_err(|_| writer_gone())
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Msg) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.send(make(reply))?;
        answer.await.map_err(|_| writer_gone())?
    }

    async fn write(&self, op: WriteOp) -> Result<Rev> {
        self.ask(|reply| Msg::Write { op, reply }).await
    }

    /// Run deletion steps until the recorded compaction revision is fully applied.
    async fn finish_compaction(&self) -> Result<()> {
        while !self.ask(|reply| Msg::CompactStep { reply }).await? {}
        Ok(())
    }
}

impl Drop for SqliteStorage {
    fn drop(&mut self) {
        // Closing the channel stops the writer once it has finished its current batch; wait
        // for it so the database is closed (and a temporary directory can go) when drop returns.
        drop(self.tx.take());
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
        drop(self.temp_dir.take());
    }
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_owned();
        self.reads.run_small(move |conn| get_current(conn, &key)).await
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        let keys = Keys::Prefix(prefix.to_owned());
        self.reads.run(move |conn| list_at(conn, &keys, &opts)).await
    }

    async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)> {
        let keys = Keys::Exact(key.to_owned());
        let opts = ListOptions { at_rev, ..Default::default() };
        let page = self.reads.run_small(move |conn| list_at(conn, &keys, &opts)).await?;
        Ok((page.items.into_iter().next(), page.rev))
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        let prefix = prefix.to_owned();
        self.reads
            .run(move |conn| {
                let mut params = Vec::new();
                let filter = key_filter("key", &Keys::Prefix(prefix), None, &mut params);
                let sql = format!("SELECT COUNT(*) FROM cur WHERE {filter}");
                let n: SqlRev = conn.prepare_cached(&sql)?.query_row(params_from_iter(params.iter()), |r| r.get(0))?;
                Ok(n.0)
            })
            .await
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Rev> {
        self.write(WriteOp::Create { key: key.to_owned(), value }).await
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> Result<Rev> {
        self.write(WriteOp::Update { key: key.to_owned(), value, expected_rev }).await
    }

    async fn delete(&self, key: &str, expected_rev: Rev) -> Result<Rev> {
        self.write(WriteOp::Delete { key: key.to_owned(), expected_rev }).await
    }

    async fn watch(&self, prefix: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        // Subscribe first: every event committed after the history read below is then
        // guaranteed to arrive on the channel (events are published after their commit).
        let rx = self.shared.events.subscribe();
        let first = {
            let keys = Keys::Prefix(prefix.to_owned());
            self.reads.run(move |conn| history_after(conn, &keys, after_rev, WATCH_CHUNK)).await?
        };
        let state = WatchState {
            reads: self.reads.clone(),
            rx,
            prefix: prefix.to_owned(),
            pos: after_rev,
            catching_up: first.len() >= WATCH_CHUNK,
            buf: first.into(),
            done: false,
        };
        Ok(stream::unfold(state, watch_step).boxed())
    }

    async fn watch_key(&self, key: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        // Register first: a change committed after the first history read then wakes it.
        let reg = KeyRegistration::new(&self.shared, key);
        let state = KeyWatchState { reads: self.reads.clone(), reg, pos: after_rev, buf: VecDeque::new(), done: false };
        Ok(stream::unfold(state, key_watch_step).boxed())
    }

    fn current_rev(&self) -> Rev {
        self.shared.rev.load(Ordering::SeqCst)
    }

    fn compacted_rev(&self) -> Rev {
        self.shared.compacted.load(Ordering::SeqCst)
    }

    async fn compact(&self, rev: Rev) -> Result<()> {
        self.ask(|reply| Msg::CompactMark { rev, reply }).await?;
        self.finish_compaction().await
    }
}

// ---------------------------------------------------------------------------------------------
// Reads

struct ReadPool {
    conns: Vec<Mutex<Connection>>,
    next: AtomicUsize,
    /// One per connection: reads beyond that wait here, as tasks, instead of each taking a
    /// blocking-pool thread only to block on a connection's mutex (under a storm of
    /// requests that meant hundreds of threads and more context switching than work).
    permits: Arc<Semaphore>,
}

impl ReadPool {
    /// Run `f` on a free connection (or wait for one), on the blocking thread pool.
    async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Backend("sqlite: the read pool is closed".to_string()))?;
        let pool = self.clone();
        // The permit goes with the read, so a caller that stops waiting does not let another
        // read in before this one is done.
        tokio::task::spawn_blocking(move || {
            let out = pool.with(f);
            drop(permit);
            out
        })
        .await
        .map_err(|e| Error::Backend(format!("sqlite read task failed: {e}")))?
    }

    /// Run a point read (one key: tens of microseconds from the page cache) right here when
    /// a connection is free, sparing the hand-off to a blocking thread and back, which costs
    /// more than the read; otherwise like [`ReadPool::run`].
    async fn run_small<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        if let Some(mut conn) = self.conns.iter().find_map(|c| c.try_lock().ok()) {
            return f(&mut conn);
        }
        self.run(f).await
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let n = self.conns.len();
        if n == 0 {
            return Err(Error::Backend("sqlite: no read connections".to_string()));
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        for i in 0..n {
            let slot = &self.conns[(start + i) % n];
            // A connection whose user panicked is still usable: its transaction was rolled
            // back when the guard's Transaction was dropped during unwinding.
            let guard = match slot.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut g) = guard {
                return f(&mut g);
            }
        }
        let mut g = self.conns[start].lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut g)
    }
}

/// Keep each cached statement's query plan whatever values are bound (SQLite's query planner
/// stability guarantee). Otherwise SQLite (built with STAT4) re-prepares a statement whose
/// plan might depend on a bound value — every join and ORDER BY read here — each time it is
/// bound to another key: as much work again as the read itself.
fn stable_plans(conn: &Connection) -> Result<()> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", true)?;
    stable_plans(&conn)?;
    // 32 MiB of page cache: full lists of big collections stay fast. No memory-mapped reads:
    // while writes grow the file, every read transaction would map it anew, and unmapping
    // (TLB shootdowns on every core) cost more than the reads themselves.
    conn.pragma_update(None, "cache_size", -32_768)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// A read transaction (one WAL snapshot), ended when dropped. BEGIN and the final ROLLBACK
/// are cached statements: rusqlite's `transaction()` parses both anew every time, which
/// costs about as much as the point read it wraps.
struct ReadTx<'c> {
    conn: &'c Connection,
}

impl<'c> ReadTx<'c> {
    fn begin(conn: &'c Connection) -> Result<Self> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(ReadTx { conn })
    }
}

impl std::ops::Deref for ReadTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for ReadTx<'_> {
    fn drop(&mut self) {
        // Nothing was written: ending the snapshot is all a rollback does here.
        let ended = self.conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
        if ended.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

fn read_meta_value(conn: &Connection, name: &str) -> Result<Rev> {
    let v: Option<Rev> =
        conn.prepare_cached("SELECT value FROM meta WHERE name = ?1")?.query_row([name], rev_at(0)).optional()?;
    Ok(v.unwrap_or(0))
}

/// The first key after all keys starting with `prefix` (None: no upper bound). Keys compare
/// as UTF-8 bytes, which is code-point order, so bumping the last character is exact.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last as u32 {
            0xD7FF => Some('\u{E000}'),
            c => char::from_u32(c + 1),
        };
        if let Some(n) = next {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Which keys a read covers.
#[derive(Debug, Clone)]
enum Keys {
    /// Every key starting with this.
    Prefix(String),
    /// This one key.
    Exact(String),
}

/// SQL condition on `col`: the keys of `keys` strictly after `after` (exact keys ignore
/// `after`: one key never pages). Pushes its parameters.
fn key_filter(col: &str, keys: &Keys, after: Option<&str>, params: &mut Vec<Value>) -> String {
    let prefix = match keys {
        Keys::Prefix(p) => p.as_str(),
        Keys::Exact(k) => {
            params.push(Value::Text(k.clone()));
            return format!("{col} = ?");
        }
    };
    let mut sql = match after {
        Some(a) if a >= prefix => {
            params.push(Value::Text(a.to_owned()));
            format!("{col} > ?")
        }
        _ => {
            params.push(Value::Text(prefix.to_owned()));
            format!("{col} >= ?")
        }
    };
    if let Some(end) = prefix_end(prefix) {
        params.push(Value::Text(end));
        sql.push_str(&format!(" AND {col} < ?"));
    }
    sql
}

/// A revision as SQLite stores it: INTEGER (i64; revisions never get near i64::MAX, and a
/// value out of range is an error, not a wrap-around).
#[derive(Debug, Clone, Copy)]
struct SqlRev(Rev);

impl ToSql for SqlRev {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        i64::try_from(self.0).map(ToSqlOutput::from).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
    }
}

impl FromSql for SqlRev {
    fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
        let i = i64::column_result(v)?;
        Rev::try_from(i).map(SqlRev).map_err(|_| FromSqlError::OutOfRange(i))
    }
}

/// Row accessor for a revision column.
fn rev_at(i: usize) -> impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<Rev> {
    move |r| r.get::<_, SqlRev>(i).map(|v| v.0)
}

fn rev_value(rev: Rev) -> Result<Value> {
    i64::try_from(rev).map(Value::Integer).map_err(|_| Error::Backend(format!("revision {rev} out of range")))
}

fn limit_value(limit: Option<usize>) -> Value {
    Value::Integer(limit.and_then(|l| i64::try_from(l).ok()).unwrap_or(-1))
}

fn key_value(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyValue> {
    Ok(KeyValue { key: r.get(0)?, value: r.get(1)?, create_rev: rev_at(2)(r)?, mod_rev: rev_at(3)(r)? })
}

/// The current value of one key.
const GET_CURRENT: &str =
    "SELECT c.key, k.value, k.create_rev, k.rev FROM cur c JOIN kv k ON k.rev = c.rev WHERE c.key = ?1";

fn get_current(conn: &mut Connection, key: &str) -> Result<Option<KeyValue>> {
    let kv = conn.prepare_cached(GET_CURRENT)?.query_row([key], key_value).optional()?;
    Ok(kv)
}

/// Keys (and, unless `count_only`, values) visible at `at` (None: current), as SQL + params.
fn list_query(keys: &Keys, after: Option<&str>, at: Option<Rev>, count_only: bool) -> Result<(String, Vec<Value>)> {
    let mut params = Vec::new();
    let sql = match at {
        None => {
            let filter = key_filter("c.key", keys, after, &mut params);
            if count_only {
                format!("SELECT COUNT(*) FROM cur c WHERE {filter}")
            } else {
                format!(
                    "SELECT c.key, k.value, k.create_rev, k.rev FROM cur c JOIN kv k ON k.rev = c.rev \
                     WHERE {filter} ORDER BY c.key LIMIT ?"
                )
            }
        }
        Some(at) => {
            let filter = key_filter("k.key", keys, after, &mut params);
            params.push(rev_value(at)?);
            params.push(rev_value(at)?);
            let what = if count_only { "COUNT(*)" } else { "k.key, k.value, k.create_rev, k.rev" };
            let tail = if count_only { "" } else { " ORDER BY k.key LIMIT ?" };
            format!(
                "SELECT {what} FROM kv k INDEXED BY kv_key_rev WHERE {filter} AND k.rev <= ? \
                 AND k.rev = (SELECT MAX(p.rev) FROM kv p WHERE p.key = k.key AND p.rev <= ?) \
                 AND k.deleted = 0{tail}"
            )
        }
    };
    Ok((sql, params))
}

fn list_at(conn: &mut Connection, keys: &Keys, opts: &ListOptions) -> Result<ListResult> {
    let tx = ReadTx::begin(conn)?;
    let current = read_meta_value(&tx, "rev")?;
    let compacted = read_meta_value(&tx, "compact_rev")?;
    let at = opts.at_rev.unwrap_or(current);
    if at > current {
        return Err(Error::FutureRevision { requested: at, current });
    }
    if at < compacted {
        return Err(Error::Compacted { requested: at, compacted });
    }
    // At the current revision the `cur` table answers directly.
    let hist = (at < current).then_some(at);
    let limit = opts.limit.filter(|l| *l > 0);
    let (sql, mut params) = list_query(keys, opts.start_after.as_deref(), hist, false)?;
    params.push(limit_value(limit));
    let items = tx
        .prepare_cached(&sql)?
        .query_map(params_from_iter(params.iter()), key_value)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let remaining = match (limit, items.last()) {
        (Some(l), Some(last)) if items.len() >= l => {
            let (sql, params) = list_query(keys, Some(&last.key), hist, true)?;
            tx.prepare_cached(&sql)?.query_row(params_from_iter(params.iter()), rev_at(0))?
        }
        _ => 0,
    };
    Ok(ListResult { items, rev: at, remaining })
}

/// Up to `limit` changes to `keys` with revision > `after`, in revision order.
/// Err(Compacted) if history after `after` is no longer complete.
fn history_after(conn: &mut Connection, keys: &Keys, after: Rev, limit: usize) -> Result<Vec<Event>> {
    let tx = ReadTx::begin(conn)?;
    let compacted = read_meta_value(&tx, "compact_rev")?;
    if after < compacted {
        return Err(Error::Compacted { requested: after, compacted });
    }
    let mut params = vec![rev_value(after)?];
    // A prefix: `+n.key` keeps the planner on the rowid (= revision) order instead of the key
    // index. One key: the (key, rev) index is exactly the history wanted.
    let col = if matches!(keys, Keys::Exact(_)) { "n.key" } else { "+n.key" };
    let filter = key_filter(col, keys, None, &mut params);
    params.push(limit_value(Some(limit)));
    let sql = format!(
        "SELECT n.rev, n.key, n.create_rev, n.deleted, n.value, \
           CASE WHEN n.deleted = 0 AND n.create_rev <> n.rev THEN \
             (SELECT p.value FROM kv p WHERE p.key = n.key AND p.rev < n.rev ORDER BY p.rev DESC LIMIT 1) \
           END \
         FROM kv n WHERE n.rev > ? AND {filter} ORDER BY n.rev LIMIT ?"
    );
    let events = tx
        .prepare_cached(&sql)?
        .query_map(params_from_iter(params.iter()), |r| {
            let rev = rev_at(0)(r)?;
            let create_rev = rev_at(2)(r)?;
            let deleted: bool = r.get(3)?;
            let value: Vec<u8> = r.get(4)?;
            let (kind, prev_value) = if deleted {
                (EventKind::Deleted, Some(value.clone()))
            } else if create_rev == rev {
                (EventKind::Created, None)
            } else {
                (EventKind::Updated, r.get(5)?)
            };
            Ok(Event { kind, rev, key: r.get(1)?, value, prev_value })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(events)
}

// ---------------------------------------------------------------------------------------------
// Watch

struct WatchState {
    reads: Arc<ReadPool>,
    rx: broadcast::Receiver<Arc<Event>>,
    prefix: String,
    /// Every change with revision ≤ pos has been handled (yielded or filtered out).
    pos: Rev,
    /// History read but not yet yielded.
    buf: VecDeque<Event>,
    /// Read history (from `pos`) before listening to live events again.
    catching_up: bool,
    done: bool,
}

async fn watch_step(mut st: WatchState) -> Option<(Result<Event>, WatchState)> {
    loop {
        if st.done {
            return None;
        }
        if let Some(ev) = st.buf.pop_front() {
            st.pos = ev.rev;
            return Some((Ok(ev), st));
        }
        if st.catching_up {
            let (keys, pos) = (Keys::Prefix(st.prefix.clone()), st.pos);
            match st.reads.run(move |conn| history_after(conn, &keys, pos, WATCH_CHUNK)).await {
                Ok(events) => {
                    st.catching_up = events.len() >= WATCH_CHUNK;
                    st.buf.extend(events);
                    continue;
                }
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
            }
        }
        match st.rx.recv().await {
            Ok(ev) => {
                if ev.rev <= st.pos {
                    continue;
                }
                st.pos = ev.rev;
                if ev.key.starts_with(&st.prefix) {
                    return Some((Ok(Event::clone(&ev)), st));
                }
            }
            // Missed live events: fetch the gap from history (the receiver has moved on to
            // the oldest event still buffered; duplicates are skipped by revision).
            Err(broadcast::error::RecvError::Lagged(_)) => st.catching_up = true,
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// A single-key watch: reads the key's history after `pos` whenever a change to the key is
/// published (and once at the start), so it costs nothing while other keys change.
struct KeyWatchState {
    reads: Arc<ReadPool>,
    reg: KeyRegistration,
    pos: Rev,
    buf: VecDeque<Event>,
    done: bool,
}

async fn key_watch_step(mut st: KeyWatchState) -> Option<(Result<Event>, KeyWatchState)> {
    loop {
        if st.done {
            return None;
        }
        if let Some(ev) = st.buf.pop_front() {
            st.pos = ev.rev;
            return Some((Ok(ev), st));
        }
        let (keys, pos) = (Keys::Exact(st.reg.key.clone()), st.pos);
        match st.reads.run_small(move |conn| history_after(conn, &keys, pos, WATCH_CHUNK)).await {
            Ok(events) if !events.is_empty() => {
                st.buf.extend(events);
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                st.done = true;
                return Some((Err(e), st));
            }
        }
        if st.reg.shared.upgrade().is_none_or(|s| s.closed.load(Ordering::SeqCst)) {
            return None;
        }
        st.reg.notify.notified().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Writer

enum WriteOp {
    Create { key: String, value: Vec<u8> },
    Update { key: String, value: Vec<u8>, expected_rev: Rev },
    Delete { key: String, expected_rev: Rev },
}

enum Msg {
    Write {
        op: WriteOp,
        reply: oneshot::Sender<Result<Rev>>,
    },
    /// Record a new compaction revision (deletions follow in steps).
    CompactMark {
        rev: Rev,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Delete one step of superseded rows; answers whether compaction is complete.
    CompactStep {
        reply: oneshot::Sender<Result<bool>>,
    },
}

struct Writer {
    conn: Connection,
    shared: Arc<Shared>,
    /// Last committed revision.
    rev: Rev,
    compacted: Rev,
    /// Superseded rows with revision ≤ cursor are deleted.
    cursor: Rev,
    compact_step: u64,
}

type Pending = (WriteOp, oneshot::Sender<Result<Rev>>);

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        while let Ok(first) = rx.recv() {
            let mut writes: Vec<Pending> = Vec::new();
            let mut others = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Write { op, reply } => writes.push((op, reply)),
                    other => others.push(other),
                }
                next = if writes.len() < MAX_BATCH { rx.try_recv().ok() } else { None };
            }
            if !writes.is_empty() {
                self.commit_batch(writes);
            }
            for msg in others {
                match msg {
                    Msg::Write { .. } => {}
                    Msg::CompactMark { rev, reply } => {
                        let _ = reply.send(self.compact_mark(rev));
                    }
                    Msg::CompactStep { reply } => {
                        let _ = reply.send(self.compact_step());
                    }
                }
            }
        }
        self.shared.close();
    }

    /// Start a write transaction, first clearing one a failed earlier step may have left open.
    fn begin(&self) -> Result<()> {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(())
    }

    fn commit_batch(&mut self, writes: Vec<Pending>) {
        if let Err(e) = self.begin() {
            for (_, reply) in writes {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
        let mut rev = self.rev;
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(writes.len());
        let mut broken = None;
        for (op, reply) in writes {
            if broken.is_some() {
                results.push((reply, Ok(0)));
                continue;
            }
            match self.apply_in_savepoint(op, rev + 1) {
                Ok(Ok(ev)) => {
                    rev = ev.rev;
                    events.push(ev);
                    results.push((reply, Ok(rev)));
                }
                Ok(Err(e)) => results.push((reply, Err(e))),
                Err(e) => {
                    broken = Some(e.clone());
                    results.push((reply, Err(e)));
                }
            }
        }
        let committed = match broken {
            Some(e) => Err(e),
            // Nothing changed: nothing to sync.
            None if rev == self.rev => self.conn.execute_batch("ROLLBACK").map_err(Error::from),
            None => self.set_meta("rev", rev).and_then(|()| self.conn.execute_batch("COMMIT").map_err(Error::from)),
        };
        if let Err(e) = committed {
            if !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            // Did the commit land after all? Then never hand out its revisions again, and let
            // watchers see its events; the callers still get the error (an ambiguous outcome,
            // as with any store).
            let landed = read_meta_value(&self.conn, "rev").is_ok_and(|stored| stored == rev && rev > self.rev);
            if landed {
                self.publish(rev, events);
            }
            // Even the CAS failures were judged against writes that may be gone.
            for (reply, _) in results {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
        self.publish(rev, events);
        for (reply, res) in results {
            let _ = reply.send(res);
        }
    }

    fn publish(&mut self, rev: Rev, events: Vec<Event>) {
        self.rev = rev;
        self.shared.rev.store(rev, Ordering::SeqCst);
        self.shared.wake_keys(events.iter().map(|e| e.key.as_str()));
        for ev in events {
            // No receivers is fine.
            let _ = self.shared.events.send(Arc::new(ev));
        }
    }

    /// Apply one write as revision `rev`, undoing its partial effects if SQLite fails midway.
    /// Outer error: the transaction is in an unknown state and the whole batch must be
    /// abandoned. Inner error: this request failed (compare-and-swap, or SQLite, undone).
    fn apply_in_savepoint(&self, op: WriteOp, rev: Rev) -> Result<Result<Event>> {
        self.conn.prepare_cached("SAVEPOINT w")?.execute([])?;
        let res = self.apply(op, rev).and_then(|outcome| {
            self.conn.prepare_cached("RELEASE w")?.execute([])?;
            Ok(outcome)
        });
        match res {
            Ok(outcome) => Ok(outcome),
            Err(e) => {
                self.conn.execute_batch("ROLLBACK TO w; RELEASE w")?;
                Ok(Err(Error::from(e)))
            }
        }
    }

    /// Outer error: SQLite failed. Inner error: the compare-and-swap failed (nothing written).
    fn apply(&self, op: WriteOp, rev: Rev) -> rusqlite::Result<Result<Event>> {
        match op {
            WriteOp::Create { key, value } => {
                let exists: Option<Rev> = self
                    .conn
                    .prepare_cached("SELECT rev FROM cur WHERE key = ?1")?
                    .query_row([&key], rev_at(0))
                    .optional()?;
                if exists.is_some() {
                    return Ok(Err(Error::AlreadyExists(key)));
                }
                self.insert_row(rev, &key, rev, false, &value)?;
                self.conn
                    .prepare_cached("INSERT INTO cur (key, rev) VALUES (?1, ?2)")?
                    .execute(params![key, SqlRev(rev)])?;
                Ok(Ok(Event { kind: EventKind::Created, rev, key, value, prev_value: None }))
            }
            WriteOp::Update { key, value, expected_rev } => {
                let (create_rev, prev) = match self.current(&key, expected_rev)? {
                    Ok(found) => found,
                    Err(e) => return Ok(Err(e)),
                };
                self.insert_row(rev, &key, create_rev, false, &value)?;
                self.conn
                    .prepare_cached("UPDATE cur SET rev = ?2 WHERE key = ?1")?
                    .execute(params![key, SqlRev(rev)])?;
                Ok(Ok(Event { kind: EventKind::Updated, rev, key, value, prev_value: Some(prev) }))
            }
            WriteOp::Delete { key, expected_rev } => {
                let (create_rev, prev) = match self.current(&key, expected_rev)? {
                    Ok(found) => found,
                    Err(e) => return Ok(Err(e)),
                };
                self.insert_row(rev, &key, create_rev, true, &prev)?;
                self.conn.prepare_cached("DELETE FROM cur WHERE key = ?1")?.execute([&key])?;
                Ok(Ok(Event { kind: EventKind::Deleted, rev, key, value: prev.clone(), prev_value: Some(prev) }))
            }
        }
    }

    /// The key's (create_rev, value) if it exists with mod_rev `expected_rev`.
    fn current(&self, key: &str, expected_rev: Rev) -> rusqlite::Result<Result<(Rev, Vec<u8>)>> {
        let row: Option<(Rev, Rev, Vec<u8>)> = self
            .conn
            .prepare_cached(
                "SELECT k.rev, k.create_rev, k.value FROM cur c JOIN kv k ON k.rev = c.rev WHERE c.key = ?1",
            )?
            .query_row([key], |r| Ok((rev_at(0)(r)?, rev_at(1)(r)?, r.get(2)?)))
            .optional()?;
        Ok(match row {
            None => Err(Error::NotFound(key.to_owned())),
            Some((mod_rev, _, _)) if mod_rev != expected_rev => {
                Err(Error::Conflict { key: key.to_owned(), current_rev: mod_rev })
            }
            Some((_, create_rev, value)) => Ok((create_rev, value)),
        })
    }

    fn insert_row(&self, rev: Rev, key: &str, create_rev: Rev, deleted: bool, value: &[u8]) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached("INSERT INTO kv (rev, key, create_rev, deleted, value) VALUES (?1, ?2, ?3, ?4, ?5)")?
            .execute(params![SqlRev(rev), key, SqlRev(create_rev), deleted, value])?;
        Ok(())
    }

    fn set_meta(&self, name: &str, value: Rev) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE meta SET value = ?2 WHERE name = ?1")?
            .execute(params![name, SqlRev(value)])?;
        Ok(())
    }

    /// Run `f` in its own committed transaction.
    fn in_tx(&self, f: impl FnOnce(&Self) -> Result<()>) -> Result<()> {
        self.begin()?;
        let res = f(self).and_then(|()| self.conn.execute_batch("COMMIT").map_err(Error::from));
        if res.is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        res
    }

    fn compact_mark(&mut self, rev: Rev) -> Result<()> {
        if rev > self.rev {
            return Err(Error::FutureRevision { requested: rev, current: self.rev });
        }
        if rev <= self.compacted {
            return Ok(());
        }
        self.in_tx(|w| w.set_meta("compact_rev", rev))?;
        self.compacted = rev;
        self.shared.compacted.store(rev, Ordering::SeqCst);
        Ok(())
    }

    /// Delete the rows that no read at or after the compaction revision C can see, for the
    /// revisions in (cursor, cursor + step]: every tombstone there, and the predecessor (the
    /// previous row of the same key) of every row there. Both have revisions ≤ C and are
    /// superseded at C. Done step by step from the previous compaction revision, this
    /// leaves, per key, at most its newest row ≤ C (when that is not a tombstone).
    fn compact_step(&mut self) -> Result<bool> {
        if self.cursor >= self.compacted {
            return Ok(true);
        }
        let hi = self.compacted.min(self.cursor.saturating_add(self.compact_step));
        let lo = self.cursor;
        self.in_tx(|w| {
            w.conn
                .prepare_cached(
                    "DELETE FROM kv WHERE rev IN ( \
                       SELECT (SELECT MAX(p.rev) FROM kv p WHERE p.key = n.key AND p.rev < n.rev) \
                         FROM kv n WHERE n.rev > ?1 AND n.rev <= ?2 \
                       UNION ALL \
                       SELECT rev FROM kv WHERE rev > ?1 AND rev <= ?2 AND deleted = 1)",
                )?
                .execute(params![SqlRev(lo), SqlRev(hi)])?;
            w.set_meta("compact_cursor", hi)
        })?;
        self.cursor = hi;
        Ok(hi >= self.compacted)
    }
}

// ---------------------------------------------------------------------------------------------
// Temporary directory (for `open_in_memory`), without a dependency.

/// Create the database file, empty and 0600, unless it exists (an existing file is left as
/// it is). SQLite would create it with the process umask; it creates the `-wal` and `-shm`
/// files with the database file's mode, so all three stay private.
fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::Backend(format!("creating {}: {e}", path.display()))),
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let name =
            format!("kustos-sqlite-{}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed), nanos);
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)
            .map_err(|e| Error::Backend(format!("creating temporary directory {}: {e}", path.display())))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};

    const WAIT: Duration = Duration::from_secs(20);

    fn durable_store() -> (tempfile::TempDir, SqliteStorage) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStorage::open(&dir.path().join("kustos.db")).expect("open");
        (dir, store)
    }

    fn fast_store(cfg: Config) -> SqliteStorage {
        SqliteStorage::open_temp(Config { durable: false, ..cfg }).expect("open")
    }

    fn keys(list: &ListResult) -> Vec<&str> {
        list.items.iter().map(|kv| kv.key.as_str()).collect()
    }

    async fn next_events(s: &mut BoxStream<'static, Result<Event>>, n: usize) -> Vec<Event> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let item = tokio::time::timeout(WAIT, s.next()).await.expect("event in time").expect("stream open");
            out.push(item.expect("event"));
        }
        out
    }

    type EventSummary<'a> = (EventKind, Rev, &'a str, &'a [u8], Option<&'a [u8]>);

    fn summary(events: &[Event]) -> Vec<EventSummary<'_>> {
        events.iter().map(|e| (e.kind, e.rev, e.key.as_str(), e.value.as_slice(), e.prev_value.as_deref())).collect()
    }

    fn raw_rows(path: &Path) -> Vec<(Rev, String, bool)> {
        let conn = Connection::open(path).expect("open raw");
        let mut stmt = conn.prepare("SELECT rev, key, deleted FROM kv ORDER BY rev").expect("prepare");
        stmt.query_map([], |r| Ok((rev_at(0)(r)?, r.get(1)?, r.get(2)?)))
            .expect("query")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("rows")
    }

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        let cases: &[(&str, Option<&str>)] = &[
            ("/registry/pods/", Some("/registry/pods0")),
            ("a", Some("b")),
            ("", None),
            ("a\u{10FFFF}", Some("b")),
            ("\u{10FFFF}", None),
            ("x\u{D7FF}", Some("x\u{E000}")),
        ];
        for (prefix, want) in cases {
            assert_eq!(prefix_end(prefix).as_deref(), *want, "prefix {prefix:?}");
        }
    }

    #[tokio::test]
    async fn compare_and_swap_failures_report_the_right_error() {
        let (_dir, s) = durable_store();
        let r1 = s.create("/r/a", b"1".to_vec()).await.expect("create");
        let r2 = s.update("/r/a", b"2".to_vec(), r1).await.expect("update");
        assert!(r2 > r1);
        let cases: Vec<(&str, Result<Rev>)> = vec![
            ("create existing", s.create("/r/a", b"x".to_vec()).await),
            ("update missing", s.update("/r/missing", b"x".to_vec(), 1).await),
            ("update stale", s.update("/r/a", b"x".to_vec(), r1).await),
            ("delete missing", s.delete("/r/missing", 1).await),
            ("delete stale", s.delete("/r/a", r1).await),
        ];
        let want = [
            Error::AlreadyExists("/r/a".into()),
            Error::NotFound("/r/missing".into()),
            Error::Conflict { key: "/r/a".into(), current_rev: r2 },
            Error::NotFound("/r/missing".into()),
            Error::Conflict { key: "/r/a".into(), current_rev: r2 },
        ];
        for ((name, got), want) in cases.into_iter().zip(want) {
            assert_eq!(got, Err(want), "{name}");
        }
        // Nothing above changed the key or consumed a revision.
        assert_eq!(s.current_rev(), r2);
        let kv = s.get("/r/a").await.expect("get").expect("present");
        assert_eq!((kv.value.as_slice(), kv.mod_rev), (&b"2"[..], r2));
    }

    #[tokio::test]
    async fn every_successful_write_gets_the_next_revision_across_all_keys() {
        let (_dir, s) = durable_store();
        assert_eq!(s.current_rev(), 0);
        let a1 = s.create("/r/a", b"a".to_vec()).await.expect("create a");
        let b1 = s.create("/r/b", b"b".to_vec()).await.expect("create b");
        let _ = s.create("/r/b", b"b".to_vec()).await.expect_err("duplicate");
        let a2 = s.update("/r/a", b"a2".to_vec(), a1).await.expect("update a");
        let b2 = s.delete("/r/b", b1).await.expect("delete b");
        assert_eq!([a1, b1, a2, b2], [1, 2, 3, 4]);
        assert_eq!(s.current_rev(), 4);
    }

    #[tokio::test]
    async fn get_returns_the_value_with_its_create_and_mod_revisions() {
        let (_dir, s) = durable_store();
        assert_eq!(s.get("/r/a").await.expect("get"), None);
        let c = s.create("/r/a", b"v1".to_vec()).await.expect("create");
        let m = s.update("/r/a", b"v2".to_vec(), c).await.expect("update");
        let kv = s.get("/r/a").await.expect("get").expect("present");
        assert_eq!(kv, KeyValue { key: "/r/a".into(), value: b"v2".to_vec(), create_rev: c, mod_rev: m });
        s.delete("/r/a", m).await.expect("delete");
        assert_eq!(s.get("/r/a").await.expect("get"), None);
        // Re-created: a new create revision.
        let c2 = s.create("/r/a", b"v3".to_vec()).await.expect("recreate");
        let kv = s.get("/r/a").await.expect("get").expect("present");
        assert_eq!((kv.create_rev, kv.mod_rev), (c2, c2));
    }

    #[tokio::test]
    async fn list_at_an_old_revision_sees_the_snapshot_of_that_revision() {
        let (_dir, s) = durable_store();
        let a = s.create("/p/a", b"a1".to_vec()).await.expect("rev 1");
        let b = s.create("/p/b", b"b1".to_vec()).await.expect("rev 2");
        s.create("/q/x", b"x".to_vec()).await.expect("rev 3 (other prefix)");
        s.update("/p/a", b"a2".to_vec(), a).await.expect("rev 4");
        s.delete("/p/b", b).await.expect("rev 5");
        s.create("/p/c", b"c1".to_vec()).await.expect("rev 6");
        type Case<'a> = (Option<Rev>, &'a [(&'a str, &'a str)]);
        let cases: &[Case<'_>] = &[
            (Some(0), &[]),
            (Some(1), &[("/p/a", "a1")]),
            (Some(3), &[("/p/a", "a1"), ("/p/b", "b1")]),
            (Some(4), &[("/p/a", "a2"), ("/p/b", "b1")]),
            (Some(5), &[("/p/a", "a2")]),
            (Some(6), &[("/p/a", "a2"), ("/p/c", "c1")]),
            (None, &[("/p/a", "a2"), ("/p/c", "c1")]),
        ];
        for (at, want) in cases {
            let got = s.list("/p/", ListOptions { at_rev: *at, ..Default::default() }).await.expect("list");
            let got_pairs: Vec<(&str, &str)> =
                got.items.iter().map(|kv| (kv.key.as_str(), std::str::from_utf8(&kv.value).expect("utf8"))).collect();
            assert_eq!(&got_pairs, want, "at {at:?}");
            assert_eq!(got.rev, at.unwrap_or(6), "at {at:?}");
            assert_eq!(got.remaining, 0, "at {at:?}");
        }
        // Revisions of items at an old revision are the ones of that time.
        let old = s.list("/p/", ListOptions { at_rev: Some(3), ..Default::default() }).await.expect("list");
        assert_eq!(old.items[0].mod_rev, 1);
    }

    #[tokio::test]
    async fn pagination_with_start_after_and_limit_walks_every_key_once() {
        let s = fast_store(Config::default());
        let mut revs = BTreeMap::new();
        for i in 0..23 {
            let key = format!("/p/k{i:02}");
            revs.insert(key.clone(), s.create(&key, vec![i]).await.expect("create"));
        }
        s.create("/p0", b"just after the prefix".to_vec()).await.expect("create");
        s.create("/o/z", b"before the prefix".to_vec()).await.expect("create");
        let snapshot = s.current_rev();
        // Changes after the snapshot must not show in pages read at it.
        s.delete("/p/k05", revs["/p/k05"]).await.expect("delete");
        s.create("/p/k99", b"late".to_vec()).await.expect("create");

        let all_at_snapshot: Vec<String> = revs.keys().cloned().collect();
        for (at, page) in [(Some(snapshot), 5), (Some(snapshot), 23), (Some(snapshot), 50), (None, 7)] {
            let mut seen = Vec::new();
            let mut start_after = None;
            let mut read_at = at;
            loop {
                let opts = ListOptions { at_rev: read_at, start_after: start_after.clone(), limit: Some(page) };
                let res = s.list("/p/", opts).await.expect("list");
                read_at = Some(res.rev);
                seen.extend(res.items.iter().map(|kv| kv.key.clone()));
                assert_eq!(seen.len() as u64 + res.remaining, 23, "page {page} at {at:?}");
                match res.items.last() {
                    Some(last) if res.remaining > 0 => start_after = Some(last.key.clone()),
                    _ => break,
                }
            }
            if at.is_some() {
                assert_eq!(seen, all_at_snapshot, "page {page}");
            } else {
                let mut want: Vec<String> = all_at_snapshot.iter().filter(|k| *k != "/p/k05").cloned().collect();
                want.push("/p/k99".into());
                assert_eq!(seen, want, "page {page} at current");
            }
        }
        // A start_after before the prefix does not leak keys from outside it.
        let res = s
            .list("/p/", ListOptions { start_after: Some("/a".into()), limit: Some(1), ..Default::default() })
            .await
            .expect("list");
        assert_eq!(keys(&res), ["/p/k00"]);
        assert_eq!(res.remaining, 22);
        // limit 0 means all.
        let res = s.list("/p/", ListOptions { limit: Some(0), ..Default::default() }).await.expect("list");
        assert_eq!((res.items.len(), res.remaining), (23, 0));
    }

    #[tokio::test]
    async fn list_refuses_compacted_and_future_revisions() {
        let (_dir, s) = durable_store();
        let mut rev = s.create("/p/a", b"1".to_vec()).await.expect("create");
        for i in 0..5 {
            rev = s.update("/p/a", vec![i], rev).await.expect("update");
        }
        s.compact(4).await.expect("compact");
        assert_eq!(s.compacted_rev(), 4);
        let cases: &[(Rev, Option<Error>)] = &[
            (3, Some(Error::Compacted { requested: 3, compacted: 4 })),
            (4, None),
            (6, None),
            (7, Some(Error::FutureRevision { requested: 7, current: 6 })),
        ];
        for (at, want) in cases {
            let got = s.list("/p/", ListOptions { at_rev: Some(*at), ..Default::default() }).await;
            match want {
                Some(e) => assert_eq!(got.as_ref().err(), Some(e), "at {at}"),
                None => assert_eq!(got.expect("list").items.len(), 1, "at {at}"),
            }
        }
    }

    #[tokio::test]
    async fn count_counts_only_live_keys_under_the_prefix() {
        let (_dir, s) = durable_store();
        for k in ["/p/a", "/p/b", "/p/c", "/pz", "/q/a"] {
            s.create(k, b"v".to_vec()).await.expect("create");
        }
        let b = s.get("/p/b").await.expect("get").expect("present");
        s.delete("/p/b", b.mod_rev).await.expect("delete");
        for (prefix, want) in [("/p/", 2), ("/q/", 1), ("/", 4), ("", 4), ("/x/", 0)] {
            assert_eq!(s.count(prefix).await.expect("count"), want, "prefix {prefix:?}");
        }
    }

    #[tokio::test]
    async fn watch_replays_history_then_streams_live_events_in_order() {
        let (_dir, s) = durable_store();
        let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("1");
        s.create("/q/x", b"x".to_vec()).await.expect("2");
        let a2 = s.update("/p/a", b"a2".to_vec(), a1).await.expect("3");
        let mut w = s.watch("/p/", 1).await.expect("watch");
        let a3 = s.delete("/p/a", a2).await.expect("4");
        s.create("/q/y", b"y".to_vec()).await.expect("5");
        let a4 = s.create("/p/a", b"a3".to_vec()).await.expect("6");
        s.update("/p/a", b"a4".to_vec(), a4).await.expect("7");
        let got = next_events(&mut w, 4).await;
        assert_eq!(
            summary(&got),
            vec![
                (EventKind::Updated, a2, "/p/a", &b"a2"[..], Some(&b"a1"[..])),
                (EventKind::Deleted, a3, "/p/a", &b"a2"[..], Some(&b"a2"[..])),
                (EventKind::Created, a4, "/p/a", &b"a3"[..], None),
                (EventKind::Updated, 7, "/p/a", &b"a4"[..], Some(&b"a3"[..])),
            ]
        );
        // A watch from 0 sees everything under its prefix, history first.
        let mut all = s.watch("/", 0).await.expect("watch");
        let got = next_events(&mut all, 7).await;
        assert_eq!(got.iter().map(|e| e.rev).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6, 7]);
        s.create("/q/z", b"z".to_vec()).await.expect("8");
        assert_eq!(next_events(&mut all, 1).await[0].rev, 8);
        assert_eq!(next_events(&mut w, 0).await.len(), 0);
    }

    #[tokio::test]
    async fn get_at_reads_one_key_at_a_revision_without_its_prefix_siblings() {
        let s = fast_store(Config::default());
        let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("1");
        s.create("/p/ab", b"ab".to_vec()).await.expect("2");
        let a2 = s.update("/p/a", b"a2".to_vec(), a1).await.expect("3");
        type Case = (&'static str, &'static str, Option<Rev>, Option<&'static [u8]>, Rev);
        let cases: &[Case] = &[
            ("current value, read at the current revision", "/p/a", None, Some(b"a2"), 3),
            ("an old revision sees the old value", "/p/a", Some(a1), Some(b"a1"), a1),
            ("a sibling that extends the key is not the key", "/p/a", Some(2), Some(b"a1"), 2),
            ("missing key", "/p/b", None, None, 3),
            ("before the key existed", "/p/ab", Some(1), None, 1),
        ];
        for (what, key, at, want, want_rev) in cases {
            let (kv, rev) = s.get_at(key, *at).await.expect(what);
            assert_eq!(kv.as_ref().map(|kv| kv.value.as_slice()), *want, "{what}");
            assert_eq!(rev, *want_rev, "{what}");
            if let Some(kv) = kv {
                assert_eq!(kv.key, *key, "{what}");
            }
        }
        assert_eq!(s.get_at("/p/a", None).await.expect("get").0.expect("a").mod_rev, a2);
        assert!(matches!(s.get_at("/p/a", Some(99)).await, Err(Error::FutureRevision { .. })));
        s.compact(3).await.expect("compact");
        assert!(matches!(s.get_at("/p/a", Some(1)).await, Err(Error::Compacted { .. })));
    }

    #[tokio::test]
    async fn cached_reads_are_not_prepared_again_for_each_key() {
        let s = fast_store(Config::default());
        let mut rev = 0;
        for k in ["/p/a", "/p/b", "/p/c"] {
            rev = s.create(k, b"v".to_vec()).await.expect("create");
        }
        for i in 0..30 {
            let key = ["/p/a", "/p/b", "/p/c"][i % 3];
            s.get(key).await.expect("get");
            s.get_at(key, None).await.expect("get_at");
            let keys = Keys::Exact(key.to_string());
            s.reads.with(|conn| history_after(conn, &keys, 0, WATCH_CHUNK)).expect("history");
        }
        assert!(rev > 0);
        let reprepared: i32 = (0..READERS)
            .map(|i| {
                let conn = s.reads.conns[i].lock().unwrap_or_else(PoisonError::into_inner);
                let stmts =
                    conn.prepare_cached(GET_CURRENT).map(|st| st.get_status(rusqlite::StatementStatus::RePrepare));
                stmts.unwrap_or(0)
            })
            .sum();
        assert_eq!(reprepared, 0, "point reads keep their plan across keys");
    }

    #[tokio::test]
    async fn a_key_watch_sees_only_its_key_history_first() {
        let s = fast_store(Config::default());
        let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("1");
        s.create("/p/ab", b"ab".to_vec()).await.expect("2");
        let mut w = s.watch_key("/p/a", 0).await.expect("watch");
        let a2 = s.update("/p/a", b"a2".to_vec(), a1).await.expect("3");
        s.create("/p/b", b"b".to_vec()).await.expect("4");
        let gone = s.delete("/p/a", a2).await.expect("5");
        let again = s.create("/p/a", b"a3".to_vec()).await.expect("6");
        let got = next_events(&mut w, 4).await;
        assert_eq!(
            summary(&got),
            vec![
                (EventKind::Created, a1, "/p/a", &b"a1"[..], None),
                (EventKind::Updated, a2, "/p/a", &b"a2"[..], Some(&b"a1"[..])),
                (EventKind::Deleted, gone, "/p/a", &b"a2"[..], Some(&b"a2"[..])),
                (EventKind::Created, again, "/p/a", &b"a3"[..], None),
            ]
        );
        // From a later revision: only what follows it.
        let mut late = s.watch_key("/p/a", gone).await.expect("watch");
        assert_eq!(next_events(&mut late, 1).await[0].rev, again);
        // Nothing else arrives for other keys' changes.
        s.create("/p/c", b"c".to_vec()).await.expect("7");
        assert!(tokio::time::timeout(Duration::from_millis(200), w.next()).await.is_err(), "no event for /p/c");
    }

    #[tokio::test]
    async fn many_key_watches_each_get_their_own_changes_and_leave_no_registration_behind() {
        let s = fast_store(Config::default());
        let mut watches = Vec::new();
        for i in 0..50 {
            watches.push(s.watch_key(&format!("/csr/n{i}"), 0).await.expect("watch"));
        }
        for i in 0..50 {
            s.create(&format!("/csr/n{i}"), format!("v{i}").into_bytes()).await.expect("create");
        }
        for (i, w) in watches.iter_mut().enumerate() {
            let got = next_events(w, 1).await;
            assert_eq!(got[0].key, format!("/csr/n{i}"));
            assert_eq!(got[0].value, format!("v{i}").into_bytes());
        }
        assert_eq!(s.shared.keyed().by_key.len(), 50);
        drop(watches);
        assert!(s.shared.keyed().by_key.is_empty(), "dropped watches unregister");
    }

    #[tokio::test]
    async fn a_key_watch_from_a_compacted_revision_fails_with_compacted() {
        let s = fast_store(Config::default());
        let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
        for i in 1..5 {
            rev = s.update("/p/a", vec![i], rev).await.expect("update");
        }
        s.compact(3).await.expect("compact");
        let mut w = s.watch_key("/p/a", 1).await.expect("watch");
        let item = tokio::time::timeout(WAIT, w.next()).await.expect("in time").expect("an item");
        assert!(matches!(item, Err(Error::Compacted { .. })), "{item:?}");
    }

    #[tokio::test]
    async fn a_key_watch_ends_when_the_store_is_dropped() {
        let s = fast_store(Config::default());
        let mut w = s.watch_key("/p/a", 0).await.expect("watch");
        drop(s);
        let end = tokio::time::timeout(WAIT, w.next()).await.expect("ends in time");
        assert!(end.is_none(), "{end:?}");
    }

    #[tokio::test]
    async fn watch_replays_history_longer_than_one_chunk() {
        let s = fast_store(Config::default());
        let n = WATCH_CHUNK * 2 + 17;
        let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
        for i in 1..n {
            rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
            s.create(&format!("/q/{i}"), Vec::new()).await.expect("noise");
        }
        let mut w = s.watch("/p/", 0).await.expect("watch");
        let got = next_events(&mut w, n).await;
        for (i, ev) in got.iter().enumerate() {
            assert_eq!(ev.value, i.to_string().into_bytes());
            if i > 0 {
                assert_eq!(ev.prev_value, Some((i - 1).to_string().into_bytes()));
                assert!(ev.rev > got[i - 1].rev);
            }
        }
    }

    #[tokio::test]
    async fn watch_from_a_compacted_revision_fails_with_compacted() {
        let (_dir, s) = durable_store();
        let mut rev = s.create("/p/a", b"1".to_vec()).await.expect("create");
        for i in 0..3 {
            rev = s.update("/p/a", vec![i], rev).await.expect("update");
        }
        s.compact(3).await.expect("compact");
        let err = s.watch("/p/", 2).await.err();
        assert_eq!(err, Some(Error::Compacted { requested: 2, compacted: 3 }));
        let mut w = s.watch("/p/", 3).await.expect("watch at the compaction revision");
        let got = next_events(&mut w, 1).await;
        assert_eq!((got[0].rev, got[0].prev_value.as_deref()), (4, Some(&[1u8][..])));
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_rereads_the_gap_from_history() {
        let s = fast_store(Config { broadcast_capacity: 4, ..Config::default() });
        let mut w = s.watch("/p/", 0).await.expect("watch");
        let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
        for i in 1..50u32 {
            rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
        }
        let got = next_events(&mut w, 50).await;
        assert_eq!(got.iter().map(|e| e.rev).collect::<Vec<_>>(), (1..=50).collect::<Vec<_>>());
        s.update("/p/a", b"live".to_vec(), rev).await.expect("update");
        assert_eq!(next_events(&mut w, 1).await[0].value, b"live");
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_past_a_compaction_ends_with_compacted() {
        let s = fast_store(Config { broadcast_capacity: 4, ..Config::default() });
        let mut w = s.watch("/p/", 0).await.expect("watch");
        let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
        for i in 1..20u32 {
            rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
        }
        s.compact(rev).await.expect("compact");
        let first = tokio::time::timeout(WAIT, w.next()).await.expect("in time").expect("an item");
        assert_eq!(first, Err(Error::Compacted { requested: 0, compacted: 20 }));
        assert_eq!(tokio::time::timeout(WAIT, w.next()).await.expect("in time"), None);
    }

    /// A deterministic mix of creates, updates and deletes over a few keys.
    async fn churn(s: &SqliteStorage, writes: usize) {
        let mut live: BTreeMap<String, Rev> = BTreeMap::new();
        let mut x: u64 = 12345;
        for i in 0..writes {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = format!("/p/k{}", (x >> 33) % 5);
            let value = format!("v{i}").into_bytes();
            match live.get(&key).copied() {
                None => {
                    live.insert(key.clone(), s.create(&key, value).await.expect("create"));
                }
                Some(r) if (x >> 20) & 3 == 0 => {
                    s.delete(&key, r).await.expect("delete");
                    live.remove(&key);
                }
                Some(r) => {
                    live.insert(key.clone(), s.update(&key, value, r).await.expect("update"));
                }
            }
        }
    }

    #[tokio::test]
    async fn compaction_keeps_every_snapshot_from_the_compaction_revision_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kustos.db");
        let s = SqliteStorage::open_with(&path, Config { compact_step: 3, ..Config::default() }, None).expect("open");
        churn(&s, 60).await;
        let current = s.current_rev();
        assert_eq!(current, 60);
        let mut before = BTreeMap::new();
        for at in 0..=current {
            let list = s.list("/p/", ListOptions { at_rev: Some(at), ..Default::default() }).await.expect("list");
            let events = next_events(&mut s.watch("/p/", at).await.expect("watch"), (current - at) as usize).await;
            before.insert(at, (list, events));
        }
        for compact_to in [17, 18, 41, 60] {
            s.compact(compact_to).await.expect("compact");
            assert_eq!(s.compacted_rev(), compact_to);
            for (at, (list, events)) in &before {
                let got = s.list("/p/", ListOptions { at_rev: Some(*at), ..Default::default() }).await;
                if *at < compact_to {
                    assert_eq!(got, Err(Error::Compacted { requested: *at, compacted: compact_to }));
                    continue;
                }
                assert_eq!(&got.expect("list"), list, "list at {at} after compacting to {compact_to}");
                let got = next_events(&mut s.watch("/p/", *at).await.expect("watch"), events.len()).await;
                assert_eq!(&got, events, "watch after {at} after compacting to {compact_to}");
            }
            // Only the newest row of each key live at the compaction revision is left below it.
            let rows = raw_rows(&path);
            let old: Vec<&(Rev, String, bool)> = rows.iter().filter(|r| r.0 <= compact_to).collect();
            let live_then = &before[&compact_to].0;
            assert_eq!(old.len(), live_then.items.len(), "rows ≤ {compact_to}: {old:?}");
            assert!(old.iter().all(|r| !r.2), "no tombstones ≤ {compact_to}");
            assert_eq!(rows.iter().filter(|r| r.0 > compact_to).count() as u64, current - compact_to);
        }
        // Compacting backwards is a no-op; compacting into the future is refused.
        s.compact(10).await.expect("compact backwards");
        assert_eq!(s.compacted_rev(), 60);
        assert_eq!(s.compact(61).await, Err(Error::FutureRevision { requested: 61, current: 60 }));
        assert_eq!(s.list("/p/", ListOptions::default()).await.expect("list"), before[&60].0);
    }

    #[tokio::test]
    async fn the_database_and_its_wal_and_shm_are_created_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kustos.db");
        let s = SqliteStorage::open(&path).expect("open");
        s.create("/p/a", b"1".to_vec()).await.expect("create");
        for name in ["kustos.db", "kustos.db-wal", "kustos.db-shm"] {
            let meta = std::fs::metadata(dir.path().join(name)).expect(name);
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        }
    }

    #[tokio::test]
    async fn reopening_the_file_keeps_data_and_revisions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kustos.db");
        {
            let s = SqliteStorage::open(&path).expect("open");
            assert_eq!(s.current_rev(), 0);
        }
        {
            let s = SqliteStorage::open(&path).expect("reopen empty");
            assert_eq!(s.current_rev(), 0);
            let r = s.create("/p/a", b"1".to_vec()).await.expect("create");
            let r = s.update("/p/a", b"2".to_vec(), r).await.expect("update");
            let b = s.create("/p/b", b"b".to_vec()).await.expect("create");
            s.delete("/p/b", b).await.expect("delete");
            s.compact(r).await.expect("compact");
        }
        let s = SqliteStorage::open(&path).expect("reopen");
        // The newest revision was a delete whose row compaction could drop: the revision is
        // persisted on its own, so it does not go backwards.
        assert_eq!((s.current_rev(), s.compacted_rev()), (4, 2));
        let kv = s.get("/p/a").await.expect("get").expect("present");
        assert_eq!((kv.value.as_slice(), kv.create_rev, kv.mod_rev), (&b"2"[..], 1, 2));
        assert_eq!(s.create("/p/c", Vec::new()).await, Ok(5));
        let at = s.list("/p/", ListOptions { at_rev: Some(3), ..Default::default() }).await.expect("list");
        assert_eq!(keys(&at), ["/p/a", "/p/b"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_creates_all_succeed_with_distinct_revisions() {
        let (_dir, s) = durable_store();
        let s = Arc::new(s);
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move { s.create(&format!("/p/{i:03}"), vec![0; 1024]).await })
            })
            .collect();
        let mut revs = HashSet::new();
        for t in tasks {
            revs.insert(t.await.expect("task").expect("create"));
        }
        assert_eq!(revs.len(), 200);
        assert_eq!(revs.iter().max(), Some(&200));
        assert_eq!(s.count("/p/").await.expect("count"), 200);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_updates_with_the_same_expected_revision_have_one_winner() {
        let (_dir, s) = durable_store();
        let s = Arc::new(s);
        let r = s.create("/p/a", b"0".to_vec()).await.expect("create");
        let tasks: Vec<_> = (0..50u8)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move { s.update("/p/a", vec![i], r).await })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            match t.await.expect("task") {
                Ok(rev) => {
                    wins += 1;
                    assert_eq!(rev, r + 1);
                }
                Err(e) => assert_eq!(e, Error::Conflict { key: "/p/a".into(), current_rev: r + 1 }),
            }
        }
        assert_eq!(wins, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_write_that_sqlite_rejects_fails_alone_and_leaves_nothing_behind() {
        let (dir, s) = durable_store();
        let path = dir.path().join("kustos.db");
        // Fail the second statement of a create (the `cur` insert, after the `kv` row went in).
        Connection::open(&path)
            .expect("open raw")
            .execute_batch(
                "CREATE TRIGGER inject BEFORE INSERT ON cur WHEN NEW.key = '/p/bad' \
                 BEGIN SELECT RAISE(ABORT, 'injected'); END;",
            )
            .expect("trigger");
        let s = Arc::new(s);
        let tasks: Vec<_> = ["/p/a", "/p/bad", "/p/b", "/p/c"]
            .into_iter()
            .map(|k| {
                let s = s.clone();
                tokio::spawn(async move { (k, s.create(k, b"v".to_vec()).await) })
            })
            .collect();
        let mut revs = Vec::new();
        for t in tasks {
            match t.await.expect("task") {
                ("/p/bad", res) => assert!(matches!(res, Err(Error::Backend(_))), "{res:?}"),
                (k, res) => revs.push(res.unwrap_or_else(|e| panic!("{k}: {e}"))),
            }
        }
        revs.sort_unstable();
        assert_eq!(revs, [1, 2, 3]);
        assert_eq!(s.get("/p/bad").await.expect("get"), None);
        assert!(raw_rows(&path).iter().all(|r| r.1 != "/p/bad"));
        assert_eq!(s.create("/p/d", Vec::new()).await, Ok(4));
    }

    #[test]
    fn acknowledged_writes_survive_a_kill_9_of_the_process() {
        use std::io::{BufRead, BufReader, Write};
        const CHILD: &str = "KUSTOS_SQLITE_CRASH_CHILD";
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        if let Ok(path) = std::env::var(CHILD) {
            // The child: write until killed, reporting each acknowledged write.
            rt.block_on(async {
                let s = SqliteStorage::open(Path::new(&path)).expect("open");
                let mut out = std::io::stdout();
                for i in 0.. {
                    let rev = s.create(&format!("/p/{i:06}"), vec![7; 512]).await.expect("create");
                    writeln!(out, "acked {i} {rev}").expect("stdout");
                    out.flush().expect("flush");
                }
            });
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kustos.db");
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "storage::sqlite::tests::acknowledged_writes_survive_a_kill_9_of_the_process"])
            .arg("--nocapture")
            .env(CHILD, &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("line");
            let mut parts = line.split_whitespace();
            if parts.next() != Some("acked") {
                continue;
            }
            let i: u32 = parts.next().and_then(|p| p.parse().ok()).expect("index");
            let rev: Rev = parts.next().and_then(|p| p.parse().ok()).expect("rev");
            acked.push((i, rev));
            if acked.len() == 300 {
                child.kill().expect("SIGKILL");
                break;
            }
        }
        let _ = child.wait();
        assert_eq!(acked.len(), 300, "the child stopped early");
        rt.block_on(async {
            let s = SqliteStorage::open(&path).expect("reopen");
            for (i, rev) in &acked {
                let kv = s.get(&format!("/p/{i:06}")).await.expect("get");
                assert_eq!(kv.map(|kv| kv.mod_rev), Some(*rev), "acknowledged write {i} lost");
            }
            assert!(s.current_rev() >= acked.last().map(|a| a.1).unwrap_or(0));
        });
    }

    #[tokio::test]
    async fn the_compactor_keeps_the_last_n_revisions() {
        let s = Arc::new(fast_store(Config::default()));
        let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
        for i in 1..30u32 {
            rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
        }
        let task = SqliteStorage::spawn_compactor_every(s.clone(), 10, Duration::from_millis(10));
        let deadline = tokio::time::Instant::now() + WAIT;
        while s.compacted_rev() != 20 {
            assert!(tokio::time::Instant::now() < deadline, "compactor did not run");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(s.list("/p/", ListOptions { at_rev: Some(20), ..Default::default() }).await.is_ok());
        drop(s);
        tokio::time::timeout(WAIT, task).await.expect("compactor ends with the store").expect("task");
    }

    #[tokio::test]
    async fn a_throwaway_store_works_and_is_removed_on_drop() {
        let s = SqliteStorage::open_in_memory().expect("open");
        let dir = s.temp_dir.as_ref().map(|d| d.0.clone()).expect("temp dir");
        assert!(dir.exists());
        let r = s.create("/p/a", b"1".to_vec()).await.expect("create");
        assert_eq!(s.get("/p/a").await.expect("get").map(|kv| kv.mod_rev), Some(r));
        drop(s);
        assert!(!dir.exists());
    }
}
