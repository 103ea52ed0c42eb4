//! The PKI on disk: creation, reuse, rotation, modes and the admin kubeconfig.

use super::*;
use chrono::TimeZone as _;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 5, 6, 7, 8, 9).unwrap()
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn first_start_creates_everything_with_private_keys_0600() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = ensure(tmp.path(), &["api.example.com".into(), "10.0.0.7".into()], now()).unwrap();
    let d = tmp.path().join("pki");
    assert_eq!(mode(&d), 0o700);
    for key in ["ca.key", "apiserver.key", "sa.key"] {
        assert_eq!(mode(&d.join(key)), 0o600, "{key}");
    }
    for public in ["ca.crt", "apiserver.crt", "sa.pub"] {
        assert_eq!(mode(&d.join(public)), 0o644, "{public}");
    }
    assert!(fs::read_dir(&d).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
    let ca = kustos_ca::parse_certificate_pem(&pki.ca_cert_pem).unwrap();
    assert_eq!(ca.common_name, "kustos-ca");
    assert!(ca.is_ca);
    assert_eq!(ca.not_after, now() + CA_VALIDITY);
    let serving = kustos_ca::parse_certificate_pem(&pki.serving_cert_pem).unwrap();
    assert_eq!(serving.common_name, "kube-apiserver");
    assert_eq!(serving.not_after, now() + CERT_VALIDITY);
    for d in ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"] {
        assert!(serving.dns_names.iter().any(|n| n == d), "{d}");
    }
    assert!(serving.dns_names.iter().any(|n| n == "kubernetes.default.svc.cluster.local"));
    assert!(serving.dns_names.iter().any(|n| n == "api.example.com"));
    for ip in ["127.0.0.1", "::1", "10.0.0.7"] {
        assert!(serving.ip_addresses.contains(&ip.parse().unwrap()), "{ip}");
    }
    assert!(pki.ca().signed(&kustos_ca::certificates_from_pem(&pki.serving_cert_pem).unwrap()[0]));
    assert_eq!(fs::read_to_string(d.join("sa.pub")).unwrap(), pki.sa_pub_pem);
    assert_eq!(
        KeyPair::from_pem(&pki.sa_key_pem).unwrap().public_key_der(),
        kustos_ca::public_key_der_from_pem(&pki.sa_pub_pem).unwrap()
    );
    assert_eq!(pki.ca_bundle_der().unwrap(), vec![pki.ca().cert_der().to_vec()]);
    let shown = format!("{pki:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

#[test]
fn second_start_reuses_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let first = ensure(tmp.path(), &[], now()).unwrap();
    let files: Vec<Vec<u8>> = ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub"]
        .iter()
        .map(|f| fs::read(tmp.path().join("pki").join(f)).unwrap())
        .collect();
    let second = ensure(tmp.path(), &[], now() + Duration::days(1)).unwrap();
    assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
    assert_eq!(first.ca_key_pem(), second.ca_key_pem());
    assert_eq!(first.serving_cert_pem, second.serving_cert_pem);
    assert_eq!(first.sa_key_pem, second.sa_key_pem);
    let again: Vec<Vec<u8>> = ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub"]
        .iter()
        .map(|f| fs::read(tmp.path().join("pki").join(f)).unwrap())
        .collect();
    assert_eq!(files, again);
}

#[test]
fn changed_sans_or_near_expiry_reissue_the_serving_cert_with_the_same_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let first = ensure(tmp.path(), &[], now()).unwrap();
    let second = ensure(tmp.path(), &["new.example.com".into()], now()).unwrap();
    assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
    assert_ne!(first.serving_cert_pem, second.serving_cert_pem);
    assert_ne!(first.serving_key_pem, second.serving_key_pem);
    let info = kustos_ca::parse_certificate_pem(&second.serving_cert_pem).unwrap();
    assert!(info.dns_names.iter().any(|d| d == "new.example.com"));
    // Same SANs again (order and case do not matter): reused.
    let third = ensure(tmp.path(), &["NEW.example.com".into()], now()).unwrap();
    assert_eq!(second.serving_cert_pem, third.serving_cert_pem);
    // 340 days later the certificate has less than 30 days left: re-issued.
    let later = now() + Duration::days(340);
    let fourth = ensure(tmp.path(), &["new.example.com".into()], later).unwrap();
    assert_ne!(third.serving_cert_pem, fourth.serving_cert_pem);
    assert_eq!(kustos_ca::parse_certificate_pem(&fourth.serving_cert_pem).unwrap().not_after, later + CERT_VALIDITY);
    assert_eq!(first.ca_cert_pem, fourth.ca_cert_pem);
}

