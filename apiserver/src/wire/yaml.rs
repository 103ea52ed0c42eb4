//! YAML in, JSON out, at a cost bounded by the size of the input: the one reader of YAML
//! for request bodies, apply patches and the files the command line reads (kubeconfigs).
//!
//! What enters is the bytes of a YAML document (or stream, [`documents`]); what leaves is a
//! `serde_json::Value`, the duplicate keys met (as upstream's strict decoder reports them),
//! or an [`Error`]. serde-saphyr parses as it goes (no event list, no tree of its own) and
//! hands every node to the visitors here, which build the value and count what they build.
//! An alias, and what a merge key names, is replayed node by node as the visitors ask for
//! it, so refusing the next node ends the work.
//!
//! The bound ([`Limits`]): a document without aliases yields at most one node per input
//! byte (plus one) and at most 1.5 bytes of text per input byte (an escape like `\L` is two
//! bytes for three). On top of that, aliases and merge keys may add [`ALIAS_NODES_PER_BYTE`]
//! nodes and [`ALIAS_BYTES_PER_BYTE`] bytes per input byte, with a small floor for tiny
//! documents and a cap ([`ALIAS_NODES_CAP`], about upstream's 400,000 alias-driven decodes,
//! and [`ALIAS_BYTES_CAP`]). The parser's replays are held to the same limits, and the
//! events it keeps for anchored nodes to one per eight input bytes (plus the floor). Past any of them the document is refused with upstream's
//! `yaml: document contains excessive aliasing`: only aliases can get there. Nesting deeper
//! than [`crate::meta::MAX_OBJECT_DEPTH`] levels (what a JSON body may have) is refused as
//! the parser meets it, so parsing stays linear in the input. Measured (release build): a
//! 3 MiB flow list of `1` raises the peak by 50 MB (16x its size, the JSON value a JSON body
//! of the same list also costs), 3 MiB of short keys by 80 MB (26x); 100,000 nested `[` are
//! refused in under 10 ms; a 1 MB string aliased 2,000 times is refused in 10 ms (+12 MB);
//! 20,000 merges of a 200-key mapping (222 KB) are refused at [`ALIAS_NODES_CAP`] (+41 MB).
//!
//! Scalars resolve as upstream's YAML 1.1 reading (sigs.k8s.io/yaml): `true`/`false` and
//! `yes`/`no`/`on`/`off`/`y`/`n` in their usual spellings are booleans, `~`/`null`/empty are
//! null, `0777` is octal, `0x`/`0o`/`0b` and `_` separators are integers, `.inf`/`.nan` are
//! refused (JSON cannot hold them), dates stay strings, quoted scalars are strings. A key
//! that is a number or a boolean becomes its text.
//!
//! Merge keys (`<<`) are merged as the YAML merge-key type says (go-yaml's reading): keys
//! of the mapping itself win over merged ones, and of a list of mappings the earlier wins.
//! Duplicate keys keep the last value (as upstream's non-strict decode does) and are listed
//! as `line N: key "k" already set in map` (upstream's strict decoder: the line of the
//! repeated entry's value), at most [`MAX_DUPLICATES`] of them.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::budget::BudgetBreach;

/// Nodes aliases may add per input byte, over the document's own.
pub const ALIAS_NODES_PER_BYTE: usize = 10;
/// Nodes aliases may add to any document, however small.
pub const ALIAS_NODES_FLOOR: usize = 10_000;
/// Nodes aliases may add to any document, however large.
pub const ALIAS_NODES_CAP: usize = 400_000;
/// Bytes of text (keys and strings) aliases may add per input byte.
pub const ALIAS_BYTES_PER_BYTE: usize = 10;
/// Bytes of text aliases may add to any document, however small.
pub const ALIAS_BYTES_FLOOR: usize = 64 * 1024;
/// Bytes of text aliases may add to any document, however large.
pub const ALIAS_BYTES_CAP: usize = 32 * 1024 * 1024;
/// Stack left below which a nested collection is read on a new stack segment: one level of
/// the parser's recursion takes a few KiB optimised, tens unoptimised, and the threads that
/// decode (tokio's workers) have 2 MiB.
const STACK_RED_ZONE: usize = 256 * 1024;
/// The size of such a segment.
const STACK_SEGMENT: usize = 2 * 1024 * 1024;
/// Duplicate keys listed at most (upstream's strict decoding reports keep as many).
pub const MAX_DUPLICATES: usize = 100;

