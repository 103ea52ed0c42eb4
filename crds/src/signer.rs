//! `Signer` (`kustos.dev/v1alpha1`, cluster-scoped): a signer of your own. CSRs whose
//! `spec.signerName` is the Signer's are signed, once approved (by an admin or by a
//! CertificateApprovalPolicy), from the Signer's own CA, within its rules; its CA
//! certificates are published as a ClusterTrustBundle linked to the signer name.
//!
//! The signer name is `<domain>/<path>` under a domain the admin owns. `kubernetes.io` and
//! `k8s.io` (and their subdomains) are Kubernetes' own: a Signer naming one of them is
//! refused (`Ready` False, reason `InvalidSpec`) and signs nothing.
//!
//! The rules are those of a CertificateApprovalPolicy ([`SignerSpec::rules`]), applied as
//! the signer's: a request that breaks one gets the CSR condition `Failed`
//! (`SignerValidationFailure`) instead of a certificate. Every rule is restrictive by
//! default, as there: a Signer that says nothing about DNS names signs none.
//!
//! ```yaml
//! apiVersion: kustos.dev/v1alpha1
//! kind: Signer
//! metadata: {name: mesh}
//! spec:
//!   signerName: example.com/mesh
//!   usages: [digital signature, key encipherment, client auth, server auth]
//!   maxExpirationSeconds: 86400
//!   uris: true
//!   dnsNames: {patterns: ['[a-z0-9-]+\.svc\.cluster\.local']}
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::certificate_approval_policy::{
    is_domain, CertificateApprovalPolicySpec, DnsNameRules, FieldError, IpAddressRules, SubjectRules,
};

/// The status condition that says whether the Signer signs.
pub const CONDITION_READY: &str = "Ready";
/// Domains a Signer may not claim (nor any subdomain of them).
pub const RESERVED_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io"];
/// The lifetime cap when `maxExpirationSeconds` is absent: one year, as
/// `--cluster-signing-duration`'s default.
pub const DEFAULT_MAX_EXPIRATION_SECONDS: i32 = 365 * 24 * 3600;

/// A signer of your own: its name, its CA, and what it signs.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[kube(
    group = "kustos.dev",
    version = "v1alpha1",
    kind = "Signer",
    plural = "signers",
    singular = "signer",
    category = "kustos",
    doc = "A certificate signer of your own: CSRs for its signerName are signed from its CA, within its rules, once approved.",
    status = "SignerStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "SignerName",
        type_ = "string",
        json_path = ".spec.signerName",
        description = "the signer name CSRs use"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "whether the CA loaded and the spec is valid"
    ),
    printcolumn(name = "Issued", type_ = "integer", json_path = ".status.issued", description = "certificates issued"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct SignerSpec {
    /// The `spec.signerName` of the CSRs this Signer signs: `<domain>/<path>`, under a domain
    /// you own (never `kubernetes.io` or `k8s.io`, nor their subdomains).
    pub signer_name: String,

    /// The Secret (`kubernetes.io/tls`: `tls.crt`, `tls.key`) holding the CA. Absent: the
    /// controller generates a CA into `kube-system/kustos-signer-<metadata.name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_ref: Option<SecretReference>,

    /// The key usages a CSR may ask for (`digital signature`, `client auth`, …): every usage
    /// of a CSR must be in this list. At least one.
    #[schemars(length(min = 1))]
    pub usages: Vec<String>,

    /// The longest lifetime issued, at least 600; a CSR's `expirationSeconds` shortens it.
    /// Absent: one year.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 600))]
    pub max_expiration_seconds: Option<i32>,

    /// Rules on the request's subject (as in a CertificateApprovalPolicy). Absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<SubjectRules>,

    /// Rules on DNS subjectAltNames. Absent: the request may carry no DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_names: Option<DnsNameRules>,

    /// Rules on IP address subjectAltNames. Absent: the request may carry no IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_addresses: Option<IpAddressRules>,

    /// Whether the request may carry email address subjectAltNames. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub email_addresses: bool,

    /// Whether the request may carry URI subjectAltNames (SPIFFE IDs, say). Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub uris: bool,

    /// Sign PodCertificateRequests (`certificates.k8s.io/v1`) for `signerName` too, and how.
    /// Absent: this Signer signs CSRs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_certificates: Option<PodCertificates>,
}

/// How a Signer signs PodCertificateRequests. The certificate's identity comes only from the
/// request's fields the apiserver verified (namespace, service account): a SPIFFE ID
/// `spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccountName>` as its only name (URI
/// subjectAltName, empty subject), key usages `digital signature` (and `key encipherment`
/// for RSA keys), extended key usages `client auth` and `server auth`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodCertificates {
    /// The SPIFFE trust domain: lowercase letters, digits, `.`, `-` and `_`, at most 255.
    #[schemars(length(min = 1, max = 255))]
    pub trust_domain: String,

    /// The longest lifetime issued, at least 3600; a request's `spec.maxExpirationSeconds`
    /// shortens it. Absent: 86400 (a day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 3600))]
    pub max_expiration_seconds: Option<i32>,

    /// The key types signed (`RSA3072`, `RSA4096`, `ECDSAP256`, `ECDSAP384`, `ECDSAP521`,
    /// `ED25519`); a request for another is `Denied` (`UnsupportedKeyType`). Absent or
    /// empty: every type the API accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_types: Vec<String>,
}

