//! List (selectors, paging, expired continue tokens) and watch (start revisions, bookmarks,
//! selector transitions, expired revisions) through the whole request path.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Caller, TestServer, Watch};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// How long a watch must stay quiet to count as having said everything for now.
const QUIET: Duration = Duration::from_millis(300);

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}})
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn summary(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

async fn seeded() -> TestServer {
    let srv = TestServer::new().await.unwrap();
    for (name, tier, env) in [("a", "web", "prod"), ("b", "web", "dev"), ("c", "db", "prod"), ("d", "db", "dev")] {
        let r = srv.post(&Caller::admin(), CMS, &cm(name, json!({"tier": tier, "env": env}))).await;
        assert_eq!(r.status, 201, "{r}");
    }
    srv
}

#[tokio::test]
async fn list_selectors_table() {
    let srv = seeded().await;
    // Query → the names listed, or the error code.
    type Want = Result<&'static [&'static str], u16>;
    let cases: &[(&str, &str, Want)] = &[
        ("no selector", "", Ok(&["a", "b", "c", "d"])),
        ("label equality", "labelSelector=tier%3Dweb", Ok(&["a", "b"])),
        ("label inequality", "labelSelector=tier!%3Dweb", Ok(&["c", "d"])),
        ("label set", "labelSelector=env+in+(dev)", Ok(&["b", "d"])),
        ("labels together", "labelSelector=tier%3Ddb,env%3Dprod", Ok(&["c"])),
        ("label exists", "labelSelector=nothere", Ok(&[])),
        ("field name", "fieldSelector=metadata.name%3Db", Ok(&["b"])),
        ("field name not", "fieldSelector=metadata.name!%3Db", Ok(&["a", "c", "d"])),
        ("field and label", "fieldSelector=metadata.name!%3Da&labelSelector=env%3Dprod", Ok(&["c"])),
        ("unknown field", "fieldSelector=spec.nothing%3Dx", Err(400)),
        ("bad label selector", "labelSelector=a%3D%3D%3Db", Err(400)),
    ];
    for (name, query, want) in cases {
        let r = srv.get(&Caller::admin(), &format!("{CMS}?{query}")).await;
        match want {
            Ok(items) => {
                assert_eq!(r.status, 200, "{name}: {r}");
                assert_eq!(r.body["kind"], "ConfigMapList", "{name}");
                assert_eq!(names(&r.body), *items, "{name}");
            }
            Err(code) => {
                assert_eq!(r.status.as_u16(), *code, "{name}: {r}");
                assert_eq!(r.body["kind"], "Status", "{name}: {r}");
            }
        }
    }
}

#[tokio::test]
async fn limit_and_continue_page_through_one_snapshot() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let first = srv.get(&admin, &format!("{CMS}?limit=3")).await;
    assert_eq!(first.status, 200, "{first}");
    assert_eq!(names(&first.body), ["a", "b", "c"]);
    assert_eq!(first.body["metadata"]["remainingItemCount"], 1, "{first}");
    let token = first.body["metadata"]["continue"].as_str().unwrap().to_string();
    // Written after the first page: not in the snapshot the pages come from.
    assert_eq!(srv.post(&admin, CMS, &cm("e", json!({}))).await.status, 201);
    let second = srv.get(&admin, &format!("{CMS}?limit=3&continue={token}")).await;
    assert_eq!(second.status, 200, "{second}");
    assert_eq!(names(&second.body), ["d"], "the snapshot of the first page");
    assert!(second.body["metadata"].get("continue").is_none(), "last page: {second}");
    assert_eq!(second.resource_version(), first.resource_version());

    let cases = [
        ("garbage token", "continue=not-a-token".to_string(), 400),
        ("continue with resourceVersion", format!("continue={token}&resourceVersion=5"), 400),
        ("negative limit ignored", "limit=-1".to_string(), 200),
    ];
    for (name, query, code) in cases {
        let r = srv.get(&admin, &format!("{CMS}?{query}")).await;
        assert_eq!(r.status.as_u16(), code, "{name}: {r}");
    }
}

#[tokio::test]
async fn an_old_continue_token_is_expired_with_a_fresh_token() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let first = srv.get(&admin, &format!("{CMS}?limit=2")).await;
    let token = first.body["metadata"]["continue"].as_str().unwrap().to_string();
    for i in 0..3 {
        assert_eq!(srv.post(&admin, CMS, &cm(&format!("later{i}"), json!({}))).await.status, 201);
    }
    let store = &srv.state.storage;
    store.compact(store.current_rev()).await.unwrap();
    let r = srv.get(&admin, &format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(r.status, 410, "{r}");
    assert_eq!(r.reason(), "Expired");
    let fresh = r.body["metadata"]["continue"].as_str().expect("a fresh continue token").to_string();
    let rest = srv.get(&admin, &format!("{CMS}?limit=100&continue={fresh}")).await;
    assert_eq!(rest.status, 200, "{rest}");
    assert_eq!(names(&rest.body), ["c", "d", "later0", "later1", "later2"], "the rest, at the current revision");
}

