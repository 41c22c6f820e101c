//! `sum` that refuses to wrap: integer and `DECIMAL` (`Decimal128`) inputs
//! are added exactly in `i128` and the result is checked against its type
//! (its range, or a decimal's precision) when it is produced.
//!
//! DataFusion's own decimal sum wraps once the `i128` passes ~1.7e38 and
//! never checks the declared precision of its result, so a `DECIMAL(38, 2)`
//! sum could be a wrong number or have 39 digits; here it is an error.
//!
//! Keeping the exact sum (rather than checking each `i64` addition) makes
//! the outcome independent of how rows are split into batches, cycles,
//! windows or merged sessions, and of the order of inserts and retractions:
//! the answer is the true sum if it fits, an error if it does not.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Int64Array, UInt64Array,
};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Field, FieldRef, Int64Type, UInt64Type,
};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::Result;
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature,
};

use super::{sql_type_name, ArithmeticOverflow};

/// Precision of the exact intermediate sum's state column.
const STATE_PRECISION: u8 = 38;

/// `sum` with checked integer and `Decimal128` results; DataFusion's `sum`
/// for other types.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct CheckedSum {
    inner: Sum,
}

/// The result types the checked path handles (DataFusion widens every
/// signed input to `Int64` and every unsigned one to `UInt64`; a
/// `DECIMAL(p, s)` sums to `DECIMAL(min(38, p + 10), s)` of the same scale,
/// so its unscaled values add as they are).
fn is_checked(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int64 | DataType::UInt64 | DataType::Decimal128(_, _)
    )
}

/// The scale of the exact sum: a decimal result's, 0 for integers.
fn scale_of(dt: &DataType) -> i8 {
    match dt {
        DataType::Decimal128(_, s) => *s,
        _ => 0,
    }
}

