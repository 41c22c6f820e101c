//! Flink's window table-valued functions, mapped onto the `GROUP BY` window
//! functions.
//!
//! `FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size)) GROUP BY window_start,
//! window_end, k` is rewritten, before DataFusion plans it, into
//! `FROM t GROUP BY tumble(ts, size), tumble_end(ts, size), k`, with every
//! `window_start` / `window_end` / `window_time` reference replaced by the
//! window function it stands for. The query then plans into the same
//! [`crate::StreamNode::WindowAggregate`] as the `GROUP BY` form, so it shares
//! its state bounds, `EXPLAIN`, late-row handling and checkpoints; nothing
//! downstream knows the TVF was written. (The parser has already dropped the
//! `TABLE` word before `t`, which sqlparser cannot read; see
//! `parser::window_tvf`.)
//!
//! Sluice runs a window TVF only as a windowed aggregation, so a TVF that is
//! not the single relation of a `SELECT ... GROUP BY window_start,
//! window_end` is refused with the spelling that works.

use std::ops::ControlFlow;

use arrow::datatypes::DataType;
use datafusion::sql::sqlparser::ast as sp;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};

/// The columns a window TVF adds to every row.
const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];

/// The spelling every refusal points to.
const SUPPORTED: &str = "SELECT window_start, window_end, k, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k";

/// Rewrite every window TVF in `query`; `None` when it has none.
pub(crate) fn rewrite(catalog: &dyn PlanCatalog, query: &sp::Query) -> Result<Option<sp::Query>> {
    let mut q = query.clone();
    if rewrite_query(catalog, &mut q)? {
        Ok(Some(q))
    } else {
        Ok(None)
    }
}

fn rewrite_query(catalog: &dyn PlanCatalog, q: &mut sp::Query) -> Result<bool> {
    rewrite_set_expr(catalog, &mut q.body)
}

fn rewrite_set_expr(catalog: &dyn PlanCatalog, body: &mut sp::SetExpr) -> Result<bool> {
    match body {
        sp::SetExpr::Select(select) => rewrite_select(catalog, select),
        sp::SetExpr::Query(q) => rewrite_query(catalog, q),
        sp::SetExpr::SetOperation { left, right, .. } => {
            let l = rewrite_set_expr(catalog, left)?;
            let r = rewrite_set_expr(catalog, right)?;
            Ok(l || r)
        }
        _ => Ok(false),
    }
}

/// Which window TVF a table function calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tvf {
    Tumble,
    Hop,
    Session,
}

impl Tvf {
    fn of(expr: &sp::Expr) -> Option<(Self, &sp::Function)> {
        let sp::Expr::Function(f) = expr else {
            return None;
        };
        let name = f.name.to_string().to_ascii_uppercase();
        let tvf = match name.as_str() {
            "TUMBLE" => Self::Tumble,
            "HOP" => Self::Hop,
            "SESSION" => Self::Session,
            _ => return None,
        };
        Some((tvf, f))
    }

    fn name(self) -> &'static str {
        match self {
            Self::Tumble => "TUMBLE",
            Self::Hop => "HOP",
            Self::Session => "SESSION",
        }
    }

    /// Parameter names in Flink's positional order; the first `required` must be given.
    fn params(self) -> (&'static [&'static str], usize) {
        match self {
            Self::Tumble => (&["data", "timecol", "size", "offset"], 3),
            Self::Hop => (&["data", "timecol", "slide", "size"], 4),
            Self::Session => (&["data", "timecol", "gap"], 3),
        }
    }
}

/// A window TVF call, resolved.
struct WindowTvf {
    tvf: Tvf,
    /// The relation it reads.
    table: sp::ObjectName,
    /// How the rewritten query refers to it (the TVF's alias or the table's name).
    qualifier: String,
    alias: Option<sp::TableAlias>,
    /// `window_start`, `window_end` and `window_time`, in that order.
    exprs: [sp::Expr; 3],
}

