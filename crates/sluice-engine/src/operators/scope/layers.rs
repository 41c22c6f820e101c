//! The base layer of an aggregation scope (see [`crate::state::layers`]).
//!
//! The compute thread folds rows into *live* accumulators that hold only
//! the groups changed since the last delta, under dense local indices. A
//! delta is those accumulators themselves (moved out, not drained: taking
//! one costs the compute thread nothing per group), the global index of
//! each local group, and the keys of the groups created since the previous
//! delta. The base holds every group under its global index; merging a
//! delta (on whichever thread builds from the base) drains the delta's
//! accumulators and merges their state, one `merge_batch` per aggregate,
//! in time proportional to the delta. A snapshot leaves the base frozen as
//! Arrow arrays, so the next merge copies unchanged groups in bulk (see
//! [`BaseState`]).

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::{interleave, take};
use arrow::record_batch::RecordBatch;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::ScopeSnapshot;
use crate::error::{EngineError, Result};
use crate::operators::groups::{AggregateFunctions, KeyCodec, KeyRows};
use crate::state::layers::Base;
use crate::state::pace;

/// The live layer at one moment, handed to the base as it is: taking it
/// moves the accumulators, so a capture does not touch their state.
pub(super) struct Delta {
    /// Global group index of each local index.
    pub groups: DeltaGroups,
    /// Accumulators over the local indices.
    pub live: Vec<Box<dyn GroupsAccumulator>>,
    /// Key columns of the groups created since the previous delta, in
    /// chunks, in group-index order.
    pub new_keys: Vec<Vec<ArrayRef>>,
    /// Every key so far, still encoded, with a codec to decode them (the
    /// first delta: copying encoded rows is several times cheaper than
    /// decoding them on the compute thread). Comes before `new_keys`.
    pub encoded_keys: Option<(KeyRows, KeyCodec)>,
    /// Number of groups in the scope when the delta was taken.
    pub total: usize,
}

/// Which groups a delta's local indices stand for.
pub(super) enum DeltaGroups {
    /// Local index `i` is group `i`, for `0..n` (the live layer held every
    /// group since the scope began).
    Identity(usize),
    /// Local index `i` is group `groups[i]`.
    Listed(Vec<usize>),
}

/// Every group's accumulated state, as of the deltas merged so far.
pub(super) struct ScopeBase {
    state: BaseState,
    /// Makes fresh accumulators (to thaw a frozen base, or to merge a delta
    /// into it oldest first).
    funcs: AggregateFunctions,
    /// Per aggregate, whether its merge commutes (see
    /// [`AggregateFunctions::merge_commutes`]).
    commutes: Vec<bool>,
    /// Key columns in group-index order, as chunks (one per delta) that a
    /// copy concatenates.
    key_chunks: Vec<Vec<ArrayRef>>,
    /// Number of groups.
    len: usize,
}

/// The base's state in one of two forms.
///
/// A snapshot needs every group's state as Arrow arrays, and DataFusion's
/// accumulators only hand theirs out by draining. Putting the drained state
/// back (as the base once did after every snapshot) costs as much again:
/// for `MIN`/`MAX` over strings, an allocation per group. So a snapshot
/// leaves the base *frozen*, as the arrays it drained, and the next delta
/// is merged into those arrays ([`merge_into_frozen`]): only the changed
/// groups pass through an accumulator, and the rest are copied in bulk.
/// The base thaws back into accumulators only when results are read from
/// it.
enum BaseState {
    /// Accumulators over groups `0..len`.
    Live(Vec<Box<dyn GroupsAccumulator>>),
    /// Each accumulator's state columns over groups `0..len` (immutable;
    /// snapshots share them).
    Frozen(Vec<Vec<ArrayRef>>),
}

impl Base for ScopeBase {
    type Delta = Delta;

