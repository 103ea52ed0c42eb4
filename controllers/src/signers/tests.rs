//! Table tests of the `signers` decisions.

use super::*;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
};
use kube::api::ObjectMeta;
use kustos_crds::certificate_approval_policy::DnsNameRules;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z").unwrap().with_timezone(&Utc)
}

fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

fn secret_data(ca: &Ca) -> BTreeMap<String, ByteString> {
    [(CERT.to_string(), bytes(ca.cert_pem())), (KEY.to_string(), ByteString(ca.key_pem().into_bytes()))].into()
}

fn ca(cn: &str) -> Ca {
    Ca::generate(cn, chrono::Duration::days(30), now()).unwrap()
}

#[test]
fn a_ca_secret_loads_with_its_rotation_certificates_published() {
    let current = ca("current");
    let next = ca("next");
    let previous = ca("previous");
    let not_ca = kustos_ca::KeyPair::generate().unwrap();
    let mut rotating = secret_data(&current);
    rotating.insert(NEXT_CERT.into(), bytes(next.cert_pem()));
    rotating.insert(NEXT_KEY.into(), ByteString(next.key_pem().into_bytes()));
    rotating.insert(PREVIOUS_CERT.into(), bytes(previous.cert_pem()));
    let mut twice = secret_data(&current);
    twice.insert(PREVIOUS_CERT.into(), bytes(current.cert_pem()));
    let mut wrong_key = secret_data(&current);
    wrong_key.insert(KEY.into(), ByteString(not_ca.private_key_pem().into_bytes()));
    let mut no_key = secret_data(&current);
    no_key.remove(KEY);
    // name, data, when, Ok(CNs in the bundle) or a fragment of the problem
    let cases: Vec<(&str, BTreeMap<String, ByteString>, DateTime<Utc>, Result<Vec<&str>, &str>)> = vec![
        ("a CA", secret_data(&current), now(), Ok(vec!["current"])),
        ("mid-rotation: next and previous are published", rotating, now(), Ok(vec!["current", "next", "previous"])),
        ("the same certificate twice is published once", twice, now(), Ok(vec!["current"])),
        ("no key", no_key, now(), Err("has no tls.key")),
        ("a key that is not the CA's", wrong_key, now(), Err("are not a CA")),
        ("empty", BTreeMap::new(), now(), Err("has no tls.crt")),
        ("expired", secret_data(&current), now() + chrono::Duration::days(31), Err("is not valid now")),
    ];
    for (name, data, at, want) in cases {
        let got = load_ca(&data, at);
        match (&got, want) {
            (Ok((signing, bundle)), Ok(cns)) => {
                assert_eq!(signing.info().common_name, "current", "{name}");
                let ders = kustos_ca::certificates_from_pem(bundle).unwrap();
                let got_cns: Vec<String> =
                    ders.iter().map(|d| kustos_ca::parse_certificate_der(d).unwrap().common_name).collect();
                assert_eq!(got_cns, cns, "{name}");
            }
            (Err(e), Err(fragment)) => assert!(e.contains(fragment), "{name}: {e:?} should contain {fragment:?}"),
            _ => panic!("{name}: got {:?}", got.map(|(_, b)| b)),
        }
    }
}

fn signer(name: &str, signer_name: &str, created_secs: i64) -> Arc<Signer> {
    let mut s = Signer::new(
        name,
        SignerSpec {
            signer_name: signer_name.into(),
            usages: vec!["digital signature".into(), "client auth".into()],
            ..Default::default()
        },
    );
    s.metadata.creation_timestamp = Some(csr::to_time(now() + chrono::Duration::seconds(created_secs)));
    Arc::new(s)
}

#[test]
fn the_oldest_signer_owns_a_name() {
    let all = vec![
        signer("b-newer", "example.com/a", 10),
        signer("a-newer", "example.com/a", 10),
        signer("z-oldest", "example.com/a", 0),
        signer("solo", "example.com/b", 5),
    ];
    let got = owners(&all);
    assert_eq!(got.get("example.com/a").map(String::as_str), Some("z-oldest"));
    assert_eq!(got.get("example.com/b").map(String::as_str), Some("solo"));
    let tie = vec![signer("b", "example.com/a", 0), signer("a", "example.com/a", 0)];
    assert_eq!(owners(&tie).get("example.com/a").map(String::as_str), Some("a"), "same age: by name");
}

fn loaded(spec: &SignerSpec) -> Loaded {
    Loaded {
        object: "mesh".into(),
        ca: ca("mesh"),
        bundle: String::new(),
        rules: spec.rules(),
        compiled: spec.rules().compile().unwrap(),
        max_duration: chrono::Duration::seconds(i64::from(spec.max_expiration_seconds())),
        pod_certificates: None,
        loaded_at: now(),
    }
}

