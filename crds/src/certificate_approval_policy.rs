//! `CertificateApprovalPolicy` (`kustos.dev/v1alpha1`, cluster-scoped): which
//! CertificateSigningRequests the `csrpolicyapproving` controller approves.
//!
//! A policy *applies to* a CSR when the CSR's `spec.signerName` is one of
//! [`signerNames`](CertificateApprovalPolicySpec::signer_names) and its requester
//! (`spec.username`, `spec.groups`) is one of [`requesters`](CertificateApprovalPolicySpec::requesters).
//! It *allows* the CSR when the request passes every rule of the policy. The controller approves
//! a pending CSR when at least one applying policy allows it, denies it (naming the failed check)
//! when policies apply but none allows it, and leaves it alone when none applies.
//!
//! Every rule is restrictive by default: a policy that says nothing about DNS names, IP
//! addresses, email addresses or URIs allows no such subjectAltName; one without
//! `maxExpirationSeconds` leaves the lifetime to the signer.
//!
//! ```yaml
//! apiVersion: kustos.dev/v1alpha1
//! kind: CertificateApprovalPolicy
//! metadata: {name: kubelet-serving}
//! spec:
//!   signerNames: [kubernetes.io/kubelet-serving]
//!   requesters: {groups: [system:nodes]}
//!   subject: {nodeIdentity: true, organizations: [system:nodes]}
//!   dnsNames: {nodeNamePrefix: true, nodeDomains: [cluster.example], deniedPatterns: [kubernetes], maxCount: 2}
//!   ipAddresses: {cidrs: [10.0.0.0/8], deniedCidrs: [10.96.0.0/12], maxCount: 2}
//!   usages: [digital signature, key encipherment, server auth]
//!   maxExpirationSeconds: 31536000
//!   allowUnsetExpirationSeconds: true
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kustos_ca::users::SERVICE_ACCOUNT_USER_PREFIX;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The type of the status condition that says whether the spec is valid.
pub const CONDITION_VALID: &str = "Valid";

/// Which CertificateSigningRequests a policy applies to, and what it allows in them.
// Printer columns repeat `type_` and `description` keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[kube(
    group = "kustos.dev",
    version = "v1alpha1",
    kind = "CertificateApprovalPolicy",
    plural = "certificateapprovalpolicies",
    singular = "certificateapprovalpolicy",
    shortname = "cap",
    category = "kustos",
    doc = "A policy of the csrpolicyapproving controller: which CertificateSigningRequests it approves, and which it denies.",
    status = "CertificateApprovalPolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Signers",
        type_ = "string",
        json_path = ".spec.signerNames",
        description = "signers the policy applies to"
    ),
    printcolumn(
        name = "Approved",
        type_ = "integer",
        json_path = ".status.approved",
        description = "CSRs approved by this policy"
    ),
    printcolumn(
        name = "Denied",
        type_ = "integer",
        json_path = ".status.denied",
        description = "CSRs denied under this policy"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct CertificateApprovalPolicySpec {
    /// The CSR signer names (`spec.signerName`) this policy applies to, e.g.
    /// `kubernetes.io/kubelet-serving`. At least one.
    #[schemars(length(min = 1))]
    pub signer_names: Vec<String>,

    /// The requesters (`spec.username`, `spec.groups` of the CSR) this policy applies to.
    /// Absent, or with every list empty: every requester.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requesters: Option<Requesters>,

    /// Rules on the request's subject. Absent: any subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<SubjectRules>,

    /// Rules on DNS subjectAltNames. Absent: the request may carry no DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_names: Option<DnsNameRules>,

    /// Rules on IP address subjectAltNames. Absent: the request may carry no IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_addresses: Option<IpAddressRules>,

    /// Whether the request may carry email address subjectAltNames. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_email_addresses: bool,

    /// Whether the request may carry URI subjectAltNames. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_uris: bool,

    /// The key usages the CSR may ask for (`spec.usages`, e.g. `digital signature`,
    /// `server auth`): every requested usage must be in this list. Absent: any usage (the
    /// signer still enforces its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usages: Option<Vec<String>>,

    /// The longest certificate lifetime the CSR may ask for (`spec.expirationSeconds`), at
    /// least 600. Absent: any lifetime (the signer caps it with `--cluster-signing-duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 600))]
    pub max_expiration_seconds: Option<i32>,

    /// With `maxExpirationSeconds`: whether a CSR that does not set `expirationSeconds` (and
    /// so gets the signer's default lifetime, up to `--cluster-signing-duration`) is allowed.
    /// Default false: such a CSR fails the lifetime check, since the policy cannot know how
    /// long the certificate will live. Set it when the signer's maximum is within your cap;
    /// kubelets do not set `expirationSeconds` on serving certificate requests.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_unset_expiration_seconds: bool,

    /// Every DNS and IP subjectAltName must be one of the requesting node's addresses, as its
    /// Node object publishes them in `status.addresses` (DNS names: `Hostname`, `InternalDNS`,
    /// `ExternalDNS`, compared case-insensitively without a trailing dot, never a wildcard; IP
    /// addresses: `InternalIP`, `ExternalIP`, compared as addresses), and none may be an
    /// address another Node publishes, on top of every other rule. A node writes its own
    /// addresses, so this holds it only to addresses no other Node claims. Needs
    /// `subject.nodeIdentity`. A CSR from a node with no Node object is denied. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub require_node_addresses: bool,
}

/// Who a policy applies to. A requester matches when its user name is in `users`, or one of
/// its groups is in `groups`, or it is one of `serviceAccounts`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Requesters {
    /// User names, exactly (e.g. `system:node:n1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Group names, exactly (e.g. `system:nodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Service accounts as `<namespace>/<name>` (user `system:serviceaccount:<namespace>:<name>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
}

