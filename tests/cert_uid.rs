//! The user's UID from a client certificate (subject attribute 1.3.6.1.4.1.57683.2), end to
//! end: `kubectl auth whoami` shows it; a certificate naming two UIDs authenticates nobody.

mod common;

use common::{send, shared, unique, Server, User};
use serde_json::{json, Value};

/// A DER subject: CN, O, then one UID attribute (UTF8String) per value.
fn subject(cn: &str, o: &str, uids: &[&str]) -> Vec<u8> {
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        assert!(content.len() < 128, "short form lengths only");
        [vec![tag, content.len() as u8], content.to_vec()].concat()
    }
    let atv = |oid: &[u8], value: &str| tlv(0x31, &tlv(0x30, &[tlv(0x06, oid), tlv(0x0c, value.as_bytes())].concat()));
    let uid_oid = [0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];
    let mut rdns = [atv(&[0x55, 0x04, 0x03], cn), atv(&[0x55, 0x04, 0x0a], o)].concat();
    for u in uids {
        rdns.extend(atv(&uid_oid, u));
    }
    tlv(0x30, &rdns)
}

/// A user with a client certificate of the cluster CA whose subject is `subject`.
fn user_with_subject(s: &Server, name: &str, subject: Vec<u8>) -> User {
    let pki = s.data_dir.join("pki");
    let ca_crt = std::fs::read_to_string(pki.join("ca.crt")).expect("reading ca.crt");
    let ca_key = std::fs::read_to_string(pki.join("ca.key")).expect("reading ca.key");
    let ca = kustos_ca::Ca::from_pem(&ca_crt, &ca_key).expect("loading the cluster CA");
    let mut params = kustos_ca::IssueParams::client(name, vec![], chrono::Duration::hours(1));
    params.raw_subject = Some(subject);
    let issued = ca.issue(params, chrono::Utc::now()).expect("issuing a client certificate");
    let key_pem = issued.key_pem.clone().expect("a generated key");
    let yaml = kustos_apiserver::pki::kubeconfig_yaml(
        &s.url,
        &ca_crt,
        name,
        kustos_apiserver::pki::KubeconfigAuth::ClientCert {
            cert_pem: issued.cert_pem.clone(),
            key_pem: key_pem.clone(),
        },
    );
    let file = unique("uid-user");
    let kubeconfig = s.work_dir().join(format!("{file}.kubeconfig"));
    std::fs::write(&kubeconfig, yaml).expect("writing the kubeconfig");
    let identity = [key_pem.as_bytes(), b"\n", issued.cert_pem.as_bytes()].concat();
    User { name: name.to_string(), kubeconfig, identity, cache_dir: s.work_dir().join(format!("{file}-cache")) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_the_user_uid() {
    let s = shared();
    let alice = user_with_subject(&s, "alice", subject("alice", "devs", &["alice-uid-7"]));
    let out = alice.kubectl_ok(&s, &["auth", "whoami", "-o", "json"]);
    let me: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("whoami output is JSON ({e}): {out}"));
    assert_eq!(me["status"]["userInfo"]["username"], "alice");
    assert_eq!(me["status"]["userInfo"]["uid"], "alice-uid-7");
    assert_eq!(me["status"]["userInfo"]["groups"], json!(["devs", "system:authenticated"]));

    // Two UIDs, or an empty one: the certificate authenticates nobody (401).
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    for (what, uids) in [("two UIDs", &["a", "b"][..]), ("an empty UID", &[""][..])] {
        let u = user_with_subject(&s, "mallory", subject("mallory", "devs", uids));
        let url = format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url);
        let r = send(s.http_with_identity(&u.identity).post(url).json(&review)).await;
        common::assert_status(&r, 401, Some("Unauthorized"), what);
    }
}
