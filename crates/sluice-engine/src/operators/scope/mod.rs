//! One aggregation scope: group keys and their accumulated state.
//!
//! A scope is one window instance (tumble/hop), or the whole non-windowed
//! aggregate. Keys are interned by a [`GroupTable`] on the compute thread;
//! the accumulated state is split in two layers (see [`layers`]) so that a
//! checkpoint captures a scope in time proportional to what changed since
//! the previous one, and the copy of the whole state is built by the
//! checkpoint tail.

mod layers;
mod segments;
mod snapshot;

use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take;

use super::changelog::Op;
use super::groups::{
    select_inputs, AggregateFunctions, AggregateInputs, GroupTable, KeyCodec, KeyRows,
};
use crate::error::{EngineError, Result};
use crate::state::layers::Layers;
use crate::state::DeferredBatch;
use layers::{Delta, DeltaGroups, ScopeBase, CHUNK};
use segments::Segments;
pub use snapshot::{state_schema, ScopeSnapshot};

/// A changelog slice: key columns, aggregate columns, and each row's kind.
pub type Changes = (Vec<ArrayRef>, Vec<ArrayRef>, Vec<Op>);

/// Keys plus grouped accumulators for one aggregation scope.
pub struct GroupedAggregates {
    groups: GroupTable,
    /// Accumulators over the groups changed since the last delta, indexed
    /// by local index (the order the groups were first changed in), in
    /// segments of the base's chunk size.
    live: Segments,
    /// Global group index of each local index.
    live_groups: Vec<usize>,
    /// Per global group: `generation << 32 | (local index + 1)` if it is in
    /// the live layer of that generation. A delta starts a new generation,
    /// which empties the map without touching it.
    local_of: Vec<u64>,
    /// The live layer's generation (from 1; a zeroed slot is in none).
    generation: u32,
    /// Makes the fresh live accumulators a delta leaves behind.
    funcs: AggregateFunctions,
    /// Whether no delta was ever taken and nothing restored: the live layer
    /// is then the whole state, with local indices equal to global ones, and
    /// results are read from it directly.
    live_only: bool,
    /// Groups whose keys are decoded (into `new_keys` or the base).
    keys_decoded: usize,
    /// Key columns of the groups created since the last delta, one chunk
    /// per batch that created groups: decoded as groups are created (once
    /// captures began), so a capture only moves them.
    new_keys: Vec<Vec<ArrayRef>>,
    /// The base layer and its queue of deltas, shared with captures.
    layers: Arc<Layers<ScopeBase>>,
    touched: Vec<bool>,
    any_touched: bool,
    /// Last emitted aggregate values per group (changelog mode only).
    emitted: Option<Vec<ArrayRef>>,
    scratch: Vec<usize>,
    local_scratch: Vec<usize>,
}

impl GroupedAggregates {
    /// An empty scope.
    pub fn new(codec: &KeyCodec, funcs: &AggregateFunctions) -> Result<Self> {
        let no_keys = codec.decode(&codec.empty(), &[])?;
        Self::with_base(
            codec,
            funcs,
            ScopeBase::new(funcs, Segments::new(funcs, CHUNK)?, no_keys, 0)?,
        )
    }

    fn with_base(codec: &KeyCodec, funcs: &AggregateFunctions, base: ScopeBase) -> Result<Self> {
        Ok(Self {
            groups: GroupTable::new(codec),
            live: Segments::new(funcs, base.chunk)?,
            live_groups: Vec::new(),
            local_of: Vec::new(),
            generation: 1,
            funcs: funcs.clone(),
            live_only: true,
            keys_decoded: 0,
            new_keys: Vec::new(),
            layers: Layers::new(base),
            touched: Vec::new(),
            any_touched: false,
            emitted: None,
            scratch: Vec::new(),
            local_scratch: Vec::new(),
        })
    }

    /// Keep the base in chunks of `chunk` groups (tests: many chunks over
    /// few groups).
    #[cfg(test)]
    fn set_chunk(&mut self, chunk: usize) -> Result<()> {
        self.live = Segments::new(&self.funcs, chunk)?;
        self.layers.with_latest(|base| base.set_chunk(chunk))
    }

