//! The dispatcher: one [`QueueSet`] per limited priority level, behind a short lock per
//! level; requests that have to wait park on a oneshot channel until a finishing request
//! dispatches them, they time out, or their client goes away.
//!
//! Configuration comes from a [`Digest`] ([`FlowControl::apply`]), replaced whenever the
//! FlowSchemas or PriorityLevelConfigurations change. Classifications are remembered per
//! configuration, keyed by everything classification reads of the request (user, groups,
//! verb, API group, resource, subresource, namespace, the path of non-resource requests),
//! in a bounded memo ([`crate::machinery::memo`]) emptied by every change. A level that disappears keeps serving
//! the requests it already holds (they hold its `Arc`) and takes no new ones; a level whose
//! settings change keeps its queues and waiting requests.
//!
//! Seats: the server's concurrency limit (`--max-requests-inflight` +
//! `--max-mutating-requests-inflight`) is split into nominal limits by
//! nominalConcurrencyShares; every [`BORROW_PERIOD`] the current limits are re-derived from
//! the seats each level asked for in the last period (lending and borrowing,
//! [`limits::allocate`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::oneshot;

use super::classify::{self, DigestKey, RequestDigest};
use super::config::{Digest, LevelEntry, SchemaEntry};
use super::dropped::DroppedRequests;
use super::limits::{self, DemandTracker, LevelLimits, SeatDemand};
use super::metrics::{ExecLabels, FlowLabels, LevelLabels, Metrics};
use super::queueset::{Arrival, QueueSet, RejectReason, RequestId, Seats};
use crate::machinery::memo::Memo;

/// How often the current limits are re-derived (upstream: 10 s).
pub const BORROW_PERIOD: Duration = Duration::from_secs(10);
/// Longest a request waits in a queue: a quarter of upstream's default request timeout (60 s).
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(15);

/// What the debug dump shows of a request besides its flow.
#[derive(Debug, Clone, Default)]
pub struct RequestDetails {
    pub user: String,
    pub verb: String,
    pub path: String,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
}

/// One request the level holds (waiting or executing).
#[derive(Debug, Clone)]
pub struct Tracked {
    pub schema: String,
    pub distinguisher: String,
    pub arrived: SystemTime,
    pub arrived_at: Instant,
    pub seats: Seats,
    pub details: RequestDetails,
}

/// Totals shown by `dump_priority_levels`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub dispatched: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub cancelled: u64,
}

type Wake = oneshot::Sender<Result<(), RejectReason>>;

pub struct LevelState {
    pub entry: LevelEntry,
    /// None for exempt levels (nothing is queued or limited).
    pub queues: Option<QueueSet>,
    pub limits: LevelLimits,
    pub current_limit: Seats,
    pub requests: HashMap<RequestId, Tracked>,
    waiters: HashMap<RequestId, Wake>,
    demand: DemandTracker,
    pub counters: Counters,
    /// Exempt levels: requests executing now.
    pub exempt_executing: usize,
}

/// One priority level.
pub struct Level {
    pub name: String,
    state: Mutex<LevelState>,
}

