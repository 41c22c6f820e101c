//! Durable, never-reused checkpoint attempt ids (`reserve_checkpoint_attempt`).
//!
//! The counter `/sluice/C/checkpoints/counter` is permanent, so a new
//! leader continues after the old one's last id. A reservation is one
//! transaction: the leader's term still holds, and the counter is still at
//! the revision the leader read; then the counter becomes the new id and
//! `attempts/<id>` records who reserved it. Whatever happens to the
//! attempt later, the id is burned.

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};

use super::record::{encode, parse_id, AttemptRecord, CheckpointAttempt, RECORD_FORMAT};
use super::txn::{first_kv, read_id};
use crate::error::{ClusterError, Result};
use crate::keys::padded_id;
use crate::leader::{Election, Guarded};
use crate::session::Session;

/// How many times [`reserve_checkpoint_attempt`] re-reads a counter that
/// moved under it before giving up.
const RESERVE_TRIES: usize = 3;

/// The attempt counter as read: the last reserved id and the revision that
/// wrote it (0, 0 before the first reservation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptCounter {
    /// The last reserved id.
    pub last: u64,
    /// The counter key's mod revision.
    pub mod_revision: i64,
}

/// Read the attempt counter.
pub async fn read_attempt_counter(session: &Session) -> Result<AttemptCounter> {
    let key = session.keys().checkpoint_counter();
    let (last, mod_revision) = read_id(session, &key, "the checkpoint attempt counter").await?;
    Ok(AttemptCounter { last, mod_revision })
}

/// Reserve the next attempt id as leader of `term`: read the counter and
/// reserve after it, re-reading if a concurrent reservation of the same
/// term moved it. Refused with [`ClusterError::NotLeader`] once the term
/// is lost.
pub async fn reserve_checkpoint_attempt(
    election: &Election,
    term: u64,
) -> Result<CheckpointAttempt> {
    let mut last_error = None;
    for _ in 0..RESERVE_TRIES {
        let counter = read_attempt_counter(election.session()).await?;
        match reserve_after(election, term, counter).await {
            Err(e @ ClusterError::AttemptCounterMoved { .. }) => last_error = Some(e),
            other => return other,
        }
    }
    Err(last_error.unwrap_or_else(|| ClusterError::NotLeader {
        node: election.session().node().to_string(),
        term,
    }))
}

/// Reserve `counter.last + 1`, only if the counter is still at `counter`
/// and this node still leads `term`.
pub async fn reserve_after(
    election: &Election,
    term: u64,
    counter: AttemptCounter,
) -> Result<CheckpointAttempt> {
    let id = counter
        .last
        .checked_add(1)
        .ok_or_else(|| ClusterError::CheckpointRefused {
            action: "reservation",
            id: counter.last,
            node: election.session().node().to_string(),
            reason: "attempt ids are exhausted".to_string(),
        })?;
    reserve_at(election, term, counter, id).await
}

/// Reserve `id`, an id the caller already holds durably (a checkpoint
/// store's, which it never hands out twice), as leader of `term`. It must
/// be above every id reserved so far: the counter moves up to it, so etcd
/// and the store name each attempt by the same id. Re-reads a counter that
/// moved under it, as [`reserve_checkpoint_attempt`] does.
pub async fn reserve_given(election: &Election, term: u64, id: u64) -> Result<CheckpointAttempt> {
    let mut last_error = None;
    for _ in 0..RESERVE_TRIES {
        let counter = read_attempt_counter(election.session()).await?;
        if counter.last >= id {
            return Err(ClusterError::CheckpointRefused {
                action: "reservation",
                id,
                node: election.session().node().to_string(),
                reason: format!(
                    "attempt {} is already reserved in etcd: the checkpoint store's ids \
                     must grow past it (was the store replaced under this cluster?)",
                    counter.last
                ),
            });
        }
        match reserve_at(election, term, counter, id).await {
            Err(e @ ClusterError::AttemptCounterMoved { .. }) => last_error = Some(e),
            other => return other,
        }
    }
    Err(last_error.unwrap_or_else(|| ClusterError::NotLeader {
        node: election.session().node().to_string(),
        term,
    }))
}

/// Reserve `id` (above `counter.last`), only if the counter is still at
/// `counter` and this node still leads `term`.
async fn reserve_at(
    election: &Election,
    term: u64,
    counter: AttemptCounter,
    id: u64,
) -> Result<CheckpointAttempt> {
    let session = election.session();
    let node = session.node().to_string();
    let counter_key = session.keys().checkpoint_counter();
    let attempt_key = session.keys().checkpoint_record("attempts", id);
    let record = AttemptRecord {
        format: RECORD_FORMAT,
        id,
        term,
        node: node.clone(),
    };
    let outcome = election
        .guarded_txn(
            term,
            vec![Compare::mod_revision(
                counter_key.clone(),
                CompareOp::Equal,
                counter.mod_revision,
            )],
            vec![
                TxnOp::put(counter_key.clone(), padded_id(id), None::<PutOptions>),
                TxnOp::put(attempt_key, encode(&record), None::<PutOptions>),
            ],
            vec![TxnOp::get(counter_key.clone(), None)],
        )
        .await?;
    match outcome {
        Guarded::Committed { .. } => {
            tracing::debug!(node = %node, term, id, "reserved checkpoint attempt");
            Ok(CheckpointAttempt { id, term })
        }
        Guarded::CompareFailed { response } => {
            let current = match first_kv(&response, 1) {
                Some(kv) => parse_id(&counter_key, kv.value())?,
                None => 0,
            };
            Err(ClusterError::AttemptCounterMoved {
                node,
                expected: counter.last,
                current,
            })
        }
    }
}
