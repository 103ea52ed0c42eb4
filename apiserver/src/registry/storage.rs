//! storage.k8s.io/v1 `csinodes` and `csidrivers`, after upstream's
//! `pkg/registry/storage/{csinode,csidriver}/strategy.go`, the v1 defaults and
//! `pkg/apis/storage/validation`. A kubelet creates its node's CSINode at start (named as the
//! node, owned by it) and reads the CSIDrivers when it mounts a CSI volume.
//!
//! Feature-gated fields are served as 1.35 serves them by default: a CSINode driver's
//! `allocatable.count` is mutable (MutableCSINodeAllocatableCount), a CSIDriver's
//! `seLinuxMount` is defaulted and required (SELinuxMountReadWriteOncePod).

use std::sync::Arc;

use k8s_openapi::api::storage::v1 as storagev1;
use serde_json::{json, Map, Value};

use super::shared::{age_column, col, creation_age, get_at, go_string_slice, invalid_shown, str_at, too_long};
use super::{decode, decode_update, typed_roundtrip, Column, ResourceDef, Strategy, TableStrategy, WriteStrategy};
use crate::error::FieldError;
use crate::validation;

/// All storage.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "storage.k8s.io",
            version: "v1",
            resource: "csidrivers",
            singular: "csidriver",
            kind: "CSIDriver",
            namespaced: false,
            short_names: &[],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(CsiDriverStrategy),
            schema: |g| g.subschema_for::<storagev1::CSIDriver>(),
        },
        ResourceDef {
            group: "storage.k8s.io",
            version: "v1",
            resource: "csinodes",
            singular: "csinode",
            kind: "CSINode",
            namespaced: false,
            short_names: &[],
            categories: &[],
            subresources: &[],
            create_only: false,
            strategy: Arc::new(CsiNodeStrategy),
            schema: |g| g.subschema_for::<storagev1::CSINode>(),
        },
    ]
}

/// `csiNodeIDLongerMaxLength`: the strategy always allows the longer node IDs.
const CSI_NODE_ID_MAX: usize = 256;
const CSI_DRIVER_NAME_MAX: usize = 63;

fn arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get_at(v, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// `ValidateCSIDriverName` (pkg/apis/core/validation): the name of a driver in a CSINode.
fn validate_csi_driver_name(name: &str, field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push(FieldError::required(field, ""));
    }
    if name.len() > CSI_DRIVER_NAME_MAX {
        errs.push(too_long(field, CSI_DRIVER_NAME_MAX));
    }
    for m in validation::is_dns1123_subdomain(&name.to_lowercase()) {
        errs.push(FieldError::invalid(field, &json!(name), m));
    }
    errs
}

/// `csinodes`: spec.drivers validated; an existing driver's entry is immutable but for its
/// allocatable count.
pub struct CsiNodeStrategy;

fn validate_csinode_driver(d: &Value, path: &str, names: &mut std::collections::HashSet<String>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = str_at(d, &["name"]).unwrap_or("");
    errs.extend(validate_csi_driver_name(name, &format!("{path}.name")));
    let node_id = str_at(d, &["nodeID"]).unwrap_or("");
    if node_id.is_empty() {
        errs.push(FieldError::required(format!("{path}.nodeID"), ""));
    }
    if node_id.len() > CSI_NODE_ID_MAX {
        errs.push(FieldError::invalid(
            format!("{path}.nodeID"),
            &json!(node_id),
            format!("must be {CSI_NODE_ID_MAX} characters or less"),
        ));
    }
    if let Some(count) = get_at(d, &["allocatable", "count"]).and_then(Value::as_i64).filter(|c| *c < 0) {
        errs.push(FieldError::invalid(
            format!("{path}.allocatable.count"),
            &json!(count),
            "must be greater than or equal to 0",
        ));
    }
    if !names.insert(name.to_string()) {
        errs.push(FieldError::duplicate(format!("{path}.name"), &json!(name)));
    }
    let mut keys: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for key in arr(d, &["topologyKeys"]).iter().map(|k| k.as_str().unwrap_or("")) {
        if key.is_empty() {
            errs.push(FieldError::required(path, ""));
        }
        if !keys.insert(key) {
            errs.push(FieldError::duplicate(path, &json!(key)));
        }
        for m in validation::is_qualified_name(key) {
            errs.push(FieldError::invalid(path, &json!(key), m));
        }
    }
    errs
}

/// A driver entry without its allocatable count (the part that may not change).
fn without_allocatable(d: &Value) -> Value {
    let mut d = d.clone();
    if let Some(m) = d.as_object_mut() {
        m.remove("allocatable");
    }
    d
}

