//! Field sets: which fields of an object a manager owns, as structured-merge-diff's
//! `fieldpath.Set`, and their `FieldsV1` JSON form as stored in `metadata.managedFields`.
//!
//! What enters: a `fieldsV1` JSON value (or sets built node by node by the typed walk in
//! [`super::typed`]). What leaves: a [`FieldSet`] (set operations, iteration in upstream's
//! order, paths printed as upstream prints them: `.spec.containers[name="nginx"].image`) and
//! its `FieldsV1` JSON text, byte for byte upstream's: children ordered field names, then
//! associative-list keys, then set values, then indices; `"."` last in an object whose path
//! is itself a member; unknown element kinds dropped when read.
//!
//! Cost: a set is a tree whose nodes share their path's prefix, and a path element holds its
//! name, key or value behind an `Arc`, so a long key (`k:{"name":"<1 MB>"}`) is held once
//! however many fields lie below it. Building a set visits each node once; union,
//! intersection and difference walk the trees (the smaller side where the result allows);
//! nothing copies a whole path per field.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

use serde_json::Value;

/// Why a `fieldsV1` value (or one of its keys) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FieldsV1Error {
    #[error("parsing key as path element: {0:?} has no type prefix")]
    NoTypePrefix(String),
    #[error("parsing key as path element: {0}")]
    Json(serde_json::Error),
    #[error("parsing key as path element: {0:?} is not a JSON object")]
    KeyNotObject(String),
    #[error("parsing key as path element: empty key")]
    EmptyKey,
    #[error("parsing key as path element: {0}")]
    Index(std::num::ParseIntError),
    #[error("fieldsV1: expected an object, got {0}")]
    NotAnObject(&'static str),
}

/// One step of a path. Names, keys and values are shared (`Arc`): cloning an element, a
/// path or a set never copies them.
#[derive(Debug)]
pub enum PathElement {
    /// `f:<name>`: a struct field or a map key.
    Field(Arc<str>),
    /// `k:{...}`: an associative-list item by its key fields, sorted by name.
    Key(Arc<[(String, Value)]>),
    /// `v:<json>`: a set item by its value.
    Value(Arc<Value>),
    /// `i:<n>`: a list item by index (read and written; apply itself never makes one).
    Index(usize),
}

impl Clone for PathElement {
    fn clone(&self) -> Self {
        counter::add(self);
        match self {
            PathElement::Field(name) => PathElement::Field(Arc::clone(name)),
            PathElement::Key(fields) => PathElement::Key(Arc::clone(fields)),
            PathElement::Value(v) => PathElement::Value(Arc::clone(v)),
            PathElement::Index(i) => PathElement::Index(*i),
        }
    }
}

/// What tests measure the work of set operations by: the bytes of the path elements made or
/// cloned on this thread, each counted at its full length as a copy would cost (a clone only
/// shares them). Nothing is counted outside tests.
pub mod counter {
    use super::PathElement;

