//! certificates.k8s.io/v1 `certificatesigningrequests`, after upstream's
//! `pkg/registry/certificates/certificates/strategy.go` and `pkg/apis/certificates/validation`.
//!
//! Write paths and what each may change:
//!
//! | path        | spec     | status.conditions                      | status.certificate |
//! |-------------|----------|----------------------------------------|--------------------|
//! | create      | yes      | cleared                                | cleared            |
//! | update      | kept     | kept                                   | kept               |
//! | `/approval` | kept     | yes (Approved/Denied allowed)          | kept               |
//! | `/status`   | kept     | yes, but Approved/Denied are preserved | yes, once          |
//!
//! Subresource writes default each condition's `lastUpdateTime` and `lastTransitionTime`.
//! The clock is read in one place, `now_rfc3339`; everything else takes `now` as input.

use std::sync::Arc;

use k8s_openapi::api::certificates::v1 as certv1;
use kustos_ca::csr::{condition, Signer};
use serde_json::{json, Value};

use super::shared::{
    age_column, carry, child_obj, col, creation_age, get_at, invalid_shown, is_zero_time, str_at, too_long,
};
use super::{
    decode, decode_update, human_duration, typed_roundtrip, Column, FieldSelectors, ResourceDef, StatusStrategy,
    Strategy, TableStrategy, WriteStrategy,
};
use crate::error::FieldError;
use crate::validation;

/// All certificates.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![ResourceDef {
        group: "certificates.k8s.io",
        version: "v1",
        resource: "certificatesigningrequests",
        singular: "certificatesigningrequest",
        kind: "CertificateSigningRequest",
        namespaced: false,
        short_names: &["csr"],
        categories: &[],
        subresources: &["status", "approval"],
        create_only: false,
        strategy: Arc::new(CertificateSigningRequestStrategy),
        schema: |g| g.subschema_for::<certv1::CertificateSigningRequest>(),
    }]
}

/// `certificatesigningrequests` (and its `status` and `approval` subresources).
pub struct CertificateSigningRequestStrategy;

const DNS1123_SUBDOMAIN_MAX: usize = 253;
const DNS1123_LABEL_MAX: usize = 63;

/// Every key usage v1 accepts (`allValidUsages`).
const VALID_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// The current time as a `metav1.Time`: the only clock read of the strategy.
fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

// ---------------------------------------------------------------------------------------
// PEM and X.509 checks
// ---------------------------------------------------------------------------------------

/// `validateCSR`, through the one reader of requests ([`kustos_ca::csr::parse_pem`]): a
/// single `CERTIFICATE REQUEST` block with nothing but whitespace around it, that parses,
/// whose signature verifies and whose subject follows the subject rule (at most one CN; CN,
/// O and OU as UTF8String, PrintableString or IA5String).
fn check_csr(pem: &[u8]) -> Result<(), kustos_ca::csr::CsrError> {
    kustos_ca::csr::parse_pem(pem).map(|_| ())
}

/// Why `status.certificate` is refused (upstream's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum CertificateError {
    #[error("only CERTIFICATE PEM blocks are allowed, found {0:?}")]
    NotCertificate(String),
    #[error("no PEM block headers are permitted")]
    Headers,
    #[error("found CERTIFICATE PEM block containing 0 certificates")]
    EmptyBlock,
    #[error("x509: malformed certificate")]
    Malformed,
    #[error("must contain at least one CERTIFICATE PEM block")]
    NoBlock,
}

/// `validateCertificate`: only `CERTIFICATE` blocks without headers, each holding certificates.
fn check_certificate(pem: &[u8]) -> Result<(), CertificateError> {
    if pem.is_empty() {
        return Ok(());
    }
    let mut blocks = 0;
    let mut rest = pem;
    while let Some((block, next)) = kustos_ca::pem::decode(rest) {
        if block.type_ != "CERTIFICATE" {
            return Err(CertificateError::NotCertificate(block.type_.to_string()));
        }
        if block.has_headers {
            return Err(CertificateError::Headers);
        }
        blocks += 1;
        if block.bytes.is_empty() {
            return Err(CertificateError::EmptyBlock);
        }
        let mut der: &[u8] = &block.bytes;
        while !der.is_empty() {
            let (r, _) = x509_parser::parse_x509_certificate(der).map_err(|_| CertificateError::Malformed)?;
            der = r;
        }
        rest = next;
    }
    if blocks == 0 {
        return Err(CertificateError::NoBlock);
    }
    Ok(())
}

