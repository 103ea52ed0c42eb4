//! Classification: which FlowSchema a request matches, and its flow distinguisher.
//!
//! Pure functions over the typed `flowcontrol.apiserver.k8s.io/v1` specs. Schemas are tried
//! in order of `matchingPrecedence` (numerically lowest first; ties go to the
//! lexicographically smaller name); the first one with a matching rule wins. A rule matches
//! when one of its subjects matches the user and one of its resource rules (resource
//! requests) or non-resource rules (other paths) matches the request.

use k8s_openapi::api::flowcontrol::v1 as fc;

/// What classification looks at in a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestDigest<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    /// Resource verbs (`get`, `list`, `watch`, `create`...) or the lowercase HTTP method of a
    /// non-resource request.
    pub verb: &'a str,
    pub is_resource_request: bool,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// Empty for cluster-scoped requests.
    pub namespace: &'a str,
    /// The URL path (non-resource requests).
    pub path: &'a str,
}

use kustos_ca::users::SERVICE_ACCOUNT_USER_PREFIX as SA_PREFIX;

/// The owned form of what classification (matching, distinguisher and flow hash) reads of a
/// [`RequestDigest`]: everything but the path of a resource request and the API group,
/// resource and subresource of a non-resource request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestKey {
    user: String,
    groups: Vec<String>,
    verb: String,
    is_resource_request: bool,
    api_group: String,
    resource: String,
    subresource: String,
    namespace: String,
    path: String,
}

impl DigestKey {
    /// Heap bytes, roughly.
    pub fn bytes(&self) -> usize {
        [&self.user, &self.verb, &self.api_group, &self.resource, &self.subresource, &self.namespace, &self.path]
            .iter()
            .map(|s| s.len())
            .sum::<usize>()
            + self.groups.iter().map(|g| g.len() + std::mem::size_of::<String>()).sum::<usize>()
            + std::mem::size_of::<DigestKey>()
    }
}

impl RequestDigest<'_> {
    /// The fields classification reads (the others empty).
    fn read(&self) -> [&str; 6] {
        let r = self.is_resource_request;
        let res = |s| if r { s } else { "" };
        [
            self.verb,
            res(self.api_group),
            res(self.resource),
            res(self.subresource),
            self.namespace,
            if r { "" } else { self.path },
        ]
    }

    /// Feed what classification reads to `h`.
    pub fn hash_key(&self, mut h: &mut dyn std::hash::Hasher) {
        use std::hash::Hash as _;
        (self.user, self.groups, self.is_resource_request, self.read()).hash(&mut h);
    }

    /// Whether `k` was made from a request classification cannot tell from this one.
    pub fn same_key(&self, k: &DigestKey) -> bool {
        let [verb, api_group, resource, subresource, namespace, path] = self.read();
        k.user == self.user
            && k.groups.as_slice() == self.groups
            && k.is_resource_request == self.is_resource_request
            && k.verb == verb
            && k.api_group == api_group
            && k.resource == resource
            && k.subresource == subresource
            && k.namespace == namespace
            && k.path == path
    }

    pub fn to_key(&self) -> DigestKey {
        let [verb, api_group, resource, subresource, namespace, path] = self.read().map(str::to_string);
        DigestKey {
            user: self.user.to_string(),
            groups: self.groups.to_vec(),
            verb,
            is_resource_request: self.is_resource_request,
            api_group,
            resource,
            subresource,
            namespace,
            path,
        }
    }
}

fn any_or<'s>(list: &'s [String], mut f: impl FnMut(&'s str) -> bool) -> bool {
    list.iter().any(|v| v == "*" || f(v))
}

/// Whether one subject names the request's user.
pub fn subject_matches(s: &fc::Subject, req: &RequestDigest) -> bool {
    match s.kind.as_str() {
        "User" => s.user.as_ref().is_some_and(|u| u.name == "*" || u.name == req.user),
        "Group" => s.group.as_ref().is_some_and(|g| g.name == "*" || req.groups.contains(&g.name)),
        "ServiceAccount" => {
            let Some(sa) = &s.service_account else { return false };
            let Some(rest) = req.user.strip_prefix(SA_PREFIX) else { return false };
            let Some((ns, name)) = rest.split_once(':') else { return false };
            sa.namespace == ns && (sa.name == "*" || sa.name == name)
        }
        _ => false,
    }
}

/// `resource` or `resource/subresource` against a rule's resources.
fn resource_matches(resources: &[String], req: &RequestDigest) -> bool {
    any_or(resources, |r| {
        if req.subresource.is_empty() {
            r == req.resource
        } else {
            r.split_once('/').is_some_and(|(res, sub)| res == req.resource && sub == req.subresource)
        }
    })
}

pub fn resource_rule_matches(r: &fc::ResourcePolicyRule, req: &RequestDigest) -> bool {
    if !any_or(&r.verbs, |v| v == req.verb)
        || !any_or(&r.api_groups, |g| g == req.api_group)
        || !resource_matches(&r.resources, req)
    {
        return false;
    }
    if req.namespace.is_empty() {
        r.cluster_scope == Some(true)
    } else {
        any_or(r.namespaces.as_deref().unwrap_or_default(), |n| n == req.namespace)
    }
}

