//! The practical core of upstream's pod validation (`pkg/apis/core/validation`:
//! `ValidatePodSpec`, `ValidatePodUpdate`, `ValidatePodStatusUpdate`), over the wire form.
//!
//! Checked: containers (present, names DNS labels unique across containers and init
//! containers, image present and untrimmed, ports, env names, volume mounts naming a volume,
//! pull and termination-message policies), volumes (names, one source), restart and DNS
//! policies, `activeDeadlineSeconds`, node, service-account, host and subdomain names,
//! tolerations; on update the spec is immutable except for what upstream lets change (images,
//! `activeDeadlineSeconds` down, added tolerations, a negative grace period set to 1); on a
//! status write the pod IPs and a terminal phase.
//!
//! Not checked (accepted as they come): volume sources' own fields, resources and their
//! quantities, probes, security contexts, affinity, topology spread, resource claims,
//! ephemeral containers' specifics. The spec-update error carries upstream's message without
//! its Go diff of the two specs.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::error::FieldError;
use crate::registry::shared::get_at;
use crate::validation;

/// Upstream's `updatablePodSpecFieldsNoResources`, joined as the Forbidden message joins them.
const UPDATABLE_SPEC_FIELDS: &[&str] = &[
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
];

const MAX_INT32: i64 = i32::MAX as i64;

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// `field.NotFound`.
pub(crate) fn not_found(field: impl Into<String>, value: &Value) -> FieldError {
    FieldError { reason: "FieldValueNotFound", field: field.into(), message: format!("Not found: {value}") }
}

/// `IsValidPortNum`: 1–65535.
pub(crate) fn port_num_errors(field: &str, v: &Value) -> Vec<FieldError> {
    match v.as_i64() {
        Some(p) if (1..=65535).contains(&p) => Vec::new(),
        _ => vec![FieldError::invalid(field, v, "must be between 1 and 65535, inclusive")],
    }
}

/// `IsValidPortName`: an IANA_SVC_NAME.
pub(crate) fn port_name_messages(name: &str) -> Vec<String> {
    let mut msgs = Vec::new();
    if name.len() > 15 {
        msgs.push(validation::max_len_error(15));
    }
    if name.is_empty() || !name.bytes().all(|b| b == b'-' || b.is_ascii_lowercase() || b.is_ascii_digit()) {
        msgs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        msgs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        msgs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        msgs.push("must not begin or end with a hyphen".into());
    }
    msgs
}

/// The protocols of container and service ports (`supportedPortProtocols`, sorted).
pub(crate) const PORT_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// A port's `protocol`: required, one of [`PORT_PROTOCOLS`].
pub(crate) fn protocol_errors(field: &str, port: &Value) -> Vec<FieldError> {
    match port.get("protocol").and_then(Value::as_str).unwrap_or("") {
        "" => vec![FieldError::required(field, "")],
        p if PORT_PROTOCOLS.contains(&p) => Vec::new(),
        p => vec![FieldError::not_supported(field, &json!(p), PORT_PROTOCOLS)],
    }
}

fn enum_errors(field: &str, value: &str, supported: &[&str]) -> Vec<FieldError> {
    if value.is_empty() {
        vec![FieldError::required(field, "")]
    } else if supported.contains(&value) {
        Vec::new()
    } else {
        vec![FieldError::not_supported(field, &json!(value), supported)]
    }
}

fn name_errors(field: &str, name: &str, rule: fn(&str) -> Vec<String>) -> Vec<FieldError> {
    rule(name).into_iter().map(|m| FieldError::invalid(field, &json!(name), m)).collect()
}

