//! `legacy-serviceaccount-token-cleaner`: auto-generated legacy service-account token Secrets
//! that nobody used for a clean-up period are first labelled invalid, then — unused for a
//! further period — deleted, as kube-controller-manager's legacy token cleaner.
//!
//! A Secret is a candidate when it is of type `kubernetes.io/service-account-token`, listed in
//! its ServiceAccount's `.secrets` and pointing back at it by annotation, older than the
//! period, mounted by no Pod, and its `kubernetes.io/legacy-token-last-used` date (the
//! apiserver's tracking) is older than the period. Nothing happens until the apiserver has
//! tracked token use for a whole period (ConfigMap
//! `kube-system/kube-apiserver-legacy-service-account-token-tracking`, key `since`).

use std::collections::HashSet;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;

use crate::runtime::{is_status, tolerate_races, whole_world};
use crate::serviceaccount_token::{NAME_ANNOTATION, SECRET_TYPE};

pub const TRACKING_NAMESPACE: &str = "kube-system";
pub const TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
pub const TRACKING_KEY: &str = "since";
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
pub const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
const DATE: &str = "%Y-%m-%d";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Label `kubernetes.io/legacy-token-invalid-since=<today>`.
    Invalidate { namespace: String, name: String, uid: String },
    /// Delete (precondition: the resourceVersion seen).
    Delete { namespace: String, name: String, resource_version: String },
}

/// The Secrets Pods use: volumes (also projected), env and envFrom references, image pull
/// secrets — as (namespace, name).
pub fn mounted_secrets(pods: &[Pod]) -> HashSet<(String, String)> {
    let mut out = HashSet::new();
    for pod in pods {
        let (Some(ns), Some(spec)) = (pod.metadata.namespace.clone(), pod.spec.as_ref()) else { continue };
        let mut add = |name: Option<&String>| {
            if let Some(n) = name {
                out.insert((ns.clone(), n.clone()));
            }
        };
        for v in spec.volumes.iter().flatten() {
            add(v.secret.as_ref().and_then(|s| s.secret_name.as_ref()));
            for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
                add(src.secret.as_ref().map(|s| &s.name));
            }
        }
        for r in spec.image_pull_secrets.iter().flatten() {
            add(Some(&r.name));
        }
        let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
        for c in containers {
            for e in c.env_from.iter().flatten() {
                add(e.secret_ref.as_ref().map(|s| &s.name));
            }
            for e in c.env.iter().flatten() {
                add(e.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).map(|s| &s.name));
            }
        }
    }
    out
}

/// The latest instant tracking may have started: the day after `since` (the date is coarse).
pub fn tracked_since(since: &str) -> Option<DateTime<Utc>> {
    let d = NaiveDate::parse_from_str(since.trim(), DATE).ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc() + Duration::days(1))
}

/// What to do at `now`.
pub fn decide(
    now: DateTime<Utc>,
    tracked_since: DateTime<Utc>,
    period: Duration,
    accounts: &[ServiceAccount],
    secrets: &[Secret],
    mounted: &HashSet<(String, String)>,
) -> Vec<Action> {
    if now < tracked_since + period {
        return Vec::new();
    }
    let cutoff = now - period;
    let cutoff_date = cutoff.format(DATE).to_string();
    let mut out = Vec::new();
    for sa in accounts {
        let (Some(ns), Some(sa_name)) = (sa.metadata.namespace.as_deref(), sa.metadata.name.as_deref()) else {
            continue;
        };
        for r in sa.secrets.iter().flatten() {
            let Some(secret_name) = r.name.as_deref() else { continue };
            let Some(s) = secrets.iter().find(|s| {
                s.metadata.namespace.as_deref() == Some(ns) && s.metadata.name.as_deref() == Some(secret_name)
            }) else {
                continue;
            };
            if s.type_.as_deref() != Some(SECRET_TYPE) || s.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if s.metadata.creation_timestamp.as_ref().is_none_or(|t| t.0.as_second() >= cutoff.timestamp()) {
                continue;
            }
            let annotations = s.metadata.annotations.clone().unwrap_or_default();
            if annotations.get(NAME_ANNOTATION).map(String::as_str) != Some(sa_name) {
                continue;
            }
            if mounted.contains(&(ns.to_string(), secret_name.to_string())) {
                continue;
            }
            let labels = s.metadata.labels.clone().unwrap_or_default();
            if labels.get(LAST_USED_LABEL).is_some_and(|d| *d >= cutoff_date) {
                continue;
            }
            let invalid_since = labels.get(INVALID_SINCE_LABEL).filter(|d| NaiveDate::parse_from_str(d, DATE).is_ok());
            match invalid_since {
                None => out.push(Action::Invalidate {
                    namespace: ns.into(),
                    name: secret_name.into(),
                    uid: s.metadata.uid.clone().unwrap_or_default(),
                }),
                Some(d) if *d >= cutoff_date => {}
                Some(_) => out.push(Action::Delete {
                    namespace: ns.into(),
                    name: secret_name.into(),
                    resource_version: s.metadata.resource_version.clone().unwrap_or_default(),
                }),
            }
        }
    }
    out
}

pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let period = cfg.legacy_token_clean_up_period;
    whole_world("legacy-serviceaccount-token-cleaner", Vec::new(), cfg.legacy_token_sync_interval, cfg.metrics.clone(), || {
        let client = client.clone();
        async move {
            let tracking: Api<ConfigMap> = Api::namespaced(client.clone(), TRACKING_NAMESPACE);
            let Some(cm) = tracking.get_opt(TRACKING_CONFIGMAP).await? else {
                tracing::info!("legacy token tracking has not started; nothing to clean");
                return Ok(());
            };
            let since = cm.data.as_ref().and_then(|d| d.get(TRACKING_KEY)).and_then(|s| tracked_since(s));
            let Some(since) = since else {
                anyhow::bail!("ConfigMap {TRACKING_NAMESPACE}/{TRACKING_CONFIGMAP} has no valid {TRACKING_KEY:?} date");
            };
            let accounts = Api::<ServiceAccount>::all(client.clone()).list(&ListParams::default()).await?.items;
            let secrets = Api::<Secret>::all(client.clone())
                .list(&ListParams::default().fields(&format!("type={SECRET_TYPE}")))
                .await?
                .items;
            let pods = match Api::<Pod>::all(client.clone()).list(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(e) if is_status(&e, 404) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let now = Utc::now();
            for action in decide(now, since, period, &accounts, &secrets, &mounted_secrets(&pods)) {
                match action {
                    Action::Invalidate { namespace, name, uid } => {
                        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
                        let patch = json!({"metadata": {"uid": uid, "labels": {INVALID_SINCE_LABEL: now.format(DATE).to_string()}}});
                        tolerate_races(api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await)?;
                        tracing::info!(namespace = %namespace, secret = %name, "marked an unused legacy token invalid");
                    }
                    Action::Delete { namespace, name, resource_version } => {
                        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
                        let dp = DeleteParams {
                            preconditions: Some(Preconditions { resource_version: Some(resource_version), uid: None }),
                            ..Default::default()
                        };
                        tolerate_races(api.delete(&name, &dp).await)?;
                        tracing::info!(namespace = %namespace, secret = %name, "deleted an unused legacy token");
                    }
                }
            }
            Ok(())
        }
    })
    .await
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectReference, PodSpec, SecretVolumeSource, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    fn sa(name: &str, secrets: &[&str]) -> ServiceAccount {
        ServiceAccount {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("ns".into()), ..Default::default() },
            secrets: Some(
                secrets.iter().map(|s| ObjectReference { name: Some(s.to_string()), ..Default::default() }).collect(),
            ),
            ..Default::default()
        }
    }

    fn secret(name: &str, owner: &str, created: &str, labels: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("{name}-uid")),
                resource_version: Some("7".into()),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(at(created).timestamp()).unwrap_or_default(),
                )),
                annotations: Some(BTreeMap::from([(NAME_ANNOTATION.to_string(), owner.to_string())])),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            ..Default::default()
        }
    }

    #[test]
    fn cleaner_decisions() {
        let now = at("2026-06-01T12:00:00Z");
        let since = tracked_since("2025-01-01");
        assert_eq!(since, Some(at("2025-01-02T00:00:00Z")));
        let since = since.unwrap_or_default();
        let period = Duration::days(365);
        let old = "2024-01-01T00:00:00Z";
        let inv =
            |name: &str| Action::Invalidate { namespace: "ns".into(), name: name.into(), uid: format!("{name}-uid") };
        let del =
            |name: &str| Action::Delete { namespace: "ns".into(), name: name.into(), resource_version: "7".into() };
        let mounted: HashSet<(String, String)> = [("ns".to_string(), "mounted".to_string())].into();
        type Case = (&'static str, DateTime<Utc>, Vec<ServiceAccount>, Vec<Secret>, Vec<Action>);
        let cases: Vec<Case> = vec![
            (
                "unused auto-generated token is invalidated",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[])],
                vec![inv("s")],
            ),
            (
                "tracking too recent",
                at("2025-06-01T00:00:00Z"),
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[])],
                vec![],
            ),
            (
                "recently used",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[(LAST_USED_LABEL, "2026-05-01")])],
                vec![],
            ),
            (
                "used long ago",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[(LAST_USED_LABEL, "2024-05-01")])],
                vec![inv("s")],
            ),
            (
                "recently created",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", "2026-05-01T00:00:00Z", &[])],
                vec![],
            ),
            (
                "not referenced by its account",
                now,
                vec![sa("robot", &[])],
                vec![secret("s", "robot", old, &[])],
                vec![],
            ),
            (
                "referenced but pointing elsewhere",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "other", old, &[])],
                vec![],
            ),
            (
                "mounted by a pod",
                now,
                vec![sa("robot", &["mounted"])],
                vec![secret("mounted", "robot", old, &[])],
                vec![],
            ),
            (
                "invalid for a period: deleted",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[(INVALID_SINCE_LABEL, "2025-01-01")])],
                vec![del("s")],
            ),
            (
                "invalid recently: kept",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[(INVALID_SINCE_LABEL, "2026-05-20")])],
                vec![],
            ),
            (
                "garbled invalid-since is reset",
                now,
                vec![sa("robot", &["s"])],
                vec![secret("s", "robot", old, &[(INVALID_SINCE_LABEL, "someday")])],
                vec![inv("s")],
            ),
        ];
        for (what, now, accounts, secrets, want) in cases {
            assert_eq!(decide(now, since, period, &accounts, &secrets, &mounted), want, "{what}");
        }
        assert_eq!(tracked_since("garbage"), None);
    }

    #[test]
    fn secrets_used_by_pods() {
        let pod = Pod {
            metadata: ObjectMeta { namespace: Some("ns".into()), ..Default::default() },
            spec: Some(PodSpec {
                volumes: Some(vec![Volume {
                    name: "v".into(),
                    secret: Some(SecretVolumeSource { secret_name: Some("s1".into()), ..Default::default() }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(mounted_secrets(&[pod]), HashSet::from([("ns".to_string(), "s1".to_string())]));
    }
}
