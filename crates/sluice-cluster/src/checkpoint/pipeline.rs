//! What a node's pipeline does in a checkpoint round
//! ([`CheckpointPipeline`]), as seen by the [`CheckpointFollower`] that
//! drives it.
//!
//! The control plane decides *when* and *whether*; the pipeline owns the
//! state. Like ripgrep's `Sink`, each method is called at one point of a
//! round and its return value tells the driver what to do next:
//!
//! ```text
//!  Prepare(id) ──► capture ── Ok(part) ──► ack ──┐
//!                          └─ Err(reason) ► nack ┤
//!                                                ▼ decision (etcd)
//!                       committed(id, parts) ◄── commit
//!                       aborted(id, reason)  ◄── abort
//! ```
//!
//! For every attempt whose Prepare gives this node vnodes under the table
//! it runs, exactly one of `committed` or `aborted` is called, in
//! attempt-id order — `aborted` without a `capture` if the attempt was
//! aborted before this node got to it. For an attempt it takes no part in
//! (it owns no vnode, the Prepare names another table, the follower was
//! fenced, or the attempt committed without it) neither is called.
//!
//! [`CheckpointFollower`]: super::follower::CheckpointFollower

use std::collections::BTreeMap;
use std::future::Future;

use super::record::{CheckpointPrepare, PartRef};

/// Why a pipeline refused or could not apply a step of a round. It keeps
/// its source (and, for the engine's errors, their stable code) up to the
/// follower; only a nack's reason is sent on as text, because it crosses
/// the network to the leader through etcd.
pub type PipelineError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A node's pipeline, driven through checkpoint rounds by a
/// [`CheckpointFollower`](super::follower::CheckpointFollower).
pub trait CheckpointPipeline: Send {
    /// Capture the state of `vnodes` (the vnodes this node owns in
    /// `prepare`'s table) for attempt `prepare.id`, and make it durable.
    ///
    /// `Ok(part)` means the part is durable where `part` says: the follower
    /// acks with it, and the part becomes part of the checkpoint if the
    /// attempt commits. `Err(e)` refuses the attempt (the spec's
    /// `cancel_source_barrier_attempt`): the follower nacks with `e`'s text
    /// and the leader aborts the round. A capture still running at the
    /// Prepare's deadline is dropped and nacked.
    fn capture(
        &mut self,
        prepare: &CheckpointPrepare,
        vnodes: &[u32],
    ) -> impl Future<Output = Result<PartRef, PipelineError>> + Send;

    /// Attempt `id` committed with every owning node's part in `parts`:
    /// transactional sinks commit that epoch. Called once per answered
    /// attempt that committed.
    ///
    /// `Err(e)` means the pipeline could not apply the commit; the
    /// follower reports it as `SLC-CLU-020` with `e` as its source (the decision itself stands).
    fn committed(
        &mut self,
        id: u64,
        parts: &BTreeMap<String, PartRef>,
    ) -> Result<(), PipelineError>;

    /// Attempt `id` was aborted (a nack, a missed deadline, a fenced
    /// commit, or the authoritative abort of an orphan by a new leader —
    /// the spec's `resolve_authoritative_follower_abort`): sinks roll back
    /// that epoch before the next attempt. Called once per answered
    /// attempt that aborted.
    ///
    /// `Err(e)` means local state could not be resolved exactly; the
    /// follower reports it as `SLC-CLU-020` with `e` as its source.
    fn aborted(&mut self, id: u64, reason: &str) -> Result<(), PipelineError>;
}
