//! Bootstrap tokens: their format, their Secret, and the rules every reader applies — the
//! apiserver's authenticator, the token cleaner, the bootstrap signer and `kustos token`.
//! Pure: the Secret comes in as a [`SecretView`], time and randomness are inputs.
//!
//! A token is `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`), stored as the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` with the keys
//! `token-id`, `token-secret`, optional `expiration` (RFC 3339, read as Go reads it),
//! `description`, `usage-bootstrap-<usage>: "true"` per usage and `auth-extra-groups`
//! (comma-separated, each matching [`GROUP_PATTERN`]). The id is public; the secret never
//! reaches a log, an error or a `Debug` rendering.
//!
//! - [`authenticate`]: what a bearer token `<id>.<secret>` authenticates as, given its Secret
//!   (upstream's bootstrap-token authenticator).
//! - [`expiration`]: when a token stops being valid; a value that does not parse (or is not
//!   text) counts as expired, as upstream, never as "no expiration".
//! - [`signing_token`]: the token a Secret holds when it may sign `cluster-info`.
//! - [`read_secret`]: a token Secret read back (kubeadm's `BootstrapTokenFromSecret`).
//! - [`secret_data`] and [`validate`]: what `token create` writes and checks, as kubeadm.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Duration, FixedOffset, Utc};

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const NAMESPACE: &str = "kube-system";
pub const SECRET_NAME_PREFIX: &str = "bootstrap-token-";
pub const KEY_TOKEN_ID: &str = "token-id";
pub const KEY_TOKEN_SECRET: &str = "token-secret";
pub const KEY_EXPIRATION: &str = "expiration";
pub const KEY_DESCRIPTION: &str = "description";
pub const KEY_EXTRA_GROUPS: &str = "auth-extra-groups";
pub const USAGE_PREFIX: &str = "usage-bootstrap-";
pub const KEY_USAGE_SIGNING: &str = "usage-bootstrap-signing";
pub const KEY_USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
/// The usages a token may have (`usage-bootstrap-<usage>`).
pub const KNOWN_USAGES: &[&str] = &["signing", "authentication"];
/// kubeadm's defaults for `token create`.
pub const DEFAULT_USAGES: &[&str] = &["signing", "authentication"];
pub const DEFAULT_GROUPS: &[&str] = &[KUBEADM_NODE_TOKEN_GROUP];
/// The extra group kubeadm gives the tokens it creates (and `kustos token create` by default).
pub const KUBEADM_NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
pub const DEFAULT_TTL: Duration = Duration::hours(24);
/// The user a token authenticates as is this followed by its id.
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The group every bootstrap token is in.
pub const DEFAULT_GROUP: &str = "system:bootstrappers";
/// Extra groups (`auth-extra-groups`) must start with this.
pub const EXTRA_GROUP_PREFIX: &str = "system:bootstrappers:";
/// Upstream's patterns, quoted in error messages.
pub const TOKEN_PATTERN: &str = r"\A([a-z0-9]{6})\.([a-z0-9]{16})\z";
pub const TOKEN_ID_PATTERN: &str = r"\A([a-z0-9]{6})\z";
pub const GROUP_PATTERN: &str = r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z";

/// The ConfigMap the bootstrap signer signs and that anonymous clients read.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO_NAME: &str = "cluster-info";
/// The key of `cluster-info` holding the kubeconfig that is signed.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// The key of `cluster-info` holding a token's signature is this followed by its id.
pub const JWS_KEY_PREFIX: &str = "jws-kubeconfig-";

const ID_LEN: usize = 6;
const SECRET_LEN: usize = 16;
const CHARS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The token (never echoed: it may be a near-miss of a real secret) is malformed.
    #[error("the bootstrap token was not of the form {TOKEN_PATTERN:?}")]
    Malformed,
    #[error("the system random number generator failed")]
    Random,
}

