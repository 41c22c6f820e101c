//! Checkpoint captures of a process function's engine-owned state.
//!
//! The processor works on hash maps of value state and timers; a
//! checkpoint must not copy them on the compute thread. So the processor
//! notes which keys changed since the last capture, and a capture hands
//! just those keys' current state and timers to a [`ProcessBase`]: the
//! checkpoint's own copy, kept in [`Layers`](crate::state::layers::Layers)
//! and encoded by the checkpoint tail (two batches: value state, timers).
//!
//! The first capture of a processor that was never captured or restored
//! copies everything once: until then nothing tracks changes, so a pipeline
//! that never checkpoints pays nothing for this.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{BinaryArray, Int64Array, StringArray, UInt8Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::types::ValueState;
use crate::error::Result;
use crate::state::layers::{Base, KeyedChanges};
use crate::state::pace;

/// Timers of one key: name to event time (ms).
pub type KeyTimers = BTreeMap<String, i64>;

/// What changed between two captures: value state and timers by key.
pub struct ProcessDelta {
    /// Each changed key's value state now (None: back to the initial one).
    pub state: KeyedChanges<ValueState>,
    /// Each changed key's timers now (None: no timers).
    pub timers: KeyedChanges<KeyTimers>,
}

/// The process state as of the deltas merged: what a checkpoint writes.
#[derive(Default)]
pub struct ProcessBase {
    /// Value state per key (keys whose state differs from the initial one).
    pub state: BTreeMap<Vec<u8>, ValueState>,
    /// Timers per key.
    pub timers: BTreeMap<Vec<u8>, KeyTimers>,
}

impl Base for ProcessBase {
    type Delta = ProcessDelta;

    fn absorb(&mut self, delta: ProcessDelta) -> Result<()> {
        delta.state.apply(&mut self.state);
        delta.timers.apply(&mut self.timers);
        Ok(())
    }
}

impl ProcessBase {
    /// The two snapshot parts, in batches of at most [`ROWS_PER_BATCH`]
    /// rows (a pace point after each, so a checkpoint tail copies no large
    /// state in one step): value state (key, kind, value) and timers (key,
    /// name, at_ms), in key order.
    pub fn batches(&self) -> Result<Vec<Vec<RecordBatch>>> {
        Ok(vec![
            state_batches(&self.state)?,
            timer_batches(&self.timers)?,
        ])
    }
}

/// Rows per snapshot batch of a process function's state.
const ROWS_PER_BATCH: usize = 65_536;

/// Value state as batches of (key, kind, value); at least one.
pub fn state_batches(state: &BTreeMap<Vec<u8>, ValueState>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut entries = state.iter();
    loop {
        let chunk: Vec<(&Vec<u8>, &ValueState)> = entries.by_ref().take(ROWS_PER_BATCH).collect();
        let last = chunk.len() < ROWS_PER_BATCH;
        if chunk.is_empty() && !out.is_empty() {
            break;
        }
        out.push(state_batch(&chunk)?);
        pace::point();
        if last {
            break;
        }
    }
    Ok(out)
}

/// Value state entries as a batch of (key, kind, value).
fn state_batch(entries: &[(&Vec<u8>, &ValueState)]) -> Result<RecordBatch> {
    let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| k.as_slice()).collect();
    let kinds: Vec<u8> = entries
        .iter()
        .map(|(_, v)| match v {
            ValueState::Absent => 0,
            ValueState::Null => 1,
            ValueState::Int64(_) => 2,
        })
        .collect();
    let values: Vec<Option<i64>> = entries
        .iter()
        .map(|(_, v)| match v {
            ValueState::Int64(n) => Some(*n),
            _ => None,
        })
        .collect();
    Ok(RecordBatch::try_new(
        state_schema(),
        vec![
            Arc::new(BinaryArray::from(keys)),
            Arc::new(UInt8Array::from(kinds)),
            Arc::new(Int64Array::from(values)),
        ],
    )?)
}

/// Timers as batches of (key, name, at_ms), cut after a key once a batch
/// has [`ROWS_PER_BATCH`] rows; at least one.
pub fn timer_batches(timers: &BTreeMap<Vec<u8>, KeyTimers>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut t_keys: Vec<&[u8]> = Vec::new();
    let mut t_names: Vec<&str> = Vec::new();
    let mut t_at: Vec<i64> = Vec::new();
    let cut = |keys: &mut Vec<&[u8]>, names: &mut Vec<&str>, at: &mut Vec<i64>| {
        let batch = RecordBatch::try_new(
            timer_schema(),
            vec![
                Arc::new(BinaryArray::from(std::mem::take(keys))),
                Arc::new(StringArray::from(std::mem::take(names))),
                Arc::new(Int64Array::from(std::mem::take(at))),
            ],
        );
        pace::point();
        batch
    };
    for (k, timers) in timers {
        for (name, at) in timers {
            t_keys.push(k);
            t_names.push(name);
            t_at.push(*at);
        }
        if t_keys.len() >= ROWS_PER_BATCH {
            out.push(cut(&mut t_keys, &mut t_names, &mut t_at)?);
        }
    }
    if !t_keys.is_empty() || out.is_empty() {
        out.push(cut(&mut t_keys, &mut t_names, &mut t_at)?);
    }
    Ok(out)
}

