//! The `:authority` of gRPC clients on a Unix socket, made one the server reads.
//!
//! grpc-core's clients (Python, C++, Ruby, PHP) and grpc-java send a Unix socket's path,
//! percent-encoded, as HTTP/2's `:authority` (`%2Frun%2Fkustos%2Fsa-signer.sock`). That is
//! no URI authority, and the HTTP/2 server under tonic refuses the request as malformed
//! (`RST_STREAM` `PROTOCOL_ERROR`); grpc-go (kube-apiserver) sends `localhost`. So between
//! each accepted connection and the server sits [`relay`]: it passes the server's bytes back
//! as they are, and the client's frames too, but for header blocks, which it decodes (HPACK),
//! gives `localhost` as `:authority` where theirs does not parse as one, and encodes again.
//!
//! In: the connection's bytes. Out: the same HTTP/2 stream of frames to the server, every
//! header block carrying the same headers in the same order (an `:authority` replaced), each
//! in a HEADERS frame (padding dropped, priority kept) and as many CONTINUATION frames as the
//! default frame size needs. A connection that does not speak HTTP/2 as it should (a bad
//! preface, a header block that does not decode, one over [`MAX_HEADER_BLOCK`] or decoding
//! to over [`MAX_HEADER_LIST`]) is closed.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every peer takes (`SETTINGS_MAX_FRAME_SIZE`'s initial value).
const FRAME_SIZE: usize = 16_384;
/// The largest header block taken (a gRPC call's headers are a few hundred bytes).
pub const MAX_HEADER_BLOCK: usize = 256 * 1024;
/// The largest header list a block may decode to, counted as HTTP/2 counts it (each field's
/// name and value plus 32 bytes). HPACK lets one byte name an entry of the dynamic table of
/// up to 4 KiB, so a block may not decode to more than this, whatever its own size.
pub const MAX_HEADER_LIST: usize = 256 * 1024;
/// The `:authority` given where the client's does not parse.
const AUTHORITY: &[u8] = b"localhost";

/// Relay one connection between `client` and `server` until either side closes.
pub async fn relay<C, S>(client: C, server: S) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let upstream = async {
        let result = client_to_server(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
        result
    };
    let downstream = async {
        let result = tokio::io::copy(&mut server_read, &mut client_write).await.map(|_| ());
        let _ = client_write.shutdown().await;
        result
    };
    let (up, down) = tokio::join!(upstream, downstream);
    up.and(down)
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

async fn client_to_server<R, W>(from: &mut R, to: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; PREFACE.len()];
    from.read_exact(&mut preface).await?;
    if preface != PREFACE {
        return Err(refused("not an HTTP/2 connection"));
    }
    to.write_all(&preface).await?;
    let mut decoder = loona_hpack::Decoder::new();
    let mut encoder = loona_hpack::Encoder::new();
    loop {
        let Some((kind, flags, stream, payload)) = read_frame(from).await? else { return Ok(()) };
        if kind != HEADERS {
            to.write_all(&frame(kind, flags, stream, &payload)).await?;
            continue;
        }
        let (priority, mut block) = headers_payload(flags, &payload)?;
        if block.len() > MAX_HEADER_BLOCK {
            return Err(refused("a header block over the size taken"));
        }
        let mut end_headers = flags & END_HEADERS != 0;
        while !end_headers {
            let Some((kind, more_flags, more_stream, more)) = read_frame(from).await? else {
                return Err(refused("the connection ended inside a header block"));
            };
            if kind != CONTINUATION || more_stream != stream {
                return Err(refused("a header block was interrupted"));
            }
            if block.len() + more.len() > MAX_HEADER_BLOCK {
                return Err(refused("a header block over the size taken"));
            }
            block.extend_from_slice(&more);
            end_headers = more_flags & END_HEADERS != 0;
        }
        let headers = decode(&mut decoder, &block)?;
        let encoded = encoder.encode(with_authority(&headers).iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        to.write_all(&headers_frames(flags & END_STREAM, stream, priority.as_deref(), &encoded)).await?;
    }
}

/// The fields of a header block, refused when they come to over [`MAX_HEADER_LIST`]: past
/// it nothing more is copied, so what a block costs stays a bounded multiple of its size.
fn decode(decoder: &mut loona_hpack::Decoder<'_>, block: &[u8]) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut headers = Vec::new();
    let mut size = 0usize;
    decoder
        .decode_with_cb(block, |name, value| {
            size = size.saturating_add(name.len() + value.len() + 32);
            if size <= MAX_HEADER_LIST {
                headers.push((name.into_owned(), value.into_owned()));
            }
        })
        .map_err(|e| refused(&format!("a header block does not decode: {e:?}")))?;
    if size > MAX_HEADER_LIST {
        return Err(refused("a header block decodes to over the header list size taken"));
    }
    Ok(headers)
}

/// The next frame: type, flags, stream id (reserved bit included) and payload; None at a
/// clean end between frames.
async fn read_frame<R: AsyncRead + Unpin>(from: &mut R) -> io::Result<Option<(u8, u8, [u8; 4], Vec<u8>)>> {
    let mut head = [0u8; 9];
    match from.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    // Grown as the bytes come, not as the header claims: 9 bytes do not reserve 16 MiB.
    let mut payload = Vec::new();
    (&mut *from).take(len as u64).read_to_end(&mut payload).await?;
    if payload.len() < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some((head[3], head[4], [head[5], head[6], head[7], head[8]], payload)))
}

