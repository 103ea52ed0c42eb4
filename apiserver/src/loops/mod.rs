//! The apiserver's own controllers that need the whole server: what enters is the server
//! state (held weakly) and the changes of what they watch; what leaves is writes to storage
//! and the state they keep current. Each runs under the supervisor (`crate::tasks`), started
//! by name from `lib.rs`.
//!
//! - [`crd`]: serving CustomResourceDefinitions (names, `Established`, cleanup of deleted
//!   CRDs' objects, the served set and its OpenAPI documents); the task `crds`.
//!
//! The other loops are filed with their subject (`flowcontrol/`, `pki/sync.rs`,
//! `authz/rbac/`, `identity.rs`); docs/ARCHITECTURE.md lists them.
//!
//! Layer: beside the handlers, below `lib.rs`. Files here import `openapi/`, `registry/`,
//! `storage/`, the ground and `AppState` (`lib.rs`), never the handlers (`api/`).

pub mod crd;
