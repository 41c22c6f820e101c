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
mod quote;
mod reader;
mod sink;
mod source;

mod limits;
pub mod lookup;
pub use error::{ConnectorError, Result};
pub use format::FileFormat;
pub use lookup::{LookupError, LookupRows, LookupTable, MemoryLookupTable};
pub use nexmark::{
    nexmark_handover, NexmarkConfig, NexmarkReader, NexmarkStream, PreviousNexmarkShare,
};
pub use quote::{bounded as bounded_quote, MAX_QUOTED_CHARS};
pub use reader::BatchReader;
pub use sink::{EpochFileSink, EpochRecord, FileSinkWriter};
pub use source::{
    handover, parse_max_record_bytes, FileProgress, FileShare, FileSourceConfig, FileSourceReader,
    HandoverStart, OnError, PreviousShare, SourcePosition, DEFAULT_MAX_RECORD_BYTES,
    MAX_MAX_RECORD_BYTES, MIN_MAX_RECORD_BYTES,
};

/// Most rows a source batch may hold (`batch_size`): larger batches would
/// allocate their builders up front for no gain in throughput.
pub const MAX_BATCH_SIZE: usize = 1 << 20;
