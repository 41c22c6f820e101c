//! The typed streaming plan: what a continuous query computes.
//!
//! A [`StreamPlan`] is produced once per `CREATE STREAM` / `MATERIALIZED VIEW`
//! / sink filter and is the only description of the query the engine sees.
//! Expressions are DataFusion logical expressions over the node's input
//! schema; the engine lowers them to physical expressions once.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{Column, DFSchema, DFSchemaRef};
use datafusion::logical_expr::{Expr, SortExpr};

use crate::ast::EmitMode;

mod explain;

/// Name of the column that carries the change kind in a changelog
/// (`'insert'` or `'retract'`).
pub const CHANGE_COLUMN: &str = "__change";

/// The user-visible columns of an output schema (the change column removed).
pub fn without_change_column(schema: &SchemaRef) -> SchemaRef {
    if schema.column_with_name(CHANGE_COLUMN).is_none() {
        return Arc::clone(schema);
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .filter(|f| f.name() != CHANGE_COLUMN)
        .cloned()
        .collect();
    Arc::new(Schema::new(fields))
}

/// A planned continuous query.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    /// Output name.
    pub name: String,
    /// The operator tree.
    pub root: StreamNode,
    /// Output schema as Arrow sees it (ends with [`CHANGE_COLUMN`] for changelogs).
    pub schema: SchemaRef,
    /// Whether the output is a changelog (inserts and retractions).
    pub changelog: bool,
    /// Whether the current result is kept queryable.
    pub materialized: bool,
    /// Output columns that bound the stream's future rows, with their lag.
    pub time_columns: Vec<(String, i64)>,
}

impl StreamPlan {
    /// Names of the sources and streams this plan reads, deduplicated.
    pub fn inputs(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.root.collect_inputs(&mut out);
        out.dedup();
        let mut seen = std::collections::HashSet::new();
        out.retain(|n| seen.insert(n.clone()));
        out
    }

    /// The user-visible columns (without the change column).
    pub fn data_schema(&self) -> SchemaRef {
        without_change_column(&self.schema)
    }
}

/// How rows are assigned to windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Fixed, non-overlapping windows of `size_ms`, shifted by `offset_ms`.
    Tumble {
        /// Window length.
        size_ms: i64,
        /// Shift of window boundaries from the epoch.
        offset_ms: i64,
    },
    /// Fixed windows of `size_ms` starting every `slide_ms`.
    Hop {
        /// Distance between window starts.
        slide_ms: i64,
        /// Window length.
        size_ms: i64,
    },
    /// Per-key windows that close after `gap_ms` without events.
    Session {
        /// Inactivity gap.
        gap_ms: i64,
    },
}

/// The window of a windowed aggregation.
#[derive(Debug, Clone)]
pub struct WindowSpec {
    /// How rows are assigned to windows.
    pub kind: WindowKind,
    /// The event-time expression over the aggregation's input.
    pub time: Expr,
    /// The type of `time` (a timestamp, or BIGINT milliseconds); window
    /// bounds are output in this type.
    pub time_type: DataType,
}

/// What one `GROUP BY` entry of a windowed aggregation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSlot {
    /// The n-th ordinary key expression.
    Key(usize),
    /// The window's start.
    WindowStart,
    /// The window's end.
    WindowEnd,
}
/// When a kept join row may be forgotten: once `watermark - other_lag_ms`
/// exceeds `expr` (evaluated over the row), or reaches it when `strict`.
/// Found by the join analysis in [`crate::bounds`]; a plan type, so the plan does
/// not depend on the analysis that fills it in.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinStateBound {
    /// A value of the kept row (over its side's schema).
    pub expr: Expr,
    /// The lag of the other side's time column.
    pub other_lag_ms: i64,
    /// Whether the condition was a strict `<`.
    pub strict: bool,
}

/// Which side's rows an outer join keeps when they find no match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterKind {
    /// `LEFT [OUTER] JOIN`: every left row.
    Left,
    /// `RIGHT [OUTER] JOIN`: every right row.
    Right,
    /// `FULL [OUTER] JOIN`: every row of both sides.
    Full,
}

impl OuterKind {
    /// Whether unmatched rows of the (left, right) side appear padded.
    pub fn preserves(self) -> (bool, bool) {
        match self {
            OuterKind::Left => (true, false),
            OuterKind::Right => (false, true),
            OuterKind::Full => (true, true),
        }
    }

