//! A bound process function as a pipeline operator: it reads one input
//! stream, drives the handler through a [`KeyedProcessor`], and emits the
//! accepted output rows as its own stream.
//!
//! Within a cycle, each input batch runs its input activations and then the
//! timer cut at the pipeline watermark as it stood right after that batch
//! (its *mark*); after the last batch, if the cycle's watermark moved past
//! the last cut (a source finished, or its watermark was advanced by hand),
//! comes a cut at it. Because a batch's mark depends only on the batches before it,
//! the activation sequence does not depend on how batches were grouped into
//! cycles, which is what makes replay after recovery reproduce the same ids.

use std::sync::Arc;

use arrow::array::Array;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::commit_gate::{CommitGate, SealedEpoch};
use super::keyed::{CallOutput, KeyedProcessor};
use super::placement::VnodePlacement;
use super::types::{NativeProcessFunction, ProcessFunctionInfo};
use super::validate::ProcessError;
use crate::error::Result;
use crate::operators::exchange::Routed;
use crate::operators::stateful::{no_such_port, Port, StatefulOperator};
use crate::state::{SnapshotReader, SnapshotWriter};
use state::{encode_sequences, SEALED_EPOCHS};

/// One bound process function, running in the pipeline.
pub struct ProcessOperator {
    info: ProcessFunctionInfo,
    input: Arc<str>,
    /// For each column of the descriptor's input schema, its index in the
    /// input stream.
    projection: Vec<usize>,
    processor: KeyedProcessor<Box<dyn NativeProcessFunction>>,
    /// In a split with a shuffle: routes each input row to its key's
    /// owner first (see [`Self::route_through`]).
    exchange: Option<Box<crate::operators::exchange::ExchangeOp>>,
    /// In a checkpointed split with a shuffle: input waits for the commit
    /// of the checkpoint that cut it (see [`Self::gate_on_commits`]).
    gate: Option<CommitGate>,
    /// Output of input run when the state was restored after vnodes moved
    /// (see `operator_state.rs`): the next cycle emits it first.
    carried: Vec<RecordBatch>,
}

impl std::fmt::Debug for ProcessOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ProcessOperator({} v{} over {})",
            self.info.descriptor.name, self.info.descriptor.version, self.input
        )
    }
}

fn binding_error(info: &ProcessFunctionInfo, reason: String) -> ProcessError {
    ProcessError {
        function: info.descriptor.name.clone(),
        version: info.descriptor.version,
        key: "-".into(),
        reason,
    }
}

/// Match the descriptor's input columns to the input stream's columns by
/// name and type; extra input columns are ignored.
pub fn input_projection(info: &ProcessFunctionInfo, input: &SchemaRef) -> Result<Vec<usize>> {
    let mut projection = Vec::new();
    for want in info.descriptor.input_schema.fields() {
        let Ok(i) = input.index_of(want.name()) else {
            return Err(binding_error(
                info,
                format!(
                    "input '{}' has no column '{}' (the function reads {})",
                    info.input,
                    want.name(),
                    column_list(&info.descriptor.input_schema)
                ),
            )
            .into());
        };
        let got = input.field(i).data_type();
        if got != want.data_type() {
            return Err(binding_error(
                info,
                format!(
                    "column '{}' of input '{}' is {got}, but the function declares {}",
                    want.name(),
                    info.input,
                    want.data_type()
                ),
            )
            .into());
        }
        projection.push(i);
    }
    Ok(projection)
}

