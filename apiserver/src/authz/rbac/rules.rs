//! RBAC rule and subject matching, and rule coverage (no I/O).
//!
//! - A rule allows a resource request when its verbs, apiGroups, resources (`res`,
//!   `res/sub`, `*/sub` or `*`) and resourceNames (empty = all) all match; a non-resource
//!   request when its verbs and nonResourceURLs (exact, `*`, or a trailing `*` prefix) match.
//! - A binding subject applies to a user by name (`User`), group membership (`Group`) or
//!   service-account username (`ServiceAccount`, namespace defaulting to the binding's).
//!   `User`/`Group` subjects that carry a namespace, and unknown kinds, never apply.
//! - [`covers`] breaks the requested rules into single verb/group/resource/name tuples and
//!   reports those no owner rule covers; [`compact_rules`] and [`compact_string`] render
//!   them for escalation errors.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};

use crate::authn::UserInfo;
use crate::http::request_info::RequestInfo;
use crate::machinery::selectors::go_quote;

/// The wildcard of verbs, apiGroups, resources and nonResourceURLs.
pub const ALL: &str = "*";

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == ALL || v == verb)
}

pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups).iter().any(|g| g == ALL || g == group)
}

/// `combined` is `resource` or `resource/subresource`; `subresource` may be empty.
pub fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    list(&rule.resources).iter().any(|r| {
        r == ALL
            || r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/").is_some_and(|sub| sub == subresource))
    })
}

pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || has(names, name)
}

fn url_covers(owner: &str, path: &str) -> bool {
    owner == path || owner.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    list(&rule.non_resource_urls).iter().any(|u| u == ALL || url_covers(u, path))
}

/// Whether `rule` allows the request described by `info`.
pub fn rule_allows(info: &RequestInfo, rule: &PolicyRule) -> bool {
    if !verb_matches(rule, &info.verb) {
        return false;
    }
    if !info.is_resource_request {
        return non_resource_url_matches(rule, &info.path);
    }
    let (res, sub) = (info.resource.as_str(), info.subresource.as_str());
    // `resource_matches` against `res` or `res/sub`, without building the combined string.
    let combined = |r: &str| {
        if sub.is_empty() {
            r == res
        } else {
            r.strip_prefix(res).and_then(|rest| rest.strip_prefix('/')).is_some_and(|s| s == sub)
        }
    };
    let resources = list(&rule.resources)
        .iter()
        .any(|r| r == ALL || combined(r) || (!sub.is_empty() && r.strip_prefix("*/").is_some_and(|s| s == sub)));
    api_group_matches(rule, &info.api_group) && resources && resource_name_matches(rule, &info.name)
}

/// Whether a binding subject applies to `user`; `namespace` is the binding's ("" for a
/// ClusterRoleBinding) and defaults a ServiceAccount subject's namespace.
pub fn applies_to_user(user: &UserInfo, subject: &Subject, namespace: &str) -> bool {
    let subject_ns = subject.namespace.as_deref().unwrap_or("");
    match subject.kind.as_str() {
        "User" => subject_ns.is_empty() && user.name == subject.name,
        "Group" => subject_ns.is_empty() && user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = if subject_ns.is_empty() { namespace } else { subject_ns };
            !ns.is_empty()
                && user
                    .name
                    .strip_prefix(kustos_ca::users::SERVICE_ACCOUNT_USER_PREFIX)
                    .and_then(|rest| rest.split_once(':'))
                    .is_some_and(|(n, name)| n == ns && name == subject.name)
        }
        _ => false,
    }
}

/// Index of the first subject that applies to `user`.
pub fn applies_to(user: &UserInfo, subjects: &[Subject], namespace: &str) -> Option<usize> {
    subjects.iter().position(|s| applies_to_user(user, s, namespace))
}

/// How a subject appears in authorization reasons: `User "alice"`, `ServiceAccount "sa/ns"`.
pub fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    let name = if subject.kind == "ServiceAccount" {
        let ns = subject.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(binding_namespace);
        format!("{}/{ns}", subject.name)
    } else {
        subject.name.clone()
    };
    format!("{} {}", subject.kind, go_quote(&name))
}

// ---------------------------------------------------------------------------------------
// Coverage
// ---------------------------------------------------------------------------------------

fn one(s: &str) -> Option<Vec<String>> {
    Some(vec![s.to_string()])
}

/// The rule as single (group, resource, verb[, name]) and (url, verb) rules.
pub fn breakdown_rule(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let names = list(&rule.resource_names);
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: vec![verb.clone()],
                    ..Default::default()
                };
                if names.is_empty() {
                    out.push(base);
                } else {
                    for n in names {
                        out.push(PolicyRule { resource_names: one(n), ..base.clone() });
                    }
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule { non_resource_urls: one(url), verbs: vec![verb.clone()], ..Default::default() });
        }
    }
    out
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted
        .iter()
        .all(|path| has(owner, path) || path.split_once('/').is_some_and(|(_, sub)| has(owner, &format!("*/{sub}"))))
}

