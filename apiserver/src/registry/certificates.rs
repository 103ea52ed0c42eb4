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

use super::core::{
    age_column, carry, child_obj, col, creation_age, get_at, invalid_shown, is_zero_time, str_at, too_long,
};
use super::{decode, decode_update, human_duration, typed_roundtrip, Column, ResourceDef, Strategy};
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
fn check_csr(pem: &[u8]) -> Result<(), String> {
    kustos_ca::csr::parse_pem(pem).map(|_| ()).map_err(|e| e.to_string())
}

/// `validateCertificate`: only `CERTIFICATE` blocks without headers, each holding certificates.
fn check_certificate(pem: &[u8]) -> Result<(), String> {
    if pem.is_empty() {
        return Ok(());
    }
    let mut blocks = 0;
    let mut rest = pem;
    while let Some((block, next)) = kustos_ca::pem::decode(rest) {
        if block.type_ != "CERTIFICATE" {
            return Err(format!("only CERTIFICATE PEM blocks are allowed, found {:?}", block.type_));
        }
        if block.has_headers {
            return Err("no PEM block headers are permitted".into());
        }
        blocks += 1;
        if block.bytes.is_empty() {
            return Err("found CERTIFICATE PEM block containing 0 certificates".into());
        }
        let mut der: &[u8] = &block.bytes;
        while !der.is_empty() {
            let (r, _) =
                x509_parser::parse_x509_certificate(der).map_err(|_| "x509: malformed certificate".to_string())?;
            der = r;
        }
        rest = next;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
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
fn validate_signer_name(field: &str, signer: &str) -> Vec<FieldError> {
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
        errs.push(invalid_shown("spec.request", &shown, &e));
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
            errs.push(FieldError::invalid("status.certificate", &json!("<certificate data>"), e));
        }
    }
    errs
}

fn find_conditions<'a>(csr: &'a Csr, type_: &str) -> Vec<&'a Condition> {
    conditions(csr).iter().filter(|c| c.type_ == type_).collect()
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

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        match sub {
            "status" => prepare_status(new, old, &now_rfc3339()),
            "approval" => prepare_approval(new, old, &now_rfc3339()),
            _ => {}
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let csr: Csr = crate::typed!(decode(obj));
        validate_csr(obj, &csr, options(&csr, None))
    }

    fn validate_on_update(&self, new_obj: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (Csr, Csr) = crate::typed!(decode_update(new_obj, old));
        let opts = Options { request_already_checked: new.spec.request == old.spec.request, ..Options::default() };
        validate_csr(new_obj, &new, opts)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (Csr, Csr) = crate::typed!(decode_update(new, old));
        validate_csr_update(&new, &old, options(&new, Some(&old)))
    }

    fn validate_subresource(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (Csr, Csr) = crate::typed!(decode_update(new, old));
        let mut opts = options(&new, Some(&old));
        match sub {
            "status" => opts.allow_setting_certificate = true,
            "approval" => opts.allow_setting_approval_conditions = true,
            _ => {}
        }
        validate_csr_update(&new, &old, opts)
    }

    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "spec.signerName" => Some(str_at(obj, &["spec", "signerName"]).unwrap_or("").to_string()),
            _ => None,
        }
    }

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
mod tests {
    use super::*;
    use base64::Engine as _;

    const CSR_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHvMIGWAgEAMDQxFTATBgNVBAoMDHN5c3RlbTpub2RlczEbMBkGA1UEAwwSc3lz
dGVtOm5vZGU6bm9kZS0xMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEW9g/3BZn
qQq89W8OdvxQn2gQm4pNFYUONw1s+aV85g+5uaaym4bpiSymI5VZHpe8cQdrPRqV
G52KcgW+OfOqZKAAMAoGCCqGSM49BAMCA0gAMEUCIDBFTQJB6qa28AZSVCFmOoDk
PRLJEzRcnmAxHPak8K9RAiEAmpHPNQJo6I+M3cOtjbc3KW01pfAcHKAljUSvSnLA
TdQ=
-----END CERTIFICATE REQUEST-----
";

