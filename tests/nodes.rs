//! Nodes: a node identity (its own client certificate, group `system:nodes`) registers its
//! Node with a status, heartbeats through `nodes/<name>/status`, reads only its own Node, and
//! cannot touch another node's; `kubectl get nodes` shows it as upstream's printer does.

mod common;

use common::{assert_status, issue_user, send, unique};
use serde_json::{json, Value};

const SMP: &str = "application/strategic-merge-patch+json";

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": "10.244.7.0/24"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "192.0.2.17"}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "nodeInfo": {
                "kubeletVersion": "v1.33.1", "kubeProxyVersion": "", "osImage": "Debian GNU/Linux 12 (bookworm)",
                "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.13",
                "operatingSystem": "linux", "architecture": "amd64",
                "machineID": "m", "systemUUID": "s", "bootID": "b"
            }
        }
    })
}

fn ready_patch(status: &str) -> Value {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "KubeletReady", "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now, "lastTransitionTime": now
    }]}})
}

/// The whitespace-split cells of the `kubectl get` row for `name`.
fn row(out: &str, name: &str) -> Vec<String> {
    let line = out.lines().find(|l| l.split_whitespace().next() == Some(name));
    let Some(line) = line else { panic!("no row for {name} in:\n{out}") };
    line.split_whitespace().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_registers_heartbeats_and_shows_ready() {
    let s = common::shared();
    let me = unique("node-e");
    let other = unique("node-f");
    let as_me = s.http_with_identity(&issue_user(&s, &format!("system:node:{me}"), &["system:nodes"]).identity);
    let as_other = s.http_with_identity(&issue_user(&s, &format!("system:node:{other}"), &["system:nodes"]).identity);
    let nodes = format!("{}/api/v1/nodes", s.url);

    // Registration keeps the status the kubelet sends; podCIDRs follows podCIDR.
    let created = send(as_me.post(&nodes).json(&node(&me))).await;
    created.expect_code(201, "the node registering itself");
    assert_eq!(created.body["status"]["nodeInfo"]["kubeletVersion"], "v1.33.1", "{}", created.text);
    assert_eq!(created.body["spec"]["podCIDRs"], json!(["10.244.7.0/24"]), "{}", created.text);
    assert_eq!(created.body["status"]["allocatable"], created.body["status"]["capacity"], "{}", created.text);

    // Before any Ready condition the printer says Unknown.
    let out = s.kubectl_ok(&["get", "nodes"]);
    assert_eq!(row(&out, &me)[1], "Unknown", "{out}");

    // The heartbeat: a strategic merge patch of the status merges conditions by type.
    let patched =
        send(as_me.patch(format!("{nodes}/{me}/status")).header("Content-Type", SMP).json(&ready_patch("True"))).await;
    patched.expect_code(200, "the node patching its status");
    assert_eq!(patched.body["status"]["addresses"][0]["address"], "192.0.2.17", "{}", patched.text);
    assert_eq!(patched.body["status"]["conditions"][0]["status"], "True", "{}", patched.text);

    let out = s.kubectl_ok(&["get", "nodes"]);
    let header: Vec<&str> = out.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], "{out}");
    let cells = row(&out, &me);
    assert_eq!((cells[1].as_str(), cells[2].as_str(), cells[4].as_str()), ("Ready", "<none>", "v1.33.1"), "{out}");

    let wide = s.kubectl_ok(&["get", "nodes", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "STATUS",
            "ROLES",
            "AGE",
            "VERSION",
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME"
        ],
        "{wide}"
    );
    let cells = row(&wide, &me);
    assert_eq!((cells[5].as_str(), cells[6].as_str()), ("192.0.2.17", "<none>"), "{wide}");
    assert!(wide.contains("Debian GNU/Linux 12 (bookworm)   6.1.0-18-amd64   containerd://1.7.13"), "{wide}");

    // The short name and the field selectors of upstream.
    let selector = format!("metadata.name={me},spec.unschedulable=false");
    let out = s.kubectl_ok(&["get", "no", "--field-selector", &selector, "-o", "name"]);
    assert_eq!(out.trim(), format!("node/{me}"));
    s.kubectl_ok(&["cordon", &me]);
    let out = s.kubectl_ok(&["get", "nodes", &me]);
    assert_eq!(row(&out, &me)[1], "Ready,SchedulingDisabled", "{out}");

    // A node reads its own Node, by name or pinned by a field selector, and no other.
    send(as_me.get(format!("{nodes}/{me}"))).await.expect_code(200, "the node reading its Node");
    let own = send(as_me.get(format!("{nodes}?fieldSelector=metadata.name%3D{me}"))).await;
    own.expect_code(200, "the node listing its own Node");
    assert_eq!(own.body["items"].as_array().map(Vec::len), Some(1), "{}", own.text);
    let all = send(as_me.get(&nodes)).await;
    assert_status(&all, 403, Some("Forbidden"), "the node listing all nodes");
    assert!(all.text.contains(&format!("node '{me}' cannot read all nodes, only its own Node object")), "{}", all.text);

    // Another node may neither change this node nor register it.
    let refused =
        send(as_other.patch(format!("{nodes}/{me}/status")).header("Content-Type", SMP).json(&ready_patch("False")))
            .await;
    assert_status(&refused, 403, Some("Forbidden"), "another node patching the status");
    assert_eq!(
        refused.body["message"],
        json!(format!("nodes \"{me}\" is forbidden: node \"{other}\" is not allowed to modify node \"{me}\"")),
        "{}",
        refused.text
    );
    let stolen = send(as_other.post(&nodes).json(&node(&unique("node-g")))).await;
    assert_status(&stolen, 403, Some("Forbidden"), "a node registering another node");
    assert!(stolen.text.contains(&format!("node \\\"{other}\\\" is not allowed to modify node")), "{}", stolen.text);

    // A node may not change its own taints, nor give itself a restricted label.
    let taint = json!({"spec": {"taints": [{"key": "example.com/free", "effect": "NoSchedule"}]}});
    let refused = send(as_me.patch(format!("{nodes}/{me}")).header("Content-Type", SMP).json(&taint)).await;
    assert_status(&refused, 403, Some("Forbidden"), "the node changing its taints");
    assert_eq!(
        refused.body["message"],
        json!(format!("nodes \"{me}\" is forbidden: node \"{me}\" is not allowed to modify taints")),
        "{}",
        refused.text
    );
    let label = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
    let refused = send(as_me.patch(format!("{nodes}/{me}")).header("Content-Type", SMP).json(&label)).await;
    assert_status(&refused, 403, Some("Forbidden"), "the node giving itself a role");
    assert_eq!(
        refused.body["message"],
        json!(format!(
            "nodes \"{me}\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane"
        )),
        "{}",
        refused.text
    );

    // The status is still the node's own, and the node still Ready.
    let got = send(s.http().get(format!("{nodes}/{me}"))).await;
    got.expect_code(200, "the admin reading the node");
    assert_eq!(got.body["status"]["conditions"][0]["status"], "True", "{}", got.text);
    assert_eq!(got.body["spec"]["unschedulable"], true, "{}", got.text);
    assert!(got.body["spec"].get("taints").is_none(), "{}", got.text);
    send(s.http().get(format!("{nodes}/{other}"))).await.expect_code(404, "no Node was written for the other node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_validation_answers_with_upstreams_causes() {
    let s = common::shared();
    let name = unique("node-h");
    let nodes = format!("{}/api/v1/nodes", s.url);
    let mut bad = node(&name);
    bad["spec"] = json!({"podCIDRs": ["10.244.7.1/24"], "taints": [{"key": "a", "effect": "Sometimes"}]});
    let refused = send(s.http().post(&nodes).json(&bad)).await;
    assert_status(&refused, 422, Some("Invalid"), "an invalid node");
    let causes: Vec<String> = refused.body["details"]["causes"]
        .as_array()
        .map(|c| c.iter().map(|c| format!("{}: {}", c["field"].as_str().unwrap_or(""), c["message"])).collect())
        .unwrap_or_default();
    assert_eq!(
        causes,
        [
            "metadata.taints[0].effect: \"Unsupported value: \\\"Sometimes\\\": supported values: \\\"NoSchedule\\\", \\\"PreferNoSchedule\\\", \\\"NoExecute\\\"\"",
            "spec.podCIDRs[0]: \"Invalid value: \\\"10.244.7.1/24\\\": must not have bits set beyond the prefix length\"",
        ],
        "{}",
        refused.text
    );

    send(s.http().post(&nodes).json(&node(&name))).await.expect_code(201, "a valid node");
    let change = json!({"spec": {"podCIDRs": ["10.244.8.0/24"], "podCIDR": "10.244.8.0/24"}});
    let refused = send(s.http().patch(format!("{nodes}/{name}")).header("Content-Type", SMP).json(&change)).await;
    assert_status(&refused, 422, Some("Invalid"), "changing the pod CIDR");
    assert!(
        refused.text.contains("node updates may not change podCIDR except from \\\"\\\" to valid"),
        "{}",
        refused.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_in_discovery_openapi_and_protobuf() {
    let s = common::shared();
    let out = s.kubectl_ok(&["api-resources", "--api-group="]);
    let row: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.first() == Some(&"nodes"))
        .unwrap_or_else(|| panic!("nodes missing from kubectl api-resources:\n{out}"));
    assert_eq!(row, ["nodes", "no", "v1", "false", "Node"], "{out}");

    let explained = s.kubectl_ok(&["explain", "nodes.status.addresses"]);
    assert!(explained.contains("KIND:       Node") || explained.contains("KIND:     Node"), "{explained}");
    assert!(explained.contains("address"), "{explained}");

    let name = unique("node-p");
    let nodes = format!("{}/api/v1/nodes", s.url);
    send(s.http().post(&nodes).json(&node(&name))).await.expect_code(201, "a node");
    let proto =
        send(s.http().get(format!("{nodes}/{name}")).header("Accept", "application/vnd.kubernetes.protobuf")).await;
    proto.expect_code(200, "the node as protobuf");
    assert_eq!(proto.header("content-type").as_deref(), Some("application/vnd.kubernetes.protobuf"));
    assert!(proto.text.contains("192.0.2.17") && proto.text.contains("v1.33.1"), "{:?}", proto.text);
}
