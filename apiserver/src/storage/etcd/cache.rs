//! The watch cache of the etcd backend: every key under the prefix, its latest value and
//! revisions, in memory, fed by the process's one etcd watch (as kube-apiserver's watch cache
//! is). The cache is current to one revision: it holds exactly etcd's state at that revision.
//!
//! - Load: a list of the whole prefix at one revision L ([`Cache::reset`]); the watch then
//!   continues from L. After a loss the watch cannot recover (its history compacted away),
//!   the cache is marked not ready ([`Cache::invalidate`]) until the next load, and every read
//!   goes to etcd meanwhile.
//! - The etcd watch covers every key of etcd, not only the prefix, so that every revision
//!   etcd gives out arrives as an event: the cache's revision follows etcd's exactly and a
//!   reader waiting for revision R needs no progress notification from etcd (whose requested
//!   notifications are not ordered with the events before etcd 3.4.25 / 3.5.8).
//! - What may be read from memory is decided here ([`Read`]): a read of the latest state
//!   (after the caller has learnt etcd's current revision R and waited until the cache has
//!   reached it: upstream's consistent read from cache), or a read at an exact revision the
//!   cache can prove unchanged since. Anything else is `None`: the caller reads etcd.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::super::{KeyValue, ListOptions, ListResult, Rev};

/// One key's latest state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Arc<[u8]>,
    create_rev: Rev,
    mod_rev: Rev,
}

/// One change the etcd watch delivered for a key under the prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Change {
    pub key: String,
    /// The new value; None for a delete.
    pub value: Option<Arc<[u8]>>,
    pub create_rev: Rev,
    pub mod_rev: Rev,
}

/// Which state a read asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// Any state at or after this revision (etcd's current revision when the read began).
    AtLeast(Rev),
    /// The state at exactly this revision.
    Exact(Rev),
}

#[derive(Debug, Default)]
struct State {
    /// False until the first load, and between a loss of the watch and the next load.
    ready: bool,
    /// The cache holds etcd's state at this revision.
    rev: Rev,
    /// No key under the prefix changed after this revision (the load's revision, then the
    /// newest change applied): the state at any revision in `[changed, rev]` is the cache's.
    changed: Rev,
    items: BTreeMap<String, Entry>,
}

impl State {
    /// The revision a read is answered at, or None when memory cannot answer it.
    fn answer_rev(&self, read: Read) -> Option<Rev> {
        if !self.ready {
            return None;
        }
        match read {
            Read::AtLeast(r) => (self.rev >= r).then_some(self.rev),
            Read::Exact(r) => (self.changed <= r && r <= self.rev).then_some(r),
        }
    }

    /// Keys under `prefix` after `start_after` (if any), in key order.
    fn range<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a String, &'a Entry)> + 'a {
        let lower = match start_after {
            Some(k) if k >= prefix => Bound::Excluded(k),
            _ => Bound::Included(prefix),
        };
        self.items.range::<str, _>((lower, Bound::Unbounded)).take_while(move |(k, _)| k.starts_with(prefix))
    }
}

fn key_value(key: &str, e: &Entry) -> KeyValue {
    KeyValue { key: key.to_string(), value: e.value.to_vec(), create_rev: e.create_rev, mod_rev: e.mod_rev }
}

/// The cache; shared between the feed that fills it and the readers.
#[derive(Debug)]
pub(super) struct Cache {
    state: RwLock<State>,
    /// The revision the cache is current to (0 while not ready), for readers to wait on.
    seen: watch::Sender<Rev>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache { state: RwLock::new(State::default()), seen: watch::channel(0).0 }
    }
}

