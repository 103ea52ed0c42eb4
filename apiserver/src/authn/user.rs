//! Well-known group names every layer checks (upstream's `k8s.io/apiserver/pkg/authentication/user`).
//! A leaf: it imports nothing, so the layers below `authn` (`pki`) may name it too.

/// Members may do everything (upstream's `user.SystemPrivilegedGroup`): the authorizer lets
/// them pass, flow control exempts them, and the admin kubeconfig's certificate carries it.
pub const MASTERS_GROUP: &str = "system:masters";
