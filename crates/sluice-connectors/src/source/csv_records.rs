//! A batch of tokenized CSV records, parsed one column at a time.
//!
//! The reader's buffer is reused for every record, so the records of a batch
//! are first copied back to back into one buffer together with the byte
//! range of each declared column's field. Parsing then walks one column
//! over all records: one type, one builder and one parser per loop, which
//! keeps the branch predictor and the caches on our side, and one UTF-8
//! check covers the text of the whole batch.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::PrimitiveBuilder;
use arrow::datatypes::ArrowPrimitiveType;
use arrow::record_batch::RecordBatch;
use simd_csv::ZeroCopyByteRecord;

use super::columns::{parse_text, Builder, Cell, ColumnKind, ColumnSet, ColumnSpec};
use super::parse::{self, DateCache};
use super::ReadPlan;
use crate::error::Result;

/// The CSV quote character (RFC 4180).
const QUOTE: u8 = b'"';

/// Records of one batch, waiting to be parsed.
pub(crate) struct RawRecords {
    /// The declared columns and which of them are read.
    plan: Arc<ReadPlan>,
    /// The fields of the columns read, back to back, exactly as in the file.
    data: Vec<u8>,
    /// For each record, the byte range in `data` of each declared column's
    /// field (row-major, `columns` per record).
    fields: Vec<(usize, usize)>,
    /// File offset each record was read from, for error lines.
    offsets: Vec<u64>,
}

/// A record that could not be decoded: its file offset, the column
/// description and the message.
pub(crate) struct BadRecord {
    pub offset: u64,
    pub column: String,
    pub message: String,
}

impl RawRecords {
    /// Records of `plan`'s declared columns; the fields of the columns it
    /// does not read are left empty.
    pub fn new(plan: Arc<ReadPlan>) -> RawRecords {
        RawRecords {
            plan,
            data: Vec::new(),
            fields: Vec::new(),
            offsets: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.fields.clear();
        self.offsets.clear();
    }

    /// Keep `record`, read at file `offset`; `field_of_column` maps each
    /// declared column to its field (all in range: the caller checked the
    /// record's field count).
    pub fn push(
        &mut self,
        record: &ZeroCopyByteRecord<'_>,
        field_of_column: &[usize],
        offset: u64,
    ) {
        let bytes = record.as_slice();
        let read = || {
            field_of_column
                .iter()
                .zip(&self.plan.read)
                .map(|(&field, &read)| match read {
                    true => record.get(field).unwrap_or(&bytes[..0]),
                    false => &bytes[..0],
                })
        };
        let read_bytes: usize = read().map(<[u8]>::len).sum();
        if read_bytes * 2 >= bytes.len() {
            // Mostly read: one copy of the whole record.
            let base = self.data.len();
            self.data.extend_from_slice(bytes);
            for raw in read() {
                let start = base + (raw.as_ptr() as usize).saturating_sub(bytes.as_ptr() as usize);
                self.fields.push((start, start + raw.len()));
            }
        } else {
            // Wide records read in part (long text columns left out): copy
            // only the fields read.
            for raw in read() {
                let start = self.data.len();
                self.data.extend_from_slice(raw);
                self.fields.push((start, self.data.len()));
            }
        }
        self.offsets.push(offset);
    }

    fn field(&self, row: usize, column: usize) -> &[u8] {
        let (start, end) = self.fields[row * self.plan.specs.len() + column];
        self.data.get(start..end).unwrap_or_default()
    }

    /// Parse every record into a batch of the plan's schema. Records that
    /// fail are left out and returned, in file order, with the first column
    /// that failed; the caller decides whether that stops the read.
    pub fn parse(&self) -> Result<(Option<RecordBatch>, Vec<BadRecord>)> {
        let plan = &*self.plan;
        let rows = self.len();
        if rows == 0 {
            return Ok((None, Vec::new()));
        }
        let reads_text = plan.specs.iter().zip(&plan.read).any(|(spec, &read)| {
            read && matches!(spec.kind, ColumnKind::Utf8 | ColumnKind::LargeUtf8)
        });
        let mut parser = ColumnParser::new(self, reads_text);
        let mut columns = ColumnSet::new(&plan.schema, &plan.specs, rows);
        let mut failed: Vec<Option<(usize, String)>> = Vec::new();
        for (c, spec) in plan.specs.iter().enumerate() {
            let Some(builder) = columns.builder_mut(c) else {
                continue;
            };
            if !plan.read.get(c).copied().unwrap_or(true) {
                builder.append_nulls(rows);
                continue;
            }
            let mut fail = |row: usize, message: String| {
                if failed.is_empty() {
                    failed.resize(rows, None);
                }
                failed[row].get_or_insert((c, message));
            };
            parser.fill_column(c, spec, builder, &mut fail);
        }
        columns.add_rows(rows);
        if failed.is_empty() {
            return Ok((
                Some(columns.finish(|| "building a CSV batch".into())?),
                Vec::new(),
            ));
        }
        // Rare: rebuild from the good records only, so no builder holds a
        // placeholder for a record that is left out.
        let mut good = ColumnSet::new(&plan.schema, &plan.specs, rows);
        let mut bad = Vec::new();
        parser.scratch.clear();
        for (row, failure) in failed.into_iter().enumerate() {
            if let Some((c, message)) = failure {
                bad.push(BadRecord {
                    offset: self.offsets[row],
                    column: plan.specs[c].name.clone(),
                    message,
                });
                continue;
            }
            for (c, spec) in plan.specs.iter().enumerate() {
                let cell = parser
                    .cell(row, c, spec, &mut DateCache::default())
                    .unwrap_or(Cell::Null);
                good.append_cell(c, cell, &parser.scratch, parser.text);
            }
            good.add_rows(1);
        }
        let batch = if good.len() == 0 {
            None
        } else {
            Some(good.finish(|| "building a CSV batch".into())?)
        };
        Ok((batch, bad))
    }
}

/// Turns the fields of a [`RawRecords`] into cells.
struct ColumnParser<'a> {
    records: &'a RawRecords,
    /// The whole batch as text when it is valid UTF-8 (the common case);
    /// text cells are then ranges of it and need no copy.
    text: &'a str,
    /// Values that had to be unescaped or validated one by one.
    scratch: String,
    /// Parsed integers of the column being filled.
    ints: Vec<i64>,
}

