//! The work a storm caused per certified node: what the server's `/metrics` counted between
//! two scrapes (requests, storage writes and reads, SQLite commits, watch events, object decodes and
//! encodes, signature checks, the CSR counters), and the allocation calls `perf stat`
//! counted on uprobes when asked (`BENCH_PERF_EVENTS`, docs/BENCHMARKS.md), each divided by
//! the nodes.
//!
//! What enters: the samples before and after, the node count, the perf counts. What leaves:
//! rows (what, per node), every series shown (none left out), two decimals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

use super::scrape::Sample;

/// Metric-name prefixes printed whole, every label set (the CSR counters).
pub const GENERIC_PREFIXES: &[&str] = &["kustos_csr_parse", "kustos_csr_signature"];

/// `name`'s samples (or every metric whose name starts with `name` when `prefix`) keyed by
/// `key`, `after` less `before`.
fn deltas(
    before: &[Sample],
    after: &[Sample],
    matches: impl Fn(&str) -> bool,
    key: impl Fn(&Sample) -> String,
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for s in after.iter().filter(|s| matches(&s.name)) {
        *out.entry(key(s)).or_default() += s.value;
    }
    for s in before.iter().filter(|s| matches(&s.name)) {
        *out.entry(key(s)).or_default() -= s.value;
    }
    out
}

fn label(s: &Sample, k: &str) -> String {
    s.labels.get(k).cloned().unwrap_or_default()
}