impl Level {
    /// The level's state (poisoning is ignored: every critical section leaves it consistent).
    pub fn lock(&self) -> MutexGuard<'_, LevelState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The configuration in effect.
pub struct Active {
    pub digest: Digest,
    pub levels: HashMap<String, Arc<Level>>,
}

/// Where a request was classified.
#[derive(Clone)]
pub struct Classified {
    pub schema_name: String,
    pub schema_uid: String,
    pub level: Arc<Level>,
    pub level_uid: String,
    pub exempt: bool,
    pub distinguisher: String,
    pub flow_hash: u64,
}

impl Classified {
    fn labels(&self) -> FlowLabels {
        FlowLabels { flow_schema: self.schema_name.clone(), priority_level: self.level.name.clone() }
    }
}

/// API Priority and Fairness state of one apiserver.
pub struct FlowControl {
    active: RwLock<Arc<Active>>,
    epoch: Instant,
    next_id: AtomicU64,
    pub metrics: Metrics,
    /// `--max-requests-inflight` + `--max-mutating-requests-inflight`.
    pub server_concurrency: u32,
    /// Longest time a request waits in a queue (upstream: a quarter of the request timeout).
    pub max_wait: Duration,
    /// Object counts per storage prefix, for LIST work estimates.
    object_counts: RwLock<HashMap<String, u64>>,
    /// Rejections per priority level, for `Retry-After`.
    dropped: Mutex<HashMap<String, DroppedRequests>>,
    /// Classifications of the configuration in effect, by what they read of the request.
    classified: Memo<Active, DigestKey, Classified>,
    /// Classifications made by walking the FlowSchemas.
    walks: AtomicU64,
}

/// Bounds of the classification memo.
pub const CLASSIFIED_MAX_ENTRIES: usize = 4096;
pub const CLASSIFIED_MAX_BYTES: usize = 1 << 20;

/// A request's right to execute; dropping it frees its seats and dispatches what now fits.
pub struct Ticket {
    fc: Arc<FlowControl>,
    level: Arc<Level>,
    /// None: an exempt request.
    id: Option<RequestId>,
    labels: FlowLabels,
    seats: Seats,
    started: Instant,
    watch: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let kind = if self.watch { "watch" } else { "regular" };
        self.fc
            .metrics
            .execution
            .get_or_create(&ExecLabels {
                flow_schema: self.labels.flow_schema.clone(),
                priority_level: self.labels.priority_level.clone(),
                r#type: kind.into(),
            })
            .observe(self.started.elapsed().as_secs_f64());
        self.fc.metrics.executing.get_or_create(&self.labels).dec();
        self.fc.metrics.executing_seats.get_or_create(&self.labels).dec_by(i64::from(self.seats));
        let mut st = self.level.lock();
        match self.id {
            None => {
                st.exempt_executing = st.exempt_executing.saturating_sub(1);
                let (now, seats) = (self.fc.now(), st.exempt_executing as u32);
                st.demand.record(now, seats);
            }
            Some(id) => {
                st.requests.remove(&id);
                let now = self.fc.now();
                let dispatched = st.queues.as_mut().map(|q| q.finish(now, id)).unwrap_or_default();
                self.fc.dispatch(&self.level.name, &mut st, dispatched, now);
            }
        }
    }
}

/// A request waiting in a queue; dropped before it is resolved (the client went away), it
/// takes the request out of its queue — or, if it was dispatched meanwhile, frees its seats.
struct Waiting {
    fc: Arc<FlowControl>,
    level: Arc<Level>,
    id: RequestId,
    labels: FlowLabels,
    armed: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.level.lock();
        let now = self.fc.now();
        st.waiters.remove(&self.id);
        let cancelled = st.queues.as_mut().and_then(|q| q.cancel(now, self.id));
        let tracked = st.requests.remove(&self.id);
        if let Some(unblocked) = cancelled {
            st.counters.cancelled += 1;
            self.fc.dispatch(&self.level.name, &mut st, unblocked, now);
            self.fc.metrics.inqueue.get_or_create(&self.labels).dec();
            self.fc.metrics.reject(&self.labels, RejectReason::Cancelled.as_str());
            if let Some(t) = tracked {
                self.fc.metrics.observe_wait(&self.labels, false, t.arrived_at.elapsed());
            }
        } else {
            // Dispatched but never picked up: give the seats back.
            self.fc.metrics.executing.get_or_create(&self.labels).dec();
            if let Some(t) = &tracked {
                self.fc.metrics.executing_seats.get_or_create(&self.labels).dec_by(i64::from(t.seats));
            }
            let dispatched = st.queues.as_mut().map(|q| q.finish(now, self.id)).unwrap_or_default();
            self.fc.dispatch(&self.level.name, &mut st, dispatched, now);
        }
        self.fc.record_demand(&self.level.name, &mut st, now);
    }
}

