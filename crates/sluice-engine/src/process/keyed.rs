//! The engine side of one bound process function: engine-owned value state
//! and timers, the activation sequence, and the call protocol. Both the
//! pipeline operator and the test harness drive handlers through this, so
//! a handler behaves the same under test as in a pipeline.
//!
//! # Ordering
//!
//! * Rows of one input batch are grouped by key. A call holds at most one
//!   activation per key, so a key's rows go to successive calls in arrival
//!   order; within a call, keys are ordered by their first row in the batch.
//!   A call holds at most `max_activations_per_call` activations.
//! * A watermark cut fires every timer at or before the new watermark, in
//!   (time, key, name) order, one timer per key per call, each removed as it
//!   fires. A timer set during the cut at or before the watermark fires in
//!   the same cut, unless it already fired in it: a timer fires at most once
//!   per cut, a key fires at most `max_timers_per_key` timers per cut, and
//!   what is left fires at the next cut.
//! * Activation ids are one sequence, checkpointed with the state, so the
//!   same input in the same batches with the same watermark cuts produces the
//!   same ids in the same callback order. A processor placed on vnodes
//!   ([`KeyedProcessor::place`]) keeps one sequence per vnode instead and
//!   encodes the vnode index in the id (`placement.rs`), so ids do not
//!   depend on which owner runs a vnode.
//! * A call's response is validated as a whole before any of it is applied;
//!   a violation, handler error or panic applies nothing of that call.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;
use rustc_hash::{FxHashMap, FxHashSet};

use super::capture::{ProcessBase, ProcessDelta};
use crate::state::layers::{KeyedChanges, Layers};
use crate::state::DeferredBatch;

use super::key::encode_keys;
use super::placement::{activation_id, VnodePlacement};
use super::types::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessFunctionDescriptor, TimerOperation, ValueMutation, ValueState,
};
use super::validate::{validate_call, ProcessError};

/// Engine-owned state of one bound function, as a checkpoint holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessSnapshot {
    /// The binding hash of the descriptor the state belongs to.
    pub binding: String,
    /// Function name, for error messages.
    pub function: String,
    /// Function version, for error messages.
    pub version: u32,
    /// Value state per key (keys whose state differs from the initial value).
    pub state: BTreeMap<Vec<u8>, ValueState>,
    /// Timers per key: name to event time (ms).
    pub timers: BTreeMap<Vec<u8>, BTreeMap<String, i64>>,
    /// The next activation id.
    pub next_id: u64,
    /// The watermark of the last cut.
    pub watermark: i64,
    /// Next activation sequence per vnode, for the vnodes that have had
    /// activations (placed processors only; empty otherwise).
    pub vnode_sequences: BTreeMap<u32, u64>,
}

/// The state of vnodes one placed processor gives up at a vnode
/// transition, for the owner that takes them over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VnodeHandover {
    /// The vnodes that move (with or without keys).
    pub vnodes: Vec<u32>,
    /// Their keys' state and timers, and their sequences.
    pub snapshot: ProcessSnapshot,
}

/// One applied activation: what the activation log records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedActivation {
    /// Activation id.
    pub id: u64,
    /// Canonical key.
    pub key: Vec<u8>,
    /// `input` or `timer:<name>`.
    pub callback: String,
}

/// What accepted calls produced.
#[derive(Debug, Default)]
pub struct CallOutput {
    /// Output batches, in activation order.
    pub batches: Vec<RecordBatch>,
    /// Applied activations, when the caller keeps a log.
    pub log: Option<Vec<LoggedActivation>>,
}

/// State, timers and the call protocol for one handler.
pub struct KeyedProcessor<H: NativeProcessFunction> {
    descriptor: ProcessFunctionDescriptor,
    binding: String,
    handler: H,
    key_indices: Vec<usize>,
    state: FxHashMap<Vec<u8>, ValueState>,
    timers: FxHashMap<Vec<u8>, BTreeMap<String, i64>>,
    /// Every set timer as (time, key, name): the firing order.
    due: BTreeSet<(i64, Vec<u8>, String)>,
    next_id: u64,
    watermark: i64,
    /// The vnodes this processor owns (None: a single-node processor with
    /// one activation sequence).
    placement: Option<VnodePlacement>,
    /// Next activation sequence of each vnode (placed processors only).
    vnode_sequences: BTreeMap<u32, u64>,
    /// Keys whose state or timers changed since the last capture; None
    /// until the first capture or restore (nothing is tracked for a
    /// pipeline that never checkpoints).
    changed: Option<FxHashSet<Vec<u8>>>,
    /// The checkpoint's copy of the state, built off the compute thread.
    layers: Arc<Layers<ProcessBase>>,
}

