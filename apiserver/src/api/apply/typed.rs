//! Values walked with their schema: the field set of a value, the merge of an applied
//! configuration into a live object, the comparison of two versions, and removal of owned
//! fields. All pure; errors are messages for a 400/422 (e.g. a list item without its key).
//!
//! What enters: JSON values (wire form) and a [`Schema`] node. What leaves: [`FieldSet`]s,
//! a merged value, or a [`Comparison`].

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

/// The path element of list item `item`, or why it has none.
fn item_element(
    list_type: &ListType,
    defaults: &BTreeMap<String, Value>,
    item: &Value,
    index: usize,
    path: &Path,
) -> Result<PathElement, TypedError> {
    match list_type {
        ListType::Atomic => Ok(PathElement::Index(index)),
        ListType::Set => match item {
            Value::Object(_) | Value::Array(_) => {
                Err(TypedError::SetItemNotScalar { path: path.clone(), found: kind_name(item) })
            }
            v => Ok(PathElement::Value(v.clone())),
        },
        ListType::Map(keys) => {
            let Value::Object(m) = item else {
                return Err(TypedError::MapItemNotMap(path.clone()));
            };
            let mut fields = Vec::with_capacity(keys.len());
            for k in keys {
                match m.get(k).or_else(|| defaults.get(k)) {
                    Some(v) => fields.push((k.clone(), v.clone())),
                    None => return Err(TypedError::MissingKey { path: path.clone(), key: k.clone() }),
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
    path: &Path,
) -> Result<Vec<PathElement>, TypedError> {
    let mut out: Vec<PathElement> = Vec::with_capacity(items.len());
    let mut seen = std::collections::BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let pe = item_element(list_type, defaults, item, i, path)?;
        if !seen.insert(pe.clone()) {
            return Err(TypedError::Duplicate { path: path.clone(), element: pe });
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
    walk_set(schema, schema.root(), value, &Path::default(), &mut set, 0)?;
    Ok(set)
}

fn walk_set(
    schema: &Schema,
    id: NodeId,
    v: &Value,
    path: &Path,
    set: &mut FieldSet,
    depth: usize,
) -> Result<(), TypedError> {
    if depth > MAX_DEPTH {
        return Err(TypedError::TooDeep(path.clone()));
    }
    let node = schema.node(id);
    match (node, v) {
        (Node::List { items, list_type, key_defaults }, Value::Array(list)) => {
            if *list_type == ListType::Atomic {
                set.insert(path);
                return Ok(());
            }
            let pes = list_elements(list_type, key_defaults, list, path)?;
            for (pe, item) in pes.into_iter().zip(list) {
                let child = path.child(pe);
                walk_set(schema, *items, item, &child, set, depth + 1)?;
                set.insert(&child);
            }
            Ok(())
        }
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(m)) => {
            for (key, val) in m {
                let Some((child_id, named)) = entry_node(node, key) else {
                    return Err(TypedError::Undeclared(path.child(PathElement::field(key))));
                };
                let child = path.child(PathElement::field(key));
                walk_set(schema, child_id, val, &child, set, depth + 1)?;
                let empty_map = matches!(val, Value::Object(o) if o.is_empty());
                if val.is_null() || empty_map || !named {
                    set.insert(&child);
                }
            }
            Ok(())
        }
        (Node::Map { .. } | Node::List { .. }, Value::Null) => Ok(()),
        _ => {
            set.insert(path);
            Ok(())
        }
    }
}

/// `config` merged into `live`: what the configuration sets wins; maps and set/map lists
/// are merged item by item, atomic values replaced. List order: the configuration's, with
/// items only the live object has kept where they were.
pub fn merge(schema: &Schema, live: &Value, config: &Value) -> Result<Value, TypedError> {
    merge_node(schema, schema.root(), live, config, &Path::default(), 0)
}

fn merge_node(
    schema: &Schema,
    id: NodeId,
    live: &Value,
    config: &Value,
    path: &Path,
    depth: usize,
) -> Result<Value, TypedError> {
    if depth > MAX_DEPTH {
        return Err(TypedError::TooDeep(path.clone()));
    }
    let node = schema.node(id);
    match (node, live, config) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (key, cv) in c {
                let child = path.child(PathElement::field(key));
                let merged = match (l.get(key), entry_node(node, key)) {
                    (Some(lv), Some((child_id, _))) => merge_node(schema, child_id, lv, cv, &child, depth + 1)?,
                    (_, None) => return Err(TypedError::Undeclared(child)),
                    (None, _) => cv.clone(),
                };
                out.insert(key.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(l), Value::Array(c))
            if *list_type != ListType::Atomic =>
        {
            let lpes = list_elements(list_type, key_defaults, l, path)?;
            let cpes = list_elements(list_type, key_defaults, c, path)?;
            let lpos = positions(&lpes);
            let cpos = positions(&cpes);
            let mut out = Vec::with_capacity(l.len() + c.len());
            let mut emitted = vec![false; c.len()];
            let mut next_config = 0;
            for (lpe, lv) in lpes.iter().zip(l) {
                match cpos.get(lpe).copied() {
                    None => out.push(lv.clone()),
                    Some(ci) => {
                        // The configuration's items up to this shared one come first.
                        while next_config <= ci {
                            if !emitted[next_config] {
                                emitted[next_config] = true;
                                let cpe = &cpes[next_config];
                                let cv = &c[next_config];
                                let child = path.child(cpe.clone());
                                match lpos.get(cpe).copied() {
                                    Some(li) => out.push(merge_node(schema, *items, &l[li], cv, &child, depth + 1)?),
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
    compare_node(schema, schema.root(), old, new, &Path::default(), &mut c, 0)?;
    Ok(c)
}

fn compare_node(
    schema: &Schema,
    id: NodeId,
    old: &Value,
    new: &Value,
    path: &Path,
    c: &mut Comparison,
    depth: usize,
) -> Result<(), TypedError> {
    if depth > MAX_DEPTH {
        return Err(TypedError::TooDeep(path.clone()));
    }
    let node = schema.node(id);
    match (node, old, new) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(o), Value::Object(n)) => {
            for (key, ov) in o {
                let child = path.child(PathElement::field(key));
                let Some((child_id, _)) = entry_node(node, key) else { continue };
                match n.get(key) {
                    Some(nv) => compare_node(schema, child_id, ov, nv, &child, c, depth + 1)?,
                    None => subtree(schema, child_id, ov, &child, &mut c.removed, depth + 1)?,
                }
            }
            for (key, nv) in n {
                if o.contains_key(key) {
                    continue;
                }
                let child = path.child(PathElement::field(key));
                let Some((child_id, _)) = entry_node(node, key) else { continue };
                subtree(schema, child_id, nv, &child, &mut c.added, depth + 1)?;
            }
            Ok(())
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(o), Value::Array(n))
            if *list_type != ListType::Atomic =>
        {
            let opes = list_elements(list_type, key_defaults, o, path)?;
            let npes = list_elements(list_type, key_defaults, n, path)?;
            let opos = positions(&opes);
            let npos = positions(&npes);
            for (ope, ov) in opes.iter().zip(o) {
                let child = path.child(ope.clone());
                match npos.get(ope).copied() {
                    Some(ni) => compare_node(schema, *items, ov, &n[ni], &child, c, depth + 1)?,
                    None => subtree(schema, *items, ov, &child, &mut c.removed, depth + 1)?,
                }
            }
            for (npe, nv) in npes.iter().zip(n) {
                if !opos.contains_key(npe) {
                    subtree(schema, *items, nv, &path.child(npe.clone()), &mut c.added, depth + 1)?;
                }
            }
            Ok(())
        }
        _ => {
            if old != new {
                c.modified.insert(path);
            }
            Ok(())
        }
    }
}

/// Every node of the subtree at `path` (itself included), as the typed walk visits them.
fn subtree(
    schema: &Schema,
    id: NodeId,
    v: &Value,
    path: &Path,
    set: &mut FieldSet,
    depth: usize,
) -> Result<(), TypedError> {
    if depth > MAX_DEPTH {
        return Err(TypedError::TooDeep(path.clone()));
    }
    set.insert(path);
    let node = schema.node(id);
    match (node, v) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(m)) => {
            for (key, val) in m {
                if let Some((child_id, _)) = entry_node(node, key) {
                    subtree(schema, child_id, val, &path.child(PathElement::field(key)), set, depth + 1)?;
                }
            }
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(list)) if *list_type != ListType::Atomic => {
            for (pe, item) in list_elements(list_type, key_defaults, list, path)?.into_iter().zip(list) {
                subtree(schema, *items, item, &path.child(pe), set, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Removes from `value` the fields of `last` (what a manager applied before) that nobody
/// owns any more: not in `owned` and with nothing owned below them. A named struct field
/// counts as applied when anything below it was (upstream's `EnsureNamedFieldsAreMembers`),
/// so dropping all of `data` drops `data` itself.
pub fn remove_unowned(schema: &Schema, value: &mut Value, last: &FieldSet, owned: &FieldSet) {
    remove_node(schema, schema.root(), value, last, owned, &Path::default());
}

fn remove_node(schema: &Schema, id: NodeId, value: &mut Value, last: &FieldSet, owned: &FieldSet, path: &Path) {
    let node = schema.node(id);
    match (node, value) {
        (Node::Map { atomic: false, .. } | Node::Deduced, Value::Object(m)) => {
            let mut drop = Vec::new();
            for pe in last.elements() {
                let PathElement::Field(key) = pe else { continue };
                let Some((child_id, named)) = entry_node(node, key) else { continue };
                let child = path.child(pe.clone());
                let removable = last.is_member(pe) || named;
                if removable && !owned.has_prefix(&child) {
                    drop.push(key.clone());
                } else if let (Some(sub), Some(v)) = (last.child(pe), m.get_mut(key)) {
                    remove_node(schema, child_id, v, sub, owned, &child);
                }
            }
            for key in drop {
                m.remove(&key);
            }
        }
        (Node::List { items, list_type, key_defaults }, Value::Array(list)) if *list_type != ListType::Atomic => {
            let Ok(pes) = list_elements(list_type, key_defaults, list, path) else { return };
            let mut keep = Vec::with_capacity(list.len());
            for (pe, mut item) in pes.into_iter().zip(std::mem::take(list)) {
                let child = path.child(pe.clone());
                let in_last = last.is_member(&pe) || last.child(&pe).is_some();
                if in_last && !owned.has_prefix(&child) {
                    continue;
                }
                if let Some(sub) = last.child(&pe) {
                    remove_node(schema, *items, &mut item, sub, owned, &child);
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
