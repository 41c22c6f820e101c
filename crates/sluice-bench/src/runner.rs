//! `sluice bench nexmark`: generate a Nexmark stream in memory, push it
//! through a query, and measure.
//!
//! Generation is timed on its own and excluded from the processing figure:
//! the query's Nexmark source is re-declared as a push source with the same
//! columns and watermark, and the pre-generated batches are pushed into it.
//! Processing time runs from the first push until the pipeline has consumed
//! every row and closed every window (`run_to_completion`), with one
//! subscriber receiving the query's output throughout.
//!
//! With a rate, batches are pushed on a schedule instead (from a dedicated
//! thread, `rate` rows per second) and every output row's latency from push
//! to subscriber delivery is measured (see [`crate::latency`]).
//!
//! A query over several Nexmark streams (the joins) has each stream
//! generated on its own; their batches are pushed merged in event-time
//! order (each stream's own order kept), and latency is not measured.

use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use sluice::{Database, PushSource};

use crate::error::{BenchError, Result};
use crate::latency::{percentiles, Attribution, Delivery};
use crate::options::bench_database;
pub use crate::options::BenchOptions;
use crate::report::{BenchReport, Machine, MemoryReport, Phase, RateReport};
use crate::script::Script;
use crate::workload::generate;
use crate::{queries, rss};

/// Run one benchmark.
pub async fn run_nexmark(opts: &BenchOptions) -> Result<BenchReport> {
    if opts.events == 0 {
        return Err(BenchError::Script("--events must be positive".into()));
    }
    if opts.rate == Some(0) {
        return Err(BenchError::Script(
            "--rate must be positive (omit it to push as fast as possible)".into(),
        ));
    }
    let (name, text) = queries::load(&opts.query)?;
    let script = Script::parse(&text)?;
    let specs: Vec<_> = script
        .sources()
        .filter(|s| s.option("connector") == Some("nexmark"))
        .cloned()
        .collect();
    let batch_size = opts.effective_batch_size();
    let overrides = overrides(opts, batch_size);
    if specs.len() > 1 {
        return crate::many::run_many(opts, name, &script, specs, &overrides, batch_size).await;
    }
    let src = script.nexmark_source()?.clone();
    let output = script.output()?.to_string();
    let cfg = src.nexmark_config(&overrides)?;

    let generated = generate(cfg.clone())?;
    let after_generation = rss::read();
    let watermark = src.watermark.clone();

    let db = bench_database().await?;
    let ddl = script.render(|s| {
        if s.name == src.name {
            s.push_ddl()
        } else {
            Err(BenchError::Script(format!(
                "source '{}' is not the Nexmark source the benchmark drives",
                s.name
            )))
        }
    })?;
    let result = measure(
        &db,
        &ddl,
        &src.name,
        &output,
        generated.batches,
        opts.rate,
        watermark.map(|w| (w.column, w.delay_ms)),
    )
    .await;
    let shutdown = db.shutdown().await;
    let m = result?;
    shutdown?;

    let rows = generated.rows;
    Ok(BenchReport {
        query: name,
        stream: cfg.stream.name().to_string(),
        build: crate::report::build_profile(),
        machine: Machine::current(),
        events: opts.events,
        input_rows: rows,
        batch_size,
        seed: cfg.seed,
        out_of_order_ms: cfg.out_of_order_ms,
        generation: Phase::new(rows, generated.secs),
        processing: Phase::new(rows, m.processing_secs),
        output_rows: m.output_rows,
        late_rows: m.late_rows,
        memory: MemoryReport {
            input_mib: generated.bytes as f64 / (1024.0 * 1024.0),
            rss_after_generation_mib: after_generation.rss_mib,
            peak_rss_mib: m.peak_rss_mib,
        },
        rate: opts.rate.map(|target| RateReport {
            target_rows_per_sec: target,
            latency: m.latency,
            latency_note: m.latency_note,
        }),
    })
}

