//! The real binary driven by kube-rs (kube 5, k8s-openapi 0.29) built from the admin
//! kubeconfig as is.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{shared_apiserver, Server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher;

const EVENT_WAIT: Duration = Duration::from_secs(20);

fn cm(name: &str, pairs: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        data: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()),
        ..Default::default()
    }
}

fn api_status(e: &kube::Error) -> Option<(u16, String)> {
    match e {
        kube::Error::Api(s) => Some((s.code, s.reason.clone())),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmaps_can_be_created_read_and_listed() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kcrud").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let created = api.create(&PostParams::default(), &cm("one", &[("a", "1")])).await.expect("create");
    assert!(created.metadata.uid.is_some(), "uid set");
    assert!(created.metadata.resource_version.is_some(), "RV set");
    let got = api.get("one").await.expect("get");
    assert_eq!(got.data, created.data);
    assert_eq!(got.metadata.uid, created.metadata.uid);
    api.create(&PostParams::default(), &cm("two", &[])).await.expect("create two");
    let list = api.list(&ListParams::default()).await.expect("list");
    let mut names: Vec<String> = list.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["one", "two"]);
    assert!(list.metadata.resource_version.is_some_and(|v| !v.is_empty()), "list RV");

    let err = api.get("missing").await.expect_err("get missing");
    assert_eq!(api_status(&err), Some((404, "NotFound".to_string())), "{err:?}");
    assert!(api.get_opt("missing").await.expect("get_opt").is_none());

    let namespaces: Api<Namespace> = Api::all(client);
    let all = namespaces.list(&ListParams::default()).await.expect("list namespaces");
    let names: Vec<String> = all.items.iter().filter_map(|n| n.metadata.name.clone()).collect();
    for want in ["default", "kube-system", "kube-public", "kube-node-lease", ns.as_str()] {
        assert!(names.iter().any(|n| n == want), "namespace {want} in {names:?}");
    }

    let del = api.delete("one", &DeleteParams::default()).await.expect("delete");
    drop(del);
    assert!(api.get_opt("one").await.expect("get_opt after delete").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_limit_pages_through_continue_tokens_at_one_resource_version() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kpage").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("p{i}"), &[])).await.expect("create");
    }
    let p1 = api.list(&ListParams::default().limit(2)).await.expect("page 1");
    assert_eq!(p1.items.len(), 2, "page 1 size");
    assert_eq!(p1.metadata.remaining_item_count, Some(3), "page 1 remainingItemCount");
    let rv = p1.metadata.resource_version.clone().expect("page 1 RV");
    let c1 = p1.metadata.continue_.clone().filter(|c| !c.is_empty()).expect("page 1 continue");

    // Created between pages: must not show up in later pages of this list.
    api.create(&PostParams::default(), &cm("p9-late", &[])).await.expect("create between pages");

    let p2 = api.list(&ListParams::default().limit(2).continue_token(&c1)).await.expect("page 2");
    assert_eq!(p2.items.len(), 2, "page 2 size");
    assert_eq!(p2.metadata.remaining_item_count, Some(1), "page 2 remainingItemCount");
    assert_eq!(p2.metadata.resource_version.as_deref(), Some(rv.as_str()), "same RV on every page");
    let c2 = p2.metadata.continue_.clone().filter(|c| !c.is_empty()).expect("page 2 continue");

    let p3 = api.list(&ListParams::default().limit(2).continue_token(&c2)).await.expect("page 3");
    assert_eq!(p3.items.len(), 1, "page 3 size");
    assert_eq!(p3.metadata.resource_version.as_deref(), Some(rv.as_str()), "same RV on every page");
    assert!(p3.metadata.continue_.as_deref().unwrap_or("").is_empty(), "last page has no continue");
    assert_eq!(p3.metadata.remaining_item_count, None, "last page has no remainingItemCount");

    let mut names: Vec<String> =
        p1.items.iter().chain(&p2.items).chain(&p3.items).filter_map(|c| c.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"], "every object exactly once, none created later");

    // With a label selector there is never a remainingItemCount.
    let sel = api.list(&ListParams::default().limit(2).labels("nothing-has-this")).await.expect("selected list");
    assert_eq!(sel.metadata.remaining_item_count, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_the_list_resource_version_sees_added_modified_deleted_in_order() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kwatch").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let rv = api.list(&ListParams::default()).await.expect("list").metadata.resource_version.expect("list RV");
    let mut stream = api.watch(&WatchParams::default().timeout(60), &rv).await.expect("watch").boxed();

    let mut obj = api.create(&PostParams::default(), &cm("w", &[("v", "1")])).await.expect("create");
    obj.data = Some([("v".to_string(), "2".to_string())].into());
    api.replace("w", &PostParams::default(), &obj).await.expect("replace");
    api.delete("w", &DeleteParams::default()).await.expect("delete");

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(EVENT_WAIT, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("no watch event within {EVENT_WAIT:?}; seen {seen:?}"))
            .expect("watch error")
            .expect("watch ended early");
        match ev {
            WatchEvent::Added(c) => seen.push(("ADDED", c.data.and_then(|d| d.get("v").cloned()))),
            WatchEvent::Modified(c) => seen.push(("MODIFIED", c.data.and_then(|d| d.get("v").cloned()))),
            WatchEvent::Deleted(c) => seen.push(("DELETED", c.data.and_then(|d| d.get("v").cloned()))),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error event: {e:?}"),
        }
    }
    assert_eq!(
        seen,
        [("ADDED", Some("1".into())), ("MODIFIED", Some("2".into())), ("DELETED", Some("2".into()))],
        "events in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumed_from_a_middle_resource_version_sees_only_later_events() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kresume").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let created = api.create(&PostParams::default(), &cm("r", &[("v", "1")])).await.expect("create");
    let rv1 = created.metadata.resource_version.clone().expect("RV");
    let mut next = created.clone();
    next.data = Some([("v".to_string(), "2".to_string())].into());
    let updated = api.replace("r", &PostParams::default(), &next).await.expect("replace");
    let rv2 = updated.metadata.resource_version.clone().expect("RV");
    api.delete("r", &DeleteParams::default()).await.expect("delete");

    let mut stream = api.watch(&WatchParams::default().timeout(60), &rv1).await.expect("watch from rv1").boxed();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let ev = tokio::time::timeout(EVENT_WAIT, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("no watch event within {EVENT_WAIT:?}; seen {seen:?}"))
            .expect("watch error")
            .expect("watch ended early");
        match ev {
            WatchEvent::Added(c) => seen.push(("ADDED", c.metadata.resource_version)),
            WatchEvent::Modified(c) => seen.push(("MODIFIED", c.metadata.resource_version)),
            WatchEvent::Deleted(c) => seen.push(("DELETED", c.metadata.resource_version)),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error event: {e:?}"),
        }
    }
    assert_eq!(seen[0], ("MODIFIED", Some(rv2.clone())), "first event after rv1 is the update; seen {seen:?}");
    assert_eq!(seen[1].0, "DELETED", "then the delete; seen {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_with_a_stale_resource_version_is_a_409_conflict() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kcas").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let created = api.create(&PostParams::default(), &cm("c", &[("v", "1")])).await.expect("create");
    let mut first = created.clone();
    first.data = Some([("v".to_string(), "2".to_string())].into());
    api.replace("c", &PostParams::default(), &first).await.expect("replace at the current RV");
    let mut stale = created.clone();
    stale.data = Some([("v".to_string(), "3".to_string())].into());
    let err = api.replace("c", &PostParams::default(), &stale).await.expect_err("replace with a stale RV");
    assert_eq!(api_status(&err), Some((409, "Conflict".to_string())), "{err:?}");
    let got = api.get("c").await.expect("get");
    assert_eq!(got.data.and_then(|d| d.get("v").cloned()).as_deref(), Some("2"));
}

