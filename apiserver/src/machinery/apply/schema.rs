//! The schema apply merges by: structured-merge-diff's type model, built from the OpenAPI
//! schemas kustos already has.
//!
//! What enters: OpenAPI schema JSON, either a document's definitions with `$ref`s
//! (`#/definitions/<name>`, `#/components/schemas/<name>`, `allOf: [{$ref}]`: the built-in
//! kinds, from `crate::openapi`) or a CRD version's `openAPIV3Schema`
//! ([`Schema::from_crd`]). What leaves: a [`Schema`], a graph of [`Node`]s (recursive
//! definitions become cycles, resolved once).
//!
//! The rules, as upstream's OpenAPI-to-schema conversion:
//! - `type: array`: `x-kubernetes-list-type` `atomic` (also when absent), `set`, or `map`
//!   with `x-kubernetes-list-map-keys`.
//! - `type: object`: `properties` make a struct, `additionalProperties` a map (both may be
//!   set); `x-kubernetes-map-type: atomic` makes either atomic, `granular` (the default)
//!   keeps them field by field. `x-kubernetes-preserve-unknown-fields` and schemaless
//!   objects take unknown keys, whose values are typed by what they hold ([`Node::Deduced`]).
//! - anything else (strings, numbers, int-or-string, ...) is a scalar.
//!
//! The built-in kinds' list annotations are those `crate::openapi` adds to the
//! k8s-openapi schemas, generated from the markers of upstream's Go types
//! (`openapi/extensions.rs`); a list no marker annotates is atomic here, as upstream.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{json, Map, Value};

/// Index of a node in its [`Schema`].
pub type NodeId = usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    Atomic,
    Set,
    /// An associative list keyed by these fields.
    Map(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Scalar,
    List {
        items: NodeId,
        list_type: ListType,
        /// Defaults of a map list's key fields: an item without the key has this value.
        key_defaults: BTreeMap<String, Value>,
    },
    /// A struct (named `fields`), a map (`values`), or both.
    Map {
        fields: BTreeMap<String, NodeId>,
        values: Option<NodeId>,
        atomic: bool,
    },
    /// No schema: maps are granular with deduced values, lists atomic, the rest scalars.
    Deduced,
}

/// Why a schema cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("schema: no definition {0:?}")]
    NoDefinition(String),
    #[error("schema: nested too deeply")]
    TooDeep,
    #[error("schema: x-kubernetes-list-type map without x-kubernetes-list-map-keys")]
    MapWithoutKeys,
    /// A CRD schema that does not encode as JSON.
    #[error("{0}")]
    Encode(serde_json::Error),
}

#[derive(Debug, Clone)]
pub struct Schema {
    nodes: Vec<Node>,
    root: NodeId,
}

/// The deduced node every schema has at index 0.
pub const DEDUCED: NodeId = 0;

impl Schema {
    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes.get(id).unwrap_or(&Node::Deduced)
    }

    pub fn root(&self) -> NodeId {
        self.root
    }

    /// A schema that knows nothing: every object deduced from its value.
    pub fn deduced() -> Schema {
        Schema { nodes: vec![Node::Deduced], root: DEDUCED }
    }

    /// The kind `root` of an OpenAPI document's `definitions` (v2) or
    /// `components.schemas` (v3).
    pub fn from_definitions(defs: &Map<String, Value>, root: &str) -> Result<Schema, SchemaError> {
        let mut b = Builder { defs, nodes: vec![Node::Deduced], named: HashMap::new() };
        let root = b.named(root)?;
        Ok(Schema { nodes: b.nodes, root })
    }

    /// One inline schema (refs resolved in `defs`, which may be empty).
    pub fn from_value(schema: &Value, defs: &Map<String, Value>) -> Result<Schema, SchemaError> {
        let mut b = Builder { defs, nodes: vec![Node::Deduced], named: HashMap::new() };
        let root = b.compile(schema, 0)?;
        Ok(Schema { nodes: b.nodes, root })
    }

    /// A CRD version's `openAPIV3Schema`. As apiextensions-apiserver serves it, the root
    /// gets `apiVersion`, `kind` and the full `ObjectMeta` whatever the CRD says of them.
    pub fn from_crd(props: &JSONSchemaProps) -> Result<Schema, SchemaError> {
        let mut v = serde_json::to_value(props).map_err(SchemaError::Encode)?;
        if let Some(root) = v.as_object_mut() {
            let props = root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
            if let Some(props) = props.as_object_mut() {
                props.insert("apiVersion".into(), json!({"type": "string"}));
                props.insert("kind".into(), json!({"type": "string"}));
                props.insert("metadata".into(), object_meta());
            }
        }
        Schema::from_value(&v, &Map::new())
    }
}

