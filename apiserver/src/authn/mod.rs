//! Authentication: who is making the request.
//!
//! An [`AuthnChain`] asks each [`Authenticator`] in order (x509 client certificates first;
//! token authenticators are added with [`AuthnChain::with`]). Like upstream kube-apiserver:
//!
//! - the first authenticator that authenticates wins, and every authenticated user gets the
//!   group `system:authenticated`;
//! - if none authenticates and any found invalid credentials (an untrusted, expired or
//!   wrong-usage client certificate, a bearer token nobody recognises), the request fails
//!   with 401 `Unauthorized`;
//! - a request with no credentials at all is `system:anonymous` in group
//!   `system:unauthenticated` when anonymous auth is enabled, else 401.
//!
//! The [`authenticate`] middleware puts the [`UserInfo`] into the request extensions and
//! removes the `Authorization` header. Failure reasons are logged at debug level; they never
//! contain credentials (authenticators must not put tokens into them).
//!
//! In this folder: what enters is a request with its TLS connection's client certificate and
//! its headers; what leaves is the request with a `UserInfo` in its extensions, or a 401.
//! Authenticators in order: x509 client certificates (here), bootstrap tokens
//! ([`bootstrap_token`]), service-account JWTs ([`serviceaccount`], which also serves
//! TokenRequest and the OIDC discovery documents), the JWT authenticators of
//! `--authentication-config` ([`authentication_config`], whose `anonymous` section, when
//! present, decides anonymous access by path), a TokenReview webhook last when configured
//! ([`webhook`], its answers cached by [`token_cache`]), anonymous. A client certificate with the
//! PodIdentity extension is the pod's service account ([`pod_certificate`]). [`impersonation`] then swaps
//! the user for an `Impersonate-*` one when the real user may impersonate. [`client_ca`]
//! follows the client CA file while serving: the x509 authenticator's trust set and the CA
//! subjects the TLS handshake hints.

pub mod authentication_config;
pub mod bootstrap_token;
pub mod client_ca;
pub mod impersonation;
pub mod pod_certificate;
pub use pod_certificate::X509Outcome;
pub mod serviceaccount;
pub mod token_cache;
pub mod user;
pub mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration as StdDuration;

use anyhow::Context as _;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use chrono::{DateTime, Duration, Utc};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, RootCertStore};

use crate::error::ApiError;
use crate::http::serve::PeerCertificates;
use crate::pki::Pki;

pub use user::{ANONYMOUS_USER, AUTHENTICATED_GROUP, MASTERS_GROUP, UNAUTHENTICATED_GROUP};

/// The authenticated identity of a request (`user.Info` upstream).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups (no uid, no extra).
    pub fn with_groups(name: &str, groups: &[&str]) -> Self {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    /// The apiserver's own identity, for the writes it makes itself (default objects,
    /// start-up records): upstream's loopback user, `system:apiserver` in `system:masters`
    /// and `system:authenticated`.
    pub fn apiserver() -> Self {
        UserInfo::with_groups(user::APISERVER_USER, &[MASTERS_GROUP, AUTHENTICATED_GROUP])
    }

    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo { name: ANONYMOUS_USER.into(), groups: vec![UNAUTHENTICATED_GROUP.into()], ..Default::default() }
    }
}

/// What one authenticator concluded about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthResult {
    Authenticated(UserInfo),
    /// Nothing this authenticator understands is present.
    NoCredentials,
    /// Credentials this authenticator handles are present but not valid (the reason is
    /// logged; it must not contain the credential).
    Invalid(String),
}

/// What a token authenticator concluded about one bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenResult {
    /// The token is valid for (at least one of) the requested audiences; `audiences` is the
    /// intersection of the token's audiences with the requested ones (upstream's
    /// `authenticator.Response.Audiences`).
    Authenticated { user: UserInfo, audiences: Vec<String> },
    /// Not a token this authenticator recognises (another one may).
    NotMine,
    /// A token of this authenticator's kind that is not valid (expired, forged, revoked,
    /// wrong audience...). The reason is logged; it must not contain the token.
    Invalid(String),
}

/// Authenticates bearer tokens (bootstrap tokens, service-account JWTs...). Used both for
/// request authentication (`audiences` = the apiserver's `--api-audiences`) and TokenReview
/// (`audiences` = `spec.audiences`, or the apiserver's when empty).
#[async_trait::async_trait]
pub trait TokenAuthenticator: Send + Sync {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult;
}