/// What decoding `len` bytes may produce, all documents of a stream together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nodes: scalars (keys included), sequences and mappings.
    pub nodes: usize,
    /// Bytes of text in keys and strings.
    pub bytes: usize,
}

impl Limits {
    /// The limits for an input of `len` bytes.
    pub fn for_len(len: usize) -> Limits {
        let own = len.saturating_add(1);
        let alias_nodes =
            ALIAS_NODES_PER_BYTE.saturating_mul(own).saturating_add(ALIAS_NODES_FLOOR).min(ALIAS_NODES_CAP);
        let alias_bytes =
            ALIAS_BYTES_PER_BYTE.saturating_mul(own).saturating_add(ALIAS_BYTES_FLOOR).min(ALIAS_BYTES_CAP);
        Limits { nodes: own.saturating_add(alias_nodes), bytes: own.saturating_mul(2).saturating_add(alias_bytes) }
    }
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Aliases (merge keys included) would expand the document past its [`Limits`].
    ExcessiveAliasing,
    /// Nested deeper than [`crate::meta::MAX_OBJECT_DEPTH`] levels.
    TooDeep,
    /// Not YAML, or not something JSON can hold (the parser's message, or ours).
    Invalid(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ExcessiveAliasing => f.write_str("yaml: document contains excessive aliasing"),
            Error::TooDeep => {
                write!(f, "yaml: the document nests more than {} levels deep", crate::meta::MAX_OBJECT_DEPTH)
            }
            Error::Invalid(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

/// One YAML document as JSON, with the duplicate keys met.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub value: Value,
    /// `line N: key "k" already set in map`, in the order met, at most [`MAX_DUPLICATES`].
    pub duplicates: Vec<String>,
}

/// Decode one YAML document (a stream of more than one is refused).
pub fn from_slice(input: &[u8]) -> Result<Decoded, Error> {
    let mut state = State::new(input);
    let value = decode_one(&mut state)?;
    Ok(Decoded { value, duplicates: state.duplicates })
}

fn decode_one(state: &mut State<'_>) -> Result<Value, Error> {
    let input = state.input;
    let options = options(input.len());
    let result = serde_saphyr::with_deserializer_from_slice_with_options(input, options, |de| {
        ValueSeed { st: &mut *state }.deserialize(de)
    });
    result.map_err(|e| state.refusal(&e))
}

/// The parser's settings: its own budgets bound what it keeps (anchored events, their text,
/// replays) by the same [`Limits`] the visitors count against; nesting stops at
/// [`crate::meta::MAX_OBJECT_DEPTH`] as the parser meets it; counts the visitors keep
/// (nodes, text) are left to them.
fn options(len: usize) -> serde_saphyr::Options {
    let limits = Limits::for_len(len);
    let depth = crate::meta::MAX_OBJECT_DEPTH;
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            flow_nesting_limit: depth,
            max_depth: depth,
            max_events: usize::MAX,
            max_aliases: usize::MAX,
            max_anchors: usize::MAX,
            max_recorded_anchor_events: anchored_events(len),
            max_recorded_anchor_bytes: limits.bytes,
            max_documents: usize::MAX,
            max_nodes: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
            max_merge_keys: usize::MAX,
            enforce_alias_anchor_ratio: false,
        },
        emit_comments: false,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        merge_keys: serde_saphyr::MergeKeyPolicy::Merge,
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: limits.nodes,
            max_alias_expansions_per_anchor: usize::MAX,
        },
        legacy_octal_numbers: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::Reject,
        with_snippet: false,
    }
}

/// Events the parser may keep for the anchored nodes of `len` bytes (each ~120 bytes, and
/// an event inside nested anchors is kept once for each): an eighth of the input's bytes and
/// a floor, so that a whole 3 MiB body under an anchor still parses and its copy costs less
/// than its value.
fn anchored_events(len: usize) -> usize {
    (len / 8).saturating_add(ALIAS_NODES_FLOOR)
}

/// What a parser error means here: a limit it enforces for us, or a plain refusal.
fn classify(e: &serde_saphyr::Error) -> Option<Error> {
    use serde_saphyr::Error as E;
    match e.without_snippet() {
        E::AliasError { error, .. } => classify(error),
        // The parser's own bound on flow nesting, met before the budget's while it reads
        // ahead: the same limit.
        e if e.to_string().starts_with("recursion limit exceeded") => Some(Error::TooDeep),
        E::Budget { breach: BudgetBreach::Depth { .. }, .. } => Some(Error::TooDeep),
        E::Budget { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. }
        | E::AliasReplayCounterOverflow { .. } => Some(Error::ExcessiveAliasing),
        _ => None,
    }
}

