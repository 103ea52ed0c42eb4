//! kustos-controllers: the controllers of kube-controller-manager that kustos runs, each a
//! pure decision over typed objects (with table tests beside it) plus a thin registration
//! with the one controller runtime, talking to any apiserver through a `kube::Client`.
//!
//! One runtime ([`runtime`]: a work queue as client-go's) runs every controller. A controller
//! provides a pure `decide()` over typed objects and a thin registration: either
//! [`runtime::per_object`] (the CSR controllers `csrapproving`: [`csr_approver`],
//! `csrsigning`: [`csr_signer`], `csrcleaner`: [`csr_cleaner`], `csrpolicyapproving`:
//! [`csr_policy_approver`], `tokencleaner`: [`token_cleaner`] and
//! `podcertificaterequest-cleaner`: [`pcr_cleaner`]), where a change to an
//! object costs one reconcile of that object, or [`runtime::whole_world`] (the others),
//! whose one key is requested at start, by every trigger (a watched kind changing, a file
//! changing) and by the resync period, and which then reads the current state and decides,
//! so it stays correct after missed events, restarts and conflicts. A trigger arriving while
//! a reconcile runs queues one more after it; a reconcile that returns a delay runs again
//! then; a failed one is retried after a per-key backoff that doubles and is forgotten on
//! success. A registration is a future: whatever else the controller needs (its informer,
//! CA file pollers, a watch of deletions) is joined into it, never spawned. [`run`] owns
//! every controller future in one `JoinSet`; at shutdown (or when [`leader_election`] loses
//! the Lease) it aborts them all and waits until each has ended, so that nothing a
//! controller started writes afterwards (`shutdown_tests` checks this).
//!
//! Every controller counts what it does in the [`metrics::Metrics`] handle of [`Config`]
//! (served on `/metrics` by `kustos controller-manager`). [`leader_election`] runs [`run`]
//! only while this replica holds a Lease.

pub mod bootstrap_signer;
pub mod bootstrap_tokens;
pub mod ca_files;
pub mod clusterrole_aggregation;
pub mod clustertrustbundle_publisher;
pub mod csr;
pub mod csr_approver;
pub mod csr_cleaner;
pub mod csr_policy_approver;
pub mod csr_signer;
pub mod labels;
pub mod leader_election;
pub mod legacy_serviceaccount_token_cleaner;
pub mod metrics;
#[cfg(test)]
mod mock;
pub mod node_lifecycle;
pub mod pcr_cleaner;
pub mod pod_certificate_requests;
pub mod root_ca_cert_publisher;
pub mod runtime;
pub mod serviceaccount;
pub mod serviceaccount_token;
#[cfg(test)]
mod shutdown_tests;
pub mod signers;
pub mod token_cleaner;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

/// Every controller kustos knows, in upstream's names.
pub const ALL: &[&str] = &[
    "csrapproving",
    "csrsigning",
    "csrcleaner",
    "csrpolicyapproving",
    "tokencleaner",
    "bootstrapsigner",
    "serviceaccount",
    "serviceaccount-token",
    "legacy-serviceaccount-token-cleaner",
    "root-ca-cert-publisher",
    "clusterrole-aggregation",
    "kube-apiserver-serving-clustertrustbundle-publisher",
    "nodelifecycle",
    "signers",
    "podcertificaterequest-cleaner",
];

/// Off unless named explicitly: as upstream for the first two; `nodelifecycle` because
/// next to a real kube-apiserver, kube-controller-manager runs its own (`kustos server`
/// names it in its default `--controllers`).
pub const DISABLED_BY_DEFAULT: &[&str] = &["tokencleaner", "bootstrapsigner", "nodelifecycle"];

