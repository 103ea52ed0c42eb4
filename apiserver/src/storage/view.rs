//! One store seen under another prefix, every value converted on the way in and out: how a
//! kind served from another kind's storage reads and writes it (events.k8s.io/v1 Events are
//! kept as core/v1 Events, as upstream keeps them).
//!
//! Keys under `prefix` are the keys under `stored_prefix` of the store beneath; values are
//! converted by a [`Convert`] (the stored form → this view's form on every read, list and
//! watch event; the other way on every create and update). Revisions, compaction and
//! conflicts are the store's own, so resourceVersions and watches mean the same through
//! either view. A key outside `prefix` is passed through unchanged.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};

use super::memo::Memo;
use super::{Error, Event, KeyValue, ListOptions, ListResult, Result, Rev, Storage};

/// How the values of a [`View`] convert to and from the stored form.
pub trait Convert: Send + Sync + 'static {
    /// A stored value, as the view shows it.
    fn read(&self, stored: &[u8]) -> Result<Vec<u8>>;
    /// A value written through the view, as it is stored.
    fn write(&self, value: &[u8]) -> Result<Vec<u8>>;
}

/// See the module documentation.
pub struct View {
    inner: Arc<dyn Storage>,
    prefix: String,
    stored_prefix: String,
    convert: Arc<dyn Convert>,
}

impl View {
    /// `prefix` and `stored_prefix` end with `/`.
    pub fn new(inner: Arc<dyn Storage>, prefix: String, stored_prefix: String, convert: Arc<dyn Convert>) -> Self {
        View { inner, prefix, stored_prefix, convert }
    }

    fn stored_key(&self, key: &str) -> String {
        match key.strip_prefix(&self.prefix) {
            Some(rest) => format!("{}{rest}", self.stored_prefix),
            None => key.to_string(),
        }
    }

    fn view_key(&self, key: &str) -> String {
        match key.strip_prefix(&self.stored_prefix) {
            Some(rest) => format!("{}{rest}", self.prefix),
            None => key.to_string(),
        }
    }

    fn read_kv(&self, kv: KeyValue) -> Result<KeyValue> {
        Ok(KeyValue { key: self.view_key(&kv.key), value: self.convert.read(&kv.value)?, ..kv })
    }

    fn read_stream(&self, events: BoxStream<'static, Result<Event>>) -> BoxStream<'static, Result<Event>> {
        let (prefix, stored_prefix, convert) = (self.prefix.clone(), self.stored_prefix.clone(), self.convert.clone());
        events
            .map(move |ev| {
                let ev = ev?;
                let key = match ev.key.strip_prefix(&stored_prefix) {
                    Some(rest) => format!("{prefix}{rest}"),
                    None => ev.key.clone(),
                };
                let prev_value = ev.prev_value.as_deref().map(|p| convert.read(p)).transpose()?;
                // A converted value: renderings of the stored one must not be reused.
                Ok(Event { key, value: convert.read(&ev.value)?, prev_value, memo: Memo::default(), ..ev })
            })
            .boxed()
    }
}

#[async_trait]
impl Storage for View {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(&self.stored_key(key)).await?.map(|kv| self.read_kv(kv)).transpose()
    }

    async fn get_recent(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get_recent(&self.stored_key(key)).await?.map(|kv| self.read_kv(kv)).transpose()
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        let opts = ListOptions { start_after: opts.start_after.map(|k| self.stored_key(&k)), ..opts };
        let page = self.inner.list(&self.stored_key(prefix), opts).await?;
        let items = page.items.into_iter().map(|kv| self.read_kv(kv)).collect::<Result<Vec<_>>>()?;
        Ok(ListResult { items, ..page })
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        self.inner.count(&self.stored_key(prefix)).await
    }

    async fn counts(&self, prefixes: &[String]) -> Vec<Result<u64>> {
        let stored: Vec<String> = prefixes.iter().map(|p| self.stored_key(p)).collect();
        self.inner.counts(&stored).await
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Rev> {
        self.inner.create(&self.stored_key(key), self.convert.write(&value)?).await
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_rev: Rev) -> Result<Rev> {
        self.inner.update(&self.stored_key(key), self.convert.write(&value)?, expected_rev).await
    }

    async fn delete(&self, key: &str, expected_rev: Rev) -> Result<Rev> {
        self.inner.delete(&self.stored_key(key), expected_rev).await
    }

    async fn get_at(&self, key: &str, at_rev: Option<Rev>) -> Result<(Option<KeyValue>, Rev)> {
        let (kv, rev) = self.inner.get_at(&self.stored_key(key), at_rev).await?;
        Ok((kv.map(|kv| self.read_kv(kv)).transpose()?, rev))
    }

    async fn watch(&self, prefix: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        let events = self.inner.watch(&self.stored_key(prefix), after_rev).await?;
        Ok(self.read_stream(events))
    }

    async fn watch_key(&self, key: &str, after_rev: Rev) -> Result<BoxStream<'static, Result<Event>>> {
        let events = self.inner.watch_key(&self.stored_key(key), after_rev).await?;
        Ok(self.read_stream(events))
    }

    fn current_rev(&self) -> Rev {
        self.inner.current_rev()
    }

