#![allow(clippy::unwrap_used)]

use super::*;
use PodCertificateRequestStrategy::{V1beta1, V1};

const POD_UID: &str = "7c2a7a2e-0b3f-4a62-8b0e-3e3a1f6c9d10";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A key made with rcgen (ECDSA P-256): its PKIX form, a stub request and a proof over
/// [`POD_UID`] (ring's ECDSA-P256-SHA256 signature is the API's proof).
fn key() -> (rcgen::KeyPair, Vec<u8>, Vec<u8>, Vec<u8>) {
    let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let pkix = rcgen::PublicKeyData::subject_public_key_info(&k);
    let stub = rcgen::CertificateParams::default().serialize_request(&k).unwrap().der().to_vec();
    let proof = rcgen::SigningKey::sign(&k, POD_UID.as_bytes()).unwrap();
    (k, pkix, stub, proof)
}

/// Go's keys (ca/src/testdata, made by scripts/gen-pod-certificate-vectors.go).
fn go_stub(name: &str) -> Vec<u8> {
    let v: Value = serde_json::from_str(include_str!("../../../../ca/src/testdata/pod_certificate_keys.json")).unwrap();
    let k = v["keys"].as_array().unwrap().iter().find(|k| k["name"] == name).unwrap();
    base64::engine::general_purpose::STANDARD.decode(k["stub"].as_str().unwrap()).unwrap()
}

fn pcr(version: PodCertificateRequestStrategy, key_fields: Value) -> Value {
    let mut spec = json!({
        "signerName": "example.com/foo", "podName": "pod-1", "podUID": POD_UID,
        "serviceAccountName": "default", "serviceAccountUID": "sa-uid", "nodeName": "n1", "nodeUID": "node-uid",
        "maxExpirationSeconds": 86400,
    });
    for (k, v) in key_fields.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": version.api_version(), "kind": "PodCertificateRequest",
           "metadata": {"name": "req", "namespace": "ns"}, "spec": spec})
}

fn rendered(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(FieldError::render).collect()
}

