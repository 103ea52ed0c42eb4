use super::*;
use crate::flowcontrol::shuffle::tests::SplitMix;
use std::collections::{BTreeSet, HashSet};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn q(queues: u32, hand_size: u32, queue_length_limit: u32) -> Option<Queuing> {
    Some(Queuing { queues, hand_size, queue_length_limit })
}

fn ids(v: &[u64]) -> Vec<RequestId> {
    v.iter().map(|i| RequestId(*i)).collect()
}

/// The bookkeeping must agree with the requests themselves after every step.
fn check_invariants(qs: &QueueSet, name: &str) {
    let reqs = qs.requests();
    let executing: Vec<_> = reqs.iter().filter(|r| r.started.is_some()).collect();
    let waiting: Vec<_> = reqs.iter().filter(|r| r.started.is_none()).collect();
    assert_eq!(executing.len(), qs.executing(), "{name}: executing count");
    assert_eq!(waiting.len(), qs.waiting(), "{name}: waiting count");
    assert_eq!(executing.iter().map(|r| r.seats).sum::<u32>(), qs.seats_in_use(), "{name}: seats in use");
    assert_eq!(waiting.iter().map(|r| r.seats).sum::<u32>(), qs.waiting_seats(), "{name}: waiting seats");
    assert!(
        waiting.iter().all(|r| r.queue.is_some() && r.position.is_some()),
        "{name}: a waiting request has no place"
    );
    assert!(executing.iter().all(|r| r.position.is_none()), "{name}: an executing request holds a place");
    for view in qs.queues() {
        let in_queue = |r: &&&RequestView| r.queue == Some(view.index);
        let w: Vec<_> = waiting.iter().filter(in_queue).collect();
        let e: Vec<_> = executing.iter().filter(in_queue).collect();
        assert_eq!(w.len(), view.waiting, "{name}: queue {} waiting", view.index);
        assert_eq!(e.len(), view.executing, "{name}: queue {} executing", view.index);
        assert_eq!(
            w.iter().map(|r| r.seats).sum::<u32>(),
            view.waiting_seats,
            "{name}: queue {} waiting seats",
            view.index
        );
        assert_eq!(e.iter().map(|r| r.seats).sum::<u32>(), view.seats_in_use, "{name}: queue {} seats", view.index);
        let positions: BTreeSet<usize> = w.iter().filter_map(|r| r.position).collect();
        assert_eq!(positions, (0..view.waiting).collect(), "{name}: queue {} positions", view.index);
    }
    assert_eq!(qs.is_idle(), reqs.is_empty(), "{name}: idleness");
}

/// Right after a dispatch, the seats in use fit the limit, or one oversize request runs alone.
fn check_dispatch_fits(qs: &QueueSet, name: &str) {
    assert!(
        qs.seats_in_use() <= qs.concurrency_limit() || qs.executing() == 1,
        "{name}: {} seats in use by {} requests over limit {}",
        qs.seats_in_use(),
        qs.executing(),
        qs.concurrency_limit()
    );
}

// === scripted scenarios ===

