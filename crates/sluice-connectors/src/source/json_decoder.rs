//! JSON-lines decoding.
//!
//! Each line is deserialized with a hand-written serde visitor that writes
//! values of declared columns straight into the row stage and skips unknown
//! fields, so no `serde_json::Value` tree is built per row. Column-level
//! errors are passed out through a side channel so the message can name the
//! column precisely instead of carrying serde's generic wording.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::columns::{int_cell, parse_text, Cell, ColumnKind, ColumnSet, ColumnSpec, RowStage};
use super::{parse, report_malformed, FileDecoder, ReadPlan, Resume};
use crate::error::{ConnectorError, Result};

const BUFFER_BYTES: usize = 256 * 1024;

/// The UTF-8 byte order mark, accepted at the start of a file only.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes one JSON-lines file.
pub(crate) struct JsonDecoder {
    path: PathBuf,
    plan: Arc<ReadPlan>,
    reader: BufReader<File>,
    line: Vec<u8>,
    /// Physical line number of the line in `line`.
    line_no: u64,
    /// Bytes of the file read so far.
    bytes_read: u64,
    /// Byte offset just after the last consumed data line.
    end_of_consumed: u64,
    names: HashMap<String, usize>,
    stage: RowStage,
    rows_consumed: u64,
    skipped: u64,
    done: bool,
}

impl JsonDecoder {
    /// Open `path` and skip `resume.rows` non-blank lines (for resuming),
    /// checking that they end where the checkpoint saw them end.
    pub fn open(path: &Path, plan: &Arc<ReadPlan>, resume: Resume) -> Result<JsonDecoder> {
        let file = File::open(path).map_err(|e| ConnectorError::io(path, e))?;
        let mut names = HashMap::with_capacity(plan.specs.len());
        for (i, spec) in plan.specs.iter().enumerate() {
            names.entry(spec.name.clone()).or_insert(i);
        }
        let mut decoder = JsonDecoder {
            path: path.to_path_buf(),
            plan: plan.clone(),
            reader: BufReader::with_capacity(BUFFER_BYTES, file),
            line: Vec::new(),
            line_no: 0,
            bytes_read: 0,
            end_of_consumed: 0,
            names,
            stage: RowStage::default(),
            rows_consumed: 0,
            skipped: 0,
            done: false,
        };
        while decoder.rows_consumed < resume.rows {
            if decoder.next_data_line()?.is_none() {
                break;
            }
            decoder.consumed_line();
        }
        resume.verify(path, decoder.rows_consumed, decoder.end_of_consumed)?;
        Ok(decoder)
    }

    /// Count the data line just read as consumed.
    fn consumed_line(&mut self) {
        self.rows_consumed += 1;
        self.end_of_consumed = self.bytes_read;
    }

    /// Read the next physical line into `self.line` (with its `\n`);
    /// returns its length, 0 at end of file. A line longer than
    /// `max_record_bytes` (not counting its line end) is an error, found
    /// without reading more than that much of it.
    fn read_line(&mut self) -> Result<usize> {
        let max = self.plan.max_record_bytes;
        self.line.clear();
        loop {
            let chunk = self
                .reader
                .fill_buf()
                .map_err(|e| ConnectorError::io(&self.path, e))?;
            if chunk.is_empty() {
                break;
            }
            let (take, ends) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            let content = self.line.len() + take - usize::from(ends);
            let content = content - usize::from(ends && chunk[..take].ends_with(b"\r\n"));
            if content > max {
                return Err(ConnectorError::RecordTooLong {
                    file: self.path.clone(),
                    line: self.line_no + 1,
                    limit: max,
                });
            }
            self.line.extend_from_slice(&chunk[..take]);
            self.reader.consume(take);
            if ends {
                break;
            }
        }
        self.bytes_read += self.line.len() as u64;
        Ok(self.line.len())
    }

    /// Advance to the next non-blank line; returns its trimmed byte range
    /// within `self.line`, or `None` at end of file.
    fn next_data_line(&mut self) -> Result<Option<(usize, usize)>> {
        loop {
            if self.done {
                return Ok(None);
            }
            if self.read_line()? == 0 {
                self.done = true;
                return Ok(None);
            }
            self.line_no += 1;
            // A byte order mark is part of the encoding, not of the first
            // line (the CSV source drops it too); anywhere else it is data.
            let bom = if self.line_no == 1 && self.line.starts_with(BOM) {
                BOM.len()
            } else {
                0
            };
            let start = self.line[bom..]
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .map_or(self.line.len(), |p| p + bom);
            let end = self
                .line
                .iter()
                .rposition(|b| !b.is_ascii_whitespace())
                .map_or(start, |p| p + 1);
            if start < end {
                return Ok(Some((start, end)));
            }
        }
    }

    fn parse_line(&mut self, start: usize, end: usize) -> Result<(), (String, String)> {
        let specs = &self.plan.specs;
        self.stage.reset(specs.len());
        let mut column_error = None;
        let bytes = &self.line[start..end];
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let visitor = RowVisitor {
            specs,
            names: &self.names,
            stage: &mut self.stage,
            error: &mut column_error,
        };
        let result = de::Deserializer::deserialize_map(&mut de, visitor).and_then(|()| de.end());
        if let Some((index, message)) = column_error {
            return Err((specs[index].name.clone(), message));
        }
        if let Err(e) = result {
            return Err((String::new(), describe_json_error(&e)));
        }
        for (spec, cell) in specs.iter().zip(&self.stage.cells) {
            if *cell == Cell::Null && !spec.nullable {
                return Err((
                    spec.name.clone(),
                    "null value in non-nullable column".into(),
                ));
            }
        }
        Ok(())
    }
}

