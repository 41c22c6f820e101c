//! The ASOF join: each left row with its closest right row of the same key.
//!
//! Left rows are held until the watermark makes their match final, then
//! emitted once (append-only output):
//!
//! * backward (`l.ts >= r.ts`, `>`): the match is the latest right row at
//!   (before) the left row's time; no closer one can come once every future
//!   right row is later than the left row, i.e. once `watermark - right lag >
//!   l.ts` (`>=` for `>`).
//! * forward (`l.ts <= r.ts`, `<`): the match is the earliest right row at
//!   (after) it; it is final once `watermark - right lag` has passed it (no
//!   row at or before it can still come), and a row with no match is final
//!   (unmatched) once the watermark has passed `l.ts + tolerance`; without a
//!   tolerance it waits for a match or the end of the input.
//!
//! Among several right rows at the closest time the match is the smallest
//! one in Arrow's row format (its columns in order, each ascending with
//! NULLs first): one output row per left row, whatever the arrival order,
//! and only that row is kept per key and time. Times are compared in
//! milliseconds.
//!
//! Right rows are kept per key in time order, and only while a held or
//! future left row could still pick them: future left rows are at or after
//! `watermark - left lag`, so for a backward match only the latest right row
//! at (before) the earliest such time and the later ones are kept (none
//! older than the tolerance allows), and for a forward match only the right
//! rows at or after it. Rows are kept in Arrow's row format, which makes
//! per-key time order cheap; snapshots write them back as batches.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::compute::{filter_record_batch, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter, SortField};
use rustc_hash::FxHashMap;
use sluice_sql::plan::AsofOp;

use super::expr::{eval, event_time_ms, PhysExpr};
use super::join::owned_mask;
use super::stateful::{no_such_port, Port, StatefulOperator, LEFT, RIGHT};
use crate::error::{EngineError, Result};
use crate::partition::placement::VnodePlacement;
use crate::state::{SnapshotReader, SnapshotWriter};

/// A row's key in Arrow's row format.
type Key = Vec<u8>;

/// One input's compiled expressions and row encoding.
pub struct AsofSide {
    /// Key expressions over the input.
    pub keys: Vec<PhysExpr>,
    /// The event-time column.
    pub time: PhysExpr,
    /// Future rows have `time >= watermark - lag_ms`.
    pub lag_ms: i64,
    /// The input's schema.
    pub schema: SchemaRef,
}

/// A held left row.
struct Held {
    /// None when a key column is NULL (never matches).
    key: Option<Key>,
    /// Event time in ms; None when NULL (never matches).
    ts: Option<i64>,
    row: OwnedRow,
}

/// The ASOF join operator's state.
pub struct AsofJoin {
    left: AsofSide,
    right: AsofSide,
    op: AsofOp,
    tolerance_ms: Option<i64>,
    keep_unmatched: bool,
    keys: RowConverter,
    left_rows: RowConverter,
    right_rows: RowConverter,
    held: Vec<Held>,
    /// Per key and time, the smallest right row (the one a tie picks).
    kept: FxHashMap<Key, BTreeMap<i64, OwnedRow>>,
    schema: SchemaRef,
}

impl std::fmt::Debug for AsofJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AsofJoin({} held left rows, {} kept right rows)",
            self.held.len(),
            self.right_count()
        )
    }
}

