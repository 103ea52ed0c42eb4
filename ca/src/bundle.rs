//! A signer bundle: a CA certificate file that may hold several CA certificates (during a
//! rotation, the new CA and the old one), and the private key of one of them.
//!
//! - The certificate whose public key matches the key signs ([`SignerBundle::signer`]); when
//!   several match, the first one in the file.
//! - The trust bundle is every CA certificate of the file that has not expired at `now`
//!   ([`SignerBundle::trust_bundle_der`], [`trust_bundle`]), in file order, without
//!   duplicates. A CA that is not valid yet is kept, so that it can be distributed ahead of a
//!   rotation. Certificates that are not CAs (basicConstraints cA false) are ignored: never
//!   trusted, never signing.
//!
//! A file with a block that does not parse is rejected as a whole: a half-read rotation must
//! not silently drop a trusted CA.

use chrono::{DateTime, Utc};

use crate::{certificates_from_pem, parse_certificate_der, pem_encode, Ca, CertInfo, Error, KeyPair, Result};

/// One CA certificate of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleCert {
    pub der: Vec<u8>,
    pub info: CertInfo,
}

impl BundleCert {
    /// Not expired at `now` (NotBefore is not checked: see the module documentation).
    pub fn unexpired_at(&self, now: DateTime<Utc>) -> bool {
        now <= self.info.not_after
    }
}

/// The CA certificates of a PEM file, in order, without duplicates; certificates that are
/// not CAs are left out. Fails when a block does not parse or no CA certificate is left.
pub fn ca_certificates(cert_pem: &str) -> Result<Vec<BundleCert>> {
    let mut out: Vec<BundleCert> = Vec::new();
    for der in certificates_from_pem(cert_pem)? {
        let info = parse_certificate_der(&der)?;
        if info.is_ca && !out.iter().any(|c| c.der == der) {
            out.push(BundleCert { der, info });
        }
    }
    if out.is_empty() {
        return Err(Error::NotCa("the file holds no CA certificate".into()));
    }
    Ok(out)
}

/// The trust bundle of a CA certificate file at `now` (DER): every CA certificate not
/// expired. Fails like [`ca_certificates`], and with [`Error::CaExpired`] (the latest
/// NotAfter) when every CA has expired.
pub fn trust_bundle(cert_pem: &str, now: DateTime<Utc>) -> Result<Vec<Vec<u8>>> {
    let cas = ca_certificates(cert_pem)?;
    let trusted = unexpired(&cas, now);
    if trusted.is_empty() {
        let latest = cas.iter().map(|c| c.info.not_after).max().unwrap_or(now);
        return Err(Error::CaExpired(latest));
    }
    Ok(trusted)
}

fn unexpired(cas: &[BundleCert], now: DateTime<Utc>) -> Vec<Vec<u8>> {
    cas.iter().filter(|c| c.unexpired_at(now)).map(|c| c.der.clone()).collect()
}

/// CA certificates and the signing CA among them. Cheap to clone; `Debug` never shows the
/// key.
#[derive(Debug, Clone)]
pub struct SignerBundle {
    signer: Ca,
    cas: Vec<BundleCert>,
}

