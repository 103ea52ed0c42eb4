//! The standalone apiserver's PKI on disk, and the admin kubeconfig.
//!
//! Under `DIR/pki/` (mode 0700):
//!
//! | file | what | lifetime |
//! | --- | --- | --- |
//! | `ca.crt`, `ca.key` | cluster CA, CN `kustos-ca` | 10 years; created once, never overwritten |
//! | `apiserver.crt`, `apiserver.key` | serving certificate, CN `kube-apiserver` | 1 year; re-issued when the SAN set changes, it expires within 30 days, or it no longer matches the CA |
//! | `sa.key`, `sa.pub` | service-account token signing key (ECDSA P-256) | created once; replaced by `kustos sa-key rotate` |
//! | `sa-keys.json` | retired service-account keys that still verify ([`sa_keys`]) | each until its end, or revoked |
//!
//! `ca.crt` may hold several CA certificates (a CA rotation: the new CA and the old one).
//! The one whose public key matches `ca.key` signs; every CA certificate in it that has not
//! expired is trusted for client certificates ([`Pki::ca_bundle_pem`]). The running
//! apiserver follows changes of `ca.crt` without a restart (`authn/client_ca.rs`).
//!
//! Private keys are created with mode 0600 (never chmod-ed after the fact) and written
//! atomically (temporary file, fsync, rename). A CA or service-account key that exists but
//! does not load is an error naming the file: it is never silently replaced. Key material is
//! never logged.
//!
//! `DIR/admin.kubeconfig` (0600) holds an x509 client certificate for `kustos-admin` in group
//! `system:masters`, reused while it is signed by the current CA and valid for more than 30
//! days, and trusts the CA bundle (every unexpired CA of `ca.crt`).
//!
//! [`rotation`] replaces the CA while the server runs (`kustos ca rotate`); [`sa_keys`] the
//! service-account signing key (`kustos sa-key rotate`); [`sync`] shares the CA and the
//! service-account keys between several apiservers on one etcd.
//!
//! In this folder: files in, keys and certificates out. [`data_dir`] keeps the data
//! directory private, [`cluster_info`] writes `kube-public/cluster-info`.

pub mod cluster_info;
pub mod data_dir;
pub mod externaljwt;
pub mod key_source;
pub mod rotation;
pub mod sa_keys;
pub mod service_account;
pub mod sync;

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};

use kustos_ca::{Ca, IssueParams, KeyPair, SignerBundle};

/// Lifetime of a generated cluster CA.
pub const CA_VALIDITY: Duration = Duration::days(3650);
/// Lifetime of the serving and admin certificates.
pub const CERT_VALIDITY: Duration = Duration::days(365);
/// Certificates expiring sooner than this are re-issued at start.
pub const RENEW_BEFORE: Duration = Duration::days(30);
/// CN of the cluster CA.
pub const CA_COMMON_NAME: &str = "kustos-ca";
/// CN of the serving certificate.
pub const SERVING_COMMON_NAME: &str = "kube-apiserver";
/// User of the admin kubeconfig (its group: `authn::user::MASTERS_GROUP`).
pub const ADMIN_USER: &str = "kustos-admin";
/// Cluster and context name in generated kubeconfigs.
pub const CLUSTER_NAME: &str = "kustos";

/// The loaded PKI. `Debug` never shows private keys.
#[derive(Clone)]
pub struct Pki {
    /// `DIR/pki`.
    pub dir: PathBuf,
    /// The signing cluster CA certificate (the one of `ca.crt` matching `ca.key`), PEM.
    pub ca_cert_pem: String,
    /// CA certificates trusted for client certificates, PEM: every CA certificate of
    /// `ca.crt` not expired at start.
    pub ca_bundle_pem: String,
    /// Serving certificate, PEM.
    pub serving_cert_pem: String,
    /// Serving key, PKCS#8 PEM. Secret.
    pub serving_key_pem: String,
    /// Service-account signing key, PKCS#8 PEM. Secret.
    pub sa_key_pem: String,
    /// Service-account verification key, SubjectPublicKeyInfo PEM.
    pub sa_pub_pem: String,
    ca: Ca,
}

