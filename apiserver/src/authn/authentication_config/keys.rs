//! An issuer's signing keys: OIDC discovery (`{url}/.well-known/openid-configuration`, or
//! `discoveryURL`), then its `jwks_uri`, fetched over TLS (trusting `certificateAuthority`,
//! else the system's roots), and fetched again when a token names an unknown key (at most
//! once per [`MIN_REFRESH`]) and every [`PERIOD`].
//!
//! What enters: the issuer's settings. What leaves: the current keys (none until the first
//! fetch succeeded) and fetch results for the metrics. Documents are bounded in size and
//! time ([`MAX_DOCUMENT_BYTES`], [`TIMEOUT`]).

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use super::jwt::{self, Jwk};
use super::metrics::Metrics;
use super::types::Issuer;

pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Least time between two fetches asked for by unknown key ids.
pub const MIN_REFRESH: Duration = Duration::from_secs(10);
/// How often the keys are fetched again anyway.
pub const PERIOD: Duration = Duration::from_secs(600);

/// The keys of one issuer.
pub struct KeySource {
    issuer: Issuer,
    client: reqwest::Client,
    keys: RwLock<Option<Arc<Vec<Jwk>>>>,
    last_attempt: Mutex<Option<Instant>>,
    fetching: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySource").field("issuer", &self.issuer.url).finish_non_exhaustive()
    }
}

fn tls_client(ca_pem: &str) -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    if ca_pem.is_empty() {
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
    } else {
        let certs = kustos_ca::certificates_from_pem(ca_pem).map_err(|e| format!("certificateAuthority: {e}"))?;
        for der in certs {
            roots.add(der.into()).map_err(|e| format!("certificateAuthority: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(TIMEOUT)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
        .map_err(|e| e.to_string())
}

async fn get(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut resp = client.get(url).send().await.map_err(|e| format!("Get {url:?}: {}", error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(format!("Get {url:?}: {}", resp.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("Get {url:?}: {e}"))? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("Get {url:?}: the document is larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The discovery document's `jwks_uri`; its `issuer` must be the configured URL.
pub fn jwks_uri(doc: &[u8], issuer_url: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_slice(doc).map_err(|e| format!("failed to decode provider discovery object: {e}"))?;
    let issuer = v.get("issuer").and_then(|i| i.as_str()).unwrap_or_default();
    if issuer != issuer_url {
        return Err(format!("oidc: issuer URL provided to client ({issuer_url:?}) did not match the issuer URL returned by provider ({issuer:?})"));
    }
    let uri = v.get("jwks_uri").and_then(|i| i.as_str()).unwrap_or_default();
    if !uri.starts_with("https://") {
        return Err(format!("the discovery document's jwks_uri {uri:?} is not an https URL"));
    }
    Ok(uri.to_string())
}

impl KeySource {
    pub fn new(issuer: Issuer, metrics: Arc<Metrics>) -> Result<Arc<Self>, String> {
        let client = tls_client(&issuer.certificate_authority)?;
        Ok(Arc::new(KeySource {
            issuer,
            client,
            keys: RwLock::new(None),
            last_attempt: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            metrics,
        }))
    }

    fn discovery_url(&self) -> String {
        match self.issuer.discovery_url.as_str() {
            "" => format!("{}/.well-known/openid-configuration", self.issuer.url.trim_end_matches('/')),
            d => d.to_string(),
        }
    }

    /// The keys, if fetched.
    pub fn keys(&self) -> Option<Arc<Vec<Jwk>>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fetch discovery and keys now; keep the old keys on failure.
    pub async fn fetch(&self) -> Result<(), String> {
        let _one = self.fetching.lock().await;
        *self.last_attempt.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let result = async {
            let doc = get(&self.client, &self.discovery_url()).await?;
            let uri = jwks_uri(&doc, &self.issuer.url)?;
            let set = get(&self.client, &uri).await?;
            let keys = jwt::parse_jwks(&set)?;
            Ok::<_, String>((keys, set))
        }
        .await;
        match result {
            Ok((keys, raw)) => {
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(keys));
                self.metrics.jwks_fetched(&self.issuer.url, Some(&raw));
                Ok(())
            }
            Err(e) => {
                self.metrics.jwks_fetched(&self.issuer.url, None);
                Err(e)
            }
        }
    }

    /// Fetch again for an unknown key id, unless a fetch was tried within [`MIN_REFRESH`].
    /// Whether a fetch succeeded.
    pub async fn refresh(&self) -> bool {
        let recent =
            self.last_attempt.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|t| t.elapsed() < MIN_REFRESH);
        if recent {
            return false;
        }
        match self.fetch().await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(issuer = %self.issuer.url, error = %e, "fetching the issuer's keys failed");
                false
            }
        }
    }

    /// Keep the keys fresh while the source lives, as a job of `tasks` (it ends when a reload
    /// replaces the source, and at shutdown): retry the first fetch with a growing pause (1 s
    /// up to 30 s), then fetch every [`PERIOD`].
    pub fn spawn(self: &Arc<Self>, tasks: &crate::tasks::Tasks) {
        let weak: Weak<Self> = Arc::downgrade(self);
        tasks.spawn_job("jwt-issuer-keys", async move {
            let mut pause = Duration::from_secs(1);
            loop {
                let Some(source) = weak.upgrade() else { return Ok(()) };
                let ok = source.keys().is_some();
                let result = source.fetch().await;
                let url = source.issuer.url.clone();
                drop(source);
                let wait = match (result, ok) {
                    (Ok(()), _) => PERIOD,
                    (Err(e), had_keys) => {
                        tracing::warn!(issuer = %url, error = %e, "fetching the issuer's keys failed");
                        if had_keys {
                            PERIOD
                        } else {
                            pause = (pause * 2).min(Duration::from_secs(30));
                            pause
                        }
                    }
                };
                tokio::time::sleep(wait).await;
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn discovery_documents() {
        let url = "https://issuer.example";
        let cases: Vec<(&str, Result<&str, &str>)> = vec![
            (
                r#"{"issuer":"https://issuer.example","jwks_uri":"https://keys.example/jwks"}"#,
                Ok("https://keys.example/jwks"),
            ),
            (
                r#"{"issuer":"https://other.example","jwks_uri":"https://keys.example/jwks"}"#,
                Err("did not match the issuer URL"),
            ),
            (
                r#"{"issuer":"https://issuer.example","jwks_uri":"http://keys.example/jwks"}"#,
                Err("is not an https URL"),
            ),
            (r#"{"issuer":"https://issuer.example"}"#, Err("is not an https URL")),
            ("not json", Err("failed to decode provider discovery object")),
        ];
        for (doc, want) in cases {
            match (jwks_uri(doc.as_bytes(), url), want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w),
                (Err(e), Err(w)) => assert!(e.contains(w), "{doc}: {e}"),
                (got, want) => panic!("{doc}: got {got:?}, want {want:?}"),
            }
        }
    }
}
