//! Activations per second of one process function run three ways in the
//! same run: native (in the engine), remote Rust (the same handler served
//! by `sluice::remote::Worker` over a Unix socket) and Python (a vectorized
//! pyarrow handler in the engine-supervised, sandboxed worker); and the
//! round-trip latency of one event through each.
//!
//! The function is a running total per key (a VARCHAR `account-N`, as
//! LaminarDB requires one UTF-8 key column): state `+= amount`, one output
//! row `(key, total)` per activation. `benches/process/laminar` runs the
//! same function on LaminarDB 0.33 (native and remote Rust) on the same
//! input; `benches/process/run.sh` runs both and writes the table into
//! BENCHMARKS.md.
//!
//! Throughput: `ACTIVATIONS` rows (default 2,000,000) over `K` distinct
//! keys, pushed in batches of 65,536 rows built before the clock starts,
//! the watermark advancing 10 ms a batch; the clock runs from the first
//! push until the pipeline has finished. Latency: one row pushed, then
//! waited for on a subscription, `LATENCY_ROUNDS` times (default 2,000);
//! p50 and p99.
//!
//! The remote worker runs in a thread of this process with its own
//! single-threaded runtime (on this 2-core machine it gets the second
//! core, as a separate worker process would). The Python worker is a
//! separate process in its bubblewrap sandbox.
//!
//! Run with: `cargo run --release -p sluice --example process_runtimes_bench -- 1000 100000`
//! (needs `python3` with `pyarrow`, `grpcio` and `./python/sluice-worker`
//! installed, and `bwrap`; `SKIP=python` leaves Python out).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::arrow::array::{Array, Int64Array, StringArray, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::process::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessFunctionDescriptor, ProcessRuntime, ValueMutation, ValueState,
};
use sluice::remote::{PythonDeployment, RemoteEndpoint, RemoteLimits, Worker};
use sluice::Database;

const CHUNK: usize = 65_536;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("amount", DataType::Int64, false),
    ]))
}

fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("total", DataType::Int64, false),
    ]))
}

/// The fixtures' descriptor (65,536 activations a call, replay-safe) with
/// this function's schemas.
fn descriptor(name: &str, runtime: ProcessRuntime) -> ProcessFunctionDescriptor {
    ProcessFunctionDescriptor {
        input_schema: input_schema(),
        output_schema: output_schema(),
        runtime,
        ..sluice::process::benchmark::descriptor(name)
    }
}

/// State `+= amount`; emits `(key, total)`.
struct RunningTotal;

impl NativeProcessFunction for RunningTotal {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        let schema = output_schema();
        activations
            .iter()
            .map(|a| {
                let ProcessCallback::Input(row) = &a.callback else {
                    return Err("running total sets no timers".to_string());
                };
                let key = row
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .filter(|c| c.len() == 1 && c.null_count() == 0)
                    .map(|c| c.value(0))
                    .ok_or("input column 0 is not one VARCHAR")?;
                let amount = row
                    .column(1)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .filter(|c| c.len() == 1 && c.null_count() == 0)
                    .map(|c| c.value(0))
                    .ok_or("input column 1 is not one BIGINT")?;
                let prior = match a.state {
                    ValueState::Int64(n) => n,
                    _ => 0,
                };
                let total = prior.checked_add(amount).ok_or("total overflows")?;
                let output = RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![
                        Arc::new(StringArray::from(vec![key])),
                        Arc::new(Int64Array::from(vec![total])),
                    ],
                )
                .map_err(|e| e.to_string())?;
                Ok(ProcessActivationResult {
                    activation_id: a.id,
                    output: Some(output),
                    mutations: vec![ValueMutation::Set(Some(total))],
                    timers: Vec::new(),
                })
            })
            .collect()
    }
}

fn events(first: u64, rows: usize, keys: u64, ts: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("amount", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let k: Vec<String> = (0..rows as u64)
        .map(|i| format!("account-{}", (first + i) % keys))
        .collect();
    let a: Vec<i64> = (0..rows as u64)
        .map(|i| ((first + i) * 7919 % 2000) as i64)
        .collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(k)),
            Arc::new(Int64Array::from(a)),
            Arc::new(TimestampMillisecondArray::from(vec![ts; rows])),
        ],
    )
    .expect("valid batch")
}

/// One runtime under test: how to declare the function on a database.
enum Runtime {
    Native,
    Remote(String),
    Python(PathBuf),
}

