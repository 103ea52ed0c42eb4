//! The `csrpolicyapproving` controller end to end against `kustos server`: the
//! CertificateApprovalPolicy CRD from `crds/` and the default kubelet-serving policy from
//! `manifests/policies/` applied with kubectl (its node domain edited to `cluster.local` and
//! its CIDRs to the loopback range the test node uses plus 10.0.0.0/8), a node (an x509 `system:node:<name>` identity issued by the cluster CA)
//! asking for serving certificates: a good request is approved and issued by csrsigning, bad
//! ones are denied with the failed check, and the policy's status counts both. The node's Node
//! object is registered first: the shipped policy allows only the addresses it publishes, and
//! none that another Node publishes, that is the apiserver's or a Service's cluster IP.
//! Every wait is bounded. The addresses in the requests are only names in certificates: no
//! traffic goes to them.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use common::{issue_user, send, shared, unique, Server, User};
use serde_json::{json, Value};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const POLICIES: &str = "/apis/kustos.dev/v1alpha1/certificateapprovalpolicies";
const SERVING: &str = "kubernetes.io/kubelet-serving";
/// Bound for one wait on the controllers.
const WAIT: Duration = Duration::from_secs(60);

/// An address in 10.0.0.0/8 (allowed by the edited policy) that no other test of this process
/// uses.
fn unique_ip() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    format!("10.77.{}.{}", n / 250, n % 250 + 1)
}

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// What goes into a serving request.
struct Req<'a> {
    cn: &'a str,
    dns: Vec<String>,
    ips: Vec<&'a str>,
}

/// A PEM CSR with O `system:nodes`.
fn request(r: &Req) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, r.cn);
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    for d in &r.dns {
        params.subject_alt_names.push(rcgen::SanType::DnsName(d.as_str().try_into().expect("DNS name")));
    }
    for ip in &r.ips {
        params.subject_alt_names.push(rcgen::SanType::IpAddress(ip.parse().expect("IP")));
    }
    params.serialize_request(&key).expect("CSR").pem().expect("CSR PEM")
}

fn manifest(name: &str, request_pem: &str, expiration: Option<i64>) -> Value {
    let mut m = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(request_pem.as_bytes()), "signerName": SERVING,
                 "usages": ["digital signature", "server auth"]}});
    if let Some(secs) = expiration {
        m["spec"]["expirationSeconds"] = json!(secs);
    }
    m
}

