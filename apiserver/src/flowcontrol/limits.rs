//! Concurrency limits of the priority levels: the nominal split of the server's seats, and
//! the periodic re-allocation that lets busy levels borrow what idle ones can lend.
//!
//! - Nominal: `NominalCL = ceil(ServerCL · NCS / ΣNCS)` over every level (exempt ones
//!   included), `LendableCL = round(NominalCL · lendablePercent / 100)`,
//!   `BorrowingCL = round(NominalCL · borrowingLimitPercent / 100)` (unset: ServerCL). A
//!   level's current limit stays within `[NominalCL − LendableCL, NominalCL + BorrowingCL]`.
//! - Every [`BORROWING_ADJUSTMENT_PERIOD`] the levels share `ΣNominalCL` again: each gets
//!   at least its lower bound raised to the seats it actually demanded (capped at its
//!   nominal limit), and the rest goes by one common "fair fraction" of each level's
//!   smoothed demand, within the bounds ([`allocate`]). Exempt levels take part with their
//!   demand, so what they do not use is lent to the others.
//! - [`DemandTracker`] measures one level's seat demand (executing + waiting seats) over
//!   each period: high watermark, time-weighted average and deviation, and the smoothed
//!   envelope that decays with a half-life of about five minutes.

use std::time::Duration;

/// How often the current limits are re-allocated.
pub const BORROWING_ADJUSTMENT_PERIOD: Duration = Duration::from_secs(10);

/// Per-period decay of the smoothed seat demand (half-life about 5 minutes at 10 s periods).
pub const SEAT_DEMAND_SMOOTHING_COEFFICIENT: f64 = 0.977;

/// Targets below this are raised to it, so a level with no demand still has a share.
const MIN_TARGET: f64 = 0.001;

/// What the allocation needs of one PriorityLevelConfiguration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelConfig {
    pub name: String,
    pub exempt: bool,
    /// `nominalConcurrencyShares` (exempt levels: 0 unless set).
    pub nominal_shares: u32,
    /// `lendablePercent` (0 when unset).
    pub lendable_percent: u32,
    /// `borrowingLimitPercent`; `None` = unlimited. Exempt levels never set it.
    pub borrowing_limit_percent: Option<u32>,
}

/// A level's limits in seats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelLimits {
    /// NominalCL.
    pub nominal: u32,
    /// LendableCL.
    pub lendable: u32,
    /// The least the current limit may be: NominalCL − LendableCL.
    pub lower: u32,
    /// The most the current limit may be: NominalCL + BorrowingCL, where an unlimited
    /// BorrowingCL counts as the whole server concurrency limit.
    pub upper: u32,
}

impl LevelLimits {
    /// The current limit of a level that has just appeared, before any re-allocation:
    /// its nominal limit less half of what it may lend.
    pub fn initial(&self) -> u32 {
        self.nominal.saturating_sub(self.lendable / 2)
    }
}

fn to_seats(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else if x >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        x as u32
    }
}

/// The nominal, lendable and bounding limits of each level, in order.
pub fn nominal_limits(server_concurrency: u32, levels: &[LevelConfig]) -> Vec<LevelLimits> {
    let share_sum: f64 = levels.iter().map(|l| f64::from(l.nominal_shares)).sum();
    levels
        .iter()
        .map(|level| {
            let nominal = if share_sum > 0.0 {
                to_seats((f64::from(server_concurrency) * f64::from(level.nominal_shares) / share_sum).ceil())
            } else {
                0
            };
            let percent_of = |p: u32| to_seats((f64::from(nominal) * f64::from(p) / 100.0).round());
            let lendable = percent_of(level.lendable_percent).min(nominal);
            let borrowing = match (level.exempt, level.borrowing_limit_percent) {
                (false, Some(p)) => percent_of(p),
                _ => server_concurrency,
            };
            LevelLimits { nominal, lendable, lower: nominal - lendable, upper: nominal.saturating_add(borrowing) }
        })
        .collect()
}

/// One level's seat demand over the last period.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SeatDemand {
    /// The most seats demanded at any moment.
    pub high_watermark: f64,
    /// Time-weighted average.
    pub average: f64,
    /// Time-weighted standard deviation.
    pub std_dev: f64,
    /// `max(avg + stddev, c · previous + (1 − c) · (avg + stddev))`, c = [`SEAT_DEMAND_SMOOTHING_COEFFICIENT`].
    pub smoothed: f64,
}

