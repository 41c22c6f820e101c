//! Operators compiled from a [`sluice_sql::StreamPlan`].
//!
//! [`Operator::compile`] lowers every expression of a plan once; running an
//! operator tree for a cycle is then pure vectorized evaluation plus the
//! stateful operators' updates. Every stateful operator implements
//! [`StatefulOperator`], so the tree walks below (run, snapshot, restore)
//! treat them all alike.

pub mod asof;
pub mod changelog;
pub mod changelog_over;
pub mod distinct;
pub mod distinct_family;
pub mod exchange;
pub mod expr;
pub mod groups;
pub mod join;
pub mod lookup_join;
pub mod min_max_bytes;
pub mod named;
pub mod outer_join;
pub mod over;
pub mod retract;
pub mod scope;
pub mod session;
pub mod stateful;
pub mod top_n;
pub mod window;

#[cfg(test)]
mod moved_state_tests;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use sluice_sql::{StreamNode, WindowKind};

use crate::error::{EngineError, Result};
use expr::{compile, eval_column, eval_predicate, PhysExpr};
use groups::{AggregateFunctions, KeyCodec};
use join::HashJoin;
use outer_join::OuterJoin;
use retract::ChangelogAggregate;
use session::SessionAggregate;
pub use stateful::{restore_part, snapshot_part, snapshot_state_part, Port, StatefulOperator};
use window::{UpdatingAggregate, WindowAggregate, WindowedGroupBy};

/// Batches available to a cycle, by source or stream name.
pub type CycleInputs = FxHashMap<Arc<str>, Vec<RecordBatch>>;

/// Output column names a projection gives its input's columns (input
/// column name to the name the user wrote), so errors deep in the tree name
/// the column as written (`total`, not `sum(bids.price)`).
type Aliases = FxHashMap<String, String>;

/// A compiled operator tree.
pub enum Operator {
    /// Reads the cycle's batches of one input.
    Scan {
        /// Input name.
        input: Arc<str>,
    },
    /// Keeps rows matching a predicate.
    Filter {
        /// Input.
        input: Box<Operator>,
        /// Predicate.
        predicate: PhysExpr,
    },
    /// Computes output columns.
    Project {
        /// Input.
        input: Box<Operator>,
        /// One per output column.
        exprs: Vec<PhysExpr>,
        /// Output schema.
        schema: SchemaRef,
    },
    /// Concatenates inputs.
    Union {
        /// Inputs.
        inputs: Vec<Operator>,
        /// Output schema.
        schema: SchemaRef,
    },
    /// Routes rows to the node owning their key's vnode, and adds the rows
    /// other nodes routed here (a split pipeline with a shuffle, see
    /// [`crate::exchange`]).
    Exchange {
        /// Input.
        input: Box<Operator>,
        /// The routing and its edge.
        exchange: Box<exchange::ExchangeOp>,
    },
    /// A stateful operator (window, session, updating or changelog
    /// aggregate, join) over its inputs; input `i` feeds port `i`.
    Stateful {
        /// Inputs, by port.
        inputs: Vec<Operator>,
        /// The operator and its state.
        op: Box<dyn StatefulOperator>,
    },
}

impl Operator {
    /// Lower a plan node into an operator tree.
    pub fn compile(node: &StreamNode) -> Result<Operator> {
        Self::compile_named(node, &Aliases::default())
    }

