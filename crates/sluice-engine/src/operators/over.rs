//! `agg(x) OVER (PARTITION BY k ORDER BY ts ROWS|RANGE ... PRECEDING AND
//! CURRENT ROW)`: every input row once, with the aggregates over its frame.
//!
//! A row's frame is complete only when no row before it in event time (and,
//! for `RANGE`, no peer with the same time) can still arrive, which is when
//! the watermark has passed its time. So rows wait in `pending` until then,
//! and [`OverAggregate::advance`] emits the rows the watermark passed in
//! event-time order per partition (ties in arrival order), which makes the
//! output append-only and exact.
//!
//! After a row is emitted, a partition keeps only what later rows' frames
//! read: for `RANGE d PRECEDING` the rows within `d` of the watermark (freed
//! as it moves), for `ROWS n PRECEDING` the last `n` rows, and for
//! `UNBOUNDED PRECEDING` one running accumulator per partition. A bounded
//! frame uses DataFusion's sliding accumulators: a row entering the frame is
//! added, one leaving it is retracted, so each row costs O(1) updates.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, UInt32Array};
use arrow::compute::{cast, concat_batches, filter_record_batch, take_record_batch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use rustc_hash::FxHashMap;
use sluice_sql::OverFrame;

use super::expr::{eval, event_time_ms, PhysExpr};
use super::groups::AggregateFunctions;
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::{EngineError, Result};
use crate::state::{SnapshotReader, SnapshotWriter};

/// What an `OVER` aggregation is, lowered from its plan node.
pub struct OverDef {
    /// `PARTITION BY` expressions.
    pub partition_by: Vec<PhysExpr>,
    /// Their types (for the row encoding of partition keys).
    pub partition_types: Vec<DataType>,
    /// The event-time (`ORDER BY`) expression.
    pub time: PhysExpr,
    /// Its name, for errors.
    pub time_name: String,
    /// Its units as (multiply, divide) to milliseconds.
    pub time_scale: (i64, i64),
    /// Future input rows have `time >= watermark - time_lag_ms`.
    pub time_lag_ms: i64,
    /// The shared frame.
    pub frame: OverFrame,
    /// The aggregates.
    pub funcs: AggregateFunctions,
    /// Input schema (the pending rows' schema).
    pub input_schema: SchemaRef,
    /// Output schema: input columns, then one per aggregate.
    pub schema: SchemaRef,
}

/// One row kept in a bounded frame: its time and each function's argument values.
struct FrameRow {
    time: i64,
    args: Vec<Vec<ScalarValue>>,
}

/// What one partition keeps between emissions.
struct Partition {
    accs: Vec<Box<dyn Accumulator>>,
    /// Rows in the frame, oldest first (bounded frames only).
    rows: VecDeque<FrameRow>,
}

/// The `OVER` aggregation operator.
pub struct OverAggregate {
    def: OverDef,
    keys: Option<RowConverter>,
    /// Input rows the watermark has not passed yet, in arrival order.
    pending: Vec<RecordBatch>,
    /// The lowest event time (ms) in `pending` (`i64::MAX` when empty), so a
    /// cycle that passes none of them does not look at them.
    pending_min: i64,
    partitions: FxHashMap<Vec<u8>, Partition>,
    /// Rows with an event time (ms) below this have been emitted.
    emitted_below: i64,
    dropped_late: u64,
}

impl OverAggregate {
    /// A new operator.
    pub fn new(def: OverDef) -> Result<Self> {
        let keys = if def.partition_by.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                def.partition_types
                    .iter()
                    .map(|t| SortField::new(t.clone()))
                    .collect(),
            )?)
        };
        Ok(Self {
            def,
            keys,
            pending: Vec::new(),
            pending_min: i64::MAX,
            partitions: FxHashMap::default(),
            emitted_below: i64::MIN,
            dropped_late: 0,
        })
    }

    fn bounded(&self) -> bool {
        matches!(
            self.def.frame,
            OverFrame::Rows { preceding: Some(_) } | OverFrame::Range { preceding: Some(_) }
        )
    }

    fn new_partition(&self) -> Result<Partition> {
        let accs = if self.bounded() {
            self.def.funcs.sliding_accumulators()?
        } else {
            self.def.funcs.row_accumulators()?
        };
        Ok(Partition {
            accs,
            rows: VecDeque::new(),
        })
    }

    /// Event times of a batch: raw (the column's units, for order and
    /// frames) and in milliseconds (against the watermark).
    fn times(&self, batch: &RecordBatch) -> Result<(Int64Array, Int64Array)> {
        let t = eval(&self.def.time, batch)?;
        let ms = event_time_ms(&t, &self.def.time_name)?;
        let raw = cast(&t, &DataType::Int64)?;
        let raw = arrow::array::AsArray::as_primitive::<Int64Type>(&raw).clone();
        Ok((raw, ms))
    }

    /// Encoded partition key of every row.
    fn partition_keys(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let Some(conv) = &self.keys else {
            return Ok(vec![Vec::new(); batch.num_rows()]);
        };
        let cols = self
            .def
            .partition_by
            .iter()
            .map(|k| eval(k, batch))
            .collect::<Result<Vec<_>>>()?;
        let rows = conv.convert_columns(&cols)?;
        Ok(rows.iter().map(|r| r.as_ref().to_vec()).collect())
    }

    /// Emit, in order, the pending rows whose time is below `below` (ms).
    fn emit_below(&mut self, below: i64, final_flush: bool) -> Result<Option<RecordBatch>> {
        if self.pending.is_empty() || (self.pending_min >= below && !final_flush) {
            return Ok(None);
        }
        let all = concat_batches(&self.def.input_schema, &self.pending)?;
        self.pending.clear();
        self.pending_min = i64::MAX;
        let (_, ms) = self.times(&all)?;
        let ready: BooleanArray = ms
            .iter()
            .map(|t| Some(t.is_some_and(|t| t < below || final_flush)))
            .collect();
        let rest = filter_record_batch(&all, &arrow::compute::not(&ready)?)?;
        if rest.num_rows() > 0 {
            self.pending_min = min_ms(&self.times(&rest)?.1);
            self.pending.push(rest);
        }
        let ready = filter_record_batch(&all, &ready)?;
        if ready.num_rows() == 0 {
            return Ok(None);
        }
        // Sort by (partition, time); a stable sort keeps arrival order
        // among peers.
        let (raw, _) = self.times(&ready)?;
        let keys = self.partition_keys(&ready)?;
        let mut order: Vec<u32> = (0..ready.num_rows() as u32).collect();
        order.sort_by(|a, b| {
            let (a, b) = (*a as usize, *b as usize);
            keys[a].cmp(&keys[b]).then(raw.value(a).cmp(&raw.value(b)))
        });
        let sorted = take_record_batch(&ready, &UInt32Array::from(order.clone()))?;
        let times: Vec<i64> = order.iter().map(|i| raw.value(*i as usize)).collect();
        let inputs = self.def.funcs.evaluate_inputs(&sorted)?;
        let args: Vec<&[ArrayRef]> = inputs.iter().map(|(v, _)| v.as_slice()).collect();
        let mut values: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(order.len()); args.len()];
        let mut start = 0;
        while start < order.len() {
            let key = &keys[order[start] as usize];
            let mut end = start + 1;
            while end < order.len() && &keys[order[end] as usize] == key {
                end += 1;
            }
            let mut part = match self.partitions.remove(key) {
                Some(p) => p,
                None => self.new_partition()?,
            };
            self.fold_partition(&mut part, &times[start..end], start, &args, &mut values)?;
            self.partitions.insert(key.clone(), part);
            start = end;
        }
        let mut columns = sorted.columns().to_vec();
        let offset = columns.len();
        for (i, v) in values.into_iter().enumerate() {
            let want = self.def.schema.field(offset + i).data_type();
            let arr = ScalarValue::iter_to_array(v)?;
            columns.push(if arr.data_type() == want {
                arr
            } else {
                cast(&arr, want)?
            });
        }
        Ok(Some(RecordBatch::try_new(
            Arc::clone(&self.def.schema),
            columns,
        )?))
    }

    /// Fold one partition's ready rows (`times`, at `offset` in `args`) in
    /// order, appending each row's aggregate values to `values`.
    fn fold_partition(
        &self,
        part: &mut Partition,
        times: &[i64],
        offset: usize,
        args: &[&[ArrayRef]],
        values: &mut [Vec<ScalarValue>],
    ) -> Result<()> {
        let bounded = self.bounded();
        let mut i = 0;
        while i < times.len() {
            // A peer group (equal times) for RANGE; one row for ROWS.
            let mut j = i + 1;
            if matches!(self.def.frame, OverFrame::Range { .. }) {
                while j < times.len() && times[j] == times[i] {
                    j += 1;
                }
            }
            let (from, len) = (offset + i, j - i);
            for (acc, a) in part.accs.iter_mut().zip(args) {
                let slice: Vec<ArrayRef> = a.iter().map(|c| c.slice(from, len)).collect();
                acc.update_batch(&slice)?;
            }
            if bounded {
                for r in from..from + len {
                    part.rows.push_back(FrameRow {
                        time: times[r - offset],
                        args: args
                            .iter()
                            .map(|a| {
                                a.iter()
                                    .map(|c| ScalarValue::try_from_array(c, r))
                                    .collect::<datafusion::error::Result<Vec<_>>>()
                            })
                            .collect::<datafusion::error::Result<Vec<_>>>()?,
                    });
                }
            }
            match self.def.frame {
                OverFrame::Rows { preceding: Some(n) } => {
                    let keep = usize::try_from(n).unwrap_or(usize::MAX).saturating_add(1);
                    retract_while(part, |p| p.rows.len() > keep)?;
                }
                OverFrame::Range { preceding: Some(d) } => {
                    let low = times[i].saturating_sub(d);
                    retract_while(part, |p| p.rows.front().is_some_and(|r| r.time < low))?;
                }
                _ => {}
            }
            for (acc, out) in part.accs.iter_mut().zip(values.iter_mut()) {
                let v = acc.evaluate()?;
                out.extend(std::iter::repeat_n(v, len));
            }
            i = j;
        }
        // Later rows read only the last `n`: the current row need not stay.
        if let OverFrame::Rows { preceding: Some(n) } = self.def.frame {
            let keep = usize::try_from(n).unwrap_or(usize::MAX);
            retract_while(part, |p| p.rows.len() > keep)?;
        }
        Ok(())
    }

    /// Free what no future row's `RANGE` frame can reach: rows more than
    /// `d` before the oldest time a future row can have.
    fn expire(&mut self) -> Result<()> {
        let OverFrame::Range { preceding: Some(d) } = self.def.frame else {
            return Ok(());
        };
        if self.emitted_below == i64::MIN {
            return Ok(());
        }
        // Future rows have at least `emitted_below` ms; one ms of slack
        // covers the rounding of other units to milliseconds.
        let floor = if self.def.time_scale == (1, 1) {
            self.emitted_below
        } else {
            self.raw_floor(self.emitted_below.saturating_sub(1))
        };
        let low = floor.saturating_sub(d);
        let mut empty = Vec::new();
        for (k, p) in self.partitions.iter_mut() {
            if p.rows.back().is_some_and(|r| r.time < low) {
                empty.push(k.clone());
                continue;
            }
            retract_while(p, |p| p.rows.front().is_some_and(|r| r.time < low))?;
        }
        for k in empty {
            self.partitions.remove(&k);
        }
        Ok(())
    }

    /// The lowest raw time with at least `ms` milliseconds.
    fn raw_floor(&self, ms: i64) -> i64 {
        let (mul, div) = self.def.time_scale;
        ms.saturating_mul(div) / mul.max(1)
    }
}