fn is_lower_alnum(s: &[u8], len: usize) -> bool {
    s.len() == len && s.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// `[a-z0-9]{6}`
pub fn is_valid_id(id: &str) -> bool {
    is_lower_alnum(id.as_bytes(), ID_LEN)
}

/// `<id>.<secret>` → (id, secret) when the token matches [`TOKEN_PATTERN`].
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    (is_valid_id(id) && is_lower_alnum(secret.as_bytes(), SECRET_LEN)).then_some((id, secret))
}

/// `bootstrap-token-<id>`
pub fn secret_name(id: &str) -> String {
    format!("{SECRET_NAME_PREFIX}{id}")
}

/// The id a Secret name `bootstrap-token-<id>` carries, when well-formed.
pub fn id_from_secret_name(name: &str) -> Option<&str> {
    name.strip_prefix(SECRET_NAME_PREFIX).filter(|id| is_valid_id(id))
}

/// [`GROUP_PATTERN`]: `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`, on bytes (a value
/// that is not text never matches).
pub fn is_valid_group(g: &[u8]) -> bool {
    let Some(rest) = g.strip_prefix(EXTRA_GROUP_PREFIX.as_bytes()) else { return false };
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=256).contains(&rest.len())
        && rest.iter().all(|c| alnum(c) || matches!(c, b':' | b'-'))
        && rest.last().is_some_and(alnum)
}

/// A well-formed bootstrap token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    id: String,
    secret: String,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}.<redacted>)", self.id)
    }
}

impl Token {
    /// `<id>.<secret>` matching [`TOKEN_PATTERN`].
    pub fn parse(token: &str) -> Result<Token, TokenError> {
        let (id, secret) = parse_token(token).ok_or(TokenError::Malformed)?;
        Token::from_parts(id, secret)
    }

    pub fn from_parts(id: &str, secret: &str) -> Result<Token, TokenError> {
        if is_valid_id(id) && is_lower_alnum(secret.as_bytes(), SECRET_LEN) {
            Ok(Token { id: id.to_string(), secret: secret.to_string() })
        } else {
            Err(TokenError::Malformed)
        }
    }

    /// A fresh token from the operating system's CSPRNG.
    pub fn generate() -> Result<Token, TokenError> {
        let rng = ring::rand::SystemRandom::new();
        Token::generate_with(|buf| ring::rand::SecureRandom::fill(&rng, buf).map_err(|_| TokenError::Random))
    }

    /// A token from the random bytes `fill` provides. Each character is one byte below 252
    /// taken modulo 36 (bytes of 252 and above are skipped), so every character of
    /// `[a-z0-9]` is equally likely.
    pub fn generate_with(mut fill: impl FnMut(&mut [u8]) -> Result<(), TokenError>) -> Result<Token, TokenError> {
        const REFILLS: usize = 64;
        let mut out = Vec::with_capacity(ID_LEN + SECRET_LEN);
        let mut buf = [0u8; 2 * (ID_LEN + SECRET_LEN)];
        for _ in 0..REFILLS {
            fill(&mut buf)?;
            for b in buf {
                if out.len() == ID_LEN + SECRET_LEN {
                    break;
                }
                if b < 252 {
                    out.push(CHARS[usize::from(b) % CHARS.len()]);
                }
            }
            if out.len() == ID_LEN + SECRET_LEN {
                let text = String::from_utf8_lossy(&out).into_owned();
                return Token::from_parts(&text[..ID_LEN], &text[ID_LEN..]);
            }
        }
        // Only a broken generator yields byte after byte of 252..=255.
        Err(TokenError::Random)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret part: for sending and signing, never for logging.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `<id>.<secret>`: for the one place the user asked to see it, never for logging.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// `bootstrap-token-<id>`
    pub fn secret_name(&self) -> String {
        secret_name(&self.id)
    }
}

/// What the rules read of a Secret: where it is, its type, whether it is being deleted, and
/// its `data` (None when it has none). Callers build it from their own Secret type.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretView<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub type_: Option<&'a str>,
    /// `metadata.deletionTimestamp` is set.
    pub being_deleted: bool,
    pub data: Option<BTreeMap<&'a str, &'a [u8]>>,
}

