//! The types that cross the coordinator seam, and the one rule that
//! decides what a failure does to the pipeline.
//!
//! # Architecture
//!
//! This is a leaf module: it depends on [`crate::error`] and
//! [`crate::options`] only, so the coordinator, its callback, the sources
//! and the metrics can all share these types without depending on each
//! other (`metrics` needs [`CheckpointReport`], `sources` needs
//! [`CoordinatorDeath`], the callback needs [`CheckpointConfig`]).
//!
//! ```text
//!   coordinator ──► sources ──► metrics
//!        │             │           │
//!        └─────────────┴─────┬─────┘
//!                            ▼
//!                          seam ──► error, options
//! ```
//!
//! Every failure reaches the coordinator as a [`CycleError`]: the typed
//! [`EngineError`] (with its stable code) plus the stage it happened in.
//! [`disposition`] alone decides from it whether the pipeline halts,
//! faults for recovery, or carries on.

use std::sync::{Arc, OnceLock};

use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use sluice_storage::CheckpointStore;
use thiserror::Error;

use crate::error::EngineError;
use crate::options::Delivery;

/// Batches by source or stream name.
pub type BatchMap = FxHashMap<Arc<str>, Vec<RecordBatch>>;

/// What a successful cycle produced.
#[derive(Debug, Default)]
pub struct CycleOutcome {
    /// Output batches of every source, stream and view touched this cycle.
    pub results: BatchMap,
}

/// One checkpoint attempt; its id was reserved durably and is never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CheckpointAttempt {
    /// The reserved checkpoint id.
    pub id: u64,
}

/// Cluster assignment fence of an attempt: the generation of the vnode
/// assignment its capture belongs to. Single-node pipelines have none; a
/// clustered one records it in the manifest, and the commit counts only
/// while that generation still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointAssignmentFence {
    /// Assignment generation.
    pub generation: u64,
}

/// The answer to `checkpoint_assignment_for_admission`: under which
/// assignment a new attempt may capture, or why it may not.
#[derive(Debug, Clone)]
pub enum CheckpointAssignmentAdmission {
    /// No cluster: the attempt captures everything, with no fence.
    Unfenced,
    /// The attempt captures what this node owns at the fence's generation.
    Fenced(CheckpointAssignmentFence),
    /// The attempt may not go on (this node no longer owns what it would
    /// capture, or the assignment cannot be read); it is abandoned before
    /// any barrier.
    Refused(Arc<EngineError>),
}

impl CheckpointAssignmentAdmission {
    /// The fence to pass on, or the refusal.
    pub fn fence(self) -> Result<Option<CheckpointAssignmentFence>, Arc<EngineError>> {
        match self {
            Self::Unfenced => Ok(None),
            Self::Fenced(f) => Ok(Some(f)),
            Self::Refused(e) => Err(e),
        }
    }
}

/// Wakes a follower's coordinator for checkpoint control the leader
/// announced (a Prepare to follow, or the abort of one). A notification
/// may come while the coordinator cannot act on it (it is aligning, or its
/// tail slots are full), and [`tokio::sync::Notify`] keeps at most one, so
/// the coordinator also asks every `fallback` on a fixed schedule (which
/// input does not postpone): no announcement waits longer than that once
/// the coordinator is free to act.
#[derive(Debug, Clone)]
pub struct CheckpointControlWake {
    notify: Arc<tokio::sync::Notify>,
    fallback: std::time::Duration,
}

impl CheckpointControlWake {
    /// Woken by `notify`, and asked every `fallback` regardless.
    pub fn new(notify: Arc<tokio::sync::Notify>, fallback: std::time::Duration) -> Self {
        Self { notify, fallback }
    }

    /// Resolves when notified.
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The period of the fixed schedule.
    pub fn fallback(&self) -> std::time::Duration {
        self.fallback
    }
}

