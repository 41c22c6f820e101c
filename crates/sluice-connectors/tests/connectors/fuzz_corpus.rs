//! Writes the Parquet seed corpus of the `parquet` fuzz target
//! (`fuzz/corpus/parquet/`). Parquet is binary, so unlike the CSV and JSON
//! seeds its files are generated; the test is ignored and run by hand when
//! the seeds should change:
//!
//! ```text
//! cargo test -p sluice-connectors --test connectors write_parquet_seed_corpus -- --ignored
//! ```

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, LargeStringArray, StringArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow::datatypes::Int32Type;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::fuzz_inputs::corpus_dir;
use super::fuzz_structured::parquet_file;

/// Three rows of every column of the wide fixed schema, in its own types:
/// ordinary values, boundary values, and nulls.
fn all_types_batch() -> RecordBatch {
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "big",
            Arc::new(Int64Array::from(vec![Some(1), Some(i64::MAX), None])),
        ),
        (
            "int",
            Arc::new(Int32Array::from(vec![Some(2), Some(i32::MIN), None])),
        ),
        (
            "small",
            Arc::new(Int16Array::from(vec![Some(3), Some(i16::MIN), None])),
        ),
        (
            "tiny",
            Arc::new(Int8Array::from(vec![Some(4), Some(i8::MIN), None])),
        ),
        (
            "ubig",
            Arc::new(UInt64Array::from(vec![Some(5), Some(u64::MAX), None])),
        ),
        (
            "uint",
            Arc::new(UInt32Array::from(vec![Some(6), Some(u32::MAX), None])),
        ),
        (
            "usmall",
            Arc::new(UInt16Array::from(vec![Some(7), Some(u16::MAX), None])),
        ),
        (
            "utiny",
            Arc::new(UInt8Array::from(vec![Some(8), Some(u8::MAX), None])),
        ),
        (
            "dbl",
            Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::MAX), None])),
        ),
        (
            "flt",
            Arc::new(Float32Array::from(vec![Some(2.5), Some(f32::NAN), None])),
        ),
        (
            "flag",
            Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
        ),
        (
            "name",
            Arc::new(StringArray::from(vec![Some("alice"), Some("é中😀"), None])),
        ),
        (
            "long_name",
            Arc::new(LargeStringArray::from(vec![
                Some("a long name"),
                Some(""),
                None,
            ])),
        ),
        (
            "day",
            Arc::new(Date32Array::from(vec![Some(19844), Some(i32::MIN), None])),
        ),
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from(vec![
                Some(1_714_564_800_650),
                Some(i64::MIN),
                None,
            ])),
        ),
        (
            "ts_utc",
            Arc::new(
                TimestampMillisecondArray::from(vec![Some(1_714_564_800_000), Some(0), None])
                    .with_timezone("UTC"),
            ),
        ),
        (
            "ts_s",
            Arc::new(TimestampSecondArray::from(vec![
                Some(1_714_564_800),
                Some(i64::MAX),
                None,
            ])),
        ),
        (
            "ts_us",
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(1_714_564_800_123_456), Some(1), None])
                    .with_timezone("+05:30"),
            ),
        ),
        (
            "ts_ns",
            Arc::new(
                TimestampNanosecondArray::from(vec![
                    Some(1_710_037_800_000_000_000),
                    Some(-1),
                    None,
                ])
                .with_timezone("America/New_York"),
            ),
        ),
        (
            "amount",
            decimal(vec![Some(1234), Some(-9_999_999_999), None], 10, 2),
        ),
        (
            "wide",
            decimal(
                vec![
                    Some(12_345_678_900_123_456_789),
                    Some(-(10i128.pow(38) - 1)),
                    None,
                ],
                38,
                10,
            ),
        ),
        (
            "whole",
            decimal(vec![Some(99_999), Some(-99_999), None], 5, 0),
        ),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn decimal(values: Vec<Option<i128>>, precision: u8, scale: i8) -> ArrayRef {
    Arc::new(
        Decimal128Array::from(values)
            .with_precision_and_scale(precision, scale)
            .unwrap(),
    )
}