/// The outcome of one re-allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// Each level's current limit, in order.
    pub limits: Vec<u32>,
    /// The common fraction of each level's target it was given (where no bound applied).
    pub fair_frac: f64,
}

struct Item {
    lower: f64,
    upper: f64,
    target: f64,
}

impl Item {
    fn at(&self, frac: f64) -> f64 {
        (frac * self.target).clamp(self.lower, self.upper)
    }
}

/// Re-allocates the levels' current limits from their limits and last period's demand
/// (a missing demand counts as none). The limits sum to `ΣNominalCL` up to rounding; each
/// lies in `[lower, upper]`. Each level's floor is `max(lower, min(nominal, high
/// watermark))`, its target `max(floor, smoothed)`; the levels get one common fraction of
/// their targets, clamped to their floors and uppers.
pub fn allocate(limits: &[LevelLimits], demand: &[SeatDemand]) -> Allocation {
    let required: f64 = limits.iter().map(|l| f64::from(l.nominal)).sum();
    let items: Vec<Item> = limits
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let d = demand.get(i).copied().unwrap_or_default();
            let hw = if d.high_watermark.is_finite() { d.high_watermark.max(0.0) } else { 0.0 };
            let smoothed = if d.smoothed.is_finite() { d.smoothed } else { 0.0 };
            let lower = f64::from(l.lower).max(f64::from(l.nominal).min(hw));
            Item { lower, upper: f64::from(l.upper), target: lower.max(smoothed).max(MIN_TARGET) }
        })
        .collect();
    let fair_frac = fair_fraction(&items, required);
    Allocation { limits: items.iter().map(|item| to_seats(item.at(fair_frac).round())).collect(), fair_frac }
}

/// The fraction f with Σ clamp(f · target, lower, upper) = required. The sum is continuous
/// and non-decreasing in f and linear between the points where some item reaches a bound,
/// so the answer lies on the segment where the sum first reaches `required`.
fn fair_fraction(items: &[Item], required: f64) -> f64 {
    let sum_at = |f: f64| items.iter().map(|item| item.at(f)).sum::<f64>();
    let mut points: Vec<f64> =
        items.iter().flat_map(|item| [item.lower / item.target, item.upper / item.target]).collect();
    points.sort_by(f64::total_cmp);
    points.dedup();
    let (Some(&first), Some(&last)) = (points.first(), points.last()) else {
        return 0.0;
    };
    if sum_at(first) >= required {
        // Every item at its floor already covers the requirement.
        return first;
    }
    let mut prev = first;
    let mut prev_sum = sum_at(first);
    for &point in &points[1..] {
        let sum = sum_at(point);
        if sum >= required {
            return if sum > prev_sum {
                prev + (required - prev_sum) * (point - prev) / (sum - prev_sum)
            } else {
                point
            };
        }
        prev = point;
        prev_sum = sum;
    }
    // Every item at its upper bound still falls short.
    last
}

/// Measures one level's seat demand, a piecewise-constant value, over each period.
#[derive(Clone, Debug)]
pub struct DemandTracker {
    last: Duration,
    seats: f64,
    elapsed: f64,
    integral: f64,
    integral_sq: f64,
    max: f64,
    smoothed: f64,
    average: f64,
    std_dev: f64,
}

impl DemandTracker {
    /// Starts measuring at `now`, with no demand.
    pub fn new(now: Duration) -> Self {
        DemandTracker {
            last: now,
            seats: 0.0,
            elapsed: 0.0,
            integral: 0.0,
            integral_sq: 0.0,
            max: 0.0,
            smoothed: 0.0,
            average: 0.0,
            std_dev: 0.0,
        }
    }

    fn advance(&mut self, now: Duration) {
        // A clock that steps back adds no time.
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.elapsed += dt;
        self.integral += self.seats * dt;
        self.integral_sq += self.seats * self.seats * dt;
    }

    /// The demand (executing + waiting seats) changed to `seats` at `now`.
    pub fn record(&mut self, now: Duration, seats: u32) {
        self.advance(now);
        self.seats = f64::from(seats);
        self.max = self.max.max(self.seats);
    }

