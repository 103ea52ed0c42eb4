//! certificates.k8s.io `podcertificaterequests` (namespaced, subresource `status`), served as
//! `v1` (preferred) and `v1beta1`, after upstream's
//! `pkg/registry/certificates/podcertificaterequest/strategy.go` and
//! `ValidatePodCertificateRequest*` in `pkg/apis/certificates/validation`.
//!
//! One stored form for both versions (storage version `v1`, the fields of both: [`stored_as`]);
//! a request made through `v1beta1` with the deprecated `pkixPublicKey` and
//! `proofOfPossession` keeps them, and a read through `v1` shows them too, so that no write
//! through `v1` can drop them unseen (upstream's `v1` form has no such fields; its immutable
//! spec refuses the same writes).
//!
//! Write paths:
//!
//! | path      | spec                 | status                                          |
//! |-----------|----------------------|-------------------------------------------------|
//! | create    | validated, defaulted | cleared                                         |
//! | update    | immutable            | kept                                            |
//! | `/status` | kept                 | the terminal transitions of [`status`] only     |
//!
//! Create validation (both versions): signer name; pod, service account and node names
//! (DNS subdomains) and UIDs (1..128 bytes); `maxExpirationSeconds` (defaulted to 86400) in
//! [3600, 86400] for `kubernetes.io` signers, [3600, 7862400] otherwise;
//! `unverifiedUserAnnotations` as annotations with domain-prefixed keys; the key, through
//! `kustos_ca::pod_certificate`: `v1` takes `stubPKCS10Request` (its self-signature checked);
//! `v1beta1` takes either that, with `pkixPublicKey` and `proofOfPossession` empty, or those
//! two (the proof over the pod UID checked). Writing the status needs `sign` on the signer:
//! admission's `PodCertificateRequestSigning`.
//!
//! Selectable fields: `spec.signerName`, `spec.podName`, `spec.nodeName`. The Table is the
//! default one (upstream prints no columns of its own for the kind).

pub mod status;

use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::certificates::v1 as certv1;
use k8s_openapi::api::certificates::v1beta1 as certv1beta1;
use kustos_ca::pod_certificate as pc;
use serde_json::{json, Value};

use super::certificates::validate_signer_name;
use super::shared::{get_at, invalid_shown, str_at, too_long};
use super::{decode, typed_roundtrip, FieldSelectors, ResourceDef, StatusStrategy, StoredAs, Strategy, WriteStrategy};
use crate::error::FieldError;
use crate::validation;

pub const GROUP: &str = "certificates.k8s.io";
pub const RESOURCE: &str = "podcertificaterequests";

/// The served resources: `v1` first (the preferred version), then `v1beta1`.
pub fn resources() -> Vec<ResourceDef> {
    let def = |version: &'static str, strategy: PodCertificateRequestStrategy, schema: super::SchemaFn| ResourceDef {
        group: GROUP,
        version,
        resource: RESOURCE,
        singular: "podcertificaterequest",
        kind: "PodCertificateRequest",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &["status"],
        create_only: false,
        strategy: Arc::new(strategy),
        schema,
    };
    vec![
        def("v1", PodCertificateRequestStrategy::V1, |g| g.subschema_for::<certv1::PodCertificateRequest>()),
        def("v1beta1", PodCertificateRequestStrategy::V1beta1, |g| {
            g.subschema_for::<certv1beta1::PodCertificateRequest>()
        }),
    ]
}

/// `podcertificaterequests`, in one of its served versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodCertificateRequestStrategy {
    V1,
    V1beta1,
}

impl PodCertificateRequestStrategy {
    fn api_version(self) -> &'static str {
        match self {
            PodCertificateRequestStrategy::V1 => "certificates.k8s.io/v1",
            PodCertificateRequestStrategy::V1beta1 => "certificates.k8s.io/v1beta1",
        }
    }
}

/// The default and the bounds of `spec.maxExpirationSeconds`.
pub const DEFAULT_MAX_EXPIRATION_SECONDS: i64 = 86400;
pub const MIN_MAX_EXPIRATION_SECONDS: i64 = 3600;
pub const KUBERNETES_MAX_MAX_EXPIRATION_SECONDS: i64 = 86400;
pub const MAX_MAX_EXPIRATION_SECONDS: i64 = 7_862_400;
/// The longest UID the spec names.
const MAX_UID_LENGTH: usize = 128;

fn with_api_version(obj: &Value, api_version: &str) -> Value {
    super::clustertrustbundles::with_api_version(obj, api_version)
}

