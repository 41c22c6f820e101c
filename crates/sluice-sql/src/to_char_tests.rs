//! `to_char` against DataFusion's on every format specifier chrono
//! documents, every timestamp unit, nulls, and years on both sides of 0 to
//! 9999: the same strings, or the same error.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Date32Array, TimestampMicrosecondArray, TimestampMillisecondArray,
    TimestampNanosecondArray, TimestampSecondArray,
};
use arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::ScalarValue;
use datafusion::functions::datetime::to_char::ToCharFunc;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl};

use super::{piece, Format, ToChar};

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Every specifier of chrono's strftime table, the padding modifiers,
/// literal text, and formats chrono refuses.
const FORMATS: &[&str] = &[
    "%Y",
    "%C",
    "%y",
    "%q",
    "%m",
    "%b",
    "%B",
    "%h",
    "%d",
    "%e",
    "%a",
    "%A",
    "%w",
    "%u",
    "%U",
    "%W",
    "%G",
    "%g",
    "%V",
    "%j",
    "%D",
    "%x",
    "%F",
    "%v",
    "%H",
    "%k",
    "%I",
    "%l",
    "%P",
    "%p",
    "%M",
    "%S",
    "%f",
    "%.f",
    "%.3f",
    "%.6f",
    "%.9f",
    "%3f",
    "%6f",
    "%9f",
    "%R",
    "%T",
    "%X",
    "%r",
    "%Z",
    "%z",
    "%:z",
    "%::z",
    "%:::z",
    "%#z",
    "%c",
    "%+",
    "%s",
    "%t",
    "%n",
    "%%",
    "%-d",
    "%_d",
    "%0e",
    "%-m",
    "%_H",
    "%-Y",
    "%_Y",
    "%Y-%m-%d",
    "%H:%M",
    "%Y-%m-%d %H:%M:%S",
    "%d/%m/%Y at %H.%M.%S",
    "day %j of %Y",
    "hour %H  minute %M",
    "plain text",
    "",
    "ünï %Y ✓",
    "%Q",
    "%",
    "%Y-%",
    "%E",
    "%.2f",
    "%:",
    "%#",
];

/// Milliseconds since the epoch: before 1970, around it, Nexmark-like
/// times, a leap day, and years below 1000, below 0 and above 9999.
const MILLIS: &[i64] = &[
    0,
    1,
    -1,
    999,
    -86_400_000,
    1_436_918_400_000,
    1_436_918_412_345,
    1_709_164_800_000,   // 2024-02-29
    -62_135_596_800_000, // year 1
    -61_000_000_000_000, // year 37
    -62_200_000_000_000, // year -1
    253_402_300_799_999, // 9999-12-31 23:59:59.999
    253_402_300_800_000, // 10000-01-01
    300_000_000_000_000,
    -100_000_000_000_000,
];

/// Both functions on the same arguments: equal arrays, or both errors.
fn same(values: ArrayRef, format: &str) -> TestResult {
    let args = || ScalarFunctionArgs {
        args: vec![
            ColumnarValue::Array(Arc::clone(&values)),
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(format.to_string()))),
        ],
        arg_fields: vec![
            Arc::new(Field::new("t", values.data_type().clone(), true)),
            Arc::new(Field::new("f", DataType::Utf8, true)),
        ],
        number_rows: values.len(),
        return_field: Arc::new(Field::new("out", DataType::Utf8, true)),
        config_options: Arc::new(ConfigOptions::default()),
    };
    let ours = ToChar::default().invoke_with_args(args());
    let theirs = ToCharFunc::new().invoke_with_args(args());
    match (ours, theirs) {
        (Ok(a), Ok(b)) => {
            let (a, b) = (a.into_array(values.len())?, b.into_array(values.len())?);
            assert_eq!(
                a.as_ref(),
                b.as_ref(),
                "to_char over {:?} with {format:?}",
                values.data_type()
            );
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "format {format:?}"),
        (a, b) => panic!("format {format:?}: ours {a:?}, DataFusion's {b:?}"),
    }
    Ok(())
}

