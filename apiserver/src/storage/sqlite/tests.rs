use super::read::{history_after, prefix_end, rev_at, Keys, GET_CURRENT};
use super::WATCH_CHUNK;
use super::*;
use crate::storage::EventKind;
use rusqlite::OptionalExtension as _;
use std::collections::{BTreeMap, HashSet};
use std::sync::PoisonError;

const WAIT: Duration = Duration::from_secs(20);

fn durable_store() -> (tempfile::TempDir, SqliteStorage) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStorage::open(&dir.path().join("kustos.db")).expect("open");
    (dir, store)
}

fn fast_store(cfg: Config) -> SqliteStorage {
    SqliteStorage::open_temp(Config { durable: false, ..cfg }).expect("open")
}

fn keys(list: &ListResult) -> Vec<&str> {
    list.items.iter().map(|kv| kv.key.as_str()).collect()
}

async fn next_events(s: &mut BoxStream<'static, Result<Event>>, n: usize) -> Vec<Event> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let item = tokio::time::timeout(WAIT, s.next()).await.expect("event in time").expect("stream open");
        out.push(item.expect("event"));
    }
    out
}

type EventSummary<'a> = (EventKind, Rev, &'a str, &'a [u8], Option<&'a [u8]>);

fn summary(events: &[Event]) -> Vec<EventSummary<'_>> {
    events.iter().map(|e| (e.kind, e.rev, e.key.as_str(), e.value.as_slice(), e.prev_value.as_deref())).collect()
}

