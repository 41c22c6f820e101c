//! The scripted `PipelineCallback`: knobs the tests turn, and a log of
//! every call the coordinator makes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, Int64Array};
use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use sluice_engine::coordinator::{
    BarrierOutcome, BatchMap, CheckpointAssignmentAdmission, CheckpointAssignmentFence,
    CheckpointAttempt, CheckpointControlOutcome, CheckpointControlWake, CheckpointLifecycle,
    CheckpointReport, ClusterCoordination, ControlMsg, CycleError, CycleExecution, CycleOutcome,
    ExternalOutputPressure, OutputPublication, RuntimeControl, SourceIntake,
};
use sluice_engine::options::Delivery;
use sluice_engine::output::subscription::DeliveryEnd;
use sluice_engine::EngineError;
use sluice_storage::SourceCheckpoint;

pub(crate) type Log = Arc<Mutex<Vec<String>>>;

/// What `checkpoint_with_barrier` does for one attempt (else: commit).
pub(crate) enum Capture {
    /// A sink pre-commit failed: before the manifest.
    Fail(String),
    /// The manifest is durable but committing a sink failed.
    ContinuationFault(String),
    /// The cluster ended the attempt before capture (a followed attempt
    /// the leader aborted).
    Aborted(String),
}

/// What `service_checkpoint_control` answers next (`Idle` once the queue
/// is empty); deadlines are relative to the call.
pub(crate) enum Control {
    AdmissionFailed(String),
    /// attempt, fence generation, deadline from now, flags.
    Started(u64, Option<u64>, Duration, u64),
    Aborted(u64),
    Failed(u64, String),
}

/// Knobs, shared with the test so they can change while the pipeline runs.
#[derive(Default)]
pub(crate) struct Script {
    pub(crate) fail_reserve: Option<String>,
    /// `reserve_subscription_cut` / `publish_barrier` fail with this.
    pub(crate) fail_cut: Option<String>,
    pub(crate) fail_publish: Option<String>,
    /// Sources `inject_source_barriers` reports as pending.
    pub(crate) pending: Vec<&'static str>,
    /// Outcomes of successive captures; they commit once it is exhausted.
    pub(crate) captures: VecDeque<Capture>,
    /// A failed checkpoint faults (checkpoints keep exactly-once).
    pub(crate) fault_on_checkpoint_failure: bool,
    /// A cycle holding this value fails.
    pub(crate) fail_cycle_on: Option<i64>,
    /// A cycle holding this value leaves a pending halt / fault behind.
    pub(crate) halt_on: Option<i64>,
    pub(crate) fault_on: Option<i64>,
    /// A failed cycle faults (checkpointing is on, at least once).
    pub(crate) fault_on_cycle_error: bool,
    /// A cycle holding this value panics (outside any component's own
    /// containment: the coordinator loop must catch it).
    pub(crate) panic_cycle_on: Option<i64>,
    /// `abort_sinks` panics (escapes the loop: the thread dies).
    pub(crate) panic_on_abort: bool,
    pub(crate) cycle_delay: Duration,
    pub(crate) interval: Option<Duration>,
    /// Ten seconds when unset.
    pub(crate) alignment_timeout: Option<Duration>,
    pub(crate) settles: bool,
    pub(crate) halt: Option<String>,
    pub(crate) fault: Option<String>,
    /// `apply_control` refuses every message with this.
    pub(crate) fail_control: Option<String>,
    /// `is_leader` answers false.
    pub(crate) not_leader: bool,
    /// `checkpoint_assignment_for_admission`: fenced at this generation,
    /// or refused with this reason (unset: unfenced).
    pub(crate) admission: Option<Result<u64, String>>,
    /// `publish_checkpoint_prepare` fails with this.
    pub(crate) fail_prepare: Option<String>,
    /// `checkpoint_control_wake` hands out this notify (fallback 50 ms);
    /// unset: no wake (single node).
    pub(crate) control_wake: Option<Arc<tokio::sync::Notify>>,
    /// Successive answers of `service_checkpoint_control`.
    pub(crate) control: VecDeque<Control>,
    /// `resolve_authoritative_follower_abort` fails with this.
    pub(crate) fail_resolve: Option<String>,
    /// `checkpoint_tails_in_flight` answers this (the bound is 1).
    pub(crate) tails_in_flight: usize,
    /// The control wake's fallback period (50 ms when unset).
    pub(crate) control_fallback: Option<Duration>,
    /// `intake_paused` answers this.
    pub(crate) intake_paused: bool,
    /// `external_output_pressure` answers `Full`.
    pub(crate) output_full: bool,
    /// `write_to_sinks` fails with this.
    pub(crate) fail_sink_write: Option<String>,
    /// How many cycles' subscription output was committed.
    pub(crate) output_commits: usize,
    /// `held_input_full` answers this.
    pub(crate) held_full: bool,
    /// `settle_sink_epoch_for_shutdown` fails with this (sinks whose
    /// epochs are unsettled).
    pub(crate) unsettled: Option<String>,
    /// Cycles of deferred input the graph can run without source input
    /// (`has_runnable_deferred_input`); a cycle without source batches
    /// runs one.
    pub(crate) deferred: usize,
    /// `publish_barrier` (a committed checkpoint) releases this many more.
    pub(crate) released_by_commit: usize,
    /// A vnode transition is staged (`StageVnodeTransition`, until
    /// `complete_pending_vnode_transition` takes it).
    pub(crate) transition_staged: bool,
    /// `complete_pending_vnode_transition` fails with this.
    pub(crate) fail_transition: Option<String>,
    /// `is_recovering` answers whether `Start` is still to come (else: never).
    pub(crate) start_by_control: bool,
    pub(crate) started: bool,
    /// `tick_idle_watermark` logs "idle tick" (the harness's idle tick is
    /// an hour unless the test sets `idle_tick`).
    pub(crate) note_idle_ticks: bool,
    /// The coordinator's idle tick (an hour when unset).
    pub(crate) idle_tick: Option<Duration>,
}

