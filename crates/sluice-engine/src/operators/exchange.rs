//! The exchange operator: in front of a keyed aggregation, it keeps the
//! rows whose key's vnode this node owns, routes the rest to their owners
//! (through the edge's outbox, see [`crate::exchange`]), and adds the rows
//! other nodes routed here; and [`distribute`], which puts one in front of
//! the aggregation of a query that `catalog::split_admission` admitted.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use datafusion::common::Column;
use datafusion::logical_expr::Expr;
use sluice_sql::columns_read::Needed;
use sluice_sql::plan::StreamNode;

use super::expr::{compile, eval_column, PhysExpr};
use super::Operator;
use crate::error::{EngineError, Result};
use crate::exchange::{ExchangeEdge, ShuffleSetup};
use crate::partition::key::encode_keys;
use crate::partition::placement::vnode_of;

/// One cycle's input, routed.
#[derive(Debug)]
pub struct Routed {
    /// Per input batch, the part this node owns (empty when none, so
    /// positions among the input batches hold).
    pub kept: Vec<RecordBatch>,
    /// The rows other nodes sent since the last cycle.
    pub received: Vec<RecordBatch>,
    /// Bytes of the rows this cycle routed to other nodes, without their
    /// vnode ([`crate::budget::row_bytes`]).
    pub sent_bytes: u64,
}

/// The exchange in front of one keyed operator.
///
/// Only the input columns that are read cross between nodes (an
/// aggregation reads its keys, its aggregates' arguments and its window's
/// time, so Nexmark q5 sends 2 of the bid's 7 columns; a join, its keys,
/// filter and bounds and what its readers read of each side): the others
/// arrive as nulls, which nothing reads. Rows this node keeps stay whole.
pub struct ExchangeOp {
    /// The `GROUP BY` keys, over the input.
    keys: Vec<PhysExpr>,
    /// How errors name each key.
    key_names: Vec<String>,
    /// The input's schema, every field nullable (as routed rows are).
    input: SchemaRef,
    /// The input with the vnode column last: what a batch is routed as.
    routed: SchemaRef,
    /// The input columns the wire carries, ascending (`None`: all).
    sent: Option<Vec<usize>>,
    edge: Arc<ExchangeEdge>,
}

impl ExchangeOp {
    /// An exchange routing by `keys` (named `key_names` in errors) over
    /// `edge`, whose wire carries the columns `sent` of `input` (all when
    /// `None`) and the vnode.
    pub fn new(
        keys: Vec<PhysExpr>,
        key_names: Vec<String>,
        input: &Schema,
        sent: Option<Vec<usize>>,
        edge: Arc<ExchangeEdge>,
    ) -> Self {
        let routed = wire_schema(input.fields().iter().map(|f| f.as_ref()));
        let input = Arc::new(Schema::new(
            routed.fields()[..routed.fields().len().saturating_sub(1)].to_vec(),
        ));
        Self {
            keys,
            key_names,
            input,
            routed,
            sent,
            edge,
        }
    }

    /// The edge.
    pub fn edge(&self) -> &Arc<ExchangeEdge> {
        &self.edge
    }

    /// Route this cycle's `input`: the rows this node owns, then the rows
    /// other nodes sent since the last cycle.
    pub fn run(&self, input: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        let Routed { kept, received, .. } = self.route_each(&input)?;
        Ok(kept
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .chain(received)
            .collect())
    }

