//! Where service-account tokens are signed and where the keys that verify them come from: the
//! data directory's keys (`service_account::LocalKeys`), or an external signer on a Unix socket
//! (`externaljwt::client::ExternalSigner`, `--service-account-signing-endpoint`). In: claims to
//! sign, a token's key id. Out: a compact JWT, the public keys that verify, the keys OIDC
//! discovery publishes.

use std::sync::Arc;

use kustos_ca::jwt::PublicKey;
use serde_json::Value;

#[async_trait::async_trait]
pub trait KeySource: Send + Sync {
    /// A compact JWT of `claims` (a JSON object), signed with the key that signs now.
    async fn sign(&self, claims: &Value) -> anyhow::Result<String>;

    /// The keys that may verify a token whose header names `kid` (`None`: any key). An
    /// external source that does not know `kid` fetches its keys again first (at most about
    /// once a second, whoever asks).
    async fn keys_for(&self, kid: Option<&str>) -> Arc<[PublicKey]>;

    /// The keys that verify now, as held (no I/O).
    fn verification_keys(&self) -> Arc<[PublicKey]>;

    /// The keys `/openid/v1/jwks` publishes: those that verify, less any the source keeps out
    /// of discovery.
    fn published_keys(&self) -> Arc<[PublicKey]>;
}
