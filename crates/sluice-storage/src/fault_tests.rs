//! Faults of the checkpoint store: a full disk, failing puts, exhausted ids.
//! After any failed write nothing of it is left behind, and the previous
//! checkpoint is intact and recoverable.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::ObjectStore;

use crate::backend::{Backend, LocalBackend, ObjectStoreBackend};
use crate::store::tests::manifest;
use crate::store::CheckpointStore;
use crate::testing::FaultyStore;
use crate::StorageError;

/// Every test here is bounded: a store call that hangs fails the test.
async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test timed out")
}

/// Reserve, write two blobs (`small` and a `big_len`-byte one), commit.
async fn checkpoint(store: &CheckpointStore, big_len: usize) -> Result<u64, StorageError> {
    let id = store.reserve().await?;
    let mut m = manifest(id, Vec::new());
    m.blobs.push(
        store
            .write_blob(id, "small", Bytes::from(format!("state-{id}")))
            .await?,
    );
    m.blobs.push(
        store
            .write_blob(id, "big", vec![7u8; big_len].into())
            .await?,
    );
    store.commit(&m).await?;
    Ok(id)
}

/// The newest checkpoint loads and holds what [`checkpoint`] wrote.
async fn assert_latest(store: &CheckpointStore, id: u64) {
    let c = store.latest_valid().await.unwrap().expect("a checkpoint");
    assert_eq!(c.manifest.id, id);
    assert_eq!(c.blobs["small"].as_ref(), format!("state-{id}").as_bytes());
    let ids: Vec<u64> = store.list().await.unwrap().iter().map(|c| c.id).collect();
    assert_eq!(ids.last(), Some(&id));
}

async fn object_keys(store: &dyn ObjectStore) -> Vec<String> {
    let mut keys: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    keys
}

/// Keys of objects that belong to no committed checkpoint and no attempt
/// marker: what a failed write left behind.
fn leftovers(keys: &[String], committed: &[u64]) -> Vec<String> {
    keys.iter()
        .filter(|k| !k.starts_with("attempts/"))
        .filter(|k| {
            let id = k.split('/').nth(1).and_then(|p| p.parse::<u64>().ok());
            !id.is_some_and(|id| committed.contains(&id))
        })
        .cloned()
        .collect()
}

fn faulty_store() -> (FaultyStore, Arc<InMemory>, CheckpointStore) {
    let mem = Arc::new(InMemory::new());
    let faulty = FaultyStore::new(mem.clone());
    let store = CheckpointStore::new(Box::new(ObjectStoreBackend::new(
        Arc::new(faulty.clone()),
        object_store::path::Path::from(""),
        "memory:///",
    )));
    (faulty, mem, store)
}

/// Each put of a checkpoint (attempt marker, two blobs, manifest) fails in
/// turn: the error names the object, checkpoint 1 stays the recovered one,
/// and the next checkpoint succeeds and leaves no part of the failed one.
#[tokio::test]
async fn object_store_failed_put_leaves_nothing_and_keeps_previous() {
    bounded(async {
        for failing in 1..=4u64 {
            let (faulty, mem, store) = faulty_store();
            assert_eq!(checkpoint(&store, 10).await.unwrap(), 1);
            faulty.fail_put(failing);
            let err = checkpoint(&store, 10).await.unwrap_err();
            assert_eq!(err.code(), "SLC-STO-002", "put {failing}: {err}");
            let named = [
                "attempts/00000000000000000002",
                "/small",
                "/big",
                "/MANIFEST",
            ];
            assert!(
                err.to_string().starts_with("object store memory:/")
                    && err.to_string().contains(named[failing as usize - 1])
                    && err.to_string().contains("injected fault"),
                "put {failing}: {err}"
            );
            assert_eq!(faulty.failed_puts(), 1);
            assert_latest(&store, 1).await;
            faulty.heal();
            let next = checkpoint(&store, 10).await.unwrap();
            assert_latest(&store, next).await;
            let keys = object_keys(mem.as_ref()).await;
            assert_eq!(leftovers(&keys, &[1, next]), Vec::<String>::new());
        }
    })
    .await;
}

/// A full disk: the blob that does not fit is written in part and fails;
/// the part is removed at once, the blobs written before it when the next
/// attempt starts, so the space comes back.
#[tokio::test]
async fn object_store_full_disk_frees_the_partial_blob() {
    bounded(async {
        let (faulty, mem, store) = faulty_store();
        checkpoint(&store, 100).await.unwrap();
        let used = faulty.used_bytes();
        faulty.set_capacity(Some(used + 500));
        let err = checkpoint(&store, 10_000).await.unwrap_err();
        assert_eq!(err.code(), "SLC-STO-002");
        let text = err.to_string();
        assert!(
            text.contains("checkpoints/00000000000000000002/big")
                && text.contains("no space left")
                && text.contains("of 10000 bytes written"),
            "{text}"
        );
        let keys = object_keys(mem.as_ref()).await;
        assert!(
            !keys.iter().any(|k| k.ends_with("00000000000000000002/big")),
            "the partial blob is removed: {keys:?}"
        );
        assert_latest(&store, 1).await;
        // Still full for a big state, but the next attempt starts by
        // removing the abandoned attempt's small blob.
        let err = checkpoint(&store, 10_000).await.unwrap_err();
        assert_eq!(err.code(), "SLC-STO-002");
        let keys = object_keys(mem.as_ref()).await;
        assert!(
            !keys.iter().any(|k| k.contains("/00000000000000000002/")),
            "{keys:?}"
        );
        // A state that fits is written once space is available.
        let id = checkpoint(&store, 100).await.unwrap();
        assert_latest(&store, id).await;
        let keys = object_keys(mem.as_ref()).await;
        assert_eq!(leftovers(&keys, &[1, id]), Vec::<String>::new());
    })
    .await;
}