/// Rules on the subject of the request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubjectRules {
    /// The requester must be a node (`system:node:<name>`) and the subject common name must
    /// be the requester: a node asks only for its own name. `<name>` is then the node name
    /// that `dnsNames.nodeNamePrefix` uses.
    #[serde(default, skip_serializing_if = "is_false")]
    pub node_identity: bool,
    /// The subject common name must equal the requester's user name.
    #[serde(default, skip_serializing_if = "is_false")]
    pub common_name_is_requester: bool,
    /// A regular expression (RE2-like syntax) the whole common name must match. Absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_name_pattern: Option<String>,
    /// The subject organizations (O) must be exactly this set (order and duplicates aside).
    /// Absent: any organizations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organizations: Option<Vec<String>>,
}

/// Rules on DNS subjectAltNames (their presence allows DNS names).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsNameRules {
    /// Regular expressions; every DNS name must match one of them in whole. Absent: any name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patterns: Option<Vec<String>>,
    /// Every DNS name must be the node name itself or `<node name>.<domain>` for one of
    /// `nodeDomains` (needs `subject.nodeIdentity`): `n1` and `n1.example.com` for node `n1`
    /// with `nodeDomains: [example.com]`, never `n10.example.com` nor `n1.elsewhere.com`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub node_name_prefix: bool,
    /// With `nodeNamePrefix`: the DNS domains (cluster DNS suffixes) the nodes' names live
    /// under, e.g. `nodes.example.com`. No wildcard: a name under any other domain is refused.
    /// Empty: only the bare node name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_domains: Vec<String>,
    /// Regular expressions; a DNS name whose lowercase form matches one of them in whole is
    /// refused, whatever else allows it (e.g. the apiserver's own names: `kubernetes`,
    /// `kubernetes\.default(\..+)?`, `localhost`). With `subject.nodeIdentity` the node name
    /// is checked too: a node named `kubernetes` gets nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_patterns: Vec<String>,
    /// Whether wildcard names (containing `*`) are allowed. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_wildcards: bool,
    /// At most this many DNS names. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_count: Option<i32>,
}

