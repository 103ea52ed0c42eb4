//! The kinds a kubelet reads at start and watches, served as real kinds: pods (listed and
//! watched by `spec.nodeName`), services, CSINodes, CSIDrivers and RuntimeClasses, through
//! kubectl and the HTTP API, with upstream's validation errors.

mod common;

use std::time::Duration;

use common::{assert_status, send, unique, WatchLines};
use serde_json::{json, Value};

fn pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
}

/// The objects as one `v1` List document for `kubectl create -f -`.
fn yaml_docs(docs: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string()
}

#[test]
fn kubectl_creates_lists_and_tables_each_kind() {
    let s = common::shared();
    let ns = unique("kinds");
    s.kubectl_ok(&["create", "namespace", &ns]);
    let driver = format!("{}.csi.example.com", unique("d"));
    let node = unique("node");
    let rc = unique("rc");
    let objects = [
        pod("on-n1", "n1"),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": driver}, "spec": {}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
               "spec": {"drivers": [{"name": driver, "nodeID": node, "topologyKeys": ["topology.example.com/zone"]}]}}),
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": rc}, "handler": "runc"}),
    ];
    let out = common::succeeded(
        "kubectl create -f -",
        s.kubectl_with_stdin(&["create", "-n", &ns, "-f", "-"], Some(&yaml_docs(&objects))),
    );
    for want in ["pod/on-n1 created", "service/web created", "csidriver.storage.k8s.io/", "csinode.storage.k8s.io/"] {
        assert!(out.contains(want), "{want} in {out}");
    }

    // Defaults as upstream's.
    let p: Value = serde_json::from_str(&s.kubectl_ok(&["get", "po", "on-n1", "-n", &ns, "-o", "json"])).expect("json");
    assert_eq!(p["spec"]["restartPolicy"], "Always");
    assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    let d: Value = serde_json::from_str(&s.kubectl_ok(&["get", "csidriver", &driver, "-o", "json"])).expect("json");
    assert_eq!(d["spec"]["attachRequired"], true);
    assert_eq!(d["spec"]["volumeLifecycleModes"], json!(["Persistent"]));

    // Tables with upstream's columns.
    let pods = s.kubectl_ok(&["get", "pods", "-n", &ns, "-o", "wide"]);
    let header: Vec<&str> = pods.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    );
    let row: Vec<&str> = pods.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!((row[0], row[1], row[2], row[3], row[6]), ("on-n1", "0/1", "Pending", "0", "n1"), "{pods}");

    let table = s.kubectl_ok(&["get", "svc,csidrivers,runtimeclasses", "-n", &ns]);
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    let find = |first: &str| lines.iter().find(|l| l.first() == Some(&first)).cloned().unwrap_or_default();
    assert_eq!(find("NAME").len(), 6, "{table}");
    assert!(lines.iter().any(|l| l[..] == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]), "{table}");
    assert_eq!(find("service/web")[..5], ["service/web", "ClusterIP", "<none>", "<none>", "80/TCP"], "{table}");
    assert!(
        lines.iter().any(|l| l[..]
            == [
                "NAME",
                "ATTACHREQUIRED",
                "PODINFOONMOUNT",
                "STORAGECAPACITY",
                "TOKENREQUESTS",
                "REQUIRESREPUBLISH",
                "MODES",
                "AGE"
            ]),
        "{table}"
    );
    let drow = find(&format!("csidriver.storage.k8s.io/{driver}"));
    assert_eq!(drow[1..7], ["true", "false", "false", "<unset>", "false", "Persistent"], "{table}");
    assert!(lines.iter().any(|l| l[..] == ["NAME", "HANDLER", "AGE"]), "{table}");
    assert_eq!(find(&format!("runtimeclass.node.k8s.io/{rc}"))[1], "runc", "{table}");

    let csinodes = s.kubectl_ok(&["get", "csinodes", &node]);
    let rows: Vec<Vec<&str>> = csinodes.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "DRIVERS", "AGE"]);
    assert_eq!(rows[1][..2], [node.as_str(), "1"]);

    // Short names and the `all` category.
    let all = s.kubectl_ok(&["get", "all", "-n", &ns, "-o", "name"]);
    assert!(all.contains("pod/on-n1") && all.contains("service/web"), "{all}");
    s.kubectl_ok(&["get", "po,svc", "-n", &ns]);
}

