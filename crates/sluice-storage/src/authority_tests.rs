//! A store with a commit authority: a manifest counts only once the
//! authority recorded its id, a fenced commit leaves nothing behind, and
//! an unknown outcome keeps the manifest for the authority to decide.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::authority::CommitAuthority;
use crate::backend::LocalBackend;
use crate::error::{Result, StorageError};
use crate::store::tests::manifest;
use crate::store::CheckpointStore;

/// What the fake authority answers to the next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Record,
    Fence,
    /// Records, then reports a timeout (the outcome the caller cannot know).
    RecordButTimeOut,
    /// The cut's leader aborted the attempt (another node refused it).
    Abort,
}

/// `std`'s lock without poisoning (a test that failed is already failing).
trait Locked<T> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct Fake {
    answer: Mutex<Answer>,
    recorded: Mutex<Option<BTreeSet<u64>>>,
    forgotten_below: Mutex<Option<u64>>,
    /// Decides one cut for several nodes' stores (a shuffled split).
    one_cut: bool,
}

impl Fake {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            answer: Mutex::new(Answer::Record),
            recorded: Mutex::new(None),
            forgotten_below: Mutex::new(None),
            one_cut: false,
        })
    }

    fn record(&self, id: u64) {
        self.recorded
            .locked()
            .get_or_insert_with(BTreeSet::new)
            .insert(id);
    }
}

#[async_trait]
impl CommitAuthority for Fake {
    async fn record_commit(&self, id: u64, _: Option<u64>, _: &crate::BlobRef) -> Result<()> {
        let answer = *self.answer.locked();
        match answer {
            Answer::Record => {
                self.record(id);
                Ok(())
            }
            Answer::Fence => Err(StorageError::Fenced {
                id,
                source: "node n1 no longer leads at term 7".into(),
            }),
            Answer::RecordButTimeOut => {
                self.record(id);
                Err(StorageError::Authority {
                    what: format!("recording checkpoint {id}"),
                    source: "timed out".into(),
                })
            }
            Answer::Abort => Err(StorageError::Aborted {
                id,
                reason: "node 'n2' nacked".into(),
            }),
        }
    }

    fn one_cut_across_nodes(&self) -> bool {
        self.one_cut
    }

    async fn committed(&self) -> Result<Option<BTreeSet<u64>>> {
        Ok(self.recorded.locked().clone())
    }

    async fn forget_below(&self, id: u64) -> Result<()> {
        *self.forgotten_below.locked() = Some(id);
        if let Some(r) = self.recorded.locked().as_mut() {
            r.retain(|x| *x >= id);
        }
        Ok(())
    }
}

/// A store over `dir` with a fake authority that records every commit.
fn with_fake(dir: &std::path::Path) -> (CheckpointStore, Arc<Fake>) {
    let fake = Fake::new();
    let store = CheckpointStore::new(Box::new(LocalBackend::new(dir).unwrap()))
        .with_authority(fake.clone());
    (store, fake)
}

async fn checkpoint(store: &CheckpointStore) -> Result<u64> {
    let id = store.reserve().await?;
    let blob = store
        .write_blob(id, "op", Bytes::from(id.to_string()))
        .await?;
    store.commit(&manifest(id, vec![blob])).await.map(|()| id)
}

async fn ids(store: &CheckpointStore) -> Vec<u64> {
    store.list().await.unwrap().iter().map(|c| c.id).collect()
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = walk(dir)
        .into_iter()
        .filter_map(|p| {
            p.strip_prefix(dir)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .filter(|p| p.starts_with("checkpoints/"))
        .collect();
    out.sort();
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// Checkpoint 1 is recorded and attempt 2 has a manifest that is not:
/// readers see only 1, and the next checkpoint (3) removes attempt 2.
async fn attempt_2_is_skipped_then_removed(store: &CheckpointStore, dir: &std::path::Path) {
    assert_eq!(ids(store).await, vec![1]);
    assert_eq!(store.latest_valid().await.unwrap().unwrap().manifest.id, 1);
    assert_eq!(checkpoint(store).await.unwrap(), 3);
    assert_eq!(ids(store).await, vec![1, 3]);
    assert!(
        !files(dir)
            .iter()
            .any(|f| f.starts_with("checkpoints/00000000000000000002/")),
        "attempt 2 is removed: {:?}",
        files(dir)
    );
}

#[tokio::test]
async fn a_fenced_commit_is_nobodys_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fake) = with_fake(dir.path());
    assert_eq!(checkpoint(&store).await.unwrap(), 1);
    *fake.answer.locked() = Answer::Fence;
    let e = checkpoint(&store).await.unwrap_err();
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
    assert_eq!(
        e.to_string(),
        "checkpoint 2 is not committed: node n1 no longer leads at term 7"
    );
    assert!(
        std::error::Error::source(&e).is_some(),
        "the refusal is kept as the source"
    );
    // The store's writer removes the refused attempt at its next reservation.
    *fake.answer.locked() = Answer::Record;
    attempt_2_is_skipped_then_removed(&store, dir.path()).await;
}

/// A writer refused before anything was recorded leaves its manifest: a
/// writer that took over may already have resumed from it (a complete
/// checkpoint whose sink epochs nobody published), and it stays readable.
#[tokio::test]
async fn a_refused_first_checkpoint_stays_for_the_writer_that_took_over() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fake) = with_fake(dir.path());
    *fake.answer.locked() = Answer::Fence;
    assert_eq!(checkpoint(&store).await.unwrap_err().code(), "SLC-STO-008");
    let (taker, _) = with_fake(dir.path());
    assert_eq!(taker.latest_valid().await.unwrap().unwrap().manifest.id, 1);
    assert_eq!(checkpoint(&taker).await.unwrap(), 2);
    assert_eq!(ids(&taker).await, vec![2]);
}

