//! The checkpoint store: reserve ids, write blobs and manifests, load the
//! newest valid checkpoint, list and prune.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::authority::CommitAuthority;
use crate::backend::Backend;
use crate::error::{Result, StorageError};
use crate::lease::StoreLease;
use crate::manifest::{BlobRef, Manifest};

/// Summary of a committed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Id.
    pub id: u64,
    /// Creation time (ms since the epoch).
    pub created_ms: i64,
    /// Bytes of state.
    pub state_bytes: u64,
}

/// A checkpoint read back and verified.
#[derive(Debug, Clone)]
pub struct LoadedCheckpoint {
    /// Its manifest.
    pub manifest: Manifest,
    /// Blob bytes by logical name.
    pub blobs: HashMap<String, Bytes>,
}

/// Checkpoints of one pipeline. Cheap to clone: clones share the backend,
/// so a database keeps one store for its whole life (a `memory://` store
/// is its objects).
#[derive(Clone)]
pub struct CheckpointStore {
    backend: Arc<dyn Backend>,
    /// The lease this pipeline holds on the store, when it is an object
    /// store: a reservation or commit after the lease was lost fails.
    lease: Option<Arc<StoreLease>>,
    /// Who records commits, when a manifest alone does not make a
    /// checkpoint (a cluster; see [`CommitAuthority`]).
    authority: Option<Arc<dyn CommitAuthority>>,
    /// The id this store reserved before its newest one (0: none yet).
    /// Markers below it are removed at the next reservation; see
    /// [`Self::reserve`] for why not every marker below the newest.
    previous_reserved: Arc<AtomicU64>,
}

const ATTEMPTS: &str = "attempts";
const CHECKPOINTS: &str = "checkpoints";

/// Bytes checksummed per step of [`CheckpointStore::write_blob_paced`]
/// (a few milliseconds).
const CRC_SLICE: usize = 32 << 20;

/// Ids a reservation tries before giving up (each taken id moves it on).
pub const RESERVE_TRIES: u32 = 64;

/// The longest pause between two tries of a reservation that lost a race.
const RESERVE_BACKOFF_CAP: Duration = Duration::from_millis(32);

/// How long a reservation that lost `lost` races in a row waits before its
/// next try: a random time up to an exponentially growing bound. Without
/// the wait, reservers that start together keep leapfrogging each other
/// (each finds the other's larger marker and moves above it) until all run
/// out of tries; the random part breaks the lockstep.
fn reserve_backoff(lost: u32) -> Duration {
    use std::hash::BuildHasher;
    let bound = RESERVE_BACKOFF_CAP
        .as_micros()
        .min(100u128 << lost.min(16))
        .max(1);
    // A fresh `RandomState` is randomly keyed: a cheap source of jitter
    // that differs between threads and processes.
    let random = std::collections::hash_map::RandomState::new().hash_one(lost);
    let micros = u64::try_from(u128::from(random) % bound).unwrap_or(0);
    Duration::from_micros(micros)
}

fn attempt_key(id: u64) -> String {
    format!("{ATTEMPTS}/{id:020}")
}

fn manifest_key(id: u64) -> String {
    format!("{CHECKPOINTS}/{id:020}/MANIFEST")
}

fn parse_id(part: &str) -> Option<u64> {
    part.parse().ok()
}

impl CheckpointStore {
    /// A store over a backend.
    pub fn new(backend: Box<dyn Backend>) -> Self {
        Self {
            backend: Arc::from(backend),
            lease: None,
            authority: None,
            previous_reserved: Arc::new(AtomicU64::new(0)),
        }
    }

    /// This store, with commits recorded by `authority`: from now on a
    /// checkpoint exists once its manifest is written *and* the authority
    /// recorded its id, and readers see only recorded checkpoints (see
    /// [`CommitAuthority`]).
    pub fn with_authority(mut self, authority: Arc<dyn CommitAuthority>) -> Self {
        self.authority = Some(authority);
        self
    }

    /// The commit authority, if commits are recorded by one (a cluster).
    pub fn authority(&self) -> Option<&Arc<dyn CommitAuthority>> {
        self.authority.as_ref()
    }

