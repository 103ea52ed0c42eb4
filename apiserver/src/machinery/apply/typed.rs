//! Values walked with their schema: the field set of a value, the merge of an applied
//! configuration into a live object, the comparison of two versions, and removal of owned
//! fields. All pure; errors are messages for a 400/422 (e.g. a list item without its key).
//!
//! What enters: JSON values (wire form) and a [`Schema`] node. What leaves: [`FieldSet`]s,
//! a merged value, or a [`Comparison`].
//!
//! Every walk visits each node of its values once and builds its sets node by node, below
//! the node being walked; where it is in the object is a chain of borrowed elements on the
//! stack ([`Trail`]), made into a [`Path`] only for an error.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, Path, PathElement};
use super::schema::{ListType, Node, NodeId, Schema, DEDUCED};

/// What changed between two versions of an object, as paths.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Adds what changed at and below the path of `pe` (`modified`: its own value did).
    fn add(&mut self, pe: &PathElement, modified: bool, below: Comparison) {
        if !below.added.is_empty() {
            self.added.add(pe.clone(), false, below.added);
        }
        if modified || !below.modified.is_empty() {
            self.modified.add(pe.clone(), modified, below.modified);
        }
        if !below.removed.is_empty() {
            self.removed.add(pe.clone(), false, below.removed);
        }
    }
}

/// Why a value cannot be walked with its schema (a 400 for the request that carried it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TypedError {
    #[error("{0}: object nested too deeply")]
    TooDeep(Path),
    #[error("{path}: set items must be scalars, found {found}")]
    SetItemNotScalar { path: Path, found: &'static str },
    #[error("{0}: associative list with keys has an element that is not a map")]
    MapItemNotMap(Path),
    #[error("{path}: associative list with keys has an element that omits key field {key:?} (and doesn't have default value)")]
    MissingKey { path: Path, key: String },
    #[error("{path}: duplicate entries for key {element}")]
    Duplicate { path: Path, element: PathElement },
    #[error("{0}: field not declared in schema")]
    Undeclared(Path),
}

/// Deepest value walked (the stored form is capped far below this).
const MAX_DEPTH: usize = 1000;

/// Where a walk is: the elements from the root, each borrowed from the frame that walks it.
#[derive(Clone, Copy)]
struct Trail<'a> {
    up: Option<(&'a Trail<'a>, &'a PathElement)>,
    depth: usize,
}

impl<'a> Trail<'a> {
    const ROOT: Trail<'static> = Trail { up: None, depth: 0 };

    fn child(&'a self, pe: &'a PathElement) -> Result<Trail<'a>, TypedError> {
        let t = Trail { up: Some((self, pe)), depth: self.depth + 1 };
        if t.depth > MAX_DEPTH {
            return Err(TypedError::TooDeep(t.path()));
        }
        Ok(t)
    }

    /// The path, made for an error message.
    fn path(&self) -> Path {
        let mut elems = Vec::with_capacity(self.depth);
        let mut at = self;
        while let Some((up, pe)) = at.up {
            elems.push(pe.clone());
            at = up;
        }
        elems.reverse();
        Path(elems)
    }
}

/// The path element of list item `item`, or why it has none.
fn item_element(
    list_type: &ListType,
    defaults: &BTreeMap<String, Value>,
    item: &Value,
    index: usize,
    at: &Trail<'_>,
) -> Result<PathElement, TypedError> {
    match list_type {
        ListType::Atomic => Ok(PathElement::Index(index)),
        ListType::Set => match item {
            Value::Object(_) | Value::Array(_) => {
                Err(TypedError::SetItemNotScalar { path: at.path(), found: kind_name(item) })
            }
            v => Ok(PathElement::value(v.clone())),
        },
        ListType::Map(keys) => {
            let Value::Object(m) = item else {
                return Err(TypedError::MapItemNotMap(at.path()));
            };
            let mut fields = Vec::with_capacity(keys.len());
            for k in keys {
                match m.get(k).or_else(|| defaults.get(k)) {
                    Some(v) => fields.push((k.clone(), v.clone())),
                    None => return Err(TypedError::MissingKey { path: at.path(), key: k.clone() }),
                }
            }
            Ok(PathElement::key(fields))
        }
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "a map",
        Value::Array(_) => "a list",
        _ => "a scalar",
    }
}

