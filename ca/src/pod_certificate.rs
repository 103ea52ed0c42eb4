//! Pod certificates (PodCertificateRequest, `certificates.k8s.io`): the rules on the key a
//! kubelet sends and on the chain a signer answers with, read as kube-apiserver reads them
//! (Go's `crypto/x509`) — no I/O, `now` as a parameter. The apiserver's validation and a
//! signer both call these.
//!
//! What enters: a PKIX public key (`spec.pkixPublicKey`, DER) and its proof of possession
//! over the pod UID, or a stub PKCS#10 request (`spec.stubPKCS10Request`, DER); a
//! `status.certificateChain`. What leaves: the key's [`KeyType`], or the [`KeyProblem`] that
//! refuses it; whether a signature verifies; the issued leaf's fields.
//!
//! Keys are read as Go's `x509.ParsePKIXPublicKey` reads them: RSA with NULL parameters and
//! a positive modulus and exponent; ECDSA on a named curve (P-224, P-256, P-384, P-521) with
//! an uncompressed point; Ed25519 and X25519 without parameters, 32 bytes; DSA. The API
//! accepts RSA with a 3072- or 4096-bit modulus, ECDSA on P-256, P-384 or P-521, and Ed25519
//! ([`KeyType`]); a key Go reads but the API refuses gets upstream's message for its kind.
//!
//! Signatures, as upstream checks them:
//! - the proof of possession (v1beta1's deprecated form) signs the pod UID's ASCII bytes:
//!   RSASSA-PSS over SHA-256 with any salt length (Go's `rsa.VerifyPSS` with nil options),
//!   ECDSA (ASN.1) over the SHA-256 digest whatever the curve, Ed25519 over the bytes;
//! - a stub request's self-signature, as `CertificateRequest.CheckSignature`: RSA PKCS#1 v1.5
//!   or PSS (salt as long as the digest) with SHA-256/384/512, ECDSA with SHA-256/384/512,
//!   Ed25519. SHA-1 signatures are refused (Go still accepts them on requests).

use rsa::traits::PublicKeyParts as _;
use sha2::Digest as _;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer as _;

use crate::der::{read_der, TAG_BIT_STRING, TAG_INTEGER, TAG_NULL, TAG_OID, TAG_SEQUENCE};

/// Largest `pkixPublicKey` and `proofOfPossession` upstream accepts (bytes).
pub const MAX_PKIX_PUBLIC_KEY_SIZE: usize = 10 * 1024;
pub const MAX_PROOF_OF_POSSESSION_SIZE: usize = 10 * 1024;
/// Largest `stubPKCS10Request` (bytes).
pub const MAX_STUB_PKCS10_REQUEST_SIZE: usize = 10 * 1024;
/// Largest `status.certificateChain` (bytes).
pub const MAX_CERTIFICATE_CHAIN_SIZE: usize = 100 * 1024;

/// The condition types of a PodCertificateRequest and the reasons the API names.
pub mod condition {
    pub const ISSUED: &str = "Issued";
    pub const DENIED: &str = "Denied";
    pub const FAILED: &str = "Failed";
    /// The three terminal types: at most one of them, with status `True`.
    pub const TERMINAL: [&str; 3] = [ISSUED, DENIED, FAILED];
    /// Reason of a Denied condition when the signer does not support the key type.
    pub const REASON_UNSUPPORTED_KEY_TYPE: &str = "UnsupportedKeyType";
    /// Reason of a Denied condition when the signer refuses `unverifiedUserAnnotations`.
    pub const REASON_INVALID_USER_ANNOTATIONS: &str = "InvalidUnverifiedUserAnnotations";
}

/// A named elliptic curve Go reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P224,
    P256,
    P384,
    P521,
}

