//! core/v1 kinds: `namespaces`, `configmaps`, `secrets`, `serviceaccounts`, `events`.
//!
//! Each strategy mirrors upstream's `pkg/registry/core/<kind>/strategy.go`, the v1 defaulting and
//! conversion that happen on decode (`pkg/apis/core/v1`), `pkg/apis/core/validation` and the
//! printer in `pkg/printers/internalversion/printers.go` (with `Wide: true`, as the apiserver
//! renders Tables). Iteration over maps is in key order, where upstream's is random.
//!
//! The end of this file also holds small helpers shared with the sibling registry modules
//! (Go-style value rendering, column descriptions, JSON access that never panics).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Map, Value};

use super::{age, decode, decode_update, typed_roundtrip, Column, ResourceDef, Strategy};
use crate::error::FieldError;
use crate::validation;

/// All core/v1 resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "",
            version: "v1",
            resource: "namespaces",
            singular: "namespace",
            kind: "Namespace",
            namespaced: false,
            short_names: &["ns"],
            categories: &[],
            subresources: &["status", "finalize"],
            create_only: false,
            strategy: Arc::new(NamespaceStrategy),
            schema: |g| g.subschema_for::<corev1::Namespace>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "configmaps",
            singular: "configmap",
            kind: "ConfigMap",
            namespaced: true,
            short_names: &["cm"],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(ConfigMapStrategy),
            schema: |g| g.subschema_for::<corev1::ConfigMap>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "secrets",
            singular: "secret",
            kind: "Secret",
            namespaced: true,
            short_names: &[],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(SecretStrategy),
            schema: |g| g.subschema_for::<corev1::Secret>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "serviceaccounts",
            singular: "serviceaccount",
            kind: "ServiceAccount",
            namespaced: true,
            short_names: &["sa"],
            categories: &[],
            subresources: &["token"],
            create_only: false,
            strategy: Arc::new(ServiceAccountStrategy),
            schema: |g| g.subschema_for::<corev1::ServiceAccount>(),
        },
        ResourceDef {
            group: "",
            version: "v1",
            resource: "events",
            singular: "event",
            kind: "Event",
            namespaced: true,
            short_names: &["ev"],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(EventStrategy),
            schema: |g| g.subschema_for::<corev1::Event>(),
        },
    ]
}

/// Upstream's `MaxSecretSize`, the data limit of secrets and config maps.
const MAX_SECRET_SIZE: usize = 1024 * 1024;
const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

// ---------------------------------------------------------------------------------------
// Namespaces
// ---------------------------------------------------------------------------------------

/// The label every namespace carries with its own name (`v1.LabelMetadataName`).
pub const LABEL_METADATA_NAME: &str = "kubernetes.io/metadata.name";
const FINALIZER_KUBERNETES: &str = "kubernetes";
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// `namespaces`: status is server-owned (`status` subresource), `spec.finalizers` only change
/// through `finalize`, and the `kubernetes.io/metadata.name` label is forced on every write.
pub struct NamespaceStrategy;

/// `SetDefaults_Namespace` + `Canonicalize`: the name label, when the name is known.
/// Public because a name generated from `generateName` after `prepare_for_create` needs it too.
pub fn force_name_label(obj: &mut Value) {
    let name = str_at(obj, &["metadata", "name"]).unwrap_or("").to_string();
    if name.is_empty() {
        return;
    }
    if let Some(labels) = child_obj(obj, &["metadata", "labels"]) {
        labels.insert(LABEL_METADATA_NAME.into(), Value::String(name));
    }
}

/// Copies `old[path]` into `new[path]`, or removes it from `new` when `old` has none
/// (Go's `new.X = old.X`).
pub(crate) fn carry(new: &mut Value, old: &Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else { return };
    let from = get_at(old, path).filter(|v| !v.is_null()).cloned();
    match from {
        Some(v) => {
            if let Some(m) = child_obj(new, parents) {
                m.insert((*last).to_string(), v);
            }
        }
        None => {
            if let Some(Value::Object(m)) = get_at_mut(new, parents) {
                m.remove(*last);
            }
        }
    }
}