impl fmt::Debug for Pki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pki").field("dir", &self.dir).field("ca", &self.ca).finish_non_exhaustive()
    }
}

impl Pki {
    /// The cluster CA (certificate and key), e.g. to sign CSRs.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The cluster CA key, PKCS#8 PEM. Secret: never log it.
    pub fn ca_key_pem(&self) -> String {
        self.ca.key_pem()
    }

    /// The client CA bundle as DER certificates.
    pub fn ca_bundle_der(&self) -> anyhow::Result<Vec<Vec<u8>>> {
        kustos_ca::certificates_from_pem(&self.ca_bundle_pem).context("parsing the client CA bundle")
    }
}

/// Create (first start) or load and check (later starts) `dir/pki/`.
pub fn ensure(dir: &Path, tls_sans: &[String], now: DateTime<Utc>) -> anyhow::Result<Pki> {
    let pki_dir = dir.join("pki");
    ensure_private_dir(&pki_dir)?;
    let bundle = ensure_ca(&pki_dir, now)?;
    let ca = bundle.signer().clone();
    let (serving_cert_pem, serving_key_pem) = ensure_serving(&pki_dir, &ca, tls_sans, now)?;
    let (sa_key_pem, sa_pub_pem) = ensure_sa(&pki_dir)?;
    Ok(Pki {
        dir: pki_dir,
        ca_cert_pem: ca.cert_pem().to_string(),
        ca_bundle_pem: bundle.trust_bundle_pem(now),
        serving_cert_pem,
        serving_key_pem,
        sa_key_pem,
        sa_pub_pem,
        ca,
    })
}

fn ensure_private_dir(path: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", path.display());
    }
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting the permissions of {}", path.display()))?;
    }
    Ok(())
}

/// Contents of `path`, or `None` when it does not exist.
fn read_optional(path: &Path) -> anyhow::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Write `contents` to `path` atomically, the new file created with `mode`.
fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", tmp.display())),
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(contents).and_then(|()| f.sync_all()).with_context(|| format!("writing {}", tmp.display()))?;
    drop(f);
    fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    if let Some(parent) = path.parent() {
        // Make the rename durable; not all filesystems allow syncing a directory.
        let _ = fs::File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    write_atomic(path, contents.as_bytes(), 0o600)
}

fn write_public(path: &Path, contents: &str) -> anyhow::Result<()> {
    write_atomic(path, contents.as_bytes(), 0o644)
}

/// Existing key files readable by others are restricted to 0600.
fn restrict_key_file(path: &Path) -> anyhow::Result<()> {
    let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(file = %path.display(), "private key file was readable by others; restricting it to 0600");
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting the permissions of {}", path.display()))?;
    }
    Ok(())
}

fn ensure_ca(pki_dir: &Path, now: DateTime<Utc>) -> anyhow::Result<SignerBundle> {
    let cert_path = pki_dir.join("ca.crt");
    let key_path = pki_dir.join("ca.key");
    let ca = match (read_optional(&cert_path)?, read_optional(&key_path)?) {
        (Some(cert), Some(key)) => {
            restrict_key_file(&key_path)?;
            kustos_ca::certificates_from_pem(&cert)
                .with_context(|| format!("{} is not a valid certificate", cert_path.display()))?;
            KeyPair::from_pem(&key).with_context(|| format!("{} is not a valid private key", key_path.display()))?;
            SignerBundle::from_pem(&cert, &key).with_context(|| {
                format!("loading the cluster CA from {} and {}", cert_path.display(), key_path.display())
            })?
        }
        (None, None) => {
            let ca = Ca::generate(CA_COMMON_NAME, CA_VALIDITY, now).context("generating the cluster CA")?;
            write_private(&key_path, &ca.key_pem())?;
            write_public(&cert_path, ca.cert_pem())?;
            tracing::info!(dir = %pki_dir.display(), not_after = %ca.not_after(), "created the cluster CA");
            SignerBundle::single(ca)
        }
        (Some(_), None) => bail!(
            "{} exists but {} is missing: restore the CA key, or remove both to create a new CA",
            cert_path.display(),
            key_path.display()
        ),
        (None, Some(_)) => bail!(
            "{} exists but {} is missing: restore the CA certificate, or remove both to create a new CA",
            key_path.display(),
            cert_path.display()
        ),
    };
    let signer = ca.signer();
    if signer.not_after() <= now {
        bail!("the cluster CA in {} expired at {}", cert_path.display(), signer.not_after());
    }
    if signer.not_after() - now < RENEW_BEFORE {
        tracing::warn!(not_after = %signer.not_after(), "the cluster CA expires within 30 days");
    }
    Ok(ca)
}

