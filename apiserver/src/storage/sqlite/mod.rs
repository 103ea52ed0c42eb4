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
//! is durable. While writes come from several callers at once (a write was already waiting
//! when the last transaction ended), a batch first waits `LINGER` (1 ms) for more to join it,
//! so that one `fsync` serves more writes; a caller writing alone never waits. Commits are
//! counted, with or without a wait (`kustos_sqlite_commits_total`, `work.rs`);
//! docs/BENCHMARKS.md ("Group commit that waits a millisecond") has the counts.
//!
//! # Reads
//!
//! A small pool of query-only connections, used from `spawn_blocking`. Every read that needs
//! more than one statement runs in one read transaction (a WAL snapshot), and checks the
//! compaction revision from `meta` inside that snapshot. `get`, and `get_at` of the current
//! revision, first look among the values the writer committed last (`current.rs`).
//!
//! # Compaction
//!
//! `compact(rev)` first records `compact_rev` (from then on reads below it fail with
//! `Compacted`), then deletes superseded rows in steps of `COMPACT_STEP` revisions, each step
//! its own short transaction on the writer thread, so writes queued meanwhile go in between.
//! [`SqliteStorage::spawn_compactor`] runs the shared compactor (`storage/compactor.rs`),
//! which keeps the last N revisions.
//!
//! # Files
//!
//! This file holds the schema, the store's handle and its [`Storage`] implementation;
//! `read.rs` the read pool and the queries; `watch.rs` the watch streams and the state they
//! share with the writer; `writer.rs` the writer thread (group commit, compaction steps);
//! `current.rs` the values it committed last, for reads of the current state;
//! `file.rs` the database file's creation, its lock (`kustos.db.lock`: one process opens a
//! store at a time) and the throwaway directory.

mod current;
mod file;
mod read;
mod watch;
mod writer;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use rusqlite::{params_from_iter, Connection};
use tokio::sync::{broadcast, oneshot};

use super::compactor::{self, Compact, COMPACT_INTERVAL};
use super::fanout::Scope;
use super::{Error, Event, KeyValue, ListOptions, ListResult, Result, Rev, Storage};
use crate::work::{self, Read as Counted, Write as Written};
use file::{create_private, lock_exclusive, TempDir};
use read::{get_current, history_after, key_filter, list_at, read_meta_value, stable_plans, Keys, ReadPool, SqlRev};
use watch::{key_watch_step, watch_step, KeyRegistration, KeyWatchState, KeyWatchers, Shared, WatchState};
use writer::{Msg, WriteOp, Writer};

