//! Errors of the benchmark harness.

/// Result alias.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Anything that stops a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The database refused or failed.
    #[error("{0}")]
    Sluice(#[from] sluice::Error),
    /// A script statement did not parse.
    #[error("{0}")]
    Sql(#[from] sluice_sql::SqlError),
    /// The generator refused its configuration or failed.
    #[error("{0}")]
    Connector(#[from] sluice_connectors::ConnectorError),
    /// The script cannot be benchmarked (no Nexmark source, no stream, ...).
    #[error("{0}")]
    Script(String),
    /// A file could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Arrow failed on a delivered batch.
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A harness task panicked or was cancelled.
    #[error("benchmark task failed: {0}")]
    Task(String),
}

impl BenchError {
    /// An I/O failure while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }
}
