//! kustos-ca: keys, certificate authority creation and loading, and certificate issuing.
//!
//! Bytes and values in, bytes and values out: no file or network I/O, and the current time
//! is always a parameter (`now`), so every result is reproducible in tests.
//!
//! - [`KeyPair`]: ECDSA P-256 by default; RSA (PKCS#1 or PKCS#8), SEC1 EC and Ed25519 PEM
//!   keys load too. `Debug` never shows key material.
//! - [`Ca`]: a CA certificate and its key; [`Ca::generate`] makes a self-signed one,
//!   [`Ca::from_pem`] loads one (checking that the key belongs to the certificate), and
//!   [`Ca::issue`] signs leaf certificates ([`IssueParams`] → [`Issued`]).
//! - [`SignerBundle`] ([`bundle`]): a CA file holding several CA certificates (rotation):
//!   the one matching the key signs, the unexpired ones are trusted.
//! - [`csr`]: the one reader of certificate signing requests (PEM, signature, the subject
//!   rule), the `kubernetes.io/*` signer rules, certificate lifetime, signing, and the
//!   condition names and reasons ([`csr::condition`]).
//! - [`bootstrap_token`]: bootstrap tokens — their format, their Secret's keys, and the rules
//!   of the authenticator, the token cleaner, the bootstrap signer and `kustos token`.
//! - [`name`]: subjects and issuers read as Go's `crypto/x509` reads them (last CN, every O);
//!   [`pem`]: PEM as Go's `encoding/pem` reads it.
//! - [`parse_certificate_der`] / [`CertInfo`]: the fields callers check (subject, SANs,
//!   validity, usages, key identifiers).
//! - [`generate_sa_keypair`]: the service-account token signing key; [`jwt`] signs and
//!   verifies service-account tokens with it.
//! - [`jws`]: the detached HS256 signatures of `cluster-info` (bootstrap signer).
//! - [`rfc3339`]: timestamps as Go reads and writes them (bootstrap token expirations);
//!   [`duration`]: durations as Go's `time.ParseDuration` reads them.
//!
//! Issued certificates follow what Kubernetes' own signers produce: NotBefore backdated by
//! [`BACKDATE`], NotAfter capped at the CA's NotAfter, a random 128-bit serial, CA:false,
//! subject key identifier, and an authority key identifier matching the CA's.

pub mod bootstrap_token;
pub mod bundle;
mod cert;
pub use cert::*;
use cert::{parse_x509, to_offset};
pub mod csr;
pub mod der;
pub mod duration;
pub mod jws;
pub mod jwt;
mod key;
pub mod name;
pub mod pem;
pub mod pod_certificate;
pub mod pod_identity;
pub mod rfc3339;
pub mod users;

use std::net::IpAddr;

use chrono::{DateTime, Duration, Utc};
use rcgen::SigningKey as _;
use x509_parser::extensions::{GeneralName, ParsedExtension};

pub use bundle::SignerBundle;
pub use der::{pem_decode_all, pem_encode, PemBlock};
pub use key::{generate_sa_keypair, public_key_der_from_pem, KeyAlgorithm, KeyPair, SaKeyPair};

/// How far NotBefore is set back from `now`, to tolerate clock skew between machines.
pub const BACKDATE: Duration = Duration::minutes(5);
/// Default lifetime of a generated CA.
pub const DEFAULT_CA_VALIDITY: Duration = Duration::days(3650);

/// Everything that can go wrong in this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid PEM: {0}")]
    Pem(String),
    #[error("no CERTIFICATE block found")]
    NoCertificate,
    #[error("no private key block found")]
    NoPrivateKey,
    #[error("unsupported or invalid key: {0}")]
    UnsupportedKey(String),
    #[error("invalid certificate: {0}")]
    Certificate(String),
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
    #[error("not usable as a CA: {0}")]
    NotCa(String),
    #[error("invalid certificate request: {0}")]
    InvalidParams(String),
    #[error("the CA certificate expired at {0}")]
    CaExpired(DateTime<Utc>),
    #[error("generating the certificate: {0}")]
    Generate(String),
    #[error("the system random number generator failed")]
    Random,
}

