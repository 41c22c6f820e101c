//! `LEFT`, `RIGHT` and `FULL OUTER` joins of two sources against the batch
//! oracle (the same outer join in DataFusion over each source's on-time
//! rows). With a time bound on every preserved side the output is
//! append-only (a padded row once the watermark frees its row); without,
//! it is a changelog whose folded result equals the batch answer.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, event_batch, fold, next, open, open_tuned,
    push_interleaved, select, source_ddl, Cell, Row, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

/// Time-bounded LEFT join with a residual condition: append-only.
const LEFT_WITHIN: &str = "SELECT l.key, l.ts AS lts, l.value AS lv, r.ts AS rts, r.value AS rv \
     FROM l LEFT JOIN r ON l.key = r.key \
     AND r.ts BETWEEN l.ts AND l.ts + INTERVAL '3 seconds' AND l.value < r.value";
/// Time-bounded RIGHT join (the right side is bounded): append-only.
const RIGHT_WITHIN: &str = "SELECT l.value AS lv, r.key, r.ts AS rts, r.value AS rv \
     FROM l RIGHT OUTER JOIN r ON l.key = r.key \
     AND l.ts BETWEEN r.ts - INTERVAL '2 seconds' AND r.ts";
/// Time-bounded FULL join, both sides bounded, keys that may be NULL.
const FULL_WITHIN: &str = "SELECT l.key AS lk, l.ts AS lts, r.key AS rk, r.ts AS rts \
     FROM l FULL OUTER JOIN r ON l.value = r.value \
     AND r.ts <= l.ts + INTERVAL '2 seconds' AND l.ts <= r.ts + INTERVAL '2 seconds'";
/// No time bound, NULL keys and a residual condition: a changelog.
const LEFT_CHANGES: &str = "SELECT l.key, l.value AS lv, r.key AS rk, r.value AS rv \
     FROM l LEFT JOIN r ON l.value = r.value AND r.key > l.key";
/// No time bound: a changelog.
const FULL_CHANGES: &str = "SELECT l.key AS lk, l.value AS lv, r.key AS rk, r.value AS rv \
     FROM l FULL JOIN r ON l.key = r.key AND l.value < r.value";
/// A WHERE over a RIGHT join filters the joined rows, padded ones included.
const RIGHT_WHERE: &str = "SELECT l.value AS lv, r.key, r.value AS rv \
     FROM l RIGHT JOIN r ON l.key = r.key WHERE l.value IS NULL OR r.value > 5";

/// An updating aggregate over the FULL changelog (stream `j4`, as `f`).
const PER_KEY: &str =
    "SELECT lk, COUNT(*) AS n, SUM(rv) AS s, COUNT(rk) AS matched FROM f GROUP BY lk";

const APPEND: [&str; 3] = [LEFT_WITHIN, RIGHT_WITHIN, FULL_WITHIN];
const CHANGES: [&str; 3] = [LEFT_CHANGES, FULL_CHANGES, RIGHT_WHERE];

