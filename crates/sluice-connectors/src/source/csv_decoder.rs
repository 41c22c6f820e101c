//! CSV decoding: header-by-name column mapping and typed parsing straight
//! from the reader's buffer into Arrow builders.
//!
//! Records are split by `simd-csv`'s zero-copy reader, which finds field
//! boundaries with SIMD string search instead of a byte-at-a-time state
//! machine (the tokenizer was a third of the cost of reading a CSV file
//! before), and parsed a batch at a time by [`RawRecords`].

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use simd_csv::{ZeroCopyByteRecord, ZeroCopyReader, ZeroCopyReaderBuilder};

use super::csv_records::{BadRecord, RawRecords};
use super::{report_malformed, FileDecoder, ReadPlan, Resume};
use crate::error::{ConnectorError, Result};

/// Read buffer size; large enough that syscalls are negligible.
const BUFFER_BYTES: usize = 256 * 1024;

/// Decodes one CSV file.
pub(crate) struct CsvDecoder {
    path: PathBuf,
    plan: Arc<ReadPlan>,
    reader: ZeroCopyReader<Capped>,
    /// How far `reader` may read ahead: see [`Capped`].
    limit: Arc<AtomicU64>,
    /// Header names; every record must have as many fields.
    header: Vec<String>,
    /// For each declared column, its field index in the file.
    field_of_column: Vec<usize>,
    /// The records of the batch being read.
    records: RawRecords,
    lines: LineLocator,
    rows_consumed: u64,
    /// Byte offset just after the last consumed record.
    end_of_consumed: u64,
    skipped: u64,
    done: bool,
    /// The file has no header row; warned about when first read (not on
    /// open: the engine opens a source several times before it reads it,
    /// and the warning is for the read).
    empty: bool,
}

impl CsvDecoder {
    /// Open `path`, map its header onto the declared schema and skip
    /// `resume.rows` data rows (for resuming), checking that they end where
    /// the checkpoint saw them end.
    pub fn open(path: &Path, plan: &Arc<ReadPlan>, resume: Resume) -> Result<CsvDecoder> {
        let file = File::open(path).map_err(|e| ConnectorError::io(path, e))?;
        let limit = Arc::new(AtomicU64::new(0));
        let capped = Capped {
            file,
            delivered: 0,
            limit: Arc::clone(&limit),
        };
        let reader = ZeroCopyReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .buffer_capacity(BUFFER_BYTES)
            .from_reader(capped);
        let mut decoder = CsvDecoder {
            path: path.to_path_buf(),
            plan: plan.clone(),
            reader,
            limit,
            header: Vec::new(),
            field_of_column: Vec::new(),
            records: RawRecords::new(Arc::clone(plan)),
            lines: LineLocator::default(),
            rows_consumed: 0,
            end_of_consumed: 0,
            skipped: 0,
            done: false,
            empty: false,
        };
        decoder.read_header()?;
        decoder.skip(resume)?;
        Ok(decoder)
    }