/// The state column: the exact unscaled sum at the result's scale.
fn state_type(out: &DataType) -> DataType {
    DataType::Decimal128(STATE_PRECISION, scale_of(out))
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let out = args.return_type().clone();
        if !is_checked(&out) {
            return self.inner.accumulator(args);
        }
        let target = Target::new(args.name, out);
        Ok(if args.is_distinct {
            Box::new(DistinctSum {
                values: HashSet::new(),
                target,
            })
        } else {
            Box::new(RowSum {
                sum: None,
                values: 0,
                target,
            })
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if !is_checked(args.return_type()) || args.is_distinct {
            // The distinct state is the list of distinct values, as DataFusion's.
            return self.inner.state_fields(args);
        }
        Ok(vec![Arc::new(Field::new(
            format!("{}[sum]", args.name),
            state_type(args.return_type()),
            true,
        ))])
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let out = args.return_type().clone();
        if !is_checked(&out) {
            return self.inner.create_groups_accumulator(args);
        }
        Ok(Box::new(GroupSums {
            sums: Vec::new(),
            seen: Vec::new(),
            target: Target::new(args.name, out),
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let out = args.return_type().clone();
        if !is_checked(&out) {
            return self.inner.create_sliding_accumulator(args);
        }
        if args.is_distinct {
            return datafusion::common::not_impl_err!(
                "SUM(DISTINCT) of integers or decimals over a sliding window frame"
            );
        }
        Ok(Box::new(RowSum {
            sum: None,
            values: 0,
            target: Target::new(args.name, out),
        }))
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        AggregateOrderSensitivity::Insensitive
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
}

/// What a sum is called and the type it must fit.
#[derive(Debug, Clone)]
struct Target {
    name: String,
    out: DataType,
}

impl Target {
    fn new(name: &str, out: DataType) -> Self {
        Self {
            name: name.to_string(),
            out,
        }
    }

    /// An exact (unscaled) sum as the SQL value it stands for.
    fn show(&self, v: i128) -> String {
        show_decimal(v, scale_of(&self.out))
    }

    fn overflow(&self, what: impl std::fmt::Display) -> datafusion::error::DataFusionError {
        ArithmeticOverflow::new(format!(
            "{} = {what} does not fit in {}",
            self.name,
            sql_type_name(&self.out)
        ))
        .into_datafusion()
    }

    fn add(&self, sum: i128, v: i128) -> Result<i128> {
        sum.checked_add(v).ok_or_else(|| {
            self.overflow(format_args!(
                "{} + {} (beyond 128 bits)",
                self.show(sum),
                self.show(v)
            ))
        })
    }

    /// An exact sum (if any) narrowed to `T`, or an overflow naming it.
    fn fit<T: TryFrom<i128>>(&self, sum: Option<i128>) -> Result<Option<T>> {
        sum.map(|s| T::try_from(s).map_err(|_| self.overflow(s)))
            .transpose()
    }

    /// An exact unscaled sum (if any) that has at most `precision` digits,
    /// or an overflow naming it.
    fn fit_digits(&self, precision: u8, sum: Option<i128>) -> Result<Option<i128>> {
        match sum {
            Some(s) if !fits_precision(s, precision) => Err(self.overflow(self.show(s))),
            other => Ok(other),
        }
    }

    /// The exact sum as a value of the result type, or an overflow.
    fn scalar(&self, sum: Option<i128>) -> Result<ScalarValue> {
        Ok(match self.out {
            DataType::Int64 => ScalarValue::Int64(self.fit(sum)?),
            DataType::Decimal128(p, s) => ScalarValue::Decimal128(self.fit_digits(p, sum)?, p, s),
            _ => ScalarValue::UInt64(self.fit(sum)?),
        })
    }

    /// Exact sums as an array of the result type, or an overflow.
    fn array(&self, sums: &[i128], seen: &[bool]) -> Result<ArrayRef> {
        let sums = sums.iter().zip(seen).map(|(s, ok)| ok.then_some(*s));
        Ok(match self.out {
            DataType::Int64 => Arc::new(
                sums.map(|s| self.fit::<i64>(s))
                    .collect::<Result<Int64Array>>()?,
            ),
            DataType::Decimal128(p, s) => Arc::new(
                sums.map(|v| self.fit_digits(p, v))
                    .collect::<Result<Decimal128Array>>()?
                    .with_precision_and_scale(p, s)?,
            ),
            _ => Arc::new(
                sums.map(|s| self.fit::<u64>(s))
                    .collect::<Result<UInt64Array>>()?,
            ),
        })
    }
}

/// Whether the unscaled decimal `v` has at most `precision` digits.
pub(crate) fn fits_precision(v: i128, precision: u8) -> bool {
    match 10i128.checked_pow(u32::from(precision)) {
        Some(limit) => v.unsigned_abs() < limit.unsigned_abs(),
        // 10^39 and beyond exceed i128: every i128 fits.
        None => true,
    }
}

/// The unscaled `v` at `scale` as SQL writes it (`-12.30` for -1230, 2).
pub(crate) fn show_decimal(v: i128, scale: i8) -> String {
    let digits = v.unsigned_abs().to_string();
    let sign = if v < 0 { "-" } else { "" };
    let Ok(scale) = usize::try_from(scale) else {
        // A negative scale multiplies by a power of ten.
        return format!("{v}{}", "0".repeat(usize::from(scale.unsigned_abs())));
    };
    if scale == 0 {
        return v.to_string();
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// The values of an input (`Int64`, `UInt64`, `Decimal128`) or state
/// (`DECIMAL(38, s)`) column as exact unscaled integers.
fn exact_values(a: &dyn Array) -> Result<Vec<Option<i128>>> {
    Ok(match a.data_type() {
        DataType::Int64 => a
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.map(i128::from))
            .collect(),
        DataType::UInt64 => a
            .as_primitive::<UInt64Type>()
            .iter()
            .map(|v| v.map(i128::from))
            .collect(),
        DataType::Decimal128(_, _) => a.as_primitive::<Decimal128Type>().iter().collect(),
        other => return exec_err!("checked sum: unexpected input type {other}"),
    })
}

/// The only argument of `sum`.
fn only_argument(values: &[ArrayRef]) -> Result<&ArrayRef> {
    match values.first() {
        Some(v) => Ok(v),
        None => exec_err!("sum takes one argument"),
    }
}

/// Whether row `row` passes the aggregate's `FILTER (WHERE ...)`, if any.
fn kept(opt_filter: Option<&BooleanArray>, row: usize) -> bool {
    opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row))
}

fn state_array(out: &DataType, values: impl IntoIterator<Item = Option<i128>>) -> Result<ArrayRef> {
    Ok(Arc::new(
        values
            .into_iter()
            .collect::<Decimal128Array>()
            .with_precision_and_scale(STATE_PRECISION, scale_of(out))?,
    ))
}

/// One group's exact sum (sessions, sliding frames, one-shot queries).
#[derive(Debug)]
struct RowSum {
    sum: Option<i128>,
    /// Non-null values added less those retracted: a sliding frame whose
    /// values have all been retracted sums to NULL again, not 0.
    values: i64,
    target: Target,
}

impl RowSum {
    fn fold(&mut self, values: &dyn Array, sign: i128) -> Result<()> {
        for v in exact_values(values)?.into_iter().flatten() {
            let sum = self.sum.unwrap_or(0);
            self.sum = Some(self.target.add(sum, sign * v)?);
            self.values += if sign < 0 { -1 } else { 1 };
            if self.values == 0 {
                self.sum = None;
            }
        }
        Ok(())
    }
}

impl Accumulator for RowSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.fold(only_argument(values)?.as_ref(), 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.fold(only_argument(values)?.as_ref(), -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Decimal128(
            self.sum,
            STATE_PRECISION,
            scale_of(&self.target.out),
        )])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.target.scalar(self.sum)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.target.name.capacity()
    }
}

/// `SUM(DISTINCT ...)` over integers: the distinct values, summed exactly.
#[derive(Debug)]
struct DistinctSum {
    values: HashSet<i128>,
    target: Target,
}

impl Accumulator for DistinctSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let v = only_argument(values)?;
        self.values
            .extend(exact_values(v.as_ref())?.into_iter().flatten());
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(lists) = states.first() else {
            return exec_err!("sum(distinct) state has no column");
        };
        for list in lists.as_list::<i32>().iter().flatten() {
            self.values
                .extend(exact_values(list.as_ref())?.into_iter().flatten());
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values = self
            .values
            .iter()
            .map(|v| self.target.scalar(Some(*v)))
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &values,
            &self.target.out,
        ))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.values.is_empty() {
            return self.target.scalar(None);
        }
        let mut sum = 0i128;
        for v in &self.values {
            sum = self.target.add(sum, *v)?;
        }
        self.target.scalar(Some(sum))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.capacity() * std::mem::size_of::<i128>()
    }
}

