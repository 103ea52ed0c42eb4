//! Bootstrap-token Secrets as Kubernetes objects, for the token cleaner, the bootstrap
//! signer and `kustos token`: the rules (token format, keys, expiration, which token may
//! sign, reading a Secret back) are [`kustos_ca::bootstrap_token`]'s; this module only turns
//! a [`Secret`] into the [`SecretView`] they read, and a [`TokenSpec`] into the Secret
//! kubeadm writes.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::ObjectMeta;
use kustos_ca::bootstrap_token::{
    self as bt, Expiration, SecretError, SecretView, Token, TokenInfo, TokenSpec, NAMESPACE, SECRET_TYPE,
};

/// What the rules of [`kustos_ca::bootstrap_token`] read of `secret`.
pub fn view(secret: &Secret) -> SecretView<'_> {
    SecretView {
        namespace: secret.metadata.namespace.as_deref().unwrap_or_default(),
        name: secret.metadata.name.as_deref().unwrap_or_default(),
        type_: secret.type_.as_deref(),
        being_deleted: secret.metadata.deletion_timestamp.is_some(),
        data: secret.data.as_ref().map(|d| d.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())).collect()),
    }
}

/// The Secret for `spec` created at `now`, as kubeadm writes it.
pub fn to_secret(spec: &TokenSpec, now: DateTime<Utc>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(spec.token.secret_name()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(bt::secret_data(spec, now).into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Default::default()
    }
}

/// A `data` value as text; missing (or not UTF-8) reads as empty. For comparing with a
/// known value and copying; the rules themselves read bytes ([`SecretView::get`]).
pub fn data<'a>(secret: &'a Secret, key: &str) -> &'a str {
    std::str::from_utf8(view(secret).get(key)).unwrap_or_default()
}

/// [`bt::expiration`] of `secret` at `now`.
pub fn expiration(secret: &Secret, now: DateTime<Utc>) -> Expiration {
    bt::expiration(&view(secret), now)
}

/// Whether `secret` is a bootstrap-token Secret: its type in kube-system.
pub fn is_token_secret(secret: &Secret) -> bool {
    view(secret).is_token_secret()
}

/// [`bt::signing_token`]: the token `secret` holds when it may sign cluster-info at `now`.
pub fn signing_token(secret: &Secret, now: DateTime<Utc>) -> Option<Token> {
    bt::signing_token(&view(secret), now)
}

/// [`bt::read_secret`]: the token `secret` holds, or why it is not a usable token.
pub fn from_secret(secret: &Secret) -> Result<TokenInfo, SecretError> {
    bt::read_secret(&view(secret))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    fn token() -> Token {
        Token::from_parts("abcdef", "0123456789abcdef").unwrap_or_else(|e| panic!("{e}"))
    }

    fn spec(ttl: chrono::Duration) -> TokenSpec {
        TokenSpec {
            token: token(),
            ttl,
            usages: bt::DEFAULT_USAGES.iter().map(|s| s.to_string()).collect(),
            groups: bt::DEFAULT_GROUPS.iter().map(|s| s.to_string()).collect(),
            description: String::new(),
        }
    }

    #[test]
    fn the_view_carries_what_the_secret_holds() {
        let mut s = to_secret(&spec(bt::DEFAULT_TTL), at("2026-01-01T00:00:00Z"));
        let v = view(&s);
        assert_eq!((v.namespace, v.name, v.type_), ("kube-system", "bootstrap-token-abcdef", Some(SECRET_TYPE)));
        assert!(!v.being_deleted && v.is_token_secret());
        assert_eq!(v.get(bt::KEY_TOKEN_ID), b"abcdef");
        assert_eq!(v.get(bt::KEY_EXPIRATION), b"2026-01-02T00:00:00Z");
        assert_eq!(v.get("absent"), b"");
        s.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        s.data = None;
        let v = view(&s);
        assert!(v.being_deleted && v.data.is_none());
    }

    #[test]
    fn secrets_written_are_read_back() {
        let now = at("2026-01-01T00:00:00Z");
        let cases: &[(&str, chrono::Duration, Expiration)] = &[
            (
                "a day",
                bt::DEFAULT_TTL,
                Expiration::At { at: at("2026-01-02T00:00:00Z"), remaining: chrono::Duration::hours(24) },
            ),
            ("no ttl", chrono::Duration::zero(), Expiration::Never),
        ];
        for (name, ttl, want) in cases {
            let s = to_secret(&spec(*ttl), now);
            assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"), "{name}");
            assert_eq!(s.metadata.namespace.as_deref(), Some(NAMESPACE), "{name}");
            assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE), "{name}");
            assert!(is_token_secret(&s), "{name}");
            assert_eq!(expiration(&s, now), *want, "{name}");
            assert_eq!(signing_token(&s, now), Some(token()), "{name}");
            assert_eq!(from_secret(&s).map(|i| i.token), Ok(token()), "{name}");
            assert_eq!(data(&s, bt::KEY_TOKEN_ID), "abcdef", "{name}");
        }
    }

    #[test]
    fn an_expiration_that_is_not_text_counts_as_passed() {
        let now = at("2026-01-01T00:00:00Z");
        let mut s = to_secret(&spec(chrono::Duration::zero()), now);
        s.data
            .get_or_insert_with(Default::default)
            .insert(bt::KEY_EXPIRATION.into(), ByteString(b"2030-01-01T00:00:00Z\xff".to_vec()));
        assert_eq!(expiration(&s, now), Expiration::Expired);
        assert_eq!(signing_token(&s, now), None);
        assert!(from_secret(&s).is_err());
    }
}
