//! Shared helpers: the activation-log fixture's rows and a harness oracle.

use std::sync::Arc;
use std::time::Duration;

use sluice::arrow::array::{AsArray, Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::process::benchmark::{activation_log_descriptor, ActivationLog};
use sluice::process::ProcessFunctionTestHarness;
use sluice::{Database, Subscription};

/// One row of the activation-log fixture:
/// (activation_id, key, callback, count, watermark).
pub type LogRow = (i64, i64, String, i64, i64);

/// Rows of activation-log batches, in order.
pub fn log_rows(batches: &[RecordBatch]) -> Vec<LogRow> {
    let mut out = Vec::new();
    for b in batches {
        let i = |c: usize| b.column(c).as_primitive::<Int64Type>().clone();
        let (id, key, count, wm) = (i(0), i(1), i(3), i(4));
        let cb = b.column(2).as_string::<i32>();
        for r in 0..b.num_rows() {
            out.push((
                id.value(r),
                key.value(r),
                cb.value(r).to_string(),
                count.value(r),
                wm.value(r),
            ));
        }
    }
    out
}

/// `(key, amount, ts)` events.
pub type Event = (i64, i64, i64);

/// The schema of [`events_batch`].
pub fn events_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("amount", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// A batch of events.
pub fn events_batch(events: &[Event]) -> RecordBatch {
    RecordBatch::try_new(
        events_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.0))),
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.1))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                events.iter().map(|e| e.2),
            )),
        ],
    )
    .unwrap()
}

/// The activation-log fixture's input columns of some events.
fn fixture_batch(events: &[Event]) -> RecordBatch {
    let d = activation_log_descriptor("activation_log");
    RecordBatch::try_new(
        d.input_schema,
        vec![
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.0))),
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.1))),
        ],
    )
    .unwrap()
}

/// What the pipeline must produce for `batches` read in this order from a
/// single source with bounded disorder `delay_ms`, where only rows passing
/// `keep` reach the function: each batch's on-time rows, then the timer cut
/// at the watermark after it, then the final cut when the source finishes.
pub fn oracle(
    batches: &[Vec<Event>],
    delay_ms: i64,
    window_ms: i64,
    keep: impl Fn(&Event) -> bool,
) -> Vec<LogRow> {
    let mut h = ProcessFunctionTestHarness::new(
        activation_log_descriptor("activation_log"),
        ActivationLog { window_ms },
    )
    .unwrap();
    let mut wm = i64::MIN;
    for b in batches {
        let on_time: Vec<Event> = b.iter().copied().filter(|e| e.2 >= wm).collect();
        let Some(max) = on_time.iter().map(|e| e.2).max() else {
            continue;
        };
        let kept: Vec<Event> = on_time.iter().copied().filter(|e| keep(e)).collect();
        h.process_batch(&fixture_batch(&kept)).unwrap();
        wm = wm.max(max - delay_ms);
        h.advance_watermark(wm).unwrap();
    }
    h.advance_watermark(i64::MAX).unwrap();
    log_rows(h.outputs())
}

/// Every batch a subscription delivers until it ends.
pub async fn collect(mut sub: Subscription) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    while let Ok(Some(b)) = tokio::time::timeout(Duration::from_secs(20), sub.next())
        .await
        .expect("the subscription ends")
    {
        out.push(b.data);
    }
    out
}

/// A database with these options, on `dir` when given, with the fixture
/// registered as `activation_log`.
pub async fn open(dir: Option<&std::path::Path>, options: &[(&str, &str)]) -> Database {
    let mut b = Database::builder();
    if let Some(d) = dir {
        b = b.state_dir(d);
    }
    for (k, v) in options {
        b = b.set(k, v).unwrap();
    }
    let db = b.open().await.unwrap();
    db.register_process_function(activation_log_descriptor("activation_log"), || {
        ActivationLog { window_ms: 1_000 }
    })
    .await
    .unwrap();
    db
}

/// Generated events for one key space of six keys: times mostly rising, each
/// up to 1.5 s out of order; between 1 and `max_len - 1` of them.
pub fn disordered_events(max_len: usize) -> impl proptest::strategy::Strategy<Value = Vec<Event>> {
    use proptest::prelude::*;
    prop::collection::vec((0i64..6, 0i64..20, 0i64..1_500, 0i64..400), 1..max_len).prop_map(|raw| {
        let mut t = 10_000;
        raw.into_iter()
            .map(|(k, amount, disorder, step)| {
                t += step;
                (k, amount, (t - disorder).max(0))
            })
            .collect()
    })
}

/// The `(key, amount)` BIGINT columns of an activation's input row.
pub fn key_and_amount(callback: &sluice::process::ProcessCallback) -> Result<(i64, i64), String> {
    let sluice::process::ProcessCallback::Input(row) = callback else {
        return Err("unexpected timer".into());
    };
    let col = |i: usize| {
        row.column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .map(|c| c.value(0))
            .ok_or_else(|| "not BIGINT".to_string())
    };
    Ok((col(0)?, col(1)?))
}

/// Push `events` (in batches of `batch_size`) through `function` behind
/// the filter `amount % 3 <> 0` (the oracle's `keep`), run to completion
/// and shut down; the activation-log rows it wrote.
pub async fn run_log_pipeline(
    db: &Database,
    function: &str,
    events: &[Event],
    batch_size: usize,
) -> Vec<LogRow> {
    db.execute(&format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
         CREATE STREAM kept AS SELECT key, amount FROM ev WHERE amount % 3 <> 0;
         CREATE STREAM log AS PROCESS {function} FROM kept;"
    ))
    .await
    .unwrap();
    let sub = db.subscribe("log").await.unwrap();
    let src = db.source("ev").await.unwrap();
    for b in events.chunks(batch_size) {
        src.push(events_batch(b)).await.unwrap();
    }
    src.finish().await.unwrap();
    db.run_to_completion().await.unwrap();
    db.shutdown().await.unwrap();
    log_rows(&collect(sub).await)
}
