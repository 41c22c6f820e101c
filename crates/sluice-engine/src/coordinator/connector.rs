//! `ConnectorPipelineCallback`: the production implementation of the seam.
//!
//! It owns the installed operator graph, per-source watermark state, sinks,
//! materialized-view stores and the subscription registry.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, BooleanArray};
use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sluice_connectors::BatchReader;

use super::callback::{
    BatchMap, CycleError, CycleExecution, CycleOutcome, ExternalOutputPressure, OutputPublication,
    SourceIntake,
};
use super::streams::{InstalledStream, MarkMap, StreamFailure};
use crate::catalog::SourceDef;
use crate::error::EngineError;
use crate::fault::FaultSite;
use crate::metrics::PipelineMetrics;
use crate::operators::expr::event_time_ms;
use crate::output::sink::{SinkMode, SinkRuntime};
use crate::output::subscription::DeliveryEnd;
use crate::output::subscription::SubscriptionRegistry;
use crate::process::placement::VnodePlacement;
use crate::seam::CheckpointConfig;
use crate::sources::{spawn_reader, SourceBarrierControl, SourceSender};
use crate::split::moved::MovedState;
use crate::watermark::{combine, Alignment, SourceWatermark};

pub(super) struct SourceState {
    pub(super) def: SourceDef,
    pub(super) watermark: SourceWatermark,
    pub(super) late_to: Option<Arc<str>>,
    /// Opened reader waiting for `Start`.
    pub(super) pending_reader: Option<Box<dyn BatchReader>>,
    /// Barrier requests and stop signal for the reader thread.
    pub(super) control: SourceBarrierControl,
    /// Whether a reader thread runs.
    pub(super) reading: bool,
    /// Final offset, once finished.
    pub(super) final_offset: Option<String>,
}

/// A vnode transition staged for this (re)start
/// (`ControlMsg::StageVnodeTransition`), completed by
/// `RuntimeControl::complete_pending_vnode_transition` before `Start`.
pub(super) struct PendingTransition {
    /// The previous holders' checkpoints at one cut.
    pub(super) state: Arc<MovedState>,
    /// The vnodes this node holds from now on.
    pub(super) placement: VnodePlacement,
}

/// Shared handles the callback publishes to.
#[derive(Clone)]
pub struct SharedOutputs {
    /// Metrics.
    pub metrics: Arc<PipelineMetrics>,
    /// Subscribers.
    pub subscriptions: Arc<SubscriptionRegistry>,
}

/// The production [`super::callback::PipelineCallback`].
pub struct ConnectorPipelineCallback {
    pub(super) sources: FxHashMap<Arc<str>, SourceState>,
    pub(super) streams: Vec<InstalledStream>,
    pub(super) sinks: Vec<SinkRuntime>,
    pub(super) late_stash: Mutex<BatchMap>,
    /// The pipeline watermark after each batch taken in since the last
    /// cycle, per source, in arrival order (see [`super::streams`]).
    pub(super) cycle_marks: MarkMap,
    pub(super) watermark: i64,
    /// Failures found where they could not be returned (after a checkpoint
    /// became durable, a peer that never attached), in the order found,
    /// for the coordinator to take: halts first (see
    /// [`super::callback::RuntimeControl::take_pipeline_halt`]).
    pub(super) failures: Vec<CycleError>,
    pub(super) started: bool,
    pub(super) source_tx: SourceSender,
    pub(super) readers: Vec<std::thread::JoinHandle<()>>,
    pub(super) shared: SharedOutputs,
    pub(super) checkpoints: Option<CheckpointConfig>,
    pub(super) sink_mode: SinkMode,
    /// Durable halves of checkpoints, running off the compute thread.
    pub(super) tails: super::tails::CheckpointTails,
    /// `watermark_max_drift` in ms: readers further ahead are held.
    pub(super) max_drift_ms: Option<i64>,
    /// `process_held_input_bytes`: see [`Self::with_held_input_budget`].
    pub(super) held_input_budget: u64,
    /// The leader's attempt this follower is aligning for, until it is
    /// captured, declined or resolved.
    pub(super) following: Option<u64>,
    /// The shuffle between the nodes of a split, if this node is one with
    /// keyed operators (see [`crate::exchange`]).
    pub(super) exchanges: Option<Arc<crate::exchange::ShuffleSetup>>,
    /// The watermark of this node's own sources (the pipeline watermark
    /// also waits for the other nodes' rows on its exchanges).
    pub(super) local_watermark: i64,
    /// The vnode transition staged for this (re)start, until it completes.
    pub(super) pending_transition: Option<PendingTransition>,
}

