//! `kustos controller-manager`: the controllers alone, against any apiserver (a kubeconfig,
//! or the in-cluster config in a Pod), with Lease leader election, and `/healthz`, `/readyz`,
//! `/livez` and `/metrics` on an HTTPS port behind delegated authentication and authorization
//! ([`crate::secure_serving`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kustos_controllers::{leader_election, metrics::Metrics};

use crate::{parse_duration, SigningArgs};

/// The default of `--leader-elect-resource-name`.
pub const DEFAULT_LEASE_NAME: &str = "kustos-controller-manager";

/// The CA bundle a Pod's service account trusts for the apiserver.
const IN_CLUSTER_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

#[derive(Args, Clone)]
pub struct ControllerManagerArgs {
    /// Kubeconfig of the apiserver to work against. Default: $KUBECONFIG, else the
    /// in-cluster service account (in a Pod).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Controllers to run: `*` (every controller that is on by default), `name`, `-name`.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    /// Elect a leader on a Lease before running the controllers, so that of several
    /// replicas only one runs them (`=false`: run them at once).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// How long a standby waits after the last change it saw to the Lease before taking over.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal; less than the lease
    /// duration.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// Time between attempts to acquire and to renew the Lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "kube-system")]
    leader_elect_resource_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = DEFAULT_LEASE_NAME)]
    leader_elect_resource_name: String,
    #[command(flatten)]
    serving: crate::secure_serving::ServingArgs,
    /// Log format: text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// The cluster's root CA bundle: published as `kube-root-ca.crt` in every namespace
    /// and put into legacy service-account token Secrets. Default, in a Pod: the service
    /// account's `ca.crt` (the CA the client trusts, as upstream).
    #[arg(long)]
    root_ca_file: Option<PathBuf>,
    /// PEM private key (RSA or ECDSA) that signs legacy service-account token Secrets
    /// (`serviceaccount-token`, which does not start without it).
    #[arg(long)]
    service_account_private_key_file: Option<PathBuf>,
    /// How long an auto-generated legacy service-account token may stay unused before the
    /// legacy-serviceaccount-token-cleaner marks it invalid (and, as long again, deletes it).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    legacy_service_account_token_clean_up_period: Duration,
    /// How old a PodCertificateRequest gets before podcertificaterequest-cleaner deletes it
    /// (upstream's fixed 30 minutes; kustos' own flag).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pod_certificate_request_cleaner_threshold: Duration,
    #[command(flatten)]
    signing: SigningArgs,
    #[command(flatten)]
    node_lifecycle: crate::NodeLifecycleArgs,
}

impl ControllerManagerArgs {
    /// The leader-election settings (`None` with `--leader-elect=false`), checked.
    fn leader_election(&self, identity: String) -> anyhow::Result<Option<leader_election::Config>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let cfg = leader_election::Config {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone(),
            identity,
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(Some(cfg))
    }
}