/// What servicing the leader's checkpoint control did on a follower
/// (`ClusterCoordination::service_checkpoint_control`). A follower never
/// originates an attempt: each one named here was reserved and prepared
/// by the leader.
#[derive(Debug, Clone)]
pub enum CheckpointControlOutcome {
    /// No announcement this node has not already acted on.
    Idle,
    /// The announcement could not be read or admitted, before any attempt
    /// was identified: counted as an admission failure; nothing else
    /// changes (the leader's deadline ends the attempt).
    AdmissionFailed(Arc<EngineError>),
    /// The leader prepared `attempt` under `fence` and this node admitted
    /// it: the coordinator injects its barriers and aligns by `deadline`,
    /// then captures this node's part (which the callback acknowledges).
    /// Given up before capture, it is nacked through
    /// `cancel_source_barrier_attempt`, never abandoned (the id is the
    /// leader's).
    Started {
        /// The leader's attempt.
        attempt: CheckpointAttempt,
        /// The assignment the leader admitted it under.
        fence: Option<CheckpointAssignmentFence>,
        /// When the leader stops waiting for this node's answer.
        deadline: std::time::Instant,
        /// The leader's flags ([`FLAG_MANUAL`], [`FLAG_SHUTDOWN`]).
        flags: u64,
    },
    /// The leader decided `attempt` (abort) before this node captured it:
    /// the coordinator resolves local state through
    /// `resolve_authoritative_follower_abort` and publishes nothing.
    Aborted {
        /// The aborted attempt.
        attempt: CheckpointAttempt,
    },
    /// `attempt` was identified but could not be admitted here (this node
    /// does not own what the fence says, a part of it is unreadable): it
    /// is recorded as that attempt's failure, and the callback has
    /// answered the leader with a negative acknowledgement.
    Failed {
        /// The attempt that failed.
        attempt: CheckpointAttempt,
        /// Why.
        error: Arc<EngineError>,
    },
}

/// Checkpoint flag: triggered by hand (`CHECKPOINT`, `Database::checkpoint`).
pub const FLAG_MANUAL: u64 = 1;
/// Checkpoint flag: the final checkpoint of a clean shutdown.
pub const FLAG_SHUTDOWN: u64 = 2;

/// What a committed checkpoint cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Checkpoint id.
    pub id: u64,
    /// From reservation to durable manifest and committed sinks.
    pub duration: std::time::Duration,
    /// Bytes of state written.
    pub state_bytes: u64,
    /// The manifest's creation time (ms since the epoch).
    pub created_ms: i64,
}

/// How a checkpoint attempt ended.
#[derive(Debug, Clone)]
pub enum BarrierOutcome {
    /// Durable, sinks committed.
    Committed(CheckpointReport),
    /// Captured; the durable half (encode, write, manifest) runs as a
    /// tracked tail off the compute thread. Its outcome comes from the
    /// callback's `complete_checkpoint_tail` once `next_checkpoint_tail`
    /// names the attempt.
    Tailing(CheckpointAttempt),
    /// Given up before capture (alignment timeout, shutdown), or cancelled
    /// before its manifest because recovery took over; nothing to undo.
    Aborted(Arc<EngineError>),
    /// Failed during or after capture.
    Failed(Arc<EngineError>),
}

/// Checkpointing of one pipeline.
pub struct CheckpointConfig {
    /// Where checkpoints go.
    pub store: CheckpointStore,
    /// Periodic interval (None: only manual and shutdown checkpoints).
    pub interval: Option<std::time::Duration>,
    /// Alignment timeout.
    pub alignment_timeout: std::time::Duration,
    /// How long an attempt may take until its manifest is durable.
    pub timeout: std::time::Duration,
    /// Committed checkpoints kept.
    pub retain: usize,
    /// Percent of the time a tail may work while the pipeline is busy.
    pub tail_share: u8,
    /// Delivery guarantee.
    pub delivery: Delivery,
    /// Fingerprint of the pipeline definition.
    pub fingerprint: String,
    /// Committed epochs retained per stream for resuming consumers.
    pub history_epochs: usize,
    /// Bytes of committed output retained per stream.
    pub history_bytes: usize,
}