/// `validateTolerations`.
pub(crate) fn tolerations_errors(tolerations: &[Value], path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, t) in tolerations.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let (key, op, value, effect) = (s(t, "key"), s(t, "operator"), s(t, "value"), s(t, "effect"));
        if !key.is_empty() {
            errs.extend(name_errors(&format!("{p}.key"), key, validation::is_qualified_name));
        }
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                format!("{p}.operator"),
                &json!(op),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.get("tolerationSeconds").is_some_and(|v| !v.is_null()) && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                format!("{p}.effect"),
                &json!(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let msgs = validation::is_valid_label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(format!("{p}.operator"), &json!(value), msgs.join(";")));
                }
            }
            "Exists" if !value.is_empty() => errs.push(FieldError::invalid(
                format!("{p}.operator"),
                t,
                "value must be empty when `operator` is 'Exists'",
            )),
            "Exists" => {}
            other => errs.push(FieldError::not_supported(format!("{p}.operator"), &json!(other), &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            errs.push(FieldError::not_supported(
                format!("{p}.effect"),
                &json!(effect),
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
    errs
}

/// The keys of a `VolumeSource` (every field of a `Volume` but its name).
fn volume_source_count(v: &Value) -> usize {
    v.as_object().map(|m| m.iter().filter(|(k, val)| *k != "name" && !val.is_null()).count()).unwrap_or(0)
}

fn validate_volumes(spec: &Value, errs: &mut Vec<FieldError>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in arr(spec, "volumes").iter().enumerate() {
        let p = format!("spec.volumes[{i}]");
        let name = s(v, "name");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{p}.name"), ""));
        } else {
            errs.extend(name_errors(&format!("{p}.name"), name, validation::is_dns1123_label));
            if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(format!("{p}.name"), &json!(name)));
            }
        }
        match volume_source_count(v) {
            0 => errs.push(FieldError::required(p, "must specify a volume type")),
            1 => {}
            _ => errs.push(FieldError::forbidden(p, "may not specify more than 1 volume type")),
        }
    }
    names
}

fn validate_container(c: &Value, p: &str, names: &mut BTreeSet<String>, vols: &BTreeSet<String>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = s(c, "name");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{p}.name"), ""));
    } else {
        errs.extend(name_errors(&format!("{p}.name"), name, validation::is_dns1123_label));
        if !names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(format!("{p}.name"), &json!(name)));
        }
    }
    let image = s(c, "image");
    if image.is_empty() {
        errs.push(FieldError::required(format!("{p}.image"), ""));
    } else if image.trim() != image {
        errs.push(FieldError::invalid(
            format!("{p}.image"),
            &json!(image),
            "must not have leading or trailing whitespace",
        ));
    }
    let mut port_names = BTreeSet::new();
    for (j, port) in arr(c, "ports").iter().enumerate() {
        let pp = format!("{p}.ports[{j}]");
        let pname = s(port, "name");
        if !pname.is_empty() {
            for m in port_name_messages(pname) {
                errs.push(FieldError::invalid(format!("{pp}.name"), &json!(pname), m));
            }
            if !port_names.insert(pname.to_string()) {
                errs.push(FieldError::duplicate(format!("{pp}.name"), &json!(pname)));
            }
        }
        let container_port = port.get("containerPort").cloned().unwrap_or(json!(0));
        errs.extend(port_num_errors(&format!("{pp}.containerPort"), &container_port));
        if let Some(hp) = port.get("hostPort").filter(|v| v.as_i64() != Some(0) && !v.is_null()) {
            errs.extend(port_num_errors(&format!("{pp}.hostPort"), hp));
        }
        errs.extend(protocol_errors(&format!("{pp}.protocol"), port));
    }
    for (j, env) in arr(c, "env").iter().enumerate() {
        if s(env, "name").is_empty() {
            errs.push(FieldError::required(format!("{p}.env[{j}].name"), ""));
        }
    }
    for (j, m) in arr(c, "volumeMounts").iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{j}]");
        let mname = s(m, "name");
        if mname.is_empty() {
            errs.push(FieldError::required(format!("{mp}.name"), ""));
        } else if !vols.contains(mname) {
            errs.push(not_found(format!("{mp}.name"), &json!(mname)));
        }
        if s(m, "mountPath").is_empty() {
            errs.push(FieldError::required(format!("{mp}.mountPath"), ""));
        }
    }
    errs.extend(enum_errors(
        &format!("{p}.terminationMessagePolicy"),
        s(c, "terminationMessagePolicy"),
        &["File", "FallbackToLogsOnError"],
    ));
    errs.extend(enum_errors(
        &format!("{p}.imagePullPolicy"),
        s(c, "imagePullPolicy"),
        &["Always", "IfNotPresent", "Never"],
    ));
    errs
}

