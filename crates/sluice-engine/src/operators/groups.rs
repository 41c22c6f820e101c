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

use arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::take;
use arrow::record_batch::RecordBatch;
use arrow::row::{Row, RowConverter, Rows, SortField};
use datafusion::common::DFSchema;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, GroupsAccumulator};
use datafusion::physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use datafusion::physical_expr::GroupsAccumulatorAdapter;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::distinct_family;
use super::expr::{eval, eval_predicate, PhysExpr};
use super::min_max_bytes::{self, MinMaxBytes};
use super::named::{NamedGroups, NamedRow};
use crate::error::{EngineError, Result};

/// Encodes key columns into comparable rows; handles the no-key case.
pub struct KeyCodec {
    /// Shared: rows decode only with the converter that encoded them.
    converter: Option<Arc<RowConverter>>,
}

impl KeyCodec {
    /// A codec for keys of these types (none = one global group).
    pub fn new(types: &[arrow::datatypes::DataType]) -> Result<Self> {
        let converter = if types.is_empty() {
            None
        } else {
            Some(Arc::new(RowConverter::new(
                types.iter().map(|t| SortField::new(t.clone())).collect(),
            )?))
        };
        Ok(Self { converter })
    }

    /// The same codec, for another thread to decode this one's rows.
    pub fn share(&self) -> Self {
        Self {
            converter: self.converter.clone(),
        }
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
        match rows {
            KeyRows::Rows(r) => self.decode_rows(indices.iter().map(|i| r.row(*i))),
            KeyRows::Unit(_) => Ok(vec![]),
        }
    }

