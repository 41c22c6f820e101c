//! Top-N and deduplication: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)`
//! kept where it is at most N, planned as one [`StreamNode::TopN`].
//!
//! DataFusion plans `SELECT * FROM (SELECT ..., ROW_NUMBER() OVER (...) AS rn
//! FROM s) WHERE rn <= 3` as a filter over projections over a `Window` node.
//! A `Window` alone has no streaming answer (every row would renumber its
//! partition forever); the filter's upper bound on the row number is what
//! makes it a top-N. So the filter is recognised first ([`row_number_bound`]),
//! and the `Window` node it bounds is then planned as the top-N
//! ([`top_n_node`]); the filter itself stays above it, unchanged, so `rn = 2`
//! or a condition on other columns keeps its meaning.
//!
//! How the output is emitted follows from event time, as Flink does:
//! - a partition key that bounds event time (a window's start or end, or a
//!   time column of the input) makes each partition complete once the
//!   watermark passes it: its N rows are emitted once, append-only, and
//!   the state freed;
//! - otherwise, ordering by an input time column ascending (Flink's
//!   "keep first row" deduplication) makes each row final once the
//!   watermark passes it: append-only, with a count kept per key;
//! - otherwise the result is a changelog: a row that enters the top N is
//!   inserted, one pushed out (or renumbered) is retracted.
//!
//! `SELECT DISTINCT ON (k) ... ORDER BY k, x` ([`distinct_on_node`]) and
//! `ORDER BY x LIMIT n` ([`order_limit_node`]) are the same operator: the
//! top-1 per `k`, and the top-n of one partition holding the whole stream.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ScalarValue};
use datafusion::logical_expr::expr::WindowFunctionDefinition;
use datafusion::logical_expr::logical_plan::{
    DistinctOn, FetchType, Filter, Limit, SkipType, Sort, Window,
};
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator, SortExpr};

use crate::bounds::TimeColumn;
use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::plan::{StreamNode, TopNMode, WindowKind, CHANGE_COLUMN};
use crate::window_udf::window_call;
use crate::window_udf::WindowFunction;

/// The spelling every top-N refusal points to.
pub(crate) const SUPPORTED: &str = "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x DESC) AS rn FROM s) WHERE rn <= N";

/// The deduplication spelling (keep the first row per key).
pub(crate) const DEDUP: &str = "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM s) WHERE rn = 1";

/// The most rows per partition a top-N keeps: each partition holds up to N
/// rows in memory, so N is the per-key memory multiplier.
pub const MAX_TOP_N: usize = 100_000;

/// If `filter` bounds the row number of a `ROW_NUMBER()` computed below it
/// (through projections and subquery aliases only), the `Window` node that
/// computes it and the bound N (the tightest of `rn <= N`, `rn < N + 1`,
/// `rn = N`, written either way round).
pub(crate) fn row_number_bound(filter: &Filter) -> Result<Option<(&Window, usize)>> {
    let mut found: Option<(&Window, i128)> = None;
    for c in crate::join::conjuncts(Some(&filter.predicate)) {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = c else {
            continue;
        };
        // Normalise to `column op literal`.
        let (col, op, lit) = match (column_of(left), literal_of(right)) {
            (Some(c), Some(v)) => (c, *op, v),
            _ => match (literal_of(left), column_of(right)) {
                (Some(v), Some(c)) => match op.swap() {
                    Some(op) => (c, op, v),
                    None => continue,
                },
                _ => continue,
            },
        };
        let n = match op {
            Operator::LtEq | Operator::Eq => lit,
            Operator::Lt => lit - 1,
            _ => continue,
        };
        let Some(window) = trace(&filter.input, col)? else {
            continue;
        };
        found = match found {
            Some((w, m)) if std::ptr::eq(w, window) => Some((w, m.min(n))),
            Some(other) => Some(other),
            None => Some((window, n)),
        };
    }
    let Some((window, n)) = found else {
        return Ok(None);
    };
    if n < 1 {
        return Err(SqlError::Unsupported(format!(
            "a row-number bound that keeps no row (at most {n}); write {SUPPORTED} with N >= 1"
        )));
    }
    let n = usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_TOP_N)
        .ok_or_else(|| {
            SqlError::Unsupported(format!(
                "a top-N of {n} rows per partition (at most {MAX_TOP_N} are kept per partition)"
            ))
        })?;
    Ok(Some((window, n)))
}

