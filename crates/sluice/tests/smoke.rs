use std::sync::Arc;

use sluice::arrow::array::{Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::pretty::pretty_format_batches;

#[tokio::test]
async fn smoke_tumble() {
    let db = sluice::Database::open_in_memory().await.unwrap();
    db.execute("CREATE SOURCE bids (auction BIGINT, price BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)").await.unwrap();
    db.execute("CREATE MATERIALIZED VIEW w AS SELECT auction, tumble(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(price) AS total, AVG(price) AS avg_price FROM bids GROUP BY auction, tumble(ts, INTERVAL '10' SECOND)").await.unwrap();
    db.execute(
        "CREATE MATERIALIZED VIEW c AS SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction",
    )
    .await
    .unwrap();
    let mut sub = db.subscribe("w").await.unwrap();
    let src = db.source("bids").await.unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 1, 2, 1])),
            Arc::new(Int64Array::from(vec![10, 20, 30, 40])),
            Arc::new(TimestampMillisecondArray::from(vec![
                1000, 2000, 3000, 12000,
            ])),
        ],
    )
    .unwrap();
    src.push(b).await.unwrap();
    src.finish().await.unwrap();
    db.run_to_completion().await.unwrap();
    let out = db
        .execute("SELECT * FROM w ORDER BY auction, ws")
        .await
        .unwrap();
    println!("{}", pretty_format_batches(&out).unwrap());
    let out = db
        .execute("SELECT * FROM c ORDER BY auction")
        .await
        .unwrap();
    println!("{}", pretty_format_batches(&out).unwrap());
    let first = sub.next().await.unwrap().unwrap();
    println!("{}", pretty_format_batches(&[first.data]).unwrap());
    println!("{:?}", db.metrics());
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_finished_source_refuses_more_rows_from_any_handle() {
    let db = sluice::Database::open_in_memory().await.unwrap();
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1])),
            Arc::new(TimestampMillisecondArray::from(vec![1_000])),
        ],
    )
    .unwrap();
    let first = db.source("s").await.unwrap();
    first.push(batch.clone()).await.unwrap();
    first.finish().await.unwrap();
    first.finish().await.unwrap();
    let second = db.source("s").await.unwrap();
    for e in [
        first.push(batch.clone()).await.unwrap_err(),
        second.push(batch).await.unwrap_err(),
        second.advance_watermark(5_000).await.unwrap_err(),
    ] {
        assert!(e.to_string().contains("source 's' was finished"), "{e}");
    }
    let m = db.run_to_completion().await.unwrap();
    assert_eq!(m.rows_in(), 1);
    db.shutdown().await.unwrap();
}

/// A window over an upstream window's *start* receives that start only when
/// the upstream window closes, after its own window over the start has
/// closed: the row is dropped inside the operator (the README's caveat), and
/// `operator_late_rows` counts it for the stream whose operator dropped it,
/// and only that stream.
#[tokio::test]
async fn a_row_an_operator_drops_as_late_is_counted_for_its_stream() {
    let db = sluice::Database::open_in_memory().await.unwrap();
    db.execute(
        "CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts); \
         CREATE STREAM probe AS SELECT k FROM s; \
         CREATE STREAM a AS SELECT tumble(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n \
           FROM s GROUP BY tumble(ts, INTERVAL '10' SECOND); \
         CREATE STREAM b AS SELECT tumble(ws, INTERVAL '5' SECOND) AS w2, SUM(n) AS total \
           FROM a GROUP BY tumble(ws, INTERVAL '5' SECOND)",
    )
    .await
    .unwrap();
    let mut probe = db.subscribe("probe").await.unwrap();
    let mut b = db.subscribe("b").await.unwrap();
    let src = db.source("s").await.unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    // One row per cycle: each push is seen on `probe` before the next, so
    // the watermark passes 15 s (closing b's window [10 s, 15 s)) a cycle
    // before a's window [10 s, 20 s) closes and sends b its start, 10 s.
    for (k, ts) in [(1, 1_000), (2, 12_000), (3, 16_000), (4, 21_000)] {
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![k])),
                Arc::new(TimestampMillisecondArray::from(vec![ts])),
            ],
        )
        .unwrap();
        src.push(batch).await.unwrap();
        let seen = tokio::time::timeout(std::time::Duration::from_secs(10), probe.next())
            .await
            .expect("probe row within 10 s")
            .unwrap()
            .expect("probe open");
        assert_eq!(seen.data.num_rows(), 1);
    }
    src.finish().await.unwrap();
    let m = db.run_to_completion().await.unwrap();
    db.shutdown().await.unwrap();
    let mut out = Vec::new();
    while let Some(batch) = b.next().await.unwrap() {
        out.push(batch.data);
    }
    assert_eq!(
        pretty_format_batches(&out).unwrap().to_string(),
        [
            "+---------------------+-------+",
            "| w2                  | total |",
            "+---------------------+-------+",
            "| 1970-01-01T00:00:00 | 1     |",
            "| 1970-01-01T00:00:20 | 1     |",
            "+---------------------+-------+",
        ]
        .join("\n")
    );
    assert_eq!(
        m.operator_late_rows,
        [("b".to_string(), 1)].into_iter().collect(),
        "{m:?}"
    );
    assert_eq!(m.operator_late_rows_total(), 1);
    assert_eq!(m.late_rows(), 0, "no row was late at its source");
}
