//! Two-phase file sink: epochs become visible only on commit; commit is
//! idempotent across crashes.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_connectors::{EpochFileSink, EpochRecord, FileFormat};

fn batch(values: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
}

fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// A transactional CSV sink at `dir/out.csv` whose first epoch (the row 1)
/// is committed, with that epoch's record.
fn one_committed_epoch(dir: &std::path::Path) -> (PathBuf, SchemaRef, EpochFileSink, EpochRecord) {
    let path = dir.join("out.csv");
    let schema = batch(&[]).schema();
    let mut sink = EpochFileSink::create(&path, FileFormat::Csv, schema.clone(), false).unwrap();
    sink.write(&batch(&[1])).unwrap();
    let e0 = sink.pre_commit().unwrap();
    sink.commit(std::slice::from_ref(&e0)).unwrap();
    (path, schema, sink, e0)
}

#[test]
fn epochs_are_visible_only_after_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let mut sink =
        EpochFileSink::create(&path, FileFormat::Csv, batch(&[]).schema(), false).unwrap();
    assert!(
        !path.exists(),
        "no file (not even a header) before a commit"
    );
    sink.write(&batch(&[1, 2])).unwrap();
    assert!(!path.exists(), "staged rows are not visible");
    let e0 = sink.pre_commit().unwrap();
    sink.write(&batch(&[3])).unwrap();
    let e1 = sink.pre_commit().unwrap();
    assert!(!path.exists());
    sink.commit(std::slice::from_ref(&e0)).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n");
    sink.commit(&[e0, e1]).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n", "re-committing is idempotent");
}

#[test]
fn recovery_recommits_sealed_epochs_and_discards_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (path, schema, mut sink, _) = one_committed_epoch(dir.path());
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

/// A transactional sink leaves the final path alone until its first epoch
/// with rows commits: an empty epoch, an abort, or an error before then
/// leave an earlier run's file as it was; the first commit replaces it.
#[test]
fn the_final_file_appears_with_the_first_committed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    std::fs::write(&path, "v\n99\n").unwrap();
    let schema = batch(&[]).schema();
    let mut sink = EpochFileSink::create(&path, FileFormat::Csv, schema.clone(), false).unwrap();
    let empty = sink.pre_commit().unwrap();
    sink.commit(std::slice::from_ref(&empty)).unwrap();
    assert_eq!(
        read(&path),
        "v\n99\n",
        "an epoch without rows commits nothing"
    );
    sink.write(&batch(&[1])).unwrap();
    sink.rollback_open_epoch().unwrap();
    assert_eq!(
        read(&path),
        "v\n99\n",
        "a rolled-back epoch leaves the file alone"
    );
    sink.write(&batch(&[2])).unwrap();
    let e = sink.pre_commit().unwrap();
    assert_eq!(e.final_len_before, 0, "the first epoch starts the file");
    sink.commit(std::slice::from_ref(&e)).unwrap();
    assert_eq!(read(&path), "v\n2\n");
    // Recovery from a checkpoint that committed nothing leaves no file.
    let fresh = dir.path().join("fresh.csv");
    let sink =
        EpochFileSink::recover(&fresh, FileFormat::Csv, schema.clone(), false, 0, &[], 3).unwrap();
    assert!(!fresh.exists());
    // A clean close of a sink that committed no rows publishes a header-only file.
    assert_eq!(sink.close().unwrap(), 0);
    assert_eq!(read(&fresh), "v\n");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        names.is_empty(),
        "no temp or staged file is left: {names:?}"
    );
}

/// Recovery after a crash between the durable checkpoint and the first
/// commit: the sealed first epoch is committed again and creates the file.
#[test]
fn recovery_commits_the_first_epoch_and_creates_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    let schema = batch(&[]).schema();
    let mut sink =
        EpochFileSink::create(&path, FileFormat::JsonLines, schema.clone(), false).unwrap();
    sink.write(&batch(&[4, 5])).unwrap();
    let e0 = sink.pre_commit().unwrap();
    drop(sink);
    assert!(!path.exists());
    EpochFileSink::recover(
        &path,
        FileFormat::JsonLines,
        schema,
        false,
        0,
        std::slice::from_ref(&e0),
        e0.epoch + 1,
    )
    .unwrap();
    assert_eq!(read(&path), "{\"v\":4}\n{\"v\":5}\n");
}

/// Direct (at-least-once) mode: a crash may leave rows written after the
/// checkpoint, the last one torn mid-row. Recovery cuts the file back to
/// its length at the checkpoint, so the replayed rows never follow half a
/// row (the crash soak once found `79338,446,input,6` glued to a replayed
/// row).
#[test]
fn direct_recovery_cuts_rows_after_the_checkpoint_and_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let schema = batch(&[]).schema();
    let mut sink = EpochFileSink::create(&path, FileFormat::Csv, schema.clone(), true).unwrap();
    sink.write(&batch(&[1, 2])).unwrap();
    let record = sink.pre_commit().unwrap();
    sink.commit(std::slice::from_ref(&record)).unwrap();
    sink.write(&batch(&[30])).unwrap();
    drop(sink);
    // A torn write after the checkpoint.
    std::fs::write(&path, format!("{}4", read(&path))).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n30\n4");
    let mut recovered =
        EpochFileSink::recover(&path, FileFormat::Csv, schema, true, 0, &[record], 1).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n");
    recovered.write(&batch(&[30, 40])).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n30\n40\n");
}

