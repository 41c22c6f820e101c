//! The streaming coordinator: one execution cycle at a time.
//!
//! A cycle takes the source messages that are ready (up to
//! `max_batches_per_cycle`), filters late rows and extracts watermarks per
//! batch in arrival order, executes the operator graph once at the resulting
//! pipeline watermark, then publishes to materialized views, subscriptions
//! and sinks, and records metrics. Before each cycle it consults the
//! outputs' pressure: while a sink's writer queue or a subscriber's queue
//! is full, it takes no source input, so the source channel fills and the
//! readers wait (output backpressure). DDL is applied between cycles. The
//! coordinator runs on its own thread (the compute thread); everything it
//! touches goes through the [`PipelineCallback`] seam.

mod barrier;
pub mod callback;
mod checkpointing;
mod cluster;
pub mod connector;
mod control;
mod exchange_align;
mod exchanges;
mod follower;
mod handle;
mod moved;
pub mod streams;
mod tails;

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;

use tokio::sync::{mpsc, oneshot, watch};

use crate::error::EngineError;
use crate::output::subscription::DeliveryEnd;
use crate::seam::{disposition_with, Disposition};
pub use crate::seam::{CheckpointConfig, CoordinatorDeath, PipelineStatus};
use crate::sources::{SourceEvent, SourceMessage};
pub use callback::{
    BarrierOutcome, BatchMap, CheckpointAssignmentAdmission, CheckpointAssignmentFence,
    CheckpointAttempt, CheckpointControlOutcome, CheckpointControlWake, CheckpointLifecycle,
    CheckpointReport, ClusterCoordination, ControlMsg, CycleError, CycleExecution, CycleOutcome,
    ExternalOutputPressure, OutputPublication, PipelineCallback, RuntimeControl, SourceIntake,
    FLAG_MANUAL, FLAG_SHUTDOWN,
};
pub use connector::{ConnectorPipelineCallback, SharedOutputs};
pub use handle::{wait_finished, CoordinatorHandle};
pub use streams::StreamProducer;
pub use tails::TailError;

use barrier::Checkpointed;

/// Commands for the coordinator.
pub enum Command {
    /// Apply DDL; acknowledged once applied, or with the error that
    /// refused it (nothing of it applied).
    Control(ControlMsg, oneshot::Sender<crate::Result<()>>),
    /// Take a checkpoint now.
    Checkpoint(oneshot::Sender<crate::Result<CheckpointReport>>),
    /// Settle and close everything (or, with `discard`, throw away sink
    /// output), then stop.
    Shutdown {
        /// Receives the outcome.
        reply: oneshot::Sender<crate::Result<()>>,
        /// Discard unpublished sink output instead of publishing it.
        discard: bool,
        /// The process exits right after: operator state is given up
        /// instead of freed ([`crate::operators::StatefulOperator::forget_state`]).
        exiting: bool,
    },
}

/// What the loop does after a step.
enum Step {
    Continue,
    Stop,
}

/// Tunables of the loop.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorConfig {
    /// Most source messages folded into one cycle.
    pub max_batches_per_cycle: usize,
    /// How often idleness is checked.
    pub idle_tick: Duration,
}

/// The coordinator loop, generic over its seam.
pub struct StreamingCoordinator<C: PipelineCallback> {
    callback: C,
    source_rx: mpsc::Receiver<SourceMessage>,
    commands: mpsc::UnboundedReceiver<Command>,
    status: watch::Sender<PipelineStatus>,
    config: CoordinatorConfig,
    /// Input held back during barrier alignment, replayed before new input.
    held: VecDeque<SourceMessage>,
    stopped_intake: bool,
    /// Cycles run since the last captured checkpoint.
    cycles_since_checkpoint: u64,
    /// Manual checkpoints answered when their tail completes.
    replies: Vec<(u64, CheckpointReply)>,
    /// Raised by the handle as it asks for a discarding shutdown, while
    /// this coordinator may be waiting for another node's barrier.
    abort: handle::AbortRequest,
}

/// Where a manual checkpoint's outcome goes.
type CheckpointReply = oneshot::Sender<crate::Result<CheckpointReport>>;