impl ConnectorPipelineCallback {
    /// A callback with nothing installed; checkpointing starts off.
    pub fn new(source_tx: impl Into<SourceSender>, shared: SharedOutputs) -> Self {
        Self {
            sources: FxHashMap::default(),
            streams: Vec::new(),
            sinks: Vec::new(),
            late_stash: Mutex::new(FxHashMap::default()),
            cycle_marks: FxHashMap::default(),
            watermark: i64::MIN,
            failures: Vec::new(),
            started: false,
            source_tx: source_tx.into(),
            readers: Vec::new(),
            shared,
            checkpoints: None,
            sink_mode: SinkMode::Atomic,
            tails: super::tails::CheckpointTails::default(),
            max_drift_ms: None,
            held_input_budget: u64::MAX,
            following: None,
            exchanges: None,
            local_watermark: i64::MIN,
            pending_transition: None,
        }
    }

    /// Pause source intake while process functions hold `bytes` of input
    /// for a checkpoint's commit (unbounded when never called).
    pub fn with_held_input_budget(mut self, bytes: u64) -> Self {
        self.held_input_budget = bytes;
        self
    }

    /// Hold back a reader whose watermark runs more than `max_drift` ahead
    /// of the slowest other active source (see [`crate::watermark`]);
    /// `None` lets every source read as fast as it can.
    pub fn with_watermark_alignment(mut self, max_drift: Option<std::time::Duration>) -> Self {
        self.max_drift_ms = max_drift.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self
    }

    /// Start the reader thread of source `name` (a no-op for a source
    /// without a pending reader). An error: the thread could not be
    /// spawned; the source does not read.
    pub(super) fn start_reader(&mut self, name: &Arc<str>) -> Result<(), EngineError> {
        let Some(state) = self.sources.get_mut(name) else {
            return Ok(());
        };
        if state.watermark.is_finished() {
            state.pending_reader = None;
            return Ok(());
        }
        if let Some(reader) = state.pending_reader.take() {
            match spawn_reader(
                Arc::clone(name),
                reader,
                self.source_tx.clone(),
                Arc::clone(&self.shared.metrics),
                state.control.clone(),
            ) {
                Ok(h) => {
                    state.reading = true;
                    self.readers.push(h);
                }
                Err(e) => {
                    let e = sluice_connectors::ConnectorError::Io {
                        path: format!("sluice-source-{name} (reader thread)").into(),
                        source: e,
                    };
                    return Err(EngineError::from(e).context(format!("source '{name}'")));
                }
            }
        }
        Ok(())
    }

    pub(super) fn recompute_watermark(&mut self) {
        self.local_watermark = combine(
            self.sources.values().map(|s| &s.watermark),
            self.local_watermark,
        );
        self.watermark = self.held_by_edges(self.local_watermark).max(self.watermark);
        self.shared.metrics.set_watermark(self.watermark);
        self.align_readers();
    }

    /// Watermark alignment: hold the readers that run too far ahead, let
    /// the others read. Only reader threads can be held; a push source's
    /// caller is never blocked by it (it still counts as a reference).
    fn align_readers(&self) {
        let Some(drift) = self.max_drift_ms else {
            return;
        };
        let alignment = Alignment::new(self.sources.values().map(|s| &s.watermark), drift);
        for (i, (name, s)) in self.sources.iter().enumerate() {
            let ahead = s.reading && alignment.is_ahead(i, &s.watermark);
            if s.control.hold(ahead) && ahead {
                tracing::trace!(source = %name, watermark = s.watermark.watermark(), "reader held: ahead of the other sources");
                self.shared.metrics.source(name, |c| c.alignment_holds += 1);
            }
        }
    }

