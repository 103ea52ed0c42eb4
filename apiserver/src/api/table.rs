//! Server-side printing: `meta.k8s.io/v1` Table responses built from a kind's columns.

use serde_json::{json, Map, Value};

use crate::registry::ResourceDef;

/// What each row's `object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// `columnDefinitions` for a kind: Name first, then the strategy's columns, or the
/// printer-less default (`Created At`).
pub fn column_definitions(def: &ResourceDef) -> Vec<Value> {
    let name_last = def.strategy.table().is_some_and(|t| t.name_column_last());
    let mut cols = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": u32::from(name_last),
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
    })];
    let custom = def.strategy.table().map(|t| t.columns()).unwrap_or_default();
    if custom.is_empty() {
        cols.push(json!({
            "name": "Created At", "type": "date", "format": "", "priority": 0,
            "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
        }));
    } else {
        for c in custom {
            cols.push(json!({
                "name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority,
            }));
        }
    }
    if name_last {
        cols.rotate_left(1);
    }
    cols
}

/// One row for an object.
pub fn row(def: &ResourceDef, obj: &Value, include: IncludeObject, now: chrono::DateTime<chrono::Utc>) -> Value {
    let mut cells = vec![Value::String(crate::meta::name(obj).to_string())];
    let printer = def.strategy.table().filter(|t| !t.columns().is_empty());
    match printer {
        Some(printer) => cells.extend(printer.cells(obj, now)),
        None => {
            cells.push(obj.get("metadata").and_then(|m| m.get("creationTimestamp")).cloned().unwrap_or(Value::Null))
        }
    }
    if def.strategy.table().is_some_and(|t| t.name_column_last()) {
        cells.rotate_left(1);
    }
    let mut row = Map::new();
    row.insert("cells".into(), Value::Array(cells));
    match include {
        IncludeObject::None => {}
        IncludeObject::Object => {
            row.insert("object".into(), obj.clone());
        }
        IncludeObject::Metadata => {
            row.insert("object".into(), partial_object_metadata(obj));
        }
    }
    Value::Object(row)
}

/// `PartialObjectMetadata` of an object (its metadata only).
pub fn partial_object_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A Table of `objs` with the given list metadata.
pub fn table(def: &ResourceDef, objs: &[Value], include: IncludeObject, list_meta: Value, with_columns: bool) -> Value {
    let now = chrono::Utc::now();
    let mut ordered: Vec<&Value> = objs.iter().collect();
    if let Some(printer) = def.strategy.table() {
        printer.order_table_rows(&mut ordered);
    }
    let rows: Vec<Value> = ordered.into_iter().map(|o| row(def, o, include, now)).collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "rows": rows,
    });
    if with_columns {
        t["columnDefinitions"] = Value::Array(column_definitions(def));
    } else {
        t["columnDefinitions"] = Value::Null;
    }
    t
}