/// `kubectl create -f -` as `user`.
fn create_as(s: &Server, user: &User, obj: &Value) {
    let mut cmd = user.command(s, &["create", "-f", "-"]);
    let out = common::run_bounded(&mut cmd, Some(&obj.to_string()), common::KUBECTL_TIMEOUT, "kubectl create");
    assert!(
        out.status.success(),
        "creating {} as {}: {}",
        obj["metadata"]["name"],
        user.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// Poll `path` until `done` holds (bounded by [`WAIT`]); returns the object.
async fn wait_for(s: &Server, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    s.wait_for_object(path, what, WAIT, done).await
}

async fn wait_decided(s: &Server, name: &str) -> Value {
    wait_for(s, &format!("{CSRS}/{name}"), "a decision", |c| {
        condition(c, "Denied").is_some() || c["status"]["certificate"].as_str().is_some_and(|c| !c.is_empty())
    })
    .await
}

/// Register Node `node` (as an admin) with the addresses a kubelet publishes: its name as
/// Hostname, `<node>.cluster.local` as InternalDNS, and `ips` as InternalIPs.
fn register_node(s: &Server, node: &str, ips: &[&str]) {
    let mut addresses = vec![
        json!({"type": "Hostname", "address": node}),
        json!({"type": "InternalDNS", "address": format!("{node}.cluster.local")}),
    ];
    addresses.extend(ips.iter().map(|ip| json!({"type": "InternalIP", "address": ip})));
    let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                     "status": {"addresses": addresses}});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&obj.to_string()));
    assert!(out.status.success(), "registering node {node}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Install the CRD and the default policy (its CIDRs edited for this machine).
async fn install(s: &Server) {
    s.kubectl_ok(&["apply", "-f", repo("crds").to_str().expect("path")]);
    s.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/certificateapprovalpolicies.kustos.dev",
        "--timeout=60s",
    ]);
    // The shipped file applies as it is ...
    s.kubectl_ok(&["apply", "-f", repo("manifests/policies/kubelet-serving.yaml").to_str().expect("path")]);
    // ... and is then edited for this cluster, as its comment asks: the node's addresses are
    // loopback ones here, its domain cluster.local; 10.0.0.0/8 is there to show that the
    // Service CIDR inside it stays refused.
    let text = std::fs::read_to_string(repo("manifests/policies/kubelet-serving.yaml")).expect("reading the policy");
    let mut policy: Value = serde_yaml::from_str(&text).expect("the default policy is YAML");
    policy["spec"]["dnsNames"]["nodeDomains"] = json!(["cluster.local"]);
    policy["spec"]["ipAddresses"]["cidrs"] = json!(["127.0.0.0/8", "::1/128", "10.0.0.0/8"]);
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&policy.to_string()));
    assert!(out.status.success(), "applying the edited policy: {}", String::from_utf8_lossy(&out.stderr));
    let p = wait_for(s, &format!("{POLICIES}/kubelet-serving"), "the edit observed", |p| {
        p["spec"]["ipAddresses"]["cidrs"][0] == "127.0.0.0/8"
            && p["status"]["observedGeneration"] == p["metadata"]["generation"]
            && condition(p, "Valid").is_some()
    })
    .await;
    let valid = condition(&p, "Valid").expect("a Valid condition");
    assert_eq!((&valid["status"], &valid["reason"]), (&json!("True"), &json!("Valid")), "{p}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelet_serving_policy_approves_a_nodes_own_certificate_and_denies_the_attacks() {
    let s = shared();
    install(&s).await;
    let node = unique("n1");
    let user = format!("system:node:{node}");
    let n1 = issue_user(&s, &user, &["system:nodes"]);
    let ip = unique_ip();
    register_node(&s, &node, &[&ip]);

    // A good serving request: approved by the policy, then issued by csrsigning.
    let good = unique("serving");
    let req = Req { cn: &user, dns: vec![node.clone(), format!("{node}.cluster.local")], ips: vec![&ip] };
    create_as(&s, &n1, &manifest(&good, &request(&req), None));
    let csr = wait_decided(&s, &good).await;
    let approved = condition(&csr, "Approved").unwrap_or_else(|| panic!("approved: {csr}"));
    assert_eq!(approved["reason"], "AutoApproved", "{csr}");
    assert_eq!(
        approved["message"], "Auto approving certificate: allowed by CertificateApprovalPolicy \"kubelet-serving\".",
        "{csr}"
    );
    assert!(condition(&csr, "Denied").is_none(), "{csr}");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["status"]["certificate"].as_str().expect("certificate"))
        .expect("base64");
    let info = kustos_ca::parse_certificate_pem(std::str::from_utf8(&pem).expect("PEM")).expect("a certificate");
    assert_eq!(info.common_name, user, "the certificate is the node's");

    // Another node's name is refused at create (NodeRestriction), before any policy.
    let other = unique("n2");
    let other_user = format!("system:node:{other}");
    let obj =
        manifest(&unique("attack"), &request(&Req { cn: &other_user, dns: vec![other.clone()], ips: vec![] }), None);
    let mut cmd = n1.command(&s, &["create", "-f", "-"]);
    let out = common::run_bounded(&mut cmd, Some(&obj.to_string()), common::KUBECTL_TIMEOUT, "kubectl create");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "another node's CSR is refused at create");
    assert!(stderr.contains(&format!("can only create a node CSR with CN={user}")), "{stderr}");

    // The attacks: each denied, naming the failed check.
    let prefix = "Denied: CertificateApprovalPolicy \"kubelet-serving\": ";
    let evil = vec!["evil.example".to_string()];
    let wildcard = vec![format!("*.{node}.cluster.local")];
    let attacks: Vec<(&str, Req, Option<i64>, String)> = vec![
        (
            "a DNS name not prefixed by the node name",
            Req { cn: &user, dns: evil, ips: vec![] },
            None,
            format!(
                "dnsNames[0] \"evil.example\" is neither the node name \"{node}\" nor \"{node}.<domain>\" (nodeDomains: \
                 cluster.local)"
            ),
        ),
        (
            "the node's name under a domain not listed",
            Req { cn: &user, dns: vec![format!("{node}.evil.example")], ips: vec![] },
            None,
            format!(
                "dnsNames[0] \"{node}.evil.example\" is neither the node name \"{node}\" nor \"{node}.<domain>\" \
                 (nodeDomains: cluster.local)"
            ),
        ),
        (
            "the apiserver's Service name",
            Req { cn: &user, dns: vec!["kubernetes.default.svc.cluster.local".into()], ips: vec![] },
            None,
            "dnsNames[0] \"kubernetes.default.svc.cluster.local\" is refused (it matches the deniedPatterns pattern \
             \"kubernetes\\\\.default(\\\\..+)?\")"
                .to_string(),
        ),
        (
            "the apiserver's Service IP",
            Req { cn: &user, dns: vec![node.clone()], ips: vec!["10.96.0.1"] },
            None,
            "ipAddresses[0] 10.96.0.1 is refused (it is in the deniedCidrs 10.96.0.0/12)".to_string(),
        ),
        (
            "a foreign IP address",
            Req { cn: &user, dns: vec![node.clone()], ips: vec!["8.8.8.8"] },
            None,
            "ipAddresses[0] 8.8.8.8 is not in 127.0.0.0/8, ::1/128, 10.0.0.0/8".to_string(),
        ),
        (
            "an address in the allowed CIDRs that the node does not publish",
            Req { cn: &user, dns: vec![node.clone()], ips: vec!["127.0.0.2"] },
            None,
            format!("ipAddresses[0] 127.0.0.2 is not among the addresses of Node \"{node}\" (status.addresses)"),
        ),
        (
            "a wildcard DNS name",
            Req { cn: &user, dns: wildcard.clone(), ips: vec![] },
            None,
            format!("dnsNames[0] \"{}\" is a wildcard", wildcard[0]),
        ),
        (
            "too long a lifetime",
            Req { cn: &user, dns: vec![node.clone()], ips: vec![] },
            Some(10 * 365 * 86400),
            "expirationSeconds 315360000 is more than the maximum 31536000".to_string(),
        ),
    ];
    // A "node" named kubernetes asks for a certificate with nothing but its CN.
    let kubernetes = issue_user(&s, "system:node:kubernetes", &["system:nodes"]);
    let attackers: Vec<&User> = attacks.iter().map(|_| &n1).chain([&kubernetes]).collect();
    let mut attacks = attacks;
    attacks.push((
        "a node named kubernetes",
        Req { cn: "system:node:kubernetes", dns: vec![], ips: vec![] },
        None,
        "node name \"kubernetes\" is refused (it matches the dnsNames.deniedPatterns pattern \"kubernetes\")"
            .to_string(),
    ));
    for ((what, req, expiration, why), attacker) in attacks.iter().zip(attackers) {
        let name = unique("attack");
        create_as(&s, attacker, &manifest(&name, &request(req), *expiration));
        let csr = wait_decided(&s, &name).await;
        let denied = condition(&csr, "Denied").unwrap_or_else(|| panic!("{what}: denied: {csr}"));
        assert_eq!(denied["reason"], "AutoDenied", "{what}: {csr}");
        assert_eq!(denied["message"], format!("{prefix}{why}."), "{what}: {csr}");
        assert!(condition(&csr, "Approved").is_none(), "{what}: {csr}");
        assert!(csr["status"]["certificate"].as_str().is_none_or(str::is_empty), "{what}: never issued: {csr}");
    }

    // A serving request from someone no policy applies to (the admin is not in
    // system:nodes) is left alone: after another full approve-and-issue round made later,
    // it is still Pending.
    let unmatched = unique("not-a-node");
    let out = s.kubectl_with_stdin(
        &["create", "-f", "-"],
        Some(
            &manifest(&unmatched, &request(&Req { cn: &user, dns: vec![node.clone()], ips: vec![] }), None).to_string(),
        ),
    );
    assert!(out.status.success(), "the admin creates a CSR: {}", String::from_utf8_lossy(&out.stderr));
    let marker = unique("serving");
    create_as(&s, &n1, &manifest(&marker, &request(&Req { cn: &user, dns: vec![node.clone()], ips: vec![] }), None));
    let csr = wait_decided(&s, &marker).await;
    assert!(condition(&csr, "Approved").is_some(), "the marker is approved: {csr}");
    let csr = send(s.http().get(format!("{}{CSRS}/{unmatched}", s.url))).await.body;
    assert!(csr["status"]["conditions"].as_array().is_none_or(Vec::is_empty), "left Pending: {csr}");

    // The policy counted both kinds.
    let want_denied = attacks.len() as i64;
    let p = wait_for(s.as_ref(), &format!("{POLICIES}/kubelet-serving"), "the counts", |p| {
        p["status"]["approved"] == 2 && p["status"]["denied"] == want_denied
    })
    .await;
    assert_eq!(p["status"]["approved"], 2, "{p}");
    let table = s.kubectl_ok(&["get", "certificateapprovalpolicies", "kubelet-serving"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(header, ["NAME", "SIGNERS", "APPROVED", "DENIED", "AGE"], "{table}");
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    let denied = want_denied.to_string();
    assert_eq!(&row[..4], ["kubelet-serving", "[\"kubernetes.io/kubelet-serving\"]", "2", denied.as_str()], "{table}");
}

/// Without the CRD the controller waits quietly: kubelet-serving CSRs stay Pending and the
/// other CSR controllers keep working; once the CRD and a policy appear, the pending CSR is
/// decided without being touched again.
#[tokio::test(flavor = "multi_thread")]
async fn pending_csrs_are_decided_once_the_crd_and_a_policy_appear() {
    let s = Server::start();
    let node = unique("n1");
    let user = format!("system:node:{node}");
    let n1 = issue_user(&s, &user, &["system:nodes"]);
    register_node(&s, &node, &[]);
    let early = unique("early");
    create_as(&s, &n1, &manifest(&early, &request(&Req { cn: &user, dns: vec![node.clone()], ips: vec![] }), None));

    // Another CSR controller path works meanwhile: an admin approval is signed.
    let admin_approved = unique("admin-approved");
    create_as(
        &s,
        &n1,
        &manifest(&admin_approved, &request(&Req { cn: &user, dns: vec![node.clone()], ips: vec![] }), None),
    );
    s.kubectl_ok(&["certificate", "approve", &admin_approved]);
    let csr = wait_decided(&s, &admin_approved).await;
    assert!(condition(&csr, "Approved").is_some(), "{csr}");
    let csr = send(s.http().get(format!("{}{CSRS}/{early}", s.url))).await.body;
    assert!(csr["status"]["conditions"].as_array().is_none_or(Vec::is_empty), "no CRD, no decision: {csr}");

    install(&s).await;
    let csr = wait_decided(&s, &early).await;
    let approved = condition(&csr, "Approved").unwrap_or_else(|| panic!("approved once the policy exists: {csr}"));
    assert_eq!(approved["reason"], "AutoApproved", "{csr}");
}

/// The same address check with the controller in `kustos controller-manager`, against an
/// apiserver that runs no controllers of its own: the controller reads and watches Nodes
/// through the API like any client, and refuses the host it reaches the apiserver at.
#[tokio::test(flavor = "multi_thread")]
async fn in_operator_mode_the_policy_refuses_an_address_the_node_does_not_publish() {
    let s = Server::start_apiserver();
    let pki = s.data_dir.join("pki");
    let _cm = common::ControllerManager::start(
        &s,
        &[
            "--leader-elect=false",
            "--controllers=csrpolicyapproving,csrsigning",
            &format!("--cluster-signing-cert-file={}", pki.join("ca.crt").display()),
            &format!("--cluster-signing-key-file={}", pki.join("ca.key").display()),
        ],
    );
    install(&s).await;
    let node = unique("n1");
    let user = format!("system:node:{node}");
    let n1 = issue_user(&s, &user, &["system:nodes"]);
    let ip = unique_ip();
    register_node(&s, &node, &[&ip, "127.0.0.1"]);

    let good = unique("serving");
    let req = Req { cn: &user, dns: vec![node.clone(), format!("{node}.cluster.local")], ips: vec![&ip] };
    create_as(&s, &n1, &manifest(&good, &request(&req), None));
    let csr = wait_decided(&s, &good).await;
    assert!(condition(&csr, "Approved").is_some(), "the node's own addresses: approved: {csr}");

    // The controller-manager reaches the apiserver at 127.0.0.1: no serving certificate names
    // it, though the node publishes it.
    let apiserver = unique("serving");
    let req = Req { cn: &user, dns: vec![node.clone()], ips: vec!["127.0.0.1"] };
    create_as(&s, &n1, &manifest(&apiserver, &request(&req), None));
    let csr = wait_decided(&s, &apiserver).await;
    let denied = condition(&csr, "Denied").unwrap_or_else(|| panic!("denied: {csr}"));
    assert_eq!(
        denied["message"],
        "Denied: CertificateApprovalPolicy \"kubelet-serving\": ipAddresses[0] 127.0.0.1 is refused (it is an \
         address of the apiserver).",
        "{csr}"
    );

    let evil = unique("serving");
    let req = Req { cn: &user, dns: vec![node.clone()], ips: vec!["127.0.0.2"] };
    create_as(&s, &n1, &manifest(&evil, &request(&req), None));
    let csr = wait_decided(&s, &evil).await;
    let denied = condition(&csr, "Denied").unwrap_or_else(|| panic!("denied: {csr}"));
    assert_eq!(
        denied["message"],
        format!(
            "Denied: CertificateApprovalPolicy \"kubelet-serving\": ipAddresses[0] 127.0.0.2 is not among the \
             addresses of Node \"{node}\" (status.addresses)."
        ),
        "{csr}"
    );

    // A node with no Node object gets nothing.
    let ghost = unique("ghost");
    let ghost_user = format!("system:node:{ghost}");
    let g = issue_user(&s, &ghost_user, &["system:nodes"]);
    let name = unique("serving");
    create_as(
        &s,
        &g,
        &manifest(&name, &request(&Req { cn: &ghost_user, dns: vec![ghost.clone()], ips: vec![] }), None),
    );
    let csr = wait_decided(&s, &name).await;
    let denied = condition(&csr, "Denied").unwrap_or_else(|| panic!("denied: {csr}"));
    assert!(
        denied["message"].as_str().is_some_and(
            |m| m.ends_with(&format!("node \"{ghost}\" has no Node object, so its addresses cannot be checked."))
        ),
        "{csr}"
    );
}

/// Register Node `node` with exactly `addresses` (type, address), as the admin.
fn register_node_with(s: &Server, node: &str, addresses: &[(&str, &str)]) {
    let addresses: Vec<Value> = addresses.iter().map(|(t, a)| json!({"type": t, "address": a})).collect();
    let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                     "status": {"addresses": addresses}});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&obj.to_string()));
    assert!(out.status.success(), "registering node {node}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Create a Service with cluster IP `ip` in `namespace`, as the admin.
fn create_service(s: &Server, namespace: &str, name: &str, ip: &str) {
    create_service_with(s, namespace, name, json!({"clusterIP": ip, "ports": [{"port": 443}]}));
}

fn create_service_with(s: &Server, namespace: &str, name: &str, spec: Value) {
    let obj = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                     "spec": spec});
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&obj.to_string()));
    assert!(out.status.success(), "creating Service {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Ask, as `user` (node `node`), for a serving certificate for `ip` until it is denied with
/// `why`: the approver's watches have then seen what was created before (a watch delivers in
/// order). Bounded: panics after 40 tries. Returns the denial's message.
async fn until_denied(s: &Server, user: &User, node: &str, ip: &str, why: &str) -> String {
    let cn = format!("system:node:{node}");
    for _ in 0..40 {
        let name = unique("canary");
        let req = Req { cn: &cn, dns: vec![node.to_string()], ips: vec![ip] };
        create_as(s, user, &manifest(&name, &request(&req), None));
        let csr = wait_decided(s, &name).await;
        if let Some(denied) = condition(&csr, "Denied") {
            let message = denied["message"].as_str().unwrap_or_default().to_string();
            assert!(message.contains(why), "denied for {why:?}: {csr}");
            return message;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("a serving certificate for {ip} was never denied for {why:?}");
}

/// A compromised node writes its neighbour's, the apiserver's and a Service's addresses into
/// its own `status.addresses`: the policy still refuses each, whatever form the address takes.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_gets_no_certificate_for_an_address_of_a_neighbour_the_apiserver_or_a_service() {
    let s = Server::start();
    install(&s).await;
    let ns = s.create_namespace("svc").await;
    let (node, neighbour, canary) = (unique("n1"), unique("n2"), unique("n3"));
    let user = format!("system:node:{node}");
    let n1 = issue_user(&s, &user, &["system:nodes"]);
    let (own_ip, neighbour_ip, service_ip, canary_ip, canary_service_ip) =
        (unique_ip(), unique_ip(), unique_ip(), unique_ip(), unique_ip());
    let external_ip = unique_ip();
    register_node_with(&s, &neighbour, &[("Hostname", &neighbour), ("InternalIP", &neighbour_ip)]);
    create_service(&s, &ns, "web", &service_ip);
    create_service_with(&s, &ns, "front", json!({"externalIPs": [external_ip], "ports": [{"port": 443}]}));
    // What n1 publishes: its own address and everything it wants a certificate for.
    register_node_with(
        &s,
        &node,
        &[
            ("Hostname", &node),
            ("InternalIP", &own_ip),
            ("InternalIP", &format!("::ffff:{neighbour_ip}")),
            ("InternalIP", "127.0.0.1"),
            ("InternalIP", "0:0:0:0:0:0:0:1"),
            ("InternalIP", &service_ip),
            ("InternalIP", &external_ip),
            ("InternalIP", &canary_ip),
            ("InternalIP", &canary_service_ip),
        ],
    );
    // Made last, each seen by the approver only after what came before it on its watch.
    register_node_with(&s, &canary, &[("InternalIP", &canary_ip)]);
    create_service(&s, &ns, "canary", &canary_service_ip);
    until_denied(&s, &n1, &node, &canary_ip, "another Node publishes it").await;
    until_denied(&s, &n1, &node, &canary_service_ip, &format!("Service {ns}/canary")).await;

    let prefix = "Denied: CertificateApprovalPolicy \"kubelet-serving\": ";
    let attacks: Vec<(&str, Vec<String>, Vec<&str>, String)> = vec![
        (
            "the neighbour's IP",
            vec![],
            vec![&neighbour_ip],
            format!("ipAddresses[0] {neighbour_ip} is refused (another Node publishes it in status.addresses)"),
        ),
        (
            "the apiserver's address",
            vec![],
            vec!["127.0.0.1"],
            "ipAddresses[0] 127.0.0.1 is refused (it is an address of the apiserver)".into(),
        ),
        (
            "the apiserver's IPv6 loopback",
            vec![],
            vec!["::1"],
            "ipAddresses[0] ::1 is refused (it is an address of the apiserver)".into(),
        ),
        (
            "a Service's cluster IP",
            vec![],
            vec![&service_ip],
            format!("ipAddresses[0] {service_ip} is refused (it is an IP of Service {ns}/web)"),
        ),
        (
            "a Service's external IP",
            vec![],
            vec![&external_ip],
            format!("ipAddresses[0] {external_ip} is refused (it is an IP of Service {ns}/front)"),
        ),
    ];
    for (what, dns, ips, why) in attacks {
        let name = unique("attack");
        let dns = if dns.is_empty() { vec![node.clone()] } else { dns };
        create_as(&s, &n1, &manifest(&name, &request(&Req { cn: &user, dns, ips }), None));
        let csr = wait_decided(&s, &name).await;
        let denied = condition(&csr, "Denied").unwrap_or_else(|| panic!("{what}: denied: {csr}"));
        assert_eq!(denied["message"], format!("{prefix}{why}."), "{what}: {csr}");
        assert!(csr["status"]["certificate"].as_str().is_none_or(str::is_empty), "{what}: never issued: {csr}");
    }

    // Its own address is still its own.
    let good = unique("serving");
    create_as(
        &s,
        &n1,
        &manifest(&good, &request(&Req { cn: &user, dns: vec![node.clone()], ips: vec![&own_ip] }), None),
    );
    let csr = wait_decided(&s, &good).await;
    assert!(condition(&csr, "Approved").is_some(), "its own address: approved: {csr}");
}
