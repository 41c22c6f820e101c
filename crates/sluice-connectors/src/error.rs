//! Error type shared by every connector.
//!
//! Connectors sit on the boundary between user data and the engine, so their
//! errors must say *where* the problem is (file, line, column) precisely
//! enough that a user can open the file and fix it without guessing.  Each
//! variant also carries a stable code (see [`ConnectorError::code`]) so the
//! CLI and tests can match on errors without depending on message wording.

use std::path::{Path, PathBuf};

use arrow::error::ArrowError;
use parquet::errors::ParquetError;

/// Convenience alias used throughout the crate.
pub type Result<T, E = ConnectorError> = std::result::Result<T, E>;

/// Everything that can go wrong while reading or writing connector files.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// An operating-system level I/O failure on `path`.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory being accessed.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },

    /// A single row of input could not be decoded.
    ///
    /// `line` is the 1-based physical line on which the row starts, so it can
    /// be pasted into an editor's "go to line".  `column` is empty when the
    /// problem is not tied to a column (e.g. a syntactically broken JSON line).
    #[error("{}", display_malformed(file, *line, column, message))]
    Malformed {
        /// File containing the bad row.
        file: PathBuf,
        /// 1-based line where the row starts.
        line: u64,
        /// Name of the offending column (may be empty).
        column: String,
        /// What was wrong with the value.
        message: String,
    },

    /// The file's structure does not fit the declared schema (missing column,
    /// incompatible type, missing header ...).
    #[error("{}: {message}", file.display())]
    Schema {
        /// File whose structure is wrong.
        file: PathBuf,
        /// Human-readable description.
        message: String,
    },

    /// A user-supplied option has an unusable value.
    #[error("invalid value for option '{option}': {message}")]
    InvalidOption {
        /// Name of the option, e.g. `format`.
        option: String,
        /// Why it was rejected and what is accepted instead.
        message: String,
    },

    /// A glob pattern matched nothing, which almost always means a typo, so
    /// it is reported instead of silently producing an empty stream.
    #[error("no files match pattern '{}'", crate::quote::bounded(pattern))]
    NoFiles {
        /// The (resolved) pattern that matched nothing.
        pattern: String,
    },

    /// A saved [`crate::SourcePosition`] does not fit the current file list.
    #[error("cannot resume at {}: {message}", file.display())]
    InvalidPosition {
        /// The file named by the position.
        file: PathBuf,
        /// Why the position cannot be used.
        message: String,
    },

    /// A record (CSV record, JSON line) is longer than the source's
    /// `max_record_bytes`. Always fatal: the reader cannot find where the
    /// next record starts without reading the whole runaway one.
    #[error(
        "{}:{line}: record is longer than max_record_bytes = {limit} bytes (allowed: {} to {} \
         bytes); a file without line ends, or an unclosed quote, reads as one endless record",
        file.display(),
        crate::limits::MIN_MAX_RECORD_BYTES,
        crate::limits::MAX_MAX_RECORD_BYTES
    )]
    RecordTooLong {
        /// File containing the record.
        file: PathBuf,
        /// 1-based line where the record starts.
        line: u64,
        /// The limit in force.
        limit: usize,
    },

    /// An Arrow operation failed; `context` says which one and on what.
    /// The cause's text is bounded (it may quote a value from the file).
    #[error("{context}: {}", crate::quote::bounded(&source.to_string()))]
    Arrow {
        /// What was being done, usually including the file path.
        context: String,
        /// The underlying Arrow error.
        source: ArrowError,
    },

    /// A Parquet operation failed; `context` says which one and on what.
    /// The cause's text is bounded (it may quote a value from the file).
    #[error("{context}: {}", crate::quote::bounded(&source.to_string()))]
    Parquet {
        /// What was being done, usually including the file path.
        context: String,
        /// The underlying Parquet error.
        source: ParquetError,
    },
}

