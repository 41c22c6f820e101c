//! The streams installed in a running pipeline and how a cycle runs them.
//!
//! A stream is produced either by a compiled continuous query or by a bound
//! process function. Process functions need the *marks* of their input: the
//! pipeline watermark right after each source batch was taken in, as a
//! position in the input's batches. Sources get their marks as batches
//! arrive; a query that is a chain of filters and projections over one input
//! runs batch by batch, so each mark keeps its place among the output
//! batches even when a filter removes a whole batch.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::error::{EngineError, Result};
use crate::operators::{restore_part, snapshot_state_part, Operator, StatefulOperator};
use crate::output::mv::MaterializedView;
use crate::process::ProcessOperator;

/// A watermark cut among an input's batches of one cycle: after the first
/// `.0` batches, the pipeline watermark was `.1`.
pub type Mark = (usize, i64);

/// Per input name, its marks of this cycle in order.
pub type MarkMap = FxHashMap<Arc<str>, Vec<Mark>>;

/// What computes a stream.
#[derive(Debug)]
pub enum StreamProducer {
    /// A compiled continuous query.
    Query(Operator),
    /// A bound process function.
    Process(Box<ProcessOperator>),
}

/// One installed stream.
pub(super) struct InstalledStream {
    pub(super) name: Arc<str>,
    pub(super) producer: StreamProducer,
    pub(super) view: Option<Arc<MaterializedView>>,
    /// Whether a process function reads this stream's marks (directly or
    /// through other batch-by-batch queries); only then does a query run
    /// batch by batch to keep them.
    pub(super) marks_wanted: bool,
}

/// A cycle's failure inside one stream.
pub(super) enum StreamFailure {
    /// A process function's call was rejected: nothing of it applied.
    Process(EngineError),
    /// Anything else.
    Other(EngineError),
}

impl InstalledStream {
    /// Run this stream for one cycle, adding its output (and, when known,
    /// its marks) to `data` and `marks`.
    pub(super) fn run(
        &mut self,
        data: &mut FxHashMap<Arc<str>, Vec<RecordBatch>>,
        marks: &mut MarkMap,
        watermark: i64,
    ) -> std::result::Result<(), StreamFailure> {
        let context = |e: EngineError| e.context(format!("stream '{}'", self.name));
        let (out, out_marks) = match &mut self.producer {
            StreamProducer::Query(op) => {
                // Marks of an input that produced no batch this cycle still
                // count: the cuts happened.
                let wanted = self.marks_wanted;
                let batchwise =
                    op.batchwise_input()
                        .cloned()
                        .filter(|_| wanted)
                        .and_then(|input| {
                            let m = marks.get(&input)?.clone();
                            let b = data.get(&input).cloned().unwrap_or_default();
                            Some((input, b, m))
                        });
                match batchwise {
                    Some((input, batches, in_marks)) => {
                        let mut out = Vec::new();
                        let mut out_marks = Vec::new();
                        let mut pending = in_marks.iter().peekable();
                        let mut one: FxHashMap<Arc<str>, Vec<RecordBatch>> = FxHashMap::default();
                        for (i, b) in batches.into_iter().enumerate() {
                            // Cuts that came before this batch keep their place.
                            while let Some((_, w)) = pending.next_if(|(n, _)| *n <= i) {
                                out_marks.push((out.len(), *w));
                            }
                            one.insert(Arc::clone(&input), vec![b]);
                            out.extend(
                                op.run(&one, watermark)
                                    .map_err(|e| StreamFailure::Other(context(e)))?,
                            );
                        }
                        out_marks.extend(pending.map(|(_, w)| (out.len(), *w)));
                        (out, Some(out_marks))
                    }
                    None => (
                        op.run(data, watermark)
                            .map_err(|e| StreamFailure::Other(context(e)))?,
                        None,
                    ),
                }
            }
            StreamProducer::Process(p) => {
                let input = Arc::clone(p.input());
                let batches = data.get(&input).map(Vec::as_slice).unwrap_or_default();
                let in_marks = marks.get(&input).map(Vec::as_slice);
                // Any failure here may follow accepted calls of this cycle,
                // so it is never one to drop.
                let out = p
                    .run(batches, in_marks, watermark)
                    .map_err(|e| StreamFailure::Process(context(e)))?;
                (out, None)
            }
        };
        if let Some(m) = out_marks {
            marks.insert(Arc::clone(&self.name), m);
        }
        if !out.is_empty() {
            data.entry(Arc::clone(&self.name)).or_default().extend(out);
        }
        Ok(())
    }

    /// The input whose marks this stream passes on or consumes, if any.
    pub(super) fn marks_input(&self) -> Option<&Arc<str>> {
        match &self.producer {
            StreamProducer::Query(op) => op.batchwise_input(),
            StreamProducer::Process(p) => Some(p.input()),
        }
    }