/// A cluster leader paused past its lease wakes up while the standby that
/// took over from the same checkpoint writes the same sink file with the
/// same epoch numbers: the woken writer must neither write into nor
/// remove the other's staged rows.
#[test]
fn a_woken_writer_never_touches_the_staged_rows_of_the_one_that_took_over() {
    let dir = tempfile::tempdir().unwrap();
    let (path, schema, mut old, e0) = one_committed_epoch(dir.path());
    let committed_len = old.sealed_len();
    old.write(&batch(&[2])).unwrap(); // epoch 1, open when the old writer paused
    let mut new = EpochFileSink::recover(
        &path,
        FileFormat::Csv,
        schema,
        false,
        committed_len,
        &[],
        e0.epoch + 1,
    )
    .unwrap();
    new.write(&batch(&[3])).unwrap();
    // The old writer wakes up: it finishes its epoch and opens the next one.
    old.write(&batch(&[4])).unwrap();
    let _sealed_but_never_committed = old.pre_commit().unwrap();
    old.write(&batch(&[5])).unwrap();
    let n1 = new.pre_commit().unwrap();
    new.write(&batch(&[6])).unwrap();
    assert_eq!(n1.epoch, e0.epoch + 1);
    // Deposed: it throws its open epoch away.
    old.rollback_open_epoch().unwrap();
    let n2 = new.pre_commit().unwrap();
    new.commit(&[n1, n2]).unwrap();
    assert_eq!(read(&path), "v\n1\n3\n6\n");
}

/// A writer that commits an epoch the writer that took over already
/// committed, and followed with a later one, leaves the file alone: it
/// neither truncates the later epoch away nor appends the rows twice.
#[test]
fn re_committing_an_epoch_that_later_epochs_follow_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let schema = batch(&[]).schema();
    let mut sink = EpochFileSink::create(&path, FileFormat::Csv, schema, false).unwrap();
    sink.write(&batch(&[1])).unwrap();
    let e0 = sink.pre_commit().unwrap();
    sink.write(&batch(&[2, 3])).unwrap();
    let e1 = sink.pre_commit().unwrap();
    // The woken writer read e1's staged rows before the other removed them.
    let staged = e1.staged.clone().unwrap();
    let kept = std::fs::read(&staged).unwrap();
    sink.commit(&[e0, e1.clone()]).unwrap();
    sink.write(&batch(&[4])).unwrap();
    let e2 = sink.pre_commit().unwrap();
    sink.commit(&[e2]).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n4\n");
    std::fs::write(&staged, kept).unwrap();
    sink.commit(std::slice::from_ref(&e1)).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n4\n", "epoch 2 survives");
    assert!(!staged.exists(), "the staged file is removed");
    // And once the staged file is gone, committing again is a no-op.
    sink.commit(&[e1]).unwrap();
    assert_eq!(read(&path), "v\n1\n2\n3\n4\n");
}

/// A writer that lost the pipeline (a deposed leader, woken and then
/// killed) leaves a staged epoch that the writer which took over has
/// already passed. The next recovery removes it, whatever its epoch:
/// before, only staged files at or after the recovered epoch went, so this
/// one stayed beside the output for good.
#[test]
fn recovery_removes_every_staged_file_it_does_not_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (path, schema, mut old, e0) = one_committed_epoch(dir.path());
    let mut new = EpochFileSink::recover(
        &path,
        FileFormat::Csv,
        schema.clone(),
        false,
        old.sealed_len(),
        &[],
        e0.epoch + 1,
    )
    .unwrap();
    // The old writer wakes, seals an epoch and dies before its (refused)
    // commit.
    old.write(&batch(&[9])).unwrap();
    let stale = old.pre_commit().unwrap().staged.unwrap();
    drop(old);
    new.write(&batch(&[2])).unwrap();
    let n1 = new.pre_commit().unwrap();
    new.write(&batch(&[3])).unwrap();
    let n2 = new.pre_commit().unwrap();
    new.commit(&[n1, n2.clone()]).unwrap();
    let len = new.sealed_len();
    drop(new);
    assert!(stale.exists());
    let _again = EpochFileSink::recover(
        &path,
        FileFormat::Csv,
        schema,
        false,
        len,
        &[],
        n2.epoch + 1,
    )
    .unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|name| name.contains(".epoch-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(read(&path), "v\n1\n2\n3\n");
}
