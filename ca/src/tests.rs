use super::*;
use crate::key::signatures_made;
use chrono::TimeZone as _;
use x509_parser::prelude::*;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap()
}

fn ca() -> Ca {
    Ca::generate("kustos-ca", DEFAULT_CA_VALIDITY, t0()).unwrap()
}

fn ts(t: DateTime<Utc>) -> i64 {
    t.timestamp()
}

#[test]
fn generated_ca_is_a_self_signed_p256_ca() {
    let ca = ca();
    let (_, cert) = parse_x509_certificate(ca.cert_der()).unwrap();
    assert_eq!(cert.subject().to_string(), "CN=kustos-ca");
    assert_eq!(cert.issuer().as_raw(), cert.subject().as_raw());
    assert_eq!(cert.validity().not_before.timestamp(), ts(t0() - BACKDATE));
    assert_eq!(cert.validity().not_after.timestamp(), ts(t0() + DEFAULT_CA_VALIDITY));
    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(bc.critical && bc.value.ca && bc.value.path_len_constraint.is_none());
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.crl_sign() && ku.digital_signature() && !ku.key_encipherment());
    assert!(cert.verify_signature(None).is_ok());
    assert_eq!(ca.key().algorithm(), KeyAlgorithm::EcdsaP256);
    let serial = cert.raw_serial();
    assert!(serial.len() <= 17 && serial[0] & 0x80 == 0, "positive, at most 128 bits");
    assert!(ca.info().subject_key_id.is_some());
    // Serials are random.
    assert_ne!(ca.info().serial, self::ca().info().serial);
    // Round trip through PEM.
    let again = Ca::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
    assert_eq!(again.cert_der(), ca.cert_der());
    assert!(!format!("{ca:?}").contains("PRIVATE"));
}

#[test]
fn issues_a_server_certificate() {
    let ca = ca();
    let now = t0() + Duration::days(10);
    let params = IssueParams::server(
        "kube-apiserver",
        vec!["localhost".into(), "kubernetes.default.svc".into()],
        vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
        Duration::days(365),
    );
    let issued = ca.issue(params, now).unwrap();
    let key = KeyPair::from_pem(issued.key_pem.as_deref().unwrap()).unwrap();
    let (_, cert) = parse_x509_certificate(&issued.cert_der).unwrap();
    assert_eq!(cert.subject().to_string(), "CN=kube-apiserver");
    assert_eq!(cert.issuer().as_raw(), parse_x509_certificate(ca.cert_der()).unwrap().1.subject().as_raw());
    assert_eq!(cert.validity().not_before.timestamp(), ts(now - BACKDATE));
    assert_eq!(cert.validity().not_after.timestamp(), ts(now + Duration::days(365)));
    assert_eq!(cert.public_key().subject_public_key.data.as_ref(), key.public_key_raw());
    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(!bc.value.ca);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth);
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature() && !ku.key_encipherment() && !ku.key_cert_sign());
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert!(!san.critical);
    let info = parse_certificate_der(&issued.cert_der).unwrap();
    assert_eq!(info.dns_names, vec!["localhost", "kubernetes.default.svc"]);
    assert_eq!(info.ip_addresses, vec!["127.0.0.1".parse::<IpAddr>().unwrap(), "::1".parse().unwrap()]);
    assert_eq!(info.usages, vec![Usage::DigitalSignature, Usage::ServerAuth]);
    assert_eq!(info.issuer_common_name, "kustos-ca");
    assert_eq!(info.authority_key_id, ca.info().subject_key_id);
    assert!(info.subject_key_id.is_some());
    assert_eq!(info.serial, issued.serial);
    assert!(issued.serial.len() <= 16 && !issued.serial.is_empty());
    assert!(ca.signed(&issued.cert_der));
    assert!(!format!("{issued:?}").contains("PRIVATE"));
}

#[test]
fn the_check_of_an_issued_certificate_is_counted() {
    let ca = ca();
    // Other tests of this crate issue certificates at the same time: at least one more.
    let before = signed_by_checks();
    ca.issue(IssueParams::client("counted", vec![], Duration::hours(1)), t0()).unwrap();
    assert!(signed_by_checks() > before, "the CA's check of what it issued is counted");
}