/// A failure the coordinator must act on: the typed error and the stage it
/// happened in. The stage is what [`disposition`] decides by; the error
/// (with its code) is what the user is told.
#[derive(Debug, Error)]
pub enum CycleError {
    /// A source's input could not be read or is malformed (a reader error,
    /// a bad event time, a batch of the wrong shape). Replaying it would
    /// fail the same way.
    #[error(transparent)]
    Source(EngineError),
    /// An operator failed.
    #[error(transparent)]
    Execution(EngineError),
    /// A process function's call was rejected (a limit, a handler error or
    /// a panic), or anything failed in a cycle after a process function
    /// accepted calls.
    #[error(transparent)]
    Process(EngineError),
    /// Output could not be published (a materialized view, a subscription,
    /// a sink write).
    #[error("output: {0}")]
    Output(#[source] EngineError),
    /// A component, or the coordinator loop itself, panicked.
    #[error(transparent)]
    Panicked(EngineError),
    /// A checkpoint attempt failed before its manifest was durable.
    #[error(transparent)]
    Checkpoint(EngineError),
    /// The cluster aborted a checkpoint this node took part in, for a
    /// reason that was not this node's (another owner nacked or was late):
    /// its outcome is known, nothing of it was committed, and the sinks'
    /// sealed epochs stay pending for the next checkpoint. Refused in every
    /// mode: recovering would not change anything.
    #[error(transparent)]
    CheckpointAborted(EngineError),
    /// A checkpoint was refused because this process may no longer write
    /// the pipeline's store: its store lease was lost or taken over
    /// (`SLC-STO-006`), or the commit authority refused the commit
    /// (`SLC-STO-008`: a cluster leader that was deposed while it wrote).
    #[error(transparent)]
    Fenced(EngineError),
    /// Something broke after a checkpoint became durable (a sink's epoch
    /// could not be committed, a subscription cut not published).
    #[error(transparent)]
    AfterDurable(EngineError),
    /// A follower could not resolve its local state exactly after the
    /// leader aborted an attempt it was following: only recovery from the
    /// last committed checkpoint makes it exact again.
    #[error(transparent)]
    FollowerState(EngineError),
    /// The pipeline could not be started or restored from its checkpoint.
    #[error(transparent)]
    Startup(EngineError),
    /// A DDL statement could not be applied to the running pipeline.
    #[error(transparent)]
    Control(EngineError),
}

impl CycleError {
    /// The error as the user sees it (an output failure says so first).
    pub fn into_error(self) -> EngineError {
        match self {
            CycleError::Output(e) => e.context("output"),
            CycleError::Source(e)
            | CycleError::Execution(e)
            | CycleError::Process(e)
            | CycleError::Panicked(e)
            | CycleError::Checkpoint(e)
            | CycleError::CheckpointAborted(e)
            | CycleError::Fenced(e)
            | CycleError::AfterDurable(e)
            | CycleError::FollowerState(e)
            | CycleError::Startup(e)
            | CycleError::Control(e) => e,
        }
    }
}

/// What a failure does to the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The failing request is refused with its error; the pipeline keeps
    /// running as it was.
    Refuse,
    /// The pipeline stops for good; nothing unpublished becomes visible.
    Halt,
    /// The pipeline stops and must recover from its last committed
    /// checkpoint, which replays the input that was not yet durable.
    Fault,
}