/// A capture of a processor at a checkpoint barrier.
pub struct ProcessCapture {
    /// The binding hash of the descriptor the state belongs to.
    pub binding: String,
    /// Function name.
    pub function: String,
    /// Function version.
    pub version: u32,
    /// The next activation id.
    pub next_id: u64,
    /// A placed processor's next sequence per held vnode (empty unplaced).
    pub vnode_sequences: BTreeMap<u32, u64>,
    /// The watermark of the last cut.
    pub watermark: i64,
    /// Value state, then timers: built when the checkpoint encodes them.
    pub parts: Vec<Arc<dyn DeferredBatch>>,
}

impl<H: NativeProcessFunction> KeyedProcessor<H> {
    /// A processor with empty state; key columns must be in the input schema.
    pub fn new(descriptor: ProcessFunctionDescriptor, handler: H) -> Result<Self, ProcessError> {
        let binding = descriptor.binding_hash();
        let mut key_indices = Vec::with_capacity(descriptor.key_columns.len());
        for k in &descriptor.key_columns {
            match descriptor.input_schema.index_of(k) {
                Ok(i) => key_indices.push(i),
                Err(_) => {
                    return Err(ProcessError {
                        function: descriptor.name.clone(),
                        version: descriptor.version,
                        key: "-".into(),
                        reason: format!("key column '{k}' is not in the input schema"),
                    })
                }
            }
        }
        Ok(Self {
            descriptor,
            binding,
            handler,
            key_indices,
            state: FxHashMap::default(),
            timers: FxHashMap::default(),
            due: BTreeSet::new(),
            next_id: 0,
            watermark: i64::MIN,
            placement: None,
            vnode_sequences: BTreeMap::new(),
            changed: None,
            layers: Layers::new(ProcessBase::default()),
        })
    }

    fn note_changed(&mut self, key: &[u8]) {
        if let Some(changed) = &mut self.changed {
            if !changed.contains(key) {
                changed.insert(key.to_vec());
            }
        }
    }

