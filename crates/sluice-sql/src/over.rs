//! Planning `agg(x) OVER (PARTITION BY k ORDER BY ts <frame>)` into a
//! [`StreamNode::OverAggregate`].
//!
//! A stream has no end, so an `OVER` aggregate can only be exact when a
//! row's frame is known to be complete: the frame must end at the current
//! row (no `FOLLOWING`) and be ordered by the input's event time ascending
//! (the column its watermark is on), so that once the watermark passes a
//! row's time no row of its frame, peers included, can still arrive. This
//! is Flink SQL's rule for `OVER` windows. Everything else is refused here,
//! by name, at `CREATE`.

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction, WindowFunctionParams};
use datafusion::logical_expr::{
    Expr, ExprSchemable, LogicalPlan, WindowFrame, WindowFrameBound, WindowFrameUnits,
    WindowFunctionDefinition,
};

use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::plan::{OverFrame, StreamNode};
use crate::window_udf::{check_scalar_expr, interval_scalar_ms, timestamp_scale};

/// The aggregate functions an `OVER` window computes (each can retract a
/// row leaving a bounded frame).
const SUPPORTED: &[&str] = &["sum", "count", "avg", "mean", "min", "max"];

/// How to write a supported `OVER` aggregate, appended to refusals.
const HOW: &str = "write SUM/COUNT/AVG/MIN/MAX(x) OVER (PARTITION BY k ORDER BY <event time> \
     ROWS|RANGE BETWEEN ... PRECEDING AND CURRENT ROW)";

fn refuse<T>(what: impl std::fmt::Display) -> Result<T> {
    refuse_how(HOW, what)
}

/// A refusal followed by `how` to write what is supported.
fn refuse_how<T>(how: &str, what: impl std::fmt::Display) -> Result<T> {
    Err(SqlError::Unsupported(format!("{what}; {how}")))
}

/// Plan one `LogicalPlan::Window` whose input is already converted.
pub(crate) fn over_node(
    catalog: &dyn PlanCatalog,
    window: &datafusion::logical_expr::logical_plan::Window,
    input: StreamNode,
) -> Result<StreamNode> {
    let mut shared: Option<&WindowFunctionParams> = None;
    let mut aggregates = Vec::with_capacity(window.window_expr.len());
    for e in &window.window_expr {
        let Expr::WindowFunction(wf) = unalias(e) else {
            return refuse(format!("window expression {e} in a continuous query"));
        };
        let WindowFunction { fun, params } = wf.as_ref();
        let udaf = match fun {
            WindowFunctionDefinition::AggregateUDF(udaf) => udaf,
            WindowFunctionDefinition::WindowUDF(udf) => {
                return refuse(format!(
                    "window function {}() OVER (...) in a continuous query (only aggregates over a frame are supported; for a top-N bound the row number: {})",
                    udf.name(),
                    crate::top_n::SUPPORTED
                ))
            }
        };
        let name = udaf.name().to_ascii_lowercase();
        if !SUPPORTED.contains(&name.as_str()) {
            return refuse(format!("aggregate {name}(...) OVER (...)"));
        }
        if params.distinct {
            return refuse(format!("{name}(DISTINCT ...) OVER (...)"));
        }
        if params.filter.is_some() {
            return refuse(format!("{name}(...) FILTER (WHERE ...) OVER (...)"));
        }
        match shared {
            None => shared = Some(params),
            Some(first)
                if first.partition_by == params.partition_by
                    && first.order_by == params.order_by
                    && first.window_frame == params.window_frame => {}
            Some(_) => return refuse("different OVER windows in one SELECT (use one PARTITION BY, ORDER BY and frame for every aggregate, or one query per window)"),
        }
        for a in &params.args {
            check_scalar_expr(a)?;
        }
        aggregates.push(Expr::AggregateFunction(AggregateFunction::new_udf(
            Arc::clone(udaf),
            params.args.clone(),
            false,
            None,
            vec![],
            None,
        )));
    }
    let Some(params) = shared else {
        return refuse("an empty OVER window list");
    };
    if matches!(window.input.as_ref(), LogicalPlan::Window(_)) {
        return refuse("different OVER windows in one SELECT (use one PARTITION BY, ORDER BY and frame for every aggregate, or one query per window)");
    }
    for p in &params.partition_by {
        check_scalar_expr(p)?;
    }
    if input.is_changelog() {
        return changelog_over(window, input, params, aggregates);
    }
    let (time, time_lag_ms) = event_time(catalog, &input, params)?;
    let time_type = time.get_type(input.schema().as_ref())?;
    let frame = frame(&params.window_frame, &time_type, HOW)?;
    Ok(StreamNode::OverAggregate {
        input: Box::new(input),
        partition_by: params.partition_by.clone(),
        time,
        time_lag_ms,
        frame,
        aggregates,
        schema: Arc::clone(&window.schema),
    })
}