impl FileDecoder for JsonDecoder {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let mut columns = ColumnSet::new(&self.plan.schema, &self.plan.specs, max_rows);
        while columns.len() < max_rows {
            let Some((start, end)) = self.next_data_line()? else {
                break;
            };
            self.consumed_line();
            match self.parse_line(start, end) {
                Ok(()) => columns.append_row(&self.stage),
                Err((column, message)) => report_malformed(
                    &self.plan,
                    &self.path,
                    self.line_no,
                    &column,
                    message,
                    &mut self.skipped,
                )?,
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

    fn byte_offset(&self) -> Option<u64> {
        Some(self.end_of_consumed)
    }
}

/// serde_json errors end in "at line 1 column N"; the line is meaningless
/// for a single-line document, so report the character position instead.
fn describe_json_error(e: &serde_json::Error) -> String {
    let mut text = e.to_string();
    if let Some(at) = text.rfind(" at line ") {
        text.truncate(at);
    }
    // serde quotes the offending value (`invalid type: string "..."`),
    // which can be the whole line.
    let text = crate::quote::bounded(&text);
    match e.column() {
        0 => format!("invalid JSON: {text}"),
        column => format!("invalid JSON at character {column}: {text}"),
    }
}

/// Side channel for a column-level error: (column index, message).
type ColumnError = Option<(usize, String)>;

struct RowVisitor<'a> {
    specs: &'a [ColumnSpec],
    names: &'a HashMap<String, usize>,
    stage: &'a mut RowStage,
    error: &'a mut ColumnError,
}

impl<'de> Visitor<'de> for RowVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed { names: self.names })? {
            match key {
                Some(index) => {
                    let cell = map.next_value_seed(CellSeed {
                        spec: &self.specs[index],
                        index,
                        text: &mut self.stage.text,
                        error: &mut *self.error,
                    })?;
                    self.stage.cells[index] = cell;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Resolves an object key to a declared column index without allocating.
struct KeySeed<'a> {
    names: &'a HashMap<String, usize>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.names.get(key).copied())
    }
}

/// Decodes one value for a declared column.
struct CellSeed<'a> {
    spec: &'a ColumnSpec,
    index: usize,
    text: &'a mut String,
    error: &'a mut ColumnError,
}

impl CellSeed<'_> {
    fn done<E: de::Error>(self, result: Result<Cell, String>) -> Result<Cell, E> {
        result.map_err(|message| {
            *self.error = Some((self.index, message));
            E::custom("column error")
        })
    }

    fn found(&self, what: &str) -> String {
        format!("expected {}, found {what}", self.spec.data_type)
    }

    fn number(&mut self, value: i128, as_text: impl fmt::Display) -> Result<Cell, String> {
        match self.spec.kind {
            ColumnKind::Float32 | ColumnKind::Float64 => Ok(Cell::Float(value as f64)),
            ColumnKind::Timestamp { unit, .. } => i64::try_from(value)
                .ok()
                .and_then(|ms| parse::millis_to_unit(ms, unit))
                .map(Cell::Int)
                .ok_or_else(|| format!("timestamp {value} ms is out of range")),
            ColumnKind::Date32 => i32::try_from(value)
                .map(|d| Cell::Int(i64::from(d)))
                .map_err(|_| format!("date {value} days is out of range")),
            ColumnKind::Utf8 | ColumnKind::LargeUtf8 | ColumnKind::Decimal128 { .. } => {
                let s = as_text.to_string();
                parse_text(s.as_bytes(), self.spec, self.text)
            }
            ColumnKind::Boolean => Err(self.found("a number")),
            _ => int_cell(value, self.spec),
        }
    }
}

impl<'de> DeserializeSeed<'de> for CellSeed<'_> {
    type Value = Cell;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Cell, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CellSeed<'_> {
    type Value = Cell;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a value for column '{}'", self.spec.name)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Cell, E> {
        Ok(Cell::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Cell, E> {
        let result = match self.spec.kind {
            ColumnKind::Boolean => Ok(Cell::Bool(v)),
            ColumnKind::Utf8 | ColumnKind::LargeUtf8 => {
                let s = if v { "true" } else { "false" };
                parse_text(s.as_bytes(), self.spec, &mut *self.text)
            }
            _ => Err(self.found("a boolean")),
        };
        self.done(result)
    }

    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<Cell, E> {
        let result = self.number(i128::from(v), v);
        self.done(result)
    }

    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<Cell, E> {
        let result = self.number(i128::from(v), v);
        self.done(result)
    }

    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<Cell, E> {
        let result = match self.spec.kind {
            ColumnKind::Float32 | ColumnKind::Float64 => Ok(Cell::Float(v)),
            // Integral floats such as `3.0` are accepted for integer-like
            // columns; anything with a fraction is an error.
            _ if v.fract() == 0.0 && v.abs() < 1e19 => self.number(v as i128, v),
            ColumnKind::Utf8 | ColumnKind::LargeUtf8 | ColumnKind::Decimal128 { .. } => {
                let s = v.to_string();
                parse_text(s.as_bytes(), self.spec, &mut *self.text)
            }
            _ => Err(format!("cannot convert {v} to {}", self.spec.data_type)),
        };
        self.done(result)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cell, E> {
        let result = if v.is_empty() {
            match self.spec.kind {
                ColumnKind::Utf8 | ColumnKind::LargeUtf8 => {
                    let at = self.text.len();
                    Ok(Cell::Text(at, at))
                }
                _ => Ok(Cell::Null),
            }
        } else {
            parse_text(v.as_bytes(), self.spec, &mut *self.text)
        };
        self.done(result)
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<Cell, A::Error> {
        let message = self.found("an object");
        self.done(Err(message))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _seq: A) -> Result<Cell, A::Error> {
        let message = self.found("an array");
        self.done(Err(message))
    }
}