enum Step {
    At(u64),
    Arrive { id: u64, hash: u64, seats: Seats, want: Arrival },
    Finish { id: u64, want: &'static [u64] },
    Cancel { id: u64, want: Option<&'static [u64]> },
    Expire { max_wait_ms: u64, timed_out: &'static [u64], dispatched: &'static [u64] },
    Reconfigure { queuing: Option<Queuing>, limit: Seats, want: Result<&'static [u64], &'static str> },
    QueueCount(usize),
    Counted(Totals),
}
use Step::{Arrive, At, Cancel, Counted, Expire, Finish, QueueCount, Reconfigure};

const D: Arrival = Arrival::Dispatched;
const fn queued(queue: u32) -> Arrival {
    Arrival::Queued { queue }
}
const fn rejected(r: RejectReason) -> Arrival {
    Arrival::Rejected(r)
}

struct Scenario {
    name: &'static str,
    queuing: Option<Queuing>,
    limit: Seats,
    steps: Vec<Step>,
}

fn scenarios() -> Vec<Scenario> {
    vec![
            Scenario {
                name: "reject type admits what fits and refuses the rest with concurrency-limit",
                queuing: None,
                limit: 3,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 9, seats: 2, want: D },
                    Arrive { id: 3, hash: 0, seats: 1, want: rejected(RejectReason::ConcurrencyLimit) },
                    Finish { id: 1, want: &[] },
                    Arrive { id: 4, hash: 0, seats: 1, want: D },
                    Finish { id: 2, want: &[] },
                    Finish { id: 4, want: &[] },
                    Counted(Totals { dispatched: 3, rejected: 1, timed_out: 0, cancelled: 0 }),
                ],
            },
            Scenario {
                name: "reject type runs a request wider than the limit only alone",
                queuing: None,
                limit: 3,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 0, seats: 5, want: rejected(RejectReason::ConcurrencyLimit) },
                    Finish { id: 1, want: &[] },
                    Arrive { id: 3, hash: 0, seats: 5, want: D },
                    Arrive { id: 4, hash: 0, seats: 1, want: rejected(RejectReason::ConcurrencyLimit) },
                    Finish { id: 3, want: &[] },
                ],
            },
            Scenario {
                name: "a full queue rejects with queue-full only while every seat is taken",
                queuing: q(2, 1, 2),
                limit: 2,
                steps: vec![
                    // hand size 1 of 2 queues: an even hash deals queue 0.
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 0, seats: 1, want: D },
                    Arrive { id: 3, hash: 0, seats: 1, want: queued(0) },
                    Arrive { id: 4, hash: 2, seats: 1, want: queued(0) },
                    Arrive { id: 5, hash: 4, seats: 1, want: rejected(RejectReason::QueueFull) },
                    Arrive { id: 6, hash: 1, seats: 1, want: queued(1) },
                    Finish { id: 1, want: &[6] },
                    Finish { id: 2, want: &[3] },
                    Arrive { id: 7, hash: 0, seats: 1, want: queued(0) },
                    Arrive { id: 8, hash: 0, seats: 1, want: rejected(RejectReason::QueueFull) },
                    Counted(Totals { dispatched: 4, rejected: 2, timed_out: 0, cancelled: 0 }),
                ],
            },
            Scenario {
                name: "expire times out requests that waited max_wait or longer",
                queuing: q(4, 1, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 1, seats: 1, want: queued(1) },
                    At(1000),
                    Arrive { id: 3, hash: 2, seats: 1, want: queued(2) },
                    At(2000),
                    Arrive { id: 4, hash: 3, seats: 1, want: queued(3) },
                    At(3000),
                    Expire { max_wait_ms: 2000, timed_out: &[2, 3], dispatched: &[] },
                    Expire { max_wait_ms: 2000, timed_out: &[], dispatched: &[] },
                    Finish { id: 1, want: &[4] },
                    Counted(Totals { dispatched: 2, rejected: 0, timed_out: 2, cancelled: 0 }),
                ],
            },
            Scenario {
                name: "expiring a blocked wide head dispatches what it held back",
                queuing: q(2, 1, 10),
                limit: 2,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 1, seats: 2, want: queued(1) },
                    At(8000),
                    Arrive { id: 3, hash: 0, seats: 1, want: queued(0) },
                    At(10_000),
                    Expire { max_wait_ms: 5000, timed_out: &[2], dispatched: &[3] },
                ],
            },
            Scenario {
                name: "cancel removes only waiting requests; unknown ids are no-ops",
                queuing: q(2, 1, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 1, seats: 1, want: queued(1) },
                    Arrive { id: 3, hash: 1, seats: 1, want: queued(1) },
                    Cancel { id: 2, want: Some(&[]) },
                    Cancel { id: 2, want: None },
                    Cancel { id: 1, want: None },
                    Cancel { id: 99, want: None },
                    Finish { id: 99, want: &[] },
                    Finish { id: 3, want: &[] },
                    Finish { id: 1, want: &[3] },
                    Finish { id: 1, want: &[] },
                    Counted(Totals { dispatched: 2, rejected: 0, timed_out: 0, cancelled: 1 }),
                ],
            },
            Scenario {
                name: "cancelling a blocked wide head dispatches what it held back",
                queuing: q(2, 1, 10),
                limit: 2,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 1, seats: 2, want: queued(1) },
                    At(8000),
                    Arrive { id: 3, hash: 0, seats: 1, want: queued(0) },
                    Cancel { id: 2, want: Some(&[3]) },
                ],
            },
            Scenario {
                name: "reconfigure up dispatches in fair order; down preempts nothing",
                queuing: q(2, 1, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 1, seats: 1, want: queued(1) },
                    Arrive { id: 3, hash: 0, seats: 1, want: queued(0) },
                    Arrive { id: 4, hash: 1, seats: 1, want: queued(1) },
                    Reconfigure { queuing: q(2, 1, 10), limit: 3, want: Ok(&[2, 3]) },
                    Reconfigure { queuing: q(2, 1, 10), limit: 1, want: Ok(&[]) },
                    Finish { id: 1, want: &[] },
                    Finish { id: 2, want: &[] },
                    Finish { id: 3, want: &[4] },
                ],
            },
            Scenario {
                name: "fewer queues: the surplus stops receiving, drains, then goes",
                queuing: q(4, 1, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 3, seats: 1, want: queued(3) },
                    Reconfigure { queuing: q(2, 1, 10), limit: 1, want: Ok(&[]) },
                    QueueCount(4),
                    Arrive { id: 3, hash: 3, seats: 1, want: queued(1) },
                    Finish { id: 1, want: &[3] },
                    Finish { id: 3, want: &[2] },
                    QueueCount(4),
                    Finish { id: 2, want: &[] },
                    QueueCount(2),
                ],
            },
            Scenario {
                name: "switching to reject keeps the queued requests and still dispatches them",
                queuing: q(2, 1, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Arrive { id: 2, hash: 1, seats: 1, want: queued(1) },
                    Reconfigure { queuing: None, limit: 1, want: Ok(&[]) },
                    Arrive { id: 3, hash: 1, seats: 1, want: rejected(RejectReason::ConcurrencyLimit) },
                    Finish { id: 1, want: &[2] },
                    Finish { id: 2, want: &[] },
                    QueueCount(0),
                    Arrive { id: 4, hash: 1, seats: 1, want: D },
                    Reconfigure { queuing: q(8, 2, 5), limit: 1, want: Ok(&[]) },
                    QueueCount(8),
                ],
            },
            Scenario {
                name: "an invalid reconfigure is refused and changes nothing",
                queuing: q(4, 2, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 1, want: D },
                    Reconfigure {
                        queuing: q(4, 5, 10),
                        limit: 9,
                        want: Err("the queuing configuration implies an invalid shuffle sharding config (queues is the deck size): handSize 5 is greater than deckSize 4"),
                    },
                    QueueCount(4),
                    // Hash 0 deals queues 0 and 1; both empty, the rotating start picks 1.
                    Arrive { id: 2, hash: 0, seats: 1, want: queued(1) },
                ],
            },
            Scenario {
                name: "a duplicate live id is refused and the original is untouched; zero seats count as one",
                queuing: q(2, 1, 10),
                limit: 1,
                steps: vec![
                    Arrive { id: 1, hash: 0, seats: 0, want: D },
                    Arrive { id: 1, hash: 1, seats: 1, want: rejected(RejectReason::ConcurrencyLimit) },
                    Arrive { id: 2, hash: 1, seats: 0, want: queued(1) },
                    Finish { id: 1, want: &[2] },
                    Arrive { id: 1, hash: 0, seats: 1, want: queued(0) },
                ],
            },
        ]
}