    const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBdDCCARugAwIBAgIUeGtH3VW9ZsP44TItBiMZ4mKtwXIwCgYIKoZIzj0EAwIw
DzENMAsGA1UEAwwEdGVzdDAgFw0yNjExMjIwODQyMjBaGA8yMTI2MTAyOTA4NDIy
MFowDzENMAsGA1UEAwwEdGVzdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFvY
P9wWZ6kKvPVvDnb8UJ9oEJuKTRWFDjcNbPmlfOYPubmmspuG6YkspiOVWR6XvHEH
az0alRudinIFvjnzqmSjUzBRMB0GA1UdDgQWBBRQyn/nWO6eWGGd4MIc7zyNvdQn
uDAfBgNVHSMEGDAWgBRQyn/nWO6eWGGd4MIc7zyNvdQnuDAPBgNVHRMBAf8EBTAD
AQH/MAoGCCqGSM49BAMCA0cAMEQCIFwOdReYcJ5BjsT3BxmU6LidE5DNMu6kKZIc
Nv7T97xKAiAdoe2KOBbBdBqO5fFSg5nf6URzRLr0EL/xcOkBPCRHug==
-----END CERTIFICATE-----
";

    /// Two CNs: Go reads `intern-bob`, a first-CN reader `cluster-root-alice`.
    const TWO_CNS_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHtMIGUAgEAMDIxGzAZBgNVBAMMEmNsdXN0ZXItcm9vdC1hbGljZTETMBEGA1UE
AwwKaW50ZXJuLWJvYjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFO/SjQ3xLC6
xtyzpz86WQscll35xr5aFMijOzOurYn+3/+Vezo53LfUHLHKTZbzt9/GOWWP/pqF
0eKbrJk8esugADAKBggqhkjOPQQDAgNIADBFAiEAnsPKNb6BzmF3A4D64MQLXoVY
bTrnLFCqxekwMs5EH4oCICtwk92lwiZPcwSwWue3S5g9fSeeWbDuO0MlAGNO0KdY
-----END CERTIFICATE REQUEST-----
";

    /// `O=system:nodes` (UTF8String), `O=system:masters` (T61String), `CN=system:node:n1`.
    const T61_MASTERS_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIIBAzCBqwIBADBJMRUwEwYDVQQKDAxzeXN0ZW06bm9kZXMxFzAVBgNVBAoUDnN5
c3RlbTptYXN0ZXJzMRcwFQYDVQQDDA5zeXN0ZW06bm9kZTpuMTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABDh7E6SoJt/6elvdTTmnxqdH5HkSzoY2e9mnKWBvR4aI
5x8pqN/3q8zpHxbojLYUyA7cgdZ2/Eaj1JJmVdN2NSygADAKBggqhkjOPQQDAgNH
ADBEAiA4RR6vbImm6K/krHYppIlrxKOC/BvUNZAC4tCDNlOO8wIgJPj2iLTPw9XX
vrh0cqZHJ6X+92hXoC62t7V8c47fhDA=
-----END CERTIFICATE REQUEST-----
";

    const NOW: &str = "2024-05-01T12:00:00Z";
    const EARLIER: &str = "2024-05-01T11:00:00Z";

