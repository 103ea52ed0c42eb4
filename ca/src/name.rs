//! X.509 Names (subjects and issuers) read exactly as Go's `crypto/x509` reads them
//! (`parseName` and `pkix.Name.FillFromRDNSequence`), since kube-apiserver's x509
//! authenticator, `kubectl describe csr` and every client-go user see a certificate's user
//! and groups through that reading:
//!
//! - every RDN is a SET of attributes, multi-valued ones included, read in order;
//! - the common name is the value of the *last* `CN` (2.5.4.3); the organizations are every
//!   `O` (2.5.4.10) in order, empty ones included;
//! - values of the six string types Go reads are text: UTF8String, PrintableString (Go's
//!   set, which also allows `*` and `&`), IA5String (ASCII), NumericString (digits and
//!   space), T61String (each byte a Latin-1 character) and BMPString (UCS-2 without
//!   surrogates or noncharacters, a trailing NUL pair dropped); a value of one of these
//!   types that breaks its type's rule makes Go refuse the whole certificate.
//!
//! Where Go versions differ or Go would accept something this reader cannot represent the
//! same way, the reader refuses: any attribute value of another type (UniversalString,
//! INTEGER, ...), bytes after an attribute's value, multi-byte tags, non-minimal lengths.
//! A refused name means a refused certificate or request, never a different identity.

use crate::der::{read_der, TAG_OID, TAG_SEQUENCE, TAG_SET};

/// The ASN.1 string types Go's `crypto/x509` reads as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringType {
    Utf8,
    Printable,
    Ia5,
    Numeric,
    T61,
    Bmp,
}

impl StringType {
    fn from_tag(tag: u8) -> Option<StringType> {
        Some(match tag {
            0x0c => StringType::Utf8,
            0x13 => StringType::Printable,
            0x16 => StringType::Ia5,
            0x12 => StringType::Numeric,
            0x14 => StringType::T61,
            0x1e => StringType::Bmp,
            _ => return None,
        })
    }

    /// The ASN.1 name, as in error messages.
    pub fn name(self) -> &'static str {
        match self {
            StringType::Utf8 => "UTF8String",
            StringType::Printable => "PrintableString",
            StringType::Ia5 => "IA5String",
            StringType::Numeric => "NumericString",
            StringType::T61 => "T61String",
            StringType::Bmp => "BMPString",
        }
    }
}

/// ASN.1 names of the universal string types Go does not read, for messages.
fn tag_name(tag: u8) -> String {
    match tag {
        0x1c => "UniversalString".into(),
        0x1a => "VisibleString".into(),
        0x1b => "GeneralString".into(),
        0x15 => "VideotexString".into(),
        0x19 => "GraphicString".into(),
        0x04 => "OCTET STRING".into(),
        0x02 => "INTEGER".into(),
        t => format!("ASN.1 tag {t:#04x}"),
    }
}

pub const OID_COMMON_NAME: [u64; 4] = [2, 5, 4, 3];
pub const OID_ORGANIZATION: [u64; 4] = [2, 5, 4, 10];
pub const OID_ORGANIZATIONAL_UNIT: [u64; 4] = [2, 5, 4, 11];
/// The subject attribute naming a user's UID in a client certificate (kube-apiserver reads it
/// since 1.33: `AllowParsingUserUIDFromCertAuth`).
pub const OID_USER_UID: [u64; 8] = [1, 3, 6, 1, 4, 1, 57683, 2];

/// One attribute of a Name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The attribute type's OID arcs.
    pub oid: Vec<u64>,
    pub string_type: StringType,
    /// The value as text, as Go reads it.
    pub value: String,
}

impl Attribute {
    /// A short name for messages: `CN`, `O`, `OU`, or the dotted OID.
    pub fn short_name(&self) -> String {
        match self.oid.as_slice() {
            [2, 5, 4, 3] => "CN".into(),
            [2, 5, 4, 10] => "O".into(),
            [2, 5, 4, 11] => "OU".into(),
            arcs => arcs.iter().map(u64::to_string).collect::<Vec<_>>().join("."),
        }
    }
}

/// A Name: its attributes in order, the RDNs flattened (as Go's `pkix.Name.Names`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Name {
    pub attributes: Vec<Attribute>,
}

