//! Detached JWS (RFC 7515, appendix F) with HS256, as the bootstrap signer writes into the
//! `kube-public/cluster-info` ConfigMap and as a joining node checks it.
//!
//! The value is `<header>..<signature>`: the compact serialization with the payload left
//! out. The header is `{"alg":"HS256","kid":"<token id>"}` (the byte sequence upstream's
//! signer produces), every part is base64url without padding, and the signature is
//! HMAC-SHA256 over `<header>.<base64url(content)>`.
//!
//! The key is the caller's choice. kustos' bootstrap signer keys with the token secret alone,
//! as upstream's signer does and as every verifier that runs expects (kubeadm's discovery,
//! cluster-bootstrap's `DetachedTokenIsValid`). The bootstrap-token reference page says "the
//! full token `<id>.<secret>`"; the code that real clients run wins.
//! Upstream pads keys shorter than 32 bytes with zero bytes; HMAC pads every key to its
//! 64-byte block with zeros anyway, so the result is the same and no padding happens here.
//!
//! No I/O and no clock: bytes in, a string out.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::hmac;

/// The protected header, base64url without padding.
fn header(key_id: &str) -> String {
    // Token ids are `[a-z0-9]{6}`, which every JSON encoder renders alike; other ids are
    // escaped as JSON strings.
    let kid = serde_json::Value::String(key_id.to_string()).to_string();
    URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"HS256","kid":{kid}}}"#))
}

/// HMAC-SHA256 of `signing_input` with `key`, base64url without padding.
fn hs256(signing_input: &[u8], key: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    URL_SAFE_NO_PAD.encode(hmac::sign(&key, signing_input).as_ref())
}

/// The detached JWS of `content`: `<header>..<signature>`, HS256 with `key`, `kid` =
/// `key_id`.
pub fn detached_signature(content: &[u8], key_id: &str, key: &[u8]) -> String {
    let header = header(key_id);
    let signing_input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(content));
    format!("{header}..{}", hs256(signing_input.as_bytes(), key))
}

/// Whether `detached` is the detached JWS of `content` for `key_id` and `key`, compared in
/// constant time.
pub fn detached_signature_is_valid(detached: &str, content: &[u8], key_id: &str, key: &[u8]) -> bool {
    crate::jwt::constant_time_eq(detached.as_bytes(), detached_signature(content, key_id, key).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors of upstream's signer tests (keyed by the token secret) and one keyed by the
    // full token, all computed independently with Python's `hmac` and `base64` modules.
    const CONTENT: &str = "Hello from the other side. I must have called a thousand times.";
    const SECRET: &str = "my voice is my passcode";
    const ID: &str = "joshua";

    #[test]
    fn detached_signatures_match_known_vectors() {
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                "content and key",
                CONTENT,
                SECRET,
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8",
            ),
            (
                "empty content",
                "",
                SECRET,
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk",
            ),
            (
                "the full token as key (what no verifier accepts)",
                CONTENT,
                "joshua.my voice is my passcode",
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..jK5v1I-RC5HX2In2GV2O72WvNTwPZ0qUiERCC4cfkkI",
            ),
            (
                "empty key",
                CONTENT,
                "",
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8",
            ),
        ];
        for (name, content, key, want) in cases {
            let got = detached_signature(content.as_bytes(), ID, key.as_bytes());
            assert_eq!(got, *want, "{name}");
            assert!(detached_signature_is_valid(want, content.as_bytes(), ID, key.as_bytes()), "{name}");
        }
    }

    #[test]
    fn the_header_is_upstreams() {
        let sig = detached_signature(b"x", "abcdef", b"k");
        let (h, rest) = sig.split_once("..").unwrap_or_default();
        assert!(!rest.is_empty() && !rest.contains('.'), "one signature part: {sig}");
        let decoded = URL_SAFE_NO_PAD.decode(h).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&decoded), r#"{"alg":"HS256","kid":"abcdef"}"#);
    }

    /// RFC 7515 appendix A.1: the HMAC layer against the specification's own example.
    #[test]
    fn hs256_matches_rfc7515_appendix_a1() {
        let key = URL_SAFE_NO_PAD
            .decode("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow")
            .unwrap_or_default();
        let input = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";
        assert_eq!(hs256(input.as_bytes(), &key), "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk");
    }

    #[test]
    fn tampered_signatures_do_not_verify() {
        let good = detached_signature(CONTENT.as_bytes(), ID, SECRET.as_bytes());
        let cases: Vec<(&str, String, &str, &str, &str)> = vec![
            ("suffix added", format!("{good}foo"), CONTENT, ID, SECRET),
            ("other content", good.clone(), "Hello", ID, SECRET),
            ("other key id", good.clone(), CONTENT, "joshub", SECRET),
            ("other key", good.clone(), CONTENT, ID, "my voice is my passcodf"),
            (
                "the full token for a secret-keyed signature",
                good.clone(),
                CONTENT,
                ID,
                "joshua.my voice is my passcode",
            ),
            ("empty", String::new(), CONTENT, ID, SECRET),
        ];
        for (name, sig, content, id, key) in cases {
            assert!(!detached_signature_is_valid(&sig, content.as_bytes(), id, key.as_bytes()), "{name}");
        }
    }
}
