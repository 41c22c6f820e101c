//! Checkpoint cost against state size, recovery time, and the throughput
//! cost of periodic checkpoints. Prints markdown tables.
//!
//! Run with: `benches/checkpoint.sh` (release build), or
//! `cargo run --release -p sluice --example checkpoint_bench -- 100 1000`
//! where the arguments are target state sizes in MB.
//!
//! The pause table fills each size of state, then measures what a
//! checkpoint costs the rows flowing through: a probe batch every 40 ms is
//! timed from `push` to its subscriber (p50, p99 and the largest, which is
//! the longest stall of the compute thread), then the pipeline is fed as
//! fast as it takes rows. Each size runs with `checkpoint_interval = 1s`
//! and with checkpoints off. `CHECKPOINT_BENCH=pause` runs only that
//! table; `PAUSE_SECS` sets each phase's length (default 15 s) and
//! `PAUSE_ROUNDS` the number of alternating off/on pairs per size (default 1),
//! and `TAIL_SHARE` the `checkpoint_tail_share` option (default: the engine's);
//! `PAUSE_KEYS=shuffled` feeds the probe and full-speed phases keys in a
//! fixed pseudo-random order instead of the order the fill created them in,
//! so each batch's rows spread over every part of the state;
//! `CHECKPOINT_BENCH_EVENTS=N` adds the old throughput table over N events
//! (`CHECKPOINT_BENCH=throughput` runs only that one), with checkpoints every
//! `CHECKPOINT_BENCH_INTERVAL` (default 1s) against none, and how often a
//! checkpoint got through.

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

/// The longest compute-thread pause of the measured phases. The metrics'
/// own maximum counts from the start, so it would include the checkpoints
/// taken while the state was being filled; this one reads each new pause
/// (`checkpoint_pause_last_ns`) as the phases poll the metrics. When two
/// pauses fall between polls it keeps the larger of the last one and the
/// sum of the others, which bounds both from above.
struct PauseSampler {
    seen: u64,
    total_ns: u64,
    max_ns: u64,
}

impl PauseSampler {
    fn new(m: &sluice::MetricsSnapshot) -> Self {
        Self {
            seen: m.checkpoint_pauses,
            total_ns: m.checkpoint_pause_total_ns,
            max_ns: 0,
        }
    }

    fn sample(&mut self, m: &sluice::MetricsSnapshot) {
        let new = m.checkpoint_pauses.saturating_sub(self.seen);
        if new == 0 {
            return;
        }
        let rest = (m.checkpoint_pause_total_ns - self.total_ns)
            .saturating_sub(m.checkpoint_pause_last_ns);
        let longest = if new == 1 {
            m.checkpoint_pause_last_ns
        } else {
            m.checkpoint_pause_last_ns.max(rest)
        };
        self.max_ns = self.max_ns.max(longest);
        self.seen = m.checkpoint_pauses;
        self.total_ns = m.checkpoint_pause_total_ns;
    }
}

/// The load of one pause run.
struct PauseRun {
    /// Probe latencies (ms), sorted.
    latencies_ms: Vec<f64>,
    /// Rows per second at full speed with the state in place.
    throughput: f64,
    /// Checkpoints committed during the run.
    checkpoints: u64,
    /// Duration of the last of them, reservation to durable (ms).
    checkpoint_ms: f64,
    /// Compute-thread pause per checkpoint of the measured phases (the
    /// fill's left out): (mean, max) ms.
    pause_ms: (f64, f64),
    /// The longest pause since the start, the fill's checkpoints included
    /// (the first capture holds every key created before it).
    pause_max_all_ms: f64,
    /// What checkpoints did while the throughput was measured.
    full_speed: FullSpeedCheckpoints,
}

/// Checkpoints during the full-speed phase: the throughput measured there
/// is "during checkpoints" only if tails ran through most of it.
struct FullSpeedCheckpoints {
    /// Checkpoints captured (their compute-thread pauses recorded).
    started: u64,
    /// Checkpoints that became durable.
    committed: u64,
    /// Interval ticks skipped because a tail was still in flight: with a
    /// 1 s interval, about the seconds a tail ran beyond its own tick.
    busy_ticks: u64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

const PAUSE_DDL: &str =
    "CREATE SOURCE s (k BIGINT, v BIGINT, payload VARCHAR, ts TIMESTAMP, seq BIGINT,
        WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
    CREATE STREAM agg AS SELECT k, tumble(ts, INTERVAL '1' DAY) AS day,
        COUNT(*) AS n, SUM(v) AS total, MAX(payload) AS top
    FROM s GROUP BY k, tumble(ts, INTERVAL '1' DAY);
    CREATE STREAM probe AS SELECT seq FROM s WHERE seq >= 0;";

fn pause_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("payload", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("seq", DataType::Int64, true),
    ]))
}