impl Curve {
    /// Go's `Params().Name`.
    pub fn name(self) -> &'static str {
        match self {
            Curve::P224 => "P-224",
            Curve::P256 => "P-256",
            Curve::P384 => "P-384",
            Curve::P521 => "P-521",
        }
    }

    fn from_oid(oid: &[u8]) -> Option<Curve> {
        match oid {
            [0x2b, 0x81, 0x04, 0x00, 0x21] => Some(Curve::P224),
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07] => Some(Curve::P256),
            [0x2b, 0x81, 0x04, 0x00, 0x22] => Some(Curve::P384),
            [0x2b, 0x81, 0x04, 0x00, 0x23] => Some(Curve::P521),
            _ => None,
        }
    }

    fn field_bytes(self) -> usize {
        match self {
            Curve::P224 => 28,
            Curve::P256 => 32,
            Curve::P384 => 48,
            Curve::P521 => 66,
        }
    }
}

/// A public key as Go's `x509.ParsePKIXPublicKey` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// Modulus and exponent, big-endian without leading zero bytes.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The uncompressed point (`04 || X || Y`).
    Ecdsa {
        curve: Curve,
        point: Vec<u8>,
    },
    Ed25519([u8; 32]),
    /// A key Go reads that is none of the above (`X25519`, `DSA`).
    Other(&'static str),
}

impl PublicKey {
    /// RSA: Go's `pub.Size()*8`, the modulus length in whole bytes, in bits.
    fn rsa_size_bits(n: &[u8]) -> usize {
        n.len() * 8
    }
}

/// The key types the PodCertificateRequest API accepts, named as the API names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyType {
    Rsa3072,
    Rsa4096,
    EcdsaP256,
    EcdsaP384,
    EcdsaP521,
    Ed25519,
}

impl KeyType {
    pub const ALL: [KeyType; 6] = [
        KeyType::Rsa3072,
        KeyType::Rsa4096,
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::EcdsaP521,
        KeyType::Ed25519,
    ];

    /// `RSA3072`, `ECDSAP256`, `ED25519`...: the API documentation's names.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Rsa3072 => "RSA3072",
            KeyType::Rsa4096 => "RSA4096",
            KeyType::EcdsaP256 => "ECDSAP256",
            KeyType::EcdsaP384 => "ECDSAP384",
            KeyType::EcdsaP521 => "ECDSAP521",
            KeyType::Ed25519 => "ED25519",
        }
    }
}

impl std::fmt::Display for KeyType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a key is refused; [`KeyProblem::detail`] is upstream's message, [`KeyProblem::shown`]
/// the value its field error shows (None: the field's own bytes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    /// Go's reader refuses it.
    #[error("must be a valid PKIX-serialized public key")]
    Unparseable,
    /// An ECDSA key on a curve the API refuses.
    #[error("elliptic public keys must use curve P256 or P384")]
    Curve(Curve),
    /// An RSA key of a size the API refuses (bits).
    #[error("RSA keys must have modulus size 3072 or 4096")]
    RsaSize(usize),
    /// A kind of key Go reads that the API refuses.
    #[error("unknown public key type; supported types are Ed25519, ECDSA, and RSA")]
    UnknownType(&'static str),
}

impl KeyProblem {
    pub fn detail(&self) -> String {
        self.to_string()
    }

    /// The value upstream's field error shows: `curve P-224`, `2048-bit modulus`; None for
    /// the field's bytes.
    pub fn shown(&self) -> Option<String> {
        match self {
            KeyProblem::Curve(c) => Some(format!("curve {}", c.name())),
            KeyProblem::RsaSize(bits) => Some(format!("{bits}-bit modulus")),
            KeyProblem::Unparseable | KeyProblem::UnknownType(_) => None,
        }
    }
}

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_X25519: &[u8] = &[0x2b, 0x65, 0x6e];
const OID_DSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01];

/// Go's `cryptobyte` integer rule: not empty, no redundant leading byte.
fn minimal_integer(content: &[u8]) -> bool {
    match content {
        [] => false,
        [0x00, next, ..] => next & 0x80 != 0,
        [0xff, next, ..] => next & 0x80 == 0,
        _ => true,
    }
}