    /// Whether a process function produces this stream.
    /// Rows this stream's operators dropped as late so far (a process
    /// function drops none: its late input is the handler's to judge).
    pub(super) fn dropped_late(&self) -> u64 {
        match &self.producer {
            StreamProducer::Query(op) => op.dropped_late(),
            StreamProducer::Process(_) => 0,
        }
    }

    pub(super) fn is_process(&self) -> bool {
        matches!(self.producer, StreamProducer::Process(_))
    }

    /// The process function producing this stream, if one does.
    fn process_mut(&mut self) -> Option<&mut ProcessOperator> {
        match &mut self.producer {
            StreamProducer::Process(p) => Some(p),
            StreamProducer::Query(_) => None,
        }
    }

    /// A checkpointed pipeline holds a routed process function's input
    /// until the checkpoint that cut it commits (see
    /// [`ProcessOperator::gate_on_commits`]).
    pub(super) fn gate_on_commits(&mut self) {
        if let Some(p) = self.process_mut().filter(|p| p.is_routed()) {
            p.gate_on_commits();
            tracing::debug!(stream = %self.name, "process function input waits for checkpoint commits");
        }
    }

    /// Checkpoint `checkpoint` captures this stream next.
    pub(super) fn seal(&mut self, checkpoint: u64) {
        if let Some(p) = self.process_mut() {
            p.seal(checkpoint);
        }
    }

    /// Checkpoint `checkpoint` committed.
    pub(super) fn commit(&mut self, checkpoint: u64) {
        if let Some(p) = self.process_mut() {
            p.commit(checkpoint);
        }
    }

    /// Whether this stream holds input it may run without new input.
    pub(super) fn has_runnable_input(&self) -> bool {
        match &self.producer {
            StreamProducer::Process(p) => p.has_runnable_input(),
            StreamProducer::Query(_) => false,
        }
    }

    /// Whether this stream holds input, runnable or waiting for a commit.
    pub(super) fn has_held_input(&self) -> bool {
        match &self.producer {
            StreamProducer::Process(p) => p.has_held_input(),
            StreamProducer::Query(_) => false,
        }
    }

    /// Bytes of this stream's input waiting for a checkpoint's commit.
    pub(super) fn input_awaiting_commit_bytes(&self) -> u64 {
        match &self.producer {
            StreamProducer::Process(p) => p.input_awaiting_commit_bytes(),
            StreamProducer::Query(_) => 0,
        }
    }

    /// The stream's stateful operators, in checkpoint part order.
    fn stateful_operators(&mut self) -> Vec<&mut (dyn StatefulOperator + 'static)> {
        let mut ops = Vec::new();
        match &mut self.producer {
            StreamProducer::Query(op) => op.stateful_operators(&mut ops),
            StreamProducer::Process(p) => ops.push(p.as_mut()),
        }
        ops
    }

    /// Snapshot the stream's operator state, one part per stateful
    /// operator, in a fixed part order, as parts whose encoding is left to
    /// the checkpoint tail (Arrow state is shared, not copied).
    pub(super) fn snapshot(&mut self, out: &mut Vec<crate::state::StatePart>) -> Result<()> {
        for op in self.stateful_operators() {
            out.push(snapshot_state_part(op)?);
        }
        Ok(())
    }

    /// Give up the operators' state without freeing it (the process exits
    /// next; see [`StatefulOperator::forget_state`]).
    pub(super) fn forget_state(&mut self) {
        for op in self.stateful_operators() {
            op.forget_state();
        }
    }

    /// Restore the keys of `keep`'s vnodes from the parts [`Self::snapshot`]
    /// wrote on each node that held vnodes before they moved (`parts`, one
    /// list per node, each in part order; see `crate::split::moved`).
    pub(super) fn restore_moved(
        &mut self,
        parts: &mut [VecDeque<Bytes>],
        keep: &crate::process::placement::VnodePlacement,
    ) -> Result<()> {
        let name = Arc::clone(&self.name);
        for op in self.stateful_operators() {
            let snaps = parts
                .iter_mut()
                .map(|node| {
                    let part = node.pop_front().ok_or_else(|| {
                        EngineError::Internal(format!(
                            "a previous node's checkpoint has no state for the {} of stream \
                             '{name}'",
                            op.kind()
                        ))
                    })?;
                    crate::state::SnapshotReader::new(&part)
                })
                .collect::<Result<Vec<_>>>()?;
            op.restore_moved(&snaps, keep)
                .map_err(|e| e.context(format!("stream '{name}'")))?;
        }
        Ok(())
    }

    /// Restore from parts written by [`Self::snapshot`].
    pub(super) fn restore(&mut self, parts: &mut VecDeque<Bytes>) -> Result<()> {
        let name = Arc::clone(&self.name);
        for op in self.stateful_operators() {
            let part = parts.pop_front().ok_or_else(|| {
                EngineError::Internal(format!(
                    "checkpoint has no state for the {} of stream '{name}'",
                    op.kind()
                ))
            })?;
            restore_part(op, &part)?;
        }
        Ok(())
    }
}
