//! `services` (`pkg/registry/core/service`): the v1 defaults on every write, a `status`
//! subresource, the practical core of upstream's validation and kubectl's columns.
//!
//! kustos has no service network (no kube-proxy, no endpoints), so it allocates nothing: a
//! service keeps the `clusterIP`/`clusterIPs` its client gives (checked as IP addresses or
//! `None`, immutable once set), and one given none keeps none (kubectl shows `<none>` in
//! CLUSTER-IP); `nodePort`s likewise are the client's (not checked against a node-port range,
//! not allocated). `ipFamilies`/`ipFamilyPolicy` are not defaulted for the same reason.
//!
//! Validated: `type`, ports (number 1–65535, protocol, names unique and required when
//! there are several, target port number or name, no duplicate port/protocol, no node port
//! on a ClusterIP service), ExternalName services' `externalName`, session affinity, traffic
//! policies, cluster and external IPs, the selector's labels; on update, set cluster IPs; on
//! a status write, load-balancer ingress IPs. Not validated: session-affinity config,
//! health-check node port, load-balancer source ranges, IP families.

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Map, Value};

use super::pod_validation::{port_name_messages, port_num_errors, protocol_errors};
use crate::error::FieldError;
use crate::registry::shared::{age_column, carry, col, creation_age, get_at, str_at};
use crate::registry::{
    decode, typed_roundtrip, Column, FieldSelectors, ListStrategy, MergeKeys, ResetFields, StatusStrategy, Strategy,
    TableStrategy, WriteStrategy,
};
use crate::validation;

/// `services` and `services/status`.
pub struct ServiceStrategy;

const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const IP_MESSAGE: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    str_at(v, path).unwrap_or("")
}

fn arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get_at(v, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// `service.ExternallyAccessible`.
fn externally_accessible(spec: &Value) -> bool {
    match s(spec, &["type"]) {
        "LoadBalancer" | "NodePort" => true,
        "ClusterIP" => !arr(spec, &["externalIPs"]).is_empty(),
        _ => false,
    }
}

fn set_if_empty(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
        m.insert(key.into(), value);
    }
}

/// `SetDefaults_Service`, and `clusterIPs` from a lone `clusterIP` (upstream's
/// normalization of the two fields).
pub fn set_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_if_empty(spec, "sessionAffinity", json!("None"));
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("None") {
        spec.remove("sessionAffinityConfig");
    } else if get_at(&Value::Object(spec.clone()), &["sessionAffinityConfig", "clientIP", "timeoutSeconds"]).is_none() {
        spec.insert("sessionAffinityConfig".into(), json!({"clientIP": {"timeoutSeconds": 10800}}));
    }
    set_if_empty(spec, "type", json!("ClusterIP"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_if_empty(p, "protocol", json!("TCP"));
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(t)) => t.is_empty(),
                Some(_) => false,
            };
            if unset {
                if let Some(port) = p.get("port").cloned() {
                    p.insert("targetPort".into(), port);
                }
            }
        }
    }
    let typ = spec.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    if externally_accessible(&Value::Object(spec.clone())) {
        set_if_empty(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ["NodePort", "LoadBalancer", "ClusterIP"].contains(&typ.as_str()) {
        spec.entry("internalTrafficPolicy").or_insert(json!("Cluster"));
    }
    if typ == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts").or_insert(json!(true));
    }
    let cluster_ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
    let no_ips = spec.get("clusterIPs").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if !cluster_ip.is_empty() && no_ips {
        spec.insert("clusterIPs".into(), json!([cluster_ip]));
    }
}

fn ip_errors(field: String, ip: &str) -> Vec<FieldError> {
    if ip.parse::<std::net::IpAddr>().is_ok() {
        Vec::new()
    } else {
        vec![FieldError::invalid(field, &json!(ip), IP_MESSAGE)]
    }
}

/// Go's `%#v` of the `core.ServicePort{Protocol, Port}` key upstream reports duplicates with.
fn duplicate_port(field: String, protocol: &str, port: &Value) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate",
        field,
        message: format!(
            "Duplicate value: core.ServicePort{{Name:\"\", Protocol:\"{protocol}\", AppProtocol:(*string)(nil), Port:{port}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}"
        ),
    }
}

