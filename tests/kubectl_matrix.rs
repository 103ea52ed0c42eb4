//! The everyday kubectl matrix: every kubectl from 1.27 to 1.33 (the binaries beside the
//! default one) runs the same 24 steps an admin's day is made of against the real binary:
//! client-side apply (create, unchanged, configured), diff, server-side apply over what
//! client-side apply set (ownership taken over, the last-applied annotation kept current, a
//! later client-side apply still pruning), patch (strategic, merge, JSON), label, wait,
//! events, auth whoami / can-i, create token, explain. Each test reports the steps that
//! failed, with kubectl's output, and how many of the 24 passed.

mod common;

use std::path::Path;
use std::process::Output;

use base64::Engine;
use common::{unique, Server};
use serde_json::Value;

/// What one step found wrong.
type Step = Result<(), String>;

/// The steps' results, in order.
struct Matrix<'a> {
    s: &'a Server,
    kubectl: &'a Path,
    results: Vec<(&'static str, Step)>,
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `Err` with `what` unless `cond`.
fn check(cond: bool, what: impl FnOnce() -> String) -> Step {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

impl Matrix<'_> {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.s.kubectl_bin(self.kubectl, args, stdin)
    }

    /// kubectl's stdout when it succeeds, else its output as the step's error.
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let out = self.run(args, stdin);
        let (stdout, stderr) = text(&out);
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!("`kubectl {}` failed ({}):\n{stdout}{stderr}", args.join(" "), out.status))
        }
    }

    fn json(&self, args: &[&str]) -> Result<Value, String> {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.ok(&a, None)?;
        serde_json::from_str(&out).map_err(|e| format!("`kubectl {}` is not JSON ({e}): {out}", a.join(" ")))
    }

    fn step(&mut self, name: &'static str, f: impl FnOnce(&Self) -> Step) {
        let result = f(self);
        self.results.push((name, result));
    }

    /// Panics listing the failed steps unless all passed.
    fn finish(self, version: &str) {
        let total = self.results.len();
        let failed: Vec<String> =
            self.results.iter().filter_map(|(name, r)| r.as_ref().err().map(|e| format!("- {name}: {e}"))).collect();
        assert!(
            failed.is_empty(),
            "kubectl {version}: {}/{total} steps passed; failed:\n{}\nserver log:\n{}",
            total - failed.len(),
            failed.join("\n"),
            self.s.stderr_tail()
        );
        assert_eq!(total, 24, "the matrix has 24 steps");
    }
}

