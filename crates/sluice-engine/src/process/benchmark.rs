//! Benchmark fixtures for native process functions and the private
//! cluster execution hooks.
//!
//! Handlers used by benchmarks and tests: a per-key counter (silent, or
//! emitting its running count), a fraud-style
//! detector that arms a timer on a suspicious amount and flags the key if a
//! second suspicious amount arrives before the timer fires, and an
//! activation log. [`PlacedOwners`] runs a function under a vnode
//! assignment, as the owners of a cluster would.

mod placed;
#[cfg(test)]
pub(crate) use placed::tests::steps as random_steps;
pub use placed::{PlacedOwners, Step};

use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::types::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionLimits, ProcessRuntime,
    TimerOperation, ValueMutation, ValueState,
};

/// Input of the fixtures: `(key BIGINT, amount BIGINT)`.
pub fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("amount", DataType::Int64, false),
    ]))
}

/// Output of the fixtures: one BIGINT column `value`.
pub fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "value",
        DataType::Int64,
        false,
    )]))
}

/// A descriptor for a fixture.
pub fn descriptor(name: &str) -> ProcessFunctionDescriptor {
    ProcessFunctionDescriptor {
        name: name.into(),
        version: 1,
        input_schema: input_schema(),
        key_columns: vec!["key".into()],
        output_schema: output_schema(),
        initial_state: None,
        limits: ProcessFunctionLimits {
            max_activations_per_call: 65_536,
            ..ProcessFunctionLimits::default()
        },
        determinism: ProcessDeterminism::ReplaySafe,
        runtime: ProcessRuntime::Native,
    }
}

fn value(v: i64) -> Option<RecordBatch> {
    RecordBatch::try_new(output_schema(), vec![Arc::new(Int64Array::from(vec![v]))]).ok()
}

/// Counts activations per key in engine-owned state; emits nothing.
#[derive(Debug, Default)]
pub struct KeyedCounter;

impl NativeProcessFunction for KeyedCounter {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        Ok(activations
            .iter()
            .map(|a| ProcessActivationResult {
                activation_id: a.id,
                mutations: vec![ValueMutation::Set(Some(match a.state {
                    ValueState::Int64(n) => n + 1,
                    _ => 1,
                }))],
                ..Default::default()
            })
            .collect())
    }
}

/// Emits `(key, n)` for every input row, `n` the key's running count in
/// engine-owned state: per key the same rows whatever order its rows
/// arrive in, so a run split across nodes (each key on its vnode's
/// owner) emits exactly what one node does.
#[derive(Debug, Default)]
pub struct RunningCount;

/// Output of [`RunningCount`]: `(key BIGINT, n BIGINT)`.
pub fn running_count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
    ]))
}

/// The descriptor of [`RunningCount`] as `name`.
pub fn running_count_descriptor(name: &str) -> ProcessFunctionDescriptor {
    ProcessFunctionDescriptor {
        output_schema: running_count_schema(),
        ..descriptor(name)
    }
}

impl NativeProcessFunction for RunningCount {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        activations
            .iter()
            .map(|a| {
                let ProcessCallback::Input(row) = &a.callback else {
                    return Err("RunningCount sets no timers".to_string());
                };
                let key = row
                    .column(0)
                    .as_primitive_opt::<Int64Type>()
                    .ok_or("key is not BIGINT")?
                    .value(0);
                let n = match a.state {
                    ValueState::Int64(n) => n + 1,
                    _ => 1,
                };
                let output = RecordBatch::try_new(
                    running_count_schema(),
                    vec![
                        Arc::new(Int64Array::from(vec![key])),
                        Arc::new(Int64Array::from(vec![n])),
                    ],
                )
                .map_err(|e| e.to_string())?;
                Ok(ProcessActivationResult {
                    activation_id: a.id,
                    output: Some(output),
                    mutations: vec![ValueMutation::Set(Some(n))],
                    ..Default::default()
                })
            })
            .collect()
    }
}

