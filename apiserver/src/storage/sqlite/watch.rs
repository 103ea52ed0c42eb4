//! Watches: prefix watches fed by the live fan-out (falling back to history when they lag),
//! and single-key watches woken only by changes to their key.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{broadcast, Notify};

use super::read::{history_after, Keys, ReadPool};
use super::WATCH_CHUNK;
use crate::storage::fanout::{next_live, Live, Scope};
use crate::storage::{Event, Result, Rev};

/// State shared by the storage handle and the writer thread.
pub(super) struct Shared {
    pub(super) rev: AtomicU64,
    pub(super) compacted: AtomicU64,
    /// Every event, for prefix watches.
    pub(super) events: broadcast::Sender<Arc<Event>>,
    /// Single-key watches, woken only by changes to their key.
    pub(super) keyed: Mutex<KeyWatchers>,
    /// The writer has stopped: no event will come any more.
    pub(super) closed: AtomicBool,
}

/// The single-key watches: key → (watch id, its wake-up).
#[derive(Default)]
pub(super) struct KeyWatchers {
    pub(super) next_id: u64,
    pub(super) by_key: HashMap<String, Vec<(u64, Arc<Notify>)>>,
}

impl Shared {
    pub(super) fn keyed(&self) -> std::sync::MutexGuard<'_, KeyWatchers> {
        self.keyed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake the single-key watches of these keys (each wake-up is kept until taken, so a
    /// watch that is between two reads misses nothing).
    pub(super) fn wake_keys<'a>(&self, keys: impl Iterator<Item = &'a str>) {
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
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, n) in self.keyed().by_key.values().flatten() {
            n.notify_one();
        }
    }
}

/// A single-key watch's entry in [`KeyWatchers`], removed when the watch is dropped. It does
/// not keep the store alive.
pub(super) struct KeyRegistration {
    pub(super) shared: Weak<Shared>,
    pub(super) key: String,
    pub(super) id: u64,
    pub(super) notify: Arc<Notify>,
}

impl KeyRegistration {
    pub(super) fn new(shared: &Arc<Shared>, key: &str) -> Self {
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

pub(super) struct WatchState {
    pub(super) reads: Arc<ReadPool>,
    pub(super) rx: broadcast::Receiver<Arc<Event>>,
    pub(super) scope: Scope,
    /// Every change with revision ≤ pos has been handled (yielded or filtered out).
    pub(super) pos: Rev,
    /// History read but not yet yielded.
    pub(super) buf: VecDeque<Event>,
    /// Read history (from `pos`) before listening to live events again.
    pub(super) catching_up: bool,
    pub(super) done: bool,
}

pub(super) async fn watch_step(mut st: WatchState) -> Option<(Result<Event>, WatchState)> {
    loop {
        if st.done {
            return None;
        }
        if let Some(ev) = st.buf.pop_front() {
            st.pos = ev.rev;
            return Some((Ok(ev), st));
        }
        if st.catching_up {
            let (keys, pos) = (Keys::of(&st.scope), st.pos);
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
        match next_live(&mut st.rx, &st.scope, &mut st.pos).await {
            Live::Event(ev) => return Some((Ok(ev), st)),
            // Missed live events: fetch the gap from history (duplicates are skipped by
            // revision).
            Live::Lagged => st.catching_up = true,
            Live::Closed => return None,
        }
    }
}

/// A single-key watch: reads the key's history after `pos` whenever a change to the key is
/// published (and once at the start), so it costs nothing while other keys change.
pub(super) struct KeyWatchState {
    pub(super) reads: Arc<ReadPool>,
    pub(super) reg: KeyRegistration,
    pub(super) pos: Rev,
    pub(super) buf: VecDeque<Event>,
    pub(super) done: bool,
}

pub(super) async fn key_watch_step(mut st: KeyWatchState) -> Option<(Result<Event>, KeyWatchState)> {
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
