//! A rejected call applies nothing and stops the pipeline: it halts without
//! checkpoints and faults (for replay from the last checkpoint) with them;
//! the error names the function, version, key and limit. State restored
//! under another binding is refused.

use std::sync::Arc;

use sluice::arrow::array::Int64Array;
use sluice::arrow::record_batch::RecordBatch;
use sluice::process::benchmark::{descriptor, output_schema};
use sluice::process::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessFunctionLimits,
};
use sluice::Error;

use crate::common::{collect, events_batch, key_and_amount, open};

/// Emits two rows for key 7 and one otherwise; fails on amount 666.
struct Picky;

impl NativeProcessFunction for Picky {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        activations
            .iter()
            .map(|a| {
                let (key, amount) = key_and_amount(&a.callback)?;
                if amount == 666 {
                    return Err(format!("cannot handle amount {amount}"));
                }
                let rows = if key == 7 { vec![key, key] } else { vec![key] };
                Ok(ProcessActivationResult {
                    activation_id: a.id,
                    output: RecordBatch::try_new(
                        output_schema(),
                        vec![Arc::new(Int64Array::from(rows))],
                    )
                    .ok(),
                    ..Default::default()
                })
            })
            .collect()
    }
}

async fn picky_db(dir: Option<&std::path::Path>, options: &[(&str, &str)]) -> sluice::Database {
    let db = open(dir, options).await;
    let mut d = descriptor("picky");
    d.limits = ProcessFunctionLimits {
        max_output_rows_per_activation: 1,
        ..ProcessFunctionLimits::default()
    };
    db.register_process_function(d, || Picky).await.unwrap();
    db
}

#[tokio::test]
async fn a_rejected_call_halts_and_publishes_nothing_of_its_cycle() {
    for (events, needle) in [
        (
            vec![(1, 1, 1_000), (7, 1, 1_000)],
            "process function 'picky' v1, key 010000000000000007: 2 output rows exceed max_output_rows_per_activation = 1",
        ),
        (
            vec![(1, 1, 1_000), (2, 666, 1_000)],
            "process function 'picky' v1: handler error: cannot handle amount 666",
        ),
    ] {
        let db = picky_db(None, &[]).await;
        db.execute(
            "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
             CREATE STREAM out AS PROCESS picky FROM ev;",
        )
        .await
        .unwrap();
        let mut sub = db.subscribe("out").await.unwrap();
        let src = db.source("ev").await.unwrap();
        src.push(events_batch(&[(3, 1, 500)])).await.unwrap();
        // The first batch's row is out before the failing batch is pushed.
        let first = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(first.data.num_rows(), 1);
        src.push(events_batch(&events)).await.unwrap();
        src.finish().await.ok();
        let e = db.run_to_completion().await.unwrap_err();
        assert!(matches!(e, Error::Halted { .. }), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        let later: usize = collect(sub).await.iter().map(|b| b.num_rows()).sum();
        assert_eq!(later, 0, "nothing of the failing cycle is delivered");
        db.shutdown().await.ok();
    }
}

#[tokio::test]
async fn with_checkpoints_a_rejected_call_is_a_fault_for_replay() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ev.csv");
    std::fs::write(
        &data,
        "key,amount,ts\n1,1,1970-01-01 00:00:01\n2,666,1970-01-01 00:00:02\n",
    )
    .unwrap();
    let db = picky_db(
        Some(&dir.path().join("state")),
        &[("checkpoint_interval", "1h")],
    )
    .await;
    db.execute(&format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = '{}', format = 'csv');
         CREATE STREAM out AS PROCESS picky FROM ev;",
        data.display()
    ))
    .await
    .unwrap();
    let e = db.run_to_completion().await.unwrap_err();
    assert!(matches!(e, Error::Fault { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("handler error: cannot handle amount 666"),
        "{e}"
    );
    db.abort().await.ok();
}

#[tokio::test]
async fn state_is_not_restored_under_another_version() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ev.csv");
    std::fs::write(&data, "key,amount,ts\n1,1,1970-01-01 00:00:01\n").unwrap();
    let sql = format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = '{}', format = 'csv');
         CREATE STREAM out AS PROCESS f FROM ev;",
        data.display()
    );
    let state = dir.path().join("state");
    for version in [1, 2] {
        let db = open(Some(&state), &[("checkpoint_interval", "1h")]).await;
        let mut d = descriptor("f");
        d.version = version;
        db.register_process_function(d, || sluice::process::benchmark::KeyedCounter)
            .await
            .unwrap();
        db.execute(&sql).await.unwrap();
        let r = db.run_to_completion().await;
        if version == 1 {
            r.unwrap();
            db.shutdown().await.unwrap();
            assert!(!db.checkpoints().await.unwrap().is_empty());
        } else {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("belongs to 'f' v1")
                    && e.contains("now bound as 'f' v2")
                    && e.contains("refused"),
                "{e}"
            );
            db.abort().await.ok();
        }
    }
}