/// How long a verified client certificate is remembered (never past its NotAfter).
const X509_CACHE_TTL: Duration = Duration::minutes(5);
const X509_CACHE_MAX: usize = 1024;

/// x509 client certificates (from [`PeerCertificates`]): the chain must verify against the
/// CA bundle at the current time with extended key usage clientAuth. CN → user name, each
/// O → a group, the attribute 1.3.6.1.4.1.57683.2 → the user's UID ([`x509_user_uid`]). A
/// certificate with an empty CN authenticates nobody (as upstream).
///
/// The trusted CAs can be replaced while serving ([`X509Authenticator::set_trust`], e.g. when
/// `DIR/pki/ca.crt` changes); remembered verifications of the previous trust set are dropped.
pub struct X509Authenticator {
    trust: RwLock<Trust>,
    /// Presented chain (concatenated DER) → user, valid until, trust generation.
    cache: Mutex<HashMap<Vec<u8>, CachedUser>>,
    /// Whether a certificate with the PodIdentity extension is a pod ([`X509Outcome::Pod`]).
    pod_identities: bool,
}

/// The current trust set: its generation (bumped by every replacement) and the verifier
/// (`None`: nothing is trusted).
struct Trust {
    generation: u64,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
}

type CachedUser = (X509Outcome, DateTime<Utc>, u64);

impl std::fmt::Debug for X509Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509Authenticator").finish_non_exhaustive()
    }
}

