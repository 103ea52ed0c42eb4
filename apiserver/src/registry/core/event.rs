//! core/v1 `events` (`pkg/registry/core/event`): upstream's legacy validation only (the strict
//! rules are for events.k8s.io), field selectors and the Table.

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use crate::error::FieldError;
use crate::registry::shared::{col, is_zero_time, str_at};
use crate::registry::{age, typed_roundtrip, Column, FieldSelectors, Strategy, TableStrategy, WriteStrategy};
use crate::validation;

/// core/v1 `events`: upstream's legacy validation only (the strict rules are for
/// events.k8s.io). Upstream's Table puts `Name` last with priority 1; see `columns`.
pub struct EventStrategy;

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// Upstream's `legacyValidateEvent`, which every Event passes whichever API writes it
/// (events.k8s.io/v1 adds its strict rules, `registry::events`): `obj` is in the core/v1
/// form. Field paths are upstream's internal ones (`reportingController`, `message`), as its
/// errors name them through either API.
pub fn legacy_validate(obj: &Value) -> Vec<FieldError> {
    let s = |path: &[&str]| str_at(obj, path).unwrap_or("").to_string();
    let ns = s(&["metadata", "namespace"]);
    let involved_ns = s(&["involvedObject", "namespace"]);
    let mut errs = Vec::new();
    let mismatch =
        || FieldError::invalid("involvedObject.namespace", &json!(involved_ns), "does not match event.namespace");
    let too_many = |field: &str, limit: usize| {
        FieldError::invalid(field, &json!(""), format!("can have at most {limit} characters"))
    };
    if is_zero_time(obj.get("eventTime")) {
        if involved_ns.is_empty() {
            // event.namespace must also be empty, or "default" for old clients.
            if !ns.is_empty() && ns != "default" {
                errs.push(mismatch());
            }
        } else if ns != involved_ns {
            errs.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(mismatch());
        }
        // core/v1 spells reportingController `reportingComponent`; upstream's path is the former.
        let rc = s(&["reportingComponent"]);
        if rc.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        }
        for msg in validation::is_qualified_name(&rc) {
            errs.push(FieldError::invalid("reportingController", &json!(rc), msg));
        }
        let instance = s(&["reportingInstance"]);
        if instance.is_empty() {
            errs.push(FieldError::required("reportingInstance", ""));
        }
        if instance.len() > REPORTING_INSTANCE_LIMIT {
            errs.push(too_many("reportingInstance", REPORTING_INSTANCE_LIMIT));
        }
        let action = s(&["action"]);
        if action.is_empty() {
            errs.push(FieldError::required("action", ""));
        }
        if action.len() > ACTION_LIMIT {
            errs.push(too_many("action", ACTION_LIMIT));
        }
        let reason = s(&["reason"]);
        if reason.is_empty() {
            errs.push(FieldError::required("reason", ""));
        }
        if reason.len() > REASON_LIMIT {
            errs.push(too_many("reason", REASON_LIMIT));
        }
        if s(&["message"]).len() > NOTE_LIMIT {
            errs.push(too_many("message", NOTE_LIMIT));
        }
    }
    for msg in validation::is_dns1123_subdomain(&ns) {
        errs.push(FieldError::invalid("namespace", &json!(ns), msg));
    }
    errs
}

impl Strategy for EventStrategy {
    fn name_rule(&self) -> crate::registry::NameRule {
        validation::validate_path_segment_name
    }

    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Event>(obj)
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
        legacy_validate(obj)
    }
}

impl FieldSelectors for EventStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        let s = |p: &[&str]| str_at(obj, p).unwrap_or("").to_string();
        let v = match path {
            "involvedObject.kind" => s(&["involvedObject", "kind"]),
            "involvedObject.namespace" => s(&["involvedObject", "namespace"]),
            "involvedObject.name" => s(&["involvedObject", "name"]),
            "involvedObject.uid" => s(&["involvedObject", "uid"]),
            "involvedObject.apiVersion" => s(&["involvedObject", "apiVersion"]),
            "involvedObject.resourceVersion" => s(&["involvedObject", "resourceVersion"]),
            "involvedObject.fieldPath" => s(&["involvedObject", "fieldPath"]),
            "reason" => s(&["reason"]),
            "reportingComponent" => s(&["reportingComponent"]),
            "source" => {
                let component = s(&["source", "component"]);
                if component.is_empty() {
                    s(&["reportingComponent"])
                } else {
                    component
                }
            }
            "type" => s(&["type"]),
            _ => return None,
        };
        Some(v)
    }
}

