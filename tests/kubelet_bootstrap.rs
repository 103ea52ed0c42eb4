//! The kubelet TLS bootstrap flow against `kustos server`, done as a kubelet does it, with
//! kube-rs and nothing but what an admin hands a new node: a bootstrap kubeconfig made by
//! `kustos token create` + `kustos kubeconfig bootstrap`.
//!
//! bootstrap token → CSR (`kubernetes.io/kube-apiserver-client-kubelet`, fresh P-256 key) →
//! auto-approved (SubjectAccessReview on `certificatesigningrequests/nodeclient`) → signed →
//! certificate read through a watch by name → a kubeconfig with the certificate → API calls
//! as `system:node:<name>` → renewal with the node's own certificate (`selfnodeclient`).

mod common;

use common::kubelet::{approval, client_from_yaml, node_csr, node_kubeconfig, request_certificate};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

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
    // The controllers approve and sign from their informer's copies, which carry no
    // managedFields: the stored object still has the kubelet's entry and gains theirs.
    let managed: Vec<(&str, &str)> = csr
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| (e.operation.as_deref().unwrap_or_default(), e.subresource.as_deref().unwrap_or_default()))
        .collect();
    for want in [("Update", ""), ("Update", "approval"), ("Update", "status")] {
        assert!(managed.contains(&want), "{want:?} in {managed:?}");
    }
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

/// `kustos_csr_parses_total`, `kustos_csr_signature_checks_total` and
/// `kustos_csr_parse_cache_hits_total` from the server's `/metrics`.
async fn csr_reads(s: &common::Server) -> [u64; 3] {
    let r = common::send(s.http().get(format!("{}/metrics", s.url))).await;
    r.expect_code(200, "GET /metrics");
    ["kustos_csr_parses_total ", "kustos_csr_signature_checks_total ", "kustos_csr_parse_cache_hits_total "].map(|p| {
        let line = r.text.lines().find_map(|l| l.strip_prefix(p)).unwrap_or_else(|| panic!("/metrics lacks {p}"));
        line.trim().parse().unwrap_or_else(|_| panic!("{p}{line}"))
    })
}

/// Every reader of a request in `kustos server` (admission, validation, the approvers, the
/// signer) shares one read of it: one parse and one self-signature check per request, for a
/// bootstrap (validation first) and for a renewal (NodeRestriction's unverified read first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_parsed_and_its_signature_checked_once_on_its_way() {
    let s = common::Server::start();
    let kubeconfig = s.kubeconfig.to_string_lossy().into_owned();
    let node = common::unique("node");
    let token = common::kustos_ok(&["token", "create", "--kubeconfig", &kubeconfig]).trim().to_string();
    let bootstrap = common::kustos_ok(&["kubeconfig", "bootstrap", "--kubeconfig", &kubeconfig, "--token", &token]);
    let boot = client_from_yaml(&bootstrap).await;

    let before = csr_reads(&s).await;
    let (csr_pem, key_pem) = node_csr(&node);
    let csr = request_certificate(&boot, &format!("node-csr-{node}-1"), &csr_pem).await;
    let cert_pem = csr.status.and_then(|st| st.certificate).expect("certificate").0;
    let after = csr_reads(&s).await;
    let delta = |a: [u64; 3], b: [u64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let bootstrap_reads = delta(after, before);
    eprintln!("bootstrap: parses, signature checks, hits = {bootstrap_reads:?}");
    assert_eq!(bootstrap_reads[..2], [1, 1], "one parse and one signature check for a bootstrap: {bootstrap_reads:?}");
    assert!(bootstrap_reads[2] >= 2, "the approver and the signer read the kept request: {bootstrap_reads:?}");

    let as_node = client_from_yaml(&node_kubeconfig(&bootstrap, &cert_pem, &key_pem)).await;
    let (csr_pem2, _) = node_csr(&node);
    request_certificate(&as_node, &format!("node-csr-{node}-2"), &csr_pem2).await;
    let renewal_reads = delta(csr_reads(&s).await, after);
    eprintln!("renewal: parses, signature checks, hits = {renewal_reads:?}");
    assert_eq!(renewal_reads[..2], [1, 1], "one parse and one signature check for a renewal: {renewal_reads:?}");
    assert!(renewal_reads[2] >= 3, "validation, the approver and the signer read the kept request: {renewal_reads:?}");
}
