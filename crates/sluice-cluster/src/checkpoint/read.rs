//! Reading the protocol's records: the answers to an attempt, its
//! decision, and the last committed checkpoint (what recovery restores
//! from).

use std::collections::BTreeMap;

use etcd_client::{GetOptions, Txn, TxnOp};

use super::prepare::read_prepare;
use super::record::{decode_kv, AnswerRecord, CheckpointPrepare, DecisionRecord, Stored};
use super::txn::{first_kv, read_id, read_record};
use crate::error::{ClusterError, Result};
use crate::session::Session;

/// Every answer to attempt `id`, by node.
pub type Answers = BTreeMap<String, Stored<AnswerRecord>>;

/// The newest committed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedCheckpoint {
    /// The attempt id.
    pub id: u64,
    /// Its Prepare: the generation and owners it ran under.
    pub prepare: Stored<CheckpointPrepare>,
    /// Its commit decision, with every owning node's part.
    pub decision: Stored<DecisionRecord>,
}

/// Read every answer to attempt `id`.
pub async fn read_answers(session: &Session, id: u64) -> Result<Answers> {
    let prefix = session.keys().checkpoint_answers(id);
    let got = session
        .client()
        .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| ClusterError::etcd(format!("read of the answers to attempt {id}"), e))?;
    let mut answers = Answers::new();
    for kv in got.kvs() {
        let answer: Stored<AnswerRecord> = decode_kv(kv)?;
        answers.insert(answer.value.node.clone(), answer);
    }
    Ok(answers)
}

/// Read the decision on attempt `id`, if it was decided (and not pruned).
pub async fn read_decision(session: &Session, id: u64) -> Result<Option<Stored<DecisionRecord>>> {
    let key = session.keys().checkpoint_record("decisions", id);
    read_record(session, &key, &format!("the decision on attempt {id}")).await
}

/// The committed pointer as read: the newest committed id (0: none yet)
/// and the revision that wrote it (0: never written).
pub(crate) async fn read_committed_pointer(session: &Session) -> Result<(u64, i64)> {
    let key = session.keys().checkpoint_committed();
    read_id(session, &key, "the committed checkpoint pointer").await
}

/// The id of the newest committed checkpoint (`None` before the first).
pub async fn last_committed_id(session: &Session) -> Result<Option<u64>> {
    let (id, _) = read_committed_pointer(session).await?;
    Ok((id > 0).then_some(id))
}

/// The newest committed checkpoint with its Prepare and commit decision,
/// read in one etcd transaction so the three agree.
pub async fn last_committed(session: &Session) -> Result<Option<CommittedCheckpoint>> {
    let Some(id) = last_committed_id(session).await? else {
        return Ok(None);
    };
    let keys = session.keys();
    let txn = Txn::new().and_then([
        TxnOp::get(keys.checkpoint_record("prepare", id), None),
        TxnOp::get(keys.checkpoint_record("decisions", id), None),
    ]);
    let response = session
        .client()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd(format!("read of committed checkpoint {id}"), e))?;
    let prepare = first_kv(&response, 0)
        .as_ref()
        .map(decode_kv)
        .transpose()?
        .ok_or(ClusterError::CheckpointMissing {
            id,
            what: "prepare",
        })?;
    let decision = first_kv(&response, 1)
        .as_ref()
        .map(decode_kv)
        .transpose()?
        .ok_or(ClusterError::CheckpointMissing {
            id,
            what: "decision",
        })?;
    Ok(Some(CommittedCheckpoint {
        id,
        prepare,
        decision,
    }))
}

/// The Prepare of attempt `id`, or [`ClusterError::CheckpointMissing`].
pub async fn require_prepare(session: &Session, id: u64) -> Result<Stored<CheckpointPrepare>> {
    read_prepare(session, id)
        .await?
        .ok_or(ClusterError::CheckpointMissing {
            id,
            what: "prepare",
        })
}
