//! `split_part(string, delimiter, n)` that walks the start of each value byte by byte.
//!
//! DataFusion's `split_part` finds each delimiter with a `memchr::memmem`
//! finder: one SIMD search per field up to the `n`th. On the short values
//! streaming queries split (URLs, paths, `a.b.c` names) each search costs
//! more to set up than the bytes it scans; in Nexmark q22 (three parts of
//! every bid's URL) those searches were a third of the query's time
//! (`BENCHMARKS.md`, "split_part and q22"). This function keeps DataFusion's
//! `split_part` (its signature, its results, its errors) and changes only
//! how the common case is computed:
//!
//! - a `Utf8` or `LargeUtf8` column, a constant one-byte delimiter and a
//!   constant positive position: each value is scanned once, up to the end
//!   of the field asked for, by a plain loop over its first [`SHORT`]
//!   bytes and by `memchr`'s iterator past them;
//! - everything else (`Utf8View`, a delimiter or position per row, a
//!   longer or empty delimiter, a negative, zero or NULL position) is
//!   DataFusion's own code, so its errors and corner cases are unchanged.
//!
//! A one-byte delimiter is ASCII, and an ASCII byte never occurs inside a
//! multi-byte UTF-8 character, so every field ends on a character boundary.
//! The tests compare this function with DataFusion's on generated strings
//! of every length class, with nulls, multi-byte characters and repeated
//! delimiters, for positions past the last field.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, GenericStringArray, GenericStringBuilder, OffsetSizeTrait,
};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::functions::string::split_part::SplitPartFunc;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF};

use crate::accelerated::{Accelerated, FastPath};

/// The first this many bytes of a value are scanned by a plain loop; the
/// rest by `memchr`, whose per-call setup pays off over long runs.
const SHORT: usize = 64;

/// The `split_part` a Sluice session plans with.
pub fn split_part_udf() -> ScalarUDF {
    SplitPart::udf()
}

/// DataFusion's `split_part` with a faster path for a constant one-byte
/// delimiter and a constant positive position (see the module docs).
type SplitPart = Accelerated<OneByteDelimiter>;

/// A string column, a constant one-byte delimiter and a constant
/// positive position.
struct OneByteDelimiter;

impl FastPath for OneByteDelimiter {
    type Inner = SplitPartFunc;

    fn compute(args: &[ColumnarValue]) -> Option<ArrayRef> {
        match args {
            [ColumnarValue::Array(values), ColumnarValue::Scalar(delimiter), ColumnarValue::Scalar(ScalarValue::Int64(Some(position)))] => {
                fast_path(values, delimiter, *position)
            }
            _ => None,
        }
    }
}

/// The fast path, or `None` where DataFusion's `split_part` should run.
fn fast_path(values: &ArrayRef, delimiter: &ScalarValue, position: i64) -> Option<ArrayRef> {
    let delimiter = match delimiter {
        ScalarValue::Utf8(Some(d))
        | ScalarValue::LargeUtf8(Some(d))
        | ScalarValue::Utf8View(Some(d)) => d,
        _ => return None,
    };
    let &[delimiter] = delimiter.as_bytes() else {
        return None;
    };
    // 1-based; zero and negative positions are DataFusion's.
    let index = usize::try_from(position).ok()?.checked_sub(1)?;
    match values.data_type() {
        DataType::Utf8 => Some(split_typed(values.as_string::<i32>(), delimiter, index)),
        DataType::LargeUtf8 => Some(split_typed(values.as_string::<i64>(), delimiter, index)),
        _ => None,
    }
}

fn split_typed<O: OffsetSizeTrait>(
    values: &GenericStringArray<O>,
    delimiter: u8,
    index: usize,
) -> ArrayRef {
    // Fields are usually a small part of their value: start from an
    // eighth of the input's bytes and let the builder grow past it.
    let bytes = values.value_data().len() / 8;
    let mut out = GenericStringBuilder::<O>::with_capacity(values.len(), bytes);
    for value in values.iter() {
        match value {
            None => out.append_null(),
            Some(s) => {
                let (start, end) = field(s.as_bytes(), delimiter, index);
                // On an ASCII delimiter's boundaries (see the module docs);
                // `get` keeps that an invariant rather than a panic.
                out.append_value(s.get(start..end).unwrap_or_default());
            }
        }
    }
    Arc::new(out.finish())
}

/// The byte range of field `index` (0-based) of `s` split at `delimiter`,
/// or an empty range when `s` has fewer fields. The first [`SHORT`] bytes
/// are walked by a plain loop (the fields asked for usually end there);
/// the rest, if the field goes on, by `memchr`.
fn field(s: &[u8], delimiter: u8, index: usize) -> (usize, usize) {
    let mut start = 0;
    let mut seen = 0;
    let head = s.len().min(SHORT);
    let tail = s.get(head..).unwrap_or_default();
    let found = s[..head]
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == delimiter)
        .map(|(i, _)| i);
    for i in found.chain(memchr::memchr_iter(delimiter, tail).map(|i| i + head)) {
        if seen == index {
            return (start, i);
        }
        seen += 1;
        start = i + 1;
    }
    if seen == index {
        (start, s.len())
    } else {
        (0, 0)
    }
}

#[cfg(test)]
#[path = "split_part_tests.rs"]
mod tests;
