//! JSON patch (RFC 6902) with evanphx/json-patch v4 semantics, and the budget that keeps
//! `copy` and nesting within kube-apiserver's limits.

use serde_json::Value;

use super::{
    json_kind, unprocessable, PatchError, MAX_JSON_PATCH_COPY_BYTES, MAX_JSON_PATCH_DEPTH, MAX_JSON_PATCH_OPERATIONS,
};

/// RFC 6902 JSON patch. All operations apply or none: on any failure the original is left
/// as it was. As evanphx v4, `test` with `value: null` passes on a missing object key.
pub fn json_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let parsed: Value = serde_json::from_slice(body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    let ops = match parsed {
        Value::Null => Vec::new(),
        Value::Array(ops) => ops,
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                json_kind(&other)
            )))
        }
    };
    if let Some(bad) = ops.iter().find(|op| !op.is_object() && !op.is_null()) {
        return Err(PatchError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
            json_kind(bad)
        )));
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let mut doc = original.clone();
    let mut budget = PatchBudget::new(&doc);
    for (i, op) in ops.into_iter().enumerate() {
        let op: json_patch::PatchOperation =
            serde_json::from_value(op).map_err(|e| unprocessable(format!("operation {i}: {e}")))?;
        if test_null_on_missing_key(&doc, &op) {
            continue;
        }
        budget.charge(&doc, &op).map_err(|e| unprocessable(format!("operation {i}: {e}")))?;
        json_patch::patch(&mut doc, std::slice::from_ref(&op))
            .map_err(|e| unprocessable(format!("operation {i}: {e}")))?;
    }
    Ok(doc)
}

/// The limit of a [`PatchBudget`] an operation would break.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetExceeded {
    /// The bytes `copy` operations would have added so far.
    #[error(
        "Unable to complete the copy, the accumulated size increase of copy is {0}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
    )]
    CopyBytes(usize),
    #[error("the patched document could nest more than {MAX_JSON_PATCH_DEPTH} levels deep")]
    Depth,
}

/// What a JSON patch may still do: the bytes `copy` operations may add
/// ([`MAX_JSON_PATCH_COPY_BYTES`]) and an upper bound of the document's depth (kept under
/// [`MAX_JSON_PATCH_DEPTH`]). Checked before each operation is applied, so neither limit
/// is ever exceeded in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchBudget {
    copied: usize,
    depth: usize,
}

impl PatchBudget {
    pub fn new(doc: &Value) -> Self {
        PatchBudget { copied: 0, depth: crate::meta::nesting_depth(doc) }
    }

    /// Accounts for `op` about to be applied to `doc`, or says which limit it would break.
    pub fn charge(&mut self, doc: &Value, op: &json_patch::PatchOperation) -> Result<(), BudgetExceeded> {
        use json_patch::PatchOperation as Op;
        let tokens = |p: &json_patch::jsonptr::Pointer| p.as_str().matches('/').count();
        let reached = match op {
            Op::Add(o) => tokens(&o.path) + crate::meta::nesting_depth(&o.value),
            Op::Replace(o) => tokens(&o.path) + crate::meta::nesting_depth(&o.value),
            Op::Copy(o) => {
                // The value copied; when `from` cannot be resolved here the whole document
                // stands in for it (an upper bound: the copy is part of it).
                let from = doc.pointer(o.from.as_str()).unwrap_or(doc);
                let size = json_size(from);
                self.copied = self.copied.saturating_add(size);
                if self.copied > MAX_JSON_PATCH_COPY_BYTES {
                    return Err(BudgetExceeded::CopyBytes(self.copied));
                }
                tokens(&o.path) + crate::meta::nesting_depth(from)
            }
            // What moves sits `from`-deep in a document at most `depth` deep.
            Op::Move(o) => (self.depth + tokens(&o.path)).saturating_sub(tokens(&o.from)),
            Op::Remove(_) | Op::Test(_) => 0,
        };
        self.depth = self.depth.max(reached);
        if self.depth > MAX_JSON_PATCH_DEPTH {
            return Err(BudgetExceeded::Depth);
        }
        Ok(())
    }
}

/// The length of `v` as compact JSON, without building it.
fn json_size(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => usize::MAX,
    }
}

