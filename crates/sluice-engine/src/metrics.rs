//! Pipeline metrics, recorded per cycle and readable at any time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Counters shared between the coordinator and readers.
#[derive(Debug, Default)]
pub struct PipelineMetrics {
    cycles: AtomicU64,
    events_ingested: AtomicU64,
    batches: AtomicU64,
    cycle_ns: AtomicU64,
    /// When the running cycle started ([`clock_ns`]), 0 between cycles.
    cycle_started: AtomicU64,
    execute_ns: AtomicU64,
    output_store_ns: AtomicU64,
    sink_enqueue_ns: AtomicU64,
    cycle_errors: AtomicU64,
    checkpoints: AtomicU64,
    checkpoints_failed: AtomicU64,
    checkpoints_abandoned: AtomicU64,
    checkpoints_skipped: AtomicU64,
    checkpoint_pause_last_ns: AtomicU64,
    checkpoint_pause_max_ns: AtomicU64,
    checkpoint_pause_total_ns: AtomicU64,
    checkpoint_pauses: AtomicU64,
    checkpoint_rest_ns: AtomicU64,
    checkpoint_tail_longest_unit_ns: AtomicU64,
    checkpoint_tail_last_longest_unit_ns: AtomicU64,
    last_checkpoint: Mutex<Option<crate::seam::CheckpointReport>>,
    watermark: AtomicI64,
    per_source: Mutex<BTreeMap<String, SourceCounters>>,
    per_output: Mutex<BTreeMap<String, u64>>,
    per_exchange: Mutex<BTreeMap<String, ExchangeCounters>>,
    /// Per stream, rows its operators dropped as late (see
    /// [`MetricsSnapshot::operator_late_rows`]).
    per_stream_late: Mutex<BTreeMap<String, u64>>,
    /// The source channel's byte budget, once the pipeline runs.
    source_queue: Mutex<Option<Arc<crate::budget::ByteBudget>>>,
    output_queue_bytes: AtomicU64,
    output_queue_peak_bytes: AtomicU64,
    output_full: AtomicBool,
    held_input_bytes: AtomicU64,
    held_input_peak_bytes: AtomicU64,
    held_full: AtomicBool,
    intake_pauses: AtomicU64,
    source_pressure_cycles: AtomicU64,
}

/// A checkpoint tail paces itself by how busy the cycles counted here keep
/// the compute thread, and its rests are counted here.
impl crate::state::pace::PaceHost for PipelineMetrics {
    /// Finished cycles plus the running one so far: cycles can last longer
    /// than a tail's unit of work (64 batches of 8192 rows), and a busy
    /// compute thread must look busy during them.
    fn busy_ns(&self) -> u64 {
        let done = self.cycle_ns.load(Ordering::Relaxed);
        let started = self.cycle_started.load(Ordering::Relaxed);
        let running = match started {
            0 => 0,
            s => clock_ns().saturating_sub(s),
        };
        done + running
    }

