//! Pod client certificates (KEP-4317): a client certificate carrying the PodIdentity
//! extension ([`kustos_ca::pod_identity`]) authenticates as the pod's service account, bound
//! to the pod as a pod-bound service-account token is.
//!
//! What enters: a client certificate that verified against the client CA bundle (the
//! [`super::X509Authenticator`] checks chain, validity and client-auth usage first) and its
//! PodIdentity. What leaves: the [`PodClaims`] to check against the stored objects, or why
//! the certificate is refused; after the check ([`PodBindings`]), the user:
//! `system:serviceaccount:<ns>:<sa>` with the service account's UID, in
//! `system:serviceaccounts` and `system:serviceaccounts:<ns>`, with the extras
//! `authentication.kubernetes.io/pod-name`, `pod-uid`, `node-name`, `node-uid` and
//! `credential-id` = `X509SHA256=<hex SHA-256 of the certificate>`.
//!
//! Accepted as the KEP describes: no subjectAltName at all, and every name and UID present
//! (the namespace UID may be empty: PodCertificateRequests do not carry it). The binding is
//! checked on every request, as for pod-bound tokens: the service account and the pod must
//! still exist with the certificate's UIDs (deleted longer than the tokens' leeway ago counts
//! as gone); the node is information, not checked. Only the `kubernetes.io/
//! kube-apiserver-client-pod` signer puts the extension into certificates of the client CA:
//! the CSR signers copy a request's subject and names, never its extensions.

use chrono::{DateTime, Utc};
use kustos_ca::jwt::{BoundClaims, ObjectRef};
use kustos_ca::pod_identity::PodIdentity;
use kustos_ca::CertInfo;

use super::UserInfo;

/// The prefix of a certificate's credential id.
pub const CREDENTIAL_ID_PREFIX: &str = "X509SHA256=";

/// A pod certificate's identity, ready to be checked against the stored objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaims {
    pub identity: PodIdentity,
    /// `X509SHA256=<hex>`.
    pub credential_id: String,
}

/// Checks a pod certificate's binding against the stored objects.
#[async_trait::async_trait]
pub trait PodBindings: Send + Sync {
    /// The user, or why the binding no longer holds.
    async fn pod_user(&self, claims: &PodClaims, now: DateTime<Utc>) -> Result<UserInfo, String>;
}

/// What a presented client certificate proves (the x509 authenticator's answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum X509Outcome {
    Result(super::AuthResult),
    /// A pod certificate: the user once its binding is checked.
    Pod(PodClaims),
}

/// The user of a pod certificate, checked with `bindings` (none: refused).
pub async fn user(bindings: Option<&dyn PodBindings>, claims: &PodClaims) -> Result<UserInfo, String> {
    match bindings {
        Some(b) => b.pod_user(claims, chrono::Utc::now()).await,
        None => Err("x509: pod certificates are not accepted here".into()),
    }
}

/// The claims of a verified certificate with a PodIdentity, or why it is refused.
pub fn claims(identity: PodIdentity, info: &CertInfo, cert_der: &[u8]) -> Result<PodClaims, String> {
    if !(info.dns_names.is_empty()
        && info.ip_addresses.is_empty()
        && info.email_addresses.is_empty()
        && info.uris.is_empty())
    {
        return Err("x509: a certificate with a PodIdentity extension must not carry subjectAltNames".into());
    }
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
        return Err("x509: the PodIdentity extension lacks a name or UID".into());
    }
    Ok(PodClaims {
        identity,
        credential_id: format!("{CREDENTIAL_ID_PREFIX}{}", kustos_ca::pod_identity::sha256_hex(cert_der)),
    })
}

