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
//! in time proportional to the delta.

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::ScopeSnapshot;
use crate::error::Result;
use crate::operators::groups::{KeyCodec, KeyRows};
use crate::state::layers::Base;

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
    accs: Vec<Box<dyn GroupsAccumulator>>,
    /// Key columns in group-index order, as chunks (one per delta) that a
    /// copy concatenates.
    key_chunks: Vec<Vec<ArrayRef>>,
    /// Number of groups.
    len: usize,
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
            for (acc, mut live) in self.accs.iter_mut().zip(delta.live) {
                let state = live.state(EmitTo::All)?;
                acc.merge_batch(&state, &groups, delta.total)?;
            }
        }
        self.len = delta.total;
        Ok(())
    }
}

impl ScopeBase {
    /// A base over `accs` (fresh, or holding `len` restored groups whose
    /// keys are `keys`).
    pub fn new(accs: Vec<Box<dyn GroupsAccumulator>>, keys: Vec<ArrayRef>, len: usize) -> Self {
        Self {
            accs,
            key_chunks: vec![keys],
            len,
        }
    }

    /// The accumulators, over groups `0..len` in group-index order.
    pub fn accumulators(&mut self) -> &mut [Box<dyn GroupsAccumulator>] {
        &mut self.accs
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
    /// accumulators are left as they were.
    pub fn snapshot_batch(
        &mut self,
        emitted: Option<&[ArrayRef]>,
        extra: &[(String, String)],
    ) -> Result<RecordBatch> {
        let n = self.len;
        let mut cols = self.keys()?;
        let all: Vec<usize> = (0..n).collect();
        let mut widths = Vec::with_capacity(self.accs.len());
        for acc in self.accs.iter_mut() {
            let state = acc.state(EmitTo::All)?;
            acc.merge_batch(&state, &all, n)?;
            widths.push(state.len());
            cols.extend(state);
        }
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