fn all_labels(s: &Sample) -> String {
    s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// One group of rows: its total, then each nonzero series, largest first.
fn group(rows: &mut Vec<(String, String)>, title: &str, series: BTreeMap<String, f64>, nodes: f64) {
    // A fold from +0.0: an empty sum of f64 is -0.0, printed "-0.00".
    let total = series.values().fold(0.0, |a, b| a + b);
    rows.push((format!("**{title}**"), format!("**{:.2}**", total / nodes)));
    let mut v: Vec<(String, f64)> = series.into_iter().filter(|(_, n)| *n != 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (k, n) in v {
        rows.push((format!("{title}: {k}"), format!("{:.2}", n / nodes)));
    }
}

/// The per-node rows of the work between `before` and `after`, with `allocations` (perf
/// event, count) when counted.
pub fn rows(before: &[Sample], after: &[Sample], nodes: u64, allocations: &[(String, f64)]) -> Vec<(String, String)> {
    let n = nodes.max(1) as f64;
    let mut rows = Vec::new();
    let named = |name: &'static str| move |m: &str| m == name;
    group(
        &mut rows,
        "requests",
        deltas(before, after, named("apiserver_request_total"), |s| {
            let sub = label(s, "subresource");
            let resource =
                if sub.is_empty() { label(s, "resource") } else { format!("{}/{sub}", label(s, "resource")) };
            format!("{} {resource} {}", label(s, "verb"), label(s, "code"))
        }),
        n,
    );
    group(
        &mut rows,
        "storage writes",
        deltas(before, after, named("kustos_storage_writes_total"), |s| {
            format!("{} {}", label(s, "operation"), label(s, "resource"))
        }),
        n,
    );
    group(
        &mut rows,
        "storage reads",
        deltas(before, after, named("kustos_storage_reads_total"), |s| label(s, "operation")),
        n,
    );
    group(
        &mut rows,
        "SQLite commits",
        deltas(before, after, named("kustos_sqlite_commits_total"), |s| format!("waited {}", label(s, "waited"))),
        n,
    );
    group(
        &mut rows,
        "watch events",
        deltas(before, after, named("apiserver_watch_events_total"), |s| {
            let g = label(s, "group");
            if g.is_empty() {
                label(s, "resource")
            } else {
                format!("{}.{g}", label(s, "resource"))
            }
        }),
        n,
    );
    for (title, name) in [("decodes", "kustos_object_decodes_total"), ("encodes", "kustos_object_encodes_total")] {
        group(
            &mut rows,
            title,
            deltas(before, after, named(name), |s| format!("{} {}", label(s, "site"), label(s, "format"))),
            n,
        );
    }
    group(
        &mut rows,
        "signature checks",
        deltas(before, after, named("kustos_signature_checks_total"), |s| label(s, "what")),
        n,
    );
    for prefix in GENERIC_PREFIXES {
        let series = deltas(before, after, |m| m.starts_with(prefix), |s| format!("{}{{{}}}", s.name, all_labels(s)));
        if !series.is_empty() {
            group(&mut rows, prefix, series, n);
        }
    }
    if !allocations.is_empty() {
        group(&mut rows, "allocation calls (perf uprobes)", allocations.iter().cloned().collect(), n);
    }
    rows
}

/// `perf stat` counting `events` (comma-separated, e.g. uprobes on the allocator) on the
/// whole machine, from [`PerfStat::start`] until [`PerfStat::stop`].
pub struct PerfStat {
    child: Child,
    out: PathBuf,
}

impl PerfStat {
    pub fn start(events: &str, dir: &Path) -> Result<PerfStat> {
        let out = dir.join("perf-stat.csv");
        let child = Command::new("perf")
            .args(["stat", "-a", "-x", ",", "-e", events, "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting perf stat (BENCH_PERF_EVENTS)")?;
        Ok(PerfStat { child, out })
    }

    /// Stop counting (SIGINT, as perf stat expects) and read the counts.
    pub fn stop(mut self) -> Result<Vec<(String, f64)>> {
        let status = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status()?;
        if !status.success() {
            bail!("kill -INT perf: {status}");
        }
        self.child.wait()?;
        let text = std::fs::read_to_string(&self.out).context("reading perf stat's output")?;
        let counts = parse_perf_csv(&text);
        if counts.is_empty() {
            bail!("perf stat counted nothing:\n{text}");
        }
        Ok(counts)
    }
}

/// (event, count) of `perf stat -x ,` output (`count,unit,event,...`; comments and
/// `<not counted>` lines skipped).
pub fn parse_perf_csv(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.get(2)?.to_string(), f.first()?.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_are_per_node_and_complete() {
        let parse = super::super::scrape::parse;
        let before = parse(
            "kustos_storage_writes_total{operation=\"create\",resource=\"certificatesigningrequests.certificates.k8s.io\"} 10\n\
             kustos_signature_checks_total{what=\"issued_certificate\"} 1\n",
        );
        let after = parse(
            "kustos_storage_writes_total{operation=\"create\",resource=\"certificatesigningrequests.certificates.k8s.io\"} 30\n\
             kustos_storage_writes_total{operation=\"update\",resource=\"certificatesigningrequests.certificates.k8s.io\"} 40\n\
             apiserver_watch_events_total{group=\"certificates.k8s.io\",version=\"v1\",resource=\"certificatesigningrequests\"} 90\n\
             kustos_object_decodes_total{format=\"json\",site=\"storage\"} 5\n\
             kustos_signature_checks_total{what=\"issued_certificate\"} 21\n\
             kustos_csr_parse_total{stage=\"create\"} 60\n\
             kustos_sqlite_commits_total{waited=\"true\"} 30\n",
        );
        let rows = super::rows(&before, &after, 20, &[("probe_kustos:mi_malloc_aligned".into(), 2000.0)]);
        let get = |k: &str| rows.iter().find(|(r, _)| r == k).map(|(_, v)| v.as_str()).unwrap_or("missing");
        assert_eq!(get("**storage writes**"), "**3.00**");
        assert_eq!(get("storage writes: update certificatesigningrequests.certificates.k8s.io"), "2.00");
        assert_eq!(get("storage writes: create certificatesigningrequests.certificates.k8s.io"), "1.00");
        assert_eq!(get("watch events: certificatesigningrequests.certificates.k8s.io"), "4.50");
        assert_eq!(get("decodes: storage json"), "0.25");
        assert_eq!(get("signature checks: issued_certificate"), "1.00");
        assert_eq!(get("SQLite commits: waited true"), "1.50");
        assert_eq!(get("kustos_csr_parse: kustos_csr_parse_total{stage=create}"), "3.00");
        assert_eq!(get("allocation calls (perf uprobes): probe_kustos:mi_malloc_aligned"), "100.00");
        assert_eq!(get("**requests**"), "**0.00**", "a group with nothing counted still shows");
        // Writes come largest first.
        let pos = |k: &str| rows.iter().position(|(r, _)| r == k);
        assert!(
            pos("storage writes: update certificatesigningrequests.certificates.k8s.io")
                < pos("storage writes: create certificatesigningrequests.certificates.k8s.io")
        );
    }

    #[test]
    fn perf_csv_parses() {
        let text = "# started on Sun Nov 29\n\n1234,,probe_kustos:mi_malloc_aligned,5.00,100.00,,\n\
                    <not counted>,,probe_kustos:malloc,0,100.00,,\n7,,probe_kustos:calloc,5.00,100.00,,\n";
        assert_eq!(
            super::parse_perf_csv(text),
            vec![("probe_kustos:mi_malloc_aligned".to_string(), 1234.0), ("probe_kustos:calloc".to_string(), 7.0)]
        );
    }
}
