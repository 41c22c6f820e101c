//! `sluice bench nexmark` for a query over several Nexmark streams (the
//! joins): each stream is generated on its own (timed, excluded), then the
//! batches of all streams are pushed merged in event-time order, keeping
//! each stream's own order, into push sources with the same columns and
//! watermarks. Processing runs from the first push until the last output
//! row. Latency is not measured here: an output row of a join has an input
//! row on each side.

use std::time::{Duration, Instant};

use arrow::array::Array;
use arrow::record_batch::RecordBatch;
use sluice::PushSource;

use crate::error::{BenchError, Result};
use crate::options::BenchOptions;
use crate::report::{BenchReport, Machine, MemoryReport, Phase};
use crate::rss;
use crate::script::{Script, SourceSpec};
use crate::workload::generate;

/// The largest event time of a batch in its watermark column (ms), for
/// merging streams; batches without one sort first.
fn max_event_time(spec: &SourceSpec, batch: &RecordBatch) -> i64 {
    let Some(w) = &spec.watermark else {
        return i64::MIN;
    };
    let Ok(i) = batch.schema().index_of(&w.column) else {
        return i64::MIN;
    };
    let col = batch.column(i);
    arrow::compute::cast(col, &arrow::datatypes::DataType::Int64)
        .ok()
        .and_then(|c| {
            let c = c
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()?
                .clone();
            arrow::compute::max(&c)
        })
        .unwrap_or(i64::MIN)
}

/// Merge per-stream batch queues by each next batch's largest event time.
fn merge(
    mut queues: Vec<(usize, std::collections::VecDeque<(i64, RecordBatch)>)>,
) -> Vec<(usize, RecordBatch)> {
    let mut out = Vec::new();
    loop {
        let next = queues
            .iter()
            .enumerate()
            .filter_map(|(q, (_, items))| items.front().map(|(t, _)| (*t, q)))
            .min();
        let Some((_, q)) = next else {
            return out;
        };
        let (source, items) = &mut queues[q];
        if let Some((_, b)) = items.pop_front() {
            out.push((*source, b));
        }
    }
}

/// Run a query over several Nexmark sources.
pub(crate) async fn run_many(
    opts: &BenchOptions,
    name: String,
    script: &Script,
    specs: Vec<SourceSpec>,
    overrides: &[(&str, String)],
    batch_size: usize,
) -> Result<BenchReport> {
    if opts.rate.is_some() {
        return Err(BenchError::Script(format!(
            "{name} reads {} Nexmark streams; latency (--rate) is measured for single-stream queries only",
            specs.len()
        )));
    }
    let output = script.output()?.to_string();
    let mut queues = Vec::new();
    let (mut rows, mut gen_secs, mut bytes) = (0u64, 0f64, 0usize);
    let mut first_cfg = None;
    for (i, spec) in specs.iter().enumerate() {
        let cfg = spec.nexmark_config(overrides)?;
        first_cfg.get_or_insert_with(|| cfg.clone());
        let g = generate(cfg)?;
        rows += g.rows;
        gen_secs += g.secs;
        bytes += g.bytes;
        let items = g
            .batches
            .into_iter()
            .map(|b| (max_event_time(spec, &b), b))
            .collect();
        queues.push((i, items));
    }
    let after_generation = rss::read();
    let pushes = merge(queues);
    let db = crate::options::bench_database().await?;
    let ddl = script.render(|s| s.push_ddl())?;
    db.execute(&ddl).await?;
    let mut sources: Vec<PushSource> = Vec::new();
    for spec in &specs {
        sources.push(db.source(&spec.name).await?);
    }
    let mut sub = db.subscribe(&output).await?;
    let consumer = tokio::spawn(async move {
        let mut n = 0u64;
        while let Some(b) = sub.next().await? {
            n += b.data.num_rows() as u64;
        }
        Ok::<_, BenchError>(n)
    });
    let started = Instant::now();
    for (i, b) in pushes {
        sources[i].push(b).await?;
    }
    for s in &sources {
        s.finish().await?;
    }
    let metrics = db.run_to_completion().await?;
    let processing_secs = started.elapsed().as_secs_f64();
    let peak_rss_mib = rss::read().peak_mib;
    db.shutdown().await?;
    let output_rows = match tokio::time::timeout(Duration::from_secs(60), consumer).await {
        Ok(joined) => joined.map_err(|e| BenchError::Task(e.to_string()))??,
        Err(_) => return Err(BenchError::Task("the subscriber did not finish".into())),
    };
    let cfg = first_cfg.ok_or_else(|| BenchError::Script("no Nexmark source".into()))?;
    Ok(BenchReport {
        query: name,
        stream: specs
            .iter()
            .map(|s| s.option("stream").unwrap_or("?").to_string())
            .collect::<Vec<_>>()
            .join("+"),
        build: crate::report::build_profile(),
        machine: Machine::current(),
        events: opts.events,
        input_rows: rows,
        batch_size,
        seed: cfg.seed,
        out_of_order_ms: cfg.out_of_order_ms,
        generation: Phase::new(rows, gen_secs),
        processing: Phase::new(rows, processing_secs),
        output_rows,
        late_rows: metrics.late_rows(),
        memory: MemoryReport {
            input_mib: bytes as f64 / (1024.0 * 1024.0),
            rss_after_generation_mib: after_generation.rss_mib,
            peak_rss_mib,
        },
        rate: None,
    })
}
