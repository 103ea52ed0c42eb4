//! The writer thread: group commit of compare-and-swap writes, and compaction steps.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use super::current::{Newest, MAX_VALUE_BYTES};
use super::read::{read_meta_value, rev_at, SqlRev};
use super::watch::Shared;
use super::MAX_BATCH;
use crate::storage::memo::Memo;
use crate::storage::{Error, Event, EventKind, KeyValue, Result, Rev};
use crate::work;

pub(super) enum WriteOp {
    Create { key: String, value: Vec<u8> },
    Update { key: String, value: Vec<u8>, expected_rev: Rev },
    Delete { key: String, expected_rev: Rev },
}

pub(super) enum Msg {
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

pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) shared: Arc<Shared>,
    /// Last committed revision.
    pub(super) rev: Rev,
    pub(super) compacted: Rev,
    /// Superseded rows with revision ≤ cursor are deleted.
    pub(super) cursor: Rev,
    pub(super) compact_step: u64,
    /// How long a batch waits for more writes while writes come from several callers at once
    /// ([`lingers`]); `None` for a store that does not sync.
    pub(super) linger: Option<Duration>,
}

/// Whether a batch waits before its commit for more writes to join it: only when its first
/// write was already waiting as the last transaction ended. The writer looks for one right
/// after that commit, before it answers its callers, so the write came from a caller that was
/// not answered then: writes are arriving from several at once, more are on their way, and
/// each commit (one `fsync`, the WAL frames of every page it touched, the revision row) is
/// then shared by more writes. A caller writing alone, which sends its next write only once
/// answered, and the first write after a quiet spell never wait.
fn lingers(waiting_at_last_commit: bool, batch: usize) -> bool {
    waiting_at_last_commit && batch > 0 && batch < MAX_BATCH
}

type Reply = oneshot::Sender<Result<Rev>>;
type Pending = (WriteOp, Reply);