/// A server keeping 5 revisions of history, compacted every 200 ms: after 30 writes an exact
/// list and a watch at revision 1 get a 410 Expired Status (on both storage backends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_watches_from_a_compacted_resource_version_are_410_expired() {
    // A server that keeps only 5 revisions of history and compacts every 200 ms.
    let s = Server::apiserver_with(&["--history-revisions", "5", "--compaction-interval", "200ms"]);
    let client = s.kube_client().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..30 {
        api.create(&PostParams::default(), &cm(&format!("o{i}"), &[])).await.expect("create");
    }
    let lp = ListParams {
        resource_version: Some("1".into()),
        version_match: Some(VersionMatch::Exact),
        limit: Some(1),
        ..Default::default()
    };
    // Compaction runs in the background: wait (bounded) until revision 1 is gone.
    let mut last = None;
    for _ in 0..100 {
        match api.list(&lp).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    let e = last.expect("an Exact list at revision 1 must fail once history before it is compacted");
    let (code, reason) = api_status(&e).unwrap_or_else(|| panic!("expected a Status error, got {e:?}"));
    assert_eq!((code, reason.as_str()), (410, "Expired"), "{e:?}");

    match api.watch(&WatchParams::default().timeout(5), "1").await {
        Ok(stream) => {
            let mut stream = stream.boxed();
            let first = tokio::time::timeout(EVENT_WAIT, stream.try_next()).await.expect("an event");
            match first {
                Ok(Some(WatchEvent::Error(st))) => {
                    assert_eq!((st.code, st.reason.as_str()), (410, "Expired"), "{st:?}")
                }
                Err(e) => assert_eq!(api_status(&e).map(|x| x.0), Some(410), "{e:?}"),
                other => panic!("a watch from a compacted revision must end with 410, got {other:?}"),
            }
        }
        Err(e) => assert_eq!(api_status(&e).map(|x| x.0), Some(410), "{e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_watcher_delivers_an_object_created_after_it_started() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kwr").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    api.create(&PostParams::default(), &cm("before", &[])).await.expect("create before");
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut init_seen = Vec::new();
    loop {
        let ev = tokio::time::timeout(EVENT_WAIT, stream.try_next())
            .await
            .expect("watcher init within the bound")
            .expect("watcher error")
            .expect("watcher ended");
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(c) => init_seen.push(c.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event during init: {other:?}"),
        }
    }
    assert_eq!(init_seen, ["before"], "initial list");
    api.create(&PostParams::default(), &cm("after", &[("x", "y")])).await.expect("create after");
    for _ in 0..100 {
        let ev = tokio::time::timeout(EVENT_WAIT, stream.try_next())
            .await
            .expect("an event within the bound")
            .expect("watcher error")
            .expect("watcher ended");
        if let watcher::Event::Apply(c) = ev {
            if c.metadata.name.as_deref() == Some("after") {
                assert_eq!(c.data.and_then(|d| d.get("x").cloned()).as_deref(), Some("y"));
                return;
            }
        }
    }
    panic!("watcher never delivered the object created after it started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_watcher_with_streaming_lists_sees_existing_and_new_objects() {
    let s = shared_apiserver();
    let client = s.kube_client().await;
    let ns = s.create_namespace("kws").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    api.create(&PostParams::default(), &cm("s1", &[])).await.expect("create");
    let mut stream = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        let ev = tokio::time::timeout(EVENT_WAIT, stream.try_next())
            .await
            .expect("streaming-list init within the bound")
            .expect("watcher error")
            .expect("watcher ended");
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(c) => init.push(c.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event during init: {other:?}"),
        }
    }
    assert_eq!(init, ["s1"]);
    api.create(&PostParams::default(), &cm("s2", &[])).await.expect("create");
    for _ in 0..100 {
        let ev = tokio::time::timeout(EVENT_WAIT, stream.try_next())
            .await
            .expect("an event within the bound")
            .expect("watcher error")
            .expect("watcher ended");
        if let watcher::Event::Apply(c) = ev {
            if c.metadata.name.as_deref() == Some("s2") {
                return;
            }
        }
    }
    panic!("streaming watcher never delivered s2");
}