impl fmt::Debug for SecretView<'_> {
    /// The keys of `data`, never its values (one is the token secret).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretView")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("type_", &self.type_)
            .field("being_deleted", &self.being_deleted)
            .field("data_keys", &self.data.as_ref().map(|d| d.keys().collect::<Vec<_>>()))
            .finish()
    }
}

impl<'a> SecretView<'a> {
    /// A `data` value; a missing key reads as empty (as upstream).
    pub fn get(&self, key: &str) -> &'a [u8] {
        self.data.as_ref().and_then(|d| d.get(key).copied()).unwrap_or_default()
    }

    /// Its type in `kube-system`.
    pub fn is_token_secret(&self) -> bool {
        self.type_ == Some(SECRET_TYPE) && self.namespace == NAMESPACE
    }
}

/// What `token create` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub token: Token,
    /// Time to live; zero or negative: never expires (kubeadm writes no `expiration`).
    pub ttl: Duration,
    pub usages: Vec<String>,
    pub groups: Vec<String>,
    pub description: String,
}

/// Check usages and groups as kubeadm does; every problem, in kubeadm's words.
pub fn validate(usages: &[String], groups: &[String]) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let mut invalid: Vec<&str> = usages.iter().map(String::as_str).filter(|u| !KNOWN_USAGES.contains(u)).collect();
    invalid.sort_unstable();
    invalid.dedup();
    if !invalid.is_empty() {
        errs.push(format!(
            "invalid bootstrap token usage string: {}, valid usage options: {}",
            invalid.join(","),
            KNOWN_USAGES.join(",")
        ));
    }
    if !groups.is_empty() && !usages.iter().any(|u| u == "authentication") {
        errs.push("token groups cannot be specified unless --usages includes \"authentication\"".to_string());
    }
    for g in groups.iter().filter(|g| !is_valid_group(g.as_bytes())) {
        errs.push(format!("bootstrap group {g:?} is invalid (must match {GROUP_PATTERN})"));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// The `data` of the Secret for `spec` created at `now`, as kubeadm writes it (the Secret is
/// [`NAMESPACE`]/`spec.token.secret_name()` of type [`SECRET_TYPE`]).
pub fn secret_data(spec: &TokenSpec, now: DateTime<Utc>) -> BTreeMap<String, Vec<u8>> {
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_string(), v.as_bytes().to_vec());
    };
    put(KEY_TOKEN_ID, spec.token.id());
    put(KEY_TOKEN_SECRET, spec.token.secret());
    if !spec.description.is_empty() {
        put(KEY_DESCRIPTION, &spec.description);
    }
    if spec.ttl > Duration::zero() {
        put(KEY_EXPIRATION, &crate::rfc3339::format_utc(now + spec.ttl));
    }
    for usage in &spec.usages {
        put(&format!("{USAGE_PREFIX}{usage}"), "true");
    }
    if !spec.groups.is_empty() {
        put(KEY_EXTRA_GROUPS, &spec.groups.join(","));
    }
    data
}

/// When a token Secret stops being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiration {
    /// No `expiration`, or an empty one.
    Never,
    /// Valid for `remaining` more (positive), until `at`.
    At { at: DateTime<Utc>, remaining: Duration },
    /// Passed, or unparsable or not text (which counts as expired, as upstream).
    Expired,
}

/// The [`Expiration`] of an `expiration` value at `now` (empty: [`Expiration::Never`]).
pub fn expiration_of(value: &[u8], now: DateTime<Utc>) -> Expiration {
    if value.is_empty() {
        return Expiration::Never;
    }
    match std::str::from_utf8(value).ok().and_then(crate::rfc3339::parse) {
        Some(at) => {
            let at = at.with_timezone(&Utc);
            let remaining = at - now;
            if remaining > Duration::zero() {
                Expiration::At { at, remaining }
            } else {
                Expiration::Expired
            }
        }
        None => Expiration::Expired,
    }
}

/// The [`Expiration`] of a token Secret at `now`.
pub fn expiration(secret: &SecretView<'_>, now: DateTime<Utc>) -> Expiration {
    expiration_of(secret.get(KEY_EXPIRATION), now)
}