    fn compile_named(node: &StreamNode, aliases: &Aliases) -> Result<Operator> {
        let named = |schema: &datafusion::common::DFSchema, from: usize, count: usize| {
            (from..from + count)
                .map(|i| {
                    let own = schema.field(i).name();
                    aliases.get(own).unwrap_or(own).clone()
                })
                .collect::<Vec<String>>()
        };
        Ok(match node {
            StreamNode::Scan { input, .. } => Operator::Scan {
                input: Arc::from(input.as_str()),
            },
            StreamNode::Filter { input, predicate } => Operator::Filter {
                predicate: compile(predicate, input.schema())?,
                input: Box::new(Operator::compile_named(input, aliases)?),
            },
            StreamNode::Project {
                input,
                exprs,
                schema,
            } => {
                // A column passed through (renamed or not) keeps the name
                // it has at the top.
                let mut inner = Aliases::default();
                for (i, e) in exprs.iter().enumerate() {
                    if let datafusion::logical_expr::Expr::Column(c) = e.clone().unalias() {
                        let own = schema.field(i).name();
                        let top = aliases.get(own).unwrap_or(own);
                        inner.entry(c.name).or_insert_with(|| top.clone());
                    }
                }
                Operator::Project {
                    exprs: exprs
                        .iter()
                        .map(|e| compile(e, input.schema()))
                        .collect::<Result<_>>()?,
                    input: Box::new(Operator::compile_named(input, &inner)?),
                    schema: Arc::new(schema.as_arrow().clone()),
                }
            }
            StreamNode::Union { inputs, schema } => Operator::Union {
                inputs: inputs
                    .iter()
                    .map(Operator::compile)
                    .collect::<Result<_>>()?,
                schema: Arc::new(schema.as_arrow().clone()),
            },
            StreamNode::WindowAggregate {
                input,
                window,
                keys,
                slots,
                aggregates,
                emit,
                schema,
            } => {
                let in_schema = input.schema();
                let key_types = key_types(keys, in_schema)?;
                let def = WindowedGroupBy {
                    time: compile(&window.time, in_schema)?,
                    time_name: window.time.schema_name().to_string(),
                    time_type: window.time_type.clone(),
                    keys: keys
                        .iter()
                        .map(|k| compile(k, in_schema))
                        .collect::<Result<_>>()?,
                    slots: slots.clone(),
                    codec: KeyCodec::new(&key_types)?,
                    funcs: AggregateFunctions::lower(
                        aggregates,
                        in_schema,
                        &named(schema, slots.len(), aggregates.len()),
                    )?,
                    schema: Arc::new(schema.as_arrow().clone()),
                    emit: *emit,
                };
                let op: Box<dyn StatefulOperator> = match window.kind {
                    WindowKind::Session { gap_ms } => Box::new(SessionAggregate::new(def, gap_ms)),
                    kind => Box::new(WindowAggregate::new(def, kind)),
                };
                Operator::stateful(vec![Operator::compile(input)?], op)
            }
            StreamNode::Join {
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                schema,
            } => {
                let (l, r, types) = join_sides(left, right, on, left_bounds, right_bounds)?;
                let join = HashJoin::new(
                    l,
                    r,
                    types,
                    filter.as_ref().map(|f| compile(f, schema)).transpose()?,
                    Arc::new(schema.as_arrow().clone()),
                )?;
                Operator::stateful(
                    vec![Operator::compile(left)?, Operator::compile(right)?],
                    Box::new(join),
                )
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
                schema,
            } => {
                let (l, r, types) = join_sides(left, right, on, left_bounds, right_bounds)?;
                let join = OuterJoin::new(
                    l,
                    r,
                    types,
                    kind.preserves(),
                    filter.as_ref().map(|f| compile(f, schema)).transpose()?,
                    Arc::new(schema.as_arrow().clone()),
                    *changelog,
                )?;
                Operator::stateful(
                    vec![Operator::compile(left)?, Operator::compile(right)?],
                    Box::new(join),
                )
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
                schema,
                ..
            } => {
                let side =
                    |n: &StreamNode, keys: Vec<&datafusion::logical_expr::Expr>, time, lag_ms| {
                        let s = n.schema();
                        Ok::<_, EngineError>(asof::AsofSide {
                            keys: keys
                                .into_iter()
                                .map(|k| compile(k, s))
                                .collect::<Result<_>>()?,
                            time: compile(time, s)?,
                            lag_ms,
                            schema: Arc::new(s.as_arrow().clone()),
                        })
                    };
                let key_exprs: Vec<_> = on.iter().map(|(l, _)| l.clone()).collect();
                let op = asof::AsofJoin::new(
                    side(
                        left,
                        on.iter().map(|(l, _)| l).collect(),
                        left_time,
                        *left_lag_ms,
                    )?,
                    side(
                        right,
                        on.iter().map(|(_, r)| r).collect(),
                        right_time,
                        *right_lag_ms,
                    )?,
                    key_types(&key_exprs, left.schema())?,
                    *op,
                    *tolerance_ms,
                    *keep_unmatched,
                    Arc::new(schema.as_arrow().clone()),
                )?;
                Operator::stateful(
                    vec![Operator::compile(left)?, Operator::compile(right)?],
                    Box::new(op),
                )
            }
            StreamNode::LookupJoin {
                input,
                table,
                handle,
                keys,
                left_outer,
                filter,
                schema,
                ..
            } => {
                let binding =
                    crate::lookup::LookupBinding::from_handle(handle).ok_or_else(|| {
                        EngineError::Internal(format!(
                            "lookup table '{table}' has no engine binding"
                        ))
                    })?;
                let in_schema = input.schema();
                let op = lookup_join::LookupJoin::new(
                    binding,
                    keys.iter()
                        .map(|k| compile(k, in_schema))
                        .collect::<Result<_>>()?,
                    key_types(keys, in_schema)?,
                    *left_outer,
                    filter.as_ref().map(|f| compile(f, schema)).transpose()?,
                    Arc::new(schema.as_arrow().clone()),
                )?;
                Operator::stateful(vec![Operator::compile(input)?], Box::new(op))
            }
            StreamNode::Distinct {
                input,
                keys,
                schema,
            } => {
                let in_schema = input.schema();
                let op = distinct::Distinct::new(
                    keys.iter()
                        .map(|k| compile(k, in_schema))
                        .collect::<Result<_>>()?,
                    KeyCodec::new(&key_types(keys, in_schema)?)?,
                    Arc::new(schema.as_arrow().clone()),
                );
                Operator::stateful(vec![Operator::compile(input)?], Box::new(op))
            }
            StreamNode::TopN {
                input,
                partition,
                order,
                limit,
                mode,
                schema,
            } => {
                let in_schema = input.schema();
                let order_exprs: Vec<_> = order.iter().map(|s| s.expr.clone()).collect();
                let order_fields = key_types(&order_exprs, in_schema)?
                    .into_iter()
                    .zip(order)
                    .map(|(t, s)| {
                        arrow::row::SortField::new_with_options(
                            t,
                            arrow::compute::SortOptions {
                                descending: !s.asc,
                                nulls_first: s.nulls_first,
                            },
                        )
                    })
                    .collect();
                let compile_all = |es: &[datafusion::logical_expr::Expr]| {
                    es.iter()
                        .map(|e| compile(e, in_schema))
                        .collect::<Result<Vec<_>>>()
                };
                let op = top_n::TopN::new(top_n::TopNDef {
                    partition: compile_all(partition)?,
                    partition_types: key_types(partition, in_schema)?,
                    order: compile_all(&order_exprs)?,
                    order_fields,
                    input: Arc::new(in_schema.as_arrow().clone()),
                    limit: *limit,
                    mode: *mode,
                    schema: Arc::new(schema.as_arrow().clone()),
                })?;
                Operator::stateful(vec![Operator::compile(input)?], Box::new(op))
            }
            StreamNode::ChangelogOver {
                input,
                partition_by,
                order_by,
                frame,
                aggregates,
                schema,
            } => {
                let in_schema = input.schema();
                let arrow_in = Arc::new(in_schema.as_arrow().clone());
                let def = changelog_over::ChangelogOverDef {
                    partition_by: compile_all(partition_by, in_schema)?,
                    partition_types: key_types(partition_by, in_schema)?,
                    order_fields: sort_fields(order_by, in_schema)?,
                    descending: order_by.first().is_some_and(|s| !s.asc),
                    order_by: compile_all(
                        &order_by.iter().map(|s| s.expr.clone()).collect::<Vec<_>>(),
                        in_schema,
                    )?,
                    frame: *frame,
                    funcs: AggregateFunctions::lower(
                        aggregates,
                        in_schema,
                        &named(schema, in_schema.fields().len() - 1, aggregates.len()),
                    )?,
                    change_index: arrow_in.index_of(sluice_sql::CHANGE_COLUMN)?,
                    input_schema: arrow_in,
                    schema: Arc::new(schema.as_arrow().clone()),
                };
                Operator::stateful(
                    vec![Operator::compile(input)?],
                    Box::new(changelog_over::ChangelogOver::new(def)?),
                )
            }
            StreamNode::OverAggregate {
                input,
                partition_by,
                time,
                time_lag_ms,
                frame,
                aggregates,
                schema,
            } => {
                let in_schema = input.schema();
                let time_type = datafusion::logical_expr::ExprSchemable::get_type(time, in_schema)?;
                let time_scale =
                    sluice_sql::window_udf::timestamp_scale(&time_type).ok_or_else(|| {
                        EngineError::Internal(format!("OVER event time of type {time_type}"))
                    })?;
                let first = in_schema.fields().len();
                let def = over::OverDef {
                    partition_by: partition_by
                        .iter()
                        .map(|k| compile(k, in_schema))
                        .collect::<Result<_>>()?,
                    partition_types: key_types(partition_by, in_schema)?,
                    time: compile(time, in_schema)?,
                    time_name: time.schema_name().to_string(),
                    time_scale,
                    time_lag_ms: *time_lag_ms,
                    frame: *frame,
                    funcs: AggregateFunctions::lower(
                        aggregates,
                        in_schema,
                        &named(schema, first, aggregates.len()),
                    )?,
                    input_schema: Arc::new(in_schema.as_arrow().clone()),
                    schema: Arc::new(schema.as_arrow().clone()),
                };
                Operator::stateful(
                    vec![Operator::compile(input)?],
                    Box::new(over::OverAggregate::new(def)?),
                )
            }
            StreamNode::Aggregate {
                input,
                keys,
                aggregates,
                schema,
            } => {
                let in_schema = input.schema();
                let key_types = key_types(keys, in_schema)?;
                if input.is_changelog() {
                    let arrow_in = Arc::new(in_schema.as_arrow().clone());
                    let change_index = arrow_in.index_of(sluice_sql::CHANGE_COLUMN)?;
                    let op = ChangelogAggregate::new(
                        keys.iter()
                            .map(|k| compile(k, in_schema))
                            .collect::<Result<_>>()?,
                        KeyCodec::new(&key_types)?,
                        AggregateFunctions::lower(
                            aggregates,
                            in_schema,
                            &named(schema, keys.len(), aggregates.len()),
                        )?,
                        arrow_in,
                        change_index,
                        Arc::new(schema.as_arrow().clone()),
                    )?;
                    return Ok(Operator::stateful(
                        vec![Operator::compile(input)?],
                        Box::new(op),
                    ));
                }
                let op = UpdatingAggregate::new(
                    keys.iter()
                        .map(|k| compile(k, in_schema))
                        .collect::<Result<_>>()?,
                    KeyCodec::new(&key_types)?,
                    AggregateFunctions::lower(
                        aggregates,
                        in_schema,
                        &named(schema, keys.len(), aggregates.len()),
                    )?,
                    Arc::new(schema.as_arrow().clone()),
                )?;
                Operator::stateful(vec![Operator::compile(input)?], Box::new(op))
            }
        })
    }

