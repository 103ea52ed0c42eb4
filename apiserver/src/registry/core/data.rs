//! What `configmaps` and `secrets` share: the 1 MiB data limit and the `immutable` rules.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Upstream's `MaxSecretSize`, the data limit of secrets and config maps.
pub(super) const MAX_SECRET_SIZE: usize = 1024 * 1024;
pub(super) const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

pub(super) fn is_immutable(immutable: Option<bool>) -> bool {
    immutable == Some(true)
}

/// Maps compare like upstream's stored form, where an empty map and no map are the same.
pub(super) fn same_map<V: PartialEq>(a: &Option<BTreeMap<String, V>>, b: &Option<BTreeMap<String, V>>) -> bool {
    let empty = BTreeMap::new();
    a.as_ref().unwrap_or(&empty) == b.as_ref().unwrap_or(&empty)
}

/// Number of keys of the map at `key` (0 when absent).
pub(super) fn map_len(obj: &Value, key: &str) -> usize {
    obj.get(key).and_then(Value::as_object).map_or(0, Map::len)
}
