//! The work queue every per-object controller runs on, as client-go's workqueue (which
//! upstream's controllers run on): a first-in, first-out list of keys, a dirty set (keys that
//! changed and wait for a run) and a processing set (keys being run).
//!
//! - A key added while it waits is not added twice; a key added while it runs waits in the
//!   dirty set and goes to the back of the line when its run is [`done`](WorkQueue::done),
//!   so no key is ever run twice at once and no change is lost.
//! - [`add_after`](WorkQueue::add_after) holds a key until a delay has passed (a requeue
//!   after an [`super::Action`] or a backoff); a key holds at most one such delay, the
//!   earliest asked for, and loses it when it is added at once (that run decides the next).
//! - The queue depth (`kustos_controller_queue_depth`) is the dirty set: keys that changed
//!   and were not yet picked up. Delayed keys are not in it until their delay has passed,
//!   as client-go's depth leaves out its delayed items.
//!
//! Replaces kube-runtime's scheduler and runner, which kept every waiting key's run as a
//! future and scanned its pending set on every poll (docs/BENCHMARKS.md, "Speed II").

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// A client-go style work queue of keys `T`.
pub(super) struct WorkQueue<T> {
    name: &'static str,
    metrics: Metrics,
    state: Mutex<State<T>>,
    /// Woken when a key enters the line, or the earliest delay changes.
    ready: Notify,
}

struct State<T> {
    line: VecDeque<T>,
    /// Keys that changed and were not picked up yet, each with when it was added.
    dirty: HashMap<T, Instant>,
    processing: HashSet<T>,
    /// Delayed keys by due time (with a sequence number: two keys may fall due at once).
    delayed: BTreeMap<(Instant, u64), T>,
    /// Each delayed key's place in `delayed`.
    due: HashMap<T, (Instant, u64)>,
    seq: u64,
}