    type Mutate = Box<dyn Fn(&mut Value)>;
    type Conds = Vec<Value>;
    /// name, stored conditions, stored certificate, sent conditions, sent certificate, errors.
    type StatusCase = (&'static str, Conds, Option<&'static str>, Conds, Option<String>, Vec<&'static str>);
    /// name, conditions, issued, expirationSeconds, Condition cell, RequestedDuration cell.
    type TableCase = (&'static str, Conds, bool, Option<i64>, &'static str, &'static str);

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn base() -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": "node-csr-1", "creationTimestamp": "2024-05-01T11:50:00Z"},
               "spec": {"request": b64(CSR_PEM), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "client auth"], "username": "system:bootstrap:abcdef",
                        "groups": ["system:bootstrappers"]},
               "status": {}})
    }

    fn cond(t: &str, s: &str) -> Value {
        json!({"type": t, "status": s, "reason": "r", "message": "m"})
    }

    fn stamped(t: &str, s: &str, at: &str) -> Value {
        json!({"type": t, "status": s, "reason": "r", "message": "m", "lastUpdateTime": at, "lastTransitionTime": at})
    }

    fn with_conditions(mut obj: Value, conds: Vec<Value>) -> Value {
        obj["status"]["conditions"] = Value::Array(conds);
        obj
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    /// The fixture's CSR with the last signature byte flipped.
    fn tampered_csr() -> String {
        let (block, _) = kustos_ca::pem::decode(CSR_PEM.as_bytes()).unwrap();
        let mut der = block.bytes;
        let last = der.len() - 1;
        der[last] ^= 0x01;
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN CERTIFICATE REQUEST-----\n{body}\n-----END CERTIFICATE REQUEST-----\n")
    }

    const NOT_ALONE: &str =
        "the request must be exactly one CERTIFICATE REQUEST PEM block with nothing but whitespace around it";

    /// A block whose END line names another type (Go skips it), then the good request.
    fn mangled_then_clean() -> String {
        let mangled = TWO_CNS_PEM.replace("-----END CERTIFICATE REQUEST-----", "-----END CERTIFICATE-----");
        format!("{mangled}{CSR_PEM}")
    }

    #[test]
    fn create_validation() {
        let usages_list = sorted(VALID_USAGES).iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ");
        let label_msg = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
        let cases: Vec<(&str, Mutate, Vec<String>)> = vec![
            ("valid", Box::new(|_| {}), vec![]),
            ("request not PEM", Box::new(|o| o["spec"]["request"] = json!(b64("hi"))), vec![
                "spec.request: Invalid value: []byte{0x68, 0x69}: PEM block type must be CERTIFICATE REQUEST".into(),
            ]),
            ("request missing", Box::new(|o| { o["spec"].as_object_mut().unwrap().remove("request"); }), vec![
                "spec.request: Invalid value: []byte(nil): PEM block type must be CERTIFICATE REQUEST".into(),
            ]),
            ("request is a certificate", Box::new(|o| o["spec"]["request"] = json!(b64(CERT_PEM))), vec![
                format!("spec.request: Invalid value: {}: PEM block type must be CERTIFICATE REQUEST", go_bytes(Some(CERT_PEM.as_bytes()))),
            ]),
            ("bad signature", Box::new(|o| o["spec"]["request"] = json!(b64(&tampered_csr()))), vec![
                format!("spec.request: Invalid value: {}: x509: ECDSA verification failure", go_bytes(Some(tampered_csr().as_bytes()))),
            ]),
            ("garbage DER", Box::new(|o| o["spec"]["request"] = json!(b64("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))), vec![
                format!("spec.request: Invalid value: {}: x509: malformed certificate request",
                        go_bytes(Some(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))),
            ]),
            ("text before the block", Box::new(|o| o["spec"]["request"] = json!(b64(&format!("junk\n{CSR_PEM}")))), vec![
                format!("spec.request: Invalid value: {}: {NOT_ALONE}", go_bytes(Some(format!("junk\n{CSR_PEM}").as_bytes()))),
            ]),
            ("a mangled block, then a clean one", Box::new(|o| o["spec"]["request"] = json!(b64(&mangled_then_clean()))), vec![
                format!("spec.request: Invalid value: {}: {NOT_ALONE}", go_bytes(Some(mangled_then_clean().as_bytes()))),
            ]),
            ("two CNs", Box::new(|o| o["spec"]["request"] = json!(b64(TWO_CNS_PEM))), vec![
                format!("spec.request: Invalid value: {}: subject has 2 common names [\"cluster-root-alice\", \"intern-bob\"]; a request may have at most one (Go reads the last)",
                        go_bytes(Some(TWO_CNS_PEM.as_bytes()))),
            ]),
            ("O as T61String", Box::new(|o| o["spec"]["request"] = json!(b64(T61_MASTERS_PEM))), vec![
                format!("spec.request: Invalid value: {}: subject O \"system:masters\" is a T61String; only UTF8String, PrintableString and IA5String are allowed",
                        go_bytes(Some(T61_MASTERS_PEM.as_bytes()))),
            ]),
            ("no usages", Box::new(|o| o["spec"]["usages"] = json!([])), vec!["spec.usages: Required value".into()]),
            ("unknown and duplicate usages", Box::new(|o| o["spec"]["usages"] = json!(["client auth", "bogus", "client auth"])), vec![
                format!("spec.usages[1]: Unsupported value: \"bogus\": supported values: {usages_list}"),
                "spec.usages[2]: Duplicate value: \"client auth\"".into(),
            ]),
            ("no signer", Box::new(|o| o["spec"]["signerName"] = json!("")), vec!["spec.signerName: Required value".into()]),
            ("legacy signer", Box::new(|o| o["spec"]["signerName"] = json!("kubernetes.io/legacy-unknown")), vec![
                "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version".into(),
            ]),
            ("signer without path", Box::new(|o| o["spec"]["signerName"] = json!("example.com")), vec![
                "spec.signerName: Invalid value: \"example.com\": must be a fully qualified domain and path of the form 'example.com/signer-name'".into(),
            ]),
            ("signer single-label domain", Box::new(|o| o["spec"]["signerName"] = json!("example/signer")), vec![
                "spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots".into(),
            ]),
            ("signer bad label", Box::new(|o| o["spec"]["signerName"] = json!("Example.com/signer")), vec![
                format!("spec.signerName: Invalid value: \"Example.com\": validating label \"Example\": {label_msg}"),
            ]),
            ("short expiration", Box::new(|o| o["spec"]["expirationSeconds"] = json!(599)), vec![
                "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)".into(),
            ]),
            ("expiration at minimum", Box::new(|o| o["spec"]["expirationSeconds"] = json!(600)), vec![]),
        ];
        for (name, mutate, want) in cases {
            let mut obj = base();
            mutate(&mut obj);
            assert_eq!(rendered(&CertificateSigningRequestStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn updates_trust_the_stored_request_and_check_everything_else() {
        let s = CertificateSigningRequestStrategy;
        let not_pem = |o: &mut Value| o["spec"]["request"] = json!(b64("hi"));
        let bad_request = "spec.request: Invalid value: []byte{0x68, 0x69}: PEM block type must be CERTIFICATE REQUEST";
        let mut stored_bad = base();
        not_pem(&mut stored_bad);
        type Case = (&'static str, Value, Box<dyn Fn(&mut Value)>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            ("same valid request", base(), Box::new(|_| {}), vec![]),
            // The stored request was checked when it was created; it is not checked again.
            ("same request as stored", stored_bad.clone(), Box::new(|_| {}), vec![]),
            ("a request that differs from the stored one is checked", base(), Box::new(not_pem), vec![bad_request]),
            (
                "other rules still apply",
                base(),
                Box::new(|o| o["spec"]["usages"] = json!([])),
                vec!["spec.usages: Required value"],
            ),
        ];
        for (name, old, mutate, want) in cases {
            let mut new = old.clone();
            mutate(&mut new);
            assert_eq!(rendered(&s.validate_on_update(&new, &old)), want, "{name}");
        }
        assert_eq!(rendered(&s.validate(&stored_bad)), vec![bad_request], "a create checks it");
    }

    #[test]
    fn condition_rules() {
        let cases: Vec<(&str, Vec<Value>, Vec<&str>)> = vec![
            ("approved", vec![cond("Approved", "True")], vec![]),
            ("approved false", vec![cond("Approved", "False")], vec![
                "status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\"",
            ]),
            ("failed unknown", vec![cond("Failed", "Unknown")], vec![
                "status.conditions[0].status: Unsupported value: \"Unknown\": supported values: \"True\"",
            ]),
            ("custom type any status", vec![cond("Custom", "False")], vec![]),
            ("custom type bad status", vec![cond("Custom", "Maybe")], vec![
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
            ]),
            ("empty type and status", vec![cond("", "")], vec![
                "status.conditions[0].type: Required value", "status.conditions[0].status: Required value",
            ]),
            ("approved and denied", vec![cond("Approved", "True"), cond("Denied", "True")], vec![
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
            ]),
            ("duplicate type", vec![cond("Approved", "True"), cond("Approved", "True")], vec![
                "status.conditions[1].type: Duplicate value: \"Approved\"",
            ]),
        ];
        for (name, conds, want) in cases {
            let obj = with_conditions(base(), conds);
            assert_eq!(rendered(&CertificateSigningRequestStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn create_and_update_preparation() {
        let mut obj = with_conditions(base(), vec![cond("Approved", "True")]);
        obj["status"]["certificate"] = json!(b64(CERT_PEM));
        CertificateSigningRequestStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["status"], json!({}), "create clears status");
        assert!(obj["spec"].get("username").is_none(), "create clears the claimed requester");
        assert!(obj["spec"].get("groups").is_none(), "create clears the claimed groups");

        let old = with_conditions(base(), vec![stamped("Approved", "True", EARLIER)]);
        let mut new = base();
        new["spec"]["signerName"] = json!("example.com/other");
        new["metadata"]["labels"] = json!({"a": "b"});
        CertificateSigningRequestStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["spec"], old["spec"], "update keeps spec");
        assert_eq!(new["status"], old["status"], "update keeps status");
        assert_eq!(new["metadata"]["labels"], json!({"a": "b"}), "update changes metadata");
        assert!(CertificateSigningRequestStrategy.validate_update(&new, &old).is_empty(), "nothing left to reject");
    }

    #[test]
    fn timestamp_defaulting() {
        struct Case {
            name: &'static str,
            old: Vec<Value>,
            new: Vec<Value>,
            want: Vec<(&'static str, &'static str)>,
        }
        let cases = vec![
            Case {
                name: "new condition gets now twice",
                old: vec![],
                new: vec![cond("Approved", "True")],
                want: vec![(NOW, NOW)],
            },
            Case {
                name: "same type and status keeps transition",
                old: vec![stamped("Custom", "True", EARLIER)],
                new: vec![cond("Custom", "True")],
                want: vec![(NOW, EARLIER)],
            },
            Case {
                name: "changed status transitions now",
                old: vec![stamped("Custom", "False", EARLIER)],
                new: vec![cond("Custom", "True")],
                want: vec![(NOW, NOW)],
            },
            Case {
                name: "set timestamps are kept",
                old: vec![],
                new: vec![stamped("Custom", "True", EARLIER)],
                want: vec![(EARLIER, EARLIER)],
            },
            Case {
                name: "zero time counts as unset",
                old: vec![],
                new: vec![json!({"type": "Custom", "status": "True", "lastUpdateTime": "0001-01-01T00:00:00Z"})],
                want: vec![(NOW, NOW)],
            },
        ];
        for c in cases {
            let mut new = c.new.clone();
            populate_condition_timestamps(&mut new, &c.old, NOW);
            let got: Vec<(&str, &str)> =
                new.iter().map(|x| (cond_str(x, "lastUpdateTime"), cond_str(x, "lastTransitionTime"))).collect();
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn approval_subresource() {
        let s = CertificateSigningRequestStrategy;
        // Preparation: only conditions change, timestamps defaulted.
        let mut old = base();
        old["status"]["certificate"] = json!(b64(CERT_PEM));
        let mut new = with_conditions(base(), vec![cond("Approved", "True")]);
        new["spec"]["usages"] = json!(["server auth"]);
        new["status"]["certificate"] = json!(b64("junk"));
        prepare_approval(&mut new, &old, NOW);
        assert_eq!(new["spec"], old["spec"], "approval keeps spec");
        assert_eq!(new["status"]["certificate"], old["status"]["certificate"], "approval keeps certificate");
        assert_eq!(new["status"]["conditions"], json!([stamped("Approved", "True", NOW)]), "approval sets conditions");

        let cases: Vec<(&str, Conds, Conds, Vec<&str>)> = vec![
            ("approve", vec![], vec![cond("Approved", "True")], vec![]),
            ("deny", vec![], vec![cond("Denied", "True")], vec![]),
            ("approve a denied request", vec![stamped("Denied", "True", EARLIER)],
             vec![stamped("Denied", "True", EARLIER), cond("Approved", "True")],
             vec!["status.conditions[1].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive"]),
            ("remove approval", vec![stamped("Approved", "True", EARLIER)], vec![],
             vec!["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]),
            ("remove failed", vec![stamped("Failed", "True", EARLIER)], vec![cond("Approved", "True")],
             vec!["status.conditions: Forbidden: updates may not remove a condition of type \"Failed\""]),
            ("approved false", vec![], vec![cond("Approved", "False")],
             vec!["status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\""]),
        ];
        for (name, old_c, new_c, want) in cases {
            let old = with_conditions(base(), old_c);
            let mut new = with_conditions(base(), new_c);
            prepare_approval(&mut new, &old, NOW);
            let mut errs = s.validate(&new);
            errs.extend(s.validate_subresource("approval", &new, &old));
            assert_eq!(rendered(&errs), want, "{name}");
        }
    }

    #[test]
    fn status_subresource() {
        let s = CertificateSigningRequestStrategy;
        let approved = vec![stamped("Approved", "True", EARLIER)];
        let cases: Vec<StatusCase> = vec![
            ("issue", approved.clone(), None, approved.clone(), Some(b64(CERT_PEM)), vec![]),
            ("fail", approved.clone(), None, vec![approved[0].clone(), cond("Failed", "True")], None, vec![]),
            ("reissue", approved.clone(), Some(CERT_PEM), approved.clone(), Some(b64(&format!("{CERT_PEM}{CERT_PEM}"))),
             vec!["status.certificate: Forbidden: updates may not modify existing certificate content"]),
            ("same certificate again", approved.clone(), Some(CERT_PEM), approved.clone(), Some(b64(CERT_PEM)), vec![]),
            ("not PEM", approved.clone(), None, approved.clone(), Some(b64("nope")),
             vec!["status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"]),
            ("wrong block", approved.clone(), None, approved.clone(), Some(b64(CSR_PEM)),
             vec!["status.certificate: Invalid value: \"<certificate data>\": only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\""]),
            ("approve via status", vec![], None, vec![cond("Approved", "True")], None,
             vec!["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]),
            ("failed false", approved.clone(), None, vec![approved[0].clone(), cond("Failed", "False")], None,
             vec!["status.conditions[1].status: Unsupported value: \"False\": supported values: \"True\""]),
        ];
        for (name, old_c, old_cert, new_c, new_cert, want) in cases {
            let mut old = with_conditions(base(), old_c);
            if let Some(c) = old_cert {
                old["status"]["certificate"] = json!(b64(c));
            }
            let mut new = with_conditions(base(), new_c);
            if let Some(c) = new_cert {
                new["status"]["certificate"] = json!(c);
            }
            prepare_status(&mut new, &old, NOW);
            let mut errs = s.validate(&new);
            errs.extend(s.validate_subresource("status", &new, &old));
            assert_eq!(rendered(&errs), want, "{name}");
        }
        // Approved/Denied instances are preserved as stored; other conditions get timestamps.
        let old = with_conditions(base(), approved.clone());
        let mut new = with_conditions(base(), vec![cond("Approved", "True"), cond("Failed", "True")]);
        new["spec"]["signerName"] = json!("example.com/x");
        prepare_status(&mut new, &old, NOW);
        assert_eq!(
            new["status"]["conditions"],
            json!([approved[0].clone(), stamped("Failed", "True", NOW)]),
            "preserved"
        );
        assert_eq!(new["spec"], old["spec"], "status keeps spec");
    }

    #[test]
    fn table_and_fields() {
        let names: Vec<&str> = CertificateSigningRequestStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Age", "SignerName", "Requestor", "RequestedDuration", "Condition"], "csr columns");
        let now = chrono::DateTime::parse_from_rfc3339(NOW).unwrap().with_timezone(&chrono::Utc);
        let cases: Vec<TableCase> = vec![
            ("pending", vec![], false, None, "Pending", "<none>"),
            ("approved issued", vec![cond("Approved", "True")], true, Some(3600), "Approved,Issued", "60m"),
            ("denied", vec![cond("Denied", "True")], false, Some(86400), "Denied", "24h"),
            (
                "approved failed",
                vec![cond("Approved", "True"), cond("Failed", "True")],
                false,
                None,
                "Approved,Failed",
                "<none>",
            ),
            ("pending failed", vec![cond("Failed", "True")], false, None, "Pending,Failed", "<none>"),
        ];
        for (name, conds, issued, secs, want, want_dur) in cases {
            let mut obj = with_conditions(base(), conds);
            if issued {
                obj["status"]["certificate"] = json!(b64(CERT_PEM));
            }
            if let Some(s) = secs {
                obj["spec"]["expirationSeconds"] = json!(s);
            }
            let cells = CertificateSigningRequestStrategy.cells(&obj, now);
            assert_eq!(
                cells,
                vec![
                    json!("10m"),
                    json!("kubernetes.io/kube-apiserver-client-kubelet"),
                    json!("system:bootstrap:abcdef"),
                    json!(want_dur),
                    json!(want),
                ],
                "{name}"
            );
        }
        let mut bare = base();
        bare["spec"]["signerName"] = json!("");
        assert_eq!(CertificateSigningRequestStrategy.cells(&bare, now)[1], json!("<none>"), "no signer");
        let s = CertificateSigningRequestStrategy;
        assert_eq!(
            s.field(&base(), "spec.signerName").as_deref(),
            Some("kubernetes.io/kube-apiserver-client-kubelet"),
            "signerName selectable"
        );
        assert_eq!(s.field(&json!({}), "spec.signerName").as_deref(), Some(""), "supported on probe");
        assert_eq!(s.field(&base(), "spec.username"), None, "username not selectable");
    }

    #[test]
    fn no_panics_on_odd_json() {
        let s = CertificateSigningRequestStrategy;
        let odd = [
            json!(null),
            json!([]),
            json!({"spec": 1, "status": []}),
            json!({"status": {"conditions": [1, "x", null]}}),
        ];
        for o in &odd {
            let mut a = o.clone();
            s.prepare_for_create(&mut a);
            s.prepare_for_update(&mut a, o);
            s.prepare_for_subresource("status", &mut a, o);
            s.prepare_for_subresource("approval", &mut a, o);
            let _ = s.validate(o);
            let _ = s.validate_update(o, o);
            let _ = s.validate_subresource("approval", o, o);
            let _ = s.cells(o, chrono::Utc::now());
        }
    }
}