    /// The handler.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
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
        self.state
            .get(key)
            .copied()
            .or(self.descriptor.initial_state)
            .unwrap_or(ValueState::Absent)
    }

    /// The timers set for `key`, by name.
    pub fn timers(&self, key: &[u8]) -> BTreeMap<String, i64> {
        self.timers.get(key).cloned().unwrap_or_default()
    }

    /// The watermark of the last cut.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// The canonical key of every row of `batch` (of the input schema).
    pub fn keys_of(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>, ProcessError> {
        let cols: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        encode_keys(&cols, batch.num_rows()).map_err(|e| self.error("-", e))
    }

    /// Run input activations for every row of `batch` (of the input schema).
    pub fn process_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut CallOutput,
    ) -> Result<(), ProcessError> {
        let keys = self.keys_of(batch)?;
        // A row's wave is how many earlier rows share its key; a key's rank
        // is the order of its first row. Wave w holds every key's w-th row,
        // ordered by rank, which is one activation per key per call with a
        // key's rows in arrival order.
        let mut seen: FxHashMap<&[u8], (u32, u32)> = FxHashMap::default();
        let mut waves: Vec<Vec<(u32, usize)>> = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            let next_rank = seen.len() as u32;
            let (rank, count) = seen.entry(key.as_slice()).or_insert((next_rank, 0));
            let wave = *count as usize;
            *count += 1;
            if waves.len() == wave {
                waves.push(Vec::new());
            }
            waves[wave].push((*rank, row));
        }
        drop(seen);
        let mut keys: Vec<Option<Vec<u8>>> = keys.into_iter().map(Some).collect();
        for (i, mut wave) in waves.into_iter().enumerate() {
            if i > 0 {
                wave.sort_unstable_by_key(|(rank, _)| *rank);
            }
            let items = wave
                .into_iter()
                .map(|(_, row)| {
                    let key = keys[row].take().unwrap_or_default();
                    (key, ProcessCallback::Input(batch.slice(row, 1)))
                })
                .collect();
            self.run(items, out)?;
        }
        Ok(())
    }

    /// Advance the watermark (it never regresses) and fire the timers it
    /// makes due.
    pub fn advance_watermark(
        &mut self,
        watermark: i64,
        out: &mut CallOutput,
    ) -> Result<(), ProcessError> {
        self.watermark = self.watermark.max(watermark);
        // A timer fires at most once per cut, and a key fires at most
        // `max_timers_per_key` timers per cut, so a handler that keeps
        // arming timers in the past cannot spin the compute thread: what is
        // left fires at the next cut.
        let per_key = self.descriptor.limits.max_timers_per_key.max(1);
        let mut fired: BTreeSet<(Vec<u8>, String)> = BTreeSet::new();
        let mut fired_per_key: FxHashMap<Vec<u8>, usize> = FxHashMap::default();
        loop {
            let mut seen = BTreeSet::new();
            let mut wave = Vec::new();
            for (at, key, name) in self.due.iter() {
                if *at > self.watermark {
                    break;
                }
                if fired_per_key.get(key).is_some_and(|n| *n >= per_key)
                    || fired.contains(&(key.clone(), name.clone()))
                {
                    continue;
                }
                if seen.insert(key.clone()) {
                    fired.insert((key.clone(), name.clone()));
                    *fired_per_key.entry(key.clone()).or_default() += 1;
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
            self.run(wave, out)?;
        }
    }

    fn run(
        &mut self,
        mut wave: Vec<(Vec<u8>, ProcessCallback)>,
        out: &mut CallOutput,
    ) -> Result<(), ProcessError> {
        let max = self.descriptor.limits.max_activations_per_call.max(1);
        while !wave.is_empty() {
            let rest = wave.split_off(wave.len().min(max));
            self.call(std::mem::replace(&mut wave, rest), out)?;
        }
        Ok(())
    }

    fn call(
        &mut self,
        items: Vec<(Vec<u8>, ProcessCallback)>,
        out: &mut CallOutput,
    ) -> Result<(), ProcessError> {
        // The timers of the call's keys as the call leaves them: a fired
        // timer is gone unless the result sets it again.
        let mut timers: FxHashMap<Vec<u8>, BTreeMap<String, i64>> = FxHashMap::default();
        let ids = self.activation_ids(&items)?;
        let activations: Vec<ProcessActivation> = items
            .into_iter()
            .zip(ids.ids)
            .map(|((key, callback), id)| {
                if let ProcessCallback::Timer { name, .. } = &callback {
                    let t = timers
                        .entry(key.clone())
                        .or_insert_with(|| self.timers.get(&key).cloned().unwrap_or_default());
                    t.remove(name);
                }
                ProcessActivation {
                    id,
                    state: self.state(&key),
                    key,
                    watermark: self.watermark,
                    callback,
                }
            })
            .collect();
        let results = match catch_unwind(AssertUnwindSafe(|| self.handler.process(&activations))) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(self.error("-", format!("handler error: {e}"))),
            Err(payload) => {
                let message = crate::panic::panic_message(&*payload);
                return Err(self.error("-", format!("handler panicked: {message}")));
            }
        };
        validate_call(&self.descriptor, &activations, &results, |key| {
            timers.get(key).or_else(|| self.timers.get(key))
        })?;
        // Accepted: apply every result together.
        for (a, r) in activations.iter().zip(results) {
            self.apply(a, r, &mut timers, out);
        }
        for (key, t) in timers {
            self.set_timers(key, t);
        }
        match ids.sequences {
            Some(sequences) => self.vnode_sequences.extend(sequences),
            None => self.next_id += activations.len() as u64,
        }
        Ok(())
    }

    /// The ids of a call's activations, and (placed) each vnode's sequence
    /// after them, applied only once the call is accepted. A key of a vnode
    /// this processor does not own is refused: routing sent it to the wrong
    /// owner.
    fn activation_ids(
        &self,
        items: &[(Vec<u8>, ProcessCallback)],
    ) -> Result<CallIds, ProcessError> {
        let Some(placement) = &self.placement else {
            return Ok(CallIds {
                ids: (0..items.len() as u64).map(|i| self.next_id + i).collect(),
                sequences: None,
            });
        };
        let mut sequences: BTreeMap<u32, u64> = BTreeMap::new();
        let mut ids = Vec::with_capacity(items.len());
        for (key, _) in items {
            let vnode = placement.vnode_of(key);
            if !placement.owns(vnode) {
                return Err(self.error(
                    &super::key::display_key(key),
                    format!(
                        "the key is in vnode {vnode}, which this owner does not hold (it holds {} of {} vnodes)",
                        placement.owned().len(),
                        placement.count()
                    ),
                ));
            }
            let next = sequences
                .entry(vnode)
                .or_insert_with(|| self.vnode_sequences.get(&vnode).copied().unwrap_or(0));
            ids.push(activation_id(*next, vnode));
            *next += 1;
        }
        Ok(CallIds {
            ids,
            sequences: Some(sequences),
        })
    }

    /// Place this processor on the vnodes `placement` holds: from now on
    /// it handles only their keys and numbers activations per vnode.
    /// Refused once it has run unplaced (its ids are one sequence) or
    /// while it holds a key of a vnode outside the placement.
    pub fn place(&mut self, placement: VnodePlacement) -> Result<(), ProcessError> {
        if self.placement.is_none() && self.next_id > 0 {
            return Err(self.error(
                "-",
                format!(
                    "a processor that has run {} activations unplaced cannot be placed on vnodes",
                    self.next_id
                ),
            ));
        }
        if let Some((key, vnode)) =
            foreign_key(&placement, self.state.keys().chain(self.timers.keys()))
        {
            return Err(self.error(
                &super::key::display_key(key),
                format!("the key's vnode {vnode} is outside the placement; hand it over first"),
            ));
        }
        self.placement = Some(placement);
        Ok(())
    }

    /// The vnodes this processor holds (None: unplaced).
    pub fn placement(&self) -> Option<&VnodePlacement> {
        self.placement.as_ref()
    }

    /// Give up `vnodes` at a vnode transition: their keys' state and
    /// timers and their sequences leave this processor, for
    /// [`KeyedProcessor::adopt_vnodes`] on the new owner.
    pub fn release_vnodes(&mut self, vnodes: &[u32]) -> Result<VnodeHandover, ProcessError> {
        let Some(placement) = &self.placement else {
            return Err(self.error("-", "an unplaced processor has no vnodes to release".into()));
        };
        if let Some(v) = vnodes.iter().find(|v| !placement.owns(**v)) {
            return Err(self.error("-", format!("vnode {v} is not held here")));
        }
        let moving: BTreeSet<u32> = vnodes.iter().copied().collect();
        let leaves = |key: &Vec<u8>| moving.contains(&placement.vnode_of(key));
        let state_keys: Vec<Vec<u8>> = self.state.keys().filter(|k| leaves(k)).cloned().collect();
        let timer_keys: Vec<Vec<u8>> = self.timers.keys().filter(|k| leaves(k)).cloned().collect();
        let mut snapshot = ProcessSnapshot {
            binding: self.binding.clone(),
            function: self.descriptor.name.clone(),
            version: self.descriptor.version,
            watermark: self.watermark,
            ..Default::default()
        };
        for key in state_keys {
            self.note_changed(&key);
            if let Some(v) = self.state.remove(&key) {
                snapshot.state.insert(key, v);
            }
        }
        for key in timer_keys {
            if let Some(t) = self.timers.get(&key).cloned() {
                self.set_timers(key.clone(), BTreeMap::new());
                snapshot.timers.insert(key, t);
            }
        }
        for v in &moving {
            if let Some(seq) = self.vnode_sequences.remove(v) {
                snapshot.vnode_sequences.insert(*v, seq);
            }
        }
        if let Some(placement) = &mut self.placement {
            placement.release(vnodes);
        }
        Ok(VnodeHandover {
            vnodes: moving.into_iter().collect(),
            snapshot,
        })
    }

    /// Take over the vnodes of `handover` (released by their old owner
    /// under the same binding) with their state, timers and sequences.
    pub fn adopt_vnodes(&mut self, handover: VnodeHandover) -> Result<(), ProcessError> {
        let VnodeHandover { vnodes, snapshot } = handover;
        self.check_binding(&snapshot)?;
        let Some(placement) = &self.placement else {
            return Err(self.error("-", "an unplaced processor cannot adopt vnodes".into()));
        };
        if let Some(v) = vnodes
            .iter()
            .find(|v| placement.owns(**v) || **v >= placement.count())
        {
            return Err(self.error(
                "-",
                format!("vnode {v} is already held here or not below the vnode count"),
            ));
        }
        let stray = snapshot
            .state
            .keys()
            .chain(snapshot.timers.keys())
            .find(|k| !vnodes.contains(&placement.vnode_of(k)));
        if let Some(key) = stray {
            return Err(self.error(
                &super::key::display_key(key),
                "the handover holds a key outside the vnodes it moves".into(),
            ));
        }
        for (key, v) in snapshot.state {
            self.note_changed(&key);
            self.state.insert(key, v);
        }
        for (key, t) in snapshot.timers {
            self.set_timers(key, t);
        }
        self.vnode_sequences.extend(snapshot.vnode_sequences);
        self.watermark = self.watermark.max(snapshot.watermark);
        if let Some(placement) = &mut self.placement {
            placement.adopt(&vnodes);
        }
        Ok(())
    }

    /// Replace a key's timers, keeping the due-time index in step.
    fn set_timers(&mut self, key: Vec<u8>, timers: BTreeMap<String, i64>) {
        self.note_changed(&key);
        if let Some(old) = self.timers.get(&key) {
            for (name, at) in old {
                self.due.remove(&(*at, key.clone(), name.clone()));
            }
        }
        for (name, at) in &timers {
            self.due.insert((*at, key.clone(), name.clone()));
        }
        if timers.is_empty() {
            self.timers.remove(&key);
        } else {
            self.timers.insert(key, timers);
        }
    }

    fn apply(
        &mut self,
        a: &ProcessActivation,
        r: ProcessActivationResult,
        timers: &mut FxHashMap<Vec<u8>, BTreeMap<String, i64>>,
        out: &mut CallOutput,
    ) {
        if let Some(log) = &mut out.log {
            log.push(LoggedActivation {
                id: a.id,
                key: a.key.clone(),
                callback: match &a.callback {
                    ProcessCallback::Input(_) => "input".to_string(),
                    ProcessCallback::Timer { name, .. } => format!("timer:{name}"),
                },
            });
        }
        if !r.mutations.is_empty() {
            self.note_changed(&a.key);
        }
        for m in r.mutations {
            let v = match m {
                ValueMutation::Set(Some(v)) => ValueState::Int64(v),
                ValueMutation::Set(None) => ValueState::Null,
                ValueMutation::Clear => ValueState::Absent,
            };
            // Only what differs from the initial value is stored.
            if Some(v) == self.descriptor.initial_state
                || (v == ValueState::Absent && self.descriptor.initial_state.is_none())
            {
                self.state.remove(&a.key);
            } else if let Some(slot) = self.state.get_mut(&a.key) {
                *slot = v;
            } else {
                self.state.insert(a.key.clone(), v);
            }
        }
        if !r.timers.is_empty() {
            let t = timers
                .entry(a.key.clone())
                .or_insert_with(|| self.timers.get(&a.key).cloned().unwrap_or_default());
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
        }
        if let Some(batch) = r.output {
            if batch.num_rows() > 0 {
                out.batches.push(batch);
            }
        }
    }

    /// Capture the state at a checkpoint barrier, in time proportional to
    /// the keys changed since the previous capture (the first capture
    /// copies everything once); the batches are built by whoever encodes
    /// the parts.
    pub fn capture(&mut self) -> ProcessCapture {
        let delta = match self.changed.replace(FxHashSet::default()) {
            None => ProcessDelta {
                state: KeyedChanges {
                    replace_all: true,
                    entries: self
                        .state
                        .iter()
                        .map(|(k, v)| (k.clone(), Some(*v)))
                        .collect(),
                },
                timers: KeyedChanges {
                    replace_all: true,
                    entries: self
                        .timers
                        .iter()
                        .map(|(k, t)| (k.clone(), Some(t.clone())))
                        .collect(),
                },
            },
            Some(keys) => {
                let mut state = Vec::with_capacity(keys.len());
                let mut timers = Vec::with_capacity(keys.len());
                for key in keys {
                    timers.push((key.clone(), self.timers.get(&key).cloned()));
                    state.push((key.clone(), self.state.get(&key).copied()));
                }
                ProcessDelta {
                    state: KeyedChanges {
                        replace_all: false,
                        entries: state,
                    },
                    timers: KeyedChanges {
                        replace_all: false,
                        entries: timers,
                    },
                }
            }
        };
        self.layers.queue(delta);
        ProcessCapture {
            binding: self.binding.clone(),
            function: self.descriptor.name.clone(),
            version: self.descriptor.version,
            next_id: self.next_id,
            vnode_sequences: self.vnode_sequences.clone(),
            watermark: self.watermark,
            parts: self
                .layers
                .capture(2, Box::new(|base: &mut ProcessBase| base.batches())),
        }
    }

    /// The engine-owned state, copied whole (the test harness's view).
    pub fn snapshot(&self) -> ProcessSnapshot {
        ProcessSnapshot {
            binding: self.binding.clone(),
            function: self.descriptor.name.clone(),
            version: self.descriptor.version,
            state: self.state.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            timers: self
                .timers
                .iter()
                .map(|(k, t)| (k.clone(), t.clone()))
                .collect(),
            next_id: self.next_id,
            watermark: self.watermark,
            vnode_sequences: self.vnode_sequences.clone(),
        }
    }

    /// Restore a snapshot; refused if it belongs to another binding (name,
    /// version, schemas, keys, initial state or runtime differ).
    pub fn restore(&mut self, snap: ProcessSnapshot) -> Result<(), ProcessError> {
        self.check_binding(&snap)?;
        if self.placement.is_none() && !snap.vnode_sequences.is_empty() {
            return Err(self.error(
                "-",
                "the snapshot was taken on vnodes; place the processor before restoring it".into(),
            ));
        }
        if let Some(placement) = &self.placement {
            if let Some((key, vnode)) =
                foreign_key(placement, snap.state.keys().chain(snap.timers.keys()))
            {
                return Err(self.error(
                    &super::key::display_key(key),
                    format!("the snapshot holds a key of vnode {vnode}, outside this placement"),
                ));
            }
        }
        self.due = snap
            .timers
            .iter()
            .flat_map(|(k, t)| t.iter().map(move |(n, at)| (*at, k.clone(), n.clone())))
            .collect();
        self.state = snap.state.iter().map(|(k, v)| (k.clone(), *v)).collect();
        self.timers = snap
            .timers
            .iter()
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        // The checkpoint's copy starts as what was restored; from here on
        // captures hand over only what changed.
        self.layers = Layers::new(ProcessBase {
            state: snap.state,
            timers: snap.timers,
        });
        self.changed = Some(FxHashSet::default());
        self.next_id = snap.next_id;
        self.watermark = snap.watermark;
        self.vnode_sequences = snap.vnode_sequences;
        Ok(())
    }

    /// Refuse state of another binding (name, version, schemas, keys,
    /// initial state or runtime differ).
    fn check_binding(&self, snap: &ProcessSnapshot) -> Result<(), ProcessError> {
        if snap.binding != self.binding {
            return Err(self.error(
                "-",
                format!(
                    "the checkpointed state belongs to '{}' v{} (binding {}), but the function is now bound as '{}' v{} (binding {}); restoring state under a different binding is refused",
                    snap.function,
                    snap.version,
                    snap.binding,
                    self.descriptor.name,
                    self.descriptor.version,
                    self.binding
                ),
            ));
        }
        Ok(())
    }
}

/// The first of `keys` whose vnode `placement` does not hold, with that
/// vnode.
fn foreign_key<'k>(
    placement: &VnodePlacement,
    keys: impl Iterator<Item = &'k Vec<u8>>,
) -> Option<(&'k Vec<u8>, u32)> {
    keys.map(|k| (k, placement.vnode_of(k)))
        .find(|(_, v)| !placement.owns(*v))
}

/// The ids of one call, and each touched vnode's next sequence.
struct CallIds {
    ids: Vec<u64>,
    sequences: Option<BTreeMap<u32, u64>>,
}
