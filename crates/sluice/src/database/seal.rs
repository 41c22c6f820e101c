//! Sealing: declaring a pipeline complete, so that its file sources can
//! leave the columns no statement reads unparsed.

use super::Database;

impl Database {
    /// Declare the pipeline complete: no source, stream, sink or binding can
    /// be added from now on, nor a subscription to a source. In exchange,
    /// when the pipeline starts, file sources leave the (nullable) columns
    /// no statement reads unparsed, as a batch engine pushes a projection
    /// into its scan; malformed values in those columns then go unnoticed.
    /// `sluice run` seals after executing its script. Seal before
    /// [`start`](Self::start) for the projection to apply.
    pub async fn seal(&self) {
        self.inner.pipeline.lock().await.seal();
    }
}
