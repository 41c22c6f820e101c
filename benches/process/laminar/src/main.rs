//! LaminarDB 0.33 on the workload of Sluice's
//! `examples/process_runtimes_bench.rs`: a running total per key (state
//! `+= amount`, one output row `(key, total, ts)` per activation), native
//! and remote Rust (LaminarDB's `RustReferenceWorker` on loopback TCP, in a
//! thread with its own single-threaded runtime), at the key counts given
//! on the command line. Prints the same table rows as the Sluice side.
//!
//! Throughput: `ACTIVATIONS` rows (remote: `LAMINAR_REMOTE_ACTIVATIONS`,
//! default 200,000, as that path is slow) pushed in batches of 65,536 built before
//! the clock starts, the clock running until the subscription has every
//! output row. Latency: one row pushed, then waited for on the
//! subscription, `LATENCY_ROUNDS` times; p50 and p99.
//!
//! Run through `benches/process/run.sh`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use laminar_db::process_function::remote::{RemoteProcessClient, RustReferenceWorker};
use laminar_db::process_function::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionLimits, ProcessRuntime,
    ValueMutation, ValueState,
};
use laminar_db::subscription::{PortalFrame, SubscribeStart, SubscriptionPortal};
use laminar_db::{DbError, LaminarDB};
use tokio_util::sync::CancellationToken;

/// Largest call (Sluice's limit in its run).
const CHUNK: usize = 65_536;
/// Rows per push: LaminarDB's default step budget. Its subscription log
/// closes a reader that falls more than a few entries behind (`Lagged`),
/// which pushes of 65,536 rows provoke now and then; the rows and their
/// order are Sluice's, only cut finer.
const PUSH: usize = 4_096;
const CREDITS: usize = 8;

fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("total", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
    ]))
}

struct RunningTotal {
    schema: SchemaRef,
}

impl NativeProcessFunction for RunningTotal {
    fn invoke(
        &self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, DbError> {
        activations
            .iter()
            .map(|a| {
                let ProcessCallback::Input(row) = &a.callback else {
                    return Err(DbError::InvalidOperation("no timers here".into()));
                };
                let amount = row
                    .column(1)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .filter(|c| c.len() == 1 && c.null_count() == 0)
                    .map(|c| c.value(0))
                    .ok_or_else(|| DbError::InvalidOperation("not one BIGINT".into()))?;
                let prior = match a.state {
                    ValueState::Value(v) => v,
                    ValueState::Absent | ValueState::Null => 0,
                };
                let total = prior
                    .checked_add(amount)
                    .ok_or_else(|| DbError::InvalidOperation("total overflows".into()))?;
                let output = RecordBatch::try_new(
                    Arc::clone(&self.schema),
                    vec![
                        Arc::new(StringArray::from(vec![a.key_text.as_str()])),
                        Arc::new(Int64Array::from(vec![total])),
                        Arc::new(TimestampMicrosecondArray::from(vec![a.event_time_us])),
                    ],
                )
                .map_err(|e| DbError::InvalidOperation(e.to_string()))?;
                Ok(ProcessActivationResult {
                    activation_id: a.id,
                    output: vec![output],
                    value: ValueMutation::Set(total),
                    timers: Vec::new(),
                })
            })
            .collect()
    }
}

fn descriptor(input: SchemaRef, runtime: ProcessRuntime) -> ProcessFunctionDescriptor {
    ProcessFunctionDescriptor {
        runtime,
        version: 1,
        function_id: "running_total".into(),
        pipeline_state_id: "process_runtimes_bench_v1".into(),
        implementation_digest: "a".repeat(64),
        python_environment: None,
        determinism: ProcessDeterminism::Undeclared,
        input_schema: input,
        output_schema: output_schema(),
        key_columns: vec!["key".into()],
        event_time_column: "ts".into(),
        output_event_time_column: "ts".into(),
        value_state_name: "total".into(),
        timer_names: Vec::new(),
        // The defaults (256 activations a call, 4,096 input rows a step,
        // 100,000 keys) refuse this input; raised so a 65,536-row push is one
        // step, as it is one batch for Sluice.
        limits: ProcessFunctionLimits {
            max_keys: 1 << 20,
            max_state_bytes: 1 << 30,
            max_batch_rows: CHUNK,
            max_input_rows: 1 << 24,
            max_input_bytes: 4 << 30,
            max_output_rows: 1 << 24,
            max_output_bytes: 4 << 30,
            ..ProcessFunctionLimits::default()
        },
    }
}

fn events(schema: &SchemaRef, first: u64, rows: usize, keys: u64, ts_us: i64) -> RecordBatch {
    let k: Vec<String> = (0..rows as u64)
        .map(|i| format!("account-{}", (first + i) % keys))
        .collect();
    let a: Vec<i64> = (0..rows as u64)
        .map(|i| ((first + i) * 7919 % 2000) as i64)
        .collect();
    RecordBatch::try_new(
        Arc::clone(schema),
        vec![
            Arc::new(StringArray::from(k)),
            Arc::new(Int64Array::from(a)),
            Arc::new(TimestampMicrosecondArray::from(vec![ts_us; rows])),
        ],
    )
    .expect("valid batch")
}

#[derive(Clone, Copy, PartialEq)]
enum Runtime {
    Native,
    Remote,
}

impl Runtime {
    fn label(self) -> &'static str {
        match self {
            Runtime::Native => "native",
            Runtime::Remote => "remote Rust",
        }
    }
}

