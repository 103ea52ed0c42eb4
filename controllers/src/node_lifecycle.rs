//! `nodelifecycle`: marks a node whose kubelet stopped reporting as `Unknown`, as upstream's
//! node lifecycle controller does for a node's health (its Ready condition), and nothing
//! else: no taints, no evictions (kustos runs no scheduler and no pods).
//!
//! A kubelet proves it is alive two ways: its Node's `Ready` condition gets a new
//! `lastHeartbeatTime` (every status update), and its Lease `kube-node-lease/<node>` gets a
//! later `spec.renewTime` (every 10 s by default). The controller never compares those times
//! with its own clock (the node's clock may be off): it remembers, per node, when *it* last
//! saw either change (the probe time). Every `--node-monitor-period` it looks at every node:
//! - a node that has posted status and not been seen alive for `--node-monitor-grace-period`
//!   (upstream's default since 1.32: 50 s) gets its `Ready`, `MemoryPressure`,
//!   `DiskPressure` and `PIDPressure` conditions set to `Unknown` (reason
//!   `NodeStatusUnknown`, "Kubelet stopped posting node status."; `lastTransitionTime` now,
//!   `lastHeartbeatTime` kept), each one that is not `Unknown` already;
//! - a node that never posted a `Ready` condition counts from its creation and gets
//!   `--node-startup-grace-period` (1 m): then the missing conditions are added as `Unknown`
//!   with reason `NodeStatusNeverUpdated`, "Kubelet never posted node status.".
//!
//! A node seen for the first time counts as seen alive now, so a restart of the controller
//! marks nothing early. The write is a status update with the read resourceVersion: a
//! Conflict (the kubelet reported meanwhile) is left for the next look, which sees the news.
//! The kubelet's next status update sets its conditions back.
//!
//! On by default in `kustos server`; off by default in `kustos controller-manager`, where
//! upstream's kube-controller-manager usually runs its own (which also taints and evicts).
//! Enabled there, it needs `list`/`watch` on nodes and on leases in `kube-node-lease`, and
//! `update` on `nodes/status`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Client, ResourceExt as _};

use crate::runtime::{is_status, whole_world_until};

pub const NAME: &str = "nodelifecycle";
/// Where the nodes' heartbeat Leases live (named after their nodes).
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The conditions a silent node's are set to `Unknown`, in upstream's order.
const CONDITION_TYPES: &[&str] = &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];
const UNKNOWN: &str = "Unknown";
const REASON_STOPPED: &str = "NodeStatusUnknown";
const MESSAGE_STOPPED: &str = "Kubelet stopped posting node status.";
const REASON_NEVER: &str = "NodeStatusNeverUpdated";
const MESSAGE_NEVER: &str = "Kubelet never posted node status.";

/// `--node-monitor-period`, `--node-monitor-grace-period`, `--node-startup-grace-period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub monitor_period: Duration,
    pub grace_period: Duration,
    pub startup_grace_period: Duration,
}

impl Default for Timing {
    /// Upstream's defaults (kube-controller-manager 1.32 and later).
    fn default() -> Self {
        Timing {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(50),
            startup_grace_period: Duration::from_secs(60),
        }
    }
}

/// What the controller remembers of a node between looks.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The `Ready` condition's `lastHeartbeatTime` last seen.
    heartbeat: Option<Time>,
    /// The Lease's `spec.renewTime` last seen.
    renew: Option<MicroTime>,
    /// When (by this controller's clock) the node was last seen alive.
    probed_at: Timestamp,
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// What is remembered of `node` after looking at it (and its Lease) at `now`: the probe time
/// moves to `now` on first sight, on a new `Ready` heartbeat, or on a later Lease renewal.
pub fn observe(before: Option<&Seen>, node: &Node, lease: Option<&Lease>, now: Timestamp) -> Seen {
    let heartbeat = condition(node, "Ready").and_then(|c| c.last_heartbeat_time.clone());
    let renew = lease.and_then(|l| l.spec.as_ref()).and_then(|s| s.renew_time.clone());
    let Some(before) = before else { return Seen { heartbeat, renew, probed_at: now } };
    let renewed = match (&before.renew, &renew) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(old), Some(new)) => new.0 > old.0,
    };
    let probed_at = if heartbeat != before.heartbeat || renewed { now } else { before.probed_at };
    // A renewal time that went backwards (a re-created Lease) is remembered, so the next
    // real renewal counts.
    Seen { heartbeat, renew, probed_at }
}

