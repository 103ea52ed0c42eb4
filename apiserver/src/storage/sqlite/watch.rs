//! Watches: prefix watches fed by the live fan-out (falling back to history when they lag),
//! and single-key watches handed only the changes to their key (the same published events
//! the prefix watches get, so their renderings are shared; reading history only at the start
//! and when too many changes queue up unread).

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
    /// Single-key watches, handed only the changes to their key.
    pub(super) keyed: Mutex<KeyWatchers>,
    /// The writer has stopped: no event will come any more.
    pub(super) closed: AtomicBool,
    /// The values the writer committed last (reads of the current state).
    pub(super) current: super::current::Current,
    /// Write transactions committed: [at once, after the batch waited for more writes].
    pub(super) commits: [AtomicU64; 2],
}

/// The single-key watches: key → (watch id, its inbox).
#[derive(Default)]
pub(super) struct KeyWatchers {
    pub(super) next_id: u64,
    pub(super) by_key: HashMap<String, Vec<(u64, Arc<Inbox>)>>,
}

/// Changes a single-key watch has not taken yet: at most this many, then it reads history.
pub(super) const INBOX_CAPACITY: usize = 64;

/// A single-key watch's published changes, and its wake-up.
#[derive(Default)]
pub(super) struct Inbox {
    queue: Mutex<Queued>,
    notify: Notify,
}

#[derive(Default)]
struct Queued {
    events: VecDeque<Arc<Event>>,
    /// Changes were dropped: the watch must read history after what it has handled.
    overflowed: bool,
}

impl Inbox {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, ev: &Arc<Event>) {
        let mut q = self.queue();
        if q.events.len() >= INBOX_CAPACITY {
            q.events.clear();
            q.overflowed = true;
        } else if !q.overflowed {
            q.events.push_back(ev.clone());
        }
        drop(q);
        self.notify.notify_one();
    }

    /// The queued changes, or None when some were dropped (read history instead).
    fn take(&self) -> Option<VecDeque<Arc<Event>>> {
        let mut q = self.queue();
        let events = std::mem::take(&mut q.events);
        if std::mem::take(&mut q.overflowed) {
            return None;
        }
        Some(events)
    }
}

impl Shared {
    pub(super) fn keyed(&self) -> std::sync::MutexGuard<'_, KeyWatchers> {
        self.keyed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hand these published changes (in revision order) to the single-key watches of their
    /// keys (each wake-up is kept until taken, so a watch between two looks misses nothing).
    pub(super) fn deliver_to_keys(&self, events: &[Arc<Event>]) {
        let keyed = self.keyed();
        if keyed.by_key.is_empty() {
            return;
        }
        for ev in events {
            for (_, inbox) in keyed.by_key.get(ev.key.as_str()).into_iter().flatten() {
                inbox.push(ev);
            }
        }
    }

    /// The writer is gone: wake every single-key watch so it can end.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, inbox) in self.keyed().by_key.values().flatten() {
            inbox.notify.notify_one();
        }
    }
}

/// A single-key watch's entry in [`KeyWatchers`], removed when the watch is dropped. It does
/// not keep the store alive.
pub(super) struct KeyRegistration {
    pub(super) shared: Weak<Shared>,
    pub(super) key: String,
    pub(super) id: u64,
    pub(super) inbox: Arc<Inbox>,
}

impl KeyRegistration {
    pub(super) fn new(shared: &Arc<Shared>, key: &str) -> Self {
        let inbox = Arc::new(Inbox::default());
        let mut keyed = shared.keyed();
        keyed.next_id += 1;
        let id = keyed.next_id;
        keyed.by_key.entry(key.to_owned()).or_default().push((id, inbox.clone()));
        drop(keyed);
        KeyRegistration { shared: Arc::downgrade(shared), key: key.to_owned(), id, inbox }
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

/// A single-key watch: reads the key's history after `pos` at the start (and after its inbox
/// overflowed), then takes the changes published to its inbox, so it costs nothing while
/// other keys change and no read while its own key does.
pub(super) struct KeyWatchState {
    pub(super) reads: Arc<ReadPool>,
    pub(super) reg: KeyRegistration,
    pub(super) pos: Rev,
    pub(super) buf: VecDeque<Event>,
    /// Read history after `pos` before taking the inbox again.
    pub(super) catching_up: bool,
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
        if st.catching_up {
            let (keys, pos) = (Keys::Exact(st.reg.key.clone()), st.pos);
            match st.reads.run_small(move |conn| history_after(conn, &keys, pos, WATCH_CHUNK)).await {
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
        match st.reg.inbox.take() {
            // Published changes; those history already gave are skipped by revision.
            Some(events) => {
                let pos = st.pos;
                st.buf.extend(events.iter().filter(|ev| ev.rev > pos).map(|ev| Event::clone(ev)));
                if !st.buf.is_empty() {
                    continue;
                }
            }
            None => {
                st.catching_up = true;
                continue;
            }
        }
        if st.reg.shared.upgrade().is_none_or(|s| s.closed.load(Ordering::SeqCst)) {
            return None;
        }
        st.reg.inbox.notify.notified().await;
    }
}
