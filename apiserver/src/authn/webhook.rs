//! Webhook token authentication, as kube-apiserver's
//! `--authentication-token-webhook-config-file`: a bearer token nobody else recognised is
//! sent to a remote service in a `TokenReview`, whose answer says who the token belongs to.
//!
//! In: a bearer token and the audiences it must be good for (the apiserver's
//! `--api-audiences` on requests; a TokenReview's `spec.audiences`). Out: a
//! [`TokenResult`]. On the way, as upstream:
//!
//! - the review is POSTed to the kubeconfig's server URL ([`kubeconfig`]) as
//!   `authentication.k8s.io/<version>` (`--authentication-token-webhook-version`, `v1beta1`
//!   by default), with `spec.token` and `spec.audiences`; the answer must be a `TokenReview`
//!   of that version (read up to [`MAX_ANSWER`] bytes);
//! - `status.authenticated: true` is the user `status.user` (username, uid, groups, extra),
//!   if the audiences match: the intersection of the wanted audiences with
//!   `status.audiences`, or with the apiserver's own when the webhook names none; an empty
//!   intersection, or `authenticated: false`, authenticates nobody (401 if no other
//!   authenticator takes the token), `status.error` being the reason;
//! - an attempt that fails with a connection reset, a 429, 500 or 504, or a `Retry-After`,
//!   is retried with upstream's backoff (0.5 s, ×1.5, 5 attempts), the whole review bounded
//!   by [`REQUEST_TIMEOUT`]; a review that cannot be made is an error (401), never a user;
//! - answers, authenticated or not, are remembered for `--authentication-token-webhook-cache-ttl`
//!   (2 m; upstream uses the same TTL both ways) under a salted hash of the token and the
//!   audiences ([`super::token_cache`]); errors, and refusals giving a `status.error`, are not.
//!
//! Tokens never reach a log or an error message.

pub mod client;
pub mod kubeconfig;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use serde::Deserialize;

use super::token_cache::{TokenKeys, TtlCache, DEFAULT_MAX_ENTRIES};
use super::{TokenAuthenticator, TokenResult, UserInfo};

/// `--authentication-token-webhook-version`'s default, as upstream.
pub const DEFAULT_VERSION: &str = "v1beta1";
/// `--authentication-token-webhook-cache-ttl`'s default, as upstream.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(120);
/// How long one review may take, retries included (upstream's webhook client timeout).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read from the webhook.
pub const MAX_ANSWER: usize = 1 << 20;
/// Upstream's retry backoff: first delay, factor, attempts.
const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
const BACKOFF_FACTOR: f64 = 1.5;
const BACKOFF_STEPS: u32 = 5;

/// The three flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `--authentication-token-webhook-config-file`.
    pub config_file: PathBuf,
    /// `--authentication-token-webhook-version`.
    pub version: String,
    /// `--authentication-token-webhook-cache-ttl`.
    pub cache_ttl: Duration,
}

/// The TokenReview version spoken with the webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V1beta1,
}

impl Version {
    /// Upstream's check and message.
    pub fn parse(s: &str) -> Result<Version, String> {
        match s {
            "v1" => Ok(Version::V1),
            "v1beta1" => Ok(Version::V1beta1),
            other => Err(format!(
                "unsupported authentication webhook version {other:?}, supported versions are \"v1\", \"v1beta1\""
            )),
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Version::V1 => "authentication.k8s.io/v1",
            Version::V1beta1 => "authentication.k8s.io/v1beta1",
        }
    }
}

/// The review sent: what upstream's client writes for a `TokenReview` with only a spec.
pub fn review_body(version: Version, token: &str, audiences: &[String]) -> Vec<u8> {
    let mut spec = serde_json::json!({ "token": token });
    if !audiences.is_empty() {
        spec["audiences"] = serde_json::json!(audiences);
    }
    let review = serde_json::json!({
        "kind": "TokenReview",
        "apiVersion": version.api_version(),
        "metadata": { "creationTimestamp": null },
        "spec": spec,
        "status": { "user": {} },
    });
    serde_json::to_vec(&review).unwrap_or_default()
}

