//! One priority level's queues: shuffle-sharded fair queuing on virtual time, counted in seats.
//!
//! A `QueueSet` is a pure state machine. The caller owns the clock and the waiting: every
//! method takes `now` (a `Duration` since an origin the caller picks) and returns which
//! requests may now execute or were turned away; the caller wakes or answers them.
//!
//! The model, as kube-apiserver's fair queuing for server requests:
//! - A request belongs to a flow; the flow's hash deals a hand of queues
//!   ([`super::shuffle::Dealer`]) and the request joins the one with the least waiting
//!   work. When every seat is taken and that queue already holds `queue_length_limit`
//!   requests, the request is rejected (`queue-full`).
//! - Virtual time R (seat-seconds per queue) advances at
//!   `min(seats demanded, limit) / active queues` per real second. Each queue keeps the R
//!   at which its next request may start; dispatching a request charges it
//!   `seats × G` (G = [`ESTIMATED_SERVICE_DURATION`]) and finishing corrects the charge
//!   with the real service time. A queue's next start is never earlier than its oldest
//!   waiting request's arrival R.
//! - Dispatch picks, round-robin from after the last queue served, the queue whose head
//!   would finish first in virtual time; if that head does not fit in the free seats,
//!   nothing is dispatched until seats free up (so a wide request is not overtaken forever).
//!   A request wider than the whole limit runs only when nothing else executes.
//! - Without queuing (limit response `Reject`) a request runs at once if it fits, else is
//!   rejected (`concurrency-limit`).
//! - When the number of queues shrinks, the surplus queues stop receiving requests and are
//!   dropped once drained, so no waiting request is lost by a configuration change.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use super::shuffle::{Dealer, DealerError};

/// A count of seats (units of concurrency).
pub type Seats = u32;

/// The service time charged per seat when a request is dispatched (upstream's G); the real
/// service time replaces it when the request finishes.
pub const ESTIMATED_SERVICE_DURATION: Duration = Duration::from_millis(3);

/// The queuing parameters of a `Queue`-type priority level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queuing {
    /// Number of queues (the shuffle-sharding deck).
    pub queues: u32,
    /// Queues dealt to each flow.
    pub hand_size: u32,
    /// Requests a queue may hold while every seat is taken.
    pub queue_length_limit: u32,
}

/// A request's identity, assigned by the caller and unique among live requests.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Why a request was turned away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Every seat was taken and the chosen queue was full.
    QueueFull,
    /// No queuing, and the request did not fit in the free seats.
    ConcurrencyLimit,
    /// The request waited in its queue longer than allowed.
    TimeOut,
    /// The client gave up while the request waited.
    Cancelled,
}

impl RejectReason {
    /// The `reason` label value of `apiserver_flowcontrol_rejected_requests_total`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::QueueFull => "queue-full",
            RejectReason::ConcurrencyLimit => "concurrency-limit",
            RejectReason::TimeOut => "time-out",
            RejectReason::Cancelled => "cancelled",
        }
    }
}

/// What became of an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// It may execute now; call [`QueueSet::finish`] when it is done.
    Dispatched,
    /// It waits in the given queue; a later `finish`, `reconfigure`, `cancel` or `expire`
    /// lists it when it may execute.
    Queued { queue: u32 },
    /// It was turned away.
    Rejected(RejectReason),
}

/// What [`QueueSet::expire`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Requests removed from their queues because they waited too long (`time-out`).
    pub timed_out: Vec<RequestId>,
    /// Requests that may execute now because the removed ones no longer block them.
    pub dispatched: Vec<RequestId>,
}

/// One queue, for the debug dumps.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueView {
    pub index: u32,
    pub waiting: usize,
    pub executing: usize,
    pub seats_in_use: Seats,
    /// Virtual time (seat-seconds) at which the queue's next request may start.
    pub next_dispatch_r: f64,
    pub waiting_seats: Seats,
}

/// One live request, for the debug dumps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestView {
    pub id: RequestId,
    /// The queue it joined; `None` when it was dispatched without queuing (Reject type).
    pub queue: Option<u32>,
    /// Its place in the queue (0 = head) while it waits; `None` while it executes.
    pub position: Option<usize>,
    pub arrival: Duration,
    pub seats: Seats,
    pub started: Option<Duration>,
}