#[test]
fn a_corrupt_serving_key_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let first = ensure(tmp.path(), &[], now()).unwrap();
    fs::write(tmp.path().join("pki/apiserver.key"), "junk").unwrap();
    let second = ensure(tmp.path(), &[], now()).unwrap();
    assert_ne!(first.serving_cert_pem, second.serving_cert_pem);
    assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
}

#[test]
fn corrupt_or_half_present_ca_files_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    ensure(tmp.path(), &[], now()).unwrap();
    let key_path = tmp.path().join("pki/ca.key");
    fs::write(&key_path, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").unwrap();
    let err = format!("{:#}", ensure(tmp.path(), &[], now()).unwrap_err());
    assert!(err.contains("ca.key"), "{err}");
    // Not overwritten.
    assert!(fs::read_to_string(&key_path).unwrap().contains("AAAA"));

    // A key from another CA: mismatch.
    let other = Ca::generate("other", CA_VALIDITY, now()).unwrap();
    fs::write(&key_path, other.key_pem()).unwrap();
    let err = format!("{:#}", ensure(tmp.path(), &[], now()).unwrap_err());
    assert!(err.contains("ca.crt") && err.contains("does not belong"), "{err}");

    let cert_path = tmp.path().join("pki/ca.crt");
    fs::write(&cert_path, "not a cert").unwrap();
    let err = format!("{:#}", ensure(tmp.path(), &[], now()).unwrap_err());
    assert!(err.contains("ca.crt"), "{err}");

    fs::remove_file(&cert_path).unwrap();
    let err = format!("{:#}", ensure(tmp.path(), &[], now()).unwrap_err());
    assert!(err.contains("ca.crt") && err.contains("missing"), "{err}");
    assert!(key_path.exists());
}

#[test]
fn a_ca_file_with_several_certificates_signs_with_the_one_matching_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let first = ensure(tmp.path(), &[], now()).unwrap();
    let d = tmp.path().join("pki");
    let old = first.ca().clone();
    let new = Ca::generate("kustos-ca-2", CA_VALIDITY, now()).unwrap();
    // Expired a day before now(): kept in the file, never trusted.
    let gone = Ca::generate("gone", Duration::days(30), now() - Duration::days(31)).unwrap();
    type Case = (&'static str, String, String, &'static str, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "rotation: new CA and key, old CA still trusted",
            format!("{}{}{}", new.cert_pem(), old.cert_pem(), gone.cert_pem()),
            new.key_pem(),
            "kustos-ca-2",
            vec!["kustos-ca-2", "kustos-ca"],
        ),
        (
            "new CA distributed first, old key still signing",
            format!("{}{}", new.cert_pem(), old.cert_pem()),
            old.key_pem(),
            "kustos-ca",
            vec!["kustos-ca-2", "kustos-ca"],
        ),
        ("back to one CA", old.cert_pem().to_string(), old.key_pem(), "kustos-ca", vec!["kustos-ca"]),
    ];
    for (name, crt, key, signer, trusted) in cases {
        fs::write(d.join("ca.crt"), &crt).unwrap();
        fs::write(d.join("ca.key"), &key).unwrap();
        let pki = ensure(tmp.path(), &[], now()).unwrap();
        assert_eq!(pki.ca().common_name(), signer, "{name}: signing CA");
        assert_eq!(kustos_ca::parse_certificate_pem(&pki.ca_cert_pem).unwrap().common_name, signer, "{name}");
        let got: Vec<String> = pki
            .ca_bundle_der()
            .unwrap()
            .iter()
            .map(|der| kustos_ca::parse_certificate_der(der).unwrap().common_name)
            .collect();
        assert_eq!(got, trusted, "{name}: client CA bundle");
        // The serving certificate is (re-)issued by the signing CA.
        let serving = kustos_ca::certificates_from_pem(&pki.serving_cert_pem).unwrap();
        assert!(pki.ca().signed(&serving[0]), "{name}: serving certificate from the signing CA");
        // The files are never rewritten.
        assert_eq!(fs::read_to_string(d.join("ca.crt")).unwrap(), crt, "{name}");
    }
    // A key matching none of them is an error naming the files.
    fs::write(d.join("ca.crt"), format!("{}{}", new.cert_pem(), old.cert_pem())).unwrap();
    fs::write(d.join("ca.key"), gone.key_pem()).unwrap();
    let err = format!("{:#}", ensure(tmp.path(), &[], now()).unwrap_err());
    assert!(err.contains("ca.crt") && err.contains("does not belong"), "{err}");
}

