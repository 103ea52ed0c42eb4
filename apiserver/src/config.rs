//! The settings of `kustos server` and `kustos apiserver` ([`Config`]), one field per flag,
//! with kube-apiserver's defaults. What enters is the command line, mapped by the binary;
//! what leaves is the [`Config`] that [`crate::start`] runs.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::{audit, authn, pki, storage};

/// Settings of `kustos server` / `kustos apiserver`.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub bind_address: IpAddr,
    pub secure_port: u16,
    pub tls_sans: Vec<String>,
    pub anonymous_auth: bool,
    /// Revisions of history kept for watch and continue (compaction).
    pub history_revisions: u64,
    /// How often history beyond `history_revisions` is compacted away.
    pub compaction_interval: std::time::Duration,
    /// Include kubeadm's TLS-bootstrap bindings in the default RBAC policy.
    pub tls_bootstrap_bindings: bool,
    /// Authenticate bootstrap tokens (`--enable-bootstrap-token-auth`).
    pub enable_bootstrap_token_auth: bool,
    /// `--service-account-issuer`: the first one is put into new tokens, all are accepted.
    pub service_account_issuers: Vec<String>,
    /// `--service-account-key-file`: more PEM files of token verification keys (besides
    /// the apiserver's own `sa.pub`).
    pub service_account_key_files: Vec<PathBuf>,
    /// `--api-audiences` (empty: the issuers).
    pub api_audiences: Vec<String>,
    /// `--service-account-max-token-expiration` (None: a year,
    /// [`pki::service_account::DEFAULT_MAX_EXPIRATION`]; zero: no cap).
    pub service_account_max_token_expiration: Option<std::time::Duration>,
    /// `--service-account-extend-token-expiration` (default true): kubelets' transition
    /// tokens last a year ([`pki::service_account::ServiceAccountTokens::extended_seconds`]).
    pub service_account_extend_token_expiration: bool,
    /// `--service-account-signing-endpoint`: an external signer's Unix socket (a path, or
    /// `@name`) signs the tokens and serves the keys that verify them (`pki::externaljwt`).
    pub service_account_signing_endpoint: Option<String>,
    /// How often `DIR/pki/ca.crt` is checked for a new client CA bundle (and `DIR/pki`'s
    /// service-account keys for a rotation).
    pub client_ca_reload_interval: std::time::Duration,
    /// `--enable-priority-and-fairness`: API Priority and Fairness, else max-in-flight limits.
    pub enable_priority_and_fairness: bool,
    /// `--max-requests-inflight`: read-only requests at once (without APF), or with
    /// `max_mutating_requests_inflight` the server's total seats (with APF).
    pub max_requests_inflight: u32,
    /// `--max-mutating-requests-inflight`.
    pub max_mutating_requests_inflight: u32,
    /// Where the objects live (`--storage`).
    pub storage: StorageConfig,
    /// `--v`: from 2 on, one log line per request.
    pub verbosity: u8,
    /// `--runtime-config`: group versions and resources turned off
    /// ([`crate::registry::runtime_config`]).
    pub runtime_config: Vec<String>,
    /// `--authentication-token-webhook-*`: bearer tokens no other authenticator takes are
    /// reviewed by this webhook ([`authn::webhook`]).
    pub token_webhook: Option<authn::webhook::Settings>,
    /// The `--audit-*` flags.
    pub audit: audit::Config,
    /// `--authentication-config`: JWT authenticators and anonymous access
    /// ([`authn::authentication_config`]), polled for changes every
    /// `authentication_config_reload_interval`.
    pub authentication_config: Option<PathBuf>,
    pub authentication_config_reload_interval: std::time::Duration,
    /// `--anonymous-auth` was given explicitly (then the file may not have `anonymous`).
    pub anonymous_auth_flag_set: bool,
}

/// `--storage`: the embedded SQLite store in the data dir, or etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StorageConfig {
    /// `DATA_DIR/kustos.db`.
    #[default]
    Sqlite,
    Etcd(storage::etcd::EtcdConfig),
}

impl Config {
    pub fn new(data_dir: PathBuf) -> Self {
        Config {
            data_dir,
            bind_address: IpAddr::from([127, 0, 0, 1]),
            secure_port: 6443,
            tls_sans: Vec::new(),
            anonymous_auth: true,
            history_revisions: 100_000,
            compaction_interval: std::time::Duration::from_secs(30),
            tls_bootstrap_bindings: true,
            enable_bootstrap_token_auth: true,
            service_account_issuers: vec![pki::service_account::DEFAULT_ISSUER.to_string()],
            service_account_key_files: Vec::new(),
            api_audiences: Vec::new(),
            service_account_max_token_expiration: None,
            service_account_extend_token_expiration: true,
            service_account_signing_endpoint: None,
            client_ca_reload_interval: std::time::Duration::from_secs(1),
            enable_priority_and_fairness: true,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            storage: StorageConfig::Sqlite,
            verbosity: 0,
            runtime_config: Vec::new(),
            token_webhook: None,
            audit: audit::Config::default(),
            authentication_config: None,
            authentication_config_reload_interval: authn::authentication_config::DEFAULT_RELOAD_INTERVAL,
            anonymous_auth_flag_set: false,
        }
    }
}
