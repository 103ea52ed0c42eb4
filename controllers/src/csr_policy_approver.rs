//! `csrpolicyapproving`: approves or denies CertificateSigningRequests by
//! [`CertificateApprovalPolicy`] (`kustos.dev/v1alpha1`), e.g. kubelet serving certificates,
//! which upstream never approves on its own.
//!
//! Watches CSRs (the shared CSR informer, one reconcile per CSR) and policies (its own watch;
//! a change to a policy's spec, a new or a deleted policy re-decides every CSR). For a pending
//! CSR (no certificate, no Approved, Denied or Failed condition), [`decide`]:
//! - no policy applies (signer and requester, see
//!   [`CertificateApprovalPolicySpec::applies_to`]): the CSR is left alone;
//! - a policy that applies allows it: condition `Approved` (reason `AutoApproved`, the message
//!   names the policy);
//! - policies apply but none allows it: condition `Denied` (reason `AutoDenied`, the message
//!   names each policy and the first check it failed). A request that does not parse is
//!   denied. When a policy that applies is invalid (a pattern or CIDR does not parse) and no
//!   valid one allows the CSR, it is left pending instead: denial is final, and the invalid
//!   policy might have allowed it once fixed.
//!
//! Writes go through the CSR's `/approval` subresource with its resourceVersion as
//! precondition (Conflict: the CSR changed, it is looked at again; NotFound: gone). After an
//! approval or denial, the policies' `status.approved`/`status.denied` counts are bumped
//! through `/status` (read, modify, replace with the read resourceVersion; retried on
//! Conflict). The policy's `Valid` condition and `observedGeneration` are kept in step with
//! its spec the same way.
//!
//! A policy with `requireNodeAddresses` makes the controller read the requesting node's Node
//! (one GET, from the apiserver rather than a cache, so a Node registered just before its
//! serving CSR is seen) and compare every SAN with the Node's `status.addresses`; and refuse
//! every SAN that another Node publishes. A read that fails (403 without `get` on nodes, say)
//! is retried with backoff; the CSR stays pending.
//!
//! Whatever the policy says, a `kubernetes.io/kubelet-serving` certificate never names the
//! apiserver (its names, the addresses the process was given, the endpoints of
//! `default/kubernetes`) nor any Service's cluster IP. The other Nodes', the Services' and the
//! apiserver's addresses come from watches ([`world`]); a kubelet serving CSR waits until they
//! have listed once. The address rules themselves are pure ([`addresses`]).
//!
//! Without the CRD installed (the policy list answers 404) the controller waits, retrying
//! with kube's watcher backoff, and leaves every CSR alone until the first policy list
//! succeeds: `kustos server` and `kustos controller-manager` work without the CRD.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::csr::condition::{self, REASON_AUTO_APPROVED, REASON_AUTO_DENIED};
use kustos_ca::csr::{CertificateRequest, CsrError};
use kustos_ca::users::NODE_USER_PREFIX;
use kustos_crds::certificate_approval_policy::{Compiled, CONDITION_VALID};
use kustos_crds::{CertificateApprovalPolicy, CertificateApprovalPolicySpec, CertificateApprovalPolicyStatus};

use crate::csr;
use crate::runtime::{self, Action, Backoff};

pub mod addresses;
pub mod world;

pub const NAME: &str = "csrpolicyapproving";

/// The signer whose certificates never name the apiserver or a Service ([`addresses::protected`]).
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// What to do with one CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing, for this reason.
    Ignore(String),
    /// Approve: `policy` allows it.
    Approve { policy: String, message: String },
    /// Deny: `policies` apply and none allows it; `message` names the failed checks.
    Deny { policies: Vec<String>, message: String },
}

/// Decide for `csr` given every policy and what is known of the cluster's addresses. `parse`
/// is called at most once, only when a policy applies to the pending CSR.
pub fn decide(
    csr: &CertificateSigningRequest,
    parse: impl FnOnce(&CertificateSigningRequest) -> Result<CertificateRequest, CsrError>,
    policies: &[Arc<CertificateApprovalPolicy>],
    world: &World<'_>,
) -> Decision {
    if !csr::certificate(csr).is_empty() {
        return Decision::Ignore("already issued".into());
    }
    if csr::approval(csr) != (false, false) {
        return Decision::Ignore("already approved or denied".into());
    }
    if csr::has_true_condition(csr, condition::FAILED) {
        return Decision::Ignore("failed".into());
    }
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    let mut applying: Vec<&CertificateApprovalPolicy> =
        policies.iter().map(|p| &**p).filter(|p| p.spec.applies_to(&csr.spec.signer_name, username, groups)).collect();
    if applying.is_empty() {
        return Decision::Ignore("no policy applies".into());
    }
    applying.sort_by_key(|p| p.name_any());
    let names: Vec<String> = applying.iter().map(|p| p.name_any()).collect();
    let req = match parse(csr) {
        Ok(r) => r,
        Err(e) => {
            return Decision::Deny { policies: names, message: format!("Denied: the request does not parse: {e}.") }
        }
    };
    let mut failures = Vec::new();
    let mut invalid = Vec::new();
    for (policy, name) in applying.iter().zip(&names) {
        let compiled = match policy.spec.compile() {
            Ok(c) => c,
            Err(_) => {
                invalid.push(name.clone());
                continue;
            }
        };
        match check(&policy.spec, &compiled, csr, &req, world) {
            Ok(()) => {
                return Decision::Approve {
                    policy: name.clone(),
                    message: format!("Auto approving certificate: allowed by CertificateApprovalPolicy {name:?}."),
                }
            }
            Err(why) => failures.push(format!("CertificateApprovalPolicy {name:?}: {why}")),
        }
    }
    if !invalid.is_empty() {
        return Decision::Ignore(format!("policies {invalid:?} apply but are invalid; not denying"));
    }
    let policies = names;
    Decision::Deny { policies, message: format!("Denied: {}.", failures.join("; ")) }
}

/// The first rule of a policy a request breaks: the message (in a `Denied` condition) names
/// the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// `subject.nodeIdentity`: the requester is not `system:node:<name>`.
    #[error("requester {requester:?} is not a node ({NODE_USER_PREFIX}<name>)")]
    NotANode { requester: String },
    /// `subject.nodeIdentity` or `subject.commonNameIsRequester`.
    #[error("subject common name {common_name:?} is not the requester {requester:?}")]
    CommonNameNotRequester { common_name: String, requester: String },
    /// `subject.nodeIdentity`: the node's name matches `dnsNames.deniedPatterns`.
    #[error("node name {node:?} is refused (it matches the dnsNames.deniedPatterns pattern {pattern:?})")]
    NodeNameDenied { node: String, pattern: String },
    /// `subject.commonNamePattern`.
    #[error("subject common name {common_name:?} does not match the pattern {pattern:?}")]
    CommonNamePattern { common_name: String, pattern: String },
    /// `subject.organizations`.
    #[error("subject organizations {got:?} are not exactly {want:?}")]
    Organizations { got: Vec<String>, want: Vec<String> },
    /// No `dnsNames` rules: DNS names are not allowed.
    #[error("dnsNames[0] {first:?}: DNS subjectAltNames are not allowed")]
    DnsNamesNotAllowed { first: String },
    /// `dnsNames.maxCount`.
    #[error("{count} DNS names, more than the maximum {max}")]
    TooManyDnsNames { count: usize, max: i32 },
    /// `dnsNames.allowWildcards` is false.
    #[error("dnsNames[{index}] {name:?} is a wildcard")]
    DnsWildcard { index: usize, name: String },
    /// `dnsNames.deniedPatterns`.
    #[error("dnsNames[{index}] {name:?} is refused (it matches the deniedPatterns pattern {pattern:?})")]
    DnsNameDenied { index: usize, name: String, pattern: String },
    /// `dnsNames.nodeNamePrefix` without `subject.nodeIdentity`.
    #[error("dnsNames[{index}] {name:?}: no node name to compare with")]
    DnsNameWithoutNode { index: usize, name: String },
    /// `dnsNames.nodeNamePrefix`: neither the node's name nor under one of `domains`.
    #[error(
        "dnsNames[{index}] {name:?} is neither the node name {node:?} nor \"{node}.<domain>\" ({})",
        node_domains(.domains)
    )]
    DnsNameNotOfNode { index: usize, name: String, node: String, domains: Vec<String> },
    /// `dnsNames.patterns`.
    #[error("dnsNames[{index}] {name:?} matches none of the dnsNames patterns")]
    DnsNamePattern { index: usize, name: String },
    /// No `ipAddresses` rules: IP addresses are not allowed.
    #[error("ipAddresses[0] {first}: IP subjectAltNames are not allowed")]
    IpAddressesNotAllowed { first: std::net::IpAddr },
    /// `ipAddresses.maxCount`.
    #[error("{count} IP addresses, more than the maximum {max}")]
    TooManyIpAddresses { count: usize, max: i32 },
    /// `ipAddresses.deniedCidrs` (`cidr`: the one it is in, as parsed).
    #[error("ipAddresses[{index}] {ip} is refused (it is in the deniedCidrs {cidr})")]
    IpAddressDenied { index: usize, ip: std::net::IpAddr, cidr: String },
    /// `ipAddresses.cidrs`.
    #[error("ipAddresses[{index}] {ip} is not in {}", .cidrs.join(", "))]
    IpAddressNotInCidrs { index: usize, ip: std::net::IpAddr, cidrs: Vec<String> },
    /// `allowEmailAddresses` is false.
    #[error("emailAddresses[0] {first:?}: email subjectAltNames are not allowed")]
    EmailAddressesNotAllowed { first: String },
    /// `allowUris` is false.
    #[error("uris[0] {first:?}: URI subjectAltNames are not allowed")]
    UrisNotAllowed { first: String },
    /// `usages`.
    #[error("usage {usage:?} is not allowed (allowed: {})", .allowed.join(", "))]
    Usage { usage: String, allowed: Vec<String> },
    /// `maxExpirationSeconds`.
    #[error("expirationSeconds {seconds} is more than the maximum {max}")]
    ExpirationTooLong { seconds: i32, max: i32 },
    /// `maxExpirationSeconds` without `allowUnsetExpirationSeconds`.
    #[error("expirationSeconds is not set (the signer's default lifetime may exceed the maximum {max})")]
    ExpirationUnset { max: i32 },
    /// `requireNodeAddresses`: the requesting node has no Node object.
    #[error("node {node:?} has no Node object, so its addresses cannot be checked")]
    NodeNotFound { node: String },
    /// `requireNodeAddresses`: a DNS name the Node does not publish.
    #[error("dnsNames[{index}] {name:?} is not among the addresses of Node {node:?} (status.addresses)")]
    DnsNameNotNodeAddress { index: usize, name: String, node: String },
    /// `requireNodeAddresses`: an IP address the Node does not publish.
    #[error("ipAddresses[{index}] {ip} is not among the addresses of Node {node:?} (status.addresses)")]
    IpAddressNotNodeAddress { index: usize, ip: std::net::IpAddr, node: String },
    /// `requireNodeAddresses`: a DNS name another Node publishes (not named: the requester
    /// may not read other Nodes).
    #[error("dnsNames[{index}] {name:?} is refused (another Node publishes it in status.addresses)")]
    DnsNameOfAnotherNode { index: usize, name: String },
    /// `requireNodeAddresses`: an IP address another Node publishes.
    #[error("ipAddresses[{index}] {ip} is refused (another Node publishes it in status.addresses)")]
    IpAddressOfAnotherNode { index: usize, ip: std::net::IpAddr },
    /// A kubelet serving certificate: a name of the apiserver (`what` says which).
    #[error("dnsNames[{index}] {name:?} is refused (it is {what})")]
    DnsNameProtected { index: usize, name: String, what: String },
    /// A kubelet serving certificate: an address of the apiserver or a Service's cluster IP.
    #[error("ipAddresses[{index}] {ip} is refused (it is {what})")]
    IpAddressProtected { index: usize, ip: std::net::IpAddr, what: String },
}

