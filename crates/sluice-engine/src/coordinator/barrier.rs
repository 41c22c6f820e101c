//! Checkpoint attempts on the compute thread: reservation, barrier
//! alignment, capture, and completing the checkpoint tails that make them
//! durable.
//!
//! An attempt reserves an id, injects barriers and aligns (input that
//! arrives meanwhile runs in cycles of the normal size; input of a source
//! that already delivered its barrier is held). Capture hands the durable
//! half to a tail ([`BarrierOutcome::Tailing`]) that runs off the compute
//! thread; when the tail's durability is known the coordinator completes
//! it (sink epochs commit then) and answers whoever waits for it. Every
//! failure is typed and settled by [`crate::seam::disposition`].

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::{FxHashMap, FxHashSet};
use sluice_storage::StorageError;
use tokio::sync::mpsc;

use super::{
    BarrierOutcome, CheckpointAssignmentFence, CheckpointAttempt, CheckpointReport, CycleError,
    PipelineCallback, StreamingCoordinator, FLAG_SHUTDOWN,
};
use crate::error::EngineError;
use crate::sources::{SourceEvent, SourceMessage};

/// What a checkpoint attempt gave its caller.
pub(super) enum Checkpointed {
    /// Durable, sinks committed.
    Done(CheckpointReport),
    /// Captured; its tail is writing it. The outcome comes when the tail
    /// completes ([`StreamingCoordinator::complete_tails`]).
    Tailing(CheckpointAttempt),
}

/// Who owns an attempt, which decides how it is given up before capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// This node reserved it (the leader, or a single node): given up, it
    /// is abandoned (`abandon_checkpoint_attempt`).
    Own,
    /// The leader's, followed here: given up, it is only nacked
    /// (`cancel_source_barrier_attempt`); the id is the leader's to decide.
    Followed,
}

/// An attempt admitted to barrier alignment.
pub(super) struct Admitted {
    pub(super) attempt: CheckpointAttempt,
    pub(super) fence: Option<CheckpointAssignmentFence>,
    pub(super) flags: u64,
    pub(super) origin: Origin,
    /// When the coordinator began the attempt (its admission is part of
    /// the compute thread's pause).
    pub(super) started: Instant,
    /// Alignment ends by then.
    pub(super) deadline: Instant,
    /// The whole attempt is durable (or answered, on a follower) by then.
    pub(super) attempt_deadline: Instant,
}

impl<C: PipelineCallback> StreamingCoordinator<C> {
    /// One checkpoint: reserve, inject barriers, align (holding input that
    /// follows a source's barrier), capture and hand the durable half to a
    /// tail (or commit inline, for a callback without tails), then replay
    /// held input. A failed attempt is settled by
    /// [`crate::seam::disposition`]; the error returned is what the caller
    /// of `CHECKPOINT` is told.
    ///
    /// Input that arrives during alignment runs in cycles of the normal
    /// size: the barrier waits behind the read-ahead batches already
    /// queued, and running each of them as a cycle of its own made
    /// alignment (and so the stall of aligned sources) many times longer.
    pub(super) async fn run_checkpoint(&mut self, flags: u64) -> crate::Result<Checkpointed> {
        let started = Instant::now();
        // The whole attempt must be durable by `attempt_deadline`; its
        // reservation and alignment must end by `deadline`.
        let attempt_deadline = started + self.callback.checkpoint_timeout();
        let deadline = attempt_deadline.min(started + self.callback.alignment_timeout());
        if !self.callback.is_leader() {
            // Only the leader originates checkpoints; nothing was reserved.
            let e = EngineError::Checkpoint(
                "this node is not the cluster leader: only the leader starts checkpoints".into(),
            );
            self.callback.record_checkpoint_admission_failure(&e);
            return Err(e);
        }
        if self.callback.is_recovering() {
            // The admission gate holds: nothing was reserved.
            let e = EngineError::Checkpoint(
                "the pipeline has not started yet: its recovered state may still replace the \
                 operators', so nothing can be captured before it has"
                    .into(),
            );
            self.callback.record_checkpoint_admission_failure(&e);
            return Err(e);
        }
        let attempt = match self.callback.reserve_checkpoint_attempt(deadline).await {
            Ok(a) => a,
            Err(e) => {
                // No attempt exists: nothing to undo, nothing stops.
                self.callback.record_checkpoint_admission_failure(&e);
                return Err(e);
            }
        };
        // The cluster admits the attempt before any barrier: the assignment
        // it captures under, then its Prepare. A refusal burns the id.
        let fence = match self
            .callback
            .checkpoint_assignment_for_admission(deadline)
            .await
            .fence()
        {
            Ok(f) => f,
            Err(e) => {
                let reason = EngineError::Shared(e).context("admitting the checkpoint");
                return Err(self.abandon(attempt, flags, None, reason).await);
            }
        };
        if let Err(e) = self
            .callback
            .publish_checkpoint_prepare(attempt, started, attempt_deadline, flags, fence)
            .await
        {
            let reason = e.context("publishing the checkpoint prepare");
            return Err(self.abandon(attempt, flags, fence, reason).await);
        }
        self.align_and_capture(Admitted {
            attempt,
            fence,
            flags,
            origin: Origin::Own,
            started,
            deadline,
            attempt_deadline,
        })
        .await
    }

