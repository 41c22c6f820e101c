//! Aggregate calls whose arguments DataFusion only checks when it creates
//! the accumulator, refused while planning.
//!
//! DataFusion validates some aggregate arguments (the percentile of
//! `APPROX_PERCENTILE_CONT`, the literal `n` of `NTH_VALUE`, ...) not when
//! the call is planned but when an accumulator is created, i.e. once data
//! arrives. A streaming pipeline would accept such a statement and halt
//! later. [`probe`] creates each accumulator form once, at planning time,
//! and turns a failure into [`SqlError::Plan`] (a user error) naming the
//! call and the output column. It runs once per statement, never per row.

use datafusion::error::DataFusionError;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::SqlError;

/// Create, and drop, every accumulator form the engine may use for this
/// aggregate call: the grouped form when the function has one, and the row
/// form (session windows, and the adapter for functions without a grouped
/// form). `column` is the output column it computes.
pub fn probe(expr: &AggregateFunctionExpr, column: &str) -> Result<(), SqlError> {
    let created = if expr.groups_accumulator_supported() {
        expr.create_groups_accumulator().map(drop)
    } else {
        Ok(())
    };
    created
        .and_then(|()| expr.create_accumulator().map(drop))
        .map_err(|e| refused(expr, column, e))
}

/// [`probe`] every aggregate call of every `AggregateExec` in a physical
/// plan (one-shot `SELECT`, which DataFusion runs itself).
pub fn probe_plan(plan: &dyn ExecutionPlan) -> Result<(), SqlError> {
    if let Some(agg) = plan.downcast_ref::<AggregateExec>() {
        for expr in agg.aggr_expr() {
            probe(expr, expr.name())?;
        }
    }
    plan.children()
        .into_iter()
        .try_for_each(|child| probe_plan(child.as_ref()))
}

/// The planning error for a call whose accumulator cannot be created.
fn refused(expr: &AggregateFunctionExpr, column: &str, e: DataFusionError) -> SqlError {
    SqlError::Plan(DataFusionError::Context(
        format!(
            "aggregate {} in column '{column}' cannot take these arguments",
            expr.fun().name()
        ),
        Box::new(e),
    ))
}
