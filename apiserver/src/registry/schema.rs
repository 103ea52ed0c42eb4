//! Structural schemas of CustomResourceDefinitions: what apiextensions-apiserver does with a
//! version's `openAPIV3Schema` when it serves custom resources. All functions are pure.
//!
//! - [`Structural::from_props`] checks that a schema is structural (every node says its
//!   `type`, arrays say their `items`, `properties` and `additionalProperties` are not both
//!   set, ...) and compiles it (patterns become `Regex`es once, not per request).
//! - [`Structural::apply_defaults`] fills in `default`s of absent (or, when not nullable,
//!   null) fields, like upstream's structural defaulting.
//! - [`Structural::prune`] drops fields the schema does not specify, unless a node has
//!   `x-kubernetes-preserve-unknown-fields: true` (or is an embedded resource's metadata).
//! - [`Structural::validate`] checks type, required, enum, pattern, bounds, lengths, item
//!   counts and the common formats, with upstream's messages
//!   (`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`).
//!
//! Why not a JSON-schema crate: the `x-kubernetes-*` rules (int-or-string, preserve unknown
//! fields, embedded resources) are not JSON Schema, pruning and defaulting are not
//! validation at all, and the error texts must be upstream's field causes. The structural
//! subset is small enough to walk directly.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use regex::Regex;
use serde_json::{Map, Value};

use crate::error::FieldError;

/// A compiled structural schema node.
#[derive(Debug, Clone, Default)]
pub struct Structural {
    /// `object`, `array`, `string`, `integer`, `number`, `boolean`, or empty (int-or-string,
    /// preserve-unknown-fields nodes).
    pub type_: String,
    pub properties: BTreeMap<String, Structural>,
    /// A map's value schema (`additionalProperties: {..}`).
    pub additional: Option<Box<Structural>>,
    /// `additionalProperties: true`/schema: unknown keys are kept (not pruned).
    pub additional_allowed: bool,
    pub items: Option<Box<Structural>>,
    pub required: Vec<String>,
    pub nullable: bool,
    pub preserve_unknown: bool,
    pub int_or_string: bool,
    pub embedded_resource: bool,
    pub default: Option<Value>,
    pub enum_: Vec<Value>,
    pub pattern: Option<(String, Regex)>,
    pub format: String,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<i64>,
    pub max_length: Option<i64>,
    pub min_items: Option<i64>,
    pub max_items: Option<i64>,
    pub min_properties: Option<i64>,
    pub max_properties: Option<i64>,
    pub unique_items: bool,
    /// `x-kubernetes-list-type: set|map`: duplicates are not allowed.
    pub list_type: String,
    pub list_map_keys: Vec<String>,
}

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// The estimated memory one default costs when set, beyond its JSON (a map entry, and the
/// map's first node when it was empty).
pub const DEFAULT_COST: usize = 1024;
/// ... and per byte of its JSON.
pub const DEFAULT_COST_PER_BYTE: usize = 8;

/// Setting the defaults would take more memory than the object's budget allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the schema's defaults would grow this object past what its size allows")]
pub struct ExcessiveDefaults;

fn join(path: &str, child: &str) -> String {
    if path.is_empty() {
        child.to_string()
    } else {
        format!("{path}.{child}")
    }
}

impl Structural {
    /// Compile `props` found at `path` (e.g. `spec.versions[0].schema.openAPIV3Schema`),
    /// checking the structural rules. `root` is true for the schema's top node.
    pub fn from_props(props: &JSONSchemaProps, path: &str) -> Result<Structural, Vec<FieldError>> {
        let mut errs = Vec::new();
        let s = compile(props, path, Level::Root, &mut errs);
        if errs.is_empty() {
            Ok(s)
        } else {
            Err(errs)
        }
    }

    // -----------------------------------------------------------------------------------
    // Defaulting