fn column_list(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl ProcessOperator {
    /// Bind `handler` to the input stream whose columns are `input_schema`.
    pub fn new(
        info: ProcessFunctionInfo,
        input_schema: &SchemaRef,
        handler: Box<dyn NativeProcessFunction>,
    ) -> Result<Self> {
        let projection = input_projection(&info, input_schema)?;
        let processor = KeyedProcessor::new(info.descriptor.clone(), handler)?;
        Ok(Self {
            input: Arc::from(info.input.as_str()),
            info,
            projection,
            processor,
            exchange: None,
            gate: None,
            carried: Vec::new(),
        })
    }

    /// Route every input row to the node that owns its key's vnode before
    /// the function sees it (a split with a shuffle; place the processor
    /// on this node's vnodes too). The rows other nodes sent are fed
    /// before this cycle's own batches, at the watermark the function had
    /// reached: they were sent before any watermark this cycle applies.
    pub fn route_through(&mut self, exchange: crate::operators::exchange::ExchangeOp) {
        self.exchange = Some(Box::new(exchange));
    }

    /// Whether rows reach this function through an exchange (see
    /// [`Self::route_through`]): its input then merges channels.
    pub fn is_routed(&self) -> bool {
        self.exchange.is_some()
    }

    /// Run input only once the checkpoint that cut it has committed (see
    /// `commit_gate.rs`): for a routed function of a checkpointed
    /// pipeline, whose merged input interleaves differently on every run
    /// (an unrouted one reads one replayable channel and needs no gate).
    pub fn gate_on_commits(&mut self) {
        if self.gate.is_none() {
            self.gate = Some(CommitGate::default());
        }
    }

    /// Checkpoint `checkpoint` captures this function next: a gated one
    /// seals its open input under it.
    pub fn seal(&mut self, checkpoint: u64) {
        let own = self.processor.watermark();
        if let Some(gate) = &mut self.gate {
            gate.seal(checkpoint, own);
        }
    }

    /// Checkpoint `checkpoint` committed: a gated function's input sealed
    /// at or before it may run.
    pub fn commit(&mut self, checkpoint: u64) {
        if let Some(gate) = &mut self.gate {
            gate.commit(checkpoint);
        }
    }

    /// Whether the function holds input it may run now, or output to
    /// emit, without any new input (the next cycle runs or emits it).
    pub fn has_runnable_input(&self) -> bool {
        !self.carried.is_empty() || self.gate.as_ref().is_some_and(CommitGate::runnable)
    }

    /// Whether the function holds input or output at all: runnable, or
    /// rows waiting for a checkpoint to seal them or for its commit; or
    /// it sent rows to other owners whose commit is pending (only a
    /// checkpoint lets them, and this node's budget, go).
    pub fn has_held_input(&self) -> bool {
        self.has_runnable_input()
            || self.gate.as_ref().is_some_and(CommitGate::holds_rows)
            || self.input_awaiting_commit_bytes() > 0
    }

    /// Bytes of the input a gated function holds until a checkpoint's
    /// commit releases it (see [`CommitGate::awaiting_commit_bytes`]).
    pub fn input_awaiting_commit_bytes(&self) -> u64 {
        self.gate
            .as_ref()
            .map_or(0, CommitGate::awaiting_commit_bytes)
    }

    /// Run only the keys of the vnodes `placement` holds, numbering
    /// activations per vnode (cluster execution; see
    /// [`KeyedProcessor::place`]). Its checkpoints then carry the sequence
    /// of every held vnode.
    pub fn place(&mut self, placement: VnodePlacement) -> Result<()> {
        Ok(self.processor.place(placement)?)
    }

    /// The binding.
    pub fn info(&self) -> &ProcessFunctionInfo {
        &self.info
    }

    /// The input stream read.
    pub fn input(&self) -> &Arc<str> {
        &self.input
    }

    /// Run one cycle: the batches in arrival order, with a timer cut at each
    /// mark `(n, w)` (after the first `n` batches the watermark was `w`),
    /// then a cut at the cycle's `watermark` if it is past the last cut.
    /// Returns the accepted output.
    pub fn run(
        &mut self,
        batches: &[RecordBatch],
        marks: Option<&[(usize, i64)]>,
        watermark: i64,
    ) -> Result<Vec<RecordBatch>> {
        if self.gate.is_some() {
            return self.run_gated(batches, watermark);
        }
        let routed;
        let shifted: Vec<(usize, i64)>;
        let (batches, marks) = match &self.exchange {
            None => (batches, marks),
            Some(exchange) => {
                let Routed { kept, received, .. } = exchange.route_each(batches)?;
                let ahead = received.len();
                routed = received.into_iter().chain(kept).collect::<Vec<_>>();
                shifted = marks
                    .unwrap_or_default()
                    .iter()
                    .map(|(n, w)| (n + ahead, *w))
                    .collect();
                (routed.as_slice(), marks.map(|_| shifted.as_slice()))
            }
        };
        let mut out = std::mem::take(&mut self.carried);
        let mut next = 0;
        for (n, w) in marks.unwrap_or_default() {
            while next < (*n).min(batches.len()) {
                out.extend(self.update(0, batches[next].clone())?);
                next += 1;
            }
            out.extend(self.advance(*w)?);
        }
        for b in &batches[next..] {
            out.extend(self.update(0, b.clone())?);
        }
        // Only a watermark that moved past the last cut makes a cut here:
        // how many cycles saw the same watermark depends on timing, and a
        // timer re-armed in the past must fire at the next mark either way.
        if watermark > self.processor.watermark() {
            out.extend(self.advance(watermark)?);
        }
        if out.is_empty() {
            return Ok(vec![]);
        }
        let merged = arrow::compute::concat_batches(&self.info.descriptor.output_schema, &out)?;
        Ok(vec![merged])
    }

    /// A gated cycle: route and hold this cycle's input, then run every
    /// sealed epoch a committed checkpoint released, each as its batches
    /// in stored order and a timer cut at its watermark.
    fn run_gated(&mut self, batches: &[RecordBatch], watermark: i64) -> Result<Vec<RecordBatch>> {
        let routed = match &self.exchange {
            Some(exchange) => {
                let Routed {
                    kept,
                    received,
                    sent_bytes,
                } = exchange.route_each(batches)?;
                // Counted before anything can fail: the rows are queued.
                if let Some(gate) = &mut self.gate {
                    gate.count_sent(sent_bytes);
                }
                received.into_iter().chain(kept).collect::<Vec<_>>()
            }
            None => batches.to_vec(),
        };
        let inputs = routed
            .iter()
            .map(|b| self.input_of(b))
            .collect::<Result<Vec<_>>>()?;
        let Some(gate) = &mut self.gate else {
            return Ok(vec![]);
        };
        gate.hold(inputs, watermark);
        let mut out = CallOutput {
            batches: std::mem::take(&mut self.carried),
            ..Default::default()
        };
        while let Some(epoch) = self.gate.as_mut().and_then(CommitGate::take_runnable) {
            for b in &epoch.batches {
                self.processor.process_batch(b, &mut out)?;
            }
            self.processor
                .advance_watermark(epoch.watermark, &mut out)?;
        }
        if out.batches.is_empty() {
            return Ok(vec![]);
        }
        let merged =
            arrow::compute::concat_batches(&self.info.descriptor.output_schema, &out.batches)?;
        Ok(vec![merged])
    }

    fn feed(&mut self, batch: &RecordBatch, out: &mut CallOutput) -> Result<()> {
        let projected = self.input_of(batch)?;
        self.processor.process_batch(&projected, out)?;
        Ok(())
    }

    /// `batch`'s columns the function reads, as its input schema; refused
    /// when a column the function declares NOT NULL holds a NULL.
    fn input_of(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = batch.project(&self.projection)?.columns().to_vec();
        let declared = &self.info.descriptor.input_schema;
        for (f, c) in declared.fields().iter().zip(&columns) {
            if !f.is_nullable() && c.null_count() > 0 {
                return Err(binding_error(
                    &self.info,
                    format!(
                        "input '{}' holds NULL in column '{}', which the function declares NOT NULL; filter the NULLs out before the function (WHERE {} IS NOT NULL)",
                        self.info.input,
                        f.name(),
                        f.name()
                    ),
                )
                .into());
            }
        }
        Ok(RecordBatch::try_new(
            Arc::clone(&self.info.descriptor.input_schema),
            columns,
        )?)
    }
}

/// The process function as a stateful operator. The pipeline drives it
/// through [`ProcessOperator::run`], which places the timer cuts at the
/// input's marks; these are the steps `run` is made of.
impl StatefulOperator for ProcessOperator {
    fn kind(&self) -> &'static str {
        "process function"
    }

    /// Run the input activations of one batch; returns the output rows the
    /// handler's accepted responses emitted, in activation order.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        let mut out = CallOutput::default();
        self.feed(&batch, &mut out)?;
        Ok(out.batches)
    }

    /// A timer cut at `watermark`: fires every timer due at it (even when
    /// the watermark did not move, so a timer re-armed in the past fires at
    /// the next cut); returns the rows those activations emitted.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        let mut out = CallOutput::default();
        self.processor.advance_watermark(watermark, &mut out)?;
        Ok(out.batches)
    }

    /// The engine-owned state: value state per key, timers, the next
    /// activation id and the watermark, tagged with the binding.
    fn snapshot(&mut self, w: &mut SnapshotWriter) -> Result<()> {
        let capture = self.processor.capture();
        w.set("binding", &capture.binding);
        w.set("function", &capture.function);
        w.set("version", capture.version);
        w.set("next_id", capture.next_id);
        // Only a placed processor has them; older checkpoints lack the field.
        if !capture.vnode_sequences.is_empty() {
            w.set(
                "vnode_sequences",
                encode_sequences(&capture.vnode_sequences),
            );
        }
        w.set("watermark", capture.watermark);
        for part in capture.parts {
            w.push_deferred(part);
        }
        // A gated function's sealed input not run yet, batch by batch
        // after the state and timers: `checkpoint:watermark:batches` per
        // epoch, oldest first.
        if let Some(gate) = &self.gate {
            let epochs: Vec<String> = gate
                .sealed()
                .map(|e| format!("{}:{}:{}", e.checkpoint, e.watermark, e.batches.len()))
                .collect();
            w.set(SEALED_EPOCHS, epochs.join(";"));
            for b in gate.sealed().flat_map(|e| &e.batches) {
                w.push(b)?;
            }
        }
        Ok(())
    }

    /// Restore from a checkpoint part; refused when the part was written
    /// under another binding (name, version or binding hash).
    fn restore(&mut self, r: &SnapshotReader) -> Result<()> {
        let (snap, epochs) = self.decode(r)?;
        let (snap, epochs) = match self.processor.placement().cloned() {
            Some(keep) => self.within_placement(snap, epochs, &keep)?,
            None => (snap, epochs),
        };
        self.processor.restore(snap)?;
        self.carried.clear();
        match &mut self.gate {
            Some(gate) => gate.restore(epochs),
            // Sealed input comes only from a split whose rows cross between
            // nodes; a function that is not gated there is a node's dropped
            // from it (it has no shuffle), which gives its keys up: their new
            // owners run that input from this part.
            None if !epochs.is_empty() => tracing::info!(
                function = %self.info.descriptor.name,
                epochs = epochs.len(),
                "sealed input left to the new owners of its vnodes"
            ),
            None => {}
        }
        Ok(())
    }

    /// Take the keys of `keep`'s vnodes from the previous holders'
    /// snapshots, with the sealed input of theirs not run yet (see
    /// `operator_state.rs`).
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        self.adopt_moved(snaps, keep)
    }
}

#[path = "operator_state.rs"]
mod state;

#[cfg(test)]
#[path = "operator_tests.rs"]
mod tests;
