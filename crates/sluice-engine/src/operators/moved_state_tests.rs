//! Keyed state that moves with its vnodes (`StatefulOperator::
//! restore_moved`), checked against one operator that saw every row.
//!
//! Each case runs a query's operators as the nodes of a split do: a row
//! goes to the node that owns its key's vnode (as the exchange in front of
//! the operator routes it). At a random cycle every old node is
//! snapshotted, the vnodes are placed again on a different number of
//! nodes, each new node restores the keys of its vnodes from all the old
//! nodes' snapshots, and the run goes on. What all the nodes emitted, old
//! and new (a changelog summed to its final state), must equal what one
//! operator emitted over all the rows; random placements, node counts,
//! cut points, batch sizes and disorder (within the watermark's delay).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray, TimestampMillisecondArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use rustc_hash::FxHashMap;
use sluice_sql::{parse_sql, Statement, StreamPlanner, CHANGE_COLUMN};

use crate::catalog::{Catalog, SourceDef};
use crate::operators::{snapshot_part, CycleInputs, Operator};
use crate::options::PipelineOptions;
use crate::partition::placement::VnodePlacement;
use crate::state::SnapshotReader;

/// Vnodes of the tests' splits: few, so that every node owns some.
const VNODES: u32 = 8;

/// How far rows run behind the largest time seen: less than the
/// watermark's delay, so no row is late on any node or on one.
const DISORDER_MS: i64 = 900;
const DELAY_MS: i64 = 1_000;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// One input row: (g, k, v, ts ms).
type Row = (&'static str, i64, i64, i64);

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("g", DataType::Utf8, true),
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            // Every seventh key is NULL: a NULL key has a vnode too.
            Arc::new(Int64Array::from_iter(
                rows.iter().map(|r| (r.1 != 6).then_some(r.1)),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .unwrap()
}

async fn compile(query: &str) -> Operator {
    let mut catalog = Catalog::default();
    let src = parse_sql(&format!(
        "CREATE SOURCE s (g VARCHAR, k BIGINT, v BIGINT, ts TIMESTAMP, \
         WATERMARK FOR ts AS ts - INTERVAL '{DELAY_MS}' MILLISECOND)"
    ))
    .unwrap();
    let Statement::CreateSource(src) = src.into_iter().next().unwrap() else {
        unreachable!()
    };
    catalog
        .sources
        .push(SourceDef::from_statement(src, &PipelineOptions::default(), None).unwrap());
    let q = format!("CREATE STREAM x AS {query}");
    let Statement::CreateStream(cs) = parse_sql(&q).unwrap().into_iter().next().unwrap() else {
        unreachable!()
    };
    let plan = StreamPlanner::plan_stream(&catalog, &cs).await.unwrap();
    Operator::compile(&plan.root).unwrap()
}

/// The rows of `input` whose key (the values of `key` columns, as the
/// exchange routes them) is of a vnode `placement` holds.
fn owned(input: &RecordBatch, key: &[&str], placement: &VnodePlacement) -> RecordBatch {
    let columns: Vec<ArrayRef> = key
        .iter()
        .map(|k| Arc::clone(input.column_by_name(k).unwrap()))
        .collect();
    let mask = placement.rows_owned(&columns, input.num_rows()).unwrap();
    filter_record_batch(input, &mask).unwrap()
}

/// Add `out` (each row +1, or by its change kind) to `sums`.
fn tally(sums: &mut BTreeMap<String, i64>, out: &[RecordBatch]) {
    for b in out {
        let change = b.schema().index_of(CHANGE_COLUMN).ok();
        for r in 0..b.num_rows() {
            let mut text = Vec::new();
            for (c, col) in b.columns().iter().enumerate() {
                if Some(c) != change {
                    text.push(array_value_to_string(col, r).unwrap());
                }
            }
            let sign = match change {
                Some(c) if b.column(c).as_string::<i32>().value(r) == "retract" => -1,
                _ => 1,
            };
            *sums.entry(text.join(",")).or_default() += sign;
        }
    }
    sums.retain(|_, n| *n != 0);
}

fn run(op: &mut Operator, input: RecordBatch, watermark: i64) -> Vec<RecordBatch> {
    let mut inputs: CycleInputs = FxHashMap::default();
    if input.num_rows() > 0 {
        inputs.insert(Arc::from("s"), vec![input]);
    }
    op.run(&inputs, watermark).unwrap()
}

/// A random placement of the vnodes on `nodes` nodes.
fn placements(rng: &mut Rng, nodes: usize) -> Vec<VnodePlacement> {
    let owner: Vec<usize> = (0..VNODES)
        .map(|_| rng.below(nodes as u64) as usize)
        .collect();
    (0..nodes)
        .map(|n| {
            let mine = (0..VNODES).filter(|v| owner[*v as usize] == n);
            VnodePlacement::new(VNODES, mine).unwrap()
        })
        .collect()
}

/// Every old node's state at the cut, as the checkpoint parts each of
/// its stateful operators wrote.
fn snapshots(nodes: &mut [Operator]) -> Vec<Vec<bytes::Bytes>> {
    nodes
        .iter_mut()
        .map(|op| {
            let mut ops = Vec::new();
            op.stateful_operators(&mut ops);
            ops.into_iter().map(|o| snapshot_part(o).unwrap()).collect()
        })
        .collect()
}

/// `query` (keyed by the `key` columns) over `seed`'s rows: the nodes'
/// output, the state moved once at a random cycle, against one operator.
async fn check(query: &str, key: &[&str], seed: u64) {
    let mut rng = Rng(seed);
    let cycles = 4 + rng.below(10) as usize;
    let cut = rng.below(cycles as u64) as usize;
    let (old_n, new_n) = (1 + rng.below(3) as usize, 1 + rng.below(4) as usize);
    let old = placements(&mut rng, old_n);
    let new = placements(&mut rng, new_n);
    let mut reference = compile(query).await;
    let mut nodes = Vec::new();
    for _ in 0..old_n {
        nodes.push(compile(query).await);
    }
    let (mut want, mut got) = (BTreeMap::new(), BTreeMap::new());
    let mut high = 0i64;
    let groups = ["a", "b", "c"];
    for cycle in 0..=cycles {
        if cycle == cut {
            let snaps = snapshots(&mut nodes);
            nodes.clear();
            for placement in &new {
                let mut op = compile(query).await;
                let mut ops = Vec::new();
                op.stateful_operators(&mut ops);
                for (i, o) in ops.into_iter().enumerate() {
                    let parts: Vec<SnapshotReader> = snaps
                        .iter()
                        .map(|s| SnapshotReader::new(&s[i]).unwrap())
                        .collect();
                    o.restore_moved(&parts, placement).unwrap();
                }
                nodes.push(op);
            }
            // Every key's state is on one new node: none lost, none held
            // twice.
            assert_eq!(
                state_rows(&snapshots(&mut nodes)),
                state_rows(&snaps),
                "{query}: seed {seed}, state moved from {old_n} nodes to {new_n}"
            );
        }
        let placement = if cycle < cut { &old } else { &new };
        let rows: Vec<Row> = (0..rng.below(40))
            .map(|_| {
                high += rng.below(300) as i64;
                let ts = (high - rng.below(DISORDER_MS as u64) as i64).max(0);
                let g = groups[rng.below(3) as usize];
                (g, rng.below(7) as i64, rng.below(100) as i64 - 50, ts)
            })
            .collect();
        let input = batch(&rows);
        // The last cycle closes every window.
        let watermark = if cycle == cycles {
            i64::MAX
        } else {
            high - DELAY_MS
        };
        tally(&mut want, &run(&mut reference, input.clone(), watermark));
        for (node, placement) in nodes.iter_mut().zip(placement) {
            tally(
                &mut got,
                &run(node, owned(&input, key, placement), watermark),
            );
        }
    }
    assert_eq!(
        got, want,
        "{query}: seed {seed}, {old_n} nodes to {new_n} at cycle {cut} of {cycles}"
    );
}

/// Rows of state in all the nodes' snapshots together.
fn state_rows(snaps: &[Vec<bytes::Bytes>]) -> usize {
    snaps
        .iter()
        .flatten()
        .map(|b| {
            let r = SnapshotReader::new(b).unwrap();
            r.parts().iter().map(RecordBatch::num_rows).sum::<usize>()
        })
        .sum()
}

const CASES: u64 = 25;

#[tokio::test]
async fn windowed_aggregates_move_with_their_vnodes() {
    for seed in 1..=CASES {
        check(
            "SELECT k, tumble(ts, INTERVAL '1' SECOND) AS w, count(*) AS n, sum(v) AS total \
             FROM s GROUP BY k, tumble(ts, INTERVAL '1' SECOND)",
            &["k"],
            seed * 7919,
        )
        .await;
        check(
            "SELECT g, k, hop(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND) AS w, max(v) AS top \
             FROM s GROUP BY g, k, hop(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND)",
            &["g", "k"],
            seed * 104_729,
        )
        .await;
    }
}

#[tokio::test]
async fn updating_aggregates_move_with_their_vnodes() {
    for seed in 1..=CASES {
        check(
            "SELECT g, k, count(*) AS n, sum(v) AS total, min(v) AS low FROM s GROUP BY g, k",
            &["g", "k"],
            seed * 6151,
        )
        .await;
    }
}

#[tokio::test]
async fn joins_move_with_their_vnodes() {
    for seed in 1..=CASES {
        check(
            "SELECT a.v AS av, b.v AS bv, a.ts AS at FROM s a JOIN s b ON a.k = b.k \
             WHERE a.v > 40 AND b.v < -40",
            &["k"],
            seed * 3571,
        )
        .await;
        check(
            "SELECT a.v AS av, b.v AS bv FROM s a LEFT JOIN s b ON a.k = b.k \
             AND b.ts BETWEEN a.ts AND a.ts + INTERVAL '500' MILLISECOND WHERE a.v > 30",
            &["k"],
            seed * 1_299_709,
        )
        .await;
        check(
            "SELECT a.v AS av, b.v AS bv, a.ts AS at FROM s a ASOF JOIN s b \
             ON a.k = b.k AND a.ts >= b.ts WHERE a.v > 20",
            &["k"],
            seed * 15_485_863,
        )
        .await;
    }
}

#[tokio::test]
async fn session_windows_move_with_their_vnodes() {
    for seed in 1..=CASES {
        check(
            "SELECT g, k, session(ts, INTERVAL '400' MILLISECOND) AS w, count(*) AS n, \
             sum(v) AS total FROM s GROUP BY g, k, session(ts, INTERVAL '400' MILLISECOND)",
            &["g", "k"],
            seed * 32_452_843,
        )
        .await;
    }
}

/// An operator whose state cannot move yet is refused by name.
#[tokio::test]
async fn state_that_cannot_move_is_refused_by_name() {
    let mut op = compile(
        "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY ts \
         RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS total FROM s",
    )
    .await;
    let mut ops = Vec::new();
    op.stateful_operators(&mut ops);
    let placement = VnodePlacement::all(VNODES).unwrap();
    let err = ops[0]
        .restore_moved(&[], &placement)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the state of a {} cannot move with its vnodes",
            ops[0].kind()
        )),
        "{err}"
    );
}