impl Strategy for CsiNodeStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<storagev1::CSINode>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for CsiNodeStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let _: storagev1::CSINode = crate::typed!(decode(obj));
        let mut names = std::collections::HashSet::new();
        let mut errs = Vec::new();
        for (i, d) in arr(obj, &["spec", "drivers"]).iter().enumerate() {
            errs.extend(validate_csinode_driver(d, &format!("spec.drivers[{i}]"), &mut names));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        // Each old driver with its new namesakes, by name (linear, not every pair).
        let name = |d: &Value| d.get("name").map(Value::to_string);
        let mut new_by_name: std::collections::HashMap<Option<String>, Vec<&Value>> = Default::default();
        for n in arr(new, &["spec", "drivers"]) {
            new_by_name.entry(name(n)).or_default().push(n);
        }
        for o in arr(old, &["spec", "drivers"]) {
            for n in new_by_name.get(&name(o)).map(Vec::as_slice).unwrap_or_default() {
                if without_allocatable(o) != without_allocatable(n) {
                    errs.push(FieldError::immutable("spec.drivers", &without_allocatable(n)));
                }
            }
        }
        errs
    }
}

impl TableStrategy for CsiNodeStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            crate::registry::Column {
                name: "Drivers",
                type_: "integer",
                format: "",
                description: "Drivers indicates the number of CSI drivers registered on the node",
                priority: 0,
            },
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        vec![json!(arr(obj, &["spec", "drivers"]).len()), creation_age(obj, now)]
    }
}

/// `csidrivers`: the v1 defaults, validation, and `attachRequired` and
/// `volumeLifecycleModes` immutable.
pub struct CsiDriverStrategy;

fn default_key(spec: &mut Map<String, Value>, key: &str, value: Value) {
    if spec.get(key).is_none_or(Value::is_null) {
        spec.insert(key.into(), value);
    }
}

/// `SetDefaults_CSIDriver`.
pub fn set_csidriver_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    default_key(spec, "attachRequired", json!(true));
    default_key(spec, "podInfoOnMount", json!(false));
    default_key(spec, "storageCapacity", json!(false));
    default_key(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    if spec.get("volumeLifecycleModes").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
    default_key(spec, "requiresRepublish", json!(false));
    default_key(spec, "seLinuxMount", json!(false));
}

