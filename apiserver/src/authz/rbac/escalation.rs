//! Escalation prevention on writes of roles and bindings: nobody grants permissions they do
//! not hold, unless explicitly allowed to (`escalate` on roles/clusterroles, `bind` on the
//! referenced role). Members of `system:masters` are never checked. Runs as validating
//! admission, whichever authorizers are configured.
//!
//! - Role/ClusterRole create or update: allowed with `escalate` on the resource (the request's
//!   name and namespace), or when the requester's rules in the request's namespace cover the
//!   new rules. A ClusterRole whose new or old version has an aggregationRule also needs
//!   full authority (`*` on everything), since aggregation can gather anything.
//! - RoleBinding/ClusterRoleBinding create or update: allowed with `bind` on the referenced
//!   role (the binding's namespace; "" for cluster bindings), or when the requester's rules
//!   cover the rules of the referenced role.
//! - An update that only changes ownerReferences or finalizers is not checked.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, RoleRef};
use serde_json::Value;

use super::cache::{RbacCache, RefError};
use super::rules::{compact_rules, compact_string, covers, go_quote_list};
use crate::authn::UserInfo;
use crate::authn::MASTERS_GROUP;
use crate::authz::{Attributes, Authorizer};
use crate::error::{group_resource, ApiError};
use crate::http::request_info::RequestInfo;
use crate::machinery::selectors::go_quote;
use crate::registry::rbac::GROUP;

/// Who asks and what decides.
pub struct Context<'a> {
    /// The full authorization chain (for `escalate`/`bind` and the requester's rules).
    pub authz: &'a dyn Authorizer,
    /// The RBAC objects (to resolve a binding's roleRef).
    pub rbac: &'a RbacCache,
    pub user: &'a UserInfo,
    /// The write request: its resource, namespace and name.
    pub info: &'a RequestInfo,
}

/// Check a create (`old` = None) or update of `new` in `resource` (roles, clusterroles,
/// rolebindings, clusterrolebindings; others pass).
pub async fn check(cx: &Context<'_>, resource: &str, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    if cx.user.groups.iter().any(|g| g == MASTERS_GROUP) {
        return Ok(());
    }
    match resource {
        "roles" | "clusterroles" => check_role(cx, resource, new, old).await,
        "rolebindings" | "clusterrolebindings" => check_binding(cx, resource, new, old).await,
        _ => Ok(()),
    }
}

fn forbidden(resource: &str, name: &str, detail: &str) -> ApiError {
    let gr = group_resource(GROUP, resource);
    let message = if name.is_empty() {
        format!("{gr} is forbidden: {detail}")
    } else {
        format!("{gr} {} is forbidden: {detail}", go_quote(name))
    };
    ApiError::forbidden(GROUP, resource, name, message)
}

fn rules_of(obj: &Value) -> Result<Vec<PolicyRule>, ApiError> {
    match obj.get("rules") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| ApiError::BadRequest(format!("rules: {e}"))),
    }
}

fn has_aggregation_rule(obj: Option<&Value>) -> bool {
    obj.and_then(|o| serde_json::from_value::<ClusterRole>(o.clone()).ok())
        .and_then(|r| r.aggregation_rule)
        .is_some_and(|a| a.cluster_role_selectors.is_some_and(|s| !s.is_empty()))
}

/// True when `new` differs from `old` at most in what garbage collection writes
/// (ownerReferences, finalizers) and the resourceVersion.
pub fn only_gc_fields_change(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["ownerReferences", "finalizers", "selfLink", "resourceVersion"] {
                m.remove(k);
            }
        }
        v
    };
    strip(new) == strip(old)
}

async fn authorized(cx: &Context<'_>, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
    let info = RequestInfo {
        is_resource_request: true,
        verb: verb.into(),
        api_group: GROUP.into(),
        api_version: "*".into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Default::default()
    };
    cx.authz.authorize(&Attributes { user: cx.user, info: &info }).await.allowed()
}

/// The requester's rules do not cover what an object grants: the detail of the 403.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "user {user} (groups={groups}) is attempting to grant RBAC permissions not currently held:\n{missing}{resolution}"
)]
pub struct Escalation {
    /// The user's name, Go-quoted.
    user: String,
    /// The user's groups, as Go prints a quoted list.
    groups: String,
    /// The rules not held, one compact line each.
    missing: String,
    /// `; resolution errors: [...]` when some of the requester's bindings did not resolve.
    resolution: String,
}