fn request(cn: &str, dns: &[&str], uris: &[&str]) -> ByteString {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    for d in dns {
        params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().unwrap()));
    }
    for u in uris {
        params.subject_alt_names.push(rcgen::SanType::URI((*u).try_into().unwrap()));
    }
    ByteString(params.serialize_request(&key).unwrap().pem().unwrap().into_bytes())
}

fn approved_csr() -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta { name: Some("c1".into()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: request("web", &["web.default.svc"], &["spiffe://example.com/web"]),
            signer_name: "example.com/mesh".into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            username: Some("system:serviceaccount:default:web".into()),
            ..Default::default()
        },
        status: Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("AdminApproved".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

#[test]
fn decisions() {
    let spec = SignerSpec {
        signer_name: "example.com/mesh".into(),
        usages: vec!["digital signature".into(), "client auth".into(), "server auth".into()],
        max_expiration_seconds: Some(7200),
        dns_names: Some(DnsNameRules { patterns: Some(vec![r"[a-z]+\.default\.svc".into()]), ..Default::default() }),
        uris: true,
        ..Default::default()
    };
    let ready = loaded(&spec);
    let no_uris = loaded(&SignerSpec { uris: false, ..spec.clone() });
    type Mutate = fn(&mut CertificateSigningRequest);
    // name, mutation, the Signer, wanted: Ok(duration in seconds) / Err(fragment) / "skip:…"
    let cases: Vec<(&str, Mutate, Option<&Loaded>, Result<i64, &str>)> = vec![
        ("within the rules: the cap", |_| {}, Some(&ready), Ok(7200)),
        ("a shorter expirationSeconds", |c| c.spec.expiration_seconds = Some(900), Some(&ready), Ok(900)),
        ("a longer one is capped", |c| c.spec.expiration_seconds = Some(86400), Some(&ready), Ok(7200)),
        ("no Signer for the name: left alone", |_| {}, None, Err("skip")),
        ("pending: left alone", |c| c.status = None, Some(&ready), Err("skip")),
        (
            "a usage the Signer does not grant",
            |c| c.spec.usages = Some(vec!["digital signature".into(), "code signing".into()]),
            Some(&ready),
            Err("usage \"code signing\" is not allowed"),
        ),
        (
            "a DNS name outside the patterns",
            |c| c.spec.request = request("web", &["evil.example"], &[]),
            Some(&ready),
            Err("matches none of the dnsNames patterns"),
        ),
        ("URIs when the Signer allows none", |_| {}, Some(&no_uris), Err("URI subjectAltNames are not allowed")),
        ("a request that does not parse", |c| c.spec.request = bytes("junk"), Some(&ready), Err("unable to parse csr")),
    ];
    for (name, mutate, signer, want) in cases {
        let mut c = approved_csr();
        mutate(&mut c);
        match (decide(&c, csr::parse_request, signer), want) {
            (Decision::Sign { duration, .. }, Ok(secs)) => assert_eq!(duration.num_seconds(), secs, "{name}"),
            (Decision::Fail(m), Err(fragment)) => assert!(m.contains(fragment), "{name}: {m}"),
            (Decision::Skip(_), Err("skip")) => {}
            (got, _) => panic!("{name}: got {got:?}"),
        }
    }
}

#[test]
fn status_follows_readiness() {
    let s = signer("mesh", "example.com/mesh", 0);
    let fp = || Some("aa11".to_string());
    let ready = next_status(&s, Ok("signing with CA".into()), Some("example.com:mesh:ab".into()), fp(), now()).unwrap();
    let cond = ready.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("True", "CALoaded"));
    assert_eq!(ready.trust_bundle.as_deref(), Some("example.com:mesh:ab"));
    assert_eq!(ready.ca_secret.as_ref().map(|r| r.name.as_str()), Some("kustos-signer-mesh"));
    assert_eq!(ready.ca_fingerprint, fp(), "the CA that signs");

    let mut written = (*s).clone();
    written.status = Some(ready.clone());
    let later = now() + chrono::Duration::minutes(5);
    assert_eq!(
        next_status(&written, Ok("signing with CA".into()), Some("example.com:mesh:ab".into()), fp(), later),
        None,
        "nothing changed: nothing to write"
    );
    let switched = next_status(
        &written,
        Ok("signing with CA".into()),
        Some("example.com:mesh:ab".into()),
        Some("bb22".into()),
        later,
    )
    .expect("another CA signs (a rotation's switch): a new status");
    assert_eq!(switched.ca_fingerprint.as_deref(), Some("bb22"));
    let taken = next_status(&written, Err(("SignerNameTaken", "taken".into())), None, None, later).unwrap();
    let cond = taken.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("False", "SignerNameTaken"));
    assert_eq!(cond.last_transition_time, csr::to_time(later), "a new status: a new transition");
    assert_eq!(taken.trust_bundle, None);
    assert_eq!(taken.ca_fingerprint, None, "nothing signs");
}
