//! What an operator sees of a running `kustos server`: `/metrics` in kube-apiserver's names
//! (requests, stored objects, the process, the controllers' work queues) and the logs (one
//! line per request at `-v=2`, a warning for paths nothing serves).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The value of the first sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_and_logs_show_every_request() {
    let s = Server::start_with(&["-v", "2"]);
    let admin = s.http();
    let ns = s.create_namespace("obs").await;
    for i in 0..3 {
        send(admin.post(format!("{}/api/v1/namespaces/{ns}/configmaps", s.url)).json(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}
        })))
        .await
        .expect_code(201, "create configmap");
    }
    send(admin.get(format!("{}/api/v1/namespaces/{ns}/configmaps", s.url))).await.expect_code(200, "list");
    send(admin.get(format!("{}/api/v1/namespaces/{ns}/configmaps/missing", s.url))).await.expect_code(404, "get");
    // A group nobody serves, asked twice: one warning.
    for _ in 0..2 {
        send(admin.get(format!("{}/apis/widgets.example.com/v1/namespaces/{ns}/gadgets/g1", s.url)))
            .await
            .expect_code(404, "unserved path");
    }

    // The controllers' queues start with kustos server; wait (bounded) until they show.
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let m = send(admin.get(format!("{}/metrics", s.url))).await;
        m.expect_code(200, "/metrics");
        if m.text.contains("workqueue_depth{name=\"csrsigning\"}") || Instant::now() > deadline {
            break m.text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let labels = "dry_run=\"\",group=\"\",version=\"v1\",resource=\"configmaps\",subresource=\"\"";
    let cases: &[(&str, String, f64)] = &[
        ("creates", format!("apiserver_request_total{{verb=\"POST\",{labels},scope=\"resource\",component=\"apiserver\",code=\"201\"}}"), 3.0),
        ("list", format!("apiserver_request_total{{verb=\"LIST\",{labels},scope=\"namespace\",component=\"apiserver\",code=\"200\"}}"), 1.0),
        ("get of a missing object", format!("apiserver_request_total{{verb=\"GET\",{labels},scope=\"resource\",component=\"apiserver\",code=\"404\"}}"), 1.0),
        (
            "made-up paths keep empty labels",
            "apiserver_request_total{verb=\"GET\",dry_run=\"\",group=\"\",version=\"\",resource=\"\",subresource=\"\",scope=\"resource\",component=\"apiserver\",code=\"404\"}".to_string(),
            2.0,
        ),
        ("duration", format!("apiserver_request_duration_seconds_count{{verb=\"POST\",{labels}"), 3.0),
    ];
    // The controllers write and read too (kube-root-ca.crt in the new namespace): at least.
    for (name, prefix, want) in cases {
        let got = sample(&text, prefix).unwrap_or_else(|| panic!("{name}: no {prefix} in\n{text}"));
        assert!(got >= *want, "{name}: {prefix} is {got}, want at least {want}");
    }
    assert!(!text.contains("widgets.example.com"), "a made-up group became a label:\n{text}");
    let configmaps = sample(&text, "apiserver_storage_objects{resource=\"configmaps\"}").expect("configmaps counted");
    assert!(configmaps >= 3.0, "{configmaps} stored configmaps");
    assert!(sample(&text, "apiserver_storage_objects{resource=\"namespaces\"}").is_some_and(|n| n >= 4.0));
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "workqueue_depth{name=\"csrsigning\"}",
        "kustos_controller_queue_depth{controller=\"csrsigning\"}",
        "apiserver_flowcontrol_dispatched_requests_total{",
        "apiserver_current_inflight_requests{",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing in\n{text}");
    }
    assert!(sample(&text, "process_resident_memory_bytes ").is_some_and(|rss| rss > 1e6));
    // Every background loop of the apiserver is supervised, and none ended unexpectedly.
    let tasks = [
        "crds",
        "flowcontrol-config",
        "flowcontrol-maintain",
        "flowcontrol-watch",
        "client-ca-files",
        "compactor",
        "service-account-keys",
        "bootstrap-token-cache",
    ];
    for task in tasks {
        let prefix = format!("kustos_apiserver_task_failures_total{{task=\"{task}\"}}");
        assert_eq!(sample(&text, &prefix), Some(0.0), "{prefix} in\n{text}");
    }
    assert_eq!(text.matches("# EOF").count(), 1, "one exposition, closed once");
    assert!(text.ends_with("# EOF\n"));

    // The log: an access line per request at -v=2, one warning for the unserved path.
    let log = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("the server log");
    let access = log
        .lines()
        .filter(|l| l.contains("HTTP") && l.contains(&format!("/api/v1/namespaces/{ns}/configmaps")))
        .collect::<Vec<_>>();
    assert!(access.len() >= 5, "access lines for the configmap requests:\n{log}");
    assert!(
        access.iter().any(|l| l.contains("user=kustos-admin") && l.contains("code=201") && l.contains("verb=POST")),
        "an access line names verb, user and code:\n{access:#?}"
    );
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN") && l.contains("widgets.example.com")).collect();
    assert_eq!(warnings.len(), 1, "one warning for the unserved path:\n{log}");
    assert!(warnings[0].contains("404"), "{}", warnings[0]);
}

