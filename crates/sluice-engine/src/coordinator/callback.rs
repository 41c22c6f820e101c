//! The coordinator's seam to the rest of the database.
//!
//! The reference design describes one large `PipelineCallback` trait. Here it
//! is split into role traits, each owning one responsibility of a cycle;
//! [`PipelineCallback`] is their union, and the coordinator is generic over
//! it so tests can drive the coordinator with an implementation of their own.
//! Method names follow the reference design; only the methods the
//! coordinator calls are here, and each says what its result means. Every
//! failure is typed ([`EngineError`], or [`CycleError`] where the stage
//! matters): the coordinator decides what it does with
//! [`crate::seam::disposition`], never the callback.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;

use crate::catalog::SourceDef;
use crate::error::EngineError;
use crate::options::Delivery;
use crate::output::mv::MaterializedView;
use crate::output::sink::SinkRuntime;
use crate::output::subscription::DeliveryEnd;

pub use crate::seam::{
    BarrierOutcome, BatchMap, CheckpointAssignmentAdmission, CheckpointAssignmentFence,
    CheckpointAttempt, CheckpointConfig, CheckpointControlOutcome, CheckpointControlWake,
    CheckpointReport, CycleError, CycleOutcome, FLAG_MANUAL, FLAG_SHUTDOWN,
};

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
    EnableCheckpoints(Box<CheckpointConfig>),
    /// Restore every owner's state from a checkpoint (before `Start`).
    Recover(Box<sluice_storage::LoadedCheckpoint>),
    /// Stage this node's vnode transition: every keyed operator's state is
    /// to be replaced with the keys of `placement`'s vnodes out of the
    /// previous holders' checkpoints (see `crate::split::moved`). Staging
    /// changes nothing yet: the coordinator completes the transition with
    /// [`RuntimeControl::complete_pending_vnode_transition`] when `Start`
    /// arrives, after every `Recover`, before `Start` opens the sinks and
    /// starts the file sources. Refused (the pipeline runs on) once the
    /// pipeline started, and while another transition is staged.
    StageVnodeTransition {
        /// The previous holders' checkpoints at one cut.
        state: Arc<crate::split::moved::MovedState>,
        /// The vnodes this node holds now.
        placement: crate::process::placement::VnodePlacement,
    },
}

/// Pressure from bounded outputs (sink writer queues, subscriber queues),
/// consulted by the coordinator before each cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExternalOutputPressure {
    /// Every output has room: sources are polled.
    #[default]
    Clear,
    /// An output's queue is at its high-water mark: source polling pauses
    /// (checkpoints, control messages and shutdown still run) until it
    /// drains and [`SourceIntake::output_pressure_wake`] fires.
    Full,
}

