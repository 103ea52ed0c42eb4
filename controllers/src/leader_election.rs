//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics
//! (`tools/leaderelection`), so that of several `kustos controller-manager` replicas exactly
//! one runs the controllers.
//!
//! - The Lease holds the record: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
//!   `renewTime`, `leaseTransitions`. It is created when absent; every other write is an
//!   update carrying the `resourceVersion` that was read (optimistic: a conflict means someone
//!   else wrote first, and the attempt simply failed).
//! - Whether another holder's lease has expired is judged by **this** replica's clock: the
//!   record is expired `leaseDurationSeconds` after the local time at which this replica last
//!   saw it change — never from the remote `renewTime`, so clock skew between replicas does
//!   not matter.
//! - A candidate tries every retry period (with jitter) until it acquires. The leader renews
//!   every retry period; when no renewal has succeeded for the renew deadline (shorter than
//!   the lease duration), it stops its controllers and waits for them to end **before** the
//!   others can consider the lease expired, then becomes a candidate again.
//! - On shutdown the leader stops its controllers and releases the lease (empty holder,
//!   `leaseDurationSeconds` 1, as client-go's `ReleaseOnCancel`), so a standby takes over at
//!   once.
//!
//! [`decide`] is the pure decision; [`run`] does the I/O and the timing.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// client-go's `JitterFactor`: candidates wait up to this much more than the retry period,
/// and the renew deadline must exceed the retry period times it.
pub const JITTER_FACTOR: f64 = 1.2;

/// How to elect (the `--leader-elect-*` flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--leader-elect-resource-namespace`
    pub namespace: String,
    /// `--leader-elect-resource-name`
    pub name: String,
    /// This replica's identity (`holderIdentity`): see [`identity`].
    pub identity: String,
    /// `--leader-elect-lease-duration`: how long a standby waits, from the last change it
    /// saw, before taking over.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`: how long the leader keeps leading without a
    /// successful renewal.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`: time between attempts.
    pub retry_period: Duration,
}

/// Why a leader-election [`Config`] is refused, worded for the flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("--leader-elect-lease-duration must be at least 1s, got {0:?}")]
    LeaseTooShort(Duration),
    #[error("--leader-elect-renew-deadline must be greater than zero")]
    NoRenewDeadline,
    #[error("--leader-elect-retry-period must be greater than zero")]
    NoRetryPeriod,
    #[error(
        "--leader-elect-lease-duration ({lease:?}) must be greater than --leader-elect-renew-deadline ({renew:?})"
    )]
    LeaseNotAboveRenew { lease: Duration, renew: Duration },
    #[error(
        "--leader-elect-renew-deadline ({renew:?}) must be greater than --leader-elect-retry-period ({retry:?}) \
         times {JITTER_FACTOR}"
    )]
    RenewNotAboveRetry { renew: Duration, retry: Duration },
    #[error("--leader-elect-resource-name and --leader-elect-resource-namespace must not be empty")]
    NoResource,
}

impl Config {
    /// The checks of client-go's `NewLeaderElector`, in its order, worded for the flags.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_duration < Duration::from_secs(1) {
            // leaseDurationSeconds is whole seconds: less than 1 s would be 0.
            return Err(ConfigError::LeaseTooShort(self.lease_duration));
        }
        if self.renew_deadline.is_zero() {
            return Err(ConfigError::NoRenewDeadline);
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::NoRetryPeriod);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseNotAboveRenew { lease: self.lease_duration, renew: self.renew_deadline });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(ConfigError::RenewNotAboveRetry { renew: self.renew_deadline, retry: self.retry_period });
        }
        if self.name.is_empty() || self.namespace.is_empty() {
            return Err(ConfigError::NoResource);
        }
        Ok(())
    }

    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// `<hostname>_<random UUID>`, as kube-controller-manager names itself: unique per process,
/// so a restarted replica never mistakes its predecessor's lease for its own.
pub fn identity() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// What to do about the Lease, given what was read.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// There is no Lease: create it with this record.
    Create(LeaseSpec),
    /// Take the lease (free, expired, or never renewed): update with this record.
    Acquire(LeaseSpec),
    /// We hold it: update with this record.
    Renew(LeaseSpec),
    /// Someone else holds a lease that has not expired.
    Wait { holder: String },
    /// We were leading but the record names someone else.
    Lost { holder: String },
}

