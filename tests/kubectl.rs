//! The real binary driven by the real `kubectl` (v1.32) with the admin kubeconfig, default
//! flags (so default `--validate=strict`, server-side printing, OpenAPI).

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{send, shared, unique, Server};
use serde_json::{json, Value};

fn write_file(s: &Server, name: &str, text: &str) -> String {
    let path = s.work_dir().join(format!("{}-{name}", unique("f")));
    std::fs::write(&path, text).expect("writing a manifest");
    path.to_string_lossy().into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let out = s.kubectl_ok(&a);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {} -o json is not JSON ({e}): {out}", args.join(" ")))
}

fn kubectl_ns(s: &Server, prefix: &str) -> String {
    let ns = unique(prefix);
    let out = s.kubectl_ok(&["create", "namespace", &ns]);
    assert!(out.contains(&format!("namespace/{ns} created")), "{out}");
    ns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_namespaces_lists_the_four_system_namespaces() {
    let s = shared();
    let out = s.kubectl_ok(&["get", "namespaces"]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"], "{out}");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            out.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&ns) && f.get(1) == Some(&"Active")
            }),
            "namespace {ns} Active in:\n{out}"
        );
    }
    let short = s.kubectl_ok(&["get", "ns", "default", "-o", "name"]);
    assert_eq!(short.trim(), "namespace/default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_shows_the_served_kinds_with_short_names() {
    let s = shared();
    let out = s.kubectl_ok(&["api-resources"]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    let find = |name: &str| rows.iter().find(|r| r.first() == Some(&name)).cloned();
    // (resource, short name if any, apiVersion, namespaced, kind)
    let want: &[(&str, Option<&str>, &str, &str, &str)] = &[
        ("configmaps", Some("cm"), "v1", "true", "ConfigMap"),
        ("namespaces", Some("ns"), "v1", "false", "Namespace"),
        ("secrets", None, "v1", "true", "Secret"),
        ("serviceaccounts", Some("sa"), "v1", "true", "ServiceAccount"),
        ("events", Some("ev"), "v1", "true", "Event"),
        ("leases", None, "coordination.k8s.io/v1", "true", "Lease"),
        ("certificatesigningrequests", Some("csr"), "certificates.k8s.io/v1", "false", "CertificateSigningRequest"),
        ("roles", None, "rbac.authorization.k8s.io/v1", "true", "Role"),
        ("rolebindings", None, "rbac.authorization.k8s.io/v1", "true", "RoleBinding"),
        ("clusterroles", None, "rbac.authorization.k8s.io/v1", "false", "ClusterRole"),
        ("clusterrolebindings", None, "rbac.authorization.k8s.io/v1", "false", "ClusterRoleBinding"),
    ];
    for (name, short, gv, namespaced, kind) in want {
        let row = find(name).unwrap_or_else(|| panic!("{name} missing from kubectl api-resources:\n{out}"));
        let mut expect: Vec<&str> = vec![name];
        if let Some(sn) = short {
            expect.push(sn);
        }
        expect.extend([*gv, *namespaced, *kind]);
        assert_eq!(row, expect, "api-resources row for {name}:\n{out}");
    }
    let stderr = stderr_of(&s.kubectl(&["api-resources"]));
    assert!(!stderr.contains("couldn't get resource list"), "discovery errors: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_from_a_file_then_get_yaml_shows_the_data() {
    let s = shared();
    let ns = kubectl_ns(&s, "kcreate");
    let f = write_file(
        &s,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fromfile\ndata:\n  greeting: hello\n  multi: |\n    line1\n    line2\n",
    );
    let out = s.kubectl_ok(&["create", "-f", &f, "-n", &ns]);
    assert!(out.contains("configmap/fromfile created"), "{out}");
    let yaml = s.kubectl_ok(&["get", "cm", "fromfile", "-n", &ns, "-o", "yaml"]);
    let v: Value = serde_yaml::from_str(&yaml).expect("kubectl -o yaml is YAML");
    assert_eq!(v["kind"], "ConfigMap", "{yaml}");
    assert_eq!(v["data"]["greeting"], "hello", "{yaml}");
    assert_eq!(v["data"]["multi"], "line1\nline2\n", "{yaml}");
    assert_eq!(v["metadata"]["namespace"], ns.as_str());
    let again = s.kubectl(&["create", "-f", &f, "-n", &ns]);
    assert!(!again.status.success(), "a second create must fail");
    assert!(stderr_of(&again).contains("AlreadyExists"), "{}", stderr_of(&again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_apply_creates_then_updates_and_removes_a_dropped_key() {
    let s = shared();
    let ns = kubectl_ns(&s, "kapply");
    let v1 = write_file(
        &s,
        "v1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n  b: \"2\"\n",
    );
    let out = s.kubectl_ok(&["apply", "-f", &v1, "-n", &ns]);
    assert!(out.contains("configmap/applied created"), "{out}");
    let got = json_of(&s, &["get", "cm", "applied", "-n", &ns]);
    assert_eq!(got["data"], json!({"a": "1", "b": "2"}));
    let last =
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap_or("");
    assert!(last.contains("\"b\":\"2\""), "last-applied annotation: {got}");

    let same = s.kubectl_ok(&["apply", "-f", &v1, "-n", &ns]);
    assert!(same.contains("configmap/applied unchanged"), "{same}");

    let v2 = write_file(
        &s,
        "v2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"10\"\n  c: \"3\"\n",
    );
    let out = s.kubectl_ok(&["apply", "-f", &v2, "-n", &ns]);
    assert!(out.contains("configmap/applied configured"), "{out}");
    let got = json_of(&s, &["get", "cm", "applied", "-n", &ns]);
    assert_eq!(got["data"], json!({"a": "10", "c": "3"}), "b removed, a changed, c added: {got}");
    let last =
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap_or("");
    assert!(last.contains("\"c\":\"3\"") && !last.contains("\"b\""), "annotation tracks the new file: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_annotate_set_overwrite_and_remove_metadata() {
    let s = shared();
    let ns = kubectl_ns(&s, "klabel");
    s.kubectl_ok(&["create", "configmap", "lab", "--from-literal=k=v", "-n", &ns]);
    let out = s.kubectl_ok(&["label", "cm", "lab", "env=prod", "tier=web", "-n", &ns]);
    assert!(out.contains("configmap/lab labeled"), "{out}");
    let out = s.kubectl_ok(&["annotate", "cm", "lab", "note=hello", "-n", &ns]);
    assert!(out.contains("configmap/lab annotated"), "{out}");
    let got = json_of(&s, &["get", "cm", "lab", "-n", &ns]);
    assert_eq!(got["metadata"]["labels"]["env"], "prod");
    assert_eq!(got["metadata"]["labels"]["tier"], "web");
    assert_eq!(got["metadata"]["annotations"]["note"], "hello");

    let clash = s.kubectl(&["label", "cm", "lab", "env=dev", "-n", &ns]);
    assert!(!clash.status.success(), "relabel without --overwrite must fail");
    s.kubectl_ok(&["label", "cm", "lab", "env=dev", "--overwrite", "-n", &ns]);
    s.kubectl_ok(&["label", "cm", "lab", "tier-", "-n", &ns]);
    s.kubectl_ok(&["annotate", "cm", "lab", "note-", "-n", &ns]);
    let got = json_of(&s, &["get", "cm", "lab", "-n", &ns]);
    assert_eq!(got["metadata"]["labels"], json!({"env": "dev"}), "{got}");
    assert!(got["metadata"]["annotations"].get("note").is_none(), "{got}");

    let sel = s.kubectl_ok(&["get", "cm", "-n", &ns, "-l", "env=dev", "-o", "name"]);
    assert_eq!(sel.trim(), "configmap/lab");
    let shown = s.kubectl_ok(&["get", "cm", "lab", "-n", &ns, "--show-labels"]);
    assert!(shown.contains("env=dev"), "--show-labels: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_with_merge_json_and_strategic_types() {
    let s = shared();
    let ns = kubectl_ns(&s, "kpatch");
    s.kubectl_ok(&["create", "configmap", "pat", "--from-literal=a=1", "--from-literal=b=2", "-n", &ns]);
    let out = s.kubectl_ok(&["patch", "cm", "pat", "-n", &ns, "--type=merge", "-p", r#"{"data":{"c":"3","b":null}}"#]);
    assert!(out.contains("configmap/pat patched"), "{out}");
    let out =
        s.kubectl_ok(&["patch", "cm", "pat", "-n", &ns, "--type=json", "-p", r#"[{"op":"remove","path":"/data/a"}]"#]);
    assert!(out.contains("configmap/pat patched"), "{out}");
    s.kubectl_ok(&["patch", "cm", "pat", "-n", &ns, "-p", r#"{"metadata":{"labels":{"s":"1"}}}"#]);
    let got = json_of(&s, &["get", "cm", "pat", "-n", &ns]);
    assert_eq!(got["data"], json!({"c": "3"}), "{got}");
    assert_eq!(got["metadata"]["labels"]["s"], "1", "{got}");
    let bad = s.kubectl(&[
        "patch",
        "cm",
        "pat",
        "-n",
        &ns,
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/data/c","value":"nope"},{"op":"remove","path":"/data/c"}]"#,
    ]);
    assert!(!bad.status.success(), "a failing test op must fail");
    let got = json_of(&s, &["get", "cm", "pat", "-n", &ns]);
    assert_eq!(got["data"], json!({"c": "3"}), "unchanged after the failing patch: {got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_waits_until_the_object_is_gone() {
    let s = shared();
    let ns = kubectl_ns(&s, "kdel");
    s.kubectl_ok(&["create", "configmap", "bye", "-n", &ns]);
    let out = s.kubectl_ok(&["delete", "cm", "bye", "-n", &ns, "--timeout=60s"]);
    assert!(out.contains("configmap \"bye\" deleted"), "{out}");
    let gone = s.kubectl(&["get", "cm", "bye", "-n", &ns]);
    assert!(!gone.status.success() && stderr_of(&gone).contains("NotFound"), "{}", stderr_of(&gone));

    // A finalizer keeps the object: kubectl's wait must time out instead of returning.
    let f = write_file(
        &s,
        "held.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [\"example.com/hold\"]\n",
    );
    s.kubectl_ok(&["create", "-f", &f, "-n", &ns]);
    let waited = s.kubectl(&["delete", "cm", "held", "-n", &ns, "--timeout=3s"]);
    assert!(!waited.status.success(), "delete --timeout=3s of a finalized object must not report success");
    assert!(stderr_of(&waited).contains("timed out"), "kubectl waited and timed out: {}", stderr_of(&waited));
    let still = json_of(&s, &["get", "cm", "held", "-n", &ns]);
    assert!(still["metadata"]["deletionTimestamp"].is_string(), "{still}");
    s.kubectl_ok(&["patch", "cm", "held", "-n", &ns, "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#]);
    let out = s.kubectl_ok(&["wait", "--for=delete", "cm/held", "-n", &ns, "--timeout=60s"]);
    drop(out);
    let gone = s.kubectl(&["get", "cm", "held", "-n", &ns]);
    assert!(stderr_of(&gone).contains("NotFound"), "{}", stderr_of(&gone));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_objects_created_after_it_started() {
    let s = shared();
    let ns = kubectl_ns(&s, "kwatch");
    let mut cmd = s.kubectl_command(&["get", "cm", "-n", &ns, "-w", "--request-timeout=90s"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawning kubectl get -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let wait_for = |name: &str, seen: &mut Vec<String>| -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        if seen.iter().any(|l| l.split_whitespace().next() == Some(name)) {
            return true;
        }
        while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            let hit = line.split_whitespace().next() == Some(name);
            seen.push(line);
            if hit {
                return true;
            }
        }
        false
    };
    s.kubectl_ok(&["create", "configmap", "w1", "--from-literal=a=b", "-n", &ns]);
    let ok1 = wait_for("w1", &mut seen);
    let ok2 = if ok1 {
        s.kubectl_ok(&["create", "configmap", "w2", "-n", &ns]);
        wait_for("w2", &mut seen)
    } else {
        false
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok1 && ok2, "kubectl get -w output did not show w1 and w2:\n{}", seen.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_csr_spec_mentions_signer_name() {
    let s = shared();
    let out = s.kubectl_ok(&["explain", "csr.spec"]);
    assert!(out.contains("signerName"), "{out}");
    assert!(out.contains("CertificateSigningRequest"), "{out}");
    let out = s.kubectl_ok(&["explain", "configmap.data"]);
    assert!(out.contains("data"), "{out}");
}

fn csr_yaml(name: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let pem = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  \
         request: {b64}\n  signerName: example.com/e2e\n  expirationSeconds: 3600\n  usages:\n  - digital signature\n  \
         - client auth\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_csr_shows_the_upstream_columns_and_certificate_approve_works() {
    let s = shared();
    let name = unique("kcsr");
    let f = write_file(&s, "csr.yaml", &csr_yaml(&name));
    let out = s.kubectl_ok(&["create", "-f", &f]);
    assert!(out.contains(&format!("certificatesigningrequest.certificates.k8s.io/{name} created")), "{out}");
    let out = s.kubectl_ok(&["get", "csr", &name]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"], "{out}");
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(row.len(), 6, "{out}");
    assert_eq!(row[0], name);
    assert_eq!(row[2], "example.com/e2e");
    assert_eq!(row[3], "kustos-admin");
    assert_eq!(row[4], "60m", "requested duration of 3600 s: {out}");
    assert_eq!(row[5], "Pending");

    let out = s.kubectl_ok(&["certificate", "approve", &name]);
    assert!(out.contains("approved"), "{out}");
    let out = s.kubectl_ok(&["get", "csr", &name, "--no-headers"]);
    let row: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(row.last(), Some(&"Approved"), "{out}");
    let v = json_of(&s, &["get", "csr", &name]);
    assert_eq!(v["status"]["conditions"][0]["reason"], "KubectlApprove", "{v}");
    let described = s.kubectl_ok(&["describe", "csr", &name]);
    assert!(described.contains("example.com/e2e") && described.contains("Approved"), "{described}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_an_unknown_field_fails_and_names_the_field() {
    let s = shared();
    let ns = kubectl_ns(&s, "kstrict");
    let f = write_file(
        &s,
        "bogus.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bogus\nbogusField: x\ndata:\n  a: b\n",
    );
    let out = s.kubectl(&["create", "-f", &f, "-n", &ns]);
    assert!(!out.status.success(), "strict validation must refuse the unknown field");
    assert!(stderr_of(&out).contains("bogusField"), "error names the field: {}", stderr_of(&out));
    let gone = s.kubectl(&["get", "cm", "bogus", "-n", &ns]);
    assert!(stderr_of(&gone).contains("NotFound"), "nothing created: {}", stderr_of(&gone));
    // And with validation off it is created, without the field.
    s.kubectl_ok(&["create", "-f", &f, "-n", &ns, "--validate=false"]);
    let v = json_of(&s, &["get", "cm", "bogus", "-n", &ns]);
    assert!(v.get("bogusField").is_none(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_configmaps_in_all_namespaces_has_a_namespace_column() {
    let s = shared();
    let ns1 = kubectl_ns(&s, "kall");
    let ns2 = kubectl_ns(&s, "kall");
    s.kubectl_ok(&["create", "configmap", "first", "-n", &ns1]);
    s.kubectl_ok(&["create", "configmap", "second", "-n", &ns2]);
    let out = s.kubectl_ok(&["get", "cm", "-A"]);
    let header: Vec<&str> = out.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header.first(), Some(&"NAMESPACE"), "{out}");
    assert_eq!(header.get(1), Some(&"NAME"), "{out}");
    let has = |ns: &str, n: &str| {
        out.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&ns) && f.get(1) == Some(&n)
        })
    };
    assert!(has(&ns1, "first") && has(&ns2, "second"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_removes_it_and_its_configmaps() {
    let s = shared();
    let ns = kubectl_ns(&s, "kns");
    s.kubectl_ok(&["create", "configmap", "inside", "--from-literal=a=b", "-n", &ns]);
    s.kubectl_ok(&["create", "configmap", "inside2", "-n", &ns]);
    let out = s.kubectl_ok(&["delete", "namespace", &ns, "--timeout=90s"]);
    assert!(out.contains(&format!("namespace \"{ns}\" deleted")), "{out}");
    let gone = s.kubectl(&["get", "namespace", &ns]);
    assert!(!gone.status.success() && stderr_of(&gone).contains("NotFound"), "{}", stderr_of(&gone));
    let http = s.http();
    let left = send(
        http.get(format!("{}/api/v1/configmaps", s.url))
            .query(&[("fieldSelector", format!("metadata.namespace={ns}"))]),
    )
    .await;
    left.expect_code(200, "list configmaps of the deleted namespace");
    assert_eq!(left.body["items"], json!([]), "{}", left.text);
    // The name can be reused.
    s.kubectl_ok(&["create", "namespace", &ns]);
    s.kubectl_ok(&["delete", "namespace", &ns, "--timeout=90s"]);
}