/// `ValidatePodSpec` (the practical core; see the module doc) of a defaulted pod.
pub(crate) fn validate_pod_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let vols = validate_volumes(spec, &mut errs);
    let containers = arr(spec, "containers");
    let mut names = BTreeSet::new();
    if containers.is_empty() {
        errs.push(FieldError::required("spec.containers", ""));
    }
    for (i, c) in containers.iter().enumerate() {
        errs.extend(validate_container(c, &format!("spec.containers[{i}]"), &mut names, &vols));
    }
    for (i, c) in arr(spec, "initContainers").iter().enumerate() {
        errs.extend(validate_container(c, &format!("spec.initContainers[{i}]"), &mut names, &vols));
    }
    errs.extend(enum_errors("spec.restartPolicy", s(spec, "restartPolicy"), &["Always", "OnFailure", "Never"]));
    errs.extend(enum_errors(
        "spec.dnsPolicy",
        s(spec, "dnsPolicy"),
        &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
    ));
    if let Some(v) = spec.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        if !v.as_i64().is_some_and(|d| (1..=MAX_INT32).contains(&d)) {
            errs.push(FieldError::invalid(
                "spec.activeDeadlineSeconds",
                v,
                format!("must be between 1 and {MAX_INT32}, inclusive"),
            ));
        }
    }
    for (key, rule) in [
        ("nodeName", validation::is_dns1123_subdomain as fn(&str) -> Vec<String>),
        ("serviceAccountName", validation::is_dns1123_subdomain),
        ("hostname", validation::is_dns1123_label),
        ("subdomain", validation::is_dns1123_label),
    ] {
        let v = s(spec, key);
        if !v.is_empty() {
            errs.extend(name_errors(&format!("spec.{key}"), v, rule));
        }
    }
    errs.extend(tolerations_errors(arr(spec, "tolerations"), "spec.tolerations"));
    errs
}

/// Whether the toleration lists are `old` with additions (existing ones may change only
/// their `tolerationSeconds`).
fn tolerations_only_added(new: &[Value], old: &[Value]) -> bool {
    let strip = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    // As canonical JSON in a set: linear, where comparing every pair was quadratic.
    let new: std::collections::HashSet<String> = new.iter().map(|t| strip(t).to_string()).collect();
    old.iter().all(|o| new.contains(&strip(o).to_string()))
}

/// `ValidatePodUpdate`'s spec rules: `activeDeadlineSeconds` and the immutable rest.
pub(crate) fn validate_pod_spec_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let new_spec = new.get("spec").unwrap_or(&null);
    let old_spec = old.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    if arr(new_spec, "containers").len() != arr(old_spec, "containers").len() {
        return vec![FieldError::forbidden("spec.containers", "pod updates may not add or remove containers")];
    }
    let deadline = |spec: &Value| spec.get("activeDeadlineSeconds").filter(|v| !v.is_null()).cloned();
    match (deadline(new_spec), deadline(old_spec)) {
        (Some(n), old_deadline) => {
            let nv = n.as_i64().unwrap_or(-1);
            if !(0..=MAX_INT32).contains(&nv) {
                return vec![FieldError::invalid(
                    "spec.activeDeadlineSeconds",
                    &n,
                    format!("must be between 0 and {MAX_INT32}, inclusive"),
                )];
            }
            if old_deadline.and_then(|o| o.as_i64()).is_some_and(|o| o < nv) {
                return vec![FieldError::invalid(
                    "spec.activeDeadlineSeconds",
                    &n,
                    "must be less than or equal to previous value",
                )];
            }
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            "spec.activeDeadlineSeconds",
            &null,
            "must not update from a positive integer to nil value",
        )),
        (None, None) => {}
    }
    // The old spec with everything an update may change taken from the new one.
    let mut munged = old_spec.clone();
    for list in ["containers", "initContainers"] {
        let new_list = arr(new_spec, list);
        if let Some(items) = munged.get_mut(list).and_then(Value::as_array_mut) {
            if items.len() == new_list.len() {
                for (item, n) in items.iter_mut().zip(new_list) {
                    if let (Some(m), Some(image)) = (item.as_object_mut(), n.get("image")) {
                        m.insert("image".into(), image.clone());
                    }
                }
            }
        }
    }
    if let Some(m) = munged.as_object_mut() {
        let mut take = |key: &str| match new_spec.get(key) {
            Some(v) => {
                m.insert(key.into(), v.clone());
            }
            None => {
                m.remove(key);
            }
        };
        take("activeDeadlineSeconds");
        if tolerations_only_added(arr(new_spec, "tolerations"), arr(old_spec, "tolerations")) {
            take("tolerations");
        }
        let grace = |spec: &Value| spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
        if grace(old_spec).is_some_and(|g| g < 0) && grace(new_spec) == Some(1) {
            take("terminationGracePeriodSeconds");
        }
    }
    if &munged != new_spec {
        errs.push(FieldError::forbidden(
            "spec",
            format!("pod updates may not change fields other than {}", UPDATABLE_SPEC_FIELDS.join(",")),
        ));
    }
    errs
}

