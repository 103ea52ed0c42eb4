//! The `--etcd-*` settings: checked, then turned into etcd-client's connect options.

use std::path::PathBuf;

use super::*;

/// Why `--etcd-*` settings are refused.
#[derive(Debug, thiserror::Error)]
pub enum EtcdConfigError {
    #[error("--etcd-servers is required with --storage etcd")]
    NoServers,
    #[error("--etcd-servers: {0:?} is not http://HOST:PORT or https://HOST:PORT")]
    BadServer(String),
    #[error("--etcd-servers: use https for every server or for none")]
    MixedSchemes,
    #[error("--etcd-cafile, --etcd-certfile and --etcd-keyfile need https:// --etcd-servers")]
    TlsFilesWithoutHttps,
    #[error("--etcd-certfile and --etcd-keyfile go together")]
    CertWithoutKey,
    #[error("--etcd-prefix {0:?} must start with /")]
    RelativePrefix(String),
    #[error("reading {flag} {}: {source}", path.display())]
    Read { flag: &'static str, path: PathBuf, source: std::io::Error },
}

/// How to reach etcd (`--etcd-*` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `--etcd-servers`: `http://host:port` or `https://host:port`.
    pub servers: Vec<String>,
    /// `--etcd-prefix`: where the cluster's keys live in etcd.
    pub prefix: String,
    /// `--etcd-cafile`: CA bundle that verifies etcd's serving certificate.
    pub ca_file: Option<PathBuf>,
    /// `--etcd-certfile` / `--etcd-keyfile`: client certificate for etcd.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl EtcdConfig {
    pub fn new(servers: Vec<String>) -> Self {
        EtcdConfig { servers, prefix: TRAIT_ROOT.into(), ca_file: None, cert_file: None, key_file: None }
    }

    /// Check the settings without connecting: servers given and well-formed, prefix absolute,
    /// TLS files only with https and cert and key together.
    pub fn validate(&self) -> std::result::Result<(), EtcdConfigError> {
        if self.servers.is_empty() {
            return Err(EtcdConfigError::NoServers);
        }
        for s in &self.servers {
            let rest = s.strip_prefix("http://").or_else(|| s.strip_prefix("https://"));
            match rest {
                Some(hostport) if !hostport.is_empty() && !hostport.contains('/') => {}
                _ => return Err(EtcdConfigError::BadServer(s.clone())),
            }
        }
        let tls = self.servers.iter().filter(|s| s.starts_with("https://")).count();
        if tls != 0 && tls != self.servers.len() {
            return Err(EtcdConfigError::MixedSchemes);
        }
        let files = self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        if files && tls == 0 {
            return Err(EtcdConfigError::TlsFilesWithoutHttps);
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(EtcdConfigError::CertWithoutKey);
        }
        if !self.prefix.starts_with('/') {
            return Err(EtcdConfigError::RelativePrefix(self.prefix.clone()));
        }
        Ok(())
    }

    pub(super) fn connect_options(&self) -> std::result::Result<ConnectOptions, EtcdConfigError> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        if self.servers.iter().any(|s| s.starts_with("https://")) {
            let read = |flag: &'static str, p: &PathBuf| {
                std::fs::read(p).map_err(|source| EtcdConfigError::Read { flag, path: p.clone(), source })
            };
            let mut tls = etcd_client::TlsOptions::new();
            if let Some(ca) = &self.ca_file {
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(read("--etcd-cafile", ca)?));
            }
            if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
                tls = tls.identity(etcd_client::Identity::from_pem(
                    read("--etcd-certfile", cert)?,
                    read("--etcd-keyfile", key)?,
                ));
            }
            opts = opts.with_tls(tls);
        }
        Ok(opts)
    }
}