fn column_of(e: &Expr) -> Option<&Column> {
    match e {
        Expr::Column(c) => Some(c),
        Expr::Cast(c) => column_of(&c.expr),
        Expr::TryCast(c) => column_of(&c.expr),
        _ => None,
    }
}

fn literal_of(e: &Expr) -> Option<i128> {
    match e {
        Expr::Literal(v, _) => match v.cast_to(&DataType::Int64).ok()? {
            ScalarValue::Int64(Some(n)) => Some(i128::from(n)),
            _ => None,
        },
        Expr::Cast(c) => literal_of(&c.expr),
        Expr::TryCast(c) => literal_of(&c.expr),
        _ => None,
    }
}

/// The `Window` node whose function produces `col` of `plan`, following
/// columns passed through projections and aliases.
fn trace<'a>(plan: &'a LogicalPlan, col: &Column) -> Result<Option<&'a Window>> {
    match plan {
        LogicalPlan::Projection(p) => {
            let Ok(i) = p.schema.index_of_column(col) else {
                return Ok(None);
            };
            match p.expr[i].clone().unalias() {
                Expr::Column(c) => trace(&p.input, &c),
                _ => Ok(None),
            }
        }
        LogicalPlan::SubqueryAlias(a) => {
            let Ok(i) = a.schema.index_of_column(col) else {
                return Ok(None);
            };
            let (q, f) = a.input.schema().qualified_field(i);
            trace(&a.input, &Column::new(q.cloned(), f.name()))
        }
        LogicalPlan::Window(w) => {
            let Ok(i) = w.schema.index_of_column(col) else {
                return Ok(None);
            };
            let inputs = w.input.schema().fields().len();
            Ok((i >= inputs).then_some(w))
        }
        _ => Ok(None),
    }
}

/// The top-N for a `Window` node whose row number is kept up to `limit`,
/// over its already converted input.
pub(crate) fn top_n_node(
    window: &Window,
    input: StreamNode,
    catalog: &dyn PlanCatalog,
    limit: usize,
) -> Result<StreamNode> {
    let [expr] = window.window_expr.as_slice() else {
        return Err(SqlError::Unsupported(format!(
            "{} window functions over one OVER clause next to a bounded ROW_NUMBER(); a top-N computes only ROW_NUMBER(), write {SUPPORTED}",
            window.window_expr.len()
        )));
    };
    let Expr::WindowFunction(f) = expr.clone().unalias() else {
        return Err(SqlError::Unsupported(format!(
            "the window expression {expr} in a top-N; write {SUPPORTED}"
        )));
    };
    let name = match &f.fun {
        WindowFunctionDefinition::WindowUDF(u) => u.name().to_string(),
        WindowFunctionDefinition::AggregateUDF(u) => u.name().to_string(),
    };
    if name != "row_number" {
        return Err(SqlError::Unsupported(format!(
            "{}() OVER (...) bounded in WHERE: a top-N is written with ROW_NUMBER() (RANK and DENSE_RANK keep ties, which Sluice does not); write {SUPPORTED}",
            name.to_ascii_uppercase()
        )));
    }
    let p = &f.params;
    if p.order_by.is_empty() {
        return Err(SqlError::Unsupported(format!(
            "ROW_NUMBER() OVER (...) without ORDER BY: which rows are first would be arbitrary; write {SUPPORTED}"
        )));
    }
    if input.is_changelog() {
        return Err(SqlError::Unsupported(format!(
            "a top-N (ROW_NUMBER() OVER ...) over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); rank an append-only input, such as a windowed aggregation: {SUPPORTED}"
        )));
    }
    build(
        &p.partition_by,
        &p.order_by,
        limit,
        input,
        catalog,
        &window.schema,
    )
}

