//! A test harness for native process functions, in the spirit of Flink's
//! keyed operator test harness: feed rows, advance the watermark, fire
//! timers, snapshot and restore, and inspect outputs, state and timers.
//!
//! It applies the engine's rules exactly:
//! * Rows of one batch are grouped by key; a call holds at most one
//!   activation per key, so a key's rows go to successive calls in arrival
//!   order; keys within a call are ordered by first arrival.
//! * Activation ids follow one sequence, checkpointed with the state.
//! * At a watermark cut, every input activation of the batches before it has
//!   run; then timers due at the new watermark fire in (time, key, name)
//!   order, one per key per call, each removed as it fires.
//! * A call's response is validated as a whole; a violation, handler error
//!   or panic applies nothing of that call.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;

use super::key::encode_key;
use super::types::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessFunctionDescriptor, TimerOperation, ValueMutation, ValueState,
};
use super::validate::{validate_call, ProcessError};

/// Engine-owned state of one function, as a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessSnapshot {
    /// The descriptor binding the state belongs to.
    pub binding: String,
    /// Value state per key.
    pub state: BTreeMap<Vec<u8>, ValueState>,
    /// Timers per key: name to time.
    pub timers: BTreeMap<Vec<u8>, BTreeMap<String, i64>>,
    /// Next activation id.
    pub next_id: u64,
    /// Watermark.
    pub watermark: i64,
}

/// Drives one native handler the way the engine does.
pub struct ProcessFunctionTestHarness<F: NativeProcessFunction> {
    descriptor: ProcessFunctionDescriptor,
    handler: F,
    key_indices: Vec<usize>,
    snap: HarnessSnapshot,
    outputs: Vec<RecordBatch>,
    log: Vec<(u64, Vec<u8>, String)>,
    /// Every set timer as (time, key, name): the firing order.
    due: BTreeSet<(i64, Vec<u8>, String)>,
}

