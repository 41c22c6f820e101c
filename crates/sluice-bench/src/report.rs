//! What a benchmark run reports, as text for people and JSON for scripts.

use std::fmt::Write as _;

use serde::Serialize;

use crate::latency::Percentiles;

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// CPU model, from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
}

impl Machine {
    /// This machine.
    pub fn current() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        });
        Self {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model,
        }
    }
}

/// Rows over time.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Phase {
    /// Wall-clock seconds.
    pub secs: f64,
    /// Rows per second.
    pub rows_per_sec: f64,
}

impl Phase {
    /// `rows` in `secs`.
    pub fn new(rows: u64, secs: f64) -> Self {
        Self {
            secs,
            rows_per_sec: if secs > 0.0 { rows as f64 / secs } else { 0.0 },
        }
    }
}

/// Memory of the process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MemoryReport {
    /// Arrow memory of the generated input, held for the whole run.
    pub input_mib: f64,
    /// Resident size once the input was generated (before the pipeline).
    pub rss_after_generation_mib: Option<f64>,
    /// Peak resident size of the process (`VmHWM`), input included.
    pub peak_rss_mib: Option<f64>,
}

/// The paced run.
#[derive(Debug, Clone, Serialize)]
pub struct RateReport {
    /// Rows pushed per second, as scheduled.
    pub target_rows_per_sec: u64,
    /// Push-to-delivery latency of output rows.
    pub latency: Option<Percentiles>,
    /// Why latency is missing, if it is.
    pub latency_note: Option<String>,
}

/// One benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Query name.
    pub query: String,
    /// Nexmark stream read.
    pub stream: String,
    /// `release` or `debug` (debug figures mean nothing for performance).
    pub build: &'static str,
    /// Where it ran.
    pub machine: Machine,
    /// Events of the whole generator.
    pub events: u64,
    /// Rows of the stream pushed (its share of `events`).
    pub input_rows: u64,
    /// Rows per pushed batch.
    pub batch_size: usize,
    /// Generator seed.
    pub seed: u64,
    /// Event-time disorder bound.
    pub out_of_order_ms: u64,
    /// Generating the input in memory (not part of processing).
    pub generation: Phase,
    /// First push to the last window closed, input rows per second.
    pub processing: Phase,
    /// Rows delivered to the subscriber.
    pub output_rows: u64,
    /// Input rows dropped as late.
    pub late_rows: u64,
    /// Memory.
    pub memory: MemoryReport,
    /// Present when the input was paced.
    pub rate: Option<RateReport>,
}

/// `debug` or `release`: the profile this binary was built with.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1} MiB"))
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl BenchReport {
    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "nexmark {}: {} events -> {} {} rows (seed {}, out_of_order_ms {}, batch_size {})",
            self.query,
            thousands(self.events as f64),
            thousands(self.input_rows as f64),
            self.stream,
            self.seed,
            self.out_of_order_ms,
            self.batch_size
        );
        let _ = writeln!(
            o,
            "  build {}, {} CPUs ({})",
            self.build,
            self.machine.cpus,
            self.machine.cpu_model.as_deref().unwrap_or("unknown CPU")
        );
        if self.build == "debug" {
            let _ = writeln!(
                o,
                "  WARNING: debug build; build with --release for meaningful figures"
            );
        }
        let _ = writeln!(
            o,
            "  generation (excluded): {:>9.3} s  {:>13} rows/s",
            self.generation.secs,
            thousands(self.generation.rows_per_sec)
        );
        match &self.rate {
            None => {
                let _ = writeln!(
                    o,
                    "  processing:            {:>9.3} s  {:>13} events/s",
                    self.processing.secs,
                    thousands(self.processing.rows_per_sec)
                );
            }
            Some(r) => {
                let _ = writeln!(
                    o,
                    "  paced at {} rows/s:    {:>9.3} s  {:>13} rows/s achieved (not a throughput figure)",
                    thousands(r.target_rows_per_sec as f64),
                    self.processing.secs,
                    thousands(self.processing.rows_per_sec)
                );
            }
        }
        let _ = writeln!(
            o,
            "  output rows {}, late rows {}",
            thousands(self.output_rows as f64),
            thousands(self.late_rows as f64)
        );
        let _ = writeln!(
            o,
            "  memory: peak RSS {} (VmHWM, input included); RSS after generation {}; input batches {:.1} MiB",
            mib(self.memory.peak_rss_mib),
            mib(self.memory.rss_after_generation_mib),
            self.memory.input_mib
        );
        if let Some(r) = &self.rate {
            match (&r.latency, &r.latency_note) {
                (Some(l), _) => {
                    let _ = writeln!(
                        o,
                        "  latency push->subscriber: p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us, max {:.0} us ({} rows; {} closed by end of input, not measured)",
                        l.p50_us,
                        l.p99_us,
                        l.p999_us,
                        l.max_us,
                        thousands(l.samples as f64),
                        thousands(l.unattributed as f64)
                    );
                }
                (None, Some(note)) => {
                    let _ = writeln!(o, "  latency: not measured: {note}");
                }
                (None, None) => {}
            }
        }
        o
    }
}
