//! PATCH bodies applied to wire-form JSON objects the way kube-apiserver applies them:
//! JSON patch (RFC 6902, evanphx/json-patch v4 semantics on top of the `json-patch` crate),
//! JSON merge patch (RFC 7386, evanphx's null pruning) and strategic merge patch
//! (`k8s.io/apimachinery/pkg/util/strategicpatch` v0.33, server side: parallel lists merged,
//! unmatched nulls ignored). List merge strategies come from a [`MergeKeys`] table.
//!
//! Errors: a malformed body is `BadRequest`; a JSON-patch operation that fails (a failed
//! `test` included, after which nothing is applied) is `Invalid` with upstream's generic 422
//! message. Strategic-merge errors upstream leaves as plain errors (500s) are `BadRequest`.
//!
//! The three kinds live in [`json`], [`merge`] and [`strategic`]; this file holds what they
//! share: the content types, the error, the limits, the list strategies, and [`apply_patch`].

mod json;
mod merge;
mod strategic;

pub use json::{json_patch, BudgetExceeded, PatchBudget};
pub use merge::merge_patch;
pub use strategic::strategic_merge_patch;

use serde_json::Value;

/// The PATCH content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply; not applied by [`apply_patch`])
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header. Like upstream, everything from the first
    /// `;` on (e.g. `; charset=utf-8`) is dropped and the rest must match exactly.
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media = match content_type.find(';') {
            Some(i) if i > 0 => content_type.get(..i).unwrap_or(content_type),
            _ => content_type,
        };
        match media {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400: the body is malformed (not JSON, wrong shape, bad directives).
    #[error("{0}")]
    BadRequest(String),
    /// 422 (reason Invalid): the patch is well-formed but cannot be applied.
    #[error("{0}")]
    Invalid(String),
    /// 413 (reason RequestEntityTooLarge): more JSON-patch operations than allowed.
    #[error("{0}")]
    TooLarge(String),
}

/// Upstream's limit on JSON-patch operations (`maxJSONPatchOperations`; a 413).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Most bytes the `copy` operations of one JSON patch may add, counted as the JSON size of
/// each copied value (evanphx/json-patch `AccumulatedCopySizeLimit`, which kube-apiserver
/// sets from `JSONPatchMaxCopyBytes`, 3 MiB, the same as the request body limit).
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// How deep a document may get while a JSON patch is applied (an upper bound kept per
/// operation, see [`json_patch`]): paths and moves can nest a document far deeper than any
/// body may be, and values that deep overflow the stack when cloned, compared or dropped.
/// The result must in the end be no deeper than [`crate::meta::MAX_OBJECT_DEPTH`].
pub const MAX_JSON_PATCH_DEPTH: usize = 512;

/// The message upstream's 422 for a failed JSON-patch operation carries
/// (`NewGenericServerResponse(422, ...)`); the operation's own error is not shown.
pub const UNPROCESSABLE_MESSAGE: &str = "the server rejected our request due to an error in our request";

fn unprocessable(detail: impl std::fmt::Display) -> PatchError {
    tracing::debug!(error = %detail, "patch could not be applied");
    PatchError::Invalid(UNPROCESSABLE_MESSAGE.to_string())
}

/// What the patch code asks of a list strategy (the type is defined with the kinds'
/// merge-key tables in `registry/`).
/// How a strategic merge patch treats a list field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// `patchStrategy:"merge" patchMergeKey:"<key>"`: items are maps merged by this key.
    MergeByKey(&'static str),
    /// `patchStrategy:"merge"` on a list of primitives: set-like union.
    MergePrimitives,
    /// No patch strategy: the patch's list replaces the original (the default).
    Replace,
}

impl ListStrategy {
    fn merge_key(self) -> Option<&'static str> {
        match self {
            ListStrategy::MergeByKey(k) => Some(k),
            _ => None,
        }
    }

    fn is_merge(self) -> bool {
        !matches!(self, ListStrategy::Replace)
    }
}

