//! One-shot `SELECT`s over materialized views, answered by DataFusion.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast as sp;
use sluice_engine::catalog::Catalog;
use sluice_engine::output::mv::MaterializedView;
use sluice_sql::window_udf::window_udfs;

use crate::{Error, Result};

/// A source or stream named in a one-shot query: it has no stored rows.
#[derive(Debug)]
struct NotQueryable {
    name: String,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for NotQueryable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
    fn table_type(&self) -> TableType {
        TableType::View
    }
    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::Plan(format!(
            "'{}' is a source or stream and keeps no rows; SELECT reads materialized views (subscribe to a stream instead)",
            self.name
        )))
    }
}

/// Run a one-shot query against the current contents of the views.
pub async fn run_query(
    catalog: &Catalog,
    views: &[(String, Arc<MaterializedView>)],
    query: &sp::Query,
) -> Result<Vec<RecordBatch>> {
    let ctx = SessionContext::new();
    for udf in window_udfs() {
        ctx.register_udf(udf);
    }
    sluice_sql::checked::register(&ctx);
    ctx.register_udf(sluice_sql::to_char::to_char_udf());
    let df = |e: DataFusionError| Error::exec("SELECT", e);
    for (name, view) in views {
        let rows = view.snapshot()?;
        let table = MemTable::try_new(Arc::clone(view.schema()), vec![rows]).map_err(df)?;
        ctx.register_table(name.as_str(), Arc::new(table))
            .map_err(df)?;
    }
    for name in sluice_sql::PlanCatalog::relation_names(catalog) {
        if views.iter().any(|(v, _)| *v == name) {
            continue;
        }
        if let Some((schema, _)) = sluice_sql::PlanCatalog::relation(catalog, &name) {
            let t = NotQueryable {
                name: name.clone(),
                schema,
            };
            ctx.register_table(name.as_str(), Arc::new(t)).map_err(df)?;
        }
    }
    let state = ctx.state();
    let stmt = datafusion::sql::parser::Statement::Statement(Box::new(sp::Statement::Query(
        Box::new(query.clone()),
    )));
    // Everything before the first row is computed is planning: its errors
    // (a call no signature takes, aggregate arguments checked only by
    // physical planning or by accumulator creation) are the user's type or
    // planning errors, as in CREATE STREAM.
    // An overflow found while folding constants stays an overflow.
    let plan_error = |e: DataFusionError| match sluice_sql::checked::overflow_of(&e) {
        Some(_) => Error::exec("SELECT", e),
        None => Error::Sql(sluice_sql::SqlError::from(e)),
    };
    let plan = state.statement_to_plan(stmt).await.map_err(plan_error)?;
    let frame = ctx.execute_logical_plan(plan).await.map_err(plan_error)?;
    let task = frame.task_ctx();
    let physical = frame.create_physical_plan().await.map_err(plan_error)?;
    sluice_sql::accumulators::probe_plan(physical.as_ref())?;
    datafusion::physical_plan::collect(physical, Arc::new(task))
        .await
        .map_err(df)
}