    fn stateful(inputs: Vec<Operator>, op: Box<dyn StatefulOperator>) -> Operator {
        Operator::Stateful { inputs, op }
    }

    /// Every stateful operator of the tree, in tree order (inputs before
    /// the operator reading them, left before right): the order of their
    /// checkpoint parts.
    pub fn stateful_operators<'a>(
        &'a mut self,
        out: &mut Vec<&'a mut (dyn StatefulOperator + 'static)>,
    ) {
        match self {
            Operator::Scan { .. } => {}
            Operator::Filter { input, .. }
            | Operator::Project { input, .. }
            | Operator::Exchange { input, .. } => input.stateful_operators(out),
            Operator::Union { inputs, .. } => {
                for i in inputs.iter_mut() {
                    i.stateful_operators(out);
                }
            }
            Operator::Stateful { inputs, op } => {
                for i in inputs.iter_mut() {
                    i.stateful_operators(out);
                }
                out.push(op.as_mut());
            }
        }
    }

    /// The one input this tree reads batch by batch (a chain of filters and
    /// projections over one scan), if it is such a chain.
    pub fn batchwise_input(&self) -> Option<&Arc<str>> {
        match self {
            Operator::Scan { input } => Some(input),
            Operator::Filter { input, .. } | Operator::Project { input, .. } => {
                input.batchwise_input()
            }
            _ => None,
        }
    }

    /// Run one cycle: consume this cycle's inputs, return this cycle's output.
    pub fn run(&mut self, inputs: &CycleInputs, watermark: i64) -> Result<Vec<RecordBatch>> {
        match self {
            Operator::Scan { input } => Ok(inputs.get(input).cloned().unwrap_or_default()),
            Operator::Filter { input, predicate } => {
                let mut out = Vec::new();
                for b in input.run(inputs, watermark)? {
                    let mask = eval_predicate(predicate, &b)
                        .map_err(|e| e.in_column(&format!("WHERE {predicate}")))?;
                    let f = arrow::compute::filter_record_batch(&b, &mask)?;
                    if f.num_rows() > 0 {
                        out.push(f);
                    }
                }
                Ok(out)
            }
            Operator::Project {
                input,
                exprs,
                schema,
            } => input
                .run(inputs, watermark)?
                .iter()
                .map(|b| {
                    let cols = exprs
                        .iter()
                        .zip(schema.fields())
                        .map(|(e, f)| eval_column(e, b, f.name()))
                        .collect::<Result<Vec<_>>>()?;
                    let opts = arrow::record_batch::RecordBatchOptions::new()
                        .with_row_count(Some(b.num_rows()));
                    Ok(RecordBatch::try_new_with_options(
                        Arc::clone(schema),
                        cols,
                        &opts,
                    )?)
                })
                .collect(),
            Operator::Union {
                inputs: children,
                schema,
            } => {
                let mut out = Vec::new();
                for c in children.iter_mut() {
                    for b in c.run(inputs, watermark)? {
                        out.push(RecordBatch::try_new(
                            Arc::clone(schema),
                            b.columns().to_vec(),
                        )?);
                    }
                }
                Ok(out)
            }
            Operator::Exchange { input, exchange } => exchange.run(input.run(inputs, watermark)?),
            Operator::Stateful {
                inputs: children,
                op,
            } => {
                // Every input runs before the operator sees any batch, as
                // the join has always done; then port by port.
                let per_port = children
                    .iter_mut()
                    .map(|c| c.run(inputs, watermark))
                    .collect::<Result<Vec<_>>>()?;
                let mut out = Vec::new();
                for (port, batches) in per_port.into_iter().enumerate() {
                    for b in batches {
                        out.extend(op.update(port, b)?);
                    }
                }
                out.extend(op.advance(watermark)?);
                Ok(out)
            }
        }
    }

    /// Snapshot every stateful operator of the tree, one part each, in
    /// tree order (see [`Self::stateful_operators`]).
    pub fn snapshot(&mut self, out: &mut Vec<bytes::Bytes>) -> Result<()> {
        let mut ops = Vec::new();
        self.stateful_operators(&mut ops);
        for op in ops {
            out.push(snapshot_part(op)?);
        }
        Ok(())
    }

    /// Restore every stateful operator from parts in tree order, taking one
    /// part per operator from the front of `parts`.
    pub fn restore(&mut self, parts: &mut std::collections::VecDeque<bytes::Bytes>) -> Result<()> {
        let mut ops = Vec::new();
        self.stateful_operators(&mut ops);
        for op in ops {
            let part = parts.pop_front().ok_or_else(|| {
                EngineError::Internal("checkpoint has fewer operator states than the plan".into())
            })?;
            restore_part(op, &part)?;
        }
        Ok(())
    }

    /// Rows dropped inside this tree because their window had closed.
    pub fn dropped_late(&self) -> u64 {
        match self {
            Operator::Scan { .. } => 0,
            Operator::Filter { input, .. }
            | Operator::Project { input, .. }
            | Operator::Exchange { input, .. } => input.dropped_late(),
            Operator::Union { inputs, .. } => inputs.iter().map(|i| i.dropped_late()).sum(),
            Operator::Stateful { inputs, op } => {
                inputs.iter().map(|i| i.dropped_late()).sum::<u64>() + op.dropped_late()
            }
        }
    }
}