fn raw_rows(path: &Path) -> Vec<(Rev, String, bool)> {
    let conn = Connection::open(path).expect("open raw");
    let mut stmt = conn.prepare("SELECT rev, key, deleted FROM kv ORDER BY rev").expect("prepare");
    stmt.query_map([], |r| Ok((rev_at(0)(r)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<rusqlite::Result<Vec<_>>>()
        .expect("rows")
}

#[test]
fn prefix_end_is_the_first_key_after_the_prefix() {
    let cases: &[(&str, Option<&str>)] = &[
        ("/registry/pods/", Some("/registry/pods0")),
        ("a", Some("b")),
        ("", None),
        ("a\u{10FFFF}", Some("b")),
        ("\u{10FFFF}", None),
        ("x\u{D7FF}", Some("x\u{E000}")),
    ];
    for (prefix, want) in cases {
        assert_eq!(prefix_end(prefix).as_deref(), *want, "prefix {prefix:?}");
    }
}

#[tokio::test]
async fn compare_and_swap_failures_report_the_right_error() {
    let (_dir, s) = durable_store();
    let r1 = s.create("/r/a", b"1".to_vec()).await.expect("create");
    let r2 = s.update("/r/a", b"2".to_vec(), r1).await.expect("update");
    assert!(r2 > r1);
    let cases: Vec<(&str, Result<Rev>)> = vec![
        ("create existing", s.create("/r/a", b"x".to_vec()).await),
        ("update missing", s.update("/r/missing", b"x".to_vec(), 1).await),
        ("update stale", s.update("/r/a", b"x".to_vec(), r1).await),
        ("delete missing", s.delete("/r/missing", 1).await),
        ("delete stale", s.delete("/r/a", r1).await),
    ];
    let want = [
        Error::AlreadyExists("/r/a".into()),
        Error::NotFound("/r/missing".into()),
        Error::Conflict { key: "/r/a".into(), current_rev: r2 },
        Error::NotFound("/r/missing".into()),
        Error::Conflict { key: "/r/a".into(), current_rev: r2 },
    ];
    for ((name, got), want) in cases.into_iter().zip(want) {
        assert_eq!(got, Err(want), "{name}");
    }
    // Nothing above changed the key or consumed a revision.
    assert_eq!(s.current_rev(), r2);
    let kv = s.get("/r/a").await.expect("get").expect("present");
    assert_eq!((kv.value.as_slice(), kv.mod_rev), (&b"2"[..], r2));
}

#[tokio::test]
async fn every_successful_write_gets_the_next_revision_across_all_keys() {
    let (_dir, s) = durable_store();
    assert_eq!(s.current_rev(), 0);
    let a1 = s.create("/r/a", b"a".to_vec()).await.expect("create a");
    let b1 = s.create("/r/b", b"b".to_vec()).await.expect("create b");
    let _ = s.create("/r/b", b"b".to_vec()).await.expect_err("duplicate");
    let a2 = s.update("/r/a", b"a2".to_vec(), a1).await.expect("update a");
    let b2 = s.delete("/r/b", b1).await.expect("delete b");
    assert_eq!([a1, b1, a2, b2], [1, 2, 3, 4]);
    assert_eq!(s.current_rev(), 4);
}

#[tokio::test]
async fn get_returns_the_value_with_its_create_and_mod_revisions() {
    let (_dir, s) = durable_store();
    assert_eq!(s.get("/r/a").await.expect("get"), None);
    let c = s.create("/r/a", b"v1".to_vec()).await.expect("create");
    let m = s.update("/r/a", b"v2".to_vec(), c).await.expect("update");
    let kv = s.get("/r/a").await.expect("get").expect("present");
    assert_eq!(kv, KeyValue { key: "/r/a".into(), value: b"v2".to_vec(), create_rev: c, mod_rev: m });
    s.delete("/r/a", m).await.expect("delete");
    assert_eq!(s.get("/r/a").await.expect("get"), None);
    // Re-created: a new create revision.
    let c2 = s.create("/r/a", b"v3".to_vec()).await.expect("recreate");
    let kv = s.get("/r/a").await.expect("get").expect("present");
    assert_eq!((kv.create_rev, kv.mod_rev), (c2, c2));
}

/// `get` and `get_at` of the current revision answer from the values the writer committed
/// last when it kept them, and always what the database file holds: checked after every step
/// against a connection of its own on the file.
#[tokio::test]
async fn reads_of_the_current_state_match_the_file_whether_kept_or_not() {
    async fn check(s: &SqliteStorage, file: &Connection, step: &str, key: &str, kept: bool) {
        assert_eq!(s.shared.current.get(key).is_some(), kept, "{step}: kept");
        let want = file.query_row(GET_CURRENT, [key], super::read::key_value).optional().expect("read the file");
        assert_eq!(s.get(key).await.expect("get"), want, "{step}: get");
        let (got, rev) = s.get_at(key, None).await.expect("get_at");
        assert_eq!(got, want, "{step}: get_at");
        assert_eq!(rev, s.shared.rev.load(Ordering::SeqCst), "{step}: read at the current revision");
    }
    let (dir, s) = durable_store();
    let file = Connection::open(dir.path().join("kustos.db")).expect("open the file");
    check(&s, &file, "never written", "/r/a", false).await;
    let c = s.create("/r/a", b"v1".to_vec()).await.expect("create");
    check(&s, &file, "created", "/r/a", true).await;
    let m = s.update("/r/a", b"v2".to_vec(), c).await.expect("update");
    check(&s, &file, "updated", "/r/a", true).await;
    assert!(s.update("/r/a", b"lost".to_vec(), c).await.is_err(), "a stale compare-and-swap fails");
    check(&s, &file, "a failed update", "/r/a", true).await;
    s.create("/r/b", vec![b'x'; 100 << 10]).await.expect("create big");
    check(&s, &file, "a value too large to keep", "/r/b", false).await;
    s.delete("/r/a", m).await.expect("delete");
    check(&s, &file, "deleted", "/r/a", false).await;
    s.create("/r/a", b"v3".to_vec()).await.expect("recreate");
    check(&s, &file, "created again", "/r/a", true).await;
    assert_eq!(s.get("/r/a").await.expect("get").map(|kv| kv.value), Some(b"v3".to_vec()));
}

#[tokio::test]
async fn list_at_an_old_revision_sees_the_snapshot_of_that_revision() {
    let (_dir, s) = durable_store();
    let a = s.create("/p/a", b"a1".to_vec()).await.expect("rev 1");
    let b = s.create("/p/b", b"b1".to_vec()).await.expect("rev 2");
    s.create("/q/x", b"x".to_vec()).await.expect("rev 3 (other prefix)");
    s.update("/p/a", b"a2".to_vec(), a).await.expect("rev 4");
    s.delete("/p/b", b).await.expect("rev 5");
    s.create("/p/c", b"c1".to_vec()).await.expect("rev 6");
    type Case<'a> = (Option<Rev>, &'a [(&'a str, &'a str)]);
    let cases: &[Case<'_>] = &[
        (Some(0), &[]),
        (Some(1), &[("/p/a", "a1")]),
        (Some(3), &[("/p/a", "a1"), ("/p/b", "b1")]),
        (Some(4), &[("/p/a", "a2"), ("/p/b", "b1")]),
        (Some(5), &[("/p/a", "a2")]),
        (Some(6), &[("/p/a", "a2"), ("/p/c", "c1")]),
        (None, &[("/p/a", "a2"), ("/p/c", "c1")]),
    ];
    for (at, want) in cases {
        let got = s.list("/p/", ListOptions { at_rev: *at, ..Default::default() }).await.expect("list");
        let got_pairs: Vec<(&str, &str)> =
            got.items.iter().map(|kv| (kv.key.as_str(), std::str::from_utf8(&kv.value).expect("utf8"))).collect();
        assert_eq!(&got_pairs, want, "at {at:?}");
        assert_eq!(got.rev, at.unwrap_or(6), "at {at:?}");
        assert_eq!(got.remaining, 0, "at {at:?}");
    }
    // Revisions of items at an old revision are the ones of that time.
    let old = s.list("/p/", ListOptions { at_rev: Some(3), ..Default::default() }).await.expect("list");
    assert_eq!(old.items[0].mod_rev, 1);
}

#[tokio::test]
async fn pagination_with_start_after_and_limit_walks_every_key_once() {
    let s = fast_store(Config::default());
    let mut revs = BTreeMap::new();
    for i in 0..23 {
        let key = format!("/p/k{i:02}");
        revs.insert(key.clone(), s.create(&key, vec![i]).await.expect("create"));
    }
    s.create("/p0", b"just after the prefix".to_vec()).await.expect("create");
    s.create("/o/z", b"before the prefix".to_vec()).await.expect("create");
    let snapshot = s.current_rev();
    // Changes after the snapshot must not show in pages read at it.
    s.delete("/p/k05", revs["/p/k05"]).await.expect("delete");
    s.create("/p/k99", b"late".to_vec()).await.expect("create");

    let all_at_snapshot: Vec<String> = revs.keys().cloned().collect();
    for (at, page) in [(Some(snapshot), 5), (Some(snapshot), 23), (Some(snapshot), 50), (None, 7)] {
        let mut seen = Vec::new();
        let mut start_after = None;
        let mut read_at = at;
        loop {
            let opts = ListOptions { at_rev: read_at, start_after: start_after.clone(), limit: Some(page) };
            let res = s.list("/p/", opts).await.expect("list");
            read_at = Some(res.rev);
            seen.extend(res.items.iter().map(|kv| kv.key.clone()));
            assert_eq!(seen.len() as u64 + res.remaining, 23, "page {page} at {at:?}");
            match res.items.last() {
                Some(last) if res.remaining > 0 => start_after = Some(last.key.clone()),
                _ => break,
            }
        }
        if at.is_some() {
            assert_eq!(seen, all_at_snapshot, "page {page}");
        } else {
            let mut want: Vec<String> = all_at_snapshot.iter().filter(|k| *k != "/p/k05").cloned().collect();
            want.push("/p/k99".into());
            assert_eq!(seen, want, "page {page} at current");
        }
    }
    // A start_after before the prefix does not leak keys from outside it.
    let res = s
        .list("/p/", ListOptions { start_after: Some("/a".into()), limit: Some(1), ..Default::default() })
        .await
        .expect("list");
    assert_eq!(keys(&res), ["/p/k00"]);
    assert_eq!(res.remaining, 22);
    // limit 0 means all.
    let res = s.list("/p/", ListOptions { limit: Some(0), ..Default::default() }).await.expect("list");
    assert_eq!((res.items.len(), res.remaining), (23, 0));
}

#[tokio::test]
async fn list_refuses_compacted_and_future_revisions() {
    let (_dir, s) = durable_store();
    let mut rev = s.create("/p/a", b"1".to_vec()).await.expect("create");
    for i in 0..5 {
        rev = s.update("/p/a", vec![i], rev).await.expect("update");
    }
    s.compact(4).await.expect("compact");
    assert_eq!(s.compacted_rev(), 4);
    let cases: &[(Rev, Option<Error>)] = &[
        (3, Some(Error::Compacted { requested: 3, compacted: 4 })),
        (4, None),
        (6, None),
        (7, Some(Error::FutureRevision { requested: 7, current: 6 })),
    ];
    for (at, want) in cases {
        let got = s.list("/p/", ListOptions { at_rev: Some(*at), ..Default::default() }).await;
        match want {
            Some(e) => assert_eq!(got.as_ref().err(), Some(e), "at {at}"),
            None => assert_eq!(got.expect("list").items.len(), 1, "at {at}"),
        }
    }
}

#[tokio::test]
async fn count_counts_only_live_keys_under_the_prefix() {
    let (_dir, s) = durable_store();
    for k in ["/p/a", "/p/b", "/p/c", "/pz", "/q/a"] {
        s.create(k, b"v".to_vec()).await.expect("create");
    }
    let b = s.get("/p/b").await.expect("get").expect("present");
    s.delete("/p/b", b.mod_rev).await.expect("delete");
    let table = [("/p/", 2), ("/q/", 1), ("/", 4), ("", 4), ("/x/", 0)];
    for (prefix, want) in table {
        assert_eq!(s.count(prefix).await.expect("count"), want, "prefix {prefix:?}");
    }
    // Asked together, in one job on the read pool: the same answers, in the same order.
    let prefixes: Vec<String> = table.iter().map(|(p, _)| p.to_string()).collect();
    let together: Vec<u64> = s.counts(&prefixes).await.into_iter().map(|n| n.expect("counts")).collect();
    assert_eq!(together, table.iter().map(|(_, n)| *n).collect::<Vec<u64>>());
    assert!(s.counts(&[]).await.is_empty());
}

#[tokio::test]
async fn watch_replays_history_then_streams_live_events_in_order() {
    let (_dir, s) = durable_store();
    let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("1");
    s.create("/q/x", b"x".to_vec()).await.expect("2");
    let a2 = s.update("/p/a", b"a2".to_vec(), a1).await.expect("3");
    let mut w = s.watch("/p/", 1).await.expect("watch");
    let a3 = s.delete("/p/a", a2).await.expect("4");
    s.create("/q/y", b"y".to_vec()).await.expect("5");
    let a4 = s.create("/p/a", b"a3".to_vec()).await.expect("6");
    s.update("/p/a", b"a4".to_vec(), a4).await.expect("7");
    let got = next_events(&mut w, 4).await;
    assert_eq!(
        summary(&got),
        vec![
            (EventKind::Updated, a2, "/p/a", &b"a2"[..], Some(&b"a1"[..])),
            (EventKind::Deleted, a3, "/p/a", &b"a2"[..], Some(&b"a2"[..])),
            (EventKind::Created, a4, "/p/a", &b"a3"[..], None),
            (EventKind::Updated, 7, "/p/a", &b"a4"[..], Some(&b"a3"[..])),
        ]
    );
    // A watch from 0 sees everything under its prefix, history first.
    let mut all = s.watch("/", 0).await.expect("watch");
    let got = next_events(&mut all, 7).await;
    assert_eq!(got.iter().map(|e| e.rev).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6, 7]);
    s.create("/q/z", b"z".to_vec()).await.expect("8");
    assert_eq!(next_events(&mut all, 1).await[0].rev, 8);
    assert_eq!(next_events(&mut w, 0).await.len(), 0);
}

#[tokio::test]
async fn get_at_reads_one_key_at_a_revision_without_its_prefix_siblings() {
    let s = fast_store(Config::default());
    let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("1");
    s.create("/p/ab", b"ab".to_vec()).await.expect("2");
    let a2 = s.update("/p/a", b"a2".to_vec(), a1).await.expect("3");
    type Case = (&'static str, &'static str, Option<Rev>, Option<&'static [u8]>, Rev);
    let cases: &[Case] = &[
        ("current value, read at the current revision", "/p/a", None, Some(b"a2"), 3),
        ("an old revision sees the old value", "/p/a", Some(a1), Some(b"a1"), a1),
        ("a sibling that extends the key is not the key", "/p/a", Some(2), Some(b"a1"), 2),
        ("missing key", "/p/b", None, None, 3),
        ("before the key existed", "/p/ab", Some(1), None, 1),
    ];
    for (what, key, at, want, want_rev) in cases {
        let (kv, rev) = s.get_at(key, *at).await.expect(what);
        assert_eq!(kv.as_ref().map(|kv| kv.value.as_slice()), *want, "{what}");
        assert_eq!(rev, *want_rev, "{what}");
        if let Some(kv) = kv {
            assert_eq!(kv.key, *key, "{what}");
        }
    }
    assert_eq!(s.get_at("/p/a", None).await.expect("get").0.expect("a").mod_rev, a2);
    assert!(matches!(s.get_at("/p/a", Some(99)).await, Err(Error::FutureRevision { .. })));
    s.compact(3).await.expect("compact");
    assert!(matches!(s.get_at("/p/a", Some(1)).await, Err(Error::Compacted { .. })));
}

#[tokio::test]
async fn cached_reads_are_not_prepared_again_for_each_key() {
    let s = fast_store(Config::default());
    let mut rev = 0;
    for k in ["/p/a", "/p/b", "/p/c"] {
        rev = s.create(k, b"v".to_vec()).await.expect("create");
    }
    for i in 0..30 {
        let key = ["/p/a", "/p/b", "/p/c"][i % 3];
        s.get(key).await.expect("get");
        s.get_at(key, None).await.expect("get_at");
        let keys = Keys::Exact(key.to_string());
        s.reads.with(|conn| history_after(conn, &keys, 0, WATCH_CHUNK)).expect("history");
    }
    assert!(rev > 0);
    let reprepared: i32 = (0..READERS)
        .map(|i| {
            let reader = s.reads.conns[i].lock().unwrap_or_else(PoisonError::into_inner);
            let Some(conn) = reader.conn.as_ref() else { return 0 };
            let stmts = conn.prepare_cached(GET_CURRENT).map(|st| st.get_status(rusqlite::StatementStatus::RePrepare));
            stmts.unwrap_or(0)
        })
        .sum();
    assert_eq!(reprepared, 0, "point reads keep their plan across keys");
}

#[tokio::test]
async fn read_connections_open_when_reads_overlap_and_close_when_idle() {
    let idle = Duration::from_millis(300);
    let s = fast_store(Config { idle_reader_close: idle, ..Config::default() });
    assert_eq!(s.reads.opened(), 1, "one connection at start");
    let rev = s.create("/p/a", b"v".to_vec()).await.expect("create");
    for _ in 0..20 {
        s.get("/p/a").await.expect("get");
        s.list("/p/", ListOptions::default()).await.expect("list");
        s.count("/p/").await.expect("count");
    }
    assert_eq!(s.reads.opened(), 1, "reads one after another share the first connection");

    // Two reads at once: the second opens another connection, which reads the same data.
    let second = {
        let _busy = s.reads.conns[0].lock().unwrap_or_else(PoisonError::into_inner);
        s.reads.with(|conn| get_current(conn, "/p/a"))
    };
    let got = second.expect("read on a second connection");
    assert_eq!(got.map(|kv| (kv.value, kv.mod_rev)), Some((b"v".to_vec(), rev)));
    assert_eq!(s.reads.opened(), 2);

    // Two connections held: a read opens a third rather than waiting for them.
    let third = {
        let _busy = (
            s.reads.conns[0].lock().unwrap_or_else(PoisonError::into_inner),
            s.reads.conns[1].lock().unwrap_or_else(PoisonError::into_inner),
        );
        s.reads.with(|conn| get_current(conn, "/p/a"))
    };
    assert!(third.expect("read on a third connection").is_some());
    assert_eq!(s.reads.opened(), 3);

    // More reads at once than the pool has connections: every one is answered.
    let reads: Vec<_> = (0..3 * READERS).map(|_| s.get("/p/a")).collect();
    for got in futures::future::join_all(reads).await {
        assert!(got.expect("get").is_some());
    }

    // Reads one at a time for longer than the idle period (and the once-a-second look):
    // the extra connections close, the first stays and serves them.
    let until = std::time::Instant::now() + idle + Duration::from_millis(1500);
    while std::time::Instant::now() < until {
        s.count("/p/").await.expect("count");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.reads.opened(), 1, "idle extra connections are closed");
    assert_eq!(s.count("/p/").await.expect("count"), 1);
}

#[tokio::test]
async fn a_key_watch_sees_only_its_key_history_first() {
    let s = fast_store(Config::default());
    let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("1");
    s.create("/p/ab", b"ab".to_vec()).await.expect("2");
    let mut w = s.watch_key("/p/a", 0).await.expect("watch");
    let a2 = s.update("/p/a", b"a2".to_vec(), a1).await.expect("3");
    s.create("/p/b", b"b".to_vec()).await.expect("4");
    let gone = s.delete("/p/a", a2).await.expect("5");
    let again = s.create("/p/a", b"a3".to_vec()).await.expect("6");
    let got = next_events(&mut w, 4).await;
    assert_eq!(
        summary(&got),
        vec![
            (EventKind::Created, a1, "/p/a", &b"a1"[..], None),
            (EventKind::Updated, a2, "/p/a", &b"a2"[..], Some(&b"a1"[..])),
            (EventKind::Deleted, gone, "/p/a", &b"a2"[..], Some(&b"a2"[..])),
            (EventKind::Created, again, "/p/a", &b"a3"[..], None),
        ]
    );
    // From a later revision: only what follows it.
    let mut late = s.watch_key("/p/a", gone).await.expect("watch");
    assert_eq!(next_events(&mut late, 1).await[0].rev, again);
    // Nothing else arrives for other keys' changes.
    s.create("/p/c", b"c".to_vec()).await.expect("7");
    assert!(tokio::time::timeout(Duration::from_millis(200), w.next()).await.is_err(), "no event for /p/c");
}

#[tokio::test]
async fn many_key_watches_each_get_their_own_changes_and_leave_no_registration_behind() {
    let s = fast_store(Config::default());
    let mut watches = Vec::new();
    for i in 0..50 {
        watches.push(s.watch_key(&format!("/csr/n{i}"), 0).await.expect("watch"));
    }
    for i in 0..50 {
        s.create(&format!("/csr/n{i}"), format!("v{i}").into_bytes()).await.expect("create");
    }
    for (i, w) in watches.iter_mut().enumerate() {
        let got = next_events(w, 1).await;
        assert_eq!(got[0].key, format!("/csr/n{i}"));
        assert_eq!(got[0].value, format!("v{i}").into_bytes());
    }
    assert_eq!(s.shared.keyed().by_key.len(), 50);
    drop(watches);
    assert!(s.shared.keyed().by_key.is_empty(), "dropped watches unregister");
}

#[tokio::test]
async fn a_key_watch_is_handed_the_published_change_the_prefix_watches_get() {
    let s = fast_store(Config::default());
    let a1 = s.create("/p/a", b"a1".to_vec()).await.expect("create");
    let mut all = s.watch("/p/", a1).await.expect("watch");
    let mut one = s.watch_key("/p/a", 0).await.expect("watch");
    // The key watch has read its history and takes its inbox next.
    assert_eq!(next_events(&mut one, 1).await[0].rev, a1);
    s.update("/p/a", b"a2".to_vec(), a1).await.expect("update");
    let (from_all, from_one) = (next_events(&mut all, 1).await.remove(0), next_events(&mut one, 1).await.remove(0));
    assert_eq!(from_all, from_one);
    // One change, one memo: what one watch renders the other reuses.
    let rendered = from_all.memo.get_or_render(0, || bytes::Bytes::from_static(b"frame"));
    let reused = from_one.memo.get_or_render(0, || bytes::Bytes::from_static(b"rendered again"));
    assert_eq!((rendered.as_ref(), reused.as_ref()), (&b"frame"[..], &b"frame"[..]));
}

#[tokio::test]
async fn a_key_watch_whose_inbox_overflows_reads_the_gap_from_history() {
    let s = fast_store(Config::default());
    let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
    let first = rev;
    let mut w = s.watch_key("/p/a", 0).await.expect("watch");
    assert_eq!(next_events(&mut w, 1).await[0].rev, first);
    // More changes than the inbox keeps, none taken meanwhile.
    for i in 1..=(super::watch::INBOX_CAPACITY as u8 + 10) {
        rev = s.update("/p/a", vec![i], rev).await.expect("update");
        s.create(&format!("/p/other{i}"), vec![i]).await.expect("another key");
    }
    let got = next_events(&mut w, super::watch::INBOX_CAPACITY + 10).await;
    let values: Vec<u8> = got.iter().map(|e| e.value[0]).collect();
    assert_eq!(
        values,
        (1..=(super::watch::INBOX_CAPACITY as u8 + 10)).collect::<Vec<_>>(),
        "each change once, in order"
    );
    assert_eq!(got.last().map(|e| e.rev), Some(rev));
    // And the inbox serves the changes after it again.
    let next = s.update("/p/a", b"again".to_vec(), rev).await.expect("update");
    let after = next_events(&mut w, 1).await;
    assert_eq!((after[0].rev, after[0].value.as_slice()), (next, &b"again"[..]));
}

#[tokio::test]
async fn a_key_watch_from_a_compacted_revision_fails_with_compacted() {
    let s = fast_store(Config::default());
    let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
    for i in 1..5 {
        rev = s.update("/p/a", vec![i], rev).await.expect("update");
    }
    s.compact(3).await.expect("compact");
    let mut w = s.watch_key("/p/a", 1).await.expect("watch");
    let item = tokio::time::timeout(WAIT, w.next()).await.expect("in time").expect("an item");
    assert!(matches!(item, Err(Error::Compacted { .. })), "{item:?}");
}

#[tokio::test]
async fn a_key_watch_ends_when_the_store_is_dropped() {
    let s = fast_store(Config::default());
    let mut w = s.watch_key("/p/a", 0).await.expect("watch");
    drop(s);
    let end = tokio::time::timeout(WAIT, w.next()).await.expect("ends in time");
    assert!(end.is_none(), "{end:?}");
}

#[tokio::test]
async fn watch_replays_history_longer_than_one_chunk() {
    let s = fast_store(Config::default());
    let n = WATCH_CHUNK * 2 + 17;
    let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
    for i in 1..n {
        rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
        s.create(&format!("/q/{i}"), Vec::new()).await.expect("noise");
    }
    let mut w = s.watch("/p/", 0).await.expect("watch");
    let got = next_events(&mut w, n).await;
    for (i, ev) in got.iter().enumerate() {
        assert_eq!(ev.value, i.to_string().into_bytes());
        if i > 0 {
            assert_eq!(ev.prev_value, Some((i - 1).to_string().into_bytes()));
            assert!(ev.rev > got[i - 1].rev);
        }
    }
}

#[tokio::test]
async fn watch_from_a_compacted_revision_fails_with_compacted() {
    let (_dir, s) = durable_store();
    let mut rev = s.create("/p/a", b"1".to_vec()).await.expect("create");
    for i in 0..3 {
        rev = s.update("/p/a", vec![i], rev).await.expect("update");
    }
    s.compact(3).await.expect("compact");
    let err = s.watch("/p/", 2).await.err();
    assert_eq!(err, Some(Error::Compacted { requested: 2, compacted: 3 }));
    let mut w = s.watch("/p/", 3).await.expect("watch at the compaction revision");
    let got = next_events(&mut w, 1).await;
    assert_eq!((got[0].rev, got[0].prev_value.as_deref()), (4, Some(&[1u8][..])));
}

#[tokio::test]
async fn a_watcher_that_falls_behind_rereads_the_gap_from_history() {
    let s = fast_store(Config { broadcast_capacity: 4, ..Config::default() });
    let mut w = s.watch("/p/", 0).await.expect("watch");
    let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
    for i in 1..50u32 {
        rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
    }
    let got = next_events(&mut w, 50).await;
    assert_eq!(got.iter().map(|e| e.rev).collect::<Vec<_>>(), (1..=50).collect::<Vec<_>>());
    s.update("/p/a", b"live".to_vec(), rev).await.expect("update");
    assert_eq!(next_events(&mut w, 1).await[0].value, b"live");
}

#[tokio::test]
async fn a_watcher_that_falls_behind_past_a_compaction_ends_with_compacted() {
    let s = fast_store(Config { broadcast_capacity: 4, ..Config::default() });
    let mut w = s.watch("/p/", 0).await.expect("watch");
    let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
    for i in 1..20u32 {
        rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
    }
    s.compact(rev).await.expect("compact");
    let first = tokio::time::timeout(WAIT, w.next()).await.expect("in time").expect("an item");
    assert_eq!(first, Err(Error::Compacted { requested: 0, compacted: 20 }));
    assert_eq!(tokio::time::timeout(WAIT, w.next()).await.expect("in time"), None);
}

/// A deterministic mix of creates, updates and deletes over a few keys.
async fn churn(s: &SqliteStorage, writes: usize) {
    let mut live: BTreeMap<String, Rev> = BTreeMap::new();
    let mut x: u64 = 12345;
    for i in 0..writes {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let key = format!("/p/k{}", (x >> 33) % 5);
        let value = format!("v{i}").into_bytes();
        match live.get(&key).copied() {
            None => {
                live.insert(key.clone(), s.create(&key, value).await.expect("create"));
            }
            Some(r) if (x >> 20) & 3 == 0 => {
                s.delete(&key, r).await.expect("delete");
                live.remove(&key);
            }
            Some(r) => {
                live.insert(key.clone(), s.update(&key, value, r).await.expect("update"));
            }
        }
    }
}

#[tokio::test]
async fn compaction_keeps_every_snapshot_from_the_compaction_revision_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kustos.db");
    let s = SqliteStorage::open_with(&path, Config { compact_step: 3, ..Config::default() }, None).expect("open");
    churn(&s, 60).await;
    let current = s.current_rev();
    assert_eq!(current, 60);
    let mut before = BTreeMap::new();
    for at in 0..=current {
        let list = s.list("/p/", ListOptions { at_rev: Some(at), ..Default::default() }).await.expect("list");
        let events = next_events(&mut s.watch("/p/", at).await.expect("watch"), (current - at) as usize).await;
        before.insert(at, (list, events));
    }
    for compact_to in [17, 18, 41, 60] {
        s.compact(compact_to).await.expect("compact");
        assert_eq!(s.compacted_rev(), compact_to);
        for (at, (list, events)) in &before {
            let got = s.list("/p/", ListOptions { at_rev: Some(*at), ..Default::default() }).await;
            if *at < compact_to {
                assert_eq!(got, Err(Error::Compacted { requested: *at, compacted: compact_to }));
                continue;
            }
            assert_eq!(&got.expect("list"), list, "list at {at} after compacting to {compact_to}");
            let got = next_events(&mut s.watch("/p/", *at).await.expect("watch"), events.len()).await;
            assert_eq!(&got, events, "watch after {at} after compacting to {compact_to}");
        }
        // Only the newest row of each key live at the compaction revision is left below it.
        let rows = raw_rows(&path);
        let old: Vec<&(Rev, String, bool)> = rows.iter().filter(|r| r.0 <= compact_to).collect();
        let live_then = &before[&compact_to].0;
        assert_eq!(old.len(), live_then.items.len(), "rows ≤ {compact_to}: {old:?}");
        assert!(old.iter().all(|r| !r.2), "no tombstones ≤ {compact_to}");
        assert_eq!(rows.iter().filter(|r| r.0 > compact_to).count() as u64, current - compact_to);
    }
    // Compacting backwards is a no-op; compacting into the future is refused.
    s.compact(10).await.expect("compact backwards");
    assert_eq!(s.compacted_rev(), 60);
    assert_eq!(s.compact(61).await, Err(Error::FutureRevision { requested: 61, current: 60 }));
    assert_eq!(s.list("/p/", ListOptions::default()).await.expect("list"), before[&60].0);
}

#[tokio::test]
async fn the_database_and_its_wal_and_shm_are_created_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kustos.db");
    let s = SqliteStorage::open(&path).expect("open");
    s.create("/p/a", b"1".to_vec()).await.expect("create");
    for name in ["kustos.db", "kustos.db-wal", "kustos.db-shm"] {
        let meta = std::fs::metadata(dir.path().join(name)).expect(name);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
    }
}