#[test]
fn create_validation_as_upstream() {
    let (_, pkix, stub, proof) = key();
    let (_, _, _, other_proof) = key();
    let stub_v = json!({"stubPKCS10Request": b64(&stub)});
    let pair = json!({"pkixPublicKey": b64(&pkix), "proofOfPossession": b64(&proof)});
    type Case = (&'static str, PodCertificateRequestStrategy, Value, fn(&mut Value), Vec<&'static str>);
    let cases: Vec<Case> = vec![
        ("v1 with a stub", V1, stub_v.clone(), |_| {}, vec![]),
        ("v1beta1 with a stub", V1beta1, stub_v.clone(), |_| {}, vec![]),
        ("v1beta1 with key and proof", V1beta1, pair.clone(), |_| {}, vec![]),
        (
            "v1 without a stub",
            V1,
            json!({}),
            |_| {},
            vec!["spec.stubPKCS10Request: Required value"],
        ),
        (
            "v1beta1 with both forms",
            V1beta1,
            json!({"stubPKCS10Request": b64(&stub), "pkixPublicKey": b64(&pkix), "proofOfPossession": b64(&proof)}),
            |_| {},
            vec![
                "spec.pkixPublicKey: Forbidden: must be empty when stubPKCS10Request is set",
                "spec.proofOfPossession: Forbidden: must be empty when stubPKCS10Request is set",
            ],
        ),
        (
            "a proof of another key",
            V1beta1,
            json!({"pkixPublicKey": b64(&pkix), "proofOfPossession": b64(&other_proof)}),
            |_| {},
            vec!["spec.proofOfPossession: Invalid value: \"<value omitted>\": could not verify proof-of-possession signature"],
        ),
        (
            "a proof over another pod UID",
            V1beta1,
            pair.clone(),
            |o| o["spec"]["podUID"] = json!("another"),
            vec!["spec.proofOfPossession: Invalid value: \"<value omitted>\": could not verify proof-of-possession signature"],
        ),
        (
            "an RSA-2048 stub",
            V1,
            json!({"stubPKCS10Request": b64(&go_stub("rsa2048"))}),
            |_| {},
            vec!["spec.stubPKCS10Request: Invalid value: 2048-bit modulus: RSA keys must have modulus size 3072 or 4096"],
        ),
        (
            "a P-224 stub",
            V1,
            json!({"stubPKCS10Request": b64(&go_stub("p224"))}),
            |_| {},
            vec!["spec.stubPKCS10Request: Invalid value: curve P-224: elliptic public keys must use curve P256 or P384"],
        ),
        (
            "a P-521 stub Go made",
            V1,
            json!({"stubPKCS10Request": b64(&go_stub("p521"))}),
            |_| {},
            vec![],
        ),
        (
            "a stub that is not a request",
            V1,
            json!({"stubPKCS10Request": b64(b"junk")}),
            |_| {},
            vec!["spec.stubPKCS10Request: Invalid value: \"<value omitted>\": must be a valid DER-serialized PKCS#10 certificate request"],
        ),
        (
            "names and UIDs",
            V1,
            stub_v.clone(),
            |o| {
                o["spec"]["podName"] = json!("Pod_1");
                o["spec"]["podUID"] = json!("");
                o["spec"]["serviceAccountUID"] = json!("x".repeat(129));
                o["spec"]["nodeName"] = json!("");
            },
            vec![
                "spec.podName: Invalid value: \"Pod_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.podUID: Invalid value: \"\": must not be empty",
                "spec.serviceAccountUID: Too long: may not be more than 128 bytes",
                "spec.nodeName: Invalid value: \"\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        ),
        (
            "expiration under an hour",
            V1,
            stub_v.clone(),
            |o| o["spec"]["maxExpirationSeconds"] = json!(3599),
            vec!["spec.maxExpirationSeconds: Invalid value: 3599: must be in the range [3600, 7862400]"],
        ),
        (
            "91 days is the most",
            V1,
            stub_v.clone(),
            |o| o["spec"]["maxExpirationSeconds"] = json!(7_862_401),
            vec!["spec.maxExpirationSeconds: Invalid value: 7862401: must be in the range [3600, 7862400]"],
        ),
        (
            "kubernetes.io signers: a day",
            V1,
            stub_v.clone(),
            |o| {
                o["spec"]["signerName"] = json!("kubernetes.io/kube-apiserver-client-pod");
                o["spec"]["maxExpirationSeconds"] = json!(86401);
            },
            vec!["spec.maxExpirationSeconds: Invalid value: 86401: must be in the range [3600, 86400]"],
        ),
        (
            "signer name",
            V1,
            stub_v.clone(),
            |o| o["spec"]["signerName"] = json!("foo"),
            vec!["spec.signerName: Invalid value: \"foo\": must be a fully qualified domain and path of the form 'example.com/signer-name'"],
        ),
        (
            "user annotations",
            V1,
            stub_v.clone(),
            |o| o["spec"]["unverifiedUserAnnotations"] = json!({"example.com/ok": "v", "plain": "v"}),
            vec!["spec.unverifiedUserAnnotations: Invalid value: \"plain\": must be a domain-prefixed key (such as \"acme.io/foo\")"],
        ),
    ];
    for (what, version, key_fields, mutate, want) in cases {
        let mut obj = pcr(version, key_fields);
        mutate(&mut obj);
        assert_eq!(rendered(&version.validate(&obj)), want, "{what}");
    }
}

#[test]
fn create_defaults_and_clears() {
    let mut obj = pcr(V1, json!({}));
    obj["spec"].as_object_mut().unwrap().remove("maxExpirationSeconds");
    obj["status"] = json!({"certificateChain": "x"});
    V1.prepare_for_create(&mut obj);
    assert_eq!(obj["spec"]["maxExpirationSeconds"], 86400);
    assert!(obj.get("status").is_none());
}

#[test]
fn roundtrip_keeps_what_was_sent() {
    let mut obj = pcr(V1beta1, json!({"pkixPublicKey": "AAAA", "proofOfPossession": "AAAA"}));
    obj["spec"]["unknown"] = json!(1);
    obj["spec"].as_object_mut().unwrap().remove("nodeName");
    let out = V1beta1.roundtrip(&obj).unwrap();
    assert!(out["spec"].get("unknown").is_none(), "unknown fields are dropped");
    assert!(out["spec"].get("nodeName").is_none(), "a missing field is not invented");
    assert!(out["spec"].get("stubPKCS10Request").is_none());
    assert_eq!(out["spec"]["pkixPublicKey"], "AAAA");
    // v1 has no deprecated fields: they are unknown there.
    let out = V1.roundtrip(&with_api_version(&obj, "certificates.k8s.io/v1")).unwrap();
    assert!(out["spec"].get("pkixPublicKey").is_none());
    // A condition without its times reaches validation (422), not a decoding error (400).
    let mut with_status = obj.clone();
    with_status["status"] = json!({"conditions": [{"type": "Issued", "status": "True"}]});
    let out = V1beta1.roundtrip(&with_status).unwrap();
    assert_eq!(out["status"]["conditions"][0], json!({"type": "Issued", "status": "True"}));
    assert!(V1.roundtrip(&json!({"spec": {"podName": 7}})).is_err());
}

#[test]
fn spec_is_immutable_and_fields_select() {
    let (_, _, stub, _) = key();
    let old = pcr(V1, json!({"stubPKCS10Request": b64(&stub)}));
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"a": "b"});
    assert!(V1.validate_update(&new, &old).is_empty());
    new["spec"]["podName"] = json!("pod-2");
    assert_eq!(
        rendered(&V1.validate_update(&new, &old)),
        ["spec: Invalid value: \"<value omitted>\": field is immutable"]
    );
    for (path, want) in [
        ("spec.signerName", Some("example.com/foo")),
        ("spec.podName", Some("pod-1")),
        ("spec.nodeName", Some("n1")),
        ("spec.podUID", None),
    ] {
        assert_eq!(V1.field(&old, path).as_deref(), want, "{path}");
    }
    assert!(is_kubernetes_signer("kubernetes.io/kube-apiserver-client-pod"));
    assert!(is_kubernetes_signer("foo.kubernetes.io/x"));
    assert!(!is_kubernetes_signer("kubernetes.io.example.com/x"));
}

