//! The `k8s.io/externaljwt` v1 API (`v1.ExternalJWTSigner`: `Sign`, `FetchKeys`, `Metadata`)
//! over a Unix socket: service-account tokens signed, and their keys served, by a separate
//! process. Both sides are here:
//!
//! - [`client`]: the apiserver with `--service-account-signing-endpoint` (as kube-apiserver's
//!   external JWT plugin), with [`metrics`] (`apiserver_externaljwt_*`);
//! - [`service`]: `kustos sa-signer`, serving a data directory's service-account keys
//!   ([`dir_keys`]), with [`signer_metrics`].
//!
//! [`endpoint`] reads the socket flag (a path, or `@name` in the abstract namespace). The
//! messages and the service come from `proto/externaljwt/v1/api.proto` (package `v1`, as
//! upstream's), compiled by `build.rs`.

pub mod client;
pub mod dir_keys;
pub mod endpoint;
pub mod metrics;
pub mod service;
pub mod signer_metrics;

/// The generated messages, client and server of package `v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub mod proto {
    tonic::include_proto!("v1");
}