    #[cfg(test)]
    thread_local! {
        static BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// The bytes counted on this thread so far.
    #[cfg(test)]
    pub fn bytes() -> usize {
        BYTES.with(std::cell::Cell::get)
    }

    #[cfg(test)]
    pub(super) fn add(pe: &PathElement) {
        let n = pe.payload_len();
        BYTES.with(|b| b.set(b.get().saturating_add(n)));
    }

    #[cfg(not(test))]
    #[inline]
    pub(super) fn add(_: &PathElement) {}
}

fn rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// structured-merge-diff's value order: numbers, strings, booleans, lists, maps, null.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let c = compare_values(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            // serde_json's maps iterate in key order.
            for ((pk, pv), (qk, qv)) in x.iter().zip(y) {
                let c = pk.cmp(qk).then_with(|| compare_values(pv, qv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => rank(a).cmp(&rank(b)),
    }
}

fn compare_keys(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for ((pn, pv), (qn, qv)) in a.iter().zip(b) {
        let c = pn.cmp(qn).then_with(|| compare_values(pv, qv));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        use PathElement::*;
        match (self, other) {
            // Shared elements are equal without reading them.
            (Field(a), Field(b)) if Arc::ptr_eq(a, b) => Ordering::Equal,
            (Key(a), Key(b)) if Arc::ptr_eq(a, b) => Ordering::Equal,
            (Value(a), Value(b)) if Arc::ptr_eq(a, b) => Ordering::Equal,
            (Field(a), Field(b)) => a.cmp(b),
            (Key(a), Key(b)) => compare_keys(a, b),
            (Value(a), Value(b)) => compare_values(a, b),
            (Index(a), Index(b)) => a.cmp(b),
            _ => self.kind_rank().cmp(&other.kind_rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// Bytes of a key's value as [`PathElement`]'s work counter weighs them: a string's length,
/// 8 for anything else.
#[cfg(test)]
fn value_weight(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        _ => 8,
    }
}

impl PathElement {
    fn kind_rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// How long this element is, roughly: what copying it would cost.
    #[cfg(test)]
    fn payload_len(&self) -> usize {
        match self {
            PathElement::Field(name) => name.len(),
            PathElement::Key(fields) => fields.iter().map(|(n, v)| n.len() + value_weight(v)).sum(),
            PathElement::Value(v) => value_weight(v),
            PathElement::Index(_) => 8,
        }
    }

    fn made(self) -> PathElement {
        counter::add(&self);
        self
    }

    /// A key element from its fields (sorted here, as upstream keeps them).
    pub fn key(mut fields: Vec<(String, Value)>) -> PathElement {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields.into()).made()
    }

    pub fn field(name: &str) -> PathElement {
        PathElement::Field(name.into()).made()
    }

    /// A set item's element.
    pub fn value(v: Value) -> PathElement {
        PathElement::Value(Arc::new(v)).made()
    }

    /// The `FieldsV1` key of this element (`f:name`, `k:{"name":"x"}`, `v:"a"`, `i:0`).
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut s = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    s.push_str(&Value::String(name.clone()).to_string());
                    s.push(':');
                    s.push_str(&value.to_string());
                }
                s.push('}');
                s
            }
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Reads a `FieldsV1` key. `Ok(None)`: an element kind this version does not know
    /// (upstream drops those).
    pub fn from_fields_v1_key(key: &str) -> Result<Option<PathElement>, FieldsV1Error> {
        let Some((kind, rest)) = key.split_once(':') else {
            return Err(FieldsV1Error::NoTypePrefix(key.to_string()));
        };
        let pe = match kind {
            "f" => PathElement::field(rest),
            "k" => {
                let v: Value = serde_json::from_str(rest).map_err(FieldsV1Error::Json)?;
                let Value::Object(m) = v else {
                    return Err(FieldsV1Error::KeyNotObject(rest.to_string()));
                };
                if m.is_empty() {
                    return Err(FieldsV1Error::EmptyKey);
                }
                PathElement::key(m.into_iter().collect())
            }
            "v" => PathElement::value(serde_json::from_str(rest).map_err(FieldsV1Error::Json)?),
            "i" => PathElement::Index(rest.parse().map_err(FieldsV1Error::Index)?),
            _ => return Ok(None),
        };
        Ok(Some(pe))
    }
}

impl fmt::Display for PathElement {
    /// Upstream's human form: `.name`, `[name="x",port=80]`, `[="a"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={value}")?;
                }
                f.write_str("]")
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object's root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    pub fn child(&self, pe: PathElement) -> Path {
        let mut v = self.0.clone();
        v.push(pe);
        Path(v)
    }

    /// A path of field names (`Path::fields(&["metadata", "name"])`).
    pub fn fields(names: &[&str]) -> Path {
        Path(names.iter().map(|n| PathElement::field(n)).collect())
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in &self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}

/// A set of paths, stored as a trie: `members` are paths ending here, `children` lead on.
/// Children are never empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// How many paths are members.
    pub fn len(&self) -> usize {
        self.members.len() + self.children.values().map(FieldSet::len).sum::<usize>()
    }

    /// Adds `path` (the empty path is not a member of anything and is ignored).
    pub fn insert(&mut self, path: &Path) {
        self.insert_elems(&path.0);
    }

