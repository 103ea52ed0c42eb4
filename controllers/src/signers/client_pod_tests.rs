//! Table tests of the `kubernetes.io/kube-apiserver-client-pod` decisions and certificates.

use super::*;
use base64::Engine as _;
use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::ByteString;
use kube::api::ObjectMeta;

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

fn pcr(key: &str, max: Option<i32>) -> PodCertificateRequest {
    PodCertificateRequest {
        metadata: ObjectMeta { name: Some("r".into()), namespace: Some("team-a".into()), ..Default::default() },
        spec: PodCertificateRequestSpec {
            signer_name: SIGNER_NAME.into(),
            service_account_name: "web".into(),
            service_account_uid: "sa-uid".into(),
            pod_name: "web-0".into(),
            pod_uid: "pod-uid".into(),
            node_name: "node-1".into(),
            node_uid: "node-uid".into(),
            max_expiration_seconds: max,
            stub_pkc_s10_request: ByteString(stub(key)),
            ..Default::default()
        },
        status: None,
    }
}

fn identity() -> PodIdentity {
    PodIdentity {
        namespace: "team-a".into(),
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
fn decisions() {
    let h = Duration::hours;
    let with = |f: &dyn Fn(&mut PodCertificateRequest)| {
        let mut r = pcr("p256", None);
        f(&mut r);
        r
    };
    let invalid = || {
        Err(Decision::Deny(
            "InvalidRequest",
            "the request lacks its namespace, service account, pod or node name or UID".into(),
        ))
    };
    // (what, request, Ok(key type, lifetime) or Err(decision))
    type Case<'a> = (&'a str, PodCertificateRequest, Result<(KeyType, Duration), Decision>);
    let cases: Vec<Case> = vec![
        ("default: a day", pcr("p256", None), Ok((KeyType::EcdsaP256, h(24)))),
        ("shorter asked", pcr("p384", Some(7200)), Ok((KeyType::EcdsaP384, h(2)))),
        ("longer asked: capped at a day", pcr("ed25519", Some(7_862_400)), Ok((KeyType::Ed25519, h(24)))),
        ("RSA 3072", pcr("rsa3072", Some(3600)), Ok((KeyType::Rsa3072, h(1)))),
        ("RSA 4096", pcr("rsa4096", None), Ok((KeyType::Rsa4096, h(24)))),
        ("P-521", pcr("p521", None), Ok((KeyType::EcdsaP521, h(24)))),
        (
            "another signer",
            with(&|r| r.spec.signer_name = "example.com/x".into()),
            Err(Decision::Skip("another signer's request")),
        ),
        (
            "issued already",
            with(&|r| {
                r.status = Some(PodCertificateRequestStatus {
                    conditions: Some(vec![terminal("Issued", "R", "m", now())]),
                    ..Default::default()
                })
            }),
            Err(Decision::Skip("issued, denied or failed already")),
        ),
        (
            "user annotations",
            with(&|r| {
                r.spec.unverified_user_annotations =
                    Some([("example.com/a".to_string(), "1".to_string())].into_iter().collect())
            }),
            Err(Decision::Deny(
                "InvalidUnverifiedUserAnnotations",
                "kubernetes.io/kube-apiserver-client-pod recognizes no unverifiedUserAnnotations; got example.com/a"
                    .into(),
            )),
        ),
        ("no namespace", with(&|r| r.metadata.namespace = None), invalid()),
        ("no pod UID", with(&|r| r.spec.pod_uid.clear()), invalid()),
        ("no node UID", with(&|r| r.spec.node_uid.clear()), invalid()),
        ("no service account UID", with(&|r| r.spec.service_account_uid.clear()), invalid()),
        (
            "unreadable stub",
            with(&|r| r.spec.stub_pkc_s10_request = ByteString(vec![0x30, 0x00])),
            Err(Decision::Deny("InvalidRequest", String::new())),
        ),
    ];
    for (what, request, want) in cases {
        let got = decide(&request);
        match (want, got) {
            (Ok((key_type, lifetime)), Decision::Sign(plan)) => {
                assert_eq!(plan.identity, identity(), "{what}");
                assert_eq!((plan.key_type, plan.lifetime), (key_type, lifetime), "{what}");
            }
            (Err(Decision::Deny(reason, message)), Decision::Deny(got_reason, got_message)) if message.is_empty() => {
                assert_eq!(got_reason, reason, "{what}: {got_message}");
            }
            (Err(want), got) => assert_eq!(got, want, "{what}"),
            (want, got) => panic!("{what}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn certificates_carry_the_pod_identity_and_nothing_else() {
    let ca = Ca::generate("cluster CA", Duration::days(30), now() - Duration::days(1)).unwrap();
    // (key, lifetime, key encipherment, refresh after notBefore)
    let cases = [
        ("p256", Duration::hours(24), false, Duration::hours(12)),
        ("rsa3072", Duration::hours(2), true, Duration::hours(1)),
        ("p521", Duration::hours(3), false, Duration::minutes(90)),
        ("ed25519", Duration::hours(1), false, Duration::minutes(30)),
    ];
    for (key, lifetime, encipherment, refresh) in cases {
        let Decision::Sign(mut plan) = decide(&pcr(key, None)) else { panic!("{key}: not signed") };
        plan.lifetime = lifetime;
        let status = issue(&ca, &plan, now()).unwrap();
        let chain = status.certificate_chain.unwrap();
        let ders = kustos_ca::certificates_from_pem(&chain).unwrap();
        assert_eq!(ders.len(), 1, "{key}: the leaf alone");
        let leaf = kustos_ca::parse_certificate_der(&ders[0]).unwrap();
        assert!(leaf.common_name.is_empty() && leaf.organizations.is_empty(), "{key}: empty subject");
        assert!(leaf.dns_names.is_empty() && leaf.uris.is_empty() && leaf.email_addresses.is_empty(), "{key}");
        assert!(leaf.ip_addresses.is_empty() && !leaf.is_ca, "{key}");
        assert_eq!(leaf.public_key_der, plan.public_key_der, "{key}");
        let mut want = vec![Usage::DigitalSignature, Usage::ClientAuth];
        if encipherment {
            want.push(Usage::KeyEncipherment);
        }
        want.sort();
        let mut got = leaf.usages.clone();
        got.sort();
        assert_eq!(got, want, "{key}");
        assert_eq!(PodIdentity::from_certificate_der(&ders[0]).unwrap(), Some(identity()), "{key}");
        let second = now().duration_trunc(Duration::seconds(1)).unwrap();
        assert_eq!(leaf.not_before, second - BACKDATE, "{key}");
        assert_eq!(leaf.not_after - leaf.not_before, lifetime, "{key}");
        assert_eq!(status.not_before, Some(to_time(leaf.not_before)), "{key}");
        assert_eq!(status.not_after, Some(to_time(leaf.not_after)), "{key}");
        assert_eq!(status.begin_refresh_at, Some(to_time(leaf.not_before + refresh)), "{key}");
        assert!(ca.signed(&ders[0]), "{key}: signed by the CA");
    }
}

#[test]
fn a_ca_ending_within_the_hour_fails() {
    let ca = Ca::generate("cluster CA", Duration::minutes(50), now() - Duration::minutes(5)).unwrap();
    let Decision::Sign(plan) = decide(&pcr("p256", None)) else { panic!("not signed") };
    assert!(issue(&ca, &plan, now()).unwrap_err().contains("within an hour"));
}
