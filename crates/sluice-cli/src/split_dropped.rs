//! A node dropped from a shuffled split, started once more to publish
//! what its last checkpoint committed.
//!
//! A shuffled split's checkpoints are cuts its leader committed for every
//! node; a node dropped from the list runs without the shuffle (it holds
//! no vnodes, reads no row, and gives its keyed state up to the nodes that
//! took its vnodes), so the cut it recovers from is one of the leader's,
//! while the checkpoints it takes now are its own. [`DroppedCommits`]
//! answers for both.

use std::collections::BTreeSet;

use async_trait::async_trait;
use sluice::{BlobRef, CommitAuthority, StorageError};
use sluice_cluster::split_record::SplitCommitRecord;
use sluice_cluster::CommittedCuts;

/// The checkpoints of a node dropped from a shuffled split: the leader's
/// cuts (what it recovers from) and its own, recorded in its split record
/// while the list it was dropped by stands.
#[derive(Debug)]
pub(crate) struct DroppedCommits {
    pub(crate) cuts: CommittedCuts,
    pub(crate) own: SplitCommitRecord,
}

#[async_trait]
impl CommitAuthority for DroppedCommits {
    async fn record_commit(
        &self,
        id: u64,
        generation: Option<u64>,
        manifest: &BlobRef,
    ) -> Result<(), StorageError> {
        self.own.record_commit(id, generation, manifest).await
    }

    /// The leader's cuts and this node's own checkpoints, together.
    async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
        let cuts = self.cuts.committed().await?;
        let own = self.own.committed().await?;
        Ok(match (cuts, own) {
            (None, None) => None,
            (a, b) => Some(a.into_iter().chain(b).flatten().collect()),
        })
    }

    async fn forget_below(&self, id: u64) -> Result<(), StorageError> {
        self.own.forget_below(id).await
    }
}
