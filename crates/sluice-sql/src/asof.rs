//! Planning `ASOF JOIN` into a [`StreamNode::AsofJoin`].
//!
//! The parser (`crate::parser::asof`) turns both spellings into a join whose
//! `ON` starts with a call of the marker function [`MARKER`]: its argument
//! is Snowflake's `MATCH_CONDITION`, or `TRUE` when the condition is one of
//! the `ON` conjuncts (DuckDB's spelling). DataFusion then resolves names
//! and types as for any join, and this module takes the condition apart:
//! key equalities, the one comparison of the two inputs' event-time columns
//! (the match condition), and an optional tolerance. Anything else is
//! refused by name, since a residual filter on an ASOF join is ambiguous
//! (before or after picking the closest row?).

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, JoinType, Operator, ScalarUDF, Signature, Volatility,
};

use crate::bounds::{time_columns, TimeColumn};
use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::join::split_condition;
use crate::plan::{AsofOp, StreamNode};
use crate::window_udf::interval_scalar_ms;

/// The marker function's name (not meant to be written by users).
pub(crate) const MARKER: &str = "__asof_match";

/// How to write an ASOF join, for error messages.
const HOW: &str = "write l ASOF JOIN r ON l.k = r.k AND l.ts >= r.ts (or MATCH_CONDITION (l.ts >= r.ts) ON l.k = r.k)";

/// The marker function, registered in the planning session.
pub(crate) fn marker_udf() -> ScalarUDF {
    crate::marker::marker_udf(
        MARKER,
        "an ASOF JOIN condition",
        Signature::exact(vec![DataType::Boolean], Volatility::Immutable),
    )
}

fn marker_arg(e: &Expr) -> Option<&Expr> {
    match e {
        Expr::ScalarFunction(f) if f.func.name() == MARKER => f.args.first(),
        _ => None,
    }
}

/// Whether `e` is a call of the ASOF or the temporal join's marker.
fn is_marker(e: &Expr) -> bool {
    marker_arg(e).is_some() || crate::temporal::marker_arg(e).is_some()
}

/// Whether `e` calls the marker anywhere.
pub(crate) fn mentions_marker(e: &Expr) -> bool {
    mentions(e, is_marker)
}

/// Whether `e` has a part for which `pred` holds.
pub(crate) fn mentions(e: &Expr, pred: impl Fn(&Expr) -> bool) -> bool {
    let mut found = false;
    let _ = datafusion::common::tree_node::TreeNode::apply(e, |e| {
        found |= pred(e);
        Ok(if found {
            datafusion::common::tree_node::TreeNodeRecursion::Stop
        } else {
            datafusion::common::tree_node::TreeNodeRecursion::Continue
        })
    });
    found
}

fn unsupported(msg: impl Into<String>) -> SqlError {
    SqlError::Unsupported(msg.into())
}

/// `a op b` as (a, op, b) when `op` is an ordering comparison.
fn comparison(e: &Expr) -> Option<(&Expr, Operator, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) =>
        {
            Some((left, *op, right))
        }
        _ => None,
    }
}

fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

/// The lag of a time column of an input, if `e` is one.
fn time_lag(e: &Expr, times: &[TimeColumn]) -> Option<i64> {
    match e {
        Expr::Column(c) => times.iter().find(|t| &t.column == c).map(|t| t.lag_ms),
        _ => None,
    }
}

/// A constant number of milliseconds (an interval, or an integer for
/// BIGINT event times), casts removed.
fn constant_ms(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(v, _) => interval_scalar_ms(v).or(match v {
            ScalarValue::Int32(Some(v)) => Some(i64::from(*v)),
            _ => None,
        }),
        Expr::Cast(c) => constant_ms(&c.expr),
        Expr::TryCast(c) => constant_ms(&c.expr),
        _ => None,
    }
}

/// The match condition normalised to `left op right`, if `e` compares an
/// expression over the left input with one over the right.
fn as_match<'a>(
    e: &'a Expr,
    reads_left: &impl Fn(&Expr) -> bool,
    reads_right: &impl Fn(&Expr) -> bool,
) -> Option<(&'a Expr, Operator, &'a Expr)> {
    let (a, op, b) = comparison(e)?;
    if reads_left(a) && reads_right(b) {
        Some((a, op, b))
    } else if reads_right(a) && reads_left(b) {
        Some((b, flip(op), a))
    } else {
        None
    }
}

