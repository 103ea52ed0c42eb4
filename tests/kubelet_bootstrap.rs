//! The kubelet TLS bootstrap flow against `kustos server`, done as a kubelet does it, with
//! kube-rs and nothing but what an admin hands a new node: a bootstrap kubeconfig made by
//! `kustos token create` + `kustos kubeconfig bootstrap`.
//!
//! bootstrap token → CSR (`kubernetes.io/kube-apiserver-client-kubelet`, fresh P-256 key) →
//! auto-approved (SubjectAccessReview on `certificatesigningrequests/nodeclient`) → signed →
//! certificate read through a watch by name → a kubeconfig with the certificate → API calls
//! as `system:node:<name>` → renewal with the node's own certificate (`selfnodeclient`).

mod common;

use std::time::Duration;

use base64::Engine as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::Api;

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Bound for one CSR to be approved and signed.
const ISSUE_WAIT: Duration = Duration::from_secs(60);

async fn client_from_yaml(yaml: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("a kubeconfig kube-rs reads");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kube-rs accepts the kubeconfig");
    kube::Client::try_from(cfg).expect("building the client")
}

/// A fresh P-256 key and a CSR for `system:node:<node>` in `system:nodes`: (CSR PEM, key PEM).
fn node_csr(node: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("P-256 key");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let csr = params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM");
    (csr, key.serialize_pem())
}

fn csr_object(name: &str, csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Create the CSR and watch it by name (as client-go's certificate manager does) until the
/// certificate is there; returns the CSR as last seen.
async fn request_certificate(client: &kube::Client, name: &str, csr_pem: &str) -> CertificateSigningRequest {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    api.create(&PostParams::default(), &csr_object(name, csr_pem)).await.expect("creating the CSR");
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let issued = watcher(api, cfg).applied_objects().try_filter(|csr| {
        std::future::ready(csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty()))
    });
    let mut issued = std::pin::pin!(issued);
    match tokio::time::timeout(ISSUE_WAIT, issued.next()).await {
        Ok(Some(Ok(csr))) => csr,
        Ok(other) => panic!("watching CSR {name} ended without a certificate: {other:?}"),
        Err(_) => panic!("CSR {name} got no certificate within {ISSUE_WAIT:?}"),
    }
}

fn approval(csr: &CertificateSigningRequest) -> (String, String) {
    let c = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Approved"))
        .unwrap_or_else(|| panic!("no Approved condition: {csr:?}"));
    assert_eq!(c.status, "True");
    (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default())
}

/// A kubeconfig like the kubelet writes after bootstrapping: the bootstrap kubeconfig's
/// cluster with the new client certificate.
fn node_kubeconfig(bootstrap_yaml: &str, cert_pem: &[u8], key_pem: &str) -> String {
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

async fn whoami(client: &kube::Client) -> (String, Vec<String>) {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview { metadata: Default::default(), status: None };
    let got = api.create(&PostParams::default(), &review).await.expect("SelfSubjectReview");
    let user = got.status.and_then(|s| s.user_info).expect("userInfo");
    (user.username.unwrap_or_default(), user.groups.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_with_a_bootstrap_token_gets_a_certificate_and_renews_it_with_its_own() {
    let s = common::shared();
    let kubeconfig = s.kubeconfig.to_string_lossy().into_owned();
    let node = common::unique("node");

    // What the admin does: a token, then a bootstrap kubeconfig for the node.
    let token = common::kustos_ok(&["token", "create", "--kubeconfig", &kubeconfig]).trim().to_string();
    let id = token.split('.').next().unwrap_or_default().to_string();
    let bootstrap = common::kustos_ok(&["kubeconfig", "bootstrap", "--kubeconfig", &kubeconfig, "--token", &token]);
    let boot = client_from_yaml(&bootstrap).await;
    let (user, groups) = whoami(&boot).await;
    assert_eq!(user, format!("system:bootstrap:{id}"));
    assert!(groups.contains(&"system:bootstrappers".to_string()), "{groups:?}");

    // First certificate, requested with the bootstrap token.
    let (csr_pem, key_pem) = node_csr(&node);
    let first_name = format!("node-csr-{node}-1");
    let csr = request_certificate(&boot, &first_name, &csr_pem).await;
    let (reason, message) = approval(&csr);
    assert_eq!(reason, "AutoApproved");
    assert!(message.contains("kubelet client certificate"), "{message}");
    assert_eq!(csr.spec.username.as_deref(), Some(format!("system:bootstrap:{id}").as_str()), "requester recorded");
    let cert_pem = csr.status.and_then(|s| s.certificate).expect("certificate").0;

    // The certificate is the node's client identity, issued by the cluster CA.
    let info = kustos_ca::parse_certificate_pem(&String::from_utf8_lossy(&cert_pem)).expect("issued certificate");
    assert_eq!(info.common_name, format!("system:node:{node}"));
    assert_eq!(info.organizations, vec!["system:nodes".to_string()]);
    assert!(!info.is_ca);
    assert!(info.usages.contains(&kustos_ca::Usage::ClientAuth), "{:?}", info.usages);
    let ca = kustos_ca::parse_certificate_pem(&String::from_utf8_lossy(&s.ca_pem())).expect("cluster CA");
    assert_eq!(info.issuer_der, ca.subject_der, "issued by the cluster CA");
    assert_eq!(
        info.public_key_der,
        kustos_ca::KeyPair::from_pem(&key_pem).expect("the node key").public_key_der(),
        "certifies the node's own key"
    );

    // The node calls the API with it.
    let node_yaml = node_kubeconfig(&bootstrap, &cert_pem, &key_pem);
    let as_node = client_from_yaml(&node_yaml).await;
    let (user, groups) = whoami(&as_node).await;
    assert_eq!(user, format!("system:node:{node}"));
    assert!(groups.contains(&"system:nodes".to_string()), "{groups:?}");
    let leases: Api<Lease> = Api::namespaced(as_node.clone(), "kube-node-lease");
    let lease = Lease {
        metadata: ObjectMeta { name: Some(node.clone()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.clone()),
            lease_duration_seconds: Some(40),
            ..Default::default()
        }),
    };
    leases.create(&PostParams::default(), &lease).await.expect("the node creates its own Lease");

    // Renewal: a new key, requested with the node's own certificate (selfnodeclient).
    let (csr_pem2, key_pem2) = node_csr(&node);
    let renewed = request_certificate(&as_node, &format!("node-csr-{node}-2"), &csr_pem2).await;
    let (reason, message) = approval(&renewed);
    assert_eq!(reason, "AutoApproved");
    assert!(message.contains("self kubelet client certificate"), "approved as a self renewal: {message}");
    assert_eq!(renewed.spec.username.as_deref(), Some(format!("system:node:{node}").as_str()));
    let cert2 = renewed.status.and_then(|s| s.certificate).expect("renewed certificate").0;
    assert_ne!(cert2, cert_pem, "a new certificate");
    let (user, _) = whoami(&client_from_yaml(&node_kubeconfig(&bootstrap, &cert2, &key_pem2)).await).await;
    assert_eq!(user, format!("system:node:{node}"), "the renewed certificate authenticates");
}
