//! The claims of service-account tokens: bound tokens' ([`BoundClaims`]: `iss`, `sub`, `aud`,
//! `exp`, `iat`, `nbf`, `jti`, the private `kubernetes.io` claim) and legacy Secret-based
//! tokens' ([`LegacyClaims`]). What enters is a verified claim set (or the values to sign);
//! what leaves is the typed claims or the error naming the claim at fault.

use super::*;

/// `system:serviceaccount:<namespace>:<name>`
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USERNAME_PREFIX}{namespace}:{name}")
}

/// Namespace and name of a service-account user name (both must be valid names).
pub fn split_service_account_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_USERNAME_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    let subdomain = |s: &str| s.len() <= 253 && s.split('.').all(label);
    (label(ns) && subdomain(name)).then_some((ns, name))
}

/// A name and uid in the private `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> Self {
        ObjectRef { name: name.into(), uid: uid.into() }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.name.is_empty() {
            m.insert("name".into(), json!(self.name));
        }
        if !self.uid.is_empty() {
            m.insert("uid".into(), json!(self.uid));
        }
        Value::Object(m)
    }

    fn from_json(v: &Value, path: &str) -> Result<Self> {
        let m = match v {
            Value::Object(m) => m,
            Value::Null => return Ok(ObjectRef::default()),
            _ => return Err(JwtError::Claims(format!("{path} is not an object"))),
        };
        Ok(ObjectRef { name: string_claim(m, "name", path)?, uid: string_claim(m, "uid", path)? })
    }
}

fn string_claim(m: &Map<String, Value>, key: &str, path: &str) -> Result<String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(JwtError::Claims(format!("{path}{key} is not a string"))),
    }
}

/// A NumericDate (seconds since the epoch; fractions are dropped, as Go does). Absent or
/// `null` is no date; any number is a date, 0 and negative ones included (go-jose reads
/// `"exp": 0` as the epoch, so such a token has expired).
fn date_claim(m: &Map<String, Value>, key: &str) -> Result<Option<i64>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            // A fraction is truncated, as go-jose converts a NumericDate to whole seconds; a
            // value outside the i64 range has no defined meaning in Go (the conversion is
            // implementation-defined), so such a token is refused rather than guessed at.
            (None, Some(f)) if f.is_finite() && f >= i64::MIN as f64 && f < i64::MAX as f64 => Ok(Some(f as i64)),
            _ => Err(JwtError::Claims(format!("{key} is out of range"))),
        },
        Some(_) => Err(JwtError::Claims(format!("{key} is not a number"))),
    }
}

/// `aud`: a string or a list of strings.
fn audience_claim(m: &Map<String, Value>) -> Result<Vec<String>> {
    match m.get("aud") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| JwtError::Claims("aud is not a string list".into())))
            .collect(),
        Some(_) => Err(JwtError::Claims("aud is not a string or a string list".into())),
    }
}

/// Why a token is not valid at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("service account token has expired")]
    Expired,
    #[error("service account token is not valid yet")]
    NotValidYet,
    #[error("service account token is issued in the future")]
    IssuedInTheFuture,
}

/// The claims of a bound service-account token (TokenRequest).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BoundClaims {
    pub issuer: String,
    pub subject: String,
    pub audiences: Vec<String>,
    /// `exp`, `nbf`, `iat`: seconds since the epoch.
    pub expiry: Option<i64>,
    pub not_before: Option<i64>,
    pub issued_at: Option<i64>,
    /// `jti`: unique per token (a UUID).
    pub jti: String,
    /// `kubernetes.io.namespace`
    pub namespace: String,
    /// `kubernetes.io.serviceaccount`
    pub service_account: ObjectRef,
    /// `kubernetes.io.secret`: the token dies with this Secret.
    pub secret: Option<ObjectRef>,
    /// `kubernetes.io.pod`
    pub pod: Option<ObjectRef>,
    /// `kubernetes.io.node`
    pub node: Option<ObjectRef>,
    /// `kubernetes.io.warnafter`
    pub warn_after: Option<i64>,
}