/// A leaf for `pkix` from a throwaway CA, issued at `now` for `hours`.
fn leaf(pkix: &[u8], now: chrono::DateTime<chrono::Utc>, hours: i64) -> (String, kustos_ca::CertInfo) {
    let ca = kustos_ca::Ca::generate("pod-ca", chrono::Duration::days(10), now).unwrap();
    let mut params = kustos_ca::IssueParams::client("pod", vec![], chrono::Duration::hours(hours));
    params.key = kustos_ca::SubjectKey::PublicKey(pkix.to_vec());
    let issued = ca.issue(params, now).unwrap();
    let der = kustos_ca::pem::decode(issued.cert_pem.as_bytes()).unwrap().0.bytes;
    (format!("{}{}", issued.cert_pem, ca.cert_pem()), kustos_ca::parse_certificate_der(&der).unwrap())
}

fn ts(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn cond(t: &str) -> Value {
    json!({"type": t, "status": "True", "reason": "Because", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

#[test]
fn status_rules() {
    let (_, pkix, stub, _) = key();
    let (_, other_pkix, _, _) = key();
    let old = pcr(V1, json!({"stubPKCS10Request": b64(&stub)}));
    let now = chrono::Utc::now();
    let (chain, info) = leaf(&pkix, now, 2);
    let (other_chain, _) = leaf(&other_pkix, now, 2);
    let at = info.not_before + chrono::Duration::minutes(1);
    let issued = |chain: &str, refresh: chrono::DateTime<chrono::Utc>| {
        let mut o = old.clone();
        o["status"] = json!({
            "conditions": [cond("Issued")], "certificateChain": chain,
            "notBefore": ts(info.not_before), "notAfter": ts(info.not_after), "beginRefreshAt": ts(refresh),
        });
        o
    };
    let good_refresh = info.not_before + chrono::Duration::hours(1);
    assert_eq!(
        rendered(&status::validate_status_update(&issued(&chain, good_refresh), &old, at)),
        Vec::<String>::new()
    );
    let with_status = |s: Value| {
        let mut o = old.clone();
        o["status"] = s;
        o
    };
    // (what, new, old, now, the rendered errors)
    type Case<'a> = (&'a str, Value, Value, chrono::DateTime<chrono::Utc>, Vec<String>);
    let cases: Vec<Case> = vec![
        ("denied", with_status(json!({"conditions": [cond("Denied")]})), old.clone(), at, vec![]),
        ("failed", with_status(json!({"conditions": [cond("Failed")]})), old.clone(), at, vec![]),
        (
            "an unknown condition",
            with_status(json!({"conditions": [cond("Ready")]})),
            old.clone(),
            at,
            vec!["status.conditions[0].type: Unsupported value: \"Ready\": supported values: \"Issued\", \"Denied\", \"Failed\"".into()],
        ),
        (
            "two terminal conditions",
            with_status(json!({"conditions": [cond("Denied"), cond("Failed")]})),
            old.clone(),
            at,
            vec!["status.conditions[1].type: Invalid value: \"Failed\": There may be at most one condition with type \"Issued\", \"Denied\", or \"Failed\"".into()],
        ),
        (
            "False",
            with_status(json!({"conditions": [{"type": "Denied", "status": "False", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})),
            old.clone(),
            at,
            vec!["status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\"".into()],
        ),
        (
            "no reason, no time",
            with_status(json!({"conditions": [{"type": "Denied", "status": "True"}]})),
            old.clone(),
            at,
            vec![
                "status.conditions[0].lastTransitionTime: Required value: must be set".into(),
                "status.conditions[0].reason: Required value: must be set".into(),
            ],
        ),
        (
            "denied with a chain",
            with_status(json!({"conditions": [cond("Denied")], "certificateChain": chain})),
            old.clone(),
            at,
            vec!["status: Invalid value: \"<value omitted>\": non-condition status fields must be empty when denying or failing the PodCertificateRequest".into()],
        ),
        (
            "a chain without a condition",
            with_status(json!({"certificateChain": chain})),
            old.clone(),
            at,
            vec!["status: Invalid value: \"<value omitted>\": status is immutable unless transitioning to \"Issued\", \"Denied\", or \"Failed\"".into()],
        ),
        (
            "after a denial",
            issued(&chain, good_refresh),
            with_status(json!({"conditions": [cond("Denied")]})),
            at,
            vec!["status: Invalid value: \"<value omitted>\": immutable after PodCertificateRequest is issued, denied, or failed".into()],
        ),
        (
            "another key's certificate",
            issued(&other_chain, good_refresh),
            old.clone(),
            at,
            vec!["status.certificateChain: Invalid value: \"<value omitted>\": leaf certificate was not issued to the requested public key".into()],
        ),
        (
            "refresh too early",
            issued(&chain, info.not_before + chrono::Duration::minutes(5)),
            old.clone(),
            at,
            vec![format!("status.beginRefreshAt: Invalid value: \"{}\": must be at least 10 minutes after status.notBefore", ts(info.not_before + chrono::Duration::minutes(5)))],
        ),
        (
            "not before far from now",
            issued(&chain, good_refresh),
            old.clone(),
            at + chrono::Duration::minutes(10),
            vec![format!("status.notBefore: Invalid value: \"{}\": must be set to within 5 minutes of kube-apiserver's current time", ts(info.not_before))],
        ),
        (
            "a chain that is not PEM",
            issued("junk", good_refresh),
            old.clone(),
            at,
            vec!["status.certificateChain: Invalid value: \"<value omitted>\": issued certificate chain must contain at least one certificate".into()],
        ),
    ];
    for (what, new, old, now, want) in cases {
        assert_eq!(rendered(&status::validate_status_update(&new, &old, now)), want, "{what}");
    }
    // The same status re-sent after issuing is no change.
    let done = issued(&chain, good_refresh);
    assert!(status::validate_status_update(&done, &done, at + chrono::Duration::hours(5)).is_empty());
    // A lifetime over the spec's maximum.
    let mut short = old.clone();
    short["spec"]["maxExpirationSeconds"] = json!(3600);
    let errs = rendered(&status::validate_status_update(&issued(&chain, good_refresh), &short, at));
    assert_eq!(errs, ["status.certificateChain: Invalid value: \"2h5m0s\": leaf certificate lifetime must be <= spec.maxExpirationSeconds (3600)"]);
}

#[test]
fn both_versions_keep_one_stored_form() {
    let stored = pcr(V1, json!({"pkixPublicKey": "AAAA"}));
    for (version, api_version) in [(V1, "certificates.k8s.io/v1"), (V1beta1, "certificates.k8s.io/v1beta1")] {
        let s = version.stored_as().unwrap();
        assert_eq!(s.gvk, (GROUP, "v1", "PodCertificateRequest"));
        let seen = (s.from_stored)(&stored);
        assert_eq!(seen["apiVersion"], api_version);
        assert_eq!(seen["spec"], stored["spec"]);
        assert_eq!((s.to_stored)(&seen)["apiVersion"], "certificates.k8s.io/v1");
    }
    let versions: Vec<&str> = resources().iter().map(|d| d.version).collect();
    assert_eq!(versions, ["v1", "v1beta1"]);
}