pub(crate) struct ScriptedCallback {
    pub(crate) log: Log,
    pub(crate) script: Arc<Mutex<Script>>,
    pub(crate) next_id: u64,
    pub(crate) watermark: i64,
}

impl ScriptedCallback {
    fn note(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }
}

pub(crate) fn values(batch: &RecordBatch) -> Vec<i64> {
    let col = batch.column(0).as_any().downcast_ref::<Int64Array>();
    col.map(|c| c.values().to_vec()).unwrap_or_default()
}

/// "A=[1,2] B=[10]", sources in name order.
pub(crate) fn describe(batches: &BatchMap) -> String {
    let mut parts: Vec<String> = batches
        .iter()
        .map(|(n, b)| format!(" {n}={:?}", b.iter().flat_map(values).collect::<Vec<_>>()))
        .collect();
    parts.sort();
    parts.concat().replace(", ", ",")
}

impl SourceIntake for ScriptedCallback {
    fn filter_late_rows(
        &self,
        _: &str,
        batch: &RecordBatch,
    ) -> Result<Option<RecordBatch>, CycleError> {
        Ok(Some(batch.clone()))
    }
    fn extract_watermark(
        &mut self,
        _: &str,
        batch: &RecordBatch,
        floor: i64,
    ) -> Result<(), CycleError> {
        let max = values(batch).into_iter().max().unwrap_or(i64::MIN);
        self.watermark = self.watermark.max(max).max(floor);
        Ok(())
    }
    fn advance_source_watermark(&mut self, _: &str, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }
    fn finish_source(&mut self, source: &str, offset: Option<String>) {
        let offset = offset.unwrap_or_default();
        self.note(format!("finish {source} offset={offset}"));
    }
    fn all_sources_finished(&self) -> bool {
        false
    }
    fn intake_paused(&self) -> bool {
        self.script().intake_paused
    }
    fn external_output_pressure(&self) -> ExternalOutputPressure {
        if self.script().output_full {
            ExternalOutputPressure::Full
        } else {
            ExternalOutputPressure::Clear
        }
    }
    fn held_input_full(&self) -> bool {
        self.script().held_full
    }
    fn current_watermark(&self) -> i64 {
        self.watermark
    }
    fn tick_idle_watermark(&mut self) {
        if self.script().note_idle_ticks {
            self.note("idle tick".into());
        }
    }
}

