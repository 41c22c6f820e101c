//! Shared pieces: events, Arrow batches, comparable rows, and driving a database.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice::arrow::array::{Array, ArrayRef, AsArray, Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{
    DataType, Field, Float64Type, Int32Type, Int64Type, Schema, SchemaRef, TimeUnit,
    TimestampMillisecondType, UInt64Type,
};
use sluice::arrow::record_batch::RecordBatch;
use sluice::{ChangeBatch, ChangeKind, Database, MetricsSnapshot, Subscription};

/// Event times start here (a multiple of every window size used).
pub const BASE: i64 = 1_700_000_000_000;

/// How long any single wait on the pipeline may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// One input row of the `(key BIGINT, ts TIMESTAMP, value BIGINT)` sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub key: i64,
    pub ts: Option<i64>,
    pub value: Option<i64>,
}

/// Shorthand for an event with a known time.
pub fn ev(key: i64, ts: i64, value: Option<i64>) -> Event {
    Event {
        key,
        ts: Some(ts),
        value,
    }
}

/// `CREATE SOURCE name (...)` for the event schema, trailing clauses appended.
pub fn source_ddl(name: &str, delay_ms: i64, tail: &str) -> String {
    format!(
        "CREATE SOURCE {name} (key BIGINT, ts TIMESTAMP, value BIGINT, \
         WATERMARK FOR ts AS ts - {}) {tail}",
        interval(delay_ms)
    )
}

/// An interval literal both Sluice's parser and DataFusion read as `ms` milliseconds.
pub fn interval(ms: i64) -> String {
    format!("INTERVAL '{ms} milliseconds'")
}

/// The schema of pushed batches.
pub fn event_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("value", DataType::Int64, true),
    ]))
}

/// Events as a batch of [`event_schema`].
pub fn event_batch(events: &[Event]) -> RecordBatch {
    RecordBatch::try_new(
        event_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.key))),
            Arc::new(TimestampMillisecondArray::from_iter(
                events.iter().map(|e| e.ts),
            )),
            Arc::new(Int64Array::from_iter(events.iter().map(|e| e.value))),
        ],
    )
    .expect("event batch")
}

/// Events as rows of [`event_schema`], for comparing with output rows.
pub fn event_rows(events: &[Event]) -> Vec<Row> {
    sorted(
        events
            .iter()
            .map(|e| vec![opt(Some(e.key)), opt(e.ts), opt(e.value)])
            .collect(),
    )
}

fn opt(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Int)
}

/// One value of an output row, comparable across Sluice and DataFusion.
///
/// Timestamps compare as their millisecond value (so a window start computed
/// with integer arithmetic in the oracle equals Sluice's TIMESTAMP column) and
/// floats are rounded to 1e-9.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cell {
    Null,
    Int(i64),
    /// A float times 1e9, rounded.
    Float(i64),
    Str(String),
    Bool(bool),
}

/// A row of cells.
pub type Row = Vec<Cell>;