/// `validateFinalizerName`: a qualified name, and a standard one when it has no `/`.
fn validate_finalizer_name(name: &str, field: &str) -> Vec<FieldError> {
    let mut errs: Vec<FieldError> =
        validation::is_qualified_name(name).into_iter().map(|m| FieldError::invalid(field, &json!(name), m)).collect();
    if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
        errs.push(FieldError::invalid(
            field,
            &json!(name),
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
    errs
}

fn spec_finalizers(obj: &Value) -> Vec<String> {
    get_at(obj, &["spec", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|f| f.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

impl Strategy for NamespaceStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Namespace>(obj)
    }

    fn role(&self) -> super::Role {
        super::Role::Namespace
    }

    fn subresource_verbs(&self, sub: &str) -> &'static [&'static str] {
        // `finalize` only replaces the finalizers, with a PUT; `status` reads and writes.
        if sub == "finalize" {
            &["update"]
        } else {
            &["get", "patch", "update"]
        }
    }

    fn name_rule(&self) -> super::NameRule {
        validation::is_dns1123_label
    }

    fn merge_keys(&self) -> super::MergeKeys {
        &[(&["status", "conditions"], crate::api::patch::ListStrategy::MergeByKey("type"))]
    }

    fn mark_deleting(&self, obj: &mut Value) {
        if !obj.get("status").is_some_and(Value::is_object) {
            obj["status"] = json!({});
        }
        obj["status"]["phase"] = json!("Terminating");
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        force_name_label(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Active"}));
        }
        let mut finalizers = spec_finalizers(obj);
        if !finalizers.iter().any(|f| f == FINALIZER_KUBERNETES) {
            finalizers.push(FINALIZER_KUBERNETES.into());
            if let Some(spec) = child_obj(obj, &["spec"]) {
                spec.insert("finalizers".into(), json!(finalizers));
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        force_name_label(new);
        carry(new, old, &["spec", "finalizers"]);
        carry(new, old, &["status"]);
    }

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        force_name_label(new);
        match sub {
            "status" => {
                carry(new, old, &["spec"]);
                // SetDefaults_NamespaceStatus
                if str_at(new, &["status", "phase"]).unwrap_or("").is_empty() {
                    if let Some(status) = child_obj(new, &["status"]) {
                        status.insert("phase".into(), json!("Active"));
                    }
                }
            }
            "finalize" => carry(new, old, &["status"]),
            _ => {}
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        // ValidateNamespace: the (unindexed) path is upstream's.
        spec_finalizers(obj).iter().flat_map(|f| validate_finalizer_name(f, "spec.finalizers")).collect()
    }

    fn validate_subresource(&self, sub: &str, new: &Value, _old: &Value) -> Vec<FieldError> {
        match sub {
            // ValidateNamespaceStatusUpdate (the capital P is upstream's).
            "status" => {
                let phase = str_at(new, &["status", "phase"]).unwrap_or("");
                let deleting = get_at(new, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null());
                if !deleting && phase != "Active" {
                    vec![FieldError::invalid(
                        "status.Phase",
                        &json!(phase),
                        "may only be 'Active' if `deletionTimestamp` is empty",
                    )]
                } else if deleting && phase != "Terminating" {
                    vec![FieldError::invalid(
                        "status.Phase",
                        &json!(phase),
                        "may only be 'Terminating' if `deletionTimestamp` is not empty",
                    )]
                } else {
                    Vec::new()
                }
            }
            // ValidateNamespaceFinalizeUpdate
            "finalize" => spec_finalizers(new)
                .iter()
                .enumerate()
                .flat_map(|(i, f)| validate_finalizer_name(f, &format!("spec.finalizers[{i}]")))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "status.phase" => Some(str_at(obj, &["status", "phase"]).unwrap_or("").to_string()),
            _ => None,
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![col("Status", "The status of the namespace", 0), age_column()]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(str_at(obj, &["status", "phase"]).unwrap_or("")), creation_age(obj, now)]
    }
}

// ---------------------------------------------------------------------------------------
// ConfigMaps
// ---------------------------------------------------------------------------------------

/// `configmaps`: key rules, the 1 MiB limit and `immutable`.
pub struct ConfigMapStrategy;

fn is_immutable(immutable: Option<bool>) -> bool {
    immutable == Some(true)
}

/// Maps compare like upstream's stored form, where an empty map and no map are the same.
fn same_map<V: PartialEq>(a: &Option<BTreeMap<String, V>>, b: &Option<BTreeMap<String, V>>) -> bool {
    let empty = BTreeMap::new();
    a.as_ref().unwrap_or(&empty) == b.as_ref().unwrap_or(&empty)
}

impl Strategy for ConfigMapStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::ConfigMap>(obj)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let cm: corev1::ConfigMap = crate::typed!(decode(obj));
        let mut errs = Vec::new();
        let mut total = 0usize;
        let binary = cm.binary_data.unwrap_or_default();
        for (key, value) in cm.data.unwrap_or_default() {
            let field = format!("data[{key}]");
            for msg in validation::is_config_map_key(&key) {
                errs.push(FieldError::invalid(&field, &json!(key), msg));
            }
            if binary.contains_key(&key) {
                errs.push(FieldError::invalid(&field, &json!(key), "duplicate of key present in binaryData"));
            }
            total += value.len();
        }
        for (key, value) in &binary {
            for msg in validation::is_config_map_key(key) {
                errs.push(FieldError::invalid(format!("binaryData[{key}]"), &json!(key), msg));
            }
            total += value.0.len();
        }
        if total > MAX_SECRET_SIZE {
            // The empty path means "the whole object", as upstream.
            errs.push(too_long("", MAX_SECRET_SIZE));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (corev1::ConfigMap, corev1::ConfigMap) = crate::typed!(decode_update(new, old));
        let mut errs = Vec::new();
        if is_immutable(old.immutable) {
            if !is_immutable(new.immutable) {
                errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
            }
            if !same_map(&new.data, &old.data) {
                errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
            }
            if !same_map(&new.binary_data, &old.binary_data) {
                errs.push(FieldError::forbidden("binaryData", IMMUTABLE_WHEN_SET));
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Data",
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let n = map_len(obj, "data") + map_len(obj, "binaryData");
        vec![json!(n), creation_age(obj, now)]
    }
}

// ---------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------

/// `secrets`: `type` defaults to `Opaque` and is immutable, `stringData` is merged into `data`,
/// per-type required keys, the 1 MiB limit and `immutable`.
pub struct SecretStrategy;

const SECRET_TYPE_OPAQUE: &str = "Opaque";

/// v1 defaulting and conversion, on every decode: `type` → `Opaque`; `stringData` overwrites
/// `data` keys (base64 on the wire) and is never stored.
fn normalize_secret(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    if m.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        m.insert("type".into(), json!(SECRET_TYPE_OPAQUE));
    }
    let Some(string_data) = m.remove("stringData") else { return };
    let Some(string_data) = string_data.as_object().filter(|sd| !sd.is_empty()) else { return };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let plain = v.as_str().unwrap_or("");
            data.insert(k.clone(), json!(base64::engine::general_purpose::STANDARD.encode(plain)));
        }
    }
}

/// What Go's `json.Unmarshal(b, &map[string]interface{}{})` reports, if anything.
fn go_json_object_error(b: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(b) {
        Ok(Value::Object(_) | Value::Null) => None,
        Ok(v) => {
            let kind = match v {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Bool(_) => "bool",
                _ => "number",
            };
            Some(format!("json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"))
        }
        Err(e) if e.is_eof() => Some("unexpected end of JSON input".into()),
        Err(e) => {
            // Point at the offending byte like Go's scanner does.
            let offending = b
                .split(|c| *c == b'\n')
                .nth(e.line().saturating_sub(1))
                .and_then(|line| line.get(e.column().saturating_sub(1)))
                .copied()
                .unwrap_or(b'?');
            Some(format!("invalid character {:?} looking for beginning of value", offending as char))
        }
    }
}

fn validate_secret(secret: &corev1::Secret, annotations: Option<&BTreeMap<String, String>>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let data = secret.data.clone().unwrap_or_default();
    let mut total = 0usize;
    for (key, value) in &data {
        for msg in validation::is_config_map_key(key) {
            errs.push(FieldError::invalid(format!("data[{key}]"), &json!(key), msg));
        }
        total += value.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(too_long("data", MAX_SECRET_SIZE));
    }
    let required = |key: &str| FieldError::required(format!("data[{key}]"), "");
    let json_key = |errs: &mut Vec<FieldError>, key: &str| match data.get(key) {
        None => errs.push(required(key)),
        Some(bytes) => {
            if let Some(e) = go_json_object_error(&bytes.0) {
                errs.push(FieldError::invalid(format!("data[{key}]"), &json!("<secret contents redacted>"), e));
            }
        }
    };
    match secret.type_.as_deref().unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let key = "kubernetes.io/service-account.name";
            if annotations.and_then(|a| a.get(key)).is_none_or(String::is_empty) {
                errs.push(FieldError::required(format!("metadata.annotations[{key}]"), ""));
            }
        }
        "kubernetes.io/dockercfg" => json_key(&mut errs, ".dockercfg"),
        "kubernetes.io/dockerconfigjson" => json_key(&mut errs, ".dockerconfigjson"),
        // Username or password may be empty, but one of them must be present.
        "kubernetes.io/basic-auth" if !data.contains_key("username") && !data.contains_key("password") => {
            errs.push(required("username"));
            errs.push(required("password"));
        }
        "kubernetes.io/ssh-auth" if data.get("ssh-privatekey").is_none_or(|v| v.0.is_empty()) => {
            errs.push(required("ssh-privatekey"));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !data.contains_key(key) {
                    errs.push(required(key));
                }
            }
        }
        // Opaque, "", bootstrap.kubernetes.io/token and any other type: no rules upstream.
        _ => {}
    }
    errs
}

