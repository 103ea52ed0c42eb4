//! NodeRestriction admission, for the kinds kustos serves, as upstream's plugin
//! (`plugin/pkg/admission/noderestriction`, same messages). A node (user `system:node:<name>`
//! in group `system:nodes`):
//!
//! - creates, updates and deletes Leases only in `kube-node-lease` and only the one named
//!   after itself;
//! - creates, updates (also through `nodes/status`) and deletes only its own Node; it may not
//!   register with a `configSource`, set one, or change its own taints, and may not set or
//!   change labels under `node-restriction.kubernetes.io/` nor `kubernetes.io`/`k8s.io` labels
//!   outside the set kubelets own ([`is_kubelet_label`]);
//! - creates, updates and deletes only its own CSINode;
//! - creates only its own mirror pods, deletes, evicts and writes the status only of pods
//!   bound to it ([`pods`]);
//! - creates kubelet client and serving certificate requests only in its own name
//!   ([`certificates`]);
//! - asks for service-account tokens only bound to pods bound to it, for the audiences those
//!   pods use ([`tokens`]).
//!
//! The Node authorizer ([`crate::authz::rbac::node`]) limits a node by the name in the URL; a
//! create has no name in the URL, so the name in the body is checked here, and what a pod is
//! bound to is read from the stored pod (a delete passes admission with the stored object).
//! Writes by anyone who is not a node are not this plugin's business.
//!
//! In: the write, its user, and what the plugin read for it ([`pods::Lookups`]). Out: the
//! write, or a 403 Forbidden worded as upstream's (`<resource> "<name>" is forbidden: <why>`,
//! the name from the URL, else the object's name or generateName, else `Unknown`), or a 404
//! where upstream's plugin answers NotFound (a mirror pod's Node, an evicted pod).

pub mod certificates;
pub mod pods;
pub mod tokens;

use std::collections::BTreeSet;

use serde_json::Value;

use crate::admission::Operation;
use crate::authn::UserInfo;
use crate::error::ApiError;

const LEASE_GROUP: &str = "coordination.k8s.io";
const LEASES: &str = "leases";
const NODES: &str = "nodes";
const STORAGE_GROUP: &str = "storage.k8s.io";
const CSINODES: &str = "csinodes";
/// Where the nodes' heartbeat Leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The kinds this plugin looks at: (group, resource).
const HANDLED: &[(&str, &str)] =
    &[(LEASE_GROUP, LEASES), ("", NODES), (STORAGE_GROUP, CSINODES), ("", PODS), (CSR_GROUP, CSRS)];
const PODS: &str = "pods";
const CSR_GROUP: &str = "certificates.k8s.io";
const CSRS: &str = "certificatesigningrequests";
const SERVICEACCOUNTS: &str = "serviceaccounts";

/// Labels a kubelet sets on its own Node (`k8s.io/kubelet/pkg/apis.KubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
/// Label namespaces (and their subdomains) a kubelet may set (`KubeletLabelNamespaces`).
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
/// The label namespace only administrators set (`v1.LabelNamespaceNodeRestriction`).
const NODE_RESTRICTION_LABEL_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// What a write is, as far as this plugin looks at it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    /// The subresource (`status`), empty for the object itself.
    pub subresource: &'a str,
    pub op: Operation,
    /// The namespace of the request.
    pub namespace: &'a str,
    /// The name in the URL (empty on create).
    pub url_name: &'a str,
    /// The written object (None on delete).
    pub new: Option<&'a Value>,
    /// The stored object (updates).
    pub old: Option<&'a Value>,
}

impl Write<'_> {
    fn object_name(&self) -> &str {
        self.new.map(crate::meta::name).unwrap_or_default()
    }

    /// The name upstream's `admission.NewForbidden` puts in the message: the one in the URL,
    /// else the written object's name or generateName, else `Unknown`.
    fn subject(&self) -> &str {
        if !self.url_name.is_empty() {
            return self.url_name;
        }
        let generate_name =
            || self.new.and_then(|o| o.pointer("/metadata/generateName")).and_then(Value::as_str).unwrap_or_default();
        [self.object_name(), generate_name()].into_iter().find(|n| !n.is_empty()).unwrap_or("Unknown")
    }
}

