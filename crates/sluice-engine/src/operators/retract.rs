//! `GROUP BY` over a changelog input: an updating aggregate whose input
//! retracts rows as well as inserting them.
//!
//! Most aggregate functions cannot take a value back (a maximum forgets the
//! values below it), so each group keeps the multiset of its live input rows
//! (in Arrow's row format, with a count) and a touched group's aggregates
//! are recomputed from them at the end of the cycle. That costs the group's
//! size per touched group per cycle, and is exact for every aggregate,
//! including `MAX`, `MIN` and `COUNT(DISTINCT ...)`. Output is a changelog:
//! a changed group retracts its previous row and inserts the new one; a
//! group whose rows were all retracted retracts its row.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BinaryArray, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::EmitTo;
use rustc_hash::{FxHashMap, FxHashSet};

use super::changelog::{output_batch, Op, INSERT};
use super::expr::{eval, PhysExpr};
use super::groups::{AggregateFunctions, KeyCodec, KeyRows};
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::{EngineError, Result};
use crate::state::layers::{Base, KeyedChanges, Layers};
use crate::state::{SnapshotReader, SnapshotWriter};

/// One group: its live input rows and the row it last emitted.
#[derive(Default)]
struct Group {
    live: FxHashMap<Vec<u8>, u64>,
    emitted: Option<Vec<ScalarValue>>,
}

/// The operator.
pub struct ChangelogAggregate {
    keys: Vec<PhysExpr>,
    codec: KeyCodec,
    funcs: AggregateFunctions,
    /// The input's columns; the change column is at `change_index`.
    input_schema: SchemaRef,
    change_index: usize,
    /// Encodes a whole input row (change column excluded).
    rows: RowConverter,
    groups: FxHashMap<Vec<u8>, Group>,
    /// Groups touched this cycle, in first-touch order.
    touched: Vec<Vec<u8>>,
    touched_set: FxHashSet<Vec<u8>>,
    schema: SchemaRef,
    /// Groups changed since the last capture; None until the first capture
    /// or restore (a pipeline that never checkpoints tracks nothing).
    changed: Option<FxHashSet<Vec<u8>>>,
    /// The checkpoint's copy of the live rows, built off the compute thread
    /// (see [`crate::state::layers`]).
    layers: Arc<Layers<LiveRowsBase>>,
}

/// A group's live rows: (row in Arrow's row format, count).
type LiveRows = Vec<(Vec<u8>, u64)>;

/// Every group's live rows as of the last capture.
#[derive(Default)]
struct LiveRowsBase {
    groups: BTreeMap<Vec<u8>, LiveRows>,
}

impl Base for LiveRowsBase {
    type Delta = KeyedChanges<LiveRows>;

    fn absorb(&mut self, delta: KeyedChanges<LiveRows>) -> Result<()> {
        delta.apply(&mut self.groups);
        Ok(())
    }
}

impl LiveRowsBase {
    /// The snapshot batches: (key, row, count) for every live row, cut
    /// after a key once a batch has [`ROWS_PER_BATCH`] rows, with a pace
    /// point after each (so a checkpoint tail copies no large state in one
    /// step); at least one.
    fn batches(&self) -> Result<Vec<RecordBatch>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Binary, false),
            Field::new("row", DataType::Binary, false),
            Field::new("count", DataType::UInt64, false),
        ]));
        let mut out = Vec::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut rows: Vec<&[u8]> = Vec::new();
        let mut counts: Vec<u64> = Vec::new();
        let cut = |keys: &mut Vec<&[u8]>, rows: &mut Vec<&[u8]>, counts: &mut Vec<u64>| {
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(BinaryArray::from(std::mem::take(keys))),
                    Arc::new(BinaryArray::from(std::mem::take(rows))),
                    Arc::new(UInt64Array::from(std::mem::take(counts))),
                ],
            );
            crate::state::pace::point();
            batch
        };
        for (key, live) in &self.groups {
            for (row, n) in live {
                keys.push(key);
                rows.push(row);
                counts.push(*n);
            }
            if keys.len() >= ROWS_PER_BATCH {
                out.push(cut(&mut keys, &mut rows, &mut counts)?);
            }
        }
        if !keys.is_empty() || out.is_empty() {
            out.push(cut(&mut keys, &mut rows, &mut counts)?);
        }
        Ok(out)
    }
}

/// Rows per snapshot batch of live rows.
const ROWS_PER_BATCH: usize = 65_536;

fn live_rows(g: &Group) -> LiveRows {
    g.live.iter().map(|(r, n)| (r.clone(), *n)).collect()
}

fn damaged(what: &str) -> EngineError {
    EngineError::Internal(format!("changelog aggregate snapshot: {what}"))
}

