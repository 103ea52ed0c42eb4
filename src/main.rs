//! The `kustos` binary: CLI parsing and wiring only.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

mod audit_args;
mod ca_cmd;
mod ca_signer_cmd;
mod controller_manager;
mod delegated_auth;
mod grpc_authority;
mod kubeconfig_cmd;
mod logging;
mod pki_cmd;
mod pki_followers;
mod sa_key_cmd;
mod sa_signer_cmd;
mod secure_serving;
mod storage_cmd;
mod token;
mod token_rotate;
mod token_webhook;

#[derive(Parser)]
#[command(
    name = "kustos",
    version,
    about = "Kubernetes controller-manager and certificate authority, with a minimal apiserver"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// apiserver + controllers + CA in one process on an embedded SQLite store.
    Server(ServerArgs),
    /// The apiserver alone (same flags as `server`).
    Apiserver(ServerArgs),
    /// The controllers alone, against any apiserver, with leader election.
    ControllerManager(controller_manager::ControllerManagerArgs),
    /// Manage bootstrap tokens (kubeadm-compatible): create, list, delete, rotate.
    Token(token::TokenCommand),
    /// Write kubeconfig files for clients of the cluster.
    Kubeconfig(kubeconfig_cmd::KubeconfigCommand),
    /// Move the cluster state between storage backends.
    Storage(storage_cmd::StorageCommand),
    /// The cluster CA: status, and rotation without a restart (begin, switch, finish).
    Ca(ca_cmd::CaCommand),
    /// The service-account signing keys: status, rotation without a restart, revocation.
    SaKey(sa_key_cmd::SaKeyCommand),
    /// The shared PKI record in etcd: rotate the key that seals it.
    Pki(pki_cmd::PkiCommand),
    /// The k8s.io/externaljwt v1 signer on a Unix socket, for kube-apiserver's
    /// --service-account-signing-endpoint: signs with the data directory's service-account keys.
    SaSigner(sa_signer_cmd::SaSignerArgs),
}

