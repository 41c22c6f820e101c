//! Planning a continuous query into a [`StreamPlan`].
//!
//! DataFusion plans the `SELECT` (names, types, functions, coercion); this
//! module then walks the resulting logical plan exactly once and maps each
//! node to a [`StreamNode`], refusing with a named error anything a
//! continuous query cannot execute (semi joins, `ORDER BY`, `LIMIT`, ...).

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::{Column, DFSchema, DFSchemaRef};
use datafusion::datasource::empty::EmptyTable;
use datafusion::logical_expr::{Distinct, Expr, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast as sp;

use crate::ast::{CreateStream, EmitMode};
use crate::catalog::PlanCatalog;
use crate::error::{Result, SqlError};
use crate::plan::WindowSpec;
use crate::plan::{with_change_column, GroupSlot, StreamNode, StreamPlan, CHANGE_COLUMN};
pub use crate::window_udf::MAX_HOP_WINDOWS_PER_ROW;
use crate::window_udf::{check_scalar_expr, window_call, window_udfs, WindowFunction};

/// Plans continuous queries against a catalog.
pub struct StreamPlanner;

impl StreamPlanner {
    /// A DataFusion session that knows the window functions and has every
    /// catalog relation registered with its schema (no data).
    pub fn session(catalog: &dyn PlanCatalog) -> Result<SessionContext> {
        let ctx = SessionContext::new();
        for udf in window_udfs() {
            ctx.register_udf(udf);
        }
        ctx.register_udf(crate::asof::marker_udf());
        ctx.register_udf(crate::temporal::marker_udf());
        ctx.register_udf(crate::to_char::to_char_udf());
        ctx.register_udf(crate::split_part::split_part_udf());
        crate::checked::register_aggregates(&ctx);
        for name in catalog.relation_names() {
            if let Some((schema, _)) = catalog.relation(&name) {
                let table: Arc<dyn TableProvider> = Arc::new(EmptyTable::new(schema));
                ctx.register_table(name.as_str(), table)?;
            }
        }
        for name in catalog.lookup_table_names() {
            if let Some((schema, _, _)) = catalog.lookup_table(&name) {
                let table: Arc<dyn TableProvider> = Arc::new(EmptyTable::new(schema));
                ctx.register_table(name.as_str(), table)?;
            }
        }
        Ok(ctx)
    }

    /// Plan `CREATE STREAM` / `CREATE MATERIALIZED VIEW`.
    pub async fn plan_stream(catalog: &dyn PlanCatalog, stmt: &CreateStream) -> Result<StreamPlan> {
        crate::lookup::check_system_time(catalog, &stmt.system_time)?;
        let logical = Self::logical_plan(catalog, &stmt.query).await?;
        let mut conv = Converter {
            catalog,
            emit: stmt.emit,
            saw_aggregate: false,
            top_n: None,
        };
        let root = conv.convert(&logical)?;
        if let (Some(emit), false) = (stmt.emit, conv.saw_aggregate) {
            let clause = match emit {
                EmitMode::OnWindowClose => "EMIT ON WINDOW CLOSE",
                EmitMode::Changes => "EMIT CHANGES",
            };
            return Err(SqlError::Unsupported(format!(
                "{clause} on '{}': the query has no GROUP BY aggregation to emit from",
                stmt.name
            )));
        }
        let changelog = root.is_changelog();
        let schema: SchemaRef = Arc::new(root.schema().as_arrow().clone());
        let time_columns = crate::bounds::time_columns(&root, catalog)
            .into_iter()
            .map(|t| (t.column.name, t.lag_ms))
            .collect();
        check_output_names(&stmt.name, &schema)?;
        Ok(StreamPlan {
            name: stmt.name.clone(),
            root,
            schema,
            changelog,
            materialized: stmt.materialized,
            time_columns,
        })
    }

    /// Plan a sink's `WHERE` filter over its input as a stateless operator tree.
    pub async fn plan_filter(
        catalog: &dyn PlanCatalog,
        from: &str,
        filter: &sp::Expr,
    ) -> Result<StreamNode> {
        let sql = format!(
            "SELECT * FROM {} WHERE {filter}",
            sp::Ident::with_quote('"', from)
        );
        let dialect = datafusion::sql::sqlparser::dialect::GenericDialect {};
        let query = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(&sql)?
            .parse_query()?;
        let logical = Self::logical_plan(catalog, &query).await?;
        Converter {
            catalog,
            emit: None,
            saw_aggregate: false,
            top_n: None,
        }
        .convert(&logical)
    }

    async fn logical_plan(catalog: &dyn PlanCatalog, query: &sp::Query) -> Result<LogicalPlan> {
        let ctx = Self::session(catalog)?;
        let state = ctx.state();
        let query = crate::window_tvf::rewrite(catalog, query)?.unwrap_or_else(|| query.clone());
        let stmt = datafusion::sql::parser::Statement::Statement(Box::new(sp::Statement::Query(
            Box::new(query),
        )));
        let plan = state.statement_to_plan(stmt).await?;
        crate::asof::check_marker_placement(&plan)?;
        Ok(state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})?)
    }
}