/// Admit or refuse a write by `user` (see the module doc); `found` is what the plugin read
/// for a pod write ([`pods::Lookups`]).
pub fn admit(user: &UserInfo, write: &Write<'_>, found: &pods::Lookups<'_>) -> Result<(), ApiError> {
    if !HANDLED.contains(&(write.group, write.resource)) {
        return Ok(());
    }
    let Some(node) = crate::authz::rbac::node::node_name(user) else { return Ok(()) };
    if (write.group, write.resource) == (LEASE_GROUP, LEASES) {
        return admit_lease(node, user, write);
    }
    let forbidden = |why: String| {
        let name = write.subject();
        let gr = crate::error::group_resource(write.group, write.resource);
        ApiError::forbidden(write.group, write.resource, name, format!("{gr} {name:?} is forbidden: {why}"))
    };
    if node.is_empty() {
        return Err(forbidden(format!("could not determine node from user {:?}", user.name)));
    }
    let problem = match write.resource {
        NODES => node_problem(node, write),
        CSRS => certificates::problem(node, write),
        PODS => match pods::problem(node, write, found) {
            None => None,
            Some(pods::Refusal::Forbidden(why)) => Some(why),
            Some(pods::Refusal::NodeNotFound) => return Err(ApiError::not_found("", NODES, node)),
            Some(pods::Refusal::PodNotFound(name)) => return Err(ApiError::not_found("", PODS, &name)),
        },
        _ => csinode_problem(node, write),
    };
    problem.map_or(Ok(()), |why| Err(forbidden(why)))
}

fn admit_lease(node: &str, user: &UserInfo, write: &Write<'_>) -> Result<(), ApiError> {
    // A create has no name in the URL: the one in the proposed object counts (and names the
    // object in the error, as upstream's).
    let name = match write.op {
        Operation::Create => write.object_name(),
        _ => write.url_name,
    };
    match lease_problem(node, user, write.namespace, name) {
        None => Ok(()),
        Some(why) => Err(ApiError::forbidden(
            LEASE_GROUP,
            LEASES,
            name,
            format!("{LEASES}.{LEASE_GROUP} {name:?} is forbidden: {why}"),
        )),
    }
}

/// Why `node` may not write the Lease `name` in `namespace`, if it may not.
fn lease_problem(node: &str, user: &UserInfo, namespace: &str, name: &str) -> Option<String> {
    if node.is_empty() {
        return Some(format!("could not determine node from user {:?}", user.name));
    }
    if namespace != NODE_LEASE_NAMESPACE {
        return Some(format!("can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"));
    }
    (name != node).then(|| "can only access node lease with the same name as the requesting node".to_string())
}

/// The namespace (prefix) of a label key, empty when it has none.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.'))
}

/// Whether a kubelet may set label `key` on its own Node (`IsKubeletLabel`).
pub fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key) || KUBELET_LABEL_NAMESPACES.iter().any(|ns| in_namespace(label_namespace(key), ns))
}

/// The labels among `modified` a node may not add, remove or change (`getForbiddenLabels`).
fn forbidden_labels(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|key| {
            let ns = label_namespace(key);
            let kubernetes = ["kubernetes.io", "k8s.io"].iter().any(|d| in_namespace(ns, d));
            in_namespace(ns, NODE_RESTRICTION_LABEL_NAMESPACE) || (kubernetes && !is_kubelet_label(key))
        })
        .cloned()
        .collect()
}

