//! API Priority and Fairness configuration objects on the real binary: the
//! flowcontrol.apiserver.k8s.io/v1 kinds through kubectl and raw HTTPS, upstream's mandatory
//! and suggested objects, their maintenance (`apf.kubernetes.io/autoupdate-spec`) and the
//! FlowSchemas' `Dangling` condition.
//!
//! Tests that change or delete default objects run their own `kustos apiserver`, so that
//! they cannot disturb the tests that read the defaults from the shared server.

mod common;

use std::time::Duration;

use common::{assert_status, send, shared, unique, Server, WatchLines};
use serde_json::{json, Value};

const FS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas";
const PL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations";
const ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";
/// Bound for the maintenance loop to react to a change (it runs about a second after one).
const REACT: Duration = Duration::from_secs(20);

fn flow_schema(name: &str, level: &str, precedence: i64) -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
           "metadata": {"name": name},
           "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [{"subjects": [{"kind": "User", "user": {"name": "nobody-in-particular"}}],
                               "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/nothing-here"]}]}]}})
}

fn priority_level(name: &str, limited: Value) -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
           "metadata": {"name": name}, "spec": {"type": "Limited", "limited": limited}})
}

async fn post(s: &Server, path: &str, body: &Value) -> common::Reply {
    send(s.http().post(format!("{}{path}", s.url)).json(body)).await
}

async fn get(s: &Server, path: &str) -> common::Reply {
    send(s.http().get(format!("{}{path}", s.url))).await
}

async fn merge_patch(s: &Server, path: &str, body: &Value) -> common::Reply {
    send(
        s.http()
            .patch(format!("{}{path}", s.url))
            .header("Content-Type", "application/merge-patch+json")
            .body(body.to_string()),
    )
    .await
}

fn dangling(fs: &Value) -> Option<&Value> {
    fs["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Dangling")
}