    /// Route each batch of `input` (see [`Routed`]).
    pub fn route_each(&self, input: &[RecordBatch]) -> Result<Routed> {
        let table = self.edge.table();
        let local = self.edge.local();
        let mut kept = Vec::with_capacity(input.len());
        let mut sent_bytes = 0;
        for batch in input {
            let rows = batch.num_rows();
            if rows == 0 || table.nodes().len() == 1 {
                self.edge.count_kept(rows);
                kept.push(batch.clone());
                continue;
            }
            let columns = self
                .keys
                .iter()
                .zip(&self.key_names)
                .map(|(k, name)| eval_column(k, batch, name))
                .collect::<Result<Vec<ArrayRef>>>()?;
            let keys = encode_keys(&columns, rows).map_err(|e| {
                EngineError::Internal(format!(
                    "exchange '{}': encoding the keys: {e}",
                    self.edge.id()
                ))
            })?;
            let count = table.vnode_count();
            let vnodes: UInt32Array = keys.iter().map(|k| vnode_of(k, count)).collect();
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(vnodes.clone()));
            let routed = RecordBatch::try_new(Arc::clone(&self.routed), columns)?;
            let parts =
                sluice_shuffle::route::split_by_vnode(self.edge.id(), &routed, &vnodes, table)?;
            let mut mine = None;
            for (owner, part) in parts.into_iter().enumerate() {
                let Some(part) = part else { continue };
                if owner == local {
                    self.edge.count_kept(part.num_rows());
                    mine = Some(self.unroute(&part)?);
                } else {
                    let wire = self.wire_part(&part)?;
                    // The rows the receiver gets, without the vnode.
                    let rows = wire
                        .project(&(0..wire.num_columns().saturating_sub(1)).collect::<Vec<_>>())?;
                    sent_bytes += crate::budget::row_bytes(&rows);
                    self.edge.push_outbox(wire);
                }
            }
            kept.push(mine.unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&self.input))));
        }
        let received = self
            .edge
            .take_inbound()
            .iter()
            .map(|b| self.unwire(b))
            .collect::<Result<_>>()?;
        Ok(Routed {
            kept,
            received,
            sent_bytes,
        })
    }

    /// A routed batch without its vnode column.
    fn unroute(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_columns().saturating_sub(1);
        Ok(RecordBatch::try_new(
            Arc::clone(&self.input),
            batch.columns()[..n].to_vec(),
        )?)
    }

    /// A routed part as the wire carries it: the sent columns and the
    /// vnode.
    fn wire_part(&self, part: &RecordBatch) -> Result<RecordBatch> {
        let Some(sent) = &self.sent else {
            return Ok(part.clone());
        };
        let vnode = part.num_columns().saturating_sub(1);
        let columns = sent
            .iter()
            .chain([&vnode])
            .map(|i| Arc::clone(part.column(*i)))
            .collect();
        Ok(RecordBatch::try_new(Arc::clone(self.edge.wire()), columns)?)
    }

    /// A batch another node sent, as the input: the columns that did not
    /// cross (nothing downstream reads them) as nulls.
    fn unwire(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let Some(sent) = &self.sent else {
            return self.unroute(batch);
        };
        let rows = batch.num_rows();
        let mut carried = sent.iter().zip(batch.columns()).peekable();
        let columns = self
            .input
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| match carried.next_if(|(s, _)| **s == i) {
                Some((_, column)) => Arc::clone(column),
                None => new_null_array(field.data_type(), rows),
            })
            .collect();
        Ok(RecordBatch::try_new(Arc::clone(&self.input), columns)?)
    }
}

/// Name of the vnode column a wire batch carries last.
pub const VNODE_COLUMN: &str = "__sluice_vnode";

/// Put an exchange in front of the keyed operator of `op` (compiled from
/// `node`, a plan [`refusal`] passed) for stream `stream`. A row-by-row
/// query is returned as it is.
pub fn distribute(
    stream: &str,
    node: &StreamNode,
    op: Operator,
    setup: &ShuffleSetup,
) -> Result<Operator> {
    // The stream's readers (sinks, other streams) take its rows whole.
    distribute_needing(stream, (node, None), op, setup)
}

