//! Reading certificates: [`CertInfo`], the fields callers check, from DER or PEM
//! ([`parse_certificate_der`], [`parse_certificate_pem`]), whether one certificate is signed
//! by another ([`signed_by`]), fingerprints. What enters is DER or PEM bytes; what leaves is
//! values or an [`Error`], never a panic.

use super::*;

/// The fields of a certificate that callers check. Names read as Go's `crypto/x509` reads
/// them ([`name`]): a certificate means the same user and groups here and in kube-apiserver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The subject's last CN (Go's `Subject.CommonName`).
    pub common_name: String,
    /// Every O of the subject, in order, whatever its string type (Go's `Subject.Organization`).
    pub organizations: Vec<String>,
    /// Every user UID attribute of the subject (OID 1.3.6.1.4.1.57683.2), in order.
    pub user_uids: Vec<String>,
    /// The issuer's last CN.
    pub issuer_common_name: String,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub email_addresses: Vec<String>,
    pub uris: Vec<String>,
    pub not_before: DateTime<Utc>,
    pub not_after: DateTime<Utc>,
    /// Big-endian, without leading zero bytes.
    pub serial: Vec<u8>,
    /// basicConstraints cA.
    pub is_ca: bool,
    /// Whether a keyUsage extension is present (when absent, `usages` has no key usage bit).
    pub has_key_usage: bool,
    /// Key usages then extended key usages, in [`Usage::ALL`] order.
    pub usages: Vec<Usage>,
    /// Extended key usage OIDs not in [`Usage`], dotted.
    pub other_extended_key_usages: Vec<String>,
    /// DER of the subject Name.
    pub subject_der: Vec<u8>,
    /// DER of the issuer Name.
    pub issuer_der: Vec<u8>,
    /// SubjectPublicKeyInfo DER.
    pub public_key_der: Vec<u8>,
    pub subject_key_id: Option<Vec<u8>>,
    pub authority_key_id: Option<Vec<u8>>,
    /// The value (DER) of every PodIdentity extension, in order: read them with
    /// [`crate::pod_identity::PodIdentity::from_info`].
    pub pod_identity_values: Vec<Vec<u8>>,
}

impl CertInfo {
    /// Whether `now` is within [NotBefore, NotAfter].
    pub fn valid_at(&self, now: DateTime<Utc>) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// Whether `cert_der` names the CA certificate `ca_der`'s subject as issuer and carries a
/// valid signature by its key (no key needed; validity dates and usages are not checked).
/// Each signature verified is counted ([`signed_by_checks`]).
pub fn signed_by(cert_der: &[u8], ca_der: &[u8]) -> bool {
    let (Ok(cert), Ok(ca)) = (parse_x509(cert_der), parse_x509(ca_der)) else {
        return false;
    };
    cert.issuer().as_raw() == ca.subject().as_raw() && {
        SIGNED_BY_CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        cert.verify_signature(Some(ca.public_key())).is_ok()
    }
}

static SIGNED_BY_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many signatures [`signed_by`] (and so [`crate::Ca::signed`], the CA's check of each
/// certificate it issues) has verified in this process: the apiserver's `/metrics` reports
/// them as `kustos_signature_checks_total{what="issued_certificate"}`.
pub fn signed_by_checks() -> u64 {
    SIGNED_BY_CHECKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// SHA-256 of `der`, lower-case hex (a certificate's fingerprint, as `openssl x509
/// -fingerprint -sha256` prints it without colons).
pub fn fingerprint(der: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, der).as_ref())
}

/// Lower-case hex, e.g. for serial numbers in logs.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn strip_leading_zeros(bytes: &[u8]) -> Vec<u8> {
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(bytes.len().saturating_sub(1));
    bytes[skip..].to_vec()
}

fn asn1_time(t: x509_parser::time::ASN1Time) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp(t.timestamp(), 0).ok_or_else(|| Error::Certificate("time out of range".into()))
}

pub(crate) fn to_offset(t: DateTime<Utc>) -> Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(t.timestamp())
        .map_err(|e| Error::InvalidParams(format!("time out of range: {e}")))
}

/// Every `CERTIFICATE` block of `pem`, DER (at least one).
pub fn certificates_from_pem(pem: &str) -> Result<Vec<Vec<u8>>> {
    let certs: Vec<Vec<u8>> =
        pem_decode_all(pem)?.into_iter().filter(|b| b.label == "CERTIFICATE").map(|b| b.der).collect();
    if certs.is_empty() {
        return Err(Error::NoCertificate);
    }
    Ok(certs)
}

pub(crate) fn parse_x509(der: &[u8]) -> Result<x509_parser::certificate::X509Certificate<'_>> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| Error::Certificate(e.to_string()))?;
    if !rest.is_empty() {
        return Err(Error::Certificate("trailing data after the certificate".into()));
    }
    Ok(cert)
}