fn state_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, false),
        Field::new("kind", DataType::UInt8, false),
        Field::new("value", DataType::Int64, true),
    ]))
}

fn timer_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("at_ms", DataType::Int64, false),
    ]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::record_batch::RecordBatch;

    use super::{state_batches, timer_batches};
    use crate::process::benchmark::{descriptor, input_schema};
    use crate::process::keyed::{CallOutput, KeyedProcessor, ProcessCapture, ProcessSnapshot};
    use crate::process::types::{
        NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
        TimerOperation, ValueMutation,
    };
    use crate::state::DeferredBatch;

    /// Changes state and timers independently: by the amount, an input
    /// sets a timer, deletes one, or sets the value; a timer that fires
    /// changes nothing else (it is only removed).
    struct Independent;

    impl NativeProcessFunction for Independent {
        fn process(
            &mut self,
            activations: &[ProcessActivation],
        ) -> Result<Vec<ProcessActivationResult>, String> {
            use arrow::array::AsArray;
            Ok(activations
                .iter()
                .map(|a| {
                    let mut r = ProcessActivationResult {
                        activation_id: a.id,
                        ..Default::default()
                    };
                    if let ProcessCallback::Input(row) = &a.callback {
                        let amount = row
                            .column(1)
                            .as_primitive::<arrow::datatypes::Int64Type>()
                            .value(0);
                        let name = format!("t{}", amount % 2);
                        match amount % 4 {
                            0 => r.timers.push(TimerOperation::Set {
                                name,
                                at_ms: a.watermark.max(0) + amount,
                            }),
                            1 => r.timers.push(TimerOperation::Delete { name }),
                            2 => r.mutations.push(ValueMutation::Set(Some(amount))),
                            _ => r.mutations.push(ValueMutation::Clear),
                        }
                    }
                    r
                })
                .collect())
        }
    }

    use crate::test_rng::Rng;

    fn processor() -> KeyedProcessor<Independent> {
        KeyedProcessor::new(descriptor("independent"), Independent).unwrap()
    }

    fn built(parts: &[Arc<dyn DeferredBatch>]) -> Vec<RecordBatch> {
        parts.iter().map(|p| p.produce().unwrap()).collect()
    }

    fn expected(snap: &ProcessSnapshot) -> Vec<RecordBatch> {
        let one = |b: Vec<RecordBatch>| arrow::compute::concat_batches(&b[0].schema(), &b).unwrap();
        vec![
            one(state_batches(&snap.state).unwrap()),
            one(timer_batches(&snap.timers).unwrap()),
        ]
    }

    /// Random inputs and watermark cuts, captures at random moments built
    /// early, late or never, and a restore part-way: every capture built
    /// equals the whole-state copy taken at its barrier.
    #[test]
    fn every_capture_equals_the_state_at_its_barrier() {
        for seed in 0..200u64 {
            let mut rng = Rng(seed.wrapping_mul(6_364_136_223_846_793_005) | 1);
            let mut p = processor();
            let mut held: Vec<(ProcessCapture, ProcessSnapshot)> = Vec::new();
            let mut watermark = 0i64;
            let keys = 1 + rng.below(40) as i64;
            for step in 0..(30 + rng.below(60)) {
                let mut out = CallOutput::default();
                match rng.below(10) {
                    0..=4 => {
                        let n = 1 + rng.below(30) as usize;
                        let k: Vec<i64> = (0..n).map(|_| rng.below(keys as u64) as i64).collect();
                        let a: Vec<i64> = (0..n).map(|_| rng.below(100) as i64).collect();
                        let batch = RecordBatch::try_new(
                            input_schema(),
                            vec![Arc::new(Int64Array::from(k)), Arc::new(Int64Array::from(a))],
                        )
                        .unwrap();
                        p.process_batch(&batch, &mut out).unwrap();
                    }
                    5 => {
                        watermark += rng.below(40) as i64;
                        p.advance_watermark(watermark, &mut out).unwrap();
                    }
                    6 | 7 => held.push((p.capture(), p.snapshot())),
                    8 if !held.is_empty() => {
                        let i = rng.below(held.len() as u64) as usize;
                        let (c, snap) = &held[i];
                        assert_eq!(built(&c.parts), expected(snap), "seed {seed} step {step}");
                        assert_eq!(c.next_id, snap.next_id);
                    }
                    9 if !held.is_empty() && rng.below(4) == 0 => {
                        // Recovery: a fresh processor restored from a built
                        // capture's state goes on capturing exactly.
                        let (_, snap) = held.swap_remove(rng.below(held.len() as u64) as usize);
                        p = processor();
                        p.restore(snap).unwrap();
                        watermark = p.watermark();
                        held.clear();
                    }
                    _ if !held.is_empty() => {
                        held.remove(rng.below(held.len() as u64) as usize);
                    }
                    _ => {}
                }
            }
            for (c, snap) in &held {
                assert_eq!(built(&c.parts), expected(snap), "seed {seed} at the end");
            }
        }
    }
}
