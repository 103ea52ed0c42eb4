//! The RBAC authorizer: Allow when a rule bound to the user (or one of their groups, or
//! their service account) allows the request, naming the binding in the reason; otherwise
//! no opinion, with the resolution errors (missing roles) as the reason. Decisions are
//! remembered per snapshot for equivalent requests ([`super::decisions`]).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::cache::{aggregate, RbacCache, RefError, Snapshot};
use super::decisions::{self, Decisions};
use super::rules::rule_allows;
use crate::authn::UserInfo;
use crate::authz::{Attributes, Authorizer, Decision, RuleSet, Verdict};

pub struct RbacAuthorizer {
    cache: Arc<RbacCache>,
    decisions: Decisions,
    resolutions: AtomicU64,
}

impl RbacAuthorizer {
    pub fn new(cache: Arc<RbacCache>) -> Self {
        Self::with_bounds(cache, decisions::MAX_ENTRIES, decisions::MAX_BYTES)
    }

    /// With the decision memo bounded to `max_entries` entries and `max_bytes` bytes.
    pub fn with_bounds(cache: Arc<RbacCache>, max_entries: usize, max_bytes: usize) -> Self {
        RbacAuthorizer { cache, decisions: Decisions::new(max_entries, max_bytes), resolutions: AtomicU64::new(0) }
    }

    /// How many requests were decided by walking the rules (the others were remembered).
    pub fn resolutions(&self) -> u64 {
        self.resolutions.load(Ordering::Relaxed)
    }

    /// Entries of the decision memo, and the bytes they are counted for.
    pub fn memo_usage(&self) -> (usize, usize) {
        self.decisions.usage()
    }

    /// The decision from the rules of `snapshot`, without the memo.
    pub fn resolve(&self, snapshot: &Snapshot, attrs: &Attributes<'_>) -> Verdict {
        self.resolutions.fetch_add(1, Ordering::Relaxed);
        let mut allowed_by = None;
        let mut errors = Vec::new();
        snapshot.visit_rules_for(attrs.user, &attrs.info.namespace, |item| match item {
            Ok((source, rule)) if rule_allows(attrs.info, rule) => {
                allowed_by = Some(source.describe());
                ControlFlow::Break(())
            }
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => {
                errors.push(e.lister_message());
                ControlFlow::Continue(())
            }
        });
        if let Some(source) = allowed_by {
            return Verdict::allow(format!("RBAC: allowed by {source}"));
        }
        if errors.is_empty() {
            return Verdict::no_opinion();
        }
        no_opinion(format!("RBAC: {}", aggregate(&errors)))
    }
}

fn no_opinion(reason: String) -> Verdict {
    Verdict { decision: Decision::NoOpinion, reason, error: String::new() }
}

/// Split rules the way SelfSubjectRulesReview reports them.
pub fn rule_set(rules: Vec<PolicyRule>, errors: &[RefError]) -> RuleSet {
    let mut out = RuleSet::default();
    for r in rules {
        if r.resources.as_ref().is_some_and(|v| !v.is_empty()) {
            out.resource_rules.push(PolicyRule {
                verbs: r.verbs.clone(),
                api_groups: r.api_groups.clone(),
                resources: r.resources.clone(),
                resource_names: r.resource_names.clone(),
                non_resource_urls: None,
            });
        }
        if r.non_resource_urls.as_ref().is_some_and(|v| !v.is_empty()) {
            out.non_resource_rules.push(PolicyRule {
                verbs: r.verbs,
                non_resource_urls: r.non_resource_urls,
                ..Default::default()
            });
        }
    }
    let messages: Vec<String> = errors.iter().map(RefError::lister_message).collect();
    out.evaluation_error = aggregate(&messages);
    out
}

