//! The cluster's addresses as the approver sees them, kept from watches through the API:
//! every Node's `status.addresses`, every Service's cluster IPs, and the apiserver's own
//! addresses: those the process was given ([`crate::Config::apiserver_addresses`]: `kustos
//! server`'s bind address and serving certificate SANs, the host `kustos controller-manager`
//! reaches the apiserver at) and, against a kube-apiserver, the endpoints of the EndpointSlices
//! of Service `default/kubernetes`.
//!
//! In: watch events. Out: the [`Index`]es, handed to the decision by [`Book::read`] once every
//! watch has listed once ([`Book::ready`]); until then a kubelet serving CSR stays pending, and
//! the first complete lists re-decide every CSR. A watch that fails (403 without the RBAC to
//! list and watch) is logged and retried with backoff, and what it last listed stays in use.
//! EndpointSlices that the apiserver does not serve (404, as `kustos apiserver`) count as none.

use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;

use super::addresses::{node_addresses, Address, Index, APISERVER};
use super::NAME;

/// Which watch an index comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Nodes,
    Services,
    EndpointSlices,
}

#[derive(Debug, Default)]
struct Parts {
    nodes: Index,
    services: Index,
    endpoint_slices: Index,
    /// The addresses the process was given.
    apiserver: Index,
    /// Which watches have listed once (in [`Part`] order).
    listed: [bool; 3],
}

impl Parts {
    fn index(&mut self, part: Part) -> &mut Index {
        match part {
            Part::Nodes => &mut self.nodes,
            Part::Services => &mut self.services,
            Part::EndpointSlices => &mut self.endpoint_slices,
        }
    }
}

/// What the watches keep (see the module doc).
#[derive(Debug)]
pub struct Book {
    parts: RwLock<Parts>,
}

impl Book {
    /// A book knowing `apiserver` (IP addresses or DNS names) as the apiserver's own.
    pub fn new(apiserver: &[String]) -> Self {
        let mut parts = Parts::default();
        parts.apiserver.set(APISERVER, apiserver.iter().filter_map(|a| Address::parse(a)));
        Book { parts: RwLock::new(parts) }
    }

    /// Whether every watch has listed once.
    pub fn ready(&self) -> bool {
        self.parts.read().unwrap_or_else(|e| e.into_inner()).listed.iter().all(|l| *l)
    }

    /// Call `f` with every Node's addresses (by node name) and the protected ones (the
    /// apiserver's, the Services' cluster IPs), as last watched.
    pub fn read<R>(&self, f: impl FnOnce(&Index, &[&Index]) -> R) -> R {
        let p = self.parts.read().unwrap_or_else(|e| e.into_inner());
        f(&p.nodes, &[&p.apiserver, &p.endpoint_slices, &p.services])
    }

    /// A complete list of `part`; true when it makes the book ready.
    fn listed(&self, part: Part, index: Index) -> bool {
        let mut p = self.parts.write().unwrap_or_else(|e| e.into_inner());
        let before = p.listed.iter().all(|l| *l);
        *p.index(part) = index;
        p.listed[part as usize] = true;
        !before && p.listed.iter().all(|l| *l)
    }

    fn update(&self, part: Part, f: impl FnOnce(&mut Index)) {
        f(self.parts.write().unwrap_or_else(|e| e.into_inner()).index(part))
    }
}

#[cfg(test)]
impl Book {
    /// A book whose watches have listed: `nodes` and no Service or EndpointSlice.
    pub(crate) fn listed_with(nodes: Index) -> Self {
        let book = Book::new(&[]);
        book.listed(Part::Nodes, nodes);
        book.listed(Part::Services, Index::default());
        book.listed(Part::EndpointSlices, Index::default());
        book
    }
}

/// What a Node publishes, under its name.
fn of_node(node: &Node) -> (String, Vec<Address>) {
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
    (node.name_any(), node_addresses(addresses).collect())
}

/// A Service's IPs: its cluster IPs, its `externalIPs` and its load balancers' ingress IPs
/// (traffic to any of them reaches the Service), under "an IP of Service <namespace>/<name>".
fn of_service(svc: &Service) -> (String, Vec<Address>) {
    let spec = svc.spec.as_ref();
    fn strings(v: Option<&Vec<String>>) -> impl Iterator<Item = &str> {
        v.map(Vec::as_slice).unwrap_or_default().iter().map(String::as_str)
    }
    let ingress = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.as_deref());
    let ips = spec
        .and_then(|s| s.cluster_ip.as_deref())
        .into_iter()
        .chain(strings(spec.and_then(|s| s.cluster_ips.as_ref())))
        .chain(strings(spec.and_then(|s| s.external_ips.as_ref())))
        .chain(ingress.unwrap_or_default().iter().filter_map(|i| i.ip.as_deref()));
    let owner = format!("an IP of Service {}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
    (owner, ips.filter_map(Address::parse).collect())
}

/// The endpoints of an EndpointSlice of `default/kubernetes`: the apiserver's hosts.
fn of_endpoint_slice(slice: &EndpointSlice) -> (String, Vec<Address>) {
    let owner = format!("{APISERVER} (EndpointSlice {}/{})", slice.namespace().unwrap_or_default(), slice.name_any());
    let addresses = slice.endpoints.iter().flatten().flat_map(|e| e.addresses.iter()).filter_map(|a| Address::parse(a));
    (owner, addresses.collect())
}