impl<'a> ColumnParser<'a> {
    /// `reads_text`: whether any text column is read (only then is the
    /// batch checked for UTF-8 as a whole).
    fn new(records: &'a RawRecords, reads_text: bool) -> ColumnParser<'a> {
        let text = if reads_text {
            simdutf8::basic::from_utf8(&records.data).unwrap_or_default()
        } else {
            ""
        };
        ColumnParser {
            records,
            text,
            scratch: String::new(),
            ints: Vec::new(),
        }
    }

    /// Parse column `column` of every record into `builder`, with loops
    /// specialized for the common types; a failing record gets a null and
    /// is passed to `fail`.
    fn fill_column(
        &mut self,
        column: usize,
        spec: &ColumnSpec,
        builder: &mut Builder,
        fail: &mut impl FnMut(usize, String),
    ) {
        let rows = self.records.len();
        let mut dates = DateCache::default();
        match builder {
            Builder::Int64(b) => self.fill_i64(column, spec, b, parse::parse_plain_i64, fail),
            Builder::TsSecond(_)
            | Builder::TsMilli(_)
            | Builder::TsMicro(_)
            | Builder::TsNano(_) => self.fill_timestamps(column, spec, builder, fail),
            Builder::Utf8(b) if !self.text.is_empty() => {
                let base = self.records.data.as_ptr() as usize;
                for row in 0..rows {
                    let raw = self.records.field(row, column);
                    if raw.first().is_some_and(|&first| first != QUOTE) {
                        let start = (raw.as_ptr() as usize).saturating_sub(base);
                        b.append_value(self.text.get(start..start + raw.len()).unwrap_or(""));
                        continue;
                    }
                    match self.cell(row, column, spec, &mut dates) {
                        Ok(Cell::Raw(s, e)) => b.append_value(self.text.get(s..e).unwrap_or("")),
                        Ok(Cell::Text(s, e)) => {
                            b.append_value(self.scratch.get(s..e).unwrap_or(""))
                        }
                        Ok(_) => b.append_null(),
                        Err(message) => {
                            b.append_null();
                            fail(row, message);
                        }
                    }
                }
            }
            _ => self.fill_cells(column, spec, builder, fail),
        }
    }

    /// [`fill_column`](Self::fill_column) through the general parser.
    fn fill_cells(
        &mut self,
        column: usize,
        spec: &ColumnSpec,
        builder: &mut Builder,
        fail: &mut impl FnMut(usize, String),
    ) {
        let mut dates = DateCache::default();
        for row in 0..self.records.len() {
            match self.cell(row, column, spec, &mut dates) {
                Ok(cell) => builder.append(cell, &self.scratch, self.text),
                Err(message) => {
                    builder.append(Cell::Null, "", "");
                    fail(row, message);
                }
            }
        }
    }

    /// [`fill_column`](Self::fill_column) for a timestamp column: UTC
    /// columns take the plain `YYYY-MM-DD HH:MM:SS[.fff]` text through a
    /// fast path.
    fn fill_timestamps(
        &mut self,
        column: usize,
        spec: &ColumnSpec,
        builder: &mut Builder,
        fail: &mut impl FnMut(usize, String),
    ) {
        let ColumnKind::Timestamp {
            unit,
            local_tz: None,
        } = spec.kind
        else {
            return self.fill_cells(column, spec, builder, fail);
        };
        let mut dates = DateCache::default();
        let mut fast = |raw: &[u8]| parse::parse_plain_timestamp(raw, &mut dates, unit);
        match builder {
            Builder::TsSecond(b) => self.fill_i64(column, spec, b, &mut fast, fail),
            Builder::TsMilli(b) => self.fill_i64(column, spec, b, &mut fast, fail),
            Builder::TsMicro(b) => self.fill_i64(column, spec, b, &mut fast, fail),
            Builder::TsNano(b) => self.fill_i64(column, spec, b, &mut fast, fail),
            _ => self.fill_cells(column, spec, builder, fail),
        }
    }

    /// [`fill_column`](Self::fill_column) for a column of `i64` values
    /// (BIGINT, timestamps); `fast` may take a field without the general
    /// parser.
    fn fill_i64<T: ArrowPrimitiveType<Native = i64>>(
        &mut self,
        column: usize,
        spec: &ColumnSpec,
        b: &mut PrimitiveBuilder<T>,
        mut fast: impl FnMut(&[u8]) -> Option<i64>,
        fail: &mut impl FnMut(usize, String),
    ) {
        // The leading run of values the fast path takes goes in with one
        // bulk append; the rest row by row.
        let rows = self.records.len();
        let mut run = std::mem::take(&mut self.ints);
        run.clear();
        for row in 0..rows {
            match fast(self.records.field(row, column)) {
                Some(v) => run.push(v),
                None => break,
            }
        }
        b.append_slice(&run);
        let done = run.len();
        self.ints = run;
        let mut dates = DateCache::default();
        for row in done..rows {
            if let Some(v) = fast(self.records.field(row, column)) {
                b.append_value(v);
                continue;
            }
            match self.cell(row, column, spec, &mut dates) {
                Ok(Cell::Int(v)) => b.append_value(v),
                Ok(_) => b.append_null(),
                Err(message) => {
                    b.append_null();
                    fail(row, message);
                }
            }
        }
    }

    #[inline]
    fn cell(
        &mut self,
        row: usize,
        column: usize,
        spec: &ColumnSpec,
        dates: &mut DateCache,
    ) -> Result<Cell, String> {
        let raw = self.records.field(row, column);
        let quoted = raw.len() >= 2 && raw[0] == QUOTE && raw[raw.len() - 1] == QUOTE;
        let value = if quoted {
            unescape(&raw[1..raw.len() - 1])
        } else {
            Cow::Borrowed(raw)
        };
        if value.is_empty() {
            return if spec.nullable {
                Ok(Cell::Null)
            } else {
                Err("null value in non-nullable column".into())
            };
        }
        match (spec.kind, &value) {
            (ColumnKind::Utf8 | ColumnKind::LargeUtf8, Cow::Borrowed(field))
                if !self.text.is_empty() =>
            {
                let start =
                    (field.as_ptr() as usize).saturating_sub(self.records.data.as_ptr() as usize);
                Ok(Cell::Raw(start, start + field.len()))
            }
            (ColumnKind::Timestamp { unit, local_tz }, _) => {
                super::columns::parse_timestamp(&value, spec, unit, local_tz.as_ref(), dates)
            }
            _ => parse_text(&value, spec, &mut self.scratch),
        }
    }
}

/// The content of a quoted field: doubled quotes become one.
fn unescape(inner: &[u8]) -> Cow<'_, [u8]> {
    if memchr::memchr(QUOTE, inner).is_none() {
        return Cow::Borrowed(inner);
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(i) = memchr::memchr(QUOTE, rest) {
        out.extend_from_slice(&rest[..=i]);
        rest = &rest[i + 1..];
        if rest.first() == Some(&QUOTE) {
            rest = &rest[1..];
        }
    }
    out.extend_from_slice(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn unescape_doubled_quotes() {
        assert_eq!(&*unescape(b"plain"), b"plain");
        assert_eq!(&*unescape(b"say \"\"hi\"\""), b"say \"hi\"");
        assert_eq!(&*unescape(b"\"\""), b"\"");
        assert_eq!(&*unescape(b"a\"\"\"\"b"), b"a\"\"b");
    }
}