fn frame(kind: u8, flags: u8, stream: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = Vec::with_capacity(9 + len);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream);
    out.extend_from_slice(payload);
    out
}

/// A HEADERS frame's priority fields (when flagged) and its header block fragment, padding
/// dropped.
fn headers_payload(flags: u8, payload: &[u8]) -> io::Result<(Option<Vec<u8>>, Vec<u8>)> {
    let mut rest = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        let (&n, after) = rest.split_first().ok_or_else(|| refused("a padded HEADERS frame without its length"))?;
        pad = usize::from(n);
        rest = after;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        if rest.len() < 5 {
            return Err(refused("a HEADERS frame too short for its priority"));
        }
        let (p, after) = rest.split_at(5);
        priority = Some(p.to_vec());
        rest = after;
    }
    if pad > rest.len() {
        return Err(refused("a HEADERS frame's padding is longer than the frame"));
    }
    Ok((priority, rest[..rest.len() - pad].to_vec()))
}

/// `headers` with an `:authority` that is not a URI authority replaced by `localhost`.
fn with_authority(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    headers
        .iter()
        .map(|(name, value)| {
            let unreadable = name == b":authority"
                && std::str::from_utf8(value).map_or(true, |v| v.parse::<http::uri::Authority>().is_err());
            (name.clone(), if unreadable { AUTHORITY.to_vec() } else { value.clone() })
        })
        .collect()
}

