//! What checkpoints cost a file-source pipeline whose reader runs ahead:
//! the case where a barrier once waited behind the queued read-ahead (with
//! `checkpoint_interval = 60ms` checkpoints came only every ~0.45 s, output
//! paused ~0.75 s around each, and a 200k-row run took 4.1 s with
//! checkpoints against 2.5 s without). Prints a markdown table.
//!
//! Run: `cargo run --release -p sluice --example alignment_bench -- 20000000`
//! (rows; default 20,000,000: this pipeline takes 200,000 rows in about
//! 30 ms, too fast for a 60 ms interval). Each configuration runs `ROUNDS`
//! times (default 3): checkpoints off, and every 60 ms;
//! `max_batches_per_cycle` at its default. Reported: wall time, checkpoints committed and their mean
//! spacing, the longest compute-thread pause, and the longest gap between
//! two output batches at a subscriber.

use std::time::{Duration, Instant};

use sluice::Database;

async fn run(input: &std::path::Path, interval: Option<&str>) -> sluice::Result<[f64; 5]> {
    let dir = tempfile::tempdir().map_err(|e| sluice::Error::Internal(e.to_string()))?;
    let mut b = Database::builder();
    if let Some(i) = interval {
        b = b.state_dir(dir.path()).set("checkpoint_interval", i)?;
    }
    let db = b.open().await?;
    db.execute(&format!(
        "CREATE SOURCE s (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = '{}', format = 'csv', batch_size = '1000');
         CREATE STREAM pass AS SELECT k, v FROM s;
         CREATE STREAM totals AS SELECT k, COUNT(*) AS n, SUM(v) AS total FROM s GROUP BY k;",
        input.display()
    ))
    .await?;
    let mut sub = db.subscribe("pass").await?;
    let gaps = tokio::spawn(async move {
        let (mut last, mut widest) = (None::<Instant>, Duration::ZERO);
        while let Ok(Some(_)) = sub.next().await {
            let now = Instant::now();
            if let Some(l) = last {
                widest = widest.max(now - l);
            }
            last = Some(now);
        }
        widest
    });
    let started = Instant::now();
    let m = db.run_to_completion().await?;
    let secs = started.elapsed().as_secs_f64();
    db.shutdown().await?;
    let widest = gaps
        .await
        .map_err(|e| sluice::Error::Internal(e.to_string()))?;
    let spacing = if m.checkpoints > 0 {
        secs * 1000.0 / m.checkpoints as f64
    } else {
        0.0
    };
    Ok([
        secs,
        m.checkpoints as f64,
        spacing,
        m.checkpoint_pause_max_ns as f64 / 1e6,
        widest.as_secs_f64() * 1000.0,
    ])
}

#[tokio::main]
async fn main() -> sluice::Result<()> {
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().map_err(|e| sluice::Error::Internal(e.to_string()))?;
    let input = dir.path().join("in.csv");
    let mut csv = String::from("k,v,ts\n");
    for i in 0..rows {
        csv.push_str(&format!("{},{i},{}\n", i % 10_000, i * 10));
    }
    std::fs::write(&input, csv).map_err(|e| sluice::Error::Internal(e.to_string()))?;
    println!("{rows} rows from a CSV file in batches of 1,000; {rounds} round(s).\n");
    println!("| checkpoints | round | wall time | committed | mean spacing | compute pause max | widest output gap |");
    println!("|---|---|---|---|---|---|---|");
    for round in 1..=rounds {
        for interval in [None, Some("60ms")] {
            let [secs, n, spacing, pause, gap] = run(&input, interval).await?;
            println!(
                "| {} | {round} | {:.2} s | {n} | {} | {pause:.1} ms | {gap:.0} ms |",
                interval.unwrap_or("off"),
                secs,
                if n > 0.0 {
                    format!("{spacing:.0} ms")
                } else {
                    "-".into()
                },
            );
        }
    }
    Ok(())
}