    /// The join as SQL names it.
    pub fn sql(self) -> &'static str {
        match self {
            OuterKind::Left => "LEFT",
            OuterKind::Right => "RIGHT",
            OuterKind::Full => "FULL",
        }
    }
}

/// How an ASOF join's match condition compares the left row's time `l`
/// with the right row's `r`: `l >= r` (and `>`) matches the latest right
/// row at (or before) the left row, `l <= r` (and `<`) the earliest at (or
/// after) it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsofOp {
    /// `l.ts >= r.ts`.
    GtEq,
    /// `l.ts > r.ts`.
    Gt,
    /// `l.ts <= r.ts`.
    LtEq,
    /// `l.ts < r.ts`.
    Lt,
}

impl AsofOp {
    /// The SQL operator.
    pub fn as_str(self) -> &'static str {
        match self {
            AsofOp::GtEq => ">=",
            AsofOp::Gt => ">",
            AsofOp::LtEq => "<=",
            AsofOp::Lt => "<",
        }
    }

    /// Whether the match is the latest right row before the left row.
    pub fn backward(self) -> bool {
        matches!(self, AsofOp::GtEq | AsofOp::Gt)
    }
}

/// When the rows of a top-N partition are final, which decides whether its
/// output is append-only and what frees its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopNMode {
    /// A partition key bounds event time (a window, or a time column of the
    /// input): the partition is complete once `watermark > value + lag_ms`
    /// for the `key`-th partition value; its N rows are emitted then, once,
    /// and its state freed.
    Windowed {
        /// Index of the bounding expression in the partition keys.
        key: usize,
        /// Lag added to the value before comparing with the watermark.
        lag_ms: i64,
    },
    /// The partition keys include the key of a join side whose rows carry a
    /// completion column (see `crate::bounds::Completion`): once
    /// `watermark > value + lag_ms` for the largest value of input column
    /// `column` among a partition's rows, no further row of that partition
    /// comes, so its N rows are emitted then, once, and its state freed.
    /// This relies on the join key identifying one row of that side (as an
    /// auction id does in Nexmark q9): a row of that side with the same key
    /// arriving after the partition was emitted starts a new partition.
    Completes {
        /// Index of the completion column in the input schema.
        column: usize,
        /// Lag added to the value before comparing with the watermark.
        lag_ms: i64,
    },
    /// The first `ORDER BY` key is an input time column, ascending: a row is
    /// final once `watermark > time + lag_ms` (no later row can precede it),
    /// so the first N rows per partition are emitted in order, once each.
    /// The state keeps a count per partition key, never freed.
    FirstByTime {
        /// The time column's lag.
        lag_ms: i64,
    },
    /// No bound: a changelog of entries into and exits from the top N, and
    /// N rows kept per partition key, never freed.
    Changelog,
}

/// The frame of an `OVER (... ORDER BY event time ...)` aggregation: the rows
/// before the current one (in event-time order, within its partition) that
/// each aggregate reads, always ending at the current row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverFrame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW` (`None`: `UNBOUNDED
    /// PRECEDING`). Rows of equal event time are ordered by arrival.
    Rows {
        /// How many rows before the current one.
        preceding: Option<u64>,
    },
    /// `RANGE BETWEEN d PRECEDING AND CURRENT ROW` (`None`: `UNBOUNDED
    /// PRECEDING`): rows with `ts >= current ts - d`, peers (equal `ts`)
    /// included.
    Range {
        /// `d`, in the event-time column's own units (milliseconds for a
        /// millisecond TIMESTAMP or BIGINT).
        preceding: Option<i64>,
    },
}

/// The engine's binding of a lookup table (the table, its cache options),
/// carried through the plan unopened: the SQL crate knows only its name and
/// a description for `EXPLAIN`.
#[derive(Clone)]
pub struct LookupHandle {
    /// The engine's binding (downcast by the engine).
    pub binding: Arc<dyn std::any::Any + Send + Sync>,
    /// The cache it will use, for `EXPLAIN`.
    pub describe: String,
}

impl fmt::Debug for LookupHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LookupHandle({})", self.describe)
    }
}