/// Rules on IP address subjectAltNames (their presence allows IP addresses).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressRules {
    /// CIDRs (`10.0.0.0/8`, `fd00::/8`); every IP address must fall in one of them. At least
    /// one (`0.0.0.0/0` and `::/0` allow any address).
    #[schemars(length(min = 1))]
    pub cidrs: Vec<String>,
    /// CIDRs whose addresses are refused even when `cidrs` holds them (an IPv4-mapped IPv6
    /// address counts as its IPv4 address): the Service CIDR (the apiserver's Service IP is
    /// in it) and the apiserver's own addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_cidrs: Vec<String>,
    /// At most this many IP addresses. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_count: Option<i32>,
}

/// What the controller observed and did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateApprovalPolicyStatus {
    /// CSRs this policy approved.
    #[serde(default)]
    pub approved: i64,
    /// CSRs denied while this policy applied to them (no applying policy allowed them).
    #[serde(default)]
    pub denied: i64,
    /// The `metadata.generation` the status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Valid`: whether the spec compiles (its patterns and CIDRs parse). An invalid policy
    /// neither approves nor denies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A problem with a spec field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, e.g. `spec.dnsNames.patterns[1]`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The spec's patterns and CIDRs, parsed once.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// `subject.commonNamePattern`, anchored.
    pub common_name_pattern: Option<regex::Regex>,
    /// `dnsNames.patterns`, anchored (empty when absent).
    pub dns_name_patterns: Vec<regex::Regex>,
    /// `ipAddresses.cidrs` (empty when absent).
    pub cidrs: Vec<ipnet::IpNet>,
    /// `dnsNames.deniedPatterns`, anchored (empty when absent).
    pub denied_dns_patterns: Vec<regex::Regex>,
    /// `ipAddresses.deniedCidrs` (empty when absent).
    pub denied_cidrs: Vec<ipnet::IpNet>,
}

/// A pattern that must match the whole input.
fn anchored(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$")).size_limit(1 << 20).build()
}

