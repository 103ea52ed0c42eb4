//! Writing a response: JSON, YAML or protobuf per the negotiated output, gzip when big and
//! accepted, and the bounded `Warning` headers; error `Status` bodies in protobuf when the
//! client prefers it ([`status_errors_negotiated`]).

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde_json::Value;

use super::*;
use crate::error::ApiError;
use crate::wire::negotiate::Output;
use crate::wire::protobuf;
use crate::work::{self, Format, Site};

/// The largest error body re-encoded as protobuf (a Status is a few KiB at most).
const MAX_STATUS_BODY: usize = 1 << 20;

/// Serialize a body per the negotiated output (JSON, YAML or protobuf), gzip when big and
/// accepted. A body of a kind without a protobuf form goes out as JSON.
pub fn render(
    code: StatusCode,
    body: &Value,
    out: &Output,
    headers: &HeaderMap,
    pretty: bool,
    warnings: &[String],
) -> Response {
    let pb = if out.protobuf {
        match protobuf::encode::encode(body) {
            Ok(b) => {
                work::encoded(Format::Protobuf, Site::Response);
                Some(b)
            }
            Err(protobuf::encode::EncodeError::UnknownKind { .. }) => None,
            Err(e) => return ApiError::internal(e).into_response(),
        }
    } else {
        None
    };
    let (bytes, ctype) = if let Some(b) = pb {
        (b, protobuf::MEDIA_TYPE)
    } else if out.yaml {
        work::encoded(Format::Yaml, Site::Response);
        match serde_yaml::to_string(body) {
            Ok(s) => (s.into_bytes(), "application/yaml"),
            Err(e) => return ApiError::internal(e).into_response(),
        }
    } else {
        work::encoded(Format::Json, Site::Response);
        let r = if pretty { serde_json::to_vec_pretty(body) } else { serde_json::to_vec(body) };
        match r {
            Ok(b) => (b, "application/json"),
            Err(e) => return ApiError::internal(e).into_response(),
        }
    };
    send_bytes(code, bytes, ctype, headers, warnings)
}

/// Send serialized bytes: gzip when big and accepted, plus `Warning` headers.
pub fn send_bytes(
    code: StatusCode,
    bytes: Vec<u8>,
    ctype: &'static str,
    headers: &HeaderMap,
    warnings: &[String],
) -> Response {
    let gzip = bytes.len() >= GZIP_MIN
        && headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let mut resp = if gzip {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        match enc.write_all(&bytes).and_then(|_| enc.finish()) {
            Ok(z) => {
                let mut r = (code, z).into_response();
                r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                r
            }
            Err(e) => return ApiError::internal(e).into_response(),
        }
    } else {
        (code, bytes).into_response()
    };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    for v in warning_headers(warnings) {
        resp.headers_mut().append(header::WARNING, v);
    }
    resp
}