/// kube-controller-manager's other names for the controllers of [`ALL`], each with the name
/// kustos gives it: its canonical names since 1.29 (`...-controller`, the only names of the
/// ClusterTrustBundle publisher and the PodCertificateRequest cleaner) and the one older
/// alias that is not kustos's own. `--controllers` takes either, as upstream takes both.
pub const UPSTREAM_NAMES: &[(&str, &str)] = &[
    ("certificatesigningrequest-approving-controller", "csrapproving"),
    ("certificatesigningrequest-signing-controller", "csrsigning"),
    ("certificatesigningrequest-cleaner-controller", "csrcleaner"),
    ("token-cleaner-controller", "tokencleaner"),
    ("bootstrap-signer-controller", "bootstrapsigner"),
    ("serviceaccount-controller", "serviceaccount"),
    ("serviceaccount-token-controller", "serviceaccount-token"),
    ("legacy-serviceaccount-token-cleaner-controller", "legacy-serviceaccount-token-cleaner"),
    ("legacy-service-account-token-cleaner", "legacy-serviceaccount-token-cleaner"),
    ("root-ca-certificate-publisher-controller", "root-ca-cert-publisher"),
    ("clusterrole-aggregation-controller", "clusterrole-aggregation"),
    (
        "kube-apiserver-serving-clustertrustbundle-publisher-controller",
        "kube-apiserver-serving-clustertrustbundle-publisher",
    ),
    ("node-lifecycle-controller", "nodelifecycle"),
    ("podcertificaterequest-cleaner-controller", "podcertificaterequest-cleaner"),
];

/// The name in [`ALL`] that `name` (kustos's, or one of [`UPSTREAM_NAMES`]) stands for.
fn known_name(name: &str) -> Option<&'static str> {
    ALL.iter().copied().find(|n| *n == name).or_else(|| UPSTREAM_NAMES.iter().find(|(u, _)| *u == name).map(|p| p.1))
}

/// `--controllers`: `*` (every controller on by default), `name`, `-name`, each name kustos's
/// or upstream's ([`UPSTREAM_NAMES`]). Unknown names are an error. The result keeps the order
/// of [`ALL`], in kustos's names.
pub fn resolve_controllers(spec: &[String]) -> Result<Vec<String>, String> {
    let mut star = false;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for item in spec.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        if item == "*" {
            star = true;
            continue;
        }
        let (name, list) = match item.strip_prefix('-') {
            Some(name) => (name, &mut off),
            None => (item, &mut on),
        };
        match known_name(name) {
            Some(known) => list.push(known),
            None => {
                return Err(format!(
                    "{name:?} is not in the list of known controllers ({}; or upstream's names, such as \
                     certificatesigningrequest-signing-controller)",
                    ALL.join(", ")
                ))
            }
        }
    }
    Ok(ALL
        .iter()
        .filter(|name| {
            if off.contains(name) {
                false
            } else if on.contains(name) {
                true
            } else {
                star && !DISABLED_BY_DEFAULT.contains(name)
            }
        })
        .map(|s| s.to_string())
        .collect())
}

/// Signs the tokens of legacy `kubernetes.io/service-account-token` Secrets.
pub trait TokenGenerator: Send + Sync {
    fn legacy_token(
        &self,
        namespace: &str,
        service_account_name: &str,
        service_account_uid: &str,
        secret_name: &str,
        secret_uid: &str,
    ) -> anyhow::Result<String>;

    /// The key ids (JWT header `kid`) of keys that no longer sign: legacy tokens signed by
    /// one of them are re-issued (a `kustos sa-key rotate`).
    fn retired_key_ids(&self) -> std::collections::BTreeSet<String> {
        Default::default()
    }

    /// A value that changes whenever the keys do (which signs, which are retired): the
    /// controller makes a pass when it does. Empty: the keys never change.
    fn key_state(&self) -> String {
        String::new()
    }
}

