//! A follower's part in the leader's checkpoints.
//!
//! A node that does not lead originates nothing (`barrier.rs` refuses a
//! manual checkpoint and the periodic tick skips). It takes part in the
//! leader's attempts instead: the callback's checkpoint control wake fires
//! when the leader announces something, and the coordinator asks the
//! callback what (`service_checkpoint_control`). A Prepare it admitted
//! runs through the same alignment and capture as an attempt of its own
//! (`align_and_capture`, with [`Origin::Followed`]), except that giving
//! it up before capture is a nack, never an abandon: the id and the
//! decision are the leader's. An abort the leader decided first only
//! resolves local state.

use std::time::Instant;

use super::barrier::{Admitted, Checkpointed, Origin};
use super::{CheckpointControlOutcome, PipelineCallback, StreamingCoordinator};

impl<C: PipelineCallback> StreamingCoordinator<C> {
    /// The control wake fired: act on the leader's announcement. Skipped
    /// while this node leads (it originates its own attempts then) and
    /// while every tail slot is taken (the wake's fallback asks again, and
    /// the leader's deadline bounds the wait).
    ///
    /// One wake may stand for several announcements (`Notify` keeps one):
    /// it asks until there is nothing new. While intake is paused (this
    /// node is out of the cluster) it asks nothing: it could not take part.
    pub(super) async fn follow_checkpoint_control(&mut self) {
        loop {
            if self.callback.is_leader() || self.stopped_intake || self.callback.intake_paused() {
                return;
            }
            if self.callback.checkpoint_tails_in_flight() >= self.callback.max_checkpoint_tails() {
                tracing::debug!("checkpoint control deferred: a checkpoint tail is in flight");
                return;
            }
            if !self.follow_one().await {
                return;
            }
        }
    }

    /// Act on one announcement; `true` when another may be waiting. A
    /// failure ends the round: asking again at once could only fail again
    /// (an unreachable etcd), and the fallback asks later.
    async fn follow_one(&mut self) -> bool {
        let started = Instant::now();
        match self.callback.service_checkpoint_control().await {
            CheckpointControlOutcome::Idle => return false,
            CheckpointControlOutcome::AdmissionFailed(e) => {
                let e = crate::EngineError::Shared(e).context("following the leader's checkpoint");
                self.callback.record_checkpoint_admission_failure(&e);
                return false;
            }
            CheckpointControlOutcome::Failed { attempt, error } => {
                // Not taken here: the other nodes' rows after its barrier
                // are taken in again.
                self.callback.release_exchange_barrier(attempt);
                let e =
                    crate::EngineError::Shared(error).context("following the leader's checkpoint");
                self.callback.record_checkpoint_failure(attempt.id, &e);
                return false;
            }
            CheckpointControlOutcome::Aborted { attempt } => self.resolve_abort(attempt),
            CheckpointControlOutcome::Started {
                attempt,
                fence,
                deadline,
                flags,
            } => {
                let alignment = started + self.callback.alignment_timeout();
                let admitted = Admitted {
                    attempt,
                    fence,
                    flags,
                    origin: Origin::Followed,
                    started,
                    deadline: deadline.min(alignment),
                    attempt_deadline: deadline,
                };
                match self.align_and_capture(admitted).await {
                    Ok(Checkpointed::Tailing(_)) => {}
                    Ok(Checkpointed::Done(report)) => {
                        tracing::debug!(checkpoint = report.id, "followed checkpoint committed");
                    }
                    Err(e) => {
                        tracing::debug!(checkpoint = attempt.id, error = %e, "followed checkpoint not taken");
                    }
                }
            }
        }
        true
    }
}