/// `SELECT DISTINCT ON (k) ... ORDER BY k, ts`: the first row per `k` in
/// that order, which is the top-1 of partition `k`; the selected columns
/// are then computed from it.
pub(crate) fn distinct_on_node(
    d: &DistinctOn,
    input: StreamNode,
    catalog: &dyn PlanCatalog,
) -> Result<StreamNode> {
    let Some(order) = d.sort_expr.as_ref().filter(|o| !o.is_empty()) else {
        return Err(SqlError::Unsupported(format!(
            "SELECT DISTINCT ON without ORDER BY: which row is kept per key would be arbitrary; add ORDER BY the keys then the column that picks the row, or write {DEDUP}"
        )));
    };
    if input.is_changelog() {
        return Err(SqlError::Unsupported(format!(
            "SELECT DISTINCT ON over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); write {DEDUP} over an append-only input"
        )));
    }
    for e in &d.select_expr {
        crate::window_udf::check_scalar_expr(e)?;
    }
    // The leading keys are constant within a partition: what orders its
    // rows is the rest (so `ORDER BY k, ts` is first by event time).
    let skip = order
        .iter()
        .take_while(|s| d.on_expr.contains(&s.expr))
        .count()
        .min(order.len() - 1);
    let order = &order[skip..];
    let rank = DFSchema::try_from(Schema::new(vec![Field::new(
        "__row_number",
        DataType::UInt64,
        false,
    )]))?;
    let ranked = Arc::new(input.schema().join(&rank)?);
    let top = build(&d.on_expr, order, 1, input, catalog, &ranked)?;
    let changelog = top.is_changelog();
    let mut exprs = d.select_expr.clone();
    let schema = if changelog {
        let (q, _) = top
            .schema()
            .qualified_field_with_unqualified_name(CHANGE_COLUMN)?;
        exprs.push(Expr::Column(Column::new(q.cloned(), CHANGE_COLUMN)));
        crate::plan::with_change_column(&d.schema)?
    } else {
        Arc::clone(&d.schema)
    };
    Ok(StreamNode::Project {
        input: Box::new(top),
        exprs,
        schema,
    })
}

/// `SELECT ... ORDER BY x LIMIT n`: the top-n of the whole stream (one
/// partition), a changelog unless ordered by event time ascending; the
/// row number is dropped again.
pub(crate) fn order_limit_node(
    limit: &Limit,
    sort: &Sort,
    input: StreamNode,
    catalog: &dyn PlanCatalog,
) -> Result<StreamNode> {
    match limit.get_skip_type()? {
        SkipType::Literal(0) => {}
        _ => {
            return Err(SqlError::Unsupported(format!(
            "OFFSET in a continuous query; keep rows N+1.. of a top-N with {SUPPORTED} AND rn > N"
        )))
        }
    }
    let n = match limit.get_fetch_type()? {
        FetchType::Literal(Some(n)) if (1..=MAX_TOP_N).contains(&n) => n,
        _ => {
            return Err(SqlError::Unsupported(format!(
                "LIMIT other than a number from 1 to {MAX_TOP_N} after ORDER BY; for the first N rows per key or window write {SUPPORTED}"
            )))
        }
    };
    if input.is_changelog() {
        return Err(SqlError::Unsupported(format!(
            "ORDER BY ... LIMIT over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); rank an append-only input: {SUPPORTED}"
        )));
    }
    let columns: Vec<Expr> = input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let rank = DFSchema::try_from(Schema::new(vec![Field::new(
        "__row_number",
        DataType::UInt64,
        false,
    )]))?;
    let ranked = Arc::new(input.schema().join(&rank)?);
    let base = Arc::clone(input.schema());
    let top = build(&[], &sort.expr, n, input, catalog, &ranked)?;
    let mut exprs = columns;
    let schema = if top.is_changelog() {
        let (q, _) = top
            .schema()
            .qualified_field_with_unqualified_name(CHANGE_COLUMN)?;
        exprs.push(Expr::Column(Column::new(q.cloned(), CHANGE_COLUMN)));
        crate::plan::with_change_column(&base)?
    } else {
        base
    };
    Ok(StreamNode::Project {
        input: Box::new(top),
        exprs,
        schema,
    })
}

