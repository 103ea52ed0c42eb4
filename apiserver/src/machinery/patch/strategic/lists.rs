//! The pieces strategic merge is built from: directive keys and their removal, merge-key
//! lookups, list ordering (`$setElementOrder`), partitions, deletions and `$retainKeys`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::go::*;
use super::*;

/// A value's identity for set and order comparisons (Go compares interface values; numbers
/// of different Go types differ, and so do their JSON texts here).
pub(super) fn canon(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

pub(super) fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE_MARKER
        || k == RETAIN_KEYS_DIRECTIVE
        || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// Upstream `removeDirectives` for a value that lands unmerged: maps carrying `$patch` are
/// dropped. Other directive keys are dropped too (upstream's typed decoding drops them).
pub(super) fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter(|(k, _)| !is_directive_key(k))
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(remove_directives).collect())),
        other => Some(other),
    }
}

/// Drops directive keys from a value upstream keeps raw (replaced lists, appended list
/// items, `$patch: replace` maps), as its typed decoding would.
pub(super) fn strip_directive_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directive_keys_map(m)),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_directive_keys).collect()),
        other => other,
    }
}

pub(super) fn strip_directive_keys_map(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter().filter(|(k, _)| !is_directive_key(k)).map(|(k, v)| (k, strip_directive_keys(v))).collect()
}

/// Upstream `discardNullValuesFromPatch`: null map entries go, recursively (list items stay).
pub(super) fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// A patch value that is taken as it is (no original to merge with).
pub(super) fn new_value(mut v: Value) -> Option<Value> {
    discard_nulls(&mut v);
    remove_directives(v)
}

/// `extractKey`: `$prefix/<key>` → `<key>`.
pub(super) fn extract_key(s: &str, prefix: &str) -> SmpResult<String> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(SmpError::Bad(
            if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX {
                ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST
            } else {
                ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST
            }
            .to_string(),
        )),
    }
}

pub(super) fn take_object(v: &mut Value) -> Map<String, Value> {
    match std::mem::take(v) {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

pub(super) fn take_array(v: &mut Value) -> Vec<Value> {
    match std::mem::take(v) {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// `sliceElementType`: the one Go type of all items (not a list, not null).
pub(super) fn slice_element_type(lists: &[&[Value]]) -> SmpResult<Kind> {
    let mut prev: Option<Kind> = None;
    for list in lists {
        for v in list.iter() {
            let k = kind_of(v);
            match prev {
                None if k == Kind::Array => return Err(SmpError::Unprocessable(ERR_NO_LIST_OF_LISTS.to_string())),
                None if k != Kind::Null => prev = Some(k),
                Some(p) if p == k => {}
                _ => {
                    let all: Vec<String> = lists.iter().map(|l| go_sprint(&Value::Array(l.to_vec()))).collect();
                    return Err(SmpError::Bad(format!("list element types are not identical: [{}]", all.join(" "))));
                }
            }
        }
    }
    prev.ok_or_else(|| SmpError::Bad("no elements in any of the given slices".to_string()))
}

/// Positions of items in an order list: by merge-key value for maps, by value otherwise.
/// A map without the key (or with a null one) has the "nil" position, as in Go.
pub(super) struct OrderIndex {
    first: HashMap<Option<String>, usize>,
    merge_key: String,
    kind: Kind,
}

impl OrderIndex {
    pub(super) fn new(order: &[Value], merge_key: Option<&str>, kind: Kind) -> Self {
        let mut idx = OrderIndex { first: HashMap::new(), merge_key: merge_key.unwrap_or("").to_string(), kind };
        for (i, v) in order.iter().enumerate() {
            let k = idx.key(v);
            idx.first.entry(k).or_insert(i);
        }
        idx
    }

    pub(super) fn key(&self, v: &Value) -> Option<String> {
        if self.kind == Kind::Object {
            match v.as_object().and_then(|m| m.get(&self.merge_key)) {
                None | Some(Value::Null) => None,
                Some(k) => Some(canon(k)),
            }
        } else {
            Some(canon(v))
        }
    }

    pub(super) fn position(&self, v: &Value) -> Option<usize> {
        self.first.get(&self.key(v)).copied()
    }
}

pub(super) fn validate_merge_key_in_lists(merge_key: &str, lists: &[&[Value]]) -> SmpResult<()> {
    for list in lists {
        for item in list.iter() {
            let Value::Object(m) = item else {
                return Err(err_bad_arg_type(MAP_TYPE, item));
            };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
    }
    Ok(())
}

/// Items with `$patch: delete` go last (they are kept, as upstream).
pub(super) fn extract_to_delete_items(list: Vec<Value>) -> SmpResult<(Vec<Value>, Vec<Value>)> {
    let mut keep = Vec::new();
    let mut delete = Vec::new();
    for v in list {
        let Value::Object(m) = &v else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE_DIRECTIVE) {
            delete.push(v);
        } else {
            keep.push(v);
        }
    }
    Ok((keep, delete))
}

/// `normalizeSliceOrder`: sort `to_sort` by the positions in `order` (stable; items not in
/// `order` last).
pub(super) fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: Option<&str>,
    kind: Kind,
) -> SmpResult<Vec<Value>> {
    let mut to_sort = to_sort;
    let mut to_delete = Vec::new();
    if kind == Kind::Object {
        validate_merge_key_in_lists(merge_key.unwrap_or(""), &[&to_sort, order])?;
        (to_sort, to_delete) = extract_to_delete_items(to_sort)?;
    }
    let idx = OrderIndex::new(order, merge_key, kind);
    to_sort.sort_by_key(|v| idx.position(v).unwrap_or(usize::MAX));
    to_sort.extend(to_delete);
    Ok(to_sort)
}

/// `mergeSortedSlice`: interleave server-only items (`left`) into patch items (`right`),
/// taking a left item first only when both are in `server_order` and it comes earlier.
pub(super) fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: Option<&str>,
    kind: Kind,
) -> Vec<Value> {
    let idx = OrderIndex::new(server_order, merge_key, kind);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut l = left.into_iter().peekable();
    let mut r = right.into_iter().peekable();
    loop {
        let take_left = match (l.peek(), r.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => matches!((idx.position(a), idx.position(b)), (Some(x), Some(y)) if x < y),
        };
        let next = if take_left { l.next() } else { r.next() };
        out.extend(next);
    }
    out
}

/// `normalizeElementOrder`: patch items in `patch_order`, server-only items in
/// `server_order`, then interleaved.
pub(super) fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
    kind: Kind,
) -> SmpResult<Vec<Value>> {
    let patch_items = normalize_slice_order(patch_items, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted_slice(server_only, patch_items, server_order, merge_key, kind))
}

/// Items of `merged` that are in `by` (by value), and the others.
pub(super) fn partition_primitives(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let set: HashSet<String> = by.iter().map(canon).collect();
    merged.into_iter().partition(|v| set.contains(&canon(v)))
}

/// Items of `merged` whose merge-key value is in `by`, and the others.
pub(super) fn partition_maps(merged: Vec<Value>, by: &[Value], merge_key: &str) -> SmpResult<(Vec<Value>, Vec<Value>)> {
    // findMapInSliceBasedOnKeyValue fails on a non-map item met before a match.
    let first_non_map = by.iter().position(|v| !v.is_object());
    let mut first: HashMap<String, usize> = HashMap::new();
    for (i, v) in by.iter().enumerate() {
        if let Some(k) = v.as_object().and_then(|m| m.get(merge_key)) {
            first.entry(canon(k)).or_insert(i);
        }
    }
    let mut patch = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        let Value::Object(m) = &v else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        let Some(k) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        let found = first.get(&canon(k)).copied();
        match (found, first_non_map) {
            (Some(i), Some(bad)) if bad < i => return Err(SmpError::Bad(format!("value for key {bad} is not a map"))),
            (None, Some(bad)) => return Err(SmpError::Bad(format!("value for key {bad} is not a map"))),
            (Some(_), _) => patch.push(v),
            (None, None) => server_only.push(v),
        }
    }
    Ok((patch, server_only))
}

