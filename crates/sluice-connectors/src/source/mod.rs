//! Reading CSV, JSON-lines and Parquet files as a stream of Arrow batches.
//!
//! [`FileSourceReader`] owns the file list and the batching/position logic;
//! the per-format decoders (one per open file) only know how to turn one
//! file into batches of the declared schema.

mod columns;
mod csv_decoder;
mod csv_records;
mod files;
mod json_decoder;
mod parquet_decoder;
mod parse;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{ConnectorError, Result};
use crate::format::FileFormat;

use columns::ColumnSpec;

/// What to do with a row that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Stop with [`ConnectorError::Malformed`]: the safe default, since
    /// silently dropping data is rarely what a user wants.
    #[default]
    Fail,
    /// Drop the row, count it in [`FileSourceReader::skipped_rows`], log a
    /// warning and continue; for dirty real-world feeds.
    Skip,
}

impl FromStr for OnError {
    type Err = ConnectorError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fail" => Ok(OnError::Fail),
            "skip" => Ok(OnError::Skip),
            _ => Err(ConnectorError::invalid_option(
                "on_error",
                format!("unknown value '{s}' (accepted: fail, skip)"),
            )),
        }
    }
}

/// Everything needed to read a file source.
#[derive(Debug, Clone)]
pub struct FileSourceConfig {
    /// One file, or a glob pattern; matched files are read in sorted order.
    /// Wildcards never match hidden (dot) files.
    pub path: String,
    /// Directory a relative `path` is resolved against (e.g. the directory
    /// of the SQL script that declared the source).
    pub base_dir: Option<PathBuf>,
    /// Encoding of the files.
    pub format: FileFormat,
    /// Declared schema; every output batch has exactly this schema.
    pub schema: SchemaRef,
    /// Maximum rows per output batch.
    pub batch_size: usize,
    /// Handling of malformed rows.
    pub on_error: OnError,
    /// Declared columns that no query reads: the CSV decoder leaves them
    /// unparsed and NULL (NOT NULL columns are parsed regardless, since a
    /// NULL there makes the row malformed). Values in them are therefore not
    /// checked. Set only for pipelines that cannot gain readers later.
    pub unread_columns: Vec<String>,
}

/// Where a reader stands, for checkpoints: the next row to read is data row
/// `rows_consumed` (0-based) of `file`, which is `file_index` in the sorted
/// file list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourcePosition {
    /// Index into the sorted list of matched files.
    pub file_index: usize,
    /// Path of that file, used to re-find it if the list changed.
    pub file: PathBuf,
    /// Data rows of `file` already consumed, including skipped malformed
    /// rows (CSV header and blank JSON lines are not data rows).
    pub rows_consumed: u64,
}

/// Settings shared by all per-file decoders of one reader.
pub(crate) struct ReadPlan {
    pub schema: SchemaRef,
    /// Declared columns for the text formats (empty for Parquet, which
    /// supports any type through casting).
    pub specs: Arc<[ColumnSpec]>,
    pub on_error: OnError,
    pub batch_size: usize,
    /// Per declared column, whether it is parsed (see
    /// [`FileSourceConfig::unread_columns`]).
    pub read: Vec<bool>,
}

/// A decoder for one open file.
pub(crate) trait FileDecoder: Send {
    /// Up to `max_rows` rows (never an empty batch), or `None` at end of file.
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>>;
    /// Data rows consumed so far, counting rows skipped on open and
    /// malformed rows dropped.
    fn rows_consumed(&self) -> u64;
    /// Malformed rows dropped so far.
    fn skipped_rows(&self) -> u64;
}

fn open_decoder(
    format: FileFormat,
    path: &std::path::Path,
    plan: &Arc<ReadPlan>,
    skip_rows: u64,
) -> Result<Box<dyn FileDecoder>> {
    tracing::debug!(file = %path.display(), %format, skip_rows, "opening source file");
    Ok(match format {
        FileFormat::Csv => Box::new(csv_decoder::CsvDecoder::open(path, plan, skip_rows)?),
        FileFormat::JsonLines => Box::new(json_decoder::JsonDecoder::open(path, plan, skip_rows)?),
        FileFormat::Parquet => Box::new(parquet_decoder::ParquetDecoder::open(
            path, plan, skip_rows,
        )?),
    })
}

/// Reads the files one after another, yielding batches of the declared schema.
///
/// Batches may span file boundaries (rows of consecutive files are
/// concatenated up to `batch_size`), so many small files still produce
/// full-sized batches. After an error the reader should be dropped; resume
/// from the last [`position`](Self::position) with [`open_at`](Self::open_at).
pub struct FileSourceReader {
    format: FileFormat,
    plan: Arc<ReadPlan>,
    files: Vec<PathBuf>,
    /// Index of the file `current` reads (or the next one to open).
    file_index: usize,
    current: Option<Box<dyn FileDecoder>>,
    /// Malformed rows dropped in files already closed.
    skipped_in_closed: u64,
    position: SourcePosition,
}