    /// A sink write that failed on its writer thread is a failed cycle's
    /// output, pending like any other failure found between calls.
    pub(super) fn collect_sink_failures(&mut self) {
        let failed = self.sinks.iter().filter_map(SinkRuntime::take_failure);
        self.failures.extend(failed.map(CycleError::Output));
    }

    fn source(&self, name: &str) -> Result<&SourceState, CycleError> {
        self.sources.get(name).ok_or_else(|| {
            CycleError::Source(EngineError::Catalog(format!(
                "source '{name}': no such source (dropped?)"
            )))
        })
    }

    fn event_times(
        state: &SourceState,
        batch: &RecordBatch,
    ) -> Result<Option<arrow::array::Int64Array>, CycleError> {
        let Some(idx) = state.def.time_index else {
            return Ok(None);
        };
        let column = batch.schema().field(idx).name().clone();
        event_time_ms(batch.column(idx), &column)
            .map(Some)
            .map_err(|e| CycleError::Source(e.context(format!("source '{}'", state.def.name))))
    }
}

impl SourceIntake for ConnectorPipelineCallback {
    /// In a cluster, a node that does not lead (a standby, or a leader
    /// deposed while it runs) folds no input into state: its sinks will
    /// never publish it, and the leader's run owns the sources.
    fn intake_paused(&self) -> bool {
        self.authority().is_some_and(|a| !a.may_fold_input())
    }
    fn filter_late_rows(
        &self,
        source_name: &str,
        batch: &RecordBatch,
    ) -> Result<Option<RecordBatch>, CycleError> {
        // Batches a push source queued before DROP SOURCE arrive after it:
        // they belong to no pipeline any more and are discarded, instead of
        // halting the pipeline over a statement that succeeded.
        if !self.sources.contains_key(source_name) {
            tracing::debug!(source = source_name, "batch of a dropped source discarded");
            return Ok(None);
        }
        let state = self.source(source_name)?;
        let rows = batch.num_rows() as u64;
        self.shared
            .metrics
            .source(source_name, |c| c.rows_in += rows);
        let Some(times) = Self::event_times(state, batch)? else {
            return Ok(Some(batch.clone()));
        };
        let wm = state.watermark.watermark();
        if times.null_count() == 0 && (wm == i64::MIN || times.values().iter().all(|t| *t >= wm)) {
            return Ok((batch.num_rows() > 0).then(|| batch.clone()));
        }
        // Null event times cannot be placed in time: they count as late.
        let on_time: BooleanArray = times
            .iter()
            .map(|t| Some(t.is_some_and(|t| t >= wm)))
            .collect();
        let late_mask =
            arrow::compute::not(&on_time).map_err(|e| CycleError::Execution(e.into()))?;
        let late = late_mask.true_count() as u64;
        self.shared
            .metrics
            .source(source_name, |c| c.late_rows += late);
        if let Some(to) = &state.late_to {
            let late_rows = arrow::compute::filter_record_batch(batch, &late_mask)
                .map_err(|e| CycleError::Execution(e.into()))?;
            self.late_stash
                .lock()
                .entry(Arc::clone(to))
                .or_default()
                .push(late_rows);
        }
        let kept = arrow::compute::filter_record_batch(batch, &on_time)
            .map_err(|e| CycleError::Execution(e.into()))?;
        Ok((kept.num_rows() > 0).then_some(kept))
    }

    fn extract_watermark(
        &mut self,
        source_name: &str,
        batch: &RecordBatch,
        admission_floor: i64,
    ) -> Result<(), CycleError> {
        let state = self.source(source_name)?;
        let max = match Self::event_times(state, batch)? {
            Some(t) => arrow::compute::max(&t),
            None => None,
        };
        if let Some(state) = self.sources.get_mut(source_name) {
            state
                .watermark
                .observe(max, admission_floor, Instant::now());
        }
        self.recompute_watermark();
        // One mark per batch taken in: after the n-th, the watermark was wm.
        let wm = self.watermark;
        match self.cycle_marks.get_mut(source_name) {
            Some(m) => m.push((m.len() + 1, wm)),
            None => {
                self.cycle_marks
                    .insert(Arc::from(source_name), vec![(1, wm)]);
            }
        }
        Ok(())
    }

