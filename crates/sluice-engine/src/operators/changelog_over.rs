//! `agg(x) OVER (PARTITION BY k ORDER BY o <frame>)` over a changelog
//! input: a changelog of every live input row with the aggregates over its
//! frame.
//!
//! # Architecture
//!
//! The input's rows can be retracted, so no output is ever final and
//! nothing waits for the watermark. Each partition keeps its live input
//! rows sorted by the `ORDER BY` keys (Arrow's row format, which encodes
//! direction and null placement) and then by the whole row, so rows of
//! equal keys have one deterministic order (a `ROWS` frame depends on it).
//! Next to each row is the output it last emitted (its aggregates, in row
//! format), so a retraction is always of exactly what was emitted, however
//! the new value is computed.
//!
//! [`StatefulOperator::update`] only nets the batch's inserts and
//! retractions per partition and row. At the end of the cycle,
//! [`StatefulOperator::advance`] applies them to each changed partition
//! and recomputes one contiguous region of it: from the first changed
//! position (for `RANGE`, the first peer of the smallest changed key)
//! through the last changed one plus the rows whose frame can reach it
//! (`ROWS n`: the n rows after it; `RANGE d`: its peers and the rows within
//! `d` after it; `UNBOUNDED PRECEDING`: every later row). Rows before the
//! region keep their frames; rows after it see only unchanged rows. The
//! region is folded once with sliding accumulators (a row entering a frame
//! is added, one leaving it retracted), and every row whose output changed
//! retracts the old and inserts the new one. A removed row retracts its
//! output. Inserts and retractions of the same output row within one cycle
//! cancel, so a cycle's changelog is net.
//!
//! The state is every live input row (for an updating aggregate input, one
//! per distinct key), never freed: `EXPLAIN` says so.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array, StringArray, UInt8Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt8Type};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use rustc_hash::FxHashMap;
use sluice_sql::OverFrame;

use super::changelog::{output_batch, Op, INSERT};
use super::expr::{eval, PhysExpr};
use super::groups::AggregateFunctions;
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::{EngineError, Result};
use crate::state::{SnapshotReader, SnapshotWriter};

/// What the operator is, lowered from its plan node.
pub struct ChangelogOverDef {
    /// `PARTITION BY` expressions.
    pub partition_by: Vec<PhysExpr>,
    /// Their types.
    pub partition_types: Vec<DataType>,
    /// `ORDER BY` expressions.
    pub order_by: Vec<PhysExpr>,
    /// Their types with direction and null placement.
    pub order_fields: Vec<SortField>,
    /// Whether the first `ORDER BY` key is descending (so a `RANGE` offset
    /// reaches up from the current value, not down).
    pub descending: bool,
    /// The shared frame (a `RANGE` offset in the one `ORDER BY` column's units).
    pub frame: OverFrame,
    /// The aggregates.
    pub funcs: AggregateFunctions,
    /// Input schema; the change column is at `change_index`.
    pub input_schema: SchemaRef,
    /// Where the input's change column is.
    pub change_index: usize,
    /// Output schema: input columns (no change column), aggregates, change column.
    pub schema: SchemaRef,
}

/// One live input row of a partition.
#[derive(Debug, Clone)]
struct Entry {
    order: Box<[u8]>,
    payload: Box<[u8]>,
    /// The `ORDER BY` value as a number (`RANGE` offsets only; None if NULL).
    value: Option<i64>,
    /// The aggregates it last emitted (row format); None before its first.
    out: Option<Box<[u8]>>,
}

impl Entry {
    fn key(&self) -> (&[u8], &[u8]) {
        (&self.order, &self.payload)
    }
}

/// A row's sort key: (`ORDER BY` keys, whole row).
type Key = (Box<[u8]>, Box<[u8]>);

/// An output row: (whole input row, its aggregates), both in row format.
type Change = (Box<[u8]>, Box<[u8]>);

/// Net changes to one partition this cycle: per row, inserts minus
/// retractions, and its `ORDER BY` value.
type Pending = BTreeMap<Key, (i64, Option<i64>)>;

/// The operator.
pub struct ChangelogOver {
    def: ChangelogOverDef,
    partition_rows: Option<RowConverter>,
    order_rows: RowConverter,
    /// Encodes a whole input row (change column excluded).
    payload_rows: RowConverter,
    /// Encodes a row's aggregate values.
    out_rows: RowConverter,
    /// Output types of the aggregates.
    out_types: Vec<DataType>,
    /// Whether frames are measured on the `ORDER BY` value (`RANGE d`, d > 0).
    ranged: bool,
    /// Whether that value is descending.
    descending: bool,
    parts: FxHashMap<Box<[u8]>, Vec<Entry>>,
    pending: FxHashMap<Box<[u8]>, Pending>,
}