/// How `version`'s objects are kept: in the `v1` storage, converted by `apiVersion` alone.
fn stored_as(version: PodCertificateRequestStrategy) -> StoredAs {
    StoredAs {
        gvk: (GROUP, "v1", "PodCertificateRequest"),
        resource: RESOURCE,
        from_stored: match version {
            PodCertificateRequestStrategy::V1 => |o| with_api_version(o, "certificates.k8s.io/v1"),
            PodCertificateRequestStrategy::V1beta1 => |o| with_api_version(o, "certificates.k8s.io/v1beta1"),
        },
        to_stored: |o| with_api_version(o, "certificates.k8s.io/v1"),
    }
}

/// Whether `signer` is reserved for the Kubernetes project (`kubernetes.io/...` or a
/// subdomain's): its certificates live at most 24 hours.
pub fn is_kubernetes_signer(signer: &str) -> bool {
    let domain = signer.split_once('/').map_or(signer, |(d, _)| d);
    domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")
}

/// A base64 (`[]byte`) field of the spec, decoded; an absent or null field is empty.
pub fn spec_bytes(obj: &Value, key: &str) -> Vec<u8> {
    str_at(obj, &["spec", key])
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// The requested key, as the status rules compare it: from the stub request when there is
/// one, else `pkixPublicKey` (v1beta1's deprecated form). None when neither reads.
pub fn requested_key(obj: &Value) -> Option<pc::PublicKey> {
    let stub = spec_bytes(obj, "stubPKCS10Request");
    if !stub.is_empty() {
        return pc::parse_stub_request(&stub).ok().map(|s| s.key);
    }
    pc::parse_pkix(&spec_bytes(obj, "pkixPublicKey")).ok()
}

fn spec_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    str_at(obj, &["spec", key]).unwrap_or("")
}

/// Go's `%#v` of a `[]byte`, the value upstream's errors on key fields show (long keys cut).
fn shown_bytes(b: &[u8]) -> String {
    const SHOWN: usize = 32;
    let items: Vec<String> = b.iter().take(SHOWN).map(|x| format!("{x:#x}")).collect();
    let more = if b.len() > SHOWN { ", ..." } else { "" };
    format!("[]byte{{{}{more}}}", items.join(", "))
}

/// `ValidateUserAnnotations`: annotation rules, and every key domain-prefixed.
fn validate_user_annotations(obj: &Value, errs: &mut Vec<FieldError>) {
    const PATH: &str = "spec.unverifiedUserAnnotations";
    let Some(annotations) = get_at(obj, &["spec", "unverifiedUserAnnotations"]) else { return };
    errs.extend(validation::validate_annotations(Some(annotations), PATH));
    for k in annotations.as_object().into_iter().flat_map(|m| m.keys()) {
        if !k.contains('/') {
            errs.push(FieldError::invalid(PATH, &json!(k), "must be a domain-prefixed key (such as \"acme.io/foo\")"));
        }
    }
}

fn validate_name(path: &str, value: &str, errs: &mut Vec<FieldError>) {
    for m in validation::is_dns1123_subdomain(value) {
        errs.push(FieldError::invalid(path, &json!(value), m));
    }
}

fn validate_uid(path: &str, value: &str, errs: &mut Vec<FieldError>) {
    if value.is_empty() {
        errs.push(FieldError::invalid(path, &json!(value), "must not be empty"));
    }
    if value.len() > MAX_UID_LENGTH {
        errs.push(too_long(path, MAX_UID_LENGTH));
    }
}

/// The key checks of a stub request (`spec.stubPKCS10Request`).
fn validate_stub(stub: &[u8]) -> Vec<FieldError> {
    const PATH: &str = "spec.stubPKCS10Request";
    if stub.len() > pc::MAX_STUB_PKCS10_REQUEST_SIZE {
        return vec![too_long(PATH, pc::MAX_STUB_PKCS10_REQUEST_SIZE)];
    }
    match pc::parse_stub_request(stub) {
        Ok(_) => Vec::new(),
        Err(pc::StubProblem::Key(p)) => {
            vec![invalid_shown(PATH, &p.shown().unwrap_or_else(|| "\"<value omitted>\"".into()), &p.detail())]
        }
        Err(p) => vec![invalid_shown(PATH, "\"<value omitted>\"", &p.to_string())],
    }
}

