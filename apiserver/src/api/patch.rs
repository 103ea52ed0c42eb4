//! PATCH bodies applied to wire-form JSON objects the way kube-apiserver applies them:
//! JSON patch (RFC 6902, evanphx/json-patch v4 semantics on top of the `json-patch` crate),
//! JSON merge patch (RFC 7386, evanphx's null pruning) and strategic merge patch
//! (`k8s.io/apimachinery/pkg/util/strategicpatch` v0.33, server side: parallel lists merged,
//! unmatched nulls ignored). List merge strategies come from a [`MergeKeys`] table.
//!
//! Errors: a malformed body is `BadRequest`; a JSON-patch operation that fails (a failed
//! `test` included, after which nothing is applied) is `Invalid` with upstream's generic 422
//! message. Strategic-merge errors upstream leaves as plain errors (500s) are `BadRequest`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

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

/// The body of an apply patch (YAML or JSON) as a JSON object.
pub fn decode_apply_body(body: &[u8]) -> Result<Value, PatchError> {
    let v: Value =
        serde_yaml::from_slice(body).map_err(|e| PatchError::BadRequest(format!("error decoding YAML: {e}")))?;
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

// ---------------------------------------------------------------------------------------
// JSON patch (RFC 6902)
// ---------------------------------------------------------------------------------------

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
    pub fn charge(&mut self, doc: &Value, op: &json_patch::PatchOperation) -> Result<(), String> {
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
                    return Err(format!(
                        "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}",
                        self.copied
                    ));
                }
                tokens(&o.path) + crate::meta::nesting_depth(from)
            }
            // What moves sits `from`-deep in a document at most `depth` deep.
            Op::Move(o) => (self.depth + tokens(&o.path)).saturating_sub(tokens(&o.from)),
            Op::Remove(_) | Op::Test(_) => 0,
        };
        self.depth = self.depth.max(reached);
        if self.depth > MAX_JSON_PATCH_DEPTH {
            return Err(format!("the patched document could nest more than {MAX_JSON_PATCH_DEPTH} levels deep"));
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

// ---------------------------------------------------------------------------------------
// JSON merge patch (RFC 7386)
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------

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

/// The Go dynamic type of a decoded JSON value (upstream compares these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    String,
    Array,
    Object,
}

fn kind_of(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) if n.is_i64() => Kind::Int,
        Value::Number(_) => Kind::Float,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    }
}

fn go_type_name(v: &Value) -> &'static str {
    match kind_of(v) {
        Kind::Null => "<nil>",
        Kind::Bool => "bool",
        Kind::Int => "int64",
        Kind::Float => "float64",
        Kind::String => "string",
        Kind::Array => "[]interface {}",
        Kind::Object => "map[string]interface {}",
    }
}

/// Go's `%v` for a float64.
fn go_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return format!("{f}");
    }
    let exp = f.abs().log10().floor();
    if (-4.0..21.0).contains(&exp) {
        format!("{f}")
    } else {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{mantissa}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// Go's `%v` for a decoded JSON value (`map[k:v]`, `[a b]`, `<nil>`).
fn go_sprint(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_sprint).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => go_sprint_map(m),
    }
}

fn go_sprint_map(m: &Map<String, Value>) -> String {
    let mut entries: Vec<(&String, &Value)> = m.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let parts: Vec<String> = entries.iter().map(|(k, v)| format!("{k}:{}", go_sprint(v))).collect();
    format!("map[{}]", parts.join(" "))
}

/// Go's `%s` for a decoded JSON value.
fn go_sprint_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Bool(_) | Value::Number(_) => format!("%!s({}={})", go_type_name(v), go_sprint(v)),
        other => go_sprint(other),
    }
}

fn err_bad_arg_type(expected: &str, actual: &Value) -> SmpError {
    SmpError::Bad(format!("expected a {expected}, but received a {}", go_type_name(actual)))
}

fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> SmpError {
    SmpError::Bad(format!("map: {} does not contain declared merge key: {key}", go_sprint_map(m)))
}

fn err_bad_patch_type(directive: &Value, m: &Map<String, Value>) -> SmpError {
    SmpError::Bad(format!("unknown patch type: {} in map: {}", go_sprint_s(directive), go_sprint_map(m)))
}

const MAP_TYPE: &str = "map[string]interface {}";
const SLICE_TYPE: &str = "[]interface {}";

/// A value's identity for set and order comparisons (Go compares interface values; numbers
/// of different Go types differ, and so do their JSON texts here).
fn canon(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE_MARKER
        || k == RETAIN_KEYS_DIRECTIVE
        || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// Upstream `removeDirectives` for a value that lands unmerged: maps carrying `$patch` are
/// dropped. Other directive keys are dropped too (upstream's typed decoding drops them).
fn remove_directives(v: Value) -> Option<Value> {
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
fn strip_directive_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directive_keys_map(m)),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_directive_keys).collect()),
        other => other,
    }
}

fn strip_directive_keys_map(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter().filter(|(k, _)| !is_directive_key(k)).map(|(k, v)| (k, strip_directive_keys(v))).collect()
}