/// A batch over keys `first_key..first_key + rows` (mod `key_space`),
/// each passed through `order`; its first row carries `seq` (the probe),
/// the others -1.
fn pause_batch(
    first_key: i64,
    rows: usize,
    key_space: i64,
    order: KeyOrder,
    payload: &sluice::arrow::array::ArrayRef,
    seq: i64,
) -> sluice::Result<RecordBatch> {
    let keys: sluice::arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..rows as i64).map(|i| order.key((first_key + i) % key_space, key_space)),
    ));
    let seqs = Int64Array::from_iter_values((0..rows).map(|i| if i == 0 { seq } else { -1 }));
    Ok(RecordBatch::try_new(
        pause_schema(),
        vec![
            Arc::clone(&keys),
            keys,
            payload.slice(0, rows),
            Arc::new(TimestampMillisecondArray::from(vec![1_000; rows])),
            Arc::new(seqs),
        ],
    )?)
}

/// The order of the keys a batch carries.
#[derive(Clone, Copy)]
enum KeyOrder {
    /// Key `i` is `i`: the order the fill created the groups in.
    Created,
    /// Key `i` is `i * P mod n` for a large prime `P` (a permutation of
    /// `0..n` whenever `P` does not divide `n`).
    Shuffled,
}

impl KeyOrder {
    fn from_env() -> Self {
        match std::env::var("PAUSE_KEYS").as_deref() {
            Ok("shuffled") => Self::Shuffled,
            _ => Self::Created,
        }
    }

    fn key(self, i: i64, n: i64) -> i64 {
        const P: i128 = 2_654_435_761;
        match self {
            Self::Created => i,
            Self::Shuffled => ((i128::from(i) * P) % i128::from(n.max(1))) as i64,
        }
    }
}