/// The parts of the answer that are read (v1 and v1beta1 have the same status).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerEnvelope {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    status: Option<TokenReviewStatus>,
}

/// The status of the webhook's answer, or why there is none (`code` is the HTTP status).
pub fn read_answer(version: Version, code: u16, body: &[u8]) -> Result<TokenReviewStatus, String> {
    if !(200..300).contains(&code) {
        let detail = String::from_utf8_lossy(&body[..body.len().min(256)]).replace(['\n', '\r'], " ");
        return Err(format!("the webhook answered HTTP {code}: {}", detail.trim()));
    }
    let envelope: AnswerEnvelope =
        serde_json::from_slice(body).map_err(|e| format!("the webhook's answer is not a TokenReview: {e}"))?;
    if let Some(v) = envelope.api_version.filter(|v| !v.is_empty()) {
        if v != version.api_version() {
            return Err(format!("the webhook answered {v}, not {}", version.api_version()));
        }
    }
    if let Some(k) = envelope.kind.filter(|k| !k.is_empty()) {
        if k != "TokenReview" {
            return Err(format!("the webhook answered a {k}, not a TokenReview"));
        }
    }
    Ok(envelope.status.unwrap_or_default())
}

/// The user of an authenticated TokenReview status (`None`: not authenticated). Shared with
/// the controller-manager's delegated TokenReview.
pub fn reviewed_user(status: &TokenReviewStatus) -> Option<UserInfo> {
    if status.authenticated != Some(true) {
        return None;
    }
    let u = status.user.clone().unwrap_or_default();
    Some(UserInfo {
        name: u.username.unwrap_or_default(),
        uid: u.uid.unwrap_or_default(),
        groups: u.groups.unwrap_or_default(),
        extra: u.extra.unwrap_or_default().into_iter().collect(),
    })
}

/// What an answer means for the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The user, and the audiences the token is good for among the wanted ones.
    Authenticated(UserInfo, Vec<String>),
    /// Not authenticated, without a reason (remembered).
    Unauthenticated,
    /// Not authenticated, with the webhook's `status.error` (not remembered, as upstream
    /// treats it as an error).
    Refused(String),
}

/// Upstream's decision on an answer. `wanted`: the audiences asked for (empty: no audience
/// check); `implicit`: the apiserver's own, which an answer naming none is taken to mean.
pub fn decide(status: &TokenReviewStatus, wanted: &[String], implicit: &[String]) -> Outcome {
    let mut audiences = Vec::new();
    if !wanted.is_empty() {
        let got = status.audiences.as_deref().filter(|a| !a.is_empty()).unwrap_or(implicit);
        audiences = wanted.iter().filter(|w| got.contains(w)).cloned().collect();
        if audiences.is_empty() {
            return Outcome::Unauthenticated;
        }
    }
    match reviewed_user(status) {
        Some(user) => Outcome::Authenticated(user, audiences),
        None => match status.error.as_deref().filter(|e| !e.is_empty()) {
            Some(e) => Outcome::Refused(e.to_string()),
            None => Outcome::Unauthenticated,
        },
    }
}

/// Whether an attempt's HTTP answer is retried (upstream's `DefaultShouldRetry`).
fn retried(code: u16, retry_after: bool) -> bool {
    matches!(code, 429 | 500 | 504) || (retry_after && code >= 400)
}

/// The delay before attempt `n + 1` (n from 1), with up to 20% jitter.
fn backoff(n: u32) -> Duration {
    let base = BACKOFF_INITIAL.as_secs_f64() * BACKOFF_FACTOR.powi(n.saturating_sub(1) as i32);
    Duration::from_secs_f64(base * (1.0 + 0.2 * rand::random::<f64>()))
}

