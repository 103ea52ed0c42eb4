//! NodeRestriction for pods, as upstream's `admitPod`, `admitPodStatus` and
//! `admitPodEviction` (same messages). A node:
//!
//! - creates only mirror pods of its own: annotation `kubernetes.io/config.mirror`,
//!   `spec.nodeName` itself, exactly one owner reference, to its own Node (`v1`, `Node`, its
//!   name and the stored Node's uid), as controller and without `blockOwnerDeletion`; no
//!   service account, and no reference to a Secret, ConfigMap, ClusterTrustBundle or
//!   PersistentVolumeClaim (volumes, projections, environment, image pull secrets; kustos
//!   also refuses `ephemeral` volumes, which create claims);
//! - never updates or patches a pod itself ("can only create and delete mirror pods");
//! - deletes only pods bound to it (`spec.nodeName` of the stored pod), also item by item in
//!   a delete-collection;
//! - writes `pods/status` only of pods bound to it, without changing their labels or
//!   `status.resourceClaimStatuses`;
//! - evicts (`pods/eviction` create) only pods bound to it. kustos does not serve
//!   `pods/eviction` (a POST there is 404); the rule is here so that serving it stays safe;
//! - touches no other pod subresource.
//!
//! In: the write and what the plugin read for it ([`Lookups`]: the node's own Node for a
//! create, the pod for an eviction). Out: why the write is refused ([`Refusal`]), if it is.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, Node, Pod, PodSpec, Volume, VolumeProjection};

use super::Write;
use crate::admission::Operation;

/// The annotation that marks a mirror pod (`kubelet/types.ConfigMirrorAnnotationKey`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What the plugin read for a pod write: the stored Node named after the node (a create), the
/// stored pod an eviction names. `None`: not found (or not needed).
#[derive(Debug, Default, Clone, Copy)]
pub struct Lookups<'a> {
    pub node: Option<&'a Node>,
    pub pod: Option<&'a Pod>,
}

/// Why a node's pod write is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 403, with this reason.
    Forbidden(String),
    /// 404: the node's own Node (a mirror pod's owner) does not exist.
    NodeNotFound,
    /// 404: the pod to evict does not exist.
    PodNotFound(String),
}

fn forbidden(why: String) -> Option<Refusal> {
    Some(Refusal::Forbidden(why))
}

/// Upstream's name of an operation (`admission.Operation`).
fn op_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Read => "READ",
    }
}