/// The one rule deciding what `error` does to a pipeline whose checkpoints
/// keep `delivery` (None: checkpointing is off).
///
/// - A source's malformed or unreadable input halts: a replay reads the same
///   bytes and fails the same way.
/// - A failed cycle (operator, process function, output, panic) faults when
///   checkpointing is on, in every delivery mode: its input is never
///   dropped, because at-least-once must not lose rows any more than
///   exactly-once may. Without checkpoints there is nothing to recover
///   from, so it halts.
/// - A failed checkpoint faults under exactly-once (sink epochs cannot be
///   committed without it); under at-least-once it is refused and the next
///   interval tries again.
/// - A checkpoint refused because another writer now owns the store halts,
///   in every mode: recovering would restore that writer's checkpoint and
///   rewrite the sink files it publishes.
/// - A failure after a checkpoint became durable faults: recovery commits
///   that checkpoint's sink epochs again.
/// - A pipeline that cannot start or be restored halts.
/// - A DDL statement that cannot be applied is refused; the pipeline keeps
///   running.
pub fn disposition(error: &CycleError, delivery: Option<Delivery>) -> Disposition {
    disposition_with(error, delivery, delivery.is_some())
}

/// [`disposition`], with a failed cycle faulting only if
/// `fault_on_cycle_error` (the callback's
/// `CheckpointLifecycle::fault_on_cycle_error`, which by default is
/// whether checkpoints are on) and checkpoints are on (else there is
/// nothing to recover from), and halting otherwise.
pub fn disposition_with(
    error: &CycleError,
    delivery: Option<Delivery>,
    fault_on_cycle_error: bool,
) -> Disposition {
    match error {
        CycleError::Source(_) | CycleError::Startup(_) => Disposition::Halt,
        CycleError::Execution(_)
        | CycleError::Process(_)
        | CycleError::Output(_)
        | CycleError::Panicked(_) => {
            if fault_on_cycle_error && delivery.is_some() {
                Disposition::Fault
            } else {
                Disposition::Halt
            }
        }
        CycleError::Checkpoint(_) => match delivery {
            Some(Delivery::ExactlyOnce) => Disposition::Fault,
            Some(Delivery::AtLeastOnce) | None => Disposition::Refuse,
        },
        CycleError::Fenced(_) => Disposition::Halt,
        CycleError::AfterDurable(_) | CycleError::FollowerState(_) => Disposition::Fault,
        CycleError::Control(_) | CycleError::CheckpointAborted(_) => Disposition::Refuse,
    }
}

/// What the coordinator reports about the pipeline.
#[derive(Debug, Clone, Default)]
pub struct PipelineStatus {
    /// Every source finished and its data went through a final cycle.
    pub finished: bool,
    /// Why the pipeline stopped for good (deterministic failure), if it did.
    pub halted: Option<Arc<EngineError>>,
    /// A consistency fault: intake stopped; recovery replays from the last
    /// committed checkpoint.
    pub fault: Option<Arc<EngineError>>,
    /// Cycles run so far.
    pub cycles: u64,
    /// Whether the coordinator has shut down.
    pub stopped: bool,
    /// The coordinator thread died of this panic (the pipeline is gone):
    /// always [`EngineError::CoordinatorPanicked`].
    pub panicked: Option<Arc<EngineError>>,
}

impl PipelineStatus {
    /// The error this status stands for, if the pipeline died, halted or
    /// faulted (in that order of precedence).
    pub fn error(&self) -> Option<EngineError> {
        if let Some(p) = &self.panicked {
            return Some(EngineError::CoordinatorPanicked(match p.as_ref() {
                EngineError::CoordinatorPanicked(m) => m.clone(),
                other => other.to_string(),
            }));
        }
        if let Some(h) = &self.halted {
            return Some(EngineError::halted(Arc::clone(h)));
        }
        self.fault
            .as_ref()
            .map(|f| EngineError::fault(Arc::clone(f)))
    }
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

    /// Record the panic that killed the coordinator thread (the first one
    /// recorded stays).
    pub fn record(&self, reason: String) {
        let _ = self.0.set(reason);
    }

    /// The error for a call that found the coordinator gone.
    pub fn not_running(&self) -> EngineError {
        match self.reason() {
            Some(r) => EngineError::CoordinatorPanicked(r.to_string()),
            None => EngineError::NotRunning,
        }
    }
}

#[cfg(test)]
#[path = "seam_tests.rs"]
mod tests;