/// A positive minimal INTEGER's magnitude (big-endian, no leading zeros); None otherwise.
fn positive_integer(content: &[u8]) -> Option<Vec<u8>> {
    if !minimal_integer(content) || content[0] & 0x80 != 0 {
        return None;
    }
    let magnitude: Vec<u8> = content.iter().copied().skip_while(|b| *b == 0).collect();
    (!magnitude.is_empty()).then_some(magnitude)
}

/// Read a PKIX (SubjectPublicKeyInfo) key as Go's `x509.ParsePKIXPublicKey` does.
pub fn parse_pkix(der: &[u8]) -> Result<PublicKey, KeyProblem> {
    let bad = |_| KeyProblem::Unparseable;
    let (spki, rest) = read_der(der).map_err(bad)?;
    if spki.tag != TAG_SEQUENCE || !rest.is_empty() {
        return Err(KeyProblem::Unparseable);
    }
    let (alg, rest) = read_der(spki.content).map_err(bad)?;
    let (bits, rest) = read_der(rest).map_err(bad)?;
    if alg.tag != TAG_SEQUENCE || bits.tag != TAG_BIT_STRING || !rest.is_empty() {
        return Err(KeyProblem::Unparseable);
    }
    let (oid, params) = read_der(alg.content).map_err(bad)?;
    if oid.tag != TAG_OID {
        return Err(KeyProblem::Unparseable);
    }
    // The key bits: whole bytes only.
    let key = match bits.content {
        [0, key @ ..] => key,
        _ => return Err(KeyProblem::Unparseable),
    };
    match oid.content {
        OID_RSA => parse_rsa(params, key),
        OID_EC => parse_ec(params, key),
        OID_ED25519 | OID_X25519 => {
            if !params.is_empty() || key.len() != 32 {
                return Err(KeyProblem::Unparseable);
            }
            if oid.content == OID_X25519 {
                return Ok(PublicKey::Other("X25519"));
            }
            let mut k = [0u8; 32];
            k.copy_from_slice(key);
            Ok(PublicKey::Ed25519(k))
        }
        OID_DSA => parse_dsa(params, key),
        _ => Err(KeyProblem::Unparseable),
    }
}

fn parse_rsa(params: &[u8], key: &[u8]) -> Result<PublicKey, KeyProblem> {
    if params != [TAG_NULL, 0] {
        return Err(KeyProblem::Unparseable);
    }
    let bad = |_| KeyProblem::Unparseable;
    let (seq, _) = read_der(key).map_err(bad)?;
    if seq.tag != TAG_SEQUENCE {
        return Err(KeyProblem::Unparseable);
    }
    let (n, rest) = read_der(seq.content).map_err(bad)?;
    let (e, _) = read_der(rest).map_err(bad)?;
    if n.tag != TAG_INTEGER || e.tag != TAG_INTEGER || !minimal_integer(n.content) || !minimal_integer(e.content) {
        return Err(KeyProblem::Unparseable);
    }
    // Go reads the exponent into an int.
    if e.content.len() > 8 {
        return Err(KeyProblem::Unparseable);
    }
    let n = positive_integer(n.content).ok_or(KeyProblem::Unparseable)?;
    let e = positive_integer(e.content).ok_or(KeyProblem::Unparseable)?;
    Ok(PublicKey::Rsa { n, e })
}

