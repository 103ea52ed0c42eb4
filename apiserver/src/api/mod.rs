//! The generic API handlers: what enters is an authorized request for a resource (its
//! `RequestInfo`, user and body) and the kind's registration (`crate::registry::ResourceDef`);
//! what leaves is a response (object, list, Table, watch stream or `Status`) after the kind's
//! strategy, the admission chain and storage have had their say. Nothing here names a group
//! or a resource: what is kind-specific hangs off the registration.
//!
//! - [`rest`]: get, list, create, update, patch, delete, deletecollection; body decoding and
//!   response rendering; what follows a deletion (`rest::delete::gc`: finalizers, owner
//!   references, namespace deletion).
//! - [`watch`]: watch streams (bookmarks, `sendInitialEvents`, 410 Expired).
//! - [`patch`]: JSON patch, merge patch, strategic merge patch, with their limits.
//! - [`dupcheck`], [`selectors`], [`table`]: strict decoding reports, label and field
//!   selectors, Table rendering.
//! - [`discovery`], [`openapi`]: discovery documents and OpenAPI v2/v3.
//! - [`schema`]: CRDs' structural schemas (defined in `registry::schema`, which the kinds
//!   need; re-exported here).
//! - [`crd`]: serving CustomResourceDefinitions' kinds.
//! - [`reviews`]: the create-only review kinds (TokenReview, SubjectAccessReview, ...).
//! - [`serviceaccount_token`]: TokenRequest, a ServiceAccount's create-only `token`
//!   subresource; [`create_handler`] finds it by the kind the registration says the
//!   subresource takes.
//! - [`protobuf`]: the Kubernetes protobuf wire format.
//! - [`observe`]: request metrics, the access log, warnings for paths nothing serves.
//! - [`yaml`]: YAML to JSON at a cost bounded by the input's size (bodies, apply patches,
//!   kubeconfigs).

pub mod apply;
pub mod crd;
pub mod discovery;
pub mod dupcheck;
pub mod observe;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod rest;
pub mod reviews;
/// Structural schemas live with the kinds (`registry/`), which need them.
pub use crate::registry::schema;
pub mod selectors;
pub mod serviceaccount_token;
pub mod table;
pub mod watch;
pub mod yaml;

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
