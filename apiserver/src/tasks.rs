//! The one owner of the apiserver's long-lived background loops.
//!
//! In: a loop, by name, as a future ([`Tasks::spawn`]). Out: its handle, kept in one
//! `JoinSet` until [`Tasks::shutdown`] aborts every loop and waits until each has ended;
//! dropping the last [`Tasks`] (it lives in `AppState`) aborts them too. A loop that ends on
//! its own while the server is not stopping (returns, fails or panics) is logged at error
//! level with its name and counted in `kustos_apiserver_task_failures_total{task}` on
//! `/metrics`; the server keeps serving (the other loops and the HTTP listener are not
//! stopped and the process does not exit).
//!
//! Bounded work that a request starts and that outlives it (garbage collection after a delete,
//! a namespace's clean-up, a watch stream, the cluster-info refresh after a CA change) runs
//! here too, as a job ([`Tasks::spawn_job`]): aborted at shutdown like the loops; a job that
//! returns is done, one that fails or panics is logged and counted like a loop.
//!
//! Loops and jobs hold a `Weak<AppState>` or only the handles they use, never the `AppState`
//! itself across a wait, so that nothing they hold keeps the state alive once the server is
//! stopped and dropped.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use futures::FutureExt as _;
use tokio::task::JoinSet;

/// The supervisor: cheap to clone, every clone the same set of loops.
#[derive(Clone, Default)]
pub struct Tasks(Arc<Shared>);

#[derive(Default)]
struct Shared {
    /// Set once stopping begins: a loop ending after that is expected.
    stopping: AtomicBool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    set: JoinSet<()>,
    /// The loops started, by task id, with their names (jobs are not listed).
    names: HashMap<tokio::task::Id, &'static str>,
    /// Unexpected ends, by loop name (every started name is present, 0 when none).
    failures: BTreeMap<&'static str, u64>,
}

/// How a loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Returned,
    Failed(String),
    Panicked,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `fut` as the loop `name` until it ends or the supervisor stops it. Must be called
    /// within a Tokio runtime. After [`Tasks::shutdown`] began, `fut` is dropped unstarted.
    pub fn spawn<F>(&self, name: &'static str, fut: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.start(name, false, fut);
    }

    /// Run `fut`, bounded work a request started, as a job named `name` until it ends or the
    /// supervisor stops it. Returning is its normal end; failing or panicking is counted under
    /// `name` as for a loop. Must be called within a Tokio runtime; after
    /// [`Tasks::shutdown`] began, `fut` is dropped unstarted.
    pub fn spawn_job<F>(&self, name: &'static str, fut: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.start(name, true, fut);
    }

    fn start<F>(&self, name: &'static str, job: bool, fut: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        if self.0.stopping.load(Ordering::SeqCst) {
            return;
        }
        let shared: Weak<Shared> = Arc::downgrade(&self.0);
        let watched = async move {
            let end = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(Ok(())) => End::Returned,
                Ok(Err(e)) => End::Failed(format!("{e:#}")),
                Err(_) => End::Panicked,
            };
            if let Some(shared) = shared.upgrade() {
                Tasks(shared).ended(name, job, &end);
            }
        };
        let mut inner = self.lock();
        // Jobs end all the time: forget the ended tasks, so the set stays as large as what
        // runs.
        reap(&mut inner);
        let handle = inner.set.spawn(watched);
        if !job {
            inner.names.insert(handle.id(), name);
        }
        inner.failures.entry(name).or_insert(0);
    }

    fn ended(&self, name: &'static str, job: bool, end: &End) {
        if self.0.stopping.load(Ordering::SeqCst) || (job && *end == End::Returned) {
            return;
        }
        let what = if job { "job" } else { "loop" };
        match end {
            End::Returned => tracing::error!(task = name, "an apiserver loop ended unexpectedly"),
            End::Failed(e) => tracing::error!(task = name, error = %e, "an apiserver {what} failed"),
            End::Panicked => tracing::error!(task = name, "an apiserver {what} panicked"),
        }
        *self.lock().failures.entry(name).or_insert(0) += 1;
    }

    /// Mark the supervisor stopping: loops ending from now on are expected, and no new one
    /// starts. [`Tasks::shutdown`] does this first; call it earlier when stopping something
    /// a loop follows (the HTTP listener) would end that loop.
    pub fn begin_stop(&self) {
        self.0.stopping.store(true, Ordering::SeqCst);
    }

    /// Abort every loop and wait until each has ended.
    pub async fn shutdown(&self) {
        self.begin_stop();
        let mut set = {
            let mut inner = self.lock();
            inner.names.clear();
            std::mem::take(&mut inner.set)
        };
        set.abort_all();
        while set.join_next().await.is_some() {}
    }

    /// The names of the loops still running (one entry per loop), sorted.
    pub fn running(&self) -> Vec<&'static str> {
        let mut inner = self.lock();
        reap(&mut inner);
        let mut names: Vec<_> = inner.names.values().copied().collect();
        names.sort_unstable();
        names
    }

    /// `kustos_apiserver_task_failures_total` for every loop started (OpenMetrics text).
    pub fn encode(&self) -> String {
        let mut text = String::from(
            "# HELP kustos_apiserver_task_failures Background loops of the apiserver that ended while it was not stopping, by loop.\n\
             # TYPE kustos_apiserver_task_failures counter\n",
        );
        for (name, n) in &self.lock().failures {
            let _ = writeln!(text, "kustos_apiserver_task_failures_total{{task=\"{name}\"}} {n}");
        }
        text
    }
}

