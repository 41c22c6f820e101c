//! The inner equi-join of two append-only inputs (a symmetric hash join).
//!
//! Each side keeps every row it has seen, indexed by its key (Arrow's row
//! format of the key expressions). In a cycle, the left side's new batches
//! first probe the right side's rows from earlier cycles and are then kept;
//! the right side's new batches then probe every kept left row, this
//! cycle's included. Every matching pair is produced exactly once, and
//! since both inputs only append, so does the join. Rows whose key has a
//! NULL never match.
//!
//! State is bounded by event time where the condition allows it (see
//! `sluice_sql::bounds`): a kept batch is dropped once the watermark has
//! passed the bound of every row in it, and the key index is rebuilt when
//! dropped entries outnumber live ones. A join with no such bound keeps
//! every row.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, interleave, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::expr::{eval, eval_predicate, PhysExpr};
use super::stateful::{no_such_port, Port, StatefulOperator, LEFT, RIGHT};
use crate::error::{EngineError, Result};
use crate::partition::placement::VnodePlacement;
use crate::state::{SnapshotReader, SnapshotWriter};

/// When rows of a side may be forgotten: `(value, other side's lag,
/// strict)`; see `sluice_sql::plan::JoinStateBound`.
pub type SideBound = (PhysExpr, i64, bool);

/// A row's key in Arrow's row format; keys of one or two numbers fit
/// inline, so keeping a row allocates nothing for its key.
pub(crate) type Key = SmallVec<[u8; 16]>;

/// The kept rows with one key, as (batch, row); most keys of a join on an
/// id have one row.
type Hits = SmallVec<[(u32, u32); 1]>;

/// One side's kept rows and their key index (shared with the outer join,
/// `super::outer_join`, which also tracks which kept rows have matched).
pub(crate) struct Side {
    keys: Vec<PhysExpr>,
    pub(crate) schema: SchemaRef,
    bounds: Vec<SideBound>,
    /// Kept batches; None once dropped.
    pub(crate) batches: Vec<Option<RecordBatch>>,
    /// Per kept batch, per row, whether the row has matched; maintained
    /// only when `track` (an outer join's preserved side).
    pub(crate) matched: Vec<Vec<bool>>,
    track: bool,
    /// Per batch, the watermark at which all its rows can go.
    expiry: Vec<i64>,
    /// Per batch, its index entries.
    entries: Vec<usize>,
    live_entries: usize,
    dead_entries: usize,
    /// Key bytes to (batch, row) of every kept row with that key.
    index: FxHashMap<Key, Hits>,
}

/// The join operator's state and compiled expressions.
pub struct HashJoin {
    converter: RowConverter,
    left: Side,
    right: Side,
    filter: Option<PhysExpr>,
    schema: SchemaRef,
}

impl std::fmt::Debug for HashJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HashJoin({} left rows, {} right rows)",
            self.left.rows(),
            self.right.rows()
        )
    }
}

/// A dropped batch of a tracked side and which of its rows matched.
pub(crate) type Dropped = (RecordBatch, Vec<bool>);

/// Pairs of new rows (by row) and kept rows (by batch, row) with equal keys.
pub(crate) type Candidates = (Vec<u32>, Vec<(usize, usize)>);

impl Side {
    /// An empty side; `track` keeps per-row match flags.
    pub(crate) fn new(
        (keys, schema, bounds): (Vec<PhysExpr>, SchemaRef, Vec<SideBound>),
        track: bool,
    ) -> Self {
        Side {
            keys,
            schema,
            bounds,
            batches: Vec::new(),
            matched: Vec::new(),
            track,
            expiry: Vec::new(),
            entries: Vec::new(),
            live_entries: 0,
            dead_entries: 0,
            index: FxHashMap::default(),
        }
    }

    /// Whether the side keeps per-row match flags.
    pub(crate) fn tracks(&self) -> bool {
        self.track
    }

    pub(crate) fn rows(&self) -> usize {
        self.batches
            .iter()
            .flatten()
            .map(RecordBatch::num_rows)
            .sum()
    }