fn validate_ports(spec: &Value, errs: &mut Vec<FieldError>) {
    let ports = arr(spec, &["ports"]);
    let typ = s(spec, &["type"]);
    let headless = s(spec, &["clusterIP"]) == "None";
    if ports.is_empty() && !headless && typ != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut keys = std::collections::BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = s(p, &["name"]);
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else if !name.is_empty() {
            for m in validation::is_dns1123_label(name) {
                errs.push(FieldError::invalid(format!("{path}.name"), &json!(name), m));
            }
            if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(format!("{path}.name"), &json!(name)));
            }
        }
        let port = p.get("port").cloned().unwrap_or(json!(0));
        errs.extend(port_num_errors(&format!("{path}.port"), &port));
        errs.extend(protocol_errors(&format!("{path}.protocol"), p));
        match p.get("targetPort") {
            Some(Value::String(t)) => {
                for m in port_name_messages(t) {
                    errs.push(FieldError::invalid(format!("{path}.targetPort"), &json!(t), m));
                }
            }
            Some(t @ Value::Number(_)) => errs.extend(port_num_errors(&format!("{path}.targetPort"), t)),
            _ => {}
        }
        if let Some(ap) = p.get("appProtocol").and_then(Value::as_str) {
            for m in validation::is_qualified_name(ap) {
                errs.push(FieldError::invalid(format!("{path}.appProtocol"), &json!(ap), m));
            }
        }
        if typ == "ClusterIP" && p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
            errs.push(FieldError::forbidden(format!("{path}.nodePort"), "may not be used when `type` is 'ClusterIP'"));
        }
        let protocol = s(p, &["protocol"]).to_string();
        if !keys.insert((protocol.clone(), port.to_string())) {
            errs.push(duplicate_port(path, &protocol, &port));
        }
    }
}