fn rewrite_select(catalog: &dyn PlanCatalog, select: &mut sp::Select) -> Result<bool> {
    let mut changed = false;
    let mut found = None;
    let single = select.from.len() == 1 && select.from[0].joins.is_empty();
    for twj in &mut select.from {
        let factors =
            std::iter::once(&mut twj.relation).chain(twj.joins.iter_mut().map(|j| &mut j.relation));
        for factor in factors {
            match factor {
                sp::TableFactor::Derived { subquery, .. } => {
                    changed |= rewrite_query(catalog, subquery)?;
                }
                sp::TableFactor::TableFunction { expr, alias } => {
                    if let Some((tvf, f)) = Tvf::of(expr) {
                        if !single {
                            return Err(SqlError::Unsupported(format!(
                                "{}(TABLE ...) joined with another relation: a window TVF must be the only relation in FROM; write {SUPPORTED}",
                                tvf.name()
                            )));
                        }
                        found = Some(resolve(catalog, tvf, f, alias.clone())?);
                    }
                }
                _ => {}
            }
        }
    }
    let Some(w) = found else {
        return Ok(changed);
    };
    apply(select, &w)?;
    Ok(true)
}

/// Check the call's arguments and build the window expressions.
fn resolve(
    catalog: &dyn PlanCatalog,
    tvf: Tvf,
    f: &sp::Function,
    alias: Option<sp::TableAlias>,
) -> Result<WindowTvf> {
    let name = tvf.name();
    let bad = |msg: String| SqlError::Syntax(format!("{name}(TABLE ...): {msg}"));
    let sp::FunctionArguments::List(list) = &f.args else {
        return Err(bad(format!(
            "expected {name}(TABLE t, DESCRIPTOR(ts), ...)"
        )));
    };
    let (params, required) = tvf.params();
    let mut args: Vec<Option<sp::Expr>> = vec![None; params.len()];
    let mut positional = 0;
    for arg in &list.args {
        let (slot, e) = match arg {
            sp::FunctionArg::Unnamed(e) => {
                positional += 1;
                (positional - 1, e)
            }
            sp::FunctionArg::Named { name: n, arg, .. } => {
                let lower = n.value.to_ascii_lowercase();
                let slot = params.iter().position(|p| *p == lower).ok_or_else(|| {
                    bad(format!(
                        "unknown argument name '{}' (known: {})",
                        n.value,
                        params.join(", ").to_ascii_uppercase()
                    ))
                })?;
                (slot, arg)
            }
            other => return Err(bad(format!("unsupported argument {other}"))),
        };
        let sp::FunctionArgExpr::Expr(e) = e else {
            return Err(bad(format!("unsupported argument {e}")));
        };
        let Some(place) = args.get_mut(slot) else {
            return Err(bad(format!(
                "too many arguments (at most {})",
                params.len()
            )));
        };
        if place.is_some() {
            return Err(bad(format!(
                "argument {} is given twice",
                params[slot].to_ascii_uppercase()
            )));
        }
        *place = Some(e.clone());
    }
    if let Some(missing) = args.iter().take(required).position(Option::is_none) {
        return Err(bad(format!(
            "missing argument {}",
            params[missing].to_ascii_uppercase()
        )));
    }
    let arg = |i: usize| {
        args[i]
            .clone()
            .ok_or_else(|| bad("missing argument".into()))
    };

    let table = match arg(0)? {
        sp::Expr::Identifier(id) => sp::ObjectName::from(vec![id]),
        sp::Expr::CompoundIdentifier(ids) => sp::ObjectName::from(ids),
        other => {
            return Err(bad(format!(
                "the data argument must be TABLE name, found {other}"
            )))
        }
    };
    let table_key = match table.0.as_slice() {
        [sp::ObjectNamePart::Identifier(id)] => resolved(id),
        _ => table.to_string(),
    };
    let (schema, _) = catalog
        .relation(&table_key)
        .ok_or_else(|| SqlError::Catalog(format!("no source or stream named '{table_key}'")))?;
    let ts = match arg(1)? {
        sp::Expr::Function(d) if d.name.to_string().eq_ignore_ascii_case("descriptor") => {
            match &d.args {
                sp::FunctionArguments::List(l) => match l.args.as_slice() {
                    [sp::FunctionArg::Unnamed(sp::FunctionArgExpr::Expr(sp::Expr::Identifier(
                        id,
                    )))] => id.clone(),
                    _ => {
                        return Err(bad(
                            "DESCRIPTOR(...) must name exactly one time column".into()
                        ))
                    }
                },
                _ => {
                    return Err(bad(
                        "DESCRIPTOR(...) must name exactly one time column".into()
                    ))
                }
            }
        }
        other => {
            return Err(bad(format!(
                "the time argument must be DESCRIPTOR(column), found {other}"
            )))
        }
    };
    for c in WINDOW_COLUMNS {
        if schema.field_with_name(c).is_ok() {
            return Err(SqlError::Unsupported(format!(
                "{name}(TABLE {table}, ...): '{table}' already has a column named '{c}', which the window TVF adds; rename it in a stream first"
            )));
        }
    }
    let ts_type = schema
        .field_with_name(&resolved(&ts))
        .map(|f| f.data_type().clone())
        .map_err(|_| {
            SqlError::Catalog(format!(
                "{name}(TABLE {table}, DESCRIPTOR({ts}), ...): '{table}' has no column '{}'",
                resolved(&ts)
            ))
        })?;
    let (start, end) = match tvf {
        Tvf::Tumble => {
            let offset = args[3]
                .as_ref()
                .map(|o| format!(", {o}"))
                .unwrap_or_default();
            let size = arg(2)?;
            (
                format!("tumble({ts}, {size}{offset})"),
                format!("tumble_end({ts}, {size}{offset})"),
            )
        }
        Tvf::Hop => {
            let (slide, size) = (arg(2)?, arg(3)?);
            (
                format!("hop({ts}, {slide}, {size})"),
                format!("hop_end({ts}, {slide}, {size})"),
            )
        }
        Tvf::Session => {
            let gap = arg(2)?;
            (
                format!("session({ts}, {gap})"),
                format!("session_end({ts}, {gap})"),
            )
        }
    };
    // Flink's window_time is the last instant inside the window.
    let time = match ts_type {
        DataType::Int64 => format!("{end} - 1"),
        _ => format!("{end} - INTERVAL '1' MILLISECOND"),
    };
    let qualifier = alias
        .as_ref()
        .map(|a| resolved(&a.name))
        .unwrap_or_else(|| table_key.clone());
    Ok(WindowTvf {
        tvf,
        table,
        qualifier,
        alias,
        exprs: [parse_expr(&start)?, parse_expr(&end)?, parse_expr(&time)?],
    })
}