/// Types of key expressions over an input schema.
/// One join side as the operators take it: key expressions, schema, bounds.
type JoinSide = (Vec<PhysExpr>, SchemaRef, Vec<join::SideBound>);

/// Both sides of a join compiled, and its key types.
fn join_sides(
    left: &StreamNode,
    right: &StreamNode,
    on: &[(
        datafusion::logical_expr::Expr,
        datafusion::logical_expr::Expr,
    )],
    left_bounds: &[sluice_sql::plan::JoinStateBound],
    right_bounds: &[sluice_sql::plan::JoinStateBound],
) -> Result<(JoinSide, JoinSide, Vec<arrow::datatypes::DataType>)> {
    let (ls, rs) = (left.schema(), right.schema());
    let arrow_of = |s: &datafusion::common::DFSchema| Arc::new(s.as_arrow().clone());
    let left_keys = on
        .iter()
        .map(|(l, _)| compile(l, ls))
        .collect::<Result<Vec<_>>>()?;
    let right_keys = on
        .iter()
        .map(|(_, r)| compile(r, rs))
        .collect::<Result<Vec<_>>>()?;
    let key_exprs: Vec<_> = on.iter().map(|(l, _)| l.clone()).collect();
    let bounds = |b: &[sluice_sql::plan::JoinStateBound],
                  s: &datafusion::common::DFSchema|
     -> Result<Vec<join::SideBound>> {
        b.iter()
            .map(|b| Ok((compile(&b.expr, s)?, b.other_lag_ms, b.strict)))
            .collect()
    };
    Ok((
        (left_keys, arrow_of(ls), bounds(left_bounds, ls)?),
        (right_keys, arrow_of(rs), bounds(right_bounds, rs)?),
        key_types(&key_exprs, ls)?,
    ))
}

