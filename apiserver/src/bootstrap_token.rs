//! Bootstrap-token authentication: `Authorization: Bearer <id>.<secret>` checked against the
//! Secret `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`.
//!
//! The token authenticates as `system:bootstrap:<id>` in `system:bootstrappers` plus the
//! Secret's `auth-extra-groups` when the Secret is not being deleted, its `token-id` and
//! `token-secret` match (the secret compared in constant time), `expiration` (RFC 3339) has
//! not passed and `usage-bootstrap-authentication` is `"true"`. Like upstream, a bootstrap
//! token carries no audience: it is valid for the apiserver's own audiences only.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::authn::{TokenAuthenticator, TokenResult, UserInfo};
use crate::storage::Storage;

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const SECRET_NAME_PREFIX: &str = "bootstrap-token-";
pub const USER_PREFIX: &str = "system:bootstrap:";
pub const DEFAULT_GROUP: &str = "system:bootstrappers";
const NAMESPACE: &str = "kube-system";

/// `<id>.<secret>` → (id, secret) when the token has the bootstrap token shape
/// `[a-z0-9]{6}\.[a-z0-9]{16}`.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// A valid extra group: `system:bootstrappers:` then `[a-z0-9:-]{0,255}[a-z0-9]`.
fn valid_group(g: &str) -> bool {
    let Some(rest) = g.strip_prefix("system:bootstrappers:") else { return false };
    let b = rest.as_bytes();
    !b.is_empty()
        && b.len() <= 256
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b':' | b'-'))
        && b.last().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// A `data` value of the Secret (base64 in the stored JSON).
fn data(secret: &Value, key: &str) -> Option<Vec<u8>> {
    let s = secret.get("data")?.get(key)?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

fn data_str(secret: &Value, key: &str) -> Option<String> {
    data(secret, key).and_then(|b| String::from_utf8(b).ok())
}

/// The decision for a token `<id>.<secret_part>` against its Secret at `now`: the user, or
/// why not (never containing the secret).
pub fn check(secret: &Value, id: &str, secret_part: &str, now: DateTime<Utc>) -> Result<UserInfo, String> {
    let name = format!("{NAMESPACE}/{SECRET_NAME_PREFIX}{id}");
    let fail = |why: &str| Err(format!("secret {name} {why}"));
    if secret.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        return fail("is deleted and awaiting removal");
    }
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) || secret.get("data").is_none() {
        return fail(&format!("has invalid type, expected {SECRET_TYPE}"));
    }
    let stored = data(secret, "token-secret").unwrap_or_default();
    if !crate::authn::constant_time_eq(&stored, secret_part.as_bytes()) {
        return fail("has invalid value for key token-secret");
    }
    if data_str(secret, "token-id").as_deref() != Some(id) {
        return fail("has invalid value for key token-id");
    }
    if let Some(exp) = data_str(secret, "expiration") {
        match DateTime::parse_from_rfc3339(&exp) {
            Ok(t) if t.with_timezone(&Utc) > now => {}
            Ok(_) => return fail(&format!("has expired (expiration {exp})")),
            Err(_) => return fail(&format!("has an unparsable expiration {exp:?}")),
        }
    }
    if data_str(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return fail("not marked usage-bootstrap-authentication=true");
    }
    let mut groups = vec![DEFAULT_GROUP.to_string()];
    if let Some(extra) = data_str(secret, "auth-extra-groups") {
        for g in extra.split(',').map(str::trim) {
            if !valid_group(g) {
                return fail(&format!(
                    "has invalid value for key auth-extra-groups: {g:?} is not a valid bootstrap group"
                ));
            }
            groups.push(g.to_string());
        }
    }
    groups.sort();
    groups.dedup();
    Ok(UserInfo { name: format!("{USER_PREFIX}{id}"), groups, ..Default::default() })
}

/// The intersection of two audience lists, in the order of `a`.
fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// The authenticator: reads the Secret from the store on every use.
pub struct BootstrapTokenAuthenticator {
    storage: Arc<dyn Storage>,
    /// Storage key of a Secret in kube-system, without the name.
    key_prefix: String,
    api_audiences: Vec<String>,
}

