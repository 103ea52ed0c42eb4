//! `pods` (`pkg/registry/core/pod`): the v1 defaults applied on every write, a `status`
//! subresource (a spec write keeps the stored status, a status write keeps the spec), the
//! status a new pod starts with (`Pending` and its QoS class), upstream's selectable fields
//! (a kubelet lists and watches `spec.nodeName=<node>`) and kubectl's columns.
//!
//! Validation is in [`super::pod_validation`] (what it checks and what it does not). kustos
//! has no scheduler and no `pods/binding`: a pod runs where its `spec.nodeName` says. Not
//! done: graceful deletion (a DELETE removes the pod at once, as with a grace period of 0),
//! the `ephemeralcontainers`, `resize`, `eviction`, `log`, `exec` and `binding` subresources,
//! and the admission plugins that fill a pod in upstream (ServiceAccount, Priority,
//! DefaultTolerationSeconds).

use k8s_openapi::api::core::v1 as corev1;
use serde_json::{json, Value};

use super::pod_validation::{validate_pod_spec, validate_pod_spec_update, validate_pod_status_update};
use crate::error::FieldError;
use crate::registry::shared::{age_column, carry, col, creation_age, get_at, str_at};
use crate::registry::{
    decode, human_duration, typed_roundtrip, Column, FieldSelectors, ListStrategy, MergeKeys, ResetFields,
    StatusStrategy, Strategy, TableStrategy, WriteStrategy,
};

/// `pods` and `pods/status`.
pub struct PodStrategy;

/// `SetDefaults_Container`'s pull policy: `Always` for `:latest` or no tag, else `IfNotPresent`
/// (a digest counts as a tag).
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag follows the last ':' after the last '/' (a registry port is no tag).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_str(m: &mut serde_json::Map<String, Value>, key: &str, value: &str) {
    let empty = m.get(key).is_none_or(|v| v.is_null() || v.as_str() == Some(""));
    if empty {
        m.insert(key.into(), json!(value));
    }
}

fn default_container(c: &mut Value, host_network: bool) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    default_str(m, "imagePullPolicy", default_pull_policy(&image));
    default_str(m, "terminationMessagePath", "/dev/termination-log");
    default_str(m, "terminationMessagePolicy", "File");
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default_str(p, "protocol", "TCP");
            // SetDefaults_PodSpec: on the host network a port is its host port.
            if host_network && p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                if let Some(cp) = p.get("containerPort").cloned() {
                    p.insert("hostPort".into(), cp);
                }
            }
        }
    }
    // SetDefaults_Pod: requests default to limits.
    let limits = m.get("resources").and_then(|r| r.get("limits")).and_then(Value::as_object).cloned();
    if let (Some(limits), Some(res)) = (limits, m.get_mut("resources").and_then(Value::as_object_mut)) {
        let requests = res.entry("requests").or_insert_with(|| json!({}));
        if let Some(req) = requests.as_object_mut() {
            for (k, v) in limits {
                req.entry(k).or_insert(v);
            }
        }
    }
}

/// The v1 defaults of a pod (`SetDefaults_Pod`, `_PodSpec`, `_Container`, `_ContainerPort`).
pub fn set_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    default_str(spec, "restartPolicy", "Always");
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "schedulerName", "default-scheduler");
    spec.entry("terminationGracePeriodSeconds").or_insert(json!(30));
    spec.entry("securityContext").or_insert(json!({}));
    spec.entry("enableServiceLinks").or_insert(json!(true));
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool).unwrap_or(false);
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(|c| default_container(c, host_network));
        }
    }
}

/// A resource quantity as a number (for comparing requests with limits); None if it is no
/// quantity.
fn quantity(q: &str) -> Option<f64> {
    let split = q.find(|ch: char| ch.is_ascii_alphabetic() && ch != 'e' && ch != 'E').unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    num.parse::<f64>().ok().map(|n| n * factor)
}

