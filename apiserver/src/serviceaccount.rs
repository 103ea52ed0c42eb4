//! Service-account tokens: TokenRequest (`serviceaccounts/<name>/token`), the JWT
//! authenticator for bound and legacy tokens, and OIDC discovery.

use bytes::Bytes;

use crate::error::ApiError;
use crate::rest::{Call, Reply};

/// POST `serviceaccounts/<name>/token`.
pub async fn token_request(c: &Call<'_>, _body: &Bytes, _content_type: &str) -> Result<Reply, ApiError> {
    Err(ApiError::MethodNotAllowed(format!(
        "the server does not allow this method on the requested resource ({}/token)",
        c.def.resource
    )))
}
