//! `LEFT`, `RIGHT` and `FULL OUTER` equi-joins of two append-only inputs.
//!
//! The matching is the inner join's (`super::join`: the same kept rows, key
//! index and state bounds); on top of it, each preserved ("outer") side
//! keeps a flag per kept row saying whether the row has matched yet. A row
//! that never matches appears once, NULL-padded on the other side's
//! columns, as in Flink SQL: a row whose key has a NULL, or that fails the
//! residual condition of `ON`, is such a row.
//!
//! When is a padded row final? Two forms, chosen by the planner:
//!
//! - **Append-only** (every preserved side has a state bound): a row is
//!   dropped from state once the watermark proves no row of the other side
//!   can match it. That is exactly when "no match" becomes final, so the
//!   unmatched rows of a dropped batch are emitted padded then, by
//!   [`StatefulOperator::advance`]. Matched pairs are emitted by
//!   [`StatefulOperator::update`] as they are found, as for the inner join.
//! - **Changelog** (a preserved side without a bound): nothing ever proves
//!   "no match", so a row without a match is emitted padded when it
//!   arrives, and that padded row is retracted when its first match
//!   arrives, just before the matched pairs.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::RowConverter;

use super::changelog::{output_batch, Op};
use super::expr::{eval_predicate, PhysExpr};
use super::join::{key_converter, moved_parts, Side, SideBound};
use super::stateful::{no_such_port, Port, StatefulOperator, LEFT, RIGHT};
use crate::error::{EngineError, Result};
use crate::partition::placement::VnodePlacement;
use crate::state::{ConcatLater, SnapshotReader, SnapshotWriter};

/// The name of the match-flag column a tracked side's snapshot appends.
const MATCHED: &str = "__matched";

/// An outer join's state and compiled expressions.
pub struct OuterJoin {
    converter: RowConverter,
    left: Side,
    right: Side,
    /// Whether the left side's unmatched rows are kept (LEFT, FULL).
    left_outer: bool,
    /// Whether the right side's unmatched rows are kept (RIGHT, FULL).
    right_outer: bool,
    filter: Option<PhysExpr>,
    /// Output schema: left columns, right columns, and the change column
    /// when `changelog`.
    schema: SchemaRef,
    changelog: bool,
}

impl std::fmt::Debug for OuterJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OuterJoin({} left rows, {} right rows)",
            self.left.rows(),
            self.right.rows()
        )
    }
}

/// The rows a probe found: the joined pairs that pass the filter, and
/// which new rows and which kept rows are in them.
struct Matches {
    pairs: Option<RecordBatch>,
    new_rows: Vec<u32>,
    kept_rows: Vec<(usize, usize)>,
}

impl OuterJoin {
    /// An outer join with the given key expressions per side (same types,
    /// in pairs), which sides are preserved, residual filter over the
    /// joined row, output schema, and output form.
    pub fn new(
        left: (Vec<PhysExpr>, SchemaRef, Vec<SideBound>),
        right: (Vec<PhysExpr>, SchemaRef, Vec<SideBound>),
        key_types: Vec<DataType>,
        (left_outer, right_outer): (bool, bool),
        filter: Option<PhysExpr>,
        schema: SchemaRef,
        changelog: bool,
    ) -> Result<Self> {
        Ok(Self {
            converter: key_converter(key_types)?,
            left: Side::new(left, left_outer),
            right: Side::new(right, right_outer),
            left_outer,
            right_outer,
            filter,
            schema,
            changelog,
        })
    }

    fn sides(&mut self, from_left: bool) -> (&mut Side, &mut Side) {
        if from_left {
            (&mut self.left, &mut self.right)
        } else {
            (&mut self.right, &mut self.left)
        }
    }

    /// An output batch from the left and right columns, marked `op` when
    /// the output is a changelog.
    fn output(&self, left: Vec<ArrayRef>, right: Vec<ArrayRef>, op: Op) -> Result<RecordBatch> {
        let rows = left.first().or(right.first()).map_or(0, |c| c.len());
        let cols: Vec<ArrayRef> = left.into_iter().chain(right).collect();
        let ops = vec![op; rows];
        output_batch(&self.schema, cols, self.changelog.then_some(ops.as_slice()))
    }

