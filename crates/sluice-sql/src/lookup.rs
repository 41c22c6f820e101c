//! Planning a lookup join: `FROM stream JOIN dim ON stream.k = dim.key`
//! where `dim` is a lookup table (registered from Rust with its key
//! columns), into one [`StreamNode::LookupJoin`].
//!
//! A lookup table is not a stream: it has no rows of its own to emit, it is
//! only read by key, at the moment a stream row is processed (Flink's lookup
//! join, processing-time semantics). So it may appear only as the right
//! input of an inner or `LEFT` join whose `ON` equates the leading key
//! columns with expressions over the stream; everything else in `ON` is a
//! residual condition over the joined row.

use datafusion::logical_expr::logical_plan::Join;
use datafusion::logical_expr::{Expr, ExprSchemable, JoinType, LogicalPlan};

use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::plan::StreamNode;
use crate::window_udf::check_scalar_expr;

/// The lookup table `plan` scans (under aliases), if it is a scan of one.
fn lookup_scan(catalog: &dyn PlanCatalog, plan: &LogicalPlan) -> Option<String> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let name = scan.table_name.table();
            catalog.lookup_table(name).map(|_| name.to_string())
        }
        LogicalPlan::SubqueryAlias(a) => lookup_scan(catalog, &a.input),
        _ => None,
    }
}

/// The error for a lookup table read anywhere but as the right input of a
/// join (`FROM dim`, a window over it, a subquery over it).
pub(crate) fn not_a_stream(name: &str) -> SqlError {
    SqlError::Unsupported(format!(
        "reading lookup table '{name}' as a stream (a lookup table has no rows of its own to emit); join it to a stream: FROM s JOIN {name} ON s.k = {name}.<key column>"
    ))
}

/// `FOR SYSTEM_TIME AS OF` is a lookup join on a lookup table (Flink's
/// lookup-join spelling; the time expression is not evaluated, since the
/// table is read at processing time) and a temporal join on a source or
/// stream (`crate::temporal` checks it is a versioned source).
pub(crate) fn check_system_time(catalog: &dyn PlanCatalog, tables: &[String]) -> Result<()> {
    for t in tables {
        if catalog.lookup_table(t).is_none() && catalog.relation(t).is_none() {
            return Err(SqlError::Unsupported(format!(
                "FOR SYSTEM_TIME AS OF on '{t}', which is neither a lookup table nor a source; register '{t}' as a lookup table, or declare it as a source with PRIMARY KEY and WATERMARK FOR"
            )));
        }
    }
    Ok(())
}

/// Plan `join` as a lookup join when its right input is a lookup table;
/// None when neither input is one. `convert` plans the stream input.
pub(crate) fn plan_lookup_join(
    catalog: &dyn PlanCatalog,
    join: &Join,
    condition: Vec<&Expr>,
    convert: &mut dyn FnMut(&LogicalPlan) -> Result<StreamNode>,
) -> Result<Option<StreamNode>> {
    let left_table = lookup_scan(catalog, &join.left);
    let Some(table) = lookup_scan(catalog, &join.right) else {
        return match left_table {
            Some(name) => Err(SqlError::Unsupported(format!(
                "lookup table '{name}' on the left of a JOIN; put the stream first: FROM s JOIN {name} ON s.k = {name}.<key column>"
            ))),
            None => Ok(None),
        };
    };
    if let Some(name) = left_table {
        return Err(SqlError::Unsupported(format!(
            "a JOIN of two lookup tables ('{name}' and '{table}'); join each to a stream"
        )));
    }
    let left_outer = match join.join_type {
        JoinType::Inner => false,
        JoinType::Left => true,
        other => {
            return Err(SqlError::Unsupported(format!(
                "{other} JOIN with lookup table '{table}' (a lookup join is an inner or LEFT JOIN with the lookup table on the right)"
            )))
        }
    };
    let Some((_, key_names, handle)) = catalog.lookup_table(&table) else {
        return Ok(None);
    };
    let input = convert(&join.left)?;
    if input.is_changelog() {
        return Err(SqlError::Unsupported(format!(
            "a lookup join of a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY) with '{table}'; look up from an append-only input"
        )));
    }
    let (ls, rs) = (input.schema(), join.right.schema());
    let (pairs, mut residual) = crate::join::split_condition(condition, ls, rs);
    // Per key column (by position), the stream expression it equals.
    let mut matched: Vec<Option<Expr>> = vec![None; key_names.len()];
    for (l, r) in pairs.into_iter().chain(join.on.iter().cloned()) {
        let pos = match &r {
            Expr::Column(c) => key_names.iter().position(|k| *k == c.name),
            _ => None,
        };
        match pos {
            Some(p) if matched[p].is_none() => {
                let (lt, rt) = (l.get_type(ls)?, r.get_type(rs)?);
                if lt != rt {
                    return Err(SqlError::Unsupported(format!(
                        "lookup join key {l} is {lt} but {r} is {rt}; cast the stream side: CAST({l} AS {rt})"
                    )));
                }
                matched[p] = Some(l);
            }
            _ => residual.push(l.eq(r)),
        }
    }
    let used = matched.iter().take_while(|m| m.is_some()).count();
    if used < key_names.len() {
        if let Some(later) = matched[used..].iter().position(Option::is_some) {
            return Err(SqlError::Unsupported(format!(
                "a lookup join on key column '{}' of '{table}' without its leading key column '{}'; the equalities must cover a leading part of its key ({})",
                key_names[used + later],
                key_names[used],
                key_names.join(", ")
            )));
        }
    }
    if used == 0 {
        return Err(SqlError::Unsupported(format!(
            "a JOIN with lookup table '{table}' without an equality on its key column '{}'; join ON s.k = {table}.{}",
            key_names.first().map(String::as_str).unwrap_or("?"),
            key_names.first().map(String::as_str).unwrap_or("?"),
        )));
    }
    for e in &residual {
        check_scalar_expr(e)?;
    }
    Ok(Some(StreamNode::LookupJoin {
        input: Box::new(input),
        table,
        handle,
        keys: matched.into_iter().flatten().collect(),
        key_columns: key_names[..used].to_vec(),
        left_outer,
        filter: residual.into_iter().reduce(Expr::and),
        schema: std::sync::Arc::clone(&join.schema),
    }))
}