/// How to write an `OVER` aggregate over a changelog, appended to its refusals.
const HOW_CHANGELOG: &str = "over a changelog input write SUM/COUNT/AVG/MIN/MAX(x) OVER \
     (PARTITION BY k ORDER BY o ROWS|RANGE BETWEEN ... PRECEDING AND CURRENT ROW)";

/// `OVER` over a changelog: any order (rows are recomputed when an
/// earlier one changes, so nothing waits for a watermark), the same frames.
fn changelog_over(
    window: &datafusion::logical_expr::logical_plan::Window,
    input: StreamNode,
    params: &WindowFunctionParams,
    aggregates: Vec<Expr>,
) -> Result<StreamNode> {
    if params.order_by.is_empty() {
        return refuse_how(
            HOW_CHANGELOG,
            "OVER without ORDER BY over a changelog input (a frame needs an order)",
        );
    }
    for s in &params.order_by {
        check_scalar_expr(&s.expr)?;
    }
    let f = &params.window_frame;
    let offset =
        matches!(&f.start_bound, WindowFrameBound::Preceding(v) if !v.is_null() && !is_zero(v));
    let order_type = match params.order_by.as_slice() {
        [one] => one.expr.get_type(input.schema().as_ref())?,
        _ if f.units == WindowFrameUnits::Range && offset => {
            return refuse_how(HOW_CHANGELOG, format!(
                "OVER frame {f} with several ORDER BY columns (a RANGE offset is measured on one column)"
            ))
        }
        _ => arrow::datatypes::DataType::Null,
    };
    let frame = frame(f, &order_type, HOW_CHANGELOG)?;
    // The output: the input's columns without its change column, then
    // the aggregates, then the change column again.
    let fields: Vec<_> = window
        .schema
        .iter()
        .filter(|(_, f)| f.name() != crate::plan::CHANGE_COLUMN)
        .map(|(q, f)| (q.cloned(), Arc::clone(f)))
        .collect();
    let base = datafusion::common::DFSchema::new_with_metadata(fields, Default::default())?;
    Ok(StreamNode::ChangelogOver {
        input: Box::new(input),
        partition_by: params.partition_by.clone(),
        order_by: params.order_by.clone(),
        frame,
        aggregates,
        schema: crate::plan::with_change_column(&base)?,
    })
}