fn overrides(opts: &BenchOptions, batch_size: usize) -> Vec<(&'static str, String)> {
    let mut overrides = vec![
        ("events", opts.events.to_string()),
        ("batch_size", batch_size.to_string()),
    ];
    if let Some(s) = opts.seed {
        overrides.push(("seed", s.to_string()));
    }
    if let Some(o) = opts.out_of_order_ms {
        overrides.push(("out_of_order_ms", o.to_string()));
    }
    overrides
}

struct Measured {
    processing_secs: f64,
    output_rows: u64,
    late_rows: u64,
    peak_rss_mib: Option<f64>,
    latency: Option<crate::latency::Percentiles>,
    latency_note: Option<String>,
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    db: &Database,
    ddl: &str,
    source_name: &str,
    output: &str,
    batches: Vec<RecordBatch>,
    rate: Option<u64>,
    watermark: Option<(String, i64)>,
) -> Result<Measured> {
    db.execute(ddl).await?;
    let source = db.source(source_name).await?;
    let mut sub = db.subscribe(output).await?;
    let attribution = match (rate, batches.first()) {
        (Some(_), Some(first)) => Attribution::for_query(
            &first.schema(),
            sub.schema(),
            watermark.as_ref().map(|(c, d)| (c.as_str(), *d)),
        ),
        _ => None,
    };
    let mut latency_note = match (rate, &attribution) {
        (Some(_), None) => Some(
            "the output has no window_end (with a watermark) and shares no column with the input"
                .to_string(),
        ),
        _ => None,
    };
    let keep = attribution.is_some();
    let consumer = tokio::spawn(async move {
        let mut rows = 0u64;
        let mut deliveries = Vec::new();
        let mut changelog = false;
        while let Some(b) = sub.next().await? {
            let at = Instant::now();
            rows += b.data.num_rows() as u64;
            changelog |= b.changes.is_some();
            if keep {
                deliveries.push(Delivery { at, batch: b.data });
            }
        }
        Ok::<_, BenchError>((rows, deliveries, changelog))
    });

    let started = Instant::now();
    let kept_inputs = if keep { batches.clone() } else { Vec::new() };
    let pushed = match rate {
        None => {
            for b in batches {
                source.push(b).await?;
            }
            Vec::new()
        }
        Some(rate) => paced(source.clone(), batches, rate).await?,
    };
    source.finish().await?;
    let metrics = db.run_to_completion().await?;
    let processing_secs = started.elapsed().as_secs_f64();
    let peak_rss_mib = rss::read().peak_mib;
    // Shutting down ends the subscription, so the consumer finishes.
    db.shutdown().await?;
    let (output_rows, deliveries, changelog) =
        match tokio::time::timeout(Duration::from_secs(60), consumer).await {
            Ok(joined) => joined.map_err(|e| BenchError::Task(e.to_string()))??,
            Err(_) => return Err(BenchError::Task("the subscriber did not finish".into())),
        };
    let latency = match attribution {
        Some(_) if changelog => {
            latency_note = Some("changelog outputs are not attributed to inputs".into());
            None
        }
        Some(how) => Some(percentiles(&how, &kept_inputs, &pushed, &deliveries)?),
        None => None,
    };
    Ok(Measured {
        processing_secs,
        output_rows,
        late_rows: metrics.late_rows(),
        peak_rss_mib,
        latency,
        latency_note,
    })
}

/// Push `batches` on schedule (`rate` rows per second) from a dedicated
/// thread; returns the instant each batch was handed to `push`.
async fn paced(source: PushSource, batches: Vec<RecordBatch>, rate: u64) -> Result<Vec<Instant>> {
    let handle = tokio::runtime::Handle::current();
    let task = tokio::task::spawn_blocking(move || {
        let mut pushed = Vec::with_capacity(batches.len());
        let start = Instant::now();
        let mut rows = 0u64;
        for b in batches {
            let due = start + Duration::from_secs_f64(rows as f64 / rate as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            rows += b.num_rows() as u64;
            pushed.push(Instant::now());
            handle.block_on(source.push(b))?;
        }
        Ok::<_, BenchError>(pushed)
    });
    task.await.map_err(|e| BenchError::Task(e.to_string()))?
}