/// The authenticator (see the module docs).
pub struct WebhookAuthenticator {
    target: kubeconfig::Target,
    version: Version,
    ttl: Duration,
    /// The apiserver's audiences (`--api-audiences`).
    implicit_audiences: Vec<String>,
    keys: TokenKeys,
    cache: TtlCache<[u8; 32], Outcome>,
    timeout: Duration,
}

impl std::fmt::Debug for WebhookAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookAuthenticator")
            .field("target", &self.target)
            .field("version", &self.version)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl WebhookAuthenticator {
    /// Read the flags' file and version; an error names the flag.
    pub fn load(settings: &Settings) -> anyhow::Result<Self> {
        let version = Version::parse(&settings.version)
            .map_err(|e| anyhow::anyhow!("--authentication-token-webhook-version: {e}"))?;
        let target = kubeconfig::load(&settings.config_file).map_err(|e| {
            anyhow::anyhow!("--authentication-token-webhook-config-file {}: {e}", settings.config_file.display())
        })?;
        Ok(Self::new(target, version, settings.cache_ttl))
    }

    pub fn new(target: kubeconfig::Target, version: Version, ttl: Duration) -> Self {
        WebhookAuthenticator {
            target,
            version,
            ttl,
            implicit_audiences: Vec::new(),
            keys: TokenKeys::new(),
            cache: TtlCache::new(DEFAULT_MAX_ENTRIES),
            timeout: REQUEST_TIMEOUT,
        }
    }

    /// The apiserver's own audiences, which an answer without `status.audiences` means.
    pub fn with_implicit_audiences(mut self, audiences: Vec<String>) -> Self {
        self.implicit_audiences = audiences;
        self
    }

    /// Bound a whole review by `timeout` instead of [`REQUEST_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Ask the webhook, retrying as upstream, within the timeout.
    async fn review(&self, token: &str, audiences: &[String]) -> Result<TokenReviewStatus, String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let body = review_body(self.version, token, audiences);
        let mut attempt = 1;
        loop {
            let last = attempt >= BACKOFF_STEPS;
            let sent = tokio::time::timeout_at(deadline, client::post(&self.target, body.clone(), MAX_ANSWER)).await;
            let retry = match sent {
                Err(_) => return Err(format!("no answer from the webhook within {:?}", self.timeout)),
                Ok(Ok(answer)) if !last && retried(answer.code, answer.retry_after) => {
                    format!("the webhook answered HTTP {}", answer.code)
                }
                Ok(Ok(answer)) => return read_answer(self.version, answer.code, &answer.body),
                Ok(Err(failure)) if !last && failure.reset => failure.message,
                Ok(Err(failure)) => return Err(failure.message),
            };
            tracing::debug!(attempt, reason = %retry, "webhook token review: retrying");
            let wake = (tokio::time::Instant::now() + backoff(attempt)).min(deadline);
            tokio::time::sleep_until(wake).await;
            attempt += 1;
        }
    }
}

#[async_trait::async_trait]
impl TokenAuthenticator for WebhookAuthenticator {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let key = self.keys.key(audiences, token);
        let outcome = match self.cache.get(&key, Instant::now()) {
            Some(outcome) => outcome,
            None => match self.review(token, audiences).await {
                Ok(status) => {
                    let outcome = decide(&status, audiences, &self.implicit_audiences);
                    if !matches!(outcome, Outcome::Refused(_)) {
                        self.cache.put(key, outcome.clone(), self.ttl, Instant::now());
                    }
                    outcome
                }
                Err(e) => {
                    tracing::warn!(error = %e, "failed to make webhook authenticator request");
                    return TokenResult::Invalid(format!("webhook: {e}"));
                }
            },
        };
        match outcome {
            Outcome::Authenticated(user, audiences) => TokenResult::Authenticated { user, audiences },
            Outcome::Unauthenticated => TokenResult::NotMine,
            Outcome::Refused(e) => TokenResult::Invalid(format!("webhook: {e}")),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
