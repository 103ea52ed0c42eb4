//! PEM as Go's `encoding/pem` reads it, for the texts Kubernetes clients send in API objects
//! (a CSR's `spec.request`, its `status.certificate`).
//!
//! [`decode`] is `pem.Decode`: the first well-formed block anywhere in the input and what
//! follows it; a block whose END line does not match, or whose body is not base64, is
//! skipped. [`decode_single`] is the strict reading of a certificate request: exactly one
//! block, with nothing but whitespace before and after it, so that no two readers can ever
//! pick different blocks out of the same text.

use base64::Engine as _;

/// Go's `base64.StdEncoding`: padded, and lenient about the unused bits of the last symbol.
const PEM_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// One PEM block, as Go's `encoding/pem` sees it.
#[derive(Clone, PartialEq, Eq)]
pub struct Block {
    /// The type from the BEGIN line (`CERTIFICATE REQUEST`, `CERTIFICATE`, ...).
    pub type_: String,
    /// Whether the block had RFC 1421 headers (`Key: value` lines before the body).
    pub has_headers: bool,
    /// The decoded body.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Blocks may hold private keys: never print their contents.
        f.debug_struct("Block")
            .field("type_", &self.type_)
            .field("has_headers", &self.has_headers)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// The first line of `data` without its end-of-line and trailing spaces, and what follows.
fn get_line(data: &[u8]) -> (&[u8], &[u8]) {
    let (line, rest) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[data.len()..]),
    };
    let end = line.iter().rposition(|b| !matches!(b, b' ' | b'\t' | b'\r')).map_or(0, |i| i + 1);
    (&line[..end], rest)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Go's `pem.Decode`: the first well-formed block anywhere in `data`, and the rest after it.
pub fn decode(data: &[u8]) -> Option<(Block, &[u8])> {
    decode_at(data).map(|(block, _, rest)| (block, rest))
}

/// [`decode`], also saying where the block's BEGIN line starts in `data`.
fn decode_at(data: &[u8]) -> Option<(Block, usize, &[u8])> {
    decode_counting(data, &mut 0)
}

/// What Go leaves out of a body before base64-decoding it: spaces and tabs (`encoding/pem`)
/// and line ends (`encoding/base64`).
fn pem_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Whether `b` can stand in a block's body: a base64 symbol or what Go leaves out.
fn body_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=') || pem_space(b)
}

/// [`decode_at`], adding to `work` the bytes it examines. Linear in `data`: a hostile text
/// (thousands of BEGIN lines, one END far away, bodies that never decode) must not cost
/// quadratic time, so the next END marker and the last byte no body may hold are each
/// searched for once and reused by every candidate block that starts before them. A
/// candidate whose body holds another candidate's BEGIN line cannot decode (`-` is not
/// base64), so bodies are decoded only when clean, and clean bodies never overlap.
fn decode_counting<'a>(data: &'a [u8], work: &mut usize) -> Option<(Block, usize, &'a [u8])> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const END: &[u8] = b"\n-----END ";
    const DASHES: &[u8] = b"-----";
    // The first END marker at or after `end_from` (absolute), if any.
    let mut end_from = 0usize;
    let mut next_end: Option<usize> = None;
    let mut end_known = false;
    // Bytes before `bad_scanned` are classified; `last_bad` is the last one no body may hold.
    let mut bad_scanned = 0usize;
    let mut last_bad: Option<usize> = None;
    let mut rest = data;
    loop {
        // Find a BEGIN line at the start of the input or of a line.
        let start = if rest.starts_with(BEGIN) { 0 } else { find(rest, b"\n-----BEGIN ")? + 1 };
        *work += start + 1;
        let offset = data.len() - rest.len() + start;
        let (type_line, after) = get_line(&rest[start + BEGIN.len()..]);
        *work += type_line.len();
        rest = after;
        if !type_line.ends_with(DASHES) {
            continue;
        }
        let type_line = &type_line[..type_line.len() - DASHES.len()];
        let mut body = after;
        let mut has_headers = false;
        loop {
            if body.is_empty() {
                return None;
            }
            let (line, next) = get_line(body);
            *work += line.len() + 1;
            if !line.contains(&b':') {
                break;
            }
            has_headers = true;
            body = next;
        }
        let body_start = data.len() - body.len();
        let (end_index, trailer_index) = if !has_headers && body.starts_with(&END[1..]) {
            (0, END.len() - 1)
        } else {
            if !end_known || next_end.is_some_and(|e| e < body_start) || body_start < end_from {
                end_from = body_start;
                next_end = find(body, END).map(|i| body_start + i);
                *work += next_end.map_or(body.len(), |e| e - body_start + END.len());
                end_known = true;
            }
            // No END marker anywhere after this BEGIN: no later block can have one either.
            let e = next_end?;
            (e - body_start, e - body_start + END.len())
        };
        let trailer = &body[trailer_index..];
        let want = type_line.len() + DASHES.len();
        if trailer.len() < want || !trailer[..want].starts_with(type_line) || !trailer[..want].ends_with(DASHES) {
            rest = body;
            continue;
        }
        let (end_rest, after_block) = get_line(&trailer[want..]);
        if !end_rest.is_empty() {
            rest = body;
            continue;
        }
        let end_abs = body_start + end_index;
        if bad_scanned < end_abs {
            let from = bad_scanned.max(body_start);
            if let Some(i) = data[from..end_abs].iter().rposition(|&b| !body_byte(b)) {
                last_bad = Some(from + i);
            }
            *work += end_abs - from;
            bad_scanned = end_abs;
        }
        if last_bad.is_some_and(|b| b >= body_start && b < end_abs) {
            rest = body;
            continue;
        }
        let b64: Vec<u8> = body[..end_index].iter().copied().filter(|&b| !pem_space(b)).collect();
        *work += end_index;
        match PEM_BASE64.decode(&b64) {
            Ok(bytes) => {
                let block = Block { type_: String::from_utf8_lossy(type_line).into_owned(), has_headers, bytes };
                return Some((block, offset, after_block));
            }
            Err(_) => rest = body,
        }
    }
}

