//! Object machinery: pure functions over wire-form objects (`serde_json::Value`), as
//! `k8s.io/apimachinery` and sigs.k8s.io/structured-merge-diff have them. What enters is
//! objects, patches and selectors; what leaves is objects, field sets, match results or an
//! error carrying upstream's text. No I/O, no server state, no kind registry.
//!
//! - [`apply`]: server-side apply's core (managed fields, merge, conflicts).
//! - [`patch`]: JSON patch, merge patch, strategic merge patch, with their limits.
//! - [`selectors`]: label and field selectors.
//! - [`memo`]: a bounded memo of per-request decisions, valid for one configuration version.
//!
//! Layer: just above the ground. Files here import `error.rs`, `meta.rs`, `validation.rs`
//! and `wire/`, never `registry/`, the handlers (`api/`) or `lib.rs` (`AppState`); the
//! registry, authorization, request info and the handlers import them (docs/ARCHITECTURE.md
//! has the layer table).

pub mod apply;
pub mod memo;
pub mod patch;
pub mod selectors;