    /// This store, written under `lease`: from now on a reservation or a
    /// commit fails with [`StorageError::LeaseLost`] once a renewal found
    /// the lease gone or taken over by another pipeline.
    pub fn with_lease(mut self, lease: Arc<StoreLease>) -> Self {
        self.lease = Some(lease);
        self
    }

    fn ensure_leased(&self) -> Result<()> {
        self.lease.as_ref().map_or(Ok(()), |l| l.ensure_held())
    }

    /// Where checkpoints are kept.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// Durably reserve the next checkpoint id. Ids only grow: a reserved id
    /// is burned even if its attempt is abandoned. When the largest id in
    /// use is `u64::MAX` this is [`StorageError::IdsExhausted`], never a
    /// wrap to 0.
    ///
    /// The marker `attempts/<id>` is made with a conditional create: one
    /// reservation that finds its marker taken lists the store again and
    /// moves above the largest id in use, and one that finds a larger id in
    /// use after creating its marker (its listing was stale) gives the
    /// marker back and moves above that id; either waits a random, growing
    /// time first (see `reserve_backoff`). After [`RESERVE_TRIES`] ids this
    /// is [`StorageError::ReservationContended`].
    ///
    /// Two reservers on one store (which the store's lease or the state
    /// directory's lock refuses; the tests run them without one) get
    /// distinct ids as long as a listing sees the markers that live through
    /// it. A listing is not a snapshot: a local directory is listed by
    /// names alone (a `stat` per entry, as `object_store` does, dropped
    /// every marker removed after the directory was read, and a reserver
    /// stalled in between handed out an id twice, 2 runs in 154 under
    /// load), but one stalled between two reads of a large directory can
    /// still miss every marker above its own. Only the lease rules that out.
    ///
    /// The store has one writer (the pipeline's checkpoint coordinator,
    /// guarded by the store's lease or the state directory's lock), whose
    /// attempts run one after another, so every uncommitted attempt below
    /// the new id was abandoned: its blobs are removed here first. That
    /// frees the space a failed checkpoint took (on a full disk, the blobs
    /// written before the write that failed), which nothing else would ever
    /// reclaim.
    pub async fn reserve(&self) -> Result<u64> {
        self.ensure_leased()?;
        let committed = self.committed_ids().await?;
        let (mut last, mut key) = self.largest_id(&committed).await?;
        self.discard_abandoned(&committed).await?;
        for attempt in 0..RESERVE_TRIES {
            if attempt > 0 {
                tokio::time::sleep(reserve_backoff(attempt)).await;
            }
            let id = last
                .checked_add(1)
                .ok_or_else(|| StorageError::IdsExhausted {
                    store: self.backend.describe(),
                    key: key.clone(),
                    last,
                })?;
            let marker = attempt_key(id);
            if !self.backend.create(&marker, Bytes::new()).await? {
                tracing::debug!(checkpoint = id, "attempt id taken by another reservation");
                // Listed again rather than trying `id + 1` after the
                // backoff: by then the others may have moved far above
                // `id` and removed the markers just above it.
                (last, key) = (id, marker);
                let (top, top_key) = self.largest_id(&self.committed_ids().await?).await?;
                if top > last {
                    (last, key) = (top, top_key);
                }
                continue;
            }
            let (top, top_key) = self.largest_id(&self.committed_ids().await?).await?;
            if top > id {
                // Ids only grow: an id below one already in use is not
                // handed out, even though its marker was free.
                self.backend.delete(&marker).await?;
                (last, key) = (top, top_key);
                continue;
            }
            // Markers below this store's previous reservation say nothing
            // more: without removing them, every attempt that fails while no
            // checkpoint commits (a disk that stays full) would leave one
            // more object behind. The two newest of this store's own stay,
            // and those of other reservers on the store are removed only
            // below this store's previous id: a marker removed as soon as a
            // larger one exists let a reserver whose two listings both
            // missed the short-lived newest markers (a directory listed
            // while others create and delete in it) create the removed id
            // again and hand it out twice.
            let floor = self.previous_reserved.swap(id, Ordering::SeqCst);
            for older in self.backend.list(ATTEMPTS).await? {
                if older
                    .rsplit('/')
                    .next()
                    .and_then(parse_id)
                    .is_some_and(|a| a < floor)
                {
                    self.backend.delete(&older).await?;
                }
            }
            return Ok(id);
        }
        Err(StorageError::ReservationContended {
            store: self.backend.describe(),
            tries: RESERVE_TRIES,
            last,
        })
    }