/// Expressions compiled against one input schema.
fn compile_all(
    exprs: &[datafusion::logical_expr::Expr],
    schema: &datafusion::common::DFSchema,
) -> Result<Vec<PhysExpr>> {
    exprs.iter().map(|e| compile(e, schema)).collect()
}

/// Row-format sort fields of `ORDER BY` keys (type, direction, nulls).
fn sort_fields(
    order: &[datafusion::logical_expr::SortExpr],
    schema: &datafusion::common::DFSchema,
) -> Result<Vec<arrow::row::SortField>> {
    let exprs: Vec<_> = order.iter().map(|s| s.expr.clone()).collect();
    Ok(key_types(&exprs, schema)?
        .into_iter()
        .zip(order)
        .map(|(t, s)| {
            arrow::row::SortField::new_with_options(
                t,
                arrow::compute::SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                },
            )
        })
        .collect())
}

fn key_types(
    keys: &[datafusion::logical_expr::Expr],
    schema: &datafusion::common::DFSchema,
) -> Result<Vec<arrow::datatypes::DataType>> {
    keys.iter()
        .map(|k| {
            Ok(datafusion::logical_expr::ExprSchemable::get_type(
                k, schema,
            )?)
        })
        .collect()
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Operator")
    }
}

/// Check that a pushed batch matches a declared schema exactly.
pub fn check_batch_schema(what: &str, declared: &SchemaRef, batch: &RecordBatch) -> Result<()> {
    let got = batch.schema();
    if got.fields().len() != declared.fields().len() {
        return Err(EngineError::Schema(format!(
            "{what}: batch has {} columns, declared schema has {}",
            got.fields().len(),
            declared.fields().len()
        )));
    }
    for (g, d) in got.fields().iter().zip(declared.fields()) {
        if g.name() != d.name() {
            return Err(EngineError::Schema(format!(
                "{what}: column '{}' found where '{}' is declared",
                g.name(),
                d.name()
            )));
        }
        if g.data_type() != d.data_type() {
            return Err(EngineError::Schema(format!(
                "{what}: column '{}' is declared {} but the batch has {}",
                d.name(),
                d.data_type(),
                g.data_type()
            )));
        }
    }
    Ok(())
}
