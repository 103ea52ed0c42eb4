//! The default RBAC policy (upstream's bootstrap policy): the data lives in `defaults.yaml`,
//! this module turns it into typed objects with upstream's label and annotation.
//!
//! It holds every ClusterRole and ClusterRoleBinding a kube-apiserver creates outside the
//! controller set, every namespaced Role and RoleBinding it creates in `kube-system` and
//! `kube-public`, and the `system:controller:*` roles (each bound to its ServiceAccount in
//! `kube-system`) of the controllers kustos runs:
//!
//! - `certificate-controller` (csrapproving, csrsigning, csrcleaner),
//! - `clusterrole-aggregation-controller`,
//! - `kube-apiserver-serving-clustertrustbundle-publisher`,
//! - `legacy-service-account-token-cleaner`,
//! - `podcertificaterequestcleaner` (podcertificaterequest-cleaner),
//! - `root-ca-cert-publisher`,
//! - `service-account-controller`.
//!
//! bootstrapsigner and tokencleaner use the namespaced `system:controller:bootstrap-signer`
//! and `system:controller:token-cleaner` Roles; the serviceaccount-token controller runs as
//! `system:kube-controller-manager`, as upstream.
//!
//! Upstream's other controller roles are left out because kustos runs no such controller
//! (and namespace deletion and garbage collection happen inside the apiserver under its own
//! identity): attachdetach, cronjob, daemon-set, deployment, device-taint-eviction,
//! disruption, endpoint, endpointslice, endpointslicemirroring, ephemeral-volume, expand,
//! generic-garbage-collector, horizontal-pod-autoscaler, job, namespace, node,
//! persistent-volume-binder, pod-garbage-collector, pv-protection, pvc-protection,
//! replicaset, replication, resource-claim, resourcequota, route, selinux-warning,
//! service-cidrs, service, statefulset, ttl-after-finished, ttl,
//! validatingadmissionpolicy-status and volumeattributesclass-protection.
//!
//! With [`PolicyOptions::tls_bootstrap_bindings`] the three ClusterRoleBindings kubeadm
//! creates for kubelet TLS bootstrapping are added under kubeadm's names, for every
//! bootstrap token (group `system:bootstrappers`); like kubeadm's they are not labelled
//! `rbac-defaults`, but they are annotated for reconciliation.
//!
//! Always present, under kubeadm's name and likewise unlabelled: the Role and RoleBinding
//! `kube-public/kubeadm:bootstrap-signer-clusterinfo` that let `system:anonymous` get the
//! ConfigMap `cluster-info` (and nothing else), so a joining node can read it before it has
//! credentials.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;

/// Label every default object carries.
pub const BOOTSTRAPPING_LABEL: &str = "kubernetes.io/bootstrapping";
pub const BOOTSTRAPPING_VALUE: &str = "rbac-defaults";
/// Annotation that opts an object in (`"true"`) or out (`"false"`) of reconciliation.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const DATA: &str = include_str!("defaults.yaml");

#[derive(Debug, Clone, Copy)]
pub struct PolicyOptions {
    /// Include the kubeadm-style bindings for kubelet TLS bootstrapping.
    pub tls_bootstrap_bindings: bool,
}

