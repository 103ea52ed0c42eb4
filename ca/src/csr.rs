//! Certificate signing requests: the one reader of a request (used by the apiserver's
//! validation and admission, the approvers, the policy approver and the signer alike), the
//! rules of the `kubernetes.io/*` signers, the lifetime of what they issue, and issuing — no
//! I/O, `now` as a parameter.
//!
//! Reading ([`parse_pem`], [`parse_pem_unverified`]) accepts a request only when:
//! - it is exactly one `CERTIFICATE REQUEST` PEM block with nothing but whitespace around it
//!   ([`crate::pem::decode_single`]): no reader can pick another block out of the text;
//! - the DER is one PKCS#10 request, nothing after it, and (for [`parse_pem`]) its
//!   self-signature verifies;
//! - its subject reads as Go's `crypto/x509` reads it ([`crate::name`]) and follows the
//!   subject rule: at most one CN, and every CN, O and OU a UTF8String, PrintableString or
//!   IA5String. So the CN and O values checked here are the user and groups every Go reader
//!   (kube-apiserver's x509 authenticator, `kubectl describe csr`) sees in the request and in
//!   the certificate issued for it.
//!
//! Every read goes through [`memo`]: a process-wide memo keyed by the SHA-256 of the bytes
//! read, so the readers of one request (admission, validation, the approvers, the signer)
//! share one parse and one self-signature check. A memoised answer is the answer a fresh
//! read gives.
//!
//! [`sign`] builds the issued certificate's subject from those CN and O values alone (the
//! request's other subject attributes are not copied).
//!
//! Lifetime, as kube-controller-manager's signers: the requested `expirationSeconds` capped
//! by the signer's maximum (`--cluster-signing-duration`), at least 10 minutes; NotBefore is
//! backdated by five minutes, NotAfter is `now + duration` (also backdated five minutes when
//! the duration is at least 8 hours), never past the CA's NotAfter. Extensions come only from
//! the CSR's `spec.usages`; issued certificates are never CAs.

use std::net::IpAddr;

use chrono::{DateTime, Duration, Utc};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer as _;

use crate::der;
use crate::name::{StringType, OID_COMMON_NAME, OID_ORGANIZATION, OID_ORGANIZATIONAL_UNIT};
use crate::{Ca, Error, IssueParams, Issued, Result, SubjectKey, Usage, BACKDATE};

pub mod memo;
pub use memo::{counters, Counts};

/// The smallest certificate lifetime a signer issues.
pub const MIN_DURATION: Duration = Duration::minutes(10);
/// Lifetimes from this long are backdated at both ends.
pub const SHORT: Duration = Duration::hours(8);

/// The condition types of a CertificateSigningRequest (`status.conditions[].type`), and the
/// reasons kustos' controllers write, as upstream's: every reader and writer (the apiserver's
/// strategy and printer, the approvers, the signer, the cleaner) uses these.
pub mod condition {
    /// Approved by an approver (`/approval`); with [`DENIED`] the request is denied.
    pub const APPROVED: &str = "Approved";
    pub const DENIED: &str = "Denied";
    /// The signer will not issue (`/status`).
    pub const FAILED: &str = "Failed";
    /// The three built-in types, each allowed at most once, only with status `True`.
    pub const BUILT_IN: [&str; 3] = [APPROVED, DENIED, FAILED];

    /// Reason of the Approved condition the approvers write.
    pub const REASON_AUTO_APPROVED: &str = "AutoApproved";
    /// Reason of the Denied condition the policy approver writes.
    pub const REASON_AUTO_DENIED: &str = "AutoDenied";
    /// Reason of the Failed condition the signer writes when a signer rule refuses the request
    /// (the message is the rule's, from [`super::validate`]).
    pub const REASON_SIGNER_VALIDATION_FAILURE: &str = "SignerValidationFailure";
}

/// The message for a request that is not a `CERTIFICATE REQUEST` PEM block (upstream's).
pub const PEM_TYPE_MESSAGE: &str = "PEM block type must be CERTIFICATE REQUEST";

/// Why a certificate signing request is refused. `Display` is the message alone, worded as
/// upstream's validation words it where upstream refuses too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    /// Not a `CERTIFICATE REQUEST` PEM block, or not exactly one block with nothing but
    /// whitespace around it.
    #[error("{0}")]
    Pem(String),
    /// The DER is not a PKCS#10 request (or has data after it).
    #[error("{0}")]
    Malformed(String),
    /// The self-signature does not verify.
    #[error("{0}")]
    Signature(String),
    /// The subject breaks the subject rule, or does not read as Go reads it.
    #[error("{0}")]
    Subject(#[from] SubjectError),
}

/// Why a subject is refused: it does not read as Go reads it, or it breaks the subject rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    #[error("{0}")]
    Name(#[from] crate::name::NameError),
    #[error("subject has {} common names {values:?}; a request may have at most one (Go reads the last)", values.len())]
    CommonNames { values: Vec<String> },
    #[error(
        "subject {attribute} {value:?} is a {string_type}; only UTF8String, PrintableString and IA5String are allowed"
    )]
    StringType { attribute: String, value: String, string_type: &'static str },
}

/// A parsed PKCS#10 request whose subject follows the subject rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRequest {
    /// The subject's only CN (empty when it has none).
    pub common_name: String,
    /// The subject's O values, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub email_addresses: Vec<String>,
    pub uris: Vec<String>,
    /// SubjectPublicKeyInfo, DER.
    pub public_key_der: Vec<u8>,
}

