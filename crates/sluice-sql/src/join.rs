//! Planning `JOIN`: an inner or outer equi-join of two append-only inputs.
//!
//! DataFusion plans `a JOIN b ON cond` as a join whose condition is one
//! filter, and `FROM a, b WHERE cond` as a cross join under a filter. Both
//! become one [`StreamNode::Join`]: every conjunct `l = r` whose sides read
//! only the left and only the right input is a key pair; the rest is a
//! residual condition over the joined row. `LEFT`, `RIGHT` and `FULL` joins
//! become a [`StreamNode::OuterJoin`] with the same keys, residual and state
//! bounds; its output is append-only when every preserved side is bounded
//! (a padded row is final when its row is freed), a changelog otherwise.

use datafusion::common::DFSchema;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, JoinType, Operator};

use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::plan::{OuterKind, StreamNode};
use crate::window_udf::check_scalar_expr;

/// Whether every column `e` reads is in `schema` (and it reads at least one).
fn reads_only(e: &Expr, schema: &DFSchema) -> bool {
    let cols = e.column_refs();
    !cols.is_empty() && cols.iter().all(|c| schema.has_column(c))
}

/// Split a join condition into key pairs (left expr, right expr) and the
/// residual conjuncts.
pub(crate) fn split_condition(
    conjuncts: Vec<&Expr>,
    left: &DFSchema,
    right: &DFSchema,
) -> (Vec<(Expr, Expr)>, Vec<Expr>) {
    let mut keys = Vec::new();
    let mut residual = Vec::new();
    for c in conjuncts {
        if let Expr::BinaryExpr(BinaryExpr {
            left: l,
            op: Operator::Eq,
            right: r,
        }) = c
        {
            if reads_only(l, left) && reads_only(r, right) {
                keys.push(((**l).clone(), (**r).clone()));
                continue;
            }
            if reads_only(l, right) && reads_only(r, left) {
                keys.push(((**r).clone(), (**l).clone()));
                continue;
            }
        }
        residual.push(c.clone());
    }
    (keys, residual)
}

/// Build the join node from converted inputs and the whole condition.
pub(crate) fn join_node(
    catalog: &dyn PlanCatalog,
    join_type: JoinType,
    left: StreamNode,
    right: StreamNode,
    on: &[(Expr, Expr)],
    condition: Vec<&Expr>,
    schema: datafusion::common::DFSchemaRef,
) -> Result<StreamNode> {
    let outer = match join_type {
        JoinType::Inner => None,
        JoinType::Left => Some(OuterKind::Left),
        JoinType::Right => Some(OuterKind::Right),
        JoinType::Full => Some(OuterKind::Full),
        other => {
            return Err(SqlError::Unsupported(format!(
                "{other} JOIN in a continuous query (inner, LEFT, RIGHT and FULL OUTER joins are supported)"
            )))
        }
    };
    if left.is_changelog() || right.is_changelog() {
        return Err(SqlError::Unsupported(
            "JOIN over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); join append-only inputs".into(),
        ));
    }
    let (mut keys, residual) = split_condition(condition, left.schema(), right.schema());
    keys.extend(on.iter().cloned());
    if keys.is_empty() {
        return Err(SqlError::Unsupported(
            "a JOIN without an equality between its two inputs (a cross join would keep every row of both sides forever); join ON a.x = b.y".into(),
        ));
    }
    for (l, r) in &keys {
        let lt = l.get_type(left.schema())?;
        let rt = r.get_type(right.schema())?;
        if lt != rt {
            return Err(SqlError::Unsupported(format!(
                "JOIN key {l} is {lt} but {r} is {rt}; cast one side so both have the same type"
            )));
        }
    }
    for e in &residual {
        check_scalar_expr(e)?;
    }
    let (left_bounds, right_bounds) = crate::bounds::join_bounds(
        &keys,
        &residual,
        &crate::bounds::time_columns(&left, catalog),
        &crate::bounds::time_columns(&right, catalog),
        |e| reads_only(e, left.schema()),
        |e| reads_only(e, right.schema()),
    );
    if let Some(kind) = outer {
        let (left_outer, right_outer) = kind.preserves();
        let changelog =
            (left_outer && left_bounds.is_empty()) || (right_outer && right_bounds.is_empty());
        let schema = if changelog {
            crate::plan::with_change_column(&schema)?
        } else {
            schema
        };
        return Ok(StreamNode::OuterJoin {
            kind,
            left: Box::new(left),
            right: Box::new(right),
            on: keys,
            filter: residual.into_iter().reduce(Expr::and),
            left_bounds,
            right_bounds,
            changelog,
            schema,
        });
    }
    Ok(StreamNode::Join {
        left: Box::new(left),
        right: Box::new(right),
        on: keys,
        filter: residual.into_iter().reduce(Expr::and),
        left_bounds,
        right_bounds,
        schema,
    })
}

/// The conjuncts of an optional condition.
pub(crate) fn conjuncts(e: Option<&Expr>) -> Vec<&Expr> {
    e.map(split_conjunction).unwrap_or_default()
}