    fn compacted_rev(&self) -> Rev {
        self.inner.compacted_rev()
    }

    async fn compact(&self, rev: Rev) -> Result<()> {
        self.inner.compact(rev).await
    }
}

/// A conversion that failed: the stored value is the server's problem.
pub fn conversion_error(e: impl std::fmt::Display) -> Error {
    Error::Backend(format!("converting a stored value: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::storage::sqlite::SqliteStorage;
    use crate::storage::EventKind;

    /// Upper-cases on read, lower-cases on write: which side a value came from shows.
    struct Case;
    impl Convert for Case {
        fn read(&self, stored: &[u8]) -> Result<Vec<u8>> {
            Ok(stored.to_ascii_uppercase())
        }
        fn write(&self, value: &[u8]) -> Result<Vec<u8>> {
            if value == b"BAD" {
                return Err(conversion_error("bad"));
            }
            Ok(value.to_ascii_lowercase())
        }
    }

    #[tokio::test]
    async fn a_view_maps_keys_and_converts_values_both_ways() {
        let inner: Arc<dyn Storage> = Arc::new(SqliteStorage::open_in_memory().unwrap());
        let view = View::new(inner.clone(), "/registry/g/r/".into(), "/registry/core/r/".into(), Arc::new(Case));
        let rev = view.create("/registry/g/r/ns/a", b"Hello".to_vec()).await.unwrap();
        // Stored under the other prefix, in the stored form.
        assert_eq!(inner.get("/registry/core/r/ns/a").await.unwrap().unwrap().value, b"hello");
        assert!(inner.get("/registry/g/r/ns/a").await.unwrap().is_none());
        // Read back through the view: its key, its form, the store's revision.
        let kv = view.get("/registry/g/r/ns/a").await.unwrap().unwrap();
        assert_eq!((kv.key.as_str(), kv.value.as_slice(), kv.mod_rev), ("/registry/g/r/ns/a", &b"HELLO"[..], rev));
        // Written under the stored prefix, listed through the view.
        inner.create("/registry/core/r/ns/b", b"world".to_vec()).await.unwrap();
        let page = view.list("/registry/g/r/ns/", ListOptions::default()).await.unwrap();
        let got: Vec<(String, Vec<u8>)> = page.items.into_iter().map(|kv| (kv.key, kv.value)).collect();
        assert_eq!(
            got,
            vec![("/registry/g/r/ns/a".into(), b"HELLO".to_vec()), ("/registry/g/r/ns/b".into(), b"WORLD".to_vec())]
        );
        let page = view
            .list(
                "/registry/g/r/",
                ListOptions { start_after: Some("/registry/g/r/ns/a".into()), ..Default::default() },
            )
            .await
            .unwrap();
        assert_eq!(page.items.len(), 1, "continuation keys are mapped too");
        assert_eq!(view.count("/registry/g/r/").await.unwrap(), 2);
        // Asked together, the prefixes are mapped too.
        let both = view.counts(&["/registry/g/r/".into(), "/registry/g/r/ns/b".into()]).await;
        assert_eq!(both.into_iter().map(Result::unwrap).collect::<Vec<_>>(), vec![2, 1]);
        // A write the conversion refuses stores nothing.
        assert!(view.create("/registry/g/r/ns/c", b"BAD".to_vec()).await.is_err());
        assert!(inner.get("/registry/core/r/ns/c").await.unwrap().is_none());
        // Watches see the changes made through either side, converted.
        let mut w = view.watch("/registry/g/r/", rev).await.unwrap();
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!(
            (ev.kind, ev.key.as_str(), ev.value.as_slice()),
            (EventKind::Created, "/registry/g/r/ns/b", &b"WORLD"[..])
        );
        let kv = view.get("/registry/g/r/ns/a").await.unwrap().unwrap();
        view.update("/registry/g/r/ns/a", b"Again".to_vec(), kv.mod_rev).await.unwrap();
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!(ev.kind, EventKind::Updated);
        assert_eq!((ev.value.as_slice(), ev.prev_value.as_deref()), (&b"AGAIN"[..], Some(&b"HELLO"[..])));
        let kv = view.get("/registry/g/r/ns/a").await.unwrap().unwrap();
        view.delete("/registry/g/r/ns/a", kv.mod_rev).await.unwrap();
        assert!(inner.get("/registry/core/r/ns/a").await.unwrap().is_none());
        assert_eq!(w.next().await.unwrap().unwrap().kind, EventKind::Deleted);
        // A change seen through the view and beneath it: renderings of one are never the other's.
        let now = inner.current_rev();
        let mut under = inner.watch("/registry/core/r/", now).await.unwrap();
        let mut over = view.watch("/registry/g/r/", now).await.unwrap();
        inner.create("/registry/core/r/ns/live", b"live".to_vec()).await.unwrap();
        let (u, o) = (under.next().await.unwrap().unwrap(), over.next().await.unwrap().unwrap());
        assert_eq!(u.rev, o.rev);
        u.memo.get_or_render(0, || bytes::Bytes::from_static(b"stored form"));
        assert_eq!(o.memo.get_or_render(0, || bytes::Bytes::from_static(b"view form")), "view form");
    }
}