fn labels(obj: Option<&Value>) -> Vec<(String, Value)> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// The label keys added, removed or changed between `a` and `b` (`getModifiedLabels`).
fn modified_labels(a: Option<&Value>, b: Option<&Value>) -> BTreeSet<String> {
    let (a, b) = (labels(a), labels(b));
    let differs = |x: &[(String, Value)], y: &[(String, Value)]| {
        x.iter()
            .filter(|(k, v)| !y.iter().any(|(k2, v2)| k2 == k && v2 == v))
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    differs(&a, &b).into_iter().chain(differs(&b, &a)).collect()
}

/// A field of the spec, with null the same as absent.
fn spec_field<'a>(obj: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    obj.and_then(|o| o.get("spec")).and_then(|s| s.get(key)).filter(|v| !v.is_null())
}

/// Taints, with absent, null and empty all the same (upstream's semantic equality).
fn taints(obj: Option<&Value>) -> &[Value] {
    spec_field(obj, "taints").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// Why `node` may not make this write to a Node (`admitNode`), if it may not.
fn node_problem(node: &str, write: &Write<'_>) -> Option<String> {
    // Upstream's create handler names the attributes after the object.
    let requested = if write.op == Operation::Create { write.object_name() } else { write.url_name };
    if requested != node {
        return Some(format!("node {node:?} is not allowed to modify node {requested:?}"));
    }
    match write.op {
        Operation::Create => {
            if spec_field(write.new, "configSource").is_some() {
                return Some(format!("node {node:?} is not allowed to create pods with a non-nil configSource"));
            }
            let forbidden = forbidden_labels(&modified_labels(write.new, None));
            if !forbidden.is_empty() {
                return Some(format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    forbidden.join(", ")
                ));
            }
        }
        Operation::Update => {
            let source = spec_field(write.new, "configSource");
            if source.is_some() && source != spec_field(write.old, "configSource") {
                return Some(format!(
                    "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                ));
            }
            if taints(write.new) != taints(write.old) {
                return Some(format!("node {node:?} is not allowed to modify taints"));
            }
            let forbidden = forbidden_labels(&modified_labels(write.new, write.old));
            if !forbidden.is_empty() {
                return Some(format!("is not allowed to modify labels: {}", forbidden.join(", ")));
            }
        }
        Operation::Delete | Operation::Read => {}
    }
    None
}

/// Why `node` may not make this write to a CSINode (`admitCSINode`), if it may not.
fn csinode_problem(node: &str, write: &Write<'_>) -> Option<String> {
    let name = if write.op == Operation::Create { write.object_name() } else { write.url_name };
    (name != node).then(|| "can only access CSINode with the same name as the requesting node".to_string())
}

/// The plugin in the admission chain ([`crate::admission`]).
pub struct NodeRestriction;

#[async_trait::async_trait]
impl crate::admission::Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }
    fn phase(&self) -> crate::admission::Phase {
        crate::admission::Phase::Mutating
    }
    fn handles(&self, a: &crate::admission::Attributes<'_>) -> bool {
        let csr = (a.def.group, a.def.resource) == (CSR_GROUP, CSRS);
        if (a.def.group, a.def.resource) == ("", SERVICEACCOUNTS) {
            return a.op == Operation::Create && a.info.subresource == "token";
        }
        HANDLED.contains(&(a.def.group, a.def.resource))
            && matches!(a.op, Operation::Create | Operation::Update | Operation::Delete)
            && (!csr || a.op == Operation::Create)
    }
    async fn admit(
        &self,
        services: &crate::admission::Services<'_>,
        a: &crate::admission::Attributes<'_>,
    ) -> Result<(), ApiError> {
        let (new, old) = (a.object, a.old_object);
        let write = Write {
            group: a.def.group,
            resource: a.def.resource,
            subresource: &a.info.subresource,
            op: a.op,
            namespace: &a.info.namespace,
            url_name: &a.info.name,
            new,
            old,
        };
        if (write.group, write.resource) == ("", SERVICEACCOUNTS) {
            return admit_token_request(services, a.user, &write).await;
        }
        let (mut node, mut pod) = (None, None);
        if let (Some(name), ("", PODS, Operation::Create)) =
            (crate::authz::rbac::node::node_name(a.user), (write.group, write.resource, write.op))
        {
            // A mirror pod's owner is checked against the stored Node (its uid); an eviction
            // against the stored pod it names.
            match write.subresource {
                "" => node = services.get("", NODES, None, name).await?,
                "eviction" => {
                    let pod_name = if write.url_name.is_empty() { write.object_name() } else { write.url_name };
                    if !pod_name.is_empty() {
                        pod = services.get("", PODS, Some(write.namespace), pod_name).await?;
                    }
                }
                _ => {}
            }
        }
        admit(a.user, &write, &pods::Lookups { node: node.as_ref(), pod: pod.as_ref() })
    }
}

