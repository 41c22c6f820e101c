//! Engine errors, with stable codes for the ones users see.

use std::sync::Arc;

use thiserror::Error;

/// Result alias for the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Errors raised while building or running a pipeline.
#[derive(Debug, Error)]
pub enum EngineError {
    /// A statement was rejected while planning.
    #[error(transparent)]
    Sql(#[from] sluice_sql::SqlError),
    /// A connector failed (malformed input, I/O, ...).
    #[error(transparent)]
    Connector(#[from] sluice_connectors::ConnectorError),
    /// A lookup table failed, panicked or broke its contract; its code is
    /// the lookup error's (`SLC-LKP-...`).
    #[error(transparent)]
    Lookup(#[from] sluice_connectors::LookupError),
    /// A name that does not exist or already exists.
    #[error("{0}")]
    Catalog(String),
    /// Input whose shape does not match what was declared.
    #[error("{0}")]
    Schema(String),
    /// An option (SET, WITH, builder) that is unknown or malformed.
    #[error("invalid option: {0}")]
    Option(String),
    /// An operator failed while executing.
    #[error("execution failed in '{context}': {source}")]
    Execution {
        /// Which stream or operator.
        context: String,
        /// What went wrong.
        source: datafusion::error::DataFusionError,
    },
    /// The pipeline stopped permanently because of `cause`. Its code is
    /// the cause's: a malformed row stays `SLC-CONN-002` however far it
    /// travels; the text (and the variant) say that it was a halt.
    #[error("pipeline halted: {cause}")]
    Halted {
        /// Why; shared, because every later call reports the same halt.
        #[source]
        cause: Arc<EngineError>,
    },
    /// A consistency fault: the pipeline stopped and must recover from its
    /// last committed checkpoint (reopen the database and start again).
    /// Its code is the cause's, like [`EngineError::Halted`].
    #[error("pipeline fault (recover from the last checkpoint): {cause}")]
    Fault {
        /// Why; shared, because every later call reports the same fault.
        #[source]
        cause: Arc<EngineError>,
    },
    /// `cause`, with where it happened (`stream 'x'`, `sink 'y'`, `writing
    /// the manifest`). Its code is the cause's: context never hides it.
    #[error("{context}: {cause}")]
    Context {
        /// Where, or what was being done.
        context: String,
        /// What went wrong.
        #[source]
        cause: Arc<EngineError>,
    },
    /// A process-function worker (remote Rust or Python) could not be
    /// declared or reached: the worker crate's error, with its own code.
    #[error("{source}")]
    Worker {
        /// The worker crate's stable code (`SLC-RMT-...`).
        code: &'static str,
        /// The error itself.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The cluster the database runs in could not answer (etcd
    /// unreachable, an unreadable key): the cluster's error, with its code
    /// (`SLC-CLU-...`).
    #[error("{source}")]
    Cluster {
        /// The cluster's stable code.
        code: &'static str,
        /// The error itself.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An error also held by the pipeline's status (which reports it to
    /// every later call); it reads and codes as the error itself.
    #[error(transparent)]
    Shared(Arc<EngineError>),
    /// A component panicked; the panic was contained where the component
    /// is known (see the `panic` module).
    #[error("{0}")]
    Panicked(String),
    /// A failure injected by a test (cargo feature `fault-injection`).
    #[error("{0}")]
    Injected(String),
    /// A subscriber fell behind its queue and was disconnected.
    #[error("subscriber fell behind its queue (subscription_buffer batches or subscription_buffer_bytes) and was disconnected")]
    SubscriberLagged,
    /// A checkpoint did not complete.
    #[error("checkpoint failed: {0}")]
    Checkpoint(String),
    /// A checkpoint did not complete for a typed reason of the checkpoint
    /// machinery itself (its tail timed out, stopped, or its worker could
    /// not start), kept with its own source chain.
    #[error("checkpoint failed: {source}")]
    CheckpointFailed {
        /// The machinery's error (e.g. the coordinator's `TailError`).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Checkpoint storage failed.
    #[error(transparent)]
    Storage(#[from] sluice_storage::StorageError),
    /// The shuffle between the nodes of a split failed (a node gone, a
    /// channel refused, a frame that breaks the protocol).
    #[error(transparent)]
    Shuffle(#[from] sluice_shuffle::ShuffleError),
    /// The pipeline is not running (shut down or never started).
    #[error("pipeline is not running")]
    NotRunning,

    /// The pipeline was sealed (`Database::seal`): its statements and the
    /// columns its sources read are fixed.
    #[error("the pipeline is sealed: {0}")]
    Sealed(String),
    /// A process function's call was rejected (limit, handler error or
    /// panic), or its binding or state does not fit.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A declaration that would destroy or mix data (two sinks on one
    /// file, a sink on a source's input, late rows sent into an existing
    /// relation); names both objects.
    #[error("conflict: {0}")]
    Conflict(String),
    /// An integer result, or a window bound, does not fit its type. Never
    /// wrapped around: the row's result would be a wrong number.
    #[error("{}", overflow_message(.0))]
    Overflow(sluice_sql::checked::ArithmeticOverflow),
    /// An internal invariant broke; a bug.
    #[error("internal error: {0}")]
    Internal(String),
    /// The coordinator thread died of a panic that escaped containment:
    /// the pipeline is gone, and every later call says so (and why).
    #[error("the pipeline's coordinator thread panicked ({0}); reopen the database to recover from the last checkpoint")]
    CoordinatorPanicked(String),
}

/// A process function's call rejected: nothing of it was applied. Defined
/// here, not in `process`, so this module depends on no other of the
/// crate's (`process` re-exports it).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("process function '{function}' v{version}{}: {reason}", key_part(.key))]
pub struct ProcessError {
    /// Function name.
    pub function: String,
    /// Function version.
    pub version: u32,
    /// Hex of the canonical key concerned (or `-` for the whole call).
    pub key: String,
    /// The rule or limit broken.
    pub reason: String,
}

fn key_part(key: &str) -> String {
    if key == "-" {
        String::new()
    } else {
        format!(", key {key}")
    }
}

/// `arithmetic overflow (SLC-ENG-013) in column 'c': detail`; the code is
/// part of the text because a cycle's error reaches the user inside a halt
/// or fault message, which has a code of its own.
fn overflow_message(o: &sluice_sql::checked::ArithmeticOverflow) -> String {
    match &o.column {
        Some(c) => format!(
            "arithmetic overflow (SLC-ENG-013) in column '{c}': {}",
            o.detail
        ),
        None => format!("arithmetic overflow (SLC-ENG-013): {}", o.detail),
    }
}

impl EngineError {
    /// A stable code for this class of error.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::Sql(e) => e.code(),
            EngineError::Connector(e) => e.code(),
            EngineError::Lookup(e) => e.code(),
            EngineError::Catalog(_) => "SLC-ENG-001",
            EngineError::Worker { code, .. } | EngineError::Cluster { code, .. } => code,
            EngineError::Schema(_) => "SLC-ENG-002",
            EngineError::Option(_) => "SLC-ENG-003",
            EngineError::Execution { .. } => "SLC-ENG-004",
            EngineError::Halted { cause } | EngineError::Fault { cause } => cause.code(),
            EngineError::Context { cause, .. } | EngineError::Shared(cause) => cause.code(),
            EngineError::NotRunning => "SLC-ENG-006",
            EngineError::Internal(_) => "SLC-ENG-007",
            EngineError::Checkpoint(_) | EngineError::CheckpointFailed { .. } => "SLC-ENG-009",
            EngineError::Storage(e) => e.code(),
            EngineError::Shuffle(e) => e.code(),
            EngineError::Process(_) => "SLC-ENG-010",
            EngineError::Sealed(_) => "SLC-ENG-011",
            EngineError::Conflict(_) => "SLC-ENG-012",
            EngineError::Overflow(_) => "SLC-ENG-013",
            EngineError::CoordinatorPanicked(_) => "SLC-ENG-014",
            EngineError::Panicked(_) => "SLC-ENG-015",
            EngineError::SubscriberLagged => "SLC-ENG-016",
            EngineError::Injected(_) => "SLC-ENG-017",
        }
    }

    /// This error, with where it happened in front of it.
    pub fn context(self, context: impl Into<String>) -> Self {
        EngineError::Context {
            context: context.into(),
            cause: Arc::new(self),
        }
    }

    /// `shared`, handed to one more caller: itself when no one else holds
    /// it, else [`EngineError::Shared`].
    pub fn unshare(shared: Arc<EngineError>) -> Self {
        Arc::try_unwrap(shared).unwrap_or_else(EngineError::Shared)
    }

    /// The pipeline halted because of `cause`.
    pub fn halted(cause: Arc<EngineError>) -> Self {
        EngineError::Halted { cause }
    }

    /// The pipeline faulted because of `cause`.
    pub fn fault(cause: Arc<EngineError>) -> Self {
        EngineError::Fault { cause }
    }

    /// The innermost error under halts, faults and context: the one whose
    /// code this error reports.
    pub fn root(&self) -> &EngineError {
        match self {
            EngineError::Halted { cause } | EngineError::Fault { cause } => cause.root(),
            EngineError::Context { cause, .. } | EngineError::Shared(cause) => cause.root(),
            other => other,
        }
    }

    /// Wrap a DataFusion error with the stream it happened in; an integer
    /// overflow becomes [`EngineError::Overflow`].
    pub fn exec(context: impl Into<String>, source: datafusion::error::DataFusionError) -> Self {
        if let Some(o) = sluice_sql::checked::overflow_of(&source) {
            return EngineError::Overflow(o);
        }
        EngineError::Execution {
            context: context.into(),
            source,
        }
    }

    /// An overflow not yet placed in a column is placed in `column`.
    pub fn in_column(self, column: &str) -> Self {
        match self {
            EngineError::Overflow(o) => EngineError::Overflow(o.in_column(column)),
            other => other,
        }
    }
}

impl From<datafusion::error::DataFusionError> for EngineError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        EngineError::exec("operator", e)
    }
}

impl From<arrow::error::ArrowError> for EngineError {
    fn from(e: arrow::error::ArrowError) -> Self {
        EngineError::exec("operator", e.into())
    }
}
