//! Request and process metrics with kube-apiserver's names and labels, for `/metrics`.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `apiserver_request_total` | counter | `verb`, `dry_run`, `group`, `version`, `resource`, `subresource`, `scope`, `component`, `code` |
//! | `apiserver_request_duration_seconds` | histogram | the same but `code` |
//! | `apiserver_storage_objects` | gauge | `resource` (`<resource>.<group>`, or the resource alone for core) |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | | |
//!
//! The verb is upstream's reported verb: `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`,
//! `APPLY` (a server-side apply patch), `DELETE`, `DELETECOLLECTION`; the method for paths
//! that are not resources. A request for a resource no kind serves is counted with empty
//! group, version, resource and subresource, a made-up method as `other` and a made-up
//! `dryRun` as `invalid`, as upstream cleans them, so a client cannot grow the label sets.
//! A watch's duration is the time to its response headers (upstream leaves long-running
//! requests out of the histogram; kustos measures how long they took to start).

use std::fmt::Write as _;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::request_info::RequestInfo;

/// The labels of a request's duration (upstream's, `code` aside).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub dry_run: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: String,
    pub component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub verb: String,
    pub dry_run: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: String,
    pub component: String,
    pub code: String,
}

/// Upstream's buckets for `apiserver_request_duration_seconds`.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0,
    45.0, 60.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The request counters of one apiserver.
pub struct RequestMetrics {
    registry: Registry,
    total: Family<CodeLabels, Counter>,
    duration: Family<RequestLabels, Histogram, fn() -> Histogram>,
}

impl std::fmt::Debug for RequestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestMetrics").finish_non_exhaustive()
    }
}

impl Default for RequestMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let total = Family::<CodeLabels, Counter>::default();
        let duration = Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(duration_histogram);
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
            total.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
            duration.clone(),
        );
        RequestMetrics { registry, total, duration }
    }
}

impl RequestMetrics {
    /// Count one answered request.
    pub fn observe(&self, labels: RequestLabels, code: u16, took: Duration) {
        self.duration.get_or_create(&labels).observe(took.as_secs_f64());
        let RequestLabels { verb, dry_run, group, version, resource, subresource, scope, component } = labels;
        let code = code.to_string();
        self.total
            .get_or_create(&CodeLabels { verb, dry_run, group, version, resource, subresource, scope, component, code })
            .inc();
    }

    /// The OpenMetrics text of these metrics, without the closing `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode_registry(&mut text, &self.registry).is_err() {
            return String::new();
        }
        text
    }
}

/// Upstream's reported verb of a request. A method outside HTTP's and upstream's set is
/// `other`, so made-up methods cannot grow the label sets.
pub fn reported_verb(info: &RequestInfo, method: &http::Method, is_apply: bool) -> String {
    let by_method = || {
        let m = method.as_str();
        if KNOWN_METHODS.contains(&m) {
            m.to_string()
        } else {
            "other".to_string()
        }
    };
    if !info.is_resource_request {
        return by_method();
    }
    match info.verb.as_str() {
        "get" => "GET",
        "list" => "LIST",
        "watch" => "WATCH",
        "create" => "POST",
        "update" => "PUT",
        "patch" if is_apply => "APPLY",
        "patch" => "PATCH",
        "delete" => "DELETE",
        "deletecollection" => "DELETECOLLECTION",
        _ => return by_method(),
    }
    .to_string()
}

/// The methods reported as themselves (HTTP's own; methods are case-sensitive).
const KNOWN_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"];

/// Upstream's `dry_run` label: empty, `All`, or `invalid` for anything else a client sends,
/// so that a made-up value cannot grow the label sets.
pub fn clean_dry_run(value: Option<&str>) -> &'static str {
    match value {
        None | Some("") => "",
        Some("All") => "All",
        Some(_) => "invalid",
    }
}

