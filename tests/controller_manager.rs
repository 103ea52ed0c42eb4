//! `kustos controller-manager` end to end: `kustos apiserver` (no controllers of its own)
//! plus controller-manager replicas pointed at it with its admin kubeconfig and CA. Two
//! replicas elect one leader on a Lease; the leader approves and signs a kubelet's client
//! CSR; after `kill -9` of the leader the other takes over and signs the next one; no CSR is
//! signed twice; SIGTERM releases the lease and exits 0; bad flags are one-line errors. The
//! health and metrics port is HTTPS with delegated authentication and authorization, as
//! kube-controller-manager's.
//!
//! Every wait is bounded; nothing asserts on how long anything took.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::kubelet::{
    bootstrap_token, client_for, replica_args, request_node_certificate, watch_certificates, Seen, KUBELET_CLIENT,
};
use common::{issue_user, kustos, send, token_user, unique, ControllerManager, Credentials, Server};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// Bound for each wait on the controllers or the election.
const WAIT: Duration = Duration::from_secs(60);

fn start(s: &Server, args: &[String]) -> ControllerManager {
    ControllerManager::start(s, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn leader_series(lease: &str) -> String {
    format!("kustos_leader_election_master_status{{name=\"{lease}\"}}")
}

fn signed_series() -> String {
    format!("kustos_csr_signed_total{{signer=\"{KUBELET_CLIENT}\"}}")
}

async fn holder(s: &Server, lease: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(s.kube_client().await, "kube-system");
    let l = leases.get_opt(lease).await.expect("reading the Lease")?;
    l.spec.and_then(|s| s.holder_identity)
}

/// Waits (bounded) until exactly one of `replicas` reports itself leader and the Lease has
/// a holder other than `not`; the leader's index and the holder.
async fn wait_for_leader(
    s: &Server,
    lease: &str,
    replicas: &[&ControllerManager],
    not: Option<&str>,
) -> (usize, String) {
    let start = Instant::now();
    let mut last = (Vec::new(), None);
    for _ in 0..600 {
        let mut leading = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            if r.metric(&leader_series(lease)).await == Some(1.0) {
                leading.push(i);
            }
        }
        let h = holder(s, lease).await.filter(|h| !h.is_empty() && Some(h.as_str()) != not);
        if let ([one], Some(h)) = (leading.as_slice(), &h) {
            return (*one, h.clone());
        }
        last = (leading, h);
        if start.elapsed() > WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs: Vec<String> = replicas.iter().map(|r| r.stderr_tail()).collect();
    panic!("no single leader within {WAIT:?} (leading replicas, holder: {last:?}); logs:\n{}", logs.join("\n----\n"));
}

/// Waits (bounded) until the watch saw a certificate for `name`; whether it was Approved.
async fn wait_signed(seen: &Seen, admin: &kube::Client, name: &str, replicas: &[&ControllerManager]) {
    let start = Instant::now();
    for _ in 0..600 {
        if seen.lock().unwrap_or_else(|e| e.into_inner()).contains_key(name) {
            let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
            let csr = api.get(name).await.expect("reading the CSR");
            let approved = csr.status.and_then(|s| s.conditions).unwrap_or_default();
            assert!(
                approved.iter().any(|c| c.type_ == "Approved" && c.status == "True"),
                "CSR {name} was signed without an Approved condition: {approved:?}"
            );
            return;
        }
        if start.elapsed() > WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs: Vec<String> = replicas.iter().map(|r| r.stderr_tail()).collect();
    panic!("CSR {name} was not signed within {WAIT:?}; logs:\n{}", logs.join("\n----\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_replicas_leads_and_the_other_takes_over_after_kill_9() {
    let s = Server::start_apiserver();
    let admin = s.kube_client().await;
    let lease = unique("kcm");
    let (seen, watch) = watch_certificates(admin.clone());
    let a = start(&s, &replica_args(&s, &lease));
    let b = start(&s, &replica_args(&s, &lease));
    let replicas = [&a, &b];

    // Exactly one leads, and it is the Lease's holder.
    let (first, first_holder) = wait_for_leader(&s, &lease, &replicas, None).await;
    let standby = 1 - first;
    assert_eq!(replicas[standby].metric(&leader_series(&lease)).await, Some(0.0), "the standby's leader gauge");
    for (i, r) in replicas.iter().enumerate() {
        for path in ["/healthz", "/readyz"] {
            assert_eq!(r.get(path).await, (200, "ok".to_string()), "replica {i} {path}");
        }
    }

    // A kubelet with a bootstrap token asks for its client certificate: approved and signed.
    let token = bootstrap_token(&s, 'm').await;
    let boot = client_for(&token_user(&s, "kubelet-bootstrap", &token).kubeconfig).await;
    let csr1 = unique("node-csr");
    request_node_certificate(&boot, &csr1, &unique("n1")).await;
    wait_signed(&seen, &admin, &csr1, &replicas).await;
    let signed_by_first = replicas[first].metric(&signed_series()).await.unwrap_or(0.0);
    let approved_series = format!("kustos_csr_approved_total{{signer=\"{KUBELET_CLIENT}\"}}");
    assert_eq!(replicas[first].metric(&approved_series).await, Some(1.0), "the leader approved the CSR");
    assert_eq!(replicas[standby].metric(&signed_series()).await, None, "the standby signed nothing");

    // kill -9 the leader: the standby takes over (a new holder) and signs the next CSR.
    replicas[first].kill9();
    let (second, second_holder) = wait_for_leader(&s, &lease, &[replicas[standby]], Some(&first_holder)).await;
    assert_eq!(second, 0, "the only replica left leads");
    assert_ne!(second_holder, first_holder, "the Lease changed hands");
    let csr2 = unique("node-csr");
    request_node_certificate(&boot, &csr2, &unique("n2")).await;
    wait_signed(&seen, &admin, &csr2, &[replicas[standby]]).await;
    let signed_by_second = replicas[standby].metric(&signed_series()).await.unwrap_or(0.0);

    // No CSR signed twice: the replicas' counters add up to the CSRs, and the watch saw
    // exactly one certificate for each.
    assert_eq!(signed_by_first + signed_by_second, 2.0, "certificates issued by both replicas");
    {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        for name in [&csr1, &csr2] {
            assert_eq!(seen.get(name.as_str()).map(BTreeSet::len), Some(1), "distinct certificates of {name}");
        }
    }
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    let transitions = leases.get(&lease).await.expect("the Lease").spec.and_then(|s| s.lease_transitions);
    assert_eq!(transitions, Some(1), "leaseTransitions after one takeover");

    // SIGTERM: exit 0, and the lease is released for the next replica.
    let status = replicas[standby].terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status after SIGTERM: {status}\n{}", replicas[standby].stderr_tail());
    let released = leases.get(&lease).await.expect("the Lease").spec.unwrap_or_default();
    assert_eq!(released.holder_identity.as_deref().unwrap_or(""), "", "holder after release: {released:?}");
    assert_eq!(released.lease_duration_seconds, Some(1), "leaseDurationSeconds after release");
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_the_controllers_start_at_once_and_no_lease_is_written_and_logs_are_json() {
    let s = Server::start_apiserver();
    let admin = s.kube_client().await;
    let lease = unique("unused");
    let (seen, watch) = watch_certificates(admin.clone());
    let mut args = replica_args(&s, &lease);
    args.push("--leader-elect=false".into());
    args.push("--log-format=json".into());
    let cm = start(&s, &args);
    let token = bootstrap_token(&s, 'm').await;
    let boot = client_for(&token_user(&s, "kubelet-bootstrap", &token).kubeconfig).await;
    let name = unique("node-csr");
    request_node_certificate(&boot, &name, &unique("n")).await;
    wait_signed(&seen, &admin, &name, &[&cm]).await;
    assert_eq!(cm.metric(&signed_series()).await, Some(1.0), "signed counter");
    assert_eq!(cm.metric(&leader_series(&lease)).await, None, "no leader gauge without election");
    let leases: Api<Lease> = Api::namespaced(admin, "kube-system");
    assert!(leases.get_opt(&lease).await.expect("reading leases").is_none(), "no Lease was written");
    let status = cm.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status after SIGTERM: {status}\n{}", cm.stderr_tail());
    let logs = cm.stderr();
    let lines: Vec<&str> = logs.lines().collect();
    assert!(lines.len() > 1, "some logs: {logs}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("--log-format=json wrote a non-JSON line ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "a structured log record: {line}");
    }
    watch.abort();
}

#[test]
fn bad_flags_are_a_one_line_error_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let missing = dir.path().join("missing");
    let missing = missing.to_str().expect("UTF-8 path");
    let not_a_key = dir.path().join("not-a-key.pem");
    std::fs::write(&not_a_key, "hello").expect("writing a file");
    let not_a_key = not_a_key.to_str().expect("UTF-8 path");
    // Checked before the kubeconfig is read: it does not exist either.
    let kc = format!("--kubeconfig={missing}");
    let signing = [format!("--cluster-signing-cert-file={missing}"), format!("--cluster-signing-key-file={missing}")];
    // name, arguments, what the one line must say
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "lease not longer than the renew deadline",
            vec!["--leader-elect-lease-duration=3s".into(), "--leader-elect-renew-deadline=3s".into()],
            "must be greater than --leader-elect-renew-deadline",
        ),
        (
            "renew deadline not above the retry period",
            vec!["--leader-elect-renew-deadline=2s".into(), "--leader-elect-retry-period=2s".into()],
            "must be greater than --leader-elect-retry-period",
        ),
        ("unknown controller", vec!["--controllers=*,nope".into()], "not in the list of known controllers"),
        (
            "plain HTTP off loopback",
            vec!["--metrics-bind-address=0.0.0.0:8080".into()],
            "--metrics-bind-address 0.0.0.0:8080: plain HTTP without authentication is served on loopback addresses only",
        ),
        ("half a serving pair", vec![format!("--tls-cert-file={missing}")], "--tls-private-key-file go together"),
        ("csrsigning without a CA", vec![], "csrsigning needs a signing CA"),
        (
            "csrsigning by upstream's name, without a CA",
            vec!["--controllers=certificatesigningrequest-signing-controller".into()],
            "csrsigning needs a signing CA",
        ),
        ("signing files that do not exist", signing.to_vec(), missing),
        (
            "a service-account key that is not a key",
            vec!["--controllers=-csrsigning".into(), format!("--service-account-private-key-file={not_a_key}")],
            "--service-account-private-key-file",
        ),
        (
            "a kubeconfig that does not exist",
            vec!["--controllers=-csrsigning".into(), "--leader-elect=false".into()],
            "does not exist",
        ),
        (
            // csrsigning left out by upstream's name: no CA is asked for.
            "a kubeconfig that does not exist, upstream's names",
            vec![
                "--controllers=*,-certificatesigningrequest-signing-controller,bootstrap-signer-controller".into(),
                "--leader-elect=false".into(),
            ],
            "does not exist",
        ),
    ];
    for (name, args, want) in cases {
        let mut argv = vec!["controller-manager".to_string(), kc.clone()];
        argv.extend(args);
        let out = kustos(&argv.iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: exit status {}", out.status);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{name}: one line on stderr, got:\n{stderr}");
        assert!(lines[0].starts_with("error: ") && lines[0].contains(want), "{name}: {stderr}");
    }
    // Flags clap rejects (syntax) also fail without starting anything.
    for (name, arg) in [("bad duration", "--leader-elect-retry-period=soon"), ("bad log format", "--log-format=xml")] {
        let out = kustos(&["controller-manager", &kc, arg]);
        assert!(!out.status.success(), "{name}: exit status {}", out.status);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("error: ") && stderr.contains(arg.split('=').next().unwrap_or(arg)),
            "{name}: {stderr}"
        );
    }
}

/// A TCP proxy to `target` that can be cut: existing connections are dropped and new ones
/// closed at once, as a network partition between one replica and the apiserver.
struct Proxy {
    url: String,
    cut: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy");
        let url = format!("https://{}", listener.local_addr().expect("proxy address"));
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let target = target.to_string();
        let task = tokio::spawn({
            let (cut, conns) = (cut.clone(), conns.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if cut.load(std::sync::atomic::Ordering::SeqCst) {
                        continue; // dropped: closed at once
                    }
                    let target = target.clone();
                    let conn = tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    conns.lock().unwrap_or_else(|e| e.into_inner()).push(conn.abort_handle());
                }
            }
        });
        Proxy { url, cut, conns, task }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
        if cut {
            for c in self.conns.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                c.abort();
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.set_cut(true);
        self.task.abort();
    }
}

