//! Group keys and the grouped accumulators of one aggregation scope.
//!
//! A scope is one window instance (tumble/hop), or the whole non-windowed
//! aggregate. Keys are encoded with Arrow's row format and interned into a
//! hash table, so a batch is mapped to group indices in one vectorized pass;
//! aggregate state lives in DataFusion `GroupsAccumulator`s (row accumulators
//! are adapted for the functions that lack a grouped form), so every
//! DataFusion aggregate works incrementally.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::take;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::DFSchema;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{EmitTo, Expr, GroupsAccumulator};
use datafusion::physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use datafusion::physical_expr::GroupsAccumulatorAdapter;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::changelog::Op;
use super::expr::{eval, eval_predicate, PhysExpr};
use super::named::{NamedGroups, NamedRow};
use crate::error::{EngineError, Result};

/// Encodes key columns into comparable rows; handles the no-key case.
pub struct KeyCodec {
    converter: Option<RowConverter>,
}

impl KeyCodec {
    /// A codec for keys of these types (none = one global group).
    pub fn new(types: &[arrow::datatypes::DataType]) -> Result<Self> {
        let converter = if types.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                types.iter().map(|t| SortField::new(t.clone())).collect(),
            )?)
        };
        Ok(Self { converter })
    }

    /// Encode key columns (`num_rows` rows).
    pub fn encode(&self, columns: &[ArrayRef], num_rows: usize) -> Result<KeyRows> {
        Ok(match &self.converter {
            Some(c) => KeyRows::Rows(c.convert_columns(columns)?),
            None => KeyRows::Unit(num_rows),
        })
    }

    /// A parser turning stored row bytes back into rows (None without keys).
    pub fn parser(&self) -> Option<arrow::row::RowParser> {
        self.converter.as_ref().map(|c| c.parser())
    }

    /// An empty row buffer for interned keys.
    pub fn empty(&self) -> KeyRows {
        match &self.converter {
            Some(c) => KeyRows::Rows(c.empty_rows(0, 0)),
            None => KeyRows::Unit(0),
        }
    }

    /// Decode the keys at `indices` of `rows` back into columns.
    pub fn decode(&self, rows: &KeyRows, indices: &[usize]) -> Result<Vec<ArrayRef>> {
        match (&self.converter, rows) {
            (Some(c), KeyRows::Rows(r)) => Ok(c.convert_rows(indices.iter().map(|i| r.row(*i)))?),
            _ => Ok(vec![]),
        }
    }
}

/// Encoded keys of a batch or of a group table.
pub enum KeyRows {
    /// Arrow row-format keys.
    Rows(Rows),
    /// No key columns: every row is the single global group.
    Unit(usize),
}

/// Maps encoded keys to dense group indices.
pub struct GroupTable {
    keys: KeyRows,
    table: HashTable<(u64, usize)>,
    hasher: FxBuildHasher,
}