    fn advance_source_watermark(&mut self, source_name: &str, watermark: i64) {
        if let Some(s) = self.sources.get_mut(source_name) {
            s.watermark.advance_to(watermark, Instant::now());
        }
        self.recompute_watermark();
    }

    fn finish_source(&mut self, source_name: &str, offset: Option<String>) {
        if let Some(s) = self.sources.get_mut(source_name) {
            s.watermark.finish();
            s.reading = false;
            s.final_offset = offset;
        }
        self.recompute_watermark();
    }

    fn all_sources_finished(&self) -> bool {
        !self.sources.is_empty()
            && self.sources.values().all(|s| s.watermark.is_finished())
            && self.exchanges_finished()
    }

    fn current_watermark(&self) -> i64 {
        self.watermark
    }

    fn is_backpressured(&self) -> bool {
        self.source_tx
            .budget()
            .is_some_and(|b| b.is_over_high_water())
    }

    /// Also tells the leader, on a follower, whether this node holds
    /// input that waits for a commit (see
    /// [`CycleExecution::has_deferred_input`]); input a commit released
    /// needs no checkpoint, and does not count.
    fn held_input_full(&self) -> bool {
        let held: u64 = self
            .streams
            .iter()
            .map(InstalledStream::input_awaiting_commit_bytes)
            .sum();
        let full = held >= self.held_input_budget;
        self.shared.metrics.record_held_input(held, full);
        if let Some(authority) = self.authority() {
            authority.request_checkpoints(held > 0);
        }
        full
    }

    fn external_output_pressure(&self) -> ExternalOutputPressure {
        let (subscribers_full, subscriber_bytes) = self.shared.subscriptions.pressure();
        let sinks_full = self.sinks.iter().any(SinkRuntime::is_full);
        let sink_bytes: u64 = self.sinks.iter().map(SinkRuntime::queued_bytes).sum();
        let full = subscribers_full || sinks_full || self.exchanges_full();
        self.shared.metrics.record_output_pressure(
            subscriber_bytes + sink_bytes + self.exchange_queued_bytes(),
            full,
        );
        if full {
            ExternalOutputPressure::Full
        } else {
            ExternalOutputPressure::Clear
        }
    }

    fn output_pressure_wake(&self) -> Option<Arc<crate::budget::Relief>> {
        Some(self.shared.subscriptions.relief())
    }

    fn tick_idle_watermark(&mut self) {
        let now = Instant::now();
        for (name, s) in self.sources.iter_mut() {
            if s.watermark.check_idle(now) {
                tracing::debug!(source = %name, "source idle; no longer holding the watermark");
            }
        }
        self.recompute_watermark();
        // An idle source moves this node's watermark without a cycle: the
        // other nodes wait for it.
        self.flush_exchanges();
        self.check_exchanges_attached();
        // The metrics show the held input while intake waits for a commit.
        self.held_input_full();
    }

    fn shuffle_work_wake(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.exchanges.as_ref().map(|s| s.wake())
    }

    fn take_shuffle_input(&mut self) -> Result<bool, CycleError> {
        self.drain_exchanges()
    }

    fn shuffle_input_open(&self) -> bool {
        // Before `Start`, a row folded would be lost to the recovered
        // state that replaces the operators' (or written to a sink opened
        // before its delivery mode is known): it waits in the channel.
        if !self.started {
            return false;
        }
        let (subscribers_full, _) = self.shared.subscriptions.pressure();
        !self.intake_paused() && !subscribers_full && !self.sinks.iter().any(SinkRuntime::is_full)
    }
}

impl CycleExecution for ConnectorPipelineCallback {
    fn has_runnable_deferred_input(&self) -> bool {
        self.streams.iter().any(InstalledStream::has_runnable_input)
    }