impl Strategy for SecretStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Secret>(obj)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        normalize_secret(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        normalize_secret(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let secret: corev1::Secret = crate::typed!(decode(obj));
        validate_secret(&secret, secret.metadata.annotations.as_ref())
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (corev1::Secret, corev1::Secret) = crate::typed!(decode_update(new, old));
        let mut errs = Vec::new();
        let new_type = new.type_.clone().unwrap_or_default();
        if new_type != old.type_.clone().unwrap_or_default() {
            errs.push(FieldError::immutable("type", &json!(new_type)));
        }
        if is_immutable(old.immutable) {
            if !is_immutable(new.immutable) {
                errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
            }
            if !same_map(&new.data, &old.data) {
                errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
            }
        }
        errs
    }

    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "type" => Some(str_at(obj, &["type"]).unwrap_or("").to_string()),
            _ => None,
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Type",
                "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
                0,
            ),
            col(
                "Data",
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(str_at(obj, &["type"]).unwrap_or("")), json!(map_len(obj, "data")), creation_age(obj, now)]
    }
}

// ---------------------------------------------------------------------------------------
// ServiceAccounts
// ---------------------------------------------------------------------------------------

/// `serviceaccounts`: secret references keep only their name (`cleanSecretReferences`).
/// Strategic merge patch: `secrets` merges by `name`.
pub struct ServiceAccountStrategy;

fn clean_secret_references(obj: &mut Value) {
    let Some(Value::Array(secrets)) = get_at_mut(obj, &["secrets"]) else { return };
    for s in secrets.iter_mut() {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        *s = if name.is_empty() { json!({}) } else { json!({ "name": name }) };
    }
}

impl Strategy for ServiceAccountStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::ServiceAccount>(obj)
    }

    fn merge_keys(&self) -> super::MergeKeys {
        &[(&["secrets"], crate::api::patch::ListStrategy::MergeByKey("name"))]
    }

    fn create_handler(&self, sub: &str) -> Option<super::CreateHandler> {
        (sub == "token").then_some(|c, body, content_type| {
            Box::pin(crate::authn::serviceaccount::token_request(c, body, content_type))
        })
    }

    fn subresource_kind(&self, sub: &str) -> Option<super::Gvk> {
        (sub == "token").then_some(("authentication.k8s.io", "v1", "TokenRequest"))
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        clean_secret_references(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        clean_secret_references(new);
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Secrets",
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let n = get_at(obj, &["secrets"]).and_then(Value::as_array).map_or(0, Vec::len);
        vec![json!(n), creation_age(obj, now)]
    }
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// core/v1 `events`: upstream's legacy validation only (the strict rules are for
/// events.k8s.io). Upstream's Table puts `Name` last with priority 1; see `columns`.
pub struct EventStrategy;

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// A `metav1.Time`/`MicroTime` that is unset (absent, null or Go's zero time).
pub(crate) fn is_zero_time(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty() || s.starts_with("0001-01-01T00:00:00"),
        Some(_) => false,
    }
}

