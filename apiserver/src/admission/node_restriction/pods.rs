//! NodeRestriction for pods, as upstream's `admitPod`/`admitPodStatus`: a node creates only
//! mirror pods of its own (annotation `kubernetes.io/config.mirror`, `spec.nodeName` itself,
//! owned by nothing but its own Node, using no service account and no Secret, ConfigMap or
//! claim volumes), never changes a pod's spec, and writes the status only of pods bound to it.
//!
//! Not checked here (upstream reads the stored pod for them, and a delete or an eviction is
//! admitted before anything is read): which pods a node deletes or evicts.

use serde_json::Value;

use super::Write;
use crate::admission::Operation;

/// The annotation that marks a mirror pod (`kubelet/types.ConfigMirrorAnnotationKey`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn node_name(pod: Option<&Value>) -> &str {
    pod.and_then(|p| p.pointer("/spec/nodeName")).and_then(Value::as_str).unwrap_or_default()
}

/// Why `node` may not make this write to a pod, if it may not.
pub fn problem(node: &str, write: &Write<'_>) -> Option<String> {
    match (write.subresource, write.op) {
        ("", Operation::Create) => create_problem(node, write.new),
        ("", Operation::Update) => Some(format!("node {node:?} can only update pod status")),
        ("status", Operation::Update) => (node_name(write.old) != node)
            .then(|| format!("node {node:?} can only update pod status for pods with spec.nodeName set to itself")),
        _ => None,
    }
}

fn create_problem(node: &str, pod: Option<&Value>) -> Option<String> {
    let pod = pod?;
    if pod.pointer(&format!("/metadata/annotations/{}", MIRROR_ANNOTATION.replace('/', "~1"))).is_none() {
        return Some(format!(
            "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
        ));
    }
    if node_name(Some(pod)) != node {
        return Some(format!("node {node:?} can only create pods with spec.nodeName set to itself"));
    }
    let owners = pod.pointer("/metadata/ownerReferences").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    if owners.len() > 1 {
        return Some(format!("node {node:?} can only create pods with a single owner reference set to itself"));
    }
    if let Some(owner) = owners.first() {
        let is = |k: &str, v: &str| owner.get(k).and_then(Value::as_str) == Some(v);
        if !(is("apiVersion", "v1") && is("kind", "Node") && is("name", node)) {
            return Some(format!("node {node:?} can only create pods with an owner reference set to itself"));
        }
        if owner.get("controller").and_then(Value::as_bool) != Some(true) {
            return Some(format!("node {node:?} can only create pods with a controller owner reference set to itself"));
        }
        if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
            return Some(format!("node {node:?} must not set blockOwnerDeletion on an owner reference"));
        }
    }
    let spec = pod.get("spec");
    if spec.and_then(|s| s.get("serviceAccountName")).and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        return Some(format!("node {node:?} can not create pods that reference a service account"));
    }
    let volumes = spec.and_then(|s| s.get("volumes")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for (key, what) in [
        ("secret", "secrets"),
        ("configMap", "configmaps"),
        ("persistentVolumeClaim", "persistentvolumeclaims"),
        ("ephemeral", "persistentvolumeclaims"),
        ("projected", "projected volumes"),
    ] {
        if volumes.iter().any(|v| v.get(key).is_some_and(|x| !x.is_null())) {
            return Some(format!("node {node:?} can not create pods that reference {what}"));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mirror() -> Value {
        json!({"metadata": {"name": "etcd-n1", "namespace": "kube-system",
                             "annotations": {"kubernetes.io/config.mirror": "abc"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u", "controller": true}]},
               "spec": {"nodeName": "n1", "containers": [{"name": "etcd", "image": "etcd"}]}})
    }

    fn write<'a>(subresource: &'a str, op: Operation, new: Option<&'a Value>, old: Option<&'a Value>) -> Write<'a> {
        Write { group: "", resource: "pods", subresource, op, namespace: "kube-system", url_name: "", new, old }
    }

    #[test]
    fn pods_a_node_may_write() {
        let ok = mirror();
        let mut not_mirror = mirror();
        not_mirror["metadata"]["annotations"] = json!({});
        let mut elsewhere = mirror();
        elsewhere["spec"]["nodeName"] = json!("n2");
        let mut owned_by_other = mirror();
        owned_by_other["metadata"]["ownerReferences"][0]["name"] = json!("n2");
        let mut two_owners = mirror();
        two_owners["metadata"]["ownerReferences"] = json!([{}, {}]);
        let mut with_sa = mirror();
        with_sa["spec"]["serviceAccountName"] = json!("default");
        let mut with_secret = mirror();
        with_secret["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
        let bound_elsewhere = json!({"spec": {"nodeName": "n2"}});
        let cases: Vec<(&str, Write<'_>, Option<&str>)> = vec![
            ("its own mirror pod", write("", Operation::Create, Some(&ok), None), None),
            (
                "not a mirror pod",
                write("", Operation::Create, Some(&not_mirror), None),
                Some("can only create mirror pods"),
            ),
            (
                "bound to another node",
                write("", Operation::Create, Some(&elsewhere), None),
                Some("spec.nodeName set to itself"),
            ),
            (
                "owned by another node",
                write("", Operation::Create, Some(&owned_by_other), None),
                Some("owner reference set to itself"),
            ),
            ("two owners", write("", Operation::Create, Some(&two_owners), None), Some("single owner reference")),
            (
                "a service account",
                write("", Operation::Create, Some(&with_sa), None),
                Some("reference a service account"),
            ),
            ("a secret volume", write("", Operation::Create, Some(&with_secret), None), Some("reference secrets")),
            ("a spec update", write("", Operation::Update, Some(&ok), Some(&ok)), Some("can only update pod status")),
            ("status of its own pod", write("status", Operation::Update, Some(&ok), Some(&ok)), None),
            (
                "status of another node's pod",
                write("status", Operation::Update, Some(&ok), Some(&bound_elsewhere)),
                Some("pods with spec.nodeName set to itself"),
            ),
            ("a delete (not checked here)", write("", Operation::Delete, None, None), None),
        ];
        for (what, w, want) in cases {
            let got = problem("n1", &w);
            match (want, &got) {
                (None, None) => {}
                (Some(frag), Some(g)) => assert!(g.contains(frag), "{what}: {g}"),
                _ => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }
}