    fn rested(&self, rest: std::time::Duration) {
        let ns = u64::try_from(rest.as_nanos()).unwrap_or(u64::MAX);
        self.checkpoint_rest_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn tail_done(&self, longest: std::time::Duration) {
        let ns = u64::try_from(longest.as_nanos()).unwrap_or(u64::MAX);
        self.checkpoint_tail_last_longest_unit_ns
            .store(ns, Ordering::Relaxed);
        self.checkpoint_tail_longest_unit_ns
            .fetch_max(ns, Ordering::Relaxed);
    }
}

/// Nanoseconds on a process-wide monotonic clock (from its first use).
fn clock_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Per-source counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SourceCounters {
    /// Rows received.
    pub rows_in: u64,
    /// Rows dropped (or diverted) as late.
    pub late_rows: u64,
    /// Malformed rows skipped by the connector.
    pub skipped_rows: u64,
    /// Times the reader was held back by watermark alignment
    /// (`watermark_max_drift`).
    pub alignment_holds: u64,
}

pub use crate::exchange::ExchangeCounters;

/// A consistent-enough copy of the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Execution cycles run.
    pub cycles: u64,
    /// Rows ingested (after late filtering).
    pub events_ingested: u64,
    /// Source batches ingested.
    pub batches: u64,
    /// Total time in cycles.
    pub cycle_ns: u64,
    /// Time executing operators.
    pub execute_ns: u64,
    /// Time updating materialized views and subscriptions.
    pub output_store_ns: u64,
    /// Time writing to sinks.
    pub sink_enqueue_ns: u64,
    /// Cycles that failed.
    pub cycle_errors: u64,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// Checkpoint attempts that failed.
    pub checkpoints_failed: u64,
    /// Checkpoint attempts abandoned before capture.
    pub checkpoints_abandoned: u64,
    /// Periodic checkpoints skipped because a checkpoint tail was still in
    /// flight.
    pub checkpoints_skipped: u64,
    /// Compute-thread pause of the last checkpoint attempt: the time the
    /// coordinator could not run cycles (reservation, drain, capture and
    /// handing off the tail; not the time cycles ran during alignment, nor
    /// the tail's writes, which run off the compute thread).
    pub checkpoint_pause_last_ns: u64,
    /// The largest such pause.
    pub checkpoint_pause_max_ns: u64,
    /// All such pauses added up.
    pub checkpoint_pause_total_ns: u64,
    /// Attempts whose pause was recorded.
    pub checkpoint_pauses: u64,
    /// Time checkpoint tails rested so that a busy pipeline keeps its
    /// throughput (see the `checkpoint_tail_share` option).
    pub checkpoint_rest_ns: u64,
    /// The longest step a checkpoint tail ran without a pace point (where
    /// it may rest) in any tail so far: building, encoding and writing
    /// state go in steps bounded by a chunk of groups, a message or a
    /// slice of the blob, but one step (emitting an aggregate's changed
    /// groups from its accumulator) grows with the groups changed since
    /// the previous checkpoint. At most this long the tail works unpaced
    /// while the pipeline is busy.
    pub checkpoint_tail_longest_unit_ns: u64,
    /// The same, for the last tail that ended.
    pub checkpoint_tail_last_longest_unit_ns: u64,
    /// The last committed checkpoint.
    pub last_checkpoint: Option<crate::seam::CheckpointReport>,
    /// Current pipeline watermark (ms; i64::MIN before any).
    pub watermark: i64,
    /// Per source.
    pub sources: BTreeMap<String, SourceCounters>,
    /// Rows emitted per stream / materialized view.
    pub rows_out: BTreeMap<String, u64>,
    /// Per stream, rows its operators dropped because the watermark had
    /// already passed what they belong to: a row for a window already
    /// closed, a top-N partition already emitted, an OVER frame already
    /// final. Such a row passed its source's late filter (it was on time
    /// there) but arrived at an operator behind a watermark that an
    /// upstream operator's output no longer respects, e.g. a window over
    /// another window's start. Streams that dropped nothing are absent.
    /// Continues across a restore: operators checkpoint their count.
    pub operator_late_rows: BTreeMap<String, u64>,
    /// Per exchange with the other nodes of a split (`STREAM#PORT`).
    pub exchanges: BTreeMap<String, ExchangeCounters>,
    /// Bytes of batches in the source channel now.
    pub source_queue_bytes: u64,
    /// The most bytes the source channel ever held.
    pub source_queue_peak_bytes: u64,
    /// Bytes queued for sink writers and subscribers, as of the last cycle.
    pub output_queue_bytes: u64,
    /// The most bytes ever seen queued for sink writers and subscribers.
    pub output_queue_peak_bytes: u64,
    /// Bytes of input process functions hold, or sent to the function's
    /// other owners, for a checkpoint's commit (a checkpointed split's),
    /// as the coordinator last checked (before
    /// taking source input, and on idle ticks).
    pub held_input_bytes: u64,
    /// The most bytes process functions ever held (or had sent) for a commit.
    pub held_input_peak_bytes: u64,
    /// Times source intake paused because an output was full, or process
    /// functions held `process_held_input_bytes` for a commit.
    pub intake_pauses: u64,
    /// Cycles that began with the source channel at its high-water mark
    /// (readers and pushing callers waiting for room): the pipeline, not
    /// its sources, set the pace of those cycles. A pipeline that keeps up
    /// with its sources counts none.
    pub source_pressure_cycles: u64,
}

impl MetricsSnapshot {
    /// Rows read from all sources.
    pub fn rows_in(&self) -> u64 {
        self.sources.values().map(|s| s.rows_in).sum()
    }

    /// Late rows over all sources.
    pub fn late_rows(&self) -> u64 {
        self.sources.values().map(|s| s.late_rows).sum()
    }

