//! Custom resources: the strategy every version of a CustomResourceDefinition is served
//! with (after upstream's `apiextensions-apiserver/pkg/registry/customresource`), and the
//! Table columns from `additionalPrinterColumns` with the JSONPath subset they use.

use std::sync::Arc;

use serde_json::{json, Value};

use super::schema::Structural;
use super::{human_duration, Column, StatusStrategy, Strategy, TableStrategy, WriteStrategy};
use crate::error::FieldError;

/// One `additionalPrinterColumns` entry, compiled.
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub column: Column,
    pub path: JsonPath,
}

/// The rules of one served version of a CRD.
pub struct CustomStrategy {
    pub schema: Arc<Structural>,
    /// The version's `openAPIV3Schema` as given (for OpenAPI documents).
    pub openapi: Value,
    /// `subresources.status` is declared.
    pub status: bool,
    /// Empty: upstream's default columns (Age).
    pub columns: Vec<PrinterColumn>,
}

impl Strategy for CustomStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        let mut out = obj.clone();
        let mut budget = super::budget::budget_for(super::budget::json_len(obj), super::budget::BYTES_PER_JSON_BYTE);
        self.schema
            .apply_defaults(&mut out, &mut budget)
            .map_err(|e| <serde_json::Error as serde::de::Error>::custom(e.to_string()))?;
        self.schema.prune(&mut out, true);
        Ok(out)
    }

    fn openapi_schema(&self) -> Option<Value> {
        Some(self.openapi.clone())
    }

    fn strategic_merge_patch(&self) -> bool {
        false
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn status(&self) -> Option<&dyn StatusStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for CustomStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if self.status {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.status {
            if let Some(m) = new.as_object_mut() {
                match old.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        self.schema.validate(obj, "", &mut errs);
        errs
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

impl StatusStrategy for CustomStrategy {
    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        if sub != "status" {
            return;
        }
        // Everything but status (and the metadata the caller already reset) comes from old.
        let status = new.get("status").cloned();
        let metadata = new.get("metadata").cloned();
        let mut out = old.clone();
        if let Some(m) = out.as_object_mut() {
            match status {
                Some(s) => m.insert("status".into(), s),
                None => m.remove("status"),
            };
            if let Some(md) = metadata {
                m.insert("metadata".into(), md);
            }
        }
        *new = out;
    }

    fn reset_fields(&self, sub: &str) -> super::ResetFields {
        if self.status {
            super::status_reset_fields(sub)
        } else {
            &[]
        }
    }
}

impl TableStrategy for CustomStrategy {
    fn columns(&self) -> Vec<Column> {
        if self.columns.is_empty() {
            return vec![Column {
                name: "Age",
                type_: "date",
                format: "",
                description: "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
                priority: 0,
            }];
        }
        self.columns.iter().map(|c| c.column.clone()).collect()
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        if self.columns.is_empty() {
            return vec![date_cell(obj.get("metadata").and_then(|m| m.get("creationTimestamp")), now)];
        }
        self.columns.iter().map(|c| cell(&c.column, &c.path, obj, now)).collect()
    }
}

fn date_cell(v: Option<&Value>, now: chrono::DateTime<chrono::Utc>) -> Value {
    match v.and_then(Value::as_str).and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()) {
        Some(t) => {
            let secs = (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
            Value::String(human_duration(secs))
        }
        None => Value::Null,
    }
}

/// A cell as upstream's CRD table convertor makes it: nothing found → null; dates → age;
/// one value → that value (strings for string columns); several → joined with commas.
fn cell(col: &Column, path: &JsonPath, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
    let found = path.find(obj);
    if found.is_empty() {
        return Value::Null;
    }
    if col.type_ == "date" {
        return date_cell(found.first().copied(), now);
    }
    if found.len() == 1 {
        let v = found[0];
        return match (col.type_, v) {
            ("string", Value::String(_)) => v.clone(),
            ("string", other) => Value::String(other.to_string()),
            _ => v.clone(),
        };
    }
    let parts: Vec<String> =
        found.iter().map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).collect();
    Value::String(parts.join(","))
}

// ---------------------------------------------------------------------------------------
// JSONPath subset

/// One step of a JSONPath.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Key(String),
    Index(usize),
    All,
    /// `[?(@.a.b=="v")]`: array elements whose path equals the literal.
    Filter(Vec<String>, Value),
}

/// The JSONPath subset printer columns use: `.a.b`, `.a['b.c']`, `.a[0]`, `.a[*].b`,
/// `.a[?(@.type=="Ready")].status`.
/// Why a column's JSONPath is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    #[error("must be a simple json path starting with .")]
    NotSimple,
    #[error("unterminated [ in {0:?}")]
    Unterminated(String),
    #[error("unexpected character at {at} in {src:?}")]
    UnexpectedCharacter { at: usize, src: String },
    #[error("unsupported filter {0:?}")]
    UnsupportedFilter(String),
    #[error("unsupported filter value {0:?}")]
    UnsupportedFilterValue(String),
    #[error("unsupported subscript [{0}]")]
    UnsupportedSubscript(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(pub Vec<Step>);

impl JsonPath {
    /// Parse; the path must start with `.` (upstream: "must be a simple json path starting with .").
    pub fn parse(src: &str) -> Result<JsonPath, JsonPathError> {
        let s = src.trim();
        let s = s.strip_prefix('{').and_then(|x| x.strip_suffix('}')).unwrap_or(s);
        if !s.starts_with('.') {
            return Err(JsonPathError::NotSimple);
        }
        let mut steps = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'.' => {
                    let start = i + 1;
                    let mut j = start;
                    while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                        j += 1;
                    }
                    if j == start {
                        return Err(JsonPathError::NotSimple);
                    }
                    steps.push(Step::Key(s[start..j].to_string()));
                    i = j;
                }
                b'[' => {
                    let Some(end) = find_close(s, i) else { return Err(JsonPathError::Unterminated(src.to_string())) };
                    let inner = s[i + 1..end].trim();
                    steps.push(bracket(inner)?);
                    i = end + 1;
                }
                _ => return Err(JsonPathError::UnexpectedCharacter { at: i, src: src.to_string() }),
            }
        }
        Ok(JsonPath(steps))
    }

    /// Every value the path selects.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut cur = vec![root];
        for step in &self.0 {
            let mut next = Vec::new();
            for v in cur {
                match step {
                    Step::Key(k) => next.extend(v.get(k.as_str())),
                    Step::Index(n) => next.extend(v.as_array().and_then(|a| a.get(*n))),
                    Step::All => match v {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    },
                    Step::Filter(path, want) => {
                        for item in v.as_array().into_iter().flatten() {
                            let got = path.iter().try_fold(item, |x, k| x.get(k.as_str()));
                            if got == Some(want) {
                                next.push(item);
                            }
                        }
                    }
                }
            }
            cur = next;
        }
        cur
    }
}

