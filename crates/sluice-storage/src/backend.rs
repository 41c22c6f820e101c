//! Where checkpoint bytes live.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Result, StorageError};

/// A flat key-value store of immutable objects with atomic, durable puts.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Write `bytes` under `key`, atomically and durably.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<()>;
    /// [`Self::put`], calling `pace` between bounded steps of the write
    /// (a checkpoint tail rests there while the pipeline is busy; see
    /// `sluice_engine::state::pace`). A backend that writes in one call
    /// (an object store's put) calls it not at all.
    async fn put_paced(
        &self,
        key: &str,
        bytes: Bytes,
        pace: &mut (dyn FnMut() + Send),
    ) -> Result<()> {
        let _ = pace;
        self.put(key, bytes).await
    }
    /// Write `bytes` under `key` only if nothing is there yet, atomically
    /// and durably: `Ok(false)` when `key` already exists (left untouched).
    /// Two writers creating one key concurrently never both get `true`;
    /// this is what makes attempt reservation safe without a lock.
    async fn create(&self, key: &str, bytes: Bytes) -> Result<bool>;
    /// Read `key`, or None if absent.
    async fn get(&self, key: &str) -> Result<Option<Bytes>>;
    /// Keys under `prefix` (recursively).
    async fn list(&self, prefix: &str) -> Result<Vec<String>>;
    /// Remove `key` (absent is fine).
    async fn delete(&self, key: &str) -> Result<()>;
    /// Where this is, for messages.
    fn describe(&self) -> String;
}

/// A local directory: write to a temp file, fsync, rename, fsync the folder.
pub struct LocalBackend {
    root: PathBuf,
}

impl LocalBackend {
    /// A backend rooted at `root` (created if missing). Temp files that a
    /// killed writer left behind are removed (they are hidden from
    /// listings, so nothing else would).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        std::fs::create_dir_all(&root).map_err(|e| io(&root, e))?;
        sweep_temporaries(&root);
        Ok(Self { root })
    }
}

fn io(path: &Path, source: std::io::Error) -> StorageError {
    StorageError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Marks a local temp file: `.<name>.tmp-<pid>-<n>`.
const TMP_MARK: &str = ".tmp-";

/// Numbers the temp files of this process, so two writers of one key in
/// one process (two stores over one directory) never share a temp file.
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh temp file next to `path`: `.<name>.tmp-<pid>-<n>`, hidden from
/// listings and swept by [`sweep_temporaries`] once `<pid>` is gone.
fn temp_path(dir: &Path, path: &Path) -> PathBuf {
    dir.join(format!(
        ".{}{TMP_MARK}{}-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("object"),
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed),
    ))
}

/// Write `bytes` to a new file at `tmp` and fsync it.
fn write_durably(tmp: &Path, bytes: &[u8]) -> Result<()> {
    write_durably_paced(tmp, bytes, &mut || {})
}

/// Bytes copied into the page cache per step of a paced write: a few
/// milliseconds of copying.
pub(crate) const WRITE_SLICE: usize = 8 << 20;

/// Bytes written between two flushes of a paced write ([`WRITE_SLICE`]s):
/// flushing as it goes bounds the dirty pages the final fsync waits for,
/// so that no step of the write (as the pacer sees it) grows with the
/// file.
pub(crate) const SYNC_EVERY: usize = 8 * WRITE_SLICE;

/// [`write_durably`] in [`WRITE_SLICE`] steps with `pace` after each, and
/// the data flushed every [`SYNC_EVERY`] bytes.
fn write_durably_paced(tmp: &Path, bytes: &[u8], pace: &mut (dyn FnMut() + Send)) -> Result<()> {
    let mut f = std::fs::File::create(tmp).map_err(|e| io(tmp, e))?;
    let mut unsynced = 0;
    for slice in bytes.chunks(WRITE_SLICE) {
        f.write_all(slice).map_err(|e| io(tmp, e))?;
        unsynced += slice.len();
        if unsynced >= SYNC_EVERY {
            f.sync_data().map_err(|e| io(tmp, e))?;
            unsynced = 0;
        }
        pace();
    }
    f.sync_all().map_err(|e| io(tmp, e))
}

