//! Server-side apply after client-side apply: the two rules of [`super::last_applied`]
//! through [`apply`], as kube-apiserver's `lastAppliedManager` and `lastAppliedUpdater`
//! behave (their upstream tests' cases: ownership taken over where the live value is the one
//! last applied, conflicts kept elsewhere, the annotation kept current, other managers and
//! objects without the annotation untouched, the annotation dropped past 256 KiB).

use serde_json::{json, Value};

use super::last_applied::{takeover_fields, LAST_APPLIED_ANNOTATION};
use super::managed::BEFORE_FIRST_APPLY;
use super::*;
use crate::validation::TOTAL_ANNOTATION_SIZE_LIMIT_B;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

const CSA: &str = "kubectl-client-side-apply";

fn configmap_schema() -> Schema {
    let reg = crate::registry::Registry::builtin();
    let doc: Value = serde_json::from_slice(crate::openapi::OpenApi::new(&reg).v2()).unwrap();
    Schema::from_definitions(doc["definitions"].as_object().unwrap(), "io.k8s.api.core.v1.ConfigMap").unwrap()
}

fn writer<'a>(manager: &'a str, time: &'a str, reset: &'a FieldSet) -> Writer<'a> {
    Writer { manager, api_version: "v1", subresource: "", time, reset_fields: reset }
}

/// A ConfigMap `cm` in `default` with `data`, as a configuration.
fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": data})
}

/// `obj` with the annotations `extra` and the last-applied annotation `last`.
fn annotated(mut obj: Value, last: &str, extra: &[(&str, &str)]) -> Value {
    let mut a = serde_json::Map::new();
    for (k, v) in extra {
        a.insert(k.to_string(), json!(v));
    }
    a.insert(LAST_APPLIED_ANNOTATION.into(), json!(last));
    obj["metadata"]["annotations"] = Value::Object(a);
    obj
}

/// What `kubectl apply` (client-side) creates from `data`: the object with the annotation
/// holding that configuration, owned by an Update of `kubectl-client-side-apply`.
fn client_side_applied(s: &Schema, data: Value) -> Value {
    let none = FieldSet::new();
    let last = format!(
        "{{\"apiVersion\":\"v1\",\"data\":{},\"kind\":\"ConfigMap\",\"metadata\":{{\"annotations\":{{}},\"name\":\"cm\",\"namespace\":\"default\"}}}}\n",
        data
    );
    update(s, None, annotated(cm(data), &last, &[]), &writer(CSA, T0, &none)).object
}

fn last_applied(obj: &Value) -> Option<&str> {
    obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION].as_str()
}

/// `fieldsV1` of `manager`'s entry (none: it owns nothing).
fn owned(obj: &Value, manager: &str) -> Option<Value> {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == manager))
        .map(|e| e["fieldsV1"].clone())
}