#[test]
fn corrupt_sa_key_is_an_error_and_a_stale_sa_pub_is_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let first = ensure(tmp.path(), &[], now()).unwrap();
    let pub_path = tmp.path().join("pki/sa.pub");
    fs::write(&pub_path, "stale").unwrap();
    let second = ensure(tmp.path(), &[], now()).unwrap();
    assert_eq!(first.sa_pub_pem, second.sa_pub_pem);
    assert_eq!(fs::read_to_string(&pub_path).unwrap(), first.sa_pub_pem);
    fs::write(tmp.path().join("pki/sa.key"), "junk").unwrap();
    let err = format!("{:#}", ensure(tmp.path(), &[], now()).unwrap_err());
    assert!(err.contains("sa.key"), "{err}");
}

#[test]
fn existing_world_readable_keys_are_restricted() {
    let tmp = tempfile::tempdir().unwrap();
    ensure(tmp.path(), &[], now()).unwrap();
    let key = tmp.path().join("pki/ca.key");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(tmp.path().join("pki"), fs::Permissions::from_mode(0o755)).unwrap();
    ensure(tmp.path(), &[], now()).unwrap();
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(&tmp.path().join("pki")), 0o700);
}

#[test]
fn serving_sans_parse_ips_and_dedupe() {
    let (dns, ips) =
        serving_sans(&["10.1.2.3".into(), "[fd00::1]".into(), "localhost".into(), " ".into(), "x.io".into()]);
    assert_eq!(dns.iter().filter(|d| *d == "localhost").count(), 1);
    assert!(dns.contains(&"x.io".to_string()));
    assert!(ips.contains(&"10.1.2.3".parse().unwrap()));
    assert!(ips.contains(&"fd00::1".parse().unwrap()));
    assert!(is_dns_name("node-1.example") && !is_dns_name("bad_host") && !is_dns_name(""));
}

fn kubeconfig_value(path: &Path) -> serde_yaml::Value {
    serde_yaml::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

fn data(v: &serde_yaml::Value) -> String {
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap()).unwrap()
}

