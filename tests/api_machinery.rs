//! API machinery over raw HTTPS against the real binary: Status bodies, codes and reasons,
//! content negotiation, selectors, watch, deletion, authentication and health.
//!
//! Tests share one `kustos apiserver` (see `common::shared_apiserver`) and each works in namespaces of its own.

mod common;

use std::io::Read;
use std::time::Duration;

use base64::Engine;
use common::{assert_status, configmap, send, shared_apiserver, unique, Reply, WatchLines};
use serde_json::{json, Value};

const EVENT_WAIT: Duration = Duration::from_secs(20);

fn cms(url: &str, ns: &str) -> String {
    format!("{url}/api/v1/namespaces/{ns}/configmaps")
}

async fn create_cm(http: &reqwest::Client, url: &str, ns: &str, body: &Value) -> Value {
    let r = send(http.post(cms(url, ns)).json(body)).await;
    r.expect_code(201, "creating a ConfigMap");
    r.body
}

// ------------------------------------------------------------------ Status bodies

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_is_404_not_found_with_details_name() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("nf").await;
    let r = send(http.get(format!("{}/nope", cms(&s.url, &ns)))).await;
    assert_status(&r, 404, Some("NotFound"), "GET a missing configmap");
    assert_eq!(r.body["details"]["name"], "nope", "details.name: {}", r.text);
    assert_eq!(r.body["details"]["kind"], "configmaps", "details.kind is the plural resource: {}", r.text);
    let msg = r.body["message"].as_str().unwrap_or_default();
    assert!(msg.contains("configmaps \"nope\" not found"), "message: {msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_create_is_409_already_exists() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("dup").await;
    create_cm(&http, &s.url, &ns, &configmap("twice", json!({"a": "1"}))).await;
    let r = send(http.post(cms(&s.url, &ns)).json(&configmap("twice", json!({"a": "2"})))).await;
    assert_status(&r, 409, Some("AlreadyExists"), "second POST of the same name");
    assert_eq!(r.body["details"]["name"], "twice", "details.name: {}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_name_is_422_invalid_with_a_metadata_name_cause() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("inv").await;
    let r = send(http.post(cms(&s.url, &ns)).json(&configmap("Bad_Name", json!({})))).await;
    assert_status(&r, 422, Some("Invalid"), "POST a configmap named Bad_Name");
    let causes = r.body["details"]["causes"].as_array().cloned().unwrap_or_default();
    assert!(
        causes.iter().any(|c| c["field"] == "metadata.name"),
        "details.causes[].field should name metadata.name: {}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_with_a_stale_resource_version_conflicts_and_the_current_one_succeeds() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("cas").await;
    let created = create_cm(&http, &s.url, &ns, &configmap("cas", json!({"v": "0"}))).await;
    let rv0 = created["metadata"]["resourceVersion"].as_str().expect("create returns an RV").to_string();
    let url = format!("{}/cas", cms(&s.url, &ns));

    let mut next = created.clone();
    next["data"]["v"] = json!("1");
    let r1 = send(http.put(&url).json(&next)).await;
    r1.expect_code(200, "PUT with the current RV");
    let rv1 = r1.body["metadata"]["resourceVersion"].as_str().expect("PUT returns an RV").to_string();
    assert_ne!(rv0, rv1, "the RV changes on every write");
    assert_eq!(r1.body["data"]["v"], "1");

    // Same body again: its RV (rv0) is now stale.
    next["data"]["v"] = json!("2");
    let stale = send(http.put(&url).json(&next)).await;
    assert_status(&stale, 409, Some("Conflict"), "PUT with a stale RV");

    let got = send(http.get(&url)).await;
    got.expect_code(200, "GET after the conflict");
    assert_eq!(got.body["data"]["v"], "1", "a conflicting PUT changes nothing");
    assert_eq!(got.body["metadata"]["resourceVersion"], rv1.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_gives_a_longer_unique_name_with_that_prefix() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("gen").await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "web-"}});
    let a = create_cm(&http, &s.url, &ns, &body).await;
    let b = create_cm(&http, &s.url, &ns, &body).await;
    let an = a["metadata"]["name"].as_str().expect("a name").to_string();
    let bn = b["metadata"]["name"].as_str().expect("a name").to_string();
    assert!(an.starts_with("web-") && an.len() > 4, "generated name {an}");
    assert!(bn.starts_with("web-") && bn.len() > 4, "generated name {bn}");
    assert_ne!(an, bn, "two generateName creates get different names");
    send(http.get(format!("{}/{an}", cms(&s.url, &ns)))).await.expect_code(200, "GET the generated name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_ignores_a_client_sent_uid_and_creation_timestamp() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("meta").await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "meta",
        "uid": "11111111-2222-3333-4444-555555555555",
        "creationTimestamp": "2001-02-03T04:05:06Z",
    }});
    let r = send(http.post(cms(&s.url, &ns)).json(&body)).await;
    r.expect_code(201, "POST with client uid/creationTimestamp");
    let uid = r.body["metadata"]["uid"].as_str().unwrap_or_default();
    let ts = r.body["metadata"]["creationTimestamp"].as_str().unwrap_or_default();
    assert!(!uid.is_empty() && uid != "11111111-2222-3333-4444-555555555555", "server sets the uid: {}", r.text);
    assert!(ts.ends_with('Z') && !ts.starts_with("2001-"), "server sets creationTimestamp (RFC 3339 UTC): {ts}");
    assert!(r.body["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()), "RV set: {}", r.text);
    let got = send(http.get(format!("{}/meta", cms(&s.url, &ns)))).await;
    assert_eq!(got.body["metadata"]["uid"], uid, "stored uid is the server's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_create_answers_201_but_persists_nothing() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("dry").await;
    let r =
        send(http.post(format!("{}?dryRun=All", cms(&s.url, &ns))).json(&configmap("ghost", json!({"a": "b"})))).await;
    r.expect_code(201, "dryRun=All create");
    assert_eq!(r.body["metadata"]["name"], "ghost", "dry run returns the would-be object: {}", r.text);
    assert_eq!(r.body["data"]["a"], "b");
    let got = send(http.get(format!("{}/ghost", cms(&s.url, &ns)))).await;
    assert_status(&got, 404, Some("NotFound"), "GET after a dry-run create");

    let bad = send(http.post(format!("{}?dryRun=Some", cms(&s.url, &ns))).json(&configmap("ghost2", json!({})))).await;
    assert!(bad.code >= 400 && bad.code < 500, "dryRun=Some must be rejected, got {} {}", bad.code, bad.text);
    assert_status(&bad, bad.code, None, "dryRun=Some");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_are_rejected_under_strict_warned_by_default_and_dropped_under_ignore() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("fv").await;
    let with_unknown = |name: &str| {
        let mut b = configmap(name, json!({"k": "v"}));
        b["bogusField"] = json!("x");
        b
    };

    let strict =
        send(http.post(format!("{}?fieldValidation=Strict", cms(&s.url, &ns))).json(&with_unknown("strict"))).await;
    assert_status(&strict, 400, Some("BadRequest"), "unknown field under Strict");
    assert!(strict.text.contains("bogusField"), "Strict error names the field: {}", strict.text);
    let gone = send(http.get(format!("{}/strict", cms(&s.url, &ns)))).await;
    assert_eq!(gone.code, 404, "nothing created under Strict");

    let warn = send(http.post(cms(&s.url, &ns)).json(&with_unknown("warn"))).await;
    warn.expect_code(201, "unknown field under the default (Warn)");
    let warning = warn.header("warning").unwrap_or_default();
    assert!(warning.starts_with("299"), "Warning header is `299 - \"...\"`: {warning:?}");
    assert!(warning.contains("bogusField"), "Warning names the field: {warning:?}");
    assert!(warn.body.get("bogusField").is_none(), "unknown field is not stored: {}", warn.text);

    let ignore =
        send(http.post(format!("{}?fieldValidation=Ignore", cms(&s.url, &ns))).json(&with_unknown("ignore"))).await;
    ignore.expect_code(201, "unknown field under Ignore");
    assert!(ignore.header("warning").is_none(), "no Warning under Ignore: {:?}", ignore.header("warning"));
    let got = send(http.get(format!("{}/ignore", cms(&s.url, &ns)))).await;
    got.expect_code(200, "GET after Ignore");
    assert!(got.body.get("bogusField").is_none(), "unknown field is not stored: {}", got.text);
    assert_eq!(got.body["data"]["k"], "v");
}

// ------------------------------------------------------------------ patches

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_patch_with_a_failing_test_op_changes_nothing() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("jp").await;
    let created = create_cm(&http, &s.url, &ns, &configmap("jp", json!({"a": "1", "b": "2"}))).await;
    let url = format!("{}/jp", cms(&s.url, &ns));
    let patch = json!([
        {"op": "replace", "path": "/data/a", "value": "changed"},
        {"op": "test", "path": "/data/b", "value": "not-2"},
    ]);
    let r = send(http.patch(&url).header("Content-Type", "application/json-patch+json").body(patch.to_string())).await;
    assert_status(&r, 422, None, "JSON patch whose test op fails");
    let got = send(http.get(&url)).await;
    assert_eq!(got.body["data"], json!({"a": "1", "b": "2"}), "data unchanged: {}", got.text);
    assert_eq!(got.body["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"], "RV unchanged");

    // And a passing one applies every op.
    let ok = json!([
        {"op": "test", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "changed"},
    ]);
    let r = send(http.patch(&url).header("Content-Type", "application/json-patch+json").body(ok.to_string())).await;
    r.expect_code(200, "JSON patch whose test op passes");
    assert_eq!(r.body["data"], json!({"a": "changed", "b": "2"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_and_merge_patches_update_labels() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("smp").await;
    let mut body = configmap("lbl", json!({"x": "y"}));
    body["metadata"]["labels"] = json!({"a": "1", "b": "2"});
    create_cm(&http, &s.url, &ns, &body).await;
    let url = format!("{}/lbl", cms(&s.url, &ns));

    let smp = json!({"metadata": {"labels": {"c": "3", "a": null}}});
    let r =
        send(http.patch(&url).header("Content-Type", "application/strategic-merge-patch+json").body(smp.to_string()))
            .await;
    r.expect_code(200, "strategic merge patch");
    assert_eq!(r.body["metadata"]["labels"], json!({"b": "2", "c": "3"}), "SMP result: {}", r.text);
    assert_eq!(r.body["data"], json!({"x": "y"}), "SMP leaves data alone");

    let mp = json!({"metadata": {"labels": {"d": "4"}}, "data": {"x": null, "z": "w"}});
    let r = send(http.patch(&url).header("Content-Type", "application/merge-patch+json").body(mp.to_string())).await;
    r.expect_code(200, "merge patch");
    assert_eq!(r.body["metadata"]["labels"], json!({"b": "2", "c": "3", "d": "4"}));
    assert_eq!(r.body["data"], json!({"z": "w"}));
}

// ------------------------------------------------------------------ content types & limits

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_3_mib_is_413() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("big").await;
    let big = "x".repeat(3 * 1024 * 1024 + 512 * 1024);
    let body = configmap("big", json!({ "blob": big }));
    let r = send(http.post(cms(&s.url, &ns)).json(&body)).await;
    assert_status(&r, 413, Some("RequestEntityTooLarge"), "POST of a 3.5 MiB body");
    let got = send(http.get(format!("{}/big", cms(&s.url, &ns)))).await;
    assert_eq!(got.code, 404, "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_plain_post_is_415() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("ct").await;
    let r = send(
        http.post(cms(&s.url, &ns))
            .header("Content-Type", "text/plain")
            .body(configmap("plain", json!({})).to_string()),
    )
    .await;
    assert_status(&r, 415, Some("UnsupportedMediaType"), "POST with Content-Type text/plain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_and_requires_a_field_manager() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("ssa").await;
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: b\n";
    let r = send(
        http.patch(format!("{}/applied", cms(&s.url, &ns)))
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body),
    )
    .await;
    assert_status(&r, 422, Some("Invalid"), "apply patch without fieldManager");
    let r = send(
        http.patch(format!("{}/applied?fieldManager=e2e", cms(&s.url, &ns)))
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body),
    )
    .await;
    r.expect_code(201, "apply patch creating the object");
    assert_eq!(r.body["metadata"]["managedFields"][0]["manager"], "e2e", "{}", r.text);
    assert_eq!(r.body["metadata"]["managedFields"][0]["operation"], "Apply", "{}", r.text);
}

/// Protobuf answers are `tests/protobuf.rs`; a JSON-first Accept gets JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_first_accept_is_answered_in_json() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("acc").await;
    let url = cms(&s.url, &ns);
    let r = send(http.get(&url).header("Accept", "application/json, application/vnd.kubernetes.protobuf")).await;
    r.expect_code(200, "JSON first");
    assert_eq!(r.body["kind"], "ConfigMapList", "JSON body: {}", r.text);
    let ct = r.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("application/json"), "Content-Type: {ct}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_resource_is_404() {
    let s = shared_apiserver();
    let http = s.http();
    let r = send(http.get(format!("{}/api/v1/namespaces/default/widgets", s.url))).await;
    assert_status(&r, 404, Some("NotFound"), "GET an unknown resource");
    let r = send(http.get(format!("{}/apis/nosuch.example.com/v1/things", s.url))).await;
    assert_status(&r, 404, Some("NotFound"), "GET an unknown group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_verb_is_405() {
    let s = shared_apiserver();
    let http = s.http();
    // POST to a named object is not a verb on any resource.
    let r =
        send(http.post(format!("{}/api/v1/namespaces/default/configmaps/x", s.url)).json(&configmap("x", json!({}))))
            .await;
    assert_status(&r, 405, Some("MethodNotAllowed"), "POST to an object URL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_numeric_limit_is_400() {
    let s = shared_apiserver();
    let http = s.http();
    let r = send(http.get(format!("{}/api/v1/namespaces/default/configmaps?limit=abc", s.url))).await;
    assert_status(&r, 400, Some("BadRequest"), "limit=abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_version_match_without_resource_version_is_rejected_with_a_status() {
    let s = shared_apiserver();
    let http = s.http();
    let r = send(http.get(format!("{}/api/v1/namespaces/default/configmaps?resourceVersionMatch=NotOlderThan", s.url)))
        .await;
    assert!(r.code == 400 || r.code == 422, "expected 400 or 422, got {} {}", r.code, r.text);
    assert_status(&r, r.code, None, "resourceVersionMatch without resourceVersion");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_with_a_resource_version_is_400() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("cont").await;
    for i in 0..3 {
        create_cm(&http, &s.url, &ns, &configmap(&format!("c{i}"), json!({}))).await;
    }
    let p1 = send(http.get(format!("{}?limit=2", cms(&s.url, &ns)))).await;
    p1.expect_code(200, "first page");
    let token = p1.body["metadata"]["continue"].as_str().expect("a continue token").to_string();
    let r = send(http.get(cms(&s.url, &ns)).query(&[("limit", "2"), ("continue", &token), ("resourceVersion", "123")]))
        .await;
    assert_status(&r, 400, Some("BadRequest"), "continue together with resourceVersion");
}

// ------------------------------------------------------------------ lists

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_list_has_an_items_array_and_a_resource_version() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("empty").await;
    let r = send(http.get(cms(&s.url, &ns))).await;
    r.expect_code(200, "list an empty namespace");
    assert_eq!(r.body["kind"], "ConfigMapList");
    assert_eq!(r.body["apiVersion"], "v1");
    assert_eq!(r.body["items"], json!([]), "items must be [] (not null or missing): {}", r.text);
    assert!(r.body["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()), "list RV: {}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_all_namespaces_list_and_the_namespace_label() {
    let s = shared_apiserver();
    let http = s.http();
    let ns1 = s.create_namespace("alla").await;
    let ns2 = s.create_namespace("allb").await;
    create_cm(&http, &s.url, &ns1, &configmap("one", json!({}))).await;
    create_cm(&http, &s.url, &ns2, &configmap("two", json!({}))).await;
    let r = send(http.get(format!("{}/api/v1/configmaps", s.url))).await;
    r.expect_code(200, "list configmaps in all namespaces");
    let items = r.body["items"].as_array().cloned().unwrap_or_default();
    let has = |ns: &str, n: &str| items.iter().any(|i| i["metadata"]["namespace"] == ns && i["metadata"]["name"] == n);
    assert!(has(&ns1, "one") && has(&ns2, "two"), "both namespaces' items: {}", r.text);

    let d = send(http.get(format!("{}/api/v1/namespaces/default", s.url))).await;
    d.expect_code(200, "GET namespace default");
    assert_eq!(d.body["metadata"]["labels"]["kubernetes.io/metadata.name"], "default", "{}", d.text);
    for p in ["/api", "/apis", "/version", "/api/v1", "/apis/certificates.k8s.io/v1"] {
        send(http.get(format!("{}{p}", s.url))).await.expect_code(200, p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_accept_returns_a_table_with_columns_and_rows() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("tbl").await;
    create_cm(&http, &s.url, &ns, &configmap("t1", json!({"a": "1"}))).await;
    create_cm(&http, &s.url, &ns, &configmap("t2", json!({}))).await;
    let r = send(http.get(cms(&s.url, &ns)).header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")).await;
    r.expect_code(200, "Table list");
    assert_eq!(r.body["kind"], "Table", "{}", r.text);
    assert_eq!(r.body["apiVersion"], "meta.k8s.io/v1", "{}", r.text);
    let cols = r.body["columnDefinitions"].as_array().cloned().unwrap_or_default();
    assert!(!cols.is_empty(), "columnDefinitions: {}", r.text);
    assert_eq!(cols[0]["name"], "Name", "first column is Name: {}", r.text);
    for c in &cols {
        assert!(c["type"].is_string() && c["name"].is_string(), "column shape: {c}");
    }
    let rows = r.body["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 2, "one row per object: {}", r.text);
    let mut names: Vec<String> = rows
        .iter()
        .map(|row| {
            let cells = row["cells"].as_array().cloned().unwrap_or_default();
            assert_eq!(cells.len(), cols.len(), "one cell per column: {row}");
            assert_eq!(cells[0], row["object"]["metadata"]["name"], "Name cell matches the row object: {row}");
            assert_eq!(row["object"]["metadata"]["namespace"], ns.as_str(), "row object carries the namespace: {row}");
            cells[0].as_str().unwrap_or_default().to_string()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["t1", "t2"]);

    // The fallback list kubectl sends, and a single object.
    let r = send(
        http.get(format!("{}/t1", cms(&s.url, &ns))).header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
        ),
    )
    .await;
    r.expect_code(200, "Table get");
    assert_eq!(r.body["kind"], "Table", "{}", r.text);
    assert_eq!(r.body["rows"].as_array().map(|v| v.len()), Some(1), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selectors_filter_lists() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("lsel").await;
    for (name, app) in [("la", Some("a")), ("lb", Some("b")), ("ln", None)] {
        let mut b = configmap(name, json!({}));
        if let Some(app) = app {
            b["metadata"]["labels"] = json!({"app": app});
        }
        create_cm(&http, &s.url, &ns, &b).await;
    }
    let names = |r: &Reply| {
        let mut v: Vec<String> = r.body["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap_or_default().to_string())
            .collect();
        v.sort();
        v
    };
    for (sel, want) in [
        ("app=a", vec!["la"]),
        ("app==a", vec!["la"]),
        ("app!=a", vec!["lb", "ln"]),
        ("app in (a,b)", vec!["la", "lb"]),
        ("app notin (a)", vec!["lb", "ln"]),
        ("app", vec!["la", "lb"]),
        ("!app", vec!["ln"]),
        ("app=a,app=b", vec![]),
    ] {
        let r = send(http.get(cms(&s.url, &ns)).query(&[("labelSelector", sel)])).await;
        r.expect_code(200, sel);
        assert_eq!(names(&r), want, "labelSelector={sel}: {}", r.text);
    }
    let r = send(http.get(cms(&s.url, &ns)).query(&[("labelSelector", "app in (a")])).await;
    assert_status(&r, 400, Some("BadRequest"), "malformed labelSelector");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_filter_lists_and_unsupported_fields_are_400() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("fsel").await;
    create_cm(&http, &s.url, &ns, &configmap("f1", json!({}))).await;
    create_cm(&http, &s.url, &ns, &configmap("f2", json!({}))).await;
    let r = send(http.get(cms(&s.url, &ns)).query(&[("fieldSelector", "metadata.name=f2")])).await;
    r.expect_code(200, "fieldSelector metadata.name");
    let items = r.body["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{}", r.text);
    assert_eq!(items[0]["metadata"]["name"], "f2");
    let r = send(http.get(cms(&s.url, &ns)).query(&[("fieldSelector", "metadata.name!=f2")])).await;
    assert_eq!(r.body["items"].as_array().map(|v| v.len()), Some(1), "{}", r.text);
    let r = send(
        http.get(format!("{}/api/v1/configmaps", s.url))
            .query(&[("fieldSelector", format!("metadata.namespace={ns}"))]),
    )
    .await;
    assert_eq!(r.body["items"].as_array().map(|v| v.len()), Some(2), "metadata.namespace selector: {}", r.text);

    let secrets = format!("{}/api/v1/namespaces/{ns}/secrets", s.url);
    for (name, ty, data) in [
        ("opaque", "Opaque", json!({"k": "dg=="})),
        ("basic", "kubernetes.io/basic-auth", json!({"username": "dQ==", "password": "cA=="})),
    ] {
        let b = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": ty, "data": data});
        send(http.post(&secrets).json(&b)).await.expect_code(201, "create secret");
    }
    let r = send(http.get(&secrets).query(&[("fieldSelector", "type=kubernetes.io/basic-auth")])).await;
    r.expect_code(200, "secrets fieldSelector type");
    let items = r.body["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{}", r.text);
    assert_eq!(items[0]["metadata"]["name"], "basic");

    let r = send(http.get(cms(&s.url, &ns)).query(&[("fieldSelector", "data.foo=bar")])).await;
    assert_status(&r, 400, Some("BadRequest"), "unsupported field selector");
}

// ------------------------------------------------------------------ watch

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_with_timeout_seconds_ends_by_itself() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("wto").await;
    let mut w = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[("watch", "1"), ("timeoutSeconds", "2")])).await;
    assert_eq!(w.code, 200, "watch status");
    // Nothing exists, so the stream must simply end (bounded wait).
    for _ in 0..100 {
        match w.next(Duration::from_secs(30)).await {
            None => return,
            Some(ev) => assert_eq!(ev["type"], "BOOKMARK", "only bookmarks may arrive on an empty watch: {ev}"),
        }
    }
    panic!("watch did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_the_list_rv_sees_added_modified_deleted_in_order() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("wev").await;
    let list = send(http.get(cms(&s.url, &ns))).await;
    let rv = list.body["metadata"]["resourceVersion"].as_str().expect("list RV").to_string();
    let mut w = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[
        ("watch", "1"),
        ("resourceVersion", rv.as_str()),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    assert_eq!(w.code, 200);
    let ct = w.headers.get("content-type").map(|v| v.to_str().unwrap_or_default().to_string()).unwrap_or_default();
    assert!(ct.starts_with("application/json"), "watch Content-Type: {ct}");
    let created = create_cm(&http, &s.url, &ns, &configmap("w", json!({"v": "1"}))).await;
    let mut upd = created.clone();
    upd["data"]["v"] = json!("2");
    send(http.put(format!("{}/w", cms(&s.url, &ns))).json(&upd)).await.expect_code(200, "update");
    send(http.delete(format!("{}/w", cms(&s.url, &ns)))).await.expect_code(200, "delete");
    let mut last_rv = 0u64;
    for (want, v) in [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "2")] {
        let ev = w.next_non_bookmark(EVENT_WAIT).await.expect("an event");
        assert_eq!(ev["type"], want, "event order: {ev}");
        assert_eq!(ev["object"]["metadata"]["name"], "w", "{ev}");
        assert_eq!(ev["object"]["kind"], "ConfigMap", "watch objects carry kind: {ev}");
        assert_eq!(ev["object"]["data"]["v"], v, "{ev}");
        let this: u64 = ev["object"]["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(this > last_rv, "RVs rise: {this} after {last_rv}");
        last_rv = this;
    }
}

/// client-go's metadata informers (garbage collector, namespace controller) list and watch
/// with these Accept headers, less their first (protobuf) range: the JSON forms (the protobuf
/// ones are in `tests/protobuf.rs`).
const METADATA_LIST_ACCEPT: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const METADATA_WATCH_ACCEPT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_watch_sends_partial_object_metadata_for_every_event() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("mw").await;
    let list = send(http.get(cms(&s.url, &ns)).header("Accept", METADATA_LIST_ACCEPT)).await;
    list.expect_code(200, "metadata list");
    assert_eq!(list.body["kind"], "PartialObjectMetadataList", "{}", list.body);
    let rv = list.body["metadata"]["resourceVersion"].as_str().expect("list RV").to_string();
    let mut w = WatchLines::open(http.get(cms(&s.url, &ns)).header("Accept", METADATA_WATCH_ACCEPT).query(&[
        ("watch", "1"),
        ("resourceVersion", rv.as_str()),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    assert_eq!(w.code, 200, "metadata watch");
    let created = create_cm(&http, &s.url, &ns, &configmap("m", json!({"v": "1"}))).await;
    let mut upd = created.clone();
    upd["data"]["v"] = json!("2");
    upd["metadata"]["labels"] = json!({"step": "2"});
    let updated = send(http.put(format!("{}/m", cms(&s.url, &ns))).json(&upd)).await;
    updated.expect_code(200, "update");
    send(http.delete(format!("{}/m", cms(&s.url, &ns)))).await.expect_code(200, "delete");
    let want_rvs = [
        created["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string(),
        updated.body["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string(),
    ];
    let mut last_rv = 0u64;
    for (i, want) in ["ADDED", "MODIFIED", "DELETED"].into_iter().enumerate() {
        let ev = w.next_non_bookmark(EVENT_WAIT).await.expect("an event");
        assert_eq!(ev["type"], want, "event order: {ev}");
        let obj = &ev["object"];
        assert_eq!(obj["kind"], "PartialObjectMetadata", "{ev}");
        assert_eq!(obj["apiVersion"], "meta.k8s.io/v1", "{ev}");
        assert!(obj.get("data").is_none(), "metadata only: {ev}");
        assert_eq!(obj["metadata"]["name"], "m", "{ev}");
        assert_eq!(obj["metadata"]["namespace"], ns.as_str(), "{ev}");
        assert_eq!(obj["metadata"]["uid"], created["metadata"]["uid"], "{ev}");
        if let Some(rv) = want_rvs.get(i) {
            assert_eq!(obj["metadata"]["resourceVersion"], rv.as_str(), "the write's resourceVersion: {ev}");
        }
        let this: u64 = obj["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(this > last_rv, "RVs rise: {this} after {last_rv}");
        last_rv = this;
    }
}

/// A name-pinned list and watch (as a kubelet waits for its CSR) read one key: a sibling
/// whose name extends the pinned one is never included, the list's resourceVersion lets a
/// watch continue without a gap, and the other terms of the selectors still apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_and_watch_pinned_to_one_name_see_that_object_alone() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pin").await;
    let mut p1 = configmap("p1", json!({"v": "1"}));
    p1["metadata"]["labels"] = json!({"app": "a"});
    let p1 = create_cm(&http, &s.url, &ns, &p1).await;
    create_cm(&http, &s.url, &ns, &configmap("p10", json!({}))).await;
    let names = |r: &common::Reply| -> Vec<String> {
        r.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .map(String::from)
            .collect()
    };
    for (what, query, want) in [
        ("name", vec![("fieldSelector", "metadata.name=p1")], vec!["p1"]),
        (
            "name and a matching label",
            vec![("fieldSelector", "metadata.name=p1"), ("labelSelector", "app=a")],
            vec!["p1"],
        ),
        ("name and another label", vec![("fieldSelector", "metadata.name=p1"), ("labelSelector", "app=b")], vec![]),
        ("a missing name", vec![("fieldSelector", "metadata.name=p")], vec![]),
        ("name and a contradicting term", vec![("fieldSelector", "metadata.name=p1,metadata.name!=p1")], vec![]),
    ] {
        let r = send(http.get(cms(&s.url, &ns)).query(&query)).await;
        r.expect_code(200, what);
        assert_eq!(names(&r), want, "{what}: {}", r.text);
        let rv: u64 = r.body["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(rv > 0, "{what}: a list resourceVersion: {}", r.text);
    }
    // Across all namespaces, the name alone pins nothing: both namespaces are searched.
    let r = send(
        http.get(format!("{}/api/v1/configmaps", s.url))
            .query(&[("fieldSelector", format!("metadata.name=p1,metadata.namespace={ns}"))]),
    )
    .await;
    assert_eq!(names(&r), vec!["p1"], "name and namespace fields: {}", r.text);

    let list = send(http.get(cms(&s.url, &ns)).query(&[("fieldSelector", "metadata.name=p1")])).await;
    let rv = list.body["metadata"]["resourceVersion"].as_str().expect("list RV").to_string();
    let mut w = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[
        ("watch", "1"),
        ("fieldSelector", "metadata.name=p1"),
        ("resourceVersion", rv.as_str()),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    assert_eq!(w.code, 200);
    // Changes to the sibling come first and must not show up.
    let mut p10 = send(http.get(format!("{}/p10", cms(&s.url, &ns)))).await.body;
    p10["data"] = json!({"v": "x"});
    send(http.put(format!("{}/p10", cms(&s.url, &ns))).json(&p10)).await.expect_code(200, "update p10");
    let mut upd = p1.clone();
    upd["data"]["v"] = json!("2");
    send(http.put(format!("{}/p1", cms(&s.url, &ns))).json(&upd)).await.expect_code(200, "update p1");
    send(http.delete(format!("{}/p1", cms(&s.url, &ns)))).await.expect_code(200, "delete p1");
    for (want, v) in [("MODIFIED", "2"), ("DELETED", "2")] {
        let ev = w.next_non_bookmark(EVENT_WAIT).await.expect("an event");
        assert_eq!(ev["type"], want, "{ev}");
        assert_eq!(ev["object"]["metadata"]["name"], "p1", "only p1's events: {ev}");
        assert_eq!(ev["object"]["data"]["v"], v, "{ev}");
    }
    // A pinned watch without a resourceVersion starts with the object as ADDED.
    create_cm(&http, &s.url, &ns, &configmap("p1", json!({"v": "3"}))).await;
    let mut w = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[
        ("watch", "1"),
        ("fieldSelector", "metadata.name=p1"),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    let ev = w.next_non_bookmark(EVENT_WAIT).await.expect("the initial ADDED");
    assert_eq!((ev["type"].as_str(), ev["object"]["data"]["v"].as_str()), (Some("ADDED"), Some("3")), "{ev}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_gives_added_then_an_initial_events_end_bookmark_then_live_events() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("sie").await;
    create_cm(&http, &s.url, &ns, &configmap("i1", json!({}))).await;
    create_cm(&http, &s.url, &ns, &configmap("i2", json!({}))).await;
    let mut w = WatchLines::open(http.get(cms(&s.url, &ns)).query(&[
        ("watch", "1"),
        ("sendInitialEvents", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", ""),
        ("resourceVersionMatch", "NotOlderThan"),
        ("timeoutSeconds", "60"),
    ]))
    .await;
    assert_eq!(w.code, 200, "watch with sendInitialEvents");
    let mut added = Vec::new();
    let bookmark = loop {
        let ev = w.next(EVENT_WAIT).await.expect("initial events");
        match ev["type"].as_str() {
            Some("ADDED") => added.push(ev["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string()),
            Some("BOOKMARK") => break ev,
            _ => panic!("unexpected event before the initial-events-end bookmark: {ev}"),
        }
        assert!(added.len() <= 2, "more ADDED events than objects: {added:?}");
    };
    added.sort();
    assert_eq!(added, ["i1", "i2"], "one ADDED per existing object");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true",
        "bookmark annotation: {bookmark}"
    );
    assert!(
        bookmark["object"]["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()),
        "bookmark RV: {bookmark}"
    );
    create_cm(&http, &s.url, &ns, &configmap("i3", json!({}))).await;
    let ev = w.next_non_bookmark(EVENT_WAIT).await.expect("a live event");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "i3", "{ev}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_without_resource_version_match_is_invalid() {
    let s = shared_apiserver();
    let http = s.http();
    let r = send(http.get(format!("{}/api/v1/namespaces/default/configmaps", s.url)).query(&[
        ("watch", "1"),
        ("sendInitialEvents", "true"),
        ("timeoutSeconds", "5"),
    ]))
    .await;
    assert_status(&r, 422, Some("Invalid"), "sendInitialEvents without resourceVersionMatch");
}

// ------------------------------------------------------------------ delete

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_with_a_finalizer_keeps_the_object_until_the_finalizer_is_removed() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("fin").await;
    let mut b = configmap("held", json!({}));
    b["metadata"]["finalizers"] = json!(["example.com/hold"]);
    create_cm(&http, &s.url, &ns, &b).await;
    let url = format!("{}/held", cms(&s.url, &ns));
    let d = send(http.delete(&url)).await;
    assert!(d.code == 200 || d.code == 202, "DELETE of a finalized object: {} {}", d.code, d.text);
    let got = send(http.get(&url)).await;
    got.expect_code(200, "GET after DELETE with a finalizer");
    assert!(got.body["metadata"]["deletionTimestamp"].is_string(), "deletionTimestamp set: {}", got.text);
    assert_eq!(got.body["metadata"]["finalizers"], json!(["example.com/hold"]));

    let p = send(
        http.patch(&url)
            .header("Content-Type", "application/merge-patch+json")
            .body(json!({"metadata": {"finalizers": null}}).to_string()),
    )
    .await;
    assert!(p.code == 200 || p.code == 404, "removing the last finalizer: {} {}", p.code, p.text);
    let gone = send(http.get(&url)).await;
    assert_status(&gone, 404, Some("NotFound"), "GET after the finalizer is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_with_a_mismatched_uid_precondition_is_409_conflict() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("pre").await;
    let created = create_cm(&http, &s.url, &ns, &configmap("pre", json!({}))).await;
    let url = format!("{}/pre", cms(&s.url, &ns));
    let opts = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
    let r = send(http.delete(&url).json(&opts)).await;
    assert_status(&r, 409, Some("Conflict"), "DELETE with a wrong uid precondition");
    send(http.get(&url)).await.expect_code(200, "object survives a failed precondition");

    let opts = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"uid": created["metadata"]["uid"]}});
    let r = send(http.delete(&url).json(&opts)).await;
    assert!(r.code == 200 || r.code == 202, "DELETE with the right uid: {} {}", r.code, r.text);
    assert_eq!(send(http.get(&url)).await.code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_is_terminating_refuses_creates_and_then_disappears() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("term").await;
    // A finalizer on a content object keeps the namespace Terminating until we release it.
    let mut b = configmap("anchor", json!({}));
    b["metadata"]["finalizers"] = json!(["example.com/hold"]);
    create_cm(&http, &s.url, &ns, &b).await;
    create_cm(&http, &s.url, &ns, &configmap("plain", json!({}))).await;

    let ns_url = format!("{}/api/v1/namespaces/{ns}", s.url);
    let d = send(http.delete(&ns_url)).await;
    assert!(d.code == 200 || d.code == 202, "DELETE namespace: {} {}", d.code, d.text);
    let got = send(http.get(&ns_url)).await;
    got.expect_code(200, "GET a terminating namespace");
    assert_eq!(got.body["status"]["phase"], "Terminating", "{}", got.text);
    assert!(got.body["metadata"]["deletionTimestamp"].is_string(), "{}", got.text);

    let r = send(http.post(cms(&s.url, &ns)).json(&configmap("late", json!({})))).await;
    assert_status(&r, 403, Some("Forbidden"), "create in a terminating namespace");
    assert!(r.text.contains("terminat"), "message says the namespace is being terminated: {}", r.text);

    // Release the anchor; the namespace and all its content must go.
    let anchor = format!("{}/anchor", cms(&s.url, &ns));
    for _ in 0..100 {
        let a = send(http.get(&anchor)).await;
        if a.code == 404 {
            break;
        }
        if a.body["metadata"]["deletionTimestamp"].is_string() {
            let p = send(
                http.patch(&anchor)
                    .header("Content-Type", "application/merge-patch+json")
                    .body(json!({"metadata": {"finalizers": null}}).to_string()),
            )
            .await;
            assert!(p.code == 200 || p.code == 404, "releasing the anchor: {} {}", p.code, p.text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut gone = false;
    for _ in 0..150 {
        if send(http.get(&ns_url)).await.code == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone, "namespace {ns} still exists: {}", send(http.get(&ns_url)).await.text);
    let left = send(
        http.get(format!("{}/api/v1/configmaps", s.url))
            .query(&[("fieldSelector", format!("metadata.namespace={ns}"))]),
    )
    .await;
    assert_eq!(left.body["items"], json!([]), "configmaps of a deleted namespace: {}", left.text);
}

// ------------------------------------------------------------------ authentication & authorization

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_may_probe_health_but_not_list_configmaps() {
    let s = shared_apiserver();
    let anon = s.anonymous();
    let r = send(anon.get(format!("{}/livez", s.url))).await;
    r.expect_code(200, "anonymous /livez");
    let r = send(anon.get(format!("{}/api/v1/namespaces/default/configmaps", s.url))).await;
    assert_status(&r, 403, Some("Forbidden"), "anonymous list of configmaps");
    let msg = r.body["message"].as_str().unwrap_or_default();
    for word in ["system:anonymous", "list", "configmaps"] {
        assert!(msg.contains(word), "403 message should name {word:?}: {msg}");
    }
}

fn foreign_identity() -> Vec<u8> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "not-the-cluster-ca");
    let issuer = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate().expect("client key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
    // The same subject as the real admin: only the issuer differs.
    params.distinguished_name.push(DnType::CommonName, "kustos-admin");
    params.distinguished_name.push(DnType::OrganizationName, "system:masters");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).expect("signing the client cert");
    let mut pem = key.serialize_pem().into_bytes();
    pem.extend_from_slice(cert.pem().as_bytes());
    pem
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_401() {
    let s = shared_apiserver();
    let client = s.http_with_identity(&foreign_identity());
    let resp = client.get(format!("{}/api/v1/namespaces", s.url)).send().await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) => panic!("expected an HTTP 401 for a foreign client certificate, got a transport error: {e:?}"),
    };
    let code = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let r = Reply { code, headers: Default::default(), body, text };
    assert_status(&r, 401, Some("Unauthorized"), "request with a foreign client certificate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_authenticated_user_gets_discovery_and_health() {
    let s = shared_apiserver();
    let http = s.http();
    let r = send(http.get(format!("{}/readyz", s.url))).await;
    r.expect_code(200, "/readyz");
    assert_eq!(r.text.trim(), "ok");
    let r = send(http.get(format!("{}/livez", s.url))).await;
    r.expect_code(200, "/livez");
    assert_eq!(r.text.trim(), "ok");
}

// ------------------------------------------------------------------ health

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_support_verbose_exclude_and_single_checks() {
    let s = shared_apiserver();
    let anon = s.anonymous();
    let r = send(anon.get(format!("{}/readyz?verbose", s.url))).await;
    r.expect_code(200, "/readyz?verbose");
    let plus: Vec<&str> = r.text.lines().filter(|l| l.starts_with("[+]")).collect();
    assert!(!plus.is_empty() && plus.iter().all(|l| l.ends_with("ok")), "[+] ... ok lines: {}", r.text);
    assert!(r.text.contains("[+]etcd ok") || r.text.contains("[+]ping ok"), "{}", r.text);
    assert!(r.text.contains("check passed"), "trailer: {}", r.text);

    let r = send(anon.get(format!("{}/readyz?verbose&exclude=etcd", s.url))).await;
    r.expect_code(200, "/readyz?verbose&exclude=etcd");
    assert!(r.text.contains("[+]etcd excluded: ok"), "{}", r.text);

    let r = send(anon.get(format!("{}/livez?verbose", s.url))).await;
    r.expect_code(200, "/livez?verbose");
    assert!(r.text.contains("[+]"), "{}", r.text);

    // Single checks are not public (system:public-info-viewer grants the bare paths only).
    let r = send(anon.get(format!("{}/livez/etcd", s.url))).await;
    r.expect_code(403, "anonymous /livez/etcd");
    let admin = s.http();
    let r = send(admin.get(format!("{}/livez/etcd", s.url))).await;
    r.expect_code(200, "/livez/etcd");
    let r = send(admin.get(format!("{}/readyz/ping", s.url))).await;
    r.expect_code(200, "/readyz/ping");
}

// ------------------------------------------------------------------ gzip

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_list_is_gzipped_when_the_client_accepts_gzip() {
    let s = shared_apiserver();
    let http = s.http();
    let ns = s.create_namespace("gz").await;
    let blob = "abcdefghij".repeat(4000); // 40 KB per object, 5 objects: ~200 KB
    for i in 0..5 {
        create_cm(&http, &s.url, &ns, &configmap(&format!("g{i}"), json!({ "blob": blob }))).await;
    }
    let resp = http.get(cms(&s.url, &ns)).header("Accept-Encoding", "gzip").send().await.expect("GET gzip");
    assert_eq!(resp.status().as_u16(), 200);
    let enc = resp.headers().get("content-encoding").map(|v| v.to_str().unwrap_or_default().to_string());
    assert_eq!(enc.as_deref(), Some("gzip"), "Content-Encoding on a >128 KiB list");
    let compressed = resp.bytes().await.expect("body");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_string(&mut text).expect("valid gzip");
    let v: Value = serde_json::from_str(&text).expect("JSON inside the gzip");
    assert_eq!(v["items"].as_array().map(|a| a.len()), Some(5));
    assert!(compressed.len() < text.len(), "gzip shrinks the body");

    let resp = http.get(cms(&s.url, &ns)).send().await.expect("GET plain");
    assert!(resp.headers().get("content-encoding").is_none(), "no gzip without Accept-Encoding");
}

// ------------------------------------------------------------------ CSR subresources

fn csr_pem(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM")
}

fn csr_body(name: &str, signer: &str) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(csr_pem(name)),
            "signerName": signer,
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": 3600,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csr_approval_sets_approved_and_then_denied_or_spec_changes_are_422() {
    let s = shared_apiserver();
    let http = s.http();
    let name = unique("csr");
    let base = format!("{}/apis/certificates.k8s.io/v1/certificatesigningrequests", s.url);
    let r = send(http.post(&base).json(&csr_body(&name, "example.com/e2e-signer"))).await;
    r.expect_code(201, "create CSR");
    assert_eq!(r.body["spec"]["username"], "kustos-admin", "spec.username is the creator: {}", r.text);
    assert!(
        r.body["spec"]["groups"].as_array().is_some_and(|g| g.iter().any(|x| x == "system:masters")),
        "spec.groups from the creator: {}",
        r.text
    );
    let url = format!("{base}/{name}");

    let mut csr = r.body.clone();
    csr["status"] = json!({"conditions": [{
        "type": "Approved", "status": "True", "reason": "E2E", "message": "approved by the e2e test"
    }]});
    let a = send(http.put(format!("{url}/approval")).json(&csr)).await;
    a.expect_code(200, "PUT /approval with Approved");
    let conds = a.body["status"]["conditions"].as_array().cloned().unwrap_or_default();
    assert_eq!(conds.len(), 1, "{}", a.text);
    assert_eq!(conds[0]["type"], "Approved");
    assert_eq!(conds[0]["status"], "True");
    assert!(
        conds[0]["lastUpdateTime"].as_str().is_some_and(|t| t.ends_with('Z')),
        "the server sets lastUpdateTime: {}",
        a.text
    );

    let mut denied = a.body.clone();
    let mut c = denied["status"]["conditions"].as_array().cloned().unwrap_or_default();
    c.push(json!({"type": "Denied", "status": "True", "reason": "E2E", "message": "and denied"}));
    denied["status"]["conditions"] = Value::Array(c);
    let d = send(http.put(format!("{url}/approval")).json(&denied)).await;
    assert_status(&d, 422, Some("Invalid"), "adding Denied to an Approved CSR");

    let mut changed = send(http.get(&url)).await.body;
    changed["spec"]["usages"] = json!(["digital signature", "key encipherment", "client auth"]);
    // Upstream keeps the stored spec on every update (the spec is immutable), and answers 200.
    let p = send(http.put(&url).json(&changed)).await;
    p.expect_code(200, "PUT changing a CSR's spec");
    assert_eq!(p.body["spec"]["usages"], json!(["digital signature", "client auth"]), "the reply keeps the spec");
    let got = send(http.get(&url)).await;
    assert_eq!(got.body["spec"]["usages"], json!(["digital signature", "client auth"]), "spec unchanged");
}
