//! Request body decoding as create and update do it: JSON, YAML and protobuf bodies, the
//! duplicate-field check, the typed decode with unknown-field pruning, then the kind's
//! validation. YAML is also read as an apply patch and as a stream of documents (as
//! kubeconfigs are), and a document without aliases must never be refused for aliasing.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use kustos_apiserver::machinery::patch;
use kustos_apiserver::wire::{protobuf, yaml};
use kustos_apiserver::registry::{Registry, ResourceDef};
use kustos_apiserver::api::rest::{decode_body, typed_check, FieldValidation};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const JSON: &str = "application/json";
const YAML: &str = "application/yaml";

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::builtin)
}

/// The built-in kind a decoded body names (`apiVersion`, `kind`), else ConfigMap: the
/// handler a client would send this body to.
fn def_for(v: &Value) -> Option<&'static ResourceDef> {
    let r = registry();
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    r.resources
        .iter()
        .find(|d| d.kind == kind && d.api_version() == api_version)
        .or_else(|| r.resources.iter().find(|d| d.group.is_empty() && d.kind == "ConfigMap"))
}

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    // Without an alias or an anchor there is nothing to expand or keep: such a document is
    // never refused for aliasing.
    let no_aliases = !data.contains(&b'*') && !data.contains(&b'&');
    for result in [yaml::from_slice(data).map(|d| d.value), yaml::documents(data).map(|_| Value::Null)] {
        assert!(!(no_aliases && result == Err(yaml::Error::ExcessiveAliasing)), "refused for aliasing without an alias");
    }
    let _ = patch::decode_apply_body(data);
    for content_type in [JSON, YAML, protobuf::MEDIA_TYPE] {
        let probe: Option<Value> = match content_type {
            JSON => serde_json::from_slice(data).ok(),
            YAML => yaml::from_slice(data).ok().map(|d| d.value),
            _ => protobuf::decode(data).ok(),
        };
        let Some(def) = def_for(probe.as_ref().unwrap_or(&Value::Null)) else { return };
        let Ok((v, dups)) = decode_body(def, &body, content_type, FieldValidation::Warn) else { continue };
        if let Ok((obj, _warnings)) = typed_check(def, v, FieldValidation::Warn, &dups) {
            if let Some(write) = def.strategy.write() {
                let _ = write.validate(&obj);
            }
        }
    }
});
