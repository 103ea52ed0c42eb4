//! The `audit.k8s.io/v1` `Policy`: what enters is the file's bytes (YAML or JSON) and, per
//! request, its attributes; what leaves is the level the request is audited at, the stages
//! left out and whether `managedFields` are dropped from logged objects.
//!
//! As upstream's `policy` package: the first rule that matches decides; no rule matching
//! means `None`; a rule's `users`, `userGroups`, `verbs`, `resources` / `namespaces` and
//! `nonResourceURLs` must all match (an empty list matches anything); `resources` match
//! `resource`, `resource/subresource`, `*`, `*/subresource` and `resource/*`, limited to
//! `resourceNames` when set; `nonResourceURLs` match exactly, or by prefix with a trailing
//! `*`. The policy's `omitStages` are added to every rule's; a rule's `omitManagedFields`
//! overrides the policy's.

use serde::Deserialize;

use crate::authn::UserInfo;

/// How much of a request is recorded, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// The stages of a request an event is written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// What a policy decides for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl Decision {
    pub fn none() -> Self {
        Decision { level: Level::None, omit_stages: Vec::new(), omit_managed_fields: false }
    }

    pub fn omits(&self, stage: Stage) -> bool {
        self.omit_stages.contains(&stage)
    }
}

/// The attributes of a request a rule looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Attributes<'a> {
    /// None before authentication (a refused credential).
    pub user: Option<&'a UserInfo>,
    pub verb: &'a str,
    pub is_resource_request: bool,
    pub path: &'a str,
    pub api_group: &'a str,
    pub namespace: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
}

/// The largest policy file read.
pub const MAX_POLICY_BYTES: u64 = 4 << 20;