fn node_name(pod: Option<&Pod>) -> &str {
    pod.and_then(|p| p.spec.as_ref()).and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

/// Why `node` may not make this write to a pod (or one of its subresources), if it may not.
pub fn problem(node: &str, write: &Write<'_, Pod>, found: &Lookups<'_>) -> Option<Refusal> {
    match write.subresource {
        "" => match write.op {
            Operation::Create => create_problem(node, write.new, found.node),
            // The stored pod (the delete path reads it before admission).
            Operation::Delete => (node_name(write.old) != node).then(|| {
                Refusal::Forbidden(format!("node {node:?} can only delete pods with spec.nodeName set to itself"))
            }),
            op => forbidden(format!(
                "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
                op_name(op)
            )),
        },
        "status" => match write.op {
            Operation::Update => status_problem(node, write.new, write.old),
            op => forbidden(format!("unexpected operation {:?}", op_name(op))),
        },
        "eviction" => match write.op {
            Operation::Create => eviction_problem(node, write, found.pod),
            op => forbidden(format!("unexpected operation {}", op_name(op))),
        },
        sub => forbidden(format!("unexpected pod subresource {sub:?}, only 'status' and 'eviction' are allowed")),
    }
}

fn status_problem(node: &str, new: Option<&Pod>, old: Option<&Pod>) -> Option<Refusal> {
    if node_name(old) != node {
        return forbidden(format!(
            "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
        ));
    }
    // Absent, null and empty labels are all "no labels" (`labels.Equals`).
    fn labels(p: Option<&Pod>) -> Option<&std::collections::BTreeMap<String, String>> {
        p.and_then(|p| p.metadata.labels.as_ref()).filter(|m| !m.is_empty())
    }
    if labels(new) != labels(old) {
        return forbidden(format!("node {node:?} cannot update labels through pod status"));
    }
    if claim_statuses(new) != claim_statuses(old) {
        return forbidden(format!("node {node:?} cannot update resource claim statues"));
    }
    None
}

/// `status.resourceClaimStatuses` as upstream compares them: in order, by name and claim name.
fn claim_statuses(pod: Option<&Pod>) -> Vec<(&str, Option<&str>)> {
    let statuses = pod.and_then(|p| p.status.as_ref()).and_then(|s| s.resource_claim_statuses.as_deref());
    statuses.unwrap_or_default().iter().map(|s| (s.name.as_str(), s.resource_claim_name.as_deref())).collect()
}

/// An eviction: `write.new` is the Eviction, read as far as the metadata it shares with a Pod.
fn eviction_problem(node: &str, write: &Write<'_, Pod>, pod: Option<&Pod>) -> Option<Refusal> {
    // The pod named in the URL, else the one the Eviction names.
    let name = if write.url_name.is_empty() { write.object_name() } else { write.url_name };
    if name.is_empty() {
        return forbidden("could not determine pod from request data".into());
    }
    let Some(pod) = pod else { return Some(Refusal::PodNotFound(name.to_string())) };
    (node_name(Some(pod)) != node)
        .then(|| Refusal::Forbidden(format!("node {node} can only evict pods with spec.nodeName set to itself")))
}

fn create_problem(node: &str, pod: Option<&Pod>, node_obj: Option<&Node>) -> Option<Refusal> {
    let Some(pod) = pod else { return forbidden("unexpected type <nil>".into()) };
    if !pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)) {
        return forbidden(format!(
            "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
        ));
    }
    if node_name(Some(pod)) != node {
        return forbidden(format!("node {node:?} can only create pods with spec.nodeName set to itself"));
    }
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    let [owner] = owners else {
        return forbidden(if owners.is_empty() {
            format!("node {node:?} can only create pods with an owner reference set to itself")
        } else {
            format!("node {node:?} can only create pods with a single owner reference set to itself")
        });
    };
    if owner.api_version != "v1" || owner.kind != "Node" || owner.name != node {
        return forbidden(format!("node {node:?} can only create pods with an owner reference set to itself"));
    }
    if owner.controller != Some(true) {
        return forbidden(format!(
            "node {node:?} can only create pods with a controller owner reference set to itself"
        ));
    }
    if owner.block_owner_deletion == Some(true) {
        return forbidden(format!("node {node:?} must not set blockOwnerDeletion on an owner reference"));
    }
    let Some(node_obj) = node_obj else { return Some(Refusal::NodeNotFound) };
    let uid = node_obj.metadata.uid.as_deref().unwrap_or_default();
    if owner.uid != uid {
        return forbidden(format!("node {node} UID mismatch: expected {} got {uid}", owner.uid));
    }
    let default = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default);
    if spec.service_account_name.as_deref().is_some_and(|s| !s.is_empty()) {
        return forbidden(format!("node {node:?} can not create pods that reference a service account"));
    }
    if references(spec, &SECRET_REFS) {
        return forbidden(format!("node {node:?} can not create pods that reference secrets"));
    }
    if references(spec, &CONFIGMAP_REFS) {
        return forbidden(format!("node {node:?} can not create pods that reference configmaps"));
    }
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    if volumes.iter().flat_map(sources).any(|s| s.cluster_trust_bundle.is_some()) {
        return forbidden(format!("node {node:?} can not create pods that reference clustertrustbundles"));
    }
    if volumes.iter().any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some()) {
        return forbidden(format!("node {node:?} can not create pods that reference persistentvolumeclaims"));
    }
    None
}

/// A volume's projected sources.
fn sources(v: &Volume) -> &[VolumeProjection] {
    v.projected.as_ref().and_then(|p| p.sources.as_deref()).unwrap_or_default()
}

/// A name that names something (an empty one names nothing).
fn named(name: Option<&str>) -> bool {
    name.is_some_and(|n| !n.is_empty())
}

/// Where a pod names objects of one kind (upstream's `VisitPodSecretNames`,
/// `VisitPodConfigmapNames`): `spec.imagePullSecrets` (Secrets only), the names in the
/// `envFrom` and `env` items of every kind of container, in each volume and in each projected
/// source. An empty name references nothing.
struct Refs {
    image_pull_secrets: bool,
    env_from: fn(&EnvFromSource) -> Option<&str>,
    env: fn(&EnvVar) -> Option<&str>,
    /// Whether a volume names one.
    volume: fn(&Volume) -> bool,
    projection: fn(&VolumeProjection) -> Option<&str>,
}