impl From<rcgen::Error> for Error {
    fn from(e: rcgen::Error) -> Self {
        Error::Generate(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A key usage or extended key usage, named as in `certificates.k8s.io` (`spec.usages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Usage {
    DigitalSignature,
    ContentCommitment,
    KeyEncipherment,
    KeyAgreement,
    DataEncipherment,
    CertSign,
    CrlSign,
    EncipherOnly,
    DecipherOnly,
    Any,
    ServerAuth,
    ClientAuth,
    CodeSigning,
    EmailProtection,
    IpsecEndSystem,
    IpsecTunnel,
    IpsecUser,
    Timestamping,
    OcspSigning,
    MicrosoftSgc,
    NetscapeSgc,
}

impl Usage {
    pub const ALL: [Usage; 21] = [
        Usage::DigitalSignature,
        Usage::ContentCommitment,
        Usage::KeyEncipherment,
        Usage::KeyAgreement,
        Usage::DataEncipherment,
        Usage::CertSign,
        Usage::CrlSign,
        Usage::EncipherOnly,
        Usage::DecipherOnly,
        Usage::Any,
        Usage::ServerAuth,
        Usage::ClientAuth,
        Usage::CodeSigning,
        Usage::EmailProtection,
        Usage::IpsecEndSystem,
        Usage::IpsecTunnel,
        Usage::IpsecUser,
        Usage::Timestamping,
        Usage::OcspSigning,
        Usage::MicrosoftSgc,
        Usage::NetscapeSgc,
    ];

    /// The Kubernetes name (`"client auth"`, `"digital signature"`, ...).
    pub fn as_k8s(self) -> &'static str {
        match self {
            Usage::DigitalSignature => "digital signature",
            Usage::ContentCommitment => "content commitment",
            Usage::KeyEncipherment => "key encipherment",
            Usage::KeyAgreement => "key agreement",
            Usage::DataEncipherment => "data encipherment",
            Usage::CertSign => "cert sign",
            Usage::CrlSign => "crl sign",
            Usage::EncipherOnly => "encipher only",
            Usage::DecipherOnly => "decipher only",
            Usage::Any => "any",
            Usage::ServerAuth => "server auth",
            Usage::ClientAuth => "client auth",
            Usage::CodeSigning => "code signing",
            Usage::EmailProtection => "email protection",
            Usage::IpsecEndSystem => "ipsec end system",
            Usage::IpsecTunnel => "ipsec tunnel",
            Usage::IpsecUser => "ipsec user",
            Usage::Timestamping => "timestamping",
            Usage::OcspSigning => "ocsp signing",
            Usage::MicrosoftSgc => "microsoft sgc",
            Usage::NetscapeSgc => "netscape sgc",
        }
    }

    /// Parse a Kubernetes usage name; `"signing"` and `"s/mime"` are the upstream aliases.
    pub fn from_k8s(name: &str) -> Option<Usage> {
        match name {
            "signing" => Some(Usage::DigitalSignature),
            "s/mime" => Some(Usage::EmailProtection),
            _ => Usage::ALL.into_iter().find(|u| u.as_k8s() == name),
        }
    }

    /// True for the KeyUsage bits, false for extended key usages.
    pub fn is_key_usage(self) -> bool {
        matches!(
            self,
            Usage::DigitalSignature
                | Usage::ContentCommitment
                | Usage::KeyEncipherment
                | Usage::KeyAgreement
                | Usage::DataEncipherment
                | Usage::CertSign
                | Usage::CrlSign
                | Usage::EncipherOnly
                | Usage::DecipherOnly
        )
    }

    fn key_usage(self) -> Option<rcgen::KeyUsagePurpose> {
        use rcgen::KeyUsagePurpose as K;
        Some(match self {
            Usage::DigitalSignature => K::DigitalSignature,
            Usage::ContentCommitment => K::ContentCommitment,
            Usage::KeyEncipherment => K::KeyEncipherment,
            Usage::KeyAgreement => K::KeyAgreement,
            Usage::DataEncipherment => K::DataEncipherment,
            Usage::CertSign => K::KeyCertSign,
            Usage::CrlSign => K::CrlSign,
            Usage::EncipherOnly => K::EncipherOnly,
            Usage::DecipherOnly => K::DecipherOnly,
            _ => return None,
        })
    }

    /// OID arcs of the extended key usages that rcgen has no name for.
    fn other_eku_oid(self) -> Option<&'static [u64]> {
        Some(match self {
            Usage::IpsecEndSystem => &[1, 3, 6, 1, 5, 5, 7, 3, 5],
            Usage::IpsecTunnel => &[1, 3, 6, 1, 5, 5, 7, 3, 6],
            Usage::IpsecUser => &[1, 3, 6, 1, 5, 5, 7, 3, 7],
            Usage::MicrosoftSgc => &[1, 3, 6, 1, 4, 1, 311, 10, 3, 3],
            Usage::NetscapeSgc => &[2, 16, 840, 1, 113730, 4, 1],
            _ => return None,
        })
    }

    fn extended_key_usage(self) -> Option<rcgen::ExtendedKeyUsagePurpose> {
        use rcgen::ExtendedKeyUsagePurpose as E;
        Some(match self {
            Usage::Any => E::Any,
            Usage::ServerAuth => E::ServerAuth,
            Usage::ClientAuth => E::ClientAuth,
            Usage::CodeSigning => E::CodeSigning,
            Usage::EmailProtection => E::EmailProtection,
            Usage::Timestamping => E::TimeStamping,
            Usage::OcspSigning => E::OcspSigning,
            other => E::Other(other.other_eku_oid()?.to_vec()),
        })
    }
}

/// The key of the subject of a certificate to issue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SubjectKey {
    /// Generate a new ECDSA P-256 key; [`Issued::key_pem`] returns it.
    #[default]
    Generate,
    /// Certify this public key (SubjectPublicKeyInfo DER, e.g. from a CSR).
    PublicKey(Vec<u8>),
}

/// What to put into an issued certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssueParams {
    /// Subject CN (may be empty).
    pub common_name: String,
    /// Subject O values, one RDN each.
    pub organizations: Vec<String>,
    /// A DER-encoded subject Name used verbatim instead of `common_name`/`organizations`
    /// (e.g. a CSR's subject).
    pub raw_subject: Option<Vec<u8>>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub email_addresses: Vec<String>,
    pub uris: Vec<String>,
    /// Key usages and extended key usages. When it holds no key usage bit, `digital
    /// signature` is added, and `key encipherment` too for RSA subject keys — unless
    /// `exact_usages` is set (CSR signing: extensions only from `spec.usages`).
    pub usages: Vec<Usage>,
    pub exact_usages: bool,
    /// Requested lifetime from `now`; capped at the CA's NotAfter.
    pub validity: Duration,
    pub key: SubjectKey,
    /// How long before `now` the certificate begins; None: [`BACKDATE`].
    pub backdate: Option<Duration>,
    /// Further extensions, as given (e.g. the PodIdentity extension).
    pub extensions: Vec<Extension>,
}

/// An extension added to an issued certificate verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    pub oid_arcs: Vec<u64>,
    pub critical: bool,
    /// The extension's value (DER), the contents of its OCTET STRING.
    pub value: Vec<u8>,
}

impl IssueParams {
    /// A TLS server certificate with a new key.
    pub fn server(common_name: &str, dns_names: Vec<String>, ip_addresses: Vec<IpAddr>, validity: Duration) -> Self {
        IssueParams {
            common_name: common_name.to_string(),
            dns_names,
            ip_addresses,
            usages: vec![Usage::ServerAuth],
            validity,
            ..Default::default()
        }
    }

    /// A TLS client certificate with a new key: CN is the user, each O a group.
    pub fn client(common_name: &str, organizations: Vec<String>, validity: Duration) -> Self {
        IssueParams {
            common_name: common_name.to_string(),
            organizations,
            usages: vec![Usage::ClientAuth],
            validity,
            ..Default::default()
        }
    }
}

/// An issued certificate. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub cert_der: Vec<u8>,
    /// The new private key (PKCS#8 PEM) for [`SubjectKey::Generate`]; secret.
    pub key_pem: Option<String>,
    /// Serial number, big-endian, without leading zero bytes.
    pub serial: Vec<u8>,
    pub not_before: DateTime<Utc>,
    pub not_after: DateTime<Utc>,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("serial", &hex(&self.serial))
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("has_key", &self.key_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// 128 random bits, never all zero.
fn random_serial() -> Result<[u8; 16]> {
    use ring::rand::SecureRandom as _;
    let mut serial = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut serial).map_err(|_| Error::Random)?;
    if serial.iter().all(|&b| b == 0) {
        serial[15] = 1;
    }
    Ok(serial)
}

/// `SET { SEQUENCE { type, UTF8String value } }`
fn rdn(type_arcs: &[u64], value: &str) -> Vec<u8> {
    let atv =
        der::constructed(der::TAG_SEQUENCE, &[&der::oid(type_arcs), &der::tlv(der::TAG_UTF8_STRING, value.as_bytes())]);
    der::tlv(der::TAG_SET, &atv)
}

/// DER of a subject Name: one RDN per organization, then the CN (the order Go's crypto/x509
/// uses), all UTF8String. An empty CN is left out.
pub fn encode_subject(common_name: &str, organizations: &[String]) -> Vec<u8> {
    let mut rdns: Vec<Vec<u8>> = organizations.iter().map(|o| rdn(&[2, 5, 4, 10], o)).collect();
    if !common_name.is_empty() {
        rdns.push(rdn(&[2, 5, 4, 3], common_name));
    }
    let parts: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
    der::constructed(der::TAG_SEQUENCE, &parts)
}

/// A certificate authority: its certificate and private key. Cheap to clone; `Debug` never
/// shows the key.
#[derive(Clone)]
pub struct Ca {
    cert_der: Vec<u8>,
    cert_pem: String,
    key: KeyPair,
    info: CertInfo,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("common_name", &self.info.common_name)
            .field("not_after", &self.info.not_after)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA (ECDSA P-256 key, CA:true, keyCertSign|cRLSign|digitalSignature,
    /// random serial), valid from `now - BACKDATE` to `now + validity`.
    pub fn generate(common_name: &str, validity: Duration, now: DateTime<Utc>) -> Result<Ca> {
        if validity <= Duration::zero() {
            return Err(Error::InvalidParams("validity must be positive".into()));
        }
        let key = KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::default();
        params.not_before = to_offset(now - BACKDATE)?;
        params.not_after = to_offset(
            now.checked_add_signed(validity).ok_or_else(|| Error::InvalidParams("validity out of range".into()))?,
        )?;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()?));
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key.signer())?;
        Self::from_parts(cert.der().to_vec(), key)
    }