/// Read a request (`spec.request`): one `CERTIFICATE REQUEST` PEM block, its self-signature
/// checked, its subject following the subject rule.
pub fn parse_pem(pem: &[u8]) -> Result<CertificateRequest, CsrError> {
    memo::read(memo::Form::Pem, pem, true)
}

/// Like [`parse_pem`] without checking the self-signature, for readers of requests whose
/// signature was checked when they were accepted (a stored CSR's `spec.request` is
/// validated at create and immutable), as upstream's `ParseCSR`. Every other rule applies.
pub fn parse_pem_unverified(pem: &[u8]) -> Result<CertificateRequest, CsrError> {
    memo::read(memo::Form::Pem, pem, false)
}

fn request_der(pem: &[u8]) -> Result<Vec<u8>, CsrError> {
    match crate::pem::decode_single(pem) {
        Ok(block) if block.type_ == "CERTIFICATE REQUEST" => Ok(block.bytes),
        Ok(_) | Err(crate::pem::SingleError::NoBlock) => Err(CsrError::Pem(PEM_TYPE_MESSAGE.into())),
        Err(crate::pem::SingleError::NotAlone) => Err(CsrError::Pem(
            "the request must be exactly one CERTIFICATE REQUEST PEM block with nothing but whitespace around it"
                .into(),
        )),
    }
}

/// Parse a DER PKCS#10 request and check its self-signature.
pub fn parse_der(der: &[u8]) -> Result<CertificateRequest, CsrError> {
    memo::read(memo::Form::Der, der, true)
}

/// The subject rule, on a subject read as Go reads it: at most one CN; CN, O and OU only as
/// UTF8String, PrintableString or IA5String.
pub fn check_subject(subject: &crate::name::Name) -> Result<(), SubjectError> {
    let cns = subject.common_names();
    if cns.len() > 1 {
        return Err(SubjectError::CommonNames { values: cns.iter().map(|a| a.value.clone()).collect() });
    }
    for a in &subject.attributes {
        let checked = [&OID_COMMON_NAME[..], &OID_ORGANIZATION, &OID_ORGANIZATIONAL_UNIT];
        if checked.contains(&a.oid.as_slice())
            && !matches!(a.string_type, StringType::Utf8 | StringType::Printable | StringType::Ia5)
        {
            return Err(SubjectError::StringType {
                attribute: a.short_name(),
                value: a.value.clone(),
                string_type: a.string_type.name(),
            });
        }
    }
    Ok(())
}

/// What one read of a request found: the request under every rule but the self-signature,
/// and the self-signature's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read {
    /// The answer of an unverified read.
    request: Result<CertificateRequest, CsrError>,
    /// `Some(Err)` when the self-signature does not verify; `Some(Ok)` when it does, or when
    /// the request was refused before the signature is looked at (PEM, DER, subject syntax);
    /// `None` when it was not checked.
    signature: Option<Result<(), CsrError>>,
}

impl Read {
    /// The answer of a read with (`verify`) or without the self-signature check: the first
    /// rule the request breaks, in the order PEM, DER, subject syntax, signature, subject
    /// rule, requested extensions. `None` when `verify` asks for a check this read did not do.
    fn answer(&self, verify: bool) -> Option<Result<CertificateRequest, CsrError>> {
        if verify {
            if let Err(e) = self.signature.as_ref()? {
                return Some(Err(e.clone()));
            }
        }
        Some(self.request.clone())
    }

    /// Heap bytes this read holds, roughly: what a memo charges for keeping it.
    fn weight(&self) -> usize {
        const ITEM: usize = 32;
        let error = |e: &CsrError| match e {
            CsrError::Subject(SubjectError::CommonNames { values }) => {
                values.iter().map(|v| v.len() + ITEM).sum::<usize>() + ITEM
            }
            CsrError::Subject(SubjectError::StringType { attribute, value, .. }) => {
                attribute.len() + value.len() + ITEM
            }
            CsrError::Subject(SubjectError::Name(n)) => n.to_string().len() + ITEM,
            CsrError::Pem(m) | CsrError::Malformed(m) | CsrError::Signature(m) => m.len() + ITEM,
        };
        let request = match &self.request {
            Ok(r) => {
                let strings = [&r.organizations, &r.dns_names, &r.email_addresses, &r.uris];
                r.common_name.len()
                    + r.public_key_der.len()
                    + strings.iter().flat_map(|v| v.iter()).map(|s| s.len() + ITEM).sum::<usize>()
                    + r.ip_addresses.len() * ITEM
            }
            Err(e) => error(e),
        };
        let signature = match &self.signature {
            Some(Err(e)) => error(e),
            _ => 0,
        };
        std::mem::size_of::<Self>() + request + signature
    }
}

/// Read `input` (`form`): every rule, the self-signature checked when `verify`.
fn read(form: memo::Form, input: &[u8], verify: bool, counters: &memo::Counters) -> Read {
    let der;
    let der = match form {
        memo::Form::Der => input,
        memo::Form::Pem => match request_der(input) {
            Ok(d) => {
                der = d;
                &der
            }
            Err(e) => return Read { request: Err(e), signature: Some(Ok(())) },
        },
    };
    read_der(der, verify, counters)
}

