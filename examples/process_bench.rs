//! Activations per second of native process functions on one core, at
//! several key cardinalities, measured two ways:
//!
//! * **harness**: the keyed processor alone (what the engine does per call:
//!   key encoding, one activation per key per call, all-or-nothing
//!   validation, engine-owned state and timers);
//! * **pipeline**: a `Database` with a push source and the function bound by
//!   `CREATE STREAM .. AS PROCESS`, so the source channel, watermark marks,
//!   cycles and output publication are included. Batch generation is
//!   excluded (batches are built before the clock starts).
//!
//! Run with: `cargo run --release -p sluice --example process_bench -- 1000 100000 10000000`

use std::sync::Arc;
use std::time::Instant;

use sluice::arrow::array::{Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::process::benchmark::{descriptor, input_schema, FraudDetector, KeyedCounter};
use sluice::process::{NativeProcessFunction, ProcessFunctionTestHarness};
use sluice::Database;

const CHUNK: usize = 65_536;

fn columns(first: u64, rows: usize, keys: u64) -> (Int64Array, Int64Array) {
    let k: Vec<i64> = (0..rows as u64)
        .map(|i| ((first + i) % keys) as i64)
        .collect();
    let amounts: Vec<i64> = (0..rows as u64)
        .map(|i| ((first + i) * 7919 % 2000) as i64)
        .collect();
    (Int64Array::from(k), Int64Array::from(amounts))
}

fn batch(first: u64, rows: usize, keys: u64) -> RecordBatch {
    let (k, a) = columns(first, rows, keys);
    RecordBatch::try_new(input_schema(), vec![Arc::new(k), Arc::new(a)]).expect("valid batch")
}

fn fraud() -> FraudDetector {
    FraudDetector {
        threshold: 1500,
        window_ms: 50,
    }
}

fn harness<F: NativeProcessFunction>(name: &str, handler: F, keys: u64, activations: u64) -> f64 {
    let mut h = ProcessFunctionTestHarness::new(descriptor(name), handler).expect("descriptor");
    let batches: Vec<RecordBatch> = (0..activations.div_ceil(CHUNK as u64))
        .map(|i| {
            let first = i * CHUNK as u64;
            batch(first, CHUNK.min((activations - first) as usize), keys)
        })
        .collect();
    let started = Instant::now();
    for (i, b) in batches.iter().enumerate() {
        h.process_batch(b).expect("accepted");
        h.advance_watermark(10 * (i as i64 + 1)).expect("accepted");
    }
    h.activation_log().len() as f64 / started.elapsed().as_secs_f64()
}

/// Events with an event time 10 ms apart per batch, so the watermark (and
/// the fraud detector's timers) advance with the input.
fn events(first: u64, rows: usize, keys: u64, ts: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("amount", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let (k, a) = columns(first, rows, keys);
    let t = TimestampMillisecondArray::from(vec![ts; rows]);
    RecordBatch::try_new(schema, vec![Arc::new(k), Arc::new(a), Arc::new(t)]).expect("valid batch")
}

async fn pipeline<F, H>(name: &str, factory: F, keys: u64, activations: u64) -> f64
where
    F: Fn() -> H + Send + Sync + 'static,
    H: NativeProcessFunction + 'static,
{
    let db = Database::open_in_memory().await.expect("open");
    db.register_process_function(descriptor(name), factory)
        .await
        .expect("register");
    db.execute(&format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM out AS PROCESS {name} FROM ev;"
    ))
    .await
    .expect("pipeline");
    let batches: Vec<RecordBatch> = (0..activations.div_ceil(CHUNK as u64))
        .map(|i| {
            let first = i * CHUNK as u64;
            events(
                first,
                CHUNK.min((activations - first) as usize),
                keys,
                10 * (i as i64 + 1),
            )
        })
        .collect();
    let src = db.source("ev").await.expect("source");
    db.start().await.expect("start");
    let started = Instant::now();
    for b in batches {
        src.push(b).await.expect("push");
    }
    src.finish().await.expect("finish");
    db.run_to_completion().await.expect("run");
    let elapsed = started.elapsed().as_secs_f64();
    db.shutdown().await.expect("shutdown");
    activations as f64 / elapsed
}

#[tokio::main]
async fn main() {
    let keys: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let keys = if keys.is_empty() {
        vec![1_000, 100_000]
    } else {
        keys
    };
    println!(
        "| distinct keys | activations | counter, harness | counter, pipeline | fraud detector, harness (incl. timers) | fraud detector, pipeline (input rows/s) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for k in keys {
        let n = (k * 2).max(2_000_000);
        let counter_h = harness("counter", KeyedCounter, k, n);
        let counter_p = pipeline("counter", || KeyedCounter, k, n).await;
        let fraud_h = harness("fraud", fraud(), k, n);
        let fraud_p = pipeline("fraud", fraud, k, n).await;
        println!("| {k} | {n} | {counter_h:.0} | {counter_p:.0} | {fraud_h:.0} | {fraud_p:.0} |");
    }
}
