//! Exact outcomes of overflow and of windows that cannot be represented.

use sluice::arrow::datatypes::DataType;

use crate::common::{batch, halted, run, select, AGGREGATIONS};

const MAX: i128 = i64::MAX as i128;
const MIN: i128 = i64::MIN as i128;

fn two_max_rows() -> Vec<sluice::arrow::record_batch::RecordBatch> {
    vec![batch(
        &DataType::Int64,
        &[(1, MAX, 0, 1_000), (1, MAX, 0, 2_000)],
    )]
}

const SUM_OVERFLOW: &str = "arithmetic overflow (SLC-ENG-013) in column 'total': sum(s.v) = 18446744073709551614 does not fit in BIGINT";

#[tokio::test]
async fn sum_of_two_bigint_max_is_an_overflow_in_every_aggregation() {
    for (what, statements) in AGGREGATIONS {
        let (code, message) = halted(run("BIGINT", "ts", statements, two_max_rows()).await);
        assert_eq!(code, "SLC-ENG-013", "{what}");
        assert_eq!(
            message,
            format!("pipeline halted: stream 'out': {SUM_OVERFLOW}"),
            "{what}"
        );
    }
}

#[tokio::test]
async fn sum_over_a_changelog_input_overflows_naming_its_own_stream() {
    // Per key the sums fit; their total over the changelog does not.
    let rows = vec![batch(
        &DataType::Int64,
        &[(1, MAX, 0, 1_000), (2, MAX, 0, 2_000)],
    )];
    let (_, message) = halted(
        run(
            "BIGINT",
            "ts",
            &[
                "CREATE STREAM per_key AS SELECT k, SUM(v) AS sv FROM s GROUP BY k",
                "CREATE MATERIALIZED VIEW out AS SELECT SUM(sv) AS total FROM per_key",
            ],
            rows,
        )
        .await,
    );
    assert_eq!(
        message,
        "pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'total': sum(per_key.sv) = 18446744073709551614 does not fit in BIGINT"
    );
}

#[tokio::test]
async fn an_exact_sum_that_fits_is_right_whatever_the_order() {
    // MAX + MAX overflows on the way, but the sum MAX + MAX - MAX = MAX fits.
    let rows = vec![
        batch(&DataType::Int64, &[(1, MAX, 0, 1_000), (1, MAX, 0, 1_500)]),
        batch(&DataType::Int64, &[(1, -MAX, 0, 2_000)]),
    ];
    let out = run(
        "BIGINT",
        "ts",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, tumble(ts, INTERVAL '10' SECOND) AS ws, SUM(v) AS total FROM s GROUP BY k, tumble(ts, INTERVAL '10' SECOND)"],
        rows,
    )
    .await
    .unwrap();
    assert_eq!(out, vec![format!("1|1970-01-01T00:00:00|{MAX}")]);
}

#[tokio::test]
async fn projected_arithmetic_overflows_naming_the_column() {
    let cases = [
        (
            "SELECT k, v * 2 AS doubled FROM s",
            MAX,
            "column 'doubled': Overflow happened on: 9223372036854775807 * 2",
        ),
        (
            "SELECT k, v + 1 AS next FROM s",
            MAX,
            "column 'next': Overflow happened on: 9223372036854775807 + 1",
        ),
        (
            "SELECT k, v - 1 AS prev FROM s",
            MIN,
            "column 'prev': Overflow happened on: -9223372036854775808 - 1",
        ),
        (
            "SELECT k, -v AS neg FROM s",
            MIN,
            "column 'neg': Overflow happened on: 0 - -9223372036854775808",
        ),
        (
            "SELECT k, v / -1 AS quotient FROM s",
            MIN,
            "column 'quotient': Overflow happened on: -9223372036854775808 / -1",
        ),
        (
            "SELECT k, v FROM s WHERE v * 2 > 0",
            MAX,
            "column 'WHERE v@1 * 2 > 0': Overflow happened on: 9223372036854775807 * 2",
        ),
    ];
    for (query, v, expected) in cases {
        let rows = vec![batch(&DataType::Int64, &[(1, v, 0, 1_000)])];
        let sql = format!("CREATE MATERIALIZED VIEW out AS {query}");
        let (code, message) = halted(run("BIGINT", "ts", &[&sql], rows).await);
        assert_eq!(code, "SLC-ENG-013");
        assert_eq!(
            message,
            format!(
                "pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in {expected}"
            ),
            "{query}"
        );
    }
}

#[tokio::test]
async fn a_remainder_that_fits_is_not_an_overflow() {
    // i64::MIN % -1 is 0 (the quotient overflows, the remainder does not).
    let rows = vec![batch(&DataType::Int64, &[(1, MIN, 0, 1_000)])];
    let out = run(
        "BIGINT",
        "ts",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, v % -1 AS remainder FROM s"],
        rows,
    )
    .await
    .unwrap();
    assert_eq!(out, vec!["1|0".to_string()]);
}

