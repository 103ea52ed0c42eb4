//! `clusterrole-aggregation`: every ClusterRole with `aggregationRule.clusterRoleSelectors`
//! gets as its rules the union of the rules of the other ClusterRoles its selectors match
//! (for each selector in turn, matching roles by name, each rule once) — rewritten whenever
//! any ClusterRole changes, so hand edits are overwritten.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::labels::SelectorError;
use crate::runtime::{changes, tolerate_races, whole_world};

/// The rules `target` should have, or None when it does not aggregate. Err when a selector
/// is invalid (the role is then left as it is).
pub fn aggregate(target: &ClusterRole, all: &[ClusterRole]) -> Option<Result<Vec<PolicyRule>, SelectorError>> {
    let selectors = target.aggregation_rule.as_ref()?.cluster_role_selectors.clone().unwrap_or_default();
    let mut sorted: Vec<&ClusterRole> = all.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in &selectors {
        for role in &sorted {
            if role.metadata.name == target.metadata.name {
                continue;
            }
            let labels = role.metadata.labels.clone().unwrap_or_default();
            match crate::labels::matches(selector, &labels) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return Some(Err(e)),
            }
            for rule in role.rules.iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(Ok(rules))
}

/// The ClusterRoles to write, with their new rules.
pub fn decide(all: &[ClusterRole]) -> Vec<ClusterRole> {
    let mut out = Vec::new();
    for role in all {
        match aggregate(role, all) {
            None => {}
            Some(Err(e)) => {
                tracing::warn!(clusterrole = ?role.metadata.name, error = %e, "invalid aggregation rule");
            }
            Some(Ok(rules)) if role.rules.clone().unwrap_or_default() != rules => {
                let mut updated = role.clone();
                updated.rules = Some(rules);
                out.push(updated);
            }
            Some(Ok(_)) => {}
        }
    }
    out
}

pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let roles: Api<ClusterRole> = Api::all(client);
    let triggers = vec![changes(roles.clone(), watcher::Config::default())];
    whole_world("clusterrole-aggregation", triggers, cfg.resync_period, cfg.metrics.clone(), || {
        let roles = roles.clone();
        async move {
            let all = roles.list(&ListParams::default()).await?.items;
            for role in decide(&all) {
                let name = role.metadata.name.clone().unwrap_or_default();
                tolerate_races(roles.replace(&name, &PostParams::default(), &role).await)?;
                tracing::info!(clusterrole = %name, "aggregated rules updated");
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
    use k8s_openapi::api::rbac::v1::AggregationRule;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kube::api::ObjectMeta;

    fn rule(verb: &str, resource: &str) -> PolicyRule {
        PolicyRule {
            verbs: vec![verb.into()],
            api_groups: Some(vec!["".into()]),
            resources: Some(vec![resource.into()]),
            ..Default::default()
        }
    }

    fn role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            rules: Some(rules),
            aggregation_rule: None,
        }
    }

    fn aggregating(
        name: &str,
        selects: &[&str],
        labels: &[(&str, &str)],
        rules: Option<Vec<PolicyRule>>,
    ) -> ClusterRole {
        let mut r = role(name, labels, vec![]);
        r.rules = rules;
        r.aggregation_rule = Some(AggregationRule {
            cluster_role_selectors: Some(
                selects
                    .iter()
                    .map(|l| LabelSelector {
                        match_labels: Some([(l.to_string(), "true".to_string())].into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
        r
    }

    #[test]
    fn aggregation_table() {
        let (get_cm, list_cm, get_s) = (rule("get", "configmaps"), rule("list", "configmaps"), rule("get", "secrets"));
        let cases: Vec<(&str, Vec<ClusterRole>, Vec<(&str, Vec<PolicyRule>)>)> = vec![
            (
                "union in name order without duplicates",
                vec![
                    aggregating("view", &["to-view"], &[], None),
                    role("b", &[("to-view", "true")], vec![list_cm.clone(), get_cm.clone()]),
                    role("a", &[("to-view", "true")], vec![get_cm.clone()]),
                    role("c", &[("other", "true")], vec![get_s.clone()]),
                ],
                vec![("view", vec![get_cm.clone(), list_cm.clone()])],
            ),
            (
                "already right",
                vec![
                    aggregating("view", &["to-view"], &[], Some(vec![get_cm.clone()])),
                    role("a", &[("to-view", "true")], vec![get_cm.clone()]),
                ],
                vec![],
            ),
            ("nothing matches and no rules", vec![aggregating("view", &["to-view"], &[], None)], vec![]),
            (
                "hand edits are overwritten",
                vec![aggregating("view", &["to-view"], &[], Some(vec![get_s.clone()]))],
                vec![("view", vec![])],
            ),
            (
                "chains: edit aggregates view's rules",
                vec![
                    aggregating("edit", &["to-edit"], &[], Some(vec![])),
                    aggregating("view", &["to-view"], &[("to-edit", "true")], Some(vec![get_cm.clone()])),
                    role("w", &[("to-edit", "true")], vec![get_s.clone()]),
                ],
                vec![("edit", vec![get_cm.clone(), get_s.clone()]), ("view", vec![])],
            ),
            (
                "several selectors, in order",
                vec![
                    aggregating("x", &["s2", "s1"], &[], None),
                    role("a", &[("s1", "true")], vec![get_s.clone()]),
                    role("b", &[("s2", "true")], vec![get_cm.clone()]),
                ],
                vec![("x", vec![get_cm.clone(), get_s.clone()])],
            ),
            (
                "a role never aggregates itself",
                vec![aggregating("self", &["me"], &[("me", "true")], Some(vec![get_s.clone()]))],
                vec![("self", vec![])],
            ),
        ];
        for (what, all, want) in cases {
            let got: Vec<(String, Vec<PolicyRule>)> = decide(&all)
                .into_iter()
                .map(|r| (r.metadata.name.unwrap_or_default(), r.rules.unwrap_or_default()))
                .collect();
            let want: Vec<(String, Vec<PolicyRule>)> = want.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
            assert_eq!(got, want, "{what}");
        }
    }
}
