//! The `Retry-After` of a priority level's 429s, as upstream's dropped-requests tracker sets it:
//! 1 s while the level rejects little, doubling (up to 32 s) while it keeps rejecting at least
//! three requests per second of the current value, and coming down one second at a time once
//! fewer requests than the value are rejected over that many seconds. A storm of rejected
//! clients is told to come back later and later instead of all at once every second. Pure:
//! time is whole seconds passed in.

use std::collections::VecDeque;

/// The longest `Retry-After`, in seconds.
pub const MAX_RETRY_AFTER: i64 = 32;

/// One level's rejections by second, and its current `Retry-After`.
#[derive(Debug, Clone)]
pub struct DroppedRequests {
    /// (second, requests rejected in it), oldest first, at most [`MAX_RETRY_AFTER`] seconds back.
    history: VecDeque<(i64, i64)>,
    retry_after: i64,
    /// When `retry_after` last doubled.
    raised_at: i64,
}

impl Default for DroppedRequests {
    fn default() -> Self {
        DroppedRequests { history: VecDeque::new(), retry_after: 1, raised_at: 0 }
    }
}

impl DroppedRequests {
    /// A request was rejected at second `now`.
    pub fn record(&mut self, now: i64) {
        match self.history.back_mut() {
            Some((t, n)) if *t == now => *n += 1,
            _ => self.history.push_back((now, 1)),
        }
        while self.history.front().is_some_and(|(t, _)| now - t > MAX_RETRY_AFTER) {
            self.history.pop_front();
        }
        self.update(now);
    }

    /// The `Retry-After` (seconds) to send at second `now`.
    pub fn retry_after(&mut self, now: i64) -> i64 {
        self.update(now);
        self.retry_after
    }

    /// Rejections in the `retry_after` seconds before `now` (the current second excluded).
    fn recent(&self, now: i64) -> i64 {
        self.history.iter().rev().filter(|(t, _)| *t < now && now - t <= self.retry_after).map(|(_, n)| n).sum()
    }

    fn update(&mut self, now: i64) {
        let dropped = self.recent(now);
        if now - self.raised_at >= self.retry_after && dropped >= 3 * self.retry_after {
            self.retry_after = (self.retry_after * 2).min(MAX_RETRY_AFTER);
            self.raised_at = now;
        } else if dropped < self.retry_after && self.retry_after > 1 {
            self.retry_after -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each step: (second, rejections recorded in it, the Retry-After read at its end).
    #[test]
    fn retry_after_table() {
        type Step = (i64, u32, i64);
        let cases: &[(&str, &[Step])] = &[
            ("no rejections: 1 s", &[(100, 0, 1), (101, 0, 1)]),
            ("a few rejections a second stay at 1 s", &[(100, 2, 1), (101, 2, 1), (102, 2, 1)]),
            (
                "three a second double it, then again after the new value has passed",
                &[(100, 3, 1), (101, 3, 2), (102, 6, 2), (103, 6, 4), (104, 20, 4), (107, 20, 8)],
            ),
            (
                "capped at 32 s",
                &[
                    (100, 10, 1),
                    (101, 10, 2),
                    (103, 100, 4),
                    (107, 100, 8),
                    (115, 100, 16),
                    (131, 500, 32),
                    (163, 900, 32),
                ],
            ),
            (
                "quiet seconds bring it down one at a time",
                &[
                    (100, 3, 1),
                    (101, 6, 2),
                    (103, 12, 4),
                    (104, 0, 4),
                    (110, 0, 3),
                    (111, 0, 2),
                    (112, 0, 1),
                    (113, 0, 1),
                ],
            ),
        ];
        for (name, steps) in cases {
            let mut d = DroppedRequests::default();
            for (i, (second, rejected, want)) in steps.iter().enumerate() {
                for _ in 0..*rejected {
                    d.record(*second);
                }
                assert_eq!(d.retry_after(*second), *want, "{name}: step {i} (second {second})");
            }
        }
    }
}