/// Keep `book`'s indexes from watches until the task is dropped; `ready` fires once when the
/// book first becomes ready.
pub async fn run(client: Client, book: Arc<Book>, ready: futures::channel::mpsc::Sender<()>) {
    let slices = watcher::Config::default().labels("kubernetes.io/service-name=kubernetes");
    tokio::join!(
        keep(Api::<Node>::all(client.clone()), watcher::Config::default(), Part::Nodes, of_node, &book, &ready),
        keep(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
            Part::Services,
            of_service,
            &book,
            &ready
        ),
        keep(
            Api::<EndpointSlice>::namespaced(client, "default"),
            slices,
            Part::EndpointSlices,
            of_endpoint_slice,
            &book,
            &ready
        ),
    );
}

async fn keep<K>(
    api: Api<K>,
    config: watcher::Config,
    part: Part,
    addresses_of: fn(&K) -> (String, Vec<Address>),
    book: &Book,
    ready: &futures::channel::mpsc::Sender<()>,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stream = crate::runtime::watch(api, config);
    futures::pin_mut!(stream);
    // A relist builds a fresh index, swapped in when complete: what was deleted meanwhile goes.
    let mut relist: Option<Index> = None;
    let mut warned = false;
    let done = |index: Index| {
        if book.listed(part, index) {
            tracing::info!(controller = NAME, "Nodes, Services and EndpointSlices listed; deciding serving CSRs");
            let _ = ready.clone().try_send(());
        }
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Err(e) if part == Part::EndpointSlices && super::is_not_found(&e) => {
                tracing::debug!(controller = NAME, "EndpointSlices are not served: the apiserver publishes none");
                done(Index::default());
                return;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(
                        controller = NAME,
                        watch = ?part,
                        error = %e,
                        "cannot list and watch (needs list and watch on nodes, services and, in namespace default, \
                         endpointslices); kubelet serving CSRs stay pending until it can"
                    );
                    warned = true;
                }
            }
            Ok(watcher::Event::Init) => relist = Some(Index::default()),
            Ok(watcher::Event::InitApply(obj)) => {
                let (owner, addresses) = addresses_of(&obj);
                relist.get_or_insert_with(Index::default).set(&owner, addresses);
            }
            Ok(watcher::Event::InitDone) => {
                done(relist.take().unwrap_or_default());
                warned = false;
            }
            Ok(watcher::Event::Apply(obj)) => {
                let (owner, addresses) = addresses_of(&obj);
                book.update(part, |ix| ix.set(&owner, addresses));
            }
            Ok(watcher::Event::Delete(obj)) => {
                let (owner, _) = addresses_of(&obj);
                book.update(part, |ix| ix.remove(&owner));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus, ServiceSpec};
    use k8s_openapi::api::discovery::v1::Endpoint;
    use kube::api::ObjectMeta;

    #[test]
    fn what_each_kind_publishes() {
        let node = Node {
            metadata: ObjectMeta { name: Some("n1".into()), ..Default::default() },
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress { type_: "InternalIP".into(), address: "::ffff:10.0.0.5".into() },
                    NodeAddress { type_: "Hostname".into(), address: "N1.".into() },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(of_node(&node), ("n1".into(), vec![Address::parse("10.0.0.5").unwrap(), Address::dns("n1")]));
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("kubernetes".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("10.96.0.1".into()),
                cluster_ips: Some(vec!["10.96.0.1".into(), "fd00::1".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (owner, mut addrs) = of_service(&svc);
        addrs.dedup();
        assert_eq!(owner, "an IP of Service default/kubernetes");
        assert_eq!(addrs, [Address::parse("10.96.0.1").unwrap(), Address::parse("fd00::1").unwrap()]);
        let headless =
            Service { spec: Some(ServiceSpec { cluster_ip: Some("None".into()), ..Default::default() }), ..svc };
        assert!(of_service(&headless).1.is_empty(), "a headless Service has no cluster IP");
        let exposed: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "front", "namespace": "web"},
            "spec": {"clusterIP": "None", "externalIPs": ["192.0.2.7"]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.9"}, {"hostname": "lb.example.com"}]}}}))
        .unwrap();
        assert_eq!(
            of_service(&exposed).1,
            [Address::parse("192.0.2.7").unwrap(), Address::parse("198.51.100.9").unwrap()],
            "external IPs and load-balancer ingress IPs are the Service's too"
        );
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some("kubernetes".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(vec![Endpoint { addresses: vec!["192.0.2.10".into()], ..Default::default() }]),
            ports: None,
        };
        assert_eq!(
            of_endpoint_slice(&slice),
            (
                "an address of the apiserver (EndpointSlice default/kubernetes)".into(),
                vec![Address::parse("192.0.2.10").unwrap()]
            )
        );
    }

    #[test]
    fn the_book_is_ready_once_every_watch_listed() {
        let book = Book::new(&["127.0.0.1".into(), "[::1]".into(), "localhost".into()]);
        assert!(!book.ready());
        let mut nodes = Index::default();
        nodes.set("n1", [Address::dns("n1")]);
        assert!(!book.listed(Part::Nodes, nodes), "not yet");
        assert!(!book.listed(Part::Services, Index::default()), "not yet");
        assert!(book.listed(Part::EndpointSlices, Index::default()), "now ready");
        assert!(!book.listed(Part::Nodes, Index::default()), "ready only once");
        assert!(book.ready());
        book.update(Part::Nodes, |ix| ix.set("n2", [Address::dns("n2")]));
        book.read(|nodes, protected| {
            assert_eq!(nodes.owners(&Address::dns("n2")).collect::<Vec<_>>(), ["n2"]);
            assert_eq!(nodes.owners(&Address::dns("n1")).count(), 0, "the relist dropped n1");
            let loopback = Address::parse("0:0:0:0:0:0:0:1").unwrap();
            assert_eq!(protected[0].owners(&loopback).collect::<Vec<_>>(), [APISERVER]);
        });
    }
}
