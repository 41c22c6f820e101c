//! Non-windowed aggregation, stateless queries, UNION ALL and a cascade of
//! streams, against the batch oracle.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, event_batch, fold, interval, open_tuned, push_all,
    select, source_ddl,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

const PER_KEY: &str = "SELECT key, COUNT(*) AS n, SUM(value) AS s, MIN(value) AS mn, \
                       MAX(value) AS mx, COUNT(value) AS nv, AVG(value) AS av, \
                       COUNT(DISTINCT value) AS nd, \
                       COUNT(DISTINCT CASE WHEN value > 10 THEN value END) AS nd_big \
                       FROM src GROUP BY key";
const TOTAL: &str = "SELECT COUNT(*) AS n, SUM(value) AS s FROM src";

async fn updating_aggregate(s: &Stream, per_cycle: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE MATERIALIZED VIEW per_key AS {PER_KEY}; \
         CREATE STREAM per_key_changes AS {PER_KEY}; \
         CREATE MATERIALIZED VIEW total AS {TOTAL}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut changes = db.subscribe("per_key_changes").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let view = select(&db, "SELECT * FROM per_key").await;
    let total = select(&db, "SELECT * FROM total").await;
    db.shutdown().await.expect("shutdown");
    let folded = fold(&drain(&mut changes).await).map_err(TestCaseError::fail)?;

    let t = table(&split_late(s).on_time, &[]);
    let expected = query(&[("src", t.clone())], PER_KEY).await;
    let expected_total = query(&[("src", t)], TOTAL).await;
    prop_assert_eq!(&view, &expected, "materialized view");
    prop_assert_eq!(&folded, &expected, "folded changelog");
    prop_assert_eq!(&total, &expected_total, "global aggregate");
    Ok(())
}

const PROJECT: &str = "SELECT key, ts, value, value * 2 + key AS v2, \
     CASE WHEN value IS NULL THEN 'none' WHEN value >= 30 THEN 'big' \
          WHEN value < 0 THEN 'negative' ELSE 'small' END AS class, \
     CAST(value AS DOUBLE) / 4 AS quarter, CAST(key AS VARCHAR) AS key_text, \
     CAST(ts AS BIGINT) % 1000 AS millis \
     FROM src WHERE key <> 3 AND (value IS NULL OR value % 3 <> 0)";

async fn stateless(s: &Stream, per_cycle: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE STREAM projected AS {PROJECT}; \
         CREATE MATERIALIZED VIEW projected_view AS {PROJECT}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut sub = db.subscribe("projected").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let view = select(&db, "SELECT * FROM projected_view").await;
    db.shutdown().await.expect("shutdown");
    let streamed = appended(&drain(&mut sub).await).map_err(TestCaseError::fail)?;

    let on_time = event_batch(&split_late(s).on_time);
    let expected = query(&[("src", on_time)], PROJECT).await;
    prop_assert_eq!(&streamed, &expected, "stream");
    prop_assert_eq!(&view, &expected, "append-only view");
    Ok(())
}

const TEN_S: i64 = 10_000;

fn union_sql(a: &str, b: &str) -> String {
    format!(
        "SELECT key, ts, value, 'a' AS origin FROM {a} \
         UNION ALL SELECT key, ts, value, 'b' AS origin FROM {b}"
    )
}

/// COUNT and SUM per key and 10 s tumbling window of `from`.
fn per_window_sql(from: &str) -> String {
    let w = format!("tumble(ts, {})", interval(TEN_S));
    format!("SELECT key, {w} AS ws, COUNT(*) AS n, SUM(value) AS s FROM {from} GROUP BY key, {w}")
}