/// One operator of a continuous query.
#[derive(Debug, Clone)]
pub enum StreamNode {
    /// Rows of a source or of another stream.
    Scan {
        /// The source or stream read.
        input: String,
        /// Its schema as the query sees it (qualified by alias).
        schema: DFSchemaRef,
        /// Whether that input is a changelog.
        changelog: bool,
    },
    /// Keep rows where `predicate` is true.
    Filter {
        /// Input operator.
        input: Box<StreamNode>,
        /// Boolean expression over the input.
        predicate: Expr,
    },
    /// Compute `exprs` for every row.
    Project {
        /// Input operator.
        input: Box<StreamNode>,
        /// One expression per output column.
        exprs: Vec<Expr>,
        /// Output schema.
        schema: DFSchemaRef,
    },
    /// `UNION ALL` of inputs with the same column types.
    Union {
        /// The inputs.
        inputs: Vec<StreamNode>,
        /// Output schema.
        schema: DFSchemaRef,
    },
    /// Aggregation per key and window, incremental.
    WindowAggregate {
        /// Input operator.
        input: Box<StreamNode>,
        /// The window.
        window: WindowSpec,
        /// Ordinary grouping expressions.
        keys: Vec<Expr>,
        /// The `GROUP BY` list in written order (output column order).
        slots: Vec<GroupSlot>,
        /// Aggregate expressions.
        aggregates: Vec<Expr>,
        /// When results are emitted.
        emit: EmitMode,
        /// Output schema (groups then aggregates, plus the change column
        /// when `emit` is [`EmitMode::Changes`]).
        schema: DFSchemaRef,
    },
    /// Inner equi-join of two append-only inputs: every pair of rows whose
    /// keys are equal (and not null) and that passes `filter`, once.
    Join {
        /// Left input.
        left: Box<StreamNode>,
        /// Right input.
        right: Box<StreamNode>,
        /// Key pairs: an expression over the left input and one over the
        /// right, of the same type.
        on: Vec<(Expr, Expr)>,
        /// Residual condition over the joined row.
        filter: Option<Expr>,
        /// When a kept left row can no longer match (empty: never).
        left_bounds: Vec<JoinStateBound>,
        /// When a kept right row can no longer match (empty: never).
        right_bounds: Vec<JoinStateBound>,
        /// Output schema: the left columns, then the right ones.
        schema: DFSchemaRef,
    },
    /// `LEFT` / `RIGHT` / `FULL` outer equi-join of two append-only inputs:
    /// the inner join's pairs, plus every row of a preserved side that
    /// matched nothing, padded with NULLs. Append-only when every preserved
    /// side has a state bound (a padded row is emitted when the watermark
    /// frees its row); otherwise a changelog (a padded row is emitted on
    /// arrival and retracted at the row's first match).
    OuterJoin {
        /// Which sides are preserved.
        kind: OuterKind,
        /// Left input.
        left: Box<StreamNode>,
        /// Right input.
        right: Box<StreamNode>,
        /// Key pairs, as for [`StreamNode::Join`].
        on: Vec<(Expr, Expr)>,
        /// Residual condition over the joined row: it decides matching (a
        /// preserved row failing it still appears, padded).
        filter: Option<Expr>,
        /// When a kept left row can no longer match (empty: never).
        left_bounds: Vec<JoinStateBound>,
        /// When a kept right row can no longer match (empty: never).
        right_bounds: Vec<JoinStateBound>,
        /// Whether the output is a changelog (a preserved side is unbounded).
        changelog: bool,
        /// Output schema: the left columns, then the right ones (nullable
        /// where padded), then the change column when `changelog`.
        schema: DFSchemaRef,
    },
    /// ASOF join of two append-only inputs: each left row with the right
    /// rows of equal (non-NULL) key whose time is the closest one
    /// satisfying `left_time op right_time` (and the tolerance), emitted once
    /// the watermark makes that match final. Append-only output.
    AsofJoin {
        /// Left input.
        left: Box<StreamNode>,
        /// Right input.
        right: Box<StreamNode>,
        /// Key pairs (left expr, right expr), of the same type.
        on: Vec<(Expr, Expr)>,
        /// The left input's event-time column.
        left_time: Expr,
        /// The right input's event-time column.
        right_time: Expr,
        /// How the times compare.
        op: AsofOp,
        /// At most this far apart (ms), when given.
        tolerance_ms: Option<i64>,
        /// `LEFT ASOF JOIN`: left rows without a match are emitted with
        /// NULLs for the right columns.
        keep_unmatched: bool,
        /// Future left rows have `left_time >= watermark - left_lag_ms`.
        left_lag_ms: i64,
        /// Future right rows have `right_time >= watermark - right_lag_ms`.
        right_lag_ms: i64,
        /// Output schema: the left columns, then the right ones.
        schema: DFSchemaRef,
        /// A temporal join (`FOR SYSTEM_TIME AS OF`): the versioned
        /// table's name and PRIMARY KEY, for EXPLAIN. It is an ASOF `>=`
        /// join keyed by that key, so nothing else differs.
        versioned: Option<String>,
    },
    /// Non-windowed `GROUP BY`: an updating aggregate with changelog output.
    Aggregate {
        /// Input operator.
        input: Box<StreamNode>,
        /// Grouping expressions.
        keys: Vec<Expr>,
        /// Aggregate expressions.
        aggregates: Vec<Expr>,
        /// Output schema (keys, aggregates, change column).
        schema: DFSchemaRef,
    },
    /// Non-windowed `SELECT DISTINCT` over an append-only input: each
    /// distinct row once, the first time it is seen. Append-only output; the
    /// state is every distinct row seen, never freed.
    Distinct {
        /// Input operator.
        input: Box<StreamNode>,
        /// The selected expressions, one per output column.
        keys: Vec<Expr>,
        /// Output schema.
        schema: DFSchemaRef,
    },
    /// `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)` kept where it is at
    /// most `limit`: the first `limit` rows per partition, each with its
    /// row number (ties broken by the whole row, so the numbering is
    /// deterministic).
    TopN {
        /// Input operator (append-only).
        input: Box<StreamNode>,
        /// Partition keys.
        partition: Vec<Expr>,
        /// The ordering within a partition.
        order: Vec<SortExpr>,
        /// How many rows per partition.
        limit: usize,
        /// When rows are final.
        mode: TopNMode,
        /// Output schema: the input columns, the row number (UInt64), and
        /// the change column in [`TopNMode::Changelog`].
        schema: DFSchemaRef,
    },
    /// `agg(x) OVER (PARTITION BY k ORDER BY ts <frame>)` over an
    /// append-only input: every input row once, with the aggregates over its
    /// frame, emitted in event-time order once the watermark passes its
    /// `ts` (so no row of its frame can still arrive). Append-only output.
    OverAggregate {
        /// Input operator.
        input: Box<StreamNode>,
        /// `PARTITION BY` expressions (empty: one partition).
        partition_by: Vec<Expr>,
        /// The `ORDER BY` column: the input's event time.
        time: Expr,
        /// Future input rows have `time >= watermark - time_lag_ms`.
        time_lag_ms: i64,
        /// The frame every aggregate shares.
        frame: OverFrame,
        /// The aggregates as plain calls over the input (no `OVER`).
        aggregates: Vec<Expr>,
        /// Output schema: the input's columns, then one per aggregate.
        schema: DFSchemaRef,
    },
    /// `agg(x) OVER (PARTITION BY k ORDER BY o <frame>)` over a changelog
    /// input: each partition's live input rows are kept sorted by `order_by`
    /// then by the whole row (a deterministic tie-breaker), and when a row
    /// is inserted or retracted every row whose frame holds that position
    /// gets its old output retracted and its new one inserted. A changelog
    /// whose state is every live input row, never freed.
    ChangelogOver {
        /// Input operator (a changelog).
        input: Box<StreamNode>,
        /// `PARTITION BY` expressions (empty: one partition).
        partition_by: Vec<Expr>,
        /// The ordering within a partition (any orderable expressions; a
        /// `RANGE` frame with an offset has exactly one, a BIGINT or TIMESTAMP).
        order_by: Vec<SortExpr>,
        /// The frame every aggregate shares (a `RANGE` offset in the
        /// `ORDER BY` column's own units).
        frame: OverFrame,
        /// The aggregates as plain calls over the input (no `OVER`).
        aggregates: Vec<Expr>,
        /// Output schema: the input's columns (without its change column),
        /// then one per aggregate, then the change column.
        schema: DFSchemaRef,
    },
    /// Lookup join: each row of an append-only input enriched with the
    /// rows of an external table whose leading key columns equal the row's
    /// key, as the table is when the row is processed (processing time, not
    /// replay-deterministic). Append-only output; no checkpointed state (the
    /// cache is not state: a restore starts with an empty cache).
    LookupJoin {
        /// The stream side.
        input: Box<StreamNode>,
        /// The lookup table's name.
        table: String,
        /// The engine's binding of the table.
        handle: LookupHandle,
        /// One expression over the input per key column used (the leading
        /// `keys.len()` key columns of the table, in key order).
        keys: Vec<Expr>,
        /// The names of those key columns.
        key_columns: Vec<String>,
        /// `LEFT JOIN`: a row with no match is kept, the table's columns NULL.
        left_outer: bool,
        /// Residual condition of `ON` over the joined row.
        filter: Option<Expr>,
        /// Output schema: the input's columns, then the table's.
        schema: DFSchemaRef,
    },
}