#[async_trait::async_trait]
impl Authorizer for RbacAuthorizer {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
        let snapshot = match self.cache.snapshot().await {
            Ok(s) => s,
            Err(e) => return no_opinion(format!("RBAC: {e}")),
        };
        self.decisions.decide(&snapshot, attrs, || self.resolve(&snapshot, attrs))
    }

    /// Upstream reports RBAC's rules as complete; resolution errors go to the evaluation error.
    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleSet {
        match self.cache.snapshot().await {
            Ok(s) => {
                let (rules, errors) = s.rules_for(user, namespace);
                rule_set(rules, &errors)
            }
            Err(e) => RuleSet { evaluation_error: e.to_string(), ..Default::default() },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::authz::rbac::cache::install;
    use crate::authz::Chain;
    use crate::http::request_info::{resolve, RequestInfo};
    use crate::storage::Storage;
    use http::Method;
    use serde_json::{json, Value};

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    async fn put(store: &Arc<dyn Storage>, resource: &str, obj: Value) {
        crate::authz::rbac::testutil::put(store, resource, &obj).await;
    }

    fn cluster_role(name: &str, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
    }

    fn binding(kind: &str, name: &str, ns: Option<&str>, role_kind: &str, role: &str, subjects: Value) -> Value {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": subjects})
    }

    /// A store with a small policy, the RBAC authorizer over it, and the store.
    async fn fixture() -> (RbacAuthorizer, Arc<dyn Storage>) {
        let (store, cache) = install(Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap()));
        put(
            &store,
            "clusterroles",
            cluster_role(
                "pod-reader",
                json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]),
            ),
        )
        .await;
        put(
            &store,
            "clusterroles",
            cluster_role("discovery", json!([{"nonResourceURLs": ["/api", "/api/*", "/version"], "verbs": ["get"]}])),
        )
        .await;
        put(
            &store,
            "clusterroles",
            cluster_role(
                "one-secret",
                json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"], "verbs": ["get"]}]),
            ),
        )
        .await;
        put(
            &store,
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "cm-writer", "namespace": "dev"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update"]}]}),
        )
        .await;
        put(
            &store,
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "discovery",
                None,
                "ClusterRole",
                "discovery",
                json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}]),
            ),
        )
        .await;
        put(
            &store,
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "broken",
                None,
                "ClusterRole",
                "nope",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "erin"}]),
            ),
        )
        .await;
        put(
            &store,
            "rolebindings",
            binding(
                "RoleBinding",
                "readers",
                Some("dev"),
                "ClusterRole",
                "pod-reader",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                   {"kind": "ServiceAccount", "name": "bot"}]),
            ),
        )
        .await;
        put(
            &store,
            "rolebindings",
            binding(
                "RoleBinding",
                "writers",
                Some("dev"),
                "Role",
                "cm-writer",
                json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"}]),
            ),
        )
        .await;
        put(
            &store,
            "rolebindings",
            binding(
                "RoleBinding",
                "secret",
                Some("dev"),
                "ClusterRole",
                "one-secret",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]),
            ),
        )
        .await;
        put(
            &store,
            "rolebindings",
            binding(
                "RoleBinding",
                "dangling",
                Some("dev"),
                "Role",
                "gone",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "erin"}]),
            ),
        )
        .await;
        put(&store, "rolebindings", binding("RoleBinding", "namespaced-user", Some("dev"), "ClusterRole", "pod-reader",
            json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "mallory", "namespace": "dev"}]))).await;
        (RbacAuthorizer::new(cache), store)
    }

    #[tokio::test]
    async fn decisions_and_reasons_follow_upstream() {
        let (rbac, _) = fixture().await;
        let alice = user("alice", &["system:authenticated"]);
        let dev = user("dan", &["devs", "system:authenticated"]);
        let bot = user("system:serviceaccount:dev:bot", &["system:serviceaccounts", "system:authenticated"]);
        let erin = user("erin", &["system:authenticated"]);
        let mallory = user("mallory", &["system:authenticated"]);
        let anon = user("system:anonymous", &["system:unauthenticated"]);
        let cases: &[(&str, &UserInfo, Method, &str, Decision, &str)] = &[
            ("rb grants in its namespace", &alice, Method::GET, "/api/v1/namespaces/dev/pods/p", Decision::Allow,
             "RBAC: allowed by RoleBinding \"readers/dev\" of ClusterRole \"pod-reader\" to User \"alice\""),
            ("rb to a clusterrole grants only in its namespace", &alice, Method::GET, "/api/v1/namespaces/prod/pods/p",
             Decision::NoOpinion, ""),
            ("not cluster-wide either", &alice, Method::GET, "/api/v1/pods", Decision::NoOpinion, ""),
            ("subresource listed", &alice, Method::GET, "/api/v1/namespaces/dev/pods/p/log", Decision::Allow,
             "RBAC: allowed by RoleBinding \"readers/dev\" of ClusterRole \"pod-reader\" to User \"alice\""),
            ("verb not granted", &alice, Method::DELETE, "/api/v1/namespaces/dev/pods/p", Decision::NoOpinion, ""),
            ("resourceNames allow the named one", &alice, Method::GET, "/api/v1/namespaces/dev/secrets/s1", Decision::Allow,
             "RBAC: allowed by RoleBinding \"secret/dev\" of ClusterRole \"one-secret\" to User \"alice\""),
            ("resourceNames refuse others", &alice, Method::GET, "/api/v1/namespaces/dev/secrets/s2", Decision::NoOpinion, ""),
            ("group binding to a role", &dev, Method::POST, "/api/v1/namespaces/dev/configmaps", Decision::Allow,
             "RBAC: allowed by RoleBinding \"writers/dev\" of Role \"cm-writer\" to Group \"devs\""),
            ("service account defaulted to the binding namespace", &bot, Method::GET, "/api/v1/namespaces/dev/pods",
             Decision::Allow, "RBAC: allowed by RoleBinding \"readers/dev\" of ClusterRole \"pod-reader\" to ServiceAccount \"bot/dev\""),
            ("cluster binding for non-resource urls", &alice, Method::GET, "/api/v1", Decision::Allow,
             "RBAC: allowed by ClusterRoleBinding \"discovery\" of ClusterRole \"discovery\" to Group \"system:authenticated\""),
            ("anonymous is not authenticated", &anon, Method::GET, "/api", Decision::NoOpinion, ""),
            ("missing cluster role is reported", &erin, Method::GET, "/api/v1/pods", Decision::NoOpinion,
             "RBAC: clusterrole.rbac.authorization.k8s.io \"nope\" not found"),
            ("missing roles are aggregated", &erin, Method::GET, "/api/v1/namespaces/dev/pods", Decision::NoOpinion,
             "RBAC: [clusterrole.rbac.authorization.k8s.io \"nope\" not found, role.rbac.authorization.k8s.io \"gone\" not found]"),
            ("errors do not matter when allowed", &erin, Method::GET, "/version", Decision::Allow,
             "RBAC: allowed by ClusterRoleBinding \"discovery\" of ClusterRole \"discovery\" to Group \"system:authenticated\""),
            ("a namespaced User subject never applies", &mallory, Method::GET, "/api/v1/namespaces/dev/pods",
             Decision::NoOpinion, ""),
        ];
        for (name, u, m, p, want, reason) in cases {
            let info = resolve(m, p, None);
            let got = rbac.authorize(&Attributes { user: u, info: &info }).await;
            assert_eq!((&got.decision, got.reason.as_str()), (want, *reason), "{name}");
            assert_eq!(got.error, "", "{name}");
        }
    }

    #[tokio::test]
    async fn special_verbs_are_plain_rules() {
        let (rbac, store) = fixture().await;
        put(
            &store,
            "clusterroles",
            cluster_role(
                "binder",
                json!([{"apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"], "resourceNames": ["view"], "verbs": ["bind"]}]),
            ),
        )
        .await;
        put(
            &store,
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "binder",
                None,
                "ClusterRole",
                "binder",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "gina"}]),
            ),
        )
        .await;
        let gina = user("gina", &[]);
        for (role, want) in [("view", Decision::Allow), ("edit", Decision::NoOpinion)] {
            let info = RequestInfo {
                is_resource_request: true,
                verb: "bind".into(),
                api_group: "rbac.authorization.k8s.io".into(),
                resource: "clusterroles".into(),
                name: role.into(),
                namespace: "dev".into(),
                ..Default::default()
            };
            assert_eq!(rbac.authorize(&Attributes { user: &gina, info: &info }).await.decision, want, "{role}");
        }
    }

    #[tokio::test]
    async fn rules_for_splits_resource_and_url_rules() {
        let (rbac, _) = fixture().await;
        let alice = user("alice", &["system:authenticated"]);
        let rs = rbac.rules_for(&alice, "dev").await;
        assert_eq!(rs.resource_rules.len(), 2, "{rs:?}");
        assert_eq!(rs.resource_rules[0].resources.as_deref().unwrap(), ["pods", "pods/log"]);
        assert_eq!(rs.resource_rules[1].resource_names.as_deref().unwrap(), ["s1"]);
        assert_eq!(rs.non_resource_rules.len(), 1);
        assert_eq!(rs.non_resource_rules[0].non_resource_urls.as_deref().unwrap(), ["/api", "/api/*", "/version"]);
        assert!(rs.non_resource_rules[0].api_groups.is_none());
        assert!(!rs.incomplete && rs.evaluation_error.is_empty());
        let rs = rbac.rules_for(&user("erin", &[]), "dev").await;
        assert!(rs.resource_rules.is_empty() && !rs.incomplete);
        assert_eq!(
            rs.evaluation_error,
            "[clusterrole.rbac.authorization.k8s.io \"nope\" not found, role.rbac.authorization.k8s.io \"gone\" not found]"
        );
    }

    #[tokio::test]
    async fn the_default_chain_puts_rbac_after_masters() {
        let (rbac, _) = fixture().await;
        let chain = Chain(vec![Arc::new(crate::authz::MastersAuthorizer), Arc::new(rbac)]);
        let admin = user("admin", &["system:masters"]);
        let info = resolve(&Method::DELETE, "/api/v1/namespaces/x/secrets/y", None);
        assert!(chain.authorize(&Attributes { user: &admin, info: &info }).await.allowed());
        let erin = user("erin", &[]);
        let v = chain.authorize(&Attributes { user: &erin, info: &info }).await;
        assert_eq!(v.decision, Decision::NoOpinion);
        assert_eq!(v.reason, "RBAC: clusterrole.rbac.authorization.k8s.io \"nope\" not found");
        assert_eq!(
            crate::authz::forbidden_with_reason(&Attributes { user: &erin, info: &info }, &v.reason).to_string(),
            "secrets \"y\" is forbidden: User \"erin\" cannot delete resource \"secrets\" in API group \"\" in the namespace \"x\": RBAC: clusterrole.rbac.authorization.k8s.io \"nope\" not found"
        );
    }

    /// Users and requests for comparing remembered decisions with resolved ones.
    fn memo_table() -> (Vec<UserInfo>, Vec<RequestInfo>) {
        let users = vec![
            user("alice", &["system:authenticated"]),
            user("dan", &["devs", "system:authenticated"]),
            user("dan", &["system:authenticated", "devs"]),
            user("dan", &["system:authenticated"]),
            user("system:serviceaccount:dev:bot", &["system:serviceaccounts", "system:authenticated"]),
            user("system:serviceaccount:prod:bot", &["system:serviceaccounts", "system:authenticated"]),
            user("erin", &["system:authenticated"]),
            user("mallory", &["system:authenticated"]),
            user("zed", &["system:authenticated"]),
            user("zed", &[]),
            user("system:anonymous", &["system:unauthenticated"]),
            user("system:node:n1", &["system:nodes", "system:authenticated"]),
        ];
        let mut reqs = Vec::new();
        for (m, p, q) in [
            (Method::GET, "/api/v1/namespaces/dev/pods/p", None),
            (Method::GET, "/api/v1/namespaces/dev/pods/q", None),
            (Method::GET, "/api/v1/namespaces/prod/pods/p", None),
            (Method::GET, "/api/v1/namespaces/nowhere/pods/p", None),
            (Method::GET, "/api/v1/pods", None),
            (Method::GET, "/api/v1/namespaces/dev/pods/p/log", None),
            (Method::GET, "/api/v1/namespaces/dev/pods/p/exec", None),
            (Method::DELETE, "/api/v1/namespaces/dev/pods/p", None),
            (Method::GET, "/api/v1/namespaces/dev/secrets/s1", None),
            (Method::GET, "/api/v1/namespaces/dev/secrets/s2", None),
            (Method::GET, "/api/v1/namespaces/dev/secrets", Some("fieldSelector=metadata.name%3Ds1")),
            (Method::GET, "/api/v1/namespaces/dev/secrets", Some("fieldSelector=metadata.name%3Ds3")),
            (Method::POST, "/api/v1/namespaces/dev/configmaps", None),
            (Method::POST, "/api/v1/namespaces/prod/configmaps", None),
            (Method::GET, "/api/v1", None),
            (Method::GET, "/api", None),
            (Method::GET, "/version", None),
            (Method::GET, "/healthz", None),
            (Method::POST, "/version", None),
            (Method::GET, "/apis/apps/v1/namespaces/dev/deployments/d", None),
        ] {
            reqs.push(resolve(&m, p, q));
        }
        (users, reqs)
    }

    /// Every (user, request) of the table: the authorizer (asked twice, so the second answer
    /// is remembered) answers as the uncached resolution over the current snapshot.
    async fn assert_memo_agrees(rbac: &RbacAuthorizer, when: &str) {
        let (users, reqs) = memo_table();
        let snapshot = rbac.cache.snapshot().await.unwrap();
        for u in &users {
            for info in &reqs {
                let attrs = Attributes { user: u, info };
                let want = rbac.resolve(&snapshot, &attrs);
                for round in ["first", "remembered"] {
                    let got = rbac.authorize(&attrs).await;
                    assert_eq!(got, want, "{when}, {round}: {} {:?} {}", u.name, u.groups, info.path);
                }
            }
        }
    }

    async fn delete(store: &Arc<dyn Storage>, key: &str) {
        let key = format!("{}{key}", crate::authz::rbac::cache::rbac_prefix());
        let rev = store.get(&key).await.unwrap().unwrap().mod_rev;
        store.delete(&key, rev).await.unwrap();
    }

    #[tokio::test]
    async fn remembered_decisions_equal_resolved_ones_across_writes() {
        let (rbac, store) = fixture().await;
        assert_memo_agrees(&rbac, "initial policy").await;
        let zed = user("zed", &["system:authenticated"]);
        let prod_pod = resolve(&Method::GET, "/api/v1/namespaces/prod/pods/p", None);
        let ask = |u: &UserInfo, info: &RequestInfo| {
            let (u, info) = (u.clone(), info.clone());
            let rbac = &rbac;
            async move { rbac.authorize(&Attributes { user: &u, info: &info }).await }
        };
        assert_eq!(ask(&zed, &prod_pod).await.decision, Decision::NoOpinion);
        put(
            &store,
            "rolebindings",
            binding(
                "RoleBinding",
                "zed-reads",
                Some("prod"),
                "ClusterRole",
                "pod-reader",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "zed"}]),
            ),
        )
        .await;
        assert_eq!(
            ask(&zed, &prod_pod).await,
            Verdict::allow(
                "RBAC: allowed by RoleBinding \"zed-reads/prod\" of ClusterRole \"pod-reader\" to User \"zed\""
            ),
            "a binding added flips the remembered decision at once"
        );
        assert_memo_agrees(&rbac, "after a binding was added").await;
        put(
            &store,
            "clusterroles",
            cluster_role(
                "any-secret-s2",
                json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s2"], "verbs": ["get"]}]),
            ),
        )
        .await;
        put(
            &store,
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "bots-s2",
                None,
                "ClusterRole",
                "any-secret-s2",
                json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "prod"}]),
            ),
        )
        .await;
        assert_memo_agrees(&rbac, "after a named-object rule was added").await;
        delete(&store, "rolebindings/prod/zed-reads").await;
        assert_eq!(ask(&zed, &prod_pod).await.decision, Decision::NoOpinion, "a binding removed flips it back");
        delete(&store, "clusterroles/pod-reader").await;
        let alice_pod = resolve(&Method::GET, "/api/v1/namespaces/dev/pods/p", None);
        assert_eq!(
            ask(&user("alice", &["system:authenticated"]), &alice_pod).await.reason,
            "RBAC: clusterrole.rbac.authorization.k8s.io \"pod-reader\" not found",
            "a role removed is seen by the next request"
        );
        assert_memo_agrees(&rbac, "after a role was removed").await;
    }

    #[tokio::test]
    async fn an_equivalent_request_is_not_resolved_again() {
        let (rbac, _) = fixture().await;
        let ask = |name: &str, groups: &[&str], m: Method, p: &str, q: Option<&str>| {
            let (u, info) = (user(name, groups), resolve(&m, p, q));
            let rbac = &rbac;
            async move {
                rbac.authorize(&Attributes { user: &u, info: &info }).await;
                rbac.resolutions()
            }
        };
        let auth = ["system:authenticated"];
        assert_eq!(ask("alice", &auth, Method::GET, "/api/v1/namespaces/dev/pods/p", None).await, 1);
        assert_eq!(
            ask("alice", &auth, Method::GET, "/api/v1/namespaces/dev/pods/p", None).await,
            1,
            "the same request"
        );
        assert_eq!(
            ask("alice", &auth, Method::GET, "/api/v1/namespaces/dev/pods/other", None).await,
            1,
            "another object no rule names"
        );
        // Users no binding names, in namespaces without bindings, are one case.
        assert_eq!(
            ask("node-a", &["system:nodes", "system:authenticated"], Method::GET, "/api/v1/namespaces/x/pods/p", None)
                .await,
            2
        );
        assert_eq!(
            ask("node-b", &["system:authenticated", "system:nodes"], Method::GET, "/api/v1/namespaces/y/pods/q", None)
                .await,
            2
        );
        assert_eq!(ask("node-b", &["system:authenticated"], Method::GET, "/api/v1/namespaces/y/pods/q", None).await, 2);
        assert_eq!(ask("node-c", &[], Method::GET, "/api/v1/namespaces/y/pods/q", None).await, 3, "other groups");
        assert_eq!(
            ask("alice", &auth, Method::GET, "/api/v1/namespaces/dev/secrets/s1", None).await,
            4,
            "a named object"
        );
        assert_eq!(
            ask("alice", &auth, Method::GET, "/api/v1/namespaces/dev/pods/p", Some("watch=1")).await,
            5,
            "another verb"
        );
        assert_eq!(rbac.memo_usage().0, 5);
    }

    #[tokio::test]
    async fn the_memo_stays_bounded_under_a_flood() {
        let (_, store) = fixture().await;
        let (_, cache) = crate::authz::rbac::cache::install(store);
        let rbac = RbacAuthorizer::with_bounds(cache, 16, 1 << 20);
        let snapshot = rbac.cache.snapshot().await.unwrap();
        for i in 0..200 {
            let u = user(&format!("user-{i}"), &["system:authenticated"]);
            for path in [format!("/api/v1/namespaces/ns-{i}/pods/p-{i}"), format!("/api/v1/namespaces/dev/kinds-{i}")] {
                let info = resolve(&Method::GET, &path, None);
                let attrs = Attributes { user: &u, info: &info };
                assert_eq!(rbac.authorize(&attrs).await, rbac.resolve(&snapshot, &attrs), "{path}");
                assert!(rbac.memo_usage().0 <= 16, "{i}: {:?}", rbac.memo_usage());
            }
        }
        let (entries, bytes) = rbac.memo_usage();
        assert!(entries <= 16 && bytes <= 1 << 20, "{entries} entries, {bytes} bytes");
    }
}