#[test]
fn admin_kubeconfig_is_written_and_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = ensure(tmp.path(), &[], now()).unwrap();
    let path = write_admin_kubeconfig(tmp.path(), &pki, "https://127.0.0.1:6443", now()).unwrap();
    assert_eq!(path, tmp.path().join("admin.kubeconfig"));
    assert_eq!(mode(&path), 0o600);
    let v = kubeconfig_value(&path);
    assert_eq!(v["current-context"].as_str(), Some("kustos"));
    assert_eq!(v["contexts"][0]["name"].as_str(), Some("kustos"));
    assert_eq!(v["contexts"][0]["context"]["cluster"].as_str(), Some("kustos"));
    assert_eq!(v["contexts"][0]["context"]["user"].as_str(), Some("kustos-admin"));
    assert_eq!(v["clusters"][0]["name"].as_str(), Some("kustos"));
    assert_eq!(v["clusters"][0]["cluster"]["server"].as_str(), Some("https://127.0.0.1:6443"));
    assert_eq!(data(&v["clusters"][0]["cluster"]["certificate-authority-data"]), pki.ca_cert_pem);
    assert_eq!(v["users"][0]["name"].as_str(), Some("kustos-admin"));
    let cert = data(&v["users"][0]["user"]["client-certificate-data"]);
    let key = data(&v["users"][0]["user"]["client-key-data"]);
    let info = kustos_ca::parse_certificate_pem(&cert).unwrap();
    assert_eq!(info.common_name, "kustos-admin");
    assert_eq!(info.organizations, vec!["system:masters"]);
    assert!(info.usages.contains(&kustos_ca::Usage::ClientAuth));
    assert_eq!(info.not_after, now() + CERT_VALIDITY);
    assert_eq!(KeyPair::from_pem(&key).unwrap().public_key_der(), info.public_key_der);

    // Same inputs: the file is left alone.
    let before = fs::read(&path).unwrap();
    write_admin_kubeconfig(tmp.path(), &pki, "https://127.0.0.1:6443", now() + Duration::days(1)).unwrap();
    assert_eq!(before, fs::read(&path).unwrap());

    // New port: rewritten, same certificate.
    write_admin_kubeconfig(tmp.path(), &pki, "https://127.0.0.1:7443", now() + Duration::days(1)).unwrap();
    let v = kubeconfig_value(&path);
    assert_eq!(v["clusters"][0]["cluster"]["server"].as_str(), Some("https://127.0.0.1:7443"));
    assert_eq!(data(&v["users"][0]["user"]["client-certificate-data"]), cert);

    // Near expiry: a new certificate.
    let later = now() + Duration::days(340);
    write_admin_kubeconfig(tmp.path(), &pki, "https://127.0.0.1:7443", later).unwrap();
    let v = kubeconfig_value(&path);
    assert_ne!(data(&v["users"][0]["user"]["client-certificate-data"]), cert);

    // Another CA (e.g. DIR/pki was replaced): a new certificate from the current CA.
    let other_dir = tempfile::tempdir().unwrap();
    let other = ensure(other_dir.path(), &[], now()).unwrap();
    write_admin_kubeconfig(tmp.path(), &other, "https://127.0.0.1:7443", now()).unwrap();
    let v = kubeconfig_value(&path);
    let cert = data(&v["users"][0]["user"]["client-certificate-data"]);
    assert!(other.ca().signed(&kustos_ca::certificates_from_pem(&cert).unwrap()[0]));
    assert_eq!(data(&v["clusters"][0]["cluster"]["certificate-authority-data"]), other.ca_cert_pem);

    // Garbage: replaced.
    fs::write(&path, "{{{{").unwrap();
    write_admin_kubeconfig(tmp.path(), &other, "https://127.0.0.1:7443", now()).unwrap();
    assert!(kubeconfig_value(&path)["users"][0]["user"]["client-key-data"].as_str().is_some());
}

#[test]
fn token_kubeconfig_and_quoting() {
    let y = kubeconfig_yaml(
        "https://h:1",
        "CA",
        "kubelet-bootstrap",
        KubeconfigAuth::Token("abcdef.0123456789abcdef".into()),
    );
    let v: serde_yaml::Value = serde_yaml::from_str(&y).unwrap();
    assert_eq!(v["users"][0]["user"]["token"].as_str(), Some("abcdef.0123456789abcdef"));
    assert_eq!(v["users"][0]["name"].as_str(), Some("kubelet-bootstrap"));
    assert!(v["users"][0]["user"].get("client-key-data").is_none());
    let y = kubeconfig_yaml("https://h:1", "CA", "we\"ird\\user: x", KubeconfigAuth::Token("t".into()));
    let v: serde_yaml::Value = serde_yaml::from_str(&y).unwrap();
    assert_eq!(v["users"][0]["name"].as_str(), Some("we\"ird\\user: x"));
    assert_eq!(format!("{:?}", KubeconfigAuth::Token("secret".into())), "Token");
}