fn parse_ec(params: &[u8], key: &[u8]) -> Result<PublicKey, KeyProblem> {
    let (oid, rest) = read_der(params).map_err(|_| KeyProblem::Unparseable)?;
    if oid.tag != TAG_OID || !rest.is_empty() {
        return Err(KeyProblem::Unparseable);
    }
    let curve = Curve::from_oid(oid.content).ok_or(KeyProblem::Unparseable)?;
    // `elliptic.Unmarshal`: uncompressed points only, on the curve.
    if key.len() != 1 + 2 * curve.field_bytes() || key[0] != 4 {
        return Err(KeyProblem::Unparseable);
    }
    let on_curve = match curve {
        Curve::P256 => p256::ecdsa::VerifyingKey::from_sec1_bytes(key).is_ok(),
        Curve::P384 => p384::ecdsa::VerifyingKey::from_sec1_bytes(key).is_ok(),
        Curve::P521 => p521::ecdsa::VerifyingKey::from_sec1_bytes(key).is_ok(),
        // No reader here checks P-224 points; the API refuses the curve either way.
        Curve::P224 => true,
    };
    if !on_curve {
        return Err(KeyProblem::Unparseable);
    }
    Ok(PublicKey::Ecdsa { curve, point: key.to_vec() })
}

fn parse_dsa(params: &[u8], key: &[u8]) -> Result<PublicKey, KeyProblem> {
    let bad = |_| KeyProblem::Unparseable;
    let (y, _) = read_der(key).map_err(bad)?;
    let (pqg, _) = read_der(params).map_err(bad)?;
    if y.tag != TAG_INTEGER || pqg.tag != TAG_SEQUENCE {
        return Err(KeyProblem::Unparseable);
    }
    let mut rest = pqg.content;
    for _ in 0..3 {
        let (i, r) = read_der(rest).map_err(bad)?;
        if i.tag != TAG_INTEGER || positive_integer(i.content).is_none() {
            return Err(KeyProblem::Unparseable);
        }
        rest = r;
    }
    positive_integer(y.content).ok_or(KeyProblem::Unparseable)?;
    Ok(PublicKey::Other("DSA"))
}

/// The API's key rule on a key Go read (`ValidatePodCertificateRequestCreate`).
pub fn key_type(key: &PublicKey) -> Result<KeyType, KeyProblem> {
    match key {
        PublicKey::Ed25519(_) => Ok(KeyType::Ed25519),
        PublicKey::Ecdsa { curve: Curve::P256, .. } => Ok(KeyType::EcdsaP256),
        PublicKey::Ecdsa { curve: Curve::P384, .. } => Ok(KeyType::EcdsaP384),
        PublicKey::Ecdsa { curve: Curve::P521, .. } => Ok(KeyType::EcdsaP521),
        PublicKey::Ecdsa { curve, .. } => Err(KeyProblem::Curve(*curve)),
        PublicKey::Rsa { n, .. } => match PublicKey::rsa_size_bits(n) {
            3072 => Ok(KeyType::Rsa3072),
            4096 => Ok(KeyType::Rsa4096),
            bits => Err(KeyProblem::RsaSize(bits)),
        },
        PublicKey::Other(kind) => Err(KeyProblem::UnknownType(kind)),
    }
}

/// Read `der` with [`parse_pkix`] and apply [`key_type`].
pub fn accepted_key(der: &[u8]) -> Result<(PublicKey, KeyType), KeyProblem> {
    let key = parse_pkix(der)?;
    let t = key_type(&key)?;
    Ok((key, t))
}

/// A digest of the message a signature covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    fn digest(self, msg: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => sha2::Sha256::digest(msg).to_vec(),
            Hash::Sha384 => sha2::Sha384::digest(msg).to_vec(),
            Hash::Sha512 => sha2::Sha512::digest(msg).to_vec(),
        }
    }
}

/// A signature scheme, as Go's `checkSignature` applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    RsaPkcs1(Hash),
    /// RSASSA-PSS; `any_salt`: any salt length (Go's `PSSSaltLengthAuto`), else the digest's.
    RsaPss {
        hash: Hash,
        any_salt: bool,
    },
    Ecdsa(Hash),
    Ed25519,
}

