//! Typed column assembly shared by the CSV and JSON decoders.
//!
//! Values are parsed into small [`Cell`]s (no allocation; text goes into one
//! reused buffer) before they reach the Arrow builders. The JSON decoder
//! parses a whole row into cells and appends it only when it parsed
//! cleanly, which keeps the builders row-aligned when a malformed row is
//! skipped half-way through. The CSV decoder fills a batch a column at a
//! time and rebuilds it without the failed rows (see `csv_records`).

use std::sync::Arc;

use arrow::array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, Int8Builder, LargeStringBuilder, StringBuilder,
    TimestampMicrosecondBuilder, TimestampMillisecondBuilder, TimestampNanosecondBuilder,
    TimestampSecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow::array::timezone::Tz;
use arrow::array::{ArrayBuilder, ArrayRef};
use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use chrono::{LocalResult, TimeZone};

use super::parse;
use crate::error::{ConnectorError, Result};

/// The declared types the text decoders can produce.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ColumnKind {
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    Boolean,
    Utf8,
    LargeUtf8,
    Date32,
    /// `local_tz` is the zone naive (offset-less) text is interpreted in;
    /// `None` means UTC, which is also the fast path.
    Timestamp {
        unit: TimeUnit,
        local_tz: Option<Tz>,
    },
    Decimal128 {
        precision: u8,
        scale: u8,
    },
}

impl ColumnKind {
    /// Map a declared Arrow type to a kind, or explain why it is unsupported.
    fn from_data_type(dt: &DataType) -> Result<ColumnKind, String> {
        Ok(match dt {
            DataType::Int8 => ColumnKind::Int8,
            DataType::Int16 => ColumnKind::Int16,
            DataType::Int32 => ColumnKind::Int32,
            DataType::Int64 => ColumnKind::Int64,
            DataType::UInt8 => ColumnKind::UInt8,
            DataType::UInt16 => ColumnKind::UInt16,
            DataType::UInt32 => ColumnKind::UInt32,
            DataType::UInt64 => ColumnKind::UInt64,
            DataType::Float32 => ColumnKind::Float32,
            DataType::Float64 => ColumnKind::Float64,
            DataType::Boolean => ColumnKind::Boolean,
            DataType::Utf8 => ColumnKind::Utf8,
            DataType::LargeUtf8 => ColumnKind::LargeUtf8,
            DataType::Date32 => ColumnKind::Date32,
            DataType::Timestamp(unit, tz) => {
                let local_tz = match tz.as_deref() {
                    None | Some("UTC" | "utc" | "Z" | "+00:00" | "+0000" | "Etc/UTC") => None,
                    Some(name) => Some(
                        name.parse::<Tz>()
                            .map_err(|e| format!("invalid time zone '{name}': {e}"))?,
                    ),
                };
                ColumnKind::Timestamp {
                    unit: *unit,
                    local_tz,
                }
            }
            DataType::Decimal128(precision, scale) => {
                let scale = u8::try_from(*scale)
                    .map_err(|_| format!("negative decimal scale {scale} is not supported"))?;
                ColumnKind::Decimal128 {
                    precision: *precision,
                    scale,
                }
            }
            other => return Err(format!("type {other} is not supported")),
        })
    }
}

/// A declared column as the text decoders see it.
#[derive(Debug, Clone)]
pub(crate) struct ColumnSpec {
    pub name: String,
    pub kind: ColumnKind,
    pub nullable: bool,
    pub data_type: DataType,
}

impl ColumnSpec {
    fn new(field: &Field) -> Result<ColumnSpec, String> {
        Ok(ColumnSpec {
            name: field.name().clone(),
            kind: ColumnKind::from_data_type(field.data_type())?,
            nullable: field.is_nullable(),
            data_type: field.data_type().clone(),
        })
    }
}

/// Build the column specs for a text format, rejecting unsupported types up
/// front so the error appears at open time rather than on the first row.
pub(crate) fn specs_for(schema: &SchemaRef, format: &str) -> Result<Arc<[ColumnSpec]>> {
    schema
        .fields()
        .iter()
        .map(|f| {
            ColumnSpec::new(f).map_err(|msg| {
                ConnectorError::invalid_option(
                    "schema",
                    format!("column '{}': {msg} by the {format} reader", f.name()),
                )
            })
        })
        .collect()
}

