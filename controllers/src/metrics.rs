//! The controllers' Prometheus metrics: one cheap, cloneable handle ([`Metrics`]) that every
//! controller gets through [`crate::Config`], and the text exposition for `/metrics`.
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `kustos_controller_reconciles_total` | counter | `controller` | reconciles (or syncs) run |
//! | `kustos_controller_reconcile_errors_total` | counter | `controller` | of those, the ones that failed |
//! | `kustos_controller_queue_depth` | gauge | `controller` | objects changed and waiting for their reconcile (the per-CSR controllers) |
//! | `workqueue_depth` | gauge | `name` | the same, under client-go's workqueue name |
//! | `workqueue_adds_total` | counter | `name` | objects that entered the queue (not already waiting) |
//! | `workqueue_queue_duration_seconds` | histogram | `name` | how long an object waited before its reconcile began |
//! | `workqueue_work_duration_seconds` | histogram | `name` | how long reconciles took |
//! | `kustos_csr_approved_total` | counter | `signer` | CSRs a controller approved |
//! | `kustos_csr_denied_total` | counter | `signer` | CSRs a controller denied |
//! | `kustos_csr_signed_total` | counter | `signer` | certificates written into `status.certificate` |
//! | `kustos_csr_failed_total` | counter | `signer` | CSRs the signer marked `Failed` |
//! | `kustos_pcr_issued_total` | counter | `signer` | PodCertificateRequests a Signer marked `Issued` (a chain in `status.certificateChain`) |
//! | `kustos_pcr_denied_total` | counter | `signer` | PodCertificateRequests a Signer marked `Denied` |
//! | `kustos_pcr_failed_total` | counter | `signer` | PodCertificateRequests a Signer marked `Failed` |
//! | `kustos_bootstrap_tokens_cleaned_total` | counter | | expired bootstrap-token Secrets deleted |
//! | `kustos_leader_election_master_status` | gauge | `name` | 1 while this replica holds the Lease, else 0 |
//! | `kustos_leader_election_transitions_total` | counter | `name` | times this replica started or stopped leading |
//!
//! Counters count what this process did (a restart starts them at zero, as usual for
//! Prometheus counters): summed over replicas, `kustos_csr_signed_total` is the number of
//! certificates issued.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = [(&'static str, String); 1];

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A handle on the process' metrics; clones share them. `Default` is a fresh registry, so
/// code that never serves `/metrics` (`kustos server`) just counts into it.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    reconciles: Family<Labels, Counter>,
    reconcile_errors: Family<Labels, Counter>,
    queue_depth: Family<Labels, Gauge>,
    csr_approved: Family<Labels, Counter>,
    csr_denied: Family<Labels, Counter>,
    csr_signed: Family<Labels, Counter>,
    csr_failed: Family<Labels, Counter>,
    pcr_issued: Family<Labels, Counter>,
    pcr_denied: Family<Labels, Counter>,
    pcr_failed: Family<Labels, Counter>,
    tokens_cleaned: Counter,
    leader: Family<Labels, Gauge>,
    leader_transitions: Family<Labels, Counter>,
    workqueue_depth: Family<Labels, Gauge>,
    workqueue_adds: Family<Labels, Counter>,
    workqueue_wait: Family<Labels, Histogram, fn() -> Histogram>,
    workqueue_work: Family<Labels, Histogram, fn() -> Histogram>,
}