/// Middleware: an error answer (a JSON `Status`, whoever wrote it: authentication,
/// authorization, flow control or a handler) is re-encoded as protobuf when the client's
/// Accept header prefers protobuf, as upstream's `ErrorNegotiated` answers.
pub async fn status_errors_negotiated(req: Request, next: Next) -> Response {
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
    let resp = next.run(req).await;
    let code = resp.status();
    if !(code.is_client_error() || code.is_server_error())
        || !crate::wire::negotiate::status_as_protobuf(accept.as_deref())
        || resp.headers().contains_key(header::CONTENT_ENCODING)
        || resp.headers().get(header::CONTENT_TYPE).map(HeaderValue::as_bytes) != Some(b"application/json")
    {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_STATUS_BODY).await else {
        return ApiError::internal("error body too large").into_response();
    };
    work::decoded(Format::Json, Site::Response);
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(|v| v.get("kind").and_then(Value::as_str) == Some("Status"))
        .and_then(|v| protobuf::encode::encode(&v).ok());
    if encoded.is_some() {
        work::encoded(Format::Protobuf, Site::Response);
    }
    match encoded {
        Some(pb) => {
            parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(protobuf::MEDIA_TYPE));
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(pb))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// Warning text kept per response, in characters, before items are truncated
/// (k8s.io/apiserver `filters/warning.go` `truncateAtTotalRunes`).
pub const WARNING_TOTAL_CHARS: usize = 4 * 1024;
/// Characters an item keeps once the total is exceeded (`truncateItemRunes`).
pub const WARNING_ITEM_CHARS: usize = 256;

/// The `Warning` header values for `warnings`, bounded as upstream's warning recorder
/// bounds them: empty and repeated texts dropped, and once the texts add up to more than
/// [`WARNING_TOTAL_CHARS`] characters every item is cut to [`WARNING_ITEM_CHARS`] and
/// items stop being added when the total is reached. A text that cannot be a header value
/// (control characters) is left out.
pub fn warning_headers(warnings: &[String]) -> Vec<HeaderValue> {
    let cut = |t: &str| -> (String, usize) {
        match t.char_indices().nth(WARNING_ITEM_CHARS) {
            Some((i, _)) => (t[..i].to_string(), WARNING_ITEM_CHARS),
            None => (t.to_string(), t.chars().count()),
        }
    };
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut out: Vec<HeaderValue> = Vec::new();
    let mut written = 0usize;
    let mut truncating = false;
    for w in warnings {
        if w.is_empty() {
            continue;
        }
        if truncating && written >= WARNING_TOTAL_CHARS {
            break;
        }
        if !seen.insert(w.as_str()) {
            continue;
        }
        kept.push(w);
        let (text, chars) = if truncating { cut(w) } else { (w.clone(), w.chars().count()) };
        let Some(value) = warning_value(&text) else { continue };
        if truncating || written + chars <= WARNING_TOTAL_CHARS {
            written += chars;
            out.push(value);
            continue;
        }
        // Over the budget: start again with every item so far cut short.
        truncating = true;
        written = 0;
        out.clear();
        for k in &kept {
            let (text, chars) = cut(k);
            if let Some(v) = warning_value(&text) {
                written += chars;
                out.push(v);
            }
        }
    }
    out
}

/// `299 - "<text>"` with `\` and `"` escaped (apimachinery `NewWarningHeader`); `None` for
/// text with control characters.
fn warning_value(text: &str) -> Option<HeaderValue> {
    if text.chars().any(char::is_control) {
        return None;
    }
    let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
    HeaderValue::from_bytes(format!("299 - \"{quoted}\"").as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_texts(warnings: &[String]) -> Vec<String> {
        warning_headers(warnings).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect()
    }

    #[test]
    fn warning_headers_are_quoted_and_deduplicated() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: Vec<(&str, Vec<String>, Vec<String>)> = vec![
            ("none", vec![], vec![]),
            ("one", s(&["x"]), s(&[r#"299 - "x""#])),
            ("quotes and backslashes", s(&[r#"a "b" \c"#]), s(&[r#"299 - "a \"b\" \\c""#])),
            ("duplicates once", s(&["x", "y", "x"]), s(&[r#"299 - "x""#, r#"299 - "y""#])),
            ("empty dropped", s(&["", "x"]), s(&[r#"299 - "x""#])),
            ("control characters dropped", s(&["a\nb", "x"]), s(&[r#"299 - "x""#])),
            ("non-ASCII kept", s(&["é"]), s(&["299 - \"é\""])),
        ];
        for (name, input, want) in cases {
            assert_eq!(header_texts(&input), want, "{name}");
        }
    }

    #[test]
    fn warning_headers_are_bounded() {
        let item = |c: char, n: usize| c.to_string().repeat(n);
        // Under the budget: as they are.
        let fits: Vec<String> = (0..4).map(|i| item(char::from(b'a' + i), 1000)).collect();
        let got = header_texts(&fits);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|h| h.len() == 1000 + 8));
        // Over it: every item cut to 256 characters, and no more once 4096 are written.
        let many: Vec<String> = (0..10_000).map(|i| format!("{i:05}{}", item('w', 1000))).collect();
        let got = header_texts(&many);
        let chars: usize = got.iter().map(|h| h.chars().count() - 8).sum();
        assert!(got.iter().all(|h| h.chars().count() - 8 <= WARNING_ITEM_CHARS), "items cut");
        assert_eq!(got.len(), WARNING_TOTAL_CHARS / WARNING_ITEM_CHARS, "items kept");
        assert!(chars <= WARNING_TOTAL_CHARS + WARNING_ITEM_CHARS, "{chars} characters");
        assert!(got[0].starts_with("299 - \"00000w"), "order kept: {}", got[0]);
        // Cuts count characters, not bytes.
        let wide: Vec<String> = (0..20).map(|i| format!("{i:02}{}", item('é', 500))).collect();
        for h in header_texts(&wide) {
            assert_eq!(h.chars().count() - 8, WARNING_ITEM_CHARS, "{h}");
        }
    }
}
