//! Which queries run across the nodes of a split with a shuffle, and the
//! exchanges put in front of their keyed operators.
//!
//! A query is distributable when its keyed operator is a windowed or
//! updating `GROUP BY` reached from the root through filters and
//! projections only (a `HAVING`, an outer `SELECT`), over append-only
//! input computed row by row, keyed by columns of types the canonical key
//! encoding has (integers, dates, timestamps, booleans, strings). Every
//! other stateful operator is refused by name with its reason.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::{Expr, ExprSchemable};
use sluice_sql::plan::StreamNode;

use super::route::ExchangeOp;
use super::ShuffleSetup;
use crate::error::{EngineError, Result};
use crate::operators::expr::compile;
use crate::operators::Operator;

/// Name of the vnode column a wire batch carries last.
pub const VNODE_COLUMN: &str = "__sluice_vnode";

/// Why `root` cannot run across nodes with a shuffle, if it cannot;
/// `stateful` names the first stateful operator of a tree (see
/// `catalog::split_admission`).
pub fn refusal(
    root: &StreamNode,
    stateful: fn(&StreamNode) -> Option<&'static str>,
) -> Option<String> {
    match root {
        StreamNode::Filter { input, .. } | StreamNode::Project { input, .. } => {
            refusal(input, stateful)
        }
        StreamNode::WindowAggregate { input, keys, .. }
        | StreamNode::Aggregate { input, keys, .. } => {
            if input.is_changelog() {
                return Some(
                    "its aggregation reads an updating input; a shuffle between nodes carries \
                     append-only rows only so far"
                        .into(),
                );
            }
            if let Some(op) = stateful(input) {
                return Some(format!(
                    "its {op} feeds an aggregation; a shuffle between nodes runs one keyed \
                     operator per query, over row-by-row input, so far"
                ));
            }
            unsupported_key(keys, input).map(|(key, t)| {
                format!(
                    "its GROUP BY key {key} is of type {t}, which has no canonical key \
                     encoding to place it on a vnode (integers, dates, timestamps, booleans \
                     and strings have)"
                )
            })
        }
        other => stateful(other).map(|op| {
            format!(
                "its {op} keeps state across rows, and a shuffle between nodes carries the rows \
                 of windowed and updating GROUP BY aggregations only so far"
            )
        }),
    }
}

fn unsupported_key(keys: &[Expr], input: &StreamNode) -> Option<(String, DataType)> {
    keys.iter().find_map(|k| {
        let t = k.get_type(input.schema()).ok()?;
        let ok = matches!(
            t,
            DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32
                | DataType::UInt64
                | DataType::Date32
                | DataType::Timestamp(_, _)
                | DataType::Boolean
                | DataType::Utf8
        );
        (!ok).then(|| (k.schema_name().to_string(), t))
    })
}

/// Put an exchange in front of the keyed operator of `op` (compiled from
/// `node`, a plan [`refusal`] passed) for stream `stream`. A row-by-row
/// query is returned as it is.
pub fn distribute(
    stream: &str,
    node: &StreamNode,
    op: Operator,
    setup: &ShuffleSetup,
) -> Result<Operator> {
    let mismatch = || {
        EngineError::Internal(format!(
            "stream '{stream}': its operators do not follow its plan"
        ))
    };
    Ok(match (node, op) {
        (
            StreamNode::Filter { input, .. },
            Operator::Filter {
                input: child,
                predicate,
            },
        ) => Operator::Filter {
            input: Box::new(distribute(stream, input, *child, setup)?),
            predicate,
        },
        (
            StreamNode::Project { input, .. },
            Operator::Project {
                input: child,
                exprs,
                schema,
            },
        ) => Operator::Project {
            input: Box::new(distribute(stream, input, *child, setup)?),
            exprs,
            schema,
        },
        (
            StreamNode::WindowAggregate { input, keys, .. }
            | StreamNode::Aggregate { input, keys, .. },
            Operator::Stateful { mut inputs, op },
        ) => {
            let child = inputs
                .pop()
                .filter(|_| inputs.is_empty())
                .ok_or_else(mismatch)?;
            let in_schema = input.schema();
            let mut fields: Vec<Field> = in_schema
                .as_arrow()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect();
            fields.push(Field::new(VNODE_COLUMN, DataType::UInt32, false));
            let edge = setup.edge(&format!("{stream}#0"), Arc::new(Schema::new(fields)))?;
            let exchange = ExchangeOp::new(
                keys.iter()
                    .map(|k| compile(k, in_schema))
                    .collect::<Result<_>>()?,
                keys.iter().map(|k| k.schema_name().to_string()).collect(),
                edge,
            );
            Operator::Stateful {
                inputs: vec![Operator::Exchange {
                    input: Box::new(child),
                    exchange: Box::new(exchange),
                }],
                op,
            }
        }
        (_, op) => op,
    })
}
