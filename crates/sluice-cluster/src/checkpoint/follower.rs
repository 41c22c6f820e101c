//! The follower side of a checkpoint round ([`CheckpointFollower`]): every
//! node, the leader's included, runs one over its pipeline.
//!
//! ```text
//!  prepare/ (watch) ─► next Prepare above the last handled id
//!    owns no vnode / due before the follower started / already
//!    committed / older than the view ─► Skipped
//!    already aborted ─► aborted (no capture, no answer)
//!    view behind the Prepare's generation at its deadline ──► fenced (error)
//!    capture ─► answer ack | nack (fenced txn) ─► wait for the decision
//!      (watch, bounded by deadline + grace) ─► committed | aborted, once
//! ```
//!
//! Prepares are handled strictly in id order and each at most once, so a
//! pipeline sees `committed` / `aborted` at most once per attempt and in
//! order. An answered attempt whose decision is overdue stays pending
//! ([`ClusterError::DecisionOverdue`]) and is delivered by a later call
//! once decided — typically the authoritative abort of a new leader.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::answer::answer_checkpoint;
use super::pipeline::CheckpointPipeline;
use super::read::read_decision;
use super::record::{decode, Answer, CheckpointPrepare, Decision, DecisionRecord, Stored};
use super::txn::{instant_of, now_ms};
use super::wait::wait_for_decision;
use crate::assignment::AssignmentView;
use crate::error::{ClusterError, Result};
use crate::session::Session;
use crate::watch::{self as key_watch, Snapshot};

/// What a follower did with one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowerOutcome {
    /// It answered and the attempt committed; `committed` was called.
    Committed {
        /// The attempt id.
        id: u64,
    },
    /// It answered and the attempt aborted; `aborted` was called.
    Aborted {
        /// The attempt id.
        id: u64,
        /// The leader's reason.
        reason: String,
    },
    /// It did not take part; no pipeline method was called.
    Skipped {
        /// The attempt id.
        id: u64,
        /// Why.
        reason: String,
    },
}

/// One node's follower: watches Prepares and drives its pipeline.
#[derive(Debug)]
pub struct CheckpointFollower<P> {
    session: Arc<Session>,
    view: AssignmentView,
    pipeline: P,
    prepares: watch::Receiver<Snapshot>,
    /// The highest attempt id handled (answered or skipped).
    handled: u64,
    /// Answered attempts whose decision has not been delivered yet.
    undecided: BTreeSet<u64>,
    grace: Duration,
    /// Wall-clock start (Unix ms): Prepares due before it ended before
    /// this follower (or its pipeline) existed and are not its to resolve.
    started_ms: u64,
}

