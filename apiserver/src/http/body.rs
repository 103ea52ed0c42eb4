//! A request body read up to a limit: past it a 413, and the rest of the body drained for a
//! bounded while (bytes and time) by a task of its own, holding only the body.

use crate::error::ApiError;

/// The request body, at most `limit` bytes; past that a 413. The rest of an oversized body is
/// read and thrown away for a while (at most [`DRAIN_BYTES`], [`DRAIN_TIME`]) by a task of its
/// own, as Go's server lingers before closing: a client still sending (a chunked body has no
/// length to refuse up front) then reads the 413 instead of a reset connection.
pub async fn read_limited(body: axum::body::Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        if buf.len() + data.len() > limit {
            tokio::spawn(async move {
                let mut left = DRAIN_BYTES;
                let _ = tokio::time::timeout(DRAIN_TIME, async {
                    while let Some(Ok(frame)) = body.frame().await {
                        let n = frame.data_ref().map_or(0, |d| d.len());
                        left = left.saturating_sub(n);
                        if left == 0 {
                            break;
                        }
                    }
                })
                .await;
            });
            return Err(ApiError::RequestEntityTooLarge(format!("Request entity too large: limit is {limit}")));
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
}

/// What is read and discarded of a body past the limit, at most.
const DRAIN_BYTES: usize = 64 << 20;
/// How long a body past the limit is read and discarded, at most.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);
