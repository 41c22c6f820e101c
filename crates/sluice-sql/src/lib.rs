//! The Sluice streaming SQL dialect.
//!
//! SQL text is parsed once, here, into typed [`Statement`]s; a continuous query
//! is then planned once into a typed [`StreamPlan`] (a tree of [`StreamNode`]s)
//! that the engine compiles into operators. Nothing downstream re-parses SQL
//! or matches strings to rediscover a query's shape.
//!
//! DataFusion does the relational work: name resolution, type coercion,
//! scalar functions and aggregate functions. This crate adds what streaming
//! needs on top: `CREATE SOURCE` with `WATERMARK FOR`, `CREATE STREAM` /
//! `MATERIALIZED VIEW` with `EMIT`, `CREATE SINK`, and the window functions
//! `tumble`, `hop`, `session` (plus `tumble_end`, `hop_end`, `session_end`),
//! also written as Flink's window table-valued functions (`TABLE(TUMBLE(...))`).

mod accelerated;
pub mod accumulators;
mod asof;
pub mod ast;
pub mod bounds;
pub mod catalog;
pub mod checked;
pub mod columns_read;
pub mod error;
mod function_errors;
mod join;
mod lookup;
mod marker;
mod over;
pub mod parser;
pub mod plan;
pub mod planner;
pub mod simplify;
pub mod split_part;
mod temporal;
pub mod to_char;
mod top_n;
pub mod types;
mod window_tvf;
pub mod window_udf;

pub use ast::{
    CreateProcessFunction, CreateProcessStream, CreateSink, CreateSource, CreateStream, EmitMode,
    ObjectKind, Statement, WatermarkSpec, WithOptions,
};
pub use catalog::PlanCatalog;
pub use columns_read::ColumnsRead;
pub use error::{Result, SqlError};
pub use parser::parse_sql;
pub use plan::{
    LookupHandle, OverFrame, StreamNode, StreamPlan, TopNMode, WindowKind, WindowSpec,
    CHANGE_COLUMN,
};
pub use planner::StreamPlanner;
