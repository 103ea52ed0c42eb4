//! The endpoint handlers: what enters is an authorized request for a resource (its
//! `RequestInfo`, user and body) and the kind's registration (`crate::registry::ResourceDef`);
//! what leaves is a response (object, list, Table, watch stream or `Status`) after the kind's
//! strategy, the admission chain and storage have had their say. Nothing here names a group
//! or a resource: what is kind-specific hangs off the registration.
//!
//! - [`rest`]: get, list, create, update, patch, delete, deletecollection; response
//!   rendering; what follows a deletion (`rest::delete::gc`: finalizers, owner references,
//!   namespace deletion).
//! - [`watch`]: watch streams (bookmarks, `sendInitialEvents`, 410 Expired).
//! - [`table`]: Table rendering.
//! - [`discovery`]: discovery documents.
//! - [`reviews`]: the POST of a review kind (answered by `registry::reviews::answer`).
//! - [`serviceaccount_token`]: TokenRequest, a ServiceAccount's create-only `token`
//!   subresource; [`create_handler`] finds it by the kind the registration says the
//!   subresource takes.
//! - [`observe`]: request metrics, the access log, warnings for paths nothing serves.
//! - [`oidc`]: OIDC discovery of the service-account issuer (`/.well-known/openid-configuration`,
//!   `/openid/v1/jwks`).
//!
//! Layer: the top but for `lib.rs`, whose `AppState` is the context every handler is given.
//! Files here may import every folder below: `admission/`, `authz/`, `registry/`,
//! `openapi/`, `machinery/`, `wire/` and the ground (docs/ARCHITECTURE.md has the table).
//! Wire formats are in `wire/`, patches, apply and selectors in `machinery/`, the OpenAPI
//! documents in `openapi/`, the review kinds in `registry/reviews/`, the CRD loop in `loops/`.

pub mod discovery;
pub mod observe;
pub mod oidc;
pub mod rest;
pub mod reviews;
pub mod serviceaccount_token;
pub mod table;
pub mod watch;

/// The handler of a subresource whose only verb is `create` and which is not stored
/// (a ServiceAccount's `token`: TokenRequest).
pub type CreateHandler = for<'a> fn(
    &'a rest::Call<'a>,
    &'a bytes::Bytes,
    &'a str,
) -> futures::future::BoxFuture<'a, crate::error::Result<rest::Reply>>;

/// The handler of `def`'s create-only subresource `sub` ([`crate::registry::SubresourceStrategy::create_only`]),
/// chosen by the kind its body is; None when `sub` is not one, or no handler serves its kind.
pub fn create_handler(def: &crate::registry::ResourceDef, sub: &str) -> Option<CreateHandler> {
    let subresources = def.strategy.subresources()?;
    if !subresources.create_only(sub) {
        return None;
    }
    match subresources.subresource_kind(sub)? {
        ("authentication.k8s.io", "v1", "TokenRequest") => {
            Some(|c, body, content_type| Box::pin(serviceaccount_token::token_request(c, body, content_type)))
        }
        _ => None,
    }
}
