//! The CSR reader: `spec.request` of a CertificateSigningRequest, as validation, admission,
//! the approvers and the signer read it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kustos_ca::csr::parse_pem(data);
    let _ = kustos_ca::csr::parse_pem_unverified(data);
    // The DER behind the PEM armour, reached directly so that mutations are not all spent on
    // the base64 layer.
    let _ = kustos_ca::csr::parse_der(data);
});