impl Strategy for EventStrategy {
    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
    }

    fn name_column_last(&self) -> bool {
        true
    }

    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Event>(obj)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let s = |path: &[&str]| str_at(obj, path).unwrap_or("").to_string();
        let ns = s(&["metadata", "namespace"]);
        let involved_ns = s(&["involvedObject", "namespace"]);
        let mut errs = Vec::new();
        let mismatch =
            || FieldError::invalid("involvedObject.namespace", &json!(involved_ns), "does not match event.namespace");
        let too_many = |field: &str, limit: usize| {
            FieldError::invalid(field, &json!(""), format!("can have at most {limit} characters"))
        };
        if is_zero_time(obj.get("eventTime")) {
            if involved_ns.is_empty() {
                // event.namespace must also be empty, or "default" for old clients.
                if !ns.is_empty() && ns != "default" {
                    errs.push(mismatch());
                }
            } else if ns != involved_ns {
                errs.push(mismatch());
            }
        } else {
            if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
                errs.push(mismatch());
            }
            // core/v1 calls reportingController `reportingComponent`.
            let rc = s(&["reportingComponent"]);
            if rc.is_empty() {
                errs.push(FieldError::required("reportingComponent", ""));
            }
            for msg in validation::is_qualified_name(&rc) {
                errs.push(FieldError::invalid("reportingComponent", &json!(rc), msg));
            }
            let instance = s(&["reportingInstance"]);
            if instance.is_empty() {
                errs.push(FieldError::required("reportingInstance", ""));
            }
            if instance.len() > REPORTING_INSTANCE_LIMIT {
                errs.push(too_many("reportingInstance", REPORTING_INSTANCE_LIMIT));
            }
            let action = s(&["action"]);
            if action.is_empty() {
                errs.push(FieldError::required("action", ""));
            }
            if action.len() > ACTION_LIMIT {
                errs.push(too_many("action", ACTION_LIMIT));
            }
            let reason = s(&["reason"]);
            if reason.is_empty() {
                errs.push(FieldError::required("reason", ""));
            }
            if reason.len() > REASON_LIMIT {
                errs.push(too_many("reason", REASON_LIMIT));
            }
            if s(&["message"]).len() > NOTE_LIMIT {
                errs.push(too_many("message", NOTE_LIMIT));
            }
        }
        for msg in validation::is_dns1123_subdomain(&ns) {
            errs.push(FieldError::invalid("namespace", &json!(ns), msg));
        }
        errs
    }

    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        let s = |p: &[&str]| str_at(obj, p).unwrap_or("").to_string();
        let v = match path {
            "involvedObject.kind" => s(&["involvedObject", "kind"]),
            "involvedObject.namespace" => s(&["involvedObject", "namespace"]),
            "involvedObject.name" => s(&["involvedObject", "name"]),
            "involvedObject.uid" => s(&["involvedObject", "uid"]),
            "involvedObject.apiVersion" => s(&["involvedObject", "apiVersion"]),
            "involvedObject.resourceVersion" => s(&["involvedObject", "resourceVersion"]),
            "involvedObject.fieldPath" => s(&["involvedObject", "fieldPath"]),
            "reason" => s(&["reason"]),
            "reportingComponent" => s(&["reportingComponent"]),
            "source" => {
                let component = s(&["source", "component"]);
                if component.is_empty() {
                    s(&["reportingComponent"])
                } else {
                    component
                }
            }
            "type" => s(&["type"]),
            _ => return None,
        };
        Some(v)
    }

    /// Upstream's columns minus the trailing `Name` (priority 1), which the caller places first.
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Last Seen", "The time at which the most recent occurrence of this event was recorded.", 0),
            col("Type", "Type of this event (Normal, Warning), new types could be added in the future", 0),
            col(
                "Reason",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                0,
            ),
            col("Object", "The object that this event is about.", 0),
            col(
                "Subobject",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
                1,
            ),
            col("Source", "The component reporting this event. Should be a short machine understandable string.", 1),
            col("Message", "A human-readable description of the status of this operation.", 0),
            col("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
            col("Count", "The number of times this event has occurred.", 1),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let s = |p: &[&str]| str_at(obj, p).unwrap_or("").to_string();
        let time_age = |key: &str| {
            let v = obj.get(key);
            if is_zero_time(v) {
                json!("<unknown>")
            } else {
                age(v.and_then(Value::as_str), now)
            }
        };
        let first =
            if is_zero_time(obj.get("firstTimestamp")) { time_age("eventTime") } else { time_age("firstTimestamp") };
        let mut last = if is_zero_time(obj.get("lastTimestamp")) { first.clone() } else { time_age("lastTimestamp") };
        let mut count = obj.get("count").and_then(Value::as_i64).unwrap_or(0);
        match obj.get("series").filter(|v| v.is_object()) {
            Some(series) => {
                let observed = series.get("lastObservedTime");
                last = if is_zero_time(observed) {
                    json!("<unknown>")
                } else {
                    age(observed.and_then(Value::as_str), now)
                };
                count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
            }
            // Singleton events don't have a count set in the new API.
            None if count == 0 => count = 1,
            None => {}
        }
        let kind = s(&["involvedObject", "kind"]).to_lowercase();
        let name = s(&["involvedObject", "name"]);
        let target = if name.is_empty() { kind } else { format!("{kind}/{name}") };
        let component =
            Some(s(&["source", "component"])).filter(|c| !c.is_empty()).unwrap_or(s(&["reportingComponent"]));
        let host = Some(s(&["source", "host"])).filter(|h| !h.is_empty()).unwrap_or(s(&["reportingInstance"]));
        let source = if host.is_empty() { component } else { format!("{component}, {host}") };
        vec![
            last,
            json!(s(&["type"])),
            json!(s(&["reason"])),
            json!(target),
            json!(s(&["involvedObject", "fieldPath"])),
            json!(source),
            json!(s(&["message"]).trim()),
            first,
            json!(count),
        ]
    }
}

