//! Reads: the pool of query-only connections and the queries behind get, list, count and
//! the history a watch replays.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, Value, ValueRef};
use rusqlite::{params_from_iter, Connection, OptionalExtension, ToSql};
use tokio::sync::Semaphore;

use super::BUSY_TIMEOUT;
use crate::storage::fanout::Scope;
use crate::storage::memo::Memo;
use crate::storage::{Error, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Rev};

pub(super) struct ReadPool {
    pub(super) conns: Vec<Mutex<Reader>>,
    path: PathBuf,
    /// One per connection: reads beyond that wait here, as tasks, instead of each taking a
    /// blocking-pool thread only to block on a connection's mutex (under a storm of
    /// requests that meant hundreds of threads and more context switching than work).
    pub(super) permits: Arc<Semaphore>,
    /// A connection other than the first that no read took for this long is closed, and
    /// opened again when reads overlap: each keeps a page cache of its own, which an idle
    /// server does not need (docs/BENCHMARKS.md, "Read connections closed when idle").
    idle_close: Duration,
    started: Instant,
    /// When the pool last looked for idle connections, in milliseconds since `started`.
    swept: AtomicU64,
}

/// A read connection, opened when first needed, and when it last served a read.
pub(super) struct Reader {
    pub(super) conn: Option<Connection>,
    used: Instant,
}

impl ReadPool {
    /// `size` connections to the database at `path`, the first opened now and kept open.
    pub(super) fn open(path: &Path, size: usize, idle_close: Duration) -> Result<Self> {
        let now = Instant::now();
        let mut conns: Vec<Mutex<Reader>> =
            (0..size.max(1)).map(|_| Mutex::new(Reader { conn: None, used: now })).collect();
        conns[0] = Mutex::new(Reader { conn: Some(open_reader(path)?), used: now });
        Ok(ReadPool {
            conns,
            path: path.to_path_buf(),
            permits: Arc::new(Semaphore::new(size.max(1))),
            idle_close,
            started: now,
            swept: AtomicU64::new(0),
        })
    }

    /// How many of the connections are open.
    #[cfg(test)]
    pub(super) fn opened(&self) -> usize {
        self.conns.iter().filter(|c| c.lock().unwrap_or_else(PoisonError::into_inner).conn.is_some()).count()
    }

