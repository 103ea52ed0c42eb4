//! API Priority and Fairness end to end: a flooding user is answered 429 while a modest user,
//! `system:masters` and leader-election Lease renewals keep being served; classification is
//! visible in the `X-Kubernetes-PF-*` headers and the metrics; the debug dumps answer; the
//! max-in-flight fallback when APF is off.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{issue_user, send, Server, User};
use serde_json::{json, Value};

const FS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas";
const PL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations";

async fn uid_of(s: &Server, path: &str) -> String {
    let r = send(s.http().get(format!("{}{path}", s.url))).await;
    r.expect_code(200, path);
    r.body["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

async fn create(s: &Server, collection: &str, body: Value) -> Value {
    let r = send(s.http().post(format!("{}{collection}", s.url)).json(&body)).await;
    r.expect_code(201, &format!("creating {}", body["metadata"]["name"]));
    r.body
}

/// A tiny Reject level and a schema at precedence 500 sending `user` to it.
async fn tiny_reject_level(s: &Server, name: &str, user: &str) -> (String, String) {
    let pl = create(
        s,
        PL,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0,
                "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}}),
    )
    .await;
    let fs = create(
        s,
        FS,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 500,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "namespaces": ["*"], "clusterScope": true}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}),
    )
    .await;
    let uid = |v: &Value| v["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    (uid(&fs), uid(&pl))
}

