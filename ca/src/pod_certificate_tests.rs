#![allow(clippy::unwrap_used)]

use base64::Engine as _;

use super::*;
use crate::der::{oid, tlv};

/// Keys made and serialized by Go's crypto/x509 (scripts/gen-pod-certificate-vectors.go).
struct Vector {
    name: String,
    pkix: Vec<u8>,
    proof: Vec<u8>,
    stub: Vec<u8>,
}

fn vectors() -> (String, Vec<Vector>) {
    let v: serde_json::Value = serde_json::from_str(include_str!("testdata/pod_certificate_keys.json")).unwrap();
    let b64 = |s: &serde_json::Value| base64::engine::general_purpose::STANDARD.decode(s.as_str().unwrap()).unwrap();
    let keys = v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| Vector {
            name: k["name"].as_str().unwrap().to_string(),
            pkix: b64(&k["pkix"]),
            proof: b64(&k["proof"]),
            stub: b64(&k["stub"]),
        })
        .collect();
    (v["podUID"].as_str().unwrap().to_string(), keys)
}

fn vector(name: &str) -> Vector {
    vectors().1.into_iter().find(|v| v.name == name).unwrap()
}

#[test]
fn go_keys_are_read_and_judged_as_upstream() {
    let (uid, keys) = vectors();
    let cases: &[(&str, Result<KeyType, KeyProblem>)] = &[
        ("rsa2048", Err(KeyProblem::RsaSize(2048))),
        ("rsa3072", Ok(KeyType::Rsa3072)),
        ("rsa3072-salt32", Ok(KeyType::Rsa3072)),
        ("rsa4096", Ok(KeyType::Rsa4096)),
        ("p224", Err(KeyProblem::Curve(Curve::P224))),
        ("p256", Ok(KeyType::EcdsaP256)),
        ("p384", Ok(KeyType::EcdsaP384)),
        ("p521", Ok(KeyType::EcdsaP521)),
        ("ed25519", Ok(KeyType::Ed25519)),
        ("x25519", Err(KeyProblem::UnknownType("X25519"))),
    ];
    assert_eq!(keys.len(), cases.len());
    for (name, want) in cases {
        let v = keys.iter().find(|v| v.name == *name).unwrap();
        assert_eq!(accepted_key(&v.pkix).map(|(_, t)| t), *want, "{name}");
        let key = parse_pkix(&v.pkix).unwrap();
        // Every proof Go made verifies (P-224 excepted: no verifier here, and refused anyway).
        let can_verify = !matches!(*name, "p224" | "x25519");
        assert_eq!(verify_proof_of_possession(&key, &uid, &v.proof), can_verify, "{name}: proof");
        // ... and only over the pod UID it signed.
        assert!(!verify_proof_of_possession(&key, "another-uid", &v.proof), "{name}: proof of another UID");
        let mut tampered = v.proof.clone();
        if let Some(b) = tampered.last_mut() {
            *b ^= 1;
        }
        assert!(!verify_proof_of_possession(&key, &uid, &tampered), "{name}: tampered proof");
    }
}

#[test]
fn problems_show_what_upstream_shows() {
    let cases = [
        (KeyProblem::Curve(Curve::P224), Some("curve P-224"), "elliptic public keys must use curve P256 or P384"),
        (KeyProblem::RsaSize(2048), Some("2048-bit modulus"), "RSA keys must have modulus size 3072 or 4096"),
        (KeyProblem::Unparseable, None, "must be a valid PKIX-serialized public key"),
        (KeyProblem::UnknownType("DSA"), None, "unknown public key type; supported types are Ed25519, ECDSA, and RSA"),
    ];
    for (p, shown, detail) in cases {
        assert_eq!(p.shown().as_deref(), shown, "{p:?}");
        assert_eq!(p.detail(), detail, "{p:?}");
    }
}

#[test]
fn stub_requests_go_made_verify() {
    let (_, keys) = vectors();
    for v in keys.iter().filter(|v| !v.stub.is_empty()) {
        let got = parse_stub_request(&v.stub);
        let want = match v.name.as_str() {
            "rsa2048" => Err(StubProblem::Key(KeyProblem::RsaSize(2048))),
            "p224" => Err(StubProblem::Key(KeyProblem::Curve(Curve::P224))),
            _ => Ok(parse_pkix(&v.pkix).unwrap()),
        };
        assert_eq!(got.as_ref().map(|s| s.key.clone()).map_err(Clone::clone), want, "{}", v.name);
        if let Ok(s) = got {
            assert_eq!(s.public_key_der, v.pkix, "{}", v.name);
            // A flipped bit in the signature (the last bytes) fails it.
            let mut bad = v.stub.clone();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            assert_eq!(parse_stub_request(&bad), Err(StubProblem::Signature), "{}", v.name);
        }
    }
    assert_eq!(parse_stub_request(b"not DER"), Err(StubProblem::Malformed));
    let mut trailing = vector("p256").stub;
    trailing.push(0);
    assert_eq!(parse_stub_request(&trailing), Err(StubProblem::Malformed));
}