    /// Run `f` on a free connection (or wait for one), on the blocking thread pool.
    pub(super) async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T>
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
    pub(super) async fn run_small<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        // Only a connection already open: opening one is file I/O, for the blocking pool.
        {
            let mut free = self.conns.iter().find_map(|c| c.try_lock().ok().filter(|g| g.conn.is_some()));
            if let Some(reader) = free.as_mut() {
                reader.used = Instant::now();
                if let Some(conn) = reader.conn.as_mut() {
                    return f(conn);
                }
            }
        }
        self.run(f).await
    }

    /// Run `f` on the first free connection, opening it if it is not open; when none is
    /// free, wait for the first. The first free one rather than the next in turn, so that
    /// the others go unused, and are closed, while reads do not overlap.
    pub(super) fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let Some(first) = self.conns.first() else {
            return Err(Error::Backend("sqlite: no read connections".to_string()));
        };
        // A connection whose user panicked is still usable: its transaction was rolled back
        // when the guard's Transaction was dropped during unwinding.
        let free = self.conns.iter().find_map(|slot| match slot.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        });
        let mut guard = free.unwrap_or_else(|| first.lock().unwrap_or_else(PoisonError::into_inner));
        if guard.conn.is_none() {
            match open_reader(&self.path) {
                Ok(conn) => guard.conn = Some(conn),
                // Out of file descriptors, say: the read waits for the first connection instead.
                Err(e) => {
                    tracing::warn!(error = %e, "sqlite: opening another read connection failed; reading on the first");
                    drop(guard);
                    guard = first.lock().unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
        guard.used = Instant::now();
        let out = match guard.conn.as_mut() {
            Some(conn) => f(conn),
            None => Err(Error::Backend("sqlite: a read connection was not opened".to_string())),
        };
        drop(guard);
        self.close_idle();
        out
    }

    /// Close the connections, other than the first, that served no read for `idle_close`;
    /// looked for at most once a second.
    fn close_idle(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.swept.load(Ordering::Relaxed);
        if now.saturating_sub(last) < 1000
            || self.swept.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        for slot in self.conns.iter().skip(1) {
            if let Ok(mut reader) = slot.try_lock() {
                if reader.conn.is_some() && reader.used.elapsed() >= self.idle_close {
                    reader.conn = None;
                }
            }
        }
    }
}

/// Keep each cached statement's query plan whatever values are bound (SQLite's query planner
/// stability guarantee). Otherwise SQLite (built with STAT4) re-prepares a statement whose
/// plan might depend on a bound value — every join and ORDER BY read here — each time it is
/// bound to another key: as much work again as the read itself.
pub(super) fn stable_plans(conn: &Connection) -> Result<()> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

pub(super) fn open_reader(path: &Path) -> Result<Connection> {
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
pub(super) struct ReadTx<'c> {
    conn: &'c Connection,
}

impl<'c> ReadTx<'c> {
    pub(super) fn begin(conn: &'c Connection) -> Result<Self> {
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

pub(super) fn read_meta_value(conn: &Connection, name: &str) -> Result<Rev> {
    let v: Option<Rev> =
        conn.prepare_cached("SELECT value FROM meta WHERE name = ?1")?.query_row([name], rev_at(0)).optional()?;
    Ok(v.unwrap_or(0))
}

/// The first key after all keys starting with `prefix` (None: no upper bound). Keys compare
/// as UTF-8 bytes, which is code-point order, so bumping the last character is exact.
pub(super) fn prefix_end(prefix: &str) -> Option<String> {
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
pub(super) enum Keys {
    /// Every key starting with this.
    Prefix(String),
    /// This one key.
    Exact(String),
}

impl Keys {
    /// The keys a watch covers.
    pub(super) fn of(scope: &Scope) -> Keys {
        match scope {
            Scope::Prefix(p) => Keys::Prefix(p.clone()),
            Scope::Key(k) => Keys::Exact(k.clone()),
        }
    }
}

/// SQL condition on `col`: the keys of `keys` strictly after `after` (exact keys ignore
/// `after`: one key never pages). Pushes its parameters.
pub(super) fn key_filter(col: &str, keys: &Keys, after: Option<&str>, params: &mut Vec<Value>) -> String {
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
pub(super) struct SqlRev(pub(super) Rev);

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
pub(super) fn rev_at(i: usize) -> impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<Rev> {
    move |r| r.get::<_, SqlRev>(i).map(|v| v.0)
}

pub(super) fn rev_value(rev: Rev) -> Result<Value> {
    i64::try_from(rev).map(Value::Integer).map_err(|_| Error::Backend(format!("revision {rev} out of range")))
}

pub(super) fn limit_value(limit: Option<usize>) -> Value {
    Value::Integer(limit.and_then(|l| i64::try_from(l).ok()).unwrap_or(-1))
}

pub(super) fn key_value(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyValue> {
    Ok(KeyValue { key: r.get(0)?, value: r.get(1)?, create_rev: rev_at(2)(r)?, mod_rev: rev_at(3)(r)? })
}

/// The current value of one key.
pub(super) const GET_CURRENT: &str =
    "SELECT c.key, k.value, k.create_rev, k.rev FROM cur c JOIN kv k ON k.rev = c.rev WHERE c.key = ?1";

pub(super) fn get_current(conn: &mut Connection, key: &str) -> Result<Option<KeyValue>> {
    let kv = conn.prepare_cached(GET_CURRENT)?.query_row([key], key_value).optional()?;
    Ok(kv)
}

/// Keys (and, unless `count_only`, values) visible at `at` (None: current), as SQL + params.
pub(super) fn list_query(
    keys: &Keys,
    after: Option<&str>,
    at: Option<Rev>,
    count_only: bool,
) -> Result<(String, Vec<Value>)> {
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

pub(super) fn list_at(conn: &mut Connection, keys: &Keys, opts: &ListOptions) -> Result<ListResult> {
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
pub(super) fn history_after(conn: &mut Connection, keys: &Keys, after: Rev, limit: usize) -> Result<Vec<Event>> {
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
            Ok(Event { kind, rev, key: r.get(1)?, value, prev_value, memo: Memo::default() })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(events)
}