/// The conditions `node` should have at `now` when they differ from what it has: `None`
/// while the node is within its grace period, or already marked.
pub fn decide(node: &Node, seen: &Seen, timing: &Timing, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let posted = condition(node, "Ready").is_some();
    let (since, grace) = if posted {
        (seen.probed_at, timing.grace_period)
    } else {
        // Never posted: counted from the node's creation (the first sight when unknown).
        let created = node.metadata.creation_timestamp.as_ref().map_or(seen.probed_at, |t| t.0);
        (created, timing.startup_grace_period)
    };
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    if now <= since.checked_add(grace).unwrap_or(Timestamp::MAX) {
        return None;
    }
    let mut conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let before = conditions.clone();
    for type_ in CONDITION_TYPES {
        match conditions.iter_mut().find(|c| c.type_ == *type_) {
            None => conditions.push(NodeCondition {
                type_: (*type_).into(),
                status: UNKNOWN.into(),
                reason: Some(REASON_NEVER.into()),
                message: Some(MESSAGE_NEVER.into()),
                last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                last_transition_time: Some(Time(now)),
            }),
            Some(c) if c.status != UNKNOWN => {
                c.status = UNKNOWN.into();
                c.reason = Some(REASON_STOPPED.into());
                c.message = Some(MESSAGE_STOPPED.into());
                c.last_transition_time = Some(Time(now));
            }
            Some(_) => {}
        }
    }
    (conditions != before).then_some(conditions)
}

struct Context {
    nodes: Api<Node>,
    node_store: Store<Node>,
    lease_store: Store<Lease>,
    seen: Mutex<HashMap<String, Seen>>,
    timing: Timing,
}

/// One look at every node: remember what changed, mark the silent ones.
async fn sync(ctx: Arc<Context>) -> anyhow::Result<Option<Duration>> {
    let now = Timestamp::now();
    let nodes = ctx.node_store.state();
    let mut marks = Vec::new();
    {
        let mut seen = ctx.seen.lock().map_err(|_| anyhow::anyhow!("the node health map is poisoned"))?;
        let names: std::collections::HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
        seen.retain(|name, _| names.contains(name));
        for node in &nodes {
            let name = node.name_any();
            let lease = ctx.lease_store.get(&reflector::ObjectRef::new(&name).within(NODE_LEASE_NAMESPACE));
            let now_seen = observe(seen.get(&name), node, lease.as_deref(), now);
            if let Some(conditions) = decide(node, &now_seen, &ctx.timing, now) {
                marks.push((node.clone(), conditions));
            }
            seen.insert(name, now_seen);
        }
    }
    for (node, conditions) in marks {
        let name = node.name_any();
        let mut next = (*node).clone();
        next.status.get_or_insert_with(Default::default).conditions = Some(conditions);
        match ctx.nodes.replace_status(&name, &PostParams::default(), &next).await {
            Ok(_) => tracing::info!(controller = NAME, node = %name, "node stopped posting status: marked Unknown"),
            // The kubelet (or someone) wrote meanwhile, or the node is gone: the next look sees it.
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("marking node {name} Unknown"))),
        }
    }
    Ok(Some(ctx.timing.monitor_period))
}