/// The SANs the serving certificate must carry.
pub fn serving_sans(tls_sans: &[String]) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns: Vec<String> = vec!["localhost".into()];
    let hostname = gethostname::gethostname().to_string_lossy().trim().to_ascii_lowercase();
    if is_dns_name(&hostname) {
        dns.push(hostname);
    }
    for d in ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"] {
        dns.push(d.into());
    }
    let mut ips: Vec<IpAddr> = vec![IpAddr::from(Ipv4Addr::LOCALHOST), IpAddr::from(Ipv6Addr::LOCALHOST)];
    for san in tls_sans {
        let san = san.trim();
        if san.is_empty() {
            continue;
        }
        match san.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => dns.push(san.to_ascii_lowercase()),
        }
    }
    let mut seen = BTreeSet::new();
    dns.retain(|d| seen.insert(d.clone()));
    let mut seen = BTreeSet::new();
    ips.retain(|ip| seen.insert(*ip));
    (dns, ips)
}

fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Why an existing leaf certificate cannot be reused, or `None` when it can.
fn reuse_problem(ca: &Ca, cert_pem: &str, key_pem: &str, now: DateTime<Utc>) -> Option<String> {
    let info = match kustos_ca::parse_certificate_pem(cert_pem) {
        Ok(i) => i,
        Err(e) => return Some(format!("the certificate does not parse: {e}")),
    };
    let key = match KeyPair::from_pem(key_pem) {
        Ok(k) => k,
        Err(e) => return Some(format!("the key does not load: {e}")),
    };
    if key.public_key_der() != info.public_key_der {
        return Some("the key does not belong to the certificate".into());
    }
    let der = kustos_ca::certificates_from_pem(cert_pem).ok().and_then(|c| c.into_iter().next()).unwrap_or_default();
    if !ca.signed(&der) {
        return Some("the certificate is not signed by the current CA".into());
    }
    if !info.valid_at(now) || info.not_after - now < RENEW_BEFORE {
        return Some(format!("the certificate expires at {}", info.not_after));
    }
    None
}

