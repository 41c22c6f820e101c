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
//! [`BaseState`]). Every set of accumulators here is cut into
//! [`Segments`] of one chunk each, so that no step of a tail drains more
//! than a chunk of groups at once.

use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::{interleave, take};
use arrow::record_batch::RecordBatch;
use arrow::row::Rows;
use datafusion::logical_expr::EmitTo;

use super::segments::{gather, Segments, States};
use super::ScopeSnapshot;
use crate::error::{EngineError, Result};
use crate::operators::groups::{AggregateFunctions, KeyCodec};
use crate::state::layers::Base;
use crate::state::pace;

/// The live layer at one moment, handed to the base as it is: taking it
/// moves the accumulators, so a capture does not touch their state.
pub(super) struct Delta {
    /// Global group index of each local index.
    pub groups: DeltaGroups,
    /// Accumulators over the local indices.
    pub live: Segments,
    /// Key columns of the groups created since the previous delta, in
    /// chunks, in group-index order.
    pub new_keys: Vec<Vec<ArrayRef>>,
    /// Every key so far, still encoded, with a codec to decode them (the
    /// first delta only: the group table's keys, frozen and shared, so the
    /// compute thread neither copies nor decodes them). Comes before
    /// `new_keys`.
    pub encoded_keys: Option<(Arc<Rows>, KeyCodec)>,
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
    /// Key columns in group-index order (see [`KeyChunks`]).
    keys: KeyChunks,
    /// Number of groups.
    len: usize,
    /// Groups per chunk of the frozen state, of the keys, of the
    /// snapshot's batches and per segment of the accumulators: [`CHUNK`],
    /// smaller in tests.
    pub(super) chunk: usize,
}

/// Groups per chunk of a frozen base: the most a checkpoint tail copies,
/// merges or emits between two pace points (see `state::pace`) while it
/// builds a scope's snapshot, whatever the scope's size. At 65,536 groups
/// a chunk of a few state columns is a few megabytes: a few milliseconds of
/// work.
pub(super) const CHUNK: usize = 65_536;

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
///
/// The frozen arrays are kept in chunks of [`ScopeBase::chunk`] groups, so
/// that merging a delta rebuilds each chunk on its own (a chunk no group of
/// the delta falls in is kept as it is, shared), and no step of a
/// checkpoint tail copies a whole column at once.
enum BaseState {
    /// Accumulators over groups `0..len`, in segments of `chunk` groups.
    Live(Segments),
    /// Chunk `i` holds groups `i * chunk ..` (at least one chunk, so an
    /// empty base still knows its state's types).
    Frozen(Vec<FrozenChunk>),
}

/// Every aggregate's state columns over one chunk of groups (immutable;
/// snapshots share them).
#[derive(Clone)]
struct FrozenChunk {
    /// Per aggregate, its state columns.
    states: Vec<Vec<ArrayRef>>,
    /// Groups in the chunk.
    len: usize,
}

/// Key columns in chunks aligned with the frozen state's: `full` chunks of
/// exactly `chunk` rows, then the pieces of the last, partial one, which
/// are concatenated when the chunk fills up or a snapshot needs it. A key
/// is copied at most twice however many snapshots are taken.
struct KeyChunks {
    /// Number of key columns (0 for a scope without keys: nothing stored).
    width: usize,
    /// The key columns with no rows (the chunk of an empty scope).
    empty: Vec<ArrayRef>,
    full: Vec<Vec<ArrayRef>>,
    partial: Vec<Vec<ArrayRef>>,
    /// Rows in `partial`.
    partial_rows: usize,
}

impl KeyChunks {
    fn rows(&self, chunk: usize) -> usize {
        self.full.len() * chunk + self.partial_rows
    }

    /// Append key columns (`width` of them, all of one length).
    fn push(&mut self, cols: &[ArrayRef], chunk: usize) -> Result<()> {
        if self.width == 0 {
            return Ok(());
        }
        let rows = cols.first().map_or(0, |c| c.len());
        let mut at = 0;
        while at < rows {
            let take = (chunk - self.partial_rows).min(rows - at);
            self.partial
                .push(cols.iter().map(|c| c.slice(at, take)).collect());
            self.partial_rows += take;
            at += take;
            if self.partial_rows == chunk {
                let full = self.concat_partial()?;
                self.full.push(full);
            }
        }
        Ok(())
    }