/// The list merge strategies of a kind (its Go struct tags).
pub trait MergeKeys {
    /// The strategy of the list at `path`: field names from the object root, list items
    /// adding no segment (e.g. `["metadata", "ownerReferences"]`). `None` means `Replace`.
    fn merge_key(&self, path: &[&str]) -> Option<ListStrategy>;
}

/// The `ObjectMeta` lists every kind has: `ownerReferences` merged by `uid`, `finalizers`
/// merged as a set, `managedFields` replaced.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultMergeKeys;

impl MergeKeys for DefaultMergeKeys {
    fn merge_key(&self, path: &[&str]) -> Option<ListStrategy> {
        match path {
            ["metadata", "ownerReferences"] => Some(ListStrategy::MergeByKey("uid")),
            ["metadata", "finalizers"] => Some(ListStrategy::MergePrimitives),
            ["metadata", "managedFields"] => Some(ListStrategy::Replace),
            _ => None,
        }
    }
}

/// A kind's own list strategies by path, falling back to [`DefaultMergeKeys`].
#[derive(Debug, Clone, Copy)]
pub struct TableMergeKeys(pub &'static [(&'static [&'static str], ListStrategy)]);

impl MergeKeys for TableMergeKeys {
    fn merge_key(&self, path: &[&str]) -> Option<ListStrategy> {
        self.0.iter().find(|(p, _)| *p == path).map(|(_, s)| *s).or_else(|| DefaultMergeKeys.merge_key(path))
    }
}

/// Applies a PATCH body of type `pt` to `original`, returning the patched object.
/// `PatchType::Apply` is not a patch in this sense and is refused (see [`decode_apply_body`]).
pub fn apply_patch(
    original: &Value,
    patch_body: &[u8],
    pt: PatchType,
    merge_keys: &dyn MergeKeys,
) -> Result<Value, PatchError> {
    let patched = match pt {
        PatchType::Json => json_patch(original, patch_body),
        PatchType::Merge => merge_patch(original, patch_body),
        PatchType::StrategicMerge => {
            let patch: Value = serde_json::from_slice(patch_body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
            strategic_merge_patch(original, patch, merge_keys)
        }
        PatchType::Apply => Err(PatchError::BadRequest(
            "apply patches (application/apply-patch+yaml) are handled by server-side apply".to_string(),
        )),
    }?;
    // A patched object must still be one a request body could carry.
    let depth = crate::meta::nesting_depth(&patched);
    if depth > crate::meta::MAX_OBJECT_DEPTH {
        return Err(unprocessable(format!(
            "the patched object nests {depth} levels deep, more than the {} allowed",
            crate::meta::MAX_OBJECT_DEPTH
        )));
    }
    Ok(patched)
}

/// The body of an apply patch (YAML or JSON) as a JSON object, read by [`crate::wire::yaml`]
/// (its cost bounded by the body's size).
pub fn decode_apply_body(body: &[u8]) -> Result<Value, PatchError> {
    let v = crate::wire::yaml::from_slice(body)
        .map_err(|e| PatchError::BadRequest(format!("error decoding YAML: {e}")))?
        .value;
    if !v.is_object() {
        return Err(PatchError::BadRequest(format!(
            "error decoding YAML: the apply patch must be an object, not {}",
            json_kind(&v)
        )));
    }
    Ok(v)
}

/// `array`, `object`, ... as Go's `json: cannot unmarshal <kind>` names them.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    #[test]
    fn content_types() {
        let cases = [
            ("application/json-patch+json", Some(PatchType::Json)),
            ("application/merge-patch+json", Some(PatchType::Merge)),
            ("application/strategic-merge-patch+json", Some(PatchType::StrategicMerge)),
            ("application/apply-patch+yaml", Some(PatchType::Apply)),
            ("application/merge-patch+json; charset=utf-8", Some(PatchType::Merge)),
            ("application/strategic-merge-patch+json;charset=UTF-8", Some(PatchType::StrategicMerge)),
            ("application/json", None),
            ("APPLICATION/MERGE-PATCH+JSON", None),
            (";application/merge-patch+json", None),
            ("", None),
        ];
        for (ct, want) in cases {
            assert_eq!(PatchType::from_content_type(ct), want, "content type {ct:?}");
        }
        for pt in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge, PatchType::Apply] {
            assert_eq!(PatchType::from_content_type(pt.content_type()), Some(pt));
        }
    }

    pub(super) fn cm() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "default", "labels": {"a": "1", "b": "2"}, "resourceVersion": "5"},
               "data": {"k": "v", "list": "x"}})
    }

    #[derive(Debug)]
    pub(super) enum Want {
        Ok(Value),
        Bad,
        Invalid,
    }

    pub(super) fn check(name: &str, got: Result<Value, PatchError>, want: &Want) {
        match (got, want) {
            (Ok(v), Want::Ok(w)) => assert_eq!(&v, w, "case {name}"),
            (Err(PatchError::BadRequest(_)), Want::Bad) => {}
            (Err(PatchError::Invalid(m)), Want::Invalid) => assert_eq!(m, UNPROCESSABLE_MESSAGE, "case {name}"),
            (got, want) => panic!("case {name}: got {got:?}, want {want:?}"),
        }
    }

    pub(super) fn smp(original: &Value, patch: Value) -> Result<Value, PatchError> {
        static SA: &[(&[&str], ListStrategy)] = &[
            (&["secrets"], ListStrategy::MergeByKey("name")),
            (&["status", "conditions"], ListStrategy::MergeByKey("type")),
        ];
        let body = serde_json::to_vec(&patch).unwrap();
        apply_patch(original, &body, PatchType::StrategicMerge, &TableMergeKeys(SA))
    }

    #[test]
    fn no_panics_on_odd_input() {
        let originals = [json!({}), json!({"a": [1, 2], "b": {"c": [{"k": 1}]}, "metadata": {"finalizers": [null]}})];
        let patches = [
            json!({"a": [[1]]}),
            json!({"a": [null]}),
            json!({"a": [{"x": 1}]}),
            json!({"b": {"c": [1]}}),
            json!({"$setElementOrder/a": [{"x": 1}], "a": [3]}),
            json!({"$setElementOrder/a": [[1]]}),
            json!({"$setElementOrder/a": []}),
            json!({"$setElementOrder/a": [], "a": []}),
            json!({"$deleteFromPrimitiveList/a": null}),
            json!({"$deleteFromPrimitiveList/a": [[1], {"x": 1}]}),
            json!({"$deleteFromPrimitiveList/b": {"c": 1}}),
            json!({"$retainKeys": [1, {"a": 1}, null]}),
            json!({"metadata": {"finalizers": ["x"], "$setElementOrder/finalizers": [null, "x"]}}),
            json!({"metadata": {"ownerReferences": [{"uid": {"a": 1}}, {"uid": [1]}], "$setElementOrder/ownerReferences": [1, {"uid": [1]}]}}),
            json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": null}, {"$patch": "replace"}, {"uid": 1.5}]}}),
            json!({"$patch": "replace", "a": {"$patch": "delete"}}),
            json!({"x": {"$patch": "delete"}, "y": [{"$patch": "replace"}], "z": {"$retainKeys": [], "$setElementOrder/q": [1]}}),
        ];
        for o in &originals {
            for p in &patches {
                let _ = smp(o, p.clone());
                let body = serde_json::to_vec(p).unwrap();
                let _ = apply_patch(o, &body, PatchType::Merge, &DefaultMergeKeys);
                let _ = apply_patch(o, &body, PatchType::Json, &DefaultMergeKeys);
            }
        }
        // Deep nesting is refused by the JSON parser rather than overflowing the stack.
        let deep = format!("{}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
        assert!(apply_patch(&json!({}), deep.as_bytes(), PatchType::StrategicMerge, &DefaultMergeKeys).is_err());
        assert!(apply_patch(&json!({}), deep.as_bytes(), PatchType::Merge, &DefaultMergeKeys).is_err());
    }

    fn random_value(rng: &mut rand::rngs::StdRng, depth: u32) -> Value {
        use rand::Rng;
        const KEYS: &[&str] = &[
            "a",
            "b",
            "uid",
            "name",
            "$patch",
            "$retainKeys",
            "$setElementOrder/a",
            "$setElementOrder/ownerReferences",
            "$deleteFromPrimitiveList/a",
            "$deleteFromPrimitiveList/finalizers",
            "ownerReferences",
            "finalizers",
        ];
        const STRINGS: &[&str] = &["a", "b", "delete", "replace", "merge", "1", "uid"];
        match rng.random_range(0..if depth == 0 { 4 } else { 7 }) {
            0 => Value::Null,
            1 => json!(rng.random_range(0..3)),
            2 => json!(STRINGS[rng.random_range(0..STRINGS.len())]),
            3 => json!(rng.random_bool(0.5)),
            4 | 5 => {
                let mut m = Map::new();
                for _ in 0..rng.random_range(0..4) {
                    m.insert(KEYS[rng.random_range(0..KEYS.len())].to_string(), random_value(rng, depth - 1));
                }
                Value::Object(m)
            }
            _ => Value::Array((0..rng.random_range(0..4)).map(|_| random_value(rng, depth - 1)).collect()),
        }
    }

    #[test]
    fn random_patches_never_panic() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..20_000 {
            let mut original = json!({"metadata": {}});
            if let Value::Object(m) = random_value(&mut rng, 3) {
                original = json!({"metadata": Value::Object(m.clone()), "a": Value::Object(m)});
            }
            let patch = json!({"metadata": random_value(&mut rng, 3), "a": random_value(&mut rng, 3)});
            let _ = smp(&original, patch.clone());
            let body = serde_json::to_vec(&patch).unwrap();
            let _ = apply_patch(&original, &body, PatchType::Merge, &DefaultMergeKeys);
        }
    }

    #[test]
    fn apply_bodies() {
        assert_eq!(
            decode_apply_body(b"apiVersion: v1\nkind: ConfigMap\n").unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap"})
        );
        assert_eq!(decode_apply_body(br#"{"a": 1}"#).unwrap(), json!({"a": 1}));
        assert!(matches!(decode_apply_body(b"- a"), Err(PatchError::BadRequest(_))));
        assert!(matches!(decode_apply_body(b"a: [1"), Err(PatchError::BadRequest(_))));
        assert!(matches!(
            apply_patch(&json!({}), b"{}", PatchType::Apply, &DefaultMergeKeys),
            Err(PatchError::BadRequest(_))
        ));
    }

    pub(super) fn lease() -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "n1", "namespace": "kube-node-lease", "labels": {"a": "b".repeat(200)}},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}
        })
    }

    #[test]
    fn merge_patches_stay_bounded() {
        let deep_body = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        let cases: Vec<(&str, PatchType, String, &str)> = vec![
            ("merge patch 100 deep", PatchType::Merge, deep_body(100), "ok"),
            ("merge patch beyond the parser's depth", PatchType::Merge, deep_body(10_000), "bad"),
            ("strategic merge patch 100 deep", PatchType::StrategicMerge, deep_body(100), "ok"),
            ("strategic merge patch beyond the parser's depth", PatchType::StrategicMerge, deep_body(10_000), "bad"),
            ("JSON patch beyond the parser's depth", PatchType::Json, format!("[{}]", deep_body(10_000)), "bad"),
        ];
        for (name, pt, body, want) in cases {
            let got = apply_patch(&lease(), body.as_bytes(), pt, &DefaultMergeKeys);
            match (want, &got) {
                ("ok", Ok(v)) => assert!(crate::meta::nesting_depth(v) <= crate::meta::MAX_OBJECT_DEPTH, "{name}"),
                ("bad", Err(PatchError::BadRequest(_))) => {}
                _ => panic!("{name}: want {want}, got {:?}", got.map(|v| v.to_string().len())),
            }
        }
    }
}