impl Runtime {
    fn label(&self) -> &'static str {
        match self {
            Runtime::Native => "native",
            Runtime::Remote(_) => "remote Rust",
            Runtime::Python(_) => "Python (vectorized)",
        }
    }

    async fn declare(&self, db: &Database) -> sluice::Result<()> {
        let name = "total";
        let limits = RemoteLimits {
            call_deadline: Duration::from_secs(60),
            ..RemoteLimits::default()
        };
        match self {
            Runtime::Native => {
                db.register_process_function(descriptor(name, ProcessRuntime::Native), || {
                    RunningTotal
                })
                .await
            }
            Runtime::Remote(endpoint) => {
                db.register_remote_process_function_with(
                    descriptor(name, ProcessRuntime::RemoteRust),
                    endpoint,
                    limits,
                )
                .await
            }
            Runtime::Python(dir) => {
                let deployment = PythonDeployment::new(dir, "running_total:RunningTotal");
                db.register_python_process_function_with(
                    // Registration binds the runtime to the package's file tree.
                    descriptor(name, ProcessRuntime::Native),
                    deployment,
                    limits,
                )
                .await
            }
        }
    }
}

async fn open(runtime: &Runtime) -> Database {
    let db = Database::open_in_memory().await.expect("open");
    runtime.declare(&db).await.expect("declare");
    db.execute(
        "CREATE SOURCE ev (key VARCHAR, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM out AS PROCESS total FROM ev;",
    )
    .await
    .expect("pipeline");
    db
}

/// Activations per second and the mean round trip of a call (remote
/// runtimes), in microseconds.
async fn throughput(runtime: &Runtime, keys: u64, activations: u64) -> (f64, Option<f64>) {
    let db = open(runtime).await;
    let batches: Vec<RecordBatch> = (0..activations.div_ceil(CHUNK as u64))
        .map(|i| {
            let first = i * CHUNK as u64;
            let rows = CHUNK.min((activations - first) as usize);
            events(first, rows, keys, 10 * (i as i64 + 1))
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
    let rate = activations as f64 / started.elapsed().as_secs_f64();
    let call = db
        .process_worker_stats("total")
        .filter(|s| s.calls > 0)
        .map(|s| s.call_micros as f64 / s.calls as f64);
    db.shutdown().await.expect("shutdown");
    (rate, call)
}

/// p50 and p99 of one event's trip from push to subscriber, in µs.
async fn latency(runtime: &Runtime, rounds: usize) -> (f64, f64) {
    let db = open(runtime).await;
    let mut sub = db.subscribe("out").await.expect("subscribe");
    let src = db.source("ev").await.expect("source");
    db.start().await.expect("start");
    let mut trips = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let started = Instant::now();
        src.push(events(i as u64, 1, 1_000, i as i64))
            .await
            .expect("push");
        let mut seen = 0;
        while seen == 0 {
            let batch = sub.next().await.expect("subscription").expect("open");
            seen += batch.data.num_rows();
        }
        trips.push(started.elapsed().as_secs_f64() * 1e6);
    }
    src.finish().await.expect("finish");
    db.run_to_completion().await.expect("run");
    db.shutdown().await.expect("shutdown");
    trips.sort_by(f64::total_cmp);
    let at = |q: f64| trips[((trips.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

/// Serves [`RunningTotal`] on a Unix socket from a thread with its own
/// single-threaded runtime, for the life of the process.
fn start_remote_worker(dir: &std::path::Path) -> String {
    let path = dir.join("worker.sock");
    let endpoint = format!("unix:{}", path.display());
    let parsed: RemoteEndpoint = endpoint.parse().expect("endpoint");
    let worker = Worker::new(descriptor("total", ProcessRuntime::RemoteRust), || {
        RunningTotal
    })
    .limits(RemoteLimits {
        call_deadline: Duration::from_secs(60),
        ..RemoteLimits::default()
    });
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("worker runtime");
        rt.block_on(worker.serve(&parsed)).expect("worker serves");
    });
    while !path.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    endpoint
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let mut keys: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if keys.is_empty() {
        keys = vec![1_000, 100_000];
    }
    let activations = env_number("ACTIVATIONS", 2_000_000);
    let rounds = env_number("LATENCY_ROUNDS", 2_000) as usize;
    let skip = std::env::var("SKIP").unwrap_or_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut runtimes = vec![
        Runtime::Native,
        Runtime::Remote(start_remote_worker(dir.path())),
    ];
    if !skip.contains("python") {
        let package =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benches/process/python");
        runtimes.push(Runtime::Python(package));
    }
    println!("| engine | runtime | distinct keys | activations | activations/s | mean call round trip (µs) |");
    println!("|---|---|---:|---:|---:|---:|");
    for k in &keys {
        for r in &runtimes {
            let n = activations.max(k * 2);
            let (rate, call) = throughput(r, *k, n).await;
            let call = call.map_or("-".to_string(), |c| format!("{c:.0}"));
            println!(
                "| Sluice | {} | {k} | {n} | {rate:.0} | {call} |",
                r.label()
            );
        }
    }
    println!();
    println!("| engine | runtime | one event, push to subscriber: p50 (µs) | p99 (µs) |");
    println!("|---|---|---:|---:|");
    for r in &runtimes {
        let (p50, p99) = latency(r, rounds).await;
        println!("| Sluice | {} | {p50:.0} | {p99:.0} |", r.label());
    }
}
