//! The external signer's client metrics, with kube-apiserver's names, labels and buckets, on
//! the apiserver's `/metrics`. In: the outcome of each call. Out: OpenMetrics text.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `apiserver_externaljwt_fetch_keys_success_timestamp` | gauge | (Unix seconds of the last successful FetchKeys) |
//! | `apiserver_externaljwt_fetch_keys_data_timestamp` | gauge | (the signer's `data_timestamp` of the last successful FetchKeys) |
//! | `apiserver_externaljwt_fetch_keys_request_total` | counter | `code` |
//! | `apiserver_externaljwt_sign_request_total` | counter | `code` |
//! | `apiserver_externaljwt_request_duration_seconds` | histogram | `method` (`/v1.ExternalJWTSigner/Sign`, ...), `code` |
//!
//! `code` is the gRPC status code as Go names it (`OK`, `Unavailable`, `DeadlineExceeded`,
//! ...), or `unknown-non-grpc` when the call answered but its answer was refused (a header
//! that is not allowed, no keys, a refresh hint of zero).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `code` of an answer that came back but was refused.
pub const NON_GRPC: &str = "unknown-non-grpc";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub method: String,
    pub code: String,
}

/// Go's name of a gRPC status code (`codes.Code.String()`).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])
}

/// The families; [`Metrics::encode`] renders them.
pub struct Metrics {
    registry: Registry,
    fetch_success: Gauge<f64, AtomicU64>,
    data_timestamp: Gauge<f64, AtomicU64>,
    fetch_total: Family<CodeLabels, Counter>,
    sign_total: Family<CodeLabels, Counter>,
    duration: Family<CallLabels, Histogram, fn() -> Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let fetch_success = Gauge::<f64, AtomicU64>::default();
        let data_timestamp = Gauge::<f64, AtomicU64>::default();
        let fetch_total = Family::<CodeLabels, Counter>::default();
        let sign_total = Family::<CodeLabels, Counter>::default();
        let duration = Family::<CallLabels, Histogram, fn() -> Histogram>::new_with_constructor(duration_histogram);
        registry.register(
            "apiserver_externaljwt_fetch_keys_success_timestamp",
            "Unix Timestamp in seconds of the last successful FetchKeys request",
            fetch_success.clone(),
        );
        registry.register(
            "apiserver_externaljwt_fetch_keys_data_timestamp",
            "Unix Timestamp in seconds of the last successful FetchKeys data_timestamp value returned by the external signer",
            data_timestamp.clone(),
        );
        registry.register(
            "apiserver_externaljwt_fetch_keys_request",
            "Total attempts at syncing supported JWKs",
            fetch_total.clone(),
        );
        registry.register("apiserver_externaljwt_sign_request", "Total attempts at signing JWT", sign_total.clone());
        registry.register(
            "apiserver_externaljwt_request_duration_seconds",
            "Request duration and time for calls to external-jwt-signer",
            duration.clone(),
        );
        Metrics { registry, fetch_success, data_timestamp, fetch_total, sign_total, duration }
    }
}

impl Metrics {
    /// A FetchKeys that ended with `code` (its data's timestamp when it succeeded).
    pub fn fetch_keys(&self, code: &str, data_timestamp: Option<f64>, now: f64) {
        self.fetch_total.get_or_create(&CodeLabels { code: code.to_string() }).inc();
        if code == code_name(tonic::Code::Ok) {
            self.fetch_success.set(now);
            if let Some(t) = data_timestamp {
                self.data_timestamp.set(t);
            }
        }
    }

    /// A token signing that ended with `code`.
    pub fn sign(&self, code: &str) {
        self.sign_total.get_or_create(&CodeLabels { code: code.to_string() }).inc();
    }

    /// One call of `method` (`/v1.ExternalJWTSigner/Sign`) that took `took` and ended with
    /// the gRPC `code`.
    pub fn call(&self, method: &str, code: tonic::Code, took: Duration) {
        let labels = CallLabels { method: method.to_string(), code: code_name(code).to_string() };
        self.duration.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// OpenMetrics text (ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_buckets_as_kube_apiserver() {
        let m = Metrics::default();
        m.fetch_keys("OK", Some(1_700_000_000.0), 1_700_000_100.0);
        m.fetch_keys(NON_GRPC, None, 1_700_000_200.0);
        m.sign("OK");
        m.sign("Unavailable");
        m.call("/v1.ExternalJWTSigner/Sign", tonic::Code::Ok, Duration::from_millis(3));
        m.call("/v1.ExternalJWTSigner/FetchKeys", tonic::Code::DeadlineExceeded, Duration::from_secs(61));
        let text = m.encode();
        for want in [
            "apiserver_externaljwt_fetch_keys_success_timestamp 1700000100.0",
            "apiserver_externaljwt_fetch_keys_data_timestamp 1700000000.0",
            "apiserver_externaljwt_fetch_keys_request_total{code=\"OK\"} 1",
            "apiserver_externaljwt_fetch_keys_request_total{code=\"unknown-non-grpc\"} 1",
            "apiserver_externaljwt_sign_request_total{code=\"OK\"} 1",
            "apiserver_externaljwt_sign_request_total{code=\"Unavailable\"} 1",
            "apiserver_externaljwt_request_duration_seconds_bucket{le=\"0.005\",method=\"/v1.ExternalJWTSigner/Sign\",code=\"OK\"} 1",
            "apiserver_externaljwt_request_duration_seconds_bucket{le=\"0.001\",method=\"/v1.ExternalJWTSigner/Sign\",code=\"OK\"} 0",
            "apiserver_externaljwt_request_duration_seconds_bucket{le=\"60.0\",method=\"/v1.ExternalJWTSigner/FetchKeys\",code=\"DeadlineExceeded\"} 0",
            "apiserver_externaljwt_request_duration_seconds_count{method=\"/v1.ExternalJWTSigner/FetchKeys\",code=\"DeadlineExceeded\"} 1",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }

    #[test]
    fn code_names_are_gos() {
        let cases = [
            (tonic::Code::Ok, "OK"),
            (tonic::Code::Cancelled, "Canceled"),
            (tonic::Code::DeadlineExceeded, "DeadlineExceeded"),
            (tonic::Code::Unavailable, "Unavailable"),
            (tonic::Code::InvalidArgument, "InvalidArgument"),
            (tonic::Code::Unauthenticated, "Unauthenticated"),
        ];
        for (code, want) in cases {
            assert_eq!(code_name(code), want);
        }
    }
}