impl<P: CheckpointPipeline> CheckpointFollower<P> {
    /// Start watching Prepares for `session`'s node. `view` is the table the
    /// node runs; `grace` is how long after a Prepare's deadline it waits
    /// for the decision before reporting it overdue.
    pub fn start(
        session: Arc<Session>,
        view: AssignmentView,
        pipeline: P,
        grace: Duration,
    ) -> Self {
        let prepares = key_watch::spawn(
            session.client(),
            session.keys().checkpoint_dir("prepare"),
            true,
        );
        Self {
            session,
            view,
            pipeline,
            prepares,
            handled: 0,
            undecided: BTreeSet::new(),
            grace,
            started_ms: now_ms(),
        }
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &P {
        &self.pipeline
    }

    /// Deliver a pending decision, or handle the next Prepare, waiting for
    /// one until `until` (`Ok(None)`: none arrived). Errors:
    /// [`ClusterError::LeaseLost`] once the node is out of the cluster (it
    /// must rejoin); a fencing error if its answer was refused (the
    /// attempt then never reaches the pipeline's `committed`);
    /// [`ClusterError::DecisionOverdue`] if no decision came in time.
    pub async fn next_attempt(&mut self, until: Instant) -> Result<Option<FollowerOutcome>> {
        if let Some(outcome) = self.deliver_pending().await? {
            return Ok(Some(outcome));
        }
        let mut lost = self.session.lost();
        let prepare = loop {
            if !self.session.lease_valid() {
                return Err(self.lease_lost());
            }
            if let Some(next) = self.next_prepare()? {
                // An older answered attempt decided meanwhile goes first,
                // so decisions reach the pipeline in id order.
                if let Some(outcome) = self.deliver_pending().await? {
                    return Ok(Some(outcome));
                }
                break next;
            }
            tokio::select! {
                changed = self.prepares.changed() => if changed.is_err() {
                    // The mirror task only ends once every receiver is
                    // gone, so this is not expected; report it, never spin.
                    return Err(ClusterError::Timeout {
                        what: "watch of checkpoint Prepares".to_string(),
                        after_ms: 0,
                    });
                },
                _ = lost.changed() => {}
                () = tokio::time::sleep_until(until) => return Ok(None),
            }
        };
        self.handled = prepare.value.id;
        self.handle(prepare).await.map(Some)
    }

    /// The Prepare with the smallest id above the last handled one.
    fn next_prepare(&mut self) -> Result<Option<Stored<CheckpointPrepare>>> {
        let snapshot = self.prepares.borrow_and_update();
        for (key, entry) in &snapshot.entries {
            let value: CheckpointPrepare = decode(key, &entry.value)?;
            if value.id > self.handled {
                return Ok(Some(Stored {
                    value,
                    create_revision: entry.create_revision,
                    mod_revision: entry.mod_revision,
                }));
            }
        }
        Ok(None)
    }

    async fn handle(&mut self, prepare: Stored<CheckpointPrepare>) -> Result<FollowerOutcome> {
        let id = prepare.value.id;
        let me = self.session.node().to_string();
        let skipped = |reason: &str| FollowerOutcome::Skipped {
            id,
            reason: reason.to_string(),
        };
        let vnodes = owned_vnodes(&prepare.value, &me);
        if vnodes.is_empty() {
            return Ok(skipped("this node owns no vnode in the Prepare's table"));
        }
        if prepare.value.deadline_ms < self.started_ms {
            return Ok(skipped("the attempt was due before this follower started"));
        }
        if let Some(decision) = read_decision(&self.session, id).await? {
            if matches!(decision.value.decision, Decision::Commit { .. }) {
                return Ok(skipped("the attempt committed before this node answered"));
            }
            // Aborted before this node captured: the pipeline still hears
            // of it (the spec's resolve_authoritative_follower_abort), so
            // every attempt it owns vnodes in ends in exactly one call.
            self.undecided.insert(id);
            return self.deliver(decision);
        }
        let deadline = instant_of(prepare.value.deadline_ms);
        let generation = prepare.value.generation;
        // The Prepare may arrive before the table it names: wait for the
        // view to catch up, until the deadline.
        while self.view.generation() < generation {
            let changed = tokio::select! {
                changed = self.view.changed() => changed,
                () = tokio::time::sleep_until(deadline) => false,
            };
            if !changed {
                break;
            }
        }
        let current = self.view.generation();
        if current > generation {
            return Ok(skipped(
                "the Prepare names an older table than this node runs",
            ));
        }
        if current != generation {
            return Err(ClusterError::AssignmentFenceMoved {
                action: "answer",
                id,
                node: me,
                expected: generation,
                current,
            });
        }
        let captured =
            tokio::time::timeout_at(deadline, self.pipeline.capture(&prepare.value, &vnodes)).await;
        let answer = match captured {
            Ok(Ok(part)) => Answer::Ack { part },
            // The reason travels to the leader as text.
            Ok(Err(e)) => Answer::Nack {
                reason: e.to_string(),
            },
            Err(_) => Answer::Nack {
                reason: "the capture did not finish by the deadline".to_string(),
            },
        };
        if !self.session.lease_valid() {
            return Err(self.lease_lost());
        }
        answer_checkpoint(&self.session, &prepare, answer).await?;
        self.undecided.insert(id);
        let decision = wait_for_decision(&self.session, id, deadline + self.grace).await?;
        match decision {
            Some(decision) => self.deliver(decision),
            None => Err(ClusterError::DecisionOverdue {
                node: me,
                id,
                waited_ms: u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Deliver the decision of the oldest answered attempt, if it has one.
    async fn deliver_pending(&mut self) -> Result<Option<FollowerOutcome>> {
        let Some(&id) = self.undecided.first() else {
            return Ok(None);
        };
        match read_decision(&self.session, id).await? {
            Some(decision) => self.deliver(decision).map(Some),
            None => Ok(None),
        }
    }

    /// Call `committed` or `aborted` for an answered attempt, once.
    fn deliver(&mut self, decision: Stored<DecisionRecord>) -> Result<FollowerOutcome> {
        let id = decision.value.id;
        if !self.undecided.remove(&id) {
            return Ok(FollowerOutcome::Skipped {
                id,
                reason: "the decision was already delivered".to_string(),
            });
        }
        let failed = |decision: &'static str, source| ClusterError::PipelineFailed {
            node: self.session.node().to_string(),
            id,
            decision,
            source,
        };
        match decision.value.decision {
            Decision::Commit { parts } => {
                tracing::debug!(node = %self.session.node(), id, "checkpoint committed");
                self.pipeline
                    .committed(id, &parts)
                    .map_err(|r| failed("commit", r))?;
                Ok(FollowerOutcome::Committed { id })
            }
            Decision::Abort { reason } => {
                tracing::debug!(node = %self.session.node(), id, reason, "checkpoint aborted");
                self.pipeline
                    .aborted(id, &reason)
                    .map_err(|r| failed("abort", r))?;
                Ok(FollowerOutcome::Aborted { id, reason })
            }
        }
    }

    fn lease_lost(&self) -> ClusterError {
        ClusterError::LeaseLost {
            node: self.session.node().to_string(),
        }
    }
}

/// The vnodes `node` owns in `prepare`'s table.
fn owned_vnodes(prepare: &CheckpointPrepare, node: &str) -> Vec<u32> {
    let Some(me) = prepare.members.iter().position(|m| m == node) else {
        return Vec::new();
    };
    (0u32..)
        .zip(&prepare.owners)
        .filter(|&(_, &o)| usize::try_from(o).is_ok_and(|o| o == me))
        .map(|(v, _)| v)
        .collect()
}