impl TableStrategy for EventStrategy {
    fn name_column_last(&self) -> bool {
        true
    }

    /// Upstream's columns minus the trailing `Name` (priority 1), which the caller places first.
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Last Seen", "The time at which the most recent occurrence of this event was recorded.", 0),
            col("Type", "Type of this event (Normal, Warning), new types could be added in the future", 0),
            col(
                "Reason",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                0,
            ),
            col("Object", "The object that this event is about.", 0),
            col(
                "Subobject",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
                1,
            ),
            col("Source", "The component reporting this event. Should be a short machine understandable string.", 1),
            col("Message", "A human-readable description of the status of this operation.", 0),
            col("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
            col("Count", "The number of times this event has occurred.", 1),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let s = |p: &[&str]| str_at(obj, p).unwrap_or("").to_string();
        let time_age = |key: &str| {
            let v = obj.get(key);
            if is_zero_time(v) {
                json!("<unknown>")
            } else {
                age(v.and_then(Value::as_str), now)
            }
        };
        let first =
            if is_zero_time(obj.get("firstTimestamp")) { time_age("eventTime") } else { time_age("firstTimestamp") };
        let mut last = if is_zero_time(obj.get("lastTimestamp")) { first.clone() } else { time_age("lastTimestamp") };
        let mut count = obj.get("count").and_then(Value::as_i64).unwrap_or(0);
        match obj.get("series").filter(|v| v.is_object()) {
            Some(series) => {
                let observed = series.get("lastObservedTime");
                last = if is_zero_time(observed) {
                    json!("<unknown>")
                } else {
                    age(observed.and_then(Value::as_str), now)
                };
                count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
            }
            // Singleton events don't have a count set in the new API.
            None if count == 0 => count = 1,
            None => {}
        }
        let kind = s(&["involvedObject", "kind"]).to_lowercase();
        let name = s(&["involvedObject", "name"]);
        let target = if name.is_empty() { kind } else { format!("{kind}/{name}") };
        let component =
            Some(s(&["source", "component"])).filter(|c| !c.is_empty()).unwrap_or(s(&["reportingComponent"]));
        let host = Some(s(&["source", "host"])).filter(|h| !h.is_empty()).unwrap_or(s(&["reportingInstance"]));
        let source = if host.is_empty() { component } else { format!("{component}, {host}") };
        vec![
            last,
            json!(s(&["type"])),
            json!(s(&["reason"])),
            json!(target),
            json!(s(&["involvedObject", "fieldPath"])),
            json!(source),
            json!(s(&["message"]).trim()),
            first,
            json!(count),
        ]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::core::test_util::*;

    fn base_event() -> Value {
        json!({"apiVersion": "v1", "kind": "Event",
               "metadata": {"name": "web.17a", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "u1",
                                  "apiVersion": "v1", "resourceVersion": "7", "fieldPath": "spec.containers{app}"},
               "reason": "Started", "message": " Started container app \n", "type": "Normal",
               "source": {"component": "kubelet", "host": "node-1"},
               "firstTimestamp": "2024-05-01T11:50:00Z", "lastTimestamp": "2024-05-01T11:58:00Z", "count": 3})
    }

    #[test]
    fn event_validation() {
        let qn = "name part must be non-empty";
        let cases: Vec<(&str, Mutation, Vec<String>)> = vec![
            ("valid", |_| {}, vec![]),
            ("namespace mismatch", |o| set(o, &["involvedObject", "namespace"], json!("other")),
             vec!["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace".into()]),
            ("cluster object in default is fine", |o| set(o, &["involvedObject", "namespace"], json!("")), vec![]),
            ("cluster object outside default", |o| {
                set(o, &["involvedObject", "namespace"], json!(""));
                set(o, &["metadata", "namespace"], json!("team-a"));
            }, vec!["involvedObject.namespace: Invalid value: \"\": does not match event.namespace".into()]),
            ("new-style event needs reporting fields", |o| set(o, &["eventTime"], json!("2024-05-01T11:00:00.000000Z")), vec![
                "reportingController: Required value".into(),
                format!("reportingController: Invalid value: \"\": {qn}"),
                "reportingController: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
                "reportingInstance: Required value".into(),
                "action: Required value".into(),
            ]),
            ("new-style event complete", |o| {
                set(o, &["eventTime"], json!("2024-05-01T11:00:00.000000Z"));
                set(o, &["reportingComponent"], json!("kubelet"));
                set(o, &["reportingInstance"], json!("node-1"));
                set(o, &["action"], json!("Start"));
                set(o, &["reason"], json!("r".repeat(129)));
            }, vec!["reason: Invalid value: \"\": can have at most 128 characters".into()]),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base_event();
            mutate(&mut obj);
            assert_eq!(rendered(&EventStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn event_field_selectors() {
        let e = base_event();
        let cases: &[(&str, Option<&str>)] = &[
            ("involvedObject.kind", Some("Pod")),
            ("involvedObject.namespace", Some("default")),
            ("involvedObject.name", Some("web")),
            ("involvedObject.uid", Some("u1")),
            ("involvedObject.apiVersion", Some("v1")),
            ("involvedObject.resourceVersion", Some("7")),
            ("involvedObject.fieldPath", Some("spec.containers{app}")),
            ("reason", Some("Started")),
            ("reportingComponent", Some("")),
            ("source", Some("kubelet")),
            ("type", Some("Normal")),
            ("message", None),
        ];
        for (path, want) in cases {
            assert_eq!(EventStrategy.field(&e, path).as_deref(), *want, "{path}");
        }
        let mut e2 = base_event();
        e2.as_object_mut().unwrap().remove("source");
        set(&mut e2, &["reportingComponent"], json!("ctrl"));
        assert_eq!(
            EventStrategy.field(&e2, "source").as_deref(),
            Some("ctrl"),
            "source falls back to reportingComponent"
        );
    }

    #[test]
    fn event_table() {
        let names: Vec<&str> = EventStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count"],
            "event columns"
        );
        let prio: Vec<u32> = EventStrategy.columns().iter().map(|c| c.priority).collect();
        assert_eq!(prio, [0, 0, 0, 0, 1, 1, 0, 1, 1], "event column priorities");
        assert_eq!(
            EventStrategy.cells(&base_event(), now()),
            vec![
                json!("2m"),
                json!("Normal"),
                json!("Started"),
                json!("pod/web"),
                json!("spec.containers{app}"),
                json!("kubelet, node-1"),
                json!("Started container app"),
                json!("10m"),
                json!(3),
            ],
            "old-style event cells"
        );
        // New-style: no first/last timestamps, a series, reporting fields as the source.
        let e = json!({"metadata": {"name": "x", "namespace": "default"}, "eventTime": "2024-05-01T10:59:59.500000Z",
                       "series": {"count": 4, "lastObservedTime": "2024-05-01T11:59:00.000000Z"},
                       "involvedObject": {"kind": "Node"}, "reportingComponent": "ctrl", "reportingInstance": "i-1"});
        assert_eq!(
            EventStrategy.cells(&e, now()),
            vec![
                json!("60s"),
                json!(""),
                json!(""),
                json!("node"),
                json!(""),
                json!("ctrl, i-1"),
                json!(""),
                json!("60m"),
                json!(4),
            ],
            "new-style event cells"
        );
        // Singleton without any time.
        let e = json!({"metadata": {"name": "x"}, "involvedObject": {}});
        let cells = EventStrategy.cells(&e, now());
        assert_eq!(cells[0], json!("<unknown>"), "singleton without time: last seen");
        assert_eq!(cells[8], json!(1), "singleton without time: count");
    }
}