fn display_malformed(file: &Path, line: u64, column: &str, message: &str) -> String {
    if column.is_empty() {
        format!("{}:{line}: {message}", file.display())
    } else {
        format!("{}:{line}: column '{column}': {message}", file.display())
    }
}

impl ConnectorError {
    /// Stable, documented error code. Messages may be reworded over time; the
    /// codes never change meaning.
    pub fn code(&self) -> &'static str {
        match self {
            ConnectorError::Io { .. } => "SLC-CONN-001",
            ConnectorError::Malformed { .. } => "SLC-CONN-002",
            ConnectorError::Schema { .. } => "SLC-CONN-003",
            ConnectorError::InvalidOption { .. } => "SLC-CONN-004",
            ConnectorError::NoFiles { .. } => "SLC-CONN-005",
            ConnectorError::InvalidPosition { .. } => "SLC-CONN-006",
            ConnectorError::Arrow { .. } => "SLC-CONN-007",
            ConnectorError::Parquet { .. } => "SLC-CONN-008",
            ConnectorError::RecordTooLong { .. } => "SLC-CONN-009",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ConnectorError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn schema(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        ConnectorError::Schema {
            file: file.into(),
            message: message.into(),
        }
    }

    pub(crate) fn invalid_option(option: &str, message: impl Into<String>) -> Self {
        ConnectorError::InvalidOption {
            option: option.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn arrow(context: impl Into<String>, source: ArrowError) -> Self {
        ConnectorError::Arrow {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn parquet(context: impl Into<String>, source: ParquetError) -> Self {
        ConnectorError::Parquet {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_display_with_and_without_column() {
        let e = ConnectorError::Malformed {
            file: PathBuf::from("data/bids.csv"),
            line: 17,
            column: "price".into(),
            message: "cannot parse 'abc' as Int64".into(),
        };
        assert_eq!(
            e.to_string(),
            "data/bids.csv:17: column 'price': cannot parse 'abc' as Int64"
        );
        assert_eq!(e.code(), "SLC-CONN-002");
        let e = ConnectorError::Malformed {
            file: PathBuf::from("a.jsonl"),
            line: 3,
            column: String::new(),
            message: "invalid JSON".into(),
        };
        assert_eq!(e.to_string(), "a.jsonl:3: invalid JSON");
    }

    #[test]
    fn codes_are_distinct() {
        let errs = [
            ConnectorError::io("x", std::io::Error::other("boom")),
            ConnectorError::schema("x", "m"),
            ConnectorError::invalid_option("format", "m"),
            ConnectorError::NoFiles {
                pattern: "*.csv".into(),
            },
            ConnectorError::InvalidPosition {
                file: "x".into(),
                message: "m".into(),
            },
            ConnectorError::arrow("ctx", ArrowError::ComputeError("m".into())),
            ConnectorError::parquet("ctx", ParquetError::General("m".into())),
            ConnectorError::RecordTooLong {
                file: "x".into(),
                line: 1,
                limit: 1024,
            },
        ];
        let mut codes: Vec<_> = errs.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), errs.len());
        assert_eq!(errs[0].to_string(), "x: boom");
        assert_eq!(errs[3].to_string(), "no files match pattern '*.csv'");
    }

    /// Arrow and Parquet causes may quote file contents: bounded to 200
    /// characters and the length.
    #[test]
    fn arrow_and_parquet_causes_are_bounded() {
        let long = "v".repeat(1_000_000);
        let arrow = ConnectorError::arrow("reading f", ArrowError::CastError(long.clone()));
        assert_eq!(
            arrow.to_string(),
            format!(
                "reading f: Cast error: {}… (1000012 bytes)",
                "v".repeat(188)
            )
        );
        let parquet = ConnectorError::parquet("opening f", ParquetError::General(long));
        assert_eq!(
            parquet.to_string(),
            format!(
                "opening f: Parquet error: {}… (1000015 bytes)",
                "v".repeat(185)
            )
        );
    }
}