impl GroupTable {
    /// An empty table.
    pub fn new(codec: &KeyCodec) -> Self {
        Self {
            keys: codec.empty(),
            table: HashTable::new(),
            hasher: FxBuildHasher,
        }
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        match &self.keys {
            KeyRows::Rows(r) => r.num_rows(),
            KeyRows::Unit(n) => *n,
        }
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The interned keys, in group-index order.
    pub fn keys(&self) -> &KeyRows {
        &self.keys
    }

    /// Group index of each selected row of `batch_keys`, interning new keys.
    pub fn intern(&mut self, batch_keys: &KeyRows, rows: Option<&[u32]>, out: &mut Vec<usize>) {
        out.clear();
        match (batch_keys, &mut self.keys) {
            (KeyRows::Unit(n), KeyRows::Unit(groups)) => {
                let count = rows.map_or(*n, |r| r.len());
                if count > 0 && *groups == 0 {
                    *groups = 1;
                }
                out.resize(count, 0);
            }
            (KeyRows::Rows(batch), KeyRows::Rows(keys)) => {
                let mut one = |i: usize| {
                    let row = batch.row(i);
                    let bytes = row.as_ref();
                    let mut h = self.hasher.build_hasher();
                    h.write(bytes);
                    let hash = h.finish();
                    let found = self.table.find(hash, |(eh, idx)| {
                        *eh == hash && keys.row(*idx).as_ref() == bytes
                    });
                    let idx = match found {
                        Some((_, idx)) => *idx,
                        None => {
                            let idx = keys.num_rows();
                            keys.push(row);
                            self.table.insert_unique(hash, (hash, idx), |(h, _)| *h);
                            idx
                        }
                    };
                    out.push(idx);
                };
                match rows {
                    Some(r) => r.iter().for_each(|i| one(*i as usize)),
                    None => (0..batch.num_rows()).for_each(&mut one),
                }
            }
            _ => {}
        }
    }
}

/// One aggregate function of a GROUP BY, lowered once.
pub struct AggregateFunction {
    /// The output column it computes, for errors.
    column: Arc<str>,
    expr: Arc<AggregateFunctionExpr>,
    inputs: Vec<PhysExpr>,
    filter: Option<PhysExpr>,
}

/// Inputs of every aggregate function, evaluated over one batch.
pub type AggregateInputs = Vec<(Vec<ArrayRef>, Option<BooleanArray>)>;

/// The aggregate functions of one GROUP BY.
pub struct AggregateFunctions {
    funcs: Vec<AggregateFunction>,
}

impl AggregateFunctions {
    /// Lower logical aggregate expressions against the aggregation input;
    /// `columns` names the output column of each (for errors).
    pub fn lower(aggregates: &[Expr], input: &DFSchema, columns: &[String]) -> Result<Self> {
        let props = ExecutionProps::new();
        let ctx = PhysicalPlanningContext::default();
        let physical_schema = input.as_arrow().clone();
        let mut funcs = Vec::with_capacity(aggregates.len());
        for (i, e) in aggregates.iter().enumerate() {
            let lowered = LoweredAggregateBuilder::new(e, input, &physical_schema, &props, &ctx)
                .build()
                .map_err(|err| EngineError::exec(format!("aggregate {e}"), err))?;
            // Arguments are evaluated here, not by DataFusion: make their
            // integer arithmetic checked like every other expression.
            let inputs = lowered
                .aggregate
                .expressions()
                .into_iter()
                .chain(lowered.order_bys.iter().map(|s| Arc::clone(&s.expr)))
                .map(|x| sluice_sql::checked::binary::fail_on_overflow(x, &physical_schema))
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            let column: Arc<str> = match columns.get(i) {
                Some(c) => Arc::from(c.as_str()),
                None => Arc::from(e.schema_name().to_string()),
            };
            // Some arguments are only validated when an accumulator is
            // created: do it once here so the statement is refused at
            // CREATE instead of halting the pipeline when data arrives.
            sluice_sql::accumulators::probe(&lowered.aggregate, &column)?;
            funcs.push(AggregateFunction {
                column,
                expr: lowered.aggregate,
                inputs,
                filter: lowered.filter,
            });
        }
        Ok(Self { funcs })
    }

    /// Evaluate every function's arguments (and FILTER) over a batch.
    pub fn evaluate_inputs(&self, batch: &RecordBatch) -> Result<AggregateInputs> {
        self.funcs
            .iter()
            .map(|f| {
                let values = f
                    .inputs
                    .iter()
                    .map(|e| eval(e, batch).map_err(|err| err.in_column(&f.column)))
                    .collect::<Result<Vec<_>>>()?;
                let filter = f
                    .filter
                    .as_ref()
                    .map(|p| eval_predicate(p, batch).map_err(|err| err.in_column(&f.column)))
                    .transpose()?;
                Ok((values, filter))
            })
            .collect()
    }