impl Writer {
    pub(super) fn run(mut self, rx: mpsc::Receiver<Msg>) {
        // A message taken as the last transaction ended, before its callers were answered.
        let mut carried: Option<Msg> = None;
        loop {
            let (first, waiting) = match carried.take() {
                Some(msg) => (msg, true),
                None => match rx.recv() {
                    Ok(msg) => (msg, false),
                    Err(_) => break,
                },
            };
            let mut linger = self.linger;
            let mut waited = false;
            let mut writes: Vec<Pending> = Vec::new();
            let mut others = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Write { op, reply } => writes.push((op, reply)),
                    other => others.push(other),
                }
                next = if writes.len() < MAX_BATCH { rx.try_recv().ok() } else { None };
                if next.is_none() && lingers(waiting, writes.len()) {
                    // Sleep rather than wait on the channel: the callers' sends then wake no one.
                    if let Some(wait) = linger.take() {
                        std::thread::sleep(wait);
                        waited = true;
                        next = rx.try_recv().ok();
                    }
                }
            }
            let answers = if writes.is_empty() { Vec::new() } else { self.commit_batch(writes, waited) };
            // Looked for before the answers go out, so none of their callers can have sent it;
            // only after writes (a compaction step answers no writer).
            carried = if answers.is_empty() { None } else { rx.try_recv().ok() };
            for (reply, res) in answers {
                let _ = reply.send(res);
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

    /// Apply and commit one batch; the callers' answers, to be sent once the events are
    /// published. `waited`: the batch waited for more writes first (counted with the commit).
    fn commit_batch(&mut self, writes: Vec<Pending>, waited: bool) -> Vec<(Reply, Result<Rev>)> {
        if let Err(e) = self.begin() {
            return writes.into_iter().map(|(_, reply)| (reply, Err(e.clone()))).collect();
        }
        let mut rev = self.rev;
        let mut events = Vec::new();
        let mut newest: Vec<Newest> = Vec::new();
        let mut results = Vec::with_capacity(writes.len());
        let mut broken = None;
        for (op, reply) in writes {
            if broken.is_some() {
                results.push((reply, Ok(0)));
                continue;
            }
            match self.apply_in_savepoint(op, rev + 1) {
                Ok(Ok((ev, create_rev))) => {
                    rev = ev.rev;
                    // Only what the reads may keep is copied.
                    let kept = ev.kind != EventKind::Deleted && ev.value.len() <= MAX_VALUE_BYTES;
                    let kv = kept.then(|| KeyValue {
                        key: ev.key.clone(),
                        value: ev.value.clone(),
                        create_rev,
                        mod_rev: ev.rev,
                    });
                    newest.push((ev.key.clone(), kv));
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
            // Whatever was kept of the current values may no longer be: read them again.
            self.shared.current.clear();
            if landed {
                self.publish(rev, events, Vec::new());
            }
            // Even the CAS failures were judged against writes that may be gone.
            return results.into_iter().map(|(reply, _)| (reply, Err(e.clone()))).collect();
        }
        if rev != self.rev {
            self.shared.commits[usize::from(waited)].fetch_add(1, Ordering::Relaxed);
            work::sqlite_commit(waited);
        }
        self.publish(rev, events, newest);
        results
    }

    fn publish(&mut self, rev: Rev, events: Vec<Event>, newest: Vec<Newest>) {
        self.rev = rev;
        self.shared.current.committed(rev, newest);
        self.shared.rev.store(rev, Ordering::SeqCst);
        // One allocation per change, shared by the single-key and the prefix watches.
        let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
        self.shared.deliver_to_keys(&events);
        for ev in events {
            // No receivers is fine.
            let _ = self.shared.events.send(ev);
        }
    }

    /// Apply one write as revision `rev`, undoing its partial effects if SQLite fails midway.
    /// Outer error: the transaction is in an unknown state and the whole batch must be
    /// abandoned. Inner error: this request failed (compare-and-swap, or SQLite, undone).
    fn apply_in_savepoint(&self, op: WriteOp, rev: Rev) -> Result<Result<(Event, Rev)>> {
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
    /// Beside the change's event, the key's create revision.
    fn apply(&self, op: WriteOp, rev: Rev) -> rusqlite::Result<Result<(Event, Rev)>> {
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
                Ok(Ok((
                    Event { kind: EventKind::Created, rev, key, value, prev_value: None, memo: Memo::default() },
                    rev,
                )))
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
                let ev =
                    Event { kind: EventKind::Updated, rev, key, value, prev_value: Some(prev), memo: Memo::default() };
                Ok(Ok((ev, create_rev)))
            }
            WriteOp::Delete { key, expected_rev } => {
                let (create_rev, prev) = match self.current(&key, expected_rev)? {
                    Ok(found) => found,
                    Err(e) => return Ok(Err(e)),
                };
                self.insert_row(rev, &key, create_rev, true, &prev)?;
                self.conn.prepare_cached("DELETE FROM cur WHERE key = ?1")?.execute([&key])?;
                let ev = Event {
                    kind: EventKind::Deleted,
                    rev,
                    key,
                    value: prev.clone(),
                    prev_value: Some(prev),
                    memo: Memo::default(),
                };
                Ok(Ok((ev, create_rev)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_waits_only_when_writes_were_waiting_as_the_last_commit_ended() {
        let cases: [(&str, bool, usize, bool); 6] = [
            ("a write waiting at the last commit's end", true, 1, true),
            ("several waiting", true, 40, true),
            ("the first write after a quiet spell, or a lone caller's next", false, 1, false),
            ("nothing waiting, several taken since", false, 3, false),
            ("only compaction steps waiting (no write)", true, 0, false),
            ("the batch full", true, MAX_BATCH, false),
        ];
        for (name, waiting, batch, want) in cases {
            assert_eq!(lingers(waiting, batch), want, "{name}");
        }
    }
}
