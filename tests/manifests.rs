//! The operator-hosted manifests and the Dockerfile, checked as a cluster admin's tools see
//! them: `kubectl kustomize manifests/` builds; every object passes `kubernetes-validate
//! --strict`; `checkov` finds no failed Kubernetes or Dockerfile check, and every skip carries
//! a reason; the RBAC is least-privilege in the ways a reviewer checks first; and the
//! arguments the Deployment and CronJob pass are ones the real binary accepts.
//!
//! `kubernetes-validate` and `checkov` come from PyPI (scripts/test.sh installs them); a
//! missing tool fails the test, it does not skip it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::run_bounded;
use serde_json::Value;

const TOOL_TIMEOUT: Duration = Duration::from_secs(300);
/// The Kubernetes version the objects are validated against (kubernetes-validate's schemas).
const KUBERNETES_VERSION: &str = "1.37.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A command-line tool from PATH, or a failure saying how to get it.
fn tool(name: &str) -> Command {
    let found =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file())).unwrap_or(false);
    assert!(found, "{name} is not on PATH: run `bash scripts/test.sh` (it installs it) or `pip install {name}`");
    Command::new(name)
}

/// `kubectl kustomize manifests/`: the YAML and its objects.
fn built() -> (String, Vec<Value>) {
    common::ensure_kubectl();
    let mut cmd = Command::new("kubectl");
    cmd.arg("kustomize").arg(repo().join("manifests"));
    let out = run_bounded(&mut cmd, None, TOOL_TIMEOUT, "kubectl kustomize manifests/");
    assert!(out.status.success(), "kubectl kustomize manifests/ failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let yaml = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    // kustomize separates documents with a `---` line.
    let objects: Vec<Value> = format!("\n{yaml}")
        .split("\n---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| serde_yaml::from_str(doc).unwrap_or_else(|e| panic!("a YAML document ({e}):\n{doc}")))
        .collect();
    (yaml, objects)
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("manifests/ has no {kind} {name}"))
}

fn write_temp(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a temporary file");
    path
}

#[test]
fn kustomize_builds_the_whole_operator_install() {
    let (_, objects) = built();
    let kinds: Vec<String> = objects
        .iter()
        .map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or("?"), o["metadata"]["name"].as_str().unwrap_or("?")))
        .collect();
    for want in [
        "Namespace/kustos-system",
        "ServiceAccount/kustos-controller-manager",
        "ServiceAccount/kustos-token-rotate",
        "Deployment/kustos-controller-manager",
        "PodDisruptionBudget/kustos-controller-manager",
        "CronJob/kustos-token-rotate",
        "NetworkPolicy/kustos",
        "CustomResourceDefinition/certificateapprovalpolicies.kustos.dev",
        "CertificateApprovalPolicy/kubelet-serving",
    ] {
        assert!(kinds.iter().any(|k| k == want), "{want} is missing from {kinds:?}");
    }

    let deploy = find(&objects, "Deployment", "kustos-controller-manager");
    assert_eq!(deploy["spec"]["replicas"], 2, "two replicas");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert_eq!(args.first(), Some(&"controller-manager"), "{args:?}");
    assert!(args.contains(&"--leader-elect=true"), "{args:?}");
    let controllers = args.iter().find_map(|a| a.strip_prefix("--controllers=")).expect("--controllers");
    for c in [
        "csrapproving",
        "csrsigning",
        "kube-apiserver-serving-clustertrustbundle-publisher",
        "signers",
        "podcertificaterequest-cleaner",
    ] {
        assert!(controllers.split(',').any(|n| n == c), "{c} runs: {controllers}");
    }
    assert!(
        kinds.iter().any(|k| k == "ClusterRole/kustos:controller:clustertrustbundle-publisher"),
        "the publisher's role: {kinds:?}"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true, "read-only root filesystem");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "no privilege escalation");
    assert_eq!(sc["runAsNonRoot"], true, "non-root");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "non-root Pod");
    // Health and metrics on kube-controller-manager's secure port, HTTPS, nothing in plain HTTP.
    assert!(args.contains(&"--secure-port=10257"), "{args:?}");
    assert!(!args.iter().any(|a| a.starts_with("--metrics-bind-address")), "no plain HTTP listener: {args:?}");
    assert_eq!(c["ports"], serde_json::json!([{"name": "https", "containerPort": 10257, "protocol": "TCP"}]));
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        assert!(get["path"].is_string(), "{probe}");
        assert_eq!((&get["port"], &get["scheme"]), (&Value::from("https"), &Value::from("HTTPS")), "{probe}");
    }
    let service = find(&objects, "Service", "kustos-controller-manager-metrics");
    assert_eq!(
        service["spec"]["ports"],
        serde_json::json!([{"name": "https-metrics", "port": 10257, "targetPort": "https", "protocol": "TCP"}]),
        "a ServiceMonitor scrapes the named HTTPS port"
    );
    let policy = find(&objects, "NetworkPolicy", "kustos");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], 10257, "the policy admits the secure port");
    // The secure port's delegated authentication and authorization, and who may scrape.
    let delegator = find(&objects, "ClusterRoleBinding", "kustos:controller-manager:auth-delegator");
    assert_eq!(delegator["roleRef"]["name"], "system:auth-delegator", "TokenReview and SubjectAccessReview");
    let reader = find(&objects, "RoleBinding", "kustos:controller-manager:authentication-reader");
    assert_eq!(
        (&reader["metadata"]["namespace"], &reader["roleRef"]["name"]),
        (&Value::from("kube-system"), &Value::from("extension-apiserver-authentication-reader")),
        "the client CA lookup"
    );
    let metrics_reader = find(&objects, "ClusterRole", "kustos:metrics-reader");
    assert_eq!(metrics_reader["rules"], serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]));
    for r in ["requests", "limits"] {
        assert!(c["resources"][r]["memory"].is_string() && c["resources"][r]["cpu"].is_string(), "resources.{r}");
    }
    let ca = pod["volumes"].as_array().expect("volumes").iter().find(|v| v["name"] == "ca").expect("the CA volume");
    assert_eq!(ca["secret"]["secretName"], "kustos-ca", "the CA key comes from a Secret");

    let job = find(&objects, "CronJob", "kustos-token-rotate");
    let job_args = &job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(job_args[0], "token", "{job_args}");
    assert_eq!(job_args[1], "rotate", "{job_args}");
}