impl<C: PipelineCallback> StreamingCoordinator<C> {
    /// A coordinator over `callback`.
    pub fn new(
        callback: C,
        source_rx: mpsc::Receiver<SourceMessage>,
        commands: mpsc::UnboundedReceiver<Command>,
        status: watch::Sender<PipelineStatus>,
        config: CoordinatorConfig,
    ) -> Self {
        Self {
            callback,
            source_rx,
            commands,
            status,
            config,
            held: VecDeque::new(),
            stopped_intake: false,
            cycles_since_checkpoint: 0,
            replies: Vec::new(),
            abort: handle::AbortRequest::default(),
        }
    }

    /// What the handle raises to ask for a discarding shutdown without
    /// waiting for an attempt in alignment (see
    /// [`handle::AbortRequest`]).
    pub(super) fn abort_request(&self) -> handle::AbortRequest {
        self.abort.clone()
    }

    /// Run until shut down.
    ///
    /// Each step runs inside `catch_unwind`: a panic that escapes the
    /// per-component containment (see [`crate::panic`]) stops intake like
    /// any other failure, and the loop keeps serving commands so the
    /// caller still gets a shutdown and an error saying what happened.
    pub async fn run(mut self) {
        let mut idle = tokio::time::interval(self.config.idle_tick);
        idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Created once checkpointing is enabled (at start).
        let mut checkpoints: Option<tokio::time::Interval> = None;
        // The leader's checkpoint control wake, taken once the pipeline
        // runs (`None`: single node, or not yet asked), with its fallback
        // schedule: an interval (restarted after each followed attempt),
        // so input arriving more often than the period does not postpone
        // it.
        let mut control: Option<(CheckpointControlWake, tokio::time::Interval)> = None;
        loop {
            let step = AssertUnwindSafe(self.step(&mut idle, &mut checkpoints, &mut control))
                .catch_unwind()
                .await;
            match step {
                Ok(Step::Continue) => {}
                Ok(Step::Stop) => return,
                Err(payload) => {
                    let reason = format!(
                        "the coordinator panicked: {}",
                        crate::panic::panic_message(&*payload)
                    );
                    tracing::error!(%reason, "coordinator step panicked");
                    // A cycle that panicked mid-publication staged output
                    // nobody may see.
                    self.callback.abort_subscription_output();
                    self.settle(CycleError::Panicked(EngineError::Panicked(reason)));
                }
            }
        }
    }