/// The key checks of v1beta1's deprecated pair (`pkixPublicKey`, `proofOfPossession`).
fn validate_pkix(pkix: &[u8], proof: &[u8], pod_uid: &str) -> Vec<FieldError> {
    const PKIX: &str = "spec.pkixPublicKey";
    const POP: &str = "spec.proofOfPossession";
    if pkix.len() > pc::MAX_PKIX_PUBLIC_KEY_SIZE {
        return vec![too_long(PKIX, pc::MAX_PKIX_PUBLIC_KEY_SIZE)];
    }
    if proof.len() > pc::MAX_PROOF_OF_POSSESSION_SIZE {
        return vec![too_long(POP, pc::MAX_PROOF_OF_POSSESSION_SIZE)];
    }
    let key = match pc::parse_pkix(pkix).and_then(|k| pc::key_type(&k).map(|_| k)) {
        Ok(k) => k,
        Err(p) => return vec![invalid_shown(PKIX, &p.shown().unwrap_or_else(|| shown_bytes(pkix)), &p.detail())],
    };
    if !pc::verify_proof_of_possession(&key, pod_uid, proof) {
        return vec![invalid_shown(POP, "\"<value omitted>\"", "could not verify proof-of-possession signature")];
    }
    Vec::new()
}

/// `ValidatePodCertificateRequestCreate` (metadata is the caller's).
pub fn validate_create(version: PodCertificateRequestStrategy, obj: &Value) -> Vec<FieldError> {
    let decoded = match version {
        PodCertificateRequestStrategy::V1 => decode::<certv1::PodCertificateRequest>(obj).map(|_| ()),
        PodCertificateRequestStrategy::V1beta1 => decode::<certv1beta1::PodCertificateRequest>(obj).map(|_| ()),
    };
    if let Err(errs) = decoded {
        return errs;
    }
    let mut errs = validate_signer_name("spec.signerName", spec_str(obj, "signerName"));
    validate_user_annotations(obj, &mut errs);
    validate_name("spec.podName", spec_str(obj, "podName"), &mut errs);
    validate_uid("spec.podUID", spec_str(obj, "podUID"), &mut errs);
    validate_name("spec.serviceAccountName", spec_str(obj, "serviceAccountName"), &mut errs);
    validate_uid("spec.serviceAccountUID", spec_str(obj, "serviceAccountUID"), &mut errs);
    validate_name("spec.nodeName", spec_str(obj, "nodeName"), &mut errs);
    validate_uid("spec.nodeUID", spec_str(obj, "nodeUID"), &mut errs);
    let Some(max) = get_at(obj, &["spec", "maxExpirationSeconds"]).and_then(Value::as_i64) else {
        errs.push(FieldError::required("spec.maxExpirationSeconds", "must be set"));
        return errs;
    };
    let upper = if is_kubernetes_signer(spec_str(obj, "signerName")) {
        KUBERNETES_MAX_MAX_EXPIRATION_SECONDS
    } else {
        MAX_MAX_EXPIRATION_SECONDS
    };
    if !(MIN_MAX_EXPIRATION_SECONDS..=upper).contains(&max) {
        errs.push(FieldError::invalid(
            "spec.maxExpirationSeconds",
            &json!(max),
            format!("must be in the range [{MIN_MAX_EXPIRATION_SECONDS}, {upper}]"),
        ));
    }
    let (stub, pkix, proof) =
        (spec_bytes(obj, "stubPKCS10Request"), spec_bytes(obj, "pkixPublicKey"), spec_bytes(obj, "proofOfPossession"));
    match version {
        PodCertificateRequestStrategy::V1 => {
            if stub.is_empty() {
                errs.push(FieldError::required("spec.stubPKCS10Request", ""));
            } else {
                errs.extend(validate_stub(&stub));
            }
        }
        PodCertificateRequestStrategy::V1beta1 if !stub.is_empty() => {
            for (field, v) in [("spec.pkixPublicKey", &pkix), ("spec.proofOfPossession", &proof)] {
                if !v.is_empty() {
                    errs.push(FieldError::forbidden(field, "must be empty when stubPKCS10Request is set"));
                }
            }
            errs.extend(validate_stub(&stub));
        }
        PodCertificateRequestStrategy::V1beta1 => {
            errs.extend(validate_pkix(&pkix, &proof, spec_str(obj, "podUID")));
        }
    }
    errs
}

