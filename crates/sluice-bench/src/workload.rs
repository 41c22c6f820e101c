//! Generating a Nexmark stream into memory, timed on its own so that the
//! benchmark can report the engine's processing cost without it.

use std::time::Instant;

use arrow::record_batch::RecordBatch;
use sluice_connectors::{BatchReader, NexmarkConfig, NexmarkReader};

use crate::error::Result;

/// A stream generated up front.
#[derive(Debug)]
pub struct Generated {
    /// The batches, in order.
    pub batches: Vec<RecordBatch>,
    /// Rows over every batch.
    pub rows: u64,
    /// Wall-clock seconds spent generating.
    pub secs: f64,
    /// Arrow memory held by the batches, in bytes.
    pub bytes: usize,
}

/// Generate every row `cfg` describes, unthrottled (its `rate` is ignored).
pub fn generate(mut cfg: NexmarkConfig) -> Result<Generated> {
    cfg.rate = 0;
    let started = Instant::now();
    let mut reader = NexmarkReader::open(cfg)?;
    let mut batches = Vec::new();
    while let Some(b) = reader.next_batch()? {
        batches.push(b);
    }
    let secs = started.elapsed().as_secs_f64();
    let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
    let bytes = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    Ok(Generated {
        batches,
        rows,
        secs,
        bytes,
    })
}