/// Watch nodes and node Leases into `ctx`'s stores and look at every node each
/// `--node-monitor-period`, until the future is dropped.
pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, NODE_LEASE_NAMESPACE);
    let (node_store, node_writer) = reflector::store();
    let (lease_store, lease_writer) = reflector::store();
    let node_feed = crate::runtime::watch(nodes.clone(), watcher::Config::default())
        .modify(crate::runtime::trim_managed_fields)
        .reflect(node_writer);
    let lease_feed = crate::runtime::watch(leases, watcher::Config::default())
        .modify(crate::runtime::trim_managed_fields)
        .reflect(lease_writer);
    let feeds = async move {
        let nodes = node_feed.for_each(|_| std::future::ready(()));
        let leases = lease_feed.for_each(|_| std::future::ready(()));
        tokio::join!(nodes, leases);
    };
    let timing = cfg.node_lifecycle;
    let ctx = Arc::new(Context { nodes, node_store, lease_store, seen: Mutex::new(HashMap::new()), timing });
    let looks =
        whole_world_until(NAME, Vec::new(), timing.monitor_period, cfg.metrics.clone(), move || sync(ctx.clone()));
    let ((), res) = tokio::join!(feeds, looks);
    res
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::NodeStatus;
    use kube::api::ObjectMeta;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn cond(type_: &str, status: &str, heartbeat: i64) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(Time(t(heartbeat))),
            last_transition_time: Some(Time(t(0))),
        }
    }

    /// Node n1, created at t(0), with `conditions` (`None`: no status at all).
    fn node(conditions: Option<Vec<NodeCondition>>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                creation_timestamp: Some(Time(t(0))),
                ..Default::default()
            },
            status: conditions.map(|c| NodeStatus { conditions: Some(c), ..Default::default() }),
            ..Default::default()
        }
    }

    fn ready(heartbeat: i64) -> Node {
        node(Some(vec![
            cond("MemoryPressure", "False", heartbeat),
            cond("DiskPressure", "False", heartbeat),
            cond("PIDPressure", "False", heartbeat),
            cond("Ready", "True", heartbeat),
        ]))
    }

    fn lease(renew: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec { renew_time: Some(MicroTime(t(renew))), ..Default::default() }),
        }
    }

    #[test]
    fn the_probe_time_moves_only_when_the_node_shows_life() {
        let first = observe(None, &ready(10), Some(&lease(10)), t(100));
        assert_eq!(first.probed_at, t(100), "first sight counts as alive now, whatever the node's clock says");
        // name, node, lease, wanted probe time (looked at t(200))
        let cases: Vec<(&str, Node, Option<Lease>, Timestamp)> = vec![
            ("nothing changed", ready(10), Some(lease(10)), t(100)),
            ("a new status heartbeat", ready(20), Some(lease(10)), t(200)),
            ("a heartbeat with an older time still differs", ready(5), Some(lease(10)), t(200)),
            ("a later lease renewal", ready(10), Some(lease(11)), t(200)),
            ("an earlier renewal (a re-created lease) is not life", ready(10), Some(lease(9)), t(100)),
            ("the lease is gone", ready(10), None, t(100)),
        ];
        for (name, n, l, want) in cases {
            assert_eq!(observe(Some(&first), &n, l.as_ref(), t(200)).probed_at, want, "{name}");
        }
        let no_lease = observe(None, &ready(10), None, t(100));
        assert_eq!(
            observe(Some(&no_lease), &ready(10), Some(&lease(1)), t(200)).probed_at,
            t(200),
            "a lease appearing"
        );
    }

    #[test]
    fn a_silent_node_is_marked_unknown_after_its_grace_period() {
        let timing = Timing::default();
        let seen_at = |probed: i64| Seen { heartbeat: None, renew: None, probed_at: t(probed) };
        let stopped = |type_: &str| NodeCondition {
            type_: type_.into(),
            status: "Unknown".into(),
            reason: Some("NodeStatusUnknown".into()),
            message: Some("Kubelet stopped posting node status.".into()),
            last_heartbeat_time: Some(Time(t(10))),
            last_transition_time: Some(Time(t(200))),
        };
        let never = |type_: &str| NodeCondition {
            type_: type_.into(),
            status: "Unknown".into(),
            reason: Some("NodeStatusNeverUpdated".into()),
            message: Some("Kubelet never posted node status.".into()),
            last_heartbeat_time: Some(Time(t(0))),
            last_transition_time: Some(Time(t(200))),
        };
        let marked = vec![stopped("MemoryPressure"), stopped("DiskPressure"), stopped("PIDPressure"), stopped("Ready")];
        let mut earlier = stopped("Ready");
        earlier.last_transition_time = Some(Time(t(150)));
        let mut half_marked = ready(10);
        half_marked.status.as_mut().unwrap().conditions.as_mut().unwrap()[3] = earlier.clone();
        let mut marked_earlier = marked.clone();
        marked_earlier[3] = earlier;
        let mut only_ready = node(Some(vec![cond("Ready", "True", 10)]));
        only_ready.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        // name, node, last seen alive, now, wanted conditions
        type Case = (&'static str, Node, i64, i64, Option<Vec<NodeCondition>>);
        let cases: Vec<Case> = vec![
            ("seen 40 s ago: within 50 s", ready(10), 160, 200, None),
            ("seen exactly 50 s ago: still within", ready(10), 150, 200, None),
            ("seen 51 s ago: every condition Unknown", ready(10), 149, 200, Some(marked.clone())),
            ("already marked: nothing to write", node(Some(marked.clone())), 0, 200, None),
            (
                "partly marked: the rest follows, the marked one keeps its transition",
                half_marked,
                0,
                200,
                Some(marked_earlier),
            ),
            (
                "NotReady posted: Ready too becomes Unknown; missing pressure conditions are added as never posted",
                only_ready,
                0,
                200,
                Some(vec![stopped("Ready"), never("MemoryPressure"), never("DiskPressure"), never("PIDPressure")]),
            ),
            ("never posted, created 60 s ago: startup grace", node(None), 200, 60, None),
            (
                "never posted, created 200 s ago: conditions added as never posted",
                node(None),
                200,
                200,
                Some(vec![never("Ready"), never("MemoryPressure"), never("DiskPressure"), never("PIDPressure")]),
            ),
        ];
        for (name, n, probed, now, want) in cases {
            assert_eq!(decide(&n, &seen_at(probed), &timing, t(now)), want, "{name}");
        }
    }

    #[test]
    fn a_node_that_keeps_renewing_its_lease_is_never_marked() {
        // Status posted once at t(10); the lease renewed every 10 s for ten minutes.
        let timing = Timing::default();
        let n = ready(10);
        let mut seen = observe(None, &n, Some(&lease(10)), t(10));
        for step in 1..=60 {
            let now = t(10 + step * 10);
            seen = observe(Some(&seen), &n, Some(&lease(10 + step * 10)), now);
            assert_eq!(decide(&n, &seen, &timing, now), None, "renewed at step {step}");
        }
        // Then the renewals stop: marked once the grace period has passed, not before.
        let last = 10 + 60 * 10;
        assert_eq!(decide(&n, &seen, &timing, t(last + 50)), None, "within the grace period");
        assert!(decide(&n, &seen, &timing, t(last + 51)).is_some(), "after it");
    }
}
