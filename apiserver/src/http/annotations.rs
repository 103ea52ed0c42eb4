//! Annotations a handler adds to its request's audit event (upstream's
//! `audit.AddAuditAnnotation`): a slot the audit middleware gives each audited request, which
//! the handler reaches through the task it runs in ([`scoped`], [`annotate`]).

use std::sync::{Arc, Mutex};

/// The annotations of one request, in the order added.
#[derive(Debug, Clone, Default)]
pub struct Annotations(Arc<Mutex<Vec<(String, String)>>>);

impl Annotations {
    /// Every annotation added so far, taken out.
    pub fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

tokio::task_local! {
    static CURRENT: Annotations;
}

/// Run `handler` with `slot` as its request's annotations (none: nothing is kept).
pub async fn scoped<F: std::future::Future>(slot: Option<Annotations>, handler: F) -> F::Output {
    match slot {
        Some(s) => CURRENT.scope(s, handler).await,
        None => handler.await,
    }
}

/// Add an annotation to the request being handled; nothing when it is not audited.
pub fn annotate(key: &str, value: String) {
    let _ = CURRENT.try_with(|s| s.0.lock().unwrap_or_else(|e| e.into_inner()).push((key.to_string(), value)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn annotations_reach_the_slot_of_their_task_only() {
        let slot = Annotations::default();
        scoped(Some(slot.clone()), async { annotate("a", "1".into()) }).await;
        annotate("outside", "dropped".into());
        scoped(None, async { annotate("b", "dropped".into()) }).await;
        assert_eq!(slot.take(), [("a".to_string(), "1".to_string())]);
        assert!(slot.take().is_empty(), "taken once");
    }
}
