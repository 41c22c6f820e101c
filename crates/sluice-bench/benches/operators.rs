//! Criterion micro-benchmarks of the engine's hot paths, through its public
//! APIs: `cargo bench -p sluice-bench`.
//!
//! * `window/tumble_per_group/G`: a compiled tumble-window operator
//!   (COUNT and MAX per auction) folding 8,192-row batches with G distinct
//!   auctions; every 8th batch moves to the next window and the watermark
//!   closes the previous one, so emission and state release are included.
//! * `late_filter/P`: the source intake's late-row filter on 8,192-row
//!   batches of which P% are behind the watermark.
//! * `watermark/extract`: the source intake's watermark extraction (event
//!   time of every row, maximum, bounded-disorder watermark).
//! * `key_encoding/...`: group keys encoded with Arrow's row format.
//! * `process_dispatch/...`: a native process function (the per-key counter
//!   fixture) driven through the engine's keyed processor on 8,192-row
//!   batches with K distinct keys: key encoding, one activation per key per
//!   call, all-or-nothing validation and state application.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rustc_hash::FxHashMap;
use sluice::arrow::array::{ArrayRef, Int64Array, StringArray, TimestampMillisecondArray};
use sluice::arrow::datatypes::DataType;
use sluice::arrow::record_batch::RecordBatch;
use sluice_engine::catalog::{Catalog, SourceDef};
use sluice_engine::coordinator::{
    ConnectorPipelineCallback, ControlMsg, RuntimeControl, SharedOutputs, SourceIntake,
};
use sluice_engine::metrics::PipelineMetrics;
use sluice_engine::operators::groups::KeyCodec;
use sluice_engine::operators::{CycleInputs, Operator};
use sluice_engine::options::PipelineOptions;
use sluice_engine::output::subscription::SubscriptionRegistry;
use sluice_sql::{Statement, StreamPlanner};

const ROWS: usize = 8192;
const WINDOW_MS: i64 = 10_000;
const BASE: i64 = 1_704_067_200_000;

const SOURCE: &str = "CREATE SOURCE bid (auction BIGINT, price BIGINT, channel VARCHAR,
    date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND)";

fn source_def() -> SourceDef {
    match sluice_sql::parse_sql(SOURCE).ok().and_then(|mut s| s.pop()) {
        Some(Statement::CreateSource(cs)) => {
            SourceDef::from_statement(cs, &PipelineOptions::default(), None)
                .unwrap_or_else(|e| panic!("source: {e}"))
        }
        _ => panic!("CREATE SOURCE did not parse"),
    }
}

/// A batch of the `bid` source: `groups` distinct auctions, prices
/// varying, event times spread over `span_ms` from `start`.
fn bids(groups: usize, start: i64, span_ms: i64, seed: u64) -> RecordBatch {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let auction: Vec<i64> = (0..ROWS).map(|_| (next() % groups as u64) as i64).collect();
    let price: Vec<i64> = (0..ROWS).map(|_| (next() % 10_000) as i64).collect();
    let channel: Vec<&str> = (0..ROWS)
        .map(|_| ["Google", "Facebook", "Baidu", "Apple"][(next() % 4) as usize])
        .collect();
    let times: Vec<i64> = (0..ROWS)
        .map(|i| start + (i as i64 * span_ms) / ROWS as i64)
        .collect();
    let def = source_def();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(auction)),
        Arc::new(Int64Array::from(price)),
        Arc::new(StringArray::from(channel)),
        Arc::new(TimestampMillisecondArray::from(times)),
    ];
    RecordBatch::try_new(def.schema, cols).unwrap_or_else(|e| panic!("batch: {e}"))
}