    /// Decode encoded rows (made by this codec or a [`Self::share`] of it)
    /// back into columns; none without key columns.
    pub fn decode_rows<'a>(
        &self,
        rows: impl IntoIterator<Item = Row<'a>>,
    ) -> Result<Vec<ArrayRef>> {
        match &self.converter {
            Some(c) => Ok(c.convert_rows(rows)?),
            None => Ok(vec![]),
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
///
/// The keys of groups `0..frozen.len()` may sit in a frozen, shared prefix
/// ([`Self::freeze`]) and the later ones in `keys`: a scope's first
/// checkpoint capture hands every key so far to the checkpoint tail by
/// sharing that prefix, instead of copying it on the compute thread.
pub struct GroupTable {
    /// Keys of groups from `frozen_len()` on (every group's, if none are frozen).
    keys: KeyRows,
    frozen: Option<Arc<Rows>>,
    table: HashTable<(u64, usize)>,
    hasher: FxBuildHasher,
}

impl GroupTable {
    /// An empty table.
    pub fn new(codec: &KeyCodec) -> Self {
        Self {
            keys: codec.empty(),
            frozen: None,
            table: HashTable::new(),
            hasher: FxBuildHasher,
        }
    }

    fn frozen_len(&self) -> usize {
        self.frozen.as_ref().map_or(0, |f| f.num_rows())
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        match &self.keys {
            KeyRows::Rows(r) => self.frozen_len() + r.num_rows(),
            KeyRows::Unit(n) => *n,
        }
    }

    /// Every key so far, shared, for another thread to decode (with a
    /// [`KeyCodec::share`] of the codec): None without key columns or
    /// groups. The table goes on with later keys in a fresh buffer, so this
    /// costs no copy; it is meant to be taken once (a second call copies
    /// what the first left, then freezes it all).
    pub fn freeze(&mut self, codec: &KeyCodec) -> Option<Arc<Rows>> {
        let KeyRows::Rows(rows) = &mut self.keys else {
            return None;
        };
        if rows.num_rows() == 0 {
            return self.frozen.clone();
        }
        let KeyRows::Rows(fresh) = codec.empty() else {
            return None;
        };
        let later = std::mem::replace(rows, fresh);
        let all = match self.frozen.take() {
            None => later,
            Some(prefix) => {
                let mut all = Rows::clone(&prefix);
                for r in later.iter() {
                    all.push(r);
                }
                all
            }
        };
        let all = Arc::new(all);
        self.frozen = Some(Arc::clone(&all));
        Some(all)
    }

    /// The encoded key of group `g` (below [`Self::len`]).
    fn row(&self, g: usize) -> Option<Row<'_>> {
        let KeyRows::Rows(rows) = &self.keys else {
            return None;
        };
        match &self.frozen {
            Some(f) if g < f.num_rows() => Some(f.row(g)),
            _ => Some(rows.row(g - self.frozen_len())),
        }
    }

    /// Decode the keys of the groups at `indices` into columns.
    pub fn decode(&self, codec: &KeyCodec, indices: &[usize]) -> Result<Vec<ArrayRef>> {
        codec.decode_rows(indices.iter().filter_map(|g| self.row(*g)))
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
                let frozen = self.frozen.as_deref();
                let first = frozen.map_or(0, Rows::num_rows);
                let mut one = |i: usize| {
                    let row = batch.row(i);
                    let bytes = row.as_ref();
                    let mut h = self.hasher.build_hasher();
                    h.write(bytes);
                    let hash = h.finish();
                    let found = self.table.find(hash, |(eh, idx)| {
                        *eh == hash
                            && match frozen {
                                Some(f) if *idx < first => f.row(*idx).as_ref() == bytes,
                                _ => keys.row(*idx - first).as_ref() == bytes,
                            }
                    });
                    let idx = match found {
                        Some((_, idx)) => *idx,
                        None => {
                            let idx = first + keys.num_rows();
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
#[derive(Clone)]
pub struct AggregateFunction {
    /// The output column it computes, for errors.
    column: Arc<str>,
    expr: Arc<AggregateFunctionExpr>,
    inputs: Vec<PhysExpr>,
    filter: Option<PhysExpr>,
    /// See [`min_max_bytes`].
    min_max_bytes: Option<bool>,
    /// The `COUNT(DISTINCT ...)` family this function is a member of, and
    /// its place in it (see [`distinct_family`]).
    family: Option<(usize, usize)>,
}

/// `Some(keep_min)` if `expr` is `MIN` or `MAX` (without DISTINCT, which
/// changes nothing for them but is left to DataFusion) of one string or
/// binary argument of the result's own type, which [`MinMaxBytes`]
/// computes instead of DataFusion's accumulator (see that module for why).
fn min_max_bytes(
    expr: &AggregateFunctionExpr,
    inputs: &[PhysExpr],
    schema: &arrow::datatypes::Schema,
) -> Option<bool> {
    let keep_min = match expr.fun().name() {
        "min" => true,
        "max" => false,
        _ => return None,
    };
    let output = expr.field();
    let [input] = inputs else { return None };
    let same_type = input
        .data_type(schema)
        .is_ok_and(|t| &t == output.data_type());
    (same_type && min_max_bytes::handles(output.data_type()) && !expr.is_distinct())
        .then_some(keep_min)
}

/// Inputs of every aggregate function, evaluated over one batch.
pub type AggregateInputs = Vec<(Vec<ArrayRef>, Option<BooleanArray>)>;

/// The aggregate functions of one GROUP BY (cheap to clone: the lowered
/// expressions are shared).
#[derive(Clone)]
pub struct AggregateFunctions {
    funcs: Vec<AggregateFunction>,
    /// Per `COUNT(DISTINCT ...)` family, its value type and member count.
    families: Vec<(arrow::datatypes::DataType, usize)>,
}

/// Group the `COUNT(DISTINCT ...)` functions that count the same integer
/// column (see [`distinct_family::counted_column`]) into families of two to
/// [`distinct_family::MAX_MEMBERS`] members; returns each family's value
/// type and size.
fn plan_families(
    funcs: &mut [AggregateFunction],
    schema: &arrow::datatypes::Schema,
) -> Vec<(arrow::datatypes::DataType, usize)> {
    let mut by_column: Vec<((usize, arrow::datatypes::DataType), Vec<usize>)> = Vec::new();
    for (i, f) in funcs.iter().enumerate() {
        let [arg] = f.inputs.as_slice() else { continue };
        if f.expr.fun().name() != "count" || !f.expr.is_distinct() {
            continue;
        }
        let Ok(data_type) = arg.data_type(schema) else {
            continue;
        };
        let Some(column) = distinct_family::counted_column(arg) else {
            continue;
        };
        if !distinct_family::handles(&data_type) {
            continue;
        }
        let key = (column, data_type);
        match by_column.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => by_column.push((key, vec![i])),
        }
    }
    let mut families = Vec::new();
    for ((_, data_type), members) in by_column {
        for chunk in members.chunks(distinct_family::MAX_MEMBERS) {
            if chunk.len() < 2 {
                continue;
            }
            for (bit, i) in chunk.iter().enumerate() {
                if let Some(f) = funcs.get_mut(*i) {
                    f.family = Some((families.len(), bit));
                }
            }
            families.push((data_type.clone(), chunk.len()));
        }
    }
    families
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
            // Arguments and FILTER may call functions that only run once
            // simplified (see `sluice_sql::simplify`).
            let runnable = sluice_sql::simplify::for_execution(e, input)?;
            let lowered =
                LoweredAggregateBuilder::new(&runnable, input, &physical_schema, &props, &ctx)
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
                min_max_bytes: min_max_bytes(&lowered.aggregate, &inputs, &physical_schema),
                expr: lowered.aggregate,
                inputs,
                filter: lowered.filter,
                family: None,
            });
        }
        let families = plan_families(&mut funcs, &physical_schema);
        Ok(Self { funcs, families })
    }

    /// Per `COUNT(DISTINCT ...)` family, its value type and member count.
    pub fn families(&self) -> &[(arrow::datatypes::DataType, usize)] {
        &self.families
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
        // Each family's members, taken in order by its functions below.
        let mut families = self
            .families
            .iter()
            .map(|(data_type, count)| {
                distinct_family::members(data_type, *count)
                    .map(Vec::into_iter)
                    .ok_or_else(|| {
                        EngineError::Internal(format!(
                            "COUNT(DISTINCT) family of {count} over {data_type}"
                        ))
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        self.funcs
            .iter()
            .map(|f| {
                let member = f
                    .family
                    .and_then(|(family, _)| families.get_mut(family))
                    .and_then(Iterator::next);
                let acc: Box<dyn GroupsAccumulator> = if let Some(member) = member {
                    member
                } else if let Some(keep_min) = f.min_max_bytes {
                    Box::new(MinMaxBytes::new(
                        keep_min,
                        f.expr.field().data_type().clone(),
                    ))
                } else if f.expr.groups_accumulator_supported() {
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

    /// Per function, whether merging two states gives the same state in
    /// either order (count, sum, min, max, avg and the bitwise and boolean
    /// folds, without DISTINCT). A scope's base may then merge an older state into a newer
    /// accumulator, which reuses the newer one's memory; any other function
    /// (`array_agg`, `string_agg`, variance, ...) is merged oldest first.
    pub fn merge_commutes(&self) -> Vec<bool> {
        const COMMUTING: &[&str] = &[
            "count", "sum", "min", "max", "avg", "mean", "bool_and", "bool_or", "bit_and",
            "bit_or", "bit_xor",
        ];
        self.funcs
            .iter()
            .map(|f| !f.expr.is_distinct() && COMMUTING.contains(&f.expr.fun().name()))
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

    /// Fresh row accumulators that can also retract rows (for `OVER`
    /// frames that slide: a row leaving the frame is retracted).
    pub fn sliding_accumulators(
        &self,
    ) -> Result<Vec<Box<dyn datafusion::logical_expr::Accumulator>>> {
        self.funcs
            .iter()
            .map(|f| {
                let acc: Box<dyn datafusion::logical_expr::Accumulator> = Box::new(NamedRow(
                    f.expr.create_sliding_accumulator()?,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow::array::{ArrayRef, AsArray, Int64Array};
    use arrow::datatypes::{DataType, Int64Type};

    use super::{GroupTable, KeyCodec};

    fn keys(codec: &KeyCodec, values: &[i64]) -> super::KeyRows {
        let col: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        codec.encode(&[col], values.len()).unwrap()
    }

    fn decoded(table: &GroupTable, codec: &KeyCodec, idx: &[usize]) -> Vec<i64> {
        let cols = table.decode(codec, idx).unwrap();
        cols[0].as_primitive::<Int64Type>().values().to_vec()
    }

    /// `COUNT(DISTINCT ...)` of one integer column, bare or under `CASE WHEN
    /// p THEN col END`, form a family per column; a lone count, another
    /// shape of argument, a non-integer column or another function stays
    /// on its own.
    #[test]
    fn distinct_counts_of_one_column_form_a_family() {
        use datafusion::common::DFSchema;
        use datafusion::functions_aggregate::expr_fn::{count, count_distinct};
        use datafusion::prelude::{col, lit, when};

        use super::AggregateFunctions;

        let schema = arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("bidder", DataType::Int64, true),
            arrow::datatypes::Field::new("auction", DataType::Int32, true),
            arrow::datatypes::Field::new("price", DataType::Int64, true),
            arrow::datatypes::Field::new("url", DataType::Utf8, true),
        ]);
        let input = DFSchema::try_from(schema).unwrap();
        let cheap = || col("price").lt(lit(10_000i64));
        let case = |c: &str| when(cheap(), col(c)).end().unwrap();
        let aggregates = vec![
            count_distinct(col("bidder")),
            count_distinct(case("bidder")),
            count_distinct(when(cheap(), col("bidder")).otherwise(lit(0i64)).unwrap()),
            count_distinct(col("auction")),
            count_distinct(case("auction")),
            count_distinct(case("bidder")),
            count_distinct(col("price")),
            count_distinct(col("url")),
            count_distinct(case("url")),
            count(col("bidder")),
        ];
        let names: Vec<String> = (0..aggregates.len()).map(|i| format!("a{i}")).collect();
        let funcs = AggregateFunctions::lower(&aggregates, &input, &names).unwrap();
        let families: Vec<_> = funcs.funcs.iter().map(|f| f.family).collect();
        assert_eq!(
            families,
            [
                Some((0, 0)),
                Some((0, 1)),
                None,
                Some((1, 0)),
                Some((1, 1)),
                Some((0, 2)),
                None,
                None,
                None,
                None
            ]
        );
        assert_eq!(
            funcs.families(),
            [(DataType::Int64, 3), (DataType::Int32, 2)]
        );
        assert_eq!(funcs.accumulators().unwrap().len(), aggregates.len());
    }

    /// Freezing shares the keys so far without copying them; lookups,
    /// new groups and decoding then span the frozen prefix and the keys
    /// interned after it, twice over.
    #[test]
    fn frozen_keys_are_shared_and_still_found() {
        let codec = KeyCodec::new(&[DataType::Int64]).unwrap();
        let mut table = GroupTable::new(&codec);
        let mut idx = Vec::new();
        table.intern(&keys(&codec, &[10, 20, 10, 30]), None, &mut idx);
        assert_eq!(idx, [0, 1, 0, 2]);
        let frozen = table.freeze(&codec).unwrap();
        assert!(Arc::ptr_eq(&frozen, table.frozen.as_ref().unwrap()));
        assert_eq!(frozen.num_rows(), 3);
        table.intern(&keys(&codec, &[30, 40, 10, 40, 50]), None, &mut idx);
        assert_eq!(idx, [2, 3, 0, 3, 4]);
        assert_eq!(table.len(), 5);
        assert_eq!(
            decoded(&table, &codec, &[4, 0, 3, 2, 1]),
            [50, 10, 40, 30, 20]
        );
        // A second freeze takes in the later keys too.
        let again = table.freeze(&codec).unwrap();
        assert_eq!(again.num_rows(), 5);
        table.intern(&keys(&codec, &[60, 50, 20]), None, &mut idx);
        assert_eq!(idx, [5, 4, 1]);
        assert_eq!(
            decoded(&table, &codec, &[0, 1, 2, 3, 4, 5]),
            [10, 20, 30, 40, 50, 60]
        );
        // Without key columns there is nothing to freeze.
        let unit = KeyCodec::new(&[]).unwrap();
        assert!(GroupTable::new(&unit).freeze(&unit).is_none());
    }
}