#[test]
fn keys_made_with_rcgen_and_ring() {
    let uid = "pod-uid-1";
    let algs: &[(&rcgen::SignatureAlgorithm, KeyType, bool)] = &[
        // (algorithm, type, whether ring's signature is the API's proof: ECDSA over SHA-256)
        (&rcgen::PKCS_ECDSA_P256_SHA256, KeyType::EcdsaP256, true),
        (&rcgen::PKCS_ECDSA_P384_SHA384, KeyType::EcdsaP384, false),
        (&rcgen::PKCS_ED25519, KeyType::Ed25519, true),
    ];
    for (alg, want, proof_scheme) in algs {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let (parsed, t) = accepted_key(&rcgen::PublicKeyData::subject_public_key_info(&key)).unwrap();
        assert_eq!(t, *want);
        let sig = rcgen::SigningKey::sign(&key, uid.as_bytes()).unwrap();
        assert_eq!(verify_proof_of_possession(&parsed, uid, &sig), *proof_scheme, "{want}");
        let csr = rcgen::CertificateParams::default().serialize_request(&key).unwrap();
        let stub = parse_stub_request(csr.der()).unwrap();
        assert_eq!((stub.key, stub.key_type), (parsed, *want));
    }
}

/// SubjectPublicKeyInfo from its parts.
fn spki(alg_oid: &[u64], params: Option<Vec<u8>>, key: &[u8]) -> Vec<u8> {
    let mut alg = oid(alg_oid);
    if let Some(p) = params {
        alg.extend(p);
    }
    let mut bits = vec![0u8];
    bits.extend_from_slice(key);
    tlv(TAG_SEQUENCE, &[tlv(TAG_SEQUENCE, &alg), tlv(TAG_BIT_STRING, &bits)].concat())
}

#[test]
fn what_go_does_not_read_is_unparseable() {
    let p256 = parse_pkix(&vector("p256").pkix).unwrap();
    let PublicKey::Ecdsa { point, .. } = p256 else { panic!() };
    let rsa = vector("rsa3072").pkix;
    let (outer, _) = read_der(&rsa).unwrap();
    let (_, rest) = read_der(outer.content).unwrap();
    let (bits, _) = read_der(rest).unwrap();
    let rsa_key = &bits.content[1..];
    let null = Some(vec![TAG_NULL, 0]);
    let p256_oid = Some(oid(&[1, 2, 840, 10045, 3, 1, 7]));
    let ec = [1, 2, 840, 10045, 2, 1];
    let mut compressed = vec![2 + (point[64] & 1)];
    compressed.extend_from_slice(&point[1..33]);
    let mut off_curve = point.clone();
    off_curve[64] ^= 1;
    let neg_int = |c: &[u8]| tlv(TAG_INTEGER, c);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"garbage".to_vec()),
        ("trailing data", [rsa.clone(), vec![0]].concat()),
        ("RSA without NULL parameters", spki(&[1, 2, 840, 113549, 1, 1, 1], None, rsa_key)),
        (
            "RSA with a negative modulus",
            spki(
                &[1, 2, 840, 113549, 1, 1, 1],
                null.clone(),
                &tlv(TAG_SEQUENCE, &[neg_int(&[0x80, 1]), neg_int(&[1, 0, 1])].concat()),
            ),
        ),
        (
            "RSA with a non-minimal integer",
            spki(
                &[1, 2, 840, 113549, 1, 1, 1],
                null.clone(),
                &tlv(TAG_SEQUENCE, &[neg_int(&[0, 1]), neg_int(&[1, 0, 1])].concat()),
            ),
        ),
        ("compressed point", spki(&ec, p256_oid.clone(), &compressed)),
        ("point off the curve", spki(&ec, p256_oid.clone(), &off_curve)),
        ("secp256k1", spki(&ec, Some(oid(&[1, 3, 132, 0, 10])), &point)),
        ("Ed25519 with parameters", spki(&[1, 3, 101, 112], null.clone(), &[7; 32])),
        ("Ed25519 of 31 bytes", spki(&[1, 3, 101, 112], None, &[7; 31])),
        ("unknown algorithm", spki(&[1, 2, 3, 4], None, &[1, 2, 3])),
    ];
    for (what, der) in cases {
        assert_eq!(parse_pkix(&der), Err(KeyProblem::Unparseable), "{what}");
    }
    // Rebuilt from its parts, the RSA key still reads: the cases above differ only as named.
    assert!(parse_pkix(&spki(&[1, 2, 840, 113549, 1, 1, 1], null, rsa_key)).is_ok());
    assert!(parse_pkix(&spki(&ec, p256_oid, &point)).is_ok());
    let dsa = spki(
        &[1, 2, 840, 10040, 4, 1],
        Some(tlv(TAG_SEQUENCE, &[neg_int(&[23]), neg_int(&[11]), neg_int(&[4])].concat())),
        &neg_int(&[9]),
    );
    assert_eq!(accepted_key(&dsa).map(|(_, t)| t), Err(KeyProblem::UnknownType("DSA")));
}

