//! `SELECT DISTINCT` in a continuous query: with a window function among the
//! selected columns it runs as a windowed `GROUP BY` with no aggregate, so
//! each distinct row is emitted once, when its window closes; without one,
//! each distinct row is emitted once, when first seen, across restores too.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, event_batch, interval, next, open, open_tuned,
    push_all, select, source_ddl, Cell, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Split, Stream};
use crate::oracle::{query, table};

const FLAT: &str = "SELECT DISTINCT key % 3 AS k, value % 2 AS v FROM src";

/// The selected columns: few distinct values, so the input has duplicates.
fn cols(size: i64) -> String {
    format!(
        "key % 3 AS k, value % 2 AS v, tumble(ts, {}) AS w",
        interval(size)
    )
}

/// DISTINCT and the equivalent GROUP BY without aggregates, both
/// append-only, equal to DataFusion's DISTINCT over the on-time rows.
async fn check(s: &Stream, size: i64, pc: usize) -> Result<(), TestCaseError> {
    let Split { on_time, .. } = split_late(s);
    let c = cols(size);
    let w = format!("tumble(ts, {})", interval(size));
    let ddl = format!(
        "{}; \
         CREATE STREAM d AS SELECT DISTINCT {c} FROM src; \
         CREATE STREAM g AS SELECT {c} FROM src GROUP BY key % 3, value % 2, {w}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, pc).await;
    let mut d_sub = db.subscribe("d").await.expect("subscribe");
    let mut g_sub = db.subscribe("g").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let fail = TestCaseError::fail;
    let d_rows = appended(&drain(&mut d_sub).await).map_err(fail)?;
    let g_rows = appended(&drain(&mut g_sub).await).map_err(fail)?;
    let expected = query(
        &[("t", table(&on_time, &[]))],
        &format!("SELECT DISTINCT {c} FROM t"),
    )
    .await;
    prop_assert_eq!(&d_rows, &expected, "DISTINCT vs batch oracle");
    prop_assert_eq!(
        &g_rows,
        &expected,
        "GROUP BY without aggregates vs batch oracle"
    );
    Ok(())
}

/// Non-windowed: the stream is append-only and holds each distinct row
/// exactly once (a second emission would show as a duplicate in the
/// multiset), as does a materialized view over the same query.
async fn check_flat(s: &Stream, pc: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE STREAM d AS {FLAT}; CREATE MATERIALIZED VIEW dv AS {FLAT}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, pc).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let view = select(&db, "SELECT * FROM dv").await;
    db.shutdown().await.expect("shutdown");
    let rows = appended(&drain(&mut sub).await).map_err(TestCaseError::fail)?;
    let expected = query(&[("src", table(&split_late(s).on_time, &[]))], FLAT).await;
    prop_assert_eq!(&rows, &expected, "stream vs batch oracle");
    prop_assert_eq!(&view, &expected, "view vs batch oracle");
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn distinct_matches_batch(s in stream(60), pc in per_cycle()) {
        block_on(check_flat(&s, pc))?;
    }

    #[test]
    fn windowed_distinct_matches_batch(s in stream(60), pc in per_cycle(), size in prop_oneof![Just(2_000i64), Just(5_000)]) {
        block_on(check(&s, size, pc))?;
    }
}

