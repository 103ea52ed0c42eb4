//! The controller-manager's `/healthz`, `/readyz`, `/livez` and `/metrics`, served as
//! kube-controller-manager serves them: HTTPS on `--bind-address`:`--secure-port` (default
//! `0.0.0.0:10257`) behind delegated authentication and authorization
//! ([`crate::delegated_auth`]). The serving certificate comes from `--tls-cert-file` /
//! `--tls-private-key-file`, else from `--cert-dir` (created there, self-signed, on first
//! start), else it is self-signed in memory. Client certificates are checked against
//! `--client-ca-file`, else the `client-ca-file` of ConfigMap
//! `kube-system/extension-apiserver-authentication` (unless `--authentication-skip-lookup`),
//! both read again every minute.
//!
//! `--metrics-bind-address` additionally serves the same paths over plain HTTP without any
//! authentication; it takes loopback addresses only.
//!
//! In: the flags, the apiserver clients, the metrics. Out: the listening tasks and the
//! addresses they serve on.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kustos_apiserver::authn::X509Authenticator;
use kustos_controllers::metrics::Metrics;

use crate::delegated_auth::{self, Delegated, KubeReviewer, Settings};
use crate::parse_duration;

/// kube-controller-manager's secure port.
pub const DEFAULT_SECURE_PORT: u16 = 10257;
/// The serving certificate's file names in `--cert-dir` (upstream's pair name).
const PAIR_NAME: &str = "kube-controller-manager";
/// Where kube-apiserver publishes its client CA for delegated authentication.
const AUTH_CONFIGMAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");
const AUTH_CONFIGMAP_KEY: &str = "client-ca-file";
/// How often the client CA is read again.
const CLIENT_CA_REFRESH: Duration = Duration::from_secs(60);

#[derive(Args, Clone, Debug)]
pub struct ServingArgs {
    /// Address to serve HTTPS on (all interfaces: 0.0.0.0 or ::).
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// Port to serve HTTPS on, with authentication and authorization (0 picks a free one;
    /// the address is printed on stdout).
    #[arg(long, default_value_t = DEFAULT_SECURE_PORT)]
    secure_port: u16,
    /// Serving certificate (PEM, chain after the leaf). Without it and --tls-private-key-file,
    /// a self-signed one is made (in --cert-dir if set, else in memory).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// Serving certificate's private key (PEM).
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// Directory of the self-signed serving certificate (`kube-controller-manager.crt|key`),
    /// made on first start. Ignored with --tls-cert-file.
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// CA bundle (PEM) that client certificates must chain to (CN → user, O → groups).
    /// Default: the apiserver's (ConfigMap kube-system/extension-apiserver-authentication).
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Kubeconfig of the apiserver that reviews tokens (TokenReview). Default: the
    /// controller-manager's own apiserver client.
    #[arg(long)]
    authentication_kubeconfig: Option<PathBuf>,
    /// Kubeconfig of the apiserver that reviews access (SubjectAccessReview). Default: the
    /// controller-manager's own apiserver client.
    #[arg(long)]
    authorization_kubeconfig: Option<PathBuf>,
    /// Do not look up the client CA in the cluster.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    authentication_skip_lookup: bool,
    /// Start even when the client CA cannot be looked up (client certificates then do not
    /// authenticate).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    authentication_tolerate_lookup_failure: bool,
    /// How long token review answers are remembered.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    authentication_token_webhook_cache_ttl: Duration,
    /// How long "allowed" access review answers are remembered.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    authorization_webhook_cache_authorized_ttl: Duration,
    /// How long "denied" access review answers are remembered.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    authorization_webhook_cache_unauthorized_ttl: Duration,
    /// Paths anyone may get without authorization (`*` at the end: a prefix).
    #[arg(long, value_delimiter = ',', default_value = delegated_auth::DEFAULT_ALWAYS_ALLOW_PATHS)]
    authorization_always_allow_paths: Vec<String>,
    /// Also serve the same paths over plain HTTP WITHOUT authentication or authorization on
    /// this loopback address (e.g. 127.0.0.1:10258), for a local scraper. Off by default.
    #[arg(long)]
    metrics_bind_address: Option<SocketAddr>,
}