/// Forget the tasks that have ended.
fn reap(inner: &mut Inner) {
    while let Some(res) = inner.set.try_join_next_with_id() {
        let id = match res {
            Ok((id, ())) => id,
            Err(e) => e.id(),
        };
        inner.names.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Wait (bounded in count, not asserted in time) until `f` holds.
    async fn eventually(mut f: impl FnMut() -> bool) -> bool {
        for _ in 0..500 {
            if f() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        f()
    }

    fn failures(t: &Tasks, name: &str) -> Option<u64> {
        t.lock().failures.get(name).copied()
    }

    #[tokio::test]
    async fn an_end_before_stopping_is_counted_by_name() {
        let t = Tasks::default();
        t.spawn("returns", async { Ok(()) });
        t.spawn("fails", async { anyhow::bail!("broken") });
        t.spawn("panics", async { panic!("boom") });
        t.spawn("runs", futures::future::pending());
        assert!(eventually(|| t.running() == ["runs"]).await, "{:?}", t.running());
        for name in ["returns", "fails", "panics"] {
            assert_eq!(failures(&t, name), Some(1), "{name}");
        }
        assert_eq!(failures(&t, "runs"), Some(0));
        let text = t.encode();
        assert!(text.contains("kustos_apiserver_task_failures_total{task=\"fails\"} 1\n"), "{text}");
        assert!(text.contains("kustos_apiserver_task_failures_total{task=\"runs\"} 0\n"), "{text}");
    }

    #[tokio::test]
    async fn shutdown_ends_every_loop_and_counts_nothing() {
        let t = Tasks::default();
        let held = Arc::new(());
        for name in ["a", "b"] {
            let h = held.clone();
            t.spawn(name, async move {
                let _h = h;
                futures::future::pending::<()>().await;
                Ok(())
            });
        }
        assert_eq!(t.running(), ["a", "b"]);
        t.shutdown().await;
        assert!(t.running().is_empty());
        assert_eq!(Arc::strong_count(&held), 1, "the loops' futures are dropped");
        assert_eq!((failures(&t, "a"), failures(&t, "b")), (Some(0), Some(0)));
        // Nothing starts after shutdown.
        t.spawn("late", futures::future::pending());
        assert!(t.running().is_empty());
    }

    #[tokio::test]
    async fn a_job_that_returns_is_done_and_forgotten_one_that_fails_is_counted() {
        let t = Tasks::default();
        for _ in 0..100 {
            t.spawn_job("done", async { Ok(()) });
        }
        t.spawn_job("fails", async { anyhow::bail!("broken") });
        t.spawn_job("panics", async { panic!("boom") });
        assert!(eventually(|| failures(&t, "fails") == Some(1) && failures(&t, "panics") == Some(1)).await);
        assert_eq!(failures(&t, "done"), Some(0), "a returning job is its normal end");
        assert!(t.running().is_empty(), "jobs are not loops: {:?}", t.running());
        t.spawn_job("one-more", async { Ok(()) });
        assert!(t.lock().set.len() <= 1, "ended jobs are not kept: {}", t.lock().set.len());
        // A running job is aborted at shutdown, and its future dropped.
        let held = Arc::new(());
        let h = held.clone();
        t.spawn_job("waits", async move {
            let _h = h;
            futures::future::pending::<()>().await;
            Ok(())
        });
        t.shutdown().await;
        assert_eq!(Arc::strong_count(&held), 1);
        assert_eq!(failures(&t, "waits"), Some(0));
    }

    #[tokio::test]
    async fn dropping_the_supervisor_aborts_its_loops() {
        let t = Tasks::default();
        let held = Arc::new(());
        let h = held.clone();
        t.spawn("a", async move {
            let _h = h;
            futures::future::pending::<()>().await;
            Ok(())
        });
        drop(t);
        assert!(eventually(|| Arc::strong_count(&held) == 1).await);
    }
}