/// Lifetime counts of what this queue set decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub dispatched: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub cancelled: u64,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<RequestId>,
    waiting_seats: u64,
    executing: usize,
    seats_in_use: u64,
    next_dispatch_r: f64,
}

impl Queue {
    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }
}

#[derive(Debug)]
struct Request {
    queue: Option<u32>,
    arrival: Duration,
    arrival_r: f64,
    seats: u64,
    started: Option<Duration>,
}

/// The queues and seats of one priority level.
#[derive(Debug)]
pub struct QueueSet {
    queuing: Option<Queuing>,
    dealer: Option<Dealer>,
    limit: Seats,
    /// May be longer than `queuing.queues` while surplus queues drain.
    queues: Vec<Queue>,
    requests: BTreeMap<RequestId, Request>,
    /// Virtual time, in seat-seconds per queue.
    current_r: f64,
    last_now: Option<Duration>,
    /// The queue dispatched from last; the next search starts after it.
    robin_index: usize,
    /// Arrivals so far; rotates where the search of a hand starts, so overlapping hands
    /// do not always favour the same queue on ties.
    enqueues: u64,
    total_waiting: usize,
    total_waiting_seats: u64,
    total_executing: usize,
    seats_in_use: u64,
    totals: Totals,
}

fn seats_out(x: u64) -> Seats {
    Seats::try_from(x).unwrap_or(Seats::MAX)
}

/// The work charged for a request of `seats` seats, in seat-seconds.
fn estimated_work(seats: u64) -> f64 {
    seats as f64 * ESTIMATED_SERVICE_DURATION.as_secs_f64()
}

