//! YAML alias bombs end to end: bodies of at most 45 KB whose aliases would expand to gigabytes
//! (one anchor referenced thousands of times, a billion-laughs ladder, aliases in flow
//! collections, merge keys naming aliases) and documents nested 5,000 deep are refused
//! with a 400 `Status` as a create body and as an apply patch, sent by the identities that
//! can send them in a cluster (a bootstrap token, a node), and the server keeps serving with
//! its peak memory far below what the expansion would take. The command line reads a
//! kubeconfig bomb with a one-line error. A 3 MiB YAML list costs the server a bounded
//! multiple of its size, and merge keys merge.

mod common;

use common::{assert_status, issue_user, send, unique, Server};

const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

/// What the server may have resident at its peak after every bomb: the largest bomb, a
/// 10 KB string aliased ~180,000 times, would take ~1.8 GB expanded.
const MAX_PEAK_RSS_KB: u64 = 768 * 1024;

/// The shapes, each under `head` (an `apiVersion`, `kind` and `metadata` the target
/// accepts): name, body, what the refusal says.
fn bombs(head: &str) -> Vec<(&'static str, String, &'static str)> {
    let aliasing = "yaml: document contains excessive aliasing";
    let refs = |name: &str, n: usize| vec![format!("*{name}"); n].join(",");
    // A 10 KB string, a ladder of lists of 100 aliases over it, and 1,500 more aliases.
    let string_ladder = format!(
        "{head}x-a: &a \"{}\"\nx-l1: &l1 [{}]\nx-l2: &l2 [{}]\nx-l3: &l3 [{}]\nx-p: [{}]\n",
        "x".repeat(10_000),
        refs("a", 100),
        refs("l1", 100),
        refs("l2", 100),
        refs("a", 1500)
    );
    let mut laughs =
        format!("{head}x-a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..10 {
        laughs.push_str(&format!("x-a{i}: &a{i} [{}]\n", refs(&format!("a{}", i - 1), 9)));
    }
    let flow = format!(
        "{head}x-a: &a {{k: [{}]}}\nx-b: [{}]\n",
        vec!["v"; 200].join(","),
        vec!["[*a, *a, *a]"; 2000].join(",")
    );
    let mut merge = format!("{head}x-m0: &m0 {{k: [{}]}}\n", vec!["v"; 20].join(","));
    for i in 1..12 {
        merge.push_str(&format!("x-m{i}: &m{i}\n  <<: [*m{p}, *m{p}]\n  n: [*m{p}, *m{p}, *m{p}]\n", p = i - 1));
    }
    let merge_one =
        format!("{head}x-a: &a {{k: [{}]}}\nx-b: [{}]\n", vec!["v"; 200].join(","), vec!["{<<: *a}"; 3000].join(","));
    let deep = format!("{head}x-deep: {}1{}\n", "[".repeat(5_000), "]".repeat(5_000));
    // 200 KB: a parser that reads it all before counting levels takes minutes of CPU.
    let deeper = format!("{head}x-deep: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let deep_maps = format!("{head}x-deep: {}1{}\n", "{a: ".repeat(50_000), "}".repeat(50_000));
    vec![
        ("a 10 KB string aliased from a ladder", string_ladder, aliasing),
        ("billion laughs", laughs, aliasing),
        ("aliases in flow collections", flow, aliasing),
        ("merge keys naming lists of aliases, nested", merge, aliasing),
        ("a merge key naming one alias, thousands of times", merge_one, aliasing),
        ("nesting 5,000 deep", deep, "yaml: the document nests more than 127 levels deep"),
        ("flow lists nested 100,000 deep", deeper, "yaml: the document nests more than 127 levels deep"),
        ("flow mappings nested 50,000 deep", deep_maps, "yaml: the document nests more than 127 levels deep"),
    ]
}

/// The server still answers `/readyz`.
async fn still_serving(s: &Server, what: &str) {
    let r = send(s.http().get(format!("{}/readyz", s.url))).await;
    assert_eq!(r.code, 200, "{what}: /readyz after the attack: {}", r.text);
}

/// The peak resident size of the server process (`VmHWM`), in KiB.
fn peak_rss_kb(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).expect("reading the server's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

fn assert_refused(r: &common::Reply, want: &str, what: &str) {
    assert_status(r, 400, Some("BadRequest"), what);
    let message = r.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(want), "{what}: {}", &message[..message.len().min(300)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_bombs_are_refused_as_bodies_and_apply_patches() {
    let s = Server::start();
    let token = common::kubelet::bootstrap_token(&s, 'y').await;
    let boot = s.anonymous();
    let node_name = unique("yaml-node");
    let node = s.http_with_identity(&issue_user(&s, &format!("system:node:{node_name}"), &["system:nodes"]).identity);

    let ssr_head = "apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\n";
    let csr_head =
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {generateName: y-}\n";
    let lease_head = format!("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {node_name}}}\n");
    for (shape, body, want) in bombs(ssr_head) {
        let what = format!("SelfSubjectReview by a bootstrap token: {shape}");
        let r = send(
            boot.post(format!("{}{SSR}", s.url))
                .bearer_auth(&token)
                .header("content-type", "application/yaml")
                .body(body),
        )
        .await;
        assert_refused(&r, want, &what);
        still_serving(&s, &what).await;
    }
    for (shape, body, want) in bombs(csr_head) {
        let what = format!("CSR create by a bootstrap token: {shape}");
        let r = send(
            boot.post(format!("{}{CSRS}", s.url))
                .bearer_auth(&token)
                .header("content-type", "application/yaml")
                .body(body),
        )
        .await;
        assert_refused(&r, want, &what);
        still_serving(&s, &what).await;
    }
    for (shape, body, want) in bombs(&lease_head) {
        let what = format!("apply patch of its Lease by a node: {shape}");
        let r = send(
            node.patch(format!("{}{LEASES}/{node_name}?fieldManager=kubelet", s.url))
                .header("content-type", "application/apply-patch+yaml")
                .body(body),
        )
        .await;
        assert_refused(&r, want, &what);
        still_serving(&s, &what).await;
    }
    // The same identities are still served: a normal YAML body with a few aliases.
    let ok = format!("{ssr_head}metadata: &m {{}}\nstatus: *m\n");
    let r = send(
        boot.post(format!("{}{SSR}", s.url)).bearer_auth(&token).header("content-type", "application/yaml").body(ok),
    )
    .await;
    assert_eq!(r.code, 201, "a YAML SelfSubjectReview with an alias: {}", r.text);
    let peak = peak_rss_kb(&s);
    assert!(peak < MAX_PEAK_RSS_KB, "the server peaked at {peak} KiB resident");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_duplicate_keys_are_reported_as_upstream_reports_them() {
    let s = common::shared();
    let node_name = unique("yaml-dup-node");
    let node = s.http_with_identity(&issue_user(&s, &format!("system:node:{node_name}"), &["system:nodes"]).identity);
    let body = "apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\nmetadata: {}\nmetadata:\n  labels: {}\n";
    let r = send(
        node.post(format!("{}{SSR}?fieldValidation=Strict", s.url))
            .header("content-type", "application/yaml")
            .body(body),
    )
    .await;
    assert_refused(&r, "strict decoding error: line 5: key \"metadata\" already set in map", "Strict");
    let r = send(
        node.post(format!("{}{SSR}?fieldValidation=Warn", s.url)).header("content-type", "application/yaml").body(body),
    )
    .await;
    assert_eq!(r.code, 201, "Warn: {}", r.text);
    let warnings: Vec<String> =
        r.headers.get_all("warning").iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
    assert_eq!(warnings, ["299 - \"line 5: key \\\"metadata\\\" already set in map\""], "Warn");

    // A megabyte of one key repeated: answered, with at most 100 warnings.
    let many = format!("apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\n{}", "x: 1\n".repeat(200_000));
    let r = send(
        node.post(format!("{}{SSR}?fieldValidation=Warn", s.url)).header("content-type", "application/yaml").body(many),
    )
    .await;
    assert_eq!(r.code, 201, "a megabyte of duplicates: {}", &r.text[..r.text.len().min(300)]);
    let warnings = r.headers.get_all("warning").iter().count();
    assert!((1..=101).contains(&warnings), "{warnings} warnings");
    still_serving(&s, "duplicates").await;
}

#[test]
fn the_command_line_refuses_a_kubeconfig_bomb_in_one_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let head = "apiVersion: v1\nkind: Config\ncurrent-context: x\n";
    for (shape, body, want) in bombs(head) {
        let path = dir.path().join("bomb.kubeconfig");
        std::fs::write(&path, body).expect("writing the kubeconfig");
        let path = path.to_string_lossy().into_owned();
        let out = common::kustos(&["token", "list", "--kubeconfig", &path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{shape}: exited {}", out.status);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{shape}: {stderr}");
        assert!(stderr.contains(want), "{shape}: {stderr}");
    }
}

/// What a 3 MiB YAML body may add to the server's peak resident size: the JSON value it
/// becomes is ~20 times the text of a list of one-digit numbers; a parser that keeps every
/// event of the document first (what this replaced) took ~75 times.
const MAX_WIDE_BODY_GROWTH_KB: u64 = 40 * 3 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_yaml_body_costs_a_bounded_multiple_of_its_size() {
    let s = Server::start();
    let head = "apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\nx-list: [";
    let mut body = String::with_capacity(3 << 20);
    body.push_str(head);
    while body.len() < (3 << 20) - 16 {
        body.push_str("1,");
    }
    body.push_str("1]\n");
    let before = peak_rss_kb(&s);
    let r = send(s.http().post(format!("{}{SSR}", s.url)).header("content-type", "application/yaml").body(body)).await;
    assert!(r.code < 500, "a 3 MiB list: {} {}", r.code, &r.text[..r.text.len().min(300)]);
    let growth = peak_rss_kb(&s).saturating_sub(before);
    assert!(growth < MAX_WIDE_BODY_GROWTH_KB, "a 3 MiB YAML list raised the peak by {growth} KiB");
    still_serving(&s, "a 3 MiB list").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_keys_in_a_body_are_merged() {
    let s = common::shared();
    let name = unique("yaml-merge");
    let body = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  <<: [{{a: \"1\", b: \"1\"}}, {{c: \"3\", a: \"0\"}}]\n  b: \"2\"\n"
    );
    let r = send(
        s.http()
            .post(format!("{}/api/v1/namespaces/default/configmaps", s.url))
            .header("content-type", "application/yaml")
            .body(body),
    )
    .await;
    assert_eq!(r.code, 201, "a ConfigMap with a merge key: {}", r.text);
    assert_eq!(r.body["data"], serde_json::json!({"a": "1", "b": "2", "c": "3"}));
}
