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

use crate::common::{collect, events_batch, open};

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
                let sluice::process::ProcessCallback::Input(row) = &a.callback else {
                    return Err("unexpected timer".into());
                };
                let col = |i: usize| {
                    row.column(i)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .map(|c| c.value(0))
                        .ok_or("not BIGINT")
                };
                let (key, amount) = (col(0)?, col(1)?);
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
        let sub = db.subscribe("out").await.unwrap();
        let src = db.source("ev").await.unwrap();
        src.push(events_batch(&[(3, 1, 500)])).await.unwrap();
        src.push(events_batch(&events)).await.unwrap();
        src.finish().await.unwrap();
        let e = db.run_to_completion().await.unwrap_err();
        assert!(matches!(e, Error::Halted(_)), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        let delivered: usize = collect(sub).await.iter().map(|b| b.num_rows()).sum();
        assert!(delivered <= 1, "only the first batch's row may be out, got {delivered}");
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
    assert!(matches!(e, Error::Fault(_)), "{e}");
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