/// The tolerance (ms) if `e` is `r.ts >= l.ts - X` (for a backward match)
/// or `r.ts <= l.ts + X` (forward), either way round.
fn as_tolerance(e: &Expr, lt: &Expr, rt: &Expr, backward: bool) -> Option<i64> {
    let (a, op, b) = comparison(e)?;
    // Normalise to `rt op other`.
    let (op, other) = if a == rt {
        (op, b)
    } else if b == rt {
        (flip(op), a)
    } else {
        return None;
    };
    let Expr::BinaryExpr(BinaryExpr {
        left: base,
        op: arith,
        right: amount,
    }) = other
    else {
        return None;
    };
    if base.as_ref() != lt {
        return None;
    }
    let wanted = if backward {
        (Operator::GtEq, Operator::Minus)
    } else {
        (Operator::LtEq, Operator::Plus)
    };
    if (op, *arith) != wanted {
        return None;
    }
    constant_ms(amount).filter(|ms| *ms >= 0)
}

/// Build the ASOF join node from a DataFusion join whose condition holds
/// the marker.
pub(crate) fn asof_node(
    catalog: &dyn PlanCatalog,
    join_type: JoinType,
    left: StreamNode,
    right: StreamNode,
    on: &[(Expr, Expr)],
    filter: Option<&Expr>,
    schema: datafusion::common::DFSchemaRef,
) -> Result<StreamNode> {
    let keep_unmatched = match join_type {
        JoinType::Inner => false,
        JoinType::Left => true,
        other => {
            return Err(unsupported(format!(
                "{other} ASOF JOIN (only ASOF JOIN and LEFT ASOF JOIN are supported)"
            )))
        }
    };
    if left.is_changelog() || right.is_changelog() {
        return Err(unsupported(
            "ASOF JOIN over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); join append-only inputs",
        ));
    }
    let conjuncts = crate::join::conjuncts(filter);
    let markers: Vec<&Expr> = conjuncts.iter().filter_map(|c| marker_arg(c)).collect();
    let [marker] = markers[..] else {
        return Err(unsupported(format!(
            "an ASOF JOIN condition that is not a conjunction (OR, NOT or nesting around it); {HOW}"
        )));
    };
    let mut rest: Vec<&Expr> = conjuncts
        .iter()
        .copied()
        .filter(|c| marker_arg(c).is_none())
        .collect();
    if rest.iter().any(|c| mentions_marker(c)) {
        return Err(unsupported(format!(
            "an ASOF JOIN inside another ASOF JOIN's condition; {HOW}"
        )));
    }
    let (ls, rs) = (left.schema().clone(), right.schema().clone());
    let reads = |e: &Expr, s: &datafusion::common::DFSchema| {
        let cols = e.column_refs();
        !cols.is_empty() && cols.iter().all(|c| s.has_column(c))
    };
    let reads_left = |e: &Expr| reads(e, &ls);
    let reads_right = |e: &Expr| reads(e, &rs);
    // The match condition: MATCH_CONDITION's, or the one comparison of the
    // two inputs among the ON conjuncts.
    let matched = if matches!(marker, Expr::Literal(ScalarValue::Boolean(Some(true)), _)) {
        let found: Vec<usize> = rest
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                as_match(c, &reads_left, &reads_right).is_some_and(|(a, _, b)| {
                    matches!(a, Expr::Column(_)) && matches!(b, Expr::Column(_))
                })
            })
            .map(|(i, _)| i)
            .collect();
        match found[..] {
            [i] => rest.remove(i),
            [] => {
                return Err(unsupported(format!(
                    "an ASOF JOIN without a comparison of the two inputs' event times; {HOW}"
                )))
            }
            _ => {
                return Err(unsupported(format!(
                    "an ASOF JOIN with more than one comparison of the two inputs' columns; keep one (the match condition) and give a tolerance as r.ts >= l.ts - INTERVAL '...'; {HOW}"
                )))
            }
        }
    } else {
        marker
    };
    let Some((lt, op, rt)) = as_match(matched, &reads_left, &reads_right) else {
        return Err(unsupported(format!(
            "ASOF JOIN match condition {matched}: it must compare the left input's event time with the right's by >=, >, <= or <; {HOW}"
        )));
    };
    let (lt, rt) = (lt.clone(), rt.clone());
    let left_times = time_columns(&left, catalog);
    let right_times = time_columns(&right, catalog);
    let (Some(left_lag_ms), Some(right_lag_ms)) =
        (time_lag(&lt, &left_times), time_lag(&rt, &right_times))
    else {
        return Err(unsupported(format!(
            "ASOF JOIN match condition {matched}: both sides must be the inputs' event-time columns (a source's WATERMARK FOR column, or a closed window's start or end), so the watermark can tell when a match is final"
        )));
    };
    let (lty, rty) = (lt.get_type(&ls)?, rt.get_type(&rs)?);
    if lty != rty {
        return Err(unsupported(format!(
            "ASOF JOIN match condition compares {lt} ({lty}) with {rt} ({rty}); cast one side so both have the same type"
        )));
    }
    let op = match op {
        Operator::GtEq => AsofOp::GtEq,
        Operator::Gt => AsofOp::Gt,
        Operator::LtEq => AsofOp::LtEq,
        _ => AsofOp::Lt,
    };
    let mut tolerance_ms = None;
    let mut others = Vec::new();
    for c in rest {
        match as_tolerance(c, &lt, &rt, op.backward()) {
            Some(ms) if tolerance_ms.is_none() => tolerance_ms = Some(ms),
            _ => others.push(c),
        }
    }
    let (mut keys, residual) = split_condition(others, &ls, &rs);
    keys.extend(on.iter().cloned());
    if let Some(e) = residual.first() {
        let tol = if op.backward() {
            format!("{rt} >= {lt} - INTERVAL '...'")
        } else {
            format!("{rt} <= {lt} + INTERVAL '...'")
        };
        return Err(unsupported(format!(
            "condition {e} in an ASOF JOIN (only key equalities, the match condition and one tolerance written {tol} are allowed); filter an input in a subquery, or the result with WHERE"
        )));
    }
    if keys.is_empty() {
        return Err(unsupported(format!(
            "an ASOF JOIN without an equality between its two inputs (the closest row over all keys is not supported); {HOW}"
        )));
    }
    for (l, r) in &keys {
        let (a, b) = (l.get_type(&ls)?, r.get_type(&rs)?);
        if a != b {
            return Err(unsupported(format!(
                "ASOF JOIN key {l} is {a} but {r} is {b}; cast one side so both have the same type"
            )));
        }
    }
    Ok(StreamNode::AsofJoin {
        left: Box::new(left),
        right: Box::new(right),
        on: keys,
        left_time: lt,
        right_time: rt,
        op,
        tolerance_ms,
        keep_unmatched,
        left_lag_ms,
        right_lag_ms,
        schema: Arc::clone(&schema),
        versioned: None,
    })
}

/// Refuse the marker anywhere but in a join's condition (a user calling
/// `__asof_match` directly): it is never executable.
pub(crate) fn check_marker_placement(plan: &datafusion::logical_expr::LogicalPlan) -> Result<()> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let (mut misplaced, mut temporal) = (false, false);
    plan.apply(|node| {
        if !matches!(node, datafusion::logical_expr::LogicalPlan::Join(_)) {
            let exprs = node.expressions();
            misplaced |= exprs
                .iter()
                .any(|e| mentions(e, |e| marker_arg(e).is_some()));
            temporal |= exprs
                .iter()
                .any(|e| mentions(e, |e| crate::temporal::marker_arg(e).is_some()));
        }
        Ok(if misplaced || temporal {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if temporal {
        return Err(unsupported(format!(
            "{}() outside a temporal join (it only marks FOR SYSTEM_TIME AS OF); write l JOIN t FOR SYSTEM_TIME AS OF l.ts ON l.k = t.k",
            crate::temporal::MARKER
        )));
    }
    if misplaced {
        return Err(unsupported(format!(
            "{MARKER}() outside an ASOF JOIN condition (it only marks one); {HOW}"
        )));
    }
    Ok(())
}
