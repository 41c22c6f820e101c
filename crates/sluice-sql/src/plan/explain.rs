//! `EXPLAIN` text of the plan nodes whose description does not fit in the
//! plan's own formatting (kept here so `plan.rs` stays one read).

use std::fmt;

use datafusion::logical_expr::{Expr, SortExpr};

use super::*;

/// A frame as SQL writes it.
pub(super) fn frame_sql(frame: &OverFrame) -> String {
    let (units, preceding) = match frame {
        OverFrame::Rows { preceding } => ("ROWS", preceding.map(|n| n.to_string())),
        OverFrame::Range { preceding } => ("RANGE", preceding.map(|d| d.to_string())),
    };
    match preceding {
        Some(n) => format!("{units} BETWEEN {n} PRECEDING AND CURRENT ROW"),
        None => format!("{units} BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"),
    }
}

/// `ChangelogOver`: what it recomputes when a row changes, and that its
/// state grows with the input's distinct keys (every live row is kept).
pub(super) fn changelog_over(
    f: &mut fmt::Formatter<'_>,
    pad: &str,
    partition_by: &[Expr],
    order_by: &[SortExpr],
    frame: &OverFrame,
    aggregates: &[Expr],
) -> fmt::Result {
    let list = |es: &mut dyn Iterator<Item = String>| es.collect::<Vec<_>>().join(", ");
    let after = match frame {
        OverFrame::Rows { preceding: Some(n) } => format!("the {n} rows after it"),
        OverFrame::Range { preceding: Some(d) } => {
            format!("its peers and the rows up to {d} after it")
        }
        OverFrame::Rows { preceding: None } | OverFrame::Range { preceding: None } => {
            "every row after it".to_string()
        }
    };
    writeln!(
        f,
        "{pad}ChangelogOver: partition_by=[{}], order_by=[{}] then the whole row, frame={}, aggregates=[{}], emit=changes (per cycle, a changed row and {after} retract their old outputs and insert new ones)",
        list(&mut partition_by.iter().map(|e| e.to_string())),
        list(&mut order_by.iter().map(|s| s.to_string())),
        frame_sql(frame),
        list(&mut aggregates.iter().map(|e| e.to_string())),
    )?;
    writeln!(
        f,
        "{pad}  state: every live input row with its last output, per partition key; grows with the input's distinct keys (never freed)"
    )
}