async fn open(srv: &TestServer, query: &str) -> Watch {
    match srv.watch(&Caller::admin(), &format!("{CMS}?watch=1&{query}")).await {
        Ok(w) => w,
        Err(r) => panic!("watch {query}: {r}"),
    }
}

#[tokio::test]
async fn watch_without_a_revision_starts_with_the_current_objects() {
    let srv = seeded().await;
    let mut w = open(&srv, "labelSelector=tier%3Dweb").await;
    let initial = w.drain(QUIET, 10).await;
    let mut got = summary(&initial);
    got.sort();
    assert_eq!(got, [("ADDED".into(), "a".into()), ("ADDED".into(), "b".into())]);
}

#[tokio::test]
async fn watch_from_a_revision_sends_the_changes_after_it() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let list = srv.get(&admin, CMS).await;
    let rv = list.resource_version().to_string();
    // Changes after the list, made before the watch opens: replayed from history.
    assert_eq!(srv.post(&admin, CMS, &cm("e", json!({"tier": "web"}))).await.status, 201);
    let r = srv.patch(&admin, &format!("{CMS}/a"), "application/merge-patch+json", &json!({"data": {"k": "v"}})).await;
    assert_eq!(r.status, 200, "{r}");
    let mut w = open(&srv, &format!("resourceVersion={rv}")).await;
    assert_eq!(srv.delete(&admin, &format!("{CMS}/b"), None).await.status, 200);
    let events = w.drain(QUIET, 10).await;
    assert_eq!(
        summary(&events),
        [("ADDED".into(), "e".into()), ("MODIFIED".into(), "a".into()), ("DELETED".into(), "b".into())]
    );
    let rvs: Vec<u64> =
        events.iter().filter_map(|e| e["object"]["metadata"]["resourceVersion"].as_str()?.parse().ok()).collect();
    assert!(rvs.windows(2).all(|p| p[0] < p[1]), "increasing resourceVersions: {rvs:?}");
}

#[tokio::test]
async fn watch_under_a_selector_sees_objects_enter_and_leave() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let rv = srv.get(&admin, CMS).await.resource_version().to_string();
    let mut w = open(&srv, &format!("resourceVersion={rv}&labelSelector=tier%3Dweb")).await;
    let relabel = |tier: &str| json!({"metadata": {"labels": {"tier": tier}}});
    let merge = "application/merge-patch+json";
    assert_eq!(srv.patch(&admin, &format!("{CMS}/c"), merge, &relabel("web")).await.status, 200);
    assert_eq!(srv.patch(&admin, &format!("{CMS}/a"), merge, &relabel("db")).await.status, 200);
    assert_eq!(srv.patch(&admin, &format!("{CMS}/d"), merge, &relabel("cache")).await.status, 200);
    let events = w.drain(QUIET, 10).await;
    assert_eq!(summary(&events), [("ADDED".into(), "c".into()), ("DELETED".into(), "a".into())]);
}

#[tokio::test]
async fn send_initial_events_ends_with_a_bookmark() {
    let srv = seeded().await;
    let mut w = open(
        &srv,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&labelSelector=env%3Dprod",
    )
    .await;
    let events = w.drain(QUIET, 10).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "BOOKMARK"], "{events:?}");
    let bookmark = &events[2]["object"];
    assert_eq!(bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "{bookmark}");
    assert!(!bookmark["metadata"]["resourceVersion"].as_str().unwrap_or_default().is_empty(), "{bookmark}");
    // The end bookmark is the point changes follow from.
    let admin = Caller::admin();
    assert_eq!(srv.post(&admin, CMS, &cm("e", json!({"env": "prod"}))).await.status, 201);
    assert_eq!(summary(&w.drain(QUIET, 10).await), [("ADDED".into(), "e".into())]);
}

#[tokio::test]
async fn watch_parameters_that_are_refused() {
    let srv = seeded().await;
    let cases = [
        ("sendInitialEvents without NotOlderThan", "sendInitialEvents=true", 422),
        ("resourceVersionMatch without sendInitialEvents", "resourceVersionMatch=NotOlderThan", 422),
        ("unsupported resourceVersionMatch", "sendInitialEvents=true&resourceVersionMatch=Exact", 422),
        ("bad resourceVersion", "resourceVersion=abc", 400),
        ("bad allowWatchBookmarks", "allowWatchBookmarks=maybe", 400),
    ];
    for (name, query, code) in cases {
        match srv.watch(&Caller::admin(), &format!("{CMS}?watch=1&{query}")).await {
            Ok(_) => panic!("{name}: the watch opened"),
            Err(r) => {
                assert_eq!(r.status.as_u16(), code, "{name}: {r}");
                assert_eq!(r.body["kind"], "Status", "{name}: {r}");
            }
        }
    }
}