impl<F: NativeProcessFunction> ProcessFunctionTestHarness<F> {
    /// A harness with empty state.
    pub fn new(descriptor: ProcessFunctionDescriptor, handler: F) -> Result<Self, String> {
        let key_indices = descriptor
            .key_columns
            .iter()
            .map(|k| {
                descriptor
                    .input_schema
                    .index_of(k)
                    .map_err(|_| format!("key column '{k}' is not in the input schema"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let binding = descriptor.binding_hash();
        Ok(Self {
            descriptor,
            handler,
            key_indices,
            snap: HarnessSnapshot {
                binding,
                state: BTreeMap::new(),
                timers: BTreeMap::new(),
                next_id: 0,
                watermark: i64::MIN,
            },
            outputs: Vec::new(),
            log: Vec::new(),
            due: BTreeSet::new(),
        })
    }

    fn error(&self, key: &str, reason: String) -> ProcessError {
        ProcessError {
            function: self.descriptor.name.clone(),
            version: self.descriptor.version,
            key: key.to_string(),
            reason,
        }
    }

    /// The state of `key` before its next activation.
    pub fn state(&self, key: &[u8]) -> ValueState {
        self.snap
            .state
            .get(key)
            .copied()
            .or(self.descriptor.initial_state)
            .unwrap_or(ValueState::Absent)
    }

    /// The timers set for `key`, by name.
    pub fn timers(&self, key: &[u8]) -> BTreeMap<String, i64> {
        self.snap.timers.get(key).cloned().unwrap_or_default()
    }

    /// The handler (to inspect or reconfigure it in tests).
    pub fn handler_mut(&mut self) -> &mut F {
        &mut self.handler
    }

    /// Output batches so far.
    pub fn outputs(&self) -> &[RecordBatch] {
        &self.outputs
    }

    /// Every activation run so far: (id, key, "input" or "timer:<name>").
    pub fn activation_log(&self) -> &[(u64, Vec<u8>, String)] {
        &self.log
    }

    /// Feed rows of the input schema.
    pub fn process_batch(&mut self, batch: &RecordBatch) -> Result<(), ProcessError> {
        let cols: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        let mut order: Vec<Vec<u8>> = Vec::new();
        let mut rows: BTreeMap<Vec<u8>, VecDeque<usize>> = BTreeMap::new();
        for r in 0..batch.num_rows() {
            let key = encode_key(&cols, r).map_err(|e| self.error("-", e))?;
            let q = rows.entry(key.clone()).or_default();
            if q.is_empty() {
                order.push(key);
            }
            q.push_back(r);
        }
        loop {
            let mut wave = Vec::new();
            for key in &order {
                if let Some(r) = rows.get_mut(key).and_then(VecDeque::pop_front) {
                    wave.push((key.clone(), ProcessCallback::Input(batch.slice(r, 1))));
                }
            }
            if wave.is_empty() {
                return Ok(());
            }
            self.run(wave)?;
        }
    }

    /// Advance the watermark and fire the timers it makes due.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<(), ProcessError> {
        self.snap.watermark = self.snap.watermark.max(watermark);
        loop {
            let mut seen = BTreeSet::new();
            let mut wave = Vec::new();
            for (at, key, name) in self.due.iter() {
                if *at > self.snap.watermark {
                    break;
                }
                if seen.insert(key.clone()) {
                    wave.push((
                        key.clone(),
                        ProcessCallback::Timer {
                            name: name.clone(),
                            at_ms: *at,
                        },
                    ));
                }
            }
            if wave.is_empty() {
                return Ok(());
            }
            self.run(wave)?;
        }
    }

    fn run(&mut self, wave: Vec<(Vec<u8>, ProcessCallback)>) -> Result<(), ProcessError> {
        let max = self.descriptor.limits.max_activations_per_call.max(1);
        let mut wave = wave;
        while !wave.is_empty() {
            let rest = wave.split_off(wave.len().min(max));
            self.call(std::mem::replace(&mut wave, rest))?;
        }
        Ok(())
    }

    fn call(&mut self, items: Vec<(Vec<u8>, ProcessCallback)>) -> Result<(), ProcessError> {
        // The timers of the call's keys, as the call will leave them; a fired
        // timer is gone unless the result sets it again.
        let mut timers: BTreeMap<Vec<u8>, BTreeMap<String, i64>> = BTreeMap::new();
        let activations: Vec<ProcessActivation> = items
            .into_iter()
            .enumerate()
            .map(|(i, (key, callback))| {
                let t = timers
                    .entry(key.clone())
                    .or_insert_with(|| self.snap.timers.get(&key).cloned().unwrap_or_default());
                if let ProcessCallback::Timer { name, .. } = &callback {
                    t.remove(name);
                }
                ProcessActivation {
                    id: self.snap.next_id + i as u64,
                    state: self.state(&key),
                    key,
                    watermark: self.snap.watermark,
                    callback,
                }
            })
            .collect();
        let results = match catch_unwind(AssertUnwindSafe(|| self.handler.process(&activations))) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(self.error("-", format!("handler error: {e}"))),
            Err(_) => return Err(self.error("-", "handler panicked".into())),
        };
        let names: BTreeMap<Vec<u8>, BTreeSet<String>> = timers
            .iter()
            .map(|(k, t)| (k.clone(), t.keys().cloned().collect()))
            .collect();
        validate_call(&self.descriptor, &activations, &results, &names)?;
        // Accepted: apply every result together.
        for (a, r) in activations.iter().zip(results) {
            self.apply(a, r, &mut timers);
        }
        for (key, t) in timers {
            self.set_timers(key, t);
        }
        self.snap.next_id += activations.len() as u64;
        Ok(())
    }

    /// Replace a key's timers, keeping the due-time index in step.
    fn set_timers(&mut self, key: Vec<u8>, timers: BTreeMap<String, i64>) {
        if let Some(old) = self.snap.timers.get(&key) {
            for (name, at) in old {
                self.due.remove(&(*at, key.clone(), name.clone()));
            }
        }
        for (name, at) in &timers {
            self.due.insert((*at, key.clone(), name.clone()));
        }
        if timers.is_empty() {
            self.snap.timers.remove(&key);
        } else {
            self.snap.timers.insert(key, timers);
        }
    }

    fn apply(
        &mut self,
        a: &ProcessActivation,
        r: ProcessActivationResult,
        timers: &mut BTreeMap<Vec<u8>, BTreeMap<String, i64>>,
    ) {
        let what = match &a.callback {
            ProcessCallback::Input(_) => "input".to_string(),
            ProcessCallback::Timer { name, .. } => format!("timer:{name}"),
        };
        self.log.push((a.id, a.key.clone(), what));
        for m in r.mutations {
            let v = match m {
                ValueMutation::Set(Some(v)) => ValueState::Int64(v),
                ValueMutation::Set(None) => ValueState::Null,
                ValueMutation::Clear => ValueState::Absent,
            };
            self.snap.state.insert(a.key.clone(), v);
        }
        let t = timers.entry(a.key.clone()).or_default();
        for op in r.timers {
            match op {
                TimerOperation::Set { name, at_ms } => {
                    t.insert(name, at_ms);
                }
                TimerOperation::Delete { name } => {
                    t.remove(&name);
                }
            }
        }
        if let Some(out) = r.output {
            if out.num_rows() > 0 {
                self.outputs.push(out);
            }
        }
    }

    /// The engine-owned state, for a checkpoint.
    pub fn snapshot(&self) -> HarnessSnapshot {
        self.snap.clone()
    }

    /// Restore a snapshot; refused if it belongs to another binding
    /// (name, version, schemas, keys or runtime differ).
    pub fn restore(&mut self, snap: HarnessSnapshot) -> Result<(), ProcessError> {
        if snap.binding != self.snap.binding {
            return Err(self.error(
                "-",
                format!(
                    "snapshot belongs to binding {} but this function is bound as {}",
                    snap.binding, self.snap.binding
                ),
            ));
        }
        self.due = snap
            .timers
            .iter()
            .flat_map(|(k, t)| t.iter().map(move |(n, at)| (*at, k.clone(), n.clone())))
            .collect();
        self.snap = snap;
        Ok(())
    }
}