    /// The watermark from which every row of `batch` can be forgotten.
    fn expiry_of(&self, batch: &RecordBatch) -> Result<i64> {
        let mut expiry = i64::MAX;
        for (expr, lag, strict) in &self.bounds {
            let values =
                crate::operators::expr::event_time_ms(&eval(expr, batch)?, &expr.to_string())?;
            if values.null_count() > 0 {
                continue;
            }
            let Some(max) = arrow::compute::max(&values) else {
                continue;
            };
            let at = max.saturating_add(*lag).saturating_add(i64::from(!strict));
            expiry = expiry.min(at);
        }
        Ok(expiry)
    }

    /// Key bytes of every row of `batch`, None where a key is NULL.
    pub(crate) fn encode(
        &self,
        converter: &RowConverter,
        batch: &RecordBatch,
    ) -> Result<Vec<Option<Key>>> {
        let cols: Vec<ArrayRef> = self
            .keys
            .iter()
            .map(|k| eval(k, batch))
            .collect::<Result<_>>()?;
        let rows = converter.convert_columns(&cols)?;
        Ok((0..batch.num_rows())
            .map(|i| {
                let null = cols.iter().any(|c| c.is_null(i));
                (!null).then(|| Key::from_slice(rows.row(i).as_ref()))
            })
            .collect())
    }

    /// Keep `batch`, with its rows' match flags when the side tracks them
    /// (None: none matched yet).
    pub(crate) fn keep(
        &mut self,
        batch: RecordBatch,
        keys: Vec<Option<Key>>,
        matched: Option<Vec<bool>>,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.track {
            self.matched
                .push(matched.unwrap_or_else(|| vec![false; batch.num_rows()]));
        }
        let b = self.batches.len() as u32;
        let mut entries = 0;
        for (row, key) in keys.into_iter().enumerate() {
            if let Some(key) = key {
                self.index.entry(key).or_default().push((b, row as u32));
                entries += 1;
            }
        }
        self.expiry.push(self.expiry_of(&batch)?);
        self.entries.push(entries);
        self.live_entries += entries;
        self.batches.push(Some(batch));
        Ok(())
    }

    /// Drop the batches the watermark has passed; rebuild when most index
    /// entries point at dropped batches. Returns the dropped batches with
    /// their match flags when the side tracks them (else nothing).
    pub(crate) fn evict(&mut self, watermark: i64) -> Result<Vec<Dropped>> {
        let mut dropped = Vec::new();
        for i in 0..self.batches.len() {
            if self.batches[i].is_some() && self.expiry[i] <= watermark {
                if let Some(b) = self.batches[i].take() {
                    if self.track {
                        dropped.push((b, std::mem::take(&mut self.matched[i])));
                    }
                }
                self.live_entries -= self.entries[i];
                self.dead_entries += self.entries[i];
            }
        }
        if self.dead_entries > self.live_entries {
            self.compact();
        }
        Ok(dropped)
    }

    /// Remove dropped batches and their index entries, renumbering the rest.
    fn compact(&mut self) {
        let mut remap = vec![u32::MAX; self.batches.len()];
        let (mut batches, mut expiry, mut entries) = (Vec::new(), Vec::new(), Vec::new());
        let mut matched = Vec::new();
        for (i, b) in self.batches.drain(..).enumerate() {
            if let Some(b) = b {
                remap[i] = batches.len() as u32;
                batches.push(Some(b));
                expiry.push(self.expiry[i]);
                entries.push(self.entries[i]);
                if self.track {
                    matched.push(std::mem::take(&mut self.matched[i]));
                }
            }
        }
        self.matched = matched;
        self.index.retain(|_, hits| {
            hits.retain_mut(|(b, _)| match remap[*b as usize] {
                u32::MAX => false,
                n => {
                    *b = n;
                    true
                }
            });
            !hits.is_empty()
        });
        self.batches = batches;
        self.expiry = expiry;
        self.entries = entries;
        self.dead_entries = 0;
    }

    pub(crate) fn clear(&mut self) {
        self.batches.clear();
        self.matched.clear();
        self.expiry.clear();
        self.entries.clear();
        self.index.clear();
        self.live_entries = 0;
        self.dead_entries = 0;
    }

