//! NodeRestriction admission, for the kinds kustos serves: a node (user `system:node:<name>`
//! in group `system:nodes`) creates, updates and deletes Leases only in `kube-node-lease` and
//! only the one named after itself.
//!
//! The Node authorizer ([`crate::authz::rbac::node`]) already limits a node to its own Lease by the
//! name in the URL; a create has no name in the URL, so the name in the body is checked here,
//! as upstream's NodeRestriction plugin does (same messages). Writes by anyone who is not a
//! node are not this plugin's business.

use serde_json::Value;

use crate::admission::Operation;
use crate::authn::UserInfo;
use crate::error::ApiError;

const LEASE_GROUP: &str = "coordination.k8s.io";
const LEASES: &str = "leases";
/// Where the nodes' heartbeat Leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// What a write is, as far as this plugin looks at it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub op: Operation,
    /// The namespace of the request.
    pub namespace: &'a str,
    /// The name in the URL (empty on create).
    pub url_name: &'a str,
    /// The name in the written object.
    pub object_name: &'a str,
}

/// Admit or refuse a write by `user` (see the module doc).
pub fn admit(user: &UserInfo, write: &Write<'_>) -> Result<(), ApiError> {
    if (write.group, write.resource) != (LEASE_GROUP, LEASES) {
        return Ok(());
    }
    let Some(node) = crate::authz::rbac::node::node_name(user) else { return Ok(()) };
    // A create has no name in the URL: the one in the proposed object counts (and names the
    // object in the error, as upstream's).
    let name = match write.op {
        Operation::Create => write.object_name,
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
        (a.def.group, a.def.resource) == (LEASE_GROUP, LEASES)
            && matches!(a.op, Operation::Create | Operation::Update | Operation::Delete)
    }
    async fn admit(
        &self,
        _state: &crate::AppState,
        a: &crate::admission::Attributes<'_>,
        new: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        admit(
            a.user,
            &Write {
                group: a.def.group,
                resource: a.def.resource,
                op: a.op,
                namespace: &a.info.namespace,
                url_name: &a.info.name,
                object_name: new.map(crate::meta::name).unwrap_or_default(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> UserInfo {
        UserInfo::with_groups(&format!("system:node:{name}"), &["system:nodes", "system:authenticated"])
    }

    #[test]
    fn nodes_write_only_their_own_lease_in_kube_node_lease() {
        let n1 = node("n1");
        let empty = node("");
        let not_a_node = UserInfo::with_groups("system:node:n1", &["system:authenticated"]);
        let admin = UserInfo::with_groups("admin", &["system:masters"]);
        let lease = |op, namespace, url_name, object_name| Write {
            group: LEASE_GROUP,
            resource: LEASES,
            op,
            namespace,
            url_name,
            object_name,
        };
        let same_name = "can only access node lease with the same name as the requesting node";
        use Operation::{Create, Delete, Update};
        let cases: &[(&str, &UserInfo, Write<'_>, Option<&str>)] = &[
            ("create own", &n1, lease(Create, NODE_LEASE_NAMESPACE, "", "n1"), None),
            ("update own", &n1, lease(Update, NODE_LEASE_NAMESPACE, "n1", "n1"), None),
            ("delete own", &n1, lease(Delete, NODE_LEASE_NAMESPACE, "n1", ""), None),
            (
                "delete another node's",
                &n1,
                lease(Delete, NODE_LEASE_NAMESPACE, "n2", ""),
                Some(&format!("leases.coordination.k8s.io \"n2\" is forbidden: {same_name}")),
            ),
            (
                "delete own name elsewhere",
                &n1,
                lease(Delete, "kube-system", "n1", ""),
                Some(
                    "leases.coordination.k8s.io \"n1\" is forbidden: can only access leases in the \"kube-node-lease\" \
                     system namespace",
                ),
            ),
            (
                "create another node's",
                &n1,
                lease(Create, NODE_LEASE_NAMESPACE, "", "n2"),
                Some(&format!("leases.coordination.k8s.io \"n2\" is forbidden: {same_name}")),
            ),
            (
                "update another node's",
                &n1,
                lease(Update, NODE_LEASE_NAMESPACE, "n2", "n2"),
                Some(&format!("leases.coordination.k8s.io \"n2\" is forbidden: {same_name}")),
            ),
            (
                "create unnamed",
                &n1,
                lease(Create, NODE_LEASE_NAMESPACE, "", ""),
                Some(&format!("leases.coordination.k8s.io \"\" is forbidden: {same_name}")),
            ),
            (
                "own name elsewhere",
                &n1,
                lease(Create, "kube-system", "", "n1"),
                Some(
                    "leases.coordination.k8s.io \"n1\" is forbidden: can only access leases in the \"kube-node-lease\" \
                     system namespace",
                ),
            ),
            (
                "node without a name",
                &empty,
                lease(Create, NODE_LEASE_NAMESPACE, "", ""),
                Some("leases.coordination.k8s.io \"\" is forbidden: could not determine node from user \"system:node:\""),
            ),
            ("not in system:nodes", &not_a_node, lease(Create, NODE_LEASE_NAMESPACE, "", "n2"), None),
            ("admin", &admin, lease(Create, "kube-system", "", "anything"), None),
            (
                "other resources",
                &n1,
                Write { group: "", resource: "configmaps", ..lease(Create, "default", "", "n2") },
                None,
            ),
        ];
        for (what, user, write, want) in cases {
            match (admit(user, write), want) {
                (Ok(()), None) => {}
                (Err(e), Some(msg)) => {
                    assert_eq!(e.code(), http::StatusCode::FORBIDDEN, "{what}");
                    assert_eq!(e.to_string(), *msg, "{what}");
                }
                (got, _) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }
}