impl BootstrapTokenAuthenticator {
    /// `secrets_key_prefix`: the secrets resource's storage key for namespace kube-system
    /// ending with `/`.
    pub fn new(storage: Arc<dyn Storage>, secrets_key_prefix: String, api_audiences: Vec<String>) -> Self {
        BootstrapTokenAuthenticator { storage, key_prefix: secrets_key_prefix, api_audiences }
    }

    pub fn for_registry(
        storage: Arc<dyn Storage>,
        registry: &crate::registry::Registry,
        api_audiences: Vec<String>,
    ) -> anyhow::Result<Self> {
        let def = registry.find("", "v1", "secrets").ok_or_else(|| anyhow::anyhow!("secrets are not registered"))?;
        Ok(Self::new(storage, def.ns_prefix(Some(NAMESPACE)), api_audiences))
    }
}

#[async_trait]
impl TokenAuthenticator for BootstrapTokenAuthenticator {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> TokenResult {
        let Some((id, secret_part)) = parse_token(token) else { return TokenResult::NotMine };
        // Audience-agnostic: valid only for the apiserver's own audiences.
        let auds = if self.api_audiences.is_empty() { Vec::new() } else { intersect(&self.api_audiences, audiences) };
        if !self.api_audiences.is_empty() && auds.is_empty() {
            return TokenResult::Invalid("bootstrap token: no requested audience is the apiserver's".into());
        }
        let key = format!("{}{SECRET_NAME_PREFIX}{id}", self.key_prefix);
        let kv = match self.storage.get(&key).await {
            Ok(Some(kv)) => kv,
            Ok(None) => {
                return TokenResult::Invalid(format!(
                    "bootstrap token {id}: no secret {NAMESPACE}/{SECRET_NAME_PREFIX}{id}"
                ))
            }
            Err(e) => return TokenResult::Invalid(format!("bootstrap token {id}: reading its secret: {e}")),
        };
        let secret: Value = match serde_json::from_slice(&kv.value) {
            Ok(v) => v,
            Err(e) => return TokenResult::Invalid(format!("bootstrap token {id}: corrupt secret: {e}")),
        };
        match check(&secret, id, secret_part, Utc::now()) {
            Ok(user) => TokenResult::Authenticated { user, audiences: auds },
            Err(why) => TokenResult::Invalid(why),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(edit: impl FnOnce(&mut Value)) -> Value {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
            "data": {
                "token-id": b64("abcdef"), "token-secret": b64("0123456789abcdef"),
                "usage-bootstrap-authentication": b64("true"),
                "expiration": b64("2030-01-01T00:00:00Z"),
            },
        });
        edit(&mut s);
        s
    }

    fn set(key: &'static str, value: &'static str) -> impl FnOnce(&mut Value) {
        move |s| s["data"][key] = json!(b64(value))
    }

