//! Answers about bearer tokens remembered until they expire: the cache of the webhook token
//! authenticator ([`super::webhook`]) and of the controller-manager's delegated TokenReview.
//!
//! In: a key and an answer with its time to live. Out: the answer while it lives. A token
//! is never a key: [`TokenKeys`] turns the token and the audiences it was asked for into an
//! HMAC-SHA256 under a random key drawn at start (upstream's salted hash), so neither the
//! memory nor a dump of it holds a token. The number of answers is bounded: at the bound,
//! the expired ones go, then all.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Answers remembered per cache at most, unless a cache says otherwise.
pub const DEFAULT_MAX_ENTRIES: usize = 4096;

/// Answers remembered until they expire, at most `max` of them.
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    max: usize,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(max: usize) -> Self {
        TtlCache { entries: Mutex::new(HashMap::new()), max: max.max(1) }
    }

    /// The answer for `key`, if it is still alive at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(key).filter(|(_, until)| now < *until).map(|(v, _)| v.clone())
    }

    /// Remember `value` for `ttl` from `now` (a zero TTL remembers nothing).
    pub fn put(&self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.max {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= self.max {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The cache key of a token: HMAC-SHA256 under a key of this process, over the audiences
/// (each length-prefixed) and the token.
pub struct TokenKeys {
    key: ring::hmac::Key,
}

impl Default for TokenKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenKeys {
    /// A fresh random key.
    pub fn new() -> Self {
        let secret: [u8; 32] = rand::random();
        TokenKeys { key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret) }
    }

    pub fn key(&self, audiences: &[String], token: &str) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        ctx.update(&(audiences.len() as u64).to_be_bytes());
        for a in audiences {
            ctx.update(&(a.len() as u64).to_be_bytes());
            ctx.update(a.as_bytes());
        }
        ctx.update(token.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_live_for_their_ttl_and_the_size_is_bounded() {
        let cache: TtlCache<u32, &str> = TtlCache::new(3);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        cache.put(1, "a", s(10), t0);
        cache.put(2, "b", s(1), t0);
        cache.put(3, "zero", Duration::ZERO, t0);
        // key, at, answer
        let cases = [(1, t0, Some("a")), (1, t0 + s(9), Some("a")), (1, t0 + s(10), None), (2, t0 + s(2), None)];
        for (key, at, want) in cases {
            assert_eq!(cache.get(&key, at), want, "{key} at +{:?}", at - t0);
        }
        assert_eq!(cache.get(&3, t0), None, "a zero TTL remembers nothing");
        // At the bound the expired entries go first, then everything.
        cache.put(4, "d", s(10), t0);
        cache.put(5, "e", s(10), t0 + s(5));
        assert_eq!(cache.len(), 3, "entry 2 expired and went");
        assert_eq!(cache.get(&1, t0 + s(5)), Some("a"));
        cache.put(6, "f", s(10), t0 + s(5));
        assert_eq!(cache.len(), 1, "nothing had expired: all went");
        assert_eq!(cache.get(&6, t0 + s(5)), Some("f"));
    }

    #[test]
    fn token_keys_are_salted_and_separate_audiences() {
        let (k1, k2) = (TokenKeys::new(), TokenKeys::new());
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(k1.key(&a(&["api"]), "t"), k1.key(&a(&["api"]), "t"));
        assert_ne!(k1.key(&a(&["api"]), "t"), k2.key(&a(&["api"]), "t"), "another process, another key");
        assert_ne!(k1.key(&a(&["api"]), "t"), k1.key(&a(&["other"]), "t"));
        assert_ne!(k1.key(&a(&["ab"]), "c"), k1.key(&a(&["a"]), "bc"), "lengths separate the parts");
        assert_ne!(k1.key(&[], "t"), k1.key(&a(&[""]), "t"));
        let digest = ring::digest::digest(&ring::digest::SHA256, b"t");
        assert_ne!(&k1.key(&[], "t")[..], digest.as_ref(), "not the plain hash of the token");
    }
}