/// Whether `sig` is `key`'s signature of `msg` under `scheme` (a scheme for another kind of
/// key is false).
pub fn verify(key: &PublicKey, scheme: Scheme, msg: &[u8], sig: &[u8]) -> bool {
    match (key, scheme) {
        (PublicKey::Ed25519(k), Scheme::Ed25519) => {
            ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, k).verify(msg, sig).is_ok()
        }
        (PublicKey::Ecdsa { curve, point }, Scheme::Ecdsa(hash)) => verify_ecdsa(*curve, point, &hash.digest(msg), sig),
        (PublicKey::Rsa { n, e }, Scheme::RsaPkcs1(hash)) => verify_rsa_pkcs1(n, e, hash, msg, sig),
        (PublicKey::Rsa { n, e }, Scheme::RsaPss { hash: Hash::Sha256, any_salt }) => {
            verify_rsa_pss_sha256(n, e, &Hash::Sha256.digest(msg), sig, any_salt)
        }
        (PublicKey::Rsa { n, e }, Scheme::RsaPss { hash, any_salt: false }) => verify_rsa_pss(n, e, hash, msg, sig),
        _ => false,
    }
}

/// ECDSA over a digest, as Go's `ecdsa.VerifyASN1`: a digest longer than the curve order is
/// cut to its leading bytes (the orders here are whole bytes, P-521's excepted, whose
/// digests are all shorter), a shorter one is read as a smaller integer.
fn verify_ecdsa(curve: Curve, point: &[u8], digest: &[u8], sig: &[u8]) -> bool {
    use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
    match curve {
        Curve::P256 => {
            let (Ok(k), Ok(s)) =
                (p256::ecdsa::VerifyingKey::from_sec1_bytes(point), p256::ecdsa::Signature::from_der(sig))
            else {
                return false;
            };
            k.verify_prehash(digest, &s).is_ok()
        }
        Curve::P384 => {
            let (Ok(k), Ok(s)) =
                (p384::ecdsa::VerifyingKey::from_sec1_bytes(point), p384::ecdsa::Signature::from_der(sig))
            else {
                return false;
            };
            k.verify_prehash(digest, &s).is_ok()
        }
        Curve::P521 => {
            let (Ok(k), Ok(s)) =
                (p521::ecdsa::VerifyingKey::from_sec1_bytes(point), p521::ecdsa::Signature::from_der(sig))
            else {
                return false;
            };
            // The reader refuses digests under half the field: pad on the left, which is
            // the same integer.
            let mut padded = vec![0u8; curve.field_bytes().saturating_sub(digest.len())];
            padded.extend_from_slice(digest);
            k.verify_prehash(&padded, &s).is_ok()
        }
        Curve::P224 => false,
    }
}

fn rsa_key(n: &[u8], e: &[u8]) -> Option<rsa::RsaPublicKey> {
    let n = rsa::BigUint::from_bytes_be(n);
    let e = rsa::BigUint::from_bytes_be(e);
    // Keys up to 8192 bits, as ring's verifiers take.
    rsa::RsaPublicKey::new_with_max_size(n, e, 8192).ok()
}

/// `RSAPublicKey` DER, as ring's verifiers read it.
fn rsa_public_key_der(n: &[u8], e: &[u8]) -> Vec<u8> {
    let int = |v: &[u8]| {
        let mut c = Vec::with_capacity(v.len() + 1);
        if v.first().is_some_and(|b| b & 0x80 != 0) {
            c.push(0);
        }
        c.extend_from_slice(v);
        crate::der::tlv(TAG_INTEGER, &c)
    };
    crate::der::tlv(TAG_SEQUENCE, &[int(n), int(e)].concat())
}

fn verify_rsa_pkcs1(n: &[u8], e: &[u8], hash: Hash, msg: &[u8], sig: &[u8]) -> bool {
    let alg: &dyn ring::signature::VerificationAlgorithm = match hash {
        Hash::Sha256 => &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        Hash::Sha384 => &ring::signature::RSA_PKCS1_2048_8192_SHA384,
        Hash::Sha512 => &ring::signature::RSA_PKCS1_2048_8192_SHA512,
    };
    ring::signature::UnparsedPublicKey::new(alg, rsa_public_key_der(n, e)).verify(msg, sig).is_ok()
}