/// Taking source input: late rows, watermarks, idleness.
pub trait SourceIntake {
    /// Drop (or divert to the late stream) rows below the source's watermark.
    /// `Ok(None)`: nothing of the batch is on time. An error is a
    /// [`CycleError::Source`] (the batch cannot be placed in time) or an
    /// execution failure.
    fn filter_late_rows(
        &self,
        source_name: &str,
        batch: &RecordBatch,
    ) -> Result<Option<RecordBatch>, CycleError>;
    /// Advance the source's watermark from a batch's event times; the
    /// result is never below `admission_floor`. An error means the batch's
    /// event times cannot be read (a [`CycleError::Source`]).
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
    /// Wake the coordinator when inbound data or deferred shuffle work
    /// becomes ready (rows, a watermark, an end or a failure on an
    /// exchange between nodes). `None`: this node exchanges nothing.
    fn shuffle_work_wake(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }
    /// Take in what the other nodes sent. `Ok(true)`: something arrived,
    /// and a cycle should fold it (even while source intake is paused:
    /// a node that stopped taking the other nodes' rows could stall them
    /// all). An error halts the pipeline.
    fn take_shuffle_input(&mut self) -> Result<bool, CycleError> {
        Ok(false)
    }
    /// Whether rows other nodes sent may be folded now: not before this
    /// node started (its state may still be replaced by a recovered
    /// checkpoint, and its sinks are not open in their delivery mode), not
    /// while the intake fence is up, nor while a sink or subscriber is
    /// full (only a full exchange queue leaves them open, so that two nodes
    /// sending to each other both drain). Default: while intake is not
    /// fenced.
    fn shuffle_input_open(&self) -> bool {
        !self.intake_paused()
    }
    /// Whether source input must not be folded into state now (a stronger
    /// fence than backpressure: held input waits too). The coordinator
    /// checks it before each cycle; a single-node pipeline never sets it,
    /// a clustered one while this node does not lead.
    fn intake_paused(&self) -> bool {
        false
    }
    /// Whether the source queue is at its high-water mark (readers and
    /// pushing callers are waiting). The coordinator asks before each
    /// cycle and counts the cycles that begin so (see
    /// [`CycleExecution::note_source_pressure`]); it keeps taking input
    /// then, since taking it is what relieves the queue. What pauses intake
    /// is [`Self::external_output_pressure`] and [`Self::intake_paused`].
    fn is_backpressured(&self) -> bool {
        false
    }
    /// Whether process functions hold as much input for a checkpoint's
    /// commit as they may (`process_held_input_bytes`). While they do, the
    /// coordinator takes no source input (neither held nor new); all that
    /// releases it keeps running: the checkpoints (due on a leader while
    /// it, or a node that says so, holds input; see
    /// [`CycleExecution::has_deferred_input`]),
    /// the other nodes' rows and barriers, and the input a commit
    /// released.
    fn held_input_full(&self) -> bool {
        false
    }
    /// Pressure from bounded outputs; while `Full`, the coordinator polls
    /// no sources (but still checkpoints, applies control messages and
    /// shuts down).
    fn external_output_pressure(&self) -> ExternalOutputPressure {
        ExternalOutputPressure::Clear
    }
    /// Woken when an output drains, so a paused coordinator re-checks the
    /// pressure. None: it re-checks on every idle tick.
    fn output_pressure_wake(&self) -> Option<Arc<crate::budget::Relief>> {
        None
    }
}

/// Running the operator graph.
pub trait CycleExecution {
    /// Execute a cycle over the accumulated source batches. `Ok`: every
    /// stream's output of the cycle. An error is the failed stream's
    /// [`CycleError::Execution`] or [`CycleError::Process`]; the cycle's
    /// input is then replayed from the last checkpoint or the pipeline halts.
    fn execute_cycle(
        &mut self,
        source_batches: &BatchMap,
        watermark: i64,
    ) -> impl Future<Output = Result<CycleOutcome, CycleError>> + Send;
    /// A cycle starts now (ended by [`Self::record_cycle`]): lets readers
    /// of the compute thread's busy time count a cycle still running.
    fn note_cycle_start(&self) {}
    /// A cycle begins while [`SourceIntake::is_backpressured`]: the
    /// pipeline is what limits the sources' pace.
    fn note_source_pressure(&self) {}
    /// Record cycle metrics.
    fn record_cycle(&self, events_ingested: u64, batches: u64, elapsed_ns: u64);
    /// Record the three timed phases of a published cycle.
    fn record_cycle_phases(&self, _execute_ns: u64, _output_store_ns: u64, _sink_enqueue_ns: u64) {}
    /// Count a failed cycle.
    fn note_cycle_error(&self) {}
    /// Whether the graph holds input it can run now without any new input
    /// or wake (a process function's input released by a checkpoint's
    /// commit; see `process/commit_gate.rs`). While it does, and intake
    /// is neither stopped nor paused, the coordinator runs cycles without
    /// source input; a clean shutdown runs them after its last checkpoint
    /// committed, before the sinks close.
    fn has_runnable_deferred_input(&self) -> bool {
        false
    }
    /// Whether the graph holds input at all, runnable or not (a process
    /// function's rows waiting for a checkpoint to seal them, or for the
    /// commit of the one that did), or another node says it holds such
    /// input, which only this node's checkpoints release (it leads). While it
    /// does, a periodic checkpoint is due even if no cycle ran since the
    /// last one: only a committed checkpoint releases that input, and one
    /// that failed must be taken again.
    fn has_deferred_input(&self) -> bool {
        self.has_runnable_deferred_input()
    }
}