    fn absorb(&mut self, delta: Delta) -> Result<()> {
        if let Some((rows, codec)) = delta.encoded_keys {
            let n = match &rows {
                KeyRows::Rows(r) => r.num_rows(),
                KeyRows::Unit(_) => 0,
            };
            let all: Vec<usize> = (0..n).collect();
            self.key_chunks.push(codec.decode(&rows, &all)?);
        }
        self.key_chunks
            .extend(delta.new_keys.into_iter().filter(|c| !c.is_empty()));
        let groups = match delta.groups {
            DeltaGroups::Identity(n) => (0..n).collect(),
            DeltaGroups::Listed(g) => g,
        };
        if !groups.is_empty() {
            let old = self.len;
            match &mut self.state {
                // An empty base taking a delta of every group in order: the
                // delta's accumulators are the state.
                BaseState::Live(_) if old == 0 && is_identity(&groups, delta.total) => {
                    self.state = BaseState::Live(delta.live);
                }
                BaseState::Live(accs) => {
                    for (acc, mut live) in accs.iter_mut().zip(delta.live) {
                        let state = live.state(EmitTo::All)?;
                        acc.merge_batch(&state, &groups, delta.total)?;
                    }
                }
                BaseState::Frozen(states) => {
                    let fresh = self.funcs.accumulators()?;
                    let merged = states
                        .iter()
                        .zip(delta.live)
                        .zip(fresh)
                        .zip(&self.commutes)
                        .map(|(((state, live), fresh), &commutes)| {
                            let (acc, delta_after) = if commutes {
                                (live, None)
                            } else {
                                (fresh, Some(live))
                            };
                            merge_into_frozen(state, acc, delta_after, &groups, old, delta.total)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    self.state = BaseState::Frozen(merged);
                }
            }
        }
        self.len = delta.total;
        Ok(())
    }
}

/// Whether `groups` is `0..total` in order.
fn is_identity(groups: &[usize], total: usize) -> bool {
    groups.len() == total && groups.iter().enumerate().all(|(i, g)| i == *g)
}

/// One aggregate's frozen state (`state`, over groups `0..old`) with a
/// delta merged in: a new state over `0..total`.
///
/// `acc` is an accumulator over the delta's local groups (`groups[i]` is
/// local group `i`'s global index). When the merge commutes, `acc` is the
/// delta's own accumulator, and the older state of the changed groups is
/// merged into it. Otherwise `acc` is fresh: the older state goes in first,
/// then the delta's (`delta`), so order-sensitive states keep their order.
/// Unchanged groups are copied from `state` in bulk.
fn merge_into_frozen(
    state: &[ArrayRef],
    mut acc: Box<dyn GroupsAccumulator>,
    delta: Option<Box<dyn GroupsAccumulator>>,
    groups: &[usize],
    old: usize,
    total: usize,
) -> Result<Vec<ArrayRef>> {
    let n = groups.len();
    let (mut locals, mut globals) = (Vec::new(), Vec::new());
    for (local, &g) in groups.iter().enumerate() {
        if g < old {
            locals.push(local);
            globals.push(u32::try_from(g).map_err(|_| too_many(g))?);
        }
    }
    // In chunks, so a checkpoint tail can pace itself between them.
    for (locals, globals) in locals.chunks(MERGE_CHUNK).zip(globals.chunks(MERGE_CHUNK)) {
        let at = UInt32Array::from(globals.to_vec());
        let older = state
            .iter()
            .map(|c| Ok(take(c.as_ref(), &at, None)?))
            .collect::<Result<Vec<_>>>()?;
        acc.merge_batch(&older, locals, n)?;
        pace::point();
    }
    if let Some(mut delta) = delta {
        let newer = delta.state(EmitTo::All)?;
        let identity: Vec<usize> = (0..n).collect();
        acc.merge_batch(&newer, &identity, n)?;
        pace::point();
    }
    let merged = acc.state(EmitTo::All)?;
    pace::point();
    if is_identity(groups, total) {
        return Ok(merged);
    }
    // Each group's source: (0, g) unchanged, (1, local) merged.
    let mut from: Vec<(usize, usize)> = (0..old).map(|g| (0, g)).collect();
    from.resize(total, (usize::MAX, 0));
    for (local, &g) in groups.iter().enumerate() {
        let slot = from.get_mut(g).ok_or_else(|| too_many(g))?;
        *slot = (1, local);
    }
    if let Some(g) = from.iter().position(|(src, _)| *src == usize::MAX) {
        return Err(EngineError::Internal(format!(
            "aggregate group {g} was created but is missing from its delta"
        )));
    }
    state
        .iter()
        .zip(&merged)
        .map(|(before, after)| {
            let column = interleave(&[before.as_ref(), after.as_ref()], &from)?;
            pace::point();
            Ok(column)
        })
        .collect()
}

/// Groups whose older state is merged at a time (see [`merge_into_frozen`]).
const MERGE_CHUNK: usize = 65_536;

fn too_many(g: usize) -> EngineError {
    EngineError::Internal(format!("aggregate group index {g} is out of range"))
}

impl ScopeBase {
    /// A base over `accs` (fresh, or holding `len` restored groups whose
    /// keys are `keys`), made by `funcs`.
    pub fn new(
        funcs: &AggregateFunctions,
        accs: Vec<Box<dyn GroupsAccumulator>>,
        keys: Vec<ArrayRef>,
        len: usize,
    ) -> Self {
        Self {
            state: BaseState::Live(accs),
            funcs: funcs.clone(),
            commutes: funcs.merge_commutes(),
            key_chunks: vec![keys],
            len,
        }
    }

    /// The accumulators, over groups `0..len` in group-index order (a
    /// frozen base thaws: its state is merged into fresh accumulators).
    pub fn accumulators(&mut self) -> Result<&mut [Box<dyn GroupsAccumulator>]> {
        if let BaseState::Frozen(states) = &self.state {
            let mut accs = self.funcs.accumulators()?;
            let all: Vec<usize> = (0..self.len).collect();
            for (acc, state) in accs.iter_mut().zip(states) {
                acc.merge_batch(state, &all, self.len)?;
            }
            self.state = BaseState::Live(accs);
        }
        match &mut self.state {
            BaseState::Live(accs) => Ok(accs),
            BaseState::Frozen(_) => Err(EngineError::Internal("a thawed base is frozen".into())),
        }
    }

    /// Each accumulator's state columns (a live base is drained into them
    /// and stays frozen).
    fn frozen(&mut self) -> Result<&[Vec<ArrayRef>]> {
        if let BaseState::Live(accs) = &mut self.state {
            let states = accs
                .iter_mut()
                .map(|acc| Ok(acc.state(EmitTo::All)?))
                .collect::<Result<Vec<_>>>()?;
            self.state = BaseState::Frozen(states);
        }
        match &self.state {
            BaseState::Frozen(states) => Ok(states),
            BaseState::Live(_) => Err(EngineError::Internal("a frozen base is live".into())),
        }
    }

    /// Key columns of every group, in group-index order (chunks are
    /// concatenated once and kept that way).
    fn keys(&mut self) -> Result<Vec<ArrayRef>> {
        if self.key_chunks.len() > 1 {
            let width = self.key_chunks.first().map_or(0, Vec::len);
            let mut merged = Vec::with_capacity(width);
            for col in 0..width {
                let parts: Vec<&dyn arrow::array::Array> = self
                    .key_chunks
                    .iter()
                    .filter_map(|c| c.get(col).map(|a| a.as_ref()))
                    .collect();
                merged.push(arrow::compute::concat(&parts)?);
            }
            self.key_chunks = vec![merged];
        }
        Ok(self.key_chunks.first().cloned().unwrap_or_default())
    }

    /// The scope as one snapshot batch: every group's keys and intermediate
    /// state, then `emitted` (the last emitted values, changelog mode)
    /// padded to every group; `extra` goes into the schema metadata. The
    /// state is shared with the base, which stays frozen.
    pub fn snapshot_batch(
        &mut self,
        emitted: Option<&[ArrayRef]>,
        extra: &[(String, String)],
    ) -> Result<RecordBatch> {
        let n = self.len;
        let mut cols = self.keys()?;
        let states = self.frozen()?;
        let widths = states.iter().map(Vec::len).collect();
        cols.extend(states.iter().flatten().cloned());
        let emitted_len = match emitted {
            Some(prev) => {
                let len = prev.first().map_or(0, |a| a.len());
                for a in prev {
                    let pad = arrow::array::new_null_array(a.data_type(), n.saturating_sub(len));
                    cols.push(arrow::compute::concat(&[a.as_ref(), pad.as_ref()])?);
                }
                Some(len)
            }
            None => None,
        };
        let extra: Vec<(&str, String)> =
            extra.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        ScopeSnapshot::from_columns(cols, n, widths, emitted_len)?.to_batch(&extra)
    }
}
