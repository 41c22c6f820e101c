//! `sluice`: run streaming SQL scripts from the command line.
//!
//! ```text
//! sluice run [--state-dir DIR] [--set name=value]... FILE.sql
//! sluice run --cluster etcd=URL --node-id NAME --state URL [--cluster-id C] FILE.sql
//! sluice run --cluster etcd=URL --node-id NAME --split N1,N2 [--shuffle N1=IP:PORT,N2=IP:PORT] --state URL FILE.sql
//! sluice bench nexmark --query q5 --events 1000000 [--rate N] [--json]
//! sluice cluster status --cluster etcd=URL [--cluster-id C]
//! sluice cluster rescale --cluster etcd=URL --split N1,N2,N3 [--shuffle ...] [--cluster-id C]
//! ```
//!
//! The binary is a thin shell over the `sluice` library: it reads the
//! script, opens a [`sluice::Database`] whose relative connector paths
//! resolve against the script's directory, executes the script, runs the
//! pipeline until every file source is exhausted, and shuts down (which
//! publishes sink files). Errors are printed as `error[CODE]: message` and
//! end the process with status 1. SIGINT and SIGTERM stop a run cleanly
//! (see `interrupt`) and end it with status 130 or 143.

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod builtins;
mod cluster;
mod error;
mod interrupt;
mod progress;
mod run;
mod signals;
mod split;
mod split_change;
mod split_failover;
mod split_members;
mod split_shuffle;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::error::CliError;
use crate::run::RunEnd;

/// Keep freed batch buffers in the heap. Every Arrow batch allocates buffers
/// large enough that glibc would map them fresh from the kernel and unmap
/// them on free, so each batch paid page faults (about 10% of a CSV run).
/// A high mmap threshold and trim threshold make glibc reuse that memory.
/// (mimalloc gave the same throughput but raised window-close latency
/// tenfold; see BENCHMARKS.md.) Programs that link the `sluice` library
/// tune their own allocator.
fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts glibc's allocator thresholds; it is
    // called once, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
use crate::progress::ProgressSlot;

/// Embedded streaming SQL: run a script of sources, streams and sinks.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Execute a SQL script, read its file sources to the end, and publish its sinks.
    Run(RunArgs),
    /// Benchmarks: Nexmark queries over generated events, and their CSV input.
    Bench(bench::BenchArgs),
    /// Inspect a cluster of `sluice run --cluster` nodes.
    Cluster(cluster::ClusterArgs),
}

/// Arguments of `sluice run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Keep pipeline state in this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Set a pipeline option before the script runs (repeatable), e.g. `--set batch_size=1024`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// Keep checkpoints in this store (`s3://bucket/prefix`, `file:///dir`,
    /// `memory://`): the same as `--set checkpoint_store=URL`. A cluster
    /// needs one that every node reaches.
    #[arg(long, value_name = "URL")]
    pub state: Option<String>,

    /// Run as one node of a cluster coordinated through etcd
    /// (`etcd=http://127.0.0.1:2379`, several endpoints separated by commas).
    /// Every node runs the same script; the leader runs the pipeline and the
    /// others stand by to take over from its last checkpoint.
    #[arg(long, value_name = "etcd=URL[,URL]", requires = "node_id")]
    pub cluster: Option<String>,

    /// This node's id in the cluster (letters, digits, `-`, `_`, `.`).
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub node_id: Option<String>,

    /// The cluster's id: the nodes started with the same one run one pipeline.
    #[arg(long, value_name = "NAME", default_value = "sluice")]
    pub cluster_id: String,

    /// Run as one node of a static split: every listed node runs at once,
    /// each reading the files of its vnodes and writing sink files of its
    /// own (`out/NODE/x.csv`); row-by-row queries only, unless --shuffle.
    /// Needs --cluster.
    #[arg(long, value_name = "NODE,NODE,...", requires = "cluster")]
    pub split: Option<String>,

    /// Run keyed queries (aggregations, joins) across the nodes of the
    /// split: each key's rows go to its vnode's owner, and every node
    /// listens for the others' rows at its address here. Every node gets
    /// the same list, naming each node of --split once.
    #[arg(long, value_name = "NODE=IP:PORT,...", requires = "split")]
    pub shuffle: Option<String>,

    /// With --split and --shuffle: once a member of the split's list has
    /// been away (its lease lapsed) this long, e.g. `10s`, the running
    /// nodes change the list to go on without it, taking its vnodes over
    /// from the last checkpoint committed for all (as `sluice cluster
    /// rescale` would). Without it, an away member's share waits for it to
    /// be started again.
    #[arg(long, value_name = "DURATION", requires = "shuffle")]
    pub failover_after: Option<String>,

    /// How long a silent node stays a member (and leader), e.g. `5s`, `1500ms`.
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub lease_ttl: String,

    /// The SQL script. Relative connector paths in it resolve against its directory.
    #[arg(value_name = "FILE.sql")]
    pub file: PathBuf,
}

fn main() -> ExitCode {
    keep_freed_buffers();
    let cli = Cli::parse();
    let progress = ProgressSlot::default();
    init_logging(&progress);
    let outcome = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => match cli.command {
            Command::Run(args) if args.split.is_some() => {
                let list = args.split.clone().unwrap_or_default();
                rt.block_on(split::run(args, &progress, &list))
            }
            Command::Run(args) if args.cluster.is_some() || args.node_id.is_some() => {
                rt.block_on(cluster::run(args, &progress))
            }
            Command::Run(args) => rt.block_on(run::run(args, &progress)),
            Command::Bench(args) => rt.block_on(bench::bench(args)).map(|()| RunEnd::Completed),
            Command::Cluster(args) => rt
                .block_on(cluster::command(args))
                .map(|()| RunEnd::Completed),
        },
        Err(e) => Err(CliError::io("starting the async runtime", e)),
    };
    match outcome {
        Ok(RunEnd::Completed) => ExitCode::SUCCESS,
        Ok(RunEnd::Signalled(signal)) => ExitCode::from(signal.exit_code()),
        Err(e) => {
            eprintln!("error[{}]: {e}", e.code());
            ExitCode::FAILURE
        }
    }
}

/// Log to stderr, filtered by `RUST_LOG` (default `warn`). Log lines
/// temporarily hide the progress spinner so the two never interleave.
fn init_logging(progress: &ProgressSlot) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let writer = progress.clone();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(move || writer.log_writer())
        .try_init();
}
