//! `serviceaccount-token`: legacy `kubernetes.io/service-account-token` Secrets, as
//! kube-controller-manager's tokens controller.
//!
//! A token Secret names its ServiceAccount in annotation `kubernetes.io/service-account.name`
//! (and, once filled, its uid in `kubernetes.io/service-account.uid`). While that account
//! exists the Secret gets `data.token` (a signed legacy token, never regenerated once present),
//! `data.ca.crt` (the root CA bundle) and `data.namespace`; when the account is gone or has
//! another uid the Secret is deleted. When a token Secret is deleted, its name is removed from
//! the account's `.secrets`.
//!
//! Beyond upstream: a token signed by a retired key (its JWT header's `kid` is one of
//! [`TokenGenerator::retired_key_ids`], after a `kustos sa-key rotate`) is re-issued with the
//! key that signs now, so that clients reading the Secret hold a token that keeps working
//! once the retired key stops verifying (at its end, or when revoked).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client};

use kustos_ca::jwt::PREVIOUS_TOKEN_ANNOTATION;

use crate::runtime::{changes, deletions, tolerate_races, whole_world};

use crate::TokenGenerator;

pub const SECRET_TYPE: &str = "kubernetes.io/service-account-token";
pub const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
pub const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

/// Signs legacy tokens with a PEM private key (`--service-account-private-key-file`, or the
/// apiserver's `sa.key` in `kustos server`).
pub struct PemSigner {
    key_pem: String,
}

impl PemSigner {
    /// Fails when the PEM holds no usable signing key.
    pub fn new(key_pem: String) -> anyhow::Result<Self> {
        kustos_ca::jwt::SigningKey::from_pem(&key_pem)?;
        Ok(PemSigner { key_pem })
    }
}

impl std::fmt::Debug for PemSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemSigner").finish_non_exhaustive()
    }
}

impl TokenGenerator for PemSigner {
    fn legacy_token(
        &self,
        namespace: &str,
        sa_name: &str,
        sa_uid: &str,
        secret_name: &str,
        secret_uid: &str,
    ) -> anyhow::Result<String> {
        Ok(kustos_ca::jwt::legacy_token(&self.key_pem, namespace, sa_name, sa_uid, secret_name, secret_uid)?)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The account is gone (or has another uid): delete the Secret (precondition: its uid).
    Delete { namespace: String, name: String, uid: String },
    /// Fill what is missing; `needs_token` says whether a token must be signed first
    /// (`reissue`: it replaces one signed by a retired key).
    Fill { secret: Box<Secret>, needs_token: bool, reissue: bool, account_uid: String },
}

fn annotation<'a>(s: &'a Secret, key: &str) -> Option<&'a str> {
    s.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The token of a Secret, when it holds one.
fn token_of(s: &Secret) -> Option<&str> {
    std::str::from_utf8(&s.data.as_ref()?.get("token")?.0).ok().filter(|t| !t.is_empty())
}

/// Whether `token` is signed by one of the `retired` keys (by its header's `kid`).
pub fn signed_by_retired(token: &str, retired: &BTreeSet<String>) -> bool {
    kustos_ca::jwt::decode_unverified(token).ok().and_then(|(h, _)| h.kid).is_some_and(|kid| retired.contains(&kid))
}

/// How many token Secrets each key id signed.
pub fn count_by_kid(secrets: &[Secret]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in secrets.iter().filter(|s| s.type_.as_deref() == Some(SECRET_TYPE)) {
        let kid = token_of(s).and_then(|t| kustos_ca::jwt::decode_unverified(t).ok()).and_then(|(h, _)| h.kid);
        if let Some(kid) = kid {
            *out.entry(kid).or_insert(0) += 1;
        }
    }
    out
}

