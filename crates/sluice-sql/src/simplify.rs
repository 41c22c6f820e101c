//! Scalar function calls rewritten the way DataFusion rewrites them before
//! running them, and calls that cannot run refused by name.
//!
//! Some of DataFusion's scalar functions are never executed as written:
//! `coalesce`, `nvl` and `nvl2` become `CASE`, `arrow_cast` becomes `CAST`,
//! `now()` becomes the query's start time. Their `invoke` is an internal
//! error; DataFusion's optimizer calls each function's `simplify` hook before
//! a batch query runs. A continuous query is never optimized (its plan is
//! walked as written, see [`crate::planner`]), so an expression must go
//! through [`for_execution`] before it is lowered to a physical expression:
//! it applies the same hooks, then tries every remaining call once on an
//! empty batch, so a function that still cannot run (`now()` has no start
//! time in a query that never ends) is refused at `CREATE`, naming it,
//! instead of halting the pipeline on its first batch.
//!
//! Only the functions' own hooks are applied, not DataFusion's whole
//! `ExprSimplifier`: its constant folding evaluates integer arithmetic with
//! DataFusion's wrapping kernels, which would turn a literal overflow into a
//! wrong value instead of the checked error every other expression gets (see
//! [`crate::checked`]), and its algebraic rewrites would change the
//! expressions that errors name. The rewrite is applied when lowering, not to
//! the plan, so `EXPLAIN` and checkpoint fingerprints show the query as
//! written.

use std::sync::Arc;

use arrow::array::new_null_array;
use arrow::datatypes::{Field, Schema};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::create_physical_expr;

use crate::error::{Result, SqlError};

/// Rounds of rewriting: a hook may return calls that have hooks of their
/// own (none of DataFusion's nest deeper than this).
const MAX_ROUNDS: usize = 8;

/// `expr` with every scalar function call simplified by its own hook, or
/// an [`SqlError::Unsupported`] naming a call that cannot run over a stream.
pub fn for_execution(expr: &Expr, schema: &DFSchema) -> Result<Expr> {
    let info = SimplifyContext::builder()
        .with_schema(Arc::new(schema.clone()))
        .build();
    let mut expr = expr.clone();
    for _ in 0..MAX_ROUNDS {
        let rewritten = expr.transform_up(|e| simplify_call(e, &info))?;
        expr = rewritten.data;
        if !rewritten.transformed {
            break;
        }
    }
    check_runnable(&expr, schema)?;
    Ok(expr)
}

/// One call's own simplification, if it has one.
fn simplify_call(e: Expr, info: &SimplifyContext) -> datafusion::error::Result<Transformed<Expr>> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = e else {
        return Ok(Transformed::no(e));
    };
    Ok(match func.simplify(args, info)? {
        ExprSimplifyResult::Simplified(new) => Transformed::yes(new),
        ExprSimplifyResult::Original(args) => {
            Transformed::no(Expr::ScalarFunction(ScalarFunction { func, args }))
        }
    })
}

/// Evaluate every scalar function call of `expr` on one row of NULLs: a
/// call whose implementation refuses to run at all fails here, at `CREATE`.
///
/// One row rather than none: some functions (`array_max` in DataFusion 55)
/// fail on an empty batch although they run on every non-empty one, and a
/// stream never evaluates an expression over an empty batch (filters drop
/// them, stateful operators skip them).
fn check_runnable(expr: &Expr, schema: &DFSchema) -> Result<()> {
    let probe = null_row(schema)?;
    let props = ExecutionProps::new();
    let ctx = PhysicalPlanningContext::default();
    let mut refused = None;
    expr.apply(|e| {
        if let Expr::ScalarFunction(f) = e {
            let run = create_physical_expr(e, schema, &props, &ctx).and_then(|p| {
                // A function that panics on NULL input would take the
                // pipeline down on the first NULL: refuse it too.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.evaluate(&probe)))
                    .unwrap_or_else(|_| {
                        Err(DataFusionError::Execution(
                            "it panicked on a row of NULLs".into(),
                        ))
                    })
                    .map(|_| ())
            });
            if let Err(err) = run {
                refused = Some(refusal(f, &err));
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match refused {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One row with every column NULL (fields made nullable so the batch is
/// valid whatever the schema says).
fn null_row(schema: &DFSchema) -> Result<RecordBatch> {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let columns = fields
        .iter()
        .map(|f| new_null_array(f.data_type(), 1))
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(1));
    let batch = RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(DataFusionError::from)?;
    Ok(batch)
}

/// The refusal of a call `f` that failed with `err`, naming the function
/// and its aliases (the call may have used any of them).
fn refusal(f: &ScalarFunction, err: &DataFusionError) -> SqlError {
    let mut names = format!("{}()", f.func.name());
    if !f.func.aliases().is_empty() {
        let aliases: Vec<String> = f.func.aliases().iter().map(|a| format!("{a}()")).collect();
        names.push_str(&format!(" (also called {})", aliases.join(", ")));
    }
    let detail = match err.find_root() {
        // DataFusion's "should have been simplified" / "should not be
        // called" errors: the function only runs while a one-shot query is
        // planned (`now()` needs the query's start time).
        DataFusionError::Internal(_) => {
            "DataFusion evaluates it only while planning a one-shot query".to_string()
        }
        other => other.strip_backtrace(),
    };
    SqlError::Unsupported(format!("{names} in a continuous query: {detail}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::datatypes::DataType;
    use datafusion::functions::core::expr_fn::{coalesce, nvl};
    use datafusion::functions::datetime::expr_fn::now;
    use datafusion::prelude::{col, lit};

    use super::*;

    fn schema() -> DFSchema {
        DFSchema::try_from(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]))
        .unwrap()
    }

    /// A call rewritten by its hook is gone, nested ones included; the
    /// result runs.
    #[test]
    fn coalesce_and_nvl_become_case() {
        let e = coalesce(vec![col("a"), nvl(col("b"), lit(1i64))]) + lit(2i64);
        let out = for_execution(&e, &schema()).unwrap();
        let text = out.to_string();
        assert!(
            !text.contains("coalesce") && !text.contains("nvl"),
            "{text}"
        );
        assert!(text.contains("CASE"), "{text}");
    }

    #[test]
    fn now_is_refused_by_name() {
        let e = now();
        let err = for_execution(&e, &schema()).unwrap_err();
        assert_eq!(err.code(), "SLC-SQL-002");
        assert_eq!(
            err.to_string(),
            "unsupported: now() (also called current_timestamp()) in a continuous query: DataFusion evaluates it only while planning a one-shot query"
        );
    }
}