fn check_output_names(name: &str, schema: &Schema) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for f in schema.fields() {
        if !seen.insert(f.name().as_str()) {
            return Err(SqlError::Catalog(format!(
                "'{name}' would have two columns named '{}'; give one an alias with AS",
                f.name()
            )));
        }
    }
    Ok(())
}

struct Converter<'a> {
    catalog: &'a dyn PlanCatalog,
    emit: Option<EmitMode>,
    saw_aggregate: bool,
    /// The `Window` node a filter above bounds the row number of, and N:
    /// set by the filter, taken by that node (see [`crate::top_n`]).
    top_n: Option<(*const datafusion::logical_expr::logical_plan::Window, usize)>,
}

impl Converter<'_> {
    fn convert(&mut self, plan: &LogicalPlan) -> Result<StreamNode> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                let name = scan.table_name.table().to_string();
                if self.catalog.lookup_table(&name).is_some() {
                    return Err(crate::lookup::not_a_stream(&name));
                }
                let (_, changelog) = self.catalog.relation(&name).ok_or_else(|| {
                    SqlError::Catalog(format!("no source or stream named '{name}'"))
                })?;
                if scan.projection.is_some() || !scan.filters.is_empty() || scan.fetch.is_some() {
                    return Err(SqlError::Unsupported(format!(
                        "pre-optimized scan of '{name}'"
                    )));
                }
                Ok(StreamNode::Scan {
                    input: name,
                    schema: Arc::clone(plan.schema()),
                    changelog,
                })
            }
            LogicalPlan::SubqueryAlias(alias) => {
                let input = self.convert(&alias.input)?;
                let exprs = input
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect();
                let schema = if input.is_changelog() {
                    with_change_column(&alias.schema)?
                } else {
                    Arc::clone(&alias.schema)
                };
                Ok(StreamNode::Project {
                    input: Box::new(input),
                    exprs,
                    schema,
                })
            }
            LogicalPlan::Projection(proj) => {
                let input = self.convert(&proj.input)?;
                for e in &proj.expr {
                    check_scalar_expr(e)?;
                }
                if !input.is_changelog() {
                    return Ok(StreamNode::Project {
                        input: Box::new(input),
                        exprs: proj.expr.clone(),
                        schema: Arc::clone(&proj.schema),
                    });
                }
                // A changelog keeps its change column last, whatever is selected.
                let (q, _) = input
                    .schema()
                    .qualified_field_with_unqualified_name(CHANGE_COLUMN)?;
                let change = Expr::Column(Column::new(q.cloned(), CHANGE_COLUMN));
                let keep: Vec<usize> = proj
                    .schema
                    .fields()
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.name() != CHANGE_COLUMN)
                    .map(|(i, _)| i)
                    .collect();
                let mut exprs: Vec<Expr> = keep.iter().map(|i| proj.expr[*i].clone()).collect();
                exprs.push(change);
                let fields: Vec<(Option<datafusion::common::TableReference>, Arc<Field>)> = keep
                    .iter()
                    .map(|i| {
                        let (q, f) = proj.schema.qualified_field(*i);
                        (q.cloned(), Arc::clone(f))
                    })
                    .collect();
                let base = DFSchema::new_with_metadata(fields, Default::default())?;
                Ok(StreamNode::Project {
                    input: Box::new(input),
                    exprs,
                    schema: with_change_column(&base)?,
                })
            }
            LogicalPlan::Filter(filter) => {
                // `FROM a, b WHERE ...`: the filter is the join's condition
                // (of an inner join only: WHERE over an outer join also
                // removes padded rows, which ON would keep). An ASOF join's
                // WHERE filters its result instead.
                let asof = |j: &datafusion::logical_expr::logical_plan::Join| {
                    j.filter.as_ref().is_some_and(crate::asof::mentions_marker)
                };
                match filter.input.as_ref() {
                    LogicalPlan::Join(join)
                        if join.join_type == datafusion::logical_expr::JoinType::Inner
                            && !asof(join) =>
                    {
                        let mut condition = crate::join::conjuncts(join.filter.as_ref());
                        condition.extend(crate::join::conjuncts(Some(&filter.predicate)));
                        return self.convert_join(join, condition);
                    }
                    _ => {}
                }
                check_scalar_expr(&filter.predicate)?;
                if let Some((window, limit)) = crate::top_n::row_number_bound(filter)? {
                    self.top_n = Some((window as *const _, limit));
                }
                let input = self.convert(&filter.input)?;
                self.top_n = None;
                Ok(StreamNode::Filter {
                    input: Box::new(input),
                    predicate: filter.predicate.clone(),
                })
            }
            LogicalPlan::Union(union) => {
                let inputs = union
                    .inputs
                    .iter()
                    .map(|i| self.convert(i))
                    .collect::<Result<Vec<_>>>()?;
                let changelogs = inputs.iter().filter(|i| i.is_changelog()).count();
                if changelogs != 0 && changelogs != inputs.len() {
                    return Err(SqlError::Unsupported(
                        "UNION ALL of a changelog input and an append-only input".into(),
                    ));
                }
                let schema = if changelogs > 0 {
                    with_change_column(&union.schema)?
                } else {
                    Arc::clone(&union.schema)
                };
                Ok(StreamNode::Union { inputs, schema })
            }
            LogicalPlan::Aggregate(agg) => {
                self.saw_aggregate = true;
                let input = self.convert(&agg.input)?;
                self.convert_aggregate(input, &agg.group_expr, &agg.aggr_expr, &agg.schema)
            }
            LogicalPlan::Distinct(Distinct::All(input)) => {
                self.saw_aggregate = true;
                self.convert_distinct(input)
            }
            LogicalPlan::Distinct(Distinct::On(d)) => {
                let input = self.convert(&d.input)?;
                crate::top_n::distinct_on_node(d, input, self.catalog)
            }
            LogicalPlan::Sort(_) => Err(SqlError::Unsupported(format!(
                "ORDER BY in a continuous query (a stream has no end to sort by); for the first rows per key or window write {}",
                crate::top_n::SUPPORTED
            ))),
            LogicalPlan::Limit(limit) => match limit.input.as_ref() {
                LogicalPlan::Sort(sort) => {
                    let input = self.convert(&sort.input)?;
                    crate::top_n::order_limit_node(limit, sort, input, self.catalog)
                }
                _ => Err(SqlError::Unsupported(format!(
                    "LIMIT without ORDER BY in a continuous query (which rows would be arbitrary); for the first N rows per key or window write {}",
                    crate::top_n::SUPPORTED
                ))),
            },
            LogicalPlan::Join(join) => {
                let condition = crate::join::conjuncts(join.filter.as_ref());
                self.convert_join(join, condition)
            }
            LogicalPlan::Window(w) => match self.top_n.take() {
                Some((bounded, limit)) if std::ptr::eq(bounded, w) => {
                    let input = self.convert(&w.input)?;
                    crate::top_n::top_n_node(w, input, self.catalog, limit)
                }
                _ => {
                    let input = self.convert(&w.input)?;
                    crate::over::over_node(self.catalog, w, input)
                }
            },
            other => Err(SqlError::Unsupported(format!(
                "{} in a continuous query",
                other.display()
            ))),
        }
    }

    fn convert_join(
        &mut self,
        join: &datafusion::logical_expr::logical_plan::Join,
        condition: Vec<&Expr>,
    ) -> Result<StreamNode> {
        let catalog = self.catalog;
        // A lookup join reads at processing time: a FOR SYSTEM_TIME AS OF
        // marker says nothing to it.
        let lookup_condition = condition
            .iter()
            .copied()
            .filter(|c| crate::temporal::marker_arg(c).is_none())
            .collect();
        if let Some(node) =
            crate::lookup::plan_lookup_join(catalog, join, lookup_condition, &mut |p| {
                self.convert(p)
            })?
        {
            return Ok(node);
        }
        let left = self.convert(&join.left)?;
        let right = self.convert(&join.right)?;
        let temporal = |e: &Expr| crate::temporal::marker_arg(e).is_some();
        if condition.iter().any(|c| crate::asof::mentions(c, temporal)) {
            return crate::temporal::temporal_node(
                self.catalog,
                join.join_type,
                left,
                right,
                &join.on,
                join.filter.as_ref(),
                Arc::clone(&join.schema),
            );
        }
        if condition.iter().any(|c| crate::asof::mentions_marker(c)) {
            return crate::asof::asof_node(
                self.catalog,
                join.join_type,
                left,
                right,
                &join.on,
                join.filter.as_ref(),
                Arc::clone(&join.schema),
            );
        }
        crate::join::join_node(
            self.catalog,
            join.join_type,
            left,
            right,
            &join.on,
            condition,
            Arc::clone(&join.schema),
        )
    }

    /// `SELECT DISTINCT cols FROM ...` is `GROUP BY cols` with no aggregate:
    /// the selected expressions (a window function among them) become the
    /// grouping, so a windowed DISTINCT emits each distinct row once when its
    /// window closes and frees it with the watermark, as any windowed
    /// aggregation does.
    fn convert_distinct(&mut self, input: &LogicalPlan) -> Result<StreamNode> {
        let (source, group, schema) = match input {
            LogicalPlan::Projection(proj) => (
                proj.input.as_ref(),
                proj.expr.iter().map(|e| e.clone().unalias()).collect(),
                Arc::clone(&proj.schema),
            ),
            other => (
                other,
                other
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect::<Vec<_>>(),
                Arc::clone(other.schema()),
            ),
        };
        let converted = self.convert(source)?;
        let mut windowed = false;
        for g in &group {
            windowed |= window_call(g, converted.schema())?.is_some();
        }
        if windowed {
            return self.convert_aggregate(converted, &group, &[], &schema);
        }
        // Without a window no row is ever final, so the output could only be
        // exact as an append-only stream of first occurrences.
        if converted.is_changelog() {
            return Err(SqlError::Unsupported(
                "SELECT DISTINCT without a window over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); use GROUP BY".into(),
            ));
        }
        if self.emit.is_some() {
            return Err(SqlError::Unsupported(
                "EMIT on a SELECT DISTINCT without a window function (tumble, hop or session); its output is append-only: each distinct row once, when first seen".into(),
            ));
        }
        for g in &group {
            check_scalar_expr(g)?;
        }
        Ok(StreamNode::Distinct {
            input: Box::new(converted),
            keys: group,
            schema,
        })
    }

    fn convert_aggregate(
        &mut self,
        input: StreamNode,
        group_expr: &[Expr],
        aggr_expr: &[Expr],
        schema: &DFSchemaRef,
    ) -> Result<StreamNode> {
        let mut keys = Vec::new();
        let mut slots = Vec::new();
        let mut window: Option<(WindowFunction, WindowSpec)> = None;
        for g in group_expr {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(SqlError::Unsupported(
                    "GROUPING SETS / ROLLUP / CUBE in a continuous query".into(),
                ));
            }
            match window_call(g, input.schema())? {
                Some((func, spec)) => {
                    if let Some((prev_func, prev)) = &window {
                        if prev.kind != spec.kind || prev.time != spec.time {
                            return Err(SqlError::Unsupported(format!(
                                "two different windows in one GROUP BY ({}() and {}())",
                                prev_func.name(),
                                func.name()
                            )));
                        }
                    } else {
                        window = Some((func, spec));
                    }
                    slots.push(if func.is_end() {
                        GroupSlot::WindowEnd
                    } else {
                        GroupSlot::WindowStart
                    });
                }
                None => {
                    check_scalar_expr(g)?;
                    slots.push(GroupSlot::Key(keys.len()));
                    keys.push(g.clone());
                }
            }
        }
        match window {
            Some(_) if input.is_changelog() => Err(SqlError::Unsupported(
                "a windowed aggregation over a changelog input (an EMIT CHANGES stream or a non-windowed GROUP BY); window the append-only input, or drop the window to get an updating aggregate".into(),
            )),
            Some((_, window)) => {
                let emit = self.emit.unwrap_or(EmitMode::OnWindowClose);
                let schema = match emit {
                    EmitMode::Changes => with_change_column(schema)?,
                    EmitMode::OnWindowClose => Arc::clone(schema),
                };
                Ok(StreamNode::WindowAggregate {
                    input: Box::new(input),
                    window,
                    keys,
                    slots,
                    aggregates: aggr_expr.to_vec(),
                    emit,
                    schema,
                })
            }
            None => {
                if self.emit == Some(EmitMode::OnWindowClose) {
                    return Err(SqlError::Unsupported(
                        "EMIT ON WINDOW CLOSE on a GROUP BY without a window function (tumble, hop or session); a non-windowed aggregation never closes, use EMIT CHANGES".into(),
                    ));
                }
                Ok(StreamNode::Aggregate {
                    input: Box::new(input),
                    keys,
                    aggregates: aggr_expr.to_vec(),
                    schema: with_change_column(schema)?,
                })
            }
        }
    }
}
