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

/// The lines of an EXPLAIN statement's output.
async fn explain_lines(db: &sluice::Database, sql: &str) -> Vec<String> {
    let out = db.execute(sql).await.expect("explain");
    crate::common::rows(&out)
        .into_iter()
        .map(|r| match &r[0] {
            Cell::Str(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect()
}

/// EXPLAIN names the frame and the state bound of each frame kind.
#[tokio::test]
async fn explain_shows_state_bound() {
    let db = open(&source_ddl("src", 1_000, "")).await;
    let cases = [
        (
            "PARTITION BY key ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW",
            "frame=RANGE BETWEEN 10000 PRECEDING AND CURRENT ROW",
            "state: rows until the watermark passes them, then those with src.ts >= watermark - 10000 (freed by the watermark)",
        ),
        (
            "PARTITION BY key ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
            "frame=ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
            "state: rows until the watermark passes them, then the last 3 per partition key (grows with distinct partition keys)",
        ),
        (
            "PARTITION BY key ORDER BY ts",
            "frame=RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            "state: rows until the watermark passes them, then one running aggregate per partition key (grows with distinct partition keys)",
        ),
        (
            "ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            "frame=ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            "state: rows until the watermark passes them, then one running aggregate per partition key (grows with distinct partition keys)",
        ),
    ];
    for (window, frame, state) in cases {
        let text = explain_lines(
            &db,
            &format!(
                "EXPLAIN CREATE STREAM x AS SELECT key, SUM(value) OVER ({window}) AS s FROM src"
            ),
        )
        .await
        .join("\n");
        assert!(text.contains("OverAggregate: partition_by=["), "{text}");
        assert!(text.contains(frame), "{window}: {text}");
        assert!(text.contains(state), "{window}: {text}");
        assert!(
            text.contains("emit=when the watermark passes each row"),
            "{text}"
        );
    }
}

/// Every refused shape, with the words its error must contain.
#[tokio::test]
async fn refused_shapes() {
    let db = open(&format!(
        "{}; CREATE STREAM c AS SELECT key, COUNT(*) AS n FROM src GROUP BY key",
        source_ddl("src", 1_000, "")
    ))
    .await;
    let q = |over: &str| {
        format!("CREATE STREAM z AS SELECT key, SUM(value) OVER ({over}) AS s FROM src")
    };
    let refused = [
        (
            q("PARTITION BY key ORDER BY value"),
            "OVER (ORDER BY src.value) in a continuous query: ORDER BY must be the event time (the input's event time is ts)",
        ),
        (
            q("PARTITION BY key ORDER BY ts DESC"),
            "OVER (ORDER BY src.ts DESC) in a continuous query: the event time must be ascending",
        ),
        (
            q("PARTITION BY key ORDER BY ts, value"),
            "OVER (ORDER BY several columns) in a continuous query",
        ),
        (
            q("PARTITION BY key"),
            "OVER without ORDER BY in a continuous query",
        ),
        (
            q("PARTITION BY key ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING"),
            "a frame ending after the current row (FOLLOWING)",
        ),
        (
            q("PARTITION BY key ORDER BY ts RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING"),
            "a frame ending after the current row (FOLLOWING)",
        ),
        (
            q("PARTITION BY key ORDER BY ts GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW"),
            "GROUPS frames",
        ),
        (
            "CREATE STREAM z AS SELECT key, SUM(value) OVER (ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS a, \
             SUM(value) OVER (ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS b FROM src"
                .into(),
            "different OVER windows in one SELECT",
        ),
        (
            "CREATE STREAM z AS SELECT key, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS rn FROM src".into(),
            "window function row_number() OVER (...) in a continuous query",
        ),
        (
            "CREATE STREAM z AS SELECT key, first_value(value) OVER (PARTITION BY key ORDER BY ts) AS f FROM src".into(),
            "window function first_value() OVER (...) in a continuous query",
        ),
        (
            "CREATE STREAM z AS SELECT key, stddev(value) OVER (PARTITION BY key ORDER BY ts) AS f FROM src".into(),
            "aggregate stddev(...) OVER (...)",
        ),
        (
            "CREATE STREAM z AS SELECT key, SUM(n) OVER (PARTITION BY key) AS s FROM c".into(),
            "OVER without ORDER BY over a changelog input (a frame needs an order); over a changelog input write",
        ),
        (
            format!("{} EMIT CHANGES", q("PARTITION BY key ORDER BY ts")),
            "EMIT CHANGES on 'z': the query has no GROUP BY aggregation to emit from",
        ),
    ];
    for (sql, expected) in refused {
        let err = db.execute(&sql).await.expect_err(&sql);
        assert_eq!(err.code(), "SLC-SQL-002", "{sql}: {err}");
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
}

async fn open_at(dir: &std::path::Path, query: &str) -> sluice::Database {
    let db = sluice::Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.execute(&format!(
        "{}; SET subscription_buffer = 1000000; CREATE STREAM o AS {query}",
        source_ddl("src", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// Rows of a subscription until `n` have arrived (each batch append-only).
async fn take_rows(sub: &mut sluice::Subscription, n: usize) -> Vec<Vec<Cell>> {
    let mut out = Vec::new();
    while out.len() < n {
        let b = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
            .await
            .expect("rows arrive")
            .expect("subscription open")
            .expect("batch");
        assert!(b.changes.is_none(), "append-only");
        out.extend(crate::common::batch_rows(&b.data));
    }
    out.sort();
    out
}

/// A checkpoint holding rows not yet emitted and emitted rows still in
/// frames; after a restart every row is emitted once, with frames that
/// include the rows from before the restart (and not those it expired).
async fn across_restore(frame: &str, before: [i64; 3], after: [i64; 3]) {
    let q = format!(
        "SELECT key, ts, SUM(value) OVER (PARTITION BY key ORDER BY ts {frame}) AS s FROM src"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let batch = |rows: &[(i64, i64, i64)]| {
        event_batch(
            &rows
                .iter()
                .map(|(k, t, v)| ev(*k, BASE + t, Some(*v)))
                .collect::<Vec<_>>(),
        )
    };
    let i = Cell::Int;
    let db = open_at(dir.path(), &q).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(batch(&[(1, 1_000, 1), (1, 2_000, 2), (2, 1_500, 5)]))
        .await
        .expect("push");
    src.push(batch(&[(1, 3_000, 4)])).await.expect("push");
    assert_eq!(
        take_rows(&mut sub, 3).await,
        vec![
            vec![i(1), i(BASE + 1_000), i(before[0])],
            vec![i(1), i(BASE + 2_000), i(before[1])],
            vec![i(2), i(BASE + 1_500), i(before[2])],
        ]
    );
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_at(dir.path(), &q).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(batch(&[(1, 11_500, 8), (2, 20_000, 1)]))
        .await
        .expect("push");
    src.finish().await.expect("finish");
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let got = appended(&drain(&mut sub).await).expect("append-only");
    assert_eq!(
        got,
        vec![
            vec![i(1), i(BASE + 3_000), i(after[0])],
            vec![i(1), i(BASE + 11_500), i(after[1])],
            vec![i(2), i(BASE + 20_000), i(after[2])],
        ]
    );
}

#[tokio::test]
async fn range_frame_across_restore() {
    across_restore(
        "RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW",
        [1, 3, 5],
        [7, 14, 1],
    )
    .await;
}

#[tokio::test]
async fn rows_frame_across_restore() {
    across_restore(
        "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW",
        [1, 3, 5],
        [6, 12, 6],
    )
    .await;
}

#[tokio::test]
async fn unbounded_frame_across_restore() {
    across_restore("", [1, 3, 5], [7, 15, 6]).await;
}

/// A one-shot `SELECT` with a sliding `SUM` frame (DataFusion's sliding
/// accumulator of Sluice's checked `SUM`): a frame whose values have all
/// been retracted, or are NULL, sums to NULL, as in batch SQL.
#[tokio::test]
async fn sliding_sum_of_nulls_is_null() {
    let db = open(&format!(
        "{}; CREATE MATERIALIZED VIEW mv AS SELECT key, ts, value FROM src",
        source_ddl("src", 0, "")
    ))
    .await;
    push_all(
        &db,
        "src",
        &[vec![
            ev(1, BASE, Some(5)),
            ev(1, BASE + 1, None),
            ev(1, BASE + 2, None),
        ]],
    )
    .await;
    complete(&db).await;
    let got = crate::common::select(
        &db,
        "SELECT ts, SUM(value) OVER (ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM mv",
    )
    .await;
    db.shutdown().await.expect("shutdown");
    let i = Cell::Int;
    assert_eq!(
        got,
        vec![
            vec![i(BASE), i(5)],
            vec![i(BASE + 1), i(5)],
            vec![i(BASE + 2), Cell::Null],
        ]
    );
}

/// The output keeps the input's event-time column as its event time: a
/// tumbling window over an OVER stream closes as the watermark passes, and
/// an OVER over an OVER stream may order by it.
#[tokio::test]
async fn windows_over_an_over_stream() {
    let db = open(&format!(
        "{}; CREATE STREAM o AS SELECT key, ts, SUM(value) OVER (PARTITION BY key ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM src; \
         CREATE STREAM w AS SELECT tumble(ts, INTERVAL '10' SECOND) AS ws, SUM(s) AS total FROM o GROUP BY tumble(ts, INTERVAL '10' SECOND); \
         CREATE STREAM o2 AS SELECT ts, s, MAX(s) OVER (ORDER BY ts RANGE BETWEEN INTERVAL '5' SECOND PRECEDING AND CURRENT ROW) AS m FROM o",
        source_ddl("src", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("w").await.expect("subscribe");
    let mut sub2 = db.subscribe("o2").await.expect("subscribe");
    push_all(
        &db,
        "src",
        &[
            vec![ev(1, BASE + 1_000, Some(1)), ev(1, BASE + 2_000, Some(2))],
            vec![ev(1, BASE + 12_000, Some(4))],
        ],
    )
    .await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let i = Cell::Int;
    // s: 1, 3, 6; windows [0, 10s): 4, [10s, 20s): 6.
    assert_eq!(
        appended(&drain(&mut sub).await).expect("append-only"),
        vec![vec![i(BASE), i(4)], vec![i(BASE + 10_000), i(6)]]
    );
    assert_eq!(
        appended(&drain(&mut sub2).await).expect("append-only"),
        vec![
            vec![i(BASE + 1_000), i(1), i(1)],
            vec![i(BASE + 2_000), i(3), i(3)],
            vec![i(BASE + 12_000), i(6), i(6)],
        ]
    );
}

/// ORDER BY a closed window's start, which trails the watermark by the
/// window size: a row waits until the watermark less that lag passes it.
#[tokio::test]
async fn over_a_window_start_waits_for_its_lag() {
    let ddl = format!(
        "{}; CREATE STREAM w AS SELECT key, tumble(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n \
         FROM src GROUP BY key, tumble(ts, INTERVAL '10' SECOND)",
        source_ddl("src", 0, "")
    );
    let q = "SELECT key, ws, n, SUM(n) OVER (PARTITION BY key ORDER BY ws ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM w";
    let db = open_tuned(&ddl, 1).await;
    let text = explain_lines(&db, &format!("EXPLAIN CREATE STREAM x AS {q}"))
        .await
        .join("\n");
    assert!(
        text.contains("state: rows until the watermark - 10000ms passes them"),
        "{text}"
    );
    db.execute(&format!("CREATE STREAM o AS {q}"))
        .await
        .expect("create");
    let mut sub = db.subscribe("o").await.expect("subscribe");
    push_all(
        &db,
        "src",
        &[
            vec![ev(1, BASE + 1_000, None), ev(1, BASE + 2_000, None)],
            vec![ev(1, BASE + 15_000, None)],
            vec![ev(2, BASE + 16_000, None)],
            vec![ev(1, BASE + 25_000, None)],
        ],
    )
    .await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let i = Cell::Int;
    assert_eq!(
        appended(&drain(&mut sub).await).expect("append-only"),
        vec![
            vec![i(1), i(BASE), i(2), i(2)],
            vec![i(1), i(BASE + 10_000), i(1), i(3)],
            vec![i(1), i(BASE + 20_000), i(1), i(2)],
            vec![i(2), i(BASE + 10_000), i(1), i(1)],
        ]
    );
}
