//! Reading CSV, JSON-lines and Parquet files as a stream of Arrow batches.
//!
//! [`FileSourceReader`] owns the file list and the batching/position logic;
//! the per-format decoders (one per open file) only know how to turn one
//! file into batches of the declared schema.

mod columns;
mod csv_decoder;
mod csv_records;
mod files;
mod handover;
mod json_decoder;
mod parquet_decoder;
mod parse;
mod share;

pub use handover::{handover, HandoverStart, PreviousShare};
pub use share::FileShare;

pub use crate::limits::{DEFAULT_MAX_RECORD_BYTES, MAX_MAX_RECORD_BYTES, MIN_MAX_RECORD_BYTES};
use std::collections::BTreeMap;
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
                format!(
                    "unknown value '{}' (accepted: fail, skip)",
                    crate::quote::bounded(s)
                ),
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
    /// Longest CSV record or JSON line accepted, in bytes (option
    /// `max_record_bytes`, see [`parse_max_record_bytes`]). A longer one is
    /// [`ConnectorError::RecordTooLong`] whatever `on_error` says, and is
    /// never read whole into memory: a file with no line ends (such as
    /// `/dev/zero`) fails after about this many bytes.
    pub max_record_bytes: usize,
    /// This node's share of the files when the pipeline's sources are
    /// split across a cluster's nodes (`None`: every file). A node whose
    /// share holds none of the files reads nothing and finishes at once.
    pub share: Option<FileShare>,
}

/// Parse the `max_record_bytes` option: a number of bytes, optionally with
/// a binary unit (`KiB`, `MiB`, `GiB`, case-insensitive), from
/// [`MIN_MAX_RECORD_BYTES`] to [`MAX_MAX_RECORD_BYTES`].
pub fn parse_max_record_bytes(value: &str) -> Result<usize> {
    let text = value.trim();
    let lower = text.to_ascii_lowercase();
    let (digits, unit) = [("gib", 1usize << 30), ("mib", 1 << 20), ("kib", 1 << 10)]
        .iter()
        .find_map(|(suffix, unit)| lower.strip_suffix(suffix).map(|d| (d.trim(), *unit)))
        .unwrap_or((lower.as_str(), 1));
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|n| (MIN_MAX_RECORD_BYTES..=MAX_MAX_RECORD_BYTES).contains(n))
        .ok_or_else(|| max_record_bytes_error(&crate::quote::bounded(text)))
}

fn max_record_bytes_error(value: &str) -> ConnectorError {
    ConnectorError::invalid_option(
        "max_record_bytes",
        format!(
            "'{value}' is not a size from {MIN_MAX_RECORD_BYTES} bytes (1 KiB) to \
             {MAX_MAX_RECORD_BYTES} bytes (1 GiB); write bytes, or a number with KiB, MiB or GiB"
        ),
    )
}

/// Where a reader stands, for checkpoints: the next row to read is data row
/// `rows_consumed` (0-based) of `file`, which is `file_index` in the sorted
/// file list. For CSV and JSON lines, `byte_offset` is where those rows end
/// in the file, so a resume can tell that the file shrank or was replaced
/// since (rows alone cannot: a replaced file may have as many rows).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourcePosition {
    /// Index into the sorted list of matched files.
    pub file_index: usize,
    /// Path of that file, used to re-find it if the list changed.
    pub file: PathBuf,
    /// Data rows of `file` already consumed, including skipped malformed
    /// rows (CSV header and blank JSON lines are not data rows).
    pub rows_consumed: u64,
    /// Byte offset in `file` just after the last consumed row; `None` for
    /// Parquet and for positions from before any row was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_offset: Option<u64>,
    /// The identity of the node's share the position is in
    /// ([`FileShare::identity`]; `None`: every file). `file_index` counts
    /// the files of that share only, so a position resumes only under the
    /// same share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// The partition key of `file` when the reader reads a share: a
    /// position handed to another node ([`handover`]) names its file by
    /// key, since that node's path to the file may differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Files after `file` in the share's order that other shares had read,
    /// whole or in part, before a [`handover`] gave them to this one, by
    /// partition key. A file after `file` that is not listed is unread.
    /// Empty unless the share took files over.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ahead: BTreeMap<String, FileProgress>,
    /// Every file of the share was read (a share that a [`handover`] gave
    /// only files read already): a reader opened here reads nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

/// How far one file of a source was read (see [`SourcePosition::ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileProgress {
    /// Every row was read.
    Done,
    /// The first `rows_consumed` data rows were read; they end at
    /// `byte_offset` where the format has offsets (see
    /// [`SourcePosition::rows_consumed`] and [`SourcePosition::byte_offset`]).
    Partial {
        /// Data rows read.
        rows_consumed: u64,
        /// Where they end.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        byte_offset: Option<u64>,
    },
}

