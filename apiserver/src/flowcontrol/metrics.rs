//! API Priority and Fairness metrics, with upstream kube-apiserver's names and labels,
//! served on the apiserver's `/metrics` (OpenMetrics text).
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `apiserver_flowcontrol_dispatched_requests_total` | counter | `flow_schema`, `priority_level` |
//! | `apiserver_flowcontrol_rejected_requests_total` | counter | `flow_schema`, `priority_level`, `reason` (`queue-full`, `concurrency-limit`, `time-out`, `cancelled`) |
//! | `apiserver_flowcontrol_current_inqueue_requests` | gauge | `flow_schema`, `priority_level` |
//! | `apiserver_flowcontrol_current_executing_requests` | gauge | `flow_schema`, `priority_level` |
//! | `apiserver_flowcontrol_current_executing_seats` | gauge | `flow_schema`, `priority_level` |
//! | `apiserver_flowcontrol_request_wait_duration_seconds` | histogram | `execute` (`true`/`false`), `flow_schema`, `priority_level` |
//! | `apiserver_flowcontrol_request_execution_seconds` | histogram | `flow_schema`, `priority_level`, `type` (`regular`, `watch`) |
//! | `apiserver_flowcontrol_nominal_limit_seats` | gauge | `priority_level` |
//! | `apiserver_flowcontrol_lower_limit_seats`, `_upper_limit_seats`, `_current_limit_seats` | gauge | `priority_level` |
//! | `apiserver_flowcontrol_request_concurrency_limit` | gauge | `priority_level` (the current limit, as upstream's deprecated alias) |
//! | `apiserver_flowcontrol_current_inqueue_seats` | gauge | `priority_level` |
//! | `apiserver_current_inflight_requests` | gauge | `request_kind` (`readOnly`, `mutating`) |

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowLabels {
    pub flow_schema: String,
    pub priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub flow_schema: String,
    pub priority_level: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WaitLabels {
    pub execute: String,
    pub flow_schema: String,
    pub priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecLabels {
    pub flow_schema: String,
    pub priority_level: String,
    /// `regular` or `watch`.
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabels {
    pub priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub request_kind: String,
}

fn wait_histogram() -> Histogram {
    // Upstream's buckets for the queue wait, in seconds.
    Histogram::new([0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0])
}

fn execution_histogram() -> Histogram {
    Histogram::new([0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 50.0])
}

/// The metric families; `encode` renders them.
pub struct Metrics {
    registry: Registry,
    pub dispatched: Family<FlowLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub inqueue: Family<FlowLabels, Gauge>,
    pub executing: Family<FlowLabels, Gauge>,
    pub executing_seats: Family<FlowLabels, Gauge>,
    pub wait: Family<WaitLabels, Histogram, fn() -> Histogram>,
    pub execution: Family<ExecLabels, Histogram, fn() -> Histogram>,
    pub nominal_limit: Family<LevelLabels, Gauge>,
    pub lower_limit: Family<LevelLabels, Gauge>,
    pub upper_limit: Family<LevelLabels, Gauge>,
    pub current_limit: Family<LevelLabels, Gauge>,
    pub concurrency_limit: Family<LevelLabels, Gauge>,
    pub inqueue_seats: Family<LevelLabels, Gauge>,
    pub inflight: Family<KindLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let dispatched = Family::<FlowLabels, Counter>::default();
        let rejected = Family::<RejectLabels, Counter>::default();
        let inqueue = Family::<FlowLabels, Gauge>::default();
        let executing = Family::<FlowLabels, Gauge>::default();
        let executing_seats = Family::<FlowLabels, Gauge>::default();
        let wait =
            Family::<WaitLabels, Histogram, fn() -> Histogram>::new_with_constructor(wait_histogram as fn() -> _);
        let execution =
            Family::<ExecLabels, Histogram, fn() -> Histogram>::new_with_constructor(execution_histogram as fn() -> _);
        let level_gauge = Family::<LevelLabels, Gauge>::default;
        let (nominal_limit, lower_limit, upper_limit, current_limit, concurrency_limit, inqueue_seats) =
            (level_gauge(), level_gauge(), level_gauge(), level_gauge(), level_gauge(), level_gauge());
        let inflight = Family::<KindLabels, Gauge>::default();
        let p = "apiserver_flowcontrol_";
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            format!("{p}dispatched_requests"),
            "Number of requests executed by API Priority and Fairness subsystem",
            dispatched.clone(),
        );
        registry.register(
            format!("{p}rejected_requests"),
            "Number of requests rejected by API Priority and Fairness subsystem",
            rejected.clone(),
        );
        registry.register(
            format!("{p}current_inqueue_requests"),
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            inqueue.clone(),
        );
        registry.register(
            format!("{p}current_executing_requests"),
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            executing.clone(),
        );
        registry.register(
            format!("{p}current_executing_seats"),
            "Concurrency (number of seats) occupied by the currently executing requests in the API Priority and Fairness subsystem",
            executing_seats.clone(),
        );
        registry.register(
            format!("{p}request_wait_duration_seconds"),
            "Length of time a request spent waiting in its queue",
            wait.clone(),
        );
        registry.register(
            format!("{p}request_execution_seconds"),
            "Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution in the API Priority and Fairness subsystem",
            execution.clone(),
        );
        registry.register(
            format!("{p}nominal_limit_seats"),
            "Nominal number of execution seats configured for each priority level",
            nominal_limit.clone(),
        );
        registry.register(
            format!("{p}lower_limit_seats"),
            "Configured lower bound on number of execution seats available to each priority level",
            lower_limit.clone(),
        );
        registry.register(
            format!("{p}upper_limit_seats"),
            "Configured upper bound on number of execution seats available to each priority level",
            upper_limit.clone(),
        );
        registry.register(
            format!("{p}current_limit_seats"),
            "current derived number of execution seats available to each priority level",
            current_limit.clone(),
        );
        registry.register(
            format!("{p}request_concurrency_limit"),
            "Nominal number of execution seats configured for each priority level (deprecated alias of the current limit)",
            concurrency_limit.clone(),
        );
        registry.register(
            format!("{p}current_inqueue_seats"),
            "Number of seats currently pending in queues of the API Priority and Fairness subsystem",
            inqueue_seats.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
            inflight.clone(),
        );
        Metrics {
            registry,
            dispatched,
            rejected,
            inqueue,
            executing,
            executing_seats,
            wait,
            execution,
            nominal_limit,
            lower_limit,
            upper_limit,
            current_limit,
            concurrency_limit,
            inqueue_seats,
            inflight,
        }
    }

    /// The OpenMetrics text of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    pub fn observe_wait(&self, flow: &FlowLabels, executed: bool, waited: Duration) {
        let labels = WaitLabels {
            execute: executed.to_string(),
            flow_schema: flow.flow_schema.clone(),
            priority_level: flow.priority_level.clone(),
        };
        self.wait.get_or_create(&labels).observe(waited.as_secs_f64());
    }

    pub fn reject(&self, flow: &FlowLabels, reason: &str) {
        let labels = RejectLabels {
            flow_schema: flow.flow_schema.clone(),
            priority_level: flow.priority_level.clone(),
            reason: reason.to_string(),
        };
        self.rejected.get_or_create(&labels).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_as_upstream() {
        let m = Metrics::new();
        let flow = FlowLabels { flow_schema: "global-default".into(), priority_level: "global-default".into() };
        m.dispatched.get_or_create(&flow).inc();
        m.reject(&flow, "queue-full");
        m.observe_wait(&flow, true, Duration::from_millis(3));
        m.execution
            .get_or_create(&ExecLabels {
                flow_schema: "a".into(),
                priority_level: "b".into(),
                r#type: "regular".into(),
            })
            .observe(0.1);
        let text = m.encode();
        let cases = [
            ("dispatched", "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"} 1"),
            ("rejected", "apiserver_flowcontrol_rejected_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\",reason=\"queue-full\"} 1"),
            ("wait", "apiserver_flowcontrol_request_wait_duration_seconds_count{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\"} 1"),
            ("execution type label", "apiserver_flowcontrol_request_execution_seconds_count{flow_schema=\"a\",priority_level=\"b\",type=\"regular\"} 1"),
        ];
        for (name, line) in cases {
            assert!(text.lines().any(|l| l == line), "{name}: {line} not in\n{text}");
        }
    }
}
