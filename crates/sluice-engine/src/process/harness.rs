//! A test harness for native process functions, in the spirit of Flink's
//! keyed operator test harness: feed rows, advance the watermark, fire
//! timers, snapshot and restore, and inspect outputs, state and timers.
//!
//! It drives the handler through the same [`KeyedProcessor`] the pipeline
//! operator uses, so the ordering and validation rules (documented in
//! [`super::keyed`]) are exactly the engine's.

use std::collections::BTreeMap;

use arrow::record_batch::RecordBatch;

use super::keyed::{CallOutput, KeyedProcessor, LoggedActivation, ProcessSnapshot};
use super::types::{NativeProcessFunction, ProcessFunctionDescriptor, ValueState};
use super::validate::ProcessError;

/// Drives one native handler the way the engine does.
pub struct ProcessFunctionTestHarness<F: NativeProcessFunction> {
    processor: KeyedProcessor<F>,
    out: CallOutput,
}

impl<F: NativeProcessFunction> ProcessFunctionTestHarness<F> {
    /// A harness with empty state.
    pub fn new(descriptor: ProcessFunctionDescriptor, handler: F) -> Result<Self, String> {
        Ok(Self {
            processor: KeyedProcessor::new(descriptor, handler).map_err(|e| e.to_string())?,
            out: CallOutput {
                batches: Vec::new(),
                log: Some(Vec::new()),
            },
        })
    }

    /// The state of `key` before its next activation.
    pub fn state(&self, key: &[u8]) -> ValueState {
        self.processor.state(key)
    }

    /// The timers set for `key`, by name.
    pub fn timers(&self, key: &[u8]) -> BTreeMap<String, i64> {
        self.processor.timers(key)
    }

    /// The handler (to inspect or reconfigure it in tests).
    pub fn handler_mut(&mut self) -> &mut F {
        self.processor.handler_mut()
    }

    /// Output batches so far.
    pub fn outputs(&self) -> &[RecordBatch] {
        &self.out.batches
    }

    /// Every activation applied so far, in order.
    pub fn activation_log(&self) -> &[LoggedActivation] {
        self.out.log.as_deref().unwrap_or_default()
    }

    /// Feed rows of the input schema.
    pub fn process_batch(&mut self, batch: &RecordBatch) -> Result<(), ProcessError> {
        self.processor.process_batch(batch, &mut self.out)
    }

    /// Advance the watermark and fire the timers it makes due.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<(), ProcessError> {
        self.processor.advance_watermark(watermark, &mut self.out)
    }

    /// The engine-owned state, for a checkpoint.
    pub fn snapshot(&self) -> ProcessSnapshot {
        self.processor.snapshot()
    }

    /// Restore a snapshot; refused if it belongs to another binding
    /// (name, version, schemas, keys, initial state or runtime differ).
    pub fn restore(&mut self, snap: ProcessSnapshot) -> Result<(), ProcessError> {
        self.processor.restore(snap)
    }
}