impl ChangelogAggregate {
    /// A new operator over `input_schema`, whose change column is at
    /// `change_index`.
    pub fn new(
        keys: Vec<PhysExpr>,
        codec: KeyCodec,
        funcs: AggregateFunctions,
        input_schema: SchemaRef,
        change_index: usize,
        schema: SchemaRef,
    ) -> Result<Self> {
        let fields = input_schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != change_index)
            .map(|(_, f)| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Self {
            keys,
            codec,
            funcs,
            rows: RowConverter::new(fields)?,
            input_schema,
            change_index,
            groups: FxHashMap::default(),
            touched: Vec::new(),
            touched_set: FxHashSet::default(),
            schema,
            changed: None,
            layers: Layers::new(LiveRowsBase::default()),
        })
    }

    fn data_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        batch
            .columns()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.change_index)
            .map(|(_, c)| Arc::clone(c))
            .collect()
    }

    fn touch(&mut self, key: &[u8]) {
        if self.touched_set.insert(key.to_vec()) {
            self.touched.push(key.to_vec());
            if let Some(changed) = &mut self.changed {
                changed.insert(key.to_vec());
            }
        }
    }

    /// Apply a batch of inserts and retractions.
    fn fold(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let key_cols = self
            .keys
            .iter()
            .map(|k| eval(k, batch))
            .collect::<Result<Vec<_>>>()?;
        let keys = self.codec.encode(&key_cols, batch.num_rows())?;
        let rows = self.rows.convert_columns(&self.data_columns(batch))?;
        let change = batch
            .column(self.change_index)
            .as_string_opt::<i32>()
            .ok_or_else(|| EngineError::Schema("the change column is not text".into()))?;
        for i in 0..batch.num_rows() {
            let key = match &keys {
                KeyRows::Rows(r) => r.row(i).as_ref().to_vec(),
                KeyRows::Unit(_) => Vec::new(),
            };
            let row = rows.row(i).as_ref().to_vec();
            let op = Op::at(change, i);
            self.touch(&key);
            let group = self.groups.entry(key).or_default();
            if op == Op::Retract {
                match group.live.get_mut(&row) {
                    Some(n) if *n > 1 => *n -= 1,
                    Some(_) => {
                        group.live.remove(&row);
                    }
                    None => {
                        return Err(EngineError::Schema(
                            "the input retracted a row it never inserted".into(),
                        ))
                    }
                }
            } else {
                *group.live.entry(row).or_default() += 1;
            }
        }
        Ok(())
    }

    /// The aggregates of one group's live rows.
    fn compute(&self, group: &Group) -> Result<Vec<ScalarValue>> {
        let mut rows = self.rows.empty_rows(group.live.len(), 0);
        let parser = self.rows.parser();
        for (row, n) in &group.live {
            for _ in 0..*n {
                rows.push(parser.parse(row));
            }
        }
        let mut cols = self.rows.convert_rows(&rows)?;
        let n = rows.num_rows();
        let change: ArrayRef = Arc::new(StringArray::from(vec![INSERT; n]));
        cols.insert(self.change_index, change);
        let batch = RecordBatch::try_new(Arc::clone(&self.input_schema), cols)?;
        let inputs = self.funcs.evaluate_inputs(&batch)?;
        let groups = vec![0usize; n];
        let mut out = Vec::with_capacity(inputs.len());
        for (mut acc, (values, filter)) in self.funcs.accumulators()?.into_iter().zip(inputs) {
            acc.update_batch(&values, &groups, filter.as_ref(), 1)?;
            let v = acc.evaluate(EmitTo::All)?;
            out.push(ScalarValue::try_from_array(v.as_ref(), 0)?);
        }
        Ok(out)
    }

    /// This cycle's changes: retractions of changed groups' previous rows,
    /// then inserts of their current rows, in one batch.
    fn emit_changes(&mut self) -> Result<Vec<RecordBatch>> {
        let touched = std::mem::take(&mut self.touched);
        self.touched_set.clear();
        let mut retract: Vec<(Vec<u8>, Vec<ScalarValue>)> = Vec::new();
        let mut insert: Vec<(Vec<u8>, Vec<ScalarValue>)> = Vec::new();
        for key in touched {
            let Some(group) = self.groups.get(&key) else {
                continue;
            };
            let current = if group.live.is_empty() {
                None
            } else {
                Some(self.compute(group)?)
            };
            if current == group.emitted {
                continue;
            }
            if let Some(old) = &group.emitted {
                retract.push((key.clone(), old.clone()));
            }
            match current {
                Some(new) => {
                    insert.push((key.clone(), new.clone()));
                    if let Some(g) = self.groups.get_mut(&key) {
                        g.emitted = Some(new);
                    }
                }
                None => {
                    self.groups.remove(&key);
                }
            }
        }
        if retract.is_empty() && insert.is_empty() {
            return Ok(vec![]);
        }
        let kinds: Vec<Op> = std::iter::repeat_n(Op::Retract, retract.len())
            .chain(std::iter::repeat_n(Op::Insert, insert.len()))
            .collect();
        let all: Vec<(Vec<u8>, Vec<ScalarValue>)> = retract.into_iter().chain(insert).collect();
        let mut columns = self.key_columns(all.iter().map(|(k, _)| k.as_slice()))?;
        for f in 0..self.funcs.len() {
            columns.push(ScalarValue::iter_to_array(
                all.iter().map(|(_, v)| v[f].clone()),
            )?);
        }
        Ok(vec![output_batch(&self.schema, columns, Some(&kinds))?])
    }

    fn key_columns<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        let Some(parser) = self.codec.parser() else {
            return Ok(vec![]);
        };
        let KeyRows::Rows(mut rows) = self.codec.empty() else {
            return Ok(vec![]);
        };
        let mut n = 0;
        for k in keys {
            rows.push(parser.parse(k));
            n += 1;
        }
        self.codec
            .decode(&KeyRows::Rows(rows), &(0..n).collect::<Vec<_>>())
    }
}