/// Edits `live`'s annotation, as `kubectl annotate --overwrite` would (ownership aside).
fn with_last_applied(mut live: Value, last: &str) -> Value {
    live["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = json!(last);
    live
}

/// `kubectl apply` of `color: red, size: small`.
fn csa_red(s: &Schema) -> Value {
    client_side_applied(s, json!({"color": "red", "size": "small"}))
}

/// [`csa_red`] with its managedFields gone (written before fields were tracked, or reset).
fn untracked_csa_red(s: &Schema) -> Value {
    let mut live = csa_red(s);
    if let Some(meta) = live["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    live
}

struct Case {
    name: &'static str,
    /// The object before the server-side apply.
    live: fn(&Schema) -> Value,
    manager: &'static str,
    force: bool,
    config: Value,
    /// Ok: the data afterwards; Err: the conflict message.
    want: Result<Value, &'static str>,
}

/// Which conflicts with client-side apply's fields a server-side apply meets.
#[test]
fn apply_after_client_side_apply_takes_over_or_conflicts() {
    let cases = [
        Case {
            name: "live value is the last-applied value: taken over",
            live: csa_red,
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Ok(json!({"color": "blue", "size": "small"})),
        },
        Case {
            name: "several fields, all as last applied: taken over",
            live: csa_red,
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "large", "shape": "round"})),
            want: Ok(json!({"color": "blue", "size": "large", "shape": "round"})),
        },
        Case {
            name: "another manager than kubectl: the conflict stays",
            live: csa_red,
            manager: "painter",
            force: false,
            config: cm(json!({"color": "blue"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#,
            ),
        },
        Case {
            name: "live value differs from the last-applied one: the conflict stays",
            live: |s| {
                with_last_applied(
                    csa_red(s),
                    r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"color":"green","size":"small"}}"#,
                )
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#,
            ),
        },
        Case {
            name: "only the fields that differ are reported",
            live: |s| {
                with_last_applied(
                    csa_red(s),
                    r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"color":"red","size":"large"}}"#,
                )
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "tiny"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.size"#,
            ),
        },
        Case {
            name: "a field the last-applied configuration lacks: the conflict stays",
            live: |s| {
                with_last_applied(csa_red(s), r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"size":"small"}}"#)
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#,
            ),
        },
        Case {
            name: "a field changed since by another writer: the conflict with it stays",
            live: |s| {
                let none = FieldSet::new();
                let mut edited = csa_red(s);
                edited["data"]["color"] = json!("green");
                update(s, Some(&csa_red(s)), edited, &writer("kubectl-edit", T0, &none)).object
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.color"#),
        },
        Case {
            name: "last applied with another apiVersion: the conflict stays",
            live: |s| {
                with_last_applied(
                    csa_red(s),
                    r#"{"apiVersion":"v2","kind":"ConfigMap","data":{"color":"red","size":"small"}}"#,
                )
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#,
            ),
        },
        Case {
            name: "last applied that is not JSON: the conflict stays",
            live: |s| with_last_applied(csa_red(s), "{not json"),
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#,
            ),
        },
        Case {
            name: "last applied whose data is not a map: the conflict stays",
            live: |s| with_last_applied(csa_red(s), r#"{"apiVersion":"v1","kind":"ConfigMap","data":["red"]}"#),
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.color"#,
            ),
        },
        Case {
            name: "no annotation (kubectl create): the conflict stays",
            live: |s| {
                let none = FieldSet::new();
                update(s, None, cm(json!({"color": "red"})), &writer("kubectl-create", T0, &none)).object
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue"})),
            want: Err(r#"Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.color"#),
        },
        Case {
            name: "no managedFields (before the first apply): taken over from before-first-apply",
            live: untracked_csa_red,
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Ok(json!({"color": "blue", "size": "small"})),
        },
        Case {
            name: "no managedFields, another manager: the conflict with before-first-apply stays",
            live: untracked_csa_red,
            manager: "painter",
            force: false,
            config: cm(json!({"color": "blue"})),
            want: Err(r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.color"#),
        },
        Case {
            name: "no managedFields, live value differs from the last-applied one: the conflict stays",
            live: |s| {
                with_last_applied(
                    untracked_csa_red(s),
                    r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"color":"green","size":"small"}}"#,
                )
            },
            manager: "kubectl",
            force: false,
            config: cm(json!({"color": "blue", "size": "small"})),
            want: Err(r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.color"#),
        },
        Case {
            name: "forced by another manager: taken",
            live: csa_red,
            manager: "painter",
            force: true,
            config: cm(json!({"color": "blue"})),
            want: Ok(json!({"color": "blue", "size": "small"})),
        },
    ];
    let s = configmap_schema();
    let none = FieldSet::new();
    for c in cases {
        let live = (c.live)(&s);
        let got = apply(&s, Some(&live), &c.config, &writer(c.manager, T1, &none), c.force);
        match (got, c.want) {
            (Ok(out), Ok(data)) => {
                assert_eq!(out.object["data"], data, "{}", c.name);
                assert!(out.changed, "{}", c.name);
                // The applier owns what it applied, client-side apply none of what changed.
                let mine = owned(&out.object, c.manager).unwrap_or_else(|| panic!("{}: {}", c.name, out.object));
                for key in c.config["data"].as_object().unwrap().keys() {
                    assert!(mine["f:data"][format!("f:{key}")].is_object(), "{}: {mine}", c.name);
                }
                // The fields it held before: client-side apply's, or (no entries) those an
                // Update of `before-first-apply` is given first.
                let before = if live["metadata"].get("managedFields").is_some() { CSA } else { BEFORE_FIRST_APPLY };
                let kept = owned(&out.object, before).unwrap_or_default();
                for (key, value) in c.config["data"].as_object().unwrap() {
                    let was = &live["data"][key];
                    assert_eq!(kept["f:data"][format!("f:{key}")].is_object(), was == value, "{}: {kept}", c.name);
                }
            }
            (Err(e), Err(msg)) => assert_eq!(e.to_string(), msg, "{}", c.name),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", c.name),
        }
    }
}