    /// Load a CA from its certificate (the first `CERTIFICATE` block) and private key.
    /// Fails when the key does not belong to the certificate or the certificate is not a CA.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca> {
        let certs = certificates_from_pem(cert_pem)?;
        let key = KeyPair::from_pem(key_pem)?;
        Self::from_parts(certs[0].clone(), key)
    }

    fn from_parts(cert_der: Vec<u8>, key: KeyPair) -> Result<Ca> {
        let info = parse_certificate_der(&cert_der)?;
        {
            let cert = parse_x509(&cert_der)?;
            if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
                return Err(Error::KeyMismatch);
            }
        }
        if !info.is_ca {
            return Err(Error::NotCa("basicConstraints does not mark the certificate as a CA".into()));
        }
        if info.has_key_usage && !info.usages.contains(&Usage::CertSign) {
            return Err(Error::NotCa("keyUsage does not allow certificate signing".into()));
        }
        let cert_pem = pem_encode("CERTIFICATE", &cert_der);
        Ok(Ca { cert_der, cert_pem, key, info })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA key. Secret: never log its PEM.
    pub fn key(&self) -> &KeyPair {
        &self.key
    }

    /// The CA key, PKCS#8 PEM. Secret.
    pub fn key_pem(&self) -> String {
        self.key.private_key_pem()
    }

    pub fn info(&self) -> &CertInfo {
        &self.info
    }

    pub fn common_name(&self) -> &str {
        &self.info.common_name
    }

    pub fn not_before(&self) -> DateTime<Utc> {
        self.info.not_before
    }

    pub fn not_after(&self) -> DateTime<Utc> {
        self.info.not_after
    }

    /// Whether `cert_der` names this CA as issuer and carries a valid signature by its key.
    /// (Validity dates and usages are not checked here.)
    pub fn signed(&self, cert_der: &[u8]) -> bool {
        signed_by(cert_der, &self.cert_der)
    }

    /// A cross-signed certificate for another CA (`other_der`): its subject, public key and
    /// subject key identifier, CA:true, keyCertSign|cRLSign|digitalSignature, issued and
    /// signed by this CA, valid from `now - BACKDATE` until the earlier of both CAs' NotAfter.
    /// Sent as an intermediate, it lets clients that trust only this CA verify certificates
    /// the other CA issues (a CA rotation).
    pub fn cross_sign(&self, other_der: &[u8], now: DateTime<Utc>) -> Result<Issued> {
        let other = parse_certificate_der(other_der)?;
        if !other.is_ca {
            return Err(Error::NotCa("only a CA certificate can be cross-signed".into()));
        }
        let not_after = other.not_after.min(self.info.not_after);
        if not_after <= now {
            return Err(Error::CaExpired(not_after));
        }
        let spki = rcgen::SubjectPublicKeyInfo::from_der(&other.public_key_der)
            .map_err(|e| Error::UnsupportedKey(format!("subject public key: {e}")))?;
        let mut cp = rcgen::CertificateParams::default();
        cp.not_before = to_offset(now - BACKDATE)?;
        cp.not_after = to_offset(not_after)?;
        cp.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()?));
        cp.distinguished_name = rcgen::DistinguishedName::new();
        cp.distinguished_name.push(rcgen::DnType::CommonName, "placeholder");
        cp.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        cp.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        if let Some(ski) = &other.subject_key_id {
            cp.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(ski.clone());
        }
        cp.use_authority_key_identifier_extension = self.info.subject_key_id.is_some();
        let mut issuer_params = rcgen::CertificateParams::default();
        if let Some(ski) = &self.info.subject_key_id {
            issuer_params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(ski.clone());
        }
        issuer_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let issuer = rcgen::Issuer::new(issuer_params, self.key.unsigned());
        let draft = cp.signed_by(&spki, &issuer)?;
        let cert_der = self.rewrite_names(draft.der(), &other.subject_der, None)?;
        if !self.signed(&cert_der) {
            return Err(Error::Generate("the cross-signed certificate does not verify against the CA".into()));
        }
        let info = parse_certificate_der(&cert_der)?;
        Ok(Issued {
            cert_pem: pem_encode("CERTIFICATE", &cert_der),
            cert_der,
            key_pem: None,
            serial: info.serial,
            not_before: info.not_before,
            not_after: info.not_after,
        })
    }

    /// Issue a certificate: NotBefore = now − [`BACKDATE`], NotAfter = min(now + validity,
    /// CA NotAfter), random 128-bit serial, CA:false.
    pub fn issue(&self, params: IssueParams, now: DateTime<Utc>) -> Result<Issued> {
        if params.validity <= Duration::zero() {
            return Err(Error::InvalidParams("validity must be positive".into()));
        }
        let not_before = now - params.backdate.unwrap_or(BACKDATE);
        let requested = now
            .checked_add_signed(params.validity)
            .ok_or_else(|| Error::InvalidParams("validity out of range".into()))?;
        let not_after = requested.min(self.info.not_after);
        if not_after <= now {
            return Err(Error::CaExpired(self.info.not_after));
        }

        let subject = match &params.raw_subject {
            Some(raw) => {
                let (name, rest) = der::read_tlv(raw).map_err(|_| Error::InvalidParams("malformed subject".into()))?;
                if name.tag != der::TAG_SEQUENCE || !rest.is_empty() {
                    return Err(Error::InvalidParams("malformed subject".into()));
                }
                raw.clone()
            }
            None => encode_subject(&params.common_name, &params.organizations),
        };
        let subject_is_empty = der::read_tlv(&subject).map(|(t, _)| t.content.is_empty()).unwrap_or(true);

        let (new_key, spki_der) = match params.key {
            SubjectKey::Generate => {
                let k = KeyPair::generate()?;
                let spki = k.public_key_der();
                (Some(k), spki)
            }
            SubjectKey::PublicKey(spki) => (None, spki),
        };
        // rcgen (on ring) knows no P-521 key: such a key is certified by issuing for a stand-in
        // P-256 key, then putting the request's key in before the CA signs again.
        let (spki, p521) = match rcgen::SubjectPublicKeyInfo::from_der(&spki_der) {
            Ok(spki) => (spki, false),
            Err(rcgen::Error::UnsupportedSignatureAlgorithm) if is_p521(&spki_der) => {
                let stand_in = rcgen::PublicKeyData::subject_public_key_info(&rcgen::KeyPair::generate_for(
                    &rcgen::PKCS_ECDSA_P256_SHA256,
                )?);
                let spki = rcgen::SubjectPublicKeyInfo::from_der(&stand_in)
                    .map_err(|e| Error::UnsupportedKey(format!("subject public key: {e}")))?;
                (spki, true)
            }
            Err(e) => return Err(Error::UnsupportedKey(format!("subject public key: {e}"))),
        };

        let mut usages = params.usages.clone();
        usages.sort();
        usages.dedup();
        if !params.exact_usages && !usages.iter().any(|u| u.is_key_usage()) {
            usages.push(Usage::DigitalSignature);
            if key::spki_is_rsa(&spki_der) {
                usages.push(Usage::KeyEncipherment);
            }
        }

        let mut cp = rcgen::CertificateParams::default();
        cp.not_before = to_offset(not_before)?;
        cp.not_after = to_offset(not_after)?;
        cp.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()?));
        // The subject is replaced below; an empty placeholder makes rcgen mark the SAN
        // extension critical, as RFC 5280 requires for an empty subject.
        cp.distinguished_name = rcgen::DistinguishedName::new();
        if !subject_is_empty {
            cp.distinguished_name.push(rcgen::DnType::CommonName, "placeholder");
        }
        for d in &params.dns_names {
            let name = rcgen::string::Ia5String::try_from(d.as_str())
                .map_err(|e| Error::InvalidParams(format!("DNS name {d:?}: {e}")))?;
            cp.subject_alt_names.push(rcgen::SanType::DnsName(name));
        }
        for ip in &params.ip_addresses {
            cp.subject_alt_names.push(rcgen::SanType::IpAddress(*ip));
        }
        for e in &params.email_addresses {
            let v = rcgen::string::Ia5String::try_from(e.as_str())
                .map_err(|err| Error::InvalidParams(format!("email address {e:?}: {err}")))?;
            cp.subject_alt_names.push(rcgen::SanType::Rfc822Name(v));
        }
        for u in &params.uris {
            let v = rcgen::string::Ia5String::try_from(u.as_str())
                .map_err(|err| Error::InvalidParams(format!("URI {u:?}: {err}")))?;
            cp.subject_alt_names.push(rcgen::SanType::URI(v));
        }
        cp.is_ca = rcgen::IsCa::ExplicitNoCa;
        cp.key_usages = usages.iter().filter_map(|u| u.key_usage()).collect();
        cp.extended_key_usages = usages.iter().filter_map(|u| u.extended_key_usage()).collect();
        cp.use_authority_key_identifier_extension = self.info.subject_key_id.is_some();
        if p521 {
            // The subject key identifier rcgen derives: the SPKI's SHA-256, cut to 20 bytes.
            let digest = <sha2::Sha256 as sha2::Digest>::digest(&spki_der);
            cp.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(digest[..20].to_vec());
        }
        for e in &params.extensions {
            let mut ext = rcgen::CustomExtension::from_oid_content(&e.oid_arcs, e.value.clone());
            ext.set_criticality(e.critical);
            cp.custom_extensions.push(ext);
        }

        let mut issuer_params = rcgen::CertificateParams::default();
        if let Some(ski) = &self.info.subject_key_id {
            issuer_params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(ski.clone());
        }
        issuer_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let issuer = rcgen::Issuer::new(issuer_params, self.key.unsigned());
        let draft = cp.signed_by(&spki, &issuer)?;
        let cert_der = self.rewrite_names(draft.der(), &subject, p521.then_some(spki_der.as_slice()))?;
        if !self.signed(&cert_der) {
            return Err(Error::Generate("the issued certificate does not verify against the CA".into()));
        }
        let info = parse_certificate_der(&cert_der)?;
        Ok(Issued {
            cert_pem: pem_encode("CERTIFICATE", &cert_der),
            cert_der,
            key_pem: new_key.map(|k| k.private_key_pem()),
            serial: info.serial,
            not_before: info.not_before,
            not_after: info.not_after,
        })
    }

    /// Put the CA's exact subject bytes in as issuer (so chains build byte for byte whatever
    /// string types the CA uses), `subject` as subject and, when given, `spki` as the subject
    /// public key, then sign again.
    fn rewrite_names(&self, cert_der: &[u8], subject: &[u8], spki: Option<&[u8]>) -> Result<Vec<u8>> {
        let (cert, rest) = der::read_tlv(cert_der)?;
        if cert.tag != der::TAG_SEQUENCE || !rest.is_empty() {
            return Err(Error::Generate("unexpected certificate encoding".into()));
        }
        let parts = der::children(cert.content)?;
        let [tbs, alg, _sig] = parts.as_slice() else {
            return Err(Error::Generate("unexpected certificate encoding".into()));
        };
        let fields = der::children(tbs.content)?;
        if fields.len() < 7 || fields[0].tag != der::TAG_CONTEXT_0 {
            return Err(Error::Generate("unexpected TBSCertificate encoding".into()));
        }
        let mut raw: Vec<&[u8]> = fields.iter().map(|f| f.raw).collect();
        raw[3] = &self.info.subject_der;
        raw[5] = subject;
        if let Some(spki) = spki {
            raw[6] = spki;
        }
        let new_tbs = der::constructed(der::TAG_SEQUENCE, &raw);
        let signature = self.key.signer().sign(&new_tbs)?;
        let mut bits = Vec::with_capacity(signature.len() + 1);
        bits.push(0);
        bits.extend_from_slice(&signature);
        Ok(der::constructed(der::TAG_SEQUENCE, &[&new_tbs, alg.raw, &der::tlv(der::TAG_BIT_STRING, &bits)]))
    }
}

/// Whether `spki_der` is a P-521 ECDSA key that reads as Go reads it.
fn is_p521(spki_der: &[u8]) -> bool {
    matches!(
        pod_certificate::parse_pkix(spki_der),
        Ok(pod_certificate::PublicKey::Ecdsa { curve: pod_certificate::Curve::P521, .. })
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
