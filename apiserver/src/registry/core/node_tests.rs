//! Tests of [`super::NodeStrategy`]: validation, the status/spec split, the Table.
#![allow(clippy::unwrap_used)]
use super::*;
use crate::registry::core::test_util::*;

fn base() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "n1", "creationTimestamp": "2024-05-01T11:00:00Z",
                        "labels": {"kubernetes.io/hostname": "n1"}},
           "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "providerID": "kind://n1"},
           "status": {
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
               "addresses": [{"type": "InternalIP", "address": "192.168.1.10"},
                             {"type": "Hostname", "address": "n1"}],
               "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian GNU/Linux 12 (bookworm)",
                            "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.13",
                            "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
                            "operatingSystem": "linux", "architecture": "amd64"}}})
}

#[test]
fn cidr_problems_are_upstreams() {
    let cases: &[(&str, &[&str])] = &[
        ("10.244.0.0/16", &[]),
        ("fd00:10:244::/64", &[]),
        ("10.244.1.5/24", &["must not have bits set beyond the prefix length"]),
        ("010.244.0.0/16", &["must not have leading 0s in IP or prefix length"]),
        ("10.244.0.0/016", &["must not have leading 0s in IP or prefix length"]),
        ("::ffff:10.0.0.0/120", &["must not have an IPv4-mapped IPv6 address"]),
        ("FD00::/64", &["must be in canonical form (\"fd00::/64\")"]),
        ("10.244.0.0", &["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]),
        ("10.244.0.0/33", &["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]),
        ("nonsense/8", &["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]),
        ("", &["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]),
    ];
    for (value, want) in cases {
        assert_eq!(cidr_problems(value), *want, "{value}");
    }
}

#[test]
fn node_validation() {
    let dup_taint = "metadata.taints[1]: Duplicate value: core.Taint{Key:\"k\", Value:\"b\", Effect:\"NoSchedule\", \
                     TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair";
    let cases: &[(&str, Mutation, &[&str])] = &[
        ("valid", |_| {}, &[]),
        ("no spec, no status", |o| { o.as_object_mut().unwrap().retain(|k, _| k == "metadata"); }, &[]),
        ("taints", |o| set(o, &["spec", "taints"], json!([
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}])), &[]),
        ("taint key", |o| set(o, &["spec", "taints"], json!([{"key": "a b", "effect": "NoSchedule"}])),
         &["metadata.taints[0].key: Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]),
        ("taint value", |o| set(o, &["spec", "taints"], json!([{"key": "a", "value": "x y", "effect": "NoSchedule"}])),
         &["metadata.taints[0].value: Invalid value: \"x y\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]),
        ("taint without effect", |o| set(o, &["spec", "taints"], json!([{"key": "a"}])),
         &["metadata.taints[0].effect: Required value"]),
        ("taint effect", |o| set(o, &["spec", "taints"], json!([{"key": "a", "effect": "Never"}])),
         &["metadata.taints[0].effect: Unsupported value: \"Never\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""]),
        ("duplicate taint", |o| set(o, &["spec", "taints"], json!([
            {"key": "k", "value": "a", "effect": "NoSchedule"}, {"key": "k", "value": "b", "effect": "NoSchedule"}])),
         &[dup_taint]),
        ("bad pod CIDR", |o| set(o, &["spec", "podCIDRs"], json!(["10.244.1.1/24"])),
         &["spec.podCIDRs[0]: Invalid value: \"10.244.1.1/24\": must not have bits set beyond the prefix length"]),
        ("dual stack", |o| set(o, &["spec", "podCIDRs"], json!(["10.244.1.0/24", "fd00::/64"])), &[]),
        ("two of one family", |o| set(o, &["spec", "podCIDRs"], json!(["10.244.1.0/24", "10.245.1.0/24"])),
         &["spec.podCIDRs: Invalid value: []string{\"10.244.1.0/24\", \"10.245.1.0/24\"}: may specify no more than one CIDR for each IP family"]),
        ("duplicate pod CIDR", |o| set(o, &["spec", "podCIDRs"], json!(["10.244.1.0/24", "10.244.1.0/24"])),
         &["spec.podCIDRs: Invalid value: []string{\"10.244.1.0/24\", \"10.244.1.0/24\"}: may specify no more than one CIDR for each IP family",
           "spec.podCIDRs[1]: Duplicate value: \"10.244.1.0/24\""]),
    ];
    for (name, mutate, want) in cases {
        let mut obj = base();
        mutate(&mut obj);
        assert_eq!(rendered(&NodeStrategy.validate(&obj)), *want, "{name}");
    }
}

#[test]
fn node_update_validation() {
    let cidr = "spec.podCIDRs: Forbidden: node updates may not change podCIDR except from \"\" to valid";
    let cases: &[(&str, Mutation, Mutation, &[&str])] = &[
        ("nothing changes", |_| {}, |_| {}, &[]),
        (
            "labels, taints and unschedulable change",
            |_| {},
            |o| {
                set(o, &["metadata", "labels"], json!({"a": "b"}));
                set(o, &["spec", "taints"], json!([{"key": "a", "effect": "NoSchedule"}]));
                set(o, &["spec", "unschedulable"], json!(true));
            },
            &[],
        ),
        (
            "pod CIDR set once",
            |o| {
                o["spec"].as_object_mut().unwrap().clear();
            },
            |o| set(o, &["spec", "podCIDRs"], json!(["10.244.2.0/24"])),
            &[],
        ),
        ("pod CIDR changed", |_| {}, |o| set(o, &["spec", "podCIDRs"], json!(["10.244.2.0/24"])), &[cidr]),
        ("pod CIDR added", |_| {}, |o| set(o, &["spec", "podCIDRs"], json!(["10.244.1.0/24", "fd00::/64"])), &[cidr]),
        (
            "provider ID set once",
            |o| {
                o["spec"].as_object_mut().unwrap().remove("providerID");
            },
            |_| {},
            &[],
        ),
        (
            "provider ID changed",
            |_| {},
            |o| set(o, &["spec", "providerID"], json!("kind://n2")),
            &["spec.providerID: Forbidden: node updates may not change providerID except from \"\" to valid"],
        ),
        (
            "external ID",
            |_| {},
            |o| set(o, &["spec", "externalID"], json!("x")),
            &["spec.externalID: Forbidden: may not be updated"],
        ),
        (
            "duplicate address",
            |_| {},
            |o| {
                set(
                    o,
                    &["status", "addresses"],
                    json!([
            {"type": "InternalIP", "address": "10.0.0.1"}, {"type": "InternalIP", "address": "10.0.0.2"},
            {"type": "InternalIP", "address": "10.0.0.1"}]),
                )
            },
            &["status.addresses[2]: Duplicate value: core.NodeAddress{Type:\"InternalIP\", Address:\"10.0.0.1\"}"],
        ),
    ];
    for (name, old_mutate, new_mutate, want) in cases {
        let mut old = base();
        old_mutate(&mut old);
        let mut new = old.clone();
        new_mutate(&mut new);
        assert_eq!(rendered(&NodeStrategy.validate_update(&new, &old)), *want, "{name}");
        assert_eq!(rendered(&NodeStrategy.validate_subresource("status", &new, &old)), *want, "{name} (status)");
    }
}

#[test]
fn main_resource_keeps_status_and_status_keeps_spec() {
    let old = base();
    let mut new = base();
    set(&mut new, &["spec", "unschedulable"], json!(true));
    set(&mut new, &["status", "conditions"], json!([{"type": "Ready", "status": "False"}]));
    NodeStrategy.prepare_for_update(&mut new, &old);
    assert_eq!(new["spec"]["unschedulable"], true, "update changes spec");
    assert_eq!(new["status"], old["status"], "update keeps status");

    let mut new = base();
    set(&mut new, &["spec", "unschedulable"], json!(true));
    set(&mut new, &["status", "conditions"], json!([{"type": "Ready", "status": "False"}]));
    set(&mut new, &["metadata", "labels"], json!({"kubernetes.io/hostname": "n1", "x": "y"}));
    NodeStrategy.prepare_for_subresource("status", &mut new, &old);
    assert_eq!(new["spec"], old["spec"], "status keeps spec");
    assert_eq!(new["status"]["conditions"][0]["status"], "False", "status changes status");
    assert_eq!(new["metadata"]["labels"]["x"], "y", "status may change labels");
    assert!(NodeStrategy.subresource_writes_metadata("status"));
    assert!(!NodeStrategy.subresource_writes_metadata(""));
    assert_eq!(NodeStrategy.reset_fields(""), &[&["status"][..]][..]);
    assert_eq!(NodeStrategy.reset_fields("status"), &[&["spec"][..]][..]);
}

#[test]
fn create_keeps_status_and_normalizes() {
    type Check = fn(&Value);
    let cases: &[(&str, Mutation, Check)] = &[
        ("status is kept on create", |_| {}, |o| assert_eq!(o["status"]["nodeInfo"]["kubeletVersion"], "v1.33.1")),
        (
            "podCIDRs from podCIDR",
            |o| {
                o["spec"].as_object_mut().unwrap().remove("podCIDRs");
            },
            |o| assert_eq!(o["spec"]["podCIDRs"], json!(["10.244.1.0/24"])),
        ),
        (
            "podCIDR from podCIDRs",
            |o| set(o, &["spec", "podCIDRs"], json!(["fd00::/64", "10.0.0.0/24"])),
            |o| assert_eq!(o["spec"]["podCIDR"], "fd00::/64"),
        ),
        (
            "allocatable defaults to capacity",
            |o| set(o, &["status", "capacity"], json!({"cpu": "4", "pods": "110"})),
            |o| assert_eq!(o["status"]["allocatable"], json!({"cpu": "4", "pods": "110"})),
        ),
        (
            "given allocatable is kept",
            |o| {
                set(o, &["status", "capacity"], json!({"cpu": "4"}));
                set(o, &["status", "allocatable"], json!({"cpu": "3"}));
            },
            |o| assert_eq!(o["status"]["allocatable"], json!({"cpu": "3"})),
        ),
        (
            "configSource and status.config are dropped",
            |o| {
                set(o, &["spec", "configSource"], json!({"configMap": {"name": "c"}}));
                set(o, &["status", "config"], json!({}));
            },
            |o| {
                assert!(o["spec"].get("configSource").is_none());
                assert!(o["status"].get("config").is_none());
            },
        ),
    ];
    // Each case is named for the reader; a failing check shows its line.
    for (_case, mutate, check) in cases {
        let mut obj = base();
        mutate(&mut obj);
        NodeStrategy.prepare_for_create(&mut obj);
        check(&obj);
    }
    // On update a configSource in use stays; a new one is dropped.
    let mut old = base();
    set(&mut old, &["spec", "configSource"], json!({"configMap": {"name": "c"}}));
    let mut new = old.clone();
    NodeStrategy.prepare_for_update(&mut new, &old);
    assert!(new["spec"].get("configSource").is_some(), "configSource in use is kept");
    let mut new = old.clone();
    NodeStrategy.prepare_for_update(&mut new, &base());
    assert!(new["spec"].get("configSource").is_none(), "new configSource is dropped");
}

#[test]
fn node_table() {
    let names: Vec<(&str, u32)> = NodeStrategy.columns().iter().map(|c| (c.name, c.priority)).collect();
    assert_eq!(
        names,
        [
            ("Status", 0),
            ("Roles", 0),
            ("Age", 0),
            ("Version", 0),
            ("Internal-IP", 1),
            ("External-IP", 1),
            ("OS-Image", 1),
            ("Kernel-Version", 1),
            ("Container-Runtime", 1)
        ],
        "node columns"
    );
    let full = [
        "Ready",
        "<none>",
        "60m",
        "v1.33.1",
        "192.168.1.10",
        "<none>",
        "Debian GNU/Linux 12 (bookworm)",
        "6.1.0-18-amd64",
        "containerd://1.7.13",
    ];
    let cases: &[(&str, Mutation, &[&str])] = &[
        ("ready", |_| {}, &full),
        (
            "not ready",
            |o| set(o, &["status", "conditions"], json!([{"type": "Ready", "status": "False"}])),
            &["NotReady", "<none>", "60m", "v1.33.1"],
        ),
        (
            "ready unknown",
            |o| {
                set(
                    o,
                    &["status", "conditions"],
                    json!([{"type": "MemoryPressure", "status": "False"},
                                                                       {"type": "Ready", "status": "Unknown"}]),
                )
            },
            &["NotReady", "<none>", "60m", "v1.33.1"],
        ),
        (
            "no ready condition, cordoned",
            |o| {
                set(o, &["status", "conditions"], json!([{"type": "MemoryPressure", "status": "False"}]));
                set(o, &["spec", "unschedulable"], json!(true));
            },
            &["Unknown,SchedulingDisabled", "<none>", "60m", "v1.33.1"],
        ),
        (
            "roles",
            |o| {
                set(
                    o,
                    &["metadata", "labels"],
                    json!({
            "node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
            "node-role.kubernetes.io/": "", "kubernetes.io/role": "edge"}),
                )
            },
            &["Ready", "control-plane,edge,worker", "60m", "v1.33.1"],
        ),
        (
            "empty role label",
            |o| set(o, &["metadata", "labels"], json!({"kubernetes.io/role": ""})),
            &["Ready", "<none>", "60m", "v1.33.1"],
        ),
        (
            "bare node",
            |o| {
                o.as_object_mut().unwrap().retain(|k, _| k == "metadata");
            },
            &["Unknown", "<none>", "60m", "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"],
        ),
        (
            "external address",
            |o| {
                set(
                    o,
                    &["status", "addresses"],
                    json!([
            {"type": "ExternalIP", "address": "203.0.113.7"}, {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "InternalIP", "address": "10.0.0.2"}]),
                )
            },
            &["Ready", "<none>", "60m", "v1.33.1", "10.0.0.1", "203.0.113.7"],
        ),
    ];
    for (name, mutate, want) in cases {
        let mut obj = base();
        mutate(&mut obj);
        let cells = NodeStrategy.cells(&obj, now());
        assert_eq!(cells.len(), 9, "{name}");
        let got: Vec<&str> = cells.iter().take(want.len()).map(|c| c.as_str().unwrap_or("?")).collect();
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn node_fields() {
    let mut obj = base();
    assert_eq!(NodeStrategy.field(&obj, "spec.unschedulable").as_deref(), Some("false"));
    set(&mut obj, &["spec", "unschedulable"], json!(true));
    assert_eq!(NodeStrategy.field(&obj, "spec.unschedulable").as_deref(), Some("true"));
    assert_eq!(NodeStrategy.field(&json!({}), "spec.unschedulable").as_deref(), Some("false"), "supported on probe");
    assert_eq!(NodeStrategy.field(&obj, "spec.providerID"), None, "not selectable");
}