impl ServingArgs {
    /// The flags checked without touching files or the network.
    pub fn check(&self) -> anyhow::Result<Settings> {
        if self.tls_cert_file.is_some() != self.tls_private_key_file.is_some() {
            anyhow::bail!("--tls-cert-file and --tls-private-key-file go together");
        }
        if let Some(addr) = self.metrics_bind_address {
            if !addr.ip().is_loopback() {
                anyhow::bail!(
                    "--metrics-bind-address {addr}: plain HTTP without authentication is served on loopback \
                     addresses only; scrape the secure port (--secure-port) from elsewhere"
                );
            }
        }
        Ok(Settings {
            token_ttl: self.authentication_token_webhook_cache_ttl,
            allow_ttl: self.authorization_webhook_cache_authorized_ttl,
            deny_ttl: self.authorization_webhook_cache_unauthorized_ttl,
            always_allow_paths: delegated_auth::parse_always_allow_paths(&self.authorization_always_allow_paths)?,
        })
    }
}

/// `GET /healthz`, `/readyz`, `/livez`: 200 `ok` for the leader and a standby alike (a
/// standby is healthy and ready to take over); `GET /metrics`: the Prometheus text.
pub fn router(metrics: Metrics) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let text = with_csr_reads(metrics.encode());
                async move { ([(http::header::CONTENT_TYPE, kustos_controllers::metrics::CONTENT_TYPE)], text) }
            }),
        )
}

/// The controllers' metrics with the counters of certificate signing request reads (the
/// process-wide memo of kustos-ca) before OpenMetrics' closing `# EOF`.
fn with_csr_reads(text: String) -> String {
    let body = text.trim_end().strip_suffix("# EOF").unwrap_or(&text);
    format!("{body}{}# EOF\n", kustos_ca::csr::memo::metrics_text())
}

/// A self-signed serving certificate chain and key, as upstream makes one: a CA
/// `<host>-ca@<unix time>` and a leaf `<host>@<unix time>` for `localhost`, 127.0.0.1 and the
/// bind address when it is a specific one.
fn self_signed(bind: IpAddr) -> anyhow::Result<(String, String)> {
    let now = chrono::Utc::now();
    let year = chrono::Duration::days(365);
    let ca = kustos_ca::Ca::generate(&format!("localhost-ca@{}", now.timestamp()), year, now)
        .context("making the self-signed serving CA")?;
    let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
    if !bind.is_unspecified() && !ips.contains(&bind) {
        ips.push(bind);
    }
    let params =
        kustos_ca::IssueParams::server(&format!("localhost@{}", now.timestamp()), vec!["localhost".into()], ips, year);
    let issued = ca.issue(params, now).context("making the self-signed serving certificate")?;
    let key = issued.key_pem.context("the self-signed serving key")?;
    Ok((format!("{}{}", issued.cert_pem, ca.cert_pem()), key))
}

/// Reads a file named by a flag.
fn read(flag: &str, path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {flag} {}", path.display()))
}

/// The serving certificate chain and key (PEM).
fn serving_pair(args: &ServingArgs) -> anyhow::Result<(String, String)> {
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) {
        return Ok((read("--tls-cert-file", cert)?, read("--tls-private-key-file", key)?));
    }
    let Some(dir) = &args.cert_dir else { return self_signed(args.bind_address) };
    let (cert, key) = (dir.join(format!("{PAIR_NAME}.crt")), dir.join(format!("{PAIR_NAME}.key")));
    if cert.exists() && key.exists() {
        return Ok((read("--cert-dir", &cert)?, read("--cert-dir", &key)?));
    }
    let (cert_pem, key_pem) = self_signed(args.bind_address)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating --cert-dir {}", dir.display()))?;
    write_new(&key, &key_pem, 0o600)?;
    write_new(&cert, &cert_pem, 0o644)?;
    tracing::info!(cert = %cert.display(), "wrote a self-signed serving certificate");
    Ok((cert_pem, key_pem))
}

/// Writes a file that must not exist yet, created with `mode` (a key is never readable by
/// others, not even for a moment).
fn write_new(path: &Path, contents: &str, mode: u32) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(contents.as_bytes()).and_then(|()| f.sync_all()).with_context(|| format!("writing {}", path.display()))
}