    /// The kept rows whose key equals a row's of a new batch (`keys`, from
    /// [`Self::encode`] of the other side): (new row, kept row) pairs.
    pub(crate) fn candidates(&self, keys: &[Option<Key>]) -> Candidates {
        let mut mine: Vec<u32> = Vec::new();
        let mut theirs: Vec<(usize, usize)> = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            let Some(hits) = key.as_ref().and_then(|k| self.index.get(k)) else {
                continue;
            };
            for (b, r) in hits {
                if self.batches[*b as usize].is_none() {
                    continue;
                }
                mine.push(row as u32);
                theirs.push((*b as usize, *r as usize));
            }
        }
        (mine, theirs)
    }

    /// Columns of the kept rows at `at`, in order.
    pub(crate) fn gather(&self, at: &[(usize, usize)]) -> Result<Vec<ArrayRef>> {
        (0..self.schema.fields().len())
            .map(|c| {
                let empty = arrow::array::new_empty_array(self.schema.field(c).data_type());
                let cols: Vec<&dyn Array> = self
                    .batches
                    .iter()
                    .map(|b| b.as_ref().map_or(empty.as_ref(), |b| b.column(c).as_ref()))
                    .collect();
                Ok(interleave(&cols, at)?)
            })
            .collect()
    }
}

/// The converter of a join's key columns to Arrow's row format.
pub(crate) fn key_converter(key_types: Vec<arrow::datatypes::DataType>) -> Result<RowConverter> {
    Ok(RowConverter::new(
        key_types.into_iter().map(SortField::new).collect(),
    )?)
}

impl HashJoin {
    /// A join with the given key expressions per side (same types, in
    /// pairs), residual filter over the joined row, and output schema.
    pub fn new(
        left: (Vec<PhysExpr>, SchemaRef, Vec<SideBound>),
        right: (Vec<PhysExpr>, SchemaRef, Vec<SideBound>),
        key_types: Vec<arrow::datatypes::DataType>,
        filter: Option<PhysExpr>,
        schema: SchemaRef,
    ) -> Result<Self> {
        Ok(Self {
            converter: key_converter(key_types)?,
            left: Side::new(left, false),
            right: Side::new(right, false),
            filter,
            schema,
        })
    }

    /// Pairs of `batch` (new rows of the left side when `from_left`) with
    /// the other side's kept rows.
    fn probe(
        &self,
        batch: &RecordBatch,
        keys: &[Option<Key>],
        from_left: bool,
    ) -> Result<Option<RecordBatch>> {
        let other = if from_left { &self.right } else { &self.left };
        let (mine, theirs) = other.candidates(keys);
        if mine.is_empty() {
            return Ok(None);
        }
        let idx = UInt32Array::from(mine);
        let new_cols: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<_, _>>()?;
        let kept_cols = other.gather(&theirs)?;
        let cols = if from_left {
            new_cols.into_iter().chain(kept_cols).collect()
        } else {
            kept_cols.into_iter().chain(new_cols).collect()
        };
        let joined = RecordBatch::try_new(Arc::clone(&self.schema), cols)?;
        let joined = match &self.filter {
            Some(f) => filter_record_batch(&joined, &eval_predicate(f, &joined)?)?,
            None => joined,
        };
        Ok((joined.num_rows() > 0).then_some(joined))
    }
}

impl StatefulOperator for HashJoin {
    fn kind(&self) -> &'static str {
        "join"
    }

    /// Join a batch of new rows of one side ([`LEFT`] or [`RIGHT`]) with
    /// the other side's kept rows, then keep it. Returns the new pairs that
    /// pass the join filter (final: both inputs only append). The driver
    /// feeds a cycle's left batches before its right ones, so a pair of two
    /// new rows is produced once, by the right row.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        let from_left = match port {
            LEFT => true,
            RIGHT => false,
            _ => return Err(no_such_port(self.kind(), port)),
        };
        let side = if from_left { &self.left } else { &self.right };
        let keys = side.encode(&self.converter, &batch)?;
        let joined = self.probe(&batch, &keys, from_left)?;
        let side = if from_left {
            &mut self.left
        } else {
            &mut self.right
        };
        side.keep(batch, keys, None)?;
        Ok(joined.into_iter().collect())
    }

    /// Forget the rows no future row can match at `watermark`; emits
    /// nothing (pairs are emitted by [`Self::update`]).
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        self.left.evict(watermark)?;
        self.right.evict(watermark)?;
        Ok(vec![])
    }

    fn held_rows(&self) -> Option<usize> {
        Some(self.left.rows() + self.right.rows())
    }

    /// Write both sides' kept rows.
    fn snapshot(&mut self, w: &mut SnapshotWriter) -> Result<()> {
        // Kept batches are shared, not copied; the tail concatenates them.
        for side in [&self.left, &self.right] {
            let kept: Vec<RecordBatch> = side.batches.iter().flatten().cloned().collect();
            w.push_deferred(crate::state::ConcatLater::new(
                Arc::clone(&side.schema),
                kept,
            ));
        }
        Ok(())
    }

    /// Restore both sides from a snapshot, rebuilding the key indexes.
    fn restore(&mut self, r: &SnapshotReader) -> Result<()> {
        let [left, right] = r.parts() else {
            return Err(EngineError::Internal(format!(
                "join snapshot has {} parts, expected 2",
                r.parts().len()
            )));
        };
        self.restore_sides(left, right)
    }

    /// Each side's rows whose key is of `keep`'s vnodes, from every old
    /// owner's kept rows.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let sides = [
            (&self.left, Arc::clone(&self.left.schema)),
            (&self.right, Arc::clone(&self.right.schema)),
        ];
        let [left, right] = moved_parts(snaps, sides, keep, self.kind())?;
        self.restore_sides(&left, &right)
    }
}

