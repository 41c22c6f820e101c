//! # Sluice: an embedded streaming SQL database
//!
//! Link Sluice into a program (or run the `sluice` binary), declare sources,
//! continuous SQL queries and sinks, push or read data, and get results as
//! the watermark makes them final.
//!
//! ```no_run
//! # async fn demo() -> sluice::Result<()> {
//! let db = sluice::Database::open_in_memory().await?;
//! db.execute("CREATE SOURCE bids (auction BIGINT, price BIGINT, ts TIMESTAMP,
//!             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)").await?;
//! db.execute("CREATE STREAM per_auction AS
//!             SELECT auction, tumble(ts, INTERVAL '10' SECOND) AS window_start, COUNT(*) AS bids
//!             FROM bids GROUP BY auction, tumble(ts, INTERVAL '10' SECOND)").await?;
//! let mut sub = db.subscribe("per_auction").await?;
//! let bids = db.source("bids").await?;
//! // bids.push(batch).await?; bids.advance_watermark(ms).await?;
//! # Ok(()) }
//! ```

mod database;
pub mod fuzzing;
mod query;

pub use database::{
    CatalogFingerprints, ClusterInfo, ClusterMember, Database, DatabaseBuilder, HandlerFactory,
    ProcessWorkerStats, SinkOutput,
};
pub use sluice_connectors::{LookupError, LookupRows, LookupTable, MemoryLookupTable};
pub use sluice_engine::coordinator::CheckpointReport;
pub use sluice_engine::lookup::{LookupOptions, LookupStats};
pub use sluice_engine::metrics::MetricsSnapshot;
pub use sluice_engine::options::{Delivery, PipelineOptions};
pub use sluice_engine::output::subscription::{
    ChangeBatch, ChangeKind, OnLag, ResumeFrom, SubscribeOptions, Subscription,
};
pub use sluice_engine::sources::PushSource;

/// Keyed process functions: the contract types, the test harness and the
/// benchmark fixtures (see `sluice_engine::process`).
pub mod process {
    pub use sluice_engine::process::{
        benchmark, decode_int64_key, encode_key, LoggedActivation, NativeProcessFunction,
        ProcessActivation, ProcessActivationResult, ProcessCallback, ProcessDeterminism,
        ProcessError, ProcessFunctionDescriptor, ProcessFunctionInfo, ProcessFunctionLimits,
        ProcessFunctionTestHarness, ProcessRuntime, ProcessSnapshot, PythonEnvironmentBinding,
        TimerOperation, ValueMutation, ValueState,
    };
}
pub mod split;
pub use sluice_engine::EngineError as Error;
pub use sluice_sql::CHANGE_COLUMN;
/// Re-exported `object_store`, for [`DatabaseBuilder::checkpoint_object_store`].
pub use sluice_storage::object_store;
pub use sluice_storage::CheckpointInfo;
/// Re-exported for [`DatabaseBuilder::commit_authority`].
pub use sluice_storage::{Announcement, BlobRef, CommitAuthority, StorageError};

/// Result alias of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Re-exported Arrow, so users build batches with the same version.
pub use arrow;

/// Re-exported remote process-function library (the worker side and its
/// protocol), so a worker can be written against the same versions.
pub use sluice_remote as remote;
