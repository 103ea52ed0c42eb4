//! The etcd backend's watch cache (apiserver/src/storage/etcd/cache.rs), against a private
//! etcd from the fixture: reads of the current state see every write that completed before
//! them, from this store, from another store on the same prefix and from a client writing
//! straight to etcd; reads at an exact revision the cache cannot answer go to etcd; reads the
//! cache can answer need no etcd at all; the cache follows etcd across an outage; a recent
//! read (`get_recent`) sees the store's own writes at once.

mod common;

use std::time::Duration;

use etcd_client::Client;
use kustos_apiserver::storage::etcd::{EtcdConfig, EtcdStorage};
use kustos_apiserver::storage::{Error, ListOptions, Storage};

async fn store(etcd: &common::etcd::Etcd, prefix: &str) -> EtcdStorage {
    let mut cfg = EtcdConfig::new(vec![etcd.client_url()]);
    cfg.prefix = prefix.to_string();
    EtcdStorage::connect(&cfg).await.expect("connecting to the fixture etcd")
}

async fn raw(etcd: &common::etcd::Etcd) -> Client {
    Client::connect([etcd.client_url()], None).await.expect("a plain etcd client")
}

async fn value(s: &EtcdStorage, key: &str) -> Option<Vec<u8>> {
    s.get(key).await.unwrap_or_else(|e| panic!("get {key}: {e}")).map(|kv| kv.value)
}

