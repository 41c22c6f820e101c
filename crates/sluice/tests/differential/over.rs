//! `agg(x) OVER (PARTITION BY key ORDER BY ts ROWS|RANGE ... PRECEDING AND
//! CURRENT ROW)`: every on-time row once, with the aggregates over its
//! frame, emitted append-only once the watermark passes its time; equal to
//! DataFusion's window functions over the on-time rows.

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, event_batch, interval, open, open_tuned,
    push_all, source_ddl, Cell, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Split, Stream};
use crate::oracle::{query, table};

/// A frame as SQL (`None`: `UNBOUNDED PRECEDING`).
fn range(preceding_ms: Option<i64>) -> String {
    match preceding_ms {
        Some(ms) => format!("RANGE BETWEEN {} PRECEDING AND CURRENT ROW", interval(ms)),
        None => "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".into(),
    }
}

fn rows(preceding: Option<u64>) -> String {
    match preceding {
        Some(n) => format!("ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"),
        None => "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".into(),
    }
}

/// The query: the input columns and every supported aggregate over `frame`.
fn over_query(frame: &str, partition: &str) -> String {
    let w = format!("OVER ({partition} ORDER BY ts {frame})");
    format!(
        "SELECT key, ts, value, SUM(value) {w} AS s, COUNT(*) {w} AS n, \
         COUNT(value) {w} AS nv, AVG(value) {w} AS a, MIN(value) {w} AS lo, \
         MAX(value) {w} AS hi FROM src"
    )
}

/// The stream's output (append-only, every on-time row once) equals the
/// oracle's answer over the on-time rows.
async fn check(s: &Stream, pc: usize, sql: &str) -> Result<(), TestCaseError> {
    let Split { on_time, .. } = split_late(s);
    let ddl = format!(
        "{}; CREATE STREAM o AS {sql}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, pc).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let got = appended(&drain(&mut sub).await).map_err(TestCaseError::fail)?;
    let expected = query(&[("src", table(&on_time, &[]))], sql).await;
    prop_assert_eq!(got.len(), on_time.len(), "one output row per on-time row");
    prop_assert_eq!(&got, &expected, "{}", sql);
    Ok(())
}

/// Keep the first row of each time: a ROWS frame over rows of equal time
/// depends on their order (arrival order in Sluice), which the batch oracle
/// does not fix.
fn distinct_times(s: &Stream) -> Stream {
    let mut seen = HashSet::new();
    let batches: Vec<_> = s
        .batches
        .iter()
        .map(|b| {
            b.iter()
                .filter(|e| seen.insert(e.ts))
                .copied()
                .collect::<Vec<_>>()
        })
        .filter(|b| !b.is_empty())
        .collect();
    Stream {
        delay_ms: s.delay_ms,
        batches,
    }
}

fn range_frame() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        Just(Some(0i64)),
        Just(Some(2_000)),
        Just(Some(7_500)),
        Just(None)
    ]
}

fn rows_frame() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![Just(Some(0u64)), Just(Some(1)), Just(Some(3)), Just(None)]
}

fn partition() -> impl Strategy<Value = &'static str> {
    prop_oneof![3 => Just("PARTITION BY key"), 1 => Just("")]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn range_over_matches_batch(s in stream(60), pc in per_cycle(), f in range_frame(), p in partition()) {
        block_on(check(&s, pc, &over_query(&range(f), p)))?;
    }

    #[test]
    fn rows_over_matches_batch(s in stream(60), pc in per_cycle(), f in rows_frame(), p in partition()) {
        block_on(check(&distinct_times(&s), pc, &over_query(&rows(f), p)))?;
    }
}

/// Exact rows of a hand case: RANGE peers share one frame; the 10 s frame
/// drops a row 10.001 s old; key 2 is its own partition; the late row
/// (behind the watermark when pushed) is not in the output.
#[tokio::test]
async fn range_exact_rows() {
    let q = "SELECT key, ts, value, SUM(value) OVER w AS s, COUNT(*) OVER w AS n FROM src \
             WINDOW w AS (PARTITION BY key ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)";
    let db = open(&format!(
        "{}; CREATE STREAM out AS {q}",
        source_ddl("src", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("out").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(event_batch(&[
        ev(1, BASE + 5_000, Some(1)),
        ev(1, BASE, Some(10)),
        ev(1, BASE + 5_000, Some(2)),
        ev(2, BASE + 1_000, Some(7)),
    ]))
    .await
    .expect("push");
    src.push(event_batch(&[
        ev(1, BASE + 15_001, Some(100)),
        ev(1, BASE + 4_000, Some(1_000)),
    ]))
    .await
    .expect("push");
    src.finish().await.expect("finish");
    let m = crate::common::complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let out = drain(&mut sub).await;
    let got: Vec<Vec<Cell>> = out
        .iter()
        .flat_map(|b| {
            assert!(b.changes.is_none(), "append-only");
            crate::common::batch_rows(&b.data)
        })
        .collect();
    let i = Cell::Int;
    // In event-time order per partition (key 1, then key 2 within a batch).
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![
            vec![i(1), i(BASE), i(10), i(10), i(1)],
            vec![i(1), i(BASE + 5_000), i(1), i(13), i(3)],
            vec![i(1), i(BASE + 5_000), i(2), i(13), i(3)],
            vec![i(1), i(BASE + 15_001), i(100), i(100), i(1)],
            vec![i(2), i(BASE + 1_000), i(7), i(7), i(1)],
        ]
    );
    let key1: Vec<i64> = got
        .iter()
        .filter(|r| r[0] == i(1))
        .map(|r| match r[1] {
            Cell::Int(t) => t,
            _ => panic!("time"),
        })
        .collect();
    assert!(key1.windows(2).all(|w| w[0] <= w[1]), "{key1:?}");
    assert_eq!(crate::common::late_rows(&m, "src"), 1);
}

/// ROWS frames: ties in arrival order, the frame holds the current row and
/// the one before it.
#[tokio::test]
async fn rows_exact_rows() {
    let q = "SELECT key, value, SUM(value) OVER (PARTITION BY key ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM src";
    let db = open(&format!(
        "{}; CREATE STREAM out AS {q}",
        source_ddl("src", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("out").await.expect("subscribe");
    push_all(
        &db,
        "src",
        &[vec![
            ev(1, BASE + 3, Some(1_000)),
            ev(1, BASE + 1, Some(1)),
            ev(1, BASE + 2, Some(10)),
            ev(1, BASE + 2, Some(100)),
        ]],
    )
    .await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let got: Vec<Vec<Cell>> = drain(&mut sub)
        .await
        .iter()
        .flat_map(|b| crate::common::batch_rows(&b.data))
        .collect();
    let i = Cell::Int;
    assert_eq!(
        got,
        vec![
            vec![i(1), i(1), i(1)],
            vec![i(1), i(10), i(11)],
            vec![i(1), i(100), i(110)],
            vec![i(1), i(1_000), i(1_100)],
        ]
    );
}
