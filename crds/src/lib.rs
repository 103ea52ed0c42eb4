//! kustos-crds: kustos' own CustomResource types, their validation, and the CRD manifests
//! generated from them. No I/O: types, pure checks, and `CustomResourceExt::crd()`.
//!
//! - [`CertificateApprovalPolicy`] (`certificateapprovalpolicies.kustos.dev`, cluster-scoped):
//!   which CertificateSigningRequests the `csrpolicyapproving` controller approves, and which
//!   it denies.
//! - [`Signer`] (`signers.kustos.dev`, cluster-scoped): a signer of your own, with its CA and
//!   rules; the `signers` controller signs approved CSRs for its signer name.
//!
//! The YAML of each CRD is committed beside this crate (`crds/<plural>.<group>.yaml`) and in
//! the kustomize base (`manifests/crds/`), and a test fails when either differs from what the
//! types generate. Regenerate with
//! `KUSTOS_UPDATE_CRDS=1 cargo test -p kustos-crds`.

pub mod certificate_approval_policy;
pub mod signer;

pub use certificate_approval_policy::{
    CertificateApprovalPolicy, CertificateApprovalPolicySpec, CertificateApprovalPolicyStatus,
};
pub use signer::{Signer, SignerSpec, SignerStatus};

use kube::core::CustomResourceExt as _;

/// Every CRD of this crate, with the file name it is committed under (in `crds/`).
pub fn all(
) -> Vec<(&'static str, k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition)> {
    vec![
        ("certificateapprovalpolicies.kustos.dev.yaml", CertificateApprovalPolicy::crd()),
        ("signers.kustos.dev.yaml", Signer::crd()),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The committed YAML is what the types generate. `KUSTOS_UPDATE_CRDS=1` rewrites it.
    #[test]
    fn committed_crd_yaml_is_up_to_date() {
        let update = std::env::var_os("KUSTOS_UPDATE_CRDS").is_some_and(|v| v == "1");
        let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        // `crds/` for `kubectl apply -f crds/`, and a copy in the kustomize base (kustomize
        // loads no file from outside its directory).
        let dirs = [crate_dir.to_path_buf(), crate_dir.join("../manifests/crds")];
        for (file, crd) in all() {
            let want = format!(
                "# Generated from the kustos-crds types by `KUSTOS_UPDATE_CRDS=1 cargo test -p kustos-crds`; do not edit.\n{}",
                serde_yaml::to_string(&crd).unwrap()
            );
            for dir in &dirs {
                let path = dir.join(file);
                if update {
                    std::fs::create_dir_all(dir).unwrap();
                    std::fs::write(&path, &want).unwrap();
                    continue;
                }
                let have = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                    panic!("{}: {e} (run KUSTOS_UPDATE_CRDS=1 cargo test -p kustos-crds)", path.display())
                });
                assert!(
                    have == want,
                    "{} is out of date: run KUSTOS_UPDATE_CRDS=1 cargo test -p kustos-crds\n--- generated ---\n{want}",
                    path.display()
                );
            }
        }
    }

    /// What the apiserver needs to serve the CRD: structural schema (every level typed, no
    /// unknown-field preservation), the status subresource, the printer columns.
    #[test]
    fn the_crd_is_structural_cluster_scoped_with_status_and_columns() {
        let crd = serde_json::to_value(CertificateApprovalPolicy::crd()).unwrap();
        let spec = &crd["spec"];
        assert_eq!(crd["metadata"]["name"], "certificateapprovalpolicies.kustos.dev", "name");
        assert_eq!(spec["scope"], "Cluster", "scope");
        assert_eq!(spec["group"], "kustos.dev", "group");
        assert_eq!(spec["names"]["kind"], "CertificateApprovalPolicy", "kind");
        let v = &spec["versions"][0];
        assert_eq!(v["name"], "v1alpha1", "version");
        assert_eq!((v["served"].as_bool(), v["storage"].as_bool()), (Some(true), Some(true)), "served and stored");
        assert!(v["subresources"]["status"].is_object(), "status subresource: {}", v["subresources"]);
        let cols: Vec<&str> =
            v["additionalPrinterColumns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(cols, ["Signers", "Approved", "Denied", "Age"], "printer columns");

        let problems = structural_problems(&v["schema"]["openAPIV3Schema"]);
        assert!(problems.is_empty(), "not structural: {problems:?}");
        let spec_schema = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec_schema["properties"]["signerNames"]["minItems"], 1, "at least one signer");
        assert_eq!(spec_schema["required"], serde_json::json!(["signerNames"]), "required spec fields");
    }

    /// Where a CRD schema is not structural: every schema node has a type (or is an
    /// int-or-string / embedded resource, which we do not use), and nothing preserves
    /// unknown fields.
    fn structural_problems(schema: &serde_json::Value) -> Vec<String> {
        fn walk(path: &str, s: &serde_json::Value, problems: &mut Vec<String>) {
            let Some(obj) = s.as_object() else { return };
            if !obj.contains_key("type") && !obj.contains_key("x-kubernetes-int-or-string") {
                problems.push(format!("{path}: no type"));
            }
            for k in obj.keys() {
                if matches!(k.as_str(), "$ref" | "anyOf" | "oneOf" | "allOf" | "not" | "definitions" | "$defs")
                    || k == "x-kubernetes-preserve-unknown-fields"
                {
                    problems.push(format!("{path}: {k}"));
                }
            }
            if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
                for (k, v) in props {
                    walk(&format!("{path}.{k}"), v, problems);
                }
            }
            if let Some(items) = obj.get("items") {
                walk(&format!("{path}[]"), items, problems);
            }
            if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
                walk(&format!("{path}{{}}"), ap, problems);
            }
        }
        let mut problems = Vec::new();
        walk("", schema, &mut problems);
        problems
    }

    #[test]
    fn the_signer_crd_is_structural_cluster_scoped_with_status_and_columns() {
        let crd = serde_json::to_value(Signer::crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "signers.kustos.dev", "name");
        assert_eq!(crd["spec"]["scope"], "Cluster", "scope");
        let v = &crd["spec"]["versions"][0];
        assert!(v["subresources"]["status"].is_object(), "status subresource: {}", v["subresources"]);
        let cols: Vec<&str> =
            v["additionalPrinterColumns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(cols, ["SignerName", "Ready", "Issued", "Age"], "printer columns");
        let problems = structural_problems(&v["schema"]["openAPIV3Schema"]);
        assert!(problems.is_empty(), "not structural: {problems:?}");
        let spec_schema = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec_schema["required"], serde_json::json!(["signerName", "usages"]), "required spec fields");
    }
}