fn view_binding(s: &Server, users: &[&str]) {
    let mut args = vec!["create", "clusterrolebinding", "apf-test-view", "--clusterrole=view"];
    let flags: Vec<String> = users.iter().map(|u| format!("--user={u}")).collect();
    args.extend(flags.iter().map(String::as_str));
    s.kubectl_ok(&args);
    // `view` gets its rules from the clusterrole-aggregation controller a moment after the
    // server starts (as upstream's): wait (bounded) until each user may list config maps.
    let deadline = Instant::now() + Duration::from_secs(30);
    for u in users {
        loop {
            let out = s.kubectl(&["auth", "can-i", "list", "configmaps", "-n", "default", "--as", u]);
            if String::from_utf8_lossy(&out.stdout).trim() == "yes" {
                break;
            }
            assert!(Instant::now() < deadline, "{u} never got the view role: {out:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Wait (bounded) until the dispatcher classifies the client's GETs of `path` by the schema
/// `fs_uid`.
async fn await_classified(s: &Server, client: &reqwest::Client, path: &str, fs_uid: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = send(client.get(format!("{}{path}", s.url))).await;
        if r.header("x-kubernetes-pf-flowschema-uid").as_deref() == Some(fs_uid) {
            return;
        }
        assert!(Instant::now() < deadline, "the new FlowSchema never took effect; last reply headers {:?}", r.headers);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn client_for(s: &Server, u: &User) -> reqwest::Client {
    s.http_with_identity(&u.identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flooding_user_is_rejected_while_others_are_served() {
    // 20 seats in all: the test level gets ceil(20 * 1 / (245 + 1)) = 1 and may not borrow.
    let s = Server::start_with(&["--max-requests-inflight", "12", "--max-mutating-requests-inflight", "8"]);
    view_binding(&s, &["flood", "alice"]);
    let (flood_fs, flood_pl) = tiny_reject_level(&s, "apf-flood", "flood").await;
    let flood = client_for(&s, &issue_user(&s, "flood", &[]));
    let alice = client_for(&s, &issue_user(&s, "alice", &[]));
    let kcm = client_for(&s, &issue_user(&s, "system:kube-controller-manager", &[]));
    let admin = s.http();
    await_classified(&s, &flood, CONFIGMAPS, &flood_fs).await;

    let (exempt_fs, exempt_pl) = (uid_of(&s, &format!("{FS}/exempt")).await, uid_of(&s, &format!("{PL}/exempt")).await);
    let (default_fs, default_pl) =
        (uid_of(&s, &format!("{FS}/global-default")).await, uid_of(&s, &format!("{PL}/global-default")).await);
    let (le_fs, le_pl) =
        (uid_of(&s, &format!("{FS}/system-leader-election")).await, uid_of(&s, &format!("{PL}/leader-election")).await);

    // The flood: rounds of 64 concurrent lists until some are rejected (bounded).
    let stop = Arc::new(AtomicBool::new(false));
    let flood_task = {
        let (stop, url, flood) = (stop.clone(), s.url.clone(), flood.clone());
        let (fs, pl) = (flood_fs.clone(), flood_pl.clone());
        tokio::spawn(async move {
            let (mut ok, mut rejected, mut rounds, mut max_retry_after) = (0u32, 0u32, 0u32, 0u32);
            while rounds < 200 && !(stop.load(Ordering::SeqCst) && rejected > 0) {
                rounds += 1;
                let batch = (0..64).map(|_| send(flood.get(format!("{url}/api/v1/namespaces/default/configmaps"))));
                for r in futures::future::join_all(batch).await {
                    assert_eq!(
                        r.header("x-kubernetes-pf-flowschema-uid").as_deref(),
                        Some(fs.as_str()),
                        "flood FS header"
                    );
                    assert_eq!(
                        r.header("x-kubernetes-pf-prioritylevel-uid").as_deref(),
                        Some(pl.as_str()),
                        "flood PL header"
                    );
                    match r.code {
                        200 => ok += 1,
                        429 => {
                            rejected += 1;
                            let retry: Option<u32> = r.header("retry-after").and_then(|v| v.parse().ok());
                            assert!(
                                retry.is_some_and(|s| (1..=32).contains(&s)),
                                "429 carries Retry-After 1..32 s: {retry:?}"
                            );
                            max_retry_after = max_retry_after.max(retry.unwrap_or(0));
                            assert_eq!(r.body["reason"], "TooManyRequests", "429 is a Status: {}", r.text);
                        }
                        other => panic!("flood request answered {other}: {}", r.text),
                    }
                }
            }
            (ok, rejected, max_retry_after)
        })
    };

    // Meanwhile: a modest user, the admin and a leader-election renewer, each sequentially.
    let lease_url = format!("{}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", s.url);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-controller-manager"},
        "spec": {"holderIdentity": "kcm-1", "leaseDurationSeconds": 15}});
    send(kcm.post(&lease_url).json(&lease)).await.expect_code(201, "creating the Lease");
    for i in 0..40 {
        let r = send(alice.get(format!("{}/api/v1/namespaces/default/configmaps", s.url))).await;
        r.expect_code(200, &format!("alice's request {i} during the flood"));
        assert_eq!(
            r.header("x-kubernetes-pf-flowschema-uid").as_deref(),
            Some(default_fs.as_str()),
            "alice → global-default"
        );
        assert_eq!(
            r.header("x-kubernetes-pf-prioritylevel-uid").as_deref(),
            Some(default_pl.as_str()),
            "alice's level"
        );

        let r = send(admin.get(format!("{}/api/v1/namespaces/kube-system/configmaps", s.url))).await;
        r.expect_code(200, &format!("admin request {i} during the flood"));
        assert_eq!(r.header("x-kubernetes-pf-flowschema-uid").as_deref(), Some(exempt_fs.as_str()), "masters → exempt");
        assert_eq!(r.header("x-kubernetes-pf-prioritylevel-uid").as_deref(), Some(exempt_pl.as_str()), "exempt level");

        // A renewal: GET, then PUT with the resourceVersion read.
        let got = send(kcm.get(format!("{lease_url}/kube-controller-manager"))).await;
        got.expect_code(200, &format!("renewal {i}: get"));
        assert_eq!(
            got.header("x-kubernetes-pf-flowschema-uid").as_deref(),
            Some(le_fs.as_str()),
            "renewal → system-leader-election"
        );
        assert_eq!(
            got.header("x-kubernetes-pf-prioritylevel-uid").as_deref(),
            Some(le_pl.as_str()),
            "leader-election level"
        );
        let mut body = got.body.clone();
        body["spec"]["renewTime"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
        send(kcm.put(format!("{lease_url}/kube-controller-manager")).json(&body))
            .await
            .expect_code(200, &format!("renewal {i}: update"));
    }
    stop.store(true, Ordering::SeqCst);
    let (ok, rejected, max_retry_after) = flood_task.await.expect("the flood task");
    assert!(rejected > 0, "the flooding user was never rejected ({ok} served)");
    // Upstream's tracker: a level rejecting ≥ 3 requests a second tells clients to wait longer.
    if rejected >= 100 {
        assert!(max_retry_after >= 2, "{rejected} rejections never raised Retry-After above 1 s");
    }

    let metrics = send(admin.get(format!("{}/metrics", s.url))).await;
    metrics.expect_code(200, "/metrics");
    let line = metrics
        .text
        .lines()
        .find(|l| {
            l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
                && l.contains("flow_schema=\"apf-flood\"")
                && l.contains("priority_level=\"apf-flood\"")
                && l.contains("reason=\"concurrency-limit\"")
        })
        .unwrap_or_else(|| panic!("no concurrency-limit rejection metric for apf-flood in\n{}", metrics.text));
    let counted: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a metric value");
    assert!(counted >= f64::from(rejected), "metric {counted} counts every rejection ({rejected})");
    for (name, want) in [
        ("dispatched", "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"}"),
        ("nominal seats", "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"apf-flood\"} 1"),
    ] {
        assert!(metrics.text.lines().any(|l| l.starts_with(want)), "{name}: {want} missing in\n{}", metrics.text);
    }
}

#[tokio::test]
async fn precedence_decides_and_debug_dumps_answer() {
    let s = Server::start();
    let admin = s.http();
    view_binding(&s, &["bob"]);
    let level = create(
        &s,
        PL,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "apf-prec"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
                "limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 10}}}}}),
    )
    .await;
    let schema = |name: &str, precedence: u32| {
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": "apf-prec"}, "matchingPrecedence": precedence,
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "bob"}}],
                    "resourceRules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"], "namespaces": ["*"]}]}]}})
    };
    // Created in this order so that the later-created, lower-precedence one has to win.
    let high = create(&s, FS, schema("apf-prec-200", 200)).await;
    let low = create(&s, FS, schema("apf-prec-100", 100)).await;
    let bob = client_for(&s, &issue_user(&s, "bob", &[]));
    let low_uid = low["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    await_classified(&s, &bob, CONFIGMAPS, &low_uid).await;
    let r = send(bob.get(format!("{}/api/v1/namespaces/default/configmaps", s.url))).await;
    r.expect_code(200, "bob's list");
    assert_eq!(r.header("x-kubernetes-pf-flowschema-uid"), Some(low_uid.clone()), "precedence 100 beats 200");
    assert_ne!(r.header("x-kubernetes-pf-flowschema-uid").as_deref(), high["metadata"]["uid"].as_str(), "200 loses");
    assert_eq!(
        r.header("x-kubernetes-pf-prioritylevel-uid").as_deref(),
        level["metadata"]["uid"].as_str(),
        "level header"
    );

    // Requests that did not go through a user schema still carry both headers (probes → exempt).
    let probe = send(s.anonymous().get(format!("{}/readyz", s.url))).await;
    probe.expect_code(200, "/readyz");
    assert_eq!(
        probe.header("x-kubernetes-pf-prioritylevel-uid"),
        Some(uid_of(&s, &format!("{PL}/exempt")).await),
        "probes are exempt"
    );

    // A request no other schema matches lands in catch-all: hand global-default to its users
    // and make it match nobody.
    let url = format!("{}{FS}/global-default", s.url);
    let mut gd = send(admin.get(&url)).await.body;
    gd["metadata"]["annotations"]["apf.kubernetes.io/autoupdate-spec"] = json!("false");
    gd["spec"]["rules"] = json!([{"subjects": [{"kind": "User", "user": {"name": "nobody"}}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]);
    send(admin.put(&url).json(&gd)).await.expect_code(200, "narrowing global-default");
    let catch_all_fs = uid_of(&s, &format!("{FS}/catch-all")).await;
    let secrets = "/api/v1/namespaces/default/secrets";
    await_classified(&s, &bob, secrets, &catch_all_fs).await;
    let r = send(bob.get(format!("{}{secrets}", s.url))).await;
    assert_eq!(r.code, 403, "bob may not read secrets (classified before authorization): {}", r.text);
    assert_eq!(r.header("x-kubernetes-pf-flowschema-uid"), Some(catch_all_fs), "unmatched → catch-all schema");
    assert_eq!(
        r.header("x-kubernetes-pf-prioritylevel-uid"),
        Some(uid_of(&s, &format!("{PL}/catch-all")).await),
        "unmatched → catch-all level"
    );

    let cases = [
        ("dump_priority_levels", "PriorityLevelName,", "apf-prec,"),
        ("dump_queues", "PriorityLevelName,", "apf-prec,"),
        ("dump_requests", "PriorityLevelName,", "FlowSchemaName,"),
        ("dump_requests?includeRequestDetails=1", "PriorityLevelName,", "UserName,"),
    ];
    for (path, first, contains) in cases {
        let r = send(admin.get(format!("{}/debug/api_priority_and_fairness/{path}", s.url))).await;
        r.expect_code(200, path);
        assert!(r.text.starts_with(first), "{path}: header row: {}", r.text);
        assert!(r.text.contains(contains), "{path}: {contains} missing: {}", r.text);
    }
    let r = send(bob.get(format!("{}/debug/api_priority_and_fairness/dump_queues", s.url))).await;
    assert_eq!(r.code, 403, "the dumps need authorization: {}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_in_flight_applies_when_apf_is_off() {
    let s = Server::start_with(&[
        "--enable-priority-and-fairness=false",
        "--max-requests-inflight",
        "1",
        "--max-mutating-requests-inflight",
        "1",
    ]);
    view_binding(&s, &["carol"]);
    let carol = client_for(&s, &issue_user(&s, "carol", &[]));
    let mut rejected = 0;
    for _round in 0..100 {
        let batch = (0..32).map(|_| send(carol.get(format!("{}/api/v1/namespaces/default/configmaps", s.url))));
        for r in futures::future::join_all(batch).await {
            assert!(r.header("x-kubernetes-pf-flowschema-uid").is_none(), "no APF headers without APF");
            match r.code {
                200 => {}
                429 => {
                    rejected += 1;
                    assert_eq!(r.header("retry-after").as_deref(), Some("1"), "Retry-After");
                }
                other => panic!("answered {other}: {}", r.text),
            }
        }
        if rejected > 0 {
            break;
        }
    }
    assert!(rejected > 0, "one read-only seat never rejected anything");
    // system:masters is not limited.
    let batch = (0..32).map(|_| send(s.http().get(format!("{}/api/v1/namespaces/default/configmaps", s.url))));
    for r in futures::future::join_all(batch).await {
        r.expect_code(200, "system:masters without APF");
    }
    let r = send(s.http().get(format!("{}/debug/api_priority_and_fairness/dump_queues", s.url))).await;
    assert_eq!(r.code, 404, "no dumps without APF: {}", r.text);
}
