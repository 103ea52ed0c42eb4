//! Discovery documents, generated from the registry of served kinds.
//!
//! - `/api` → [`api_versions`] (`APIVersions`), `/apis` → [`api_group_list`] (`APIGroupList`),
//!   `/apis/<g>` → [`api_group`] (`APIGroup`), `/api/v1` and `/apis/<g>/<v>` →
//!   [`api_resource_list`] (`APIResourceList`), `/version` → [`version_info`].
//! - Aggregated discovery: `/api` and `/apis` with
//!   `Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` answer with
//!   one `APIGroupDiscoveryList` holding every group, version and resource ([`aggregated`]).
//!   client-go (kubectl 1.27 and later) asks for v2, then v2beta1, then plain JSON, and picks the parser
//!   from the response `Content-Type` ([`aggregated_content_type`]); [`wants_aggregated`] reads
//!   the `Accept` header the same way kube-apiserver does.
//!
//! Every function is pure: it only reads the registry and returns a `serde_json::Value`.

use base64::Engine;
use serde_json::{json, Value};

use crate::registry::{resource_verbs, subresource_kind, subresource_verbs, Registry, ResourceDef};

/// The Kubernetes release whose API kustos speaks (what `/version` and OpenAPI `info` report).
pub const KUBE_MAJOR: &str = "1";
/// See [`KUBE_MAJOR`].
pub const KUBE_MINOR: &str = "37";
/// The oldest minor release whose API kustos stays compatible with (`/version`'s
/// `minCompatibilityMinor`: one before [`KUBE_MINOR`], as kube-apiserver reports by default).
pub const MIN_COMPATIBILITY_MINOR: &str = "36";
/// `gitVersion` of `/version`: semver with build metadata, like other distributions
/// (`v1.37.0+k3s1`), so kubectl's version-skew check parses it as 1.37.
pub const GIT_VERSION: &str = "v1.37.0+kustos";

/// Content type of an aggregated discovery response, by version (`v2` or `v2beta1`).
pub fn aggregated_content_type(version: &str) -> &'static str {
    if version == "v2beta1" {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    }
}

/// Which aggregated discovery version the `Accept` header asks for: `Some("v2")`,
/// `Some("v2beta1")`, or `None` for the plain (unaggregated) documents.
///
/// Media ranges are tried by descending `q` (ties keep their order); the first one this server
/// can produce wins. A plain `application/json` (or `*/*`) before any aggregated range means
/// plain discovery.
pub fn wants_aggregated(accept: &str) -> Option<&'static str> {
    /// (q, parameters other than q, lower-case media type)
    type Range = (f32, Vec<(String, String)>, String);
    let mut ranges: Vec<Range> = Vec::new();
    for part in accept.split(',') {
        let mut pieces = part.split(';');
        let essence = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
        if essence.is_empty() {
            continue;
        }
        let mut q = 1.0f32;
        let mut params = Vec::new();
        for p in pieces {
            let Some((k, v)) = p.split_once('=') else { continue };
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string());
            if k == "q" {
                q = v.parse().unwrap_or(0.0);
            } else {
                params.push((k, v));
            }
        }
        if q > 0.0 {
            ranges.push((q, params, essence));
        }
    }
    // Stable sort: equal q keeps the client's order.
    ranges.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    for (_, params, essence) in &ranges {
        if !matches!(essence.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        match (get("g"), get("v"), get("as")) {
            (None, None, None) => return None,
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => return Some("v2"),
            (Some("apidiscovery.k8s.io"), Some("v2beta1"), Some("APIGroupDiscoveryList")) => return Some("v2beta1"),
            // Another typed form (e.g. `as=Table`): not something discovery serves.
            _ => continue,
        }
    }
    None
}

/// `/api`: the core group's versions.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_version(group: &str, version: &str) -> Value {
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    json!({"groupVersion": gv, "version": version})
}

fn group_json(reg: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = reg.versions(group).iter().map(|v| group_version(group, v)).collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`: every named group (the core group is at `/api`).
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg.groups().into_iter().filter(|g| !g.is_empty()).map(|g| group_json(reg, g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`; None when the group is not served.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    if group.is_empty() || !reg.groups().contains(&group) {
        return None;
    }
    let mut g = group_json(reg, group);
    if let Value::Object(m) = &mut g {
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
    }
    Some(g)
}

/// Upstream's `storageVersionHash`: base64 of the first 8 bytes of
/// sha256("<group>/<version>/<kind>") of the storage version (for a kind kept in another
/// kind's storage, that kind's: events.k8s.io/v1 Events hash as core/v1 Events).
pub fn storage_version_hash(def: &ResourceDef) -> String {
    let (group, version, kind) = def.strategy.stored_as().map_or((def.group, def.version, def.kind), |s| s.gvk);
    let gvk = format!("{group}/{version}/{kind}");
    let digest = ring::digest::digest(&ring::digest::SHA256, gvk.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest.as_ref()[..8])
}

