//! Finds keys that appear twice in one JSON object (for `fieldValidation` "duplicate field"),
//! which a plain `serde_json::Value` decode silently collapses.
//!
//! Bounded like upstream's strict decoding (sigs.k8s.io/json `saveStrictError`): at most
//! [`MAX_STRICT_ERRORS`] distinct reports, the rest dropped. A path is only rendered when a
//! duplicate is recorded, at most [`MAX_STRICT_RENDERS`] times for one body (a key repeated a
//! million times costs a million map inserts, not a million renders), and never longer than
//! [`MAX_FIELD_PATH_BYTES`] (the middle of a longer one is elided), so a small body cannot
//! make the report large or its making slow.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Most strict-decoding problems (duplicate or unknown fields) reported for one body, as
/// sigs.k8s.io/json keeps ("prevent excessive numbers of accumulated errors").
pub const MAX_STRICT_ERRORS: usize = 100;

/// Most reports rendered for one body, repeats included. Once reached, further problems are
/// not looked at: the first [`MAX_STRICT_ERRORS`] distinct ones are all a client is told anyway.
pub const MAX_STRICT_RENDERS: usize = 1000;

/// Longest field path a report shows, in bytes; a longer path keeps its start and its end
/// around a `...`.
pub const MAX_FIELD_PATH_BYTES: usize = 1024;

/// Dotted paths of duplicated keys in `body` (empty if none or if the body is not JSON):
/// at most [`MAX_STRICT_ERRORS`] distinct paths in the order met, each at most
/// [`MAX_FIELD_PATH_BYTES`] (plus the `...` marker).
pub fn duplicate_keys(body: &[u8]) -> Vec<String> {
    let mut st = State { path: FieldPath::default(), out: StrictErrors::default() };
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Walk { st: &mut st }.deserialize(&mut de);
    st.out.into_vec()
}

/// One step of a field path.
#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

/// The path of the value being looked at, as segments; rendered only on demand.
#[derive(Debug, Default, Clone)]
pub(crate) struct FieldPath {
    segs: Vec<Seg>,
}

impl FieldPath {
    pub(crate) fn push_key(&mut self, k: &str) {
        self.segs.push(Seg::Key(k.to_string()));
    }
    pub(crate) fn push_index(&mut self, i: usize) {
        self.segs.push(Seg::Index(i));
    }
    pub(crate) fn pop(&mut self) {
        self.segs.pop();
    }

