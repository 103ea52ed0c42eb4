//! Small helpers the kinds' strategies share: JSON access that never panics, the Table
//! columns every printer has (`Age`), and field errors whose values upstream renders with Go's
//! `%#v`.

use serde_json::{json, Map, Value};

use crate::error::FieldError;
use crate::registry::{age, Column};

/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`, the description of Age columns.
pub(crate) const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A `string` column without format.
pub(crate) fn col(name: &'static str, description: &'static str, priority: u32) -> Column {
    Column { name, type_: "string", format: "", description, priority }
}

/// The `Age` column of upstream's printers.
pub(crate) fn age_column() -> Column {
    col("Age", AGE_DESCRIPTION, 0)
}

/// `translateTimestampSince(obj.CreationTimestamp)`.
pub(crate) fn creation_age(obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
    age(str_at(obj, &["metadata", "creationTimestamp"]), now)
}

/// Value at a path of object keys, if every step is an object.
pub(crate) fn get_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.as_object()?.get(*k))
}

pub(crate) fn get_at_mut<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(obj, |v, k| v.as_object_mut()?.get_mut(*k))
}

/// String at a path (None when absent or not a string).
pub(crate) fn str_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    get_at(obj, path).and_then(Value::as_str)
}

/// The object at `path`, creating missing or null steps; None if a step holds a non-object.
pub(crate) fn child_obj<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = obj;
    for key in path {
        let m = cur.as_object_mut()?;
        let next = m.entry((*key).to_string()).or_insert_with(|| json!({}));
        if next.is_null() {
            *next = json!({});
        }
        cur = next;
    }
    cur.as_object_mut()
}

/// `field.Invalid` whose value upstream renders with Go's `%#v` (structs, slices, []byte):
/// `shown` is that rendering.
pub(crate) fn invalid_shown(field: impl Into<String>, shown: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: {shown}: {detail}"),
    }
}

/// `field.TooLong` as kube-apiserver 1.35 words it.
pub(crate) fn too_long(field: impl Into<String>, max: usize) -> FieldError {
    FieldError { reason: "FieldValueTooLong", field: field.into(), message: crate::error::too_long_message(max) }
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
pub(crate) fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Copies `old[path]` into `new[path]`, or removes it from `new` when `old` has none
/// (Go's `new.X = old.X`).
pub(crate) fn carry(new: &mut Value, old: &Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else { return };
    let from = get_at(old, path).filter(|v| !v.is_null()).cloned();
    match from {
        Some(v) => {
            if let Some(m) = child_obj(new, parents) {
                m.insert((*last).to_string(), v);
            }
        }
        None => {
            if let Some(Value::Object(m)) = get_at_mut(new, parents) {
                m.remove(*last);
            }
        }
    }
}

/// A `metav1.Time`/`MicroTime` that is unset (absent, null or Go's zero time).
pub(crate) fn is_zero_time(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty() || s.starts_with("0001-01-01T00:00:00"),
        Some(_) => false,
    }
}