/// Each certificate the CA issues or cross-signs costs one signature by its key: rcgen's draft
/// is written with the key's public half only ([`KeyPair::unsigned`]), and the certificate is
/// signed once its names are in. Every signature by a CA key goes through
/// [`KeyPair::signer`], which counts it.
#[test]
fn issuing_signs_once_whatever_the_keys() {
    let now = t0();
    let requested = KeyPair::generate().unwrap().public_key_der();
    for alg in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::EcdsaP384, KeyAlgorithm::Ed25519] {
        let key = KeyPair::generate_with(alg).unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, "signs-once");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let before = signatures_made();
        let cert = params.self_signed(&key.signer()).unwrap();
        assert_eq!(signatures_made() - before, 1, "{alg:?}: the self-signed CA certificate");
        let ca = Ca::from_parts(cert.der().to_vec(), key).unwrap();
        let other = Ca::generate("other-ca", Duration::days(1), now).unwrap();
        let cases = [
            ("a generated key", SubjectKey::Generate),
            ("the requested key", SubjectKey::PublicKey(requested.clone())),
        ];
        for (what, subject_key) in cases {
            let params = IssueParams { key: subject_key, ..IssueParams::client("jane", vec![], Duration::hours(1)) };
            let before = signatures_made();
            let issued = ca.issue(params, now).unwrap();
            assert_eq!(signatures_made() - before, 1, "{alg:?}, {what}: one signature");
            assert!(ca.signed(&issued.cert_der), "{alg:?}, {what}: signed by the CA");
        }
        let before = signatures_made();
        let cross = ca.cross_sign(other.cert_der(), now).unwrap();
        assert_eq!(signatures_made() - before, 1, "{alg:?}: the cross-signed certificate");
        assert!(ca.signed(&cross.cert_der), "{alg:?}: cross-signed by the CA");
    }
}

#[test]
fn issues_a_client_certificate_with_several_organizations() {
    let ca = ca();
    let now = t0();
    let orgs = vec!["system:masters".to_string(), "team-a".to_string()];
    let issued = ca.issue(IssueParams::client("kustos-admin", orgs.clone(), Duration::days(365)), now).unwrap();
    let (_, cert) = parse_x509_certificate(&issued.cert_der).unwrap();
    assert_eq!(cert.subject().to_string(), "O=system:masters, O=team-a, CN=kustos-admin");
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    assert!(cert.subject_alternative_name().unwrap().is_none());
    let info = parse_certificate_der(&issued.cert_der).unwrap();
    assert_eq!(info.common_name, "kustos-admin");
    assert_eq!(info.organizations, orgs);
    assert!(!info.is_ca);
    assert!(cert.verify_signature(Some(parse_x509_certificate(ca.cert_der()).unwrap().1.public_key())).is_ok());
}

#[test]
fn validity_is_capped_at_the_ca_not_after() {
    let ca = Ca::generate("short", Duration::days(30), t0()).unwrap();
    let issued = ca.issue(IssueParams::client("u", vec![], Duration::days(365)), t0()).unwrap();
    assert_eq!(issued.not_after, ca.not_after());
    assert_eq!(issued.not_before, t0() - BACKDATE);
    // Once the CA has expired nothing can be issued.
    let late = t0() + Duration::days(31);
    assert_eq!(
        ca.issue(IssueParams::client("u", vec![], Duration::days(1)), late),
        Err(Error::CaExpired(ca.not_after()))
    );
    assert!(ca.issue(IssueParams::client("u", vec![], Duration::zero()), t0()).is_err());
}

