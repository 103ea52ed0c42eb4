//! What the fuzz targets share: how a patch input is split, and the object patched when the
//! input brings none.

use serde_json::Value;

/// The object a patch applies to when the input does not carry one: a Pod-like object with
/// the lists the strategic merge patch table below knows.
pub const DEFAULT_ORIGINAL: &str = r#"{
  "apiVersion": "v1",
  "kind": "Pod",
  "metadata": {
    "name": "web",
    "namespace": "default",
    "labels": {"app": "web"},
    "finalizers": ["example.com/a"],
    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u1"}]
  },
  "spec": {
    "containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]}],
    "tolerations": [{"key": "k", "operator": "Exists"}]
  },
  "status": {"conditions": [{"type": "Ready", "status": "True"}]}
}"#;

/// A patch input: `<original JSON> NUL <patch body>`, or just `<patch body>` (applied to
/// [`DEFAULT_ORIGINAL`]). `None` when the original part is not JSON.
pub fn split_patch_input(data: &[u8]) -> Option<(Value, &[u8])> {
    match data.iter().position(|&b| b == 0) {
        Some(i) => {
            let original = serde_json::from_slice(data.get(..i)?).ok()?;
            Some((original, data.get(i + 1..)?))
        }
        None => Some((serde_json::from_str(DEFAULT_ORIGINAL).ok()?, data)),
    }
}

/// Serializes a patch result and reads it back, as storing and serving it would.
pub fn round_trip(v: &Value) {
    if let Ok(bytes) = serde_json::to_vec(v) {
        let _ = serde_json::from_slice::<Value>(&bytes);
    }
}
