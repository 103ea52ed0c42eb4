//! Strategic merge patch (`k8s.io/apimachinery/pkg/util/strategicpatch` v0.33, server side:
//! parallel lists merged, unmatched nulls ignored), with upstream's error texts.
//!
//! The merge itself is here; [`go`] renders values and types as Go's `%v` does (the error
//! texts quote them), and [`lists`] holds the directive and list helpers it is built from.

mod go;
mod lists;

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{json_kind, unprocessable, ListStrategy, MergeKeys, PatchError};
use go::*;
use lists::*;

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

const ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST: &str = "invalid patch format of setElementOrder list";
const ERR_NO_LIST_OF_LISTS: &str = "lists of lists are not supported";

/// Strategic-merge failures: `Bad` becomes 400, `Unprocessable` 422.
#[derive(Debug)]
enum SmpError {
    Bad(String),
    Unprocessable(String),
}

impl From<SmpError> for PatchError {
    fn from(e: SmpError) -> Self {
        match e {
            SmpError::Bad(m) => PatchError::BadRequest(m),
            SmpError::Unprocessable(m) => unprocessable(m),
        }
    }
}

type SmpResult<T> = Result<T, SmpError>;

/// Applies a strategic merge patch (already parsed) to `original`. A `null` patch is a
/// no-op; any other non-object patch is a `BadRequest`.
pub fn strategic_merge_patch(original: &Value, patch: Value, merge_keys: &dyn MergeKeys) -> Result<Value, PatchError> {
    let patch = match patch {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_kind(&other)
            )))
        }
    };
    let Value::Object(original) = original else {
        return Err(PatchError::BadRequest("invalid JSON document".to_string()));
    };
    let smp = Smp { keys: merge_keys };
    let merged = smp.merge_map(original.clone(), patch, &mut Vec::new())?;
    Ok(Value::Object(merged))
}

struct Smp<'a> {
    keys: &'a dyn MergeKeys,
}

