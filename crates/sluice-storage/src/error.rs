//! Storage errors.

use thiserror::Error;

/// An error from outside this crate, kept with its own source chain.
pub type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Checkpoint storage failures.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The object store failed.
    #[error("object store {path}: {source}")]
    ObjectStore {
        /// The object.
        path: String,
        /// The cause.
        source: object_store::Error,
    },
    /// The store URL cannot be used.
    #[error("checkpoint store '{url}': {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// Every checkpoint id is used up: the next id would not fit in a `u64`.
    /// Ids never wrap, because a wrapped id would sort before (and be
    /// mistaken for an older checkpoint than) every id already stored.
    #[error(
        "checkpoint store {store}: checkpoint ids are exhausted: '{key}' holds id {last}, the \
         largest possible (u64::MAX = {max}); ids never wrap, so start from an empty state \
         directory",
        max = u64::MAX
    )]
    IdsExhausted {
        /// Where the store is.
        store: String,
        /// The key that holds the largest id.
        key: String,
        /// The largest id found.
        last: u64,
    },
    /// Another process holds the store's lease: two pipelines writing one
    /// store would reserve each other's ids and delete each other's blobs.
    #[error(
        "checkpoint store {store} is in use by another pipeline ({holder}); stop that process \
         first, or use another store"
    )]
    Leased {
        /// Where the store is.
        store: String,
        /// Who holds it: owner id, host, pid and when its lease expires.
        holder: String,
    },
    /// This process's lease on the store was taken over or removed while it
    /// ran: another process may be writing checkpoints now.
    #[error("checkpoint store {store}: this process's lease was lost: {message}")]
    LeaseLost {
        /// Where the store is.
        store: String,
        /// What was found instead.
        message: String,
    },
    /// Attempt reservation kept finding its id taken: other writers are
    /// reserving on the same store at the same time.
    #[error(
        "checkpoint store {store}: could not reserve a checkpoint id after {tries} tries (last \
         tried {last}); another process is reserving ids on the same store"
    )]
    ReservationContended {
        /// Where the store is.
        store: String,
        /// Tries made.
        tries: u32,
        /// The last id tried.
        last: u64,
    },
    /// The commit authority refused to record this checkpoint: the writer
    /// may no longer commit (a cluster leader that was deposed while it
    /// wrote). Nothing was committed.
    #[error("checkpoint {id} is not committed: {source}")]
    Fenced {
        /// The checkpoint.
        id: u64,
        /// The authority's refusal.
        source: BoxedError,
    },
    /// The commit authority could not answer (unreachable, timed out).
    #[error("the checkpoint commit record ({what}): {source}")]
    Authority {
        /// What was asked of it.
        what: String,
        /// The authority's error.
        source: BoxedError,
    },
    /// The cluster leader decided to abort this checkpoint after this
    /// writer wrote its part (another owner nacked or missed the deadline,
    /// or the assignment moved): the checkpoint does not exist, and nothing
    /// of this writer's was fenced or lost. Its sealed sink epochs stay
    /// pending and the next checkpoint commits them, so the pipeline goes
    /// on in every delivery mode.
    #[error("checkpoint {id} was aborted by the cluster leader: {reason}")]
    Aborted {
        /// The checkpoint.
        id: u64,
        /// The leader's reason.
        reason: String,
    },
    /// The store did not finish an operation before its deadline (a hung
    /// or unreachable object store). What it was asked may or may not have
    /// happened; a reservation's id is then burned, as every abandoned
    /// attempt's is.
    #[error("{store}: {operation} did not finish within {after:?}")]
    TimedOut {
        /// Where the store is.
        store: String,
        /// What was asked of it.
        operation: &'static str,
        /// How long it had.
        after: std::time::Duration,
    },
    /// Stored data is damaged or not what it claims to be.
    #[error("checkpoint {id}: {message}")]
    Corrupt {
        /// The checkpoint.
        id: u64,
        /// What is wrong.
        message: String,
    },
}

impl StorageError {
    /// The codes of errors that mean "this process may no longer write the
    /// store": its lease was lost or is held by another (`SLC-STO-006`), or
    /// the commit authority refused it (`SLC-STO-008`). Retrying, or
    /// recovering in the same process, cannot help.
    pub const FENCE_CODES: [&'static str; 2] = ["SLC-STO-006", "SLC-STO-008"];

    /// The code of [`StorageError::Aborted`]: a checkpoint whose outcome is
    /// known (not committed) and whose failure was not this writer's.
    pub const ABORTED_CODE: &'static str = "SLC-STO-011";

    /// A stable code.
    pub fn code(&self) -> &'static str {
        match self {
            StorageError::Io { .. } => "SLC-STO-001",
            StorageError::ObjectStore { .. } => "SLC-STO-002",
            StorageError::Url { .. } => "SLC-STO-003",
            StorageError::Corrupt { .. } => "SLC-STO-004",
            StorageError::IdsExhausted { .. } => "SLC-STO-005",
            StorageError::Leased { .. } | StorageError::LeaseLost { .. } => "SLC-STO-006",
            StorageError::ReservationContended { .. } => "SLC-STO-007",
            StorageError::Fenced { .. } => "SLC-STO-008",
            StorageError::Authority { .. } => "SLC-STO-009",
            StorageError::TimedOut { .. } => "SLC-STO-010",
            StorageError::Aborted { .. } => "SLC-STO-011",
        }
    }
}
