//! certificates.k8s.io `clustertrustbundles` (cluster-scoped), served as `v1` (preferred) and
//! `v1beta1`, after upstream's `pkg/registry/certificates/clustertrustbundle/strategy.go` and
//! `ValidateClusterTrustBundle` in `pkg/apis/certificates/validation`.
//!
//! Both versions read and write the same stored objects: the storage version is `v1`, and
//! the two forms differ only in `apiVersion` ([`stored_as`]), so every bundle is seen through
//! either version and a watch through one sees writes through the other.
//!
//! - `spec.trustBundle`: PEM `CERTIFICATE` blocks only, without headers, each one a CA
//!   certificate (basicConstraints cA), no duplicates, at least one, at most 1 MiB. Text
//!   between blocks is ignored, as Go's `pem.Decode` ignores it. On update the bundle is only
//!   parsed again when it changed.
//! - `spec.signerName` is optional; when set it is a signer name, immutable, and the object's
//!   name starts with it (`/` written `:`) and `:` (`example.com:foo:v1`). A bundle without a
//!   signer has no `:` in its name.
//! - `spec.signerName` is selectable; the Table has Name and SignerName (`<none>` when unset).
//!
//! Who may link a bundle to a signer (verb `attest` on `signers`) is admission's
//! (ClusterTrustBundleAttest in `admission/`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::certificates::v1 as certv1;
use k8s_openapi::api::certificates::v1beta1 as certv1beta1;
use serde_json::{json, Value};

use super::certificates::validate_signer_name;
use super::shared::{col, get_at, invalid_shown, str_at, too_long};
use super::{
    decode, typed_roundtrip, Column, FieldSelectors, ResourceDef, StoredAs, Strategy, TableStrategy, WriteStrategy,
};
use crate::error::FieldError;
use crate::validation;

pub const GROUP: &str = "certificates.k8s.io";
pub const RESOURCE: &str = "clustertrustbundles";

/// `certificates.MaxTrustBundleSize`.
pub const MAX_TRUST_BUNDLE_SIZE: usize = 1024 * 1024;

/// The served resources: `v1` first (the preferred version), then `v1beta1`.
pub fn resources() -> Vec<ResourceDef> {
    let def = |version: &'static str, strategy: ClusterTrustBundleStrategy, schema: super::SchemaFn| ResourceDef {
        group: GROUP,
        version,
        resource: RESOURCE,
        singular: "clustertrustbundle",
        kind: "ClusterTrustBundle",
        namespaced: false,
        short_names: &[],
        categories: &[],
        subresources: &[],
        create_only: false,
        strategy: Arc::new(strategy),
        schema,
    };
    vec![
        def("v1", ClusterTrustBundleStrategy::V1, |g| g.subschema_for::<certv1::ClusterTrustBundle>()),
        def("v1beta1", ClusterTrustBundleStrategy::V1beta1, |g| g.subschema_for::<certv1beta1::ClusterTrustBundle>()),
    ]
}

/// `clustertrustbundles`, in one of its served versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterTrustBundleStrategy {
    V1,
    V1beta1,
}

/// The stored form: `certificates.k8s.io/v1` (whatever version wrote it).
const STORAGE_API_VERSION: &str = "certificates.k8s.io/v1";

/// `obj` with `apiVersion` set to `api_version`: the whole conversion between the versions.
pub fn with_api_version(obj: &Value, api_version: &str) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
    }
    out
}

/// How `version`'s objects are kept: in the `v1` storage, converted by `apiVersion` alone.
fn stored_as(version: ClusterTrustBundleStrategy) -> StoredAs {
    StoredAs {
        gvk: (GROUP, "v1", "ClusterTrustBundle"),
        resource: RESOURCE,
        from_stored: match version {
            ClusterTrustBundleStrategy::V1 => |o| with_api_version(o, STORAGE_API_VERSION),
            ClusterTrustBundleStrategy::V1beta1 => |o| with_api_version(o, "certificates.k8s.io/v1beta1"),
        },
        to_stored: |o| with_api_version(o, STORAGE_API_VERSION),
    }
}