/// Where the client CA comes from.
#[derive(Clone)]
enum ClientCaSource {
    File(PathBuf),
    ConfigMap(kube::Client),
}

impl ClientCaSource {
    /// The CA bundle (PEM); `None`: there is none.
    async fn load(&self) -> anyhow::Result<Option<String>> {
        match self {
            ClientCaSource::File(path) => read("--client-ca-file", path).map(Some),
            ClientCaSource::ConfigMap(client) => {
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), AUTH_CONFIGMAP.0);
                let cm = api.get_opt(AUTH_CONFIGMAP.1).await.map_err(|e| {
                    let hint = if matches!(&e, kube::Error::Api(s) if s.code == 403) {
                        " (bind Role kube-system/extension-apiserver-authentication-reader to this service account)"
                    } else {
                        ""
                    };
                    anyhow::anyhow!(
                        "looking up configmap {}/{}: {e}{hint}; set --client-ca-file, or \
                         --authentication-skip-lookup or --authentication-tolerate-lookup-failure",
                        AUTH_CONFIGMAP.0,
                        AUTH_CONFIGMAP.1
                    )
                })?;
                Ok(cm.and_then(|cm| cm.data).and_then(|mut d| d.remove(AUTH_CONFIGMAP_KEY)))
            }
        }
    }
}

/// Trusted certificates of a PEM bundle (DER), checked.
fn bundle(pem: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let ders = kustos_ca::certificates_from_pem(pem).context("parsing the client CA bundle")?;
    if ders.is_empty() {
        anyhow::bail!("the client CA bundle holds no certificate");
    }
    Ok(ders)
}

/// What runs: the secure listener (and the plain one), until aborted.
pub struct Serving {
    pub secure: SocketAddr,
    pub insecure: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Serving {
    pub fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Binds the listeners and starts serving. `client`: the controller-manager's own apiserver
/// client, the default for the reviews and the client CA lookup.
pub async fn start(
    args: &ServingArgs,
    settings: Settings,
    client: &kube::Client,
    metrics: Metrics,
) -> anyhow::Result<Serving> {
    let kubeconfig_client = |path: &Option<PathBuf>| {
        let path = path.clone();
        let client = client.clone();
        async move {
            match path {
                Some(p) => crate::kubeconfig_cmd::client(&p).await,
                None => Ok(client),
            }
        }
    };
    let authentication = kubeconfig_client(&args.authentication_kubeconfig).await?;
    let authorization = kubeconfig_client(&args.authorization_kubeconfig).await?;
    let (cert_pem, key_pem) = serving_pair(args)?;

    let source = match (&args.client_ca_file, args.authentication_skip_lookup) {
        (Some(path), _) => Some(ClientCaSource::File(path.clone())),
        (None, false) => Some(ClientCaSource::ConfigMap(authentication.clone())),
        (None, true) => None,
    };
    let mut client_ca = None;
    if let Some(source) = &source {
        match source.load().await {
            Ok(Some(pem)) => client_ca = Some(bundle(&pem)?),
            Ok(None) => tracing::warn!(
                "configmap kube-system/extension-apiserver-authentication has no client-ca-file: client \
                 certificates do not authenticate"
            ),
            Err(e) if matches!(source, ClientCaSource::ConfigMap(_)) && args.authentication_tolerate_lookup_failure => {
                tracing::warn!(error = %e, "no client CA: client certificates do not authenticate");
            }
            Err(e) => return Err(e),
        }
    }
    let x509 = match &client_ca {
        Some(ders) => Some(Arc::new(X509Authenticator::new(ders)?)),
        None => None,
    };
    let hints = client_ca.clone().unwrap_or_default();
    let tls = kustos_apiserver::http::serve::tls_config_with(&cert_pem, &key_pem, &hints)
        .context("the serving certificate (--tls-cert-file, --tls-private-key-file)")?;
    let (tls_tx, tls_rx) = tokio::sync::watch::channel(tls);

    let reviewer = KubeReviewer { authentication, authorization };
    let auth = Arc::new(Delegated::new(reviewer, x509.clone(), settings));
    let secure_app = router(metrics.clone())
        .layer(axum::middleware::from_fn_with_state(auth, delegated_auth::guard::<KubeReviewer>));
    let addr = SocketAddr::new(args.bind_address, args.secure_port);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("listening on --bind-address {} --secure-port {}", args.bind_address, args.secure_port)
    })?;
    let secure = listener.local_addr().context("the secure listener's address")?;
    let mut tasks = vec![tokio::spawn(kustos_apiserver::http::serve::serve_dynamic(
        listener,
        tls_rx,
        secure_app,
        std::future::pending(),
    ))];

