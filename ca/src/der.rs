//! The few DER and PEM building blocks the CA needs beyond what rcgen and x509-parser offer:
//! reading and writing single TLVs (to rewrite a certificate's subject and issuer names and
//! to wrap PKCS#1 / SEC1 keys into PKCS#8), and PEM encoding / decoding.
//!
//! The encoders ([`tlv`], [`oid`], [`pem_encode`]) are public so that tests
//! can hand-build the odd requests and certificates no library writes; the readers stay
//! inside the crate.

use base64::Engine as _;

use super::Error;

pub(crate) const TAG_INTEGER: u8 = 0x02;
pub(crate) const TAG_BIT_STRING: u8 = 0x03;
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
pub(crate) const TAG_NULL: u8 = 0x05;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_UTF8_STRING: u8 = 0x0c;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
pub(crate) const TAG_SET: u8 = 0x31;
pub(crate) const TAG_CONTEXT_0: u8 = 0xa0;

/// One element: its tag, its contents and its whole encoding (tag, length and contents).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tlv<'a> {
    pub tag: u8,
    pub content: &'a [u8],
    pub raw: &'a [u8],
}

fn malformed(what: &str) -> Error {
    Error::Certificate(format!("malformed DER: {what}"))
}

/// Read one element (single-byte tags only, definite lengths) from the front of `input`.
pub(crate) fn read_tlv(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), Error> {
    read_element(input, false)
}

/// Read one element with DER's rules, as Go's cryptobyte does: single-byte tags, definite
/// lengths in the fewest octets (short form below 128, no leading zero octet).
pub(crate) fn read_der(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), Error> {
    read_element(input, true)
}

/// One element from the front of `input`; `minimal` refuses lengths not in the fewest octets.
fn read_element(input: &[u8], minimal: bool) -> Result<(Tlv<'_>, &[u8]), Error> {
    let (&tag, rest) = input.split_first().ok_or_else(|| malformed("unexpected end of input"))?;
    if tag & 0x1f == 0x1f {
        return Err(malformed("multi-byte tags are not supported"));
    }
    let (&first, mut rest) = rest.split_first().ok_or_else(|| malformed("missing length"))?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(malformed("unsupported length"));
        }
        if minimal && rest[0] == 0 {
            return Err(malformed("non-minimal length"));
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = (len << 8) | usize::from(b);
        }
        if minimal && len < 0x80 {
            return Err(malformed("non-minimal length"));
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(malformed("length exceeds input"));
    }
    let header = input.len() - rest.len();
    Ok((Tlv { tag, content: &rest[..len], raw: &input[..header + len] }, &rest[len..]))
}

/// All elements of a constructed value's contents.
pub(crate) fn children(mut content: &[u8]) -> Result<Vec<Tlv<'_>>, Error> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (tlv, rest) = read_tlv(content)?;
        out.push(tlv);
        content = rest;
    }
    Ok(out)
}

/// Encode one element.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// Encode a constructed value from already encoded parts.
pub(crate) fn constructed(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    tlv(tag, &parts.concat())
}

/// Encode an OBJECT IDENTIFIER from its arcs.
pub fn oid(arcs: &[u64]) -> Vec<u8> {
    tlv(TAG_OID, &oid_content(arcs))
}

/// The contents of an OBJECT IDENTIFIER (minimal base-128 arcs, the first two joined).
fn oid_content(arcs: &[u64]) -> Vec<u8> {
    let mut body = Vec::new();
    if arcs.len() >= 2 {
        push_base128(&mut body, arcs[0] * 40 + arcs[1]);
        for &arc in &arcs[2..] {
            push_base128(&mut body, arc);
        }
    }
    body
}

fn push_base128(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = vec![(v & 0x7f) as u8];
    v >>= 7;
    while v > 0 {
        tmp.push(0x80 | (v & 0x7f) as u8);
        v >>= 7;
    }
    tmp.reverse();
    out.extend_from_slice(&tmp);
}

/// PEM-encode `der` with the given label (64-character lines, trailing newline).
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// One decoded PEM block.
#[derive(Clone, PartialEq, Eq)]
pub struct PemBlock {
    pub label: String,
    pub der: Vec<u8>,
}

impl std::fmt::Debug for PemBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Blocks may hold private keys: never print their contents.
        f.debug_struct("PemBlock").field("label", &self.label).field("len", &self.der.len()).finish()
    }
}

/// Decode every PEM block in `input` (text outside blocks is ignored, as openssl does).
pub fn pem_decode_all(input: &str) -> Result<Vec<PemBlock>, Error> {
    let mut out = Vec::new();
    let mut lines = input.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line.strip_prefix("-----BEGIN ").and_then(|l| l.strip_suffix("-----")) else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            if l == end {
                closed = true;
                break;
            }
            if l.contains(':') {
                // RFC 1421 headers (e.g. Proc-Type of encrypted keys).
                return Err(Error::Pem(format!("{label} block has headers (encrypted keys are not supported)")));
            }
            body.push_str(l);
        }
        if !closed {
            return Err(Error::Pem(format!("{label} block has no END line")));
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(|e| Error::Pem(format!("{label} block is not valid base64: {e}")))?;
        out.push(PemBlock { label: label.to_string(), der });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tlv_round_trips_short_and_long_lengths() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let content = vec![7u8; len];
            let enc = tlv(TAG_OCTET_STRING, &content);
            let (t, rest) = read_tlv(&enc).unwrap();
            assert!(rest.is_empty());
            assert_eq!(t.tag, TAG_OCTET_STRING);
            assert_eq!(t.content.len(), len);
            assert_eq!(t.raw, &enc[..]);
        }
        assert!(read_tlv(&[0x30, 0x05, 0x01]).is_err());
        assert!(read_tlv(&[]).is_err());
        for len in [0usize, 127, 128, 255, 256, 70_000] {
            let enc = tlv(TAG_OCTET_STRING, &vec![7u8; len]);
            assert_eq!(read_der(&enc).unwrap().0.content.len(), len, "DER reads what tlv writes");
        }
        for (what, bad) in [
            ("long form below 128", &[0x04u8, 0x81, 0x05, 0, 0, 0, 0, 0][..]),
            ("leading zero length octet", &[0x04, 0x82, 0x00, 0x80]),
            ("indefinite", &[0x30, 0x80, 0, 0]),
            ("multi-byte tag", &[0x1f, 0x01, 0x00]),
        ] {
            assert!(read_der(bad).is_err(), "{what}");
        }
    }

    #[test]
    fn oid_encoding_matches_known_values() {
        // 2.5.4.3 (commonName) and 1.2.840.113549.1.1.1 (rsaEncryption)
        assert_eq!(oid(&[2, 5, 4, 3]), vec![0x06, 0x03, 0x55, 0x04, 0x03]);
        assert_eq!(
            oid(&[1, 2, 840, 113549, 1, 1, 1]),
            vec![0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01]
        );
    }

    #[test]
    fn pem_round_trips_and_rejects_garbage() {
        let der: Vec<u8> = (0..200u8).collect();
        let pem = pem_encode("CERTIFICATE", &der);
        let text = format!("junk before\n{pem}{pem}");
        let blocks = pem_decode_all(&text).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].label, "CERTIFICATE");
        assert_eq!(blocks[1].der, der);
        assert!(pem_decode_all("-----BEGIN X-----\n!!!!\n-----END X-----\n").is_err());
        assert!(pem_decode_all("-----BEGIN X-----\nAAAA\n").is_err());
        assert!(pem_decode_all("nothing here").unwrap().is_empty());
    }
}