    /// The partial chunk's pieces as one set of columns (emptying it).
    fn concat_partial(&mut self) -> Result<Vec<ArrayRef>> {
        let pieces = std::mem::take(&mut self.partial);
        self.partial_rows = 0;
        if pieces.len() == 1 {
            return Ok(pieces.into_iter().flatten().collect());
        }
        let out = (0..self.width)
            .map(|col| {
                let parts: Vec<&dyn arrow::array::Array> = pieces
                    .iter()
                    .filter_map(|p| p.get(col).map(|a| a.as_ref()))
                    .collect();
                Ok(arrow::compute::concat(&parts)?)
            })
            .collect::<Result<Vec<_>>>()?;
        pace::point();
        Ok(out)
    }

    /// The key columns of chunk `i` (empty for a scope without keys).
    fn chunk(&mut self, i: usize) -> Result<Vec<ArrayRef>> {
        if self.width == 0 {
            return Ok(Vec::new());
        }
        if let Some(full) = self.full.get(i) {
            return Ok(full.clone());
        }
        if i == 0 && self.partial.is_empty() {
            return Ok(self.empty.clone());
        }
        if i != self.full.len() || self.partial.is_empty() {
            return Err(EngineError::Internal(format!(
                "aggregate keys have no chunk {i}"
            )));
        }
        if self.partial.len() > 1 {
            let rows = self.partial_rows;
            let merged = self.concat_partial()?;
            self.partial = vec![merged];
            self.partial_rows = rows;
        }
        Ok(self.partial.first().cloned().unwrap_or_default())
    }
}

impl Base for ScopeBase {
    type Delta = Delta;