    /// `a.b[0].c`, at most [`MAX_FIELD_PATH_BYTES`] bytes of it: a longer path is its first
    /// and last halves joined by `...`. Costs O(depth + limit), whatever the keys' lengths.
    pub(crate) fn render(&self) -> String {
        let mut pieces: Vec<std::borrow::Cow<'_, str>> = Vec::with_capacity(self.segs.len() * 2);
        for (n, s) in self.segs.iter().enumerate() {
            match s {
                Seg::Key(k) => {
                    if n > 0 {
                        pieces.push(".".into());
                    }
                    pieces.push(k.as_str().into());
                }
                Seg::Index(i) => pieces.push(format!("[{i}]").into()),
            }
        }
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        if total <= MAX_FIELD_PATH_BYTES {
            return pieces.concat();
        }
        let half = MAX_FIELD_PATH_BYTES / 2;
        let mut head = String::with_capacity(half);
        for p in &pieces {
            let room = half - head.len();
            if p.len() <= room {
                head.push_str(p);
            } else {
                head.push_str(&p[..floor_boundary(p, room)]);
                break;
            }
        }
        let mut tail: Vec<&str> = Vec::new();
        let mut tail_len = 0;
        for p in pieces.iter().rev() {
            let room = half - tail_len;
            if p.len() <= room {
                tail.push(p);
                tail_len += p.len();
            } else {
                tail.push(&p[ceil_boundary(p, p.len() - room)..]);
                break;
            }
        }
        tail.reverse();
        format!("{head}...{}", tail.concat())
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Distinct reports in the order met, at most [`MAX_STRICT_ERRORS`] of them out of at most
/// [`MAX_STRICT_RENDERS`] offered.
#[derive(Debug, Default)]
pub(crate) struct StrictErrors {
    seen: HashSet<String>,
    list: Vec<String>,
    offered: usize,
}

impl StrictErrors {
    /// True once nothing more will be kept: callers check it before rendering a report.
    pub(crate) fn is_full(&self) -> bool {
        self.list.len() >= MAX_STRICT_ERRORS || self.offered >= MAX_STRICT_RENDERS
    }
    /// Records `item` unless full or already there.
    pub(crate) fn add(&mut self, item: String) {
        if self.is_full() {
            return;
        }
        self.offered += 1;
        if self.seen.contains(&item) {
            return;
        }
        self.seen.insert(item.clone());
        self.list.push(item);
    }
    pub(crate) fn into_vec(self) -> Vec<String> {
        self.list
    }
}

struct State {
    path: FieldPath,
    out: StrictErrors,
}

struct Walk<'a> {
    st: &'a mut State,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let st = self.st;
        let mut i = 0;
        loop {
            st.path.push_index(i);
            let more = seq.next_element_seed(Walk { st: &mut *st })?.is_some();
            st.path.pop();
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let st = self.st;
        let mut seen = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            st.path.push_key(&k);
            if seen.contains(&k) {
                if !st.out.is_full() {
                    let p = st.path.render();
                    st.out.add(p);
                }
            } else {
                seen.insert(k);
            }
            map.next_value_seed(Walk { st: &mut *st })?;
            st.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_duplicates_at_any_depth() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("none", r#"{"a":1,"b":{"c":2}}"#, &[]),
            ("top level", r#"{"a":1,"a":2}"#, &["a"]),
            ("nested", r#"{"metadata":{"name":"x","name":"y"}}"#, &["metadata.name"]),
            ("in list", r#"{"items":[{"k":1,"k":1}]}"#, &["items[0].k"]),
            ("list index past the first", r#"{"items":[{},{"k":1,"k":1}]}"#, &["items[1].k"]),
            ("reported once", r#"{"a":1,"a":2,"a":3}"#, &["a"]),
            ("order met", r#"{"b":1,"b":1,"a":{"x":1,"x":1}}"#, &["b", "a.x"]),
            ("not json", "{{", &[]),
        ];
        for (name, body, want) in cases {
            assert_eq!(duplicate_keys(body.as_bytes()), *want, "{name}");
        }
    }

    /// The attack body of issue "memory blow-ups": a long parent key over many duplicate
    /// children. The report stays bounded in count and in size.
    #[test]
    fn reports_are_bounded() {
        let long = "p".repeat(300_000);
        let cases: &[(&str, String)] = &[
            (
                "10,000 distinct children each twice under a long key",
                format!(
                    "{{\"{long}\":{{{}}}}}",
                    (0..10_000).map(|i| format!("\"c{i}\":1,\"c{i}\":1")).collect::<Vec<_>>().join(",")
                ),
            ),
            (
                "one child 10,000 times under a long key",
                format!("{{\"{long}\":{{{}}}}}", vec!["\"c\":1"; 10_000].join(",")),
            ),
            (
                "10,000 top-level duplicates",
                format!("{{{}}}", (0..10_000).map(|_| "\"k\":1").collect::<Vec<_>>().join(",")),
            ),
        ];
        for (name, body) in cases {
            let got = duplicate_keys(body.as_bytes());
            assert!(!got.is_empty(), "{name}: duplicates found");
            assert!(got.len() <= MAX_STRICT_ERRORS, "{name}: {} reports", got.len());
            let bytes: usize = got.iter().map(String::len).sum();
            assert!(bytes <= MAX_STRICT_ERRORS * (MAX_FIELD_PATH_BYTES + 3), "{name}: {bytes} bytes of report");
            for p in &got {
                assert!(p.len() <= MAX_FIELD_PATH_BYTES + 3, "{name}: a {}-byte path", p.len());
            }
        }
    }

    #[test]
    fn long_paths_keep_start_and_end() {
        let long = "é".repeat(2_000); // two bytes a char: cuts must fall on char boundaries
        let body = format!("{{\"{long}\":{{\"child\":1,\"child\":2}}}}");
        let got = duplicate_keys(body.as_bytes());
        assert_eq!(got.len(), 1);
        let p = &got[0];
        assert!(p.ends_with(".child"), "{p}");
        assert!(p.starts_with("éé"), "{p}");
        assert!(p.contains("..."), "{p}");
        assert!(p.len() <= MAX_FIELD_PATH_BYTES + 3, "{}", p.len());
    }

    #[test]
    fn strict_errors_dedup_and_cap() {
        let mut e = StrictErrors::default();
        for i in 0..1_000 {
            e.add(format!("x{}", i % 150));
            e.add("x0".into());
        }
        let v = e.into_vec();
        assert_eq!(v.len(), MAX_STRICT_ERRORS);
        assert_eq!(v[0], "x0");
        assert_eq!(v[1], "x1");
        assert_eq!(v.iter().collect::<HashSet<_>>().len(), v.len(), "distinct");
    }

    /// Repeats count towards the render budget: after [`MAX_STRICT_RENDERS`] offers nothing
    /// new is taken, even when fewer than [`MAX_STRICT_ERRORS`] distinct reports exist.
    #[test]
    fn repeats_use_up_the_render_budget() {
        let cases: &[(&str, usize, usize, usize)] = &[
            // (name, repeats of "a" first, then distinct new items offered, reports kept)
            ("few repeats leave room", 10, 5, 6),
            ("budget reached by repeats", MAX_STRICT_RENDERS, 5, 1),
            ("one short of the budget", MAX_STRICT_RENDERS - 1, 5, 2),
        ];
        for (name, repeats, new, want) in cases {
            let mut e = StrictErrors::default();
            for _ in 0..*repeats {
                e.add("a".into());
            }
            for i in 0..*new {
                e.add(format!("n{i}"));
            }
            assert_eq!(e.into_vec().len(), *want, "{name}");
        }
    }

    /// A key repeated half a million times under a long parent: the walk renders the path at
    /// most [`MAX_STRICT_RENDERS`] times and reports it once.
    #[test]
    fn one_key_repeated_many_times_reports_once() {
        let long = "p".repeat(1000);
        let body = format!("{{\"{long}\":{{{}}}}}", vec!["\"c\":1"; 500_000].join(","));
        assert_eq!(duplicate_keys(body.as_bytes()), vec![format!("{long}.c")]);
    }
}