#[tokio::test]
async fn no_access_log_by_default() {
    let s = Server::start();
    let admin = s.http();
    send(admin.get(format!("{}/api/v1/namespaces/default/configmaps", s.url))).await.expect_code(200, "list");
    send(admin.get(format!("{}/metrics", s.url))).await.expect_code(200, "/metrics");
    let log = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("the server log");
    assert!(!log.lines().any(|l| l.contains("HTTP") && l.contains("/api/v1/namespaces/default/configmaps")), "{log}");
}

/// A user name (a client certificate's CN) and a user agent with terminal escapes, a forged
/// log line, a C1 CSI and a right-to-left override reach the log only escaped: no line of
/// the log holds a raw control character, and no forged line starts a record.
#[tokio::test]
async fn client_strings_reach_the_log_only_escaped() {
    let s = Server::start_with(&["-v", "2"]);
    let forged = "2026-01-01T00:00:00.000000Z ERROR kustos: forged";
    let name = format!("mallory\x1b[31m\r\n{forged}\u{9b}2J\u{202e}exe.txt");
    let agent = "kubectl\u{202e}\u{9b}31m/v1.32 \u{2066}x\u{2069}";

    let pki = s.data_dir.join("pki");
    let ca = kustos_ca::Ca::from_pem(
        &std::fs::read_to_string(pki.join("ca.crt")).expect("reading ca.crt"),
        &std::fs::read_to_string(pki.join("ca.key")).expect("reading ca.key"),
    )
    .expect("the cluster CA");
    let params = kustos_ca::IssueParams::client(&name, vec!["system:masters".into()], chrono::Duration::hours(1));
    let issued = ca.issue(params, chrono::Utc::now()).expect("issuing a client certificate");
    let mut identity = issued.key_pem.clone().expect("a generated key").into_bytes();
    identity.push(b'\n');
    identity.extend_from_slice(issued.cert_pem.as_bytes());
    let mut client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .identity(reqwest::Identity::from_pem(&identity).expect("the identity"))
        .no_proxy()
        .timeout(Duration::from_secs(30));
    for ca in reqwest::Certificate::from_pem_bundle(&s.ca_pem()).expect("the CA bundle") {
        client = client.add_root_certificate(ca);
    }
    let client = client.build().expect("an HTTP client");
    let agent_value = reqwest::header::HeaderValue::from_bytes(agent.as_bytes()).expect("a UTF-8 header value");
    for path in ["/api/v1/namespaces/default/configmaps", "/apis/evil.example.com/v1/things"] {
        let resp = client
            .get(format!("{}{path}", s.url))
            .header(reqwest::header::USER_AGENT, agent_value.clone())
            .send()
            .await
            .expect("sending the request");
        assert!(matches!(resp.status().as_u16(), 200 | 404), "{path}: {}", resp.status());
    }

    let log = std::fs::read_to_string(s.work_dir().join("stderr-0.log")).expect("the server log");
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.chars().any(|c| {
                c.is_control()
                    || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            })
        })
        .collect();
    assert!(bad.is_empty(), "raw control or bidi characters in the log:\n{bad:#?}");
    assert!(!log.lines().any(|l| l.starts_with(forged)), "a forged record:\n{log}");
    let escaped_name =
        "mallory\\x1b[31m\\r\\n2026-01-01T00:00:00.000000Z ERROR kustos: forged\\u{9b}2J\\u{202e}exe.txt";
    let escaped_agent = "kubectl\\u{202e}\\u{9b}31m/v1.32 \\u{2066}x\\u{2069}";
    let access: Vec<&str> =
        log.lines().filter(|l| l.contains("HTTP") && l.contains("/api/v1/namespaces/default/configmaps")).collect();
    assert!(
        access.iter().any(|l| l.contains(&format!("user={escaped_name}")) && l.contains(escaped_agent)),
        "the access line names the user and agent escaped:\n{access:#?}"
    );
    let warning = log.lines().find(|l| l.contains("WARN") && l.contains("evil.example.com"));
    assert!(warning.is_some_and(|l| l.contains(escaped_agent)), "the 404 warning, escaped:\n{log}");
}