thread_local! {
    /// The count for the stream [`documents`] is reading (serde-saphyr reads each document of
    /// a stream into a `Deserialize` type, which carries no state of its own).
    static STREAM: RefCell<Option<State<'static>>> = const { RefCell::new(None) };
}

/// One document of a stream, decoded against the count in [`STREAM`].
struct StreamDocument(Value);

impl<'de> de::Deserialize<'de> for StreamDocument {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        STREAM.with(|cell| {
            let mut slot = cell.borrow_mut();
            let Some(st) = slot.as_mut() else {
                return Err(de::Error::custom("yaml: no stream is being read"));
            };
            ValueSeed { st }.deserialize(deserializer).map(StreamDocument)
        })
    }
}

/// Decode one YAML document into `T` strictly, as a file the server reads (configuration,
/// kubeconfigs) is: within the same [`Limits`], a duplicate key refused, then `T`'s own rules
/// (unknown fields where `T` refuses them). The error is the reason, for the caller to frame.
pub fn from_slice_strict<T: serde::de::DeserializeOwned>(input: &[u8]) -> Result<T, String> {
    let decoded = from_slice(input).map_err(|e| e.to_string())?;
    if let Some(first) = decoded.duplicates.first() {
        return Err(format!("yaml: unmarshal errors:\n  {first}"));
    }
    serde_json::from_value(decoded.value).map_err(|e| e.to_string())
}

/// Decode every document of a YAML stream (empty and null documents are left out), all of
/// them within one [`Limits`] for the whole input.
pub fn documents(input: &[u8]) -> Result<Vec<Value>, Error> {
    let mut state = State::new(b"");
    state.limits = Limits::for_len(input.len());
    state.record_duplicates = false;
    let options = options(input.len());
    STREAM.with(|cell| *cell.borrow_mut() = Some(state));
    let result = serde_saphyr::from_slice_multiple_with_options::<StreamDocument>(input, options);
    let mut state = STREAM.with(|cell| cell.borrow_mut().take()).unwrap_or_else(|| State::new(b""));
    match result {
        Ok(docs) => Ok(docs.into_iter().map(|d| d.0).collect()),
        Err(e) => Err(state.refusal(&e)),
    }
}

/// The count of what has been built, and the duplicates met.
struct State<'i> {
    input: &'i [u8],
    limits: Limits,
    nodes: usize,
    bytes: usize,
    depth: usize,
    /// Offset in `input` of the first scalar read from the input since the last reset: where
    /// a value starts, for the line of a duplicate.
    first_offset: Option<usize>,
    record_duplicates: bool,
    duplicates: Vec<String>,
    /// Offsets of line starts, built when the first duplicate needs a line number.
    line_starts: Option<Vec<usize>>,
    /// Why the visitors stopped, when it was a limit (the parser wraps their error).
    failure: Option<Error>,
}

impl<'i> State<'i> {
    fn new(input: &'i [u8]) -> Self {
        State {
            input,
            limits: Limits::for_len(input.len()),
            nodes: 0,
            bytes: 0,
            depth: 0,
            first_offset: None,
            record_duplicates: true,
            duplicates: Vec::new(),
            line_starts: None,
            failure: None,
        }
    }

    /// What to answer for the parser's error `e`.
    fn refusal(&mut self, e: &serde_saphyr::Error) -> Error {
        self.failure.take().or_else(|| classify(e)).unwrap_or_else(|| Error::Invalid(format!("yaml: {e}")))
    }

    fn fail<E: de::Error>(&mut self, why: Error) -> E {
        let message = why.to_string();
        self.failure = Some(why);
        E::custom(message)
    }