impl ChangelogOver {
    /// The operator `def` describes.
    pub fn new(def: ChangelogOverDef) -> Result<Self> {
        let partition_rows = if def.partition_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                def.partition_types
                    .iter()
                    .map(|t| SortField::new(t.clone()))
                    .collect(),
            )?)
        };
        let order_rows = RowConverter::new(def.order_fields.clone())?;
        let payload_rows = RowConverter::new(
            def.input_schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != def.change_index)
                .map(|(_, f)| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let first = def.input_schema.fields().len().saturating_sub(1);
        let out_types: Vec<DataType> = (0..def.funcs.len())
            .map(|i| def.schema.field(first + i).data_type().clone())
            .collect();
        let out_rows = RowConverter::new(out_types.iter().cloned().map(SortField::new).collect())?;
        let ranged = matches!(def.frame, OverFrame::Range { preceding: Some(d) } if d > 0);
        let descending = def.descending;
        Ok(Self {
            def,
            partition_rows,
            order_rows,
            payload_rows,
            out_rows,
            out_types,
            ranged,
            descending,
            parts: FxHashMap::default(),
            pending: FxHashMap::default(),
        })
    }

    /// The data columns of an input batch (its change column removed).
    fn data_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        batch
            .columns()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.def.change_index)
            .map(|(_, c)| Arc::clone(c))
            .collect()
    }

    /// The `ORDER BY` value of every row, for `RANGE` offsets.
    fn values(&self, batch: &RecordBatch) -> Result<Option<Int64Array>> {
        if !self.ranged {
            return Ok(None);
        }
        let Some(expr) = self.def.order_by.first() else {
            return Ok(None);
        };
        let raw = cast(&eval(expr, batch)?, &DataType::Int64)?;
        Ok(Some(raw.as_primitive::<Int64Type>().clone()))
    }

    /// Input rows `[from, to]` of a partition as a batch of the input schema
    /// (the change column says insert), to evaluate aggregate arguments on.
    fn rows_batch(&self, rows: &[Entry]) -> Result<RecordBatch> {
        let parser = self.payload_rows.parser();
        let mut columns = self
            .payload_rows
            .convert_rows(rows.iter().map(|e| parser.parse(&e.payload)))?;
        let change: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            INSERT,
            rows.len(),
        )));
        columns.insert(self.def.change_index, change);
        Ok(RecordBatch::try_new(
            Arc::clone(&self.def.input_schema),
            columns,
        )?)
    }

    /// First index of row `i`'s frame.
    fn frame_start(&self, rows: &[Entry], i: usize) -> usize {
        match self.def.frame {
            OverFrame::Rows { preceding: Some(n) } => {
                i.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX))
            }
            OverFrame::Rows { preceding: None } | OverFrame::Range { preceding: None } => 0,
            OverFrame::Range { preceding: Some(d) } => match rows[i].value {
                Some(v) if self.ranged => rows[..=i].partition_point(|e| match e.value {
                    // NULLs are never in a non-NULL row's frame.
                    None => true,
                    Some(x) if self.descending => x > v.saturating_add(d),
                    Some(x) => x < v.saturating_sub(d),
                }),
                // The peers: an exact match, or NULL's frame of NULLs.
                _ => rows[..=i].partition_point(|e| e.order < rows[i].order),
            },
        }
    }

    /// Last index (inclusive) of row `i`'s frame: itself, or its last peer.
    fn frame_end(&self, rows: &[Entry], i: usize) -> usize {
        match self.def.frame {
            OverFrame::Rows { .. } => i,
            OverFrame::Range { .. } => {
                i + rows[i + 1..].partition_point(|e| e.order == rows[i].order)
            }
        }
    }

    /// Whether a row after the last changed one (`last`, with `value`) still
    /// has it in its `RANGE` frame.
    fn reaches(&self, e: &Entry, last: &[u8], value: Option<i64>, d: i64) -> bool {
        if *e.order == *last {
            return true;
        }
        match (self.ranged, e.value, value) {
            (true, Some(x), Some(v)) if self.descending => x >= v.saturating_sub(d),
            (true, Some(x), Some(v)) => x <= v.saturating_add(d),
            _ => false,
        }
    }

    /// Apply one partition's net changes, recompute its changed region and
    /// append the resulting changes (payload, aggregates) to `retract` and
    /// `insert`.
    fn apply(
        &self,
        rows: &mut Vec<Entry>,
        pending: Pending,
        retract: &mut Vec<Change>,
        insert: &mut Vec<Change>,
    ) -> Result<()> {
        let (Some((first, _)), Some((last, (_, last_value)))) =
            (pending.first_key_value(), pending.last_key_value())
        else {
            return Ok(());
        };
        let (first, last, last_value) = (first.clone(), last.clone(), *last_value);
        for ((order, payload), (delta, value)) in pending {
            let key = (&*order, &*payload);
            let at = rows.partition_point(|e| e.key() < key);
            if delta > 0 {
                let new = Entry {
                    order,
                    payload,
                    value,
                    out: None,
                };
                for _ in 1..delta {
                    rows.insert(at, new.clone());
                }
                rows.insert(at, new);
            } else {
                let have = rows[at..].iter().take_while(|e| e.key() == key).count();
                let gone = delta.unsigned_abs() as usize;
                if gone > have {
                    return Err(EngineError::Internal(
                        "OVER over a changelog: the input retracted a row it never inserted".into(),
                    ));
                }
                for e in rows.drain(at + have - gone..at + have) {
                    if let Some(out) = e.out {
                        retract.push((e.payload, out));
                    }
                }
            }
        }
        let lo = match self.def.frame {
            OverFrame::Rows { .. } => rows.partition_point(|e| e.key() < (&*first.0, &*first.1)),
            OverFrame::Range { .. } => rows.partition_point(|e| *e.order < *first.0),
        };
        let after = rows.partition_point(|e| e.key() <= (&*last.0, &*last.1));
        let hi = match self.def.frame {
            OverFrame::Rows { preceding: Some(n) } => after
                .saturating_add(usize::try_from(n).unwrap_or(usize::MAX))
                .min(rows.len()),
            OverFrame::Rows { preceding: None } | OverFrame::Range { preceding: None } => {
                rows.len()
            }
            OverFrame::Range { preceding: Some(d) } => {
                after + rows[after..].partition_point(|e| self.reaches(e, &last.0, last_value, d))
            }
        };
        if lo >= hi {
            return Ok(());
        }
        let outs = self.fold(rows, lo, hi)?;
        for (e, new) in rows[lo..hi].iter_mut().zip(outs) {
            if e.out.as_deref() == Some(&*new) {
                continue;
            }
            if let Some(old) = e.out.take() {
                retract.push((e.payload.clone(), old));
            }
            insert.push((e.payload.clone(), new.clone()));
            e.out = Some(new);
        }
        Ok(())
    }

    /// The aggregates of rows `lo..hi` (row format), folded once in order
    /// with sliding accumulators.
    fn fold(&self, rows: &[Entry], lo: usize, hi: usize) -> Result<Vec<Box<[u8]>>> {
        let base = self.frame_start(rows, lo);
        let end = self.frame_end(rows, hi - 1);
        let batch = self.rows_batch(&rows[base..=end])?;
        let inputs = self.def.funcs.evaluate_inputs(&batch)?;
        let mut accs = self.def.funcs.sliding_accumulators()?;
        let slice = |from: usize, to: usize, f: usize| -> Vec<ArrayRef> {
            inputs[f]
                .0
                .iter()
                .map(|c| c.slice(from - base, to - from))
                .collect()
        };
        let (mut a, mut b) = (base, base);
        let mut values: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(hi - lo); accs.len()];
        for i in lo..hi {
            let (s, e) = (self.frame_start(rows, i), self.frame_end(rows, i) + 1);
            if e > b {
                for (f, acc) in accs.iter_mut().enumerate() {
                    acc.update_batch(&slice(b, e, f))?;
                }
                b = e;
            }
            if s > a {
                for (f, acc) in accs.iter_mut().enumerate() {
                    acc.retract_batch(&slice(a, s, f))?;
                }
                a = s;
            }
            for (acc, out) in accs.iter_mut().zip(values.iter_mut()) {
                out.push(acc.evaluate()?);
            }
        }
        let columns = values
            .into_iter()
            .zip(&self.out_types)
            .map(|(v, want)| {
                let arr = ScalarValue::iter_to_array(v)?;
                Ok(if arr.data_type() == want {
                    arr
                } else {
                    cast(&arr, want)?
                })
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let encoded = self.out_rows.convert_columns(&columns)?;
        Ok(encoded.iter().map(|r| Box::from(r.as_ref())).collect())
    }

    /// Changes as one output batch: retractions first.
    fn output(&self, retract: &[Change], insert: &[Change]) -> Result<Vec<RecordBatch>> {
        if retract.is_empty() && insert.is_empty() {
            return Ok(vec![]);
        }
        let all = || retract.iter().chain(insert);
        let payload = self.payload_rows.parser();
        let mut columns = self
            .payload_rows
            .convert_rows(all().map(|(p, _)| payload.parse(p)))?;
        let out = self.out_rows.parser();
        columns.extend(
            self.out_rows
                .convert_rows(all().map(|(_, o)| out.parse(o)))?,
        );
        let ops: Vec<Op> = std::iter::repeat_n(Op::Retract, retract.len())
            .chain(std::iter::repeat_n(Op::Insert, insert.len()))
            .collect();
        Ok(vec![output_batch(&self.def.schema, columns, Some(&ops))?])
    }
}