fn sorted_resources<'a>(reg: &'a Registry, group: &str, version: &str) -> Vec<&'a ResourceDef> {
    let mut defs: Vec<&ResourceDef> =
        reg.resources.iter().filter(|r| r.group == group && r.version == version).collect();
    defs.sort_by_key(|r| r.resource);
    defs
}

fn sorted_subresources(def: &ResourceDef) -> Vec<&'static str> {
    let mut subs = def.subresources.to_vec();
    subs.sort_unstable();
    subs
}

/// `/api/v1` or `/apis/<group>/<version>`: the resources of one group version, subresources
/// included as `<resource>/<sub>`. None when the group version is not served.
pub fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs = sorted_resources(reg, group, version);
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for def in defs {
        let mut r = json!({
            "name": def.resource,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": resource_verbs(def),
        });
        if !def.short_names.is_empty() {
            r["shortNames"] = json!(def.short_names);
        }
        if !def.categories.is_empty() {
            r["categories"] = json!(def.categories);
        }
        // Kinds that are never stored (reviews) have no storage version.
        if !def.create_only {
            r["storageVersionHash"] = json!(storage_version_hash(def));
        }
        resources.push(r);
        for sub in sorted_subresources(def) {
            let (g, v, kind) = subresource_kind(def, sub);
            let mut s = json!({
                "name": format!("{}/{sub}", def.resource),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": kind,
                "verbs": subresource_verbs(def, sub),
            });
            if (g, v) != (def.group, def.version) {
                s["group"] = json!(g);
                s["version"] = json!(v);
            }
            resources.push(s);
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

fn aggregated_resource(def: &ResourceDef) -> Value {
    let mut r = json!({
        "resource": def.resource,
        "responseKind": {"group": def.group, "version": def.version, "kind": def.kind},
        "scope": if def.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": def.singular,
        "verbs": resource_verbs(def),
    });
    if !def.short_names.is_empty() {
        r["shortNames"] = json!(def.short_names);
    }
    if !def.categories.is_empty() {
        r["categories"] = json!(def.categories);
    }
    let subs: Vec<Value> = sorted_subresources(def)
        .into_iter()
        .map(|sub| {
            let (g, v, kind) = subresource_kind(def, sub);
            json!({
                "subresource": sub,
                "responseKind": {"group": g, "version": v, "kind": kind},
                "verbs": subresource_verbs(def, sub),
            })
        })
        .collect();
    if !subs.is_empty() {
        r["subresources"] = Value::Array(subs);
    }
    r
}

fn aggregated_group(reg: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = reg
        .versions(group)
        .into_iter()
        .map(|v| {
            let resources: Vec<Value> = sorted_resources(reg, group, v).into_iter().map(aggregated_resource).collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() { json!({}) } else { json!({"name": group}) };
    json!({"metadata": metadata, "versions": versions})
}

/// Aggregated discovery (`APIGroupDiscoveryList`) for `/api` (`core`) or `/apis` (named
/// groups), in `version` `v2` or `v2beta1` (the two only differ in `apiVersion`). The first
/// version of a group is its preferred one.
pub fn aggregated(reg: &Registry, core: bool, version: &str) -> Value {
    let version = if version == "v2beta1" { "v2beta1" } else { "v2" };
    let items: Vec<Value> =
        reg.groups().into_iter().filter(|g| g.is_empty() == core).map(|g| aggregated_group(reg, g)).collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// `/version`: the Kubernetes version kustos speaks (1.37), in `version.Info` shape, with the
/// emulation and compatibility versions kube-apiserver reports since 1.33 (it emulates its own
/// release and stays compatible with the one before).
pub fn version_info() -> Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "emulationMajor": KUBE_MAJOR,
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": KUBE_MAJOR,
        "minCompatibilityMinor": MIN_COMPATIBILITY_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": option_env!("KUSTOS_GIT_COMMIT").unwrap_or("0000000000000000000000000000000000000000"),
        "gitTreeState": "clean",
        "buildDate": option_env!("KUSTOS_BUILD_DATE").unwrap_or("1970-01-01T00:00:00Z"),
        "goVersion": concat!("kustos/", env!("CARGO_PKG_VERSION")),
        "compiler": "rustc",
        "platform": format!("{}/{arch}", std::env::consts::OS),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg() -> Registry {
        Registry::builtin()
    }

    #[test]
    fn accept_header_picks_the_aggregated_version() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                       application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(kubectl), Some("v2"));
        assert_eq!(
            wants_aggregated(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            ),
            Some("v2beta1")
        );
        assert_eq!(wants_aggregated("application/json"), None);
        assert_eq!(wants_aggregated(""), None);
        assert_eq!(wants_aggregated("*/*"), None);
        assert_eq!(
            wants_aggregated("application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
            None
        );
        assert_eq!(
            wants_aggregated(
                "application/json;q=0.5, application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io"
            ),
            Some("v2")
        );
        assert_eq!(wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"), None);
        assert_eq!(
            aggregated_content_type("v2"),
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
    }

    #[test]
    fn core_resource_list_has_short_names_and_subresources() {
        let list = api_resource_list(&reg(), "", "v1").expect("core/v1 is served");
        assert_eq!(list["groupVersion"], "v1");
        let res = list["resources"].as_array().expect("resources");
        let find = |n: &str| res.iter().find(|r| r["name"] == n).cloned().unwrap_or(Value::Null);
        let cm = find("configmaps");
        assert_eq!(cm["shortNames"], json!(["cm"]));
        assert_eq!(cm["namespaced"], true);
        assert_eq!(cm["kind"], "ConfigMap");
        assert_eq!(cm["storageVersionHash"], "qFsyl6wFWjQ=");
        let ns = find("namespaces");
        assert_eq!(ns["namespaced"], false);
        assert!(!ns["verbs"].as_array().expect("verbs").contains(&json!("deletecollection")));
        assert_eq!(find("namespaces/finalize")["verbs"], json!(["update"]));
        assert_eq!(find("namespaces/status")["verbs"], json!(["get", "patch", "update"]));
        assert!(api_resource_list(&reg(), "", "v2").is_none());
    }

    #[test]
    fn csr_group_and_approval_subresource() {
        let r = reg();
        let list = api_resource_list(&r, "certificates.k8s.io", "v1").expect("served");
        let res = list["resources"].as_array().expect("resources");
        let approval = res.iter().find(|x| x["name"] == "certificatesigningrequests/approval").expect("approval");
        assert_eq!(approval["verbs"], json!(["get", "patch", "update"]));
        assert_eq!(approval["kind"], "CertificateSigningRequest");
        let group = api_group(&r, "certificates.k8s.io").expect("group");
        assert_eq!(group["preferredVersion"]["groupVersion"], "certificates.k8s.io/v1");
        assert!(api_group(&r, "apps").is_none());
        let groups = api_group_list(&r);
        let names: Vec<&str> =
            groups["groups"].as_array().expect("groups").iter().filter_map(|g| g["name"].as_str()).collect();
        assert!(names.contains(&"rbac.authorization.k8s.io"));
        assert!(!names.contains(&""));
    }

    #[test]
    fn aggregated_has_upstream_shape() {
        let r = reg();
        let apis = aggregated(&r, false, "v2");
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2");
        let csr_group = apis["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["metadata"]["name"] == "certificates.k8s.io")
            .expect("certificates group");
        let v1 = &csr_group["versions"][0];
        assert_eq!(v1["freshness"], "Current");
        let csr = &v1["resources"][0];
        assert_eq!(csr["resource"], "certificatesigningrequests");
        assert_eq!(csr["scope"], "Cluster");
        assert_eq!(csr["shortNames"], json!(["csr"]));
        assert_eq!(
            csr["responseKind"],
            json!({"group": "certificates.k8s.io", "version": "v1", "kind": "CertificateSigningRequest"})
        );
        let subs: Vec<&str> =
            csr["subresources"].as_array().expect("subs").iter().filter_map(|s| s["subresource"].as_str()).collect();
        assert_eq!(subs, ["approval", "status"]);

        let core = aggregated(&r, true, "v2beta1");
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        assert_eq!(core["items"].as_array().map(Vec::len), Some(1));
        assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
    }

    #[test]
    fn version_is_1_37() {
        let v = version_info();
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "37");
        assert_eq!((v["emulationMajor"].as_str(), v["emulationMinor"].as_str()), (Some("1"), Some("37")));
        assert_eq!((v["minCompatibilityMajor"].as_str(), v["minCompatibilityMinor"].as_str()), (Some("1"), Some("36")));
        assert!(v["gitVersion"].as_str().unwrap_or("").starts_with("v1.37.0+"));
        assert!(v["platform"].as_str().unwrap_or("").contains('/'));
    }

    // Defined only when k8s-openapi is built with its `v1_37` feature.
    k8s_openapi::k8s_if_1_37! { const K8S_OPENAPI_MINOR: &str = "37"; }

    /// The served level is the k8s-openapi feature the types (and so the OpenAPI documents)
    /// come from: building with another feature fails here until `/version` follows.
    #[test]
    fn served_level_is_the_k8s_openapi_feature() {
        assert_eq!(K8S_OPENAPI_MINOR, KUBE_MINOR);
        assert!(GIT_VERSION.starts_with(&format!("v{KUBE_MAJOR}.{KUBE_MINOR}.")));
        let min: u32 = MIN_COMPATIBILITY_MINOR.parse().unwrap_or(0);
        assert_eq!(min + 1, KUBE_MINOR.parse::<u32>().unwrap_or(0));
    }
}