    /// Rows of one side (`cols`, from the left side when `of_left`) padded
    /// with NULLs for the other side's columns.
    fn padded(&self, cols: Vec<ArrayRef>, of_left: bool, op: Op) -> Result<RecordBatch> {
        let rows = cols.first().map_or(0, |c| c.len());
        let other = if of_left { &self.right } else { &self.left };
        let nulls: Vec<ArrayRef> = other
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows))
            .collect();
        if of_left {
            self.output(cols, nulls, op)
        } else {
            self.output(nulls, cols, op)
        }
    }

    /// Pairs of `batch` (new rows of the left side when `from_left`) with
    /// the other side's kept rows that pass the filter.
    fn probe(
        &self,
        batch: &RecordBatch,
        keys: &[Option<super::join::Key>],
        from_left: bool,
    ) -> Result<Matches> {
        let other = if from_left { &self.right } else { &self.left };
        let (mine, theirs) = other.candidates(keys);
        if mine.is_empty() {
            return Ok(Matches {
                pairs: None,
                new_rows: mine,
                kept_rows: theirs,
            });
        }
        let idx = UInt32Array::from(mine.clone());
        let new_cols: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<_, _>>()?;
        let kept_cols = other.gather(&theirs)?;
        let (l, r) = if from_left {
            (new_cols, kept_cols)
        } else {
            (kept_cols, new_cols)
        };
        let joined = self.output(l, r, Op::Insert)?;
        let Some(f) = &self.filter else {
            return Ok(Matches {
                pairs: Some(joined),
                new_rows: mine,
                kept_rows: theirs,
            });
        };
        let mask = eval_predicate(f, &joined)?;
        let pass = |i: usize| mask.is_valid(i) && mask.value(i);
        let new_rows = (0..mine.len())
            .filter(|i| pass(*i))
            .map(|i| mine[i])
            .collect();
        let kept_rows = (0..theirs.len())
            .filter(|i| pass(*i))
            .map(|i| theirs[i])
            .collect();
        let pairs = filter_record_batch(&joined, &mask)?;
        Ok(Matches {
            pairs: (pairs.num_rows() > 0).then_some(pairs),
            new_rows,
            kept_rows,
        })
    }

    /// The snapshot schema of a tracked side: its columns and the flags.
    fn tracked_schema(side: &Side) -> SchemaRef {
        let mut fields: Vec<Arc<Field>> = side.schema.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(MATCHED, DataType::Boolean, false)));
        Arc::new(Schema::new(fields))
    }
}