/// One parsed value of a row, before it is appended to a builder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cell {
    Null,
    /// Signed integers, dates and timestamps (already in the column unit).
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Decimal(i128),
    /// Byte range into [`RowStage::text`].
    Text(usize, usize),
    /// Byte range into the record the row was parsed from (CSV fields that
    /// need no unescaping are appended without an intermediate copy).
    Raw(usize, usize),
}

/// Reusable per-row scratch space.
#[derive(Debug, Default)]
pub(crate) struct RowStage {
    pub cells: Vec<Cell>,
    pub text: String,
}

impl RowStage {
    pub fn reset(&mut self, columns: usize) {
        self.cells.clear();
        self.cells.resize(columns, Cell::Null);
        self.text.clear();
    }
}

fn cannot_parse(bytes: &[u8], spec: &ColumnSpec) -> String {
    format!(
        "cannot parse '{}' as {}",
        crate::quote::bounded_bytes(bytes),
        spec.data_type
    )
}

fn out_of_range(value: impl std::fmt::Display, spec: &ColumnSpec) -> String {
    format!("value {value} is out of range for {}", spec.data_type)
}

/// Range-check an integer against the column's integer type.
#[inline]
pub(crate) fn int_cell(v: i128, spec: &ColumnSpec) -> Result<Cell, String> {
    let (lo, hi) = match spec.kind {
        ColumnKind::Int8 => (i128::from(i8::MIN), i128::from(i8::MAX)),
        ColumnKind::Int16 => (i128::from(i16::MIN), i128::from(i16::MAX)),
        ColumnKind::Int32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        ColumnKind::Int64 => (i128::from(i64::MIN), i128::from(i64::MAX)),
        ColumnKind::UInt8 => (0, i128::from(u8::MAX)),
        ColumnKind::UInt16 => (0, i128::from(u16::MAX)),
        ColumnKind::UInt32 => (0, i128::from(u32::MAX)),
        ColumnKind::UInt64 => (0, i128::from(u64::MAX)),
        _ => return Err(format!("expected {}, found an integer", spec.data_type)),
    };
    if v < lo || v > hi {
        return Err(out_of_range(v, spec));
    }
    Ok(match spec.kind {
        ColumnKind::UInt8 | ColumnKind::UInt16 | ColumnKind::UInt32 | ColumnKind::UInt64 => {
            Cell::UInt(v as u64)
        }
        _ => Cell::Int(v as i64),
    })
}

/// Convert a parsed textual timestamp to the column's unit and zone.
#[inline]
fn timestamp_cell(
    ts: parse::ParsedTimestamp,
    unit: TimeUnit,
    local_tz: Option<&Tz>,
) -> Option<i64> {
    let seconds = match (ts.has_offset, local_tz) {
        (false, Some(tz)) => {
            let naive = chrono::DateTime::from_timestamp(ts.seconds, 0)?.naive_utc();
            match tz.from_local_datetime(&naive) {
                LocalResult::Single(dt) | LocalResult::Ambiguous(dt, _) => dt.timestamp(),
                LocalResult::None => return None,
            }
        }
        _ => ts.seconds,
    };
    parse::to_unit(seconds, ts.nanos, unit)
}

/// Parse one textual field (CSV field or JSON string) for `spec`.
///
/// `raw` must not be empty; emptiness means null and is handled by callers.
pub(crate) fn parse_text(raw: &[u8], spec: &ColumnSpec, text: &mut String) -> Result<Cell, String> {
    match spec.kind {
        ColumnKind::Utf8 | ColumnKind::LargeUtf8 => {
            let s = std::str::from_utf8(raw).map_err(|e| format!("invalid UTF-8: {e}"))?;
            let start = text.len();
            text.push_str(s);
            return Ok(Cell::Text(start, text.len()));
        }
        _ => {}
    }
    let bytes = parse::trim(raw);
    let parsed = match spec.kind {
        ColumnKind::Int8
        | ColumnKind::Int16
        | ColumnKind::Int32
        | ColumnKind::Int64
        | ColumnKind::UInt8
        | ColumnKind::UInt16
        | ColumnKind::UInt32
        | ColumnKind::UInt64 => {
            let v = parse::parse_integer(bytes).ok_or_else(|| cannot_parse(raw, spec))?;
            return int_cell(v, spec);
        }
        ColumnKind::Float32 => parse::parse_f32(bytes).map(|v| Cell::Float(f64::from(v))),
        ColumnKind::Float64 => parse::parse_f64(bytes).map(Cell::Float),
        ColumnKind::Boolean => parse::parse_bool(bytes).map(Cell::Bool),
        ColumnKind::Date32 => parse::parse_date32(bytes).map(|d| Cell::Int(i64::from(d))),
        ColumnKind::Timestamp { unit, local_tz } => {
            return parse_timestamp(
                raw,
                spec,
                unit,
                local_tz.as_ref(),
                &mut parse::DateCache::default(),
            );
        }
        ColumnKind::Decimal128 { precision, scale } => {
            parse::parse_decimal(bytes, precision, scale).map(Cell::Decimal)
        }
        ColumnKind::Utf8 | ColumnKind::LargeUtf8 => None,
    };
    parsed.ok_or_else(|| cannot_parse(raw, spec))
}