    /// Closes the period at `now`: its demand figures, then a new period starts from the
    /// current demand. A period of no length reports its high watermark and keeps the
    /// previous average, deviation and smoothed figures.
    pub fn take(&mut self, now: Duration) -> SeatDemand {
        self.advance(now);
        let high_watermark = self.max;
        if self.elapsed > 0.0 {
            let average = self.integral / self.elapsed;
            let variance = self.integral_sq / self.elapsed - average * average;
            // Rounding can make a zero variance slightly negative.
            let std_dev = if variance > 0.0 { variance.sqrt() } else { 0.0 };
            let envelope = average + std_dev;
            self.smoothed = envelope.max(
                SEAT_DEMAND_SMOOTHING_COEFFICIENT * self.smoothed
                    + (1.0 - SEAT_DEMAND_SMOOTHING_COEFFICIENT) * envelope,
            );
            self.average = average;
            self.std_dev = std_dev;
        }
        self.elapsed = 0.0;
        self.integral = 0.0;
        self.integral_sq = 0.0;
        self.max = self.seats;
        SeatDemand { high_watermark, average: self.average, std_dev: self.std_dev, smoothed: self.smoothed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowcontrol::shuffle::tests::SplitMix;

    fn level(name: &str, exempt: bool, shares: u32, lendable: u32, borrowing: Option<u32>) -> LevelConfig {
        LevelConfig {
            name: name.to_string(),
            exempt,
            nominal_shares: shares,
            lendable_percent: lendable,
            borrowing_limit_percent: borrowing,
        }
    }

    /// The priority levels kube-apiserver creates at start (shares, lendable %).
    fn bootstrap_levels() -> Vec<LevelConfig> {
        vec![
            level("catch-all", false, 5, 0, None),
            level("exempt", true, 0, 0, None),
            level("system", false, 30, 33, None),
            level("node-high", false, 40, 25, None),
            level("leader-election", false, 10, 0, None),
            level("workload-high", false, 40, 50, None),
            level("workload-low", false, 100, 90, None),
            level("global-default", false, 20, 50, None),
        ]
    }

    fn lim(nominal: u32, lendable: u32, upper: u32) -> LevelLimits {
        LevelLimits { nominal, lendable, lower: nominal - lendable, upper }
    }

    #[test]
    fn nominal_limits_split_the_server_concurrency_by_shares() {
        struct Case {
            name: &'static str,
            server: u32,
            levels: Vec<LevelConfig>,
            want: Vec<LevelLimits>,
        }
        let cases = [
            Case {
                name: "bootstrap levels at 600 seats",
                server: 600,
                levels: bootstrap_levels(),
                want: vec![
                    lim(13, 0, 613),
                    lim(0, 0, 600),
                    lim(74, 24, 674), // 24.42
                    lim(98, 25, 698), // 24.5 rounds away from zero
                    lim(25, 0, 625),
                    lim(98, 49, 698),
                    lim(245, 221, 845), // 220.5
                    lim(49, 25, 649),   // 24.5
                ],
            },
            Case {
                name: "borrowing limit percent bounds the upper limit",
                server: 100,
                levels: vec![level("a", false, 1, 50, Some(50)), level("b", false, 3, 100, Some(0))],
                want: vec![lim(25, 13, 38), lim(75, 75, 75)],
            },
            Case {
                name: "an explicit zero share gets no nominal seats but may borrow",
                server: 100,
                levels: vec![level("zero", false, 0, 0, None), level("b", false, 30, 0, None)],
                want: vec![lim(0, 0, 100), lim(100, 0, 200)],
            },
            Case {
                name: "an exempt level with shares lends and is never capped by a borrowing percent",
                server: 100,
                levels: vec![level("exempt", true, 10, 100, Some(5)), level("b", false, 30, 0, None)],
                want: vec![lim(25, 25, 125), lim(75, 0, 175)],
            },
            Case {
                name: "ceil makes the nominal limits sum to a little more than the server's",
                server: 10,
                levels: vec![
                    level("a", false, 1, 0, None),
                    level("b", false, 1, 0, None),
                    level("c", false, 1, 0, None),
                ],
                want: vec![lim(4, 0, 14), lim(4, 0, 14), lim(4, 0, 14)],
            },
            Case {
                name: "all shares zero gives every level zero",
                server: 600,
                levels: vec![level("a", false, 0, 0, None), level("b", true, 0, 0, None)],
                want: vec![lim(0, 0, 600), lim(0, 0, 600)],
            },
            Case { name: "no levels", server: 600, levels: vec![], want: vec![] },
        ];
        for c in &cases {
            assert_eq!(nominal_limits(c.server, &c.levels), c.want, "{}", c.name);
        }
    }

    #[test]
    fn a_new_level_starts_at_nominal_less_half_its_lendable() {
        let cases = [
            ("nothing lendable", lim(13, 0, 613), 13),
            ("221 lendable", lim(245, 221, 845), 135),
            ("odd", lim(5, 3, 9), 4),
        ];
        for (name, l, want) in cases {
            assert_eq!(l.initial(), want, "{name}");
        }
    }

    fn demand(high_watermark: f64, smoothed: f64) -> SeatDemand {
        SeatDemand { high_watermark, average: smoothed, std_dev: 0.0, smoothed }
    }

    #[test]
    fn allocate_shares_the_nominal_sum_by_demand_within_bounds() {
        struct Case {
            name: &'static str,
            limits: Vec<LevelLimits>,
            demand: Vec<SeatDemand>,
            want: Vec<u32>,
        }
        let bootstrap = nominal_limits(600, &bootstrap_levels());
        let cases = [
            Case {
                // No demand anywhere: every target is its lower bound, so the 602 nominal seats
                // go in proportion to the lower bounds (fair fraction 602/258).
                name: "all idle: proportional to the lower bounds",
                limits: bootstrap.clone(),
                demand: vec![SeatDemand::default(); 8],
                want: vec![30, 0, 117, 170, 58, 114, 56, 56],
            },
            Case {
                name: "a missing demand counts as idle",
                limits: bootstrap.clone(),
                demand: vec![],
                want: vec![30, 0, 117, 170, 58, 114, 56, 56],
            },
            Case {
                name: "one busy level borrows up to its upper bound",
                limits: vec![lim(10, 0, 15), lim(10, 10, 20)],
                demand: vec![demand(100.0, 100.0), SeatDemand::default()],
                want: vec![15, 5],
            },
            Case {
                name: "unlimited borrowing takes every lendable seat",
                limits: vec![lim(10, 0, 30), lim(10, 10, 30)],
                demand: vec![demand(100.0, 100.0), SeatDemand::default()],
                want: vec![20, 0],
            },
            Case {
                name: "spare seats follow demand; a level's floor stays its own",
                limits: vec![lim(10, 0, 50), lim(10, 0, 50), lim(20, 20, 60)],
                demand: vec![demand(30.0, 30.0), demand(10.0, 10.0), SeatDemand::default()],
                want: vec![30, 10, 0],
            },
            Case {
                name: "recent demand protects lendable seats up to the nominal limit",
                limits: vec![lim(10, 0, 50), lim(10, 10, 50)],
                demand: vec![demand(100.0, 100.0), demand(6.0, 1.0)],
                want: vec![14, 6],
            },
            Case {
                name: "an idle exempt level lends its lendable seats",
                limits: vec![lim(25, 25, 125), lim(75, 0, 175)],
                demand: vec![SeatDemand::default(), demand(200.0, 200.0)],
                want: vec![0, 100],
            },
            Case {
                name: "a busy exempt level keeps its seats",
                limits: vec![lim(25, 25, 125), lim(75, 0, 175)],
                demand: vec![demand(25.0, 25.0), demand(200.0, 200.0)],
                want: vec![25, 75],
            },
            Case {
                name: "nothing lendable: every level stays at nominal",
                limits: vec![lim(13, 0, 613), lim(25, 0, 625)],
                demand: vec![demand(500.0, 500.0), SeatDemand::default()],
                want: vec![13, 25],
            },
            Case { name: "no levels", limits: vec![], demand: vec![], want: vec![] },
        ];
        for c in &cases {
            let got = allocate(&c.limits, &c.demand);
            assert_eq!(got.limits, c.want, "{} (fair fraction {})", c.name, got.fair_frac);
        }
    }

    #[test]
    fn allocate_keeps_bounds_and_the_sum_for_any_demand() {
        let mut rng = SplitMix(42);
        for round in 0..500 {
            let name = format!("round {round}");
            let server = (rng.next() % 1000) as u32 + 1;
            let levels: Vec<LevelConfig> = (0..(rng.next() % 8 + 1))
                .map(|i| {
                    let borrowing = match rng.next() % 3 {
                        0 => None,
                        _ => Some((rng.next() % 200) as u32),
                    };
                    level(&format!("l{i}"), i == 0, (rng.next() % 100) as u32, (rng.next() % 101) as u32, borrowing)
                })
                .collect();
            let limits = nominal_limits(server, &levels);
            let demand: Vec<SeatDemand> = limits
                .iter()
                .map(|_| {
                    let hw = (rng.next() % 2000) as f64 / 3.0;
                    demand(hw, hw * (rng.next() % 100) as f64 / 100.0)
                })
                .collect();
            let got = allocate(&limits, &demand).limits;
            assert_eq!(got.len(), limits.len(), "{name}");
            for (l, a) in limits.iter().zip(&got) {
                assert!(l.lower <= *a && *a <= l.upper, "{name}: {a} outside [{}, {}]", l.lower, l.upper);
            }
            let want: i64 = limits.iter().map(|l| i64::from(l.nominal)).sum();
            let sum: i64 = got.iter().map(|a| i64::from(*a)).sum();
            // Each level's share is rounded once: the sum is off by at most half a seat each.
            assert!((sum - want).abs() * 2 <= got.len() as i64, "{name}: sum {sum} for {want} nominal seats");
        }
    }

    #[test]
    fn demand_tracker_reports_watermark_moments_and_smoothing() {
        let s = Duration::from_secs;
        struct Case {
            name: &'static str,
            /// (seconds, seats) changes, then the period closes at `close`.
            changes: Vec<(u64, u32)>,
            close: u64,
            want: SeatDemand,
        }
        let cases = [
            Case {
                name: "constant demand",
                changes: vec![(0, 5)],
                close: 10,
                want: SeatDemand { high_watermark: 5.0, average: 5.0, std_dev: 0.0, smoothed: 5.0 },
            },
            Case {
                name: "half idle, half at ten",
                changes: vec![(5, 10)],
                close: 10,
                want: SeatDemand { high_watermark: 10.0, average: 5.0, std_dev: 5.0, smoothed: 10.0 },
            },
            Case {
                name: "a brief spike sets the watermark",
                changes: vec![(0, 1), (4, 50), (4, 1)],
                close: 10,
                want: SeatDemand { high_watermark: 50.0, average: 1.0, std_dev: 0.0, smoothed: 1.0 },
            },
            Case {
                name: "an empty period keeps the previous figures",
                changes: vec![],
                close: 0,
                want: SeatDemand { high_watermark: 0.0, average: 0.0, std_dev: 0.0, smoothed: 0.0 },
            },
        ];
        for c in &cases {
            let mut t = DemandTracker::new(Duration::ZERO);
            for (at, seats) in &c.changes {
                t.record(s(*at), *seats);
            }
            let got = t.take(s(c.close));
            let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
            assert!(
                close(got.high_watermark, c.want.high_watermark)
                    && close(got.average, c.want.average)
                    && close(got.std_dev, c.want.std_dev)
                    && close(got.smoothed, c.want.smoothed),
                "{}: got {got:?}, want {:?}",
                c.name,
                c.want
            );
        }
    }

    #[test]
    fn smoothed_demand_decays_with_a_five_minute_half_life_and_rises_at_once() {
        let mut t = DemandTracker::new(Duration::ZERO);
        let mut now = Duration::ZERO;
        t.record(now, 8);
        now += BORROWING_ADJUSTMENT_PERIOD;
        assert_eq!(t.take(now).smoothed, 8.0, "rises at once");
        t.record(now, 0);
        let mut last = SeatDemand::default();
        for _ in 0..30 {
            now += BORROWING_ADJUSTMENT_PERIOD;
            last = t.take(now);
        }
        // 30 periods of 10 s: 8 · 0.977^30 ≈ 3.97, about half.
        assert!((last.smoothed - 8.0 * 0.977f64.powi(30)).abs() < 1e-9, "decayed to {}", last.smoothed);
        assert!((3.5..4.5).contains(&last.smoothed), "about half after five minutes: {}", last.smoothed);
        assert_eq!((last.high_watermark, last.average), (0.0, 0.0), "idle period");
        // A period starts from the current demand: its watermark is at least that.
        t.record(now, 3);
        assert_eq!(t.take(now + BORROWING_ADJUSTMENT_PERIOD).high_watermark, 3.0, "carried demand");
    }
}
