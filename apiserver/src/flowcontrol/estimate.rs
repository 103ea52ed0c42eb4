//! Work estimates: how many seats a request occupies while it executes. Pure.
//!
//! As upstream's work estimator, roughly: a request takes one seat; a LIST takes one seat per
//! 100 objects it is expected to read (the smaller of its `limit` and the collection's current
//! size), at most 10, except a LIST pinned to one name by a `metadata.name=<name>` field
//! selector (the request info carries the name), which reads one object and takes one seat as
//! in upstream's estimator since it learned `matchesSingle` (a kubelet's list of its own CSR or
//! Node, an informer of one ConfigMap). A WATCH takes one seat while it reads its initial state (the dispatcher
//! holds it until the handler has answered, which for a watch is when the initial list has
//! been read). Writes take one seat (upstream also keeps extra seats a little while for the
//! watch notifications a write triggers; kustos does not).

/// Most seats one request takes.
pub const MAX_SEATS: u32 = 10;
/// Objects a seat covers for LIST.
pub const OBJECTS_PER_SEAT: u64 = 100;

/// Seats for a request with `verb`; for `list`, `single` says it is pinned to one name,
/// `limit` is its `limit` parameter (0 or None: no limit) and `objects` the collection's last
/// known size (None: unknown).
pub fn seats(verb: &str, single: bool, limit: Option<u64>, objects: Option<u64>) -> u32 {
    if verb != "list" || single {
        return 1;
    }
    let expected = match (limit.filter(|l| *l > 0), objects) {
        (Some(l), Some(n)) => l.min(n),
        (None, Some(n)) => n,
        (Some(_), None) | (None, None) => return 1,
    };
    expected.div_ceil(OBJECTS_PER_SEAT).clamp(1, u64::from(MAX_SEATS)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seat_table() {
        let cases = [
            ("get", "get", false, None, Some(100_000), 1),
            ("create", "create", false, None, None, 1),
            ("watch", "watch", false, None, Some(100_000), 1),
            ("watch of one name", "watch", true, None, Some(100_000), 1),
            ("list of nothing known", "list", false, None, None, 1),
            ("list of an empty collection", "list", false, None, Some(0), 1),
            ("list of 100", "list", false, None, Some(100), 1),
            ("list of 101", "list", false, None, Some(101), 2),
            ("list of 550", "list", false, None, Some(550), 6),
            ("list capped", "list", false, None, Some(50_000), MAX_SEATS),
            ("list of one name in a large collection", "list", true, None, Some(50_000), 1),
            ("list of one name with a limit", "list", true, Some(500), Some(50_000), 1),
            ("limit smaller than the collection", "list", false, Some(250), Some(50_000), 3),
            ("limit larger than the collection", "list", false, Some(5000), Some(120), 2),
            ("limit 0 means none", "list", false, Some(0), Some(700), 7),
            ("limit with unknown size", "list", false, Some(500), None, 1),
        ];
        for (name, verb, single, limit, objects, want) in cases {
            assert_eq!(seats(verb, single, limit, objects), want, "{name}");
        }
    }
}