/// Read, decode and validate a policy file: one line saying what is wrong, naming the file.
pub fn load(path: &std::path::Path) -> Result<Policy, String> {
    let fail = |e: String| format!("loading audit policy file {}: {e}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if meta.len() > MAX_POLICY_BYTES {
        return Err(fail(format!("larger than {MAX_POLICY_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let policy = parse(&bytes).map_err(fail)?;
    if policy.rules.is_empty() {
        return Err(fail("loaded illegal policy with 0 rules".into()));
    }
    Ok(policy)
}

/// Decode and validate a policy (YAML or JSON).
pub fn parse(bytes: &[u8]) -> Result<Policy, String> {
    let decoded = crate::wire::yaml::from_slice(bytes).map_err(|e| e.to_string())?;
    let policy: Policy = serde_json::from_value(decoded.value).map_err(|e| e.to_string())?;
    if policy.kind != "Policy" || policy.api_version != "audit.k8s.io/v1" {
        return Err(format!(
            "expected kind Policy of apiVersion audit.k8s.io/v1, got kind {:?} of apiVersion {:?}",
            policy.kind, policy.api_version
        ));
    }
    validate(&policy)?;
    Ok(policy)
}

/// Upstream's checks of a policy's rules, the first error found.
fn validate(policy: &Policy) -> Result<(), String> {
    for (i, rule) in policy.rules.iter().enumerate() {
        let field = |f: &str| format!("rules[{i}].{f}");
        if (!rule.resources.is_empty() || !rule.namespaces.is_empty()) && !rule.non_resource_urls.is_empty() {
            return Err(format!(
                "{}: Invalid value: rules cannot apply to both regular resources and non-resource URLs",
                field("nonResourceURLs")
            ));
        }
        for (j, url) in rule.non_resource_urls.iter().enumerate() {
            if url == "*" {
                continue;
            }
            if !url.starts_with('/') {
                return Err(format!(
                    "{}[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character",
                    field("nonResourceURLs")
                ));
            }
            if url[..url.len() - 1].contains('*') {
                return Err(format!("{}[{j}]: Invalid value: {url:?}: non-resource URL wildcards '*' must be the final character of the rule", field("nonResourceURLs")));
            }
        }
        for (j, gr) in rule.resources.iter().enumerate() {
            if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                return Err(format!(
                    "{}[{j}].resourceNames: Invalid value: using resourceNames requires at least one resource",
                    field("resources")
                ));
            }
            for r in &gr.resources {
                if r.is_empty() || r.matches('/').count() > 1 {
                    return Err(format!("{}[{j}].resources: Invalid value: {r:?}", field("resources")));
                }
            }
        }
    }
    Ok(())
}

impl Policy {
    /// The level and stages of one request: the first rule that matches, else `None`.
    pub fn evaluate(&self, attrs: &Attributes<'_>) -> Decision {
        for rule in &self.rules {
            if rule.matches(attrs) {
                let mut omit_stages = rule.omit_stages.clone();
                for s in &self.omit_stages {
                    if !omit_stages.contains(s) {
                        omit_stages.push(*s);
                    }
                }
                return Decision {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                };
            }
        }
        Decision { omit_stages: self.omit_stages.clone(), ..Decision::none() }
    }
}

fn has(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

impl Rule {
    fn matches(&self, attrs: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !attrs.user.is_some_and(|u| has(&self.users, &u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !attrs.user.is_some_and(|u| u.groups.iter().any(|g| has(&self.user_groups, g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, attrs.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(attrs);
        }
        if !self.non_resource_urls.is_empty() {
            return !attrs.is_resource_request
                && self.non_resource_urls.iter().any(|spec| path_matches(attrs.path, spec));
        }
        true
    }

    fn matches_resource(&self, attrs: &Attributes<'_>) -> bool {
        if !attrs.is_resource_request {
            return false;
        }
        // A cluster-scoped resource's namespace is "".
        if !self.namespaces.is_empty() && !has(&self.namespaces, attrs.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if attrs.subresource.is_empty() {
            attrs.resource.to_string()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        self.resources.iter().filter(|gr| gr.group == attrs.api_group).any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !has(&gr.resource_names, attrs.name) {
                return false;
            }
            gr.resources.iter().any(|res| {
                res == "*"
                    || *res == combined
                    || (!attrs.subresource.is_empty() && res.strip_prefix("*/") == Some(attrs.subresource))
                    || res.strip_suffix("/*") == Some(attrs.resource)
            })
        })
    }
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*" || spec == path || spec.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/livez", "/metrics"]
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "serviceaccounts/token"]
- level: Request
  resources:
  - group: ""
    resources: ["pods/log", "*/status"]
- level: RequestResponse
  userGroups: ["auditors"]
  resources:
  - group: "certificates.k8s.io"
    resources: ["certificatesigningrequests/*"]
- level: Request
  namespaces: ["kube-system"]
  omitStages: [ResponseStarted]
  omitManagedFields: true
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["special"]
- level: Metadata
"#;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::with_groups(name, groups)
    }

    #[test]
    fn first_matching_rule_decides() {
        let p = parse(POLICY.as_bytes()).unwrap();
        let alice = user("alice", &["system:authenticated"]);
        let auditor = user("eve", &["auditors"]);
        let proxy = user("system:kube-proxy", &[]);
        let res = |u, verb, group, ns, resource, sub, name| Attributes {
            user: Some(u),
            verb,
            is_resource_request: true,
            path: "/apis/x",
            api_group: group,
            namespace: ns,
            resource,
            subresource: sub,
            name,
        };
        let nonres = |u, path| Attributes { user: Some(u), verb: "get", path, ..Default::default() };
        let cases: Vec<(&str, Attributes<'_>, Level)> = vec![
            ("health by prefix", nonres(&alice, "/healthz/etcd"), Level::None),
            ("health exact", nonres(&alice, "/livez"), Level::None),
            ("livez is exact, no prefix", nonres(&alice, "/livez/ping"), Level::Metadata),
            ("other path falls to the catch-all", nonres(&alice, "/version"), Level::Metadata),
            ("user and verb both match", res(&proxy, "watch", "", "default", "pods", "", ""), Level::None),
            ("user matches, verb not", res(&proxy, "list", "", "default", "pods", "", ""), Level::Metadata),
            ("secrets", res(&alice, "get", "", "default", "secrets", "", "s"), Level::Metadata),
            (
                "token subresource",
                res(&alice, "create", "", "default", "serviceaccounts", "token", "sa"),
                Level::Metadata,
            ),
            (
                "serviceaccounts themselves not",
                res(&alice, "get", "", "ns", "serviceaccounts", "", "sa"),
                Level::Metadata,
            ),
            ("pods/log", res(&alice, "get", "", "default", "pods", "log", "p"), Level::Request),
            ("*/status", res(&alice, "update", "apps", "default", "deployments", "status", "d"), Level::Metadata),
            ("*/status in the core group", res(&alice, "update", "", "default", "pods", "status", "p"), Level::Request),
            (
                "resource/* for a group member",
                res(&auditor, "update", "certificates.k8s.io", "", "certificatesigningrequests", "approval", "c"),
                Level::RequestResponse,
            ),
            (
                "resource/* matches the resource itself too",
                res(&auditor, "create", "certificates.k8s.io", "", "certificatesigningrequests", "", ""),
                Level::RequestResponse,
            ),
            (
                "resource/* not another resource",
                res(&auditor, "create", "certificates.k8s.io", "", "signers", "", ""),
                Level::Metadata,
            ),
            (
                "group not a member",
                res(&alice, "update", "certificates.k8s.io", "", "certificatesigningrequests", "approval", "c"),
                Level::Metadata,
            ),
            ("namespace rule", res(&alice, "get", "", "kube-system", "configmaps", "", "x"), Level::Request),
            ("namespace rule leaves non-resource paths", nonres(&alice, "/api"), Level::Metadata),
            (
                "resourceNames match",
                res(&alice, "get", "", "default", "configmaps", "", "special"),
                Level::RequestResponse,
            ),
            ("resourceNames miss", res(&alice, "get", "", "default", "configmaps", "", "other"), Level::Metadata),
        ];
        for (name, attrs, want) in cases {
            assert_eq!(p.evaluate(&attrs).level, want, "{name}");
        }
        let d = p.evaluate(&res(&alice, "get", "", "kube-system", "configmaps", "", "x"));
        assert_eq!(d.omit_stages, vec![Stage::ResponseStarted, Stage::RequestReceived]);
        assert!(d.omit_managed_fields);
        let d = p.evaluate(&nonres(&alice, "/version"));
        assert_eq!(d.omit_stages, vec![Stage::RequestReceived]);
        assert!(!d.omit_managed_fields);
        // No user (a refused credential): rules naming users or groups do not match.
        let anon =
            Attributes { user: None, verb: "watch", is_resource_request: true, resource: "pods", ..Default::default() };
        assert_eq!(p.evaluate(&anon).level, Level::Metadata);
    }

    #[test]
    fn no_rule_matching_is_none() {
        let p = parse(b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  verbs: [create]\n")
            .unwrap();
        let a = Attributes { verb: "get", is_resource_request: true, resource: "pods", ..Default::default() };
        assert_eq!(p.evaluate(&a).level, Level::None);
    }

    #[test]
    fn bad_policies_are_refused_with_a_reason() {
        let cases: &[(&str, &str)] = &[
            ("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]", "apiVersion"),
            ("apiVersion: audit.k8s.io/v1\nkind: Event\nrules: [{level: None}]", "kind"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]", "Everything"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{}]", "level"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Later]\nrules: [{level: None}]", "Later"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [healthz]}]", "must begin"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: ['/a*b']}]", "final character"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: ['/a'], namespaces: [x]}]", "both"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{resourceNames: [x]}]}]", "requires at least one resource"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{resources: ['a/b/c']}]}]", "a/b/c"),
            ("{{{", ""),
        ];
        for (text, want) in cases {
            let err = parse(text.as_bytes()).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
            assert!(!err.contains('\n'), "{text}: one line: {err}");
        }
    }

    #[test]
    fn a_policy_file_without_rules_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yaml");
        std::fs::write(&path, "apiVersion: audit.k8s.io/v1\nkind: Policy\n").unwrap();
        let err = load(&path).unwrap_err();
        assert!(err.contains("0 rules") && err.contains("p.yaml"), "{err}");
        assert!(load(&dir.path().join("missing.yaml")).unwrap_err().contains("missing.yaml"));
    }
}
