//! Top-N by hand: exact changelog rows batch by batch, state across a
//! checkpoint and restart in each mode, EXPLAIN, and the refused shapes.

use sluice::{ChangeBatch, ChangeKind, Database};

use crate::common::{
    appended, batch_rows, ev, event_batch, next, open, source_ddl, Cell, Row, BASE,
};

/// The two largest values per key, with their rank.
const TOP2: &str = "SELECT key, value, rn FROM (SELECT key, ts, value, \
     ROW_NUMBER() OVER (PARTITION BY key ORDER BY value DESC) AS rn FROM src) WHERE rn <= 2";

/// The two largest values per 10 s window, through the TVF.
const PER_WINDOW: &str = "SELECT window_start, value, rn FROM (SELECT *, \
     ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY value DESC) AS rn \
     FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '10' SECOND))) WHERE rn <= 2";

/// The first two rows per key by event time.
const FIRST2: &str = "SELECT key, value, rn FROM (SELECT key, ts, value, \
     ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS rn FROM src) WHERE rn <= 2";

/// A change as (kind, row), with `+` for an insert and `-` for a retraction.
fn changes(b: &ChangeBatch) -> Vec<(char, Row)> {
    batch_rows(&b.data)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let k = match b.kind(i) {
                ChangeKind::Insert => '+',
                ChangeKind::Retract => '-',
            };
            (k, r)
        })
        .collect()
}

