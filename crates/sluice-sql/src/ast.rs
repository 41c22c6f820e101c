//! Typed statements of the Sluice dialect.

use std::fmt;

use arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast as sp;

use crate::error::{Result, SqlError};

/// One parsed statement.
#[derive(Debug, Clone)]
pub enum Statement {
    /// `CREATE SOURCE`.
    CreateSource(CreateSource),
    /// `CREATE STREAM` or `CREATE MATERIALIZED VIEW`.
    CreateStream(CreateStream),
    /// `CREATE STREAM name AS PROCESS function [VERSION n] FROM input`.
    CreateProcessStream(CreateProcessStream),
    /// `CREATE SINK`.
    CreateSink(CreateSink),
    /// `CREATE PROCESS FUNCTION`: a function served by a worker.
    CreateProcessFunction(CreateProcessFunction),
    /// `DROP <kind> [IF EXISTS] name`.
    Drop {
        /// What is dropped.
        kind: ObjectKind,
        /// Its name.
        name: String,
        /// Whether a missing object is fine.
        if_exists: bool,
    },
    /// `SHOW SOURCES | STREAMS | MATERIALIZED VIEWS | SINKS`.
    Show(ObjectKind),
    /// `DESCRIBE name`.
    Describe(String),
    /// `EXPLAIN <statement>`.
    Explain(Box<Statement>),
    /// `SET name = value`.
    Set {
        /// Option name (lower case).
        name: String,
        /// Option value as written, quotes removed.
        value: String,
    },
    /// `CHECKPOINT`: take a checkpoint now.
    Checkpoint,
    /// `SHOW CHECKPOINTS`.
    ShowCheckpoints,
    /// `SHOW CLUSTER`: the cluster's members, leader, vnode owners and
    /// progress (only where the database runs in a cluster).
    ShowCluster,
    /// `SHOW EXCHANGES`: what each exchange of a shuffled split carried
    /// between this node and the others (only where the database has a
    /// shuffle).
    ShowExchanges,
    /// `SHOW PROCESS FUNCTIONS`.
    ShowProcessFunctions,
    /// A one-shot query, answered from materialized views.
    Query(Box<sp::Query>),
}

/// The kinds of catalog objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// An input.
    Source,
    /// A continuous query whose output is a stream.
    Stream,
    /// A continuous query whose current result can be queried.
    MaterializedView,
    /// An output.
    Sink,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Source => "source",
            ObjectKind::Stream => "stream",
            ObjectKind::MaterializedView => "materialized view",
            ObjectKind::Sink => "sink",
        })
    }
}

/// `WATERMARK FOR column AS column - INTERVAL '...'`: bounded out-of-orderness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkSpec {
    /// The event-time column.
    pub column: String,
    /// How far behind the largest event time seen the watermark trails, in ms.
    pub delay_ms: i64,
}

/// `CREATE SOURCE`.
#[derive(Debug, Clone)]
pub struct CreateSource {
    /// Source name.
    pub name: String,
    /// Declared columns.
    pub schema: SchemaRef,
    /// Event-time declaration, if any.
    pub watermark: Option<WatermarkSpec>,
    /// `LATE DATA TO stream`: where late rows go instead of being dropped.
    pub late_data_to: Option<String>,
    /// `PRIMARY KEY (cols)`: the rows are versions of these keys (a
    /// versioned table for `FOR SYSTEM_TIME AS OF`); empty if not declared.
    pub primary_key: Vec<String>,
    /// Connector options; empty for a push source.
    pub options: WithOptions,
}

/// `CREATE PROCESS FUNCTION name VERSION n (input) KEY (cols) RETURNS
/// (output) WITH (options)`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateProcessFunction {
    /// Function name.
    pub name: String,
    /// Function version.
    pub version: u32,
    /// Input columns.
    pub input: SchemaRef,
    /// Key columns (of the input).
    pub key: Vec<String>,
    /// Output columns.
    pub output: SchemaRef,
    /// Runtime, deployment, determinism, initial state and limits.
    pub options: WithOptions,
}

/// How a continuous query emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitMode {
    /// Final rows once, when the watermark passes the window end.
    OnWindowClose,
    /// A changelog with retractions as results change.
    Changes,
}

/// `CREATE STREAM` / `CREATE MATERIALIZED VIEW`.
#[derive(Debug, Clone)]
pub struct CreateStream {
    /// Output name.
    pub name: String,
    /// Whether the current result is kept queryable.
    pub materialized: bool,
    /// The query.
    pub query: Box<sp::Query>,
    /// The `EMIT` clause, if written.
    pub emit: Option<EmitMode>,
    /// Tables written with `FOR SYSTEM_TIME AS OF ...` (removed from
    /// `query`); each must be a lookup table.
    pub system_time: Vec<String>,
}

/// `CREATE STREAM name AS PROCESS function [VERSION n] FROM input`: bind a
/// registered process function to an input; its output is the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateProcessStream {
    /// Output stream name.
    pub name: String,
    /// Whether the output is kept queryable (`CREATE MATERIALIZED VIEW`).
    pub materialized: bool,
    /// The registered function.
    pub function: String,
    /// The version the statement expects, if written.
    pub version: Option<u32>,
    /// The source or stream it reads.
    pub input: String,
}

/// `CREATE SINK name FROM stream [WHERE ...] WITH (...)`.
#[derive(Debug, Clone)]
pub struct CreateSink {
    /// Sink name.
    pub name: String,
    /// The stream or view it reads.
    pub from: String,
    /// Optional row filter.
    pub filter: Option<Box<sp::Expr>>,
    /// Connector options.
    pub options: WithOptions,
}

/// `WITH (key = 'value', ...)`, in written order, keys lower-cased.
///
/// Consumers take each option they understand with [`WithOptions::take`] and
/// finish with [`WithOptions::finish`], which refuses any option left over,
/// so nothing written in SQL is silently ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WithOptions {
    entries: Vec<(String, String)>,
}

impl WithOptions {
    /// Build from pairs, refusing duplicate keys.
    pub fn new(pairs: Vec<(String, String)>) -> Result<Self> {
        let mut entries: Vec<(String, String)> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let k = k.to_ascii_lowercase();
            if entries.iter().any(|(e, _)| *e == k) {
                return Err(SqlError::Option(format!("option '{k}' is given twice")));
            }
            entries.push((k, v));
        }
        Ok(Self { entries })
    }

    /// Whether no options were written.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Remove and return an option's value.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(pos).1)
    }

    /// Remove and return an option that must be present.
    pub fn require(&mut self, key: &str, context: &str) -> Result<String> {
        self.take(key)
            .ok_or_else(|| SqlError::Option(format!("{context} requires option '{key}'")))
    }

    /// Refuse whatever options were not taken.
    pub fn finish(self, context: &str, known: &[&str]) -> Result<()> {
        match self.entries.first() {
            None => Ok(()),
            Some((k, _)) => Err(SqlError::Option(format!(
                "unknown option '{k}' for {context} (known options: {})",
                known.join(", ")
            ))),
        }
    }

    /// All entries, for display.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }
}
