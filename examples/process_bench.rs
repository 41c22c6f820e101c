//! Activations per second of native process functions (one core), through
//! the keyed harness that applies the engine's rules (one activation per key
//! per call, all-or-nothing validation, engine-owned state and timers).
//!
//! Run with: `cargo run --release -p sluice --example process_bench -- 1000 100000 10000000`

use std::sync::Arc;
use std::time::Instant;

use sluice::arrow::array::Int64Array;
use sluice::arrow::record_batch::RecordBatch;
use sluice_engine::process::benchmark::{descriptor, input_schema, FraudDetector, KeyedCounter};
use sluice_engine::process::{NativeProcessFunction, ProcessFunctionTestHarness};

fn batch(first: u64, rows: usize, keys: u64) -> RecordBatch {
    let k: Vec<i64> = (0..rows as u64)
        .map(|i| ((first + i) % keys) as i64)
        .collect();
    let amounts: Vec<i64> = (0..rows as u64)
        .map(|i| ((first + i) * 7919 % 2000) as i64)
        .collect();
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from(amounts)),
        ],
    )
    .expect("valid batch")
}

fn measure<F: NativeProcessFunction>(name: &str, handler: F, keys: u64, activations: u64) -> f64 {
    let mut h = ProcessFunctionTestHarness::new(descriptor(name), handler).expect("descriptor");
    let chunk = 65_536usize;
    let started = Instant::now();
    let mut done = 0u64;
    let mut wm = 0i64;
    while done < activations {
        let n = chunk.min((activations - done) as usize);
        h.process_batch(&batch(done, n, keys)).expect("accepted");
        wm += 10;
        h.advance_watermark(wm).expect("accepted");
        done += n as u64;
    }
    let fired = h.activation_log().len() as f64;
    fired / started.elapsed().as_secs_f64()
}

fn main() {
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
        "| distinct keys | counter activations/s | fraud detector activations/s (incl. timers) |"
    );
    println!("|---:|---:|---:|");
    for k in keys {
        let n = (k * 2).max(2_000_000);
        let counter = measure("counter", KeyedCounter, k, n);
        let fraud = measure(
            "fraud",
            FraudDetector {
                threshold: 1500,
                window_ms: 50,
            },
            k,
            n,
        );
        println!("| {k} | {counter:.0} | {fraud:.0} |");
    }
}