/// Parse a timestamp field: ISO-8601-like text, or an integer of epoch
/// milliseconds. `dates` remembers the last date seen, which consecutive
/// rows of a stream nearly always share.
#[inline]
pub(crate) fn parse_timestamp(
    raw: &[u8],
    spec: &ColumnSpec,
    unit: TimeUnit,
    local_tz: Option<&Tz>,
    dates: &mut parse::DateCache,
) -> Result<Cell, String> {
    let bytes = parse::trim(raw);
    let value = if bytes.get(4) == Some(&b'-') {
        parse::parse_timestamp_text_cached(bytes, dates)
            .and_then(|ts| timestamp_cell(ts, unit, local_tz))
    } else {
        parse::parse_integer(bytes)
            .and_then(|ms| i64::try_from(ms).ok())
            .and_then(|ms| parse::millis_to_unit(ms, unit))
    };
    value.map(Cell::Int).ok_or_else(|| cannot_parse(raw, spec))
}

/// Column builders for one output batch, in declared-schema order.
pub(crate) struct ColumnSet {
    schema: SchemaRef,
    builders: Vec<Builder>,
    rows: usize,
}

pub(crate) enum Builder {
    Int8(Int8Builder),
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    UInt8(UInt8Builder),
    UInt16(UInt16Builder),
    UInt32(UInt32Builder),
    UInt64(UInt64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Boolean(BooleanBuilder),
    Utf8(StringBuilder),
    LargeUtf8(LargeStringBuilder),
    Date32(Date32Builder),
    TsSecond(TimestampSecondBuilder),
    TsMilli(TimestampMillisecondBuilder),
    TsMicro(TimestampMicrosecondBuilder),
    TsNano(TimestampNanosecondBuilder),
    Decimal128(Decimal128Builder),
}

impl Builder {
    fn new(spec: &ColumnSpec, cap: usize) -> Builder {
        let dt = spec.data_type.clone();
        match spec.kind {
            ColumnKind::Int8 => Builder::Int8(Int8Builder::with_capacity(cap)),
            ColumnKind::Int16 => Builder::Int16(Int16Builder::with_capacity(cap)),
            ColumnKind::Int32 => Builder::Int32(Int32Builder::with_capacity(cap)),
            ColumnKind::Int64 => Builder::Int64(Int64Builder::with_capacity(cap)),
            ColumnKind::UInt8 => Builder::UInt8(UInt8Builder::with_capacity(cap)),
            ColumnKind::UInt16 => Builder::UInt16(UInt16Builder::with_capacity(cap)),
            ColumnKind::UInt32 => Builder::UInt32(UInt32Builder::with_capacity(cap)),
            ColumnKind::UInt64 => Builder::UInt64(UInt64Builder::with_capacity(cap)),
            ColumnKind::Float32 => Builder::Float32(Float32Builder::with_capacity(cap)),
            ColumnKind::Float64 => Builder::Float64(Float64Builder::with_capacity(cap)),
            ColumnKind::Boolean => Builder::Boolean(BooleanBuilder::with_capacity(cap)),
            ColumnKind::Utf8 => Builder::Utf8(StringBuilder::with_capacity(cap, cap * 16)),
            ColumnKind::LargeUtf8 => {
                Builder::LargeUtf8(LargeStringBuilder::with_capacity(cap, cap * 16))
            }
            ColumnKind::Date32 => Builder::Date32(Date32Builder::with_capacity(cap)),
            // `with_data_type` carries the declared time zone / precision;
            // the kind was derived from this very type so it always matches.
            ColumnKind::Timestamp { unit, .. } => match unit {
                TimeUnit::Second => {
                    Builder::TsSecond(TimestampSecondBuilder::with_capacity(cap).with_data_type(dt))
                }
                TimeUnit::Millisecond => Builder::TsMilli(
                    TimestampMillisecondBuilder::with_capacity(cap).with_data_type(dt),
                ),
                TimeUnit::Microsecond => Builder::TsMicro(
                    TimestampMicrosecondBuilder::with_capacity(cap).with_data_type(dt),
                ),
                TimeUnit::Nanosecond => Builder::TsNano(
                    TimestampNanosecondBuilder::with_capacity(cap).with_data_type(dt),
                ),
            },
            ColumnKind::Decimal128 { .. } => {
                Builder::Decimal128(Decimal128Builder::with_capacity(cap).with_data_type(dt))
            }
        }
    }