/// A TokenRequest by a node ([`tokens`]): the pure checks, with the pod, the objects its
/// volumes lead to and the authorizer's word read in between.
async fn admit_token_request(
    services: &crate::admission::Services<'_>,
    user: &UserInfo,
    write: &Write<'_>,
) -> Result<(), ApiError> {
    let Some(node) = crate::authz::rbac::node::node_name(user) else { return Ok(()) };
    let sa_name = write.url_name;
    let forbidden = |why: String| {
        ApiError::forbidden("", SERVICEACCOUNTS, sa_name, format!("{SERVICEACCOUNTS} {sa_name:?} is forbidden: {why}"))
    };
    let refuse = |r: pods::Refusal| match r {
        pods::Refusal::Forbidden(why) => forbidden(why),
        pods::Refusal::PodNotFound(name) => ApiError::not_found("", PODS, &name),
        pods::Refusal::NodeNotFound => ApiError::not_found("", NODES, node),
    };
    if node.is_empty() {
        return Err(forbidden(format!("could not determine node from user {:?}", user.name)));
    }
    let request = write.new.unwrap_or(&Value::Null);
    let (pod_name, uid) = tokens::pod_binding(request).map_err(refuse)?;
    let pod = services.get("", PODS, Some(write.namespace), pod_name).await?;
    if let Some(r) = tokens::pod_problem(node, pod_name, uid, pod.as_ref()) {
        return Err(refuse(r));
    }
    let Some(pod) = pod else { return Err(ApiError::not_found("", PODS, pod_name)) };
    let audience = tokens::requested_audience(request).map_err(refuse)?;
    let mut errors = Vec::new();
    for source in tokens::audience_sources(&pod, &audience) {
        let driver = match source {
            tokens::AudienceSource::Projected => return Ok(()),
            tokens::AudienceSource::Driver(d) => d,
            // Neither claims nor volumes are served here: a claim is never found.
            tokens::AudienceSource::Claim(claim) => {
                errors.push(format!("persistentvolumeclaim {claim:?} not found"));
                continue;
            }
        };
        match services.get(STORAGE_GROUP, "csidrivers", None, &driver).await? {
            Some(d) if tokens::driver_has_audience(&d, &audience) => return Ok(()),
            Some(_) => {}
            None => errors.push(format!("csidriver.{STORAGE_GROUP} {driver:?} not found")),
        }
    }
    let authorized = errors.is_empty() && {
        let info = crate::http::request_info::RequestInfo {
            is_resource_request: true,
            verb: tokens::AUDIENCE_VERB.into(),
            api_version: "v1".into(),
            namespace: write.namespace.into(),
            resource: audience.clone(),
            name: sa_name.into(),
            ..Default::default()
        };
        services.allowed(user, &info).await
    };
    match tokens::audience_problem(&audience, &errors, authorized, &user.name) {
        Some(r) => Err(refuse(r)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> UserInfo {
        UserInfo::with_groups(&format!("system:node:{name}"), &["system:nodes", "system:authenticated"])
    }

    fn named(name: &str) -> Value {
        json!({"metadata": {"name": name}})
    }

    /// Run the cases: what, user, write, the refusal's message (None: admitted).
    fn check(cases: &[(&str, &UserInfo, Write<'_>, Option<&str>)]) {
        for (what, user, write, want) in cases {
            match (admit(user, write, &pods::Lookups::default()), want) {
                (Ok(()), None) => {}
                (Err(e), Some(msg)) => {
                    assert_eq!(e.code(), http::StatusCode::FORBIDDEN, "{what}");
                    assert_eq!(e.to_string(), *msg, "{what}");
                }
                (got, _) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn nodes_write_only_their_own_lease_in_kube_node_lease() {
        let n1 = node("n1");
        let empty = node("");
        let not_a_node = UserInfo::with_groups("system:node:n1", &["system:authenticated"]);
        let admin = UserInfo::with_groups("admin", &["system:masters"]);
        let (o1, o2, o_) = (&named("n1"), &named("n2"), &named(""));
        fn lease<'a>(op: Operation, namespace: &'a str, url_name: &'a str, new: Option<&'a Value>) -> Write<'a> {
            Write { group: LEASE_GROUP, resource: LEASES, subresource: "", op, namespace, url_name, new, old: None }
        }
        let same_name = "can only access node lease with the same name as the requesting node";
        let elsewhere = "can only access leases in the \"kube-node-lease\" system namespace";
        use Operation::{Create, Delete, Update};
        let cases: &[(&str, &UserInfo, Write<'_>, Option<&str>)] = &[
            ("create own", &n1, lease(Create, NODE_LEASE_NAMESPACE, "", Some(o1)), None),
            ("update own", &n1, lease(Update, NODE_LEASE_NAMESPACE, "n1", Some(o1)), None),
            ("delete own", &n1, lease(Delete, NODE_LEASE_NAMESPACE, "n1", None), None),
            (
                "delete another node's",
                &n1,
                lease(Delete, NODE_LEASE_NAMESPACE, "n2", None),
                Some(&format!("leases.coordination.k8s.io \"n2\" is forbidden: {same_name}")),
            ),
            (
                "delete own name elsewhere",
                &n1,
                lease(Delete, "kube-system", "n1", None),
                Some(&format!("leases.coordination.k8s.io \"n1\" is forbidden: {elsewhere}")),
            ),
            (
                "create another node's",
                &n1,
                lease(Create, NODE_LEASE_NAMESPACE, "", Some(o2)),
                Some(&format!("leases.coordination.k8s.io \"n2\" is forbidden: {same_name}")),
            ),
            (
                "update another node's",
                &n1,
                lease(Update, NODE_LEASE_NAMESPACE, "n2", Some(o2)),
                Some(&format!("leases.coordination.k8s.io \"n2\" is forbidden: {same_name}")),
            ),
            (
                "create unnamed",
                &n1,
                lease(Create, NODE_LEASE_NAMESPACE, "", Some(o_)),
                Some(&format!("leases.coordination.k8s.io \"\" is forbidden: {same_name}")),
            ),
            (
                "own name elsewhere",
                &n1,
                lease(Create, "kube-system", "", Some(o1)),
                Some(&format!("leases.coordination.k8s.io \"n1\" is forbidden: {elsewhere}")),
            ),
            (
                "node without a name",
                &empty,
                lease(Create, NODE_LEASE_NAMESPACE, "", Some(o_)),
                Some(
                    "leases.coordination.k8s.io \"\" is forbidden: could not determine node from user \"system:node:\"",
                ),
            ),
            ("not in system:nodes", &not_a_node, lease(Create, NODE_LEASE_NAMESPACE, "", Some(o2)), None),
            ("admin", &admin, lease(Create, "kube-system", "", Some(o1)), None),
            (
                "other resources",
                &n1,
                Write { group: "", resource: "configmaps", ..lease(Create, "default", "", Some(o2)) },
                None,
            ),
        ];
        check(cases);
    }

    fn node_obj(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn nodes_write_only_their_own_node_within_limits() {
        let n1 = node("n1");
        let empty = node("");
        let admin = UserInfo::with_groups("admin", &["system:masters"]);
        let labels = json!({"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux",
                            "node.kubernetes.io/exclude-from-external-load-balancers": "",
                            "example.com/rack": "r1"});
        let no_taint = json!(null);
        let taint = json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]);
        let own = node_obj("n1", labels.clone(), no_taint.clone());
        let other = node_obj("n2", labels.clone(), no_taint.clone());
        let tainted = node_obj("n1", labels.clone(), taint.clone());
        let empty_taints = node_obj("n1", labels.clone(), json!([]));
        let mut role = labels.clone();
        role["node-role.kubernetes.io/control-plane"] = json!("");
        role["node-restriction.kubernetes.io/pool"] = json!("a");
        role["sub.k8s.io/x"] = json!("y");
        let with_roles = node_obj("n1", role, no_taint.clone());
        let mut kubelet_ns = labels.clone();
        kubelet_ns["foo.kubelet.kubernetes.io/x"] = json!("1");
        kubelet_ns["topology.kubernetes.io/zone"] = json!("z1");
        let kubelet_labels = node_obj("n1", kubelet_ns, no_taint.clone());
        let mut relabelled = labels.clone();
        relabelled["kubernetes.io/hostname"] = json!("elsewhere");
        let mut unlabelled = labels.clone();
        if let Some(m) = unlabelled.as_object_mut() {
            m.remove("example.com/rack");
        }
        let own_unlabelled = node_obj("n1", unlabelled, no_taint.clone());
        let mut with_source = own.clone();
        with_source["spec"]["configSource"] = json!({"configMap": {"name": "c", "namespace": "kube-system",
                                                                     "kubeletConfigKey": "k"}});
        let mut other_source = with_source.clone();
        other_source["spec"]["configSource"]["configMap"]["name"] = json!("d");
        fn nodes<'a>(op: Operation, url_name: &'a str, new: Option<&'a Value>, old: Option<&'a Value>) -> Write<'a> {
            Write { group: "", resource: NODES, subresource: "", op, namespace: "", url_name, new, old }
        }
        let relabelled = node_obj("n1", relabelled, no_taint.clone());
        use Operation::{Create, Delete, Update};
        let cases: &[(&str, &UserInfo, Write<'_>, Option<&str>)] = &[
            ("register own", &n1, nodes(Create, "", Some(&own), None), None),
            ("register with kubelet labels", &n1, nodes(Create, "", Some(&kubelet_labels), None), None),
            ("register tainted", &n1, nodes(Create, "", Some(&tainted), None), None),
            (
                "register another",
                &n1,
                nodes(Create, "", Some(&other), None),
                Some("nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""),
            ),
            (
                "register with restricted labels",
                &n1,
                nodes(Create, "", Some(&with_roles), None),
                Some(
                    "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: \
                     node-restriction.kubernetes.io/pool, node-role.kubernetes.io/control-plane, sub.k8s.io/x",
                ),
            ),
            (
                "register with a configSource",
                &n1,
                nodes(Create, "", Some(&with_source), None),
                Some(
                    "nodes \"n1\" is forbidden: node \"n1\" is not allowed to create pods with a non-nil configSource",
                ),
            ),
            ("update own", &n1, nodes(Update, "n1", Some(&own), Some(&own)), None),
            ("remove an unrestricted label", &n1, nodes(Update, "n1", Some(&own_unlabelled), Some(&own)), None),
            ("taints absent or empty are the same", &n1, nodes(Update, "n1", Some(&empty_taints), Some(&own)), None),
            ("keep a configSource", &n1, nodes(Update, "n1", Some(&with_source), Some(&with_source)), None),
            ("drop a configSource", &n1, nodes(Update, "n1", Some(&own), Some(&with_source)), None),
            (
                "change the configSource",
                &n1,
                nodes(Update, "n1", Some(&other_source), Some(&with_source)),
                Some(
                    "nodes \"n1\" is forbidden: node \"n1\" is not allowed to update configSource to a new non-nil \
                     configSource",
                ),
            ),
            (
                "update another",
                &n1,
                nodes(Update, "n2", Some(&other), Some(&other)),
                Some("nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""),
            ),
            (
                "remove own taint",
                &n1,
                nodes(Update, "n1", Some(&own), Some(&tainted)),
                Some("nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"),
            ),
            (
                "add own taint",
                &n1,
                nodes(Update, "n1", Some(&tainted), Some(&own)),
                Some("nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"),
            ),
            (
                "add restricted labels",
                &n1,
                nodes(Update, "n1", Some(&with_roles), Some(&own)),
                Some(
                    "nodes \"n1\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool, \
                     node-role.kubernetes.io/control-plane, sub.k8s.io/x",
                ),
            ),
            (
                "remove restricted labels",
                &n1,
                nodes(Update, "n1", Some(&own), Some(&with_roles)),
                Some(
                    "nodes \"n1\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool, \
                     node-role.kubernetes.io/control-plane, sub.k8s.io/x",
                ),
            ),
            ("change a kubelet label", &n1, nodes(Update, "n1", Some(&relabelled), Some(&own)), None),
            ("delete own", &n1, nodes(Delete, "n1", None, None), None),
            (
                "delete another",
                &n1,
                nodes(Delete, "n2", None, None),
                Some("nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""),
            ),
            (
                "node without a name",
                &empty,
                nodes(Create, "", Some(&own), None),
                Some("nodes \"n1\" is forbidden: could not determine node from user \"system:node:\""),
            ),
            ("admin registers any node with any label", &admin, nodes(Create, "", Some(&with_roles), None), None),
        ];
        check(cases);
    }

    #[test]
    fn nodes_write_only_their_own_csinode() {
        let n1 = node("n1");
        let (o1, o2) = (named("n1"), named("n2"));
        fn csinode<'a>(op: Operation, url_name: &'a str, new: Option<&'a Value>) -> Write<'a> {
            Write {
                group: STORAGE_GROUP,
                resource: CSINODES,
                subresource: "",
                op,
                namespace: "",
                url_name,
                new,
                old: None,
            }
        }
        let refused = |name: &str| {
            format!(
                "csinodes.storage.k8s.io {name:?} is forbidden: can only access CSINode with the same name as the \
                 requesting node"
            )
        };
        use Operation::{Create, Delete, Update};
        let cases: &[(&str, &UserInfo, Write<'_>, Option<&str>)] = &[
            ("create own", &n1, csinode(Create, "", Some(&o1)), None),
            ("update own", &n1, csinode(Update, "n1", Some(&o1)), None),
            ("delete own", &n1, csinode(Delete, "n1", None), None),
            ("create another", &n1, csinode(Create, "", Some(&o2)), Some(&refused("n2"))),
            ("update another", &n1, csinode(Update, "n2", Some(&o2)), Some(&refused("n2"))),
            ("delete another", &n1, csinode(Delete, "n2", None), Some(&refused("n2"))),
        ];
        check(cases);
    }

    #[test]
    fn kubelet_labels() {
        let cases: &[(&str, bool)] = &[
            ("kubernetes.io/hostname", true),
            ("kubernetes.io/arch", true),
            ("beta.kubernetes.io/os", true),
            ("node.kubernetes.io/instance-type", true),
            ("node.kubernetes.io/anything", true),
            ("a.node.kubernetes.io/x", true),
            ("kubelet.kubernetes.io/x", true),
            ("xnode.kubernetes.io/x", false),
            ("node-role.kubernetes.io/worker", false),
            ("kubernetes.io/role", false),
            ("example.com/x", false),
            ("plain", false),
        ];
        for (key, want) in cases {
            assert_eq!(is_kubelet_label(key), *want, "{key}");
        }
    }
}
