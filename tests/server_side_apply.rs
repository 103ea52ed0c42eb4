//! Server-side apply end to end: `kubectl apply --server-side` (the default kubectl and every
//! version beside it, 1.27 to 1.33), a second field manager's conflicting apply (409 naming
//! the field), `--force-conflicts`, `metadata.managedFields` as `kubectl get
//! --show-managed-fields` shows them, a custom resource applied server-side, kube-rs
//! `Patch::Apply`, and server-side apply after client-side apply (fields taken over where
//! the live value is the last-applied one, the annotation kept current).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{shared, unique, Server};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

/// `<kubectl> --kubeconfig <admin> <args>` with `stdin`, bounded.
fn run(s: &Server, kubectl: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    s.kubectl_bin(kubectl, args, stdin)
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn ok(s: &Server, kubectl: &PathBuf, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(s, kubectl, args, stdin);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{kubectl:?} {} failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        args.join(" "),
        s.stderr_tail()
    );
    stdout
}

fn config_map(name: &str, ns: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n{data}")
}

/// The whole kubectl story with one kubectl binary.
fn conflict_force_and_managed_fields(s: &Server, kubectl: &PathBuf) {
    let ns = unique("ssa");
    ok(s, kubectl, &["create", "namespace", &ns], None);
    let first = config_map("settings", &ns, "  color: red\n  size: small\n");
    let out = ok(s, kubectl, &["apply", "--server-side", "-f", "-"], Some(&first));
    assert!(out.contains("configmap/settings serverside-applied"), "{out}");
    // Applying the same again changes nothing.
    let rv = ok(s, kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.metadata.resourceVersion}"], None);
    ok(s, kubectl, &["apply", "--server-side", "-f", "-"], Some(&first));
    let rv2 = ok(s, kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.metadata.resourceVersion}"], None);
    assert_eq!(rv, rv2, "a repeated apply stored a new version");

    let second = config_map("settings", &ns, "  color: blue\n");
    let refused = run(s, kubectl, &["apply", "--server-side", "--field-manager=painter", "-f", "-"], Some(&second));
    let (stdout, stderr) = text(&refused);
    assert!(!refused.status.success(), "a conflicting apply succeeded:\n{stdout}\n{stderr}");
    assert!(stderr.contains("conflict with \"kubectl\"") && stderr.contains(".data.color"), "{stderr}");
    let color = ok(s, kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.data.color}"], None);
    assert_eq!(color, "red");

    let out = ok(
        s,
        kubectl,
        &["apply", "--server-side", "--field-manager=painter", "--force-conflicts", "-f", "-"],
        Some(&second),
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let obj: Value = serde_json::from_str(&ok(
        s,
        kubectl,
        &["get", "cm", "settings", "-n", &ns, "-o", "json", "--show-managed-fields"],
        None,
    ))
    .unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(obj["data"], json!({"color": "blue", "size": "small"}));
    let managed = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let owned = |manager: &str| {
        managed.iter().find(|e| e["manager"] == manager).map(|e| (e["operation"].clone(), e["fieldsV1"].clone()))
    };
    assert_eq!(owned("kubectl"), Some((json!("Apply"), json!({"f:data": {"f:size": {}}}))), "{managed:?}");
    assert_eq!(owned("painter"), Some((json!("Apply"), json!({"f:data": {"f:color": {}}}))), "{managed:?}");

    let yaml = ok(s, kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "yaml", "--show-managed-fields"], None);
    assert!(
        yaml.contains("managedFields:") && yaml.contains("manager: painter") && yaml.contains("manager: kubectl"),
        "{yaml}"
    );
    let plain = ok(s, kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "yaml"], None);
    assert!(!plain.contains("managedFields"), "{plain}");

    // The first manager drops `size` from its configuration: it is removed.
    let out =
        ok(s, kubectl, &["apply", "--server-side", "-f", "-"], Some(&config_map("settings", &ns, "  other: x\n")));
    assert!(out.contains("serverside-applied"), "{out}");
    let data = ok(s, kubectl, &["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.data}"], None);
    let data: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{data}: {e}"));
    assert_eq!(data, json!({"color": "blue", "other": "x"}));

    // kubectl edit-like writes (a client-side update) take ownership as Update entries.
    ok(s, kubectl, &["label", "cm", "settings", "-n", &ns, "team=a"], None);
    let obj: Value = serde_json::from_str(&ok(
        s,
        kubectl,
        &["get", "cm", "settings", "-n", &ns, "-o", "json", "--show-managed-fields"],
        None,
    ))
    .unwrap_or_else(|e| panic!("not JSON: {e}"));
    let label_owner = obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["fieldsV1"]["f:metadata"]["f:labels"]["f:team"].is_object()).cloned())
        .unwrap_or_else(|| panic!("nobody owns the label: {obj}"));
    assert_eq!(label_owner["operation"], "Update", "{label_owner}");
    assert_eq!(label_owner["manager"], "kubectl-label", "{label_owner}");
    ok(s, kubectl, &["delete", "namespace", &ns, "--wait=false"], None);
}

