//! `nodes` (`pkg/registry/core/node/strategy.go`): cluster-scoped, status set on create (a
//! kubelet registers with its status) and through `status` afterwards, validation after
//! `ValidateNode` / `ValidateNodeUpdate` (`pkg/apis/core/validation`) and the printer's
//! columns (`printNode`).
//!
//! Unlike most kinds' status subresources, `nodes/status` may change labels and annotations
//! as upstream's (a kubelet re-registering patches its default labels through `/status`):
//! only `spec` is kept from the stored object ([`StatusStrategy::subresource_writes_metadata`]).
//!
//! The v1 `spec.podCIDR` is the first of `spec.podCIDRs` (upstream's conversion through the
//! internal form): a client that sets only `podCIDR` gets `podCIDRs` from it. The deprecated
//! dynamic kubelet configuration (`spec.configSource`, `status.config`) is dropped unless the
//! stored object already uses it, as upstream's `dropDisabledFields`.

use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use crate::error::FieldError;
use crate::registry::shared::{age_column, carry, col, creation_age, get_at, go_string_slice, invalid_shown, str_at};
use crate::registry::{
    typed_roundtrip, Column, FieldSelectors, ListStrategy, MergeKeys, ResetFields, StatusStrategy, Strategy,
    TableStrategy, WriteStrategy,
};
use crate::validation;

/// `node-role.kubernetes.io/<role>` labels name a node's roles (the printer's Roles column).
const LABEL_NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
/// The older role label: `kubernetes.io/role=<role>`.
const LABEL_NODE_ROLE: &str = "kubernetes.io/role";
const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const POD_CIDR_CHANGE: &str = "node updates may not change podCIDR except from \"\" to valid";

/// `nodes`: see the module doc.
pub struct NodeStrategy;

