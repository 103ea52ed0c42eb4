//! Copy a whole cluster state from one store into another (`kustos storage migrate`).
//!
//! - The source is read at one revision: the first page of the list of `/registry/` fixes it
//!   and every later page reads at it, so the copy is one consistent snapshot even if the
//!   source changes meanwhile. Writes made to the source after that revision are not copied;
//!   stop every server using the source first.
//! - Values are copied byte for byte. They are the stored objects without
//!   `metadata.resourceVersion`, so uids, creationTimestamps, generations, managedFields and
//!   everything else are kept. Each object's resourceVersion becomes the revision at which
//!   the target wrote it: resourceVersions, continue tokens and watch positions from the
//!   source mean nothing on the target, and clients relist.
//! - A target that already holds keys under `/registry/` is refused unless `overwrite`; then
//!   keys in both are replaced with the source's value (left alone when already equal), keys
//!   only in the source are created, keys only in the target are kept.
//! - A failed copy leaves the target partly written; running it again with `overwrite`
//!   finishes it.

use futures::stream::{self, StreamExt, TryStreamExt};

use super::{Error, KeyValue, ListOptions, Rev, Storage};

/// Every key of the cluster starts with this.
pub const ROOT: &str = "/registry/";
/// Keys read per list request from the source.
pub const PAGE: usize = 500;
/// Writes to the target in flight at once (lets the SQLite writer batch its commits and
/// hides etcd's round trips).
const WRITES_IN_FLIGHT: usize = 16;
/// Attempts to replace one existing key while something else changes it.
const REPLACE_ATTEMPTS: usize = 3;

/// What a copy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Keys copied (every key under `/registry/` at `source_rev`).
    pub objects: u64,
    /// Of those, keys the target already held (only with `overwrite`).
    pub replaced: u64,
    /// The source revision the copy read at (0 for an empty source).
    pub source_rev: Rev,
}