fn verify_rsa_pss(n: &[u8], e: &[u8], hash: Hash, msg: &[u8], sig: &[u8]) -> bool {
    let alg: &dyn ring::signature::VerificationAlgorithm = match hash {
        Hash::Sha256 => &ring::signature::RSA_PSS_2048_8192_SHA256,
        Hash::Sha384 => &ring::signature::RSA_PSS_2048_8192_SHA384,
        Hash::Sha512 => &ring::signature::RSA_PSS_2048_8192_SHA512,
    };
    ring::signature::UnparsedPublicKey::new(alg, rsa_public_key_der(n, e)).verify(msg, sig).is_ok()
}

/// RSASSA-PSS with SHA-256 over `digest`. With `any_salt` the salt length is read from the
/// encoded message (the position of the 0x01 that ends the padding, RFC 8017 9.1.2 steps
/// 7-10) and the signature is then verified with that length; otherwise it is the digest's.
fn verify_rsa_pss_sha256(n: &[u8], e: &[u8], digest: &[u8], sig: &[u8], any_salt: bool) -> bool {
    let Some(key) = rsa_key(n, e) else { return false };
    let salt = if any_salt { pss_salt_len(&key, sig) } else { Some(32) };
    let Some(salt) = salt else { return false };
    let scheme = rsa::Pss::new_with_salt::<sha2::Sha256>(salt);
    key.verify(scheme, digest, sig).is_ok()
}

/// The salt length of a PSS signature with SHA-256 and MGF1-SHA-256; None when the encoded
/// message is not one.
fn pss_salt_len(key: &rsa::RsaPublicKey, sig: &[u8]) -> Option<usize> {
    const H: usize = 32;
    let key_len = key.size();
    if sig.len() != key_len {
        return None;
    }
    let s = rsa::BigUint::from_bytes_be(sig);
    if &s >= key.n() {
        return None;
    }
    let m = s.modpow(key.e(), key.n()).to_bytes_be();
    let em_bits = key.n().bits() - 1;
    let em_len = em_bits.div_ceil(8);
    if m.len() > em_len || em_len < H + 2 {
        return None;
    }
    let mut em = vec![0u8; em_len - m.len()];
    em.extend_from_slice(&m);
    if em[em_len - 1] != 0xbc {
        return None;
    }
    let (masked_db, rest) = em.split_at(em_len - H - 1);
    let h = &rest[..H];
    // dbMask = MGF1-SHA-256(H, len(maskedDB)).
    let mut db = masked_db.to_vec();
    for (counter, chunk) in db.chunks_mut(H).enumerate() {
        let c = u32::try_from(counter).ok()?;
        let mask = sha2::Sha256::new().chain_update(h).chain_update(c.to_be_bytes()).finalize();
        for (b, m) in chunk.iter_mut().zip(mask.iter()) {
            *b ^= m;
        }
    }
    db[0] &= 0xff >> (8 * em_len - em_bits);
    let one = db.iter().position(|b| *b != 0)?;
    (db[one] == 1).then(|| db.len() - one - 1)
}

/// The proof of possession of v1beta1's `pkixPublicKey`: the pod UID's ASCII bytes signed
/// as the API documents it.
pub fn verify_proof_of_possession(key: &PublicKey, pod_uid: &str, proof: &[u8]) -> bool {
    let scheme = match key {
        PublicKey::Ed25519(_) => Scheme::Ed25519,
        PublicKey::Ecdsa { .. } => Scheme::Ecdsa(Hash::Sha256),
        PublicKey::Rsa { .. } => Scheme::RsaPss { hash: Hash::Sha256, any_salt: true },
        PublicKey::Other(_) => return false,
    };
    verify(key, scheme, pod_uid.as_bytes(), proof)
}

