//! Placeholder for the default policy (replaced by the full policy).

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

#[derive(Debug, Clone, Copy)]
pub struct PolicyOptions {
    pub tls_bootstrap_bindings: bool,
}

#[derive(Debug, Clone, Default)]
pub struct DefaultPolicy {
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some([("kubernetes.io/bootstrapping".to_string(), "rbac-defaults".to_string())].into()),
        annotations: Some([("rbac.authorization.kubernetes.io/autoupdate".to_string(), "true".to_string())].into()),
        ..Default::default()
    }
}

fn v(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| s.to_string()).collect())
}

fn res(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        api_groups: v(groups),
        resources: v(resources),
        ..Default::default()
    }
}

fn urls(verbs: &[&str], u: &[&str]) -> PolicyRule {
    PolicyRule { verbs: verbs.iter().map(|s| s.to_string()).collect(), non_resource_urls: v(u), ..Default::default() }
}

fn cr(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: meta(name), rules: Some(rules), aggregation_rule: None }
}

fn crb(name: &str, groups: &[&str]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.into(),
        },
        subjects: Some(
            groups
                .iter()
                .map(|g| Subject {
                    kind: "Group".into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    name: g.to_string(),
                    namespace: None,
                })
                .collect(),
        ),
    }
}

pub fn default_policy(_opts: &PolicyOptions) -> DefaultPolicy {
    let read = ["get", "list", "watch"];
    DefaultPolicy {
        cluster_roles: vec![
            cr("cluster-admin", vec![res(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])]),
            cr(
                "system:discovery",
                vec![urls(
                    &["get"],
                    &[
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                )],
            ),
            cr(
                "system:public-info-viewer",
                vec![urls(&["get"], &["/healthz", "/livez", "/readyz", "/version", "/version/"])],
            ),
            cr("view", vec![res(&read, &[""], &["configmaps", "pods", "services"])]),
            cr("edit", vec![res(&["*"], &[""], &["configmaps", "pods", "services", "secrets"])]),
        ],
        cluster_role_bindings: vec![
            crb("cluster-admin", &["system:masters"]),
            crb("system:discovery", &["system:authenticated"]),
            crb("system:public-info-viewer", &["system:authenticated", "system:unauthenticated"]),
        ],
        roles: Vec::new(),
        role_bindings: Vec::new(),
    }
}