impl StreamNode {
    /// The output schema of this operator.
    pub fn schema(&self) -> &DFSchemaRef {
        match self {
            StreamNode::Scan { schema, .. }
            | StreamNode::Project { schema, .. }
            | StreamNode::Union { schema, .. }
            | StreamNode::WindowAggregate { schema, .. }
            | StreamNode::Join { schema, .. }
            | StreamNode::OuterJoin { schema, .. }
            | StreamNode::AsofJoin { schema, .. }
            | StreamNode::Aggregate { schema, .. }
            | StreamNode::Distinct { schema, .. }
            | StreamNode::TopN { schema, .. } => schema,
            StreamNode::OverAggregate { schema, .. }
            | StreamNode::ChangelogOver { schema, .. }
            | StreamNode::LookupJoin { schema, .. } => schema,
            StreamNode::Filter { input, .. } => input.schema(),
        }
    }

    /// Whether this operator's output is a changelog.
    pub fn is_changelog(&self) -> bool {
        match self {
            StreamNode::Scan { changelog, .. } => *changelog,
            StreamNode::Filter { input, .. } | StreamNode::Project { input, .. } => {
                input.is_changelog()
            }
            StreamNode::Union { inputs, .. } => inputs.iter().any(|i| i.is_changelog()),
            StreamNode::WindowAggregate { emit, .. } => *emit == EmitMode::Changes,
            StreamNode::Aggregate { .. } | StreamNode::ChangelogOver { .. } => true,
            StreamNode::OuterJoin { changelog, .. } => *changelog,
            StreamNode::TopN { mode, .. } => *mode == TopNMode::Changelog,
            StreamNode::Join { .. }
            | StreamNode::AsofJoin { .. }
            | StreamNode::Distinct { .. }
            | StreamNode::OverAggregate { .. }
            | StreamNode::LookupJoin { .. } => false,
        }
    }

