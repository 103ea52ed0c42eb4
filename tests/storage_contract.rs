//! The storage contract (apiserver/src/storage/mod.rs), checked on both backends with the same
//! cases: SQLite in memory, and etcd (a private etcd process from the fixture, so this runs
//! in every pass and needs `etcd` on PATH; it fails loudly without it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kustos_apiserver::storage::etcd::{EtcdConfig, EtcdStorage};
use kustos_apiserver::storage::sqlite::SqliteStorage;
use kustos_apiserver::storage::{Error, Event, EventKind, ListOptions, Storage};

/// What a watch delivered: kind, revision, key, value, previous value.
type Seen = (EventKind, u64, String, Vec<u8>, Option<Vec<u8>>);

/// Bound for one event to arrive on a watch.
const EVENT_WAIT: Duration = Duration::from_secs(10);

async fn backends(etcd: &common::etcd::Etcd, prefix: &str) -> Vec<(&'static str, Arc<dyn Storage>)> {
    let sqlite = SqliteStorage::open_in_memory().expect("opening SQLite in memory");
    let mut cfg = EtcdConfig::new(vec![etcd.client_url()]);
    cfg.prefix = prefix.to_string();
    let etcd = EtcdStorage::connect(&cfg).await.expect("connecting to the fixture etcd");
    vec![("sqlite", Arc::new(sqlite)), ("etcd", Arc::new(etcd))]
}