/// Err(detail) unless the requester's rules in `namespace` cover `rules`.
async fn confirm_no_escalation(cx: &Context<'_>, namespace: &str, rules: &[PolicyRule]) -> Result<(), Escalation> {
    let held = cx.authz.rules_for(cx.user, namespace).await;
    let mut owner = held.resource_rules;
    owner.extend(held.non_resource_rules);
    let (ok, missing) = covers(&owner, rules);
    if ok {
        return Ok(());
    }
    let described: std::collections::BTreeSet<String> = compact_rules(&missing).iter().map(compact_string).collect();
    let resolution = if held.evaluation_error.is_empty() {
        String::new()
    } else {
        format!("; resolution errors: [{}]", held.evaluation_error)
    };
    Err(Escalation {
        user: go_quote(&cx.user.name),
        groups: go_quote_list(&cx.user.groups),
        missing: described.into_iter().collect::<Vec<_>>().join("\n"),
        resolution,
    })
}

async fn check_role(cx: &Context<'_>, resource: &str, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    if authorized(cx, "escalate", resource, &cx.info.namespace, &cx.info.name).await {
        return Ok(());
    }
    if old.is_some_and(|o| only_gc_fields_change(new, o)) {
        return Ok(());
    }
    let name = crate::meta::name(new);
    let rules = rules_of(new)?;
    confirm_no_escalation(cx, &cx.info.namespace, &rules)
        .await
        .map_err(|e| forbidden(resource, name, &e.to_string()))?;
    if resource == "clusterroles" && (has_aggregation_rule(Some(new)) || has_aggregation_rule(old)) {
        let full = [
            PolicyRule {
                verbs: vec!["*".into()],
                api_groups: Some(vec!["*".into()]),
                resources: Some(vec!["*".into()]),
                ..Default::default()
            },
            PolicyRule { verbs: vec!["*".into()], non_resource_urls: Some(vec!["*".into()]), ..Default::default() },
        ];
        if confirm_no_escalation(cx, &cx.info.namespace, &full).await.is_err() {
            return Err(forbidden(resource, name, "must have cluster-admin privileges to use the aggregationRule"));
        }
    }
    Ok(())
}

