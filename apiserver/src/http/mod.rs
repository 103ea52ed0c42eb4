//! HTTP: what enters is a TCP connection; what leaves is a request handed to the router
//! (`crate::router`: authentication, impersonation, request info, flow control,
//! authorization, dispatch) and its response written back.
//!
//! - [`body`]: a request body read up to a limit (413 past it).
//! - [`serve`]: TLS (rustls) with the client certificate captured per connection, HTTP/1.1 and
//!   HTTP/2.
//! - [`request_info`]: verb, API group, version, resource, subresource, namespace and name of
//!   a request path, as upstream's `RequestInfoFactory`.
//! - [`health`]: `/livez`, `/readyz`, `/healthz`.
//! - [`metrics`]: request and process metrics in kube-apiserver's names.

pub mod annotations;
pub mod body;
pub mod first_flight;
pub mod health;
pub mod metrics;
pub mod request_info;
pub mod serve;
