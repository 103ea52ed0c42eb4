//! Hand-built X.509 for the tests that need subjects no library writes: repeated CNs and Os,
//! T61String and BMPString values, multi-valued RDNs, odd attribute encodings. A small DER
//! encoder (the CA's own, `kustos_ca::der`), PKCS#10 requests and certificates signed with ECDSA P-256 (so signatures verify),
//! and PEM.

use rcgen::{PublicKeyData as _, SigningKey as _};

pub const SEQUENCE: u8 = 0x30;
pub const SET: u8 = 0x31;
pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OID: u8 = 0x06;
pub const UTF8: u8 = 0x0c;
pub const NUMERIC: u8 = 0x12;
pub const PRINTABLE: u8 = 0x13;
pub const T61: u8 = 0x14;
pub const IA5: u8 = 0x16;
pub const UTC_TIME: u8 = 0x17;
pub const UNIVERSAL: u8 = 0x1c;
pub const BMP: u8 = 0x1e;

pub const CN: &[u64] = &[2, 5, 4, 3];
pub const O: &[u64] = &[2, 5, 4, 10];
pub const OU: &[u64] = &[2, 5, 4, 11];
pub const C: &[u64] = &[2, 5, 4, 6];

pub use kustos_ca::der::{oid, tlv};

pub fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

/// `SEQUENCE { type, value }`, the value of the given tag and bytes.
pub fn atv(arcs: &[u64], tag: u8, value: &[u8]) -> Vec<u8> {
    seq(&[oid(arcs), tlv(tag, value)])
}

/// One RDN holding these attributes.
pub fn rdn(atvs: &[Vec<u8>]) -> Vec<u8> {
    tlv(SET, &atvs.concat())
}

/// A Name of these RDNs.
pub fn name(rdns: &[Vec<u8>]) -> Vec<u8> {
    seq(rdns)
}

/// A Name of single-valued RDNs.
pub fn simple_name(atvs: &[(&[u64], u8, &[u8])]) -> Vec<u8> {
    name(&atvs.iter().map(|(a, t, v)| rdn(&[atv(a, *t, v)])).collect::<Vec<_>>())
}

/// A BMPString's contents for `s`.
pub fn bmp(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

fn ecdsa_sha256() -> Vec<u8> {
    seq(&[oid(&[1, 2, 840, 10045, 4, 3, 2])])
}

fn signed(tbs: Vec<u8>, key: &rcgen::KeyPair) -> Vec<u8> {
    let sig = key.sign(&tbs).expect("signing");
    seq(&[tbs, ecdsa_sha256(), tlv(BIT_STRING, &[&[0u8][..], &sig].concat())])
}

/// A PKCS#10 request for `subject` (a DER Name) and `key`'s public key, signed by `key`.
pub fn csr_der(subject: &[u8], key: &rcgen::KeyPair) -> Vec<u8> {
    let info = seq(&[tlv(INTEGER, &[0]), subject.to_vec(), key.subject_public_key_info(), tlv(0xa0, &[])]);
    signed(info, key)
}

/// A v3 certificate (no extensions) for `subject` and `subject_key`, issued by `issuer`
/// (a DER Name) and signed with `issuer_key`; valid 2020-2049.
pub fn cert_der(subject: &[u8], subject_key: &rcgen::KeyPair, issuer: &[u8], issuer_key: &rcgen::KeyPair) -> Vec<u8> {
    let validity = seq(&[tlv(UTC_TIME, b"200101000000Z"), tlv(UTC_TIME, b"491231235959Z")]);
    let tbs = seq(&[
        tlv(0xa0, &tlv(INTEGER, &[2])),
        tlv(INTEGER, &[0x01, 0x23, 0x45, 0x67]),
        ecdsa_sha256(),
        issuer.to_vec(),
        validity,
        subject.to_vec(),
        subject_key.subject_public_key_info(),
    ]);
    signed(tbs, issuer_key)
}

/// PEM with 64-character lines.
pub fn pem(label: &str, der: &[u8]) -> String {
    kustos_ca::pem_encode(label, der)
}