async fn outer_joins(left: &Stream, right: &Stream, pc: usize) -> Result<(), TestCaseError> {
    let mut ddl = format!(
        "{}; {}",
        source_ddl("l", left.delay_ms, ""),
        source_ddl("r", right.delay_ms, "")
    );
    for (i, q) in APPEND.iter().chain(CHANGES.iter()).enumerate() {
        ddl.push_str(&format!("; CREATE STREAM j{i} AS {q}"));
    }
    ddl.push_str(&format!(
        "; CREATE MATERIALIZED VIEW v AS {FULL_CHANGES}; CREATE MATERIALIZED VIEW g AS {}",
        PER_KEY.replace("FROM f", "FROM j4")
    ));
    let db = open_tuned(&ddl, pc).await;
    let mut subs = Vec::new();
    for i in 0..APPEND.len() + CHANGES.len() {
        subs.push(db.subscribe(&format!("j{i}")).await.expect("subscribe"));
    }
    push_interleaved(&db, ("l", &left.batches), ("r", &right.batches)).await;
    let view = select(&db, "SELECT * FROM v").await;
    let grouped = select(&db, "SELECT * FROM g").await;
    db.shutdown().await.expect("shutdown");
    let tables = [
        ("l", table(&split_late(left).on_time, &[])),
        ("r", table(&split_late(right).on_time, &[])),
    ];
    prop_assert_eq!(
        view,
        query(&tables, FULL_CHANGES).await,
        "view of the changelog form"
    );
    let nested = PER_KEY.replace("FROM f", &format!("FROM ({FULL_CHANGES}) AS f"));
    prop_assert_eq!(
        grouped,
        query(&tables, &nested).await,
        "GROUP BY over the changelog form"
    );
    for (i, sql) in APPEND.iter().chain(CHANGES.iter()).enumerate() {
        let batches = drain(&mut subs[i]).await;
        let got = if i < APPEND.len() {
            appended(&batches)
        } else {
            fold(&batches)
        }
        .map_err(|e| TestCaseError::fail(format!("{e}: {sql}")))?;
        let expected = query(&tables, sql).await;
        prop_assert_eq!(got, expected, "{}", sql);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn outer_joins_match_batch(left in stream(40), right in stream(40), pc in per_cycle()) {
        block_on(outer_joins(&left, &right, pc))?;
    }
}

/// Rows of a batch with their change kind ("+" insert, "-" retract; "+"
/// for an append-only batch).
fn changes(b: &sluice::ChangeBatch) -> Vec<(&'static str, Row)> {
    crate::common::batch_rows(&b.data)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let k = match (b.changes.is_some(), b.kind(i)) {
                (true, sluice::ChangeKind::Retract) => "-",
                _ => "+",
            };
            (k, row)
        })
        .collect()
}

/// Exact rows of the time-bounded form: the pair when found, a padded row
/// only once the watermark (of both sources) has passed the row's bound,
/// and nothing for a row that matched.
#[tokio::test]
async fn bounded_left_join_exact_rows() {
    let q = "SELECT l.key, l.value AS lv, r.value AS rv FROM l LEFT JOIN r \
             ON l.key = r.key AND r.ts BETWEEN l.ts AND l.ts + INTERVAL '3 seconds'";
    let db = open(&format!(
        "{}; {}; CREATE STREAM j AS {q}",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("j").await.expect("subscribe");
    let (l, r) = (db.source("l").await.unwrap(), db.source("r").await.unwrap());
    let i = Cell::Int;
    l.push(event_batch(&[
        ev(1, BASE, Some(10)),
        ev(2, BASE, Some(20)),
        ev(3, BASE + 500, Some(30)),
    ]))
    .await
    .unwrap();
    // Key 1 matches at once; key 3's match is too late (4 s after it).
    r.push(event_batch(&[
        ev(1, BASE + 1_000, Some(11)),
        ev(3, BASE + 4_500, Some(31)),
    ]))
    .await
    .unwrap();
    assert_eq!(
        changes(&next(&mut sub).await),
        vec![("+", vec![i(1), i(10), i(11)])]
    );
    // r's watermark is at BASE + 4_500, so l's sets the pipeline's. Rows
    // are freed a kept batch at a time: the first left batch can go once
    // the watermark passes BASE + 500 + 3 s, and then keys 2 and 3 are
    // padded, together; at BASE + 3_000 nothing is final yet.
    l.push(event_batch(&[ev(7, BASE + 3_000, None)]))
        .await
        .unwrap();
    l.push(event_batch(&[ev(7, BASE + 3_501, None)]))
        .await
        .unwrap();
    let mut got = changes(&next(&mut sub).await);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("+", vec![i(2), i(20), Cell::Null]),
            ("+", vec![i(3), i(30), Cell::Null])
        ]
    );
    l.finish().await.unwrap();
    r.finish().await.unwrap();
    complete(&db).await;
    db.shutdown().await.unwrap();
    // At the end, the two key-7 rows are padded; key 1 never is.
    let mut rest: Vec<_> = drain(&mut sub).await.iter().flat_map(changes).collect();
    rest.sort();
    assert_eq!(
        rest,
        vec![
            ("+", vec![i(7), Cell::Null, Cell::Null]),
            ("+", vec![i(7), Cell::Null, Cell::Null])
        ]
    );
}

