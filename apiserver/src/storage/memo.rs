//! Work derived from one change, done once and shared by everything that handles the change.
//!
//! Enters: a slot number, chosen by the caller for one rendering of the change (the watch
//! handler's (event type, wire format, object form)), and the way to compute its bytes.
//! Leaves: those bytes, computed by the first caller of the slot and handed to every later
//! one. An [`super::Event`] carries one; its clones (every watcher's copy of a live change)
//! share it, so watchers rendering the change alike render it once. An event whose value is
//! changed (a converting [`super::view::View`]) gets a fresh one.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

/// How many renderings of one change can be kept.
pub const SLOTS: usize = 18;

type Slots = [OnceLock<Bytes>; SLOTS];

/// See the module documentation. Cloning shares it; the slots are allocated on first use.
#[derive(Clone, Default)]
pub struct Memo(Arc<OnceLock<Box<Slots>>>);

impl Memo {
    /// The bytes of `slot`, from `render` the first time (a slot past [`SLOTS`] is rendered
    /// every time, never kept). Callers racing for one slot wait for the first one's render.
    pub fn get_or_render(&self, slot: usize, render: impl FnOnce() -> Bytes) -> Bytes {
        if slot >= SLOTS {
            return render();
        }
        let slots = self.0.get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())));
        slots[slot].get_or_init(render).clone()
    }

    /// Bytes kept in the slots (what this memo costs beyond its fixed size).
    pub fn kept_bytes(&self) -> usize {
        self.0.get().map_or(0, |s| s.iter().filter_map(OnceLock::get).map(Bytes::len).sum())
    }
}

/// Derived state: two events are equal whatever their memos hold.
impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl Eq for Memo {}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Memo({} bytes kept)", self.kept_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_renderings_and_fresh_memos_do_not() {
        let a = Memo::default();
        let shared = a.clone();
        let fresh = Memo::default();
        let mut renders = 0;
        let mut render = |s: &'static str| {
            renders += 1;
            Bytes::from_static(s.as_bytes())
        };
        assert_eq!(a.get_or_render(3, || render("one")), "one");
        assert_eq!(shared.get_or_render(3, || render("two")), "one", "a clone reuses the first rendering");
        assert_eq!(shared.get_or_render(4, || render("four")), "four", "another slot renders on its own");
        assert_eq!(fresh.get_or_render(3, || render("three")), "three", "a fresh memo shares nothing");
        assert_eq!(a.get_or_render(SLOTS, || render("x")), "x");
        assert_eq!(a.get_or_render(SLOTS, || render("y")), "y", "a slot out of range is never kept");
        assert_eq!(renders, 5);
        assert_eq!(a.kept_bytes(), "one".len() + "four".len());
    }
}
