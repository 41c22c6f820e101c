//! The certified barrier Prepare (`publish_checkpoint_prepare`) and the
//! exact assignment it is admitted under
//! (`checkpoint_assignment_for_admission`).
//!
//! The Prepare is written once per attempt, in one transaction that holds
//! only if this node still leads the attempt's term, the attempt was
//! reserved in that term (its key was created after the term began), the
//! assignment key is still at the captured generation, and no Prepare for
//! the id exists yet. A Prepare for an old generation therefore cannot be
//! published: the table it names is not the one followers now run.

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};

use super::record::{
    encode, CheckpointAssignmentFence, CheckpointAttempt, CheckpointPrepare, Stored,
};
use super::txn::{first_kv, mod_revision_at, read_record};
use crate::assignment::Assignment;
use crate::error::{ClusterError, Result};
use crate::leader::{Election, Guarded};
use crate::session::Session;

/// Capture the exact assignment for a new attempt: a linearizable read of
/// the table from etcd (a watch mirror may lag behind it).
pub async fn checkpoint_assignment_for_admission(
    session: &Session,
) -> Result<CheckpointAssignmentFence> {
    let key = session.keys().assignment();
    let got =
        session.client().get(key.clone(), None).await.map_err(|e| {
            ClusterError::etcd("read of the assignment for checkpoint admission", e)
        })?;
    let kv = got.kvs().first().ok_or_else(|| ClusterError::NoMembers {
        cluster: session.keys().cluster().to_string(),
    })?;
    let generation = u64::try_from(kv.mod_revision()).unwrap_or(0);
    Ok(CheckpointAssignmentFence {
        assignment: Assignment::decode(&key, kv.value(), generation)?,
    })
}

/// Publish the Prepare of `attempt` under `fence`, with answers due by
/// `deadline_ms` (Unix milliseconds). Refused with
/// [`ClusterError::NotLeader`] once the attempt's term is lost, with
/// [`ClusterError::AssignmentFenceMoved`] if the table changed since the
/// fence was captured, and with [`ClusterError::CheckpointRefused`] if the
/// attempt was not reserved in this term or already has a Prepare.
pub async fn publish_checkpoint_prepare(
    election: &Election,
    attempt: CheckpointAttempt,
    fence: &CheckpointAssignmentFence,
    deadline_ms: u64,
) -> Result<Stored<CheckpointPrepare>> {
    let session = election.session();
    let keys = session.keys();
    let node = session.node().to_string();
    let prepare = CheckpointPrepare::new(attempt, fence, deadline_ms);
    let assignment_key = keys.assignment();
    let attempt_key = keys.checkpoint_record("attempts", attempt.id);
    let prepare_key = keys.checkpoint_record("prepare", attempt.id);
    let generation = i64::try_from(fence.generation()).unwrap_or(i64::MAX);
    let term = i64::try_from(attempt.term).unwrap_or(i64::MAX);
    let outcome = election
        .guarded_txn(
            attempt.term,
            vec![
                Compare::mod_revision(assignment_key.clone(), CompareOp::Equal, generation),
                Compare::create_revision(attempt_key.clone(), CompareOp::Greater, term),
                Compare::create_revision(prepare_key.clone(), CompareOp::Equal, 0),
            ],
            vec![TxnOp::put(
                prepare_key.clone(),
                encode(&prepare),
                None::<PutOptions>,
            )],
            vec![
                TxnOp::get(assignment_key, None),
                TxnOp::get(attempt_key, None),
                TxnOp::get(prepare_key, None),
            ],
        )
        .await?;
    let response = match outcome {
        Guarded::Committed { revision } => {
            tracing::info!(
                node = %node,
                id = attempt.id,
                term = attempt.term,
                generation = prepare.generation,
                "published checkpoint prepare"
            );
            let revision = i64::try_from(revision).unwrap_or(0);
            return Ok(Stored {
                value: prepare,
                create_revision: revision,
                mod_revision: revision,
            });
        }
        Guarded::CompareFailed { response } => response,
    };
    let current = mod_revision_at(&response, 1);
    if current != fence.generation() {
        return Err(ClusterError::AssignmentFenceMoved {
            action: "prepare",
            id: attempt.id,
            node,
            expected: fence.generation(),
            current,
        });
    }
    let reason = if first_kv(&response, 3).is_some() {
        "a Prepare for this attempt already exists".to_string()
    } else {
        format!(
            "the attempt was not reserved in term {} (reserve it first)",
            attempt.term
        )
    };
    Err(ClusterError::CheckpointRefused {
        action: "prepare",
        id: attempt.id,
        node,
        reason,
    })
}

/// Read the Prepare of attempt `id`, if it was published (and not pruned).
pub async fn read_prepare(session: &Session, id: u64) -> Result<Option<Stored<CheckpointPrepare>>> {
    let key = session.keys().checkpoint_record("prepare", id);
    read_record(session, &key, &format!("the Prepare of attempt {id}")).await
}