/// Go's `%#v` of a `[]byte`; `None` is a nil slice.
fn go_bytes(b: Option<&[u8]>) -> String {
    match b {
        None => "[]byte(nil)".into(),
        Some(b) => {
            let items: Vec<String> = b.iter().map(|x| format!("{x:#x}")).collect();
            format!("[]byte{{{}}}", items.join(", "))
        }
    }
}

/// `ValidateSignerName` (pkg/apis/core/validation).
pub(super) fn validate_signer_name(field: &str, signer: &str) -> Vec<FieldError> {
    if signer.is_empty() {
        return vec![FieldError::required(field, "")];
    }
    let segments: Vec<&str> = signer.split('/').collect();
    let [domain, path] = segments.as_slice() else {
        return vec![FieldError::invalid(
            field,
            &json!(signer),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )];
    };
    let mut errs = Vec::new();
    if domain.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(too_long(field, DNS1123_SUBDOMAIN_MAX));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    for label in &labels {
        let msgs = validation::is_dns1123_label(label);
        if !msgs.is_empty() {
            for m in msgs {
                errs.push(FieldError::invalid(field, &json!(domain), format!("validating label {label:?}: {m}")));
            }
            break;
        }
    }
    if labels.len() < 2 {
        errs.push(FieldError::invalid(
            field,
            &json!(domain),
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for label in path.split('.') {
        let msgs = validation::is_dns1123_subdomain(label);
        if !msgs.is_empty() {
            for m in msgs {
                errs.push(FieldError::invalid(field, &json!(path), format!("validating label {label:?}: {m}")));
            }
            break;
        }
    }
    let max = DNS1123_SUBDOMAIN_MAX + (DNS1123_SUBDOMAIN_MAX + DNS1123_LABEL_MAX + 1) + 1;
    if signer.len() > max {
        errs.push(too_long(field, max));
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

type Csr = certv1::CertificateSigningRequest;
type Condition = certv1::CertificateSigningRequestCondition;

/// `certificateValidationOptions`: what a write path may do, and the problems tolerated
/// because the stored object already has them.
#[derive(Debug, Default, Clone, Copy)]
struct Options {
    allow_setting_approval_conditions: bool,
    allow_setting_certificate: bool,
    allow_both_approved_and_denied: bool,
    allow_resetting_certificate: bool,
    allow_legacy_signer_name: bool,
    allow_duplicate_condition_types: bool,
    allow_empty_condition_type: bool,
    allow_arbitrary_certificate: bool,
    allow_unknown_usages: bool,
    allow_duplicate_usages: bool,
    /// `spec.request` is the stored one, whose parse and signature were checked when it was
    /// created (spec is immutable): checking the signature again on every approval and
    /// status write would only cost time.
    request_already_checked: bool,
}

fn conditions(csr: &Csr) -> &[Condition] {
    csr.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default()
}

fn certificate(csr: &Csr) -> &[u8] {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).map_or(&[], |c| c.0.as_slice())
}

fn usages(csr: &Csr) -> &[String] {
    csr.spec.usages.as_deref().unwrap_or_default()
}

fn has_duplicates<'a>(items: impl Iterator<Item = &'a str>) -> bool {
    let mut seen = std::collections::HashSet::new();
    items.into_iter().any(|i| !seen.insert(i))
}

/// `getValidationOptions(new, old)`; subresource abilities start off.
fn options(new: &Csr, old: Option<&Csr>) -> Options {
    let Some(old) = old else { return Options::default() };
    let old_conds = conditions(old);
    Options {
        allow_both_approved_and_denied: old_conds.iter().any(|c| c.type_ == condition::APPROVED)
            && old_conds.iter().any(|c| c.type_ == condition::DENIED),
        allow_legacy_signer_name: old.spec.signer_name == Signer::LegacyUnknown.name(),
        allow_duplicate_condition_types: has_duplicates(old_conds.iter().map(|c| c.type_.as_str())),
        allow_empty_condition_type: old_conds.iter().any(|c| c.type_.is_empty()),
        allow_arbitrary_certificate: certificate(new) == certificate(old)
            || check_certificate(certificate(old)).is_err(),
        allow_unknown_usages: usages(old).iter().any(|u| !VALID_USAGES.contains(&u.as_str())),
        allow_duplicate_usages: has_duplicates(usages(old).iter().map(String::as_str)),
        ..Options::default()
    }
}

fn sorted(items: &[&'static str]) -> Vec<&'static str> {
    let mut v = items.to_vec();
    v.sort_unstable();
    v
}

/// `validateConditions`.
fn validate_conditions(csr: &Csr, opts: Options) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions(csr).iter().enumerate() {
        let path = format!("status.conditions[{i}]");
        if !opts.allow_empty_condition_type && c.type_.is_empty() {
            errs.push(FieldError::required(format!("{path}.type"), ""));
        }
        let allowed: &[&str] =
            if condition::BUILT_IN.contains(&c.type_.as_str()) { &["True"] } else { &["False", "True", "Unknown"] };
        if c.status.is_empty() {
            errs.push(FieldError::required(format!("{path}.status"), ""));
        } else if !allowed.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(format!("{path}.status"), &json!(c.status), allowed));
        }
        if !opts.allow_both_approved_and_denied {
            let clash = match c.type_.as_str() {
                condition::APPROVED => {
                    approved = true;
                    denied
                }
                condition::DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                errs.push(FieldError::invalid(
                    format!("{path}.type"),
                    &json!(c.type_),
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.allow_duplicate_condition_types && !seen.insert(c.type_.as_str()) {
            errs.push(FieldError::duplicate(format!("{path}.type"), &json!(c.type_)));
        }
    }
    errs
}

/// `validateCertificateSigningRequest` (metadata excepted). `wire` is the object as sent,
/// to tell an absent `spec.request` (nil) from an empty one.
fn validate_csr(wire: &Value, csr: &Csr, opts: Options) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let request = &csr.spec.request.0;
    let checked = if opts.request_already_checked { Ok(()) } else { check_csr(request) };
    if let Err(e) = checked {
        let present = get_at(wire, &["spec", "request"]).is_some_and(|v| !v.is_null());
        let shown = go_bytes(present.then_some(request.as_slice()));
        errs.push(invalid_shown("spec.request", &shown, &e.to_string()));
    }
    let usages = usages(csr);
    if usages.is_empty() {
        errs.push(FieldError::required("spec.usages", ""));
    }
    if !opts.allow_unknown_usages {
        let supported = sorted(VALID_USAGES);
        for (i, u) in usages.iter().enumerate() {
            if !VALID_USAGES.contains(&u.as_str()) {
                errs.push(FieldError::not_supported(format!("spec.usages[{i}]"), &json!(u), &supported));
            }
        }
    }
    if !opts.allow_duplicate_usages {
        let mut seen = std::collections::HashSet::new();
        for (i, u) in usages.iter().enumerate() {
            if !seen.insert(u.as_str()) {
                errs.push(FieldError::duplicate(format!("spec.usages[{i}]"), &json!(u)));
            }
        }
    }
    let signer = csr.spec.signer_name.as_str();
    if !opts.allow_legacy_signer_name && signer == Signer::LegacyUnknown.name() {
        errs.push(FieldError::invalid(
            "spec.signerName",
            &json!(signer),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        errs.extend(validate_signer_name("spec.signerName", signer));
    }
    if let Some(secs) = csr.spec.expiration_seconds.filter(|s| *s < 600) {
        errs.push(FieldError::invalid(
            "spec.expirationSeconds",
            &json!(secs),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    errs.extend(validate_conditions(csr, opts));
    if !opts.allow_arbitrary_certificate {
        if let Err(e) = check_certificate(certificate(csr)) {
            errs.push(FieldError::invalid("status.certificate", &json!("<certificate data>"), e.to_string()));
        }
    }
    errs
}

fn find_conditions<'a>(csr: &'a Csr, type_: &str) -> Vec<&'a Condition> {
    conditions(csr).iter().filter(|c| c.type_ == type_).collect()
}

/// Everything an update of a CSR through `sub` ("" for the main resource) is checked for, from
/// one decode of the two objects: the object's own rules, as at create but without checking an
/// unchanged request again, then the update's, with what `sub` may change.
fn validate_replacing(new_wire: &Value, old: &Value, sub: &str) -> Vec<FieldError> {
    let (new, old): (Csr, Csr) = crate::typed!(decode_update(new_wire, old));
    let own = Options { request_already_checked: new.spec.request == old.spec.request, ..Options::default() };
    let mut errs = validate_csr(new_wire, &new, own);
    let mut opts = options(&new, Some(&old));
    match sub {
        "status" => opts.allow_setting_certificate = true,
        "approval" => opts.allow_setting_approval_conditions = true,
        _ => {}
    }
    errs.extend(validate_csr_update(&new, &old, opts));
    errs
}

/// The update-only half of `validateCertificateSigningRequestUpdate`.
fn validate_csr_update(new: &Csr, old: &Csr, opts: Options) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for t in condition::BUILT_IN {
        if find_conditions(new, t).len() < find_conditions(old, t).len() {
            errs.push(FieldError::forbidden(
                "status.conditions",
                format!("updates may not remove a condition of type {t:?}"),
            ));
        }
    }
    if !opts.allow_setting_approval_conditions {
        for t in [condition::APPROVED, condition::DENIED] {
            let (old_c, new_c) = (find_conditions(old, t), find_conditions(new, t));
            if new_c.len() > old_c.len() {
                errs.push(FieldError::forbidden(
                    "status.conditions",
                    format!("updates may not add a condition of type {t:?}"),
                ));
            } else if new_c.len() == old_c.len() && new_c != old_c {
                // Upstream appends a cmp.Diff of the two lists; ours is a plain before/after.
                errs.push(FieldError::forbidden(
                    "status.conditions",
                    format!("updates may not modify a condition of type {t:?}\n-{old_c:?}\n+{new_c:?}"),
                ));
            }
        }
    }
    if certificate(new) != certificate(old) {
        if !opts.allow_setting_certificate {
            errs.push(FieldError::forbidden("status.certificate", "updates may not set certificate content"));
        } else if !opts.allow_resetting_certificate && !certificate(old).is_empty() {
            errs.push(FieldError::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Preparation (pure: `now` comes in)
// ---------------------------------------------------------------------------------------

fn wire_conditions(obj: &Value) -> Vec<Value> {
    get_at(obj, &["status", "conditions"]).and_then(Value::as_array).cloned().unwrap_or_default()
}

fn cond_str<'a>(c: &'a Value, key: &str) -> &'a str {
    c.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `populateConditionTimestamps`: a missing `lastUpdateTime` becomes `now`; a missing
/// `lastTransitionTime` is the stored one of the same type and status, else `now`.
fn populate_condition_timestamps(new: &mut [Value], old: &[Value], now: &str) {
    for c in new.iter_mut() {
        let Some(m) = c.as_object_mut() else { continue };
        if is_zero_time(m.get("lastUpdateTime")) {
            m.insert("lastUpdateTime".into(), json!(now));
        }
        if is_zero_time(m.get("lastTransitionTime")) {
            let (t, s) = (
                m.get("type").and_then(Value::as_str).unwrap_or(""),
                m.get("status").and_then(Value::as_str).unwrap_or(""),
            );
            let previous = old
                .iter()
                .find(|o| {
                    cond_str(o, "type") == t && cond_str(o, "status") == s && !is_zero_time(o.get("lastTransitionTime"))
                })
                .and_then(|o| o.get("lastTransitionTime").cloned());
            m.insert("lastTransitionTime".into(), previous.unwrap_or_else(|| json!(now)));
        }
    }
}

/// `preserveConditionInstances`: stored instances of `type_` replace the request's ones
/// when the request neither adds nor removes any.
fn preserve_condition_instances(new: &mut [Value], old: &[Value], type_: &str) {
    let idx = |cs: &[Value]| -> Vec<usize> { (0..cs.len()).filter(|i| cond_str(&cs[*i], "type") == type_).collect() };
    let (old_idx, new_idx) = (idx(old), idx(new));
    if old_idx.len() == new_idx.len() {
        for (n, o) in new_idx.into_iter().zip(old_idx) {
            new[n] = old[o].clone();
        }
    }
}

fn set_conditions(obj: &mut Value, conds: Option<Vec<Value>>) {
    match (conds, child_obj(obj, &["status"])) {
        (Some(c), Some(status)) => {
            status.insert("conditions".into(), Value::Array(c));
        }
        (None, Some(status)) => {
            status.remove("conditions");
        }
        _ => {}
    }
}

/// `csrStatusStrategy.PrepareForUpdate`.
fn prepare_status(new: &mut Value, old: &Value, now: &str) {
    carry(new, old, &["spec"]);
    let present = get_at(new, &["status", "conditions"]).is_some_and(Value::is_array);
    let mut conds = wire_conditions(new);
    let old_conds = wire_conditions(old);
    preserve_condition_instances(&mut conds, &old_conds, condition::APPROVED);
    preserve_condition_instances(&mut conds, &old_conds, condition::DENIED);
    populate_condition_timestamps(&mut conds, &old_conds, now);
    if present {
        set_conditions(new, Some(conds));
    }
}

/// `csrApprovalStrategy.PrepareForUpdate`.
fn prepare_approval(new: &mut Value, old: &Value, now: &str) {
    let present = get_at(new, &["status", "conditions"]).is_some_and(Value::is_array);
    let mut conds = wire_conditions(new);
    populate_condition_timestamps(&mut conds, &wire_conditions(old), now);
    carry(new, old, &["spec"]);
    carry(new, old, &["status"]);
    set_conditions(new, present.then_some(conds));
}

// ---------------------------------------------------------------------------------------
// Table
// ---------------------------------------------------------------------------------------

/// `extractCSRStatus`: `Pending`, `Approved`, `Denied`, plus `,Failed` and `,Issued`.
fn condition_summary(obj: &Value) -> String {
    let conds = wire_conditions(obj);
    let has = |t: &str| conds.iter().any(|c| cond_str(c, "type") == t);
    let mut s = if has(condition::DENIED) {
        condition::DENIED.to_string()
    } else if has(condition::APPROVED) {
        condition::APPROVED.to_string()
    } else {
        "Pending".to_string()
    };
    if has(condition::FAILED) {
        s.push_str(",Failed");
    }
    if str_at(obj, &["status", "certificate"]).is_some_and(|c| !c.is_empty()) {
        s.push_str(",Issued");
    }
    s
}

impl Strategy for CertificateSigningRequestStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<Csr>(obj)
    }

    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
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

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for CertificateSigningRequestStrategy {
    /// The requester's identity, from the request's user (upstream's PrepareForCreate).
    fn prepare_for_create_by(&self, obj: &mut Value, user: &crate::authn::UserInfo) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = json!({});
        }
        let spec = &mut obj["spec"];
        spec["username"] = json!(user.name);
        if user.uid.is_empty() {
            if let Some(m) = spec.as_object_mut() {
                m.remove("uid");
            }
        } else {
            spec["uid"] = json!(user.uid);
        }
        spec["groups"] = json!(user.groups);
        if user.extra.is_empty() {
            if let Some(m) = spec.as_object_mut() {
                m.remove("extra");
            }
        } else {
            spec["extra"] = json!(user.extra);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        // The requester's identity is filled in afterwards from the request's user.
        if let Some(Value::Object(spec)) = obj.as_object_mut().and_then(|m| m.get_mut("spec")) {
            for k in ["username", "uid", "groups", "extra"] {
                spec.remove(k);
            }
        }
        // Be explicit that users cannot create pre-approved certificate requests.
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    /// Spec and status are immutable through the main resource (upstream replaces them).
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        carry(new, old, &["spec"]);
        carry(new, old, &["status"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let csr: Csr = crate::typed!(decode(obj));
        validate_csr(obj, &csr, options(&csr, None))
    }

    /// Nothing here: every update of a CSR, of the main resource or of a subresource, reaches
    /// `validate_update` or `validate_subresource`, which check all of it from one decode of
    /// the two objects ([`validate_replacing`]).
    fn validate_on_update(&self, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_replacing(new, old, "")
    }
}

impl StatusStrategy for CertificateSigningRequestStrategy {
    /// `/status` sets the certificate, `/approval` the conditions.
    fn reset_fields(&self, sub: &str) -> super::ResetFields {
        match sub {
            "" => &[&["status"]],
            "status" => &[&["spec"], &["status", "conditions"]],
            "approval" => &[&["spec"], &["status", "certificate"]],
            _ => &[],
        }
    }

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        match sub {
            "status" => prepare_status(new, old, &now_rfc3339()),
            "approval" => prepare_approval(new, old, &now_rfc3339()),
            _ => {}
        }
    }

    fn validate_subresource(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_replacing(new, old, sub)
    }
}

impl FieldSelectors for CertificateSigningRequestStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "spec.signerName" => Some(str_at(obj, &["spec", "signerName"]).unwrap_or("").to_string()),
            _ => None,
        }
    }
}

impl TableStrategy for CertificateSigningRequestStrategy {
    /// Upstream's columns carry the v1beta1 field docs (including its quirk: Requestor
    /// describes `request`).
    fn columns(&self) -> Vec<Column> {
        vec![
            age_column(),
            col(
                "SignerName",
                "Requested signer for the request. It is a qualified name in the form: `scope-hostname.io/name`. If empty, it will be defaulted:\n 1. If it's a kubelet client certificate, it is assigned\n    \"kubernetes.io/kube-apiserver-client-kubelet\".\n 2. If it's a kubelet serving certificate, it is assigned\n    \"kubernetes.io/kubelet-serving\".\n 3. Otherwise, it is assigned \"kubernetes.io/legacy-unknown\".\nDistribution of trust for signers happens out of band. You can select on this field using `spec.signerName`.",
                0,
            ),
            col("Requestor", "Base64-encoded PKCS#10 CSR data", 0),
            col(
                "RequestedDuration",
                "expirationSeconds is the requested duration of validity of the issued certificate. The certificate signer may issue a certificate with a different validity duration so a client must check the delta between the notBefore and and notAfter fields in the issued certificate to determine the actual duration.\n\nThe v1.22+ in-tree implementations of the well-known Kubernetes signers will honor this field as long as the requested duration is not greater than the maximum duration they will honor per the --cluster-signing-duration CLI flag to the Kubernetes controller manager.\n\nCertificate signers may not honor this field for various reasons:\n\n  1. Old signer that is unaware of the field (such as the in-tree\n     implementations prior to v1.22)\n  2. Signer whose configured maximum is shorter than the requested duration\n  3. Signer whose configured minimum is longer than the requested duration\n\nThe minimum valid value for expirationSeconds is 600, i.e. 10 minutes.",
                0,
            ),
            col("Condition", "Conditions applied to the request, such as approval or denial.", 0),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let signer = str_at(obj, &["spec", "signerName"]).filter(|s| !s.is_empty()).unwrap_or("<none>");
        let duration = get_at(obj, &["spec", "expirationSeconds"])
            .and_then(Value::as_i64)
            .map_or_else(|| "<none>".to_string(), human_duration);
        vec![
            creation_age(obj, now),
            json!(signer),
            json!(str_at(obj, &["spec", "username"]).unwrap_or("")),
            json!(duration),
            json!(condition_summary(obj)),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