impl StatefulOperator for ChangelogAggregate {
    fn kind(&self) -> &'static str {
        "changelog aggregate"
    }

    /// Apply a batch of inserts and retractions; returns nothing (changes
    /// are emitted once per cycle by [`Self::advance`]). Retracting a row
    /// that was never inserted is an error.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        self.fold(&batch)?;
        Ok(vec![])
    }

    /// Emit this cycle's changes (see the module docs); the watermark does
    /// not matter, since a non-windowed group never closes.
    fn advance(&mut self, _watermark: i64) -> Result<Vec<RecordBatch>> {
        self.emit_changes()
    }

    /// Hand the groups changed since the last capture to the checkpoint's
    /// copy (every group, the first time); the tail writes every group's
    /// live rows from it.
    fn snapshot(&mut self, w: &mut SnapshotWriter) -> Result<()> {
        let delta = match self.changed.replace(FxHashSet::default()) {
            None => KeyedChanges {
                replace_all: true,
                entries: self
                    .groups
                    .iter()
                    .map(|(k, g)| (k.clone(), Some(live_rows(g))))
                    .collect(),
            },
            Some(keys) => KeyedChanges {
                replace_all: false,
                entries: keys
                    .into_iter()
                    .map(|k| {
                        let rows = self.groups.get(&k).map(live_rows);
                        (k, rows)
                    })
                    .collect(),
            },
        };
        self.layers.queue(delta);
        let mut parts = self.layers.capture(
            1,
            Box::new(|base: &mut LiveRowsBase| Ok(vec![base.batches()?])),
        );
        if let Some(part) = parts.pop() {
            w.push_deferred(part);
        }
        Ok(())
    }

    /// Restore the live rows and recompute what each group last emitted.
    fn restore(&mut self, r: &SnapshotReader) -> Result<()> {
        let part = r.parts().first().ok_or_else(|| damaged("empty"))?;
        if part.num_columns() != 3 {
            return Err(damaged("wrong columns"));
        }
        let keys = part
            .column(0)
            .as_binary_opt::<i32>()
            .ok_or_else(|| damaged("keys"))?;
        let rows = part
            .column(1)
            .as_binary_opt::<i32>()
            .ok_or_else(|| damaged("rows"))?;
        let counts = part
            .column(2)
            .as_primitive_opt::<arrow::datatypes::UInt64Type>()
            .ok_or_else(|| damaged("counts"))?;
        self.groups.clear();
        self.changed = Some(FxHashSet::default());
        let mut base = LiveRowsBase::default();
        for i in 0..part.num_rows() {
            base.groups
                .entry(keys.value(i).to_vec())
                .or_default()
                .push((rows.value(i).to_vec(), counts.value(i)));
        }
        self.layers = Layers::new(base);
        for i in 0..part.num_rows() {
            self.groups
                .entry(keys.value(i).to_vec())
                .or_default()
                .live
                .insert(rows.value(i).to_vec(), counts.value(i));
        }
        let keys: Vec<Vec<u8>> = self.groups.keys().cloned().collect();
        for key in keys {
            let emitted = match self.groups.get(&key) {
                Some(g) => Some(self.compute(g)?),
                None => None,
            };
            if let Some(g) = self.groups.get_mut(&key) {
                g.emitted = emitted;
            }
        }
        Ok(())
    }
}