/// Best-effort removal of what a failed write left; a failure to remove is
/// logged (the write's own error is the one reported).
fn remove_leftover(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::debug!(file = %path.display(), "removed the leftover of a failed write"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(
            file = %path.display(),
            error = %e,
            "cannot remove the leftover of a failed checkpoint write"
        ),
    }
}

/// Remove the temp files (`.<name>.tmp-<pid>-<n>`) that writers killed in the
/// middle of a put left under `root`; a live process's files are kept.
fn sweep_temporaries(root: &Path) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
                continue;
            }
            let Some(pid) = name
                .strip_prefix('.')
                .and_then(|n| n.rsplit_once(TMP_MARK))
                .and_then(|(_, tail)| tail.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if !process_is_alive(pid) {
                tracing::info!(file = %path.display(), "removing a stale checkpoint temp file");
                remove_leftover(&path);
            }
        }
    }
}

use crate::liveness::process_is_alive;

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

#[async_trait]
impl Backend for LocalBackend {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        self.put_paced(key, bytes, &mut || {}).await
    }

    async fn put_paced(
        &self,
        key: &str,
        bytes: Bytes,
        pace: &mut (dyn FnMut() + Send),
    ) -> Result<()> {
        let path = self.root.join(key);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let tmp = temp_path(&dir, &path);
        let written = write_durably_paced(&tmp, &bytes, pace)
            .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| io(&path, e)));
        if let Err(e) = written {
            // A full disk must not stay full because of this write: the
            // temp file is hidden from listings, so nothing else would ever
            // remove it. The rename is atomic, so `path` never holds a part.
            remove_leftover(&tmp);
            return Err(e);
        }
        sync_dir(&dir)
    }

    async fn create(&self, key: &str, bytes: Bytes) -> Result<bool> {
        let path = self.root.join(key);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let tmp = temp_path(&dir, &path);
        if let Err(e) = write_durably(&tmp, &bytes) {
            remove_leftover(&tmp);
            return Err(e);
        }
        // A hard link fails when the target exists, atomically (a rename
        // would replace it): the complete file appears under `path`, or
        // nothing does.
        let linked = std::fs::hard_link(&tmp, &path);
        if let Err(e) = std::fs::remove_file(&tmp) {
            tracing::warn!(file = %tmp.display(), error = %e, "cannot remove a temp file");
        }
        match linked {
            Ok(()) => sync_dir(&dir).map(|()| true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io(&path, e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        let path = self.root.join(key);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        list_names(&self.root, prefix, |name| name.starts_with('.'))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.root.join(key);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                // Folders of deleted checkpoints go too (fails harmlessly while not empty).
                if let Some(dir) = path.parent().filter(|d| *d != self.root) {
                    let _ = std::fs::remove_dir(dir);
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&path, e)),
        }
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

/// The files under `root/prefix`, recursively, as `/`-separated keys
/// relative to `root`, sorted; names for which `hidden` holds are left
/// out (temporary files).
///
/// Names come from the directory alone, with no `stat` per file: a file
/// removed while the directory is read may still be listed, but one that
/// stays is never left out. `object_store`'s local listing stats every
/// entry and drops those removed in between, so a reader descheduled
/// between the two steps could miss every attempt marker above its own
/// while another reserver replaced them with newer ones, and hand out an
/// id twice (`reserve_tests`, 2 runs in 154 with both cores busy).
fn list_names(root: &Path, prefix: &str, hidden: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![root.join(prefix)];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let p = entry.path();
            if hidden(&entry.file_name().to_string_lossy()) {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Any `object_store` store (S3, GCS, Azure, local files, memory). Clones
/// share the store.
#[derive(Clone)]
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    /// For a `file://` URL, its directory: listed by names (see
    /// [`list_names`]) rather than through `object_store`.
    local_dir: Option<PathBuf>,
}

impl ObjectStoreBackend {
    /// Wrap a store, keeping objects under `prefix`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: ObjectPath, url: impl Into<String>) -> Self {
        Self {
            store,
            prefix,
            url: url.into(),
            local_dir: None,
        }
    }

    /// A store from a URL such as `s3://bucket/path`, `gs://...`, `az://...`,
    /// `file:///dir` or `memory:///`. Credentials come from the environment
    /// (e.g. `AWS_ACCESS_KEY_ID`), as the `object_store` crate reads them.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = url::Url::parse(url).map_err(|e| StorageError::Url {
            url: url.into(),
            message: e.to_string(),
        })?;
        let env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| {
                k.starts_with("AWS_") || k.starts_with("GOOGLE_") || k.starts_with("AZURE_")
            })
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        let (store, prefix) =
            object_store::parse_url_opts(&parsed, env).map_err(|e| StorageError::Url {
                url: url.into(),
                message: e.to_string(),
            })?;
        let mut backend = Self::new(Arc::from(store), prefix, url);
        if parsed.scheme() == "file" {
            backend.local_dir = parsed.to_file_path().ok();
        }
        Ok(backend)
    }

    /// Take the store's lease (see [`crate::StoreLease`]): one pipeline
    /// at a time writes checkpoints here.
    pub async fn acquire_lease(&self, ttl: std::time::Duration) -> Result<crate::StoreLease> {
        crate::StoreLease::acquire(Arc::clone(&self.store), &self.prefix, &self.url, ttl).await
    }

    fn path(&self, key: &str) -> ObjectPath {
        key.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |p, part| p.join(part))
    }

    fn err(&self, key: &str, source: object_store::Error) -> StorageError {
        StorageError::ObjectStore {
            path: format!("{}/{key}", self.url.trim_end_matches('/')),
            source,
        }
    }
}

