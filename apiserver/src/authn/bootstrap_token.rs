//! Bootstrap-token authentication: `Authorization: Bearer <id>.<secret>` checked against the
//! Secret `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`.
//!
//! The token authenticates as `system:bootstrap:<id>` in `system:bootstrappers` plus the
//! Secret's `auth-extra-groups` when the Secret is not being deleted, its `token-secret`
//! (compared in constant time) and `token-id` match, `expiration` (RFC 3339) has not passed
//! and `usage-bootstrap-authentication` is `"true"`. An invalid extra group rejects the token
//! as a whole. A bootstrap token names no audience of its own: it is good for the apiserver's
//! audiences only.
//!
//! The Secrets are read from a cache that a watch on `kube-system/bootstrap-token-*` keeps
//! current (as upstream reads them from an informer), each decoded once per change: a storm
//! of kubelets on one token costs no storage read and no decode per request, before flow
//! control has had a say. A token the cache does not know (just created, or not a token at
//! all) is looked up in storage.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kustos_ca::bootstrap_token::{self as bt, AuthError, SecretView, NAMESPACE, SECRET_NAME_PREFIX};

use crate::authn::{TokenAuthenticator, TokenResult, UserInfo};
use crate::storage::{EventKind, ListOptions, Storage};

/// What the rules of [`kustos_ca::bootstrap_token`] read of `secret`.
fn view(secret: &Secret) -> SecretView<'_> {
    SecretView {
        namespace: secret.metadata.namespace.as_deref().unwrap_or_default(),
        name: secret.metadata.name.as_deref().unwrap_or_default(),
        type_: secret.type_.as_deref(),
        being_deleted: secret.metadata.deletion_timestamp.is_some(),
        data: secret.data.as_ref().map(|d| d.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())).collect()),
    }
}

/// The decision for a token `<id>.<secret_part>` against the Secret found for it at `now`
/// ([`bt::authenticate`]): the user, or why not. Reasons name the Secret and the failed
/// rule, never the secret.
pub fn check(secret: &Secret, id: &str, secret_part: &str, now: DateTime<Utc>) -> Result<UserInfo, AuthError> {
    let user = bt::authenticate(&view(secret), id, secret_part, now)?;
    Ok(UserInfo { name: user.name, groups: user.groups, ..Default::default() })
}

/// The audiences a response carries, as upstream's audience-agnostic wrapper decides: no
/// requested audiences → valid, none named; otherwise the requested audiences that are the
/// apiserver's own, and not valid (None) when there are none.
pub fn audiences(api_audiences: &[String], requested: &[String]) -> Option<Vec<String>> {
    if requested.is_empty() {
        return Some(Vec::new());
    }
    let both: Vec<String> = api_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
    (!both.is_empty()).then_some(both)
}

/// The authenticator.
pub struct BootstrapTokenAuthenticator {
    storage: Arc<dyn Storage>,
    /// The `secrets` resource, whose `key()` places the Secret in the store.
    secrets: crate::registry::ResourceDef,
    api_audiences: Vec<String>,
    cache: Arc<TokenCache>,
}

/// A stored token Secret, decoded once per change: the Secret, or why its bytes do not read.
type Decoded = Arc<Result<Secret, String>>;

fn decode(stored: &[u8]) -> Decoded {
    Arc::new(serde_json::from_slice(stored).map_err(|e| e.to_string()))
}

/// The bootstrap-token Secrets by storage key, decoded (None until the first list is in).
#[derive(Default)]
struct TokenCache {
    secrets: RwLock<Option<HashMap<String, Decoded>>>,
}

impl TokenCache {
    fn get(&self, key: &str) -> Option<Decoded> {
        self.secrets.read().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(key).cloned()
    }

    fn replace(&self, all: HashMap<String, Decoded>) {
        *self.secrets.write().unwrap_or_else(|e| e.into_inner()) = Some(all);
    }

    fn apply(&self, kind: EventKind, key: String, value: Vec<u8>) {
        // Decoded before the lock is taken: readers never wait on a decode.
        let decoded = match kind {
            EventKind::Deleted => None,
            EventKind::Created | EventKind::Updated => Some(decode(&value)),
        };
        let mut guard = self.secrets.write().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = guard.as_mut() {
            match decoded {
                None => map.remove(&key),
                Some(secret) => map.insert(key, secret),
            };
        }
    }

