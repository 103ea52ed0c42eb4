//! The address rules of a kubelet serving certificate, without I/O: what a node publishes
//! ([`not_a_node_address`], `requireNodeAddresses`), what another Node publishes
//! ([`another_nodes`], `requireNodeAddresses`), and what no kubelet serving certificate may
//! ever name ([`protected`]: the apiserver's own addresses and names, every Service's cluster
//! IPs).
//!
//! In: the request's SANs, the requesting node's `status.addresses`, and [`Index`]es of who
//! publishes which address (kept from watches by [`super::world`]). Out: the first SAN a rule
//! refuses, as a [`Denial`].
//!
//! Addresses compare as Go compares them: IPs as parsed addresses (`::1` and
//! `0:0:0:0:0:0:0:1` are one; an IPv4-mapped IPv6 address is its IPv4 address, as
//! `net.IP.Equal`), DNS names case-insensitively and without a trailing dot.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::NodeAddress;
use kustos_ca::csr::CertificateRequest;

use super::Denial;

/// One name a certificate can carry, normalized for comparison.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// IPv4-mapped IPv6 addresses as their IPv4 address.
    Ip(IpAddr),
    /// Lowercase, without a trailing dot.
    Dns(String),
}

impl Address {
    pub fn ip(ip: IpAddr) -> Self {
        Address::Ip(ip.to_canonical())
    }

    pub fn dns(name: &str) -> Self {
        Address::Dns(name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase())
    }

    /// A published address (a Node's, an endpoint's, a cluster IP, a configured SAN): an IP
    /// address when it parses as one (brackets allowed), else a DNS name; `None` when empty
    /// (or `None`, a headless Service's cluster IP).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.is_empty() || s == "None" {
            return None;
        }
        match s.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => Some(Address::ip(ip)),
            Err(_) => Some(Address::dns(s)),
        }
    }
}

/// Who publishes which address: owners (a node's name, a phrase naming a Service or the
/// apiserver) and their addresses, looked up by address.
#[derive(Debug, Default, Clone)]
pub struct Index {
    by_owner: HashMap<String, Vec<Address>>,
    by_address: HashMap<Address, BTreeSet<String>>,
}

impl Index {
    /// Replace what `owner` publishes.
    pub fn set(&mut self, owner: &str, addresses: impl IntoIterator<Item = Address>) {
        self.remove(owner);
        let mut mine: Vec<Address> = addresses.into_iter().collect();
        mine.sort_unstable();
        mine.dedup();
        if mine.is_empty() {
            return;
        }
        for a in &mine {
            self.by_address.entry(a.clone()).or_default().insert(owner.to_string());
        }
        self.by_owner.insert(owner.to_string(), mine);
    }

    /// Forget `owner`.
    pub fn remove(&mut self, owner: &str) {
        let Some(old) = self.by_owner.remove(owner) else { return };
        for a in old {
            if let Some(owners) = self.by_address.get_mut(&a) {
                owners.remove(owner);
                if owners.is_empty() {
                    self.by_address.remove(&a);
                }
            }
        }
    }

    /// Who publishes `a`, in name order.
    pub fn owners<'a>(&'a self, a: &Address) -> impl Iterator<Item = &'a str> + 'a {
        self.by_address.get(a).into_iter().flatten().map(String::as_str)
    }

    /// The owners publishing a DNS name that the wildcard `*.<parent>` covers (one label
    /// under `parent`).
    fn covered_by_wildcard<'a>(&'a self, parent: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_address
            .iter()
            .filter(move |(a, _)| matches!(a, Address::Dns(d) if d.split_once('.').is_some_and(|(_, p)| p == parent)))
            .flat_map(|(_, owners)| owners.iter().map(String::as_str))
    }

    /// How many owners publish something.
    pub fn len(&self) -> usize {
        self.by_owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_owner.is_empty()
    }
}

/// Address types that name a host by DNS, and those that are IP addresses, as a kubelet
/// fills its serving request from them.
const DNS_ADDRESS_TYPES: &[&str] = &["Hostname", "InternalDNS", "ExternalDNS"];
const IP_ADDRESS_TYPES: &[&str] = &["InternalIP", "ExternalIP"];