#[derive(Args, Clone)]
struct ServerArgs {
    /// Where PKI, the SQLite store and admin.kubeconfig live.
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: IpAddr,
    /// Port to serve HTTPS on (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Extra subject alternative names for the serving certificate (repeatable).
    #[arg(long = "tls-san", value_delimiter = ',')]
    tls_san: Vec<String>,
    /// Serve requests without credentials as system:anonymous (default true; not together
    /// with an `anonymous` section in --authentication-config).
    #[arg(long, action = clap::ArgAction::Set)]
    anonymous_auth: Option<bool>,
    /// An `AuthenticationConfiguration` (apiserver.config.k8s.io/v1) file: JWT authenticators
    /// for outside issuers and anonymous access by path. Reloaded when it changes; a bad new
    /// file keeps the last good one.
    #[arg(long = "authentication-config")]
    authentication_config: Option<PathBuf>,
    /// How often --authentication-config is read for changes.
    #[arg(long, hide = true, default_value = "60s", value_parser = parse_duration)]
    authentication_config_reload_interval: std::time::Duration,
    /// Revisions of history kept for watches and list continuation; older ones answer 410.
    #[arg(long, default_value_t = 100_000)]
    history_revisions: u64,
    /// How often history older than --history-revisions is compacted (e.g. 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    compaction_interval: std::time::Duration,
    /// Include kubeadm's TLS-bootstrap bindings in the default RBAC policy
    /// (`=false` leaves them out).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    tls_bootstrap_bindings: bool,
    /// Authenticate bootstrap tokens (Secrets kube-system/bootstrap-token-<id>).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_bootstrap_token_auth: bool,
    /// How long an auto-generated legacy service-account token may stay unused before the
    /// legacy-serviceaccount-token-cleaner marks it invalid (and, as long again, deletes it).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    legacy_service_account_token_clean_up_period: std::time::Duration,
    /// How old a PodCertificateRequest gets before podcertificaterequest-cleaner deletes it
    /// (upstream's fixed 30 minutes; kustos' own flag).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pod_certificate_request_cleaner_threshold: std::time::Duration,
    /// Turn off group versions or single resources the apiserver serves, as kube-apiserver's
    /// flag: `GROUP/VERSION=false`, `GROUP/VERSION/RESOURCE=false` (comma-separated,
    /// repeatable), e.g. `certificates.k8s.io/v1/podcertificaterequests=false`.
    #[arg(long = "runtime-config", value_delimiter = ',')]
    runtime_config: Vec<String>,
    /// Controllers to run (`server` only): `*` (every controller that is on by default),
    /// `name`, `-name`. The default also runs bootstrapsigner and tokencleaner (off in `*`,
    /// as upstream), as kubeadm runs kube-controller-manager, and nodelifecycle (off in `*`,
    /// which `kustos controller-manager` shares with a kube-controller-manager).
    #[arg(long, value_delimiter = ',', default_value = "*,bootstrapsigner,tokencleaner,nodelifecycle")]
    controllers: Vec<String>,
    /// Issuer of service-account tokens (repeatable): the first one is put into new tokens,
    /// all are accepted.
    #[arg(long = "service-account-issuer", default_value = kustos_apiserver::pki::service_account::DEFAULT_ISSUER)]
    service_account_issuer: Vec<String>,
    /// PEM file of keys that verify service-account tokens, besides the apiserver's own
    /// (repeatable; public or private RSA/ECDSA keys, several per file).
    #[arg(long = "service-account-key-file")]
    service_account_key_file: Vec<PathBuf>,
    /// Audiences of the API (comma-separated); tokens used on requests must be meant for
    /// one of them. Default: the service-account issuers.
    #[arg(long = "api-audiences", value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// The longest lifetime of tokens issued by TokenRequest (e.g. 48h); longer requests are
    /// shortened, and a retired service-account key verifies this long (+5m). Default: 8760h;
    /// 0: no cap (2^32 seconds).
    #[arg(long = "service-account-max-token-expiration", value_parser = parse_duration)]
    service_account_max_token_expiration: Option<std::time::Duration>,
    /// Pod-bound tokens a kubelet asks for with the transition lifetime (3607 s) for the API's
    /// audiences last a year instead (capped by --service-account-max-token-expiration), with
    /// a `kubernetes.io.warnafter` claim at the asked end, as kube-apiserver does.
    #[arg(long = "service-account-extend-token-expiration", default_value_t = true, action = clap::ArgAction::Set)]
    service_account_extend_token_expiration: bool,
    /// Unix socket of an external signer (`k8s.io/externaljwt` v1, e.g. `kustos sa-signer`): it
    /// signs service-account tokens and serves the keys that verify them (`@name`: abstract
    /// socket). Excludes --service-account-key-file.
    #[arg(long = "service-account-signing-endpoint")]
    service_account_signing_endpoint: Option<String>,
    /// API Priority and Fairness: classify every request by FlowSchema and share the
    /// server's seats among priority levels (`=false`: plain max-in-flight limits).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_priority_and_fairness: bool,
    /// With APF, this plus --max-mutating-requests-inflight is the server's total seats
    /// (the sum must be positive); without, the read-only requests in flight at once
    /// (0: no limit).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: u32,
    /// Without APF, the mutating requests in flight at once (0: no limit); with APF, see
    /// --max-requests-inflight.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: u32,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
    /// Log verbosity, as klog's `-v`: from 2 on, one line per request (verb, path, user,
    /// code, latency).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    verbosity: u8,
    /// Where objects live: `sqlite` (DATA_DIR/kustos.db, one server) or `etcd`
    /// (--etcd-servers; several apiservers may share it).
    #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "etcd"])]
    storage: String,
    /// etcd endpoints for --storage etcd (comma-separated http:// or https:// URLs).
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    #[command(flatten)]
    etcd: EtcdArgs,
    #[command(flatten)]
    signing: SigningArgs,
    #[command(flatten)]
    node_lifecycle: NodeLifecycleArgs,
    #[command(flatten)]
    token_webhook: token_webhook::TokenWebhookArgs,
    #[command(flatten)]
    audit: audit_args::AuditArgs,
}

