//! Table tests of the pod certificate decisions and certificates.

use super::*;
use base64::Engine as _;
use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::ByteString;
use kube::api::ObjectMeta;
use kustos_ca::pod_certificate as pc;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-26T12:00:00.250Z").unwrap().with_timezone(&Utc)
}

/// A stub request of the given key (made by Go's crypto/x509: the ca crate's test vectors).
fn stub(name: &str) -> Vec<u8> {
    let v: serde_json::Value =
        serde_json::from_str(include_str!("../../../ca/src/testdata/pod_certificate_keys.json")).unwrap();
    let k = v["keys"].as_array().unwrap().iter().find(|k| k["name"] == name).unwrap();
    base64::engine::general_purpose::STANDARD.decode(k["stub"].as_str().unwrap()).unwrap()
}

/// Go's test vector for `name`: the key's DER, its proof of possession, and the pod UID it
/// signs.
fn go_pkix(name: &str) -> (Vec<u8>, Vec<u8>, String) {
    let v: serde_json::Value =
        serde_json::from_str(include_str!("../../../ca/src/testdata/pod_certificate_keys.json")).unwrap();
    let k = v["keys"].as_array().unwrap().iter().find(|k| k["name"] == name).unwrap();
    let b = |f: &str| base64::engine::general_purpose::STANDARD.decode(k[f].as_str().unwrap()).unwrap();
    (b("pkix"), b("proof"), v["podUID"].as_str().unwrap().to_string())
}

/// A v1beta1 request of the deprecated form (`pkixPublicKey` and `proofOfPossession`, no stub).
fn beta_pcr(key: &str, edit: impl FnOnce(&mut v1beta1::PodCertificateRequestSpec)) -> v1beta1::PodCertificateRequest {
    let (pkix, proof, pod_uid) = go_pkix(key);
    let mut spec = v1beta1::PodCertificateRequestSpec {
        signer_name: "example.com/mesh".into(),
        service_account_name: "web".into(),
        pod_uid,
        pkix_public_key: Some(ByteString(pkix)),
        proof_of_possession: Some(ByteString(proof)),
        ..Default::default()
    };
    edit(&mut spec);
    v1beta1::PodCertificateRequest {
        metadata: ObjectMeta { name: Some("r".into()), namespace: Some("team-a".into()), ..Default::default() },
        spec,
        status: None,
    }
}

#[test]
fn v1beta1_requests_of_the_deprecated_form() {
    let signs = |key: &str| {
        let (pkix, _, _) = go_pkix(key);
        Ok(pkix)
    };
    let invalid = |m: &str| Err(Decision::Deny("InvalidRequest", m.into()));
    // (what, request, Ok(the key certified) or Err(decision))
    type Case<'a> = (&'a str, v1beta1::PodCertificateRequest, Result<Vec<u8>, Decision>);
    let cases: Vec<Case> = vec![
        ("P-256", beta_pcr("p256", |_| {}), signs("p256")),
        ("RSA 3072 (PSS proof)", beta_pcr("rsa3072", |_| {}), signs("rsa3072")),
        ("RSA 3072, PSS salt 32", beta_pcr("rsa3072-salt32", |_| {}), signs("rsa3072-salt32")),
        ("Ed25519", beta_pcr("ed25519", |_| {}), signs("ed25519")),
        (
            "the proof signs another pod's UID",
            beta_pcr("p256", |s| s.pod_uid = "another-pod".into()),
            invalid("spec.proofOfPossession: could not verify proof-of-possession signature"),
        ),
        (
            "another key's proof",
            beta_pcr("p256", |s| s.proof_of_possession = Some(ByteString(go_pkix("p384").1))),
            invalid("spec.proofOfPossession: could not verify proof-of-possession signature"),
        ),
        (
            "no proof",
            beta_pcr("p256", |s| s.proof_of_possession = None),
            invalid("spec.proofOfPossession: could not verify proof-of-possession signature"),
        ),
        (
            "a key the API refuses",
            beta_pcr("rsa2048", |_| {}),
            Err(Decision::Deny(
                "InvalidRequest",
                format!("spec.pkixPublicKey: {}", pc::accepted_key(&go_pkix("rsa2048").0).unwrap_err().detail()),
            )),
        ),
        (
            "no key at all",
            beta_pcr("p256", |s| s.pkix_public_key = None),
            invalid("spec.stubPKCS10Request: Required value"),
        ),
        (
            "a stub request instead",
            beta_pcr("p256", |s| {
                s.pkix_public_key = None;
                s.proof_of_possession = None;
                s.stub_pkc_s10_request = ByteString(stub("p384"));
            }),
            Ok(pc::parse_stub_request(&stub("p384")).unwrap().public_key_der),
        ),
    ];
    for (what, req, want) in cases {
        match (decide(&req, Some(&cfg(None, &[]))), want) {
            (Decision::Sign(plan), Ok(key)) => {
                assert_eq!(plan.public_key_der, key, "{what}: the requested key");
                assert_eq!(plan.spiffe_id, ID, "{what}");
            }
            (got, Err(want)) => assert_eq!(got, want, "{what}"),
            (got, Ok(_)) => panic!("{what}: {got:?}"),
        }
    }
    // A certificate for the pkixPublicKey, and its status in v1beta1's form.
    let ca = Ca::generate("mesh CA", Duration::days(30), now() - Duration::days(1)).unwrap();
    let mut req = beta_pcr("p256", |_| {});
    let Decision::Sign(plan) = decide(&req, Some(&cfg(None, &[]))) else { panic!("signs") };
    req.set_status(issue(&ca, &plan, now()).unwrap());
    let chain = req.status.as_ref().and_then(|s| s.certificate_chain.clone()).unwrap();
    let leaf = pc::read_chain(&chain).unwrap();
    assert_eq!(leaf.key, Some(pc::parse_pkix(&go_pkix("p256").0).unwrap()), "the pkixPublicKey is certified");
    assert!(is_done(&req), "Issued is terminal in v1beta1 too");
}