/// client-go's workqueue buckets: 1 ns to 10 s, ten powers of ten.
fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-9, 10.0, 10))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<Labels, Counter>::default();
        let reconcile_errors = Family::<Labels, Counter>::default();
        let queue_depth = Family::<Labels, Gauge>::default();
        let csr_approved = Family::<Labels, Counter>::default();
        let csr_denied = Family::<Labels, Counter>::default();
        let csr_signed = Family::<Labels, Counter>::default();
        let csr_failed = Family::<Labels, Counter>::default();
        let pcr_issued = Family::<Labels, Counter>::default();
        let pcr_denied = Family::<Labels, Counter>::default();
        let pcr_failed = Family::<Labels, Counter>::default();
        let tokens_cleaned = Counter::default();
        let leader = Family::<Labels, Gauge>::default();
        let leader_transitions = Family::<Labels, Counter>::default();
        let workqueue_depth = Family::<Labels, Gauge>::default();
        let workqueue_adds = Family::<Labels, Counter>::default();
        let workqueue_wait = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(workqueue_histogram);
        let workqueue_work = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(workqueue_histogram);
        registry.register("workqueue_depth", "Current depth of workqueue", workqueue_depth.clone());
        registry.register("workqueue_adds", "Total number of adds handled by workqueue", workqueue_adds.clone());
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            workqueue_wait.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            workqueue_work.clone(),
        );
        // The `_total` suffix of counters is added by the encoder.
        registry.register(
            "kustos_controller_reconciles",
            "Reconciles (or syncs) run, by controller",
            reconciles.clone(),
        );
        registry.register(
            "kustos_controller_reconcile_errors",
            "Reconciles (or syncs) that failed, by controller",
            reconcile_errors.clone(),
        );
        registry.register(
            "kustos_controller_queue_depth",
            "Objects changed and waiting for their reconcile, by controller",
            queue_depth.clone(),
        );
        registry.register(
            "kustos_csr_approved",
            "CertificateSigningRequests approved, by signer",
            csr_approved.clone(),
        );
        registry.register("kustos_csr_denied", "CertificateSigningRequests denied, by signer", csr_denied.clone());
        registry.register("kustos_csr_signed", "Certificates issued into CSR status, by signer", csr_signed.clone());
        registry.register(
            "kustos_csr_failed",
            "CertificateSigningRequests the signer marked Failed, by signer",
            csr_failed.clone(),
        );
        registry.register("kustos_pcr_issued", "PodCertificateRequests issued, by signer", pcr_issued.clone());
        registry.register("kustos_pcr_denied", "PodCertificateRequests denied, by signer", pcr_denied.clone());
        registry.register(
            "kustos_pcr_failed",
            "PodCertificateRequests the signer marked Failed, by signer",
            pcr_failed.clone(),
        );
        registry.register(
            "kustos_bootstrap_tokens_cleaned",
            "Expired bootstrap-token Secrets deleted",
            tokens_cleaned.clone(),
        );
        registry.register(
            "kustos_leader_election_master_status",
            "1 while this replica holds the leader-election Lease, else 0",
            leader.clone(),
        );
        registry.register(
            "kustos_leader_election_transitions",
            "Times this replica started or stopped leading",
            leader_transitions.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                reconciles,
                reconcile_errors,
                queue_depth,
                csr_approved,
                csr_denied,
                csr_signed,
                csr_failed,
                pcr_issued,
                pcr_denied,
                pcr_failed,
                tokens_cleaned,
                leader,
                leader_transitions,
                workqueue_depth,
                workqueue_adds,
                workqueue_wait,
                workqueue_work,
            }),
        }
    }

    /// One reconcile (or sync) of `controller` finished; `ok` is whether it succeeded.
    pub fn reconciled(&self, controller: &str, ok: bool) {
        let l = label("controller", controller);
        self.inner.reconciles.get_or_create(&l).inc();
        if !ok {
            self.inner.reconcile_errors.get_or_create(&l).inc();
        }
    }

    /// Objects of `controller` waiting for their reconcile.
    pub fn set_queue_depth(&self, controller: &str, depth: usize) {
        let depth = i64::try_from(depth).unwrap_or(i64::MAX);
        self.inner.queue_depth.get_or_create(&label("controller", controller)).set(depth);
        self.inner.workqueue_depth.get_or_create(&label("name", controller)).set(depth);
    }

    /// An object entered `controller`'s queue (it was not waiting already).
    pub fn queue_added(&self, controller: &str) {
        self.inner.workqueue_adds.get_or_create(&label("name", controller)).inc();
    }

    /// An object of `controller` waited `waited` before its reconcile began.
    pub fn queue_waited(&self, controller: &str, waited: std::time::Duration) {
        self.inner.workqueue_wait.get_or_create(&label("name", controller)).observe(waited.as_secs_f64());
    }

    /// A reconcile of `controller` took `took`.
    pub fn worked(&self, controller: &str, took: std::time::Duration) {
        self.inner.workqueue_work.get_or_create(&label("name", controller)).observe(took.as_secs_f64());
    }

    /// A controller approved a CSR of `signer`.
    pub fn csr_approved(&self, signer: &str) {
        self.inner.csr_approved.get_or_create(&label("signer", signer)).inc();
    }

    /// A controller denied a CSR of `signer`.
    pub fn csr_denied(&self, signer: &str) {
        self.inner.csr_denied.get_or_create(&label("signer", signer)).inc();
    }

    /// A certificate of `signer` was written into a CSR's status.
    pub fn csr_signed(&self, signer: &str) {
        self.inner.csr_signed.get_or_create(&label("signer", signer)).inc();
    }

    /// The signer marked a CSR of `signer` Failed.
    pub fn csr_failed(&self, signer: &str) {
        self.inner.csr_failed.get_or_create(&label("signer", signer)).inc();
    }

    /// A PodCertificateRequest of `signer` got its terminal condition (`outcome`).
    pub fn pcr_answered(&self, signer: &str, outcome: PcrOutcome) {
        let family = match outcome {
            PcrOutcome::Issued => &self.inner.pcr_issued,
            PcrOutcome::Denied => &self.inner.pcr_denied,
            PcrOutcome::Failed => &self.inner.pcr_failed,
        };
        family.get_or_create(&label("signer", signer)).inc();
    }

    /// An expired bootstrap-token Secret was deleted.
    pub fn token_cleaned(&self) {
        self.inner.tokens_cleaned.inc();
    }

    /// Whether this replica leads for the Lease `name`; a change counts as a transition.
    pub fn set_leader(&self, name: &str, leading: bool) {
        let l = label("name", name);
        let new = i64::from(leading);
        if self.inner.leader.get_or_create(&l).set(new) != new {
            self.inner.leader_transitions.get_or_create(&l).inc();
        }
    }

    /// The text exposition (OpenMetrics, which Prometheus reads; [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.inner.registry).is_err() {
            // Writing into a String cannot fail; keep what was written.
            tracing::warn!("encoding the metrics failed");
        }
        out
    }
}