/// `qos.GetPodQOS` for cpu and memory: BestEffort with no requests or limits at all,
/// Guaranteed when every container limits both and requests what it limits, else Burstable.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| spec.get(*l).and_then(Value::as_array).map(|a| a.iter()).into_iter().flatten())
        .collect();
    let res = |c: &Value, kind: &str, r: &str| {
        get_at(c, &["resources", kind, r]).and_then(|v| v.as_str().map(str::to_string).or_else(|| Some(v.to_string())))
    };
    let compute = ["cpu", "memory"];
    let any = containers.iter().any(|c| {
        compute.iter().any(|r| {
            ["requests", "limits"].iter().any(|k| res(c, k, r).and_then(|q| quantity(&q)).is_some_and(|q| q > 0.0))
        })
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        compute.iter().all(|r| {
            let limit = res(c, "limits", r).and_then(|q| quantity(&q));
            let request = res(c, "requests", r).and_then(|q| quantity(&q)).or(limit);
            limit.is_some_and(|l| l > 0.0) && request == limit
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get_at(v, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn none_if_empty(s: &str) -> Value {
    json!(if s.is_empty() { "<none>" } else { s })
}

/// `printPod`'s Status column: the phase or reason, then what the init containers and
/// containers say, then Terminating.
pub fn pod_status_cell(obj: &Value) -> String {
    let status = obj.get("status").cloned().unwrap_or(Value::Null);
    let mut reason = str_at(&status, &["phase"]).unwrap_or("").to_string();
    if let Some(r) = str_at(&status, &["reason"]).filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let init_specs = arr(obj, &["spec", "initContainers"]);
    let mut initializing = false;
    for (i, cs) in arr(&status, &["initContainerStatuses"]).iter().enumerate() {
        let terminated = get_at(cs, &["state", "terminated"]);
        let waiting = get_at(cs, &["state", "waiting"]);
        let exit = terminated.and_then(|t| t.get("exitCode")).and_then(Value::as_i64);
        if exit == Some(0) {
            continue;
        }
        let sidecar = init_specs.get(i).and_then(|c| c.get("restartPolicy")).and_then(Value::as_str) == Some("Always");
        if sidecar && cs.get("started").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(t) = terminated {
            let r = t.get("reason").and_then(Value::as_str).unwrap_or("");
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                format!("Init:Signal:{sig}")
            } else {
                format!("Init:ExitCode:{}", exit.unwrap_or(0))
            };
        } else if let Some(r) = waiting
            .and_then(|w| w.get("reason"))
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            reason = format!("Init:{r}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut has_running = false;
        for cs in arr(&status, &["containerStatuses"]).iter().rev() {
            let state = |k: &str| get_at(cs, &["state", k]);
            let rs =
                |v: Option<&Value>| v.and_then(|w| w.get("reason")).and_then(Value::as_str).unwrap_or("").to_string();
            if !rs(state("waiting")).is_empty() {
                reason = rs(state("waiting"));
            } else if let Some(t) = state("terminated") {
                reason = if !rs(Some(t)).is_empty() {
                    rs(Some(t))
                } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                    format!("Signal:{sig}")
                } else {
                    format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0))
                };
            } else if state("running").is_some() && cs.get("ready").and_then(Value::as_bool) == Some(true) {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            let ready = arr(&status, &["conditions"])
                .iter()
                .any(|c| str_at(c, &["type"]) == Some("Ready") && str_at(c, &["status"]) == Some("True"));
            reason = if ready { "Running" } else { "NotReady" }.to_string();
        }
    }
    if get_at(obj, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null()) {
        reason = if str_at(&status, &["reason"]) == Some("NodeLost") { "Unknown" } else { "Terminating" }.to_string();
    }
    reason
}

/// The Restarts cell: the count, and how long ago the last container restarted.
fn restarts_cell(status: &Value, now: chrono::DateTime<chrono::Utc>) -> String {
    let mut count = 0;
    let mut last: Option<chrono::DateTime<chrono::Utc>> = None;
    for cs in arr(status, &["initContainerStatuses"]).iter().chain(arr(status, &["containerStatuses"])) {
        count += cs.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        let finished = str_at(cs, &["lastState", "terminated", "finishedAt"])
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc));
        if finished.is_some() && (last.is_none() || finished > last) {
            last = finished;
        }
    }
    match last {
        Some(t) if count > 0 => format!("{count} ({} ago)", human_duration((now - t).num_seconds().max(0))),
        _ => count.to_string(),
    }
}

impl Strategy for PodStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<corev1::Pod>(obj)
    }

    /// As upstream's v1 conversion: a pod that names its service account only through the
    /// deprecated `spec.serviceAccount` runs as that one.
    fn converted(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
        let named = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        if named(spec.get("serviceAccountName")).is_none() {
            if let Some(deprecated) = named(spec.get("serviceAccount")) {
                spec.insert("serviceAccountName".into(), Value::String(deprecated));
            }
        }
    }

    fn merge_keys(&self) -> MergeKeys {
        &[
            (&["spec", "containers"], ListStrategy::MergeByKey("name")),
            (&["spec", "initContainers"], ListStrategy::MergeByKey("name")),
            (&["spec", "volumes"], ListStrategy::MergeByKey("name")),
            (&["status", "conditions"], ListStrategy::MergeByKey("type")),
            (&["status", "podIPs"], ListStrategy::MergeByKey("ip")),
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

impl WriteStrategy for PodStrategy {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        set_defaults(obj);
        let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
        let gated = !arr(obj, &["spec", "schedulingGates"]).is_empty();
        if let Some(m) = obj.as_object_mut() {
            let mut status = json!({"phase": "Pending", "qosClass": qos});
            if gated {
                status["conditions"] = json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates"}]);
            }
            m.insert("status".into(), status);
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        set_defaults(new);
        carry(new, old, &["status"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let _: corev1::Pod = crate::typed!(decode(obj));
        validate_pod_spec(obj.get("spec").unwrap_or(&Value::Null))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_pod_spec_update(new, old)
    }
}

impl StatusStrategy for PodStrategy {
    fn reset_fields(&self, sub: &str) -> ResetFields {
        crate::registry::status_reset_fields(sub)
    }

    fn prepare_for_subresource(&self, sub: &str, new: &mut Value, old: &Value) {
        if sub == "status" {
            carry(new, old, &["spec"]);
        }
    }

    fn validate_subresource(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        match sub {
            "status" => validate_pod_status_update(new, old),
            _ => Vec::new(),
        }
    }
}

impl FieldSelectors for PodStrategy {
    /// `PodToSelectableFields`.
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        let s = |p: &[&str]| str_at(obj, p).unwrap_or("").to_string();
        let ips: Vec<String> =
            arr(obj, &["status", "podIPs"]).iter().map(|ip| str_at(ip, &["ip"]).unwrap_or("").to_string()).collect();
        let v = match path {
            "spec.nodeName" => s(&["spec", "nodeName"]),
            "spec.restartPolicy" => s(&["spec", "restartPolicy"]),
            "spec.schedulerName" => s(&["spec", "schedulerName"]),
            "spec.serviceAccountName" => s(&["spec", "serviceAccountName"]),
            "spec.hostNetwork" => {
                get_at(obj, &["spec", "hostNetwork"]).and_then(Value::as_bool).unwrap_or(false).to_string()
            }
            "status.phase" => s(&["status", "phase"]),
            "status.podIP" => ips.first().cloned().unwrap_or_default(),
            "status.podIPs" => ips.join(","),
            "status.nominatedNodeName" => s(&["status", "nominatedNodeName"]),
            _ => return None,
        };
        Some(v)
    }
}

impl TableStrategy for PodStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Ready", "The aggregate readiness state of this pod for accepting traffic.", 0),
            col("Status", "The aggregate status of the containers in this pod.", 0),
            col(
                "Restarts",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                0,
            ),
            age_column(),
            col("IP", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
            col("Node", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for preemption on the next scheduling cycle.", 1),
            col("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.", 1),
            col("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let status = obj.get("status").cloned().unwrap_or(Value::Null);
        let total = arr(obj, &["spec", "containers"]).len()
            + arr(obj, &["spec", "initContainers"])
                .iter()
                .filter(|c| str_at(c, &["restartPolicy"]) == Some("Always"))
                .count();
        let ready = arr(&status, &["containerStatuses"])
            .iter()
            .chain(arr(&status, &["initContainerStatuses"]))
            .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
            .count();
        let ip = arr(&status, &["podIPs"]).first().and_then(|ip| str_at(ip, &["ip"])).unwrap_or("").to_string();
        let gates = arr(obj, &["spec", "readinessGates"]);
        let gates_cell = if gates.is_empty() {
            "<none>".to_string()
        } else {
            let met = gates
                .iter()
                .filter(|g| {
                    let t = str_at(g, &["conditionType"]).unwrap_or("");
                    arr(&status, &["conditions"])
                        .iter()
                        .any(|c| str_at(c, &["type"]) == Some(t) && str_at(c, &["status"]) == Some("True"))
                })
                .count();
            format!("{met}/{}", gates.len())
        };
        vec![
            json!(format!("{ready}/{total}")),
            json!(pod_status_cell(obj)),
            json!(restarts_cell(&status, now)),
            creation_age(obj, now),
            none_if_empty(&ip),
            none_if_empty(str_at(obj, &["spec", "nodeName"]).unwrap_or("")),
            none_if_empty(str_at(&status, &["nominatedNodeName"]).unwrap_or("")),
            json!(gates_cell),
        ]
    }
}

/// A status object to put a test pod in (tests elsewhere build on it).
#[cfg(test)]
pub(crate) fn running_status() -> Value {
    json!({"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
           "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2,
                                  "state": {"running": {}},
                                  "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-05-01T11:55:00Z"}}}]})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::core::test_util::{now, rendered, Mutate};

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "nginx"}]}})
    }

    #[test]
    fn the_deprecated_service_account_field_names_the_service_account() {
        let with = |spec: Value| {
            let mut p = pod();
            p["spec"].as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
            PodStrategy.converted(&mut p);
            p["spec"]["serviceAccountName"].clone()
        };
        assert_eq!(with(json!({"serviceAccount": "web"})), json!("web"));
        assert_eq!(with(json!({"serviceAccount": "old", "serviceAccountName": "new"})), json!("new"));
        assert_eq!(with(json!({"serviceAccount": "web", "serviceAccountName": ""})), json!("web"));
        assert_eq!(with(json!({})), Value::Null, "no service account named: none made up here");
    }

    #[test]
    fn pull_policy_follows_the_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("registry:5000/nginx", "Always"),
            ("registry:5000/nginx:1.27", "IfNotPresent"),
            ("nginx@sha256:abcd", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn create_defaults_and_status() {
        let mut p = pod();
        p["status"] = json!({"phase": "Running"});
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
        PodStrategy.prepare_for_create(&mut p);
        let spec = &p["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(p["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}), "a client's status is replaced");
        assert!(PodStrategy.validate(&p).is_empty(), "{:?}", rendered(&PodStrategy.validate(&p)));
    }

    #[test]
    fn qos_classes() {
        let cases: &[(&str, Value, &str)] = &[
            ("nothing", json!({"containers": [{}]}), "BestEffort"),
            (
                "limits only",
                json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
                "Guaranteed",
            ),
            (
                "equal in other units",
                json!({"containers": [{"resources": {
                "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1024Mi"}}}]}),
                "Guaranteed",
            ),
            (
                "requests below",
                json!({"containers": [{"resources": {
                "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]}),
                "Burstable",
            ),
            ("one of two", json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}, {}]}), "Burstable"),
        ];
        for (name, spec, want) in cases {
            assert_eq!(qos_class(spec), *want, "{name}");
        }
    }

    #[test]
    fn writes_keep_what_they_do_not_own() {
        let mut old = pod();
        PodStrategy.prepare_for_create(&mut old);
        old["status"] = running_status();
        let mut new = old.clone();
        new["status"] = json!({"phase": "Failed"});
        new["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        PodStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["status"], old["status"], "a spec write keeps the status");
        assert_eq!(new["spec"]["containers"][0]["image"], "nginx:1.28");
        let mut st = old.clone();
        st["spec"]["nodeName"] = json!("n2");
        st["status"]["phase"] = json!("Succeeded");
        PodStrategy.prepare_for_subresource("status", &mut st, &old);
        assert_eq!(st["spec"], old["spec"], "a status write keeps the spec");
        assert_eq!(st["status"]["phase"], "Succeeded");
    }

    #[test]
    fn selectable_fields() {
        let mut p = pod();
        PodStrategy.prepare_for_create(&mut p);
        p["status"] = running_status();
        let cases = [
            ("spec.nodeName", Some("n1")),
            ("spec.restartPolicy", Some("Always")),
            ("spec.schedulerName", Some("default-scheduler")),
            ("spec.serviceAccountName", Some("")),
            ("spec.hostNetwork", Some("false")),
            ("status.phase", Some("Running")),
            ("status.podIP", Some("10.0.0.5")),
            ("status.podIPs", Some("10.0.0.5")),
            ("status.nominatedNodeName", Some("")),
            ("spec.containers", None),
        ];
        for (field, want) in cases {
            assert_eq!(PodStrategy.field(&p, field).as_deref(), want, "{field}");
        }
    }

    #[test]
    fn table_cells() {
        let names: Vec<&str> = PodStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]);
        let cases: &[(&str, Mutate, Vec<Value>)] = &[
            (
                "new",
                Box::new(|p| p["status"] = json!({"phase": "Pending"})),
                vec![
                    json!("0/1"),
                    json!("Pending"),
                    json!("0"),
                    json!("60m"),
                    json!("<none>"),
                    json!("n1"),
                    json!("<none>"),
                    json!("<none>"),
                ],
            ),
            (
                "running",
                Box::new(|p| p["status"] = running_status()),
                vec![
                    json!("1/1"),
                    json!("Running"),
                    json!("2 (5m ago)"),
                    json!("60m"),
                    json!("10.0.0.5"),
                    json!("n1"),
                    json!("<none>"),
                    json!("<none>"),
                ],
            ),
            (
                "image pull",
                Box::new(|p| {
                    p["status"] = json!({"phase": "Pending",
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}}]})
                }),
                vec![
                    json!("0/1"),
                    json!("ErrImagePull"),
                    json!("0"),
                    json!("60m"),
                    json!("<none>"),
                    json!("n1"),
                    json!("<none>"),
                    json!("<none>"),
                ],
            ),
            (
                "init",
                Box::new(|p| {
                    p["spec"]["initContainers"] = json!([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]);
                    p["status"] = json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "a", "state": {"terminated": {"exitCode": 0}}},
                    {"name": "b", "state": {"running": {}}}]});
                }),
                vec![
                    json!("0/1"),
                    json!("Init:1/2"),
                    json!("0"),
                    json!("60m"),
                    json!("<none>"),
                    json!("n1"),
                    json!("<none>"),
                    json!("<none>"),
                ],
            ),
            (
                "terminating with gates",
                Box::new(|p| {
                    p["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:00Z");
                    p["spec"]["readinessGates"] = json!([{"conditionType": "x/ready"}]);
                    p["status"] = json!({"phase": "Running", "nominatedNodeName": "n2"});
                }),
                vec![
                    json!("0/1"),
                    json!("Terminating"),
                    json!("0"),
                    json!("60m"),
                    json!("<none>"),
                    json!("n1"),
                    json!("n2"),
                    json!("0/1"),
                ],
            ),
        ];
        for (name, mutate, want) in cases {
            let mut p = pod();
            mutate(&mut p);
            assert_eq!(&PodStrategy.cells(&p, now()), want, "{name}");
        }
    }

    #[test]
    fn validation_fails_closed_and_checks_the_spec() {
        let mut p = pod();
        p["spec"]["containers"] = json!("nope");
        assert!(rendered(&PodStrategy.validate(&p))[0].contains("does not decode"));
        let mut p = pod();
        p["spec"]["containers"] = json!([]);
        PodStrategy.prepare_for_create(&mut p);
        assert_eq!(rendered(&PodStrategy.validate(&p)), ["spec.containers: Required value"]);
    }
}
