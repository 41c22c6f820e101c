//! Top-N and deduplication: `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY
//! ...)` bounded in `WHERE`, against the batch oracle.
//!
//! Where the numbering among equal `ORDER BY` keys is arbitrary (DataFusion
//! numbers ties in any order), the queries select only columns that equal
//! rows share, or order by every column, so the expected rows are exact.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, fold, interval, open_tuned, push_all, select,
    source_ddl,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

/// Without a window: the three largest values per key, a changelog.
const PER_KEY: &str = "SELECT key, value, rn FROM (SELECT key, ts, value, \
     ROW_NUMBER() OVER (PARTITION BY key ORDER BY value DESC) AS rn FROM src) WHERE rn <= 3";

/// Without a window, whole rows, ties broken by every column, `rn < 3`
/// and a condition on another column kept as written.
const WHOLE_ROWS: &str = "SELECT * FROM (SELECT key, ts, value, \
     ROW_NUMBER() OVER (PARTITION BY key % 2 ORDER BY value ASC, ts DESC, key) AS rn FROM src) \
     WHERE rn < 3 AND key <> 4";

/// Deduplication, keep first by event time: append-only.
const FIRST: &str = "SELECT key, ts, rn FROM (SELECT key, ts, value, \
     ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS rn FROM src) WHERE rn <= 2";

/// `DISTINCT ON` keeping the first row by event time (append-only) and
/// the largest value (a changelog).
const DISTINCT_ON_FIRST: &str = "SELECT DISTINCT ON (key) key, ts FROM src ORDER BY key, ts";
const DISTINCT_ON_MAX: &str =
    "SELECT DISTINCT ON (key % 3) key % 3 AS k, value FROM src ORDER BY key % 3, value DESC";

/// `ORDER BY ... LIMIT` over the whole stream: the three largest values
/// (a changelog) and the two earliest times (append-only).
const LARGEST: &str = "SELECT value FROM src ORDER BY value DESC LIMIT 3";
const EARLIEST: &str = "SELECT ts FROM src ORDER BY ts LIMIT 2";

async fn changelog(s: &Stream, pc: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE STREAM per_key AS {PER_KEY}; CREATE STREAM whole AS {WHOLE_ROWS}; \
         CREATE MATERIALIZED VIEW per_key_view AS {PER_KEY}; CREATE STREAM first AS {FIRST}; \
         CREATE STREAM on_first AS {DISTINCT_ON_FIRST}; CREATE STREAM on_max AS {DISTINCT_ON_MAX}; \
         CREATE STREAM largest AS {LARGEST}; CREATE STREAM earliest AS {EARLIEST}",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, pc).await;
    let mut per_key = db.subscribe("per_key").await.expect("subscribe");
    let mut whole = db.subscribe("whole").await.expect("subscribe");
    let mut first = db.subscribe("first").await.expect("subscribe");
    let mut on_first = db.subscribe("on_first").await.expect("subscribe");
    let mut on_max = db.subscribe("on_max").await.expect("subscribe");
    let mut largest = db.subscribe("largest").await.expect("subscribe");
    let mut earliest = db.subscribe("earliest").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    let metrics = complete(&db).await;
    // Every row reached its partition in time: a drop would be a row the
    // oracle has and the stream lost.
    prop_assert!(
        metrics.operator_late_rows.is_empty(),
        "{:?}",
        metrics.operator_late_rows
    );
    let view = select(&db, "SELECT * FROM per_key_view").await;
    db.shutdown().await.expect("shutdown");
    let fail = TestCaseError::fail;
    let per_key = fold(&drain(&mut per_key).await).map_err(fail)?;
    let whole = fold(&drain(&mut whole).await).map_err(fail)?;
    let first = appended(&drain(&mut first).await).map_err(fail)?;
    let on_first = appended(&drain(&mut on_first).await).map_err(fail)?;
    let on_max = fold(&drain(&mut on_max).await).map_err(fail)?;
    let largest = fold(&drain(&mut largest).await).map_err(fail)?;
    let earliest = appended(&drain(&mut earliest).await).map_err(fail)?;
    let tables = [("src", table(&split_late(s).on_time, &[]))];
    let expected = query(&tables, PER_KEY).await;
    prop_assert_eq!(&per_key, &expected, "folded per-key top-N vs batch");
    prop_assert_eq!(&view, &expected, "view vs batch");
    prop_assert_eq!(
        &whole,
        &query(&tables, WHOLE_ROWS).await,
        "whole rows vs batch"
    );
    prop_assert_eq!(&first, &query(&tables, FIRST).await, "first rows vs batch");
    prop_assert_eq!(
        &on_first,
        &query(&tables, DISTINCT_ON_FIRST).await,
        "DISTINCT ON first by time vs batch"
    );
    prop_assert_eq!(
        &on_max,
        &query(&tables, DISTINCT_ON_MAX).await,
        "DISTINCT ON largest vs batch"
    );
    prop_assert_eq!(
        &largest,
        &query(&tables, LARGEST).await,
        "ORDER BY DESC LIMIT vs batch"
    );
    prop_assert_eq!(
        &earliest,
        &query(&tables, EARLIEST).await,
        "ORDER BY ts LIMIT vs batch"
    );
    Ok(())
}