    /// Count `nodes` nodes and `bytes` bytes of text about to be built.
    fn charge<E: de::Error>(&mut self, nodes: usize, bytes: usize) -> Result<(), E> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.nodes > self.limits.nodes || self.bytes > self.limits.bytes {
            return Err(self.fail(Error::ExcessiveAliasing));
        }
        Ok(())
    }

    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        self.charge(1, 0)?;
        self.depth += 1;
        if self.depth > crate::meta::MAX_OBJECT_DEPTH {
            return Err(self.fail(Error::TooDeep));
        }
        Ok(())
    }

    /// Where in the input `s` starts, if it is a slice of the input.
    fn offset_of(&self, s: &str) -> Option<usize> {
        let start = self.input.as_ptr() as usize;
        let at = s.as_ptr() as usize;
        if !self.input.is_empty() && at >= start && at - start <= self.input.len() {
            Some(at - start)
        } else {
            None
        }
    }

    fn saw_borrowed(&mut self, s: &str) -> Option<usize> {
        let offset = self.offset_of(s);
        if self.first_offset.is_none() {
            self.first_offset = offset;
        }
        offset
    }

    /// The 1-based line of `offset` (CR LF is one break).
    fn line_of(&mut self, offset: usize) -> usize {
        let input = self.input;
        let starts = self.line_starts.get_or_insert_with(|| line_starts(input));
        starts.partition_point(|&s| s <= offset)
    }

    fn duplicate(&mut self, key: &str, key_offset: Option<usize>, value_offset: Option<usize>) {
        if !self.record_duplicates || self.duplicates.len() >= MAX_DUPLICATES {
            return;
        }
        // Upstream names the line of the value; a value read from elsewhere (an alias) or
        // from no input text (a number, a null) is taken to be on the key's line.
        let at = match (key_offset, value_offset) {
            (Some(k), Some(v)) if v >= k => Some(v),
            (k, _) => k,
        };
        let entry = match at {
            Some(offset) => format!("line {}: key {} already set in map", self.line_of(offset), go_quote(key)),
            None => format!("key {} already set in map", go_quote(key)),
        };
        self.duplicates.push(entry);
    }
}

/// Offsets where lines start: 0 and after each line break (`\n`, `\r` not before `\n`,
/// U+0085, U+2028, U+2029).
fn line_starts(input: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    let mut i = 0;
    while i < input.len() {
        let width = match &input[i..] {
            [b'\r', b'\n', ..] => 2,
            [b'\n', ..] | [b'\r', ..] => 1,
            [0xC2, 0x85, ..] => 2,
            [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
            _ => {
                i += 1;
                continue;
            }
        };
        i += width;
        starts.push(i);
    }
    starts
}

/// `s` quoted as Go's `%#v` quotes a string.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct ValueSeed<'a, 'i> {
    st: &'a mut State<'i>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor { st: self.st })
    }
}

/// serde_json's own `Value` visitor, counting.
struct ValueVisitor<'a, 'i> {
    st: &'a mut State<'i>,
}

impl<'de> Visitor<'de> for ValueVisitor<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        <Number as de::Deserialize>::deserialize(de::value::I128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        <Number as de::Deserialize>::deserialize(de::value::U128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Value, E> {
        self.st.saw_borrowed(v);
        self.visit_str(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.st.charge(1, v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.st.charge(1, v.len())?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.st.charge(1, 0)?;
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.visit_none()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        ValueSeed { st: self.st }.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.st.enter()?;
        let st = self.st;
        let items = stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element_seed(ValueSeed { st: &mut *st })? {
                items.push(item);
            }
            Ok(items)
        })?;
        st.depth -= 1;
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.st.enter()?;
        let st = self.st;
        let object = stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            let mut object = Map::new();
            while let Some((key, key_offset)) = map.next_key_seed(KeySeed { st: &mut *st })? {
                let outer = st.first_offset.take();
                let value = map.next_value_seed(ValueSeed { st: &mut *st })?;
                let value_offset = st.first_offset;
                st.first_offset = outer.or(key_offset);
                if object.contains_key(&key) {
                    st.duplicate(&key, key_offset, value_offset);
                }
                object.insert(key, value);
            }
            Ok(object)
        })?;
        st.depth -= 1;
        Ok(Value::Object(object))
    }
}

/// A mapping key: a string as it is, a number or a boolean as its text (what upstream's
/// conversion to JSON makes of them); anything else is refused.
struct KeySeed<'a, 'i> {
    st: &'a mut State<'i>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_, '_> {
    type Value = (String, Option<usize>);

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl KeySeed<'_, '_> {
    fn text<E: de::Error>(self, text: String) -> Result<(String, Option<usize>), E> {
        self.st.charge(1, text.len())?;
        Ok((text, None))
    }
}

impl<'de> Visitor<'de> for KeySeed<'_, '_> {
    type Value = (String, Option<usize>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, number or boolean key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        self.st.charge(1, v.len())?;
        let offset = self.st.saw_borrowed(v);
        Ok((v.to_owned(), offset))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.text(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.text(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.text(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.text(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.text(v.to_string())
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Self::Value, E> {
        self.text(v.to_string())
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Self::Value, E> {
        self.text(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.text(v.to_string())
    }
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
