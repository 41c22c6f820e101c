//! `to_char(timestamp, format)` that reads its format once per batch.
//!
//! DataFusion's `to_char` formats each row through Arrow's display code,
//! which hands chrono the format *string*: chrono parses it again for every
//! row and then formats through `fmt::Display`. In Nexmark q10 that was
//! about a fifth of the query's time (`BENCHMARKS.md`, "Flink on q9 to
//! q22"). This function keeps DataFusion's `to_char` (its signature, its
//! results, its errors) and changes only how the common case is computed:
//!
//! - a column of timestamps without a time zone and a constant format:
//!   the format is parsed once; formats made only of literal text and the
//!   zero-padded numeric fields `%Y %m %d %H %M %S` (the ones Nexmark and
//!   most dashboards use) are written digit by digit, and any other format
//!   goes through chrono's `format_with_items` over the parsed items;
//! - everything else (dates, times, durations, zoned timestamps, a format
//!   per row, an invalid format) is DataFusion's own code, so its errors
//!   and corner cases are unchanged.
//!
//! A year outside 0 to 9999 (chrono writes a sign and more digits) takes
//! chrono's path for that row. The tests compare this function with
//! DataFusion's on every format specifier chrono documents.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{
    ArrowTimestampType, DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow::temporal_conversions::as_datetime;
use chrono::format::{Item, Numeric, Pad, StrftimeItems};
use chrono::{Datelike, NaiveDateTime, Timelike};
use datafusion::common::ScalarValue;
use datafusion::functions::datetime::to_char::ToCharFunc;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF};

use crate::accelerated::{Accelerated, FastPath};

/// The `to_char` (alias `date_format`) a Sluice session plans with.
pub fn to_char_udf() -> ScalarUDF {
    ToChar::udf()
}

/// DataFusion's `to_char` with a faster path for constant formats over
/// timestamp columns (see the module documentation).
type ToChar = Accelerated<ConstantFormat>;

/// A timestamp column and a constant format.
struct ConstantFormat;

impl FastPath for ConstantFormat {
    type Inner = ToCharFunc;

    fn compute(args: &[ColumnarValue]) -> Option<ArrayRef> {
        match args {
            [ColumnarValue::Array(values), ColumnarValue::Scalar(ScalarValue::Utf8(Some(format)))] => {
                format_timestamps(values, format)
            }
            _ => None,
        }
    }
}

/// One piece of a format made only of literals and zero-padded numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

/// A parsed format: digit pieces when every item is one, else chrono's
/// items.
struct Format<'a> {
    items: Vec<Item<'a>>,
    pieces: Option<Vec<Piece<'a>>>,
}

impl<'a> Format<'a> {
    /// `None` for a format chrono refuses: DataFusion reports that error.
    fn parse(format: &'a str) -> Option<Self> {
        let items: Vec<Item<'a>> = StrftimeItems::new(format).collect();
        if items.iter().any(|i| matches!(i, Item::Error)) {
            return None;
        }
        let pieces = items.iter().map(piece).collect::<Option<Vec<_>>>();
        Some(Self { items, pieces })
    }

    /// Append `t` formatted, as chrono would write it.
    fn write(&self, t: &NaiveDateTime, out: &mut String) -> std::fmt::Result {
        match &self.pieces {
            Some(pieces) if (0..=9999).contains(&t.year()) => {
                for p in pieces {
                    match *p {
                        Piece::Text(s) => out.push_str(s),
                        Piece::Year => {
                            // 0 to 9999, so the cast and four digits are exact.
                            let y = t.year().unsigned_abs();
                            push_two(out, y / 100);
                            push_two(out, y % 100);
                        }
                        Piece::Month => push_two(out, t.month()),
                        Piece::Day => push_two(out, t.day()),
                        Piece::Hour => push_two(out, t.hour()),
                        Piece::Minute => push_two(out, t.minute()),
                        // A leap second (nanoseconds past 1e9) is `60`, as chrono writes it.
                        Piece::Second => push_two(out, t.second() + t.nanosecond() / 1_000_000_000),
                    }
                }
                Ok(())
            }
            _ => write!(out, "{}", t.format_with_items(self.items.iter())),
        }
    }
}

/// What an item is in a digit-only format, or `None` if it needs chrono.
fn piece<'a>(item: &Item<'a>) -> Option<Piece<'a>> {
    Some(match item {
        Item::Literal(s) | Item::Space(s) => Piece::Text(s),
        Item::Numeric(n, Pad::Zero) => match n {
            Numeric::Year => Piece::Year,
            Numeric::Month => Piece::Month,
            Numeric::Day => Piece::Day,
            Numeric::Hour => Piece::Hour,
            Numeric::Minute => Piece::Minute,
            Numeric::Second => Piece::Second,
            _ => return None,
        },
        _ => return None,
    })
}

/// Two decimal digits of `v` (below 100).
fn push_two(out: &mut String, v: u32) {
    out.push(char::from(b'0' + (v / 10 % 10) as u8));
    out.push(char::from(b'0' + (v % 10) as u8));
}

/// The fast path, or `None` where DataFusion's `to_char` should run
/// (another input type, a zoned timestamp, a format chrono refuses, or a
/// value Arrow cannot turn into a date-time, which DataFusion reports).
fn format_timestamps(values: &ArrayRef, format: &str) -> Option<ArrayRef> {
    let DataType::Timestamp(unit, None) = values.data_type() else {
        return None;
    };
    let format = Format::parse(format)?;
    match unit {
        TimeUnit::Second => format_typed::<TimestampSecondType>(values, &format),
        TimeUnit::Millisecond => format_typed::<TimestampMillisecondType>(values, &format),
        TimeUnit::Microsecond => format_typed::<TimestampMicrosecondType>(values, &format),
        TimeUnit::Nanosecond => format_typed::<TimestampNanosecondType>(values, &format),
    }
}

fn format_typed<T: ArrowTimestampType>(values: &ArrayRef, format: &Format<'_>) -> Option<ArrayRef> {
    let values = values.as_primitive_opt::<T>()?;
    let mut builder = StringBuilder::with_capacity(values.len(), values.len() * 20);
    let mut row = String::with_capacity(32);
    for v in values.iter() {
        match v {
            None => builder.append_null(),
            Some(v) => {
                let t = as_datetime::<T>(v)?;
                row.clear();
                format.write(&t, &mut row).ok()?;
                builder.append_value(&row);
            }
        }
    }
    Some(Arc::new(builder.finish()))
}

#[cfg(test)]
#[path = "to_char_tests.rs"]
mod tests;
