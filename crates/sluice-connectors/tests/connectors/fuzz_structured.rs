//! Structured random inputs for the same entry point as the fuzz targets
//! ([`fuzzing::check_file_input`]): CSV and JSON-lines files whose headers
//! and keys are drawn from the fixed schemas' column names and whose values
//! come from a pool of boundary, malformed and awkward tokens, and Parquet
//! files written from random columns of random (convertible or not) types
//! with random writer settings. Byte-level mutation rarely gets past a
//! header or a footer; these reach the value decoders and type adaptation.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, LargeStringArray, StringArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow::datatypes::{Field, Int32Type, Schema};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sluice_connectors::fuzzing;
use sluice_connectors::FileFormat;

use super::fuzz_inputs::{cases, run_limit, with_watchdog};

/// Values for any column: valid for some types, out of range or malformed
/// for others.
const TOKENS: &[&str] = &[
    "",
    "0",
    "-0",
    "1",
    "-1",
    "+7",
    "127",
    "128",
    "-129",
    "255",
    "256",
    "65535",
    "-32769",
    "2147483647",
    "2147483648",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "170141183460469231731687303715884105728",
    "1.5",
    "-.5",
    "1e308",
    "1e309",
    "-1e-400",
    "3.4028236e38",
    "NaN",
    "inf",
    "-Infinity",
    "true",
    "FALSE",
    "t",
    "yes",
    "null",
    "NULL",
    "12.34",
    "99999999.995",
    "-99999999.99",
    "0.00000000001",
    "1234567890123456789012345678.0123456789",
    "99999999999999999999999999999999999999999",
    "1e2",
    ".",
    "-",
    "2024-05-01",
    "2024-02-30",
    "0000-01-01",
    "-9999-12-31",
    "+275760-09-13",
    "2024-05-01 12:00:00",
    "2024-05-01T12:00:00.123456789Z",
    "2024-05-01T12:00:00+14:00",
    "2024-05-01 12:00:00 -0530",
    "2024-03-10 02:30:00",
    "2024-11-03 01:30:00",
    "1677-09-21 00:12:43.145224191",
    "2262-04-11 23:47:16.854775808",
    "9999-12-31 23:59:59.999999999",
    "1714564800000",
    "2024-05-01 24:00:00",
    "2024-05-01 12:60:00",
    "12:00:00",
    "alice",
    "é中😀",
    "\"quoted\"",
    "\"a,b\"",
    "\"multi\nline\"",
    "\"unterminated",
    "\"\"\"\"",
    "a\"b",
    " padded ",
    "\t",
];

const NAMES: &[&str] = &[
    "big",
    "int",
    "small",
    "tiny",
    "ubig",
    "uint",
    "usmall",
    "utiny",
    "dbl",
    "flt",
    "flag",
    "name",
    "long_name",
    "day",
    "ts",
    "ts_utc",
    "ts_s",
    "ts_us",
    "ts_ns",
    "amount",
    "wide",
    "whole",
    "extra",
    "",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        9 => prop::sample::select(TOKENS).prop_map(str::to_string),
        1 => "[ -~]{0,12}",
    ]
}

/// A header: usually every column of the narrow schema plus others, in any
/// order; sometimes any names at all.
fn header() -> impl Strategy<Value = Vec<String>> {
    let names = prop::sample::subsequence(NAMES, 0..NAMES.len());
    (names, any::<bool>())
        .prop_map(|(mut names, narrow)| {
            if narrow {
                for n in ["big", "name", "ts", "amount"] {
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
            names.into_iter().map(str::to_string).collect::<Vec<_>>()
        })
        .prop_shuffle()
}

fn csv_file() -> impl Strategy<Value = Vec<u8>> {
    let rows = prop::collection::vec(prop::collection::vec(token(), 0..26), 0..12);
    (header(), rows, any::<bool>(), any::<bool>()).prop_map(|(header, rows, crlf, full)| {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut out = header.join(",");
        for mut row in rows {
            // Mostly rows of the header's width, so records reach the values.
            if full {
                row.resize(header.len(), String::new());
            }
            out.push_str(eol);
            out.push_str(&row.join(","));
        }
        out.into_bytes()
    })
}

/// A JSON value: a token as a string, as a bare literal when it is one, or
/// a nested value.
fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => token().prop_map(|t| serde_json_string(&t)),
        4 => prop::sample::select(json_literals()),
        1 => Just("[1, {\"a\": null}]".to_string()),
        1 => Just("{\"nested\": {\"x\": [true]}}".to_string()),
    ]
}

/// The tokens that are JSON literals on their own (numbers, booleans, null).
fn json_literals() -> Vec<String> {
    TOKENS
        .iter()
        .filter(|t| serde_json::from_str::<serde_json::Value>(t).is_ok())
        .map(|t| t.to_string())
        .collect()
}

fn serde_json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn json_file() -> impl Strategy<Value = Vec<u8>> {
    let row = prop::collection::vec((prop::sample::select(NAMES), json_value()), 0..26);
    prop::collection::vec(row, 0..12).prop_map(|rows| {
        let mut out = String::new();
        for row in rows {
            let fields: Vec<String> = row
                .iter()
                .map(|(k, v)| format!("{}: {v}", serde_json_string(k)))
                .collect();
            out.push('{');
            out.push_str(&fields.join(", "));
            out.push_str("}\n");
        }
        out.into_bytes()
    })
}