/// A database with the source and the function registered and started, a
/// tail subscription to its output, and the remote worker's shutdown.
async fn open(
    runtime: Runtime,
) -> (
    Arc<LaminarDB>,
    SubscriptionPortal,
    Option<CancellationToken>,
) {
    let db = LaminarDB::open().expect("open");
    db.execute(
        "CREATE SOURCE events (key VARCHAR NOT NULL, amount BIGINT NOT NULL, \
         ts TIMESTAMP NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)",
    )
    .await
    .expect("source");
    let input = db
        .source_untyped("events")
        .expect("source")
        .schema()
        .clone();
    let schema = output_schema();
    let mut stop = None;
    match runtime {
        Runtime::Native => db
            .register_native_process_function(
                "out",
                "events",
                descriptor(input, ProcessRuntime::NativeRust),
                Arc::new(RunningTotal { schema }),
            )
            .await
            .expect("register native"),
        Runtime::Remote => {
            let d = descriptor(input, ProcessRuntime::RemoteRust);
            let worker =
                RustReferenceWorker::new(d.clone(), Arc::new(RunningTotal { schema }), CREDITS)
                    .expect("worker");
            // Nagle's algorithm on the worker's side costs every answer a
            // delayed-ACK wait (about 40 ms) and `serve_loopback` leaves it
            // on; accepted sockets inherit TCP_NODELAY from the listener, so
            // set it there: LaminarDB's remote path at its best.
            let token = CancellationToken::new();
            let cancelled = token.clone();
            let (bound, address) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("worker runtime");
                rt.block_on(async move {
                    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
                    socket.set_nodelay(true).expect("nodelay");
                    socket
                        .bind("127.0.0.1:0".parse().expect("address"))
                        .expect("bind");
                    let listener = socket.listen(1024).expect("listen");
                    bound
                        .send(listener.local_addr().expect("address"))
                        .expect("send");
                    worker
                        .serve_loopback(listener, cancelled)
                        .await
                        .expect("serve");
                });
            });
            let address = address.recv().expect("the worker listens");
            let client = RemoteProcessClient::connect_loopback(
                &format!("http://{address}"),
                d.clone(),
                CREDITS,
                Duration::from_secs(30),
            )
            .await
            .expect("connect");
            db.register_remote_process_function("out", "events", d, Arc::new(client))
                .await
                .expect("register remote");
            stop = Some(token);
        }
    }
    db.start().await.expect("start");
    let portal = db
        .open_subscription("out", None, SubscribeStart::Tail)
        .await
        .expect("subscribe");
    (db, portal, stop)
}