fn ensure_serving(
    pki_dir: &Path,
    ca: &Ca,
    tls_sans: &[String],
    now: DateTime<Utc>,
) -> anyhow::Result<(String, String)> {
    let cert_path = pki_dir.join("apiserver.crt");
    let key_path = pki_dir.join("apiserver.key");
    let (dns, ips) = serving_sans(tls_sans);
    let reason = match (read_optional(&cert_path)?, read_optional(&key_path)?) {
        (Some(cert), Some(key)) => {
            let problem = reuse_problem(ca, &cert, &key, now).or_else(|| {
                let info = kustos_ca::parse_certificate_pem(&cert).ok()?;
                let have_dns: BTreeSet<&String> = info.dns_names.iter().collect();
                let have_ips: BTreeSet<&IpAddr> = info.ip_addresses.iter().collect();
                let same = have_dns == dns.iter().collect() && have_ips == ips.iter().collect();
                (!same).then(|| "the requested subject alternative names changed".to_string())
            });
            match problem {
                None => {
                    restrict_key_file(&key_path)?;
                    // Normalized to PKCS#8 for the TLS layer.
                    let key = KeyPair::from_pem(&key).with_context(|| format!("loading {}", key_path.display()))?;
                    return Ok((cert, key.private_key_pem()));
                }
                Some(p) => p,
            }
        }
        (None, None) => "first start".to_string(),
        _ => "the certificate or its key is missing".to_string(),
    };
    let issued = ca
        .issue(IssueParams::server(SERVING_COMMON_NAME, dns.clone(), ips.clone(), CERT_VALIDITY), now)
        .context("issuing the serving certificate")?;
    let key_pem = issued.key_pem.clone().unwrap_or_default();
    write_private(&key_path, &key_pem)?;
    write_public(&cert_path, &issued.cert_pem)?;
    tracing::info!(
        file = %cert_path.display(),
        reason = %reason,
        dns = ?dns,
        ips = ?ips,
        not_after = %issued.not_after,
        "issued the serving certificate"
    );
    Ok((issued.cert_pem, key_pem))
}

/// `DIR/pki/sa.key` and `sa.pub`, created when absent (what `kustos sa-signer` needs of a
/// data directory).
pub fn ensure_sa_keys(dir: &Path) -> anyhow::Result<()> {
    let pki_dir = dir.join("pki");
    ensure_private_dir(&pki_dir)?;
    ensure_sa(&pki_dir).map(|_| ())
}

fn ensure_sa(pki_dir: &Path) -> anyhow::Result<(String, String)> {
    let key_path = pki_dir.join("sa.key");
    let pub_path = pki_dir.join("sa.pub");
    match read_optional(&key_path)? {
        Some(key_pem) => {
            restrict_key_file(&key_path)?;
            let key = KeyPair::from_pem(&key_pem).with_context(|| {
                format!("{} is not a valid private key (it is never replaced automatically)", key_path.display())
            })?;
            let pub_pem = key.public_key_pem();
            let current = read_optional(&pub_path)?;
            let matches = current
                .as_deref()
                .and_then(|p| kustos_ca::public_key_der_from_pem(p).ok())
                .is_some_and(|der| der == key.public_key_der());
            if !matches {
                if current.is_some() {
                    tracing::warn!(file = %pub_path.display(), "does not match sa.key; rewriting it from sa.key");
                }
                write_public(&pub_path, &pub_pem)?;
            }
            Ok((key.private_key_pem(), pub_pem))
        }
        None => {
            if read_optional(&pub_path)?.is_some() {
                tracing::warn!(file = %pub_path.display(), "sa.key is missing; generating a new service-account key pair");
            }
            let pair = kustos_ca::generate_sa_keypair().context("generating the service-account key")?;
            write_private(&key_path, &pair.private_key_pem)?;
            write_public(&pub_path, &pair.public_key_pem)?;
            tracing::info!(file = %key_path.display(), "created the service-account signing key");
            Ok((pair.private_key_pem, pair.public_key_pem))
        }
    }
}

/// How a kubeconfig user authenticates.
#[derive(Clone, PartialEq, Eq)]
pub enum KubeconfigAuth {
    /// x509 client certificate and key, PEM.
    ClientCert { cert_pem: String, key_pem: String },
    /// Bearer token.
    Token(String),
}

impl fmt::Debug for KubeconfigAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeconfigAuth::ClientCert { .. } => f.write_str("ClientCert"),
            KubeconfigAuth::Token(_) => f.write_str("Token"),
        }
    }
}