/// The elements of a list's items, refusing duplicates (upstream: "duplicate entries for
/// key"), for set and map lists.
fn list_elements(
    list_type: &ListType,
    defaults: &BTreeMap<String, Value>,
    items: &[Value],
    at: &Trail<'_>,
) -> Result<Vec<PathElement>, TypedError> {
    let mut out: Vec<PathElement> = Vec::with_capacity(items.len());
    let mut seen = std::collections::BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let pe = item_element(list_type, defaults, item, i, at)?;
        if !seen.insert(pe.clone()) {
            return Err(TypedError::Duplicate { path: at.path(), element: pe });
        }
        out.push(pe);
    }
    Ok(out)
}

/// Where each element is in its list.
fn positions(pes: &[PathElement]) -> BTreeMap<&PathElement, usize> {
    pes.iter().enumerate().map(|(i, pe)| (pe, i)).collect()
}

/// The node of a map's entry `key`: its named field, or its values' node.
fn entry_node(node: &Node, key: &str) -> Option<(NodeId, bool)> {
    match node {
        Node::Map { fields, values, .. } => match fields.get(key) {
            Some(id) => Some((*id, true)),
            None => values.map(|v| (v, false)),
        },
        Node::Deduced => Some((DEDUCED, false)),
        _ => None,
    }
}

/// The set of fields `value` sets, as upstream's `ToFieldSet`: every scalar and atomic
/// value, every list item, every map entry that is not a named struct field, and every
/// named field that is null or an empty map.
pub fn to_field_set(schema: &Schema, value: &Value) -> Result<FieldSet, TypedError> {
    let mut set = FieldSet::new();
    walk_set(schema, schema.root(), value, &Trail::ROOT, &mut set)?;
    Ok(set)
}

/// Adds the fields set below the walk's path to `below`; says whether the path itself is
/// one.
fn walk_set(schema: &Schema, id: NodeId, v: &Value, at: &Trail<'_>, below: &mut FieldSet) -> Result<bool, TypedError> {
    let node = schema.node(id);
    match (node, v) {
        (Node::List { items, list_type, key_defaults }, Value::Array(list)) => {
            if *list_type == ListType::Atomic {
                return Ok(true);
            }
            let pes = list_elements(list_type, key_defaults, list, at)?;
            for (pe, item) in pes.into_iter().zip(list) {
                let mut sub = FieldSet::new();
                walk_set(schema, *items, item, &at.child(&pe)?, &mut sub)?;
                below.add(pe, true, sub);
            }
            Ok(false)
        }
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(m)) => {
            for (key, val) in m {
                let pe = PathElement::field(key);
                let Some((child_id, named)) = entry_node(node, key) else {
                    return Err(TypedError::Undeclared(at.path().child(pe)));
                };
                let mut sub = FieldSet::new();
                let itself = walk_set(schema, child_id, val, &at.child(&pe)?, &mut sub)?;
                let empty_map = matches!(val, Value::Object(o) if o.is_empty());
                below.add(pe, itself || val.is_null() || empty_map || !named, sub);
            }
            Ok(false)
        }
        (Node::Map { .. } | Node::List { .. }, Value::Null) => Ok(false),
        _ => Ok(true),
    }
}

/// `config` merged into `live`: what the configuration sets wins; maps and set/map lists
/// are merged item by item, atomic values replaced. List order: the configuration's, with
/// items only the live object has kept where they were.
pub fn merge(schema: &Schema, live: &Value, config: &Value) -> Result<Value, TypedError> {
    merge_node(schema, schema.root(), live.clone(), config, &Trail::ROOT)
}

