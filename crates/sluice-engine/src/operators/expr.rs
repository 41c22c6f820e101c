//! Lowering logical expressions to physical ones, once per operator.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::compute::kernels::cast::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};

use crate::error::{EngineError, Result};

/// A physical expression compiled from a plan expression.
pub type PhysExpr = Arc<dyn PhysicalExpr>;

/// Compile `expr` against `schema` (the operator's input). Integer `+`,
/// `-`, `*` and unary `-` fail on overflow instead of wrapping. Calls that
/// DataFusion only runs after simplifying them (`coalesce`, `arrow_cast`,
/// ...) are simplified first; one that cannot run over a stream is refused
/// here, at `CREATE`.
pub fn compile(expr: &Expr, schema: &DFSchema) -> Result<PhysExpr> {
    let props = ExecutionProps::new();
    let runnable = sluice_sql::simplify::for_execution(expr, schema)?;
    create_physical_expr(
        &runnable,
        schema,
        &props,
        &PhysicalPlanningContext::default(),
    )
    .and_then(|e| sluice_sql::checked::binary::fail_on_overflow(e, schema.as_arrow()))
    .map_err(|e| EngineError::exec(format!("compiling {expr}"), e))
}

/// Evaluate the expression computing output `column`; an overflow names it.
pub fn eval_column(expr: &PhysExpr, batch: &RecordBatch, column: &str) -> Result<ArrayRef> {
    eval(expr, batch).map_err(|e| e.in_column(column))
}

/// An overflow error placed in `column`.
pub fn overflow(column: &str, detail: String) -> EngineError {
    EngineError::Overflow(sluice_sql::checked::ArithmeticOverflow::new(detail).in_column(column))
}

/// Evaluate to an array with one value per row.
pub fn eval(expr: &PhysExpr, batch: &RecordBatch) -> Result<ArrayRef> {
    Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?)
}

/// Evaluate a predicate; nulls count as false.
pub fn eval_predicate(expr: &PhysExpr, batch: &RecordBatch) -> Result<BooleanArray> {
    let arr = eval(expr, batch)?;
    let b = arr
        .as_boolean_opt()
        .ok_or_else(|| EngineError::Schema(format!("predicate {expr} is not boolean")))?;
    Ok(match b.nulls() {
        Some(_) => arrow::compute::prep_null_mask_filter(b),
        None => b.clone(),
    })
}

/// Event time of every row in milliseconds (null where the value is null).
///
/// Timestamps of any unit and BIGINT milliseconds are accepted; a
/// `TIMESTAMP(0)` (seconds) value whose milliseconds do not fit a BIGINT is
/// an overflow in `column`, never a wrapped time.
pub fn event_time_ms(arr: &ArrayRef, column: &str) -> Result<Int64Array> {
    let scale = sluice_sql::window_udf::timestamp_scale(arr.data_type()).ok_or_else(|| {
        EngineError::Schema(format!(
            "event time '{column}' must be a TIMESTAMP or BIGINT, found {}",
            arr.data_type()
        ))
    })?;
    let raw = cast(arr, &DataType::Int64)?;
    let raw = raw.as_primitive::<Int64Type>();
    if scale == (1, 1) {
        return Ok(raw.clone());
    }
    raw.iter()
        .map(|v| {
            v.map(|v| {
                sluice_sql::window_udf::to_ms(v, scale).ok_or_else(|| {
                    overflow(
                        column,
                        format!(
                            "event time {v} ({}) is outside the millisecond range of a BIGINT",
                            arr.data_type()
                        ),
                    )
                })
            })
            .transpose()
        })
        .collect()
}

/// Milliseconds back to the event-time type, as a constant column; a bound
/// that does not fit the type is an overflow in `column`.
pub fn time_column(ms: i64, data_type: &DataType, len: usize, column: &str) -> Result<ArrayRef> {
    let v = time_value(ms, data_type, column)?;
    let arr: ArrayRef = Arc::new(Int64Array::from_value(v, len));
    Ok(cast(&arr, data_type)?)
}

/// Milliseconds back to the event-time type, one value per row (window
/// bounds that differ per row, as sessions' do); a bound that does not fit
/// the type is an overflow in `column`.
pub fn time_values(ms: &[i64], data_type: &DataType, column: &str) -> Result<ArrayRef> {
    let values = ms
        .iter()
        .map(|v| time_value(*v, data_type, column))
        .collect::<Result<Vec<_>>>()?;
    let arr: ArrayRef = Arc::new(Int64Array::from(values));
    Ok(cast(&arr, data_type)?)
}

fn time_value(ms: i64, data_type: &DataType, column: &str) -> Result<i64> {
    let scale = sluice_sql::window_udf::timestamp_scale(data_type).ok_or_else(|| {
        EngineError::Schema(format!("window time type {data_type} is not a timestamp"))
    })?;
    sluice_sql::window_udf::from_ms(ms, scale).ok_or_else(|| {
        overflow(
            column,
            format!("window bound {ms} ms does not fit in {data_type}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{TimestampNanosecondArray, TimestampSecondArray};
    use arrow::datatypes::TimeUnit;

    #[test]
    fn event_time_in_seconds_beyond_the_millisecond_range_is_an_overflow() {
        let arr: ArrayRef = Arc::new(TimestampSecondArray::from(vec![
            Some(1),
            None,
            Some(i64::MAX / 1000 + 1),
        ]));
        let e = event_time_ms(&arr, "ts").unwrap_err();
        assert_eq!(e.code(), "SLC-ENG-013");
        assert_eq!(
            e.to_string(),
            "arithmetic overflow (SLC-ENG-013) in column 'ts': event time 9223372036854776 (Timestamp(s)) is outside the millisecond range of a BIGINT"
        );
        let ok: ArrayRef = Arc::new(TimestampSecondArray::from(vec![Some(-2), None]));
        let ms = event_time_ms(&ok, "ts").unwrap();
        assert_eq!(ms.iter().collect::<Vec<_>>(), vec![Some(-2000), None]);
    }

    #[test]
    fn a_window_bound_beyond_a_nanosecond_timestamp_is_an_overflow() {
        let ns = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let e = time_column(i64::MAX / 1_000_000 + 1, &ns, 1, "ws").unwrap_err();
        assert_eq!(
            e.to_string(),
            "arithmetic overflow (SLC-ENG-013) in column 'ws': window bound 9223372036855 ms does not fit in Timestamp(ns)"
        );
        let col = time_column(-5, &ns, 2, "ws").unwrap();
        let col = col
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .unwrap();
        assert_eq!(col.values().to_vec(), vec![-5_000_000, -5_000_000]);
    }
}
