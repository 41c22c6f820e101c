//! What Sluice refuses, and with which message.

use std::sync::Arc;

use sluice::arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::Database;

use crate::common::{open, source_ddl};

async fn db() -> Database {
    open(&format!(
        "{}; CREATE STREAM plain AS SELECT key, value FROM src",
        source_ddl("src", 1_000, "")
    ))
    .await
}

async fn refused(db: &Database, sql: &str, needles: &[&str]) {
    let err = match db.execute(sql).await {
        Ok(_) => panic!("accepted: {sql}"),
        Err(e) => e.to_string(),
    };
    for n in needles {
        assert!(err.contains(n), "error for `{sql}` lacks {n:?}: {err}");
    }
}

#[tokio::test]
async fn unknown_function() {
    let db = db().await;
    refused(
        &db,
        "CREATE STREAM x AS SELECT no_such_fn(value) AS v FROM src",
        &["Invalid function 'no_such_fn'"],
    )
    .await;
    // The failed statement left nothing behind: the name is still free.
    db.execute("CREATE STREAM x AS SELECT value FROM src")
        .await
        .expect("name is free");
}

#[tokio::test]
async fn join() {
    refused(
        &db().await,
        "CREATE STREAM x AS SELECT l.key FROM src l LEFT SEMI JOIN src r ON l.key = r.key",
        &["LeftSemi JOIN in a continuous query (inner, LEFT, RIGHT and FULL OUTER joins are supported)"],
    )
    .await;
    refused(
        &db().await,
        "CREATE STREAM x AS SELECT l.key FROM src l JOIN src r ON l.value < r.value",
        &["a JOIN without an equality between its two inputs"],
    )
    .await;
    refused(
        &db().await,
        "CREATE STREAM x AS SELECT l.key FROM src l, src r",
        &["a JOIN without an equality between its two inputs"],
    )
    .await;
    let db = db().await;
    db.execute("CREATE STREAM counts AS SELECT key, COUNT(*) AS n FROM src GROUP BY key")
        .await
        .expect("updating aggregate");
    refused(
        &db,
        "CREATE STREAM x AS SELECT c.key FROM counts c JOIN src s ON c.key = s.key",
        &["JOIN over a changelog input"],
    )
    .await;
}

#[tokio::test]
async fn order_by() {
    refused(
        &db().await,
        "CREATE STREAM x AS SELECT key FROM src ORDER BY key",
        &["unsupported: ORDER BY in a continuous query"],
    )
    .await;
}

#[tokio::test]
async fn emit_on_window_close_without_window() {
    let db = db().await;
    refused(
        &db,
        "CREATE STREAM x AS SELECT key, COUNT(*) AS n FROM src GROUP BY key EMIT ON WINDOW CLOSE",
        &["EMIT ON WINDOW CLOSE on a GROUP BY without a window function"],
    )
    .await;
    refused(
        &db,
        "CREATE STREAM x AS SELECT key FROM src EMIT ON WINDOW CLOSE",
        &["EMIT ON WINDOW CLOSE on 'x': the query has no GROUP BY aggregation"],
    )
    .await;
}

#[tokio::test]
async fn unknown_with_option() {
    let db = db().await;
    refused(
        &db,
        "CREATE SOURCE s2 (ts TIMESTAMP) WITH (bogus = '1')",
        &["unknown option 'bogus' for source 's2'"],
    )
    .await;
    db.execute("CREATE SOURCE s2 (ts TIMESTAMP)")
        .await
        .expect("name is free");
}

#[tokio::test]
async fn pushed_batch_with_wrong_column_type() {
    let db = db().await;
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("value", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1])),
            Arc::new(TimestampMillisecondArray::from(vec![1_000])),
            Arc::new(StringArray::from(vec!["seven"])),
        ],
    )
    .expect("batch");
    let src = db.source("src").await.expect("source");
    let err = src
        .push(batch)
        .await
        .expect_err("wrong type accepted")
        .to_string();
    assert!(
        err.contains("column 'value' is declared Int64 but the batch has Utf8"),
        "{err}"
    );
    // The pipeline is unharmed.
    src.finish().await.expect("finish");
    db.run_to_completion().await.expect("still runs");
}

#[tokio::test]
async fn select_from_a_stream_or_source() {
    let db = db().await;
    refused(
        &db,
        "SELECT * FROM plain",
        &["'plain' is a source or stream and keeps no rows"],
    )
    .await;
    refused(
        &db,
        "SELECT COUNT(*) FROM src",
        &["'src' is a source or stream and keeps no rows"],
    )
    .await;
}
