//! Typed pipeline options (`SET`, `--set`, builder) and connector options.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_connectors::{FileFormat, OnError};
use sluice_sql::WithOptions;

use crate::error::{EngineError, Result};

mod spec;
#[cfg(test)]
mod tests;

pub use spec::{spec, OptionKind, OptionSpec, PIPELINE_OPTION_SPECS};

/// The delivery guarantee of a checkpointed pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// After a crash every row is delivered at least once (replays may repeat rows).
    AtLeastOnce,
    /// After a crash the outputs are exactly those of an uninterrupted run.
    ExactlyOnce,
}

/// Options of one pipeline. Every name is known; anything else is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineOptions {
    /// Time between periodic checkpoints (None: no periodic checkpoints).
    pub checkpoint_interval: Option<Duration>,
    /// Delivery guarantee when checkpointing.
    pub delivery: Delivery,
    /// Where checkpoints go (an object-store URL); default `<state dir>/checkpoints`.
    pub checkpoint_store: Option<String>,
    /// Committed checkpoints kept.
    pub checkpoint_retain: usize,
    /// Percent of the time a checkpoint tail may work while the compute
    /// thread is busy (100: never rest); see `state::pace`.
    pub checkpoint_tail_share: u8,
    /// How long sources may take to align on a checkpoint barrier before the attempt is abandoned.
    pub checkpoint_alignment_timeout: Duration,
    /// How long a checkpoint attempt may take from its start until its
    /// manifest is durable (alignment, capture, the tail's writes and the
    /// sinks' seals); past it the attempt fails and the previous
    /// checkpoint stays the newest.
    pub checkpoint_timeout: Duration,
    /// How long an object store's lease lasts without renewal (renewed
    /// every third of it): how long a pipeline killed on another host
    /// keeps its store from the next one.
    pub checkpoint_store_lease: Duration,
    /// Default time after which a quiet source stops holding the watermark.
    pub idle_timeout: Duration,
    /// Watermark alignment: a reader whose watermark runs more than this
    /// ahead of the slowest other active source waits (None: off).
    pub watermark_max_drift: Option<Duration>,
    /// Default maximum rows per batch read by file sources.
    pub batch_size: usize,
    /// Batches buffered between sources and the coordinator (backpressure bound).
    pub channel_capacity: usize,
    /// Batches buffered per subscriber before it is disconnected as lagging.
    pub subscription_buffer: usize,
    /// Committed epochs retained per stream for consumers that resume.
    pub subscription_history: usize,
    /// Bytes of committed output retained per stream for consumers that resume.
    pub subscription_history_bytes: usize,
    /// Most source batches folded into one execution cycle.
    pub max_batches_per_cycle: usize,
    /// Restarts from the last committed checkpoint after a fault, in the
    /// pipeline's life (0: the first fault is reported). 3 by default, so
    /// an embedding program recovers as `sluice run` does.
    pub restart_budget: usize,
    /// Wait before the first restart after a fault; doubled for each later one.
    pub restart_backoff: Duration,
    /// Bytes of batches buffered between sources and the coordinator;
    /// readers and pushing callers wait from 80% of it on.
    pub source_queue_bytes: u64,
    /// Bytes of batches buffered per sink between the coordinator and the
    /// sink's writer thread; source intake pauses from 80% of it on.
    pub sink_queue_bytes: u64,
    /// Bytes of batches buffered per subscriber; from 80% of it on source
    /// intake pauses (backpressure) or the subscriber is dropped (disconnect).
    pub subscription_buffer_bytes: u64,
    /// What a subscriber that falls behind does by default.
    pub subscription_on_lag: OnLag,
    /// Bytes of input the process functions of a checkpointed split may
    /// hold for a checkpoint's commit (see `process/commit_gate.rs`); from
    /// this on, source intake pauses until a commit releases some.
    pub process_held_input_bytes: u64,
    /// This node's share of a pipeline split across nodes (`None`: the
    /// whole pipeline). Set by the builder, never by `SET`.
    pub split: Option<crate::split::SourceSplit>,
    /// The shuffle between the nodes of the split, for keyed operators
    /// (`None`: a split runs row-by-row queries only). Set by the builder.
    pub shuffle: Option<crate::exchange::ShuffleHandle>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        Self {
            checkpoint_interval: None,
            delivery: Delivery::AtLeastOnce,
            checkpoint_store: None,
            checkpoint_retain: 3,
            checkpoint_tail_share: DEFAULT_TAIL_SHARE,
            checkpoint_alignment_timeout: Duration::from_secs(10),
            checkpoint_timeout: Duration::from_secs(600),
            checkpoint_store_lease: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(5),
            watermark_max_drift: None,
            batch_size: 8192,
            channel_capacity: 16,
            subscription_buffer: 1024,
            subscription_history: 16,
            subscription_history_bytes: 64 << 20,
            max_batches_per_cycle: 64,
            restart_budget: 3,
            restart_backoff: Duration::from_millis(100),
            source_queue_bytes: 64 << 20,
            sink_queue_bytes: 64 << 20,
            subscription_buffer_bytes: 64 << 20,
            subscription_on_lag: OnLag::Backpressure,
            process_held_input_bytes: 256 << 20,
            split: None,
            shuffle: None,
        }
    }
}

/// The default of `checkpoint_tail_share` (percent): measured with
/// `examples/checkpoint_bench.rs` (BENCHMARKS.md, "Pacing the checkpoint
/// tail").
pub const DEFAULT_TAIL_SHARE: u8 = 25;