fn with_null(v: &[i64]) -> Vec<Option<i64>> {
    v.iter().copied().map(Some).chain([None]).collect()
}

#[test]
fn every_format_matches_datafusion_on_every_unit() -> TestResult {
    let ms = with_null(MILLIS);
    let scaled = |f: i64| -> Vec<Option<i64>> {
        ms.iter()
            .map(|v| v.and_then(|v| v.checked_mul(f)))
            .collect()
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampSecondArray::from(
            ms.iter()
                .map(|v| v.map(|v| v.div_euclid(1000)))
                .collect::<Vec<_>>(),
        )),
        Arc::new(TimestampMillisecondArray::from(ms.clone())),
        Arc::new(TimestampMicrosecondArray::from(scaled(1_000))),
        Arc::new(TimestampNanosecondArray::from(scaled(1_000_000))),
        // Not a timestamp: DataFusion's own path.
        Arc::new(Date32Array::from(vec![Some(0), Some(19_000), None])),
        // Zoned: DataFusion's own path.
        Arc::new(TimestampMillisecondArray::from(ms.clone()).with_timezone("+02:00")),
    ];
    for values in &columns {
        for format in FORMATS {
            same(Arc::clone(values), format)?;
        }
    }
    Ok(())
}

#[test]
fn random_times_match_datafusion() -> TestResult {
    // A fixed linear congruential sequence: reproducible without a seed file.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x
    };
    let nanos: Vec<Option<i64>> = (0..2000)
        .map(|_| {
            let r = next();
            (r % 17 != 0).then_some(r as i64)
        })
        .collect();
    let values: ArrayRef = Arc::new(TimestampNanosecondArray::from(nanos));
    for format in ["%Y-%m-%d", "%H:%M", "%Y-%m-%d %H:%M:%S%.3f", "%a %d %b %Y"] {
        same(Arc::clone(&values), format)?;
    }
    Ok(())
}

#[test]
fn the_digit_path_takes_exactly_the_zero_padded_fields() {
    let digits = |f: &str| Format::parse(f).map(|p| p.pieces.is_some());
    assert_eq!(digits("%Y-%m-%d %H:%M:%S"), Some(true));
    assert_eq!(digits("at %H h"), Some(true));
    assert_eq!(digits(""), Some(true));
    for other in ["%e", "%-d", "%_H", "%y", "%j", "%b", "%f", "%s", "%C"] {
        assert_eq!(digits(other), Some(false), "{other}");
    }
    assert!(Format::parse("%Q").is_none());
    assert!(piece(&chrono::format::Item::Error).is_none());
}

#[test]
fn scalar_and_per_row_formats_are_datafusions() -> TestResult {
    let values: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![Some(0), None]));
    let formats: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![
        Some("%Y"),
        Some("%H"),
    ]));
    let args = |v: ColumnarValue, f: ColumnarValue| ScalarFunctionArgs {
        args: vec![v, f],
        arg_fields: vec![
            Arc::new(Field::new("t", values.data_type().clone(), true)),
            Arc::new(Field::new("f", DataType::Utf8, true)),
        ],
        number_rows: 2,
        return_field: Arc::new(Field::new("out", DataType::Utf8, true)),
        config_options: Arc::new(ConfigOptions::default()),
    };
    let cases = [
        (
            ColumnarValue::Array(Arc::clone(&values)),
            ColumnarValue::Array(Arc::clone(&formats)),
        ),
        (
            ColumnarValue::Scalar(ScalarValue::TimestampMillisecond(Some(0), None)),
            ColumnarValue::Scalar(ScalarValue::Utf8(Some("%Y".into()))),
        ),
        (
            ColumnarValue::Array(Arc::clone(&values)),
            ColumnarValue::Scalar(ScalarValue::Utf8(None)),
        ),
    ];
    for (v, f) in cases {
        let ours = ToChar::default().invoke_with_args(args(v.clone(), f.clone()))?;
        let theirs = ToCharFunc::new().invoke_with_args(args(v, f))?;
        assert_eq!(ours.into_array(2)?.as_ref(), theirs.into_array(2)?.as_ref());
    }
    Ok(())
}