/// Retract frame rows from the front while `more` holds.
fn retract_while(part: &mut Partition, more: impl Fn(&Partition) -> bool) -> Result<()> {
    let mut gone: Vec<FrameRow> = Vec::new();
    while more(part) {
        match part.rows.pop_front() {
            Some(r) => gone.push(r),
            None => break,
        }
    }
    if gone.is_empty() {
        return Ok(());
    }
    for (f, acc) in part.accs.iter_mut().enumerate() {
        let nargs = gone[0].args[f].len();
        let cols = (0..nargs)
            .map(|a| ScalarValue::iter_to_array(gone.iter().map(|r| r.args[f][a].clone())))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        acc.retract_batch(&cols)?;
    }
    Ok(())
}

const PART: &str = "over_part";

impl StatefulOperator for OverAggregate {
    fn kind(&self) -> &'static str {
        "over aggregate"
    }

    /// Keep the batch's rows until the watermark passes them; rows already
    /// passed (or without a time) are late and dropped.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        if batch.num_rows() == 0 {
            return Ok(vec![]);
        }
        let (_, ms) = self.times(&batch)?;
        let below = self.emitted_below;
        let keep: BooleanArray = ms
            .iter()
            .map(|t| Some(t.is_some_and(|t| t >= below)))
            .collect();
        let kept = keep.true_count();
        self.dropped_late += (batch.num_rows() - kept) as u64;
        if kept == 0 {
            return Ok(vec![]);
        }
        let batch = if kept == batch.num_rows() {
            self.pending_min = self.pending_min.min(min_ms(&ms));
            batch
        } else {
            let ms = arrow::compute::filter(&ms, &keep)?;
            self.pending_min = self
                .pending_min
                .min(min_ms(arrow::array::AsArray::as_primitive::<Int64Type>(
                    &ms,
                )));
            filter_record_batch(&batch, &keep)?
        };
        self.pending.push(RecordBatch::try_new(
            Arc::clone(&self.def.input_schema),
            batch.columns().to_vec(),
        )?);
        Ok(vec![])
    }

    /// Emit the rows the watermark passed, in event-time order per
    /// partition, and free what no later frame reads.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        let below = watermark.saturating_sub(self.def.time_lag_ms);
        let out = self.emit_below(below, watermark == i64::MAX)?;
        if below > self.emitted_below {
            self.emitted_below = below;
            self.expire()?;
        }
        Ok(out.into_iter().collect())
    }

    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        out.set("emitted_below", self.emitted_below);
        out.set("dropped_late", self.dropped_late);
        if !self.pending.is_empty() {
            let all = concat_batches(&self.def.input_schema, &self.pending)?;
            self.pending = vec![all.clone()];
            out.push(&tagged(all, "pending", "")?)?;
        }
        if self.partitions.is_empty() {
            return Ok(());
        }
        // Partitions in key order, so a snapshot is deterministic.
        let mut keys: Vec<Vec<u8>> = self.partitions.keys().cloned().collect();
        keys.sort();
        let bounded = self.bounded();
        let mut key_col: Vec<Vec<u8>> = Vec::new();
        let mut time_col: Vec<i64> = Vec::new();
        let mut widths: Vec<usize> = Vec::new();
        let mut cols: Vec<Vec<ScalarValue>> = Vec::new();
        for k in keys {
            let Some(p) = self.partitions.get_mut(&k) else {
                continue;
            };
            if bounded {
                for r in &p.rows {
                    key_col.push(k.clone());
                    time_col.push(r.time);
                    let flat: Vec<&ScalarValue> = r.args.iter().flatten().collect();
                    if widths.is_empty() {
                        widths = r.args.iter().map(Vec::len).collect();
                        cols = vec![Vec::new(); flat.len()];
                    }
                    for (c, v) in cols.iter_mut().zip(flat) {
                        c.push(v.clone());
                    }
                }
            } else {
                key_col.push(k.clone());
                let states = p
                    .accs
                    .iter_mut()
                    .map(|a| a.state())
                    .collect::<datafusion::error::Result<Vec<_>>>()?;
                if widths.is_empty() {
                    widths = states.iter().map(Vec::len).collect();
                    cols = vec![Vec::new(); widths.iter().sum()];
                }
                for (c, v) in cols.iter_mut().zip(states.into_iter().flatten()) {
                    c.push(v);
                }
            }
        }
        if key_col.is_empty() {
            return Ok(());
        }
        let mut fields = vec![Field::new("key", DataType::Binary, false)];
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(BinaryArray::from_iter_values(key_col))];
        if bounded {
            fields.push(Field::new("time", DataType::Int64, false));
            arrays.push(Arc::new(Int64Array::from(time_col)));
        }
        for (i, c) in cols.into_iter().enumerate() {
            let arr = ScalarValue::iter_to_array(c)?;
            fields.push(Field::new(format!("c{i}"), arr.data_type().clone(), true));
            arrays.push(arr);
        }
        let widths = widths
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        out.push(&tagged(
            batch,
            if bounded { "frame" } else { "state" },
            &widths,
        )?)?;
        Ok(())
    }

    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        self.emitted_below = snap.get("emitted_below")?;
        self.dropped_late = snap.get("dropped_late")?;
        self.pending.clear();
        self.pending_min = i64::MAX;
        self.partitions.clear();
        for part in snap.parts() {
            let meta = part.schema().metadata().clone();
            let widths: Vec<usize> = meta
                .get("widths")
                .map(|w| w.split(',').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_default();
            match meta.get(PART).map(String::as_str) {
                Some("pending") => {
                    let batch = RecordBatch::try_new(
                        Arc::clone(&self.def.input_schema),
                        part.columns().to_vec(),
                    )?;
                    self.pending_min = self.pending_min.min(min_ms(&self.times(&batch)?.1));
                    self.pending.push(batch);
                }
                Some("frame") => self.restore_frames(part, &widths)?,
                Some("state") => self.restore_states(part, &widths)?,
                _ => return Err(damaged("a part of unknown kind")),
            }
        }
        Ok(())
    }

    fn dropped_late(&self) -> u64 {
        self.dropped_late
    }
}