fn converter(schema: &SchemaRef) -> Result<RowConverter> {
    Ok(RowConverter::new(
        schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
}

/// Per row of `batch`: its key bytes (None if any key is NULL) and time.
fn keys_and_times(
    side: &AsofSide,
    conv: &RowConverter,
    batch: &RecordBatch,
) -> Result<Vec<(Option<Key>, Option<i64>)>> {
    let cols: Vec<ArrayRef> = side
        .keys
        .iter()
        .map(|k| eval(k, batch))
        .collect::<Result<_>>()?;
    let rows = conv.convert_columns(&cols)?;
    let times = event_time_ms(&eval(&side.time, batch)?, &side.time.to_string())?;
    Ok((0..batch.num_rows())
        .map(|i| {
            let key = (!cols.iter().any(|c| c.is_null(i))).then(|| rows.row(i).as_ref().to_vec());
            let ts = times.is_valid(i).then(|| times.value(i));
            (key, ts)
        })
        .collect())
}

impl AsofJoin {
    /// An ASOF join of `left` and `right` (key expressions of the same
    /// types, `key_types`), emitting rows of `schema` (left columns, then
    /// right ones).
    pub fn new(
        left: AsofSide,
        right: AsofSide,
        key_types: Vec<arrow::datatypes::DataType>,
        op: AsofOp,
        tolerance_ms: Option<i64>,
        keep_unmatched: bool,
        schema: SchemaRef,
    ) -> Result<Self> {
        Ok(Self {
            keys: RowConverter::new(key_types.into_iter().map(SortField::new).collect())?,
            left_rows: converter(&left.schema)?,
            right_rows: converter(&right.schema)?,
            left,
            right,
            op,
            tolerance_ms,
            keep_unmatched,
            held: Vec::new(),
            kept: FxHashMap::default(),
            schema,
        })
    }

    fn right_count(&self) -> usize {
        self.kept.values().map(BTreeMap::len).sum()
    }

    fn hold(&mut self, batch: &RecordBatch) -> Result<()> {
        let kt = keys_and_times(&self.left, &self.keys, batch)?;
        let rows = self.left_rows.convert_columns(batch.columns())?;
        for (i, (key, ts)) in kt.into_iter().enumerate() {
            if (key.is_none() || ts.is_none()) && !self.keep_unmatched {
                continue;
            }
            self.held.push(Held {
                key,
                ts,
                row: rows.row(i).owned(),
            });
        }
        Ok(())
    }

    fn keep(&mut self, batch: &RecordBatch) -> Result<()> {
        let kt = keys_and_times(&self.right, &self.keys, batch)?;
        let rows = self.right_rows.convert_columns(batch.columns())?;
        for (i, (key, ts)) in kt.into_iter().enumerate() {
            if let (Some(key), Some(ts)) = (key, ts) {
                let row = rows.row(i);
                match self.kept.entry(key).or_default().entry(ts) {
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(row.owned());
                    }
                    std::collections::btree_map::Entry::Occupied(mut o) => {
                        if row < o.get().row() {
                            o.insert(row.owned());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The closest right time for a left row at `t` with `key`, if any.
    fn closest(&self, key: &Key, t: i64) -> Option<i64> {
        let by_time = self.kept.get(key)?;
        let tol = self.tolerance_ms;
        match self.op {
            AsofOp::GtEq | AsofOp::Gt => {
                let hi = if self.op == AsofOp::GtEq {
                    Bound::Included(t)
                } else {
                    Bound::Excluded(t)
                };
                let (s, _) = by_time.range((Bound::Unbounded, hi)).next_back()?;
                tol.is_none_or(|tol| *s >= t.saturating_sub(tol))
                    .then_some(*s)
            }
            AsofOp::LtEq | AsofOp::Lt => {
                let lo = if self.op == AsofOp::LtEq {
                    Bound::Included(t)
                } else {
                    Bound::Excluded(t)
                };
                let (s, _) = by_time.range((lo, Bound::Unbounded)).next()?;
                tol.is_none_or(|tol| *s <= t.saturating_add(tol))
                    .then_some(*s)
            }
        }
    }

    /// Whether a held row's result is final at `watermark`, and its match.
    fn decide(&self, h: &Held, watermark: i64) -> Option<Option<i64>> {
        let (Some(key), Some(t)) = (&h.key, h.ts) else {
            return Some(None);
        };
        let best = self.closest(key, t);
        if watermark == i64::MAX {
            return Some(best);
        }
        // Every future right row is at or after `rf`.
        let rf = watermark.saturating_sub(self.right.lag_ms);
        let done = match (self.op, best) {
            (AsofOp::GtEq, _) => rf > t,
            (AsofOp::Gt, _) => rf >= t,
            (_, Some(s)) => rf > s,
            (_, None) => self
                .tolerance_ms
                .is_some_and(|tol| rf > t.saturating_add(tol)),
        };
        done.then_some(best)
    }

    /// Emit the held rows final at `watermark`.
    fn emit(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        let mut out_left: Vec<usize> = Vec::new();
        let mut out_right: Vec<Option<(Key, i64)>> = Vec::new();
        let mut done = vec![false; self.held.len()];
        for (i, h) in self.held.iter().enumerate() {
            let Some(best) = self.decide(h, watermark) else {
                continue;
            };
            done[i] = true;
            match (best, &h.key) {
                (Some(s), Some(key)) => {
                    out_left.push(i);
                    out_right.push(Some((key.clone(), s)));
                }
                _ if self.keep_unmatched => {
                    out_left.push(i);
                    out_right.push(None);
                }
                _ => {}
            }
        }
        let batch = if out_left.is_empty() {
            None
        } else {
            let left_cols = self
                .left_rows
                .convert_rows(out_left.iter().map(|&i| self.held[i].row.row()))?;
            let matched: Vec<_> = out_right
                .iter()
                .flatten()
                .filter_map(|(k, s)| self.kept.get(k)?.get(s))
                .map(OwnedRow::row)
                .collect();
            let right_dense = self.right_rows.convert_rows(matched)?;
            // Padded rows take a NULL index: NULLs in every right column.
            let mut next = 0u32;
            let idx: UInt32Array = out_right
                .iter()
                .map(|m| {
                    m.as_ref().map(|_| {
                        next += 1;
                        next - 1
                    })
                })
                .collect();
            let right_cols = right_dense
                .iter()
                .map(|c| take(c.as_ref(), &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let cols = left_cols.into_iter().chain(right_cols).collect();
            Some(RecordBatch::try_new(Arc::clone(&self.schema), cols)?)
        };
        let mut done = done.into_iter();
        self.held.retain(|_| !done.next().unwrap_or(false));
        Ok(batch)
    }

    /// Forget the right rows no held or future left row can pick.
    fn evict(&mut self, watermark: i64) {
        let lf = watermark.saturating_sub(self.left.lag_ms);
        let mut floor: FxHashMap<&Key, i64> = FxHashMap::default();
        for h in &self.held {
            if let (Some(k), Some(t)) = (&h.key, h.ts) {
                let f = floor.entry(k).or_insert(t);
                *f = (*f).min(t);
            }
        }
        let (op, tol) = (self.op, self.tolerance_ms);
        let floors: Vec<(Key, i64)> = self
            .kept
            .keys()
            .map(|k| (k.clone(), floor.get(k).map_or(lf, |f| lf.min(*f))))
            .collect();
        for (key, f) in floors {
            let Some(by_time) = self.kept.get_mut(&key) else {
                continue;
            };
            let cut = match op {
                AsofOp::GtEq | AsofOp::Gt => {
                    let hi = if op == AsofOp::GtEq {
                        Bound::Included(f)
                    } else {
                        Bound::Excluded(f)
                    };
                    // The latest row a left row at `f` can pick stays.
                    let latest = by_time
                        .range((Bound::Unbounded, hi))
                        .next_back()
                        .map(|(s, _)| *s);
                    match (latest, tol) {
                        (Some(s), Some(tol)) => s.max(f.saturating_sub(tol)),
                        (Some(s), None) => s,
                        (None, _) => continue,
                    }
                }
                AsofOp::LtEq | AsofOp::Lt => f,
            };
            *by_time = by_time.split_off(&cut);
            if by_time.is_empty() {
                self.kept.remove(&key);
            }
        }
    }

    /// The held left rows, or the kept right rows, as one batch.
    fn held_batch(&self) -> Result<RecordBatch> {
        let cols = self
            .left_rows
            .convert_rows(self.held.iter().map(|h| h.row.row()))?;
        Ok(RecordBatch::try_new(Arc::clone(&self.left.schema), cols)?)
    }

    fn kept_batch(&self) -> Result<RecordBatch> {
        let rows = self
            .kept
            .values()
            .flat_map(|m| m.values())
            .map(OwnedRow::row);
        let cols = self.right_rows.convert_rows(rows)?;
        Ok(RecordBatch::try_new(Arc::clone(&self.right.schema), cols)?)
    }
}

impl StatefulOperator for AsofJoin {
    fn kind(&self) -> &'static str {
        "asof join"
    }

    /// Hold left rows, keep right rows; nothing is final before the
    /// watermark moves.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        match port {
            LEFT => self.hold(&batch)?,
            RIGHT => self.keep(&batch)?,
            _ => return Err(no_such_port(self.kind(), port)),
        }
        Ok(vec![])
    }

    /// Emit every held left row whose match `watermark` makes final, then
    /// forget the right rows nothing can pick any more.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        let out = self.emit(watermark)?;
        self.evict(watermark);
        Ok(out.into_iter().collect())
    }

    /// Two parts: the held left rows and the kept right rows.
    fn snapshot(&mut self, w: &mut SnapshotWriter) -> Result<()> {
        w.set("held", self.held.len());
        w.set("kept", self.right_count());
        w.push(&self.held_batch()?)?;
        w.push(&self.kept_batch()?)?;
        Ok(())
    }

    fn restore(&mut self, r: &SnapshotReader) -> Result<()> {
        let [held, kept] = r.parts() else {
            return Err(EngineError::Internal(format!(
                "asof join snapshot has {} parts, expected 2",
                r.parts().len()
            )));
        };
        let held = RecordBatch::try_new(Arc::clone(&self.left.schema), held.columns().to_vec())?;
        let kept = RecordBatch::try_new(Arc::clone(&self.right.schema), kept.columns().to_vec())?;
        self.restore_rows(&[held], std::slice::from_ref(&kept))?;
        let (h, k): (usize, usize) = (r.get("held")?, r.get("kept")?);
        if h != self.held.len() || k != kept.num_rows() {
            return Err(EngineError::Internal(format!(
                "damaged asof join snapshot: {h} held and {k} kept rows recorded, {} and {} restored",
                self.held.len(),
                self.right_count()
            )));
        }
        Ok(())
    }

    /// The held left rows and kept right rows whose key is of `keep`'s
    /// vnodes, from every old owner's.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let (held, kept) = self.moved_rows(snaps, keep)?;
        self.restore_rows(&held, &kept)
    }
}

impl AsofJoin {
    /// Replace the held left and kept right rows with `held` and `kept`.
    fn restore_rows(&mut self, held: &[RecordBatch], kept: &[RecordBatch]) -> Result<()> {
        self.held.clear();
        self.kept.clear();
        for batch in held {
            self.hold(batch)?;
        }
        for batch in kept {
            self.keep(batch)?;
        }
        Ok(())
    }

    /// Each old owner's held and kept rows whose key is of `keep`'s
    /// vnodes.
    fn moved_rows(
        &self,
        snaps: &[SnapshotReader],
        keep: &VnodePlacement,
    ) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
        let (mut held, mut kept) = (Vec::new(), Vec::new());
        for snap in snaps {
            let [h, k] = snap.parts() else {
                return Err(EngineError::Internal(format!(
                    "asof join snapshot has {} parts, expected 2",
                    snap.parts().len()
                )));
            };
            for (part, side, out) in [(h, &self.left, &mut held), (k, &self.right, &mut kept)] {
                let rows = RecordBatch::try_new(Arc::clone(&side.schema), part.columns().to_vec())?;
                let mask = owned_mask(&side.keys, &rows, keep, "asof join")?;
                out.push(filter_record_batch(&rows, &mask)?);
            }
        }
        Ok((held, kept))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::common::DFSchema;
    use datafusion::prelude::col;

    use super::*;
    use crate::operators::expr::compile;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("key", DataType::Int64, true),
            Field::new("ts", DataType::Int64, true),
        ]))
    }

    fn side() -> AsofSide {
        let df = DFSchema::try_from(schema().as_ref().clone()).unwrap();
        AsofSide {
            keys: vec![compile(&col("key"), &df).unwrap()],
            time: compile(&col("ts"), &df).unwrap(),
            lag_ms: 0,
            schema: schema(),
        }
    }

    fn join(op: AsofOp, tolerance_ms: Option<i64>) -> AsofJoin {
        let mut fields = schema().fields().to_vec();
        fields.extend(schema().fields().iter().cloned());
        AsofJoin::new(
            side(),
            side(),
            vec![DataType::Int64],
            op,
            tolerance_ms,
            false,
            Arc::new(Schema::new(fields)),
        )
        .unwrap()
    }

    fn rows(rows: &[(i64, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    /// (left ts, right ts) of every emitted row.
    fn pairs(out: Vec<RecordBatch>) -> Vec<(i64, i64)> {
        out.iter()
            .flat_map(|b| {
                let l = b.column(1).as_primitive::<Int64Type>().clone();
                let r = b.column(3).as_primitive::<Int64Type>().clone();
                (0..b.num_rows()).map(move |i| (l.value(i), r.value(i)))
            })
            .collect()
    }

    /// Backward: a left row waits until the watermark passes it; right
    /// rows older than the latest one at or before the earliest held or
    /// future left row go, and a tolerance drops that one too once it is
    /// too old for any of them.
    #[test]
    fn backward_state_is_freed_by_the_watermark() {
        let mut j = join(AsofOp::GtEq, Some(5));
        j.update(RIGHT, rows(&[(1, 10), (1, 20), (1, 30), (2, 5)]))
            .unwrap();
        j.update(LEFT, rows(&[(1, 25)])).unwrap();
        assert!(j.advance(22).unwrap().is_empty());
        // 10 is older than 20; 5 (key 2) is more than 5 before any left
        // row still to come.
        assert_eq!((j.held.len(), j.right_count()), (1, 2), "20 and 30 kept");
        assert_eq!(pairs(j.advance(26).unwrap()), vec![(25, 20)]);
        assert_eq!(j.right_count(), 1, "20 too old for a left row at 26");
        assert!(j.advance(31).unwrap().is_empty());
        assert_eq!((j.held.len(), j.right_count()), (0, 1), "only 30 kept");
        j.advance(35).unwrap();
        assert_eq!(j.right_count(), 1, "a left row at 35 could pick 30");
        j.advance(36).unwrap();
        assert_eq!(j.right_count(), 0);
    }

    /// Forward: a match is final once the watermark passes it; a row with
    /// no match waits (no tolerance) until the end of the input; right rows
    /// before every held and future left row go.
    #[test]
    fn forward_waits_for_a_final_match() {
        let mut j = join(AsofOp::LtEq, None);
        j.update(RIGHT, rows(&[(1, 10), (1, 20)])).unwrap();
        j.update(LEFT, rows(&[(1, 15), (3, 1)])).unwrap();
        assert!(j.advance(12).unwrap().is_empty());
        assert_eq!((j.held.len(), j.right_count()), (2, 1), "10 gone");
        // 20 could still be beaten by a right row at 15..20 until then.
        assert!(j.advance(20).unwrap().is_empty());
        assert_eq!(pairs(j.advance(21).unwrap()), vec![(15, 20)]);
        assert_eq!((j.held.len(), j.right_count()), (1, 0));
        assert!(j.advance(i64::MAX).unwrap().is_empty(), "inner: no match");
        assert_eq!(j.held.len(), 0);
    }
}