/// `/healthz/*` matches `/healthz` and everything under it; `*` alone matches every path.
fn url_matches(pattern: &str, path: &str) -> bool {
    if pattern == "*" || pattern == path {
        return true;
    }
    match pattern.strip_suffix("/*") {
        Some(prefix) => path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/')),
        None => false,
    }
}

pub fn non_resource_rule_matches(r: &fc::NonResourcePolicyRule, req: &RequestDigest) -> bool {
    any_or(&r.verbs, |v| v == req.verb) && r.non_resource_urls.iter().any(|u| url_matches(u, req.path))
}

/// Whether one rule (subjects × resource/non-resource rules) matches.
pub fn rule_matches(rule: &fc::PolicyRulesWithSubjects, req: &RequestDigest) -> bool {
    if !rule.subjects.iter().any(|s| subject_matches(s, req)) {
        return false;
    }
    if req.is_resource_request {
        rule.resource_rules.iter().flatten().any(|r| resource_rule_matches(r, req))
    } else {
        rule.non_resource_rules.iter().flatten().any(|r| non_resource_rule_matches(r, req))
    }
}

/// Whether a FlowSchema matches (any of its rules does).
pub fn schema_matches(spec: &fc::FlowSchemaSpec, req: &RequestDigest) -> bool {
    spec.rules.iter().flatten().any(|r| rule_matches(r, req))
}

/// The flow distinguisher under a schema's `distinguisherMethod`: the user name (`ByUser`),
/// the namespace (`ByNamespace`, empty for cluster-scoped requests) or nothing.
pub fn distinguisher(spec: &fc::FlowSchemaSpec, req: &RequestDigest) -> String {
    match spec.distinguisher_method.as_ref().map(|m| m.type_.as_str()) {
        Some("ByUser") => req.user.to_string(),
        Some("ByNamespace") => req.namespace.to_string(),
        _ => String::new(),
    }
}

/// The order schemas are tried in: `matchingPrecedence` (default 1000) ascending, then name.
pub fn precedence_key(name: &str, spec: &fc::FlowSchemaSpec) -> (i32, String) {
    (spec.matching_precedence.unwrap_or(1000), name.to_string())
}

/// The index of the first matching schema in `schemas`, which must already be sorted by
/// [`precedence_key`].
pub fn classify<'s, T>(
    schemas: &'s [T],
    spec_of: impl Fn(&'s T) -> &'s fc::FlowSchemaSpec,
    req: &RequestDigest,
) -> Option<usize> {
    schemas.iter().position(|s| schema_matches(spec_of(s), req))
}