/// The problems of one bundle's PEM (`validateTrustBundle`), each upstream's detail.
pub fn trust_bundle_problems(pem: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<Vec<u8>, Vec<usize>> = BTreeMap::new();
    let mut rest = pem.as_bytes();
    let mut i = 0usize;
    while let Some((block, next)) = kustos_ca::pem::decode(rest) {
        rest = next;
        let index = i;
        i += 1;
        if block.type_ != "CERTIFICATE" {
            problems.push(format!("entry {index} has bad block type: {}", block.type_));
            continue;
        }
        if block.has_headers {
            problems.push(format!("entry {index} has PEM block headers"));
            continue;
        }
        let Ok(info) = kustos_ca::parse_certificate_der(&block.bytes) else {
            problems.push(format!("entry {index} does not parse as X.509"));
            continue;
        };
        if !info.is_ca {
            problems.push(format!("entry {index} does not have the CA bit set"));
            continue;
        }
        seen.entry(block.bytes).or_default().push(index);
    }
    // A malformed block makes the duplicate check moot, as upstream.
    if !problems.is_empty() {
        return problems;
    }
    if seen.is_empty() {
        problems.push("at least one trust anchor must be provided".to_string());
    }
    let mut dups: Vec<&Vec<usize>> = seen.values().filter(|ix| ix.len() > 1).collect();
    dups.sort();
    for ix in dups {
        let list: Vec<String> = ix.iter().map(usize::to_string).collect();
        problems.push(format!("duplicate trust anchor (indices [{}])", list.join(" ")));
    }
    problems
}

/// `ValidateClusterTrustBundleName`: the problems of `name` for a bundle of `signer`.
pub fn name_problems(name: &str, signer: &str) -> Vec<String> {
    if signer.is_empty() {
        if name.contains(':') {
            return vec!["ClusterTrustBundle without signer name must not have \":\" in its name".to_string()];
        }
        return validation::is_dns1123_subdomain(name);
    }
    let prefix = format!("{}:", signer.replace('/', ":"));
    match name.strip_prefix(&prefix) {
        Some(suffix) => validation::is_dns1123_subdomain(suffix),
        None => vec![format!("ClusterTrustBundle for signerName {signer} must be named with prefix {prefix}")],
    }
}

fn signer_of(obj: &Value) -> &str {
    str_at(obj, &["spec", "signerName"]).unwrap_or("")
}

fn bundle_of(obj: &Value) -> &str {
    str_at(obj, &["spec", "trustBundle"]).unwrap_or("")
}

fn validate_bundle(version: ClusterTrustBundleStrategy, obj: &Value, parse_bundle: bool) -> Vec<FieldError> {
    let decoded = match version {
        ClusterTrustBundleStrategy::V1 => decode::<certv1::ClusterTrustBundle>(obj).map(|_| ()),
        ClusterTrustBundleStrategy::V1beta1 => decode::<certv1beta1::ClusterTrustBundle>(obj).map(|_| ()),
    };
    if let Err(errs) = decoded {
        return errs;
    }
    let mut errs = Vec::new();
    let name = str_at(obj, &["metadata", "name"]).unwrap_or("");
    let signer = signer_of(obj);
    if !name.is_empty() {
        for m in name_problems(name, signer) {
            errs.push(FieldError::invalid("metadata.name", &json!(name), m));
        }
    }
    if !signer.is_empty() {
        errs.extend(validate_signer_name("spec.signerName", signer));
    }
    if parse_bundle {
        let bundle = bundle_of(obj);
        if bundle.len() > MAX_TRUST_BUNDLE_SIZE {
            errs.push(too_long("spec.trustBundle", MAX_TRUST_BUNDLE_SIZE));
        } else {
            for m in trust_bundle_problems(bundle) {
                errs.push(invalid_shown("spec.trustBundle", "\"<value omitted>\"", &m));
            }
        }
    }
    errs
}

impl Strategy for ClusterTrustBundleStrategy {
    /// Go's decoding leaves a missing `spec` or `trustBundle` empty (then invalid: 422), where
    /// the typed form would refuse the body (400): both are filled in before the round trip.
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        let mut filled = obj.clone();
        if let Some(m) = filled.as_object_mut() {
            let spec = m.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut() {
                spec.entry("trustBundle").or_insert_with(|| json!(""));
            }
        }
        match self {
            ClusterTrustBundleStrategy::V1 => typed_roundtrip::<certv1::ClusterTrustBundle>(&filled),
            ClusterTrustBundleStrategy::V1beta1 => typed_roundtrip::<certv1beta1::ClusterTrustBundle>(&filled),
        }
    }

    fn stored_as(&self) -> Option<StoredAs> {
        Some(stored_as(*self))
    }

    /// The name rule depends on `spec.signerName`: [`WriteStrategy::validate`] checks it.
    fn name_rule(&self) -> super::NameRule {
        |_| Vec::new()
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for ClusterTrustBundleStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_bundle(*self, obj, true)
    }

    /// An unchanged bundle is not parsed again (Go's PEM and X.509 readers may change).
    fn validate_on_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_bundle(*self, new, bundle_of(new) != bundle_of(old))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (n, o) = (signer_of(new), signer_of(old));
        if n != o {
            let shown = get_at(new, &["spec", "signerName"]).cloned().unwrap_or(json!(""));
            return vec![FieldError::immutable("spec.signerName", &shown)];
        }
        Vec::new()
    }
}