#[tokio::test]
async fn one_shot_select_sums_and_multiplies_checked() {
    let db = sluice::Database::open_in_memory().await.unwrap();
    db.execute(
        "CREATE SOURCE s (k BIGINT, v BIGINT, w BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
    )
    .await
    .unwrap();
    db.execute("CREATE MATERIALIZED VIEW m AS SELECT k, v, ts FROM s")
        .await
        .unwrap();
    let src = db.source("s").await.unwrap();
    src.push(batch(
        &DataType::Int64,
        &[
            (1, MAX, 0, 1_000),
            (2, MAX, 0, 2_000),
            (3, -MAX, 0, 3_000),
            (4, 0, 0, i64::MIN),
        ],
    ))
    .await
    .unwrap();
    src.finish().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), db.run_to_completion())
        .await
        .unwrap()
        .unwrap();
    let cases = [
        (
            "SELECT SUM(v) AS t FROM m WHERE k < 3",
            "sum(m.v) = 18446744073709551614 does not fit in BIGINT",
        ),
        (
            "SELECT v * 2 AS d FROM m",
            "Overflow happened on: 9223372036854775807 * 2",
        ),
        (
            "SELECT -v - 2 AS d FROM m WHERE k < 4",
            "Overflow happened on: -9223372036854775807 - 2",
        ),
        (
            "SELECT tumble(ts, INTERVAL '10' SECOND) AS w FROM m WHERE k = 4",
            "tumble(): the window of event time -9223372036854775808 (Timestamp(ms)) with size 10000 ms and offset 0 ms is outside the representable time range",
        ),
    ];
    for (sql, detail) in cases {
        let e = select(&db, sql).await.unwrap_err();
        assert_eq!(e.code(), "SLC-ENG-013", "{sql}: {e}");
        assert_eq!(
            e.to_string(),
            format!("arithmetic overflow (SLC-ENG-013): {detail}"),
            "{sql}"
        );
    }
    // Arithmetic that fits is unchanged, and keeps the name it was written with.
    assert_eq!(
        select(
            &db,
            "SELECT k + 1 AS k1, COUNT(*) AS n FROM m GROUP BY k + 1"
        )
        .await
        .unwrap(),
        vec!["2|1", "3|1", "4|1", "5|1"]
    );
    let named = db
        .execute("SELECT k * 2, -k FROM m WHERE k = 1")
        .await
        .unwrap();
    let names: Vec<String> = named[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, vec!["m.k * Int64(2)", "(- m.k)"]);
    // The exact sum fits: MAX + MAX - MAX.
    assert_eq!(
        select(&db, "SELECT SUM(v) AS t FROM m").await.unwrap(),
        vec![MAX.to_string()]
    );
    // Distinct values MAX and -MAX.
    assert_eq!(
        select(&db, "SELECT SUM(DISTINCT v) AS t FROM m")
            .await
            .unwrap(),
        vec!["0".to_string()]
    );
    db.shutdown().await.ok();
}

#[tokio::test]
async fn a_window_outside_the_time_range_is_an_error_naming_the_time_column() {
    let tumble = "CREATE MATERIALIZED VIEW out AS SELECT tumble(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM s GROUP BY tumble(ts, INTERVAL '10' SECOND)";
    let hop = "CREATE MATERIALIZED VIEW out AS SELECT hop(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM s GROUP BY hop(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND)";
    let session = "CREATE MATERIALIZED VIEW out AS SELECT session(ts, INTERVAL '10' SECOND) AS ss, COUNT(*) AS n FROM s GROUP BY session(ts, INTERVAL '10' SECOND)";
    let cases = [
        (tumble, i64::MIN, "event time -9223372036854775808 ms: its tumble window of 10000 ms (offset 0 ms) is outside the BIGINT millisecond range"),
        (tumble, i64::MAX, "event time 9223372036854775807 ms: its tumble window of 10000 ms (offset 0 ms) is outside the BIGINT millisecond range"),
        (hop, i64::MIN, "event time -9223372036854775808 ms: its hop window [-9223372036854780000, -9223372036854770000) ms (slide 5000 ms, size 10000 ms) is outside the BIGINT millisecond range"),
        (hop, i64::MAX, "event time 9223372036854775807 ms: its hop window [9223372036854775000, 9223372036854785000) ms (slide 5000 ms, size 10000 ms) is outside the BIGINT millisecond range"),
        (session, i64::MAX, "event time 9223372036854775807 ms: its session end (gap 10000 ms) is outside the BIGINT millisecond range"),
    ];
    for (sql, ts, detail) in cases {
        let rows = vec![batch(&DataType::Int64, &[(1, 1, 0, ts)])];
        let (code, message) = halted(run("BIGINT", "ts", &[sql], rows).await);
        assert_eq!(code, "SLC-ENG-013");
        assert_eq!(
            message,
            format!("pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 's.ts': {detail}"),
            "{sql} at {ts}"
        );
    }
    // The smallest representable tumble window is fine.
    let first = i64::MIN + 5_808; // a multiple of 10 s
    let rows = vec![batch(&DataType::Int64, &[(1, 1, 0, first)])];
    assert_eq!(run("BIGINT", "ts", &[tumble], rows).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_watermark_delay_below_the_smallest_time_stays_at_the_start_of_time() {
    // ts - 4 s at i64::MIN cannot go lower: the watermark stays at i64::MIN,
    // so the row is on time and nothing is closed early.
    let rows = vec![batch(&DataType::Int64, &[(7, 1, 0, i64::MIN)])];
    let out = run(
        "BIGINT",
        "ts - INTERVAL '4' SECOND",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, v FROM s"],
        rows,
    )
    .await
    .unwrap();
    assert_eq!(out, vec!["7|1".to_string()]);
}