async fn next(
    name: &str,
    events: &mut futures::stream::BoxStream<'static, kustos_apiserver::storage::Result<Event>>,
) -> Event {
    match tokio::time::timeout(EVENT_WAIT, events.next()).await {
        Ok(Some(Ok(ev))) => ev,
        other => panic!("{name}: wanted an event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_compare_revisions() {
    let etcd = common::etcd::Etcd::start();
    for (name, s) in backends(&etcd, "/contract-writes").await {
        let k = "/registry/core/configmaps/ns/a";
        let r1 = s.create(k, b"one".to_vec()).await.unwrap_or_else(|e| panic!("{name}: create: {e}"));
        assert!(matches!(s.create(k, b"again".to_vec()).await, Err(Error::AlreadyExists(_))), "{name}: second create");
        let r2 = s.update(k, b"two".to_vec(), r1).await.unwrap_or_else(|e| panic!("{name}: update: {e}"));
        assert!(r2 > r1, "{name}: revisions grow ({r1} → {r2})");
        match s.update(k, b"stale".to_vec(), r1).await {
            Err(Error::Conflict { current_rev, .. }) => {
                assert_eq!(current_rev, r2, "{name}: conflict names the current rev")
            }
            other => panic!("{name}: stale update: {other:?}"),
        }
        let missing = "/registry/core/configmaps/ns/missing";
        assert!(
            matches!(s.update(missing, b"x".to_vec(), 0).await, Err(Error::NotFound(_))),
            "{name}: update of a missing key, rev 0"
        );
        assert!(
            matches!(s.update(missing, b"x".to_vec(), r1).await, Err(Error::NotFound(_))),
            "{name}: update of a missing key"
        );
        assert!(
            s.get(missing).await.unwrap_or_else(|e| panic!("{name}: {e}")).is_none(),
            "{name}: nothing was created"
        );
        assert!(matches!(s.delete(k, r1).await, Err(Error::Conflict { .. })), "{name}: stale delete");
        let kv = s.get(k).await.unwrap_or_else(|e| panic!("{name}: {e}")).unwrap_or_else(|| panic!("{name}: key gone"));
        assert_eq!((kv.value.as_slice(), kv.create_rev, kv.mod_rev), (&b"two"[..], r1, r2), "{name}: current value");
        let r3 = s.delete(k, r2).await.unwrap_or_else(|e| panic!("{name}: delete: {e}"));
        assert!(r3 > r2, "{name}: the delete has its own revision");
        assert!(s.get(k).await.unwrap_or_else(|e| panic!("{name}: {e}")).is_none(), "{name}: deleted");
        assert!(matches!(s.delete(k, r2).await, Err(Error::NotFound(_))), "{name}: delete of a deleted key");
        // The old value is still readable at its revision.
        let (old, at) = s.get_at(k, Some(r1)).await.unwrap_or_else(|e| panic!("{name}: get_at: {e}"));
        assert_eq!((old.map(|kv| kv.value), at), (Some(b"one".to_vec()), r1), "{name}: get_at r1");
        assert!(s.current_rev() >= r3, "{name}: current_rev {} ≥ {r3}", s.current_rev());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_at_one_revision() {
    let etcd = common::etcd::Etcd::start();
    for (name, s) in backends(&etcd, "/contract-lists").await {
        let prefix = "/registry/core/secrets/ns/";
        // More than one etcd range page (1,000 keys), so paging inside the backend is used.
        let n = 1_205usize;
        let writes = futures::stream::iter(0..n)
            .map(|i| {
                let s = s.clone();
                async move { s.create(&format!("{prefix}k{i:05}"), format!("v{i}").into_bytes()).await }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
        assert!(writes.iter().all(|w| w.is_ok()), "{name}: creates");
        s.create("/registry/core/secrets/other/x", b"x".to_vec()).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.count(prefix).await.unwrap_or_else(|e| panic!("{name}: {e}")), n as u64, "{name}: count");
        let all = s.list(prefix, ListOptions::default()).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((all.items.len(), all.remaining), (n, 0), "{name}: whole list");
        assert!(all.items.windows(2).all(|w| w[0].key < w[1].key), "{name}: key order");

        let first = s
            .list(prefix, ListOptions { limit: Some(10), ..Default::default() })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((first.items.len(), first.remaining), (10, n as u64 - 10), "{name}: first page");
        // A write after the first page is not seen by the next page, read at the same revision.
        let k3 = format!("{prefix}k00012");
        let cur = s.get(&k3).await.unwrap_or_else(|e| panic!("{name}: {e}")).unwrap_or_else(|| panic!("{name}: k12"));
        s.update(&k3, b"changed".to_vec(), cur.mod_rev).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let last = first.items.last().map(|kv| kv.key.clone());
        let second = s
            .list(prefix, ListOptions { at_rev: Some(first.rev), start_after: last, limit: Some(10) })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(second.rev, first.rev, "{name}: same revision");
        assert_eq!(
            second.items.first().map(|kv| kv.key.as_str()),
            Some(format!("{prefix}k00010").as_str()),
            "{name}: continues"
        );
        let k12 = second.items.iter().find(|kv| kv.key == k3).unwrap_or_else(|| panic!("{name}: k12 on page 2"));
        assert_eq!(k12.value, b"v12", "{name}: the page shows the value as of the first page");
        assert_eq!(second.remaining, n as u64 - 20, "{name}: remaining");
        let future = s.list(prefix, ListOptions { at_rev: Some(s.current_rev() + 1000), ..Default::default() }).await;
        assert!(matches!(future, Err(Error::FutureRevision { .. })), "{name}: future revision: {future:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_replay_then_follow() {
    let etcd = common::etcd::Etcd::start();
    for (name, s) in backends(&etcd, "/contract-watch").await {
        let prefix = "/registry/core/configmaps/w/";
        let (a, b) = (format!("{prefix}a"), format!("{prefix}b"));
        let r0 = s.current_rev();
        let ra = s.create(&a, b"a1".to_vec()).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        // From before the write: replayed.
        let mut w = s.watch(prefix, r0).await.unwrap_or_else(|e| panic!("{name}: watch: {e}"));
        let mut wk = s.watch_key(&b, s.current_rev()).await.unwrap_or_else(|e| panic!("{name}: watch_key: {e}"));
        let ev = next(name, &mut w).await;
        assert_eq!(
            (ev.kind, ev.rev, ev.key.as_str(), ev.value.as_slice()),
            (EventKind::Created, ra, a.as_str(), &b"a1"[..]),
            "{name}: replayed create"
        );
        // Live: update, a create of another key, delete.
        let ra2 = s.update(&a, b"a2".to_vec(), ra).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let rb = s.create(&b, b"b1".to_vec()).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let rd = s.delete(&a, ra2).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        s.create("/registry/core/configmaps/elsewhere/x", b"x".to_vec())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<Seen> = {
            let mut v = Vec::new();
            for _ in 0..3 {
                let e = next(name, &mut w).await;
                v.push((e.kind, e.rev, e.key, e.value, e.prev_value));
            }
            v
        };
        let want = vec![
            (EventKind::Updated, ra2, a.clone(), b"a2".to_vec(), Some(b"a1".to_vec())),
            (EventKind::Created, rb, b.clone(), b"b1".to_vec(), None),
            (EventKind::Deleted, rd, a.clone(), b"a2".to_vec(), Some(b"a2".to_vec())),
        ];
        assert_eq!(got, want, "{name}: live events in order, with previous values");
        let ev = next(name, &mut wk).await;
        assert_eq!((ev.kind, ev.key.as_str()), (EventKind::Created, b.as_str()), "{name}: the key watch sees its key");
        // Nothing else for the key watch: its next event is the next change of `b`.
        let rb2 = s.update(&b, b"b2".to_vec(), rb).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let ev = next(name, &mut wk).await;
        assert_eq!((ev.kind, ev.rev), (EventKind::Updated, rb2), "{name}: key watch, next change");

        // Compaction: older revisions are gone for reads and watches alike.
        s.compact(rb).await.unwrap_or_else(|e| panic!("{name}: compact: {e}"));
        assert!(s.compacted_rev() >= rb, "{name}: compacted_rev");
        assert!(
            matches!(s.watch(prefix, r0).await, Err(Error::Compacted { .. })),
            "{name}: watch from before compaction"
        );
        let old = s.list(prefix, ListOptions { at_rev: Some(ra), ..Default::default() }).await;
        assert!(matches!(old, Err(Error::Compacted { .. })), "{name}: list at a compacted revision: {old:?}");
        assert!(s.watch(prefix, rb).await.is_ok(), "{name}: a watch from the compaction revision works");
    }
}