/// The same binding as a pod-bound service-account token's claims (no times, no JTI: the
/// certificate's validity was checked already).
pub fn bound_claims(identity: &PodIdentity) -> BoundClaims {
    BoundClaims {
        namespace: identity.namespace.clone(),
        service_account: ObjectRef::new(&identity.service_account_name, &identity.service_account_uid),
        pod: Some(ObjectRef::new(&identity.pod_name, &identity.pod_uid)),
        node: Some(ObjectRef::new(&identity.node_name, &identity.node_uid)),
        ..Default::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::authn::serviceaccount::{check_bound, Stored};
    use serde_json::json;

    fn identity() -> PodIdentity {
        PodIdentity {
            namespace: "team-a".into(),
            namespace_uid: String::new(),
            service_account_name: "web".into(),
            service_account_uid: "sa-uid".into(),
            pod_name: "web-0".into(),
            pod_uid: "pod-uid".into(),
            node_name: "node-1".into(),
            node_uid: "node-uid".into(),
        }
    }

    fn info() -> CertInfo {
        CertInfo {
            common_name: String::new(),
            organizations: vec![],
            user_uids: vec![],
            issuer_common_name: "ca".into(),
            dns_names: vec![],
            ip_addresses: vec![],
            email_addresses: vec![],
            uris: vec![],
            not_before: Utc::now(),
            not_after: Utc::now(),
            serial: vec![1],
            is_ca: false,
            has_key_usage: true,
            usages: vec![],
            other_extended_key_usages: vec![],
            subject_der: vec![],
            issuer_der: vec![],
            public_key_der: vec![],
            subject_key_id: None,
            authority_key_id: None,
            pod_identity_values: vec![],
        }
    }

    #[test]
    fn claims_refuse_names_and_missing_fields() {
        let ok = claims(identity(), &info(), b"cert").unwrap();
        assert_eq!(ok.credential_id, "X509SHA256=06298432e8066b29e2223bcc23aa9504b56ae508fabf3435508869b9c3190e22");
        assert_eq!(ok.credential_id.len(), CREDENTIAL_ID_PREFIX.len() + 64);
        let with = |f: &dyn Fn(&mut PodIdentity, &mut CertInfo)| {
            let (mut i, mut c) = (identity(), info());
            f(&mut i, &mut c);
            claims(i, &c, b"cert")
        };
        let cases: Vec<(&str, Result<PodClaims, String>)> = vec![
            ("a DNS name", with(&|_, c| c.dns_names = vec!["x".into()])),
            ("a URI", with(&|_, c| c.uris = vec!["spiffe://x".into()])),
            ("an email", with(&|_, c| c.email_addresses = vec!["a@b".into()])),
            ("an IP", with(&|_, c| c.ip_addresses = vec!["127.0.0.1".parse().unwrap()])),
            ("no namespace", with(&|i, _| i.namespace.clear())),
            ("no service account UID", with(&|i, _| i.service_account_uid.clear())),
            ("no pod name", with(&|i, _| i.pod_name.clear())),
            ("no pod UID", with(&|i, _| i.pod_uid.clear())),
            ("no node UID", with(&|i, _| i.node_uid.clear())),
        ];
        for (what, got) in cases {
            assert!(got.is_err(), "{what}");
        }
    }

    #[test]
    fn binding_is_that_of_a_pod_bound_token() {
        let sa = json!({"metadata": {"name": "web", "namespace": "team-a", "uid": "sa-uid"}});
        let pod = json!({"metadata": {"name": "web-0", "namespace": "team-a", "uid": "pod-uid"}});
        let other_pod = json!({"metadata": {"name": "web-0", "namespace": "team-a", "uid": "new-uid"}});
        let other_sa = json!({"metadata": {"name": "web", "namespace": "team-a", "uid": "other"}});
        let claims = bound_claims(&identity());
        let now = Utc::now();
        let user =
            check_bound(&claims, &Stored { service_account: Some(&sa), pod: Some(&pod), ..Default::default() }, now)
                .unwrap();
        assert_eq!(user.name, "system:serviceaccount:team-a:web");
        assert_eq!(user.uid, "sa-uid");
        assert_eq!(user.groups, vec!["system:serviceaccounts", "system:serviceaccounts:team-a"]);
        let extra = |k: &str| user.extra.get(&format!("authentication.kubernetes.io/{k}")).cloned();
        assert_eq!(extra("pod-name"), Some(vec!["web-0".to_string()]));
        assert_eq!(extra("pod-uid"), Some(vec!["pod-uid".to_string()]));
        assert_eq!(extra("node-name"), Some(vec!["node-1".to_string()]));
        assert_eq!(extra("node-uid"), Some(vec!["node-uid".to_string()]));
        assert_eq!(extra("credential-id"), None, "added by the authenticator");
        let refused: Vec<(&str, Stored)> = vec![
            ("pod gone", Stored { service_account: Some(&sa), ..Default::default() }),
            ("pod replaced", Stored { service_account: Some(&sa), pod: Some(&other_pod), ..Default::default() }),
            ("service account gone", Stored { pod: Some(&pod), ..Default::default() }),
            (
                "service account replaced",
                Stored { service_account: Some(&other_sa), pod: Some(&pod), ..Default::default() },
            ),
        ];
        for (what, stored) in refused {
            assert!(check_bound(&claims, &stored, now).is_err(), "{what}");
        }
    }
}