/// `ObjectMeta` with upstream's list and map annotations (as the served OpenAPI has them).
fn object_meta() -> Value {
    let string = json!({"type": "string"});
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "properties": {
            "name": string, "generateName": string, "namespace": string, "selfLink": string,
            "uid": string, "resourceVersion": string, "generation": {"type": "integer"},
            "creationTimestamp": string, "deletionTimestamp": string,
            "deletionGracePeriodSeconds": {"type": "integer"},
            "labels": string_map, "annotations": string_map,
            "finalizers": {"type": "array", "items": string, "x-kubernetes-list-type": "set"},
            "ownerReferences": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["uid"],
                "items": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "properties": {
                        "apiVersion": string, "kind": string, "name": string, "uid": string,
                        "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}
                    }
                }
            },
            "managedFields": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "atomic"}
        }
    })
}

/// Deepest nesting of inline schemas compiled (refs do not count: they are resolved once).
const MAX_DEPTH: usize = 200;

struct Builder<'a> {
    defs: &'a Map<String, Value>,
    nodes: Vec<Node>,
    named: HashMap<String, NodeId>,
}

fn ref_name(r: &str) -> &str {
    r.rsplit('/').next().unwrap_or(r)
}

impl Builder<'_> {
    fn named(&mut self, name: &str) -> Result<NodeId, SchemaError> {
        if let Some(id) = self.named.get(name) {
            return Ok(*id);
        }
        let Some(def) = self.defs.get(name) else {
            return Err(SchemaError::NoDefinition(name.to_string()));
        };
        // Reserve the id first: definitions may refer to themselves.
        let id = self.nodes.len();
        self.nodes.push(Node::Deduced);
        self.named.insert(name.to_string(), id);
        let node = self.node_of(def, 0)?;
        self.nodes[id] = node;
        Ok(id)
    }

    /// The `default` of property `name` of an items schema (through one `$ref`).
    fn property_default(&self, items: &Value, name: &str) -> Option<Value> {
        let items = match reference(items) {
            Some(r) => self.defs.get(ref_name(r))?,
            None => items,
        };
        let prop = items.get("properties")?.get(name)?;
        let prop = match reference(prop) {
            Some(r) => self.defs.get(ref_name(r))?,
            None => prop,
        };
        prop.get("default").cloned()
    }

    fn compile(&mut self, s: &Value, depth: usize) -> Result<NodeId, SchemaError> {
        if let Some(r) = reference(s) {
            return self.named(ref_name(r));
        }
        let node = self.node_of(s, depth)?;
        if node == Node::Deduced {
            return Ok(DEDUCED);
        }
        self.nodes.push(node);
        Ok(self.nodes.len() - 1)
    }

    fn node_of(&mut self, s: &Value, depth: usize) -> Result<Node, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep);
        }
        let Value::Object(m) = s else { return Ok(Node::Deduced) };
        if let Some(r) = reference(s) {
            let id = self.named(ref_name(r))?;
            return Ok(self.nodes.get(id).cloned().unwrap_or(Node::Deduced));
        }
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        let map_atomic = m.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        match ty {
            "array" => {
                let items = match m.get("items") {
                    Some(i) => self.compile(i, depth + 1)?,
                    None => DEDUCED,
                };
                let mut key_defaults = BTreeMap::new();
                let list_type = match m.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => {
                        let keys: Vec<String> = m
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                            .unwrap_or_default();
                        if keys.is_empty() {
                            return Err(SchemaError::MapWithoutKeys);
                        }
                        for k in &keys {
                            if let Some(d) = m.get("items").and_then(|i| self.property_default(i, k)) {
                                key_defaults.insert(k.clone(), d);
                            }
                        }
                        ListType::Map(keys)
                    }
                    _ => ListType::Atomic,
                };
                Ok(Node::List { items, list_type, key_defaults })
            }
            "object" | "" => {
                let props = m.get("properties").and_then(Value::as_object);
                let additional = m.get("additionalProperties");
                let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
                if ty.is_empty() && props.is_none() && additional.is_none() {
                    // int-or-string, preserve-unknown-fields without a type, or no schema.
                    let int_or_string = m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
                    let scalar_format = m.contains_key("format") || m.contains_key("enum");
                    return Ok(if int_or_string || scalar_format { Node::Scalar } else { Node::Deduced });
                }
                let mut fields = BTreeMap::new();
                if let Some(props) = props {
                    for (name, p) in props {
                        let id = self.compile(p, depth + 1)?;
                        fields.insert(name.clone(), id);
                    }
                }
                let values = match additional {
                    Some(Value::Bool(false)) => None,
                    Some(Value::Bool(true)) => Some(DEDUCED),
                    Some(v @ Value::Object(_)) => Some(self.compile(v, depth + 1)?),
                    _ if preserve || props.is_none() => Some(DEDUCED),
                    _ => None,
                };
                Ok(Node::Map { fields, values, atomic: map_atomic })
            }
            _ => Ok(Node::Scalar),
        }
    }
}