fn read_der(der: &[u8], verify: bool, counters: &memo::Counters) -> Read {
    counters.parses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let refused = |e: CsrError| Read { request: Err(e), signature: Some(Ok(())) };
    let Ok((rest, csr)) = X509CertificationRequest::from_der(der) else {
        return refused(CsrError::Malformed("x509: malformed certificate request".into()));
    };
    if !rest.is_empty() {
        return refused(CsrError::Malformed("asn1: syntax error: trailing data".into()));
    }
    let info = &csr.certification_request_info;
    let subject = match crate::name::parse(info.subject.as_raw()) {
        Ok(s) => s,
        Err(e) => return refused(SubjectError::from(e).into()),
    };
    let signature = verify.then(|| {
        counters.signature_checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // ring's verifiers, then for what ring lacks (P-521 keys, ECDSA digests other than
        // the curve's own) the Go-like one the stub requests of pod certificates use.
        let go_like = || {
            crate::pod_certificate::parse_pkix(info.subject_pki.raw)
                .is_ok_and(|key| crate::pod_certificate::request_signature_verifies(&csr, &key))
        };
        csr.verify_signature().or_else(|e| if go_like() { Ok(()) } else { Err(e) }).map_err(|_| {
            // Go's CheckSignature wording per key algorithm.
            CsrError::Signature(
                match info.subject_pki.algorithm.algorithm.to_id_string().as_str() {
                    "1.2.840.113549.1.1.1" => "crypto/rsa: verification error",
                    "1.2.840.10045.2.1" => "x509: ECDSA verification failure",
                    "1.3.101.112" => "x509: Ed25519 verification failure",
                    _ => "x509: cannot verify signature: algorithm unimplemented",
                }
                .into(),
            )
        })
    });
    Read { request: request(&csr, &subject), signature }
}

/// The rules after the signature, and the request they leave.
fn request(csr: &X509CertificationRequest<'_>, subject: &crate::name::Name) -> Result<CertificateRequest, CsrError> {
    let info = &csr.certification_request_info;
    check_subject(subject)?;
    check_extension_requests(info.raw)?;
    let mut req = CertificateRequest {
        common_name: subject.common_name().to_string(),
        organizations: subject.organizations(),
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        email_addresses: Vec::new(),
        uris: Vec::new(),
        public_key_der: info.subject_pki.raw.to_vec(),
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else { continue };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(d) => req.dns_names.push((*d).to_string()),
                GeneralName::RFC822Name(e) => req.email_addresses.push((*e).to_string()),
                GeneralName::URI(u) => req.uris.push((*u).to_string()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => req.ip_addresses.push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default())),
                    16 => req.ip_addresses.push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default())),
                    _ => return Err(CsrError::Malformed("x509: invalid IP address in subjectAltName".into())),
                },
                _ => {}
            }
        }
    }
    Ok(req)
}

/// PKCS#9 extensionRequest (1.2.840.113549.1.9.14), DER contents of its OID.
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];

/// The requested extensions must read the same in Go and here. Go gathers the extensions of
/// every extensionRequest attribute (the first value of each) and refuses a request that
/// names one extension twice; x509-parser reads only the first attribute. So: at most one
/// extensionRequest attribute, holding exactly one value, with no extension named twice —
/// otherwise two readers could see different SANs (and `kubectl describe csr` show names
/// other than those signed).
fn check_extension_requests(info_der: &[u8]) -> Result<(), CsrError> {
    let malformed = |what: &str| CsrError::Malformed(format!("x509: certificate request {what}"));
    let bad = |_| malformed("is malformed");
    let (info, _) = der::read_tlv(info_der).map_err(bad)?;
    let fields = der::children(info.content).map_err(bad)?;
    // version, subject, subjectPKInfo, [0] attributes
    let Some(attributes) = fields.get(3).filter(|f| f.tag == der::TAG_CONTEXT_0) else { return Ok(()) };
    let mut requests = 0;
    for attribute in der::children(attributes.content).map_err(bad)? {
        let parts = der::children(attribute.content).map_err(bad)?;
        let [oid, values] = parts.as_slice() else { return Err(malformed("has a malformed attribute")) };
        if oid.tag != der::TAG_OID || oid.content != OID_EXTENSION_REQUEST {
            continue;
        }
        requests += 1;
        if requests > 1 {
            return Err(malformed("has more than one extensionRequest attribute"));
        }
        let values = der::children(values.content).map_err(bad)?;
        let [extensions] = values.as_slice() else {
            return Err(malformed("extensionRequest attribute must hold exactly one value"));
        };
        let mut seen: Vec<&[u8]> = Vec::new();
        for extension in der::children(extensions.content).map_err(bad)? {
            let ext = der::children(extension.content).map_err(bad)?;
            let id = ext.first().filter(|t| t.tag == der::TAG_OID).ok_or_else(|| malformed("is malformed"))?;
            if seen.contains(&id.content) {
                return Err(malformed("contains duplicate requested extensions"));
            }
            seen.push(id.content);
        }
    }
    Ok(())
}

/// The signers kube-controller-manager implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    KubeApiserverClient,
    KubeletClient,
    KubeletServing,
    LegacyUnknown,
}

impl Signer {
    pub const ALL: [Signer; 4] =
        [Signer::KubeApiserverClient, Signer::KubeletClient, Signer::KubeletServing, Signer::LegacyUnknown];

