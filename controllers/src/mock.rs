//! A scripted fake apiserver for reconciler tests: each request is recorded
//! (`"<METHOD> <path>"` and its JSON body) and answered with the next scripted reply.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use serde_json::{json, Value};

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Call {
    /// `"<METHOD> <path>?<query>"`.
    pub line: String,
    pub body: Value,
}

#[derive(Clone, Default)]
pub struct Mock {
    replies: Arc<Mutex<VecDeque<(u16, Value)>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Mock {
    /// A fake answering with `replies` in order (then 500).
    pub fn new(replies: Vec<(u16, Value)>) -> Mock {
        Mock { replies: Arc::new(Mutex::new(replies.into())), calls: Arc::default() }
    }

    pub fn client(&self) -> kube::Client {
        let this = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let this = this.clone();
            async move {
                let line = format!("{} {}", req.method(), req.uri().path());
                let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                this.calls.lock().unwrap_or_else(|e| e.into_inner()).push(Call { line, body });
                let (code, reply) = this
                    .replies
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front()
                    .unwrap_or((500, status(500, "InternalError")));
                let mut resp = Response::new(Full::new(Bytes::from(reply.to_string())));
                *resp.status_mut() =
                    http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                resp.headers_mut()
                    .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        kube::Client::new(service, "default")
    }

    /// The requests made so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The request lines made so far.
    pub fn lines(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.line).collect()
    }
}

/// A `metav1.Status` failure body.
pub fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}