impl Smp<'_> {
    fn strategy(&self, path: &[String]) -> ListStrategy {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        self.keys.merge_key(&p).unwrap_or(ListStrategy::Replace)
    }

    /// `mergeMap`.
    fn merge_map(
        &self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
        path: &mut Vec<String>,
    ) -> SmpResult<Map<String, Value>> {
        if let Some(directive) = patch.get(DIRECTIVE_MARKER) {
            return match directive.as_str() {
                Some(REPLACE_DIRECTIVE) => {
                    patch.remove(DIRECTIVE_MARKER);
                    Ok(strip_directive_keys_map(patch))
                }
                Some(DELETE_DIRECTIVE) => Ok(Map::new()),
                _ => Err(err_bad_patch_type(directive, &patch)),
            };
        }
        apply_retain_keys(&mut original, &mut patch)?;
        self.merge_patch_into_original(&mut original, &mut patch, path)?;

        for (key, patch_v) in patch {
            let (key, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
                (extract_key(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?, true)
            } else {
                (key, false)
            };
            if patch_v.is_null() {
                original.remove(&key);
                continue;
            }
            let Some(orig_v) = original.get_mut(&key) else {
                if !is_delete_list {
                    if let Some(v) = new_value(patch_v) {
                        original.insert(key, v);
                    }
                }
                continue;
            };
            if kind_of(orig_v) != kind_of(&patch_v) {
                if !is_delete_list {
                    match new_value(patch_v) {
                        Some(v) => *orig_v = v,
                        None => {
                            original.remove(&key);
                        }
                    }
                }
                continue;
            }
            match patch_v {
                Value::Object(p) => {
                    let o = take_object(orig_v);
                    path.push(key.clone());
                    let merged = self.merge_map(o, p, path);
                    path.pop();
                    *orig_v = Value::Object(merged?);
                }
                Value::Array(p) => {
                    let o = take_array(orig_v);
                    path.push(key.clone());
                    let strategy = self.strategy(path);
                    let merged = self.merge_slice_handler(o, p, strategy, is_delete_list, path);
                    path.pop();
                    *orig_v = Value::Array(merged?);
                }
                scalar => *orig_v = scalar,
            }
        }
        Ok(original)
    }

    /// `mergePatchIntoOriginal`: each `$setElementOrder/<list>` with its list.
    fn merge_patch_into_original(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        path: &mut Vec<String>,
    ) -> SmpResult<()> {
        let keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX)).cloned().collect();
        for key in keys {
            let Some(order_v) = patch.remove(&key) else {
                continue;
            };
            let Value::Array(set_order) = order_v else {
                return Err(err_bad_arg_type(SLICE_TYPE, &order_v));
            };
            let list_key = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?;
            let original_list = match original.get(&list_key) {
                None => None,
                Some(Value::Array(a)) => Some(a.clone()),
                Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
            };
            let patch_list = match patch.get(&list_key) {
                None => None,
                Some(Value::Array(a)) => Some(a.clone()),
                Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
            };
            path.push(list_key.clone());
            let ordered = self.set_element_order(&set_order, original_list, patch_list, path);
            path.pop();
            if let Some(both) = ordered? {
                original.insert(list_key.clone(), Value::Array(both));
                patch.remove(&list_key);
            }
        }
        Ok(())
    }

    /// The merged list for one `$setElementOrder`, or `None` when neither side has the list.
    fn set_element_order(
        &self,
        set_order: &[Value],
        original_list: Option<Vec<Value>>,
        patch_list: Option<Vec<Value>>,
        path: &[String],
    ) -> SmpResult<Option<Vec<Value>>> {
        let strategy = self.strategy(path);
        let merge_key = strategy.merge_key();
        validate_patch_with_set_order_list(patch_list.as_deref().unwrap_or_default(), set_order, merge_key)?;
        let original_values = original_list.clone().unwrap_or_default();
        let patch_values = patch_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => match remove_directives(Value::Array(p)) {
                Some(Value::Array(a)) => a,
                _ => return Ok(None),
            },
            (Some(o), Some(p)) => {
                let mut path = path.to_vec();
                self.merge_slice_handler(o, p, strategy, false, &mut path)?
            }
            (None, None) => return Ok(None),
        };
        let (patch_items, server_only) = match merge_key {
            None => partition_primitives(merged, set_order),
            Some(k) => partition_maps(merged, set_order, k)?,
        };
        let kind = slice_element_type(&[&original_values, &patch_values])?;
        let both = normalize_element_order(patch_items, server_only, set_order, &original_values, merge_key, kind)?;
        Ok(Some(both))
    }

    /// `mergeSliceHandler`: merge lists merge, delete lists delete, others are replaced.
    fn merge_slice_handler(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        strategy: ListStrategy,
        is_delete_list: bool,
        path: &mut Vec<String>,
    ) -> SmpResult<Vec<Value>> {
        if strategy.is_merge() || is_delete_list {
            self.merge_slice(original, patch, strategy.merge_key(), is_delete_list, path)
        } else {
            Ok(patch.into_iter().map(strip_directive_keys).collect())
        }
    }

    /// `mergeSlice`.
    fn merge_slice(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        merge_key: Option<&str>,
        is_delete_list: bool,
        path: &mut Vec<String>,
    ) -> SmpResult<Vec<Value>> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        let kind = slice_element_type(&[&original, &patch])?;
        let (merged, patch_order, server_order) = if kind != Kind::Object {
            if is_delete_list {
                return Ok(delete_from_slice(original, &patch));
            }
            let server_order = original.clone();
            let mut both = original;
            both.extend(patch.iter().cloned());
            (dedup_scalars(both), patch, server_order)
        } else {
            let Some(key) = merge_key else {
                return Err(SmpError::Bad(format!("cannot merge lists without merge key for {}", path.join("."))));
            };
            let (original, patch) = merge_slice_with_special_elements(original, patch, key)?;
            let server_order = original.clone();
            let patch_order = patch.clone();
            let merged = self.merge_slice_without_special_elements(original, patch, key, path)?;
            (merged, patch_order, server_order)
        };
        let (patch_items, server_only) = match merge_key {
            None => partition_primitives(merged, &patch_order),
            Some(k) => partition_maps(merged, &patch_order, k)?,
        };
        normalize_element_order(patch_items, server_only, &patch_order, &server_order, merge_key, kind)
    }

    /// `mergeSliceWithoutSpecialElements`: patch items merge into the original item with the
    /// same merge-key value, or are appended.
    fn merge_slice_without_special_elements(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        merge_key: &str,
        path: &mut Vec<String>,
    ) -> SmpResult<Vec<Value>> {
        let mut original = original;
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, item) in original.iter().enumerate() {
            if let Some(v) = item.as_object().and_then(|m| m.get(merge_key)) {
                index.entry(canon(v)).or_insert(i);
            }
        }
        for v in patch {
            let Value::Object(m) = v else {
                return Err(err_bad_arg_type(MAP_TYPE, &v));
            };
            let Some(mv) = m.get(merge_key) else {
                return Err(err_no_merge_key(&m, merge_key));
            };
            let key = canon(mv);
            match index.get(&key).and_then(|&i| original.get_mut(i)) {
                Some(slot) => {
                    let o = take_object(slot);
                    *slot = Value::Object(self.merge_map(o, m, path)?);
                }
                None => {
                    index.insert(key, original.len());
                    original.push(strip_directive_keys(Value::Object(m)));
                }
            }
        }
        Ok(original)
    }
}

