//! Planning Flink's event-time temporal join, `l JOIN t FOR SYSTEM_TIME AS
//! OF l.ts ON l.k = t.k`, into a [`StreamNode::AsofJoin`].
//!
//! The versioned table is a source declared with `PRIMARY KEY (k)` and
//! `WATERMARK FOR ts`: each row is a version of its key, valid from `ts`
//! until the key's next version. The version valid at `l.ts` is the latest
//! row of the key at or before `l.ts`, which is exactly an ASOF `>=` join
//! keyed by the primary key, so the plan is that join (with the versioned
//! table's name for EXPLAIN) and no second operator exists. The parser
//! (`crate::parser::temporal`) moves the `AS OF` time into the join's
//! condition as a call of the marker [`MARKER`].
//!
//! A lookup table written with `FOR SYSTEM_TIME AS OF` is a lookup join
//! instead (`crate::lookup`), which drops the marker.
//!
//! Refused by name: a processing-time temporal join, a
//! versioned table that is not such a source (a changelog stream's rows
//! carry no version time of their own), an `ON` that does not equate
//! exactly the primary key, any other condition, and `RIGHT` / `FULL`.

use std::sync::Arc;

use datafusion::common::DFSchemaRef;
use datafusion::logical_expr::{Expr, ExprSchemable, JoinType, ScalarUDF, Signature, Volatility};

use crate::bounds::time_columns;
use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::join::split_condition;
use crate::plan::{AsofOp, StreamNode};

/// The marker function's name (not meant to be written by users).
pub(crate) const MARKER: &str = "__temporal_as_of";

/// How to write a temporal join, for error messages.
const HOW: &str = "write l JOIN t FOR SYSTEM_TIME AS OF l.ts ON l.k = t.k, with t a source declared with PRIMARY KEY (k) and WATERMARK FOR its version time";

/// The marker function, registered in the planning session.
pub(crate) fn marker_udf() -> ScalarUDF {
    crate::marker::marker_udf(
        MARKER,
        "a temporal join's AS OF time",
        Signature::any(1, Volatility::Immutable),
    )
}

/// The `AS OF` time, if `e` is a marker call.
pub(crate) fn marker_arg(e: &Expr) -> Option<&Expr> {
    match e {
        Expr::ScalarFunction(f) if f.func.name() == MARKER => f.args.first(),
        _ => None,
    }
}

fn unsupported(msg: impl Into<String>) -> SqlError {
    SqlError::Unsupported(msg.into())
}

/// The source a versioned-table input reads, if it is one read whole: the
/// source itself, or columns of it (an alias).
fn versioned_source(node: &StreamNode) -> Option<&str> {
    match node {
        StreamNode::Scan { input, .. } => Some(input),
        StreamNode::Project { input, exprs, .. }
            if exprs
                .iter()
                .all(|e| matches!(e.clone().unalias(), Expr::Column(_))) =>
        {
            versioned_source(input)
        }
        _ => None,
    }
}