/// Go's decoding leaves missing fields empty where the typed form refuses the body: fill
/// them for the typed round trip, then take the filled ones out again, so that the stored
/// object holds what the request sent (unknown fields dropped).
fn fill_for_roundtrip(obj: &Value) -> (Value, Vec<Vec<String>>) {
    let mut filled = obj.clone();
    let mut added: Vec<Vec<String>> = Vec::new();
    let Some(m) = filled.as_object_mut() else { return (filled, added) };
    if !m.contains_key("spec") {
        m.insert("spec".into(), json!({}));
        added.push(vec!["spec".into()]);
    }
    if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
        for key in [
            "signerName",
            "podName",
            "podUID",
            "serviceAccountName",
            "serviceAccountUID",
            "nodeName",
            "nodeUID",
            "stubPKCS10Request",
        ] {
            if spec.get(key).is_none_or(Value::is_null) {
                spec.insert(key.into(), json!(""));
                added.push(vec!["spec".into(), key.into()]);
            }
        }
    }
    let conditions = m.get_mut("status").and_then(|s| s.get_mut("conditions")).and_then(Value::as_array_mut);
    for (i, c) in conditions.into_iter().flatten().enumerate() {
        let Some(c) = c.as_object_mut() else { continue };
        for (key, empty) in [
            ("type", ""),
            ("status", ""),
            ("reason", ""),
            ("message", ""),
            ("lastTransitionTime", "0001-01-01T00:00:00Z"),
        ] {
            if c.get(key).is_none_or(Value::is_null) {
                c.insert(key.into(), json!(empty));
                added.push(vec!["status".into(), "conditions".into(), i.to_string(), key.into()]);
            }
        }
    }
    (filled, added)
}

fn unfill(out: &mut Value, added: &[Vec<String>]) {
    for path in added.iter().rev() {
        let Some((last, parents)) = path.split_last() else { continue };
        let mut cur = Some(&mut *out);
        for p in parents {
            cur = cur.and_then(|v| match v {
                Value::Object(m) => m.get_mut(p),
                Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                _ => None,
            });
        }
        if let Some(Value::Object(m)) = cur {
            m.remove(last);
        }
    }
}

impl Strategy for PodCertificateRequestStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, super::DecodeError> {
        let (filled, added) = fill_for_roundtrip(obj);
        let mut out = match self {
            PodCertificateRequestStrategy::V1 => typed_roundtrip::<certv1::PodCertificateRequest>(&filled)?,
            PodCertificateRequestStrategy::V1beta1 => typed_roundtrip::<certv1beta1::PodCertificateRequest>(&filled)?,
        };
        unfill(&mut out, &added);
        Ok(out)
    }

    fn stored_as(&self) -> Option<StoredAs> {
        Some(stored_as(*self))
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn status(&self) -> Option<&dyn StatusStrategy> {
        Some(self)
    }

    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        Some(self)
    }
}

impl WriteStrategy for PodCertificateRequestStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.remove("status");
            let spec = m.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut() {
                let missing = spec.get("maxExpirationSeconds").is_none_or(Value::is_null);
                if missing {
                    spec.insert("maxExpirationSeconds".into(), json!(DEFAULT_MAX_EXPIRATION_SECONDS));
                }
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        super::shared::carry(new, old, &["status"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_create(*self, obj)
    }

    /// The spec is immutable and was validated at create; an update checks what changed.
    fn validate_on_update(&self, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let spec = |v: &Value| v.get("spec").cloned().unwrap_or(Value::Null);
        if spec(new) != spec(old) {
            return vec![invalid_shown("spec", "\"<value omitted>\"", "field is immutable")];
        }
        Vec::new()
    }
}

impl StatusStrategy for PodCertificateRequestStrategy {
    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        if sub == "status" {
            super::shared::carry(new, old, &["spec"]);
        }
    }

    fn reset_fields(&self, sub: &str) -> super::ResetFields {
        super::status_reset_fields(sub)
    }

    fn validate_subresource(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        if sub != "status" {
            return Vec::new();
        }
        status::validate_status_update(new, old, chrono::Utc::now())
    }
}

impl FieldSelectors for PodCertificateRequestStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "spec.signerName" | "spec.podName" | "spec.nodeName" => {
                Some(spec_str(obj, path.trim_start_matches("spec.")).to_string())
            }
            _ => None,
        }
    }
}

impl PodCertificateRequestStrategy {
    /// The wire form of a stored object for this version (for callers outside the view).
    pub fn from_stored(self, stored: &Value) -> Value {
        with_api_version(stored, self.api_version())
    }
}

#[cfg(test)]
#[path = "podcertificaterequests/tests.rs"]
mod tests;