/// The value of [`PREVIOUS_TOKEN_ANNOTATION`] once `replaced` is replaced: `kid=digest`
/// entries, comma-separated, of the tokens replaced so far whose keys are still retired
/// (not pruned), then the one of `replaced`.
pub fn previous_tokens(before: &str, replaced: &str, retired: &BTreeSet<String>) -> String {
    let kid = kustos_ca::jwt::decode_unverified(replaced).ok().and_then(|(h, _)| h.kid).unwrap_or_default();
    let mut entries: Vec<String> = before
        .split(',')
        .filter(|e| e.split_once('=').is_some_and(|(k, _)| retired.contains(k) && *k != kid))
        .map(str::to_string)
        .collect();
    entries.push(format!("{kid}={}", kustos_ca::jwt::token_digest(replaced)));
    entries.join(",")
}

/// Decide for every token Secret; `retired`: the key ids whose tokens are re-issued.
pub fn decide(
    accounts: &[ServiceAccount],
    secrets: &[Secret],
    ca: Option<&[u8]>,
    retired: &BTreeSet<String>,
) -> Vec<Action> {
    let by_key: HashMap<(&str, &str), &ServiceAccount> = accounts
        .iter()
        .filter_map(|sa| Some(((sa.metadata.namespace.as_deref()?, sa.metadata.name.as_deref()?), sa)))
        .collect();
    let mut out = Vec::new();
    for s in secrets.iter().filter(|s| s.type_.as_deref() == Some(SECRET_TYPE)) {
        if s.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(ns), Some(name)) = (s.metadata.namespace.as_deref(), s.metadata.name.as_deref()) else { continue };
        let Some(sa_name) = annotation(s, NAME_ANNOTATION) else { continue };
        let want_uid = annotation(s, UID_ANNOTATION).unwrap_or("");
        let account =
            by_key.get(&(ns, sa_name)).filter(|sa| want_uid.is_empty() || sa.metadata.uid.as_deref() == Some(want_uid));
        let Some(account) = account else {
            out.push(Action::Delete {
                namespace: ns.into(),
                name: name.into(),
                uid: s.metadata.uid.clone().unwrap_or_default(),
            });
            continue;
        };
        let data = s.data.clone().unwrap_or_default();
        let empty = |k: &str| data.get(k).is_none_or(|v| v.0.is_empty());
        let needs_ca = ca.is_some_and(|ca| !ca.is_empty() && data.get("ca.crt").map(|v| v.0.as_slice()) != Some(ca));
        let needs_namespace = empty("namespace");
        let reissue = token_of(s).is_some_and(|t| signed_by_retired(t, retired));
        let needs_token = empty("token") || reissue;
        let account_uid = account.metadata.uid.clone().unwrap_or_default();
        if !needs_ca && !needs_namespace && !needs_token && want_uid == account_uid {
            continue;
        }
        let mut filled = s.clone();
        let d: &mut BTreeMap<String, ByteString> = filled.data.get_or_insert_with(Default::default);
        if let (true, Some(ca)) = (needs_ca, ca) {
            d.insert("ca.crt".into(), ByteString(ca.to_vec()));
        }
        if needs_namespace {
            d.insert("namespace".into(), ByteString(ns.as_bytes().to_vec()));
        }
        let ann = filled.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(NAME_ANNOTATION.into(), sa_name.into());
        ann.insert(UID_ANNOTATION.into(), account_uid.clone());
        if let (true, Some(old)) = (reissue, token_of(s)) {
            // The replaced tokens keep working while their keys verify: clients move over as
            // they re-read the Secret.
            let before = annotation(s, PREVIOUS_TOKEN_ANNOTATION).unwrap_or_default();
            ann.insert(PREVIOUS_TOKEN_ANNOTATION.into(), previous_tokens(before, old, retired));
        }
        out.push(Action::Fill { secret: Box::new(filled), needs_token, reissue, account_uid });
    }
    out
}

/// The account's `.secrets` without `secret_name`, or None when it is not listed.
pub fn without_reference(account: &ServiceAccount, secret_name: &str) -> Option<ServiceAccount> {
    let refs = account.secrets.as_ref()?;
    if !refs.iter().any(|r| r.name.as_deref() == Some(secret_name)) {
        return None;
    }
    let mut updated = account.clone();
    updated.secrets = Some(refs.iter().filter(|r| r.name.as_deref() != Some(secret_name)).cloned().collect());
    Some(updated)
}