/// `requireNodeAddresses`: the first SAN of `req` that `addresses` (node `node`'s) do not
/// publish. DNS names are compared with the DNS-typed addresses, IPs with the IP-typed ones;
/// a wildcard is never a node's address.
pub fn not_a_node_address(req: &CertificateRequest, node: &str, addresses: &[NodeAddress]) -> Option<Denial> {
    let published = |types: &[&str], want: &Address| {
        addresses.iter().any(|a| types.contains(&a.type_.as_str()) && published_as(a, types).as_ref() == Some(want))
    };
    for (index, name) in req.dns_names.iter().enumerate() {
        if name.contains('*') || !published(DNS_ADDRESS_TYPES, &Address::dns(name)) {
            return Some(Denial::DnsNameNotNodeAddress { index, name: name.clone(), node: node.into() });
        }
    }
    for (index, ip) in req.ip_addresses.iter().enumerate() {
        if !published(IP_ADDRESS_TYPES, &Address::ip(*ip)) {
            return Some(Denial::IpAddressNotNodeAddress { index, ip: *ip, node: node.into() });
        }
    }
    None
}

/// A Node address as its type says: DNS-typed ones are DNS names, IP-typed ones IPs (or
/// nothing, when they do not parse).
fn published_as(a: &NodeAddress, types: &[&str]) -> Option<Address> {
    if types == IP_ADDRESS_TYPES {
        a.address.trim().parse::<IpAddr>().ok().map(Address::ip)
    } else {
        Some(Address::dns(a.address.trim()))
    }
}

/// The addresses a Node publishes, for the index of every Node's: each value as an IP address
/// when it parses as one, whatever its type, so that no spelling of a neighbour's address
/// escapes the comparison.
pub fn node_addresses(addresses: &[NodeAddress]) -> impl Iterator<Item = Address> + '_ {
    addresses.iter().filter_map(|a| Address::parse(&a.address))
}

/// `requireNodeAddresses`: the first SAN of `req` that a Node other than `node` publishes
/// (`nodes`: every Node's addresses, by node name). The Denial does not name that Node: the
/// requester may not read other Nodes.
pub fn another_nodes(req: &CertificateRequest, node: &str, nodes: &Index) -> Option<Denial> {
    let other = |a: &Address| nodes.owners(a).any(|owner| owner != node);
    for (index, name) in req.dns_names.iter().enumerate() {
        if other(&Address::dns(name)) {
            return Some(Denial::DnsNameOfAnotherNode { index, name: name.clone() });
        }
    }
    for (index, ip) in req.ip_addresses.iter().enumerate() {
        if other(&Address::ip(*ip)) {
            return Some(Denial::IpAddressOfAnotherNode { index, ip: *ip });
        }
    }
    None
}

/// What the apiserver is called in every cluster: `kubernetes`, `kubernetes.default`,
/// `kubernetes.default.svc` and `kubernetes.default.svc.<cluster domain>`.
pub fn is_apiserver_name(name: &str) -> bool {
    let Address::Dns(name) = Address::dns(name) else { return false };
    matches!(name.as_str(), "kubernetes" | "kubernetes.default" | "kubernetes.default.svc")
        || name.strip_prefix("kubernetes.default.svc.").is_some_and(|domain| !domain.is_empty())
}

/// What the apiserver's names are called in a denial.
pub const APISERVER: &str = "an address of the apiserver";