impl Cache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Replace the contents with `items`, etcd's state at `rev` (a load).
    pub(super) fn reset(&self, items: Vec<KeyValue>, rev: Rev) {
        let items = items
            .into_iter()
            .map(|kv| (kv.key, Entry { value: kv.value.into(), create_rev: kv.create_rev, mod_rev: kv.mod_rev }))
            .collect();
        *self.write() = State { ready: true, rev, changed: rev, items };
        self.seen.send_replace(rev);
    }

    /// The watch was lost beyond recovery: answer nothing until the next [`Cache::reset`].
    pub(super) fn invalidate(&self) {
        *self.write() = State::default();
        self.seen.send_replace(0);
    }

    /// Apply one watch response: `changes` (keys under the prefix, in revision order), and
    /// every revision up to `rev` seen (changes elsewhere in etcd included). Changes the
    /// cache already holds (a watch re-opened from an older revision) are skipped.
    pub(super) fn apply(&self, changes: Vec<Change>, rev: Rev) {
        let mut st = self.write();
        if !st.ready {
            return;
        }
        let from = st.rev;
        for c in changes.into_iter().filter(|c| c.mod_rev > from) {
            st.changed = st.changed.max(c.mod_rev);
            match c.value {
                Some(value) => {
                    st.items.insert(c.key, Entry { value, create_rev: c.create_rev, mod_rev: c.mod_rev });
                }
                None => {
                    st.items.remove(&c.key);
                }
            }
        }
        if rev > st.rev {
            st.rev = rev;
            drop(st);
            self.seen.send_replace(rev);
        }
    }

    /// The revision the cache is current to (0 when not ready).
    pub(super) fn rev(&self) -> Rev {
        *self.seen.borrow()
    }

    /// Wait until the cache is current to `rev` or later, at most `bound`. False on time-out.
    pub(super) async fn wait_for(&self, rev: Rev, bound: Duration) -> bool {
        let mut rx = self.seen.subscribe();
        let reached = matches!(tokio::time::timeout(bound, rx.wait_for(|r| *r >= rev)).await, Ok(Ok(_)));
        reached
    }

    /// `key` as `read` asks, and the revision it was read at; None when memory cannot say.
    pub(super) fn get(&self, key: &str, read: Read) -> Option<(Option<KeyValue>, Rev)> {
        let st = self.read();
        let entry = st.items.get(key);
        match (st.answer_rev(read), read, entry) {
            (Some(at), _, e) => Some((e.map(|e| key_value(key, e)), at)),
            // A key unchanged between `r` and the cache's revision had this value at `r`.
            (None, Read::Exact(r), Some(e)) if st.ready && e.mod_rev <= r && r <= st.rev => {
                Some((Some(key_value(key, e)), r))
            }
            _ => None,
        }
    }

    /// One page of keys under `prefix`, as `read` asks; None when memory cannot say.
    pub(super) fn list(&self, prefix: &str, opts: &ListOptions, read: Read) -> Option<ListResult> {
        let st = self.read();
        let at = st.answer_rev(read)?;
        let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut keys = st.range(prefix, opts.start_after.as_deref());
        let items: Vec<KeyValue> = keys.by_ref().take(limit).map(|(k, e)| key_value(k, e)).collect();
        let remaining = keys.count() as u64;
        Some(ListResult { items, rev: at, remaining })
    }

    /// How many keys lie under `prefix`, as `read` asks; None when memory cannot say.
    pub(super) fn count(&self, prefix: &str, read: Read) -> Option<u64> {
        let st = self.read();
        st.answer_rev(read)?;
        Some(st.range(prefix, None).count() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create_rev: Rev, mod_rev: Rev) -> KeyValue {
        KeyValue { key: key.into(), value: value.as_bytes().to_vec(), create_rev, mod_rev }
    }

    fn put(key: &str, value: &str, create_rev: Rev, mod_rev: Rev) -> Change {
        Change { key: key.into(), value: Some(value.as_bytes().into()), create_rev, mod_rev }
    }

    fn del(key: &str, mod_rev: Rev) -> Change {
        Change { key: key.into(), value: None, create_rev: 0, mod_rev }
    }

    fn keys(r: &ListResult) -> Vec<&str> {
        r.items.iter().map(|kv| kv.key.as_str()).collect()
    }

    /// Loaded at 10 with a/1, a/2, b/1; then a/3 created at 12, a/1 updated at 13, b/1
    /// deleted at 15, and revision 17 seen elsewhere in etcd.
    fn fed() -> Cache {
        let c = Cache::default();
        c.reset(vec![kv("/r/a/1", "one", 3, 3), kv("/r/a/2", "two", 4, 9), kv("/r/b/1", "b", 5, 5)], 10);
        c.apply(vec![put("/r/a/3", "three", 12, 12)], 12);
        c.apply(vec![put("/r/a/1", "uno", 3, 13)], 14);
        c.apply(vec![del("/r/b/1", 15)], 15);
        c.apply(vec![], 17);
        c
    }

    #[test]
    fn nothing_is_answered_before_a_load_or_after_a_loss() {
        let c = Cache::default();
        assert_eq!(c.get("/r/a/1", Read::AtLeast(0)), None, "before the first load");
        assert_eq!(c.list("/r/", &ListOptions::default(), Read::AtLeast(0)), None);
        let c = fed();
        c.invalidate();
        assert_eq!((c.get("/r/a/1", Read::AtLeast(0)), c.count("/r/", Read::AtLeast(0)), c.rev()), (None, None, 0));
        c.apply(vec![put("/r/a/9", "x", 20, 20)], 20);
        assert_eq!(c.get("/r/a/9", Read::AtLeast(0)), None, "changes before the next load are not applied");
        c.reset(vec![kv("/r/a/9", "x", 20, 20)], 21);
        assert_eq!(c.get("/r/a/9", Read::AtLeast(21)), Some((Some(kv("/r/a/9", "x", 20, 20)), 21)));
    }

    #[test]
    fn gets_follow_creates_updates_and_deletes() {
        let c = fed();
        assert_eq!(c.rev(), 17);
        // key, read, want (value, create, mod) or absent, read revision; None = not from memory
        // What a read should give: the value, create and mod revisions (None: absent), and
        // the revision read at; None when memory cannot answer.
        type Want = Option<(Option<(&'static str, Rev, Rev)>, Rev)>;
        let cases: Vec<(&str, Read, Want)> = vec![
            ("/r/a/1", Read::AtLeast(17), Some((Some(("uno", 3, 13)), 17))),
            ("/r/a/3", Read::AtLeast(12), Some((Some(("three", 12, 12)), 17))),
            ("/r/b/1", Read::AtLeast(16), Some((None, 17))),
            ("/r/a/1", Read::AtLeast(18), None),
            // Exact: the whole state is known for [15, 17].
            ("/r/b/1", Read::Exact(15), Some((None, 15))),
            ("/r/a/1", Read::Exact(16), Some((Some(("uno", 3, 13)), 16))),
            // Before the last change: only keys unchanged since.
            ("/r/a/1", Read::Exact(13), Some((Some(("uno", 3, 13)), 13))),
            ("/r/a/1", Read::Exact(12), None),
            ("/r/a/2", Read::Exact(11), Some((Some(("two", 4, 9)), 11))),
            ("/r/a/2", Read::Exact(8), None),
            ("/r/b/1", Read::Exact(12), None),
            ("/r/a/2", Read::Exact(18), None),
        ];
        for (key, read, want) in cases {
            let want = want.map(|(v, at)| (v.map(|(v, cr, mr)| kv(key, v, cr, mr)), at));
            assert_eq!(c.get(key, read), want, "{key} {read:?}");
        }
    }

    #[test]
    fn lists_page_in_key_order_within_the_prefix() {
        let c = Cache::default();
        let mut items: Vec<KeyValue> = (0..25).map(|i| kv(&format!("/r/a/{i:02}"), "v", 2, 2)).collect();
        items.push(kv("/r/a", "outside: no slash", 2, 2));
        items.push(kv("/r/ab/1", "outside", 2, 2));
        items.push(kv("/r/b/1", "outside", 2, 2));
        c.reset(items, 30);
        let page = |start_after: Option<&str>, limit: Option<usize>| {
            let opts = ListOptions { at_rev: None, start_after: start_after.map(String::from), limit };
            c.list("/r/a/", &opts, Read::AtLeast(30)).unwrap_or_else(|| panic!("from memory"))
        };
        let first = page(None, Some(10));
        assert_eq!((first.items.len(), first.remaining, first.rev), (10, 15, 30));
        assert_eq!(keys(&first)[..2], ["/r/a/00", "/r/a/01"]);
        let second = page(Some("/r/a/09"), Some(10));
        assert_eq!((keys(&second)[0], second.remaining), ("/r/a/10", 5));
        let last = page(Some("/r/a/19"), Some(10));
        assert_eq!((last.items.len(), last.remaining), (5, 0));
        assert_eq!(page(None, None).items.len(), 25, "no limit");
        assert_eq!(page(None, Some(0)).items.len(), 25, "limit 0 is no limit");
        assert_eq!(keys(&page(Some("/r/"), Some(1))), ["/r/a/00"], "a start before the prefix");
        assert_eq!(page(Some("/r/a/99"), None).items.len(), 0, "a start after the prefix");
        assert_eq!(c.count("/r/a/", Read::AtLeast(1)), Some(25));
        assert_eq!(c.count("/r/", Read::AtLeast(1)), Some(28));
    }

    #[test]
    fn exact_lists_come_from_memory_only_when_nothing_changed_since() {
        let c = fed();
        let opts = ListOptions::default();
        let at = |r| c.list("/r/", &opts, Read::Exact(r)).map(|l| (keys(&l).join(","), l.rev));
        assert_eq!(at(15), Some(("/r/a/1,/r/a/2,/r/a/3".into(), 15)));
        assert_eq!(at(17), Some(("/r/a/1,/r/a/2,/r/a/3".into(), 17)));
        assert_eq!(at(14), None, "b/1 was deleted after 14");
        assert_eq!(at(18), None, "not seen yet");
    }

    #[test]
    fn repeated_changes_are_skipped() {
        let c = fed();
        // A watch re-opened from an older revision delivers 13 again, with an older value.
        c.apply(vec![put("/r/a/1", "stale", 3, 13), put("/r/b/1", "back", 18, 18)], 18);
        let got = |k| c.get(k, Read::AtLeast(18)).and_then(|(kv, _)| kv).map(|kv| kv.value);
        assert_eq!(got("/r/a/1"), Some(b"uno".to_vec()));
        assert_eq!(got("/r/b/1"), Some(b"back".to_vec()));
    }

    #[tokio::test]
    async fn readers_wait_for_the_revision_they_need() {
        let c = Arc::new(fed());
        assert!(c.wait_for(17, Duration::from_secs(1)).await, "already there");
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move { c.wait_for(20, Duration::from_secs(30)).await })
        };
        c.apply(vec![], 19);
        c.apply(vec![put("/r/a/4", "four", 20, 20)], 20);
        assert!(matches!(waiter.await, Ok(true)), "woken when the cache reached 20");
        assert!(!c.wait_for(21, Duration::from_millis(20)).await, "a revision never seen times out");
    }
}