    /// Fold the selected rows of a batch into the accumulators.
    pub fn update(
        &mut self,
        codec: &KeyCodec,
        keys: &KeyRows,
        rows: Option<&[u32]>,
        inputs: &AggregateInputs,
    ) -> Result<()> {
        let mut idx = std::mem::take(&mut self.scratch);
        self.groups.intern(keys, rows, &mut idx);
        let n = self.groups.len();
        if self.touched.len() < n {
            self.touched.resize(n, false);
        }
        for g in &idx {
            self.touched[*g] = true;
        }
        self.any_touched |= !idx.is_empty();
        if !self.live_only && self.keys_decoded < n {
            // Captures are being taken: decode the new groups' keys now,
            // a batch's worth at a time, rather than all at the barrier.
            let created: Vec<usize> = (self.keys_decoded..n).collect();
            self.new_keys.push(self.groups.decode(codec, &created)?);
            self.keys_decoded = n;
        }
        let selected = select_inputs(inputs, rows)?;
        let result = if self.live_only {
            self.live_update(&idx, n, &selected)
        } else {
            let mut local = std::mem::take(&mut self.local_scratch);
            let mapped = self.map_to_live(&idx, n, &mut local);
            let total = self.live_groups.len();
            let result = mapped.and_then(|()| self.live_update(&local, total, &selected));
            self.local_scratch = local;
            result
        };
        self.scratch = idx;
        result
    }

    fn live_update(&mut self, idx: &[usize], total: usize, inputs: &AggregateInputs) -> Result<()> {
        self.live.update(idx, total, inputs)
    }

    /// Map global group indices to live-layer indices, adding the groups
    /// not yet in the live layer.
    fn map_to_live(&mut self, idx: &[usize], groups: usize, out: &mut Vec<usize>) -> Result<()> {
        out.clear();
        if self.local_of.len() < groups {
            self.local_of.resize(groups, 0);
        }
        let generation = u64::from(self.generation);
        for &g in idx {
            let slot = self.local_of[g];
            let local = if slot >> 32 == generation {
                (slot & u64::from(u32::MAX)) as usize - 1
            } else {
                self.live_groups.push(g);
                let next = u32::try_from(self.live_groups.len()).map_err(|_| {
                    EngineError::Internal("more than 4 billion groups changed in one scope".into())
                })?;
                self.local_of[g] = generation << 32 | u64::from(next);
                next as usize - 1
            };
            out.push(local);
        }
        Ok(())
    }

