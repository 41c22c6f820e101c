//! Sluice as a library: push Arrow batches into a source, advance its
//! watermark by hand, read a windowed aggregate from a subscription and a
//! changelog-backed materialized view.
//!
//! Run with: `cargo run -p sluice --example embedded`

use std::sync::Arc;

use sluice::arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::display::array_value_to_string;
use sluice::arrow::util::pretty::pretty_format_batches;
use sluice::{ChangeKind, Database};

fn clicks(users: &[&str], pages: &[i64], ts_ms: &[i64]) -> sluice::Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("user_id", DataType::Utf8, true),
        Field::new("page", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(users.to_vec())),
            Arc::new(Int64Array::from(pages.to_vec())),
            Arc::new(TimestampMillisecondArray::from(ts_ms.to_vec())),
        ],
    )?)
}

#[tokio::main]
async fn main() -> sluice::Result<()> {
    let db = Database::open_in_memory().await?;
    db.execute(
        "CREATE SOURCE clicks (user_id VARCHAR, page BIGINT, ts TIMESTAMP,
             WATERMARK FOR ts AS ts - INTERVAL '2' SECOND);
         CREATE STREAM clicks_per_minute AS
             SELECT user_id, tumble(ts, INTERVAL '1' MINUTE) AS minute, COUNT(*) AS clicks
             FROM clicks GROUP BY user_id, tumble(ts, INTERVAL '1' MINUTE)
             EMIT ON WINDOW CLOSE;
         CREATE MATERIALIZED VIEW pages_per_user AS
             SELECT user_id, COUNT(DISTINCT page) AS pages FROM clicks GROUP BY user_id;",
    )
    .await?;

    let mut per_minute = db.subscribe("clicks_per_minute").await?;
    let mut changes = db.subscribe("pages_per_user").await?;
    let source = db.source("clicks").await?;

    source
        .push(clicks(
            &["ann", "bob", "ann"],
            &[1, 1, 2],
            &[1_000, 5_000, 30_000],
        )?)
        .await?;
    source
        .push(clicks(&["ann", "bob"], &[3, 1], &[61_000, 62_000])?)
        .await?;
    // Nothing more before 2 minutes: the first minute's window closes.
    source.advance_watermark(120_000).await?;

    let first = per_minute.next().await?.expect("the first window closes");
    println!(
        "first closed window:\n{}",
        pretty_format_batches(&[first.data])?
    );

    // The changelog of the updating aggregate: inserts and retractions.
    while let Some(batch) = changes.try_next() {
        for i in 0..batch.data.num_rows() {
            let kind = match batch.kind(i) {
                ChangeKind::Insert => "+",
                ChangeKind::Retract => "-",
            };
            let user = array_value_to_string(batch.data.column(0), i)?;
            let pages = array_value_to_string(batch.data.column(1), i)?;
            println!("{kind} {user} {pages}");
        }
    }

    source.finish().await?;
    db.run_to_completion().await?;
    let view = db
        .execute("SELECT * FROM pages_per_user ORDER BY user_id")
        .await?;
    println!("pages per user:\n{}", pretty_format_batches(&view)?);
    let metrics = db.shutdown().await?;
    println!(
        "{} rows in, {} rows out, watermark {}",
        metrics.rows_in(),
        metrics.rows_emitted(),
        metrics.watermark
    );
    Ok(())
}