fn pcr(key: &str, max: Option<i32>, conditions: &[&str]) -> PodCertificateRequest {
    PodCertificateRequest {
        metadata: ObjectMeta { name: Some("r".into()), namespace: Some("team-a".into()), ..Default::default() },
        spec: PodCertificateRequestSpec {
            signer_name: "example.com/mesh".into(),
            service_account_name: "web".into(),
            max_expiration_seconds: max,
            stub_pkc_s10_request: ByteString(stub(key)),
            ..Default::default()
        },
        status: (!conditions.is_empty()).then(|| PodCertificateRequestStatus {
            conditions: Some(conditions.iter().map(|t| terminal(t, "R", "m", now())).collect()),
            ..Default::default()
        }),
    }
}

fn cfg(max: Option<i32>, key_types: &[&str]) -> PodCertificates {
    PodCertificates {
        trust_domain: "cluster.local".into(),
        max_expiration_seconds: max,
        key_types: key_types.iter().map(ToString::to_string).collect(),
    }
}

const ID: &str = "spiffe://cluster.local/ns/team-a/sa/web";

#[test]
fn decisions() {
    let h = Duration::hours;
    let signs = |key_type, lifetime| Ok((ID.to_string(), key_type, lifetime));
    // (what, request, the Signer's podCertificates, Ok(SPIFFE ID, key type, lifetime) or Err(decision))
    type Case<'a> =
        (&'a str, PodCertificateRequest, Option<PodCertificates>, Result<(String, KeyType, Duration), Decision>);
    let cases: Vec<Case> = vec![
        (
            "no Signer",
            pcr("p256", None, &[]),
            None,
            Err(Decision::Skip("no ready Signer signs pod certificates for this name")),
        ),
        (
            "issued already",
            pcr("p256", None, &["Issued"]),
            Some(cfg(None, &[])),
            Err(Decision::Skip("issued, denied or failed already")),
        ),
        (
            "denied already",
            pcr("p256", None, &["Denied"]),
            Some(cfg(None, &[])),
            Err(Decision::Skip("issued, denied or failed already")),
        ),
        (
            "failed already",
            pcr("p256", None, &["Failed"]),
            Some(cfg(None, &[])),
            Err(Decision::Skip("issued, denied or failed already")),
        ),
        ("default cap: a day", pcr("p256", None, &[]), Some(cfg(None, &[])), signs(KeyType::EcdsaP256, h(24))),
        (
            "the request asks for less",
            pcr("p256", Some(7200), &[]),
            Some(cfg(None, &[])),
            signs(KeyType::EcdsaP256, h(2)),
        ),
        (
            "the request asks for more",
            pcr("p256", Some(3 * 86400), &[]),
            Some(cfg(None, &[])),
            signs(KeyType::EcdsaP256, h(24)),
        ),
        (
            "the Signer caps shorter",
            pcr("p256", Some(86400), &[]),
            Some(cfg(Some(3600), &[])),
            signs(KeyType::EcdsaP256, h(1)),
        ),
        ("RSA", pcr("rsa3072", None, &[]), Some(cfg(None, &[])), signs(KeyType::Rsa3072, h(24))),
        (
            "Ed25519 listed",
            pcr("ed25519", None, &[]),
            Some(cfg(None, &["ED25519", "ECDSAP256"])),
            signs(KeyType::Ed25519, h(24)),
        ),
        (
            "a key type the Signer does not list",
            pcr("rsa3072", None, &[]),
            Some(cfg(None, &["ECDSAP256"])),
            Err(Decision::Deny(
                "UnsupportedKeyType",
                "the signer does not sign RSA3072 keys; it signs ECDSAP256".into(),
            )),
        ),
        (
            "a stub that does not read",
            {
                let mut r = pcr("p256", None, &[]);
                r.spec.stub_pkc_s10_request = ByteString(b"junk".to_vec());
                r
            },
            Some(cfg(None, &[])),
            Err(Decision::Deny(
                "InvalidRequest",
                "spec.stubPKCS10Request: must be a valid DER-serialized PKCS#10 certificate request".into(),
            )),
        ),
        ("a P-521 key", pcr("p521", None, &[]), Some(cfg(None, &[])), signs(KeyType::EcdsaP521, h(24))),
        (
            "unverifiedUserAnnotations, which a Signer does not recognize",
            {
                let mut r = pcr("p256", None, &[]);
                r.spec.unverified_user_annotations =
                    Some([("evil.example/dns-names".to_string(), "a".to_string())].into());
                r
            },
            Some(cfg(None, &[])),
            Err(Decision::Deny(
                "InvalidUnverifiedUserAnnotations",
                "the signer recognizes no unverifiedUserAnnotations; got evil.example/dns-names".into(),
            )),
        ),
        (
            "no service account",
            {
                let mut r = pcr("p256", None, &[]);
                r.spec.service_account_name.clear();
                r
            },
            Some(cfg(None, &[])),
            Err(Decision::Deny("InvalidRequest", "the request names no namespace or service account".into())),
        ),
    ];
    for (what, req, cfg, want) in cases {
        let got = decide(&req, cfg.as_ref());
        match (got, want) {
            (Decision::Sign(plan), Ok((id, key_type, lifetime))) => {
                assert_eq!((plan.spiffe_id, plan.key_type, plan.lifetime), (id, key_type, lifetime), "{what}");
                let want_key = pc::parse_stub_request(&req.spec.stub_pkc_s10_request.0).unwrap().public_key_der;
                assert_eq!(plan.public_key_der, want_key, "{what}: the stub's key");
            }
            (got, Err(want)) => assert_eq!(got, want, "{what}"),
            (got, Ok(_)) => panic!("{what}: {got:?}"),
        }
    }
}

fn plan(key: &str, lifetime: Duration) -> Plan {
    let Decision::Sign(mut plan) = decide(&pcr(key, None, &[]), Some(&cfg(None, &[]))) else { panic!("{key}") };
    plan.lifetime = lifetime;
    *plan
}

#[test]
fn certificates_carry_only_the_verified_identity() {
    let ca = Ca::generate("mesh CA", Duration::days(30), now() - Duration::days(1)).unwrap();
    let t = now().duration_trunc(Duration::seconds(1)).unwrap();
    // (key, lifetime, the usages wanted)
    let cases: &[(&str, Duration, &[Usage])] = &[
        ("p256", Duration::hours(24), &[Usage::DigitalSignature, Usage::ClientAuth, Usage::ServerAuth]),
        ("p384", Duration::hours(1), &[Usage::DigitalSignature, Usage::ClientAuth, Usage::ServerAuth]),
        ("ed25519", Duration::hours(5), &[Usage::DigitalSignature, Usage::ClientAuth, Usage::ServerAuth]),
        ("p521", Duration::hours(2), &[Usage::DigitalSignature, Usage::ClientAuth, Usage::ServerAuth]),
        (
            "rsa3072",
            Duration::hours(24),
            &[Usage::DigitalSignature, Usage::KeyEncipherment, Usage::ClientAuth, Usage::ServerAuth],
        ),
    ];
    for (key, lifetime, want_usages) in cases {
        let p = plan(key, *lifetime);
        let status = issue(&ca, &p, now()).unwrap();
        let chain = status.certificate_chain.unwrap();
        let ders = kustos_ca::certificates_from_pem(&chain).unwrap();
        assert_eq!(ders.len(), 2, "{key}: leaf then CA");
        assert_eq!(ders[1], ca.cert_der(), "{key}: the chain ends at the CA");
        assert!(ca.signed(&ders[0]), "{key}: the CA signed the leaf");
        let leaf = kustos_ca::parse_certificate_der(&ders[0]).unwrap();
        assert_eq!(leaf.uris, [ID], "{key}");
        assert!(leaf.common_name.is_empty() && leaf.organizations.is_empty(), "{key}: empty subject");
        assert!(leaf.dns_names.is_empty() && leaf.ip_addresses.is_empty() && leaf.email_addresses.is_empty());
        assert!(!leaf.is_ca, "{key}");
        let mut got_usages = leaf.usages.clone();
        got_usages.sort();
        let mut want = want_usages.to_vec();
        want.sort();
        assert_eq!(got_usages, want, "{key}");
        assert_eq!(leaf.public_key_der, p.public_key_der, "{key}: the request's key");
        assert_eq!(leaf.not_before, t, "{key}: begins now");
        assert_eq!(leaf.not_after, t + *lifetime, "{key}");
        assert_eq!(status.not_before.as_ref().and_then(crate::csr::to_chrono).unwrap(), leaf.not_before, "{key}");
        assert_eq!(status.not_after.as_ref().and_then(crate::csr::to_chrono).unwrap(), leaf.not_after, "{key}");
        assert_eq!(
            status.begin_refresh_at.as_ref().and_then(crate::csr::to_chrono).unwrap(),
            t + *lifetime * 3 / 4,
            "{key}"
        );
        // The apiserver's reading agrees.
        let read = pc::read_chain(&chain).unwrap();
        assert_eq!(read.key, Some(pc::parse_pkix(&p.public_key_der).unwrap()), "{key}");
        let conditions = status.conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!((conditions[0].type_.as_str(), conditions[0].status.as_str()), ("Issued", "True"));
    }
}

#[test]
fn a_ca_ending_soon_cuts_the_lifetime_or_fails() {
    // Ends in two hours: a day's certificate is cut to two hours.
    let ca = Ca::generate("mesh CA", Duration::hours(3), now() - Duration::hours(1)).unwrap();
    let status = issue(&ca, &plan("p256", Duration::hours(24)), now()).unwrap();
    assert_eq!(status.not_after.as_ref().and_then(crate::csr::to_chrono).unwrap(), ca.not_after());
    // Ends within the hour: nothing the API would accept.
    let ca = Ca::generate("mesh CA", Duration::minutes(90), now() - Duration::hours(1)).unwrap();
    let err = issue(&ca, &plan("p256", Duration::hours(24)), now()).unwrap_err();
    assert!(err.contains("within an hour"), "{err}");
}

#[test]
fn only_a_recent_reading_of_the_ca_signs() {
    let spec = kustos_crds::SignerSpec {
        signer_name: "example.com/pods".into(),
        usages: vec!["digital signature".into()],
        ..Default::default()
    };
    let read_at = |at: DateTime<Utc>| {
        Some(Arc::new(Loaded {
            object: "pods".into(),
            ca: Ca::generate("pods CA", Duration::days(30), now()).unwrap(),
            bundle: String::new(),
            rules: spec.rules(),
            compiled: spec.rules().compile().unwrap(),
            max_duration: Duration::hours(1),
            pod_certificates: Some(cfg(None, &[])),
            loaded_at: at,
        }))
    };
    // (what, read how long before now, signs)
    let cases: &[(&str, Duration, bool)] = &[
        ("just read", Duration::zero(), true),
        ("read a resync ago", Duration::seconds(30), true),
        ("read at the limit", FRESH_FOR, true),
        ("read longer ago (the Signers cannot be read)", FRESH_FOR + Duration::seconds(1), false),
    ];
    for (what, ago, signs) in cases {
        assert_eq!(usable(read_at(now() - *ago), now()).is_some(), *signs, "{what}");
    }
    assert!(usable(None, now()).is_none(), "no Signer");
}

#[test]
fn answers_are_counted_on_the_signer() {
    let mut status: Option<SignerStatus> = None;
    // (outcome, issued, denied, failed after it)
    let steps: &[(PcrOutcome, i64, i64, i64)] = &[
        (PcrOutcome::Issued, 1, 0, 0),
        (PcrOutcome::Issued, 2, 0, 0),
        (PcrOutcome::Denied, 2, 1, 0),
        (PcrOutcome::Failed, 2, 1, 1),
    ];
    for (outcome, issued, denied, failed) in steps {
        let next = counted(status.as_ref(), *outcome);
        let c = next.pod_certificates.clone().unwrap();
        assert_eq!((c.issued, c.denied, c.failed), (*issued, *denied, *failed), "{outcome:?}");
        status = Some(next);
    }
    let kept = SignerStatus { issued: 7, failed: 3, trust_bundle: Some("b".into()), ..Default::default() };
    let next = counted(Some(&kept), PcrOutcome::Issued);
    assert_eq!((next.issued, next.failed, next.trust_bundle.as_deref()), (7, 3, Some("b")), "the CSR counts stay");
}
