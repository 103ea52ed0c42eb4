//! HTTPS serving: the rustls configuration and the accept loop.
//!
//! TLS asks every client for a certificate (hinting the cluster CA subjects) but does not
//! require one, and accepts any certificate whose handshake signature checks out: chain,
//! validity and usage are verified per request by `authn::X509Authenticator`, so an untrusted
//! client certificate gets an HTTP 401 `Status` like upstream kube-apiserver, not a TLS alert.
//!
//! Each connection does its handshake in its own task (bounded by [`HANDSHAKE_TIMEOUT`]) and
//! is then served with hyper-util's auto builder (HTTP/1.1 and HTTP/2, ALPN `h2` and
//! `http/1.1`). Every request carries two extensions: [`PeerCertificates`] (empty when the
//! client sent none) and axum's [`ConnectInfo<SocketAddr>`]. There is no per-request timeout
//! here (watches stream for as long as they last). On shutdown the listener closes, open
//! connections are asked to finish gracefully, and whatever is still open after
//! [`SHUTDOWN_GRACE`] (e.g. watch streams) is dropped.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::pki::Pki;

/// Longest time a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections may take to finish after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// HTTP/2 streams per connection (upstream kube-apiserver's default).
pub const HTTP2_MAX_STREAMS: u32 = 1000;
/// The request line and headers of one request, at most (upstream's `MaxHeaderBytes`): the
/// read buffer over HTTP/1.1 (hyper's default is 408 KiB), and the header list size announced
/// over HTTP/2 (hyper's default is 16 KiB, which made clients refuse to send bearer tokens,
/// selectors or field managers that HTTP/1.1 takes). Larger is 431 (414 for a request line
/// over 64 KiB on HTTP/1.1).
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// The certificate chain the client presented in the TLS handshake (leaf first), not yet
/// verified; empty when it presented none. In every request's extensions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerCertificates(pub Vec<CertificateDer<'static>>);

impl PeerCertificates {
    /// The client's own certificate.
    pub fn leaf(&self) -> Option<&CertificateDer<'static>> {
        self.0.first()
    }
}

/// The apiserver as an in-memory service, for clients in the same process (the controllers
/// of `kustos server`): each request goes through the whole stack — authentication of the
/// given client certificate chain exactly as if it had been presented in a TLS handshake,
/// authorization, admission, storage — without TCP, TLS and HTTP framing on both sides.
#[derive(Clone)]
pub struct InProcess {
    app: Router,
    identity: Identity,
}

/// The client certificate chain (leaf first) of each request.
pub type Identity = Arc<dyn Fn() -> Vec<CertificateDer<'static>> + Send + Sync>;

impl InProcess {
    /// `identity`: the client certificate chain (leaf first) the requests authenticate with.
    pub fn new(app: Router, identity: Vec<CertificateDer<'static>>) -> Self {
        InProcess { app, identity: Arc::new(move || identity.clone()) }
    }

    /// Like [`InProcess::new`], asking `identity` for the chain at every request (e.g. one
    /// re-issued when the cluster CA is rotated).
    pub fn with_identity(app: Router, identity: Identity) -> Self {
        InProcess { app, identity }
    }
}

impl<B> tower::Service<http::Request<B>> for InProcess
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = tower::util::Oneshot<Router, http::Request<axum::body::Body>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(PeerCertificates((self.identity)()));
        self.app.clone().oneshot(req)
    }
}

/// ECDSA P-521 with SHA-512, for a client's proof of its key (TLS `CertificateVerify`):
/// ring verifies no P-521, and kustos issues P-521 client certificates (as Go's TLS takes
/// them). Verified with the `p521` crate.
#[derive(Debug)]
struct EcdsaP521Sha512;

impl rustls::pki_types::SignatureVerificationAlgorithm for EcdsaP521Sha512 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), rustls::pki_types::InvalidSignature> {
        use p521::ecdsa::signature::Verifier as _;
        let bad = |_| rustls::pki_types::InvalidSignature;
        let key = p521::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(bad)?;
        let signature = p521::ecdsa::Signature::from_der(signature).map_err(bad)?;
        key.verify(message, &signature).map_err(bad)
    }

    fn public_key_alg_id(&self) -> rustls::pki_types::AlgorithmIdentifier {
        rustls::pki_types::alg_id::ECDSA_P521
    }

    fn signature_alg_id(&self) -> rustls::pki_types::AlgorithmIdentifier {
        rustls::pki_types::alg_id::ECDSA_SHA512
    }
}

