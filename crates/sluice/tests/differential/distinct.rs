//! `SELECT DISTINCT` in a continuous query: with a window function among the
//! selected columns it runs as a windowed `GROUP BY` with no aggregate, so
//! each distinct row is emitted once, when its window closes; without one it
//! is refused at CREATE by name.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, interval, open, open_tuned, push_all,
    source_ddl, Cell, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Split, Stream};
use crate::oracle::{query, table};

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

proptest! {
    #![proptest_config(config())]

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

/// EXPLAIN shows a windowed DISTINCT as the window aggregation it runs as
/// (state freed per window), and a non-windowed DISTINCT is refused by name.
#[tokio::test]
async fn explain_and_refusal() {
    let db = open(&source_ddl("src", 1_000, "")).await;
    let out = db
        .execute("EXPLAIN CREATE STREAM x AS SELECT DISTINCT key, tumble(ts, INTERVAL '10' SECOND) AS w FROM src")
        .await
        .expect("explain");
    let text: Vec<String> = crate::common::rows(&out)
        .into_iter()
        .map(|r| match &r[0] {
            Cell::Str(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect();
    let joined = text.join("\n");
    assert!(
        joined.contains(
            "WindowAggregate: window=tumble(size=10000ms, offset=0ms) on src.ts, keys=[src.key], aggregates=[], emit=on window close"
        ),
        "{joined}"
    );
    let err = db
        .execute("CREATE STREAM y AS SELECT DISTINCT key, value FROM src")
        .await
        .expect_err("non-windowed DISTINCT accepted");
    assert!(
        err.to_string().contains(
            "SELECT DISTINCT without a window function (tumble, hop or session) in a continuous query"
        ),
        "{err}"
    );
}