    /// Rows emitted by all streams and views.
    pub fn rows_emitted(&self) -> u64 {
        self.rows_out.values().sum()
    }

    /// Rows dropped as late inside operators, over all streams.
    pub fn operator_late_rows_total(&self) -> u64 {
        self.operator_late_rows.values().sum()
    }
}

impl PipelineMetrics {
    /// New, all zero, watermark at its minimum.
    pub fn new() -> Self {
        let m = Self::default();
        m.watermark.store(i64::MIN, Ordering::Relaxed);
        m
    }

    /// A cycle starts now.
    pub fn note_cycle_start(&self) {
        self.cycle_started
            .store(clock_ns().max(1), Ordering::Relaxed);
    }

    /// Record one finished cycle.
    pub fn record_cycle(&self, events: u64, batches: u64, elapsed_ns: u64) {
        self.cycle_started.store(0, Ordering::Relaxed);
        self.cycles.fetch_add(1, Ordering::Relaxed);
        self.events_ingested.fetch_add(events, Ordering::Relaxed);
        self.batches.fetch_add(batches, Ordering::Relaxed);
        self.cycle_ns.fetch_add(elapsed_ns, Ordering::Relaxed);
    }

    /// Record the phases of one cycle.
    pub fn record_phases(&self, execute_ns: u64, output_store_ns: u64, sink_ns: u64) {
        self.execute_ns.fetch_add(execute_ns, Ordering::Relaxed);
        self.output_store_ns
            .fetch_add(output_store_ns, Ordering::Relaxed);
        self.sink_enqueue_ns.fetch_add(sink_ns, Ordering::Relaxed);
    }

