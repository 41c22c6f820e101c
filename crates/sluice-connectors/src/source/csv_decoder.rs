//! CSV decoding: header-by-name column mapping and typed parsing straight
//! from reused `csv::ByteRecord`s into Arrow builders.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use csv::ByteRecord;

use super::columns::{parse_text, Cell, ColumnSet, RowStage};
use super::{report_malformed, FileDecoder, ReadPlan};
use crate::error::{ConnectorError, Result};

/// Read buffer size; large enough that syscalls are negligible.
const BUFFER_BYTES: usize = 256 * 1024;

/// Decodes one CSV file.
pub(crate) struct CsvDecoder {
    path: PathBuf,
    plan: Arc<ReadPlan>,
    reader: csv::Reader<File>,
    record: ByteRecord,
    /// Field count of the header; every record must have exactly as many.
    header_len: usize,
    /// Header names, for wrong-field-count messages.
    header: Vec<String>,
    /// For each declared column, its field index in the file.
    field_of_column: Vec<usize>,
    stage: RowStage,
    rows_consumed: u64,
    skipped: u64,
    done: bool,
}

impl CsvDecoder {
    /// Open `path`, map its header onto the declared schema and skip
    /// `skip_rows` data rows (for resuming).
    pub fn open(path: &Path, plan: &Arc<ReadPlan>, skip_rows: u64) -> Result<CsvDecoder> {
        let file = File::open(path).map_err(|e| ConnectorError::io(path, e))?;
        let reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .buffer_capacity(BUFFER_BYTES)
            .from_reader(file);
        let mut decoder = CsvDecoder {
            path: path.to_path_buf(),
            plan: plan.clone(),
            reader,
            record: ByteRecord::new(),
            header_len: 0,
            header: Vec::new(),
            field_of_column: Vec::new(),
            stage: RowStage::default(),
            rows_consumed: 0,
            skipped: 0,
            done: false,
        };
        decoder.read_header()?;
        decoder.skip(skip_rows)?;
        Ok(decoder)
    }

    fn read_header(&mut self) -> Result<()> {
        if !self.read_record()? {
            if !self.plan.specs.is_empty() {
                tracing::warn!(file = %self.path.display(), "CSV file is empty (no header row)");
            }
            self.done = true;
            return Ok(());
        }
        let mut header = Vec::with_capacity(self.record.len());
        for (i, raw) in self.record.iter().enumerate() {
            let name = std::str::from_utf8(raw).map_err(|_| {
                ConnectorError::schema(
                    &self.path,
                    format!("header field {} is not valid UTF-8", i + 1),
                )
            })?;
            // Spreadsheet exports often start with a UTF-8 byte order mark.
            let name = if i == 0 {
                name.trim_start_matches('\u{feff}')
            } else {
                name
            };
            header.push(name.trim().to_string());
        }
        let mut field_of_column = Vec::with_capacity(self.plan.specs.len());
        for spec in self.plan.specs.iter() {
            let index = header.iter().position(|h| *h == spec.name).ok_or_else(|| {
                ConnectorError::schema(
                    &self.path,
                    format!(
                        "column '{}' is declared but missing from the CSV header (found: {})",
                        spec.name,
                        header.join(", ")
                    ),
                )
            })?;
            field_of_column.push(index);
        }
        self.header_len = header.len();
        self.header = header;
        self.field_of_column = field_of_column;
        Ok(())
    }

    /// Read the next record into `self.record`; `false` at end of file.
    fn read_record(&mut self) -> Result<bool> {
        self.reader
            .read_byte_record(&mut self.record)
            .map_err(|e| map_csv_error(&self.path, e))
    }

    fn skip(&mut self, rows: u64) -> Result<()> {
        while !self.done && self.rows_consumed < rows {
            if self.read_record()? {
                self.rows_consumed += 1;
            } else {
                tracing::warn!(
                    file = %self.path.display(),
                    wanted = rows,
                    found = self.rows_consumed,
                    "resume position is past the end of the file"
                );
                self.done = true;
            }
        }
        Ok(())
    }

    /// Physical line on which `self.record` starts.
    ///
    /// The csv reader's record position is taken *before* any blank lines
    /// (and, for CRLF files, before the previous record's `\n`) that precede
    /// the record, so it can be short by a few lines. Only malformed rows need
    /// an exact line, so instead of tracking lines on the hot path we re-read
    /// the few bytes after the recorded offset and count the newlines that
    /// were skipped.
    fn record_start_line(&self) -> u64 {
        let Some(pos) = self.record.position() else {
            return 0;
        };
        match count_leading_newlines(&self.path, pos.byte()) {
            Ok(skipped) => pos.line() + skipped,
            Err(e) => {
                tracing::debug!(file = %self.path.display(), error = %e, "could not refine line number");
                pos.line()
            }
        }
    }

    /// Parse `self.record` into `self.stage`; on failure returns the column
    /// description and message.
    fn parse_record(&mut self) -> Result<(), (String, String)> {
        let found = self.record.len();
        if found != self.header_len {
            let column = if found < self.header_len {
                self.header[found].clone()
            } else {
                format!("field {}", self.header_len + 1)
            };
            let message = format!("expected {} fields, found {found}", self.header_len);
            return Err((column, message));
        }
        let specs = &self.plan.specs;
        self.stage.reset(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let raw = self.record.get(self.field_of_column[i]).unwrap_or_default();
            let cell = if raw.is_empty() {
                if !spec.nullable {
                    return Err((
                        spec.name.clone(),
                        "null value in non-nullable column".into(),
                    ));
                }
                Cell::Null
            } else {
                parse_text(raw, spec, &mut self.stage.text)
                    .map_err(|message| (spec.name.clone(), message))?
            };
            self.stage.cells[i] = cell;
        }
        Ok(())
    }
}

impl FileDecoder for CsvDecoder {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        if self.done {
            return Ok(None);
        }
        let mut columns = ColumnSet::new(&self.plan.schema, &self.plan.specs, max_rows);
        while columns.len() < max_rows {
            if !self.read_record()? {
                self.done = true;
                break;
            }
            self.rows_consumed += 1;
            match self.parse_record() {
                Ok(()) => columns.append_row(&self.stage),
                Err((column, message)) => {
                    let line = self.record_start_line();
                    report_malformed(
                        &self.plan,
                        &self.path,
                        line,
                        &column,
                        message,
                        &mut self.skipped,
                    )?;
                }
            }
        }
        if columns.len() == 0 {
            return Ok(None);
        }
        let path = &self.path;
        columns
            .finish(|| format!("building batch from {}", path.display()))
            .map(Some)
    }

    fn rows_consumed(&self) -> u64 {
        self.rows_consumed
    }

    fn skipped_rows(&self) -> u64 {
        self.skipped
    }
}

/// Count the `\n`s in the run of `\r`/`\n` bytes starting at `offset`.
fn count_leading_newlines(path: &Path, offset: u64) -> std::io::Result<u64> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = [0u8; 4096];
    let mut newlines = 0;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(newlines);
        }
        for &b in &buf[..n] {
            match b {
                b'\n' => newlines += 1,
                b'\r' => {}
                _ => return Ok(newlines),
            }
        }
    }
}

fn map_csv_error(path: &Path, err: csv::Error) -> ConnectorError {
    let line = err.position().map_or(0, |p| p.line());
    match err.into_kind() {
        csv::ErrorKind::Io(e) => ConnectorError::io(path, e),
        other => ConnectorError::Malformed {
            file: path.to_path_buf(),
            line,
            column: String::new(),
            message: format!("{other:?}"),
        },
    }
}