    /// Fresh grouped accumulators, one per function.
    pub fn accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        self.funcs
            .iter()
            .map(|f| {
                let acc: Box<dyn GroupsAccumulator> = if f.expr.groups_accumulator_supported() {
                    f.expr.create_groups_accumulator()?
                } else {
                    let expr = Arc::clone(&f.expr);
                    Box::new(GroupsAccumulatorAdapter::new(move || {
                        expr.create_accumulator()
                    }))
                };
                let named: Box<dyn GroupsAccumulator> =
                    Box::new(NamedGroups(acc, Arc::clone(&f.column)));
                Ok(named)
            })
            .collect()
    }

    /// Fresh row accumulators (used by session windows, which merge).
    pub fn row_accumulators(&self) -> Result<Vec<Box<dyn datafusion::logical_expr::Accumulator>>> {
        self.funcs
            .iter()
            .map(|f| {
                let acc: Box<dyn datafusion::logical_expr::Accumulator> = Box::new(NamedRow(
                    f.expr.create_accumulator()?,
                    Arc::clone(&f.column),
                ));
                Ok(acc)
            })
            .collect()
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// Result type of each function.
    pub fn output_types(&self) -> Result<Vec<arrow::datatypes::DataType>> {
        Ok(self
            .funcs
            .iter()
            .map(|f| f.expr.field().data_type().clone())
            .collect())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }
}

/// Select rows of an evaluated input (None keeps all).
pub fn select_inputs(inputs: &AggregateInputs, rows: Option<&[u32]>) -> Result<AggregateInputs> {
    let Some(rows) = rows else {
        return Ok(inputs.clone());
    };
    let idx = UInt32Array::from(rows.to_vec());
    inputs
        .iter()
        .map(|(values, filter)| {
            let values = values
                .iter()
                .map(|v| Ok(take(v.as_ref(), &idx, None)?))
                .collect::<Result<Vec<_>>>()?;
            let filter = filter
                .as_ref()
                .map(|f| -> Result<BooleanArray> {
                    let t = take(f, &idx, None)?;
                    Ok(arrow::array::AsArray::as_boolean(&t).clone())
                })
                .transpose()?;
            Ok((values, filter))
        })
        .collect()
}

/// A scope's state as one batch: key columns, then each aggregate's state
/// columns (`widths` of them), then the last emitted values when present.
pub struct ScopeSnapshot {
    /// The columns.
    pub batch: RecordBatch,
    /// State columns per aggregate function.
    pub widths: Vec<usize>,
    /// Groups with an emitted row (changelog mode), if any were emitted.
    pub emitted_len: Option<usize>,
}

impl ScopeSnapshot {
    /// The batch with `widths`, `emitted_len` and `extra` in its schema metadata.
    pub fn to_batch(&self, extra: &[(&str, String)]) -> Result<RecordBatch> {
        let mut meta = std::collections::HashMap::new();
        let widths: Vec<String> = self.widths.iter().map(|w| w.to_string()).collect();
        meta.insert("widths".to_string(), widths.join(","));
        if let Some(e) = self.emitted_len {
            meta.insert("emitted_len".to_string(), e.to_string());
        }
        for (k, v) in extra {
            meta.insert(k.to_string(), v.clone());
        }
        let schema = self.batch.schema().as_ref().clone().with_metadata(meta);
        Ok(self.batch.clone().with_schema(Arc::new(schema))?)
    }