/// Why a stub PKCS#10 request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StubProblem {
    /// Not one DER PKCS#10 request.
    #[error("must be a valid DER-serialized PKCS#10 certificate request")]
    Malformed,
    /// Its key is refused ([`KeyProblem`]).
    #[error("{0}")]
    Key(KeyProblem),
    /// Its self-signature does not verify, or uses an algorithm not checked here.
    #[error("could not verify the request's signature")]
    Signature,
}

/// A stub request whose self-signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubRequest {
    /// SubjectPublicKeyInfo, DER.
    pub public_key_der: Vec<u8>,
    pub key: PublicKey,
    pub key_type: KeyType,
}

fn scheme_of(oid: &[u8], params_absent_or_null: bool) -> Option<Scheme> {
    const PKCS1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
    if let Some(last) = oid.strip_prefix(PKCS1) {
        return match last {
            [11] if params_absent_or_null => Some(Scheme::RsaPkcs1(Hash::Sha256)),
            [12] if params_absent_or_null => Some(Scheme::RsaPkcs1(Hash::Sha384)),
            [13] if params_absent_or_null => Some(Scheme::RsaPkcs1(Hash::Sha512)),
            _ => None,
        };
    }
    if let Some(last) = oid.strip_prefix(ECDSA) {
        return match last {
            [2] => Some(Scheme::Ecdsa(Hash::Sha256)),
            [3] => Some(Scheme::Ecdsa(Hash::Sha384)),
            [4] => Some(Scheme::Ecdsa(Hash::Sha512)),
            _ => None,
        };
    }
    (oid == OID_ED25519).then_some(Scheme::Ed25519)
}

/// RSASSA-PSS parameters as Go writes them (`hashAlgorithm`, MGF1 with the same hash, salt
/// length the digest's): the digest, or None for any other parameters.
fn pss_hash(params: &[u8]) -> Option<Hash> {
    // Go recognizes PSS only with these exact parameter encodings; match on the digest OID.
    const SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
    const SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
    const SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];
    let (hash, salt) = [(SHA256, 32u8, Hash::Sha256), (SHA384, 48, Hash::Sha384), (SHA512, 64, Hash::Sha512)]
        .into_iter()
        .find(|(oid, _, _)| params.windows(oid.len()).any(|w| w == *oid))
        .map(|(_, salt, h)| (h, salt))?;
    // The salt length, `[2] INTEGER`, is the digest's.
    params.windows(5).any(|w| w == [0xa2, 0x03, TAG_INTEGER, 0x01, salt]).then_some(hash)
}

/// Read a stub PKCS#10 request (`spec.stubPKCS10Request`) as Go's
/// `x509.ParseCertificateRequest` and `CheckSignature` do, and apply the key rule.
pub fn parse_stub_request(der: &[u8]) -> Result<StubRequest, StubProblem> {
    let (rest, csr) = X509CertificationRequest::from_der(der).map_err(|_| StubProblem::Malformed)?;
    if !rest.is_empty() {
        return Err(StubProblem::Malformed);
    }
    let info = &csr.certification_request_info;
    let public_key_der = info.subject_pki.raw.to_vec();
    let key = parse_pkix(&public_key_der).map_err(StubProblem::Key)?;
    let key_type = key_type(&key).map_err(StubProblem::Key)?;
    if !request_signature_verifies(&csr, &key) {
        return Err(StubProblem::Signature);
    }
    Ok(StubRequest { public_key_der, key, key_type })
}