impl OverAggregate {
    /// Rebuild bounded frames: each partition's rows, oldest first, are
    /// added to fresh sliding accumulators.
    fn restore_frames(&mut self, part: &RecordBatch, widths: &[usize]) -> Result<()> {
        let keys = binary(part, 0)?;
        let times = arrow::array::AsArray::as_primitive_opt::<Int64Type>(part.column(1))
            .ok_or_else(|| damaged("frame times are not BIGINT"))?
            .clone();
        let args = &part.columns()[2..];
        let mut start = 0;
        while start < part.num_rows() {
            let mut end = start + 1;
            while end < part.num_rows() && keys.value(end) == keys.value(start) {
                end += 1;
            }
            let mut p = self.new_partition()?;
            let mut col = 0;
            for (acc, w) in p.accs.iter_mut().zip(widths) {
                let slice: Vec<ArrayRef> = args
                    .get(col..col + w)
                    .ok_or_else(|| damaged("frame columns missing"))?
                    .iter()
                    .map(|c| c.slice(start, end - start))
                    .collect();
                acc.update_batch(&slice)?;
                col += w;
            }
            for r in start..end {
                let mut row_args = Vec::with_capacity(widths.len());
                let mut col = 0;
                for w in widths {
                    row_args.push(
                        args[col..col + w]
                            .iter()
                            .map(|c| ScalarValue::try_from_array(c, r))
                            .collect::<datafusion::error::Result<Vec<_>>>()?,
                    );
                    col += w;
                }
                p.rows.push_back(FrameRow {
                    time: times.value(r),
                    args: row_args,
                });
            }
            self.partitions.insert(keys.value(start).to_vec(), p);
            start = end;
        }
        Ok(())
    }