const SECRET_REFS: Refs = Refs {
    image_pull_secrets: true,
    env_from: |e| e.secret_ref.as_ref().map(|r| r.name.as_str()),
    env: |e| e.value_from.as_ref()?.secret_key_ref.as_ref().map(|r| r.name.as_str()),
    volume: |v| {
        let names = [
            v.azure_file.as_ref().map(|s| s.secret_name.as_str()),
            v.cephfs.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| r.name.as_str()),
            v.cinder.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| r.name.as_str()),
            v.flex_volume.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| r.name.as_str()),
            v.rbd.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| r.name.as_str()),
            v.secret.as_ref().and_then(|s| s.secret_name.as_deref()),
            v.scale_io.as_ref().map(|s| s.secret_ref.name.as_str()),
            v.iscsi.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| r.name.as_str()),
            v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| r.name.as_str()),
            v.csi.as_ref().and_then(|s| s.node_publish_secret_ref.as_ref()).map(|r| r.name.as_str()),
        ];
        names.into_iter().any(named)
    },
    projection: |p| p.secret.as_ref().map(|s| s.name.as_str()),
};

const CONFIGMAP_REFS: Refs = Refs {
    image_pull_secrets: false,
    env_from: |e| e.config_map_ref.as_ref().map(|r| r.name.as_str()),
    env: |e| e.value_from.as_ref()?.config_map_key_ref.as_ref().map(|r| r.name.as_str()),
    volume: |v| named(v.config_map.as_ref().map(|c| c.name.as_str())),
    projection: |p| p.config_map.as_ref().map(|c| c.name.as_str()),
};

