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
use arrow::compute::{filter_record_batch, interleave, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::expr::{eval, eval_predicate, PhysExpr};
use super::stateful::{no_such_port, Port, StatefulOperator, LEFT, RIGHT};
use crate::error::{EngineError, Result};
use crate::state::{SnapshotReader, SnapshotWriter};

/// When rows of a side may be forgotten: `(value, other side's lag,
/// strict)`; see `sluice_sql::plan::JoinStateBound`.
pub type SideBound = (PhysExpr, i64, bool);

/// A row's key in Arrow's row format; keys of one or two numbers fit
/// inline, so keeping a row allocates nothing for its key.
type Key = SmallVec<[u8; 16]>;

/// The kept rows with one key, as (batch, row); most keys of a join on an
/// id have one row.
type Hits = SmallVec<[(u32, u32); 1]>;

/// One side's kept rows and their key index.
struct Side {
    keys: Vec<PhysExpr>,
    schema: SchemaRef,
    bounds: Vec<SideBound>,
    /// Kept batches; None once dropped.
    batches: Vec<Option<RecordBatch>>,
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

impl Side {
    fn rows(&self) -> usize {
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
    fn encode(&self, converter: &RowConverter, batch: &RecordBatch) -> Result<Vec<Option<Key>>> {
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

    fn keep(&mut self, batch: RecordBatch, keys: Vec<Option<Key>>) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
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
    /// entries point at dropped batches.
    fn evict(&mut self, watermark: i64) -> Result<()> {
        for i in 0..self.batches.len() {
            if self.batches[i].is_some() && self.expiry[i] <= watermark {
                self.batches[i] = None;
                self.live_entries -= self.entries[i];
                self.dead_entries += self.entries[i];
            }
        }
        if self.dead_entries > self.live_entries {
            self.compact();
        }
        Ok(())
    }

    /// Remove dropped batches and their index entries, renumbering the rest.
    fn compact(&mut self) {
        let mut remap = vec![u32::MAX; self.batches.len()];
        let (mut batches, mut expiry, mut entries) = (Vec::new(), Vec::new(), Vec::new());
        for (i, b) in self.batches.drain(..).enumerate() {
            if let Some(b) = b {
                remap[i] = batches.len() as u32;
                batches.push(Some(b));
                expiry.push(self.expiry[i]);
                entries.push(self.entries[i]);
            }
        }
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

    fn clear(&mut self) {
        self.batches.clear();
        self.expiry.clear();
        self.entries.clear();
        self.index.clear();
        self.live_entries = 0;
        self.dead_entries = 0;
    }

    /// Columns of the kept rows at `at`, in order.
    fn gather(&self, at: &[(usize, usize)]) -> Result<Vec<ArrayRef>> {
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
        let side = |(keys, schema, bounds): (Vec<PhysExpr>, SchemaRef, Vec<SideBound>)| Side {
            keys,
            schema,
            bounds,
            batches: Vec::new(),
            expiry: Vec::new(),
            entries: Vec::new(),
            live_entries: 0,
            dead_entries: 0,
            index: FxHashMap::default(),
        };
        Ok(Self {
            converter: RowConverter::new(key_types.into_iter().map(SortField::new).collect())?,
            left: side(left),
            right: side(right),
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
        let mut mine: Vec<u32> = Vec::new();
        let mut theirs: Vec<(usize, usize)> = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            let Some(hits) = key.as_ref().and_then(|k| other.index.get(k)) else {
                continue;
            };
            for (b, r) in hits {
                if other.batches[*b as usize].is_none() {
                    continue;
                }
                mine.push(row as u32);
                theirs.push((*b as usize, *r as usize));
            }
        }
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
        side.keep(batch, keys)?;
        Ok(joined.into_iter().collect())
    }

    /// Forget the rows no future row can match at `watermark`; emits
    /// nothing (pairs are emitted by [`Self::update`]).
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        self.left.evict(watermark)?;
        self.right.evict(watermark)?;
        Ok(vec![])
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
        for (side, batch) in [(&mut self.left, left), (&mut self.right, right)] {
            side.clear();
            let batch = RecordBatch::try_new(Arc::clone(&side.schema), batch.columns().to_vec())?;
            let keys = side.encode(&self.converter, &batch)?;
            side.keep(batch, keys)?;
        }
        Ok(())
    }
}
