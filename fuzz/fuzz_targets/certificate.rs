//! The certificate reader: client certificates, CA bundles and the certificates kustos reads
//! back from its own files and objects.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kustos_ca::parse_certificate_der(data);
    if let Ok(pem) = std::str::from_utf8(data) {
        let _ = kustos_ca::parse_certificate_pem(pem);
        if let Ok(ders) = kustos_ca::certificates_from_pem(pem) {
            for der in ders {
                let _ = kustos_ca::parse_certificate_der(&der);
            }
        }
    }
});
