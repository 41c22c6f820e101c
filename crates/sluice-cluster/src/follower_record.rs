//! A follower's checkpoint protocol: the [`CommitAuthority`] of the store
//! of a node that owns vnodes but does not lead. It never originates an
//! attempt; it hears the leader's Prepares, and its store's manifest
//! commit is its acknowledgement.
//!
//! ```text
//!  leader                     etcd                        follower (this record)
//!   prepare(ID, G) ──────────► prepare/ID ──watch──► announcements() wakes the pipeline
//!                                                    next_announcement: Prepared{ID, G}
//!                                                      (owns no vnode in it: skipped;
//!                                                       decided abort already: Aborted)
//!                                                    barriers, capture, blobs, manifest
//!                                                    record_commit(ID, G, manifest)
//!                              answers/ID/N ◄──────── ack [prepare, G, N's lease]
//!   wait for every owner ◄──── answers/ID/*
//!   decide ───────────────────► decisions/ID ──watch──► Commit: Ok (sinks commit)
//!                                                       Abort: StorageError::Aborted
//!                                                    decline(ID, why): nack, before capture
//! ```
//!
//! The record hands out each Prepare once, in id order, and only those it
//! owns vnodes in, that were still due when it started, and whose leader
//! still holds its term: a Prepare a killed leader left undecided is
//! passed over (its successor aborts it), so a follower that joins
//! before the successor leads never aligns on the dead leader's attempt
//! while the others align on the successor's. A decision it
//! does not see by the Prepare's deadline plus [`DECISION_GRACE`] leaves
//! the outcome unknown (`StorageError::Authority`): the pipeline counts a
//! failed checkpoint, and the next leader's take-over aborts the attempt.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use sluice_storage::{Announcement, BlobRef, CommitAuthority, StorageError};
use tokio::sync::{watch, Notify};

use crate::checkpoint::read::read_decision;
use crate::checkpoint::record::{
    decode, Answer, CheckpointPrepare, Decision, DecisionRecord, Stored,
};
use crate::checkpoint::txn::{instant_of, now_ms};
use crate::checkpoint::wait::term_ended;
use crate::checkpoint::{answer_checkpoint, wait_for_decision};
use crate::checkpoint_requests::CheckpointRequests;
use crate::commit_record::{authority_error, committed_ids, part_of};
use crate::error::ClusterError;
use crate::session::Session;
use crate::watch::{self as key_watch, Snapshot};

/// How long past a Prepare's deadline a follower waits for the leader's
/// decision before it reports the outcome unknown.
pub const DECISION_GRACE: Duration = Duration::from_secs(5);

/// The checkpoint record of one follower node; see the module docs.
pub struct FollowerCommitRecord {
    session: Arc<Session>,
    prepares: watch::Receiver<Snapshot>,
    decisions: watch::Receiver<Snapshot>,
    wake: Arc<Notify>,
    /// Forwards changes of the Prepares and decisions to `wake`.
    forwarder: tokio::task::JoinHandle<()>,
    /// The highest attempt id handed out (or passed over).
    handled: Mutex<u64>,
    /// Prepares handed out and not yet answered, by id.
    pending: Mutex<BTreeMap<u64, Stored<CheckpointPrepare>>>,
    /// Wall-clock start (Unix ms): Prepares due before it are not this
    /// record's to answer.
    started_ms: u64,
    /// This node's request for the leader's checkpoints.
    requests: CheckpointRequests,
}

impl std::fmt::Debug for FollowerCommitRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowerCommitRecord")
            .field("cluster", &self.session.keys().cluster())
            .field("node", &self.session.node().as_str())
            .field("handled", &*self.handled.lock())
            .finish()
    }
}

impl Drop for FollowerCommitRecord {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

impl FollowerCommitRecord {
    /// The record of `session`'s node. Must be called inside a tokio
    /// runtime: it starts the watches of the Prepares and decisions.
    pub fn new(session: Arc<Session>) -> Self {
        let keys = session.keys();
        let prepares = key_watch::spawn(session.client(), keys.checkpoint_dir("prepare"), true);
        let decisions = key_watch::spawn(session.client(), keys.checkpoint_dir("decisions"), true);
        let wake = Arc::new(Notify::new());
        let forwarder = tokio::spawn(forward(
            prepares.clone(),
            decisions.clone(),
            Arc::clone(&wake),
        ));
        let requests = CheckpointRequests::start(Arc::clone(&session));
        Self {
            session,
            prepares,
            decisions,
            wake,
            forwarder,
            handled: Mutex::new(0),
            pending: Mutex::new(BTreeMap::new()),
            started_ms: now_ms(),
            requests,
        }
    }