/// The first SAN of `req` that no kubelet serving certificate may name: one of the apiserver's
/// names ([`is_apiserver_name`]), or an address in one of `protected` (owners are phrases such
/// as "an IP of Service default/kubernetes"). A wildcard DNS name is refused when it
/// covers such a name.
pub fn protected(req: &CertificateRequest, protected: &[&Index]) -> Option<Denial> {
    let first = |a: &Address| protected.iter().find_map(|ix| ix.owners(a).next()).map(str::to_string);
    for (index, name) in req.dns_names.iter().enumerate() {
        let Address::Dns(dns) = Address::dns(name) else { continue };
        let what = if is_apiserver_name(&dns) {
            Some(APISERVER.to_string())
        } else if let Some(parent) = dns.strip_prefix("*.") {
            if is_apiserver_name(&format!("kubernetes.{parent}")) {
                Some(APISERVER.to_string())
            } else {
                protected.iter().find_map(|ix| ix.covered_by_wildcard(parent).next()).map(str::to_string)
            }
        } else {
            first(&Address::Dns(dns))
        };
        if let Some(what) = what {
            return Some(Denial::DnsNameProtected { index, name: name.clone(), what });
        }
    }
    for (index, ip) in req.ip_addresses.iter().enumerate() {
        if let Some(what) = first(&Address::ip(*ip)) {
            return Some(Denial::IpAddressProtected { index, ip: *ip, what });
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn req(dns: &[&str], ips: &[&str]) -> CertificateRequest {
        CertificateRequest {
            common_name: "system:node:n1".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: dns.iter().map(|d| d.to_string()).collect(),
            ip_addresses: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
            email_addresses: vec![],
            uris: vec![],
            public_key_der: vec![],
        }
    }

    fn addrs(list: &[&str]) -> Vec<Address> {
        list.iter().filter_map(|a| Address::parse(a)).collect()
    }

    #[test]
    fn addresses_compare_as_go_compares_them() {
        let cases: &[(&str, &str, bool)] = &[
            ("::1", "0:0:0:0:0:0:0:1", true),
            ("::ffff:10.0.0.1", "10.0.0.1", true),
            ("::ffff:a00:1", "10.0.0.1", true),
            ("[fd00::5]", "fd00::5", true),
            ("10.0.0.1", "10.0.0.2", false),
            ("::10.0.0.1", "10.0.0.1", false),
            ("N1.Cluster.Example.", "n1.cluster.example", true),
            ("n1", "n1.cluster.example", false),
            ("10.0.0.1", "10.0.0.1.", false),
        ];
        for (a, b, same) in cases {
            assert_eq!(Address::parse(a) == Address::parse(b), *same, "{a} vs {b}");
        }
        assert_eq!(Address::parse(""), None);
        assert_eq!(Address::parse("None"), None, "a headless Service's cluster IP");
    }

    #[test]
    fn the_index_follows_every_change_of_an_owner() {
        let mut ix = Index::default();
        ix.set("n1", addrs(&["10.0.0.1", "n1"]));
        ix.set("n2", addrs(&["10.0.0.1", "n2"]));
        let ten = Address::parse("10.0.0.1").unwrap();
        assert_eq!(ix.owners(&ten).collect::<Vec<_>>(), ["n1", "n2"]);
        ix.set("n1", addrs(&["10.0.0.9"]));
        assert_eq!(ix.owners(&ten).collect::<Vec<_>>(), ["n2"]);
        assert_eq!(ix.owners(&Address::dns("n1")).count(), 0, "n1's old name is gone");
        ix.remove("n2");
        assert_eq!(ix.owners(&ten).count(), 0);
        ix.set("n1", []);
        assert!(ix.is_empty(), "{ix:?}");
    }

    #[test]
    fn the_apiservers_names() {
        for (name, want) in [
            ("kubernetes", true),
            ("Kubernetes.Default.", true),
            ("kubernetes.default.svc", true),
            ("kubernetes.default.svc.cluster.local", true),
            ("kubernetes.default.svc.", true),
            ("kubernetes.default.svcx", false),
            ("kubernetes.example", false),
            ("n1", false),
        ] {
            assert_eq!(is_apiserver_name(name), want, "{name}");
        }
    }

    /// Every address rule on one request: (what, SANs, the requesting node's own published
    /// addresses, the failed rule's message or None).
    #[test]
    fn address_rules() {
        let own = |list: &[(&str, &str)]| -> Vec<NodeAddress> {
            list.iter().map(|(t, a)| NodeAddress { type_: (*t).into(), address: (*a).into() }).collect()
        };
        let n1 = own(&[
            ("Hostname", "n1"),
            ("InternalDNS", "n1.cluster.example"),
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "::1"),
        ]);
        let mut nodes = Index::default();
        nodes.set("n1", node_addresses(&n1));
        nodes.set("n2", addrs(&["n2", "10.0.0.6", "0:0:0:0:0:0:0:1", "shared.cluster.example"]));
        nodes.set("n3", addrs(&["::ffff:10.0.0.7"]));
        let mut apiserver = Index::default();
        apiserver.set(APISERVER, addrs(&["10.0.0.1", "api.cluster.example", "localhost"]));
        let mut services = Index::default();
        services.set("an IP of Service default/kubernetes", addrs(&["10.96.0.1"]));
        services.set("an IP of Service web/front", addrs(&["fd00:96::a", "None"]));
        let protected_ix = [&apiserver, &services];
        type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            ("its own addresses", &["n1", "N1.cluster.example."], &["10.0.0.5"], None),
            ("a neighbour's IP", &["n1"], &["10.0.0.6"], Some("ipAddresses[0] 10.0.0.6 is refused (another Node publishes it in status.addresses)")),
            ("a neighbour's IP, IPv4-mapped", &[], &["::ffff:10.0.0.6"], Some("ipAddresses[0] ::ffff:10.0.0.6 is refused (another Node publishes it in status.addresses)")),
            ("a neighbour publishing it IPv4-mapped", &[], &["10.0.0.7"], Some("ipAddresses[0] 10.0.0.7 is refused (another Node publishes it in status.addresses)")),
            ("a neighbour's name", &["N2."], &[], Some("dnsNames[0] \"N2.\" is refused (another Node publishes it in status.addresses)")),
            ("an address it shares with a neighbour", &[], &["::1"], Some("ipAddresses[0] ::1 is refused (another Node publishes it in status.addresses)")),
            ("the apiserver's IP", &[], &["10.0.0.1"], Some("ipAddresses[0] 10.0.0.1 is refused (it is an address of the apiserver)")),
            ("the apiserver's IP, IPv4-mapped", &[], &["::ffff:10.0.0.1"], Some("ipAddresses[0] ::ffff:10.0.0.1 is refused (it is an address of the apiserver)")),
            ("the apiserver's DNS SAN", &["API.cluster.example"], &[], Some("dnsNames[0] \"API.cluster.example\" is refused (it is an address of the apiserver)")),
            ("the apiserver's Service name", &["kubernetes.default.svc.cluster.local"], &[], Some("dnsNames[0] \"kubernetes.default.svc.cluster.local\" is refused (it is an address of the apiserver)")),
            ("a wildcard over the apiserver's Service name", &["*.default.svc.cluster.local"], &[], Some("dnsNames[0] \"*.default.svc.cluster.local\" is refused (it is an address of the apiserver)")),
            ("a wildcard over an apiserver SAN", &["*.cluster.example"], &[], Some("dnsNames[0] \"*.cluster.example\" is refused (it is an address of the apiserver)")),
            ("a Service's cluster IP", &[], &["10.96.0.1"], Some("ipAddresses[0] 10.96.0.1 is refused (it is an IP of Service default/kubernetes)")),
            ("a Service's IPv6 cluster IP, long form", &[], &["fd00:96:0:0:0:0:0:a"], Some("ipAddresses[0] fd00:96::a is refused (it is an IP of Service web/front)")),
            ("the apiserver first, then the node rules", &["n1"], &["10.0.0.6", "10.0.0.1"], Some("ipAddresses[1] 10.0.0.1 is refused (it is an address of the apiserver)")),
        ];
        for (what, dns, ips, want) in cases {
            let r = req(dns, ips);
            let got = protected(&r, &protected_ix).or_else(|| another_nodes(&r, "n1", &nodes));
            assert_eq!(got.map(|d| d.to_string()).as_deref(), *want, "{what}");
        }
    }

    #[test]
    fn a_node_publishes_what_it_asks_for() {
        let own = |list: &[(&str, &str)]| -> Vec<NodeAddress> {
            list.iter().map(|(t, a)| NodeAddress { type_: (*t).into(), address: (*a).into() }).collect()
        };
        let n1 = own(&[
            ("Hostname", "n1"),
            ("InternalDNS", "n1.cluster.example."),
            ("InternalIP", "0:0:0:0:0:0:0:1"),
            ("ExternalIP", "::ffff:10.0.0.5"),
        ]);
        let wildcard_published = own(&[("InternalDNS", "*.cluster.example")]);
        type Case<'a> = (&'a str, &'a [NodeAddress], &'a [&'a str], &'a [&'a str], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            ("every SAN published", &n1, &["N1", "n1.cluster.example"], &["::1", "10.0.0.5"], None),
            (
                "an unpublished IP",
                &n1,
                &[],
                &["10.0.0.6"],
                Some("ipAddresses[0] 10.0.0.6 is not among the addresses of Node \"n1\" (status.addresses)"),
            ),
            (
                "a wildcard it publishes",
                &wildcard_published,
                &["*.cluster.example"],
                &[],
                Some("dnsNames[0] \"*.cluster.example\" is not among the addresses of Node \"n1\" (status.addresses)"),
            ),
        ];
        for (what, published, dns, ips, want) in cases {
            let got = not_a_node_address(&req(dns, ips), "n1", published);
            assert_eq!(got.map(|d| d.to_string()).as_deref(), *want, "{what}");
        }
    }
}