impl ServerArgs {
    /// The storage settings, checked.
    fn storage(&self) -> anyhow::Result<kustos_apiserver::StorageConfig> {
        match self.storage.as_str() {
            "etcd" => Ok(kustos_apiserver::StorageConfig::Etcd(self.etcd.config(self.etcd_servers.clone())?)),
            _ if !self.etcd_servers.is_empty() => anyhow::bail!("--etcd-servers needs --storage etcd"),
            _ => Ok(kustos_apiserver::StorageConfig::Sqlite),
        }
    }
}

/// How to reach etcd, besides the servers (shared by `server`, `apiserver` and
/// `storage migrate`); the flag names are kube-apiserver's.
#[derive(Args, Clone)]
struct EtcdArgs {
    /// Where the cluster's keys live in etcd.
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// CA bundle that verifies etcd's serving certificate (https:// servers).
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// Key of --etcd-certfile.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
}

impl EtcdArgs {
    fn config(&self, servers: Vec<String>) -> anyhow::Result<kustos_apiserver::storage::etcd::EtcdConfig> {
        let cfg = kustos_apiserver::storage::etcd::EtcdConfig {
            servers: servers.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            prefix: self.etcd_prefix.clone(),
            ca_file: self.etcd_cafile.clone(),
            cert_file: self.etcd_certfile.clone(),
            key_file: self.etcd_keyfile.clone(),
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

/// kube-controller-manager's node health flags (`nodelifecycle`), with its defaults.
#[derive(Args, Clone)]
struct NodeLifecycleArgs {
    /// How often the node lifecycle controller looks at every node.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    node_monitor_period: std::time::Duration,
    /// How long a node that has posted status may go without a status heartbeat or a
    /// Lease renewal before its Ready condition becomes Unknown.
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    node_monitor_grace_period: std::time::Duration,
    /// How long after its creation a node that never posted status becomes Unknown.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    node_startup_grace_period: std::time::Duration,
}

impl NodeLifecycleArgs {
    fn timing(&self) -> anyhow::Result<kustos_controllers::node_lifecycle::Timing> {
        if self.node_monitor_period.is_zero() {
            anyhow::bail!("--node-monitor-period must be more than 0");
        }
        Ok(kustos_controllers::node_lifecycle::Timing {
            monitor_period: self.node_monitor_period,
            grace_period: self.node_monitor_grace_period,
            startup_grace_period: self.node_startup_grace_period,
        })
    }
}

/// kube-controller-manager's CSR signing flags (`csrsigning`). In `server`, without any of
/// the file flags, every signer uses DIR/pki/ca.crt and DIR/pki/ca.key.
#[derive(Args, Clone, Default)]
struct SigningArgs {
    /// PEM X509 CA certificate(s) used to issue cluster-scoped certificates. If specified, no
    /// more specific --cluster-signing-* flag may be specified.
    #[arg(long)]
    cluster_signing_cert_file: Option<PathBuf>,
    /// PEM private key (RSA, ECDSA, Ed25519) used to sign cluster-scoped certificates. If
    /// specified, no more specific --cluster-signing-* flag may be specified.
    #[arg(long)]
    cluster_signing_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/kubelet-serving signer. If specified,
    /// --cluster-signing-{cert,key}-file must not be set.
    #[arg(long)]
    cluster_signing_kubelet_serving_cert_file: Option<PathBuf>,
    /// Key for the kubernetes.io/kubelet-serving signer.
    #[arg(long)]
    cluster_signing_kubelet_serving_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/kube-apiserver-client-kubelet signer.
    #[arg(long)]
    cluster_signing_kubelet_client_cert_file: Option<PathBuf>,
    /// Key for the kubernetes.io/kube-apiserver-client-kubelet signer.
    #[arg(long)]
    cluster_signing_kubelet_client_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/kube-apiserver-client signer.
    #[arg(long)]
    cluster_signing_kube_apiserver_client_cert_file: Option<PathBuf>,
    /// Key for the kubernetes.io/kube-apiserver-client signer.
    #[arg(long)]
    cluster_signing_kube_apiserver_client_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/legacy-unknown signer (which never issues
    /// through certificates.k8s.io/v1).
    #[arg(long)]
    cluster_signing_legacy_unknown_cert_file: Option<PathBuf>,
    /// Key for the kubernetes.io/legacy-unknown signer.
    #[arg(long)]
    cluster_signing_legacy_unknown_key_file: Option<PathBuf>,
    /// The max length of duration signed certificates will be given. Individual CSRs may
    /// request shorter certs by setting spec.expirationSeconds.
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    cluster_signing_duration: std::time::Duration,
}

impl SigningArgs {
    /// The validated signing configuration (an empty path is unset, as upstream's empty
    /// string); `default_files` when no file flag is set at all.
    fn config(
        &self,
        default_files: Option<(PathBuf, PathBuf)>,
    ) -> anyhow::Result<kustos_controllers::csr_signer::SigningConfig> {
        use kustos_controllers::csr_signer::FilePair;
        let set = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
        let pair = |c: &Option<PathBuf>, k: &Option<PathBuf>| FilePair { cert_file: set(c), key_file: set(k) };
        let mut cfg = kustos_controllers::csr_signer::SigningConfig {
            cluster: pair(&self.cluster_signing_cert_file, &self.cluster_signing_key_file),
            kubelet_serving: pair(
                &self.cluster_signing_kubelet_serving_cert_file,
                &self.cluster_signing_kubelet_serving_key_file,
            ),
            kubelet_client: pair(
                &self.cluster_signing_kubelet_client_cert_file,
                &self.cluster_signing_kubelet_client_key_file,
            ),
            kube_apiserver_client: pair(
                &self.cluster_signing_kube_apiserver_client_cert_file,
                &self.cluster_signing_kube_apiserver_client_key_file,
            ),
            legacy_unknown: pair(
                &self.cluster_signing_legacy_unknown_cert_file,
                &self.cluster_signing_legacy_unknown_key_file,
            ),
            duration: chrono::Duration::from_std(self.cluster_signing_duration)
                .map_err(|_| anyhow::anyhow!("--cluster-signing-duration is too long"))?,
        };
        cfg.validate()?;
        if let (false, Some((cert, key))) = (cfg.any_set(), default_files) {
            cfg.cluster = FilePair::new(cert, key);
        }
        Ok(cfg)
    }
}

/// `90` (seconds), or Go's duration syntax ([`kustos_ca::duration::parse`]) with whole
/// numbers and no sign: `90s`, `5m`, `1h`, `500ms`, `8760h0m0s`, `1h30m`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("invalid duration {s:?}: expected e.g. 30s, 5m, 1h, 8760h0m0s");
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(std::time::Duration::from_secs).map_err(|_| bad());
    }
    if s.starts_with(['-', '+']) || s.contains('.') {
        return Err(bad());
    }
    let nanos = kustos_ca::duration::parse(s).map_err(|_| bad())?;
    u64::try_from(nanos).map(std::time::Duration::from_nanos).map_err(|_| bad())
}

fn init_logging(format: &str) {
    logging::init(format);
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn run_server(args: ServerArgs, with_controllers: bool) -> anyhow::Result<()> {
    init_logging(&args.log_format);
    let controllers = kustos_controllers::resolve_controllers(&args.controllers).map_err(anyhow::Error::msg)?;
    let node_lifecycle = args.node_lifecycle.timing()?;
    let pki_dir = args.data_dir.join("pki");
    let csr_signing = args.signing.config(Some((pki_dir.join("ca.crt"), pki_dir.join("ca.key"))))?;
    // Files named by flags must load before anything starts; the default ones (DIR/pki) may
    // only be created by the first start, so they are checked right after it.
    let signs = with_controllers && controllers.iter().any(|c| c == "csrsigning");
    if signs && args.signing.config(None)?.any_set() {
        kustos_controllers::csr_signer::check(&csr_signing)?;
    }
    let storage = args.storage()?;
    let mut cfg = kustos_apiserver::Config::new(args.data_dir.clone());
    cfg.storage = storage.clone();
    cfg.bind_address = args.bind_address;
    cfg.enable_bootstrap_token_auth = args.enable_bootstrap_token_auth;
    cfg.runtime_config = args.runtime_config.clone();
    cfg.secure_port = args.secure_port;
    cfg.tls_sans = args.tls_san.clone();
    cfg.anonymous_auth = args.anonymous_auth.unwrap_or(true);
    cfg.anonymous_auth_flag_set = args.anonymous_auth.is_some();
    cfg.authentication_config = args.authentication_config.clone();
    cfg.authentication_config_reload_interval = args.authentication_config_reload_interval;
    cfg.enable_priority_and_fairness = args.enable_priority_and_fairness;
    cfg.max_requests_inflight = args.max_requests_inflight;
    cfg.max_mutating_requests_inflight = args.max_mutating_requests_inflight;
    cfg.history_revisions = args.history_revisions;
    cfg.compaction_interval = args.compaction_interval;
    cfg.tls_bootstrap_bindings = args.tls_bootstrap_bindings;
    cfg.service_account_issuers = args.service_account_issuer.clone();
    cfg.service_account_key_files = args.service_account_key_file.clone();
    cfg.api_audiences = args.api_audiences.iter().map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
    cfg.service_account_max_token_expiration = args.service_account_max_token_expiration;
    cfg.service_account_extend_token_expiration = args.service_account_extend_token_expiration;
    cfg.service_account_signing_endpoint = args.service_account_signing_endpoint.clone();
    cfg.verbosity = args.verbosity;
    cfg.token_webhook = args.token_webhook.settings();
    cfg.audit = args.audit.config()?;
    let running = kustos_apiserver::start(cfg)
        .await
        .with_context(|| format!("starting kustos in {}", args.data_dir.display()))?;
    let mode = if with_controllers { "server" } else { "apiserver" };
    tracing::info!(address = %running.addr, mode, "serving");
    println!("kustos is serving on https://{}", running.addr);
    println!("admin kubeconfig: {}", running.kubeconfig.display());
    println!("try: kubectl --kubeconfig {} get namespaces", running.kubeconfig.display());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controller_task = if with_controllers {
        if signs {
            if let Err(e) = kustos_controllers::csr_signer::check(&csr_signing) {
                running.stop().await;
                anyhow::bail!(e);
            }
        }
        let client = in_process_client(&running).context("building the controllers' client")?;
        let clients: kustos_controllers::ClientFor = {
            let client = client.clone();
            std::sync::Arc::new(move |_| client.clone())
        };
        let config = kustos_controllers::Config {
            controllers,
            root_ca_file: Some(running.pki.dir.join("ca.crt")),
            legacy_token_clean_up_period: chrono::Duration::from_std(args.legacy_service_account_token_clean_up_period)
                .context("--legacy-service-account-token-clean-up-period is too long")?,
            pcr_cleaner_threshold: chrono::Duration::from_std(args.pod_certificate_request_cleaner_threshold)
                .context("--pod-certificate-request-cleaner-threshold is too long")?,
            // Legacy tokens are signed with the key the apiserver signs with, and follow a
            // `kustos sa-key rotate`. With an external signer there is no such key: as
            // kube-controller-manager without --service-account-private-key-file, the
            // serviceaccount-token controller does not run.
            token_generator: match running.state.security.service_accounts.as_ref() {
                Some(tokens) => tokens.local().map(|keys| {
                    std::sync::Arc::new(sa_key_cmd::FollowingSigner::new(keys.clone(), running.pki.dir.clone()))
                        as std::sync::Arc<dyn kustos_controllers::TokenGenerator>
                }),
                None => Some(std::sync::Arc::new(kustos_controllers::serviceaccount_token::PemSigner::new(
                    running.pki.sa_key_pem.clone(),
                )?)),
            },
            csr_signing,
            node_lifecycle,
            apiserver_addresses: apiserver_addresses(&running),
            // The apiserver's client CA signs pod client certificates, which it alone reads.
            kube_apiserver_client_pod_ca: Some((running.pki.dir.join("ca.crt"), running.pki.dir.join("ca.key"))),
            ..Default::default()
        };
        // The controllers' counters are served on the apiserver's /metrics.
        let controller_metrics = config.metrics.clone();
        let _ = running.state.observe.extra.set(Box::new(move || controller_metrics.encode()));
        let stop = async move {
            let _ = stop_rx.await;
        };
        Some(match storage {
            // Other servers may run on the same etcd: elect one to run the controllers, on
            // the Lease `kustos controller-manager` uses.
            kustos_apiserver::StorageConfig::Etcd(_) => {
                let le = in_process_election();
                let leases = kube::Api::namespaced(client, &le.namespace);
                let metrics = config.metrics.clone();
                let lead = move |stop| kustos_controllers::run(clients.clone(), config.clone(), stop);
                tokio::spawn(kustos_controllers::leader_election::run(leases, le, metrics, lead, stop))
            }
            kustos_apiserver::StorageConfig::Sqlite => tokio::spawn(kustos_controllers::run(clients, config, stop)),
        })
    } else {
        None
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(());
    if let Some(task) = controller_task {
        let _ = task.await;
    }
    running.stop().await;
    Ok(())
}

/// What no kubelet serving certificate may name (the policy approver's protected addresses):
/// the address this server is bound to (bound to every address, `0.0.0.0` or `::`: every
/// address of the host's interfaces) and every SAN of its serving certificate.
fn apiserver_addresses(running: &kustos_apiserver::Running) -> Vec<String> {
    let mut out = vec![running.addr.ip().to_string()];
    if running.addr.ip().is_unspecified() {
        match if_addrs::get_if_addrs() {
            Ok(interfaces) => out.extend(interfaces.iter().map(|i| i.ip().to_string())),
            Err(e) => {
                tracing::warn!(error = %e, "reading the host's addresses to keep them out of kubelet serving certificates")
            }
        }
    }
    match kustos_ca::parse_certificate_pem(&running.pki.serving_cert_pem) {
        Ok(info) => {
            out.extend(info.dns_names);
            out.extend(info.ip_addresses.iter().map(ToString::to_string));
        }
        Err(e) => tracing::warn!(error = %e, "reading the serving certificate's SANs"),
    }
    out
}

/// Leader election of `kustos server`'s controllers when several servers share etcd:
/// kube-controller-manager's timings, on the Lease `kustos controller-manager` takes.
fn in_process_election() -> kustos_controllers::leader_election::Config {
    kustos_controllers::leader_election::Config {
        namespace: "kube-system".into(),
        name: controller_manager::DEFAULT_LEASE_NAME.into(),
        identity: kustos_controllers::leader_election::identity(),
        lease_duration: std::time::Duration::from_secs(15),
        renew_deadline: std::time::Duration::from_secs(10),
        retry_period: std::time::Duration::from_secs(2),
    }
}

/// The in-process controllers' client: the apiserver's own handler stack called in memory
/// (no TCP, TLS or HTTP framing), authenticated with a client certificate for
/// `system:kube-controller-manager` in `system:masters`, issued from the cluster CA and kept
/// in memory only: at start, and again whenever the signing CA of `DIR/pki` changes (a CA
/// rotation), so that it stays trusted after the old CA is dropped. The controllers run
/// inside the process that holds the CA key and the store, so RBAC could not confine them
/// further; the per-controller `system:controller:*` roles are for `kustos controller-manager`
/// against other apiservers.
fn in_process_client(running: &kustos_apiserver::Running) -> anyhow::Result<kube::Client> {
    let files =
        kustos_controllers::ca_files::CaFiles::load(&running.pki.dir.join("ca.crt"), &running.pki.dir.join("ca.key"))
            .context("loading the cluster CA")?;
    let issue = |ca: &kustos_ca::Ca| -> anyhow::Result<Vec<u8>> {
        let params = kustos_ca::IssueParams::client(
            kustos_apiserver::authn::user::KUBE_CONTROLLER_MANAGER_USER,
            vec![kustos_apiserver::authn::MASTERS_GROUP.into()],
            // Capped at the CA's NotAfter by issuing; a new one is issued at every start.
            chrono::Duration::days(3650),
        );
        Ok(ca.issue(params, chrono::Utc::now())?.cert_der)
    };
    let first = running.pki.ca();
    let cached = std::sync::Mutex::new((first.cert_der().to_vec(), issue(first)?));
    let identity: kustos_apiserver::http::serve::Identity = std::sync::Arc::new(move || {
        let bundle = files.current();
        let signer = bundle.signer();
        let mut cached = cached.lock().unwrap_or_else(|e| e.into_inner());
        if cached.0 != signer.cert_der() {
            match issue(signer) {
                Ok(cert) => {
                    tracing::info!("issued the controllers' client certificate from the new cluster CA");
                    *cached = (signer.cert_der().to_vec(), cert);
                }
                Err(e) => tracing::warn!(error = %e, "issuing the controllers' client certificate failed"),
            }
        }
        vec![cached.1.clone().into()]
    });
    let service = kustos_apiserver::http::serve::InProcess::with_identity(
        kustos_apiserver::router(running.state.clone()),
        identity,
    );
    Ok(kube::Client::new(service, "default"))
}

/// mimalloc rather than glibc's allocator: allocation was a quarter of the server's CPU in
/// the bootstrap storm, and mimalloc cut the CPU per node by 15–20 % (docs/BENCHMARKS.md, "The
/// allocator"). Built without transparent huge pages, which otherwise added ~50 MiB to the
/// storm's peak RSS. It also takes the C allocator's place (`override`), so the bundled
/// SQLite no longer makes glibc keep arenas of its own: each reserved 64 MiB of address space
/// (four at idle, up to 16 under load), which halved the room a server has under an address
/// space limit such as `prlimit --as` (idle VmSize 478 -> 219 MiB).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Server(a) => run_server(a, true).await,
            Command::Apiserver(a) => run_server(a, false).await,
            Command::ControllerManager(a) => controller_manager::run(a).await,
            Command::Token(t) => token::run(t).await,
            Command::Kubeconfig(k) => kubeconfig_cmd::run(k),
            Command::Storage(s) => storage_cmd::run(s).await,
            Command::Ca(c) => ca_cmd::run(c).await,
            Command::SaKey(c) => sa_key_cmd::run(c).await,
            Command::Pki(c) => pki_cmd::run(c).await,
            Command::SaSigner(a) => sa_signer_cmd::run(a).await,
        }
    });
    if let Err(e) = result {
        // One line, whatever the causes say.
        eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_go_writes_them() {
        let d = std::time::Duration::from_secs;
        let cases: &[(&str, Result<std::time::Duration, ()>)] = &[
            ("90", Ok(d(90))),
            ("90s", Ok(d(90))),
            ("5m", Ok(d(300))),
            ("8760h", Ok(d(8760 * 3600))),
            ("8760h0m0s", Ok(d(8760 * 3600))),
            ("1h30m", Ok(d(5400))),
            ("500ms", Ok(std::time::Duration::from_millis(500))),
            ("", Err(())),
            ("h", Err(())),
            ("1d", Err(())),
            ("-1h", Err(())),
            ("1.5h", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).map_err(|_| ()), *want, "{text:?}");
        }
    }
}