#[test]
fn scripted_scenarios() {
    for sc in scenarios() {
        let mut qs = QueueSet::new(sc.queuing, sc.limit).unwrap_or_else(|e| panic!("{}: {e}", sc.name));
        let mut now = Duration::ZERO;
        for (i, step) in sc.steps.iter().enumerate() {
            let name = format!("{} (step {i})", sc.name);
            match step {
                At(t) => now = ms(*t),
                Arrive { id, hash, seats, want } => {
                    let got = qs.arrive(now, RequestId(*id), *hash, *seats);
                    assert_eq!(got, *want, "{name}: arrive {id}");
                    if got == Arrival::Dispatched {
                        check_dispatch_fits(&qs, &name);
                    }
                }
                Finish { id, want } => {
                    let got = qs.finish(now, RequestId(*id));
                    assert_eq!(got, ids(want), "{name}: finish {id}");
                    if !got.is_empty() {
                        check_dispatch_fits(&qs, &name);
                    }
                }
                Cancel { id, want } => {
                    assert_eq!(qs.cancel(now, RequestId(*id)), want.map(ids), "{name}: cancel {id}");
                }
                Expire { max_wait_ms, timed_out, dispatched } => {
                    let got = qs.expire(now, ms(*max_wait_ms));
                    assert_eq!(got, Expired { timed_out: ids(timed_out), dispatched: ids(dispatched) }, "{name}");
                }
                Reconfigure { queuing, limit, want } => {
                    let got = qs.reconfigure(now, *queuing, *limit);
                    assert_eq!(
                        got.clone().map_err(|e| e.to_string()),
                        want.map(ids).map_err(str::to_string),
                        "{name}: reconfigure"
                    );
                    if got.is_ok() {
                        assert_eq!((qs.queuing(), qs.concurrency_limit()), (*queuing, *limit), "{name}");
                    }
                }
                QueueCount(n) => assert_eq!(qs.queues().len(), *n, "{name}: queue count"),
                Counted(t) => assert_eq!(qs.totals(), *t, "{name}: totals"),
            }
            check_invariants(&qs, &name);
        }
    }
}