/// The cipher suites the server offers, in the order it chooses among those a client offers
/// (the server's order, not the client's: `ignore_client_order`), as Go's `crypto/tls` server
/// of kube-apiserver does on a machine with AES hardware: AES-128-GCM before AES-256-GCM
/// before ChaCha20-Poly1305, TLS 1.3 before TLS 1.2, ECDSA before RSA. The set is ring's.
/// A client whose first choice is ChaCha20 (no AES hardware) gets AES-128-GCM here, where
/// Go's server would honour that choice: rustls has no such rule.
fn server_cipher_suites() -> Vec<rustls::SupportedCipherSuite> {
    use rustls::crypto::ring::cipher_suite as cs;
    vec![
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ]
}

/// The schemes a client's proof of its key may use: ring's, and ECDSA P-521 with SHA-512.
fn client_algorithms() -> &'static rustls::crypto::WebPkiSupportedAlgorithms {
    use rustls::pki_types::SignatureVerificationAlgorithm;
    static ALGORITHMS: std::sync::LazyLock<rustls::crypto::WebPkiSupportedAlgorithms> =
        std::sync::LazyLock::new(|| {
            static P521: &[&dyn SignatureVerificationAlgorithm] = &[&EcdsaP521Sha512];
            let ring = rustls::crypto::ring::default_provider().signature_verification_algorithms;
            // Built once, for the life of the process.
            let all: &'static [&'static dyn SignatureVerificationAlgorithm] =
                Box::leak(ring.all.iter().chain(P521).copied().collect::<Vec<_>>().into_boxed_slice());
            let mapping: &'static [(SignatureScheme, &'static [&'static dyn SignatureVerificationAlgorithm])] =
                Box::leak(
                    ring.mapping
                        .iter()
                        .copied()
                        .chain([(SignatureScheme::ECDSA_NISTP521_SHA512, P521)])
                        .collect::<Vec<_>>()
                        .into_boxed_slice(),
                );
            rustls::crypto::WebPkiSupportedAlgorithms { all, mapping }
        });
    &ALGORITHMS
}

/// Requests a client certificate and accepts any, checking only the handshake signature
/// (proof that the client holds the certificate's key).
#[derive(Debug)]
struct RequestAnyClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestAnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Verified per request by the x509 authenticator (401 instead of a TLS alert).
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crate::work::signature_checked(crate::work::Signature::TlsCertificateVerify);
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crate::work::signature_checked(crate::work::Signature::TlsCertificateVerify);
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The server TLS configuration: the serving certificate and key, optional client
/// certificates (hinting the CA bundle), ALPN `h2` and `http/1.1`, the ring provider.
pub fn tls_config(pki: &Pki) -> anyhow::Result<Arc<ServerConfig>> {
    tls_config_with(&pki.serving_cert_pem, &pki.serving_key_pem, &pki.ca_bundle_der()?)
}

/// [`tls_config`] from its parts: the serving certificate chain and key (PEM) and the CA
/// certificates (DER) whose subjects are hinted to clients (e.g. Go clients send a client
/// certificate only when its issuer is among the hints).
pub fn tls_config_with(
    serving_cert_pem: &str,
    serving_key_pem: &str,
    client_ca_der: &[Vec<u8>],
) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: server_cipher_suites(),
        ..rustls::crypto::ring::default_provider()
    });
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut serving_cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .context("parsing the serving certificate")?;
    if certs.is_empty() {
        anyhow::bail!("the serving certificate PEM holds no certificate");
    }
    let key = rustls_pemfile::private_key(&mut serving_key_pem.as_bytes())
        .context("parsing the serving key")?
        .ok_or_else(|| anyhow::anyhow!("the serving key PEM holds no private key"))?;
    let mut roots = RootCertStore::empty();
    for der in client_ca_der {
        roots.add(CertificateDer::from(der.clone())).context("adding a CA certificate to the client CA hints")?;
    }
    let verifier = Arc::new(RequestAnyClientCert { hints: roots.subjects(), algorithms: *client_algorithms() });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("the serving certificate and key do not form a usable pair")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.ignore_client_order = true;
    // No session tickets and no session cache. Kubernetes clients (client-go, kubectl, the
    // Python client) keep no TLS session cache, so a ticket is never used; rustls' default
    // of two tickets cost each connection two random IDs, two cache insertions holding the
    // client's chain, two encrypted records and a socket write of their own
    // (docs/BENCHMARKS.md, "TLS session tickets"). Clients that would resume do a full
    // handshake, as they do against a restarted server.
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(Arc::new(config))
}

/// Accept and serve connections until `shutdown` completes, then shut down gracefully
/// (open connections get [`SHUTDOWN_GRACE`] to finish). Errors on one connection never
/// stop the loop.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send,
) {
    let (_keep, tls) = watch::channel(tls);
    serve_with_grace(listener, tls, app, shutdown, SHUTDOWN_GRACE).await;
}