impl SignerBundle {
    /// Load a certificate file (one or more `CERTIFICATE` blocks) and the private key of one
    /// of its CAs. Fails when a block does not parse, when no certificate matches the key
    /// ([`Error::KeyMismatch`]), or when the matching certificate cannot sign
    /// ([`Error::NotCa`]).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<SignerBundle> {
        let key = KeyPair::from_pem(key_pem)?;
        let all = certificates_from_pem(cert_pem)?;
        let mut infos = Vec::with_capacity(all.len());
        for der in &all {
            infos.push(parse_certificate_der(der)?);
        }
        let spki = key.public_key_der();
        let Some(i) = infos.iter().position(|info| info.public_key_der == spki) else {
            return Err(Error::KeyMismatch);
        };
        let signer = Ca::from_parts(all[i].clone(), key)?;
        let cas = ca_certificates(cert_pem)?;
        Ok(SignerBundle { signer, cas })
    }

    /// A bundle of exactly one CA.
    pub fn single(ca: Ca) -> SignerBundle {
        let cas = vec![BundleCert { der: ca.cert_der().to_vec(), info: ca.info().clone() }];
        SignerBundle { signer: ca, cas }
    }

    /// The CA that signs: the certificate matching the key.
    pub fn signer(&self) -> &Ca {
        &self.signer
    }

    /// Every CA certificate of the file, in order, without duplicates.
    pub fn ca_certificates(&self) -> &[BundleCert] {
        &self.cas
    }

    /// The CA certificates not expired at `now`, DER.
    pub fn trust_bundle_der(&self, now: DateTime<Utc>) -> Vec<Vec<u8>> {
        unexpired(&self.cas, now)
    }

    /// The CA certificates not expired at `now`, PEM.
    pub fn trust_bundle_pem(&self, now: DateTime<Utc>) -> String {
        self.trust_bundle_der(now).iter().map(|der| pem_encode("CERTIFICATE", der)).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::IssueParams;
    use chrono::{Duration, TimeZone as _};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 6, 1, 0, 0, 0).unwrap()
    }

    /// The fixture: an old CA (made a year before t0, valid two years), a new CA (made at t0,
    /// valid ten years), a short-lived CA that expired before t0, and a leaf certificate.
    struct World {
        old: Ca,
        new: Ca,
        expired: Ca,
        leaf_pem: String,
    }

    fn world() -> World {
        let old = Ca::generate("old-ca", Duration::days(730), t0() - Duration::days(365)).unwrap();
        let new = Ca::generate("new-ca", Duration::days(3650), t0()).unwrap();
        let expired = Ca::generate("expired-ca", Duration::days(30), t0() - Duration::days(60)).unwrap();
        let leaf = old.issue(IssueParams::client("jane", vec![], Duration::days(1)), t0()).unwrap();
        World { old, new, expired, leaf_pem: leaf.cert_pem }
    }

    type Files = fn(&World) -> (String, String);
    type Want = std::result::Result<(&'static str, &'static [&'static str]), &'static str>;

    /// name, (cert file, key file), when, wanted (signer CN, trusted CNs) or error text.
    const CASES: &[(&str, Files, i64, Want)] = &[
        ("one CA", |w| (w.old.cert_pem().into(), w.old.key_pem()), 0, Ok(("old-ca", &["old-ca"]))),
        (
            "rotation: new key signs, both trusted",
            |w| (format!("{}{}", w.new.cert_pem(), w.old.cert_pem()), w.new.key_pem()),
            0,
            Ok(("new-ca", &["new-ca", "old-ca"])),
        ),
        (
            "rotation, old first in the file: still the key decides",
            |w| (format!("{}{}", w.old.cert_pem(), w.new.cert_pem()), w.new.key_pem()),
            0,
            Ok(("new-ca", &["old-ca", "new-ca"])),
        ),
        (
            "rotation not finished: the old key still signs",
            |w| (format!("{}{}", w.new.cert_pem(), w.old.cert_pem()), w.old.key_pem()),
            0,
            Ok(("old-ca", &["new-ca", "old-ca"])),
        ),
        (
            "the old CA has expired: no longer trusted",
            |w| (format!("{}{}", w.new.cert_pem(), w.old.cert_pem()), w.new.key_pem()),
            400,
            Ok(("new-ca", &["new-ca"])),
        ),
        (
            "an expired CA is never trusted",
            |w| (format!("{}{}", w.new.cert_pem(), w.expired.cert_pem()), w.new.key_pem()),
            0,
            Ok(("new-ca", &["new-ca"])),
        ),
        (
            "a leaf certificate in the file is ignored",
            |w| (format!("{}{}", w.leaf_pem, w.old.cert_pem()), w.old.key_pem()),
            0,
            Ok(("old-ca", &["old-ca"])),
        ),
        (
            "duplicates are trusted once",
            |w| (format!("{}{}", w.old.cert_pem(), w.old.cert_pem()), w.old.key_pem()),
            0,
            Ok(("old-ca", &["old-ca"])),
        ),
        (
            "a key that matches no certificate",
            |w| (format!("{}{}", w.new.cert_pem(), w.old.cert_pem()), w.expired.key_pem()),
            0,
            Err("does not belong"),
        ),
        ("no certificate at all", |w| ("junk".into(), w.old.key_pem()), 0, Err("no CERTIFICATE block")),
        (
            "a block that does not parse spoils the file",
            |w| {
                let junk = pem_encode("CERTIFICATE", b"\x30\x03\x02\x01\x01");
                (format!("{}{junk}", w.old.cert_pem()), w.old.key_pem())
            },
            0,
            Err("invalid certificate"),
        ),
        (
            "a key file that is not a key",
            |w| (w.old.cert_pem().into(), w.old.cert_pem().into()),
            0,
            Err("no private key"),
        ),
    ];

    #[test]
    fn signer_and_trust_bundle_table() {
        let w = world();
        for (name, files, days, want) in CASES {
            let (cert, key) = files(&w);
            let now = t0() + Duration::days(*days);
            match (SignerBundle::from_pem(&cert, &key), want) {
                (Ok(b), Ok((signer, trusted))) => {
                    assert_eq!(b.signer().common_name(), *signer, "{name}: signer");
                    let cns: Vec<String> =
                        b.trust_bundle_der(now).iter().map(|d| parse_certificate_der(d).unwrap().common_name).collect();
                    assert_eq!(cns, *trusted, "{name}: trust bundle");
                    let pem_cns: Vec<String> = certificates_from_pem(&b.trust_bundle_pem(now))
                        .unwrap()
                        .iter()
                        .map(|d| parse_certificate_der(d).unwrap().common_name)
                        .collect();
                    assert_eq!(pem_cns, *trusted, "{name}: PEM trust bundle");
                    // The free function agrees (no key needed).
                    assert_eq!(trust_bundle(&cert, now).unwrap(), b.trust_bundle_der(now), "{name}: trust_bundle()");
                    // The signer issues certificates that chain to it.
                    let issued = b.signer().issue(IssueParams::client("u", vec![], Duration::hours(1)), t0()).unwrap();
                    assert!(b.signer().signed(&issued.cert_der), "{name}: issued by the signer");
                    assert!(!format!("{b:?}").contains("PRIVATE KEY"), "{name}: Debug shows no key");
                }
                (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{name}: error {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn trust_bundle_of_only_expired_cas_is_an_error() {
        let w = world();
        let err = trust_bundle(w.expired.cert_pem(), t0()).unwrap_err();
        assert_eq!(err, Error::CaExpired(w.expired.not_after()));
        let err = trust_bundle(&w.leaf_pem, t0()).unwrap_err();
        assert!(err.to_string().contains("no CA certificate"), "{err}");
        let single = SignerBundle::single(w.new.clone());
        assert_eq!(single.trust_bundle_der(t0()), vec![w.new.cert_der().to_vec()]);
        assert_eq!(single.ca_certificates().len(), 1);
    }
}
