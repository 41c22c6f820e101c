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
pub mod connector;

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{EngineError, Result};
use crate::sources::{SourceEvent, SourceMessage};
pub use callback::{
    BatchMap, ControlMsg, CycleError, CycleExecution, CycleOutcome, OutputPublication,
    PipelineCallback, RuntimeControl, SourceIntake,
};
pub use connector::{ConnectorPipelineCallback, SharedOutputs};

/// What the coordinator reports about the pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineStatus {
    /// Every source finished and its data went through a final cycle.
    pub finished: bool,
    /// Why the pipeline stopped, if it halted.
    pub halted: Option<String>,
    /// Cycles run so far.
    pub cycles: u64,
    /// Whether the coordinator has shut down.
    pub stopped: bool,
}

/// Commands for the coordinator.
pub enum Command {
    /// Apply DDL; acknowledged once applied.
    Control(ControlMsg, oneshot::Sender<()>),
    /// Settle and close everything (or, with `discard`, throw away sink
    /// output), then stop.
    Shutdown {
        /// Receives the outcome.
        reply: oneshot::Sender<std::result::Result<(), String>>,
        /// Discard unpublished sink output instead of publishing it.
        discard: bool,
    },
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
    halted: Option<String>,
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
            halted: None,
        }
    }

    /// Run until shut down.
    pub async fn run(mut self) {
        let mut ticker = tokio::time::interval(self.config.idle_tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Control(msg, ack)) => {
                        self.callback.apply_control(msg);
                        let _ = ack.send(());
                    }
                    Some(Command::Shutdown { reply, discard }) => {
                        let r = self.shutdown(discard).await;
                        let _ = reply.send(r);
                        return;
                    }
                    None => {
                        let _ = self.shutdown(true).await;
                        return;
                    }
                },
                msg = self.source_rx.recv(), if self.halted.is_none() => {
                    if let Some(first) = msg {
                        self.cycle(first).await;
                    }
                }
                _ = ticker.tick(), if self.halted.is_none() => {
                    let before = self.callback.current_watermark();
                    self.callback.tick_idle_watermark();
                    if self.callback.current_watermark() != before {
                        self.run_cycle(BatchMap::default(), 0, 0).await;
                    }
                }
            }
            if let Some(reason) = self.callback.take_pipeline_halt() {
                self.halt(reason);
            }
        }
    }

    fn halt(&mut self, reason: String) {
        if self.halted.is_some() {
            return;
        }
        tracing::info!(%reason, "pipeline halted");
        self.callback.invalidate_subscriptions(&reason);
        if let Err(e) = self.callback.abort_sinks() {
            tracing::error!(error = %e, "discarding sink output failed");
        }
        self.source_rx.close();
        self.halted = Some(reason.clone());
        self.status.send_modify(|s| s.halted = Some(reason));
    }

    async fn cycle(&mut self, first: SourceMessage) {
        let mut messages = vec![first];
        while messages.len() < self.config.max_batches_per_cycle {
            match self.source_rx.try_recv() {
                Ok(m) => messages.push(m),
                Err(_) => break,
            }
        }
        let mut batches = BatchMap::default();
        let (mut events, mut count) = (0u64, 0u64);
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
                SourceEvent::Finished => self.callback.finish_source(&m.source),
                SourceEvent::Failed(reason) => return self.halt(reason),
            }
        }
        self.run_cycle(batches, events, count).await;
    }

    async fn run_cycle(&mut self, batches: BatchMap, events: u64, count: u64) {
        if let Err(reason) = self.callback.pin_source_frontiers_for_new_cycle() {
            return self.halt(reason);
        }
        let started = Instant::now();
        let watermark = self.callback.current_watermark();
        let outcome = match self.callback.execute_cycle(&batches, watermark).await {
            Ok(o) => o,
            Err(e) => {
                self.callback.note_cycle_error();
                return self.halt(e.to_string());
            }
        };
        let executed = Instant::now();
        let published = self
            .callback
            .update_mv_stores(&outcome.results)
            .and_then(|_| self.callback.push_to_streams(&outcome.results));
        if let Err(e) = published {
            self.callback.abort_subscription_output();
            return self.halt(e.to_string());
        }
        let stored = Instant::now();
        if let Err(e) = self.callback.write_to_sinks(&outcome.results, None).await {
            self.callback.abort_subscription_output();
            return self.halt(e.to_string());
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
        self.status.send_modify(|s| {
            s.cycles += 1;
            s.finished = finished;
        });
    }

    async fn shutdown(&mut self, discard: bool) -> std::result::Result<(), String> {
        self.source_rx.close();
        let result = if discard || self.halted.is_some() {
            self.callback.abort_sinks()
        } else {
            self.callback.close_sinks().await
        };
        self.callback.invalidate_subscriptions("shutdown");
        self.status.send_modify(|s| s.stopped = true);
        result
    }
}

/// A running coordinator.
pub struct CoordinatorHandle {
    commands: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<PipelineStatus>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        let coordinator = StreamingCoordinator::new(callback, source_rx, cmd_rx, status_tx, config);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| EngineError::Internal(format!("coordinator runtime: {e}")))?;
        let thread = std::thread::Builder::new()
            .name("sluice-coordinator".into())
            .spawn(move || runtime.block_on(coordinator.run()))
            .map_err(|e| EngineError::Internal(format!("coordinator thread: {e}")))?;
        Ok(Self {
            commands: cmd_tx,
            status: status_rx,
            thread: Some(thread),
        })
    }

    /// Apply DDL and wait until it is in effect.
    pub async fn control(&self, msg: ControlMsg) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Control(msg, tx))
            .map_err(|_| EngineError::NotRunning)?;
        rx.await.map_err(|_| EngineError::NotRunning)
    }

    /// The latest status.
    pub fn status(&self) -> PipelineStatus {
        self.status.borrow().clone()
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
    {
        let s = rx
            .wait_for(|s| s.finished || s.halted.is_some() || s.stopped)
            .await
            .map_err(|_| EngineError::NotRunning)?
            .clone();
        match s.halted {
            Some(h) => Err(EngineError::Halted(h)),
            None => Ok(()),
        }
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
            return Err(EngineError::NotRunning);
        }
        let r = rx.await.map_err(|_| EngineError::NotRunning)?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let halted = self.status.borrow().halted.clone();
        match (r, halted) {
            (_, Some(h)) => Err(EngineError::Halted(h)),
            (Err(e), None) => Err(EngineError::Halted(format!("closing sinks failed: {e}"))),
            (Ok(()), None) => Ok(()),
        }
    }
}