/// The pod certificate lifetime cap when `podCertificates.maxExpirationSeconds` is absent.
pub const DEFAULT_POD_CERTIFICATE_MAX_EXPIRATION_SECONDS: i32 = 86400;
/// Key type names `podCertificates.keyTypes` may list.
pub const POD_CERTIFICATE_KEY_TYPES: &[&str] =
    &["RSA3072", "RSA4096", "ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519"];

impl PodCertificates {
    /// The lifetime cap, in seconds.
    pub fn max_expiration_seconds(&self) -> i32 {
        self.max_expiration_seconds.unwrap_or(DEFAULT_POD_CERTIFICATE_MAX_EXPIRATION_SECONDS)
    }

    /// Every problem with this part of the spec (empty: valid).
    pub fn problems(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let td = &self.trust_domain;
        if td.is_empty()
            || td.len() > 255
            || !td.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_'))
        {
            errors.push(FieldError {
                field: "spec.podCertificates.trustDomain".into(),
                message: "must be 1 to 255 of lowercase letters, digits, '.', '-' and '_'".into(),
            });
        }
        if self.max_expiration_seconds.is_some_and(|s| s < 3600) {
            errors.push(FieldError {
                field: "spec.podCertificates.maxExpirationSeconds".into(),
                message: "must be at least 3600 (the shortest lifetime of a pod certificate)".into(),
            });
        }
        for k in &self.key_types {
            if !POD_CERTIFICATE_KEY_TYPES.contains(&k.as_str()) {
                errors.push(FieldError {
                    field: "spec.podCertificates.keyTypes".into(),
                    message: format!("unknown key type {k:?}; one of {}", POD_CERTIFICATE_KEY_TYPES.join(", ")),
                });
            }
        }
        errors
    }
}

/// A Secret, by namespace and name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    pub namespace: String,
    pub name: String,
}

/// What the controller observed and did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignerStatus {
    /// Certificates this Signer issued.
    #[serde(default)]
    pub issued: i64,
    /// CSRs it refused (condition `Failed`): they broke its rules.
    #[serde(default)]
    pub failed: i64,
    /// What it did with PodCertificateRequests, when it signs them (`spec.podCertificates`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_certificates: Option<PodCertificateCounts>,
    /// The SHA-256 fingerprint (hex) of the CA certificate that signs now; after a rotation's
    /// `switch`, the new CA's once the controller signs from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_fingerprint: Option<String>,
    /// The ClusterTrustBundle its CA certificates are published in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_bundle: Option<String>,
    /// The Secret its CA is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretReference>,
    /// The `metadata.generation` the status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether the spec is valid and the CA loaded (the reason and message say
    /// which CA, until when, or what is wrong).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// PodCertificateRequests a Signer answered, by outcome (the request's terminal condition).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodCertificateCounts {
    /// Requests `Issued`: a certificate chain written into their status.
    #[serde(default)]
    pub issued: i64,
    /// Requests `Denied` (a key type the Signer does not sign, an unreadable request).
    #[serde(default)]
    pub denied: i64,
    /// Requests `Failed` (the CA could not issue an hour's certificate).
    #[serde(default)]
    pub failed: i64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Why `name` cannot be a Signer's signer name, if it cannot.