/// Why a copy stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrateError {
    /// The target holds keys under `/registry/` and `overwrite` was not given; nothing was
    /// written.
    #[error("the target already holds {objects} objects under {ROOT}")]
    TargetNotEmpty { objects: u64 },
    /// Reading the source failed (e.g. its history was compacted past the snapshot's
    /// revision while the copy ran).
    #[error("reading the source: {0}")]
    Source(#[source] Error),
    /// Reading the target before writing failed; nothing was written.
    #[error("reading the target: {0}")]
    Target(#[source] Error),
    /// Writing `key` failed; the keys written before it stay in the target.
    #[error("writing {key} into the target: {source}")]
    Write {
        key: String,
        #[source]
        source: Error,
    },
}

/// Copy every key under `/registry/` from `from` to `to`; see the module docs.
pub async fn copy_all(from: &dyn Storage, to: &dyn Storage, overwrite: bool) -> Result<Copied, MigrateError> {
    copy_paged(from, to, overwrite, PAGE).await
}

async fn copy_paged(
    from: &dyn Storage,
    to: &dyn Storage,
    overwrite: bool,
    page: usize,
) -> Result<Copied, MigrateError> {
    let existing = to.count(ROOT).await.map_err(MigrateError::Target)?;
    if existing > 0 && !overwrite {
        return Err(MigrateError::TargetNotEmpty { objects: existing });
    }
    let mut copied = Copied::default();
    let mut opts = ListOptions { at_rev: None, start_after: None, limit: Some(page.max(1)) };
    loop {
        let listed = from.list(ROOT, opts.clone()).await.map_err(MigrateError::Source)?;
        // The first page fixes the revision; every later page reads at it.
        let at = *opts.at_rev.get_or_insert(listed.rev);
        copied.source_rev = at;
        let last = listed.items.last().map(|kv| kv.key.clone());
        let results: Vec<bool> = stream::iter(listed.items)
            .map(|kv| put(to, kv, overwrite))
            .buffer_unordered(WRITES_IN_FLIGHT)
            .try_collect()
            .await?;
        copied.objects += results.len() as u64;
        copied.replaced += results.iter().filter(|r| **r).count() as u64;
        match last {
            Some(last) if listed.remaining > 0 => opts.start_after = Some(last),
            _ => return Ok(copied),
        }
    }
}

/// Write one source key into the target; whether the target held it already.
async fn put(to: &dyn Storage, kv: KeyValue, overwrite: bool) -> Result<bool, MigrateError> {
    let failed = |source: Error| MigrateError::Write { key: kv.key.clone(), source };
    let mut last = None;
    for _ in 0..REPLACE_ATTEMPTS {
        match to.create(&kv.key, kv.value.clone()).await {
            Ok(_) => return Ok(false),
            Err(Error::AlreadyExists(_)) if overwrite => {}
            Err(e) => return Err(failed(e)),
        }
        let Some(current) = to.get(&kv.key).await.map_err(failed)? else {
            // Deleted since the create failed: create again.
            continue;
        };
        if current.value == kv.value {
            return Ok(true);
        }
        match to.update(&kv.key, kv.value.clone(), current.mod_rev).await {
            Ok(_) => return Ok(true),
            // Changed (or deleted) since the read: read again.
            Err(e @ (Error::Conflict { .. } | Error::NotFound(_))) => last = Some(e),
            Err(e) => return Err(failed(e)),
        }
    }
    Err(failed(last.unwrap_or_else(|| Error::Backend(format!("{} keeps changing in the target", kv.key)))))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};

    use async_trait::async_trait;
    use futures::stream::BoxStream;

    use super::*;
    use crate::storage::sqlite::SqliteStorage;
    use crate::storage::{Event, ListResult, Result};

    async fn store(keys: &[(&str, &str)]) -> SqliteStorage {
        let s = SqliteStorage::open_in_memory().expect("an in-memory store");
        for (k, v) in keys {
            s.create(k, v.as_bytes().to_vec()).await.expect("seeding a key");
        }
        s
    }

    /// Every key and value under `prefix` (here `/` to see keys outside `/registry/` too).
    async fn contents(s: &dyn Storage) -> BTreeMap<String, Vec<u8>> {
        let page = s.list("/", ListOptions::default()).await.expect("listing");
        page.items.into_iter().map(|kv| (kv.key, kv.value)).collect()
    }

    fn map(keys: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        keys.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect()
    }

    const NS: (&str, &str) = ("/registry/core/namespaces/default", r#"{"metadata":{"name":"default","uid":"u1"}}"#);
    const CM: (&str, &str) =
        ("/registry/core/configmaps/default/a", r#"{"metadata":{"name":"a","uid":"u2"},"data":{"k":"v"}}"#);
    const SECRET: (&str, &str) =
        ("/registry/core/secrets/kube-system/s", r#"{"metadata":{"name":"s","uid":"u3"},"data":{"x":"AAEC"}}"#);
    const ROLE: (&str, &str) = ("/registry/rbac.authorization.k8s.io/roles/default/r", r#"{"rules":[]}"#);
    /// Not a byte of JSON: values are opaque to the copy.
    const BINARY: (&str, &str) = ("/registry/zz/bytes", "\u{0}\u{1}\u{fe}");
    const OUTSIDE: (&str, &str) = ("/other/key", "not cluster state");

    struct Case {
        name: &'static str,
        source: &'static [(&'static str, &'static str)],
        target: &'static [(&'static str, &'static str)],
        overwrite: bool,
        page: usize,
        want: Result<(u64, u64), MigrateError>,
        /// The target afterwards.
        want_target: &'static [(&'static str, &'static str)],
    }

    const CM_OLD: (&str, &str) = ("/registry/core/configmaps/default/a", r#"{"metadata":{"name":"a","uid":"old"}}"#);
    const TARGET_ONLY: (&str, &str) = ("/registry/core/configmaps/default/only-in-target", "{}");

    const CASES: &[Case] = &[
        Case {
            name: "every key copied, one page",
            source: &[NS, CM, SECRET, ROLE, BINARY],
            target: &[],
            overwrite: false,
            page: 500,
            want: Ok((5, 0)),
            want_target: &[NS, CM, SECRET, ROLE, BINARY],
        },
        Case {
            name: "every key copied across pages of two",
            source: &[NS, CM, SECRET, ROLE, BINARY],
            target: &[],
            overwrite: false,
            page: 2,
            want: Ok((5, 0)),
            want_target: &[NS, CM, SECRET, ROLE, BINARY],
        },
        Case {
            name: "keys outside /registry/ are not cluster state and stay behind",
            source: &[NS, OUTSIDE],
            target: &[],
            overwrite: false,
            page: 1,
            want: Ok((1, 0)),
            want_target: &[NS],
        },
        Case {
            name: "an empty source copies nothing",
            source: &[],
            target: &[],
            overwrite: false,
            page: 500,
            want: Ok((0, 0)),
            want_target: &[],
        },
        Case {
            name: "a target holding objects is refused and left alone",
            source: &[NS, CM],
            target: &[CM_OLD, TARGET_ONLY],
            overwrite: false,
            page: 500,
            want: Err(MigrateError::TargetNotEmpty { objects: 2 }),
            want_target: &[CM_OLD, TARGET_ONLY],
        },
        Case {
            name: "keys outside /registry/ do not make the target non-empty",
            source: &[NS],
            target: &[OUTSIDE],
            overwrite: false,
            page: 500,
            want: Ok((1, 0)),
            want_target: &[NS, OUTSIDE],
        },
        Case {
            name: "overwrite replaces keys in both, creates new ones, keeps the target's own",
            source: &[NS, CM],
            target: &[CM_OLD, TARGET_ONLY],
            overwrite: true,
            page: 1,
            want: Ok((2, 1)),
            want_target: &[NS, CM, TARGET_ONLY],
        },
        Case {
            name: "overwrite of an identical copy changes nothing",
            source: &[NS, CM],
            target: &[NS, CM],
            overwrite: true,
            page: 500,
            want: Ok((2, 2)),
            want_target: &[NS, CM],
        },
        Case {
            name: "overwrite into an empty target is a plain copy",
            source: &[NS, CM],
            target: &[],
            overwrite: true,
            page: 500,
            want: Ok((2, 0)),
            want_target: &[NS, CM],
        },
    ];

    #[tokio::test]
    async fn copy_all_cases() {
        for c in CASES {
            let from = store(c.source).await;
            let to = store(c.target).await;
            let target_rev_before = to.current_rev();
            let got = copy_paged(&from, &to, c.overwrite, c.page).await;
            assert_eq!(got.clone().map(|g| (g.objects, g.replaced)), c.want, "{}", c.name);
            if let Ok(g) = got {
                assert_eq!(g.source_rev, from.current_rev(), "{}: read at the source's revision", c.name);
            }
            assert_eq!(contents(&to).await, map(c.want_target), "{}: target contents", c.name);
            assert_eq!(contents(&from).await, map(c.source), "{}: source untouched", c.name);
            if c.want.is_err() || c.source.iter().all(|kv| c.target.contains(kv)) {
                assert_eq!(to.current_rev(), target_rev_before, "{}: nothing written", c.name);
            }
        }
    }

    #[tokio::test]
    async fn created_keys_get_the_targets_revisions() {
        let from = store(&[NS, CM]).await;
        // Move the target's revision well past the source's.
        let to = store(&[]).await;
        for i in 0..10 {
            let rev = to.create("/scratch", vec![i]).await.expect("scratch create");
            to.delete("/scratch", rev).await.expect("scratch delete");
        }
        let before = to.current_rev();
        copy_all(&from, &to, false).await.expect("copy");
        for (key, _) in [NS, CM] {
            let kv = to.get(key).await.expect("get").expect("copied");
            let src = from.get(key).await.expect("get").expect("in the source");
            assert!(kv.mod_rev > before, "{key}: revision {} is the target's (after {before})", kv.mod_rev);
            assert_ne!(kv.mod_rev, src.mod_rev, "{key}: not the source's revision");
            assert_eq!(kv.value, src.value, "{key}: value byte for byte");
        }
    }

    /// A source that changes right after its first page is read, as a server still running
    /// on it would; with `compact`, its history is then compacted past the snapshot.
    struct ChangesAfterFirstPage {
        inner: SqliteStorage,
        compact: bool,
        changed: AtomicBool,
    }

    impl ChangesAfterFirstPage {
        async fn new(compact: bool) -> Self {
            ChangesAfterFirstPage {
                inner: store(&[NS, CM, SECRET, ROLE]).await,
                compact,
                changed: AtomicBool::new(false),
            }
        }
    }

    #[async_trait]
    impl Storage for ChangesAfterFirstPage {
        async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
            self.inner.get(key).await
        }
        async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
            let page = self.inner.list(prefix, opts).await?;
            if !self.changed.swap(true, Ordering::SeqCst) {
                let kv = self.inner.get(ROLE.0).await?.expect("the role is there");
                self.inner.update(ROLE.0, b"changed later".to_vec(), kv.mod_rev).await?;
                self.inner.create("/registry/zz/created-later", b"{}".to_vec()).await?;
                if self.compact {
                    self.inner.compact(self.inner.current_rev()).await?;
                }
            }
            Ok(page)
        }
        async fn count(&self, prefix: &str) -> Result<u64> {
            self.inner.count(prefix).await
        }
        async fn create(&self, key: &str, value: Vec<u8>) -> Result<Rev> {
            self.inner.create(key, value).await
        }
        async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> Result<Rev> {
            self.inner.update(key, value, expected_rev).await
        }
        async fn delete(&self, key: &str, expected_rev: Rev) -> Result<Rev> {
            self.inner.delete(key, expected_rev).await
        }
        async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)> {
            self.inner.get_at(key, at_rev).await
        }
        async fn watch(&self, prefix: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
            self.inner.watch(prefix, after_rev).await
        }
        async fn watch_key(&self, key: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
            self.inner.watch_key(key, after_rev).await
        }
        fn current_rev(&self) -> Rev {
            self.inner.current_rev()
        }
        fn compacted_rev(&self) -> Rev {
            self.inner.compacted_rev()
        }
        async fn compact(&self, rev: Rev) -> Result<()> {
            self.inner.compact(rev).await
        }
    }

    #[tokio::test]
    async fn the_source_is_read_at_the_revision_of_its_first_page() {
        let from = ChangesAfterFirstPage::new(false).await;
        let snapshot = from.current_rev();
        let to = store(&[]).await;
        let got = copy_paged(&from, &to, false, 1).await.expect("copy");
        assert!(from.changed.load(Ordering::SeqCst), "the source changed during the copy");
        assert_eq!((got.objects, got.source_rev), (4, snapshot), "copied at the first page's revision");
        assert_eq!(contents(&to).await, map(&[NS, CM, SECRET, ROLE]), "the target holds the snapshot");
    }

    #[tokio::test]
    async fn a_snapshot_compacted_away_during_the_copy_is_a_source_error() {
        let from = ChangesAfterFirstPage::new(true).await;
        let snapshot = from.current_rev();
        let to = store(&[]).await;
        match copy_paged(&from, &to, false, 1).await {
            Err(MigrateError::Source(Error::Compacted { requested, .. })) => {
                assert_eq!(requested, snapshot, "the snapshot's revision is the one reported")
            }
            other => panic!("copy from a source compacted past the snapshot: {other:?}"),
        }
    }
}
