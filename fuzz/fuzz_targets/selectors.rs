//! Label and field selectors: the `labelSelector` / `fieldSelector` query parameters and a
//! `metav1.LabelSelector` in an object, each matched against a few label sets when it parses.
#![no_main]

use std::collections::BTreeMap;

use kustos_apiserver::machinery::selectors::{unescape_value, FieldSelector, LabelSelector};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let labels: [BTreeMap<String, String>; 3] = [
        BTreeMap::new(),
        BTreeMap::from([("app".into(), "web".into()), ("tier".into(), "frontend".into())]),
        BTreeMap::from([("example.com/key".into(), "".into()), ("env".into(), "prod".into())]),
    ];
    if let Ok(sel) = LabelSelector::parse(text) {
        for l in &labels {
            let _ = sel.matches(l);
        }
        let _ = sel.matches_object(&json!({"metadata": {"labels": {"app": "web"}}}));
    }
    if let Ok(sel) = FieldSelector::parse(text) {
        let _ = sel.fields();
        let _ = sel.requires_exact_match("metadata.name");
        let _ = sel.matches(|f| (f == "metadata.name").then(|| "web".to_string()));
    }
    let _ = unescape_value(text);
    // The same text as a metav1.LabelSelector (spec.selector and the like), when it is JSON.
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        if let Ok(sel) = LabelSelector::from_meta(&v) {
            for l in &labels {
                let _ = sel.matches(l);
            }
        }
    }
});