fn default_kubectl() -> PathBuf {
    common::ensure_kubectl();
    PathBuf::from("kubectl")
}

#[test]
fn kubectl_server_side_apply_conflicts_forces_and_shows_managers() {
    let s = shared();
    conflict_force_and_managed_fields(&s, &default_kubectl());
}

#[test]
fn the_oldest_kubectl_applies_server_side_too() {
    let s = shared();
    conflict_force_and_managed_fields(&s, &common::kubectl_version("1.27"));
}

#[test]
fn kubectl_1_28_applies_server_side_too() {
    let s = shared();
    conflict_force_and_managed_fields(&s, &common::kubectl_version("1.28"));
}

/// The other kubectl versions beside the default one, 1.33 (the newest) among them.
#[test]
fn every_other_kubectl_version_applies_server_side() {
    let s = shared();
    for version in ["1.29", "1.30", "1.31", "1.32", "1.33"] {
        conflict_force_and_managed_fields(&s, &common::kubectl_version(version));
    }
}

#[test]
fn a_custom_resource_is_applied_server_side() {
    let s = shared();
    let kubectl = default_kubectl();
    let group = format!("{}.ssa.example.com", unique("g"));
    let crd = format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: gadgets, singular: gadget, kind: Gadget}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
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
          status:
            type: object
            properties:
              ready: {{type: boolean}}
