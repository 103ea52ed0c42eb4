//! Strategic merge patch bodies: `<original JSON> NUL <patch>` or just `<patch>` (applied to
//! a Pod-like object), with lists of every strategy: merged by key, merged as a set of
//! primitives, replaced.
#![no_main]

use kustos_apiserver::machinery::patch::{apply_patch, ListStrategy, PatchType, TableMergeKeys};
use kustos_fuzz::{round_trip, split_patch_input};
use libfuzzer_sys::fuzz_target;

static KEYS: TableMergeKeys = TableMergeKeys(&[
    (&["spec", "containers"], ListStrategy::MergeByKey("name")),
    (&["spec", "containers", "ports"], ListStrategy::MergeByKey("containerPort")),
    (&["spec", "tolerations"], ListStrategy::Replace),
    (&["spec", "finalizers"], ListStrategy::MergePrimitives),
    (&["status", "conditions"], ListStrategy::MergeByKey("type")),
    (&["secrets"], ListStrategy::MergeByKey("name")),
]);

fuzz_target!(|data: &[u8]| {
    let Some((original, body)) = split_patch_input(data) else { return };
    if let Ok(patched) = apply_patch(&original, body, PatchType::StrategicMerge, &KEYS) {
        round_trip(&patched);
    }
});
