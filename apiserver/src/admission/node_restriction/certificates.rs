//! NodeRestriction for CertificateSigningRequests, as upstream's `admitCSR` (on by default
//! since Kubernetes 1.31, where the feature gate `AllowInsecureKubeletCertificateSigningRequests`
//! turns it off; kustos has no such switch): a node creates a request for the
//! `kubernetes.io/kubelet-serving` or `kubernetes.io/kube-apiserver-client-kubelet` signer only
//! with the subject CN `system:node:<itself>`. So a node cannot ask for a neighbour's client or
//! serving certificate, even one an administrator would approve by hand. Requests for other
//! signers, and every other write, are not this rule's business; a bootstrap token is no node.
//!
//! In: a create by node `<name>`. Out: why it is refused (403), if it is. The CN is read by the
//! one CSR reader ([`kustos_ca::csr`]), as Go's `crypto/x509` reads it; a request it cannot read
//! is refused here as upstream's ("unable to parse csr: ..."). `spec.request` is base64 on the
//! wire: a body whose request is not base64 does not decode, and is answered 400 before
//! admission.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::Write;
use crate::admission::Operation;

/// The signers whose requests must name the requesting node.
pub const KUBELET_SIGNERS: [&str; 2] = ["kubernetes.io/kubelet-serving", "kubernetes.io/kube-apiserver-client-kubelet"];

/// Why `node` may not make this write to a CertificateSigningRequest, if it may not.
pub fn problem(node: &str, write: &Write<'_, CertificateSigningRequest>) -> Option<String> {
    if write.op != Operation::Create {
        return None;
    }
    let spec = write.new.map(|v| &v.spec);
    let signer = spec.map_or("", |s| s.signer_name.as_str());
    if !KUBELET_SIGNERS.contains(&signer) {
        return None;
    }
    let pem = spec.map_or(&[][..], |s| s.request.0.as_slice());
    // The signature is checked by validation, after admission, as upstream's `ParseCSR` leaves it.
    let common_name = match kustos_ca::csr::parse_pem_unverified(pem) {
        Ok(req) => req.common_name,
        Err(e) => return Some(format!("unable to parse csr: {e}")),
    };
    let want = format!("{}{node}", crate::authz::rbac::node::NODE_USER_PREFIX);
    (common_name != want).then(|| format!("can only create a node CSR with CN={want}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::{json, Value};

    fn request(cn: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn csr(signer: &str, request: &str) -> Value {
        json!({"metadata": {"generateName": "csr-"}, "spec": {"signerName": signer, "request": request}})
    }

    #[test]
    fn nodes_ask_for_kubelet_certificates_only_in_their_own_name() {
        let serving = "kubernetes.io/kubelet-serving";
        let client = "kubernetes.io/kube-apiserver-client-kubelet";
        let own = request("system:node:n1");
        let other = request("system:node:n2");
        let plain = request("n1");
        let refused = Some("can only create a node CSR with CN=system:node:n1".to_string());
        let cases: Vec<(&str, Operation, Value, Option<String>)> = vec![
            ("own serving", Operation::Create, csr(serving, &own), None),
            ("own client", Operation::Create, csr(client, &own), None),
            ("another node's serving", Operation::Create, csr(serving, &other), refused.clone()),
            ("another node's client", Operation::Create, csr(client, &other), refused.clone()),
            ("a CN that is no node", Operation::Create, csr(serving, &plain), refused),
            ("another signer", Operation::Create, csr("kubernetes.io/kube-apiserver-client", &other), None),
            ("a custom signer", Operation::Create, csr("example.com/x", &other), None),
            ("an update", Operation::Update, csr(serving, &other), None),
            (
                "not a request",
                Operation::Create,
                csr(client, ""),
                Some("unable to parse csr: PEM block type must be CERTIFICATE REQUEST".into()),
            ),
        ];
        for (what, op, obj, want) in cases {
            let obj: CertificateSigningRequest = crate::admission::decode(&obj).unwrap();
            let w = Write {
                group: "certificates.k8s.io",
                resource: "certificatesigningrequests",
                subresource: "",
                op,
                namespace: "",
                url_name: "",
                new: Some(&obj),
                old: None,
            };
            assert_eq!(problem("n1", &w), want, "{what}");
        }
        // Not base64: the typed form refuses it (a 400 before admission), so no node's
        // request is judged on it.
        assert!(crate::admission::decode::<CertificateSigningRequest>(&csr(serving, "%%%")).is_err());
    }
}