    /// Also while another node says it holds input waiting for a commit
    /// (see [`sluice_storage::CommitAuthority::checkpoints_requested`];
    /// each node says so from [`SourceIntake::held_input_full`], on every
    /// step that may take input and every idle tick, and withdraws it once
    /// it stopped):
    /// only the leader's checkpoints release it, and the leader cannot see
    /// it. Without this, a leader with nothing new of its own would take
    /// no checkpoint while a follower waited for one (at
    /// `process_held_input_bytes`, with its sources stopped).
    fn has_deferred_input(&self) -> bool {
        self.streams.iter().any(InstalledStream::has_held_input)
            || self.authority().is_some_and(|a| a.checkpoints_requested())
    }

    async fn execute_cycle(
        &mut self,
        source_batches: &BatchMap,
        watermark: i64,
    ) -> Result<CycleOutcome, CycleError> {
        let mut data = source_batches.clone();
        for (k, v) in std::mem::take(&mut *self.late_stash.lock()) {
            data.entry(k).or_default().extend(v);
        }
        let mut marks = std::mem::take(&mut self.cycle_marks);
        // Once a process function accepted calls, its state and activation
        // ids moved on: a later failure in the same cycle is reported as a
        // process failure (no failed cycle is ever dropped in any case).
        let mut processed = false;
        let metrics = &self.shared.metrics;
        for s in self.streams.iter_mut() {
            let name = Arc::clone(&s.name);
            // A panicking operator fails the cycle like an operator error.
            crate::panic::contain(
                || format!("stream '{name}'"),
                || {
                    s.run(&mut data, &mut marks, watermark)?;
                    metrics.set_operator_late(&name, s.dropped_late());
                    let rows: usize = data
                        .get(&name)
                        .map_or(0, |b| b.iter().map(RecordBatch::num_rows).sum());
                    if rows == 0 {
                        return Ok(());
                    }
                    crate::fault::hit(FaultSite::Stream, &name, rows as u64)
                        .map_err(|e| StreamFailure::Other(e.context(format!("stream '{name}'"))))
                },
            )
            .map_err(StreamFailure::Other)
            .and_then(|r| r)
            .map_err(|f| match f {
                StreamFailure::Process(m) => CycleError::Process(m),
                StreamFailure::Other(m) if processed => CycleError::Process(m),
                StreamFailure::Other(m) => CycleError::Execution(m),
            })?;
            processed |= s.is_process();
        }
        self.flush_exchanges();
        Ok(CycleOutcome { results: data })
    }

    fn note_cycle_start(&self) {
        self.shared.metrics.note_cycle_start();
    }

    fn note_source_pressure(&self) {
        self.shared.metrics.note_source_pressure();
    }

    fn record_cycle(&self, events_ingested: u64, batches: u64, elapsed_ns: u64) {
        self.shared
            .metrics
            .record_cycle(events_ingested, batches, elapsed_ns);
    }

    fn record_cycle_phases(&self, execute_ns: u64, output_store_ns: u64, sink_enqueue_ns: u64) {
        self.shared
            .metrics
            .record_phases(execute_ns, output_store_ns, sink_enqueue_ns);
    }

    fn note_cycle_error(&self) {
        self.shared.metrics.note_cycle_error();
    }
}

impl OutputPublication for ConnectorPipelineCallback {
    fn update_mv_stores(&self, results: &BatchMap) -> Result<(), CycleError> {
        for s in &self.streams {
            let Some(batches) = results.get(&s.name) else {
                continue;
            };
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            self.shared.metrics.add_output(&s.name, rows as u64);
            if let Some(view) = &s.view {
                for b in batches {
                    crate::panic::contain(
                        || format!("materialized view '{}'", s.name),
                        || view.apply(b),
                    )
                    .map_err(CycleError::Output)?
                    .map_err(|e| {
                        CycleError::Output(e.context(format!("materialized view '{}'", s.name)))
                    })?;
                }
            }
        }
        Ok(())
    }

    fn push_to_streams(&self, results: &BatchMap) -> Result<(), CycleError> {
        for (name, batches) in results {
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            crate::panic::contain(
                || format!("subscription delivery of '{name}'"),
                || {
                    if rows > 0 {
                        crate::fault::hit(FaultSite::Subscription, name, rows as u64)?;
                    }
                    self.shared.subscriptions.stage(name, batches)
                },
            )
            .and_then(|r| r)
            .map_err(|e| CycleError::Output(e.context(format!("subscription to '{name}'"))))?;
        }
        Ok(())
    }