#[test]
fn rbac_is_least_privilege() {
    let (_, objects) = built();
    let roles = objects.iter().filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role");
    let mut seen = 0;
    for role in roles {
        seen += 1;
        let name = role["metadata"]["name"].as_str().unwrap_or("?");
        for rule in role["rules"].as_array().unwrap_or(&Vec::new()) {
            let list = |k: &str| rule[k].as_array().cloned().unwrap_or_default();
            for k in ["verbs", "resources", "apiGroups"] {
                assert!(!list(k).iter().any(|v| v == "*"), "{name}: no wildcard {k}: {rule}");
            }
            let verbs = list("verbs");
            let certificates = list("apiGroups").iter().any(|g| g == "certificates.k8s.io");
            if certificates && list("resources").iter().any(|r| r == "signers") {
                assert!(!list("resourceNames").is_empty(), "{name}: approve/sign are scoped to signer names: {rule}");
            }
            for dangerous in ["escalate", "bind", "impersonate"] {
                assert!(!verbs.iter().any(|v| v == dangerous), "{name}: no {dangerous}: {rule}");
            }
        }
    }
    assert!(seen >= 6, "one role per controller, found {seen}");
    // The PodCertificateRequest controllers: the cleaner holds exactly upstream's rule; the
    // signer reads the requests and writes only their status.
    let cleaner = find(&objects, "ClusterRole", "kustos:controller:podcertificaterequest-cleaner");
    assert_eq!(
        cleaner["rules"],
        serde_json::json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["podcertificaterequests"],
                            "verbs": ["get", "list", "watch", "delete"]}])
    );
    let signers = find(&objects, "ClusterRole", "kustos:controller:signers");
    let pcr_rules: Vec<&Value> = signers["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| {
            r["resources"].as_array().is_some_and(|rs| {
                rs.iter().any(|x| x.as_str().is_some_and(|x| x.starts_with("podcertificaterequests")))
            })
        })
        .collect();
    assert_eq!(
        pcr_rules,
        [
            &serde_json::json!({"apiGroups": ["certificates.k8s.io"], "resources": ["podcertificaterequests"], "verbs": ["list", "watch"]}),
            &serde_json::json!({"apiGroups": ["certificates.k8s.io"], "resources": ["podcertificaterequests/status"], "verbs": ["update"]}),
        ]
    );
    // Each binding's subject is one of kustos' own service accounts.
    for b in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding") {
        for s in b["subjects"].as_array().expect("subjects") {
            assert_eq!(s["kind"], "ServiceAccount", "{b}");
            assert_eq!(s["namespace"], "kustos-system", "{b}");
        }
    }
}