impl CertificateApprovalPolicySpec {
    /// Parse the patterns and CIDRs, or every problem with the spec.
    pub fn compile(&self) -> Result<Compiled, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut err = |field: String, message: String| errors.push(FieldError { field, message });
        if self.signer_names.is_empty() {
            err("spec.signerNames".into(), "at least one signer name is required".into());
        }
        for (i, s) in self.signer_names.iter().enumerate() {
            if s.is_empty() {
                err(format!("spec.signerNames[{i}]"), "must not be empty".into());
            }
        }
        if let Some(r) = &self.requesters {
            for (i, sa) in r.service_accounts.iter().enumerate() {
                if service_account_user(sa).is_none() {
                    err(format!("spec.requesters.serviceAccounts[{i}]"), format!("{sa:?} is not <namespace>/<name>"));
                }
            }
        }
        let mut common_name_pattern = None;
        if let Some(p) = self.subject.as_ref().and_then(|s| s.common_name_pattern.as_deref()) {
            match anchored(p) {
                Ok(re) => common_name_pattern = Some(re),
                Err(e) => err("spec.subject.commonNamePattern".into(), format!("invalid regular expression: {e}")),
            }
        }
        let mut dns_name_patterns = Vec::new();
        let mut denied_dns_patterns = Vec::new();
        if let Some(d) = &self.dns_names {
            for (i, p) in d.patterns.iter().flatten().enumerate() {
                match anchored(p) {
                    Ok(re) => dns_name_patterns.push(re),
                    Err(e) => err(format!("spec.dnsNames.patterns[{i}]"), format!("invalid regular expression: {e}")),
                }
            }
            for (i, p) in d.denied_patterns.iter().enumerate() {
                match anchored(p) {
                    Ok(re) => denied_dns_patterns.push(re),
                    Err(e) => {
                        err(format!("spec.dnsNames.deniedPatterns[{i}]"), format!("invalid regular expression: {e}"))
                    }
                }
            }
            if d.node_name_prefix && !self.node_identity() {
                err("spec.dnsNames.nodeNamePrefix".into(), "needs spec.subject.nodeIdentity (the node name)".into());
            }
            if !d.node_domains.is_empty() && !d.node_name_prefix {
                err("spec.dnsNames.nodeDomains".into(), "needs spec.dnsNames.nodeNamePrefix".into());
            }
            for (i, domain) in d.node_domains.iter().enumerate() {
                if !is_domain(domain) {
                    err(
                        format!("spec.dnsNames.nodeDomains[{i}]"),
                        format!("{domain:?} is not a DNS domain (lowercase labels separated by dots, no wildcard)"),
                    );
                }
            }
            if d.max_count.is_some_and(|n| n < 0) {
                err("spec.dnsNames.maxCount".into(), "must not be negative".into());
            }
        }
        let mut cidrs = Vec::new();
        let mut denied_cidrs = Vec::new();
        if let Some(ip) = &self.ip_addresses {
            if ip.cidrs.is_empty() {
                err("spec.ipAddresses.cidrs".into(), "at least one CIDR is required".into());
            }
            for (field, list, out) in
                [("cidrs", &ip.cidrs, &mut cidrs), ("deniedCidrs", &ip.denied_cidrs, &mut denied_cidrs)]
            {
                for (i, c) in list.iter().enumerate() {
                    match c.parse::<ipnet::IpNet>() {
                        Ok(net) if net.trunc() == net => out.push(net),
                        Ok(net) => err(
                            format!("spec.ipAddresses.{field}[{i}]"),
                            format!("{c:?} has host bits set (did you mean {}?)", net.trunc()),
                        ),
                        Err(_) => err(format!("spec.ipAddresses.{field}[{i}]"), format!("{c:?} is not a CIDR")),
                    }
                }
            }
            if ip.max_count.is_some_and(|n| n < 0) {
                err("spec.ipAddresses.maxCount".into(), "must not be negative".into());
            }
        }
        if self.max_expiration_seconds.is_some_and(|s| s < 600) {
            err(
                "spec.maxExpirationSeconds".into(),
                "must be at least 600 (the shortest lifetime a CSR may ask for)".into(),
            );
        }
        if self.require_node_addresses && !self.node_identity() {
            err("spec.requireNodeAddresses".into(), "needs spec.subject.nodeIdentity (the node name)".into());
        }
        if errors.is_empty() {
            Ok(Compiled { common_name_pattern, dns_name_patterns, cidrs, denied_dns_patterns, denied_cidrs })
        } else {
            Err(errors)
        }
    }

    /// Whether `subject.nodeIdentity` is set: the requester is the node the request is for.
    pub fn node_identity(&self) -> bool {
        self.subject.as_ref().is_some_and(|s| s.node_identity)
    }

    /// Whether the policy applies to a CSR for `signer` made by `username` in `groups`.
    pub fn applies_to(&self, signer: &str, username: &str, groups: &[String]) -> bool {
        self.signer_names.iter().any(|s| s == signer)
            && self.requesters.as_ref().is_none_or(|r| r.matches(username, groups))
    }
}

impl Requesters {
    /// Whether this requester is one of these (every requester when all lists are empty).
    pub fn matches(&self, username: &str, groups: &[String]) -> bool {
        if self.users.is_empty() && self.groups.is_empty() && self.service_accounts.is_empty() {
            return true;
        }
        self.users.iter().any(|u| u == username)
            || self.groups.iter().any(|g| groups.contains(g))
            || self.service_accounts.iter().any(|sa| service_account_user(sa).as_deref() == Some(username))
    }
}