    /// Stop answering from the cache (the watch broke; storage answers until the next list).
    fn clear(&self) {
        *self.secrets.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Fill the cache and keep it current: list, then watch from the list's revision; on any
/// failure (e.g. the revision was compacted), stop using the cache, wait, and start again.
/// Ends when the cache has no other owner left.
async fn follow(storage: Arc<dyn Storage>, prefix: String, cache: std::sync::Weak<TokenCache>) {
    use futures::StreamExt as _;
    loop {
        let Some(c) = cache.upgrade() else { return };
        let listed = storage.list(&prefix, ListOptions::default()).await;
        let watched = match listed {
            Ok(page) => {
                c.replace(page.items.into_iter().map(|kv| (kv.key, decode(&kv.value))).collect());
                storage.watch(&prefix, page.rev).await
            }
            Err(e) => Err(e),
        };
        drop(c);
        match watched {
            Ok(mut events) => {
                while let Some(ev) = events.next().await {
                    let Some(c) = cache.upgrade() else { return };
                    match ev {
                        Ok(ev) => c.apply(ev.kind, ev.key, ev.value),
                        Err(e) => {
                            tracing::debug!(error = %e, "bootstrap-token cache: watch ended; listing again");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "bootstrap-token cache: listing the token Secrets"),
        }
        if let Some(c) = cache.upgrade() {
            c.clear();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl BootstrapTokenAuthenticator {
    /// Secrets keyed as the registry's `secrets` resource keys them. Starts the loop that
    /// fills the cache under `tasks`, so it must be called within a Tokio runtime.
    pub fn for_registry(
        storage: Arc<dyn Storage>,
        registry: &crate::registry::Registry,
        api_audiences: Vec<String>,
        tasks: &crate::tasks::Tasks,
    ) -> anyhow::Result<Self> {
        let def = registry.find("", "v1", "secrets").ok_or_else(|| anyhow::anyhow!("secrets are not registered"))?;
        let cache = Arc::new(TokenCache::default());
        let prefix = def.key(Some(NAMESPACE), SECRET_NAME_PREFIX);
        let follower = follow(storage.clone(), prefix, Arc::downgrade(&cache));
        tasks.spawn("bootstrap-token-cache", async move {
            follower.await;
            Ok(())
        });
        Ok(BootstrapTokenAuthenticator { storage, secrets: def.clone(), api_audiences, cache })
    }
}

#[async_trait]
impl TokenAuthenticator for BootstrapTokenAuthenticator {
    async fn authenticate_token(&self, token: &str, requested: &[String]) -> TokenResult {
        let Some((id, secret_part)) = bt::parse_token(token) else { return TokenResult::NotMine };
        let Some(auds) = audiences(&self.api_audiences, requested) else {
            return TokenResult::Invalid(format!("bootstrap token {id}: not valid for the requested audiences"));
        };
        let key = self.secrets.key(Some(NAMESPACE), &format!("{SECRET_NAME_PREFIX}{id}"));
        let stored = match self.cache.get(&key) {
            Some(value) => value,
            None => match self.storage.get(&key).await {
                Ok(Some(kv)) => decode(&kv.value),
                Ok(None) => {
                    return TokenResult::Invalid(format!(
                        "no secret of name {NAMESPACE}/{SECRET_NAME_PREFIX}{id} to match bootstrap bearer token"
                    ))
                }
                Err(e) => return TokenResult::Invalid(format!("bootstrap token {id}: reading its secret: {e}")),
            },
        };
        let secret = match stored.as_ref() {
            Ok(s) => s,
            Err(e) => return TokenResult::Invalid(format!("bootstrap token {id}: unreadable secret: {e}")),
        };
        match check(secret, id, secret_part, Utc::now()) {
            Ok(user) => TokenResult::Authenticated { user, audiences: auds },
            Err(why) => TokenResult::Invalid(why.to_string()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::ByteString;
    use kustos_ca::bootstrap_token::{
        DEFAULT_GROUP, KEY_EXPIRATION, KEY_EXTRA_GROUPS, KEY_TOKEN_ID, KEY_TOKEN_SECRET, KEY_USAGE_AUTHENTICATION,
        SECRET_TYPE,
    };
    use serde_json::json;

    const ID: &str = "abcdef";
    const SECRET: &str = "0123456789abcdef";

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
    }

    /// A valid Secret for `abcdef.0123456789abcdef`, then `edit`.
    fn secret(edit: impl FnOnce(&mut Secret)) -> Secret {
        let mut s: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
            "data": {},
        }))
        .unwrap();
        for (k, v) in [
            (KEY_TOKEN_ID, ID),
            (KEY_TOKEN_SECRET, SECRET),
            (KEY_USAGE_AUTHENTICATION, "true"),
            (KEY_EXPIRATION, "2030-01-01T00:00:00Z"),
        ] {
            put(&mut s, k, v.as_bytes());
        }
        edit(&mut s);
        s
    }

    fn put(s: &mut Secret, key: &str, value: &[u8]) {
        s.data.get_or_insert_with(Default::default).insert(key.into(), ByteString(value.to_vec()));
    }

    fn set(key: &'static str, value: &'static str) -> impl FnOnce(&mut Secret) {
        move |s| put(s, key, value.as_bytes())
    }

    fn unset(key: &'static str) -> impl FnOnce(&mut Secret) {
        move |s| {
            s.data.as_mut().unwrap().remove(key);
        }
    }

    #[test]
    fn check_applies_every_rule() {
        type Case = (&'static str, Secret, &'static str, Result<Vec<&'static str>, &'static str>);
        let deleting =
            |s: &mut Secret| s.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let cases: Vec<Case> = vec![
            ("valid", secret(|_| {}), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("no expiration", secret(unset(KEY_EXPIRATION)), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("empty expiration", secret(set(KEY_EXPIRATION, "")), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("expiration with offset", secret(set(KEY_EXPIRATION, "2026-01-01T02:00:00+01:00")), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("description is ignored", secret(set("description", "for node n1")), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("signing usage is not needed", secret(set("usage-bootstrap-signing", "false")), SECRET, Ok(vec![DEFAULT_GROUP])),
            // Type.
            ("type Opaque", secret(|s| s.type_ = Some("Opaque".into())), SECRET, Err("has invalid type")),
            ("no type", secret(|s| s.type_ = None), SECRET, Err("has invalid type")),
            ("no data", secret(|s| s.data = None), SECRET, Err("has invalid type")),
            // Secret and id.
            ("wrong secret", secret(|_| {}), "0123456789abcdee", Err("invalid value for key token-secret")),
            ("no token-secret", secret(unset(KEY_TOKEN_SECRET)), SECRET, Err("invalid value for key token-secret")),
            ("longer stored secret", secret(set(KEY_TOKEN_SECRET, "0123456789abcdef0")), SECRET, Err("token-secret")),
            ("id mismatch", secret(set(KEY_TOKEN_ID, "abcdeg")), SECRET, Err("invalid value for key token-id")),
            ("no token-id", secret(unset(KEY_TOKEN_ID)), SECRET, Err("invalid value for key token-id")),
            // Expiration.
            ("expired", secret(set(KEY_EXPIRATION, "2020-01-01T00:00:00Z")), SECRET, Err("has expired")),
            ("expires right now", secret(set(KEY_EXPIRATION, "2026-01-01T00:00:00Z")), SECRET, Err("has expired")),
            ("expired by offset", secret(set(KEY_EXPIRATION, "2026-01-01T00:30:00+01:00")), SECRET, Err("has expired")),
            ("unparsable expiration", secret(set(KEY_EXPIRATION, "tomorrow")), SECRET, Err("unparsable")),
            ("date-only expiration", secret(set(KEY_EXPIRATION, "2030-01-01")), SECRET, Err("unparsable")),
            ("fractional seconds", secret(set(KEY_EXPIRATION, "2030-01-01T00:00:00.5Z")), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("lower-case t", secret(set(KEY_EXPIRATION, "2030-01-01t00:00:00Z")), SECRET, Err("unparsable")),
            ("space for T", secret(set(KEY_EXPIRATION, "2030-01-01 00:00:00Z")), SECRET, Err("unparsable")),
            ("lower-case z", secret(set(KEY_EXPIRATION, "2030-01-01T00:00:00z")), SECRET, Err("unparsable")),
            ("leap second", secret(set(KEY_EXPIRATION, "2030-12-31T23:59:60Z")), SECRET, Err("unparsable")),
            ("no zone", secret(set(KEY_EXPIRATION, "2030-01-01T00:00:00")), SECRET, Err("unparsable")),
            ("non-UTF-8 expiration", secret(|s| put(s, KEY_EXPIRATION, b"2030-01-01T00:00:00Z\xff")), SECRET, Err("unparsable")),
            // Usage.
            ("usage false", secret(set(KEY_USAGE_AUTHENTICATION, "false")), SECRET, Err("not marked usage-bootstrap-authentication=true")),
            ("usage True", secret(set(KEY_USAGE_AUTHENTICATION, "True")), SECRET, Err("usage-bootstrap-authentication")),
            ("usage 1", secret(set(KEY_USAGE_AUTHENTICATION, "1")), SECRET, Err("usage-bootstrap-authentication")),
            ("usage missing", secret(unset(KEY_USAGE_AUTHENTICATION)), SECRET, Err("usage-bootstrap-authentication")),
            // Deletion.
            ("being deleted", secret(deleting), SECRET, Err("is deleted and awaiting removal")),
            // Extra groups.
            (
                "extra groups, sorted and deduplicated",
                secret(set(
                    KEY_EXTRA_GROUPS,
                    "system:bootstrappers:worker,system:bootstrappers:kubeadm:default-node-token,system:bootstrappers:worker",
                )),
                SECRET,
                Ok(vec![DEFAULT_GROUP, "system:bootstrappers:kubeadm:default-node-token", "system:bootstrappers:worker"]),
            ),
            ("default group listed again", secret(set(KEY_EXTRA_GROUPS, "system:bootstrappers:x")), SECRET, Ok(vec![DEFAULT_GROUP, "system:bootstrappers:x"])),
            ("empty extra groups", secret(set(KEY_EXTRA_GROUPS, "")), SECRET, Ok(vec![DEFAULT_GROUP])),
            ("a group outside the prefix", secret(set(KEY_EXTRA_GROUPS, "system:masters")), SECRET, Err("has invalid value for key auth-extra-groups")),
            (
                "one bad group spoils all",
                secret(set(KEY_EXTRA_GROUPS, "system:bootstrappers:worker,system:masters")),
                SECRET,
                Err("auth-extra-groups"),
            ),
            ("spaces are not trimmed", secret(set(KEY_EXTRA_GROUPS, "system:bootstrappers:a, system:bootstrappers:b")), SECRET, Err("auth-extra-groups")),
            ("empty item", secret(set(KEY_EXTRA_GROUPS, "system:bootstrappers:a,")), SECRET, Err("auth-extra-groups")),
            ("uppercase group", secret(set(KEY_EXTRA_GROUPS, "system:bootstrappers:Bad")), SECRET, Err("auth-extra-groups")),
            ("bare default group", secret(set(KEY_EXTRA_GROUPS, "system:bootstrappers")), SECRET, Err("auth-extra-groups")),
            ("non-UTF-8 group", secret(|s| put(s, KEY_EXTRA_GROUPS, b"system:bootstrappers:\xff")), SECRET, Err("auth-extra-groups")),
        ];
        for (name, s, secret_part, want) in cases {
            let got = check(&s, ID, secret_part, now());
            match (got, want) {
                (Ok(u), Ok(groups)) => {
                    assert_eq!(u.name, "system:bootstrap:abcdef", "{name}");
                    assert_eq!(u.groups, groups, "{name}");
                    assert!(u.uid.is_empty() && u.extra.is_empty(), "{name}");
                }
                (Err(e), Err(w)) => {
                    let e = e.to_string();
                    assert!(e.contains(w), "{name}: {e}");
                    assert!(e.contains("kube-system/bootstrap-token-abcdef"), "{name}: names the secret: {e}");
                    assert!(!e.contains("0123456789abcde"), "{name}: the reason never holds the secret: {e}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn audiences_like_the_audience_agnostic_wrapper() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        type Case = (&'static str, Vec<String>, Vec<String>, Option<Vec<String>>);
        let cases: &[Case] = &[
            ("nothing requested", v(&["api"]), v(&[]), Some(v(&[]))),
            ("no api audiences, nothing requested", v(&[]), v(&[]), Some(v(&[]))),
            ("the apiserver's audience", v(&["api"]), v(&["api"]), Some(v(&["api"]))),
            ("the intersection", v(&["api", "k8s"]), v(&["other", "k8s"]), Some(v(&["k8s"]))),
            ("another audience", v(&["api"]), v(&["vault"]), None),
            ("no api audiences, one requested", v(&[]), v(&["vault"]), None),
        ];
        for (what, api, requested, want) in cases {
            assert_eq!(&audiences(api, requested), want, "{what}");
        }
    }

    #[tokio::test]
    async fn authenticator_finds_the_secret_by_namespace_and_name() {
        let store: Arc<dyn Storage> = Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap());
        let reg = crate::registry::Registry::builtin();
        let def = reg.find("", "v1", "secrets").unwrap();
        let put = |ns: &'static str, name: &'static str, s: Secret| {
            let store = store.clone();
            let key = def.key(Some(ns), name);
            async move { store.create(&key, serde_json::to_vec(&s).unwrap()).await.unwrap() }
        };
        put("kube-system", "bootstrap-token-abcdef", secret(|_| {})).await;
        // The same data in the wrong namespace, or under another name.
        let other = |id: &'static str| {
            secret(move |s| {
                put_id(s, id);
            })
        };
        fn put_id(s: &mut Secret, id: &str) {
            s.data.as_mut().unwrap().insert(KEY_TOKEN_ID.into(), ByteString(id.as_bytes().to_vec()));
        }
        put("default", "bootstrap-token-zzzzzz", other("zzzzzz")).await;
        put("kube-system", "token-yyyyyy", other("yyyyyy")).await;
        // Stored JSON that is not a Secret.
        store.create(&def.key(Some("kube-system"), "bootstrap-token-xxxxxx"), b"{\"data\": 1}".to_vec()).await.unwrap();

        let tasks = crate::tasks::Tasks::default();
        let a = BootstrapTokenAuthenticator::for_registry(store.clone(), &reg, vec!["api".into()], &tasks).unwrap();
        let api = vec!["api".to_string()];
        match a.authenticate_token("abcdef.0123456789abcdef", &api).await {
            TokenResult::Authenticated { user, audiences } => {
                assert_eq!(user.name, "system:bootstrap:abcdef");
                assert_eq!(user.groups, vec![DEFAULT_GROUP]);
                assert_eq!(audiences, api);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            a.authenticate_token("abcdef.0123456789abcdef", &[]).await,
            TokenResult::Authenticated { .. }
        ));
        let cases: &[(&str, &str, &[String])] = &[
            ("another audience", "abcdef.0123456789abcdef", &["vault".to_string()]),
            ("wrong secret", "abcdef.0123456789abcdee", &api),
            ("namespace default", "zzzzzz.0123456789abcdef", &api),
            ("another name", "yyyyyy.0123456789abcdef", &api),
            ("not a secret", "xxxxxx.0123456789abcdef", &api),
        ];
        for (what, token, auds) in cases {
            match a.authenticate_token(token, auds).await {
                TokenResult::Invalid(why) => assert!(!why.contains("0123456789abcde"), "{what}: {why}"),
                other => panic!("{what}: {other:?}"),
            }
        }
        for token in ["not-a-bootstrap-token", "ABCDEF.0123456789abcdef", "abc.def", "eyJ.eyJ.sig"] {
            assert_eq!(a.authenticate_token(token, &api).await, TokenResult::NotMine, "{token}");
        }
    }

    /// The cache fills from storage and follows changes to a token's Secret: a new secret
    /// part, then deletion, stop the old token.
    #[tokio::test]
    async fn the_cache_follows_changes_to_the_secret() {
        let store: Arc<dyn Storage> = Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap());
        let reg = crate::registry::Registry::builtin();
        let def = reg.find("", "v1", "secrets").unwrap();
        let key = def.key(Some("kube-system"), "bootstrap-token-abcdef");
        let rev = store.create(&key, serde_json::to_vec(&secret(|_| {})).unwrap()).await.unwrap();
        let tasks = crate::tasks::Tasks::default();
        let a = BootstrapTokenAuthenticator::for_registry(store.clone(), &reg, vec!["api".into()], &tasks).unwrap();
        let api = vec!["api".to_string()];
        let ok = |r: &TokenResult| matches!(r, TokenResult::Authenticated { .. });
        // Bounded polls: the cache is filled and updated by a watch, shortly after each change.
        let until = |want_ok: bool, token: &'static str| {
            let (a, api) = (&a, api.clone());
            async move {
                for _ in 0..200 {
                    if ok(&a.authenticate_token(token, &api).await) == want_ok {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                false
            }
        };
        assert!(until(true, "abcdef.0123456789abcdef").await, "the stored token authenticates");
        for _ in 0..200 {
            if a.cache.get(&key).is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(a.cache.get(&key).is_some(), "the cache holds the Secret after its first list");

        let changed = secret(|s| {
            s.data.as_mut().unwrap().insert(KEY_TOKEN_SECRET.into(), ByteString(b"fedcba9876543210".to_vec()));
        });
        let rev = store.update(&key, serde_json::to_vec(&changed).unwrap(), rev).await.unwrap();
        assert!(until(false, "abcdef.0123456789abcdef").await, "the old secret part stops working");
        assert!(ok(&a.authenticate_token("abcdef.fedcba9876543210", &api).await), "the new one works");

        store.delete(&key, rev).await.unwrap();
        assert!(until(false, "abcdef.fedcba9876543210").await, "a deleted token stops working");
        for _ in 0..200 {
            if a.cache.get(&key).is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(a.cache.get(&key).is_none(), "the deleted Secret left the cache");
    }
}