impl CycleExecution for ScriptedCallback {
    async fn execute_cycle(
        &mut self,
        batches: &BatchMap,
        watermark: i64,
    ) -> Result<CycleOutcome, CycleError> {
        self.note(format!("cycle wm={watermark}{}", describe(batches)));
        let has = |v: Option<i64>| {
            v.is_some_and(|v| batches.values().flatten().any(|b| values(b).contains(&v)))
        };
        let delay = {
            let mut s = self.script();
            if batches.is_empty() && s.deferred > 0 {
                s.deferred -= 1;
            }
            if has(s.halt_on) {
                s.halt = Some("halt requested".into());
            }
            if has(s.fault_on) {
                s.fault = Some("fault requested".into());
            }
            if has(s.fail_cycle_on) {
                let e = EngineError::Injected("operator blew up".into());
                return Err(CycleError::Execution(e));
            }
            if has(s.panic_cycle_on) {
                drop(s);
                panic!("operator exploded");
            }
            s.cycle_delay
        };
        tokio::time::sleep(delay).await;
        let results = batches.clone();
        Ok(CycleOutcome { results })
    }
    fn record_cycle(&self, _: u64, _: u64, _: u64) {}
    fn note_cycle_error(&self) {
        self.note("cycle error noted".into());
    }
    fn has_runnable_deferred_input(&self) -> bool {
        self.script().deferred > 0
    }
    fn has_deferred_input(&self) -> bool {
        let s = self.script();
        s.deferred > 0 || s.released_by_commit > 0
    }
}

impl OutputPublication for ScriptedCallback {
    async fn write_to_sinks(&mut self, _: &BatchMap) -> Result<(), CycleError> {
        self.note("sinks.write".into());
        let fail = self.script().fail_sink_write.clone();
        fail.map_or(Ok(()), |e| {
            Err(CycleError::Output(EngineError::Injected(e)))
        })
    }
    fn commit_subscription_output(&mut self) {
        self.script().output_commits += 1;
    }
    fn abort_subscription_output(&mut self) {
        self.note("subscriptions.abort".into());
    }
    fn reserve_subscription_cut(&mut self, attempt: CheckpointAttempt) -> Result<(), EngineError> {
        self.note(format!("cut {}", attempt.id));
        let fail = self.script().fail_cut.clone();
        fail.map_or(Ok(()), |e| Err(EngineError::Injected(e)))
    }
    fn abort_subscription_cut(&mut self, attempt: CheckpointAttempt) {
        self.note(format!("cut abort {}", attempt.id));
    }
    fn publish_barrier(&mut self, attempt: CheckpointAttempt) -> Result<(), EngineError> {
        self.note(format!("publish {}", attempt.id));
        {
            let mut s = self.script();
            s.deferred += std::mem::take(&mut s.released_by_commit);
        }
        let fail = self.script().fail_publish.clone();
        fail.map_or(Ok(()), |e| Err(EngineError::Injected(e)))
    }
    fn invalidate_subscriptions(&self, ended_by: Option<DeliveryEnd>) {
        let reason = match ended_by {
            None => "shutdown".to_string(),
            Some(DeliveryEnd::Halted(c) | DeliveryEnd::Faulted(c)) => c.to_string(),
        };
        self.note(format!("invalidate: {reason}"));
    }
    async fn close_sinks(&mut self) -> Result<(), EngineError> {
        self.note("sinks.close".into());
        Ok(())
    }
    fn abort_sinks(&mut self) -> Result<(), EngineError> {
        self.note("sinks.abort".into());
        if self.script().panic_on_abort {
            panic!("abort exploded");
        }
        Ok(())
    }
}