    /// The next record (see [`read_capped`]).
    fn read_record(&mut self) -> Result<Option<ZeroCopyByteRecord<'_>>> {
        read_capped(
            &mut self.reader,
            &self.limit,
            &mut self.lines,
            &self.path,
            self.plan.max_record_bytes,
        )
    }

    fn read_header(&mut self) -> Result<()> {
        let next = read_capped(
            &mut self.reader,
            &self.limit,
            &mut self.lines,
            &self.path,
            self.plan.max_record_bytes,
        )?;
        let Some(record) = next else {
            self.empty = !self.plan.specs.is_empty();
            self.done = true;
            return Ok(());
        };
        let path = &self.path;
        let mut header = Vec::with_capacity(record.len());
        for (i, raw) in record.unescaped_iter().enumerate() {
            let name = std::str::from_utf8(&raw).map_err(|_| {
                ConnectorError::schema(path, format!("header field {} is not valid UTF-8", i + 1))
            })?;
            // The reader drops a byte order mark at the very start of the
            // file; one behind quotes or after a blank line is trimmed here.
            header.push(name.trim_start_matches('\u{feff}').trim().to_string());
        }
        let mut field_of_column = Vec::with_capacity(self.plan.specs.len());
        for spec in self.plan.specs.iter() {
            let index = header.iter().position(|h| *h == spec.name).ok_or_else(|| {
                ConnectorError::schema(
                    path,
                    format!(
                        "column '{}' is declared but missing from the CSV header (found: {})",
                        spec.name,
                        crate::quote::bounded(&header.join(", "))
                    ),
                )
            })?;
            field_of_column.push(index);
        }
        self.header = header;
        self.field_of_column = field_of_column;
        self.end_of_consumed = self.reader.position();
        Ok(())
    }

    fn skip(&mut self, resume: Resume) -> Result<()> {
        while !self.done && self.rows_consumed < resume.rows {
            if self.read_record()?.is_some() {
                self.rows_consumed += 1;
                self.end_of_consumed = self.reader.position();
            } else {
                self.done = true;
            }
        }
        resume.verify(&self.path, self.rows_consumed, self.end_of_consumed)
    }
}

impl FileDecoder for CsvDecoder {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        if std::mem::take(&mut self.empty) {
            tracing::warn!(file = %self.path.display(), "CSV file is empty (no header row)");
        }
        loop {
            if self.done {
                return Ok(None);
            }
            self.records.clear();
            // A record with the wrong field count ends the batch: the
            // records before it are reported first, in file order.
            let mut wrong_length = None;
            while self.records.len() < max_rows {
                let offset = self.reader.position();
                let max = self.plan.max_record_bytes;
                let next = read_capped(
                    &mut self.reader,
                    &self.limit,
                    &mut self.lines,
                    &self.path,
                    max,
                )?;
                let Some(record) = next else {
                    self.done = true;
                    break;
                };
                self.rows_consumed += 1;
                let found = record.len();
                if found == self.header.len() {
                    self.records.push(&record, &self.field_of_column, offset);
                }
                self.end_of_consumed = self.reader.position();
                if found != self.header.len() {
                    wrong_length = Some(self.wrong_length(found, offset));
                    break;
                }
            }
            let (batch, bad) = self.records.parse()?;
            for record in bad.into_iter().chain(wrong_length) {
                let line = self.lines.line_of(&self.path, record.offset);
                report_malformed(
                    &self.plan,
                    &self.path,
                    line,
                    &record.column,
                    record.message,
                    &mut self.skipped,
                )?;
            }
            if batch.is_some() {
                return Ok(batch);
            }
        }
    }

    fn rows_consumed(&self) -> u64 {
        self.rows_consumed
    }

    fn skipped_rows(&self) -> u64 {
        self.skipped
    }

    fn byte_offset(&self) -> Option<u64> {
        Some(self.end_of_consumed)
    }
}

impl CsvDecoder {
    /// The error for a record of `found` fields, read at `offset`.
    fn wrong_length(&self, found: usize, offset: u64) -> BadRecord {
        let expected = self.header.len();
        let column = match self.header.get(found) {
            Some(name) => name.clone(),
            None => format!("field {}", expected + 1),
        };
        BadRecord {
            offset,
            column,
            message: format!("expected {expected} fields, found {found}"),
        }
    }
}

/// Finds the physical line a record starts on, for error messages only.
///
/// The hot path tracks byte offsets, not lines. A record read from offset
/// `start` begins after any blank lines at that offset; its line is one
/// plus the newlines before it. Offsets of malformed records only grow, so
/// counting resumes where the previous lookup stopped and a file with many
/// skipped rows is still scanned once.
#[derive(Debug, Default)]
struct LineLocator {
    /// Byte offset counted up to, and the newlines before it.
    offset: u64,
    newlines: u64,
}

