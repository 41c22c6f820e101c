//! What a benchmark run is asked to do (shared by the single-source and
//! many-source runners, so neither depends on the other for it).

use sluice::Database;

use crate::error::Result;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// A query name (`q5`) or a path to a `.sql` file.
    pub query: String,
    /// Events of the whole generator (the source receives its stream's share).
    pub events: u64,
    /// Push `rate` rows per second and measure latency; `None` = as fast as possible.
    pub rate: Option<u64>,
    /// Rows per pushed batch (default 8192; with a rate, 1 ms of rows).
    pub batch_size: Option<usize>,
    /// Event-time disorder bound (default: the script's option, else 0).
    pub out_of_order_ms: Option<u64>,
    /// Generator seed (default: the script's option, else 0).
    pub seed: Option<u64>,
}

impl BenchOptions {
    /// Options for `query` over `events` events, unthrottled.
    pub fn new(query: impl Into<String>, events: u64) -> Self {
        Self {
            query: query.into(),
            events,
            rate: None,
            batch_size: None,
            out_of_order_ms: None,
            seed: None,
        }
    }

    /// Rows per pushed batch: the given size, else 1 ms of rows at the
    /// rate (at most 8192), else 8192.
    pub(crate) fn effective_batch_size(&self) -> usize {
        self.batch_size.unwrap_or(match self.rate {
            Some(r) => usize::try_from(r / 1000).unwrap_or(8192).clamp(1, 8192),
            None => 8192,
        })
    }
}

/// The database every benchmark runs in: a subscription buffer large enough
/// that the measuring subscriber never holds the pipeline back.
pub(crate) async fn bench_database() -> Result<Database> {
    Ok(Database::builder()
        .set("subscription_buffer", "1048576")?
        .open()
        .await?)
}