#[test]
fn pods_are_selected_by_node() {
    let s = common::shared();
    let ns = unique("bynode");
    s.kubectl_ok(&["create", "namespace", &ns]);
    let docs = [pod("a", "n1"), pod("b", "n2"), pod("c", "n1")];
    common::succeeded(
        "kubectl create",
        s.kubectl_with_stdin(&["create", "-n", &ns, "-f", "-"], Some(&yaml_docs(&docs))),
    );
    let names = s.kubectl_ok(&["get", "pods", "-n", &ns, "--field-selector", "spec.nodeName=n1", "-o", "name"]);
    assert_eq!(names.lines().collect::<Vec<_>>(), ["pod/a", "pod/c"]);
    let names = s.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        &ns,
        "--field-selector",
        "status.phase=Pending,spec.nodeName!=n1",
        "-o",
        "name",
    ]);
    assert_eq!(names.trim(), "pod/b");
    let bad = s.kubectl(&["get", "pods", "-n", &ns, "--field-selector", "spec.image=x"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("field label not supported: spec.image"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_by_node_sees_only_that_nodes_pods() {
    let s = common::shared();
    let ns = s.create_namespace("watch").await;
    let http = s.http();
    let pods = format!("{}/api/v1/namespaces/{ns}/pods", s.url);
    let all_pods = format!("{}/api/v1/pods", s.url);
    let mut w = WatchLines::open(http.get(&all_pods).query(&[
        ("watch", "1"),
        ("fieldSelector", "spec.nodeName=n1"),
        ("timeoutSeconds", "20"),
    ]))
    .await;
    assert_eq!(w.code, 200);
    send(http.post(&pods).json(&pod("elsewhere", "n2"))).await.expect_code(201, "a pod on n2");
    send(http.post(&pods).json(&pod("here", "n1"))).await.expect_code(201, "a pod on n1");
    let ev = w.next_non_bookmark(Duration::from_secs(10)).await.expect("an event");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "here", "the n2 pod is not seen: {ev}");
    assert_eq!(ev["object"]["metadata"]["namespace"], json!(ns));

    // The kubelet's status write keeps the spec; a spec write keeps the status.
    let mut status = ev["object"].clone();
    status["status"]["phase"] = json!("Running");
    status["status"]["podIP"] = json!("10.0.0.7");
    status["status"]["podIPs"] = json!([{"ip": "10.0.0.7"}]);
    status["spec"]["nodeName"] = json!("n9");
    let r = send(http.put(format!("{pods}/here/status")).json(&status)).await;
    r.expect_code(200, "the status write");
    assert_eq!(r.body["spec"]["nodeName"], "n1");
    assert_eq!(r.body["status"]["phase"], "Running");
    let ev = w.next_non_bookmark(Duration::from_secs(10)).await.expect("an event");
    assert_eq!((ev["type"].as_str(), ev["object"]["status"]["podIP"].as_str()), (Some("MODIFIED"), Some("10.0.0.7")));
    let selected = send(http.get(&pods).query(&[("fieldSelector", "status.podIP=10.0.0.7")])).await;
    let items = selected.body["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{}", selected.text);

    // Moving a pod to another node is a spec change pods do not allow.
    let mut moved = r.body.clone();
    moved["spec"]["nodeName"] = json!("n2");
    let refused = send(http.put(format!("{pods}/here")).json(&moved)).await;
    assert_status(&refused, 422, Some("Invalid"), "moving a pod");
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{}",
        refused.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_are_422_with_upstreams_messages() {
    let s = common::shared();
    let ns = s.create_namespace("invalid").await;
    let http = s.http();
    let cases = [
        (
            format!("api/v1/namespaces/{ns}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"restartPolicy": "Sometimes", "containers": [{"name": "App", "image": ""}]}}),
            vec![
                "spec.containers[0].name: Invalid value: \"App\"",
                "spec.containers[0].image: Required value",
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ],
        ),
        (
            format!("api/v1/namespaces/{ns}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}),
            vec!["spec.containers: Required value"],
        ),
        (
            format!("api/v1/namespaces/{ns}/services"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": [{"port": 70000, "protocol": "HTTP"}, {"name": "b", "port": 81}]}}),
            vec![
                "spec.ports[0].name: Required value",
                "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ],
        ),
        (
            "apis/storage.k8s.io/v1/csinodes".to_string(),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": unique("n")},
                   "spec": {"drivers": [{"name": "csi.example.com", "nodeID": ""}]}}),
            vec!["spec.drivers[0].nodeID: Required value"],
        ),
        (
            "apis/storage.k8s.io/v1/csidrivers".to_string(),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": unique("d")},
                   "spec": {"fsGroupPolicy": "Always"}}),
            vec!["spec.fsGroupPolicy: Unsupported value: \"Always\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\""],
        ),
        (
            "apis/node.k8s.io/v1/runtimeclasses".to_string(),
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": unique("rc")}, "handler": "Run_C"}),
            vec!["handler: Invalid value: \"Run_C\": a lowercase RFC 1123 label must consist of"],
        ),
    ];
    for (path, body, wants) in cases {
        let r = send(http.post(format!("{}/{path}", s.url)).json(&body)).await;
        assert_status(&r, 422, Some("Invalid"), &path);
        let message = r.body["message"].as_str().unwrap_or("");
        for want in wants {
            assert!(message.contains(want), "{want:?} in {message}");
        }
    }

    // Immutable fields.
    let rc = unique("rc");
    let url = format!("{}/apis/node.k8s.io/v1/runtimeclasses", s.url);
    let created = send(http.post(&url).json(&json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": rc}, "handler": "runc"})))
    .await;
    created.expect_code(201, "a runtime class");
    let mut changed = created.body.clone();
    changed["handler"] = json!("kata");
    let r = send(http.put(format!("{url}/{rc}")).json(&changed)).await;
    assert_status(&r, 422, Some("Invalid"), "changing the handler");
    assert!(r.text.contains("handler: Invalid value: \\\"kata\\\": field is immutable"), "{}", r.text);
}

/// Runs a Python script; fails loudly when python3 or its `kubernetes` package is missing.
fn python(script: &str) -> String {
    let check = std::process::Command::new("python3").args(["-c", "import kubernetes"]).output();
    match check {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "the Python `kubernetes` client is missing ({}); run `bash scripts/test.sh`, which installs it",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("python3 is not runnable ({e}); run `bash scripts/test.sh`"),
    }
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", script]);
    common::succeeded("python3", common::run_bounded(&mut cmd, None, Duration::from_secs(120), "python3 -c"))
}

/// The generated Python client reads pods and services (its typed models accept kustos's objects).
#[test]
fn python_client_lists_pods_and_services() {
    let s = common::shared();
    let ns = unique("py");
    s.kubectl_ok(&["create", "namespace", &ns]);
    common::succeeded(
        "kubectl create",
        s.kubectl_with_stdin(&["create", "-n", &ns, "-f", "-"], Some(&yaml_docs(&[pod("py-pod", "n1")]))),
    );
    s.kubectl_ok(&["create", "service", "clusterip", "py-svc", "-n", &ns, "--tcp=80:8080"]);
    let script = format!(
        "from kubernetes import client, config\n\
         config.load_kube_config({:?})\n\
         v1 = client.CoreV1Api()\n\
         pods = v1.list_namespaced_pod({ns:?}, field_selector='spec.nodeName=n1')\n\
         svcs = v1.list_namespaced_service({ns:?})\n\
         print(','.join(p.metadata.name + ':' + p.status.phase for p in pods.items))\n\
         print(','.join(s.metadata.name + ':' + s.spec.type + ':' + str(s.spec.ports[0].target_port) for s in svcs.items))\n",
        s.kubeconfig.to_string_lossy()
    );
    let out = python(&script);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["py-pod:Pending", "py-svc:ClusterIP:8080"], "{out}");
}

/// Discovery names the kinds as upstream does, and each answers in protobuf (a kubelet's
/// client asks for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_protobuf_for_each_kind() {
    let s = common::shared();
    let out = s.kubectl_ok(&["api-resources"]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    let want: &[&[&str]] = &[
        &["pods", "po", "v1", "true", "Pod"],
        &["services", "svc", "v1", "true", "Service"],
        &["csidrivers", "storage.k8s.io/v1", "false", "CSIDriver"],
        &["csinodes", "storage.k8s.io/v1", "false", "CSINode"],
        &["runtimeclasses", "node.k8s.io/v1", "false", "RuntimeClass"],
    ];
    for row in want {
        assert!(rows.iter().any(|r| r[..] == row[..]), "{row:?} in kubectl api-resources:\n{out}");
    }
    let http = s.http();
    for path in [
        "api/v1/pods",
        "api/v1/services",
        "apis/storage.k8s.io/v1/csidrivers",
        "apis/storage.k8s.io/v1/csinodes",
        "apis/node.k8s.io/v1/runtimeclasses",
    ] {
        let r =
            send(http.get(format!("{}/{path}", s.url)).header("Accept", "application/vnd.kubernetes.protobuf")).await;
        r.expect_code(200, path);
        assert_eq!(r.header("content-type").as_deref(), Some("application/vnd.kubernetes.protobuf"), "{path}");
    }
}