    /// Set the `default` of every absent property (and of nulls where the field is not
    /// nullable), recursing into objects, maps and arrays. Each default set costs
    /// [`DEFAULT_COST`] plus [`DEFAULT_COST_PER_BYTE`] per byte of its JSON out of `budget`
    /// (bytes of memory, estimated); past it the object is refused: a list of many empty
    /// items, each given a default, would otherwise grow a small request without bound.
    pub fn apply_defaults(&self, v: &mut Value, budget: &mut usize) -> Result<(), ExcessiveDefaults> {
        match v {
            Value::Object(m) => {
                for (k, s) in &self.properties {
                    let absent = match m.get(k) {
                        None => true,
                        Some(Value::Null) => !s.nullable,
                        Some(_) => false,
                    };
                    if let Some(d) = s.default.as_ref().filter(|_| absent) {
                        let cost = DEFAULT_COST
                            .saturating_add(super::budget::json_len(d).saturating_mul(DEFAULT_COST_PER_BYTE));
                        *budget = budget.checked_sub(cost).ok_or(ExcessiveDefaults)?;
                        m.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = m.get_mut(k) {
                        s.apply_defaults(child, budget)?;
                    }
                }
                if let Some(add) = &self.additional {
                    for (k, child) in m.iter_mut() {
                        if !self.properties.contains_key(k) {
                            add.apply_defaults(child, budget)?;
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for item in items {
                        s.apply_defaults(item, budget)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Pruning

    /// Drop the fields the schema does not specify. At the root (`root = true`),
    /// `apiVersion`, `kind` and `metadata` are always kept.
    pub fn prune(&self, v: &mut Value, root: bool) {
        match v {
            Value::Object(m) => {
                if self.preserve_unknown || self.int_or_string && self.properties.is_empty() {
                    // Known children are still pruned below their own schema.
                    for (k, s) in &self.properties {
                        if let Some(child) = m.get_mut(k) {
                            s.prune(child, false);
                        }
                    }
                    return;
                }
                let keep_meta = root || self.embedded_resource;
                m.retain(|k, _| {
                    self.properties.contains_key(k)
                        || self.additional.is_some()
                        || self.additional_allowed
                        || (keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                });
                for (k, child) in m.iter_mut() {
                    if let Some(s) = self.properties.get(k) {
                        s.prune(child, false);
                    } else if let Some(add) = &self.additional {
                        add.prune(child, false);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for item in items {
                        s.prune(item, false);
                    }
                }
            }
            _ => {}
        }
    }

    // -----------------------------------------------------------------------------------
    // Validation

    /// Validate `v` at `path` (empty for the root), appending upstream-shaped causes.
    pub fn validate(&self, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
        if v.is_null() {
            if self.nullable || path.is_empty() {
                return;
            }
            if !self.type_.is_empty() || self.int_or_string {
                let ty = if self.int_or_string { "integer,string".to_string() } else { self.type_.clone() };
                errs.push(type_error(path, &ty, v));
            }
            return;
        }
        if self.int_or_string {
            if !(v.is_i64() || v.is_u64() || v.is_string()) {
                errs.push(type_error(path, "integer,string", v));
                return;
            }
        } else if !self.type_.is_empty() && !has_type(v, &self.type_) {
            errs.push(type_error(path, &self.type_, v));
            return;
        }
        if !self.enum_.is_empty() && !self.enum_.contains(v) {
            let shown: Vec<String> =
                self.enum_.iter().map(|e| e.as_str().map(str::to_string).unwrap_or(e.to_string())).collect();
            let refs: Vec<&str> = shown.iter().map(String::as_str).collect();
            errs.push(FieldError::not_supported(path, v, &refs));
        }
        match v {
            Value::Object(m) => self.validate_object(m, path, errs),
            Value::Array(items) => self.validate_array(items, path, errs),
            Value::String(s) => self.validate_string(s, v, path, errs),
            Value::Number(n) => self.validate_number(n.as_f64().unwrap_or(0.0), v, path, errs),
            _ => {}
        }
    }

    fn validate_object(&self, m: &Map<String, Value>, path: &str, errs: &mut Vec<FieldError>) {
        for r in &self.required {
            if !m.contains_key(r) {
                errs.push(FieldError::required(join(path, r), ""));
            }
        }
        if let Some(max) = self.max_properties.filter(|max| m.len() as i64 > *max) {
            errs.push(too_many(path, m.len(), max));
        }
        if let Some(min) = self.min_properties.filter(|min| (m.len() as i64) < *min) {
            errs.push(FieldError::invalid(
                path,
                &Value::from(m.len()),
                format!("{} in body should have at least {min} properties", body_path(path)),
            ));
        }
        for (k, child) in m {
            if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(s) = self.properties.get(k) {
                s.validate(child, &join(path, k), errs);
            } else if let Some(add) = &self.additional {
                add.validate(child, &join(path, k), errs);
            }
        }
    }

    fn validate_array(&self, items: &[Value], path: &str, errs: &mut Vec<FieldError>) {
        if let Some(max) = self.max_items.filter(|max| items.len() as i64 > *max) {
            errs.push(too_many(path, items.len(), max));
        }
        if let Some(min) = self.min_items.filter(|min| (items.len() as i64) < *min) {
            errs.push(FieldError::invalid(
                path,
                &Value::from(items.len()),
                format!("{} in body should have at least {min} items", body_path(path)),
            ));
        }
        // Duplicates are found through a set of each item's canonical JSON (object keys
        // sorted, numbers as written): linear in the list's size, where comparing every pair
        // was quadratic.
        if self.unique_items || self.list_type == "set" {
            let mut seen = std::collections::HashSet::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                if !seen.insert(item.to_string()) {
                    errs.push(FieldError::duplicate(format!("{path}[{i}]"), item));
                }
            }
        }
        if self.list_type == "map" && !self.list_map_keys.is_empty() {
            let key_of = |item: &Value| -> Vec<Value> {
                self.list_map_keys.iter().map(|k| item.get(k).cloned().unwrap_or(Value::Null)).collect()
            };
            let mut seen = std::collections::HashSet::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let key = key_of(item);
                if !seen.insert(Value::Array(key.clone()).to_string()) {
                    let shown: Map<String, Value> = self.list_map_keys.iter().cloned().zip(key).collect();
                    errs.push(FieldError::duplicate(format!("{path}[{i}]"), &Value::Object(shown)));
                }
            }
        }
        if let Some(s) = &self.items {
            for (i, item) in items.iter().enumerate() {
                s.validate(item, &format!("{path}[{i}]"), errs);
            }
        }
    }

    fn validate_string(&self, s: &str, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
        let len = s.chars().count() as i64;
        if let Some(max) = self.max_length.filter(|max| len > *max) {
            errs.push(FieldError::too_long(path, usize::try_from(max).unwrap_or(0)));
        }
        if let Some(min) = self.min_length.filter(|min| len < *min) {
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{} in body should be at least {min} chars long", body_path(path)),
            ));
        }
        if let Some((src, re)) = &self.pattern {
            if !re.is_match(s) {
                errs.push(FieldError::invalid(path, v, format!("{} in body should match '{src}'", body_path(path))));
            }
        }
        if !self.format.is_empty() && !format_ok(&self.format, s) {
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{} in body must be of type {}: {s:?}", body_path(path), self.format),
            ));
        }
    }

    fn validate_number(&self, n: f64, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
        let shown = number_text(v);
        if let Some(max) = self.maximum {
            if self.exclusive_maximum && n >= max {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    format!("{} in body should be less than {}", body_path(path), fmt_num(max)),
                ));
            } else if n > max {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    format!("{} in body should be less than or equal to {}", body_path(path), fmt_num(max)),
                ));
            }
        }
        if let Some(min) = self.minimum {
            if self.exclusive_minimum && n <= min {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    format!("{} in body should be greater than {}", body_path(path), fmt_num(min)),
                ));
            } else if n < min {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    format!("{} in body should be greater than or equal to {}", body_path(path), fmt_num(min)),
                ));
            }
        }
        if let Some(m) = self.multiple_of.filter(|m| *m > 0.0) {
            let q = n / m;
            if (q - q.round()).abs() > 1e-9 {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    format!("{} in body should be a multiple of {}", body_path(path), fmt_num(m)),
                ));
            }
        }
        match self.format.as_str() {
            "int32" if v.as_i64().is_none_or(|i| i32::try_from(i).is_err()) => {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    format!("{} in body must be of type int32: {shown:?}", body_path(path)),
                ));
            }
            _ => {}
        }
    }
}