fn config_map(ns: &str, data: &[(&str, &str)]) -> String {
    let mut y = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n");
    for (k, v) in data {
        y.push_str(&format!("  {k}: {v}\n"));
    }
    y
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The 24 steps with one kubectl.
fn everyday(version: &str) {
    let s = common::shared();
    let kubectl = common::kubectl_version(version);
    let mut m = Matrix { s: &s, kubectl: &kubectl, results: Vec::new() };
    let ns = unique(&format!("matrix{}", version.replace('.', "")));
    m.ok(&["create", "namespace", &ns], None).unwrap_or_else(|e| panic!("kubectl {version}: {e}"));
    let n = ns.as_str();
    let first = config_map(n, &[("color", "red"), ("size", "small")]);
    let second = config_map(n, &[("color", "green"), ("size", "small")]);
    let server_side = config_map(n, &[("color", "blue"), ("size", "small"), ("shape", "round")]);
    let data =
        |m: &Matrix| -> Result<Value, String> { Ok(m.json(&["get", "cm", "settings", "-n", n])?["data"].clone()) };

    m.step("apply creates", |m| {
        let out = m.ok(&["apply", "-f", "-"], Some(&first))?;
        check(out.contains("configmap/settings created"), || out)
    });
    m.step("apply again is unchanged", |m| {
        let out = m.ok(&["apply", "-f", "-"], Some(&first))?;
        check(out.contains("configmap/settings unchanged"), || out)
    });
    m.step("diff shows a change (exit 1)", |m| {
        let out = m.run(&["diff", "-f", "-"], Some(&second));
        let (stdout, stderr) = text(&out);
        check(
            out.status.code() == Some(1) && stdout.contains("-  color: red") && stdout.contains("+  color: green"),
            || format!("{}:\n{stdout}{stderr}", out.status),
        )
    });
    m.step("apply changes a value", |m| {
        let out = m.ok(&["apply", "-f", "-"], Some(&second))?;
        check(out.contains("configmap/settings configured"), || out)?;
        let d = data(m)?;
        check(d["color"] == "green", || d.to_string())
    });
    m.step("diff of the applied file is empty (exit 0)", |m| {
        let out = m.run(&["diff", "-f", "-"], Some(&second));
        let (stdout, stderr) = text(&out);
        check(out.status.success() && stdout.is_empty(), || format!("{}:\n{stdout}{stderr}", out.status))
    });
    m.step("apply --server-side changes what client-side apply set", |m| {
        let out = m.ok(&["apply", "--server-side", "-f", "-"], Some(&server_side))?;
        check(out.contains("configmap/settings serverside-applied"), || out)?;
        let d = data(m)?;
        check(d["color"] == "blue" && d["shape"] == "round", || d.to_string())
    });
    m.step("server-side apply owns the fields, client-side apply none", |m| {
        let obj = m.json(&["get", "cm", "settings", "-n", n, "--show-managed-fields"])?;
        let entries = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
        let fields = |manager: &str, op: &str| {
            entries.iter().find(|e| e["manager"] == manager && e["operation"] == op).map(|e| e["fieldsV1"].clone())
        };
        let kubectl = fields("kubectl", "Apply").unwrap_or_default();
        let csa_data = fields("kubectl-client-side-apply", "Update").map(|f| f["f:data"].clone());
        check(
            ["f:color", "f:size", "f:shape"].iter().all(|k| kubectl["f:data"][k].is_object())
                && csa_data.is_none_or(|d| d.is_null()),
            || format!("{entries:?}"),
        )
    });
    m.step("the last-applied annotation follows the server-side apply", |m| {
        let obj = m.json(&["get", "cm", "settings", "-n", n])?;
        let last = obj["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap_or_default();
        let last: Value = serde_json::from_str(last).map_err(|e| format!("{e}: {obj}"))?;
        check(last["data"]["shape"] == "round" && last["data"]["color"] == "blue", || obj.to_string())
    });
    m.step("apply --server-side again stores nothing", |m| {
        let rv =
            |m: &Matrix| m.ok(&["get", "cm", "settings", "-n", n, "-o", "jsonpath={.metadata.resourceVersion}"], None);
        let before = rv(m)?;
        m.ok(&["apply", "--server-side", "-f", "-"], Some(&server_side))?;
        let after = rv(m)?;
        check(before == after, || format!("{before} became {after}"))
    });
    m.step("client-side apply after it prunes what only the server-side apply set", |m| {
        let out = m.ok(&["apply", "-f", "-"], Some(&second))?;
        check(out.contains("configmap/settings configured"), || out)?;
        let d = data(m)?;
        check(d == serde_json::json!({"color": "green", "size": "small"}), || d.to_string())
    });
    m.step("patch (strategic merge)", |m| {
        m.ok(&["patch", "cm", "settings", "-n", n, "-p", r#"{"data":{"p1":"1"}}"#], None)?;
        let d = data(m)?;
        check(d["p1"] == "1", || d.to_string())
    });
    m.step("patch --type merge", |m| {
        m.ok(&["patch", "cm", "settings", "-n", n, "--type", "merge", "-p", r#"{"data":{"p1":null,"p2":"2"}}"#], None)?;
        let d = data(m)?;
        check(d.get("p1").is_none() && d["p2"] == "2", || d.to_string())
    });
    m.step("patch --type json", |m| {
        let p = r#"[{"op":"test","path":"/data/p2","value":"2"},{"op":"replace","path":"/data/p2","value":"3"}]"#;
        m.ok(&["patch", "cm", "settings", "-n", n, "--type", "json", "-p", p], None)?;
        let d = data(m)?;
        check(d["p2"] == "3", || d.to_string())
    });
    let labels = |m: &Matrix| -> Result<Value, String> {
        Ok(m.json(&["get", "cm", "settings", "-n", n])?["metadata"]["labels"].clone())
    };
    m.step("label", |m| {
        let out = m.ok(&["label", "cm", "settings", "-n", n, "team=a"], None)?;
        check(out.contains("configmap/settings labeled"), || out)?;
        let l = labels(m)?;
        check(l["team"] == "a", || l.to_string())
    });
    m.step("label --overwrite", |m| {
        let refused = m.run(&["label", "cm", "settings", "-n", n, "team=b"], None);
        check(!refused.status.success(), || "relabelling without --overwrite succeeded".into())?;
        m.ok(&["label", "cm", "settings", "-n", n, "--overwrite", "team=b"], None)?;
        let l = labels(m)?;
        check(l["team"] == "b", || l.to_string())
    });
    m.step("label removal", |m| {
        let out = m.ok(&["label", "cm", "settings", "-n", n, "team-"], None)?;
        check(out.contains("unlabeled"), || out)?;
        let l = labels(m)?;
        check(l.get("team").is_none(), || l.to_string())
    });
    m.step("wait --for=jsonpath", |m| {
        let out = m.ok(&["wait", "-n", n, "--for=jsonpath={.data.p2}=3", "cm/settings", "--timeout=30s"], None)?;
        check(out.contains("condition met"), || out)
    });
    m.step("wait --for=delete", |m| {
        m.ok(&["create", "configmap", "doomed", "-n", n], None)?;
        m.ok(&["delete", "configmap", "doomed", "-n", n, "--wait=false"], None)?;
        m.ok(&["wait", "-n", n, "--for=delete", "cm/doomed", "--timeout=30s"], None)?;
        let gone = m.run(&["get", "cm", "doomed", "-n", n], None);
        check(!gone.status.success(), || "cm/doomed is still there".into())
    });
    m.step("events", |m| {
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
        let event = format!(
            "apiVersion: v1\nkind: Event\nmetadata:\n  name: settings.matrix\n  namespace: {n}\ninvolvedObject:\n  \
             apiVersion: v1\n  kind: ConfigMap\n  name: settings\n  namespace: {n}\nreason: Matrixed\nmessage: \
             checked by the matrix\ntype: Normal\nsource:\n  component: matrix\nfirstTimestamp: \"{now}\"\n\
             lastTimestamp: \"{now}\"\ncount: 1\n"
        );
        m.ok(&["create", "-f", "-"], Some(&event))?;
        let out = m.ok(&["events", "-n", n, "--for", "configmap/settings"], None)?;
        check(out.contains("Matrixed") && out.contains("checked by the matrix"), || out)
    });
    m.step("auth whoami", |m| whoami(m, version));
    m.step("auth can-i (allowed)", |m| {
        let out = m.ok(&["auth", "can-i", "create", "configmaps", "-n", n], None)?;
        check(out.trim() == "yes", || out)
    });
    m.step("auth can-i (denied)", |m| {
        let sa = format!("system:serviceaccount:{n}:default");
        let out = m.run(&["auth", "can-i", "create", "configmaps", "-n", n, "--as", &sa], None);
        let (stdout, stderr) = text(&out);
        check(out.status.code() == Some(1) && stdout.trim() == "no", || format!("{}:\n{stdout}{stderr}", out.status))
    });
    m.step("create token", |m| {
        let token = m.ok(&["create", "token", "default", "-n", n], None)?;
        let parts: Vec<&str> = token.trim().split('.').collect();
        let claims = parts
            .get(1)
            .and_then(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .unwrap_or_default();
        check(parts.len() == 3 && claims["sub"] == format!("system:serviceaccount:{n}:default"), || token)
    });
    m.step("explain", |m| {
        let out = m.ok(&["explain", "configmap.data"], None)?;
        check(out.contains("KIND:") && out.contains("ConfigMap") && out.contains("data"), || out)
    });
    let _ = m.ok(&["delete", "namespace", n, "--wait=false"], None);
    m.finish(version);
}

/// `kubectl auth whoami`: the admin's name and groups. kubectl 1.27 asks only for the
/// `authentication.k8s.io` v1beta1 and v1alpha1 SelfSubjectReview, which kube-apiserver
/// no longer serves at this API level (v1 replaced them in 1.28); it then says, as against
/// kube-apiserver, that the API is not enabled.
fn whoami(m: &Matrix, version: &str) -> Step {
    if version == "1.27" {
        let out = m.run(&["auth", "whoami"], None);
        let (stdout, stderr) = text(&out);
        return check(!out.status.success() && stderr.contains("the selfsubjectreviews API is not enabled"), || {
            format!("{}:\n{stdout}{stderr}", out.status)
        });
    }
    let out = m.ok(&["auth", "whoami", "-o", "json"], None)?;
    let review: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
    let groups = review["status"]["userInfo"]["groups"].as_array().cloned().unwrap_or_default();
    check(
        review["status"]["userInfo"]["username"].as_str().is_some_and(|u| !u.is_empty())
            && groups.iter().any(|g| g == "system:masters"),
        || out,
    )
}

#[test]
fn kubectl_1_27_everyday_matrix() {
    everyday("1.27");
}

#[test]
fn kubectl_1_28_everyday_matrix() {
    everyday("1.28");
}

#[test]
fn kubectl_1_29_everyday_matrix() {
    everyday("1.29");
}

#[test]
fn kubectl_1_30_everyday_matrix() {
    everyday("1.30");
}

#[test]
fn kubectl_1_31_everyday_matrix() {
    everyday("1.31");
}

#[test]
fn kubectl_1_32_everyday_matrix() {
    everyday("1.32");
}

#[test]
fn kubectl_1_33_everyday_matrix() {
    everyday("1.33");
}