impl<T: Eq + Hash + Clone> WorkQueue<T> {
    pub(super) fn new(name: &'static str, metrics: Metrics) -> Self {
        metrics.set_queue_depth(name, 0);
        WorkQueue {
            name,
            metrics,
            state: Mutex::new(State {
                line: VecDeque::new(),
                dirty: HashMap::new(),
                processing: HashSet::new(),
                delayed: BTreeMap::new(),
                due: HashMap::new(),
                seq: 0,
            }),
            ready: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key` changed: run it (once more) as soon as a worker and its turn come.
    pub(super) fn add(&self, key: T) {
        let mut s = self.lock();
        self.add_locked(&mut s, key);
    }

    fn add_locked(&self, s: &mut State<T>, key: T) {
        if let Some(at) = s.due.remove(&key) {
            s.delayed.remove(&at);
        }
        if s.dirty.contains_key(&key) {
            return;
        }
        s.dirty.insert(key.clone(), Instant::now());
        self.metrics.queue_added(self.name);
        self.metrics.set_queue_depth(self.name, s.dirty.len());
        if !s.processing.contains(&key) {
            s.line.push_back(key);
            self.ready.notify_one();
        }
    }

    /// Add `key` once `delay` has passed (at once for zero). A key already waiting for an
    /// earlier time keeps it; one already in line needs nothing more.
    pub(super) fn add_after(&self, key: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        let mut s = self.lock();
        if s.dirty.contains_key(&key) && !s.processing.contains(&key) {
            return;
        }
        match s.due.get(&key) {
            Some((earlier, _)) if *earlier <= at => return,
            Some(old) => {
                let old = *old;
                s.delayed.remove(&old);
            }
            None => {}
        }
        s.seq = s.seq.wrapping_add(1);
        let place = (at, s.seq);
        let earliest = s.delayed.first_key_value().is_none_or(|(first, _)| place < *first);
        s.delayed.insert(place, key.clone());
        s.due.insert(key, place);
        if earliest {
            // Workers asleep until a later time must look again (only then: a wake-up per
            // requeue would wake every idle worker for nothing).
            self.ready.notify_waiters();
        }
    }

    /// Every key at once (each as [`add`](Self::add)).
    pub(super) fn add_all(&self, keys: impl IntoIterator<Item = T>) {
        let mut s = self.lock();
        for key in keys {
            self.add_locked(&mut s, key);
        }
    }

    /// The next key to run, waiting until there is one; the caller must call
    /// [`done`](Self::done) with it when its run has ended.
    pub(super) async fn get(&self) -> T {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            // Registered before looking, so that no wake-up between the look and the wait is lost.
            notified.as_mut().enable();
            let next_due = {
                let mut s = self.lock();
                let now = Instant::now();
                while let Some(entry) = s.delayed.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let key = entry.remove();
                    s.due.remove(&key);
                    self.add_locked(&mut s, key);
                }
                if let Some(key) = s.line.pop_front() {
                    if let Some(added) = s.dirty.remove(&key) {
                        self.metrics.queue_waited(self.name, added.elapsed());
                    }
                    self.metrics.set_queue_depth(self.name, s.dirty.len());
                    s.processing.insert(key.clone());
                    if !s.line.is_empty() {
                        // Pass the wake-up on: another worker may take the next key.
                        self.ready.notify_one();
                    }
                    return key;
                }
                s.delayed.first_key_value().map(|((at, _), _)| *at)
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The run of `key` has ended; if it changed meanwhile, it goes to the back of the line.
    pub(super) fn done(&self, key: &T) {
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.contains_key(key) {
            if let Some(at) = s.due.remove(key) {
                s.delayed.remove(&at);
            }
            s.line.push_back(key.clone());
            self.ready.notify_one();
        }
    }

    #[cfg(test)]
    fn depth(&self) -> usize {
        self.lock().dirty.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps on one queue of string keys, in order.
    enum Step {
        Add(&'static str),
        AddAfter(&'static str, u64),
        Sleep(u64),
        /// The next key `get` returns, without waiting past the current time.
        Get(&'static str),
        /// `get` has nothing to give now.
        Nothing,
        Done(&'static str),
        Depth(usize),
    }
    use Step::*;

    async fn now_or_never(q: &WorkQueue<String>) -> Option<String> {
        tokio::select! {
            biased;
            k = q.get() => Some(k),
            () = tokio::task::yield_now() => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_queue_as_client_go_keeps_it() {
        let cases: &[(&str, &[Step])] = &[
            ("first in, first out", &[Add("a"), Add("b"), Add("c"), Get("a"), Get("b"), Get("c"), Nothing]),
            (
                "a waiting key is not added twice",
                &[Add("a"), Add("b"), Add("a"), Depth(2), Get("a"), Get("b"), Nothing],
            ),
            (
                "a key changed while it runs waits for its run to end, then goes to the back",
                &[Add("a"), Add("b"), Get("a"), Add("a"), Depth(2), Get("b"), Nothing, Done("a"), Get("a"), Nothing],
            ),
            ("a run with no change meanwhile is not repeated", &[Add("a"), Get("a"), Done("a"), Nothing, Depth(0)]),
            (
                "a delayed key comes when its time has come",
                &[AddAfter("a", 100), Nothing, Depth(0), Sleep(99), Nothing, Sleep(1), Get("a"), Nothing],
            ),
            (
                "the earliest delay wins",
                &[
                    AddAfter("a", 100),
                    AddAfter("a", 50),
                    AddAfter("a", 80),
                    Sleep(50),
                    Get("a"),
                    Done("a"),
                    Sleep(100),
                    Nothing,
                ],
            ),
            (
                "an add at once takes the delay's place",
                &[AddAfter("a", 100), Add("a"), Get("a"), Done("a"), Sleep(200), Nothing],
            ),
            (
                "delayed keys come in the order of their times",
                &[AddAfter("a", 30), AddAfter("b", 10), AddAfter("c", 20), Sleep(30), Get("b"), Get("c"), Get("a")],
            ),
            (
                "a requeue asked by a run comes after it",
                &[Add("a"), Get("a"), AddAfter("a", 10), Done("a"), Nothing, Sleep(10), Get("a")],
            ),
            ("a zero delay is at once", &[AddAfter("a", 0), Get("a")]),
        ];
        for (name, steps) in cases {
            let q = WorkQueue::<String>::new("test", Metrics::new());
            for (i, step) in steps.iter().enumerate() {
                match step {
                    Add(k) => q.add(k.to_string()),
                    AddAfter(k, ms) => q.add_after(k.to_string(), Duration::from_millis(*ms)),
                    Sleep(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                    Get(k) => assert_eq!(now_or_never(&q).await.as_deref(), Some(*k), "{name}: step {i}"),
                    Nothing => assert_eq!(now_or_never(&q).await, None, "{name}: step {i}"),
                    Done(k) => q.done(&k.to_string()),
                    Depth(n) => assert_eq!(q.depth(), *n, "{name}: step {i}"),
                }
            }
        }
    }

    /// A worker asleep until a later delay wakes for a key added at once and for an earlier
    /// delay; a delay later than the one it sleeps for does not move it.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_wakes_for_new_work() {
        // name, keys added while the worker sleeps, the key it gets
        let cases: &[(&str, &[Step], &str)] = &[
            ("a key at once", &[Add("now")], "now"),
            ("an earlier delay, after a later one", &[AddAfter("later", 7_200_000), AddAfter("soon", 100)], "soon"),
        ];
        for (name, adds, want) in cases {
            let q = std::sync::Arc::new(WorkQueue::<String>::new("test", Metrics::new()));
            q.add_after("late".into(), Duration::from_secs(3600));
            let worker = tokio::spawn({
                let q = q.clone();
                async move { q.get().await }
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
            for add in *adds {
                match add {
                    Add(k) => q.add(k.to_string()),
                    AddAfter(k, ms) => q.add_after(k.to_string(), Duration::from_millis(*ms)),
                    _ => panic!("{name}: only adds while the worker waits"),
                }
            }
            let got = tokio::time::timeout(Duration::from_secs(1), worker).await;
            assert_eq!(got.ok().and_then(Result::ok).as_deref(), Some(*want), "{name}");
        }
    }
}
