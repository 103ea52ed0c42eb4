//! Client-side apply's annotation under server-side apply, as kube-apiserver's field manager
//! treats it (`lastAppliedManager`, `lastAppliedUpdater`): both rules hold only for the
//! manager `kubectl` (what `kubectl apply --server-side` sends); any other manager opts out.
//!
//! - Taking over from client-side apply: the fields of the live object's
//!   `kubectl.kubernetes.io/last-applied-configuration` whose live value is still the one
//!   last applied ([`takeover_fields`]). A conflicting apply by `kubectl` whose conflicts all
//!   lie in that set takes them as if forced; otherwise only the others are reported.
//! - Keeping the annotation current: after a successful apply by `kubectl` to an object that
//!   carries the annotation, it holds the applied configuration (without the annotation
//!   itself) as JSON with a trailing newline, as kubectl writes it ([`sync_annotation`]);
//!   when that would take the object's annotations past 256 KiB, the annotation is dropped.
//!
//! What enters: the live object, the applied configuration, the kind's [`Schema`]. What
//! leaves: a [`FieldSet`], or the object with its annotation set. No I/O; the work is linear
//! in the annotation and the objects.

use serde_json::Value;

use super::fieldset::FieldSet;
use super::schema::Schema;
use super::typed::{compare, to_field_set};
use crate::validation::TOTAL_ANNOTATION_SIZE_LIMIT_B;

/// The annotation kubectl's client-side apply keeps its last configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The field manager both rules are for (kubectl's default for `apply --server-side`).
pub const KUBECTL_MANAGER: &str = "kubectl";

/// The annotation's value in `obj`, when it has a non-empty one.
fn annotation(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations")?.get(LAST_APPLIED_ANNOTATION)?.as_str().filter(|s| !s.is_empty())
}

/// The fields of `live`'s last-applied configuration whose value `live` still has: those it
/// sets, less those whose value differs and those `live` lacks (upstream's
/// `allowedConflictsFromLastApplied`). None when there is no annotation, or it is not JSON
/// of `api_version` the schema reads (then conflicts stay conflicts).
pub fn takeover_fields(schema: &Schema, live: &Value, api_version: &str) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(annotation(live)?).ok()?;
    if !last.is_object() || last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let set = to_field_set(schema, &last).ok()?;
    let cmp = compare(schema, &last, live).ok()?;
    Some(set.difference(&cmp.modified).difference(&cmp.added).difference(&cmp.removed))
}

/// Sets `object`'s last-applied annotation to `config` when `object` has a non-empty one;
/// says whether the object changed. `config` is written without the annotation, keys
/// sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped, and a newline at the end (Go's JSON
/// encoder, which kubectl writes it with). When the object's annotations would then exceed
/// 256 KiB (keys and values), the annotation is removed instead.
pub fn sync_annotation(object: &mut Value, config: &Value) -> bool {
    if annotation(object).is_none() {
        return false;
    }
    let value = go_json(&without_annotation(config));
    let Some(annotations) = object.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) else {
        return false;
    };
    let before = annotations.insert(LAST_APPLIED_ANNOTATION.to_string(), Value::String(value));
    let total = annotations
        .iter()
        .fold(0usize, |n, (k, v)| n.saturating_add(k.len()).saturating_add(v.as_str().map_or(0, str::len)));
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        annotations.remove(LAST_APPLIED_ANNOTATION);
        return true;
    }
    before.as_ref() != annotations.get(LAST_APPLIED_ANNOTATION)
}

/// `config` without the annotation, as upstream edits an unstructured object's annotations:
/// a map of strings loses the key (and stays, empty or not); annotations that are not a map
/// of strings are dropped altogether; no annotations stay none.
fn without_annotation(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        match meta.get_mut("annotations") {
            None => {}
            Some(Value::Object(a)) if a.values().all(Value::is_string) => {
                a.remove(LAST_APPLIED_ANNOTATION);
            }
            Some(_) => {
                meta.remove("annotations");
            }
        }
    }
    c
}

/// JSON as Go's `encoding/json` encoder writes it: map keys sorted (serde_json's maps are),
/// HTML characters and the two JavaScript line separators escaped, a newline after.
fn go_json(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len() + 1);
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}