pub fn signer_name_problem(name: &str) -> Option<String> {
    let Some((domain, path)) = name.split_once('/') else {
        return Some(format!("{name:?} is not <domain>/<path>"));
    };
    if path.is_empty() {
        return Some(format!("{name:?} has no path after the domain"));
    }
    if !is_domain(domain) {
        return Some(format!("{domain:?} is not a DNS domain (lowercase labels separated by dots)"));
    }
    if let Some(reserved) = RESERVED_DOMAINS.iter().find(|r| domain == **r || domain.ends_with(&format!(".{r}"))) {
        return Some(format!("the {reserved} domain belongs to Kubernetes; use a domain you own"));
    }
    None
}

impl SignerSpec {
    /// The Signer's rules as a CertificateApprovalPolicy's, so that one check serves both.
    /// A CSR without `expirationSeconds` is allowed: the signer caps the lifetime itself.
    pub fn rules(&self) -> CertificateApprovalPolicySpec {
        CertificateApprovalPolicySpec {
            signer_names: vec![self.signer_name.clone()],
            requesters: None,
            subject: self.subject.clone(),
            dns_names: self.dns_names.clone(),
            ip_addresses: self.ip_addresses.clone(),
            allow_email_addresses: self.email_addresses,
            allow_uris: self.uris,
            usages: Some(self.usages.clone()),
            max_expiration_seconds: None,
            allow_unset_expiration_seconds: true,
            require_node_addresses: false,
        }
    }

    /// The lifetime cap, in seconds.
    pub fn max_expiration_seconds(&self) -> i32 {
        self.max_expiration_seconds.unwrap_or(DEFAULT_MAX_EXPIRATION_SECONDS)
    }