pub async fn run(args: ControllerManagerArgs) -> anyhow::Result<()> {
    crate::init_logging(&args.log_format);
    // Every flag is checked before anything connects or listens.
    let controllers = kustos_controllers::resolve_controllers(&args.controllers).map_err(anyhow::Error::msg)?;
    let node_lifecycle = args.node_lifecycle.timing()?;
    let election = args.leader_election(leader_election::identity())?;
    let csr_signing = args.signing.config(None)?;
    let auth_settings = args.serving.check()?;
    if controllers.iter().any(|c| c == "csrsigning") {
        if !csr_signing.any_set() {
            anyhow::bail!(
                "csrsigning needs a signing CA: set --cluster-signing-cert-file and --cluster-signing-key-file \
                 (or per-signer files), or leave it out with --controllers=*,-csrsigning"
            );
        }
        kustos_controllers::csr_signer::check(&csr_signing)?;
    }
    let legacy_token_clean_up_period = chrono::Duration::from_std(args.legacy_service_account_token_clean_up_period)
        .context("--legacy-service-account-token-clean-up-period is too long")?;
    let token_generator: Option<Arc<dyn kustos_controllers::TokenGenerator>> =
        match &args.service_account_private_key_file {
            Some(path) => {
                let pem = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --service-account-private-key-file {}", path.display()))?;
                let signer = kustos_controllers::serviceaccount_token::PemSigner::new(pem)
                    .with_context(|| format!("--service-account-private-key-file {}", path.display()))?;
                Some(Arc::new(signer))
            }
            None => None,
        };
    let root_ca_file = args.root_ca_file.clone().or_else(|| {
        let in_cluster = PathBuf::from(IN_CLUSTER_CA);
        in_cluster.is_file().then(|| {
            tracing::info!(file = IN_CLUSTER_CA, "no --root-ca-file: using the service account's CA");
            in_cluster
        })
    });
    if let Some(path) = &root_ca_file {
        let pem =
            std::fs::read_to_string(path).with_context(|| format!("reading --root-ca-file {}", path.display()))?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            anyhow::bail!("--root-ca-file {} holds no PEM certificate", path.display());
        }
    }
    let kube_config =
        crate::kubeconfig_cmd::config_or_in_cluster(args.kubeconfig.clone(), std::env::var_os("KUBECONFIG")).await?;
    // The host this process reaches the apiserver at is one no kubelet serving certificate
    // may name.
    let apiserver_addresses: Vec<String> = kube_config.cluster_url.host().map(str::to_string).into_iter().collect();
    let client = kube::Client::try_from(kube_config).context("building the client")?;

    let metrics = Metrics::new();
    if let Some(le) = &election {
        // A standby from the first scrape on.
        metrics.set_leader(&le.name, false);
    }
    let serving = crate::secure_serving::start(&args.serving, auth_settings, &client, metrics.clone()).await?;
    tracing::info!(address = %serving.secure, "serving /healthz, /readyz, /livez and /metrics over HTTPS");
    println!("kustos controller-manager serving health and metrics on https://{}", serving.secure);
    if let Some(addr) = serving.insecure {
        println!("kustos controller-manager serving health and metrics without authentication on http://{addr}");
    }

    let config = kustos_controllers::Config {
        controllers,
        root_ca_file,
        token_generator,
        legacy_token_clean_up_period,
        pcr_cleaner_threshold: chrono::Duration::from_std(args.pod_certificate_request_cleaner_threshold)
            .context("--pod-certificate-request-cleaner-threshold is too long")?,
        csr_signing,
        node_lifecycle,
        metrics: metrics.clone(),
        apiserver_addresses,
        ..Default::default()
    };
    let clients: kustos_controllers::ClientFor = {
        let client = client.clone();
        Arc::new(move |_| client.clone())
    };
    let result = match election {
        Some(le) => {
            let leases = kube::Api::namespaced(client, &le.namespace);
            let lead = move |stop| kustos_controllers::run(clients.clone(), config.clone(), stop);
            leader_election::run(leases, le, metrics, lead, crate::shutdown_signal()).await
        }
        None => {
            tracing::info!("leader election is off: starting the controllers");
            kustos_controllers::run(clients, config, crate::shutdown_signal()).await
        }
    };
    serving.abort();
    tracing::info!("stopped");
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> ControllerManagerArgs {
        let mut argv = vec!["kustos", "controller-manager"];
        argv.extend_from_slice(args);
        match crate::Cli::try_parse_from(argv) {
            Ok(crate::Cli { command: crate::Command::ControllerManager(a) }) => a,
            Ok(_) => panic!("not controller-manager"),
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn leader_election_flags_and_their_checks() {
        // name, args, wanted (lease, renew, retry in ms) or an error containing
        type Want = Result<Option<(u64, u64, u64)>, &'static str>;
        let cases: &[(&str, &[&str], Want)] = &[
            ("defaults as upstream", &[], Ok(Some((15_000, 10_000, 2_000)))),
            (
                "short test settings",
                &[
                    "--leader-elect-lease-duration=4s",
                    "--leader-elect-renew-deadline=3s",
                    "--leader-elect-retry-period=500ms",
                ],
                Ok(Some((4_000, 3_000, 500))),
            ),
            ("off", &["--leader-elect=false"], Ok(None)),
            ("bare flag is on", &["--leader-elect"], Ok(Some((15_000, 10_000, 2_000)))),
            (
                "renew deadline not below the lease",
                &["--leader-elect-lease-duration=10s"],
                Err("must be greater than --leader-elect-renew-deadline"),
            ),
            (
                "off: the durations are not checked",
                &["--leader-elect=false", "--leader-elect-lease-duration=1s"],
                Ok(None),
            ),
        ];
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        for (name, args, want) in cases {
            let got = parse(args).leader_election("me".into());
            match (got, want) {
                (Ok(Some(c)), Ok(Some(w))) => {
                    assert_eq!((ms(c.lease_duration), ms(c.renew_deadline), ms(c.retry_period)), *w, "{name}");
                    assert_eq!((c.namespace.as_str(), c.name.as_str()), ("kube-system", "kustos-controller-manager"));
                }
                (Ok(None), Ok(None)) => {}
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{name}: {e}"),
                (got, want) => panic!("{name}: got {:?}, want {want:?}", got.map(|c| c.is_some())),
            }
        }
    }

    #[test]
    fn other_defaults() {
        let a = parse(&[]);
        assert_eq!(a.controllers, ["*"], "controllers");
        assert_eq!(a.log_format, "text", "log format");
        assert!(a.kubeconfig.is_none(), "kubeconfig");
        assert_eq!(a.pod_certificate_request_cleaner_threshold, Duration::from_secs(1800), "upstream's 30 minutes");
        let a = parse(&["--pod-certificate-request-cleaner-threshold=90s"]);
        assert_eq!(a.pod_certificate_request_cleaner_threshold, Duration::from_secs(90));
    }
}
