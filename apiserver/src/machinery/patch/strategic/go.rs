//! Go's view of decoded JSON values, for strategic-merge error texts: dynamic types
//! (`map[string]interface {}`), `%v` and `%s` renderings.

use serde_json::{Map, Value};

use super::SmpError;

/// The Go dynamic type of a decoded JSON value (upstream compares these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Null,
    Bool,
    Int,
    Float,
    String,
    Array,
    Object,
}

pub(super) fn kind_of(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) if n.is_i64() => Kind::Int,
        Value::Number(_) => Kind::Float,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    }
}

pub(super) fn go_type_name(v: &Value) -> &'static str {
    match kind_of(v) {
        Kind::Null => "<nil>",
        Kind::Bool => "bool",
        Kind::Int => "int64",
        Kind::Float => "float64",
        Kind::String => "string",
        Kind::Array => "[]interface {}",
        Kind::Object => "map[string]interface {}",
    }
}

/// Go's `%v` for a float64.
pub(super) fn go_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return format!("{f}");
    }
    let exp = f.abs().log10().floor();
    if (-4.0..21.0).contains(&exp) {
        format!("{f}")
    } else {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{mantissa}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// Go's `%v` for a decoded JSON value (`map[k:v]`, `[a b]`, `<nil>`).
pub(super) fn go_sprint(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_sprint).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => go_sprint_map(m),
    }
}

pub(super) fn go_sprint_map(m: &Map<String, Value>) -> String {
    let mut entries: Vec<(&String, &Value)> = m.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let parts: Vec<String> = entries.iter().map(|(k, v)| format!("{k}:{}", go_sprint(v))).collect();
    format!("map[{}]", parts.join(" "))
}

/// Go's `%s` for a decoded JSON value.
pub(super) fn go_sprint_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Bool(_) | Value::Number(_) => format!("%!s({}={})", go_type_name(v), go_sprint(v)),
        other => go_sprint(other),
    }
}

pub(super) fn err_bad_arg_type(expected: &str, actual: &Value) -> SmpError {
    SmpError::Bad(format!("expected a {expected}, but received a {}", go_type_name(actual)))
}

pub(super) fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> SmpError {
    SmpError::Bad(format!("map: {} does not contain declared merge key: {key}", go_sprint_map(m)))
}

pub(super) fn err_bad_patch_type(directive: &Value, m: &Map<String, Value>) -> SmpError {
    SmpError::Bad(format!("unknown patch type: {} in map: {}", go_sprint_s(directive), go_sprint_map(m)))
}

pub(super) const MAP_TYPE: &str = "map[string]interface {}";
pub(super) const SLICE_TYPE: &str = "[]interface {}";