#[test]
fn chains_and_leaves() {
    let now = chrono::Utc::now();
    let ca = crate::Ca::generate("pod-ca", chrono::Duration::days(1), now).unwrap();
    let issued = ca.issue(crate::IssueParams::client("leaf", vec![], chrono::Duration::hours(2)), now).unwrap();
    let chain = format!("{}{}", issued.cert_pem, ca.cert_pem());
    let leaf = read_chain(&chain).unwrap();
    assert_eq!(
        leaf.not_after,
        crate::parse_certificate_der(&crate::pem::decode(issued.cert_pem.as_bytes()).unwrap().0.bytes)
            .unwrap()
            .not_after
    );
    assert!(leaf.key.is_some());
    assert_eq!(read_chain(""), Err(ChainProblem::Empty));
    assert_eq!(read_chain(&crate::pem_encode("PRIVATE KEY", b"x")), Err(ChainProblem::BlockType));
    assert_eq!(read_chain(&crate::pem_encode("CERTIFICATE", b"x")), Err(ChainProblem::Leaf));
    assert_eq!(
        read_chain(&format!("{}{}", issued.cert_pem, crate::pem_encode("CERTIFICATE", b"x"))),
        Err(ChainProblem::Intermediate)
    );
    let names = Leaf {
        not_before: now,
        not_after: now,
        dns_names: vec!["".into(), "a..b".into(), ".a".into(), "ok.example".into()],
        email_addresses: vec!["a@b.example".into(), "no-at".into(), "a b@c".into()],
        key: None,
    };
    let details: Vec<&str> = leaf_name_problems(&names).into_iter().map(|(_, d)| d).collect();
    assert_eq!(
        details,
        [
            "leaf certificate should not contain empty DNSName",
            "leaf certificate's DNSName should not contain '..'",
            "leaf certificate's DNSName should not start or end with '.'",
            "leaf certificate should not contain invalid EmailAddress",
            "leaf certificate should not contain invalid EmailAddress",
        ]
    );
}

#[test]
fn p521_keys_are_certified_and_their_requests_verify() {
    let v = vector("p521");
    // A CertificateSigningRequest made by Go for a P-521 key (ECDSA with SHA-512) reads, and
    // verifies, as Go's CheckSignature says.
    let csr = crate::csr::parse_der(&v.stub).unwrap();
    assert_eq!(csr.public_key_der, v.pkix);
    let mut tampered = v.stub.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(matches!(crate::csr::parse_der(&tampered), Err(crate::csr::CsrError::Signature(_))));
    // The CA certifies the key: its SubjectPublicKeyInfo as given, its key identifier from it.
    let now = chrono::Utc::now();
    let ca = crate::Ca::generate("p521-ca", chrono::Duration::days(30), now).unwrap();
    let params = crate::IssueParams {
        validity: chrono::Duration::hours(1),
        key: crate::SubjectKey::PublicKey(v.pkix.clone()),
        uris: vec!["spiffe://td/ns/a/sa/b".into()],
        ..Default::default()
    };
    let issued = ca.issue(params, now).unwrap();
    let info = crate::parse_certificate_der(&issued.cert_der).unwrap();
    assert_eq!(info.public_key_der, v.pkix);
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&v.pkix);
    assert_eq!(info.subject_key_id.as_deref(), Some(&digest[..20]));
    assert!(crate::signed_by(&issued.cert_der, ca.cert_der()));
    // Another key type rcgen does not know is still refused.
    let x25519 = vector("x25519");
    let params = crate::IssueParams {
        validity: chrono::Duration::hours(1),
        key: crate::SubjectKey::PublicKey(x25519.pkix),
        ..Default::default()
    };
    assert!(ca.issue(params, now).is_err());
}
