//! The Kubernetes PodIdentity X.509 extension (KEP-4317): who a pod is, carried in a client
//! certificate the `kubernetes.io/kube-apiserver-client-pod` signer issues, read back by the
//! apiserver's x509 authenticator. No I/O.
//!
//! What enters: a [`PodIdentity`] (to encode), or a certificate (DER) to read it from. What
//! leaves: the extension's value (DER), or the identity a certificate carries (`None` when it
//! carries none), or why its extension does not read.
//!
//! The extension is `1.3.6.1.4.1.57683.1` (under the Kubernetes project's private enterprise
//! number) and its value, as the KEP defines it (Go's `encoding/asn1` with `utf8,tag:N`, that
//! is implicit context tags):
//!
//! ```text
//! PodIdentity ::= SEQUENCE {
//!   namespace [0] UTF8String, namespaceUID [1] UTF8String,
//!   serviceAccountName [2] UTF8String, serviceAccountUID [3] UTF8String,
//!   podName [4] UTF8String, podUID [5] UTF8String,
//!   nodeName [6] UTF8String, nodeUID [7] UTF8String }
//! ```
//!
//! Every field is present (an empty string is an empty element). Reading is strict DER: the
//! eight elements in order, minimal lengths, valid UTF-8, nothing after them; a certificate
//! with two such extensions is refused.

use crate::der::{read_der, tlv, TAG_SEQUENCE};

/// The arcs of the PodIdentity extension's OID.
pub const OID_ARCS: [u64; 8] = [1, 3, 6, 1, 4, 1, 57683, 1];
/// The same OID, dotted.
pub const OID: &str = "1.3.6.1.4.1.57683.1";

/// The pod a certificate was issued to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodIdentity {
    pub namespace: String,
    pub namespace_uid: String,
    pub service_account_name: String,
    pub service_account_uid: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub node_name: String,
    pub node_uid: String,
}

impl PodIdentity {
    fn fields(&self) -> [&str; 8] {
        [
            &self.namespace,
            &self.namespace_uid,
            &self.service_account_name,
            &self.service_account_uid,
            &self.pod_name,
            &self.pod_uid,
            &self.node_name,
            &self.node_uid,
        ]
    }

    /// The extension's value (DER).
    pub fn to_der(&self) -> Vec<u8> {
        let parts: Vec<u8> =
            self.fields().iter().enumerate().flat_map(|(i, f)| tlv(0x80 | i as u8, f.as_bytes())).collect();
        tlv(TAG_SEQUENCE, &parts)
    }

    /// Read the extension's value (DER).
    pub fn from_der(value: &[u8]) -> Result<PodIdentity, String> {
        let bad = |what: &str| format!("malformed PodIdentity extension: {what}");
        let (seq, rest) = read_der(value).map_err(|e| bad(&e.to_string()))?;
        if seq.tag != TAG_SEQUENCE || !rest.is_empty() {
            return Err(bad("not a single SEQUENCE"));
        }
        let mut fields: Vec<String> = Vec::with_capacity(8);
        let mut content = seq.content;
        while !content.is_empty() {
            let (field, rest) = read_der(content).map_err(|e| bad(&e.to_string()))?;
            let i = fields.len();
            if i >= 8 {
                return Err(bad("more than eight elements"));
            }
            if field.tag != 0x80 | i as u8 {
                return Err(bad(&format!("element {i} has tag {:#04x}, not [{i}]", field.tag)));
            }
            let text = std::str::from_utf8(field.content).map_err(|_| bad(&format!("element {i} is not UTF-8")))?;
            fields.push(text.to_string());
            content = rest;
        }
        let Ok(
            [namespace, namespace_uid, service_account_name, service_account_uid, pod_name, pod_uid, node_name, node_uid],
        ) = <[String; 8]>::try_from(fields)
        else {
            return Err(bad("fewer than eight elements"));
        };
        Ok(PodIdentity {
            namespace,
            namespace_uid,
            service_account_name,
            service_account_uid,
            pod_name,
            pod_uid,
            node_name,
            node_uid,
        })
    }