/// A 64-bit hash of a flow (schema name and distinguisher) for shuffle sharding: the first
/// eight bytes of SHA-256 over the two strings, length-prefixed so that no two pairs collide
/// by concatenation.
pub fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [schema, distinguisher] {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    let d = ctx.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> fc::FlowSchemaSpec {
        serde_json::from_value(v).unwrap()
    }

    fn res<'a>(
        user: &'a str,
        groups: &'a [String],
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        ns: &'a str,
    ) -> RequestDigest<'a> {
        RequestDigest {
            user,
            groups,
            verb,
            is_resource_request: true,
            api_group: group,
            resource,
            namespace: ns,
            ..Default::default()
        }
    }

    #[test]
    fn matching_table() {
        let masters = vec!["system:masters".to_string(), "system:authenticated".to_string()];
        let nodes = vec!["system:nodes".to_string(), "system:authenticated".to_string()];
        let none: Vec<String> = Vec::new();
        let exempt = spec(json!({
            "priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 1,
            "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:masters"}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}));
        let node_high = spec(json!({
            "priorityLevelConfiguration": {"name": "node-high"}, "matchingPrecedence": 400,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:nodes"}}],
                "resourceRules": [
                    {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "nodes/status"], "clusterScope": true},
                    {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]}]}));
        let sa = spec(json!({
            "priorityLevelConfiguration": {"name": "workload-high"},
            "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}],
                "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "namespaces": ["kube-system"]}]}]}));
        let probes = spec(json!({
            "priorityLevelConfiguration": {"name": "exempt"},
            "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:unauthenticated"}}],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz/*"]}]}]}));
        let user = spec(json!({
            "priorityLevelConfiguration": {"name": "x"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "flood"}}],
                "resourceRules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"], "namespaces": ["*"]}]}]}));
        let unauth = vec!["system:unauthenticated".to_string()];
        let health =
            |path| RequestDigest { user: "system:anonymous", groups: &unauth, verb: "get", path, ..Default::default() };
        let cases: Vec<(&str, &fc::FlowSchemaSpec, RequestDigest, bool)> = vec![
            (
                "masters any resource",
                &exempt,
                res("admin", &masters, "delete", "rbac.authorization.k8s.io", "roles", "x"),
                true,
            ),
            ("masters cluster-scoped", &exempt, res("admin", &masters, "list", "", "nodes", ""), true),
            (
                "masters non-resource",
                &exempt,
                RequestDigest { user: "admin", groups: &masters, verb: "get", path: "/metrics", ..Default::default() },
                true,
            ),
            ("non-master", &exempt, res("bob", &none, "get", "", "pods", "x"), false),
            (
                "node status subresource",
                &node_high,
                RequestDigest { subresource: "status", ..res("system:node:a", &nodes, "patch", "", "nodes", "") },
                true,
            ),
            (
                "node other subresource",
                &node_high,
                RequestDigest { subresource: "proxy", ..res("system:node:a", &nodes, "get", "", "nodes", "") },
                false,
            ),
            (
                "node lease in a namespace",
                &node_high,
                res("system:node:a", &nodes, "update", "coordination.k8s.io", "leases", "kube-node-lease"),
                true,
            ),
            (
                "star namespace excludes cluster scope",
                &node_high,
                res("system:node:a", &nodes, "list", "coordination.k8s.io", "leases", ""),
                false,
            ),
            ("cluster scope needs clusterScope", &user, res("flood", &none, "list", "", "configmaps", ""), false),
            ("user in a namespace", &user, res("flood", &none, "list", "", "configmaps", "default"), true),
            ("other user", &user, res("flood2", &none, "list", "", "configmaps", "default"), false),
            ("other verb", &user, res("flood", &none, "get", "", "configmaps", "default"), false),
            (
                "sa in namespace, any name",
                &sa,
                res("system:serviceaccount:kube-system:foo", &none, "get", "", "configmaps", "kube-system"),
                true,
            ),
            (
                "sa other namespace",
                &sa,
                res("system:serviceaccount:default:foo", &none, "get", "", "configmaps", "kube-system"),
                false,
            ),
            (
                "sa-looking user without prefix",
                &sa,
                res("kube-system:foo", &none, "get", "", "configmaps", "kube-system"),
                false,
            ),
            ("exact url", &probes, health("/healthz"), true),
            ("url under a /* prefix", &probes, health("/readyz/etcd"), true),
            ("the /* prefix itself", &probes, health("/readyz"), true),
            ("similar prefix is not under it", &probes, health("/readyzz"), false),
            ("exact url does not cover children", &probes, health("/healthz/ping"), false),
            (
                "non-resource rules do not match resource requests",
                &probes,
                res("system:anonymous", &unauth, "get", "", "healthz", ""),
                false,
            ),
        ];
        for (name, s, req, want) in cases {
            assert_eq!(schema_matches(s, &req), want, "{name}");
        }
    }

    #[test]
    fn precedence_then_name_wins() {
        let mk = |p: i32| {
            spec(json!({"priorityLevelConfiguration": {"name": "pl"}, "matchingPrecedence": p,
                "rules": [{"subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}))
        };
        let mut schemas = vec![("b".to_string(), mk(200)), ("z".to_string(), mk(100)), ("a".to_string(), mk(200))];
        schemas.sort_by_key(|(n, s)| precedence_key(n, s));
        let names: Vec<&str> = schemas.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["z", "a", "b"], "sorted by precedence then name");
        let groups = vec!["g".to_string()];
        let req = RequestDigest { user: "u", groups: &groups, verb: "get", path: "/x", ..Default::default() };
        assert_eq!(classify(&schemas, |(_, s)| s, &req), Some(0), "lowest precedence wins");
        assert_eq!(classify(&schemas[1..], |(_, s)| s, &req), Some(0), "tie → smaller name");
        let empty: Vec<(String, fc::FlowSchemaSpec)> = Vec::new();
        assert_eq!(classify(&empty, |(_, s)| s, &req), None, "nothing matches");
    }

    #[test]
    fn distinguishers() {
        let groups: Vec<String> = Vec::new();
        let req = res("alice", &groups, "get", "", "configmaps", "team-a");
        let cases = [
            ("by user", json!({"type": "ByUser"}), "alice"),
            ("by namespace", json!({"type": "ByNamespace"}), "team-a"),
            ("none", serde_json::Value::Null, ""),
        ];
        for (name, method, want) in cases {
            let s = spec(json!({"priorityLevelConfiguration": {"name": "pl"}, "distinguisherMethod": method}));
            assert_eq!(distinguisher(&s, &req), want, "{name}");
        }
    }

    #[test]
    fn flow_hashes_differ_by_part_boundaries() {
        let cases = [("ab", "c", "a", "bc"), ("x", "", "", "x"), ("fs", "alice", "fs", "bob")];
        for (a1, a2, b1, b2) in cases {
            assert_ne!(flow_hash(a1, a2), flow_hash(b1, b2), "{a1}/{a2} vs {b1}/{b2}");
            assert_eq!(flow_hash(a1, a2), flow_hash(a1, a2), "{a1}/{a2} is stable");
        }
    }
}