fn parse_expr(sql: &str) -> Result<sp::Expr> {
    Ok(Parser::new(&GenericDialect {})
        .try_with_sql(sql)?
        .parse_expr()?)
}

/// An identifier as DataFusion resolves it: unquoted names are lower-cased.
fn resolved(id: &sp::Ident) -> String {
    match id.quote_style {
        Some(_) => id.value.clone(),
        None => id.value.to_ascii_lowercase(),
    }
}

/// Which window column (index into [`WINDOW_COLUMNS`]) an expression names.
fn window_column(e: &sp::Expr, qualifier: &str) -> Option<usize> {
    let id = match e {
        sp::Expr::Identifier(id) => id,
        sp::Expr::CompoundIdentifier(ids) => match ids.as_slice() {
            [q, id] if resolved(q) == qualifier => id,
            _ => return None,
        },
        _ => return None,
    };
    WINDOW_COLUMNS.iter().position(|c| *c == resolved(id))
}

/// Replace the TVF by its table and every window column by its expression.
fn apply(select: &mut sp::Select, w: &WindowTvf) -> Result<()> {
    let name = w.tvf.name();
    let ungrouped = matches!(&select.group_by, sp::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if ungrouped && has_over(select) {
        return apply_ranked(select, w);
    }
    let group = match &select.group_by {
        sp::GroupByExpr::Expressions(exprs, mods) if !exprs.is_empty() && mods.is_empty() => exprs,
        _ => {
            return Err(SqlError::Unsupported(format!(
                "{name}(TABLE ...) without GROUP BY window_start, window_end: Sluice runs a window TVF only as a windowed aggregation; write {SUPPORTED}"
            )))
        }
    };
    let grouped: Vec<usize> = group
        .iter()
        .filter_map(|g| window_column(g, &w.qualifier))
        .collect();
    if grouped.contains(&2) {
        return Err(SqlError::Unsupported(format!(
            "GROUP BY window_time over {name}(TABLE ...): group by window_start and window_end, and select window_time"
        )));
    }
    if !(grouped.contains(&0) && grouped.contains(&1)) {
        return Err(SqlError::Unsupported(format!(
            "an aggregation over {name}(TABLE ...) must GROUP BY both window_start and window_end (Flink's rule); write {SUPPORTED}"
        )));
    }
    if let Some(filter) = &select.selection {
        let mut uses = false;
        let _ = sp::visit_expressions(filter, |e| {
            uses |= window_column(e, &w.qualifier).is_some();
            ControlFlow::<()>::Continue(())
        });
        if uses {
            return Err(SqlError::Unsupported(format!(
                "window_start / window_end / window_time in the WHERE of a query over {name}(TABLE ...): filter on them in HAVING, or in a query over this stream"
            )));
        }
    }
    let replace = |e: &mut sp::Expr| {
        if let Some(i) = window_column(e, &w.qualifier) {
            *e = w.exprs[i].clone();
        }
        ControlFlow::<()>::Continue(())
    };
    for item in &mut select.projection {
        // A bare window column keeps its name in the output.
        if let sp::SelectItem::UnnamedExpr(e) = item {
            if let Some(i) = window_column(e, &w.qualifier) {
                *item = sp::SelectItem::ExprWithAlias {
                    expr: w.exprs[i].clone(),
                    alias: sp::Ident::new(WINDOW_COLUMNS[i]),
                };
                continue;
            }
        }
        let _ = sp::visit_expressions_mut(item, replace);
    }
    let _ = sp::visit_expressions_mut(&mut select.group_by, replace);
    if let Some(having) = &mut select.having {
        let _ = sp::visit_expressions_mut(having, replace);
    }
    replace_relation(select, w)
}

/// Whether a select computes a window function (`... OVER (...)`).
fn has_over(select: &sp::Select) -> bool {
    let mut found = false;
    let _ = sp::visit_expressions(&select.projection, |e| {
        found |= matches!(e, sp::Expr::Function(f) if f.over.is_some());
        ControlFlow::<()>::Continue(())
    });
    found
}

/// A `TUMBLE` TVF read row by row for a top-N (`ROW_NUMBER() OVER
/// (PARTITION BY window_start, window_end ...)`): each row is in exactly one
/// tumbling window, so the window columns are plain per-row values, which
/// `SELECT *` also gets (as Flink's TVF adds them to every row).
fn apply_ranked(select: &mut sp::Select, w: &WindowTvf) -> Result<()> {
    if w.tvf != Tvf::Tumble {
        return Err(SqlError::Unsupported(format!(
            "{}(TABLE ...) without GROUP BY: a hopping or session window puts a row in several windows or merges them, so only TUMBLE rows can be ranked per window; rank the output of a windowed aggregation, or write {SUPPORTED}",
            w.tvf.name()
        )));
    }
    if let Some(filter) = &select.selection {
        let mut uses = false;
        let _ = sp::visit_expressions(filter, |e| {
            uses |= window_column(e, &w.qualifier).is_some();
            ControlFlow::<()>::Continue(())
        });
        if uses {
            return Err(SqlError::Unsupported(
                "window_start / window_end / window_time in the WHERE of a query over TUMBLE(TABLE ...): filter on them in a query over this one".into(),
            ));
        }
    }
    let replace = |e: &mut sp::Expr| {
        if let Some(i) = window_column(e, &w.qualifier) {
            *e = w.exprs[i].clone();
        }
        ControlFlow::<()>::Continue(())
    };
    let mut items = Vec::new();
    for mut item in std::mem::take(&mut select.projection) {
        match &item {
            sp::SelectItem::Wildcard(_) | sp::SelectItem::QualifiedWildcard(..) => {
                items.push(item);
                for (i, c) in WINDOW_COLUMNS.iter().enumerate() {
                    items.push(sp::SelectItem::ExprWithAlias {
                        expr: w.exprs[i].clone(),
                        alias: sp::Ident::new(*c),
                    });
                }
                continue;
            }
            sp::SelectItem::UnnamedExpr(e) => {
                if let Some(i) = window_column(e, &w.qualifier) {
                    items.push(sp::SelectItem::ExprWithAlias {
                        expr: w.exprs[i].clone(),
                        alias: sp::Ident::new(WINDOW_COLUMNS[i]),
                    });
                    continue;
                }
            }
            _ => {}
        }
        let _ = sp::visit_expressions_mut(&mut item, replace);
        items.push(item);
    }
    select.projection = items;
    replace_relation(select, w)
}

/// Read the TVF's table in its place.
fn replace_relation(select: &mut sp::Select, w: &WindowTvf) -> Result<()> {
    let alias = w
        .alias
        .as_ref()
        .map(|a| format!(" AS {}", a.name))
        .unwrap_or_default();
    let relation = Parser::new(&GenericDialect {})
        .try_with_sql(&format!("{}{alias}", w.table))?
        .parse_table_factor()?;
    select.from[0].relation = relation;
    Ok(())
}

#[cfg(test)]
#[path = "window_tvf_tests.rs"]
mod tests;