/// Remove the rows present in both lists (as multisets): an output
/// retracted and inserted again in one cycle is no change.
fn net(retract: &mut Vec<Change>, insert: &mut Vec<Change>) {
    let mut count: FxHashMap<Change, usize> = FxHashMap::default();
    for r in retract.iter() {
        *count.entry(r.clone()).or_default() += 1;
    }
    let mut cancelled: FxHashMap<Change, usize> = FxHashMap::default();
    insert.retain(|i| match count.get_mut(i) {
        Some(n) if *n > 0 => {
            *n -= 1;
            *cancelled.entry(i.clone()).or_default() += 1;
            false
        }
        _ => true,
    });
    retract.retain(|r| match cancelled.get_mut(r) {
        Some(n) if *n > 0 => {
            *n -= 1;
            false
        }
        _ => true,
    });
}

impl StatefulOperator for ChangelogOver {
    fn kind(&self) -> &'static str {
        "over aggregate over a changelog"
    }

    /// Net the batch's changes per partition and row; applied at the end
    /// of the cycle.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        if batch.num_rows() == 0 {
            return Ok(vec![]);
        }
        let eval_all = |exprs: &[PhysExpr]| -> Result<Vec<ArrayRef>> {
            exprs.iter().map(|e| eval(e, &batch)).collect()
        };
        let partition = match &self.partition_rows {
            Some(c) => Some(c.convert_columns(&eval_all(&self.def.partition_by)?)?),
            None => None,
        };
        let order = self
            .order_rows
            .convert_columns(&eval_all(&self.def.order_by)?)?;
        let payload = self
            .payload_rows
            .convert_columns(&self.data_columns(&batch))?;
        let values = self.values(&batch)?;
        let change = batch
            .column(self.def.change_index)
            .as_string_opt::<i32>()
            .ok_or_else(|| EngineError::Internal("the change column is not text".into()))?;
        for i in 0..batch.num_rows() {
            let key = partition.as_ref().map_or(&[][..], |p| p.row(i).data());
            let delta = match Op::at(change, i) {
                Op::Insert => 1,
                Op::Retract => -1,
            };
            let value = values
                .as_ref()
                .and_then(|v| v.is_valid(i).then(|| v.value(i)));
            let part = match self.pending.get_mut(key) {
                Some(p) => p,
                None => self.pending.entry(Box::from(key)).or_default(),
            };
            let row = (
                Box::from(order.row(i).data()),
                Box::from(payload.row(i).data()),
            );
            let slot = part.entry(row).or_insert((0, value));
            slot.0 += delta;
        }
        Ok(vec![])
    }

    /// Apply the cycle's changes and emit what they changed.
    fn advance(&mut self, _watermark: i64) -> Result<Vec<RecordBatch>> {
        let mut retract = Vec::new();
        let mut insert = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        for (key, mut changes) in pending {
            changes.retain(|_, (delta, _)| *delta != 0);
            if changes.is_empty() {
                continue;
            }
            let mut rows = self.parts.remove(&key).unwrap_or_default();
            self.apply(&mut rows, changes, &mut retract, &mut insert)?;
            if !rows.is_empty() {
                self.parts.insert(key, rows);
            }
        }
        net(&mut retract, &mut insert);
        self.output(&retract, &insert)
    }

    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        let rows: usize = self.parts.values().map(Vec::len).sum();
        let pending: usize = self.pending.values().map(BTreeMap::len).sum();
        out.set("rows", rows);
        out.set("pending", pending);
        let batch = snapshot_batch(&self.parts, &self.pending)?;
        if batch.num_rows() > 0 {
            out.push(&batch)?;
        }
        Ok(())
    }

    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        self.parts.clear();
        self.pending.clear();
        for b in snap.parts() {
            restore_batch(b, &mut self.parts, &mut self.pending)?;
        }
        let rows: usize = snap.get("rows")?;
        let pending: usize = snap.get("pending")?;
        let got_rows: usize = self.parts.values().map(Vec::len).sum();
        let got_pending: usize = self.pending.values().map(BTreeMap::len).sum();
        if (rows, pending) != (got_rows, got_pending) {
            return Err(damaged(&format!(
                "{rows} rows and {pending} changes recorded, {got_rows} and {got_pending} restored"
            )));
        }
        Ok(())
    }
}

