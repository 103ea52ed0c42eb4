//! Private keys: generation (ECDSA P-256 by default), loading from PEM (PKCS#8, and PKCS#1 RSA
//! or SEC1 EC keys, which are wrapped into PKCS#8), and the service-account signing key pair.

use std::fmt;
use std::sync::Arc;

use rcgen::PublicKeyData as _;

use super::der::{self, pem_decode_all, pem_encode};
use super::Error;

/// `1.2.840.113549.1.1.1`
const OID_RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
/// `1.2.840.10045.2.1`
const OID_EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];

/// The algorithm of a key pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    /// RSA keys can be loaded, not generated.
    Rsa,
}

/// A private key able to sign certificates. Cheap to clone; `Debug` never shows the key.
#[derive(Clone)]
pub struct KeyPair {
    inner: Arc<rcgen::KeyPair>,
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair").field("algorithm", &self.algorithm()).finish_non_exhaustive()
    }
}

impl KeyPair {
    /// A new ECDSA P-256 key.
    pub fn generate() -> Result<Self, Error> {
        Self::generate_with(KeyAlgorithm::EcdsaP256)
    }

    /// A new key of the given algorithm (RSA generation is not available).
    pub fn generate_with(alg: KeyAlgorithm) -> Result<Self, Error> {
        let sig = match alg {
            KeyAlgorithm::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyAlgorithm::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyAlgorithm::Ed25519 => &rcgen::PKCS_ED25519,
            KeyAlgorithm::Rsa => {
                return Err(Error::UnsupportedKey("RSA keys can be loaded but not generated".into()));
            }
        };
        let inner = rcgen::KeyPair::generate_for(sig)?;
        Ok(KeyPair { inner: Arc::new(inner) })
    }

    /// Load the first private key in `pem`: `PRIVATE KEY` (PKCS#8: ECDSA P-256/P-384, RSA,
    /// Ed25519), `RSA PRIVATE KEY` (PKCS#1) or `EC PRIVATE KEY` (SEC1).
    pub fn from_pem(pem: &str) -> Result<Self, Error> {
        let blocks = pem_decode_all(pem)?;
        let Some(block) = blocks.iter().find(|b| b.label.ends_with("PRIVATE KEY")) else {
            return Err(Error::NoPrivateKey);
        };
        Self::from_block(block)
    }

    /// Load one decoded private-key PEM block (see [`KeyPair::from_pem`] for the labels).
    pub(crate) fn from_block(block: &der::PemBlock) -> Result<Self, Error> {
        match block.label.as_str() {
            "PRIVATE KEY" => Self::from_pkcs8_der(&block.der),
            "RSA PRIVATE KEY" => Self::from_pkcs8_der(&wrap_pkcs1(&block.der)),
            "EC PRIVATE KEY" => Self::from_pkcs8_der(&wrap_sec1(&block.der)?),
            "ENCRYPTED PRIVATE KEY" => Err(Error::UnsupportedKey("encrypted private keys are not supported".into())),
            other => Err(Error::UnsupportedKey(format!("unsupported PEM block {other:?}"))),
        }
    }

    /// Load a PKCS#8 DER private key.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, Error> {
        let inner = rcgen::KeyPair::try_from(der)
            .map_err(|e| Error::UnsupportedKey(format!("cannot load the private key: {e}")))?;
        Ok(KeyPair { inner: Arc::new(inner) })
    }

    pub fn algorithm(&self) -> KeyAlgorithm {
        let alg = self.inner.algorithm();
        if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
            KeyAlgorithm::EcdsaP256
        } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
            KeyAlgorithm::EcdsaP384
        } else if alg == &rcgen::PKCS_ED25519 {
            KeyAlgorithm::Ed25519
        } else {
            KeyAlgorithm::Rsa
        }
    }

    /// The private key, PKCS#8 DER. Secret: never log it.
    pub fn private_key_der(&self) -> &[u8] {
        self.inner.serialized_der()
    }

    /// The private key, PKCS#8 PEM (`PRIVATE KEY`). Secret: never log it.
    pub fn private_key_pem(&self) -> String {
        pem_encode("PRIVATE KEY", self.inner.serialized_der())
    }

    /// The public key, SubjectPublicKeyInfo DER.
    pub fn public_key_der(&self) -> Vec<u8> {
        self.inner.subject_public_key_info()
    }

    /// The public key, SubjectPublicKeyInfo PEM (`PUBLIC KEY`).
    pub fn public_key_pem(&self) -> String {
        pem_encode("PUBLIC KEY", &self.public_key_der())
    }

    /// The raw public key (the SubjectPublicKeyInfo bit string contents).
    pub(crate) fn public_key_raw(&self) -> &[u8] {
        self.inner.public_key_raw()
    }

    /// This key as the signer of what the CA issues. Every signature made with the key goes
    /// through it (tests count them: [`signatures_made`]).
    pub(crate) fn signer(&self) -> Signer<'_> {
        Signer { key: &self.inner, draft: false }
    }

    /// This key's public half, as the issuer of a draft certificate: its signature is empty.
    /// rcgen signs every certificate it writes; the CA signs each draft again once its exact
    /// names are in (`Ca::rewrite_names`), so a signature on the draft would be thrown away.
    pub(crate) fn unsigned(&self) -> Signer<'_> {
        Signer { key: &self.inner, draft: true }
    }
}