/// The fields taken over are exactly those whose live value is the last-applied one.
#[test]
fn takeover_fields_are_the_unchanged_last_applied_ones() {
    let s = configmap_schema();
    let live = with_last_applied(
        client_side_applied(&s, json!({"a": "1", "b": "2", "c": "3"})),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","labels":{"l":"x"}},"data":{"a":"1","b":"changed","d":"4"}}"#,
    );
    let set = takeover_fields(&s, &live, "v1").unwrap();
    let paths: Vec<String> = set.paths().iter().map(ToString::to_string).collect();
    // `b` differs, `d` and the label are gone, `c` was never last applied.
    assert_eq!(paths, [".apiVersion", ".data.a", ".kind", ".metadata.name"]);
    assert!(takeover_fields(&s, &live, "v2").is_none());
    let mut plain = live.clone();
    plain["metadata"]["annotations"] = json!({});
    assert!(takeover_fields(&s, &plain, "v1").is_none());
    assert!(takeover_fields(&s, &with_last_applied(live.clone(), ""), "v1").is_none());
    assert!(takeover_fields(&s, &with_last_applied(live, "[1]"), "v1").is_none());
}

/// kubectl's server-side apply keeps the annotation of an object that has one: the applied
/// configuration, as kubectl itself would write it; other managers and objects without
/// the annotation are left alone.
#[test]
fn apply_keeps_the_last_applied_annotation_current() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let live = client_side_applied(&s, json!({"color": "red"}));
    let config = cm(json!({"color": "blue", "note": "a<b & c>d \u{2028}"}));
    let out = apply(&s, Some(&live), &config, &writer("kubectl", T1, &none), false).unwrap();
    assert_eq!(
        last_applied(&out.object),
        Some(concat!(
            r#"{"apiVersion":"v1","data":{"color":"blue","note":"a\u003cb \u0026 c\u003ed \u2028"},"#,
            r#""kind":"ConfigMap","metadata":{"name":"cm","namespace":"default"}}"#,
            "\n"
        ))
    );
    let parsed: Value = serde_json::from_str(last_applied(&out.object).unwrap()).unwrap();
    assert_eq!(parsed, config);

    // Applying the same again changes nothing; a later change is recorded again.
    let again = apply(&s, Some(&out.object), &config, &writer("kubectl", T1, &none), false).unwrap();
    assert!(!again.changed);
    assert_eq!(again.object, out.object);

    // The annotation in the configuration itself (a conflict with client-side apply, which
    // set it: forced) is left out of the value; other annotations stay, an empty map stays
    // a map.
    let with_own = annotated(cm(json!({"color": "blue"})), "stale", &[("team", "a")]);
    let refused = apply(&s, Some(&live), &with_own, &writer("kubectl", T1, &none), false);
    assert!(refused.is_err_and(|e| e
        .to_string()
        .contains(".metadata.annotations.kubectl.kubernetes.io/last-applied-configuration")));
    let out = apply(&s, Some(&live), &with_own, &writer("kubectl", T1, &none), true).unwrap();
    let value: Value = serde_json::from_str(last_applied(&out.object).unwrap()).unwrap();
    assert_eq!(value["metadata"]["annotations"], json!({"team": "a"}));
    let only_own = annotated(cm(json!({"color": "blue"})), "stale", &[]);
    let out = apply(&s, Some(&live), &only_own, &writer("kubectl", T1, &none), true).unwrap();
    let value: Value = serde_json::from_str(last_applied(&out.object).unwrap()).unwrap();
    assert_eq!(value["metadata"]["annotations"], json!({}));

    // Forced or not, only `kubectl` keeps it.
    let out = apply(&s, Some(&live), &config, &writer("kubectl", T1, &none), true).unwrap();
    assert_eq!(serde_json::from_str::<Value>(last_applied(&out.object).unwrap()).unwrap(), config);
    let out = apply(&s, Some(&live), &config, &writer("painter", T1, &none), true).unwrap();
    assert_eq!(last_applied(&out.object), last_applied(&live));

    // No annotation: none is added (on create neither).
    let created = update(&s, None, cm(json!({"color": "red"})), &writer("kubectl-create", T0, &none)).object;
    let out = apply(&s, Some(&created), &cm(json!({"color": "red"})), &writer("kubectl", T1, &none), false).unwrap();
    assert_eq!(out.object["metadata"].get("annotations"), None);
    let out = apply(&s, None, &config, &writer("kubectl", T1, &none), false).unwrap();
    assert_eq!(out.object["metadata"].get("annotations"), None);

    // An empty annotation counts as none: no takeover (a conflict), and it stays empty.
    let empty = with_last_applied(live.clone(), "");
    assert!(apply(&s, Some(&empty), &config, &writer("kubectl", T1, &none), false).is_err());
    let out = apply(&s, Some(&empty), &config, &writer("kubectl", T1, &none), true).unwrap();
    assert_eq!(last_applied(&out.object), Some(""));

    // Conflicts leave everything as it was.
    let refused = apply(&s, Some(&live), &config, &writer("painter", T1, &none), false);
    assert!(matches!(refused, Err(ApplyError::Conflicts(..))), "{refused:?}");
}