/// Most write requests committed in one transaction.
const MAX_BATCH: usize = 1024;
/// How long a batch waits for more writes before its commit while several callers write
/// (`writer.rs`, `lingers`); not at all on a store that does not sync.
const LINGER: Duration = Duration::from_millis(1);
/// Read connections in the pool.
const READERS: usize = 4;
/// A read connection other than the first closes after this long without a read.
const IDLE_READER_CLOSE: Duration = Duration::from_secs(10);
/// History rows a watch reads per query while catching up.
const WATCH_CHUNK: usize = 1000;
/// Revisions one compaction step covers (one short transaction each).
const COMPACT_STEP: u64 = 5000;
/// Live events buffered per watcher before it lags (and re-reads the gap from history).
const BROADCAST_CAPACITY: usize = 4096;
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
    idle_reader_close: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            durable: true,
            broadcast_capacity: BROADCAST_CAPACITY,
            compact_step: COMPACT_STEP,
            idle_reader_close: IDLE_READER_CLOSE,
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
    /// The database's lock file, held while the store is open (`file.rs`, [`lock_exclusive`]);
    /// closed after the writer has stopped.
    _lock: std::fs::File,
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
    /// acknowledged (WAL, `synchronous=FULL`). One process at a time: a store another process
    /// holds open is refused (`<path>.lock`, `file.rs`).
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
        let lock = lock_exclusive(path)?;
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

        let reads = Arc::new(ReadPool::open(path, READERS, cfg.idle_reader_close)?);

        let (events, _) = broadcast::channel(cfg.broadcast_capacity.max(1));
        let shared = Arc::new(Shared {
            rev: AtomicU64::new(rev),
            compacted: AtomicU64::new(compacted),
            events,
            keyed: Mutex::new(KeyWatchers::default()),
            closed: AtomicBool::new(false),
            current: current::Current::default(),
            commits: Default::default(),
        });
        let writer = Writer {
            conn,
            shared: shared.clone(),
            rev,
            compacted,
            cursor,
            compact_step: cfg.compact_step.max(1),
            linger: cfg.durable.then_some(LINGER),
        };
        let (tx, rx) = mpsc::channel();
        let handle = thread::Builder::new()
            .name("kustos-sqlite-writer".to_string())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::Backend(format!("spawning the sqlite writer thread: {e}")))?;
        Ok(Self { shared, reads, tx: Some(tx), writer: Some(handle), temp_dir, _lock: lock })
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
        compactor::spawn(store, keep_revisions, every)
    }

    /// The loop of `spawn_compactor_every`, for a supervisor to run.
    pub fn compactor_every(
        store: Arc<Self>,
        keep_revisions: u64,
        every: Duration,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        compactor::run(store, keep_revisions, every)
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

/// The number of current keys under `prefix`.
fn count_prefix(conn: &mut Connection, prefix: String) -> Result<u64> {
    let mut params = Vec::new();
    let filter = key_filter("key", &Keys::Prefix(prefix), None, &mut params);
    let sql = format!("SELECT COUNT(*) FROM cur WHERE {filter}");
    let n: SqlRev = conn.prepare_cached(&sql)?.query_row(params_from_iter(params.iter()), |r| r.get(0))?;
    Ok(n.0)
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        work::storage_read(Counted::Get);
        if let Some((kv, _)) = self.shared.current.get(key) {
            return Ok(Some(kv));
        }
        let key = key.to_owned();
        self.reads.run_small(move |conn| get_current(conn, &key)).await
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        work::storage_read(Counted::List);
        let keys = Keys::Prefix(prefix.to_owned());
        self.reads.run(move |conn| list_at(conn, &keys, &opts)).await
    }

    async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)> {
        work::storage_read(Counted::GetAt);
        if at_rev.is_none() {
            if let Some((kv, rev)) = self.shared.current.get(key) {
                return Ok((Some(kv), rev));
            }
        }
        let keys = Keys::Exact(key.to_owned());
        let opts = ListOptions { at_rev, ..Default::default() };
        let page = self.reads.run_small(move |conn| list_at(conn, &keys, &opts)).await?;
        Ok((page.items.into_iter().next(), page.rev))
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        work::storage_read(Counted::Count);
        let prefix = prefix.to_owned();
        self.reads.run(move |conn| count_prefix(conn, prefix)).await
    }

    async fn counts(&self, prefixes: &[String]) -> Vec<Result<u64>> {
        for _ in prefixes {
            work::storage_read(Counted::Count);
        }
        let owned = prefixes.to_vec();
        let counted =
            self.reads.run(move |conn| Ok(owned.into_iter().map(|p| count_prefix(conn, p)).collect::<Vec<_>>())).await;
        counted.unwrap_or_else(|e| vec![Err(e); prefixes.len()])
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Rev> {
        work::storage_write(Written::Create, key);
        self.write(WriteOp::Create { key: key.to_owned(), value }).await
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> Result<Rev> {
        work::storage_write(Written::Update, key);
        self.write(WriteOp::Update { key: key.to_owned(), value, expected_rev }).await
    }

    async fn delete(&self, key: &str, expected_rev: Rev) -> Result<Rev> {
        work::storage_write(Written::Delete, key);
        self.write(WriteOp::Delete { key: key.to_owned(), expected_rev }).await
    }

    async fn watch(&self, prefix: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        work::storage_read(Counted::Watch);
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
            scope: Scope::Prefix(prefix.to_owned()),
            pos: after_rev,
            catching_up: first.len() >= WATCH_CHUNK,
            buf: first.into(),
            done: false,
        };
        Ok(stream::unfold(state, watch_step).boxed())
    }

    async fn watch_key(&self, key: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        work::storage_read(Counted::WatchKey);
        // Register first: a change committed after the first history read then wakes it.
        let reg = KeyRegistration::new(&self.shared, key);
        let state = KeyWatchState {
            reads: self.reads.clone(),
            reg,
            pos: after_rev,
            buf: VecDeque::new(),
            catching_up: true,
            done: false,
        };
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

#[async_trait]
impl Compact for SqliteStorage {
    const LOG_NAME: &'static str = "storage";

    async fn resume_compaction(&self) -> Result<()> {
        self.finish_compaction().await
    }
}

#[cfg(test)]
mod tests;