/// The CA key as rcgen's issuer (see [`KeyPair::signer`] and [`KeyPair::unsigned`]).
pub(crate) struct Signer<'k> {
    key: &'k rcgen::KeyPair,
    draft: bool,
}

impl rcgen::PublicKeyData for Signer<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.key.der_bytes()
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        self.key.algorithm()
    }
}

impl rcgen::SigningKey for Signer<'_> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        if self.draft {
            return Ok(Vec::new());
        }
        #[cfg(test)]
        SIGNATURES.with(|n| n.set(n.get() + 1));
        rcgen::SigningKey::sign(self.key, msg)
    }
}

#[cfg(test)]
thread_local! {
    static SIGNATURES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Signatures made with CA keys on this thread ([`Signer`]).
#[cfg(test)]
pub(crate) fn signatures_made() -> u64 {
    SIGNATURES.with(std::cell::Cell::get)
}

/// PKCS#1 RSAPrivateKey → PKCS#8 PrivateKeyInfo.
fn wrap_pkcs1(pkcs1: &[u8]) -> Vec<u8> {
    let version = der::tlv(der::TAG_INTEGER, &[0]);
    let alg = der::constructed(der::TAG_SEQUENCE, &[&der::oid(OID_RSA_ENCRYPTION), &der::tlv(der::TAG_NULL, &[])]);
    let key = der::tlv(der::TAG_OCTET_STRING, pkcs1);
    der::constructed(der::TAG_SEQUENCE, &[&version, &alg, &key])
}

/// SEC1 ECPrivateKey (with its curve parameters) → PKCS#8 PrivateKeyInfo.
fn wrap_sec1(sec1: &[u8]) -> Result<Vec<u8>, Error> {
    let bad = || Error::UnsupportedKey("malformed EC PRIVATE KEY".into());
    let (outer, _) = der::read_tlv(sec1).map_err(|_| bad())?;
    if outer.tag != der::TAG_SEQUENCE {
        return Err(bad());
    }
    let parts = der::children(outer.content).map_err(|_| bad())?;
    let curve = parts
        .iter()
        .find(|p| p.tag == der::TAG_CONTEXT_0)
        .ok_or_else(|| Error::UnsupportedKey("EC PRIVATE KEY without curve parameters".into()))?;
    let (curve_oid, _) = der::read_tlv(curve.content).map_err(|_| bad())?;
    if curve_oid.tag != der::TAG_OID {
        return Err(bad());
    }
    let version = der::tlv(der::TAG_INTEGER, &[0]);
    let alg = der::constructed(der::TAG_SEQUENCE, &[&der::oid(OID_EC_PUBLIC_KEY), curve_oid.raw]);
    let key = der::tlv(der::TAG_OCTET_STRING, sec1);
    Ok(der::constructed(der::TAG_SEQUENCE, &[&version, &alg, &key]))
}

/// Whether a SubjectPublicKeyInfo (DER) holds an RSA key.
pub(crate) fn spki_is_rsa(spki: &[u8]) -> bool {
    let rsa = der::oid(OID_RSA_ENCRYPTION);
    der::read_tlv(spki)
        .ok()
        .and_then(|(seq, _)| der::children(seq.content).ok())
        .and_then(|parts| parts.first().map(|alg| alg.content.starts_with(&rsa)))
        .unwrap_or(false)
}

/// The first `PUBLIC KEY` block of `pem`, as SubjectPublicKeyInfo DER (checked to parse).
pub fn public_key_der_from_pem(pem: &str) -> Result<Vec<u8>, Error> {
    let blocks = pem_decode_all(pem)?;
    let block = blocks
        .into_iter()
        .find(|b| b.label == "PUBLIC KEY")
        .ok_or_else(|| Error::Pem("no PUBLIC KEY block found".into()))?;
    use x509_parser::prelude::FromDer as _;
    x509_parser::x509::SubjectPublicKeyInfo::from_der(&block.der)
        .map_err(|e| Error::Pem(format!("invalid PUBLIC KEY: {e}")))?;
    Ok(block.der)
}

/// The service-account token signing key pair, PEM encoded. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SaKeyPair {
    /// PKCS#8 `PRIVATE KEY`. Secret.
    pub private_key_pem: String,
    /// SubjectPublicKeyInfo `PUBLIC KEY`.
    pub public_key_pem: String,
}