fn urls_cover(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|path| owner.iter().any(|o| url_covers(o, path)))
}

/// Whether `owner` (any shape) covers `sub` (one verb, resource and name at most).
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), ALL) || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resources_cover(list(&owner.resources), list(&sub.resources));
    let urls = urls_cover(list(&owner.non_resource_urls), list(&sub.non_resource_urls));
    let owner_names = list(&owner.resource_names);
    let sub_names = list(&sub.resource_names);
    let names = owner_names.is_empty() || (!sub_names.is_empty() && has_all(owner_names, sub_names));
    verbs && groups && resources && urls && names
}

/// Whether `owner` rules grant everything `requested` rules do; the second value lists the
/// uncovered pieces (broken down to single verbs, resources and names).
pub fn covers(owner: &[PolicyRule], requested: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let uncovered: Vec<PolicyRule> =
        requested.iter().flat_map(breakdown_rule).filter(|sub| !owner.iter().any(|o| rule_covers(o, sub))).collect();
    (uncovered.is_empty(), uncovered)
}

/// Merge rules that name one group and one resource only (no names, no URLs) and differ by
/// verb; other rules are kept as they are.
pub fn compact_rules(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let mut simple: BTreeMap<(String, String), PolicyRule> = BTreeMap::new();
    for rule in rules {
        let (groups, resources) = (list(&rule.api_groups), list(&rule.resources));
        let is_simple = rule.resource_names.is_none()
            && rule.non_resource_urls.is_none()
            && groups.len() == 1
            && resources.len() == 1;
        if !is_simple {
            out.push(rule.clone());
            continue;
        }
        let key = (groups[0].clone(), resources[0].clone());
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(rule.verbs.iter().cloned()),
            None => {
                simple.insert(key, rule.clone());
            }
        }
    }
    out.extend(simple.into_values());
    out
}

