//! `agg(x) OVER (...)` over a changelog input (a non-windowed GROUP BY,
//! whose rows are updated as their groups grow): the output is a
//! changelog whose folded state, and the materialized view of it, equal
//! the same query in batch, for ROWS and RANGE frames, ascending and
//! descending orders, with and without PARTITION BY; exact changes per
//! cycle and across a checkpoint and a restart.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    block_on, complete, config, drain, ev, event_batch, fold, interval, next, open_tuned, push_all,
    select, source_ddl, Cell, Row, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

/// The changelog input: one row per (key, value bucket), updated as rows
/// arrive. `(key, bucket)` is unique, which makes the orders below total.
const GROUPS: &str = "SELECT key, value % 4 AS bucket, COUNT(*) AS n, MAX(ts) AS last, \
                      SUM(value) AS total FROM src GROUP BY key, value % 4";

/// The query over `g`: its columns and every supported aggregate over `w`.
fn over_query(w: &str) -> String {
    let w = format!("OVER ({w})");
    format!(
        "SELECT key, bucket, n, last, total, SUM(total) {w} AS s, COUNT(*) {w} AS c, \
         COUNT(total) {w} AS cv, AVG(n) {w} AS a, MIN(total) {w} AS lo, MAX(last) {w} AS hi \
         FROM g"
    )
}

/// A ROWS frame over a total order (a ROWS frame over ties would depend on
/// an order the batch oracle does not fix).
fn rows_window() -> impl Strategy<Value = String> {
    let frame = prop_oneof![
        Just("ROWS BETWEEN CURRENT ROW AND CURRENT ROW".to_string()),
        Just("ROWS BETWEEN 1 PRECEDING AND CURRENT ROW".to_string()),
        Just("ROWS BETWEEN 3 PRECEDING AND CURRENT ROW".to_string()),
        Just("ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".to_string()),
    ];
    let order = prop_oneof![
        Just("PARTITION BY key ORDER BY last, bucket"),
        Just("PARTITION BY key ORDER BY n DESC, bucket NULLS FIRST"),
        Just("ORDER BY total NULLS FIRST, key, bucket"),
        Just("ORDER BY last DESC, key, bucket DESC"),
    ];
    (order, frame).prop_map(|(o, f)| format!("{o} {f}"))
}

/// A RANGE frame: peers share a frame, so any order is deterministic.
fn range_window() -> impl Strategy<Value = String> {
    let by_time = prop_oneof![
        Just(Some(0i64)),
        Just(Some(2_000)),
        Just(Some(7_500)),
        Just(None)
    ]
    .prop_map(|ms| match ms {
        Some(ms) => format!("RANGE BETWEEN {} PRECEDING AND CURRENT ROW", interval(ms)),
        None => "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".into(),
    });
    let by_count = prop_oneof![
        Just("RANGE BETWEEN 1 PRECEDING AND CURRENT ROW"),
        Just("RANGE BETWEEN 3 PRECEDING AND CURRENT ROW"),
        Just("RANGE BETWEEN CURRENT ROW AND CURRENT ROW"),
    ];
    prop_oneof![
        by_time
            .clone()
            .prop_map(|f| format!("PARTITION BY key ORDER BY last {f}")),
        by_time.prop_map(|f| format!("ORDER BY last DESC {f}")),
        by_count
            .clone()
            .prop_map(|f| format!("PARTITION BY key ORDER BY n {f}")),
        by_count.prop_map(|f| format!("ORDER BY n DESC {f}")),
    ]
}

