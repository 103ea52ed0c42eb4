//! `kustos sa-signer --socket PATH`: the `k8s.io/externaljwt` v1 signer
//! (`v1.ExternalJWTSigner`: `Sign`, `FetchKeys`, `Metadata`) on a Unix socket, for
//! kube-apiserver's (or kustos') `--service-account-signing-endpoint`.
//!
//! It serves the service-account keys of a data directory (`DIR/pki`: `sa.key`,
//! `sa-next.key`, `sa-keys.json`, created at first start when absent), the same key set
//! `kustos server` signs with; with `--storage etcd` it takes part in the cluster's sealed
//! shared PKI as an apiserver does (`DIR/pki/sync.key`), so a rotation on any apiserver
//! reaches it. `kustos sa-key rotate|revoke` drive it while it runs: the next `Sign` and
//! `FetchKeys` see the files as the rotation left them. As the apiservers do, it records its
//! end on retired keys (retiredAt + `--service-account-max-token-expiration` + 5 min) and
//! drops those past it.
//!
//! The socket file is created 0600 (0660 with `--socket-group`, owned by that group); a stale
//! socket file nobody listens on is replaced, anything else at the path is an error. An
//! abstract socket (`@name`) has no file permissions: any process in the network namespace can
//! connect to it. Metrics (`kustos_sa_signer_*`) are served over plain HTTP on
//! `--metrics-bind-address` (off by default; meant for loopback).

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kustos_apiserver::pki::externaljwt::dir_keys::DirKeys;
use kustos_apiserver::pki::externaljwt::endpoint::Endpoint;
use kustos_apiserver::pki::externaljwt::proto::external_jwt_signer_server::ExternalJwtSignerServer;
use kustos_apiserver::pki::externaljwt::service::SignerService;
use kustos_apiserver::pki::externaljwt::signer_metrics::SignerMetrics;
use kustos_apiserver::pki::{sa_keys, sync::PkiSync};

use crate::{parse_duration, EtcdArgs};

/// Largest request the signer reads (claims are a few hundred bytes).
const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Bytes in flight each way between a connection's relay and the server.
const RELAY_BUFFER: usize = 64 * 1024;
/// How often the shared PKI record is merged (`--storage etcd`).
const SYNC_EVERY: Duration = Duration::from_secs(1);
/// How often retired keys' ends are recorded and keys past them dropped.
const MAINTAIN_EVERY: Duration = Duration::from_secs(10);

#[derive(Args)]
pub struct SaSignerArgs {
    /// The Unix socket to serve on: a path, or `@name` for an abstract socket.
    #[arg(long)]
    socket: String,
    /// Make the socket 0660 and owned by this group (a name or a numeric id); default 0600.
    #[arg(long)]
    socket_group: Option<String>,
    /// Where the service-account keys live (DIR/pki); created at first start when absent.
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
    /// The longest token lifetime signed (Metadata's max_token_expiration_seconds, at least
    /// 10m); a retired key verifies this long (+5m) after it stops signing.
    #[arg(long = "service-account-max-token-expiration", default_value = "8760h", value_parser = parse_duration)]
    max_token_expiration: Duration,
    /// How often callers should fetch the keys again (FetchKeys' refresh_hint_seconds): a
    /// revoked key stops verifying within this.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    refresh_hint: Duration,
    /// PEM file of keys (public or private) that verify legacy tokens signed elsewhere (e.g.
    /// kube-controller-manager's --service-account-private-key-file): served with
    /// exclude_from_oidc_discovery, never used to sign (repeatable).
    #[arg(long)]
    legacy_key_file: Vec<PathBuf>,
    /// Serve /metrics over HTTP on this address (e.g. 127.0.0.1:10290); off when not given.
    #[arg(long)]
    metrics_bind_address: Option<SocketAddr>,
    /// Where the key set lives: `sqlite` (the data directory's files) or `etcd` (the
    /// cluster's shared PKI record, as `kustos server --storage etcd`).
    #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "etcd"])]
    storage: String,
    /// etcd endpoints for --storage etcd (comma-separated).
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    #[command(flatten)]
    etcd: EtcdArgs,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
}

/// A group name or id as a gid (names from /etc/group).
/// The method path prefix of each package of `k8s.io/externaljwt`.
const V1: &str = "/v1.ExternalJWTSigner/";
const V1ALPHA1: &str = "/v1alpha1.ExternalJWTSigner/";