/// kube-openapi names the field `<path> in body`; the root is `body`.
fn body_path(path: &str) -> &str {
    if path.is_empty() {
        "body"
    } else {
        path
    }
}

fn number_text(v: &Value) -> String {
    v.to_string()
}

fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, ty: &str) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        _ => true,
    }
}

/// `Invalid value: "string": spec.replicas in body must be of type integer: "string"`.
fn type_error(path: &str, want: &str, v: &Value) -> FieldError {
    let got = json_type(v);
    FieldError::invalid(path, &Value::from(got), format!("{} in body must be of type {want}: {got:?}", body_path(path)))
}

fn too_many(path: &str, actual: usize, max: i64) -> FieldError {
    FieldError {
        reason: "FieldValueTooMany",
        field: path.to_string(),
        message: format!("Too many: {actual}: must have at most {max} items"),
    }
}

/// The string formats kube-openapi checks that custom resources commonly use; other
/// formats are accepted as any string (as upstream does for unknown formats).
pub fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "int-or-string" | "password" | "" => true,
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "uuid" => uuid::Uuid::try_parse(s).is_ok() && s.len() == 36,
        "email" => {
            let mut parts = s.splitn(2, '@');
            let (local, domain) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            !local.is_empty() && !domain.is_empty() && !s.contains(char::is_whitespace) && !domain.contains('@')
        }
        "hostname" => {
            s.len() <= 253
                && !s.is_empty()
                && s.trim_end_matches('.').split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                })
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => {
            let Some((ip, bits)) = s.split_once('/') else { return false };
            match (ip.parse::<std::net::IpAddr>(), bits.parse::<u8>()) {
                (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
                (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
                _ => false,
            }
        }
        "mac" => {
            let parts: Vec<&str> = s.split([':', '-']).collect();
            matches!(parts.len(), 6 | 8 | 20)
                && parts.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "duration" => kustos_ca::duration::parse(s).is_ok(),
        "uri" => s.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }),
        _ => true,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Property,
    Items,
    Additional,
}