    fn insert_elems(&mut self, elems: &[PathElement]) {
        match elems {
            [] => {}
            [last] => {
                if !self.members.contains(last) {
                    self.members.insert(last.clone());
                }
            }
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(c) => c.insert_elems(rest),
                None => {
                    let mut c = FieldSet::new();
                    c.insert_elems(rest);
                    self.children.insert(first.clone(), c);
                }
            },
        }
    }

    /// Adds the path of `pe` below this node (a member when `member`) and the paths of
    /// `below` under it: how a walk builds a set one node at a time.
    pub fn add(&mut self, pe: PathElement, member: bool, below: FieldSet) {
        if below.is_empty() {
            if member {
                self.members.insert(pe);
            }
            return;
        }
        if member && !self.members.contains(&pe) {
            self.members.insert(pe.clone());
        }
        match self.children.get_mut(&pe) {
            Some(mine) => mine.union_with(&below),
            None => {
                self.children.insert(pe, below);
            }
        }
    }

    pub fn has(&self, path: &Path) -> bool {
        let mut set = self;
        let Some((last, parents)) = path.0.split_last() else { return false };
        for pe in parents {
            match set.children.get(pe) {
                Some(c) => set = c,
                None => return false,
            }
        }
        set.members.contains(last)
    }

    /// Whether `path` is a member or a proper prefix of a member.
    pub fn has_prefix(&self, path: &Path) -> bool {
        let mut set = self;
        let Some((last, parents)) = path.0.split_last() else { return !self.is_empty() };
        for pe in parents {
            match set.children.get(pe) {
                Some(c) => set = c,
                None => return false,
            }
        }
        set.has_below(last)
    }

    /// Whether the path of `pe` below this node is a member or a prefix of one.
    pub fn has_below(&self, pe: &PathElement) -> bool {
        self.members.contains(pe) || self.children.contains_key(pe)
    }

    /// The subset below `pe` (empty when there is none).
    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub fn is_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// Every element directly below this node (members and children), in order.
    pub fn elements(&self) -> BTreeSet<&PathElement> {
        self.members.iter().chain(self.children.keys()).collect()
    }

    /// Adds the members of `other`, walking only `other`.
    pub fn union_with(&mut self, other: &FieldSet) {
        for pe in &other.members {
            if !self.members.contains(pe) {
                self.members.insert(pe.clone());
            }
        }
        for (pe, c) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.union_with(c),
                None => {
                    self.children.insert(pe.clone(), c.clone());
                }
            }
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let (big, small) = if self.len() >= other.len() { (self, other) } else { (other, self) };
        let mut out = big.clone();
        out.union_with(small);
        out
    }

    /// Walks the smaller side of each node, looking its elements up in the larger.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        let (few, many) = if self.members.len() <= other.members.len() { (self, other) } else { (other, self) };
        out.members = few.members.iter().filter(|pe| many.members.contains(*pe)).cloned().collect();
        let (few, many) = if self.children.len() <= other.children.len() { (self, other) } else { (other, self) };
        for (pe, c) in &few.children {
            if let Some(o) = many.children.get(pe) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(pe.clone(), i);
                }
            }
        }
        out
    }

    /// Members of `self` that are not members of `other` (a path stays when only its
    /// descendants are in `other`, as upstream's `Difference`).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        if other.is_empty() {
            return self.clone();
        }
        let mut out = FieldSet::new();
        out.members = self.members.iter().filter(|pe| !other.members.contains(*pe)).cloned().collect();
        for (pe, c) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(pe.clone(), d);
            }
        }
        out
    }

    /// `self` without the members of `other` and without everything below them.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        if other.is_empty() {
            return self.clone();
        }
        let mut out = FieldSet::new();
        out.members = self.members.iter().filter(|pe| !other.members.contains(*pe)).cloned().collect();
        for (pe, c) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let d = match other.children.get(pe) {
                Some(o) => c.recursive_difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(pe.clone(), d);
            }
        }
        out
    }

    /// Every member path, in upstream's order (a node's members and children merged by
    /// element order, a member before its own descendants).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        let _ = self.for_each_path(&mut |p| {
            out.push(Path(p.iter().map(|pe| (*pe).clone()).collect()));
            ControlFlow::Continue(())
        });
        out
    }

    /// Calls `f` with every member path in [`FieldSet::paths`]' order, without making
    /// them, until it breaks.
    pub fn for_each_path<'a>(&'a self, f: &mut dyn FnMut(&[&'a PathElement]) -> ControlFlow<()>) -> ControlFlow<()> {
        self.walk_paths(&mut Vec::new(), f)
    }

    fn walk_paths<'a>(
        &'a self,
        prefix: &mut Vec<&'a PathElement>,
        f: &mut dyn FnMut(&[&'a PathElement]) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        for pe in self.elements() {
            prefix.push(pe);
            if self.members.contains(pe) {
                f(prefix)?;
            }
            if let Some(c) = self.children.get(pe) {
                c.walk_paths(prefix, f)?;
            }
            prefix.pop();
        }
        ControlFlow::Continue(())
    }

    /// Reads a `fieldsV1` value. Unknown element kinds are dropped, as upstream does.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, FieldsV1Error> {
        let (set, _) = read_node(v)?;
        Ok(set.unwrap_or_default())
    }

    /// The `fieldsV1` JSON text, exactly as upstream writes it.
    pub fn to_fields_v1_string(&self) -> String {
        let mut s = String::from("{");
        self.write_contents(false, &mut s);
        s.push('}');
        s
    }

    /// The `fieldsV1` value, to place into an object. Its members are upstream's; the order
    /// of keys is then the JSON library's (sorted), not [`FieldSet::to_fields_v1_string`]'s.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.contents_value(false))
    }

    fn contents_value(&self, include_self: bool) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        for pe in self.elements() {
            let inner = match self.children.get(pe) {
                Some(c) => c.contents_value(self.members.contains(pe)),
                None => serde_json::Map::new(),
            };
            m.insert(pe.to_fields_v1_key(), Value::Object(inner));
        }
        if include_self && !m.is_empty() {
            m.insert(".".into(), Value::Object(serde_json::Map::new()));
        }
        m
    }

    fn write_contents(&self, include_self: bool, s: &mut String) {
        let mut first = true;
        for pe in self.elements() {
            if !first {
                s.push(',');
            }
            first = false;
            s.push_str(&Value::String(pe.to_fields_v1_key()).to_string());
            s.push_str(":{");
            if let Some(c) = self.children.get(pe) {
                c.write_contents(self.members.contains(pe), s);
            }
            s.push('}');
        }
        if include_self && !first {
            s.push_str(",\".\":{}");
        }
    }
}