impl HashJoin {
    /// Both sides from their snapshot parts, rebuilding the key indexes.
    fn restore_sides(&mut self, left: &RecordBatch, right: &RecordBatch) -> Result<()> {
        for (side, batch) in [(&mut self.left, left), (&mut self.right, right)] {
            side.clear();
            let batch = RecordBatch::try_new(Arc::clone(&side.schema), batch.columns().to_vec())?;
            let keys = side.encode(&self.converter, &batch)?;
            side.keep(batch, keys, None)?;
        }
        Ok(())
    }
}

/// Each side's snapshot part, `[left, right]`, holding the rows of every
/// one of `snaps` whose key is of `keep`'s vnodes (the old owners' parts
/// concatenated; empty with no snapshot). Each side is given with the
/// schema of its part: its rows (the columns of `side.schema`) and, past
/// them, any per-row columns the operator keeps (an outer join's match
/// flags), which are kept with their rows. `kind` names the operator in
/// errors.
pub(crate) fn moved_parts(
    snaps: &[SnapshotReader],
    sides: [(&Side, SchemaRef); 2],
    keep: &VnodePlacement,
    kind: &str,
) -> Result<[RecordBatch; 2]> {
    let damaged = |what: String| EngineError::Internal(format!("moving {kind} state: {what}"));
    let part = |i: usize, (side, schema): (&Side, SchemaRef)| -> Result<RecordBatch> {
        let width = side.schema.fields().len();
        let mut kept = Vec::with_capacity(snaps.len());
        for snap in snaps {
            let part = match snap.parts() {
                [left, right] => [left, right][i],
                parts => return Err(damaged(format!("{} parts, expected 2", parts.len()))),
            };
            let columns = part
                .columns()
                .get(..width)
                .ok_or_else(|| damaged(format!("a part has {} columns", part.num_columns())))?;
            let rows = RecordBatch::try_new(Arc::clone(&side.schema), columns.to_vec())?;
            let mask = owned_mask(&side.keys, &rows, keep, kind)?;
            let owned = filter_record_batch(part, &mask)?;
            kept.push(RecordBatch::try_new(
                Arc::clone(&schema),
                owned.columns().to_vec(),
            )?);
        }
        Ok(concat_batches(&schema, &kept)?)
    };
    let [left, right] = sides;
    Ok([part(0, left)?, part(1, right)?])
}

/// Which rows of `rows` have a key (`keys` evaluated over them, as the
/// exchange in front of the operator routes them) of `keep`'s vnodes.
/// `kind` names the operator in errors.
pub(crate) fn owned_mask(
    keys: &[PhysExpr],
    rows: &RecordBatch,
    keep: &VnodePlacement,
    kind: &str,
) -> Result<arrow::array::BooleanArray> {
    let values = keys
        .iter()
        .map(|k| eval(k, rows))
        .collect::<Result<Vec<_>>>()?;
    keep.rows_owned(&values, rows.num_rows())
        .map_err(|e| EngineError::Internal(format!("moving {kind} state: {e}")))
}