impl RuntimeControl for ScriptedCallback {
    fn apply_control(&mut self, msg: ControlMsg) -> Result<(), EngineError> {
        let kind = match msg {
            ControlMsg::Start => "start",
            ControlMsg::Recover(_) => "recover",
            ControlMsg::StageVnodeTransition { .. } => "stage vnode transition",
            _ => "ddl",
        };
        let fail = self.script().fail_control.clone();
        match fail {
            Some(e) => {
                self.note(format!("control {kind} refused: {e}"));
                Err(EngineError::Injected(e))
            }
            None => {
                self.note(format!("control {kind}"));
                if kind == "start" {
                    self.script().started = true;
                }
                if kind == "stage vnode transition" {
                    self.script().transition_staged = true;
                }
                Ok(())
            }
        }
    }
    fn take_pipeline_halt(&mut self) -> Option<CycleError> {
        let h = self.script().halt.take()?;
        self.note(format!("halt: {h}"));
        Some(CycleError::Startup(EngineError::Injected(h)))
    }
    fn take_pipeline_fault(&mut self) -> Option<CycleError> {
        let f = self.script().fault.take()?;
        self.note(format!("fault: {f}"));
        Some(CycleError::AfterDurable(EngineError::Injected(f)))
    }
    fn forget_operator_state(&mut self) {
        self.note("forget state".into());
    }
    fn is_recovering(&mut self) -> bool {
        let s = self.script();
        s.start_by_control && !s.started
    }
    async fn complete_pending_vnode_transition(&mut self) -> Result<bool, CycleError> {
        let (staged, fail) = {
            let mut s = self.script();
            (
                std::mem::take(&mut s.transition_staged),
                s.fail_transition.clone(),
            )
        };
        if !staged {
            return Ok(false);
        }
        if let Some(e) = fail {
            self.note(format!("vnode transition failed: {e}"));
            return Err(CycleError::Startup(EngineError::Injected(e)));
        }
        self.note("vnode transition".into());
        Ok(true)
    }
}

impl ClusterCoordination for ScriptedCallback {
    fn is_leader(&self) -> bool {
        !self.script().not_leader
    }
    async fn checkpoint_assignment_for_admission(
        &mut self,
        _: Instant,
    ) -> CheckpointAssignmentAdmission {
        let admission = self.script().admission.clone();
        match admission {
            None => CheckpointAssignmentAdmission::Unfenced,
            Some(Ok(generation)) => {
                self.note(format!("admit g{generation}"));
                CheckpointAssignmentAdmission::Fenced(CheckpointAssignmentFence { generation })
            }
            Some(Err(e)) => {
                self.note(format!("admission refused: {e}"));
                CheckpointAssignmentAdmission::Refused(Arc::new(EngineError::Injected(e)))
            }
        }
    }
    async fn publish_checkpoint_prepare(
        &mut self,
        attempt: CheckpointAttempt,
        _: Instant,
        _: Instant,
        flags: u64,
        fence: Option<CheckpointAssignmentFence>,
    ) -> Result<(), EngineError> {
        if let Some(e) = self.script().fail_prepare.clone() {
            self.note(format!("prepare {} failed: {e}", attempt.id));
            return Err(EngineError::Injected(e));
        }
        // Unfenced (single node), the Prepare is a no-op, as in production.
        if let Some(f) = fence {
            let (id, g) = (attempt.id, f.generation);
            self.note(format!("prepare {id} flags={flags} g{g}"));
        }
        Ok(())
    }
    fn checkpoint_control_wake(&self) -> Option<CheckpointControlWake> {
        let s = self.script();
        let fallback = s.control_fallback.unwrap_or(Duration::from_millis(50));
        Some(CheckpointControlWake::new(
            s.control_wake.clone()?,
            fallback,
        ))
    }
    async fn service_checkpoint_control(&mut self) -> CheckpointControlOutcome {
        let next = self.script().control.pop_front();
        self.control_outcome(next)
    }
    fn resolve_authoritative_follower_abort(
        &mut self,
        attempt: CheckpointAttempt,
    ) -> Result<(), EngineError> {
        self.note(format!("resolve abort {}", attempt.id));
        let fail = self.script().fail_resolve.clone();
        fail.map_or(Ok(()), |e| Err(EngineError::Injected(e)))
    }
}