/// Exact sums of many groups (windows, GROUP BY, changelog aggregates).
#[derive(Debug)]
struct GroupSums {
    sums: Vec<i128>,
    seen: Vec<bool>,
    target: Target,
}

impl GroupSums {
    fn fold(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = only_argument(values)?;
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let values = exact_values(values.as_ref())?;
        for (row, (g, v)) in group_indices.iter().zip(values).enumerate() {
            let (Some(v), true) = (v, kept(opt_filter, row)) else {
                continue;
            };
            let (Some(sum), Some(seen)) = (self.sums.get_mut(*g), self.seen.get_mut(*g)) else {
                return exec_err!("sum: group index {g} out of range");
            };
            *sum = self.target.add(*sum, v)?;
            *seen = true;
        }
        Ok(())
    }
}

impl GroupsAccumulator for GroupSums {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.fold(values, group_indices, opt_filter, total_num_groups)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.fold(values, group_indices, None, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let values = only_argument(values)?;
        let exact = exact_values(values.as_ref())?;
        Ok(vec![state_array(
            &self.target.out,
            exact
                .into_iter()
                .enumerate()
                .map(|(row, v)| v.filter(|_| kept(opt_filter, row))),
        )?])
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        self.target.array(&sums, &seen)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        Ok(vec![state_array(
            &self.target.out,
            sums.into_iter().zip(seen).map(|(s, ok)| ok.then_some(s)),
        )?])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * std::mem::size_of::<i128>() + self.seen.capacity()
    }
}
