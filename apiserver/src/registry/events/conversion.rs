//! events.k8s.io/v1 `Event` ↔ core/v1 `Event`, field by field as upstream converts them
//! through the internal type (`pkg/apis/events/v1/conversion.go`): `regarding` is
//! `involvedObject`, `note` is `message`, `reportingController` is `reportingComponent`, the
//! `deprecated*` fields are core's `source`, `firstTimestamp`, `lastTimestamp` and `count`;
//! `metadata`, `eventTime`, `series`, `action`, `reason`, `related`, `reportingInstance` and
//! `type` are the same in both. Pure functions over the wire form; a field either form does
//! not know is dropped (objects are pruned to their kind before they get here).

use serde_json::{json, Map, Value};

/// (events.k8s.io/v1 name, core/v1 name) of every field the two forms share.
const FIELDS: &[(&str, &str)] = &[
    ("metadata", "metadata"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("type", "type"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn convert(obj: &Value, api_version: &str, from_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    if let Value::Object(m) = obj {
        for (v1, core) in FIELDS {
            let (from, to) = if from_core { (core, v1) } else { (v1, core) };
            if let Some(v) = m.get(*from) {
                out.insert((*to).to_string(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// A core/v1 Event as events.k8s.io/v1 shows it.
pub fn from_core(core: &Value) -> Value {
    convert(core, "events.k8s.io/v1", true)
}

/// An events.k8s.io/v1 Event in the core/v1 form it is kept in.
pub fn to_core(event: &Value) -> Value {
    convert(event, "v1", false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field set, in both forms.
    fn pair() -> (Value, Value) {
        let meta = json!({"name": "web.17a", "namespace": "default", "uid": "u1", "labels": {"a": "b"}});
        let regarding = json!({"kind": "Pod", "namespace": "default", "name": "web", "uid": "u2", "apiVersion": "v1",
                               "resourceVersion": "7", "fieldPath": "spec.containers{app}"});
        let related = json!({"kind": "Node", "name": "node-1"});
        let series = json!({"count": 3, "lastObservedTime": "2024-05-01T11:59:00.000000Z"});
        let source = json!({"component": "kubelet", "host": "node-1"});
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta,
            "eventTime": "2024-05-01T11:00:00.000000Z", "series": series,
            "reportingController": "example.com/ctrl", "reportingInstance": "ctrl-1",
            "action": "Binding", "reason": "Scheduled", "regarding": regarding, "related": related,
            "note": "assigned", "type": "Normal", "deprecatedSource": source,
            "deprecatedFirstTimestamp": "2024-05-01T11:00:00Z", "deprecatedLastTimestamp": "2024-05-01T11:58:00Z",
            "deprecatedCount": 4,
        });
        let core = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": meta,
            "eventTime": "2024-05-01T11:00:00.000000Z", "series": series,
            "reportingComponent": "example.com/ctrl", "reportingInstance": "ctrl-1",
            "action": "Binding", "reason": "Scheduled", "involvedObject": regarding, "related": related,
            "message": "assigned", "type": "Normal", "source": source,
            "firstTimestamp": "2024-05-01T11:00:00Z", "lastTimestamp": "2024-05-01T11:58:00Z",
            "count": 4,
        });
        (v1, core)
    }

    #[test]
    fn conversion_both_ways() {
        let (v1, core) = pair();
        // Upstream's own conversion test case: regarding, deprecatedSource and note.
        let upstream_v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "foo", "namespace": "default"},
            "regarding": {"kind": "Pod", "namespace": "default", "name": "foo"},
            "deprecatedSource": {"component": "controller-manager", "host": "master1"},
            "note": "convert v1 event to core event"});
        let upstream_core = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "foo", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "foo"},
            "source": {"component": "controller-manager", "host": "master1"},
            "message": "convert v1 event to core event"});
        let cases: Vec<(&str, Value, Value)> = vec![
            ("every field", v1.clone(), core.clone()),
            ("upstream's case", upstream_v1, upstream_core),
            ("nothing but the type", json!({"kind": "Event"}), json!({"apiVersion": "v1", "kind": "Event"})),
        ];
        for (name, v1, core) in cases {
            let mut want_v1 = v1.clone();
            want_v1["apiVersion"] = json!("events.k8s.io/v1");
            assert_eq!(to_core(&v1), core, "{name}: to core");
            assert_eq!(from_core(&core), want_v1, "{name}: from core");
            assert_eq!(from_core(&to_core(&v1)), want_v1, "{name}: round trip");
        }
    }

    #[test]
    fn fields_of_the_other_form_and_odd_input_are_dropped() {
        let cases = [
            (
                "core names on a v1 object",
                json!({"message": "m", "involvedObject": {}, "note": "n"}),
                json!({"apiVersion": "v1", "kind": "Event", "message": "n"}),
            ),
            ("unknown field", json!({"spec": 1}), json!({"apiVersion": "v1", "kind": "Event"})),
            ("not an object", json!([1]), json!({"apiVersion": "v1", "kind": "Event"})),
        ];
        for (name, input, want) in cases {
            assert_eq!(to_core(&input), want, "{name}");
        }
        assert_eq!(
            from_core(&json!({"note": "n", "count": 2})),
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "deprecatedCount": 2}),
            "v1 names on a core object"
        );
    }
}
