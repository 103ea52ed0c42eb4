//! The well-known PodCertificateRequest signer `kubernetes.io/kube-apiserver-client-pod`
//! (KEP-4317): client certificates the apiserver reads as the pod's service account, with
//! the pod and its node bound in, as a pod-bound service-account token is.
//!
//! What enters: a request for this signer name, the apiserver's client CA, `now`. What
//! leaves: the request's next status — `Issued` with the leaf alone as `certificateChain`
//! (the CA is the apiserver's client CA, published as `kube-root-ca.crt`); or `Denied`
//! (`InvalidUnverifiedUserAnnotations` for any `spec.unverifiedUserAnnotations`: this signer
//! recognizes none); or `Failed` (the CA cannot issue an hour's certificate).
//!
//! What the apiserver verified at create (NodeRestriction, for nodes: the pod exists on the
//! requesting node, runs as that service account; the stub request's signature) is held once
//! more against the objects before signing, whoever made the request (the caller:
//! [`crate::pod_certificate_requests::check_named`]; else `Denied`, `PodIdentityMismatch`).
//! The certificate carries only those fields: an empty
//! subject, no subjectAltName, the PodIdentity extension ([`kustos_ca::pod_identity`]) with
//! the request's namespace, service account, pod and node names and UIDs (namespace UID
//! empty: the request does not carry it). Key usages: digital signature (+ key encipherment
//! for RSA keys), extended usage client auth. Every key type the API accepts is signed.
//! It begins 4 minutes before `now` (the KEP backdates for clock skew; the apiserver wants
//! `notBefore` within 5 minutes of its clock) and lasts `min(spec.maxExpirationSeconds, 24h)`
//! from then, cut at the CA's end; `beginRefreshAt` is `min(half the lifetime, 12h)` in.
//!
//! The extension is not marked critical (the KEP marks it so): certificate verifiers that do
//! not know it (rustls' webpki, which the apiserver uses, among them) refuse any certificate
//! with an unknown critical extension. A verifier that ignores it sees a certificate with an
//! empty subject, which upstream's x509 authenticator and kustos' refuse to map to a user.

use chrono::{DateTime, Duration, DurationRound as _, Utc};
use k8s_openapi::api::certificates::v1::PodCertificateRequestStatus;
use kustos_ca::pod_certificate::{condition, KeyType};
use kustos_ca::pod_identity::{self, PodIdentity};
use kustos_ca::{Ca, Extension, IssueParams, SubjectKey, Usage};

use crate::csr::to_time;
use crate::pod_certificate_requests::{is_done, requested_key, terminal, Request};

/// The signer name.
pub const SIGNER_NAME: &str = "kubernetes.io/kube-apiserver-client-pod";
/// The longest lifetime `kubernetes.io` signers issue.
pub const MAX_LIFETIME: Duration = Duration::hours(24);
/// The latest `beginRefreshAt`, after `notBefore`.
pub const MAX_REFRESH: Duration = Duration::hours(12);
/// How long before `now` a certificate begins.
pub const BACKDATE: Duration = Duration::minutes(4);
const MIN_LIFETIME: Duration = Duration::hours(1);

/// What to sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub identity: PodIdentity,
    /// SubjectPublicKeyInfo, DER: the stub request's key.
    pub public_key_der: Vec<u8>,
    pub key_type: KeyType,
    /// From `notBefore` to `notAfter`.
    pub lifetime: Duration,
}

/// What to do with one request for this signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Skip(&'static str),
    /// Condition `Denied` with this reason and message.
    Deny(&'static str, String),
    Sign(Box<Plan>),
}

/// Decide for `pcr` (a request for [`SIGNER_NAME`]).
pub fn decide(pcr: &impl Request) -> Decision {
    let s = pcr.view();
    if s.signer_name != SIGNER_NAME {
        return Decision::Skip("another signer's request");
    }
    if is_done(pcr) {
        return Decision::Skip("issued, denied or failed already");
    }
    if let Some(keys) = s.unverified_user_annotations.filter(|a| !a.is_empty()) {
        let keys: Vec<&str> = keys.keys().map(String::as_str).collect();
        return Decision::Deny(
            condition::REASON_INVALID_USER_ANNOTATIONS,
            format!("{SIGNER_NAME} recognizes no unverifiedUserAnnotations; got {}", keys.join(", ")),
        );
    }
    let (public_key_der, key_type) = match requested_key(s.key, s.pod_uid) {
        Ok(k) => k,
        Err(message) => return Decision::Deny("InvalidRequest", message),
    };
    let identity = PodIdentity {
        namespace: pcr.meta().namespace.clone().unwrap_or_default(),
        namespace_uid: String::new(),
        service_account_name: s.service_account_name.into(),
        service_account_uid: s.service_account_uid.into(),
        pod_name: s.pod_name.into(),
        pod_uid: s.pod_uid.into(),
        node_name: s.node_name.into(),
        node_uid: s.node_uid.into(),
    };
    let required = [
        &identity.namespace,
        &identity.service_account_name,
        &identity.service_account_uid,
        &identity.pod_name,
        &identity.pod_uid,
        &identity.node_name,
        &identity.node_uid,
    ];
    if required.iter().any(|f| f.is_empty()) {
        return Decision::Deny(
            "InvalidRequest",
            "the request lacks its namespace, service account, pod or node name or UID".into(),
        );
    }
    let requested = s.max_expiration_seconds.map_or(MAX_LIFETIME, |secs| Duration::seconds(i64::from(secs)));
    Decision::Sign(Box::new(Plan { identity, public_key_der, key_type, lifetime: requested.min(MAX_LIFETIME) }))
}

/// The `Issued` status for `plan`, signed by `ca`, or why it cannot be issued (the `Failed`
/// message).
pub fn issue(ca: &Ca, plan: &Plan, now: DateTime<Utc>) -> Result<PodCertificateRequestStatus, String> {
    // Whole seconds: the certificate's times are, and the status must equal them.
    let now = now.duration_trunc(Duration::seconds(1)).map_err(|e| e.to_string())?;
    let not_before = now - BACKDATE;
    if plan.lifetime < MIN_LIFETIME || ca.not_after() < not_before + MIN_LIFETIME {
        return Err(format!("the signer's CA expires at {}, within an hour", ca.not_after().to_rfc3339()));
    }
    let mut usages = vec![Usage::DigitalSignature, Usage::ClientAuth];
    if matches!(plan.key_type, KeyType::Rsa3072 | KeyType::Rsa4096) {
        usages.push(Usage::KeyEncipherment);
    }
    let issued = ca
        .issue(
            IssueParams {
                usages,
                exact_usages: true,
                validity: plan.lifetime - BACKDATE,
                key: SubjectKey::PublicKey(plan.public_key_der.clone()),
                backdate: Some(BACKDATE),
                extensions: vec![Extension {
                    oid_arcs: pod_identity::OID_ARCS.to_vec(),
                    critical: false,
                    value: plan.identity.to_der(),
                }],
                ..Default::default()
            },
            now,
        )
        .map_err(|e| format!("issuing the certificate: {e}"))?;
    let lifetime = issued.not_after - issued.not_before;
    let refresh = issued.not_before + (lifetime / 2).min(MAX_REFRESH);
    Ok(PodCertificateRequestStatus {
        certificate_chain: Some(issued.cert_pem),
        not_before: Some(to_time(issued.not_before)),
        begin_refresh_at: Some(to_time(refresh)),
        not_after: Some(to_time(issued.not_after)),
        conditions: Some(vec![terminal(condition::ISSUED, "Issued", "issued by the signer", now)]),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "client_pod_tests.rs"]
mod tests;
