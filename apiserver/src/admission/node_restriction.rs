//! NodeRestriction admission, for the kinds kustos serves, as upstream's plugin
//! (`plugin/pkg/admission/noderestriction`, same messages). A node (user `system:node:<name>`
//! in group `system:nodes`):
//!
//! - creates, updates and deletes Leases only in `kube-node-lease` and only the one named
//!   after itself;
//! - creates, updates (also through `nodes/status`) and deletes only its own Node; it may not
//!   register with a `configSource`, set one, or change its own taints or ownerReferences, and may not set or
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

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::Metadata;
use serde::de::DeserializeOwned;

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

/// What a write is, as far as this plugin looks at it: `T` is the kind's typed form.
#[derive(Debug)]
pub struct Write<'a, T> {
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
    pub new: Option<&'a T>,
    /// The stored object (updates).
    pub old: Option<&'a T>,
}

impl<T: Metadata<Ty = ObjectMeta>> Write<'_, T> {
    fn object_name(&self) -> &str {
        self.new.and_then(|o| o.metadata().name.as_deref()).unwrap_or_default()
    }

    /// The name upstream's `admission.NewForbidden` puts in the message: the one in the URL,
    /// else the written object's name or generateName, else `Unknown`.
    fn subject(&self) -> &str {
        if !self.url_name.is_empty() {
            return self.url_name;
        }
        let generate_name = || self.new.and_then(|o| o.metadata().generate_name.as_deref()).unwrap_or_default();
        [self.object_name(), generate_name()].into_iter().find(|n| !n.is_empty()).unwrap_or("Unknown")
    }
}

/// A kind this plugin looks at, in its typed form, and its rule for a node's writes.
pub trait Restricted: Metadata<Ty = ObjectMeta> + DeserializeOwned + Send + Sync + 'static {
    /// Why `node` may not make `write`, if it may not; `found` is what the plugin read for it.
    fn problem(node: &str, write: &Write<'_, Self>, found: &pods::Lookups<'_>) -> Option<pods::Refusal>;

    /// The name a refusal names (see [`Write::subject`]).
    fn subject<'a>(write: &'a Write<'_, Self>) -> &'a str {
        write.subject()
    }
}

impl Restricted for Lease {
    fn problem(node: &str, write: &Write<'_, Self>, _: &pods::Lookups<'_>) -> Option<pods::Refusal> {
        lease_problem(node, write.namespace, Self::subject(write)).map(pods::Refusal::Forbidden)
    }

    /// A create has no name in the URL: the one in the proposed object counts (and names the
    /// object in the error, as upstream's).
    fn subject<'a>(write: &'a Write<'_, Self>) -> &'a str {
        match write.op {
            Operation::Create => write.object_name(),
            _ => write.url_name,
        }
    }
}

impl Restricted for Node {
    fn problem(node: &str, write: &Write<'_, Self>, _: &pods::Lookups<'_>) -> Option<pods::Refusal> {
        node_problem(node, write).map(pods::Refusal::Forbidden)
    }
}

impl Restricted for CSINode {
    fn problem(node: &str, write: &Write<'_, Self>, _: &pods::Lookups<'_>) -> Option<pods::Refusal> {
        csinode_problem(node, write).map(pods::Refusal::Forbidden)
    }
}

impl Restricted for CertificateSigningRequest {
    fn problem(node: &str, write: &Write<'_, Self>, _: &pods::Lookups<'_>) -> Option<pods::Refusal> {
        certificates::problem(node, write).map(pods::Refusal::Forbidden)
    }
}

impl Restricted for Pod {
    fn problem(node: &str, write: &Write<'_, Self>, found: &pods::Lookups<'_>) -> Option<pods::Refusal> {
        pods::problem(node, write, found)
    }
}

