//! Certificate signing requests: parsing (with the self-signature checked), the rules of the
//! `kubernetes.io/*` signers, the lifetime of what they issue, and issuing — no I/O, `now` as
//! a parameter.
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

use crate::{Ca, Error, IssueParams, Issued, Result, SubjectKey, Usage, BACKDATE};

/// The smallest certificate lifetime a signer issues.
pub const MIN_DURATION: Duration = Duration::minutes(10);
/// Lifetimes from this long are backdated at both ends.
pub const SHORT: Duration = Duration::hours(8);

/// A parsed, signature-checked PKCS#10 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRequest {
    /// The subject Name, DER, to copy into the certificate verbatim.
    pub subject_der: Vec<u8>,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub email_addresses: Vec<String>,
    pub uris: Vec<String>,
    /// SubjectPublicKeyInfo, DER.
    pub public_key_der: Vec<u8>,
}

/// Parse the first `CERTIFICATE REQUEST` PEM block of `pem` and check its self-signature.
pub fn parse_pem(pem: &[u8]) -> Result<CertificateRequest> {
    parse_der(&request_der(pem)?)
}

/// Like [`parse_pem`] without checking the self-signature, for readers of requests whose
/// signature was checked when they were accepted (a stored CSR's `spec.request` is
/// validated at create and immutable), as upstream's `ParseCSR`.
pub fn parse_pem_unverified(pem: &[u8]) -> Result<CertificateRequest> {
    parse(&request_der(pem)?, false)
}

fn request_der(pem: &[u8]) -> Result<Vec<u8>> {
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|_| Error::Pem("no PEM block found in the request".into()))?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err(Error::Pem(format!("PEM block type must be CERTIFICATE REQUEST, not {}", block.label)));
    }
    Ok(block.contents)
}

/// Parse a DER PKCS#10 request and check its self-signature.
pub fn parse_der(der: &[u8]) -> Result<CertificateRequest> {
    parse(der, true)
}

fn parse(der: &[u8], verify: bool) -> Result<CertificateRequest> {
    let (rest, csr) = X509CertificationRequest::from_der(der)
        .map_err(|_| Error::Certificate("x509: malformed certificate request".into()))?;
    if !rest.is_empty() {
        return Err(Error::Certificate("x509: trailing data after the certificate request".into()));
    }
    if verify {
        csr.verify_signature()
            .map_err(|_| Error::Certificate("x509: certificate request signature is invalid".into()))?;
    }
    let info = &csr.certification_request_info;
    let strings = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| -> Vec<String> {
        it.filter_map(|a| a.as_str().ok().map(str::to_string)).collect()
    };
    let mut req = CertificateRequest {
        subject_der: info.subject.as_raw().to_vec(),
        common_name: strings(&mut info.subject.iter_common_name()).into_iter().next().unwrap_or_default(),
        organizations: strings(&mut info.subject.iter_organization()),
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
                    _ => return Err(Error::Certificate("x509: invalid IP address in subjectAltName".into())),
                },
                _ => {}
            }
        }
    }
    Ok(req)
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

const NODE_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";

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

/// Whether `signer` may issue for this request and these `spec.usages`; Err carries
/// upstream's reason (the message of a SignerValidationFailure condition).
pub fn validate(signer: Signer, req: &CertificateRequest, usages: &[String]) -> std::result::Result<(), String> {
    match signer {
        Signer::KubeletClient => {
            if req.organizations != [NODES_GROUP] {
                return Err("subject organization is not system:nodes".into());
            }
            if !req.dns_names.is_empty() {
                return Err("DNS subjectAltNames are not allowed".into());
            }
            if !req.email_addresses.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !req.ip_addresses.is_empty() {
                return Err("IP subjectAltNames are not allowed".into());
            }
            if !req.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            if !req.common_name.starts_with(NODE_PREFIX) {
                return Err(format!("subject common name does not begin with {NODE_PREFIX}"));
            }
            if !exactly_one_of(
                usages,
                [&["digital signature", "key encipherment", "client auth"], &["digital signature", "client auth"]],
            ) {
                return Err("usages did not match [client auth digital signature key encipherment]".into());
            }
            Ok(())
        }
        Signer::KubeletServing => {
            if req.organizations != [NODES_GROUP] {
                return Err("subject organization is not system:nodes".into());
            }
            if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
                return Err("DNS or IP subjectAltName is required".into());
            }
            if !req.email_addresses.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !req.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            if !exactly_one_of(
                usages,
                [&["digital signature", "key encipherment", "server auth"], &["digital signature", "server auth"]],
            ) {
                return Err("usages did not match [digital signature key encipherment server auth]".into());
            }
            if !req.common_name.starts_with(NODE_PREFIX) {
                return Err(format!("subject common name does not begin with {NODE_PREFIX}"));
            }
            Ok(())
        }
        Signer::KubeApiserverClient => {
            for u in usages {
                if !matches!(u.as_str(), "digital signature" | "key encipherment" | "client auth") {
                    return Err(format!("invalid usage for client certificate: {u}"));
                }
            }
            if !usages.iter().any(|u| u == "client auth") {
                return Err("missing required usage for client certificate: client auth".into());
            }
            Ok(())
        }
        Signer::LegacyUnknown => {
            Err("the legacy-unknown signer does not issue certificates through certificates.k8s.io/v1".into())
        }
    }
}

/// The lifetime of the certificate: `expiration_seconds` (when set) capped by `max`, at
/// least [`MIN_DURATION`].
pub fn duration(expiration_seconds: Option<i64>, max: Duration) -> Duration {
    let requested = expiration_seconds.map(Duration::seconds).unwrap_or(max);
    requested.min(max).max(MIN_DURATION)
}

/// Issue the certificate for an approved, validated request: subject and SANs from the
/// request, key usages and extended key usages exactly `usages`, CA:false, a random serial,
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
            raw_subject: Some(req.subject_der.clone()),
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

    #[test]
    fn parsing_and_bad_input() {
        let pem = csr("system:node:n1", &["system:nodes"], &["n1.example"], &["10.0.0.1"], &[]);
        let r = parse_pem(&pem).unwrap();
        assert_eq!(r.common_name, "system:node:n1");
        assert_eq!(r.organizations, s(&["system:nodes"]));
        assert_eq!(r.dns_names, s(&["n1.example"]));
        assert_eq!(r.ip_addresses, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
        for bad in
            [&b""[..], b"garbage", b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"]
        {
            assert!(parse_pem(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let cert = crate::Ca::generate("x", Duration::days(1), Utc::now()).unwrap();
        assert!(parse_pem(cert.cert_pem().as_bytes()).unwrap_err().to_string().contains("CERTIFICATE REQUEST"));
        // A tampered request fails its self-signature.
        let (_, block) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let mut der = block.contents.clone();
        // Flip a bit of the signature (the last byte): only the verifying parse notices.
        let last = der.len() - 1;
        der[last] ^= 0x01;
        assert!(parse_der(&der).is_err(), "a bad self-signature is refused");
        assert_eq!(parse(&der, false).unwrap(), r, "the unverified parse reads the same request");
        let tampered = crate::pem_encode("CERTIFICATE REQUEST", &der);
        assert!(parse_pem(tampered.as_bytes()).is_err());
        assert_eq!(parse_pem_unverified(tampered.as_bytes()).unwrap(), r);
        assert!(parse_pem_unverified(b"garbage").is_err());
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
                (Err(e), Err(w)) => assert!(e.contains(w), "{what}: {e}"),
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
            assert_eq!(info.serial.len(), 16, "{what}: a 128-bit serial");
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
