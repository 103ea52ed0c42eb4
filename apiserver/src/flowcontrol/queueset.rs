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
mod tests;