/// How a PodCertificateRequest was answered: its terminal condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcrOutcome {
    Issued,
    Denied,
    Failed,
}

fn label(key: &'static str, value: &str) -> Labels {
    [(key, value.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line starting with `prefix` (name and labels).
    fn sample(text: &str, prefix: &str) -> Option<String> {
        text.lines().find_map(|l| l.strip_prefix(prefix).map(|v| v.trim().to_string()))
    }

    #[test]
    fn every_recorded_value_is_exposed_under_its_documented_name() {
        let m = Metrics::new();
        m.reconciled("csrsigning", true);
        m.reconciled("csrsigning", false);
        m.set_queue_depth("csrsigning", 7);
        m.csr_approved("kubernetes.io/kube-apiserver-client-kubelet");
        m.csr_denied("kubernetes.io/kubelet-serving");
        m.csr_signed("kubernetes.io/kube-apiserver-client-kubelet");
        m.csr_signed("kubernetes.io/kube-apiserver-client-kubelet");
        m.csr_failed("kubernetes.io/kube-apiserver-client");
        m.pcr_answered("example.com/pods", PcrOutcome::Issued);
        m.pcr_answered("example.com/pods", PcrOutcome::Issued);
        m.pcr_answered("example.com/pods", PcrOutcome::Denied);
        m.pcr_answered("example.com/other", PcrOutcome::Failed);
        m.token_cleaned();
        m.set_leader("kcm", true);
        m.queue_added("csrsigning");
        m.queue_waited("csrsigning", std::time::Duration::from_millis(2));
        m.worked("csrsigning", std::time::Duration::from_millis(3));
        let text = m.encode();
        let cases: &[(&str, &str, &str)] = &[
            ("reconciles", "kustos_controller_reconciles_total{controller=\"csrsigning\"}", "2"),
            ("errors", "kustos_controller_reconcile_errors_total{controller=\"csrsigning\"}", "1"),
            ("queue depth", "kustos_controller_queue_depth{controller=\"csrsigning\"}", "7"),
            ("approved", "kustos_csr_approved_total{signer=\"kubernetes.io/kube-apiserver-client-kubelet\"}", "1"),
            ("denied", "kustos_csr_denied_total{signer=\"kubernetes.io/kubelet-serving\"}", "1"),
            ("signed", "kustos_csr_signed_total{signer=\"kubernetes.io/kube-apiserver-client-kubelet\"}", "2"),
            ("failed", "kustos_csr_failed_total{signer=\"kubernetes.io/kube-apiserver-client\"}", "1"),
            ("pcr issued", "kustos_pcr_issued_total{signer=\"example.com/pods\"}", "2"),
            ("pcr denied", "kustos_pcr_denied_total{signer=\"example.com/pods\"}", "1"),
            ("pcr failed", "kustos_pcr_failed_total{signer=\"example.com/other\"}", "1"),
            ("tokens cleaned", "kustos_bootstrap_tokens_cleaned_total", "1"),
            ("leader", "kustos_leader_election_master_status{name=\"kcm\"}", "1"),
            ("transitions", "kustos_leader_election_transitions_total{name=\"kcm\"}", "1"),
            ("workqueue depth", "workqueue_depth{name=\"csrsigning\"}", "7"),
            ("workqueue adds", "workqueue_adds_total{name=\"csrsigning\"}", "1"),
            ("queue wait", "workqueue_queue_duration_seconds_count{name=\"csrsigning\"}", "1"),
            ("wait sum", "workqueue_queue_duration_seconds_sum{name=\"csrsigning\"}", "0.002"),
            ("work", "workqueue_work_duration_seconds_count{name=\"csrsigning\"}", "1"),
            ("work bucket", "workqueue_work_duration_seconds_bucket{le=\"0.01\",name=\"csrsigning\"}", "1"),
        ];
        for (name, prefix, want) in cases {
            assert_eq!(sample(&text, prefix).as_deref(), Some(*want), "{name}: in\n{text}");
        }
    }

    #[test]
    fn only_a_change_of_leader_status_is_a_transition() {
        let m = Metrics::new();
        // name, leading, wanted status, wanted transitions (in order, on one handle)
        let steps: &[(&str, bool, &str, &str)] = &[
            ("standby at start", false, "0", "0"),
            ("acquired", true, "1", "1"),
            ("renewed", true, "1", "1"),
            ("lost", false, "0", "2"),
            ("still standby", false, "0", "2"),
        ];
        for (name, leading, status, transitions) in steps {
            m.set_leader("l", *leading);
            let text = m.encode();
            assert_eq!(
                sample(&text, "kustos_leader_election_master_status{name=\"l\"}").as_deref(),
                Some(*status),
                "{name}"
            );
            let got = sample(&text, "kustos_leader_election_transitions_total{name=\"l\"}");
            assert_eq!(got.as_deref().unwrap_or("0"), *transitions, "{name}");
        }
    }
}