/// Why a text is not exactly one PEM block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SingleError {
    /// No well-formed block at all.
    NoBlock,
    /// Something other than whitespace before or after the block (another block, a
    /// malformed one, text).
    NotAlone,
}

/// Exactly one well-formed block, with nothing but ASCII whitespace before and after it.
/// A text holding a malformed block and then a good one is refused, although [`decode`]
/// (and Go) would skip to the good one.
pub fn decode_single(data: &[u8]) -> Result<Block, SingleError> {
    let (block, start, rest) = decode_at(data).ok_or(SingleError::NoBlock)?;
    let before = &data[..start];
    if before.iter().all(u8::is_ascii_whitespace) && rest.iter().all(u8::is_ascii_whitespace) {
        Ok(block)
    } else {
        Err(SingleError::NotAlone)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const GOOD: &str = "-----BEGIN CERTIFICATE REQUEST-----\nAAEC\n-----END CERTIFICATE REQUEST-----\n";

    #[test]
    fn decode_follows_go() {
        let input = format!("junk\n{GOOD}tail");
        let (b, rest) = decode(input.as_bytes()).unwrap();
        assert_eq!(b.type_, "CERTIFICATE REQUEST", "skips leading junk");
        assert_eq!(b.bytes, [0, 1, 2]);
        assert!(!b.has_headers, "no headers");
        assert_eq!(rest, b"tail", "rest after the block");
        assert!(decode(b"no pem here").is_none(), "no block");
        let headers = "-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(decode(headers.as_bytes()).unwrap().0.has_headers, "headers");
        let bad_then_good = format!("-----BEGIN X-----\n!!!\n-----END X-----\n{GOOD}");
        assert_eq!(decode(bad_then_good.as_bytes()).unwrap().0.type_, "CERTIFICATE REQUEST", "bad block skipped");
        let mismatched_end = format!("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE-----\n{GOOD}");
        assert_eq!(decode(mismatched_end.as_bytes()).unwrap().0.bytes, [0, 1, 2], "mismatched END skipped");
    }

    #[test]
    fn hostile_texts_cost_linear_work() {
        let good = GOOD.as_bytes();
        // Thousands of BEGIN lines (plain, with headers, with a far END of another type or of
        // the same type over an undecodable body), then a good block: examined bytes stay
        // within a small multiple of the input.
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("BEGIN lines, no END", b"-----BEGIN X-----\n".repeat(20_000), false),
            (
                "BEGIN lines, a far END of another type",
                [b"-----BEGIN X-----\n".repeat(20_000), b"-----END Y-----\n".to_vec(), good.to_vec()].concat(),
                true,
            ),
            (
                "BEGIN lines over one END of their type",
                [b"-----BEGIN X-----\n".repeat(20_000), b"!!\n-----END X-----\n".to_vec(), good.to_vec()].concat(),
                true,
            ),
            (
                "header-like BEGIN lines",
                [b"-----BEGIN a:b-----\n".repeat(20_000), b"A=A=\n-----END a:b-----\n".to_vec(), good.to_vec()]
                    .concat(),
                true,
            ),
        ];
        for (what, input, found) in cases {
            let mut work = 0;
            let got = decode_counting(&input, &mut work);
            assert_eq!(got.is_some(), found, "{what}");
            if let Some((block, _, _)) = got {
                assert_eq!(block.bytes, [0, 1, 2], "{what}");
            }
            assert!(work <= 4 * input.len() + 1024, "{what}: {work} bytes examined for {}", input.len());
        }
        // Go leaves out only spaces, tabs and line ends: a form feed spoils the body.
        let form_feed = "-----BEGIN X-----\nAA\x0cEC\n-----END X-----\n";
        assert!(decode(form_feed.as_bytes()).is_none());
    }

    #[test]
    fn decode_single_takes_one_block_and_whitespace_only() {
        let mismatched_end = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE-----\n";
        type Case = (&'static str, String, Result<Vec<u8>, SingleError>);
        let cases: Vec<Case> = vec![
            ("one block", GOOD.to_string(), Ok(vec![0, 1, 2])),
            ("whitespace around", format!(" \r\n{GOOD}\n\n  "), Ok(vec![0, 1, 2])),
            ("no final newline", GOOD.trim_end().to_string(), Ok(vec![0, 1, 2])),
            ("empty", String::new(), Err(SingleError::NoBlock)),
            ("text", "hello".into(), Err(SingleError::NoBlock)),
            ("text before", format!("x\n{GOOD}"), Err(SingleError::NotAlone)),
            ("text after", format!("{GOOD}x"), Err(SingleError::NotAlone)),
            ("two blocks", format!("{GOOD}{GOOD}"), Err(SingleError::NotAlone)),
            ("mangled block then a good one", format!("{mismatched_end}{GOOD}"), Err(SingleError::NotAlone)),
            (
                "bad base64 then a good one",
                format!("-----BEGIN X-----\n!!\n-----END X-----\n{GOOD}"),
                Err(SingleError::NotAlone),
            ),
            ("only a mangled block", mismatched_end.to_string(), Err(SingleError::NoBlock)),
        ];
        for (what, input, want) in cases {
            assert_eq!(decode_single(input.as_bytes()).map(|b| b.bytes), want, "{what}");
        }
    }
}
