//! File sink: atomic publication, exact output, empty files.

use std::path::Path;
use std::sync::Arc;

use arrow::array::TimestampMillisecondArray;
use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::*;
use sluice_connectors::{FileFormat, FileSinkWriter, FileSourceReader, OnError};

use crate::support::*;

fn sample_schema() -> SchemaRef {
    schema(&[
        ("id", DataType::Int64),
        ("name", DataType::Utf8),
        ("ts", DataType::Timestamp(TimeUnit::Millisecond, None)),
        ("price", DataType::Float64),
    ])
}

fn sample_batch() -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![1, 2])),
        Arc::new(StringArray::from(vec![Some("a,b"), Some("x")])),
        Arc::new(TimestampMillisecondArray::from(vec![
            1_704_067_210_000,
            1_704_067_200_250,
        ])),
        Arc::new(Float64Array::from(vec![Some(1.5), None])),
    ];
    RecordBatch::try_new(sample_schema(), columns).unwrap()
}

/// Names of all entries in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn csv_sink_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let mut sink = FileSinkWriter::create(&path, FileFormat::Csv, sample_schema()).unwrap();
    sink.write(&sample_batch()).unwrap();
    sink.write(&sample_batch().slice(0, 1)).unwrap();
    assert_eq!(sink.rows_written(), 3);
    assert_eq!(sink.finish().unwrap(), 3);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "id,name,ts,price\n\
         1,\"a,b\",2024-01-01T00:00:10,1.5\n\
         2,x,2024-01-01T00:00:00.250,\n\
         1,\"a,b\",2024-01-01T00:00:10,1.5\n"
    );
}

#[test]
fn json_sink_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let mut sink = FileSinkWriter::create(&path, FileFormat::JsonLines, sample_schema()).unwrap();
    sink.write(&sample_batch()).unwrap();
    assert_eq!(sink.finish().unwrap(), 2);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"id\":1,\"name\":\"a,b\",\"ts\":\"2024-01-01T00:00:10\",\"price\":1.5}\n\
         {\"id\":2,\"name\":\"x\",\"ts\":\"2024-01-01T00:00:00.250\"}\n"
    );
}

#[test]
fn sink_renames_columns_to_declared_schema_and_rejects_wrong_types() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("renamed.csv");
    let declared = schema(&[("total", DataType::Int64)]);
    let mut sink = FileSinkWriter::create(&path, FileFormat::Csv, declared).unwrap();
    let other = RecordBatch::try_new(
        schema(&[("sum(x)", DataType::Int64)]),
        vec![Arc::new(Int64Array::from(vec![5])) as ArrayRef],
    )
    .unwrap();
    sink.write(&other).unwrap();
    let err = sink.write(&sample_batch()).unwrap_err();
    assert_eq!(err.code(), "SLC-CONN-003");
    sink.finish().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "total\n5\n");
}

#[test]
fn sink_is_atomic_finish_abort_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("a/b");
    let path = sub.join("data.csv");

    // Parent directories are created; until finish only a hidden temp file
    // exists.
    let mut sink = FileSinkWriter::create(&path, FileFormat::Csv, sample_schema()).unwrap();
    sink.write(&sample_batch()).unwrap();
    assert!(!path.exists());
    let names = listing(&sub);
    assert_eq!(names.len(), 1);
    let prefix = format!(".data.csv.tmp-{}-", std::process::id());
    assert!(names[0].starts_with(&prefix), "{names:?}");
    sink.finish().unwrap();
    assert_eq!(listing(&sub), ["data.csv"]);

    // Abort removes the temp file and leaves the existing file untouched.
    let before = std::fs::read(&path).unwrap();
    let mut sink = FileSinkWriter::create(&path, FileFormat::Csv, sample_schema()).unwrap();
    sink.write(&sample_batch().slice(0, 1)).unwrap();
    assert_eq!(listing(&sub).len(), 2);
    sink.abort().unwrap();
    assert_eq!(listing(&sub), ["data.csv"]);
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // Dropping without finish behaves like abort.
    let other = sub.join("dropped.parquet");
    {
        let mut sink =
            FileSinkWriter::create(&other, FileFormat::Parquet, sample_schema()).unwrap();
        sink.write(&sample_batch()).unwrap();
        assert_eq!(listing(&sub).len(), 2);
    }
    assert_eq!(listing(&sub), ["data.csv"]);
}

