//! Bootstrap tokens and their Secrets, as kubeadm writes them and as the token cleaner, the
//! bootstrap signer and the apiserver read them. Pure: time and randomness are inputs.
//!
//! A token is `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`), stored as the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` with the keys
//! `token-id`, `token-secret`, optional `expiration` (RFC 3339, UTC), `description`,
//! `usage-bootstrap-<usage>: "true"` per usage and `auth-extra-groups` (comma-separated).
//! The id is public; the secret never reaches a log or a `Debug` rendering.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Duration, FixedOffset, Utc};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::ObjectMeta;

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
pub const DEFAULT_GROUPS: &[&str] = &["system:bootstrappers:kubeadm:default-node-token"];
pub const DEFAULT_TTL: Duration = Duration::hours(24);
/// Upstream's patterns, quoted in error messages.
pub const TOKEN_PATTERN: &str = r"\A([a-z0-9]{6})\.([a-z0-9]{16})\z";
pub const TOKEN_ID_PATTERN: &str = r"\A([a-z0-9]{6})\z";
pub const GROUP_PATTERN: &str = r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z";
const GROUP_PREFIX: &str = "system:bootstrappers:";

/// The ConfigMap the bootstrap signer signs and that anonymous clients read.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO_NAME: &str = "cluster-info";
pub const KUBECONFIG_KEY: &str = "kubeconfig";
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

fn is_lower_alnum(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// `[a-z0-9]{6}`
pub fn is_valid_id(id: &str) -> bool {
    is_lower_alnum(id, ID_LEN)
}

/// `bootstrap-token-<id>`
pub fn secret_name(id: &str) -> String {
    format!("{SECRET_NAME_PREFIX}{id}")
}

/// The id a Secret name `bootstrap-token-<id>` carries, when well-formed.
pub fn id_from_secret_name(name: &str) -> Option<&str> {
    name.strip_prefix(SECRET_NAME_PREFIX).filter(|id| is_valid_id(id))
}

/// `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`
pub fn is_valid_group(g: &str) -> bool {
    let Some(rest) = g.strip_prefix(GROUP_PREFIX) else { return false };
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=256).contains(&rest.len())
        && rest.bytes().all(|c| alnum(c) || c == b':' || c == b'-')
        && rest.bytes().last().is_some_and(alnum)
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
        let (id, secret) = token.split_once('.').ok_or(TokenError::Malformed)?;
        Token::from_parts(id, secret)
    }

    pub fn from_parts(id: &str, secret: &str) -> Result<Token, TokenError> {
        if is_valid_id(id) && is_lower_alnum(secret, SECRET_LEN) {
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
    for g in groups.iter().filter(|g| !is_valid_group(g)) {
        errs.push(format!("bootstrap group {g:?} is invalid (must match {GROUP_PATTERN})"));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// The Secret for `spec` created at `now`, as kubeadm writes it.
pub fn to_secret(spec: &TokenSpec, now: DateTime<Utc>) -> Secret {
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
    };
    put(KEY_TOKEN_ID, spec.token.id());
    put(KEY_TOKEN_SECRET, spec.token.secret());
    if !spec.description.is_empty() {
        put(KEY_DESCRIPTION, &spec.description);
    }
    if spec.ttl > Duration::zero() {
        put(KEY_EXPIRATION, &kustos_ca::rfc3339::format_utc(now + spec.ttl));
    }
    for usage in &spec.usages {
        put(&format!("{USAGE_PREFIX}{usage}"), "true");
    }
    if !spec.groups.is_empty() {
        put(KEY_EXTRA_GROUPS, &spec.groups.join(","));
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(spec.token.secret_name()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(data),
        ..Default::default()
    }
}

/// A `data` value as text; missing (or not UTF-8) reads as empty, as upstream.
pub fn data<'a>(secret: &'a Secret, key: &str) -> &'a str {
    secret.data.as_ref().and_then(|d| d.get(key)).and_then(|b| std::str::from_utf8(&b.0).ok()).unwrap_or_default()
}

/// When a token Secret stops being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiration {
    /// No `expiration`.
    Never,
    /// Valid for `remaining` more (positive), until `at`.
    At { at: DateTime<Utc>, remaining: Duration },
    /// Passed, or unparsable (which counts as expired, as upstream).
    Expired,
}