    // The client CA is read again every minute; a change reaches new connections.
    if let (Some(source), Some(x509)) = (source, x509) {
        let mut current = client_ca.unwrap_or_default();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(CLIENT_CA_REFRESH).await;
                let fresh = match source.load().await {
                    Ok(Some(pem)) => bundle(&pem),
                    Ok(None) => Ok(Vec::new()),
                    Err(e) => Err(e),
                };
                match fresh {
                    Ok(ders) if ders != current => {
                        let tls = kustos_apiserver::http::serve::tls_config_with(&cert_pem, &key_pem, &ders);
                        match (x509.set_trust(&ders), tls) {
                            (Ok(()), Ok(tls)) => {
                                let _ = tls_tx.send(tls);
                                tracing::info!(certificates = ders.len(), "the client CA changed");
                                current = ders;
                            }
                            (Err(e), _) | (_, Err(e)) => tracing::warn!(error = %e, "keeping the client CA"),
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "reading the client CA again failed; keeping it"),
                }
            }
        }));
    }

    let mut insecure = None;
    if let Some(addr) = args.metrics_bind_address {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on --metrics-bind-address {addr}"))?;
        let local = listener.local_addr().context("the plain listener's address")?;
        tracing::warn!(address = %local, "serving /healthz, /readyz, /livez and /metrics over plain HTTP without authentication");
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, router(metrics)).await;
        }));
        insecure = Some(local);
    }
    Ok(Serving { secure, insecure, tasks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serving: ServingArgs,
    }

    fn parse(args: &[&str]) -> Result<ServingArgs, String> {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.serving).map_err(|e| e.to_string())
    }

    #[test]
    fn the_metrics_carry_the_csr_reads_before_the_end() {
        let text = with_csr_reads(Metrics::new().encode());
        for name in ["kustos_csr_parses", "kustos_csr_signature_checks", "kustos_csr_parse_cache_hits"] {
            assert!(text.contains(&format!("\n# TYPE {name} counter\n{name}_total ")), "{name} in {text}");
        }
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
        assert!(lines[lines.len() - 2].starts_with("kustos_csr_parse_cache_hits_total "), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.contains("\nkustos_bootstrap_tokens_cleaned_total "), "the controllers' metrics stay: {text}");
    }

    #[test]
    fn defaults_are_kube_controller_managers() {
        let a = parse(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(SocketAddr::new(a.bind_address, a.secure_port).to_string(), "0.0.0.0:10257");
        assert_eq!(a.metrics_bind_address, None, "no plain HTTP unless asked");
        assert!(!a.authentication_skip_lookup && !a.authentication_tolerate_lookup_failure);
        let s = a.check().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (s.token_ttl, s.allow_ttl, s.deny_ttl),
            (Duration::from_secs(10), Duration::from_secs(10), Duration::from_secs(10))
        );
        assert_eq!(s.always_allow_paths, ["/healthz", "/readyz", "/livez"]);
    }

    #[test]
    fn flag_checks() {
        // args, error containing (None: fine)
        let cases: &[(&[&str], Option<&str>)] = &[
            (&["--metrics-bind-address=127.0.0.1:10258"], None),
            (&["--metrics-bind-address=[::1]:0"], None),
            (&["--metrics-bind-address=0.0.0.0:8080"], Some("loopback addresses only")),
            (&["--metrics-bind-address=10.0.0.1:8080"], Some("loopback addresses only")),
            (&["--tls-cert-file=a.crt"], Some("go together")),
            (&["--tls-private-key-file=a.key"], Some("go together")),
            (&["--tls-cert-file=a.crt", "--tls-private-key-file=a.key"], None),
            (&["--authorization-always-allow-paths=/healthz,metrics"], Some("is not a path")),
            (&["--authorization-always-allow-paths="], None),
            (&["--authentication-token-webhook-cache-ttl=0s"], None),
        ];
        for (args, want) in cases {
            let got = parse(args).and_then(|a| a.check().map_err(|e| e.to_string()));
            match (got, want) {
                (Ok(_), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{args:?}: {e}"),
                (got, want) => panic!("{args:?}: got {:?}, want {want:?}", got.map(|_| ())),
            }
        }
    }

    #[test]
    fn the_self_signed_certificate_names_localhost_and_the_bind_address() {
        for (bind, want_ips) in [("0.0.0.0", vec!["127.0.0.1"]), ("10.1.2.3", vec!["127.0.0.1", "10.1.2.3"])] {
            let (chain, key) =
                self_signed(bind.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))).unwrap_or_else(|e| panic!("{e}"));
            assert!(key.contains("PRIVATE KEY"), "a key");
            let certs = kustos_ca::certificates_from_pem(&chain).unwrap_or_default();
            assert_eq!(certs.len(), 2, "leaf and its CA");
            let leaf = kustos_ca::parse_certificate_der(&certs[0]).unwrap_or_else(|e| panic!("{e}"));
            assert!(leaf.common_name.starts_with("localhost@"), "{}", leaf.common_name);
            assert_eq!(leaf.dns_names, ["localhost"]);
            let ips: Vec<String> = leaf.ip_addresses.iter().map(ToString::to_string).collect();
            assert_eq!(ips, want_ips, "{bind}");
            assert!(kustos_ca::signed_by(&certs[0], &certs[1]), "the leaf is signed by the CA that follows it");
            assert!(kustos_apiserver::http::serve::tls_config_with(&chain, &key, &[]).is_ok(), "rustls takes it");
        }
    }

    #[test]
    fn cert_dir_keeps_the_self_signed_pair_and_tls_files_win() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cert_dir = dir.path().join("certs");
        let flag = format!("--cert-dir={}", cert_dir.display());
        let args = parse(&[flag.as_str()]).unwrap_or_else(|e| panic!("{e}"));
        let first = serving_pair(&args).unwrap_or_else(|e| panic!("{e}"));
        let key_file = cert_dir.join("kube-controller-manager.key");
        let mode = std::fs::metadata(&key_file).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
        assert_eq!(mode, 0o600, "the key is private");
        assert_eq!(serving_pair(&args).unwrap_or_else(|e| panic!("{e}")), first, "the same pair on the next start");

        let cert_file = cert_dir.join("kube-controller-manager.crt");
        let (c, k) = (
            format!("--tls-cert-file={}", cert_file.display()),
            format!("--tls-private-key-file={}", key_file.display()),
        );
        let other = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let unused = format!("--cert-dir={}", other.path().join("unused").display());
        let args = parse(&[c.as_str(), k.as_str(), unused.as_str()]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(serving_pair(&args).unwrap_or_else(|e| panic!("{e}")), first, "the files given");
        assert!(!other.path().join("unused").exists(), "--cert-dir is not used with --tls-cert-file");
    }

    #[tokio::test]
    async fn the_routes() {
        use tower::ServiceExt as _;
        let metrics = Metrics::new();
        metrics.csr_signed("kubernetes.io/kube-apiserver-client-kubelet");
        // path, wanted status, a line the body must contain
        let cases: &[(&str, u16, &str)] = &[
            ("/healthz", 200, "ok"),
            ("/readyz", 200, "ok"),
            ("/livez", 200, "ok"),
            ("/metrics", 200, "kustos_csr_signed_total{signer=\"kubernetes.io/kube-apiserver-client-kubelet\"} 1"),
            ("/nope", 404, ""),
        ];
        for (path, code, line) in cases {
            let req = http::Request::get(*path).body(axum::body::Body::empty()).unwrap_or_default();
            let resp = router(metrics.clone()).oneshot(req).await.unwrap_or_else(|e| match e {});
            assert_eq!(resp.status().as_u16(), *code, "{path}");
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&body);
            assert!(text.lines().any(|l| l == *line) || line.is_empty(), "{path}: {text}");
        }
    }
}
