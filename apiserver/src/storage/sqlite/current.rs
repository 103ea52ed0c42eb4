//! The values the writer committed last, kept for reads of the current state (`get`, and
//! `get_at` of the current revision). On a WAL database every read transaction that follows
//! a write re-reads the pages the write touched (`pread`, and `fcntl` locks on the WAL
//! index); a key written moments ago, such as a CSR being approved and signed, is read from
//! here instead.
//!
//! Only the writer fills it, after each commit, and sets the revision it holds under the
//! same lock: an entry is always its key's value as of that revision, and a key with no
//! entry is read from the database. Readers never add entries (a value read from a snapshot
//! may already be superseded). After a commit whose outcome is unknown, everything is
//! dropped. Bounded in entries and bytes, the oldest first out; a large value is not kept.
//!
//! This rests on what the store already assumes: its writer thread is the file's only writer.
//! Another process writing the same file (`kustos storage migrate` into the data dir of a
//! running server) is not supported; its revisions would collide with the writer's own.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use crate::storage::{KeyValue, Rev};

/// Most entries kept.
const MAX_ENTRIES: usize = 4096;
/// Most bytes of values (and keys) kept.
const MAX_BYTES: usize = 4 << 20;
/// A larger value is read from the database.
pub(super) const MAX_VALUE_BYTES: usize = 64 << 10;

/// See the module documentation.
#[derive(Default)]
pub(super) struct Current {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Key → (its current value, the insertion that put it here).
    map: HashMap<String, (KeyValue, u64)>,
    /// Insertions, oldest first; one whose number no longer matches its key's is stale.
    order: VecDeque<(String, u64)>,
    bytes: usize,
    next: u64,
    /// The revision every entry is current at.
    rev: Rev,
}

/// What one committed write leaves for its key: its value, or None (deleted, or not kept).
pub(super) type Newest = (String, Option<KeyValue>);

impl Current {
    /// `key`'s value and the revision it is current at, if kept.
    pub(super) fn get(&self, key: &str) -> Option<(KeyValue, Rev)> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.map.get(key).map(|(kv, _)| (kv.clone(), inner.rev))
    }

    /// A commit up to `rev` landed with these writes, in revision order.
    pub(super) fn committed(&self, rev: Rev, newest: Vec<Newest>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, kv) in newest {
            inner.remove(&key);
            if let Some(kv) = kv.filter(|kv| kv.value.len() <= MAX_VALUE_BYTES) {
                inner.insert(key, kv);
            }
        }
        inner.rev = rev;
    }

    /// A commit's outcome is unknown: nothing kept can be trusted.
    pub(super) fn clear(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let rev = inner.rev;
        *inner = Inner { rev, ..Inner::default() };
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).map.len()
    }
}

impl Inner {
    fn size(key: &str, kv: &KeyValue) -> usize {
        key.len() + kv.key.len() + kv.value.len()
    }

    fn remove(&mut self, key: &str) {
        if let Some((kv, _)) = self.map.remove(key) {
            self.bytes -= Self::size(key, &kv);
        }
    }

    fn insert(&mut self, key: String, kv: KeyValue) {
        self.bytes += Self::size(&key, &kv);
        let n = self.next;
        self.next += 1;
        self.order.push_back((key.clone(), n));
        self.map.insert(key, (kv, n));
        while self.map.len() > MAX_ENTRIES || self.bytes > MAX_BYTES {
            let Some((old, m)) = self.order.pop_front() else { break };
            if self.map.get(&old).is_some_and(|(_, at)| *at == m) {
                self.remove(&old);
            }
        }
        // Stale insertions of keys written again or deleted: never more than the live ones.
        if self.order.len() > 2 * MAX_ENTRIES {
            let map = &self.map;
            self.order.retain(|(k, m)| map.get(k).is_some_and(|(_, at)| at == m));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value_len: usize, rev: Rev) -> KeyValue {
        KeyValue { key: key.to_string(), value: vec![b'x'; value_len], create_rev: 1, mod_rev: rev }
    }

    #[test]
    fn entries_follow_the_commits_and_stay_within_their_bounds() {
        let c = Current::default();
        c.committed(2, vec![("/a".into(), Some(kv("/a", 10, 1))), ("/b".into(), Some(kv("/b", 10, 2)))]);
        assert_eq!(c.get("/a").map(|(kv, rev)| (kv.mod_rev, rev)), Some((1, 2)));
        // Written again, deleted, or too large to keep: the old entry goes.
        c.committed(
            5,
            vec![
                ("/a".into(), Some(kv("/a", 10, 3))),
                ("/b".into(), None),
                ("/a".into(), Some(kv("/a", MAX_VALUE_BYTES + 1, 5))),
            ],
        );
        assert!(c.get("/a").is_none(), "a value over the size kept is read from the database");
        assert!(c.get("/b").is_none(), "a deleted key is not kept");
        // More than the entries allowed: the oldest go, the newest stay.
        let many: Vec<Newest> =
            (0..MAX_ENTRIES + 10).map(|i| (format!("/k{i}"), Some(kv(&format!("/k{i}"), 1, 10 + i as Rev)))).collect();
        c.committed(10 + MAX_ENTRIES as Rev + 10, many);
        assert_eq!(c.len(), MAX_ENTRIES);
        assert!(c.get("/k0").is_none() && c.get(&format!("/k{}", MAX_ENTRIES + 9)).is_some());
        // More than the bytes allowed.
        let big: Vec<Newest> = (0..(MAX_BYTES / MAX_VALUE_BYTES) + 4)
            .map(|i| (format!("/big{i}"), Some(kv(&format!("/big{i}"), MAX_VALUE_BYTES, 1))))
            .collect();
        c.committed(100_000, big);
        assert!(c.inner.lock().unwrap().bytes <= MAX_BYTES);
        assert!(c.get("/big0").is_none() && c.get(&format!("/big{}", MAX_BYTES / MAX_VALUE_BYTES + 3)).is_some());
        // Stale insertions are dropped as they pile up.
        for i in 0..(3 * MAX_ENTRIES) {
            c.committed(200_000 + i as Rev, vec![("/same".into(), Some(kv("/same", 1, 200_000 + i as Rev)))]);
        }
        assert!(c.inner.lock().unwrap().order.len() <= 2 * MAX_ENTRIES + 1);
        c.clear();
        assert_eq!(c.len(), 0);
        assert!(c.get("/same").is_none());
    }
}
