//! `bootstrapsigner`: keeps the ConfigMap `kube-public/cluster-info` signed for every
//! bootstrap token that may sign, so a joining node holding a token can trust the
//! `kubeconfig` it reads there without trusting the connection.
//!
//! For each token Secret in `kube-system` that is well-formed, not expired and has
//! `usage-bootstrap-signing: "true"`, the key `jws-kubeconfig-<id>` holds the detached JWS
//! of the `kubeconfig` value ([`kustos_ca::jws`]); keys of other tokens are removed. Nothing
//! is written when every signature is already right, and nothing at all when the ConfigMap
//! or its `kubeconfig` key is missing (the apiserver creates them).
//!
//! Watches the token Secrets and the ConfigMap; besides, it wakes when the next signing
//! token expires (so its signature goes even if the token cleaner is not running) and every
//! resync period. The update carries the resourceVersion read; a conflict is retried by the
//! next sync.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use kustos_ca::bootstrap_token::{
    Expiration, CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE, JWS_KEY_PREFIX, KUBECONFIG_KEY, NAMESPACE, SECRET_TYPE,
};

use crate::bootstrap_tokens::{expiration, signing_token};
use crate::runtime::{changes, tolerate_races, whole_world_until};

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No ConfigMap, or no `kubeconfig` in it: nothing to sign.
    NothingToSign,
    /// Every signature is right.
    UpToDate,
    /// Write this ConfigMap (the one read, with the signatures replaced).
    Update(Box<ConfigMap>),
}

/// The `data` signatures `cluster_info` should carry, given the token `secrets`, at `now`.
pub fn decide(cluster_info: Option<&ConfigMap>, secrets: &[Secret], now: DateTime<Utc>) -> Decision {
    let Some(cm) = cluster_info else { return Decision::NothingToSign };
    let data = cm.data.clone().unwrap_or_default();
    let Some(content) = data.get(KUBECONFIG_KEY) else { return Decision::NothingToSign };
    let mut wanted: BTreeMap<String, String> =
        data.iter().filter(|(k, _)| !k.starts_with(JWS_KEY_PREFIX)).map(|(k, v)| (k.clone(), v.clone())).collect();
    for token in secrets.iter().filter_map(|s| signing_token(s, now)) {
        // Keyed by the token secret alone, as every verifier that runs does (kubeadm's
        // discovery, cluster-bootstrap's DetachedTokenIsValid); the reference docs' "full
        // token" does not match that code, and real clients run the code.
        let sig = kustos_ca::jws::detached_signature(content.as_bytes(), token.id(), token.secret().as_bytes());
        wanted.insert(format!("{JWS_KEY_PREFIX}{}", token.id()), sig);
    }
    if wanted == data {
        return Decision::UpToDate;
    }
    let mut cm = cm.clone();
    cm.data = Some(wanted);
    Decision::Update(Box::new(cm))
}

/// The earliest expiration among the tokens that sign at `now`: their signatures must go
/// then.
pub fn next_expiry(secrets: &[Secret], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    secrets
        .iter()
        .filter(|s| signing_token(s, now).is_some())
        .filter_map(|s| match expiration(s, now) {
            Expiration::At { at, .. } => Some(at),
            _ => None,
        })
        .min()
}

pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let configmaps: Api<ConfigMap> = Api::namespaced(client, CLUSTER_INFO_NAMESPACE);
    let only_tokens = format!("type={SECRET_TYPE}");
    let only_cluster_info = format!("metadata.name={CLUSTER_INFO_NAME}");
    let triggers = vec![
        changes(secrets.clone(), watcher::Config::default().fields(&only_tokens)),
        changes(configmaps.clone(), watcher::Config::default().fields(&only_cluster_info)),
    ];
    whole_world_until("bootstrapsigner", triggers, cfg.resync_period, cfg.metrics.clone(), || {
        let (secrets, configmaps, only_tokens) = (secrets.clone(), configmaps.clone(), only_tokens.clone());
        async move {
            let cm = configmaps.get_opt(CLUSTER_INFO_NAME).await?;
            let tokens = secrets.list(&ListParams::default().fields(&only_tokens)).await?.items;
            let now = Utc::now();
            if let Decision::Update(cm) = decide(cm.as_ref(), &tokens, now) {
                tolerate_races(configmaps.replace(CLUSTER_INFO_NAME, &PostParams::default(), &cm).await)?;
                tracing::info!(
                    controller = "bootstrapsigner",
                    signatures = cm.data.iter().flatten().filter(|(k, _)| k.starts_with(JWS_KEY_PREFIX)).count(),
                    "updated the signatures of {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME}"
                );
            }
            // Wake when the next signature must go (a little after, so it has expired).
            Ok(next_expiry(&tokens, now).and_then(|at| (at - now).to_std().ok()).map(|d| d + Duration::from_millis(50)))
        }
    })
    .await
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\n";

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    fn token_secret(id: &str, secret: &str, pairs: &[(&str, &str)]) -> Secret {
        let mut data: BTreeMap<String, ByteString> =
            [("token-id", id), ("token-secret", secret), ("usage-bootstrap-signing", "true")]
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect();
        for (k, v) in pairs {
            data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(format!("bootstrap-token-{id}")),
                namespace: Some(NAMESPACE.into()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(data),
            ..Default::default()
        }
    }

    fn cluster_info(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(CLUSTER_INFO_NAME.into()),
                namespace: Some(CLUSTER_INFO_NAMESPACE.into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    fn sig(id: &str, secret: &str) -> String {
        kustos_ca::jws::detached_signature(KUBECONFIG.as_bytes(), id, secret.as_bytes())
    }

    #[test]
    fn signer_decisions() {
        let now = at("2026-01-01T00:00:00Z");
        let a = token_secret("aaaaaa", "0123456789abcdef", &[]);
        let b = token_secret("bbbbbb", "fedcba9876543210", &[("expiration", "2026-01-02T00:00:00Z")]);
        let expired = token_secret("cccccc", "0123456789abcdef", &[("expiration", "2025-01-01T00:00:00Z")]);
        let auth_only = token_secret("dddddd", "0123456789abcdef", &[("usage-bootstrap-signing", "false")]);
        let (sig_a, sig_b) = (sig("aaaaaa", "0123456789abcdef"), sig("bbbbbb", "fedcba9876543210"));
        let key = |id: &str| format!("{JWS_KEY_PREFIX}{id}");
        let signed = cluster_info(&[
            (KUBECONFIG_KEY, KUBECONFIG),
            (&key("aaaaaa"), &sig_a),
            (&key("bbbbbb"), &sig_b),
            ("other", "kept"),
        ]);
        // (case, ConfigMap, tokens, wanted data after, or None for no write)
        type Case = (&'static str, Option<ConfigMap>, Vec<Secret>, Result<Option<Vec<(String, String)>>, Decision>);
        let d = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let cases: Vec<Case> = vec![
            ("no ConfigMap", None, vec![a.clone()], Err(Decision::NothingToSign)),
            ("no kubeconfig key", Some(cluster_info(&[("other", "x")])), vec![a.clone()], Err(Decision::NothingToSign)),
            (
                "first signatures are added, other keys kept",
                Some(cluster_info(&[(KUBECONFIG_KEY, KUBECONFIG), ("other", "kept")])),
                vec![a.clone(), b.clone()],
                Ok(Some(d(&[
                    (&key("aaaaaa"), &sig_a),
                    (&key("bbbbbb"), &sig_b),
                    (KUBECONFIG_KEY, KUBECONFIG),
                    ("other", "kept"),
                ]))),
            ),
            ("all right: no write", Some(signed.clone()), vec![a.clone(), b.clone()], Ok(None)),
            (
                "a deleted token's signature is removed",
                Some(signed.clone()),
                vec![a.clone()],
                Ok(Some(d(&[(&key("aaaaaa"), &sig_a), (KUBECONFIG_KEY, KUBECONFIG), ("other", "kept")]))),
            ),
            (
                "expired and non-signing tokens do not sign; a stale signature goes",
                Some(cluster_info(&[(KUBECONFIG_KEY, KUBECONFIG), (&key("cccccc"), "stale")])),
                vec![expired.clone(), auth_only.clone()],
                Ok(Some(d(&[(KUBECONFIG_KEY, KUBECONFIG)]))),
            ),
            (
                "a wrong signature is corrected",
                Some(cluster_info(&[(KUBECONFIG_KEY, KUBECONFIG), (&key("aaaaaa"), "forged")])),
                vec![a.clone()],
                Ok(Some(d(&[(&key("aaaaaa"), &sig_a), (KUBECONFIG_KEY, KUBECONFIG)]))),
            ),
            (
                "a changed kubeconfig is signed again",
                Some(cluster_info(&[(KUBECONFIG_KEY, "apiVersion: v1\n"), (&key("aaaaaa"), &sig_a)])),
                vec![a.clone()],
                Ok(Some(d(&[
                    (
                        &key("aaaaaa"),
                        &kustos_ca::jws::detached_signature(b"apiVersion: v1\n", "aaaaaa", b"0123456789abcdef"),
                    ),
                    (KUBECONFIG_KEY, "apiVersion: v1\n"),
                ]))),
            ),
            (
                "no tokens, no signatures: no write",
                Some(cluster_info(&[(KUBECONFIG_KEY, KUBECONFIG)])),
                vec![],
                Ok(None),
            ),
        ];
        for (name, cm, tokens, want) in cases {
            let got = decide(cm.as_ref(), &tokens, now);
            match want {
                Err(decision) => assert_eq!(got, decision, "{name}"),
                Ok(None) => assert_eq!(got, Decision::UpToDate, "{name}"),
                Ok(Some(data)) => {
                    let Decision::Update(new) = got else { panic!("{name}: expected an update, got {got:?}") };
                    assert_eq!(new.data.unwrap_or_default().into_iter().collect::<Vec<_>>(), data, "{name}");
                    assert_eq!(new.metadata.resource_version.as_deref(), Some("7"), "{name}: precondition kept");
                }
            }
        }
    }

    #[test]
    fn wakes_when_the_next_signing_token_expires() {
        let now = at("2026-01-01T00:00:00Z");
        let cases: Vec<(&str, Vec<Secret>, Option<&str>)> = vec![
            ("none", vec![], None),
            ("never expires", vec![token_secret("aaaaaa", "0123456789abcdef", &[])], None),
            (
                "the earliest of two",
                vec![
                    token_secret("aaaaaa", "0123456789abcdef", &[("expiration", "2026-01-03T00:00:00Z")]),
                    token_secret("bbbbbb", "0123456789abcdef", &[("expiration", "2026-01-02T00:00:00Z")]),
                ],
                Some("2026-01-02T00:00:00Z"),
            ),
            (
                "a non-signing token does not count",
                vec![token_secret(
                    "aaaaaa",
                    "0123456789abcdef",
                    &[("expiration", "2026-01-02T00:00:00Z"), ("usage-bootstrap-signing", "false")],
                )],
                None,
            ),
        ];
        for (name, secrets, want) in cases {
            assert_eq!(next_expiry(&secrets, now), want.map(at), "{name}");
        }
    }
}
