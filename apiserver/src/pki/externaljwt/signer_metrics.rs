//! `kustos sa-signer`'s own metrics, on its `--metrics-bind-address`. In: each call's outcome
//! and the keys a `FetchKeys` answered. Out: OpenMetrics text.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `kustos_sa_signer_requests_total` | counter | `method` (`Sign`, `FetchKeys`, `Metadata`), `code` (gRPC, as Go names it) |
//! | `kustos_sa_signer_request_duration_seconds` | histogram | `method` |
//! | `kustos_sa_signer_keys` | gauge | `role` (`signing`, `next`, `retired`, `legacy`): the keys the last `FetchKeys` answered |
//! | `kustos_sa_signer_key_set_timestamp_seconds` | gauge | when the key set served was read (Unix seconds) |
//! | `kustos_sa_signer_key_set_load_errors_total` | counter | reads of the key set that failed (the last one read is served) |

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::metrics::code_name;

/// How many keys of each role a `FetchKeys` answered (`service::served_keys`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Roles {
    pub signing: usize,
    pub next: usize,
    pub retired: usize,
    pub legacy: usize,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabels {
    pub role: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])
}

pub struct SignerMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    keys: Family<RoleLabels, Gauge>,
    timestamp: Gauge<f64, AtomicU64>,
    load_errors: Counter,
}

impl std::fmt::Debug for SignerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignerMetrics").finish_non_exhaustive()
    }
}

impl Default for SignerMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(duration_histogram);
        let keys = Family::<RoleLabels, Gauge>::default();
        let timestamp = Gauge::<f64, AtomicU64>::default();
        let load_errors = Counter::default();
        registry.register("kustos_sa_signer_requests", "Calls answered, by method and gRPC code", requests.clone());
        registry.register(
            "kustos_sa_signer_request_duration_seconds",
            "Time to answer a call, by method",
            duration.clone(),
        );
        registry.register("kustos_sa_signer_keys", "Keys the last FetchKeys answered, by role", keys.clone());
        registry.register(
            "kustos_sa_signer_key_set_timestamp_seconds",
            "When the key set served was read, Unix seconds",
            timestamp.clone(),
        );
        registry.register(
            "kustos_sa_signer_key_set_load_errors",
            "Reads of the key set that failed (the last key set read is served)",
            load_errors.clone(),
        );
        SignerMetrics { registry, requests, duration, keys, timestamp, load_errors }
    }
}

impl SignerMetrics {
    pub fn request(&self, method: &str, code: tonic::Code, took: Duration) {
        let labels = RequestLabels { method: method.to_string(), code: code_name(code).to_string() };
        self.requests.get_or_create(&labels).inc();
        self.duration.get_or_create(&MethodLabels { method: method.to_string() }).observe(took.as_secs_f64());
    }

    pub fn served(&self, roles: Roles, loaded_at: SystemTime) {
        for (role, n) in
            [("signing", roles.signing), ("next", roles.next), ("retired", roles.retired), ("legacy", roles.legacy)]
        {
            self.keys.get_or_create(&RoleLabels { role: role.to_string() }).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.timestamp.set(loaded_at.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
    }

    pub fn load_failed(&self) {
        self.load_errors.inc();
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