#[test]
fn certifies_a_given_public_key_with_explicit_usages_and_raw_subject() {
    let ca = ca();
    let subject_key = KeyPair::generate_with(KeyAlgorithm::Ed25519).unwrap();
    let raw_subject = encode_subject("system:node:n1", &["system:nodes".to_string()]);
    let params = IssueParams {
        raw_subject: Some(raw_subject.clone()),
        usages: vec![Usage::KeyEncipherment, Usage::DigitalSignature, Usage::ClientAuth, Usage::IpsecUser],
        validity: Duration::hours(1),
        key: SubjectKey::PublicKey(subject_key.public_key_der()),
        uris: vec!["spiffe://cluster.local/ns/a/sa/b".into()],
        email_addresses: vec!["a@example.com".into()],
        ..Default::default()
    };
    let issued = ca.issue(params, t0()).unwrap();
    assert!(issued.key_pem.is_none());
    let info = parse_certificate_der(&issued.cert_der).unwrap();
    assert_eq!(info.subject_der, raw_subject);
    assert_eq!(info.public_key_der, subject_key.public_key_der());
    assert_eq!(info.usages, vec![Usage::DigitalSignature, Usage::KeyEncipherment, Usage::ClientAuth, Usage::IpsecUser]);
    assert_eq!(info.uris, vec!["spiffe://cluster.local/ns/a/sa/b"]);
    assert_eq!(info.email_addresses, vec!["a@example.com"]);
    assert!(ca
        .issue(
            IssueParams { raw_subject: Some(vec![1, 2, 3]), validity: Duration::hours(1), ..Default::default() },
            t0()
        )
        .is_err());
    assert!(ca
        .issue(
            IssueParams {
                key: SubjectKey::PublicKey(b"junk".to_vec()),
                validity: Duration::hours(1),
                ..Default::default()
            },
            t0()
        )
        .is_err());
}

#[test]
fn empty_subject_makes_the_san_extension_critical() {
    let ca = ca();
    let params = IssueParams {
        dns_names: vec!["only.example".into()],
        usages: vec![Usage::ServerAuth],
        validity: Duration::hours(1),
        ..Default::default()
    };
    let issued = ca.issue(params, t0()).unwrap();
    let (_, cert) = parse_x509_certificate(&issued.cert_der).unwrap();
    assert_eq!(cert.subject().iter().count(), 0);
    assert!(cert.subject_alternative_name().unwrap().unwrap().critical);
}

#[test]
fn key_mismatch_and_non_ca_certificates_are_rejected() {
    let a = ca();
    let b = ca();
    assert_eq!(Ca::from_pem(a.cert_pem(), &b.key_pem()).unwrap_err(), Error::KeyMismatch);
    let leaf = a.issue(IssueParams::client("x", vec![], Duration::days(1)), t0()).unwrap();
    let leaf_key = leaf.key_pem.clone().unwrap();
    assert!(matches!(Ca::from_pem(&leaf.cert_pem, &leaf_key), Err(Error::NotCa(_))));
    assert_eq!(Ca::from_pem("garbage", &a.key_pem()).unwrap_err(), Error::NoCertificate);
    assert_eq!(Ca::from_pem(a.cert_pem(), "garbage").unwrap_err(), Error::NoPrivateKey);
    // A certificate from another CA is not "signed" by this one.
    let other = b.issue(IssueParams::client("x", vec![], Duration::days(1)), t0()).unwrap();
    assert!(!a.signed(&other.cert_der));
    assert!(b.signed(&other.cert_der));
    assert!(!a.signed(b"junk"));
}

#[test]
fn loads_an_openssl_rsa_ca_and_issues_with_it() {
    let ca = Ca::from_pem(include_str!("testdata/rsa_ca.crt"), include_str!("testdata/rsa_ca_pkcs1.key")).unwrap();
    assert_eq!(ca.key().algorithm(), KeyAlgorithm::Rsa);
    assert_eq!(ca.common_name(), "external-ca");
    let now = Utc::now();
    let issued = ca.issue(IssueParams::client("alice", vec!["devs".into()], Duration::days(1)), now).unwrap();
    let (_, cert) = parse_x509_certificate(&issued.cert_der).unwrap();
    // The issuer is the CA subject byte for byte (openssl writes UTF8String/PrintableString).
    let (_, ca_cert) = parse_x509_certificate(ca.cert_der()).unwrap();
    assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
    assert!(cert.verify_signature(Some(ca_cert.public_key())).is_ok());
    // openssl sets a subject key identifier, so the AKI matches it.
    assert_eq!(parse_certificate_der(&issued.cert_der).unwrap().authority_key_id, ca.info().subject_key_id);
}

#[test]
fn usages_have_kubernetes_names() {
    for u in Usage::ALL {
        assert_eq!(Usage::from_k8s(u.as_k8s()), Some(u));
    }
    assert_eq!(Usage::from_k8s("signing"), Some(Usage::DigitalSignature));
    assert_eq!(Usage::from_k8s("s/mime"), Some(Usage::EmailProtection));
    assert_eq!(Usage::from_k8s("bogus"), None);
    assert!(Usage::CertSign.is_key_usage() && !Usage::ClientAuth.is_key_usage());
}

