//! `root-ca-cert-publisher`: the ConfigMap `kube-root-ca.crt` (key `ca.crt` = the cluster's
//! root CA bundle) in every namespace that is not being deleted; recreated when deleted,
//! corrected when edited, updated everywhere when the CA file changes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::runtime::{changes, file_changes, tolerate_races, whole_world};
use crate::serviceaccount::terminating;

pub const NAME: &str = "kube-root-ca.crt";
pub const KEY: &str = "ca.crt";
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Create(ConfigMap),
    Update(ConfigMap),
}

/// What to write so every live namespace has the right `kube-root-ca.crt`. `existing` are
/// the ConfigMaps named `kube-root-ca.crt`.
pub fn decide(namespaces: &[Namespace], existing: &[ConfigMap], ca: &str) -> Vec<Action> {
    let by_ns: HashMap<&str, &ConfigMap> =
        existing.iter().filter_map(|cm| cm.metadata.namespace.as_deref().map(|ns| (ns, cm))).collect();
    let data: BTreeMap<String, String> = [(KEY.to_string(), ca.to_string())].into();
    let mut out = Vec::new();
    for ns in namespaces.iter().filter(|n| !terminating(n)) {
        let Some(name) = ns.metadata.name.as_deref() else { continue };
        match by_ns.get(name) {
            None => out.push(Action::Create(ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    namespace: Some(name.into()),
                    annotations: Some([(DESCRIPTION_ANNOTATION.to_string(), DESCRIPTION.to_string())].into()),
                    ..Default::default()
                },
                data: Some(data.clone()),
                ..Default::default()
            })),
            Some(cm) => {
                let described = cm
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
                    .is_some_and(|d| !d.is_empty());
                if cm.data.as_ref() == Some(&data) && described && cm.binary_data.as_ref().is_none_or(|b| b.is_empty())
                {
                    continue;
                }
                let mut cm = (*cm).clone();
                cm.data = Some(data.clone());
                cm.binary_data = None;
                cm.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
                out.push(Action::Update(cm));
            }
        }
    }
    out
}

pub async fn run(client: Client, ca_file: PathBuf, cfg: crate::Config) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let configmaps: Api<ConfigMap> = Api::all(client.clone());
    let only = format!("metadata.name={NAME}");
    let triggers = vec![
        changes(namespaces.clone(), watcher::Config::default()),
        changes(configmaps.clone(), watcher::Config::default().fields(&only)),
        file_changes(ca_file.clone(), Duration::from_secs(2)),
    ];
    whole_world("root-ca-cert-publisher", triggers, cfg.resync_period, cfg.metrics.clone(), || {
        let (namespaces, configmaps, client, only, ca_file) =
            (namespaces.clone(), configmaps.clone(), client.clone(), only.clone(), ca_file.clone());
        async move {
            let ca = kustos_filework::read_to_string(ca_file.clone())
                .await
                .map_err(|e| anyhow::anyhow!("reading the root CA file {}: {e}", ca_file.display()))?;
            let ns = namespaces.list(&ListParams::default()).await?.items;
            let existing = configmaps.list(&ListParams::default().fields(&only)).await?.items;
            for action in decide(&ns, &existing, &ca) {
                match action {
                    Action::Create(cm) => {
                        let ns = cm.metadata.namespace.clone().unwrap_or_default();
                        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
                        match api.create(&PostParams::default(), &cm).await {
                            Err(e) if crate::runtime::is_status(&e, 403) => {}
                            other => tolerate_races(other)?,
                        }
                    }
                    Action::Update(cm) => {
                        let ns = cm.metadata.namespace.clone().unwrap_or_default();
                        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
                        tolerate_races(api.replace(NAME, &PostParams::default(), &cm).await)?;
                        tracing::info!(namespace = %ns, "updated kube-root-ca.crt");
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

    fn ns(name: &str) -> Namespace {
        Namespace { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() }
    }

    fn cm(ns: &str, ca: &str, described: bool) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                namespace: Some(ns.into()),
                annotations: described.then(|| [(DESCRIPTION_ANNOTATION.to_string(), DESCRIPTION.to_string())].into()),
                ..Default::default()
            },
            data: Some([(KEY.to_string(), ca.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn publish_decisions() {
        let kinds = |a: &[Action]| -> Vec<(String, String)> {
            a.iter()
                .map(|x| match x {
                    Action::Create(c) => ("create".to_string(), c.metadata.namespace.clone().unwrap_or_default()),
                    Action::Update(c) => ("update".to_string(), c.metadata.namespace.clone().unwrap_or_default()),
                })
                .collect()
        };
        let mut extra = cm("a", "CA", true);
        extra.data.get_or_insert_with(Default::default).insert("other".into(), "x".into());
        let mut terminating_ns = ns("t");
        terminating_ns.status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some("Terminating".into()),
            ..Default::default()
        });
        let cases: Vec<(&str, Vec<Namespace>, Vec<ConfigMap>, Vec<(&str, &str)>)> = vec![
            ("missing", vec![ns("a")], vec![], vec![("create", "a")]),
            ("up to date", vec![ns("a")], vec![cm("a", "CA", true)], vec![]),
            ("old CA", vec![ns("a")], vec![cm("a", "OLD", true)], vec![("update", "a")]),
            ("no description", vec![ns("a")], vec![cm("a", "CA", false)], vec![("update", "a")]),
            ("extra keys are removed", vec![ns("a")], vec![extra], vec![("update", "a")]),
            ("terminating namespace", vec![terminating_ns], vec![], vec![]),
            ("two namespaces", vec![ns("a"), ns("b")], vec![cm("b", "CA", true)], vec![("create", "a")]),
        ];
        for (what, namespaces, existing, want) in cases {
            let got = decide(&namespaces, &existing, "CA");
            let want: Vec<(String, String)> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
            assert_eq!(kinds(&got), want, "{what}");
            for a in got {
                let (Action::Create(c) | Action::Update(c)) = a;
                assert_eq!(c.data.unwrap_or_default(), BTreeMap::from([(KEY.to_string(), "CA".to_string())]), "{what}");
                assert_eq!(c.metadata.annotations.unwrap_or_default()[DESCRIPTION_ANNOTATION], DESCRIPTION);
            }
        }
    }
}