/// `mergeSliceWithSpecialElements`: `$patch: delete` items remove their match from the
/// original, `$patch: replace` makes the rest of the patch the whole list.
fn merge_slice_with_special_elements(
    original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> SmpResult<(Vec<Value>, Vec<Value>)> {
    let mut original = original;
    let mut without = Vec::new();
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        let Some(directive) = m.get(DIRECTIVE_MARKER) else {
            without.push(v);
            continue;
        };
        match directive.as_str() {
            Some(DELETE_DIRECTIVE) => match m.get(merge_key) {
                Some(value) => delete_matching_entries(&mut original, merge_key, value),
                None => return Err(err_no_merge_key(m, merge_key)),
            },
            Some(REPLACE_DIRECTIVE) => replace = true,
            Some(MERGE_DIRECTIVE) => {
                return Err(SmpError::Bad("merging lists cannot yet be specified in the patch".to_string()))
            }
            _ => return Err(err_bad_patch_type(directive, m)),
        }
    }
    if replace {
        return Ok((without.into_iter().map(strip_directive_keys).collect(), Vec::new()));
    }
    Ok((original, without))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::machinery::patch::tests::{check, smp, Want};
    use crate::machinery::patch::{apply_patch, DefaultMergeKeys, PatchError, PatchType, UNPROCESSABLE_MESSAGE};
    use serde_json::{json, Value};

    fn owner(uid: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "name": name, "uid": uid})
    }

    #[test]
    fn strategic_merge_patch_table() {
        let base = json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"},
                                        "finalizers": ["f1", "f2"],
                                        "ownerReferences": [owner("1", "one"), owner("2", "two")]},
                          "secrets": [{"name": "s1"}, {"name": "s2"}],
                          "rules": [{"verbs": ["get"]}, {"verbs": ["list"]}],
                          "spec": {"a": 1, "b": {"c": 2}}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, Value, Want)> = vec![
            (
                "label add and remove via null",
                json!({"metadata": {"labels": {"a": null, "c": "3", "zz": null}}}),
                Want::Ok(with(&|v| v["metadata"]["labels"] = json!({"b": "2", "c": "3"}))),
            ),
            (
                "new map with nulls discarded",
                json!({"metadata": {"annotations": {"x": "y", "gone": null}}}),
                Want::Ok(with(&|v| v["metadata"]["annotations"] = json!({"x": "y"}))),
            ),
            (
                "scalars replaced, maps merged recursively",
                json!({"spec": {"a": 5, "b": {"d": 3}}}),
                Want::Ok(with(&|v| v["spec"] = json!({"a": 5, "b": {"c": 2, "d": 3}}))),
            ),
            (
                "type change replaces",
                json!({"spec": {"b": "text"}}),
                Want::Ok(with(&|v| v["spec"]["b"] = json!("text"))),
            ),
            (
                "kubectl apply: $setElementOrder and $deleteFromPrimitiveList on finalizers",
                json!({"metadata": {"$setElementOrder/finalizers": ["f2", "f3"],
                                    "$deleteFromPrimitiveList/finalizers": ["f1"],
                                    "finalizers": ["f3"]}}),
                Want::Ok(with(&|v| v["metadata"]["finalizers"] = json!(["f2", "f3"]))),
            ),
            (
                "$setElementOrder reorders primitives",
                json!({"metadata": {"$setElementOrder/finalizers": ["f3", "f2", "f1"], "finalizers": ["f3"]}}),
                Want::Ok(with(&|v| v["metadata"]["finalizers"] = json!(["f3", "f2", "f1"]))),
            ),
            (
                "finalizers merge as a set",
                json!({"metadata": {"finalizers": ["f2", "f0"]}}),
                Want::Ok(with(&|v| v["metadata"]["finalizers"] = json!(["f1", "f2", "f0"]))),
            ),
            (
                "$deleteFromPrimitiveList alone",
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1", "nope"]}}),
                Want::Ok(with(&|v| v["metadata"]["finalizers"] = json!(["f2"]))),
            ),
            (
                "$deleteFromPrimitiveList on a missing list does nothing",
                json!({"metadata": {"$deleteFromPrimitiveList/other": ["a"]}}),
                Want::Ok(base.clone()),
            ),
            (
                "ownerReferences merge by uid",
                json!({"metadata": {"ownerReferences": [
                    {"uid": "2", "name": "TWO", "controller": true}, owner("3", "three")]}}),
                Want::Ok(with(&|v| {
                    v["metadata"]["ownerReferences"] = json!([
                        owner("1", "one"),
                        {"apiVersion": "v1", "kind": "Secret", "name": "TWO", "uid": "2", "controller": true},
                        owner("3", "three")
                    ])
                })),
            ),
            (
                "$patch: delete list item",
                json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "1"}]}}),
                Want::Ok(with(&|v| v["metadata"]["ownerReferences"] = json!([owner("2", "two")]))),
            ),
            (
                "$setElementOrder with merge keys and a deletion",
                json!({"metadata": {
                    "$setElementOrder/ownerReferences": [{"uid": "3"}, {"uid": "1"}],
                    "ownerReferences": [owner("3", "three"), {"$patch": "delete", "uid": "2"}]}}),
                Want::Ok(with(&|v| v["metadata"]["ownerReferences"] = json!([owner("3", "three"), owner("1", "one")]))),
            ),
            (
                "$patch: replace list",
                json!({"metadata": {"ownerReferences": [owner("9", "nine"), {"$patch": "replace"}]}}),
                Want::Ok(with(&|v| v["metadata"]["ownerReferences"] = json!([owner("9", "nine")]))),
            ),
            (
                "$patch: replace map",
                json!({"spec": {"$patch": "replace", "z": 1}}),
                Want::Ok(with(&|v| v["spec"] = json!({"z": 1}))),
            ),
            (
                "$patch: delete map",
                json!({"spec": {"$patch": "delete", "a": 9}}),
                Want::Ok(with(&|v| v["spec"] = json!({}))),
            ),
            (
                "$retainKeys",
                json!({"spec": {"$retainKeys": ["b", "n"], "n": 1}}),
                Want::Ok(with(&|v| v["spec"] = json!({"b": {"c": 2}, "n": 1}))),
            ),
            (
                "$retainKeys ignores null and parallel-list keys",
                json!({"spec": {"$retainKeys": ["a"], "b": null, "$setElementOrder/l": []}}),
                Want::Ok(with(&|v| v["spec"] = json!({"a": 1}))),
            ),
            (
                "unknown lists are replaced",
                json!({"rules": [{"verbs": ["*"]}]}),
                Want::Ok(with(&|v| v["rules"] = json!([{"verbs": ["*"]}]))),
            ),
            (
                "table merge key: secrets by name",
                json!({"secrets": [{"name": "s3"}, {"name": "s1", "namespace": "ns"}]}),
                // Upstream's interleave puts patch items not on the server first.
                Want::Ok(with(&|v| {
                    v["secrets"] = json!([{"name": "s3"}, {"name": "s1", "namespace": "ns"}, {"name": "s2"}])
                })),
            ),
            (
                "managedFields are replaced",
                json!({"metadata": {"managedFields": [{"manager": "m"}]}}),
                Want::Ok(with(&|v| v["metadata"]["managedFields"] = json!([{"manager": "m"}]))),
            ),
            (
                "merge list created where absent: directives removed",
                json!({"status": {"conditions": [{"type": "A", "x": null}, {"$patch": "delete", "type": "B"}]}}),
                Want::Ok(with(&|v| v["status"] = json!({"conditions": [{"type": "A"}]}))),
            ),
            (
                "$setElementOrder for a list the object lacks",
                json!({"status": {"c": 1}, "metadata": {"$setElementOrder/other": ["b", "a"], "other": ["a"]}}),
                Want::Ok(with(&|v| {
                    v["status"] = json!({"c": 1});
                    v["metadata"]["other"] = json!(["a"]);
                })),
            ),
            (
                "null on a list removes it",
                json!({"metadata": {"finalizers": null}}),
                Want::Ok(with(&|v| {
                    v["metadata"].as_object_mut().unwrap().remove("finalizers");
                })),
            ),
            ("empty patch", json!({}), Want::Ok(base.clone())),
            ("null patch", json!(null), Want::Ok(base.clone())),
            ("list body", json!([]), Want::Bad),
            ("string body", json!("x"), Want::Bad),
            ("$patch: merge in a map", json!({"spec": {"$patch": "merge"}}), Want::Bad),
            ("unknown $patch in a map", json!({"spec": {"$patch": 1}}), Want::Bad),
            (
                "$patch: merge in a list",
                json!({"metadata": {"ownerReferences": [{"$patch": "merge", "uid": "1"}]}}),
                Want::Bad,
            ),
            (
                "$patch: delete without the merge key",
                json!({"metadata": {"ownerReferences": [{"$patch": "delete", "name": "one"}]}}),
                Want::Bad,
            ),
            ("item without the merge key", json!({"metadata": {"ownerReferences": [{"name": "x"}]}}), Want::Bad),
            ("a list item in a string list", json!({"metadata": {"finalizers": [["a"]]}}), Want::Bad),
            ("mixed item types", json!({"metadata": {"finalizers": [1]}}), Want::Bad),
            ("$retainKeys not a list", json!({"spec": {"$retainKeys": "a"}}), Want::Bad),
            ("$retainKeys missing a patched key", json!({"spec": {"$retainKeys": ["a"], "b": 1}}), Want::Bad),
            ("$setElementOrder without a list name", json!({"metadata": {"$setElementOrder": ["a"]}}), Want::Bad),
            ("$setElementOrder not a list", json!({"metadata": {"$setElementOrder/finalizers": "a"}}), Want::Bad),
            (
                "$setElementOrder disagreeing with the patch",
                json!({"metadata": {"$setElementOrder/finalizers": ["f1"], "finalizers": ["f9"]}}),
                Want::Bad,
            ),
            (
                "$deleteFromPrimitiveList without a list name",
                json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
                Want::Bad,
            ),
            (
                "merge list of maps without a merge key",
                json!({"$deleteFromPrimitiveList/rules": [{"verbs": ["get"]}]}),
                Want::Bad,
            ),
        ];
        for (name, patch, want) in &cases {
            check(name, smp(&base, patch.clone()), want);
        }
        for body in ["{nope", "", "[1,"] {
            check(body, apply_patch(&base, body.as_bytes(), PatchType::StrategicMerge, &DefaultMergeKeys), &Want::Bad);
        }
    }

    #[test]
    fn strategic_merge_patch_error_texts() {
        let base = json!({"metadata": {"ownerReferences": [owner("1", "one")], "finalizers": []}});
        let err = |p: Value| match smp(&base, p) {
            Err(PatchError::BadRequest(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(json!({"metadata": {"ownerReferences": [{"name": "x"}]}})),
            "map: map[name:x] does not contain declared merge key: uid"
        );
        assert_eq!(
            err(json!({"metadata": {"$patch": "merge", "a": 1}})),
            "unknown patch type: merge in map: map[$patch:merge a:1]"
        );
        assert_eq!(err(json!({"metadata": {"$retainKeys": 1}})), "invalid patch format of retainKeys");
        assert_eq!(err(json!({"metadata": {"$setElementOrder": []}})), "invalid patch format of setElementOrder list");
        assert_eq!(
            err(json!({"metadata": {"$deleteFromPrimitiveList": []}})),
            "invalid patch format of primitive list"
        );
        assert_eq!(
            err(json!({"metadata": {"$setElementOrder/ownerReferences": 1}})),
            "expected a []interface {}, but received a int64"
        );
        assert_eq!(
            err(json!({"metadata": {"finalizers": ["a", 1.5]}})),
            "list element types are not identical: [[] [a 1.5]]"
        );
        assert_eq!(
            smp(&base, json!({"metadata": {"finalizers": [["a"]]}})),
            Err(PatchError::Invalid(UNPROCESSABLE_MESSAGE.to_string()))
        );
        assert_eq!(err(json!([1])), "json: cannot unmarshal array into Go value of type map[string]interface {}");
    }

    #[test]
    fn kubectl_apply_style_patch() {
        // What `kubectl apply` sends after last-applied {labels: {app, tier}, finalizers: [a, b]}
        // and a new config {labels: {app: v2}, finalizers: [b, c]}.
        let live = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "default", "uid": "u",
                         "labels": {"app": "v1", "tier": "x", "server-side": "y"},
                         "finalizers": ["example.com/a", "example.com/b", "example.com/server"],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "secrets": [{"name": "t1"}, {"name": "t2"}]});
        let patch = json!({"metadata": {
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":1}"},
                "labels": {"app": "v2", "tier": null},
                "$setElementOrder/finalizers": ["example.com/b", "example.com/c"],
                "$deleteFromPrimitiveList/finalizers": ["example.com/a"],
                "finalizers": ["example.com/c"]},
            "$setElementOrder/secrets": [{"name": "t2"}, {"name": "t3"}],
            "secrets": [{"name": "t3"}, {"$patch": "delete", "name": "t1"}]});
        let got = smp(&live, patch).unwrap();
        assert_eq!(got["metadata"]["labels"], json!({"app": "v2", "server-side": "y"}));
        assert_eq!(got["metadata"]["finalizers"], json!(["example.com/b", "example.com/c", "example.com/server"]));
        assert_eq!(got["secrets"], json!([{"name": "t2"}, {"name": "t3"}]));
        assert_eq!(got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], "{\"new\":1}");
        assert_eq!(got["metadata"]["uid"], "u");
    }

    #[test]
    fn new_subtrees_lose_directives() {
        let got = smp(
            &json!({}),
            json!({"spec": {"x": {"$patch": "replace"}, "l": [{"$patch": "delete", "n": 1}, {"n": 2}],
                            "$setElementOrder/l": [{"n": 2}], "$retainKeys": ["l"], "keep": 1}}),
        )
        .unwrap();
        assert_eq!(got, json!({"spec": {"l": [{"n": 2}], "keep": 1}}));
    }
}
