//! One measured run on LaminarDB.
//!
//! # Architecture
//!
//! The main task pushes every prepared batch through the sources' untyped
//! handles; a spawned task reads the `out` stream's subscription at the
//! same time. Reading concurrently is required, not a nicety: LaminarDB's
//! subscription log is bounded and ends a reader that falls behind with
//! `Lagged`, which reading only after the last push would provoke.
//!
//! The clock starts right before the first push and stops at the arrival
//! of the output batch that completes the expected row count (or of the
//! last batch before `idle_timeout` passed without output after the
//! pushes). CPU seconds are the process's (`getrusage`, every thread)
//! over the same interval. After that, untimed, output keeps being counted
//! until 500 ms pass without any, so a query that emits more rows than
//! expected is seen as such.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use laminar_core::streaming::StreamingError;
use laminar_db::subscription::{PortalFrame, SubscribeStart, SubscriptionPortal};
use laminar_db::{LaminarDB, UntypedSourceHandle};

use crate::args::Args;
use crate::error::{BenchError, Result};
use crate::input::{self, Push};

/// Name of the measured stream.
const OUT: &str = "out";
/// Wait for one output frame before checking the stop conditions again.
const POLL: Duration = Duration::from_millis(100);
/// Silence that ends the untimed count of trailing output.
const TRAILING: Duration = Duration::from_millis(500);
/// How much output LaminarDB keeps for a subscriber that has not read it
/// yet. Without it the log holds two 8 MiB batches and ends a reader that
/// falls further behind with `Lagged`, which q0 and q1 (every input row is
/// an output row) provoked even with the reader on its own task: the
/// pusher and LaminarDB's compute keep both cores busy. Retention only
/// changes how far behind the reader may fall, not the work measured.
const RETAIN_HISTORY: &str = "4gb";

/// What one run measured.
#[derive(Debug)]
pub struct Measured {
    pub rows: u64,
    pub secs: f64,
    pub cpu_secs: f64,
    pub out_rows: u64,
    /// The output batches when `--dump` was given.
    pub output: Vec<RecordBatch>,
}

fn refused(what: impl Into<String>) -> impl FnOnce(laminar_db::DbError) -> BenchError {
    let what = what.into();
    move |source| BenchError::Refused { what, source }
}

/// Create the sources and the stream, load the inputs (untimed), then
/// push and receive (timed).
pub async fn run(args: &Args) -> Result<Measured> {
    let db = LaminarDB::open().map_err(refused("open"))?;
    let mut handles = Vec::new();
    let mut per_source = Vec::new();
    for source in &args.sources {
        let mut columns = source.columns.clone();
        if let Some(w) = &args.watermark {
            columns.push_str(&format!(
                ", WATERMARK FOR {c} AS {c} - INTERVAL '{d}' SECOND",
                c = w.column,
                d = w.delay_secs
            ));
        }
        let ddl = format!("CREATE SOURCE {} ({columns})", source.name);
        db.execute(&ddl)
            .await
            .map_err(refused(format!("CREATE SOURCE {}", source.name)))?;
        let handle = db
            .source_untyped(&source.name)
            .map_err(refused(format!("source {}", source.name)))?;
        per_source.push(input::load_csv(&source.csv, handle.schema())?);
        handles.push(handle);
    }
    // With a WATERMARK, each source's input ends with a later event that
    // closes its open windows (see `input::end_sentinel`).
    let mut sentinels = Vec::new();
    if let Some(w) = &args.watermark {
        for (i, batches) in per_source.iter().enumerate() {
            if let Some(row) = input::end_sentinel(batches, &w.column)? {
                sentinels.push((i, row));
            }
        }
    }
    let pushes = match &args.interleave_by {
        Some(column) => input::interleaved(per_source, column)?,
        None => input::in_file_order(per_source),
    };
    db.execute(&format!(
        "CREATE STREAM {OUT} AS {} WITH ('retain_history' = '{RETAIN_HISTORY}')",
        args.sql
    ))
    .await
    .map_err(refused("CREATE STREAM"))?;
    db.start().await.map_err(refused("start"))?;
    let portal = db
        .open_subscription(OUT, None, SubscribeStart::Tail)
        .await
        .map_err(refused("subscribe"))?;

    let pushed = Arc::new(OnceLock::new());
    let reader = Reader {
        expected: args.expected,
        idle_timeout: args.idle_timeout,
        keep: args.dump.is_some(),
        pushed: Arc::clone(&pushed),
    };
    let started = Instant::now();
    let cpu_started = cpu_seconds();
    let receiving = tokio::spawn(reader.read(portal, started, cpu_started));
    let rows = push_all(&args.sources, &handles, pushes, args.idle_timeout).await;
    let rows = match rows {
        Ok(rows) => push_all(&args.sources, &handles, sentinels, args.idle_timeout)
            .await
            .map(|_| rows),
        Err(e) => Err(e),
    };
    // Also on a failed push, so the reader stops.
    let _ = pushed.set(Instant::now());
    let received = receiving
        .await
        .map_err(|e| BenchError::Subscription(format!("reader task: {e}")))?;
    let rows = rows?;
    let received = received?;
    // Not timed; an error here does not change the measurement.
    if let Err(e) = db.shutdown().await {
        eprintln!("laminardb-bench: {}: shutdown: {e}", args.query);
    }
    Ok(Measured {
        rows,
        secs: received.done.duration_since(started).as_secs_f64(),
        cpu_secs: received.cpu_done - cpu_started,
        out_rows: received.rows,
        output: received.batches,
    })
}