impl BoundClaims {
    /// A token for `service_account` in `namespace`, valid from `now` for
    /// `expiration_seconds`, for `audiences`.
    pub fn new(
        issuer: &str,
        namespace: &str,
        service_account: ObjectRef,
        audiences: Vec<String>,
        now: DateTime<Utc>,
        expiration_seconds: i64,
        jti: &str,
    ) -> Self {
        let now = now.timestamp();
        BoundClaims {
            issuer: issuer.into(),
            subject: service_account_username(namespace, &service_account.name),
            audiences,
            expiry: Some(now.saturating_add(expiration_seconds)),
            not_before: Some(now),
            issued_at: Some(now),
            jti: jti.into(),
            namespace: namespace.into(),
            service_account,
            ..Default::default()
        }
    }

    /// Bind the token to a Secret.
    pub fn with_secret(mut self, secret: ObjectRef) -> Self {
        self.secret = Some(secret);
        self
    }

    /// Bind the token to a Pod; `node` is the Node it runs on, when it is bound to one (its
    /// uid empty when that Node does not exist), carried along for whoever reads the token.
    pub fn with_pod(mut self, pod: ObjectRef, node: Option<ObjectRef>) -> Self {
        self.pod = Some(pod);
        self.node = node;
        self
    }

    /// Bind the token to a Node: it dies with that Node.
    pub fn with_node(mut self, node: ObjectRef) -> Self {
        self.node = Some(node);
        self
    }

    /// The JWT payload.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("iss".into(), json!(self.issuer));
        if !self.subject.is_empty() {
            m.insert("sub".into(), json!(self.subject));
        }
        if !self.audiences.is_empty() {
            m.insert("aud".into(), json!(self.audiences));
        }
        for (k, v) in [("exp", self.expiry), ("nbf", self.not_before), ("iat", self.issued_at)] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        if !self.jti.is_empty() {
            m.insert("jti".into(), json!(self.jti));
        }
        let mut k8s = Map::new();
        if !self.namespace.is_empty() {
            k8s.insert("namespace".into(), json!(self.namespace));
        }
        k8s.insert("serviceaccount".into(), self.service_account.to_json());
        for (k, r) in [("pod", &self.pod), ("secret", &self.secret), ("node", &self.node)] {
            if let Some(r) = r {
                k8s.insert(k.into(), r.to_json());
            }
        }
        if let Some(w) = self.warn_after {
            k8s.insert("warnafter".into(), json!(w));
        }
        m.insert("kubernetes.io".into(), Value::Object(k8s));
        Value::Object(m)
    }

    /// From a (verified) JWT payload. Wrong claim types are errors; missing claims are empty.
    pub fn from_claims(m: &Map<String, Value>) -> Result<Self> {
        let k8s = match m.get("kubernetes.io") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(_) => return Err(JwtError::Claims("kubernetes.io is not an object".into())),
        };
        let opt_ref = |key: &str| -> Result<Option<ObjectRef>> {
            match k8s.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => ObjectRef::from_json(v, &format!("kubernetes.io.{key}.")).map(Some),
            }
        };
        Ok(BoundClaims {
            issuer: string_claim(m, "iss", "")?,
            subject: string_claim(m, "sub", "")?,
            audiences: audience_claim(m)?,
            expiry: date_claim(m, "exp")?,
            not_before: date_claim(m, "nbf")?,
            issued_at: date_claim(m, "iat")?,
            jti: string_claim(m, "jti", "")?,
            namespace: string_claim(&k8s, "namespace", "kubernetes.io.")?,
            service_account: match k8s.get("serviceaccount") {
                None => ObjectRef::default(),
                Some(v) => ObjectRef::from_json(v, "kubernetes.io.serviceaccount.")?,
            },
            secret: opt_ref("secret")?,
            pod: opt_ref("pod")?,
            node: opt_ref("node")?,
            warn_after: date_claim(&k8s, "warnafter")?,
        })
    }

    /// `exp`, `nbf` and `iat` against `now`, with [`LEEWAY_SECONDS`] of tolerance.
    pub fn check_time(&self, now: DateTime<Utc>) -> Result<(), TimeError> {
        let now = now.timestamp();
        if self.not_before.is_some_and(|nbf| now.saturating_add(LEEWAY_SECONDS) < nbf) {
            return Err(TimeError::NotValidYet);
        }
        if self.expiry.is_some_and(|exp| now.saturating_sub(LEEWAY_SECONDS) > exp) {
            return Err(TimeError::Expired);
        }
        if self.issued_at.is_some_and(|iat| now.saturating_add(LEEWAY_SECONDS) < iat) {
            return Err(TimeError::IssuedInTheFuture);
        }
        Ok(())
    }
}

