//! The `OVER` operator driven cycle by cycle: what it keeps after each
//! watermark (read through its snapshot, as a checkpoint would).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use sluice_sql::{parse_sql, Statement, StreamPlanner};

use crate::catalog::{Catalog, SourceDef};
use crate::operators::{snapshot_part, CycleInputs, Operator};
use crate::options::PipelineOptions;
use crate::state::SnapshotReader;

fn batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.2),
            )),
        ],
    )
    .unwrap()
}

async fn compile(window: &str) -> Operator {
    let mut catalog = Catalog::default();
    let src =
        parse_sql("CREATE SOURCE s (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
            .unwrap();
    let Statement::CreateSource(src) = src.into_iter().next().unwrap() else {
        unreachable!()
    };
    catalog
        .sources
        .push(SourceDef::from_statement(src, &PipelineOptions::default(), None).unwrap());
    let q = format!("CREATE STREAM x AS SELECT k, v, SUM(v) OVER ({window}) AS total FROM s");
    let Statement::CreateStream(cs) = parse_sql(&q).unwrap().into_iter().next().unwrap() else {
        unreachable!()
    };
    let plan = StreamPlanner::plan_stream(&catalog, &cs).await.unwrap();
    Operator::compile(&plan.root).unwrap()
}

/// Run a cycle; the number of rows emitted.
fn run(op: &mut Operator, rows: &[(i64, i64, i64)], watermark: i64) -> usize {
    let mut inputs: CycleInputs = FxHashMap::default();
    if !rows.is_empty() {
        inputs.insert(Arc::from("s"), vec![batch(rows)]);
    }
    let out = op.run(&inputs, watermark).unwrap();
    out.iter().map(RecordBatch::num_rows).sum()
}

/// Rows kept, by snapshot part kind ("pending", "frame", "state").
fn kept(op: &mut Operator) -> FxHashMap<String, usize> {
    let mut ops = Vec::new();
    op.stateful_operators(&mut ops);
    assert_eq!(ops.len(), 1);
    let bytes = snapshot_part(ops.pop().unwrap()).unwrap();
    let snap = SnapshotReader::new(&bytes).unwrap();
    let mut out = FxHashMap::default();
    for p in snap.parts() {
        let kind = p.schema().metadata().get("over_part").unwrap().clone();
        *out.entry(kind).or_default() += p.num_rows();
    }
    out
}

fn counts(pairs: &[(&str, usize)]) -> FxHashMap<String, usize> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// RANGE: rows wait until the watermark passes them, then stay only while
/// a future row's frame can reach them; a partition whose rows all expired
/// is dropped.
#[tokio::test]
async fn range_state_is_freed_by_the_watermark() {
    let mut op =
        compile("PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '10' MILLISECOND PRECEDING AND CURRENT ROW")
            .await;
    let rows: Vec<(i64, i64, i64)> = (0..50).map(|k| (k, 1, 100 + k % 5)).collect();
    assert_eq!(run(&mut op, &rows, 100), 0);
    assert_eq!(kept(&mut op), counts(&[("pending", 50)]));
    // The 20 rows at 100 and 101 are passed and kept for later frames.
    assert_eq!(run(&mut op, &[], 102), 20);
    assert_eq!(kept(&mut op), counts(&[("pending", 30), ("frame", 20)]));
    // Every row emitted; a future row (at 111 or later) reaches back to 101
    // at most, so the 10 rows at 100 are freed.
    assert_eq!(run(&mut op, &[], 111), 30);
    assert_eq!(kept(&mut op), counts(&[("frame", 40)]));
    assert_eq!(run(&mut op, &[], 1_000), 0);
    assert_eq!(kept(&mut op), counts(&[]));
    // A row the watermark already passed is late: dropped and counted.
    assert_eq!(run(&mut op, &[(1, 1, 999), (1, 1, 1_000)], 1_001), 1);
    assert_eq!(op.dropped_late(), 1);
}

/// ROWS n: the last n rows per partition after emission, however old.
#[tokio::test]
async fn rows_state_keeps_the_last_n_per_partition() {
    let mut op =
        compile("PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW").await;
    let rows: Vec<(i64, i64, i64)> = (0..10).map(|i| (i % 2, i, i)).collect();
    assert_eq!(run(&mut op, &rows, 100), 10);
    assert_eq!(kept(&mut op), counts(&[("frame", 4)]));
    assert_eq!(run(&mut op, &[], 1_000_000), 0);
    assert_eq!(kept(&mut op), counts(&[("frame", 4)]));
}

/// UNBOUNDED PRECEDING: one running state per partition, no rows.
#[tokio::test]
async fn unbounded_state_is_one_accumulator_per_partition() {
    let mut op = compile("PARTITION BY k ORDER BY ts").await;
    let rows: Vec<(i64, i64, i64)> = (0..10).map(|i| (i % 3, i, i)).collect();
    assert_eq!(run(&mut op, &rows, 100), 10);
    assert_eq!(kept(&mut op), counts(&[("state", 3)]));
}
