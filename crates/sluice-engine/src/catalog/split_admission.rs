//! Which objects a pipeline split across nodes admits (see
//! `crate::split`), checked for every statement as it is made and again
//! when the pipeline starts.
//!
//! An object is refused, by name and with the reason, when its result on
//! split input would differ from the single-node result: an operator that
//! keeps state across rows (rows of one key are read on different nodes),
//! a process function, a late-data stream (lateness is judged against
//! each node's own watermark), a materialized view (each node would hold
//! its share of it). Every source has partitions to split: files, a
//! Nexmark stream's blocks of rows (each node generates its share) and
//! push sources (the program feeds each node). With a shuffle between
//! the nodes (`crate::exchange`),
//! windowed and updating `GROUP BY`s, equi-joins and process functions
//! over row-by-row, append-only input are admitted: their rows cross to
//! their key's owner (`shuffle_refusal` says why any other is not).

use arrow::datatypes::DataType;
use datafusion::logical_expr::{Expr, ExprSchemable};
use sluice_sql::plan::StreamNode;

use super::{Catalog, StreamKind};
use crate::error::{EngineError, Result};

/// Refuse the first object of `catalog` whose split result would differ
/// from the single-node result (see the module docs). With `shuffle`
/// (keyed operators' rows cross to their vnode's owner), the aggregations
/// [`shuffle_refusal`] passes are admitted too (an exchange in front of
/// each routes its rows, see `operators::exchange`).
pub fn certify(catalog: &Catalog, shuffle: bool) -> Result<()> {
    // Streams whose rows come out of a keyed operator on each node
    // (directly, or through row-by-row streams over one).
    let mut keyed: Vec<&str> = Vec::new();
    for source in &catalog.sources {
        if source.late_data_to.is_some() {
            return Err(refuse(
                "source",
                &source.name,
                "LATE DATA TO: each node judges lateness against the watermark of its own files, so the late rows of a split run are not those of one node",
            ));
        }
    }
    for stream in &catalog.streams {
        let kind = if stream.materialized {
            "materialized view"
        } else {
            "stream"
        };
        if stream.materialized {
            return Err(refuse(
                kind,
                &stream.name,
                "each node would hold only its share of the view",
            ));
        }
        match &stream.kind {
            StreamKind::Query(plan) if shuffle => {
                let reads_keyed = plan.inputs().into_iter().find(|i| keyed.contains(&i.as_str()));
                let stateful = stateful_operator(&plan.root);
                if let (Some(op), Some(input)) = (stateful, &reads_keyed) {
                    return Err(refuse(
                        kind,
                        &stream.name,
                        &format!("its {op} reads '{input}', whose rows come out of a keyed operator on each node; a second shuffle after the first is not built yet"),
                    ));
                }
                if let Some(why) = shuffle_refusal(&plan.root) {
                    return Err(refuse(kind, &stream.name, &why));
                }
                if stateful.is_some() || reads_keyed.is_some() {
                    keyed.push(&stream.name);
                }
            }
            StreamKind::Query(plan) => {
                if let Some(op) = stateful_operator(&plan.root) {
                    return Err(refuse(
                        kind,
                        &stream.name,
                        &format!("its {op} keeps state across rows, and rows of one key are read on different nodes; a split pipeline runs row-by-row queries only (filters, projections, UNION ALL, lookup joins) until keyed state is placed by vnode with a shuffle between nodes"),
                    ));
                }
            }
            StreamKind::LateData { .. } => {
                return Err(refuse(
                    kind,
                    &stream.name,
                    "late rows are judged against each node's own watermark",
                ))
            }
            // With a shuffle, each key's rows go to its vnode's owner,
            // whose processor is placed on its vnodes.
            StreamKind::Process(info) if shuffle => {
                let function = &info.descriptor.name;
                if keyed.contains(&info.input.as_str()) {
                    return Err(refuse(
                        kind,
                        &stream.name,
                        &format!("process function '{function}' reads '{}', whose rows come out of a keyed operator on each node; a second shuffle after the first is not built yet", info.input),
                    ));
                }
                let schema = &info.descriptor.input_schema;
                let unsupported = info.descriptor.key_columns.iter().find_map(|k| {
                    let t = schema
                        .field_with_name(k)
                        .map_or(DataType::Null, |f| f.data_type().clone());
                    (!encodable(&t)).then(|| (k.clone(), t))
                });
                if let Some((key, t)) = unsupported {
                    return Err(refuse(
                        kind,
                        &stream.name,
                        &format!("process function '{function}' is keyed by {key} of type {t}, which has no canonical key encoding to place it on a vnode (integers, dates, timestamps, booleans and strings have)"),
                    ));
                }
                keyed.push(&stream.name);
            }
            StreamKind::Process(info) => {
                return Err(refuse(
                    kind,
                    &stream.name,
                    &format!("process function '{}' keeps state per key, and its keys are read on different nodes until keys are placed by vnode with a shuffle between nodes", info.descriptor.name),
                ))
            }
        }
    }
    for sink in &catalog.sinks {
        if let Some(op) = sink.filter.as_ref().and_then(stateful_operator) {
            return Err(refuse(
                "sink",
                &sink.name,
                &format!("its {op} keeps state across rows"),
            ));
        }
    }
    Ok(())
}