/// Admit or refuse a write by `user` (see the module doc); `found` is what the plugin read
/// for a pod write ([`pods::Lookups`]).
pub fn admit<T: Restricted>(user: &UserInfo, write: &Write<'_, T>, found: &pods::Lookups<'_>) -> Result<(), ApiError> {
    if !HANDLED.contains(&(write.group, write.resource)) {
        return Ok(());
    }
    let Some(node) = crate::authz::rbac::node::node_name(user) else { return Ok(()) };
    let forbidden = |why: String| {
        let name = T::subject(write);
        let gr = crate::error::group_resource(write.group, write.resource);
        ApiError::forbidden(write.group, write.resource, name, format!("{gr} {name:?} is forbidden: {why}"))
    };
    if node.is_empty() {
        return Err(forbidden(format!("could not determine node from user {:?}", user.name)));
    }
    match T::problem(node, write, found) {
        None => Ok(()),
        Some(pods::Refusal::Forbidden(why)) => Err(forbidden(why)),
        Some(pods::Refusal::NodeNotFound) => Err(ApiError::not_found("", NODES, node)),
        Some(pods::Refusal::PodNotFound(name)) => Err(ApiError::not_found("", PODS, &name)),
    }
}

/// Why `node` may not write the Lease `name` in `namespace`, if it may not.
fn lease_problem(node: &str, namespace: &str, name: &str) -> Option<String> {
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

fn labels(obj: Option<&Node>) -> Option<&BTreeMap<String, String>> {
    obj.and_then(|o| o.metadata.labels.as_ref())
}

/// The label keys added, removed or changed between `a` and `b` (`getModifiedLabels`).
fn modified_labels(a: Option<&Node>, b: Option<&Node>) -> BTreeSet<String> {
    let (a, b) = (labels(a), labels(b));
    let differs = |x: Option<&BTreeMap<String, String>>, y: Option<&BTreeMap<String, String>>| {
        x.into_iter()
            .flatten()
            .filter(|(k, v)| y.and_then(|y| y.get(*k)) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    differs(a, b).into_iter().chain(differs(b, a)).collect()
}

fn config_source(obj: Option<&Node>) -> Option<&k8s_openapi::api::core::v1::NodeConfigSource> {
    obj.and_then(|o| o.spec.as_ref()).and_then(|s| s.config_source.as_ref())
}

/// Taints, with absent and empty the same (upstream's semantic equality).
fn taints(obj: Option<&Node>) -> &[k8s_openapi::api::core::v1::Taint] {
    obj.and_then(|o| o.spec.as_ref()).and_then(|s| s.taints.as_deref()).unwrap_or_default()
}

/// A Node's owner references (absent and empty alike, as upstream's semantic equality).
fn owner_references(obj: Option<&Node>) -> &[OwnerReference] {
    obj.and_then(|o| o.metadata.owner_references.as_deref()).unwrap_or_default()
}

/// Why `node` may not make this write to a Node (`admitNode`), if it may not.
fn node_problem(node: &str, write: &Write<'_, Node>) -> Option<String> {
    // Upstream's create handler names the attributes after the object.
    let requested = if write.op == Operation::Create { write.object_name() } else { write.url_name };
    if requested != node {
        return Some(format!("node {node:?} is not allowed to modify node {requested:?}"));
    }
    match write.op {
        Operation::Create => {
            if config_source(write.new).is_some() {
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
            let source = config_source(write.new);
            if source.is_some() && source != config_source(write.old) {
                return Some(format!(
                    "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                ));
            }
            if taints(write.new) != taints(write.old) {
                return Some(format!("node {node:?} is not allowed to modify taints"));
            }
            if owner_references(write.new) != owner_references(write.old) {
                return Some(format!("node {node:?} is not allowed to modify ownerReferences"));
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
fn csinode_problem(node: &str, write: &Write<'_, CSINode>) -> Option<String> {
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
        // Writes by anyone who is not a node are not this plugin's business: their objects
        // are not even decoded.
        let Some(node) = crate::authz::rbac::node::node_name(a.user) else { return Ok(()) };
        let none = pods::Lookups::default();
        match (a.def.group, a.def.resource) {
            ("", SERVICEACCOUNTS) => admit_token_request(services, a).await,
            (LEASE_GROUP, LEASES) => admit_typed::<Lease>(a, &none),
            ("", NODES) => admit_typed::<Node>(a, &none),
            (STORAGE_GROUP, CSINODES) => admit_typed::<CSINode>(a, &none),
            (CSR_GROUP, CSRS) => admit_typed::<CertificateSigningRequest>(a, &none),
            ("", PODS) => {
                let (mut node_obj, mut pod) = (None, None);
                if a.op == Operation::Create {
                    // A mirror pod's owner is checked against the stored Node (its uid); an
                    // eviction against the stored pod it names (an Eviction is read as far
                    // as its metadata, which it shares with a Pod).
                    match a.info.subresource.as_str() {
                        "" => node_obj = services.objects.get_as::<Node>("", NODES, None, node).await?,
                        "eviction" => {
                            let eviction = a.object_as::<Pod>()?;
                            let named = eviction.as_ref().and_then(|e| e.metadata.name.as_deref()).unwrap_or("");
                            let pod_name = if a.info.name.is_empty() { named } else { a.info.name.as_str() };
                            if !pod_name.is_empty() {
                                pod =
                                    services.objects.get_as::<Pod>("", PODS, Some(&a.info.namespace), pod_name).await?;
                            }
                        }
                        _ => {}
                    }
                }
                admit_typed::<Pod>(a, &pods::Lookups { node: node_obj.as_ref(), pod: pod.as_ref() })
            }
            _ => Ok(()),
        }
    }
}

/// [`admit`] for a write of the kind `T`, its objects decoded.
fn admit_typed<T: Restricted>(a: &crate::admission::Attributes<'_>, found: &pods::Lookups<'_>) -> Result<(), ApiError> {
    let (new, old) = (a.object_as::<T>()?, a.old_object_as::<T>()?);
    let write = Write {
        group: a.def.group,
        resource: a.def.resource,
        subresource: &a.info.subresource,
        op: a.op,
        namespace: &a.info.namespace,
        url_name: &a.info.name,
        new: new.as_deref(),
        old: old.as_deref(),
    };
    admit(a.user, &write, found)
}

/// A TokenRequest by a node ([`tokens`]): the pure checks, with the pod, the objects its
/// volumes lead to and the authorizer's word read in between.
async fn admit_token_request(
    services: &crate::admission::Services<'_>,
    a: &crate::admission::Attributes<'_>,
) -> Result<(), ApiError> {
    let user = a.user;
    let Some(node) = crate::authz::rbac::node::node_name(user) else { return Ok(()) };
    let (sa_name, namespace) = (a.info.name.as_str(), a.info.namespace.as_str());
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
    // Upstream's Node authorizer allows this only along its graph (a pod bound to the node
    // runs as the service account) and answers 403 otherwise, before anything here says
    // whether the pod named exists. The pod the request names shows it in the common case (a
    // kubelet asking for its own pod); else the namespace's stored pods are read.
    let runs_here = |pod: &serde_json::Value| {
        let spec = pod.get("spec");
        let on = spec.and_then(|s| s.get("nodeName")).and_then(serde_json::Value::as_str) == Some(node);
        let runs_as = spec
            .and_then(|s| s.get("serviceAccountName"))
            .and_then(serde_json::Value::as_str)
            .filter(|n| !n.is_empty());
        on && runs_as.unwrap_or("default") == sa_name
    };
    let request = a.object_as::<tokens::Request>()?.unwrap_or_default();
    let named = match tokens::pod_binding(&request) {
        Ok((pod_name, _)) => services.objects.get("", PODS, Some(namespace), pod_name).await?,
        Err(_) => None,
    };
    let related =
        named.as_ref().is_some_and(runs_here) || services.objects.any("", PODS, Some(namespace), runs_here).await?;
    if !related {
        let attrs = crate::authz::Attributes { user, info: a.info };
        return Err(crate::authz::forbidden_with_reason(
            &attrs,
            &format!("no relationship found between node '{node}' and this object"),
        ));
    }
    let (pod_name, uid) = tokens::pod_binding(&request).map_err(refuse)?;
    let pod: Option<Pod> = named
        .map(|v| crate::admission::decode(&v))
        .transpose()
        .map_err(|e| ApiError::internal(format!("the stored pod {pod_name:?} does not decode: {e}")))?;
    if let Some(r) = tokens::pod_problem(node, pod_name, uid, pod.as_ref()) {
        return Err(refuse(r));
    }
    let Some(pod) = pod else { return Err(ApiError::not_found("", PODS, pod_name)) };
    let audience = tokens::requested_audience(&request).map_err(refuse)?;
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
        match services.objects.get_as::<CSIDriver>(STORAGE_GROUP, "csidrivers", None, &driver).await? {
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
            namespace: namespace.into(),
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
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{json, Value};

    fn typed<T: DeserializeOwned>(v: Value) -> T {
        crate::admission::decode(&v).unwrap()
    }

    fn node(name: &str) -> UserInfo {
        UserInfo::with_groups(&format!("system:node:{name}"), &["system:nodes", "system:authenticated"])
    }

    fn named<T: DeserializeOwned>(name: &str) -> T {
        typed(json!({"metadata": {"name": name}}))
    }

    /// Run the cases: what, user, write, the refusal's message (None: admitted).
    fn check<T: Restricted>(cases: &[(&str, &UserInfo, Write<'_, T>, Option<&str>)]) {
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
        let (o1, o2, o_): (&Lease, &Lease, &Lease) = (&named("n1"), &named("n2"), &named(""));
        fn lease<'a>(op: Operation, namespace: &'a str, url_name: &'a str, new: Option<&'a Lease>) -> Write<'a, Lease> {
            Write { group: LEASE_GROUP, resource: LEASES, subresource: "", op, namespace, url_name, new, old: None }
        }
        let same_name = "can only access node lease with the same name as the requesting node";
        let elsewhere = "can only access leases in the \"kube-node-lease\" system namespace";
        use Operation::{Create, Delete, Update};
        let cases: &[(&str, &UserInfo, Write<'_, Lease>, Option<&str>)] = &[
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

    fn node_value(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
    }

    fn node_obj(name: &str, labels: Value, taints: Value) -> Node {
        typed(node_value(name, labels, taints))
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
        let own_value = node_value("n1", labels.clone(), no_taint.clone());
        let own: Node = typed(own_value.clone());
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
        let mut with_source = own_value.clone();
        with_source["spec"]["configSource"] = json!({"configMap": {"name": "c", "namespace": "kube-system",
                                                                     "kubeletConfigKey": "k"}});
        let mut other_source = with_source.clone();
        other_source["spec"]["configSource"]["configMap"]["name"] = json!("d");
        let (with_source, other_source): (Node, Node) = (typed(with_source), typed(other_source));
        fn nodes<'a>(
            op: Operation,
            url_name: &'a str,
            new: Option<&'a Node>,
            old: Option<&'a Node>,
        ) -> Write<'a, Node> {
            Write { group: "", resource: NODES, subresource: "", op, namespace: "", url_name, new, old }
        }
        let relabelled = node_obj("n1", relabelled, no_taint.clone());
        let mut owned = own_value.clone();
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": "n2", "uid": "u"}]);
        let owned: Node = typed(owned);
        let mut no_owners = own_value.clone();
        no_owners["metadata"]["ownerReferences"] = json!([]);
        let no_owners: Node = typed(no_owners);
        use Operation::{Create, Delete, Update};
        let cases: &[(&str, &UserInfo, Write<'_, Node>, Option<&str>)] = &[
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
            (
                "set ownerReferences",
                &n1,
                nodes(Update, "n1", Some(&owned), Some(&own)),
                Some("nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify ownerReferences"),
            ),
            (
                "drop ownerReferences",
                &n1,
                nodes(Update, "n1", Some(&own), Some(&owned)),
                Some("nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify ownerReferences"),
            ),
            (
                "ownerReferences absent or empty are the same",
                &n1,
                nodes(Update, "n1", Some(&no_owners), Some(&own)),
                None,
            ),
            ("keep ownerReferences", &n1, nodes(Update, "n1", Some(&owned), Some(&owned)), None),
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
        let (o1, o2): (CSINode, CSINode) = (named("n1"), named("n2"));
        fn csinode<'a>(op: Operation, url_name: &'a str, new: Option<&'a CSINode>) -> Write<'a, CSINode> {
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
        let cases: &[(&str, &UserInfo, Write<'_, CSINode>, Option<&str>)] = &[
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