impl Name {
    fn values<'a>(&'a self, oid: &'a [u64]) -> impl Iterator<Item = &'a Attribute> + 'a {
        self.attributes.iter().filter(move |a| a.oid == oid)
    }

    /// Go's `Subject.CommonName`: the last CN, empty when there is none.
    pub fn common_name(&self) -> &str {
        self.values(&OID_COMMON_NAME).last().map_or("", |a| a.value.as_str())
    }

    /// Go's `Subject.Organization`: every O, in order.
    pub fn organizations(&self) -> Vec<String> {
        self.values(&OID_ORGANIZATION).map(|a| a.value.clone()).collect()
    }

    /// Every user UID attribute ([`OID_USER_UID`]), in order.
    pub fn user_uids(&self) -> Vec<String> {
        self.values(&OID_USER_UID).map(|a| a.value.clone()).collect()
    }

    /// Every CN, in order.
    pub fn common_names(&self) -> Vec<&Attribute> {
        self.values(&OID_COMMON_NAME).collect()
    }
}

/// Why a DER Name does not read: Go's wording where Go refuses too, or what kustos refuses
/// beyond Go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("x509: invalid RDNSequence")]
    Sequence,
    #[error("x509: invalid RDNSequence: invalid attribute")]
    Attribute,
    #[error("x509: invalid RDNSequence: invalid attribute type")]
    AttributeType,
    #[error("x509: invalid RDNSequence: invalid attribute value: {0}")]
    AttributeValue(String),
    #[error("x509: invalid RDNSequence: data after an attribute value")]
    DataAfterValue,
    #[error("x509: invalid RDNSequence: attribute value of unsupported type {0}")]
    UnsupportedType(String),
}

/// Read a DER Name (the whole input) as Go does.
pub fn parse(der: &[u8]) -> Result<Name, NameError> {
    let (seq, rest) = read_der(der).map_err(|_| NameError::Sequence)?;
    if seq.tag != TAG_SEQUENCE || !rest.is_empty() {
        return Err(NameError::Sequence);
    }
    let mut name = Name::default();
    let mut rdns = seq.content;
    while !rdns.is_empty() {
        let (set, next) = read_der(rdns).map_err(|_| NameError::Sequence)?;
        if set.tag != TAG_SET {
            return Err(NameError::Sequence);
        }
        rdns = next;
        let mut atvs = set.content;
        while !atvs.is_empty() {
            let (atv, next) = read_der(atvs).map_err(|_| NameError::Attribute)?;
            if atv.tag != TAG_SEQUENCE {
                return Err(NameError::Attribute);
            }
            atvs = next;
            let (oid, value_rest) = read_der(atv.content).map_err(|_| NameError::AttributeType)?;
            if oid.tag != TAG_OID {
                return Err(NameError::AttributeType);
            }
            let oid = parse_oid(oid.content).ok_or(NameError::AttributeType)?;
            let (value, after) =
                read_der(value_rest).map_err(|_| NameError::AttributeValue("invalid ASN.1 element".into()))?;
            if !after.is_empty() {
                return Err(NameError::DataAfterValue);
            }
            let Some(string_type) = StringType::from_tag(value.tag) else {
                return Err(NameError::UnsupportedType(tag_name(value.tag)));
            };
            let value =
                read_string(string_type, value.content).map_err(|e| NameError::AttributeValue(e.to_string()))?;
            name.attributes.push(Attribute { oid, string_type, value });
        }
    }
    Ok(name)
}

/// An OBJECT IDENTIFIER's contents as arcs, with Go's (cryptobyte's) rules: minimal
/// base-128 components below 2^31.
fn parse_oid(mut content: &[u8]) -> Option<Vec<u64>> {
    if content.is_empty() {
        return None;
    }
    let mut arcs = Vec::new();
    while !content.is_empty() {
        let mut v: u64 = 0;
        let mut i = 0;
        loop {
            let b = *content.get(i)?;
            if i == 0 && b == 0x80 {
                return None;
            }
            if v >= 1 << (31 - 7) {
                return None;
            }
            v = (v << 7) | u64::from(b & 0x7f);
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
        }
        content = &content[i..];
        if arcs.is_empty() {
            if v < 80 {
                arcs.extend([v / 40, v % 40]);
            } else {
                arcs.extend([2, v - 80]);
            }
        } else {
            arcs.push(v);
        }
    }
    Some(arcs)
}

/// Go's PrintableString set (`isPrintable` of crypto/x509, with `*` and `&`).
fn go_printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || (b'\''..=b')').contains(&b) || (b'+'..=b'/').contains(&b) || b" :=?*&".contains(&b)
}