fn per_window(size: i64) -> String {
    let w = interval(size);
    format!(
        "SELECT key, tumble(ts, {w}) AS ws, tumble_end(ts, {w}) AS we, COUNT(*) AS n, MAX(value) AS mx \
         FROM src GROUP BY key, tumble(ts, {w}), tumble_end(ts, {w})"
    )
}

/// The two busiest keys per window, over a windowed aggregation stream.
const TOP_WINDOWS: &str = "SELECT ws, n, rn FROM (SELECT *, \
     ROW_NUMBER() OVER (PARTITION BY ws ORDER BY n DESC) AS rn FROM agg) WHERE rn <= 2";

/// The largest value per window, through the window TVF.
fn tvf(size: i64) -> String {
    format!(
        "SELECT window_start, window_end, value, rn FROM (SELECT key, value, window_start, window_end, \
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY value DESC) AS rn \
         FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), {}))) WHERE rn <= 2",
        interval(size)
    )
}

/// Flink's window top-N: ranking the rows of a TVF aggregation per window.
fn tvf_aggregate(size: i64) -> String {
    format!(
        "SELECT window_start, n, rn FROM (SELECT *, \
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS rn \
         FROM (SELECT window_start, window_end, key, COUNT(*) AS n \
         FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), {})) GROUP BY window_start, window_end, key)) \
         WHERE rn <= 2",
        interval(size)
    )
}

/// The TVF query as DataFusion reads it: the window columns computed by tumble().
fn tvf_oracle(size: i64) -> String {
    let w = interval(size);
    format!(
        "SELECT window_start, window_end, value, rn FROM (SELECT key, value, window_start, window_end, \
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY value DESC) AS rn \
         FROM (SELECT *, tumble(ts, {w}) AS window_start, tumble_end(ts, {w}) AS window_end FROM src)) \
         WHERE rn <= 2"
    )
}

async fn windowed(s: &Stream, size: i64, pc: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE STREAM agg AS {}; CREATE STREAM top AS {TOP_WINDOWS}; \
         CREATE STREAM nested AS {}; CREATE STREAM tvf AS {}; CREATE STREAM tvf_agg AS {}",
        source_ddl("src", s.delay_ms, ""),
        per_window(size),
        TOP_WINDOWS.replace("FROM agg", &format!("FROM ({})", per_window(size))),
        tvf(size),
        tvf_aggregate(size)
    );
    let db = open_tuned(&ddl, pc).await;
    let mut top = db.subscribe("top").await.expect("subscribe");
    let mut nested = db.subscribe("nested").await.expect("subscribe");
    let mut tvf_sub = db.subscribe("tvf").await.expect("subscribe");
    let mut tvf_agg = db.subscribe("tvf_agg").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    let metrics = complete(&db).await;
    // Every row reached its partition in time: a drop would be a row the
    // oracle has and the stream lost.
    prop_assert!(
        metrics.operator_late_rows.is_empty(),
        "{:?}",
        metrics.operator_late_rows
    );
    db.shutdown().await.expect("shutdown");
    let fail = TestCaseError::fail;
    let top = appended(&drain(&mut top).await).map_err(fail)?;
    let nested = appended(&drain(&mut nested).await).map_err(fail)?;
    let tvf_rows = appended(&drain(&mut tvf_sub).await).map_err(fail)?;
    let tvf_agg = appended(&drain(&mut tvf_agg).await).map_err(fail)?;
    let tables = [("src", table(&split_late(s).on_time, &[]))];
    let expected = query(
        &tables,
        &TOP_WINDOWS.replace("FROM agg", &format!("FROM ({})", per_window(size))),
    )
    .await;
    prop_assert_eq!(&top, &expected, "top-N over a window stream vs batch");
    prop_assert_eq!(&nested, &expected, "nested top-N over windows vs batch");
    prop_assert_eq!(&tvf_agg, &expected, "top-N over a TVF aggregation vs batch");
    prop_assert_eq!(
        &tvf_rows,
        &query(&tables, &tvf_oracle(size)).await,
        "TVF top-N vs batch"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn top_n_without_window_matches_batch(s in stream(60), pc in per_cycle()) {
        block_on(changelog(&s, pc))?;
    }

    #[test]
    fn top_n_per_window_matches_batch(s in stream(60), pc in per_cycle(), size in prop_oneof![Just(2_000i64), Just(5_000)]) {
        block_on(windowed(&s, size, pc))?;
    }
}