async fn keys(s: &EtcdStorage, prefix: &str, opts: ListOptions) -> (Vec<String>, u64, u64) {
    let l = s.list(prefix, opts).await.unwrap_or_else(|e| panic!("list {prefix}: {e}"));
    (l.items.into_iter().map(|kv| kv.key).collect(), l.remaining, l.rev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_see_every_completed_write_whoever_made_it() {
    let etcd = common::etcd::Etcd::start();
    let mut client = raw(&etcd).await;
    // Another cluster on the same etcd: its writes move etcd's revision, not this cache's keys.
    let other = store(&etcd, "/cache-other").await;
    let s = store(&etcd, "/cache-a").await;
    let peer = store(&etcd, "/cache-a").await;
    let dir = "/registry/core/configmaps/ns/";
    for i in 0..20 {
        let k = format!("{dir}own-{i:02}");
        let r1 = s.create(&k, b"one".to_vec()).await.unwrap_or_else(|e| panic!("create {k}: {e}"));
        assert_eq!(value(&s, &k).await.as_deref(), Some(&b"one"[..]), "{k}: after create");
        assert_eq!(value(&peer, &k).await.as_deref(), Some(&b"one"[..]), "{k}: on the peer after create");
        let r2 = peer.update(&k, b"two".to_vec(), r1).await.unwrap_or_else(|e| panic!("update {k}: {e}"));
        assert_eq!(value(&s, &k).await.as_deref(), Some(&b"two"[..]), "{k}: the peer's update");
        other.create(&format!("{dir}x-{i}"), b"elsewhere".to_vec()).await.unwrap_or_else(|e| panic!("other: {e}"));
        let kv = s.get(&k).await.ok().flatten().unwrap_or_else(|| panic!("{k}: gone"));
        assert_eq!((kv.create_rev, kv.mod_rev), (r1, r2), "{k}: revisions");
        // Straight to etcd, bypassing every store.
        let etcd_key = format!("/cache-a/core/configmaps/ns/raw-{i:02}");
        client.put(etcd_key.as_str(), "raw", None).await.unwrap_or_else(|e| panic!("put {etcd_key}: {e}"));
        assert_eq!(value(&s, &format!("{dir}raw-{i:02}")).await.as_deref(), Some(&b"raw"[..]), "raw put {i}");
        if i % 2 == 1 {
            let d = s.delete(&k, r2).await.unwrap_or_else(|e| panic!("delete {k}: {e}"));
            assert!(d > r2);
            assert_eq!(value(&peer, &k).await, None, "{k}: deleted, on the peer");
            client.delete(etcd_key.as_str(), None).await.unwrap_or_else(|e| panic!("delete {etcd_key}: {e}"));
            assert_eq!(value(&s, &format!("{dir}raw-{i:02}")).await, None, "raw delete {i}");
        }
    }
    let (listed, remaining, rev) = keys(&s, dir, ListOptions::default()).await;
    let mut want: Vec<String> = (0..20).step_by(2).map(|i| format!("{dir}own-{i:02}")).collect();
    want.extend((0..20).step_by(2).map(|i| format!("{dir}raw-{i:02}")));
    assert_eq!((listed, remaining), (want, 0), "the list after every write");
    assert!(rev >= other.current_rev(), "the list is read at or after every write ({rev})");
    assert_eq!(s.count(dir).await.ok(), Some(20));
    assert_eq!(peer.count("/registry/").await.ok(), Some(20));
    assert_eq!(other.count("/registry/").await.ok(), Some(20), "the other cluster sees only its own keys");
}

async fn recent(s: &EtcdStorage, key: &str) -> Option<(Vec<u8>, u64)> {
    s.get_recent(key).await.unwrap_or_else(|e| panic!("get_recent {key}: {e}")).map(|kv| (kv.value, kv.mod_rev))
}

/// `get_recent` (the admission plugins' read: from the watch cache, without asking etcd for
/// its current revision) sees every write this store acknowledged, and another store's write
/// once this one has learnt its revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_reads_see_the_stores_own_writes_at_once() {
    let etcd = common::etcd::Etcd::start();
    let s = store(&etcd, "/cache-recent").await;
    let peer = store(&etcd, "/cache-recent").await;
    let dir = "/registry/core/namespaces/";
    assert_eq!(recent(&s, &format!("{dir}never")).await, None, "a key never written");
    for i in 0..20 {
        let k = format!("{dir}own-{i:02}");
        let r1 = s.create(&k, b"one".to_vec()).await.unwrap_or_else(|e| panic!("create {k}: {e}"));
        assert_eq!(recent(&s, &k).await, Some((b"one".to_vec(), r1)), "{k}: right after its create");
        let r2 = s.update(&k, b"two".to_vec(), r1).await.unwrap_or_else(|e| panic!("update {k}: {e}"));
        assert_eq!(recent(&s, &k).await, Some((b"two".to_vec(), r2)), "{k}: right after its update");
        s.delete(&k, r2).await.unwrap_or_else(|e| panic!("delete {k}: {e}"));
        assert_eq!(recent(&s, &k).await, None, "{k}: right after its delete");
        // The peer's write: known here once a read of the current state has seen it.
        let p = format!("{dir}peer-{i:02}");
        let rp = peer.create(&p, b"peer".to_vec()).await.unwrap_or_else(|e| panic!("create {p}: {e}"));
        assert_eq!(value(&s, &p).await.as_deref(), Some(&b"peer"[..]), "{p}: a current read");
        assert_eq!(recent(&s, &p).await, Some((b"peer".to_vec(), rp)), "{p}: after the current read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_at_the_first_page_revision_and_old_revisions_come_from_etcd() {
    let etcd = common::etcd::Etcd::start();
    let s = store(&etcd, "/cache-pages").await;
    let dir = "/registry/core/configmaps/ns/";
    let mut revs = Vec::new();
    for i in 0..25 {
        revs.push(s.create(&format!("{dir}k-{i:02}"), b"v1".to_vec()).await.unwrap_or_else(|e| panic!("create: {e}")));
    }
    let page = |start_after: Option<String>, at_rev: Option<u64>| ListOptions { at_rev, start_after, limit: Some(10) };
    let (first, remaining, rev) = keys(&s, dir, page(None, None)).await;
    assert_eq!((first.len(), remaining), (10, 15));
    assert_eq!(first.first().map(String::as_str), Some("/registry/core/configmaps/ns/k-00"));
    // Changes between the pages do not show in the pages pinned to the first one's revision.
    let k12 = format!("{dir}k-12");
    s.update(&k12, b"v2".to_vec(), revs[12]).await.unwrap_or_else(|e| panic!("update: {e}"));
    s.delete(&format!("{dir}k-20"), revs[20]).await.unwrap_or_else(|e| panic!("delete: {e}"));
    let pinned = s.list(dir, page(first.last().cloned(), Some(rev))).await.unwrap_or_else(|e| panic!("page 2: {e}"));
    assert_eq!((pinned.items.len(), pinned.remaining, pinned.rev), (10, 5, rev));
    let old = pinned.items.iter().find(|kv| kv.key == k12).map(|kv| kv.value.clone());
    assert_eq!(old, Some(b"v1".to_vec()), "k-12 as of the first page");
    let (last, remaining, _) = keys(&s, dir, page(pinned.items.last().map(|kv| kv.key.clone()), Some(rev))).await;
    assert_eq!((last.len(), remaining), (5, 0), "k-20 is still there at the pinned revision");
    // The current state: k-20 is gone, k-12 is v2.
    let (now, _, _) = keys(&s, dir, ListOptions::default()).await;
    assert_eq!(now.len(), 24);
    assert_eq!(value(&s, &k12).await.as_deref(), Some(&b"v2"[..]));
    // An exact old revision of one key.
    let (at, read) = s.get_at(&k12, Some(revs[12])).await.unwrap_or_else(|e| panic!("get_at: {e}"));
    assert_eq!((at.map(|kv| kv.value), read), (Some(b"v1".to_vec()), revs[12]));
    let (gone, _) = s.get_at(&format!("{dir}k-20"), Some(rev)).await.unwrap_or_else(|e| panic!("get_at: {e}"));
    assert!(gone.is_some(), "k-20 existed at {rev}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_revisions_are_read_from_memory_and_the_cache_follows_etcd_across_an_outage() {
    let mut etcd = common::etcd::Etcd::start();
    let s = store(&etcd, "/cache-outage").await;
    let dir = "/registry/core/configmaps/ns/";
    let mut last = 0;
    for i in 0..5 {
        last = s.create(&format!("{dir}k-{i}"), b"v".to_vec()).await.unwrap_or_else(|e| panic!("create: {e}"));
    }
    // A read of the current state waits until the cache has seen every write.
    assert_eq!(keys(&s, dir, ListOptions::default()).await.0.len(), 5);
    etcd.stop();
    // Nothing changed after `last`: the cache answers reads at it without etcd.
    let (kv, read) = s.get_at(&format!("{dir}k-0"), Some(last)).await.unwrap_or_else(|e| panic!("get_at: {e}"));
    assert_eq!((kv.map(|kv| kv.value), read), (Some(b"v".to_vec()), last));
    let opts = ListOptions { at_rev: Some(last), start_after: None, limit: Some(2) };
    let (page, remaining, rev) = keys(&s, dir, opts).await;
    assert_eq!((page.len(), remaining, rev), (2, 3, last));
    // The current state needs etcd's revision: with etcd down, the read fails as any other.
    match s.get(&format!("{dir}k-0")).await {
        Err(Error::Unavailable(_) | Error::Timeout(_)) => {}
        other => panic!("a current read with etcd down: {other:?}"),
    }
    etcd.start_again();
    let mut client = raw(&etcd).await;
    client.put("/cache-outage/core/configmaps/ns/after", "back", None).await.expect("a put after the outage");
    // The feed re-opens from where it stopped; reads wait for it (retried while the client
    // reconnects, bounded).
    let mut seen = None;
    for _ in 0..100 {
        match s.get(&format!("{dir}after")).await {
            Ok(v) => {
                seen = Some(v.map(|kv| kv.value));
                break;
            }
            Err(Error::Unavailable(_) | Error::Timeout(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("get after the outage: {e}"),
        }
    }
    assert_eq!(seen, Some(Some(b"back".to_vec())), "the write made while the store was reconnecting");
    assert_eq!(s.count(dir).await.ok(), Some(6));
}

/// A TCP relay between a store and etcd that the test can cut: while cut, every connection
/// through it is closed and new ones are closed at once, so the store loses etcd while a
/// client connected straight to etcd still reaches it.
struct Relay {
    port: u16,
    cut: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding the relay");
        let port = listener.local_addr().expect("the relay's address").port();
        let (cut, cut_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                if *cut_rx.borrow() {
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream) => {}
                        _ = cut_rx.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        Relay { port, cut, task }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_is_loaded_again_when_etcd_compacted_what_its_watch_missed() {
    let etcd = common::etcd::Etcd::start();
    let target = etcd.client_url().trim_start_matches("http://").to_string();
    let relay = Relay::start(target).await;
    let mut cfg = EtcdConfig::new(vec![relay.url()]);
    cfg.prefix = "/cache-compact".into();
    let s = EtcdStorage::connect(&cfg).await.expect("connecting through the relay");
    let dir = "/registry/core/configmaps/ns/";
    let mut revs = Vec::new();
    for i in 0..3 {
        revs.push(s.create(&format!("{dir}k-{i}"), b"v1".to_vec()).await.unwrap_or_else(|e| panic!("create: {e}")));
    }
    assert_eq!(keys(&s, dir, ListOptions::default()).await.0.len(), 3);
    let mut watch = s.watch(dir, revs[2]).await.expect("a watch from the last write");

    // The store loses etcd; meanwhile another client changes every key and compacts the
    // history the store's watch would need.
    relay.set_cut(true);
    let mut client = raw(&etcd).await;
    let etcd_key = |i: u32| format!("/cache-compact/core/configmaps/ns/k-{i}");
    client.put(etcd_key(0), "v2", None).await.expect("put k-0");
    client.delete(etcd_key(1), None).await.expect("delete k-1");
    client.put(etcd_key(3), "new", None).await.expect("put k-3");
    let now = client.put(etcd_key(0), "v3", None).await.expect("put k-0 again");
    let now = now.header().map(|h| h.revision()).expect("a header");
    client.compact(now, None).await.expect("compacting etcd");
    relay.set_cut(false);

    // Reads wait for the feed to come back and load the cache again (bounded).
    let mut listed = None;
    for _ in 0..150 {
        match s.list(dir, ListOptions::default()).await {
            Ok(l) => {
                listed = Some(l);
                break;
            }
            Err(Error::Unavailable(_) | Error::Timeout(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("list after the compaction: {e}"),
        }
    }
    let listed = listed.expect("etcd reachable again within 15 s");
    let got: Vec<(String, Vec<u8>)> = listed.items.into_iter().map(|kv| (kv.key, kv.value)).collect();
    let want: Vec<(String, Vec<u8>)> = vec![
        (format!("{dir}k-0"), b"v3".to_vec()),
        (format!("{dir}k-2"), b"v1".to_vec()),
        (format!("{dir}k-3"), b"new".to_vec()),
    ];
    assert_eq!(got, want, "the state after the changes made while away");
    assert!(listed.rev >= u64::try_from(now).unwrap_or(0));
    assert_eq!(value(&s, &format!("{dir}k-1")).await, None, "deleted while away");
    // The watch that was fed before cannot go on: its history is gone.
    let ended = tokio::time::timeout(Duration::from_secs(15), futures::StreamExt::next(&mut watch)).await;
    match ended {
        Ok(Some(Err(Error::Compacted { .. }))) => {}
        other => panic!("the old watch: {other:?}"),
    }
    // And the cache keeps following etcd.
    let r = s.create(&format!("{dir}k-4"), b"v1".to_vec()).await.unwrap_or_else(|e| panic!("create k-4: {e}"));
    let kv = s.get(&format!("{dir}k-4")).await.ok().flatten().map(|kv| kv.mod_rev);
    assert_eq!(kv, Some(r));
    assert_eq!(s.count(dir).await.ok(), Some(4));
}