    /// One turn of the loop: held input, a command, a timer or new input.
    async fn step(
        &mut self,
        idle: &mut tokio::time::Interval,
        checkpoints: &mut Option<tokio::time::Interval>,
        control: &mut Option<(CheckpointControlWake, tokio::time::Interval)>,
    ) -> Step {
        if checkpoints.is_none() {
            if let Some(period) = self.callback.checkpoint_interval() {
                let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                *checkpoints = Some(i);
            }
        }
        if control.is_none() {
            *control = self.callback.checkpoint_control_wake().map(|wake| {
                let period = wake.fallback();
                let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                (wake, i)
            });
        }
        // A follower acts on the leader's checkpoint control. The wake is
        // awaited while leading too (and then ignored): leadership can be
        // lost without any other event, and the fallback keeps asking.
        // Nothing is captured while a (re)start is in flight: the wake and
        // the periodic tick wait for its end (see `is_recovering`).
        let recovering = self.callback.is_recovering();
        let following = !self.stopped_intake && control.is_some() && !recovering;
        // Backpressure: while an output is full, no source input is taken
        // (neither held nor new); commands, checkpoints and idleness still
        // run, so a pipeline whose subscriber never reads still checkpoints
        // and shuts down.
        let paused = !self.stopped_intake
            && (self.callback.intake_paused()
                || self.callback.external_output_pressure() == ExternalOutputPressure::Full);
        let shuffle = self
            .callback
            .shuffle_work_wake()
            .filter(|_| self.callback.shuffle_input_open());
        // Process functions hold their budget of input for a commit: only
        // source intake waits (see `held_input_full`).
        let waiting_for_commit = !self.stopped_intake && !paused && self.callback.held_input_full();
        let relief = if paused {
            self.callback.output_pressure_wake()
        } else {
            None
        };
        // Input a committed checkpoint released runs before new input.
        if !self.stopped_intake
            && !paused
            && !recovering
            && self.callback.has_runnable_deferred_input()
        {
            self.run_cycle(BatchMap::default(), 0, 0).await;
            self.take_callback_failure();
            return Step::Continue;
        }
        if !self.stopped_intake && !paused && !waiting_for_commit && !self.held.is_empty() {
            let n = self.held.len().min(self.config.max_batches_per_cycle);
            let batch: Vec<SourceMessage> = self.held.drain(..n).collect();
            self.process(batch).await;
            yield_to_timers().await;
            self.take_callback_failure();
            return Step::Continue;
        }
        tokio::select! {
            biased;
            cmd = self.commands.recv() => match cmd {
                Some(Command::Control(msg, ack)) => {
                    let _ = ack.send(self.control(msg).await);
                }
                Some(Command::Checkpoint(reply)) => {
                    // A halted or faulted pipeline has discarded the sink
                    // output it had not committed, but its sources' positions
                    // moved past that input: a checkpoint now would commit
                    // those positions, and a reopened pipeline would never
                    // produce the discarded rows again. Checked here, where
                    // the status is owned, so no fault can land in between.
                    // A manual checkpoint waits for a free tail slot (whose
                    // completion may stop the pipeline); its reply waits
                    // for its tail (cycles run meanwhile).
                    if !self.stopped_intake {
                        self.wait_for_tail_slot().await;
                    }
                    if self.stopped_intake {
                        let status = self.status.borrow().clone();
                        let reason = match (status.halted, status.fault) {
                            (Some(h), _) => h.to_string(),
                            (None, Some(f)) => {
                                format!("{f}; recovery replays from the last committed checkpoint")
                            }
                            (None, None) => String::new(),
                        };
                        let _ = reply.send(Err(EngineError::Checkpoint(format!(
                            "no checkpoint is taken after the pipeline stopped ({reason}): it \
                             would commit input whose output was discarded; reopen on the same \
                             state to recover from the last committed checkpoint"
                        ))));
                        return Step::Continue;
                    }
                    match self.run_checkpoint(FLAG_MANUAL).await {
                        Ok(Checkpointed::Tailing(a)) => self.replies.push((a.id, reply)),
                        Ok(Checkpointed::Done(report)) => {
                            let _ = reply.send(Ok(report));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                        }
                    }
                }
                Some(Command::Shutdown { reply, discard, exiting }) => {
                    let r = self.shutdown(discard).await;
                    if exiting {
                        self.callback.forget_operator_state();
                    }
                    let _ = reply.send(r);
                    return Step::Stop;
                }
                None => {
                    let _ = self.shutdown(true).await;
                    return Step::Stop;
                }
            },
            // A tail's durability is known: commit its sinks' epochs.
            Some(attempt) = self.callback.next_checkpoint_tail() => {
                if let Some(Err(e)) = self.on_tail_done(attempt) {
                    tracing::debug!(checkpoint = attempt.id, error = %e, "periodic checkpoint did not commit");
                }
            }
            _ = async {
                match checkpoints.as_mut() {
                    Some(i) => {
                        i.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }, if !self.stopped_intake && !recovering => {
                // Nothing changed since the last checkpoint: nothing to
                // capture, unless input is held (here, or maybe on another
                // node) for a checkpoint to release.
                // At the tail bound the checkpoint is skipped: the previous
                // one is still being written, and the next tick takes it.
                if self.cycles_since_checkpoint > 0 || self.callback.has_deferred_input() {
                    if !self.callback.is_leader() {
                        // A follower (or a deposed leader) originates nothing.
                        tracing::debug!("periodic checkpoint skipped: this node does not lead");
                    } else if self.callback.checkpoint_tails_in_flight()
                        >= self.callback.max_checkpoint_tails()
                    {
                        tracing::debug!("periodic checkpoint skipped: a checkpoint tail is in flight");
                        self.callback.note_checkpoint_skipped();
                    } else if let Err(e) = self.run_checkpoint(0).await {
                        tracing::debug!(error = %e, "periodic checkpoint not taken");
                    }
                }
                // The period counts from the end of this attempt. An
                // alignment can outlast it, and the tick would then be due
                // at once and win this biased `select!` again and again:
                // the idle tick below (which halts on a peer that never
                // attached) would never run, and a leader aligning on such
                // a peer would retry forever.
                if let Some(i) = checkpoints.as_mut() {
                    i.reset();
                }
            }
            // The leader announced checkpoint control (or the fallback
            // elapsed): a follower takes part in the leader's attempt.
            _ = async {
                match control.as_mut() {
                    Some((wake, fallback)) => tokio::select! {
                        () = wake.notified() => {}
                        _ = fallback.tick() => {}
                    },
                    None => std::future::pending::<()>().await,
                }
            }, if following => {
                self.follow_checkpoint_control().await;
                // As for the periodic checkpoint: a followed attempt can
                // outlast the fallback period, and must not starve the
                // branches below.
                if let Some((_, fallback)) = control.as_mut() {
                    fallback.reset();
                }
            }
            _ = idle.tick(), if !self.stopped_intake => {
                let before = self.callback.current_watermark();
                self.callback.tick_idle_watermark();
                if self.callback.current_watermark() != before {
                    self.run_cycle(BatchMap::default(), 0, 0).await;
                }
            }
            // Another node sent rows, a watermark or its end (or an
            // exchange failed): taken in even while source intake pauses
            // for a full exchange queue (not while fenced, nor while a sink
            // or subscriber is full; see `shuffle_input_open`).
            _ = async {
                match &shuffle {
                    Some(n) => n.notified().await,
                    None => std::future::pending::<()>().await,
                }
            }, if !self.stopped_intake => {
                match self.callback.take_shuffle_input() {
                    Ok(true) => self.run_cycle(BatchMap::default(), 0, 0).await,
                    Ok(false) => {}
                    Err(e) => {
                        self.settle(e);
                    }
                }
            }
            // An output drained: the next step re-checks the pressure.
            _ = async {
                match &relief {
                    Some(n) => n.notified().await,
                    None => std::future::pending::<()>().await,
                }
            }, if paused => {}
            msg = self.source_rx.recv(), if !self.stopped_intake && !paused && !waiting_for_commit => {
                if let Some(first) = msg {
                    if self.callback.intake_paused() {
                        // The fence went up while this step waited: the
                        // message waits with the held input.
                        self.held.push_back(first);
                        return Step::Continue;
                    }
                    let batch = self.gather(first);
                    self.process(batch).await;
                    yield_to_timers().await;
                }
            }
        }
        self.take_callback_failure();
        Step::Continue
    }

    /// Apply a control message. A refused statement (or a refused
    /// `StageVnodeTransition`, which changes nothing) leaves the pipeline
    /// running; a failed `Recover` or `Start` halts it, as does a staged
    /// vnode transition that fails to complete when `Start` arrives (its
    /// state is partly restored or replaced, or its outputs partly open: a
    /// pipeline left so would never start, and its checkpoints would wait
    /// for a recovery that never ends). Either way the caller gets the
    /// error, so `start()` never has to read the status.
    async fn control(&mut self, msg: ControlMsg) -> crate::Result<()> {
        // Staging a transition changes nothing, so a refused one is
        // refused like a statement (the pipeline runs on).
        let startup = matches!(msg, ControlMsg::Recover(_) | ControlMsg::Start);
        if matches!(msg, ControlMsg::Start) {
            // The vnodes that moved take their keys before any input.
            match self.callback.complete_pending_vnode_transition().await {
                Ok(true) => tracing::debug!("the staged vnode transition completed"),
                Ok(false) => {}
                Err(e) => return Err(self.settle(e)),
            }
        }
        if let Err(e) = self.callback.apply_control(msg) {
            let error = if startup {
                CycleError::Startup(e)
            } else {
                CycleError::Control(e)
            };
            return Err(self.settle(error));
        }
        // Recovered sources may all be finished already: one cycle closes
        // what remains and reports completion, once the (re)start ended.
        if !self.callback.is_recovering()
            && self.callback.all_sources_finished()
            && !self.status.borrow().finished
        {
            self.run_cycle(BatchMap::default(), 0, 0).await;
        }
        Ok(())
    }

    /// Act on a failure the callback left pending.
    fn take_callback_failure(&mut self) {
        if let Some(e) = self.pending_failure() {
            self.settle(e);
        }
    }

    /// The callback's pending halt, else its pending fault: a halt is
    /// permanent and outranks a fault whose recovery would replay the
    /// same input (the fault stays pending; a stopped pipeline reports
    /// its first failure).
    fn pending_failure(&mut self) -> Option<CycleError> {
        self.callback
            .take_pipeline_halt()
            .or_else(|| self.callback.take_pipeline_fault())
    }

    /// What `error` does to the pipeline is [`disposition`]'s decision:
    /// refused (nothing changes), or intake stops for good (halt) or for
    /// recovery (fault). Returns the error the caller is told.
    fn settle(&mut self, error: CycleError) -> EngineError {
        let what = disposition_with(
            &error,
            self.callback.checkpoint_delivery(),
            self.callback.fault_on_cycle_error(),
        );
        let error = error.into_error();
        let fault = match what {
            Disposition::Refuse => return error,
            Disposition::Halt => false,
            Disposition::Fault => true,
        };
        if self.stopped_intake {
            // Already stopped: the first failure is the one reported.
            return self.status.borrow().error().unwrap_or(error);
        }
        let cause = std::sync::Arc::new(error);
        if fault {
            tracing::warn!(reason = %cause, code = cause.code(), "consistency fault; intake stopped for recovery");
        } else {
            tracing::info!(reason = %cause, code = cause.code(), "pipeline halted");
        }
        // Recovery owns the pipeline after a fault: a tail that has not
        // begun its manifest never commits (nor do its sink epochs). A tail
        // past that point, or any tail before a halt (final for this
        // pipeline), holds a checkpoint captured before the failure: it
        // finishes, and its sink epochs commit, before the sinks are
        // aborted.
        if !fault || !self.callback.cancel_checkpoint_tails_for_recovery() {
            self.finish_tails_before_stop();
        }
        self.callback.invalidate_subscriptions(Some(if fault {
            DeliveryEnd::Faulted(std::sync::Arc::clone(&cause))
        } else {
            DeliveryEnd::Halted(std::sync::Arc::clone(&cause))
        }));
        if let Err(e) = self.callback.abort_sinks() {
            tracing::error!(error = %e, "discarding sink output failed");
        }
        self.source_rx.close();
        self.held.clear();
        self.stopped_intake = true;
        let reported = std::sync::Arc::clone(&cause);
        self.status.send_modify(|s| {
            if fault {
                s.fault = Some(cause);
            } else {
                s.halted = Some(cause);
            }
        });
        if fault {
            EngineError::fault(reported)
        } else {
            EngineError::halted(reported)
        }
    }

    fn gather(&mut self, first: SourceMessage) -> Vec<SourceMessage> {
        let mut messages = vec![first];
        while messages.len() < self.config.max_batches_per_cycle {
            match self.source_rx.try_recv() {
                Ok(m) => messages.push(m),
                Err(_) => break,
            }
        }
        messages
    }

    /// Fold source messages into one cycle, in arrival order.
    async fn process(&mut self, messages: Vec<SourceMessage>) {
        let mut batches = BatchMap::default();
        let (mut events, mut count) = (0u64, 0u64);
        // Only stale barriers: nothing to run.
        if messages
            .iter()
            .all(|m| matches!(m.event, SourceEvent::Barrier { .. }))
        {
            return;
        }
        for m in messages {
            match m.event {
                SourceEvent::Batch(b) => {
                    // A batch that cannot be placed in time fails the same
                    // way on replay: it halts, whatever else failed.
                    let kept = match self.callback.filter_late_rows(&m.source, &b) {
                        Ok(k) => k,
                        Err(e) => {
                            self.settle(CycleError::Source(e.into_error()));
                            return;
                        }
                    };
                    let Some(kept) = kept else { continue };
                    if let Err(e) = self.callback.extract_watermark(&m.source, &kept, i64::MIN) {
                        self.settle(CycleError::Source(e.into_error()));
                        return;
                    }
                    events += kept.num_rows() as u64;
                    count += 1;
                    batches.entry(m.source).or_default().push(kept);
                }
                SourceEvent::Watermark(ts) => self.callback.advance_source_watermark(&m.source, ts),
                SourceEvent::Finished { offset } => self.callback.finish_source(&m.source, offset),
                // A barrier outside alignment belongs to an abandoned attempt.
                SourceEvent::Barrier { .. } => {}
                SourceEvent::Failed(e) => {
                    self.settle(CycleError::Source(e));
                    return;
                }
                SourceEvent::Panicked(e) => {
                    self.settle(CycleError::Panicked(e));
                    return;
                }
            }
        }
        self.run_cycle(batches, events, count).await;
    }

    async fn run_cycle(&mut self, batches: BatchMap, events: u64, count: u64) {
        tracing::trace!(events, batches = count, "cycle");
        let started = Instant::now();
        self.callback.note_cycle_start();
        if self.callback.is_backpressured() {
            self.callback.note_source_pressure();
        }
        let watermark = self.callback.current_watermark();
        let outcome = match self.callback.execute_cycle(&batches, watermark).await {
            Ok(o) => o,
            Err(e) => {
                self.callback.note_cycle_error();
                self.settle(e);
                return;
            }
        };
        let executed = Instant::now();
        let published = self
            .callback
            .update_mv_stores(&outcome.results)
            .and_then(|_| self.callback.push_to_streams(&outcome.results));
        if let Err(e) = published {
            self.callback.abort_subscription_output();
            self.settle(e);
            return;
        }
        let stored = Instant::now();
        if let Err(e) = self.callback.write_to_sinks(&outcome.results).await {
            self.callback.abort_subscription_output();
            self.settle(e);
            return;
        }
        self.callback.commit_subscription_output();
        let done = Instant::now();
        let ns = |a: Instant, b: Instant| b.duration_since(a).as_nanos() as u64;
        self.callback.record_cycle(events, count, ns(started, done));
        self.callback.record_cycle_phases(
            ns(started, executed),
            ns(executed, stored),
            ns(stored, done),
        );
        let finished = self.callback.all_sources_finished() && self.source_rx.is_empty();
        self.cycles_since_checkpoint += 1;
        self.status.send_modify(|s| {
            s.cycles += 1;
            s.finished = finished;
        });
    }

    async fn shutdown(&mut self, discard: bool) -> crate::Result<()> {
        let mut result = Ok(());
        // A pipeline whose (re)start never ended has nothing to settle: a
        // checkpoint now would capture the state before its recovery.
        let settles = !discard
            && !self.stopped_intake
            && !self.callback.is_recovering()
            && self.callback.settles_on_shutdown();
        // Only a follower (it has the leader's control wake) skips the
        // shutdown checkpoint; a deposed leader is refused it, and its
        // sinks are aborted, as before.
        let follows = self.callback.checkpoint_control_wake().is_some();
        if settles && follows && !self.callback.is_leader() {
            // A follower takes no checkpoint of its own: what the leader's
            // last checkpoint covered is published (its tail completes
            // below); output after it is not, and says so.
            self.complete_tails().await;
            if let Err(e) = self.callback.settle_sink_epoch_for_shutdown().await {
                result = Err(e.context(
                    "this node follows the cluster leader and takes no shutdown checkpoint; \
                     its output after the leader's last checkpoint is discarded and replayed \
                     when it rejoins",
                ));
            }
        } else if settles {
            // The shutdown checkpoint settles every open sink epoch; it
            // waits for the tail before it (if any) and for its own.
            match self.shutdown_checkpoint().await {
                Ok(_) => {
                    if let Err(e) = self.callback.settle_sink_epoch_for_shutdown().await {
                        result = Err(e.context("settling sink epochs"));
                    }
                }
                Err(e) => {
                    result = Err(e.context("the shutdown checkpoint did not commit"));
                }
            }
        }
        if settles && result.is_ok() {
            // The last checkpoint committed: input it released (the last a
            // process function held) runs before the sinks close.
            self.complete_tails().await;
            while !self.stopped_intake && self.callback.has_runnable_deferred_input() {
                self.run_cycle(BatchMap::default(), 0, 0).await;
            }
        }
        if discard {
            // Nothing of this generation becomes visible from here on.
            self.callback.cancel_checkpoint_tails_for_recovery();
        }
        // Every tail is joined before the connectors are torn down.
        self.complete_tails().await;
        if let Err(e) = self.callback.settle_checkpoint_tail_tasks().await {
            result = result.and(Err(e.context("settling checkpoint tails")));
        }
        self.source_rx.close();
        let closed = if discard || self.stopped_intake || result.is_err() {
            self.callback.abort_sinks()
        } else {
            self.callback.close_sinks().await
        };
        self.callback.invalidate_subscriptions(None);
        self.status.send_modify(|s| s.stopped = true);
        result.and(closed)
    }
}

/// Let the runtime turn its timer driver. The coordinator runs on a
/// current-thread runtime and, under a steady stream of input, its source
/// channel is always ready, so without yielding the checkpoint and idleness
/// timers would fire only when tokio's cooperative budget ran out (every
/// 128 receives, which can be seconds of work).
async fn yield_to_timers() {
    tokio::task::yield_now().await;
}
