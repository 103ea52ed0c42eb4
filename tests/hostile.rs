//! The hostile-input corpus (`tests/corpus/`) against a fresh `kustos server` under a hard
//! memory limit: 512 MiB of address space (`RLIMIT_AS`), past which an allocation fails and
//! the process aborts. Every case must get an answer it may get (a 4xx `Status` with the
//! reason of its code, or a success), never a 5xx or a dropped connection (one exception:
//! upstream's 504 `Timeout` "Too large resource version" for a list at a revision the server
//! has not reached, which clients retry, is allowed where a case says so); the server must
//! stay alive and ready after each; and the growth of its resident memory while it handles
//! a case (the peak, `VmHWM`, reset before each case, less the resident size before it and
//! less the file-backed pages read back in meanwhile: [`Proc::growth_since`]) must stay
//! within the bound docs/SECURITY.md states: [`BOUND_PER_BYTE`] times the bytes
//! the case sent, plus [`BOUND_BASE`]. CPU time is measured and reported, not asserted
//! (machines differ). The table of every case is printed at the end, pass or fail.
//!
//! A case that kills the server is reported, the server restarted on its data, and the run
//! goes on, so that one run shows every failure.

mod common;
mod corpus;

use std::time::{Duration, Instant};

use common::{issue_user, send, MemoryLimit, Server};
use corpus::{Area, Case, Ctx, Framing, Who, CRD_GROUP, HTTP_LAYER};
use serde_json::{json, Value};

/// The server's address space: 512 MiB.
const ADDRESS_SPACE: u64 = 512 << 20;
/// Resident growth allowed per byte a case sends.
const BOUND_PER_BYTE: u64 = 64;
/// Resident growth allowed on top, whatever the size.
const BOUND_BASE: u64 = 64 << 20;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Resident sizes from `/proc/<pid>/status`, in bytes.
#[derive(Clone, Copy)]
struct Resident {
    all: u64,
    file: u64,
}

/// The server process, read through /proc.
struct Proc {
    pid: u32,
}

impl Proc {
    fn status(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default()
    }

    /// A `/proc/<pid>/status` field in bytes (`VmHWM`, `VmRSS`, ...).
    fn bytes(&self, key: &str) -> u64 {
        self.status()
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or(0)
    }

    /// Reset the peak resident size (`VmHWM`) to the current one.
    fn reset_peak(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5")
            .unwrap_or_else(|e| panic!("resetting the peak RSS of pid {} (/proc/<pid>/clear_refs): {e}", self.pid));
    }

    /// The resident size now, in all and of it file-backed.
    fn resident(&self) -> Resident {
        Resident { all: self.bytes("VmRSS"), file: self.bytes("RssFile") }
    }

    /// The peak since [`Proc::reset_peak`] less the resident size `before` it, less the
    /// file-backed pages (the executable's code, libraries) that came back meanwhile. `VmHWM`
    /// counts those pages too: code that the kernel dropped under memory pressure from other
    /// work on the machine is read back in as the case runs it, and that is not memory the
    /// case cost. The one error the other way: file-backed pages that were out at the moment
    /// of the peak and back by the end are subtracted although the peak did not hold them, so
    /// anonymous memory is under-counted by at most the file-backed pages read in between the
    /// peak and the end of the case; with nothing else pressing the page cache, none are.
    fn growth_since(&self, before: Resident) -> u64 {
        let peak = self.bytes("VmHWM").saturating_sub(before.all);
        peak.saturating_sub(self.bytes("RssFile").saturating_sub(before.file))
    }

    /// User plus system CPU time so far, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
        let at = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        at(11) + at(12)
    }

    /// Alive and not a zombie.
    fn alive(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).is_some_and(|state| state != "Z")
    }
}

fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// HTTPS clients for every identity and framing.
struct Clients {
    url: String,
    ca: Vec<u8>,
    admin: Vec<u8>,
    node: Vec<u8>,
    bootstrap: String,
    service_account: String,
}

impl Clients {
    fn client(&self, identity: Option<&[u8]>, http1: bool) -> reqwest::Client {
        let mut b = reqwest::Client::builder().use_rustls_tls().tls_built_in_root_certs(false);
        for ca in reqwest::Certificate::from_pem_bundle(&self.ca).expect("the cluster CA") {
            b = b.add_root_certificate(ca);
        }
        if let Some(pem) = identity {
            b = b.identity(reqwest::Identity::from_pem(pem).expect("an identity PEM"));
        }
        if http1 {
            b = b.http1_only();
        }
        b.timeout(REQUEST_TIMEOUT).no_proxy().build().expect("an HTTP client")
    }

