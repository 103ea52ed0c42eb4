//! Building the clients controllers run with.

use base64::Engine as _;

/// A client for `server` (https URL) trusting `ca_pem` and presenting a client certificate.
/// The key never leaves memory.
pub async fn from_client_cert(
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> anyhow::Result<kube::Client> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kustos\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: controller\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: kustos\n  context:\n    cluster: kustos\n    user: controller\ncurrent-context: kustos\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem)
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}