// === simulated load on virtual time ===

/// Drives a queue set: requests run for a fixed service time once dispatched.
struct Sim {
    name: String,
    qs: QueueSet,
    now: Duration,
    service: HashMap<RequestId, Duration>,
    running: BTreeSet<(Duration, RequestId)>,
    order: Vec<RequestId>,
    started_at: HashMap<RequestId, Duration>,
}

impl Sim {
    fn new(name: &str, queuing: Option<Queuing>, limit: Seats) -> Sim {
        Sim {
            name: name.to_string(),
            qs: QueueSet::new(queuing, limit).unwrap(),
            now: Duration::ZERO,
            service: HashMap::new(),
            running: BTreeSet::new(),
            order: Vec::new(),
            started_at: HashMap::new(),
        }
    }

    fn started(&mut self, dispatched: Vec<RequestId>) {
        if !dispatched.is_empty() {
            check_dispatch_fits(&self.qs, &self.name);
        }
        for id in dispatched {
            let service = self.service[&id];
            self.running.insert((self.now + service, id));
            self.order.push(id);
            self.started_at.insert(id, self.now);
        }
    }

    fn arrive(&mut self, id: u64, hash: u64, seats: Seats, service: Duration) -> Arrival {
        let id = RequestId(id);
        self.service.insert(id, service);
        let got = self.qs.arrive(self.now, id, hash, seats);
        if got == Arrival::Dispatched {
            self.started(vec![id]);
        }
        check_invariants(&self.qs, &self.name);
        got
    }

    /// Finishes every request due by `until`, in time order, then sets the clock to `until`.
    fn run_until(&mut self, until: Duration) {
        while let Some(&(at, id)) = self.running.first() {
            if at > until {
                break;
            }
            self.running.pop_first();
            self.now = at;
            let dispatched = self.qs.finish(at, id);
            self.started(dispatched);
            check_invariants(&self.qs, &self.name);
        }
        self.now = self.now.max(until);
    }

    fn run_to_completion(&mut self) {
        // Every request finishes; bounded because each finish removes one.
        for _ in 0..100_000 {
            let Some(&(at, _)) = self.running.first() else { break };
            self.run_until(at);
        }
        assert!(self.qs.is_idle(), "{}: not idle at the end", self.name);
    }

    fn position(&self, id: u64) -> usize {
        self.order
            .iter()
            .position(|r| *r == RequestId(id))
            .unwrap_or_else(|| panic!("{}: request {id} never dispatched", self.name))
    }
}

