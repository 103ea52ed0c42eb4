//! The etcd backend's watches: the one feed from etcd (its events into the window and the
//! watch cache) and the per-watcher streams served from the window, or from an etcd watch of
//! their own when they are older or fall behind.

use super::*;

/// The process's one etcd watch: every change in etcd (so that every revision arrives, see
/// `cache.rs`), those under the prefix into the window and the watch cache. Re-opened after
/// any break, from where it stopped; when etcd has compacted that history meanwhile, the
/// cache is loaded again and the window starts over.
pub(super) async fn run_feed(inner: Weak<Inner>, mut pos: Rev) {
    let mut pause = RETRY_MIN;
    loop {
        let Some(store) = inner.upgrade() else { return };
        // The whole keyspace: from the empty key (sent as \0) to the end (\0).
        let opened = store.open_watch(vec![0], Some(vec![0]), pos).await;
        drop(store);
        let mut ws = match opened {
            Ok(ws) => ws,
            Err(e) => {
                tracing::debug!(error = %e, "etcd watch: not open yet");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
                continue;
            }
        };
        loop {
            let msg = ws.message().await;
            let Some(store) = inner.upgrade() else { return };
            match msg {
                Ok(Some(resp)) => {
                    pause = RETRY_MIN;
                    if resp.canceled() {
                        let compacted = rev_of(resp.compact_revision());
                        if compacted > 0 {
                            // History the window and the cache needed is gone: load again and
                            // start over at the load's revision; the watchers fed so far end
                            // with Compacted.
                            store.compacted.fetch_max(compacted, Ordering::SeqCst);
                            store.cache.invalidate();
                            match store.load().await {
                                Ok((items, now)) => {
                                    tracing::warn!(
                                        from = pos,
                                        compacted,
                                        now,
                                        "etcd history was compacted while the watch was away; watchers restart"
                                    );
                                    store.cache.reset(items, now);
                                    lock(&store.window).reset(now);
                                    pos = now;
                                }
                                // Tried again at the next turn (the watch is cancelled again).
                                Err(e) => tracing::warn!(error = %e, "reloading the watch cache failed"),
                            }
                        } else {
                            tracing::warn!(reason = resp.cancel_reason(), "etcd cancelled the watch; re-opening");
                        }
                        break;
                    }
                    if let Some(h) = resp.header() {
                        store.saw(h.revision());
                    }
                    let (events, changes, last) = feed_batch(&store, resp.events());
                    let Some(last) = last else { continue };
                    pos = pos.max(last);
                    store.saw(etcd_rev(last));
                    if !events.is_empty() {
                        let mut w = lock(&store.window);
                        for ev in events {
                            w.push(ev);
                        }
                    }
                    store.cache.apply(changes, last);
                }
                Ok(None) => {
                    tracing::warn!("etcd closed the watch; re-opening");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "etcd watch broke; re-opening");
                    break;
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// One watch response of the feed: the events under the prefix (for the window), the same as
/// changes (for the cache), and the newest revision in the response (any key).
pub(super) fn feed_batch(store: &Inner, evs: &[etcd_client::Event]) -> (Vec<Event>, Vec<Change>, Option<Rev>) {
    let mut events = Vec::new();
    let mut changes = Vec::new();
    let mut last = None;
    for e in evs {
        let Some(kv) = e.kv() else { continue };
        let rev = rev_of(kv.mod_revision());
        last = Some(last.map_or(rev, |l: Rev| l.max(rev)));
        let Some(ev) = store.event(e) else { continue };
        let value = match e.event_type() {
            EventType::Put => Some(Arc::from(kv.value())),
            EventType::Delete => None,
        };
        changes.push(Change { key: ev.key.clone(), value, create_rev: rev_of(kv.create_revision()), mod_rev: rev });
        events.push(ev);
    }
    (events, changes, last)
}

/// The etcd range `[key, end)` a watch of `scope` covers.
pub(super) fn etcd_range(scope: &Scope, keys: &Keys) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    Ok(match scope {
        Scope::Prefix(p) => {
            let k = keys.etcd_key(p)?;
            let end = prefix_end(&k);
            (k, Some(end))
        }
        Scope::Key(k) => (keys.etcd_key(k)?, None),
    })
}

/// Removes a key's channel when its last watcher goes.
pub(super) struct KeyGuard {
    pub(super) inner: Weak<Inner>,
    pub(super) key: String,
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else { return };
        let mut w = lock(&inner.window);
        // The receiver of this watcher is dropped before the guard (field order).
        if w.by_key.get(&self.key).is_some_and(|tx| tx.receiver_count() == 0) {
            w.by_key.remove(&self.key);
        }
    }
}

pub(super) enum Source {
    Live(broadcast::Receiver<Arc<Event>>),
    Etcd(Box<WatchStream>),
}

pub(super) struct WatchState {
    pub(super) inner: Arc<Inner>,
    pub(super) scope: Scope,
    /// Every change with revision ≤ pos has been handled.
    pub(super) pos: Rev,
    pub(super) backlog: VecDeque<Event>,
    pub(super) source: Source,
    pub(super) _guard: Option<KeyGuard>,
    pub(super) done: bool,
}

impl WatchState {
    fn fail(mut self, e: Error) -> Option<(Result<Event>, WatchState)> {
        self.done = true;
        Some((Err(e), self))
    }
}

pub(super) async fn watch_step(mut st: WatchState) -> Option<(Result<Event>, WatchState)> {
    loop {
        if st.done {
            return None;
        }
        if let Some(ev) = st.backlog.pop_front() {
            st.pos = st.pos.max(ev.rev);
            return Some((Ok(ev), st));
        }
        match &mut st.source {
            Source::Live(rx) => match next_live(rx, &st.scope, &mut st.pos).await {
                Live::Event(ev) => return Some((Ok(ev), st)),
                // Fell behind the live feed: continue on an etcd watch of its own from the
                // last revision handled.
                Live::Lagged => {
                    let (key, end) = match etcd_range(&st.scope, &st.inner.keys) {
                        Ok(r) => r,
                        Err(e) => return st.fail(e),
                    };
                    match st.inner.open_watch(key, end, st.pos).await {
                        Ok(ws) => {
                            st.source = Source::Etcd(Box::new(ws));
                            st._guard = None;
                        }
                        Err(e) => return st.fail(e),
                    }
                }
                Live::Closed => {
                    let e = st.inner.compacted_error(st.pos);
                    return st.fail(e);
                }
            },
            Source::Etcd(ws) => match ws.message().await {
                Ok(Some(resp)) => {
                    if resp.canceled() {
                        let compacted = rev_of(resp.compact_revision());
                        let e = if compacted > 0 {
                            st.inner.compacted.fetch_max(compacted, Ordering::SeqCst);
                            Error::Compacted { requested: st.pos, compacted }
                        } else {
                            Error::Unavailable(format!("etcd cancelled the watch: {}", resp.cancel_reason()))
                        };
                        return st.fail(e);
                    }
                    let pos = st.pos;
                    let events = resp.events().iter().filter_map(|e| st.inner.event(e)).filter(|e| e.rev > pos);
                    st.backlog.extend(events);
                }
                Ok(None) => return st.fail(Error::Unavailable("etcd closed the watch".into())),
                Err(e) => return st.fail(map_err(e)),
            },
        }
    }
}