/// The practical core of `ValidateService` (see the module doc).
pub fn validate_service_spec(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    let typ = s(spec, &["type"]);
    if typ.is_empty() {
        errs.push(FieldError::required("spec.type", ""));
    } else if !SERVICE_TYPES.contains(&typ) {
        errs.push(FieldError::not_supported("spec.type", &json!(typ), SERVICE_TYPES));
    }
    let cluster_ips = arr(spec, &["clusterIPs"]);
    if typ == "ExternalName" {
        if !cluster_ips.is_empty() || !s(spec, &["clusterIP"]).is_empty() {
            errs.push(FieldError::forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
        }
        let name = s(spec, &["externalName"]);
        if name.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else {
            for m in validation::is_dns1123_subdomain(name.strip_suffix('.').unwrap_or(name)) {
                errs.push(FieldError::invalid("spec.externalName", &json!(name), m));
            }
        }
    }
    let cluster_ip = s(spec, &["clusterIP"]);
    for (i, ip) in cluster_ips.iter().enumerate() {
        let ip = ip.as_str().unwrap_or("");
        if ip == "None" && i == 0 && cluster_ips.len() == 1 {
            continue;
        }
        errs.extend(ip_errors(format!("spec.clusterIPs[{i}]"), ip));
    }
    if let Some(first) = cluster_ips.first().and_then(Value::as_str) {
        if !cluster_ip.is_empty() && first != cluster_ip {
            errs.push(FieldError::invalid("spec.clusterIPs[0]", &json!(first), "must match `clusterIP`"));
        }
    }
    for (i, ip) in arr(spec, &["externalIPs"]).iter().enumerate() {
        errs.extend(ip_errors(format!("spec.externalIPs[{i}]"), ip.as_str().unwrap_or("")));
    }
    validate_ports(spec, &mut errs);
    match s(spec, &["sessionAffinity"]) {
        "" => errs.push(FieldError::required("spec.sessionAffinity", "")),
        "ClientIP" | "None" => {}
        other => errs.push(FieldError::not_supported("spec.sessionAffinity", &json!(other), &["ClientIP", "None"])),
    }
    for key in ["externalTrafficPolicy", "internalTrafficPolicy"] {
        let v = s(spec, &[key]);
        if !v.is_empty() && !["Cluster", "Local"].contains(&v) {
            errs.push(FieldError::not_supported(format!("spec.{key}"), &json!(v), &["Cluster", "Local"]));
        }
    }
    if !s(spec, &["externalTrafficPolicy"]).is_empty() && !externally_accessible(spec) {
        errs.push(FieldError::invalid(
            "spec.externalTrafficPolicy",
            &json!(s(spec, &["externalTrafficPolicy"])),
            "may only be set for externally-accessible services",
        ));
    }
    errs.extend(validation::validate_labels(spec.get("selector"), "spec.selector"));
    errs
}

/// kubectl's PORT(S) cell (`makePortString`).
fn ports_cell(spec: &Value) -> String {
    let ports: Vec<String> = arr(spec, &["ports"])
        .iter()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let proto = s(p, &["protocol"]);
            match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                Some(n) => format!("{port}:{n}/{proto}"),
                None => format!("{port}/{proto}"),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

/// kubectl's EXTERNAL-IP cell (`getServiceExternalIP`, wide).
fn external_ip_cell(obj: &Value) -> String {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let external: Vec<String> =
        arr(spec, &["externalIPs"]).iter().map(|v| v.as_str().unwrap_or("").to_string()).collect();
    match s(spec, &["type"]) {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let mut all: Vec<String> = arr(obj, &["status", "loadBalancer", "ingress"])
                .iter()
                .filter_map(|i| {
                    let ip = s(i, &["ip"]);
                    let host = s(i, &["hostname"]);
                    (!ip.is_empty()).then(|| ip.to_string()).or_else(|| (!host.is_empty()).then(|| host.to_string()))
                })
                .collect();
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(spec, &["externalName"]).to_string(),
        _ => "<unknown>".into(),
    }
}

/// `labels.FormatLabels` of the selector.
fn selector_cell(spec: &Value) -> String {
    match spec.get("selector").and_then(Value::as_object) {
        Some(m) if !m.is_empty() => {
            m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(",")
        }
        _ => "<none>".into(),
    }
}

impl Strategy for ServiceStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Service>(obj)
    }

    fn merge_keys(&self) -> MergeKeys {
        &[(&["spec", "ports"], ListStrategy::MergeByKey("port"))]
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

impl WriteStrategy for ServiceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // A manifest without cluster IPs (kubectl apply of the original) keeps the set ones.
        let unset = |o: &Value| s(o, &["spec", "clusterIP"]).is_empty() && arr(o, &["spec", "clusterIPs"]).is_empty();
        let to_external_name = s(new, &["spec", "type"]) == "ExternalName";
        if unset(new) && !to_external_name {
            carry(new, old, &["spec", "clusterIP"]);
            carry(new, old, &["spec", "clusterIPs"]);
        }
        set_defaults(new);
        carry(new, old, &["status"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let _: corev1::Service = crate::typed!(decode(obj));
        validate_service_spec(obj)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        // Set cluster IPs stay, unless the service becomes or stops being an ExternalName.
        let ext = |o: &Value| s(o, &["spec", "type"]) == "ExternalName";
        if ext(new) || ext(old) {
            return Vec::new();
        }
        let (new_ips, old_ips) = (arr(new, &["spec", "clusterIPs"]), arr(old, &["spec", "clusterIPs"]));
        let mut errs = Vec::new();
        for (i, old_ip) in old_ips.iter().enumerate() {
            if new_ips.get(i) != Some(old_ip) {
                let shown = new_ips.get(i).cloned().unwrap_or(Value::Null);
                errs.push(FieldError::invalid(format!("spec.clusterIPs[{i}]"), &shown, "may not change once set"));
            }
        }
        errs
    }
}

impl StatusStrategy for ServiceStrategy {
    fn reset_fields(&self, sub: &str) -> ResetFields {
        crate::registry::status_reset_fields(sub)
    }

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        if sub == "status" {
            carry(new, old, &["spec"]);
        }
    }

    fn validate_subresource(&self, sub: &str, new: &Value, _old: &Value) -> Vec<FieldError> {
        if sub != "status" {
            return Vec::new();
        }
        let mut errs = Vec::new();
        for (i, ing) in arr(new, &["status", "loadBalancer", "ingress"]).iter().enumerate() {
            let ip = s(ing, &["ip"]);
            if !ip.is_empty() {
                errs.extend(ip_errors(format!("status.loadBalancer.ingress[{i}].ip"), ip));
            }
        }
        errs
    }
}

impl FieldSelectors for ServiceStrategy {
    /// Upstream's selectable fields of services: `spec.clusterIP` and `spec.type`.
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "spec.clusterIP" => Some(s(obj, &["spec", "clusterIP"]).to_string()),
            "spec.type" => Some(s(obj, &["spec", "type"]).to_string()),
            _ => None,
        }
    }
}