    /// Append one cell. The decoders produce cells of the variant matching
    /// the builder; anything else is an internal bug and becomes a null
    /// (caught by debug assertions in tests) rather than a panic.
    #[inline]
    pub(crate) fn append(&mut self, cell: Cell, text: &str, record: &str) {
        match (self, cell) {
            (Builder::Int8(b), Cell::Int(v)) => b.append_value(v as i8),
            (Builder::Int16(b), Cell::Int(v)) => b.append_value(v as i16),
            (Builder::Int32(b), Cell::Int(v)) => b.append_value(v as i32),
            (Builder::Int64(b), Cell::Int(v)) => b.append_value(v),
            (Builder::UInt8(b), Cell::UInt(v)) => b.append_value(v as u8),
            (Builder::UInt16(b), Cell::UInt(v)) => b.append_value(v as u16),
            (Builder::UInt32(b), Cell::UInt(v)) => b.append_value(v as u32),
            (Builder::UInt64(b), Cell::UInt(v)) => b.append_value(v),
            (Builder::Float32(b), Cell::Float(v)) => b.append_value(v as f32),
            (Builder::Float64(b), Cell::Float(v)) => b.append_value(v),
            (Builder::Boolean(b), Cell::Bool(v)) => b.append_value(v),
            (Builder::Utf8(b), Cell::Text(s, e)) => b.append_value(text.get(s..e).unwrap_or("")),
            (Builder::LargeUtf8(b), Cell::Text(s, e)) => {
                b.append_value(text.get(s..e).unwrap_or(""))
            }
            (Builder::Utf8(b), Cell::Raw(s, e)) => b.append_value(record.get(s..e).unwrap_or("")),
            (Builder::LargeUtf8(b), Cell::Raw(s, e)) => {
                b.append_value(record.get(s..e).unwrap_or(""))
            }
            (Builder::Date32(b), Cell::Int(v)) => b.append_value(v as i32),
            (Builder::TsSecond(b), Cell::Int(v)) => b.append_value(v),
            (Builder::TsMilli(b), Cell::Int(v)) => b.append_value(v),
            (Builder::TsMicro(b), Cell::Int(v)) => b.append_value(v),
            (Builder::TsNano(b), Cell::Int(v)) => b.append_value(v),
            (Builder::Decimal128(b), Cell::Decimal(v)) => b.append_value(v),
            (builder, cell) => {
                debug_assert!(cell == Cell::Null, "cell {cell:?} does not fit builder");
                builder.append_null();
            }
        }
    }

    /// Append `n` nulls (a column left unparsed).
    pub(crate) fn append_nulls(&mut self, n: usize) {
        match self {
            Builder::Int8(b) => b.append_nulls(n),
            Builder::Int16(b) => b.append_nulls(n),
            Builder::Int32(b) => b.append_nulls(n),
            Builder::Int64(b) => b.append_nulls(n),
            Builder::UInt8(b) => b.append_nulls(n),
            Builder::UInt16(b) => b.append_nulls(n),
            Builder::UInt32(b) => b.append_nulls(n),
            Builder::UInt64(b) => b.append_nulls(n),
            Builder::Float32(b) => b.append_nulls(n),
            Builder::Float64(b) => b.append_nulls(n),
            Builder::Boolean(b) => b.append_nulls(n),
            Builder::Utf8(b) => b.append_nulls(n),
            Builder::LargeUtf8(b) => b.append_nulls(n),
            Builder::Date32(b) => b.append_nulls(n),
            Builder::TsSecond(b) => b.append_nulls(n),
            Builder::TsMilli(b) => b.append_nulls(n),
            Builder::TsMicro(b) => b.append_nulls(n),
            Builder::TsNano(b) => b.append_nulls(n),
            Builder::Decimal128(b) => b.append_nulls(n),
        }
    }