#[test]
fn empty_sinks_produce_valid_files() {
    let dir = tempfile::tempdir().unwrap();
    let schema = sample_schema();
    for (name, format) in [
        ("e.csv", FileFormat::Csv),
        ("e.jsonl", FileFormat::JsonLines),
        ("e.parquet", FileFormat::Parquet),
    ] {
        let path = dir.path().join(name);
        let sink = FileSinkWriter::create(&path, format, schema.clone()).unwrap();
        assert_eq!(sink.finish().unwrap(), 0);
        let mut reader = FileSourceReader::open(config(
            dir.path(),
            name,
            format,
            schema.clone(),
            10,
            OnError::Fail,
        ))
        .unwrap();
        assert!(reader.next_batch().unwrap().is_none(), "{name}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("e.csv")).unwrap(),
        "id,name,ts,price\n"
    );
    assert_eq!(std::fs::read(dir.path().join("e.jsonl")).unwrap(), b"");
    let file = std::fs::File::open(dir.path().join("e.parquet")).unwrap();
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    assert_eq!(builder.metadata().file_metadata().num_rows(), 0);
    assert_eq!(builder.schema().fields(), schema.fields());
}

#[test]
fn parquet_sink_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.parquet");
    let mut sink = FileSinkWriter::create(&path, FileFormat::Parquet, sample_schema()).unwrap();
    sink.write(&sample_batch()).unwrap();
    sink.write(&sample_batch()).unwrap();
    assert_eq!(sink.finish().unwrap(), 4);
    let batch = read_one(config(
        dir.path(),
        "rt.parquet",
        FileFormat::Parquet,
        sample_schema(),
        10,
        OnError::Fail,
    ));
    let expected =
        arrow::compute::concat_batches(&sample_schema(), &[sample_batch(), sample_batch()])
            .unwrap();
    assert_eq!(batch, expected);
}

/// Temp files of an earlier process that died are removed when a sink of
/// the same file opens; those of live processes (this one, or any other
/// that runs), of other files, or with names that are not ours stay.
#[test]
fn stale_temp_files_of_dead_processes_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.csv");
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let mut live = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let live_pid = live.id();
    let own = std::process::id();
    let stale = [
        format!(".data.csv.tmp-{dead_pid}-0"),
        format!(".data.csv.tmp-{dead_pid}-17"),
    ];
    let kept = [
        format!(".data.csv.tmp-{live_pid}-3"),
        format!(".data.csv.tmp-{own}-999999"),
        format!(".other.csv.tmp-{dead_pid}-0"),
        format!(".data.csv.tmp-{dead_pid}-x"),
        ".data.csv.tmp-garbage".to_string(),
        "data.csv".to_string(),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.path().join(name), "old").unwrap();
    }
    let sink = FileSinkWriter::create(&path, FileFormat::Csv, sample_schema()).unwrap();
    let _ = live.kill();
    let _ = live.wait();
    // The sink's own new temp file is there too.
    let own_old = format!(".data.csv.tmp-{own}-999999");
    let own_prefix = format!(".data.csv.tmp-{own}-");
    let (new, rest): (Vec<String>, Vec<String>) = listing(dir.path())
        .into_iter()
        .partition(|n| n.starts_with(&own_prefix) && *n != own_old);
    assert_eq!(new.len(), 1, "{new:?}");
    let mut expected: Vec<String> = kept.to_vec();
    expected.sort();
    assert_eq!(rest, expected);
    sink.abort().unwrap();
}