/// Like [`serve`], with a TLS configuration that can be replaced while serving: each new
/// connection uses the latest one (open connections keep theirs).
pub async fn serve_dynamic(
    listener: TcpListener,
    tls: watch::Receiver<Arc<ServerConfig>>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send,
) {
    serve_with_grace(listener, tls, app, shutdown, SHUTDOWN_GRACE).await;
}

async fn serve_with_grace(
    listener: TcpListener,
    tls: watch::Receiver<Arc<ServerConfig>>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send,
    grace: Duration,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, remote)) => {
                    let acceptor = TlsAcceptor::from(tls.borrow().clone());
                    connections.spawn(serve_connection(tcp, remote, acceptor, app.clone(), stop_rx.clone()));
                }
                Err(e) => {
                    // E.g. out of file descriptors: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::info!(open = connections.len(), "closing connections still open after the shutdown grace period");
        connections.shutdown().await;
    }
}

async fn serve_connection(
    tcp: TcpStream,
    remote: SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
    let stream = tokio::select! {
        res = handshake => match res {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%remote, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%remote, "TLS handshake timed out");
                return;
            }
        },
        // Shutting down: no point finishing a handshake.
        _ = stop.wait_for(|stopping| *stopping) => return,
    };
    let peer = PeerCertificates(stream.get_ref().1.peer_certificates().map(<[_]>::to_vec).unwrap_or_default());
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        req.extensions_mut().insert(peer.clone());
        req.extensions_mut().insert(ConnectInfo(remote));
        app.clone().oneshot(req)
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().max_buf_size(MAX_HEADER_BYTES);
    builder.http2().max_concurrent_streams(HTTP2_MAX_STREAMS).max_header_list_size(MAX_HEADER_BYTES as u32);
    let conn = builder.serve_connection(TokioIo::new(super::first_flight::FirstFlight::new(stream, h2)), service);
    tokio::pin!(conn);
    let mut draining = *stop.borrow();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(%remote, error = %e, "connection ended with an error");
                }
                break;
            }
            _ = stop.changed(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::extract::Extension;
    use axum::routing::get;
    use chrono::Utc;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn whoami(
        Extension(peer): Extension<PeerCertificates>,
        ConnectInfo(remote): ConnectInfo<SocketAddr>,
    ) -> String {
        let cn = match peer.leaf() {
            Some(der) => kustos_ca::parse_certificate_der(der).map(|i| i.common_name).unwrap_or_default(),
            None => "anonymous".to_string(),
        };
        format!("{cn} from {}", remote.ip())
    }

    async fn forever() -> axum::body::Body {
        let stream = futures::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
        axum::body::Body::from_stream(stream)
    }

    struct Server {
        addr: SocketAddr,
        pki: Pki,
        _tmp: tempfile::TempDir,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(grace: Duration) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let pki = crate::pki::ensure(tmp.path(), &[], Utc::now()).unwrap();
        let tls = tls_config(&pki).unwrap();
        let app = Router::new().route("/whoami", get(whoami)).route("/forever", get(forever));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = rx.await;
        };
        let task = tokio::spawn(serve_with_grace(listener, watch::channel(tls).1, app, shutdown, grace));
        Server { addr, pki, _tmp: tmp, stop: Some(tx), task }
    }

    type Tls = tokio_rustls::client::TlsStream<TcpStream>;

    /// A TLS connection trusting the cluster CA, optionally with a client certificate.
    async fn connect(s: &Server, identity: Option<(&str, &str)>, alpn: &[&[u8]]) -> Tls {
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(s.pki.ca().cert_der().to_vec())).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match identity {
            Some((cert, key)) => {
                let certs = rustls_pemfile::certs(&mut cert.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
                let key = rustls_pemfile::private_key(&mut key.as_bytes()).unwrap().unwrap();
                builder.with_client_auth_cert(certs, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(s.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        connector.connect(name, tcp).await.unwrap()
    }

    /// An HTTP/1.1 GET with `Connection: close`; the whole response as text.
    async fn get_http1(s: &Server, identity: Option<(&str, &str)>, path: &str) -> String {
        let mut tls = connect(s, identity, &[b"http/1.1"]).await;
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        tls.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn serves_with_and_without_client_certificates() {
        let mut s = start(SHUTDOWN_GRACE).await;
        let now = Utc::now();
        let alice = s
            .pki
            .ca()
            .issue(kustos_ca::IssueParams::client("alice", vec!["devs".into()], chrono::Duration::days(1)), now)
            .unwrap();
        let alice_key = alice.key_pem.clone().unwrap();
        // A certificate from another CA still completes the handshake (authn rejects it later).
        let other = kustos_ca::Ca::generate("other", chrono::Duration::days(10), now).unwrap();
        let mallory =
            other.issue(kustos_ca::IssueParams::client("mallory", vec![], chrono::Duration::days(1)), now).unwrap();
        let mallory_key = mallory.key_pem.clone().unwrap();
        let cases: [(Option<(&str, &str)>, &str); 3] = [
            (None, "anonymous"),
            (Some((&alice.cert_pem, &alice_key)), "alice"),
            (Some((&mallory.cert_pem, &mallory_key)), "mallory"),
        ];
        for (identity, want) in cases {
            let response = get_http1(&s, identity, "/whoami").await;
            assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
            assert!(response.ends_with(&format!("\r\n\r\n{want} from 127.0.0.1")), "{response}");
        }
        // ALPN offers h2 (preferred) and http/1.1.
        let tls = connect(&s, None, &[b"h2", b"http/1.1"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        drop(tls);
        // Garbage instead of a TLS handshake, and an abandoned connection, do not disturb the loop.
        let mut raw = TcpStream::connect(s.addr).await.unwrap();
        raw.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        drop(raw);
        let idle = TcpStream::connect(s.addr).await.unwrap();
        let response = get_http1(&s, None, "/whoami").await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        drop(idle);

        let _ = s.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(5), &mut s.task).await.unwrap().unwrap();
    }

    /// The server picks the cipher suite by its own order (AES-128-GCM first, as Go's server
    /// does), among the suites a client offers, and issues no session tickets: a second
    /// connection from a client that keeps its sessions is a full handshake again.
    #[tokio::test]
    async fn the_server_chooses_the_suite_and_issues_no_session_tickets() {
        use rustls::crypto::ring::cipher_suite as cs;
        let s = start(SHUTDOWN_GRACE).await;
        let config = |suites: Vec<rustls::SupportedCipherSuite>| {
            let mut roots = RootCertStore::empty();
            roots.add(CertificateDer::from(s.pki.ca().cert_der().to_vec())).unwrap();
            let provider =
                rustls::crypto::CryptoProvider { cipher_suites: suites, ..rustls::crypto::ring::default_provider() };
            let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(c)
        };
        let exchange = |config: Arc<rustls::ClientConfig>| async move {
            let tcp = TcpStream::connect(s.addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.unwrap();
            let req = "GET /whoami HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
            tls.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&out));
            let (_, conn) = tls.get_ref();
            (conn.negotiated_cipher_suite().map(|c| c.suite()), conn.handshake_kind())
        };
        // rustls' client lists AES-256-GCM first; the server's order wins.
        let default_order = config(rustls::crypto::ring::default_provider().cipher_suites);
        assert_eq!(default_order.crypto_provider().cipher_suites[0].suite(), cs::TLS13_AES_256_GCM_SHA384.suite());
        for round in ["first", "second"] {
            let (suite, kind) = exchange(default_order.clone()).await;
            assert_eq!(suite, Some(cs::TLS13_AES_128_GCM_SHA256.suite()), "{round} connection");
            assert_eq!(kind, Some(rustls::HandshakeKind::Full), "{round} connection: no ticket to resume with");
        }
        // A client that offers only another suite of the set still gets it.
        for only in [cs::TLS13_AES_256_GCM_SHA384, cs::TLS13_CHACHA20_POLY1305_SHA256] {
            let (suite, _) = exchange(config(vec![only])).await;
            assert_eq!(suite, Some(only.suite()));
        }
        // The server's set is ring's, reordered: nothing a client could use before is refused.
        let mut ours: Vec<_> = server_cipher_suites().iter().map(|c| c.suite()).collect();
        let mut ring: Vec<_> =
            rustls::crypto::ring::default_provider().cipher_suites.iter().map(|c| c.suite()).collect();
        ours.sort_by_key(|c| u16::from(*c));
        ring.sort_by_key(|c| u16::from(*c));
        assert_eq!(ours, ring);
    }

    /// The settings of the server's first HTTP/2 SETTINGS frame: (identifier, value).
    async fn h2_settings(s: &Server) -> Vec<(u16, u32)> {
        let mut tls = connect(s, None, &[b"h2"]).await;
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
        let mut head = [0u8; 9];
        tls.read_exact(&mut head).await.unwrap();
        assert_eq!(head[3], 4, "the server's first frame is SETTINGS");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        tls.read_exact(&mut payload).await.unwrap();
        payload
            .chunks(6)
            .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
            .collect()
    }

    #[tokio::test]
    async fn headers_up_to_a_mebibyte_are_read() {
        let s = start(SHUTDOWN_GRACE).await;
        // HTTP/2 announces it (SETTINGS_MAX_HEADER_LIST_SIZE, 0x6): clients check it before
        // they send.
        let settings = h2_settings(&s).await;
        assert!(settings.contains(&(6, MAX_HEADER_BYTES as u32)), "{settings:?}");
        // HTTP/1.1: 900 KB of headers are read; past the limit is 431.
        let header = |bytes: usize| format!("X-Big: {}\r\n", "b".repeat(bytes));
        for (bytes, status) in [(900_000, "200 OK"), (1_100_000, "431 Request Header Fields Too Large")] {
            let mut tls = connect(&s, None, &[b"http/1.1"]).await;
            let req = format!("GET /whoami HTTP/1.1\r\nHost: localhost\r\n{}Connection: close\r\n\r\n", header(bytes));
            // Over the limit, the server may answer and close before it has read it all.
            let _ = tls.write_all(req.as_bytes()).await;
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            let response = String::from_utf8_lossy(&out);
            assert!(response.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{bytes} bytes of headers: {response}");
        }
    }

    /// Records the CA subjects the server hints, and sends no certificate.
    #[derive(Debug, Default)]
    struct RecordHints(std::sync::Mutex<Vec<Vec<u8>>>);

    impl rustls::client::ResolvesClientCert for RecordHints {
        fn resolve(
            &self,
            root_hint_subjects: &[&[u8]],
            _: &[SignatureScheme],
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            *self.0.lock().unwrap() = root_hint_subjects.iter().map(|s| s.to_vec()).collect();
            None
        }

        fn has_certs(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn new_connections_use_the_latest_tls_configuration() {
        let tmp = tempfile::tempdir().unwrap();
        let pki = crate::pki::ensure(tmp.path(), &[], Utc::now()).unwrap();
        let other = kustos_ca::Ca::generate("other-ca", chrono::Duration::days(10), Utc::now()).unwrap();
        let first = tls_config(&pki).unwrap();
        let both = vec![pki.ca().cert_der().to_vec(), other.cert_der().to_vec()];
        let second = tls_config_with(&pki.serving_cert_pem, &pki.serving_key_pem, &both).unwrap();
        let (tx, rx) = watch::channel(first);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/whoami", get(whoami));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_dynamic(listener, rx, app, async move {
            let _ = stop_rx.await;
        }));
        let subjects = |ders: &[Vec<u8>]| -> Vec<Vec<u8>> {
            let mut roots = RootCertStore::empty();
            for d in ders {
                roots.add(CertificateDer::from(d.clone())).unwrap();
            }
            roots.subjects().iter().map(|s| s.as_ref().to_vec()).collect()
        };
        let hints = || async {
            let recorder = Arc::new(RecordHints::default());
            let mut roots = RootCertStore::empty();
            roots.add(CertificateDer::from(pki.ca().cert_der().to_vec())).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_client_cert_resolver(recorder.clone());
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = connector.connect(name, tcp).await.unwrap();
            // TLS 1.3: the certificate request is handled by the time the first byte arrives.
            tls.write_all(b"GET /whoami HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            let got = recorder.0.lock().unwrap().clone();
            got
        };
        assert_eq!(hints().await, subjects(&both[..1]), "the first configuration hints the cluster CA");
        tx.send(second).unwrap();
        assert_eq!(hints().await, subjects(&both), "the replaced configuration hints both CAs");
        let _ = stop_tx.send(());
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn shutdown_does_not_wait_for_pending_handshakes_or_idle_connections() {
        let mut s = start(SHUTDOWN_GRACE).await;
        let _pending = TcpStream::connect(s.addr).await.unwrap();
        let mut idle = connect(&s, None, &[b"http/1.1"]).await;
        idle.write_all(b"GET /whoami HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 4096];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = std::time::Instant::now();
        let _ = s.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(5), &mut s.task).await.unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn shutdown_drops_streams_still_open_after_the_grace_period() {
        let mut s = start(Duration::from_millis(300)).await;
        let mut tls = connect(&s, None, &[b"http/1.1"]).await;
        tls.write_all(b"GET /forever HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 4096];
        let n = tls.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
        let started = std::time::Instant::now();
        let _ = s.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(5), &mut s.task).await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250), "waited for the grace period");
        // The stream ends once the connection is dropped.
        let end = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await.unwrap();
        assert!(matches!(end, Ok(0) | Err(_)), "{end:?}");
        // And nothing listens any more.
        assert!(TcpStream::connect(s.addr).await.is_err());
    }
}