impl StatefulOperator for OuterJoin {
    fn kind(&self) -> &'static str {
        "outer join"
    }

    /// Join a batch of new rows of one side with the other side's kept
    /// rows, then keep it. Returns the new pairs; in the changelog form,
    /// first the retraction of the padded rows of kept rows matched for the
    /// first time, and last the padded new rows without a match.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        let from_left = match port {
            LEFT => true,
            RIGHT => false,
            _ => return Err(no_such_port(self.kind(), port)),
        };
        let (mine_outer, other_outer) = if from_left {
            (self.left_outer, self.right_outer)
        } else {
            (self.right_outer, self.left_outer)
        };
        let mine = if from_left { &self.left } else { &self.right };
        let keys = mine.encode(&self.converter, &batch)?;
        let found = self.probe(&batch, &keys, from_left)?;
        let mut out = Vec::new();
        // Kept rows of a preserved side matched for the first time.
        let mut first: Vec<(usize, usize)> = Vec::new();
        if other_outer {
            let (_, other) = self.sides(from_left);
            for &(b, r) in &found.kept_rows {
                if let Some(flag) = other.matched.get_mut(b).and_then(|m| m.get_mut(r)) {
                    if !*flag {
                        *flag = true;
                        first.push((b, r));
                    }
                }
            }
        }
        if self.changelog && !first.is_empty() {
            let other = if from_left { &self.right } else { &self.left };
            let cols = other.gather(&first)?;
            out.push(self.padded(cols, !from_left, Op::Retract)?);
        }
        out.extend(found.pairs);
        let mut matched = vec![false; batch.num_rows()];
        for &i in &found.new_rows {
            matched[i as usize] = true;
        }
        if self.changelog && mine_outer {
            let alone: Vec<u32> = (0..batch.num_rows() as u32)
                .filter(|i| !matched[*i as usize])
                .collect();
            if !alone.is_empty() {
                let idx = UInt32Array::from(alone);
                let cols = batch
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<_, _>>()?;
                out.push(self.padded(cols, from_left, Op::Insert)?);
            }
        }
        let (mine, _) = self.sides(from_left);
        mine.keep(batch, keys, Some(matched))?;
        if self.changelog && out.len() > 1 {
            // One batch, so a retraction and the pairs replacing it reach
            // a subscriber together.
            return Ok(vec![concat_batches(&self.schema, &out)?]);
        }
        Ok(out)
    }

    /// Forget the rows no future row can match at `watermark`; in the
    /// append-only form, emit the preserved sides' unmatched ones padded.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        for of_left in [true, false] {
            let dropped = if of_left {
                self.left.evict(watermark)?
            } else {
                self.right.evict(watermark)?
            };
            if self.changelog {
                continue;
            }
            for (batch, matched) in dropped {
                let alone = BooleanArray::from(matched.iter().map(|m| !m).collect::<Vec<_>>());
                let rows = filter_record_batch(&batch, &alone)?;
                if rows.num_rows() > 0 {
                    out.push(self.padded(rows.columns().to_vec(), of_left, Op::Insert)?);
                }
            }
        }
        Ok(out)
    }

    /// Write both sides' kept rows, a preserved side's with its match flags
    /// as a last column.
    fn snapshot(&mut self, w: &mut SnapshotWriter) -> Result<()> {
        for side in [&self.left, &self.right] {
            let live = side
                .batches
                .iter()
                .enumerate()
                .filter_map(|(i, b)| Some((i, b.as_ref()?)));
            if !side.tracks() {
                let kept = live.map(|(_, b)| b.clone()).collect();
                w.push_deferred(ConcatLater::new(Arc::clone(&side.schema), kept));
                continue;
            }
            let schema = Self::tracked_schema(side);
            let kept = live
                .map(|(i, b)| {
                    let mut cols = b.columns().to_vec();
                    cols.push(Arc::new(BooleanArray::from(side.matched[i].clone())));
                    Ok(RecordBatch::try_new(Arc::clone(&schema), cols)?)
                })
                .collect::<Result<Vec<_>>>()?;
            w.push_deferred(ConcatLater::new(schema, kept));
        }
        Ok(())
    }

    /// Restore both sides from a snapshot, rebuilding the key indexes.
    fn restore(&mut self, r: &SnapshotReader) -> Result<()> {
        let [left, right] = r.parts() else {
            return Err(EngineError::Internal(format!(
                "outer join snapshot has {} parts, expected 2",
                r.parts().len()
            )));
        };
        self.restore_sides(left, right)
    }

    /// Each side's rows (with their match flags) whose key is of `keep`'s
    /// vnodes, from every old owner's kept rows.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let part_schema = |side: &Side| match side.tracks() {
            true => Self::tracked_schema(side),
            false => Arc::clone(&side.schema),
        };
        let sides = [
            (&self.left, part_schema(&self.left)),
            (&self.right, part_schema(&self.right)),
        ];
        let [left, right] = moved_parts(snaps, sides, keep, self.kind())?;
        self.restore_sides(&left, &right)
    }
}

impl OuterJoin {
    /// Both sides from their snapshot parts, rebuilding the key indexes.
    fn restore_sides(&mut self, left: &RecordBatch, right: &RecordBatch) -> Result<()> {
        let converter = &self.converter;
        for (side, batch) in [(&mut self.left, left), (&mut self.right, right)] {
            side.clear();
            let mut cols = batch.columns().to_vec();
            let matched = if side.tracks() {
                let flags = cols.pop().ok_or_else(|| {
                    EngineError::Internal("outer join snapshot lacks match flags".into())
                })?;
                let flags = flags
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| {
                        EngineError::Internal("outer join match flags are not booleans".into())
                    })?;
                Some(flags.iter().map(|f| f == Some(true)).collect())
            } else {
                None
            };
            let batch = RecordBatch::try_new(Arc::clone(&side.schema), cols)?;
            let keys = side.encode(converter, &batch)?;
            side.keep(batch, keys, matched)?;
        }
        Ok(())
    }
}