    /// The largest id of an attempt marker or a committed checkpoint, and
    /// the key that holds it (`(0, "")` on an empty store).
    ///
    /// Under an authority that decides one cut for several stores (a
    /// shuffled split's leader), the largest id it recorded or reserved
    /// counts too: a store that joined later (a node added to the split,
    /// which may lead it) reserves above every id the cut's records
    /// already hold, since the authority takes each id once.
    async fn largest_id(&self, committed: &[u64]) -> Result<(u64, String)> {
        let mut max = (0u64, String::new());
        if let Some(authority) = self.authority.as_ref().filter(|a| a.one_cut_across_nodes()) {
            let committed = authority.committed().await?;
            let recorded = committed.as_ref().and_then(|c| c.last().copied());
            if let Some(id) = recorded.max(authority.largest_reserved().await?) {
                max = (id, format!("the commit authority's checkpoint {id}"));
            }
        }
        for key in self.backend.list(ATTEMPTS).await? {
            if let Some(id) = key.rsplit('/').next().and_then(parse_id) {
                if id >= max.0 {
                    max = (id, key);
                }
            }
        }
        if let Some(&id) = committed.last() {
            if id >= max.0 {
                max = (id, manifest_key(id));
            }
        }
        Ok(max)
    }

    /// Best-effort removal of everything attempt `id` wrote, after one of
    /// its writes failed: the manifest first (so a half-removed attempt is
    /// never taken for a committed checkpoint), then its blobs. On a full
    /// disk this gives the space back at once instead of at the next
    /// attempt, which may never come. A failure to remove is logged; the
    /// write's own error is the one reported.
    async fn discard_failed_attempt(&self, id: u64) {
        let prefix = format!("{CHECKPOINTS}/{id:020}/");
        let manifest = manifest_key(id);
        let mut keys = match self.backend.list(&prefix).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(checkpoint = id, error = %e, "cannot list a failed attempt to remove it");
                return;
            }
        };
        keys.retain(|k| *k != manifest);
        keys.insert(0, manifest);
        for key in keys {
            if let Err(e) = self.backend.delete(&key).await {
                tracing::warn!(checkpoint = id, %key, error = %e, "cannot remove a blob of a failed attempt");
            }
        }
    }

    /// Remove the blobs of every attempt that has no manifest.
    async fn discard_abandoned(&self, committed: &[u64]) -> Result<()> {
        for key in self.backend.list(CHECKPOINTS).await? {
            let Some(id) = key.split('/').nth(1).and_then(parse_id) else {
                continue;
            };
            if committed.binary_search(&id).is_err() {
                tracing::debug!(checkpoint = id, %key, "removing a blob of an abandoned attempt");
                self.backend.delete(&key).await?;
            }
        }
        Ok(())
    }

    /// [`Self::reserve`], given up at `deadline` with
    /// [`StorageError::TimedOut`]: the coordinator holds its barrier for a
    /// reservation, so a hung store must not hold it for longer than the
    /// checkpoint's alignment timeout.
    pub async fn reserve_by(&self, deadline: std::time::Instant) -> Result<u64> {
        let after = deadline.saturating_duration_since(std::time::Instant::now());
        tokio::time::timeout_at(deadline.into(), self.reserve())
            .await
            .map_err(|_| StorageError::TimedOut {
                store: self.backend.describe(),
                operation: "reserving a checkpoint id",
                after,
            })?
    }

    /// Write one blob of checkpoint `id`.
    pub async fn write_blob(&self, id: u64, name: &str, bytes: Bytes) -> Result<BlobRef> {
        self.write_blob_paced(id, name, bytes, &mut || {}).await
    }

    /// [`Self::write_blob`], calling `pace` between bounded steps (of the
    /// checksum, and of the write where the backend writes in steps; see
    /// [`Backend::put_paced`]): a checkpoint tail rests there while the
    /// pipeline is busy, so a large blob is no single long step.
    pub async fn write_blob_paced(
        &self,
        id: u64,
        name: &str,
        bytes: Bytes,
        pace: &mut (dyn FnMut() + Send),
    ) -> Result<BlobRef> {
        let key = format!("{CHECKPOINTS}/{id:020}/{}", name.replace('/', "__"));
        let mut hasher = crc32fast::Hasher::new();
        for slice in bytes.chunks(CRC_SLICE) {
            hasher.update(slice);
            pace();
        }
        let crc32 = hasher.finalize();
        let len = bytes.len() as u64;
        if let Err(e) = self.backend.put_paced(&key, bytes, pace).await {
            self.discard_failed_attempt(id).await;
            return Err(e);
        }
        Ok(BlobRef {
            name: name.to_string(),
            key,
            len,
            crc32,
        })
    }

    /// Commit: write the manifest (with its own checksum), then have the
    /// commit authority, if there is one, record the id. From here on the
    /// checkpoint exists.
    pub async fn commit(&self, manifest: &Manifest) -> Result<()> {
        self.ensure_leased()?;
        let body = serde_json::to_vec(manifest).map_err(|e| StorageError::Corrupt {
            id: manifest.id,
            message: format!("cannot encode manifest: {e}"),
        })?;
        let crc32 = crc32fast::hash(&body);
        let mut bytes = format!("{crc32:08x}\n").into_bytes();
        bytes.extend_from_slice(&body);
        let bytes_len = bytes.len();
        let put = self
            .backend
            .put(&manifest_key(manifest.id), Bytes::from(bytes))
            .await;
        if put.is_err() {
            self.discard_failed_attempt(manifest.id).await;
            return put;
        }
        let Some(authority) = &self.authority else {
            return put;
        };
        // Refused or not, the manifest stays. Refused, it is not a
        // checkpoint to anyone reading the records, and the store's writer
        // removes it at its next reservation; but a writer that took over
        // before anything was recorded may already have resumed from it,
        // and removing it under that writer would lose its checkpoint.
        // Unknown, the record may exist.
        let part = BlobRef {
            name: "MANIFEST".into(),
            key: manifest_key(manifest.id),
            len: u64::try_from(bytes_len).unwrap_or(u64::MAX),
            crc32,
        };
        authority
            .record_commit(manifest.id, manifest.assignment_generation, &part)
            .await
    }

    /// Ids with a manifest, ascending; with a commit authority, only those
    /// it recorded (a manifest it did not record is a fenced writer's, or
    /// an attempt whose record failed).
    async fn committed_ids(&self) -> Result<Vec<u64>> {
        let mut ids: Vec<u64> = self
            .backend
            .list(CHECKPOINTS)
            .await?
            .into_iter()
            .filter(|k| k.ends_with("/MANIFEST"))
            .filter_map(|k| k.split('/').nth(1).and_then(parse_id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if let Some(authority) = &self.authority {
            match authority.committed().await? {
                Some(recorded) => ids.retain(|id| recorded.contains(id)),
                // One cut through several nodes: a manifest is this node's
                // part of an attempt, and only the cut's record makes it a
                // checkpoint. Before the first commit every attempt was
                // aborted or undecided, and resuming from one would restore
                // state holding rows the other nodes, resuming from nothing,
                // send again (and skip what this node had sent them).
                None if authority.one_cut_across_nodes() => ids.clear(),
                None => {}
            }
        }
        Ok(ids)
    }

    /// Read and verify checkpoint `id` (manifest and every blob).
    pub async fn load(&self, id: u64) -> Result<LoadedCheckpoint> {
        let corrupt = |message: String| StorageError::Corrupt { id, message };
        let raw = self
            .backend
            .get(&manifest_key(id))
            .await?
            .ok_or_else(|| corrupt("manifest is missing".into()))?;
        let split = raw
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| corrupt("manifest is truncated".into()))?;
        let want = std::str::from_utf8(&raw[..split])
            .ok()
            .and_then(|s| u32::from_str_radix(s, 16).ok())
            .ok_or_else(|| corrupt("manifest checksum is unreadable".into()))?;
        let body = &raw[split + 1..];
        if crc32fast::hash(body) != want {
            return Err(corrupt("manifest checksum mismatch".into()));
        }
        let manifest: Manifest = serde_json::from_slice(body)
            .map_err(|e| corrupt(format!("manifest is unreadable: {e}")))?;
        let mut blobs = HashMap::new();
        for b in &manifest.blobs {
            let bytes = self
                .backend
                .get(&b.key)
                .await?
                .ok_or_else(|| corrupt(format!("blob '{}' is missing", b.name)))?;
            if bytes.len() as u64 != b.len || crc32fast::hash(&bytes) != b.crc32 {
                return Err(corrupt(format!("blob '{}' checksum mismatch", b.name)));
            }
            blobs.insert(b.name.clone(), bytes);
        }
        Ok(LoadedCheckpoint { manifest, blobs })
    }

    /// The newest checkpoint that verifies; damaged ones are skipped with a
    /// warning naming them.
    pub async fn latest_valid(&self) -> Result<Option<LoadedCheckpoint>> {
        for id in self.committed_ids().await?.into_iter().rev() {
            match self.load(id).await {
                Ok(c) => return Ok(Some(c)),
                Err(e @ StorageError::Corrupt { .. }) => {
                    tracing::warn!(checkpoint = id, error = %e, "skipping damaged checkpoint");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Committed checkpoints, oldest first (manifests that do not verify are left out).
    pub async fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let mut out = Vec::new();
        for id in self.committed_ids().await? {
            if let Ok(c) = self.load(id).await {
                out.push(CheckpointInfo {
                    id,
                    created_ms: c.manifest.created_ms,
                    state_bytes: c.manifest.state_bytes(),
                });
            }
        }
        Ok(out)
    }

    /// Keep the newest `keep` committed checkpoints; delete older ones and
    /// leftovers of abandoned attempts older than the oldest kept.
    pub async fn prune(&self, keep: usize) -> Result<()> {
        let ids = self.committed_ids().await?;
        if ids.len() <= keep {
            return Ok(());
        }
        let cutoff = ids[ids.len() - keep.max(1)];
        for key in self.backend.list(CHECKPOINTS).await? {
            let Some(id) = key.split('/').nth(1).and_then(parse_id) else {
                continue;
            };
            // The manifest goes first so a half-deleted checkpoint is never "committed".
            if id < cutoff && key.ends_with("/MANIFEST") {
                self.backend.delete(&key).await?;
            }
        }
        for key in self.backend.list(CHECKPOINTS).await? {
            let Some(id) = key.split('/').nth(1).and_then(parse_id) else {
                continue;
            };
            if id < cutoff {
                self.backend.delete(&key).await?;
            }
        }
        for key in self.backend.list(ATTEMPTS).await? {
            if key
                .rsplit('/')
                .next()
                .and_then(parse_id)
                .is_some_and(|id| id < cutoff)
            {
                self.backend.delete(&key).await?;
            }
        }
        if let Some(authority) = &self.authority {
            if let Err(e) = authority.forget_below(cutoff).await {
                tracing::warn!(below = cutoff, error = %e, "cannot prune the commit records");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::backend::{LocalBackend, ObjectStoreBackend};

    /// A manifest of checkpoint `id` holding `blobs` (shared with the fault tests).
    pub(crate) fn manifest(id: u64, blobs: Vec<BlobRef>) -> Manifest {
        Manifest {
            id,
            created_ms: 1,
            pipeline: "p".into(),
            watermark: 5,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            blobs,
            assignment_generation: None,
        }
    }

    async fn round_trip(store: CheckpointStore) {
        let a = store.reserve().await.unwrap();
        let b = store.reserve().await.unwrap();
        assert_eq!((a, b), (1, 2), "abandoned attempt 1 is burned");
        let blob = store
            .write_blob(b, "op/0", Bytes::from_static(b"state"))
            .await
            .unwrap();
        store.commit(&manifest(b, vec![blob])).await.unwrap();
        assert_eq!(store.reserve().await.unwrap(), 3);
        let c = store.latest_valid().await.unwrap().unwrap();
        assert_eq!(c.manifest.id, 2);
        assert_eq!(c.blobs["op/0"].as_ref(), b"state");
        let info = store.list().await.unwrap();
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].state_bytes, 5);
    }

    #[tokio::test]
    async fn local_directory_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        round_trip(CheckpointStore::new(Box::new(
            LocalBackend::new(dir.path()).unwrap(),
        )))
        .await;
    }

    #[tokio::test]
    async fn object_store_in_memory_and_file_urls() {
        let mem = object_store::memory::InMemory::new();
        round_trip(CheckpointStore::new(Box::new(ObjectStoreBackend::new(
            Arc::new(mem),
            object_store::path::Path::from("pipelines/a"),
            "memory:///pipelines/a",
        ))))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        round_trip(CheckpointStore::new(Box::new(
            ObjectStoreBackend::from_url(&url).unwrap(),
        )))
        .await;
        assert!(ObjectStoreBackend::from_url("nope://x").is_err());
    }

    #[tokio::test]
    async fn corrupted_blob_falls_back_to_previous_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        for _ in 0..2 {
            let id = store.reserve().await.unwrap();
            let blob = store
                .write_blob(id, "op", Bytes::from(format!("state-{id}")))
                .await
                .unwrap();
            store.commit(&manifest(id, vec![blob])).await.unwrap();
        }
        let path = dir.path().join(format!("{CHECKPOINTS}/{:020}/op", 2));
        std::fs::write(&path, b"state-X").unwrap();
        let c = store.latest_valid().await.unwrap().unwrap();
        assert_eq!(c.manifest.id, 1);
        assert_eq!(c.blobs["op"].as_ref(), b"state-1");
        // A truncated manifest is skipped too.
        let m = dir.path().join(manifest_key(1));
        let raw = std::fs::read(&m).unwrap();
        std::fs::write(&m, &raw[..raw.len() / 2]).unwrap();
        assert!(store.latest_valid().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn only_the_two_newest_attempt_markers_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        for want in 1..=4 {
            assert_eq!(store.reserve().await.unwrap(), want);
        }
        let mut markers = store.backend.list(ATTEMPTS).await.unwrap();
        markers.sort();
        assert_eq!(
            markers,
            vec![
                format!("{ATTEMPTS}/{:020}", 3),
                format!("{ATTEMPTS}/{:020}", 4)
            ]
        );
    }

    #[tokio::test]
    async fn prune_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        for _ in 0..5 {
            let id = store.reserve().await.unwrap();
            let blob = store
                .write_blob(id, "op", Bytes::from_static(b"s"))
                .await
                .unwrap();
            store.commit(&manifest(id, vec![blob])).await.unwrap();
        }
        store.prune(2).await.unwrap();
        let ids: Vec<u64> = store.list().await.unwrap().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![4, 5]);
        assert_eq!(store.reserve().await.unwrap(), 6);
    }

    /// A large blob is checksummed and written in bounded steps, with a
    /// pace point after each, and reads back exactly.
    #[tokio::test]
    async fn a_large_blob_is_written_in_paced_steps() {
        use crate::backend::WRITE_SLICE;

        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
        let len = 2 * WRITE_SLICE + 12_345;
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let id = store.reserve().await.unwrap();
        let mut points = 0;
        let blob = store
            .write_blob_paced(id, "op/big", Bytes::from(bytes.clone()), &mut || {
                points += 1
            })
            .await
            .unwrap();
        assert_eq!(
            points,
            len.div_ceil(super::CRC_SLICE) + len.div_ceil(WRITE_SLICE)
        );
        assert_eq!(blob.len, len as u64);
        assert_eq!(blob.crc32, crc32fast::hash(&bytes));
        let written = std::fs::read(dir.path().join(&blob.key)).unwrap();
        assert!(written == bytes, "the blob reads back as written");
    }
}