/// The narrow columns in file types that need adapting: narrower integers,
/// another timestamp unit and zone, dictionary strings, a narrower decimal.
fn adapted_batch(rows: usize) -> RecordBatch {
    let keys = Int32Array::from_iter((0..rows).map(|i| Some((i % 3) as i32)));
    let values = StringArray::from(vec!["web", "api", "app"]);
    let names = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap();
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "big",
            Arc::new(Int32Array::from_iter_values(
                (0..rows).map(|i| i as i32 * 7),
            )),
        ),
        ("name", Arc::new(names)),
        (
            "ts",
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    (0..rows).map(|i| 1_714_564_800_000_000 + i as i64 * 1_500_000),
                )
                .with_timezone("UTC"),
            ),
        ),
        (
            "amount",
            decimal((0..rows).map(|i| Some(i as i128 * 101)).collect(), 8, 2),
        ),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn write(name: &str, batch: &RecordBatch, props: WriterProperties) {
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    std::fs::write(corpus_dir("parquet").join(name), out).unwrap();
}

fn props(compression: Compression) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(compression)
        .build()
}

#[test]
#[ignore = "writes the committed seed corpus; run by hand"]
fn write_parquet_seed_corpus() {
    std::fs::create_dir_all(corpus_dir("parquet")).unwrap();
    let all = all_types_batch();
    write("all_types_snappy.parquet", &all, props(Compression::SNAPPY));
    write(
        "all_types_plain.parquet",
        &all,
        props(Compression::UNCOMPRESSED),
    );
    write(
        "all_types_zstd.parquet",
        &all,
        props(Compression::ZSTD(Default::default())),
    );
    write("all_types_lz4.parquet", &all, props(Compression::LZ4_RAW));
    let paged = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_max_row_group_row_count(Some(1))
        .set_data_page_row_count_limit(1)
        .build();
    write("all_types_row_groups.parquet", &all, paged);
    write(
        "adapted_types.parquet",
        &adapted_batch(40),
        props(Compression::SNAPPY),
    );
    let groups = WriterProperties::builder()
        .set_max_row_group_row_count(Some(7))
        .set_data_page_row_count_limit(3)
        .build();
    write("adapted_types_groups.parquet", &adapted_batch(30), groups);
    let missing = all.project(&[0, 11, 14]).unwrap();
    write(
        "narrow_missing_amount.parquet",
        &missing,
        props(Compression::UNCOMPRESSED),
    );
    let wrong = RecordBatch::try_from_iter(vec![
        (
            "big",
            Arc::new(StringArray::from(vec!["1", "2"])) as ArrayRef,
        ),
        ("name", Arc::new(Int64Array::from(vec![1, 2]))),
        ("ts", Arc::new(StringArray::from(vec!["2024-05-01", "x"]))),
        ("amount", Arc::new(Float64Array::from(vec![1.5, 2.5]))),
    ])
    .unwrap();
    write(
        "wrong_types.parquet",
        &wrong,
        props(Compression::UNCOMPRESSED),
    );
    let empty = RecordBatch::new_empty(all.schema());
    write("no_rows.parquet", &empty, props(Compression::UNCOMPRESSED));
    // Overflowing conversions: seconds that do not fit in nanoseconds, and
    // an unsigned value past i64.
    let overflow = RecordBatch::try_from_iter(vec![
        (
            "big",
            Arc::new(UInt32Array::from(vec![u32::MAX, 0])) as ArrayRef,
        ),
        ("name", Arc::new(LargeStringArray::from(vec!["x", "y"]))),
        (
            "ts",
            Arc::new(TimestampSecondArray::from(vec![
                i64::MAX / 10,
                i64::MIN / 10,
            ])),
        ),
        ("amount", decimal(vec![Some(1), None], 3, 0)),
    ])
    .unwrap();
    write(
        "overflow_conversions.parquet",
        &overflow,
        props(Compression::SNAPPY),
    );
    // A few of the structured random files, as seeds for the same shapes.
    for seed in 0..4u8 {
        let columns: Vec<(&str, u8)> = ["big", "name", "ts", "amount", "flag", "day"]
            .into_iter()
            .zip([seed, seed + 3, seed + 14, seed + 17, 9, 13])
            .collect();
        let bytes = parquet_file(&columns, 12, i64::from(seed) * 7919, seed, 4, seed % 2 == 0);
        std::fs::write(
            corpus_dir("parquet").join(format!("random_{seed}.parquet")),
            bytes,
        )
        .unwrap();
    }
}