fn strings_at(obj: &Value, path: &[&str]) -> Vec<String> {
    get_at(obj, path)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

fn array_at<'a>(obj: &'a Value, path: &[&str]) -> &'a [Value] {
    get_at(obj, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn has(obj: &Value, path: &[&str]) -> bool {
    get_at(obj, path).is_some_and(|v| !v.is_null())
}

fn remove_at(obj: &mut Value, parent: &str, key: &str) {
    if let Some(Value::Object(m)) = obj.get_mut(parent) {
        m.remove(key);
    }
}

/// What decoding into the internal form and back does to a v1 Node: `podCIDRs` from a lone
/// `podCIDR`, `podCIDR` from the first of `podCIDRs`, and `SetDefaults_NodeStatus`
/// (allocatable defaults to capacity).
fn normalize(obj: &mut Value) {
    let cidrs = strings_at(obj, &["spec", "podCIDRs"]);
    let single = str_at(obj, &["spec", "podCIDR"]).unwrap_or("").to_string();
    if let Some(Value::Object(spec)) = obj.get_mut("spec") {
        if cidrs.is_empty() && !single.is_empty() {
            spec.insert("podCIDRs".into(), json!([single]));
        } else if let Some(first) = cidrs.first() {
            spec.insert("podCIDR".into(), json!(first));
        }
    }
    if let Some(Value::Object(status)) = obj.get_mut("status") {
        if status.get("allocatable").is_none_or(Value::is_null) {
            if let Some(capacity) = status.get("capacity").filter(|c| !c.is_null()).cloned() {
                status.insert("allocatable".into(), capacity);
            }
        }
    }
}

/// A CIDR as Go's `netutils.ParseCIDRSloppy` reads it (IPv4 octets and the prefix length
/// may have leading zeros): the address and the prefix length.
fn parse_cidr_sloppy(value: &str) -> Option<(IpAddr, u32)> {
    let (ip, bits) = value.split_once('/')?;
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u32 = bits.parse().ok()?;
    let ip = if ip.contains(':') {
        IpAddr::V6(ip.parse().ok()?)
    } else {
        let octets: Vec<&str> = ip.split('.').collect();
        if octets.len() != 4 {
            return None;
        }
        let mut out = [0u8; 4];
        for (o, s) in out.iter_mut().zip(&octets) {
            if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *o = s.parse().ok()?;
        }
        IpAddr::V4(Ipv4Addr::from(out))
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

/// The address with the bits beyond `bits` cleared.
fn masked(ip: IpAddr, bits: u32) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

/// `validation.IsValidCIDR`: the problems with a CIDR value (strict form, canonical).
pub fn cidr_problems(value: &str) -> Vec<String> {
    let Some((ip, bits)) = parse_cidr_sloppy(value) else {
        return vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".into()];
    };
    let (ip_text, bits_text) = value.split_once('/').unwrap_or((value, ""));
    let strict = ip_text.parse::<IpAddr>().is_ok() && !(bits_text.len() > 1 && bits_text.starts_with('0'));
    if !strict {
        return vec!["must not have leading 0s in IP or prefix length".into()];
    }
    if let IpAddr::V6(a) = ip {
        if a.to_ipv4_mapped().is_some() {
            return vec!["must not have an IPv4-mapped IPv6 address".into()];
        }
    }
    if masked(ip, bits) != ip {
        return vec!["must not have bits set beyond the prefix length".into()];
    }
    let canonical = format!("{ip}/{bits}");
    if value != canonical {
        return vec![format!("must be in canonical form ({canonical:?})")];
    }
    Vec::new()
}

/// Go's `%#v` of a `*metav1.Time` field: only nil renders the same every time.
fn go_time_pointer(v: Option<&Value>) -> &'static str {
    if v.is_none_or(Value::is_null) {
        "(*v1.Time)(nil)"
    } else {
        "(*v1.Time)(0xc000000000)"
    }
}

/// `validateNodeTaints`; upstream reports them under `metadata.taints`.
fn validate_taints(taints: &[Value]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    for (i, taint) in taints.iter().enumerate() {
        let path = format!("metadata.taints[{i}]");
        let field = |k: &str| taint.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (key, value, effect) = (field("key"), field("value"), field("effect"));
        for msg in validation::is_qualified_name(&key) {
            errs.push(FieldError::invalid(format!("{path}.key"), &json!(key), msg));
        }
        let value_errs = validation::is_valid_label_value(&value);
        if !value_errs.is_empty() {
            errs.push(FieldError::invalid(format!("{path}.value"), &json!(value), value_errs.join(";")));
        }
        if effect.is_empty() {
            errs.push(FieldError::required(format!("{path}.effect"), ""));
        } else if !TAINT_EFFECTS.contains(&effect.as_str()) {
            errs.push(FieldError::not_supported(format!("{path}.effect"), &json!(effect), TAINT_EFFECTS));
        }
        if seen.iter().any(|(k, e)| *k == key && *e == effect) {
            let shown = format!(
                "core.Taint{{Key:{key:?}, Value:{value:?}, Effect:{effect:?}, TimeAdded:{}}}",
                go_time_pointer(taint.get("timeAdded"))
            );
            errs.push(FieldError {
                reason: "FieldValueDuplicate",
                field: path,
                message: format!("Duplicate value: {shown}: taints must be unique by key and effect pair"),
            });
            continue;
        }
        seen.push((key, effect));
    }
    errs
}

/// `ValidateNode`'s checks of `spec.podCIDRs`.
fn validate_pod_cidrs(cidrs: &[String]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, c) in cidrs.iter().enumerate() {
        for msg in cidr_problems(c) {
            errs.push(FieldError::invalid(format!("spec.podCIDRs[{i}]"), &json!(c), msg));
        }
    }
    if cidrs.len() > 1 {
        let parsed: Option<Vec<IpAddr>> = cidrs.iter().map(|c| parse_cidr_sloppy(c).map(|(ip, _)| ip)).collect();
        if let Some(ips) = parsed {
            let dual = ips.iter().any(IpAddr::is_ipv4) && ips.iter().any(IpAddr::is_ipv6);
            if !dual || cidrs.len() > 2 {
                errs.push(invalid_shown(
                    "spec.podCIDRs",
                    &go_string_slice(cidrs),
                    "may specify no more than one CIDR for each IP family",
                ));
            }
        }
        let mut seen = std::collections::HashSet::with_capacity(cidrs.len());
        for (i, c) in cidrs.iter().enumerate() {
            if !seen.insert(c) {
                errs.push(FieldError::duplicate(format!("spec.podCIDRs[{i}]"), &json!(c)));
            }
        }
    }
    errs
}

/// `ValidateNodeUpdate` (beyond what [`NodeStrategy::validate`] checks of the new object).
fn validate_node_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let addresses = array_at(new, &["status", "addresses"]);
    let mut seen = std::collections::HashSet::with_capacity(addresses.len());
    for (i, a) in addresses.iter().enumerate() {
        let key = |v: &Value| {
            Value::Array(vec![
                v.get("type").cloned().unwrap_or_default(),
                v.get("address").cloned().unwrap_or_default(),
            ])
            .to_string()
        };
        if !seen.insert(key(a)) {
            let field = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let shown = format!("core.NodeAddress{{Type:{:?}, Address:{:?}}}", field("type"), field("address"));
            errs.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("status.addresses[{i}]"),
                message: format!("Duplicate value: {shown}"),
            });
        }
    }
    let old_cidrs = strings_at(old, &["spec", "podCIDRs"]);
    if !old_cidrs.is_empty() {
        let new_cidrs = strings_at(new, &["spec", "podCIDRs"]);
        if old_cidrs.len() != new_cidrs.len() {
            errs.push(FieldError::forbidden("spec.podCIDRs", POD_CIDR_CHANGE));
        } else {
            for (o, n) in old_cidrs.iter().zip(&new_cidrs) {
                if o != n {
                    errs.push(FieldError::forbidden("spec.podCIDRs", POD_CIDR_CHANGE));
                }
            }
        }
    }
    let old_provider = str_at(old, &["spec", "providerID"]).unwrap_or("");
    if !old_provider.is_empty() && old_provider != str_at(new, &["spec", "providerID"]).unwrap_or("") {
        errs.push(FieldError::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    if str_at(new, &["spec", "externalID"]) != str_at(old, &["spec", "externalID"]) {
        errs.push(FieldError::forbidden("spec.externalID", "may not be updated"));
    }
    errs
}

/// The printer's Status: `Ready` or `NotReady` from the Ready condition, `Unknown` without
/// one, and `SchedulingDisabled` after a comma for an unschedulable node.
pub fn node_status(obj: &Value) -> String {
    let ready = array_at(obj, &["status", "conditions"])
        .iter()
        .rfind(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
    let mut parts = vec![match ready {
        Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if get_at(obj, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        parts.push("SchedulingDisabled");
    }
    parts.join(",")
}

/// The printer's Roles (`findNodeRoles`): sorted, `<none>` when there are none.
pub fn node_roles(obj: &Value) -> String {
    let mut roles: Vec<&str> = Vec::new();
    if let Some(labels) = get_at(obj, &["metadata", "labels"]).and_then(Value::as_object) {
        for (k, v) in labels {
            let v = v.as_str().unwrap_or("");
            let role = match k.strip_prefix(LABEL_NODE_ROLE_PREFIX) {
                Some(role) => role,
                None if k == LABEL_NODE_ROLE => v,
                None => "",
            };
            if !role.is_empty() && !roles.contains(&role) {
                roles.push(role);
            }
        }
    }
    roles.sort_unstable();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

/// The first address of type `kind` (`InternalIP`, `ExternalIP`), or `<none>`.
fn address(obj: &Value, kind: &str) -> String {
    array_at(obj, &["status", "addresses"])
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some(kind))
        .and_then(|a| a.get("address").and_then(Value::as_str))
        .unwrap_or("<none>")
        .to_string()
}

fn node_info_or_unknown(obj: &Value, key: &str) -> Value {
    match str_at(obj, &["status", "nodeInfo", key]).unwrap_or("") {
        "" => json!("<unknown>"),
        v => json!(v),
    }
}

const STATUS_DESCRIPTION: &str = "The status of the node";
const ROLES_DESCRIPTION: &str = "The roles of the node";
const VERSION_DESCRIPTION: &str = "Kubelet Version reported by the node.";
const ADDRESSES_DESCRIPTION: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";
const OS_IMAGE_DESCRIPTION: &str =
    "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).";
const KERNEL_DESCRIPTION: &str = "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).";
const RUNTIME_DESCRIPTION: &str =
    "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).";

impl Strategy for NodeStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Node>(obj)
    }

    fn merge_keys(&self) -> MergeKeys {
        &[
            (&["spec", "podCIDRs"], ListStrategy::MergePrimitives),
            (&["status", "conditions"], ListStrategy::MergeByKey("type")),
            (&["status", "addresses"], ListStrategy::MergeByKey("type")),
        ]
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn status(&self) -> Option<&dyn StatusStrategy> {
        Some(self)
    }

    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for NodeStrategy {
    /// Nodes set their status on create (a kubelet registers with it).
    fn prepare_for_create(&self, obj: &mut Value) {
        remove_at(obj, "spec", "configSource");
        remove_at(obj, "status", "config");
        normalize(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        carry(new, old, &["status"]);
        if !has(old, &["spec", "configSource"]) {
            remove_at(new, "spec", "configSource");
        }
        normalize(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_taints(array_at(obj, &["spec", "taints"]));
        errs.extend(validate_pod_cidrs(&strings_at(obj, &["spec", "podCIDRs"])));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_node_update(new, old)
    }
}

impl StatusStrategy for NodeStrategy {
    fn reset_fields(&self, sub: &str) -> ResetFields {
        crate::registry::status_reset_fields(sub)
    }

    fn subresource_writes_metadata(&self, sub: &str) -> bool {
        sub == "status"
    }

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        if sub == "status" {
            carry(new, old, &["spec"]);
            if !has(old, &["status", "config"]) {
                remove_at(new, "status", "config");
            }
        }
        normalize(new);
    }

    fn validate_subresource(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        match sub {
            "status" => validate_node_update(new, old),
            _ => Vec::new(),
        }
    }
}

impl FieldSelectors for NodeStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "spec.unschedulable" => {
                let unschedulable = get_at(obj, &["spec", "unschedulable"]).and_then(Value::as_bool).unwrap_or(false);
                Some(unschedulable.to_string())
            }
            _ => None,
        }
    }
}

impl TableStrategy for NodeStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Status", STATUS_DESCRIPTION, 0),
            col("Roles", ROLES_DESCRIPTION, 0),
            age_column(),
            col("Version", VERSION_DESCRIPTION, 0),
            col("Internal-IP", ADDRESSES_DESCRIPTION, 1),
            col("External-IP", ADDRESSES_DESCRIPTION, 1),
            col("OS-Image", OS_IMAGE_DESCRIPTION, 1),
            col("Kernel-Version", KERNEL_DESCRIPTION, 1),
            col("Container-Runtime", RUNTIME_DESCRIPTION, 1),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![
            json!(node_status(obj)),
            json!(node_roles(obj)),
            creation_age(obj, now),
            json!(str_at(obj, &["status", "nodeInfo", "kubeletVersion"]).unwrap_or("")),
            json!(address(obj, "InternalIP")),
            json!(address(obj, "ExternalIP")),
            node_info_or_unknown(obj, "osImage"),
            node_info_or_unknown(obj, "kernelVersion"),
            node_info_or_unknown(obj, "containerRuntimeVersion"),
        ]
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