/// `$ref`, directly or as the one entry of `allOf` (how v3 documents annotate a ref).
fn reference(s: &Value) -> Option<&str> {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        return Some(r);
    }
    match s.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
        Some([one]) => one.get("$ref").and_then(Value::as_str),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field<'a>(s: &'a Schema, id: NodeId, name: &str) -> &'a Node {
        match s.node(id) {
            Node::Map { fields, .. } => s.node(fields[name]),
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn apply_schema_from_crd_extensions() {
        let v = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["port", "protocol"],
                            "items": {"type": "object", "properties": {"port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}
                        },
                        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "args": {"type": "array", "items": {"type": "string"}},
                        "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "anything": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true}
                    }
                }
            }
        });
        let props: JSONSchemaProps = serde_json::from_value(v).unwrap();
        let s = Schema::from_crd(&props).unwrap();
        let spec = match s.node(s.root()) {
            Node::Map { fields, .. } => fields["spec"],
            other => panic!("{other:?}"),
        };
        let list = |name| match field(&s, spec, name) {
            Node::List { list_type, .. } => list_type.clone(),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(list("ports"), ListType::Map(vec!["port".into(), "protocol".into()]));
        let Node::List { key_defaults, .. } = field(&s, spec, "ports") else { panic!() };
        assert_eq!(key_defaults.get("protocol"), Some(&json!("TCP")));
        assert_eq!(list("tags"), ListType::Set);
        assert_eq!(list("args"), ListType::Atomic, "lists without a type are atomic");
        assert!(matches!(field(&s, spec, "selector"), Node::Map { atomic: true, .. }));
        assert!(matches!(field(&s, spec, "labels"), Node::Map { atomic: false, values: Some(_), .. }));
        assert!(matches!(field(&s, spec, "anything"), Node::Map { values: Some(DEDUCED), .. }));
        assert_eq!(field(&s, spec, "port"), &Node::Scalar);
        // apiVersion, kind and ObjectMeta are the server's, whatever the CRD says.
        let meta = match s.node(s.root()) {
            Node::Map { fields, .. } => {
                assert_eq!(s.node(fields["apiVersion"]), &Node::Scalar);
                fields["metadata"]
            }
            other => panic!("{other:?}"),
        };
        assert!(matches!(field(&s, meta, "labels"), Node::Map { values: Some(_), atomic: false, .. }));
        assert!(matches!(field(&s, meta, "finalizers"), Node::List { list_type: ListType::Set, .. }));
    }

    #[test]
    fn apply_schema_refs_and_recursion() {
        let defs = json!({
            "T": {"type": "object", "properties": {
                "child": {"$ref": "#/definitions/T"},
                "wrapped": {"allOf": [{"$ref": "#/components/schemas/U"}], "description": "d"}
            }},
            "U": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}
        });
        let s = Schema::from_definitions(defs.as_object().unwrap(), "T").unwrap();
        let Node::Map { fields, .. } = s.node(s.root()) else { panic!() };
        assert_eq!(fields["child"], s.root(), "a self-reference is the same node");
        assert!(matches!(s.node(fields["wrapped"]), Node::List { list_type: ListType::Set, .. }));
        assert!(Schema::from_definitions(defs.as_object().unwrap(), "Missing").is_err());
        let bad = json!({"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}});
        assert!(Schema::from_value(&bad, &Map::new()).is_err());
    }

    /// The built-in kinds: from the OpenAPI v2 document kustos serves.
    #[test]
    fn apply_schema_from_served_openapi() {
        let reg = crate::registry::Registry::builtin();
        let doc: Value = serde_json::from_slice(crate::openapi::OpenApi::new(&reg).v2()).unwrap();
        let defs = doc["definitions"].as_object().unwrap();
        let s = Schema::from_definitions(defs, "io.k8s.api.core.v1.ConfigMap").unwrap();
        let meta = match s.node(s.root()) {
            Node::Map { fields, .. } => {
                assert!(matches!(s.node(fields["data"]), Node::Map { values: Some(_), atomic: false, .. }));
                fields["metadata"]
            }
            other => panic!("{other:?}"),
        };
        let Node::List { items, list_type, .. } = field(&s, meta, "ownerReferences") else { panic!() };
        assert_eq!(list_type, &ListType::Map(vec!["uid".into()]));
        assert!(matches!(s.node(*items), Node::Map { atomic: true, .. }), "OwnerReference is an atomic struct");
        assert!(matches!(field(&s, meta, "finalizers"), Node::List { list_type: ListType::Set, .. }));
        assert!(matches!(field(&s, meta, "labels"), Node::Map { values: Some(_), atomic: false, .. }));
    }
}