/// The top-N node: the mode from what bounds the partition or the order;
/// `ranked` is the input schema plus the row number.
fn build(
    partition: &[Expr],
    order: &[SortExpr],
    limit: usize,
    input: StreamNode,
    catalog: &dyn PlanCatalog,
    ranked: &DFSchemaRef,
) -> Result<StreamNode> {
    let times = &crate::bounds::time_columns(&input, catalog);
    let schema = input.schema();
    let mut windowed = None;
    for (i, e) in partition.iter().enumerate() {
        crate::window_udf::check_scalar_expr(e)?;
        if let Some(lag_ms) = partition_lag(e, schema, times)? {
            if windowed.is_none_or(|(_, l)| lag_ms < l) {
                windowed = Some((i, lag_ms));
            }
        }
    }
    for s in order {
        crate::window_udf::check_scalar_expr(&s.expr)?;
    }
    let Some(first) = order.first() else {
        return Err(SqlError::Unsupported(format!(
            "a top-N without ORDER BY; write {SUPPORTED}"
        )));
    };
    // A partition key bounding event time frees state soonest and always
    // holds; a completion column frees it too (where FirstByTime keeps a
    // count per key forever), so it comes before ordering by time.
    let mode = if let Some((key, lag_ms)) = windowed {
        TopNMode::Windowed { key, lag_ms }
    } else if let Some(mode) = completion(partition, &input, catalog) {
        mode
    } else {
        match time_lag(&first.expr, times) {
            // NULLS FIRST would let a later NULL precede rows already emitted.
            Some(lag_ms) if first.asc && !first.nulls_first => TopNMode::FirstByTime { lag_ms },
            _ => TopNMode::Changelog,
        }
    };
    let out = if mode == TopNMode::Changelog {
        crate::plan::with_change_column(ranked)?
    } else {
        Arc::clone(ranked)
    };
    Ok(StreamNode::TopN {
        input: Box::new(input),
        partition: partition.to_vec(),
        order: order.to_vec(),
        limit,
        mode,
        schema: out,
    })
}

/// The lag of an input time column named by `e`.
fn time_lag(e: &Expr, times: &[TimeColumn]) -> Option<i64> {
    match e {
        Expr::Column(c) => times.iter().find(|t| &t.column == c).map(|t| t.lag_ms),
        _ => None,
    }
}

/// If partition key `e` bounds event time, the lag `l` such that a partition
/// with value `v` gets no more rows once `watermark > v + l`.
///
/// A time column with lag `L` has future rows at `>= watermark - L`, so the
/// partition of value `v` is complete when `v < watermark - L`. A tumbling
/// window's end `e` over such a column is complete when `e <= watermark - L`
/// (lag `L - 1`), its start `s` when `s + size <= watermark - L`.
fn partition_lag(
    e: &Expr,
    schema: &datafusion::common::DFSchema,
    times: &[TimeColumn],
) -> Result<Option<i64>> {
    if let Some(l) = time_lag(e, times) {
        return Ok(Some(l));
    }
    let Some((func, spec)) = window_call(e, schema)? else {
        return Ok(None);
    };
    let WindowKind::Tumble { size_ms, .. } = spec.kind else {
        return Err(SqlError::Unsupported(format!(
            "ROW_NUMBER() OVER (PARTITION BY {}(...)): a hopping or session window puts a row in several windows or merges them; partition by tumble(), or rank the output of a windowed aggregation",
            func.name()
        )));
    };
    let Some(l) = time_lag(&spec.time, times) else {
        return Ok(None);
    };
    let lag = match func {
        WindowFunction::TumbleEnd => l.saturating_sub(1),
        _ => l.saturating_add(size_ms).saturating_sub(1),
    };
    Ok(Some(lag))
}

/// [`TopNMode::Completes`] when every key of one of the input's completion
/// columns is among the partition keys (so a partition holds rows of one
/// key value only), with the smallest lag among those that qualify.
fn completion(
    partition: &[Expr],
    input: &StreamNode,
    catalog: &dyn PlanCatalog,
) -> Option<TopNMode> {
    let schema = input.schema();
    crate::bounds::completions(input, catalog)
        .into_iter()
        .filter(|c| {
            c.keys.iter().all(|alts| {
                alts.iter().any(|col| {
                    partition
                        .iter()
                        .any(|p| matches!(p, Expr::Column(x) if x == col))
                })
            })
        })
        .filter_map(|c| {
            let column = schema.index_of_column(&c.at).ok()?;
            Some((column, c.lag_ms))
        })
        .min_by_key(|(_, lag)| *lag)
        .map(|(column, lag_ms)| TopNMode::Completes { column, lag_ms })
}