/// A node of `fieldsV1`: its children (None: none) and whether it is itself a member.
fn read_node(v: &Value) -> Result<(Option<FieldSet>, bool), FieldsV1Error> {
    let Value::Object(m) = v else {
        return Err(FieldsV1Error::NotAnObject(kind_of(v)));
    };
    let mut children: Option<FieldSet> = None;
    let mut is_member = false;
    for (key, sub) in m {
        if key == "." {
            is_member = true;
            continue;
        }
        let Some(pe) = PathElement::from_fields_v1_key(key)? else { continue };
        let (grand, child_member) = read_node(sub)?;
        let set = children.get_or_insert_with(FieldSet::new);
        match grand.filter(|g| !g.is_empty()) {
            Some(g) => {
                if child_member {
                    set.members.insert(pe.clone());
                }
                set.children.insert(pe, g);
            }
            None if child_member => {
                set.members.insert(pe);
            }
            None => {}
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children, is_member))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// structured-merge-diff's `TestSerializeV1GoldenData` inputs: read, written back
    /// byte for byte.
    #[test]
    fn apply_fields_v1_round_trip_upstream_golden() {
        let cases = [
            r#"{"f:aaa":{},"f:aab":{},"f:aac":{},"f:aad":{},"f:aae":{},"f:aaf":{},"k:{\"name\":\"first\"}":{},"k:{\"name\":\"second\"}":{},"k:{\"port\":443,\"protocol\":\"tcp\"}":{},"k:{\"port\":443,\"protocol\":\"udp\"}":{},"v:1":{},"v:2":{},"v:3":{},"v:\"aa\"":{},"v:\"ab\"":{},"v:true":{},"i:1":{},"i:2":{},"i:3":{},"i:4":{}}"#,
            r#"{"f:aaa":{"k:{\"name\":\"second\"}":{"v:3":{"f:aab":{}}},"v:3":{},"v:true":{}},"f:aab":{"f:aaa":{},"f:aaf":{"k:{\"port\":443,\"protocol\":\"udp\"}":{"k:{\"port\":443,\"protocol\":\"tcp\"}":{}}},"k:{\"name\":\"first\"}":{}},"f:aac":{"f:aaa":{"v:1":{}},"f:aac":{},"v:3":{"k:{\"name\":\"second\"}":{}}}}"#,
            // Members with children: "." written last.
            r#"{"f:metadata":{"f:labels":{"f:app":{},".":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{"f:image":{},"f:name":{},".":{}}}}}"#,
        ];
        for text in cases {
            let v: Value = serde_json::from_str(text).unwrap();
            let set = FieldSet::from_fields_v1(&v).unwrap();
            assert_eq!(set.to_fields_v1_string(), text);
        }
    }

    #[test]
    fn apply_fields_v1_reading() {
        struct Case {
            input: Value,
            paths: Vec<&'static str>,
            written: &'static str,
        }
        let cases = [
            // "." first (as YAML printers sort it) reads the same as "." last.
            Case {
                input: json!({"f:data": {".": {}, "f:key": {}}}),
                paths: vec![".data", ".data.key"],
                written: r#"{"f:data":{"f:key":{},".":{}}}"#,
            },
            // Unknown element kinds are dropped.
            Case { input: json!({"f:aaa": {}, "r:aab": {}}), paths: vec![".aaa"], written: r#"{"f:aaa":{}}"# },
            // Keys are sorted by name whatever order they come in.
            Case {
                input: json!({"f:ports": {"k:{\"protocol\":\"TCP\",\"containerPort\":80}": {".": {}, "f:containerPort": {}}}}),
                paths: vec![
                    ".ports[containerPort=80,protocol=\"TCP\"]",
                    ".ports[containerPort=80,protocol=\"TCP\"].containerPort",
                ],
                written: r#"{"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{"f:containerPort":{},".":{}}}}"#,
            },
            Case {
                input: json!({"f:finalizers": {"v:\"a\"": {}, "v:\"b\"": {}}, "f:args": {"i:0": {}}}),
                paths: vec![".args[0]", ".finalizers[=\"a\"]", ".finalizers[=\"b\"]"],
                written: r#"{"f:args":{"i:0":{}},"f:finalizers":{"v:\"a\"":{},"v:\"b\"":{}}}"#,
            },
            Case { input: json!({}), paths: vec![], written: "{}" },
        ];
        for c in cases {
            let set = FieldSet::from_fields_v1(&c.input).unwrap();
            let paths: Vec<String> = set.paths().iter().map(|p| p.to_string()).collect();
            assert_eq!(paths, c.paths, "{}", c.input);
            assert_eq!(set.to_fields_v1_string(), c.written);
            assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()).unwrap(), set);
        }
    }

    #[test]
    fn apply_fields_v1_rejects_malformed() {
        for bad in [json!([]), json!({"f:a": 1}), json!({"k:notjson": {}}), json!({"i:x": {}}), json!({"noprefix": {}})]
        {
            assert!(FieldSet::from_fields_v1(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn apply_set_operations() {
        let p = |names: &[&str]| Path::fields(names);
        let mut a = FieldSet::new();
        a.insert(&p(&["data", "a"]));
        a.insert(&p(&["data", "b"]));
        a.insert(&p(&["spec"]));
        let mut b = FieldSet::new();
        b.insert(&p(&["data", "b"]));
        b.insert(&p(&["data", "c"]));
        let show = |s: &FieldSet| s.paths().iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(show(&a.union(&b)), [".data.a", ".data.b", ".data.c", ".spec"]);
        assert_eq!(show(&a.intersection(&b)), [".data.b"]);
        assert_eq!(show(&a.difference(&b)), [".data.a", ".spec"]);
        let mut data = FieldSet::new();
        data.insert(&p(&["data"]));
        assert_eq!(show(&a.difference(&data)), [".data.a", ".data.b", ".spec"]);
        assert_eq!(show(&a.recursive_difference(&data)), [".spec"]);
        assert!(a.has(&p(&["data", "a"])) && !a.has(&p(&["data"])));
        assert!(a.has_prefix(&p(&["data"])) && !a.has_prefix(&p(&["status"])));
    }
}