impl LineLocator {
    fn line_of(&mut self, path: &Path, start: u64) -> u64 {
        match self.count_to(path, start) {
            Ok(line) => line,
            Err(e) => {
                tracing::debug!(file = %path.display(), error = %e, "could not count lines");
                0
            }
        }
    }

    fn count_to(&mut self, path: &Path, start: u64) -> std::io::Result<u64> {
        if start < self.offset {
            *self = LineLocator::default();
        }
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut before = BufReader::with_capacity(64 * 1024, file).take(start - self.offset);
        loop {
            let chunk = before.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            self.newlines += memchr::memchr_iter(b'\n', chunk).count() as u64;
            let n = chunk.len();
            before.consume(n);
        }
        self.offset = start;
        // The blank lines (or the rest of a CRLF) the reader skips at `start`.
        let mut blank = 0;
        for byte in before.into_inner().bytes() {
            match byte? {
                b'\n' => blank += 1,
                b'\r' => {}
                _ => break,
            }
        }
        Ok(self.newlines + blank + 1)
    }
}

/// The next record, or `None` at end of file; a record longer than `max`
/// bytes is [`ConnectorError::RecordTooLong`], found without reading much
/// more than `max` bytes of it.
fn read_capped<'r>(
    reader: &'r mut ZeroCopyReader<Capped>,
    limit: &AtomicU64,
    lines: &mut LineLocator,
    path: &Path,
    max: usize,
) -> Result<Option<ZeroCopyByteRecord<'r>>> {
    let start = reader.position();
    // Room for a whole record of the maximum size plus one read-ahead
    // buffer: a record within the limit never reaches the cap, and one that
    // does is over the limit, found having read at most this much.
    let slack = (max + BUFFER_BYTES) as u64;
    limit.store(start.saturating_add(slack), Ordering::Relaxed);
    let too_long = |lines: &mut LineLocator| ConnectorError::RecordTooLong {
        file: path.to_path_buf(),
        line: lines.line_of(path, start),
        limit: max,
    };
    match reader.read_byte_record() {
        Ok(Some(record)) if content_len(record.as_slice()) > max => Err(too_long(lines)),
        Ok(record) => Ok(record),
        Err(e) => match e.into_kind() {
            simd_csv::ErrorKind::Io(e) if e.get_ref().is_some_and(|r| r.is::<OverLimit>()) => {
                Err(too_long(lines))
            }
            other => Err(map_csv_error(path, other)),
        },
    }
}

/// Length of a record's bytes without its line end.
fn content_len(record: &[u8]) -> usize {
    let end = record
        .strip_suffix(b"\n")
        .map_or(record, |r| r.strip_suffix(b"\r").unwrap_or(r));
    end.len()
}

/// The file under a CSV reader, which refuses to read past a limit the
/// decoder moves before each record. The reader's buffer grows to hold a
/// whole record, so without this a file with no line ends (`/dev/zero`)
/// would be read into memory until the allocator gives up.
struct Capped {
    file: File,
    /// Bytes handed to the reader so far.
    delivered: u64,
    /// Offset past which nothing is read (set by the decoder).
    limit: Arc<AtomicU64>,
}

/// The error [`Capped`] returns at its limit.
#[derive(Debug)]
struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("record exceeds max_record_bytes")
    }
}

impl std::error::Error for OverLimit {}

impl Read for Capped {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self
            .limit
            .load(Ordering::Relaxed)
            .saturating_sub(self.delivered);
        if room == 0 && !buf.is_empty() {
            return Err(std::io::Error::other(OverLimit));
        }
        let len = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..len])?;
        self.delivered += n as u64;
        Ok(n)
    }
}

fn map_csv_error(path: &Path, kind: simd_csv::ErrorKind) -> ConnectorError {
    match kind {
        simd_csv::ErrorKind::Io(e) => ConnectorError::io(path, e),
        other => ConnectorError::Malformed {
            file: path.to_path_buf(),
            line: 0,
            column: String::new(),
            message: crate::quote::bounded(&format!("{other:?}")),
        },
    }
}