    /// Inject an admitted attempt's barriers, align (running the input
    /// that arrives meanwhile, holding the input of sources already
    /// aligned), capture, and replay held input. Given up before capture,
    /// the attempt is abandoned or nacked by its [`Origin`].
    pub(super) async fn align_and_capture(&mut self, a: Admitted) -> crate::Result<Checkpointed> {
        let Admitted {
            attempt,
            fence,
            flags,
            started,
            deadline,
            attempt_deadline,
            ..
        } = a;
        // The compute thread ran no cycle while admitting the attempt.
        let admission = started.elapsed();
        let mut waiting: FxHashSet<Arc<str>> = self
            .callback
            .inject_source_barriers(attempt)
            .into_iter()
            .collect();
        let mut offsets = FxHashMap::default();
        let mut held = Vec::new();
        let timed_out_error = |waiting: &FxHashSet<Arc<str>>| {
            let mut names: Vec<String> = waiting.iter().map(|s| s.to_string()).collect();
            names.sort();
            EngineError::Checkpoint(format!(
                "alignment timed out waiting for the barrier of {}",
                names.join(", ")
            ))
        };
        while !waiting.is_empty() {
            if self.callback.intake_paused() {
                // Out of the cluster (or deposed) mid-alignment: no more
                // input is folded for an attempt that cannot count.
                self.held.extend(held);
                let reason = EngineError::Checkpoint(
                    "intake paused during alignment: this node no longer takes part".into(),
                );
                return Err(self.give_up(&a, reason).await);
            }
            let mut cycle: Vec<SourceMessage> = Vec::new();
            let mut closed = false;
            let mut timed_out = false;
            while cycle.len() < self.config.max_batches_per_cycle && !waiting.is_empty() {
                let next = match self.held.pop_front() {
                    Some(m) => Some(m),
                    // Nothing to run yet: wait for input, up to the deadline.
                    None if cycle.is_empty() => {
                        let recv = self.source_rx.recv();
                        match tokio::time::timeout_at(deadline.into(), recv).await {
                            Ok(m) => m,
                            Err(_) => {
                                timed_out = true;
                                break;
                            }
                        }
                    }
                    // A cycle's worth started: take only what is ready.
                    None => match self.source_rx.try_recv() {
                        Ok(m) => Some(m),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => None,
                    },
                };
                let Some(m) = next else {
                    closed = true;
                    break;
                };
                if !waiting.contains(&m.source) {
                    // This source already delivered its barrier: its input waits.
                    held.push(m);
                    continue;
                }
                match m.event {
                    SourceEvent::Barrier { attempt: a, offset } if a == attempt.id => {
                        waiting.remove(&m.source);
                        let cp = sluice_storage::SourceCheckpoint {
                            offset,
                            ..Default::default()
                        };
                        offsets.insert(m.source.to_string(), cp);
                    }
                    SourceEvent::Finished { ref offset } => {
                        let cp = sluice_storage::SourceCheckpoint {
                            offset: offset.clone(),
                            ..Default::default()
                        };
                        waiting.remove(&m.source);
                        offsets.insert(m.source.to_string(), cp);
                        cycle.push(m);
                    }
                    _ => cycle.push(m),
                }
            }
            if !cycle.is_empty() {
                self.process(cycle).await;
                if self.stopped_intake {
                    self.held.extend(held);
                    let reason =
                        EngineError::Checkpoint("the pipeline stopped during alignment".into());
                    return Err(self.give_up(&a, reason).await);
                }
            }
            if closed {
                self.held.extend(held);
                let reason = EngineError::Checkpoint("source input closed".into());
                return Err(self.give_up(&a, reason).await);
            }
            if timed_out || (!waiting.is_empty() && Instant::now() >= deadline) {
                self.held.extend(held);
                let reason = timed_out_error(&waiting);
                return Err(self.give_up(&a, reason).await);
            }
        }
        // The other nodes' rows up to their barrier (a split with
        // exchanges; see `exchange_align.rs`).
        if let Err(reason) = self.align_exchanges(attempt, deadline).await {
            self.held.extend(held);
            return Err(self.give_up(&a, reason).await);
        }
        // Work the graph can run without input runs before capture, not
        // after it: output a vnode transition carried to the next cycle
        // (the previous holders' sealed input it ran) is in no snapshot,
        // so a capture before it was emitted would record state that ran
        // that input and lose its output with a crash before the next
        // checkpoint. Input a commit released may run here as well (it is
        // input from before the barrier). Usually the loop ran it already;
        // an output that was full can have held it back.
        if self.callback.has_runnable_deferred_input() {
            if self.callback.intake_paused() {
                // Fenced while the exchanges aligned: no more work is
                // folded for an attempt that cannot count.
                self.held.extend(held);
                let reason = EngineError::Checkpoint(
                    "intake paused during alignment: this node no longer takes part".into(),
                );
                return Err(self.give_up(&a, reason).await);
            }
            self.run_cycle(super::BatchMap::default(), 0, 0).await;
            if self.stopped_intake {
                self.held.extend(held);
                let reason = EngineError::Checkpoint(
                    "the pipeline stopped running the work it held before capture".into(),
                );
                return Err(self.give_up(&a, reason).await);
            }
        }
        let capture_started = Instant::now();
        let outcome = match self.callback.reserve_subscription_cut(attempt) {
            Err(e) => BarrierOutcome::Failed(Arc::new(e.context("cutting subscription logs"))),
            Ok(()) => {
                self.callback
                    .checkpoint_with_barrier(
                        offsets,
                        attempt,
                        started,
                        attempt_deadline,
                        flags,
                        fence,
                    )
                    .await
            }
        };
        let pause = admission + capture_started.elapsed();
        self.callback
            .record_checkpoint_pause(u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX));
        // Held input follows the barrier: it is replayed before new input.
        for m in held.into_iter().rev() {
            self.held.push_front(m);
        }
        if let (Origin::Followed, BarrierOutcome::Failed(e)) = (a.origin, &outcome) {
            // Failed before its tail started: no manifest will ack it, so
            // the leader hears now, not at its deadline.
            let reason = EngineError::Shared(Arc::clone(e));
            drop(self.nack(attempt, reason).await);
        }
        if a.origin == Origin::Followed && matches!(outcome, BarrierOutcome::Aborted(_)) {
            // The leader ended the attempt before this node's capture:
            // only local state is resolved, nothing is published.
            self.resolve_abort(attempt);
            if self.stopped_intake {
                self.callback.abort_subscription_cut(attempt);
                let stopped = self.status.borrow().error();
                return Err(stopped.unwrap_or(EngineError::NotRunning));
            }
        }
        let result = match outcome {
            // Captured: what changed after this point belongs to the next
            // checkpoint (a failed tail puts the count back).
            BarrierOutcome::Tailing(a) => {
                self.cycles_since_checkpoint = 0;
                Ok(Checkpointed::Tailing(a))
            }
            BarrierOutcome::Committed(report) => {
                self.cycles_since_checkpoint = 0;
                self.settle_outcome(attempt, BarrierOutcome::Committed(report))
                    .map(Checkpointed::Done)
            }
            other => self.settle_outcome(attempt, other).map(Checkpointed::Done),
        };
        // A sink that could not commit after the checkpoint became durable
        // faults the pipeline; the checkpoint itself stays committed.
        self.take_callback_failure();
        result
    }

    /// What follows an attempt's outcome: a durable checkpoint publishes
    /// its subscription cut; a failed or cancelled one gives the cut back
    /// (a failure is settled by its disposition: under exactly-once it
    /// faults). The error is what the caller is told.
    fn settle_outcome(
        &mut self,
        attempt: CheckpointAttempt,
        outcome: BarrierOutcome,
    ) -> crate::Result<CheckpointReport> {
        match outcome {
            BarrierOutcome::Committed(report) => match self.callback.publish_barrier(attempt) {
                Ok(()) => Ok(report),
                Err(e) => {
                    // The caller is told the fault this causes.
                    self.callback
                        .record_checkpoint_continuation_fault(attempt, e);
                    match self.pending_failure() {
                        Some(f) => Err(self.settle(f)),
                        None => Ok(report),
                    }
                }
            },
            BarrierOutcome::Failed(e) => {
                self.callback.abort_subscription_cut(attempt);
                self.cycles_since_checkpoint = self.cycles_since_checkpoint.max(1);
                Err(self.checkpoint_failed(attempt, e))
            }
            BarrierOutcome::Aborted(e) => {
                self.callback.abort_subscription_cut(attempt);
                self.cycles_since_checkpoint = self.cycles_since_checkpoint.max(1);
                Err(EngineError::unshare(e))
            }
            BarrierOutcome::Tailing(a) => Err(EngineError::Internal(format!(
                "checkpoint {} is still being written",
                a.id
            ))),
        }
    }

    /// A checkpoint attempt failed before it was durable.
    fn checkpoint_failed(
        &mut self,
        attempt: CheckpointAttempt,
        e: Arc<EngineError>,
    ) -> EngineError {
        self.callback.record_checkpoint_failure(attempt.id, &e);
        let failed = EngineError::Context {
            context: format!("checkpoint {} failed", attempt.id),
            cause: Arc::clone(&e),
        };
        // The caller is told the checkpoint's failure; a fault it caused
        // is reported by the pipeline's status.
        let stage = if StorageError::FENCE_CODES.contains(&e.code()) {
            CycleError::Fenced(failed)
        } else if e.code() == StorageError::ABORTED_CODE {
            CycleError::CheckpointAborted(failed)
        } else {
            CycleError::Checkpoint(failed)
        };
        drop(self.settle(stage));
        EngineError::unshare(e)
    }

    /// A tail's durability is known: complete it (sink epochs commit when
    /// durable), publish or give back its subscription cut, and answer the
    /// manual checkpoint that waits for it. Returns the outcome when no
    /// manual checkpoint waited for it.
    pub(super) fn on_tail_done(
        &mut self,
        attempt: CheckpointAttempt,
    ) -> Option<crate::Result<CheckpointReport>> {
        let outcome = self.callback.complete_checkpoint_tail(attempt);
        let result = self.settle_outcome(attempt, outcome);
        self.take_callback_failure();
        match self.replies.iter().position(|(id, _)| *id == attempt.id) {
            Some(i) => {
                let (_, reply) = self.replies.swap_remove(i);
                let _ = reply.send(result);
                None
            }
            None => Some(result),
        }
    }

    /// Intake stops (a halt, or a fault that found its tail already past
    /// the manifest fence). A tail still in flight holds a checkpoint
    /// captured before the failure (it is consistent, and durable or about
    /// to be): it is let finish, and once durable its sink epochs commit,
    /// as they did when the checkpoint was written inline (and as recovery
    /// would re-commit them from the manifest), so no staged epoch is left
    /// behind. The manual checkpoint waiting for it is answered. Its
    /// outcome is not settled again (the failure that stopped intake is
    /// the one reported).
    ///
    /// Blocks the compute thread until the tail ends; it takes no more
    /// input anyway, and the tail runs on its own worker.
    pub(super) fn finish_tails_before_stop(&mut self) {
        while let Some(attempt) = futures::executor::block_on(self.callback.next_checkpoint_tail())
        {
            let result = match self.callback.complete_checkpoint_tail(attempt) {
                BarrierOutcome::Committed(report) => match self.callback.publish_barrier(attempt) {
                    Ok(()) => Ok(report),
                    Err(e) => {
                        Err(e.context(format!("after checkpoint {} became durable", attempt.id)))
                    }
                },
                BarrierOutcome::Failed(e) => {
                    self.callback.abort_subscription_cut(attempt);
                    self.callback.record_checkpoint_failure(attempt.id, &e);
                    Err(EngineError::unshare(e))
                }
                BarrierOutcome::Aborted(e) => {
                    self.callback.abort_subscription_cut(attempt);
                    Err(EngineError::unshare(e))
                }
                BarrierOutcome::Tailing(a) => Err(EngineError::Internal(format!(
                    "checkpoint {} is still being written",
                    a.id
                ))),
            };
            match self.replies.iter().position(|(id, _)| *id == attempt.id) {
                Some(i) => {
                    let (_, reply) = self.replies.swap_remove(i);
                    let _ = reply.send(result);
                }
                None => {
                    if let Err(e) = result {
                        tracing::debug!(checkpoint = attempt.id, error = %e, "checkpoint did not commit before intake stopped");
                    }
                }
            }
        }
        futures::executor::block_on(self.callback.wait_checkpoint_tails_idle());
    }

    /// Complete every tail whose durability is or becomes known, then wait
    /// until no tail holds a slot. Returns the outcomes no manual
    /// checkpoint waited for, by id.
    pub(super) async fn complete_tails(&mut self) -> Vec<(u64, crate::Result<CheckpointReport>)> {
        let mut done = Vec::new();
        while let Some(attempt) = self.callback.next_checkpoint_tail().await {
            if let Some(r) = self.on_tail_done(attempt) {
                done.push((attempt.id, r));
            }
        }
        self.callback.wait_checkpoint_tails_idle().await;
        done
    }

    /// Wait (completing tails) until a new attempt may hand off a tail.
    pub(super) async fn wait_for_tail_slot(&mut self) {
        if self.callback.checkpoint_tails_in_flight() >= self.callback.max_checkpoint_tails() {
            self.complete_tails().await;
        }
    }

    /// The shutdown checkpoint, through its tail: it waits for the tail
    /// before it (if any) and for its own.
    pub(super) async fn shutdown_checkpoint(&mut self) -> crate::Result<CheckpointReport> {
        self.wait_for_tail_slot().await;
        // Completing the tail before may have stopped the pipeline.
        if self.stopped_intake {
            let stopped = self.status.borrow().error();
            return Err(stopped.unwrap_or(EngineError::NotRunning));
        }
        match self.run_checkpoint(FLAG_SHUTDOWN).await? {
            Checkpointed::Done(report) => Ok(report),
            Checkpointed::Tailing(a) => self
                .complete_tails()
                .await
                .into_iter()
                .find(|(id, _)| *id == a.id)
                .map_or_else(
                    || {
                        Err(EngineError::Internal(format!(
                            "checkpoint {} left no outcome",
                            a.id
                        )))
                    },
                    |(_, r)| r,
                ),
        }
    }

    /// The leader aborted `attempt` before this node captured it: resolve
    /// local state; a failure to do so exactly faults for recovery.
    pub(super) fn resolve_abort(&mut self, attempt: CheckpointAttempt) {
        self.callback.release_exchange_barrier(attempt);
        if let Err(e) = self.callback.resolve_authoritative_follower_abort(attempt) {
            let e = e.context(format!("resolving aborted checkpoint {}", attempt.id));
            self.settle(CycleError::FollowerState(e));
        }
    }

    /// Give up an admitted attempt before capture, as its origin says;
    /// returns why, for the caller.
    async fn give_up(&mut self, a: &Admitted, reason: EngineError) -> EngineError {
        match a.origin {
            Origin::Own => self.abandon(a.attempt, a.flags, a.fence, reason).await,
            Origin::Followed => self.nack(a.attempt, reason).await,
        }
    }

    /// Give up a followed attempt before capture: withdraw its barriers
    /// and answer the leader with a negative acknowledgement (both are
    /// `cancel_source_barrier_attempt`). The attempt is not abandoned:
    /// the leader decides it. Returns why, for the caller.
    async fn nack(&mut self, attempt: CheckpointAttempt, reason: EngineError) -> EngineError {
        if let Err(e) = self
            .callback
            .cancel_source_barrier_attempt(attempt, &reason)
            .await
        {
            tracing::warn!(checkpoint = attempt.id, error = %e, "nacking a followed checkpoint failed");
        }
        reason
    }

    /// Give up an attempt before capture; returns why, for the caller.
    async fn abandon(
        &mut self,
        attempt: CheckpointAttempt,
        flags: u64,
        fence: Option<CheckpointAssignmentFence>,
        reason: EngineError,
    ) -> EngineError {
        if let Err(e) = self
            .callback
            .cancel_source_barrier_attempt(attempt, &reason)
            .await
        {
            tracing::warn!(error = %e, "cancelling source barriers failed");
        }
        if let Err(e) = self
            .callback
            .abandon_checkpoint_attempt(attempt, &reason, flags, fence)
            .await
        {
            return self.checkpoint_failed(attempt, Arc::new(e));
        }
        reason
    }
}
