//! Two-phase file sink: epochs become visible only on commit; commit is
//! idempotent across crashes.

use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_connectors::{EpochFileSink, FileFormat};

fn batch(values: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
}

fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn epochs_are_visible_only_after_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let mut sink =
        EpochFileSink::create(&path, FileFormat::Csv, batch(&[]).schema(), false).unwrap();
    assert_eq!(read(&path), "v\n");
    sink.write(&batch(&[1, 2])).unwrap();
    assert_eq!(read(&path), "v\n", "staged rows are not visible");
    let e0 = sink.pre_commit().unwrap();
    sink.write(&batch(&[3])).unwrap();
    let e1 = sink.pre_commit().unwrap();
    assert_eq!(read(&path), "v\n");
    sink.commit(std::slice::from_ref(&e0)).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n");
    sink.commit(&[e0, e1]).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n", "re-committing is idempotent");
}

#[test]
fn recovery_recommits_sealed_epochs_and_discards_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let schema = batch(&[]).schema();
    let mut sink = EpochFileSink::create(&path, FileFormat::Csv, schema.clone(), false).unwrap();
    sink.write(&batch(&[1])).unwrap();
    let e0 = sink.pre_commit().unwrap();
    sink.commit(std::slice::from_ref(&e0)).unwrap();
    let committed_len = sink.sealed_len();
    sink.write(&batch(&[2, 3])).unwrap();
    let e1 = sink.pre_commit().unwrap();
    // A crash in the middle of appending epoch 1: half its bytes reached the file.
    let staged = std::fs::read(e1.staged.as_ref().unwrap()).unwrap();
    let mut partial = std::fs::read(&path).unwrap();
    partial.extend_from_slice(&staged[..staged.len() / 2]);
    std::fs::write(&path, partial).unwrap();
    // Epoch 2 was open (never sealed into a checkpoint).
    sink.write(&batch(&[4])).unwrap();
    drop(sink);
    let mut recovered = EpochFileSink::recover(
        &path,
        FileFormat::Csv,
        schema,
        false,
        committed_len,
        std::slice::from_ref(&e1),
        e1.epoch + 1,
    )
    .unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".epoch-"))
        .collect();
    assert!(leftovers.is_empty(), "orphaned staged files are removed");
    recovered.write(&batch(&[5])).unwrap();
    let e2 = recovered.pre_commit().unwrap();
    recovered.commit(&[e2]).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n5\n");
}

#[test]
fn direct_mode_appends_at_once_and_parquet_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    let mut sink =
        EpochFileSink::create(&path, FileFormat::JsonLines, batch(&[]).schema(), true).unwrap();
    sink.write(&batch(&[7])).unwrap();
    assert_eq!(read(&path), "{\"v\":7}\n");
    let err = EpochFileSink::create(
        &dir.path().join("x.parquet"),
        FileFormat::Parquet,
        batch(&[]).schema(),
        false,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("cannot commit epochs"), "{err}");
}