/// A call of `v1alpha1` (kube-apiserver 1.32 and 1.33, and clients generated from that
/// package) answered by the `v1` service: the two packages define the same service and
/// messages, field for field, so only the method's path differs.
fn v1alpha1_as_v1<B>(mut req: http::Request<B>) -> http::Request<B> {
    if let Some(method) = req.uri().path().strip_prefix(V1ALPHA1) {
        if let Ok(uri) = format!("{V1}{method}").parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

fn group_id(group: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").context("reading /etc/group")?;
    group_in(&groups, group).with_context(|| format!("no group {group:?} in /etc/group"))
}

fn group_in(groups: &str, name: &str) -> Option<u32> {
    groups.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next() == Some(name)).then(|| f.nth(1).and_then(|g| g.parse().ok())).flatten()
    })
}

/// A socket path's directory must exist: said plainly rather than as a bind error.
fn check_parent(path: &Path) -> anyhow::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() && !p.is_dir() => {
            anyhow::bail!("the socket's directory {} does not exist", p.display())
        }
        _ => Ok(()),
    }
}

/// Bind the socket: a stale socket file is replaced, anything else at the path refused.
async fn bind(endpoint: &Endpoint, group: Option<u32>) -> anyhow::Result<tokio::net::UnixListener> {
    if let Some(path) = endpoint.path() {
        check_parent(path)?;
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                if endpoint.connect().await.is_ok() {
                    anyhow::bail!("another process serves on {}", path.display());
                }
                std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
            }
            Ok(_) => anyhow::bail!("{} exists and is not a socket", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    } else if group.is_some() {
        anyhow::bail!("--socket-group needs a socket path: an abstract socket has no owner or permissions");
    }
    let addr = endpoint.socket_addr().with_context(|| format!("the socket address {endpoint}"))?;
    let listener =
        tokio::net::UnixListener::bind_addr(&addr.into()).with_context(|| format!("listening on {endpoint}"))?;
    if let Some(path) = endpoint.path() {
        // Created with the umask's mode, which never lets others write (connect); narrowed at once.
        if let Some(gid) = group {
            std::os::unix::fs::chown(path, None, Some(gid))
                .with_context(|| format!("giving {} to group {gid}", path.display()))?;
        }
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
    }
    Ok(listener)
}

fn legacy_keys(files: &[PathBuf]) -> anyhow::Result<Vec<kustos_ca::jwt::PublicKey>> {
    let mut keys = Vec::new();
    for f in files {
        let pem = std::fs::read_to_string(f).with_context(|| format!("reading --legacy-key-file {}", f.display()))?;
        keys.extend(
            kustos_ca::jwt::public_keys_from_pem(&pem)
                .with_context(|| format!("loading --legacy-key-file {}", f.display()))?,
        );
    }
    Ok(keys)
}

/// `/metrics` (and `/healthz`) over HTTP.
async fn serve_metrics(addr: SocketAddr, metrics: Arc<SignerMetrics>) -> anyhow::Result<SocketAddr> {
    use axum::routing::get;
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr} for metrics"))?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                        metrics.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "serving metrics");
        }
    });
    Ok(bound)
}

/// Follow the shared PKI record (etcd) and keep the retired keys' ends, until the process ends.
fn spawn_upkeep(pki: PathBuf, sync: Option<PkiSync>, max_token_seconds: i64) {
    tokio::spawn(async move {
        let mut last_maintain = tokio::time::Instant::now();
        let mut reported: Option<String> = None;
        loop {
            tokio::time::sleep(SYNC_EVERY).await;
            let mut outcome: anyhow::Result<()> = Ok(());
            if let Some(sync) = &sync {
                outcome = sync.round().await.map(|round| {
                    if !round.pulled.is_empty() {
                        tracing::info!(files = %round.pulled.join(","), "took changed keys from the shared PKI");
                    }
                });
            }
            if outcome.is_ok() && last_maintain.elapsed() >= MAINTAIN_EVERY {
                last_maintain = tokio::time::Instant::now();
                let pki = pki.clone();
                outcome = kustos_filework::run(move || {
                    sa_keys::maintain(&pki, max_token_seconds, chrono::Utc::now())
                })
                .await
                .map_err(anyhow::Error::from)
                .and_then(|r| r)
                .map(|dropped| {
                    for kid in dropped {
                        tracing::info!(kid = %kid, "dropped a retired service-account key: past its end or revoked");
                    }
                });
            }
            match outcome {
                Ok(()) => reported = None,
                Err(e) => {
                    let msg = format!("{e:#}");
                    if reported.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(error = %msg, "keeping the service-account keys current");
                        reported = Some(msg);
                    }
                }
            }
        }
    });
}