/// A queuing configuration whose queues and hand size cannot shuffle-shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the queuing configuration implies an invalid shuffle sharding config (queues is the deck size): {0}")]
pub struct InvalidQueuing(#[source] pub DealerError);

fn dealer_for(queuing: Option<Queuing>) -> Result<Option<Dealer>, InvalidQueuing> {
    match queuing {
        None => Ok(None),
        Some(q) => Dealer::new(q.queues, q.hand_size).map(Some).map_err(InvalidQueuing),
    }
}

impl QueueSet {
    /// A queue set with the given queuing (`None` = limit response `Reject`) and limit.
    pub fn new(queuing: Option<Queuing>, concurrency_limit: Seats) -> Result<Self, InvalidQueuing> {
        let dealer = dealer_for(queuing)?;
        let mut qs = QueueSet {
            queuing,
            dealer,
            limit: concurrency_limit,
            queues: Vec::new(),
            requests: BTreeMap::new(),
            current_r: 0.0,
            last_now: None,
            robin_index: 0,
            enqueues: 0,
            total_waiting: 0,
            total_waiting_seats: 0,
            total_executing: 0,
            seats_in_use: 0,
            totals: Totals::default(),
        };
        qs.grow_queues();
        Ok(qs)
    }

    /// Changes the queuing and/or the limit (a configuration change or a borrowing
    /// adjustment). Executing requests are never preempted; waiting requests stay where
    /// they are (surplus queues drain before they are dropped, and with no queuing left
    /// they are still dispatched in fair order). Returns the requests that may execute now.
    /// An invalid queuing configuration changes nothing.
    pub fn reconfigure(
        &mut self,
        now: Duration,
        queuing: Option<Queuing>,
        concurrency_limit: Seats,
    ) -> Result<Vec<RequestId>, InvalidQueuing> {
        let dealer = dealer_for(queuing)?;
        self.sync_time(now);
        self.queuing = queuing;
        self.dealer = dealer;
        self.limit = concurrency_limit;
        self.grow_queues();
        self.trim_queues();
        Ok(self.dispatch_as_much_as_possible(now))
    }

    /// A request arrives. Its flow's hash picks the queues it may join and it joins the one
    /// with the least waiting work; it is dispatched at once if fair queuing allows.
    /// `seats` below 1 counts as 1. A duplicate of a live id is refused
    /// (`concurrency-limit`) and leaves the live request alone.
    pub fn arrive(&mut self, now: Duration, id: RequestId, flow_hash: u64, seats: Seats) -> Arrival {
        self.sync_time(now);
        let seats = u64::from(seats.max(1));
        if self.requests.contains_key(&id) {
            self.totals.rejected += 1;
            return Arrival::Rejected(RejectReason::ConcurrencyLimit);
        }
        let (Some(queuing), Some(dealer)) = (self.queuing, self.dealer) else {
            if !self.can_accommodate(seats) {
                self.totals.rejected += 1;
                return Arrival::Rejected(RejectReason::ConcurrencyLimit);
            }
            self.requests.insert(
                id,
                Request { queue: None, arrival: now, arrival_r: self.current_r, seats, started: Some(now) },
            );
            self.total_executing += 1;
            self.seats_in_use += seats;
            self.totals.dispatched += 1;
            return Arrival::Dispatched;
        };

        let index = self.shuffle_shard(&dealer, flow_hash);
        let Some(queue) = self.queues.get_mut(index) else {
            // Unreachable: the dealer only deals indices below `queuing.queues`, and there
            // are at least that many queues. Refuse rather than lose track of the request.
            self.totals.rejected += 1;
            return Arrival::Rejected(RejectReason::QueueFull);
        };
        if self.seats_in_use >= u64::from(self.limit) && queue.waiting.len() >= queuing.queue_length_limit as usize {
            self.totals.rejected += 1;
            return Arrival::Rejected(RejectReason::QueueFull);
        }
        if queue.is_idle() {
            queue.next_dispatch_r = self.current_r;
        }
        queue.waiting.push_back(id);
        queue.waiting_seats += seats;
        self.total_waiting += 1;
        self.total_waiting_seats += seats;
        self.requests.insert(
            id,
            Request { queue: Some(index as u32), arrival: now, arrival_r: self.current_r, seats, started: None },
        );
        self.bound_next_dispatch(index);
        let dispatched = self.dispatch_as_much_as_possible(now);
        // Only the newcomer can be dispatched here: before it arrived, either nothing waited,
        // every seat was taken, or the fairest head did not fit, and the arrival changes none
        // of that for the requests already waiting.
        if dispatched.contains(&id) {
            Arrival::Dispatched
        } else {
            Arrival::Queued { queue: index as u32 }
        }
    }

    /// An executing request finished: its seats are freed, its queue's charge corrected
    /// with the real service time, and whatever now fits is dispatched in fair order.
    /// Returns the newly dispatched ids. Unknown or still-waiting ids change nothing.
    pub fn finish(&mut self, now: Duration, id: RequestId) -> Vec<RequestId> {
        self.sync_time(now);
        if !matches!(self.requests.get(&id), Some(Request { started: Some(_), .. })) {
            return Vec::new();
        }
        let Some(req) = self.requests.remove(&id) else {
            return Vec::new();
        };
        self.total_executing = self.total_executing.saturating_sub(1);
        self.seats_in_use = self.seats_in_use.saturating_sub(req.seats);
        if let Some(index) = req.queue.map(|q| q as usize) {
            if let Some(queue) = self.queues.get_mut(index) {
                queue.executing = queue.executing.saturating_sub(1);
                queue.seats_in_use = queue.seats_in_use.saturating_sub(req.seats);
                let served = now.saturating_sub(req.started.unwrap_or(now)).as_secs_f64();
                // Dispatch charged seats × G; replace that with seats × the real time.
                queue.next_dispatch_r += req.seats as f64 * (served - ESTIMATED_SERVICE_DURATION.as_secs_f64());
                self.bound_next_dispatch(index);
            }
        }
        self.trim_queues();
        self.dispatch_as_much_as_possible(now)
    }

    /// A waiting request gives up (its client went away). Returns `None` when `id` was not
    /// waiting (unknown, or already executing); otherwise removes it (`cancelled`) and
    /// returns the requests that may execute now that it no longer blocks them.
    pub fn cancel(&mut self, now: Duration, id: RequestId) -> Option<Vec<RequestId>> {
        self.sync_time(now);
        let index = match self.requests.get(&id) {
            Some(Request { started: None, queue: Some(q), .. }) => *q as usize,
            _ => return None,
        };
        self.remove_waiting(index, id);
        self.totals.cancelled += 1;
        self.bound_next_dispatch(index);
        self.trim_queues();
        Some(self.dispatch_as_much_as_possible(now))
    }

    /// Removes the waiting requests that arrived at or before `now - max_wait` (`time-out`)
    /// and dispatches what they were blocking.
    pub fn expire(&mut self, now: Duration, max_wait: Duration) -> Expired {
        self.sync_time(now);
        let mut timed_out = Vec::new();
        for (index, queue) in self.queues.iter().enumerate() {
            for id in &queue.waiting {
                if let Some(req) = self.requests.get(id) {
                    if req.arrival.saturating_add(max_wait) <= now {
                        timed_out.push((index, *id));
                    }
                }
            }
        }
        for (index, id) in &timed_out {
            self.remove_waiting(*index, *id);
            self.totals.timed_out += 1;
        }
        for index in 0..self.queues.len() {
            self.bound_next_dispatch(index);
        }
        self.trim_queues();
        let dispatched = self.dispatch_as_much_as_possible(now);
        Expired { timed_out: timed_out.into_iter().map(|(_, id)| id).collect(), dispatched }
    }

    /// Seats held by executing requests.
    pub fn seats_in_use(&self) -> Seats {
        seats_out(self.seats_in_use)
    }

    /// Number of executing requests.
    pub fn executing(&self) -> usize {
        self.total_executing
    }

    /// Number of waiting requests.
    pub fn waiting(&self) -> usize {
        self.total_waiting
    }

    /// Seats the waiting requests will need.
    pub fn waiting_seats(&self) -> Seats {
        seats_out(self.total_waiting_seats)
    }

    /// The current concurrency limit.
    pub fn concurrency_limit(&self) -> Seats {
        self.limit
    }

    /// The current queuing configuration (`None` = Reject).
    pub fn queuing(&self) -> Option<Queuing> {
        self.queuing
    }

    /// True when nothing waits or executes.
    pub fn is_idle(&self) -> bool {
        self.total_waiting == 0 && self.total_executing == 0
    }

    /// The virtual time R, in seat-seconds, as of the last call.
    pub fn virtual_time(&self) -> f64 {
        self.current_r
    }

    /// Lifetime counts of dispatches and rejections by reason.
    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// Every queue (surplus queues still draining included), in index order.
    pub fn queues(&self) -> Vec<QueueView> {
        self.queues
            .iter()
            .enumerate()
            .map(|(index, q)| QueueView {
                index: index as u32,
                waiting: q.waiting.len(),
                executing: q.executing,
                seats_in_use: seats_out(q.seats_in_use),
                next_dispatch_r: q.next_dispatch_r,
                waiting_seats: seats_out(q.waiting_seats),
            })
            .collect()
    }

    /// Every live request, by id.
    pub fn requests(&self) -> Vec<RequestView> {
        let positions: HashMap<RequestId, usize> =
            self.queues.iter().flat_map(|q| q.waiting.iter().enumerate().map(|(pos, id)| (*id, pos))).collect();
        self.requests
            .iter()
            .map(|(id, r)| RequestView {
                id: *id,
                queue: r.queue,
                position: if r.started.is_none() { positions.get(id).copied() } else { None },
                arrival: r.arrival,
                seats: seats_out(r.seats),
                started: r.started,
            })
            .collect()
    }

    // === internals ===

    /// Advances virtual time to `now`, assuming the state since the last call held
    /// throughout. A clock that steps back advances nothing.
    fn sync_time(&mut self, now: Duration) {
        let elapsed = match self.last_now {
            Some(last) if now > last => now - last,
            Some(_) => return,
            None => Duration::ZERO,
        };
        self.last_now = Some(now);
        let mut seats_demanded = 0u64;
        let mut active = 0u64;
        for q in &self.queues {
            seats_demanded += q.seats_in_use + q.waiting_seats;
            if !q.is_idle() {
                active += 1;
            }
        }
        if active > 0 {
            let rate = (seats_demanded.min(u64::from(self.limit))) as f64 / active as f64;
            self.current_r += rate * elapsed.as_secs_f64();
        }
    }

    fn desired_queues(&self) -> usize {
        self.queuing.map_or(0, |q| q.queues as usize)
    }

    fn grow_queues(&mut self) {
        let desired = self.desired_queues();
        if self.queues.len() < desired {
            self.queues.resize_with(desired, Queue::default);
        }
    }

    /// Drops surplus queues from the end once they have drained.
    fn trim_queues(&mut self) {
        let desired = self.desired_queues();
        while self.queues.len() > desired && self.queues.last().is_some_and(Queue::is_idle) {
            self.queues.pop();
        }
        if self.robin_index >= self.queues.len() {
            // The search starts after robin_index: from queue 0 again.
            self.robin_index = self.queues.len().saturating_sub(1);
        }
    }

    /// The queue a request of this flow joins: the one of its hand with the least waiting
    /// work, ties going to the first seen from a start that rotates per arrival.
    fn shuffle_shard(&mut self, dealer: &Dealer, flow_hash: u64) -> usize {
        let hand = dealer.deal(flow_hash);
        let offset = (self.enqueues % hand.len().max(1) as u64) as usize;
        self.enqueues = self.enqueues.wrapping_add(1);
        let mut best: Option<(usize, u64)> = None;
        for i in 0..hand.len() {
            let index = hand[(offset + i) % hand.len()] as usize;
            let work = self.queues.get(index).map_or(u64::MAX, |q| q.waiting_seats);
            if best.is_none_or(|(_, least)| work < least) {
                best = Some((index, work));
            }
        }
        best.map_or(0, |(index, _)| index)
    }

    /// Anti-windup: a queue's next start is never before its oldest waiting request arrived.
    fn bound_next_dispatch(&mut self, index: usize) {
        let Some(queue) = self.queues.get_mut(index) else { return };
        let Some(head) = queue.waiting.front().and_then(|id| self.requests.get(id)) else { return };
        if queue.next_dispatch_r < head.arrival_r {
            queue.next_dispatch_r = head.arrival_r;
        }
    }

    fn can_accommodate(&self, seats: u64) -> bool {
        let limit = u64::from(self.limit);
        if seats > limit {
            // Wider than the whole limit: it runs alone.
            return self.total_executing == 0;
        }
        self.seats_in_use + seats <= limit
    }

    fn remove_waiting(&mut self, index: usize, id: RequestId) {
        let Some(req) = self.requests.remove(&id) else { return };
        if let Some(queue) = self.queues.get_mut(index) {
            if let Some(pos) = queue.waiting.iter().position(|w| *w == id) {
                queue.waiting.remove(pos);
                queue.waiting_seats = queue.waiting_seats.saturating_sub(req.seats);
            }
        }
        self.total_waiting = self.total_waiting.saturating_sub(1);
        self.total_waiting_seats = self.total_waiting_seats.saturating_sub(req.seats);
    }

    fn dispatch_as_much_as_possible(&mut self, now: Duration) -> Vec<RequestId> {
        let mut dispatched = Vec::new();
        while self.total_waiting > 0 && self.seats_in_use < u64::from(self.limit) {
            match self.dispatch_one(now) {
                Some(id) => dispatched.push(id),
                None => break,
            }
        }
        dispatched
    }

    /// Dispatches the head of the queue that would finish it first in virtual time, if it
    /// fits; otherwise nothing (it is not overtaken).
    fn dispatch_one(&mut self, now: Duration) -> Option<RequestId> {
        let n = self.queues.len();
        let mut best: Option<(usize, f64)> = None;
        let mut robin = self.robin_index;
        for _ in 0..n {
            robin = (robin + 1) % n;
            let queue = &self.queues[robin];
            let Some(head) = queue.waiting.front().and_then(|id| self.requests.get(id)) else { continue };
            let finish = queue.next_dispatch_r + estimated_work(head.seats);
            if best.is_none_or(|(_, least)| finish < least) {
                best = Some((robin, finish));
            }
        }
        let (index, _) = best?;
        let id = *self.queues[index].waiting.front()?;
        let seats = self.requests.get(&id)?.seats;
        if !self.can_accommodate(seats) {
            return None;
        }
        let queue = &mut self.queues[index];
        queue.waiting.pop_front();
        queue.waiting_seats = queue.waiting_seats.saturating_sub(seats);
        queue.executing += 1;
        queue.seats_in_use += seats;
        queue.next_dispatch_r += estimated_work(seats);
        self.total_waiting = self.total_waiting.saturating_sub(1);
        self.total_waiting_seats = self.total_waiting_seats.saturating_sub(seats);
        self.total_executing += 1;
        self.seats_in_use += seats;
        self.robin_index = index;
        if let Some(req) = self.requests.get_mut(&id) {
            req.started = Some(now);
        }
        self.totals.dispatched += 1;
        self.bound_next_dispatch(index);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
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
}
