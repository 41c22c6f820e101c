//! File connectors for Sluice: read CSV, JSON-lines and Parquet files as a
//! stream of Arrow record batches of a declared schema, and write batches to
//! such files atomically.
//!
//! The source side ([`FileSourceReader`]) is built for ingest throughput and
//! precise diagnostics: values are parsed straight from bytes into typed
//! Arrow builders, and every malformed value is reported with file, line and
//! column. It also exposes a [`SourcePosition`] so the engine can checkpoint
//! and resume exactly. The sink side ([`FileSinkWriter`]) never exposes a
//! partially written file under its final name.

mod error;
mod format;
pub mod fuzzing;
pub mod nexmark;
mod reader;
mod sink;
mod source;

pub use error::{ConnectorError, Result};
pub use format::FileFormat;
pub use nexmark::{NexmarkConfig, NexmarkReader, NexmarkStream};
pub use reader::BatchReader;
pub use sink::{EpochFileSink, EpochRecord, FileSinkWriter};
pub use source::{FileSourceConfig, FileSourceReader, OnError, SourcePosition};