/// Whether `csr`'s self-signature verifies under `key` (its subject key, as [`parse_pkix`]
/// read it) as Go's `CheckSignature` verifies it, for the schemes [`Scheme`] names.
pub fn request_signature_verifies(csr: &X509CertificationRequest<'_>, key: &PublicKey) -> bool {
    let info = &csr.certification_request_info;
    let alg = &csr.signature_algorithm;
    let oid = alg.algorithm.as_bytes();
    let params = alg.parameters.as_ref();
    let null_or_absent = params.is_none_or(|p| p.tag().0 == u32::from(TAG_NULL) && p.data.is_empty());
    const PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
    let scheme = if oid == PSS {
        params.and_then(|p| pss_hash(p.data)).map(|hash| Scheme::RsaPss { hash, any_salt: false })
    } else {
        scheme_of(oid, null_or_absent)
    };
    scheme.is_some_and(|scheme| verify(key, scheme, info.raw, &csr.signature_value.data))
}

/// Why an issued chain (`status.certificateChain`) is refused: upstream's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainProblem {
    #[error("issued certificate chain must contain at least one certificate")]
    Empty,
    #[error("issued certificate chain must consist entirely of CERTIFICATE PEM blocks")]
    BlockType,
    #[error("leaf certificate does not parse as valid X.509")]
    Leaf,
    #[error("intermediate certificate does not parse as valid X.509")]
    Intermediate,
}

/// The issued leaf, as the status rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub not_before: chrono::DateTime<chrono::Utc>,
    pub not_after: chrono::DateTime<chrono::Utc>,
    pub dns_names: Vec<String>,
    pub email_addresses: Vec<String>,
    /// The leaf's key, as Go reads it (None: Go would not).
    pub key: Option<PublicKey>,
}

/// Read a chain: PEM `CERTIFICATE` blocks (text between them and block headers ignored, as
/// Go's `pem.Decode`), the first the leaf, every one a certificate.
pub fn read_chain(chain: &str) -> Result<Leaf, ChainProblem> {
    let (first, mut rest) = crate::pem::decode(chain.as_bytes()).ok_or(ChainProblem::Empty)?;
    if first.type_ != "CERTIFICATE" {
        return Err(ChainProblem::BlockType);
    }
    let info = crate::parse_certificate_der(&first.bytes).map_err(|_| ChainProblem::Leaf)?;
    let leaf = Leaf {
        not_before: info.not_before,
        not_after: info.not_after,
        dns_names: info.dns_names.clone(),
        email_addresses: info.email_addresses.clone(),
        key: parse_pkix(&info.public_key_der).ok(),
    };
    while let Some((block, next)) = crate::pem::decode(rest) {
        rest = next;
        if block.type_ != "CERTIFICATE" {
            return Err(ChainProblem::BlockType);
        }
        crate::parse_certificate_der(&block.bytes).map_err(|_| ChainProblem::Intermediate)?;
    }
    Ok(leaf)
}

/// Problems of a leaf's DNS names and email addresses (upstream's checks), each as the
/// value shown and the detail.
pub fn leaf_name_problems(leaf: &Leaf) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for d in &leaf.dns_names {
        if d.is_empty() {
            out.push((d.clone(), "leaf certificate should not contain empty DNSName"));
        }
        if d.contains("..") {
            out.push((d.clone(), "leaf certificate's DNSName should not contain '..'"));
        }
        if d.starts_with('.') || d.ends_with('.') {
            out.push((d.clone(), "leaf certificate's DNSName should not start or end with '.'"));
        }
    }
    for e in &leaf.email_addresses {
        if !plausible_address(e) {
            out.push((e.clone(), "leaf certificate should not contain invalid EmailAddress"));
        }
    }
    out
}

/// A bare `local@domain` address as Go's `mail.ParseAddress` accepts it, in the common
/// forms: a dot-atom local part and a dot-atom domain (quoted local parts, comments and
/// domain literals are refused).
fn plausible_address(a: &str) -> bool {
    let atom = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c)))
    };
    match a.rsplit_once('@') {
        Some((local, domain)) => atom(local) && atom(domain),
        None => false,
    }
}

#[cfg(test)]
#[path = "pod_certificate_tests.rs"]
mod tests;