/// Waits (bounded) until `series` of `r` is `want`.
async fn wait_metric(r: &ControllerManager, series: &str, want: f64, what: &str) {
    let start = Instant::now();
    for _ in 0..600 {
        if r.metric(series).await == Some(want) {
            return;
        }
        if start.elapsed() > WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: {series} did not become {want} within {WAIT:?}; log:\n{}", r.stderr_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_steps_down_and_stays_standby_after_healing() {
    let s = Server::start_apiserver();
    let admin = s.kube_client().await;
    let lease = unique("kcm");
    let (seen, watch) = watch_certificates(admin.clone());
    // Replica a reaches the apiserver through a proxy (the serving certificate is for
    // 127.0.0.1, so TLS holds); b directly.
    let proxy = Proxy::start(&s.addr).await;
    let kubeconfig = std::fs::read_to_string(&s.kubeconfig).expect("reading the admin kubeconfig");
    assert!(kubeconfig.contains(&s.url), "the admin kubeconfig names {}", s.url);
    let proxied = s.work_dir().join(format!("{}.kubeconfig", unique("proxied")));
    std::fs::write(&proxied, kubeconfig.replace(&s.url, &proxy.url)).expect("writing the proxied kubeconfig");
    let a_args = replica_args(&s, &lease);
    let a =
        ControllerManager::start_with_kubeconfig(&s, &proxied, &a_args.iter().map(String::as_str).collect::<Vec<_>>());
    wait_metric(&a, &leader_series(&lease), 1.0, "a leads alone").await;
    let a_holder = holder(&s, &lease).await.expect("a holder");
    let b = start(&s, &replica_args(&s, &lease));
    assert_eq!(b.metric(&leader_series(&lease)).await, Some(0.0), "b stands by while a renews");

    // Partition a: it cannot renew, so it stops its controllers and stands by; b takes over.
    proxy.set_cut(true);
    wait_metric(&a, &leader_series(&lease), 0.0, "a steps down").await;
    assert!(a.stderr().contains("leaderelection lost"), "a says why:\n{}", a.stderr_tail());
    let (_, b_holder) = wait_for_leader(&s, &lease, &[&b], Some(&a_holder)).await;
    assert_ne!(b_holder, a_holder, "b holds the Lease");

    // b signs; after the partition heals, a sees b's Lease and stays standby.
    let token = bootstrap_token(&s, 'm').await;
    let boot = client_for(&token_user(&s, "kubelet-bootstrap", &token).kubeconfig).await;
    let name = unique("node-csr");
    request_node_certificate(&boot, &name, &unique("n")).await;
    wait_signed(&seen, &admin, &name, &[&a, &b]).await;
    proxy.set_cut(false);
    // a's candidate loop reads the Lease again (it logs nothing at info level while it
    // waits): give it a few retry periods, bounded by polling b's unchanged holder.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(holder(&s, &lease).await.as_deref(), Some(b_holder.as_str()), "b keeps the Lease");
        assert_eq!(a.metric(&leader_series(&lease)).await, Some(0.0), "a stays standby after healing");
    }
    assert_eq!(b.metric(&signed_series()).await, Some(1.0), "b signed the CSR");
    assert_eq!(a.metric(&signed_series()).await, None, "a signed nothing");
    assert_eq!(
        seen.lock().unwrap_or_else(|e| e.into_inner()).get(&name).map(BTreeSet::len),
        Some(1),
        "one certificate"
    );
    watch.abort();
}

