//! Exact outcomes of DECIMAL sums and arithmetic near the 38-digit limit:
//! the exact value when it fits the result's precision, an overflow naming
//! the column when it does not, never a wrapped or 39-digit number.

use std::sync::Arc;

use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;

use crate::common::{batch, halted, run, select, AGGREGATIONS};

/// The largest unscaled value of 38 digits.
pub const MAX38: i128 = 10i128.pow(38) - 1;

/// Rows `(k, v, w, ts)` of source `s`, `v` and `w` unscaled values of
/// `DECIMAL(38, scale)`.
pub fn decimal_batch(scale: i8, rows: &[(i64, i128, i128, i64)]) -> RecordBatch {
    batch(&DataType::Decimal128(38, scale), rows)
}

#[tokio::test]
async fn decimal_sum_beyond_38_digits_is_an_overflow_in_every_aggregation() {
    // 6e37 + 6e37 = 1.2e38 fits in i128 but has 39 digits; MAX38 + MAX38
    // does not even fit in i128 (DataFusion's sum wraps it).
    let six = 6 * 10i128.pow(37);
    let cases = [
        (
            0,
            six,
            "sum(s.v) = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)",
        ),
        (
            2,
            six,
            "sum(s.v) = 1200000000000000000000000000000000000.00 does not fit in DECIMAL(38, 2)",
        ),
        (
            0,
            MAX38,
            "sum(s.v) = 99999999999999999999999999999999999999 + 99999999999999999999999999999999999999 (beyond 128 bits) does not fit in DECIMAL(38, 0)",
        ),
        (
            2,
            MAX38,
            "sum(s.v) = 999999999999999999999999999999999999.99 + 999999999999999999999999999999999999.99 (beyond 128 bits) does not fit in DECIMAL(38, 2)",
        ),
    ];
    for (scale, v, detail) in cases {
        for (what, statements) in AGGREGATIONS {
            let rows = vec![decimal_batch(scale, &[(1, v, 0, 1_000), (1, v, 0, 2_000)])];
            let ty = format!("DECIMAL(38, {scale})");
            let (code, message) = halted(run(&ty, "ts", statements, rows).await);
            assert_eq!(code, "SLC-ENG-013", "{what}");
            assert_eq!(
                message,
                format!("pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'total': {detail}"),
                "{what} {ty}"
            );
        }
    }
}

#[tokio::test]
async fn decimal_sum_that_fits_is_exact_in_every_final_window() {
    // MAX38 + 1 - 1: the sum passes 38 digits on the way and comes back
    // before the window closes (an updating aggregate would emit the
    // 39-digit intermediate sum, which is an overflow).
    for (what, statements) in &AGGREGATIONS[1..4] {
        let rows = vec![
            decimal_batch(2, &[(1, MAX38, 0, 1_000), (1, 1, 0, 1_500)]),
            decimal_batch(2, &[(1, -1, 0, 2_000)]),
        ];
        let out = run("DECIMAL(38, 2)", "ts", statements, rows).await.unwrap();
        assert!(!out.is_empty(), "{what}");
        for row in &out {
            assert!(
                row.ends_with("|999999999999999999999999999999999999.99"),
                "{what}: {out:?}"
            );
        }
    }
}

#[tokio::test]
async fn decimal_sum_of_smaller_precision_is_checked_against_its_own_result_type() {
    // SUM of DECIMAL(37, 3) is DECIMAL(38, 3): 11 rows of the largest value
    // need 39 digits (and fit in i128).
    let big = 10i128.pow(37) - 1;
    let rows: Vec<(i64, i128, i128, i64)> = (0..11).map(|i| (1, big, 0, 1_000 + i)).collect();
    let (_, message) = halted(
        run(
            "DECIMAL(37, 3)",
            "ts",
            &["CREATE MATERIALIZED VIEW out AS SELECT k, SUM(v) AS total FROM s GROUP BY k"],
            vec![narrow_batch(37, 3, &rows)],
        )
        .await,
    );
    assert_eq!(
        message,
        "pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'total': sum(s.v) = 109999999999999999999999999999999999.989 does not fit in DECIMAL(38, 3)"
    );
}