/// Exact changes of the changelog form: a padded row on arrival, its
/// retraction followed by the pair at the first match, and later matches
/// as plain inserts. A NULL key and a row failing the residual condition
/// stay padded.
#[tokio::test]
async fn unbounded_left_join_exact_changes() {
    let q = "SELECT l.key, l.value AS lv, r.value AS rv FROM l LEFT JOIN r \
             ON l.value = r.value AND r.key > 0";
    let db = open(&format!(
        "{}; {}; CREATE STREAM j AS {q}",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("j").await.expect("subscribe");
    let (l, r) = (db.source("l").await.unwrap(), db.source("r").await.unwrap());
    let i = Cell::Int;
    let null = Cell::Null;
    l.push(event_batch(&[ev(1, BASE, Some(10)), ev(2, BASE, None)]))
        .await
        .unwrap();
    let mut got = changes(&next(&mut sub).await);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("+", vec![i(1), i(10), null.clone()]),
            ("+", vec![i(2), null.clone(), null.clone()])
        ]
    );
    // Fails the residual (r.key > 0): no change. Then the first match.
    r.push(event_batch(&[ev(0, BASE, Some(10)), ev(5, BASE, None)]))
        .await
        .unwrap();
    r.push(event_batch(&[ev(4, BASE, Some(10))])).await.unwrap();
    assert_eq!(
        changes(&next(&mut sub).await),
        vec![
            ("-", vec![i(1), i(10), null.clone()]),
            ("+", vec![i(1), i(10), i(10)])
        ]
    );
    r.push(event_batch(&[ev(6, BASE, Some(10))])).await.unwrap();
    assert_eq!(
        changes(&next(&mut sub).await),
        vec![("+", vec![i(1), i(10), i(10)])]
    );
    db.shutdown().await.unwrap();
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

/// EXPLAIN names the join kind, its output form and each side's state:
/// freed by the watermark, or growing with the rows.
#[tokio::test]
async fn explain_outer_joins() {
    let db = open(&format!(
        "{}; {}",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let cases = [
        (
            LEFT_WITHIN,
            "LeftOuterJoin: on=[l.key = r.key], filter=r.ts BETWEEN l.ts AND l.ts + IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 3000000000 }\") AND l.value < r.value, emit=padded rows when the watermark frees them (append-only)",
            "left rows: until watermark - 0ms > l.ts + IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 3000000000 }\"); right rows: until watermark - 0ms > r.ts",
        ),
        (
            FULL_CHANGES,
            "FullOuterJoin: on=[l.key = r.key], filter=l.value < r.value, emit=changes (a padded row is retracted at its first match)",
            "left rows: kept; state grows with the left rows (never freed); right rows: kept; state grows with the right rows (never freed)",
        ),
        (
            "SELECT r.key FROM l RIGHT JOIN r ON l.key = r.key AND r.ts <= l.ts",
            "RightOuterJoin: on=[l.key = r.key], filter=r.ts <= l.ts, emit=changes (a padded row is retracted at its first match)",
            "left rows: until watermark - 0ms > l.ts; right rows: kept; state grows with the right rows (never freed)",
        ),
    ];
    for (q, join, state) in cases {
        let text = explain_lines(&db, &format!("EXPLAIN CREATE STREAM x AS {q}")).await;
        assert!(text.iter().any(|l| l.trim() == join), "{q}\n{text:#?}");
        assert!(text.iter().any(|l| l.trim() == state), "{q}\n{text:#?}");
    }
}

/// Every shape still refused, with the words its error must contain
/// (each is SLC-SQL-002).
#[tokio::test]
async fn refused_outer_joins() {
    let db = open(&format!(
        "{}; {}; CREATE STREAM counts AS SELECT key, COUNT(*) AS n FROM l GROUP BY key; \
         CREATE STREAM lc AS SELECT l.key, r.value FROM l LEFT JOIN r ON l.key = r.key",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let refused = [
        (
            "SELECT l.key FROM l LEFT SEMI JOIN r ON l.key = r.key",
            "LeftSemi JOIN in a continuous query (inner, LEFT, RIGHT and FULL OUTER joins are supported)",
        ),
        (
            "SELECT r.key FROM l RIGHT ANTI JOIN r ON l.key = r.key",
            "RightAnti JOIN in a continuous query (inner, LEFT, RIGHT and FULL OUTER joins are supported)",
        ),
        (
            "SELECT l.key FROM l LEFT JOIN r ON l.value < r.value",
            "a JOIN without an equality between its two inputs",
        ),
        (
            "SELECT l.key FROM l FULL JOIN r ON true",
            "a JOIN without an equality between its two inputs",
        ),
        (
            "SELECT l.key FROM l LEFT JOIN counts c ON l.key = c.key",
            "JOIN over a changelog input",
        ),
        (
            "SELECT lc.key FROM lc FULL JOIN r ON lc.key = r.key",
            "JOIN over a changelog input",
        ),
    ];
    for (q, expected) in refused {
        let sql = format!("CREATE STREAM x AS {q}");
        let err = db.execute(&sql).await.expect_err(&sql);
        assert!(err.to_string().contains(expected), "{sql}: {err}");
        assert_eq!(err.code(), "SLC-SQL-002", "{sql}: {err}");
    }
}

async fn open_joins(dir: &std::path::Path) -> sluice::Database {
    let db = sluice::Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.execute(&format!(
        "{}; {}; \
         CREATE STREAM jb AS SELECT l.key, l.value AS lv, r.value AS rv FROM l LEFT JOIN r \
         ON l.key = r.key AND r.ts BETWEEN l.ts AND l.ts + INTERVAL '3 seconds'; \
         CREATE STREAM jc AS SELECT l.key, l.value AS lv, r.value AS rv FROM l LEFT JOIN r \
         ON l.key = r.key",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// Changes of a subscription until `n` rows have arrived.
async fn take_rows(sub: &mut sluice::Subscription, n: usize) -> Vec<(&'static str, Row)> {
    let mut out = Vec::new();
    while out.len() < n {
        out.extend(changes(&next(sub).await));
    }
    out
}

/// Both forms across a checkpoint and a restart: kept rows and their match
/// flags are restored, so a row matched before the restart is neither
/// padded (append-only form) nor retracted again (changelog form), and an
/// unmatched restored row is retracted once at its first match.
#[tokio::test]
async fn outer_joins_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (i, null) = (Cell::Int, Cell::Null);
    let db = open_joins(dir.path()).await;
    let mut jb = db.subscribe("jb").await.expect("subscribe");
    let mut jc = db.subscribe("jc").await.expect("subscribe");
    let (l, r) = (db.source("l").await.unwrap(), db.source("r").await.unwrap());
    l.push(event_batch(&[ev(1, BASE, Some(10)), ev(2, BASE, Some(20))]))
        .await
        .unwrap();
    r.push(event_batch(&[ev(1, BASE + 1_000, Some(11))]))
        .await
        .unwrap();
    assert_eq!(
        take_rows(&mut jb, 1).await,
        vec![("+", vec![i(1), i(10), i(11)])]
    );
    let mut first = take_rows(&mut jc, 4).await;
    first.sort();
    assert_eq!(
        first,
        vec![
            ("+", vec![i(1), i(10), null.clone()]),
            ("+", vec![i(1), i(10), i(11)]),
            ("+", vec![i(2), i(20), null.clone()]),
            ("-", vec![i(1), i(10), null.clone()]),
        ]
    );
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_joins(dir.path()).await;
    let mut jb = db.subscribe("jb").await.expect("subscribe");
    let mut jc = db.subscribe("jc").await.expect("subscribe");
    let (l, r) = (db.source("l").await.unwrap(), db.source("r").await.unwrap());
    r.push(event_batch(&[ev(2, BASE + 2_000, Some(21))]))
        .await
        .unwrap();
    r.push(event_batch(&[ev(1, BASE + 2_500, Some(12))]))
        .await
        .unwrap();
    l.push(event_batch(&[ev(3, BASE + 10_000, Some(30))]))
        .await
        .unwrap();
    r.push(event_batch(&[ev(9, BASE + 10_000, None)]))
        .await
        .unwrap();
    l.finish().await.unwrap();
    r.finish().await.unwrap();
    complete(&db).await;
    db.shutdown().await.unwrap();
    let mut b: Vec<_> = drain(&mut jb).await.iter().flat_map(changes).collect();
    b.sort();
    assert_eq!(
        b,
        vec![
            ("+", vec![i(1), i(10), i(12)]),
            ("+", vec![i(2), i(20), i(21)]),
            ("+", vec![i(3), i(30), null.clone()]),
        ]
    );
    let mut c: Vec<_> = drain(&mut jc).await.iter().flat_map(changes).collect();
    c.sort();
    assert_eq!(
        c,
        vec![
            ("+", vec![i(1), i(10), i(12)]),
            ("+", vec![i(2), i(20), i(21)]),
            ("+", vec![i(3), i(30), null.clone()]),
            ("-", vec![i(2), i(20), null.clone()]),
        ]
    );
}