    /// Rebuild running accumulators from their states.
    fn restore_states(&mut self, part: &RecordBatch, widths: &[usize]) -> Result<()> {
        let keys = binary(part, 0)?;
        let states = &part.columns()[1..];
        for r in 0..part.num_rows() {
            let mut p = self.new_partition()?;
            let mut col = 0;
            for (acc, w) in p.accs.iter_mut().zip(widths) {
                let slice: Vec<ArrayRef> = states
                    .get(col..col + w)
                    .ok_or_else(|| damaged("state columns missing"))?
                    .iter()
                    .map(|c| c.slice(r, 1))
                    .collect();
                acc.merge_batch(&slice)?;
                col += w;
            }
            self.partitions.insert(keys.value(r).to_vec(), p);
        }
        Ok(())
    }
}

/// The lowest non-null time of an array (`i64::MAX` when none).
fn min_ms(ms: &Int64Array) -> i64 {
    arrow::compute::min(ms).unwrap_or(i64::MAX)
}

/// A snapshot part with its kind (and column widths) in the schema metadata.
fn tagged(batch: RecordBatch, kind: &str, widths: &str) -> Result<RecordBatch> {
    let mut meta = std::collections::HashMap::new();
    meta.insert(PART.to_string(), kind.to_string());
    meta.insert("widths".to_string(), widths.to_string());
    let schema = batch.schema().as_ref().clone().with_metadata(meta);
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        batch.columns().to_vec(),
    )?)
}

fn binary(part: &RecordBatch, i: usize) -> Result<BinaryArray> {
    arrow::array::AsArray::as_binary_opt::<i32>(part.column(i))
        .cloned()
        .ok_or_else(|| damaged("partition keys are not binary"))
}

fn damaged(what: &str) -> EngineError {
    EngineError::Internal(format!("damaged over aggregate snapshot: {what}"))
}

#[cfg(test)]
#[path = "over_tests.rs"]
mod tests;