async fn check_binding(cx: &Context<'_>, resource: &str, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    if old.is_some_and(|o| only_gc_fields_change(new, o)) {
        return Ok(());
    }
    let role_ref: RoleRef = new
        .get("roleRef")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .ok_or_else(|| ApiError::BadRequest("roleRef: Required value".into()))?;
    let namespace = if resource == "rolebindings" { cx.info.namespace.as_str() } else { "" };
    let role_resource = match role_ref.kind.as_str() {
        "ClusterRole" => Some("clusterroles"),
        "Role" => Some("roles"),
        _ => None,
    };
    if let Some(role_resource) = role_resource {
        if role_ref.api_group.as_deref() == Some(GROUP)
            && authorized(cx, "bind", role_resource, namespace, &role_ref.name).await
        {
            return Ok(());
        }
    }
    let snapshot = cx.rbac.snapshot().await.map_err(ApiError::internal)?;
    let rules = snapshot.role_ref_rules(&role_ref, namespace).map_err(|e| match e {
        RefError::NotFound { resource, name } => ApiError::not_found(GROUP, resource, &name),
        other @ RefError::UnsupportedKind(_) => ApiError::internal(other.lister_message()),
    })?;
    let name = crate::meta::name(new);
    confirm_no_escalation(cx, namespace, rules).await.map_err(|e| forbidden(resource, name, &e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::authz::rbac::authorizer::RbacAuthorizer;
    use crate::authz::rbac::cache::install;
    use crate::authz::{Chain, MastersAuthorizer};
    use crate::storage::Storage;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    async fn put(store: &Arc<dyn Storage>, resource: &str, obj: Value) {
        crate::authz::rbac::testutil::put(store, resource, &obj).await;
    }

    fn cr(name: &str, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
    }

    fn crb(name: &str, role: &str, user: &str) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
               "subjects": [{"kind": "User", "apiGroup": GROUP, "name": user}]})
    }

    fn rb(name: &str, ns: &str, kind: &str, role: &str, user: &str) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
               "roleRef": {"apiGroup": GROUP, "kind": kind, "name": role},
               "subjects": [{"kind": "User", "apiGroup": GROUP, "name": user}]})
    }

    /// name, requester, resource, namespace, object, outcome.
    type Case<'a> = (&'a str, &'a UserInfo, &'a str, &'a str, Value, Result<(), String>);

    struct Fixture {
        chain: Chain,
        cache: Arc<RbacCache>,
    }

    async fn fixture() -> Fixture {
        let (store, cache) = install(Arc::new(crate::storage::sqlite::SqliteStorage::open_in_memory().unwrap()));
        let rbac_w = json!({"apiGroups": [GROUP], "resources": ["roles", "clusterroles", "rolebindings", "clusterrolebindings"],
                            "verbs": ["create", "update", "get"]});
        put(&store, "clusterroles", cr("rbac-writer", json!([rbac_w]))).await;
        put(
            &store,
            "clusterroles",
            cr("pod-reader", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])),
        )
        .await;
        put(
            &store,
            "clusterroles",
            cr("secret-admin", json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}])),
        )
        .await;
        put(
            &store,
            "clusterroles",
            cr("escalator", json!([{"apiGroups": [GROUP], "resources": ["clusterroles"], "verbs": ["escalate"]}])),
        )
        .await;
        put(&store, "clusterroles", cr("view-binder", json!([{"apiGroups": [GROUP], "resources": ["clusterroles"], "resourceNames": ["pod-reader"], "verbs": ["bind"]}]))).await;
        put(
            &store,
            "clusterroles",
            cr(
                "everything",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                                                              {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            ),
        )
        .await;
        for u in ["alice", "erik", "bob", "root"] {
            put(&store, "clusterrolebindings", crb(&format!("w-{u}"), "rbac-writer", u)).await;
        }
        put(&store, "clusterrolebindings", crb("alice-pods", "pod-reader", "alice")).await;
        put(&store, "clusterrolebindings", crb("erik-esc", "escalator", "erik")).await;
        put(&store, "clusterrolebindings", crb("bob-bind", "view-binder", "bob")).await;
        put(&store, "clusterrolebindings", crb("root-all", "everything", "root")).await;
        put(&store, "rolebindings", rb("alice-secrets", "dev", "ClusterRole", "secret-admin", "alice")).await;
        put(&store, "rolebindings", rb("alice-ghost", "ghost", "Role", "gone", "alice")).await;
        let rbac = RbacAuthorizer::new(cache.clone());
        Fixture { chain: Chain(vec![Arc::new(MastersAuthorizer), Arc::new(rbac)]), cache }
    }

    fn info(resource: &str, ns: &str, name: &str) -> RequestInfo {
        RequestInfo {
            is_resource_request: true,
            verb: "create".into(),
            api_group: GROUP.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    async fn run(
        f: &Fixture,
        who: &UserInfo,
        resource: &str,
        ns: &str,
        new: &Value,
        old: Option<&Value>,
    ) -> Result<(), String> {
        let name = if old.is_some() { crate::meta::name(new).to_string() } else { String::new() };
        let i = info(resource, ns, &name);
        let cx = Context { authz: &f.chain, rbac: &f.cache, user: who, info: &i };
        check(&cx, resource, new, old).await.map_err(|e| format!("{} {}", e.code().as_u16(), e))
    }

    fn role(name: &str, ns: &str, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules})
    }

    #[tokio::test]
    async fn roles_need_held_permissions_or_escalate() {
        let f = fixture().await;
        let alice = user("alice", &["system:authenticated"]);
        let erik = user("erik", &["system:authenticated"]);
        let admin = user("admin", &["system:masters"]);
        let pods_get = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
        let secrets_list = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]);
        let cases: Vec<Case> = vec![
            ("held cluster-wide", &alice, "clusterroles", "", cr("c1", pods_get.clone()), Ok(())),
            ("not held cluster-wide", &alice, "clusterroles", "", cr("c2", secrets_list.clone()), Err(
                "403 clusterroles.rbac.authorization.k8s.io \"c2\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}".into())),
            ("held in the namespace", &alice, "roles", "dev", role("r1", "dev", secrets_list.clone()), Ok(())),
            ("not held in another namespace", &alice, "roles", "prod", role("r2", "prod", secrets_list.clone()), Err(
                "403 roles.rbac.authorization.k8s.io \"r2\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}".into())),
            ("missing rules listed sorted and compacted", &alice, "roles", "prod", role("r3", "prod", json!([
                {"apiGroups": ["apps", ""], "resources": ["deployments"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}])), Err(
                "403 roles.rbac.authorization.k8s.io \"r3\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"deployments\"], Verbs:[\"get\" \"list\"]}\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"get\" \"list\"]}".into())),
            ("resolution errors are appended", &alice, "roles", "ghost", role("r4", "ghost", secrets_list.clone()), Err(
                "403 roles.rbac.authorization.k8s.io \"r4\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}; resolution errors: [role.rbac.authorization.k8s.io \"gone\" not found]".into())),
            ("escalate on clusterroles", &erik, "clusterroles", "", cr("c3", secrets_list.clone()), Ok(())),
            ("escalate on clusterroles is not on roles", &erik, "roles", "dev", role("r5", "dev", secrets_list.clone()), Err(
                "403 roles.rbac.authorization.k8s.io \"r5\" is forbidden: user \"erik\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}".into())),
            ("masters are never checked", &admin, "clusterroles", "", cr("c4", secrets_list.clone()), Ok(())),
        ];
        for (name, who, resource, ns, obj, want) in cases {
            assert_eq!(run(&f, who, resource, ns, &obj, None).await, want, "{name}");
        }
    }

    #[tokio::test]
    async fn aggregation_rules_need_full_authority() {
        let f = fixture().await;
        let alice = user("alice", &[]);
        let root = user("root", &[]);
        let mut agg = cr("agg", json!([]));
        agg["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]});
        assert_eq!(
            run(&f, &alice, "clusterroles", "", &agg, None).await,
            Err("403 clusterroles.rbac.authorization.k8s.io \"agg\" is forbidden: must have cluster-admin privileges to use the aggregationRule".into())
        );
        assert_eq!(run(&f, &root, "clusterroles", "", &agg, None).await, Ok(()));
        // Removing the rule is a change of the rule too.
        let plain = cr("agg", json!([]));
        assert!(run(&f, &alice, "clusterroles", "", &plain, Some(&agg)).await.is_err());
        // Only GC fields: not checked.
        let mut owned = agg.clone();
        owned["metadata"]["finalizers"] = json!(["x"]);
        owned["metadata"]["resourceVersion"] = json!("5");
        assert_eq!(run(&f, &alice, "clusterroles", "", &owned, Some(&agg)).await, Ok(()));
    }

    #[tokio::test]
    async fn bindings_need_bind_or_held_permissions() {
        let f = fixture().await;
        let alice = user("alice", &[]);
        let bob = user("bob", &[]);
        let cases: Vec<Case> = vec![
            ("holds the role's rules", &alice, "clusterrolebindings", "", crb("b1", "pod-reader", "x"), Ok(())),
            ("holds them in the namespace only", &alice, "rolebindings", "dev", rb("b2", "dev", "ClusterRole", "secret-admin", "x"), Ok(())),
            ("not cluster-wide", &alice, "clusterrolebindings", "", crb("b3", "secret-admin", "x"), Err(
                "403 clusterrolebindings.rbac.authorization.k8s.io \"b3\" is forbidden: user \"alice\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"*\"]}".into())),
            ("bind on the named role", &bob, "rolebindings", "dev", rb("b4", "dev", "ClusterRole", "pod-reader", "x"), Ok(())),
            ("bind on the named role, cluster-wide", &bob, "clusterrolebindings", "", crb("b5", "pod-reader", "x"), Ok(())),
            ("bind does not extend to other roles", &bob, "rolebindings", "dev", rb("b6", "dev", "ClusterRole", "secret-admin", "x"), Err(
                "403 rolebindings.rbac.authorization.k8s.io \"b6\" is forbidden: user \"bob\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"*\"]}".into())),
            ("bind on a ClusterRole is not on a Role of that name", &bob, "rolebindings", "dev", rb("b7", "dev", "Role", "pod-reader", "x"),
             Err("404 roles.rbac.authorization.k8s.io \"pod-reader\" not found".into())),
            ("a missing cluster role", &alice, "clusterrolebindings", "", crb("b8", "nothing", "x"),
             Err("404 clusterroles.rbac.authorization.k8s.io \"nothing\" not found".into())),
        ];
        for (name, who, resource, ns, obj, want) in cases {
            assert_eq!(run(&f, who, resource, ns, &obj, None).await, want, "{name}");
        }
        // Updates are checked like creates, unless only GC fields change.
        let old = crb("b9", "secret-admin", "x");
        let mut new = old.clone();
        new["subjects"] = json!([]);
        assert!(run(&f, &alice, "clusterrolebindings", "", &new, Some(&old)).await.is_err());
        let mut gc = old.clone();
        gc["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}]);
        assert_eq!(run(&f, &alice, "clusterrolebindings", "", &gc, Some(&old)).await, Ok(()));
    }
}
