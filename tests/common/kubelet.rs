//! The kubelet's side of TLS bootstrapping, for the suites that check who signs its CSR:
//! a bootstrap token, a CSR made with it, and a watch recording every certificate issued.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::Api;

use super::{unique, Server};

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";

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
