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

/// Compile `expr` against `schema` (the operator's input).
pub fn compile(expr: &Expr, schema: &DFSchema) -> Result<PhysExpr> {
    let props = ExecutionProps::new();
    create_physical_expr(expr, schema, &props, &PhysicalPlanningContext::default())
        .map_err(|e| EngineError::exec(format!("compiling {expr}"), e))
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
/// Timestamps of any unit and BIGINT milliseconds are accepted.
pub fn event_time_ms(arr: &ArrayRef) -> Result<Int64Array> {
    let (mul, div) = sluice_sql::window_udf::timestamp_scale(arr.data_type()).ok_or_else(|| {
        EngineError::Schema(format!(
            "event time must be a TIMESTAMP or BIGINT, found {}",
            arr.data_type()
        ))
    })?;
    let raw = cast(arr, &DataType::Int64)?;
    let raw = raw.as_primitive::<Int64Type>();
    Ok(if mul == 1 && div == 1 {
        raw.clone()
    } else {
        raw.unary(|v| v * mul / div)
    })
}

/// Milliseconds back to the event-time type, as a constant column.
pub fn time_column(ms: i64, data_type: &DataType, len: usize) -> Result<ArrayRef> {
    let (mul, div) = sluice_sql::window_udf::timestamp_scale(data_type).ok_or_else(|| {
        EngineError::Schema(format!("window time type {data_type} is not a timestamp"))
    })?;
    let v = ms.saturating_mul(div) / mul;
    let arr: ArrayRef = Arc::new(Int64Array::from_value(v, len));
    Ok(cast(&arr, data_type)?)
}