pub async fn run(args: SaSignerArgs) -> anyhow::Result<()> {
    crate::init_logging(&args.log_format);
    let endpoint = Endpoint::parse(&args.socket)
        .map_err(|e| anyhow::anyhow!(e.replace("--service-account-signing-endpoint", "--socket")))?;
    let max = args.max_token_expiration.as_secs();
    if !(600..=(1u64 << 32)).contains(&max) {
        anyhow::bail!("--service-account-max-token-expiration must be between 10m and 2^32 seconds");
    }
    let max_token_seconds = i64::try_from(max).unwrap_or(i64::MAX);
    if args.refresh_hint.as_secs() == 0 {
        anyhow::bail!("--refresh-hint must be at least 1s");
    }
    if let Some(path) = endpoint.path() {
        check_parent(path)?;
    }
    let group = args.socket_group.as_deref().map(group_id).transpose()?;
    let legacy = legacy_keys(&args.legacy_key_file)?;
    let pki = args.data_dir.join("pki");
    kustos_apiserver::pki::data_dir::secure(&args.data_dir)?;
    let sync = match args.storage.as_str() {
        "etcd" => {
            let cfg = args.etcd.config(args.etcd_servers.clone())?;
            let store = Arc::new(kustos_apiserver::storage::etcd::EtcdStorage::connect(&cfg).await?);
            let sync = PkiSync::start(store, &args.data_dir).await.context("taking the shared PKI from etcd")?;
            Some(sync)
        }
        _ if !args.etcd_servers.is_empty() => anyhow::bail!("--etcd-servers needs --storage etcd"),
        _ => None,
    };
    kustos_apiserver::pki::ensure_sa_keys(&args.data_dir)?;
    if let Some(sync) = &sync {
        sync.round().await.context("sharing the service-account keys through etcd")?;
    }
    let metrics = Arc::new(SignerMetrics::default());
    let keys = DirKeys::open(pki.clone(), legacy, metrics.clone())
        .with_context(|| format!("loading the service-account keys of {}", pki.display()))?;
    let listener = bind(&endpoint, group).await?;
    if let Some(addr) = args.metrics_bind_address {
        let bound = serve_metrics(addr, metrics.clone()).await?;
        println!("metrics: http://{bound}/metrics");
    }
    spawn_upkeep(pki, sync, max_token_seconds);
    let service = SignerService::new(Arc::new(keys), max_token_seconds, args.refresh_hint, metrics);
    let server = ExternalJwtSignerServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES);
    println!("kustos sa-signer is serving on {endpoint}");
    tracing::info!(socket = %endpoint, "serving k8s.io/externaljwt v1 and v1alpha1");
    // Each connection through the `:authority` relay: clients of other gRPC stacks than Go's
    // send the socket's path there, which the HTTP/2 server refuses (crate::grpc_authority).
    let incoming =
        tokio_stream::StreamExt::map(tokio_stream::wrappers::UnixListenerStream::new(listener), |accepted| {
            accepted.map(|conn| {
                let (relay_end, server_end) = tokio::io::duplex(RELAY_BUFFER);
                tokio::spawn(async move {
                    if let Err(e) = crate::grpc_authority::relay(conn, relay_end).await {
                        tracing::debug!(error = %e, "a signer connection ended");
                    }
                });
                server_end
            })
        });
    let served = tonic::transport::Server::builder()
        .timeout(Duration::from_secs(30))
        .layer(tower::util::MapRequestLayer::new(v1alpha1_as_v1))
        .add_service(server)
        .serve_with_incoming_shutdown(incoming, crate::shutdown_signal())
        .await;
    if let Some(path) = endpoint.path() {
        let _ = std::fs::remove_file(path);
    }
    served.context("serving the signer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_name() {
        let groups = "root:x:0:\nkube:x:1234:alice,bob\nbroken\nodd:x:notanumber:\n";
        let cases = [("root", Some(0)), ("kube", Some(1234)), ("odd", None), ("nobody", None), ("broken", None)];
        for (name, want) in cases {
            assert_eq!(group_in(groups, name), want, "{name}");
        }
    }
}
