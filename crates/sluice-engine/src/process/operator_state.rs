//! A process function's checkpoint part read back: its state, timers,
//! sequences and sealed input, restored in place or, after vnodes moved
//! between the nodes of a split, taken from every previous holder's part.
//!
//! # Moving sealed input
//!
//! A gated function's part holds the sealed input it had not run at the
//! cut (see `commit_gate.rs`). That cut committed, so its previous holder
//! may have run that input before the vnodes moved, with its own timer
//! cuts, and the new owner must run it again the same way. Each previous
//! holder's keys of the moved vnodes are therefore run on their own first,
//! from that holder's state, with that holder's epochs and cuts, so no
//! other holder's cut fires their timers; then every holder's keys are
//! merged into one state. What that run emitted is the function's output
//! of its next cycle.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::record_batch::RecordBatch;

use super::{ProcessOperator, SealedEpoch};
use crate::error::{EngineError, Result};
use crate::process::keyed::{CallOutput, ProcessSnapshot};
use crate::process::placement::VnodePlacement;
use crate::process::types::ValueState;
use crate::state::SnapshotReader;

/// A placed processor's sequences as `vnode=next;vnode=next` (ascending).
pub(super) fn encode_sequences(sequences: &BTreeMap<u32, u64>) -> String {
    sequences
        .iter()
        .map(|(v, s)| format!("{v}={s}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// The inverse of [`encode_sequences`]; `None` for damaged text.
fn decode_sequences(text: &str) -> Option<BTreeMap<u32, u64>> {
    text.split(';')
        .map(|pair| {
            let (v, s) = pair.split_once('=')?;
            Some((v.parse().ok()?, s.parse().ok()?))
        })
        .collect()
}

/// The snapshot field listing a gated function's sealed epochs.
pub(super) const SEALED_EPOCHS: &str = "sealed_epochs";

impl ProcessOperator {
    /// The state and sealed input a snapshot part holds.
    pub(super) fn decode(&self, r: &SnapshotReader) -> Result<(ProcessSnapshot, Vec<SealedEpoch>)> {
        let mut snap = ProcessSnapshot {
            binding: r.get("binding")?,
            function: r.get("function")?,
            version: r.get("version")?,
            next_id: r.get("next_id")?,
            vnode_sequences: match r.get_optional::<String>("vnode_sequences")? {
                Some(text) => decode_sequences(&text).ok_or_else(|| {
                    EngineError::Internal(format!(
                        "process function '{}' snapshot has damaged vnode sequences: '{text}'",
                        self.info.descriptor.name
                    ))
                })?,
                None => BTreeMap::new(),
            },
            watermark: r.get("watermark")?,
            ..Default::default()
        };
        let [state, timers, sealed @ ..] = r.parts() else {
            return Err(EngineError::Internal(format!(
                "process function '{}' snapshot has {} parts, expected at least 2",
                self.info.descriptor.name,
                r.parts().len()
            )));
        };
        let epochs = self.restore_sealed(r.get_optional::<String>(SEALED_EPOCHS)?, sealed)?;
        let damaged = || {
            EngineError::Internal(format!(
                "process function '{}' snapshot has damaged columns",
                self.info.descriptor.name
            ))
        };
        if state.num_columns() != 3 || timers.num_columns() != 3 {
            return Err(damaged());
        }
        let keys = state.column(0).as_binary_opt::<i32>().ok_or_else(damaged)?;
        let kinds = state
            .column(1)
            .as_primitive_opt::<arrow::datatypes::UInt8Type>()
            .ok_or_else(damaged)?;
        let values = state
            .column(2)
            .as_primitive_opt::<arrow::datatypes::Int64Type>()
            .ok_or_else(damaged)?;
        for i in 0..state.num_rows() {
            let v = match kinds.value(i) {
                0 => ValueState::Absent,
                1 => ValueState::Null,
                2 if values.is_valid(i) => ValueState::Int64(values.value(i)),
                _ => return Err(damaged()),
            };
            snap.state.insert(keys.value(i).to_vec(), v);
        }
        let t_keys = timers
            .column(0)
            .as_binary_opt::<i32>()
            .ok_or_else(damaged)?;
        let t_names = timers
            .column(1)
            .as_string_opt::<i32>()
            .ok_or_else(damaged)?;
        let t_at = timers
            .column(2)
            .as_primitive_opt::<arrow::datatypes::Int64Type>()
            .ok_or_else(damaged)?;
        for i in 0..timers.num_rows() {
            snap.timers
                .entry(t_keys.value(i).to_vec())
                .or_default()
                .insert(t_names.value(i).to_string(), t_at.value(i));
        }
        Ok((snap, epochs))
    }

    /// The sealed epochs a snapshot stored (`listed`, with their batches
    /// `parts`); refused when they do not match.
    fn restore_sealed(
        &self,
        listed: Option<String>,
        parts: &[RecordBatch],
    ) -> Result<Vec<SealedEpoch>> {
        let name = &self.info.descriptor.name;
        let damaged = |what: &str| {
            EngineError::Internal(format!(
                "process function '{name}' snapshot has damaged sealed input: {what}"
            ))
        };
        let Some(listed) = listed.filter(|l| !l.is_empty()) else {
            return match parts.len() {
                0 => Ok(Vec::new()),
                n => Err(damaged(&format!("{n} batches, no epochs"))),
            };
        };
        let mut rest = parts.iter();
        let mut epochs = Vec::new();
        for entry in listed.split(';') {
            let mut fields = entry.split(':');
            let mut next = || fields.next().ok_or_else(|| damaged(entry));
            let checkpoint = next()?.parse().map_err(|_| damaged(entry))?;
            let watermark = next()?.parse().map_err(|_| damaged(entry))?;
            let count: usize = next()?.parse().map_err(|_| damaged(entry))?;
            let batches = rest.by_ref().take(count).cloned().collect::<Vec<_>>();
            if batches.len() != count {
                return Err(damaged(&format!("epoch {entry} lacks batches")));
            }
            if let Some(b) = batches
                .iter()
                .find(|b| b.schema() != self.info.descriptor.input_schema)
            {
                return Err(damaged(&format!("a batch of schema {:?}", b.schema())));
            }
            epochs.push(SealedEpoch {
                checkpoint,
                watermark,
                batches,
            });
        }
        if rest.next().is_some() {
            return Err(damaged("more batches than its epochs list"));
        }
        Ok(epochs)
    }
}

impl ProcessOperator {
    /// Replace the state with the keys of `keep`'s vnodes out of `snaps`
    /// (every previous holder's part at one cut), running each holder's
    /// sealed input of those keys first as that holder would have (see the
    /// module docs). Its output is carried to the next cycle.
    pub(super) fn adopt_moved(
        &mut self,
        snaps: &[SnapshotReader],
        keep: &VnodePlacement,
    ) -> Result<()> {
        let mut merged: Option<ProcessSnapshot> = None;
        let mut out = CallOutput::default();
        for r in snaps {
            let (snap, epochs) = self.decode(r)?;
            let (mut snap, epochs) = self.within_placement(snap, epochs, keep)?;
            // Every epoch counts, one without rows of these keys too: its
            // watermark cut their timers on that holder.
            if !epochs.is_empty() {
                // This holder's keys alone, with its epochs and cuts.
                self.processor.restore(snap)?;
                for e in &epochs {
                    for b in &e.batches {
                        self.processor.process_batch(b, &mut out)?;
                    }
                    self.processor.advance_watermark(e.watermark, &mut out)?;
                }
                snap = self.processor_snapshot()?;
            }
            merged = Some(match merged {
                None => snap,
                Some(mut all) => {
                    all.state.extend(snap.state);
                    all.timers.extend(snap.timers);
                    all.vnode_sequences.extend(snap.vnode_sequences);
                    all.next_id = all.next_id.max(snap.next_id);
                    all.watermark = all.watermark.max(snap.watermark);
                    all
                }
            });
        }
        let all = match merged {
            Some(all) => all,
            // No previous holder: no key (a node dropped from the split
            // gives its keys up).
            None => {
                let mut none = self.processor_snapshot()?;
                none.state.clear();
                none.timers.clear();
                none.vnode_sequences.clear();
                none
            }
        };
        self.processor.restore(all)?;
        if let Some(gate) = &mut self.gate {
            gate.restore(Vec::new());
        }
        self.carried = out.batches;
        Ok(())
    }

    /// A placed function's own part restored after its vnodes moved (the
    /// node recovers its last cut before it takes the moved state): only
    /// the keys and sealed rows of the vnodes it holds now; the others are
    /// their new owners', who take them from this part.
    pub(super) fn within_placement(
        &self,
        mut snap: ProcessSnapshot,
        epochs: Vec<SealedEpoch>,
        keep: &VnodePlacement,
    ) -> Result<(ProcessSnapshot, Vec<SealedEpoch>)> {
        let kept = |key: &[u8]| keep.owns(keep.vnode_of(key));
        snap.state.retain(|k, _| kept(k));
        snap.timers.retain(|k, _| kept(k));
        snap.vnode_sequences.retain(|v, _| keep.owns(*v));
        let epochs = epochs
            .into_iter()
            .map(|e| self.rows_of(e, keep))
            .collect::<Result<Vec<_>>>()?;
        Ok((snap, epochs))
    }

    /// The processor's state as it stands, as a snapshot (its held input
    /// left out): encoded and read back, as a checkpoint part would be.
    fn processor_snapshot(&mut self) -> Result<ProcessSnapshot> {
        let gate = self.gate.take();
        let part = crate::operators::stateful::snapshot_part(self);
        self.gate = gate;
        Ok(self.decode(&SnapshotReader::new(&part?)?)?.0)
    }

    /// `epoch` with only the rows of `keep`'s vnodes (a batch left with
    /// none is dropped: it activates nothing here, and the activations of
    /// the rows left keep their order).
    fn rows_of(&self, epoch: SealedEpoch, keep: &VnodePlacement) -> Result<SealedEpoch> {
        let mut batches = Vec::new();
        for b in epoch.batches {
            let keys = self.processor.keys_of(&b)?;
            let mask: BooleanArray = keys
                .iter()
                .map(|k| Some(keep.owns(keep.vnode_of(k))))
                .collect();
            let rows = arrow::compute::filter_record_batch(&b, &mask)?;
            if rows.num_rows() > 0 {
                batches.push(rows);
            }
        }
        Ok(SealedEpoch { batches, ..epoch })
    }
}