/// The HEADERS frame (and CONTINUATION frames) carrying `block` on `stream`.
fn headers_frames(end_stream: u8, stream: [u8; 4], priority: Option<&[u8]>, block: &[u8]) -> Vec<u8> {
    let room = FRAME_SIZE - priority.map_or(0, <[u8]>::len);
    let (first, mut rest) = block.split_at(block.len().min(room));
    let mut payload = priority.map(<[u8]>::to_vec).unwrap_or_default();
    payload.extend_from_slice(first);
    let priority_flag = if priority.is_some() { PRIORITY } else { 0 };
    let end = if rest.is_empty() { END_HEADERS } else { 0 };
    let mut out = frame(HEADERS, end_stream | priority_flag | end, stream, &payload);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(rest.len().min(FRAME_SIZE));
        rest = after;
        let end = if rest.is_empty() { END_HEADERS } else { 0 };
        out.extend(frame(CONTINUATION, end, stream, chunk));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(headers: &[(&str, &str)]) -> Vec<u8> {
        loona_hpack::Encoder::new().encode(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    /// Run `client` (bytes) through the relay to a server end; what the server end reads.
    async fn through(client: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let (mut client_end, relay_client) = tokio::io::duplex(1 << 20);
        let (relay_server, mut server_end) = tokio::io::duplex(1 << 20);
        client_end.write_all(&client).await.unwrap_or_default();
        client_end.shutdown().await.unwrap_or_default();
        let relayed = tokio::spawn(relay(relay_client, relay_server));
        let mut seen = Vec::new();
        let _ = server_end.read_to_end(&mut seen).await;
        drop(server_end);
        let result = relayed.await.unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
        (result, seen)
    }

    fn decode_headers(frames: &[u8]) -> Vec<(String, String)> {
        let mut decoder = loona_hpack::Decoder::new();
        let mut rest = frames;
        let mut out = Vec::new();
        let mut block = Vec::new();
        while rest.len() >= 9 {
            let len = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
            let (kind, flags) = (rest[3], rest[4]);
            let payload = &rest[9..9 + len];
            if kind == HEADERS || kind == CONTINUATION {
                let skip = if kind == HEADERS && flags & PRIORITY != 0 { 5 } else { 0 };
                block.extend_from_slice(&payload[skip..]);
                if flags & END_HEADERS != 0 {
                    for (n, v) in decoder.decode(&block).unwrap_or_default() {
                        out.push((String::from_utf8_lossy(&n).into_owned(), String::from_utf8_lossy(&v).into_owned()));
                    }
                    block.clear();
                }
            }
            rest = &rest[9 + len..];
        }
        out
    }

    #[tokio::test]
    async fn a_socket_path_authority_becomes_localhost_and_the_rest_passes() {
        let headers = |authority: &'static str| -> Vec<(&'static str, &'static str)> {
            vec![
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/v1alpha1.ExternalJWTSigner/Metadata"),
                (":authority", authority),
                ("content-type", "application/grpc"),
            ]
        };
        let settings = frame(0x4, 0, [0; 4], &[]);
        let data = frame(0x0, END_STREAM, [0, 0, 0, 1], b"\0\0\0\0\0");
        // (what, the :authority sent, the one the server must see)
        let cases = [
            ("a path, percent-encoded (grpc-core)", "%2Frun%2Fkustos%2Fsa-signer.sock", "localhost"),
            ("a path", "/run/kustos/sa-signer.sock", "localhost"),
            ("localhost (grpc-go)", "localhost", "localhost"),
            ("a host and port", "signer:443", "signer:443"),
        ];
        for (what, sent, want) in cases {
            let mut bytes = PREFACE.to_vec();
            bytes.extend(&settings);
            bytes.extend(frame(HEADERS, END_HEADERS, [0, 0, 0, 1], &block(&headers(sent))));
            bytes.extend(&data);
            let (result, seen) = through(bytes).await;
            assert!(result.is_ok(), "{what}: {result:?}");
            assert!(seen.starts_with(PREFACE), "{what}");
            let after = &seen[PREFACE.len()..];
            assert!(after.starts_with(&settings), "{what}: other frames pass as they are");
            assert!(seen.ends_with(&data), "{what}: the DATA frame passes as it is");
            let mut want_headers: Vec<(String, String)> =
                headers(sent).iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            want_headers[3].1 = want.to_string();
            assert_eq!(decode_headers(after), want_headers, "{what}");
        }
    }

    #[tokio::test]
    async fn padding_priority_and_continuations_are_read_and_long_blocks_split() {
        let long = "v".repeat(40_000);
        let sent: Vec<(&str, &str)> =
            vec![(":method", "POST"), (":path", "/p"), (":authority", "%2Fs.sock"), ("x-long", &long)];
        let encoded = block(&sent);
        let (a, b) = encoded.split_at(100);
        let mut payload = vec![3u8]; // pad length
        payload.extend([0x80, 0, 0, 3, 16]); // priority: exclusive, depends on 3, weight 16
        payload.extend(a);
        payload.extend([0, 0, 0]);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, [0, 0, 0, 5], &payload));
        bytes.extend(frame(CONTINUATION, END_HEADERS, [0, 0, 0, 5], b));
        let (result, seen) = through(bytes).await;
        assert!(result.is_ok(), "{result:?}");
        let frames = &seen[PREFACE.len()..];
        assert_eq!(frames[3], HEADERS);
        assert_eq!(frames[4], END_STREAM | PRIORITY, "END_STREAM and PRIORITY kept, not the end of the block");
        assert_eq!(&frames[9..14], &[0x80, 0, 0, 3, 16], "the priority fields kept");
        let got = decode_headers(frames);
        assert_eq!(got[2], (":authority".to_string(), "localhost".to_string()));
        assert_eq!(got[3].1.len(), 40_000);
    }

    #[tokio::test]
    async fn what_is_not_http2_as_it_should_be_is_closed() {
        let mut bad_block = PREFACE.to_vec();
        bad_block.extend(frame(HEADERS, END_HEADERS, [0, 0, 0, 1], &[0xff, 0xff, 0xff, 0xff]));
        let mut interrupted = PREFACE.to_vec();
        interrupted.extend(frame(HEADERS, 0, [0, 0, 0, 1], &block(&[(":path", "/")])));
        interrupted.extend(frame(0x0, 0, [0, 0, 0, 1], b"x"));
        let mut bad_padding = PREFACE.to_vec();
        bad_padding.extend(frame(HEADERS, PADDED | END_HEADERS, [0, 0, 0, 1], &[9, 1]));
        // One literal of 4 KB put in the dynamic table, then named by one byte 100,000 times:
        // 100 KB of block that would decode to 400 MB.
        let mut amplified_block =
            loona_hpack::Encoder::new().encode([(&b"x-big"[..], &[b'v'; 4_000][..])].iter().copied());
        amplified_block.extend(std::iter::repeat_n(0xbe_u8, 100_000)); // indexed: dynamic entry 1 (62)
        let mut amplified = PREFACE.to_vec();
        amplified.extend(frame(HEADERS, 0, [0, 0, 0, 1], &amplified_block[..FRAME_SIZE]));
        for (i, chunk) in amplified_block[FRAME_SIZE..].chunks(FRAME_SIZE).enumerate() {
            let last = FRAME_SIZE + (i + 1) * FRAME_SIZE >= amplified_block.len();
            amplified.extend(frame(CONTINUATION, if last { END_HEADERS } else { 0 }, [0, 0, 0, 1], chunk));
        }
        // A block over the size taken in its first frame alone, though it decodes to little:
        // table size updates (one byte each, no field), then one field.
        let mut one_big_frame = PREFACE.to_vec();
        let mut big_block = vec![0x20u8; MAX_HEADER_BLOCK];
        big_block.extend(block(&[(":path", "/")]));
        one_big_frame.extend(frame(HEADERS, END_HEADERS, [0, 0, 0, 1], &big_block));
        let cases = [
            ("not HTTP/2", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
            ("a block that does not decode", bad_block),
            ("a block interrupted by another frame", interrupted),
            ("padding longer than the frame", bad_padding),
            ("a block decoding to 400 MB", amplified),
            ("one HEADERS frame over the block size taken", one_big_frame),
        ];
        for (what, bytes) in cases {
            let (result, seen) = through(bytes).await;
            assert!(result.is_err(), "{what}");
            assert!(seen.len() <= PREFACE.len(), "{what}: no header block reached the server");
        }
    }
}