/// Settings shared by the controllers.
#[derive(Clone)]
pub struct Config {
    /// Resolved controller names ([`resolve_controllers`]).
    pub controllers: Vec<String>,
    /// The cluster's root CA bundle (`--root-ca-file`): published as `kube-root-ca.crt` and put
    /// into legacy token Secrets.
    pub root_ca_file: Option<PathBuf>,
    /// Signs legacy token Secrets (`--service-account-private-key-file`).
    pub token_generator: Option<Arc<dyn TokenGenerator>>,
    /// `--legacy-service-account-token-clean-up-period` (upstream default: one year).
    pub legacy_token_clean_up_period: chrono::Duration,
    /// How often the legacy token cleaner runs (upstream: daily).
    pub legacy_token_sync_interval: std::time::Duration,
    /// How often every loop re-reads the world even when nothing changed.
    pub resync_period: std::time::Duration,
    /// `csrsigning`'s CA files and certificate lifetime (`--cluster-signing-*`).
    pub csr_signing: csr_signer::SigningConfig,
    /// CSRs each CSR controller reconciles at once.
    pub csr_concurrency: u16,
    /// Where the controllers count what they do ([`metrics`]); `Default` is a fresh registry
    /// nobody reads.
    pub metrics: metrics::Metrics,
    /// `nodelifecycle`'s `--node-monitor-*` and `--node-startup-grace-period`.
    pub node_lifecycle: node_lifecycle::Timing,
    /// The apiserver's own addresses (IP addresses or DNS names) that no kubelet serving
    /// certificate may name (`csrpolicyapproving`): `kustos server` passes its bind address
    /// and its serving certificate's SANs, `kustos controller-manager` the host it reaches the
    /// apiserver at.
    pub apiserver_addresses: Vec<String>,
    /// How old a PodCertificateRequest gets before `podcertificaterequest-cleaner` deletes it.
    pub pcr_cleaner_threshold: chrono::Duration,
    /// The apiserver's client CA (certificate file, key file): `signers` then signs
    /// PodCertificateRequests for `kubernetes.io/kube-apiserver-client-pod` with it. Only
    /// `kustos server` sets it: only its apiserver reads the certificates as pods.
    pub kube_apiserver_client_pod_ca: Option<(PathBuf, PathBuf)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            controllers: resolve_controllers(&["*".to_string()]).unwrap_or_default(),
            root_ca_file: None,
            token_generator: None,
            legacy_token_clean_up_period: chrono::Duration::days(365),
            legacy_token_sync_interval: std::time::Duration::from_secs(24 * 3600),
            resync_period: std::time::Duration::from_secs(300),
            csr_signing: csr_signer::SigningConfig::default(),
            csr_concurrency: 32,
            metrics: metrics::Metrics::default(),
            node_lifecycle: node_lifecycle::Timing::default(),
            apiserver_addresses: Vec::new(),
            pcr_cleaner_threshold: pcr_cleaner::DEFAULT_THRESHOLD,
            kube_apiserver_client_pod_ca: None,
        }
    }
}

/// Gives each controller the client it runs with (its identity).
pub type ClientFor = Arc<dyn Fn(&str) -> kube::Client + Send + Sync>;