#[tokio::test]
async fn watch_from_a_compacted_revision_is_expired() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let old = srv.get(&admin, CMS).await.resource_version().to_string();
    for i in 0..3 {
        assert_eq!(srv.post(&admin, CMS, &cm(&format!("later{i}"), json!({}))).await.status, 201);
    }
    let store = &srv.state.storage;
    store.compact(store.current_rev()).await.unwrap();
    let mut w = open(&srv, &format!("resourceVersion={old}")).await;
    let event = w.next().await.expect("an ERROR event");
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!(event["object"]["code"], 410, "{event}");
    assert_eq!(event["object"]["reason"], "Expired", "{event}");
    assert!(w.next_within(QUIET).await.is_none(), "the watch ends after the error");
}

/// client-go's metadata informers (garbage collector, namespace controller) watch with this,
/// less its first (protobuf) range: the JSON form (the protobuf one is
/// `metadata_watch_as_protobuf_sends_protobuf_frames`).
const METADATA_ACCEPT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

#[tokio::test]
async fn metadata_watch_sends_partial_object_metadata() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let rv = srv.get(&admin, CMS).await.resource_version().to_string();
    let path = format!("{CMS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true");
    let mut w = match srv.watch_accepting(&admin, &path, METADATA_ACCEPT).await {
        Ok(w) => w,
        Err(r) => panic!("metadata watch: {r}"),
    };
    let created = srv.post(&admin, CMS, &cm("e", json!({"tier": "web"}))).await;
    assert_eq!(created.status, 201, "{created}");
    let patched =
        srv.patch(&admin, &format!("{CMS}/a"), "application/merge-patch+json", &json!({"data": {"k": "v"}})).await;
    assert_eq!(patched.status, 200, "{patched}");
    let deleted = srv.delete(&admin, &format!("{CMS}/b"), None).await;
    assert_eq!(deleted.status, 200, "{deleted}");
    let events = w.drain(QUIET, 10).await;
    assert_eq!(
        summary(&events),
        [("ADDED".into(), "e".into()), ("MODIFIED".into(), "a".into()), ("DELETED".into(), "b".into())]
    );
    let write_rvs = [created.resource_version(), patched.resource_version()];
    for (event, want_rv) in events.iter().zip(write_rvs) {
        assert_eq!(event["object"]["metadata"]["resourceVersion"], want_rv, "{event}");
    }
    // A delete's event carries the revision of the delete, past the patch.
    let delete_rv: u64 =
        events[2]["object"]["metadata"]["resourceVersion"].as_str().unwrap_or("0").parse().unwrap_or(0);
    assert!(delete_rv > patched.resource_version().parse().unwrap_or(u64::MAX), "{}", events[2]);
    for event in &events {
        let object = event["object"].as_object().expect("an object");
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["apiVersion", "kind", "metadata"], "metadata only: {event}");
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata", "{event}");
        assert_eq!(event["object"]["apiVersion"], "meta.k8s.io/v1", "{event}");
        assert_eq!(event["object"]["metadata"]["namespace"], "default", "{event}");
        assert!(!event["object"]["metadata"]["uid"].as_str().unwrap_or_default().is_empty(), "{event}");
    }
    assert_eq!(events[0]["object"]["metadata"]["labels"], json!({"tier": "web"}), "{}", events[0]);
}

#[tokio::test]
async fn metadata_watch_initial_events_and_bookmark() {
    let srv = seeded().await;
    let path = format!(
        "{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&labelSelector=env%3Dprod"
    );
    let accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
    let mut w = match srv.watch_accepting(&Caller::admin(), &path, accept).await {
        Ok(w) => w,
        Err(r) => panic!("metadata watch: {r}"),
    };
    let events = w.drain(QUIET, 10).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "BOOKMARK"], "{events:?}");
    for event in &events {
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata", "{event}");
        assert_eq!(event["object"]["apiVersion"], "meta.k8s.io/v1beta1", "{event}");
        assert!(event["object"].get("data").is_none(), "{event}");
    }
    let bookmark = &events[2]["object"]["metadata"];
    assert_eq!(bookmark["annotations"]["k8s.io/initial-events-end"], "true", "{bookmark}");
    assert!(!bookmark["resourceVersion"].as_str().unwrap_or_default().is_empty(), "{bookmark}");
}