fn validate_csidriver_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, field) in [
        ("attachRequired", "spec.attachedRequired"),
        ("podInfoOnMount", "spec.podInfoOnMount"),
        ("storageCapacity", "spec.storageCapacity"),
        ("seLinuxMount", "spec.seLinuxMount"),
    ] {
        if spec.get(key).is_none_or(Value::is_null) {
            errs.push(FieldError::required(field, ""));
        }
    }
    const POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
    if let Some(p) = spec.get("fsGroupPolicy").and_then(Value::as_str).filter(|p| !POLICIES.contains(p)) {
        errs.push(FieldError::not_supported("spec.fsGroupPolicy", &json!(p), POLICIES));
    }
    let mut audiences: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, t) in arr(spec, &["tokenRequests"]).iter().enumerate() {
        let path = format!("spec.tokenRequests[{i}]");
        let audience = str_at(t, &["audience"]).unwrap_or("");
        if !audiences.insert(audience) {
            errs.push(FieldError::duplicate(format!("{path}.audience"), &json!(audience)));
            continue;
        }
        if let Some(secs) = t.get("expirationSeconds").and_then(Value::as_i64) {
            if secs < 600 {
                errs.push(FieldError::invalid(
                    format!("{path}.expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if secs > 1 << 32 {
                errs.push(FieldError::invalid(
                    format!("{path}.expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
    }
    for mode in arr(spec, &["volumeLifecycleModes"]).iter().map(|m| m.as_str().unwrap_or("")) {
        if !["Persistent", "Ephemeral"].contains(&mode) {
            errs.push(FieldError::not_supported(
                "spec.volumeLifecycleModes",
                &json!(mode),
                &["Persistent", "Ephemeral"],
            ));
        }
    }
    if let Some(p) = spec.get("nodeAllocatableUpdatePeriodSeconds").and_then(Value::as_i64).filter(|p| *p < 10) {
        errs.push(FieldError::invalid(
            "spec.nodeAllocatableUpdatePeriodSeconds",
            &json!(p),
            "must be greater than or equal to 10 seconds",
        ));
    }
    errs
}

fn bool_cell(obj: &Value, key: &str, default: bool) -> Value {
    json!(get_at(obj, &["spec", key]).and_then(Value::as_bool).unwrap_or(default))
}

impl Strategy for CsiDriverStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<storagev1::CSIDriver>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for CsiDriverStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_csidriver_defaults(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        set_csidriver_defaults(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let _: storagev1::CSIDriver = crate::typed!(decode(obj));
        validate_csidriver_spec(obj.get("spec").unwrap_or(&Value::Null))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let _: (storagev1::CSIDriver, storagev1::CSIDriver) = crate::typed!(decode_update(new, old));
        let mut errs = Vec::new();
        for (key, field) in
            [("attachRequired", "spec.attachedRequired"), ("volumeLifecycleModes", "spec.volumeLifecycleModes")]
        {
            let (n, o) = (get_at(new, &["spec", key]), get_at(old, &["spec", key]));
            if n == o {
                continue;
            }
            match n.and_then(Value::as_array) {
                // Go's `%#v` of the `[]storage.VolumeLifecycleMode`.
                Some(modes) => {
                    let modes: Vec<String> = modes.iter().map(|m| m.as_str().unwrap_or("").to_string()).collect();
                    let shown = go_string_slice(&modes).replacen("[]string", "[]storage.VolumeLifecycleMode", 1);
                    errs.push(invalid_shown(field, &shown, "field is immutable"));
                }
                None => errs.push(FieldError::immutable(field, n.unwrap_or(&Value::Null))),
            }
        }
        errs
    }
}

impl TableStrategy for CsiDriverStrategy {
    fn columns(&self) -> Vec<Column> {
        let boolean = |name, description| Column { name, type_: "boolean", format: "", description, priority: 0 };
        vec![
            boolean("AttachRequired", "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting."),
            boolean("PodInfoOnMount", "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true."),
            boolean("StorageCapacity", "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true."),
            col("TokenRequests", "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication.", 0),
            boolean("RequiresRepublish", "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false."),
            col("Modes", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports.", 0),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let audiences: Vec<&str> =
            arr(obj, &["spec", "tokenRequests"]).iter().map(|t| str_at(t, &["audience"]).unwrap_or("")).collect();
        let modes: Vec<&str> = arr(obj, &["spec", "volumeLifecycleModes"]).iter().filter_map(Value::as_str).collect();
        vec![
            bool_cell(obj, "attachRequired", true),
            bool_cell(obj, "podInfoOnMount", false),
            bool_cell(obj, "storageCapacity", false),
            json!(if audiences.is_empty() { "<unset>".to_string() } else { audiences.join(",") }),
            bool_cell(obj, "requiresRepublish", false),
            json!(if modes.is_empty() { "<none>".to_string() } else { modes.join(",") }),
            creation_age(obj, now),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Mutation = fn(&mut Value);

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    fn now() -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc)
    }

    fn csinode() -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
               "metadata": {"name": "n1", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1",
                                     "topologyKeys": ["topology.example.com/zone"], "allocatable": {"count": 8}}]}})
    }

    fn csidriver() -> Value {
        let mut d = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
               "metadata": {"name": "csi.example.com", "creationTimestamp": "2024-05-01T11:00:00Z"}, "spec": {}});
        CsiDriverStrategy.prepare_for_create(&mut d);
        d
    }

    #[test]
    fn csinode_validation() {
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("no drivers", |o| o["spec"]["drivers"] = json!([]), &[]),
            ("no node ID", |o| o["spec"]["drivers"][0]["nodeID"] = json!(""), &["spec.drivers[0].nodeID: Required value"]),
            ("long node ID", |o| o["spec"]["drivers"][0]["nodeID"] = json!("x".repeat(257)),
             &["NODEID"]),
            ("bad driver name", |o| o["spec"]["drivers"][0]["name"] = json!("csi_example"),
             &["spec.drivers[0].name: Invalid value: \"csi_example\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
            ("upper-case driver name", |o| o["spec"]["drivers"][0]["name"] = json!("CSI.Example.com"), &[]),
            ("duplicate driver", |o| {
                let d = o["spec"]["drivers"][0].clone();
                o["spec"]["drivers"].as_array_mut().unwrap().push(d);
            }, &["spec.drivers[1].name: Duplicate value: \"csi.example.com\""]),
            ("duplicate key", |o| o["spec"]["drivers"][0]["topologyKeys"] = json!(["a", "a"]),
             &["spec.drivers[0]: Duplicate value: \"a\""]),
            ("negative count", |o| o["spec"]["drivers"][0]["allocatable"]["count"] = json!(-1),
             &["spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0"]),
        ];
        for (name, mutate, want) in cases {
            let mut o = csinode();
            mutate(&mut o);
            let got = rendered(&CsiNodeStrategy.validate(&o));
            if want == &["NODEID"] {
                assert_eq!(got.len(), 1, "{name}");
                assert!(got[0].starts_with("spec.drivers[0].nodeID: Invalid value: \"xxx"), "{name}: {got:?}");
                assert!(got[0].ends_with("\": must be 256 characters or less"), "{name}: {got:?}");
            } else {
                assert_eq!(got, *want, "{name}");
            }
        }
    }

    #[test]
    fn csinode_updates() {
        let old = csinode();
        let mut count = old.clone();
        count["spec"]["drivers"][0]["allocatable"]["count"] = json!(4);
        assert!(CsiNodeStrategy.validate_update(&count, &old).is_empty(), "the count may change");
        let mut added = old.clone();
        added["spec"]["drivers"].as_array_mut().unwrap().push(json!({"name": "b.example.com", "nodeID": "x"}));
        assert!(CsiNodeStrategy.validate_update(&added, &old).is_empty(), "drivers may come");
        let mut moved = old.clone();
        moved["spec"]["drivers"][0]["nodeID"] = json!("n2");
        let errs = CsiNodeStrategy.validate_update(&moved, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.drivers");
        assert!(errs[0].message.ends_with("field is immutable"), "{}", errs[0].message);
    }

    #[test]
    fn csinode_table() {
        let names: Vec<&str> = CsiNodeStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Drivers", "Age"]);
        assert_eq!(CsiNodeStrategy.cells(&csinode(), now()), vec![json!(1), json!("60m")]);
        assert_eq!(CsiNodeStrategy.cells(&json!({}), now()), vec![json!(0), json!("<unknown>")]);
    }

    #[test]
    fn csidriver_defaults_and_validation() {
        let d = csidriver();
        assert_eq!(
            d["spec"],
            json!({"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
                   "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
                   "requiresRepublish": false, "seLinuxMount": false})
        );
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("policy", |o| o["spec"]["fsGroupPolicy"] = json!("Always"),
             &["spec.fsGroupPolicy: Unsupported value: \"Always\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\""]),
            ("mode", |o| o["spec"]["volumeLifecycleModes"] = json!(["Temporary"]),
             &["spec.volumeLifecycleModes: Unsupported value: \"Temporary\": supported values: \"Persistent\", \"Ephemeral\""]),
            ("tokens", |o| o["spec"]["tokenRequests"] = json!([{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}]),
             &["spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
               "spec.tokenRequests[1].audience: Duplicate value: \"a\""]),
            ("period", |o| o["spec"]["nodeAllocatableUpdatePeriodSeconds"] = json!(5),
             &["spec.nodeAllocatableUpdatePeriodSeconds: Invalid value: 5: must be greater than or equal to 10 seconds"]),
        ];
        for (name, mutate, want) in cases {
            let mut o = csidriver();
            mutate(&mut o);
            assert_eq!(rendered(&CsiDriverStrategy.validate(&o)), *want, "{name}");
        }
        let mut bare = csidriver();
        bare["spec"] = json!({});
        assert_eq!(
            rendered(&CsiDriverStrategy.validate(&bare)),
            [
                "spec.attachedRequired: Required value",
                "spec.podInfoOnMount: Required value",
                "spec.storageCapacity: Required value",
                "spec.seLinuxMount: Required value",
            ]
        );
    }

    #[test]
    fn csidriver_updates() {
        let old = csidriver();
        let mut new = old.clone();
        new["spec"]["podInfoOnMount"] = json!(true);
        new["spec"]["requiresRepublish"] = json!(true);
        assert!(CsiDriverStrategy.validate_update(&new, &old).is_empty(), "mutable fields");
        new["spec"]["attachRequired"] = json!(false);
        new["spec"]["volumeLifecycleModes"] = json!(["Ephemeral"]);
        assert_eq!(
            rendered(&CsiDriverStrategy.validate_update(&new, &old)),
            [
                "spec.attachedRequired: Invalid value: false: field is immutable",
                "spec.volumeLifecycleModes: Invalid value: []storage.VolumeLifecycleMode{\"Ephemeral\"}: field is immutable",
            ]
        );
        // An update without the defaulted fields gets them again, so it changes nothing.
        let mut bare = old.clone();
        bare["spec"] = json!({});
        CsiDriverStrategy.prepare_for_update(&mut bare, &old);
        assert!(CsiDriverStrategy.validate_update(&bare, &old).is_empty());
    }

    #[test]
    fn csidriver_table() {
        let names: Vec<&str> = CsiDriverStrategy.columns().iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "AttachRequired",
                "PodInfoOnMount",
                "StorageCapacity",
                "TokenRequests",
                "RequiresRepublish",
                "Modes",
                "Age"
            ]
        );
        let mut d = csidriver();
        assert_eq!(
            CsiDriverStrategy.cells(&d, now()),
            vec![
                json!(true),
                json!(false),
                json!(false),
                json!("<unset>"),
                json!(false),
                json!("Persistent"),
                json!("60m")
            ]
        );
        d["spec"]["tokenRequests"] = json!([{"audience": "a"}, {"audience": "b"}]);
        d["spec"]["volumeLifecycleModes"] = json!(["Persistent", "Ephemeral"]);
        let cells = CsiDriverStrategy.cells(&d, now());
        assert_eq!((&cells[3], &cells[5]), (&json!("a,b"), &json!("Persistent,Ephemeral")));
    }
}