/// Fill `mb` of aggregate state, then (1) push paced probe batches for
/// `PAUSE_SECS` and measure how long each took from `push` to the
/// subscriber (the compute thread's stalls show up here), then (2) push
/// as fast as the pipeline takes for `PAUSE_SECS` and count rows per second.
async fn pause_run(mb: u64, interval: &str) -> sluice::Result<PauseRun> {
    let secs: u64 = std::env::var("PAUSE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let dir = tempfile::tempdir().map_err(|e| sluice::Error::Internal(e.to_string()))?;
    let mut builder = Database::builder()
        .state_dir(dir.path())
        .set("checkpoint_interval", interval)?;
    if let Ok(share) = std::env::var("TAIL_SHARE") {
        builder = builder.set("checkpoint_tail_share", &share)?;
    }
    let db = builder.open().await?;
    db.execute(PAUSE_DDL).await?;
    db.start().await?;
    let src = db.source("s").await?;
    let mut sub = db.subscribe("probe").await?;
    let groups = (mb * 1_000_000 / BYTES_PER_GROUP) as i64;
    let order = KeyOrder::from_env();
    let chunk = 8_192usize;
    let payload: sluice::arrow::array::ArrayRef = Arc::new(StringArray::from(
        (0..65_536).map(|k| format!("{k:064}")).collect::<Vec<_>>(),
    ));
    let mut k = 0i64;
    while k < groups {
        let n = 65_536usize.min((groups - k) as usize);
        src.push(pause_batch(k, n, groups, KeyOrder::Created, &payload, -1)?)
            .await?;
        k += n as i64;
    }
    while db.metrics().events_ingested < groups as u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = db.metrics();
    let mut pauses = PauseSampler::new(&before);
    // (1) Latency: 25 probe batches a second, each timed from push to delivery.
    let pushed: Arc<parking_lot::Mutex<Vec<Instant>>> = Arc::default();
    let pushed_c = Arc::clone(&pushed);
    let consumer = tokio::spawn(async move {
        let mut lat = Vec::new();
        while let Ok(Some(b)) = sub.next().await {
            let at = Instant::now();
            let seqs = b
                .data
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .cloned();
            let times = pushed_c.lock();
            for s in seqs.iter().flat_map(|a| a.values().to_vec()) {
                if let Some(p) = times.get(s as usize) {
                    lat.push(at.duration_since(*p).as_secs_f64() * 1e3);
                }
            }
        }
        lat
    });
    let period = Duration::from_millis(40);
    let mut tick = tokio::time::interval(period);
    let probes = (secs * 1000 / 40) as i64;
    for seq in 0..probes {
        tick.tick().await;
        let b = pause_batch(k, chunk, groups, order, &payload, seq)?;
        k += chunk as i64;
        pushed.lock().push(Instant::now());
        src.push(b).await?;
        pauses.sample(&db.metrics());
    }
    // (2) Throughput: as fast as the pipeline takes batches.
    let at_full_speed = db.metrics();
    let ingested = at_full_speed.events_ingested;
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    while Instant::now() < until {
        src.push(pause_batch(k, chunk, groups, order, &payload, -1)?)
            .await?;
        k += chunk as i64;
        pauses.sample(&db.metrics());
    }
    let throughput =
        (db.metrics().events_ingested - ingested) as f64 / started.elapsed().as_secs_f64();
    let after = db.metrics();
    pauses.sample(&after);
    let full_speed = FullSpeedCheckpoints {
        started: after.checkpoint_pauses - at_full_speed.checkpoint_pauses,
        committed: after.checkpoints - at_full_speed.checkpoints,
        busy_ticks: after.checkpoints_skipped - at_full_speed.checkpoints_skipped,
    };
    db.abort().await?;
    drop(src);
    let mut latencies_ms = consumer
        .await
        .map_err(|e| sluice::Error::Internal(e.to_string()))?;
    latencies_ms.sort_by(f64::total_cmp);
    let checkpoints = after.checkpoints - before.checkpoints;
    let checkpoint_ms = after
        .last_checkpoint
        .map_or(0.0, |r| r.duration.as_secs_f64() * 1e3);
    let count = after.checkpoint_pauses - before.checkpoint_pauses;
    let pause_ms = (
        (after.checkpoint_pause_total_ns - before.checkpoint_pause_total_ns) as f64
            / 1e6
            / count.max(1) as f64,
        pauses.max_ns as f64 / 1e6,
    );
    Ok(PauseRun {
        latencies_ms,
        throughput,
        checkpoints,
        checkpoint_ms,
        pause_ms,
        pause_max_all_ms: after.checkpoint_pause_max_ns as f64 / 1e6,
        full_speed,
    })
}

async fn pause_table(sizes: &[u64]) -> sluice::Result<()> {
    // Runs of one binary on a shared 2-core machine vary by about ±10%
    // between processes, as much as the effect measured: each size runs
    // `PAUSE_ROUNDS` off/on pairs, alternating, and the summary is the
    // median of the pairs' changes.
    let rounds: usize = std::env::var("PAUSE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    println!();
    println!("Probe: 25 batches/s of 8192 rows (one probe row each) over the state, push -> subscriber; then full speed. checkpoint_interval 1s vs off, {rounds} alternating pair(s).");
    println!();
    println!("| state | round | interval | checkpoints | last checkpoint | compute pause mean / max | probe p50 | probe p99 | probe max (stall) | rows/s at full speed | longest pause, fill included | at full speed: started / committed / ticks a tail was in flight |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut summary = Vec::new();
    for &mb in sizes {
        let mut changes = Vec::new();
        for round in 1..=rounds {
            let off = pause_run(mb, "off").await?;
            let on = pause_run(mb, "1s").await?;
            let change = (on.throughput / off.throughput - 1.0) * 100.0;
            changes.push(change);
            for (name, r) in [("off", &off), ("1s", &on)] {
                let delta = if name == "off" {
                    String::new()
                } else {
                    format!(" ({change:+.1}%)")
                };
                println!(
                    "| {mb} MB | {round} | {name} | {} | {:.0} ms | {:.1} / {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.0}{delta} | {:.1} ms | {} / {} / {} |",
                    r.checkpoints,
                    r.checkpoint_ms,
                    r.pause_ms.0,
                    r.pause_ms.1,
                    percentile(&r.latencies_ms, 0.5),
                    percentile(&r.latencies_ms, 0.99),
                    r.latencies_ms.last().copied().unwrap_or(f64::NAN),
                    r.throughput,
                    r.pause_max_all_ms,
                    r.full_speed.started,
                    r.full_speed.committed,
                    r.full_speed.busy_ticks,
                );
            }
        }
        changes.sort_by(f64::total_cmp);
        summary.push((mb, changes));
    }
    println!();
    println!(
        "| state | throughput with 1 s checkpoints against off: median of the pairs | every pair |"
    );
    println!("|---|---|---|");
    for (mb, changes) in summary {
        let all: Vec<String> = changes.iter().map(|c| format!("{c:+.1}%")).collect();
        println!(
            "| {mb} MB | {:+.1}% | {} |",
            percentile(&changes, 0.5),
            all.join(", ")
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> sluice::Result<()> {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100, 1000]
    } else {
        sizes
    };
    let only = std::env::var("CHECKPOINT_BENCH").unwrap_or_default();
    if only.is_empty() {
        println!(
            "| state | groups | checkpoint size | checkpoint duration | recovery (open + restore) |"
        );
        println!("|---|---|---|---|---|");
        for &mb in &sizes {
            println!("{}", state_size_row(mb).await?);
        }
    }
    if only.is_empty() || only == "pause" {
        pause_table(&sizes).await?;
    }
    // The throughput table over N events (long at the old default of
    // 300M) only when asked for; CHECKPOINT_BENCH_INTERVAL sets its
    // interval (default 1s; 60ms shows how often barriers get through).
    let Some(events) = std::env::var("CHECKPOINT_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return Ok(());
    };
    let interval = std::env::var("CHECKPOINT_BENCH_INTERVAL").unwrap_or_else(|_| "1s".into());
    let started = Instant::now();
    let (off, _) = throughput("off", events).await?;
    let off_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (on, taken) = throughput(&interval, events).await?;
    let on_secs = started.elapsed().as_secs_f64();
    println!();
    println!("| checkpoint_interval | events/s (tumble 10 s, 10k keys, {events} events) | run | checkpoints taken | one every |");
    println!("|---|---|---|---|---|");
    println!("| off | {off:.0} | {off_secs:.2} s | 0 | - |");
    println!(
        "| {interval} | {on:.0} ({:+.1}%) | {on_secs:.2} s | {taken} | {:.3} s |",
        (on / off - 1.0) * 100.0,
        on_secs / taken.max(1) as f64
    );
    Ok(())
}
