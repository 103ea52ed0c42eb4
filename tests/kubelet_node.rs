//! A kubelet's life on `kustos server`, call by call as a kubelet makes them (kube-rs, the
//! node's own identity from TLS bootstrapping): register the Node, create its Lease and
//! CSINode, list and watch what it watches, post status and renew the Lease, get a serving
//! certificate approved by the shipped kubelet-serving policy (every SAN among the Node's
//! addresses) and renew both certificates; `kubectl get nodes` shows it Ready. Then the
//! kubelet goes silent and the node lifecycle controller marks it Unknown.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::kubelet::{
    approval, client_from_yaml, condition, csr_object, node_csr, node_csr_with_sans, node_kubeconfig,
    request_certificate, submit_csr, KUBELET_SERVING,
};
use common::Server;
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::Api;
use serde_json::{json, Value};

/// Shorter than upstream's 50 s, so the test does not wait long for the mark.
const GRACE: &str = "--node-monitor-grace-period=10s";
/// Bound for the lifecycle controller to mark the node.
const MARK_WAIT: Duration = Duration::from_secs(60);
const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn micro_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The Node a kubelet registers: its labels, addresses, capacity, node info and conditions.
fn node_object(name: &str, ip: &str) -> Value {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now(), "lastTransitionTime": now()})
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name},
                          {"type": "InternalDNS", "address": format!("{name}.cluster.example")}],
            "capacity": {"cpu": "2", "memory": "4029440Ki", "pods": "110", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": "2", "memory": "3927040Ki", "pods": "110", "ephemeral-storage": "18Gi"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.0",
                         "kubeletVersion": "v1.35.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "False", "KubeletNotReady", "container runtime network not ready"),
            ]
        }
    })
}

/// The status patch a kubelet sends every update: strategic merge of the conditions by type.
fn status_patch(ready: bool) -> Value {
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        ("False", "KubeletNotReady", "container runtime network not ready")
    };
    json!({"status": {
    "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "DiskPressure"}, {"type": "PIDPressure"}, {"type": "Ready"}],
    "conditions": [
        {"type": "MemoryPressure", "lastHeartbeatTime": now()},
        {"type": "DiskPressure", "lastHeartbeatTime": now()},
        {"type": "PIDPressure", "lastHeartbeatTime": now()},
        {"type": "Ready", "status": status, "reason": reason, "message": message,
         "lastHeartbeatTime": now(), "lastTransitionTime": now()}
    ]}})
}

fn ready_condition(node: &Node) -> (String, String) {
    let c = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .unwrap_or_else(|| panic!("no Ready condition: {node:?}"));
    (c.status.clone(), c.reason.clone().unwrap_or_default())
}

/// The row of `node` in `kubectl get nodes` (with `extra` flags), split on whitespace.
fn kubectl_row(s: &Server, node: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["get", "nodes", node];
    args.extend_from_slice(extra);
    let out = s.kubectl_ok(&args);
    let line = out.lines().find(|l| l.starts_with(node)).unwrap_or_else(|| panic!("no row for {node}:\n{out}"));
    line.split_whitespace().map(str::to_string).collect()
}

