//! Fault injection for tests (feature `fault-injection`): an object store
//! that fails writes on command, so the paths a full disk or a flaky store
//! takes can be tested in this crate and in every crate that checkpoints.
//!
//! [`FaultyStore`] wraps any [`ObjectStore`] and models a disk of limited
//! capacity: a put that does not fit writes the part that fits (as a
//! filesystem-backed store does when the disk fills) and then fails with
//! "no space left". Deletes give the space back. A put can also be made to
//! fail outright, by number, or be held (puts under a prefix wait until
//! released, so a test can act while a checkpoint write is in flight).
//! Multipart uploads are passed through unchecked (the checkpoint store
//! does not use them).

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

/// What the store is told to do, and what it holds.
#[derive(Debug, Default)]
struct Faults {
    /// Bytes the store may hold in total (`None`: unlimited).
    capacity: Option<u64>,
    /// Bytes held, per object.
    used: HashMap<Path, u64>,
    /// Puts from now on that fail, counted from 1.
    fail_puts: Vec<u64>,
    /// Puts seen since the last [`FaultyStore::fail_put`].
    puts: u64,
    /// Puts that failed.
    failed: u64,
}

impl Faults {
    fn used_total(&self) -> u64 {
        self.used.values().sum()
    }
}

/// An [`ObjectStore`] that fails writes on command; see the module docs.
#[derive(Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Arc<Mutex<Faults>>,
    /// Puts under this prefix wait while it is set.
    hold: Arc<tokio::sync::watch::Sender<Option<String>>>,
    /// Puts waiting on `hold` now.
    held: Arc<std::sync::atomic::AtomicU64>,
}

impl FaultyStore {
    /// Wrap `inner`, with no faults and unlimited capacity.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            faults: Arc::default(),
            hold: Arc::new(tokio::sync::watch::channel(None).0),
            held: Arc::default(),
        }
    }

    /// Hold every put whose key starts with `prefix` until
    /// [`Self::release_puts`]; a held put has not been admitted yet (it is
    /// not counted for [`Self::fail_put`]).
    pub fn hold_puts(&self, prefix: &str) {
        self.hold.send_replace(Some(prefix.to_string()));
    }

    /// Let held puts (and later ones) go on.
    pub fn release_puts(&self) {
        self.hold.send_replace(None);
    }

    /// Puts waiting on [`Self::hold_puts`] now.
    pub fn held_puts(&self) -> u64 {
        self.held.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn wait_if_held(&self, location: &Path) {
        let mut rx = self.hold.subscribe();
        let holds = |h: &Option<String>| {
            h.as_deref()
                .is_some_and(|p| location.as_ref().starts_with(p))
        };
        if !holds(&rx.borrow_and_update()) {
            return;
        }
        self.held.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        // The sender lives as long as `self`: the wait ends on release.
        let _ = rx.wait_for(|h| !holds(h)).await;
        self.held.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hold at most `bytes` in total from now on (`None`: unlimited). A put
    /// that does not fit stores its first bytes up to the limit, then fails.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.faults().capacity = bytes;
    }

    /// Make the `n`-th put from now fail (1 = the next one), without
    /// writing anything. Calls add up: `fail_put(1); fail_put(3)` fails the
    /// next put and the third.
    pub fn fail_put(&self, n: u64) {
        let mut f = self.faults();
        let at = f.puts + n;
        f.fail_puts.push(at);
    }

    /// Clear every fault (the bytes held are still counted).
    pub fn heal(&self) {
        let mut f = self.faults();
        f.capacity = None;
        f.fail_puts.clear();
    }

    /// Bytes the store holds now.
    pub fn used_bytes(&self) -> u64 {
        self.faults().used_total()
    }

    /// Puts that failed so far.
    pub fn failed_puts(&self) -> u64 {
        self.faults().failed
    }

    /// Decide the fate of a put of `len` bytes at `location`.
    fn admit(&self, location: &Path, len: u64) -> Fate {
        let mut f = self.faults();
        f.puts += 1;
        let puts = f.puts;
        if f.fail_puts.contains(&puts) {
            f.failed += 1;
            return Fate::Refuse;
        }
        let replaced = f.used.get(location).copied().unwrap_or(0);
        let others = f.used_total() - replaced;
        match f.capacity {
            Some(cap) if others + len > cap => {
                let keep = cap.saturating_sub(others);
                f.failed += 1;
                f.used.insert(location.clone(), keep);
                Fate::Partial(keep)
            }
            _ => {
                f.used.insert(location.clone(), len);
                Fate::Write
            }
        }
    }
}

/// What happens to one put.
enum Fate {
    /// Written in full.
    Write,
    /// Refused before anything is written.
    Refuse,
    /// The first bytes are written (a full disk), then it fails.
    Partial(u64),
}

fn injected(what: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!("injected fault: {what}"),
        )),
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("faults", &*self.faults())
            .finish()
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.wait_if_held(location).await;
        let len = payload.content_length() as u64;
        match self.admit(location, len) {
            Fate::Write => self.inner.put_opts(location, payload, opts).await,
            Fate::Refuse => Err(injected(format!("put {location} of {len} bytes refused"))),
            Fate::Partial(keep) => {
                // A full disk: the part that fitted stays, as a filesystem
                // store leaves it.
                let bytes: Bytes = payload.into_iter().flatten().collect();
                let part = bytes.slice(..usize::try_from(keep).unwrap_or(0).min(bytes.len()));
                self.inner
                    .put_opts(location, PutPayload::from_bytes(part), opts)
                    .await?;
                Err(injected(format!(
                    "no space left writing {location}: {keep} of {len} bytes written"
                )))
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let faults = Arc::clone(&self.faults);
        self.inner
            .delete_stream(locations)
            .map(move |deleted| {
                if let Ok(path) = &deleted {
                    let mut f = faults.lock().unwrap_or_else(PoisonError::into_inner);
                    f.used.remove(path);
                }
                deleted
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
