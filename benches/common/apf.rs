//! The figures of the APF storm benchmark's side loads (an admin's `kubectl get`s, a
//! controller's Lease renewals) and its targets, computed from what was recorded.

use std::time::Duration;

use super::pct;

/// One admin request: how long until its whole response was read (or it failed), and the
/// failure, if any (`http_429` tells rejections by flow control apart).
#[derive(Clone, Debug)]
pub struct AdminSample {
    pub latency: Duration,
    pub failure: Option<String>,
    pub http_429: bool,
}

pub struct AdminFigures {
    pub requests: usize,
    pub failures: usize,
    pub rejected_429: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl AdminFigures {
    /// Percentiles over every request, failed ones included (a failure is as bad as a slow answer).
    pub fn of(samples: &[AdminSample]) -> AdminFigures {
        let mut lat: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
        lat.sort();
        AdminFigures {
            requests: samples.len(),
            failures: samples.iter().filter(|s| s.failure.is_some()).count(),
            rejected_429: samples.iter().filter(|s| s.http_429).count(),
            p50: pct(&lat, 0.5),
            p99: pct(&lat, 0.99),
            max: lat.last().copied().unwrap_or_default(),
        }
    }
}

/// One Lease renewal (GET + PUT): when it started (from the start of the load), how long it
/// took, and why it failed, if it did.
#[derive(Clone, Debug)]
pub struct Renewal {
    pub started: Duration,
    pub took: Duration,
    pub failure: Option<String>,
}

pub struct LeaseFigures {
    pub ok: usize,
    pub failed: usize,
    pub max: Duration,
    /// The longest time without a successful renewal between the start of the load (the
    /// Lease was acquired just before), each success's end, and `end`. client-go's leader
    /// gives up leadership when this exceeds its renew deadline.
    pub longest_gap: Duration,
}

impl LeaseFigures {
    pub fn of(renewals: &[Renewal], end: Duration) -> LeaseFigures {
        let mut last_ok = Duration::ZERO;
        let mut longest_gap = Duration::ZERO;
        for r in renewals.iter().filter(|r| r.failure.is_none()) {
            let done = r.started + r.took;
            longest_gap = longest_gap.max(done.saturating_sub(last_ok));
            last_ok = last_ok.max(done);
        }
        longest_gap = longest_gap.max(end.saturating_sub(last_ok));
        LeaseFigures {
            ok: renewals.iter().filter(|r| r.failure.is_none()).count(),
            failed: renewals.iter().filter(|r| r.failure.is_some()).count(),
            max: renewals.iter().map(|r| r.took).max().unwrap_or_default(),
            longest_gap,
        }
    }
}

/// Nodes certified per second over several runs, each (certified, wall time): all nodes over
/// all the time, so a long run weighs more than a short one.
pub fn throughput(runs: &[(usize, Duration)]) -> f64 {
    let nodes: usize = runs.iter().map(|r| r.0).sum();
    let wall: Duration = runs.iter().map(|r| r.1).sum();
    nodes as f64 / wall.as_secs_f64().max(f64::EPSILON)
}

/// The targets: (target, measured, verdict). `ratio` is the storm's throughput with the
/// side loads over its throughput alone.
pub fn verdicts(ratio: f64, admin_p99: Duration, failed_renewals: usize) -> Vec<(String, String, String)> {
    let met = |ok: bool| if ok { "met".to_string() } else { "**missed**".to_string() };
    vec![
        (
            "storm throughput with the admin and lease load, relative to the storm alone: within 10 %".into(),
            format!("{:.2} ({:+.1} %)", ratio, (ratio - 1.0) * 100.0),
            met(ratio >= 0.9),
        ),
        (
            "admin p99 ≤ 100 ms".into(),
            format!("{:.2} ms", admin_p99.as_secs_f64() * 1000.0),
            met(admin_p99 <= Duration::from_millis(100)),
        ),
        ("failed Lease renewals: 0".into(), failed_renewals.to_string(), met(failed_renewals == 0)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn admin(latency: u64, failure: Option<&str>, http_429: bool) -> AdminSample {
        AdminSample { latency: ms(latency), failure: failure.map(String::from), http_429 }
    }

    struct AdminCase {
        name: &'static str,
        samples: Vec<AdminSample>,
        requests: usize,
        failures: usize,
        rejected: usize,
        p50: Duration,
        max: Duration,
    }

    #[test]
    fn admin_figures_count_failures_in_the_latencies() {
        let cases = [
            AdminCase {
                name: "nothing recorded",
                samples: vec![],
                requests: 0,
                failures: 0,
                rejected: 0,
                p50: ms(0),
                max: ms(0),
            },
            AdminCase {
                name: "a slow 429 is a failure and sets the maximum",
                samples: vec![admin(2, None, false), admin(3, None, false), admin(900, Some("HTTP 429"), true)],
                requests: 3,
                failures: 1,
                rejected: 1,
                p50: ms(3),
                max: ms(900),
            },
            AdminCase {
                name: "a transport error is a failure, not a 429",
                samples: vec![admin(5, Some("connection reset"), false), admin(1, None, false)],
                requests: 2,
                failures: 1,
                rejected: 0,
                p50: ms(5),
                max: ms(5),
            },
        ];
        for c in cases {
            let f = AdminFigures::of(&c.samples);
            let name = c.name;
            assert_eq!(f.requests, c.requests, "{name}: requests");
            assert_eq!(f.failures, c.failures, "{name}: failures");
            assert_eq!(f.rejected_429, c.rejected, "{name}: 429s");
            assert_eq!(f.p50, c.p50, "{name}: p50");
            assert_eq!(f.max, c.max, "{name}: max");
        }
    }

    fn renewal(started: u64, took: u64, failure: Option<&str>) -> Renewal {
        Renewal { started: ms(started), took: ms(took), failure: failure.map(String::from) }
    }

    struct LeaseCase {
        name: &'static str,
        renewals: Vec<Renewal>,
        end: u64,
        ok: usize,
        failed: usize,
        max: Duration,
        gap: Duration,
    }

    #[test]
    fn lease_figures_find_the_longest_time_without_a_renewal() {
        let cases = [
            LeaseCase {
                name: "no renewal at all: the whole run",
                renewals: vec![],
                end: 5000,
                ok: 0,
                failed: 0,
                max: ms(0),
                gap: ms(5000),
            },
            LeaseCase {
                name: "steady renewals: the period plus a renewal's time",
                renewals: vec![renewal(0, 10, None), renewal(2010, 20, None), renewal(4030, 10, None)],
                end: 5000,
                ok: 3,
                failed: 0,
                max: ms(20),
                gap: ms(2020),
            },
            LeaseCase {
                name: "a failed renewal widens the gap",
                renewals: vec![renewal(0, 10, None), renewal(2010, 10000, Some("deadline")), renewal(14010, 10, None)],
                end: 15000,
                ok: 2,
                failed: 1,
                max: ms(10000),
                gap: ms(14010),
            },
            LeaseCase {
                name: "the tail after the last success counts",
                renewals: vec![renewal(0, 10, None)],
                end: 9000,
                ok: 1,
                failed: 0,
                max: ms(10),
                gap: ms(8990),
            },
        ];
        for c in cases {
            let f = LeaseFigures::of(&c.renewals, ms(c.end));
            let name = c.name;
            assert_eq!(f.ok, c.ok, "{name}: ok");
            assert_eq!(f.failed, c.failed, "{name}: failed");
            assert_eq!(f.max, c.max, "{name}: max");
            assert_eq!(f.longest_gap, c.gap, "{name}: longest gap");
        }
    }

    #[test]
    fn throughput_pools_nodes_over_time() {
        type Runs = Vec<(usize, Duration)>;
        let cases: [(&str, Runs, f64); 4] = [
            ("one run", vec![(1000, ms(4000))], 250.0),
            ("two runs: all nodes over all the time", vec![(1000, ms(4000)), (1000, ms(6000))], 200.0),
            ("nothing certified", vec![(0, ms(1000))], 0.0),
            ("no run at all", vec![], 0.0),
        ];
        for (name, runs, want) in cases {
            assert_eq!(throughput(&runs), want, "{name}");
        }
    }

    #[test]
    fn verdicts_follow_the_targets() {
        let cases: &[(&str, f64, u64, usize, [&str; 3])] = &[
            ("all met", 0.95, 40, 0, ["met", "met", "met"]),
            ("on the limits", 0.9, 100, 0, ["met", "met", "met"]),
            ("faster with load is met", 1.05, 1, 0, ["met", "met", "met"]),
            ("all missed", 0.89, 101, 1, ["**missed**", "**missed**", "**missed**"]),
        ];
        for (name, ratio, p99, failed, want) in cases {
            let got: Vec<String> = verdicts(*ratio, ms(*p99), *failed).into_iter().map(|(_, _, v)| v).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