impl TableStrategy for ServiceStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Type", "type determines how the Service is exposed. Defaults to ClusterIP.", 0),
            col("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned randomly.", 0),
            col("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.", 0),
            col("Port(s)", "The list of ports that are exposed by this service.", 0),
            age_column(),
            col("Selector", "Route service traffic to pods with label keys and values matching this selector.", 1),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let null = Value::Null;
        let spec = obj.get("spec").unwrap_or(&null);
        let cluster_ip = arr(spec, &["clusterIPs"]).first().and_then(Value::as_str).unwrap_or("<none>");
        vec![
            json!(s(spec, &["type"])),
            json!(cluster_ip),
            json!(external_ip_cell(obj)),
            json!(ports_cell(spec)),
            creation_age(obj, now),
            json!(selector_cell(spec)),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::core::test_util::{now, rendered, Mutation};

    fn svc() -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    }

    fn created(mutate: Mutation) -> Value {
        let mut o = svc();
        mutate(&mut o);
        ServiceStrategy.prepare_for_create(&mut o);
        o
    }

    #[test]
    fn defaults() {
        let o = created(|_| {});
        let spec = &o["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert!(spec.get("externalTrafficPolicy").is_none());
        assert_eq!(spec["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert!(spec.get("clusterIPs").is_none(), "nothing is allocated");
        let lb = created(|o| {
            o["spec"]["type"] = json!("LoadBalancer");
            o["spec"]["clusterIP"] = json!("10.96.0.10");
        });
        assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(lb["spec"]["clusterIPs"], json!(["10.96.0.10"]));
    }

    #[test]
    fn validation() {
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("headless without ports", |o| { o["spec"]["clusterIP"] = json!("None"); o["spec"]["ports"] = json!([]); }, &[]),
            ("no ports", |o| o["spec"]["ports"] = json!([]), &["spec.ports: Required value"]),
            ("bad type", |o| o["spec"]["type"] = json!("Magic"),
             &["spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""]),
            ("port zero", |o| o["spec"]["ports"][0]["port"] = json!(0),
             &["spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
               "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive"]),
            ("bad protocol", |o| o["spec"]["ports"][0]["protocol"] = json!("HTTP"),
             &["spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\""]),
            ("unnamed second port", |o| o["spec"]["ports"] = json!([{"name": "a", "port": 80}, {"port": 81}]),
             &["spec.ports[1].name: Required value"]),
            ("duplicate names", |o| o["spec"]["ports"] = json!([{"name": "a", "port": 80}, {"name": "a", "port": 81}]),
             &["spec.ports[1].name: Duplicate value: \"a\""]),
            ("duplicate port", |o| o["spec"]["ports"] = json!([{"name": "a", "port": 80}, {"name": "b", "port": 80}]),
             &["spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}"]),
            ("node port on cluster IP", |o| o["spec"]["ports"][0]["nodePort"] = json!(30080),
             &["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]),
            ("bad cluster IP", |o| o["spec"]["clusterIP"] = json!("10.0.0"),
             &["spec.clusterIPs[0]: Invalid value: \"10.0.0\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]),
            ("external name", |o| { o["spec"]["type"] = json!("ExternalName"); o["spec"]["externalName"] = json!("db.example.com."); o["spec"]["ports"] = json!([]); }, &[]),
            ("external name missing", |o| o["spec"]["type"] = json!("ExternalName"), &["spec.externalName: Required value"]),
            ("affinity", |o| o["spec"]["sessionAffinity"] = json!("Sticky"),
             &["spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\""]),
        ];
        for (name, mutate, want) in cases {
            let o = created(*mutate);
            assert_eq!(rendered(&ServiceStrategy.validate(&o)), *want, "{name}");
        }
    }

    #[test]
    fn cluster_ips_stay() {
        let old = created(|o| o["spec"]["clusterIP"] = json!("10.96.0.10"));
        let mut applied = svc();
        ServiceStrategy.prepare_for_update(&mut applied, &old);
        assert_eq!(applied["spec"]["clusterIPs"], json!(["10.96.0.10"]), "an apply without IPs keeps them");
        assert!(ServiceStrategy.validate_update(&applied, &old).is_empty());
        let mut moved = old.clone();
        moved["spec"]["clusterIP"] = json!("10.96.0.11");
        moved["spec"]["clusterIPs"] = json!(["10.96.0.11"]);
        assert_eq!(
            rendered(&ServiceStrategy.validate_update(&moved, &old)),
            ["spec.clusterIPs[0]: Invalid value: \"10.96.0.11\": may not change once set"]
        );
    }

    #[test]
    fn table_and_fields() {
        let names: Vec<&str> = ServiceStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]);
        let cases: &[(&str, Mutation, [&str; 4], &str)] = &[
            ("plain", |_| {}, ["ClusterIP", "<none>", "<none>", "80/TCP"], "app=web"),
            (
                "node port",
                |o| {
                    o["spec"]["type"] = json!("NodePort");
                    o["spec"]["clusterIP"] = json!("10.96.0.10");
                    o["spec"]["ports"] = json!([{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 53, "protocol": "UDP"}]);
                },
                ["NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP"],
                "app=web",
            ),
            (
                "load balancer",
                |o| {
                    o["spec"]["type"] = json!("LoadBalancer");
                    o["spec"]["selector"] = json!({});
                },
                ["LoadBalancer", "<none>", "<pending>", "80/TCP"],
                "<none>",
            ),
            (
                "external name",
                |o| {
                    o["spec"]["type"] = json!("ExternalName");
                    o["spec"]["externalName"] = json!("db.example.com");
                    o["spec"]["ports"] = json!([]);
                },
                ["ExternalName", "<none>", "db.example.com", "<none>"],
                "app=web",
            ),
        ];
        for (name, mutate, want, selector) in cases {
            let o = created(*mutate);
            let mut expect: Vec<Value> = want.iter().map(|w| json!(w)).collect();
            expect.push(json!("60m"));
            expect.push(json!(selector));
            assert_eq!(ServiceStrategy.cells(&o, now()), expect, "{name}");
        }
        let mut lb = created(|o| o["spec"]["type"] = json!("LoadBalancer"));
        lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"hostname": "lb.example.com"}]}});
        assert_eq!(ServiceStrategy.cells(&lb, now())[2], json!("192.0.2.1,lb.example.com"));
        let o = created(|o| o["spec"]["clusterIP"] = json!("10.96.0.10"));
        assert_eq!(ServiceStrategy.field(&o, "spec.clusterIP").as_deref(), Some("10.96.0.10"));
        assert_eq!(ServiceStrategy.field(&o, "spec.type").as_deref(), Some("ClusterIP"));
        assert_eq!(ServiceStrategy.field(&o, "spec.selector"), None);
    }

    #[test]
    fn status_writes() {
        let old = created(|_| {});
        let mut new = old.clone();
        new["spec"]["type"] = json!("NodePort");
        new["status"] = json!({"loadBalancer": {"ingress": [{"ip": "nope"}]}});
        ServiceStrategy.prepare_for_subresource("status", &mut new, &old);
        assert_eq!(new["spec"], old["spec"], "a status write keeps the spec");
        assert_eq!(
            rendered(&ServiceStrategy.validate_subresource("status", &new, &old)),
            ["status.loadBalancer.ingress[0].ip: Invalid value: \"nope\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]
        );
        let mut spec_write = old.clone();
        spec_write["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
        ServiceStrategy.prepare_for_update(&mut spec_write, &old);
        assert_eq!(spec_write["status"], old["status"], "a spec write keeps the status");
    }
}
