//! The POST of a review kind (TokenReview, SubjectAccessReview, ...): what enters is the
//! request and its body; what leaves is 201 Created with the object and its computed
//! `status`, rendered per the negotiated output. The answer is computed by
//! `registry::reviews::answer` from the server's authorizer and authenticators; nothing is
//! stored.

use bytes::Bytes;
use chrono::Utc;
use http::StatusCode;

use super::rest::{Call, Reply};
use crate::error::ApiError;
use crate::registry::reviews::answer::{compute, decode, Env};

/// POST of a review.
pub async fn create(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply, ApiError> {
    if !c.info.name.is_empty() {
        // Reviews have no object path: only the collection takes a POST.
        return Err(ApiError::NotFound {
            message: "the server could not find the requested resource".into(),
            subject: Default::default(),
        });
    }
    let (obj, warnings) = decode(c.def, &c.params, body, content_type, &c.info.namespace)?;
    let env = Env {
        authz: c.state.security.authz.as_ref(),
        authn: c.state.security.authn.as_ref(),
        user: c.user,
        now: Utc::now(),
    };
    let out = compute(c.def, &env, obj).await?;
    Ok(Reply { code: StatusCode::CREATED, body: c.object_body(out), warnings })
}
