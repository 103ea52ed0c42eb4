//! YAML in, JSON out, at a cost bounded by the size of the input: the one reader of YAML
//! for request bodies, apply patches and the files the command line reads (kubeconfigs).
//!
//! What enters is the bytes of a YAML document (or stream, [`documents`]); what leaves is a
//! `serde_json::Value`, the duplicate keys met (as upstream's strict decoder reports them),
//! or an [`Error`]. serde_yaml parses (libyaml's grammar, and its scalar resolution, as
//! before) and hands every node to the visitors here, which build the value and count what
//! they build. An alias is replayed node by node as the visitors ask for it, so refusing the
//! next node ends the work.
//!
//! The bound ([`Limits`]): a document without aliases yields at most one node per input
//! byte (plus one) and at most 1.5 bytes of text per input byte (an escape like `\L` is two
//! bytes for three). On top of that, aliases may add [`ALIAS_NODES_PER_BYTE`] nodes and
//! [`ALIAS_BYTES_PER_BYTE`] bytes per input byte, with a small floor for tiny documents and
//! a cap ([`ALIAS_NODES_CAP`], about upstream's 400,000 alias-driven decodes, and
//! [`ALIAS_BYTES_CAP`]). Past either limit the document is refused with upstream's
//! `yaml: document contains excessive aliasing`: only aliases can get there. Nesting deeper
//! than [`crate::meta::MAX_OBJECT_DEPTH`] levels (what a JSON body may have) is refused
//! too, before the stack grows further.
//!
//! Merge keys (`<<`) are not merged: `<<` stays an ordinary key (serde_yaml's reading, as
//! before), and what it names costs what any other value does. Duplicate keys keep the last
//! value (as upstream's non-strict decode does) and are listed as `line N: key "k" already
//! set in map` (upstream's strict decoder: the line of the repeated entry's value), at most
//! [`MAX_DUPLICATES`] of them.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

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
    /// Aliases would expand the document past its [`Limits`].
    ExcessiveAliasing,
    /// Nested deeper than [`crate::meta::MAX_OBJECT_DEPTH`] levels.
    TooDeep,
    /// Not YAML, or not something JSON can hold (serde_yaml's or serde_json's message).
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

/// Decode one YAML document (a stream of more than one is refused, as serde_yaml does).
pub fn from_slice(input: &[u8]) -> Result<Decoded, Error> {
    let mut state = State::new(input);
    let value = decode_one(&mut state)?;
    Ok(Decoded { value, duplicates: state.duplicates })
}

fn decode_one(state: &mut State<'_>) -> Result<Value, Error> {
    let input = state.input;
    let result = ValueSeed { st: &mut *state }.deserialize(serde_yaml::Deserializer::from_slice(input));
    state.finish(result)
}

/// Decode every document of a YAML stream (empty documents are `null`), all of them within
/// one [`Limits`] for the whole input.
pub fn documents(input: &[u8]) -> Result<Vec<Value>, Error> {
    let mut state = State::new(input);
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_slice(input) {
        let result = ValueSeed { st: &mut state }.deserialize(document);
        out.push(state.finish(result)?);
    }
    Ok(out)
}

/// The count of what has been built, and the duplicates met.
struct State<'de> {
    input: &'de [u8],
    limits: Limits,
    nodes: usize,
    bytes: usize,
    depth: usize,
    /// Offset in `input` of the first scalar read from the input since the last reset: where
    /// a value starts, for the line of a duplicate.
    first_offset: Option<usize>,
    duplicates: Vec<String>,
    /// Offsets of line starts, built when the first duplicate needs a line number.
    line_starts: Option<Vec<usize>>,
    /// Why the visitors stopped, when it was a limit (serde_yaml wraps their error).
    failure: Option<Error>,
}

impl<'de> State<'de> {
    fn new(input: &'de [u8]) -> Self {
        State {
            input,
            limits: Limits::for_len(input.len()),
            nodes: 0,
            bytes: 0,
            depth: 0,
            first_offset: None,
            duplicates: Vec::new(),
            line_starts: None,
            failure: None,
        }
    }

    fn finish(&mut self, result: Result<Value, serde_yaml::Error>) -> Result<Value, Error> {
        result.map_err(|e| {
            self.failure.take().unwrap_or_else(|| {
                let message = e.to_string();
                // serde_yaml's own guard on replays trips on aliases only.
                if message == "repetition limit exceeded" {
                    Error::ExcessiveAliasing
                } else {
                    Error::Invalid(message)
                }
            })
        })
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
        if at >= start && at - start <= self.input.len() {
            Some(at - start)
        } else {
            None
        }
    }

    fn saw_borrowed(&mut self, s: &'de str) -> Option<usize> {
        let offset = self.offset_of(s);
        if self.first_offset.is_none() {
            self.first_offset = offset;
        }
        offset
    }

    /// The 1-based line of `offset`, as libyaml counts them (CR LF is one break).
    fn line_of(&mut self, offset: usize) -> usize {
        let input = self.input;
        let starts = self.line_starts.get_or_insert_with(|| line_starts(input));
        starts.partition_point(|&s| s <= offset)
    }

    fn duplicate(&mut self, key: &str, key_offset: Option<usize>, value_offset: Option<usize>) {
        if self.duplicates.len() >= MAX_DUPLICATES {
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

struct ValueSeed<'a, 'de> {
    st: &'a mut State<'de>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, 'de> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor { st: self.st })
    }
}

/// serde_json's own `Value` visitor, counting.
struct ValueVisitor<'a, 'de> {
    st: &'a mut State<'de>,
}

impl<'de> Visitor<'de> for ValueVisitor<'_, 'de> {
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
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed { st: &mut *self.st })? {
            items.push(item);
        }
        self.st.depth -= 1;
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.st.enter()?;
        let mut object = Map::new();
        while let Some((key, key_offset)) = map.next_key_seed(KeySeed { st: &mut *self.st })? {
            let outer = self.st.first_offset.take();
            let value = map.next_value_seed(ValueSeed { st: &mut *self.st })?;
            let value_offset = self.st.first_offset;
            self.st.first_offset = outer.or(key_offset);
            let seen = object.contains_key(&key);
            if seen {
                self.st.duplicate(&key, key_offset, value_offset);
            }
            object.insert(key, value);
        }
        self.st.depth -= 1;
        Ok(Value::Object(object))
    }
}

/// A mapping key: any scalar's text, as serde_json reads keys from serde_yaml.
struct KeySeed<'a, 'de> {
    st: &'a mut State<'de>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_, 'de> {
    type Value = (String, Option<usize>);

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_, 'de> {
    type Value = (String, Option<usize>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        self.st.charge(1, v.len())?;
        let offset = self.st.saw_borrowed(v);
        Ok((v.to_owned(), offset))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.st.charge(1, v.len())?;
        Ok((v.to_owned(), None))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.st.charge(1, v.len())?;
        Ok((v, None))
    }
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