#[test]
fn a_light_flow_is_served_interleaved_with_a_flood() {
    struct Case {
        name: &'static str,
        limit: Seats,
        flood: u64,
        light: u64,
        light_every_ms: u64,
        /// Most flood requests dispatched between a light request's arrival and its own.
        max_overtaking: usize,
        /// Longest a light request waits.
        max_wait: Duration,
    }
    let cases = [
        Case {
            name: "one seat",
            limit: 1,
            flood: 100,
            light: 10,
            light_every_ms: 30,
            max_overtaking: 1,
            max_wait: ms(20),
        },
        Case {
            name: "four seats",
            limit: 4,
            flood: 100,
            light: 10,
            light_every_ms: 20,
            max_overtaking: 4,
            max_wait: ms(10),
        },
        Case {
            name: "light flow bursts",
            limit: 2,
            flood: 100,
            light: 10,
            light_every_ms: 0,
            max_overtaking: 2,
            max_wait: ms(100),
        },
    ];
    for c in &cases {
        // Two queues, hand of one: the flood (even hash) and the light flow (odd) never share.
        let mut sim = Sim::new(c.name, q(2, 1, 1000), c.limit);
        for i in 0..c.flood {
            sim.arrive(1000 + i, 0, 1, ms(10));
        }
        let mut arrivals = Vec::new();
        for i in 0..c.light {
            sim.run_until(ms(5 + i * c.light_every_ms));
            arrivals.push((i, sim.order.len()));
            sim.arrive(i, 1, 1, ms(10));
        }
        sim.run_to_completion();
        for (i, dispatched_before) in arrivals {
            let pos = sim.position(i);
            let overtaking = sim.order[dispatched_before..pos].iter().filter(|r| r.0 >= 1000).count();
            let light_ahead = sim.order[dispatched_before..pos].iter().filter(|r| r.0 < 1000).count();
            assert!(
                overtaking <= c.max_overtaking + light_ahead,
                "{}: light request {i} overtaken by {overtaking} flood requests ({light_ahead} light ahead)",
                c.name
            );
        }
        // In (virtual) time: the wait is bounded, not growing with the flood.
        let mut worst = Duration::ZERO;
        for i in 0..c.light {
            let arrived = ms(5 + i * c.light_every_ms);
            worst = worst.max(sim.started_at[&RequestId(i)] - arrived);
        }
        assert!(worst <= c.max_wait, "{}: a light request waited {worst:?}", c.name);
    }
}

#[test]
fn equal_flows_get_equal_shares() {
    struct Case {
        name: &'static str,
        flows: u64,
        limit: Seats,
        per_flow: u64,
        service: Duration,
        /// Largest difference between two flows' dispatch counts at any point.
        max_lag: u64,
    }
    let cases = [
        Case { name: "four flows one seat", flows: 4, limit: 1, per_flow: 30, service: ms(10), max_lag: 1 },
        Case { name: "four flows two seats", flows: 4, limit: 2, per_flow: 30, service: ms(10), max_lag: 1 },
        Case {
            name: "eight flows three seats, service as estimated",
            flows: 8,
            limit: 3,
            per_flow: 20,
            service: ESTIMATED_SERVICE_DURATION,
            max_lag: 1,
        },
        // Dispatch charges the estimate G and corrects it only when a request finishes,
        // so with several seats a queue can run a little ahead of the others until then.
        Case {
            name: "eight flows three seats, service longer than estimated",
            flows: 8,
            limit: 3,
            per_flow: 20,
            service: ms(10),
            max_lag: 2,
        },
    ];
    for c in &cases {
        // One queue per flow (hand of one, hash = queue index); arrivals interleaved.
        let mut sim = Sim::new(c.name, q(c.flows as u32, 1, 1000), c.limit);
        for i in 0..c.per_flow {
            for flow in 0..c.flows {
                sim.arrive(flow * 1000 + i, flow, 1, c.service);
            }
        }
        sim.run_to_completion();
        let mut counts = vec![0u64; c.flows as usize];
        let mut worst = 0;
        for id in &sim.order {
            counts[(id.0 / 1000) as usize] += 1;
            let lag = counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0);
            worst = worst.max(lag);
            assert!(lag <= c.max_lag, "{}: shares {counts:?} differ by {lag}", c.name);
        }
        assert_eq!(worst, c.max_lag, "{}: the bound is the one reached", c.name);
        assert!(counts.iter().all(|n| *n == c.per_flow), "{}: final shares {counts:?}", c.name);
    }
}