#[tokio::test]
async fn a_null_in_a_not_null_input_column_is_a_rejected_call() {
    let db = open(None, &[]).await;
    db.execute(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM out AS PROCESS activation_log FROM ev;",
    )
    .await
    .unwrap();
    let schema = std::sync::Arc::new(sluice::arrow::datatypes::Schema::new(vec![
        sluice::arrow::datatypes::Field::new(
            "key",
            sluice::arrow::datatypes::DataType::Int64,
            true,
        ),
        sluice::arrow::datatypes::Field::new(
            "amount",
            sluice::arrow::datatypes::DataType::Int64,
            true,
        ),
        sluice::arrow::datatypes::Field::new(
            "ts",
            sluice::arrow::datatypes::DataType::Timestamp(
                sluice::arrow::datatypes::TimeUnit::Millisecond,
                None,
            ),
            true,
        ),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![Some(1)])),
            Arc::new(Int64Array::from(vec![None])),
            Arc::new(sluice::arrow::array::TimestampMillisecondArray::from(vec![
                1_000,
            ])),
        ],
    )
    .unwrap();
    let src = db.source("ev").await.unwrap();
    src.push(batch).await.unwrap();
    src.finish().await.ok();
    let e = db.run_to_completion().await.unwrap_err().to_string();
    assert!(
        e.contains("holds NULL in column 'amount', which the function declares NOT NULL"),
        "{e}"
    );
    db.shutdown().await.ok();
}

#[tokio::test]
async fn a_running_checkpointed_pipeline_admits_later_bindings_and_sources() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ev.csv");
    std::fs::write(&data, "key,amount,ts\n1,1,1970-01-01 00:00:01\n").unwrap();
    let db = open(
        Some(&dir.path().join("state")),
        &[("checkpoint_interval", "1h")],
    )
    .await;
    let mut d = descriptor("random");
    d.determinism = sluice::process::ProcessDeterminism::NonDeterministic;
    db.register_process_function(d, || sluice::process::benchmark::KeyedCounter)
        .await
        .unwrap();
    db.execute(&format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = '{}', format = 'csv');
         CREATE STREAM log AS PROCESS activation_log FROM ev;",
        data.display()
    ))
    .await
    .unwrap();
    db.start().await.unwrap();
    let e = db
        .execute("CREATE STREAM r AS PROCESS random FROM ev")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs determinism ReplaySafe"), "{e}");
    let e = db
        .execute(
            "CREATE SOURCE more (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("exactly one replayable source, but the pipeline has 2 (ev, more)"),
        "{e}"
    );
    let shown = db.execute("SHOW STREAMS").await.unwrap();
    assert_eq!(
        shown[0].num_rows(),
        1,
        "the refused binding left nothing behind"
    );
    db.shutdown().await.unwrap();
}