    /// The request of `case` as its identity, over its framing, with its body.
    fn request(&self, case: &Case, body: Vec<u8>) -> reqwest::RequestBuilder {
        let http1 = case.framing != Framing::H2;
        let (identity, token) = match case.who {
            Who::Admin => (Some(self.admin.as_slice()), None),
            Who::Node => (Some(self.node.as_slice()), None),
            Who::Bootstrap => (None, Some(self.bootstrap.as_str())),
            Who::ServiceAccount => (None, Some(self.service_account.as_str())),
            Who::Anonymous | Who::Token => (None, None),
        };
        let mut req = self.client(identity, http1).request(case.method.clone(), format!("{}{}", self.url, case.path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        for (k, v) in &case.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        match case.framing {
            Framing::H1Chunked(size) => {
                let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body.chunks(size).map(|c| Ok(c.to_vec())).collect();
                req.body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            }
            _ if body.is_empty() => req,
            _ => req.body(body),
        }
    }
}

/// What one send of a case got.
struct Answer {
    code: Option<u16>,
    reason: String,
    /// Why the answer is not one the case may get; None when it is.
    problem: Option<String>,
}

/// The reason a `Status` of this code carries.
fn reasons(code: u16) -> &'static [&'static str] {
    match code {
        400 => &["BadRequest"],
        401 => &["Unauthorized"],
        403 => &["Forbidden"],
        404 => &["NotFound"],
        405 => &["MethodNotAllowed"],
        406 => &["NotAcceptable"],
        409 => &["AlreadyExists", "Conflict"],
        410 => &["Expired", "Gone"],
        413 => &["RequestEntityTooLarge"],
        415 => &["UnsupportedMediaType"],
        422 => &["Invalid"],
        429 => &["TooManyRequests"],
        504 => &["Timeout"],
        _ => &[],
    }
}

/// Judge an answer: `code` must be one of `expect`; an error answer must be a `Status` of
/// that code with its reason (except the HTTP layer's own refusals).
fn judge(expect: &[u16], code: u16, body: &[u8]) -> Answer {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let reason = v["reason"].as_str().unwrap_or("").to_string();
    let excerpt = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    let problem = if !expect.contains(&code) {
        Some(format!("answered {code}, expected one of {expect:?}: {}", excerpt()))
    } else if code >= 400 && !(HTTP_LAYER.contains(&code) && v.is_null()) {
        if v["kind"] != "Status" || v["code"].as_u64() != Some(u64::from(code)) || v["status"] != "Failure" {
            Some(format!("a {code} without a Status body: {}", excerpt()))
        } else if !reasons(code).contains(&reason.as_str()) {
            Some(format!("a {code} with reason {reason:?}, expected one of {:?}", reasons(code)))
        } else {
            None
        }
    } else {
        None
    };
    Answer { code: Some(code), reason, problem }
}

async fn send_once(clients: &Clients, case: &Case, body: Vec<u8>) -> Answer {
    let resp = match clients.request(case, body).send().await {
        Ok(r) => r,
        Err(e) => return Answer { code: None, reason: String::new(), problem: Some(format!("no answer: {e:?}")) },
    };
    let code = resp.status().as_u16();
    if case.watch && code == 200 {
        // The head is enough: a watch that started streaming is a success.
        drop(resp);
        return judge(&case.expect, code, b"");
    }
    match resp.bytes().await {
        Ok(b) => judge(&case.expect, code, &b),
        Err(e) => {
            Answer { code: Some(code), reason: String::new(), problem: Some(format!("the answer broke off: {e:?}")) }
        }
    }
}

/// One row of the report.
struct Row {
    name: String,
    who: Who,
    area: Area,
    sent: usize,
    answer: String,
    growth: u64,
    cpu_ms: u64,
    wall_ms: u128,
    problems: Vec<String>,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.growth as f64 / self.sent.max(1) as f64
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The growth a case of `sent` bytes may cause.
fn bound(sent: usize) -> u64 {
    BOUND_PER_BYTE * sent as u64 + BOUND_BASE
}

/// The server answers /readyz 200 within a few seconds.
async fn ready(clients: &Clients) -> Result<(), String> {
    let admin = clients.client(Some(&clients.admin), false);
    let mut last = String::new();
    for _ in 0..50 {
        match admin.get(format!("{}/readyz", clients.url)).send().await {
            Ok(r) if r.status().as_u16() == 200 => return Ok(()),
            Ok(r) => last = format!("HTTP {}", r.status()),
            Err(e) => last = format!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("/readyz is not 200: {last}"))
}

/// The identities and objects the cases refer to.
async fn prepare(s: &Server) -> (Clients, Ctx) {
    let node = common::unique("hostile-node");
    let node_user = issue_user(s, &format!("system:node:{node}"), &["system:nodes"]);
    let (admin_cert, admin_key) = s.admin_identity_pem();
    let mut admin = admin_key;
    admin.push(b'\n');
    admin.extend(admin_cert);
    let http = s.http();
    let as_node = s.http_with_identity(&node_user.identity);
    let registered = send(
        as_node
            .post(format!("{}/api/v1/nodes", s.url))
            .json(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})),
    )
    .await;
    registered.expect_code(201, "the node registers itself");
    let node_uid = registered.body["metadata"]["uid"].as_str().expect("the Node's uid").to_string();
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"}, "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}});
    send(as_node.post(format!("{}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", s.url)).json(&lease))
        .await
        .expect_code(201, "the node's Lease");
    let ns = s.create_namespace("hostile").await;
    send(
        http.post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts", s.url))
            .json(&json!({"metadata": {"name": "intruder"}})),
    )
    .await
    .expect_code(201, "a service account");
    let token = send(
        http.post(format!("{}/api/v1/namespaces/{ns}/serviceaccounts/intruder/token", s.url))
            .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})),
    )
    .await;
    token.expect_code(201, "a token for the service account");
    let service_account = token.body["status"]["token"].as_str().expect("status.token").to_string();
    let bootstrap = common::kubelet::bootstrap_token(s, 'h').await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("things.{CRD_GROUP}")},
        "spec": {"group": CRD_GROUP, "scope": "Namespaced",
                 "names": {"plural": "things", "singular": "thing", "kind": "Thing", "listKind": "ThingList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    send(http.post(format!("{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", s.url)).json(&crd))
        .await
        .expect_code(201, "the corpus's CRD");
    let shapes = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("shapes.{CRD_GROUP}")},
        "spec": {"group": CRD_GROUP, "scope": "Namespaced",
                 "names": {"plural": "shapes", "singular": "shape", "kind": "Shape", "listKind": "ShapeList"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": {
                         "d": {"type": "array", "items": {"type": "object",
                               "properties": {"x": {"type": "integer", "default": 7}}}},
                         "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                         "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                               "items": {"type": "object", "required": ["k"],
                                         "properties": {"k": {"type": "string"}}}}}}}}}}]}
    });
    send(http.post(format!("{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", s.url)).json(&shapes))
        .await
        .expect_code(201, "the corpus's CRD with a schema");
    for plural in ["things", "shapes"] {
        let list = format!("/apis/{CRD_GROUP}/v1/namespaces/{ns}/{plural}");
        s.wait_for_object(&list, "the custom resource is served", Duration::from_secs(30), |_| true).await;
    }
    let clients =
        Clients { url: s.url.clone(), ca: s.ca_pem(), admin, node: node_user.identity, bootstrap, service_account };
    (clients, Ctx { node, node_uid, ns, crd_plural: "things", schemed_plural: "shapes" })
}

