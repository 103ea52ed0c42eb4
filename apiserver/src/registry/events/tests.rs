//! Table tests of the events.k8s.io/v1 strategy: upstream's create and update validation
//! cases (`pkg/apis/core/validation/events_test.go`, written in the v1 form), selectors,
//! the Table and the storage declaration.

#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};

use super::*;
use crate::registry::core::event::EventStrategy as CoreEventStrategy;

/// Upstream's "valid new event" in the events.k8s.io/v1 form.
fn valid() -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": {"name": "test", "namespace": "kube-system"},
           "regarding": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
           "eventTime": "2017-09-19T13:49:16.000000Z",
           "reportingController": "k8s.io/my-controller", "reportingInstance": "node-xyz",
           "action": "Do", "reason": "Because", "type": "Normal", "note": "hello"})
}

fn set(obj: &mut Value, path: &[&str], v: Value) {
    let (last, parents) = path.split_last().unwrap();
    let mut cur = obj;
    for p in parents {
        cur = cur.as_object_mut().unwrap().entry(p.to_string()).or_insert_with(|| json!({}));
    }
    cur.as_object_mut().unwrap().insert((*last).to_string(), v);
}

fn remove(obj: &mut Value, key: &str) {
    obj.as_object_mut().unwrap().remove(key);
}

fn rendered(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(FieldError::render).collect()
}

type Mutate = Box<dyn Fn(&mut Value)>;