fn cell(col: &ArrayRef, i: usize) -> Cell {
    if col.is_null(i) {
        return Cell::Null;
    }
    match col.data_type() {
        DataType::Int64 => Cell::Int(col.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => Cell::Int(col.as_primitive::<Int32Type>().value(i).into()),
        DataType::UInt64 => Cell::Int(col.as_primitive::<UInt64Type>().value(i) as i64),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            Cell::Int(col.as_primitive::<TimestampMillisecondType>().value(i))
        }
        DataType::Float64 => {
            Cell::Float((col.as_primitive::<Float64Type>().value(i) * 1e9).round() as i64)
        }
        DataType::Utf8 => Cell::Str(col.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Cell::Str(col.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Cell::Str(col.as_string_view().value(i).to_string()),
        DataType::Boolean => Cell::Bool(col.as_boolean().value(i)),
        other => panic!("no comparison for column type {other}"),
    }
}

/// Every row of one batch, in batch order.
pub fn batch_rows(batch: &RecordBatch) -> Vec<Row> {
    (0..batch.num_rows())
        .map(|i| batch.columns().iter().map(|c| cell(c, i)).collect())
        .collect()
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort();
    rows
}

/// All rows of some batches, sorted (a multiset).
pub fn rows(batches: &[RecordBatch]) -> Vec<Row> {
    sorted(batches.iter().flat_map(batch_rows).collect())
}

/// Rows of an append-only output; fails on any retraction.
pub fn appended(batches: &[ChangeBatch]) -> Result<Vec<Row>, String> {
    let mut out = Vec::new();
    for b in batches {
        if b.changes.is_some() {
            return Err("an append-only output delivered a changelog batch".into());
        }
        out.extend(batch_rows(&b.data));
    }
    Ok(sorted(out))
}

/// Fold a changelog: an insert adds a row, a retraction removes one instance.
/// Fails if a retraction removes a row that is not in the result.
pub fn fold(batches: &[ChangeBatch]) -> Result<Vec<Row>, String> {
    let mut counts: BTreeMap<Row, usize> = BTreeMap::new();
    for b in batches {
        if b.changes.is_none() {
            return Err("a changelog output delivered a batch without change kinds".into());
        }
        for (i, row) in batch_rows(&b.data).into_iter().enumerate() {
            match b.kind(i) {
                ChangeKind::Insert => *counts.entry(row).or_default() += 1,
                ChangeKind::Retract => match counts.get_mut(&row) {
                    Some(c) if *c > 0 => *c -= 1,
                    _ => return Err(format!("retraction of a row not in the result: {row:?}")),
                },
            }
        }
    }
    Ok(counts
        .into_iter()
        .flat_map(|(r, c)| std::iter::repeat_n(r, c))
        .collect())
}

/// Proptest settings: 24 cases per property (`DIFF_CASES=n` for a longer hunt).
pub fn config() -> proptest::test_runner::Config {
    let cases = std::env::var("DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    proptest::test_runner::Config {
        cases,
        max_shrink_iters: 300,
        failure_persistence: None,
        ..Default::default()
    }
}

/// Run a future on a fresh runtime (for proptest bodies).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A database with room for every batch a test subscription receives, and `ddl` run.
pub async fn open(ddl: &str) -> Database {
    open_tuned(ddl, 64).await
}

/// Like [`open`], folding at most `per_cycle` source batches into one cycle
/// (1: every batch is its own cycle, so windows close and changes are
/// emitted between batches).
pub async fn open_tuned(ddl: &str, per_cycle: usize) -> Database {
    let db = Database::open_in_memory().await.expect("open");
    db.execute(&format!(
        "SET subscription_buffer = 1000000; SET max_batches_per_cycle = {per_cycle}"
    ))
    .await
    .expect("SET");
    db.execute(ddl)
        .await
        .unwrap_or_else(|e| panic!("DDL failed: {e}\n{ddl}"));
    db
}

/// Push every batch to `source` in order, then finish it.
pub async fn push_all(db: &Database, source: &str, batches: &[Vec<Event>]) {
    let src = db.source(source).await.expect("source handle");
    for b in batches {
        src.push(event_batch(b)).await.expect("push");
    }
    src.finish().await.expect("finish");
}

/// Push two sources' batches interleaved (one of each in turn, as two
/// producers racing would), finish both, and run to completion.
pub async fn push_interleaved(
    db: &Database,
    first: (&str, &[Vec<Event>]),
    second: (&str, &[Vec<Event>]),
) -> MetricsSnapshot {
    let handles = [
        db.source(first.0).await.expect("first source handle"),
        db.source(second.0).await.expect("second source handle"),
    ];
    for i in 0..first.1.len().max(second.1.len()) {
        for (handle, batches) in handles.iter().zip([first.1, second.1]) {
            if let Some(b) = batches.get(i) {
                handle.push(event_batch(b)).await.expect("push");
            }
        }
    }
    for handle in &handles {
        handle.finish().await.expect("finish");
    }
    complete(db).await
}

/// `run_to_completion`, bounded by [`PATIENCE`].
pub async fn complete(db: &Database) -> MetricsSnapshot {
    tokio::time::timeout(PATIENCE, db.run_to_completion())
        .await
        .expect("run_to_completion timed out")
        .expect("run_to_completion")
}

/// The rows of a one-shot `SELECT`.
pub async fn select(db: &Database, sql: &str) -> Vec<Row> {
    let out = db
        .execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows(&out)
}

/// Every batch a subscription delivers until it ends (after shutdown or DROP).
pub async fn drain(sub: &mut Subscription) -> Vec<ChangeBatch> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(PATIENCE, sub.next()).await {
            Err(_) => panic!("subscription did not end"),
            Ok(Err(e)) => panic!("subscription failed: {e}"),
            Ok(Ok(None)) => return out,
            Ok(Ok(Some(b))) => out.push(b),
        }
    }
}

/// The next batch of a subscription; fails the test if none arrives
/// within 10 s or the subscription ends or fails.
pub async fn next(sub: &mut Subscription) -> ChangeBatch {
    next_within(sub, Duration::from_secs(10))
        .await
        .expect("a batch arrives within 10 s, before the subscription ends")
}

/// The next batch of a subscription, or None if nothing arrives within `wait`.
pub async fn next_within(sub: &mut Subscription, wait: Duration) -> Option<ChangeBatch> {
    match tokio::time::timeout(wait, sub.next()).await {
        Err(_) => None,
        Ok(r) => r.expect("subscription failed"),
    }
}

/// Late rows counted for one source.
pub fn late_rows(m: &MetricsSnapshot, source: &str) -> u64 {
    m.sources.get(source).map_or(0, |s| s.late_rows)
}
