//! Validating admission: checks that need more than the object itself (the requester's
//! rights, other objects), run after the strategy's validation and before the write.
//!
//! - RBAC escalation prevention on roles, clusterroles, rolebindings, clusterrolebindings
//!   (`crate::rbac::escalation`).

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
    if c.def.group == crate::registry::rbac::GROUP && c.info.subresource.is_empty() {
        let cx = crate::rbac::escalation::Context {
            authz: c.state.security.authz.as_ref(),
            rbac: &c.state.security.rbac,
            user: c.user,
            info: c.info,
        };
        let old = if op == Operation::Update { old } else { None };
        return crate::rbac::escalation::check(&cx, c.def.resource, new, old).await;
    }
    Ok(())
}
