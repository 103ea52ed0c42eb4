//! JSON merge patch (RFC 7386) as evanphx/json-patch v4 applies it.

use serde_json::{Map, Value};

use super::PatchError;

/// RFC 7386 merge patch as evanphx/json-patch v4 applies it: `null` deletes a key; values
/// that land on a missing (or null, or non-object) spot have their nulls pruned.
pub fn merge_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let bad = || PatchError::BadRequest("Invalid JSON Patch".to_string());
    let patch: Value = serde_json::from_slice(body).map_err(|_| bad())?;
    let Value::Object(patch) = patch else {
        return Err(bad());
    };
    let mut doc = original.clone();
    let Value::Object(map) = &mut doc else {
        return Err(PatchError::BadRequest("Invalid JSON Document".to_string()));
    };
    merge_docs(map, patch);
    Ok(doc)
}

fn merge_docs(doc: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            doc.remove(&k);
            continue;
        }
        match doc.get_mut(&k) {
            None | Some(Value::Null) => {
                let mut v = v;
                prune_nulls(&mut v);
                doc.insert(k, v);
            }
            Some(cur) => merge_value(cur, v),
        }
    }
}

fn merge_value(cur: &mut Value, patch: Value) {
    match (cur, patch) {
        (Value::Object(c), Value::Object(p)) => merge_docs(c, p),
        // A non-object patch value replaces an object as it is.
        (cur @ Value::Object(_), p) => *cur = p,
        (cur, mut p) => {
            prune_nulls(&mut p);
            *cur = p;
        }
    }
}

fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(prune_nulls);
        }
        Value::Array(a) => {
            a.retain(|v| !v.is_null());
            a.iter_mut().for_each(prune_nulls);
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::machinery::patch::tests::{check, cm, Want};
    use crate::machinery::patch::{apply_patch, DefaultMergeKeys, PatchType};
    use serde_json::{json, Value};

    #[test]
    fn merge_patch_table() {
        let cases: Vec<(&str, Value, &str, Want)> = vec![
            (
                "null deletes",
                cm(),
                r#"{"metadata":{"labels":{"a":null}}}"#,
                Want::Ok({
                    let mut v = cm();
                    v["metadata"]["labels"].as_object_mut().unwrap().remove("a");
                    v
                }),
            ),
            (
                "adds and replaces",
                cm(),
                r#"{"data":{"k":"w","n":"1"}}"#,
                Want::Ok({
                    let mut v = cm();
                    v["data"]["k"] = json!("w");
                    v["data"]["n"] = json!("1");
                    v
                }),
            ),
            (
                "delete a whole map",
                cm(),
                r#"{"data":null}"#,
                Want::Ok({
                    let mut v = cm();
                    v.as_object_mut().unwrap().remove("data");
                    v
                }),
            ),
            (
                "new subtree has its nulls pruned",
                json!({"a": 1}),
                r#"{"b":{"c":null,"d":[null,{"e":null,"f":1}]}}"#,
                Want::Ok(json!({"a": 1, "b": {"d": [{"f": 1}]}})),
            ),
            ("lists are replaced", json!({"l": [1, 2, 3]}), r#"{"l":[4]}"#, Want::Ok(json!({"l": [4]}))),
            (
                "a list replacing an object keeps its nulls",
                json!({"o": {"x": 1}}),
                r#"{"o":[null,{"a":null}]}"#,
                Want::Ok(json!({"o": [null, {"a": null}]})),
            ),
            (
                "an object replacing a scalar is pruned",
                json!({"o": 1}),
                r#"{"o":{"a":null,"b":2}}"#,
                Want::Ok(json!({"o": {"b": 2}})),
            ),
            ("empty patch", cm(), "{}", Want::Ok(cm())),
            ("not JSON", cm(), "nope", Want::Bad),
            ("null", cm(), "null", Want::Bad),
            ("a list", cm(), "[]", Want::Bad),
            ("a string", cm(), r#""x""#, Want::Bad),
        ];
        for (name, original, body, want) in &cases {
            check(name, apply_patch(original, body.as_bytes(), PatchType::Merge, &DefaultMergeKeys), want);
        }
    }
}
