//! Errors of the driver. peers.py puts the start of a failed run's stderr
//! into its table, so each message starts with what went wrong
//! (LaminarDB's own words when it refused something).

use std::path::PathBuf;

use arrow::error::ArrowError;
use laminar_db::DbError;

pub type Result<T> = std::result::Result<T, BenchError>;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A bad command line.
    #[error("{0} [SLC-LDB-001]")]
    Usage(String),
    /// A CSV file that cannot be read into the source's schema.
    #[error("reading {path}: {source} [SLC-LDB-002]")]
    Csv { path: PathBuf, source: ArrowError },
    /// A CSV file whose header does not name the source's columns in order.
    #[error("{path}: header {found:?} does not match the columns {expected:?} [SLC-LDB-003]")]
    Header {
        path: PathBuf,
        found: Vec<String>,
        expected: Vec<String>,
    },
    /// LaminarDB refused a statement or an operation (its message first).
    #[error("LaminarDB: {source} (in {what}) [SLC-LDB-004]")]
    Refused { what: String, source: DbError },
    /// LaminarDB refused a batch for another reason than a full queue, or
    /// kept refusing it for longer than the idle timeout.
    #[error("pushing into {stream}: {message} [SLC-LDB-005]")]
    Push { stream: String, message: String },
    /// The subscription ended with an error (e.g. the reader lagged behind
    /// LaminarDB's bounded log).
    #[error("subscription: {0} [SLC-LDB-006]")]
    Subscription(String),
    /// The `--interleave-by` column is missing or not orderable.
    #[error("--interleave-by {column}: {message} [SLC-LDB-007]")]
    Interleave { column: String, message: String },
    /// Writing the `--dump` file or the result line failed.
    #[error("writing {path}: {message} [SLC-LDB-008]")]
    Write { path: PathBuf, message: String },
}
