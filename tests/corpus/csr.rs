//! Certificate signing requests from a bootstrap token (anyone holding a joining node's
//! token): `spec.request` built to make parsing, signature checks or the controllers that
//! read every new CSR (approver, signer) expensive.

use base64::Engine as _;
use serde_json::json;

use super::wire::{
    csr_der, csr_info, der, der_nested, node_subject, oid, p256_spki, pem, rsa_spki, seq, OCTET_STRING, SEQUENCE, SET,
};
use super::*;

const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// A CSR object around `request` (PEM bytes).
fn csr_object(request: &[u8], signer: &str) -> String {
    json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "hostile-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(request), "signerName": signer,
                 "usages": ["digital signature", "client auth"]}
    })
    .to_string()
}

fn create(name: &str, request: &[u8], expect: &[u16]) -> Case {
    Case::post(name, Who::Bootstrap, CSRS, JSON, csr_object(request, KUBELET_CLIENT)).expect(expect)
}

/// A CSR for `system:node:<node>` with `dns` SANs, signed for real (P-256).
fn signed_csr(node: &str, dns: usize) -> String {
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("a P-256 key: {e}"));
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    for i in 0..dns {
        let name = format!("n{i}.example.com");
        params.subject_alt_names.push(rcgen::SanType::DnsName(name.try_into().unwrap_or_else(|e| panic!("{e}"))));
    }
    let csr = params.serialize_request(&key).unwrap_or_else(|e| panic!("a CSR: {e}"));
    csr.pem().unwrap_or_else(|e| panic!("CSR PEM: {e}"))
}

/// The extensionRequest attribute holding `extensions` (each a DER Extension).
fn extension_request(extensions: &[Vec<u8>]) -> Vec<u8> {
    seq(&[oid(&[1, 2, 840, 113549, 1, 9, 14]), der(SET, &seq(extensions))])
}

pub fn cases(ctx: &Ctx) -> Vec<Case> {
    let node = &ctx.node;
    let mut c = Vec::new();
    // A subject nested 100k SEQUENCEs deep.
    let deep = der_nested(SEQUENCE, 100_000);
    let req = csr_der(csr_info(deep, p256_spki(), Vec::new()));
    c.push(create("csr: a subject nested 100k deep", pem("CERTIFICATE REQUEST", &req).as_bytes(), &[400, 422]));
    // One extension of 1 MB, and 20k small ones.
    let big = seq(&[oid(&[1, 3, 6, 1, 4, 1, 99999, 1]), der(OCTET_STRING, &vec![0x41; 1_000_000])]);
    let req = csr_der(csr_info(node_subject(node), p256_spki(), extension_request(&[big])));
    // Too big to store: refused before its ownership is worked out (413), or as invalid.
    c.push(create("csr: a 1 MB extension", pem("CERTIFICATE REQUEST", &req).as_bytes(), &[400, 413, 422]));
    let many: Vec<Vec<u8>> =
        (0..20_000u64).map(|i| seq(&[oid(&[1, 3, 6, 1, 4, 1, 99999, i]), der(OCTET_STRING, b"x")])).collect();
    let req = csr_der(csr_info(node_subject(node), p256_spki(), extension_request(&many)));
    c.push(create("csr: 20k extensions", pem("CERTIFICATE REQUEST", &req).as_bytes(), &[400, 422]));
    // SANs: 10k in a validly signed request (created; the approver and signer then read it),
    // 60k in a request whose signature does not verify.
    c.push(create("csr: 10k SANs, validly signed", signed_csr(node, 10_000).as_bytes(), &[201, 400, 422]));
    let sans: Vec<u8> = (0..60_000).flat_map(|i| der(0x82, format!("n{i}.example.com").as_bytes())).collect();
    let san_ext = seq(&[oid(&[2, 5, 29, 17]), der(OCTET_STRING, &der(SEQUENCE, &sans))]);
    let req = csr_der(csr_info(node_subject(node), p256_spki(), extension_request(&[san_ext])));
    c.push(create("csr: 60k SANs, bad signature", pem("CERTIFICATE REQUEST", &req).as_bytes(), &[400, 413, 422]));
    // RSA keys: 16384 bits, and an exponent of 4096 bits.
    let req = csr_der(csr_info(node_subject(node), rsa_spki(16384, &[1, 0, 1]), Vec::new()));
    c.push(create("csr: an RSA 16384-bit key", pem("CERTIFICATE REQUEST", &req).as_bytes(), &[400, 422]));
    let mut exponent = vec![0xff; 512];
    exponent.insert(0, 0);
    let req = csr_der(csr_info(node_subject(node), rsa_spki(4096, &exponent), Vec::new()));
    c.push(create(
        "csr: an RSA key with a 4096-bit exponent",
        pem("CERTIFICATE REQUEST", &req).as_bytes(),
        &[400, 422],
    ));
    // Not a request at all: 1.1 MB of garbage PEM, 20k PEM blocks, a length of 2^62.
    let garbage = pem("CERTIFICATE REQUEST", &vec![0x30; 800_000]);
    c.push(create("csr: 800 KB of garbage DER", garbage.as_bytes(), &[400, 422]));
    let blocks = signed_csr(node, 0).repeat(1_000);
    c.push(create("csr: 1,000 PEM blocks", blocks.as_bytes(), &[400, 422]));
    let mut lie = vec![0x30, 0x88];
    lie.extend((1u64 << 62).to_be_bytes());
    lie.extend(vec![0; 1000]);
    c.push(create("csr: a DER length of 2^62", pem("CERTIFICATE REQUEST", &lie).as_bytes(), &[400, 422]));
    // 100 small CSRs in a row from one bootstrap token (each one auto-approved and signed).
    let small = signed_csr(node, 0);
    c.push(create("csr: 100 valid CSRs in a row", small.as_bytes(), &[201]).repeat(100));
    c
}