/// Decide from the record read (`None`: no Lease), how long ago (by the local clock) it was
/// last seen to change, whether we think we lead, and the wall-clock `now` (for the times
/// written).
pub fn decide(
    observed: Option<&LeaseSpec>,
    since_change: Duration,
    leading: bool,
    cfg: &Config,
    now: Timestamp,
) -> Decision {
    let now = MicroTime(truncate_to_micros(now));
    let mine = LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration_seconds()),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        lease_transitions: Some(0),
        ..Default::default()
    };
    let Some(old) = observed else { return Decision::Create(mine) };
    let holder = old.holder_identity.clone().unwrap_or_default();
    if holder == cfg.identity {
        return Decision::Renew(LeaseSpec {
            acquire_time: old.acquire_time.clone().or(mine.acquire_time.clone()),
            lease_transitions: Some(old.lease_transitions.unwrap_or(0)),
            ..mine
        });
    }
    if leading && !holder.is_empty() {
        return Decision::Lost { holder };
    }
    let valid_for = Duration::from_secs(u64::try_from(old.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
    if !holder.is_empty() && since_change < valid_for {
        return Decision::Wait { holder };
    }
    Decision::Acquire(LeaseSpec {
        lease_transitions: Some(old.lease_transitions.unwrap_or(0).saturating_add(1)),
        ..mine
    })
}

/// The record that gives the lease up (client-go's `ReleaseOnCancel`): no holder, a 1 s
/// duration so that any standby may take it at once, the transition count kept.
pub fn released(old: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    let now = MicroTime(truncate_to_micros(now));
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        lease_transitions: old.lease_transitions,
        ..Default::default()
    }
}

/// MicroTime is serialized with microseconds: what is written is what is read back.
fn truncate_to_micros(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t)
}

/// The outcome of one attempt.
#[derive(Debug, PartialEq)]
enum Attempt {
    /// We hold the lease now.
    Held,
    /// Someone else holds it, or our write lost a race.
    NotHeld,
    /// We were leading and someone else holds it.
    Lost,
}

/// The Lease as last read, and when (locally) it was last seen to change.
struct Elector {
    leases: Api<Lease>,
    cfg: Config,
    observed: Option<LeaseSpec>,
    observed_at: Instant,
    leading: bool,
}

impl Elector {
    fn observe(&mut self, spec: LeaseSpec) {
        if self.observed.as_ref() != Some(&spec) {
            self.observed = Some(spec);
            self.observed_at = Instant::now();
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let lease = self.leases.get_opt(&self.cfg.name).await?;
        let read_at = Instant::now();
        let spec = lease.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        if let Some(s) = &spec {
            self.observe(s.clone());
        }
        let since = read_at.saturating_duration_since(self.observed_at);
        let decision = decide(spec.as_ref(), since, self.leading, &self.cfg, Timestamp::now());
        let (record, create) = match decision {
            Decision::Wait { holder } => {
                tracing::debug!(lease = %self.cfg.name, %holder, "the lease is held by another replica and has not expired");
                return Ok(Attempt::NotHeld);
            }
            Decision::Lost { holder } => {
                tracing::warn!(lease = %self.cfg.name, %holder, "another replica holds the lease");
                return Ok(Attempt::Lost);
            }
            Decision::Create(r) => (r, true),
            Decision::Acquire(r) | Decision::Renew(r) => (r, false),
        };
        let meta = ObjectMeta {
            name: Some(self.cfg.name.clone()),
            namespace: Some(self.cfg.namespace.clone()),
            resource_version: lease.as_ref().and_then(|l| l.metadata.resource_version.clone()),
            ..lease.as_ref().map(|l| l.metadata.clone()).unwrap_or_default()
        };
        let object = Lease { metadata: meta, spec: Some(record.clone()) };
        let written = if create {
            self.leases.create(&PostParams::default(), &object).await
        } else {
            self.leases.replace(&self.cfg.name, &PostParams::default(), &object).await
        };
        match written {
            Ok(_) => {
                self.observe(record);
                Ok(Attempt::Held)
            }
            // Someone else created or updated it first.
            Err(e) if crate::runtime::is_status(&e, 409) => Ok(Attempt::NotHeld),
            Err(e) => Err(e),
        }
    }

    /// Give the lease up if we still hold it.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(lease) = self.leases.get_opt(&self.cfg.name).await? else { return Ok(()) };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        let object = Lease { metadata: lease.metadata.clone(), spec: Some(released(&spec, Timestamp::now())) };
        self.leases.replace(&self.cfg.name, &PostParams::default(), &object).await?;
        Ok(())
    }
}

