//! Structured authentication configuration (`--authentication-config FILE`): the
//! `AuthenticationConfiguration` of `apiserver.config.k8s.io/v1` with its `jwt`
//! authenticators and its `anonymous` section, as kube-apiserver reads it.
//!
//! What enters: the file (read at start, then polled for changes) and bearer tokens. What
//! leaves: the [`AuthenticationConfig`] token authenticator the chain asks after the
//! service-account and bootstrap tokens (a token of no configured issuer is not its
//! business), the anonymous decision for a path, and the metrics.
//!
//! A changed file is decoded, validated and compiled ([`types`], [`validate`], [`cel`]); if
//! it is good, new authenticators replace the old ones at once (their keys are fetched by
//! [`keys`]); if not, the last good configuration stays, one line is logged and the reload
//! metrics count a failure. The `anonymous` section is read at start only (as upstream, a
//! change to it needs a restart; a reload that changes it is refused).

pub mod authenticator;
pub mod cel;
pub mod jwt;
pub mod keys;
pub mod metrics;
pub mod types;
pub mod validate;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::Utc;

use crate::authn::{TokenAuthenticator, TokenResult};
use authenticator::JwtAuthenticator;
use keys::KeySource;
use metrics::Metrics;
use types::AnonymousAuthConfig;

/// How often the file is read for changes unless told otherwise.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(60);

/// A loaded configuration: its bytes, its authenticators and its anonymous section.
struct Loaded {
    data: Vec<u8>,
    jwt: Vec<Arc<JwtAuthenticator>>,
    anonymous: Option<AnonymousAuthConfig>,
}

/// Parse, validate and compile a file's content; the error is one line.
fn build(data: &[u8], disallowed_issuers: &[String], metrics: &Arc<Metrics>) -> Result<Loaded, String> {
    let cfg = types::decode(data)?;
    let compiled = validate::validate(&cfg, disallowed_issuers).map_err(|e| validate::join(&e))?;
    let mut jwt = Vec::new();
    for c in compiled {
        let keys = KeySource::new(c.issuer.clone(), metrics.clone())?;
        jwt.push(Arc::new(JwtAuthenticator::new(c, keys, metrics.clone())));
    }
    Ok(Loaded { data: data.to_vec(), jwt, anonymous: cfg.anonymous })
}

/// The configuration in force, its file, and the metrics.
pub struct AuthenticationConfig {
    path: PathBuf,
    disallowed_issuers: Vec<String>,
    current: RwLock<Arc<Loaded>>,
    /// The APIs' audiences: a token is only this authenticator's for them (upstream wraps
    /// the JWT authenticators audience-agnostic).
    api_audiences: Vec<String>,
    pub metrics: Arc<Metrics>,
    /// Where the key-refresh jobs of the issuers run.
    tasks: crate::tasks::Tasks,
}

impl std::fmt::Debug for AuthenticationConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticationConfig").field("path", &self.path).finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).map_err(|e| format!("failed to read file at {}: {e}", path.display()))?;
    let mut data = Vec::new();
    f.take(types::MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("failed to read file at {}: {e}", path.display()))?;
    Ok(data)
}

impl AuthenticationConfig {
    /// Load `path` at start (an error is one line, for a refusal to start) and start fetching
    /// the issuers' keys. `anonymous_flag_set`: `--anonymous-auth` was given explicitly.
    pub fn load(
        path: &Path,
        disallowed_issuers: Vec<String>,
        api_audiences: Vec<String>,
        anonymous_flag_set: bool,
        apiserver_id: &str,
        tasks: &crate::tasks::Tasks,
    ) -> anyhow::Result<Arc<Self>> {
        let metrics = Arc::new(Metrics::new(apiserver_id));
        let bad = |e: String| anyhow::anyhow!("invalid authentication config: {e}");
        let data = read(path).map_err(bad)?;
        let loaded = build(&data, &disallowed_issuers, &metrics).map_err(bad)?;
        if loaded.anonymous.is_some() && anonymous_flag_set {
            return Err(bad("anonymous: Forbidden: --anonymous-auth flag cannot be set when anonymous field is configured in authentication configuration file".into()));
        }
        loaded.jwt.iter().for_each(|a| a.keys.spawn(tasks));
        metrics.config_applied(&data);
        Ok(Arc::new(AuthenticationConfig {
            path: path.to_path_buf(),
            disallowed_issuers,
            current: RwLock::new(Arc::new(loaded)),
            api_audiences,
            metrics,
            tasks: tasks.clone(),
        }))
    }