// ---------------------------------------------------------------------------------------
// Helpers shared with the sibling registry modules
// ---------------------------------------------------------------------------------------

/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`, the description of Age columns.
pub(crate) const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A `string` column without format.
pub(crate) fn col(name: &'static str, description: &'static str, priority: u32) -> Column {
    Column { name, type_: "string", format: "", description, priority }
}

/// The `Age` column of upstream's printers.
pub(crate) fn age_column() -> Column {
    col("Age", AGE_DESCRIPTION, 0)
}

/// `translateTimestampSince(obj.CreationTimestamp)`.
pub(crate) fn creation_age(obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
    age(str_at(obj, &["metadata", "creationTimestamp"]), now)
}

/// Value at a path of object keys, if every step is an object.
pub(crate) fn get_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.as_object()?.get(*k))
}

fn get_at_mut<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(obj, |v, k| v.as_object_mut()?.get_mut(*k))
}

/// String at a path (None when absent or not a string).
pub(crate) fn str_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    get_at(obj, path).and_then(Value::as_str)
}

/// The object at `path`, creating missing or null steps; None if a step holds a non-object.
pub(crate) fn child_obj<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = obj;
    for key in path {
        let m = cur.as_object_mut()?;
        let next = m.entry((*key).to_string()).or_insert_with(|| json!({}));
        if next.is_null() {
            *next = json!({});
        }
        cur = next;
    }
    cur.as_object_mut()
}

/// Number of keys of the map at `key` (0 when absent).
fn map_len(obj: &Value, key: &str) -> usize {
    obj.get(key).and_then(Value::as_object).map_or(0, Map::len)
}

/// `field.Invalid` whose value upstream renders with Go's `%#v` (structs, slices, []byte):
/// `shown` is that rendering.
pub(crate) fn invalid_shown(field: impl Into<String>, shown: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: {shown}: {detail}"),
    }
}