    fn append_null(&mut self) {
        match self {
            Builder::Int8(b) => b.append_null(),
            Builder::Int16(b) => b.append_null(),
            Builder::Int32(b) => b.append_null(),
            Builder::Int64(b) => b.append_null(),
            Builder::UInt8(b) => b.append_null(),
            Builder::UInt16(b) => b.append_null(),
            Builder::UInt32(b) => b.append_null(),
            Builder::UInt64(b) => b.append_null(),
            Builder::Float32(b) => b.append_null(),
            Builder::Float64(b) => b.append_null(),
            Builder::Boolean(b) => b.append_null(),
            Builder::Utf8(b) => b.append_null(),
            Builder::LargeUtf8(b) => b.append_null(),
            Builder::Date32(b) => b.append_null(),
            Builder::TsSecond(b) => b.append_null(),
            Builder::TsMilli(b) => b.append_null(),
            Builder::TsMicro(b) => b.append_null(),
            Builder::TsNano(b) => b.append_null(),
            Builder::Decimal128(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        let builder: &mut dyn ArrayBuilder = match self {
            Builder::Int8(b) => b,
            Builder::Int16(b) => b,
            Builder::Int32(b) => b,
            Builder::Int64(b) => b,
            Builder::UInt8(b) => b,
            Builder::UInt16(b) => b,
            Builder::UInt32(b) => b,
            Builder::UInt64(b) => b,
            Builder::Float32(b) => b,
            Builder::Float64(b) => b,
            Builder::Boolean(b) => b,
            Builder::Utf8(b) => b,
            Builder::LargeUtf8(b) => b,
            Builder::Date32(b) => b,
            Builder::TsSecond(b) => b,
            Builder::TsMilli(b) => b,
            Builder::TsMicro(b) => b,
            Builder::TsNano(b) => b,
            Builder::Decimal128(b) => b,
        };
        builder.finish()
    }
}

impl ColumnSet {
    /// Builders for at most `max_rows` rows of `schema`.
    pub fn new(schema: &SchemaRef, specs: &[ColumnSpec], max_rows: usize) -> ColumnSet {
        // Pre-size for the common case but cap it, so a huge batch_size
        // does not allocate gigabytes for a tiny file.
        let cap = max_rows.min(64 * 1024);
        ColumnSet {
            schema: schema.clone(),
            builders: specs.iter().map(|s| Builder::new(s, cap)).collect(),
            rows: 0,
        }
    }

    /// Rows appended so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Append a fully parsed row.
    #[inline]
    pub fn append_row(&mut self, stage: &RowStage) {
        for (builder, cell) in self.builders.iter_mut().zip(&stage.cells) {
            builder.append(*cell, &stage.text, "");
        }
        self.rows += 1;
    }

    /// Append one cell to column `column`, for decoders that fill a batch
    /// one column at a time; [`add_rows`](Self::add_rows) then counts the
    /// rows once every column has them.
    #[inline]
    pub fn append_cell(&mut self, column: usize, cell: Cell, text: &str, record: &str) {
        if let Some(builder) = self.builders.get_mut(column) {
            builder.append(cell, text, record);
        }
    }

    /// The builder of column `column`, for decoders with a typed fast path.
    pub fn builder_mut(&mut self, column: usize) -> Option<&mut Builder> {
        self.builders.get_mut(column)
    }

    /// Count `rows` rows appended column by column.
    pub fn add_rows(&mut self, rows: usize) {
        self.rows += rows;
    }

    /// Produce a batch with exactly the declared schema.
    pub fn finish(&mut self, context: impl FnOnce() -> String) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.rows = 0;
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map_err(|e| ConnectorError::arrow(context(), e))
    }
}
