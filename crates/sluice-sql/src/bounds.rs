//! Event-time bounds: which columns bound the rows still to come, and what
//! that lets a join forget.
//!
//! A column *bounds future rows with lag `l`* when every row a node will
//! still produce has `column >= watermark - l`: a source's watermark column
//! (lag 0; rows behind the source's watermark are dropped as late), a
//! closed window's end (lag 0) and start (lag = the window size), and those
//! columns passed through filters and plain projections.
//!
//! A join condition that caps the other side's time column by a value of a
//! kept row (`other.t <= f(row)`, `<`, `=`, `BETWEEN .. AND f(row)`) means
//! that, once `watermark - lag > f(row)`, no future row can match it, so the
//! join may forget the row.

use datafusion::common::Column;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use crate::ast::EmitMode;
use crate::catalog::PlanCatalog;
use crate::plan::{GroupSlot, JoinStateBound, StreamNode, WindowKind};

/// A column of a node's output that bounds its future rows.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeColumn {
    /// The column, qualified as in the node's schema.
    pub column: Column,
    /// Future rows have `column >= watermark - lag_ms`.
    pub lag_ms: i64,
}

/// The time columns of a node's output.
pub fn time_columns(node: &StreamNode, catalog: &dyn PlanCatalog) -> Vec<TimeColumn> {
    match node {
        StreamNode::Scan { input, schema, .. } => catalog
            .time_columns(input)
            .into_iter()
            .filter_map(|(name, lag_ms)| {
                let (q, f) = schema.qualified_field_with_unqualified_name(&name).ok()?;
                Some(TimeColumn {
                    column: Column::new(q.cloned(), f.name()),
                    lag_ms,
                })
            })
            .collect(),
        // A lookup join emits each input row when it arrives, its columns
        // unchanged: the input's bounds hold for the output.
        StreamNode::Filter { input, .. } | StreamNode::LookupJoin { input, .. } => {
            time_columns(input, catalog)
        }
        StreamNode::Project {
            input,
            exprs,
            schema,
        } => {
            let inner = time_columns(input, catalog);
            exprs
                .iter()
                .enumerate()
                .filter_map(|(i, e)| {
                    let c = match e {
                        Expr::Column(c) => c,
                        Expr::Alias(a) => match a.expr.as_ref() {
                            Expr::Column(c) => c,
                            _ => return None,
                        },
                        _ => return None,
                    };
                    let t = inner.iter().find(|t| &t.column == c)?;
                    let (q, f) = schema.qualified_field(i);
                    Some(TimeColumn {
                        column: Column::new(q.cloned(), f.name()),
                        lag_ms: t.lag_ms,
                    })
                })
                .collect()
        }
        StreamNode::WindowAggregate {
            window,
            slots,
            emit: EmitMode::OnWindowClose,
            schema,
            ..
        } => {
            let size = match window.kind {
                WindowKind::Tumble { size_ms, .. } | WindowKind::Hop { size_ms, .. } => size_ms,
                WindowKind::Session { .. } => return vec![],
            };
            slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let lag_ms = match s {
                        GroupSlot::WindowEnd => 0,
                        GroupSlot::WindowStart => size,
                        GroupSlot::Key(_) => return None,
                    };
                    let (q, f) = schema.qualified_field(i);
                    Some(TimeColumn {
                        column: Column::new(q.cloned(), f.name()),
                        lag_ms,
                    })
                })
                .collect()
        }
        // Input columns pass through, and a row leaves only once the
        // watermark (less the same lag) has passed its time.
        StreamNode::OverAggregate { input, .. } => time_columns(input, catalog),
        _ => vec![],
    }
}

fn time_lag(e: &Expr, times: &[TimeColumn]) -> Option<i64> {
    match e {
        Expr::Column(c) => times.iter().find(|t| &t.column == c).map(|t| t.lag_ms),
        _ => None,
    }
}

/// The join's state bounds per side, from its key pairs and residual
/// conjuncts. `reads_left`/`reads_right` tell which side an expression reads.
pub(crate) fn join_bounds(
    keys: &[(Expr, Expr)],
    residual: &[Expr],
    left_times: &[TimeColumn],
    right_times: &[TimeColumn],
    reads_left: impl Fn(&Expr) -> bool,
    reads_right: impl Fn(&Expr) -> bool,
) -> (Vec<JoinStateBound>, Vec<JoinStateBound>) {
    let mut left = Vec::new();
    let mut right = Vec::new();
    // `a <= b` (strict: `a < b`): when `a` is one side's time column and `b`
    // reads only the other side, the other side's rows get a bound.
    let mut le = |a: &Expr, b: &Expr, strict: bool| {
        if let Some(lag) = time_lag(a, right_times) {
            if reads_left(b) {
                left.push(JoinStateBound {
                    expr: b.clone(),
                    other_lag_ms: lag,
                    strict,
                });
            }
        }
        if let Some(lag) = time_lag(a, left_times) {
            if reads_right(b) {
                right.push(JoinStateBound {
                    expr: b.clone(),
                    other_lag_ms: lag,
                    strict,
                });
            }
        }
    };
    for (l, r) in keys {
        le(l, r, false);
        le(r, l, false);
    }
    for c in residual {
        match c {
            Expr::BinaryExpr(BinaryExpr {
                left: a,
                op,
                right: b,
            }) => match op {
                Operator::LtEq => le(a, b, false),
                Operator::Lt => le(a, b, true),
                Operator::GtEq => le(b, a, false),
                Operator::Gt => le(b, a, true),
                Operator::Eq => {
                    le(a, b, false);
                    le(b, a, false);
                }
                _ => {}
            },
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => {
                le(expr, high, false);
                le(low, expr, false);
            }
            _ => {}
        }
    }
    (left, right)
}
