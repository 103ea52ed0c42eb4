//! Well-known group names every layer checks (upstream's `k8s.io/apiserver/pkg/authentication/user`).
//! A leaf: it imports nothing, so the layers below `authn` (`pki`) may name it too.

/// Members may do everything (upstream's `user.SystemPrivilegedGroup`): the authorizer lets
/// them pass, flow control exempts them, and the admin kubeconfig's certificate carries it.
pub const MASTERS_GROUP: &str = "system:masters";

/// Every authenticated request's identity is in this group (upstream's `user.AllAuthenticated`).
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// The group of the anonymous user (upstream's `user.AllUnauthenticated`).
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// The user of a request no authenticator recognised, when anonymous requests are allowed.
pub const ANONYMOUS_USER: &str = "system:anonymous";

/// The group every service account's identity is in (`system:serviceaccounts` and
/// `system:serviceaccounts:<namespace>`).
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// The user extra naming the credential: `JTI=<jti>` for bound tokens, `X509SHA256=<hex>`
/// for client certificates.
pub const CREDENTIAL_ID_EXTRA: &str = "authentication.kubernetes.io/credential-id";

/// The apiserver's own user for its writes (upstream's `user.APIServerUser`).
pub const APISERVER_USER: &str = "system:apiserver";

/// The controller-manager's user (upstream's `user.KubeControllerManager`): its certificate's
/// common name, and the user the apiserver's garbage collection acts as.
pub const KUBE_CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";
