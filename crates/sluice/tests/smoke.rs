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