/// Publishing a cycle's results.
pub trait OutputPublication {
    /// Apply results to materialized views. An error
    /// ([`CycleError::Output`]) names the view; the cycle failed.
    fn update_mv_stores(&self, _results: &BatchMap) -> Result<(), CycleError> {
        Ok(())
    }
    /// Stage results for subscribers: they see them only once every
    /// consumer of the cycle accepted its output
    /// ([`Self::commit_subscription_output`]). An error
    /// ([`CycleError::Output`]) names the stream; the cycle failed.
    fn push_to_streams(&self, _results: &BatchMap) -> Result<(), CycleError> {
        Ok(())
    }
    /// Every consumer of the cycle accepted its output (views,
    /// subscriptions, sinks): deliver what [`Self::push_to_streams`]
    /// staged to live subscribers, and keep it for the next checkpoint
    /// cut.
    fn commit_subscription_output(&mut self) {}
    /// The cycle's publication failed: drop what [`Self::push_to_streams`]
    /// staged, so no subscriber sees output of a failed cycle, even for
    /// the moment before the failure ends its subscription, and no
    /// checkpoint cut holds it.
    fn abort_subscription_output(&mut self) {}
    /// Hand results to the sinks (each sink writes on its own thread, so
    /// this does not wait for the writes: a write that fails later is
    /// taken with [`RuntimeControl::take_pipeline_fault`] or, without
    /// checkpoints, [`RuntimeControl::take_pipeline_halt`]). An error
    /// ([`CycleError::Output`]) names the sink and keeps the connector's
    /// code; the cycle failed and no sink output of it may become visible.
    fn write_to_sinks(
        &mut self,
        results: &BatchMap,
    ) -> impl Future<Output = Result<(), CycleError>> + Send;
    /// Cut every subscription log at the aligned checkpoint. An error fails
    /// the attempt before capture.
    fn reserve_subscription_cut(&mut self, _attempt: CheckpointAttempt) -> Result<(), EngineError> {
        Ok(())
    }
    /// Discard an unresolved cut after the checkpoint failed.
    fn abort_subscription_cut(&mut self, _attempt: CheckpointAttempt) {}
    /// Publish the cut to committed-only consumers after durable commit. An
    /// error is a failure after the checkpoint became durable.
    fn publish_barrier(&mut self, _attempt: CheckpointAttempt) -> Result<(), EngineError> {
        Ok(())
    }
    /// End every subscription: cleanly at a shutdown (`None`); with the
    /// halt or fault that stopped the pipeline otherwise, which the
    /// subscribers' reads then report.
    fn invalidate_subscriptions(&self, _ended_by: Option<DeliveryEnd>) {}
    /// Close every sink (publishing what each made visible at close).
    /// Every sink is attempted; the error is the first sink's failure (the
    /// others are logged).
    fn close_sinks(&mut self) -> impl Future<Output = Result<(), EngineError>> + Send;
    /// Discard every sink's unpublished output (the pipeline failed). Every
    /// sink is attempted; the error is the first failure.
    fn abort_sinks(&mut self) -> Result<(), EngineError>;
}