/// Build the temporal join from a DataFusion join whose condition holds
/// the marker.
pub(crate) fn temporal_node(
    catalog: &dyn PlanCatalog,
    join_type: JoinType,
    left: StreamNode,
    right: StreamNode,
    on: &[(Expr, Expr)],
    filter: Option<&Expr>,
    schema: DFSchemaRef,
) -> Result<StreamNode> {
    let keep_unmatched = match join_type {
        JoinType::Inner => false,
        JoinType::Left => true,
        other => {
            return Err(unsupported(format!(
                "{other} JOIN ... FOR SYSTEM_TIME AS OF (only JOIN and LEFT JOIN are supported: the versioned table is looked up, not joined both ways)"
            )))
        }
    };
    if left.is_changelog() {
        return Err(unsupported(
            "a temporal join of a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); the left input must be append-only",
        ));
    }
    if right.is_changelog() {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF a changelog stream (an updating aggregate): its rows carry no version time of their own; {HOW}"
        )));
    }
    let Some(table) = versioned_source(&right) else {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF a derived table (a subquery that filters or computes): the versioned table must be read whole; {HOW}"
        )));
    };
    let table = table.to_string();
    let key = catalog.primary_key(&table);
    if key.is_empty() {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF '{table}', which has no PRIMARY KEY (only a source declared with one is a versioned table); {HOW}"
        )));
    }
    let Some((version_col, _)) = catalog.time_columns(&table).into_iter().next() else {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF '{table}', which has no version time (a WATERMARK FOR column); {HOW}"
        )));
    };
    let right_times = time_columns(&right, catalog);
    let Some(version) = right_times.iter().find(|t| t.column.name == version_col) else {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF '{table}' without its version time column {version_col}; {HOW}"
        )));
    };
    let conjuncts = crate::join::conjuncts(filter);
    let markers: Vec<&Expr> = conjuncts.iter().filter_map(|c| marker_arg(c)).collect();
    let [as_of] = markers[..] else {
        return Err(unsupported(format!(
            "a temporal join condition that is not a conjunction (OR, NOT or nesting around it); {HOW}"
        )));
    };
    let rest: Vec<&Expr> = conjuncts
        .iter()
        .copied()
        .filter(|c| marker_arg(c).is_none())
        .collect();
    let (ls, rs) = (left.schema().clone(), right.schema().clone());
    let left_times = time_columns(&left, catalog);
    let lt = match as_of {
        Expr::Column(c) => left_times.iter().find(|t| &t.column == c),
        _ => None,
    };
    if matches!(as_of, Expr::Literal(v, _) if v.is_null()) {
        return Err(unsupported(format!(
            "a processing-time temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) against '{table}' (only a lookup table is read at processing time); join as of the left input's event time: {HOW}"
        )));
    }
    let Some(lt) = lt else {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF {as_of}: it must be the left input's event-time column (a source's WATERMARK FOR column, or a closed window's start or end); a processing-time temporal join is not supported"
        )));
    };
    let (left_time, right_time) = (
        Expr::Column(lt.column.clone()),
        Expr::Column(version.column.clone()),
    );
    let (lty, rty) = (left_time.get_type(&ls)?, right_time.get_type(&rs)?);
    if lty != rty {
        return Err(unsupported(format!(
            "FOR SYSTEM_TIME AS OF {left_time} ({lty}) against the version time {right_time} ({rty}); cast the left time in a subquery so both have the same type"
        )));
    }
    let (mut keys, residual) = split_condition(rest, &ls, &rs);
    keys.extend(on.iter().cloned());
    if let Some(e) = residual.first() {
        return Err(unsupported(format!(
            "condition {e} in a temporal join (only equalities of '{table}''s PRIMARY KEY are allowed); filter the left input in a subquery, or the result with WHERE"
        )));
    }
    let mut equated: Vec<String> = keys
        .iter()
        .filter_map(|(_, r)| match r {
            Expr::Column(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect();
    equated.sort();
    let mut wanted = key.clone();
    wanted.sort();
    if equated != wanted || keys.len() != key.len() {
        return Err(unsupported(format!(
            "a temporal join whose ON does not equate exactly '{table}''s PRIMARY KEY ({}) with the left input; {HOW}",
            key.join(", ")
        )));
    }
    for (l, r) in &keys {
        let (a, b) = (l.get_type(&ls)?, r.get_type(&rs)?);
        if a != b {
            return Err(unsupported(format!(
                "temporal join key {l} is {a} but {r} is {b}; cast one side so both have the same type"
            )));
        }
    }
    Ok(StreamNode::AsofJoin {
        left: Box::new(left),
        right: Box::new(right),
        on: keys,
        left_time,
        right_time,
        op: AsofOp::GtEq,
        tolerance_ms: None,
        keep_unmatched,
        left_lag_ms: lt.lag_ms,
        right_lag_ms: version.lag_ms,
        schema: Arc::clone(&schema),
        versioned: Some(format!("{table} PRIMARY KEY ({})", key.join(", "))),
    })
}