/// Why `root` cannot run across nodes with a shuffle, if it cannot: it
/// can when its keyed operator is a windowed or updating `GROUP BY`
/// reached from the root through filters and projections only (a
/// `HAVING`, an outer `SELECT`), over append-only input computed row by
/// row, keyed by columns of types the canonical key encoding has
/// (integers, dates, timestamps, booleans, strings).
fn shuffle_refusal(root: &StreamNode) -> Option<String> {
    match root {
        StreamNode::Filter { input, .. } | StreamNode::Project { input, .. } => {
            shuffle_refusal(input)
        }
        StreamNode::WindowAggregate { input, keys, .. }
        | StreamNode::Aggregate { input, keys, .. } => {
            keyed_input_refusal("aggregation", input, keys, "GROUP BY key")
        }
        StreamNode::Join {
            left, right, on, ..
        }
        | StreamNode::OuterJoin {
            left, right, on, ..
        }
        | StreamNode::AsofJoin {
            left, right, on, ..
        } => {
            let op = stateful_operator(root).unwrap_or("join");
            let left_keys: Vec<Expr> = on.iter().map(|(l, _)| l.clone()).collect();
            let right_keys: Vec<Expr> = on.iter().map(|(_, r)| r.clone()).collect();
            keyed_input_refusal(op, left, &left_keys, "join key")
                .or_else(|| keyed_input_refusal(op, right, &right_keys, "join key"))
        }
        other => stateful_operator(other).map(|op| {
            format!(
                "its {op} keeps state across rows, and a shuffle between nodes carries the rows \
                 of GROUP BY aggregations and equi-joins only so far"
            )
        }),
    }
}

/// Why the input of keyed operator `op` (keyed by `keys`, called
/// `what` in messages) cannot cross between nodes, if it cannot.
fn keyed_input_refusal(op: &str, input: &StreamNode, keys: &[Expr], what: &str) -> Option<String> {
    if input.is_changelog() {
        return Some(format!(
            "its {op} reads an updating input; a shuffle between nodes carries append-only \
             rows only so far"
        ));
    }
    if let Some(inner) = stateful_operator(input) {
        return Some(format!(
            "its {inner} feeds its {op}; a shuffle between nodes runs one keyed operator per \
             query, over row-by-row input, so far"
        ));
    }
    unsupported_key(keys, input).map(|(key, t)| {
        format!(
            "its {what} {key} is of type {t}, which has no canonical key encoding to place it \
             on a vnode (integers, dates, timestamps, booleans and strings have)"
        )
    })
}

/// Whether the canonical key encoding has values of type `t`.
fn encodable(t: &DataType) -> bool {
    matches!(
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
    )
}

fn unsupported_key(keys: &[Expr], input: &StreamNode) -> Option<(String, DataType)> {
    keys.iter().find_map(|k| {
        // A type the plan cannot tell is no type the encoding has.
        let t = k.get_type(input.schema()).unwrap_or(DataType::Null);
        let ok = encodable(&t);
        (!ok).then(|| (k.schema_name().to_string(), t))
    })
}

/// The first stream of `catalog` with a keyed operator (with a shuffle,
/// it exchanges rows with the other nodes).
pub fn keyed_stream(catalog: &Catalog) -> Option<&str> {
    catalog.streams.iter().find_map(|s| match &s.kind {
        StreamKind::Query(plan) => stateful_operator(&plan.root).map(|_| s.name.as_str()),
        StreamKind::Process(_) => Some(s.name.as_str()),
        StreamKind::LateData { .. } => None,
    })
}

fn refuse(kind: &str, name: &str, why: &str) -> EngineError {
    EngineError::Option(format!(
        "{kind} '{name}' cannot run split across nodes: {why}"
    ))
}

/// The first operator of `node`'s tree that keeps state across rows, by
/// its SQL name; `None` when every operator works row by row. Every
/// operator kind is named here, so a new one must be decided on.
fn stateful_operator(node: &StreamNode) -> Option<&'static str> {
    match node {
        StreamNode::Scan { .. } => None,
        StreamNode::Filter { input, .. }
        | StreamNode::Project { input, .. }
        | StreamNode::LookupJoin { input, .. } => stateful_operator(input),
        StreamNode::Union { inputs, .. } => inputs.iter().find_map(stateful_operator),
        StreamNode::WindowAggregate { .. } => Some("windowed aggregation"),
        StreamNode::Aggregate { .. } => Some("aggregation"),
        StreamNode::Distinct { .. } => Some("DISTINCT"),
        StreamNode::TopN { .. } => Some("top-N"),
        StreamNode::OverAggregate { .. } | StreamNode::ChangelogOver { .. } => {
            Some("OVER aggregation")
        }
        StreamNode::Join { .. } => Some("join"),
        StreamNode::OuterJoin { .. } => Some("outer join"),
        StreamNode::AsofJoin { .. } => Some("ASOF join"),
    }
}