    /// The one input this node reads batch by batch, when it is a chain of
    /// filters and projections over a single scan: each output batch then
    /// comes from exactly one input batch. None for aggregates and unions.
    pub fn batchwise_input(&self) -> Option<&str> {
        match self {
            StreamNode::Scan { input, .. } => Some(input),
            StreamNode::Filter { input, .. } | StreamNode::Project { input, .. } => {
                input.batchwise_input()
            }
            _ => None,
        }
    }

    fn collect_inputs(&self, out: &mut Vec<String>) {
        match self {
            StreamNode::Scan { input, .. } => out.push(input.clone()),
            StreamNode::Filter { input, .. }
            | StreamNode::Project { input, .. }
            | StreamNode::WindowAggregate { input, .. }
            | StreamNode::Aggregate { input, .. }
            | StreamNode::Distinct { input, .. }
            | StreamNode::TopN { input, .. }
            | StreamNode::OverAggregate { input, .. }
            | StreamNode::ChangelogOver { input, .. }
            | StreamNode::LookupJoin { input, .. } => input.collect_inputs(out),
            StreamNode::Union { inputs, .. } => inputs.iter().for_each(|i| i.collect_inputs(out)),
            StreamNode::Join { left, right, .. }
            | StreamNode::OuterJoin { left, right, .. }
            | StreamNode::AsofJoin { left, right, .. } => {
                left.collect_inputs(out);
                right.collect_inputs(out);
            }
        }
    }
}

/// Append the change column to a schema that lacks it.
pub(crate) fn with_change_column(schema: &DFSchema) -> crate::error::Result<DFSchemaRef> {
    if schema.has_column_with_unqualified_name(CHANGE_COLUMN) {
        return Ok(Arc::new(schema.clone()));
    }
    let extra = DFSchema::try_from(Schema::new(vec![Field::new(
        CHANGE_COLUMN,
        DataType::Utf8,
        false,
    )]))?;
    Ok(Arc::new(schema.join(&extra)?))
}
