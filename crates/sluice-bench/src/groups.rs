//! The live-groups memory workload: a hop-window aggregation whose every
//! window holds the same `keys` distinct groups, run long enough that many
//! windows open and close, reporting resident memory along the way.
//!
//! Rows are `(key BIGINT, price BIGINT, ts TIMESTAMP)`. Every slide of
//! event time carries each key exactly once (keys in a shuffled order), so
//! once the first window is full each open window holds all `keys` groups
//! and `size / slide` windows are open at once. Batches are generated while
//! pushing (holding the whole input would dominate resident memory), so the
//! throughput figure includes generation.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use serde::Serialize;
use sluice::Database;

use crate::error::Result;
use crate::rss::{self, Memory};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct GroupsOptions {
    /// Distinct keys (groups per window).
    pub keys: u64,
    /// Slides of event time to generate.
    pub slides: u64,
    /// Window slide (ms).
    pub slide_ms: i64,
    /// Window size (ms); a multiple of the slide.
    pub size_ms: i64,
    /// Rows per pushed batch.
    pub batch_size: usize,
}

/// Resident memory after a number of slides.
#[derive(Debug, Clone, Serialize)]
pub struct MemorySample {
    /// Slides pushed so far.
    pub slides: u64,
    /// Open (window, key) groups at that point.
    pub live_groups: u64,
    /// Resident memory then.
    pub memory: Memory,
}

/// The outcome.
#[derive(Debug, Clone, Serialize)]
pub struct GroupsReport {
    /// Distinct keys.
    pub keys: u64,
    /// Windows open at once.
    pub windows_open: u64,
    /// Rows pushed.
    pub rows: u64,
    /// Output rows (one per key per closed window).
    pub output_rows: u64,
    /// What the output must be: every window that saw a row closes with
    /// one row per key.
    pub expected_output_rows: u64,
    /// Rows per second, generation included.
    pub rows_per_sec: f64,
    /// Samples after each window-size worth of slides.
    pub samples: Vec<MemorySample>,
    /// Peak resident memory of the process.
    pub peak: Memory,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// A bijection of `0..n` (multiply by an odd constant modulo a power of two
/// at least `n`, skipping values out of range), so each slide visits every
/// key once in a scattered order.
fn scatter(i: u64, n: u64) -> u64 {
    let m = n.next_power_of_two().max(2);
    let mut x = i;
    loop {
        x = (x
            .wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1)
            .wrapping_add(0x632B_E5AB))
            & (m - 1);
        if x < n {
            return x;
        }
    }
}

/// Run the workload.
pub async fn run_groups(o: &GroupsOptions) -> Result<GroupsReport> {
    let db = Database::open_in_memory().await?;
    db.execute(&format!(
        "CREATE SOURCE bids (key BIGINT, price BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM per_key AS
         SELECT key, hop(ts, INTERVAL '{slide}' MILLISECOND, INTERVAL '{size}' MILLISECOND) AS window_start,
                COUNT(*) AS bids, SUM(price) AS total, MAX(price) AS top
         FROM bids
         GROUP BY key, hop(ts, INTERVAL '{slide}' MILLISECOND, INTERVAL '{size}' MILLISECOND)
         EMIT ON WINDOW CLOSE;",
        slide = o.slide_ms,
        size = o.size_ms
    ))
    .await?;
    let mut sub = db.subscribe("per_key").await?;
    let counter = tokio::spawn(async move {
        let mut rows = 0u64;
        while let Ok(Some(b)) = sub.next().await {
            rows += b.data.num_rows() as u64;
        }
        rows
    });
    let src = db.source("bids").await?;
    db.start().await?;
    let windows_open = (o.size_ms / o.slide_ms).max(1) as u64;
    let per_row_ms = o.slide_ms as f64 / o.keys as f64;
    let mut samples = Vec::new();
    let started = Instant::now();
    let mut pushed = 0u64;
    for slide in 0..o.slides {
        let mut i = 0u64;
        while i < o.keys {
            let n = (o.keys - i).min(o.batch_size as u64);
            let keys: Vec<i64> = (i..i + n).map(|j| scatter(j, o.keys) as i64).collect();
            let prices: Vec<i64> = keys
                .iter()
                .map(|k| (k * 31 + slide as i64) % 1000)
                .collect();
            let base = slide as i64 * o.slide_ms;
            let ts: Vec<i64> = (i..i + n)
                .map(|j| base + (j as f64 * per_row_ms) as i64)
                .collect();
            let batch = RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(keys)),
                    Arc::new(Int64Array::from(prices)),
                    Arc::new(TimestampMillisecondArray::from(ts)),
                ],
            )?;
            src.push(batch).await?;
            i += n;
            pushed += n;
        }
        if (slide + 1) % windows_open == 0 {
            // The source channel is bounded, so the pipeline is at most a
            // few batches behind what was pushed.
            let live = windows_open.min(slide + 1) * o.keys;
            samples.push(MemorySample {
                slides: slide + 1,
                live_groups: live,
                memory: rss::read(),
            });
        }
    }
    src.finish().await?;
    db.run_to_completion().await?;
    let secs = started.elapsed().as_secs_f64();
    db.shutdown().await?;
    let output_rows = counter
        .await
        .map_err(|e| crate::BenchError::Task(e.to_string()))?;
    Ok(GroupsReport {
        keys: o.keys,
        windows_open,
        rows: pushed,
        output_rows,
        expected_output_rows: (o.slides + windows_open - 1) * o.keys,
        rows_per_sec: pushed as f64 / secs,
        samples,
        peak: rss::read(),
    })
}

impl GroupsReport {
    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as text.
    pub fn to_text(&self) -> String {
        let mib = |m: Option<f64>| m.map_or("n/a".to_string(), |v| format!("{v:.0} MiB"));
        let mut out = format!(
            "hop window, {} keys, {} windows open: {} rows at {} rows/s (generation included), {} output rows{}\n",
            crate::report::thousands(self.keys as f64),
            self.windows_open,
            crate::report::thousands(self.rows as f64),
            crate::report::thousands(self.rows_per_sec),
            crate::report::thousands(self.output_rows as f64),
            if self.output_rows == self.expected_output_rows {
                String::new()
            } else {
                format!(" (EXPECTED {})", self.expected_output_rows)
            }
        );
        out.push_str("| slides | live groups | RSS | peak RSS |\n|---:|---:|---:|---:|\n");
        for s in &self.samples {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                s.slides,
                crate::report::thousands(s.live_groups as f64),
                mib(s.memory.rss_mib),
                mib(s.memory.peak_mib)
            ));
        }
        out.push_str(&format!(
            "peak RSS of the run: {}\n",
            mib(self.peak.peak_mib)
        ));
        out
    }
}
