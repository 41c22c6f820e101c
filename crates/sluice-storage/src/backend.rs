//! Where checkpoint bytes live.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Result, StorageError};

/// A flat key-value store of immutable objects with atomic, durable puts.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Write `bytes` under `key`, atomically and durably.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<()>;
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
    /// A backend rooted at `root` (created if missing).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        std::fs::create_dir_all(&root).map_err(|e| io(&root, e))?;
        Ok(Self { root })
    }
}

fn io(path: &Path, source: std::io::Error) -> StorageError {
    StorageError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

#[async_trait]
impl Backend for LocalBackend {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        let path = self.root.join(key);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("object"),
            std::process::id()
        ));
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(&bytes).map_err(|e| io(&tmp, e))?;
        f.sync_all().map_err(|e| io(&tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        sync_dir(&dir)
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
        let mut out = Vec::new();
        let start = self.root.join(prefix);
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| io(&dir, e))?;
                let p = entry.path();
                let name = entry.file_name();
                if name.to_string_lossy().starts_with('.') {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(rel) = p.strip_prefix(&self.root) {
                    out.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        out.sort();
        Ok(out)
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

/// Any `object_store` store (S3, GCS, Azure, local files, memory).
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
}

impl ObjectStoreBackend {
    /// Wrap a store, keeping objects under `prefix`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: ObjectPath, url: impl Into<String>) -> Self {
        Self {
            store,
            prefix,
            url: url.into(),
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
        Ok(Self::new(Arc::from(store), prefix, url))
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
        self.store
            .put(&self.path(key), PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.err(key, e))
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(key)).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| self.err(key, e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(key, e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
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