fn tumble_operator() -> Operator {
    let mut catalog = Catalog::default();
    catalog.sources.push(source_def());
    let sql = "CREATE STREAM per_auction AS
        SELECT auction, tumble(date_time, INTERVAL '10' SECOND) AS window_start,
               COUNT(*) AS bids, MAX(price) AS max_price
        FROM bid GROUP BY auction, tumble(date_time, INTERVAL '10' SECOND)";
    let cs = match sluice_sql::parse_sql(sql).ok().and_then(|mut s| s.pop()) {
        Some(Statement::CreateStream(cs)) => cs,
        _ => panic!("CREATE STREAM did not parse"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let plan = rt
        .block_on(StreamPlanner::plan_stream(&catalog, &cs))
        .unwrap_or_else(|e| panic!("plan: {e}"));
    Operator::compile(&plan.root).unwrap_or_else(|e| panic!("compile: {e}"))
}

fn window_aggregation(c: &mut Criterion) {
    let mut g = c.benchmark_group("window");
    g.throughput(Throughput::Elements(ROWS as u64));
    for groups in [16usize, 4096, 65_536] {
        // Eight batches per window; pre-built so only the operator is timed.
        let per_window: Vec<RecordBatch> = (0..8)
            .map(|i| bids(groups, BASE, WINDOW_MS, i + 1))
            .collect();
        let name: Arc<str> = Arc::from("bid");
        g.bench_with_input(
            BenchmarkId::new("tumble_per_group", groups),
            &groups,
            |b, _| {
                let mut op = tumble_operator();
                let mut i: i64 = 0;
                b.iter(|| {
                    let window = i / 8;
                    let shift = window * WINDOW_MS;
                    let src = &per_window[(i % 8) as usize];
                    let batch = shifted(src, shift);
                    let mut inputs: CycleInputs = FxHashMap::default();
                    inputs.insert(Arc::clone(&name), vec![batch]);
                    // The watermark closes the previous window on its first batch.
                    let wm = BASE + shift;
                    let out = op.run(&inputs, wm).unwrap_or_else(|e| panic!("run: {e}"));
                    i += 1;
                    black_box(out)
                });
            },
        );
    }
    g.finish();
}

/// `batch` with every event time moved by `shift_ms`.
fn shifted(batch: &RecordBatch, shift_ms: i64) -> RecordBatch {
    let mut cols = batch.columns().to_vec();
    let ts = sluice::arrow::compute::cast(&cols[3], &DataType::Int64)
        .unwrap_or_else(|e| panic!("cast: {e}"));
    let ts = sluice::arrow::array::AsArray::as_primitive::<sluice::arrow::datatypes::Int64Type>(
        ts.as_ref(),
    )
    .unary::<_, sluice::arrow::datatypes::TimestampMillisecondType>(|t| t + shift_ms);
    cols[3] = Arc::new(ts);
    RecordBatch::try_new(batch.schema(), cols).unwrap_or_else(|e| panic!("batch: {e}"))
}

/// A callback with the `bid` source installed and its watermark at `wm`.
fn intake(wm: i64) -> ConnectorPipelineCallback {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::mem::forget(rx);
    let mut cb = ConnectorPipelineCallback::new(
        tx,
        SharedOutputs {
            metrics: Arc::new(PipelineMetrics::new()),
            subscriptions: Arc::new(SubscriptionRegistry::default()),
        },
    );
    cb.apply_control(ControlMsg::AddSource(Box::new(source_def())))
        .unwrap_or_else(|e| panic!("add source: {e:?}"));
    // One row at wm + delay puts the source's watermark at wm.
    let seed = bids(1, wm + 2000, 0, 7).slice(0, 1);
    cb.extract_watermark("bid", &seed, i64::MIN)
        .unwrap_or_else(|e| panic!("extract: {e:?}"));
    cb
}

fn late_filter(c: &mut Criterion) {
    let mut g = c.benchmark_group("late_filter");
    g.throughput(Throughput::Elements(ROWS as u64));
    let wm = BASE + 10_000;
    let cb = intake(wm);
    for late_pct in [0i64, 10, 50] {
        // Times spread over [wm - late span, wm + rest): late_pct% are late.
        let span = 10_000;
        let batch = bids(4096, wm - span * late_pct / 100, span, 3);
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{late_pct}pct_late")),
            &batch,
            |b, batch| {
                b.iter(|| {
                    black_box(
                        cb.filter_late_rows("bid", batch)
                            .unwrap_or_else(|e| panic!("filter: {e:?}")),
                    )
                })
            },
        );
    }
    g.finish();
}

fn watermark(c: &mut Criterion) {
    let mut g = c.benchmark_group("watermark");
    g.throughput(Throughput::Elements(ROWS as u64));
    let mut cb = intake(BASE);
    let batch = bids(4096, BASE, 10_000, 5);
    g.bench_function("extract", |b| {
        b.iter(|| {
            cb.extract_watermark("bid", black_box(&batch), i64::MIN)
                .unwrap_or_else(|e| panic!("extract: {e:?}"))
        })
    });
    g.finish();
}

fn key_encoding(c: &mut Criterion) {
    let mut g = c.benchmark_group("key_encoding");
    g.throughput(Throughput::Elements(ROWS as u64));
    let batch = bids(65_536, BASE, 10_000, 9);
    let one = KeyCodec::new(&[DataType::Int64]).unwrap_or_else(|e| panic!("codec: {e}"));
    let auction = vec![Arc::clone(batch.column(0))];
    g.bench_function("bigint", |b| {
        b.iter(|| black_box(one.encode(&auction, ROWS).unwrap_or_else(|e| panic!("{e}"))))
    });
    let two =
        KeyCodec::new(&[DataType::Int64, DataType::Utf8]).unwrap_or_else(|e| panic!("codec: {e}"));
    let both = vec![Arc::clone(batch.column(0)), Arc::clone(batch.column(2))];
    g.bench_function("bigint_varchar", |b| {
        b.iter(|| black_box(two.encode(&both, ROWS).unwrap_or_else(|e| panic!("{e}"))))
    });
    g.finish();
}

fn process_dispatch(c: &mut Criterion) {
    use sluice_engine::process::benchmark::{descriptor, input_schema, KeyedCounter};
    use sluice_engine::process::keyed::{CallOutput, KeyedProcessor};
    let mut g = c.benchmark_group("process_dispatch");
    g.throughput(Throughput::Elements(ROWS as u64));
    for keys in [1_024usize, 8_192] {
        let batch = bids(keys, BASE, 10_000, 11);
        let input = RecordBatch::try_new(
            input_schema(),
            vec![Arc::clone(batch.column(0)), Arc::clone(batch.column(1))],
        )
        .unwrap_or_else(|e| panic!("batch: {e}"));
        let mut p = KeyedProcessor::new(descriptor("counter"), KeyedCounter)
            .unwrap_or_else(|e| panic!("processor: {e}"));
        g.bench_with_input(
            BenchmarkId::new("keyed_counter", keys),
            &input,
            |b, input| {
                b.iter(|| {
                    let mut out = CallOutput::default();
                    p.process_batch(black_box(input), &mut out)
                        .unwrap_or_else(|e| panic!("call: {e}"));
                    out
                })
            },
        );
    }
    g.finish();
}

criterion_group!(
    benches,
    window_aggregation,
    late_filter,
    watermark,
    key_encoding,
    process_dispatch
);
criterion_main!(benches);