/// A DNS domain as `nodeDomains` takes it: lowercase LDH labels of 1 to 63 characters,
/// separated by single dots, at most 253 characters, no wildcard.
pub(crate) fn is_domain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// `<namespace>/<name>` as the service account's user name.
pub fn service_account_user(namespaced_name: &str) -> Option<String> {
    let (ns, name) = namespaced_name.split_once('/')?;
    if ns.is_empty() || name.is_empty() || name.contains('/') || ns.contains(':') || name.contains(':') {
        return None;
    }
    Some(format!("{SERVICE_ACCOUNT_USER_PREFIX}{ns}:{name}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn base() -> CertificateApprovalPolicySpec {
        CertificateApprovalPolicySpec {
            signer_names: vec!["kubernetes.io/kubelet-serving".into()],
            requesters: Some(Requesters { groups: vec!["system:nodes".into()], ..Default::default() }),
            subject: Some(SubjectRules {
                node_identity: true,
                organizations: Some(vec!["system:nodes".into()]),
                ..Default::default()
            }),
            dns_names: Some(DnsNameRules { node_name_prefix: true, max_count: Some(2), ..Default::default() }),
            ip_addresses: Some(IpAddressRules {
                cidrs: vec!["10.0.0.0/8".into(), "fd00::/8".into()],
                max_count: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    type Mutate = fn(&mut CertificateApprovalPolicySpec);

    #[test]
    fn compile_reports_every_bad_field() {
        // name, mutation, wanted error fields (empty: valid)
        let cases: &[(&str, Mutate, &[&str])] = &[
            ("the base policy is valid", |_| {}, &[]),
            ("no signer", |s| s.signer_names.clear(), &["spec.signerNames"]),
            ("an empty signer name", |s| s.signer_names.push(String::new()), &["spec.signerNames[1]"]),
            (
                "a bad DNS pattern",
                |s| s.dns_names.as_mut().unwrap().patterns = Some(vec!["ok".into(), "(".into()]),
                &["spec.dnsNames.patterns[1]"],
            ),
            (
                "a bad CN pattern",
                |s| s.subject.as_mut().unwrap().common_name_pattern = Some("[".into()),
                &["spec.subject.commonNamePattern"],
            ),
            (
                "a bad CIDR",
                |s| s.ip_addresses.as_mut().unwrap().cidrs.push("10.0.0.0/33".into()),
                &["spec.ipAddresses.cidrs[2]"],
            ),
            (
                "a CIDR with host bits",
                |s| s.ip_addresses.as_mut().unwrap().cidrs = vec!["10.1.2.3/8".into()],
                &["spec.ipAddresses.cidrs[0]"],
            ),
            ("no CIDR", |s| s.ip_addresses.as_mut().unwrap().cidrs.clear(), &["spec.ipAddresses.cidrs"]),
            (
                "bad denied CIDRs",
                |s| {
                    s.ip_addresses.as_mut().unwrap().denied_cidrs =
                        vec!["10.96.0.0/12".into(), "10.96.0.1/12".into(), "x".into()]
                },
                &["spec.ipAddresses.deniedCidrs[1]", "spec.ipAddresses.deniedCidrs[2]"],
            ),
            (
                "a bad denied DNS pattern",
                |s| s.dns_names.as_mut().unwrap().denied_patterns = vec!["kubernetes".into(), "(".into()],
                &["spec.dnsNames.deniedPatterns[1]"],
            ),
            (
                "node domains that are not domains",
                |s| {
                    s.dns_names.as_mut().unwrap().node_domains = vec![
                        "cluster.example".into(),
                        "*.example".into(),
                        ".example".into(),
                        "".into(),
                        "Upper.example".into(),
                        "a..b".into(),
                    ]
                },
                &[
                    "spec.dnsNames.nodeDomains[1]",
                    "spec.dnsNames.nodeDomains[2]",
                    "spec.dnsNames.nodeDomains[3]",
                    "spec.dnsNames.nodeDomains[4]",
                    "spec.dnsNames.nodeDomains[5]",
                ],
            ),
            (
                "node domains without the node name prefix",
                |s| {
                    let d = s.dns_names.as_mut().unwrap();
                    d.node_name_prefix = false;
                    d.node_domains = vec!["cluster.example".into()];
                },
                &["spec.dnsNames.nodeDomains"],
            ),
            ("node name prefix without node identity", |s| s.subject = None, &["spec.dnsNames.nodeNamePrefix"]),
            ("node addresses with node identity", |s| s.require_node_addresses = true, &[]),
            (
                "node addresses without node identity",
                |s| {
                    s.require_node_addresses = true;
                    s.subject.as_mut().unwrap().node_identity = false;
                    s.dns_names.as_mut().unwrap().node_name_prefix = false;
                },
                &["spec.requireNodeAddresses"],
            ),
            (
                "negative counts",
                |s| {
                    s.dns_names.as_mut().unwrap().max_count = Some(-1);
                    s.ip_addresses.as_mut().unwrap().max_count = Some(-1);
                },
                &["spec.dnsNames.maxCount", "spec.ipAddresses.maxCount"],
            ),
            ("a lifetime cap under 600 s", |s| s.max_expiration_seconds = Some(599), &["spec.maxExpirationSeconds"]),
            (
                "a service account without namespace",
                |s| s.requesters.as_mut().unwrap().service_accounts = vec!["sa".into()],
                &["spec.requesters.serviceAccounts[0]"],
            ),
        ];
        for (name, mutate, want) in cases {
            let mut spec = base();
            mutate(&mut spec);
            let got: Vec<String> = match spec.compile() {
                Ok(_) => vec![],
                Err(errs) => errs.into_iter().map(|e| e.field).collect(),
            };
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn patterns_match_whole_names() {
        let mut spec = base();
        spec.dns_names.as_mut().unwrap().patterns = Some(vec![r"n\d+\.example\.com|a|b".into()]);
        let c = spec.compile().unwrap();
        let re = &c.dns_name_patterns[0];
        let cases = [
            ("exact", "n1.example.com", true),
            ("alternation is inside the anchors", "a", true),
            ("a suffix does not match", "n1.example.com.evil", false),
            ("a prefix does not match", "evil.n1.example.com", false),
            ("alternation does not leak", "xa", false),
        ];
        for (name, input, want) in cases {
            assert_eq!(re.is_match(input), want, "{name}");
        }
    }

    #[test]
    fn requester_matching() {
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let any = Requesters::default();
        let some = Requesters {
            users: vec!["jane".into()],
            groups: vec!["system:nodes".into()],
            service_accounts: vec!["kube-system/approver".into()],
        };
        // name, requesters, user, groups, want
        let cases: &[(&str, &Requesters, &str, &[&str], bool)] = &[
            ("empty lists: everyone", &any, "whoever", &[], true),
            ("by user", &some, "jane", &[], true),
            ("by group", &some, "system:node:n1", &["system:nodes", "system:authenticated"], true),
            ("by service account", &some, "system:serviceaccount:kube-system:approver", &[], true),
            ("another service account", &some, "system:serviceaccount:default:approver", &[], false),
            ("nobody listed", &some, "bob", &["system:authenticated"], false),
        ];
        for (name, r, user, groups, want) in cases {
            assert_eq!(r.matches(user, &g(groups)), *want, "{name}");
        }
        let spec = base();
        assert!(spec.applies_to("kubernetes.io/kubelet-serving", "system:node:n1", &g(&["system:nodes"])), "applies");
        assert!(
            !spec.applies_to("kubernetes.io/kube-apiserver-client", "system:node:n1", &g(&["system:nodes"])),
            "another signer"
        );
        let mut open = base();
        open.requesters = None;
        assert!(open.applies_to("kubernetes.io/kubelet-serving", "anyone", &[]), "no requesters: everyone");
    }

    #[test]
    fn spec_round_trips_in_camel_case_and_omits_defaults() {
        let spec = base();
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(v["dnsNames"]["nodeNamePrefix"], true, "camelCase");
        assert!(v.get("allowUris").is_none(), "false defaults are omitted: {v}");
        let back: CertificateApprovalPolicySpec = serde_json::from_value(v).unwrap();
        assert_eq!(back, spec, "round trip");
        let minimal: CertificateApprovalPolicySpec =
            serde_json::from_value(serde_json::json!({"signerNames": ["x"]})).unwrap();
        assert_eq!(minimal.dns_names, None, "absent rules stay absent (no DNS names allowed)");
        assert!(!minimal.allow_unset_expiration_seconds, "unset lifetime not allowed by default");
    }
}