#[tokio::test]
async fn a_store_open_elsewhere_is_refused_until_it_is_closed() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kustos.db");
    let s = SqliteStorage::open(&path).expect("open");
    s.create("/p/a", b"1".to_vec()).await.expect("create");
    let lock = dir.path().join("kustos.db.lock");
    assert_eq!(std::fs::metadata(&lock).expect("the lock file").permissions().mode() & 0o777, 0o600);
    match SqliteStorage::open(&path) {
        Err(Error::Backend(msg)) => {
            let want = format!("{} is in use: another process holds {}", path.display(), lock.display());
            assert!(msg.starts_with(&want), "{msg}");
        }
        other => panic!("a second open of a store in use: {other:?}"),
    }
    // The first is untouched by the refused one.
    assert_eq!(s.create("/p/b", b"2".to_vec()).await, Ok(2));
    drop(s);
    let s = SqliteStorage::open(&path).expect("reopen once closed");
    assert_eq!(s.count("/p/").await, Ok(2));
}

#[tokio::test]
async fn reopening_the_file_keeps_data_and_revisions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kustos.db");
    {
        let s = SqliteStorage::open(&path).expect("open");
        assert_eq!(s.current_rev(), 0);
    }
    {
        let s = SqliteStorage::open(&path).expect("reopen empty");
        assert_eq!(s.current_rev(), 0);
        let r = s.create("/p/a", b"1".to_vec()).await.expect("create");
        let r = s.update("/p/a", b"2".to_vec(), r).await.expect("update");
        let b = s.create("/p/b", b"b".to_vec()).await.expect("create");
        s.delete("/p/b", b).await.expect("delete");
        s.compact(r).await.expect("compact");
    }
    let s = SqliteStorage::open(&path).expect("reopen");
    // The newest revision was a delete whose row compaction could drop: the revision is
    // persisted on its own, so it does not go backwards.
    assert_eq!((s.current_rev(), s.compacted_rev()), (4, 2));
    let kv = s.get("/p/a").await.expect("get").expect("present");
    assert_eq!((kv.value.as_slice(), kv.create_rev, kv.mod_rev), (&b"2"[..], 1, 2));
    assert_eq!(s.create("/p/c", Vec::new()).await, Ok(5));
    let at = s.list("/p/", ListOptions { at_rev: Some(3), ..Default::default() }).await.expect("list");
    assert_eq!(keys(&at), ["/p/a", "/p/b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_all_succeed_with_distinct_revisions() {
    let (_dir, s) = durable_store();
    let s = Arc::new(s);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.create(&format!("/p/{i:03}"), vec![0; 1024]).await })
        })
        .collect();
    let mut revs = HashSet::new();
    for t in tasks {
        revs.insert(t.await.expect("task").expect("create"));
    }
    assert_eq!(revs.len(), 200);
    assert_eq!(revs.iter().max(), Some(&200));
    assert_eq!(s.count("/p/").await.expect("count"), 200);
}

