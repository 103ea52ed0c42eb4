//! What the CertificateSigningRequest controllers (`csrapproving`, `csrsigning`,
//! `csrcleaner`) read from a CSR, as upstream's `pkg/controller/certificates` helpers.

use chrono::{DateTime, Utc};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use kustos_ca::csr::condition::{APPROVED, DENIED};
use kustos_ca::csr::{CertificateRequest, CsrError};

/// When a write lost a race, look again soon (the watch brings the new version too).
pub const AFTER_CONFLICT: std::time::Duration = std::time::Duration::from_millis(100);

pub fn conditions(csr: &CertificateSigningRequest) -> &[CertificateSigningRequestCondition] {
    csr.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default()
}

/// Whether the CSR carries an `Approved` and a `Denied` condition (any status, as
/// upstream's `GetCertApprovalCondition`).
pub fn approval(csr: &CertificateSigningRequest) -> (bool, bool) {
    let has = |t: &str| conditions(csr).iter().any(|c| c.type_ == t);
    (has(APPROVED), has(DENIED))
}

/// Approved and not denied (`IsCertificateRequestApproved`).
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    matches!(approval(csr), (true, false))
}

/// A condition of type `type_` with status `True` (`HasTrueCondition`).
pub fn has_true_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    conditions(csr).iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// `status.certificate`, empty when not issued.
pub fn certificate(csr: &CertificateSigningRequest) -> &[u8] {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).map_or(&[], |c| c.0.as_slice())
}

pub fn usages(csr: &CertificateSigningRequest) -> &[String] {
    csr.spec.usages.as_deref().unwrap_or_default()
}

/// The request read by the one CSR reader ([`kustos_ca::csr::parse_pem`]: a single PEM
/// block, the subject rule, the self-signature checked as upstream's CA does before
/// signing), or why the reader refuses it.
pub fn parse_request(csr: &CertificateSigningRequest) -> Result<CertificateRequest, CsrError> {
    kustos_ca::csr::parse_pem(&csr.spec.request.0)
}

/// The request read by the one CSR reader without checking its self-signature (the
/// apiserver did at create and `spec` is immutable), as upstream's approver reads it.
pub fn read_request(csr: &CertificateSigningRequest) -> Result<CertificateRequest, CsrError> {
    kustos_ca::csr::parse_pem_unverified(&csr.spec.request.0)
}

pub fn creation_time(csr: &CertificateSigningRequest) -> Option<DateTime<Utc>> {
    csr.metadata.creation_timestamp.as_ref().and_then(to_chrono)
}

/// A `metav1.Time` as a chrono time (`None` when out of range).
pub fn to_chrono(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0))
}

/// Put condition `type_` into `conditions` (replacing the one there), its
/// `lastTransitionTime` kept when its status did not change, else `now`.
pub fn set_condition(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    type_: &str,
    (status, reason, message): (&str, &str, String),
    generation: Option<i64>,
    now: DateTime<Utc>,
) {
    let transition = match conditions.iter().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => to_time(now),
    };
    conditions.retain(|c| c.type_ != type_);
    conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: transition,
        observed_generation: generation,
    });
}

/// A chrono time as a `metav1.Time` (whole seconds, as the API serializes it).
pub fn to_time(t: DateTime<Utc>) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(t.timestamp()).unwrap_or_default())
}
