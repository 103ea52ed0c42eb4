//! events.k8s.io/v1 `events` (`pkg/registry/core/event` serving the events group): the same
//! objects as core/v1 Events, kept in their storage ([`StoredAs`]) and converted field by field
//! ([`conversion`]), as upstream keeps one internal Event for both APIs. An Event written
//! through either API is read through the other.
//!
//! Validation is upstream's `ValidateEventCreate` and `ValidateEventUpdate` for an
//! events.k8s.io request: the legacy rules every Event passes ([`legacy_validate`]) and the
//! strict ones of the new API (eventTime required, type `Normal` or `Warning`, the deprecated
//! fields unset, series rules, and on update everything but the series and metadata
//! immutable), run on the core form so that the field paths are upstream's internal ones.
//! Field selectors and the Table are core's, as upstream serves both from one registry.

pub mod conversion;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use k8s_openapi::api::events::v1 as eventsv1;
use serde_json::{json, Value};

use super::core::event::{legacy_validate, EventStrategy as CoreEventStrategy};
use super::shared::{get_at, is_zero_time, str_at};
use super::{typed_roundtrip, Column, FieldSelectors, ResourceDef, StoredAs, Strategy, TableStrategy, WriteStrategy};
use crate::error::FieldError;
use crate::validation;

/// All events.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![ResourceDef {
        group: "events.k8s.io",
        version: "v1",
        resource: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
        create_only: false,
        strategy: Arc::new(EventStrategy),
        schema: |g| g.subschema_for::<eventsv1::Event>(),
    }]
}

/// events.k8s.io/v1 `events`; see the module documentation.
pub struct EventStrategy;

/// Where events.k8s.io/v1 Events are kept: as core/v1 Events.
const STORED_AS: StoredAs = StoredAs {
    gvk: ("", "v1", "Event"),
    resource: "events",
    from_stored: conversion::from_core,
    to_stored: conversion::to_core,
};

impl Strategy for EventStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, super::DecodeError> {
        typed_roundtrip::<eventsv1::Event>(obj)
    }

    fn stored_as(&self) -> Option<StoredAs> {
        Some(STORED_AS)
    }

    /// As upstream's generic object-meta check of every Event; the strict create rules add
    /// the DNS-subdomain rule ([`strict_create`]).
    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for EventStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let core = conversion::to_core(obj);
        let mut errs = legacy_validate(&core);
        errs.extend(strict_create(&core));
        errs
    }

    /// An update passes the legacy rules again; the strict ones are [`strict_update`]'s.
    fn validate_on_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        legacy_validate(&conversion::to_core(new))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        strict_update(&conversion::to_core(new), &conversion::to_core(old))
    }
}

impl FieldSelectors for EventStrategy {
    /// Upstream's events.k8s.io field labels are core's (`involvedObject.name`, `source`,
    /// `reportingComponent`...), matched on the core form.
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        CoreEventStrategy.field(&conversion::to_core(obj), path)
    }
}

impl TableStrategy for EventStrategy {
    fn name_column_last(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        CoreEventStrategy.columns()
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        CoreEventStrategy.cells(&conversion::to_core(obj), now)
    }
}

/// `validateV1EventSeries` over the core form.
fn series_errors(core: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(series) = core.get("series").filter(|s| !s.is_null()) else { return errs };
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errs.push(FieldError::invalid("series.count", &json!(""), "should be at least 2"));
    }
    if is_zero_time(series.get("lastObservedTime")) {
        errs.push(FieldError::required("series.lastObservedTime", ""));
    }
    errs
}