fn print_report(rows: &[Row], idle: (u64, u64), end: (u64, u64)) {
    println!(
        "\nhostile corpus: {} cases; server under RLIMIT_AS {} MiB; bound: growth <= {BOUND_PER_BYTE} x bytes sent + {} MiB",
        rows.len(),
        ADDRESS_SPACE >> 20,
        BOUND_BASE >> 20
    );
    println!(
        "server at idle: VmRSS {:.1} MiB, VmSize {:.1} MiB; at the end: VmRSS {:.1} MiB, VmPeak {:.1} MiB",
        mib(idle.0),
        mib(idle.1),
        mib(end.0),
        mib(end.1)
    );
    println!(
        "{:<66} {:<14} {:>10} {:<28} {:>9} {:>8} {:>8} {:>7}",
        "case", "identity", "bytes", "answer", "peak MiB", "CPU ms", "wall ms", "peak/N"
    );
    for r in rows {
        let mut name = r.name.clone();
        if name.len() > 66 {
            name.truncate(63);
            name.push_str("...");
        }
        let mark = match (r.problems.is_empty(), r.area) {
            (true, _) => "",
            (false, Area::General) => "  FAIL",
            (false, Area::Yaml) => "  FAIL (yaml)",
            (false, Area::Managed) => "  FAIL (managed)",
        };
        println!(
            "{name:<66} {:<14} {:>10} {:<28} {:>9.1} {:>8} {:>8} {:>7.1}{mark}",
            r.who.label(),
            r.sent,
            r.answer,
            mib(r.growth),
            r.cpu_ms,
            r.wall_ms,
            r.ratio()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_corpus_under_a_memory_limit() {
    let mut s = Server::start_limited(&[], MemoryLimit { address_space: ADDRESS_SPACE, env: Vec::new() });
    let (mut clients, ctx) = prepare(&s).await;
    let built = Instant::now();
    let cases = corpus::all(&ctx);
    println!("corpus of {} cases built in {:.1?}", cases.len(), built.elapsed());
    let tick_ms = 1000 / clock_ticks_per_second().max(1);
    let mut proc = Proc { pid: s.pid() };
    // Let the controllers settle after the first start.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = (proc.bytes("VmRSS"), proc.bytes("VmSize"));
    let mut rows = Vec::new();
    let started = Instant::now();
    for case in &cases {
        let case_started = Instant::now();
        proc.reset_peak();
        let before = proc.resident();
        let cpu_before = proc.cpu_ticks();
        let mut answers = Vec::new();
        for i in 0..case.repeat {
            let body = if case.repeat > 1 {
                String::from_utf8_lossy(&case.body).replace("{i}", &i.to_string()).into_bytes()
            } else {
                case.body.clone()
            };
            let a = send_once(&clients, case, body).await;
            let stop = a.problem.is_some();
            answers.push(a);
            if stop {
                break;
            }
        }
        if case.path.starts_with(corpus::CSRS) && case.method == reqwest::Method::POST {
            // What the controllers do with a stored CSR (approve, sign) belongs to the case.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut growth = proc.growth_since(before);
        let cpu_ms = proc.cpu_ticks().saturating_sub(cpu_before) * tick_ms;
        if growth > bound(case.bytes_sent()) && case.repeat == 1 && proc.alive() {
            // Background work (controllers taking in an earlier case's stored object) lands in
            // whichever case runs: a case over the bound is sent once more after the server has
            // settled, and fails only when it is over the bound both times with the same answer.
            tokio::time::sleep(Duration::from_secs(3)).await;
            proc.reset_peak();
            let again = proc.resident();
            let retry = send_once(&clients, case, case.body.clone()).await;
            // Only the same answer measures the same work (a create sent again may be a cheap 409).
            if retry.code.is_some() && retry.code == answers.last().and_then(|a| a.code) {
                growth = growth.min(proc.growth_since(again));
            }
        }
        let mut problems: Vec<String> = answers.iter().filter_map(|a| a.problem.clone()).collect();
        let last = answers.last();
        let answer = match last.and_then(|a| a.code) {
            Some(code) => format!("{code} {}", last.map(|a| a.reason.as_str()).unwrap_or("")).trim().to_string(),
            None => "no answer".into(),
        };
        let wall_ms = case_started.elapsed().as_millis();
        let sent = case.bytes_sent();
        // An aborting server may still be alive for a moment: ask it (waiting up to 5 s), then
        // look again.
        let readiness = if proc.alive() { ready(&clients).await } else { Err("not running".into()) };
        let alive = proc.alive();
        if !alive {
            let log = s.stderr_tail();
            let last: Vec<&str> = log.lines().rev().take(4).collect();
            problems.push(format!("the server died; its last log lines: {:?}", last));
        } else if let Err(e) = readiness {
            problems.push(e);
        }
        if growth > bound(sent) {
            problems.push(format!(
                "resident memory grew {:.1} MiB, over the bound {:.1} MiB",
                mib(growth),
                mib(bound(sent))
            ));
        }
        rows.push(Row {
            name: case.name.clone(),
            who: case.who,
            area: case.area,
            sent,
            answer,
            growth,
            cpu_ms,
            wall_ms,
            problems,
        });
        if !alive {
            // Go on with a server restarted on the same data (tokens and identities still hold).
            s.restart();
            clients.url = s.url.clone();
            proc = Proc { pid: s.pid() };
            ready(&clients).await.unwrap_or_else(|e| panic!("the restarted server is not ready: {e}"));
        }
    }
    let end = (proc.bytes("VmRSS"), proc.bytes("VmPeak"));
    print_report(&rows, idle, end);
    println!("{} cases in {:.0?}", rows.len(), started.elapsed());
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| format!("{} ({}, {:?}): {}", r.name, r.who.label(), r.area, r.problems.join("; ")))
        .collect();
    assert!(failed.is_empty(), "{} of {} cases failed:\n{}", failed.len(), rows.len(), failed.join("\n"));
}