/// A YAML double-quoted scalar.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// A kubeconfig with one cluster (`kustos`: `server`, CA data), one user (`user`) and one
/// context (`kustos`, current), usable as is by kubectl, client-go, kube-rs and the Python
/// client.
pub fn kubeconfig_yaml(server: &str, ca_pem: &str, user: &str, auth: KubeconfigAuth) -> String {
    let user_fields = match &auth {
        KubeconfigAuth::ClientCert { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            quote(&b64(cert_pem)),
            quote(&b64(key_pem))
        ),
        KubeconfigAuth::Token(token) => format!("    token: {}\n", quote(token)),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n{user_fields}contexts:\n- name: {cluster}\n  \
         context:\n    cluster: {cluster}\n    user: {user}\ncurrent-context: {cluster}\npreferences: {{}}\n",
        cluster = quote(CLUSTER_NAME),
        server = quote(server),
        ca = quote(&b64(ca_pem)),
        user = quote(user),
    )
}

/// What an existing admin kubeconfig holds.
struct ExistingKubeconfig {
    server: String,
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn read_admin_kubeconfig(text: &str) -> Option<ExistingKubeconfig> {
    let v = crate::wire::yaml::from_slice(text.as_bytes()).ok()?.value;
    let decode = |v: &serde_json::Value| -> Option<String> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str()?.trim()).ok()?;
        String::from_utf8(bytes).ok()
    };
    let cluster =
        v.get("clusters")?.as_array()?.iter().find(|c| c.get("name").and_then(|n| n.as_str()) == Some(CLUSTER_NAME))?;
    let user =
        v.get("users")?.as_array()?.iter().find(|u| u.get("name").and_then(|n| n.as_str()) == Some(ADMIN_USER))?;
    Some(ExistingKubeconfig {
        server: cluster.get("cluster")?.get("server")?.as_str()?.to_string(),
        ca_pem: decode(cluster.get("cluster")?.get("certificate-authority-data")?)?,
        cert_pem: decode(user.get("user")?.get("client-certificate-data")?)?,
        key_pem: decode(user.get("user")?.get("client-key-data")?)?,
    })
}

/// Write (or keep) `dir/admin.kubeconfig` for `server_url`: user `kustos-admin` in group
/// `system:masters`, trusting the CA bundle. The client certificate is reused while it is signed by the current CA
/// and valid for more than 30 days; otherwise a new one (1 year) is issued.
pub fn write_admin_kubeconfig(dir: &Path, pki: &Pki, server_url: &str, now: DateTime<Utc>) -> anyhow::Result<PathBuf> {
    let path = dir.join("admin.kubeconfig");
    let existing = match read_optional(&path)? {
        Some(text) => {
            let parsed = read_admin_kubeconfig(&text);
            if parsed.is_none() {
                tracing::warn!(file = %path.display(), "unreadable admin kubeconfig; writing a new one");
            }
            parsed
        }
        None => None,
    };
    let reusable = existing.as_ref().filter(|e| {
        let admin_subject = kustos_ca::parse_certificate_pem(&e.cert_pem).is_ok_and(|i| {
            i.common_name == ADMIN_USER && i.organizations.iter().any(|o| o == crate::authn::user::MASTERS_GROUP)
        });
        admin_subject && reuse_problem(&pki.ca, &e.cert_pem, &e.key_pem, now).is_none()
    });
    let (cert_pem, key_pem) = match reusable {
        Some(e) => {
            if e.server == server_url && e.ca_pem == pki.ca_bundle_pem {
                restrict_key_file(&path)?;
                return Ok(path);
            }
            (e.cert_pem.clone(), e.key_pem.clone())
        }
        None => {
            let issued = pki
                .ca
                .issue(
                    IssueParams::client(ADMIN_USER, vec![crate::authn::user::MASTERS_GROUP.to_string()], CERT_VALIDITY),
                    now,
                )
                .context("issuing the admin client certificate")?;
            tracing::info!(file = %path.display(), not_after = %issued.not_after, "issued the admin client certificate");
            (issued.cert_pem, issued.key_pem.unwrap_or_default())
        }
    };
    let yaml =
        kubeconfig_yaml(server_url, &pki.ca_bundle_pem, ADMIN_USER, KubeconfigAuth::ClientCert { cert_pem, key_pem });
    write_private(&path, &yaml)?;
    Ok(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
