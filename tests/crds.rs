//! CustomResourceDefinitions end to end: CRDs of the test's own, served by the real binary
//! and driven by kubectl, kube-rs and raw HTTPS.

mod common;

use std::time::Duration;

use common::{send, Server};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::GroupVersionKind;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

/// A namespaced `Widget` CRD with defaults, bounds, a status subresource and printer columns.
fn widget_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wdg]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {{}}
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Ready
      type: string
      jsonPath: .status.conditions[?(@.type=="Ready")].status
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [replicas]
            properties:
              replicas: {{type: integer, minimum: 1, maximum: 10}}
              color: {{type: string, enum: [red, blue], default: red}}
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {{type: string}}
                    status: {{type: string}}
"#
    )
}

fn widget(name: &str, group: &str, spec: &str) -> String {
    format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec: {spec}\n")
}

fn apply(s: &Server, yaml: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    s.kubectl_with_stdin(&args, Some(yaml))
}

fn apply_ok(s: &Server, yaml: &str, extra: &[&str]) -> String {
    let out = apply(s, yaml, extra);
    assert!(
        out.status.success(),
        "kubectl apply failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.stderr_tail()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_established(s: &Server, crd: &str) {
    s.kubectl_ok(&["wait", "--for", "condition=Established", &format!("crd/{crd}"), "--timeout=30s"]);
}

/// Poll `check` (bounded) until it is true.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not reached within 20s");
}

