//! The service-account token issuer: the issuers (the first one signs), the signing key, the
//! verification keys (the apiserver's own `sa.pub` plus `--service-account-key-file`s), the
//! API audiences and the maximum token lifetime. What the authenticator
//! (`authn::serviceaccount`), TokenRequest (`registry::core::serviceaccount_token`)
//! and OIDC discovery (`http::oidc`) share; the claims and the signing itself are
//! `kustos_ca::jwt`'s.

use anyhow::Context as _;
use kustos_ca::jwt::{self, BoundClaims, JwtError, PublicKey, SigningKey};
use serde_json::Value;

/// The default `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Where the JWK set of the verification keys is served.
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// The longest token lifetime a TokenRequest may ask for (2^32 seconds).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// Everything tokens are issued and checked with.
pub struct ServiceAccountTokens {
    issuers: Vec<String>,
    signing: SigningKey,
    keys: Vec<PublicKey>,
    api_audiences: Vec<String>,
    max_expiration_seconds: Option<i64>,
    /// `https://<external address>/openid/v1/jwks`
    jwks_uri: String,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("issuers", &self.issuers)
            .field("signing_key_id", &self.signing.public_key().key_id())
            .field("keys", &self.keys)
            .field("api_audiences", &self.api_audiences)
            .field("max_expiration_seconds", &self.max_expiration_seconds)
            .finish()
    }
}

/// A bad `--service-account-issuer` or `--service-account-max-token-expiration`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("service-account-issuer is a required flag")]
    NoIssuer,
    #[error("service-account-issuer should not be an empty string")]
    EmptyIssuer,
    #[error("service-account-issuer contained a ':' but was not a valid URL")]
    InvalidUrl,
    #[error("service-account-issuer {0:?} is already specified")]
    RepeatedIssuer(String),
    #[error("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds")]
    MaxExpiration,
}

/// Check the flags as upstream does: at least one issuer, none empty or repeated, and a
/// maximum lifetime (when set) between one hour and 2^32 seconds.
pub fn validate_options(issuers: &[String], max_expiration: Option<std::time::Duration>) -> Result<(), OptionsError> {
    if issuers.is_empty() {
        return Err(OptionsError::NoIssuer);
    }
    for (i, iss) in issuers.iter().enumerate() {
        if iss.is_empty() {
            return Err(OptionsError::EmptyIssuer);
        }
        if iss.chars().any(char::is_whitespace) && iss.contains(':') {
            return Err(OptionsError::InvalidUrl);
        }
        if issuers[..i].contains(iss) {
            return Err(OptionsError::RepeatedIssuer(iss.clone()));
        }
    }
    if let Some(max) = max_expiration {
        if max < std::time::Duration::from_secs(3600) || max.as_secs() > MAX_EXPIRATION_SECONDS as u64 {
            return Err(OptionsError::MaxExpiration);
        }
    }
    Ok(())
}

impl ServiceAccountTokens {
    /// `signing_key_pem` signs; `own_public_pem` and each of `extra_key_pems` (the contents of
    /// `--service-account-key-file`s) verify. Empty `api_audiences` means the issuers.
    pub fn new(
        issuers: Vec<String>,
        signing_key_pem: &str,
        own_public_pem: &str,
        extra_key_pems: &[(String, String)],
        api_audiences: Vec<String>,
        max_expiration: Option<std::time::Duration>,
        external_address: &str,
    ) -> anyhow::Result<Self> {
        validate_options(&issuers, max_expiration)?;
        let signing = SigningKey::from_pem(signing_key_pem).context("loading the service-account signing key")?;
        let mut keys: Vec<PublicKey> = Vec::new();
        let mut add = |found: Vec<PublicKey>| {
            for k in found {
                if !keys.iter().any(|have| have.key_id() == k.key_id()) {
                    keys.push(k);
                }
            }
        };
        add(jwt::public_keys_from_pem(own_public_pem).context("loading the service-account public key")?);
        for (name, pem) in extra_key_pems {
            add(jwt::public_keys_from_pem(pem).with_context(|| format!("loading --service-account-key-file {name}"))?);
        }
        if !keys.iter().any(|k| k.key_id() == signing.public_key().key_id()) {
            anyhow::bail!("the service-account public key does not belong to the signing key");
        }
        let api_audiences = if api_audiences.is_empty() { issuers.clone() } else { api_audiences };
        Ok(ServiceAccountTokens {
            issuers,
            signing,
            keys,
            api_audiences,
            max_expiration_seconds: max_expiration.map(|d| d.as_secs() as i64),
            jwks_uri: format!("https://{external_address}{JWKS_PATH}"),
        })
    }