impl ScriptedCallback {
    fn control_outcome(&mut self, next: Option<Control>) -> CheckpointControlOutcome {
        let attempt = |id| CheckpointAttempt { id };
        let injected = |e: String| Arc::new(EngineError::Injected(e));
        match next {
            None => CheckpointControlOutcome::Idle,
            Some(Control::AdmissionFailed(e)) => {
                self.note(format!("control: admission failed: {e}"));
                CheckpointControlOutcome::AdmissionFailed(injected(e))
            }
            Some(Control::Started(id, generation, within, flags)) => {
                let g = generation.map_or(String::new(), |g| format!(" g{g}"));
                self.note(format!("control: started {id} flags={flags}{g}"));
                CheckpointControlOutcome::Started {
                    attempt: attempt(id),
                    fence: generation.map(|generation| CheckpointAssignmentFence { generation }),
                    deadline: Instant::now() + within,
                    flags,
                }
            }
            Some(Control::Aborted(id)) => {
                self.note(format!("control: aborted {id}"));
                CheckpointControlOutcome::Aborted {
                    attempt: attempt(id),
                }
            }
            Some(Control::Failed(id, e)) => {
                self.note(format!("control: failed {id}: {e}"));
                CheckpointControlOutcome::Failed {
                    attempt: attempt(id),
                    error: injected(e),
                }
            }
        }
    }
}

