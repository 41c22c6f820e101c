//! Checkpoint cost against state size, recovery time, and the throughput
//! cost of periodic checkpoints. Prints markdown tables.
//!
//! Run with: `benches/checkpoint.sh` (release build), or
//! `cargo run --release -p sluice --example checkpoint_bench -- 10 100 1000`
//! where the arguments are target state sizes in MB.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::Database;

const DDL: &str = "CREATE SOURCE s (k BIGINT, v BIGINT, payload VARCHAR, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
    CREATE STREAM agg AS SELECT k, tumble(ts, INTERVAL '1' DAY) AS day,
        COUNT(*) AS n, SUM(v) AS total, MAX(payload) AS top
    FROM s GROUP BY k, tumble(ts, INTERVAL '1' DAY);";

/// Approximate bytes of state per group (key, count, sum, 64-byte max string).
const BYTES_PER_GROUP: u64 = 110;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("payload", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

fn batch(first_key: i64, rows: usize, key_space: i64, ts: i64) -> sluice::Result<RecordBatch> {
    let keys: Vec<i64> = (0..rows as i64)
        .map(|i| (first_key + i) % key_space)
        .collect();
    let payload: Vec<String> = keys.iter().map(|k| format!("{k:064}")).collect();
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(keys.clone())),
            Arc::new(Int64Array::from(keys)),
            Arc::new(StringArray::from(payload)),
            Arc::new(TimestampMillisecondArray::from(vec![ts; rows])),
        ],
    )?)
}

async fn open(dir: &std::path::Path, interval: &str) -> sluice::Result<Database> {
    let db = Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", interval)?
        .open()
        .await?;
    db.execute(DDL).await?;
    Ok(db)
}

async fn state_size_row(mb: u64) -> sluice::Result<String> {
    let dir = tempfile::tempdir().map_err(|e| sluice::Error::Internal(e.to_string()))?;
    let groups = (mb * 1_000_000 / BYTES_PER_GROUP) as i64;
    let db = open(dir.path(), "1h").await?;
    db.start().await?;
    let src = db.source("s").await?;
    let chunk = 65_536usize;
    let mut k = 0i64;
    while k < groups {
        let n = chunk.min((groups - k) as usize);
        src.push(batch(k, n, groups, 1_000)?).await?;
        k += n as i64;
    }
    src.advance_watermark(500).await?;
    // Wait until every batch went through a cycle.
    while db.metrics().events_ingested < groups as u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = db.checkpoint().await?;
    db.abort().await?;
    drop(src);
    drop(db);
    let started = Instant::now();
    let again = open(dir.path(), "1h").await?;
    again.start().await?;
    let recovery = started.elapsed();
    again.abort().await?;
    Ok(format!(
        "| {mb} MB target | {groups} | {:.1} MB | {:.3} s | {:.3} s |",
        report.state_bytes as f64 / 1e6,
        report.duration.as_secs_f64(),
        recovery.as_secs_f64()
    ))
}

async fn throughput(interval: &str, events: usize) -> sluice::Result<(f64, u64)> {
    let dir = tempfile::tempdir().map_err(|e| sluice::Error::Internal(e.to_string()))?;
    let db = Database::builder()
        .state_dir(dir.path())
        .set("checkpoint_interval", interval)?
        .open()
        .await?;
    db.execute(
        "CREATE SOURCE s (k BIGINT, v BIGINT, ts TIMESTAMP,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
         CREATE STREAM agg AS SELECT k, tumble(ts, INTERVAL '10' SECOND) AS w, COUNT(*) AS n, SUM(v) AS total
         FROM s GROUP BY k, tumble(ts, INTERVAL '10' SECOND);",
    )
    .await?;
    db.start().await?;
    let src = db.source("s").await?;
    let chunk = 8_192usize;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    // Keys and values are shared between batches; only event time changes,
    // so generating input costs next to nothing next to processing it.
    let keys: sluice::arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..chunk as i64).map(|i| i % 10_000),
    ));
    let started = Instant::now();
    for i in 0..events / chunk {
        let ts = TimestampMillisecondArray::from(vec![(i * 20) as i64; chunk]);
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::clone(&keys), Arc::clone(&keys), Arc::new(ts)],
        )?;
        src.push(b).await?;
    }
    src.finish().await?;
    db.run_to_completion().await?;
    let secs = started.elapsed().as_secs_f64();
    let checkpoints = db.metrics().checkpoints;
    db.abort().await?;
    Ok(((events / chunk * chunk) as f64 / secs, checkpoints))
}

#[tokio::main]
async fn main() -> sluice::Result<()> {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10, 100]
    } else {
        sizes
    };
    println!(
        "| state | groups | checkpoint size | checkpoint duration | recovery (open + restore) |"
    );
    println!("|---|---|---|---|---|");
    for mb in sizes {
        println!("{}", state_size_row(mb).await?);
    }
    let events: usize = std::env::var("CHECKPOINT_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000_000);
    let (off, _) = throughput("off", events).await?;
    let (on, taken) = throughput("1s", events).await?;
    println!();
    println!("| checkpoint_interval | events/s (tumble 10 s, 10k keys, {events} events) | checkpoints taken |");
    println!("|---|---|---|");
    println!("| off | {off:.0} | 0 |");
    println!(
        "| 1s | {on:.0} ({:+.1}%) | {taken} |",
        (on / off - 1.0) * 100.0
    );
    Ok(())
}