/// DDL and lifecycle.
pub trait RuntimeControl {
    /// Apply a DDL change between cycles. `Ok`: it is in effect. An error
    /// means nothing of it was applied (a statement is refused and the
    /// pipeline runs on; a failed `Recover` or `Start` stops it).
    fn apply_control(&mut self, msg: ControlMsg) -> Result<(), EngineError>;
    /// Take a pending deterministic halt: a failure the callback found
    /// outside a call that could return it, which stops the pipeline for
    /// good under [`crate::seam::disposition`] (a peer that never opened
    /// its channel; a sink write that failed without checkpoints). The
    /// coordinator takes halts first: a halt is permanent, so it outranks
    /// a pending fault whose recovery would replay the same input into
    /// the same failure. None: no halt pending.
    fn take_pipeline_halt(&mut self) -> Option<CycleError> {
        None
    }
    /// Take a pending consistency fault: a failure found outside a call
    /// that could return it and that is not a halt (a sink epoch that
    /// could not be committed after the checkpoint became durable, a sink
    /// write that failed with checkpoints on). The coordinator stops
    /// intake so recovery replays from the last committed checkpoint.
    /// None: no fault pending.
    fn take_pipeline_fault(&mut self) -> Option<CycleError> {
        None
    }
    /// The pipeline has shut down and the process exits next: give up the
    /// operators' state without freeing it (see
    /// `StatefulOperator::forget_state`). Nothing runs on this callback
    /// afterwards. Default: nothing.
    fn forget_operator_state(&mut self) {}
    /// Whether a (re)start is in flight: `ControlMsg::Start` was not
    /// applied yet, so a recovered checkpoint (`Recover`) or moved state
    /// (a staged vnode transition) may still replace the operators' state, and the
    /// sinks are not open in their delivery mode. While it is, the
    /// checkpoint admission gate holds: nothing may be captured, since a
    /// checkpoint of the state before recovery would become the newest
    /// committed one and lose what the recovered one held. A periodic
    /// tick stays due and is taken once recovery ends (`Start` follows
    /// `Recover` at once, so a tick skipped would put the first checkpoint
    /// a whole interval later); a `CHECKPOINT` asked for is refused by
    /// name; a follower takes part in no leader's attempt (the leader's
    /// deadline bounds the wait); input a commit released does not run;
    /// a shutdown takes no checkpoint. Default: never.
    fn is_recovering(&mut self) -> bool {
        false
    }
    /// Complete the vnode transition staged for this (re)start
    /// ([`ControlMsg::StageVnodeTransition`]) without admitting source
    /// input. The coordinator calls it when `Start` arrives, before
    /// applying it: recovery (`Recover`) may close intake before the
    /// transition that moved the vnodes has run, and the transition
    /// replaces the recovered keyed state, so it runs last.
    ///
    /// `Ok(true)`: the pending transition completed now. `Ok(false)`:
    /// none was pending (the reference also answers `false` while a
    /// transition waits for its exact assignment certificate; a Sluice
    /// transition carries its placement, decided by the caller from the
    /// recorded member list before the pipeline was built, so it never
    /// waits). An error ([`CycleError::Startup`]) halts the
    /// pipeline: its keyed state is partly replaced, and `Start` is not
    /// applied. Default: nothing is ever pending.
    fn complete_pending_vnode_transition(
        &mut self,
    ) -> impl Future<Output = Result<bool, CycleError>> + Send {
        async { Ok(false) }
    }
}