    #[test]
    fn tokens_are_recognised_by_shape() {
        assert_eq!(parse_token("abcdef.0123456789abcdef"), Some(("abcdef", "0123456789abcdef")));
        for bad in [
            "ABCDEF.0123456789abcdef",
            "abc.def",
            "abcdef.0123456789abcde",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcdeg.x",
            "",
            ".",
            "abcdé.0123456789abcdef",
        ] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn check_applies_every_rule() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc);
        type Case = (&'static str, Value, &'static str, Result<Vec<&'static str>, &'static str>);
        let cases: Vec<Case> = vec![
            ("valid", secret(|_| {}), "0123456789abcdef", Ok(vec!["system:bootstrappers"])),
            ("wrong secret", secret(|_| {}), "0123456789abcdee", Err("invalid value for key token-secret")),
            ("wrong type", secret(|s| s["type"] = json!("Opaque")), "0123456789abcdef", Err("invalid type")),
            (
                "no data",
                secret(|s| s.as_object_mut().unwrap().remove("data").map(drop).unwrap_or(())),
                "0123456789abcdef",
                Err("invalid type"),
            ),
            ("id mismatch", secret(set("token-id", "abcdeg")), "0123456789abcdef", Err("token-id")),
            ("expired", secret(set("expiration", "2020-01-01T00:00:00Z")), "0123456789abcdef", Err("expired")),
            ("bad expiration", secret(set("expiration", "tomorrow")), "0123456789abcdef", Err("unparsable")),
            (
                "no expiration",
                secret(|s| {
                    s["data"].as_object_mut().unwrap().remove("expiration");
                }),
                "0123456789abcdef",
                Ok(vec!["system:bootstrappers"]),
            ),
            (
                "usage false",
                secret(set("usage-bootstrap-authentication", "false")),
                "0123456789abcdef",
                Err("usage-bootstrap-authentication"),
            ),
            (
                "usage missing",
                secret(|s| {
                    s["data"].as_object_mut().unwrap().remove("usage-bootstrap-authentication");
                }),
                "0123456789abcdef",
                Err("usage-bootstrap-authentication"),
            ),
            (
                "extra groups",
                secret(set(
                    "auth-extra-groups",
                    "system:bootstrappers:worker, system:bootstrappers:kubeadm:default-node-token",
                )),
                "0123456789abcdef",
                Ok(vec![
                    "system:bootstrappers",
                    "system:bootstrappers:kubeadm:default-node-token",
                    "system:bootstrappers:worker",
                ]),
            ),
            (
                "foreign extra group",
                secret(set("auth-extra-groups", "system:masters")),
                "0123456789abcdef",
                Err("auth-extra-groups"),
            ),
            (
                "bad extra group",
                secret(set("auth-extra-groups", "system:bootstrappers:Bad")),
                "0123456789abcdef",
                Err("auth-extra-groups"),
            ),
            (
                "deleting",
                secret(|s| s["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z")),
                "0123456789abcdef",
                Err("deleted"),
            ),
        ];
        for (name, s, secret_part, want) in cases {
            let got = check(&s, "abcdef", secret_part, now);
            match (got, want) {
                (Ok(u), Ok(groups)) => {
                    assert_eq!(u.name, "system:bootstrap:abcdef", "{name}");
                    assert_eq!(u.groups, groups, "{name}");
                }
                (Err(e), Err(w)) => {
                    assert!(e.contains(w), "{name}: {e}");
                    assert!(!e.contains("0123456789abcde"), "{name}: the reason never holds the secret: {e}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[tokio::test]
    async fn authenticator_reads_the_secret_and_checks_audiences() {
        let store: Arc<dyn Storage> = Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap());
        let reg = crate::registry::Registry::builtin();
        let def = reg.find("", "v1", "secrets").unwrap();
        store
            .create(
                &def.key(Some("kube-system"), "bootstrap-token-abcdef"),
                serde_json::to_vec(&secret(|_| {})).unwrap(),
            )
            .await
            .unwrap();
        let mut wrong_ns = secret(|_| {});
        wrong_ns["metadata"]["namespace"] = json!("default");
        store
            .create(&def.key(Some("default"), "bootstrap-token-zzzzzz"), serde_json::to_vec(&wrong_ns).unwrap())
            .await
            .unwrap();
        let a = BootstrapTokenAuthenticator::for_registry(store, &reg, vec!["api".into()]).unwrap();
        let api = vec!["api".to_string()];
        assert!(matches!(
            a.authenticate_token("abcdef.0123456789abcdef", &api).await,
            TokenResult::Authenticated { ref audiences, .. } if audiences == &api
        ));
        assert!(matches!(
            a.authenticate_token("abcdef.0123456789abcdef", &["other".into()]).await,
            TokenResult::Invalid(_)
        ));
        assert!(matches!(a.authenticate_token("zzzzzz.0123456789abcdef", &api).await, TokenResult::Invalid(_)));
        assert!(matches!(a.authenticate_token("not-a-bootstrap-token", &api).await, TokenResult::NotMine));
    }
}