#[test]
fn kubectl_drives_a_namespaced_crd_with_defaults_validation_columns_and_status() {
    let s = Server::start_apiserver();
    let group = "e2e.kustos.dev";
    apply_ok(&s, &widget_crd(group), &[]);
    wait_established(&s, &format!("widgets.{group}"));

    let crds = s.kubectl_ok(&["get", "crd", &format!("widgets.{group}")]);
    assert!(crds.starts_with("NAME") && crds.contains("CREATED AT"), "CRD table columns: {crds}");
    let crd_yaml = s.kubectl_ok(&["get", "crds", &format!("widgets.{group}"), "-o", "yaml"]);
    for want in [
        "type: NamesAccepted",
        "reason: NoConflicts",
        "type: Established",
        "reason: InitialNamesAccepted",
        "storedVersions:",
    ] {
        assert!(crd_yaml.contains(want), "CRD status lacks {want:?}:\n{crd_yaml}");
    }

    s.kubectl_ok(&["create", "namespace", "shop"]);
    // An unknown field is pruned (client-side validation off so the server sees it).
    apply_ok(&s, &widget("w1", group, "{replicas: 3, bogus: 1}"), &["-n", "shop", "--validate=false"]);

    let table = s.kubectl_ok(&["get", "widgets", "-n", "shop"]);
    let header: Vec<&str> = table.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "REPLICAS", "READY", "AGE"], "printer columns: {table}");
    // Ready has no value yet: an empty cell, so the row has three words (name, replicas, age).
    let row: Vec<&str> = table.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!((row.len(), &row[..2]), (3, &["w1", "3"][..]), "row: {table}");
    for name in ["widget", "wdg", "Widget", &format!("widgets.{group}")] {
        let out = s.kubectl_ok(&["get", name, "w1", "-n", "shop", "-o", "name"]);
        assert_eq!(out.trim(), format!("widget.{group}/w1"), "kubectl get {name}");
    }

    let yaml = s.kubectl_ok(&["get", "widget", "w1", "-n", "shop", "-o", "yaml"]);
    assert!(yaml.contains("color: red"), "default applied: {yaml}");
    let stored: Value = serde_yaml::from_str(&yaml).unwrap();
    assert!(stored["spec"].get("bogus").is_none(), "unknown field pruned: {yaml}");
    assert!(yaml.contains("generation: 1"), "generation starts at 1: {yaml}");

    // Invalid objects are refused with the field in the message.
    let out = apply(&s, &widget("w2", group, "{replicas: 20, color: green}"), &["-n", "shop", "--validate=false"]);
    assert!(!out.status.success(), "invalid widget accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10"),
        "replicas cause: {err}"
    );
    assert!(
        err.contains("spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\""),
        "enum cause: {err}"
    );
    let out = apply(&s, &widget("w3", group, "{color: blue}"), &["-n", "shop", "--validate=false"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.replicas: Required value"), "required cause");

    // Spec patches bump generation; status in a main-resource patch is ignored.
    s.kubectl_ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":5},"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    let obj: Value = serde_json::from_str(&s.kubectl_ok(&["get", "widget", "w1", "-n", "shop", "-o", "json"])).unwrap();
    assert_eq!(obj["spec"]["replicas"], 5);
    assert_eq!(obj["metadata"]["generation"], 2);
    assert!(obj.get("status").is_none(), "status set through the main resource: {obj}");

    // The status subresource changes status only, without a generation bump.
    s.kubectl_ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "shop",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":9},"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    let obj: Value = serde_json::from_str(&s.kubectl_ok(&["get", "widget", "w1", "-n", "shop", "-o", "json"])).unwrap();
    assert_eq!(obj["spec"]["replicas"], 5, "spec changed through /status");
    assert_eq!(obj["status"]["conditions"][0]["status"], "True");
    assert_eq!(obj["metadata"]["generation"], 2);
    let table = s.kubectl_ok(&["get", "wdg", "-n", "shop", "--no-headers"]);
    let row: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(&row[..3], ["w1", "5", "True"], "Ready column from the condition: {table}");

    // Deleting the CRD deletes its custom resources and the endpoints.
    s.kubectl_ok(&["delete", "crd", &format!("widgets.{group}"), "--timeout=30s"]);
    eventually("CRD gone", || !s.kubectl(&["get", "crd", &format!("widgets.{group}")]).status.success());
    let out = s.kubectl(&["get", &format!("widgets.{group}"), "-n", "shop"]);
    assert!(!out.status.success(), "widgets still served after the CRD was deleted");
    // Re-creating it shows no leftover objects.
    apply_ok(&s, &widget_crd(group), &[]);
    wait_established(&s, &format!("widgets.{group}"));
    let out = s.kubectl_ok(&["get", "widgets", "-n", "shop", "-o", "name"]);
    assert_eq!(out.trim(), "", "custom resources survived their CRD's deletion");
}

#[test]
fn invalid_and_conflicting_crds_are_refused_or_not_accepted() {
    let s = Server::start_apiserver();
    let bad = widget_crd("nodot").replace("storage: true", "storage: false");
    let out = apply(&s, &bad, &[]);
    assert!(!out.status.success(), "invalid CRD accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.group: Invalid value: \"nodot\": should be a domain with at least one dot"), "{err}");
    assert!(err.contains("must have exactly one version marked as storage version"), "{err}");

    let group = "conflict.kustos.dev";
    apply_ok(&s, &widget_crd(group), &[]);
    wait_established(&s, &format!("widgets.{group}"));
    // Same group, another plural, but the same kind: names not accepted.
    let second = widget_crd(group)
        .replace("widgets", "gadgets")
        .replace("singular: widget", "singular: gadget")
        .replace("[wdg]", "[gdg]");
    apply_ok(&s, &second, &[]);
    let crd = format!("gadgets.{group}");
    eventually("NamesAccepted=False", || {
        let out = s.kubectl(&[
            "get",
            "crd",
            &crd,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"NamesAccepted\")].reason}",
        ]);
        String::from_utf8_lossy(&out.stdout) == "KindConflict"
    });
    let established =
        s.kubectl_ok(&["get", "crd", &crd, "-o", "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"]);
    assert_eq!(established, "False");
    assert!(!s.kubectl(&["get", &crd]).status.success(), "a CRD with conflicting names must not be served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_dynamic_objects_on_a_cluster_scoped_crd_with_watch() {
    let s = Server::start_apiserver();
    let client = s.kube_client().await;
    let group = "kube.kustos.dev";
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gizmos.{group}")},
        "spec": {"group": group, "scope": "Cluster",
                 "names": {"plural": "gizmos", "kind": "Gizmo"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}}}}}}]},
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.expect("create CRD");
    let mut established = false;
    for _ in 0..100 {
        let c = crds.get(&format!("gizmos.{group}")).await.expect("get CRD");
        let conds = c.status.and_then(|st| st.conditions).unwrap_or_default();
        if conds.iter().any(|c| c.type_ == "Established" && c.status == "True") {
            established = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(established, "CRD not established");

    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", "Gizmo"), "gizmos");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut watch = api.watch(&WatchParams::default(), "0").await.expect("watch").boxed();

    let mut g = DynamicObject::new("g1", &ar);
    g.data = json!({"spec": {}});
    let created = api.create(&PostParams::default(), &g).await.expect("create gizmo");
    assert_eq!(created.data["spec"]["size"], 1, "default applied: {:?}", created.data);
    let patched = api
        .patch("g1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}})))
        .await
        .expect("merge patch");
    assert_eq!(patched.data["spec"]["size"], 4);
    let list = api.list(&Default::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    api.delete("g1", &DeleteParams::default()).await.expect("delete");

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(WAIT, watch.next()).await.expect("watch event in time").expect("stream open");
        match ev.expect("watch event") {
            WatchEvent::Added(o) => seen.push(("ADDED", o.data["spec"]["size"].clone())),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.data["spec"]["size"].clone())),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.data["spec"]["size"].clone())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(seen, [("ADDED", json!(1)), ("MODIFIED", json!(4)), ("DELETED", json!(4))]);

    // Strategic merge patch is refused for custom resources (415), as upstream.
    api.create(&PostParams::default(), &g).await.expect("create again");
    let r = send(
        s.http()
            .patch(format!("{}/apis/{group}/v1alpha1/gizmos/g1", s.url))
            .header("content-type", "application/strategic-merge-patch+json")
            .body(r#"{"spec":{"size":2}}"#),
    )
    .await;
    common::assert_status(&r, 415, Some("UnsupportedMediaType"), "strategic merge patch on a custom resource");

    // Discovery and OpenAPI know the group while the CRD exists.
    let r = send(s.http().get(format!("{}/apis/{group}/v1alpha1", s.url))).await;
    r.expect_code(200, "resource list");
    assert_eq!(r.body["resources"][0]["name"], "gizmos");
    assert_eq!(r.body["resources"][0]["namespaced"], false);
    let r = send(s.http().get(format!("{}/openapi/v3", s.url))).await;
    assert!(r.body["paths"].get(format!("apis/{group}/v1alpha1")).is_some(), "OpenAPI v3 index: {}", r.text);
    let r = send(s.http().get(format!("{}/openapi/v3/apis/{group}/v1alpha1", s.url))).await;
    let schema = &r.body["components"]["schemas"]["dev.kustos.kube.v1alpha1.Gizmo"];
    assert_eq!(schema["properties"]["spec"]["properties"]["size"]["type"], "integer", "{}", r.text);

    crds.delete(&format!("gizmos.{group}"), &DeleteParams::default()).await.expect("delete CRD");
    let mut gone = false;
    for _ in 0..100 {
        if send(s.http().get(format!("{}/apis/{group}/v1alpha1", s.url))).await.code == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone, "discovery still lists the group after the CRD was deleted");
    let r = send(s.http().get(format!("{}/openapi/v3", s.url))).await;
    assert!(r.body["paths"].get(format!("apis/{group}/v1alpha1")).is_none(), "OpenAPI still has the group");
}

#[test]
fn crds_and_custom_resources_survive_a_restart() {
    let mut s = Server::start_apiserver();
    let group = "restart.kustos.dev";
    apply_ok(&s, &widget_crd(group), &[]);
    wait_established(&s, &format!("widgets.{group}"));
    apply_ok(&s, &widget("keep", group, "{replicas: 2}"), &["-n", "default"]);
    s.restart();
    let out =
        s.kubectl_ok(&["get", "widgets", "keep", "-n", "default", "-o", "jsonpath={.spec.replicas}/{.spec.color}"]);
    assert_eq!(out, "2/red");
}

/// A kube-derive `CustomResource` type: the CRD it generates is accepted and served.
#[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
#[kube(group = "derive.kustos.dev", version = "v1", kind = "Doohickey", namespaced, status = "DoohickeyStatus")]
pub struct DoohickeySpec {
    size: i32,
}

#[derive(serde::Deserialize, serde::Serialize, Clone, Debug, Default, schemars::JsonSchema)]
pub struct DoohickeyStatus {
    ready: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_derive_custom_resource_type_round_trips_with_its_status() {
    use kube::CustomResourceExt;
    let s = Server::start_apiserver();
    let client = s.kube_client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Doohickey::crd()).await.expect("the generated CRD is accepted");
    let name = Doohickey::crd_name();
    let mut established = false;
    for _ in 0..100 {
        let c = crds.get(name).await.expect("get CRD");
        if c.status
            .and_then(|st| st.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
        {
            established = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(established, "generated CRD not established");
    let api: Api<Doohickey> = Api::namespaced(client, "default");
    let d = Doohickey::new("d1", DoohickeySpec { size: 2 });
    let created = api.create(&PostParams::default(), &d).await.expect("create");
    assert_eq!(created.spec.size, 2);
    assert!(created.status.is_none(), "status is not set on create");
    let st = api
        .patch_status("d1", &PatchParams::default(), &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .expect("patch status");
    assert_eq!(st.status.map(|s| s.ready), Some(true));
    let err = api
        .patch("d1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": "big"}})))
        .await
        .expect_err("a string size is invalid");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains("spec.size: Invalid value: \"string\": spec.size in body must be of type integer"),
                "{}",
                s.message
            );
        }
        other => panic!("unexpected error {other:?}"),
    }
}
