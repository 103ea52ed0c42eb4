//! The `AuthenticationConfiguration` file as written (`apiserver.config.k8s.io/v1`, also
//! `v1beta1` and `v1alpha1`), decoded strictly: unknown fields are errors, as upstream's
//! strict decoder makes them.
//!
//! What enters is the file's bytes (YAML or JSON); what leaves is the typed configuration or
//! a one-line error. Validation is [`super::validate`]'s.

use serde::Deserialize;

/// Group/versions upstream accepts for this kind.
pub const API_VERSIONS: &[&str] =
    &["apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1beta1", "apiserver.config.k8s.io/v1alpha1"];
pub const KIND: &str = "AuthenticationConfiguration";
/// Larger files are refused before decoding.
pub const MAX_FILE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthenticationConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub jwt: Vec<JwtAuthenticator>,
    #[serde(default)]
    pub anonymous: Option<AnonymousAuthConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtAuthenticator {
    #[serde(default)]
    pub issuer: Issuer,
    #[serde(default)]
    pub claim_validation_rules: Vec<ClaimValidationRule>,
    #[serde(default)]
    pub claim_mappings: ClaimMappings,
    #[serde(default)]
    pub user_validation_rules: Vec<UserValidationRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Issuer {
    #[serde(default)]
    pub url: String,
    #[serde(default, rename = "discoveryURL")]
    pub discovery_url: String,
    #[serde(default)]
    pub certificate_authority: String,
    #[serde(default)]
    pub audiences: Vec<String>,
    #[serde(default)]
    pub audience_match_policy: String,
    #[serde(default)]
    pub egress_selector_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimValidationRule {
    #[serde(default)]
    pub claim: String,
    #[serde(default)]
    pub required_value: String,
    #[serde(default)]
    pub expression: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimMappings {
    #[serde(default)]
    pub username: PrefixedClaimOrExpression,
    #[serde(default)]
    pub groups: PrefixedClaimOrExpression,
    #[serde(default)]
    pub uid: ClaimOrExpression,
    #[serde(default)]
    pub extra: Vec<ExtraMapping>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrefixedClaimOrExpression {
    #[serde(default)]
    pub claim: String,
    /// `None` when absent: upstream tells an absent prefix from an empty one.
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub expression: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimOrExpression {
    #[serde(default)]
    pub claim: String,
    #[serde(default)]
    pub expression: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtraMapping {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value_expression: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UserValidationRule {
    #[serde(default)]
    pub expression: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AnonymousAuthConfig {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub conditions: Vec<AnonymousAuthCondition>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AnonymousAuthCondition {
    #[serde(default)]
    pub path: String,
}

/// Decode a file's content: size, apiVersion and kind checked, unknown fields refused.
pub fn decode(data: &[u8]) -> Result<AuthenticationConfiguration, String> {
    if data.len() > MAX_FILE_BYTES {
        return Err(format!("the file is larger than {MAX_FILE_BYTES} bytes"));
    }
    let text = std::str::from_utf8(data).map_err(|_| "the file is not UTF-8".to_string())?;
    if text.trim().is_empty() {
        return Err("empty config data".into());
    }
    let cfg: AuthenticationConfiguration =
        crate::wire::yaml::from_slice_strict(text.as_bytes()).map_err(|e| format!("strict decoding error: {e}"))?;
    if cfg.kind != KIND {
        return Err(format!("no kind {:?} is registered for version {:?}", cfg.kind, cfg.api_version));
    }
    if !API_VERSIONS.contains(&cfg.api_version.as_str()) {
        return Err(format!("no kind {KIND:?} is registered for version {:?}", cfg.api_version));
    }
    Ok(cfg)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decoding() {
        let head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n";
        let cases: Vec<(String, Result<(), &str>)> = vec![
            (head.to_string(), Ok(())),
            (head.replace("/v1\n", "/v1beta1\n"), Ok(())),
            (head.replace("/v1\n", "/v1alpha1\n"), Ok(())),
            (head.replace("/v1\n", "/v2\n"), Err("no kind \"AuthenticationConfiguration\" is registered")),
            (head.replace("AuthenticationConfiguration", "AuthorizationConfiguration"), Err("no kind")),
            (format!("{head}jwt:\n- issuer: {{url: https://a}}\n  bogus: 1\n"), Err("unknown field `bogus`")),
            (format!("{head}anonymous: {{enabled: true, conditions: [{{path: /livez}}]}}\n"), Ok(())),
            (String::new(), Err("empty config data")),
            ("{\"apiVersion\":\"apiserver.config.k8s.io/v1\",\"kind\":\"AuthenticationConfiguration\"}".into(), Ok(())),
            (format!("{head}jwt: []\njwt: []\n"), Err("already set in map")),
            // An alias bomb is refused as a request body's is, not expanded.
            (
                format!("{head}x: &a [{}]\ny: [{}]\n", "1,".repeat(1000), "*a,".repeat(3000)),
                Err("yaml: document contains excessive aliasing"),
            ),
        ];
        for (text, want) in cases {
            match (decode(text.as_bytes()), want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.contains(w), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
        let cfg = decode(format!("{head}jwt:\n- issuer:\n    url: https://a\n    discoveryURL: https://b\n  claimMappings:\n    username: {{claim: sub, prefix: \"\"}}\n").as_bytes()).unwrap();
        assert_eq!(cfg.jwt[0].issuer.discovery_url, "https://b");
        assert_eq!(cfg.jwt[0].claim_mappings.username.prefix.as_deref(), Some(""));
        assert_eq!(cfg.jwt[0].claim_mappings.groups.prefix, None);
        assert!(decode(&vec![b' '; MAX_FILE_BYTES + 1]).is_err());
    }
}
