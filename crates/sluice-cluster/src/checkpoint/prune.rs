//! Pruning: the records of attempts older than the newest committed id
//! minus K are deleted, in one leader transaction guarded by the term and
//! by the committed pointer being where the leader read it (so the floor
//! is never computed from a stale pointer). Ids are zero-padded in keys, so
//! "every id below the floor" is one key range per record kind.

use etcd_client::{Compare, CompareOp, DeleteOptions, TxnOp};

use super::read::read_committed_pointer;
use crate::error::{ClusterError, Result};
use crate::keys::padded_id;
use crate::leader::{Election, Guarded};

/// Delete the attempts, Prepares, answers and decisions of every id below
/// `committed - keep`, as leader of `term`. Returns that floor (0: nothing
/// to prune). The committed checkpoint itself is never pruned.
pub async fn prune_checkpoints(election: &Election, term: u64, keep: u64) -> Result<u64> {
    let session = election.session();
    let keys = session.keys();
    let (committed, committed_rev) = read_committed_pointer(session).await?;
    let floor = committed.saturating_sub(keep);
    if floor <= 1 {
        return Ok(0);
    }
    let deletes = ["attempts", "prepare", "answers", "decisions"]
        .into_iter()
        .map(|kind| {
            let dir = keys.checkpoint_dir(kind);
            let end = format!("{dir}{}", padded_id(floor));
            TxnOp::delete(dir, Some(DeleteOptions::new().with_range(end)))
        })
        .collect();
    let outcome = election
        .guarded_txn(
            term,
            vec![Compare::mod_revision(
                keys.checkpoint_committed(),
                CompareOp::Equal,
                committed_rev,
            )],
            deletes,
            Vec::new(),
        )
        .await?;
    match outcome {
        Guarded::Committed { .. } => {
            tracing::debug!(node = %session.node(), floor, "pruned checkpoint records");
            Ok(floor)
        }
        Guarded::CompareFailed { .. } => Err(ClusterError::CheckpointRefused {
            action: "prune",
            id: floor,
            node: session.node().to_string(),
            reason: "the committed pointer moved since it was read".to_string(),
        }),
    }
}
