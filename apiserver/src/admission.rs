//! Validating admission: checks that need more than the object itself (the requester's
//! rights, other objects), run after the strategy's validation and before the write.
//!
//! - RBAC escalation prevention on roles, clusterroles, rolebindings, clusterrolebindings
//!   (`crate::rbac::escalation`).
//! - CertificateSigningRequests, as upstream's admission plugins: CertificateApproval (a write
//!   to `/approval` needs verb `approve` on `signers` for the signerName or `<domain>/*`),
//!   CertificateSigning (changing `status.certificate` through `/status` needs `sign`),
//!   CertificateSubjectRestriction (no `system:masters` in a `kube-apiserver-client` request).
//!
//! [`restrict_read`] applies to reads: a bootstrap token (group `system:bootstrappers`) may
//! list and watch CertificateSigningRequests only one at a time by name (the way a kubelet
//! waits for its own certificate), so it cannot enumerate the CSRs of other nodes. Upstream's
//! `system:node-bootstrapper` role grants list on all CSRs; kustos keeps the role as it is
//! and narrows its use by the short-lived, widely shared bootstrap credentials.

use serde_json::Value;

use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::request_info::RequestInfo;
use crate::rest::Call;

const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
const CSR_GROUP: &str = "certificates.k8s.io";
const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// Whether `user` may `verb` (`approve`, `sign`) for `signer`: on `signers` named the signer,
/// or `<domain>/*`.
pub async fn authorized_for_signer(
    authz: &dyn crate::authz::Authorizer,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let mut names = vec![signer.to_string()];
    if let Some((domain, _)) = signer.split_once('/') {
        names.push(format!("{domain}/*"));
    }
    for name in names {
        let info = RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            api_group: CSR_GROUP.into(),
            api_version: "*".into(),
            resource: "signers".into(),
            name,
            ..Default::default()
        };
        if authz.authorize(&crate::authz::Attributes { user, info: &info }).await.allowed() {
            return true;
        }
    }
    false
}

fn csr_forbidden(name: &str, why: String) -> ApiError {
    ApiError::forbidden(
        CSR_GROUP,
        "certificatesigningrequests",
        name,
        format!("certificatesigningrequests.{CSR_GROUP} \"{name}\" is forbidden: {why}"),
    )
}

async fn certificate_signing_request(
    c: &Call<'_>,
    op: Operation,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let name = crate::meta::name(new).to_string();
    let signer = new.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or_default().to_string();
    let authz = c.state.security.authz.as_ref();
    match (op, c.info.subresource.as_str()) {
        (Operation::Create, _) if signer == KUBE_APISERVER_CLIENT => {
            let request = new.pointer("/spec/request").and_then(Value::as_str).unwrap_or_default();
            use base64::Engine as _;
            let pem = base64::engine::general_purpose::STANDARD.decode(request).unwrap_or_default();
            let parsed = kustos_ca::csr::parse_pem(&pem)
                .map_err(|e| csr_forbidden(&name, format!("failed to parse CSR: {e}")))?;
            if parsed.organizations.iter().any(|o| o == crate::authz::MASTERS_GROUP) {
                return Err(csr_forbidden(
                    &name,
                    format!("use of {signer} signer with system:masters group is not allowed"),
                ));
            }
            Ok(())
        }
        (Operation::Update, "approval") => {
            if authorized_for_signer(authz, c.user, "approve", &signer).await {
                Ok(())
            } else {
                Err(csr_forbidden(&name, format!("user not permitted to approve requests with signerName {signer:?}")))
            }
        }
        (Operation::Update, "status") => {
            let cert = |v: Option<&Value>| v.and_then(|v| v.pointer("/status/certificate")).cloned();
            if cert(Some(new)) == cert(old) || authorized_for_signer(authz, c.user, "sign", &signer).await {
                Ok(())
            } else {
                Err(csr_forbidden(&name, format!("user not permitted to sign requests with signerName {signer:?}")))
            }
        }
        _ => Ok(()),
    }
}

/// Reads a requester may not make even though authorization allowed them (see module doc).
/// `field_selector` is the request's `fieldSelector` parameter.
pub fn restrict_read(info: &RequestInfo, user: &UserInfo, field_selector: Option<&str>) -> Result<(), ApiError> {
    let csr = info.api_group == "certificates.k8s.io" && info.resource == "certificatesigningrequests";
    let bootstrapper = user.groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP)
        && !user.groups.iter().any(|g| g == crate::authz::MASTERS_GROUP);
    if !csr || !bootstrapper || !matches!(info.verb.as_str(), "list" | "watch") {
        return Ok(());
    }
    let by_name = field_selector.is_some_and(|fs| {
        let terms: Vec<&str> = fs.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
        terms.iter().any(|t| {
            t.strip_prefix("metadata.name")
                .and_then(|rest| rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')))
                .is_some_and(|v| !v.is_empty() && !v.starts_with('='))
        })
    });
    if by_name {
        return Ok(());
    }
    Err(ApiError::forbidden(
        "certificates.k8s.io",
        "certificatesigningrequests",
        "",
        format!(
            "certificatesigningrequests.certificates.k8s.io is forbidden: User \"{}\" cannot {} resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope: bootstrap tokens may only {} CertificateSigningRequests by name (fieldSelector metadata.name=<name>)",
            user.name, info.verb, info.verb
        ),
    ))
}

/// What is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// Run the admission checks for a write of `new` (`old` is the stored object on update).
pub async fn validate(c: &Call<'_>, op: Operation, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    crate::node_restriction::validate(c, op, new)?;
    if c.def.group == CSR_GROUP && c.def.resource == "certificatesigningrequests" {
        return certificate_signing_request(c, op, new, old).await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::resolve;
    use http::Method;

    #[test]
    fn bootstrap_tokens_read_csrs_only_by_name() {
        let boot = UserInfo {
            name: "system:bootstrap:abcdef".into(),
            groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
            ..Default::default()
        };
        let node =
            UserInfo { name: "system:node:n1".into(), groups: vec!["system:nodes".into()], ..Default::default() };
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        let cases: &[(&str, &UserInfo, &str, Option<&str>, bool)] = &[
            ("list all", &boot, csrs, None, false),
            ("watch all", &boot, &format!("{csrs}?watch=1"), None, false),
            ("list by name", &boot, csrs, Some("metadata.name=csr-1"), true),
            ("list by name ==", &boot, csrs, Some("metadata.name==csr-1"), true),
            ("list by name among other terms", &boot, csrs, Some("spec.signerName=x,metadata.name=csr-1"), true),
            ("not-equal is not by name", &boot, csrs, Some("metadata.name!=csr-1"), false),
            ("empty name", &boot, csrs, Some("metadata.name="), false),
            ("other selector", &boot, csrs, Some("spec.signerName=x"), false),
            ("get by name is fine", &boot, &format!("{csrs}/csr-1"), None, true),
            ("nodes may list", &node, csrs, None, true),
            ("other resources", &boot, "/api/v1/namespaces/default/configmaps", None, true),
        ];
        for (what, user, path, fs, ok) in cases {
            let (p, q) = path.split_once('?').map_or((*path, None), |(p, q)| (p, Some(q)));
            let info = resolve(&Method::GET, p, q);
            assert_eq!(restrict_read(&info, user, *fs).is_ok(), *ok, "{what}");
        }
    }
}