/// Run the enabled controllers until `shutdown` completes (or one of them ends), then abort
/// them all and wait until every one has ended: when this returns, no controller writes
/// anything any more.
pub async fn run(clients: ClientFor, config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    // One list and watch of CertificateSigningRequests for the CSR controllers.
    let csr_informer = config.controllers.iter().any(|c| c.starts_with("csr") || c == "signers").then(|| {
        runtime::SharedInformer::new(kube::Api::all(clients("csr-informer")), kube::runtime::watcher::Config::default())
    });
    let csrs = || csr_informer.as_ref().map_or_else(|| Err(anyhow::anyhow!("no CSR informer")), |i| i.subscribe());
    for name in &config.controllers {
        let client = clients(name);
        let cfg = config.clone();
        match name.as_str() {
            "serviceaccount" => {
                tasks.spawn(serviceaccount::run(client, cfg));
            }
            "serviceaccount-token" => match (cfg.token_generator.clone(), cfg.root_ca_file.clone()) {
                (Some(gen), ca) => {
                    tasks.spawn(serviceaccount_token::run(client, gen, ca, cfg));
                }
                (None, _) => tracing::warn!(
                    controller = %name,
                    "not started: no service-account private key to sign tokens with"
                ),
            },
            "legacy-serviceaccount-token-cleaner" => {
                tasks.spawn(legacy_serviceaccount_token_cleaner::run(client, cfg));
            }
            "root-ca-cert-publisher" => match cfg.root_ca_file.clone() {
                Some(ca) => {
                    tasks.spawn(root_ca_cert_publisher::run(client, ca, cfg));
                }
                None => tracing::warn!(controller = %name, "not started: no root CA file"),
            },
            "clusterrole-aggregation" => {
                tasks.spawn(clusterrole_aggregation::run(client, cfg));
            }
            "kube-apiserver-serving-clustertrustbundle-publisher" => {
                tasks.spawn(clustertrustbundle_publisher::run(client, cfg));
            }
            "tokencleaner" => {
                tasks.spawn(token_cleaner::run(client, cfg));
            }
            "bootstrapsigner" => {
                tasks.spawn(bootstrap_signer::run(client, cfg));
            }
            "nodelifecycle" => {
                tasks.spawn(node_lifecycle::run(client, cfg));
            }
            "csrapproving" => {
                tasks.spawn(csr_approver::run(client, csrs()?, cfg));
            }
            "csrsigning" => {
                tasks.spawn(csr_signer::run(client, csrs()?, cfg));
            }
            "csrcleaner" => {
                tasks.spawn(csr_cleaner::run(client, csrs()?, cfg));
            }
            "csrpolicyapproving" => {
                tasks.spawn(csr_policy_approver::run(client, csrs()?, cfg));
            }
            "signers" => {
                tasks.spawn(signers::run(client, csrs()?, cfg));
            }
            "podcertificaterequest-cleaner" => {
                tasks.spawn(pcr_cleaner::run(client, cfg));
            }
            other => tracing::info!(controller = %other, "controller not available yet in this build"),
        }
        tracing::info!(controller = %name, "controller enabled");
    }
    if let Some(informer) = csr_informer {
        tasks.spawn(informer.run());
    }
    tokio::select! {
        _ = shutdown => {}
        Some(res) = tasks.join_next() => {
            if let Ok(Err(e)) = res {
                tracing::error!(error = %e, "a controller stopped");
            }
        }
    }
    tasks.shutdown().await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    #[test]
    fn controllers_flag_syntax() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let defaults: Vec<String> =
            ALL.iter().filter(|n| !DISABLED_BY_DEFAULT.contains(n)).map(|n| n.to_string()).collect();
        let cases: Vec<(Vec<String>, Result<Vec<String>, ()>)> = vec![
            (s(&["*"]), Ok(defaults.clone())),
            (
                s(&["*,tokencleaner"]),
                Ok(s(&[
                    "csrapproving",
                    "csrsigning",
                    "csrcleaner",
                    "csrpolicyapproving",
                    "tokencleaner",
                    "serviceaccount",
                    "serviceaccount-token",
                    "legacy-serviceaccount-token-cleaner",
                    "root-ca-cert-publisher",
                    "clusterrole-aggregation",
                    "kube-apiserver-serving-clustertrustbundle-publisher",
                    "signers",
                    "podcertificaterequest-cleaner",
                ])),
            ),
            (
                s(&["*", "-csrsigning", "-csrapproving"]),
                Ok(defaults.iter().filter(|n| !n.starts_with("csra") && !n.starts_with("csrs")).cloned().collect()),
            ),
            (s(&["serviceaccount"]), Ok(s(&["serviceaccount"]))),
            (s(&["bootstrapsigner,tokencleaner"]), Ok(s(&["tokencleaner", "bootstrapsigner"]))),
            (s(&["-serviceaccount"]), Ok(vec![])),
            (s(&[]), Ok(vec![])),
            (s(&["nope"]), Err(())),
            (s(&["*,-nope"]), Err(())),
            // Upstream's names, as kube-controller-manager 1.37 takes them.
            (
                s(&["*,bootstrap-signer-controller,token-cleaner-controller"]),
                resolve_controllers(&s(&["*,bootstrapsigner,tokencleaner"])).map_err(|_| ()),
            ),
            (
                s(&["*", "-certificatesigningrequest-signing-controller", "-podcertificaterequest-cleaner-controller"]),
                Ok(defaults
                    .iter()
                    .filter(|n| *n != "csrsigning" && *n != "podcertificaterequest-cleaner")
                    .cloned()
                    .collect()),
            ),
            (s(&["legacy-service-account-token-cleaner"]), Ok(s(&["legacy-serviceaccount-token-cleaner"]))),
            (s(&["node-lifecycle-controller,nodelifecycle"]), Ok(s(&["nodelifecycle"]))),
            (s(&["certificatesigningrequest-approving-controller,-csrapproving"]), Ok(vec![])),
            (s(&["csrsigning-controller"]), Err(())),
            (s(&["-controller"]), Err(())),
        ];
        for (spec, want) in cases {
            let got = resolve_controllers(&spec).map_err(|_| ());
            assert_eq!(got, want, "{spec:?}");
        }
    }

    #[test]
    fn every_upstream_name_stands_for_a_known_controller_and_none_is_kustos_own() {
        for (upstream, ours) in UPSTREAM_NAMES {
            assert!(ALL.contains(ours), "{upstream} -> {ours}");
            assert!(!ALL.contains(upstream), "{upstream} is already a name of kustos");
        }
    }
}