/// Whether `spec` names an object through any of `refs`.
fn references(spec: &PodSpec, refs: &Refs) -> bool {
    let pull_secrets = refs.image_pull_secrets
        && spec.image_pull_secrets.as_deref().unwrap_or_default().iter().any(|r| named(Some(&r.name)));
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let containers = init.iter().chain(&spec.containers).map(|c| (c.env.as_deref(), c.env_from.as_deref()));
    let ephemeral = spec.ephemeral_containers.as_deref().unwrap_or_default();
    let ephemeral = ephemeral.iter().map(|c| (c.env.as_deref(), c.env_from.as_deref()));
    let env = containers.chain(ephemeral).any(|(env, env_from)| {
        env_from.unwrap_or_default().iter().any(|e| named((refs.env_from)(e)))
            || env.unwrap_or_default().iter().any(|e| named((refs.env)(e)))
    });
    let volumes = spec
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|v| (refs.volume)(v) || sources(v).iter().any(|s| named((refs.projection)(s))));
    pull_secrets || env || volumes
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        crate::admission::decode(&v).unwrap()
    }

    fn mirror() -> Value {
        json!({"metadata": {"name": "etcd-n1", "namespace": "kube-system",
                             "annotations": {"kubernetes.io/config.mirror": "abc"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1", "controller": true}]},
               "spec": {"nodeName": "n1", "containers": [{"name": "etcd", "image": "etcd"}]}})
    }

    fn write<'a>(subresource: &'a str, op: Operation, new: Option<&'a Pod>, old: Option<&'a Pod>) -> Write<'a, Pod> {
        Write { group: "", resource: "pods", subresource, op, namespace: "kube-system", url_name: "p", new, old }
    }

    /// `mirror()` changed by `f`.
    fn with(f: impl Fn(&mut Value)) -> Pod {
        let mut p = mirror();
        f(&mut p);
        typed(p)
    }

    #[test]
    fn pods_a_node_may_write() {
        let node_obj: Node = typed(json!({"metadata": {"name": "n1", "uid": "u1"}}));
        let found = Lookups { node: Some(&node_obj), pod: None };
        let ok: Pod = typed(mirror());
        let not_mirror = with(|p| p["metadata"]["annotations"] = json!({}));
        let elsewhere = with(|p| p["spec"]["nodeName"] = json!("n2"));
        let owned_by_other = with(|p| p["metadata"]["ownerReferences"][0]["name"] = json!("n2"));
        let owned_by_pod = with(|p| p["metadata"]["ownerReferences"][0]["kind"] = json!("Pod"));
        let no_owner = with(|p| p["metadata"].as_object_mut().unwrap().remove("ownerReferences").map(drop).unwrap());
        let two_owners = with(|p| p["metadata"]["ownerReferences"] = json!([{}, {}]));
        let not_controller = with(|p| p["metadata"]["ownerReferences"][0]["controller"] = json!(false));
        let blocking = with(|p| p["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true));
        let stale_uid = with(|p| p["metadata"]["ownerReferences"][0]["uid"] = json!("u0"));
        let with_sa = with(|p| p["spec"]["serviceAccountName"] = json!("default"));
        let volume = |v: Value| with(move |p| p["spec"]["volumes"] = json!([v]));
        let container = |c: Value| {
            with(move |p| {
                let mut full = c.clone();
                full["name"] = json!("x");
                p["spec"]["initContainers"] = json!([full]);
            })
        };
        let secret_volume = volume(json!({"name": "s", "secret": {"secretName": "x"}}));
        let unnamed_secret_volume = volume(json!({"name": "s", "secret": {}}));
        let csi_secret = volume(json!({"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "x"}}}));
        let projected_secret = volume(json!({"name": "p", "projected": {"sources": [{"secret": {"name": "x"}}]}}));
        let projected_cm = volume(json!({"name": "p", "projected": {"sources": [{"configMap": {"name": "x"}}]}}));
        let projected_ctb = volume(
            json!({"name": "p", "projected": {"sources": [{"clusterTrustBundle": {"name": "x", "path": "b"}}]}}),
        );
        let projected_token = volume(
            json!({"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}, {"downwardAPI": {}}]}}),
        );
        let cm_volume = volume(json!({"name": "c", "configMap": {"name": "x"}}));
        let pvc = volume(json!({"name": "c", "persistentVolumeClaim": {"claimName": "x"}}));
        let ephemeral = volume(json!({"name": "c", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}));
        let env_secret =
            container(json!({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}]}));
        let env_from_cm = container(json!({"envFrom": [{"configMapRef": {"name": "x"}}]}));
        let pull_secret = with(|p| p["spec"]["imagePullSecrets"] = json!([{"name": "x"}]));
        let empty_pull_secret = with(|p| p["spec"]["imagePullSecrets"] = json!([{"name": ""}]));
        let n1_value = json!({"spec": {"nodeName": "n1"}});
        let n2_pod: Pod = typed(json!({"spec": {"nodeName": "n2"}}));
        let mut relabelled = n1_value.clone();
        relabelled["metadata"] = json!({"labels": {"app": "x"}});
        let relabelled: Pod = typed(relabelled);
        let empty_labels: Pod = typed(json!({"metadata": {"labels": {}}, "spec": {"nodeName": "n1"}}));
        let mut claimed = n1_value.clone();
        claimed["status"] = json!({"resourceClaimStatuses": [{"name": "c", "resourceClaimName": "claim"}]});
        let claimed: Pod = typed(claimed);
        let n1_pod: Pod = typed(n1_value);
        let eviction: Pod = typed(json!({"metadata": {"name": "p"}}));
        let unnamed_eviction: Pod = typed(json!({"metadata": {}}));
        let own = Lookups { node: None, pod: Some(&n1_pod) };
        let others = Lookups { node: None, pod: Some(&n2_pod) };
        let none = Lookups::default();
        use Operation::{Create, Delete, Update};
        let f = |s: &str| Some(Refusal::Forbidden(s.to_string()));
        let cases: Vec<(&str, Write<'_, Pod>, Lookups<'_>, Option<Refusal>)> = vec![
            ("its own mirror pod", write("", Create, Some(&ok), None), found, None),
            (
                "not a mirror pod",
                write("", Create, Some(&not_mirror), None),
                found,
                f("pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"),
            ),
            (
                "bound to another node",
                write("", Create, Some(&elsewhere), None),
                found,
                f("node \"n1\" can only create pods with spec.nodeName set to itself"),
            ),
            (
                "owned by another node",
                write("", Create, Some(&owned_by_other), None),
                found,
                f("node \"n1\" can only create pods with an owner reference set to itself"),
            ),
            (
                "owned by something else",
                write("", Create, Some(&owned_by_pod), None),
                found,
                f("node \"n1\" can only create pods with an owner reference set to itself"),
            ),
            (
                "no owner",
                write("", Create, Some(&no_owner), None),
                found,
                f("node \"n1\" can only create pods with an owner reference set to itself"),
            ),
            (
                "two owners",
                write("", Create, Some(&two_owners), None),
                found,
                f("node \"n1\" can only create pods with a single owner reference set to itself"),
            ),
            (
                "not the controller",
                write("", Create, Some(&not_controller), None),
                found,
                f("node \"n1\" can only create pods with a controller owner reference set to itself"),
            ),
            (
                "blocking owner deletion",
                write("", Create, Some(&blocking), None),
                found,
                f("node \"n1\" must not set blockOwnerDeletion on an owner reference"),
            ),
            ("its Node is gone", write("", Create, Some(&ok), None), none, Some(Refusal::NodeNotFound)),
            (
                "a previous Node's uid",
                write("", Create, Some(&stale_uid), None),
                found,
                f("node n1 UID mismatch: expected u0 got u1"),
            ),
            (
                "a service account",
                write("", Create, Some(&with_sa), None),
                found,
                f("node \"n1\" can not create pods that reference a service account"),
            ),
            (
                "a secret volume",
                write("", Create, Some(&secret_volume), None),
                found,
                f("node \"n1\" can not create pods that reference secrets"),
            ),
            ("a secret volume naming nothing", write("", Create, Some(&unnamed_secret_volume), None), found, None),
            (
                "a CSI secret",
                write("", Create, Some(&csi_secret), None),
                found,
                f("node \"n1\" can not create pods that reference secrets"),
            ),
            (
                "a projected secret",
                write("", Create, Some(&projected_secret), None),
                found,
                f("node \"n1\" can not create pods that reference secrets"),
            ),
            (
                "an environment secret",
                write("", Create, Some(&env_secret), None),
                found,
                f("node \"n1\" can not create pods that reference secrets"),
            ),
            (
                "an image pull secret",
                write("", Create, Some(&pull_secret), None),
                found,
                f("node \"n1\" can not create pods that reference secrets"),
            ),
            ("an image pull secret naming nothing", write("", Create, Some(&empty_pull_secret), None), found, None),
            (
                "a configmap volume",
                write("", Create, Some(&cm_volume), None),
                found,
                f("node \"n1\" can not create pods that reference configmaps"),
            ),
            (
                "a projected configmap",
                write("", Create, Some(&projected_cm), None),
                found,
                f("node \"n1\" can not create pods that reference configmaps"),
            ),
            (
                "an environment configmap",
                write("", Create, Some(&env_from_cm), None),
                found,
                f("node \"n1\" can not create pods that reference configmaps"),
            ),
            (
                "a projected cluster trust bundle",
                write("", Create, Some(&projected_ctb), None),
                found,
                f("node \"n1\" can not create pods that reference clustertrustbundles"),
            ),
            ("projected tokens and the downward API", write("", Create, Some(&projected_token), None), found, None),
            (
                "a claim",
                write("", Create, Some(&pvc), None),
                found,
                f("node \"n1\" can not create pods that reference persistentvolumeclaims"),
            ),
            (
                "an ephemeral claim",
                write("", Create, Some(&ephemeral), None),
                found,
                f("node \"n1\" can not create pods that reference persistentvolumeclaims"),
            ),
            (
                "a spec update",
                write("", Update, Some(&ok), Some(&ok)),
                found,
                f("unexpected operation \"UPDATE\", node \"n1\" can only create and delete mirror pods"),
            ),
            ("delete its own pod", write("", Delete, None, Some(&n1_pod)), none, None),
            (
                "delete another node's pod",
                write("", Delete, None, Some(&n2_pod)),
                none,
                f("node \"n1\" can only delete pods with spec.nodeName set to itself"),
            ),
            ("status of its own pod", write("status", Update, Some(&n1_pod), Some(&n1_pod)), none, None),
            ("no labels and empty labels are the same", write("status", Update, Some(&empty_labels), Some(&n1_pod)), none, None),
            (
                "status of another node's pod",
                write("status", Update, Some(&n2_pod), Some(&n2_pod)),
                none,
                f("node \"n1\" can only update pod status for pods with spec.nodeName set to itself"),
            ),
            (
                "labels through status",
                write("status", Update, Some(&relabelled), Some(&n1_pod)),
                none,
                f("node \"n1\" cannot update labels through pod status"),
            ),
            (
                "claim statuses",
                write("status", Update, Some(&claimed), Some(&n1_pod)),
                none,
                f("node \"n1\" cannot update resource claim statues"),
            ),
            ("evict its own pod", write("eviction", Create, Some(&eviction), None), own, None),
            (
                "evict another node's pod",
                write("eviction", Create, Some(&eviction), None),
                others,
                f("node n1 can only evict pods with spec.nodeName set to itself"),
            ),
            (
                "evict a pod that is not there",
                write("eviction", Create, Some(&eviction), None),
                none,
                Some(Refusal::PodNotFound("p".into())),
            ),
            (
                "evict without a pod name",
                Write { url_name: "", ..write("eviction", Create, Some(&unnamed_eviction), None) },
                own,
                f("could not determine pod from request data"),
            ),
            (
                "another subresource",
                write("ephemeralcontainers", Update, Some(&n1_pod), Some(&n1_pod)),
                none,
                f("unexpected pod subresource \"ephemeralcontainers\", only 'status' and 'eviction' are allowed"),
            ),
            (
                "binding",
                write("binding", Create, Some(&n1_pod), None),
                none,
                f("unexpected pod subresource \"binding\", only 'status' and 'eviction' are allowed"),
            ),
        ];
        for (what, w, found, want) in cases {
            assert_eq!(problem("n1", &w, &found), want, "{what}");
        }
    }
}