/// The token `secret` holds when it may sign cluster-info at `now`: a token Secret named
/// `bootstrap-token-<id>` whose `token-id` is that id, with a well-formed `token-secret`,
/// not expired, and `usage-bootstrap-signing: "true"`.
pub fn signing_token(secret: &SecretView<'_>, now: DateTime<Utc>) -> Option<Token> {
    if !secret.is_token_secret() {
        return None;
    }
    let id = id_from_secret_name(secret.name)?;
    if secret.get(KEY_TOKEN_ID) != id.as_bytes() || expiration(secret, now) == Expiration::Expired {
        return None;
    }
    if secret.get(KEY_USAGE_SIGNING) != b"true" {
        return None;
    }
    Token::from_parts(id, std::str::from_utf8(secret.get(KEY_TOKEN_SECRET)).ok()?).ok()
}

/// What a bootstrap token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapUser {
    /// `system:bootstrap:<id>`
    pub name: String,
    /// [`DEFAULT_GROUP`] and the valid `auth-extra-groups`, sorted, without duplicates.
    pub groups: Vec<String>,
}

/// Why a Secret does not authenticate a bearer token. `Display` names the Secret and the
/// rule, never the secret: `bootstrap secret <ns>/<name> matching bearer token <why>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bootstrap secret {namespace}/{name} matching bearer token {reason}")]
pub struct AuthError {
    pub namespace: String,
    pub name: String,
    pub reason: AuthFailure,
}

/// The rule a token Secret failed (see [`authenticate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    #[error("is deleted and awaiting removal")]
    Deleted,
    #[error("has invalid type, expected {SECRET_TYPE}")]
    InvalidType,
    #[error("has invalid value for key {KEY_TOKEN_SECRET}")]
    SecretMismatch,
    #[error("has invalid value for key {KEY_TOKEN_ID}, expected {expected}")]
    IdMismatch { expected: String },
    #[error("has expired ({KEY_EXPIRATION} {value})")]
    Expired { value: String },
    #[error("has an unparsable {KEY_EXPIRATION}, treated as expired")]
    UnparsableExpiration,
    #[error("not marked {KEY_USAGE_AUTHENTICATION}=true")]
    NotForAuthentication,
    #[error(
        "has invalid value for key {KEY_EXTRA_GROUPS}: bootstrap group {group:?} is invalid (must match \
         system:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9])"
    )]
    InvalidGroup { group: String },
}

/// The decision for a bearer token `<id>.<secret_part>` against the Secret found for it at
/// `now`, as upstream's bootstrap-token authenticator: the Secret is not being deleted, has
/// the token type and `data`, its `token-secret` (compared in constant time) and `token-id`
/// match, `expiration` has not passed (unparsable counts as passed), it is marked
/// `usage-bootstrap-authentication: "true"`, and every `auth-extra-groups` entry is valid
/// (one invalid group rejects the token as a whole).
pub fn authenticate(
    secret: &SecretView<'_>,
    id: &str,
    secret_part: &str,
    now: DateTime<Utc>,
) -> Result<BootstrapUser, AuthError> {
    let fail = |reason: AuthFailure| {
        Err(AuthError { namespace: secret.namespace.to_string(), name: secret.name.to_string(), reason })
    };
    if secret.being_deleted {
        return fail(AuthFailure::Deleted);
    }
    if secret.type_ != Some(SECRET_TYPE) || secret.data.is_none() {
        return fail(AuthFailure::InvalidType);
    }
    if !crate::jwt::constant_time_eq(secret.get(KEY_TOKEN_SECRET), secret_part.as_bytes()) {
        return fail(AuthFailure::SecretMismatch);
    }
    if secret.get(KEY_TOKEN_ID) != id.as_bytes() {
        return fail(AuthFailure::IdMismatch { expected: id.to_string() });
    }
    let value = secret.get(KEY_EXPIRATION);
    if expiration_of(value, now) == Expiration::Expired {
        return match std::str::from_utf8(value).ok().and_then(crate::rfc3339::parse) {
            Some(_) => fail(AuthFailure::Expired { value: String::from_utf8_lossy(value).into_owned() }),
            None => fail(AuthFailure::UnparsableExpiration),
        };
    }
    if secret.get(KEY_USAGE_AUTHENTICATION) != b"true" {
        return fail(AuthFailure::NotForAuthentication);
    }
    let mut groups = vec![DEFAULT_GROUP.to_string()];
    let extra = secret.get(KEY_EXTRA_GROUPS);
    if !extra.is_empty() {
        for g in extra.split(|b| *b == b',') {
            match std::str::from_utf8(g) {
                Ok(g) if is_valid_group(g.as_bytes()) => groups.push(g.to_string()),
                _ => return fail(AuthFailure::InvalidGroup { group: String::from_utf8_lossy(g).into_owned() }),
            }
        }
    }
    groups.sort();
    groups.dedup();
    Ok(BootstrapUser { name: format!("{USER_PREFIX}{id}"), groups })
}