#[derive(Debug, Clone, Default)]
pub struct DefaultPolicy {
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Data {
    cluster_roles: Vec<RoleData>,
    controller_roles: Vec<RoleData>,
    cluster_role_bindings: Vec<BindingData>,
    roles: Vec<RoleData>,
    role_bindings: Vec<BindingData>,
    tls_bootstrap_bindings: Vec<BindingData>,
    kubeadm_roles: Vec<RoleData>,
    kubeadm_role_bindings: Vec<BindingData>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RoleData {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// For an aggregating role: the label (value "true") its selector matches.
    #[serde(default)]
    aggregate_from: Option<String>,
    #[serde(default)]
    rules: Vec<PolicyRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BindingData {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    role: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    /// `namespace/name`.
    #[serde(default)]
    service_accounts: Vec<String>,
}

fn meta(name: &str, namespace: Option<&str>, extra_labels: &BTreeMap<String, String>, labelled: bool) -> ObjectMeta {
    let mut labels = extra_labels.clone();
    if labelled {
        labels.insert(BOOTSTRAPPING_LABEL.into(), BOOTSTRAPPING_VALUE.into());
    }
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: (!labels.is_empty()).then_some(labels),
        annotations: Some([(AUTOUPDATE_ANNOTATION.to_string(), "true".to_string())].into()),
        ..Default::default()
    }
}

fn cluster_role(r: &RoleData) -> ClusterRole {
    let aggregation_rule = r.aggregate_from.as_ref().map(|label| AggregationRule {
        cluster_role_selectors: Some(vec![LabelSelector {
            match_labels: Some([(label.clone(), "true".to_string())].into()),
            ..Default::default()
        }]),
    });
    ClusterRole {
        metadata: meta(&r.name, None, &r.labels, true),
        // Aggregated roles start empty; the clusterrole-aggregation controller fills them.
        rules: if aggregation_rule.is_some() { None } else { Some(r.rules.clone()) },
        aggregation_rule,
    }
}

fn subjects(b: &BindingData) -> Option<Vec<Subject>> {
    let rbac = |kind: &str, name: &String| Subject {
        kind: kind.into(),
        api_group: Some(RBAC_GROUP.into()),
        name: name.clone(),
        namespace: None,
    };
    let mut out: Vec<Subject> = b.users.iter().map(|u| rbac("User", u)).collect();
    out.extend(b.groups.iter().map(|g| rbac("Group", g)));
    for sa in &b.service_accounts {
        let (ns, name) = sa.split_once('/').unwrap_or(("default", sa.as_str()));
        out.push(Subject {
            kind: "ServiceAccount".into(),
            api_group: None,
            name: name.into(),
            namespace: Some(ns.into()),
        });
    }
    (!out.is_empty()).then_some(out)
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: Some(RBAC_GROUP.into()), kind: kind.into(), name: name.into() }
}

fn cluster_role_binding(b: &BindingData, labelled: bool) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(&b.name, None, &BTreeMap::new(), labelled),
        role_ref: role_ref("ClusterRole", &b.role),
        subjects: subjects(b),
    }
}

