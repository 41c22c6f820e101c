//! What crosses the coordinator seam reaches the user typed: the cause's
//! stable code (not a generic halt or catalog code), whether it halted or
//! faulted, and, for a statement the running pipeline cannot apply, a
//! refusal that leaves the pipeline running.

use std::sync::Arc;

use sluice::arrow::array::{Array, Int64Array};
use sluice::arrow::datatypes::{DataType, Field, Schema};
use sluice::arrow::record_batch::RecordBatch;
use sluice::{Database, Error};

use crate::common::*;

/// A malformed CSV row used to reach the user as `SLC-ENG-005`: the reader
/// flattened the connector's error to a string.
#[tokio::test]
async fn a_malformed_csv_row_reaches_the_user_with_the_connectors_code() {
    let root = tempfile::tempdir().unwrap();
    for mode in MODES {
        let p = Pipeline::new(root.path(), &format!("seam_bad_{mode:?}"), mode);
        write_input(&p.input, 2_000, None, Some(1_500));
        let e = p
            .run_once()
            .await
            .expect_err("the malformed row stops the run");
        // Malformed input reads the same way on every replay: a halt.
        assert!(matches!(e, Error::Halted { .. }), "{mode:?}: {e:?}");
        assert_eq!(e.code(), "SLC-CONN-002", "{mode:?}: {e}");
        let msg = e.to_string();
        let want = format!(
            "pipeline halted: source '{}': {}:1501: column 'id': cannot parse '150x' as Int64",
            p.source(),
            p.input.display()
        );
        assert_eq!(msg, want, "{mode:?}");
    }
}

/// A sink whose directory vanished cannot publish its file: the shutdown
/// fails with the I/O error's code, not the catalog code `SLC-ENG-001`.
#[tokio::test]
async fn a_sink_io_failure_reaches_the_user_with_its_io_code() {
    let root = tempfile::tempdir().unwrap();
    let p = Pipeline::new(root.path(), "seam_sink_io", Mode::Plain);
    write_input(&p.input, 500, None, None);
    let db = p.open().await;
    bounded(db.start()).await.unwrap();
    std::fs::remove_dir_all(p.dir.join("out")).unwrap();
    bounded(db.run_to_completion()).await.unwrap();
    let e = bounded(db.shutdown())
        .await
        .expect_err("nowhere to publish");
    assert!(matches!(e, Error::Halted { .. }), "{e:?}");
    assert_eq!(e.code(), "SLC-CONN-001", "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("pipeline halted: shutdown: sink '{}': ", p.sink())),
        "{msg}"
    );
}

fn batch(ids: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap()
}

/// `CREATE SINK` on a running pipeline whose file cannot be created used to
/// return Ok and then halt the whole pipeline. It is refused with the
/// connector's error, and the pipeline keeps delivering rows.
#[tokio::test]
async fn a_sink_that_cannot_be_created_is_refused_and_the_pipeline_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where the sink's directory would have to be.
    let blocker = dir.path().join("not_a_dir");
    std::fs::write(&blocker, "x").unwrap();
    let db = Database::open_in_memory().await.unwrap();
    db.execute(
        "CREATE SOURCE ids (id BIGINT);
         CREATE STREAM doubled AS SELECT id * 2 AS d FROM ids;",
    )
    .await
    .unwrap();
    let mut sub = db.subscribe("doubled").await.unwrap();
    db.start().await.unwrap();
    let ids = db.source("ids").await.unwrap();
    ids.push(batch(&[1, 2])).await.unwrap();
    let first = bounded(sub.next()).await.unwrap().expect("rows before");
    assert_eq!(values(&first.data), vec![2, 4]);

    let bad = blocker.join("out.csv");
    let sql = format!(
        "CREATE SINK doubled_out FROM doubled WITH (connector = 'file', path = '{}')",
        bad.display()
    );
    let e = bounded(db.execute(&sql)).await.expect_err("refused");
    assert_eq!(e.code(), "SLC-CONN-001", "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("sink 'doubled_out': ") && msg.contains("not_a_dir"),
        "{msg}"
    );
    assert!(
        !matches!(e, Error::Halted { .. } | Error::Fault { .. }),
        "{e:?}"
    );

    // Still running: rows pushed after the refusal come out.
    ids.push(batch(&[3])).await.unwrap();
    let after = bounded(sub.next()).await.unwrap().expect("rows after");
    assert_eq!(values(&after.data), vec![6]);
    let status = db.status().await.expect("a pipeline");
    assert!(status.halted.is_none() && status.fault.is_none());
    // Nothing of the refused sink was kept: its name is free again.
    let good = dir.path().join("out.csv");
    let sql = format!(
        "CREATE SINK doubled_out FROM doubled WITH (connector = 'file', path = '{}')",
        good.display()
    );
    bounded(db.execute(&sql)).await.unwrap();
    ids.push(batch(&[4])).await.unwrap();
    ids.finish().await.unwrap();
    bounded(db.run_to_completion()).await.unwrap();
    bounded(db.shutdown()).await.unwrap();
    assert_eq!(read(&good), "d\n8\n");
}

fn values(b: &RecordBatch) -> Vec<i64> {
    let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    (0..col.len()).map(|i| col.value(i)).collect()
}

/// `start()` read the status after `Recover` and raced with the halt: a
/// failed recovery could start the pipeline anyway. The recovery's result
/// travels in its acknowledgement now, so `start()` returns it, every time.
#[tokio::test]
async fn a_recovery_that_fails_makes_start_return_its_error_every_time() {
    let root = tempfile::tempdir().unwrap();
    let p = Pipeline::new(root.path(), "seam_recover", Mode::ExactlyOnce);
    write_input(&p.input, 500, None, None);
    let db = p.open().await;
    bounded(db.start()).await.unwrap();
    bounded(db.run_to_completion()).await.unwrap();
    bounded(db.checkpoint()).await.unwrap();
    bounded(db.shutdown()).await.unwrap();
    drop(db);
    // The sinks cannot be reopened: a regular file where their directory was.
    std::fs::remove_dir_all(p.dir.join("out")).unwrap();
    std::fs::write(p.dir.join("out"), "x").unwrap();
    for attempt in 0..5 {
        let db = p.open().await;
        for call in 0..2 {
            let e = bounded(db.start()).await.expect_err("the recovery fails");
            let what = format!("attempt {attempt}, call {call}: {e}");
            assert!(matches!(e, Error::Halted { .. }), "{what}");
            assert_eq!(e.code(), "SLC-CONN-001", "{what}");
            let msg = e.to_string();
            assert!(
                msg.starts_with("pipeline halted: recovering from checkpoint ")
                    && msg.contains(" failed: sink '"),
                "{what}"
            );
        }
        let _ = bounded(db.abort()).await;
    }
}