impl FieldSelectors for ClusterTrustBundleStrategy {
    fn field(&self, obj: &Value, path: &str) -> Option<String> {
        (path == "spec.signerName").then(|| signer_of(obj).to_string())
    }
}

impl TableStrategy for ClusterTrustBundleStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![col(
            "SignerName",
            "signerName indicates the associated signer, if any.\n\nIn order to create or update a ClusterTrustBundle that sets signerName, you must have the following cluster-scoped permission: group=certificates.k8s.io resource=signers resourceName=<the signer name> verb=attest.\n\nIf signerName is not empty, then the ClusterTrustBundle object must be named with the signer name as a prefix (translating slashes to colons). For example, for the signer name `example.com/foo`, valid ClusterTrustBundle object names include `example.com:foo:abc` and `example.com:foo:v1`.\n\nIf signerName is empty, then the ClusterTrustBundle object's name must not have such a prefix.\n\nList/watch requests for ClusterTrustBundles can filter on this field using a `spec.signerName=NAME` field selector.",
            0,
        )]
    }

    fn cells(&self, obj: &Value, _now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let signer = signer_of(obj);
        vec![json!(if signer.is_empty() { "<none>" } else { signer })]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kustos_ca::{pem_encode, Ca, IssueParams};

    fn ca(cn: &str) -> String {
        let now = chrono::Utc::now();
        Ca::generate(cn, chrono::Duration::days(1), now).unwrap().cert_pem().to_string()
    }

    fn leaf() -> String {
        let now = chrono::Utc::now();
        let ca = Ca::generate("issuer", chrono::Duration::days(1), now).unwrap();
        ca.issue(IssueParams::client("leaf", vec![], chrono::Duration::hours(1)), now).unwrap().cert_pem
    }

    fn bundle(name: &str, signer: Option<&str>, pem: &str) -> Value {
        let mut spec = json!({"trustBundle": pem});
        if let Some(s) = signer {
            spec["signerName"] = json!(s);
        }
        json!({"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle",
               "metadata": {"name": name}, "spec": spec})
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    fn omitted(detail: &str) -> String {
        format!("spec.trustBundle: Invalid value: \"<value omitted>\": {detail}")
    }

    #[test]
    fn validation_as_upstream() {
        let (a, b) = (ca("ca-a"), ca("ca-b"));
        let not_ca = leaf();
        let with_headers = a.replacen("-----BEGIN CERTIFICATE-----\n", "-----BEGIN CERTIFICATE-----\nK: v\n\n", 1);
        let key_block = pem_encode("PRIVATE KEY", b"not a key");
        let garbage = pem_encode("CERTIFICATE", b"\x30\x03\x02\x01\x01");
        let cases: Vec<(&str, Value, Vec<String>)> = vec![
            ("one CA, no signer", bundle("foo", None, &a), vec![]),
            ("two CAs, text between", bundle("foo", None, &format!("{a}# comment\n{b}")), vec![]),
            ("signer-linked", bundle("example.com:foo:abc", Some("example.com/foo"), &a), vec![]),
            ("empty bundle", bundle("foo", None, ""), vec![omitted("at least one trust anchor must be provided")]),
            ("text only", bundle("foo", None, "hello"), vec![omitted("at least one trust anchor must be provided")]),
            ("not a CA", bundle("foo", None, &not_ca), vec![omitted("entry 0 does not have the CA bit set")]),
            ("bad block type", bundle("foo", None, &format!("{a}{key_block}")), vec![omitted("entry 1 has bad block type: PRIVATE KEY")]),
            ("headers", bundle("foo", None, &with_headers), vec![omitted("entry 0 has PEM block headers")]),
            ("does not parse", bundle("foo", None, &garbage), vec![omitted("entry 0 does not parse as X.509")]),
            ("duplicate", bundle("foo", None, &format!("{a}{b}{a}")), vec![omitted("duplicate trust anchor (indices [0 2])")]),
            (
                "bad entry hides duplicates",
                bundle("foo", None, &format!("{a}{a}{not_ca}")),
                vec![omitted("entry 2 does not have the CA bit set")],
            ),
            (
                "colon without signer",
                bundle("example.com:foo:abc", None, &a),
                vec!["metadata.name: Invalid value: \"example.com:foo:abc\": ClusterTrustBundle without signer name must not have \":\" in its name".to_string()],
            ),
            (
                "signer-linked name without the prefix",
                bundle("foo", Some("example.com/foo"), &a),
                vec!["metadata.name: Invalid value: \"foo\": ClusterTrustBundle for signerName example.com/foo must be named with prefix example.com:foo:".to_string()],
            ),
            (
                "bad suffix",
                bundle("example.com:foo:ABC", Some("example.com/foo"), &a),
                rendered(&validation::is_dns1123_subdomain("ABC").into_iter().map(|m| FieldError::invalid("metadata.name", &json!("example.com:foo:ABC"), m)).collect::<Vec<_>>()),
            ),
            (
                "bad signer name",
                bundle("foo:foo", Some("foo"), &a),
                vec!["spec.signerName: Invalid value: \"foo\": must be a fully qualified domain and path of the form 'example.com/signer-name'".to_string()],
            ),
        ];
        for (what, obj, want) in cases {
            assert_eq!(rendered(&ClusterTrustBundleStrategy::V1beta1.validate(&obj)), want, "{what}");
        }
        let big = bundle("foo", None, &"x".repeat(MAX_TRUST_BUNDLE_SIZE + 1));
        assert_eq!(
            rendered(&ClusterTrustBundleStrategy::V1beta1.validate(&big)),
            ["spec.trustBundle: Too long: may not be more than 1048576 bytes"],
            "too long"
        );
    }

    #[test]
    fn updates() {
        let a = ca("ca-a");
        let old = bundle("example.com:foo:abc", Some("example.com/foo"), &a);
        let mut changed = old.clone();
        changed["spec"]["signerName"] = json!("example.com/bar");
        assert_eq!(
            rendered(&ClusterTrustBundleStrategy::V1beta1.validate_update(&changed, &old)),
            ["spec.signerName: Invalid value: \"example.com/bar\": field is immutable"]
        );
        assert!(ClusterTrustBundleStrategy::V1beta1.validate_update(&old, &old).is_empty());
        // A stored bundle is not parsed again when it is not changed.
        let stored = bundle("foo", None, &leaf());
        let mut relabelled = stored.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(ClusterTrustBundleStrategy::V1beta1.validate_on_update(&relabelled, &stored).is_empty());
        let mut replaced = stored.clone();
        replaced["spec"]["trustBundle"] = json!(leaf());
        assert_eq!(ClusterTrustBundleStrategy::V1beta1.validate_on_update(&replaced, &stored).len(), 1);
    }

    #[test]
    fn roundtrip_fills_what_go_leaves_empty() {
        let out = ClusterTrustBundleStrategy::V1beta1.roundtrip(&json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!(out["spec"], json!({"trustBundle": ""}));
        assert!(ClusterTrustBundleStrategy::V1beta1
            .roundtrip(&json!({"metadata": {"name": "x"}, "spec": {"trustBundle": 1}}))
            .is_err());
    }

    #[test]
    fn both_versions_keep_one_stored_form() {
        let stored = bundle("foo", None, "pem");
        for (version, api_version) in [
            (ClusterTrustBundleStrategy::V1, "certificates.k8s.io/v1"),
            (ClusterTrustBundleStrategy::V1beta1, "certificates.k8s.io/v1beta1"),
        ] {
            let s = version.stored_as().unwrap();
            assert_eq!(s.gvk, (GROUP, "v1", "ClusterTrustBundle"));
            let seen = (s.from_stored)(&stored);
            assert_eq!(seen["apiVersion"], api_version);
            assert_eq!(seen["spec"], stored["spec"]);
            assert_eq!((s.to_stored)(&seen)["apiVersion"], "certificates.k8s.io/v1");
            assert_eq!(s.prefix(), "/registry/certificates.k8s.io/clustertrustbundles/");
        }
        let versions: Vec<&str> = resources().iter().map(|d| d.version).collect();
        assert_eq!(versions, ["v1", "v1beta1"], "v1 is registered first: the preferred version");
    }

    #[test]
    fn table_and_fields() {
        let names: Vec<&str> = ClusterTrustBundleStrategy::V1beta1.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["SignerName"]);
        let now = chrono::Utc::now();
        let linked = bundle("example.com:foo:abc", Some("example.com/foo"), "");
        assert_eq!(ClusterTrustBundleStrategy::V1beta1.cells(&linked, now), vec![json!("example.com/foo")]);
        assert_eq!(ClusterTrustBundleStrategy::V1beta1.cells(&bundle("foo", None, ""), now), vec![json!("<none>")]);
        assert_eq!(
            ClusterTrustBundleStrategy::V1beta1.field(&linked, "spec.signerName").as_deref(),
            Some("example.com/foo")
        );
        assert_eq!(
            ClusterTrustBundleStrategy::V1beta1.field(&bundle("foo", None, ""), "spec.signerName").as_deref(),
            Some("")
        );
        assert_eq!(ClusterTrustBundleStrategy::V1beta1.field(&linked, "spec.trustBundle"), None);
    }
}