#[test]
fn sa_keypair_is_p256_pkcs8_and_spki() {
    let sa = generate_sa_keypair().unwrap();
    let key = KeyPair::from_pem(&sa.private_key_pem).unwrap();
    assert_eq!(key.algorithm(), KeyAlgorithm::EcdsaP256);
    assert_eq!(public_key_der_from_pem(&sa.public_key_pem).unwrap(), key.public_key_der());
}

#[test]
fn certificates_are_read_as_go_reads_them() {
    let ca = ca();
    let rdn = |arcs: &[u64], tag: u8, value: &[u8]| {
        der::tlv(der::TAG_SET, &der::constructed(der::TAG_SEQUENCE, &[&der::oid(arcs), &der::tlv(tag, value)]))
    };
    let name = |rdns: &[Vec<u8>]| {
        let parts: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
        der::constructed(der::TAG_SEQUENCE, &parts)
    };
    let (cn, o) = (&[2u64, 5, 4, 3][..], &[2u64, 5, 4, 10][..]);
    type Case = (&'static str, Vec<Vec<u8>>, Option<(&'static str, Vec<&'static str>)>);
    let cases: Vec<Case> = vec![
        (
            "last CN, every O whatever its string type",
            vec![
                rdn(cn, 0x0c, b"cluster-root-alice"),
                rdn(o, 0x0c, b"system:nodes"),
                rdn(o, 0x14, b"system:masters"),
                rdn(o, 0x1e, &[0, b'b']),
                rdn(cn, 0x13, b"intern-bob"),
            ],
            Some(("intern-bob", vec!["system:nodes", "system:masters", "b"])),
        ),
        ("a name Go refuses", vec![rdn(cn, 0x13, b"a@b")], None),
        ("a value type kustos does not read", vec![rdn(o, 0x1c, &[0, 0, 0, b'x'])], None),
    ];
    for (what, rdns, want) in cases {
        let params = IssueParams {
            raw_subject: Some(name(&rdns)),
            usages: vec![Usage::ClientAuth],
            validity: Duration::hours(1),
            ..Default::default()
        };
        let issued = ca.issue(params, t0());
        match want {
            Some((want_cn, want_orgs)) => {
                let info = parse_certificate_der(&issued.unwrap().cert_der).unwrap();
                assert_eq!(info.common_name, want_cn, "{what}");
                assert_eq!(info.organizations, want_orgs, "{what}");
            }
            // Issuing re-reads what it made, so the refusal shows there.
            None => assert!(matches!(issued, Err(Error::Certificate(_))), "{what}: {issued:?}"),
        }
    }
}

#[test]
fn cross_signed_ca_chains_the_new_cas_certificates_to_the_old_one() {
    let now = Utc::now();
    let old = Ca::generate("old-ca", Duration::days(365), now).unwrap();
    let new = Ca::generate("new-ca", Duration::days(3650), now).unwrap();
    let cross = old.cross_sign(new.cert_der(), now).unwrap();
    let info = parse_certificate_der(&cross.cert_der).unwrap();
    let new_info = new.info();
    // The new CA's identity, the old CA's signature, the shorter of both lifetimes.
    assert_eq!(info.subject_der, new_info.subject_der);
    assert_eq!(info.public_key_der, new_info.public_key_der);
    assert_eq!(info.subject_key_id, new_info.subject_key_id);
    assert_eq!(info.issuer_der, old.info().subject_der);
    assert!(info.is_ca);
    assert_eq!(info.not_after, old.not_after());
    assert!(old.signed(&cross.cert_der));
    assert!(!new.signed(&cross.cert_der));
    // What the new CA issues verifies against the cross-signed certificate too.
    let leaf = new.issue(IssueParams::client("jane", vec![], Duration::hours(1)), now).unwrap();
    assert!(signed_by(&leaf.cert_der, &cross.cert_der));
    assert!(signed_by(&leaf.cert_der, new.cert_der()));
    assert!(!signed_by(&leaf.cert_der, old.cert_der()));
    // A leaf cannot be cross-signed; fingerprints tell certificates apart.
    assert!(old.cross_sign(&leaf.cert_der, now).is_err());
    assert_ne!(fingerprint(&cross.cert_der), fingerprint(new.cert_der()));
    assert_eq!(fingerprint(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