fn find_close(s: &str, open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s[open..].char_indices().skip(1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ']') => return Some(open + i),
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|x| x.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
}

fn bracket(inner: &str) -> Result<Step, JsonPathError> {
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Ok(n) = inner.parse::<usize>() {
        return Ok(Step::Index(n));
    }
    if let Some(k) = unquote(inner) {
        return Ok(Step::Key(k.to_string()));
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|x| x.strip_suffix(')')) {
        let unsupported = || JsonPathError::UnsupportedFilter(inner.to_string());
        let (lhs, rhs) = f.split_once("==").ok_or_else(unsupported)?;
        let lhs = lhs.trim().strip_prefix("@.").ok_or_else(unsupported)?;
        let rhs = rhs.trim();
        let want = match unquote(rhs) {
            Some(s) => Value::String(s.to_string()),
            None => serde_json::from_str(rhs).map_err(|_| JsonPathError::UnsupportedFilterValue(rhs.to_string()))?,
        };
        return Ok(Step::Filter(lhs.split('.').map(str::to_string).collect(), want));
    }
    Err(JsonPathError::UnsupportedSubscript(inner.to_string()))
}

/// Build a column from `additionalPrinterColumns[i]` fields (names are interned).
pub fn printer_column(
    name: &str,
    type_: &str,
    format: &str,
    description: &str,
    priority: u32,
    json_path: &str,
) -> Result<PrinterColumn, JsonPathError> {
    use super::intern::intern;
    let path = JsonPath::parse(json_path)?;
    let description = if description.is_empty() {
        format!("Custom resource definition column (in JSONPath format): {json_path}")
    } else {
        description.to_string()
    };
    Ok(PrinterColumn {
        column: Column {
            name: intern(name),
            type_: intern(type_),
            format: intern(format),
            description: intern(&description),
            priority,
        },
        path,
    })
}

/// A `{"type": "object"}` schema for OpenAPI with `metadata` as ObjectMeta, as upstream
/// publishes custom resources.
pub fn openapi_schema(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(m) = s.as_object_mut() {
        let props = m.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}),
            );
            p.insert(
                "kind".into(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}),
            );
            p.insert(
                "metadata".into(),
                json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
            );
        }
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn obj() -> Value {
        json!({
            "metadata": {"name": "a", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "spec": {"size": 3, "tags": ["x", "y"], "a.b": "dotted"},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]},
        })
    }

    #[test]
    fn json_path_subset() {
        let cases: &[(&str, &str, Vec<Value>)] = &[
            ("key", ".spec.size", vec![json!(3)]),
            ("index", ".spec.tags[1]", vec![json!("y")]),
            ("wildcard", ".spec.tags[*]", vec![json!("x"), json!("y")]),
            ("quoted key", ".spec['a.b']", vec![json!("dotted")]),
            ("filter", ".status.conditions[?(@.type==\"Ready\")].status", vec![json!("True")]),
            ("filter single quotes", ".status.conditions[?(@.type=='Synced')].status", vec![json!("False")]),
            ("braces", "{.spec.size}", vec![json!(3)]),
            ("missing", ".spec.nothing", vec![]),
        ];
        let o = obj();
        for (name, src, want) in cases {
            let p = JsonPath::parse(src).unwrap_or_else(|e| panic!("case {name}: {e}"));
            let got: Vec<Value> = p.find(&o).into_iter().cloned().collect();
            assert_eq!(&got, want, "case {name}");
        }
        for (name, src) in [("no dot", "spec.size"), ("empty key", ".spec..size"), ("bad bracket", ".spec[")] {
            assert!(JsonPath::parse(src).is_err(), "case {name}: {src} must not parse");
        }
    }

    #[test]
    fn printer_cells_follow_column_types() {
        let now = chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
        let cases: &[(&str, &str, &str, Value)] = &[
            ("integer", "integer", ".spec.size", json!(3)),
            ("string of a number", "string", ".spec.size", json!("3")),
            ("condition", "string", ".status.conditions[?(@.type==\"Ready\")].status", json!("True")),
            ("several values", "string", ".spec.tags[*]", json!("x,y")),
            ("date is an age", "date", ".metadata.creationTimestamp", json!("60m")),
            ("missing is null", "string", ".spec.none", Value::Null),
        ];
        for (name, ty, path, want) in cases {
            let c = printer_column("C", ty, "", "", 0, path).unwrap();
            assert_eq!(cell(&c.column, &c.path, &obj(), now), *want, "case {name}");
        }
    }
}