impl std::fmt::Debug for FileSourceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSourceReader")
            .field("format", &self.format)
            .field("files", &self.files)
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl FileSourceReader {
    /// Resolve the files and open the first one (so header/schema problems
    /// surface immediately rather than on the first `next_batch`).
    pub fn open(config: FileSourceConfig) -> Result<Self> {
        let (plan, files) = Self::prepare(&config)?;
        let first = SourcePosition {
            file_index: 0,
            file: files[0].clone(),
            rows_consumed: 0,
        };
        Self::start(config.format, plan, files, first)
    }

    /// Reopen positioned at `pos` (skip files before it and
    /// `pos.rows_consumed` data rows of that file), so a replay continues
    /// exactly after the last returned batch.
    ///
    /// The file is looked up by path first, so files added to a glob
    /// directory since the checkpoint do not shift the position; a file that
    /// no longer matches is an [`ConnectorError::InvalidPosition`].
    pub fn open_at(config: FileSourceConfig, pos: &SourcePosition) -> Result<Self> {
        let (plan, files) = Self::prepare(&config)?;
        let index = if files.get(pos.file_index) == Some(&pos.file) {
            pos.file_index
        } else {
            files.iter().position(|f| f == &pos.file).ok_or_else(|| {
                ConnectorError::InvalidPosition {
                    file: pos.file.clone(),
                    message: format!("the file is not matched by '{}' any more", config.path),
                }
            })?
        };
        let start = SourcePosition {
            file_index: index,
            file: files[index].clone(),
            rows_consumed: pos.rows_consumed,
        };
        Self::start(config.format, plan, files, start)
    }

    fn prepare(config: &FileSourceConfig) -> Result<(Arc<ReadPlan>, Vec<PathBuf>)> {
        if config.batch_size == 0 {
            return Err(ConnectorError::invalid_option(
                "batch_size",
                "must be at least 1",
            ));
        }
        let specs = match config.format {
            FileFormat::Csv | FileFormat::JsonLines => {
                columns::specs_for(&config.schema, config.format.name())?
            }
            FileFormat::Parquet => Arc::from(Vec::new()),
        };
        let files = files::resolve_files(&config.path, config.base_dir.as_deref())?;
        let read = config
            .schema
            .fields()
            .iter()
            .map(|f| !f.is_nullable() || !config.unread_columns.contains(f.name()))
            .collect();
        let plan = Arc::new(ReadPlan {
            schema: config.schema.clone(),
            specs,
            on_error: config.on_error,
            batch_size: config.batch_size,
            read,
        });
        Ok((plan, files))
    }

    fn start(
        format: FileFormat,
        plan: Arc<ReadPlan>,
        files: Vec<PathBuf>,
        position: SourcePosition,
    ) -> Result<Self> {
        let current = open_decoder(format, &position.file, &plan, position.rows_consumed)?;
        Ok(FileSourceReader {
            format,
            plan,
            files,
            file_index: position.file_index,
            current: Some(current),
            skipped_in_closed: 0,
            position,
        })
    }

    /// The files this reader reads, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The declared schema of every batch.
    pub fn schema(&self) -> SchemaRef {
        self.plan.schema.clone()
    }

    /// Next batch (at most batch_size rows, never empty), or None at end of
    /// all files.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let batch_size = self.plan.batch_size;
        let mut pieces: Vec<RecordBatch> = Vec::new();
        let mut rows = 0;
        while rows < batch_size {
            if self.current.is_none() {
                let Some(path) = self.files.get(self.file_index) else {
                    break;
                };
                self.current = Some(open_decoder(self.format, path, &self.plan, 0)?);
            }
            let Some(decoder) = self.current.as_mut() else {
                break;
            };
            match decoder.next_batch(batch_size - rows)? {
                Some(batch) => {
                    rows += batch.num_rows();
                    self.position = SourcePosition {
                        file_index: self.file_index,
                        file: self.files[self.file_index].clone(),
                        rows_consumed: decoder.rows_consumed(),
                    };
                    pieces.push(batch);
                }
                None => {
                    self.skipped_in_closed += decoder.skipped_rows();
                    self.current = None;
                    self.file_index += 1;
                }
            }
        }
        match pieces.len() {
            0 => Ok(None),
            1 => Ok(pieces.pop()),
            _ => concat_batches(&self.plan.schema, &pieces)
                .map(Some)
                .map_err(|e| ConnectorError::arrow("concatenating batches", e)),
        }
    }

    /// Rows skipped because they were malformed (on_error = skip).
    pub fn skipped_rows(&self) -> u64 {
        self.skipped_in_closed + self.current.as_ref().map_or(0, |d| d.skipped_rows())
    }

    /// Position just after the last returned batch (or the starting position
    /// if none was returned yet).
    pub fn position(&self) -> SourcePosition {
        self.position.clone()
    }
}

/// Shared handling of a malformed row: fail, or warn and count.
pub(crate) fn report_malformed(
    plan: &ReadPlan,
    file: &std::path::Path,
    line: u64,
    column: &str,
    message: String,
    skipped: &mut u64,
) -> Result<()> {
    match plan.on_error {
        OnError::Fail => Err(ConnectorError::Malformed {
            file: file.to_path_buf(),
            line,
            column: column.to_string(),
            message,
        }),
        OnError::Skip => {
            *skipped += 1;
            tracing::warn!(
                file = %file.display(),
                line,
                column,
                error = %message,
                "skipping malformed row"
            );
            Ok(())
        }
    }
}
