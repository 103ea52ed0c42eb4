//! The hostile-input corpus: requests built to make the server spend far more memory or CPU
//! than their own size, each sent by the weakest identity that reaches the code it attacks,
//! with the answers a sound server may give. `tests/hostile.rs` sends them.
//!
//! - [`decode`]: request bodies (JSON, YAML, protobuf): nesting, aliases, duplicate keys,
//!   repeated fields, numbers;
//! - [`writes`]: patches of every type, server-side apply, managedFields, object fields;
//! - [`request`]: what surrounds a body: headers, bearer tokens, query parameters,
//!   selectors, watches, body encodings and framing;
//! - [`csr`]: certificate signing requests;
//! - [`wire`]: byte builders (protobuf, DER, gzip, YAML).

pub mod csr;
pub mod decode;
pub mod request;
pub mod wire;
pub mod writes;

/// Who sends a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// No credentials at all.
    Anonymous,
    /// A bootstrap token (`system:bootstrappers`).
    Bootstrap,
    /// A kubelet's client certificate (`system:node:<node>`).
    Node,
    /// A service account's bound token, without any role.
    ServiceAccount,
    /// `system:masters`.
    Admin,
    /// A bearer token the case brings itself (in its headers).
    Token,
}

impl Who {
    pub fn label(self) -> &'static str {
        match self {
            Who::Anonymous => "anonymous",
            Who::Bootstrap => "bootstrap",
            Who::Node => "node",
            Who::ServiceAccount => "serviceaccount",
            Who::Admin => "admin",
            Who::Token => "token",
        }
    }
}

/// Whose code a case attacks, for the report: the YAML decoder and server-side apply's
/// managed fields are being reworked apart from this corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    General,
    Yaml,
    Managed,
}

/// How the body travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// HTTP/2 (ALPN), as kubectl and client-go talk.
    H2,
    /// HTTP/1.1 with a Content-Length.
    H1,
    /// HTTP/1.1, the body as a stream of chunks of this many bytes (`Transfer-Encoding: chunked`).
    H1Chunked(usize),
}

/// One hostile request and the answers it may get.
pub struct Case {
    pub name: String,
    pub who: Who,
    pub area: Area,
    pub framing: Framing,
    pub method: reqwest::Method,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP codes a sound server may answer. A 4xx must be a `metav1.Status` with the
    /// reason of its code, except [`HTTP_LAYER`] codes, which the HTTP layer sends before
    /// any handler runs.
    pub expect: Vec<u16>,
    /// A watch: only the head of the answer is read, then the stream is dropped.
    pub watch: bool,
    /// Several requests in a row (e.g. many small CSRs): the case is this many sends of the
    /// same request with `{i}` in the body replaced by the send's number.
    pub repeat: usize,
}

/// Request lines stay under 64 KiB: the `http` crate under every Rust client refuses longer
/// URIs (and hyper answers 414 to them over HTTP/1.1).
///
/// Answers the HTTP layer gives (no handler runs, no `Status` body): a request line or
/// header block over hyper's limits.
pub const HTTP_LAYER: &[u16] = &[414, 431];

impl Case {
    pub fn new(name: impl Into<String>, who: Who, method: reqwest::Method, path: impl Into<String>) -> Case {
        Case {
            name: name.into(),
            who,
            area: Area::General,
            framing: Framing::H2,
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            expect: Vec::new(),
            watch: false,
            repeat: 1,
        }
    }

    pub fn post(
        name: impl Into<String>,
        who: Who,
        path: impl Into<String>,
        ct: &str,
        body: impl Into<Vec<u8>>,
    ) -> Case {
        Case::new(name, who, reqwest::Method::POST, path).content_type(ct).body(body)
    }

    pub fn patch(
        name: impl Into<String>,
        who: Who,
        path: impl Into<String>,
        ct: &str,
        body: impl Into<Vec<u8>>,
    ) -> Case {
        Case::new(name, who, reqwest::Method::PATCH, path).content_type(ct).body(body)
    }

    pub fn get(name: impl Into<String>, who: Who, path: impl Into<String>) -> Case {
        Case::new(name, who, reqwest::Method::GET, path)
    }

    pub fn content_type(self, ct: &str) -> Case {
        self.header("content-type", ct)
    }

    pub fn header(mut self, k: &str, v: impl Into<String>) -> Case {
        self.headers.push((k.to_string(), v.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Case {
        self.body = body.into();
        self
    }

    pub fn expect(mut self, codes: &[u16]) -> Case {
        self.expect = codes.to_vec();
        self
    }

    pub fn area(mut self, area: Area) -> Case {
        self.area = area;
        self
    }

    pub fn framing(mut self, framing: Framing) -> Case {
        self.framing = framing;
        self
    }

    pub fn watch(mut self) -> Case {
        self.watch = true;
        self
    }

    pub fn repeat(mut self, n: usize) -> Case {
        self.repeat = n;
        self
    }

    /// Bytes on the wire for the whole case: request line, headers and body, every send.
    pub fn bytes_sent(&self) -> usize {
        let head: usize = self.path.len() + 16 + self.headers.iter().map(|(k, v)| k.len() + v.len() + 4).sum::<usize>();
        (head + self.body.len()) * self.repeat
    }
}

/// What the cases refer to: objects and names the harness made before the first case.
pub struct Ctx {
    /// The node the node identity is (`system:node:<node>`); its Node and its Lease exist.
    pub node: String,
    /// The uid of that Node: mirror pods name it as their owner.
    pub node_uid: String,
    /// A namespace of the corpus's own.
    pub ns: String,
    /// The plural of a custom resource (group `hostile.kustos.dev`, version v1, namespaced,
    /// any fields kept) whose definition exists.
    pub crd_plural: &'static str,
    /// The plural of a custom resource (same group and version, kind `Shape`) whose schema
    /// gives `spec.d[*].x` a default, and makes `spec.s` a set and `spec.m` a map list keyed
    /// by `k`.
    pub schemed_plural: &'static str,
}

impl Ctx {
    /// The owner reference a mirror pod of this node carries (NodeRestriction requires it).
    pub fn node_owner(&self) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node_uid, "controller": true})
    }
}

pub const CRD_GROUP: &str = "hostile.kustos.dev";

pub const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
pub const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
pub const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
pub const JSON: &str = "application/json";
pub const YAML: &str = "application/yaml";
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";

/// Just under the 3 MiB body limit.
pub const NEAR_LIMIT: usize = 3 * 1024 * 1024 - 4096;

/// `n` copies of `item` joined by `sep`.
pub fn repeat_join(item: &str, sep: &str, n: usize) -> String {
    let mut s = String::with_capacity((item.len() + sep.len()) * n);
    for i in 0..n {
        if i > 0 {
            s.push_str(sep);
        }
        s.push_str(item);
    }
    s
}

/// As many copies of `item` (joined by `sep`) as fit in `bytes`.
pub fn fill(item: &str, sep: &str, bytes: usize) -> String {
    repeat_join(item, sep, bytes / (item.len() + sep.len()))
}

/// Every case of the corpus.
pub fn all(ctx: &Ctx) -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(decode::cases(ctx));
    cases.extend(writes::cases(ctx));
    cases.extend(request::cases(ctx));
    cases.extend(csr::cases(ctx));
    cases
}
