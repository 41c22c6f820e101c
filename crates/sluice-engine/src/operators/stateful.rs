//! The one trait every stateful operator implements.
//!
//! # Architecture
//!
//! A stateful operator (window, session, updating and changelog aggregates,
//! the join, a bound process function) is driven the same way, whatever it
//! computes:
//!
//! ```text
//!   cycle:       update(port, batch) ... update(port, batch)   advance(watermark)
//!                      |  rows final at once (join pairs)            |  rows the watermark
//!                      v                                             v  closes, or the cycle's changes
//!                 --------------------- output, in call order --------------------
//!
//!   checkpoint:  snapshot(writer)  ->  one part (bytes)  ->  restore(reader)
//! ```
//!
//! The tree walker in [`super::Operator`] and the coordinator's stream
//! producers call only these methods, so adding an operator means one
//! `impl`, not another arm in every match over operator kinds. Snapshot
//! parts are written with [`snapshot_part`] (or captured unencoded with
//! [`snapshot_state_part`], for a checkpoint tail to encode off the compute
//! thread) and read with [`restore_part`], one part per operator, in tree
//! order.

use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::error::{EngineError, Result};
use crate::partition::placement::VnodePlacement;
use crate::state::{SnapshotReader, SnapshotWriter, StatePart};

/// An operator's input port: 0 for an operator with one input; for the
/// join, [`LEFT`] and [`RIGHT`].
pub type Port = usize;

/// The join's left input.
pub const LEFT: Port = 0;
/// The join's right input.
pub const RIGHT: Port = 1;

/// An operator that keeps state across batches and cycles.
///
/// Within a cycle the driver calls [`update`](Self::update) for every input
/// batch (all of port 0's batches, then port 1's, each in arrival order) and
/// then [`advance`](Self::advance) once with the cycle's watermark. The
/// output of the cycle is what those calls return, in call order.
pub trait StatefulOperator: Send {
    /// What the operator is, for messages ("window aggregate").
    fn kind(&self) -> &'static str;

    /// Fold one batch arriving on `port` into the state.
    ///
    /// Returns the rows this batch makes final at once, which no later call
    /// takes back; an operator that emits only when the watermark moves or
    /// the cycle ends returns nothing here. An error leaves the cycle failed
    /// (the coordinator decides between dropping and recovering).
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>>;

    /// The cycle ended with the pipeline's watermark at `watermark`.
    ///
    /// Returns what this makes final (windows and sessions the watermark
    /// closes) or, for changelog output, the cycle's changes; and frees the
    /// state no later row can reach. Calling it again with the same
    /// watermark and no update in between returns nothing new.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>>;

    /// Write the whole state to `out` without changing what the operator
    /// will emit (a snapshot may compact internal buffers, never results).
    ///
    /// This runs on the compute thread at a checkpoint barrier, with every
    /// row waiting: an operator whose state is large pushes a deferred part
    /// ([`SnapshotWriter::push_deferred`]) that the checkpoint tail builds,
    /// and does here only work proportional to what changed since the last
    /// snapshot (the aggregates do; see `operators::scope`).
    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()>;

    /// Replace the state with one written by [`snapshot`](Self::snapshot) of
    /// an operator compiled from the same plan. An error means the part is
    /// damaged or from another plan; the state is then unspecified and the
    /// operator must not run.
    fn restore(&mut self, snap: &SnapshotReader) -> Result<()>;

    /// Replace the state with the keys of `keep`'s vnodes out of `snaps`:
    /// snapshots, written by [`snapshot`](Self::snapshot) at one checkpoint
    /// cut, of this operator on every node that held one of those vnodes
    /// before vnodes moved between the nodes of a split. A key's rows went
    /// to its vnode's one owner, so each key's state is in at most one of
    /// them; keys of other vnodes are left to their new owners. With no
    /// snapshot, the state is empty.
    ///
    /// Returns an error when the operator's state cannot move (the
    /// default: it names the operator), or a part is damaged; the state is
    /// then unspecified and the operator must not run.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let _ = (snaps, keep);
        Err(EngineError::Catalog(format!(
            "the state of a {} cannot move with its vnodes to another node yet (that of \
             windowed, session and updating GROUP BYs, of inner, outer and ASOF joins and of \
             process functions can); \
             keep the split's member list, or start the pipeline afresh",
            self.kind()
        )))
    }

    /// Rows this operator dropped because the watermark had already closed
    /// what they belonged to.
    fn dropped_late(&self) -> u64 {
        0
    }

    /// How many rows the operator holds in its state, where it counts them
    /// (the join and the top-N do): what tests and diagnostics read to see
    /// state freed by the watermark. None: not counted.
    fn held_rows(&self) -> Option<usize> {
        None
    }

    /// Give the state up without freeing it: the process exits right after
    /// the pipeline stops (`sluice run`), and the kernel takes the memory
    /// back at once, while freeing millions of small allocations one by one
    /// was the last tenth of a top-N run's CPU. Called only by a shutdown
    /// that says so ([`crate::coordinator::Command::Shutdown`]), never by a
    /// restart. The operator must not run afterwards. Default: nothing, for
    /// state kept in a few large buffers, which frees fast.
    fn forget_state(&mut self) {}
}

/// One operator's state as one checkpoint part, encoded.
pub fn snapshot_part(op: &mut dyn StatefulOperator) -> Result<Bytes> {
    snapshot_state_part(op)?.encode()
}

/// One operator's state as one checkpoint part whose encoding is deferred:
/// its Arrow batches are shared, not copied, so a checkpoint captures it on
/// the compute thread and encodes it in the checkpoint tail.
pub fn snapshot_state_part(op: &mut dyn StatefulOperator) -> Result<StatePart> {
    let mut w = SnapshotWriter::default();
    op.snapshot(&mut w)?;
    Ok(w.finish_deferred())
}

/// Restore one operator from a part written by [`snapshot_part`].
pub fn restore_part(op: &mut dyn StatefulOperator, part: &[u8]) -> Result<()> {
    op.restore(&SnapshotReader::new(part)?)
}

/// The error for a batch on a port the operator does not have.
pub(crate) fn no_such_port(kind: &str, port: Port) -> EngineError {
    EngineError::Internal(format!("{kind} has no input port {port}"))
}