fn merge_node(schema: &Schema, id: NodeId, live: Value, config: &Value, at: &Trail<'_>) -> Result<Value, TypedError> {
    let node = schema.node(id);
    match (node, live, config) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(mut out), Value::Object(c)) => {
            for (key, cv) in c {
                let Some((child_id, _)) = entry_node(node, key) else {
                    return Err(TypedError::Undeclared(at.path().child(PathElement::field(key))));
                };
                match out.get_mut(key) {
                    Some(slot) => {
                        let pe = PathElement::field(key);
                        let lv = std::mem::take(slot);
                        *slot = merge_node(schema, child_id, lv, cv, &at.child(&pe)?)?;
                    }
                    None => {
                        out.insert(key.clone(), cv.clone());
                    }
                }
            }
            Ok(Value::Object(out))
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(l), Value::Array(c))
            if *list_type != ListType::Atomic =>
        {
            let lpes = list_elements(list_type, key_defaults, &l, at)?;
            let cpes = list_elements(list_type, key_defaults, c, at)?;
            let lpos = positions(&lpes);
            let cpos = positions(&cpes);
            let mut live_items: Vec<Option<Value>> = l.into_iter().map(Some).collect();
            let mut out = Vec::with_capacity(live_items.len() + c.len());
            let mut emitted = vec![false; c.len()];
            let mut next_config = 0;
            for (i, lpe) in lpes.iter().enumerate() {
                match cpos.get(lpe).copied() {
                    None => out.extend(live_items[i].take()),
                    Some(ci) => {
                        // The configuration's items up to this shared one come first.
                        while next_config <= ci {
                            if !emitted[next_config] {
                                emitted[next_config] = true;
                                let cpe = &cpes[next_config];
                                let cv = &c[next_config];
                                match lpos.get(cpe).and_then(|li| live_items[*li].take()) {
                                    Some(lv) => out.push(merge_node(schema, *items, lv, cv, &at.child(cpe)?)?),
                                    None => out.push(cv.clone()),
                                }
                            }
                            next_config += 1;
                        }
                    }
                }
            }
            for (i, cv) in c.iter().enumerate() {
                if !emitted[i] {
                    out.push(cv.clone());
                }
            }
            Ok(Value::Array(out))
        }
        _ => Ok(config.clone()),
    }
}

/// What changed from `old` to `new`: paths added, whose value changed, and removed.
/// A subtree present on one side only is counted node by node, as upstream counts it.
pub fn compare(schema: &Schema, old: &Value, new: &Value) -> Result<Comparison, TypedError> {
    let mut c = Comparison::default();
    compare_node(schema, schema.root(), old, new, &Trail::ROOT, &mut c)?;
    Ok(c)
}

/// Adds what changed below the walk's path to `below`; says whether the path's own value
/// changed.
fn compare_node(
    schema: &Schema,
    id: NodeId,
    old: &Value,
    new: &Value,
    at: &Trail<'_>,
    below: &mut Comparison,
) -> Result<bool, TypedError> {
    let node = schema.node(id);
    match (node, old, new) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(o), Value::Object(n)) => {
            for (key, ov) in o {
                let Some((child_id, _)) = entry_node(node, key) else { continue };
                let pe = PathElement::field(key);
                let here = at.child(&pe)?;
                match n.get(key) {
                    Some(nv) => {
                        let mut sub = Comparison::default();
                        let modified = compare_node(schema, child_id, ov, nv, &here, &mut sub)?;
                        below.add(&pe, modified, sub);
                    }
                    None => below.removed.add(pe.clone(), true, subtree(schema, child_id, ov, &here)?),
                }
            }
            for (key, nv) in n {
                if o.contains_key(key) {
                    continue;
                }
                let Some((child_id, _)) = entry_node(node, key) else { continue };
                let pe = PathElement::field(key);
                let sub = subtree(schema, child_id, nv, &at.child(&pe)?)?;
                below.added.add(pe, true, sub);
            }
            Ok(false)
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(o), Value::Array(n))
            if *list_type != ListType::Atomic =>
        {
            let opes = list_elements(list_type, key_defaults, o, at)?;
            let npes = list_elements(list_type, key_defaults, n, at)?;
            let opos = positions(&opes);
            let npos = positions(&npes);
            for (ope, ov) in opes.iter().zip(o) {
                let here = at.child(ope)?;
                match npos.get(ope).copied() {
                    Some(ni) => {
                        let mut sub = Comparison::default();
                        let modified = compare_node(schema, *items, ov, &n[ni], &here, &mut sub)?;
                        below.add(ope, modified, sub);
                    }
                    None => below.removed.add(ope.clone(), true, subtree(schema, *items, ov, &here)?),
                }
            }
            for (npe, nv) in npes.iter().zip(n) {
                if !opos.contains_key(npe) {
                    let sub = subtree(schema, *items, nv, &at.child(npe)?)?;
                    below.added.add(npe.clone(), true, sub);
                }
            }
            Ok(false)
        }
        _ => Ok(old != new),
    }
}