    /// Read back what [`Self::to_batch`] wrote.
    pub fn from_batch(batch: &RecordBatch) -> Result<Self> {
        let schema = batch.schema();
        let meta = schema.metadata();
        let bad = || EngineError::Internal("damaged aggregate snapshot metadata".into());
        let widths = match meta.get("widths").map(String::as_str) {
            Some("") => vec![],
            Some(w) => w
                .split(',')
                .map(|x| x.parse::<usize>().map_err(|_| bad()))
                .collect::<Result<Vec<_>>>()?,
            None => return Err(bad()),
        };
        let emitted_len = match meta.get("emitted_len") {
            Some(v) => Some(v.parse().map_err(|_| bad())?),
            None => None,
        };
        Ok(Self {
            batch: batch.clone(),
            widths,
            emitted_len,
        })
    }
}

/// A changelog slice: key columns, aggregate columns, and each row's kind.
pub type Changes = (Vec<ArrayRef>, Vec<ArrayRef>, Vec<Op>);

/// Keys plus grouped accumulators for one aggregation scope.
pub struct GroupedAggregates {
    groups: GroupTable,
    accs: Vec<Box<dyn GroupsAccumulator>>,
    touched: Vec<bool>,
    any_touched: bool,
    /// Last emitted aggregate values per group (changelog mode only).
    emitted: Option<Vec<ArrayRef>>,
    scratch: Vec<usize>,
}

impl GroupedAggregates {
    /// An empty scope.
    pub fn new(codec: &KeyCodec, funcs: &AggregateFunctions) -> Result<Self> {
        Ok(Self {
            groups: GroupTable::new(codec),
            accs: funcs.accumulators()?,
            touched: Vec::new(),
            any_touched: false,
            emitted: None,
            scratch: Vec::new(),
        })
    }

    /// Fold the selected rows of a batch into the accumulators.
    pub fn update(
        &mut self,
        keys: &KeyRows,
        rows: Option<&[u32]>,
        inputs: &AggregateInputs,
    ) -> Result<()> {
        let mut idx = std::mem::take(&mut self.scratch);
        self.groups.intern(keys, rows, &mut idx);
        let n = self.groups.len();
        if self.touched.len() < n {
            self.touched.resize(n, false);
        }
        for g in &idx {
            self.touched[*g] = true;
        }
        self.any_touched |= !idx.is_empty();
        let selected = select_inputs(inputs, rows)?;
        for (acc, (values, filter)) in self.accs.iter_mut().zip(selected.iter()) {
            acc.update_batch(values, &idx, filter.as_ref(), n)?;
        }
        self.scratch = idx;
        Ok(())
    }