/// The requesting node's published addresses (`status.addresses` of its Node object), for
/// `requireNodeAddresses`: `None` when the Node does not exist, or was not looked up because
/// no policy that applies asks for it ([`node_to_look_up`]).
pub type NodeAddresses<'a> = Option<&'a [NodeAddress]>;

/// What the address rules compare a request with ([`addresses`]).
#[derive(Debug, Clone, Copy)]
pub struct World<'a> {
    /// The requesting node's `status.addresses` ([`NodeAddresses`]).
    pub own: NodeAddresses<'a>,
    /// Every Node's addresses, by node name.
    pub nodes: &'a addresses::Index,
    /// Addresses no kubelet serving certificate names, by what they are.
    pub protected: &'a [&'a addresses::Index],
}

impl World<'static> {
    /// Nothing known of the cluster: for rules that need none of it (a Signer's).
    pub fn unknown() -> Self {
        static EMPTY: std::sync::LazyLock<addresses::Index> = std::sync::LazyLock::new(addresses::Index::default);
        World { own: None, nodes: &EMPTY, protected: &[] }
    }
}

/// Whether deciding `csr` needs the watched addresses ([`world`]): it is pending, and a
/// policy applies to it that checks node addresses, or it is a kubelet serving request.
pub fn needs_world(csr: &CertificateSigningRequest, policies: &[Arc<CertificateApprovalPolicy>]) -> bool {
    if !csr::certificate(csr).is_empty() || csr::approval(csr) != (false, false) {
        return false;
    }
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    policies.iter().any(|p| {
        p.spec.applies_to(&csr.spec.signer_name, username, groups)
            && (p.spec.require_node_addresses || csr.spec.signer_name == KUBELET_SERVING)
    })
}

/// The node whose Node object [`decide`] needs: the requester's, when a policy that applies
/// to the pending CSR sets `requireNodeAddresses`.
pub fn node_to_look_up(csr: &CertificateSigningRequest, policies: &[Arc<CertificateApprovalPolicy>]) -> Option<String> {
    if !csr::certificate(csr).is_empty() || csr::approval(csr) != (false, false) {
        return None;
    }
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    let node = username.strip_prefix(NODE_USER_PREFIX).filter(|n| !n.is_empty())?;
    policies
        .iter()
        .any(|p| p.spec.require_node_addresses && p.spec.applies_to(&csr.spec.signer_name, username, groups))
        .then(|| node.to_string())
}

/// `dnsNames.nodeDomains`, as a denial names them.
fn node_domains(domains: &[String]) -> String {
    if domains.is_empty() {
        "no nodeDomains are listed".to_string()
    } else {
        format!("nodeDomains: {}", domains.join(", "))
    }
}

/// The first rule of `spec` the request breaks ([`Denial`]).
pub fn check(
    spec: &CertificateApprovalPolicySpec,
    compiled: &Compiled,
    csr: &CertificateSigningRequest,
    req: &CertificateRequest,
    world: &World<'_>,
) -> Result<(), Denial> {
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let cn = req.common_name.as_str();
    let mut node_name = None;
    if let Some(subject) = &spec.subject {
        if subject.node_identity {
            let name = username.strip_prefix(NODE_USER_PREFIX).filter(|n| !n.is_empty());
            let Some(name) = name else {
                return Err(Denial::NotANode { requester: username.into() });
            };
            if cn != username {
                return Err(Denial::CommonNameNotRequester { common_name: cn.into(), requester: username.into() });
            }
            if let Some(pattern) = denied(spec, compiled, name) {
                return Err(Denial::NodeNameDenied { node: name.into(), pattern: pattern.into() });
            }
            node_name = Some(name);
        }
        if subject.common_name_is_requester && cn != username {
            return Err(Denial::CommonNameNotRequester { common_name: cn.into(), requester: username.into() });
        }
        if let Some(re) = &compiled.common_name_pattern {
            if !re.is_match(cn) {
                return Err(Denial::CommonNamePattern {
                    common_name: cn.into(),
                    pattern: subject.common_name_pattern.clone().unwrap_or_default(),
                });
            }
        }
        if let Some(want) = &subject.organizations {
            if set(&req.organizations) != set(want) {
                return Err(Denial::Organizations { got: req.organizations.clone(), want: want.clone() });
            }
        }
    }
    match &spec.dns_names {
        None => {
            if let Some(d) = req.dns_names.first() {
                return Err(Denial::DnsNamesNotAllowed { first: d.clone() });
            }
        }
        Some(rules) => {
            if let Some(max) = rules.max_count {
                if req.dns_names.len() > usize::try_from(max).unwrap_or(0) {
                    return Err(Denial::TooManyDnsNames { count: req.dns_names.len(), max });
                }
            }
            for (i, d) in req.dns_names.iter().enumerate() {
                if !rules.allow_wildcards && d.contains('*') {
                    return Err(Denial::DnsWildcard { index: i, name: d.clone() });
                }
                if let Some(pattern) = denied(spec, compiled, d) {
                    return Err(Denial::DnsNameDenied { index: i, name: d.clone(), pattern: pattern.into() });
                }
                if rules.node_name_prefix {
                    let Some(node) = node_name else {
                        return Err(Denial::DnsNameWithoutNode { index: i, name: d.clone() });
                    };
                    if !is_node_dns_name(d, node, &rules.node_domains) {
                        return Err(Denial::DnsNameNotOfNode {
                            index: i,
                            name: d.clone(),
                            node: node.into(),
                            domains: rules.node_domains.clone(),
                        });
                    }
                }
                if !compiled.dns_name_patterns.is_empty() && !compiled.dns_name_patterns.iter().any(|re| re.is_match(d))
                {
                    return Err(Denial::DnsNamePattern { index: i, name: d.clone() });
                }
            }
        }
    }
    match &spec.ip_addresses {
        None => {
            if let Some(ip) = req.ip_addresses.first() {
                return Err(Denial::IpAddressesNotAllowed { first: *ip });
            }
        }
        Some(rules) => {
            if let Some(max) = rules.max_count {
                if req.ip_addresses.len() > usize::try_from(max).unwrap_or(0) {
                    return Err(Denial::TooManyIpAddresses { count: req.ip_addresses.len(), max });
                }
            }
            for (i, ip) in req.ip_addresses.iter().enumerate() {
                // Go compares an IPv4-mapped IPv6 SAN equal to the IPv4 address.
                let canonical = ip.to_canonical();
                if let Some(net) = compiled.denied_cidrs.iter().find(|net| net.contains(ip) || net.contains(&canonical))
                {
                    return Err(Denial::IpAddressDenied { index: i, ip: *ip, cidr: net.to_string() });
                }
                if !compiled.cidrs.iter().any(|net| net.contains(ip)) {
                    return Err(Denial::IpAddressNotInCidrs { index: i, ip: *ip, cidrs: rules.cidrs.clone() });
                }
            }
        }
    }
    if !spec.allow_email_addresses {
        if let Some(e) = req.email_addresses.first() {
            return Err(Denial::EmailAddressesNotAllowed { first: e.clone() });
        }
    }
    if !spec.allow_uris {
        if let Some(u) = req.uris.first() {
            return Err(Denial::UrisNotAllowed { first: u.clone() });
        }
    }
    if let Some(allowed) = &spec.usages {
        for u in csr::usages(csr) {
            if !allowed.contains(u) {
                return Err(Denial::Usage { usage: u.clone(), allowed: allowed.clone() });
            }
        }
    }
    if let Some(max) = spec.max_expiration_seconds {
        match csr.spec.expiration_seconds {
            Some(s) if s > max => return Err(Denial::ExpirationTooLong { seconds: s, max }),
            None if !spec.allow_unset_expiration_seconds => return Err(Denial::ExpirationUnset { max }),
            _ => {}
        }
    }
    if csr.spec.signer_name == KUBELET_SERVING {
        if let Some(denial) = addresses::protected(req, world.protected) {
            return Err(denial);
        }
    }
    if spec.require_node_addresses {
        // `compile` refuses the field without `subject.nodeIdentity`, so a node name is known.
        let node = node_name.unwrap_or_default();
        let Some(own) = world.own else {
            return Err(Denial::NodeNotFound { node: node.into() });
        };
        if let Some(denial) = addresses::not_a_node_address(req, node, own) {
            return Err(denial);
        }
        if let Some(denial) = addresses::another_nodes(req, node, world.nodes) {
            return Err(denial);
        }
    }
    Ok(())
}

/// The `dnsNames.deniedPatterns` pattern `name` matches, if any. DNS names compare
/// case-insensitively (as Go's hostname verification does), so the name is lowercased first.
fn denied<'a>(spec: &'a CertificateApprovalPolicySpec, compiled: &Compiled, name: &str) -> Option<&'a str> {
    let patterns = spec.dns_names.as_ref().map(|d| d.denied_patterns.as_slice()).unwrap_or_default();
    let name = name.to_ascii_lowercase();
    compiled.denied_dns_patterns.iter().zip(patterns).find(|(re, _)| re.is_match(&name)).map(|(_, p)| p.as_str())
}

/// Whether `name` is `node` itself or `<node>.<domain>` for one of `domains` (DNS names
/// compare case-insensitively).
fn is_node_dns_name(name: &str, node: &str, domains: &[String]) -> bool {
    let name = name.to_ascii_lowercase();
    let node = node.to_ascii_lowercase();
    if name == node {
        return true;
    }
    let Some(domain) = name.strip_prefix(&node).and_then(|rest| rest.strip_prefix('.')) else { return false };
    domains.iter().any(|d| d.eq_ignore_ascii_case(domain))
}