impl fmt::Debug for SaKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaKeyPair").field("public_key_pem", &self.public_key_pem).finish_non_exhaustive()
    }
}

/// A new ECDSA P-256 key pair for signing service-account tokens (ES256).
pub fn generate_sa_keypair() -> Result<SaKeyPair, Error> {
    let key = KeyPair::generate()?;
    Ok(SaKeyPair { private_key_pem: key.private_key_pem(), public_key_pem: key.public_key_pem() })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_round_trip_through_pem() {
        for alg in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::EcdsaP384, KeyAlgorithm::Ed25519] {
            let k = KeyPair::generate_with(alg).unwrap();
            assert_eq!(k.algorithm(), alg);
            let pem = k.private_key_pem();
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
            let back = KeyPair::from_pem(&pem).unwrap();
            assert_eq!(back.algorithm(), alg);
            assert_eq!(back.public_key_der(), k.public_key_der());
            assert_eq!(public_key_der_from_pem(&k.public_key_pem()).unwrap(), k.public_key_der());
            assert!(!spki_is_rsa(&k.public_key_der()));
        }
        assert!(KeyPair::generate_with(KeyAlgorithm::Rsa).is_err());
    }

    #[test]
    fn debug_output_hides_the_key() {
        let k = KeyPair::generate().unwrap();
        let shown = format!("{k:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
        let sa = generate_sa_keypair().unwrap();
        assert!(!format!("{sa:?}").contains("PRIVATE KEY"));
        assert!(sa.private_key_pem.contains("BEGIN PRIVATE KEY"));
        assert!(sa.public_key_pem.contains("BEGIN PUBLIC KEY"));
        assert_eq!(KeyPair::from_pem(&sa.private_key_pem).unwrap().public_key_pem(), sa.public_key_pem);
    }

    // Generated by openssl (see testdata/): SEC1 EC, PKCS#8 Ed25519, PKCS#1 RSA.
    const SEC1_P256: &str = include_str!("testdata/ec_sec1.pem");
    const PKCS8_ED25519: &str = include_str!("testdata/ed25519_pkcs8.pem");
    const PKCS1_RSA: &str = include_str!("testdata/rsa_ca_pkcs1.key");

    #[test]
    fn loads_sec1_ed25519_and_pkcs1_keys_from_openssl() {
        let k = KeyPair::from_pem(SEC1_P256).unwrap();
        assert_eq!(k.algorithm(), KeyAlgorithm::EcdsaP256);
        // Stored back as PKCS#8, which loads again.
        assert_eq!(KeyPair::from_pem(&k.private_key_pem()).unwrap().public_key_der(), k.public_key_der());
        let e = KeyPair::from_pem(PKCS8_ED25519).unwrap();
        assert_eq!(e.algorithm(), KeyAlgorithm::Ed25519);
        let r = KeyPair::from_pem(PKCS1_RSA).unwrap();
        assert_eq!(r.algorithm(), KeyAlgorithm::Rsa);
        assert!(spki_is_rsa(&r.public_key_der()));
        assert_eq!(KeyPair::from_pem(&r.private_key_pem()).unwrap().public_key_der(), r.public_key_der());
    }

    #[test]
    fn rejects_what_is_not_a_usable_key() {
        assert!(matches!(KeyPair::from_pem("no pem here"), Err(Error::NoPrivateKey)));
        let garbage = pem_encode("PRIVATE KEY", b"not a key");
        assert!(matches!(KeyPair::from_pem(&garbage), Err(Error::UnsupportedKey(_))));
        let enc = pem_encode("ENCRYPTED PRIVATE KEY", b"x");
        assert!(KeyPair::from_pem(&enc).is_err());
    }
}