/// The [`Expiration`] of a token Secret at `now`.
pub fn expiration(secret: &Secret, now: DateTime<Utc>) -> Expiration {
    let text = data(secret, KEY_EXPIRATION);
    if text.is_empty() {
        return Expiration::Never;
    }
    match kustos_ca::rfc3339::parse(text) {
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

/// Whether `secret` is a bootstrap-token Secret: its type in kube-system.
pub fn is_token_secret(secret: &Secret) -> bool {
    secret.type_.as_deref() == Some(SECRET_TYPE) && secret.metadata.namespace.as_deref() == Some(NAMESPACE)
}

/// The token `secret` holds when it may sign cluster-info at `now`: a token Secret named
/// `bootstrap-token-<id>` whose `token-id` is that id, with a well-formed `token-secret`,
/// not expired, and `usage-bootstrap-signing: "true"`.
pub fn signing_token(secret: &Secret, now: DateTime<Utc>) -> Option<Token> {
    if !is_token_secret(secret) {
        return None;
    }
    let id = id_from_secret_name(secret.metadata.name.as_deref()?)?;
    if data(secret, KEY_TOKEN_ID) != id || expiration(secret, now) == Expiration::Expired {
        return None;
    }
    if data(secret, KEY_USAGE_SIGNING) != "true" {
        return None;
    }
    Token::from_parts(id, data(secret, KEY_TOKEN_SECRET)).ok()
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

/// Read a token Secret back, or say (in kubeadm's words) why it is not a usable token.
pub fn from_secret(secret: &Secret) -> Result<TokenInfo, String> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let id = data(secret, KEY_TOKEN_ID);
    if id.is_empty() {
        return Err(format!("bootstrap Token Secret has no token-id data: {name}"));
    }
    if name != secret_name(id) {
        return Err(format!(
            "bootstrap token name is not of the form '{SECRET_NAME_PREFIX}(token-id)'. Actual: {name:?}. Expected: {:?}",
            secret_name(id)
        ));
    }
    let token_secret = data(secret, KEY_TOKEN_SECRET);
    if token_secret.is_empty() {
        return Err(format!("bootstrap Token Secret has no token-secret data: {name}"));
    }
    let token = Token::from_parts(id, token_secret)
        .map_err(|e| format!("bootstrap Token Secret is invalid and couldn't be parsed: {e}"))?;
    let expires = match data(secret, KEY_EXPIRATION) {
        "" => None,
        text => Some(
            kustos_ca::rfc3339::parse(text)
                .ok_or_else(|| format!("can't parse expiration time of bootstrap token {name:?}"))?,
        ),
    };
    let mut usages: Vec<String> = secret
        .data
        .iter()
        .flatten()
        .filter(|(_, v)| v.0 == b"true")
        .filter_map(|(k, _)| k.strip_prefix(USAGE_PREFIX).map(str::to_string))
        .collect();
    usages.sort();
    let groups = match data(secret, KEY_EXTRA_GROUPS) {
        "" => Vec::new(),
        g => g.split(',').map(str::to_string).collect(),
    };
    Ok(TokenInfo { token, description: data(secret, KEY_DESCRIPTION).to_string(), expires, usages, groups })
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn token() -> Token {
        Token { id: "abcdef".into(), secret: "0123456789abcdef".into() }
    }

    /// A token Secret for `abcdef.0123456789abcdef` with `pairs` as data.
    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("bootstrap-token-abcdef".into()),
                namespace: Some(NAMESPACE.into()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(pairs.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
            ..Default::default()
        }
    }

    fn data_map(s: &Secret) -> BTreeMap<String, String> {
        s.data.iter().flatten().map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned())).collect()
    }

    #[test]
    fn tokens_parse_like_upstreams_pattern() {
        let cases: &[(&str, &str, Option<(&str, &str)>)] = &[
            ("well-formed", "abcdef.0123456789abcdef", Some(("abcdef", "0123456789abcdef"))),
            ("upper case", "ABCDEF.0123456789abcdef", None),
            ("short id", "abc.0123456789abcdef", None),
            ("short secret", "abcdef.0123456789abcde", None),
            ("long secret", "abcdef.0123456789abcdef0", None),
            ("no dot", "abcdef0123456789abcdef", None),
            ("two dots", "abcdef.0123456789.abcdef", None),
            ("punctuation", "abc-ef.0123456789abcdef", None),
            ("trailing newline", "abcdef.0123456789abcdef\n", None),
            ("non-ASCII", "abcdéf.0123456789abcdef", None),
            ("empty", "", None),
        ];
        for (name, input, want) in cases {
            let got = Token::parse(input);
            match want {
                Some((id, secret)) => {
                    let t = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!((t.id(), t.secret()), (*id, *secret), "{name}");
                    assert_eq!(t.expose(), *input, "{name}");
                }
                None => assert_eq!(got, Err(TokenError::Malformed), "{name}"),
            }
        }
        assert_eq!(
            TokenError::Malformed.to_string(),
            r#"the bootstrap token was not of the form "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z""#
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let shown = format!("{:?}", token());
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(shown.contains("abcdef"), "{shown}");
    }

    #[test]
    fn generation_maps_bytes_below_252_and_skips_the_rest() {
        type Case = (&'static str, Vec<u8>, Result<&'static str, TokenError>);
        let seq = |n: usize| (0..n).map(|i| i as u8).collect::<Vec<u8>>();
        let cases: Vec<Case> = vec![
            ("bytes 0..22 map to the alphabet in order", seq(44), Ok("012345.6789abcdefghijkl")),
            (
                "252 and above are skipped, 36 wraps to 0, 251 is the last kept",
                [252u8, 255, 36, 71, 251].into_iter().chain(std::iter::repeat_n(1u8, 39)).collect(),
                Ok("0zz111.1111111111111111"),
            ),
            ("a generator that only yields 255 fails", vec![255; 44], Err(TokenError::Random)),
        ];
        for (name, bytes, want) in cases {
            let mut stream = bytes.iter().copied().cycle();
            let got = Token::generate_with(|buf| {
                buf.iter_mut().for_each(|b| *b = stream.next().unwrap_or(0));
                Ok(())
            });
            assert_eq!(got.map(|t| t.expose()), want.map(str::to_string), "{name}");
        }
        let failing = Token::generate_with(|_| Err(TokenError::Random));
        assert_eq!(failing, Err(TokenError::Random), "a failing generator");
    }

    #[test]
    fn system_generation_is_well_formed_and_varies() {
        let a = Token::generate().unwrap_or_else(|e| panic!("{e}"));
        let b = Token::generate().unwrap_or_else(|e| panic!("{e}"));
        assert!(Token::parse(&a.expose()).is_ok(), "well-formed");
        assert_ne!(a, b, "two fresh tokens differ");
    }

    #[test]
    fn validation_speaks_kubeadms_words() {
        let cases: &[(&str, &[&str], &[&str], Result<(), Vec<&str>>)] = &[
            ("defaults", DEFAULT_USAGES, DEFAULT_GROUPS, Ok(())),
            ("signing only, no groups", &["signing"], &[], Ok(())),
            ("no usages, no groups", &[], &[], Ok(())),
            (
                "unknown usages, sorted and deduplicated",
                &["signing", "zeta", "alpha", "zeta"],
                &[],
                Err(vec![
                    "invalid bootstrap token usage string: alpha,zeta, valid usage options: signing,authentication",
                ]),
            ),
            (
                "groups without authentication",
                &["signing"],
                DEFAULT_GROUPS,
                Err(vec!["token groups cannot be specified unless --usages includes \"authentication\""]),
            ),
            (
                "a group outside system:bootstrappers:",
                &["authentication"],
                &["system:masters"],
                Err(vec![
                    r#"bootstrap group "system:masters" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
                ]),
            ),
            (
                "a group ending in a colon",
                &["authentication"],
                &["system:bootstrappers:x:"],
                Err(vec![
                    r#"bootstrap group "system:bootstrappers:x:" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
                ]),
            ),
            (
                "every problem at once",
                &["bogus"],
                &["nope"],
                Err(vec![
                    "invalid bootstrap token usage string: bogus, valid usage options: signing,authentication",
                    "token groups cannot be specified unless --usages includes \"authentication\"",
                    r#"bootstrap group "nope" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
                ]),
            ),
        ];
        for (name, usages, groups, want) in cases {
            let want = want.clone().map_err(|v| strings(&v));
            assert_eq!(validate(&strings(usages), &strings(groups)), want, "{name}");
        }
    }

    #[test]
    fn groups_follow_the_pattern() {
        let long_ok = format!("system:bootstrappers:{}", "a".repeat(256));
        let too_long = format!("system:bootstrappers:{}", "a".repeat(257));
        let cases: &[(&str, &str, bool)] = &[
            ("kubeadm default", "system:bootstrappers:kubeadm:default-node-token", true),
            ("one character", "system:bootstrappers:a", true),
            ("256 characters", &long_ok, true),
            ("257 characters", &too_long, false),
            ("nothing after the prefix", "system:bootstrappers:", false),
            ("the base group", "system:bootstrappers", false),
            ("upper case", "system:bootstrappers:Worker", false),
            ("ends with a dash", "system:bootstrappers:worker-", false),
            ("other prefix", "system:nodes", false),
        ];
        for (name, g, want) in cases {
            assert_eq!(is_valid_group(g), *want, "{name}");
        }
    }

    #[test]
    fn secrets_are_written_as_kubeadm_writes_them() {
        let now = at("2026-01-01T00:00:00.750Z");
        let spec = |ttl: Duration, usages: &[&str], groups: &[&str], description: &str| TokenSpec {
            token: token(),
            ttl,
            usages: strings(usages),
            groups: strings(groups),
            description: description.into(),
        };
        let cases: Vec<(&str, TokenSpec, Vec<(&str, &str)>)> = vec![
            (
                "defaults",
                spec(DEFAULT_TTL, DEFAULT_USAGES, DEFAULT_GROUPS, ""),
                vec![
                    ("auth-extra-groups", "system:bootstrappers:kubeadm:default-node-token"),
                    ("expiration", "2026-01-02T00:00:00Z"),
                    ("token-id", "abcdef"),
                    ("token-secret", "0123456789abcdef"),
                    ("usage-bootstrap-authentication", "true"),
                    ("usage-bootstrap-signing", "true"),
                ],
            ),
            (
                "ttl 0 never expires, description kept",
                spec(Duration::zero(), &["signing"], &[], "joins rack 7"),
                vec![
                    ("description", "joins rack 7"),
                    ("token-id", "abcdef"),
                    ("token-secret", "0123456789abcdef"),
                    ("usage-bootstrap-signing", "true"),
                ],
            ),
            (
                "negative ttl writes no expiration, as kubeadm",
                spec(Duration::seconds(-5), &[], &[], ""),
                vec![("token-id", "abcdef"), ("token-secret", "0123456789abcdef")],
            ),
            (
                "several groups joined by commas",
                spec(
                    Duration::seconds(90),
                    &["authentication"],
                    &["system:bootstrappers:a", "system:bootstrappers:b"],
                    "",
                ),
                vec![
                    ("auth-extra-groups", "system:bootstrappers:a,system:bootstrappers:b"),
                    ("expiration", "2026-01-01T00:01:30Z"),
                    ("token-id", "abcdef"),
                    ("token-secret", "0123456789abcdef"),
                    ("usage-bootstrap-authentication", "true"),
                ],
            ),
        ];
        for (name, spec, want) in cases {
            let s = to_secret(&spec, now);
            assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"), "{name}");
            assert_eq!(s.metadata.namespace.as_deref(), Some("kube-system"), "{name}");
            assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE), "{name}");
            let want: BTreeMap<String, String> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            assert_eq!(data_map(&s), want, "{name}");
            assert_eq!(from_secret(&s).map(|i| i.token), Ok(token()), "{name}: reads back");
        }
    }

    #[test]
    fn expiration_is_read_as_upstream_reads_it() {
        let now = at("2026-01-01T00:00:00Z");
        let cases: &[(&str, Option<&str>, Expiration)] = &[
            ("no key", None, Expiration::Never),
            ("empty", Some(""), Expiration::Never),
            (
                "in the future",
                Some("2026-01-01T01:00:00Z"),
                Expiration::At { at: at("2026-01-01T01:00:00Z"), remaining: Duration::hours(1) },
            ),
            (
                "offset converted to UTC",
                Some("2026-01-01T02:00:00+01:00"),
                Expiration::At { at: at("2026-01-01T01:00:00Z"), remaining: Duration::hours(1) },
            ),
            ("exactly now", Some("2026-01-01T00:00:00Z"), Expiration::Expired),
            ("in the past", Some("2025-12-31T23:59:59Z"), Expiration::Expired),
            ("unparsable counts as expired", Some("tomorrow"), Expiration::Expired),
            ("lower-case t counts as expired", Some("2030-01-01t00:00:00Z"), Expiration::Expired),
        ];
        for (name, value, want) in cases {
            let pairs: Vec<(&str, &str)> = value.map(|v| vec![(KEY_EXPIRATION, v)]).unwrap_or_default();
            assert_eq!(expiration(&secret(&pairs), now), *want, "{name}");
        }
    }

    #[test]
    fn signing_tokens() {
        let now = at("2026-01-01T00:00:00Z");
        let good: &[(&str, &str)] = &[
            (KEY_TOKEN_ID, "abcdef"),
            (KEY_TOKEN_SECRET, "0123456789abcdef"),
            (KEY_USAGE_SIGNING, "true"),
            (KEY_EXPIRATION, "2026-01-02T00:00:00Z"),
        ];
        let with = |edit: &dyn Fn(&mut Secret)| {
            let mut s = secret(good);
            edit(&mut s);
            s
        };
        let set = |k: &'static str, v: &'static str| {
            move |s: &mut Secret| {
                s.data.get_or_insert_with(Default::default).insert(k.into(), ByteString(v.as_bytes().to_vec()));
            }
        };
        let unset = |k: &'static str| {
            move |s: &mut Secret| {
                s.data.get_or_insert_with(Default::default).remove(k);
            }
        };
        let cases: Vec<(&str, Secret, bool)> = vec![
            ("valid", with(&|_| {}), true),
            ("no expiration", with(&unset(KEY_EXPIRATION)), true),
            ("expired", with(&set(KEY_EXPIRATION, "2025-01-01T00:00:00Z")), false),
            ("unparsable expiration", with(&set(KEY_EXPIRATION, "soon")), false),
            ("signing not true", with(&set(KEY_USAGE_SIGNING, "yes")), false),
            ("signing missing", with(&unset(KEY_USAGE_SIGNING)), false),
            ("id differs from the name", with(&set(KEY_TOKEN_ID, "zzzzzz")), false),
            ("id missing", with(&unset(KEY_TOKEN_ID)), false),
            ("secret missing", with(&unset(KEY_TOKEN_SECRET)), false),
            ("secret malformed", with(&set(KEY_TOKEN_SECRET, "short")), false),
            ("wrong type", with(&|s| s.type_ = Some("Opaque".into())), false),
            ("other namespace", with(&|s| s.metadata.namespace = Some("default".into())), false),
            ("name without the prefix", with(&|s| s.metadata.name = Some("abcdef".into())), false),
            ("malformed id in the name", with(&|s| s.metadata.name = Some("bootstrap-token-ABCDEF".into())), false),
        ];
        for (name, s, want) in cases {
            assert_eq!(signing_token(&s, now), want.then(token), "{name}");
        }
    }

    #[test]
    fn secrets_read_back_for_listing() {
        let full: &[(&str, &str)] = &[
            (KEY_TOKEN_ID, "abcdef"),
            (KEY_TOKEN_SECRET, "0123456789abcdef"),
            (KEY_EXPIRATION, "2026-01-02T03:04:05+02:00"),
            (KEY_DESCRIPTION, "rack 7"),
            (KEY_USAGE_SIGNING, "true"),
            (KEY_USAGE_AUTHENTICATION, "true"),
            ("usage-bootstrap-other", "false"),
            (KEY_EXTRA_GROUPS, "system:bootstrappers:a,system:bootstrappers:b"),
        ];
        let info = from_secret(&secret(full)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(info.token, token());
        assert_eq!(info.description, "rack 7");
        assert_eq!(info.expires.map(|t| kustos_ca::rfc3339::format(&t)).as_deref(), Some("2026-01-02T03:04:05+02:00"));
        assert_eq!(info.usages, strings(&["authentication", "signing"]), "sorted, only \"true\"");
        assert_eq!(info.groups, strings(&["system:bootstrappers:a", "system:bootstrappers:b"]));

        let renamed = {
            let mut s = secret(full);
            s.metadata.name = Some("bootstrap-token-zzzzzz".into());
            s
        };
        let cases: Vec<(&str, Secret, &str)> = vec![
            ("no id", secret(&[(KEY_TOKEN_SECRET, "0123456789abcdef")]), "bootstrap Token Secret has no token-id data: bootstrap-token-abcdef"),
            ("name mismatch", renamed, "bootstrap token name is not of the form 'bootstrap-token-(token-id)'. Actual: \"bootstrap-token-zzzzzz\". Expected: \"bootstrap-token-abcdef\""),
            ("no secret", secret(&[(KEY_TOKEN_ID, "abcdef")]), "bootstrap Token Secret has no token-secret data: bootstrap-token-abcdef"),
            ("malformed secret", secret(&[(KEY_TOKEN_ID, "abcdef"), (KEY_TOKEN_SECRET, "x")]), "bootstrap Token Secret is invalid and couldn't be parsed"),
            ("bad expiration", secret(&[(KEY_TOKEN_ID, "abcdef"), (KEY_TOKEN_SECRET, "0123456789abcdef"), (KEY_EXPIRATION, "never")]), "can't parse expiration time of bootstrap token \"bootstrap-token-abcdef\""),
        ];
        for (name, s, want) in cases {
            let err = from_secret(&s).err().unwrap_or_default();
            assert!(err.starts_with(want), "{name}: {err}");
            assert!(!err.contains("0123456789abcdef"), "{name}: the secret is never shown: {err}");
        }
        let bare = from_secret(&secret(&[(KEY_TOKEN_ID, "abcdef"), (KEY_TOKEN_SECRET, "0123456789abcdef")]));
        assert_eq!(
            bare.map(|i| (i.expires, i.usages, i.groups, i.description)),
            Ok((None, vec![], vec![], String::new())),
            "a bare token"
        );
    }

    #[test]
    fn names_and_ids() {
        let cases: &[(&str, Option<&str>)] = &[
            ("bootstrap-token-abcdef", Some("abcdef")),
            ("bootstrap-token-abcde", None),
            ("bootstrap-token-ABCDEF", None),
            ("token-abcdef", None),
        ];
        for (name, want) in cases {
            assert_eq!(id_from_secret_name(name), *want, "{name}");
        }
        assert_eq!(secret_name("abcdef"), "bootstrap-token-abcdef");
        assert!(is_valid_id("a1b2c3") && !is_valid_id("a1b2c") && !is_valid_id("a1b2c3d"));
    }
}
