//! `/openapi/v2` in gnostic's protobuf form, as kubectl reads it: kubectl 1.27 and 1.28 fetch
//! only that form for client-side `apply`, `diff` and `explain` (of built-in kinds and of a
//! custom resource), and kubectl 1.32 falls back to it to validate a kind the v3 documents
//! have no PATCH operation for (a TokenReview made with `kubectl create -f`).

mod common;

use std::path::Path;
use std::process::Output;

use common::{shared, unique, Server};
use serde_json::Value;

/// `<kubectl> --kubeconfig <admin> <args>` with `stdin`, bounded.
fn run(s: &Server, kubectl: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    s.kubectl_bin(kubectl, args, stdin)
}

fn ok(s: &Server, kubectl: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(s, kubectl, args, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{kubectl:?} {} failed:\n{stdout}\n{}\nserver log:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        s.stderr_tail()
    );
    stdout
}

fn config_map(name: &str, ns: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n{data}")
}

/// Client-side apply (create, then a change a three-way strategic merge makes), `diff` before
/// the change, and `explain configmap.data`, with one kubectl.
fn apply_diff_explain(version: &str) {
    let s = shared();
    let kubectl = common::kubectl_version(version);
    let ns = unique("v2pb");
    ok(&s, &kubectl, &["create", "namespace", &ns], None);

    let first = config_map("settings", &ns, "  color: red\n  size: small\n");
    let out = ok(&s, &kubectl, &["apply", "-f", "-"], Some(&first));
    assert!(out.contains("configmap/settings created"), "{out}");
    let annotation = ok(
        &s,
        &kubectl,
        &[
            "get",
            "cm",
            "settings",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration}",
        ],
        None,
    );
    assert!(annotation.contains("\"color\":\"red\""), "{annotation}");

    // `size` is dropped and `color` changed: diff shows both and exits 1 (differences found).
    let second = config_map("settings", &ns, "  color: blue\n");
    let diff = run(&s, &kubectl, &["diff", "-f", "-"], Some(&second));
    let diff_out = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert_eq!(diff.status.code(), Some(1), "{diff_out}\n{}", String::from_utf8_lossy(&diff.stderr));
    assert!(diff_out.contains("-  color: red") && diff_out.contains("+  color: blue"), "{diff_out}");
    assert!(diff_out.contains("-  size: small"), "{diff_out}");

    let out = ok(&s, &kubectl, &["apply", "-f", "-"], Some(&second));
    assert!(out.contains("configmap/settings configured"), "{out}");
    let data = ok(&s, &kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.data}"], None);
    let data: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{data}: {e}"));
    assert_eq!(data, serde_json::json!({"color": "blue"}));
    // Nothing left to change.
    let diff = run(&s, &kubectl, &["diff", "-f", "-"], Some(&second));
    assert_eq!(diff.status.code(), Some(0), "{}", String::from_utf8_lossy(&diff.stdout));

    let explain = ok(&s, &kubectl, &["explain", "configmap.data"], None);
    assert!(explain.contains("KIND:") && explain.contains("ConfigMap"), "{explain}");
    assert!(explain.contains("data") && explain.contains("map[string]string"), "{explain}");
    ok(&s, &kubectl, &["delete", "namespace", &ns, "--wait=false"], None);
}

#[test]
fn kubectl_1_27_applies_diffs_and_explains() {
    apply_diff_explain("1.27");
}

#[test]
fn kubectl_1_28_applies_diffs_and_explains() {
    apply_diff_explain("1.28");
}

/// kubectl 1.27's client-side apply of a custom resource: its models come from the v2
/// document, which must carry the CRD's definition.
#[test]
fn kubectl_1_27_applies_a_custom_resource() {
    let s = shared();
    let kubectl = common::kubectl_version("1.27");
    let group = format!("{}.v2pb.example.com", unique("g"));
    let crd = format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer, description: How big the widget is.}}
              mode: {{type: string, enum: ["on", "off"]}}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {{type: string}}
                    port: {{type: integer}}