/// The folded changelog and the view equal the nested query in batch.
async fn check(s: &Stream, pc: usize, window: &str) -> Result<(), TestCaseError> {
    let sql = over_query(window);
    let ddl = format!(
        "{}; CREATE STREAM g AS {GROUPS}; CREATE STREAM o AS {sql}; \
         CREATE MATERIALIZED VIEW v AS {sql}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, pc).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let view = select(&db, "SELECT * FROM v").await;
    db.shutdown().await.expect("shutdown");
    let folded = fold(&drain(&mut sub).await).map_err(TestCaseError::fail)?;
    let nested = sql.replace("FROM g", &format!("FROM ({GROUPS}) AS g"));
    let expected = query(&[("src", table(&split_late(s).on_time, &[]))], &nested).await;
    prop_assert_eq!(&folded, &expected, "folded changelog: {}", sql);
    prop_assert_eq!(&view, &expected, "view: {}", sql);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn rows_over_a_changelog_matches_batch(s in stream(60), pc in per_cycle(), w in rows_window()) {
        block_on(check(&s, pc, &w))?;
    }

    #[test]
    fn range_over_a_changelog_matches_batch(s in stream(60), pc in per_cycle(), w in range_window()) {
        block_on(check(&s, pc, &w))?;
    }
}

/// Per key: its row count and sum, and the sum of the sums of this key and
/// the one before it in (count, key) order.
const PAIRS: &str = "SELECT key, n, total, \
     SUM(total) OVER (ORDER BY n, key ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s \
     FROM (SELECT key, COUNT(*) AS n, SUM(value) AS total FROM src GROUP BY key) AS g";

async fn open_at(dir: &std::path::Path) -> sluice::Database {
    let db = sluice::Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.execute(&format!(
        "{}; SET subscription_buffer = 1000000; CREATE STREAM o AS {PAIRS}",
        source_ddl("src", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// Push rows of (key, ms after BASE, value) as one batch (on time: the
/// watermark has no delay).
async fn push(db: &sluice::Database, rows: &[(i64, i64, i64)]) {
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

fn row(key: i64, n: i64, total: i64, s: i64) -> Row {
    [key, n, total, s].into_iter().map(Cell::Int).collect()
}

/// A cycle's changes, sorted, `+` for an insert and `-` for a retraction.
fn changes(b: &sluice::ChangeBatch) -> Vec<(char, Row)> {
    let mut out: Vec<(char, Row)> = crate::common::batch_rows(&b.data)
        .into_iter()
        .enumerate()
        .map(|(i, r)| match b.kind(i) {
            sluice::ChangeKind::Insert => ('+', r),
            sluice::ChangeKind::Retract => ('-', r),
        })
        .collect();
    out.sort();
    out
}

/// Each cycle's changes exactly: a group that moves retracts its own row
/// and the row after it, whose frame held it; the same after a checkpoint
/// and a restart, and the changelog over both runs folds to the final state.
#[tokio::test]
async fn changes_exact_and_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_at(dir.path()).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    let mut all = Vec::new();
    push(&db, &[(1, 1, 10), (2, 2, 5), (3, 3, 1)]).await;
    all.push(next(&mut sub).await);
    assert_eq!(
        changes(&all[0]),
        vec![
            ('+', row(1, 1, 10, 10)),
            ('+', row(2, 1, 5, 15)),
            ('+', row(3, 1, 1, 6))
        ]
    );
    // Key 2 moves after key 3: key 1 keeps its frame.
    push(&db, &[(2, 4, 7)]).await;
    all.push(next(&mut sub).await);
    assert_eq!(
        changes(&all[1]),
        vec![
            ('+', row(2, 2, 12, 13)),
            ('+', row(3, 1, 1, 11)),
            ('-', row(2, 1, 5, 15)),
            ('-', row(3, 1, 1, 6))
        ]
    );
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open_at(dir.path()).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    push(&db, &[(1, 5, 3)]).await;
    all.push(next(&mut sub).await);
    assert_eq!(
        changes(&all[2]),
        vec![
            ('+', row(1, 2, 13, 14)),
            ('+', row(2, 2, 12, 25)),
            ('+', row(3, 1, 1, 1)),
            ('-', row(1, 1, 10, 10)),
            ('-', row(2, 2, 12, 13)),
            ('-', row(3, 1, 1, 11))
        ]
    );
    db.abort().await.expect("abort");
    assert_eq!(
        fold(&all).expect("a consistent changelog"),
        vec![row(1, 2, 13, 14), row(2, 2, 12, 25), row(3, 1, 1, 1)]
    );
}
