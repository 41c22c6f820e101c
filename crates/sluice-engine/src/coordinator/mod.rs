//! The streaming coordinator: one execution cycle at a time.
//!
//! A cycle takes the source messages that are ready (up to
//! `max_batches_per_cycle`), filters late rows and extracts watermarks per
//! batch in arrival order, executes the operator graph once at the resulting
//! pipeline watermark, then publishes to materialized views, subscriptions
//! and sinks, and records metrics. DDL is applied between cycles. The
//! coordinator runs on its own thread (the compute thread); everything it
//! touches goes through the [`PipelineCallback`] seam.

pub mod callback;
mod checkpointing;
pub mod connector;
pub mod streams;

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::FutureExt;

use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{EngineError, Result};
use crate::sources::{SourceEvent, SourceMessage};
pub use callback::{
    BarrierOutcome, BatchMap, CheckpointAssignmentFence, CheckpointAttempt, CheckpointLifecycle,
    CheckpointReport, ControlMsg, CycleError, CycleExecution, CycleOutcome, OutputPublication,
    PipelineCallback, RuntimeControl, SourceIntake, FLAG_MANUAL, FLAG_SHUTDOWN,
};
pub use connector::{CheckpointConfig, ConnectorPipelineCallback, SharedOutputs};
pub use streams::StreamProducer;

/// What the coordinator reports about the pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineStatus {
    /// Every source finished and its data went through a final cycle.
    pub finished: bool,
    /// Why the pipeline stopped for good (deterministic failure), if it did.
    pub halted: Option<String>,
    /// A consistency fault: intake stopped; recovery replays from the last
    /// committed checkpoint.
    pub fault: Option<String>,
    /// Cycles run so far.
    pub cycles: u64,
    /// Whether the coordinator has shut down.
    pub stopped: bool,
    /// The coordinator thread died of this panic (the pipeline is gone).
    pub panicked: Option<String>,
}