    /// A refusal that proves this follower may not answer (it is out of
    /// the cluster: its lease or member key is gone, or the Prepare
    /// changed) is `Fenced`; a table that moved since the Prepare is an
    /// abort (the leader cannot commit the attempt, and this node is still
    /// a member: it takes part in the next one); anything else is unknown.
    fn refusal(&self, id: u64, what: String, e: ClusterError) -> StorageError {
        match e {
            ClusterError::AnswerRefused { .. } | ClusterError::LeaseLost { .. } => {
                StorageError::Fenced {
                    id,
                    source: Box::new(e),
                }
            }
            ClusterError::AssignmentFenceMoved { .. } => StorageError::Aborted {
                id,
                reason: e.to_string(),
            },
            e if !self.session.lease_valid() => StorageError::Fenced {
                id,
                source: Box::new(e),
            },
            e => authority_error(what, e),
        }
    }

    /// The Prepares above the last handled id, ascending. One that cannot
    /// be read (a newer record format, a damaged value) is passed over
    /// with a warning: no answer from this node then aborts it at the
    /// leader's deadline, and the next one is handed out.
    fn unhandled(&self) -> Vec<Stored<CheckpointPrepare>> {
        let mut handled = self.handled.lock();
        let snapshot = self.prepares.borrow();
        let mut out = Vec::new();
        for (key, entry) in &snapshot.entries {
            match decode::<CheckpointPrepare>(key, &entry.value) {
                Ok(value) if value.id > *handled => out.push(Stored {
                    value,
                    create_revision: entry.create_revision,
                    mod_revision: entry.mod_revision,
                }),
                Ok(_) => {}
                Err(e) => {
                    let id = key.rsplit('/').next().and_then(|id| id.parse::<u64>().ok());
                    if let Some(id) = id.filter(|id| *id > *handled) {
                        tracing::warn!(node = %self.session.node(), id, error = %e, "unreadable checkpoint Prepare passed over");
                        *handled = id;
                    }
                }
            }
        }
        out.sort_by_key(|p| p.value.id);
        out
    }

    /// The decision on attempt `id`, from the decisions watch when it has
    /// listed them (else from etcd).
    async fn decision_on(&self, id: u64) -> Result<Option<Decision>, StorageError> {
        let key = self.session.keys().checkpoint_record("decisions", id);
        let watched = {
            let snapshot = self.decisions.borrow();
            (snapshot.revision > 0).then(|| snapshot.entries.get(&key).map(|e| e.value.clone()))
        };
        let what = || format!("reading the decision on {id}");
        match watched {
            Some(None) => Ok(None),
            Some(Some(value)) => decode::<DecisionRecord>(&key, &value)
                .map(|d| Some(d.decision))
                .map_err(|e| authority_error(what(), e)),
            None => read_decision(&self.session, id)
                .await
                .map(|d| d.map(|d| d.value.decision))
                .map_err(|e| authority_error(what(), e)),
        }
    }

    /// Whether the leader of `term` still holds its key, read from etcd
    /// now: a Prepare is seen only after its leader's key was created, so
    /// the read sees that key unless the term ended.
    async fn term_is_current(&self, term: u64) -> Result<bool, StorageError> {
        let key = self.session.keys().leader();
        let got = self.session.client().get(key, None).await.map_err(|e| {
            authority_error(
                "reading the leader's term".into(),
                ClusterError::etcd("read of the leader", e),
            )
        })?;
        Ok(got
            .kvs()
            .first()
            .is_some_and(|kv| u64::try_from(kv.create_revision()).ok() == Some(term)))
    }

    fn prepare_of(&self, id: u64) -> Result<Stored<CheckpointPrepare>, StorageError> {
        self.pending
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| StorageError::Fenced {
                id,
                source: Box::new(ClusterError::CheckpointRefused {
                    action: "answer",
                    id,
                    node: self.session.node().to_string(),
                    reason: "this follower was not handed its Prepare".into(),
                }),
            })
    }
}

/// Wake `wake` whenever either mirror changes, until both end.
async fn forward(
    mut prepares: watch::Receiver<Snapshot>,
    mut decisions: watch::Receiver<Snapshot>,
    wake: Arc<Notify>,
) {
    loop {
        let changed = tokio::select! {
            c = prepares.changed() => c,
            c = decisions.changed() => c,
        };
        if changed.is_err() {
            return;
        }
        wake.notify_one();
    }
}

#[async_trait]
impl CommitAuthority for FollowerCommitRecord {
    /// The leader's checkpoints: one decision for every owner.
    fn one_cut_across_nodes(&self) -> bool {
        true
    }

    fn may_originate(&self) -> bool {
        false
    }

    fn request_checkpoints(&self, holding: bool) {
        self.requests.set(holding);
    }

    fn may_fold_input(&self) -> bool {
        self.session.lease_valid()
    }