    fn commit_subscription_output(&mut self) {
        self.shared.subscriptions.commit_staged();
    }

    fn abort_subscription_output(&mut self) {
        self.shared.subscriptions.abort_staged();
    }

    async fn write_to_sinks(&mut self, results: &BatchMap) -> Result<(), CycleError> {
        let wm = self.watermark;
        for sink in self.sinks.iter_mut() {
            // Pushed rows can arrive before `start`: open the sink for them
            // in the mode known so far (atomic unless checkpointing is on).
            let mode = self.sink_mode;
            let name = sink.name().to_string();
            crate::panic::contain(
                || format!("sink '{name}'"),
                || {
                    if !sink.is_open() {
                        sink.begin(mode, None)?;
                    }
                    sink.write(results, wm)
                },
            )
            .and_then(|r| r)
            .map_err(CycleError::Output)?;
        }
        // The last input went in: wait for the writers, so a write that
        // fails fails this cycle, before the pipeline reports it finished.
        if self.all_sources_finished() {
            for sink in &self.sinks {
                sink.flush().map_err(CycleError::Output)?;
            }
        }
        Ok(())
    }

    fn reserve_subscription_cut(
        &mut self,
        attempt: super::callback::CheckpointAttempt,
    ) -> Result<(), EngineError> {
        self.shared.subscriptions.reserve_cut(attempt.id);
        Ok(())
    }

    fn abort_subscription_cut(&mut self, attempt: super::callback::CheckpointAttempt) {
        self.shared.subscriptions.abort_cut(attempt.id);
    }

    fn publish_barrier(
        &mut self,
        attempt: super::callback::CheckpointAttempt,
    ) -> Result<(), EngineError> {
        // Input a process function held for this cut may run now.
        for s in self.streams.iter_mut() {
            s.commit(attempt.id);
        }
        self.shared.subscriptions.publish_cut(attempt.id)
    }

    fn invalidate_subscriptions(&self, ended_by: Option<DeliveryEnd>) {
        tracing::info!(?ended_by, "closing subscriptions");
        self.shared.subscriptions.close_all(ended_by);
    }

    async fn close_sinks(&mut self) -> Result<(), EngineError> {
        // The other nodes take this node's last routed rows first (their
        // outputs need them; this node's own are complete once its
        // pipeline finished), then its channels close.
        let settled = self.settle_exchanges().await;
        self.publish_exchange_counters();
        self.close_exchanges();
        let mut results: Vec<Result<(), EngineError>> = vec![settled];
        results.extend(self.sinks.iter_mut().map(|sink| {
            let name = sink.name().to_string();
            crate::panic::contain(|| format!("closing sink '{name}'"), || sink.close())
                .and_then(|r| r.map(|_| ()))
        }));
        first_error(results, "closing sink failed")
    }

    fn abort_sinks(&mut self) -> Result<(), EngineError> {
        // A stopped pipeline's channels close: the other nodes learn it is
        // gone instead of waiting for its rows.
        self.close_exchanges();
        let results: Vec<Result<(), EngineError>> = self
            .sinks
            .iter_mut()
            .map(|s| {
                let name = s.name().to_string();
                crate::panic::contain(|| format!("aborting sink '{name}'"), || s.abort())
                    .and_then(|r| r)
            })
            .collect();
        first_error(results, "aborting sink failed")
    }
}

/// The first error of `results`; the later ones are logged (each sink was
/// attempted, and the first failure is the one the caller acts on).
fn first_error(results: Vec<Result<(), EngineError>>, what: &str) -> Result<(), EngineError> {
    let mut first = None;
    for e in results.into_iter().filter_map(Result::err) {
        match first {
            None => first = Some(e),
            Some(_) => tracing::warn!(error = %e, code = e.code(), "{what}"),
        }
    }
    first.map_or(Ok(()), Err)
}