/// Every node below the walk's path, as the typed walk visits them (the path itself is the
/// caller's to add).
fn subtree(schema: &Schema, id: NodeId, v: &Value, at: &Trail<'_>) -> Result<FieldSet, TypedError> {
    let mut set = FieldSet::new();
    let node = schema.node(id);
    match (node, v) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(m)) => {
            for (key, val) in m {
                if let Some((child_id, _)) = entry_node(node, key) {
                    let pe = PathElement::field(key);
                    let sub = subtree(schema, child_id, val, &at.child(&pe)?)?;
                    set.add(pe, true, sub);
                }
            }
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(list)) if *list_type != ListType::Atomic => {
            for (pe, item) in list_elements(list_type, key_defaults, list, at)?.into_iter().zip(list) {
                let sub = subtree(schema, *items, item, &at.child(&pe)?)?;
                set.add(pe, true, sub);
            }
        }
        _ => {}
    }
    Ok(set)
}

/// Removes from `value` the fields of `last` (what a manager applied before) that nobody
/// owns any more: not in `owned` and with nothing owned below them. A named struct field
/// counts as applied when anything below it was (upstream's `EnsureNamedFieldsAreMembers`),
/// so dropping all of `data` drops `data` itself. `last` and `owned` are walked along with
/// the value.
pub fn remove_unowned(schema: &Schema, value: &mut Value, last: &FieldSet, owned: &FieldSet) {
    remove_node(schema, schema.root(), value, last, Some(owned), &Trail::ROOT);
}

/// `owned`: the owned paths below the walk's path (None: none).
fn remove_node(
    schema: &Schema,
    id: NodeId,
    value: &mut Value,
    last: &FieldSet,
    owned: Option<&FieldSet>,
    at: &Trail<'_>,
) {
    let owns = |pe: &PathElement| owned.is_some_and(|o| o.has_below(pe));
    let node = schema.node(id);
    match (node, value) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(m)) => {
            let mut drop = Vec::new();
            for pe in last.elements() {
                let PathElement::Field(key) = pe else { continue };
                let Some((child_id, named)) = entry_node(node, key) else { continue };
                let removable = last.is_member(pe) || named;
                if removable && !owns(pe) {
                    drop.push(key.to_string());
                } else if let (Some(sub), Some(v)) = (last.child(pe), m.get_mut(&**key)) {
                    let Ok(here) = at.child(pe) else { continue };
                    remove_node(schema, child_id, v, sub, owned.and_then(|o| o.child(pe)), &here);
                }
            }
            for key in drop {
                m.remove(&key);
            }
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(list)) if *list_type != ListType::Atomic => {
            let Ok(pes) = list_elements(list_type, key_defaults, list, at) else { return };
            let mut keep = Vec::with_capacity(list.len());
            for (pe, mut item) in pes.into_iter().zip(std::mem::take(list)) {
                let in_last = last.has_below(&pe);
                if in_last && !owns(&pe) {
                    continue;
                }
                if let (Some(sub), Ok(here)) = (last.child(&pe), at.child(&pe)) {
                    remove_node(schema, *items, &mut item, sub, owned.and_then(|o| o.child(&pe)), &here);
                }
                keep.push(item);
            }
            *list = keep;
        }
        _ => {}
    }
}