/// Upstream's `scope` label: `resource` for one object (or a create), `namespace`, `cluster`,
/// or empty for a path that is not a resource.
pub fn scope(info: &RequestInfo) -> &'static str {
    if !info.is_resource_request {
        ""
    } else if !info.name.is_empty() || info.verb == "create" {
        "resource"
    } else if !info.namespace.is_empty() {
        "namespace"
    } else {
        "cluster"
    }
}

/// `apiserver_storage_objects` from (resource label, count) pairs.
pub fn encode_storage_objects(counts: &[(String, u64)]) -> String {
    let mut text = String::from(
        "# HELP apiserver_storage_objects Number of stored objects at the time of last check split by kind.\n\
         # TYPE apiserver_storage_objects gauge\n",
    );
    for (resource, n) in counts {
        let _ = writeln!(text, "apiserver_storage_objects{{resource=\"{}\"}} {n}", escape_label(resource));
    }
    text
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What `/proc/self` says of this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub start_time_seconds: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux
/// architecture kustos builds for).
const USER_HZ: f64 = 100.0;
const PAGE_SIZE: u64 = 4096;

/// Parse `/proc/self/stat` (after the command name, which may hold spaces and parentheses),
/// with the boot time from `/proc/stat`'s `btime`.
pub fn parse_proc_stat(stat: &str, boot_time: u64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from the state (3rd overall) on: index 0 is field 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |field: usize| f.get(field - 3).and_then(|v| v.parse::<u64>().ok());
    let utime = num(14)?;
    let stime = num(15)?;
    let start_ticks = num(22)?;
    let vsize = num(23)?;
    let rss_pages = num(24)?;
    Some(ProcessStats {
        cpu_seconds: (utime + stime) as f64 / USER_HZ,
        resident_bytes: rss_pages * PAGE_SIZE,
        virtual_bytes: vsize,
        open_fds: 0,
        max_fds: None,
        start_time_seconds: boot_time as f64 + start_ticks as f64 / USER_HZ,
    })
}

/// The soft "Max open files" limit of `/proc/self/limits`.
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// This process' figures now (None off Linux or when `/proc` cannot be read).
pub fn process_stats() -> Option<ProcessStats> {
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let mut stats = parse_proc_stat(&std::fs::read_to_string("/proc/self/stat").ok()?, boot)?;
    stats.open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
    stats.max_fds = std::fs::read_to_string("/proc/self/limits").ok().and_then(|l| parse_max_fds(&l));
    Some(stats)
}

/// The `process_*` metrics (Prometheus' client names) of `stats`.
pub fn encode_process(stats: &ProcessStats) -> String {
    let mut text = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        let sample = if kind == "counter" { format!("{name}_total") } else { name.to_string() };
        let _ = writeln!(text, "{sample} {value}");
    };
    metric(
        "process_cpu_seconds",
        "counter",
        "Total user and system CPU time spent in seconds.",
        format!("{}", stats.cpu_seconds),
    );
    metric(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        stats.resident_bytes.to_string(),
    );
    metric("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", stats.virtual_bytes.to_string());
    metric("process_open_fds", "gauge", "Number of open file descriptors.", stats.open_fds.to_string());
    if let Some(max) = stats.max_fds {
        metric("process_max_fds", "gauge", "Maximum number of open file descriptors.", max.to_string());
    }
    metric(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        format!("{}", stats.start_time_seconds),
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(verb: &str, namespace: &str, name: &str, resource_request: bool) -> RequestInfo {
        RequestInfo {
            is_resource_request: resource_request,
            verb: verb.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn verbs_and_scopes_as_upstream_reports_them() {
        let get = http::Method::GET;
        let cases = [
            ("get", "ns", "a", true, false, "GET", "resource"),
            ("list", "ns", "", true, false, "LIST", "namespace"),
            ("list", "", "", true, false, "LIST", "cluster"),
            ("watch", "", "", true, false, "WATCH", "cluster"),
            ("create", "ns", "", true, false, "POST", "resource"),
            ("update", "ns", "a", true, false, "PUT", "resource"),
            ("patch", "ns", "a", true, false, "PATCH", "resource"),
            ("patch", "ns", "a", true, true, "APPLY", "resource"),
            ("delete", "", "a", true, false, "DELETE", "resource"),
            ("deletecollection", "ns", "", true, false, "DELETECOLLECTION", "namespace"),
            ("get", "", "", false, false, "GET", ""),
        ];
        for (verb, ns, name, res, apply, want_verb, want_scope) in cases {
            let i = info(verb, ns, name, res);
            assert_eq!(reported_verb(&i, &get, apply), want_verb, "{verb}");
            assert_eq!(scope(&i), want_scope, "{verb} {ns} {name}");
        }
        // Made-up methods are `other`, known ones themselves.
        let plain = info("get", "", "", false);
        let made_up = http::Method::from_bytes(b"FROB1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reported_verb(&plain, &made_up, false), "other");
        assert_eq!(reported_verb(&plain, &http::Method::OPTIONS, false), "OPTIONS");
    }

    #[test]
    fn dry_run_labels_are_bounded() {
        let cases =
            [(None, ""), (Some(""), ""), (Some("All"), "All"), (Some("all"), "invalid"), (Some("x1"), "invalid")];
        for (value, want) in cases {
            assert_eq!(clean_dry_run(value), want, "{value:?}");
        }
    }

    #[test]
    fn request_metrics_encode_with_upstream_names() {
        let m = RequestMetrics::default();
        let labels = RequestLabels {
            verb: "LIST".into(),
            resource: "configmaps".into(),
            version: "v1".into(),
            scope: "namespace".into(),
            component: "apiserver".into(),
            ..Default::default()
        };
        m.observe(labels.clone(), 200, Duration::from_millis(3));
        m.observe(labels, 200, Duration::from_millis(30));
        let text = m.encode();
        assert!(text.contains("apiserver_request_total{verb=\"LIST\",dry_run=\"\",group=\"\",version=\"v1\",resource=\"configmaps\",subresource=\"\",scope=\"namespace\",component=\"apiserver\",code=\"200\"} 2"), "{text}");
        assert!(text.contains("apiserver_request_duration_seconds_bucket{le=\"0.005\",verb=\"LIST\""), "{text}");
        assert!(text.contains("apiserver_request_duration_seconds_count{verb=\"LIST\""), "{text}");
        assert!(!text.contains("# EOF"), "the caller closes the exposition");
    }

    #[test]
    fn proc_stat_parses_with_spaces_in_the_command() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss ...
        let stat = "42 (kus tos) (x)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1000 123456789 2560 18446744073709551615";
        let s = parse_proc_stat(stat, 1_700_000_000).expect("parses");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.resident_bytes, 2560 * 4096);
        assert_eq!(s.virtual_bytes, 123_456_789);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert!(parse_proc_stat("garbage", 0).is_none());
        assert!(parse_proc_stat("1 (x) S 1 2", 0).is_none());
    }

    #[test]
    fn limits_and_boot_time_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 1048576              files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(parse_max_fds("nothing"), None);
        assert_eq!(parse_boot_time("cpu  1 2 3\nbtime 1764115200\nprocesses 5\n"), Some(1_764_115_200));
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn process_text_has_the_client_names() {
        let s = ProcessStats {
            cpu_seconds: 1.5,
            resident_bytes: 10,
            virtual_bytes: 20,
            open_fds: 7,
            max_fds: Some(1024),
            start_time_seconds: 5.0,
        };
        let text = encode_process(&s);
        for want in [
            "process_cpu_seconds_total 1.5",
            "process_resident_memory_bytes 10",
            "process_open_fds 7",
            "process_max_fds 1024",
            "process_start_time_seconds 5",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(process_stats().is_some_and(|s| s.resident_bytes > 0 && s.open_fds > 0));
    }
}
