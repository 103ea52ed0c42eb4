//! Server-side apply's pure core: field ownership (`metadata.managedFields`), the merge of
//! an applied configuration, conflicts, and the ownership an ordinary write takes, as
//! kube-apiserver's field manager and sigs.k8s.io/structured-merge-diff do them. No I/O:
//! what enters is the live object (or none), the applied configuration or updated object,
//! the kind's [`Schema`] and the [`Writer`]; what leaves is the object to store with its
//! `managedFields` ([`Outcome`]) or an [`ApplyError`] (409 conflicts, 400 bad input).
//!
//! - [`fieldset`]: field sets and their `FieldsV1` JSON (`f:`, `k:`, `v:`, `i:`, `.`).
//! - [`schema`]: the type model (`x-kubernetes-list-type`, `-list-map-keys`, `-map-type`)
//!   built from OpenAPI definitions (built-in kinds) or a CRD's `openAPIV3Schema`.
//! - [`typed`]: field set of a value, merge, comparison, removal, walked with the schema.
//! - [`managed`]: managedFields entries, [`apply`], [`update`], conflict messages.
//! - [`last_applied`]: kubectl's client-side apply annotation under server-side apply
//!   (taking fields over from client-side apply, keeping the annotation current).
//!
//! Not here: decoding the body (`application/apply-patch+yaml`), `fieldManager` checks,
//! `dryRun`, storage, admission; the write path calls [`apply`] / [`update`] and stores.

pub mod fieldset;
pub mod last_applied;
pub mod managed;
pub mod schema;
pub mod typed;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod last_applied_tests;
#[cfg(test)]
mod tests;

pub use fieldset::{FieldSet, FieldsV1Error, Path, PathElement};
pub use managed::{
    apply, conflict_message, conflict_report, conflict_status, decode_managed_fields, update, ApplyError, Conflict,
    ManagedEntry, ManagedFieldsError, Operation, Outcome, Writer,
};
pub use schema::{Schema, SchemaError};
pub use typed::TypedError;
