//! Byte-level builders for the corpus: protobuf (the Kubernetes `k8s\0` envelope and raw
//! fields), DER (for certificate requests), gzip members and YAML alias ladders.

/// A protobuf varint.
pub fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A length-delimited protobuf field.
pub fn field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = varint(number << 3 | 2);
    out.extend(varint(payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// A varint protobuf field.
pub fn int_field(number: u64, v: u64) -> Vec<u8> {
    let mut out = varint(number << 3);
    out.extend(varint(v));
    out
}

/// `k8s\0` + `runtime.Unknown{typeMeta{apiVersion, kind}, raw}`.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    let mut out = b"k8s\x00".to_vec();
    out.extend(field(1, &type_meta));
    out.extend(field(2, raw));
    out
}

/// `depth` length-delimited fields `number`, each holding the next, around `core`; built in
/// linear time (the headers first, outermost first).
pub fn nested(number: u64, depth: usize, core: &[u8]) -> Vec<u8> {
    let tag = varint(number << 3 | 2);
    let mut lens = vec![core.len()];
    for i in 0..depth {
        let inner = lens[i];
        lens.push(tag.len() + varint(inner as u64).len() + inner);
    }
    let mut out = Vec::with_capacity(lens[depth]);
    for i in (0..depth).rev() {
        out.extend_from_slice(&tag);
        out.extend(varint(lens[i] as u64));
    }
    out.extend_from_slice(core);
    out
}

/// The header (tag and length) of a DER TLV of `len` content bytes.
fn der_header(tag: u8, len: usize) -> Vec<u8> {
    let mut out = der(tag, &[]);
    out.truncate(1);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().iter().copied().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out
}

/// `depth` DER TLVs of `tag`, each holding the next, around nothing; in linear time.
pub fn der_nested(tag: u8, depth: usize) -> Vec<u8> {
    let mut lens = vec![0usize];
    for i in 0..depth {
        lens.push(der_header(tag, lens[i]).len() + lens[i]);
    }
    let mut out = Vec::with_capacity(lens[depth]);
    for i in (0..depth).rev() {
        out.extend(der_header(tag, lens[i]));
    }
    out
}

/// A DER TLV.
pub fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n.to_be_bytes().iter().copied().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

pub const SEQUENCE: u8 = 0x30;
pub const SET: u8 = 0x31;
pub const OID: u8 = 0x06;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const INTEGER: u8 = 0x02;
pub const UTF8: u8 = 0x0c;

/// A DER SEQUENCE of `parts`.
pub fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    der(SEQUENCE, &parts.concat())
}

/// A DER OBJECT IDENTIFIER from its arcs.
pub fn oid(arcs: &[u64]) -> Vec<u8> {
    let mut body = vec![(arcs[0] * 40 + arcs[1]) as u8];
    for &a in &arcs[2..] {
        let mut chunk = Vec::new();
        let mut v = a;
        chunk.push((v & 0x7f) as u8);
        v >>= 7;
        while v > 0 {
            chunk.push((v & 0x7f) as u8 | 0x80);
            v >>= 7;
        }
        chunk.reverse();
        body.extend(chunk);
    }
    der(OID, &body)
}

/// A PKCS#10 request around `info` (already a DER CertificationRequestInfo), signed with
/// nothing valid: ecdsa-with-SHA256 and a bogus signature.
pub fn csr_der(info: Vec<u8>) -> Vec<u8> {
    let alg = seq(&[oid(&[1, 2, 840, 10045, 4, 3, 2])]);
    seq(&[info, alg, der(BIT_STRING, &[0, 0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01])])
}

/// A CertificationRequestInfo: version 0, `subject`, `spki`, `attributes` (`[0]`).
pub fn csr_info(subject: Vec<u8>, spki: Vec<u8>, attributes: Vec<u8>) -> Vec<u8> {
    seq(&[der(INTEGER, &[0]), subject, spki, der(0xa0, &attributes)])
}

/// `CN=system:node:<node>, O=system:nodes`.
pub fn node_subject(node: &str) -> Vec<u8> {
    let rdn = |arcs: &[u64], v: &str| der(SET, &seq(&[oid(arcs), der(UTF8, v.as_bytes())]));
    seq(&[rdn(&[2, 5, 4, 10], "system:nodes"), rdn(&[2, 5, 4, 3], &format!("system:node:{node}"))])
}

/// An EC P-256 SubjectPublicKeyInfo holding the uncompressed point `04 || 64 bytes`.
pub fn p256_spki() -> Vec<u8> {
    let alg = seq(&[oid(&[1, 2, 840, 10045, 2, 1]), oid(&[1, 2, 840, 10045, 3, 1, 7])]);
    let mut point = vec![0u8, 4];
    point.extend((0..64u8).map(|i| i.wrapping_mul(7).wrapping_add(1)));
    seq(&[alg, der(BIT_STRING, &point)])
}

/// An RSA SubjectPublicKeyInfo with a `bits`-bit modulus and the exponent `exponent`
/// (big-endian bytes).
pub fn rsa_spki(bits: usize, exponent: &[u8]) -> Vec<u8> {
    let alg = seq(&[oid(&[1, 2, 840, 113549, 1, 1, 1]), der(0x05, &[])]);
    let mut modulus = vec![0u8];
    modulus.extend((0..bits / 8).map(|i| (i as u8).wrapping_mul(31) | 0x81));
    let key = seq(&[der(INTEGER, &modulus), der(INTEGER, exponent)]);
    let mut bits_body = vec![0u8];
    bits_body.extend(key);
    seq(&[alg, der(BIT_STRING, &bits_body)])
}

/// PEM armour.
pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or("")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// Concatenated gzip members, each `member_plain` zero bytes: a body of about `total` bytes
/// that inflates ~1000 times.
pub fn gzip_bomb(member_plain: usize, total: usize) -> Vec<u8> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![b'0'; member_plain];
    let _ = gz.write_all(&zeros);
    let member = gz.finish().unwrap_or_default();
    let mut out = Vec::with_capacity(total + member.len());
    while out.len() + member.len() <= total {
        out.extend_from_slice(&member);
    }
    out
}

/// YAML billion laughs: `levels` anchors, each a flow sequence of `width` aliases of the
/// previous one.
pub fn yaml_laughs(head: &str, levels: usize, width: usize) -> String {
    let mut y = format!("{head}a0: &a0 [\"lol\"]\n");
    for i in 1..levels {
        let prev = vec![format!("*a{}", i - 1); width].join(",");
        y.push_str(&format!("a{i}: &a{i} [{prev}]\n"));
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        assert_eq!(varint(1), vec![1]);
        assert_eq!(varint(300), vec![0xac, 0x02]);
        assert_eq!(varint(u64::MAX).len(), 10);
    }

    #[test]
    fn nesting_matches_wrapping_one_layer_at_a_time() {
        let mut wrapped = b"core".to_vec();
        let mut der_wrapped = Vec::new();
        for depth in 0..300 {
            assert_eq!(nested(7, depth, b"core"), wrapped, "protobuf, depth {depth}");
            assert_eq!(der_nested(SEQUENCE, depth), der_wrapped, "DER, depth {depth}");
            wrapped = field(7, &wrapped);
            der_wrapped = der(SEQUENCE, &der_wrapped);
        }
    }
}
