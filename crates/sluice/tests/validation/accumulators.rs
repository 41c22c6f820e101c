//! Aggregate arguments DataFusion checks only when it creates an
//! accumulator (a percentile of 2.0, a non-literal `n`, ...) are refused at
//! CREATE, by EXPLAIN CREATE and by a one-shot SELECT, as planning errors
//! naming the function; a pipeline never halts on them later.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use sluice::arrow::array::{
    ArrayRef, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::Database;

use super::LIMIT;

/// Argument lists that are out of range, NULL, of the wrong kind, or a
/// column where a literal is required, over `v DOUBLE`, `w BIGINT` and
/// `name VARCHAR`.
const ARGUMENTS: &[&str] = &[
    "v",
    "w",
    "name",
    "NULL",
    "v, 2.0",
    "v, -1.0",
    "v, 0",
    "v, NULL",
    "v, v",
    "v, w",
    "v, 'x'",
    "name, ','",
    "name, name",
    "name, NULL",
    "v, 0.5, 2.0",
    "v, 0.5, -1",
    "v, 0.5, v",
    "v, 0.5, NULL",
    "v, w, 2.0",
    "v, w, -0.5",
    "v, w, v",
];

/// The rows pushed when a statement was accepted.
fn rows() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Float64, true),
        Field::new("w", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![1, 2, 1, 2])),
        Arc::new(Float64Array::from(vec![
            Some(1.5),
            Some(-2.0),
            None,
            Some(4.0),
        ])),
        Arc::new(Int64Array::from(vec![Some(3), Some(1), Some(2), None])),
        Arc::new(StringArray::from(vec![
            Some("a"),
            None,
            Some("b"),
            Some("c"),
        ])),
        Arc::new(TimestampMillisecondArray::from(vec![0, 10, 1_500, 3_000])),
    ];
    RecordBatch::try_new(schema, columns).unwrap()
}

/// Every aggregate function name of the session registry (DataFusion's
/// defaults plus Sluice's checked SUM, which replaces `sum`).
fn aggregate_names() -> BTreeSet<String> {
    let ctx = SessionContext::new();
    let state = ctx.state();
    state
        .aggregate_functions()
        .values()
        .map(|f| f.name().to_string())
        .collect()
}

/// The statements one call is tried in: a grouped view (updating), a
/// tumbling window (grouped accumulators), a session window (row
/// accumulators) and an aggregate over the changelog of `last`
/// (retracting).
fn statements(call: &str) -> [String; 4] {
    [
        format!("CREATE STREAM c AS SELECT {call} AS x FROM last"),
        format!("CREATE MATERIALIZED VIEW g AS SELECT k, {call} AS x FROM s GROUP BY k"),
        format!(
            "CREATE STREAM t AS SELECT {call} AS x FROM s GROUP BY tumble(ts, INTERVAL '1' SECOND)"
        ),
        format!(
            "CREATE STREAM p AS SELECT k, {call} AS x FROM s GROUP BY k, session(ts, INTERVAL '1' SECOND)"
        ),
    ]
}

/// Refused with a user error code (SLC-SQL-*), never an execution error.
fn assert_user_error(what: &str, e: &sluice::Error) {
    assert!(
        e.code().starts_with("SLC-SQL-"),
        "{what}: refused with {} (not a user error): {e}",
        e.code()
    );
}

/// Try one call in every statement shape and in a one-shot SELECT; returns
/// how many statements were accepted.
async fn try_call(call: &str) -> usize {
    let db = Database::open_in_memory().await.unwrap();
    db.execute(
        "CREATE SOURCE s (k BIGINT, v DOUBLE, w BIGINT, name VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
    )
    .await
    .unwrap();
    db.execute("CREATE MATERIALIZED VIEW base AS SELECT k, v, w, name FROM s")
        .await
        .unwrap();
    db.execute(
        "CREATE MATERIALIZED VIEW last AS SELECT k, MAX(v) AS v, MIN(w) AS w, MAX(name) AS name FROM s GROUP BY k",
    )
    .await
    .unwrap();
    let mut accepted = 0;
    for sql in statements(call) {
        let explained = db.execute(&format!("EXPLAIN {sql}")).await;
        match db.execute(&sql).await {
            Ok(_) => {
                accepted += 1;
                if let Err(e) = explained {
                    panic!("{sql} is accepted but EXPLAIN refuses it: {e}");
                }
            }
            Err(e) => {
                assert_user_error(&sql, &e);
                let explained = explained.expect_err(&format!("EXPLAIN {sql} must refuse"));
                assert_eq!(explained.code(), e.code(), "EXPLAIN {sql}: {explained}");
            }
        }
    }
    let src = db.source("s").await.unwrap();
    src.push(rows()).await.unwrap();
    src.finish().await.unwrap();
    if let Err(e) = db.run_to_completion().await {
        panic!("{call}: accepted at CREATE, then the pipeline failed: {e}");
    }
    let select = format!("SELECT k, {call} AS x FROM base GROUP BY k");
    if let Err(e) = db.execute(&select).await {
        assert_user_error(&select, &e);
    }
    db.shutdown().await.unwrap();
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_aggregate_with_bad_arguments_is_refused_at_create_or_runs() {
    let names = aggregate_names();
    assert!(names.len() > 20, "registry: {names:?}");
    tokio::time::timeout(LIMIT * 10, async {
        let mut accepted = 0;
        for name in &names {
            for args in ARGUMENTS {
                accepted += try_call(&format!("{name}({args})")).await;
            }
        }
        // The enumeration exercises running pipelines, not only refusals.
        assert!(accepted > 100, "only {accepted} statements accepted");
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_percentile_out_of_range_is_refused_by_create_explain_and_select() {
    tokio::time::timeout(LIMIT, async {
        let db = Database::open_in_memory().await.unwrap();
        db.execute("CREATE SOURCE s (a DOUBLE, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
            .await
            .unwrap();
        db.execute("CREATE MATERIALIZED VIEW base AS SELECT a FROM s")
            .await
            .unwrap();
        let create =
            "CREATE STREAM h AS SELECT a, APPROX_PERCENTILE_CONT(a, 2.0) AS n FROM s GROUP BY a";
        let expected = "planning failed: aggregate approx_percentile_cont in column 'n' cannot take these arguments\ncaused by\nError during planning: Percentile value must be between 0.0 and 1.0 inclusive, 2 is invalid";
        for sql in [create.to_string(), format!("EXPLAIN {create}")] {
            let e = db.execute(&sql).await.expect_err(&sql);
            assert_eq!(e.code(), "SLC-SQL-006", "{sql}: {e}");
            assert_eq!(e.to_string(), expected, "{sql}");
        }
        let select = "SELECT a, APPROX_PERCENTILE_CONT(a, 2.0) AS n FROM base GROUP BY a";
        let e = db.execute(select).await.expect_err(select);
        assert_eq!(e.code(), "SLC-SQL-006", "{e}");
        assert!(
            e.to_string().starts_with(
                "planning failed: aggregate approx_percentile_cont in column 'approx_percentile_cont(base.a,Float64(2))' cannot take these arguments"
            ),
            "{e}"
        );
        // Nothing was created: the name is still free and the pipeline runs.
        db.execute(
            "CREATE STREAM h AS SELECT a, APPROX_PERCENTILE_CONT(a, 0.5) AS n FROM s GROUP BY a",
        )
        .await
        .unwrap();
        let src = db.source("s").await.unwrap();
        src.finish().await.unwrap();
        db.run_to_completion().await.unwrap();
        db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}
