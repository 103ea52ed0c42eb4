//! The promise of [`crate::run`]: once it has returned (shutdown, or the stop that losing
//! the leader lease triggers), no controller writes anything any more, whatever events keep
//! arriving. Checked against a fake apiserver that serves lists and watches and counts
//! every write.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody as BoxBody;
use http_body_util::{Full, StreamBody};
use serde_json::{json, Value};

use crate::serviceaccount_token::{NAME_ANNOTATION, SECRET_TYPE, UID_ANNOTATION};

type Body = BoxBody<Bytes, std::convert::Infallible>;

/// Decrements the count of open watches when the watch's body is dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One namespace `ns` with ServiceAccount `robot`, whose `.secrets` lists the complete token
/// Secret `tok`. Deleting `tok` is announced on the Secret watches with [`Fake::delete_tok`].
#[derive(Clone)]
struct Fake {
    writes: Arc<Mutex<Vec<String>>>,
    secret_events: tokio::sync::broadcast::Sender<Value>,
    secret_watches: Arc<AtomicUsize>,
}

fn account() -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "robot", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
        "secrets": [{"name": "tok"}]})
}

fn token_secret(rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {"name": "tok", "namespace": "ns", "uid": "s1", "resourceVersion": rv,
            "annotations": {NAME_ANNOTATION: "robot", UID_ANNOTATION: "u1"}},
        "data": {"token": "dA==", "namespace": "bnM="}})
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

fn full(v: Value) -> Body {
    BoxBody::new(Full::new(Bytes::from(v.to_string())))
}

impl Fake {
    fn new() -> Fake {
        Fake {
            writes: Arc::default(),
            secret_events: tokio::sync::broadcast::channel(16).0,
            secret_watches: Arc::default(),
        }
    }

    fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Announce that `tok` was deleted, on every open Secret watch.
    fn delete_tok(&self) {
        // No receiver is fine: then nobody watches any more.
        let _ = self.secret_events.send(json!({"type": "DELETED", "object": token_secret("2")}));
    }

    fn answer(&self, method: &http::Method, path: &str, query: &str, body: Bytes) -> Body {
        let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
        if method != http::Method::GET {
            self.writes.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{method} {path}"));
            return BoxBody::new(Full::new(body));
        }
        match (path, watch) {
            ("/api/v1/secrets", true) => {
                self.secret_watches.fetch_add(1, Ordering::SeqCst);
                let open = Open(self.secret_watches.clone());
                let events = tokio_stream_of(self.secret_events.subscribe());
                BoxBody::new(StreamBody::new(events.map(move |ev| {
                    let _ = &open;
                    Ok(Frame::data(Bytes::from(format!("{ev}\n"))))
                })))
            }
            // Other watches stay open and quiet.
            (_, true) => BoxBody::new(StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, _>>())),
            ("/api/v1/secrets", false) => full(list("SecretList", vec![token_secret("1")])),
            ("/api/v1/serviceaccounts", false) => full(list("ServiceAccountList", vec![account()])),
            ("/api/v1/namespaces/ns/serviceaccounts/robot", false) => full(account()),
            _ => full(crate::mock::status(404, "NotFound")),
        }
    }

    fn client(&self) -> kube::Client {
        let this = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let this = this.clone();
            async move {
                let (method, path, query) =
                    (req.method().clone(), req.uri().path().to_string(), req.uri().query().unwrap_or("").to_string());
                let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                let mut resp = Response::new(this.answer(&method, &path, &query, bytes));
                resp.headers_mut()
                    .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        kube::Client::new(service, "default")
    }
}

/// The events of a broadcast receiver, as a stream.
fn tokio_stream_of(rx: tokio::sync::broadcast::Receiver<Value>) -> futures::stream::BoxStream<'static, Value> {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(v) => return Some((v, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .boxed()
}

struct FixedToken;

impl crate::TokenGenerator for FixedToken {
    fn legacy_token(&self, _: &str, _: &str, _: &str, _: &str, _: &str) -> anyhow::Result<String> {
        Ok("t".into())
    }
}

/// Wait (at most `tries` short sleeps) until `ok()` holds; whether it did.
async fn eventually(tries: u32, mut ok: impl FnMut() -> bool) -> bool {
    for _ in 0..tries {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    ok()
}

const SA_UPDATE: &str = "PUT /api/v1/namespaces/ns/serviceaccounts/robot";

/// `serviceaccount-token` removes a deleted token Secret from its account (a write). After
/// the stop signal has been handled (what losing the lease does), a deletion changes
/// nothing: no watch is left open to see it and nothing writes.
#[tokio::test]
async fn no_write_after_the_controllers_stopped() {
    let fake = Fake::new();
    let client = fake.client();
    let clients: crate::ClientFor = Arc::new(move |_| client.clone());
    let config = crate::Config {
        controllers: vec!["serviceaccount-token".into()],
        token_generator: Some(Arc::new(FixedToken)),
        ..Default::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controllers = tokio::spawn(crate::run(clients, config, async move {
        let _ = stop_rx.await;
    }));

    // Active: the Secret watches are open, and a deletion is acted upon.
    assert!(eventually(400, || fake.secret_watches.load(Ordering::SeqCst) >= 2).await, "the Secret watches start");
    fake.delete_tok();
    assert!(
        eventually(400, || fake.writes().iter().any(|w| w == SA_UPDATE)).await,
        "writes while running: {:?}",
        fake.writes()
    );

    // Stop, as losing the lease does, and wait until the stop has completed.
    let _ = stop_tx.send(());
    let ended = controllers.await;
    assert!(matches!(ended, Ok(Ok(()))), "the controllers end cleanly: {ended:?}");
    let writes_at_stop = fake.writes().len();
    assert_eq!(
        fake.secret_watches.load(Ordering::SeqCst),
        0,
        "no watch of the controllers is left open after the stop"
    );

    // Keep producing deletions; none may cause a write.
    for _ in 0..3 {
        fake.delete_tok();
    }
    let late = eventually(40, || fake.writes().len() > writes_at_stop).await;
    assert!(!late, "written after the stop: {:?}", &fake.writes()[writes_at_stop..]);
}