/// Every id source at `u64::MAX` (an attempt marker, a committed manifest)
/// makes reserving an error naming it, never a wrap to 0 or 1.
#[tokio::test]
async fn reserve_at_u64_max_is_an_error_not_a_wrap() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        let backend = LocalBackend::new(dir.path()).unwrap();
        backend
            .put("attempts/18446744073709551614", Bytes::new())
            .await
            .unwrap();
        assert_eq!(store.reserve().await.unwrap(), u64::MAX);
        let err = store.reserve().await.unwrap_err();
        assert_eq!(err.code(), "SLC-STO-005");
        assert_eq!(
            err.to_string(),
            format!(
                "checkpoint store {}: checkpoint ids are exhausted: \
                 'attempts/18446744073709551615' holds id 18446744073709551615, the largest \
                 possible (u64::MAX = 18446744073709551615); ids never wrap, so start from an \
                 empty state directory",
                dir.path().display()
            )
        );

        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        store.commit(&manifest(u64::MAX, Vec::new())).await.unwrap();
        let err = store.reserve().await.unwrap_err();
        assert_eq!(err.code(), "SLC-STO-005");
        assert!(
            err.to_string()
                .contains("'checkpoints/18446744073709551615/MANIFEST' holds id"),
            "{err}"
        );
    })
    .await;
}

/// Every file under `root`, relative, sorted (dot-files included).
fn all_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// A local put that fails after its temp file was written (here: the
/// rename onto a folder) removes the temp file.
#[tokio::test]
async fn local_failed_put_removes_its_temp_file() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join("k/blob/inside")).unwrap();
        let err = backend
            .put("k/blob", Bytes::from_static(b"data"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "SLC-STO-001");
        assert!(
            err.to_string()
                .starts_with(&dir.path().join("k/blob").display().to_string()),
            "{err}"
        );
        assert_eq!(all_files(dir.path()), Vec::<String>::new());
    })
    .await;
}

/// Temp files of a killed writer are removed when the store is opened;
/// those of a live process are kept.
#[tokio::test]
async fn local_open_removes_stale_temp_files() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("checkpoints/00000000000000000003");
        std::fs::create_dir_all(&folder).unwrap();
        // Above Linux's largest pid: never a live process.
        std::fs::write(folder.join(".op.tmp-4294967295"), b"stale").unwrap();
        std::fs::write(dir.path().join(".MANIFEST.tmp-4294967294"), b"stale").unwrap();
        std::fs::write(folder.join(".op.tmp-1"), b"pid 1 is alive").unwrap();
        std::fs::write(folder.join(".hidden"), b"not ours").unwrap();
        // This process's own in-flight write (another backend of ours).
        let own = format!(".op.tmp-{}", std::process::id());
        std::fs::write(folder.join(&own), b"in flight").unwrap();
        LocalBackend::new(dir.path()).unwrap();
        let mut expected = vec![
            "checkpoints/00000000000000000003/.hidden".to_string(),
            "checkpoints/00000000000000000003/.op.tmp-1".to_string(),
            format!("checkpoints/00000000000000000003/{own}"),
        ];
        expected.sort();
        assert_eq!(all_files(dir.path()), expected);
    })
    .await;
}

/// Unmounts the tmpfs when the test ends, however it ends.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A real full filesystem (a 256 KiB tmpfs; skipped where mounting is not
/// permitted): the failed write leaves no file, checkpoint 1 is recovered,
/// and a checkpoint that fits succeeds afterwards.
#[tokio::test]
async fn local_full_filesystem_leaves_nothing_and_keeps_previous() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                eprintln!(
                    "skipping: cannot mount a tmpfs: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return;
            }
            Err(e) => {
                eprintln!("skipping: cannot run mount: {e}");
                return;
            }
        }
        let _mount = Mount(dir.path().to_path_buf());
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        assert_eq!(checkpoint(&store, 1000).await.unwrap(), 1);
        let err = checkpoint(&store, 1 << 20).await.unwrap_err();
        assert_eq!(err.code(), "SLC-STO-001");
        let text = err.to_string();
        assert!(
            text.contains(".big.tmp-") && text.contains("No space left on device"),
            "{text}"
        );
        let files = all_files(dir.path());
        assert!(
            !files
                .iter()
                .any(|f| f.contains("00000000000000000002/big") || f.contains(".tmp-")),
            "the failed blob and its temp file are gone: {files:?}"
        );
        assert_latest(&store, 1).await;
        let id = checkpoint(&store, 1000).await.unwrap();
        assert_latest(&store, id).await;
        let files = all_files(dir.path());
        let left: Vec<_> = files
            .iter()
            .filter(|f| f.contains("/00000000000000000002/"))
            .collect();
        assert!(left.is_empty(), "{files:?}");
    })
    .await;
}