    /// The identity a certificate (DER) carries: `None` without the extension; an error when
    /// the certificate or the extension does not read, or the extension appears twice.
    pub fn from_certificate_der(cert_der: &[u8]) -> Result<Option<PodIdentity>, String> {
        let info = crate::parse_certificate_der(cert_der).map_err(|e| format!("reading the certificate: {e}"))?;
        PodIdentity::from_info(&info)
    }

    /// The identity a parsed certificate carries, if any; refused when it carries two.
    pub fn from_info(info: &crate::CertInfo) -> Result<Option<PodIdentity>, String> {
        match info.pod_identity_values.as_slice() {
            [] => Ok(None),
            [value] => PodIdentity::from_der(value).map(Some),
            _ => Err("certificate contains multiple Kubernetes PodIdentity extensions".into()),
        }
    }
}

/// Lower-case hex of the SHA-256 of `data` (a certificate's credential id).
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// The OID's content bytes (without tag and length).
pub(crate) fn oid_content() -> Vec<u8> {
    let full = crate::der::oid(&OID_ARCS);
    full[2..].to_vec()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> PodIdentity {
        PodIdentity {
            namespace: "default".into(),
            namespace_uid: String::new(),
            service_account_name: "web".into(),
            service_account_uid: "sa-uid".into(),
            pod_name: "web-0".into(),
            pod_uid: "pod-uid".into(),
            node_name: "node-1".into(),
            node_uid: "node-uid".into(),
        }
    }

    #[test]
    fn encodes_as_the_kep_defines() {
        let der = PodIdentity { namespace: "ns".into(), ..Default::default() }.to_der();
        // SEQUENCE { [0] "ns", [1] "", [2] "", ... [7] "" }
        let mut want = vec![0x30, 18, 0x80, 2, b'n', b's'];
        for i in 1..8u8 {
            want.extend_from_slice(&[0x80 | i, 0]);
        }
        assert_eq!(der, want);
        assert_eq!(oid_content(), vec![0x2b, 6, 1, 4, 1, 0x83, 0xc2, 0x53, 1]);
    }

    #[test]
    fn reads_back_what_it_writes() {
        assert_eq!(PodIdentity::from_der(&sample().to_der()).unwrap(), sample());
    }

    #[test]
    fn refuses_malformed_values() {
        let good = sample().to_der();
        let mut trailing = good.clone();
        trailing.push(0);
        let seven = {
            let mut parts = Vec::new();
            for i in 0..7u8 {
                parts.extend(tlv(0x80 | i, b"x"));
            }
            tlv(TAG_SEQUENCE, &parts)
        };
        let nine = {
            let mut parts = Vec::new();
            for i in 0..9u8 {
                parts.extend(tlv(0x80 | i, b"x"));
            }
            tlv(TAG_SEQUENCE, &parts)
        };
        let swapped = {
            let mut parts = tlv(0x81, b"x");
            parts.extend(tlv(0x80, b"x"));
            for i in 2..8u8 {
                parts.extend(tlv(0x80 | i, b"x"));
            }
            tlv(TAG_SEQUENCE, &parts)
        };
        let universal_utf8 = {
            let mut parts = tlv(0x0c, b"x");
            for i in 1..8u8 {
                parts.extend(tlv(0x80 | i, b"x"));
            }
            tlv(TAG_SEQUENCE, &parts)
        };
        let not_utf8 = {
            let mut parts = tlv(0x80, &[0xff, 0xfe]);
            for i in 1..8u8 {
                parts.extend(tlv(0x80 | i, b"x"));
            }
            tlv(TAG_SEQUENCE, &parts)
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("trailing bytes", trailing),
            ("seven elements", seven),
            ("nine elements", nine),
            ("out of order", swapped),
            ("universal UTF8String tag", universal_utf8),
            ("not UTF-8", not_utf8),
            ("a SET", tlv(0x31, &good[2..])),
            ("long-form short length", [vec![0x30, 0x81, good[1]], good[2..].to_vec()].concat()),
        ];
        for (name, der) in cases {
            assert!(PodIdentity::from_der(&der).is_err(), "{name}");
        }
    }
}
