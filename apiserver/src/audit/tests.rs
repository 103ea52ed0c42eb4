//! The audit middlewares on the in-process server: the stages of a watch, the `Audit-Id`
//! header, and (ignored, printed) the filter's cost per request.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::Request;
use serde_json::Value;
use tower::ServiceExt as _;

use super::{Auditor, Config};
use crate::testing::{Caller, TestServer};

fn auditor(dir: &std::path::Path, policy: &str) -> Arc<Auditor> {
    let policy_file = dir.join("policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let cfg = Config {
        policy_file: Some(policy_file),
        log_path: Some(dir.join("audit.log").to_string_lossy().into_owned()),
        ..Config::default()
    };
    Auditor::start(&cfg).unwrap().unwrap()
}

fn request(method: &str, path: &str, body: Option<&Value>) -> Request<Body> {
    let bearer = Caller::admin().bearer().unwrap();
    let b = Request::builder().method(method).uri(path).header("authorization", format!("Bearer {bearer}"));
    match body {
        Some(v) => b.header("content-type", "application/json").body(Body::from(v.to_string())).unwrap(),
        None => b.body(Body::empty()).unwrap(),
    }
}

async fn events(log: &std::path::Path, want: usize) -> Vec<Value> {
    for _ in 0..200 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let all: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if all.len() >= want {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("fewer than {want} events in the log");
}

#[tokio::test]
async fn a_watch_has_response_started_then_complete_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ts = TestServer::new().await.unwrap();
    let a = auditor(dir.path(), "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources: [{group: '', resources: [configmaps]}]\n");
    ts.state.audit.set(a).unwrap();
    let app = crate::router(ts.state.clone());
    let resp = app
        .clone()
        .oneshot(request("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1", None))
        .await
        .unwrap();
    let id = resp.headers().get("audit-id").unwrap().to_str().unwrap().to_string();
    let log = dir.path().join("audit.log");
    let started = events(&log, 2).await;
    let stages: Vec<&str> = started.iter().map(|e| e["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["RequestReceived", "ResponseStarted"]);
    assert!(started.iter().all(|e| e["auditID"] == id.as_str() && e["verb"] == "watch"));
    // The stream ends (timeoutSeconds): then ResponseComplete.
    let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
    let all = events(&log, 3).await;
    assert_eq!(all[2]["stage"], "ResponseComplete");
    assert_eq!(all[2]["auditID"], id.as_str());
    // A request the policy leaves out still has its header, and no event.
    let resp = app.oneshot(request("GET", "/api/v1/namespaces", None)).await.unwrap();
    assert!(resp.headers().contains_key("audit-id"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(events(&log, 3).await.len(), 3);
    ts.stop().await;
}
