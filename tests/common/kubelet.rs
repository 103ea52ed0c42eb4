//! The kubelet's side of TLS bootstrapping, for the suites that check who signs its CSR:
//! a bootstrap token, a CSR made with it, and a watch recording every certificate issued.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::Api;

use super::{unique, Server};

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelet serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// Bound for one CSR to be decided (and, when approved, signed).
pub const ISSUE_WAIT: Duration = Duration::from_secs(60);

/// A kube-rs client for a kubeconfig's YAML.
pub async fn client_from_yaml(yaml: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("a kubeconfig kube-rs reads");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kube-rs accepts the kubeconfig");
    kube::Client::try_from(cfg).expect("building the client")
}

/// A fresh P-256 key and a CSR for `system:node:<node>` in `system:nodes` with the given
/// SANs: (CSR PEM, key PEM).
pub fn node_csr_with_sans(node: &str, dns: &[&str], ips: &[std::net::IpAddr]) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("P-256 key");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    for d in dns {
        params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().expect("a DNS name")));
    }
    for ip in ips {
        params.subject_alt_names.push(rcgen::SanType::IpAddress(*ip));
    }
    let csr = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    (csr, key.serialize_pem())
}

/// A fresh P-256 key and a client CSR for `system:node:<node>` (no SANs).
pub fn node_csr(node: &str) -> (String, String) {
    node_csr_with_sans(node, &[], &[])
}

pub fn csr_object(name: &str, csr_pem: &str, signer: &str, usages: &[&str]) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty())
}

/// Create `csr` and watch it by name (as client-go's certificate manager does) until it is
/// issued or denied; returns the CSR as last seen.
pub async fn submit_csr(client: &kube::Client, csr: &CertificateSigningRequest) -> CertificateSigningRequest {
    let name = csr.metadata.name.clone().unwrap_or_default();
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    api.create(&PostParams::default(), csr).await.expect("creating the CSR");
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let done = watcher(api, cfg)
        .applied_objects()
        .try_filter(|csr| std::future::ready(issued(csr) || has_condition(csr, "Denied")));
    let mut done = std::pin::pin!(done);
    match tokio::time::timeout(ISSUE_WAIT, done.next()).await {
        Ok(Some(Ok(csr))) => csr,
        Ok(other) => panic!("watching CSR {name} ended before a decision: {other:?}"),
        Err(_) => panic!("CSR {name} was neither issued nor denied within {ISSUE_WAIT:?}"),
    }
}

/// A kubelet client CSR made with `client`, watched until its certificate is there.
pub async fn request_certificate(client: &kube::Client, name: &str, csr_pem: &str) -> CertificateSigningRequest {
    let csr =
        submit_csr(client, &csr_object(name, csr_pem, KUBELET_CLIENT, &["digital signature", "client auth"])).await;
    assert!(issued(&csr), "CSR {name} was denied: {:?}", csr.status);
    csr
}

/// The reason and message of the CSR's true `type_` condition (Approved or Denied).
pub fn condition(csr: &CertificateSigningRequest, type_: &str) -> (String, String) {
    let c = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .unwrap_or_else(|| panic!("no {type_} condition: {csr:?}"));
    assert_eq!(c.status, "True");
    (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default())
}

/// The reason and message of the CSR's Approved condition.
pub fn approval(csr: &CertificateSigningRequest) -> (String, String) {
    condition(csr, "Approved")
}

/// A kubeconfig like the kubelet writes after bootstrapping: the bootstrap kubeconfig's
/// cluster with the new client certificate.
pub fn node_kubeconfig(bootstrap_yaml: &str, cert_pem: &[u8], key_pem: &str) -> String {
    let kc: serde_yaml::Value = serde_yaml::from_str(bootstrap_yaml).expect("bootstrap kubeconfig YAML");
    let cluster = &kc["clusters"][0]["cluster"];
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: default-auth\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    user: default-auth\ncurrent-context: default-context\n",
        cluster["server"].as_str().expect("server URL"),
        cluster["certificate-authority-data"].as_str().expect("CA data in the bootstrap kubeconfig"),
        b64(cert_pem),
        b64(key_pem.as_bytes()),
    )
}

/// A bootstrap token Secret (valid, for authentication) whose id starts with `letter`; the
/// token.
pub async fn bootstrap_token(s: &Server, letter: char) -> String {
    let digits: String = unique("").chars().filter(char::is_ascii_digit).collect();
    let id = format!("{letter}{:0>5}", &digits[digits.len().saturating_sub(5)..]);
    let secret = "0123456789abcdef";
    let data: BTreeMap<String, String> = [
        ("token-id", id.as_str()),
        ("token-secret", secret),
        ("usage-bootstrap-authentication", "true"),
        ("expiration", "2099-01-01T00:00:00Z"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let obj = Secret {
        metadata: ObjectMeta { name: Some(format!("bootstrap-token-{id}")), ..Default::default() },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::namespaced(s.kube_client().await, "kube-system");
    secrets.create(&PostParams::default(), &obj).await.expect("creating the bootstrap token Secret");
    format!("{id}.{secret}")
}

/// A kube-rs client for a kubeconfig file.
pub async fn client_for(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("reading a kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kube-rs accepts the kubeconfig");
    kube::Client::try_from(cfg).expect("building a client")
}

/// As a kubelet does with its bootstrap token: a CSR for `system:node:<node>`.
pub async fn request_node_certificate(as_bootstrap: &kube::Client, name: &str, node: &str) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let pem = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: KUBELET_CLIENT.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<CertificateSigningRequest> = Api::all(as_bootstrap.clone());
    api.create(&PostParams::default(), &csr).await.expect("creating the CSR as the bootstrap token");
}

/// Every distinct `status.certificate` each CSR was seen with, by a watch of all CSRs.
pub type Seen = Arc<Mutex<BTreeMap<String, BTreeSet<Vec<u8>>>>>;

pub fn watch_certificates(client: kube::Client) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let api: Api<CertificateSigningRequest> = Api::all(client);
            let mut events =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff().applied_objects());
            while let Some(ev) = events.next().await {
                let Ok(csr) = ev else { continue };
                let cert = csr.status.and_then(|s| s.certificate).map(|c| c.0).filter(|c| !c.is_empty());
                if let (Some(name), Some(cert)) = (csr.metadata.name, cert) {
                    seen.lock().unwrap_or_else(|e| e.into_inner()).entry(name).or_default().insert(cert);
                }
            }
        }
    });
    (seen, task)
}

/// `kustos controller-manager` flags for a replica on `s`: the cluster CA signs, short leader-election times, a Lease of its own.
pub fn replica_args(s: &Server, lease: &str) -> Vec<String> {
    let pki = s.data_dir.join("pki");
    vec![
        format!("--cluster-signing-cert-file={}", pki.join("ca.crt").display()),
        format!("--cluster-signing-key-file={}", pki.join("ca.key").display()),
        "--leader-elect-lease-duration=4s".into(),
        "--leader-elect-renew-deadline=3s".into(),
        "--leader-elect-retry-period=500ms".into(),
        format!("--leader-elect-resource-name={lease}"),
    ]
}
