//! The Node authorizer: what a kubelet (user `system:node:<name>` in group `system:nodes`)
//! may do, as upstream's `--authorization-mode=Node`.
//!
//! Upstream decides reads of Secrets, ConfigMaps, volumes and service-account tokens from a
//! graph of the Pods bound to the node. kustos keeps no such graph, so those requests get no
//! opinion (RBAC may still allow them), except a TokenRequest (`serviceaccounts/token`
//! create), which NodeRestriction admission narrows to the pods bound to the node (a service
//! account none of them runs as gets the 403 this authorizer's graph would give). A node may manage only its own Lease in
//! `kube-node-lease` and its own CSINode, read only its own Node (a list or watch names it with
//! a `metadata.name` field selector, as upstream's AuthorizeNodeWithSelectors) and list and
//! watch only the pods bound to it (`spec.nodeName`); it may create, update and patch Nodes
//! and `nodes/status`, which the NodeRestriction admission plugin narrows to its own. Everything
//! else is allowed when the node rules (the rules of the default `system:node` ClusterRole)
//! allow it — among them creating and reading CertificateSigningRequests, which certificate
//! renewal needs, and creating and deleting pods and writing `pods/status`, which
//! NodeRestriction narrows to its own mirror pods and the pods bound to it.

use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::PolicyRule;

use super::rules::rule_allows;
use crate::authn::UserInfo;
use crate::authz::{Attributes, Authorizer, RuleSet, Verdict};

pub use kustos_ca::users::{NODES_GROUP, NODE_USER_PREFIX};
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Resources upstream authorizes through the node graph.
const GRAPH_RESOURCES: &[(&str, &str)] = &[
    ("", "secrets"),
    ("", "configmaps"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("resource.k8s.io", "resourceclaims"),
    ("storage.k8s.io", "volumeattachments"),
];

/// The node name of a node identity, if the user is one.
pub fn node_name(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    (user.groups.iter().any(|g| g == NODES_GROUP)).then_some(name)
}

pub struct NodeAuthorizer {
    rules: Vec<PolicyRule>,
}

impl NodeAuthorizer {
    /// `rules`: the node rules (the default `system:node` ClusterRole's).
    pub fn new(rules: Vec<PolicyRule>) -> Self {
        NodeAuthorizer { rules }
    }

    /// From the default policy.
    pub fn from_default_policy() -> Self {
        let policy = super::defaults::default_policy(&super::defaults::PolicyOptions { tls_bootstrap_bindings: false });
        let rules = policy
            .cluster_roles
            .into_iter()
            .find(|r| r.metadata.name.as_deref() == Some("system:node"))
            .and_then(|r| r.rules)
            .unwrap_or_default();
        Self::new(rules)
    }

    fn decide(&self, node: &str, attrs: &Attributes<'_>) -> Verdict {
        let info = attrs.info;
        if node.is_empty() {
            return Verdict { reason: "unknown node".into(), ..Verdict::no_opinion() };
        }
        if info.is_resource_request {
            let gr = (info.api_group.as_str(), info.resource.as_str());
            if gr == ("", "serviceaccounts") && info.subresource == "token" {
                // Upstream allows this along the graph (a pod bound to the node runs as the
                // service account); here NodeRestriction admission holds the request to a
                // token bound to a pod bound to the node, and the registry to that pod's
                // service account: the same set. As upstream, only a create naming one
                // service account (a SubjectAccessReview without a name gets no opinion).
                if info.verb != "create" || info.name.is_empty() {
                    return Verdict {
                        reason: "can only create tokens for individual service accounts".into(),
                        ..Verdict::no_opinion()
                    };
                }
                return Verdict::allow("");
            }
            if GRAPH_RESOURCES.contains(&gr) {
                return Verdict {
                    reason: format!("no relationship found between node '{node}' and this object"),
                    ..Verdict::no_opinion()
                };
            }
            if gr == ("coordination.k8s.io", "leases") {
                return lease(node, attrs);
            }
            if gr == ("", "nodes") {
                return node_object(node, attrs);
            }
            if gr == ("storage.k8s.io", "csinodes") {
                return csinode(node, attrs);
            }
            if gr == ("", "pods") && info.subresource.is_empty() && matches!(info.verb.as_str(), "list" | "watch") {
                // As upstream with AuthorizeNodeWithSelectors (on since 1.32): only the pods
                // bound to it.
                if info.selected_node != node {
                    return Verdict {
                        reason: format!(
                            "node '{node}' can only list/watch pods with spec.nodeName field selector '{node}'"
                        ),
                        ..Verdict::no_opinion()
                    };
                }
            }
        }
        if self.rules.iter().any(|r| rule_allows(info, r)) {
            Verdict::allow("")
        } else {
            Verdict::no_opinion()
        }
    }
}

/// A node may get, create, update, patch and delete only its own Lease in kube-node-lease.
/// A create has no name in the URL: the name in its body is checked at admission
/// (the NodeRestriction admission plugin, `admission/node_restriction.rs`).
fn lease(node: &str, attrs: &Attributes<'_>) -> Verdict {
    let info = attrs.info;
    let deny = |reason: &str| Verdict { reason: reason.into(), ..Verdict::no_opinion() };
    if !matches!(info.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
        return deny("can only get, create, update, patch, or delete a node lease");
    }
    if info.namespace != NODE_LEASE_NAMESPACE {
        return deny(&format!("can only access leases in the {NODE_LEASE_NAMESPACE} system namespace"));
    }
    if info.verb != "create" && info.name != node {
        return deny("can only access node lease with the same name as the requesting node");
    }
    Verdict::allow("")
}

/// A node reads only its own Node object; it may create, update and patch Nodes and their
/// status (NodeRestriction admission limits that to its own); nothing else.
fn node_object(node: &str, attrs: &Attributes<'_>) -> Verdict {
    let info = attrs.info;
    let deny = |reason: String| Verdict { reason, ..Verdict::no_opinion() };
    match (info.subresource.as_str(), info.verb.as_str()) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => Verdict::allow(""),
        ("", "get" | "list" | "watch") if info.name == node => Verdict::allow(""),
        ("", "get" | "list" | "watch") if info.name.is_empty() => {
            deny(format!("node '{node}' cannot read all nodes, only its own Node object"))
        }
        ("", "get" | "list" | "watch") => {
            deny(format!("node '{node}' cannot read '{}', only its own Node object", info.name))
        }
        _ => deny(String::new()),
    }
}