    /// Hand the live layer over as a delta and start an empty one (None if
    /// nothing changed and no group was created since the last one). The
    /// accumulators are moved, not drained, and the keys of new groups were
    /// decoded as they were created (the first delta shares every key so
    /// far in its encoded form): this costs the compute thread nothing per
    /// group.
    fn take_delta(&mut self, codec: &KeyCodec) -> Result<Option<Delta>> {
        let total = self.groups.len();
        let groups = if self.live_only {
            if total == 0 {
                return Ok(None);
            }
            // The live layer held every group at its global index.
            self.live_only = false;
            DeltaGroups::Identity(total)
        } else {
            if self.live_groups.is_empty() && self.keys_decoded == total {
                return Ok(None);
            }
            DeltaGroups::Listed(std::mem::take(&mut self.live_groups))
        };
        let fresh = Segments::new(&self.funcs, self.live.size())?;
        let live = std::mem::replace(&mut self.live, fresh);
        let mut encoded_keys = None;
        if self.keys_decoded == 0 && total > 0 {
            // The first delta: every key so far, shared encoded (the
            // table freezes them and goes on in a fresh buffer) and
            // decoded by whoever merges the delta.
            encoded_keys = self.groups.freeze(codec).map(|rows| (rows, codec.share()));
            self.keys_decoded = total;
        } else if self.keys_decoded < total {
            // Later deltas find their keys decoded by `update`.
            let created: Vec<usize> = (self.keys_decoded..total).collect();
            self.new_keys.push(self.groups.decode(codec, &created)?);
            self.keys_decoded = total;
        }
        let new_keys = std::mem::take(&mut self.new_keys);
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Once in 4 billion deltas: forget every slot for real.
            self.local_of.iter_mut().for_each(|slot| *slot = 0);
            self.generation = 1;
        }
        Ok(Some(Delta {
            groups,
            live,
            new_keys,
            encoded_keys,
            total,
        }))
    }

    /// Capture the state at a checkpoint barrier, in time independent of
    /// the state's size (see [`Self::take_delta`]). The returned part is
    /// built (every group's keys and state) when the checkpoint tail
    /// encodes it; `extra` goes into its schema metadata.
    pub fn capture(
        &mut self,
        codec: &KeyCodec,
        extra: Vec<(String, String)>,
    ) -> Result<Arc<dyn DeferredBatch>> {
        if let Some(delta) = self.take_delta(codec)? {
            self.layers.queue(delta);
        }
        let emitted = self.emitted.clone();
        let mut parts = self.layers.capture(
            1,
            Box::new(move |base: &mut ScopeBase| {
                Ok(vec![base.snapshot_batches(emitted.as_deref(), &extra)?])
            }),
        );
        parts
            .pop()
            .ok_or_else(|| EngineError::Internal("a capture without its part".into()))
    }

    /// Merge everything into the base and run `read` on its accumulators
    /// (groups `0..len`, in group-index order). Captures still unbuilt are
    /// built first, since they must not see what is merged now.
    fn with_base_state<T>(
        &mut self,
        codec: &KeyCodec,
        read: impl FnOnce(&mut Segments) -> Result<T>,
    ) -> Result<T> {
        if let Some(delta) = self.take_delta(codec)? {
            self.layers.queue(delta);
        }
        self.layers.with_latest(|base| read(base.accumulators()?))
    }

    /// Rebuild a scope from a [`ScopeSnapshot`] (what a capture builds).
    pub fn restore(
        codec: &KeyCodec,
        funcs: &AggregateFunctions,
        nkeys: usize,
        snap: &ScopeSnapshot,
    ) -> Result<Self> {
        let n = snap.batch.num_rows();
        let cols = snap.batch.columns();
        let key_cols = cols.get(..nkeys).ok_or_else(|| {
            EngineError::Internal("aggregate snapshot is missing key columns".into())
        })?;
        let keys = codec.encode(key_cols, n)?;
        let mut groups = GroupTable::new(codec);
        let mut idx = Vec::new();
        groups.intern(&keys, None, &mut idx);
        let len = groups.len();
        let mut accs = Segments::new(funcs, CHUNK)?;
        let mut off = nkeys;
        let mut states = Vec::with_capacity(snap.widths.len());
        for w in &snap.widths {
            let end = off + w;
            let state = cols.get(off..end).ok_or_else(|| {
                EngineError::Internal("aggregate snapshot is missing state columns".into())
            })?;
            states.push(Some(state.to_vec()));
            off = end;
        }
        accs.merge(&states, &idx, len)?;
        let mut scope = Self::with_base(
            codec,
            funcs,
            ScopeBase::new(funcs, accs, key_cols.to_vec(), len)?,
        )?;
        scope.groups = groups;
        scope.live_only = len == 0;
        scope.keys_decoded = len;
        if let Some(emitted) = snap.emitted_len {
            scope.emitted = Some(cols[off..].iter().map(|c| c.slice(0, emitted)).collect());
        }
        scope.touched = vec![false; len];
        Ok(scope)
    }

    /// Whether any group changed since the last [`Self::changes`].
    pub fn is_touched(&self) -> bool {
        self.any_touched
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Final values of every group, consuming the scope: (keys, aggregates).
    pub fn finish(mut self, codec: &KeyCodec) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>, usize)> {
        let n = self.groups.len();
        let all: Vec<usize> = (0..n).collect();
        let keys = self.groups.decode(codec, &all)?;
        let values = if self.live_only {
            self.live.evaluate()?
        } else {
            self.with_base_state(codec, Segments::evaluate)?
        };
        Ok((keys, values, n))
    }

    /// Current values of all groups without consuming state.
    fn current_values(&mut self, codec: &KeyCodec) -> Result<Vec<ArrayRef>> {
        let n = self.groups.len();
        if self.live_only {
            self.live.current_values(n)
        } else {
            self.with_base_state(codec, |accs| accs.current_values(n))
        }
    }

    /// The changelog since the last call: for each touched group, a
    /// retraction of its previously emitted row (if any) and an insert of its
    /// current row. Returns (keys, aggregates, kinds), retractions first, or
    /// None if nothing changed.
    pub fn changes(&mut self, codec: &KeyCodec) -> Result<Option<Changes>> {
        if !self.any_touched {
            return Ok(None);
        }
        let current = self.current_values(codec)?;
        let prev_len = self
            .emitted
            .as_ref()
            .map_or(0, |e| e.first().map_or(0, |a| a.len()));
        let touched: Vec<usize> = (0..self.groups.len())
            .filter(|g| self.touched[*g])
            .collect();
        let retract: Vec<usize> = touched.iter().copied().filter(|g| *g < prev_len).collect();
        let mut key_idx = retract.clone();
        key_idx.extend(&touched);
        let keys = self.groups.decode(codec, &key_idx)?;
        let retract_idx = UInt32Array::from(retract.iter().map(|g| *g as u32).collect::<Vec<_>>());
        let insert_idx = UInt32Array::from(touched.iter().map(|g| *g as u32).collect::<Vec<_>>());
        let mut values = Vec::with_capacity(current.len());
        for (i, cur) in current.iter().enumerate() {
            let new_part = take(cur.as_ref(), &insert_idx, None)?;
            let col = match &self.emitted {
                Some(prev) if !retract.is_empty() => {
                    let old_part = take(prev[i].as_ref(), &retract_idx, None)?;
                    arrow::compute::concat(&[old_part.as_ref(), new_part.as_ref()])?
                }
                _ => new_part,
            };
            values.push(col);
        }
        let mut kinds = vec![Op::Retract; retract.len()];
        kinds.extend(std::iter::repeat_n(Op::Insert, touched.len()));
        self.emitted = Some(current);
        self.touched.iter_mut().for_each(|t| *t = false);
        self.any_touched = false;
        Ok(Some((keys, values, kinds)))
    }
}

#[cfg(test)]
mod tests;
