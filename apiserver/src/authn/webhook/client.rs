//! One POST to the webhook: a fresh connection (TLS when the server URL is `https`), the
//! JSON body, the user's bearer token if the kubeconfig gives one.
//!
//! In: the [`Target`] and the body. Out: the status code, whether the answer asks to be
//! retried later (`Retry-After`), and the body, read up to a bound; or a transport error.
//! The caller bounds the time.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;

use super::kubeconfig::Target;

/// What one attempt got.
#[derive(Debug)]
pub struct Answer {
    pub code: u16,
    pub retry_after: bool,
    pub body: Bytes,
}

/// Why one attempt got no answer.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    /// A connection reset: upstream retries those.
    pub reset: bool,
}

fn failure(message: String) -> Failure {
    Failure { message, reset: false }
}

fn io_failure(what: &str, e: std::io::Error) -> Failure {
    Failure {
        reset: matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted),
        message: format!("{what}: {e}"),
    }
}

/// Trait object for the two kinds of connection.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// POST `body` to the target; the answer's body is read up to `limit` bytes.
pub async fn post(target: &Target, body: Vec<u8>, limit: usize) -> Result<Answer, Failure> {
    let addr = format!("{}:{}", bracketed(&target.host), target.port);
    let tcp = tokio::net::TcpStream::connect(&addr).await.map_err(|e| io_failure(&format!("dial {addr}"), e))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Stream> = match &target.tls {
        Some(config) => {
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            Box::new(
                connector
                    .connect(target.server_name.clone(), tcp)
                    .await
                    .map_err(|e| io_failure("TLS handshake with the webhook", e))?,
            )
        }
        None => Box::new(tcp),
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failure(format!("HTTP handshake with the webhook: {e}")))?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = http::Request::post(target.path.as_str())
        .header(http::header::HOST, target.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .header(http::header::USER_AGENT, concat!("kustos/", env!("CARGO_PKG_VERSION")));
    if let Some(token) = &target.bearer {
        let mut value = http::HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| failure("the kubeconfig's token is not a valid header value".into()))?;
        value.set_sensitive(true);
        req = req.header(http::header::AUTHORIZATION, value);
    }
    let req = req.body(Full::new(Bytes::from(body))).map_err(|e| failure(format!("building the request: {e}")))?;
    let result = async {
        let resp = sender.send_request(req).await.map_err(|e| {
            let reset = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionReset)
                || e.is_incomplete_message();
            Failure { message: format!("sending the TokenReview: {e}"), reset }
        })?;
        let code = resp.status().as_u16();
        let retry_after = resp.headers().contains_key(http::header::RETRY_AFTER);
        let body = Limited::new(resp.into_body(), limit)
            .collect()
            .await
            .map_err(|e| failure(format!("reading the webhook's answer (at most {limit} bytes): {e}")))?
            .to_bytes();
        Ok(Answer { code, retry_after, body })
    }
    .await;
    conn.abort();
    result
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