    pub fn name(self) -> &'static str {
        match self {
            Signer::KubeApiserverClient => "kubernetes.io/kube-apiserver-client",
            Signer::KubeletClient => "kubernetes.io/kube-apiserver-client-kubelet",
            Signer::KubeletServing => "kubernetes.io/kubelet-serving",
            Signer::LegacyUnknown => "kubernetes.io/legacy-unknown",
        }
    }

    pub fn from_name(name: &str) -> Option<Signer> {
        Signer::ALL.into_iter().find(|s| s.name() == name)
    }
}

use crate::users::{NODES_GROUP, NODE_USER_PREFIX as NODE_PREFIX};

fn usage_set(usages: &[String]) -> Vec<&str> {
    let mut v: Vec<&str> = usages.iter().map(String::as_str).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn exactly_one_of(usages: &[String], options: [&[&str]; 2]) -> bool {
    let have = usage_set(usages);
    options.iter().any(|want| {
        let mut w = want.to_vec();
        w.sort_unstable();
        w == have
    })
}

/// Why a `kubernetes.io/*` signer refuses a request: upstream's reason, the message of a
/// SignerValidationFailure condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignerRuleError {
    #[error("subject organization is not {NODES_GROUP}")]
    NotNodesOrganization,
    /// `kind` is `DNS`, `Email`, `IP` or `URI`.
    #[error("{kind} subjectAltNames are not allowed")]
    SanNotAllowed { kind: &'static str },
    #[error("DNS or IP subjectAltName is required")]
    SanRequired,
    #[error("subject common name does not begin with {NODE_PREFIX}")]
    NotNodeCommonName,
    /// `expected` is upstream's rendering of the usage set, e.g. `[client auth digital signature]`.
    #[error("usages did not match {expected}")]
    Usages { expected: &'static str },
    #[error("invalid usage for client certificate: {usage}")]
    ClientUsage { usage: String },
    #[error("missing required usage for client certificate: client auth")]
    NoClientAuth,
    #[error("the legacy-unknown signer does not issue certificates through certificates.k8s.io/v1")]
    LegacyUnknown,
}

/// Whether `signer` may issue for this request and these `spec.usages`; Err carries
/// upstream's reason.
pub fn validate(
    signer: Signer,
    req: &CertificateRequest,
    usages: &[String],
) -> std::result::Result<(), SignerRuleError> {
    use SignerRuleError as E;
    match signer {
        Signer::KubeletClient => {
            if req.organizations != [NODES_GROUP] {
                return Err(E::NotNodesOrganization);
            }
            if !req.dns_names.is_empty() {
                return Err(E::SanNotAllowed { kind: "DNS" });
            }
            if !req.email_addresses.is_empty() {
                return Err(E::SanNotAllowed { kind: "Email" });
            }
            if !req.ip_addresses.is_empty() {
                return Err(E::SanNotAllowed { kind: "IP" });
            }
            if !req.uris.is_empty() {
                return Err(E::SanNotAllowed { kind: "URI" });
            }
            if !req.common_name.starts_with(NODE_PREFIX) {
                return Err(E::NotNodeCommonName);
            }
            if !exactly_one_of(
                usages,
                [&["digital signature", "key encipherment", "client auth"], &["digital signature", "client auth"]],
            ) {
                return Err(E::Usages { expected: "[client auth digital signature key encipherment]" });
            }
            Ok(())
        }
        Signer::KubeletServing => {
            if req.organizations != [NODES_GROUP] {
                return Err(E::NotNodesOrganization);
            }
            if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
                return Err(E::SanRequired);
            }
            if !req.email_addresses.is_empty() {
                return Err(E::SanNotAllowed { kind: "Email" });
            }
            if !req.uris.is_empty() {
                return Err(E::SanNotAllowed { kind: "URI" });
            }
            if !exactly_one_of(
                usages,
                [&["digital signature", "key encipherment", "server auth"], &["digital signature", "server auth"]],
            ) {
                return Err(E::Usages { expected: "[digital signature key encipherment server auth]" });
            }
            if !req.common_name.starts_with(NODE_PREFIX) {
                return Err(E::NotNodeCommonName);
            }
            Ok(())
        }
        Signer::KubeApiserverClient => {
            for u in usages {
                if !matches!(u.as_str(), "digital signature" | "key encipherment" | "client auth") {
                    return Err(E::ClientUsage { usage: u.clone() });
                }
            }
            if !usages.iter().any(|u| u == "client auth") {
                return Err(E::NoClientAuth);
            }
            Ok(())
        }
        Signer::LegacyUnknown => Err(E::LegacyUnknown),
    }
}

/// The lifetime of the certificate: `expiration_seconds` (when set) capped by `max`, at
/// least [`MIN_DURATION`].
pub fn duration(expiration_seconds: Option<i64>, max: Duration) -> Duration {
    let requested = expiration_seconds.map(Duration::seconds).unwrap_or(max);
    requested.min(max).max(MIN_DURATION)
}

/// Issue the certificate for an approved, validated request: a subject of the request's O
/// values then its CN (built afresh, all UTF8String: nothing else of the request's subject is
/// copied), the request's SANs, key usages and extended key usages exactly `usages`, CA:false, a random serial,
/// NotBefore = now − 5 min, NotAfter = now + duration (− 5 min when duration ≥ 8 h), capped
/// at the CA's NotAfter.
pub fn sign(
    ca: &Ca,
    req: &CertificateRequest,
    usages: &[String],
    duration: Duration,
    now: DateTime<Utc>,
) -> Result<Issued> {
    let mut parsed = Vec::new();
    for u in usages {
        parsed.push(Usage::from_k8s(u).ok_or_else(|| Error::InvalidParams(format!("unknown usage {u:?}")))?);
    }
    let validity = if duration >= SHORT { duration - BACKDATE } else { duration };
    ca.issue(
        IssueParams {
            common_name: req.common_name.clone(),
            organizations: req.organizations.clone(),
            dns_names: req.dns_names.clone(),
            ip_addresses: req.ip_addresses.clone(),
            email_addresses: req.email_addresses.clone(),
            uris: req.uris.clone(),
            usages: parsed,
            exact_usages: true,
            validity,
            key: SubjectKey::PublicKey(req.public_key_der.clone()),
            ..Default::default()
        },
        now,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::der;
    use chrono::TimeZone as _;

    /// A CSR made with rcgen: CN, O list, SANs.
    fn csr(cn: &str, orgs: &[&str], dns: &[&str], ips: &[&str], emails: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if !cn.is_empty() {
            params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        for o in orgs {
            params.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        for d in dns {
            params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().unwrap()));
        }
        for ip in ips {
            params.subject_alt_names.push(rcgen::SanType::IpAddress(ip.parse().unwrap()));
        }
        for e in emails {
            params.subject_alt_names.push(rcgen::SanType::Rfc822Name((*e).try_into().unwrap()));
        }
        params.serialize_request(&key).unwrap().pem().unwrap().into_bytes()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// A CSR for `subject` (a DER Name, as given) signed by a new P-256 key, PEM.
    pub(crate) fn csr_with_subject(subject: &[u8]) -> String {
        csr_with(subject, &[])
    }

    /// A signed request with this subject and these attributes (each a DER Attribute).
    fn csr_with(subject: &[u8], attributes: &[&[u8]]) -> String {
        use rcgen::{PublicKeyData as _, SigningKey as _};
        let key = rcgen::KeyPair::generate().unwrap();
        let info = der::constructed(
            der::TAG_SEQUENCE,
            &[
                &der::tlv(der::TAG_INTEGER, &[0]),
                subject,
                &key.subject_public_key_info(),
                &der::constructed(der::TAG_CONTEXT_0, attributes),
            ],
        );
        let alg = der::constructed(der::TAG_SEQUENCE, &[&der::oid(&[1, 2, 840, 10045, 4, 3, 2])]);
        let sig = [&[0u8][..], &key.sign(&info).unwrap()].concat();
        let csr = der::constructed(der::TAG_SEQUENCE, &[&info, &alg, &der::tlv(der::TAG_BIT_STRING, &sig)]);
        crate::pem_encode("CERTIFICATE REQUEST", &csr)
    }

    /// A Name of one single-valued RDN per `(arcs, tag, value)`.
    fn subject(atvs: &[(&[u64], u8, &[u8])]) -> Vec<u8> {
        let rdns: Vec<Vec<u8>> = atvs
            .iter()
            .map(|(arcs, tag, value)| {
                der::tlv(der::TAG_SET, &der::constructed(der::TAG_SEQUENCE, &[&der::oid(arcs), &der::tlv(*tag, value)]))
            })
            .collect();
        let parts: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
        der::constructed(der::TAG_SEQUENCE, &parts)
    }

    fn der_of(pem: &str) -> Vec<u8> {
        crate::pem::decode_single(pem.as_bytes()).unwrap().bytes
    }

    /// An extensionRequest attribute whose SET holds `values`, each a list of extensions.
    fn extension_request(values: &[Vec<Vec<u8>>]) -> Vec<u8> {
        let values: Vec<Vec<u8>> = values
            .iter()
            .map(|exts| der::constructed(der::TAG_SEQUENCE, &exts.iter().map(Vec::as_slice).collect::<Vec<_>>()))
            .collect();
        let set = der::constructed(der::TAG_SET, &values.iter().map(Vec::as_slice).collect::<Vec<_>>());
        der::constructed(der::TAG_SEQUENCE, &[&der::oid(&[1, 2, 840, 113549, 1, 9, 14]), &set])
    }

    /// A subjectAltName extension with these DNS names.
    fn san(dns: &[&str]) -> Vec<u8> {
        let names: Vec<Vec<u8>> = dns.iter().map(|d| der::tlv(0x82, d.as_bytes())).collect();
        let general_names = der::constructed(der::TAG_SEQUENCE, &names.iter().map(Vec::as_slice).collect::<Vec<_>>());
        der::constructed(
            der::TAG_SEQUENCE,
            &[&der::oid(&[2, 5, 29, 17]), &der::tlv(der::TAG_OCTET_STRING, &general_names)],
        )
    }

    #[test]
    fn extension_requests_read_as_go_reads_them() {
        let node = subject(&[(&[2, 5, 4, 10], 0x0c, b"system:nodes"), (&[2, 5, 4, 3], 0x0c, b"system:node:n1")]);
        let key_usage = der::constructed(
            der::TAG_SEQUENCE,
            &[&der::oid(&[2, 5, 29, 15]), &der::tlv(der::TAG_OCTET_STRING, &[0x03, 0x02, 0x05, 0xa0])],
        );
        let cases: Vec<(&str, Vec<Vec<u8>>, std::result::Result<Vec<&str>, &str>)> = vec![
            ("no attributes", vec![], Ok(vec![])),
            ("one SAN", vec![extension_request(&[vec![san(&["n1.example"])]])], Ok(vec!["n1.example"])),
            (
                "SAN and key usage",
                vec![extension_request(&[vec![key_usage.clone(), san(&["n1.example"])]])],
                Ok(vec!["n1.example"]),
            ),
            (
                "two SAN extensions: Go refuses the request",
                vec![extension_request(&[vec![san(&["n1.example"]), san(&["victim.example"])]])],
                Err("duplicate requested extensions"),
            ),
            (
                "a second extensionRequest attribute, which x509-parser would not read",
                vec![
                    extension_request(&[vec![key_usage.clone()]]),
                    extension_request(&[vec![san(&["victim.example"])]]),
                ],
                Err("more than one extensionRequest attribute"),
            ),
            (
                "two values in one extensionRequest attribute",
                vec![extension_request(&[vec![san(&["n1.example"])], vec![san(&["victim.example"])]])],
                Err("exactly one value"),
            ),
        ];
        for (what, attributes, want) in cases {
            let attributes: Vec<&[u8]> = attributes.iter().map(Vec::as_slice).collect();
            let pem = csr_with(&node, &attributes);
            match (parse_pem(pem.as_bytes()), want) {
                (Ok(req), Ok(dns)) => assert_eq!(req.dns_names, s(&dns), "{what}"),
                (Err(e), Err(w)) => {
                    assert!(matches!(e, CsrError::Malformed(_)), "{what}: {e:?}");
                    assert!(e.to_string().contains(w), "{what}: {e}");
                }
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn parsing_and_bad_input() {
        let pem = csr("system:node:n1", &["system:nodes"], &["n1.example"], &["10.0.0.1"], &[]);
        let r = parse_pem(&pem).unwrap();
        assert_eq!(r.common_name, "system:node:n1");
        assert_eq!(r.organizations, s(&["system:nodes"]));
        assert_eq!(r.dns_names, s(&["n1.example"]));
        assert_eq!(r.ip_addresses, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
        let text = String::from_utf8(pem.clone()).unwrap();
        let mangled = text.replace("-----END CERTIFICATE REQUEST-----", "-----END CERTIFICATE-----");
        let other = String::from_utf8(csr("system:node:other", &["system:nodes"], &[], &[], &[])).unwrap();
        let cert = crate::Ca::generate("x", Duration::days(1), Utc::now()).unwrap();
        let not_alone =
            "the request must be exactly one CERTIFICATE REQUEST PEM block with nothing but whitespace around it";
        let cases: Vec<(&str, Vec<u8>, std::result::Result<&str, CsrError>)> = vec![
            ("the request", pem.clone(), Ok("system:node:n1")),
            ("whitespace around", format!("\n\n{text}\n \t\n").into_bytes(), Ok("system:node:n1")),
            ("empty", vec![], Err(CsrError::Pem(PEM_TYPE_MESSAGE.into()))),
            ("garbage", b"garbage".to_vec(), Err(CsrError::Pem(PEM_TYPE_MESSAGE.into()))),
            ("a certificate", cert.cert_pem().as_bytes().to_vec(), Err(CsrError::Pem(PEM_TYPE_MESSAGE.into()))),
            ("text before", format!("hello\n{text}").into_bytes(), Err(CsrError::Pem(not_alone.into()))),
            ("two requests", format!("{text}{other}").into_bytes(), Err(CsrError::Pem(not_alone.into()))),
            (
                "a mangled block, then a clean one",
                format!("{mangled}{other}").into_bytes(),
                Err(CsrError::Pem(not_alone.into())),
            ),
            (
                "not DER",
                b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n".to_vec(),
                Err(CsrError::Malformed("x509: malformed certificate request".into())),
            ),
            (
                "trailing data",
                crate::pem_encode("CERTIFICATE REQUEST", &[der_of(&text), vec![0, 0]].concat()).into_bytes(),
                Err(CsrError::Malformed("asn1: syntax error: trailing data".into())),
            ),
        ];
        for (what, input, want) in cases {
            for parse in [parse_pem, parse_pem_unverified] {
                assert_eq!(parse(&input).map(|r| r.common_name).as_deref().map_err(Clone::clone), want, "{what}");
            }
        }
        // A tampered request fails its self-signature; only the verifying parse notices.
        let mut der = der_of(&text);
        let last = der.len() - 1;
        der[last] ^= 0x01;
        assert_eq!(parse_der(&der), Err(CsrError::Signature("x509: ECDSA verification failure".into())));
        let tampered = crate::pem_encode("CERTIFICATE REQUEST", &der);
        assert!(parse_pem(tampered.as_bytes()).is_err());
        assert_eq!(parse_pem_unverified(tampered.as_bytes()).unwrap(), r, "the unverified parse reads the same");
    }

    #[test]
    fn the_subject_rule() {
        const CN: &[u64] = &[2, 5, 4, 3];
        const O: &[u64] = &[2, 5, 4, 10];
        const OU: &[u64] = &[2, 5, 4, 11];
        const C: &[u64] = &[2, 5, 4, 6];
        let (utf8, printable, ia5, t61, bmp, numeric, universal) = (0x0c, 0x13, 0x16, 0x14, 0x1e, 0x12, 0x1c);
        type Case<'a> =
            (&'a str, Vec<(&'a [u64], u8, &'a [u8])>, std::result::Result<(&'a str, Vec<&'a str>), &'a str>);
        let cases: Vec<Case> = vec![
            (
                "UTF8 CN and O",
                vec![(O, utf8, b"system:nodes"), (CN, utf8, b"system:node:n1")],
                Ok(("system:node:n1", vec!["system:nodes"])),
            ),
            (
                "Printable and IA5",
                vec![(O, printable, b"devs"), (OU, ia5, b"team"), (CN, ia5, b"jane")],
                Ok(("jane", vec!["devs"])),
            ),
            ("no subject", vec![], Ok(("", vec![]))),
            ("two O", vec![(O, utf8, b"a"), (O, printable, b"b"), (CN, utf8, b"x")], Ok(("x", vec!["a", "b"]))),
            ("other attributes any Go string type", vec![(C, t61, b"US"), (CN, utf8, b"x")], Ok(("x", vec![]))),
            (
                "two CNs",
                vec![(CN, utf8, b"cluster-root-alice"), (CN, utf8, b"intern-bob")],
                Err("subject has 2 common names"),
            ),
            ("two equal CNs", vec![(CN, utf8, b"a"), (CN, utf8, b"a")], Err("subject has 2 common names")),
            (
                "T61 O",
                vec![(O, utf8, b"system:nodes"), (O, t61, b"system:masters")],
                Err("subject O \"system:masters\" is a T61String"),
            ),
            ("BMP CN", vec![(CN, bmp, &[0, b'x'])], Err("subject CN \"x\" is a BMPString")),
            ("Numeric OU", vec![(OU, numeric, b"1")], Err("subject OU \"1\" is a NumericString")),
            ("UniversalString O", vec![(O, universal, &[0, 0, 0, b'x'])], Err("unsupported type UniversalString")),
            ("bad PrintableString", vec![(CN, printable, b"a@b")], Err("invalid PrintableString")),
        ];
        for (what, atvs, want) in cases {
            let pem = csr_with_subject(&subject(&atvs));
            match (parse_pem(pem.as_bytes()), want) {
                (Ok(r), Ok((cn, orgs))) => {
                    assert_eq!(r.common_name, cn, "{what}");
                    assert_eq!(r.organizations, orgs, "{what}");
                }
                (Err(CsrError::Subject(e)), Err(w)) => assert!(e.to_string().contains(w), "{what}: {e}"),
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_issued_subject_is_built_from_the_checked_values() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
        let ca = Ca::generate("kustos-ca", Duration::days(3650), now - Duration::days(1)).unwrap();
        // PrintableString values and an extra attribute: the certificate holds only O then
        // CN, UTF8String, exactly what encode_subject makes of the checked values.
        let pem = csr_with_subject(&subject(&[
            (&[2, 5, 4, 6], 0x13, b"US"),
            (&[2, 5, 4, 3], 0x13, b"jane"),
            (&[2, 5, 4, 10], 0x13, b"devs"),
        ]));
        let req = parse_pem(pem.as_bytes()).unwrap();
        let issued = sign(&ca, &req, &s(&["client auth"]), Duration::hours(1), now).unwrap();
        let info = crate::parse_certificate_der(&issued.cert_der).unwrap();
        assert_eq!(info.subject_der, crate::encode_subject("jane", &s(&["devs"])));
        assert_eq!((info.common_name.as_str(), info.organizations), ("jane", s(&["devs"])));
    }

    #[test]
    fn signer_rules() {
        let node = |cn: &str| csr(cn, &["system:nodes"], &[], &[], &[]);
        let client_kubelet = s(&["digital signature", "client auth"]);
        let client_kubelet_rsa = s(&["key encipherment", "digital signature", "client auth"]);
        let serving = s(&["digital signature", "server auth"]);
        type Case = (&'static str, Signer, Vec<u8>, Vec<String>, std::result::Result<(), &'static str>);
        let cases: Vec<Case> = vec![
            ("kubelet client ok", Signer::KubeletClient, node("system:node:n1"), client_kubelet.clone(), Ok(())),
            (
                "kubelet client rsa usages",
                Signer::KubeletClient,
                node("system:node:n1"),
                client_kubelet_rsa.clone(),
                Ok(()),
            ),
            (
                "kubelet client wrong O",
                Signer::KubeletClient,
                csr("system:node:n1", &["foo"], &[], &[], &[]),
                client_kubelet.clone(),
                Err("organization is not system:nodes"),
            ),
            (
                "kubelet client extra O",
                Signer::KubeletClient,
                csr("system:node:n1", &["system:nodes", "x"], &[], &[], &[]),
                client_kubelet.clone(),
                Err("organization"),
            ),
            (
                "kubelet client SAN",
                Signer::KubeletClient,
                csr("system:node:n1", &["system:nodes"], &["n1"], &[], &[]),
                client_kubelet.clone(),
                Err("DNS subjectAltNames are not allowed"),
            ),
            (
                "kubelet client IP",
                Signer::KubeletClient,
                csr("system:node:n1", &["system:nodes"], &[], &["10.0.0.1"], &[]),
                client_kubelet.clone(),
                Err("IP subjectAltNames"),
            ),
            (
                "kubelet client CN",
                Signer::KubeletClient,
                node("n1"),
                client_kubelet.clone(),
                Err("does not begin with system:node:"),
            ),
            (
                "kubelet client server auth",
                Signer::KubeletClient,
                node("system:node:n1"),
                s(&["digital signature", "client auth", "server auth"]),
                Err("usages did not match"),
            ),
            (
                "serving ok",
                Signer::KubeletServing,
                csr("system:node:n1", &["system:nodes"], &["n1"], &["10.0.0.1"], &[]),
                serving.clone(),
                Ok(()),
            ),
            (
                "serving needs a SAN",
                Signer::KubeletServing,
                node("system:node:n1"),
                serving.clone(),
                Err("DNS or IP subjectAltName is required"),
            ),
            (
                "serving no email",
                Signer::KubeletServing,
                csr("system:node:n1", &["system:nodes"], &["n1"], &[], &["a@b.c"]),
                serving.clone(),
                Err("Email"),
            ),
            (
                "serving client auth",
                Signer::KubeletServing,
                csr("system:node:n1", &["system:nodes"], &["n1"], &[], &[]),
                client_kubelet.clone(),
                Err("usages did not match"),
            ),
            (
                "apiserver client ok",
                Signer::KubeApiserverClient,
                csr("jane", &["devs"], &["x"], &[], &[]),
                s(&["client auth"]),
                Ok(()),
            ),
            (
                "apiserver client needs client auth",
                Signer::KubeApiserverClient,
                csr("jane", &[], &[], &[], &[]),
                s(&["digital signature"]),
                Err("client auth"),
            ),
            (
                "apiserver client no server auth",
                Signer::KubeApiserverClient,
                csr("jane", &[], &[], &[], &[]),
                s(&["client auth", "server auth"]),
                Err("invalid usage for client certificate: server auth"),
            ),
            (
                "legacy unknown never",
                Signer::LegacyUnknown,
                csr("x", &[], &[], &[], &[]),
                s(&["client auth"]),
                Err("legacy-unknown"),
            ),
        ];
        for (what, signer, pem, usages, want) in cases {
            let req = parse_pem(&pem).unwrap();
            match (validate(signer, &req, &usages), want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{what}: {e}"),
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
        for s in Signer::ALL {
            assert_eq!(Signer::from_name(s.name()), Some(s));
        }
        assert_eq!(Signer::from_name("example.com/x"), None);
    }

    #[test]
    fn lifetimes_and_issued_fields() {
        let year = Duration::hours(8760);
        assert_eq!(duration(None, year), year);
        assert_eq!(duration(Some(3600), year), Duration::hours(1));
        assert_eq!(duration(Some(10 * 365 * 86400), year), year);
        assert_eq!(duration(Some(60), year), MIN_DURATION);
        assert_eq!(duration(None, Duration::minutes(1)), MIN_DURATION);

        let now = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
        let ca = Ca::generate("kustos-ca", Duration::days(3650), now - Duration::days(1)).unwrap();
        let cases: Vec<(&str, Duration, Vec<&str>, DateTime<Utc>)> = vec![
            (
                "one hour: NotAfter not backdated",
                Duration::hours(1),
                vec!["digital signature", "client auth"],
                now + Duration::hours(1),
            ),
            ("a year: NotAfter backdated", year, vec!["client auth"], now + year - BACKDATE),
            ("capped at the CA", Duration::days(5000), vec!["client auth"], ca.not_after()),
        ];
        for (what, d, usages, not_after) in cases {
            let req = parse_pem(&csr("system:node:n1", &["system:nodes"], &[], &[], &[])).unwrap();
            let usages = s(&usages);
            let issued = sign(&ca, &req, &usages, d, now).unwrap();
            let info = crate::parse_certificate_der(&issued.cert_der).unwrap();
            assert_eq!(info.not_before, now - BACKDATE, "{what}");
            assert_eq!(info.not_after, not_after, "{what}");
            assert_eq!(info.common_name, "system:node:n1", "{what}");
            assert_eq!(info.organizations, s(&["system:nodes"]), "{what}");
            assert!(!info.is_ca, "{what}");
            assert!(ca.signed(&issued.cert_der), "{what}");
            let mut got: Vec<String> = info.usages.iter().map(|u| u.as_k8s().to_string()).collect();
            got.sort();
            let mut want = usages.clone();
            want.sort();
            assert_eq!(got, want, "{what}: extensions only from spec.usages");
            assert_eq!(info.public_key_der, req.public_key_der, "{what}");
            // 128 random bits: 16 bytes, fewer when the top ones happen to be zero (1 in 256
            // for each byte), as the serial is read without leading zero bytes.
            assert!((1..=16).contains(&info.serial.len()), "{what}: a serial of at most 128 bits");
            assert_eq!(info.serial, issued.serial, "{what}: the serial reported is the one in the certificate");
        }
        // SANs are copied.
        let req = parse_pem(&csr("system:node:n1", &["system:nodes"], &["n1.example"], &["10.1.2.3"], &[])).unwrap();
        let issued = sign(&ca, &req, &s(&["digital signature", "server auth"]), Duration::hours(24), now).unwrap();
        let info = crate::parse_certificate_der(&issued.cert_der).unwrap();
        assert_eq!(info.dns_names, s(&["n1.example"]));
        assert_eq!(info.ip_addresses, vec!["10.1.2.3".parse::<IpAddr>().unwrap()]);
        assert!(sign(&ca, &req, &s(&["warp drive"]), Duration::hours(1), now).is_err());
    }
}