fn compile(p: &JSONSchemaProps, path: &str, level: Level, errs: &mut Vec<FieldError>) -> Structural {
    let type_ = p.type_.clone().unwrap_or_default();
    let int_or_string = p.x_kubernetes_int_or_string == Some(true);
    let preserve_unknown = p.x_kubernetes_preserve_unknown_fields == Some(true);
    if !type_.is_empty() && !TYPES.contains(&type_.as_str()) {
        errs.push(FieldError::not_supported(join(path, "type"), &Value::from(type_.clone()), TYPES));
    }
    if int_or_string && !type_.is_empty() {
        errs.push(FieldError::invalid(
            join(path, "type"),
            &Value::from(type_.clone()),
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    if type_.is_empty() && !int_or_string && !preserve_unknown {
        let what = match level {
            Level::Root | Level::Property => "must not be empty for specified object fields",
            Level::Items => "must not be empty for specified array items",
            Level::Additional => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(join(path, "type"), what));
    }
    if level == Level::Root && !type_.is_empty() && type_ != "object" {
        errs.push(FieldError::invalid(join(path, "type"), &Value::from(type_.clone()), "must be object at the root"));
    }
    if p.properties.is_some() && matches!(p.additional_properties, Some(JSONSchemaPropsOrBool::Schema(_))) {
        errs.push(FieldError::forbidden(
            join(path, "additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if type_ == "array" && p.items.is_none() {
        errs.push(FieldError::required(join(path, "items"), "must be specified"));
    }
    for (field, present) in [
        ("$ref", p.ref_path.is_some()),
        ("additionalItems", p.additional_items.is_some()),
        ("definitions", p.definitions.is_some()),
        ("dependencies", p.dependencies.is_some()),
        ("id", p.id.is_some()),
        ("patternProperties", p.pattern_properties.is_some()),
        ("uniqueItems", p.unique_items == Some(true)),
    ] {
        if present {
            errs.push(FieldError::forbidden(join(path, field), format!("{field} is not supported")));
        }
    }
    if p.x_kubernetes_embedded_resource == Some(true) && type_ != "object" {
        errs.push(FieldError::invalid(
            join(path, "type"),
            &Value::from(type_.clone()),
            "must be object if x-kubernetes-embedded-resource is true",
        ));
    }
    let mut properties = BTreeMap::new();
    for (k, child) in p.properties.iter().flatten() {
        let child_path = format!("{path}.properties[{k}]");
        if level == Level::Root && k == "metadata" {
            // Only `type: object` (and name/generateName constraints) may be said about
            // metadata; the server treats it as ObjectMeta either way.
            let extra = child
                .properties
                .as_ref()
                .is_some_and(|props| props.keys().any(|pk| pk != "name" && pk != "generateName"));
            if extra {
                errs.push(FieldError::forbidden(
                    format!("{child_path}.properties"),
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
            continue;
        }
        properties.insert(k.clone(), compile(child, &child_path, Level::Property, errs));
    }
    let (additional, additional_allowed) = match &p.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(s)) => {
            (Some(Box::new(compile(s, &format!("{path}.additionalProperties"), Level::Additional, errs))), true)
        }
        Some(JSONSchemaPropsOrBool::Bool(b)) => (None, *b),
        None => (None, false),
    };
    let items = match &p.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => {
            Some(Box::new(compile(s, &format!("{path}.items"), Level::Items, errs)))
        }
        Some(JSONSchemaPropsOrArray::Schemas(_)) => {
            errs.push(FieldError::forbidden(join(path, "items"), "items must be a schema object and not an array"));
            None
        }
        None => None,
    };
    let pattern = match &p.pattern {
        Some(src) => match Regex::new(src) {
            Ok(re) => Some((src.clone(), re)),
            Err(e) => {
                errs.push(FieldError::invalid(
                    join(path, "pattern"),
                    &Value::from(src.clone()),
                    format!("must be a valid regular expression, but isn't: {e}"),
                ));
                None
            }
        },
        None => None,
    };
    Structural {
        type_,
        properties,
        additional,
        additional_allowed,
        items,
        required: p.required.clone().unwrap_or_default(),
        nullable: p.nullable == Some(true),
        preserve_unknown,
        int_or_string,
        embedded_resource: p.x_kubernetes_embedded_resource == Some(true),
        default: p.default.as_ref().map(|d| d.0.clone()),
        enum_: p.enum_.iter().flatten().map(|e| e.0.clone()).collect(),
        pattern,
        format: p.format.clone().unwrap_or_default(),
        minimum: p.minimum,
        maximum: p.maximum,
        exclusive_minimum: p.exclusive_minimum == Some(true),
        exclusive_maximum: p.exclusive_maximum == Some(true),
        multiple_of: p.multiple_of,
        min_length: p.min_length,
        max_length: p.max_length,
        min_items: p.min_items,
        max_items: p.max_items,
        min_properties: p.min_properties,
        max_properties: p.max_properties,
        unique_items: p.unique_items == Some(true),
        list_type: p.x_kubernetes_list_type.clone().unwrap_or_default(),
        list_map_keys: p.x_kubernetes_list_map_keys.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