/// Go's `%q` of a string slice: `["a" "b"]`.
pub fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// The rule as escalation errors show it:
/// `{APIGroups:[""], Resources:["pods"], ResourceNames:["x"], Verbs:["get"]}`.
pub fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (label, items) in [
        ("APIGroups", list(&rule.api_groups)),
        ("Resources", list(&rule.resources)),
        ("NonResourceURLs", list(&rule.non_resource_urls)),
        ("ResourceNames", list(&rule.resource_names)),
        ("Verbs", rule.verbs.as_slice()),
    ] {
        if !items.is_empty() {
            parts.push(format!("{label}:{}", go_quote_list(items)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::Method;

    fn strs(v: &[&str]) -> Option<Vec<String>> {
        if v.is_empty() {
            None
        } else {
            Some(v.iter().map(|s| s.to_string()).collect())
        }
    }

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: strs(groups),
            resources: strs(resources),
            resource_names: strs(names),
            non_resource_urls: None,
        }
    }

    fn url_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            non_resource_urls: strs(urls),
            ..Default::default()
        }
    }

    fn subject(kind: &str, name: &str, ns: Option<&str>) -> Subject {
        Subject { kind: kind.into(), name: name.into(), namespace: ns.map(String::from), api_group: None }
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    #[test]
    fn rules_allow_requests_like_upstream() {
        let cases: &[(&str, PolicyRule, Method, &str, bool)] = &[
            ("exact", rule(&["get"], &[""], &["pods"], &[]), Method::GET, "/api/v1/namespaces/a/pods/p", true),
            ("wrong verb", rule(&["list"], &[""], &["pods"], &[]), Method::GET, "/api/v1/namespaces/a/pods/p", false),
            ("star verb", rule(&["*"], &[""], &["pods"], &[]), Method::DELETE, "/api/v1/namespaces/a/pods/p", true),
            (
                "wrong group",
                rule(&["get"], &["apps"], &["pods"], &[]),
                Method::GET,
                "/api/v1/namespaces/a/pods/p",
                false,
            ),
            ("star group", rule(&["get"], &["*"], &["pods"], &[]), Method::GET, "/api/v1/namespaces/a/pods/p", true),
            ("star resource", rule(&["get"], &[""], &["*"], &[]), Method::GET, "/api/v1/namespaces/a/pods/p/log", true),
            (
                "resource does not cover subresource",
                rule(&["get"], &[""], &["pods"], &[]),
                Method::GET,
                "/api/v1/namespaces/a/pods/p/log",
                false,
            ),
            (
                "res/sub",
                rule(&["get"], &[""], &["pods/log"], &[]),
                Method::GET,
                "/api/v1/namespaces/a/pods/p/log",
                true,
            ),
            (
                "res/sub does not cover res",
                rule(&["get"], &[""], &["pods/log"], &[]),
                Method::GET,
                "/api/v1/namespaces/a/pods/p",
                false,
            ),
            (
                "*/sub",
                rule(&["update"], &["*"], &["*/status"], &[]),
                Method::PUT,
                "/apis/certificates.k8s.io/v1/certificatesigningrequests/c/status",
                true,
            ),
            (
                "*/sub without subresource",
                rule(&["get"], &[""], &["*/status"], &[]),
                Method::GET,
                "/api/v1/namespaces/a/pods/p",
                false,
            ),
            (
                "*/sub of another sub",
                rule(&["get"], &[""], &["*/status"], &[]),
                Method::GET,
                "/api/v1/namespaces/a/pods/p/log",
                false,
            ),
            (
                "resourceNames match",
                rule(&["get"], &[""], &["configmaps"], &["x"]),
                Method::GET,
                "/api/v1/namespaces/a/configmaps/x",
                true,
            ),
            (
                "resourceNames miss",
                rule(&["get"], &[""], &["configmaps"], &["x"]),
                Method::GET,
                "/api/v1/namespaces/a/configmaps/y",
                false,
            ),
            (
                "resourceNames do not allow list",
                rule(&["list"], &[""], &["configmaps"], &["x"]),
                Method::GET,
                "/api/v1/namespaces/a/configmaps",
                false,
            ),
            ("url exact", url_rule(&["get"], &["/healthz"]), Method::GET, "/healthz", true),
            ("url exact is not a prefix", url_rule(&["get"], &["/healthz"]), Method::GET, "/healthz/etcd", false),
            ("url trailing star", url_rule(&["get"], &["/healthz/*"]), Method::GET, "/healthz/etcd", true),
            ("url trailing star needs the slash", url_rule(&["get"], &["/healthz/*"]), Method::GET, "/healthz", false),
            ("url star", url_rule(&["*"], &["*"]), Method::POST, "/anything", true),
            ("url star verb mismatch", url_rule(&["get"], &["*"]), Method::POST, "/anything", false),
            ("resource rule never matches a path", rule(&["get"], &["*"], &["*"], &[]), Method::GET, "/version", false),
            ("url rule never matches a resource", url_rule(&["get"], &["*"]), Method::GET, "/api/v1/pods", false),
        ];
        for (name, r, m, path, want) in cases {
            let info = crate::http::request_info::resolve(m, path, None);
            assert_eq!(rule_allows(&info, r), *want, "{name}");
        }
    }

    #[test]
    fn subjects_apply_like_upstream() {
        let alice = user("alice", &["devs", "system:authenticated"]);
        let sa = user("system:serviceaccount:ns1:bot", &["system:serviceaccounts"]);
        let cases: &[(&str, &UserInfo, Subject, &str, bool)] = &[
            ("user by name", &alice, subject("User", "alice", None), "", true),
            ("user names are case-sensitive", &alice, subject("User", "Alice", None), "", false),
            ("user with a namespace never applies", &alice, subject("User", "alice", Some("x")), "x", false),
            ("empty namespace is no namespace", &alice, subject("User", "alice", Some("")), "", true),
            ("group", &alice, subject("Group", "devs", None), "", true),
            ("group not held", &alice, subject("Group", "ops", None), "", false),
            ("group with a namespace never applies", &alice, subject("Group", "devs", Some("x")), "", false),
            ("unknown kind", &alice, subject("Robot", "alice", None), "", false),
            ("sa with namespace", &sa, subject("ServiceAccount", "bot", Some("ns1")), "", true),
            ("sa defaults to the binding namespace", &sa, subject("ServiceAccount", "bot", None), "ns1", true),
            ("sa in another namespace", &sa, subject("ServiceAccount", "bot", None), "ns2", false),
            ("sa without any namespace", &sa, subject("ServiceAccount", "bot", None), "", false),
            ("sa name mismatch", &sa, subject("ServiceAccount", "other", Some("ns1")), "", false),
        ];
        for (name, u, s, ns, want) in cases {
            assert_eq!(applies_to_user(u, s, ns), *want, "{name}");
        }
        let half = user("system:serviceaccount:ns1", &[]);
        assert!(!applies_to_user(&half, &subject("ServiceAccount", "", Some("ns1")), ""), "no name part");
        let plain = user("bot", &[]);
        assert!(!applies_to_user(&plain, &subject("ServiceAccount", "bot", Some("ns1")), ""), "not an SA user");
        let subjects = [subject("User", "bob", None), subject("Group", "devs", None), subject("User", "alice", None)];
        assert_eq!(applies_to(&alice, &subjects, ""), Some(1));
        assert_eq!(applies_to(&user("carol", &[]), &subjects, ""), None);
        assert_eq!(describe_subject(&subject("ServiceAccount", "bot", None), "ns1"), "ServiceAccount \"bot/ns1\"");
        assert_eq!(describe_subject(&subject("User", "alice", None), "ns1"), "User \"alice\"");
    }

    #[test]
    fn covers_breaks_rules_down() {
        type Case<'a> = (&'a str, Vec<PolicyRule>, Vec<PolicyRule>, Vec<&'a str>);
        let cases: &[Case] = &[
            (
                "exact",
                vec![rule(&["get", "list"], &[""], &["pods"], &[])],
                vec![rule(&["get"], &[""], &["pods"], &[])],
                vec![],
            ),
            (
                "star everything",
                vec![rule(&["*"], &["*"], &["*"], &[])],
                vec![rule(&["get", "delete"], &["apps", ""], &["deployments", "pods/log"], &["x"])],
                vec![],
            ),
            (
                "missing verb",
                vec![rule(&["get"], &[""], &["pods"], &[])],
                vec![rule(&["get", "list"], &[""], &["pods"], &[])],
                vec!["{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"list\"]}"],
            ),
            (
                "split across owner rules",
                vec![rule(&["get"], &[""], &["pods"], &[]), rule(&["list"], &[""], &["pods"], &[])],
                vec![rule(&["get", "list"], &[""], &["pods"], &[])],
                vec![],
            ),
            (
                "names cover names",
                vec![rule(&["get"], &[""], &["secrets"], &["a", "b"])],
                vec![rule(&["get"], &[""], &["secrets"], &["a"])],
                vec![],
            ),
            (
                "names do not cover all",
                vec![rule(&["get"], &[""], &["secrets"], &["a"])],
                vec![rule(&["get"], &[""], &["secrets"], &[])],
                vec!["{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"],
            ),
            (
                "unnamed covers names",
                vec![rule(&["get"], &[""], &["secrets"], &[])],
                vec![rule(&["get"], &[""], &["secrets"], &["a"])],
                vec![],
            ),
            (
                "*/sub covers res/sub",
                vec![rule(&["get"], &[""], &["*/log"], &[])],
                vec![rule(&["get"], &[""], &["pods/log"], &[])],
                vec![],
            ),
            (
                "*/sub does not cover res",
                vec![rule(&["get"], &[""], &["*/log"], &[])],
                vec![rule(&["get"], &[""], &["pods"], &[])],
                vec!["{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\"]}"],
            ),
            (
                "url prefix",
                vec![url_rule(&["get"], &["/healthz/*"])],
                vec![url_rule(&["get"], &["/healthz/etcd"])],
                vec![],
            ),
            (
                "url star covers a prefix star",
                vec![url_rule(&["get"], &["*"])],
                vec![url_rule(&["get"], &["/apis/*"])],
                vec![],
            ),
            (
                "url not covered",
                vec![url_rule(&["get"], &["/healthz"])],
                vec![url_rule(&["get", "post"], &["/healthz"])],
                vec!["{NonResourceURLs:[\"/healthz\"], Verbs:[\"post\"]}"],
            ),
            (
                "resource rules do not cover urls",
                vec![rule(&["*"], &["*"], &["*"], &[])],
                vec![url_rule(&["get"], &["/x"])],
                vec!["{NonResourceURLs:[\"/x\"], Verbs:[\"get\"]}"],
            ),
            (
                "nothing owned",
                vec![],
                vec![rule(&["get"], &["apps"], &["deployments"], &["d"])],
                vec!["{APIGroups:[\"apps\"], Resources:[\"deployments\"], ResourceNames:[\"d\"], Verbs:[\"get\"]}"],
            ),
        ];
        for (name, owner, wanted, missing) in cases {
            let (ok, uncovered) = covers(owner, wanted);
            let got: Vec<String> = uncovered.iter().map(compact_string).collect();
            assert_eq!(got, *missing, "{name}");
            assert_eq!(ok, missing.is_empty(), "{name}");
        }
    }

    #[test]
    fn compaction_merges_simple_rules_by_verb() {
        let (_, missing) = covers(
            &[],
            &[
                rule(&["get", "list"], &[""], &["pods", "secrets"], &[]),
                rule(&["watch"], &[""], &["pods"], &[]),
                rule(&["get"], &[""], &["configmaps"], &["x"]),
            ],
        );
        let mut got: Vec<String> = compact_rules(&missing).iter().map(compact_string).collect();
        got.sort();
        assert_eq!(
            got,
            [
                "{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"x\"], Verbs:[\"get\"]}",
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\" \"watch\"]}",
                "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}",
            ]
        );
        assert_eq!(go_quote_list(&["a\"b".to_string(), String::new()]), "[\"a\\\"b\" \"\"]");
        assert_eq!(go_quote_list(&[]), "[]");
    }
}
