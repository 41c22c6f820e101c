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
//!
//! # Completion columns
//!
//! Some joins bound the *other* side's time by a plain column of a kept
//! row that is not itself event time: Nexmark q9's
//! `B.date_time BETWEEN A.date_time AND A.expires`. Call the capped side L
//! (auctions), its column `L.c` (`expires`), and the other side R (bids,
//! event time `R.ts`, lag `l`). Every row R will still produce has
//! `R.ts >= watermark - l`, and a joined pair has `R.ts <= L.c`, so:
//!
//! - **L may free a row** once `watermark - l > L.c`: every future R row is
//!   past its cap. This holds whatever `L.c` is, as [`join_bounds`] finds.
//! - **R may free a row** only by the lower bound `R.ts >= L.ts - k`:
//!   future L rows have `L.ts >= watermark - l_L`, so once
//!   `watermark - l_L - k > R.ts` no future L row can reach it. `L.c` says
//!   nothing about future L rows (an L row can arrive with any `L.c`), so
//!   it frees nothing on R's side; without a lower bound R is kept.
//! - **The pairs of one L row are complete** once `watermark - l > L.c`: a
//!   future pair needs a future R row (L's row already met every kept R
//!   row when it arrived), and that R row cannot satisfy the cap. So the
//!   join output carries a [`Completion`]: rows with L's key values are
//!   done once the watermark passes the largest `L.c` among them, *as far
//!   as the L rows already seen go*. A later L row with the same key would
//!   bring new pairs, so a consumer that treats the key as complete (the
//!   top-N, [`crate::plan::TopNMode::Completes`]) relies on L's join key
//!   naming one L row, as an auction id does. To keep that assumption where
//!   it is plausible, a completion is derived only from a cap column that
//!   is not a time column of L (an interval's end, like `expires`): a cap by
//!   L's own event time (`A.date_time <= B.date_time` caps nothing useful on
//!   the bid side, whose many rows per auction keep coming) gives none.

use datafusion::common::{Column, DFSchema};
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

/// A column of a node's output that says when the rows of a key are
/// complete (see the module docs): once `watermark > at + lag_ms` for the
/// largest `at` among the rows with given values of `keys`, no further row
/// with those values comes from the rows of the capped join side seen so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// One entry per join key pair: the output columns that carry it (both
    /// sides' columns where both are plain columns; equal in every row).
    pub keys: Vec<Vec<Column>>,
    /// The completion column.
    pub at: Column,
    /// Lag added to `at` before comparing with the watermark.
    pub lag_ms: i64,
}

/// The completion columns of a node's output.
pub fn completions(node: &StreamNode, catalog: &dyn PlanCatalog) -> Vec<Completion> {
    match node {
        StreamNode::Filter { input, .. } | StreamNode::LookupJoin { input, .. } => {
            completions(input, catalog)
        }
        StreamNode::Project {
            input,
            exprs,
            schema,
        } => completions(input, catalog)
            .into_iter()
            .filter_map(|c| project_completion(&c, exprs, schema))
            .collect(),
        StreamNode::Join {
            left,
            right,
            on,
            left_bounds,
            right_bounds,
            ..
        } => {
            let mut out =
                join_completions(left_bounds, &time_columns(left, catalog), left.schema(), on);
            out.extend(join_completions(
                right_bounds,
                &time_columns(right, catalog),
                right.schema(),
                on,
            ));
            out
        }
        _ => vec![],
    }
}

/// The completions a join's bounds on one side's rows give: one per bound
/// by a plain column of that side that is not one of its time columns.
fn join_completions(
    bounds: &[JoinStateBound],
    times: &[TimeColumn],
    side: &DFSchema,
    on: &[(Expr, Expr)],
) -> Vec<Completion> {
    let keys: Option<Vec<Vec<Column>>> = on
        .iter()
        .map(|(l, r)| {
            let cols: Vec<Column> = [l, r]
                .into_iter()
                .filter_map(|e| match e {
                    Expr::Column(c) => Some(c.clone()),
                    _ => None,
                })
                .collect();
            (!cols.is_empty()).then_some(cols)
        })
        .collect();
    let Some(keys) = keys else {
        return vec![];
    };
    bounds
        .iter()
        .filter_map(|b| {
            let Expr::Column(c) = &b.expr else {
                return None;
            };
            if !side.has_column(c) || times.iter().any(|t| &t.column == c) {
                return None;
            }
            Some(Completion {
                keys: keys.clone(),
                at: c.clone(),
                lag_ms: b.other_lag_ms.saturating_sub(i64::from(b.strict)),
            })
        })
        .collect()
}

/// A completion through a projection: its columns renamed to the output's,
/// or none when the completion column or every column of a key is dropped.
fn project_completion(c: &Completion, exprs: &[Expr], schema: &DFSchema) -> Option<Completion> {
    let renamed = |col: &Column| -> Option<Column> {
        exprs.iter().enumerate().find_map(|(i, e)| {
            let inner = match e {
                Expr::Column(x) => x,
                Expr::Alias(a) => match a.expr.as_ref() {
                    Expr::Column(x) => x,
                    _ => return None,
                },
                _ => return None,
            };
            (inner == col).then(|| {
                let (q, f) = schema.qualified_field(i);
                Column::new(q.cloned(), f.name())
            })
        })
    };
    let keys: Option<Vec<Vec<Column>>> = c
        .keys
        .iter()
        .map(|alts| {
            let out: Vec<Column> = alts.iter().filter_map(renamed).collect();
            (!out.is_empty()).then_some(out)
        })
        .collect();
    Some(Completion {
        keys: keys?,
        at: renamed(&c.at)?,
        lag_ms: c.lag_ms,
    })
}