    /// Copy out every group's key and intermediate aggregate state (and, in
    /// changelog mode, the last emitted values) without disturbing it.
    pub fn snapshot(&mut self, codec: &KeyCodec) -> Result<ScopeSnapshot> {
        let n = self.groups.len();
        let all: Vec<usize> = (0..n).collect();
        let mut cols = codec.decode(self.groups.keys(), &all)?;
        let mut widths = Vec::with_capacity(self.accs.len());
        for acc in self.accs.iter_mut() {
            let state = acc.state(EmitTo::All)?;
            acc.merge_batch(&state, &all, n)?;
            widths.push(state.len());
            cols.extend(state);
        }
        let emitted_len = match &self.emitted {
            Some(prev) => {
                let len = prev.first().map_or(0, |a| a.len());
                for a in prev {
                    let pad = arrow::array::new_null_array(a.data_type(), n - len);
                    cols.push(arrow::compute::concat(&[a.as_ref(), pad.as_ref()])?);
                }
                Some(len)
            }
            None => None,
        };
        let fields: Vec<arrow::datatypes::Field> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| {
                arrow::datatypes::Field::new(format!("c{i}"), c.data_type().clone(), true)
            })
            .collect();
        let opts = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n));
        let batch = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::new(fields)),
            cols,
            &opts,
        )?;
        Ok(ScopeSnapshot {
            batch,
            widths,
            emitted_len,
        })
    }

    /// Rebuild a scope from [`Self::snapshot`]'s output.
    pub fn restore(
        codec: &KeyCodec,
        funcs: &AggregateFunctions,
        nkeys: usize,
        snap: &ScopeSnapshot,
    ) -> Result<Self> {
        let mut scope = Self::new(codec, funcs)?;
        let n = snap.batch.num_rows();
        let cols = snap.batch.columns();
        let keys = codec.encode(&cols[..nkeys], n)?;
        let mut idx = Vec::new();
        scope.groups.intern(&keys, None, &mut idx);
        let groups = scope.groups.len();
        let mut off = nkeys;
        for (acc, w) in scope.accs.iter_mut().zip(snap.widths.iter()) {
            let end = off + w;
            let state = cols.get(off..end).ok_or_else(|| {
                EngineError::Internal("aggregate snapshot is missing state columns".into())
            })?;
            acc.merge_batch(state, &idx, groups)?;
            off = end;
        }
        if let Some(len) = snap.emitted_len {
            scope.emitted = Some(cols[off..].iter().map(|c| c.slice(0, len)).collect());
        }
        scope.touched = vec![false; groups];
        Ok(scope)
    }

    /// Whether any group changed since the last [`Self::changes`].
    pub fn is_touched(&self) -> bool {
        self.any_touched
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Final values of every group, consuming the scope: (keys, aggregates).
    pub fn finish(mut self, codec: &KeyCodec) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>, usize)> {
        let n = self.groups.len();
        let all: Vec<usize> = (0..n).collect();
        let keys = codec.decode(self.groups.keys(), &all)?;
        let values = self
            .accs
            .iter_mut()
            .map(|a| Ok(a.evaluate(EmitTo::All)?))
            .collect::<Result<Vec<_>>>()?;
        Ok((keys, values, n))
    }

    /// Current values of all groups without consuming state.
    fn current_values(&mut self, funcs: &AggregateFunctions) -> Result<Vec<ArrayRef>> {
        let n = self.groups.len();
        let identity: Vec<usize> = (0..n).collect();
        let mut fresh = funcs.accumulators()?;
        let mut out = Vec::with_capacity(self.accs.len());
        for (acc, tmp) in self.accs.iter_mut().zip(fresh.iter_mut()) {
            let state = acc.state(EmitTo::All)?;
            acc.merge_batch(&state, &identity, n)?;
            tmp.merge_batch(&state, &identity, n)?;
            out.push(tmp.evaluate(EmitTo::All)?);
        }
        Ok(out)
    }

    /// The changelog since the last call: for each touched group, a
    /// retraction of its previously emitted row (if any) and an insert of its
    /// current row. Returns (keys, aggregates, kinds), retractions first, or
    /// None if nothing changed.
    pub fn changes(
        &mut self,
        codec: &KeyCodec,
        funcs: &AggregateFunctions,
    ) -> Result<Option<Changes>> {
        if !self.any_touched {
            return Ok(None);
        }
        let current = self.current_values(funcs)?;
        let prev_len = self
            .emitted
            .as_ref()
            .map_or(0, |e| e.first().map_or(0, |a| a.len()));
        let touched: Vec<usize> = (0..self.groups.len())
            .filter(|g| self.touched[*g])
            .collect();
        let retract: Vec<usize> = touched.iter().copied().filter(|g| *g < prev_len).collect();
        let mut key_idx = retract.clone();
        key_idx.extend(&touched);
        let keys = codec.decode(self.groups.keys(), &key_idx)?;
        let retract_idx = UInt32Array::from(retract.iter().map(|g| *g as u32).collect::<Vec<_>>());
        let insert_idx = UInt32Array::from(touched.iter().map(|g| *g as u32).collect::<Vec<_>>());
        let mut values = Vec::with_capacity(current.len());
        for (i, cur) in current.iter().enumerate() {
            let new_part = take(cur.as_ref(), &insert_idx, None)?;
            let col = match &self.emitted {
                Some(prev) if !retract.is_empty() => {
                    let old_part = take(prev[i].as_ref(), &retract_idx, None)?;
                    arrow::compute::concat(&[old_part.as_ref(), new_part.as_ref()])?
                }
                _ => new_part,
            };
            values.push(col);
        }
        let mut kinds = vec![Op::Retract; retract.len()];
        kinds.extend(std::iter::repeat_n(Op::Insert, touched.len()));
        self.emitted = Some(current);
        self.touched.iter_mut().for_each(|t| *t = false);
        self.any_touched = false;
        Ok(Some((keys, values, kinds)))
    }
}