#[test]
fn every_object_passes_kubernetes_validate() {
    let (_, objects) = built();
    let tmp = tempfile::tempdir().expect("tempdir");
    // Custom resources have no schema in kubernetes-validate; their CRD is validated, and the
    // policy itself is checked against the CRD by the apiserver in tests/csr_policy.rs.
    let builtin: Vec<&Value> = objects.iter().filter(|o| o["apiVersion"] != "kustos.dev/v1alpha1").collect();
    assert!(builtin.len() + 1 >= objects.len(), "only the default policy is a custom resource");
    let mut files = Vec::new();
    for (i, o) in builtin.iter().enumerate() {
        files.push(write_temp(tmp.path(), &format!("{i:02}.yaml"), &serde_yaml::to_string(o).expect("YAML")));
    }
    let mut cmd = tool("kubernetes-validate");
    cmd.args(["--strict", "--kubernetes-version", KUBERNETES_VERSION]).args(&files);
    let out = run_bounded(&mut cmd, None, TOOL_TIMEOUT, "kubernetes-validate");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubernetes-validate failed:\n{stdout}\n{stderr}");
    let passed = stdout.lines().chain(stderr.lines()).filter(|l| l.contains(" passed for resource ")).count();
    assert_eq!(passed, builtin.len(), "every object passed:\n{stdout}\n{stderr}");
}