    fn announcements(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.wake))
    }

    async fn next_announcement(&self) -> Result<Option<Announcement>, StorageError> {
        let me = self.session.node().to_string();
        let now = now_ms();
        for prepare in self.unhandled() {
            let id = prepare.value.id;
            let due = prepare.value.deadline_ms;
            // Not this node's, due before it started, or already past its
            // deadline (after a pause): nothing to take part in.
            if !prepare.value.owning_nodes().contains(&me) || due < self.started_ms || due <= now {
                tracing::debug!(node = %me, id, "checkpoint Prepare passed over");
                *self.handled.lock() = id;
                continue;
            }
            // Its leader is gone: the successor aborts it, and a barrier
            // for it would meet the successor's in the channels.
            if !self.term_is_current(prepare.value.term).await? {
                tracing::info!(node = %me, id, term = prepare.value.term, "checkpoint Prepare of an ended leader term passed over");
                *self.handled.lock() = id;
                continue;
            }
            // Marked handled only once its decision was read: a failed
            // read hands the same Prepare out again next time.
            let decision = self.decision_on(id).await?;
            *self.handled.lock() = id;
            match decision {
                // Committed without this owner: not possible while it owns
                // vnodes in it; nothing to do either way.
                Some(Decision::Commit { .. }) => continue,
                Some(Decision::Abort { reason }) => {
                    return Ok(Some(Announcement::Aborted { id, reason }))
                }
                None => {}
            }
            let generation = prepare.value.generation;
            let mut pending = self.pending.lock();
            // Prepares handed out long ago and never answered (their
            // pipeline gave up without a word) are long decided.
            let grace = u64::try_from(DECISION_GRACE.as_millis()).unwrap_or(u64::MAX);
            pending.retain(|_, p| p.value.deadline_ms.saturating_add(grace) > now);
            pending.insert(id, prepare);
            return Ok(Some(Announcement::Prepared {
                id,
                generation,
                deadline_ms: due,
            }));
        }
        Ok(None)
    }

    async fn decline(&self, id: u64, reason: &str) -> Result<(), StorageError> {
        let prepare = self.prepare_of(id)?;
        self.pending.lock().remove(&id);
        let answer = Answer::Nack {
            reason: reason.to_string(),
        };
        answer_checkpoint(&self.session, &prepare, answer)
            .await
            .map_err(|e| self.refusal(id, format!("declining checkpoint {id}"), e))
    }

    async fn record_commit(
        &self,
        id: u64,
        generation: Option<u64>,
        manifest: &BlobRef,
    ) -> Result<(), StorageError> {
        let what = || format!("acknowledging checkpoint {id}");
        let prepare = self.prepare_of(id)?;
        self.pending.lock().remove(&id);
        // Out of the cluster: its part must not count, whatever etcd
        // would still accept before the lease expires there.
        if !self.session.lease_valid() {
            let e = ClusterError::LeaseLost {
                node: self.session.node().to_string(),
            };
            return Err(self.refusal(id, what(), e));
        }
        // The capture was fenced at the generation the Prepare named
        // (handed out with it); a different one is a caller's mistake.
        if generation != Some(prepare.value.generation) {
            let e = ClusterError::AssignmentFenceMoved {
                action: "answer",
                id,
                node: self.session.node().to_string(),
                expected: prepare.value.generation,
                current: generation.unwrap_or(0),
            };
            return Err(self.refusal(id, what(), e));
        }
        let ack = Answer::Ack {
            part: part_of(manifest),
        };
        answer_checkpoint(&self.session, &prepare, ack)
            .await
            .map_err(|e| self.refusal(id, what(), e))?;
        let asked = std::time::Instant::now();
        let until = instant_of(prepare.value.deadline_ms) + DECISION_GRACE;
        // A leader that lost its term writes no decision: a successor's
        // take-over may still abort the attempt, so the wait goes on for
        // the grace, and the outcome is unknown then rather than at the
        // deadline (as long as the checkpoint timeout).
        let decided = tokio::select! {
            d = wait_for_decision(&self.session, id, until) => d,
            () = term_ended(&self.session, prepare.value.term) => {
                let grace = tokio::time::Instant::now() + DECISION_GRACE;
                wait_for_decision(&self.session, id, grace.min(until)).await
            }
        };
        let decision = decided.map_err(|e| authority_error(what(), e))?;
        match decision.map(|d| d.value.decision) {
            Some(Decision::Commit { .. }) => Ok(()),
            Some(Decision::Abort { reason }) => Err(StorageError::Aborted { id, reason }),
            None => Err(authority_error(
                what(),
                ClusterError::DecisionOverdue {
                    node: self.session.node().to_string(),
                    id,
                    waited_ms: u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX),
                },
            )),
        }
    }

    async fn attempt_aborted(&self, id: u64) -> Result<Option<String>, StorageError> {
        Ok(match self.decision_on(id).await? {
            Some(Decision::Abort { reason }) => {
                // Never answered: nothing of it is pending any more.
                self.pending.lock().remove(&id);
                Some(reason)
            }
            _ => None,
        })
    }

    async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
        committed_ids(&self.session.client(), self.session.keys()).await
    }

    /// The leader forgets the records; a follower prunes only its store.
    async fn forget_below(&self, _id: u64) -> Result<(), StorageError> {
        Ok(())
    }
}
