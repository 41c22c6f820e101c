//! The leader's decision on an attempt: commit or abort, written once at
//! `/sluice/C/checkpoints/decisions/<id>`.
//!
//! A commit is one transaction that holds only if this node still leads
//! its term, the decision key is absent, the assignment and the Prepare
//! are unchanged, the committed pointer is where the leader read it, and
//! every owning node's ack is the very answer the leader read (same create
//! revision: an answer withdrawn by an expired lease, or replaced, fails
//! it). It writes the decision with every ack's part and moves the
//! committed pointer forward to the id.
//!
//! An abort only needs the term and an absent decision key: aborting is
//! always safe (nothing becomes durable), and recording it after the
//! assignment changed is what lets waiting followers stop at once rather
//! than at their deadline. Deciding twice returns the first decision.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp, TxnResponse};

use super::read::{read_answers, read_committed_pointer, read_decision, require_prepare, Answers};
use super::record::{
    decode_kv, encode, Answer, CheckpointPrepare, Decision, DecisionRecord, Stored, RECORD_FORMAT,
};
use super::txn::{first_kv, mod_revision_at};
use crate::error::{ClusterError, Result};
use crate::keys::padded_id;
use crate::leader::{Election, Guarded};

/// What the answers read so far call for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every owning node acked.
    Commit,
    /// A node nacked, or the deadline passed without every ack.
    Abort(String),
    /// Still waiting for these owning nodes, before the deadline.
    Pending {
        /// The owning nodes without an answer.
        missing: Vec<String>,
    },
}

/// Judge `answers` to `prepare` at wall-clock `now_ms`: any nack aborts;
/// all owners' acks commit; otherwise abort once the deadline passed.
pub fn verdict(prepare: &CheckpointPrepare, answers: &Answers, now_ms: u64) -> Verdict {
    for (node, answer) in answers {
        if let Answer::Nack { reason } = &answer.value.answer {
            return Verdict::Abort(format!("node '{node}' nacked: {reason}"));
        }
    }
    let missing: Vec<String> = prepare
        .owning_nodes()
        .into_iter()
        .filter(|n| !answers.contains_key(n))
        .collect();
    if missing.is_empty() {
        Verdict::Commit
    } else if now_ms >= prepare.deadline_ms {
        Verdict::Abort(format!(
            "the deadline passed without an ack from {}",
            missing.join(", ")
        ))
    } else {
        Verdict::Pending { missing }
    }
}

/// A decision as written (or as found, when another decide came first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The decision in etcd.
    pub record: DecisionRecord,
    /// Whether this call wrote it (false: it was already decided).
    pub first: bool,
}

/// Read attempt `id`'s Prepare and answers and decide if they call for a
/// decision at `now_ms`; `None` while the verdict is pending. If the
/// attempt is already decided, that decision (`first: false`).
pub async fn decide(
    election: &Election,
    term: u64,
    id: u64,
    now_ms: u64,
) -> Result<Option<Decided>> {
    let session = election.session();
    // Deciding again returns the first decision. (Only a shortcut: the
    // write transactions below refuse a second decision by themselves.)
    if let Some(existing) = read_decision(session, id).await? {
        return Ok(Some(Decided {
            record: existing.value,
            first: false,
        }));
    }
    let prepare = require_prepare(session, id).await?;
    let answers = read_answers(session, id).await?;
    match verdict(&prepare.value, &answers, now_ms) {
        Verdict::Commit => commit_attempt(election, term, &prepare, &answers)
            .await
            .map(Some),
        Verdict::Abort(reason) => {
            abort_attempt(election, term, id, prepare.value.generation, &reason)
                .await
                .map(Some)
        }
        Verdict::Pending { .. } => Ok(None),
    }
}