"#
    );
    ok(&s, &kubectl, &["apply", "-f", "-"], Some(&crd));
    ok(
        &s,
        &kubectl,
        &["wait", "--for", "condition=Established", &format!("crd/widgets.{group}"), "--timeout=30s"],
        None,
    );
    let ns = unique("v2pb-cr");
    ok(&s, &kubectl, &["create", "namespace", &ns], None);
    let widget = |size: u32, port: u32| {
        format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: {ns}\nspec:\n  size: {size}\n  mode: \"on\"\n  ports:\n  - name: http\n    port: {port}\n"
        )
    };
    let out = ok(&s, &kubectl, &["apply", "-f", "-"], Some(&widget(1, 80)));
    assert!(out.contains("created"), "{out}");
    let out = ok(&s, &kubectl, &["apply", "-f", "-"], Some(&widget(3, 8080)));
    assert!(out.contains("configured"), "{out}");
    let spec = ok(&s, &kubectl, &["get", &format!("widgets.{group}"), "w1", "-n", &ns, "-o", "jsonpath={.spec}"], None);
    let spec: Value = serde_json::from_str(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(spec, serde_json::json!({"size": 3, "mode": "on", "ports": [{"name": "http", "port": 8080}]}));
    let explain = ok(&s, &kubectl, &["explain", &format!("widgets.{group}.spec.size")], None);
    assert!(explain.contains("How big the widget is."), "{explain}");
    ok(&s, &kubectl, &["delete", "namespace", &ns, "--wait=false"], None);
    ok(&s, &kubectl, &["delete", "crd", &format!("widgets.{group}"), "--wait=false"], None);
}

/// kubectl 1.32 finds no PATCH operation for TokenReview in the v3 documents (there is none
/// upstream either) and reads the v2 document as protobuf to validate it.
#[test]
fn kubectl_1_32_creates_a_token_review_through_the_v2_fallback() {
    let s = shared();
    let kubectl = common::kubectl_version("1.32");
    let ns = unique("v2pb-tr");
    ok(&s, &kubectl, &["create", "namespace", &ns], None);
    ok(&s, &kubectl, &["create", "serviceaccount", "reviewer", "-n", &ns], None);
    let token = ok(&s, &kubectl, &["create", "token", "reviewer", "-n", &ns], None);
    let review = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token.trim()},
    });
    let file = s.work_dir().join(format!("{}.json", unique("tokenreview")));
    std::fs::write(&file, review.to_string()).unwrap_or_else(|e| panic!("writing {file:?}: {e}"));
    let file = file.to_string_lossy().into_owned();
    let out = run(&s, &kubectl, &["create", "-f", &file, "-o", "json", "-v=8"], None);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubectl 1.32 create -f tokenreview.json failed:\n{stdout}\n{stderr}");
    // It took the v2 path: the protobuf form was asked for and served.
    let lines: Vec<&str> = stderr.lines().collect();
    let get = lines
        .iter()
        .position(|l| l.contains("GET ") && l.contains("/openapi/v2"))
        .unwrap_or_else(|| panic!("kubectl did not fetch /openapi/v2:\n{stderr}"));
    let after = &lines[get..];
    assert!(
        after
            .iter()
            .take_while(|l| !l.contains("Response Status"))
            .any(|l| l.contains("Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf")),
        "{stderr}"
    );
    let status = after.iter().find(|l| l.contains("Response Status")).copied().unwrap_or("");
    assert!(status.contains("200 OK"), "{status}");
    let created: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"));
    assert_eq!(created["kind"], "TokenReview");
    assert_eq!(created["status"]["authenticated"], true, "{created}");
    assert_eq!(created["status"]["user"]["username"], format!("system:serviceaccount:{ns}:reviewer"));
    ok(&s, &kubectl, &["delete", "namespace", &ns, "--wait=false"], None);
}