/// `field.TooLong` as kube-apiserver 1.32 words it.
pub(crate) fn too_long(field: impl Into<String>, max: usize) -> FieldError {
    FieldError {
        reason: "FieldValueTooLong",
        field: field.into(),
        message: format!("Too long: must have at most {max} bytes"),
    }
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
pub(crate) fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Mutation = fn(&mut Value);
    type Mutate = Box<dyn Fn(&mut Value)>;

    fn set(obj: &mut Value, path: &[&str], v: Value) {
        let (last, parents) = path.split_last().unwrap();
        child_obj(obj, parents).unwrap().insert((*last).to_string(), v);
    }

    fn now() -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc)
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    // -- namespaces ---------------------------------------------------------------------

    fn base_ns() -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team-a", "creationTimestamp": "2024-05-01T11:55:00Z"},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    }

    #[test]
    fn namespace_create_defaults() {
        let cases: &[(&str, Mutation, Value)] = &[
            (
                "no spec gets the kubernetes finalizer",
                |o| {
                    o.as_object_mut().unwrap().remove("spec");
                },
                json!(["kubernetes"]),
            ),
            (
                "other finalizers keep order and gain kubernetes",
                |o| set(o, &["spec", "finalizers"], json!(["example.com/x"])),
                json!(["example.com/x", "kubernetes"]),
            ),
            ("kubernetes present is kept once", |_| {}, json!(["kubernetes"])),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base_ns();
            mutate(&mut obj);
            set(&mut obj, &["status"], json!({"phase": "Terminating", "conditions": []}));
            set(&mut obj, &["metadata", "labels"], json!({LABEL_METADATA_NAME: "evil"}));
            NamespaceStrategy.prepare_for_create(&mut obj);
            assert_eq!(obj["spec"]["finalizers"], *want, "{name}");
            assert_eq!(obj["status"], json!({"phase": "Active"}), "{name}");
            assert_eq!(obj["metadata"]["labels"][LABEL_METADATA_NAME], "team-a", "{name}");
        }
    }

    #[test]
    fn namespace_update_keeps_status_finalizers_and_label() {
        let old = base_ns();
        let mut new = base_ns();
        set(&mut new, &["spec", "finalizers"], json!([]));
        set(&mut new, &["status", "phase"], json!("Terminating"));
        set(&mut new, &["metadata", "labels"], json!({"a": "b"}));
        NamespaceStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]), "update keeps finalizers");
        assert_eq!(new["status"]["phase"], "Active", "update keeps status");
        assert_eq!(
            new["metadata"]["labels"],
            json!({"a": "b", LABEL_METADATA_NAME: "team-a"}),
            "update forces the name label"
        );
    }

    #[test]
    fn namespace_subresources() {
        // status: spec from old, empty phase defaults to Active.
        let old = base_ns();
        let mut new = base_ns();
        set(&mut new, &["spec", "finalizers"], json!([]));
        set(&mut new, &["status"], json!({}));
        NamespaceStrategy.prepare_for_subresource("status", &mut new, &old);
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]), "status keeps spec");
        assert_eq!(new["status"]["phase"], "Active", "status phase defaults");
        // finalize: spec from the request, status from old.
        let mut new = base_ns();
        set(&mut new, &["spec", "finalizers"], json!([]));
        set(&mut new, &["status", "phase"], json!("Terminating"));
        NamespaceStrategy.prepare_for_subresource("finalize", &mut new, &old);
        assert_eq!(new["spec"]["finalizers"], json!([]), "finalize changes spec");
        assert_eq!(new["status"]["phase"], "Active", "finalize keeps status");
    }

    #[test]
    fn namespace_validation() {
        let cases: &[(&str, &str, Mutation, &[&str])] = &[
            ("valid", "", |_| {}, &[]),
            ("unqualified finalizer", "", |o| set(o, &["spec", "finalizers"], json!(["custom"])),
             &["spec.finalizers: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified"]),
            ("finalize indexes its paths", "finalize", |o| set(o, &["spec", "finalizers"], json!(["kubernetes", "custom"])),
             &["spec.finalizers[1]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified"]),
            ("status active without deletion", "status", |_| {}, &[]),
            ("status terminating without deletion", "status", |o| set(o, &["status", "phase"], json!("Terminating")),
             &["status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty"]),
            ("status active while deleting", "status", |o| set(o, &["metadata", "deletionTimestamp"], json!("2024-05-01T12:00:00Z")),
             &["status.Phase: Invalid value: \"Active\": may only be 'Terminating' if `deletionTimestamp` is not empty"]),
        ];
        for (name, sub, mutate, want) in cases {
            let mut obj = base_ns();
            mutate(&mut obj);
            let errs = if sub.is_empty() {
                NamespaceStrategy.validate(&obj)
            } else {
                NamespaceStrategy.validate_subresource(sub, &obj, &base_ns())
            };
            assert_eq!(rendered(&errs), *want, "{name}");
        }
    }

    #[test]
    fn namespace_fields_and_table() {
        let ns = base_ns();
        assert_eq!(NamespaceStrategy.field(&ns, "status.phase").as_deref(), Some("Active"), "status.phase selectable");
        assert_eq!(NamespaceStrategy.field(&json!({}), "status.phase").as_deref(), Some(""), "supported on probe");
        assert_eq!(NamespaceStrategy.field(&ns, "spec.finalizers"), None, "spec.finalizers not selectable");
        let names: Vec<&str> = NamespaceStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Status", "Age"], "namespace columns");
        assert_eq!(NamespaceStrategy.cells(&ns, now()), vec![json!("Active"), json!("5m")], "namespace cells");
    }

    // -- configmaps ---------------------------------------------------------------------

    fn base_cm() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "data": {"a.txt": "hello"}, "binaryData": {"b.bin": "AAEC"}})
    }

    #[test]
    fn configmap_validation() {
        let big = "x".repeat(MAX_SECRET_SIZE);
        let cases: Vec<(&str, Mutate, Vec<String>)> = vec![
            ("valid", Box::new(|_| {}), vec![]),
            ("bad data key", Box::new(|o| set(o, &["data"], json!({"a b": "x"}))), vec![
                "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".into(),
            ]),
            ("dot-dot binary key", Box::new(|o| set(o, &["binaryData"], json!({"..x": ""}))), vec![
                "binaryData[..x]: Invalid value: \"..x\": must not start with '..'".into(),
            ]),
            ("key in both", Box::new(|o| set(o, &["binaryData"], json!({"a.txt": ""}))), vec![
                "data[a.txt]: Invalid value: \"a.txt\": duplicate of key present in binaryData".into(),
            ]),
            ("too big", Box::new(move |o| set(o, &["data", "big"], json!(big))), vec![
                "Too long: must have at most 1048576 bytes".into(),
            ]),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base_cm();
            mutate(&mut obj);
            assert_eq!(rendered(&ConfigMapStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn configmap_immutable_updates() {
        let forbidden = |f: &str| format!("{f}: Forbidden: field is immutable when `immutable` is set");
        let cases: Vec<(&str, Mutation, Mutation, Vec<String>)> = vec![
            ("mutable: anything goes", |_| {}, |n| set(n, &["data"], json!({})), vec![]),
            (
                "immutable: unchanged ok",
                |o| set(o, &["immutable"], json!(true)),
                |n| set(n, &["immutable"], json!(true)),
                vec![],
            ),
            (
                "immutable: metadata only ok",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    set(n, &["metadata", "labels"], json!({"a": "b"}));
                },
                vec![],
            ),
            (
                "immutable: cannot unset",
                |o| set(o, &["immutable"], json!(true)),
                |n| set(n, &["immutable"], json!(false)),
                vec![forbidden("immutable")],
            ),
            (
                "immutable: data change",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    set(n, &["data", "a.txt"], json!("bye"));
                },
                vec![forbidden("data")],
            ),
            (
                "immutable: binaryData removed",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    n.as_object_mut().unwrap().remove("binaryData");
                },
                vec![forbidden("binaryData")],
            ),
        ];
        for (name, old_m, new_m, want) in cases {
            let mut old = base_cm();
            old_m(&mut old);
            let mut new = base_cm();
            new_m(&mut new);
            assert_eq!(rendered(&ConfigMapStrategy.validate_update(&new, &old)), want, "{name}");
        }
    }

    #[test]
    fn configmap_table() {
        let names: Vec<&str> = ConfigMapStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Data", "Age"], "configmap columns");
        assert_eq!(ConfigMapStrategy.cells(&base_cm(), now()), vec![json!(2), json!("60m")], "configmap cells");
    }

    // -- secrets ------------------------------------------------------------------------

    fn base_secret() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "s", "namespace": "default", "creationTimestamp": "2024-05-01T11:59:30Z"},
               "type": "Opaque", "data": {"a": "YQ=="}})
    }

    #[test]
    fn secret_defaults_and_string_data() {
        let mut obj = base_secret();
        obj.as_object_mut().unwrap().remove("type");
        set(&mut obj, &["stringData"], json!({"a": "override", "b": "bee"}));
        SecretStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["type"], "Opaque", "type defaults");
        assert_eq!(obj["data"], json!({"a": "b3ZlcnJpZGU=", "b": "YmVl"}), "stringData merged, wins");
        assert!(obj.get("stringData").is_none(), "stringData dropped");
        let mut upd = json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
        SecretStrategy.prepare_for_update(&mut upd, &base_secret());
        assert_eq!(upd["data"], json!({"k": "dg=="}), "update merges too");
    }

    #[test]
    fn secret_validation() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("opaque", json!({"type": "Opaque", "data": {"x": b64("1")}}), vec![]),
            ("bad key", json!({"type": "Opaque", "data": {"a/b": b64("1")}}), vec![
                "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ]),
            ("sa token without annotation", json!({"type": "kubernetes.io/service-account-token"}), vec![
                "metadata.annotations[kubernetes.io/service-account.name]: Required value",
            ]),
            ("sa token with annotation", json!({"type": "kubernetes.io/service-account-token",
                "metadata": {"annotations": {"kubernetes.io/service-account.name": "default"}}}), vec![]),
            ("dockerconfigjson missing", json!({"type": "kubernetes.io/dockerconfigjson"}), vec![
                "data[.dockerconfigjson]: Required value",
            ]),
            ("dockerconfigjson not json", json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("{")}}), vec![
                "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": unexpected end of JSON input",
            ]),
            ("dockercfg array", json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("[]")}}), vec![
                "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            ]),
            ("dockercfg garbage", json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("x")}}), vec![
                "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": invalid character 'x' looking for beginning of value",
            ]),
            ("dockerconfigjson ok", json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("{\"auths\":{}}")}}), vec![]),
            ("basic-auth empty", json!({"type": "kubernetes.io/basic-auth"}), vec![
                "data[username]: Required value", "data[password]: Required value",
            ]),
            ("basic-auth password only", json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}}), vec![]),
            ("ssh-auth empty key", json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}}), vec![
                "data[ssh-privatekey]: Required value",
            ]),
            ("tls missing key", json!({"type": "kubernetes.io/tls", "data": {"tls.crt": ""}}), vec![
                "data[tls.key]: Required value",
            ]),
            ("bootstrap token: no rules", json!({"type": "bootstrap.kubernetes.io/token"}), vec![]),
            ("too big", json!({"type": "Opaque", "data": {"big": b64(&"x".repeat(MAX_SECRET_SIZE + 1))}}), vec![
                "data: Too long: must have at most 1048576 bytes",
            ]),
        ];
        for (name, patch, want) in cases {
            let mut obj = base_secret();
            obj.as_object_mut().unwrap().remove("data");
            for (k, v) in patch.as_object().unwrap() {
                if k == "metadata" {
                    set(&mut obj, &["metadata", "annotations"], v["annotations"].clone());
                } else {
                    obj[k.as_str()] = v.clone();
                }
            }
            assert_eq!(rendered(&SecretStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn secret_updates() {
        let cases: Vec<(&str, Mutation, Mutation, Vec<&str>)> = vec![
            ("same type", |_| {}, |_| {}, vec![]),
            (
                "type change",
                |_| {},
                |n| set(n, &["type"], json!("kubernetes.io/tls")),
                vec!["type: Invalid value: \"kubernetes.io/tls\": field is immutable"],
            ),
            (
                "immutable data change",
                |o| set(o, &["immutable"], json!(true)),
                |n| {
                    set(n, &["immutable"], json!(true));
                    set(n, &["data"], json!({"a": "Yg=="}));
                },
                vec!["data: Forbidden: field is immutable when `immutable` is set"],
            ),
            (
                "immutable unset",
                |o| set(o, &["immutable"], json!(true)),
                |_| {},
                vec!["immutable: Forbidden: field is immutable when `immutable` is set"],
            ),
        ];
        for (name, old_m, new_m, want) in cases {
            let mut old = base_secret();
            old_m(&mut old);
            let mut new = base_secret();
            new_m(&mut new);
            assert_eq!(rendered(&SecretStrategy.validate_update(&new, &old)), want, "{name}");
        }
    }

    #[test]
    fn secret_fields_and_table() {
        let s = base_secret();
        assert_eq!(SecretStrategy.field(&s, "type").as_deref(), Some("Opaque"), "type selectable");
        assert_eq!(SecretStrategy.field(&s, "data"), None, "data not selectable");
        let names: Vec<&str> = SecretStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Type", "Data", "Age"], "secret columns");
        assert_eq!(SecretStrategy.cells(&s, now()), vec![json!("Opaque"), json!(1), json!("30s")], "secret cells");
    }

    // -- serviceaccounts ----------------------------------------------------------------

    #[test]
    fn serviceaccount_secret_refs_and_table() {
        let mut sa = json!({"metadata": {"name": "sa", "namespace": "default", "creationTimestamp": "2024-05-01T09:00:00Z"},
                            "secrets": [{"name": "tok", "namespace": "x", "uid": "u"}, {"kind": "Secret"}]});
        ServiceAccountStrategy.prepare_for_create(&mut sa);
        assert_eq!(sa["secrets"], json!([{"name": "tok"}, {}]), "create keeps names only");
        let mut upd = sa.clone();
        set(&mut upd, &["secrets"], json!([{"name": "b", "fieldPath": "x"}]));
        ServiceAccountStrategy.prepare_for_update(&mut upd, &sa);
        assert_eq!(upd["secrets"], json!([{"name": "b"}]), "update keeps names only");
        let names: Vec<&str> = ServiceAccountStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Secrets", "Age"], "serviceaccount columns");
        assert_eq!(ServiceAccountStrategy.cells(&sa, now()), vec![json!(2), json!("3h")], "serviceaccount cells");
    }

    // -- events -------------------------------------------------------------------------

    fn base_event() -> Value {
        json!({"apiVersion": "v1", "kind": "Event",
               "metadata": {"name": "web.17a", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "u1",
                                  "apiVersion": "v1", "resourceVersion": "7", "fieldPath": "spec.containers{app}"},
               "reason": "Started", "message": " Started container app \n", "type": "Normal",
               "source": {"component": "kubelet", "host": "node-1"},
               "firstTimestamp": "2024-05-01T11:50:00Z", "lastTimestamp": "2024-05-01T11:58:00Z", "count": 3})
    }

    #[test]
    fn event_validation() {
        let qn = "name part must be non-empty";
        let cases: Vec<(&str, Mutation, Vec<String>)> = vec![
            ("valid", |_| {}, vec![]),
            ("namespace mismatch", |o| set(o, &["involvedObject", "namespace"], json!("other")),
             vec!["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace".into()]),
            ("cluster object in default is fine", |o| set(o, &["involvedObject", "namespace"], json!("")), vec![]),
            ("cluster object outside default", |o| {
                set(o, &["involvedObject", "namespace"], json!(""));
                set(o, &["metadata", "namespace"], json!("team-a"));
            }, vec!["involvedObject.namespace: Invalid value: \"\": does not match event.namespace".into()]),
            ("new-style event needs reporting fields", |o| set(o, &["eventTime"], json!("2024-05-01T11:00:00.000000Z")), vec![
                "reportingComponent: Required value".into(),
                format!("reportingComponent: Invalid value: \"\": {qn}"),
                "reportingComponent: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
                "reportingInstance: Required value".into(),
                "action: Required value".into(),
            ]),
            ("new-style event complete", |o| {
                set(o, &["eventTime"], json!("2024-05-01T11:00:00.000000Z"));
                set(o, &["reportingComponent"], json!("kubelet"));
                set(o, &["reportingInstance"], json!("node-1"));
                set(o, &["action"], json!("Start"));
                set(o, &["reason"], json!("r".repeat(129)));
            }, vec!["reason: Invalid value: \"\": can have at most 128 characters".into()]),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base_event();
            mutate(&mut obj);
            assert_eq!(rendered(&EventStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn event_field_selectors() {
        let e = base_event();
        let cases: &[(&str, Option<&str>)] = &[
            ("involvedObject.kind", Some("Pod")),
            ("involvedObject.namespace", Some("default")),
            ("involvedObject.name", Some("web")),
            ("involvedObject.uid", Some("u1")),
            ("involvedObject.apiVersion", Some("v1")),
            ("involvedObject.resourceVersion", Some("7")),
            ("involvedObject.fieldPath", Some("spec.containers{app}")),
            ("reason", Some("Started")),
            ("reportingComponent", Some("")),
            ("source", Some("kubelet")),
            ("type", Some("Normal")),
            ("message", None),
        ];
        for (path, want) in cases {
            assert_eq!(EventStrategy.field(&e, path).as_deref(), *want, "{path}");
        }
        let mut e2 = base_event();
        e2.as_object_mut().unwrap().remove("source");
        set(&mut e2, &["reportingComponent"], json!("ctrl"));
        assert_eq!(
            EventStrategy.field(&e2, "source").as_deref(),
            Some("ctrl"),
            "source falls back to reportingComponent"
        );
    }

    #[test]
    fn event_table() {
        let names: Vec<&str> = EventStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count"],
            "event columns"
        );
        let prio: Vec<u32> = EventStrategy.columns().iter().map(|c| c.priority).collect();
        assert_eq!(prio, [0, 0, 0, 0, 1, 1, 0, 1, 1], "event column priorities");
        assert_eq!(
            EventStrategy.cells(&base_event(), now()),
            vec![
                json!("2m"),
                json!("Normal"),
                json!("Started"),
                json!("pod/web"),
                json!("spec.containers{app}"),
                json!("kubelet, node-1"),
                json!("Started container app"),
                json!("10m"),
                json!(3),
            ],
            "old-style event cells"
        );
        // New-style: no first/last timestamps, a series, reporting fields as the source.
        let e = json!({"metadata": {"name": "x", "namespace": "default"}, "eventTime": "2024-05-01T10:59:59.500000Z",
                       "series": {"count": 4, "lastObservedTime": "2024-05-01T11:59:00.000000Z"},
                       "involvedObject": {"kind": "Node"}, "reportingComponent": "ctrl", "reportingInstance": "i-1"});
        assert_eq!(
            EventStrategy.cells(&e, now()),
            vec![
                json!("60s"),
                json!(""),
                json!(""),
                json!("node"),
                json!(""),
                json!("ctrl, i-1"),
                json!(""),
                json!("60m"),
                json!(4),
            ],
            "new-style event cells"
        );
        // Singleton without any time.
        let e = json!({"metadata": {"name": "x"}, "involvedObject": {}});
        let cells = EventStrategy.cells(&e, now());
        assert_eq!(cells[0], json!("<unknown>"), "singleton without time: last seen");
        assert_eq!(cells[8], json!(1), "singleton without time: count");
    }

    #[test]
    fn no_panics_on_odd_json() {
        let odd = [
            json!(null),
            json!([]),
            json!("x"),
            json!({"metadata": 5, "spec": [], "status": "x", "data": 1, "secrets": {}}),
        ];
        for s in [
            &NamespaceStrategy as &dyn Strategy,
            &ConfigMapStrategy,
            &SecretStrategy,
            &ServiceAccountStrategy,
            &EventStrategy,
        ] {
            for o in &odd {
                let mut a = o.clone();
                s.prepare_for_create(&mut a);
                s.prepare_for_update(&mut a, o);
                s.prepare_for_subresource("status", &mut a, o);
                s.prepare_for_subresource("finalize", &mut a, o);
                let _ = s.validate(o);
                let _ = s.validate_update(o, o);
                let _ = s.validate_subresource("status", o, o);
                let _ = s.cells(o, now());
                let _ = s.roundtrip(o);
            }
        }
    }
}
