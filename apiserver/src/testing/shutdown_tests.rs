//! A stopped server ends every loop it started and, once dropped, leaves nothing holding
//! its state.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::TestServer;
use crate::flowcontrol::dispatcher::{FlowControl, MAX_QUEUE_WAIT};
use crate::AppState;

/// A server with the loops `start` runs on the state (CRDs, flow control), and its state, weakly.
async fn server() -> (TestServer, Weak<AppState>) {
    let srv = TestServer::new().await.unwrap();
    let state = &srv.state;
    let changes = crate::flowcontrol::feed::spawn(&state.tasks, state.loopback());
    crate::flowcontrol::maintain::spawn(
        &state.tasks,
        state.loopback(),
        crate::flowcontrol::maintain::PERIOD,
        changes.clone(),
    );
    crate::flowcontrol::spawn(&state.tasks, state.loopback(), FlowControl::new(100, MAX_QUEUE_WAIT), changes);
    let weak = Arc::downgrade(&srv.state);
    (srv, weak)
}

/// Whether `weak` is freed within a bounded number of short waits (no timing asserted).
async fn freed(weak: &Weak<AppState>) -> bool {
    for _ in 0..500 {
        if weak.upgrade().is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    weak.upgrade().is_none()
}

#[tokio::test]
async fn a_stopped_and_dropped_server_ends_its_loops_and_frees_its_state() {
    let (srv, weak) = server().await;
    let tasks = srv.state.tasks.clone();
    // Let every loop reach its first wait (a watch, a tick).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        tasks.running(),
        [
            "bootstrap-token-cache",
            "crds",
            "flowcontrol-config",
            "flowcontrol-maintain",
            "flowcontrol-rebalance",
            "flowcontrol-watch"
        ]
    );
    srv.stop().await;
    assert!(tasks.running().is_empty(), "{:?}", tasks.running());
    assert!(freed(&weak).await, "the AppState is still held {} times", weak.strong_count());
    let text = tasks.encode();
    assert!(!text.contains("} 1"), "a loop ended as a failure:\n{text}");
}

#[tokio::test]
async fn a_dropped_server_frees_its_state_without_being_stopped() {
    let (srv, weak) = server().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(srv);
    assert!(freed(&weak).await, "the AppState is still held {} times", weak.strong_count());
}

/// A namespace whose content someone else's finalizer holds: its clean-up job pauses and
/// tries again, and a watch stays open; neither keeps a dropped server's state.
#[tokio::test]
async fn jobs_a_request_started_do_not_keep_a_dropped_server() {
    use super::Caller;
    use serde_json::json;
    let (srv, weak) = server().await;
    let admin = Caller::admin();
    let r = srv.post(&admin, "/api/v1/namespaces", &json!({"metadata": {"name": "held"}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let cm = json!({"metadata": {"name": "c", "finalizers": ["example.com/hold"]}});
    let r = srv.post(&admin, "/api/v1/namespaces/held/configmaps", &cm).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let watch = srv.watch(&admin, "/api/v1/namespaces/held/configmaps?watch=1").await;
    assert!(watch.is_ok(), "the watch opens");
    let r = srv.delete(&admin, "/api/v1/namespaces/held", None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The job deleted the config map (it stays, held by its finalizer) and pauses.
    let marked = srv
        .eventually(Duration::from_secs(20), || async {
            let r = srv.get(&admin, "/api/v1/namespaces/held/configmaps/c").await;
            r.body["metadata"]["deletionTimestamp"].is_string().then_some(())
        })
        .await;
    assert!(marked.is_some(), "the namespace's clean-up job ran");
    drop(watch);
    drop(srv);
    assert!(freed(&weak).await, "the AppState is still held {} times", weak.strong_count());
}