/// The default policy. The data is compiled in and checked by the tests below, so a
/// failure to parse it is a build defect; it yields an empty policy rather than a panic.
pub fn default_policy(opts: &PolicyOptions) -> DefaultPolicy {
    let data: Data = match serde_yaml::from_str(DATA) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "the compiled-in default RBAC policy does not parse");
            return DefaultPolicy::default();
        }
    };
    let mut policy = DefaultPolicy::default();
    policy.cluster_roles.extend(data.cluster_roles.iter().map(cluster_role));
    policy.cluster_roles.extend(data.controller_roles.iter().map(cluster_role));
    policy.cluster_role_bindings.extend(data.cluster_role_bindings.iter().map(|b| cluster_role_binding(b, true)));
    // Each controller role is bound to the controller's ServiceAccount in kube-system.
    for r in &data.controller_roles {
        let sa = r.name.trim_start_matches("system:controller:");
        let b = BindingData {
            name: r.name.clone(),
            namespace: None,
            role: r.name.clone(),
            users: Vec::new(),
            groups: Vec::new(),
            service_accounts: vec![format!("kube-system/{sa}")],
        };
        policy.cluster_role_bindings.push(cluster_role_binding(&b, true));
    }
    if opts.tls_bootstrap_bindings {
        policy.cluster_role_bindings.extend(data.tls_bootstrap_bindings.iter().map(|b| cluster_role_binding(b, false)));
    }
    let labelled_roles = data.roles.iter().map(|r| (r, true));
    let kubeadm_roles = data.kubeadm_roles.iter().map(|r| (r, false));
    policy.roles.extend(labelled_roles.chain(kubeadm_roles).map(|(r, labelled)| Role {
        metadata: meta(&r.name, r.namespace.as_deref(), &r.labels, labelled),
        rules: Some(r.rules.clone()),
    }));
    let labelled_bindings = data.role_bindings.iter().map(|b| (b, true));
    let kubeadm_bindings = data.kubeadm_role_bindings.iter().map(|b| (b, false));
    policy.role_bindings.extend(labelled_bindings.chain(kubeadm_bindings).map(|(b, labelled)| RoleBinding {
        metadata: meta(&b.name, b.namespace.as_deref(), &BTreeMap::new(), labelled),
        role_ref: role_ref("Role", &b.role),
        subjects: subjects(b),
    }));
    policy
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn policy() -> DefaultPolicy {
        default_policy(&PolicyOptions { tls_bootstrap_bindings: true })
    }

    fn cr<'a>(p: &'a DefaultPolicy, name: &str) -> &'a ClusterRole {
        p.cluster_roles.iter().find(|r| r.metadata.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("{name}"))
    }

    fn crb<'a>(p: &'a DefaultPolicy, name: &str) -> &'a ClusterRoleBinding {
        p.cluster_role_bindings
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name}"))
    }

    type SubjectKey<'a> = (&'a str, &'a str, Option<&'a str>);

    fn subject_names(b: &ClusterRoleBinding) -> Vec<(String, String)> {
        b.subjects.iter().flatten().map(|s| (s.kind.clone(), s.name.clone())).collect()
    }

    #[test]
    fn the_data_parses_and_has_every_object() {
        serde_yaml::from_str::<Data>(DATA).unwrap();
        let p = policy();
        assert_eq!(p.cluster_roles.len(), 32 + 7);
        assert_eq!(p.cluster_role_bindings.len(), 13 + 7 + 3);
        assert_eq!(p.roles.len(), 7 + 1);
        assert_eq!(p.role_bindings.len(), 7 + 1);
        let per_namespace = |ns: &str| {
            (
                p.roles.iter().filter(|r| r.metadata.namespace.as_deref() == Some(ns)).count(),
                p.role_bindings.iter().filter(|r| r.metadata.namespace.as_deref() == Some(ns)).count(),
            )
        };
        assert_eq!(per_namespace("kube-system"), (6, 6));
        assert_eq!(per_namespace("kube-public"), (2, 2));
        let without = default_policy(&PolicyOptions { tls_bootstrap_bindings: false });
        assert_eq!(without.cluster_role_bindings.len(), 13 + 7);
        assert!(!without.cluster_role_bindings.iter().any(|b| b
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("kubeadm:")));
    }

    #[test]
    fn labels_annotations_and_unique_names() {
        let p = policy();
        let mut seen = std::collections::HashSet::new();
        let mut check = |kind: &str, m: &ObjectMeta| {
            let name = m.name.clone().unwrap();
            assert!(seen.insert((kind.to_string(), m.namespace.clone(), name.clone())), "duplicate {kind} {name}");
            assert_eq!(m.annotations.as_ref().unwrap()[AUTOUPDATE_ANNOTATION], "true", "{name}");
            let labelled = m.labels.as_ref().and_then(|l| l.get(BOOTSTRAPPING_LABEL)).map(String::as_str);
            let want = if name.starts_with("kubeadm:") { None } else { Some(BOOTSTRAPPING_VALUE) };
            assert_eq!(labelled, want, "{name}");
        };
        p.cluster_roles.iter().for_each(|r| check("ClusterRole", &r.metadata));
        p.cluster_role_bindings.iter().for_each(|r| check("ClusterRoleBinding", &r.metadata));
        p.roles.iter().for_each(|r| check("Role", &r.metadata));
        p.role_bindings.iter().for_each(|r| check("RoleBinding", &r.metadata));
    }

    #[test]
    fn every_binding_points_at_a_default_role_and_every_rule_is_valid() {
        let p = policy();
        for b in &p.cluster_role_bindings {
            cr(&p, &b.role_ref.name);
        }
        for b in &p.role_bindings {
            let ns = b.metadata.namespace.as_deref();
            assert!(
                p.roles
                    .iter()
                    .any(|r| r.metadata.name == Some(b.role_ref.name.clone()) && r.metadata.namespace.as_deref() == ns),
                "{:?}",
                b.metadata.name
            );
        }
        let all_rules = p
            .cluster_roles
            .iter()
            .flat_map(|r| r.rules.iter().flatten())
            .chain(p.roles.iter().flat_map(|r| r.rules.iter().flatten()));
        for rule in all_rules {
            assert!(!rule.verbs.is_empty(), "{rule:?}");
            let urls = rule.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty());
            let resources = rule.resources.as_ref().is_some_and(|r| !r.is_empty());
            assert!(urls != resources, "a rule has resources or URLs: {rule:?}");
            if resources {
                assert!(rule.api_groups.as_ref().is_some_and(|g| !g.is_empty()), "{rule:?}");
            } else {
                assert!(rule.api_groups.is_none() && rule.resource_names.is_none(), "{rule:?}");
            }
        }
        // Namespaced roles cannot grant non-resource URLs.
        for rule in p.roles.iter().flat_map(|r| r.rules.iter().flatten()) {
            assert!(rule.non_resource_urls.is_none(), "{rule:?}");
        }
    }

    /// The number of rules of each default role, as upstream's bootstrap policy has them, so
    /// that a rule lost or added by accident is noticed.
    #[test]
    fn rule_counts_match_upstream() {
        let p = policy();
        let cases: &[(&str, usize)] = &[
            ("admin", 0),
            ("cluster-admin", 2),
            ("edit", 0),
            ("system:aggregate-to-admin", 2),
            ("system:aggregate-to-edit", 13),
            ("system:aggregate-to-view", 10),
            ("system:auth-delegator", 2),
            ("system:basic-user", 2),
            ("system:certificates.k8s.io:certificatesigningrequests:nodeclient", 1),
            ("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", 1),
            ("system:certificates.k8s.io:kube-apiserver-client-approver", 1),
            ("system:certificates.k8s.io:kube-apiserver-client-kubelet-approver", 1),
            ("system:certificates.k8s.io:kubelet-serving-approver", 1),
            ("system:certificates.k8s.io:legacy-unknown-approver", 1),
            ("system:discovery", 1),
            ("system:heapster", 2),
            ("system:kube-aggregator", 1),
            ("system:kube-controller-manager", 11),
            ("system:cluster-trust-bundle-discovery", 1),
            ("system:kube-dns", 1),
            ("system:kube-scheduler", 18),
            ("system:kubelet-api-admin", 3),
            ("system:monitoring", 1),
            ("system:node", 24),
            ("system:node-bootstrapper", 1),
            ("system:node-problem-detector", 3),
            ("system:node-proxier", 4),
            ("system:persistent-volume-provisioner", 5),
            ("system:public-info-viewer", 1),
            ("system:service-account-issuer-discovery", 1),
            ("system:volume-scheduler", 3),
            ("view", 0),
            ("system:controller:certificate-controller", 6),
            ("system:controller:clusterrole-aggregation-controller", 1),
            ("system:controller:kube-apiserver-serving-clustertrustbundle-publisher", 3),
            ("system:controller:legacy-service-account-token-cleaner", 2),
            ("system:controller:podcertificaterequestcleaner", 1),
            ("system:controller:root-ca-cert-publisher", 2),
            ("system:controller:service-account-controller", 2),
        ];
        assert_eq!(cases.len(), p.cluster_roles.len());
        for (name, want) in cases {
            assert_eq!(cr(&p, name).rules.iter().flatten().count(), *want, "{name}");
        }
        let ns_cases: &[(&str, &str, usize)] = &[
            ("kube-public", "system:controller:bootstrap-signer", 3),
            ("kube-public", "kubeadm:bootstrap-signer-clusterinfo", 1),
            ("kube-system", "extension-apiserver-authentication-reader", 1),
            ("kube-system", "system::leader-locking-kube-controller-manager", 2),
            ("kube-system", "system::leader-locking-kube-scheduler", 2),
            ("kube-system", "system:controller:bootstrap-signer", 1),
            ("kube-system", "system:controller:cloud-provider", 1),
            ("kube-system", "system:controller:token-cleaner", 2),
        ];
        assert_eq!(ns_cases.len(), p.roles.len());
        for (ns, name, want) in ns_cases {
            let role = p
                .roles
                .iter()
                .find(|r| r.metadata.namespace.as_deref() == Some(ns) && r.metadata.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{ns}/{name}"));
            assert_eq!(role.rules.iter().flatten().count(), *want, "{ns}/{name}");
        }
    }

    #[test]
    fn key_facts_of_the_upstream_policy() {
        let p = policy();
        let g = |n: &str| ("Group".to_string(), n.to_string());
        let cases: &[(&str, Vec<(String, String)>)] = &[
            ("cluster-admin", vec![g("system:masters")]),
            ("system:public-info-viewer", vec![g("system:authenticated"), g("system:unauthenticated")]),
            ("system:basic-user", vec![g("system:authenticated")]),
            ("system:discovery", vec![g("system:authenticated")]),
            ("system:service-account-issuer-discovery", vec![g("system:serviceaccounts")]),
            ("system:cluster-trust-bundle-discovery", vec![g("system:serviceaccounts")]),
            (
                "system:controller:podcertificaterequestcleaner",
                vec![("ServiceAccount".to_string(), "podcertificaterequestcleaner".to_string())],
            ),
            ("system:node", vec![]),
            ("kubeadm:kubelet-bootstrap", vec![g("system:bootstrappers")]),
            ("kubeadm:node-autoapprove-bootstrap", vec![g("system:bootstrappers")]),
            ("kubeadm:node-autoapprove-certificate-rotation", vec![g("system:nodes")]),
            (
                "system:controller:certificate-controller",
                vec![("ServiceAccount".to_string(), "certificate-controller".to_string())],
            ),
        ];
        for (name, want) in cases {
            assert_eq!(&subject_names(crb(&p, name)), want, "{name}");
        }
        // (namespace, binding, role, subjects as (kind, name, namespace))
        let ns_cases: &[(&str, &str, &str, &[SubjectKey])] = &[
            (
                "kube-public",
                "system:controller:bootstrap-signer",
                "system:controller:bootstrap-signer",
                &[("ServiceAccount", "bootstrap-signer", Some("kube-system"))],
            ),
            (
                "kube-system",
                "system::extension-apiserver-authentication-reader",
                "extension-apiserver-authentication-reader",
                &[("User", "system:kube-controller-manager", None), ("User", "system:kube-scheduler", None)],
            ),
            (
                "kube-system",
                "system::leader-locking-kube-controller-manager",
                "system::leader-locking-kube-controller-manager",
                &[
                    ("User", "system:kube-controller-manager", None),
                    ("ServiceAccount", "kube-controller-manager", Some("kube-system")),
                    ("ServiceAccount", "leader-election-controller", Some("kube-system")),
                ],
            ),
            (
                "kube-system",
                "system:controller:cloud-provider",
                "system:controller:cloud-provider",
                &[("ServiceAccount", "cloud-provider", Some("kube-system"))],
            ),
            (
                "kube-system",
                "system:controller:token-cleaner",
                "system:controller:token-cleaner",
                &[("ServiceAccount", "token-cleaner", Some("kube-system"))],
            ),
            (
                "kube-public",
                "kubeadm:bootstrap-signer-clusterinfo",
                "kubeadm:bootstrap-signer-clusterinfo",
                &[("User", "system:anonymous", None)],
            ),
        ];
        for (ns, name, role, want) in ns_cases {
            let b = p
                .role_bindings
                .iter()
                .find(|b| b.metadata.namespace.as_deref() == Some(ns) && b.metadata.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{ns}/{name}"));
            assert_eq!((b.role_ref.kind.as_str(), b.role_ref.name.as_str()), ("Role", *role), "{ns}/{name}");
            let got: Vec<SubjectKey> = b
                .subjects
                .iter()
                .flatten()
                .map(|s| (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()))
                .collect();
            assert_eq!(&got, want, "{ns}/{name}");
        }

        let sa = crb(&p, "system:controller:root-ca-cert-publisher").subjects.clone().unwrap();
        assert_eq!(sa[0].namespace.as_deref(), Some("kube-system"));
        assert_eq!(sa[0].api_group, None);

        let view = cr(&p, "view");
        assert!(view.rules.is_none());
        let selector = &view.aggregation_rule.as_ref().unwrap().cluster_role_selectors.as_ref().unwrap()[0];
        assert_eq!(selector.match_labels.as_ref().unwrap()["rbac.authorization.k8s.io/aggregate-to-view"], "true");
        assert_eq!(view.metadata.labels.as_ref().unwrap()["rbac.authorization.k8s.io/aggregate-to-edit"], "true");
        let to_view = cr(&p, "system:aggregate-to-view");
        assert!(!to_view.rules.iter().flatten().any(|r| r.resources.iter().flatten().any(|x| x == "secrets")));
        let bootstrapper = cr(&p, "system:node-bootstrapper").rules.clone().unwrap();
        assert_eq!(bootstrapper[0].resources, Some(vec!["certificatesigningrequests".to_string()]));
        assert_eq!(bootstrapper[0].verbs, vec!["create", "get", "list", "watch"]);
    }
}