/// The secure port answers as kube-controller-manager's: the probes are open to anyone, and
/// `/metrics` to whom the apiserver allows `get` on it — a bearer token (TokenReview, then
/// SubjectAccessReview) or a client certificate of the client CA; without credentials the
/// user is `system:anonymous` (403), and credentials that do not authenticate get 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_to_whom_the_apiserver_allows_and_the_probes_to_anyone() {
    use serde_json::json;
    let s = Server::start_apiserver();
    let admin = s.http();
    let ns = s.create_namespace("cm-auth").await;
    for sa in ["scraper", "nobody"] {
        send(admin.post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts", s.url)).json(&json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}
        })))
        .await
        .expect_code(201, "a service account");
    }
    let role = unique("metrics-reader");
    send(admin.post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterroles", s.url)).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    })))
    .await
    .expect_code(201, "the metrics reader role");
    send(admin.post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", s.url)).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [
            {"kind": "ServiceAccount", "name": "scraper", "namespace": ns},
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "cert-scraper"}
        ]
    })))
    .await
    .expect_code(201, "the metrics reader binding");
    let mut tokens = Vec::new();
    for sa in ["scraper", "nobody"] {
        let r = send(admin.post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", s.url)).json(&json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}
        })))
        .await;
        r.expect_code(201, "a service account token");
        tokens.push(r.body["status"]["token"].as_str().expect("a token").to_string());
    }
    let cert_scraper = issue_user(&s, "cert-scraper", &[]);
    let cert_nobody = issue_user(&s, "cert-nobody", &[]);
    let stranger = {
        let now = chrono::Utc::now();
        let ca = kustos_ca::Ca::generate("another-ca", chrono::Duration::hours(1), now).expect("another CA");
        let params = kustos_ca::IssueParams::client("cert-scraper", vec![], chrono::Duration::hours(1));
        let issued = ca.issue(params, now).expect("a certificate of another CA");
        [issued.key_pem.expect("a key").into_bytes(), b"\n".to_vec(), issued.cert_pem.into_bytes()].concat()
    };

    let mut args = replica_args(&s, &unique("unused"));
    args.push("--leader-elect=false".into());
    let cm = start(&s, &args);
    assert!(cm.url.starts_with("https://127.0.0.1:"), "{}", cm.url);

    let forbidden = |user: &str| format!("forbidden: User \"{user}\" cannot get path \"/metrics\"");
    let sa_user = |sa: &str| format!("system:serviceaccount:{ns}:{sa}");
    // who, credentials, path, status, the Status message (empty: the body is not a Status)
    let cases: Vec<(&str, Credentials, &str, u16, String)> = vec![
        ("anyone", Credentials::None, "/healthz", 200, String::new()),
        ("anyone", Credentials::None, "/readyz", 200, String::new()),
        ("anyone", Credentials::None, "/livez", 200, String::new()),
        ("anyone", Credentials::None, "/metrics", 403, forbidden("system:anonymous")),
        ("a token the apiserver rejects", Credentials::Token("not-a-token"), "/metrics", 401, "Unauthorized".into()),
        ("a token the apiserver rejects", Credentials::Token("not-a-token"), "/healthz", 401, "Unauthorized".into()),
        (
            "a service account without rights",
            Credentials::Token(&tokens[1]),
            "/metrics",
            403,
            forbidden(&sa_user("nobody")),
        ),
        ("a service account without rights", Credentials::Token(&tokens[1]), "/healthz", 200, String::new()),
        ("the bound service account", Credentials::Token(&tokens[0]), "/metrics", 200, String::new()),
        ("the bound certificate user", Credentials::Identity(&cert_scraper.identity), "/metrics", 200, String::new()),
        (
            "a certificate user without rights",
            Credentials::Identity(&cert_nobody.identity),
            "/metrics",
            403,
            forbidden("cert-nobody"),
        ),
        ("a certificate of another CA", Credentials::Identity(&stranger), "/metrics", 401, "Unauthorized".into()),
    ];
    for (who, credentials, path, code, message) in cases {
        let (got, body) = cm.get_as(path, credentials).await;
        assert_eq!(got, code, "{who} GET {path}: {body}\n{}", cm.stderr_tail());
        if message.is_empty() {
            let want = if path == "/metrics" { "# EOF" } else { "ok" };
            assert!(body.contains(want), "{who} GET {path}: {body}");
        } else {
            let v: serde_json::Value =
                serde_json::from_str(&body).unwrap_or_else(|e| panic!("{who}: a Status ({e}): {body}"));
            assert_eq!(v["kind"], "Status", "{who} GET {path}: {body}");
            assert_eq!(v["message"], message.as_str(), "{who} GET {path}: {body}");
            assert_eq!(v["code"], code, "{who} GET {path}: {body}");
            assert_eq!(v["reason"], if code == 401 { "Unauthorized" } else { "Forbidden" }, "{who}: {body}");
        }
    }
    // The admin (system:masters) reads the metrics too, and plain HTTP gets no answer.
    assert_eq!(cm.get("/metrics").await.0, 200, "the admin");
    let plain = cm.url.replacen("https://", "http://", 1);
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().expect("a client");
    let answer = client.get(format!("{plain}/metrics")).send().await;
    assert!(answer.is_err() || answer.is_ok_and(|r| r.status() == 400), "plain HTTP on the secure port");
}