/// Parse a DER certificate into the fields callers check. A subject or issuer Go would not
/// read (or that this crate cannot read the same way) is an error.
pub fn parse_certificate_der(der: &[u8]) -> Result<CertInfo> {
    let cert = parse_x509(der)?;
    let cerr = |e: x509_parser::error::X509Error| Error::Certificate(e.to_string());
    // Subject and issuer as Go's crypto/x509 reads them: the last CN, every O; a name Go
    // would refuse (or might read otherwise) refuses the certificate.
    let subject = name::parse(cert.subject().as_raw()).map_err(|e| Error::Certificate(e.to_string()))?;
    let issuer = name::parse(cert.issuer().as_raw()).map_err(|e| Error::Certificate(e.to_string()))?;
    let common_name = subject.common_name().to_string();
    let organizations = subject.organizations();
    let user_uids = subject.user_uids();
    let issuer_common_name = issuer.common_name().to_string();

    let mut info = CertInfo {
        common_name,
        organizations,
        user_uids,
        issuer_common_name,
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        email_addresses: Vec::new(),
        uris: Vec::new(),
        not_before: asn1_time(cert.validity().not_before)?,
        not_after: asn1_time(cert.validity().not_after)?,
        serial: strip_leading_zeros(cert.raw_serial()),
        is_ca: false,
        has_key_usage: false,
        usages: Vec::new(),
        other_extended_key_usages: Vec::new(),
        subject_der: cert.subject().as_raw().to_vec(),
        issuer_der: cert.issuer().as_raw().to_vec(),
        public_key_der: cert.public_key().raw.to_vec(),
        subject_key_id: None,
        authority_key_id: None,
        pod_identity_values: Vec::new(),
    };
    if let Some(bc) = cert.basic_constraints().map_err(cerr)? {
        info.is_ca = bc.value.ca;
    }
    let mut usages = Vec::new();
    if let Some(ku) = cert.key_usage().map_err(cerr)? {
        info.has_key_usage = true;
        let ku = ku.value;
        for (on, u) in [
            (ku.digital_signature(), Usage::DigitalSignature),
            (ku.non_repudiation(), Usage::ContentCommitment),
            (ku.key_encipherment(), Usage::KeyEncipherment),
            (ku.key_agreement(), Usage::KeyAgreement),
            (ku.data_encipherment(), Usage::DataEncipherment),
            (ku.key_cert_sign(), Usage::CertSign),
            (ku.crl_sign(), Usage::CrlSign),
            (ku.encipher_only(), Usage::EncipherOnly),
            (ku.decipher_only(), Usage::DecipherOnly),
        ] {
            if on {
                usages.push(u);
            }
        }
    }
    if let Some(eku) = cert.extended_key_usage().map_err(cerr)? {
        let eku = eku.value;
        for (on, u) in [
            (eku.any, Usage::Any),
            (eku.server_auth, Usage::ServerAuth),
            (eku.client_auth, Usage::ClientAuth),
            (eku.code_signing, Usage::CodeSigning),
            (eku.email_protection, Usage::EmailProtection),
            (eku.time_stamping, Usage::Timestamping),
            (eku.ocsp_signing, Usage::OcspSigning),
        ] {
            if on {
                usages.push(u);
            }
        }
        for oid in &eku.other {
            let dotted = oid.to_id_string();
            let known = Usage::ALL.into_iter().find(|u| {
                u.other_eku_oid().map(|arcs| arcs.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
                    == Some(dotted.clone())
            });
            match known {
                Some(u) => usages.push(u),
                None => info.other_extended_key_usages.push(dotted),
            }
        }
    }
    usages.sort();
    usages.dedup();
    info.usages = usages;
    if let Some(san) = cert.subject_alternative_name().map_err(cerr)? {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => info.dns_names.push((*d).to_string()),
                GeneralName::RFC822Name(e) => info.email_addresses.push((*e).to_string()),
                GeneralName::URI(u) => info.uris.push((*u).to_string()),
                GeneralName::IPAddress(b) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                        info.ip_addresses.push(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                        info.ip_addresses.push(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    let pod_identity_oid = crate::pod_identity::oid_content();
    for ext in cert.iter_extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => info.subject_key_id = Some(id.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                info.authority_key_id = aki.key_identifier.as_ref().map(|id| id.0.to_vec());
            }
            _ if ext.oid.as_bytes() == pod_identity_oid.as_slice() => info.pod_identity_values.push(ext.value.to_vec()),
            _ => {}
        }
    }
    Ok(info)
}

/// Parse the first certificate of a PEM text.
pub fn parse_certificate_pem(pem: &str) -> Result<CertInfo> {
    let certs = certificates_from_pem(pem)?;
    parse_certificate_der(&certs[0])
}