/// A value of a string type as Go reads it.
fn read_string(t: StringType, v: &[u8]) -> Result<String, &'static str> {
    match t {
        StringType::T61 => Ok(v.iter().map(|&b| char::from(b)).collect()),
        StringType::Printable => {
            if v.iter().all(|&b| go_printable(b)) {
                Ok(v.iter().map(|&b| char::from(b)).collect())
            } else {
                Err("invalid PrintableString")
            }
        }
        StringType::Utf8 => std::str::from_utf8(v).map(str::to_string).map_err(|_| "invalid UTF-8 string"),
        StringType::Ia5 => {
            if v.is_ascii() {
                Ok(v.iter().map(|&b| char::from(b)).collect())
            } else {
                Err("invalid IA5String")
            }
        }
        StringType::Numeric => {
            if v.iter().all(|&b| b.is_ascii_digit() || b == b' ') {
                Ok(v.iter().map(|&b| char::from(b)).collect())
            } else {
                Err("invalid NumericString")
            }
        }
        StringType::Bmp => {
            if !v.len().is_multiple_of(2) {
                return Err("invalid BMPString");
            }
            let v = if v.len() >= 2 && v[v.len() - 2..] == [0, 0] { &v[..v.len() - 2] } else { v };
            let mut out = String::new();
            for pair in v.chunks_exact(2) {
                let point = u16::from_be_bytes([pair[0], pair[1]]);
                if point == 0xfffe || point == 0xffff || (0xfdd0..=0xfdef).contains(&point) {
                    return Err("invalid BMPString");
                }
                // Surrogates are refused, so every remaining code unit is a character.
                out.push(char::from_u32(u32::from(point)).ok_or("invalid BMPString")?);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::der::{constructed, oid, tlv};

    /// `SEQUENCE { type, value }` with the value's tag and bytes given.
    fn atv(arcs: &[u64], tag: u8, value: &[u8]) -> Vec<u8> {
        constructed(TAG_SEQUENCE, &[&oid(arcs), &tlv(tag, value)])
    }

    fn set(atvs: &[Vec<u8>]) -> Vec<u8> {
        let parts: Vec<&[u8]> = atvs.iter().map(Vec::as_slice).collect();
        constructed(TAG_SET, &parts)
    }

    fn name(rdns: &[Vec<u8>]) -> Vec<u8> {
        let parts: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
        constructed(TAG_SEQUENCE, &parts)
    }

    const CN: &[u64] = &[2, 5, 4, 3];
    const O: &[u64] = &[2, 5, 4, 10];
    const UTF8: u8 = 0x0c;
    const PRINTABLE: u8 = 0x13;
    const T61: u8 = 0x14;
    const IA5: u8 = 0x16;
    const NUMERIC: u8 = 0x12;
    const BMP: u8 = 0x1e;
    const UNIVERSAL: u8 = 0x1c;

    fn bmp(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_be_bytes).collect()
    }

    #[test]
    fn reads_names_as_go_does() {
        type Case = (&'static str, Vec<u8>, Result<(&'static str, Vec<&'static str>), &'static str>);
        let cases: Vec<Case> = vec![
            ("empty name", name(&[]), Ok(("", vec![]))),
            (
                "one CN, one O",
                name(&[set(&[atv(O, UTF8, b"devs")]), set(&[atv(CN, UTF8, b"jane")])]),
                Ok(("jane", vec!["devs"])),
            ),
            (
                "last CN wins",
                name(&[set(&[atv(CN, UTF8, b"root-alice")]), set(&[atv(CN, UTF8, b"intern-bob")])]),
                Ok(("intern-bob", vec![])),
            ),
            (
                "an empty last CN wins too",
                name(&[set(&[atv(CN, UTF8, b"alice")]), set(&[atv(CN, UTF8, b"")])]),
                Ok(("", vec![])),
            ),
            (
                "every O, whatever its string type",
                name(&[
                    set(&[atv(O, UTF8, b"system:nodes")]),
                    set(&[atv(O, T61, b"system:masters")]),
                    set(&[atv(O, BMP, &bmp("bmp-group"))]),
                    set(&[atv(O, NUMERIC, b"42 7")]),
                    set(&[atv(O, IA5, b"ia5")]),
                    set(&[atv(O, PRINTABLE, b"Print*&")]),
                    set(&[atv(O, UTF8, b"")]),
                ]),
                Ok(("", vec!["system:nodes", "system:masters", "bmp-group", "42 7", "ia5", "Print*&", ""])),
            ),
            (
                "multi-valued RDN read in order",
                name(&[set(&[atv(CN, UTF8, b"first"), atv(O, UTF8, b"g1"), atv(CN, UTF8, b"second")])]),
                Ok(("second", vec!["g1"])),
            ),
            ("empty RDN skipped", name(&[set(&[]), set(&[atv(CN, UTF8, b"x")])]), Ok(("x", vec![]))),
            ("T61 is Latin-1", name(&[set(&[atv(CN, T61, &[b'j', 0xe9])])]), Ok(("j\u{e9}", vec![]))),
            ("BMP trailing NUL dropped", name(&[set(&[atv(CN, BMP, &[0, b'a', 0, 0])])]), Ok(("a", vec![]))),
            ("other attributes ignored", name(&[set(&[atv(&[2, 5, 4, 6], PRINTABLE, b"US")])]), Ok(("", vec![]))),
            ("a CN-like OID is not CN", name(&[set(&[atv(&[2, 5, 4, 3, 1], UTF8, b"x")])]), Ok(("", vec![]))),
            ("invalid UTF-8", name(&[set(&[atv(CN, UTF8, &[0xff])])]), Err("invalid UTF-8 string")),
            ("invalid PrintableString", name(&[set(&[atv(CN, PRINTABLE, b"a@b")])]), Err("invalid PrintableString")),
            ("invalid IA5String", name(&[set(&[atv(CN, IA5, &[0x80])])]), Err("invalid IA5String")),
            ("invalid NumericString", name(&[set(&[atv(O, NUMERIC, b"1a")])]), Err("invalid NumericString")),
            ("odd BMPString", name(&[set(&[atv(O, BMP, &[0, b'a', 0])])]), Err("invalid BMPString")),
            ("BMP surrogate", name(&[set(&[atv(O, BMP, &[0xd8, 0, 0xdc, 0])])]), Err("invalid BMPString")),
            ("BMP noncharacter", name(&[set(&[atv(O, BMP, &[0xff, 0xfe])])]), Err("invalid BMPString")),
            ("UniversalString refused", name(&[set(&[atv(O, UNIVERSAL, &[0, 0, 0, b'a'])])]), Err("UniversalString")),
            ("INTEGER value refused", name(&[set(&[atv(&[2, 5, 4, 6], 0x02, &[1])])]), Err("INTEGER")),
            ("not a SEQUENCE", set(&[]), Err("invalid RDNSequence")),
            ("RDN not a SET", name(&[atv(CN, UTF8, b"x")]), Err("invalid RDNSequence")),
            (
                "non-minimal OID arc",
                name(&[set(&[constructed(
                    TAG_SEQUENCE,
                    &[&tlv(TAG_OID, &[0x55, 0x04, 0x80, 0x03]), &tlv(UTF8, b"x")],
                )])]),
                Err("invalid attribute type"),
            ),
            (
                "data after the value",
                name(&[set(&[constructed(TAG_SEQUENCE, &[&oid(CN), &tlv(UTF8, b"x"), &tlv(UTF8, b"y")])])]),
                Err("data after an attribute value"),
            ),
            ("non-minimal length", vec![0x30, 0x81, 0x00], Err("invalid RDNSequence")),
            ("trailing bytes", [name(&[]), vec![0]].concat(), Err("invalid RDNSequence")),
        ];
        for (what, der, want) in cases {
            match (parse(&der), want) {
                (Ok(n), Ok((cn, orgs))) => {
                    assert_eq!(n.common_name(), cn, "{what}");
                    assert_eq!(n.organizations(), orgs, "{what}");
                }
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{what}: {e}"),
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn oids() {
        assert_eq!(parse_oid(&[0x55, 0x04, 0x03]), Some(vec![2, 5, 4, 3]));
        assert_eq!(parse_oid(&[0x2a, 0x86, 0x48]), Some(vec![1, 2, 840]));
        assert_eq!(parse_oid(&[0x81, 0x05]), Some(vec![2, 53]));
        assert_eq!(parse_oid(&[]), None);
        assert_eq!(parse_oid(&[0x55, 0x84]), None, "truncated");
        assert_eq!(parse_oid(&[0x55, 0x80, 0x03]), None, "non-minimal");
        assert_eq!(parse_oid(&[0x55, 0xff, 0xff, 0xff, 0xff, 0x7f]), None, "too large");
    }
}
