//! JSON merge patch (RFC 7386) bodies: `<original JSON> NUL <patch>` or just `<patch>`
//! (applied to a Pod-like object).
#![no_main]

use kustos_apiserver::machinery::patch::{apply_patch, DefaultMergeKeys, PatchType};
use kustos_fuzz::{round_trip, split_patch_input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((original, body)) = split_patch_input(data) else { return };
    if let Ok(patched) = apply_patch(&original, body, PatchType::Merge, &DefaultMergeKeys) {
        round_trip(&patched);
    }
});