/// Flags a key whose second amount of at least `threshold` arrives within
/// `window_ms` of the first: the first arms a timer and remembers itself in
/// state; the timer forgets it.
#[derive(Debug)]
pub struct FraudDetector {
    /// Suspicious amount.
    pub threshold: i64,
    /// How long a first suspicious amount is remembered.
    pub window_ms: i64,
}

impl NativeProcessFunction for FraudDetector {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        let mut out = Vec::with_capacity(activations.len());
        for a in activations {
            let mut r = ProcessActivationResult {
                activation_id: a.id,
                ..Default::default()
            };
            match &a.callback {
                ProcessCallback::Input(row) => {
                    let amount = row
                        .column(1)
                        .as_primitive_opt::<Int64Type>()
                        .ok_or("amount is not BIGINT")?
                        .value(0);
                    if amount >= self.threshold {
                        if matches!(a.state, ValueState::Int64(_)) {
                            r.output = value(amount);
                            r.mutations.push(ValueMutation::Clear);
                            r.timers.push(TimerOperation::Delete {
                                name: "forget".into(),
                            });
                        } else {
                            r.mutations.push(ValueMutation::Set(Some(amount)));
                            r.timers.push(TimerOperation::Set {
                                name: "forget".into(),
                                at_ms: a.watermark.max(0) + self.window_ms,
                            });
                        }
                    }
                }
                ProcessCallback::Timer { .. } => r.mutations.push(ValueMutation::Clear),
            }
            out.push(r);
        }
        Ok(out)
    }
}

/// Output of [`ActivationLog`]: one row per activation.
pub fn activation_log_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("activation_id", DataType::Int64, false),
        Field::new("key", DataType::Int64, false),
        Field::new("callback", DataType::Utf8, false),
        Field::new("count", DataType::Int64, false),
        Field::new("watermark", DataType::Int64, false),
    ]))
}

/// A descriptor for [`ActivationLog`].
pub fn activation_log_descriptor(name: &str) -> ProcessFunctionDescriptor {
    ProcessFunctionDescriptor {
        output_schema: activation_log_schema(),
        ..descriptor(name)
    }
}

/// Writes its own activation log as output: every activation emits
/// `(activation_id, key, callback, count, watermark)`. An input counts the
/// key's rows in state and (re)arms a `flush` timer `window_ms` after the
/// watermark; the timer reports the count and clears it. Replay tests
/// compare this output across crashes.
#[derive(Debug)]
pub struct ActivationLog {
    /// How long after the watermark a key's `flush` timer fires.
    pub window_ms: i64,
}

impl NativeProcessFunction for ActivationLog {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        let mut out = Vec::with_capacity(activations.len());
        for a in activations {
            let key = super::key::decode_int64_key(&a.key).ok_or("key is not one BIGINT")?;
            let before = match a.state {
                ValueState::Int64(n) => n,
                _ => 0,
            };
            let mut r = ProcessActivationResult {
                activation_id: a.id,
                ..Default::default()
            };
            let (callback, count) = match &a.callback {
                ProcessCallback::Input(_) => {
                    r.mutations.push(ValueMutation::Set(Some(before + 1)));
                    r.timers.push(TimerOperation::Set {
                        name: "flush".into(),
                        at_ms: a.watermark.max(0).saturating_add(self.window_ms),
                    });
                    ("input".to_string(), before + 1)
                }
                ProcessCallback::Timer { name, .. } => {
                    r.mutations.push(ValueMutation::Clear);
                    (format!("timer:{name}"), before)
                }
            };
            r.output = Some(
                RecordBatch::try_new(
                    activation_log_schema(),
                    vec![
                        Arc::new(Int64Array::from(vec![a.id as i64])),
                        Arc::new(Int64Array::from(vec![key])),
                        Arc::new(arrow::array::StringArray::from(vec![callback])),
                        Arc::new(Int64Array::from(vec![count])),
                        Arc::new(Int64Array::from(vec![a.watermark])),
                    ],
                )
                .map_err(|e| e.to_string())?,
            );
            out.push(r);
        }
        Ok(out)
    }
}