/// `deleteFromSlice`: drop every item equal to one in `to_delete`.
pub(super) fn delete_from_slice(current: Vec<Value>, to_delete: &[Value]) -> Vec<Value> {
    let set: HashSet<String> = to_delete.iter().map(canon).collect();
    current.into_iter().filter(|v| !set.contains(&canon(v))).collect()
}

/// Union keeping the first occurrence of each value.
pub(super) fn dedup_scalars(list: Vec<Value>) -> Vec<Value> {
    let mut seen = HashSet::new();
    list.into_iter().filter(|v| seen.insert(canon(v))).collect()
}

pub(super) fn contains_directive_marker(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

pub(super) fn merge_key_value_equal(left: &Value, right: &Value, merge_key: Option<&str>) -> SmpResult<bool> {
    let Some(key) = merge_key else {
        return Ok(left == right);
    };
    let Value::Object(l) = left else {
        return Err(err_bad_arg_type(MAP_TYPE, left));
    };
    let Value::Object(r) = right else {
        return Err(err_bad_arg_type(MAP_TYPE, right));
    };
    let Some(lv) = l.get(key) else {
        return Err(err_no_merge_key(l, key));
    };
    let Some(rv) = r.get(key) else {
        return Err(err_no_merge_key(r, key));
    };
    Ok(lv == rv)
}

/// `validatePatchWithSetOrderList`: the patch list's items appear in `$setElementOrder` in
/// the same relative order (deletions and directive items aside).
pub(super) fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    set_order: &[Value],
    merge_key: Option<&str>,
) -> SmpResult<()> {
    if set_order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<Value> =
        if merge_key.is_some() { extract_to_delete_items(patch_list.to_vec())?.0 } else { patch_list.to_vec() };
    let (mut pi, mut si) = (0, 0);
    while let (Some(p), Some(s)) = (non_delete.get(pi), set_order.get(si)) {
        if contains_directive_marker(p) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(p, s, merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= set_order.len() {
        return Err(SmpError::Bad(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            go_sprint(&Value::Array(patch_list.to_vec())),
            go_sprint(&Value::Array(set_order.to_vec()))
        )));
    }
    Ok(())
}

/// `applyRetainKeysDirective`: keys of `original` not listed go; every non-null patch key
/// must be listed.
pub(super) fn apply_retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> SmpResult<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(list) = retain else {
        return Err(SmpError::Bad(ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS.to_string()));
    };
    let keep: HashSet<&str> = list.iter().filter_map(Value::as_str).collect();
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) || k.starts_with(SET_ELEMENT_ORDER_PREFIX) {
            continue;
        }
        if !keep.contains(k.as_str()) {
            return Err(SmpError::Bad(ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS.to_string()));
        }
    }
    original.retain(|k, _| keep.contains(k.as_str()));
    Ok(())
}

/// `deleteMatchingEntries`: drop every item whose merge key equals `value`.
pub(super) fn delete_matching_entries(original: &mut Vec<Value>, merge_key: &str, value: &Value) {
    original.retain(|o| o.as_object().and_then(|m| m.get(merge_key)) != Some(value));
}
