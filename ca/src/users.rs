//! Well-known user and group names of nodes and service accounts (upstream's
//! `k8s.io/apiserver/pkg/authentication/serviceaccount` and the Node authorizer's names), for
//! the CSR checks here and for the apiserver and controllers above. Nothing enters; the
//! names leave.

/// The group every node's identity is in (upstream's `user.NodesGroup`).
pub const NODES_GROUP: &str = "system:nodes";
/// A node's user name is this followed by the node's name (`system:node:<name>`).
pub const NODE_USER_PREFIX: &str = "system:node:";
/// A service account's user name is this followed by `<namespace>:<name>`.
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";