/// `ValidatePodStatusUpdate`'s core: pod IPs are IPs, `podIP` is the first of `podIPs`, a
/// terminal phase stays, a nominated node is a node name.
pub(crate) fn validate_pod_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let phase = |o: &Value| get_at(o, &["status", "phase"]).and_then(Value::as_str).unwrap_or("").to_string();
    let (new_phase, old_phase) = (phase(new), phase(old));
    if ["Succeeded", "Failed"].contains(&old_phase.as_str()) && new_phase != old_phase {
        errs.push(FieldError::forbidden(
            "status.phase",
            format!("cannot transition from terminal phase {old_phase:?} to {new_phase:?}"),
        ));
    }
    let null = Value::Null;
    let status = new.get("status").unwrap_or(&null);
    let nominated = s(status, "nominatedNodeName");
    if !nominated.is_empty() {
        errs.extend(name_errors("status.nominatedNodeName", nominated, validation::is_dns1123_subdomain));
    }
    let ips = arr(status, "podIPs");
    for (i, ip) in ips.iter().enumerate() {
        let v = s(ip, "ip");
        if v.parse::<std::net::IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                format!("status.podIPs[{i}].ip"),
                &json!(v),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    let pod_ip = s(status, "podIP");
    let first = ips.first().map(|ip| s(ip, "ip")).unwrap_or("");
    if !pod_ip.is_empty() && !first.is_empty() && pod_ip != first {
        errs.push(FieldError::invalid("status.podIPs[0].ip", &json!(first), "must match `podIP`"));
    }
    errs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::core::test_util::{rendered, set, Mutation};

    fn spec() -> Value {
        json!({"containers": [{"name": "app", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                               "terminationMessagePolicy": "File",
                               "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                               "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
               "volumes": [{"name": "data", "emptyDir": {}}],
               "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "nodeName": "n1"})
    }

    #[test]
    fn pod_spec_validation() {
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("no containers", |s| s["containers"] = json!([]), &["spec.containers: Required value"]),
            ("no image", |s| s["containers"][0]["image"] = json!(""), &["spec.containers[0].image: Required value"]),
            ("padded image", |s| s["containers"][0]["image"] = json!(" nginx"),
             &["spec.containers[0].image: Invalid value: \" nginx\": must not have leading or trailing whitespace"]),
            ("no name", |s| s["containers"][0]["name"] = json!(""), &["spec.containers[0].name: Required value"]),
            ("bad name", |s| s["containers"][0]["name"] = json!("App"),
             &["spec.containers[0].name: Invalid value: \"App\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]),
            ("duplicate name across init", |s| s["initContainers"] = json!([{"name": "app", "image": "busybox",
                "imagePullPolicy": "Always", "terminationMessagePolicy": "File"}]),
             &["spec.initContainers[0].name: Duplicate value: \"app\""]),
            ("bad port", |s| s["containers"][0]["ports"][0]["containerPort"] = json!(70000),
             &["spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"]),
            ("bad protocol", |s| s["containers"][0]["ports"][0]["protocol"] = json!("ICMP"),
             &["spec.containers[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""]),
            ("bad port name", |s| s["containers"][0]["ports"][0]["name"] = json!("80"),
             &["spec.containers[0].ports[0].name: Invalid value: \"80\": must contain at least one letter (a-z)"]),
            ("mount of no volume", |s| s["volumes"] = json!([]),
             &["spec.containers[0].volumeMounts[0].name: Not found: \"data\""]),
            ("volume without source", |s| s["volumes"][0] = json!({"name": "data"}),
             &["spec.volumes[0]: Required value: must specify a volume type"]),
            ("restart policy", |s| s["restartPolicy"] = json!("Sometimes"),
             &["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""]),
            ("dns policy", |s| s["dnsPolicy"] = json!("Google"),
             &["spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\""]),
            ("pull policy", |s| s["containers"][0]["imagePullPolicy"] = json!("Sometimes"),
             &["spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\""]),
            ("deadline", |s| s["activeDeadlineSeconds"] = json!(0),
             &["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"]),
            ("node name", |s| s["nodeName"] = json!("N_1"),
             &["spec.nodeName: Invalid value: \"N_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
            ("toleration without key", |s| s["tolerations"] = json!([{"operator": "Equal", "value": "x"}]),
             &["spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""]),
            ("toleration seconds", |s| s["tolerations"] = json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]),
             &["spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set"]),
        ];
        for (name, mutate, want) in cases {
            let mut s = spec();
            mutate(&mut s);
            assert_eq!(rendered(&validate_pod_spec(&s)), *want, "{name}");
        }
    }

    #[test]
    fn pod_spec_updates() {
        let forbidden = format!(
            "spec: Forbidden: pod updates may not change fields other than {}",
            UPDATABLE_SPEC_FIELDS.join(",")
        );
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("unchanged", |_| {}, &[]),
            ("image", |p| p["spec"]["containers"][0]["image"] = json!("nginx:1.28"), &[]),
            ("added toleration", |p| p["spec"]["tolerations"] = json!([{"key": "k", "operator": "Exists"}]), &[]),
            ("deadline set", |p| p["spec"]["activeDeadlineSeconds"] = json!(30), &[]),
            ("node name", |p| p["spec"]["nodeName"] = json!("n2"), &["FORBIDDEN"]),
            (
                "container added",
                |p| {
                    let c = p["spec"]["containers"][0].clone();
                    p["spec"]["containers"].as_array_mut().unwrap().push(c);
                },
                &["spec.containers: Forbidden: pod updates may not add or remove containers"],
            ),
        ];
        for (name, mutate, want) in cases {
            let old = json!({"spec": spec()});
            let mut new = old.clone();
            mutate(&mut new);
            let want: Vec<String> =
                want.iter().map(|w| if *w == "FORBIDDEN" { forbidden.clone() } else { w.to_string() }).collect();
            assert_eq!(rendered(&validate_pod_spec_update(&new, &old)), want, "{name}");
        }
        // activeDeadlineSeconds may only go down, and not away.
        let mut old = json!({"spec": spec()});
        set(&mut old, &["spec", "activeDeadlineSeconds"], json!(30));
        let mut up = old.clone();
        set(&mut up, &["spec", "activeDeadlineSeconds"], json!(60));
        assert_eq!(
            rendered(&validate_pod_spec_update(&up, &old)),
            ["spec.activeDeadlineSeconds: Invalid value: 60: must be less than or equal to previous value"]
        );
        let away = json!({"spec": spec()});
        assert_eq!(
            rendered(&validate_pod_spec_update(&away, &old)),
            ["spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"]
        );
        // A changed existing toleration is no addition.
        let mut old = json!({"spec": spec()});
        set(&mut old, &["spec", "tolerations"], json!([{"key": "k", "operator": "Exists"}]));
        let mut changed = old.clone();
        set(&mut changed, &["spec", "tolerations"], json!([{"key": "j", "operator": "Exists"}]));
        assert_eq!(rendered(&validate_pod_spec_update(&changed, &old)), [forbidden]);
    }

    #[test]
    fn pod_status_updates() {
        let old = json!({"status": {"phase": "Succeeded"}});
        let new = json!({"status": {"phase": "Running"}});
        assert_eq!(
            rendered(&validate_pod_status_update(&new, &old)),
            ["status.phase: Forbidden: cannot transition from terminal phase \"Succeeded\" to \"Running\""]
        );
        let old = json!({"status": {"phase": "Pending"}});
        let new =
            json!({"status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}, {"ip": "x"}]}});
        assert_eq!(
            rendered(&validate_pod_status_update(&new, &old)),
            [
                "status.podIPs[1].ip: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "status.podIPs[0].ip: Invalid value: \"10.0.0.2\": must match `podIP`",
            ]
        );
        let ok = json!({"status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]}});
        assert!(validate_pod_status_update(&ok, &old).is_empty());
    }
}