/// A database on `dir` running `CREATE STREAM d AS {query}` over `src`,
/// and `seen`, every row of `src` as it is processed (to know a pushed
/// batch is in the state before a checkpoint).
async fn open_query(dir: &std::path::Path, query: &str) -> Database {
    let db = Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.execute(&format!(
        "{}; CREATE STREAM d AS {query}; CREATE STREAM seen AS SELECT key FROM src",
        source_ddl("src", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// Push rows of (key, ms after BASE, value) as one batch.
async fn push(db: &Database, rows: &[(i64, i64, i64)]) {
    let events: Vec<_> = rows
        .iter()
        .map(|(k, t, v)| ev(*k, BASE + t, Some(*v)))
        .collect();
    db.source("src")
        .await
        .expect("source")
        .push(event_batch(&events))
        .await
        .expect("push");
}

fn row(k: i64, v: i64, rn: i64) -> Row {
    vec![Cell::Int(k), Cell::Int(v), Cell::Int(rn)]
}

/// Without a window, each cycle's changes exactly: an entering row is
/// inserted with its rank, a row pushed down is retracted at its old rank
/// and inserted at the new one, a row pushed out is retracted; then the
/// same after a checkpoint and a restart, against the restored top 2.
#[tokio::test]
async fn changelog_rows_exact_and_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_query(dir.path(), TOP2).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    push(&db, &[(1, 1, 5), (1, 2, 3), (2, 3, 7)]).await;
    let mut first = changes(&next(&mut sub).await);
    first.sort();
    assert_eq!(
        first,
        vec![
            ('+', row(1, 3, 2)),
            ('+', row(1, 5, 1)),
            ('+', row(2, 7, 1))
        ]
    );
    push(&db, &[(1, 4, 4), (1, 5, 1)]).await;
    assert_eq!(
        changes(&next(&mut sub).await),
        vec![('-', row(1, 3, 2)), ('+', row(1, 4, 2))]
    );
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_query(dir.path(), TOP2).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    push(&db, &[(1, 6, 9)]).await;
    assert_eq!(
        changes(&next(&mut sub).await),
        vec![
            ('-', row(1, 5, 1)),
            ('-', row(1, 4, 2)),
            ('+', row(1, 9, 1)),
            ('+', row(1, 5, 2))
        ]
    );
    // Below key 1's top 2: no change at all, so the next batch is the one
    // after, where key 2's first row moves down to rank 2.
    push(&db, &[(1, 7, 2)]).await;
    push(&db, &[(2, 9, 8)]).await;
    assert_eq!(
        changes(&next(&mut sub).await),
        vec![
            ('-', row(2, 7, 1)),
            ('+', row(2, 8, 1)),
            ('+', row(2, 7, 2))
        ]
    );
    db.abort().await.expect("abort");
}

/// Per window: rows of an open window checkpointed, the database
/// restarted, more rows pushed; the window's top 2 over both runs is
/// emitted once, when a later row closes it.
#[tokio::test]
async fn per_window_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_query(dir.path(), PER_WINDOW).await;
    let mut seen = db.subscribe("seen").await.expect("subscribe");
    push(&db, &[(1, 100, 5), (2, 200, 8), (3, 300, 1)]).await;
    next(&mut seen).await;
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_query(dir.path(), PER_WINDOW).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    push(&db, &[(4, 400, 6), (5, 500, 2)]).await;
    push(&db, &[(6, 25_000, 0)]).await;
    let got = appended(&[next(&mut sub).await]).expect("append-only");
    let i = Cell::Int;
    assert_eq!(
        got,
        vec![vec![i(BASE), i(6), i(2)], vec![i(BASE), i(8), i(1)]]
    );
    db.abort().await.expect("abort");
}

/// First rows by event time: a row is emitted once the watermark passes
/// it, rank by rank; the count per key survives a restart, so a key that
/// had its two rows emits nothing more.
#[tokio::test]
async fn first_by_time_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_query(dir.path(), FIRST2).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    // Key 1 at 100 and 50 (out of order), key 2 at 300; the watermark
    // reaches 300, passing key 1's rows only.
    push(&db, &[(1, 100, 10), (1, 50, 11), (2, 300, 20)]).await;
    let got = appended(&[next(&mut sub).await]).expect("append-only");
    assert_eq!(got, vec![row(1, 10, 2), row(1, 11, 1)]);
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_query(dir.path(), FIRST2).await;
    let mut sub = db.subscribe("d").await.expect("subscribe");
    // Key 1 (done) gets more rows; key 2 two more, after its first.
    push(&db, &[(1, 400, 12), (2, 350, 21), (2, 320, 22)]).await;
    let got = appended(&[next(&mut sub).await]).expect("append-only");
    assert_eq!(got, vec![row(2, 20, 1), row(2, 22, 2)]);
    // The watermark passes key 1's row at 400, which must stay unemitted:
    // the next batch is key 3's first row, once a later row passes it.
    push(&db, &[(3, 1_000, 30)]).await;
    push(&db, &[(4, 2_000, 40)]).await;
    let got = appended(&[next(&mut sub).await]).expect("append-only");
    assert_eq!(got, vec![row(3, 30, 1)]);
    db.abort().await.expect("abort");
}

/// The lines of an EXPLAIN statement's output.
async fn explain(db: &Database, sql: &str) -> String {
    let out = db.execute(sql).await.expect("explain");
    crate::common::rows(&out)
        .into_iter()
        .map(|r| match &r[0] {
            Cell::Str(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// EXPLAIN names the top-N, its partition, order and N, and its state:
/// freed per window, or growing with the keys.
#[tokio::test]
async fn explain_states_the_bound() {
    let db = open(&source_ddl("src", 1_000, "")).await;
    let cases = [
        (
            TOP2,
            "TopN: partition=[src.key], order=[src.value DESC NULLS FIRST], limit=2, emit=changes; state grows with distinct partition keys (2 rows each, never freed)",
        ),
        (
            FIRST2,
            "TopN: partition=[src.key], order=[src.ts ASC NULLS LAST], limit=2, emit=first rows by event time once the watermark passes them; state grows with distinct partition keys (a count each, never freed)",
        ),
        (
            PER_WINDOW,
            "TopN: partition=[tumble(src.ts, IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 10000000000 }\")), tumble_end(src.ts, IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 10000000000 }\"))], order=[src.value DESC NULLS FIRST], limit=2, emit=on window close; state: 2 rows per partition, freed once the watermark passes tumble_end(src.ts, IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 10000000000 }\")) - 1ms",
        ),
        (
            "SELECT key FROM (SELECT key, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS rn FROM src) WHERE rn = 1",
            "TopN: partition=[src.key], order=[src.ts ASC NULLS LAST], limit=1, emit=first rows by event time",
        ),
        (
            "SELECT key FROM (SELECT key, ROW_NUMBER() OVER (ORDER BY value) AS rn FROM src) WHERE 4 > rn AND rn <= 5",
            "TopN: partition=[], order=[src.value ASC NULLS LAST], limit=3, emit=changes; state grows with distinct partition keys (3 rows each, never freed)",
        ),
        (
            "SELECT key, value FROM src ORDER BY value DESC LIMIT 3",
            "TopN: partition=[], order=[src.value DESC NULLS FIRST], limit=3, emit=changes; state grows with distinct partition keys (3 rows each, never freed)",
        ),
        (
            "SELECT DISTINCT ON (key) key, value FROM src ORDER BY key, ts DESC",
            "TopN: partition=[src.key], order=[src.ts DESC NULLS FIRST], limit=1, emit=changes; state grows with distinct partition keys (1 rows each, never freed)",
        ),
    ];
    for (q, line) in cases {
        let text = explain(&db, &format!("EXPLAIN CREATE STREAM x AS {q}")).await;
        assert!(text.contains(line), "{q}\n{text}");
    }
}

/// Each shape that stays unsupported, refused at CREATE naming the
/// construct, with the words its error must contain.
#[tokio::test]
async fn refused_shapes() {
    let db = open(&format!(
        "{}; CREATE STREAM c AS SELECT key, COUNT(*) AS n FROM src GROUP BY key",
        source_ddl("src", 1_000, "")
    ))
    .await;
    let ranked = |over: &str, bound: &str| {
        format!(
            "CREATE STREAM x AS SELECT * FROM (SELECT key, value, {over} AS rn FROM src) WHERE {bound}"
        )
    };
    let cases = [
        (
            "CREATE STREAM x AS SELECT key, ROW_NUMBER() OVER (PARTITION BY key ORDER BY value) AS rn FROM src".to_string(),
            "window function row_number() OVER (...) in a continuous query (only aggregates over a frame are supported; for a top-N bound the row number: SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x DESC) AS rn FROM s) WHERE rn <= N)",
        ),
        (
            ranked("RANK() OVER (PARTITION BY key ORDER BY value)", "rn <= 2"),
            "RANK() OVER (...) bounded in WHERE: a top-N is written with ROW_NUMBER()",
        ),
        (
            ranked("ROW_NUMBER() OVER (PARTITION BY key)", "rn <= 2"),
            "ROW_NUMBER() OVER (...) without ORDER BY",
        ),
        (
            ranked("ROW_NUMBER() OVER (PARTITION BY key ORDER BY value)", "rn < 1"),
            "a row-number bound that keeps no row (at most 0)",
        ),
        (
            ranked("ROW_NUMBER() OVER (PARTITION BY key ORDER BY value)", "rn <= 1000000"),
            "a top-N of 1000000 rows per partition (at most 100000 are kept per partition)",
        ),
        (
            ranked(
                "ROW_NUMBER() OVER (PARTITION BY hop(ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND) ORDER BY value)",
                "rn <= 2",
            ),
            "hop() outside GROUP BY",
        ),
        (
            "CREATE STREAM x AS SELECT * FROM (SELECT key, n, ROW_NUMBER() OVER (ORDER BY n DESC) AS rn FROM c) WHERE rn <= 3".to_string(),
            "a top-N (ROW_NUMBER() OVER ...) over a changelog input",
        ),
        (
            "CREATE STREAM x AS SELECT * FROM (SELECT key, ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY value) AS rn FROM TABLE(HOP(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '2' SECOND))) WHERE rn <= 2".to_string(),
            "HOP(TABLE ...) without GROUP BY: a hopping or session window puts a row in several windows",
        ),
        (
            "CREATE STREAM x AS SELECT key, value FROM src LIMIT 3".to_string(),
            "LIMIT without ORDER BY in a continuous query (which rows would be arbitrary); for the first N rows per key or window write SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x DESC) AS rn FROM s) WHERE rn <= N",
        ),
        (
            "CREATE STREAM x AS SELECT key, value FROM src ORDER BY value LIMIT 3 OFFSET 1".to_string(),
            "OFFSET in a continuous query",
        ),
        (
            "CREATE STREAM x AS SELECT key, n FROM c ORDER BY n DESC LIMIT 3".to_string(),
            "ORDER BY ... LIMIT over a changelog input",
        ),
        (
            "CREATE STREAM x AS SELECT DISTINCT ON (key) key, value FROM src".to_string(),
            "SELECT DISTINCT ON without ORDER BY: which row is kept per key would be arbitrary",
        ),
        (
            "CREATE STREAM x AS SELECT DISTINCT ON (key) key FROM c ORDER BY key, n".to_string(),
            "SELECT DISTINCT ON over a changelog input",
        ),
        (
            "CREATE STREAM x AS SELECT key, value FROM src ORDER BY value DESC".to_string(),
            "ORDER BY in a continuous query (a stream has no end to sort by); for the first rows per key or window write",
        ),
    ];
    for (sql, expected) in cases {
        let err = db.execute(&sql).await.expect_err(&sql);
        let text = err.to_string();
        assert!(text.contains(expected), "{sql}\n{text}");
        assert_eq!(err.code(), "SLC-SQL-002", "{sql}: {text}");
    }
}