/// The checkpoint lifecycle: reserve, align, capture, commit, or give up.
pub trait CheckpointLifecycle {
    /// Time between periodic checkpoints; None when there are no periodic
    /// checkpoints.
    fn checkpoint_interval(&self) -> Option<std::time::Duration>;
    /// The delivery guarantee checkpoints keep; None when checkpointing is
    /// off. What a failure does depends on it ([`crate::seam::disposition`]).
    fn checkpoint_delivery(&self) -> Option<Delivery>;
    /// Whether a failed cycle (an operator, a process function, an output
    /// or a panic) faults the pipeline for recovery, which replays the
    /// cycle's input from the last committed checkpoint: `true`; or halts
    /// it for good: `false`. Sluice never drops a failed cycle's input,
    /// in any delivery mode (the reference drops it under at-least-once
    /// by default), so without a checkpoint to recover from it halts
    /// whatever this says. Default: while checkpoints are on.
    fn fault_on_cycle_error(&self) -> bool {
        self.checkpoint_delivery().is_some()
    }
    /// How long sources may take to deliver their barriers.
    fn alignment_timeout(&self) -> std::time::Duration;
    /// How long an attempt may take from its start until its manifest is
    /// durable: the coordinator passes the start plus this as the
    /// `deadline` of [`Self::checkpoint_with_barrier`] (and aligns by
    /// then at the latest).
    fn checkpoint_timeout(&self) -> std::time::Duration;
    /// Durably reserve the attempt's id before any barrier is injected,
    /// giving up at `deadline` (the attempt's alignment deadline). An
    /// error means no attempt exists (checkpointing off, store failure, a
    /// store that did not answer in time): the checkpoint is not taken and
    /// nothing else changes.
    fn reserve_checkpoint_attempt(
        &mut self,
        deadline: Instant,
    ) -> impl Future<Output = Result<CheckpointAttempt, EngineError>> + Send;
    /// Ask every source for the attempt's barrier. Returns the sources whose
    /// barrier must still arrive; the others are aligned already.
    fn inject_source_barriers(&mut self, attempt: CheckpointAttempt) -> Vec<Arc<str>>;
    /// Every local source of `attempt` delivered its barrier and the rows
    /// before it ran: send the barrier to the other nodes on every
    /// exchange, behind the rows routed so far. Default: no exchanges.
    fn forward_exchange_barriers(&mut self, _attempt: CheckpointAttempt) {}
    /// This node is done with `attempt` without capturing it here (the
    /// leader aborted it, or following it failed): the other nodes' rows
    /// after its barrier are taken in again. Default: no exchanges.
    fn release_exchange_barrier(&mut self, _attempt: CheckpointAttempt) {}
    /// The exchanges whose other nodes' barrier of `attempt` has not
    /// arrived yet (empty: aligned; the rows before it were taken in).
    /// An `Err`: the other nodes sent a newer attempt's barrier, so this
    /// one can never align. Default: none.
    fn exchanges_awaiting_barrier(
        &self,
        _attempt: CheckpointAttempt,
    ) -> Result<Vec<String>, EngineError> {
        Ok(Vec::new())
    }
    /// All sources aligned: capture, persist, commit. `Committed`: the
    /// manifest is durable (a sink that could not commit afterwards is left
    /// for [`RuntimeControl::take_pipeline_fault`]); `Tailing`: captured,
    /// its tail makes it durable (see [`Self::next_checkpoint_tail`]);
    /// `Aborted`: nothing was captured; `Failed`: the attempt failed
    /// before it was durable. An attempt whose manifest is not durable by
    /// `deadline` fails (its tail stops before the manifest). `flags` say
    /// who asked ([`super::FLAG_MANUAL`], [`super::FLAG_SHUTDOWN`]; 0 for
    /// a periodic checkpoint).
    fn checkpoint_with_barrier(
        &mut self,
        source_checkpoints: FxHashMap<String, sluice_storage::SourceCheckpoint>,
        attempt: CheckpointAttempt,
        attempt_started: Instant,
        deadline: Instant,
        flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> impl Future<Output = BarrierOutcome> + Send;
    /// Give up a reserved attempt before capture; its id stays burned. An
    /// error turns the abandoned attempt into a failed one.
    fn abandon_checkpoint_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &EngineError,
        flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> impl Future<Output = Result<(), EngineError>> + Send;
    /// Whether a clean shutdown takes a final checkpoint (to settle sink
    /// epochs) before closing.
    fn settles_on_shutdown(&self) -> bool {
        false
    }
    /// Withdraw the barrier requests of an attempt at the sources (before
    /// capture), so no source answers a barrier nobody waits for. For an
    /// attempt this node follows (the leader's), this is also the whole
    /// of giving it up: the callback answers the leader with a negative
    /// acknowledgement, and nothing is abandoned (the id is the leader's).
    /// An error is logged; the attempt is given up either way.
    fn cancel_source_barrier_attempt(
        &mut self,
        _attempt: CheckpointAttempt,
        _reason: &EngineError,
    ) -> impl Future<Output = Result<(), EngineError>> + Send {
        async { Ok(()) }
    }
    /// After the shutdown checkpoint: confirm every checkpoint-committable
    /// sink epoch is resolved. An error names the sinks still unsettled;
    /// their output is then discarded.
    fn settle_sink_epoch_for_shutdown(
        &mut self,
    ) -> impl Future<Output = Result<(), EngineError>> + Send {
        async { Ok(()) }
    }
    /// Count and log a failure during or after capture, before the manifest
    /// was durable. What it does to the pipeline is the coordinator's call.
    fn record_checkpoint_failure(&mut self, _checkpoint_id: u64, _reason: &EngineError) {}
    /// An invariant broke after the checkpoint became durable: left for
    /// [`RuntimeControl::take_pipeline_fault`] as a
    /// [`CycleError::AfterDurable`].
    fn record_checkpoint_continuation_fault(
        &mut self,
        _attempt: CheckpointAttempt,
        _reason: EngineError,
    ) {
    }
    /// Count and log a failure before an attempt could be reserved.
    fn record_checkpoint_admission_failure(&mut self, _reason: &EngineError) {}
    /// Tails holding a slot: durability not yet completed, or still pruning.
    fn checkpoint_tails_in_flight(&mut self) -> usize {
        0
    }
    /// The bound on tails in flight. At the bound a periodic checkpoint is
    /// skipped (the next tick takes it) and a manual or shutdown checkpoint
    /// waits for a slot.
    fn max_checkpoint_tails(&self) -> usize {
        1
    }
    /// The attempt whose tail's durability just became known, for
    /// [`Self::complete_checkpoint_tail`]; `None` at once when no tail
    /// awaits completion. Cancel safe (the coordinator selects on it).
    fn next_checkpoint_tail(&mut self) -> impl Future<Output = Option<CheckpointAttempt>> + Send {
        async { None }
    }
    /// Finish a tail named by [`Self::next_checkpoint_tail`]: when durable,
    /// commit the sinks' sealed epochs (only now: a sink's epoch becomes
    /// visible only after its checkpoint is durable) and report it.
    /// `Failed` when the tail wrote nothing durable; `Aborted` when
    /// recovery cancelled it (no sink epoch is committed then).
    fn complete_checkpoint_tail(&mut self, attempt: CheckpointAttempt) -> BarrierOutcome {
        BarrierOutcome::Failed(Arc::new(EngineError::Internal(format!(
            "checkpoint {} has no tail",
            attempt.id
        ))))
    }
    /// Wait until no tail holds a slot (completed tails finish pruning).
    fn wait_checkpoint_tails_idle(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// Cancel checkpoint tails once recovery owns the pipeline (a fault
    /// stopped intake, or a shutdown discards the output; a halt lets the
    /// tail in flight finish instead): a tail that has not begun its manifest write
    /// never commits, and no cancelled tail's sink epochs are committed.
    /// Returns whether a tail was stopped before its manifest by this call.
    fn cancel_checkpoint_tails_for_recovery(&mut self) -> bool {
        false
    }
    /// Join every tracked checkpoint tail before connector teardown. The
    /// coordinator completes each tail first; one finished but never
    /// completed is an error.
    fn settle_checkpoint_tail_tasks(
        &mut self,
    ) -> impl Future<Output = Result<(), EngineError>> + Send {
        async { Ok(()) }
    }
    /// Time the compute thread could not run cycles for one attempt
    /// (reservation, drain, capture and handing off the tail).
    fn record_checkpoint_pause(&self, _pause_ns: u64) {}
    /// A periodic checkpoint was skipped: the tail bound was reached.
    fn note_checkpoint_skipped(&self) {}
}

/// The cluster half of checkpoint admission: who may originate an
/// attempt, under which assignment it captures, the Prepare that
/// announces it, and how a follower takes part in the leader's attempts.
/// Every method has the single-node answer as its default (this node
/// leads, captures everything unfenced, announces nothing, follows
/// nothing).
///
/// On the leader the coordinator calls them in this order, each only if
/// the one before succeeded, so no barrier is injected for an attempt the
/// cluster has not admitted:
///
/// ```text
///  is_leader ─► reserve_checkpoint_attempt ─► checkpoint_assignment_for_admission
///    (false: no attempt)    (id burned from here)     │ Refused: abandon
///                                                     ▼
///             inject_source_barriers ◄─ publish_checkpoint_prepare (Err: abandon)
/// ```
///
/// On a follower (`is_leader` false) nothing is reserved or prepared: the
/// leader's announcement wakes the coordinator, which asks what to do.
///
/// ```text
///  checkpoint_control_wake ─► service_checkpoint_control
///     Started{attempt, fence} ─► inject_source_barriers ─► align ─► checkpoint_with_barrier
///                                    │ given up before capture       │ Aborted
///                                    ▼                               ▼
///                      cancel_source_barrier_attempt (nack)   resolve_authoritative_follower_abort
///     Aborted{attempt} ─────────────────────────────────────► resolve_authoritative_follower_abort
/// ```
pub trait ClusterCoordination {
    /// `true` if this node is the cluster leader, or in single-node mode:
    /// only then does the coordinator originate checkpoints. `false`:
    /// periodic checkpoints are not started and one asked for by hand is
    /// refused by name.
    fn is_leader(&self) -> bool {
        true
    }
    /// Capture the exact assignment certificate for the reserved attempt,
    /// by `deadline`. `Unfenced`: single node. `Fenced`: the fence goes to
    /// [`CheckpointLifecycle::checkpoint_with_barrier`] (and to
    /// [`CheckpointLifecycle::abandon_checkpoint_attempt`] if the attempt
    /// fails). `Refused`: the attempt is abandoned before any barrier.
    fn checkpoint_assignment_for_admission(
        &mut self,
        _deadline: Instant,
    ) -> impl Future<Output = CheckpointAssignmentAdmission> + Send {
        async { CheckpointAssignmentAdmission::Unfenced }
    }
    /// Durably publish the attempt's certified Prepare before any source
    /// barrier is injected. `deadline` is the attempt's (every owner's
    /// part must be durable by then), not its alignment deadline. `Ok`:
    /// the cluster knows the attempt; barriers follow. An error abandons
    /// the attempt (its id stays burned).
    fn publish_checkpoint_prepare(
        &mut self,
        _attempt: CheckpointAttempt,
        _attempt_started: Instant,
        _deadline: Instant,
        _flags: u64,
        _assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> impl Future<Output = Result<(), EngineError>> + Send {
        async { Ok(()) }
    }
    /// The wake for the leader's checkpoint control, taken once the
    /// pipeline runs. `None` (single node) keeps the coordinator free of
    /// any cluster polling; with one, a coordinator that does not lead
    /// calls [`Self::service_checkpoint_control`] each time it fires.
    fn checkpoint_control_wake(&self) -> Option<CheckpointControlWake> {
        None
    }
    /// Act on the leader's oldest announcement this node has not acted on
    /// (see [`CheckpointControlOutcome`] for what each answer makes the
    /// coordinator do). Called only while this node does not lead and a
    /// tail slot is free; it never originates a checkpoint. The reference
    /// passes the coordinator's source offsets here; in Sluice the
    /// callback owns source positions (the coordinator sees them only in
    /// barriers), so it takes none.
    fn service_checkpoint_control(
        &mut self,
    ) -> impl Future<Output = CheckpointControlOutcome> + Send {
        async { CheckpointControlOutcome::Idle }
    }
    /// The leader aborted a follower attempt before this node captured it
    /// (announced as [`CheckpointControlOutcome::Aborted`], or a capture
    /// that answered [`BarrierOutcome::Aborted`]): release what this node
    /// holds for it. Must not publish anything or wait on the network:
    /// the cluster has already ended the attempt. An error means local
    /// state is no longer exact, and faults the pipeline for recovery.
    fn resolve_authoritative_follower_abort(
        &mut self,
        _attempt: CheckpointAttempt,
    ) -> Result<(), EngineError> {
        Ok(())
    }
}

/// The whole seam: every role together.
pub trait PipelineCallback:
    SourceIntake
    + CycleExecution
    + OutputPublication
    + RuntimeControl
    + CheckpointLifecycle
    + ClusterCoordination
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
        + ClusterCoordination
        + Send
        + 'static
{
}