/// Commands for the coordinator.
pub enum Command {
    /// Apply DDL; acknowledged once applied.
    Control(ControlMsg, oneshot::Sender<()>),
    /// Take a checkpoint now.
    Checkpoint(oneshot::Sender<std::result::Result<CheckpointReport, String>>),
    /// Settle and close everything (or, with `discard`, throw away sink
    /// output), then stop.
    Shutdown {
        /// Receives the outcome.
        reply: oneshot::Sender<std::result::Result<(), String>>,
        /// Discard unpublished sink output instead of publishing it.
        discard: bool,
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
    /// Cycles run since the last committed checkpoint.
    cycles_since_checkpoint: u64,
}

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
        }
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
        loop {
            let step = AssertUnwindSafe(self.step(&mut idle, &mut checkpoints))
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
                    self.fail(reason);
                }
            }
        }
    }

    /// One turn of the loop: held input, a command, a timer or new input.
    async fn step(
        &mut self,
        idle: &mut tokio::time::Interval,
        checkpoints: &mut Option<tokio::time::Interval>,
    ) -> Step {
        if checkpoints.is_none() {
            if let Some(period) = self.callback.checkpoint_interval() {
                let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                *checkpoints = Some(i);
            }
        }
        if !self.stopped_intake && !self.held.is_empty() {
            let n = self.held.len().min(self.config.max_batches_per_cycle);
            let batch: Vec<SourceMessage> = self.held.drain(..n).collect();
            self.process(batch).await;
            yield_to_timers().await;
            self.check_halt_and_fault();
            return Step::Continue;
        }
        tokio::select! {
            biased;
            cmd = self.commands.recv() => match cmd {
                Some(Command::Control(msg, ack)) => {
                    self.callback.apply_control(msg);
                    // Recovered sources may all be finished already: one
                    // cycle closes what remains and reports completion.
                    if self.callback.all_sources_finished() && !self.status.borrow().finished {
                        self.run_cycle(BatchMap::default(), 0, 0).await;
                    }
                    let _ = ack.send(());
                }
                Some(Command::Checkpoint(reply)) => {
                    let r = match self.run_checkpoint(FLAG_MANUAL).await {
                        BarrierOutcome::Committed(report) => Ok(report),
                        BarrierOutcome::Aborted(e) | BarrierOutcome::Failed(e) => Err(e),
                    };
                    let _ = reply.send(r);
                }
                Some(Command::Shutdown { reply, discard }) => {
                    let r = self.shutdown(discard).await;
                    let _ = reply.send(r);
                    return Step::Stop;
                }
                None => {
                    let _ = self.shutdown(true).await;
                    return Step::Stop;
                }
            },
            _ = async {
                match checkpoints.as_mut() {
                    Some(i) => {
                        i.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }, if !self.stopped_intake => {
                // Nothing changed since the last checkpoint: nothing to capture.
                if self.cycles_since_checkpoint > 0 {
                    let _ = self.run_checkpoint(0).await;
                }
            }
            _ = idle.tick(), if !self.stopped_intake => {
                let before = self.callback.current_watermark();
                self.callback.tick_idle_watermark();
                if self.callback.current_watermark() != before {
                    self.run_cycle(BatchMap::default(), 0, 0).await;
                }
            }
            msg = self.source_rx.recv(), if !self.stopped_intake => {
                if let Some(first) = msg {
                    let batch = self.gather(first);
                    self.process(batch).await;
                    yield_to_timers().await;
                }
            }
        }
        self.check_halt_and_fault();
        Step::Continue
    }

    fn check_halt_and_fault(&mut self) {
        if let Some(reason) = self.callback.take_pipeline_halt() {
            self.stop_intake(reason, false);
        } else if let Some(reason) = self.callback.take_pipeline_fault() {
            self.stop_intake(reason, true);
        }
    }

    /// Stop taking input: a halt is permanent; a fault asks for recovery.
    /// Either way nothing unpublished becomes visible.
    fn stop_intake(&mut self, reason: String, fault: bool) {
        if self.stopped_intake {
            return;
        }
        if fault {
            tracing::warn!(%reason, "consistency fault; intake stopped for recovery");
        } else {
            tracing::info!(%reason, "pipeline halted");
        }
        self.callback.invalidate_subscriptions(&reason);
        if let Err(e) = self.callback.abort_sinks() {
            tracing::error!(error = %e, "discarding sink output failed");
        }
        self.source_rx.close();
        self.held.clear();
        self.stopped_intake = true;
        self.status.send_modify(|s| {
            if fault {
                s.fault = Some(reason);
            } else {
                s.halted = Some(reason);
            }
        });
    }

    fn halt(&mut self, reason: String) {
        self.stop_intake(reason, false);
    }

    /// A failed cycle or a panic: a fault when checkpointing is on (the
    /// input is replayed from the last checkpoint, never dropped), a halt
    /// otherwise.
    fn fail(&mut self, reason: String) {
        let fault = self.callback.fault_on_cycle_error();
        self.stop_intake(reason, fault);
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
            if let Err(reason) = self.callback.prepare_source_intake() {
                return self.halt(reason);
            }
            match m.event {
                SourceEvent::Batch(b) => {
                    let kept = match self.callback.filter_late_rows(&m.source, &b) {
                        Ok(k) => k,
                        Err(e) => return self.halt(e.to_string()),
                    };
                    let Some(kept) = kept else { continue };
                    if let Err(e) = self.callback.extract_watermark(&m.source, &kept, i64::MIN) {
                        return self.halt(e.to_string());
                    }
                    events += kept.num_rows() as u64;
                    count += 1;
                    batches.entry(m.source).or_default().push(kept);
                }
                SourceEvent::Watermark(ts) => self.callback.advance_source_watermark(&m.source, ts),
                SourceEvent::Finished { offset } => self.callback.finish_source(&m.source, offset),
                // A barrier outside alignment belongs to an abandoned attempt.
                SourceEvent::Barrier { .. } => {}
                SourceEvent::Failed(reason) => return self.halt(reason),
                SourceEvent::Panicked(reason) => return self.fail(reason),
            }
        }
        self.run_cycle(batches, events, count).await;
    }

    async fn run_cycle(&mut self, batches: BatchMap, events: u64, count: u64) {
        tracing::trace!(events, batches = count, "cycle");
        if let Err(reason) = self.callback.pin_source_frontiers_for_new_cycle() {
            return self.halt(reason);
        }
        let started = Instant::now();
        let watermark = self.callback.current_watermark();
        let outcome = match self.callback.execute_cycle(&batches, watermark).await {
            Ok(o) => o,
            Err(e) => {
                self.callback.note_cycle_error();
                return self.fail(e.to_string());
            }
        };
        let executed = Instant::now();
        let published = self
            .callback
            .update_mv_stores(&outcome.results)
            .and_then(|_| self.callback.push_to_streams(&outcome.results));
        if let Err(e) = published {
            self.callback.abort_subscription_output();
            return self.fail(e.to_string());
        }
        let stored = Instant::now();
        if let Err(e) = self.callback.write_to_sinks(&outcome.results, None).await {
            self.callback.abort_subscription_output();
            return self.fail(e.to_string());
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

    /// One checkpoint: reserve, inject barriers, align (holding input that
    /// follows a source's barrier), capture and commit, then replay held input.
    async fn run_checkpoint(&mut self, flags: u64) -> BarrierOutcome {
        let started = Instant::now();
        let deadline = started + self.callback.alignment_timeout();
        let attempt = match self.callback.reserve_checkpoint_attempt(deadline).await {
            Ok(a) => a,
            Err(e) => {
                self.callback.record_checkpoint_admission_failure(&e);
                return BarrierOutcome::Failed(e);
            }
        };
        if let Err(e) = self
            .callback
            .publish_checkpoint_prepare(attempt, started, deadline, flags, None)
            .await
        {
            return self.abandon(attempt, flags, e).await;
        }
        let mut waiting: FxHashSet<std::sync::Arc<str>> = self
            .callback
            .inject_source_barriers(attempt)
            .into_iter()
            .collect();
        let mut offsets = FxHashMap::default();
        let mut held = Vec::new();
        while !waiting.is_empty() {
            if Instant::now() >= deadline {
                self.held.extend(held);
                let names: Vec<String> = waiting.iter().map(|s| s.to_string()).collect();
                let reason = format!(
                    "alignment timed out waiting for the barrier of {}",
                    names.join(", ")
                );
                return self.abandon(attempt, flags, reason).await;
            }
            let next = match self.held.pop_front() {
                Some(m) => Some(m),
                None => {
                    match tokio::time::timeout_at(deadline.into(), self.source_rx.recv()).await {
                        Ok(m) => m,
                        Err(_) => {
                            self.held.extend(held);
                            let names: Vec<String> =
                                waiting.iter().map(|s| s.to_string()).collect();
                            let reason = format!(
                                "alignment timed out waiting for the barrier of {}",
                                names.join(", ")
                            );
                            return self.abandon(attempt, flags, reason).await;
                        }
                    }
                }
            };
            let Some(m) = next else {
                self.held.extend(held);
                return self
                    .abandon(attempt, flags, "source input closed".into())
                    .await;
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
                    let name = m.source.clone();
                    self.process(vec![m]).await;
                    waiting.remove(&name);
                    offsets.insert(name.to_string(), cp);
                }
                _ => self.process(vec![m]).await,
            }
            if self.stopped_intake {
                return self
                    .abandon(
                        attempt,
                        flags,
                        "the pipeline stopped during alignment".into(),
                    )
                    .await;
            }
        }
        let mut outcome = match self.callback.drain_checkpoint_edges_until(deadline).await {
            Err(e) => BarrierOutcome::Failed(e.to_string()),
            Ok(()) => match self.callback.reserve_subscription_cut(attempt) {
                Err(e) => BarrierOutcome::Failed(format!("cutting subscription logs: {e}")),
                Ok(()) => {
                    self.callback
                        .checkpoint_with_barrier(offsets, attempt, started, deadline, flags, None)
                        .await
                }
            },
        };
        match &outcome {
            BarrierOutcome::Committed(_) => {
                self.cycles_since_checkpoint = 0;
                if let Err(e) = self.callback.publish_barrier(attempt) {
                    self.callback
                        .record_checkpoint_continuation_fault(attempt, &e);
                    outcome = BarrierOutcome::Failed(e);
                }
            }
            BarrierOutcome::Failed(reason) => {
                self.callback.abort_subscription_cut(attempt);
                self.callback.record_checkpoint_failure(attempt.id, reason);
            }
            BarrierOutcome::Aborted(_) => self.callback.abort_subscription_cut(attempt),
        }
        // Held input follows the barrier: it is replayed before new input.
        for m in held.into_iter().rev() {
            self.held.push_front(m);
        }
        self.check_halt_and_fault();
        outcome
    }

    async fn abandon(
        &mut self,
        attempt: CheckpointAttempt,
        flags: u64,
        reason: String,
    ) -> BarrierOutcome {
        if let Err(e) = self
            .callback
            .cancel_source_barrier_attempt(attempt, &reason)
            .await
        {
            tracing::warn!(error = %e, "cancelling source barriers failed");
        }
        if let Err(e) = self
            .callback
            .abandon_checkpoint_attempt(attempt, &reason, flags, None)
            .await
        {
            self.callback.record_checkpoint_failure(attempt.id, &e);
            return BarrierOutcome::Failed(e);
        }
        BarrierOutcome::Aborted(reason)
    }

    async fn shutdown(&mut self, discard: bool) -> std::result::Result<(), String> {
        let mut result = Ok(());
        if !discard && !self.stopped_intake && self.callback.settles_on_shutdown() {
            // The shutdown checkpoint settles every open sink epoch.
            match self.run_checkpoint(FLAG_SHUTDOWN).await {
                BarrierOutcome::Committed(_) => {
                    if let Err(e) = self.callback.settle_sink_epoch_for_shutdown().await {
                        result = Err(format!("settling sink epochs: {e}"));
                    }
                }
                BarrierOutcome::Aborted(e) | BarrierOutcome::Failed(e) => {
                    result = Err(format!("the shutdown checkpoint did not commit: {e}"));
                }
            }
        }
        self.source_rx.close();
        let closed = if discard || self.stopped_intake || result.is_err() {
            self.callback.abort_sinks()
        } else {
            self.callback.close_sinks().await
        };
        self.callback.invalidate_subscriptions("shutdown");
        self.status.send_modify(|s| s.stopped = true);
        result.and(closed)
    }
}

/// A running coordinator.
pub struct CoordinatorHandle {
    commands: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<PipelineStatus>,
    thread: Option<std::thread::JoinHandle<()>>,
    death: CoordinatorDeath,
}

/// Why the coordinator thread died, once it did: shared with everything
/// that talks to it (push sources too), so a call after the death reports
/// the panic instead of a bare "not running".
#[derive(Clone, Default, Debug)]
pub struct CoordinatorDeath(Arc<OnceLock<String>>);

impl CoordinatorDeath {
    /// The panic message, if the coordinator thread died.
    pub fn reason(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// The error for a call that found the coordinator gone.
    pub fn not_running(&self) -> EngineError {
        match self.reason() {
            Some(r) => EngineError::CoordinatorPanicked(r.to_string()),
            None => EngineError::NotRunning,
        }
    }
}

impl CoordinatorHandle {
    /// Run `coordinator` on a dedicated compute thread.
    pub fn spawn<C: PipelineCallback>(
        callback: C,
        source_rx: mpsc::Receiver<SourceMessage>,
        config: CoordinatorConfig,
    ) -> Result<Self> {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = watch::channel(PipelineStatus::default());
        let last_word = status_tx.clone();
        let coordinator = StreamingCoordinator::new(callback, source_rx, cmd_rx, status_tx, config);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| EngineError::Internal(format!("coordinator runtime: {e}")))?;
        let death = CoordinatorDeath::default();
        let note = death.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-coordinator".into())
            .spawn(move || {
                let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    runtime.block_on(coordinator.run())
                }));
                if let Err(payload) = run {
                    // The loop contains panics itself; this is the last net.
                    let reason = crate::panic::panic_message(&*payload);
                    tracing::error!(%reason, "the coordinator thread panicked");
                    let _ = note.0.set(reason.clone());
                    last_word.send_modify(|s| {
                        s.panicked = Some(reason);
                        s.stopped = true;
                    });
                }
            })
            .map_err(|e| EngineError::Internal(format!("coordinator thread: {e}")))?;
        Ok(Self {
            commands: cmd_tx,
            status: status_rx,
            thread: Some(thread),
            death,
        })
    }

    /// Why the coordinator thread died, shared with whoever needs to tell.
    pub fn death(&self) -> CoordinatorDeath {
        self.death.clone()
    }

    /// Apply DDL and wait until it is in effect.
    pub async fn control(&self, msg: ControlMsg) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Control(msg, tx))
            .map_err(|_| self.death.not_running())?;
        rx.await.map_err(|_| self.death.not_running())
    }

    /// The latest status.
    pub fn status(&self) -> PipelineStatus {
        self.status.borrow().clone()
    }

    /// Take a checkpoint now and wait for its outcome.
    pub async fn checkpoint(&self) -> Result<CheckpointReport> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Checkpoint(tx))
            .map_err(|_| self.death.not_running())?;
        rx.await
            .map_err(|_| self.death.not_running())?
            .map_err(EngineError::Checkpoint)
    }

    /// A receiver of status updates.
    pub fn status_receiver(&self) -> watch::Receiver<PipelineStatus> {
        self.status.clone()
    }

    /// Wait until every source finished or the pipeline halted.
    pub async fn wait_finished(&self) -> Result<()> {
        wait_finished(self.status.clone()).await
    }
}