pub async fn run(
    client: Client,
    gen: Arc<dyn TokenGenerator>,
    ca_file: Option<PathBuf>,
    cfg: crate::Config,
) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::all(client.clone());
    let token_type = format!("type={SECRET_TYPE}");
    // Part of this controller's future (not a task of its own): it stops with the controller,
    // so a new term of leadership does not start a second copy beside a left-over one.
    let deleted =
        remove_references(client.clone(), deletions(secrets.clone(), watcher::Config::default().fields(&token_type)));
    let mut triggers = vec![
        changes(accounts.clone(), watcher::Config::default()),
        changes(secrets.clone(), watcher::Config::default().fields(&token_type)),
    ];
    if !gen.key_state().is_empty() {
        triggers.push(key_changes(gen.clone(), KEY_POLL_INTERVAL));
    }
    let sync = whole_world("serviceaccount-token", triggers, cfg.resync_period, cfg.metrics.clone(), || {
        let (accounts, secrets, client, gen, ca_file, token_type) =
            (accounts.clone(), secrets.clone(), client.clone(), gen.clone(), ca_file.clone(), token_type.clone());
        async move {
            let ca = match &ca_file {
                Some(p) => Some(
                    kustos_filework::read(p.clone())
                        .await
                        .map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?,
                ),
                None => None,
            };
            let sas = accounts.list(&ListParams::default()).await?.items;
            let tokens = secrets.list(&ListParams::default().fields(&token_type)).await?.items;
            let retired = gen.retired_key_ids();
            for action in decide(&sas, &tokens, ca.as_deref(), &retired) {
                match action {
                    Action::Delete { namespace, name, uid } => {
                        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
                        let dp = DeleteParams {
                            preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
                            ..Default::default()
                        };
                        tolerate_races(api.delete(&name, &dp).await)?;
                        tracing::info!(namespace = %namespace, secret = %name, "deleted a token secret of a missing service account");
                    }
                    Action::Fill { mut secret, needs_token, reissue, account_uid } => {
                        let ns = secret.metadata.namespace.clone().unwrap_or_default();
                        let name = secret.metadata.name.clone().unwrap_or_default();
                        if needs_token {
                            let sa_name = annotation(&secret, NAME_ANNOTATION).unwrap_or_default().to_string();
                            let secret_uid = secret.metadata.uid.clone().unwrap_or_default();
                            let token = gen.legacy_token(&ns, &sa_name, &account_uid, &name, &secret_uid)?;
                            secret
                                .data
                                .get_or_insert_with(Default::default)
                                .insert("token".into(), ByteString(token.into_bytes()));
                        }
                        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
                        tolerate_races(api.replace(&name, &PostParams::default(), &secret).await)?;
                        if reissue {
                            tracing::info!(namespace = %ns, secret = %name, "re-issued a legacy token signed by a retired key");
                        } else {
                            tracing::info!(namespace = %ns, secret = %name, "filled a service-account token secret");
                        }
                    }
                }
            }
            Ok(())
        }
    });
    tokio::select! {
        res = sync => res,
        () = deleted => Ok(()),
    }
}