/// client-go's metadata informers ask for protobuf first: every event is a protobuf frame
/// carrying a `PartialObjectMetadata`.
#[tokio::test]
async fn metadata_watch_as_protobuf_sends_protobuf_frames() {
    use http_body_util::BodyExt as _;
    let srv = seeded().await;
    let accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let req = http::Request::builder()
        .uri(format!("{CMS}?watch=1&labelSelector=tier%3Dweb"))
        .header(http::header::ACCEPT, accept)
        .body(axum::body::Body::empty())
        .unwrap_or_else(|e| panic!("building the request: {e}"));
    let resp = srv.send(&Caller::admin(), req).await;
    assert_eq!(resp.status(), 200);
    let ctype = resp.headers().get(http::header::CONTENT_TYPE).map(|v| v.as_bytes().to_vec());
    assert_eq!(ctype.as_deref(), Some(crate::wire::protobuf::WATCH_MEDIA_TYPE.as_bytes()));
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    for _ in 0..20 {
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let frame: Vec<u8> = buf.drain(..4 + len).collect();
            events.push(crate::wire::protobuf::decode_watch_event(&frame[4..]).expect("a protobuf watch event"));
        }
        if events.len() >= 2 {
            break;
        }
        match tokio::time::timeout(Watch::WAIT, body.frame()).await {
            Ok(Some(Ok(f))) => buf.extend_from_slice(f.data_ref().map(|d| d.as_ref()).unwrap_or_default()),
            other => panic!("the watch ended early: {other:?}"),
        }
    }
    assert_eq!(events.len(), 2, "{events:?}");
    for (ty, obj) in &events {
        assert_eq!(ty, "ADDED");
        assert_eq!(obj["kind"], "PartialObjectMetadata", "{obj}");
        assert_eq!(obj["apiVersion"], "meta.k8s.io/v1", "{obj}");
        assert_eq!(obj["metadata"]["labels"]["tier"], "web", "{obj}");
        assert!(obj.get("data").is_none(), "{obj}");
    }
}

/// GET and LIST answer `PartialObjectMetadata` in the meta.k8s.io version asked for, as the
/// watch does.
#[tokio::test]
async fn metadata_get_and_list_answer_the_version_asked() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let names = srv.get(&admin, CMS).await;
    let Some(first) = names.body["items"][0]["metadata"]["name"].as_str() else { panic!("no ConfigMaps: {names}") };
    let cases = [
        (format!("{CMS}/{first}"), "v1", "PartialObjectMetadata"),
        (format!("{CMS}/{first}"), "v1beta1", "PartialObjectMetadata"),
        (CMS.to_string(), "v1", "PartialObjectMetadataList"),
        (CMS.to_string(), "v1beta1", "PartialObjectMetadataList"),
    ];
    for (path, version, kind) in cases {
        let accept = format!("application/json;as={kind};g=meta.k8s.io;v={version}");
        let req = http::Request::builder()
            .uri(&path)
            .header(http::header::ACCEPT, accept.as_str())
            .body(axum::body::Body::empty())
            .unwrap_or_else(|e| panic!("building the request: {e}"));
        let r = super::read(srv.send(&admin, req).await).await;
        assert_eq!(r.status, 200, "{accept}: {r}");
        assert_eq!(r.body["kind"], kind, "{accept}: {r}");
        let want = format!("meta.k8s.io/{version}");
        assert_eq!(r.body["apiVersion"], want.as_str(), "{accept}: {r}");
        for item in r.body["items"].as_array().into_iter().flatten() {
            assert_eq!(item["apiVersion"], want.as_str(), "{accept}: {item}");
        }
    }
}

/// As upstream: a GET cannot be answered as `PartialObjectMetadataList`, nor a LIST as
/// `PartialObjectMetadata` (406), when the client named only that form.
#[tokio::test]
async fn metadata_forms_must_match_object_or_list() {
    let srv = seeded().await;
    let admin = Caller::admin();
    let names = srv.get(&admin, CMS).await;
    let Some(first) = names.body["items"][0]["metadata"]["name"].as_str() else { panic!("no ConfigMaps: {names}") };
    let cases = [
        (format!("{CMS}/{first}"), "PartialObjectMetadataList", "is not a list (ConfigMap)"),
        (CMS.to_string(), "PartialObjectMetadata", "is a list (ConfigMapList)"),
    ];
    for (path, kind, says) in cases {
        let accept = format!("application/json;as={kind};g=meta.k8s.io;v=v1");
        let req = http::Request::builder()
            .uri(&path)
            .header(http::header::ACCEPT, accept.as_str())
            .body(axum::body::Body::empty())
            .unwrap_or_else(|e| panic!("building the request: {e}"));
        let r = super::read(srv.send(&admin, req).await).await;
        assert_eq!(r.status, 406, "{accept} on {path}: {r}");
        assert_eq!(r.body["reason"], "NotAcceptable", "{r}");
        let message = r.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(says) && message.contains(kind), "{message}");
    }
}