fn is_zero(v: &ScalarValue) -> bool {
    matches!(
        v,
        ScalarValue::UInt64(Some(0)) | ScalarValue::Int64(Some(0))
    )
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// The `ORDER BY` column, which must be the input's event time ascending,
/// and the lag of its bound.
fn event_time(
    catalog: &dyn PlanCatalog,
    input: &StreamNode,
    params: &WindowFunctionParams,
) -> Result<(Expr, i64)> {
    let times = crate::bounds::time_columns(input, catalog);
    let names = || {
        let list: Vec<String> = times.iter().map(|t| t.column.name.clone()).collect();
        if list.is_empty() {
            "the input has no event-time column".to_string()
        } else {
            format!("the input's event time is {}", list.join(" or "))
        }
    };
    let [sort] = params.order_by.as_slice() else {
        return if params.order_by.is_empty() {
            refuse(format!(
                "OVER without ORDER BY in a continuous query (a frame needs an order; {})",
                names()
            ))
        } else {
            refuse(format!(
                "OVER (ORDER BY several columns) in a continuous query ({}; order by it alone)",
                names()
            ))
        };
    };
    let found = match &sort.expr {
        Expr::Column(c) => times.iter().find(|t| &t.column == c),
        _ => None,
    };
    let Some(t) = found else {
        return refuse(format!(
            "OVER (ORDER BY {}) in a continuous query: ORDER BY must be the event time ({})",
            sort.expr,
            names()
        ));
    };
    if !sort.asc {
        return refuse(format!(
            "OVER (ORDER BY {} DESC) in a continuous query: the event time must be ascending",
            sort.expr
        ));
    }
    Ok((sort.expr.clone(), t.lag_ms))
}

/// The frame, with a `RANGE` bound in the event-time column's own units.
fn frame(f: &WindowFrame, time_type: &arrow::datatypes::DataType, how: &str) -> Result<OverFrame> {
    match f.end_bound {
        WindowFrameBound::CurrentRow => {}
        _ => {
            return refuse_how(how, format!(
                "OVER frame {f}: a frame ending after the current row (FOLLOWING) would wait for rows the stream has not produced yet"
            ))
        }
    }
    let preceding = match &f.start_bound {
        WindowFrameBound::CurrentRow => Some(ScalarValue::UInt64(Some(0))),
        WindowFrameBound::Preceding(v) if v.is_null() => None,
        WindowFrameBound::Preceding(v) => Some(v.clone()),
        WindowFrameBound::Following(_) => {
            return refuse_how(
                how,
                format!("OVER frame {f}: a frame starting after the current row (FOLLOWING)"),
            )
        }
    };
    match f.units {
        WindowFrameUnits::Rows => {
            let n = preceding
                .map(|v| match v {
                    ScalarValue::UInt64(Some(n)) => Ok(n),
                    ScalarValue::Int64(Some(n)) if n >= 0 => Ok(n as u64),
                    other => refuse_how(how, format!("OVER frame {f}: ROWS bound {other}")),
                })
                .transpose()?;
            Ok(OverFrame::Rows { preceding: n })
        }
        WindowFrameUnits::Range => {
            let Some(v) = preceding else {
                return Ok(OverFrame::Range { preceding: None });
            };
            let raw = match (&v, time_type) {
                (ScalarValue::UInt64(Some(0)), _) => Some(0),
                (ScalarValue::Int64(Some(n)), arrow::datatypes::DataType::Int64) => Some(*n),
                (ScalarValue::UInt64(Some(n)), arrow::datatypes::DataType::Int64) => {
                    i64::try_from(*n).ok()
                }
                (_, arrow::datatypes::DataType::Timestamp(..)) => {
                    interval_scalar_ms(&v).and_then(|ms| {
                        let (mul, div) = timestamp_scale(time_type)?;
                        // Exact in the column's units, or refused.
                        let raw = ms.checked_mul(div)? / mul;
                        (raw.checked_mul(mul)? / div == ms).then_some(raw)
                    })
                }
                _ => None,
            };
            match raw {
                Some(d) if d >= 0 => Ok(OverFrame::Range { preceding: Some(d) }),
                _ => refuse_how(how, format!(
                    "OVER frame {f}: RANGE bound {v} over a {time_type} ORDER BY column (use an INTERVAL of days, hours, minutes, seconds or milliseconds)"
                )),
            }
        }
        WindowFrameUnits::Groups => refuse_how(how, format!("OVER frame {f}: GROUPS frames")),
    }
}