/// An empty object of the shape apply starts from when the object does not exist yet.
pub fn empty_object() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        let defs = json!({
            "Obj": {"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                }},
                "data": {"type": "object", "additionalProperties": {"type": "string"}},
                "spec": {"$ref": "#/definitions/Spec"}
            }},
            "Spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "args": {"type": "array", "items": {"type": "string"}},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "containers": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                            "items": {"type": "object", "properties": {"containerPort": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}}}}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}}
            }}
        });
        Schema::from_definitions(defs.as_object().unwrap(), "Obj").unwrap()
    }

    #[test]
    fn apply_field_set_of_values() {
        let s = schema();
        struct Case {
            value: Value,
            fields_v1: &'static str,
        }
        let cases = [
            Case {
                value: json!({"metadata": {"labels": {"app": "x"}}, "data": {"key": "v"}}),
                fields_v1: r#"{"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:app":{}}}}"#,
            },
            Case {
                value: json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}),
                fields_v1: r#"{"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{"f:containerPort":{},"f:protocol":{},".":{}}},".":{}}}}}"#,
            },
            // A key field left out takes its schema default.
            Case {
                value: json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}),
                fields_v1: r#"{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{"f:containerPort":{},".":{}}},".":{}}}}}"#,
            },
            // Atomic list and map: the field itself; a set: its values; empty map: a member.
            Case {
                value: json!({"spec": {"args": ["a", "b"], "selector": {"a": "b"}, "tags": ["y", "x"], "replicas": 3}, "data": {}}),
                fields_v1: r#"{"f:data":{},"f:spec":{"f:args":{},"f:replicas":{},"f:selector":{},"f:tags":{"v:\"x\"":{},"v:\"y\"":{}}}}"#,
            },
        ];
        for c in cases {
            assert_eq!(to_field_set(&s, &c.value).unwrap().to_fields_v1_string(), c.fields_v1, "{}", c.value);
        }
    }

    #[test]
    fn apply_field_set_rejects_bad_lists() {
        let s = schema();
        for (v, msg) in [
            (json!({"spec": {"containers": [{"image": "x"}]}}), "omits key field \"name\""),
            (json!({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}), "duplicate entries for key [name=\"a\"]"),
            (json!({"spec": {"tags": ["a", "a"]}}), "duplicate entries"),
            (json!({"spec": {"tags": [{"a": 1}]}}), "set items must be scalars"),
            (json!({"spec": {"unknown": 1}}), ".spec.unknown: field not declared in schema"),
        ] {
            let err = to_field_set(&s, &v).unwrap_err().to_string();
            assert!(err.contains(msg), "{err}");
        }
    }

    /// The reference page's "Merge strategy" table: atomic lists replaced, sets and map
    /// lists merged by item, granular maps by key, atomic maps replaced.
    #[test]
    fn apply_merge_strategies() {
        let s = schema();
        let cases = [
            (json!({"spec": {"args": ["a", "b"]}}), json!({"spec": {"args": ["c"]}}), json!({"spec": {"args": ["c"]}})),
            (
                json!({"spec": {"tags": ["a", "b"]}}),
                json!({"spec": {"tags": ["c", "a"]}}),
                json!({"spec": {"tags": ["c", "a", "b"]}}),
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}),
                json!({"spec": {"containers": [{"name": "b", "image": "3"}, {"name": "c"}]}}),
                json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "3"}, {"name": "c"}]}}),
            ),
            (json!({"data": {"a": "1"}}), json!({"data": {"b": "2"}}), json!({"data": {"a": "1", "b": "2"}})),
            (
                json!({"spec": {"selector": {"a": "1"}}}),
                json!({"spec": {"selector": {"b": "2"}}}),
                json!({"spec": {"selector": {"b": "2"}}}),
            ),
            (json!({}), json!({"data": {"b": "2"}}), json!({"data": {"b": "2"}})),
        ];
        for (live, config, want) in cases {
            assert_eq!(merge(&s, &live, &config).unwrap(), want, "{live} + {config}");
        }
    }

    #[test]
    fn apply_compare() {
        let s = schema();
        let old = json!({"data": {"a": "1", "b": "2"}, "spec": {"containers": [{"name": "a", "image": "1"}]}});
        let new = json!({"data": {"a": "9", "c": "3"}, "metadata": {"labels": {"x": "y"}}, "spec": {"containers": [{"name": "a", "image": "1"}]}});
        let c = compare(&s, &old, &new).unwrap();
        let show = |f: &FieldSet| f.paths().iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(show(&c.added), [".data.c", ".metadata", ".metadata.labels", ".metadata.labels.x"]);
        assert_eq!(show(&c.modified), [".data.a"]);
        assert_eq!(show(&c.removed), [".data.b"]);
    }
}
