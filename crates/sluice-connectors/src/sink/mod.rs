//! Writing Arrow batches to CSV, JSON-lines or Parquet files atomically.

mod atomic;
mod epoch;

pub use epoch::{EpochFileSink, EpochRecord};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::json::LineDelimitedWriter;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::{ConnectorError, Result};
use crate::format::FileFormat;
use atomic::TempFile;

enum Encoder {
    // arrow's CSV writer flushes after every batch and buffers internally,
    // so it writes to the file directly.
    Csv(Box<arrow::csv::Writer<File>>),
    Json(LineDelimitedWriter<BufWriter<File>>),
    // The parquet writer buffers internally as well.
    Parquet(Box<ArrowWriter<File>>),
}

/// Writes one output file atomically: data goes to a hidden temp file in the
/// same directory (`.name.tmp-<pid>-<n>`) and becomes visible under the final
/// path only on [`finish`](Self::finish) (flush + fsync file + rename + fsync
/// directory). [`abort`](Self::abort) or dropping without finish removes the
/// temp file, so a half-written file never appears under the final name.
/// Parent directories are created.
pub struct FileSinkWriter {
    // Field order matters: the encoder (and its file handle) is dropped
    // before the temp file is removed.
    encoder: Option<Encoder>,
    temp: TempFile,
    path: PathBuf,
    schema: SchemaRef,
    rows: u64,
    batches: u64,
}

impl std::fmt::Debug for FileSinkWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSinkWriter")
            .field("path", &self.path)
            .field("temp", &self.temp.path())
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl FileSinkWriter {
    /// Start writing `path` in `format`; every batch must match `schema`.
    pub fn create(path: &Path, format: FileFormat, schema: SchemaRef) -> Result<Self> {
        let (temp, file) = TempFile::create(path)?;
        let encoder = match format {
            FileFormat::Csv => Encoder::Csv(Box::new(arrow::csv::WriterBuilder::new().build(file))),
            FileFormat::JsonLines => Encoder::Json(LineDelimitedWriter::new(
                BufWriter::with_capacity(256 * 1024, file),
            )),
            FileFormat::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::ZSTD(ZstdLevel::default()))
                    .build();
                let writer =
                    ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(|e| {
                        ConnectorError::parquet(format!("creating {}", path.display()), e)
                    })?;
                Encoder::Parquet(Box::new(writer))
            }
        };
        tracing::debug!(file = %path.display(), temp = %temp.path().display(), %format, "sink file opened");
        Ok(FileSinkWriter {
            encoder: Some(encoder),
            temp,
            path: path.to_path_buf(),
            schema,
            rows: 0,
            batches: 0,
        })
    }

    /// Append a batch. Its columns must have the sink schema's types; field
    /// names are taken from the sink schema (so a CSV header always shows
    /// the declared names).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch =
            RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec()).map_err(|e| {
                ConnectorError::schema(
                    &self.path,
                    format!("batch does not match the sink schema: {e}"),
                )
            })?;
        let context = || format!("writing {}", self.path.display());
        match self.encoder.as_mut() {
            Some(Encoder::Csv(w)) => w
                .write(&batch)
                .map_err(|e| ConnectorError::arrow(context(), e)),
            Some(Encoder::Json(w)) => w
                .write(&batch)
                .map_err(|e| ConnectorError::arrow(context(), e)),
            Some(Encoder::Parquet(w)) => w
                .write(&batch)
                .map_err(|e| ConnectorError::parquet(context(), e)),
            None => Err(ConnectorError::io(
                &self.path,
                std::io::Error::other("sink writer is already closed"),
            )),
        }?;
        self.rows += batch.num_rows() as u64;
        self.batches += 1;
        Ok(())
    }

    /// Complete the file and publish it under its final name; returns the
    /// number of rows written. A sink with zero rows still yields a valid
    /// file (CSV: header only, JSON: empty, Parquet: no row groups).
    pub fn finish(mut self) -> Result<u64> {
        let context = || format!("finishing {}", self.path.display());
        let file = match self.encoder.take() {
            Some(Encoder::Csv(mut w)) => {
                if self.batches == 0 {
                    // The header is emitted with the first batch.
                    w.write(&RecordBatch::new_empty(self.schema.clone()))
                        .map_err(|e| ConnectorError::arrow(context(), e))?;
                }
                w.into_inner()
            }
            Some(Encoder::Json(mut w)) => {
                w.finish()
                    .map_err(|e| ConnectorError::arrow(context(), e))?;
                let mut buffered = w.into_inner();
                buffered
                    .flush()
                    .map_err(|e| ConnectorError::io(self.temp.path(), e))?;
                buffered
                    .into_inner()
                    .map_err(|e| ConnectorError::io(self.temp.path(), e.into_error()))?
            }
            Some(Encoder::Parquet(w)) => w
                .into_inner()
                .map_err(|e| ConnectorError::parquet(context(), e))?,
            None => {
                return Err(ConnectorError::io(
                    &self.path,
                    std::io::Error::other("sink writer is already closed"),
                ))
            }
        };
        let FileSinkWriter {
            temp, path, rows, ..
        } = self;
        temp.commit(file)?;
        tracing::debug!(file = %path.display(), rows, "sink file published");
        Ok(rows)
    }

    /// Abandon the file: the temp file is removed and nothing appears under
    /// the final name.
    pub fn abort(mut self) -> Result<()> {
        drop(self.encoder.take());
        tracing::debug!(file = %self.path.display(), "sink file aborted");
        self.temp.discard()
    }

    /// Rows written so far.
    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// The final path the file is published under.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