/// Install the CertificateApprovalPolicy CRD and the shipped kubelet-serving policy.
async fn install_policy(s: &Server) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    s.kubectl_ok(&["apply", "-f", repo.join("crds").to_str().expect("path")]);
    s.kubectl_ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/certificateapprovalpolicies.kustos.dev",
    ]);
    s.kubectl_ok(&["apply", "-f", repo.join("manifests/policies/kubelet-serving.yaml").to_str().expect("path")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_registers_heartbeats_gets_both_certificates_and_goes_unknown_when_silent() {
    let s = Server::start_with(&[GRACE, "--node-monitor-period=1s"]);
    install_policy(&s).await;
    let kubeconfig = s.kubeconfig.to_string_lossy().into_owned();
    let node = common::unique("node");
    let ip = "10.20.30.40";

    // TLS bootstrap: a token, its kubeconfig, the client certificate.
    let token = common::kustos_ok(&["token", "create", "--kubeconfig", &kubeconfig]).trim().to_string();
    let bootstrap = common::kustos_ok(&["kubeconfig", "bootstrap", "--kubeconfig", &kubeconfig, "--token", &token]);
    let boot = client_from_yaml(&bootstrap).await;
    let (csr_pem, key_pem) = node_csr(&node);
    let csr = request_certificate(&boot, &format!("node-csr-{node}-1"), &csr_pem).await;
    let cert = csr.status.and_then(|s| s.certificate).expect("client certificate").0;
    let kubelet = client_from_yaml(&node_kubeconfig(&bootstrap, &cert, &key_pem)).await;

    // Registration: the Node is not there, so the kubelet creates it.
    let nodes: Api<Node> = Api::all(kubelet.clone());
    assert!(nodes.get_opt(&node).await.expect("GET node").is_none(), "no Node before registration");
    let registered: Node = serde_json::from_value(node_object(&node, ip)).expect("a Node");
    let created = nodes.create(&PostParams::default(), &registered).await.expect("the kubelet registers its Node");
    let uid = created.metadata.uid.clone().expect("uid");
    let owner = json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]);

    // The node Lease, owned by the Node, and the CSINode.
    let leases: Api<Lease> = Api::namespaced(kubelet.clone(), "kube-node-lease");
    assert!(leases.get_opt(&node).await.expect("GET lease").is_none());
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": node, "namespace": "kube-node-lease", "ownerReferences": owner},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": micro_now()}
    }))
    .expect("a Lease");
    leases.create(&PostParams::default(), &lease).await.expect("the kubelet creates its Lease");
    let csinodes: Api<CSINode> = Api::all(kubelet.clone());
    assert!(csinodes.get_opt(&node).await.expect("GET csinode").is_none());
    let csinode: CSINode = serde_json::from_value(json!({
        "metadata": {"name": node, "ownerReferences": owner}, "spec": {"drivers": []}
    }))
    .expect("a CSINode");
    csinodes.create(&PostParams::default(), &csinode).await.expect("the kubelet creates its CSINode");

    // What the kubelet lists and watches: its own Node, its Pods, Services, CSIDrivers,
    // RuntimeClasses.
    let by_name = ListParams::default().fields(&format!("metadata.name={node}"));
    assert_eq!(nodes.list(&by_name).await.expect("list own node").items.len(), 1);
    let pods: Api<Pod> = Api::all(kubelet.clone());
    let on_node = format!("spec.nodeName={node}");
    let pod_list = pods.list(&ListParams::default().fields(&on_node)).await.expect("list pods bound to the node");
    assert!(pod_list.items.is_empty(), "no scheduler, no pods");
    let rv = pod_list.metadata.resource_version.expect("list resourceVersion");
    let mut pod_watch = pods
        .watch(&WatchParams::default().fields(&on_node).timeout(20), &rv)
        .await
        .expect("watch pods bound to the node")
        .boxed();
    Api::<Service>::all(kubelet.clone()).list(&ListParams::default()).await.expect("list services");
    Api::<CSIDriver>::all(kubelet.clone()).list(&ListParams::default()).await.expect("list csidrivers");
    Api::<RuntimeClass>::all(kubelet.clone()).list(&ListParams::default()).await.expect("list runtimeclasses");

    // An admin binds a pod to the node: the kubelet's watch sees it.
    let admin = s.kube_client().await;
    let ns = s.create_namespace("kubelet-pods").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "nginx:1.27"}]}
    }))
    .expect("a Pod");
    Api::<Pod>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &pod).await.expect("admin creates a pod");
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = pod_watch.next().await {
            if let Ok(WatchEvent::Added(p)) = ev {
                return Some(p);
            }
        }
        None
    })
    .await
    .expect("the pod event within 20 s")
    .expect("an ADDED event");
    assert_eq!(seen.spec.and_then(|s| s.node_name).as_deref(), Some(node.as_str()));

    // Status updates and Lease renewals, as the kubelet's loops make them.
    let status_params = PatchParams::default();
    nodes.patch_status(&node, &status_params, &Patch::Strategic(status_patch(true))).await.expect("status patch");
    for _ in 0..2 {
        let mut current = leases.get(&node).await.expect("GET lease");
        current.spec.get_or_insert_with(Default::default).renew_time =
            Some(serde_json::from_value(json!(micro_now())).expect("MicroTime"));
        leases.replace(&node, &PostParams::default(), &current).await.expect("the kubelet renews its Lease");
    }
    let ready = nodes.get(&node).await.expect("GET node");
    assert_eq!(ready_condition(&ready), ("True".into(), "KubeletReady".into()));
    let row = kubectl_row(&s, &node, &[]);
    assert_eq!(row[1], "Ready", "STATUS: {row:?}");
    assert_eq!(row.last().map(String::as_str), Some("v1.35.0"), "VERSION: {row:?}");
    let wide = kubectl_row(&s, &node, &["-o", "wide"]);
    assert_eq!(wide[5], ip, "INTERNAL-IP: {wide:?}");

    // The serving certificate: every SAN is one of the Node's addresses, so the shipped
    // policy approves it and it is issued.
    let dns = [node.as_str(), &format!("{node}.cluster.example")];
    let ip_addr: IpAddr = ip.parse().expect("IP");
    let (serving_pem, _) = node_csr_with_sans(&node, &dns, &[ip_addr]);
    let serving =
        submit_csr(&kubelet, &csr_object(&format!("{node}-serving-1"), &serving_pem, KUBELET_SERVING, SERVING_USAGES))
            .await;
    assert_eq!(approval(&serving).0, "AutoApproved", "{:?}", serving.status);
    assert!(serving.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some(), "issued");

    // An address in the policy's CIDRs that the Node does not publish: denied.
    let other: IpAddr = "10.20.30.41".parse().expect("IP");
    let (evil_pem, _) = node_csr_with_sans(&node, &[&node], &[other]);
    let evil =
        submit_csr(&kubelet, &csr_object(&format!("{node}-serving-evil"), &evil_pem, KUBELET_SERVING, SERVING_USAGES))
            .await;
    let (reason, message) = condition(&evil, "Denied");
    assert_eq!(reason, "AutoDenied");
    assert!(
        message.contains(&format!("ipAddresses[0] 10.20.30.41 is not among the addresses of Node \"{node}\"")),
        "{message}"
    );

    // Both certificates renewed with the node's own identity.
    let (renew_pem, _) = node_csr(&node);
    let renewed = request_certificate(&kubelet, &format!("node-csr-{node}-2"), &renew_pem).await;
    assert!(approval(&renewed).1.contains("self kubelet client certificate"), "{:?}", renewed.status);
    let (serving2_pem, _) = node_csr_with_sans(&node, &dns, &[ip_addr]);
    let serving2 =
        submit_csr(&kubelet, &csr_object(&format!("{node}-serving-2"), &serving2_pem, KUBELET_SERVING, SERVING_USAGES))
            .await;
    assert_eq!(approval(&serving2).0, "AutoApproved", "{:?}", serving2.status);

    // The kubelet goes silent: no status, no renewals. After the grace period the node
    // lifecycle controller marks it Unknown, and kubectl shows NotReady.
    let deadline = tokio::time::Instant::now() + MARK_WAIT;
    let marked = loop {
        let n = nodes.get(&node).await.expect("GET node");
        if ready_condition(&n).0 == "Unknown" {
            break n;
        }
        assert!(tokio::time::Instant::now() < deadline, "not marked Unknown within {MARK_WAIT:?}: {:?}", n.status);
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(ready_condition(&marked), ("Unknown".into(), "NodeStatusUnknown".into()));
    let row = kubectl_row(&s, &node, &[]);
    assert_eq!(row[1], "NotReady", "STATUS: {row:?}");

    // The kubelet comes back: its next status update makes it Ready again.
    nodes.patch_status(&node, &status_params, &Patch::Strategic(status_patch(true))).await.expect("status patch");
    assert_eq!(ready_condition(&nodes.get(&node).await.expect("GET node")).0, "True");
}
