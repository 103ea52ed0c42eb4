//! The live side of a watch, shared by both backends. The backend publishes every change, in
//! revision order, on one broadcast channel (SQLite's writer after each commit, etcd's one
//! feed as its events arrive); each watcher skips what it has already handled (by revision)
//! and what lies outside its [`Scope`], and learns when it has fallen behind the channel, at
//! which point the backend fills the gap its own way (SQLite re-reads its history, etcd opens
//! a watch of the watcher's own).

use std::sync::Arc;

use tokio::sync::broadcast;

use super::{Event, Rev};

/// The keys a watch covers.
#[derive(Debug, Clone)]
pub(super) enum Scope {
    /// Every key starting with this.
    Prefix(String),
    /// This one key.
    Key(String),
}

impl Scope {
    pub(super) fn matches(&self, key: &str) -> bool {
        match self {
            Scope::Prefix(p) => key.starts_with(p.as_str()),
            Scope::Key(k) => key == k,
        }
    }
}

/// What the live channel gave a watcher.
#[derive(Debug)]
pub(super) enum Live {
    /// The next change in scope.
    Event(Event),
    /// Changes were missed: the watcher must read what follows `pos` elsewhere.
    Lagged,
    /// No change will come any more.
    Closed,
}

/// The next change in `scope` after `pos`, from `rx`. `pos` moves past every change received
/// (in scope or not), so a repeat — the same change from history and from the channel — is
/// skipped.
pub(super) async fn next_live(rx: &mut broadcast::Receiver<Arc<Event>>, scope: &Scope, pos: &mut Rev) -> Live {
    loop {
        match rx.recv().await {
            Ok(ev) => {
                if ev.rev <= *pos {
                    continue;
                }
                *pos = ev.rev;
                if scope.matches(&ev.key) {
                    return Live::Event(Event::clone(&ev));
                }
            }
            // The receiver has moved on to the oldest event still buffered.
            Err(broadcast::error::RecvError::Lagged(_)) => return Live::Lagged,
            Err(broadcast::error::RecvError::Closed) => return Live::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::EventKind;

    fn ev(rev: Rev, key: &str) -> Arc<Event> {
        Arc::new(Event {
            kind: EventKind::Created,
            rev,
            key: key.into(),
            value: vec![],
            prev_value: None,
            memo: Default::default(),
        })
    }

    #[test]
    fn scopes_match_their_prefix_or_their_one_key() {
        let cases = [
            (Scope::Prefix("/a/".into()), "/a/x", true),
            (Scope::Prefix("/a/".into()), "/a/", true),
            (Scope::Prefix("/a/".into()), "/ab", false),
            (Scope::Key("/a/x".into()), "/a/x", true),
            (Scope::Key("/a/x".into()), "/a/xy", false),
        ];
        for (scope, key, want) in cases {
            assert_eq!(scope.matches(key), want, "{scope:?} {key}");
        }
    }

    #[tokio::test]
    async fn live_events_skip_repeats_and_other_keys_and_move_pos_past_both() {
        let (tx, mut rx) = broadcast::channel(16);
        for e in [ev(3, "/a/1"), ev(4, "/b/1"), ev(5, "/a/2"), ev(5, "/a/2"), ev(6, "/b/2")] {
            tx.send(e).expect("receiver");
        }
        drop(tx);
        let scope = Scope::Prefix("/a/".into());
        let mut pos = 3;
        let Live::Event(first) = next_live(&mut rx, &scope, &mut pos).await else { panic!("an event") };
        assert_eq!((first.rev, first.key.as_str(), pos), (5, "/a/2", 5));
        assert!(matches!(next_live(&mut rx, &scope, &mut pos).await, Live::Closed));
        assert_eq!(pos, 6, "the change outside the scope is handled too");
    }

    #[tokio::test]
    async fn a_receiver_that_falls_behind_is_told_so() {
        let (tx, mut rx) = broadcast::channel(2);
        for rev in 1..=5 {
            tx.send(ev(rev, "/a/1")).expect("receiver");
        }
        let scope = Scope::Key("/a/1".into());
        let mut pos = 0;
        assert!(matches!(next_live(&mut rx, &scope, &mut pos).await, Live::Lagged));
        let Live::Event(next) = next_live(&mut rx, &scope, &mut pos).await else { panic!("an event") };
        assert_eq!(next.rev, 4, "the oldest event still buffered comes next");
    }
}
