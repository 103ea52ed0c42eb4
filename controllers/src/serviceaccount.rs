//! `serviceaccount`: a ServiceAccount named `default` in every namespace that is not being
//! deleted (recreated when deleted), as kube-controller-manager's service-account controller.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::runtime::{changes, tolerate_races, whole_world};

pub const DEFAULT_NAME: &str = "default";

/// Whether a namespace is being deleted (no new objects may be created in it).
pub fn terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// The namespaces that need a `default` ServiceAccount created.
pub fn missing_default(namespaces: &[Namespace], accounts: &[ServiceAccount]) -> Vec<String> {
    let have: HashSet<&str> = accounts
        .iter()
        .filter(|sa| sa.metadata.name.as_deref() == Some(DEFAULT_NAME))
        .filter_map(|sa| sa.metadata.namespace.as_deref())
        .collect();
    namespaces
        .iter()
        .filter(|ns| !terminating(ns))
        .filter_map(|ns| ns.metadata.name.clone())
        .filter(|name| !have.contains(name.as_str()))
        .collect()
}

pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let accounts: Api<ServiceAccount> = Api::all(client.clone());
    let only_default = format!("metadata.name={DEFAULT_NAME}");
    let triggers = vec![
        changes(namespaces.clone(), watcher::Config::default()),
        changes(accounts.clone(), watcher::Config::default().fields(&only_default)),
    ];
    whole_world("serviceaccount", triggers, cfg.resync_period, cfg.metrics.clone(), || {
        let (namespaces, accounts, client, only_default) =
            (namespaces.clone(), accounts.clone(), client.clone(), only_default.clone());
        async move {
            let ns = namespaces.list(&ListParams::default()).await?.items;
            let sas = accounts.list(&ListParams::default().fields(&only_default)).await?.items;
            for name in missing_default(&ns, &sas) {
                let sa = ServiceAccount {
                    metadata: kube::api::ObjectMeta { name: Some(DEFAULT_NAME.into()), ..Default::default() },
                    ..Default::default()
                };
                let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
                match api.create(&PostParams::default(), &sa).await {
                    Ok(_) => tracing::info!(namespace = %name, "created the default ServiceAccount"),
                    // Forbidden: the namespace started terminating meanwhile.
                    Err(e) if crate::runtime::is_status(&e, 403) => {}
                    Err(e) => tolerate_races(Err::<(), _>(e))?,
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
    use k8s_openapi::api::core::v1::NamespaceStatus;
    use kube::api::ObjectMeta;

    fn ns(name: &str, phase: Option<&str>) -> Namespace {
        Namespace {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            status: phase.map(|p| NamespaceStatus { phase: Some(p.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    fn sa(ns: &str, name: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn which_namespaces_get_a_default_account() {
        let mut deleting = ns("d", None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        let cases: Vec<(&str, Vec<Namespace>, Vec<ServiceAccount>, Vec<&str>)> = vec![
            ("new namespace", vec![ns("a", Some("Active"))], vec![], vec!["a"]),
            ("already there", vec![ns("a", Some("Active"))], vec![sa("a", "default")], vec![]),
            ("other accounts do not count", vec![ns("a", None)], vec![sa("a", "robot"), sa("b", "default")], vec!["a"]),
            ("terminating phase", vec![ns("t", Some("Terminating"))], vec![], vec![]),
            ("deletion timestamp", vec![deleting], vec![], vec![]),
        ];
        for (what, namespaces, accounts, want) in cases {
            assert_eq!(missing_default(&namespaces, &accounts), want, "{what}");
        }
    }
}