/// Past 256 KiB of annotations (keys and values) the annotation is dropped, as upstream's
/// `SetLastApplied` does; at the limit it is kept.
#[test]
fn an_oversized_last_applied_annotation_is_dropped() {
    let s = configmap_schema();
    let none = FieldSet::new();
    let live = client_side_applied(&s, json!({"color": "red"}));
    let config = cm(json!({"color": "blue"}));
    let w = writer("kubectl", T1, &none);
    let value = apply(&s, Some(&live), &config, &w, false).unwrap();
    let value = last_applied(&value.object).unwrap().to_string();
    // Another annotation (someone else's) filling the rest up to the limit, exactly, then
    // one byte past it.
    let key = "example.com/bulk";
    let room = TOTAL_ANNOTATION_SIZE_LIMIT_B - LAST_APPLIED_ANNOTATION.len() - value.len() - key.len();
    for (filler, want) in [(room, Some(value.as_str())), (room + 1, None)] {
        let mut big = live.clone();
        big["metadata"]["annotations"][key] = json!("x".repeat(filler));
        let out = apply(&s, Some(&big), &config, &w, false).unwrap();
        assert_eq!(last_applied(&out.object), want, "filler {filler}");
        assert_eq!(out.object["metadata"]["annotations"][key].as_str().map(str::len), Some(filler));
        assert_eq!(out.object["data"]["color"], "blue");
    }
    // A configuration past the limit on its own: the annotation goes, the apply succeeds.
    let huge = cm(json!({"color": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B)}));
    let out = apply(&s, Some(&live), &huge, &w, false).unwrap();
    assert_eq!(out.object["metadata"]["annotations"], json!({}));
    assert!(out.changed);
}