/// Settings shared by all per-file decoders of one reader.
pub(crate) struct ReadPlan {
    pub schema: SchemaRef,
    /// Declared columns for the text formats (empty for Parquet, which
    /// supports any type through casting).
    pub specs: Arc<[ColumnSpec]>,
    pub on_error: OnError,
    pub batch_size: usize,
    /// See [`FileSourceConfig::max_record_bytes`].
    pub max_record_bytes: usize,
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
    /// Byte offset just after the last consumed row, where the format has
    /// one (see [`SourcePosition::byte_offset`]).
    fn byte_offset(&self) -> Option<u64>;
}

/// Where a decoder opens: after `rows` data rows, which a checkpoint saw
/// end at `byte_offset`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Resume {
    /// Data rows to skip (see [`SourcePosition::rows_consumed`]).
    pub rows: u64,
    /// Where the checkpoint saw those rows end, if the format has offsets
    /// (see [`SourcePosition::byte_offset`]).
    pub byte_offset: Option<u64>,
}

impl Resume {
    /// Check where the skipped rows ended against the checkpoint:
    /// `found` rows were there, ending at byte `at`. A file that shrank or
    /// was replaced under a checkpoint must not be read on from the old
    /// position: the rows after it would be wrong, or missing, silently.
    pub fn verify(&self, path: &std::path::Path, found: u64, at: u64) -> Result<()> {
        let fits = found == self.rows && self.byte_offset.is_none_or(|b| b == at);
        if fits {
            return Ok(());
        }
        let size = std::fs::metadata(path).map_or_else(
            |e| format!("cannot be measured: {e}"),
            |m| format!("is {} bytes", m.len()),
        );
        let saved = match self.byte_offset {
            Some(b) => format!("after row {} at byte {b}", self.rows),
            None => format!("after row {}", self.rows),
        };
        let now = if found < self.rows {
            format!("the file now has {found} rows and {size}")
        } else {
            format!("row {found} now ends at byte {at} and the file {size}")
        };
        Err(ConnectorError::InvalidPosition {
            file: path.to_path_buf(),
            message: format!(
                "the checkpoint resumes {saved}, but {now}: the file shrank or was replaced \
                 since the checkpoint, so its rows cannot be resumed; restore the file, or \
                 start again without the checkpoint (an empty state directory)"
            ),
        })
    }
}