/// How often the generator's keys are checked for a rotation.
const KEY_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Fires when [`TokenGenerator::key_state`] changes (polled every `every`, on the file-work
/// thread: the state may be read from files).
fn key_changes(gen: Arc<dyn TokenGenerator>, every: std::time::Duration) -> crate::runtime::Trigger {
    let first = gen.key_state();
    futures::stream::unfold((gen, first), move |(gen, last)| async move {
        loop {
            tokio::time::sleep(every).await;
            let g = gen.clone();
            // A read that panicked counts as no change.
            let Ok(now) = kustos_filework::run(move || g.key_state()).await else { continue };
            if now != last {
                return Some(((), (gen, now)));
            }
        }
    })
    .boxed()
}

/// On every deleted token Secret: drop it from its account's `.secrets`.
async fn remove_references(client: Client, mut deleted: futures::stream::BoxStream<'static, Secret>) {
    while let Some(secret) = deleted.next().await {
        let (Some(ns), Some(name), Some(sa)) = (
            secret.metadata.namespace.as_deref(),
            secret.metadata.name.as_deref(),
            annotation(&secret, NAME_ANNOTATION),
        ) else {
            continue;
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        for _ in 0..5 {
            let account = match api.get_opt(sa).await {
                Ok(Some(a)) => a,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading a service account");
                    break;
                }
            };
            let Some(updated) = without_reference(&account, name) else { break };
            match api.replace(sa, &PostParams::default(), &updated).await {
                Ok(_) => break,
                Err(e) if crate::runtime::is_status(&e, 409) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "removing a deleted token secret from its service account");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::api::ObjectMeta;

    fn sa(ns: &str, name: &str, uid: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn secret(ns: &str, name: &str, sa: &str, uid: Option<&str>, data: &[(&str, &str)]) -> Secret {
        let mut ann = BTreeMap::from([(NAME_ANNOTATION.to_string(), sa.to_string())]);
        if let Some(u) = uid {
            ann.insert(UID_ANNOTATION.into(), u.into());
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                uid: Some(format!("{name}-uid")),
                annotations: Some(ann),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
            ..Default::default()
        }
    }

    fn summary(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::Delete { name, .. } => format!("delete {name}"),
                Action::Fill { secret, needs_token, reissue, .. } => {
                    let keys: Vec<String> = secret.data.clone().unwrap_or_default().keys().cloned().collect();
                    let again = if *reissue { " reissue" } else { "" };
                    format!(
                        "fill {} token={needs_token}{again} keys={}",
                        secret.metadata.name.clone().unwrap_or_default(),
                        keys.join(",")
                    )
                }
            })
            .collect()
    }

    #[test]
    fn token_secret_decisions() {
        let full = [("token", "t"), ("ca.crt", "CA"), ("namespace", "ns")];
        let cases: Vec<(&str, Vec<ServiceAccount>, Vec<Secret>, Vec<&str>)> = vec![
            (
                "new secret gets everything",
                vec![sa("ns", "robot", "u1")],
                vec![secret("ns", "s", "robot", None, &[])],
                vec!["fill s token=true keys=ca.crt,namespace"],
            ),
            (
                "complete secret is left alone",
                vec![sa("ns", "robot", "u1")],
                vec![secret("ns", "s", "robot", Some("u1"), &full)],
                vec![],
            ),
            (
                "token is never regenerated",
                vec![sa("ns", "robot", "u1")],
                vec![secret("ns", "s", "robot", Some("u1"), &[("token", "t")])],
                vec!["fill s token=false keys=ca.crt,namespace,token"],
            ),
            (
                "new CA is written",
                vec![sa("ns", "robot", "u1")],
                vec![secret("ns", "s", "robot", Some("u1"), &[("token", "t"), ("ca.crt", "OLD"), ("namespace", "ns")])],
                vec!["fill s token=false keys=ca.crt,namespace,token"],
            ),
            ("account missing", vec![], vec![secret("ns", "s", "robot", None, &full)], vec!["delete s"]),
            (
                "account recreated with another uid",
                vec![sa("ns", "robot", "u2")],
                vec![secret("ns", "s", "robot", Some("u1"), &full)],
                vec!["delete s"],
            ),
            (
                "account in another namespace does not count",
                vec![sa("other", "robot", "u1")],
                vec![secret("ns", "s", "robot", None, &full)],
                vec!["delete s"],
            ),
        ];
        for (what, accounts, secrets, want) in cases {
            assert_eq!(summary(&decide(&accounts, &secrets, Some(b"CA"), &BTreeSet::new())), want, "{what}");
        }
        let mut opaque = secret("ns", "o", "robot", None, &[]);
        opaque.type_ = Some("Opaque".into());
        assert!(decide(&[], &[opaque], None, &BTreeSet::new()).is_empty(), "only token secrets");
        let filled =
            decide(&[sa("ns", "robot", "u1")], &[secret("ns", "s", "robot", None, &[])], None, &BTreeSet::new());
        let Action::Fill { secret, account_uid, .. } = &filled[0] else { panic!("{filled:?}") };
        assert_eq!(account_uid, "u1");
        assert_eq!(secret.metadata.annotations.clone().unwrap_or_default()[UID_ANNOTATION], "u1");
    }

    #[test]
    fn tokens_signed_by_a_retired_key_are_reissued() {
        let sign = |pem: &str| {
            kustos_ca::jwt::legacy_token(pem, "ns", "robot", "u1", "s", "").expect("signing a legacy token")
        };
        let (old, new) =
            (kustos_ca::generate_sa_keypair().expect("key"), kustos_ca::generate_sa_keypair().expect("key"));
        let kid = |pem: &str| kustos_ca::jwt::SigningKey::from_pem(pem).expect("key").public_key().key_id().to_string();
        let (old_kid, new_kid) = (kid(&old.private_key_pem), kid(&new.private_key_pem));
        let kid_of = |t: &str| kustos_ca::jwt::decode_unverified(t).ok().and_then(|(h, _)| h.kid).unwrap_or_default();
        let (by_old, by_new) = (sign(&old.private_key_pem), sign(&new.private_key_pem));
        let with = |token: &str| {
            secret("ns", "s", "robot", Some("u1"), &[("token", token), ("ca.crt", "CA"), ("namespace", "ns")])
        };
        let retired_old = BTreeSet::from([old_kid.clone()]);
        let cases: Vec<(&str, &str, BTreeSet<String>, Vec<&str>)> = vec![
            (
                "signed by the retired key",
                &by_old,
                retired_old.clone(),
                vec!["fill s token=true reissue keys=ca.crt,namespace,token"],
            ),
            ("signed by the key that signs", &by_new, retired_old.clone(), vec![]),
            ("no rotation: left alone", &by_old, BTreeSet::new(), vec![]),
            ("not a JWT: left alone", "opaque", retired_old.clone(), vec![]),
            (
                "retired key of another token",
                &by_new,
                BTreeSet::from([new_kid.clone()]),
                vec!["fill s token=true reissue keys=ca.crt,namespace,token"],
            ),
        ];
        for (what, token, retired, want) in cases {
            let got = decide(&[sa("ns", "robot", "u1")], &[with(token)], Some(b"CA"), &retired);
            assert_eq!(summary(&got), want, "{what}");
            if let Some(Action::Fill { secret, .. }) = got.first() {
                let ann = secret.metadata.annotations.clone().unwrap_or_default();
                let want = format!("{}={}", kid_of(token), kustos_ca::jwt::token_digest(token));
                assert_eq!(ann.get(PREVIOUS_TOKEN_ANNOTATION), Some(&want), "{what}");
            }
        }
        // Entries of keys that were pruned go; the one of the same key is replaced.
        let retired = BTreeSet::from(["A".to_string(), old_kid.clone()]);
        let digest = kustos_ca::jwt::token_digest(&by_old);
        let same_key = format!("{old_kid}=z,A=x");
        let cases: Vec<(&str, String)> = vec![
            ("", format!("{old_kid}={digest}")),
            ("A=x", format!("A=x,{old_kid}={digest}")),
            ("A=x,B=y", format!("A=x,{old_kid}={digest}")),
            (&same_key, format!("A=x,{old_kid}={digest}")),
            ("junk", format!("{old_kid}={digest}")),
        ];
        for (before, want) in cases {
            assert_eq!(previous_tokens(before, &by_old, &retired), want, "{before}");
        }
        let mut two = with(&by_old);
        two.metadata.name = Some("t".into());
        let counts = count_by_kid(&[with(&by_old), two, with(&by_new), with("opaque")]);
        assert_eq!(counts, BTreeMap::from([(old_kid, 2), (new_kid, 1)]));
    }

    #[test]
    fn references_are_removed() {
        let mut a = sa("ns", "robot", "u1");
        a.secrets = Some(vec![
            ObjectReference { name: Some("s1".into()), ..Default::default() },
            ObjectReference { name: Some("s2".into()), ..Default::default() },
        ]);
        let updated = without_reference(&a, "s1").map(|u| u.secrets.unwrap_or_default());
        assert_eq!(updated, Some(vec![ObjectReference { name: Some("s2".into()), ..Default::default() }]));
        assert!(without_reference(&a, "s3").is_none());
    }
}
