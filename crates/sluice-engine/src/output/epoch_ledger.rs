//! A transactional sink's epochs and what the checkpoints know of them.
//!
//! The ledger lives on the sink's writer thread, next to the file it
//! describes: the compute thread seals an epoch by queueing a job, and a
//! checkpoint tail commits sealed epochs by queueing another, so neither
//! waits for the writer. Because jobs run in the order they were queued,
//! a seal sees every row written before its barrier, and a checkpoint's
//! commit (queued by its tail once the manifest is durable, before the
//! next checkpoint can seal) sees exactly the epochs that checkpoint
//! recorded.
//!
//! ```text
//!  epoch:   open ──seal──▶ pending ──commit──▶ committed (visible)
//!                            │
//!                            └─discard─▶ removed (its checkpoint never
//!                                        became durable; recovery took over)
//! ```
//!
//! A checkpoint that failed leaves its sealed epochs pending; the next
//! checkpoint records them again with its own, and its commit publishes
//! them all, in order.

use std::path::PathBuf;

use arrow::record_batch::RecordBatch;
use sluice_connectors::{ConnectorError, EpochFileSink, EpochRecord};
use sluice_storage::{SinkCheckpoint, SinkEpochRecord};

/// One sink's epoch file and its sealed, not yet committed, epochs.
pub(crate) struct EpochLedger {
    file: EpochFileSink,
    /// Sealed epochs not yet committed, oldest first.
    pending: Vec<EpochRecord>,
    /// Final length before the first pending epoch.
    committed_len: u64,
}

fn to_record(r: &EpochRecord) -> SinkEpochRecord {
    SinkEpochRecord {
        epoch: r.epoch,
        staged: r.staged.as_ref().map(|p| p.display().to_string()),
        staged_len: r.staged_len,
        final_len_before: r.final_len_before,
    }
}

/// An epoch record as a checkpoint stored it.
pub(crate) fn from_record(r: &SinkEpochRecord) -> EpochRecord {
    EpochRecord {
        epoch: r.epoch,
        staged: r.staged.as_ref().map(PathBuf::from),
        staged_len: r.staged_len,
        final_len_before: r.final_len_before,
    }
}

impl EpochLedger {
    /// A ledger over `file`, whose sealed epochs (if recovered) are committed.
    pub(crate) fn new(file: EpochFileSink) -> Self {
        Self {
            committed_len: file.sealed_len(),
            file,
            pending: Vec::new(),
        }
    }

    /// Append `batch` to the open epoch.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        self.file.write(batch)
    }

    /// Seal the open epoch durably; returns what the checkpoint records:
    /// every pending epoch, this one last. Later rows go to the next epoch.
    pub(crate) fn seal(&mut self) -> Result<SinkCheckpoint, ConnectorError> {
        let record = self.file.pre_commit()?;
        self.pending.push(record);
        Ok(SinkCheckpoint {
            committed_len: self.committed_len,
            next_epoch: self.file.epoch(),
            epochs: self.pending.iter().map(to_record).collect(),
        })
    }

    /// The checkpoint that recorded the pending epochs is durable: make
    /// them visible. On failure they stay pending (recovery re-commits
    /// them from the manifest; committing is idempotent).
    pub(crate) fn commit(&mut self) -> Result<(), ConnectorError> {
        self.file.commit(&self.pending)?;
        self.committed_len = self.file.sealed_len();
        self.pending.clear();
        Ok(())
    }

    /// The checkpoint that sealed the pending epochs will never become
    /// durable: remove their staged files, which no checkpoint refers to.
    pub(crate) fn discard(&mut self) -> Result<(), ConnectorError> {
        for p in std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|r| r.staged)
        {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(ConnectorError::Io { path: p, source }),
            }
        }
        Ok(())
    }

    /// Whether sealed epochs await commit, or the open epoch holds rows.
    pub(crate) fn is_unsettled(&self) -> bool {
        !self.pending.is_empty() || self.file.has_open_rows()
    }

    /// The pipeline failed: the open epoch's rows are rolled back.
    pub(crate) fn rollback_open_epoch(&mut self) -> Result<(), ConnectorError> {
        self.file.rollback_open_epoch()
    }

    /// Release the file; returns its committed length.
    pub(crate) fn close(self) -> Result<u64, ConnectorError> {
        self.file.close()
    }
}