#[async_trait]
impl Backend for ObjectStoreBackend {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(key);
        let Err(e) = self.store.put(&path, PutPayload::from_bytes(bytes)).await else {
            return Ok(());
        };
        // Stores promise atomic puts, but a store on a filesystem (or a
        // misbehaving gateway) can leave a part behind when the disk fills.
        // Every key is written once (checkpoint ids are never reused), so
        // whatever is at `path` now came from this failed write.
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(cleanup) => tracing::warn!(
                object = %path,
                error = %cleanup,
                "cannot remove the leftover of a failed checkpoint write"
            ),
        }
        Err(self.err(key, e))
    }

    async fn create(&self, key: &str, bytes: Bytes) -> Result<bool> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&self.path(key), PutPayload::from_bytes(bytes), opts)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            // No cleanup here: whatever is at the key may be another
            // writer's object. A store without conditional puts (S3 with
            // `conditional_put = disabled`) fails with `NotImplemented`.
            Err(e) => Err(self.err(key, e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(key)).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| self.err(key, e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(key, e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        if let Some(dir) = &self.local_dir {
            // `object_store` stages a file as `name#N` before it appears.
            return list_names(dir, prefix, |name| {
                name.starts_with('.') || name.contains('#')
            });
        }
        let base = self.path(prefix);
        let metas: Vec<_> = self
            .store
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(|e| self.err(prefix, e))?;
        let strip = self.prefix.as_ref().trim_end_matches('/').to_string();
        let mut out: Vec<String> = metas
            .into_iter()
            .map(|m| {
                let full = m.location.as_ref().to_string();
                full.strip_prefix(&strip)
                    .map(|s| s.trim_start_matches('/').to_string())
                    .unwrap_or(full)
            })
            .collect();
        out.sort();
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key, e)),
        }
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}