/// Commit the attempt of `prepare` with the acks in `answers`: see the
/// module docs for what the transaction requires.
pub async fn commit_attempt(
    election: &Election,
    term: u64,
    prepare: &Stored<CheckpointPrepare>,
    answers: &Answers,
) -> Result<Decided> {
    let session = election.session();
    let keys = session.keys();
    let id = prepare.value.id;
    let refuse = |reason: String| ClusterError::CheckpointRefused {
        action: "commit",
        id,
        node: session.node().to_string(),
        reason,
    };
    let mut parts = BTreeMap::new();
    let mut compares = Vec::new();
    let mut answer_reads = Vec::new();
    for node in prepare.value.owning_nodes() {
        let part = match answers
            .get(&node)
            .map(|a| (&a.value.answer, a.create_revision))
        {
            Some((Answer::Ack { part }, created)) => {
                let key = format!("{}{node}", keys.checkpoint_answers(id));
                compares.push(Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    created,
                ));
                answer_reads.push(TxnOp::get(key, None));
                part.clone()
            }
            Some((Answer::Nack { reason }, _)) => {
                return Err(refuse(format!("node '{node}' nacked: {reason}")))
            }
            None => {
                return Err(refuse(format!(
                    "no ack from node '{node}', which owns vnodes"
                )))
            }
        };
        parts.insert(node, part);
    }
    let (committed, committed_rev) = read_committed_pointer(session).await?;
    if committed >= id {
        return Err(refuse(format!(
            "the committed pointer is already at attempt {committed}"
        )));
    }
    let generation = i64::try_from(prepare.value.generation).unwrap_or(i64::MAX);
    let decision_key = keys.checkpoint_record("decisions", id);
    let prepare_key = keys.checkpoint_record("prepare", id);
    let committed_key = keys.checkpoint_committed();
    compares.extend([
        Compare::create_revision(decision_key.clone(), CompareOp::Equal, 0),
        Compare::mod_revision(keys.assignment(), CompareOp::Equal, generation),
        Compare::mod_revision(prepare_key.clone(), CompareOp::Equal, prepare.mod_revision),
        Compare::mod_revision(committed_key.clone(), CompareOp::Equal, committed_rev),
    ]);
    let record = DecisionRecord {
        format: RECORD_FORMAT,
        id,
        term,
        generation: prepare.value.generation,
        decision: Decision::Commit { parts },
    };
    let mut reads = vec![
        TxnOp::get(decision_key.clone(), None),
        TxnOp::get(keys.assignment(), None),
        TxnOp::get(committed_key.clone(), None),
        TxnOp::get(prepare_key, None),
    ];
    reads.extend(answer_reads);
    let outcome = election
        .guarded_txn(
            term,
            compares,
            vec![
                TxnOp::put(decision_key, encode(&record), None::<PutOptions>),
                TxnOp::put(committed_key, padded_id(id), None::<PutOptions>),
            ],
            reads,
        )
        .await?;
    let response = match outcome {
        Guarded::Committed { .. } => {
            tracing::info!(node = %session.node(), id, term, "committed checkpoint");
            return Ok(Decided {
                record,
                first: true,
            });
        }
        Guarded::CompareFailed { response } => response,
    };
    if let Some(existing) = existing_decision(&response)? {
        return Ok(existing);
    }
    let current = mod_revision_at(&response, 2);
    if current != prepare.value.generation {
        return Err(ClusterError::AssignmentFenceMoved {
            action: "commit",
            id,
            node: session.node().to_string(),
            expected: prepare.value.generation,
            current,
        });
    }
    if first_kv(&response, 3).map_or(0, |kv| kv.mod_revision()) != committed_rev {
        return Err(refuse(
            "the committed pointer moved since it was read".into(),
        ));
    }
    if first_kv(&response, 4).map(|kv| kv.mod_revision()) != Some(prepare.mod_revision) {
        return Err(refuse("the Prepare changed since it was read".into()));
    }
    Err(refuse(
        "an ack was withdrawn (its follower's lease ended) or replaced since it was read".into(),
    ))
}

/// Abort attempt `id` (whose Prepare, if any, is at `generation`; 0 if it
/// never got one) as leader of `term`.
pub async fn abort_attempt(
    election: &Election,
    term: u64,
    id: u64,
    generation: u64,
    reason: &str,
) -> Result<Decided> {
    let key = election.session().keys().checkpoint_record("decisions", id);
    let record = DecisionRecord {
        format: RECORD_FORMAT,
        id,
        term,
        generation,
        decision: Decision::Abort {
            reason: reason.to_string(),
        },
    };
    let outcome = election
        .guarded_txn(
            term,
            vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)],
            vec![TxnOp::put(key.clone(), encode(&record), None::<PutOptions>)],
            vec![TxnOp::get(key, None)],
        )
        .await?;
    match outcome {
        Guarded::Committed { .. } => {
            tracing::info!(node = %election.session().node(), id, term, reason, "aborted checkpoint");
            Ok(Decided {
                record,
                first: true,
            })
        }
        Guarded::CompareFailed { response } => {
            existing_decision(&response)?.ok_or(ClusterError::CheckpointMissing {
                id,
                what: "decision",
            })
        }
    }
}

/// The decision already in etcd, read as op 1 of a failed transaction.
fn existing_decision(response: &TxnResponse) -> Result<Option<Decided>> {
    first_kv(response, 1)
        .map(|kv| {
            decode_kv::<DecisionRecord>(&kv).map(|d: Stored<DecisionRecord>| Decided {
                record: d.value,
                first: false,
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::record::{AnswerRecord, CheckpointAttempt, PartRef};
    use crate::checkpoint::testing::prepare_over;

    fn answer(node: &str, answer: Answer) -> (String, Stored<AnswerRecord>) {
        let record = AnswerRecord {
            format: RECORD_FORMAT,
            id: 1,
            node: node.to_string(),
            answer,
        };
        let stored = Stored {
            value: record,
            create_revision: 5,
            mod_revision: 5,
        };
        (node.to_string(), stored)
    }

    fn ack(node: &str) -> (String, Stored<AnswerRecord>) {
        let part = PartRef {
            object_key: format!("k/{node}"),
            size: "1".into(),
            crc: "c".into(),
        };
        answer(node, Answer::Ack { part })
    }

    #[test]
    fn verdict_needs_every_owner_and_aborts_on_nack_or_deadline() {
        let attempt = CheckpointAttempt { id: 1, term: 3 };
        let prepare = prepare_over(attempt, &["a", "b", "c"], 1000);
        assert_eq!(prepare.owning_nodes().len(), 3);
        let mut answers: Answers = [ack("a"), ack("b")].into_iter().collect();
        assert_eq!(
            verdict(&prepare, &answers, 999),
            Verdict::Pending {
                missing: vec!["c".to_string()]
            }
        );
        assert_eq!(
            verdict(&prepare, &answers, 1000),
            Verdict::Abort("the deadline passed without an ack from c".to_string())
        );
        // An ack from a node that owns nothing does not stand in for c.
        answers.extend([ack("stranger")]);
        assert!(matches!(
            verdict(&prepare, &answers, 0),
            Verdict::Pending { .. }
        ));
        answers.extend([ack("c")]);
        assert_eq!(verdict(&prepare, &answers, u64::MAX), Verdict::Commit);
        let nack = Answer::Nack {
            reason: "full".into(),
        };
        answers.extend([answer("b", nack)]);
        assert_eq!(
            verdict(&prepare, &answers, 0),
            Verdict::Abort("node 'b' nacked: full".to_string())
        );
    }
}