/// checkov's JSON report for `file` in `framework`: (passed, failed, skipped check ids with
/// their reasons).
fn checkov(file: &Path, framework: &str) -> (u64, Vec<String>, Vec<(String, String)>) {
    let mut cmd = tool("checkov");
    cmd.arg("-f").arg(file).args(["--framework", framework, "--output", "json", "--quiet", "--skip-download"]);
    let out = run_bounded(&mut cmd, None, TOOL_TIMEOUT, &format!("checkov {framework}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("checkov's JSON ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    // One report per framework; an object when there is only one.
    let reports = match report {
        Value::Array(a) => a,
        other => vec![other],
    };
    let mut passed = 0;
    let mut failed = Vec::new();
    let mut skipped = Vec::new();
    for r in reports.iter().filter(|r| r["check_type"] == framework) {
        passed += r["summary"]["passed"].as_u64().unwrap_or(0);
        for f in r["results"]["failed_checks"].as_array().unwrap_or(&Vec::new()) {
            failed.push(format!("{} {} {}", f["check_id"], f["check_name"], f["resource"]));
        }
        for s in r["results"]["skipped_checks"].as_array().unwrap_or(&Vec::new()) {
            let reason = s["check_result"]["suppress_comment"].as_str().unwrap_or_default().to_string();
            skipped.push((format!("{} {}", s["check_id"], s["resource"]), reason));
        }
    }
    (passed, failed, skipped)
}

#[test]
fn checkov_finds_no_failed_kubernetes_check_and_every_skip_has_a_reason() {
    let (yaml, _) = built();
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = write_temp(tmp.path(), "kustos.yaml", &yaml);
    let (passed, failed, skipped) = checkov(&file, "kubernetes");
    assert!(passed > 100, "checkov ran its Kubernetes checks ({passed} passed)");
    assert!(failed.is_empty(), "failed checkov checks:\n{}", failed.join("\n"));
    for (check, reason) in &skipped {
        assert!(reason.trim().len() > 10, "{check} is skipped without a reason ({reason:?})");
    }
}

#[test]
fn checkov_finds_no_failed_dockerfile_check() {
    let (passed, failed, skipped) = checkov(&repo().join("Dockerfile"), "dockerfile");
    assert!(passed > 5, "checkov ran its Dockerfile checks ({passed} passed)");
    assert!(failed.is_empty(), "failed checkov checks:\n{}", failed.join("\n"));
    assert!(skipped.is_empty(), "Dockerfile checks skipped: {skipped:?}");
}

/// The arguments in the Deployment and the CronJob parse with the real binary: run without
/// a cluster, it gets past the flags and fails on what is missing (no kubeconfig, no CA
/// files), never on an argument.
#[test]
fn the_manifests_arguments_are_ones_kustos_accepts() {
    let (_, objects) = built();
    let deploy = find(&objects, "Deployment", "kustos-controller-manager");
    let job = find(&objects, "CronJob", "kustos-token-rotate");
    for (what, args) in [
        ("Deployment", &deploy["spec"]["template"]["spec"]["containers"][0]["args"]),
        ("CronJob", &job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]),
    ] {
        let args: Vec<&str> = args.as_array().expect("args").iter().filter_map(Value::as_str).collect();
        let out = common::kustos(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: without a cluster it must fail");
        assert!(
            !stderr.contains("unexpected argument") && !stderr.contains("invalid value") && !stderr.contains("Usage:"),
            "{what}: kustos refused the manifests' arguments {args:?}:\n{stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: one line on stderr:\n{stderr}");
    }
}

/// `manifests/examples/sa-signer/kube-apiserver.yaml`: a valid Pod (kubernetes-validate
/// --strict), kube-apiserver pointed at the socket the sidecar serves and given no key files,
/// checkov finds no failed check on the sidecar in its Pod (kube-apiserver's own container is
/// kubeadm's, left as it is), and the sidecar's arguments start the real `kustos sa-signer`
/// (its paths moved into a temporary directory).
#[test]
fn the_sa_signer_example_is_valid_and_its_signer_starts() {
    let path = repo().join("manifests/examples/sa-signer/kube-apiserver.yaml");
    let text = std::fs::read_to_string(&path).expect("reading the example");
    let pod: Value = serde_yaml::from_str(&text).expect("YAML");
    let mut cmd = tool("kubernetes-validate");
    cmd.args(["--strict", "--kubernetes-version", KUBERNETES_VERSION]).arg(&path);
    let out = run_bounded(&mut cmd, None, TOOL_TIMEOUT, "kubernetes-validate");
    assert!(out.status.success(), "kubernetes-validate failed:\n{}", String::from_utf8_lossy(&out.stdout));

    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["restartPolicy"], "Always", "a sidecar, started before kube-apiserver");
    let args: Vec<&str> = sidecar["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    let socket = args.iter().find_map(|a| a.strip_prefix("--socket=")).expect("--socket");
    let command: Vec<&str> =
        pod["spec"]["containers"][0]["command"].as_array().expect("command").iter().filter_map(Value::as_str).collect();
    assert!(command.contains(&format!("--service-account-signing-endpoint={socket}").as_str()), "{command:?}");
    assert!(
        !command.iter().any(|a| a.starts_with("--service-account-key-file") || a.starts_with("--service-account-signing-key-file")),
        "key files and the endpoint are mutually exclusive: {command:?}"
    );
    let mounts = |c: &Value| -> Vec<(String, String)> {
        c["volumeMounts"]
            .as_array()
            .expect("volumeMounts")
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap_or_default().to_string(),
                    m["mountPath"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let dir = Path::new(socket).parent().expect("the socket's directory").to_string_lossy().to_string();
    let shared =
        mounts(sidecar).into_iter().find(|(_, p)| *p == dir).expect("the sidecar mounts the socket's directory");
    assert!(mounts(&pod["spec"]["containers"][0]).contains(&shared), "kube-apiserver mounts it too");

    // checkov on the Pod with the sidecar as its only container.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut alone = pod.clone();
    let mut container = sidecar.clone();
    if let Some(c) = container.as_object_mut() {
        c.remove("restartPolicy");
    }
    alone["spec"]["containers"] = Value::Array(vec![container]);
    if let Some(spec) = alone["spec"].as_object_mut() {
        spec.remove("initContainers");
    }
    let file = write_temp(tmp.path(), "sidecar.yaml", &serde_yaml::to_string(&alone).expect("YAML"));
    let (passed, failed, skipped) = checkov(&file, "kubernetes");
    assert!(passed > 50, "checkov ran its Kubernetes checks ({passed} passed)");
    assert!(failed.is_empty(), "failed checkov checks on the sidecar:\n{}", failed.join("\n"));
    for (check, reason) in &skipped {
        assert!(reason.trim().len() > 10, "{check} is skipped without a reason ({reason:?})");
    }

    // The sidecar's arguments, with its paths in a temporary directory, start the signer.
    let legacy = tmp.path().join("legacy-sa.pub");
    let key = rcgen::KeyPair::generate().expect("a key");
    std::fs::write(&legacy, key.public_key_pem()).expect("writing a public key");
    let moved: Vec<String> = args
        .iter()
        .map(|a| match a.split_once('=') {
            Some(("--socket", _)) => format!("--socket={}", tmp.path().join("s.sock").display()),
            Some(("--data-dir", _)) => format!("--data-dir={}", tmp.path().join("data").display()),
            Some(("--legacy-key-file", _)) => format!("--legacy-key-file={}", legacy.display()),
            Some(("--metrics-bind-address", _)) => "--metrics-bind-address=127.0.0.1:0".to_string(),
            _ => a.to_string(),
        })
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kustos"))
        .args(&moved)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting kustos sa-signer");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let started = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.starts_with("kustos sa-signer is serving on") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let out = child.wait_with_output().expect("the signer's output");
    assert!(started, "kustos {moved:?} did not start:\n{}", String::from_utf8_lossy(&out.stderr));
}
