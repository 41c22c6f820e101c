//! A follower's answer to a Prepare: ack (its part is durable) or nack.
//!
//! The answer key `/sluice/C/checkpoints/answers/<id>/<N>` is attached to
//! the follower's lease and created only if absent, in one transaction
//! that also requires the Prepare to be the one the follower read, the
//! assignment to still be at the Prepare's generation, and the follower's
//! member key to be on its lease. A follower fenced out of the cluster
//! (lease lost) or onto a newer table (stale generation) cannot answer;
//! and an answer vanishes with its follower's lease, which the commit
//! transaction notices (`decide.rs`).

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::record::{encode, Answer, AnswerRecord, CheckpointPrepare, Stored, RECORD_FORMAT};
use super::txn::{first_kv, mod_revision_at};
use crate::error::{ClusterError, Result};
use crate::session::Session;

/// Answer `prepare` (as read by this follower) with `answer`.
pub async fn answer_checkpoint(
    session: &Session,
    prepare: &Stored<CheckpointPrepare>,
    answer: Answer,
) -> Result<()> {
    let keys = session.keys();
    let node = session.node();
    let id = prepare.value.id;
    let prepare_key = keys.checkpoint_record("prepare", id);
    let assignment_key = keys.assignment();
    let member_key = keys.node(node);
    let answer_key = keys.checkpoint_answer(id, node);
    let generation = i64::try_from(prepare.value.generation).unwrap_or(i64::MAX);
    let record = AnswerRecord {
        format: RECORD_FORMAT,
        id,
        node: node.to_string(),
        answer,
    };
    let txn = Txn::new()
        .when([
            Compare::mod_revision(prepare_key.clone(), CompareOp::Equal, prepare.mod_revision),
            Compare::mod_revision(assignment_key.clone(), CompareOp::Equal, generation),
            Compare::lease(member_key.clone(), CompareOp::Equal, session.lease_id()),
            Compare::create_revision(answer_key.clone(), CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put(
            answer_key.clone(),
            encode(&record),
            Some(PutOptions::new().with_lease(session.lease_id())),
        )])
        .or_else([
            TxnOp::get(prepare_key, None),
            TxnOp::get(assignment_key, None),
            TxnOp::get(member_key, None),
            TxnOp::get(answer_key, None),
        ]);
    let response =
        session.client().txn(txn).await.map_err(|e| {
            ClusterError::etcd(format!("answer of node '{node}' to attempt {id}"), e)
        })?;
    if response.succeeded() {
        tracing::debug!(node = %node, id, "answered checkpoint prepare");
        return Ok(());
    }
    let refused = |reason: String| ClusterError::AnswerRefused {
        id,
        node: node.to_string(),
        reason,
    };
    match first_kv(&response, 0) {
        None => {
            return Err(refused(
                "the Prepare does not exist (pruned or never published)".into(),
            ))
        }
        Some(kv) if kv.mod_revision() != prepare.mod_revision => {
            return Err(refused(
                "the Prepare changed since the follower read it".into(),
            ))
        }
        Some(_) => {}
    }
    let current = mod_revision_at(&response, 1);
    if current != prepare.value.generation {
        return Err(ClusterError::AssignmentFenceMoved {
            action: "answer",
            id,
            node: node.to_string(),
            expected: prepare.value.generation,
            current,
        });
    }
    if first_kv(&response, 2).is_none_or(|kv| kv.lease() != session.lease_id()) {
        return Err(ClusterError::LeaseLost {
            node: node.to_string(),
        });
    }
    Err(refused("the node already answered this attempt".into()))
}