/// The table rows of `kubectl get <what>` as whitespace-split fields, header first.
fn table(s: &Server, what: &str) -> Vec<Vec<String>> {
    s.kubectl_ok(&["get", what]).lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

fn row<'a>(rows: &'a [Vec<String>], name: &str) -> &'a [String] {
    rows.iter().find(|r| r.first().map(String::as_str) == Some(name)).map(Vec::as_slice).unwrap_or_else(|| {
        panic!("no row {name} in {rows:?}");
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_the_default_configuration_with_upstream_columns() {
    let s = shared();
    let fs = table(&s, "flowschemas");
    assert_eq!(
        fs[0],
        ["NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"],
        "flowschema header"
    );
    // name → (priority level, precedence, distinguisher)
    let want_fs = [
        ("exempt", "exempt", "1", "<none>"),
        ("probes", "exempt", "2", "<none>"),
        ("system-leader-election", "leader-election", "100", "ByUser"),
        ("endpoint-controller", "workload-high", "150", "ByUser"),
        ("workload-leader-election", "leader-election", "200", "ByUser"),
        ("system-node-high", "node-high", "400", "ByUser"),
        ("system-nodes", "system", "500", "ByUser"),
        ("kube-controller-manager", "workload-high", "800", "ByNamespace"),
        ("kube-scheduler", "workload-high", "800", "ByNamespace"),
        ("kube-system-service-accounts", "workload-high", "900", "ByNamespace"),
        ("service-accounts", "workload-low", "9000", "ByUser"),
        ("global-default", "global-default", "9900", "ByUser"),
        ("catch-all", "catch-all", "10000", "ByUser"),
    ];
    for (name, level, precedence, dm) in want_fs {
        let r = row(&fs, name);
        assert_eq!(&r[1..4], [level, precedence, dm], "flowschema {name}: {r:?}");
        assert_eq!(r[5], "False", "flowschema {name}: MissingPL: {r:?}");
    }
    let order: Vec<&str> =
        fs[1..].iter().map(|r| r[0].as_str()).filter(|n| want_fs.iter().any(|w| w.0 == *n)).collect();
    let want_order: Vec<&str> = want_fs.iter().map(|w| w.0).collect();
    assert_eq!(order, want_order, "flowschema rows in matching order (precedence, then name)");

    let pl = table(&s, "prioritylevelconfigurations");
    assert_eq!(
        pl[0],
        ["NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT", "AGE"],
        "priority level header"
    );
    let want_pl = [
        ("exempt", ["Exempt", "<none>", "<none>", "<none>", "<none>"]),
        ("catch-all", ["Limited", "5", "<none>", "<none>", "<none>"]),
        ("system", ["Limited", "30", "64", "6", "50"]),
        ("node-high", ["Limited", "40", "64", "6", "50"]),
        ("leader-election", ["Limited", "10", "16", "4", "50"]),
        ("workload-high", ["Limited", "40", "128", "6", "50"]),
        ("workload-low", ["Limited", "100", "128", "6", "50"]),
        ("global-default", ["Limited", "20", "128", "6", "50"]),
    ];
    for (name, cells) in want_pl {
        let r = row(&pl, name);
        assert_eq!(&r[1..6], cells, "priority level {name}: {r:?}");
    }

    let both = s.kubectl_ok(&["get", "flowschemas,prioritylevelconfigurations", "-o", "name"]);
    assert!(both.lines().any(|l| l == "flowschema.flowcontrol.apiserver.k8s.io/service-accounts"), "{both}");
    assert!(both.lines().any(|l| l == "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/catch-all"), "{both}");

    let exempt = get(&s, &format!("{FS}/exempt")).await;
    exempt.expect_code(200, "get flowschema exempt");
    assert_eq!(exempt.body["metadata"]["annotations"][ANNOTATION], "true", "annotation: {}", exempt.text);
    assert_eq!(exempt.body["spec"]["rules"][0]["subjects"][0]["group"]["name"], "system:masters", "{}", exempt.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limited_shares_default_to_30_and_an_explicit_zero_stays() {
    let s = shared();
    let unset = unique("pl-unset");
    let zero = unique("pl-zero");
    post(&s, PL, &priority_level(&unset, json!({"limitResponse": {"type": "Queue", "queuing": {"queues": 0}}})))
        .await
        .expect_code(201, "create a level without shares");
    post(&s, PL, &priority_level(&zero, json!({"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}})))
        .await
        .expect_code(201, "create a level with zero shares");

    let raw = |name: &str| -> Value {
        let out = s.kubectl_ok(&["get", "--raw", &format!("{PL}/{name}")]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("get --raw {name} is not JSON ({e}): {out}"))
    };
    let got = raw(&unset);
    let limited = &got["spec"]["limited"];
    assert_eq!(limited["nominalConcurrencyShares"], 30, "unset shares: {got}");
    assert_eq!(limited["lendablePercent"], 0, "lendable default: {got}");
    assert_eq!(
        limited["limitResponse"]["queuing"],
        json!({"queues": 64, "handSize": 8, "queueLengthLimit": 50}),
        "{got}"
    );
    assert_eq!(got["metadata"]["generation"], 1, "generation: {got}");
    let got = raw(&zero);
    assert_eq!(got["spec"]["limited"]["nominalConcurrencyShares"], 0, "explicit zero: {got}");

    let fs = unique("fs-default");
    let mut body = flow_schema(&fs, &unset, 1);
    body["spec"].as_object_mut().unwrap().remove("matchingPrecedence");
    post(&s, FS, &body).await.expect_code(201, "create a flowschema without precedence");
    let got = get(&s, &format!("{FS}/{fs}")).await;
    assert_eq!(got.body["spec"]["matchingPrecedence"], 1000, "precedence default: {}", got.text);

    for (path, name) in [(FS, &fs), (PL, &unset), (PL, &zero)] {
        s.kubectl_ok(&["delete", "--raw", &format!("{path}/{name}")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_are_refused_with_causes() {
    let s = shared();
    // (0 would be defaulted to 1000.)
    let mut fs = flow_schema(&unique("fs-bad"), "global-default", -5);
    fs["spec"]["rules"][0]["nonResourceRules"][0]["verbs"] = json!(["*", "get"]);
    fs["spec"]["distinguisherMethod"]["type"] = json!("ByPlanet");
    let r = post(&s, FS, &fs).await;
    assert_status(&r, 422, Some("Invalid"), "invalid flowschema");
    let fields: Vec<&str> =
        r.body["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    assert_eq!(
        fields,
        ["spec.matchingPrecedence", "spec.distinguisherMethod.type", "spec.rules[0].nonResourceRules[0].verbs"],
        "{}",
        r.text
    );
    assert_eq!(r.body["details"]["kind"], "FlowSchema", "{}", r.text);

    let pl = priority_level(
        &unique("pl-bad"),
        json!({"nominalConcurrencyShares": -1,
               "limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 5, "queueLengthLimit": 10}}}),
    );
    let r = post(&s, PL, &pl).await;
    assert_status(&r, 422, Some("Invalid"), "invalid priority level");
    let causes = r.body["details"]["causes"].as_array().unwrap();
    let messages: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c["field"].as_str().unwrap_or(""), c["message"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        messages,
        [
            "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
            "spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)",
        ],
        "{}",
        r.text
    );

    let r = merge_patch(&s, &format!("{FS}/exempt"), &json!({"spec": {"matchingPrecedence": 2}})).await;
    assert_status(&r, 422, Some("Invalid"), "changing the mandatory exempt flowschema");
    assert!(r.text.contains("spec of 'exempt' must equal the fixed value"), "{}", r.text);
    let r = merge_patch(&s, &format!("{PL}/exempt"), &json!({"spec": {"type": "Limited"}})).await;
    assert_status(&r, 422, Some("Invalid"), "making the exempt level limited");
    assert!(r.text.contains("except the 'spec.exempt' field must equal the fixed value"), "{}", r.text);
    let r =
        merge_patch(&s, &format!("{PL}/catch-all"), &json!({"spec": {"limited": {"nominalConcurrencyShares": 50}}}))
            .await;
    assert_status(&r, 422, Some("Invalid"), "changing the catch-all level");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_defaults_come_back() {
    let s = Server::start_apiserver();
    let old_fs = get(&s, &format!("{FS}/service-accounts")).await.body["metadata"]["uid"].clone();
    let old_pl = get(&s, &format!("{PL}/catch-all")).await.body["metadata"]["uid"].clone();
    assert!(old_fs.is_string() && old_pl.is_string(), "defaults exist: {old_fs} {old_pl}");
    s.kubectl_ok(&["delete", "flowschema", "service-accounts"]);
    s.kubectl_ok(&["delete", "prioritylevelconfiguration", "catch-all"]);
    let fs = s
        .wait_for_object(&format!("{FS}/service-accounts"), "re-creation of service-accounts", REACT, |o| {
            o["metadata"]["uid"] != old_fs
        })
        .await;
    assert_eq!(fs["spec"]["matchingPrecedence"], 9000, "recreated spec: {fs}");
    let pl = s
        .wait_for_object(&format!("{PL}/catch-all"), "re-creation of catch-all", REACT, |o| {
            o["metadata"]["uid"] != old_pl
        })
        .await;
    assert_eq!(pl["spec"]["limited"]["limitResponse"]["type"], "Reject", "recreated spec: {pl}");
    assert_eq!(pl["metadata"]["annotations"][ANNOTATION], "true", "recreated annotation: {pl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoupdate_false_hands_a_suggested_object_to_its_users() {
    let s = Server::start_apiserver();
    let path = format!("{PL}/global-default");
    // Users take over global-default: their shares persist across passes.
    let r = merge_patch(
        &s,
        &path,
        &json!({"metadata": {"annotations": {ANNOTATION: "false"}}, "spec": {"limited": {"nominalConcurrencyShares": 77}}}),
    )
    .await;
    r.expect_code(200, "taking over global-default");
    // An edit without the annotation: the server records that users own it now.
    let r = merge_patch(
        &s,
        &format!("{PL}/workload-low"),
        &json!({"metadata": {"annotations": {ANNOTATION: null}}, "spec": {"limited": {"lendablePercent": 11}}}),
    )
    .await;
    r.expect_code(200, "editing workload-low");
    // A suggested object still owned by the server is put back.
    let r = merge_patch(&s, &format!("{PL}/node-high"), &json!({"spec": {"limited": {"nominalConcurrencyShares": 3}}}))
        .await;
    r.expect_code(200, "editing node-high");

    let wl = s
        .wait_for_object(&format!("{PL}/workload-low"), "the server records users' ownership", REACT, |o| {
            o["metadata"]["annotations"][ANNOTATION] == "false"
        })
        .await;
    assert_eq!(wl["spec"]["limited"]["lendablePercent"], 11, "users' edit kept: {wl}");
    s.wait_for_object(&format!("{PL}/node-high"), "node-high put back", REACT, |o| {
        o["spec"]["limited"]["nominalConcurrencyShares"] == 40
    })
    .await;
    // Those passes came after the take-over of global-default; one more, triggered now.
    let marker = unique("fs-marker");
    post(&s, FS, &flow_schema(&marker, "global-default", 5000)).await.expect_code(201, "create a marker");
    s.wait_for_object(&format!("{FS}/{marker}"), "a pass after the marker", REACT, |o| dangling(o).is_some()).await;
    let gd = get(&s, &path).await;
    assert_eq!(gd.body["spec"]["limited"]["nominalConcurrencyShares"], 77, "users' shares persist: {}", gd.text);
    assert_eq!(gd.body["metadata"]["annotations"][ANNOTATION], "false", "{}", gd.text);

    // Handing it back: the server's spec returns.
    merge_patch(&s, &path, &json!({"metadata": {"annotations": {ANNOTATION: "true"}}}))
        .await
        .expect_code(200, "handing global-default back");
    s.wait_for_object(&path, "global-default reset", REACT, |o| o["spec"]["limited"]["nominalConcurrencyShares"] == 20)
        .await;

    // The exempt level's `spec.exempt` is the users' to set, and is kept.
    merge_patch(&s, &format!("{PL}/exempt"), &json!({"spec": {"exempt": {"nominalConcurrencyShares": 12}}}))
        .await
        .expect_code(200, "setting exempt shares");
    let marker2 = unique("fs-marker");
    post(&s, FS, &flow_schema(&marker2, "global-default", 5000)).await.expect_code(201, "create a second marker");
    s.wait_for_object(&format!("{FS}/{marker2}"), "a pass after the second marker", REACT, |o| dangling(o).is_some())
        .await;
    let ex = get(&s, &format!("{PL}/exempt")).await;
    assert_eq!(ex.body["spec"]["exempt"]["nominalConcurrencyShares"], 12, "{}", ex.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangling_condition_follows_the_priority_level() {
    let s = shared();
    let fs = unique("fs-dangling");
    let level = unique("pl-later");
    post(&s, FS, &flow_schema(&fs, &level, 7000)).await.expect_code(201, "create a flowschema");
    let got = s
        .wait_for_object(&format!("{FS}/{fs}"), "Dangling=True", REACT, |o| {
            dangling(o).is_some_and(|c| c["status"] == "True")
        })
        .await;
    let c = dangling(&got).unwrap();
    assert_eq!(c["reason"], "NotFound", "{got}");
    assert_eq!(
        c["message"],
        format!("This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" but there is no such object"),
        "{got}"
    );
    assert!(c["lastTransitionTime"].is_string(), "{got}");
    let rows = table(&s, "flowschemas");
    assert_eq!(row(&rows, &fs)[5], "True", "MissingPL column");

    post(&s, PL, &priority_level(&level, json!({"limitResponse": {"type": "Reject"}})))
        .await
        .expect_code(201, "create the level");
    let got = s
        .wait_for_object(&format!("{FS}/{fs}"), "Dangling=False", REACT, |o| {
            dangling(o).is_some_and(|c| c["status"] == "False")
        })
        .await;
    let c = dangling(&got).unwrap();
    assert_eq!(c["reason"], "Found", "{got}");
    assert_eq!(
        c["message"],
        format!("This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" and it exists"),
        "{got}"
    );
    for (path, name) in [(FS, &fs), (PL, &level)] {
        s.kubectl_ok(&["delete", "--raw", &format!("{path}/{name}")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_default_objects_annotated_true_are_deleted() {
    let s = shared();
    let keep = unique("fs-users");
    let gone = unique("fs-claims-server");
    let mut body = flow_schema(&keep, "global-default", 6000);
    body["metadata"]["annotations"] = json!({ANNOTATION: "false"});
    post(&s, FS, &body).await.expect_code(201, "create an object annotated false");
    let mut body = flow_schema(&gone, "global-default", 6000);
    body["metadata"]["annotations"] = json!({ANNOTATION: "true"});
    post(&s, FS, &body).await.expect_code(201, "create an object annotated true");

    let path = format!("{FS}/{gone}");
    let mut deleted = false;
    for _ in 0..(REACT.as_millis() / 100) {
        if get(&s, &path).await.code == 404 {
            deleted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(deleted, "{gone} was not deleted within {REACT:?}\n{}", s.stderr_tail());
    get(&s, &format!("{FS}/{keep}")).await.expect_code(200, "the object annotated false stays");
    s.kubectl_ok(&["delete", "--raw", &format!("{FS}/{keep}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_flowschemas_sees_a_new_one() {
    let s = shared();
    let list = get(&s, FS).await;
    list.expect_code(200, "list flowschemas");
    assert_eq!(list.body["kind"], "FlowSchemaList", "{}", list.text);
    let rv = list.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut w = WatchLines::open(s.http().get(format!("{}{FS}?watch=1&resourceVersion={rv}", s.url))).await;
    assert_eq!(w.code, 200, "watch opened");
    let name = unique("fs-watched");
    post(&s, FS, &flow_schema(&name, "global-default", 4000)).await.expect_code(201, "create");
    let mut seen = false;
    for _ in 0..50 {
        let Some(ev) = w.next_non_bookmark(REACT).await else { break };
        if ev["type"] == "ADDED" && ev["object"]["metadata"]["name"] == name.as_str() {
            assert_eq!(ev["object"]["kind"], "FlowSchema", "{ev}");
            seen = true;
            break;
        }
    }
    assert!(seen, "no ADDED event for {name}");
    s.kubectl_ok(&["delete", "--raw", &format!("{FS}/{name}")]);
}
