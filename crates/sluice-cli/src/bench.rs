//! `sluice bench`: the Nexmark benchmark runner and its input generator.
//!
//! ```text
//! sluice bench nexmark --query q5 --events 1000000 [--rate N] [--batch-size N] [--json]
//! sluice bench csv --stream bid --events 2000000 --out bids.csv
//! sluice bench groups --keys 1000000 --slides 50
//! ```
//!
//! The work is done by the `sluice-bench` crate; this module parses the
//! arguments and prints the report.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use sluice_bench::csv::write_csv;
use sluice_bench::groups::{run_groups, GroupsOptions};
use sluice_bench::report::thousands;
use sluice_bench::{run_nexmark, BenchError, BenchOptions};
use sluice_connectors::{NexmarkConfig, NexmarkStream};

use crate::error::CliError;

/// Arguments of `sluice bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Run a Nexmark query (q0-q5, q7-q22 and the variants under
    /// benches/nexmark/, or a .sql file) over events generated in memory
    /// first; report events/s, peak memory and, with --rate,
    /// push-to-subscriber latency. An unknown name lists every query.
    Nexmark(NexmarkArgs),
    /// Write a generated Nexmark stream to a CSV file (the peers' input).
    Csv(CsvArgs),
    /// Resident memory of a hop-window aggregation whose every open window
    /// holds --keys groups, over many windows.
    Groups(GroupsArgs),
}

#[derive(Debug, Args)]
struct GroupsArgs {
    /// Distinct keys: groups in every open window.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Slides of event time to generate (each carries every key once).
    #[arg(long, default_value_t = 50)]
    slides: u64,
    /// Window slide in ms.
    #[arg(long, default_value_t = 2_000)]
    slide_ms: i64,
    /// Window size in ms (a multiple of the slide).
    #[arg(long, default_value_t = 10_000)]
    size_ms: i64,
    /// Rows per pushed batch.
    #[arg(long, default_value_t = 8_192)]
    batch_size: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct NexmarkArgs {
    /// Query name or path to a .sql file declaring one Nexmark source.
    #[arg(long)]
    query: String,
    /// Events of the whole generator; the query's source gets its stream's share.
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Push this many rows per second and measure latency (default: as fast as possible).
    #[arg(long)]
    rate: Option<u64>,
    /// Rows per pushed batch (default 8192; with --rate, 1 ms worth of rows).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Event-time disorder bound in ms (default: the query file's option).
    #[arg(long)]
    out_of_order_ms: Option<u64>,
    /// Generator seed (default: the query file's option).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct CsvArgs {
    /// person, auction or bid.
    #[arg(long, default_value = "bid")]
    stream: String,
    /// Events of the whole generator.
    #[arg(long)]
    events: u64,
    /// Event-time disorder bound in ms.
    #[arg(long, default_value_t = 0)]
    out_of_order_ms: u64,
    /// Generator seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
}

/// Run `sluice bench ...`.
pub async fn bench(args: BenchArgs) -> Result<(), CliError> {
    match args.command {
        BenchCommand::Nexmark(a) => nexmark(a).await,
        BenchCommand::Csv(a) => csv(a),
        BenchCommand::Groups(a) => groups(a).await,
    }
}

async fn groups(a: GroupsArgs) -> Result<(), CliError> {
    if a.keys == 0 || a.slides == 0 || a.batch_size == 0 {
        return Err(CliError::usage(
            "--keys, --slides and --batch-size must be positive",
        ));
    }
    if a.slide_ms <= 0 || a.size_ms < a.slide_ms || a.size_ms % a.slide_ms != 0 {
        return Err(CliError::usage(format!(
            "--size-ms ({}) must be a positive multiple of --slide-ms ({})",
            a.size_ms, a.slide_ms
        )));
    }
    let report = run_groups(&GroupsOptions {
        keys: a.keys,
        slides: a.slides,
        slide_ms: a.slide_ms,
        size_ms: a.size_ms,
        batch_size: a.batch_size,
    })
    .await
    .map_err(cli_error)?;
    let text = if a.json {
        report.to_json() + "\n"
    } else {
        report.to_text()
    };
    print(&text)
}

async fn nexmark(a: NexmarkArgs) -> Result<(), CliError> {
    let opts = BenchOptions {
        query: a.query,
        events: a.events,
        rate: a.rate,
        batch_size: a.batch_size,
        out_of_order_ms: a.out_of_order_ms,
        seed: a.seed,
    };
    let report = run_nexmark(&opts).await.map_err(cli_error)?;
    let text = if a.json {
        report.to_json() + "\n"
    } else {
        report.to_text()
    };
    print(&text)
}

fn csv(a: CsvArgs) -> Result<(), CliError> {
    let stream: NexmarkStream = a
        .stream
        .parse()
        .map_err(|e: sluice_connectors::ConnectorError| CliError::usage(e.to_string()))?;
    let mut cfg = NexmarkConfig::full(stream);
    for (name, value) in [
        ("events", a.events),
        ("out_of_order_ms", a.out_of_order_ms),
        ("seed", a.seed),
    ] {
        cfg.set(name, &value.to_string())
            .map_err(|e| CliError::usage(format!("--{}: {e}", name.replace('_', "-"))))?;
    }
    let w = write_csv(cfg, &a.out).map_err(cli_error)?;
    print(&format!(
        "wrote {} {stream} rows of {} events to {} in {:.2}s\n",
        thousands(w.rows as f64),
        thousands(a.events as f64),
        a.out.display(),
        w.secs
    ))
}

fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::io("writing to stdout", e))
}

fn cli_error(e: BenchError) -> CliError {
    match e {
        BenchError::Sluice(e) => CliError::Sluice(e),
        BenchError::Io { what, source } => CliError::io(what, source),
        other => CliError::script(other.to_string()),
    }
}