/// Rows of `DECIMAL(precision, scale)` values.
fn narrow_batch(precision: u8, scale: i8, rows: &[(i64, i128, i128, i64)]) -> RecordBatch {
    let b = decimal_batch(scale, rows);
    let dt = DataType::Decimal128(precision, scale);
    let cast = |i: usize| sluice::arrow::compute::cast(b.column(i), &dt).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", dt.clone(), true),
        Field::new("w", dt.clone(), true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![b.column(0).clone(), cast(1), cast(2), b.column(3).clone()],
    )
    .unwrap()
}

#[tokio::test]
async fn decimal_sum_over_a_changelog_input_overflows_naming_its_own_stream() {
    let six = 6 * 10i128.pow(37);
    let rows = vec![decimal_batch(0, &[(1, six, 0, 1_000), (2, six, 0, 2_000)])];
    let (_, message) = halted(
        run(
            "DECIMAL(38, 0)",
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
        "pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'total': sum(per_key.sv) = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)"
    );
}

#[tokio::test]
async fn projected_decimal_arithmetic_beyond_38_digits_is_an_overflow() {
    let six = 6 * 10i128.pow(37);
    let cases = [
        ("v + w", six, six, "60000000000000000000000000000000000000 + 60000000000000000000000000000000000000 = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)"),
        ("v - w", six, -six, "60000000000000000000000000000000000000 - -60000000000000000000000000000000000000 = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)"),
        ("v * w", 2 * 10i128.pow(19), 6 * 10i128.pow(18), "20000000000000000000 * 6000000000000000000 = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)"),
        // Beyond i128: Arrow's checked kernel already refuses these.
        ("v * w", 10i128.pow(20), 10i128.pow(20), "Overflow happened on: 100000000000000000000 * 100000000000000000000"),
        ("v + w", MAX38, MAX38, "Overflow happened on: 99999999999999999999999999999999999999 + 99999999999999999999999999999999999999"),
    ];
    for (expr, v, w, detail) in cases {
        let rows = vec![decimal_batch(0, &[(1, v, w, 1_000)])];
        let sql = format!("CREATE MATERIALIZED VIEW out AS SELECT k, {expr} AS r FROM s");
        let got = run("DECIMAL(38, 0)", "ts", &[&sql], rows).await;
        let (code, message) = halted(got);
        assert_eq!(code, "SLC-ENG-013");
        assert_eq!(
            message,
            format!("pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'r': {detail}"),
            "{expr}"
        );
    }
}

#[tokio::test]
async fn one_shot_select_decimal_sum_and_arithmetic_are_checked() {
    let db = sluice::Database::open_in_memory().await.unwrap();
    db.execute(
        "CREATE SOURCE s (k BIGINT, v DECIMAL(38, 0), w DECIMAL(38, 0), ts TIMESTAMP, WATERMARK FOR ts AS ts)",
    )
    .await
    .unwrap();
    db.execute("CREATE MATERIALIZED VIEW m AS SELECT k, v, w FROM s")
        .await
        .unwrap();
    let src = db.source("s").await.unwrap();
    let six = 6 * 10i128.pow(37);
    src.push(decimal_batch(
        0,
        &[
            (1, six, six, 1_000),
            (2, six, 1, 2_000),
            (3, -six, 1, 3_000),
        ],
    ))
    .await
    .unwrap();
    src.finish().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), db.run_to_completion())
        .await
        .unwrap()
        .unwrap();
    let e = select(&db, "SELECT SUM(v) AS t FROM m WHERE k < 3")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "SLC-ENG-013", "{e}");
    assert_eq!(
        e.to_string(),
        "arithmetic overflow (SLC-ENG-013): sum(m.v) = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)"
    );
    let e = select(&db, "SELECT v + w AS r FROM m WHERE k = 1")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "SLC-ENG-013", "{e}");
    assert_eq!(
        e.to_string(),
        "arithmetic overflow (SLC-ENG-013): 60000000000000000000000000000000000000 + 60000000000000000000000000000000000000 = 120000000000000000000000000000000000000 does not fit in DECIMAL(38, 0)"
    );
    // Sums and arithmetic that fit are exact.
    assert_eq!(
        select(&db, "SELECT SUM(v) AS t FROM m").await.unwrap(),
        vec![six.to_string()]
    );
    assert_eq!(
        select(&db, "SELECT SUM(DISTINCT v) AS t FROM m")
            .await
            .unwrap(),
        vec!["0".to_string()]
    );
    assert_eq!(
        select(&db, "SELECT v + w AS r FROM m WHERE k = 2")
            .await
            .unwrap(),
        vec![(six + 1).to_string()]
    );
    db.shutdown().await.ok();
}