fn open_decoder(
    format: FileFormat,
    path: &std::path::Path,
    plan: &Arc<ReadPlan>,
    resume: Resume,
) -> Result<Box<dyn FileDecoder>> {
    tracing::debug!(file = %path.display(), %format, ?resume, "opening source file");
    Ok(match format {
        FileFormat::Csv => Box::new(csv_decoder::CsvDecoder::open(path, plan, resume)?),
        FileFormat::JsonLines => Box::new(json_decoder::JsonDecoder::open(path, plan, resume)?),
        FileFormat::Parquet => Box::new(parquet_decoder::ParquetDecoder::open(
            path,
            plan,
            resume.rows,
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
    /// Partition keys of `files` when the reader reads a share, else empty.
    keys: Vec<String>,
    /// What other shares read of files after the starting position, by
    /// index in `files` (see [`SourcePosition::ahead`]).
    ahead: BTreeMap<usize, FileProgress>,
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
            // Empty when this node's share holds no file.
            file: files.files.first().cloned().unwrap_or_default(),
            rows_consumed: 0,
            byte_offset: None,
            share: share_identity(&config),
            key: files.keys.first().cloned(),
            ahead: BTreeMap::new(),
            done: false,
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
        Self::check_share(&config, pos)?;
        if pos.done {
            let end = SourcePosition {
                file_index: files.files.len(),
                ..pos.clone()
            };
            return Self::start(config.format, plan, files, end);
        }
        if pos.file.as_os_str().is_empty() {
            // Checkpointed while this node's share held no file: nothing
            // was read, so files that matched since are read from the start.
            return Self::open(config);
        }
        let index = if files.files.get(pos.file_index) == Some(&pos.file) {
            pos.file_index
        } else {
            files
                .files
                .iter()
                .position(|f| f == &pos.file)
                .ok_or_else(|| ConnectorError::InvalidPosition {
                    file: pos.file.clone(),
                    message: format!(
                        "the file is not matched by '{}' any more",
                        crate::quote::bounded(&config.path)
                    ),
                })?
        };
        let start = SourcePosition {
            file_index: index,
            file: files.files[index].clone(),
            rows_consumed: pos.rows_consumed,
            byte_offset: pos.byte_offset,
            share: share_identity(&config),
            key: files.keys.get(index).cloned(),
            ahead: pos.ahead.clone(),
            done: false,
        };
        Self::start(config.format, plan, files, start)
    }

    /// Refuse a position checkpointed under another share than
    /// `config`'s (see [`SourcePosition::share`]).
    pub(crate) fn check_share(config: &FileSourceConfig, pos: &SourcePosition) -> Result<()> {
        let share = share_identity(config);
        if pos.share == share {
            return Ok(());
        }
        let name = |s: &Option<String>| match s {
            Some(s) => format!("share '{s}'"),
            None => "every file".to_string(),
        };
        Err(ConnectorError::InvalidPosition {
            file: pos.file.clone(),
            message: format!(
                "the position was checkpointed reading {} of '{}' and is resumed reading {}; a position in one share's files means nothing in another's (this node's share changed: its vnodes, or split versus whole)",
                name(&pos.share),
                crate::quote::bounded(&config.path),
                name(&share)
            ),
        })
    }

    fn prepare(config: &FileSourceConfig) -> Result<(Arc<ReadPlan>, files::Resolved)> {
        if !(1..=crate::MAX_BATCH_SIZE).contains(&config.batch_size) {
            return Err(ConnectorError::invalid_option(
                "batch_size",
                format!(
                    "{} is not from 1 to {}",
                    config.batch_size,
                    crate::MAX_BATCH_SIZE
                ),
            ));
        }
        if !(MIN_MAX_RECORD_BYTES..=MAX_MAX_RECORD_BYTES).contains(&config.max_record_bytes) {
            return Err(max_record_bytes_error(&config.max_record_bytes.to_string()));
        }
        let specs = match config.format {
            FileFormat::Csv | FileFormat::JsonLines => {
                columns::specs_for(&config.schema, config.format.name())?
            }
            FileFormat::Parquet => Arc::from(Vec::new()),
        };
        let files = files::resolve_files(
            &config.path,
            config.base_dir.as_deref(),
            config.share.as_ref(),
        )?;
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
            max_record_bytes: config.max_record_bytes,
            read,
        });
        Ok((plan, files))
    }

    fn start(
        format: FileFormat,
        plan: Arc<ReadPlan>,
        files: files::Resolved,
        position: SourcePosition,
    ) -> Result<Self> {
        let ahead = Self::ahead_indices(&files, &position)?;
        let resume = Resume {
            rows: position.rows_consumed,
            byte_offset: position.byte_offset,
        };
        let current = if files.files.is_empty() || position.done {
            None
        } else {
            Some(open_decoder(format, &position.file, &plan, resume)?)
        };
        Ok(FileSourceReader {
            format,
            plan,
            files: files.files,
            keys: files.keys,
            ahead,
            file_index: position.file_index,
            current,
            skipped_in_closed: 0,
            position,
        })
    }

    /// `position.ahead` by index in `files`: each key that names a file of
    /// the share must name one after the position's (a file that is gone
    /// is left out).
    fn ahead_indices(
        files: &files::Resolved,
        position: &SourcePosition,
    ) -> Result<BTreeMap<usize, FileProgress>> {
        position
            .ahead
            .iter()
            .filter_map(|(key, progress)| {
                // A file removed since has nothing left to read.
                let i = files.keys.iter().position(|k| k == key)?;
                Some(if i > position.file_index {
                    Ok((i, *progress))
                } else {
                    Err(ConnectorError::InvalidPosition {
                        file: position.file.clone(),
                        message: format!(
                            "the position says how far file '{}' was read, which comes before the \
                             position's own file",
                            crate::quote::bounded(key)
                        ),
                    })
                })
            })
            .collect()
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
                // A file another share read before it was handed over
                // continues where that share stopped.
                let resume = match self.ahead.get(&self.file_index) {
                    Some(FileProgress::Done) => {
                        self.file_index += 1;
                        continue;
                    }
                    Some(FileProgress::Partial {
                        rows_consumed,
                        byte_offset,
                    }) => Resume {
                        rows: *rows_consumed,
                        byte_offset: *byte_offset,
                    },
                    None => Resume::default(),
                };
                self.current = Some(open_decoder(self.format, path, &self.plan, resume)?);
            }
            let Some(decoder) = self.current.as_mut() else {
                break;
            };
            match decoder.next_batch(batch_size - rows)? {
                Some(batch) => {
                    rows += batch.num_rows();
                    let i = self.file_index;
                    // The handed-over files still ahead of this one (the
                    // same as the last position's while in the same file).
                    let ahead = if self.position.file_index == i {
                        std::mem::take(&mut self.position.ahead)
                    } else {
                        self.ahead
                            .range(i + 1..)
                            .filter_map(|(j, p)| self.keys.get(*j).map(|k| (k.clone(), *p)))
                            .collect()
                    };
                    self.position = SourcePosition {
                        file_index: i,
                        file: self.files[i].clone(),
                        rows_consumed: decoder.rows_consumed(),
                        byte_offset: decoder.byte_offset(),
                        share: self.position.share.take(),
                        key: self.keys.get(i).cloned(),
                        ahead,
                        done: false,
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

/// The identity of `config`'s share, as positions record it.
fn share_identity(config: &FileSourceConfig) -> Option<String> {
    config.share.as_ref().map(|s| s.identity().to_string())
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