const LEGACY_NAMESPACE: &str = "kubernetes.io/serviceaccount/namespace";
const LEGACY_SECRET_NAME: &str = "kubernetes.io/serviceaccount/secret.name";
const LEGACY_SA_NAME: &str = "kubernetes.io/serviceaccount/service-account.name";
const LEGACY_SA_UID: &str = "kubernetes.io/serviceaccount/service-account.uid";

/// The claims of a legacy token stored in a `kubernetes.io/service-account-token` Secret:
/// no audience and no expiry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LegacyClaims {
    pub issuer: String,
    pub subject: String,
    pub namespace: String,
    pub secret_name: String,
    pub service_account_name: String,
    pub service_account_uid: String,
}

impl LegacyClaims {
    pub fn new(namespace: &str, service_account_name: &str, service_account_uid: &str, secret_name: &str) -> Self {
        LegacyClaims {
            issuer: LEGACY_ISSUER.into(),
            subject: service_account_username(namespace, service_account_name),
            namespace: namespace.into(),
            secret_name: secret_name.into(),
            service_account_name: service_account_name.into(),
            service_account_uid: service_account_uid.into(),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "iss": self.issuer,
            "sub": self.subject,
            LEGACY_NAMESPACE: self.namespace,
            LEGACY_SECRET_NAME: self.secret_name,
            LEGACY_SA_NAME: self.service_account_name,
            LEGACY_SA_UID: self.service_account_uid,
        })
    }

    pub fn from_claims(m: &Map<String, Value>) -> Result<Self> {
        Ok(LegacyClaims {
            issuer: string_claim(m, "iss", "")?,
            subject: string_claim(m, "sub", "")?,
            namespace: string_claim(m, LEGACY_NAMESPACE, "")?,
            secret_name: string_claim(m, LEGACY_SECRET_NAME, "")?,
            service_account_name: string_claim(m, LEGACY_SA_NAME, "")?,
            service_account_uid: string_claim(m, LEGACY_SA_UID, "")?,
        })
    }

    /// Upstream's checks of the claims alone: all present, and `sub` names the same
    /// service account.
    pub fn check(&self) -> Result<(), LegacyClaimsError> {
        let missing = [
            (self.subject.is_empty(), "sub"),
            (self.namespace.is_empty(), "namespace"),
            (self.secret_name.is_empty(), "secretName"),
            (self.service_account_name.is_empty(), "serviceAccountName"),
            (self.service_account_uid.is_empty(), "serviceAccountUID"),
        ];
        if let Some((_, claim)) = missing.iter().find(|(m, _)| *m) {
            return Err(LegacyClaimsError::Missing { claim });
        }
        match split_service_account_username(&self.subject) {
            Some((ns, name)) if ns == self.namespace && name == self.service_account_name => Ok(()),
            _ => Err(LegacyClaimsError::InvalidSubject),
        }
    }
}

/// Why legacy claims are refused ([`LegacyClaims::check`]), in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegacyClaimsError {
    /// `claim` is upstream's name of the claim: `sub`, `namespace`, `secretName`,
    /// `serviceAccountName`, `serviceAccountUID`.
    #[error("{claim} claim is missing")]
    Missing { claim: &'static str },
    #[error("sub claim is invalid")]
    InvalidSubject,
}

/// On a legacy token Secret whose token was re-issued after a signing-key rotation
/// (`kustos sa-key rotate`): `kid=digest` entries ([`token_digest`]), comma-separated, of the
/// tokens it replaced, which keep authenticating while the keys that signed them verify.
pub const PREVIOUS_TOKEN_ANNOTATION: &str = "kustos.dev/previous-token-sha256";

/// base64url (no padding) of SHA-256 over a token.
pub fn token_digest(token: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()))
}

/// A legacy token for the Secret `secret_name` of service account `sa_name` (uid `sa_uid`),
/// signed with the first private key of `signing_key_pem`: what the token controller puts
/// into `data.token` of a `kubernetes.io/service-account-token` Secret. Upstream's legacy
/// claims do not carry the Secret's uid; `_secret_uid` is accepted for callers that have it.
pub fn legacy_token(
    signing_key_pem: &str,
    namespace: &str,
    sa_name: &str,
    sa_uid: &str,
    secret_name: &str,
    _secret_uid: &str,
) -> Result<String> {
    let key = SigningKey::from_pem(signing_key_pem)?;
    key.sign(&LegacyClaims::new(namespace, sa_name, sa_uid, secret_name).to_json())
}