/// Upstream `discardNullValuesFromPatch`: null map entries go, recursively (list items stay).
fn discard_nulls(v: &mut Value) {
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
fn new_value(mut v: Value) -> Option<Value> {
    discard_nulls(&mut v);
    remove_directives(v)
}

/// `extractKey`: `$prefix/<key>` → `<key>`.
fn extract_key(s: &str, prefix: &str) -> SmpResult<String> {
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

fn take_object(v: &mut Value) -> Map<String, Value> {
    match std::mem::take(v) {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn take_array(v: &mut Value) -> Vec<Value> {
    match std::mem::take(v) {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// `sliceElementType`: the one Go type of all items (not a list, not null).
fn slice_element_type(lists: &[&[Value]]) -> SmpResult<Kind> {
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
struct OrderIndex {
    first: HashMap<Option<String>, usize>,
    merge_key: String,
    kind: Kind,
}

impl OrderIndex {
    fn new(order: &[Value], merge_key: Option<&str>, kind: Kind) -> Self {
        let mut idx = OrderIndex { first: HashMap::new(), merge_key: merge_key.unwrap_or("").to_string(), kind };
        for (i, v) in order.iter().enumerate() {
            let k = idx.key(v);
            idx.first.entry(k).or_insert(i);
        }
        idx
    }

    fn key(&self, v: &Value) -> Option<String> {
        if self.kind == Kind::Object {
            match v.as_object().and_then(|m| m.get(&self.merge_key)) {
                None | Some(Value::Null) => None,
                Some(k) => Some(canon(k)),
            }
        } else {
            Some(canon(v))
        }
    }

    fn position(&self, v: &Value) -> Option<usize> {
        self.first.get(&self.key(v)).copied()
    }
}

fn validate_merge_key_in_lists(merge_key: &str, lists: &[&[Value]]) -> SmpResult<()> {
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
fn extract_to_delete_items(list: Vec<Value>) -> SmpResult<(Vec<Value>, Vec<Value>)> {
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
fn normalize_slice_order(
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
fn merge_sorted_slice(
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
fn normalize_element_order(
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
fn partition_primitives(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let set: HashSet<String> = by.iter().map(canon).collect();
    merged.into_iter().partition(|v| set.contains(&canon(v)))
}

/// Items of `merged` whose merge-key value is in `by`, and the others.
fn partition_maps(merged: Vec<Value>, by: &[Value], merge_key: &str) -> SmpResult<(Vec<Value>, Vec<Value>)> {
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
fn delete_from_slice(current: Vec<Value>, to_delete: &[Value]) -> Vec<Value> {
    let set: HashSet<String> = to_delete.iter().map(canon).collect();
    current.into_iter().filter(|v| !set.contains(&canon(v))).collect()
}

/// Union keeping the first occurrence of each value.
fn dedup_scalars(list: Vec<Value>) -> Vec<Value> {
    let mut seen = HashSet::new();
    list.into_iter().filter(|v| seen.insert(canon(v))).collect()
}

fn contains_directive_marker(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: Option<&str>) -> SmpResult<bool> {
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
fn validate_patch_with_set_order_list(
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
fn apply_retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> SmpResult<()> {
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
fn delete_matching_entries(original: &mut Vec<Value>, merge_key: &str, value: &Value) {
    original.retain(|o| o.as_object().and_then(|m| m.get(merge_key)) != Some(value));
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
    use super::*;
    use serde_json::json;

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

    fn cm() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "default", "labels": {"a": "1", "b": "2"}, "resourceVersion": "5"},
               "data": {"k": "v", "list": "x"}})
    }

    #[derive(Debug)]
    enum Want {
        Ok(Value),
        Bad,
        Invalid,
    }

    fn check(name: &str, got: Result<Value, PatchError>, want: &Want) {
        match (got, want) {
            (Ok(v), Want::Ok(w)) => assert_eq!(&v, w, "case {name}"),
            (Err(PatchError::BadRequest(_)), Want::Bad) => {}
            (Err(PatchError::Invalid(m)), Want::Invalid) => assert_eq!(m, UNPROCESSABLE_MESSAGE, "case {name}"),
            (got, want) => panic!("case {name}: got {got:?}, want {want:?}"),
        }
    }

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

    fn smp(original: &Value, patch: Value) -> Result<Value, PatchError> {
        static SA: &[(&[&str], ListStrategy)] = &[
            (&["secrets"], ListStrategy::MergeByKey("name")),
            (&["status", "conditions"], ListStrategy::MergeByKey("type")),
        ];
        let body = serde_json::to_vec(&patch).unwrap();
        apply_patch(original, &body, PatchType::StrategicMerge, &TableMergeKeys(SA))
    }

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
    fn new_subtrees_lose_directives() {
        let got = smp(
            &json!({}),
            json!({"spec": {"x": {"$patch": "replace"}, "l": [{"$patch": "delete", "n": 1}, {"n": 2}],
                            "$setElementOrder/l": [{"n": 2}], "$retainKeys": ["l"], "keep": 1}}),
        )
        .unwrap();
        assert_eq!(got, json!({"spec": {"l": [{"n": 2}], "keep": 1}}));
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

    fn lease() -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "n1", "namespace": "kube-node-lease", "labels": {"a": "b".repeat(200)}},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}
        })
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