"#
    );
    let out = ok(&s, &kubectl, &["apply", "--server-side", "-f", "-"], Some(&crd));
    assert!(out.contains("serverside-applied"), "{out}");
    ok(
        &s,
        &kubectl,
        &["wait", "--for", "condition=Established", &format!("crd/gadgets.{group}"), "--timeout=30s"],
        None,
    );
    let ns = unique("ssa-cr");
    ok(&s, &kubectl, &["create", "namespace", &ns], None);
    let gadget = |ports: &str, size: u32| {
        format!(
            "apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g1\n  namespace: {ns}\nspec:\n  size: {size}\n  ports:\n{ports}"
        )
    };
    ok(&s, &kubectl, &["apply", "--server-side", "-f", "-"], Some(&gadget("  - {name: http, port: 80}\n", 1)));
    // Another manager adds a port (a map-keyed list: no conflict) ...
    let extra = format!(
        "apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g1\n  namespace: {ns}\nspec:\n  ports:\n  - {{name: https, port: 443}}\n"
    );
    ok(&s, &kubectl, &["apply", "--server-side", "--field-manager=tls", "-f", "-"], Some(&extra));
    // ... and conflicts on the size the first one owns.
    let grow =
        format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g1\n  namespace: {ns}\nspec:\n  size: 5\n");
    let refused = run(&s, &kubectl, &["apply", "--server-side", "--field-manager=tls", "-f", "-"], Some(&grow));
    let (stdout, stderr) = text(&refused);
    assert!(!refused.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(".spec.size"), "{stderr}");
    let obj: Value = serde_json::from_str(&ok(
        &s,
        &kubectl,
        &["get", &format!("gadgets.{group}"), "g1", "-n", &ns, "-o", "json", "--show-managed-fields"],
        None,
    ))
    .unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(obj["spec"]["ports"], json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]));
    assert_eq!(obj["spec"]["size"], 1);
    let managed = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let tls = managed.iter().find(|e| e["manager"] == "tls").cloned().unwrap_or_else(|| panic!("{managed:?}"));
    assert_eq!(
        tls["fieldsV1"],
        json!({"f:spec": {"f:ports": {"k:{\"name\":\"https\"}": {".": {}, "f:name": {}, "f:port": {}}}}})
    );
    ok(&s, &kubectl, &["delete", "namespace", &ns, "--wait=false"], None);
    ok(&s, &kubectl, &["delete", "crd", &format!("gadgets.{group}"), "--wait=false"], None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_patch_apply_creates_conflicts_and_forces() {
    let s = shared();
    let ns = s.create_namespace("ssa-kube").await;
    let client = s.kube_client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k"}, "data": {"mode": "a"}});
    let created =
        cms.patch("k", &PatchParams::apply("operator"), &Patch::Apply(&desired)).await.expect("apply creates");
    assert_eq!(created.data.as_ref().and_then(|d| d.get("mode")).map(String::as_str), Some("a"));
    let entries = created.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].manager.as_deref(), Some("operator"));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));

    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k"}, "data": {"mode": "b"}});
    match cms.patch("k", &PatchParams::apply("intruder"), &Patch::Apply(&other)).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert_eq!(status.reason, "Conflict", "{status:?}");
            assert!(status.message.contains(".data.mode"), "{status:?}");
        }
        other => panic!("a conflicting apply answered {other:?}"),
    }
    let forced =
        cms.patch("k", &PatchParams::apply("intruder").force(), &Patch::Apply(&other)).await.expect("forced apply");
    assert_eq!(forced.data.as_ref().and_then(|d| d.get("mode")).map(String::as_str), Some("b"));
    let managers: Vec<String> =
        forced.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|e| e.manager).collect();
    assert_eq!(managers, vec!["intruder"], "the operator owned nothing else");
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An apply body (`application/apply-patch+yaml` takes JSON too) by `manager`.
async fn apply_as(s: &Server, ns: &str, manager: &str, body: &Value) -> common::Reply {
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps/{name}?fieldManager={manager}", s.url);
    common::send(s.http().patch(url).header("Content-Type", "application/apply-patch+yaml").body(body.to_string()))
        .await
}

/// What `kubectl apply` (client-side) creates: the object with the annotation holding it,
/// written by `kubectl-client-side-apply`.
async fn client_side_create(s: &Server, ns: &str, name: &str, data: Value, last: &Value) {
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "annotations": {LAST_APPLIED: format!("{last}\n")}},
        "data": data,
    });
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps?fieldManager=kubectl-client-side-apply", s.url);
    common::send(s.http().post(url).json(&obj)).await.expect_code(201, "client-side create");
}