/// evanphx v4: `{"op":"test","value":null}` on an absent key of an existing object passes.
fn test_null_on_missing_key(doc: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(t) = op else {
        return false;
    };
    if !t.value.is_null() {
        return false;
    }
    let path = op.path().as_str();
    let Some((parent, last)) = path.rsplit_once('/') else {
        return false;
    };
    let key = last.replace("~1", "/").replace("~0", "~");
    match doc.pointer(parent) {
        Some(Value::Object(m)) => !m.contains_key(&key),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::machinery::patch::tests::{check, cm, lease, Want};
    use crate::machinery::patch::{apply_patch, DefaultMergeKeys, PatchType, UNPROCESSABLE_MESSAGE};
    use serde_json::json;

    #[test]
    fn json_patch_table() {
        let mut added = cm();
        added["metadata"]["labels"]["c"] = json!("3");
        added["data"]["k"] = json!("w");
        let mut removed = cm();
        removed["data"].as_object_mut().unwrap().remove("list");
        let cases: Vec<(&str, &str, Want)> = vec![
            (
                "add and replace",
                r#"[{"op":"add","path":"/metadata/labels/c","value":"3"},{"op":"replace","path":"/data/k","value":"w"}]"#,
                Want::Ok(added.clone()),
            ),
            ("remove", r#"[{"op":"remove","path":"/data/list"}]"#, Want::Ok(removed)),
            ("passing test", r#"[{"op":"test","path":"/metadata/resourceVersion","value":"5"}]"#, Want::Ok(cm())),
            (
                "test null on a missing key passes",
                r#"[{"op":"test","path":"/metadata/labels/zz","value":null}]"#,
                Want::Ok(cm()),
            ),
            (
                "test null on a present key fails",
                r#"[{"op":"test","path":"/metadata/labels/a","value":null}]"#,
                Want::Invalid,
            ),
            (
                "failing test after an add: nothing applied",
                r#"[{"op":"add","path":"/metadata/labels/c","value":"3"},{"op":"test","path":"/metadata/resourceVersion","value":"4"}]"#,
                Want::Invalid,
            ),
            ("remove of a missing key", r#"[{"op":"remove","path":"/data/nope"}]"#, Want::Invalid),
            ("replace of a missing key", r#"[{"op":"replace","path":"/data/nope","value":"x"}]"#, Want::Invalid),
            ("add under a missing parent", r#"[{"op":"add","path":"/spec/x","value":1}]"#, Want::Invalid),
            ("unknown op", r#"[{"op":"frobnicate","path":"/data"}]"#, Want::Invalid),
            ("op without path", r#"[{"op":"add","value":1}]"#, Want::Invalid),
            ("bad pointer", r#"[{"op":"add","path":"data","value":1}]"#, Want::Invalid),
            ("null op", r#"[null]"#, Want::Invalid),
            ("null body", "null", Want::Ok(cm())),
            ("empty list", "[]", Want::Ok(cm())),
            ("not JSON", "{nope", Want::Bad),
            ("an object", r#"{"op":"add"}"#, Want::Bad),
            ("a string op", r#"["add"]"#, Want::Bad),
            ("trailing garbage", "[] x", Want::Bad),
        ];
        for (name, body, want) in &cases {
            let original = cm();
            let got = apply_patch(&original, body.as_bytes(), PatchType::Json, &DefaultMergeKeys);
            check(name, got, want);
            assert_eq!(original, cm(), "case {name}: original untouched");
        }
        let many = format!("[{}]", vec![r#"{"op":"test","path":"/kind","value":"ConfigMap"}"#; 10_001].join(","));
        assert!(
            matches!(json_patch(&cm(), many.as_bytes()), Err(PatchError::TooLarge(_))),
            "too many ops: a 413 as upstream"
        );
    }

    /// `{"a": {"a": ... "leaf"}}`, `n` objects deep.
    fn chain(n: usize) -> Value {
        let mut v = json!("leaf");
        for _ in 0..n {
            v = json!({ "a": v });
        }
        v
    }

    fn copies(n: usize) -> String {
        let ops: Vec<Value> =
            (0..n).map(|i| json!({"op": "copy", "from": "/metadata", "path": format!("/spec/c{i}")})).collect();
        serde_json::to_string(&ops).unwrap()
    }

    /// The "21 self-copies" attack: each copy doubles the document.
    fn self_copies(n: usize) -> String {
        let ops: Vec<Value> =
            (0..n).map(|i| json!({"op": "copy", "from": "", "path": format!("/spec/x{i}")})).collect();
        serde_json::to_string(&ops).unwrap()
    }

    #[test]
    fn json_patch_limits() {
        let too_many: Vec<Value> =
            vec![json!({"op": "test", "path": "/kind", "value": "Lease"}); MAX_JSON_PATCH_OPERATIONS + 1];
        // Each value is as deep as a body allows; together they nest past it.
        let deep_add = json!([
            {"op": "add", "path": "/spec/deep", "value": chain(120)},
            {"op": "add", "path": format!("/spec/deep{}/x", "/a".repeat(119)), "value": chain(20)},
        ])
        .to_string();
        let cases: Vec<(&str, Value, String, &str)> = vec![
            ("a few copies", lease(), copies(3), "ok"),
            ("21 self-copies (2 KB patch)", lease(), self_copies(21), "invalid"),
            (
                "copies past 3 MiB in total",
                json!({"spec": {}, "metadata": {"x": "y".repeat(100_000)}}),
                copies(40),
                "invalid",
            ),
            ("10,000 operations", lease(), serde_json::to_string(&too_many[1..]).unwrap(), "ok"),
            ("10,001 operations", lease(), serde_json::to_string(&too_many).unwrap(), "too large"),
            ("a value nesting the object past 127 levels", lease(), deep_add, "invalid"),
        ];
        for (name, original, body, want) in cases {
            let got = apply_patch(&original, body.as_bytes(), PatchType::Json, &DefaultMergeKeys);
            match (want, &got) {
                ("ok", Ok(_)) => {}
                ("invalid", Err(PatchError::Invalid(m))) => assert_eq!(m, UNPROCESSABLE_MESSAGE, "{name}"),
                ("too large", Err(PatchError::TooLarge(m))) => {
                    assert!(m.contains("maximum operations"), "{name}: {m}")
                }
                _ => panic!("{name}: want {want}, got {:?}", got.map(|v| v.to_string().len())),
            }
        }
    }

    #[test]
    fn patch_budget_bounds_copies_and_depth() {
        let op = |v: Value| -> json_patch::PatchOperation { serde_json::from_value(v).unwrap() };
        let doc = json!({"a": {"b": {}}, "big": "x".repeat(1_000_000), "deep": chain(100)});
        let path_of = |n: usize| "/a".repeat(n);
        // (name, operations in order, index of the first refused one)
        let cases: Vec<(&str, Vec<json_patch::PatchOperation>, Option<usize>)> = vec![
            ("no copies", vec![op(json!({"op": "remove", "path": "/big"}))], None),
            (
                "three 1 MB copies fit in 3 MiB",
                (0..3).map(|i| op(json!({"op": "copy", "from": "/big", "path": format!("/c{i}")}))).collect(),
                None,
            ),
            (
                "the fourth does not",
                (0..4).map(|i| op(json!({"op": "copy", "from": "/big", "path": format!("/c{i}")}))).collect(),
                Some(3),
            ),
            (
                "an unresolvable from counts the whole document",
                (0..4).map(|i| op(json!({"op": "copy", "from": "/nope/-", "path": format!("/c{i}")}))).collect(),
                Some(3),
            ),
            (
                "adding a deep value at a deep path",
                vec![op(json!({"op": "add", "path": format!("/deep{}/x", path_of(100)), "value": chain(100)}))],
                None,
            ),
            (
                "moves that deepen the document add up",
                (0..6)
                    .map(|_| op(json!({"op": "move", "from": "/deep", "path": format!("/deep{}", path_of(99))})))
                    .collect(),
                Some(4),
            ),
            (
                "moves sideways do not",
                (0..1000).map(|_| op(json!({"op": "move", "from": "/deep", "path": "/deep2"}))).collect(),
                None,
            ),
            (
                "copying a deep value to a deep path",
                vec![op(json!({"op": "copy", "from": "/deep", "path": path_of(450)}))],
                Some(0),
            ),
        ];
        for (name, ops, want) in cases {
            let mut b = PatchBudget::new(&doc);
            let got = ops.iter().position(|o| b.charge(&doc, o).is_err());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn budget_errors_say_which_limit() {
        assert_eq!(
            BudgetExceeded::CopyBytes(3_145_729).to_string(),
            "Unable to complete the copy, the accumulated size increase of copy is 3145729, exceeding the limit 3145728"
        );
        assert_eq!(BudgetExceeded::Depth.to_string(), "the patched document could nest more than 512 levels deep");
    }
}
