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

    #[test]
    fn admin_figures_count_failures_in_the_latencies() {
        let cases: &[(&str, Vec<AdminSample>, usize, usize, usize, Duration, Duration)] = &[
            ("nothing recorded", vec![], 0, 0, 0, ms(0), ms(0)),
            (
                "a slow 429 is a failure and sets the maximum",
                vec![admin(2, None, false), admin(3, None, false), admin(900, Some("HTTP 429"), true)],
                3,
                1,
                1,
                ms(3),
                ms(900),
            ),
            (
                "a transport error is a failure, not a 429",
                vec![admin(5, Some("connection reset"), false), admin(1, None, false)],
                2,
                1,
                0,
                ms(5),
                ms(5),
            ),
        ];
        for (name, samples, requests, failures, rejected, p50, max) in cases {
            let f = AdminFigures::of(samples);
            assert_eq!(f.requests, *requests, "{name}: requests");
            assert_eq!(f.failures, *failures, "{name}: failures");
            assert_eq!(f.rejected_429, *rejected, "{name}: 429s");
            assert_eq!(f.p50, *p50, "{name}: p50");
            assert_eq!(f.max, *max, "{name}: max");
        }
    }

    fn renewal(started: u64, took: u64, failure: Option<&str>) -> Renewal {
        Renewal { started: ms(started), took: ms(took), failure: failure.map(String::from) }
    }

    #[test]
    fn lease_figures_find_the_longest_time_without_a_renewal() {
        let cases: &[(&str, Vec<Renewal>, u64, usize, usize, Duration, Duration)] = &[
            ("no renewal at all: the whole run", vec![], 5000, 0, 0, ms(0), ms(5000)),
            (
                "steady renewals: the period plus a renewal's time",
                vec![renewal(0, 10, None), renewal(2010, 20, None), renewal(4030, 10, None)],
                5000,
                3,
                0,
                ms(20),
                ms(2020),
            ),
            (
                "a failed renewal widens the gap",
                vec![renewal(0, 10, None), renewal(2010, 10000, Some("deadline")), renewal(14010, 10, None)],
                15000,
                2,
                1,
                ms(10000),
                ms(14010),
            ),
            ("the tail after the last success counts", vec![renewal(0, 10, None)], 9000, 1, 0, ms(10), ms(8990)),
        ];
        for (name, renewals, end, ok, failed, max, gap) in cases {
            let f = LeaseFigures::of(renewals, ms(*end));
            assert_eq!(f.ok, *ok, "{name}: ok");
            assert_eq!(f.failed, *failed, "{name}: failed");
            assert_eq!(f.max, *max, "{name}: max");
            assert_eq!(f.longest_gap, *gap, "{name}: longest gap");
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
