//! The coordinator's seam to the rest of the database.
//!
//! The reference design describes one large `PipelineCallback` trait. Here it
//! is split into role traits, each owning one responsibility of a cycle;
//! [`PipelineCallback`] is their union, and the coordinator is generic over
//! it so tests can drive the coordinator with an implementation of their own.
//! Method names follow the reference design.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::catalog::SourceDef;
use crate::output::mv::MaterializedView;
use crate::output::sink::SinkRuntime;

/// Batches by source or stream name.
pub type BatchMap = FxHashMap<Arc<str>, Vec<RecordBatch>>;

/// A failed cycle.
#[derive(Debug, Error)]
pub enum CycleError {
    /// A source batch is malformed (bad event time, wrong schema).
    #[error("source '{source_name}': {message}")]
    Source {
        /// The source.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// An operator failed.
    #[error("{0}")]
    Execution(String),
    /// A process function's call was rejected (a limit, a handler error or
    /// a panic), or anything failed in a cycle after a process function
    /// accepted calls. Like every failed cycle it is never dropped: it
    /// faults for replay when checkpointing is on, and halts otherwise.
    #[error("{0}")]
    Process(String),
    /// Output could not be published.
    #[error("output: {0}")]
    Output(String),
    /// A bounded drain ran out of time.
    #[error("deadline passed while {0}")]
    Deadline(String),
}

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

/// Cluster assignment fence of an attempt. Single-node pipelines have none;
/// passing one is refused until cluster execution exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointAssignmentFence {
    /// Assignment generation.
    pub generation: u64,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierOutcome {
    /// Durable, sinks committed.
    Committed(CheckpointReport),
    /// Given up before capture (alignment timeout, shutdown); nothing to undo.
    Aborted(String),
    /// Failed during or after capture.
    Failed(String),
}

/// A runtime DDL change, applied between cycles.
pub enum ControlMsg {
    /// Register a source (and its late-data stream, if any).
    AddSource(Box<SourceDef>),
    /// Install a stream's compiled operators.
    AddStream {
        /// Stream name.
        name: String,
        /// What computes it.
        producer: Box<super::streams::StreamProducer>,
        /// Its store, for a materialized view.
        view: Option<Arc<MaterializedView>>,
    },
    /// Install an opened sink.
    AddSink(Box<SinkRuntime>),
    /// Remove a source, stream, view or sink by name.
    Drop(String),
    /// Leave `columns` of file source `source` unparsed: no query reads
    /// them and none can be added (before `Recover` and `Start`).
    LeaveUnread {
        /// The source.
        source: String,
        /// Its declared columns nothing reads.
        columns: Vec<String>,
    },
    /// Start reading file sources.
    Start,
    /// Turn checkpointing on (before `Start`).
    EnableCheckpoints(Box<super::connector::CheckpointConfig>),
    /// Restore every owner's state from a checkpoint (before `Start`).
    Recover(Box<sluice_storage::LoadedCheckpoint>),
}

/// Taking source input: late rows, watermarks, idleness.
pub trait SourceIntake {
    /// Install pending recovery state before the next source message is taken.
    fn prepare_source_intake(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Pin source frontiers before a new admission cycle.
    fn pin_source_frontiers_for_new_cycle(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Drop (or divert to the late stream) rows below the source's watermark.
    fn filter_late_rows(
        &self,
        source_name: &str,
        batch: &RecordBatch,
    ) -> Result<Option<RecordBatch>, CycleError>;
    /// Advance the source's watermark from a batch's event times; the
    /// result is never below `admission_floor`.
    fn extract_watermark(
        &mut self,
        source_name: &str,
        batch: &RecordBatch,
        admission_floor: i64,
    ) -> Result<(), CycleError>;
    /// Advance a source's watermark by hand.
    fn advance_source_watermark(&mut self, source_name: &str, watermark: i64);
    /// A source delivered all its data; `offset` is its final position.
    fn finish_source(&mut self, source_name: &str, offset: Option<String>);
    /// Whether every registered source has finished.
    fn all_sources_finished(&self) -> bool;
    /// Current pipeline watermark.
    fn current_watermark(&self) -> i64;
    /// Demote sources idle past their timeout.
    fn tick_idle_watermark(&mut self) {}
    /// Whether source input must not be folded into state now.
    fn intake_paused(&self) -> bool {
        false
    }
    /// Whether internal buffers are near capacity.
    fn is_backpressured(&self) -> bool {
        false
    }
}

/// Running the operator graph.
pub trait CycleExecution {
    /// Execute a cycle over the accumulated source batches.
    fn execute_cycle(
        &mut self,
        source_batches: &BatchMap,
        watermark: i64,
    ) -> impl Future<Output = Result<CycleOutcome, CycleError>> + Send;
    /// Record cycle metrics.
    fn record_cycle(&self, events_ingested: u64, batches: u64, elapsed_ns: u64);
    /// Record the three timed phases of a published cycle.
    fn record_cycle_phases(&self, _execute_ns: u64, _output_store_ns: u64, _sink_enqueue_ns: u64) {}
    /// Count a failed cycle.
    fn note_cycle_error(&self) {}
    /// Whether a failed cycle (or a panic anywhere in the pipeline) faults
    /// for recovery, which replays from the last committed checkpoint,
    /// rather than halting. True whenever checkpointing is on, in every
    /// delivery mode: a failed cycle's input is never dropped, because
    /// at-least-once must not lose rows any more than exactly-once may.
    fn fault_on_cycle_error(&self) -> bool {
        false
    }
    /// Whether operators hold deferred input.
    fn has_deferred_input(&self) -> bool {
        false
    }
    /// Whether deferred input can run now.
    fn has_runnable_deferred_input(&self) -> bool {
        false
    }
}

/// Publishing a cycle's results.
pub trait OutputPublication {
    /// Apply results to materialized views.
    fn update_mv_stores(&self, _results: &BatchMap) -> Result<(), CycleError> {
        Ok(())
    }
    /// Deliver results to subscribers.
    fn push_to_streams(&self, _results: &BatchMap) -> Result<(), CycleError> {
        Ok(())
    }
    /// Every consumer accepted the cycle's output.
    fn commit_subscription_output(&mut self) {}
    /// Publication failed; restore retryable bookkeeping.
    fn abort_subscription_output(&mut self) {}
    /// Write results to sinks, within `deadline` when given.
    fn write_to_sinks(
        &mut self,
        results: &BatchMap,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<(), CycleError>> + Send;
    /// Cut every subscription log at the aligned checkpoint.
    fn reserve_subscription_cut(&mut self, _attempt: CheckpointAttempt) -> Result<(), String> {
        Ok(())
    }
    /// Discard an unresolved cut after the checkpoint failed.
    fn abort_subscription_cut(&mut self, _attempt: CheckpointAttempt) {}
    /// Publish the cut to committed-only consumers after durable commit.
    fn publish_barrier(&mut self, _attempt: CheckpointAttempt) -> Result<(), String> {
        Ok(())
    }
    /// End provisional subscription delivery.
    fn invalidate_subscriptions(&self, _reason: &str) {}
    /// Close every sink; every sink is attempted and failures are aggregated.
    fn close_sinks(&mut self) -> impl Future<Output = Result<(), String>> + Send;
    /// Discard every sink's unpublished output (the pipeline failed).
    fn abort_sinks(&mut self) -> Result<(), String>;
}

/// DDL and lifecycle.
pub trait RuntimeControl {
    /// Apply a DDL change between cycles.
    fn apply_control(&mut self, msg: ControlMsg);
    /// Take a pending permanent halt.
    fn take_pipeline_halt(&mut self) -> Option<String> {
        None
    }
    /// Take a pending consistency fault.
    fn take_pipeline_fault(&mut self) -> Option<String> {
        None
    }
    /// Whether this node leads (always, single node).
    fn is_leader(&self) -> bool {
        true
    }
    /// Whether a coordinated restart is in flight.
    fn is_recovering(&mut self) -> bool {
        false
    }
}

/// The checkpoint lifecycle: reserve, align, capture, commit, or give up.
pub trait CheckpointLifecycle {
    /// Time between periodic checkpoints; None when checkpointing is off.
    fn checkpoint_interval(&self) -> Option<std::time::Duration>;
    /// How long sources may take to deliver their barriers.
    fn alignment_timeout(&self) -> std::time::Duration;
    /// Durably reserve the attempt's id before any barrier is injected.
    fn reserve_checkpoint_attempt(
        &mut self,
        deadline: Instant,
    ) -> impl Future<Output = Result<CheckpointAttempt, String>> + Send;
    /// Durably admit the attempt before barriers (cluster Prepare); single
    /// node: refuses a fence, otherwise nothing to publish.
    fn publish_checkpoint_prepare(
        &mut self,
        _attempt: CheckpointAttempt,
        _attempt_started: Instant,
        _deadline: Instant,
        _flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async move {
            match assignment_fence {
                None => Ok(()),
                Some(f) => Err(format!(
                    "assignment fence {} given, but this pipeline is not clustered",
                    f.generation
                )),
            }
        }
    }
    /// Ask every source for the attempt's barrier. Returns the sources whose
    /// barrier must still arrive; the others are aligned already.
    fn inject_source_barriers(&mut self, attempt: CheckpointAttempt) -> Vec<Arc<str>>;
    /// Drain graph input belonging to the frozen cut (none is deferred here).
    fn drain_checkpoint_edges_until(
        &mut self,
        _deadline: Instant,
    ) -> impl Future<Output = Result<(), CycleError>> + Send {
        async { Ok(()) }
    }
    /// All sources aligned: capture, persist, commit.
    fn checkpoint_with_barrier(
        &mut self,
        source_checkpoints: FxHashMap<String, sluice_storage::SourceCheckpoint>,
        attempt: CheckpointAttempt,
        attempt_started: Instant,
        deadline: Instant,
        flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> impl Future<Output = BarrierOutcome> + Send;
    /// Give up a reserved attempt before capture; its id stays burned.
    fn abandon_checkpoint_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &str,
        flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Whether a clean shutdown takes a final checkpoint (to settle sink
    /// epochs) before closing.
    fn settles_on_shutdown(&self) -> bool {
        false
    }
    /// Withdraw the barrier requests of an attempt at the sources (before
    /// capture), so no source answers a barrier nobody waits for.
    fn cancel_source_barrier_attempt(
        &mut self,
        _attempt: CheckpointAttempt,
        _reason: &str,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }
    /// After the shutdown checkpoint: confirm every checkpoint-committable
    /// sink epoch is resolved. An error leaves the sinks open.
    fn settle_sink_epoch_for_shutdown(
        &mut self,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }
    /// A failure during or after capture, before the manifest was durable.
    fn record_checkpoint_failure(&mut self, _checkpoint_id: u64, _reason: &str) {}
    /// An invariant broke after the checkpoint became durable.
    fn record_checkpoint_continuation_fault(&mut self, _attempt: CheckpointAttempt, _reason: &str) {
    }
    /// A failure before an attempt could be reserved.
    fn record_checkpoint_admission_failure(&mut self, _reason: &str) {}
}

/// The whole seam: every role together.
pub trait PipelineCallback:
    SourceIntake
    + CycleExecution
    + OutputPublication
    + RuntimeControl
    + CheckpointLifecycle
    + Send
    + 'static
{
}

impl<T> PipelineCallback for T where
    T: SourceIntake
        + CycleExecution
        + OutputPublication
        + RuntimeControl
        + CheckpointLifecycle
        + Send
        + 'static
{
}
