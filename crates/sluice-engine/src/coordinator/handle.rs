//! The handle to a running coordinator: its compute thread, commands,
//! status, and what every caller is told once the thread is gone.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::{
    CheckpointReport, Command, ControlMsg, CoordinatorConfig, PipelineCallback, PipelineStatus,
    StreamingCoordinator,
};
use crate::error::{EngineError, Result};
use crate::seam::CoordinatorDeath;
use crate::sources::SourceMessage;

/// A running coordinator.
pub struct CoordinatorHandle {
    commands: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<PipelineStatus>,
    thread: Option<std::thread::JoinHandle<()>>,
    death: CoordinatorDeath,
    abort: AbortRequest,
}

/// A discarding shutdown asked for, seen by the coordinator while it
/// cannot read its commands: a checkpoint attempt waiting in alignment for
/// another node's barrier (a node that died sends none) gives up at once
/// instead of at the alignment timeout, so an abort (a node of a split
/// stopping for a change of its list) takes moments, not seconds. Its
/// output is discarded anyway.
#[derive(Debug, Clone, Default)]
pub(crate) struct AbortRequest(Arc<AbortState>);

#[derive(Debug, Default)]
struct AbortState {
    raised: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
}

impl AbortRequest {
    /// Ask; wakes a coordinator waiting in [`Self::raised`].
    fn raise(&self) {
        self.0
            .raised
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.wake.notify_waiters();
    }

    /// Whether it was asked.
    pub(super) fn is_raised(&self) -> bool {
        self.0.raised.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once it is asked.
    pub(super) async fn raised(&self) {
        let wake = self.0.wake.notified();
        if !self.is_raised() {
            wake.await;
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
        let abort = coordinator.abort_request();
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
                    note.record(reason.clone());
                    last_word.send_modify(|s| {
                        s.panicked = Some(Arc::new(EngineError::CoordinatorPanicked(reason)));
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
            abort,
        })
    }

    /// Why the coordinator thread died, shared with whoever needs to tell.
    pub fn death(&self) -> CoordinatorDeath {
        self.death.clone()
    }

    /// Apply DDL and wait until it is in effect. An error means it was
    /// not applied: a refused statement leaves the pipeline running; a
    /// failed `Recover` or `Start` halted it.
    pub async fn control(&self, msg: ControlMsg) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Control(msg, tx))
            .map_err(|_| self.death.not_running())?;
        rx.await.map_err(|_| self.death.not_running())?
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
            .map_err(|e| {
                // A refusal, or the pipeline's stop, says so already.
                let says = matches!(
                    e,
                    EngineError::Fault { .. }
                        | EngineError::Halted { .. }
                        | EngineError::NotRunning
                        | EngineError::CoordinatorPanicked(_)
                ) || matches!(
                    e.root(),
                    EngineError::Checkpoint(_) | EngineError::CheckpointFailed { .. }
                );
                if says {
                    e
                } else {
                    e.context("checkpoint failed")
                }
            })
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
    match s.error() {
        Some(e) => Err(e),
        None if s.finished || s.stopped => Ok(()),
        None => Err(EngineError::NotRunning),
    }
}

impl CoordinatorHandle {
    /// Close sinks (or discard their output if halted or `discard`) and
    /// stop the coordinator.
    pub async fn shutdown(&mut self, discard: bool) -> Result<()> {
        self.shutdown_as(discard, false).await
    }

    /// As [`Self::shutdown`], for a process that exits right after: the
    /// operators' state is given up instead of freed.
    pub async fn shutdown_for_exit(&mut self, discard: bool) -> Result<()> {
        self.shutdown_as(discard, true).await
    }

    async fn shutdown_as(&mut self, discard: bool, exiting: bool) -> Result<()> {
        if discard {
            self.abort.raise();
        }
        let (tx, rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Shutdown {
                reply: tx,
                discard,
                exiting,
            })
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
        // A panic, halt or fault outranks how the shutdown itself went.
        if status.panicked.is_some() || status.halted.is_some() || status.fault.is_some() {
            return status_result(status);
        }
        r.map_err(|e| EngineError::halted(Arc::new(e.context("shutdown"))))
    }
}