    /// Count a failed cycle.
    pub fn note_cycle_error(&self) {
        self.cycle_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a committed checkpoint.
    pub fn record_checkpoint(&self, report: &crate::seam::CheckpointReport) {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        *self.last_checkpoint.lock() = Some(report.clone());
    }

    /// Count a failed checkpoint.
    pub fn note_checkpoint_failed(&self) {
        self.checkpoints_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Record one checkpoint attempt's compute-thread pause.
    pub fn record_checkpoint_pause(&self, pause_ns: u64) {
        self.checkpoint_pause_last_ns
            .store(pause_ns, Ordering::Relaxed);
        self.checkpoint_pause_max_ns
            .fetch_max(pause_ns, Ordering::Relaxed);
        self.checkpoint_pause_total_ns
            .fetch_add(pause_ns, Ordering::Relaxed);
        self.checkpoint_pauses.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a periodic checkpoint skipped at the tail bound.
    pub fn note_checkpoint_skipped(&self) {
        self.checkpoints_skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// Count an abandoned checkpoint attempt.
    pub fn note_checkpoint_abandoned(&self) {
        self.checkpoints_abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// Publish the pipeline watermark.
    pub fn set_watermark(&self, wm: i64) {
        self.watermark.store(wm, Ordering::Relaxed);
    }

    /// Update one source's counters.
    pub fn source(&self, name: &str, f: impl FnOnce(&mut SourceCounters)) {
        f(self.per_source.lock().entry(name.to_string()).or_default());
    }

    /// Count rows emitted by a stream.
    pub fn add_output(&self, name: &str, rows: u64) {
        *self.per_output.lock().entry(name.to_string()).or_default() += rows;
    }

    /// What exchange `id` carried so far.
    pub fn set_exchange(&self, id: &str, counters: ExchangeCounters) {
        let mut all = self.per_exchange.lock();
        match all.get_mut(id) {
            Some(c) => *c = counters,
            None => {
                all.insert(id.to_string(), counters);
            }
        }
    }

    /// Record a stream's operators' count of rows dropped as late (their
    /// running total; a stream that dropped none is not recorded).
    pub fn set_operator_late(&self, name: &str, total: u64) {
        if total == 0 {
            return;
        }
        let mut late = self.per_stream_late.lock();
        match late.get_mut(name) {
            Some(v) => *v = total,
            None => {
                late.insert(name.to_string(), total);
            }
        }
    }

    /// Report the source channel's byte budget in snapshots.
    pub fn watch_source_queue(&self, budget: Arc<crate::budget::ByteBudget>) {
        *self.source_queue.lock() = Some(budget);
    }

    /// Count a cycle that began with the source channel at high water.
    pub fn note_source_pressure(&self) {
        self.source_pressure_cycles.fetch_add(1, Ordering::Relaxed);
    }

    /// Record the input process functions hold for a commit as the
    /// coordinator saw it before taking source input; a pause is counted
    /// when it reaches its budget.
    pub fn record_held_input(&self, bytes: u64, full: bool) {
        self.record_pressure(
            [&self.held_input_bytes, &self.held_input_peak_bytes],
            &self.held_full,
            bytes,
            full,
        );
    }

    /// Record the output queues as the coordinator saw them before a
    /// cycle; a pause is counted when they turn full.
    pub fn record_output_pressure(&self, queued_bytes: u64, full: bool) {
        self.record_pressure(
            [&self.output_queue_bytes, &self.output_queue_peak_bytes],
            &self.output_full,
            queued_bytes,
            full,
        );
    }

    /// `bytes` now and at peak; a pause counted when `was_full` turns on.
    fn record_pressure(
        &self,
        [now, peak]: [&AtomicU64; 2],
        was_full: &AtomicBool,
        bytes: u64,
        full: bool,
    ) {
        now.store(bytes, Ordering::Relaxed);
        peak.fetch_max(bytes, Ordering::Relaxed);
        if full && !was_full.swap(true, Ordering::Relaxed) {
            self.intake_pauses.fetch_add(1, Ordering::Relaxed);
        } else if !full {
            was_full.store(false, Ordering::Relaxed);
        }
    }

    /// Copy out.
    pub fn snapshot(&self) -> MetricsSnapshot {
        // Cloned out first: one lock at a time.
        let source_queue = self.source_queue.lock().clone();
        MetricsSnapshot {
            cycles: self.cycles.load(Ordering::Relaxed),
            events_ingested: self.events_ingested.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            cycle_ns: self.cycle_ns.load(Ordering::Relaxed),
            execute_ns: self.execute_ns.load(Ordering::Relaxed),
            output_store_ns: self.output_store_ns.load(Ordering::Relaxed),
            sink_enqueue_ns: self.sink_enqueue_ns.load(Ordering::Relaxed),
            cycle_errors: self.cycle_errors.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            checkpoints_failed: self.checkpoints_failed.load(Ordering::Relaxed),
            checkpoints_abandoned: self.checkpoints_abandoned.load(Ordering::Relaxed),
            checkpoints_skipped: self.checkpoints_skipped.load(Ordering::Relaxed),
            checkpoint_pause_last_ns: self.checkpoint_pause_last_ns.load(Ordering::Relaxed),
            checkpoint_pause_max_ns: self.checkpoint_pause_max_ns.load(Ordering::Relaxed),
            checkpoint_pause_total_ns: self.checkpoint_pause_total_ns.load(Ordering::Relaxed),
            checkpoint_pauses: self.checkpoint_pauses.load(Ordering::Relaxed),
            checkpoint_rest_ns: self.checkpoint_rest_ns.load(Ordering::Relaxed),
            checkpoint_tail_longest_unit_ns: self
                .checkpoint_tail_longest_unit_ns
                .load(Ordering::Relaxed),
            checkpoint_tail_last_longest_unit_ns: self
                .checkpoint_tail_last_longest_unit_ns
                .load(Ordering::Relaxed),
            last_checkpoint: self.last_checkpoint.lock().clone(),
            watermark: self.watermark.load(Ordering::Relaxed),
            sources: self.per_source.lock().clone(),
            rows_out: self.per_output.lock().clone(),
            operator_late_rows: self.per_stream_late.lock().clone(),
            exchanges: self.per_exchange.lock().clone(),
            source_queue_bytes: source_queue.as_ref().map_or(0, |b| b.queued()),
            source_queue_peak_bytes: source_queue.as_ref().map_or(0, |b| b.peak()),
            output_queue_bytes: self.output_queue_bytes.load(Ordering::Relaxed),
            output_queue_peak_bytes: self.output_queue_peak_bytes.load(Ordering::Relaxed),
            held_input_bytes: self.held_input_bytes.load(Ordering::Relaxed),
            held_input_peak_bytes: self.held_input_peak_bytes.load(Ordering::Relaxed),
            intake_pauses: self.intake_pauses.load(Ordering::Relaxed),
            source_pressure_cycles: self.source_pressure_cycles.load(Ordering::Relaxed),
        }
    }
}
