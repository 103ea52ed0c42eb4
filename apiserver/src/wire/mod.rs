//! Wire formats: what enters is bytes as a client sent them or an object to send; what leaves
//! is the object's JSON form (`serde_json::Value`) or the bytes in the form the client asked
//! for. Nothing here knows a kind's rules, the server's state or a request's handler.
//!
//! - [`negotiate`]: content negotiation (JSON, YAML, Table, protobuf, metadata-only): what the
//!   client accepts and what it sent.
//! - [`protobuf`]: the Kubernetes protobuf wire format, both ways.
//! - [`yaml`]: YAML to JSON at a cost bounded by the input's size (bodies, apply patches,
//!   kubeconfigs).
//! - [`dupcheck`]: duplicate keys of a JSON body, for strict decoding's bounded reports.
//!
//! Layer: the ground. Files here import only `error.rs` and `meta.rs` (object depth limits);
//! everything above may import them (docs/ARCHITECTURE.md has the layer table).

pub mod dupcheck;
pub mod negotiate;
pub mod protobuf;
pub mod yaml;