impl StreamNode {
    /// The node and its inputs, one per line, indented by `depth`.
    pub(super) fn fmt_indent(&self, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
        let pad = "  ".repeat(depth);
        let list = |es: &[Expr]| {
            es.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let bounds = |b: &[JoinStateBound]| {
            if b.is_empty() {
                "kept".to_string()
            } else {
                b.iter()
                    .map(|b| {
                        format!(
                            "until watermark - {}ms {} {}",
                            b.other_lag_ms,
                            if b.strict { ">=" } else { ">" },
                            b.expr
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" or ")
            }
        };
        let keys = |on: &[(Expr, Expr)]| {
            on.iter()
                .map(|(l, r)| format!("{l} = {r}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            StreamNode::Scan {
                input, changelog, ..
            } => writeln!(
                f,
                "{pad}Scan: {input}{}",
                if *changelog { " (changelog)" } else { "" }
            )?,
            StreamNode::Filter { input, predicate } => {
                writeln!(f, "{pad}Filter: {predicate}")?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::Project { input, exprs, .. } => {
                writeln!(f, "{pad}Project: {}", list(exprs))?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::Union { inputs, .. } => {
                writeln!(f, "{pad}UnionAll")?;
                for i in inputs {
                    i.fmt_indent(f, depth + 1)?;
                }
            }
            StreamNode::Join {
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                ..
            } => {
                match filter {
                    Some(f2) => writeln!(f, "{pad}InnerJoin: on=[{}], filter={f2}", keys(on))?,
                    None => writeln!(f, "{pad}InnerJoin: on=[{}]", keys(on))?,
                }
                writeln!(
                    f,
                    "{pad}  left rows: {}; right rows: {}",
                    bounds(left_bounds),
                    bounds(right_bounds)
                )?;
                left.fmt_indent(f, depth + 1)?;
                right.fmt_indent(f, depth + 1)?;
            }
            StreamNode::OuterJoin {
                kind,
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                changelog,
                ..
            } => {
                let filter = filter.as_ref().map(|e| format!(", filter={e}"));
                let emit = if *changelog {
                    "changes (a padded row is retracted at its first match)"
                } else {
                    "padded rows when the watermark frees them (append-only)"
                };
                writeln!(
                    f,
                    "{pad}{}OuterJoin: on=[{}]{}, emit={emit}",
                    match kind {
                        OuterKind::Left => "Left",
                        OuterKind::Right => "Right",
                        OuterKind::Full => "Full",
                    },
                    keys(on),
                    filter.unwrap_or_default()
                )?;
                let grows = |b: &[JoinStateBound], side: &str| {
                    if b.is_empty() {
                        format!("kept; state grows with the {side} rows (never freed)")
                    } else {
                        bounds(b)
                    }
                };
                writeln!(
                    f,
                    "{pad}  left rows: {}; right rows: {}",
                    grows(left_bounds, "left"),
                    grows(right_bounds, "right")
                )?;
                left.fmt_indent(f, depth + 1)?;
                right.fmt_indent(f, depth + 1)?;
            }
            StreamNode::AsofJoin {
                left,
                right,
                on,
                left_time,
                right_time,
                op,
                tolerance_ms,
                keep_unmatched,
                left_lag_ms,
                right_lag_ms,
                versioned,
                ..
            } => {
                let keys = on
                    .iter()
                    .map(|(l, r)| format!("{l} = {r}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let kind = if *keep_unmatched { "left" } else { "inner" };
                let tol = tolerance_ms.map_or(String::new(), |t| format!(", tolerance={t}ms"));
                match versioned {
                    Some(table) => writeln!(
                        f,
                        "{pad}TemporalJoin: {kind}, versioned={table}, on=[{keys}], as of {left_time} (version time {right_time})"
                    )?,
                    None => writeln!(
                        f,
                        "{pad}AsofJoin: {kind}, on=[{keys}], match={left_time} {} {right_time}{tol}",
                        op.as_str()
                    )?,
                }
                let (lrows, rrows) = if op.backward() {
                    (
                        format!(
                            "held until watermark - {right_lag_ms}ms {} {left_time}",
                            if *op == AsofOp::Gt { ">=" } else { ">" }
                        ),
                        format!(
                            "per key, the latest at or before min(watermark - {left_lag_ms}ms, held left rows' {left_time}) and later ones{}",
                            tolerance_ms.map_or(String::new(), |t| format!(", none older than that minus {t}ms"))
                        ),
                    )
                } else {
                    (
                        format!(
                            "held until watermark - {right_lag_ms}ms > their closest match's {right_time}{}",
                            match tolerance_ms {
                                Some(t) => format!(" or > {left_time} + {t}ms"),
                                None => " (a row with no match yet waits for one: state grows with unmatched left rows)".to_string(),
                            }
                        ),
                        format!(
                            "per key, those at or after min(watermark - {left_lag_ms}ms, held left rows' {left_time})"
                        ),
                    )
                };
                writeln!(f, "{pad}  left rows: {lrows}; right rows: {rrows}")?;
                left.fmt_indent(f, depth + 1)?;
                right.fmt_indent(f, depth + 1)?;
            }
            StreamNode::WindowAggregate {
                input,
                window,
                keys,
                aggregates,
                emit,
                ..
            } => {
                let w = match window.kind {
                    WindowKind::Tumble { size_ms, offset_ms } => {
                        format!("tumble(size={size_ms}ms, offset={offset_ms}ms)")
                    }
                    WindowKind::Hop { slide_ms, size_ms } => {
                        format!("hop(slide={slide_ms}ms, size={size_ms}ms)")
                    }
                    WindowKind::Session { gap_ms } => format!("session(gap={gap_ms}ms)"),
                };
                let emit = match emit {
                    EmitMode::OnWindowClose => "on window close",
                    EmitMode::Changes => "changes",
                };
                writeln!(
                    f,
                    "{pad}WindowAggregate: window={w} on {}, keys=[{}], aggregates=[{}], emit={emit}",
                    window.time,
                    list(keys),
                    list(aggregates)
                )?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::Aggregate {
                input,
                keys,
                aggregates,
                ..
            } => {
                writeln!(
                    f,
                    "{pad}UpdatingAggregate: keys=[{}], aggregates=[{}], emit=changes",
                    list(keys),
                    list(aggregates)
                )?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::LookupJoin {
                input,
                table,
                handle,
                keys,
                key_columns,
                left_outer,
                filter,
                ..
            } => {
                let on = keys
                    .iter()
                    .zip(key_columns)
                    .map(|(k, c)| format!("{k} = {table}.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let kind = if *left_outer { "Left" } else { "Inner" };
                match filter {
                    Some(f2) => writeln!(
                        f,
                        "{pad}{kind}LookupJoin: table={table}, on=[{on}], filter={f2}"
                    )?,
                    None => writeln!(f, "{pad}{kind}LookupJoin: table={table}, on=[{on}]")?,
                }
                writeln!(
                    f,
                    "{pad}  no state (rows read at processing time, not replay-deterministic); {}",
                    handle.describe
                )?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::Distinct { input, keys, .. } => {
                writeln!(
                    f,
                    "{pad}Distinct: keys=[{}], emit=first seen; state grows with distinct rows (never freed)",
                    list(keys)
                )?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::TopN {
                input,
                partition,
                order,
                limit,
                mode,
                ..
            } => {
                let order = order
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let how = match mode {
                    TopNMode::Windowed { key, lag_ms } => format!(
                        "emit=on window close; state: {limit} rows per partition, freed once the watermark passes {}{}",
                        partition.get(*key).map(|e| e.to_string()).unwrap_or_default(),
                        signed_ms(*lag_ms)
                    ),
                    TopNMode::Completes { column, lag_ms } => {
                        let (q, f) = input.schema().qualified_field(*column);
                        let name = Column::new(q.cloned(), f.name());
                        format!(
                            "emit=once the partition is complete; state: {limit} rows per partition, freed once the watermark passes the partition's latest {name}{}",
                            signed_ms(*lag_ms)
                        )
                    }
                    TopNMode::FirstByTime { lag_ms } => format!(
                        "emit=first rows by event time once the watermark passes them{}; state grows with distinct partition keys (a count each, never freed)",
                        signed_ms(*lag_ms)
                    ),
                    TopNMode::Changelog => format!(
                        "emit=changes; state grows with distinct partition keys ({limit} rows each, never freed)"
                    ),
                };
                writeln!(
                    f,
                    "{pad}TopN: partition=[{}], order=[{order}], limit={limit}, {how}",
                    list(partition)
                )?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::ChangelogOver {
                input,
                partition_by,
                order_by,
                frame,
                aggregates,
                ..
            } => {
                explain::changelog_over(f, &pad, partition_by, order_by, frame, aggregates)?;
                input.fmt_indent(f, depth + 1)?;
            }
            StreamNode::OverAggregate {
                input,
                partition_by,
                time,
                time_lag_ms,
                frame,
                aggregates,
                ..
            } => {
                let lag = if *time_lag_ms == 0 {
                    String::new()
                } else {
                    format!(" - {time_lag_ms}ms")
                };
                let (frame, state) = match frame {
                    OverFrame::Rows { preceding: Some(n) } => (
                        format!("ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"),
                        format!("rows until the watermark{lag} passes them, then the last {n} per partition key (grows with distinct partition keys)"),
                    ),
                    OverFrame::Rows { preceding: None } => (
                        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".to_string(),
                        format!("rows until the watermark{lag} passes them, then one running aggregate per partition key (grows with distinct partition keys)"),
                    ),
                    OverFrame::Range { preceding: Some(d) } => (
                        format!("RANGE BETWEEN {d} PRECEDING AND CURRENT ROW"),
                        format!("rows until the watermark{lag} passes them, then those with {time} >= watermark{lag} - {d} (freed by the watermark)"),
                    ),
                    OverFrame::Range { preceding: None } => (
                        "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".to_string(),
                        format!("rows until the watermark{lag} passes them, then one running aggregate per partition key (grows with distinct partition keys)"),
                    ),
                };
                writeln!(
                    f,
                    "{pad}OverAggregate: partition_by=[{}], order_by={time}, frame={frame}, aggregates=[{}], emit=when the watermark passes each row",
                    list(partition_by),
                    list(aggregates)
                )?;
                writeln!(f, "{pad}  state: {state}")?;
                input.fmt_indent(f, depth + 1)?;
            }
        }
        Ok(())
    }
}

/// A lag as EXPLAIN shows it after a value: ` + 5000ms`, ` - 1ms`, or nothing.
fn signed_ms(ms: i64) -> String {
    match ms.cmp(&0) {
        std::cmp::Ordering::Less => format!(" - {}ms", ms.unsigned_abs()),
        std::cmp::Ordering::Equal => String::new(),
        std::cmp::Ordering::Greater => format!(" + {ms}ms"),
    }
}

impl fmt::Display for StreamNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_indent(f, 0)
    }
}