#[test]
fn a_wide_request_waits_for_its_seats_and_is_not_overtaken() {
    struct Case {
        name: &'static str,
        limit: Seats,
        width: Seats,
        /// Most other requests executing when the wide one starts.
        max_beside: usize,
        /// Most flood requests dispatched after it arrived and before it started.
        max_overtaken: usize,
    }
    let cases = [
        Case { name: "three of four seats", limit: 4, width: 3, max_beside: 1, max_overtaken: 0 },
        Case { name: "all four seats", limit: 4, width: 4, max_beside: 0, max_overtaken: 0 },
        // Charged 6 × G, its virtual finish is later than the flood's next one.
        Case { name: "wider than the limit runs alone", limit: 4, width: 6, max_beside: 0, max_overtaken: 1 },
    ];
    for c in &cases {
        let mut sim = Sim::new(c.name, q(2, 1, 1000), c.limit);
        for i in 0..40 {
            sim.arrive(1000 + i, 0, 1, ms(10));
        }
        sim.run_until(ms(1));
        let before = sim.order.len();
        assert_eq!(sim.arrive(1, 1, c.width, ms(10)), queued(1), "{}: the wide request waits", c.name);
        // Run until it starts (bounded by the flood's length in time).
        let mut beside = None;
        for _ in 0..10_000 {
            let Some(&(at, _)) = sim.running.first() else { break };
            sim.run_until(at);
            if sim.order.contains(&RequestId(1)) {
                beside = Some(sim.qs.executing() - 1);
                break;
            }
        }
        let beside = beside.unwrap_or_else(|| panic!("{}: the wide request never started", c.name));
        assert!(beside <= c.max_beside, "{}: {beside} requests executing beside it", c.name);
        let overtaken = sim.position(1) - before;
        assert!(overtaken <= c.max_overtaken, "{}: {overtaken} flood requests overtook the wide one", c.name);
        sim.run_to_completion();
        assert_eq!(sim.order.len(), 41, "{}: everything ran", c.name);
    }
}

#[test]
fn one_flow_queues_at_most_hand_size_times_queue_length_limit() {
    struct Case {
        name: &'static str,
        queues: u32,
        hand: u32,
        qll: u32,
        sent: u64,
    }
    let cases = [
        Case { name: "8 queues hand 2 length 3", queues: 8, hand: 2, qll: 3, sent: 20 },
        Case { name: "64 queues hand 8 length 50", queues: 64, hand: 8, qll: 50, sent: 500 },
        Case { name: "one queue", queues: 1, hand: 1, qll: 5, sent: 10 },
        Case { name: "fewer sent than the cap", queues: 16, hand: 4, qll: 10, sent: 12 },
    ];
    for c in &cases {
        for hash in [0u64, 0xDEAD_BEEF, u64::MAX] {
            let name = format!("{} hash {hash:#x}", c.name);
            let mut qs = QueueSet::new(q(c.queues, c.hand, c.qll), 1).unwrap();
            let hand: HashSet<u32> = Dealer::new(c.queues, c.hand).unwrap().deal(hash).into_iter().collect();
            let mut full = 0;
            for id in 0..c.sent {
                match qs.arrive(Duration::ZERO, RequestId(id), hash, 1) {
                    Arrival::Dispatched => assert_eq!(id, 0, "{name}: only the first runs"),
                    Arrival::Queued { queue } => {
                        assert!(hand.contains(&queue), "{name}: queue {queue} not in hand")
                    }
                    Arrival::Rejected(r) => {
                        assert_eq!(r, RejectReason::QueueFull, "{name}");
                        full += 1;
                    }
                }
            }
            check_invariants(&qs, &name);
            let cap = u64::from(c.hand * c.qll);
            let want_waiting = (c.sent - 1).min(cap);
            assert_eq!(qs.waiting() as u64, want_waiting, "{name}: waiting");
            assert_eq!(full, c.sent - 1 - want_waiting, "{name}: rejected");
            assert!(qs.queues().iter().all(|v| v.waiting <= c.qll as usize), "{name}: a queue over its limit");
        }
    }
}