    /// From the server settings: the PKI's `sa.key`/`sa.pub` and the key files named in `cfg`.
    pub fn load(cfg: &crate::Config, pki: &crate::pki::Pki, external_address: &str) -> anyhow::Result<Self> {
        let mut extra = Vec::new();
        for path in &cfg.service_account_key_files {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading --service-account-key-file {}", path.display()))?;
            extra.push((path.display().to_string(), pem));
        }
        Self::new(
            cfg.service_account_issuers.clone(),
            &pki.sa_key_pem,
            &pki.sa_pub_pem,
            &extra,
            cfg.api_audiences.clone(),
            cfg.service_account_max_token_expiration,
            external_address,
        )
    }

    /// The issuer new tokens carry (the first `--service-account-issuer`).
    pub fn issuer(&self) -> &str {
        self.issuers.first().map(String::as_str).unwrap_or(DEFAULT_ISSUER)
    }

    /// Every accepted issuer.
    pub fn issuers(&self) -> &[String] {
        &self.issuers
    }

    /// `--api-audiences` (default: the issuers).
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// `--service-account-max-token-expiration`, in seconds.
    pub fn max_expiration_seconds(&self) -> Option<i64> {
        self.max_expiration_seconds
    }

    pub fn signing_key(&self) -> &SigningKey {
        &self.signing
    }

    pub fn verification_keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// The JWK set of the verification keys.
    pub fn jwks(&self) -> Value {
        jwt::jwks(&self.keys)
    }

    /// `https://<external address>/openid/v1/jwks`, the `jwks_uri` of OIDC discovery.
    pub fn jwks_uri(&self) -> &str {
        &self.jwks_uri
    }

    /// Sign a bound token.
    pub fn issue(&self, claims: &BoundClaims) -> Result<String, JwtError> {
        self.signing.sign(&claims.to_json())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::type_complexity)]
    use super::*;
    use serde_json::json;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn option_validation() {
        let h = |n: u64| Some(std::time::Duration::from_secs(n * 3600));
        let cases: Vec<(Vec<String>, Option<std::time::Duration>, Result<(), &str>)> = vec![
            (strings(&[DEFAULT_ISSUER]), None, Ok(())),
            (strings(&["a", "https://b"]), h(48), Ok(())),
            (vec![], None, Err("service-account-issuer is a required flag")),
            (strings(&[""]), None, Err("service-account-issuer should not be an empty string")),
            (strings(&["a", "a"]), None, Err("service-account-issuer \"a\" is already specified")),
            (
                strings(&["a"]),
                Some(std::time::Duration::from_secs(600)),
                Err("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"),
            ),
            (
                strings(&["a"]),
                Some(std::time::Duration::from_secs((1 << 32) + 1)),
                Err("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"),
            ),
        ];
        for (issuers, max, want) in cases {
            assert_eq!(
                validate_options(&issuers, max).map_err(|e| e.to_string()),
                want.map_err(str::to_string),
                "{issuers:?} {max:?}"
            );
        }
    }

    #[test]
    fn keys_from_extra_files_verify_and_dedupe() {
        let own = kustos_ca::generate_sa_keypair().unwrap();
        let old = kustos_ca::generate_sa_keypair().unwrap();
        let extra = vec![
            ("old.key".to_string(), old.private_key_pem.clone()),
            ("own.pub".to_string(), own.public_key_pem.clone()),
        ];
        let t = ServiceAccountTokens::new(
            strings(&["a"]),
            &own.private_key_pem,
            &own.public_key_pem,
            &extra,
            vec![],
            None,
            "h:1",
        )
        .unwrap();
        assert_eq!(t.verification_keys().len(), 2);
        assert_eq!(t.api_audiences(), ["a"]);
        let old_signed = SigningKey::from_pem(&old.private_key_pem).unwrap().sign(&json!({"iss": "a"})).unwrap();
        assert!(jwt::verify(&old_signed, t.verification_keys()).is_ok());
        // A broken key file and a public key that is not the signing key's are errors.
        let broken = vec![("broken.pem".to_string(), "nothing".to_string())];
        let err = ServiceAccountTokens::new(
            strings(&["a"]),
            &own.private_key_pem,
            &own.public_key_pem,
            &broken,
            vec![],
            None,
            "h:1",
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("broken.pem"), "{err:#}");
        assert!(ServiceAccountTokens::new(
            strings(&["a"]),
            &own.private_key_pem,
            &old.public_key_pem,
            &[],
            vec![],
            None,
            "h:1"
        )
        .is_err());
        assert!(!format!("{t:?}").contains("PRIVATE"));
    }
}