fn client_verifier(ca_bundle_der: &[Vec<u8>]) -> anyhow::Result<Option<Arc<dyn ClientCertVerifier>>> {
    if ca_bundle_der.is_empty() {
        return Ok(None);
    }
    let mut roots = RootCertStore::empty();
    for der in ca_bundle_der {
        roots.add(CertificateDer::from(der.clone())).context("adding a CA certificate to the client CA bundle")?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .context("building the client certificate verifier")?;
    Ok(Some(verifier))
}

impl X509Authenticator {
    /// Trust the given CA certificates (DER). Several, so that a CA rotation can trust the
    /// old and the new CA at once.
    pub fn new(ca_bundle_der: &[Vec<u8>]) -> anyhow::Result<Self> {
        if ca_bundle_der.is_empty() {
            anyhow::bail!("the client CA bundle is empty");
        }
        let verifier = client_verifier(ca_bundle_der)?;
        Ok(X509Authenticator {
            trust: RwLock::new(Trust { generation: 0, verifier }),
            cache: Mutex::new(HashMap::new()),
            pod_identities: false,
        })
    }

    /// Read certificates with the PodIdentity extension as pods (the apiserver, which can
    /// check their binding), not by their subject.
    pub fn recognizing_pod_identities(mut self) -> Self {
        self.pod_identities = true;
        self
    }

    /// Trust every certificate of a PEM bundle.
    pub fn from_pem(ca_bundle_pem: &str) -> anyhow::Result<Self> {
        Self::new(&kustos_ca::certificates_from_pem(ca_bundle_pem).context("parsing the client CA bundle")?)
    }

    /// Replace the trusted CA certificates (DER; empty: trust nothing). Verifications
    /// remembered under the previous set no longer count. On error the current set stays.
    pub fn set_trust(&self, ca_bundle_der: &[Vec<u8>]) -> anyhow::Result<()> {
        let verifier = client_verifier(ca_bundle_der)?;
        let mut trust = self.trust.write().unwrap_or_else(|e| e.into_inner());
        trust.generation += 1;
        trust.verifier = verifier;
        drop(trust);
        if let Ok(mut cache) = self.cache.lock() {
            cache.clear();
        }
        Ok(())
    }

    /// Verify a presented chain (leaf first) at `now`; a pod certificate is refused here.
    pub fn verify(&self, chain: &[CertificateDer<'_>], now: DateTime<Utc>) -> AuthResult {
        match self.verify_outcome(chain, now) {
            X509Outcome::Result(r) => r,
            X509Outcome::Pod(_) => AuthResult::Invalid("x509: a pod certificate's binding is not checked here".into()),
        }
    }

    /// Verify a presented chain (leaf first) at `now`.
    pub fn verify_outcome(&self, chain: &[CertificateDer<'_>], now: DateTime<Utc>) -> X509Outcome {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return X509Outcome::Result(AuthResult::NoCredentials);
        };
        let (generation, verifier) = {
            let trust = self.trust.read().unwrap_or_else(|e| e.into_inner());
            (trust.generation, trust.verifier.clone())
        };
        let key: Vec<u8> = chain.iter().flat_map(|c| c.as_ref().iter().copied()).collect();
        if let Ok(cache) = self.cache.lock() {
            if let Some((outcome, until, cached_generation)) = cache.get(&key) {
                if now < *until && *cached_generation == generation {
                    return outcome.clone();
                }
            }
        }
        let invalid = |reason: String| X509Outcome::Result(AuthResult::Invalid(reason));
        let Some(verifier) = verifier else {
            return invalid("x509: certificate signed by unknown authority".into());
        };
        let unix = UnixTime::since_unix_epoch(StdDuration::from_secs(u64::try_from(now.timestamp()).unwrap_or(0)));
        crate::work::signature_checked(crate::work::Signature::ClientCertificateChain);
        if let Err(e) = verifier.verify_client_cert(leaf, intermediates, unix) {
            return invalid(describe(&e));
        }
        let info = match kustos_ca::parse_certificate_der(leaf) {
            Ok(i) => i,
            Err(e) => return invalid(format!("x509: {e}")),
        };
        let pod = match self.pod_identities {
            true => match kustos_ca::pod_identity::PodIdentity::from_info(&info) {
                Ok(pod) => pod,
                Err(e) => return invalid(format!("x509: {e}")),
            },
            false => None,
        };
        let outcome = match pod {
            Some(identity) => match pod_certificate::claims(identity, &info, leaf) {
                Ok(claims) => X509Outcome::Pod(claims),
                Err(e) => return invalid(e),
            },
            None if info.common_name.is_empty() => return X509Outcome::Result(AuthResult::NoCredentials),
            None => {
                let uid = match x509_user_uid(&info.user_uids) {
                    Ok(uid) => uid,
                    Err(e) => return invalid(e),
                };
                // As upstream (1.33+): the certificate's fingerprint names the credential.
                let credential_id =
                    format!("{}{}", pod_certificate::CREDENTIAL_ID_PREFIX, kustos_ca::pod_identity::sha256_hex(leaf));
                X509Outcome::Result(AuthResult::Authenticated(UserInfo {
                    name: info.common_name,
                    uid,
                    groups: info.organizations,
                    extra: [(user::CREDENTIAL_ID_EXTRA.to_string(), vec![credential_id])].into(),
                }))
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= X509_CACHE_MAX {
                cache.retain(|_, (_, until, _)| now < *until);
                if cache.len() >= X509_CACHE_MAX {
                    cache.clear();
                }
            }
            cache.insert(key, (outcome.clone(), (now + X509_CACHE_TTL).min(info.not_after), generation));
        }
        outcome
    }
}

/// The user's UID from a client certificate's subject attributes 1.3.6.1.4.1.57683.2, as
/// kube-apiserver reads them (on by default since 1.33): none is no UID, one non-empty value
/// is the UID, several or an empty one refuse the certificate.
pub fn x509_user_uid(uids: &[String]) -> Result<String, String> {
    match uids {
        [] => Ok(String::new()),
        [uid] if uid.is_empty() => Err("UID cannot be an empty string".into()),
        [uid] => Ok(uid.clone()),
        many => Err(format!("expected 1 UID, but found multiple: [{}]", many.join(" "))),
    }
}

/// Upstream's wording for the common failures.
fn describe(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(ce) => match ce {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                "x509: certificate signed by unknown authority".into()
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => "x509: certificate has expired or is not yet valid".into(),
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "x509: certificate specifies an incompatible key usage".into()
            }
            other => format!("x509: {other:?}"),
        },
        other => format!("x509: {other}"),
    }
}

impl X509Authenticator {
    /// Authenticate by the connection's client certificate, if any (as [`Self::verify`]).
    pub fn authenticate(&self, req: &http::request::Parts) -> AuthResult {
        match req.extensions.get::<PeerCertificates>() {
            Some(peer) => self.verify(&peer.0, Utc::now()),
            None => AuthResult::NoCredentials,
        }
    }

    /// What the connection's client certificate, if any, proves.
    pub fn authenticate_outcome(&self, req: &http::request::Parts) -> X509Outcome {
        match req.extensions.get::<PeerCertificates>() {
            Some(peer) => self.verify_outcome(&peer.0, Utc::now()),
            None => X509Outcome::Result(AuthResult::NoCredentials),
        }
    }
}

/// A `Bearer` Authorization header whose token is not text: a credential nobody can accept
/// (401), not an absent one.
fn has_undecodable_bearer(req: &http::request::Parts) -> bool {
    req.headers.get(http::header::AUTHORIZATION).is_some_and(|v| {
        let b = v.as_bytes();
        v.to_str().is_err() && b.len() > 7 && b[..7].eq_ignore_ascii_case(b"bearer ")
    })
}

/// The bearer token of a request, if it has a non-empty one.
pub fn bearer_token(req: &http::request::Parts) -> Option<&str> {
    let value = req.headers.get(http::header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The authenticators in order, plus anonymous access: x509 client certificates first, then
/// each token authenticator for a bearer token.
pub struct AuthnChain {
    x509: Option<X509Authenticator>,
    /// Checks pod certificates' bindings (none: pod certificates authenticate nobody).
    pod_bindings: Option<Arc<dyn pod_certificate::PodBindings>>,
    tokens: Vec<Arc<dyn TokenAuthenticator>>,
    anonymous: bool,
    /// The apiserver's own audiences (`--api-audiences`): tokens used on requests must be
    /// meant for one of them.
    api_audiences: Vec<String>,
    /// `--authentication-config`: its JWT authenticators are among `tokens`; its
    /// `anonymous` section, when present, decides over `anonymous`.
    structured: Option<Arc<authentication_config::AuthenticationConfig>>,
    anonymous_config: Option<authentication_config::types::AnonymousAuthConfig>,
}

impl std::fmt::Debug for AuthnChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthnChain")
            .field("x509", &self.x509.is_some())
            .field("tokens", &self.tokens.len())
            .field("anonymous", &self.anonymous)
            .field("api_audiences", &self.api_audiences)
            .finish()
    }
}

impl AuthnChain {
    /// x509 client certificates against the PKI's CA bundle; anonymous when `anonymous`.
    pub fn new(pki: &Pki, anonymous: bool) -> anyhow::Result<Self> {
        let x509 = X509Authenticator::new(&pki.ca_bundle_der()?)?.recognizing_pod_identities();
        Ok(Self::from_parts(Some(x509), Vec::new(), anonymous))
    }

    pub fn from_parts(
        x509: Option<X509Authenticator>,
        tokens: Vec<Arc<dyn TokenAuthenticator>>,
        anonymous: bool,
    ) -> Self {
        AuthnChain {
            x509,
            pod_bindings: None,
            tokens,
            anonymous,
            api_audiences: Vec::new(),
            structured: None,
            anonymous_config: None,
        }
    }

    /// Check pod certificates' bindings with `bindings`.
    pub fn with_pod_bindings(mut self, bindings: Arc<dyn pod_certificate::PodBindings>) -> Self {
        self.pod_bindings = Some(bindings);
        self
    }

    /// Append a token authenticator (asked after the ones already present).
    pub fn with(mut self, authenticator: Arc<dyn TokenAuthenticator>) -> Self {
        self.tokens.push(authenticator);
        self
    }

    /// Set the apiserver's audiences (`--api-audiences`, default: the service-account issuer).
    pub fn with_api_audiences(mut self, audiences: Vec<String>) -> Self {
        self.api_audiences = audiences;
        self
    }

    /// Append the JWT authenticators of an authentication configuration (after the token
    /// authenticators already present) and follow its `anonymous` section.
    pub fn with_authentication_config(mut self, cfg: Arc<authentication_config::AuthenticationConfig>) -> Self {
        self.anonymous_config = cfg.anonymous();
        self.tokens.push(cfg.clone());
        self.structured = Some(cfg);
        self
    }

    /// The authentication configuration, if any (for its metrics).
    pub fn authentication_config(&self) -> Option<&Arc<authentication_config::AuthenticationConfig>> {
        self.structured.as_ref()
    }

    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// The x509 client-certificate authenticator, if any (to replace its trusted CAs).
    pub fn x509(&self) -> Option<&X509Authenticator> {
        self.x509.as_ref()
    }

    /// Ask every token authenticator (TokenReview, and bearer tokens on requests). Empty
    /// `audiences` means the apiserver's own.
    pub async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let audiences = if audiences.is_empty() { &self.api_audiences[..] } else { audiences };
        let mut invalid = Vec::new();
        for a in &self.tokens {
            match a.authenticate_token(token, audiences).await {
                TokenResult::Authenticated { mut user, audiences } => {
                    mark_authenticated(&mut user);
                    return TokenResult::Authenticated { user, audiences };
                }
                TokenResult::Invalid(reason) => invalid.push(reason),
                TokenResult::NotMine => {}
            }
        }
        if invalid.is_empty() {
            TokenResult::Invalid("invalid bearer token".into())
        } else {
            TokenResult::Invalid(invalid.join("; "))
        }
    }

    /// The user, or the reasons for a 401.
    pub async fn authenticate(&self, req: &http::request::Parts) -> Result<UserInfo, Vec<String>> {
        let mut errors = Vec::new();
        if let Some(x509) = &self.x509 {
            match x509.authenticate_outcome(req) {
                X509Outcome::Result(AuthResult::Authenticated(mut user)) => {
                    mark_authenticated(&mut user);
                    return Ok(user);
                }
                X509Outcome::Result(AuthResult::Invalid(reason)) => errors.push(reason),
                X509Outcome::Result(AuthResult::NoCredentials) => {}
                X509Outcome::Pod(claims) => match pod_certificate::user(self.pod_bindings.as_deref(), &claims).await {
                    Ok(mut user) => {
                        mark_authenticated(&mut user);
                        return Ok(user);
                    }
                    Err(reason) => errors.push(reason),
                },
            }
        }
        if bearer_token(req).is_none() && has_undecodable_bearer(req) {
            errors.push("invalid bearer token".into());
        }
        if let Some(token) = bearer_token(req) {
            match self.authenticate_token(token, &[]).await {
                TokenResult::Authenticated { user, .. } => return Ok(user),
                TokenResult::Invalid(reason) => errors.push(reason),
                TokenResult::NotMine => errors.push("invalid bearer token".into()),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if let Some(anon) = &self.anonymous_config {
            return match authentication_config::anonymous_allows(anon, req.uri.path()) {
                true => Ok(UserInfo::anonymous()),
                false => Err(vec!["no credentials and anonymous access is not allowed for this path".into()]),
            };
        }
        if self.anonymous {
            Ok(UserInfo::anonymous())
        } else {
            Err(vec!["no credentials and anonymous access is disabled".into()])
        }
    }
}

/// Every authenticated user is in `system:authenticated`.
fn mark_authenticated(user: &mut UserInfo) {
    let marked = user.groups.iter().any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
    if !marked && user.name != ANONYMOUS_USER {
        user.groups.push(AUTHENTICATED_GROUP.into());
    }
}

/// Middleware: authenticate, record the [`UserInfo`] in the extensions and drop the
/// `Authorization` header; or answer 401 `Unauthorized`.
pub async fn authenticate(State(chain): State<Arc<AuthnChain>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    match chain.authenticate(&parts).await {
        Ok(user) => {
            parts.headers.remove(http::header::AUTHORIZATION);
            parts.extensions.insert(user);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(reasons) => {
            tracing::debug!(method = %parts.method, path = %parts.uri.path(), reasons = ?reasons, "authentication failed");
            ApiError::Unauthorized("Unauthorized".into()).into_response()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kustos_ca::{Ca, IssueParams, Usage};
    use tower::ServiceExt as _;

    struct Fixture {
        ca: Ca,
        chain: AuthnChain,
    }

    /// Accepts the token "good-token" as user "token-user" (for audience "api" only);
    /// claims tokens starting with "good"; ignores the rest.
    struct StaticToken;

    #[async_trait::async_trait]
    impl TokenAuthenticator for StaticToken {
        async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
            match token {
                "good-token" if audiences.iter().any(|a| a == "api") => TokenResult::Authenticated {
                    user: UserInfo {
                        name: "token-user".into(),
                        uid: "u-1".into(),
                        groups: vec!["tokens".into()],
                        ..Default::default()
                    },
                    audiences: vec!["api".into()],
                },
                t if t.starts_with("good") => TokenResult::Invalid("unknown static token".into()),
                _ => TokenResult::NotMine,
            }
        }
    }

    fn fixture() -> Fixture {
        let ca =
            Ca::generate("kustos-ca", kustos_ca::DEFAULT_CA_VALIDITY, Utc::now() - Duration::days(3 * 365)).unwrap();
        let x509 = X509Authenticator::from_pem(ca.cert_pem()).unwrap();
        Fixture { ca, chain: AuthnChain::from_parts(Some(x509), Vec::new(), true) }
    }

    fn request(cert: Option<&[u8]>, authorization: Option<&str>) -> http::request::Parts {
        let mut b = http::Request::builder().uri("/api");
        if let Some(a) = authorization {
            b = b.header(http::header::AUTHORIZATION, a);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        let certs = cert.map(|c| vec![CertificateDer::from(c.to_vec())]).unwrap_or_default();
        parts.extensions.insert(PeerCertificates(certs));
        parts
    }

    /// A DER subject: CN, O, then one UID attribute (UTF8String) per value.
    fn subject_with_uids(cn: &str, o: &str, uids: &[&str]) -> Vec<u8> {
        fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
            assert!(content.len() < 128, "short form lengths only");
            [vec![tag, content.len() as u8], content.to_vec()].concat()
        }
        let atv =
            |oid: &[u8], value: &str| tlv(0x31, &tlv(0x30, &[tlv(0x06, oid), tlv(0x0c, value.as_bytes())].concat()));
        let uid_oid = [0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];
        let mut rdns = [atv(&[0x55, 0x04, 0x03], cn), atv(&[0x55, 0x04, 0x0a], o)].concat();
        for u in uids {
            rdns.extend(atv(&uid_oid, u));
        }
        tlv(0x30, &rdns)
    }

    #[test]
    fn x509_user_uids() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: Vec<(Vec<String>, Result<&str, &str>)> = vec![
            (s(&[]), Ok("")),
            (s(&["u-1"]), Ok("u-1")),
            (s(&[""]), Err("UID cannot be an empty string")),
            (s(&["a", "b"]), Err("expected 1 UID, but found multiple: [a b]")),
            (s(&["a", ""]), Err("expected 1 UID, but found multiple: [a ]")),
        ];
        for (uids, want) in cases {
            assert_eq!(x509_user_uid(&uids), want.map(str::to_string).map_err(str::to_string), "{uids:?}");
        }
    }

    fn issue(ca: &Ca, params: IssueParams, at: DateTime<Utc>) -> Vec<u8> {
        ca.issue(params, at).unwrap().cert_der
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    #[tokio::test]
    async fn table() {
        let f = fixture();
        let now = Utc::now();
        let other = Ca::generate("kustos-ca", Duration::days(3650), now).unwrap();
        let valid =
            issue(&f.ca, IssueParams::client("alice", vec!["devs".into(), "ops".into()], Duration::days(30)), now);
        let foreign =
            issue(&other, IssueParams::client("alice", vec!["system:masters".into()], Duration::days(30)), now);
        let expired =
            issue(&f.ca, IssueParams::client("old", vec![], Duration::days(365)), now - Duration::days(2 * 365));
        let future = issue(&f.ca, IssueParams::client("early", vec![], Duration::days(365)), now + Duration::days(2));
        let server_only = issue(&f.ca, IssueParams::server("web", vec!["web".into()], vec![], Duration::days(30)), now);
        let no_eku = issue(
            &f.ca,
            IssueParams {
                common_name: "plain".into(),
                usages: vec![Usage::DigitalSignature],
                validity: Duration::days(1),
                ..Default::default()
            },
            now,
        );
        let no_cn = issue(&f.ca, IssueParams::client("", vec!["devs".into()], Duration::days(1)), now);
        let with_uids = |uids: &[&str]| {
            let mut p = IssueParams::client("uidful", vec!["devs".into()], Duration::days(1));
            p.raw_subject = Some(subject_with_uids("uidful", "devs", uids));
            issue(&f.ca, p, now)
        };
        let (one_uid, two_uids, empty_uid) = (with_uids(&["u-42"]), with_uids(&["a", "b"]), with_uids(&[""]));
        let uid_user = UserInfo { uid: "u-42".into(), ..user("uidful", &["devs", AUTHENTICATED_GROUP]) };

        let unauthorized = |why: &str| Err::<UserInfo, String>(why.to_string());
        type Case<'a> = (&'a str, Option<&'a [u8]>, Option<&'a str>, Result<UserInfo, String>);
        let cases: Vec<Case> = vec![
            ("valid client cert", Some(&valid), None, Ok(user("alice", &["devs", "ops", AUTHENTICATED_GROUP]))),
            (
                "cert from another CA",
                Some(&foreign),
                None,
                unauthorized("x509: certificate signed by unknown authority"),
            ),
            ("expired cert", Some(&expired), None, unauthorized("x509: certificate has expired or is not yet valid")),
            (
                "not yet valid cert",
                Some(&future),
                None,
                unauthorized("x509: certificate has expired or is not yet valid"),
            ),
            (
                "server-auth-only cert",
                Some(&server_only),
                None,
                unauthorized("x509: certificate specifies an incompatible key usage"),
            ),
            ("cert without EKU", Some(&no_eku), None, Ok(user("plain", &[AUTHENTICATED_GROUP]))),
            ("cert without CN", Some(&no_cn), None, Ok(UserInfo::anonymous())),
            ("cert naming a UID", Some(&one_uid), None, Ok(uid_user)),
            ("cert naming two UIDs", Some(&two_uids), None, unauthorized("expected 1 UID, but found multiple: [a b]")),
            ("cert naming an empty UID", Some(&empty_uid), None, unauthorized("UID cannot be an empty string")),
            ("garbage cert", Some(b"junk"), None, unauthorized("")),
            ("no credentials", None, None, Ok(UserInfo::anonymous())),
            ("unknown bearer token", None, Some("Bearer abc.def"), unauthorized("invalid bearer token")),
            ("empty bearer token", None, Some("Bearer "), Ok(UserInfo::anonymous())),
            ("basic auth is ignored", None, Some("Basic dXNlcjpwdw=="), Ok(UserInfo::anonymous())),
            (
                "valid cert wins over a bad token",
                Some(&valid),
                Some("Bearer nope"),
                Ok(user("alice", &["devs", "ops", AUTHENTICATED_GROUP])),
            ),
        ];
        for (name, cert, authz, want) in cases {
            let got = f.chain.authenticate(&request(cert, authz)).await;
            match (&got, &want) {
                (Ok(g), Ok(w)) => {
                    // A certificate's user carries its fingerprint as the credential id.
                    let mut g = g.clone();
                    let id = g.extra.remove(user::CREDENTIAL_ID_EXTRA);
                    let expected = match cert {
                        Some(der) if *w != UserInfo::anonymous() => {
                            Some(vec![format!("X509SHA256={}", kustos_ca::pod_identity::sha256_hex(der))])
                        }
                        _ => None,
                    };
                    assert_eq!(id, expected, "{name}: credential id");
                    assert_eq!(&g, w, "{name}")
                }
                (Err(reasons), Err(w)) => {
                    assert!(reasons.iter().any(|r| r.contains(w.as_str())), "{name}: {reasons:?}")
                }
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
        // Cached results stay right, and the cache does not make an expired cert valid.
        let mut alice = user("alice", &["devs", "ops", AUTHENTICATED_GROUP]);
        alice.extra.insert(
            user::CREDENTIAL_ID_EXTRA.into(),
            vec![format!("X509SHA256={}", kustos_ca::pod_identity::sha256_hex(&valid))],
        );
        assert_eq!(f.chain.authenticate(&request(Some(&valid), None)).await, Ok(alice));
        let x509 = X509Authenticator::from_pem(f.ca.cert_pem()).unwrap();
        let short = issue(&f.ca, IssueParams::client("short", vec![], Duration::hours(1)), now);
        assert!(matches!(x509.verify(&[CertificateDer::from(short.clone())], now), AuthResult::Authenticated(_)));
        assert!(matches!(
            x509.verify(&[CertificateDer::from(short)], now + Duration::hours(2)),
            AuthResult::Invalid(_)
        ));
    }

    #[test]
    fn replacing_the_trusted_cas_takes_effect_at_once() {
        let now = Utc::now();
        let old = Ca::generate("old", Duration::days(100), now).unwrap();
        let new = Ca::generate("new", Duration::days(100), now).unwrap();
        let from_old = CertificateDer::from(issue(&old, IssueParams::client("o", vec![], Duration::days(1)), now));
        let from_new = CertificateDer::from(issue(&new, IssueParams::client("n", vec![], Duration::days(1)), now));
        let x509 = X509Authenticator::new(&[old.cert_der().to_vec()]).unwrap();
        let ok = |r: AuthResult| matches!(r, AuthResult::Authenticated(_));
        // name, trusted CAs (None: keep), old CA's client authenticates, new CA's client authenticates.
        type Case<'a> = (&'a str, Option<Vec<Vec<u8>>>, bool, bool);
        let cases: Vec<Case> = vec![
            ("at start: the old CA", None, true, false),
            ("rotation: both", Some(vec![new.cert_der().to_vec(), old.cert_der().to_vec()]), true, true),
            (
                "old CA removed (even though its client was remembered)",
                Some(vec![new.cert_der().to_vec()]),
                false,
                true,
            ),
            ("nothing trusted", Some(vec![]), false, false),
        ];
        for (name, trust, want_old, want_new) in cases {
            if let Some(t) = trust {
                x509.set_trust(&t).unwrap();
            }
            for round in ["first", "cached"] {
                assert_eq!(ok(x509.verify(std::slice::from_ref(&from_old), now)), want_old, "{name} ({round}): old");
                assert_eq!(ok(x509.verify(std::slice::from_ref(&from_new), now)), want_new, "{name} ({round}): new");
            }
        }
        // A bad set is refused and the current one stays.
        assert!(x509.set_trust(&[b"not a certificate".to_vec()]).is_err());
        assert!(!ok(x509.verify(std::slice::from_ref(&from_new), now)), "still nothing trusted");
    }

    #[tokio::test]
    async fn anonymous_disabled_and_token_authenticators() {
        let f = fixture();
        let x509 = || Some(X509Authenticator::from_pem(f.ca.cert_pem()).unwrap());
        let chain = AuthnChain::from_parts(x509(), Vec::new(), false);
        assert!(chain.authenticate(&request(None, None)).await.is_err());

        let chain = AuthnChain::from_parts(x509(), Vec::new(), true)
            .with(Arc::new(StaticToken))
            .with_api_audiences(vec!["api".into()]);
        let want = UserInfo {
            name: "token-user".into(),
            uid: "u-1".into(),
            groups: vec!["tokens".into(), AUTHENTICATED_GROUP.into()],
            ..Default::default()
        };
        assert_eq!(chain.authenticate(&request(None, Some("Bearer good-token"))).await, Ok(want.clone()));
        assert_eq!(chain.authenticate(&request(None, Some("bearer  good-token "))).await, Ok(want.clone()));
        // An invalid client certificate does not stop a valid token (the first success wins).
        let other = Ca::generate("x", Duration::days(10), Utc::now()).unwrap();
        let foreign = issue(&other, IssueParams::client("m", vec![], Duration::days(1)), Utc::now());
        assert_eq!(chain.authenticate(&request(Some(&foreign), Some("Bearer good-token"))).await, Ok(want.clone()));
        let err = chain.authenticate(&request(Some(&foreign), Some("Bearer good-bad-token"))).await.unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(!err.iter().any(|e| e.contains("bad-token")), "reasons never contain the token: {err:?}");
        // A token nobody claims is invalid, never anonymous.
        assert!(chain.authenticate(&request(None, Some("Bearer other"))).await.is_err());
        // TokenReview-style: explicit audiences replace the apiserver's.
        assert!(matches!(chain.authenticate_token("good-token", &[]).await, TokenResult::Authenticated { .. }));
        assert!(matches!(chain.authenticate_token("good-token", &["elsewhere".into()]).await, TokenResult::Invalid(_)));
        assert!(X509Authenticator::new(&[]).is_err());
    }

    #[tokio::test]
    async fn middleware_sets_the_user_strips_authorization_or_answers_401() {
        let f = fixture();
        let chain = Arc::new(f.chain.with(Arc::new(StaticToken)).with_api_audiences(vec!["api".into()]));
        let app = axum::Router::new()
            .fallback(|req: Request| async move {
                let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_default();
                let has_auth = req.headers().contains_key(http::header::AUTHORIZATION);
                format!("{} {}", user.name, has_auth)
            })
            .layer(axum::middleware::from_fn_with_state(chain, authenticate));
        let send = |authz: Option<&str>| {
            let mut b = http::Request::builder().uri("/api/v1/pods");
            if let Some(a) = authz {
                b = b.header(http::header::AUTHORIZATION, a);
            }
            app.clone().oneshot(b.body(axum::body::Body::empty()).unwrap())
        };
        let body = |r: Response| async move { axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap() };

        let r = send(Some("Bearer good-token")).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(&body(r).await[..], b"token-user false");

        let r = send(None).await.unwrap();
        assert_eq!(&body(r).await[..], b"system:anonymous false");

        let r = send(Some("Bearer wrong")).await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()[http::header::CONTENT_TYPE], "application/json");
        let status: serde_json::Value = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(
            status,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
}