/// How a term of leadership ended.
enum End {
    Shutdown,
    Lost,
    Exited(String),
}

/// How long the controllers get to stop on their own before their task is aborted: at
/// most a second, and half the margin between the renew deadline and the lease duration.
fn stop_grace(cfg: &Config) -> Duration {
    (cfg.lease_duration.saturating_sub(cfg.renew_deadline) / 2).min(Duration::from_secs(1))
}

/// Aborts its task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Elect, and run `lead` while leading, until `shutdown` completes (then release the lease
/// and return `Ok`). `lead` gets a future that completes when it must stop; its task is
/// awaited (and aborted after a short grace) before the lease can expire for others.
///
/// After losing the lease this replica becomes a candidate again, where
/// kube-controller-manager exits: the controllers keep no state outside one `lead` call (each
/// starts from a fresh list of the objects it watches), so a new term starts as cleanly as a
/// restarted process would, without the container restart delay. If the controllers end by
/// themselves while leading, the lease is released and the error returned (the process
/// exits non-zero).
pub async fn run<L, Fut>(
    leases: Api<Lease>,
    cfg: Config,
    metrics: Metrics,
    mut lead: L,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()>
where
    L: FnMut(futures::future::BoxFuture<'static, ()>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    tokio::pin!(shutdown);
    let name = cfg.name.clone();
    let mut el = Elector { leases, cfg: cfg.clone(), observed: None, observed_at: Instant::now(), leading: false };
    metrics.set_leader(&name, false);
    tracing::info!(lease = %format!("{}/{}", cfg.namespace, cfg.name), identity = %cfg.identity, "attempting to acquire the leader lease");
    loop {
        // Candidate.
        loop {
            let attempt = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                a = el.try_acquire_or_renew() => a,
            };
            match attempt {
                Ok(Attempt::Held) => break,
                Ok(_) => {}
                Err(e) => tracing::warn!(lease = %name, error = %e, "error retrieving or updating the lease"),
            }
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(jittered(cfg.retry_period)) => {}
            }
        }
        el.leading = true;
        metrics.set_leader(&name, true);
        tracing::info!(lease = %name, identity = %cfg.identity, "successfully acquired the lease; starting the controllers");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // Owned by this future: if it is dropped mid-term, the controllers are aborted too.
        let mut task = Some(AbortOnDrop(tokio::spawn(lead(Box::pin(async move {
            let _ = stop_rx.await;
        })))));
        // Acquiring was a successful write.
        let mut last_renew = Instant::now();
        let end = loop {
            let sleep = tokio::time::sleep(cfg.retry_period);
            tokio::select! {
                _ = &mut shutdown => break End::Shutdown,
                res = async { match task.as_mut() { Some(t) => (&mut t.0).await, None => std::future::pending().await } } => {
                    task = None;
                    break End::Exited(match res {
                        Ok(Ok(())) => "the controllers stopped".to_string(),
                        Ok(Err(e)) => format!("the controllers stopped: {e:#}"),
                        Err(e) => format!("the controllers' task failed: {e}"),
                    });
                }
                _ = sleep => {}
            }
            let deadline = last_renew + cfg.renew_deadline;
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = &mut shutdown => break End::Shutdown,
                a = tokio::time::timeout_at(deadline, el.try_acquire_or_renew()) => a,
            };
            match attempt {
                Ok(Ok(Attempt::Held)) => last_renew = started,
                Ok(Ok(Attempt::Lost)) => break End::Lost,
                Ok(Ok(Attempt::NotHeld)) => {}
                Ok(Err(e)) => tracing::warn!(lease = %name, error = %e, "failed to renew the lease"),
                Err(_) => break End::Lost,
            }
            if Instant::now() >= deadline {
                break End::Lost;
            }
        };
        // Stop the controllers before anything else: after a lost renewal they must be gone
        // before the lease expires for the other replicas.
        let _ = stop_tx.send(());
        if let Some(mut t) = task.take() {
            if tokio::time::timeout(stop_grace(&cfg), &mut t.0).await.is_err() {
                t.0.abort();
                let _ = (&mut t.0).await;
            }
        }
        el.leading = false;
        metrics.set_leader(&name, false);
        match end {
            End::Lost => {
                tracing::error!(lease = %name, "leaderelection lost; controllers stopped, standing by");
            }
            End::Shutdown => {
                release(&mut el, &cfg).await;
                return Ok(());
            }
            End::Exited(why) => {
                release(&mut el, &cfg).await;
                anyhow::bail!(why);
            }
        }
    }
}