#[test]
fn create_validation() {
    let qualified = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let cases: Vec<(&str, Mutate, Vec<String>)> = vec![
        ("valid new event", Box::new(|_| {}), vec![]),
        ("a Warning is valid too", Box::new(|o| set(o, &["type"], json!("Warning"))), vec![]),
        (
            "missing eventTime: the legacy namespace rule and the strict required one",
            Box::new(|o| remove(o, "eventTime")),
            vec![
                "involvedObject.namespace: Invalid value: \"\": does not match event.namespace".into(),
                "eventTime: Required value".into(),
            ],
        ),
        (
            "missing eventTime in default",
            Box::new(|o| {
                remove(o, "eventTime");
                set(o, &["metadata", "namespace"], json!("default"));
            }),
            vec!["eventTime: Required value".into()],
        ),
        (
            "not qualified reportingController",
            Box::new(|o| set(o, &["reportingController"], json!("my-contr@ller"))),
            vec![format!("reportingController: Invalid value: \"my-contr@ller\": {qualified}")],
        ),
        (
            "too long reporting instance",
            Box::new(|o| set(o, &["reportingInstance"], json!("x".repeat(129)))),
            vec!["reportingInstance: Invalid value: \"\": can have at most 128 characters".into()],
        ),
        ("missing reason", Box::new(|o| remove(o, "reason")), vec!["reason: Required value".into()]),
        ("missing action", Box::new(|o| remove(o, "action")), vec!["action: Required value".into()]),
        (
            "too long note, reported as upstream's message",
            Box::new(|o| set(o, &["note"], json!("z".repeat(1025)))),
            vec!["message: Invalid value: \"\": can have at most 1024 characters".into()],
        ),
        (
            "regarding an object of another namespace",
            Box::new(|o| set(o, &["regarding", "namespace"], json!(""))),
            vec![],
        ),
        (
            "cluster object outside default and kube-system",
            Box::new(|o| set(o, &["metadata", "namespace"], json!("team-a"))),
            vec!["involvedObject.namespace: Invalid value: \"\": does not match event.namespace".into()],
        ),
        (
            "invalid type",
            Box::new(|o| set(o, &["type"], json!("Bad"))),
            vec!["type: Invalid value: \"\": has invalid value: Bad".into()],
        ),
        ("missing type", Box::new(|o| remove(o, "type")), vec!["type: Invalid value: \"\": has invalid value: ".into()]),
        (
            "deprecated fields set",
            Box::new(|o| {
                set(o, &["deprecatedFirstTimestamp"], json!("2017-09-19T13:49:16Z"));
                set(o, &["deprecatedLastTimestamp"], json!("2017-09-19T13:49:16Z"));
                set(o, &["deprecatedCount"], json!(2));
                set(o, &["deprecatedSource"], json!({"component": "kubelet"}));
            }),
            vec![
                "firstTimestamp: Invalid value: \"\": needs to be unset".into(),
                "lastTimestamp: Invalid value: \"\": needs to be unset".into(),
                "count: Invalid value: \"\": needs to be unset".into(),
                "source: Invalid value: \"\": needs to be unset".into(),
            ],
        ),
        (
            "empty deprecated fields are unset",
            Box::new(|o| {
                set(o, &["deprecatedSource"], json!({}));
                set(o, &["deprecatedCount"], json!(0));
            }),
            vec![],
        ),
        (
            "series with count 1 and no time",
            Box::new(|o| set(o, &["series"], json!({"count": 1}))),
            vec![
                "series.count: Invalid value: \"\": should be at least 2".into(),
                "series.lastObservedTime: Required value".into(),
            ],
        ),
        (
            "valid series",
            Box::new(|o| set(o, &["series"], json!({"count": 2, "lastObservedTime": "2017-09-19T13:50:00.000000Z"}))),
            vec![],
        ),
        (
            "a name that is no DNS subdomain",
            Box::new(|o| set(o, &["metadata", "name"], json!("Test"))),
            vec!["metadata.name: Invalid value: \"Test\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()],
        ),
    ];
    for (name, mutate, want) in cases {
        let mut obj = valid();
        mutate(&mut obj);
        assert_eq!(rendered(&EventStrategy.validate(&obj)), want, "{name}");
    }
}

#[test]
fn core_events_keep_the_legacy_rules_only() {
    // What events.k8s.io refuses, core/v1 takes (upstream's backwards compatibility).
    let mut obj = conversion::to_core(&valid());
    obj["type"] = json!("Bad");
    obj["count"] = json!(3);
    assert_eq!(rendered(&CoreEventStrategy.validate(&obj)), Vec::<String>::new());
}

#[test]
fn update_validation() {
    let series = json!({"count": 2, "lastObservedTime": "2017-09-19T13:50:00.000000Z"});
    let cases: Vec<(&str, Mutate, Vec<String>)> = vec![
        ("nothing changed", Box::new(|_| {}), vec![]),
        ("labels may change", Box::new(|o| set(o, &["metadata", "labels"], json!({"a": "b"}))), vec![]),
        (
            "a series update as the recorder sends it",
            Box::new(move |o| set(o, &["series"], series.clone())),
            vec![],
        ),
        (
            "an invalid series update",
            Box::new(|o| set(o, &["series"], json!({"count": 1, "lastObservedTime": "2017-09-19T13:50:00Z"}))),
            vec!["series.count: Invalid value: \"\": should be at least 2".into()],
        ),
        (
            "the same instant written differently",
            Box::new(|o| set(o, &["eventTime"], json!("2017-09-19T13:49:16Z"))),
            vec![],
        ),
        (
            "note, reason, type, action, regarding, related and reporting fields are immutable",
            Box::new(|o| {
                set(o, &["note"], json!("other"));
                set(o, &["reason"], json!("Other"));
                set(o, &["type"], json!("Warning"));
                set(o, &["action"], json!("Undo"));
                set(o, &["regarding", "name"], json!("node-2"));
                set(o, &["related"], json!({"kind": "Pod"}));
                set(o, &["reportingController"], json!("k8s.io/other"));
                set(o, &["reportingInstance"], json!("node-abc"));
                set(o, &["eventTime"], json!("2017-09-19T13:49:17.000000Z"));
            }),
            vec![
                "involvedObject: Invalid value: {\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"node-2\"}: field is immutable".into(),
                "reason: Invalid value: \"Other\": field is immutable".into(),
                "message: Invalid value: \"other\": field is immutable".into(),
                "reason: Invalid value: \"Other\": field is immutable".into(),
                "type: Invalid value: \"Warning\": field is immutable".into(),
                "eventTime: Invalid value: \"2017-09-19T13:49:17.000000Z\": field is immutable".into(),
                "action: Invalid value: \"Undo\": field is immutable".into(),
                "related: Invalid value: {\"kind\":\"Pod\"}: field is immutable".into(),
                "reportingController: Invalid value: \"k8s.io/other\": field is immutable".into(),
                "reportingInstance: Invalid value: \"node-abc\": field is immutable".into(),
            ],
        ),
        (
            "deprecated fields are immutable",
            Box::new(|o| {
                set(o, &["deprecatedSource"], json!({"component": "x"}));
                set(o, &["deprecatedFirstTimestamp"], json!("2017-09-19T13:49:16Z"));
                set(o, &["deprecatedLastTimestamp"], json!("2017-09-19T13:49:16Z"));
                set(o, &["deprecatedCount"], json!(5));
            }),
            vec![
                "source: Invalid value: {\"component\":\"x\"}: field is immutable".into(),
                "firstTimestamp: Invalid value: \"2017-09-19T13:49:16Z\": field is immutable".into(),
                "lastTimestamp: Invalid value: \"2017-09-19T13:49:16Z\": field is immutable".into(),
                "count: Invalid value: 5: field is immutable".into(),
            ],
        ),
        (
            "empty forms of absent fields are no change",
            Box::new(|o| {
                set(o, &["deprecatedSource"], json!({}));
                set(o, &["deprecatedCount"], json!(0));
                set(o, &["regarding", "uid"], json!(""));
            }),
            vec![],
        ),
        (
            "an update still passes the legacy rules",
            Box::new(|o| {
                set(o, &["metadata", "namespace"], json!("team-a"));
            }),
            vec!["involvedObject.namespace: Invalid value: \"\": does not match event.namespace".into()],
        ),
    ];
    for (name, mutate, want) in cases {
        let old = valid();
        let mut new = old.clone();
        mutate(&mut new);
        let mut errs = EventStrategy.validate_on_update(&new, &old);
        errs.extend(EventStrategy.validate_update(&new, &old));
        assert_eq!(rendered(&errs), want, "{name}");
    }
    // A core/v1 Event with a name no DNS subdomain may still be updated through events.k8s.io.
    let mut old = valid();
    set(&mut old, &["metadata", "name"], json!("Node_1.17a"));
    assert_eq!(rendered(&EventStrategy.validate_update(&old, &old)), Vec::<String>::new());
}

#[test]
fn field_selectors_are_cores() {
    let e = valid();
    let cases: &[(&str, Option<&str>)] = &[
        ("involvedObject.kind", Some("Node")),
        ("involvedObject.name", Some("node-1")),
        ("involvedObject.namespace", Some("")),
        ("reason", Some("Because")),
        ("reportingComponent", Some("k8s.io/my-controller")),
        ("source", Some("k8s.io/my-controller")),
        ("type", Some("Normal")),
        ("regarding.name", None),
        ("note", None),
    ];
    for (path, want) in cases {
        assert_eq!(EventStrategy.field(&e, path).as_deref(), *want, "{path}");
    }
}

#[test]
fn table_is_cores() {
    let now = chrono::DateTime::parse_from_rfc3339("2017-09-19T13:59:16Z").unwrap().with_timezone(&chrono::Utc);
    assert_eq!(EventStrategy.columns(), CoreEventStrategy.columns());
    assert!(EventStrategy.name_column_last());
    let mut e = valid();
    set(&mut e, &["series"], json!({"count": 4, "lastObservedTime": "2017-09-19T13:58:16.000000Z"}));
    assert_eq!(
        EventStrategy.cells(&e, now),
        vec![
            json!("60s"),
            json!("Normal"),
            json!("Because"),
            json!("node/node-1"),
            json!(""),
            json!("k8s.io/my-controller, node-xyz"),
            json!("hello"),
            json!("10m"),
            json!(4),
        ]
    );
}

#[test]
fn kept_as_core_events() {
    let stored = EventStrategy.stored_as().unwrap();
    assert_eq!(stored.prefix(), "/registry/core/events/");
    let def = &resources()[0];
    let core = crate::registry::core::resources().into_iter().find(|d| d.resource == "events").unwrap();
    assert_eq!(stored.prefix(), core.prefix(), "the prefix of core/v1 events");
    assert_eq!(stored.gvk, (core.group, core.version, core.kind));
    assert_eq!((def.group, def.version, def.kind), ("events.k8s.io", "v1", "Event"));
    // Through the byte conversion of the storage view.
    use crate::storage::view::Convert;
    let bytes = stored.write(&serde_json::to_vec(&valid()).unwrap()).unwrap();
    let as_core: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((as_core["apiVersion"].as_str(), as_core["message"].as_str()), (Some("v1"), Some("hello")));
    let back: Value = serde_json::from_slice(&stored.read(&bytes).unwrap()).unwrap();
    assert_eq!(back, valid());
    assert!(stored.read(b"not json").is_err(), "a stored value that is no JSON is an error, not a panic");
}

#[test]
fn no_panics_on_odd_json() {
    let now = chrono::DateTime::parse_from_rfc3339("2017-09-19T13:59:16Z").unwrap().with_timezone(&chrono::Utc);
    let odd = [
        json!(null),
        json!([]),
        json!("x"),
        json!({"metadata": 5, "series": "x", "regarding": 7, "eventTime": 3, "deprecatedSource": [], "type": {}}),
        json!({"series": {"count": "many", "lastObservedTime": 5}, "related": "x", "deprecatedCount": 1.5}),
    ];
    for o in &odd {
        let _ = EventStrategy.validate(o);
        for other in &odd {
            let _ = EventStrategy.validate_on_update(o, other);
            let _ = EventStrategy.validate_update(o, other);
        }
        let _ = EventStrategy.field(o, "involvedObject.name");
        let _ = EventStrategy.cells(o, now);
    }
}