/// [`distribute`] of `node`, whose reader needs `needed` of its output
/// (`None`: every column): an exchange sends only what the operator it
/// feeds needs (see `StreamNode::join_sides_needed`).
fn distribute_needing(
    stream: &str,
    (node, needed): (&StreamNode, Needed),
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
        ) => {
            let needed = node.row_by_row_input_needed(needed).flatten();
            Operator::Filter {
                input: Box::new(distribute_needing(stream, (input, needed), *child, setup)?),
                predicate,
            }
        }
        (
            StreamNode::Project { input, .. },
            Operator::Project {
                input: child,
                exprs,
                schema,
            },
        ) => {
            let needed = node.row_by_row_input_needed(needed).flatten();
            Operator::Project {
                input: Box::new(distribute_needing(stream, (input, needed), *child, setup)?),
                exprs,
                schema,
            }
        }
        (
            StreamNode::WindowAggregate { input, keys, .. }
            | StreamNode::Aggregate { input, keys, .. },
            Operator::Stateful { mut inputs, op },
        ) => {
            let child = inputs
                .pop()
                .filter(|_| inputs.is_empty())
                .ok_or_else(mismatch)?;
            let read = node.aggregate_input_columns();
            Operator::Stateful {
                inputs: vec![in_front(stream, 0, (input, read), keys, child, setup)?],
                op,
            }
        }
        // A join's two inputs cross by their side of the key pairs: the
        // rows of one key meet on the key's owner. Each side sends what
        // the join's reader reads of it and what the join itself reads.
        (
            StreamNode::Join { on, .. }
            | StreamNode::OuterJoin { on, .. }
            | StreamNode::AsofJoin { on, .. },
            Operator::Stateful { mut inputs, op },
        ) => {
            let (r, l) = (inputs.pop(), inputs.pop());
            let (Some(l), Some(r), true) = (l, r, inputs.is_empty()) else {
                return Err(mismatch());
            };
            let [left, right] = node.join_sides_needed(needed).ok_or_else(mismatch)?;
            let left_keys: Vec<Expr> = on.iter().map(|(l, _)| l.clone()).collect();
            let right_keys: Vec<Expr> = on.iter().map(|(_, r)| r.clone()).collect();
            Operator::Stateful {
                inputs: vec![
                    in_front(stream, 0, left, &left_keys, l, setup)?,
                    in_front(stream, 1, right, &right_keys, r, setup)?,
                ],
                op,
            }
        }
        (_, op) => op,
    })
}

/// The exchange in front of process function stream `stream`, routing its
/// input (of `input` schema) by the function's `key_columns`, on edge
/// `STREAM#0`.
pub fn for_process(
    stream: &str,
    input: &SchemaRef,
    key_columns: &[String],
    setup: &ShuffleSetup,
) -> Result<ExchangeOp> {
    let keys = key_columns
        .iter()
        .map(|k| Ok(datafusion::physical_expr::expressions::col(k, input)?))
        .collect::<Result<Vec<PhysExpr>>>()?;
    let wire = wire_schema(input.fields().iter().map(|f| f.as_ref()));
    let edge = setup.edge(&format!("{stream}#0"), wire)?;
    // A process function is handed its input rows whole.
    Ok(ExchangeOp::new(
        keys,
        key_columns.to_vec(),
        input,
        None,
        edge,
    ))
}

/// The batches an edge carries: `input`'s columns (nullable: a routed
/// part keeps whatever the input held) and the vnode column last.
fn wire_schema<'a>(input: impl Iterator<Item = &'a Field>) -> SchemaRef {
    let mut fields: Vec<Field> = input.map(|f| f.clone().with_nullable(true)).collect();
    fields.push(Field::new(VNODE_COLUMN, DataType::UInt32, false));
    Arc::new(Schema::new(fields))
}

/// `child` (compiled from `input`) behind an exchange routing by `keys`,
/// on edge `STREAM#port`.
fn in_front(
    stream: &str,
    port: usize,
    (input, read): (&StreamNode, Option<HashSet<Column>>),
    keys: &[Expr],
    child: Operator,
    setup: &ShuffleSetup,
) -> Result<Operator> {
    let in_schema = input.schema();
    let fields = in_schema.as_arrow().fields();
    // The columns the operator reads, by position; all when one is not
    // found (never dropped on a guess).
    let sent = read
        .and_then(|cols| {
            cols.iter()
                .map(|c| in_schema.index_of_column(c).ok())
                .collect::<Option<BTreeSet<usize>>>()
        })
        .filter(|s| s.len() < fields.len())
        .map(|s| s.into_iter().collect::<Vec<usize>>());
    let wire = match &sent {
        Some(sent) => wire_schema(sent.iter().map(|i| fields[*i].as_ref())),
        None => wire_schema(fields.iter().map(|f| f.as_ref())),
    };
    let edge = setup.edge(&format!("{stream}#{port}"), wire)?;
    let exchange = ExchangeOp::new(
        keys.iter()
            .map(|k| compile(k, in_schema))
            .collect::<Result<_>>()?,
        keys.iter().map(|k| k.schema_name().to_string()).collect(),
        in_schema.as_arrow(),
        sent,
        edge,
    );
    Ok(Operator::Exchange {
        input: Box::new(child),
        exchange: Box::new(exchange),
    })
}