/// Write transactions the store committed: (at once, after waiting for more writes).
fn commits(s: &SqliteStorage) -> (u64, u64) {
    let [at_once, waited] = &s.shared.commits;
    (at_once.load(Ordering::Relaxed), waited.load(Ordering::Relaxed))
}

/// `callers` tasks at once, each creating `each` keys under `/p/<round>/` one after another.
async fn callers_at_once(s: &Arc<SqliteStorage>, round: usize, callers: usize, each: usize) {
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..each {
                    s.create(&format!("/p/{round}/{c}/{i}"), vec![0; 256]).await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("creates");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_caller_never_waits_for_more_writes() {
    let (_dir, s) = durable_store();
    for i in 0..40 {
        let key = format!("/p/{i:02}");
        let rev = s.create(&key, b"v".to_vec()).await.expect("create");
        s.update(&key, b"w".to_vec(), rev).await.expect("update");
    }
    assert_eq!(commits(&s), (80, 0), "a commit each, none after a wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_from_several_callers_at_once_wait_to_share_a_commit() {
    let (_dir, s) = durable_store();
    let s = Arc::new(s);
    // A batch waits when a write arrived while the last one was being committed; when one
    // does is the scheduler's doing, so up to ten rounds of 16 callers.
    for round in 0..10 {
        callers_at_once(&s, round, 16, 20).await;
        let (at_once, waited) = commits(&s);
        assert_eq!(s.current_rev(), (round as u64 + 1) * 320, "every write committed");
        if waited > 0 {
            assert!(at_once + waited < s.current_rev(), "commits shared: {:?}", commits(&s));
            return;
        }
    }
    panic!("no batch waited in ten rounds of 16 callers writing at once: {:?}", commits(&s));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_that_does_not_sync_never_waits() {
    let s = Arc::new(fast_store(Config::default()));
    callers_at_once(&s, 0, 16, 20).await;
    let (at_once, waited) = commits(&s);
    assert_eq!((s.current_rev(), waited), (320, 0));
    assert!(at_once > 0 && at_once <= 320, "{at_once}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_with_the_same_expected_revision_have_one_winner() {
    let (_dir, s) = durable_store();
    let s = Arc::new(s);
    let r = s.create("/p/a", b"0".to_vec()).await.expect("create");
    let tasks: Vec<_> = (0..50u8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.update("/p/a", vec![i], r).await })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(rev) => {
                wins += 1;
                assert_eq!(rev, r + 1);
            }
            Err(e) => assert_eq!(e, Error::Conflict { key: "/p/a".into(), current_rev: r + 1 }),
        }
    }
    assert_eq!(wins, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_sqlite_rejects_fails_alone_and_leaves_nothing_behind() {
    let (dir, s) = durable_store();
    let path = dir.path().join("kustos.db");
    // Fail the second statement of a create (the `cur` insert, after the `kv` row went in).
    Connection::open(&path)
        .expect("open raw")
        .execute_batch(
            "CREATE TRIGGER inject BEFORE INSERT ON cur WHEN NEW.key = '/p/bad' \
             BEGIN SELECT RAISE(ABORT, 'injected'); END;",
        )
        .expect("trigger");
    let s = Arc::new(s);
    let tasks: Vec<_> = ["/p/a", "/p/bad", "/p/b", "/p/c"]
        .into_iter()
        .map(|k| {
            let s = s.clone();
            tokio::spawn(async move { (k, s.create(k, b"v".to_vec()).await) })
        })
        .collect();
    let mut revs = Vec::new();
    for t in tasks {
        match t.await.expect("task") {
            ("/p/bad", res) => assert!(matches!(res, Err(Error::Backend(_))), "{res:?}"),
            (k, res) => revs.push(res.unwrap_or_else(|e| panic!("{k}: {e}"))),
        }
    }
    revs.sort_unstable();
    assert_eq!(revs, [1, 2, 3]);
    assert_eq!(s.get("/p/bad").await.expect("get"), None);
    assert!(raw_rows(&path).iter().all(|r| r.1 != "/p/bad"));
    assert_eq!(s.create("/p/d", Vec::new()).await, Ok(4));
}

/// A batch whose commit fails drops every value the reads kept: what the file holds is read
/// again, and writes after it are kept again.
#[tokio::test]
async fn a_failed_commit_drops_the_values_kept_for_reads() {
    let (dir, s) = durable_store();
    let file = Connection::open(dir.path().join("kustos.db")).expect("open raw");
    let a = s.create("/p/a", b"a1".to_vec()).await.expect("create");
    s.create("/p/b", b"b1".to_vec()).await.expect("create");
    assert!(s.shared.current.get("/p/a").is_some() && s.shared.current.get("/p/b").is_some());
    // The batch's last statement, the revision's record, fails: the whole batch is undone.
    file.execute_batch(
        "CREATE TRIGGER inject BEFORE UPDATE ON meta WHEN NEW.name = 'rev' \
         BEGIN SELECT RAISE(ABORT, 'injected'); END;",
    )
    .expect("trigger");
    assert!(matches!(s.update("/p/a", b"a2".to_vec(), a).await, Err(Error::Backend(_))));
    assert!(s.shared.current.get("/p/a").is_none() && s.shared.current.get("/p/b").is_none(), "nothing kept");
    assert_eq!(s.get("/p/a").await.expect("get").map(|kv| kv.value), Some(b"a1".to_vec()));
    file.execute_batch("DROP TRIGGER inject").expect("drop trigger");
    let a2 = s.update("/p/a", b"a2".to_vec(), a).await.expect("update");
    let kept = s.shared.current.get("/p/a").map(|(kv, rev)| (kv.value, kv.mod_rev, rev));
    assert_eq!(kept, Some((b"a2".to_vec(), a2, a2)));
    assert_eq!(s.get("/p/a").await.expect("get").map(|kv| kv.value), Some(b"a2".to_vec()));
}

#[test]
fn acknowledged_writes_survive_a_kill_9_of_the_process() {
    use std::io::{BufRead, BufReader, Write};
    const CHILD: &str = "KUSTOS_SQLITE_CRASH_CHILD";
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    if let Ok(path) = std::env::var(CHILD) {
        // The child: write until killed, reporting each acknowledged write.
        rt.block_on(async {
            let s = SqliteStorage::open(Path::new(&path)).expect("open");
            let mut out = std::io::stdout();
            for i in 0.. {
                let rev = s.create(&format!("/p/{i:06}"), vec![7; 512]).await.expect("create");
                writeln!(out, "acked {i} {rev}").expect("stdout");
                out.flush().expect("flush");
            }
        });
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kustos.db");
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "storage::sqlite::tests::acknowledged_writes_survive_a_kill_9_of_the_process"])
        .arg("--nocapture")
        .env(CHILD, &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        let mut parts = line.split_whitespace();
        if parts.next() != Some("acked") {
            continue;
        }
        let i: u32 = parts.next().and_then(|p| p.parse().ok()).expect("index");
        let rev: Rev = parts.next().and_then(|p| p.parse().ok()).expect("rev");
        acked.push((i, rev));
        if acked.len() == 300 {
            child.kill().expect("SIGKILL");
            break;
        }
    }
    let _ = child.wait();
    assert_eq!(acked.len(), 300, "the child stopped early");
    rt.block_on(async {
        let s = SqliteStorage::open(&path).expect("reopen");
        for (i, rev) in &acked {
            let kv = s.get(&format!("/p/{i:06}")).await.expect("get");
            assert_eq!(kv.map(|kv| kv.mod_rev), Some(*rev), "acknowledged write {i} lost");
        }
        assert!(s.current_rev() >= acked.last().map(|a| a.1).unwrap_or(0));
    });
}

#[tokio::test]
async fn the_compactor_keeps_the_last_n_revisions() {
    let s = Arc::new(fast_store(Config::default()));
    let mut rev = s.create("/p/a", b"0".to_vec()).await.expect("create");
    for i in 1..30u32 {
        rev = s.update("/p/a", i.to_string().into_bytes(), rev).await.expect("update");
    }
    let task = SqliteStorage::spawn_compactor_every(s.clone(), 10, Duration::from_millis(10));
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.compacted_rev() != 20 {
        assert!(tokio::time::Instant::now() < deadline, "compactor did not run");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(s.list("/p/", ListOptions { at_rev: Some(20), ..Default::default() }).await.is_ok());
    drop(s);
    tokio::time::timeout(WAIT, task).await.expect("compactor ends with the store").expect("task");
}

#[tokio::test]
async fn a_throwaway_store_works_and_is_removed_on_drop() {
    let s = SqliteStorage::open_in_memory().expect("open");
    let dir = s.temp_dir.as_ref().map(|d| d.0.clone()).expect("temp dir");
    assert!(dir.exists());
    let r = s.create("/p/a", b"1".to_vec()).await.expect("create");
    assert_eq!(s.get("/p/a").await.expect("get").map(|kv| kv.mod_rev), Some(r));
    drop(s);
    assert!(!dir.exists());
}