/// Push every batch, waiting while a source's queue is full. Returns the
/// rows pushed.
async fn push_all(
    sources: &[crate::args::SourceSpec],
    handles: &[UntypedSourceHandle],
    pushes: Vec<Push>,
    idle_timeout: Duration,
) -> Result<u64> {
    let mut rows = 0u64;
    for (i, batch) in pushes {
        let refused_since = Instant::now();
        let n = batch.num_rows() as u64;
        loop {
            match handles[i].push_arrow(batch.clone()) {
                Ok(()) => break,
                Err(StreamingError::ChannelFull) if refused_since.elapsed() < idle_timeout => {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                Err(e) => {
                    return Err(BenchError::Push {
                        stream: sources[i].name.clone(),
                        message: e.to_string(),
                    })
                }
            }
        }
        rows += n;
    }
    Ok(rows)
}

/// Process CPU seconds (user + system, every thread) so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The subscriber side of a run.
struct Reader {
    expected: Option<u64>,
    idle_timeout: Duration,
    keep: bool,
    /// Set by the pusher once the last batch was pushed.
    pushed: Arc<OnceLock<Instant>>,
}

struct Received {
    rows: u64,
    /// Arrival of the last timed output batch (the start if none came).
    done: Instant,
    cpu_done: f64,
    batches: Vec<RecordBatch>,
}

impl Reader {
    async fn read(
        self,
        mut portal: SubscriptionPortal,
        started: Instant,
        cpu_started: f64,
    ) -> Result<Received> {
        let mut got = Received {
            rows: 0,
            done: started,
            cpu_done: cpu_started,
            batches: Vec::new(),
        };
        loop {
            if let Some(&pushed) = self.pushed.get() {
                let complete = self.expected.is_some_and(|e| got.rows >= e);
                let idle = pushed.max(got.done).elapsed() >= self.idle_timeout;
                if complete || idle {
                    break;
                }
            }
            if let Ok(frame) = tokio::time::timeout(POLL, portal.next_frame()).await {
                match self.take(frame, &mut got)? {
                    Some(0) | None => {}
                    Some(_) => {
                        got.done = Instant::now();
                        got.cpu_done = cpu_seconds();
                    }
                }
            }
        }
        // Untimed: whatever else arrives, for the row count.
        while let Ok(frame) = tokio::time::timeout(TRAILING, portal.next_frame()).await {
            self.take(frame, &mut got)?;
        }
        Ok(got)
    }

    /// Count one frame's rows; `None` for a frame without rows.
    fn take(&self, frame: Option<PortalFrame>, got: &mut Received) -> Result<Option<u64>> {
        match frame {
            Some(PortalFrame::Batch { batch, .. }) => {
                let n = batch.num_rows() as u64;
                got.rows += n;
                if self.keep && n > 0 {
                    got.batches.push(batch);
                }
                Ok(Some(n))
            }
            Some(PortalFrame::Barrier { .. }) => Ok(None),
            Some(PortalFrame::Lagged(skipped)) => Err(BenchError::Subscription(format!(
                "the reader fell {skipped} entries behind LaminarDB's log"
            ))),
            Some(PortalFrame::Error { message }) => Err(BenchError::Subscription(message)),
            None => Err(BenchError::Subscription(
                "the stream's subscription closed".into(),
            )),
        }
    }
}