impl CheckpointLifecycle for ScriptedCallback {
    fn checkpoint_interval(&self) -> Option<Duration> {
        self.script().interval
    }
    fn alignment_timeout(&self) -> Duration {
        let timeout = self.script().alignment_timeout;
        timeout.unwrap_or(Duration::from_secs(10))
    }
    fn checkpoint_timeout(&self) -> Duration {
        Duration::from_secs(600)
    }
    fn fault_on_cycle_error(&self) -> bool {
        self.script().fault_on_cycle_error
    }
    fn checkpoint_delivery(&self) -> Option<Delivery> {
        let s = self.script();
        if s.fault_on_checkpoint_failure {
            Some(Delivery::ExactlyOnce)
        } else if s.fault_on_cycle_error {
            Some(Delivery::AtLeastOnce)
        } else {
            None
        }
    }
    fn settles_on_shutdown(&self) -> bool {
        self.script().settles
    }
    async fn reserve_checkpoint_attempt(
        &mut self,
        _: Instant,
    ) -> Result<CheckpointAttempt, EngineError> {
        if let Some(e) = self.script().fail_reserve.clone() {
            self.note(format!("reserve failed: {e}"));
            return Err(EngineError::Injected(e));
        }
        self.next_id += 1;
        self.note(format!("reserve {}", self.next_id));
        Ok(CheckpointAttempt { id: self.next_id })
    }
    fn inject_source_barriers(&mut self, attempt: CheckpointAttempt) -> Vec<Arc<str>> {
        let pending = self.script().pending.clone();
        self.note(format!("inject {} [{}]", attempt.id, pending.join(",")));
        pending.into_iter().map(Arc::from).collect()
    }
    async fn checkpoint_with_barrier(
        &mut self,
        offsets: FxHashMap<String, SourceCheckpoint>,
        attempt: CheckpointAttempt,
        started: Instant,
        _: Instant,
        flags: u64,
        fence: Option<CheckpointAssignmentFence>,
    ) -> BarrierOutcome {
        let mut o: Vec<String> = offsets
            .iter()
            .map(|(k, v)| format!(" {k}={}", v.offset.as_deref().unwrap_or("-")))
            .collect();
        o.sort();
        let (id, o) = (attempt.id, o.concat());
        let fenced = fence.map_or(String::new(), |f| format!(" g{}", f.generation));
        self.note(format!("capture {id} flags={flags}{fenced}{o}"));
        let scripted = self.script().captures.pop_front();
        match scripted {
            Some(Capture::Fail(reason)) => {
                return BarrierOutcome::Failed(Arc::new(EngineError::Injected(reason)))
            }
            Some(Capture::Aborted(reason)) => {
                return BarrierOutcome::Aborted(Arc::new(EngineError::Injected(reason)))
            }
            Some(Capture::ContinuationFault(reason)) => {
                self.record_checkpoint_continuation_fault(attempt, EngineError::Injected(reason))
            }
            None => {}
        }
        BarrierOutcome::Committed(CheckpointReport {
            id: attempt.id,
            duration: started.elapsed(),
            state_bytes: 0,
            created_ms: 0,
        })
    }
    async fn abandon_checkpoint_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &EngineError,
        flags: u64,
        fence: Option<CheckpointAssignmentFence>,
    ) -> Result<(), EngineError> {
        let reason = checkpoint_reason(reason);
        let fenced = fence.map_or(String::new(), |f| format!(" g{}", f.generation));
        self.note(format!(
            "abandon {} flags={flags}{fenced}: {reason}",
            attempt.id
        ));
        Ok(())
    }
    async fn cancel_source_barrier_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &EngineError,
    ) -> Result<(), EngineError> {
        let reason = checkpoint_reason(reason);
        self.note(format!("cancel {}: {reason}", attempt.id));
        Ok(())
    }
    async fn settle_sink_epoch_for_shutdown(&mut self) -> Result<(), EngineError> {
        let unsettled = self.script().unsettled.clone();
        unsettled.map_or(Ok(()), |e| Err(EngineError::Injected(e)))
    }
    fn checkpoint_tails_in_flight(&mut self) -> usize {
        self.script().tails_in_flight
    }
    fn record_checkpoint_failure(&mut self, id: u64, reason: &EngineError) {
        self.note(format!("checkpoint failed {id}: {reason}"));
    }
    fn record_checkpoint_continuation_fault(
        &mut self,
        attempt: CheckpointAttempt,
        reason: EngineError,
    ) {
        self.note(format!("continuation fault {}: {reason}", attempt.id));
        let id = attempt.id;
        self.script().fault = Some(format!("after checkpoint {id} became durable: {reason}"));
    }
    fn record_checkpoint_admission_failure(&mut self, reason: &EngineError) {
        self.note(format!("admission failure: {reason}"));
    }
}

/// A checkpoint refusal's own words: without the halt or fault it caused,
/// the "checkpoint N failed" the coordinator puts in front, or the
/// "checkpoint failed: " a refusal's display starts with.
pub(crate) fn checkpoint_reason(e: &EngineError) -> String {
    match e {
        EngineError::Fault { cause }
        | EngineError::Halted { cause }
        | EngineError::Shared(cause) => checkpoint_reason(cause),
        EngineError::Context { context, cause }
            if context.starts_with("checkpoint ") && context.ends_with(" failed") =>
        {
            checkpoint_reason(cause)
        }
        EngineError::Checkpoint(r) | EngineError::Injected(r) => r.clone(),
        other => other.to_string(),
    }
}