    fn absorb(&mut self, delta: Delta) -> Result<()> {
        if let Some((rows, codec)) = delta.encoded_keys {
            let n = rows.num_rows();
            // Decoded a chunk at a time: the first delta holds every key.
            for start in (0..n).step_by(self.chunk) {
                let cols =
                    codec.decode_rows((start..n.min(start + self.chunk)).map(|i| rows.row(i)))?;
                self.keys.push(&cols, self.chunk)?;
                pace::point();
            }
        }
        for cols in delta.new_keys.iter().filter(|c| !c.is_empty()) {
            self.keys.push(cols, self.chunk)?;
        }
        let groups = match delta.groups {
            DeltaGroups::Identity(n) => (0..n).collect(),
            DeltaGroups::Listed(g) => g,
        };
        if !groups.is_empty() {
            let old = self.len;
            match &mut self.state {
                // An empty base taking a delta of every group in order: the
                // delta's accumulators are the state.
                BaseState::Live(_)
                    if old == 0
                        && delta.live.size() == self.chunk
                        && is_identity(&groups, delta.total) =>
                {
                    self.state = BaseState::Live(delta.live);
                }
                BaseState::Live(accs) => {
                    // One delta segment at a time, older state first.
                    let mut live = delta.live;
                    let mut start = 0;
                    for (states, len) in live.drain(groups.len())? {
                        let states: Vec<_> = states.into_iter().map(Some).collect();
                        let at = groups.get(start..start + len).unwrap_or_default();
                        accs.merge(&states, at, delta.total)?;
                        start += len;
                        pace::point();
                    }
                }
                BaseState::Frozen(chunks) => {
                    let merge = Merge {
                        funcs: &self.funcs,
                        commutes: &self.commutes,
                        chunk: self.chunk,
                        old,
                        total: delta.total,
                    };
                    let merged = merge.run(chunks, delta.live, &groups)?;
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

/// Merging one delta into a frozen base (groups `0..old`, in chunks of
/// `chunk`), giving a frozen base over `0..total`.
struct Merge<'a> {
    funcs: &'a AggregateFunctions,
    commutes: &'a [bool],
    chunk: usize,
    old: usize,
    total: usize,
}

impl Merge<'_> {
    /// Merge the delta (accumulators `live` over local groups, local `i`
    /// being global `groups[i]`) into `chunks`.
    ///
    /// Where an aggregate's merge commutes, the older state of the changed
    /// groups is merged into the delta's own accumulator (reusing its
    /// memory), which is then drained once. Otherwise the delta is drained
    /// first, and each chunk's changed groups go through a fresh
    /// accumulator, older state first, so order-sensitive states keep
    /// their order. Either way each output chunk is then spliced from the
    /// old chunk's unchanged rows and the merged rows. Every step works on
    /// one chunk of the base or one segment of the delta (see
    /// [`Segments`]) and ends at a pace point.
    fn run(
        &self,
        chunks: &[FrozenChunk],
        mut live: Segments,
        groups: &[usize],
    ) -> Result<Vec<FrozenChunk>> {
        let n = groups.len();
        let buckets = self.buckets(groups)?;
        // Older state of the changed groups into the delta's accumulators
        // whose merge commutes, a chunk at a time.
        for (i, bucket) in buckets.iter().enumerate() {
            let (offsets, locals) = self.older(chunks, i, bucket);
            if offsets.is_empty() || !self.commutes.iter().any(|c| *c) {
                continue;
            }
            let at = UInt32Array::from(offsets);
            let chunk = chunks.get(i).ok_or_else(|| missing(i))?;
            let older = chunk
                .states
                .iter()
                .zip(self.commutes)
                .map(|(state, &c)| c.then(|| take_all(state, &at)).transpose())
                .collect::<Result<Vec<_>>>()?;
            live.merge(&older, &locals, n)?;
            pace::point();
        }
        // The delta's state, a segment at a time: merged where the merge
        // commutes, the delta's own otherwise.
        let size = live.size();
        let drained = live.drain(n)?;
        let mut out = Vec::with_capacity(buckets.len());
        for (i, bucket) in buckets.iter().enumerate() {
            out.push(self.chunk_after(chunks, i, bucket, &drained, size)?);
            pace::point();
        }
        Ok(out)
    }

    /// The delta's groups by output chunk: (offset in the chunk, local
    /// index), in local order. At least one chunk.
    fn buckets(&self, groups: &[usize]) -> Result<Vec<Vec<(usize, usize)>>> {
        let count = self.total.div_ceil(self.chunk).max(1);
        let mut buckets = vec![Vec::new(); count];
        for (local, &g) in groups.iter().enumerate() {
            let bucket = buckets.get_mut(g / self.chunk).ok_or_else(|| too_many(g))?;
            bucket.push((g % self.chunk, local));
            if local % self.chunk == self.chunk - 1 {
                pace::point();
            }
        }
        Ok(buckets)
    }

    /// Groups of output chunk `i`, and how many of them the old base has.
    fn lens(&self, i: usize) -> (usize, usize) {
        let start = i * self.chunk;
        let len = self.total.saturating_sub(start).min(self.chunk);
        let old = self.old.saturating_sub(start).min(self.chunk);
        (len, old)
    }

    /// The entries of `bucket` (chunk `i`) that the old base has: their
    /// offsets in the old chunk and their local indices.
    fn older(
        &self,
        chunks: &[FrozenChunk],
        i: usize,
        bucket: &[(usize, usize)],
    ) -> (Vec<u32>, Vec<usize>) {
        let old = chunks.get(i).map_or(0, |c| c.len).min(self.lens(i).1);
        bucket
            .iter()
            .filter(|(off, _)| *off < old)
            .map(|&(off, local)| (off as u32, local))
            .unzip()
    }

    /// Output chunk `i`: the old chunk's rows, with the rows of the
    /// delta's groups (`bucket`) replaced or added from `drained` (the
    /// delta's segments of `size` groups).
    fn chunk_after(
        &self,
        chunks: &[FrozenChunk],
        i: usize,
        bucket: &[(usize, usize)],
        drained: &[(States, usize)],
        size: usize,
    ) -> Result<FrozenChunk> {
        let (len, old) = self.lens(i);
        let before = chunks.get(i).filter(|c| c.len == old);
        if bucket.is_empty() {
            if let Some(same) = before.filter(|c| c.len == len) {
                return Ok(same.clone());
            }
        }
        if old > 0 && before.is_none() {
            return Err(missing(i));
        }
        // Order-sensitive aggregates: this chunk's changed groups through
        // fresh accumulators, older state first (local index `j` in the
        // bucket).
        let ordered = !self.commutes.iter().all(|c| *c);
        let mut fresh = if ordered && !bucket.is_empty() {
            self.funcs.accumulators()?
        } else {
            Vec::new()
        };
        let m = bucket.len();
        let (older_at, older_j): (Vec<u32>, Vec<usize>) = bucket
            .iter()
            .enumerate()
            .filter(|(_, (off, _))| *off < old)
            .map(|(j, &(off, _))| (off as u32, j))
            .unzip();
        let older_at = UInt32Array::from(older_at);
        let locals: Vec<usize> = bucket.iter().map(|&(_, l)| l).collect();
        let identity: Vec<usize> = (0..m).collect();
        // Where each bucket entry's row is: in the drained segments (by
        // segment and offset), or in a fresh accumulator's state (by
        // position in the bucket).
        let in_segments: Vec<(usize, usize)> =
            locals.iter().map(|&l| (l / size, l % size)).collect();
        let in_bucket: Vec<(usize, usize)> = (0..m).map(|k| (0, k)).collect();
        let mut states = Vec::with_capacity(self.commutes.len());
        for (a, &commutes) in self.commutes.iter().enumerate() {
            let before_state = before.and_then(|c| c.states.get(a));
            let merged;
            let (sources, rows): (Vec<&Vec<ArrayRef>>, &[(usize, usize)]) = if commutes || m == 0 {
                // Already merged: spliced straight from the segments.
                let sources = drained
                    .iter()
                    .map(|(s, _)| s.get(a).ok_or_else(|| missing(i)))
                    .collect::<Result<_>>()?;
                (sources, &in_segments)
            } else {
                let acc = fresh.get_mut(a).ok_or_else(|| missing(i))?;
                if !older_j.is_empty() {
                    let state = before_state.ok_or_else(|| missing(i))?;
                    acc.merge_batch(&take_all(state, &older_at)?, &older_j, m)?;
                }
                acc.merge_batch(&gather(drained, a, &locals, size)?, &identity, m)?;
                merged = acc.state(EmitTo::All)?;
                (vec![&merged], &in_bucket)
            };
            states.push(splice(before_state, old, &sources, bucket, rows, len)?);
        }
        Ok(FrozenChunk { states, len })
    }
}

/// `state`'s rows at `at`.
fn take_all(state: &[ArrayRef], at: &UInt32Array) -> Result<Vec<ArrayRef>> {
    state
        .iter()
        .map(|c| Ok(take(c.as_ref(), at, None)?))
        .collect()
}

/// A chunk of `len` rows: row `off` of the `k`-th entry `(off, _)` of
/// `bucket` is row `rows[k].1` of source `rows[k].0` (each source a set of
/// state columns), and every other row is `before`'s (which has `old`
/// rows). One copy of each row, whatever the number of sources.
fn splice(
    before: Option<&Vec<ArrayRef>>,
    old: usize,
    sources: &[&Vec<ArrayRef>],
    bucket: &[(usize, usize)],
    rows: &[(usize, usize)],
    len: usize,
) -> Result<Vec<ArrayRef>> {
    let mut from: Vec<(usize, usize)> = (0..old).map(|g| (0, g)).collect();
    from.resize(len, (usize::MAX, 0));
    for (&(off, _), &(source, row)) in bucket.iter().zip(rows) {
        let slot = from.get_mut(off).ok_or_else(|| too_many(off))?;
        *slot = (1 + source, row);
    }
    if let Some(g) = from.iter().position(|(src, _)| *src == usize::MAX) {
        return Err(EngineError::Internal(format!(
            "aggregate group {g} of a chunk was created but is missing from its delta"
        )));
    }
    let width = sources.first().map_or(0, |s| s.len());
    (0..width)
        .map(|c| {
            let mut arrays: Vec<&dyn arrow::array::Array> = Vec::with_capacity(1 + sources.len());
            for source in sources {
                let col = source.get(c).ok_or_else(|| {
                    EngineError::Internal(format!("aggregate state has no column {c}"))
                })?;
                arrays.push(col.as_ref());
            }
            let empty;
            let before = match before.and_then(|b| b.get(c)) {
                Some(b) => b.as_ref(),
                None => {
                    let data_type =
                        arrays
                            .first()
                            .map(|a| a.data_type().clone())
                            .ok_or_else(|| {
                                EngineError::Internal("an aggregate merge without a source".into())
                            })?;
                    empty = arrow::array::new_empty_array(&data_type);
                    empty.as_ref()
                }
            };
            arrays.insert(0, before);
            Ok(interleave(&arrays, &from)?)
        })
        .collect()
}

fn too_many(g: usize) -> EngineError {
    EngineError::Internal(format!("aggregate group index {g} is out of range"))
}

fn missing(i: usize) -> EngineError {
    EngineError::Internal(format!("a frozen aggregate base has no chunk {i}"))
}

impl ScopeBase {
    /// A base over `accs` (fresh, or holding `len` restored groups whose
    /// keys are `keys`), made by `funcs`, in chunks of `accs`' segment
    /// size.
    pub fn new(
        funcs: &AggregateFunctions,
        accs: Segments,
        keys: Vec<ArrayRef>,
        len: usize,
    ) -> Result<Self> {
        let chunk = accs.size();
        let mut key_chunks = KeyChunks {
            width: keys.len(),
            empty: keys.iter().map(|c| c.slice(0, 0)).collect(),
            full: Vec::new(),
            partial: Vec::new(),
            partial_rows: 0,
        };
        key_chunks.push(&keys, chunk)?;
        Ok(Self {
            state: BaseState::Live(accs),
            funcs: funcs.clone(),
            commutes: funcs.merge_commutes(),
            keys: key_chunks,
            len,
            chunk,
        })
    }

    /// Use chunks of `chunk` groups (tests: many chunks over few groups).
    /// Only an empty base changes its chunk size.
    #[cfg(test)]
    pub fn set_chunk(&mut self, chunk: usize) -> Result<()> {
        if self.len > 0 {
            return Err(EngineError::Internal(
                "the chunk size of a base with groups cannot change".into(),
            ));
        }
        self.chunk = chunk.max(1);
        self.state = BaseState::Live(Segments::new(&self.funcs, self.chunk)?);
        Ok(())
    }

    /// The accumulators, over groups `0..len` in group-index order (a
    /// frozen base thaws: its state is merged into fresh accumulators).
    pub fn accumulators(&mut self) -> Result<&mut Segments> {
        if let BaseState::Frozen(chunks) = &self.state {
            let accs = Segments::thaw(
                &self.funcs,
                self.chunk,
                chunks.iter().map(|c| (&c.states, c.len)),
            )?;
            self.state = BaseState::Live(accs);
        }
        match &mut self.state {
            BaseState::Live(accs) => Ok(accs),
            BaseState::Frozen(_) => Err(EngineError::Internal("a thawed base is frozen".into())),
        }
    }

    /// Each chunk's state columns (a live base is drained into them and
    /// stays frozen; the drained arrays are cut into chunks without a copy).
    fn frozen(&mut self) -> Result<&[FrozenChunk]> {
        if let BaseState::Live(accs) = &mut self.state {
            // A segment is a chunk: drained one at a time.
            let chunks = accs
                .drain(self.len)?
                .into_iter()
                .map(|(states, len)| FrozenChunk { states, len })
                .collect();
            self.state = BaseState::Frozen(chunks);
        }
        match &self.state {
            BaseState::Frozen(chunks) => Ok(chunks),
            BaseState::Live(_) => Err(EngineError::Internal("a frozen base is live".into())),
        }
    }

    /// The scope as snapshot batches of one chunk of groups each: every
    /// group's keys and intermediate state, then `emitted` (the last
    /// emitted values, changelog mode) padded to every group; `extra` goes
    /// into the schema metadata. The state is shared with the base, which
    /// stays frozen. A reader concatenates the batches (see
    /// `state::SnapshotReader`).
    pub fn snapshot_batches(
        &mut self,
        emitted: Option<&[ArrayRef]>,
        extra: &[(String, String)],
    ) -> Result<Vec<RecordBatch>> {
        let n = self.len;
        if self.keys.width > 0 && self.keys.rows(self.chunk) != n {
            return Err(EngineError::Internal(format!(
                "an aggregate base has {} keys for {n} groups",
                self.keys.rows(self.chunk)
            )));
        }
        let chunks = self.frozen()?.to_vec();
        let widths: Vec<usize> = chunks
            .first()
            .map(|c| c.states.iter().map(Vec::len).collect())
            .unwrap_or_default();
        let emitted_len = emitted.map(|e| e.first().map_or(0, |a| a.len()));
        let extra: Vec<(&str, String)> =
            extra.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let mut out = Vec::with_capacity(chunks.len());
        for (i, chunk) in chunks.iter().enumerate() {
            let start = i * self.chunk;
            let mut cols = self.keys.chunk(i)?;
            cols.extend(chunk.states.iter().flatten().cloned());
            if let (Some(prev), Some(elen)) = (emitted, emitted_len) {
                for a in prev {
                    cols.push(padded_slice(a, elen, start, chunk.len)?);
                }
            }
            let snap = ScopeSnapshot::from_columns(cols, chunk.len, widths.clone(), emitted_len)?;
            out.push(snap.to_batch(&extra)?);
        }
        Ok(out)
    }
}

/// Rows `start..start + len` of `a` (which has `alen` rows), padded with
/// nulls past its end.
fn padded_slice(a: &ArrayRef, alen: usize, start: usize, len: usize) -> Result<ArrayRef> {
    let have = alen.saturating_sub(start).min(len);
    let pad = arrow::array::new_null_array(a.data_type(), len - have);
    if have == 0 {
        return Ok(pad);
    }
    let head = a.slice(start, have);
    if have == len {
        return Ok(head);
    }
    Ok(arrow::compute::concat(&[head.as_ref(), pad.as_ref()])?)
}