async fn release(el: &mut Elector, cfg: &Config) {
    // Bounded: shutting down must not hang on an unreachable apiserver.
    match tokio::time::timeout(cfg.renew_deadline, el.release()).await {
        Ok(Ok(())) => tracing::info!(lease = %cfg.name, "released the lease"),
        Ok(Err(e)) => tracing::warn!(lease = %cfg.name, error = %e, "failed to release the lease"),
        Err(_) => tracing::warn!(lease = %cfg.name, "releasing the lease timed out"),
    }
}

/// `period` plus up to [`JITTER_FACTOR`] times more, at random (client-go's `wait.Jitter`).
fn jittered(period: Duration) -> Duration {
    period + period.mul_f64(JITTER_FACTOR * rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            namespace: "kube-system".into(),
            name: "kustos-controller-manager".into(),
            identity: "me_1".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_900_000_000 + secs).unwrap_or_default()
    }

    fn record(holder: &str, duration: i32, acquired: i64, renewed: i64, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(duration),
            acquire_time: Some(MicroTime(at(acquired))),
            renew_time: Some(MicroTime(at(renewed))),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    #[test]
    fn decisions_follow_client_go() {
        let now = at(100);
        let s = Duration::from_secs;
        // name, observed, since it last changed (local clock), leading, wanted
        let cases: Vec<(&str, Option<LeaseSpec>, Duration, bool, Decision)> = vec![
            ("no lease: create it", None, s(0), false, Decision::Create(record("me_1", 15, 100, 100, 0))),
            (
                "held by another, seen changing 14 s ago, 15 s lease: wait",
                Some(record("other_2", 15, 0, 50, 3)),
                s(14),
                false,
                Decision::Wait { holder: "other_2".into() },
            ),
            (
                "held by another, unchanged for 15 s: expired, take it (transitions + 1, acquired now)",
                Some(record("other_2", 15, 0, 50, 3)),
                s(15),
                false,
                Decision::Acquire(record("me_1", 15, 100, 100, 4)),
            ),
            (
                "the remote renewTime is ancient but the record changed locally just now: wait",
                Some(record("other_2", 15, 0, -10_000, 3)),
                s(1),
                false,
                Decision::Wait { holder: "other_2".into() },
            ),
            (
                "the other holder's own lease duration counts, not ours",
                Some(record("other_2", 60, 0, 50, 3)),
                s(30),
                false,
                Decision::Wait { holder: "other_2".into() },
            ),
            (
                "released (empty holder): take it at once",
                Some(record("", 1, 90, 90, 5)),
                s(0),
                false,
                Decision::Acquire(record("me_1", 15, 100, 100, 6)),
            ),
            (
                "no holder field at all: take it",
                Some(LeaseSpec::default()),
                s(0),
                false,
                Decision::Acquire(record("me_1", 15, 100, 100, 1)),
            ),
            (
                "ours: renew, keeping acquireTime and transitions",
                Some(record("me_1", 15, 40, 98, 7)),
                s(2),
                true,
                Decision::Renew(record("me_1", 15, 40, 100, 7)),
            ),
            (
                "ours although we did not know (e.g. our create raced a read): renew",
                Some(record("me_1", 15, 40, 98, 7)),
                s(0),
                false,
                Decision::Renew(record("me_1", 15, 40, 100, 7)),
            ),
            (
                "leading, but another holder is recorded: lost",
                Some(record("other_2", 15, 99, 99, 8)),
                s(0),
                true,
                Decision::Lost { holder: "other_2".into() },
            ),
            (
                "leading, and the lease was released by someone: take it back",
                Some(record("", 1, 99, 99, 8)),
                s(5),
                true,
                Decision::Acquire(record("me_1", 15, 100, 100, 9)),
            ),
        ];
        for (name, observed, since, leading, want) in cases {
            assert_eq!(decide(observed.as_ref(), since, leading, &cfg(), now), want, "{name}");
        }
    }

    #[test]
    fn written_times_are_whole_microseconds() {
        let now = Timestamp::new(1_900_000_000, 123_456_789).unwrap_or_default();
        let Decision::Create(r) = decide(None, Duration::ZERO, false, &cfg(), now) else { panic!("create") };
        let t = r.renew_time.map(|t| t.0).unwrap_or_default();
        assert_eq!(t.subsec_nanosecond(), 123_456_000, "renewTime truncated to microseconds");
    }

    #[test]
    fn releasing_clears_the_holder_and_keeps_the_transitions() {
        let got = released(&record("me_1", 15, 10, 90, 4), at(100));
        let want = LeaseSpec { holder_identity: Some(String::new()), ..record("", 1, 100, 100, 4) };
        assert_eq!(got, want, "released record");
    }

    #[test]
    fn validation_as_client_go() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // name, lease, renew, retry, error containing (None: valid)
        let cases: &[(&str, Duration, Duration, Duration, Option<&str>)] = &[
            ("defaults", s(15), s(10), s(2), None),
            ("short test settings", s(4), s(3), ms(500), None),
            ("lease equal to renew deadline", s(10), s(10), s(2), Some("lease-duration (10s) must be greater")),
            ("lease shorter than renew deadline", s(5), s(10), s(2), Some("must be greater than --leader-elect-renew")),
            ("renew deadline not above retry x 1.2", s(15), s(2), ms(1700), Some("times 1.2")),
            ("lease under a second", ms(900), ms(500), ms(100), Some("at least 1s")),
            ("zero retry period", s(15), s(10), s(0), Some("retry-period must be greater than zero")),
            ("zero renew deadline", s(15), s(0), s(0), Some("renew-deadline must be greater than zero")),
        ];
        for (name, lease, renew, retry, want) in cases {
            let c = Config { lease_duration: *lease, renew_deadline: *renew, retry_period: *retry, ..cfg() };
            match (c.validate(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want an error containing {want:?}"),
            }
        }
    }

    /// A Lease object as the apiserver returns it.
    fn lease_json(holder: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kustos-controller-manager", "namespace": "kube-system", "resourceVersion": "7"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 0,
                     "acquireTime": "2030-01-01T00:00:00.000000Z", "renewTime": "2030-01-01T00:00:00.000000Z"}})
    }

    /// What the `lead` closure saw, on Tokio's clock.
    #[derive(Default)]
    struct Terms {
        started: Vec<Instant>,
        stopped: Vec<Instant>,
        /// API calls made before each stop.
        calls_at_stop: Vec<usize>,
    }

    /// Run the elector on `mock` until `shutdown` fires; every term is recorded in `terms`.
    fn elect(
        mock: &crate::mock::Mock,
        terms: &std::sync::Arc<std::sync::Mutex<Terms>>,
        metrics: &Metrics,
        shutdown: tokio::sync::oneshot::Receiver<()>,
    ) -> tokio::task::JoinHandle<anyhow::Result<()>> {
        let leases: Api<Lease> = Api::namespaced(mock.client(), "kube-system");
        let (terms, calls) = (terms.clone(), mock.clone());
        let lead = move |stop: futures::future::BoxFuture<'static, ()>| {
            let (terms, calls) = (terms.clone(), calls.clone());
            async move {
                terms.lock().unwrap_or_else(|e| e.into_inner()).started.push(Instant::now());
                stop.await;
                let mut t = terms.lock().unwrap_or_else(|e| e.into_inner());
                t.stopped.push(Instant::now());
                t.calls_at_stop.push(calls.calls().len());
                Ok(())
            }
        };
        tokio::spawn(run(leases, cfg(), metrics.clone(), lead, async move {
            let _ = shutdown.await;
        }))
    }

    /// On Tokio's paused clock: after acquiring, every renewal fails; the controllers are
    /// stopped once the renew deadline has passed and before the lease duration has, and the
    /// replica stands by again.
    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_stops_its_controllers_before_the_lease_expires() {
        // GET: absent; POST: created; then every call fails (the mock answers 500).
        let mock = crate::mock::Mock::new(vec![(404, crate::mock::status(404, "NotFound")), (201, lease_json("me_1"))]);
        let terms = std::sync::Arc::new(std::sync::Mutex::new(Terms::default()));
        let metrics = Metrics::new();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let task = elect(&mock, &terms, &metrics, stop_rx);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let _ = stop_tx.send(());
        let result = task.await;
        assert!(matches!(result, Ok(Ok(()))), "the elector ends cleanly on shutdown: {result:?}");
        let t = terms.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!((t.started.len(), t.stopped.len()), (1, 1), "one term, started and stopped");
        let led_for = t.stopped[0] - t.started[0];
        assert!(led_for >= cfg().renew_deadline, "stopped only after the renew deadline: {led_for:?}");
        assert!(led_for < cfg().lease_duration, "stopped before the lease could expire: {led_for:?}");
        let lines = mock.lines();
        assert_eq!(
            lines[..2],
            [
                "GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kustos-controller-manager",
                "POST /apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
            ],
            "acquired by creating the Lease"
        );
        assert!(lines.len() > t.calls_at_stop[0], "kept trying to acquire after losing: {lines:?}");
        assert!(lines[2..].iter().all(|l| l.starts_with("GET ")), "nothing written after the create: {lines:?}");
        let text = metrics.encode();
        assert!(text.contains("kustos_leader_election_master_status{name=\"kustos-controller-manager\"} 0"), "{text}");
        assert!(
            text.contains("kustos_leader_election_transitions_total{name=\"kustos-controller-manager\"} 2"),
            "{text}"
        );
    }

    /// On shutdown the leader stops its controllers first, then releases the lease.
    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_the_controllers_then_releases_the_lease() {
        let identity = cfg().identity;
        let mock = crate::mock::Mock::new(vec![
            (404, crate::mock::status(404, "NotFound")),
            (201, lease_json(&identity)),
            (200, lease_json(&identity)),
            (200, lease_json("")),
        ]);
        let terms = std::sync::Arc::new(std::sync::Mutex::new(Terms::default()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let task = elect(&mock, &terms, &Metrics::new(), stop_rx);
        // Well before the first renewal (one retry period after acquiring).
        for _ in 0..100 {
            if !terms.lock().unwrap_or_else(|e| e.into_inner()).started.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop_tx.send(());
        let result = task.await;
        assert!(matches!(result, Ok(Ok(()))), "the elector ends cleanly on shutdown: {result:?}");
        let t = terms.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(t.calls_at_stop, [2], "the controllers stopped before the release's calls");
        let calls = mock.calls();
        let lines: Vec<&str> = calls.iter().map(|c| c.line.as_str()).collect();
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
        assert_eq!(
            lines,
            [
                format!("GET {lease}/kustos-controller-manager"),
                format!("POST {lease}"),
                format!("GET {lease}/kustos-controller-manager"),
                format!("PUT {lease}/kustos-controller-manager"),
            ],
            "calls"
        );
        let put = &calls[3].body;
        assert_eq!(put["spec"]["holderIdentity"], "", "released: {put}");
        assert_eq!(put["spec"]["leaseDurationSeconds"], 1, "released: {put}");
        assert_eq!(put["metadata"]["resourceVersion"], "7", "the release is optimistic: {put}");
    }

    #[test]
    fn identities_are_hostname_underscore_uuid_and_unique() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b, "two processes never share an identity");
        let (host, id) = a.rsplit_once('_').unwrap_or_default();
        assert!(!host.is_empty(), "hostname part of {a}");
        assert!(uuid::Uuid::parse_str(id).is_ok(), "uuid part of {a}");
    }
}
