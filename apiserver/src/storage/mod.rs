//! Revisioned key-value storage, shaped like etcd v3.
//!
//! - One global, strictly increasing revision (`Rev`); every successful write gets the next one.
//! - Values are opaque bytes (the apiserver stores JSON without `metadata.resourceVersion`;
//!   the object's resourceVersion *is* the key's `mod_rev`).
//! - create/update/delete are compare-and-swap: create fails if the key exists, update and
//!   delete name the `mod_rev` they expect.
//! - History is kept back to the compaction revision: `list` can read at any revision at or
//!   after it, and `watch` can start from any revision at or after it. Older → `Compacted`.
//! - A write returns only after it is durable (committed and synced).
//!
//! Keys look like `/registry/<group>/<resource>/<namespace>/<name>` (cluster-scoped kinds
//! omit the namespace segment); prefixes end with `/`.
//!
//! Two backends: `sqlite/` (embedded, one file) and `etcd.rs`. Both run the one compactor of
//! `compactor.rs` (when and how far to compact) and feed their watchers through the live
//! fan-out of `fanout.rs` (one broadcast channel, deduplicated by revision, filtered by
//! scope; every event carries a [`memo::Memo`] where watchers keep what they rendered of
//! it for the next watcher); `migrate.rs` copies a store's objects from one backend to the other; `view.rs` shows
//! one prefix of a store under another, its values converted (a kind kept in another's storage).

mod compactor;
pub mod etcd;
mod fanout;
pub mod memo;
pub mod migrate;
pub mod sqlite;
pub mod view;

use async_trait::async_trait;
use futures::stream::BoxStream;

pub type Rev = u64;

/// One key at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// Revision at which the key was (last) created.
    pub create_rev: Rev,
    /// Revision of the last change: the object's resourceVersion.
    pub mod_rev: Rev,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Updated,
    Deleted,
}

/// A change, as a watcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// Revision of this change.
    pub rev: Rev,
    pub key: String,
    /// For Created/Updated: the new value. For Deleted: the last value before the delete.
    pub value: Vec<u8>,
    /// For Updated and Deleted: the value before this change (Deleted: same as `value`).
    pub prev_value: Option<Vec<u8>>,
    /// Renderings of this change, shared by its clones (every watcher's copy of a live
    /// change): see [`memo`]. An event built with a changed value needs a fresh one.
    pub memo: memo::Memo,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListResult {
    /// Items in key order.
    pub items: Vec<KeyValue>,
    /// The revision the list was read at.
    pub rev: Rev,
    /// How many keys under the prefix come after the last returned one (0 if none).
    pub remaining: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("key not found: {0}")]
    NotFound(String),
    #[error("key already exists: {0}")]
    AlreadyExists(String),
    /// CAS failed: the key's current mod_rev differs from the expected one.
    #[error("revision conflict on {key}: current {current_rev}")]
    Conflict { key: String, current_rev: Rev },
    /// The requested revision is older than the compaction revision.
    #[error("required revision {requested} has been compacted (oldest available {compacted})")]
    Compacted { requested: Rev, compacted: Rev },
    /// The requested revision is newer than the current revision.
    #[error("revision {requested} is in the future (current {current})")]
    FutureRevision { requested: Rev, current: Rev },
    #[error("storage backend: {0}")]
    Backend(String),
    /// The backend cannot be reached (etcd down): the request may succeed later.
    #[error("{0}")]
    Unavailable(String),
    /// The backend did not answer in time; the request's outcome is unknown.
    #[error("{0}")]
    Timeout(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What `list` reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read at this revision (must be ≥ compaction revision and ≤ current); None = current.
    pub at_rev: Option<Rev>,
    /// Only keys strictly greater than this one (for continuation).
    pub start_after: Option<String>,
    /// At most this many items; None or 0 = all.
    pub limit: Option<usize>,
}

#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// The current value of `key`, or None.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;
    /// Keys starting with `prefix`, in key order, as of `opts.at_rev`.
    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult>;
    /// Number of keys under `prefix` now.
    async fn count(&self, prefix: &str) -> Result<u64>;
    /// [`Storage::count`] of each of `prefixes`, in their order, asked together so that a
    /// backend can answer them in one go. The periodic counts of every served resource
    /// (flow control's LIST estimates) are two dozen reads; on SQLite, one job on the read
    /// pool instead of one each, which would wake or start a blocking thread apiece. The
    /// default asks [`Storage::count`] for each.
    async fn counts(&self, prefixes: &[String]) -> Vec<Result<u64>> {
        let mut out = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            out.push(self.count(prefix).await);
        }
        out
    }
    /// Create `key`; fails with AlreadyExists. Returns the new revision.
    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Rev>;
    /// Replace `key` if its mod_rev == `expected_rev`. NotFound / Conflict otherwise.
    async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> Result<Rev>;
    /// Delete `key` if its mod_rev == `expected_rev`. Returns the deletion's revision.
    async fn delete(&self, key: &str, expected_rev: Rev) -> Result<Rev>;
    /// `key` as of `at_rev` (None = current), and the revision it was read at: one
    /// consistent read, so a watch of the key from that revision misses nothing and repeats
    /// nothing.
    async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)>;
    /// `key` as this process knows it: a state that holds every write this process has
    /// acknowledged, but possibly not another apiserver's newest writes (what upstream's
    /// admission plugins read from their informers' listers). Cheaper than [`Storage::get`]
    /// where the latest state costs a round trip (etcd); the default is [`Storage::get`].
    async fn get_recent(&self, key: &str) -> Result<Option<KeyValue>> {
        self.get(key).await
    }
    /// Every change to keys under `prefix` with revision > `after_rev`, in revision order,
    /// then live changes, until the stream is dropped. Err(Compacted) if `after_rev` is
    /// older than the history kept; the stream ends with an Err item if it falls behind
    /// irrecoverably.
    async fn watch(&self, prefix: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>>;
    /// Like [`Storage::watch`], for the one key `key`, served without waking for other
    /// keys' changes (a kubelet watching its own CSR among thousands).
    async fn watch_key(&self, key: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>>;
    /// The newest revision.
    fn current_rev(&self) -> Rev;
    /// The oldest revision still readable (history before it is gone).
    fn compacted_rev(&self) -> Rev;
    /// Drop history older than `rev` (current values are kept).
    async fn compact(&self, rev: Rev) -> Result<()>;
}