async fn union_all(
    a: &Stream,
    b: &Stream,
    order: &[bool],
    per_cycle: usize,
) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; {}; CREATE STREAM u AS {}; CREATE STREAM uw AS {}; \
         CREATE MATERIALIZED VIEW uw_view AS {} EMIT CHANGES",
        source_ddl("a", a.delay_ms, ""),
        source_ddl("b", b.delay_ms, ""),
        union_sql("a", "b"),
        per_window_sql("u"),
        per_window_sql("u"),
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut u = db.subscribe("u").await.expect("subscribe");
    let mut uw = db.subscribe("uw").await.expect("subscribe");
    let (src_a, src_b) = (
        db.source("a").await.expect("a"),
        db.source("b").await.expect("b"),
    );
    // Interleave the two sources' batches as `order` says (then whatever is left).
    let (mut ia, mut ib) = (a.batches.iter(), b.batches.iter());
    let mut picks = order.iter().copied().chain(std::iter::repeat(true));
    loop {
        let (next_a, next_b) = (ia.len() > 0, ib.len() > 0);
        if !next_a && !next_b {
            break;
        }
        let take_a = next_a && (!next_b || picks.next().unwrap_or(true));
        let (src, batch) = if take_a {
            (&src_a, ia.next())
        } else {
            (&src_b, ib.next())
        };
        src.push(event_batch(batch.expect("batch left")))
            .await
            .expect("push");
    }
    src_a.finish().await.expect("finish a");
    src_b.finish().await.expect("finish b");
    complete(&db).await;
    let uw_view = select(&db, "SELECT * FROM uw_view").await;
    db.shutdown().await.expect("shutdown");
    let fail = TestCaseError::fail;
    let union_rows = appended(&drain(&mut u).await).map_err(fail)?;
    let window_rows = appended(&drain(&mut uw).await).map_err(fail)?;

    let tables = [
        ("a", table(&split_late(a).on_time, &[])),
        ("b", table(&split_late(b).on_time, &[])),
    ];
    let expected = query(&tables, &union_sql("a", "b")).await;
    let nested = format!("({}) AS u", union_sql("a", "b"));
    let expected_windows = query(&tables, &per_window_sql(&nested)).await;
    prop_assert_eq!(&union_rows, &expected, "UNION ALL stream");
    prop_assert_eq!(&window_rows, &expected_windows, "window over the union");
    prop_assert_eq!(&uw_view, &expected_windows, "changelog view over the union");
    Ok(())
}

const KEEP: &str = "SELECT key, ts, value FROM src WHERE value IS NULL OR value >= 0";
const BUSY: &str = "SELECT key, ws, n, s * 10 AS s10 FROM per_window WHERE n >= 2";

async fn cascade(s: &Stream, per_cycle: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE STREAM kept AS {KEEP}; \
         CREATE STREAM per_window AS {}; \
         CREATE STREAM busy AS {BUSY}; \
         CREATE STREAM per_window_changes AS {} EMIT CHANGES; \
         CREATE MATERIALIZED VIEW busy_view AS {}",
        source_ddl("src", s.delay_ms, ""),
        per_window_sql("kept"),
        per_window_sql("kept"),
        BUSY.replace("per_window", "per_window_changes"),
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut busy = db.subscribe("busy").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let view = select(&db, "SELECT * FROM busy_view").await;
    db.shutdown().await.expect("shutdown");
    let streamed = appended(&drain(&mut busy).await).map_err(TestCaseError::fail)?;

    let t = table(&split_late(s).on_time, &[]);
    let sql = BUSY.replace(
        "per_window",
        &format!("({}) AS w", per_window_sql(&format!("({KEEP}) AS k"))),
    );
    let expected = query(&[("src", t)], &sql).await;
    prop_assert_eq!(&streamed, &expected, "three-level cascade");
    prop_assert_eq!(&view, &expected, "filter over a changelog, as a view");
    Ok(())
}

fn interleaving() -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(any::<bool>(), 0..40)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn updating_aggregate_matches_batch(s in stream(60), pc in per_cycle()) {
        block_on(updating_aggregate(&s, pc))?;
    }

    #[test]
    fn stateless_matches_batch(s in stream(60), pc in per_cycle()) {
        block_on(stateless(&s, pc))?;
    }

    #[test]
    fn union_all_matches_batch(a in stream(40), b in stream(40), order in interleaving(), pc in per_cycle()) {
        block_on(union_all(&a, &b, &order, pc))?;
    }

    #[test]
    fn cascade_matches_batch(s in stream(60), pc in per_cycle()) {
        block_on(cascade(&s, pc))?;
    }
}