    /// Every problem with the spec (empty: valid).
    pub fn problems(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if let Some(why) = signer_name_problem(&self.signer_name) {
            errors.push(FieldError { field: "spec.signerName".into(), message: why });
        }
        if self.usages.is_empty() {
            errors.push(FieldError { field: "spec.usages".into(), message: "at least one usage is required".into() });
        }
        if self.max_expiration_seconds.is_some_and(|s| s < 600) {
            errors.push(FieldError {
                field: "spec.maxExpirationSeconds".into(),
                message: "must be at least 600 (the shortest lifetime a CSR may ask for)".into(),
            });
        }
        if let Some(r) = &self.ca_secret_ref {
            if r.namespace.is_empty() || r.name.is_empty() {
                errors.push(FieldError {
                    field: "spec.caSecretRef".into(),
                    message: "needs both namespace and name".into(),
                });
            }
        }
        if let Err(errs) = self.rules().compile() {
            errors.extend(errs);
        }
        if let Some(p) = &self.pod_certificates {
            errors.extend(p.problems());
        }
        errors
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn signer_names() {
        // name, problem (a fragment; None: fine)
        let cases: &[(&str, Option<&str>)] = &[
            ("example.com/mesh", None),
            ("signers.example.com/a/b", None),
            ("kubernetes.io/kubelet-serving", Some("the kubernetes.io domain belongs to Kubernetes")),
            ("kubernetes.io/my-own", Some("the kubernetes.io domain belongs to Kubernetes")),
            ("evil.kubernetes.io/x", Some("the kubernetes.io domain belongs to Kubernetes")),
            ("k8s.io/x", Some("the k8s.io domain belongs to Kubernetes")),
            ("notkubernetes.io/x", None),
            ("example.com", Some("is not <domain>/<path>")),
            ("example.com/", Some("has no path")),
            ("Example.com/x", Some("is not a DNS domain")),
            ("/x", Some("is not a DNS domain")),
        ];
        for (name, want) in cases {
            let got = signer_name_problem(name);
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(g)) => assert!(g.contains(w), "{name}: {g:?} should contain {w:?}"),
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    fn spec() -> SignerSpec {
        SignerSpec {
            signer_name: "example.com/mesh".into(),
            usages: vec!["digital signature".into(), "client auth".into()],
            ..Default::default()
        }
    }

    type Mutate = fn(&mut SignerSpec);

    #[test]
    fn spec_problems() {
        let cases: &[(&str, Mutate, &[&str])] = &[
            ("valid", |_| {}, &[]),
            (
                "a Kubernetes signer",
                |s| s.signer_name = "kubernetes.io/kube-apiserver-client".into(),
                &["spec.signerName"],
            ),
            ("no usages", |s| s.usages.clear(), &["spec.usages"]),
            ("too short a cap", |s| s.max_expiration_seconds = Some(60), &["spec.maxExpirationSeconds"]),
            (
                "half a secret reference",
                |s| s.ca_secret_ref = Some(SecretReference { namespace: "ns".into(), name: String::new() }),
                &["spec.caSecretRef"],
            ),
            (
                "a bad DNS pattern (checked as a policy's)",
                |s| s.dns_names = Some(DnsNameRules { patterns: Some(vec!["(".into()]), ..Default::default() }),
                &["spec.dnsNames.patterns[0]"],
            ),
        ];
        for (name, mutate, want) in cases {
            let mut s = spec();
            mutate(&mut s);
            let got: Vec<String> = s.problems().into_iter().map(|e| e.field).collect();
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn rules_carry_the_signers_constraints() {
        let mut s = spec();
        s.uris = true;
        s.max_expiration_seconds = Some(3600);
        let rules = s.rules();
        assert_eq!(rules.signer_names, ["example.com/mesh"]);
        assert_eq!(rules.usages.as_deref(), Some(&s.usages[..]));
        assert!(rules.allow_uris && !rules.allow_email_addresses);
        assert!(rules.allow_unset_expiration_seconds, "the signer caps lifetimes itself");
        assert_eq!(rules.max_expiration_seconds, None);
        assert_eq!(s.max_expiration_seconds(), 3600);
        assert_eq!(spec().max_expiration_seconds(), DEFAULT_MAX_EXPIRATION_SECONDS);
    }

    #[test]
    fn pod_certificates_problems() {
        // (what, podCertificates, the fields with a problem)
        let ok = PodCertificates { trust_domain: "cluster.local".into(), ..Default::default() };
        let cases: Vec<(&str, PodCertificates, Vec<&str>)> = vec![
            ("a trust domain", ok.clone(), vec![]),
            (
                "all of it",
                PodCertificates { max_expiration_seconds: Some(3600), key_types: vec!["ED25519".into()], ..ok.clone() },
                vec![],
            ),
            (
                "no trust domain",
                PodCertificates { trust_domain: String::new(), ..ok.clone() },
                vec!["spec.podCertificates.trustDomain"],
            ),
            (
                "uppercase",
                PodCertificates { trust_domain: "Cluster.local".into(), ..ok.clone() },
                vec!["spec.podCertificates.trustDomain"],
            ),
            (
                "a slash",
                PodCertificates { trust_domain: "a/b".into(), ..ok.clone() },
                vec!["spec.podCertificates.trustDomain"],
            ),
            (
                "too long",
                PodCertificates { trust_domain: "a".repeat(256), ..ok.clone() },
                vec!["spec.podCertificates.trustDomain"],
            ),
            (
                "under an hour",
                PodCertificates { max_expiration_seconds: Some(3599), ..ok.clone() },
                vec!["spec.podCertificates.maxExpirationSeconds"],
            ),
            (
                "an unknown key type",
                PodCertificates { key_types: vec!["RSA2048".into()], ..ok.clone() },
                vec!["spec.podCertificates.keyTypes"],
            ),
        ];
        for (what, p, want) in cases {
            let got: Vec<String> = p.problems().into_iter().map(|e| e.field).collect();
            assert_eq!(got, want, "{what}");
            let spec = SignerSpec { pod_certificates: Some(p), ..spec() };
            assert_eq!(spec.problems().len(), want.len(), "{what}: the Signer's problems carry them");
        }
        assert_eq!(ok.max_expiration_seconds(), 86400);
    }
}
