//! The webhook's kubeconfig file, read as kube-apiserver reads
//! `--authentication-token-webhook-config-file`: the current context's cluster and user.
//!
//! In: the file's text (YAML or JSON), its directory (relative paths in it are relative to
//! it, as clientcmd resolves them) and a reader for the files it names. Out: a [`Target`]:
//! the URL the reviews are POSTed to (`clusters[].cluster.server`, path included; `http`
//! or `https`), the TLS client configuration (`certificate-authority`/`-data`, else the
//! system's roots; `insecure-skip-tls-verify`; `tls-server-name`; the user's
//! `client-certificate`/`client-key` or their `-data`) and the user's bearer token
//! (`token` or `tokenFile`). Exec plugins, auth providers and basic auth are refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::Deserialize;

/// Where and how the reviews are sent.
pub struct Target {
    pub scheme_https: bool,
    /// Host name or IP (without brackets), and port.
    pub host: String,
    pub port: u16,
    /// Path and query, as in the server URL (`/` when it has none).
    pub path: String,
    /// The `Host` header.
    pub authority: String,
    /// For `https`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub server_name: ServerName<'static>,
    /// The user's bearer token (secret: never logged).
    pub bearer: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("https", &self.scheme_https)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct File {
    clusters: Vec<NamedCluster>,
    users: Vec<NamedUser>,
    contexts: Vec<NamedContext>,
    current_context: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct Cluster {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedUser {
    name: String,
    user: User,
}

#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "kebab-case", default)]
struct User {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<serde_json::Value>,
    auth_provider: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

/// Reads the files a kubeconfig names.
pub trait Files {
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>>;
}

/// The file system.
pub struct Disk;

impl Files for Disk {
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        std::fs::read(path)
    }
}

/// Files named by a kubeconfig are at most this big (a CA bundle, a certificate, a key).
const MAX_FILE: u64 = 1 << 20;

/// Read the kubeconfig at `path` (see the module docs).
pub fn load(path: &Path) -> Result<Target, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_FILE {
        return Err(format!("the file is larger than {MAX_FILE} bytes"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&text, &dir, &Disk)
}

/// A `-data` field (base64) or the named file, whichever is set; both is an error.
fn bytes_of(
    data: &Option<String>,
    file: &Option<String>,
    what: &str,
    dir: &Path,
    files: &dyn Files,
) -> Result<Option<Vec<u8>>, String> {
    let data = data.as_deref().filter(|d| !d.is_empty());
    let file = file.as_deref().filter(|f| !f.is_empty());
    match (data, file) {
        (Some(_), Some(_)) => Err(format!("{what}-data and {what} are both specified; only one is allowed")),
        (Some(d), None) => {
            let compact: String = d.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map(Some)
                .map_err(|e| format!("{what}-data is not base64: {e}"))
        }
        (None, Some(f)) => {
            let p = resolve(dir, f);
            files.read(&p).map(Some).map_err(|e| format!("unable to read {what} {}: {e}", p.display()))
        }
        (None, None) => Ok(None),
    }
}

fn resolve(dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// Parse a kubeconfig's text (see the module docs).
pub fn parse(text: &str, dir: &Path, files: &dyn Files) -> Result<Target, String> {
    let file: File =
        crate::wire::yaml::from_slice_strict(text.as_bytes()).map_err(|e| format!("not a kubeconfig: {e}"))?;
    if file.current_context.is_empty() {
        return Err("invalid configuration: no current-context is set (the webhook's kubeconfig needs one)".into());
    }
    let context = file
        .contexts
        .iter()
        .find(|c| c.name == file.current_context)
        .map(|c| &c.context)
        .ok_or_else(|| format!("context was not found for specified context: {}", file.current_context))?;
    let cluster =
        file.clusters.iter().find(|c| c.name == context.cluster).map(|c| &c.cluster).ok_or_else(|| {
            format!("cluster {:?} of context {:?} was not found", context.cluster, file.current_context)
        })?;
    let user = match context.user.as_str() {
        "" => User::default(),
        name => match file.users.iter().find(|u| u.name == name) {
            Some(u) => u.user.clone(),
            None => return Err(format!("user {name:?} of context {:?} was not found", file.current_context)),
        },
    };
    if user.exec.is_some() || user.auth_provider.is_some() {
        return Err("exec plugins and auth providers are not supported for the webhook's user".into());
    }
    if user.username.is_some() || user.password.is_some() {
        return Err("basic authentication (username, password) is not supported for the webhook's user".into());
    }
    if cluster.proxy_url.as_deref().is_some_and(|p| !p.is_empty()) {
        return Err("proxy-url is not supported for the webhook".into());
    }
    let (scheme_https, host, port, path, authority) = parse_server(&cluster.server)?;

    let ca = bytes_of(
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
        "certificate-authority",
        dir,
        files,
    )?;
    if ca.is_some() && cluster.insecure_skip_tls_verify {
        return Err("specifying a root certificates file with the insecure flag is not allowed".into());
    }
    let cert = bytes_of(&user.client_certificate_data, &user.client_certificate, "client-certificate", dir, files)?;
    let key = bytes_of(&user.client_key_data, &user.client_key, "client-key", dir, files)?;
    let bearer = match (user.token.as_deref().filter(|t| !t.is_empty()), user.token_file.as_deref()) {
        (Some(t), _) => Some(t.to_string()),
        (None, Some(f)) if !f.is_empty() => {
            let p = resolve(dir, f);
            let t = files.read(&p).map_err(|e| format!("unable to read tokenFile {}: {e}", p.display()))?;
            Some(String::from_utf8_lossy(&t).trim().to_string()).filter(|t| !t.is_empty())
        }
        _ => None,
    };
    let name = cluster.tls_server_name.as_deref().filter(|n| !n.is_empty()).unwrap_or(&host);
    let server_name =
        ServerName::try_from(name.to_string()).map_err(|_| format!("{name:?} is not a valid TLS server name"))?;
    let tls = match scheme_https {
        true => Some(client_config(ca.as_deref(), cluster.insecure_skip_tls_verify, cert.as_deref(), key.as_deref())?),
        false => None,
    };
    Ok(Target { scheme_https, host, port, path, authority, tls, server_name, bearer })
}

/// `http(s)://host[:port][/path]`: scheme, host (brackets removed), port, path, authority.
fn parse_server(server: &str) -> Result<(bool, String, u16, String, String), String> {
    if server.is_empty() {
        return Err("invalid configuration: no server found for the cluster".into());
    }
    let uri: http::Uri = server.parse().map_err(|e| format!("server {server:?} is not a URL: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("server {server:?}: the scheme must be https or http")),
    };
    let authority = uri.authority().ok_or_else(|| format!("server {server:?} has no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!("server {server:?}: user information in the URL is not supported"));
    }
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
    if host.is_empty() {
        return Err(format!("server {server:?} has no host"));
    }
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri.path_and_query().map(|p| p.as_str().to_string()).filter(|p| !p.is_empty()).unwrap_or("/".into());
    Ok((https, host, port, path, authority.as_str().to_string()))
}

fn client_config(
    ca: Option<&[u8]>,
    insecure: bool,
    cert: Option<&[u8]>,
    key: Option<&[u8]>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(pem) => {
                let certs = rustls_pemfile::certs(&mut &pem[..])
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("certificate-authority: {e}"))?;
                if certs.is_empty() {
                    return Err("certificate-authority holds no PEM certificate".into());
                }
                for c in certs {
                    roots.add(c).map_err(|e| format!("certificate-authority: {e}"))?;
                }
            }
            None => {
                for c in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(c);
                }
            }
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match (cert, key) {
        (Some(cert), Some(key)) => {
            let certs = rustls_pemfile::certs(&mut &cert[..])
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client-certificate: {e}"))?;
            if certs.is_empty() {
                return Err("client-certificate holds no PEM certificate".into());
            }
            let key = rustls_pemfile::private_key(&mut &key[..])
                .ok()
                .flatten()
                .ok_or("client-key holds no PEM private key")?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("client certificate and key: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) => return Err("client-certificate is set but client-key is not".into()),
        (None, Some(_)) => return Err("client-key is set but client-certificate is not".into()),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// `insecure-skip-tls-verify`: any server certificate (signatures still checked).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Mem(HashMap<PathBuf, Vec<u8>>);

    impl Files for Mem {
        fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            self.0.get(path).cloned().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    }

    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hook\n  cluster:\n{cluster}\nusers:\n- name: api\n  user:\n{user}\n\
             current-context: webhook\ncontexts:\n- name: webhook\n  context:\n    cluster: hook\n    user: api\n"
        )
    }

    #[test]
    fn reading_table() {
        let ca = kustos_ca::Ca::generate("hook-ca", chrono::Duration::days(10), chrono::Utc::now()).unwrap();
        let client = ca
            .issue(kustos_ca::IssueParams::client("api", vec![], chrono::Duration::days(1)), chrono::Utc::now())
            .unwrap();
        let (cert_pem, key_pem) = (client.cert_pem.clone(), client.key_pem.clone().unwrap());
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let dir = PathBuf::from("/etc/kustos");
        let files = Mem(HashMap::from([
            (dir.join("ca.crt"), ca.cert_pem().as_bytes().to_vec()),
            (PathBuf::from("/abs/client.crt"), cert_pem.as_bytes().to_vec()),
            (dir.join("client.key"), key_pem.as_bytes().to_vec()),
            (dir.join("token"), b" s3cret\n".to_vec()),
        ]));
        let ca_data = format!("    certificate-authority-data: {}", b64(ca.cert_pem()));
        let server = |s: &str| format!("    server: {s}");
        // name, cluster lines, user lines, want: Ok((https, host, port, path, bearer, tls)) or Err(part of the message)
        type Want = Result<(bool, &'static str, u16, &'static str, Option<&'static str>), &'static str>;
        let cases: Vec<(&str, String, String, Want)> = vec![
            (
                "https, CA file relative to the kubeconfig, token",
                format!("{}\n    certificate-authority: ca.crt", server("https://authn.example:8443/authenticate")),
                "    token: t0k".into(),
                Ok((true, "authn.example", 8443, "/authenticate", Some("t0k"))),
            ),
            (
                "CA data, client certificate file and key file",
                format!("{}\n{ca_data}", server("https://127.0.0.1/x?y=1")),
                "    client-certificate: /abs/client.crt\n    client-key: client.key".into(),
                Ok((true, "127.0.0.1", 443, "/x?y=1", None)),
            ),
            (
                "client certificate and key as data, token file",
                format!("{}\n{ca_data}", server("https://[::1]:9443")),
                format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n    tokenFile: token",
                    b64(&cert_pem),
                    b64(&key_pem)
                ),
                Ok((true, "::1", 9443, "/", Some("s3cret"))),
            ),
            (
                "plain http",
                server("http://localhost:8080/tr"),
                "    {}".into(),
                Ok((false, "localhost", 8080, "/tr", None)),
            ),
            (
                "insecure",
                format!("{}\n    insecure-skip-tls-verify: true", server("https://h")),
                "    {}".into(),
                Ok((true, "h", 443, "/", None)),
            ),
            ("no server", "    {}".into(), "    {}".into(), Err("no server")),
            ("ftp", server("ftp://h/"), "    {}".into(), Err("scheme must be https or http")),
            (
                "CA and insecure",
                format!("{}\n{ca_data}\n    insecure-skip-tls-verify: true", server("https://h")),
                "    {}".into(),
                Err("with the insecure flag is not allowed"),
            ),
            (
                "CA file and data",
                format!("{}\n{ca_data}\n    certificate-authority: ca.crt", server("https://h")),
                "    {}".into(),
                Err("only one is allowed"),
            ),
            (
                "missing CA file",
                format!("{}\n    certificate-authority: nope.crt", server("https://h")),
                "    {}".into(),
                Err("unable to read certificate-authority /etc/kustos/nope.crt"),
            ),
            (
                "CA that is no certificate",
                format!("{}\n    certificate-authority-data: {}", server("https://h"), b64("junk")),
                "    {}".into(),
                Err("holds no PEM certificate"),
            ),
            (
                "certificate without key",
                format!("{}\n{ca_data}", server("https://h")),
                "    client-certificate: /abs/client.crt".into(),
                Err("client-key is not"),
            ),
            ("exec", server("https://h"), "    exec: {command: x}".into(), Err("exec plugins")),
            ("basic", server("https://h"), "    username: u\n    password: p".into(), Err("basic authentication")),
        ];
        for (name, cluster, user, want) in cases {
            let got = parse(&kubeconfig(&cluster, &user), &dir, &files);
            match (got, want) {
                (Ok(t), Ok((https, host, port, path, bearer))) => {
                    assert_eq!(
                        (t.scheme_https, t.host.as_str(), t.port, t.path.as_str(), t.bearer.as_deref()),
                        (https, host, port, path, bearer),
                        "{name}"
                    );
                    assert_eq!(t.tls.is_some(), https, "{name}: TLS for https only");
                    assert!(!format!("{t:?}").contains("t0k"), "{name}: Debug hides the token");
                }
                (Err(e), Err(part)) => assert!(e.contains(part), "{name}: {e}"),
                (got, want) => panic!("{name}: got {:?}, want {want:?}", got.map(|t| format!("{t:?}"))),
            }
        }
    }

    #[test]
    fn an_alias_bomb_is_refused_not_expanded() {
        let text = format!("a: &a [{}]\nb: [{}]\n", "1,".repeat(1000), "*a,".repeat(3000));
        let files = Mem(HashMap::new());
        let e = parse(&text, Path::new("/etc/kustos"), &files).unwrap_err();
        assert!(e.contains("yaml: document contains excessive aliasing"), "{e}");
    }

    #[test]
    fn the_example_file_reads() {
        let text = include_str!("../../../../manifests/examples/token-webhook/webhook.kubeconfig");
        let ca = kustos_ca::Ca::generate("hook-ca", chrono::Duration::days(10), chrono::Utc::now()).unwrap();
        let client = ca
            .issue(kustos_ca::IssueParams::client("api", vec![], chrono::Duration::days(1)), chrono::Utc::now())
            .unwrap();
        let dir = PathBuf::from("/etc/kustos");
        let files = Mem(HashMap::from([
            (dir.join("webhook-ca.crt"), ca.cert_pem().as_bytes().to_vec()),
            (dir.join("apiserver-webhook-client.crt"), client.cert_pem.as_bytes().to_vec()),
            (dir.join("apiserver-webhook-client.key"), client.key_pem.clone().unwrap().into_bytes()),
        ]));
        let t = parse(text, &dir, &files).unwrap();
        assert_eq!(
            (t.scheme_https, t.host.as_str(), t.port, t.path.as_str(), t.tls.is_some()),
            (true, "authn.example.internal", 8443, "/authenticate", true)
        );
    }

    #[test]
    fn contexts_must_resolve() {
        let files = Mem(HashMap::new());
        let dir = Path::new("/");
        let cases = [
            ("clusters: []\n", "no current-context"),
            ("current-context: a\n", "context was not found for specified context: a"),
            ("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n", "cluster \"c\" of context"),
            (
                "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n",
                "user \"u\" of context",
            ),
            ("[not, a, map]", "not a kubeconfig"),
        ];
        for (text, want) in cases {
            match parse(text, dir, &files) {
                Err(e) => assert!(e.contains(want), "{text}: {e}"),
                Ok(t) => panic!("{text}: accepted {t:?}"),
            }
        }
        // A context without a user is fine: no client credentials.
        let ok = "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'http://h:1'}}]\n";
        let t = parse(ok, dir, &files).unwrap();
        assert_eq!((t.host.as_str(), t.port, t.bearer), ("h", 1, None));
    }
}