    fn current(&self) -> Arc<Loaded> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The file's `anonymous` section, if it has one (then it decides over `--anonymous-auth`).
    pub fn anonymous(&self) -> Option<AnonymousAuthConfig> {
        self.current().anonymous.clone()
    }

    /// Read the file again; apply it when it changed and is good. `None`: unchanged.
    pub fn reload(&self) -> Option<Result<(), String>> {
        let current = self.current();
        let result = read(&self.path).and_then(|data| {
            if data == current.data {
                return Err(String::new());
            }
            let loaded = build(&data, &self.disallowed_issuers, &self.metrics)?;
            if loaded.anonymous != current.anonymous {
                return Err("anonymous: the anonymous section cannot change while serving (restart to apply it)".into());
            }
            Ok(loaded)
        });
        match result {
            Err(e) if e.is_empty() => None,
            Err(e) => {
                self.metrics.reloaded(None);
                Some(Err(e))
            }
            Ok(loaded) => {
                loaded.jwt.iter().for_each(|a| a.keys.spawn(&self.tasks));
                self.metrics.reloaded(Some(&loaded.data));
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
                Some(Ok(()))
            }
        }
    }

    /// Poll the file every `interval` for as long as the configuration is in use (a weak
    /// hold: the loop ends when the server is dropped).
    pub async fn follow(config: std::sync::Weak<Self>, interval: Duration) {
        loop {
            tokio::time::sleep(interval).await;
            let Some(this) = config.upgrade() else { return };
            match this.reload() {
                None => {}
                Some(Ok(())) => {
                    tracing::info!(path = %this.path.display(), "loaded a new authentication configuration")
                }
                Some(Err(e)) => tracing::error!(
                    path = %this.path.display(),
                    error = %e,
                    "the new authentication configuration is not valid; the last good one stays in force"
                ),
            }
        }
    }
}

/// Whether the anonymous section lets a request for `path` through as anonymous.
pub fn anonymous_allows(anon: &AnonymousAuthConfig, path: &str) -> bool {
    anon.enabled && (anon.conditions.is_empty() || anon.conditions.iter().any(|c| c.path == path))
}

#[async_trait::async_trait]
impl TokenAuthenticator for AuthenticationConfig {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        // Audience-agnostic, as upstream: the token is for this apiserver's audiences only.
        if !audiences.is_empty() && !audiences.iter().any(|a| self.api_audiences.contains(a)) {
            return TokenResult::NotMine;
        }
        let current = self.current();
        let now = Utc::now();
        for a in &current.jwt {
            match a.authenticate(token, now).await {
                TokenResult::NotMine => continue,
                TokenResult::Authenticated { user, .. } => {
                    let audiences = self.api_audiences.clone();
                    return TokenResult::Authenticated { user, audiences };
                }
                invalid => return invalid,
            }
        }
        TokenResult::NotMine
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use types::AnonymousAuthCondition;

    #[test]
    fn anonymous_conditions() {
        let on = |paths: &[&str]| AnonymousAuthConfig {
            enabled: true,
            conditions: paths.iter().map(|p| AnonymousAuthCondition { path: p.to_string() }).collect(),
        };
        let cases: Vec<(AnonymousAuthConfig, &str, bool)> = vec![
            (on(&[]), "/api", true),
            (on(&["/livez", "/readyz"]), "/livez", true),
            (on(&["/livez", "/readyz"]), "/readyz", true),
            (on(&["/livez", "/readyz"]), "/livez/ping", false),
            (on(&["/livez"]), "/api", false),
            (AnonymousAuthConfig { enabled: false, conditions: vec![] }, "/livez", false),
        ];
        for (cfg, path, want) in cases {
            assert_eq!(anonymous_allows(&cfg, path), want, "{cfg:?} {path}");
        }
    }
}