/// The work counters (apiserver/src/work.rs) count what a client's requests cause: each
/// watch event sent, each storage write, the request bodies decoded, the objects encoded
/// for storage and for the watcher, the handshake and client-chain signature checks.
#[tokio::test]
async fn work_counters_count_what_requests_cause() {
    // No controllers: nothing but this test writes config maps (after start-up) or watches them.
    let s = Server::start_apiserver();
    let admin = s.http();
    let ns = s.create_namespace("work").await;
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let scrape = |c: reqwest::Client| {
        let url = format!("{}/metrics", s.url);
        async move {
            let m = send(c.get(url)).await;
            m.expect_code(200, "/metrics");
            m.text
        }
    };
    let value = |text: &str, line: &str| sample(text, line).unwrap_or(0.0);
    let before = scrape(admin.clone()).await;

    let listed = send(admin.get(&url)).await;
    listed.expect_code(200, "list");
    let rv = listed.body["metadata"]["resourceVersion"].as_str().expect("a list resourceVersion").to_string();
    let mut watch = WatchLines::open(admin.get(format!("{url}?watch=true&resourceVersion={rv}"))).await;
    assert_eq!(watch.code, 200, "watch");
    let created = send(admin.post(&url).json(&configmap("t", serde_json::json!({"k": "v"})))).await;
    created.expect_code(201, "create");
    let mut updated = created.body.clone();
    updated["metadata"]["labels"] = serde_json::json!({"x": "y"});
    send(admin.put(format!("{url}/t")).json(&updated)).await.expect_code(200, "update");
    for want in ["ADDED", "MODIFIED"] {
        let ev = watch.next(Duration::from_secs(30)).await.expect("an event");
        assert_eq!(ev["type"], want, "{ev}");
    }
    // A user never seen before, on a connection of its own: one handshake signature and one
    // chain verification at least.
    let user = issue_user(&s, "work-counter", &[]);
    send(s.http_with_identity(&user.identity).get(format!("{}/version", s.url))).await.expect_code(200, "version");
    let after = scrape(admin.clone()).await;

    let delta = |line: &str| value(&after, line) - value(&before, line);
    let exact: &[(&str, f64)] = &[
        ("apiserver_watch_events_total{group=\"\",version=\"v1\",resource=\"configmaps\"}", 2.0),
        ("kustos_storage_writes_total{operation=\"create\",resource=\"configmaps\"}", 1.0),
        ("kustos_storage_writes_total{operation=\"update\",resource=\"configmaps\"}", 1.0),
        ("kustos_storage_writes_total{operation=\"delete\",resource=\"configmaps\"}", 0.0),
        ("kustos_object_encodes_total{format=\"json\",site=\"watch\"}", 2.0),
    ];
    for (line, want) in exact {
        assert_eq!(delta(line), *want, "{line}:\nbefore\n{before}\nafter\n{after}");
    }
    let at_least: &[(&str, f64)] = &[
        ("kustos_object_decodes_total{format=\"json\",site=\"request\"}", 2.0),
        ("kustos_object_encodes_total{format=\"json\",site=\"storage\"}", 2.0),
        ("kustos_object_decodes_total{format=\"json\",site=\"watch\"}", 2.0),
        ("kustos_object_encodes_total{format=\"json\",site=\"response\"}", 2.0),
        ("kustos_object_decodes_total{format=\"typed\",site=\"roundtrip\"}", 2.0),
        ("kustos_storage_reads_total{operation=\"list\"}", 1.0),
        ("kustos_storage_reads_total{operation=\"watch\"}", 1.0),
        ("kustos_signature_checks_total{what=\"tls_certificate_verify\"}", 1.0),
        ("kustos_signature_checks_total{what=\"client_certificate_chain\"}", 1.0),
    ];
    for (line, want) in at_least {
        assert!(delta(line) >= *want, "{line}: {} (want at least {want}):\n{after}", delta(line));
    }
    // The update was sent after the create's answer: two commits at least (either may hold
    // other writes too). The etcd backend commits nothing of its own.
    let commits =
        delta("kustos_sqlite_commits_total{waited=\"false\"}") + delta("kustos_sqlite_commits_total{waited=\"true\"}");
    match common::storage_backend() {
        "sqlite" => assert!(commits >= 2.0, "SQLite commits: {commits}:\n{after}"),
        _ => assert_eq!(commits, 0.0, "no SQLite store:\n{after}"),
    }
}