/// Without `--client-ca-file` the client CA is the one kube-apiserver publishes in ConfigMap
/// kube-system/extension-apiserver-authentication, and a serving certificate given as files
/// is the one served. A controller-manager that may not read the ConfigMap stops with one
/// line, unless told to tolerate that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_ca_is_looked_up_in_the_cluster_and_the_serving_certificate_can_be_given() {
    use serde_json::json;
    let s = Server::start_apiserver();
    let admin = s.http();
    let pki = s.data_dir.join("pki");
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt")).expect("reading ca.crt");
    send(admin.post(format!("{}/api/v1/namespaces/kube-system/configmaps", s.url)).json(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication"},
        "data": {"client-ca-file": ca_pem}
    })))
    .await
    .expect_code(201, "the ConfigMap kube-apiserver publishes");
    let role = unique("metrics-reader");
    send(admin.post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterroles", s.url)).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    })))
    .await
    .expect_code(201, "the metrics reader role");
    send(admin.post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", s.url)).json(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "cert-scraper"}]
    })))
    .await
    .expect_code(201, "the metrics reader binding");

    // A serving certificate from the cluster CA, so the client can verify it.
    let ca = kustos_ca::Ca::from_pem(&ca_pem, &std::fs::read_to_string(pki.join("ca.key")).expect("ca.key"))
        .expect("the cluster CA");
    let params = kustos_ca::IssueParams::server(
        "kcm-serving",
        vec!["localhost".into()],
        vec![std::net::IpAddr::from([127, 0, 0, 1])],
        chrono::Duration::hours(1),
    );
    let serving = ca.issue(params, chrono::Utc::now()).expect("a serving certificate");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&crt, &serving.cert_pem).expect("writing tls.crt");
    std::fs::write(&key, serving.key_pem.as_deref().expect("a key")).expect("writing tls.key");

    let mut args = replica_args(&s, &unique("unused"));
    args.extend([
        "--leader-elect=false".into(),
        "--authentication-skip-lookup=false".into(),
        format!("--tls-cert-file={}", crt.display()),
        format!("--tls-private-key-file={}", key.display()),
    ]);
    let cm = start(&s, &args);
    let verifying = |identity: &[u8]| {
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .identity(reqwest::Identity::from_pem(identity).expect("an identity"))
            .no_proxy()
            .timeout(Duration::from_secs(30));
        for c in reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes()).expect("the CA") {
            b = b.add_root_certificate(c);
        }
        b.build().expect("a client")
    };
    // who, status, the Status message (empty: the metrics)
    let cases = [
        ("cert-scraper", 200, String::new()),
        ("cert-nobody", 403, "forbidden: User \"cert-nobody\" cannot get path \"/metrics\"".to_string()),
    ];
    for (name, code, message) in cases {
        let user = issue_user(&s, name, &[]);
        let resp = verifying(&user.identity)
            .get(format!("{}/metrics", cm.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{name}: GET /metrics, verifying the served certificate: {e}"));
        assert_eq!(resp.status().as_u16(), code, "{name}\n{}", cm.stderr_tail());
        let body = resp.text().await.unwrap_or_default();
        if message.is_empty() {
            assert!(body.contains("# EOF"), "{name}: {body}");
        } else {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            assert_eq!(v["message"], message.as_str(), "{name}: the certificate named the user: {body}");
        }
    }

    // A user who may not read the ConfigMap: one line, non-zero exit; tolerated, it serves.
    let nobody = issue_user(&s, "kcm-nobody", &[]);
    let kubeconfig = format!("--kubeconfig={}", nobody.kubeconfig.display());
    let base = ["--controllers=-csrsigning", "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"];
    let out = kustos(&[&["controller-manager", kubeconfig.as_str()], &base[..]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {}: {stderr}", out.status);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty() && !l.contains(" WARN ")).collect();
    assert_eq!(lines.len(), 1, "one error line:\n{stderr}");
    for want in [
        "looking up configmap kube-system/extension-apiserver-authentication",
        "extension-apiserver-authentication-reader",
    ] {
        assert!(lines[0].starts_with("error: ") && lines[0].contains(want), "{want}: {stderr}");
    }
    let tolerated = ControllerManager::start_with_kubeconfig(
        &s,
        &nobody.kubeconfig,
        &[
            "--controllers=-csrsigning",
            "--leader-elect=false",
            "--authentication-skip-lookup=false",
            "--authentication-tolerate-lookup-failure",
        ],
    );
    assert_eq!(tolerated.get_as("/healthz", Credentials::None).await, (200, "ok".to_string()), "it serves");
}
