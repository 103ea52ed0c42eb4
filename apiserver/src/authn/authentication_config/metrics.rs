//! The metrics of the authentication configuration and its JWT authenticators, with
//! upstream's names and labels: the reload controller's
//! `apiserver_authentication_config_controller_*` and the authenticators'
//! `apiserver_authentication_jwt_authenticator_*`. Issuers and the apiserver's identity
//! appear hashed (`sha256:<hex>`), as upstream.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upstream's `getHash`: `sha256:<hex>`, empty for empty data.
pub fn hash(data: &[u8]) -> String {
    if data.is_empty() {
        return String::new();
    }
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    format!("sha256:{}", d.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    status: String,
    apiserver_id_hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigInfoLabels {
    apiserver_id_hash: String,
    hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    result: String,
    jwt_issuer_hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FetchLabels {
    result: String,
    jwt_issuer_hash: String,
    apiserver_id_hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeySetLabels {
    jwt_issuer_hash: String,
    apiserver_id_hash: String,
    hash: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
}

pub struct Metrics {
    registry: Registry,
    apiserver_id_hash: String,
    reloads: Family<ReloadLabels, Counter>,
    reload_last: Family<ReloadLabels, FloatGauge>,
    config_info: Family<ConfigInfoLabels, Gauge>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    fetch_last: Family<FetchLabels, FloatGauge>,
    key_set: Family<KeySetLabels, Gauge>,
    /// Issuer hash → the labels of its key set's info line.
    last_key_sets: Mutex<HashMap<String, KeySetLabels>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Metrics {
    /// `apiserver_id`: this apiserver's identity (hashed in the labels).
    pub fn new(apiserver_id: &str) -> Self {
        let mut registry = Registry::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        let reload_last = Family::<ReloadLabels, FloatGauge>::default();
        let config_info = Family::<ConfigInfoLabels, Gauge>::default();
        let latency = Family::<LatencyLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let fetch_last = Family::<FetchLabels, FloatGauge>::default();
        let key_set = Family::<KeySetLabels, Gauge>::default();
        registry.register(
            "apiserver_authentication_config_controller_automatic_reloads",
            "Total number of automatic reloads of authentication configuration split by status and apiserver identity.",
            reloads.clone(),
        );
        registry.register(
            "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds",
            "Timestamp of the last automatic reload of authentication configuration split by status and apiserver identity.",
            reload_last.clone(),
        );
        registry.register(
            "apiserver_authentication_config_controller_last_config_info",
            "Information about the last applied authentication configuration with hash as label, split by apiserver identity.",
            config_info.clone(),
        );
        registry.register(
            "apiserver_authentication_jwt_authenticator_latency_seconds",
            "Latency of jwt authentication operations in seconds. This is the time spent authenticating a token for cache miss only (i.e. when the token is not found in the cache).",
            latency.clone(),
        );
        registry.register(
            "apiserver_authentication_jwt_authenticator_jwks_fetch_last_timestamp_seconds",
            "Timestamp of the last successful or failed JWKS fetch split by result, api server identity and jwt issuer for the JWT authenticator.",
            fetch_last.clone(),
        );
        registry.register(
            "apiserver_authentication_jwt_authenticator_jwks_fetch_last_key_set_info",
            "Information about the last JWKS fetched by the JWT authenticator with hash as label, split by api server identity and jwt issuer.",
            key_set.clone(),
        );
        Metrics {
            registry,
            apiserver_id_hash: hash(apiserver_id.as_bytes()),
            reloads,
            reload_last,
            config_info,
            latency,
            fetch_last,
            key_set,
            last_key_sets: Mutex::new(HashMap::new()),
        }
    }

    /// A reload attempt: `Some(config)` when it was applied (the config's bytes), else failed.
    pub fn reloaded(&self, applied: Option<&[u8]>) {
        let status = if applied.is_some() { "success" } else { "failure" };
        let labels = ReloadLabels { status: status.into(), apiserver_id_hash: self.apiserver_id_hash.clone() };
        self.reloads.get_or_create(&labels).inc();
        self.reload_last.get_or_create(&labels).set(now_seconds());
        if let Some(data) = applied {
            self.config_applied(data);
        }
    }

    /// The configuration in force (at start, and after each successful reload).
    pub fn config_applied(&self, data: &[u8]) {
        self.config_info.clear();
        let labels = ConfigInfoLabels { apiserver_id_hash: self.apiserver_id_hash.clone(), hash: hash(data) };
        self.config_info.get_or_create(&labels).set(1);
    }

    /// One authentication by the issuer's authenticator (not counted: tokens of other issuers).
    pub fn authenticated(&self, issuer: &str, success: bool, took: Duration) {
        let result = if success { "success" } else { "failure" };
        let labels = LatencyLabels { result: result.into(), jwt_issuer_hash: hash(issuer.as_bytes()) };
        self.latency.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// A JWKS fetch: `Some(key set)` when it succeeded.
    pub fn jwks_fetched(&self, issuer: &str, key_set: Option<&[u8]>) {
        let issuer_hash = hash(issuer.as_bytes());
        let result = if key_set.is_some() { "success" } else { "failure" };
        let labels = FetchLabels {
            result: result.into(),
            jwt_issuer_hash: issuer_hash.clone(),
            apiserver_id_hash: self.apiserver_id_hash.clone(),
        };
        self.fetch_last.get_or_create(&labels).set(now_seconds());
        if let Some(set) = key_set {
            let id = self.apiserver_id_hash.clone();
            // One key set per issuer: drop the previous hash of this issuer.
            let mut last = self.last_key_sets.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(old) = last.remove(&issuer_hash) {
                self.key_set.remove(&old);
            }
            let labels = KeySetLabels { jwt_issuer_hash: issuer_hash.clone(), apiserver_id_hash: id, hash: hash(set) };
            self.key_set.get_or_create(&labels).set(1);
            last.insert(issuer_hash, labels);
        }
    }

    /// The OpenMetrics text, without the closing `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode_registry(&mut text, &self.registry).is_err() {
            return String::new();
        }
        text
    }
}
