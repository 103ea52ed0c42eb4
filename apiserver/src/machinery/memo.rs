//! A bounded memo of per-request decisions (authorization verdicts, flow classifications),
//! valid for one version of the configuration they were computed from.
//!
//! What enters: a hash of the request's relevant fields (from [`Memo::hash`], a keyed
//! SipHash, so a client cannot aim collisions), a closure comparing a stored key with the
//! request, and the configuration version as an `Arc` (compared by identity: the memo holds
//! it, so an address is never reused while compared). What leaves: the stored value, only
//! when the version is the current one and the stored key equals the request's (a hash
//! collision is a miss, never someone else's answer).
//!
//! Bounds: at most `max_entries` entries and `max_bytes` bytes (the caller's estimate of an
//! entry's keys and values). An insert that would pass either bound first empties the memo,
//! so a flood of distinct keys only evicts; an entry larger than `max_bytes` is not stored.
//! A lookup takes a read lock and allocates nothing; the key is owned only on insert.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock};

/// Fixed cost counted for every entry on top of the caller's byte estimate.
pub const ENTRY_OVERHEAD: usize = 64;

struct Inner<T, K, V> {
    version: Option<Arc<T>>,
    entries: HashMap<u64, (K, V, usize)>,
    bytes: usize,
}

pub struct Memo<T, K, V> {
    keys: std::collections::hash_map::RandomState,
    max_entries: usize,
    max_bytes: usize,
    inner: RwLock<Inner<T, K, V>>,
}

impl<T, K, V: Clone> Memo<T, K, V> {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Memo {
            keys: std::collections::hash_map::RandomState::new(),
            max_entries: max_entries.max(1),
            max_bytes,
            inner: RwLock::new(Inner { version: None, entries: HashMap::new(), bytes: 0 }),
        }
    }

    /// The keyed hash of what `write` feeds it.
    pub fn hash(&self, write: impl FnOnce(&mut dyn Hasher)) -> u64 {
        let mut h = self.keys.build_hasher();
        write(&mut h);
        h.finish()
    }

    /// The value stored for `hash` under `version`, if its key passes `same`.
    pub fn get(&self, version: &Arc<T>, hash: u64, same: impl FnOnce(&K) -> bool) -> Option<V> {
        let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !inner.version.as_ref().is_some_and(|v| Arc::ptr_eq(v, version)) {
            return None;
        }
        let (k, v, _) = inner.entries.get(&hash)?;
        same(k).then(|| v.clone())
    }

    /// Store `value` for `key` (hashed to `hash`) under `version`; `bytes` estimates the heap
    /// bytes of both. Entries of another version are dropped first.
    pub fn insert(&self, version: &Arc<T>, hash: u64, key: K, value: V, bytes: usize) {
        let cost = bytes.saturating_add(ENTRY_OVERHEAD);
        if cost > self.max_bytes {
            return;
        }
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !inner.version.as_ref().is_some_and(|v| Arc::ptr_eq(v, version)) {
            inner.entries.clear();
            inner.bytes = 0;
            inner.version = Some(version.clone());
        }
        if let Some((_, _, old)) = inner.entries.remove(&hash) {
            inner.bytes -= old;
        }
        if inner.entries.len() >= self.max_entries || inner.bytes + cost > self.max_bytes {
            inner.entries.clear();
            inner.bytes = 0;
        }
        inner.entries.insert(hash, (key, value, cost));
        inner.bytes += cost;
    }

    /// Drop every entry and the version they belong to.
    pub fn clear(&self) {
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.entries.clear();
        inner.bytes = 0;
        inner.version = None;
    }

    /// Entries stored, and the bytes they are counted for.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        (inner.entries.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memo(entries: usize, bytes: usize) -> Memo<u8, String, u32> {
        Memo::new(entries, bytes)
    }

    fn key_hash(m: &Memo<u8, String, u32>, k: &str) -> u64 {
        m.hash(|h| h.write(k.as_bytes()))
    }

    #[test]
    fn hits_need_the_same_version_and_an_equal_key() {
        let m = memo(8, 10_000);
        let (v1, v2) = (Arc::new(1u8), Arc::new(1u8));
        let h = key_hash(&m, "a");
        assert_eq!(m.get(&v1, h, |k| k == "a"), None, "empty");
        m.insert(&v1, h, "a".into(), 7, 1);
        assert_eq!(m.get(&v1, h, |k| k == "a"), Some(7));
        assert_eq!(m.get(&v1, h, |k| k == "b"), None, "same hash, other key: a miss");
        assert_eq!(m.get(&v2, h, |k| k == "a"), None, "an equal but distinct version is another version");
        m.insert(&v2, key_hash(&m, "b"), "b".into(), 8, 1);
        assert_eq!(m.usage().0, 1, "a new version drops the old entries");
        assert_eq!(m.get(&v1, h, |k| k == "a"), None);
        m.clear();
        assert_eq!(m.usage(), (0, 0));
    }

    #[test]
    fn bounds_hold_under_a_flood() {
        let m = memo(16, 16 * (ENTRY_OVERHEAD + 8));
        let v = Arc::new(0u8);
        for i in 0..1000u32 {
            let k = format!("k{i}");
            m.insert(&v, key_hash(&m, &k), k.clone(), i, k.len());
            let (n, bytes) = m.usage();
            assert!(n <= 16 && bytes <= 16 * (ENTRY_OVERHEAD + 8), "{i}: {n} entries, {bytes} bytes");
            assert_eq!(m.get(&v, key_hash(&m, &k), |s| *s == k), Some(i), "the last insert is kept");
        }
        let big = "x".repeat(16 * (ENTRY_OVERHEAD + 8));
        m.insert(&v, key_hash(&m, &big), big.clone(), 0, big.len());
        assert_eq!(m.get(&v, key_hash(&m, &big), |s| *s == big), None, "an entry over the byte bound is not kept");
        let m = memo(1000, 4 * (ENTRY_OVERHEAD + 100));
        for i in 0..50u32 {
            let k = format!("{i:0>100}");
            m.insert(&v, key_hash(&m, &k), k.clone(), i, k.len());
            assert!(m.usage().0 <= 4, "the byte bound caps entries too");
        }
    }
}