/// What a row of the snapshot batch is.
const ROW: u8 = 0;
const CHANGE: u8 = 1;

fn snapshot_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("partition", DataType::Binary, false),
        Field::new("kind", DataType::UInt8, false),
        Field::new("order", DataType::Binary, false),
        Field::new("payload", DataType::Binary, false),
        Field::new("value", DataType::Int64, true),
        Field::new("out", DataType::Binary, true),
        Field::new("delta", DataType::Int64, false),
    ]))
}

/// Every partition's rows in order, then the pending changes.
fn snapshot_batch(
    parts: &FxHashMap<Box<[u8]>, Vec<Entry>>,
    pending: &FxHashMap<Box<[u8]>, Pending>,
) -> Result<RecordBatch> {
    let mut key: Vec<&[u8]> = Vec::new();
    let mut kind = Vec::new();
    let mut order: Vec<&[u8]> = Vec::new();
    let mut payload: Vec<&[u8]> = Vec::new();
    let mut value = Vec::new();
    let mut out: Vec<Option<&[u8]>> = Vec::new();
    let mut delta = Vec::new();
    for (k, rows) in parts {
        for e in rows {
            key.push(k);
            kind.push(ROW);
            order.push(&e.order);
            payload.push(&e.payload);
            value.push(e.value);
            out.push(e.out.as_deref());
            delta.push(0);
        }
    }
    for (k, changes) in pending {
        for ((o, p), (d, v)) in changes {
            key.push(k);
            kind.push(CHANGE);
            order.push(o);
            payload.push(p);
            value.push(*v);
            out.push(None);
            delta.push(*d);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(BinaryArray::from_iter_values(key)),
        Arc::new(UInt8Array::from(kind)),
        Arc::new(BinaryArray::from_iter_values(order)),
        Arc::new(BinaryArray::from_iter_values(payload)),
        Arc::new(Int64Array::from(value)),
        Arc::new(BinaryArray::from(out)),
        Arc::new(Int64Array::from(delta)),
    ];
    Ok(RecordBatch::try_new(snapshot_schema(), columns)?)
}

fn restore_batch(
    b: &RecordBatch,
    parts: &mut FxHashMap<Box<[u8]>, Vec<Entry>>,
    pending: &mut FxHashMap<Box<[u8]>, Pending>,
) -> Result<()> {
    let bad = || damaged("unexpected columns");
    let binary = |i: usize| b.columns().get(i).and_then(|c| c.as_binary_opt::<i32>());
    let int = |i: usize| {
        b.columns()
            .get(i)
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
    };
    let (Some(key), Some(order), Some(payload), Some(out)) =
        (binary(0), binary(2), binary(3), binary(5))
    else {
        return Err(bad());
    };
    let (Some(value), Some(delta)) = (int(4), int(6)) else {
        return Err(bad());
    };
    let kind = b
        .columns()
        .get(1)
        .and_then(|c| c.as_primitive_opt::<UInt8Type>())
        .ok_or_else(bad)?;
    for i in 0..b.num_rows() {
        let v = value.is_valid(i).then(|| value.value(i));
        let k: Box<[u8]> = Box::from(key.value(i));
        let (o, p) = (Box::from(order.value(i)), Box::from(payload.value(i)));
        match kind.value(i) {
            ROW => parts.entry(k).or_default().push(Entry {
                order: o,
                payload: p,
                value: v,
                out: out.is_valid(i).then(|| Box::from(out.value(i))),
            }),
            CHANGE => {
                pending
                    .entry(k)
                    .or_default()
                    .insert((o, p), (delta.value(i), v));
            }
            _ => return Err(bad()),
        }
    }
    Ok(())
}

fn damaged(what: &str) -> EngineError {
    EngineError::Internal(format!(
        "damaged snapshot of an OVER over a changelog: {what}"
    ))
}