/// A column of `rows` values of one of several file types, for `name`.
fn parquet_column(kind: u8, rows: usize, seed: i64) -> ArrayRef {
    let ints = |i: usize| seed.wrapping_mul(i as i64 + 1).wrapping_add(i as i64);
    let valid = |i: usize| !(seed as usize).wrapping_add(i).is_multiple_of(5);
    match kind % 18 {
        0 => Arc::new(Int64Array::from_iter(
            (0..rows).map(|i| valid(i).then(|| ints(i))),
        )),
        1 => Arc::new(Int32Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as i32)),
        )),
        2 => Arc::new(Int16Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as i16)),
        )),
        3 => Arc::new(Int8Array::from_iter((0..rows).map(|i| Some(ints(i) as i8)))),
        4 => Arc::new(UInt64Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as u64)),
        )),
        5 => Arc::new(UInt32Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as u32)),
        )),
        6 => Arc::new(UInt8Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as u8)),
        )),
        7 => Arc::new(Float64Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as f64 / 3.0)),
        )),
        8 => Arc::new(Float32Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as f32)),
        )),
        9 => Arc::new(BooleanArray::from_iter(
            (0..rows).map(|i| valid(i).then_some(i % 2 == 0)),
        )),
        10 => Arc::new(StringArray::from_iter(
            (0..rows).map(|i| valid(i).then(|| ints(i).to_string())),
        )),
        11 => Arc::new(LargeStringArray::from_iter(
            (0..rows).map(|i| Some(format!("é{i}"))),
        )),
        12 => {
            let keys = Int32Array::from_iter((0..rows).map(|i| Some((i % 3) as i32)));
            let values = StringArray::from(vec!["a", "bb", "ccc"]);
            Arc::new(DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap())
        }
        13 => Arc::new(Date32Array::from_iter(
            (0..rows).map(|i| Some(ints(i) as i32)),
        )),
        14 => Arc::new(TimestampMillisecondArray::from_iter(
            (0..rows).map(|i| Some(ints(i))),
        )),
        15 => Arc::new(
            TimestampSecondArray::from_iter((0..rows).map(|i| Some(ints(i))))
                .with_timezone("Asia/Kolkata"),
        ),
        16 if seed % 2 == 0 => Arc::new(TimestampMicrosecondArray::from_iter(
            (0..rows).map(|i| Some(ints(i))),
        )),
        16 => Arc::new(
            TimestampNanosecondArray::from_iter((0..rows).map(|i| Some(ints(i))))
                .with_timezone("UTC"),
        ),
        _ => {
            let precision = 1 + (seed.unsigned_abs() % 38) as u8;
            let scale = (seed.unsigned_abs() % u64::from(precision + 1)) as i8;
            let bound = 10i128.pow(u32::from(precision)) - 1;
            Arc::new(
                Decimal128Array::from_iter((0..rows).map(|i| Some(i128::from(ints(i)) % bound)))
                    .with_precision_and_scale(precision, scale)
                    .unwrap(),
            )
        }
    }
}

pub fn parquet_file(
    columns: &[(&str, u8)],
    rows: usize,
    seed: i64,
    codec: u8,
    group_rows: usize,
    dictionary: bool,
) -> Vec<u8> {
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, kind)| parquet_column(*kind, rows, seed))
        .collect();
    let fields: Vec<Field> = columns
        .iter()
        .zip(&arrays)
        .map(|((name, _), a)| Field::new(*name, a.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    let batch = RecordBatch::try_new_with_options(Arc::clone(&schema), arrays, &options).unwrap();
    let compression = match codec % 4 {
        0 => Compression::UNCOMPRESSED,
        1 => Compression::SNAPPY,
        2 => Compression::ZSTD(Default::default()),
        _ => Compression::LZ4_RAW,
    };
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(group_rows))
        .set_data_page_row_count_limit(2)
        .set_dictionary_enabled(dictionary)
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

fn run<S: Strategy<Value = Vec<u8>>>(
    format: FileFormat,
    default_cases: u32,
    strategy: impl FnOnce() -> S + Send + 'static,
) {
    with_watchdog(run_limit(Duration::from_secs(120)), move || {
        let strategy = strategy();
        let mut runner = TestRunner::new(Config {
            cases: cases(default_cases),
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&strategy, |input| {
                fuzzing::check_file_input(format, &input);
                Ok(())
            })
            .unwrap();
    });
}

#[test]
fn structured_csv_reads_cleanly() {
    run(FileFormat::Csv, 256, csv_file);
}

#[test]
fn structured_json_reads_cleanly() {
    run(FileFormat::JsonLines, 256, json_file);
}

#[test]
fn structured_parquet_reads_cleanly() {
    run(FileFormat::Parquet, 128, parquet_strategy);
}

fn parquet_strategy() -> impl Strategy<Value = Vec<u8>> {
    let names = prop::sample::subsequence(NAMES, 0..NAMES.len());
    (
        names,
        prop::collection::vec(any::<u8>(), NAMES.len()),
        0usize..40,
        any::<i64>(),
        any::<u8>(),
        1usize..8,
        any::<bool>(),
    )
        .prop_map(
            |(names, kinds, rows, seed, codec, group_rows, dictionary)| {
                let columns: Vec<(&str, u8)> = names.into_iter().zip(kinds).collect();
                parquet_file(&columns, rows, seed, codec, group_rows, dictionary)
            },
        )
}