/// Read at least `rows` output rows; returns how many were read.
async fn receive(portal: &mut SubscriptionPortal, rows: usize) -> usize {
    let mut seen = 0;
    while seen < rows {
        match portal.next_frame().await {
            Some(PortalFrame::Batch { batch, .. }) => seen += batch.num_rows(),
            Some(PortalFrame::Barrier { .. }) => {}
            other => panic!("output unavailable: {other:?}"),
        }
    }
    seen
}

async fn close(db: Arc<LaminarDB>, stop: Option<CancellationToken>) {
    db.shutdown().await.expect("shutdown");
    if let Some(t) = stop {
        t.cancel();
    }
}

async fn throughput(runtime: Runtime, keys: u64, activations: u64) -> f64 {
    let (db, mut portal, stop) = open(runtime).await;
    let source = db.source_untyped("events").expect("source");
    let schema = source.schema().clone();
    let batches: Vec<RecordBatch> = (0..activations.div_ceil(PUSH as u64))
        .map(|i| {
            let first = i * PUSH as u64;
            let rows = PUSH.min((activations - first) as usize);
            // The event time of Sluice's run: 10 ms more every 65,536 rows.
            events(
                &schema,
                first,
                rows,
                keys,
                10_000 * ((first / CHUNK as u64) as i64 + 1),
            )
        })
        .collect();
    // At most two batches ahead of the output: LaminarDB closes a
    // subscription whose reader falls behind its log (`Lagged`), so the
    // reader keeps up while the pipeline always has the next batch.
    let started = Instant::now();
    let mut received = 0usize;
    let mut pushed = 0usize;
    for batch in batches {
        let refused_since = Instant::now();
        while let Err(e) = source.push_arrow(batch.clone()) {
            // A saturated push buffer refuses the batch: wait for room.
            assert!(
                refused_since.elapsed() < Duration::from_secs(30),
                "push refused for 30 s: {e}"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        pushed += batch.num_rows();
        received += receive(
            &mut portal,
            pushed.saturating_sub(2 * PUSH).saturating_sub(received),
        )
        .await;
    }
    receive(&mut portal, activations as usize - received).await;
    let rate = activations as f64 / started.elapsed().as_secs_f64();
    close(db, stop).await;
    rate
}

async fn latency(runtime: Runtime, rounds: usize) -> (f64, f64) {
    let (db, mut portal, stop) = open(runtime).await;
    let source = db.source_untyped("events").expect("source");
    let schema = source.schema().clone();
    let mut trips = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let started = Instant::now();
        source
            .push_arrow(events(&schema, i as u64, 1, 1_000, 1_000 * i as i64))
            .expect("push");
        receive(&mut portal, 1).await;
        trips.push(started.elapsed().as_secs_f64() * 1e6);
    }
    close(db, stop).await;
    trips.sort_by(f64::total_cmp);
    let at = |q: f64| trips[((trips.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
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
    let remote_activations = env_number("LAMINAR_REMOTE_ACTIVATIONS", 200_000).min(activations);
    let rounds = env_number("LATENCY_ROUNDS", 2_000) as usize;
    println!("| engine | runtime | distinct keys | activations | activations/s | mean call round trip (µs) |");
    println!("|---|---|---:|---:|---:|---:|");
    for k in &keys {
        for r in [Runtime::Native, Runtime::Remote] {
            // Its remote path runs at a few thousand activations a second:
            // fewer of them keep the run in minutes (the rate is what counts).
            let n = match r {
                Runtime::Native => activations,
                Runtime::Remote => remote_activations,
            }
            .max(k * 2);
            let rate = throughput(r, *k, n).await;
            println!(
                "| LaminarDB 0.33 | {} | {k} | {n} | {rate:.0} | - |",
                r.label()
            );
        }
    }
    println!();
    println!("| engine | runtime | one event, push to subscriber: p50 (µs) | p99 (µs) |");
    println!("|---|---|---:|---:|");
    for r in [Runtime::Native, Runtime::Remote] {
        let (p50, p99) = latency(r, rounds).await;
        println!("| LaminarDB 0.33 | {} | {p50:.0} | {p99:.0} |", r.label());
    }
}