impl FlowControl {
    pub fn new(server_concurrency: u32, max_wait: Duration) -> Arc<Self> {
        Arc::new(FlowControl {
            active: RwLock::new(Arc::new(Active { digest: Digest::default(), levels: HashMap::new() })),
            epoch: Instant::now(),
            next_id: AtomicU64::new(1),
            metrics: Metrics::new(),
            server_concurrency: server_concurrency.max(1),
            max_wait,
            object_counts: RwLock::new(HashMap::new()),
            dropped: Mutex::new(HashMap::new()),
            classified: Memo::new(CLASSIFIED_MAX_ENTRIES, CLASSIFIED_MAX_BYTES),
            walks: AtomicU64::new(0),
        })
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// The configuration in effect.
    pub fn active(&self) -> Arc<Active> {
        self.active.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Put a new configuration into effect.
    pub fn apply(&self, digest: Digest) {
        let old = self.active();
        let configs: Vec<limits::LevelConfig> = digest.levels.iter().map(|l| l.config.clone()).collect();
        let all_limits = limits::nominal_limits(self.server_concurrency, &configs);
        let now = self.now();
        let mut levels = HashMap::new();
        for (entry, lim) in digest.levels.iter().zip(all_limits) {
            let reuse = old.levels.get(&entry.name).filter(|l| l.lock().entry.exempt() == entry.exempt()).cloned();
            let level = match reuse {
                Some(level) => {
                    let mut st = level.lock();
                    if st.entry != *entry || st.limits != lim {
                        // New settings start from the nominal limit; the next rebalance lends
                        // and borrows again.
                        st.entry = entry.clone();
                        st.limits = lim;
                        st.current_limit = lim.initial();
                        self.reconfigure(&entry.name, &mut st, entry.queuing, lim.initial(), now);
                    }
                    drop(st);
                    level
                }
                None => {
                    let queues = if entry.exempt() {
                        None
                    } else {
                        match QueueSet::new(entry.queuing, lim.initial()) {
                            Ok(q) => Some(q),
                            Err(e) => {
                                tracing::warn!(level = %entry.name, error = %e, "priority level not usable; its requests go to catch-all");
                                continue;
                            }
                        }
                    };
                    Arc::new(Level {
                        name: entry.name.clone(),
                        state: Mutex::new(LevelState {
                            entry: entry.clone(),
                            queues,
                            current_limit: lim.initial(),
                            limits: lim,
                            requests: HashMap::new(),
                            waiters: HashMap::new(),
                            demand: DemandTracker::new(now),
                            counters: Counters::default(),
                            exempt_executing: 0,
                        }),
                    })
                }
            };
            self.publish_limits(&level);
            levels.insert(entry.name.clone(), level);
        }
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Active { digest, levels });
        // Entries hold the old configuration's levels; they could not be used any more.
        self.classified.clear();
    }

    fn publish_limits(&self, level: &Level) {
        let st = level.lock();
        let l = LevelLabels { priority_level: level.name.clone() };
        self.metrics.nominal_limit.get_or_create(&l).set(i64::from(st.limits.nominal));
        self.metrics.lower_limit.get_or_create(&l).set(i64::from(st.limits.lower));
        self.metrics.upper_limit.get_or_create(&l).set(i64::from(st.limits.upper));
        self.metrics.current_limit.get_or_create(&l).set(i64::from(st.current_limit));
        self.metrics.concurrency_limit.get_or_create(&l).set(i64::from(st.current_limit));
    }

    fn reconfigure(
        &self,
        level: &str,
        st: &mut LevelState,
        queuing: Option<super::queueset::Queuing>,
        limit: Seats,
        now: Duration,
    ) {
        let Some(q) = st.queues.as_mut() else { return };
        match q.reconfigure(now, queuing, limit) {
            Ok(dispatched) => self.dispatch(level, st, dispatched, now),
            Err(e) => tracing::warn!(level = %level, error = %e, "priority level settings not applied"),
        }
    }

    /// Wake requests the queue set dispatched.
    fn dispatch(&self, level: &str, st: &mut LevelState, ids: Vec<RequestId>, now: Duration) {
        for id in ids {
            st.counters.dispatched += 1;
            if let Some(t) = st.requests.get(&id) {
                let labels = FlowLabels { flow_schema: t.schema.clone(), priority_level: level.to_string() };
                self.metrics.inqueue.get_or_create(&labels).dec();
                self.metrics.executing.get_or_create(&labels).inc();
                self.metrics.executing_seats.get_or_create(&labels).inc_by(i64::from(t.seats));
                self.metrics.dispatched.get_or_create(&labels).inc();
                self.metrics.observe_wait(&labels, true, t.arrived_at.elapsed());
            }
            if let Some(tx) = st.waiters.remove(&id) {
                // A closed receiver means the waiter is being dropped: its `Waiting` frees the seats.
                let _ = tx.send(Ok(()));
            }
        }
        self.record_demand(level, st, now);
    }

    fn record_demand(&self, level: &str, st: &mut LevelState, now: Duration) {
        if let Some(q) = &st.queues {
            let demand = q.seats_in_use() + q.waiting_seats();
            st.demand.record(now, demand);
            self.metrics
                .inqueue_seats
                .get_or_create(&LevelLabels { priority_level: level.to_string() })
                .set(i64::from(q.waiting_seats()));
        }
    }

    /// Classify a request: the first matching FlowSchema in effect and its level, its
    /// distinguisher and flow hash; remembered for the configuration in effect.
    pub fn classify(&self, req: &RequestDigest) -> Option<Classified> {
        let active = self.active();
        let hash = self.classified.hash(|h| req.hash_key(h));
        if let Some(c) = self.classified.get(&active, hash, |k| req.same_key(k)) {
            return Some(c);
        }
        let c = self.classify_in(&active, req)?;
        let key = req.to_key();
        let bytes = key.bytes() + c.schema_name.len() + c.schema_uid.len() + c.level_uid.len() + c.distinguisher.len();
        self.classified.insert(&active, hash, key, c.clone(), bytes);
        Some(c)
    }

    /// How many requests were classified by walking the FlowSchemas (the others were
    /// remembered), and the entries and bytes of the memo.
    pub fn classify_stats(&self) -> (u64, (usize, usize)) {
        (self.walks.load(Ordering::Relaxed), self.classified.usage())
    }

    fn classify_in(&self, active: &Active, req: &RequestDigest) -> Option<Classified> {
        self.walks.fetch_add(1, Ordering::Relaxed);
        let i = classify::classify(&active.digest.schemas, |s: &SchemaEntry| &s.spec, req)?;
        let schema = &active.digest.schemas[i];
        let level = active.levels.get(schema.level())?.clone();
        let entry = active.digest.level(schema.level())?;
        let distinguisher = classify::distinguisher(&schema.spec, req);
        Some(Classified {
            flow_hash: classify::flow_hash(&schema.name, &distinguisher),
            schema_name: schema.name.clone(),
            schema_uid: schema.uid.clone(),
            level_uid: entry.uid.clone(),
            exempt: entry.exempt(),
            level,
            distinguisher,
        })
    }

    /// Wait for the right to execute: at once for exempt levels, else through the level's
    /// queues; `Err` is why the request was rejected.
    pub async fn admit(
        self: &Arc<Self>,
        c: &Classified,
        seats: Seats,
        watch: bool,
        details: impl FnOnce() -> RequestDetails,
    ) -> Result<Ticket, RejectReason> {
        let labels = c.labels();
        if c.exempt {
            {
                let mut st = c.level.lock();
                st.exempt_executing += 1;
                let (now, seats) = (self.now(), st.exempt_executing as u32);
                st.demand.record(now, seats);
            }
            self.metrics.dispatched.get_or_create(&labels).inc();
            self.metrics.executing.get_or_create(&labels).inc();
            self.metrics.executing_seats.get_or_create(&labels).inc_by(i64::from(seats));
            return Ok(self.ticket(c, None, labels, seats, watch));
        }
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let tracked = Tracked {
            schema: c.schema_name.clone(),
            distinguisher: c.distinguisher.clone(),
            arrived: SystemTime::now(),
            arrived_at: Instant::now(),
            seats,
            details: details(),
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut st = c.level.lock();
            let now = self.now();
            let Some(q) = st.queues.as_mut() else {
                return Err(RejectReason::ConcurrencyLimit);
            };
            match q.arrive(now, id, c.flow_hash, seats) {
                Arrival::Dispatched => {
                    st.counters.dispatched += 1;
                    st.requests.insert(id, tracked);
                    self.record_demand(&c.level.name, &mut st, now);
                    drop(st);
                    self.metrics.dispatched.get_or_create(&labels).inc();
                    self.metrics.executing.get_or_create(&labels).inc();
                    self.metrics.executing_seats.get_or_create(&labels).inc_by(i64::from(seats));
                    self.metrics.observe_wait(&labels, true, Duration::ZERO);
                    return Ok(self.ticket(c, Some(id), labels, seats, watch));
                }
                Arrival::Queued { .. } => {
                    st.requests.insert(id, tracked);
                    st.waiters.insert(id, tx);
                    self.record_demand(&c.level.name, &mut st, now);
                    self.metrics.inqueue.get_or_create(&labels).inc();
                }
                Arrival::Rejected(reason) => {
                    st.counters.rejected += 1;
                    self.record_demand(&c.level.name, &mut st, now);
                    drop(st);
                    self.metrics.reject(&labels, reason.as_str());
                    self.metrics.observe_wait(&labels, false, Duration::ZERO);
                    return Err(reason);
                }
            }
        }
        let mut waiting = Waiting { fc: self.clone(), level: c.level.clone(), id, labels: labels.clone(), armed: true };
        let outcome = tokio::time::timeout(self.max_wait, rx).await;
        waiting.armed = false;
        match outcome {
            Ok(Ok(Ok(()))) => Ok(self.ticket(c, Some(id), labels, seats, watch)),
            Ok(Ok(Err(reason))) => Err(reason),
            Ok(Err(_)) => Err(RejectReason::Cancelled),
            Err(_) => {
                let mut st = c.level.lock();
                let now = self.now();
                st.waiters.remove(&id);
                if let Some(unblocked) = st.queues.as_mut().and_then(|q| q.cancel(now, id)) {
                    let t = st.requests.remove(&id);
                    st.counters.timed_out += 1;
                    self.dispatch(&c.level.name, &mut st, unblocked, now);
                    drop(st);
                    self.metrics.inqueue.get_or_create(&labels).dec();
                    self.metrics.reject(&labels, RejectReason::TimeOut.as_str());
                    if let Some(t) = t {
                        self.metrics.observe_wait(&labels, false, t.arrived_at.elapsed());
                    }
                    Err(RejectReason::TimeOut)
                } else {
                    // Dispatched just as the wait ran out.
                    drop(st);
                    Ok(self.ticket(c, Some(id), labels, seats, watch))
                }
            }
        }
    }

    fn ticket(
        self: &Arc<Self>,
        c: &Classified,
        id: Option<RequestId>,
        labels: FlowLabels,
        seats: Seats,
        watch: bool,
    ) -> Ticket {
        Ticket { fc: self.clone(), level: c.level.clone(), id, labels, seats, started: Instant::now(), watch }
    }

    /// Re-derive every level's current limit from the demand of the period that ended.
    pub fn rebalance(&self) {
        let active = self.active();
        let now = self.now();
        let levels: Vec<Arc<Level>> =
            active.digest.levels.iter().filter_map(|l| active.levels.get(&l.name).cloned()).collect();
        let mut lims = Vec::with_capacity(levels.len());
        let mut demand: Vec<SeatDemand> = Vec::with_capacity(levels.len());
        for level in &levels {
            let mut st = level.lock();
            lims.push(st.limits);
            demand.push(st.demand.take(now));
        }
        let current = limits::allocate(&lims, &demand).limits;
        for (level, limit) in levels.iter().zip(current) {
            let mut st = level.lock();
            if st.current_limit != limit && !st.entry.exempt() {
                st.current_limit = limit;
                let queuing = st.entry.queuing;
                self.reconfigure(&level.name, &mut st, queuing, limit, now);
            }
            drop(st);
            self.publish_limits(level);
        }
    }

    /// Count a rejection by `level` at unix second `now`; the `Retry-After` to answer it with.
    pub fn note_rejection(&self, level: &str, now: i64) -> i64 {
        let mut dropped = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        let d = dropped.entry(level.to_string()).or_default();
        d.record(now);
        d.retry_after(now)
    }

    /// The last known object count under a storage prefix.
    pub fn object_count(&self, prefix: &str) -> Option<u64> {
        self.object_counts.read().unwrap_or_else(|e| e.into_inner()).get(prefix).copied()
    }

    pub fn set_object_counts(&self, counts: HashMap<String, u64>) {
        *self.object_counts.write().unwrap_or_else(|e| e.into_inner()) = counts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowcontrol::config;
    use k8s_openapi::api::flowcontrol::v1 as fc;
    use serde_json::json;

    fn digest(limited: serde_json::Value) -> Digest {
        let levels: Vec<fc::PriorityLevelConfiguration> = vec![
            serde_json::from_value(json!({"metadata": {"name": "exempt", "uid": "pl-e"}, "spec": {"type": "Exempt"}}))
                .unwrap(),
            serde_json::from_value(
                json!({"metadata": {"name": "small", "uid": "pl-s"}, "spec": {"type": "Limited", "limited": limited}}),
            )
            .unwrap(),
        ];
        let rule = |group: &str| {
            json!([{"subjects": [{"kind": "Group", "group": {"name": group}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": true}]}])
        };
        let schemas: Vec<fc::FlowSchema> = vec![
            serde_json::from_value(json!({"metadata": {"name": "exempt", "uid": "fs-e"}, "spec": {"priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 1, "rules": rule("system:masters")}})).unwrap(),
            serde_json::from_value(json!({"metadata": {"name": "all", "uid": "fs-a"}, "spec": {"priorityLevelConfiguration": {"name": "small"}, "matchingPrecedence": 500, "distinguisherMethod": {"type": "ByUser"}, "rules": rule("*")}})).unwrap(),
        ];
        config::digest(&schemas, &levels, &[], &[])
    }

    fn req<'a>(user: &'a str, groups: &'a [String]) -> RequestDigest<'a> {
        RequestDigest {
            user,
            groups,
            verb: "get",
            is_resource_request: true,
            resource: "configmaps",
            namespace: "default",
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn reject_exempt_and_release() {
        // Only one level with shares: it gets all 2 seats.
        let fc = FlowControl::new(2, Duration::from_secs(5));
        fc.apply(digest(json!({"nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}})));
        let none: Vec<String> = Vec::new();
        let masters = vec!["system:masters".to_string()];
        let c = fc.classify(&req("alice", &none)).expect("classified");
        assert_eq!((c.schema_uid.as_str(), c.level_uid.as_str(), c.exempt), ("fs-a", "pl-s", false), "limited flow");
        let t1 = fc.admit(&c, 1, false, RequestDetails::default).await.expect("first seat");
        let t2 = fc.admit(&c, 1, false, RequestDetails::default).await.expect("second seat");
        let third = fc.admit(&c, 1, false, RequestDetails::default).await;
        assert_eq!(third.err(), Some(RejectReason::ConcurrencyLimit), "no third seat under Reject");
        let e = fc.classify(&req("root", &masters)).expect("classified");
        assert!(e.exempt, "system:masters is exempt");
        let _exempt = fc.admit(&e, 1, false, RequestDetails::default).await.expect("exempt always runs");
        drop(t1);
        let t3 = fc.admit(&c, 1, false, RequestDetails::default).await.expect("a seat after a release");
        drop((t2, t3));
        let text = fc.metrics.encode();
        assert!(
            text.contains("apiserver_flowcontrol_rejected_requests_total{flow_schema=\"all\",priority_level=\"small\",reason=\"concurrency-limit\"} 1"),
            "rejection counted:\n{text}"
        );
    }

    #[tokio::test]
    async fn queued_request_runs_when_a_seat_frees_and_times_out_otherwise() {
        let fc = FlowControl::new(1, Duration::from_millis(200));
        fc.apply(digest(json!({"nominalConcurrencyShares": 1, "limitResponse": {"type": "Queue",
            "queuing": {"queues": 4, "handSize": 2, "queueLengthLimit": 5}}})));
        let none: Vec<String> = Vec::new();
        let c = fc.classify(&req("alice", &none)).expect("classified");
        let t1 = fc.admit(&c, 1, false, RequestDetails::default).await.expect("first seat");
        let (fc2, c2) = (fc.clone(), c.clone());
        let waiter = tokio::spawn(async move { fc2.admit(&c2, 1, false, RequestDetails::default).await.map(drop) });
        // Let the waiter queue, then free the seat.
        for _ in 0..100 {
            if c.level.lock().queues.as_ref().map(QueueSet::waiting) == Some(1) {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(t1);
        assert!(waiter.await.expect("joined").is_ok(), "queued request dispatched");
        let _hold = fc.admit(&c, 1, false, RequestDetails::default).await.expect("seat");
        let timed_out = fc.admit(&c, 1, false, RequestDetails::default).await;
        assert_eq!(timed_out.err(), Some(RejectReason::TimeOut), "a request nobody dispatches times out");
        assert_eq!(c.level.lock().queues.as_ref().map(QueueSet::waiting), Some(0), "timed-out request left its queue");
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// What a classification decides, for comparing (the level by identity).
    fn outcome(c: &Classified) -> (String, String, String, bool, String, u64, usize) {
        let level = Arc::as_ptr(&c.level) as usize;
        (
            c.schema_name.clone(),
            c.schema_uid.clone(),
            c.level_uid.clone(),
            c.exempt,
            c.distinguisher.clone(),
            c.flow_hash,
            level,
        )
    }

    /// Every request of the table: classified twice (the second remembered), as the walk
    /// over the configuration in effect classifies it.
    fn assert_memo_agrees(fc: &FlowControl, when: &str) {
        let users: Vec<(&str, Vec<String>)> = vec![
            ("admin", strings(&["system:masters", "system:authenticated"])),
            ("system:node:n1", strings(&["system:nodes", "system:authenticated"])),
            ("system:node:n2", strings(&["system:nodes", "system:authenticated"])),
            ("system:kube-controller-manager", strings(&["system:authenticated"])),
            ("system:serviceaccount:kube-system:job", strings(&["system:serviceaccounts", "system:authenticated"])),
            ("system:serviceaccount:dev:app", strings(&["system:serviceaccounts", "system:authenticated"])),
            ("system:bootstrap:abcdef", strings(&["system:bootstrappers", "system:authenticated"])),
            ("alice", strings(&["system:authenticated"])),
            ("alice", strings(&[])),
            ("system:anonymous", strings(&["system:unauthenticated"])),
        ];
        let reqs: [(&str, bool, &str, &str, &str, &str, &str); 14] = [
            ("get", true, "", "nodes", "", "", "/api/v1/nodes/n1"),
            ("get", true, "", "nodes", "", "default", "/api/v1/nodes/n1"),
            ("update", true, "coordination.k8s.io", "leases", "", "kube-system", "/x"),
            ("get", true, "", "configmaps", "", "dev", "/api/v1/namespaces/dev/configmaps/c"),
            ("get", true, "", "configmaps", "", "prod", "/api/v1/namespaces/prod/configmaps/c"),
            ("update", true, "", "nodes", "status", "", "/api/v1/nodes/n1/status"),
            ("update", true, "coordination.k8s.io", "leases", "", "kube-node-lease", "/x"),
            ("get", true, "coordination.k8s.io", "leases", "", "kube-system", "/y"),
            ("list", true, "", "configmaps", "", "dev", "/api/v1/namespaces/dev/configmaps"),
            ("get", true, "", "configmaps", "", "kube-system", "/api/v1/namespaces/kube-system/configmaps/c"),
            (
                "create",
                true,
                "certificates.k8s.io",
                "certificatesigningrequests",
                "",
                "",
                "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            ),
            ("get", false, "", "", "", "", "/healthz"),
            ("get", false, "", "", "", "", "/readyz/etcd"),
            ("post", false, "", "", "", "", "/version"),
        ];
        let active = fc.active();
        for (user, groups) in &users {
            for &(verb, is_resource_request, api_group, resource, subresource, namespace, path) in &reqs {
                let req = RequestDigest {
                    user,
                    groups,
                    verb,
                    is_resource_request,
                    api_group,
                    resource,
                    subresource,
                    namespace,
                    path,
                };
                let want = fc.classify_in(&active, &req).map(|c| outcome(&c));
                for round in ["first", "remembered"] {
                    assert_eq!(fc.classify(&req).map(|c| outcome(&c)), want, "{when}, {round}: {req:?}");
                }
            }
        }
    }

    fn suggested() -> Digest {
        use crate::flowcontrol::bootstrap as b;
        let mut levels = b::suggested_priority_levels();
        levels.extend(b::mandatory_priority_levels());
        let mut schemas = b::suggested_flow_schemas();
        schemas.extend(b::mandatory_flow_schemas());
        config::digest(&schemas, &levels, &[], &[])
    }

    #[test]
    fn remembered_classifications_equal_walked_ones_across_configurations() {
        let fc = FlowControl::new(100, Duration::from_secs(5));
        assert!(fc.classify(&req("alice", &[])).is_none(), "nothing in effect yet");
        fc.apply(suggested());
        assert_memo_agrees(&fc, "suggested configuration");
        let nodes = strings(&["system:nodes", "system:authenticated"]);
        let node_lease = RequestDigest {
            verb: "update",
            api_group: "coordination.k8s.io",
            resource: "leases",
            namespace: "kube-node-lease",
            ..req("system:node:n1", &nodes)
        };
        assert_eq!(fc.classify(&node_lease).map(|c| c.schema_name), Some("system-node-high".into()));
        // Without the node schemas, the same request falls to another schema at once.
        let mut d = suggested();
        d.schemas.retain(|s| !s.name.starts_with("system-node"));
        fc.apply(d);
        let after = fc.classify(&node_lease).expect("classified");
        assert_ne!(after.schema_name, "system-node-high", "a configuration change is seen by the next request");
        assert_memo_agrees(&fc, "without the node schemas");
        fc.apply(suggested());
        assert_eq!(fc.classify(&node_lease).map(|c| c.schema_name), Some("system-node-high".into()));
        assert_memo_agrees(&fc, "node schemas back");
    }

    #[test]
    fn an_equal_request_is_not_walked_again_and_the_memo_is_bounded() {
        let fc = FlowControl::new(100, Duration::from_secs(5));
        fc.apply(suggested());
        let groups = strings(&["system:authenticated"]);
        let first = fc.classify(&req("alice", &groups)).expect("classified");
        let again = fc.classify(&req("alice", &groups)).expect("classified");
        assert_eq!(outcome(&first), outcome(&again));
        assert_eq!(fc.classify_stats(), (1, (1, fc.classify_stats().1 .1)), "the second was remembered");
        let path_only = RequestDigest { path: "/api/v1/namespaces/default/configmaps/x", ..req("alice", &groups) };
        fc.classify(&path_only);
        assert_eq!(fc.classify_stats().0, 1, "a resource request's path is not read");
        for i in 0..3 * CLASSIFIED_MAX_ENTRIES {
            let user = format!("user-{i}");
            let r = req(&user, &groups);
            let c = fc.classify(&r).expect("classified");
            assert_eq!(c.distinguisher, user, "global-default flows by user");
            let (entries, bytes) = fc.classify_stats().1;
            assert!(entries <= CLASSIFIED_MAX_ENTRIES && bytes <= CLASSIFIED_MAX_BYTES, "{i}: {entries}, {bytes}");
        }
    }
}