/// A manifest the authority never recorded (a deposed writer's, written
/// after the store was taken over) is not a checkpoint: readers skip it
/// and the next reservation removes it.
#[tokio::test]
async fn a_manifest_the_authority_did_not_record_is_skipped_then_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _fake) = with_fake(dir.path());
    assert_eq!(checkpoint(&store).await.unwrap(), 1);
    // The deposed writer: the same files, no authority.
    let deposed = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
    assert_eq!(checkpoint(&deposed).await.unwrap(), 2);
    assert_eq!(
        ids(&deposed).await,
        vec![1, 2],
        "without the authority it counts"
    );
    attempt_2_is_skipped_then_removed(&store, dir.path()).await;
}

/// An authority that has never recorded anything takes the store as it is
/// (a pipeline that ran on one host before it joined a cluster).
#[tokio::test]
async fn an_authority_with_no_records_takes_the_store_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let before = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
    assert_eq!(checkpoint(&before).await.unwrap(), 1);
    let (store, _fake) = with_fake(dir.path());
    assert_eq!(store.latest_valid().await.unwrap().unwrap().manifest.id, 1);
    assert_eq!(checkpoint(&store).await.unwrap(), 2);
    assert_eq!(ids(&store).await, vec![2]);
}

/// Under an authority deciding one cut for several nodes, a manifest is
/// one node's part of an attempt: before the first commit, one whose
/// attempt was aborted is no checkpoint (a node resuming from it, while the
/// others resume from nothing, would count the rows they send again), and
/// neither is a store's manifest from before (its state is not the cut's).
#[tokio::test]
async fn under_one_cut_no_manifest_counts_before_the_first_commit() {
    let dir = tempfile::tempdir().unwrap();
    let before = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()));
    assert_eq!(checkpoint(&before).await.unwrap(), 1);
    let fake = Arc::new(Fake {
        one_cut: true,
        ..Arc::into_inner(Fake::new()).unwrap()
    });
    *fake.answer.locked() = Answer::Abort;
    let store = CheckpointStore::new(Box::new(LocalBackend::new(dir.path()).unwrap()))
        .with_authority(fake.clone());
    let e = checkpoint(&store).await.unwrap_err();
    assert_eq!(e.code(), "SLC-STO-011", "{e}");
    assert!(store.latest_valid().await.unwrap().is_none());
    assert_eq!(ids(&store).await, Vec::<u64>::new());
    *fake.answer.locked() = Answer::Record;
    let id = checkpoint(&store).await.unwrap();
    assert_eq!(ids(&store).await, vec![id], "the first commit counts");
}

/// A record whose outcome is unknown fails the checkpoint but keeps its
/// manifest: if the record was written, the checkpoint exists.
#[tokio::test]
async fn an_unknown_outcome_keeps_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fake) = with_fake(dir.path());
    *fake.answer.locked() = Answer::RecordButTimeOut;
    let e = checkpoint(&store).await.unwrap_err();
    assert_eq!(e.code(), "SLC-STO-009", "{e}");
    assert_eq!(ids(&store).await, vec![1], "recorded after all");
    assert_eq!(store.latest_valid().await.unwrap().unwrap().manifest.id, 1);
}

#[tokio::test]
async fn pruning_forgets_the_records_below_the_oldest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fake) = with_fake(dir.path());
    for _ in 0..5 {
        checkpoint(&store).await.unwrap();
    }
    store.prune(2).await.unwrap();
    assert_eq!(ids(&store).await, vec![4, 5]);
    assert_eq!(*fake.forgotten_below.locked(), Some(4));
    assert_eq!(
        fake.committed().await.unwrap(),
        Some(BTreeSet::from([4, 5]))
    );
}
