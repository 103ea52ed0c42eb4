//! Service-account tokens (JWTs) as the authenticator reads them: the unverified issuer
//! pre-check, the unverified decode, verification against RSA and ECDSA keys, and the
//! claims of a token whose signature checks.
#![no_main]

use std::sync::OnceLock;

use kustos_ca::jwt::{self, BoundClaims, LegacyClaims, PublicKey, SigningKey};
use libfuzzer_sys::fuzz_target;

/// The keys the seed tokens are signed with (ca/src/testdata, generated with openssl).
fn keys() -> &'static [PublicKey] {
    static KEYS: OnceLock<Vec<PublicKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = jwt::public_keys_from_pem(include_str!("../../ca/src/testdata/jwt_rsa.pub")).unwrap_or_default();
        for pem in [
            include_str!("../../ca/src/testdata/jwt_ec384_sec1.key"),
            include_str!("../../ca/src/testdata/ec_sec1.pem"),
        ] {
            if let Ok(k) = SigningKey::from_pem(pem) {
                keys.push(k.public_key().clone());
            }
        }
        keys
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else { return };
    let _ = jwt::unverified_issuer(token);
    let _ = jwt::decode_unverified(token);
    let claims = match jwt::verify(token, keys()) {
        Ok(claims) => claims,
        // Claims readers run on verified payloads; reach them with forged ones too.
        Err(_) => match jwt::decode_unverified(token) {
            Ok((_, claims)) => claims,
            Err(_) => return,
        },
    };
    if let Ok(bound) = BoundClaims::from_claims(&claims) {
        let _ = bound.to_json();
    }
    if let Ok(legacy) = LegacyClaims::from_claims(&claims) {
        let _ = legacy.check();
    }
});