fn cm_config(name: &str, ns: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

/// The server's rules on their own (no kubectl migrating managedFields afterwards): the
/// apply of `kubectl` takes over what client-side apply set where the live value is the
/// last-applied one and rewrites the annotation; another manager, or a live value that
/// differs from the annotation, still conflicts (409 naming the field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_takes_over_from_client_side_apply_where_the_annotation_agrees() {
    let s = shared();
    let ns = s.create_namespace("ssa-csa").await;
    let data = json!({"color": "red", "size": "small"});
    client_side_create(&s, &ns, "agrees", data.clone(), &cm_config("agrees", &ns, data.clone())).await;

    // Another manager conflicts, whatever the annotation says.
    let blue = cm_config("agrees", &ns, json!({"color": "blue", "size": "small"}));
    let refused = apply_as(&s, &ns, "painter", &blue).await;
    common::assert_status(&refused, 409, Some("Conflict"), "painter's apply");
    assert_eq!(
        refused.body["message"],
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#
    );

    // kubectl takes it over.
    let taken = apply_as(&s, &ns, "kubectl", &blue).await;
    taken.expect_code(200, "kubectl's apply after client-side apply");
    assert_eq!(taken.body["data"], json!({"color": "blue", "size": "small"}));
    let entries = taken.body["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let fields = |manager: &str| entries.iter().find(|e| e["manager"] == manager).map(|e| e["fieldsV1"].clone());
    assert_eq!(fields("kubectl"), Some(json!({"f:data": {"f:color": {}, "f:size": {}}})), "{entries:?}");
    let csa = fields("kubectl-client-side-apply").unwrap_or_else(|| panic!("{entries:?}"));
    assert!(csa["f:data"]["f:color"].is_null() && csa["f:data"]["f:size"].is_object(), "{csa}");
    let last = taken.body["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap_or_default();
    assert!(last.ends_with('\n'), "{last:?}");
    assert_eq!(serde_json::from_str::<Value>(last).ok(), Some(blue.clone()), "{last}");

    // The live value differs from the annotation: the conflict stays.
    let stale = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"color": "green", "size": "small"}});
    client_side_create(&s, &ns, "disagrees", data.clone(), &stale).await;
    let refused = apply_as(&s, &ns, "kubectl", &cm_config("disagrees", &ns, json!({"color": "blue"}))).await;
    common::assert_status(&refused, 409, Some("Conflict"), "kubectl's apply over a stale annotation");
    assert_eq!(
        refused.body["message"],
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#
    );
    let unchanged = common::send(s.http().get(format!("{}/api/v1/namespaces/{ns}/configmaps/disagrees", s.url))).await;
    assert_eq!(unchanged.body["data"], data);
    assert_eq!(unchanged.body["metadata"]["annotations"][LAST_APPLIED], format!("{stale}\n"));

    // An object whose managedFields were reset (as one written before fields were tracked):
    // what it holds is first owned by `before-first-apply`, which kubectl takes over too.
    client_side_create(&s, &ns, "untracked", data.clone(), &cm_config("untracked", &ns, data.clone())).await;
    let reset = json!({"metadata": {"managedFields": [{}]}});
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps/untracked", s.url);
    let reply = common::send(
        s.http().patch(&url).header("Content-Type", "application/merge-patch+json").body(reset.to_string()),
    )
    .await;
    reply.expect_code(200, "resetting managedFields");
    assert!(reply.body["metadata"].get("managedFields").is_none(), "{}", reply.body);
    let blue = cm_config("untracked", &ns, json!({"color": "blue", "size": "small"}));
    let refused = apply_as(&s, &ns, "painter", &blue).await;
    common::assert_status(&refused, 409, Some("Conflict"), "painter's apply over an untracked object");
    assert_eq!(
        refused.body["message"],
        r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.color"#
    );
    let taken = apply_as(&s, &ns, "kubectl", &blue).await;
    taken.expect_code(200, "kubectl's apply over an untracked object");
    assert_eq!(taken.body["data"], json!({"color": "blue", "size": "small"}));
    let last = taken.body["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap_or_default();
    assert_eq!(serde_json::from_str::<Value>(last).ok(), Some(blue), "{last}");
}