#[test]
fn virtual_time_advances_at_the_served_rate_per_active_queue() {
    // Two active queues, 3 seats demanded, limit 2: R advances 2/2 = 1 seat-second per second.
    let mut qs = QueueSet::new(q(2, 1, 10), 2).unwrap();
    qs.arrive(Duration::ZERO, RequestId(1), 0, 1);
    qs.arrive(Duration::ZERO, RequestId(2), 1, 2);
    qs.expire(ms(4000), ms(60_000));
    assert!((qs.virtual_time() - 4.0).abs() < 1e-9, "two queues: R = {}", qs.virtual_time());
    // A clock stepping back does not move R.
    qs.expire(ms(1000), ms(60_000));
    assert!((qs.virtual_time() - 4.0).abs() < 1e-9, "clock back: R = {}", qs.virtual_time());
    // Idle: R stands still.
    let mut idle = QueueSet::new(q(2, 1, 10), 2).unwrap();
    idle.expire(ms(4000), ms(1));
    assert_eq!(idle.virtual_time(), 0.0, "idle");
}

#[test]
fn random_operations_keep_the_books_and_never_lose_a_dispatch() {
    for seed in 0..8u64 {
        let name = format!("seed {seed}");
        let mut rng = SplitMix(seed);
        let mut qs = QueueSet::new(q(8, 3, 4), 4).unwrap();
        let mut now = Duration::ZERO;
        // What the caller believes: dispatched and not finished, and waiting.
        let mut running: BTreeSet<RequestId> = BTreeSet::new();
        let mut waiting: BTreeSet<RequestId> = BTreeSet::new();
        let mut next_id = 0u64;
        for step in 0..3000 {
            now += ms(rng.next() % 7);
            let pick =
                |set: &BTreeSet<RequestId>, r: u64| set.iter().nth((r % set.len().max(1) as u64) as usize).copied();
            let mut dispatched = Vec::new();
            match rng.next() % 10 {
                0..=4 => {
                    let id = RequestId(next_id);
                    next_id += 1;
                    let seats = [1, 1, 1, 2, 3, 6][(rng.next() % 6) as usize];
                    match qs.arrive(now, id, rng.next() % 5, seats) {
                        Arrival::Dispatched => dispatched.push(id),
                        Arrival::Queued { .. } => {
                            waiting.insert(id);
                        }
                        Arrival::Rejected(_) => {}
                    }
                }
                5..=7 => {
                    if let Some(id) = pick(&running, rng.next()) {
                        running.remove(&id);
                        dispatched = qs.finish(now, id);
                    }
                }
                8 => {
                    if let Some(id) = pick(&waiting, rng.next()) {
                        waiting.remove(&id);
                        dispatched = qs.cancel(now, id).unwrap_or_else(|| panic!("{name}: {id:?} was waiting"));
                    }
                }
                _ => {
                    if rng.next().is_multiple_of(2) {
                        let e = qs.expire(now, ms(40));
                        for id in &e.timed_out {
                            assert!(waiting.remove(id), "{name}: timed out {id:?} was not waiting");
                        }
                        dispatched = e.dispatched;
                    } else {
                        let queuing = [q(8, 3, 4), q(4, 2, 2), q(16, 4, 8), None][(rng.next() % 4) as usize];
                        dispatched = qs.reconfigure(now, queuing, (rng.next() % 6) as Seats + 1).unwrap();
                    }
                }
            }
            if !dispatched.is_empty() {
                check_dispatch_fits(&qs, &name);
            }
            for id in dispatched {
                assert!(waiting.remove(&id) || !running.contains(&id), "{name}: {id:?} dispatched twice");
                running.insert(id);
            }
            let view = qs.requests();
            let really_running: BTreeSet<RequestId> =
                view.iter().filter(|r| r.started.is_some()).map(|r| r.id).collect();
            let really_waiting: BTreeSet<RequestId> =
                view.iter().filter(|r| r.started.is_none()).map(|r| r.id).collect();
            assert_eq!(really_running, running, "{name} step {step}: executing set");
            assert_eq!(really_waiting, waiting, "{name} step {step}: waiting set");
            check_invariants(&qs, &format!("{name} step {step}"));
        }
    }
}