/// Every option name [`PipelineOptions::set`] accepts.
pub const PIPELINE_OPTIONS: &[&str] = &[
    "checkpoint_interval",
    "delivery",
    "checkpoint_store",
    "checkpoint_retain",
    "checkpoint_tail_share",
    "checkpoint_alignment_timeout",
    "checkpoint_timeout",
    "checkpoint_store_lease",
    "idle_timeout",
    "watermark_max_drift",
    "batch_size",
    "channel_capacity",
    "subscription_buffer",
    "subscription_history",
    "subscription_history_bytes",
    "max_batches_per_cycle",
    "restart_budget",
    "restart_backoff",
    "source_queue_bytes",
    "sink_queue_bytes",
    "subscription_buffer_bytes",
    "subscription_on_lag",
    "process_held_input_bytes",
];

impl PipelineOptions {
    /// Set one option by name, refusing an unknown name or a value outside
    /// the option's allowed range (see [`PIPELINE_OPTION_SPECS`]).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let spec = spec(name)?;
        match spec.name {
            "checkpoint_interval" => self.checkpoint_interval = spec.duration(value)?,
            "delivery" => {
                self.delivery = match spec.choice(value)? {
                    "exactly_once" => Delivery::ExactlyOnce,
                    _ => Delivery::AtLeastOnce,
                }
            }
            "checkpoint_store" => self.checkpoint_store = Some(spec.text(value)?),
            "checkpoint_retain" => self.checkpoint_retain = spec.count(value)?,
            "checkpoint_tail_share" => {
                self.checkpoint_tail_share = u8::try_from(spec.count(value)?).map_err(|_| {
                    EngineError::Internal("checkpoint_tail_share passed its range".into())
                })?
            }
            "checkpoint_alignment_timeout" => {
                self.checkpoint_alignment_timeout = spec.required_duration(value)?
            }
            "checkpoint_timeout" => self.checkpoint_timeout = spec.required_duration(value)?,
            "checkpoint_store_lease" => {
                self.checkpoint_store_lease = spec.required_duration(value)?
            }
            "idle_timeout" => self.idle_timeout = spec.required_duration(value)?,
            "watermark_max_drift" => self.watermark_max_drift = spec.duration(value)?,
            "batch_size" => self.batch_size = spec.count(value)?,
            "channel_capacity" => self.channel_capacity = spec.count(value)?,
            "subscription_buffer" => self.subscription_buffer = spec.count(value)?,
            "subscription_history" => self.subscription_history = spec.count(value)?,
            "subscription_history_bytes" => self.subscription_history_bytes = spec.count(value)?,
            "max_batches_per_cycle" => self.max_batches_per_cycle = spec.count(value)?,
            "restart_budget" => self.restart_budget = spec.count(value)?,
            "restart_backoff" => self.restart_backoff = spec.required_duration(value)?,
            "source_queue_bytes" => self.source_queue_bytes = spec.count(value)? as u64,
            "sink_queue_bytes" => self.sink_queue_bytes = spec.count(value)? as u64,
            "subscription_buffer_bytes" => {
                self.subscription_buffer_bytes = spec.count(value)? as u64
            }
            "process_held_input_bytes" => self.process_held_input_bytes = spec.count(value)? as u64,
            "subscription_on_lag" => {
                self.subscription_on_lag = match spec.choice(value)? {
                    "disconnect" => OnLag::Disconnect,
                    _ => OnLag::Backpressure,
                }
            }
            other => {
                return Err(EngineError::Internal(format!(
                    "option '{other}' has a spec but no field"
                )))
            }
        }
        Ok(())
    }
}

/// Parse the duration option `name` (e.g. a source's `idle_timeout`),
/// checked against the range of the pipeline option of the same name.
pub fn parse_duration(name: &str, value: &str) -> Result<Duration> {
    spec(name)?.required_duration(value)
}

/// Parse the count option `name` (e.g. a source's `batch_size`), checked
/// against the range of the pipeline option of the same name.
pub fn parse_count(name: &str, value: &str) -> Result<usize> {
    spec(name)?.count(value)
}

/// Resolve a connector path against the base directory.
pub fn resolve_path(base: Option<&Path>, path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

/// Take `format`, or infer it from the path's extension.
pub fn take_format(opts: &mut WithOptions, path: &str, context: &str) -> Result<FileFormat> {
    match opts.take("format") {
        Some(f) => f
            .parse::<FileFormat>()
            .map_err(|e| EngineError::Option(format!("{context}: {e}"))),
        None => FileFormat::from_path(Path::new(path)).ok_or_else(|| {
            EngineError::Option(format!(
                "{context}: cannot tell the format of '{path}' from its extension; add format = 'csv' | 'json' | 'parquet'"
            ))
        }),
    }
}

/// Take `on_error` (default fail).
pub fn take_on_error(opts: &mut WithOptions, context: &str) -> Result<OnError> {
    match opts.take("on_error") {
        Some(v) => v
            .parse::<OnError>()
            .map_err(|e| EngineError::Option(format!("{context}: {e}"))),
        None => Ok(OnError::Fail),
    }
}

/// What a subscriber whose queue is full does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLag {
    /// Slow the pipeline: source intake pauses until the subscriber drains.
    #[default]
    Backpressure,
    /// Disconnect the subscriber; its next read reports that it lagged.
    Disconnect,
}