/// A token as `token list` shows it (kubeadm's `BootstrapTokenFromSecret`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub token: Token,
    pub description: String,
    pub expires: Option<DateTime<FixedOffset>>,
    /// Sorted.
    pub usages: Vec<String>,
    pub groups: Vec<String>,
}

/// Why a Secret is not a usable token, in kubeadm's words (never showing the secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("bootstrap Token Secret has no token-id data: {name}")]
    NoId { name: String },
    #[error(
        "bootstrap token name is not of the form '{SECRET_NAME_PREFIX}(token-id)'. Actual: {name:?}. Expected: {expected:?}"
    )]
    NameMismatch { name: String, expected: String },
    #[error("bootstrap Token Secret has no token-secret data: {name}")]
    NoSecret { name: String },
    #[error("bootstrap Token Secret is invalid and couldn't be parsed: {0}")]
    Invalid(TokenError),
    #[error("can't parse expiration time of bootstrap token {name:?}")]
    Expiration { name: String },
    /// A value is not UTF-8 text (Go would read it as a string of those bytes; showing or
    /// comparing it as something else would be a guess).
    #[error("bootstrap Token Secret {name} has a value for key {key} that is not UTF-8 text")]
    NotText { name: String, key: &'static str },
}

/// Read a token Secret back, or say (in kubeadm's words) why it is not a usable token.
pub fn read_secret(secret: &SecretView<'_>) -> Result<TokenInfo, SecretError> {
    let name = secret.name;
    let text = |key: &'static str| {
        std::str::from_utf8(secret.get(key)).map_err(|_| SecretError::NotText { name: name.to_string(), key })
    };
    let id = text(KEY_TOKEN_ID)?;
    if id.is_empty() {
        return Err(SecretError::NoId { name: name.to_string() });
    }
    if name != secret_name(id) {
        return Err(SecretError::NameMismatch { name: name.to_string(), expected: secret_name(id) });
    }
    let token_secret = text(KEY_TOKEN_SECRET)?;
    if token_secret.is_empty() {
        return Err(SecretError::NoSecret { name: name.to_string() });
    }
    let token = Token::from_parts(id, token_secret).map_err(SecretError::Invalid)?;
    let expires = match text(KEY_EXPIRATION)? {
        "" => None,
        value => Some(crate::rfc3339::parse(value).ok_or_else(|| SecretError::Expiration { name: name.to_string() })?),
    };
    let mut usages: Vec<String> = secret
        .data
        .iter()
        .flatten()
        .filter(|(_, v)| **v == b"true")
        .filter_map(|(k, _)| k.strip_prefix(USAGE_PREFIX).map(str::to_string))
        .collect();
    usages.sort();
    let groups = match text(KEY_EXTRA_GROUPS)? {
        "" => Vec::new(),
        g => g.split(',').map(str::to_string).collect(),
    };
    Ok(TokenInfo { token, description: text(KEY_DESCRIPTION)?.to_string(), expires, usages, groups })
}

#[cfg(test)]
#[path = "bootstrap_token_tests.rs"]
mod tests;
