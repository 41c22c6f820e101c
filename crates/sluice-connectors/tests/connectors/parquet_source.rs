//! Parquet source: projection by name, lossless casts, type errors.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::*;
use parquet::arrow::ArrowWriter;
use sluice_connectors::{FileFormat, FileSourceReader, OnError};

use crate::support::*;

const T0_MS: i64 = 1_704_067_200_000;

/// Write `rows` rows: id Int32, name Utf8, ts Timestamp(ms), in small row
/// groups so reads cross row-group boundaries.
pub(crate) fn write_parquet(path: &std::path::Path, rows: i32) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(3))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).unwrap();
    let ids: Vec<i32> = (0..rows).collect();
    let names: Vec<Option<String>> = (0..rows)
        .map(|i| (i % 2 == 0).then(|| format!("n{i}")))
        .collect();
    let ts: Vec<i64> = (0..rows).map(|i| T0_MS + i64::from(i)).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(ids)),
        Arc::new(StringArray::from(names)),
        Arc::new(TimestampMillisecondArray::from(ts)),
    ];
    writer
        .write(&RecordBatch::try_new(schema, columns).unwrap())
        .unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_projects_by_name_and_casts() {
    let dir = tempfile::tempdir().unwrap();
    write_parquet(&dir.path().join("p.parquet"), 7);
    // Different order, a subset, and wider/other-unit types.
    let declared = schema(&[
        (
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ),
        ("id", DataType::Int64),
    ]);
    let cfg = config(
        dir.path(),
        "p.parquet",
        FileFormat::Parquet,
        declared.clone(),
        2,
        OnError::Fail,
    );
    let mut reader = FileSourceReader::open(cfg).unwrap();
    let batches = read_all(&mut reader, 2);
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
        [2, 2, 2, 1]
    );
    let all = arrow::compute::concat_batches(&declared, &batches).unwrap();
    assert_eq!(all.schema(), declared);
    assert_eq!(i64s(&all, "id"), (0..7).map(Some).collect::<Vec<_>>());
    assert_eq!(
        prim::<TimestampMicrosecondType>(&all, "ts"),
        (0..7).map(|i| Some((T0_MS + i) * 1000)).collect::<Vec<_>>()
    );
    assert_eq!(reader.position().rows_consumed, 7);
}

#[test]
fn parquet_resume_with_offset() {
    let dir = tempfile::tempdir().unwrap();
    write_parquet(&dir.path().join("p.parquet"), 7);
    let declared = schema(&[("id", DataType::Int64), ("name", DataType::Utf8)]);
    let cfg = || {
        config(
            dir.path(),
            "p.parquet",
            FileFormat::Parquet,
            declared.clone(),
            4,
            OnError::Fail,
        )
    };
    let mut reader = FileSourceReader::open(cfg()).unwrap();
    let first = reader.next_batch().unwrap().unwrap();
    assert_eq!(i64s(&first, "id"), (0..4).map(Some).collect::<Vec<_>>());
    let pos = reader.position();
    assert_eq!(pos.rows_consumed, 4);
    let mut resumed = FileSourceReader::open_at(cfg(), &pos).unwrap();
    let tail = read_all(&mut resumed, 4);
    assert_eq!(tail.len(), 1);
    assert_eq!(i64s(&tail[0], "id"), [Some(4), Some(5), Some(6)]);
    assert_eq!(
        strs(&tail[0], "name"),
        [Some("n4".into()), None, Some("n6".into())]
    );
}

#[test]
fn parquet_type_mismatch_and_missing_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.parquet");
    write_parquet(&path, 3);
    let bad = schema(&[("name", DataType::Int64)]);
    let err = open_err(config(
        dir.path(),
        "p.parquet",
        FileFormat::Parquet,
        bad,
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-003");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 'name' is declared as Int64 but the file has Utf8, which cannot be \
             converted losslessly",
            path.display()
        )
    );
    let narrowing = schema(&[("id", DataType::Int16)]);
    let err = open_err(config(
        dir.path(),
        "p.parquet",
        FileFormat::Parquet,
        narrowing,
        10,
        OnError::Fail,
    ));
    assert!(err
        .to_string()
        .contains("declared as Int16 but the file has Int32"));

    let missing = schema(&[("id", DataType::Int32), ("price", DataType::Float64)]);
    let err = open_err(config(
        dir.path(),
        "p.parquet",
        FileFormat::Parquet,
        missing,
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 'price' is declared but missing from the parquet file",
            path.display()
        )
    );
}