/// Exact rows: duplicates inside a window collapse to one row, the same
/// row in the next window is emitted again, all once the window closes.
#[tokio::test]
async fn windowed_distinct_exact_rows() {
    let db = open(&format!(
        "{}; CREATE STREAM out AS SELECT DISTINCT key, tumble(ts, INTERVAL '10' SECOND) AS w FROM src",
        source_ddl("src", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("out").await.expect("subscribe");
    let events = vec![
        ev(1, BASE + 100, Some(1)),
        ev(1, BASE + 200, Some(2)),
        ev(2, BASE + 300, Some(3)),
        ev(1, BASE + 9_999, None),
        ev(1, BASE + 10_000, Some(4)),
        ev(1, BASE + 12_000, Some(5)),
    ];
    push_all(&db, "src", &[events]).await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let got = appended(&drain(&mut sub).await).expect("append-only");
    let i = Cell::Int;
    let t = Cell::Int;
    assert_eq!(
        got,
        vec![
            vec![i(1), t(BASE)],
            vec![i(1), t(BASE + 10_000)],
            vec![i(2), t(BASE)],
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

/// EXPLAIN shows a windowed DISTINCT as the window aggregation it runs as
/// (state freed per window), and a non-windowed DISTINCT is refused by name.
#[tokio::test]
async fn explain_and_refusal() {
    let db = open(&source_ddl("src", 1_000, "")).await;
    let text = explain_lines(
        &db,
        "EXPLAIN CREATE STREAM x AS SELECT DISTINCT key, tumble(ts, INTERVAL '10' SECOND) AS w FROM src",
    )
    .await;
    let joined = text.join("\n");
    assert!(
        joined.contains(
            "WindowAggregate: window=tumble(size=10000ms, offset=0ms) on src.ts, keys=[src.key], aggregates=[], emit=on window close"
        ),
        "{joined}"
    );
    let text = explain_lines(
        &db,
        "EXPLAIN CREATE STREAM y AS SELECT DISTINCT key, value FROM src",
    )
    .await;
    assert!(
        text.iter().any(|l| l.contains(
            "Distinct: keys=[src.key, src.value], emit=first seen; state grows with distinct rows (never freed)"
        )),
        "{text:?}"
    );
    // Each refused shape, with the words its error must contain.
    let refused = [
        (
            "CREATE STREAM z AS SELECT DISTINCT key FROM src EMIT CHANGES",
            "EMIT on a SELECT DISTINCT without a window function",
        ),
        (
            "CREATE STREAM c AS SELECT key, COUNT(*) AS n FROM src GROUP BY key; \
             CREATE STREAM cd AS SELECT DISTINCT key FROM c",
            "SELECT DISTINCT without a window over a changelog input",
        ),
        (
            "CREATE STREAM o AS SELECT DISTINCT ON (key) key, value FROM src",
            "SELECT DISTINCT ON without ORDER BY",
        ),
    ];
    for (sql, expected) in refused {
        let err = db.execute(sql).await.expect_err(sql);
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
}

/// The keys of one append-only batch.
fn ints(b: &sluice::ChangeBatch) -> Vec<Cell> {
    assert!(b.changes.is_none(), "append-only");
    crate::common::batch_rows(&b.data)
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

async fn open_on(dir: &std::path::Path) -> sluice::Database {
    open_query(dir, "SELECT DISTINCT key FROM src").await
}

async fn open_query(dir: &std::path::Path, query: &str) -> sluice::Database {
    let db = sluice::Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.execute(&format!(
        "{}; CREATE STREAM d AS {query}",
        source_ddl("src", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// Exact rows, batch by batch: a row is emitted the first time it is
/// seen and never again, not even after a checkpoint and a restart.
#[tokio::test]
async fn distinct_first_seen_and_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let i = Cell::Int;
    let db = open_on(dir.path()).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    let push = |keys: &[i64]| {
        event_batch(
            &keys
                .iter()
                .map(|k| ev(*k, BASE + 1, None))
                .collect::<Vec<_>>(),
        )
    };
    src.push(push(&[1, 2, 1])).await.expect("push");
    assert_eq!(ints(&next(&mut sub).await), vec![i(1), i(2)]);
    src.push(push(&[2, 3, 3])).await.expect("push");
    assert_eq!(ints(&next(&mut sub).await), vec![i(3)]);
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_on(dir.path()).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(push(&[3, 1, 4, 2])).await.expect("push");
    assert_eq!(ints(&next(&mut sub).await), vec![i(4)]);
    src.push(push(&[4, 5])).await.expect("push");
    assert_eq!(ints(&next(&mut sub).await), vec![i(5)]);
    db.abort().await.expect("abort");
}

/// Windowed: rows of an open window checkpointed, the database restarted,
/// more rows pushed (one a repeat): the window emits each distinct row of
/// both runs once.
#[tokio::test]
async fn windowed_distinct_across_restore() {
    let q = "SELECT DISTINCT key, tumble(ts, INTERVAL '10' SECOND) AS w FROM src";
    let dir = tempfile::tempdir().expect("tempdir");
    let i = Cell::Int;
    let batch = |rows: &[(i64, i64)]| {
        event_batch(
            &rows
                .iter()
                .map(|(k, t)| ev(*k, BASE + t, None))
                .collect::<Vec<_>>(),
        )
    };
    let db = open_query(dir.path(), q).await;
    db.source("src")
        .await
        .expect("source")
        .push(batch(&[(1, 100), (2, 200), (1, 300)]))
        .await
        .expect("push");
    // A checkpoint captures what the pipeline has processed; a push source's
    // batch may still be queued when `checkpoint` is called.
    while db.metrics().events_ingested < 3 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_query(dir.path(), q).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    // Key 2 comes only from the restored state; key 1 from both sides.
    src.push(batch(&[(1, 500), (3, 600), (9, 25_000)]))
        .await
        .expect("push");
    let got = appended(&[next(&mut sub).await]).expect("append-only");
    assert_eq!(
        got,
        vec![
            vec![i(1), i(BASE)],
            vec![i(2), i(BASE)],
            vec![i(3), i(BASE)]
        ]
    );
    db.abort().await.expect("abort");
}