/// `kubectl apply`, then `kubectl apply --server-side` changing a value the first one set,
/// then `kubectl apply` again: with every kubectl, the server-side apply succeeds, kubectl
/// moves the client-side apply's fields to its own apply entry, and the annotation stays
/// current, so the later client-side apply removes a key only the server-side apply set.
fn apply_after_client_side_apply(s: &Server, kubectl: &PathBuf) {
    let ns = unique("ssa-after");
    ok(s, kubectl, &["create", "namespace", &ns], None);
    let first = config_map("settings", &ns, "  color: red\n  size: small\n");
    let out = ok(s, kubectl, &["apply", "-f", "-"], Some(&first));
    assert!(out.contains("configmap/settings created"), "{out}");

    let server_side = config_map("settings", &ns, "  color: blue\n  size: small\n  shape: round\n");
    let out = ok(s, kubectl, &["apply", "--server-side", "-f", "-"], Some(&server_side));
    assert!(out.contains("configmap/settings serverside-applied"), "{kubectl:?}: {out}");
    let get = |args: &[&str]| -> Value {
        let mut a = vec!["get", "cm", "settings", "-n", &ns, "-o", "json"];
        a.extend_from_slice(args);
        serde_json::from_str(&ok(s, kubectl, &a, None)).unwrap_or_else(|e| panic!("not JSON: {e}"))
    };
    let obj = get(&["--show-managed-fields"]);
    assert_eq!(obj["data"], json!({"color": "blue", "size": "small", "shape": "round"}));
    let entries = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let kubectl_entry = entries
        .iter()
        .find(|e| e["manager"] == "kubectl" && e["operation"] == "Apply")
        .unwrap_or_else(|| panic!("{kubectl:?}: no Apply entry of kubectl: {entries:?}"));
    assert_eq!(kubectl_entry["fieldsV1"]["f:data"], json!({"f:color": {}, "f:shape": {}, "f:size": {}}));
    assert!(
        !entries.iter().any(|e| e["manager"] == "kubectl-client-side-apply" && !e["fieldsV1"]["f:data"].is_null()),
        "{kubectl:?}: client-side apply still owns data: {entries:?}"
    );
    let last = obj["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap_or_default();
    let last: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {obj}"));
    assert_eq!(last["data"], json!({"color": "blue", "size": "small", "shape": "round"}), "{obj}");

    let out =
        ok(s, kubectl, &["apply", "-f", "-"], Some(&config_map("settings", &ns, "  color: green\n  size: small\n")));
    assert!(out.contains("configmap/settings configured"), "{out}");
    assert_eq!(get(&[])["data"], json!({"color": "green", "size": "small"}), "{kubectl:?}");
    // And back to server-side apply once more, over the client-side apply's new value.
    let out = ok(s, kubectl, &["apply", "--server-side", "-f", "-"], Some(&server_side));
    assert!(out.contains("serverside-applied"), "{out}");
    assert_eq!(get(&[])["data"], json!({"color": "blue", "size": "small", "shape": "round"}), "{kubectl:?}");
    // A Secret written with stringData: the client-side manager owns data (stringData is
    // data once decoded, as upstream's conversion makes it), so no conflict either.
    let secret = |pass: &str| {
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {ns}\nstringData:\n  user: app\n  pass: {pass}\n")
    };
    ok(s, kubectl, &["apply", "-f", "-"], Some(&secret("one")));
    let out = ok(s, kubectl, &["apply", "--server-side", "-f", "-"], Some(&secret("two")));
    assert!(out.contains("secret/creds serverside-applied"), "{kubectl:?}: {out}");
    let obj: Value = serde_json::from_str(&ok(s, kubectl, &["get", "secret", "creds", "-n", &ns, "-o", "json"], None))
        .unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(obj["data"]["pass"], "dHdv", "{kubectl:?}: {obj}");
    ok(s, kubectl, &["delete", "namespace", &ns, "--wait=false"], None);
}

#[test]
fn server_side_apply_after_client_side_apply_with_every_kubectl() {
    let s = shared();
    apply_after_client_side_apply(&s, &default_kubectl());
    for version in ["1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"] {
        apply_after_client_side_apply(&s, &common::kubectl_version(version));
    }
}
