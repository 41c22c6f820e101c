//! Benchmarks of Sluice: the Nexmark workloads behind `sluice bench`, the
//! query files under `benches/nexmark/`, their batch oracles (in the tests),
//! and criterion micro-benchmarks of the engine's hot paths (`cargo bench -p
//! sluice-bench`).
//!
//! See `BENCHMARKS.md` at the repository root for the commands and figures.

pub mod csv;
pub mod error;
pub mod groups;
pub mod latency;
mod many;
pub mod options;
pub mod queries;
pub mod report;
pub mod rss;
pub mod runner;
pub mod script;
pub mod workload;

pub use error::{BenchError, Result};
pub use report::BenchReport;
pub use runner::{run_nexmark, BenchOptions};
pub use script::Script;