fn set(v: &[String]) -> Vec<&str> {
    let mut s: Vec<&str> = v.iter().map(String::as_str).collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// The CSR with an Approved (`approve`) or Denied condition added.
pub fn with_decision(csr: &CertificateSigningRequest, approve: bool, message: &str) -> CertificateSigningRequest {
    let mut out = csr.clone();
    let (type_, reason) =
        if approve { (condition::APPROVED, REASON_AUTO_APPROVED) } else { (condition::DENIED, REASON_AUTO_DENIED) };
    out.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new).push(
        CertificateSigningRequestCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Default::default()
        },
    );
    out
}

/// The `Valid` condition a policy's status should carry, and its observed generation.
/// `None` when the status already says so.
pub fn status_for_spec(
    policy: &CertificateApprovalPolicy,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<CertificateApprovalPolicyStatus> {
    let (status, reason, message) = match policy.spec.compile() {
        Ok(_) => ("True", "Valid", "the policy is in effect".to_string()),
        Err(errs) => (
            "False",
            "InvalidSpec",
            format!(
                "the policy neither approves nor denies: {}",
                errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
            ),
        ),
    };
    let generation = policy.metadata.generation;
    let current = policy.status.clone().unwrap_or_default();
    let existing = current.conditions.iter().find(|c| c.type_ == CONDITION_VALID);
    if current.observed_generation == generation
        && existing.is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
    {
        return None;
    }
    let mut next = current.clone();
    next.observed_generation = generation;
    csr::set_condition(&mut next.conditions, CONDITION_VALID, (status, reason, message), generation, now);
    Some(next)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("updating the approval of CSR {csr}: {source}")]
    Approval {
        csr: String,
        #[source]
        source: kube::Error,
    },
    #[error("CSR {csr}: reading Node {node} (for requireNodeAddresses): {source}")]
    Node {
        csr: String,
        node: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Context {
    csrs: Api<CertificateSigningRequest>,
    policies: Api<CertificateApprovalPolicy>,
    /// Nodes, read (one GET, when a policy sets `requireNodeAddresses`) for their addresses.
    nodes: Api<Node>,
    /// Every Node's, Service's and the apiserver's addresses ([`world`]).
    book: Arc<world::Book>,
    store: Store<CertificateApprovalPolicy>,
    /// The policy list has succeeded once (the CRD is installed).
    ready: Arc<AtomicBool>,
    backoff: Backoff,
    /// `kustos_csr_approved_total` / `kustos_csr_denied_total` and the reconcile counters.
    metrics: crate::metrics::Metrics,
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

/// Read the policy, change its status with `f` (`None`: nothing to write), and write it back
/// with the read resourceVersion ([`runtime::update_status`]).
pub async fn update_status(
    api: &Api<CertificateApprovalPolicy>,
    name: &str,
    f: impl Fn(&CertificateApprovalPolicy) -> Option<CertificateApprovalPolicyStatus>,
) -> Result<(), kube::Error> {
    runtime::update_status(api, name, |p| {
        let status = f(p)?;
        let mut next = p.clone();
        next.status = Some(status);
        Some(next)
    })
    .await
}

/// Add one approval or denial to a policy's counts.
async fn count(api: &Api<CertificateApprovalPolicy>, name: &str, approved: bool) {
    let res = update_status(api, name, |p| {
        let mut s = p.status.clone().unwrap_or_default();
        if approved {
            s.approved = s.approved.saturating_add(1);
        } else {
            s.denied = s.denied.saturating_add(1);
        }
        Some(s)
    })
    .await;
    if let Err(e) = res {
        tracing::warn!(controller = NAME, policy = %name, error = %e, "could not update the policy's counts");
    }
}

pub async fn reconcile(obj: Arc<CertificateSigningRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.ready.load(Ordering::Acquire) {
        // The first policy list re-decides every CSR.
        return Ok(Action::await_change());
    }
    let name = obj.name_any();
    let policies = ctx.store.state();
    if needs_world(&obj, &policies) && !ctx.book.ready() {
        // The first complete lists re-decide every CSR.
        tracing::trace!(controller = NAME, csr = %name, "waiting for the Node, Service and EndpointSlice lists");
        return Ok(Action::await_change());
    }
    let node = match node_to_look_up(&obj, &policies) {
        None => None,
        Some(node) => match ctx.nodes.get_opt(&node).await {
            Ok(found) => found.map(|n| n.status.and_then(|s| s.addresses).unwrap_or_default()),
            Err(source) => return Err(Error::Node { csr: name, node, source }),
        },
    };
    let decision = ctx.book.read(|nodes, protected| {
        decide(&obj, csr::read_request, &policies, &World { own: node.as_deref(), nodes, protected })
    });
    let (approve, message, counted) = match decision {
        Decision::Ignore(why) => {
            tracing::trace!(controller = NAME, csr = %name, why = %why, "left alone");
            return Ok(Action::await_change());
        }
        Decision::Approve { policy, message } => (true, message, vec![policy]),
        Decision::Deny { policies, message } => (false, message, policies),
    };
    match ctx
        .csrs
        .replace_subresource("approval", &name, &PostParams::default(), &with_decision(&obj, approve, &message))
        .await
    {
        Ok(_) => {}
        Err(e) if crate::runtime::is_status(&e, 409) => return Ok(Action::requeue(csr::AFTER_CONFLICT)),
        Err(e) if crate::runtime::is_status(&e, 404) => return Ok(Action::await_change()),
        Err(source) => return Err(Error::Approval { csr: name, source }),
    }
    ctx.backoff.forget(&name);
    if approve {
        ctx.metrics.csr_approved(&obj.spec.signer_name);
        tracing::info!(controller = NAME, csr = %name, policy = %counted.join(","), "approved");
    } else {
        ctx.metrics.csr_denied(&obj.spec.signer_name);
        tracing::info!(controller = NAME, csr = %name, %message, "denied");
    }
    for policy in &counted {
        count(&ctx.policies, policy, approve).await;
    }
    Ok(Action::await_change())
}

/// Watch policies into `writer`; fire `trigger` when the set of specs changes (a new,
/// deleted or edited policy; status-only writes do not) and keep each policy's `Valid`
/// condition current. Marks `ready` after the first complete list.
async fn watch_policies(
    api: Api<CertificateApprovalPolicy>,
    writer: reflector::store::Writer<CertificateApprovalPolicy>,
    ready: Arc<AtomicBool>,
    mut trigger: futures::channel::mpsc::Sender<()>,
) {
    // The specs seen, by name: a change to one re-decides the CSRs. Compared whole rather
    // than by `metadata.generation`, so status writes (ours included) never trigger it,
    // whatever the apiserver does with generations.
    let mut specs: HashMap<String, CertificateApprovalPolicySpec> = HashMap::new();
    let mut relisted: HashMap<String, CertificateApprovalPolicySpec> = HashMap::new();
    let mut waiting_logged = false;
    let stream = crate::runtime::watch(api.clone(), watcher::Config::default())
        .modify(crate::runtime::trim_managed_fields)
        .reflect(writer);
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        let changed: Vec<CertificateApprovalPolicy> = match ev {
            Err(e) => {
                if is_not_found(&e) {
                    if !waiting_logged {
                        tracing::info!(
                            controller = NAME,
                            "CertificateApprovalPolicy CRD not installed; waiting for it"
                        );
                        waiting_logged = true;
                    }
                } else {
                    tracing::debug!(controller = NAME, error = %e, "policy watch error; retrying");
                }
                continue;
            }
            Ok(watcher::Event::Init) => {
                relisted.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(p)) => {
                relisted.insert(p.name_any(), p.spec.clone());
                vec![p]
            }
            Ok(watcher::Event::InitDone) => {
                let differs = relisted != specs || !ready.load(Ordering::Acquire);
                specs = std::mem::take(&mut relisted);
                if waiting_logged {
                    tracing::info!(controller = NAME, "CertificateApprovalPolicy CRD found; deciding CSRs");
                    waiting_logged = false;
                }
                ready.store(true, Ordering::Release);
                if differs {
                    let _ = trigger.try_send(());
                }
                continue;
            }
            Ok(watcher::Event::Apply(p)) => {
                let name = p.name_any();
                if specs.insert(name, p.spec.clone()).as_ref() != Some(&p.spec) {
                    let _ = trigger.try_send(());
                }
                vec![p]
            }
            Ok(watcher::Event::Delete(p)) => {
                specs.remove(&p.name_any());
                let _ = trigger.try_send(());
                continue;
            }
        };
        for p in changed {
            if status_for_spec(&p, chrono::Utc::now()).is_some() {
                let res = update_status(&api, &p.name_any(), |cur| status_for_spec(cur, chrono::Utc::now())).await;
                if let Err(e) = res {
                    tracing::warn!(controller = NAME, policy = %p.name_any(), error = %e, "could not update the policy's status");
                }
            }
        }
    }
}

pub(crate) fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => {
            crate::runtime::is_status(k, 404)
        }
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// Run until the task is dropped.
pub async fn run(
    client: Client,
    csrs: runtime::Subscription<CertificateSigningRequest>,
    cfg: crate::Config,
) -> anyhow::Result<()> {
    let policies: Api<CertificateApprovalPolicy> = Api::all(client.clone());
    let (store, writer) = reflector::store();
    let ready = Arc::new(AtomicBool::new(false));
    // One pending "re-decide everything" is enough: later ones coalesce into it.
    let (trigger, redecide) = futures::channel::mpsc::channel(1);
    let book = Arc::new(world::Book::new(&cfg.apiserver_addresses));
    let addresses = world::run(client.clone(), book.clone(), trigger.clone());
    let ctx = Arc::new(Context {
        csrs: Api::all(client.clone()),
        nodes: Api::all(client),
        book,
        policies: policies.clone(),
        store,
        ready: ready.clone(),
        backoff: Backoff::default(),
        metrics: cfg.metrics.clone(),
    });
    let watch = watch_policies(policies, writer, ready, trigger);
    let controller = runtime::per_object(NAME, csrs, cfg.csr_concurrency, &cfg.metrics, ctx, reconcile, redecide);
    let ((), (), res) = tokio::join!(watch, addresses, controller);
    res
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestSpec, CertificateSigningRequestStatus};
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    /// The default policy shipped in manifests/.
    const DEFAULT_POLICY: &str = include_str!("../../manifests/policies/kubelet-serving.yaml");

    fn default_policy() -> CertificateApprovalPolicy {
        serde_yaml::from_str(DEFAULT_POLICY).unwrap()
    }

    /// What goes into a test request.
    #[derive(Clone)]
    struct Req {
        cn: &'static str,
        orgs: Vec<&'static str>,
        dns: Vec<&'static str>,
        ips: Vec<&'static str>,
        emails: Vec<&'static str>,
        uris: Vec<&'static str>,
    }

    impl Req {
        /// Node n1's serving request.
        fn n1() -> Req {
            Req {
                cn: "system:node:n1",
                orgs: vec!["system:nodes"],
                dns: vec!["n1", "n1.cluster.example"],
                ips: vec!["10.0.0.5", "fd00::5"],
                emails: vec![],
                uris: vec![],
            }
        }

        fn pem(&self) -> Vec<u8> {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::default();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params.distinguished_name.push(rcgen::DnType::CommonName, self.cn);
            // rcgen keeps one value per attribute type: a second O goes in under a custom
            // type with O's OID (2.5.4.10), which encodes the same.
            for (i, o) in self.orgs.iter().enumerate() {
                let t = match i {
                    0 => rcgen::DnType::OrganizationName,
                    _ => rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]),
                };
                params.distinguished_name.push(t, *o);
            }
            for d in &self.dns {
                params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().unwrap()));
            }
            for ip in &self.ips {
                params.subject_alt_names.push(rcgen::SanType::IpAddress(ip.parse().unwrap()));
            }
            for e in &self.emails {
                params.subject_alt_names.push(rcgen::SanType::Rfc822Name((*e).try_into().unwrap()));
            }
            for u in &self.uris {
                params.subject_alt_names.push(rcgen::SanType::URI((*u).try_into().unwrap()));
            }
            params.serialize_request(&key).unwrap().pem().unwrap().into_bytes()
        }
    }

    /// A pending kubelet-serving CSR of node n1, made by n1.
    fn base_csr() -> CertificateSigningRequest {
        csr_with(&Req::n1())
    }

    fn csr_with(req: &Req) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-n1".into()),
                resource_version: Some("42".into()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(req.pem()),
                signer_name: "kubernetes.io/kubelet-serving".into(),
                usages: Some(vec!["digital signature".into(), "server auth".into()]),
                username: Some("system:node:n1".into()),
                groups: Some(vec!["system:nodes".into(), "system:authenticated".into()]),
                ..Default::default()
            },
            status: None,
        }
    }

    fn set_request(c: &mut CertificateSigningRequest, f: impl FnOnce(&mut Req)) {
        let mut r = Req::n1();
        f(&mut r);
        c.spec.request = ByteString(r.pem());
    }

    fn with_conditions(c: &mut CertificateSigningRequest, types: &[&str]) {
        c.status.get_or_insert_with(Default::default).conditions = Some(
            types
                .iter()
                .map(|t| CertificateSigningRequestCondition {
                    type_: (*t).into(),
                    status: "True".into(),
                    ..Default::default()
                })
                .collect(),
        );
    }

    #[derive(Debug, Clone, Copy)]
    enum Want {
        Approve,
        /// The failed check, exactly.
        Deny(&'static str),
        /// A fragment of the reason it is left alone.
        Ignore(&'static str),
    }

    type Mutate = fn(&mut CertificateSigningRequest);

    /// The attacks of postfinance kubelet-csr-approver's attacker model (and a few more),
    /// against the shipped default policy.
    const CASES: &[(&str, Mutate, Want)] = &[
        ("a node's own serving certificate", |_| {}, Want::Approve),
        (
            "the RSA usage set",
            |c| c.spec.usages = Some(vec!["digital signature".into(), "key encipherment".into(), "server auth".into()]),
            Want::Approve,
        ),
        ("only an IP address", |c| set_request(c, |r| r.dns.clear()), Want::Approve),
        ("a lifetime within the cap", |c| c.spec.expiration_seconds = Some(86400), Want::Approve),
        (
            "a node asking for another node's name (CN)",
            |c| set_request(c, |r| r.cn = "system:node:n2"),
            Want::Deny(r#"subject common name "system:node:n2" is not the requester "system:node:n1""#),
        ),
        (
            "a node asking for another node's DNS name",
            |c| set_request(c, |r| r.dns = vec!["n1", "n2.cluster.example"]),
            Want::Deny(
                r#"dnsNames[1] "n2.cluster.example" is neither the node name "n1" nor "n1.<domain>" (nodeDomains: cluster.example)"#,
            ),
        ),
        (
            "a node posing as another node entirely (requester is n2)",
            |c| c.spec.username = Some("system:node:n2".into()),
            Want::Deny(r#"subject common name "system:node:n1" is not the requester "system:node:n2""#),
        ),
        (
            "requester is not the CN: CN of a user",
            |c| set_request(c, |r| r.cn = "admin"),
            Want::Deny(r#"subject common name "admin" is not the requester "system:node:n1""#),
        ),
        (
            "a DNS name not prefixed by the node name",
            |c| set_request(c, |r| r.dns = vec!["evil.example"]),
            Want::Deny(
                r#"dnsNames[0] "evil.example" is neither the node name "n1" nor "n1.<domain>" (nodeDomains: cluster.example)"#,
            ),
        ),
        (
            "a DNS name that merely begins with the node name's letters",
            |c| set_request(c, |r| r.dns = vec!["n1evil.example"]),
            Want::Deny(
                r#"dnsNames[0] "n1evil.example" is neither the node name "n1" nor "n1.<domain>" (nodeDomains: cluster.example)"#,
            ),
        ),
        (
            "another node whose name starts with this one's (n10)",
            |c| set_request(c, |r| r.dns = vec!["n10.cluster.example"]),
            Want::Deny(
                r#"dnsNames[0] "n10.cluster.example" is neither the node name "n1" nor "n1.<domain>" (nodeDomains: cluster.example)"#,
            ),
        ),
        (
            "the node's name under a domain not listed",
            |c| set_request(c, |r| r.dns = vec!["n1.evil.example"]),
            Want::Deny(
                r#"dnsNames[0] "n1.evil.example" is neither the node name "n1" nor "n1.<domain>" (nodeDomains: cluster.example)"#,
            ),
        ),
        (
            "the node's name under a listed domain, in capitals",
            |c| set_request(c, |r| r.dns = vec!["N1.Cluster.Example"]),
            Want::Approve,
        ),
        (
            "a \"node\" named kubernetes, asking for nothing but its CN",
            |c| {
                c.spec.username = Some("system:node:kubernetes".into());
                set_request(c, |r| {
                    r.cn = "system:node:kubernetes";
                    r.dns.clear();
                    r.ips.clear();
                })
            },
            Want::Deny(
                r#"node name "kubernetes" is refused (it matches the dnsNames.deniedPatterns pattern "kubernetes")"#,
            ),
        ),
        (
            "a \"node\" named kubernetes.default.svc.cluster.example, asking for its own name",
            |c| {
                c.spec.username = Some("system:node:kubernetes.default.svc.cluster.example".into());
                set_request(c, |r| {
                    r.cn = "system:node:kubernetes.default.svc.cluster.example";
                    r.dns = vec!["kubernetes.default.svc.cluster.example"];
                })
            },
            Want::Deny(
                r#"node name "kubernetes.default.svc.cluster.example" is refused (it matches the dnsNames.deniedPatterns pattern "kubernetes\\.default(\\..+)?")"#,
            ),
        ),
        (
            "a \"node\" named localhost",
            |c| {
                c.spec.username = Some("system:node:localhost".into());
                set_request(c, |r| {
                    r.cn = "system:node:localhost";
                    r.dns = vec!["localhost"];
                })
            },
            Want::Deny(
                r#"node name "localhost" is refused (it matches the dnsNames.deniedPatterns pattern "localhost")"#,
            ),
        ),
        (
            "a node asking for the apiserver's Service name",
            |c| set_request(c, |r| r.dns = vec!["n1", "kubernetes.default.svc"]),
            Want::Deny(
                r#"dnsNames[1] "kubernetes.default.svc" is refused (it matches the deniedPatterns pattern "kubernetes\\.default(\\..+)?")"#,
            ),
        ),
        (
            "a node asking for the apiserver's Service name in capitals",
            |c| set_request(c, |r| r.dns = vec!["Kubernetes.Default.SVC.cluster.example"]),
            Want::Deny(
                r#"dnsNames[0] "Kubernetes.Default.SVC.cluster.example" is refused (it matches the deniedPatterns pattern "kubernetes\\.default(\\..+)?")"#,
            ),
        ),
        (
            "a node asking for localhost",
            |c| set_request(c, |r| r.dns = vec!["localhost"]),
            Want::Deny(r#"dnsNames[0] "localhost" is refused (it matches the deniedPatterns pattern "localhost")"#),
        ),
        (
            "the apiserver's Service IP",
            |c| set_request(c, |r| r.ips = vec!["10.0.0.5", "10.96.0.1"]),
            Want::Deny("ipAddresses[1] 10.96.0.1 is refused (it is in the deniedCidrs 10.96.0.0/12)"),
        ),
        (
            "the apiserver's Service IP in IPv6 clothing",
            |c| set_request(c, |r| r.ips = vec!["::ffff:10.96.0.1"]),
            Want::Deny("ipAddresses[0] ::ffff:10.96.0.1 is refused (it is in the deniedCidrs 10.96.0.0/12)"),
        ),
        (
            "another Service IP",
            |c| set_request(c, |r| r.ips = vec!["10.111.22.33"]),
            Want::Deny("ipAddresses[0] 10.111.22.33 is refused (it is in the deniedCidrs 10.96.0.0/12)"),
        ),
        ("an address just past the Service CIDR", |c| set_request(c, |r| r.ips = vec!["10.112.0.1"]), Want::Approve),
        (
            "a wildcard DNS name under the node's name",
            |c| set_request(c, |r| r.dns = vec!["*.n1.cluster.example"]),
            Want::Deny(r#"dnsNames[0] "*.n1.cluster.example" is a wildcard"#),
        ),
        (
            "a wildcard after the node name",
            |c| set_request(c, |r| r.dns = vec!["n1.*"]),
            Want::Deny(r#"dnsNames[0] "n1.*" is a wildcard"#),
        ),
        (
            "a foreign IP address",
            |c| set_request(c, |r| r.ips = vec!["10.0.0.5", "8.8.8.8"]),
            Want::Deny("ipAddresses[1] 8.8.8.8 is not in 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7"),
        ),
        (
            "a loopback address",
            |c| set_request(c, |r| r.ips = vec!["127.0.0.1"]),
            Want::Deny("ipAddresses[0] 127.0.0.1 is not in 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7"),
        ),
        (
            "an allowed IPv4 address in IPv6 clothing",
            |c| set_request(c, |r| r.ips = vec!["::ffff:10.0.0.5"]),
            Want::Deny("ipAddresses[0] ::ffff:10.0.0.5 is not in 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7"),
        ),
        (
            "too many DNS names",
            |c| set_request(c, |r| r.dns = vec!["n1", "n1.a.example", "n1.b.example", "n1.c.example"]),
            Want::Deny("4 DNS names, more than the maximum 3"),
        ),
        (
            "too many IP addresses",
            |c| set_request(c, |r| r.ips = vec!["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]),
            Want::Deny("5 IP addresses, more than the maximum 4"),
        ),
        (
            "too long a lifetime",
            |c| c.spec.expiration_seconds = Some(10 * 365 * 86400),
            Want::Deny("expirationSeconds 315360000 is more than the maximum 31536000"),
        ),
        (
            "an email address",
            |c| set_request(c, |r| r.emails = vec!["root@n1.cluster.example"]),
            Want::Deny(r#"emailAddresses[0] "root@n1.cluster.example": email subjectAltNames are not allowed"#),
        ),
        (
            "a URI",
            |c| set_request(c, |r| r.uris = vec!["spiffe://cluster.example/ns/kube-system/sa/admin"]),
            Want::Deny(
                r#"uris[0] "spiffe://cluster.example/ns/kube-system/sa/admin": URI subjectAltNames are not allowed"#,
            ),
        ),
        (
            "a client usage",
            |c| c.spec.usages = Some(vec!["digital signature".into(), "server auth".into(), "client auth".into()]),
            Want::Deny(
                r#"usage "client auth" is not allowed (allowed: digital signature, key encipherment, server auth)"#,
            ),
        ),
        (
            "a CA-ish usage",
            |c| c.spec.usages = Some(vec!["cert sign".into(), "server auth".into()]),
            Want::Deny(
                r#"usage "cert sign" is not allowed (allowed: digital signature, key encipherment, server auth)"#,
            ),
        ),
        (
            "the wrong organization",
            |c| set_request(c, |r| r.orgs = vec!["system:masters"]),
            Want::Deny(r#"subject organizations ["system:masters"] are not exactly ["system:nodes"]"#),
        ),
        (
            "an extra organization",
            |c| set_request(c, |r| r.orgs = vec!["system:nodes", "system:masters"]),
            Want::Deny(r#"subject organizations ["system:nodes", "system:masters"] are not exactly ["system:nodes"]"#),
        ),
        (
            "no organization",
            |c| set_request(c, |r| r.orgs = vec![]),
            Want::Deny(r#"subject organizations [] are not exactly ["system:nodes"]"#),
        ),
        (
            "a non-node requester in the system:nodes group",
            |c| c.spec.username = Some("jane".into()),
            Want::Deny(r#"requester "jane" is not a node (system:node:<name>)"#),
        ),
        (
            "a node with an empty name",
            |c| {
                c.spec.username = Some("system:node:".into());
                set_request(c, |r| r.cn = "system:node:")
            },
            Want::Deny(r#"requester "system:node:" is not a node (system:node:<name>)"#),
        ),
        (
            "node \"a\" asking for auth.company.example",
            |c| {
                c.spec.username = Some("system:node:a".into());
                set_request(c, |r| {
                    r.cn = "system:node:a";
                    r.dns = vec!["auth.company.example"]
                })
            },
            Want::Deny(
                r#"dnsNames[0] "auth.company.example" is neither the node name "a" nor "a.<domain>" (nodeDomains: cluster.example)"#,
            ),
        ),
        ("a request that does not parse", |c| c.spec.request = ByteString(b"garbage".to_vec()), Want::Deny("")),
        (
            "a non-node requester outside system:nodes: no policy applies",
            |c| {
                c.spec.username = Some("system:bootstrap:abcdef".into());
                c.spec.groups = Some(vec!["system:bootstrappers".into()]);
            },
            Want::Ignore("no policy applies"),
        ),
        (
            "another signer: no policy applies",
            |c| c.spec.signer_name = "kubernetes.io/kube-apiserver-client".into(),
            Want::Ignore("no policy applies"),
        ),
        ("already approved", |c| with_conditions(c, &["Approved"]), Want::Ignore("approved or denied")),
        ("already denied", |c| with_conditions(c, &["Denied"]), Want::Ignore("approved or denied")),
        ("failed", |c| with_conditions(c, &["Failed"]), Want::Ignore("failed")),
        (
            "issued",
            |c| {
                c.status = Some(CertificateSigningRequestStatus {
                    certificate: Some(ByteString(b"x".to_vec())),
                    conditions: None,
                })
            },
            Want::Ignore("already issued"),
        ),
    ];

    /// Each denial's message, as the Denied condition carries it (the texts are part of the
    /// API: clients and people read them).
    #[test]
    fn denial_messages() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let ip: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let cases: Vec<(Denial, &str)> = vec![
            (Denial::NotANode { requester: "alice".into() }, r#"requester "alice" is not a node (system:node:<name>)"#),
            (
                Denial::CommonNameNotRequester { common_name: "a".into(), requester: "b".into() },
                r#"subject common name "a" is not the requester "b""#,
            ),
            (
                Denial::NodeNameDenied { node: "n".into(), pattern: "n*".into() },
                r#"node name "n" is refused (it matches the dnsNames.deniedPatterns pattern "n*")"#,
            ),
            (
                Denial::CommonNamePattern { common_name: "a".into(), pattern: "b.*".into() },
                r#"subject common name "a" does not match the pattern "b.*""#,
            ),
            (
                Denial::Organizations { got: s(&["x"]), want: s(&["system:nodes"]) },
                r#"subject organizations ["x"] are not exactly ["system:nodes"]"#,
            ),
            (
                Denial::DnsNamesNotAllowed { first: "a.b".into() },
                r#"dnsNames[0] "a.b": DNS subjectAltNames are not allowed"#,
            ),
            (Denial::TooManyDnsNames { count: 3, max: 2 }, "3 DNS names, more than the maximum 2"),
            (Denial::DnsWildcard { index: 1, name: "*.b".into() }, r#"dnsNames[1] "*.b" is a wildcard"#),
            (
                Denial::DnsNameDenied { index: 0, name: "k".into(), pattern: "k.*".into() },
                r#"dnsNames[0] "k" is refused (it matches the deniedPatterns pattern "k.*")"#,
            ),
            (
                Denial::DnsNameWithoutNode { index: 2, name: "a".into() },
                r#"dnsNames[2] "a": no node name to compare with"#,
            ),
            (
                Denial::DnsNameNotOfNode { index: 0, name: "x".into(), node: "n1".into(), domains: vec![] },
                r#"dnsNames[0] "x" is neither the node name "n1" nor "n1.<domain>" (no nodeDomains are listed)"#,
            ),
            (
                Denial::DnsNameNotOfNode { index: 0, name: "x".into(), node: "n1".into(), domains: s(&["a", "b"]) },
                r#"dnsNames[0] "x" is neither the node name "n1" nor "n1.<domain>" (nodeDomains: a, b)"#,
            ),
            (
                Denial::DnsNamePattern { index: 0, name: "x".into() },
                r#"dnsNames[0] "x" matches none of the dnsNames patterns"#,
            ),
            (
                Denial::IpAddressesNotAllowed { first: ip },
                "ipAddresses[0] 10.0.0.1: IP subjectAltNames are not allowed",
            ),
            (Denial::TooManyIpAddresses { count: 2, max: 1 }, "2 IP addresses, more than the maximum 1"),
            (
                Denial::IpAddressDenied { index: 0, ip, cidr: "10.0.0.0/8".into() },
                "ipAddresses[0] 10.0.0.1 is refused (it is in the deniedCidrs 10.0.0.0/8)",
            ),
            (
                Denial::IpAddressNotInCidrs { index: 1, ip, cidrs: s(&["192.0.2.0/24", "::1/128"]) },
                "ipAddresses[1] 10.0.0.1 is not in 192.0.2.0/24, ::1/128",
            ),
            (
                Denial::EmailAddressesNotAllowed { first: "a@b".into() },
                r#"emailAddresses[0] "a@b": email subjectAltNames are not allowed"#,
            ),
            (
                Denial::UrisNotAllowed { first: "spiffe://x".into() },
                r#"uris[0] "spiffe://x": URI subjectAltNames are not allowed"#,
            ),
            (
                Denial::Usage { usage: "client auth".into(), allowed: s(&["server auth", "digital signature"]) },
                r#"usage "client auth" is not allowed (allowed: server auth, digital signature)"#,
            ),
            (
                Denial::ExpirationTooLong { seconds: 90000, max: 86400 },
                "expirationSeconds 90000 is more than the maximum 86400",
            ),
            (
                Denial::ExpirationUnset { max: 86400 },
                "expirationSeconds is not set (the signer's default lifetime may exceed the maximum 86400)",
            ),
        ];
        for (denial, want) in cases {
            assert_eq!(denial.to_string(), want, "{denial:?}");
        }
    }

    #[test]
    fn default_policy_decisions_against_the_attacker_model() {
        let policies = vec![Arc::new(default_policy())];
        for (name, mutate, want) in CASES {
            let mut c = base_csr();
            mutate(&mut c);
            let mut parses = 0;
            // These cases are about the other rules: the node publishes whatever it asks for
            // (`node_addresses_bound_the_sans` covers the address check).
            let published = published_sans(&c);
            let got = decide(
                &c,
                |c| {
                    parses += 1;
                    csr::read_request(c)
                },
                &policies,
                &World { own: Some(&published), ..World::unknown() },
            );
            assert!(parses <= 1, "{name}: parsed {parses} times");
            match (&got, want) {
                (Decision::Approve { policy, message }, Want::Approve) => {
                    assert_eq!(policy, "kubelet-serving", "{name}");
                    assert_eq!(
                        message,
                        "Auto approving certificate: allowed by CertificateApprovalPolicy \"kubelet-serving\".",
                        "{name}"
                    );
                }
                (Decision::Deny { policies, message }, Want::Deny(why)) => {
                    assert_eq!(policies, &["kubelet-serving"], "{name}");
                    if why.is_empty() {
                        assert!(message.starts_with("Denied: the request does not parse: "), "{name}: {message}");
                    } else {
                        assert_eq!(
                            message,
                            &format!("Denied: CertificateApprovalPolicy \"kubelet-serving\": {why}."),
                            "{name}"
                        );
                    }
                }
                (Decision::Ignore(why), Want::Ignore(frag)) => {
                    assert!(why.contains(frag), "{name}: left alone because {why}");
                    if *frag != "no policy applies" {
                        assert_eq!(parses, 0, "{name}: not pending, not parsed");
                    }
                }
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn node_dns_names_are_the_node_name_or_under_a_listed_domain() {
        let domains = vec!["cluster.example".to_string(), "nodes.example.com".to_string()];
        // name, node, domains, want
        let cases: &[(&str, &str, &[String], bool)] = &[
            ("n1", "n1", &domains, true),
            ("n1.cluster.example", "n1", &domains, true),
            ("n1.nodes.example.com", "n1", &domains, true),
            ("N1.Cluster.Example", "n1", &domains, true),
            ("n1.example.com", "n1", &domains, false),
            ("n1.sub.cluster.example", "n1", &domains, false),
            ("n1.cluster.example.evil", "n1", &domains, false),
            ("n10.cluster.example", "n1", &domains, false),
            ("n1cluster.example", "n1", &domains, false),
            ("n1.", "n1", &domains, false),
            ("n1", "n1", &[], true),
            ("n1.cluster.example", "n1", &[], false),
        ];
        for (name, node, domains, want) in cases {
            assert_eq!(is_node_dns_name(name, node, domains), *want, "{name} for node {node} under {domains:?}");
        }
    }

    /// Node n1's `status.addresses`: every SAN of [`Req::n1`], as a kubelet publishes them.
    fn n1_addresses() -> Vec<NodeAddress> {
        addresses(&[
            ("Hostname", "n1"),
            ("InternalDNS", "n1.cluster.example"),
            ("InternalIP", "10.0.0.5"),
            ("ExternalIP", "fd00::5"),
        ])
    }

    /// A Node's addresses that hold every SAN of the request (none when it does not parse).
    fn published_sans(c: &CertificateSigningRequest) -> Vec<NodeAddress> {
        let Ok(req) = csr::read_request(c) else { return Vec::new() };
        let dns = req.dns_names.iter().map(|d| NodeAddress { type_: "Hostname".into(), address: d.clone() });
        let ips = req.ip_addresses.iter().map(|ip| NodeAddress { type_: "InternalIP".into(), address: ip.to_string() });
        dns.chain(ips).collect()
    }

    fn addresses(list: &[(&str, &str)]) -> Vec<NodeAddress> {
        list.iter().map(|(t, a)| NodeAddress { type_: (*t).into(), address: (*a).into() }).collect()
    }

    #[test]
    fn node_addresses_bound_the_sans() {
        let policies = vec![Arc::new(default_policy())];
        assert!(policies[0].spec.require_node_addresses, "the shipped policy checks node addresses");
        let n1 = n1_addresses();
        let upper = addresses(&[
            ("Hostname", "N1"),
            ("InternalDNS", "N1.Cluster.Example"),
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "fd00::5"),
        ]);
        let mapped = addresses(&[
            ("Hostname", "n1"),
            ("InternalDNS", "n1.cluster.example"),
            ("InternalIP", "::ffff:10.0.0.5"),
            ("InternalIP", "fd00::5"),
        ]);
        let ip_as_hostname = addresses(&[
            ("Hostname", "n1"),
            ("InternalDNS", "n1.cluster.example"),
            ("Hostname", "10.0.0.5"),
            ("InternalIP", "fd00::5"),
        ]);
        let name_as_ip = addresses(&[
            ("InternalIP", "n1"),
            ("InternalDNS", "n1.cluster.example"),
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "fd00::5"),
        ]);
        let no_addresses: Vec<NodeAddress> = Vec::new();
        let hostname_only = addresses(&[("Hostname", "n1"), ("InternalIP", "10.0.0.5"), ("ExternalIP", "fd00::5")]);
        type Case<'a> = (&'a str, NodeAddresses<'a>, Mutate, Result<(), &'a str>);
        let cases: Vec<Case> = vec![
            ("every SAN published", Some(&n1), |_| {}, Ok(())),
            (
                "a subset of the published addresses",
                Some(&n1),
                |c| {
                    set_request(c, |r| {
                        r.dns = vec!["n1"];
                        r.ips = vec!["10.0.0.5"]
                    })
                },
                Ok(()),
            ),
            ("DNS names compare case-insensitively", Some(&upper), |_| {}, Ok(())),
            ("an IPv4-mapped published address is the IPv4 address", Some(&mapped), |_| {}, Ok(())),
            (
                "no Node object",
                None,
                |_| {},
                Err(r#"node "n1" has no Node object, so its addresses cannot be checked"#),
            ),
            (
                "a Node with no addresses",
                Some(&no_addresses),
                |_| {},
                Err(r#"dnsNames[0] "n1" is not among the addresses of Node "n1" (status.addresses)"#),
            ),
            (
                "an address in the allowed CIDRs the node does not publish",
                Some(&n1),
                |c| set_request(c, |r| r.ips = vec!["10.0.0.5", "10.0.0.6"]),
                Err(r#"ipAddresses[1] 10.0.0.6 is not among the addresses of Node "n1" (status.addresses)"#),
            ),
            (
                "a DNS name under a listed domain the node does not publish",
                Some(&hostname_only),
                |_| {},
                Err(r#"dnsNames[1] "n1.cluster.example" is not among the addresses of Node "n1" (status.addresses)"#),
            ),
            (
                "an IP published only as a host name is not an IP address of the node",
                Some(&ip_as_hostname),
                |_| {},
                Err(r#"ipAddresses[0] 10.0.0.5 is not among the addresses of Node "n1" (status.addresses)"#),
            ),
            (
                "a name published as an IP address is not a DNS name of the node",
                Some(&name_as_ip),
                |_| {},
                Err(r#"dnsNames[0] "n1" is not among the addresses of Node "n1" (status.addresses)"#),
            ),
        ];
        for (name, node, mutate, want) in cases {
            let mut c = base_csr();
            mutate(&mut c);
            let got = decide(&c, csr::read_request, &policies, &World { own: node, ..World::unknown() });
            match (want, &got) {
                (Ok(()), Decision::Approve { policy, .. }) => assert_eq!(policy, "kubelet-serving", "{name}"),
                (Err(why), Decision::Deny { message, .. }) => {
                    assert_eq!(
                        message,
                        &format!("Denied: CertificateApprovalPolicy \"kubelet-serving\": {why}."),
                        "{name}"
                    )
                }
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// What the rest of the cluster publishes bounds a kubelet serving certificate: another
    /// Node's addresses (with `requireNodeAddresses`), the apiserver's and every Service's
    /// cluster IPs (always, for the kubelet-serving signer).
    #[test]
    fn the_cluster_bounds_kubelet_serving_certificates() {
        use addresses::{Address, Index};
        let checking = vec![Arc::new(default_policy())];
        let lenient = vec![policy("kubelet-serving", |s| {
            s.require_node_addresses = false;
            s.ip_addresses.as_mut().unwrap().denied_cidrs.clear();
        })];
        let mut other_signer = (*lenient[0]).clone();
        other_signer.spec.signer_names = vec!["example.com/serving".into()];
        let other_signer = vec![Arc::new(other_signer)];
        // n1 publishes every SAN it may ask for here, n2 shares one of them.
        let n1 = addresses(&[
            ("Hostname", "n1"),
            ("InternalDNS", "n1.cluster.example"),
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "10.0.0.6"),
            ("InternalIP", "10.0.0.1"),
            ("InternalIP", "10.96.0.1"),
            ("ExternalIP", "fd00::5"),
        ]);
        let mut nodes = Index::default();
        nodes.set("n1", addresses::node_addresses(&n1));
        nodes.set("n2", [Address::dns("n2"), Address::parse("::ffff:10.0.0.6").unwrap()]);
        let mut apiserver = Index::default();
        apiserver.set(addresses::APISERVER, [Address::parse("10.0.0.1").unwrap()]);
        let mut services = Index::default();
        services.set("an IP of Service default/kubernetes", [Address::parse("10.96.0.1").unwrap()]);
        let protected = [&apiserver, &services];
        let world = World { own: Some(&n1), nodes: &nodes, protected: &protected };
        let ips = |ips: &'static [&'static str]| {
            move |c: &mut CertificateSigningRequest| set_request(c, |r| r.ips = ips.to_vec())
        };
        let neighbour = "ipAddresses[0] 10.0.0.6 is refused (another Node publishes it in status.addresses)";
        let apiserver_ip = "ipAddresses[0] 10.0.0.1 is refused (it is an address of the apiserver)";
        let service_ip = "ipAddresses[0] 10.96.0.1 is refused (it is an IP of Service default/kubernetes)";
        type Case<'a> = (
            &'a str,
            &'a [Arc<CertificateApprovalPolicy>],
            Box<dyn Fn(&mut CertificateSigningRequest)>,
            Result<(), &'a str>,
        );
        let cases: Vec<Case> = vec![
            ("its own addresses", &checking, Box::new(|_| {}), Ok(())),
            ("an address it shares with another Node", &checking, Box::new(ips(&["10.0.0.6"])), Err(neighbour)),
            ("the apiserver's address", &checking, Box::new(ips(&["10.0.0.1"])), Err(apiserver_ip)),
            ("a Service's cluster IP", &lenient, Box::new(ips(&["10.96.0.1"])), Err(service_ip)),
            ("without requireNodeAddresses: another Node's address", &lenient, Box::new(ips(&["10.0.0.6"])), Ok(())),
            (
                "without requireNodeAddresses: still never the apiserver's",
                &lenient,
                Box::new(ips(&["10.0.0.1"])),
                Err(apiserver_ip),
            ),
            (
                "a signer of one's own: not the kubelet serving rule's business",
                &other_signer,
                Box::new(|c: &mut CertificateSigningRequest| {
                    c.spec.signer_name = "example.com/serving".into();
                    set_request(c, |r| r.ips = vec!["10.0.0.1"]);
                }),
                Ok(()),
            ),
        ];
        for (name, policies, mutate, want) in cases {
            let mut c = base_csr();
            mutate(&mut c);
            let got = decide(&c, csr::read_request, policies, &world);
            match (want, &got) {
                (Ok(()), Decision::Approve { .. }) => {}
                (Err(why), Decision::Deny { message, .. }) => {
                    assert_eq!(
                        message,
                        &format!("Denied: CertificateApprovalPolicy \"kubelet-serving\": {why}."),
                        "{name}"
                    )
                }
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
            assert!(
                needs_world(&c, policies) || name.starts_with("a signer"),
                "{name}: the watched addresses are needed"
            );
        }
        let mut client_csr = base_csr();
        client_csr.spec.signer_name = "kubernetes.io/kube-apiserver-client-kubelet".into();
        assert!(!needs_world(&client_csr, &checking), "a CSR no policy applies to does not wait for the watches");
        let mut decided = base_csr();
        with_conditions(&mut decided, &["Denied"]);
        assert!(!needs_world(&decided, &checking), "a decided CSR does not wait for the watches");
    }

    #[test]
    fn the_node_is_looked_up_only_when_an_applying_policy_asks() {
        let checking = vec![Arc::new(default_policy())];
        let not_checking = vec![policy("kubelet-serving", |s| s.require_node_addresses = false)];
        let mut client_csr = base_csr();
        client_csr.spec.signer_name = "kubernetes.io/kube-apiserver-client-kubelet".into();
        let mut decided = base_csr();
        with_conditions(&mut decided, &["Approved"]);
        let mut not_a_node = base_csr();
        not_a_node.spec.username = Some("admin".into());
        not_a_node.spec.groups = Some(vec!["system:nodes".into()]);
        type Case<'a> = (&'a str, &'a [Arc<CertificateApprovalPolicy>], CertificateSigningRequest, Option<&'a str>);
        let cases: Vec<Case> = vec![
            ("a pending serving CSR under a checking policy", &checking, base_csr(), Some("n1")),
            ("a policy that does not check", &not_checking, base_csr(), None),
            ("a signer no checking policy names", &checking, client_csr, None),
            ("an approved CSR", &checking, decided, None),
            ("a requester that is not a node", &checking, not_a_node, None),
        ];
        for (name, policies, c, want) in cases {
            assert_eq!(node_to_look_up(&c, policies).as_deref(), want, "{name}");
        }
    }

    fn policy(name: &str, f: impl FnOnce(&mut CertificateApprovalPolicySpec)) -> Arc<CertificateApprovalPolicy> {
        let mut p = default_policy();
        p.metadata.name = Some(name.into());
        f(&mut p.spec);
        Arc::new(p)
    }

    #[test]
    fn several_policies() {
        let evil: Mutate = |c| set_request(c, |r| r.dns = vec!["evil.example"]);
        let allow_any_dns = |s: &mut CertificateApprovalPolicySpec| {
            s.require_node_addresses = false;
            s.dns_names.as_mut().unwrap().node_name_prefix = false;
            s.dns_names.as_mut().unwrap().node_domains.clear();
            s.dns_names.as_mut().unwrap().patterns = Some(vec![r"[a-z]+\.example".into()]);
        };
        let invalid =
            |s: &mut CertificateApprovalPolicySpec| s.ip_addresses.as_mut().unwrap().cidrs = vec!["nope".into()];
        let other_signer = |s: &mut CertificateApprovalPolicySpec| s.signer_names = vec!["example.com/other".into()];
        let no_expiry_unset = |s: &mut CertificateApprovalPolicySpec| s.allow_unset_expiration_seconds = false;
        // name, policies, mutation, wanted decision
        let cases: Vec<(&str, Vec<Arc<CertificateApprovalPolicy>>, Mutate, Decision)> = vec![
            ("no policies at all: left alone", vec![], |_| {}, Decision::Ignore("no policy applies".into())),
            (
                "one denies, another allows: approved by the one that allows",
                vec![policy("a-strict", |_| {}), policy("b-lenient", allow_any_dns)],
                evil,
                Decision::Approve {
                    policy: "b-lenient".into(),
                    message: "Auto approving certificate: allowed by CertificateApprovalPolicy \"b-lenient\".".into(),
                },
            ),
            (
                "both deny: each policy and its failed check, in name order",
                vec![policy("z", |s| s.dns_names.as_mut().unwrap().max_count = Some(0)), policy("a", |_| {})],
                evil,
                Decision::Deny {
                    policies: vec!["a".into(), "z".into()],
                    message:
                        "Denied: CertificateApprovalPolicy \"a\": dnsNames[0] \"evil.example\" is neither the node \
                              name \"n1\" nor \"n1.<domain>\" (nodeDomains: cluster.example); \
                              CertificateApprovalPolicy \"z\": 1 DNS names, more than the maximum 0."
                            .into(),
                },
            ),
            (
                "a policy for another signer does not count",
                vec![policy("other", other_signer), policy("kubelet-serving", |_| {})],
                evil,
                Decision::Deny {
                    policies: vec!["kubelet-serving".into()],
                    message: "Denied: CertificateApprovalPolicy \"kubelet-serving\": dnsNames[0] \"evil.example\" is \
                              neither the node name \"n1\" nor \"n1.<domain>\" (nodeDomains: cluster.example)."
                        .into(),
                },
            ),
            (
                "an invalid policy applies and the valid one denies: left pending",
                vec![policy("broken", invalid), policy("kubelet-serving", |_| {})],
                evil,
                Decision::Ignore("policies [\"broken\"] apply but are invalid; not denying".into()),
            ),
            (
                "an invalid policy applies and the valid one allows: approved",
                vec![policy("broken", invalid), policy("kubelet-serving", |_| {})],
                |_| {},
                Decision::Approve {
                    policy: "kubelet-serving".into(),
                    message: "Auto approving certificate: allowed by CertificateApprovalPolicy \"kubelet-serving\"."
                        .into(),
                },
            ),
            (
                "unset expirationSeconds under a cap that does not allow it",
                vec![policy("kubelet-serving", no_expiry_unset)],
                |_| {},
                Decision::Deny {
                    policies: vec!["kubelet-serving".into()],
                    message:
                        "Denied: CertificateApprovalPolicy \"kubelet-serving\": expirationSeconds is not set (the \
                              signer's default lifetime may exceed the maximum 31536000)."
                            .into(),
                },
            ),
            (
                "a set expirationSeconds under that cap",
                vec![policy("kubelet-serving", no_expiry_unset)],
                |c| c.spec.expiration_seconds = Some(3600),
                Decision::Approve {
                    policy: "kubelet-serving".into(),
                    message: "Auto approving certificate: allowed by CertificateApprovalPolicy \"kubelet-serving\"."
                        .into(),
                },
            ),
            (
                "a policy with no SAN rules allows no SANs",
                vec![policy("bare", |s| {
                    s.dns_names = None;
                    s.ip_addresses = None;
                })],
                |_| {},
                Decision::Deny {
                    policies: vec!["bare".into()],
                    message: "Denied: CertificateApprovalPolicy \"bare\": dnsNames[0] \"n1\": DNS subjectAltNames are \
                              not allowed."
                        .into(),
                },
            ),
        ];
        for (name, policies, mutate, want) in cases {
            let mut c = base_csr();
            mutate(&mut c);
            assert_eq!(
                decide(&c, csr::read_request, &policies, &World { own: Some(&n1_addresses()), ..World::unknown() }),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn other_rules_a_policy_can_state() {
        let user_csr = |cn: &'static str, user: &str| {
            let mut c = csr_with(&Req { cn, orgs: vec![], dns: vec![], ips: vec![], emails: vec![], uris: vec![] });
            c.spec.signer_name = "kubernetes.io/kube-apiserver-client".into();
            c.spec.username = Some(user.into());
            c.spec.groups = Some(vec!["system:authenticated".into()]);
            c.spec.usages = Some(vec!["digital signature".into(), "client auth".into()]);
            c
        };
        let spec = CertificateApprovalPolicySpec {
            signer_names: vec!["kubernetes.io/kube-apiserver-client".into()],
            requesters: Some(kustos_crds::certificate_approval_policy::Requesters {
                service_accounts: vec!["ci/deployer".into()],
                ..Default::default()
            }),
            subject: Some(kustos_crds::certificate_approval_policy::SubjectRules {
                common_name_is_requester: true,
                common_name_pattern: Some("system:serviceaccount:ci:.*".into()),
                organizations: Some(vec![]),
                ..Default::default()
            }),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        };
        let policies = vec![Arc::new(CertificateApprovalPolicy::new("ci", spec))];
        let sa = "system:serviceaccount:ci:deployer";
        let cases: Vec<(&str, CertificateSigningRequest, Result<(), &str>)> = vec![
            ("the service account for itself", user_csr("system:serviceaccount:ci:deployer", sa), Ok(())),
            (
                "the service account for someone else",
                user_csr("admin", sa),
                Err(r#"subject common name "admin" is not the requester "system:serviceaccount:ci:deployer""#),
            ),
            ("another requester: not this policy's business", user_csr("admin", "admin"), Err("ignore")),
        ];
        for (name, c, want) in cases {
            let got =
                decide(&c, csr::read_request, &policies, &World { own: Some(&n1_addresses()), ..World::unknown() });
            match (want, &got) {
                (Ok(()), Decision::Approve { policy, .. }) => assert_eq!(policy, "ci", "{name}"),
                (Err("ignore"), Decision::Ignore(_)) => {}
                (Err(why), Decision::Deny { message, .. }) => {
                    assert_eq!(message, &format!("Denied: CertificateApprovalPolicy \"ci\": {why}."), "{name}")
                }
                _ => panic!("{name}: got {got:?}"),
            }
        }
    }

    #[test]
    fn the_decision_becomes_a_condition() {
        let mut failed = base_csr();
        with_conditions(&mut failed, &["Failed"]);
        for (name, approve, type_, reason) in
            [("approve", true, "Approved", "AutoApproved"), ("deny", false, "Denied", "AutoDenied")]
        {
            let out = with_decision(&failed, approve, "why");
            let conds = out.status.as_ref().unwrap().conditions.as_ref().unwrap();
            assert_eq!(conds.len(), 2, "{name}: existing conditions are kept");
            assert_eq!((conds[1].type_.as_str(), conds[1].status.as_str()), (type_, "True"), "{name}");
            assert_eq!(conds[1].reason.as_deref(), Some(reason), "{name}");
            assert_eq!(conds[1].message.as_deref(), Some("why"), "{name}");
            assert_eq!(out.metadata.resource_version.as_deref(), Some("42"), "{name}: precondition");
        }
    }

    #[test]
    fn the_valid_condition_follows_the_spec() {
        use chrono::TimeZone as _;
        let now = chrono::Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let mut p = default_policy();
        p.metadata.generation = Some(3);
        let s = status_for_spec(&p, now).expect("no status yet: one is written");
        assert_eq!(s.observed_generation, Some(3), "observed generation");
        assert_eq!((s.conditions[0].status.as_str(), s.conditions[0].reason.as_str()), ("True", "Valid"));
        p.status = Some(s.clone());
        assert_eq!(status_for_spec(&p, now), None, "up to date: nothing to write");

        p.status.as_mut().unwrap().approved = 7;
        p.metadata.generation = Some(4);
        p.spec.ip_addresses.as_mut().unwrap().cidrs = vec!["10.0.0.0/33".into()];
        let later = now + chrono::Duration::hours(1);
        let s2 = status_for_spec(&p, later).expect("spec changed");
        assert_eq!(s2.approved, 7, "counts are kept");
        assert_eq!(s2.observed_generation, Some(4));
        let c = &s2.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InvalidSpec"));
        assert!(c.message.contains("spec.ipAddresses.cidrs[0]"), "names the field: {}", c.message);
        assert_eq!(c.last_transition_time, csr::to_time(later), "status changed: new transition time");
    }

    const APPROVAL: &str = "PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/csr-n1/approval";
    const GET_POLICY: &str = "GET /apis/kustos.dev/v1alpha1/certificateapprovalpolicies/kubelet-serving";
    const PUT_STATUS: &str = "PUT /apis/kustos.dev/v1alpha1/certificateapprovalpolicies/kubelet-serving/status";
    const GET_NODE: &str = "GET /api/v1/nodes/n1";

    fn node_reply() -> (u16, serde_json::Value) {
        let node = Node {
            metadata: ObjectMeta { name: Some("n1".into()), ..Default::default() },
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                addresses: Some(n1_addresses()),
                ..Default::default()
            }),
            ..Default::default()
        };
        (200, serde_json::to_value(node).unwrap())
    }

    fn ctx(
        client: Client,
        policies: Vec<CertificateApprovalPolicy>,
        ready: bool,
        metrics: crate::metrics::Metrics,
    ) -> Arc<Context> {
        ctx_with(client, policies, ready, Arc::new(world::Book::listed_with(Default::default())), metrics)
    }

    fn ctx_with(
        client: Client,
        policies: Vec<CertificateApprovalPolicy>,
        ready: bool,
        book: Arc<world::Book>,
        metrics: crate::metrics::Metrics,
    ) -> Arc<Context> {
        let (store, mut writer) = reflector::store();
        for p in policies {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        Arc::new(Context {
            csrs: Api::all(client.clone()),
            nodes: Api::all(client.clone()),
            book,
            policies: Api::all(client),
            store,
            ready: Arc::new(AtomicBool::new(ready)),
            backoff: Backoff::default(),
            metrics,
        })
    }

    fn policy_reply(approved: i64, rv: &str) -> (u16, serde_json::Value) {
        let mut p = default_policy();
        p.metadata.resource_version = Some(rv.into());
        p.status = Some(CertificateApprovalPolicyStatus { approved, denied: 2, ..Default::default() });
        (200, serde_json::to_value(p).unwrap())
    }

    #[tokio::test]
    async fn reconcile_scenarios() {
        use crate::mock::{status, Mock};
        let csr_reply = || (200, serde_json::to_value(base_csr()).unwrap());
        let evil: Mutate = |c| set_request(c, |r| r.dns = vec!["evil.example"]);
        // name, ready, mutation, replies, wanted calls, wanted outcome
        type Scenario = (&'static str, bool, Mutate, Vec<(u16, serde_json::Value)>, Vec<&'static str>, &'static str);
        let scenarios: Vec<Scenario> = vec![
            (
                "approved, then the policy's count goes up",
                true,
                |_| {},
                vec![node_reply(), csr_reply(), policy_reply(5, "7"), policy_reply(6, "8")],
                vec![GET_NODE, APPROVAL, GET_POLICY, PUT_STATUS],
                "await",
            ),
            (
                "denied, then the policy's denied count goes up",
                true,
                evil,
                vec![node_reply(), csr_reply(), policy_reply(5, "7"), policy_reply(5, "8")],
                vec![GET_NODE, APPROVAL, GET_POLICY, PUT_STATUS],
                "await",
            ),
            (
                "the status write conflicts: read again and retried",
                true,
                |_| {},
                vec![
                    node_reply(),
                    csr_reply(),
                    policy_reply(5, "7"),
                    (409, status(409, "Conflict")),
                    policy_reply(6, "9"),
                    policy_reply(7, "10"),
                ],
                vec![GET_NODE, APPROVAL, GET_POLICY, PUT_STATUS, GET_POLICY, PUT_STATUS],
                "await",
            ),
            (
                "the approval lost a race: looked at again, no count",
                true,
                |_| {},
                vec![node_reply(), (409, status(409, "Conflict"))],
                vec![GET_NODE, APPROVAL],
                "requeue 100",
            ),
            (
                "the CSR is gone: nothing",
                true,
                |_| {},
                vec![node_reply(), (404, status(404, "NotFound"))],
                vec![GET_NODE, APPROVAL],
                "await",
            ),
            (
                "the approval fails: retried",
                true,
                |_| {},
                vec![node_reply(), (500, status(500, "InternalError"))],
                vec![GET_NODE, APPROVAL],
                "error",
            ),
            (
                "denied: the requesting node has no Node object",
                true,
                |_| {},
                vec![(404, status(404, "NotFound")), csr_reply(), policy_reply(5, "7"), policy_reply(5, "8")],
                vec![GET_NODE, APPROVAL, GET_POLICY, PUT_STATUS],
                "await",
            ),
            (
                "the Node cannot be read: retried, the CSR stays pending",
                true,
                |_| {},
                vec![(403, status(403, "Forbidden"))],
                vec![GET_NODE],
                "error",
            ),
            ("policies not listed yet (no CRD): nothing", false, |_| {}, vec![], vec![], "await"),
            ("already approved: nothing", true, |c| with_conditions(c, &["Approved"]), vec![], vec![], "await"),
        ];
        for (name, ready, mutate, replies, want_calls, want) in scenarios {
            let mock = Mock::new(replies);
            let metrics = crate::metrics::Metrics::new();
            let ctx = ctx(mock.client(), vec![default_policy()], ready, metrics.clone());
            let mut c = base_csr();
            mutate(&mut c);
            let res =
                tokio::time::timeout(std::time::Duration::from_secs(5), reconcile(Arc::new(c), ctx)).await.unwrap();
            let got = match res {
                Ok(a) if a == Action::await_change() => "await".to_string(),
                Ok(a) if a == Action::requeue(csr::AFTER_CONFLICT) => "requeue 100".to_string(),
                Ok(a) => format!("{a:?}"),
                Err(e) => {
                    assert!(e.to_string().contains("csr-n1"), "{name}: the error names the CSR: {e}");
                    "error".to_string()
                }
            };
            assert_eq!(got, want, "{name}");
            assert_eq!(mock.lines(), want_calls, "{name}: calls");
            let calls = mock.calls();
            let denied = name.starts_with("denied");
            if let Some(approval) = calls.iter().find(|c| c.line == APPROVAL) {
                assert_eq!(approval.body["metadata"]["resourceVersion"], "42", "{name}: precondition");
                let cond = &approval.body["status"]["conditions"][0];
                assert_eq!(cond["type"], if denied { "Denied" } else { "Approved" }, "{name}");
                assert_eq!(cond["reason"], if denied { "AutoDenied" } else { "AutoApproved" }, "{name}");
            }
            // The approval or denial written is counted once in the metrics, nothing else is.
            let text = metrics.encode();
            let sample = |metric: &str| {
                let prefix = format!("{metric}{{signer=\"kubernetes.io/kubelet-serving\"}} ");
                text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(str::to_string)
            };
            let written = want_calls.contains(&PUT_STATUS);
            let (want_approved, want_denied) = match (written, denied) {
                (false, _) => (None, None),
                (true, false) => (Some("1".to_string()), None),
                (true, true) => (None, Some("1".to_string())),
            };
            assert_eq!(sample("kustos_csr_approved_total"), want_approved, "{name}: approvals counted\n{text}");
            assert_eq!(sample("kustos_csr_denied_total"), want_denied, "{name}: denials counted\n{text}");
            let puts: Vec<_> = calls.iter().filter(|c| c.line == PUT_STATUS).collect();
            if let Some(last) = puts.last() {
                let read_approved = if puts.len() > 1 { 6 } else { 5 };
                let want_approved = if denied { read_approved } else { read_approved + 1 };
                let want_denied = if denied { 3 } else { 2 };
                assert_eq!(last.body["status"]["approved"], want_approved, "{name}: approved count");
                assert_eq!(last.body["status"]["denied"], want_denied, "{name}: denied count");
                let want_rv = if puts.len() > 1 { "9" } else { "7" };
                assert_eq!(last.body["metadata"]["resourceVersion"], want_rv, "{name}: written over what was read");
            }
        }
    }

    /// Until the Nodes, Services and EndpointSlices have listed, a serving CSR is left for the
    /// re-decide that the first complete lists fire; another CSR does not wait. Once listed, a
    /// neighbour's address is denied through the same path.
    #[tokio::test]
    async fn serving_csrs_wait_for_the_address_watches() {
        use crate::mock::Mock;
        let mock = Mock::new(vec![]);
        let waiting = Arc::new(world::Book::new(&[]));
        let metrics = crate::metrics::Metrics::new();
        let c = ctx_with(mock.client(), vec![default_policy()], true, waiting, metrics.clone());
        let got = reconcile(Arc::new(base_csr()), c).await.unwrap();
        assert_eq!(got, Action::await_change());
        assert!(mock.lines().is_empty(), "nothing read or written: {:?}", mock.lines());

        let mut nodes = addresses::Index::default();
        nodes.set("n2", [addresses::Address::parse("10.0.0.5").unwrap()]);
        let csr_reply = (200, serde_json::to_value(base_csr()).unwrap());
        let mock = Mock::new(vec![node_reply(), csr_reply, policy_reply(5, "7"), policy_reply(5, "8")]);
        let book = Arc::new(world::Book::listed_with(nodes));
        let c = ctx_with(mock.client(), vec![default_policy()], true, book, metrics);
        reconcile(Arc::new(base_csr()), c).await.unwrap();
        assert_eq!(mock.lines(), [GET_NODE, APPROVAL, GET_POLICY, PUT_STATUS]);
        let approval = &mock.calls()[1].body["status"]["conditions"][0];
        assert_eq!(
            approval["message"],
            "Denied: CertificateApprovalPolicy \"kubelet-serving\": ipAddresses[0] 10.0.0.5 is refused (another Node \
             publishes it in status.addresses).",
            "{approval}"
        );
    }

    /// Without the CRD the watch waits (404, retried with backoff, CSRs untouched); once the
    /// list succeeds the policy's Valid condition is written and every CSR is re-decided.
    #[tokio::test(start_paused = true)]
    async fn the_policy_watch_waits_for_the_crd_then_starts() {
        use crate::mock::{status, Mock};
        let mut p = default_policy();
        p.metadata.generation = Some(1);
        p.metadata.resource_version = Some("5".into());
        let list = serde_json::json!({"apiVersion": "kustos.dev/v1alpha1", "kind": "CertificateApprovalPolicyList",
            "metadata": {"resourceVersion": "5"}, "items": [serde_json::to_value(&p).unwrap()]});
        let mock = Mock::new(vec![
            (404, status(404, "NotFound")),
            (404, status(404, "NotFound")),
            (200, list),
            (200, serde_json::to_value(&p).unwrap()),
            (200, serde_json::to_value(&p).unwrap()),
        ]);
        let (_store, writer) = reflector::store();
        let ready = Arc::new(AtomicBool::new(false));
        let (trigger, mut redecide) = futures::channel::mpsc::channel(1);
        let task = tokio::spawn(watch_policies(Api::all(mock.client()), writer, ready.clone(), trigger));
        let fired = tokio::time::timeout(std::time::Duration::from_secs(600), redecide.next()).await;
        task.abort();
        assert_eq!(fired.ok().flatten(), Some(()), "re-decide fired once the list succeeded");
        assert!(ready.load(Ordering::Acquire), "ready after the first list");
        const LIST: &str = "GET /apis/kustos.dev/v1alpha1/certificateapprovalpolicies";
        let lines = mock.lines();
        assert_eq!(lines[..5], [LIST, LIST, LIST, GET_POLICY, PUT_STATUS], "calls: {lines:?}");
        let put = &mock.calls()[4].body;
        assert_eq!(put["status"]["observedGeneration"], 1, "{put}");
        assert_eq!(put["status"]["conditions"][0]["type"], "Valid", "{put}");
        assert_eq!(put["status"]["conditions"][0]["status"], "True", "{put}");
        assert_eq!(put["metadata"]["resourceVersion"], "5", "written over what was read: {put}");
    }
}