/// Wait on a status receiver until every source finished or the pipeline halted.
pub async fn wait_finished(mut rx: watch::Receiver<PipelineStatus>) -> Result<()> {
    let waited = rx
        .wait_for(|s| s.finished || s.halted.is_some() || s.fault.is_some() || s.stopped)
        .await
        .map(|s| s.clone());
    // Without a sender any more, the last status says whether it died.
    let s = match waited {
        Ok(s) => s,
        Err(_) => rx.borrow().clone(),
    };
    status_result(s)
}

/// The error a final status stands for, if any.
fn status_result(s: PipelineStatus) -> Result<()> {
    match (s.panicked, s.halted, s.fault) {
        (Some(p), _, _) => Err(EngineError::CoordinatorPanicked(p)),
        (None, Some(h), _) => Err(EngineError::Halted(h)),
        (None, None, Some(f)) => Err(EngineError::Fault(f)),
        (None, None, None) if s.finished || s.stopped => Ok(()),
        (None, None, None) => Err(EngineError::NotRunning),
    }
}

impl CoordinatorHandle {
    /// Close sinks (or discard their output if halted or `discard`) and
    /// stop the coordinator.
    pub async fn shutdown(&mut self, discard: bool) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Shutdown { reply: tx, discard })
            .is_err()
        {
            return Err(self.death.not_running());
        }
        let r = rx.await;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let r = r.map_err(|_| self.death.not_running())?;
        let status = self.status.borrow().clone();
        match (r, status.panicked, status.halted, status.fault) {
            (_, Some(p), _, _) => Err(EngineError::CoordinatorPanicked(p)),
            (_, None, Some(h), _) => Err(EngineError::Halted(h)),
            (_, None, None, Some(f)) => Err(EngineError::Fault(f)),
            (Err(e), None, None, None) => Err(EngineError::Halted(format!("shutdown: {e}"))),
            (Ok(()), None, None, None) => Ok(()),
        }
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