/// A node may get, create, update, patch and delete only its own CSINode (the name of a
/// create is checked at admission, as for Leases).
fn csinode(node: &str, attrs: &Attributes<'_>) -> Verdict {
    let info = attrs.info;
    let deny = |reason: &str| Verdict { reason: reason.into(), ..Verdict::no_opinion() };
    if !matches!(info.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
        return deny("can only get, create, update, patch, or delete a CSINode");
    }
    if !info.subresource.is_empty() {
        return deny("cannot authorize CSINode subresources");
    }
    if info.verb != "create" && info.name != node {
        return deny("can only access CSINode with the same name as the requesting node");
    }
    Verdict::allow("")
}

#[async_trait]
impl Authorizer for NodeAuthorizer {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
        match node_name(attrs.user) {
            Some(node) => self.decide(node, attrs),
            None => Verdict::no_opinion(),
        }
    }

    async fn rules_for(&self, user: &UserInfo, _namespace: &str) -> RuleSet {
        // Upstream's node authorizer cannot list its rules.
        if node_name(user).is_some() {
            RuleSet { incomplete: true, ..Default::default() }
        } else {
            RuleSet::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::Decision;
    use crate::http::request_info::resolve;
    use http::Method;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    #[tokio::test]
    async fn nodes_get_node_rules_and_nothing_of_other_nodes() {
        let a = NodeAuthorizer::from_default_policy();
        let n1 = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let not_in_group = user("system:node:n1", &["system:authenticated"]);
        let other = user("alice", &["system:nodes"]);
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
        let cases: &[(&str, &UserInfo, Method, String, Decision)] = &[
            ("create CSRs", &n1, Method::POST, csrs.into(), Decision::Allow),
            ("list CSRs", &n1, Method::GET, csrs.into(), Decision::Allow),
            ("delete CSRs", &n1, Method::DELETE, format!("{csrs}/x"), Decision::NoOpinion),
            (
                "secrets need a pod relationship",
                &n1,
                Method::GET,
                "/api/v1/namespaces/a/secrets/s".into(),
                Decision::NoOpinion,
            ),
            ("configmaps too", &n1, Method::GET, "/api/v1/namespaces/a/configmaps/c".into(), Decision::NoOpinion),
            (
                "token requests, narrowed by NodeRestriction",
                &n1,
                Method::POST,
                "/api/v1/namespaces/a/serviceaccounts/s/token".into(),
                Decision::Allow,
            ),
            (
                "reading the token subresource",
                &n1,
                Method::GET,
                "/api/v1/namespaces/a/serviceaccounts/s/token".into(),
                Decision::NoOpinion,
            ),
            ("own lease", &n1, Method::PUT, format!("{leases}/n1"), Decision::Allow),
            ("create a lease", &n1, Method::POST, leases.into(), Decision::Allow),
            ("another node's lease", &n1, Method::PUT, format!("{leases}/n2"), Decision::NoOpinion),
            ("list leases", &n1, Method::GET, leases.into(), Decision::NoOpinion),
            (
                "leases elsewhere",
                &n1,
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/default/leases/n1".into(),
                Decision::NoOpinion,
            ),
            ("token reviews", &n1, Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews".into(), Decision::Allow),
            ("not a node without the group", &not_in_group, Method::POST, csrs.into(), Decision::NoOpinion),
            ("not a node without the name", &other, Method::POST, csrs.into(), Decision::NoOpinion),
            ("namespaces are not node business", &n1, Method::GET, "/api/v1/namespaces".into(), Decision::NoOpinion),
            ("register a node", &n1, Method::POST, "/api/v1/nodes".into(), Decision::Allow),
            ("update a node", &n1, Method::PUT, "/api/v1/nodes/n2".into(), Decision::Allow),
            ("patch node status", &n1, Method::PATCH, "/api/v1/nodes/n1/status".into(), Decision::Allow),
            ("get own node", &n1, Method::GET, "/api/v1/nodes/n1".into(), Decision::Allow),
            ("get another node", &n1, Method::GET, "/api/v1/nodes/n2".into(), Decision::NoOpinion),
            ("list all nodes", &n1, Method::GET, "/api/v1/nodes".into(), Decision::NoOpinion),
            (
                "list own node by name",
                &n1,
                Method::GET,
                "/api/v1/nodes?fieldSelector=metadata.name%3Dn1".into(),
                Decision::Allow,
            ),
            (
                "watch own node by name",
                &n1,
                Method::GET,
                "/api/v1/nodes?watch=true&fieldSelector=metadata.name=n1".into(),
                Decision::Allow,
            ),
            (
                "list another node by name",
                &n1,
                Method::GET,
                "/api/v1/nodes?fieldSelector=metadata.name=n2".into(),
                Decision::NoOpinion,
            ),
            ("get node status", &n1, Method::GET, "/api/v1/nodes/n1/status".into(), Decision::NoOpinion),
            ("delete own node", &n1, Method::DELETE, "/api/v1/nodes/n1".into(), Decision::NoOpinion),
            ("create a CSINode", &n1, Method::POST, "/apis/storage.k8s.io/v1/csinodes".into(), Decision::Allow),
            ("get own CSINode", &n1, Method::GET, "/apis/storage.k8s.io/v1/csinodes/n1".into(), Decision::Allow),
            ("update own CSINode", &n1, Method::PUT, "/apis/storage.k8s.io/v1/csinodes/n1".into(), Decision::Allow),
            (
                "another node's CSINode",
                &n1,
                Method::PUT,
                "/apis/storage.k8s.io/v1/csinodes/n2".into(),
                Decision::NoOpinion,
            ),
            ("list CSINodes", &n1, Method::GET, "/apis/storage.k8s.io/v1/csinodes".into(), Decision::NoOpinion),
            (
                "list the pods bound to it",
                &n1,
                Method::GET,
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1".into(),
                Decision::Allow,
            ),
            (
                "watch the pods bound to it",
                &n1,
                Method::GET,
                "/api/v1/pods?watch=1&fieldSelector=spec.nodeName=n1,status.phase!=Succeeded".into(),
                Decision::Allow,
            ),
            ("list every pod", &n1, Method::GET, "/api/v1/pods".into(), Decision::NoOpinion),
            (
                "list another node's pods",
                &n1,
                Method::GET,
                "/api/v1/pods?fieldSelector=spec.nodeName=n2".into(),
                Decision::NoOpinion,
            ),
            (
                "a selector that does not pin the node",
                &n1,
                Method::GET,
                "/api/v1/pods?fieldSelector=spec.nodeName!=n2".into(),
                Decision::NoOpinion,
            ),
            (
                "update a pod's status (admission checks which)",
                &n1,
                Method::PATCH,
                "/api/v1/namespaces/a/pods/p/status".into(),
                Decision::Allow,
            ),
        ];
        for (what, u, m, path, want) in cases {
            let (path, query) = path.split_once('?').map_or((path.as_str(), None), |(p, q)| (p, Some(q)));
            let info = resolve(m, path, query);
            let got = a.authorize(&Attributes { user: u, info: &info }).await;
            assert_eq!(&got.decision, want, "{what}: {got:?}");
        }
        assert_eq!(node_name(&n1), Some("n1"));
        assert_eq!(node_name(&other), None);
    }

    /// A SubjectAccessReview's attributes need not name an object: a token request for no
    /// service account in particular gets no opinion, as upstream's graph answers it.
    #[tokio::test]
    async fn token_requests_must_name_a_service_account() {
        let a = NodeAuthorizer::from_default_policy();
        let n1 = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let cases = [
            ("create", "s", Decision::Allow, ""),
            ("create", "", Decision::NoOpinion, "can only create tokens for individual service accounts"),
            ("get", "s", Decision::NoOpinion, "can only create tokens for individual service accounts"),
        ];
        for (verb, name, want, reason) in cases {
            let info = crate::http::request_info::RequestInfo {
                is_resource_request: true,
                verb: verb.into(),
                api_version: "v1".into(),
                namespace: "a".into(),
                resource: "serviceaccounts".into(),
                subresource: "token".into(),
                name: name.into(),
                ..Default::default()
            };
            let got = a.authorize(&Attributes { user: &n1, info: &info }).await;
            assert_eq!((got.decision, got.reason.as_str()), (want, reason), "{verb} {name:?}");
        }
    }
}