/// The strict rules of a create through events.k8s.io/v1 (upstream's `ValidateEventCreate`
/// after the legacy ones), over the core form.
pub fn strict_create(core: &Value) -> Vec<FieldError> {
    let s = |path: &[&str]| str_at(core, path).unwrap_or("").to_string();
    let mut errs = Vec::new();
    let name = s(&["metadata", "name"]);
    for msg in validation::is_dns1123_subdomain(&name) {
        errs.push(FieldError::invalid("metadata.name", &json!(name), msg));
    }
    errs.extend(series_errors(core));
    if is_zero_time(core.get("eventTime")) {
        errs.push(FieldError::required("eventTime", ""));
    }
    let type_ = s(&["type"]);
    if type_ != "Normal" && type_ != "Warning" {
        errs.push(FieldError::invalid("type", &json!(""), format!("has invalid value: {type_}")));
    }
    let unset = |field: &str| FieldError::invalid(field, &json!(""), "needs to be unset");
    for field in ["firstTimestamp", "lastTimestamp"] {
        if !is_zero_time(core.get(field)) {
            errs.push(unset(field));
        }
    }
    if core.get("count").and_then(Value::as_i64).unwrap_or(0) != 0 {
        errs.push(unset("count"));
    }
    if !s(&["source", "component"]).is_empty() || !s(&["source", "host"]).is_empty() {
        errs.push(unset("source"));
    }
    errs
}

/// How a field compares for upstream's `ValidateImmutableField` (Go's `DeepEqual` of the
/// internal values): `Struct` fields are values (absent is their empty form), `Pointer` fields
/// are absent or set, `Time` fields compare as instants, the rest as scalars whose absence is
/// their zero value.
#[derive(Clone, Copy)]
enum Shape {
    Scalar,
    Time,
    Struct,
    Pointer,
}

/// The immutable fields of an update through events.k8s.io/v1, in upstream's order (which
/// checks `reason` twice), as (path in errors, key in the core form, shape).
const IMMUTABLE: &[(&str, &str, Shape)] = &[
    ("involvedObject", "involvedObject", Shape::Struct),
    ("reason", "reason", Shape::Scalar),
    ("message", "message", Shape::Scalar),
    ("source", "source", Shape::Struct),
    ("firstTimestamp", "firstTimestamp", Shape::Time),
    ("lastTimestamp", "lastTimestamp", Shape::Time),
    ("count", "count", Shape::Scalar),
    ("reason", "reason", Shape::Scalar),
    ("type", "type", Shape::Scalar),
    ("eventTime", "eventTime", Shape::Time),
    ("action", "action", Shape::Scalar),
    ("related", "related", Shape::Pointer),
    ("reportingController", "reportingComponent", Shape::Scalar),
    ("reportingInstance", "reportingInstance", Shape::Scalar),
];

/// A scalar's zero value (absent, null, "", 0, false) as null; a time as its instant.
fn scalar(v: Option<&Value>, time: bool) -> Value {
    match v {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(s)) if s.is_empty() => Value::Null,
        Some(Value::String(s)) if time => match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(t) if !is_zero_time(v) => json!(t.timestamp_nanos_opt().unwrap_or(i64::MIN)),
            Ok(_) => Value::Null,
            Err(_) => json!(s),
        },
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => Value::Null,
        Some(Value::Bool(false)) => Value::Null,
        Some(other) => other.clone(),
    }
}

/// A struct's fields with the zero ones left out.
fn fields(v: Option<&Value>, time_keys: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(Value::Object(m)) = v {
        for (k, val) in m {
            let s = scalar(Some(val), time_keys.contains(&k.as_str()));
            if !s.is_null() {
                out.insert(k.clone(), s);
            }
        }
    }
    Value::Object(out)
}

fn comparable(v: Option<&Value>, shape: Shape) -> Value {
    match shape {
        Shape::Scalar => scalar(v, false),
        Shape::Time => scalar(v, true),
        Shape::Struct => fields(v, &[]),
        Shape::Pointer if v.is_none_or(Value::is_null) => Value::Null,
        Shape::Pointer => fields(v, &["lastObservedTime"]),
    }
}

/// The strict rules of an update through events.k8s.io/v1 (upstream's `ValidateEventUpdate`
/// after the legacy ones; object metadata is checked by the caller), over the core forms.
pub fn strict_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if comparable(new.get("series"), Shape::Pointer) != comparable(old.get("series"), Shape::Pointer) {
        errs.extend(series_errors(new));
    }
    for (path, key, shape) in IMMUTABLE {
        let now = get_at(new, &[key]);
        if comparable(now, *shape) != comparable(get_at(old, &[key]), *shape) {
            errs.push(FieldError::immutable(*path, now.unwrap_or(&Value::Null)));
        }
    }
    errs
}
