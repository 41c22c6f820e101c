//! Who says a checkpoint exists, when the store alone cannot.
//!
//! A store's writes cannot carry a fencing token: an object store offers
//! conditional puts on one object, not "only while writer W still leads".
//! A single writer is enough for a pipeline on one host (the state
//! directory's lock, or the store's lease), but a cluster leader that is
//! paused between its last lease check and its manifest write (SIGSTOP, a
//! VM stall) wakes up and completes that write after a standby took over
//! from the previous checkpoint. Its sinks would then publish the epochs
//! the new leader publishes again.
//!
//! A [`CommitAuthority`] closes that gap. With one attached, a manifest is
//! only a candidate: the checkpoint exists once the authority recorded its
//! id, in a write fenced by the writer's own right to commit (in a cluster:
//! an etcd transaction that compares the leader's term). Readers take only
//! recorded checkpoints:
//!
//! ```text
//!  writer                      store                 authority
//!   blobs, manifest ─────────► checkpoints/ID/…       (candidate)
//!   record_commit(ID) ─────────────────────────────►  ID recorded ⇒ it exists
//!        └ Fenced: nothing was committed; the manifest is left to the
//!          store's writer (see below)
//!  reader: manifests ∩ recorded ids (all manifests while nothing is recorded)
//! ```
//!
//! The order matters: the manifest is written first, so a recorded id
//! always has its manifest, and a writer fenced at the record never
//! commits its sink epochs. A fenced writer leaves its manifest: once
//! anything is recorded, readers skip it and the store's writer removes it
//! at its next reservation; before that, a writer that took over may
//! already have resumed from it (a complete checkpoint whose sink epochs
//! nobody published yet), and removing it would lose that checkpoint.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::manifest::BlobRef;

/// What a follower's authority heard from the cluster leader
/// ([`CommitAuthority::next_announcement`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// The leader prepared attempt `id` at assignment `generation`, and
    /// this writer owns part of it: capture that part under `id`, and
    /// commit it ([`CommitAuthority::record_commit`] is then the ack) or
    /// decline it ([`CommitAuthority::decline`]) by `deadline_ms` (Unix
    /// milliseconds).
    Prepared {
        /// The leader's attempt id.
        id: u64,
        /// The assignment generation it is fenced at.
        generation: u64,
        /// When the leader stops waiting for this writer's answer.
        deadline_ms: u64,
    },
    /// The leader aborted attempt `id` before this writer answered it:
    /// only local state is released; nothing is answered.
    Aborted {
        /// The leader's attempt id.
        id: u64,
        /// The leader's reason.
        reason: String,
    },
}

/// The record of which checkpoints of a store are committed. Like a
/// ripgrep `Sink`, each method's result tells the store what to do next.
#[async_trait]
pub trait CommitAuthority: Send + Sync + std::fmt::Debug {
    /// Record checkpoint `id` as committed; its manifest is durable. On a
    /// follower this is its acknowledgement of the leader's attempt, and
    /// it returns once the leader decided: `Ok` if the checkpoint
    /// committed, [`StorageError::Aborted`](crate::StorageError::Aborted)
    /// if the leader aborted it.
    ///
    /// `Ok(())`: the checkpoint exists from now on. `Err` of
    /// [`StorageError::Fenced`](crate::StorageError::Fenced): this writer
    /// may no longer commit (a deposed leader); the checkpoint does not
    /// exist for readers of the records. Any other `Err`: the
    /// outcome is unknown (the record may have been written); the store
    /// keeps the manifest and reports the checkpoint as failed.
    ///
    /// `generation` is what [`Self::admit`] gave the attempt (the
    /// manifest's `assignment_generation`): an authority that handed one
    /// out records the commit only while that generation still holds, and
    /// refuses it as `Fenced` otherwise. `manifest` is the durable
    /// manifest's key, length and checksum: the part the writer commits.
    async fn record_commit(
        &self,
        id: u64,
        generation: Option<u64>,
        manifest: &BlobRef,
    ) -> Result<()>;

    /// Whether this writer's checkpoints are one cut with every other
    /// owner's: each is decided once for all of them (a leader sharing
    /// vnodes with followers, or a follower). Only then may a pipeline
    /// whose rows cross between nodes checkpoint: a node's state holds
    /// the other nodes' rows up to its barrier, which is right only if
    /// their positions are committed with it. Default: no (one host).
    fn one_cut_across_nodes(&self) -> bool {
        false
    }

    /// Whether this writer may originate a checkpoint now (in a cluster:
    /// it leads). `false`: the pipeline starts no checkpoint, and one asked
    /// for by hand is refused by name. Default: always (one host).
    fn may_originate(&self) -> bool {
        true
    }

    /// Admit a new checkpoint attempt: the assignment generation it is
    /// taken under. `Ok(None)`: there is no assignment (one host). `Ok(Some(g))`:
    /// this writer owns what it captures at generation `g`, which goes into
    /// the manifest and back to [`Self::record_commit`]. `Err`: the attempt
    /// is abandoned before any barrier (`Fenced`: this writer may not
    /// checkpoint under the current assignment).
    async fn admit(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Announce attempt `id`, admitted at `generation`, before any barrier
    /// is injected (in a cluster: the certified Prepare, with answers due
    /// by `deadline_ms`, Unix milliseconds). `Ok`: the attempt may capture.
    /// `Err`: it is abandoned (`Fenced`: this writer may not take it).
    /// Default: nothing to announce (one host).
    async fn prepare(&self, _id: u64, _generation: Option<u64>, _deadline_ms: u64) -> Result<()> {
        Ok(())
    }

    /// Whether this writer may fold input into state now. `false`: intake
    /// pauses (a standby, or a deposed leader, whose output nobody will
    /// publish). Default: while it may originate; a follower that owns
    /// part of the pipeline runs while it is a member.
    fn may_fold_input(&self) -> bool {
        self.may_originate()
    }

    /// Attempt `id`, which this writer originated and prepared, is given
    /// up before its manifest (alignment timed out, capture failed): the
    /// authority records that it will never commit, so followers waiting
    /// on it are released at once. An `Err` is logged; a leader that
    /// could not record it aborts it before its next Prepare. Default:
    /// nothing to release (one host).
    async fn abandon(&self, _id: u64, _reason: &str) -> Result<()> {
        Ok(())
    }

    /// A follower's wake: notified whenever the leader announces something
    /// (a Prepare, a decision). `None`: this writer follows nobody (one
    /// host, or a leader), and the pipeline never polls
    /// [`Self::next_announcement`].
    fn announcements(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// The oldest announcement this follower has not been given yet
    /// (each is given once, in id order). `Ok(None)`: nothing new. An
    /// `Err` means the leader's records could not be read; asking again
    /// later is safe. Default: nothing (one host).
    async fn next_announcement(&self) -> Result<Option<Announcement>> {
        Ok(None)
    }

    /// A follower gives up its part of the leader's attempt `id` before
    /// capture: it answers with a negative acknowledgement naming
    /// `reason`, and the leader aborts the attempt. `Err`: the answer was
    /// not written (the leader's deadline then ends the attempt).
    /// Default: nothing to answer (one host).
    async fn decline(&self, _id: u64, _reason: &str) -> Result<()> {
        Ok(())
    }

    /// Whether the leader already aborted attempt `id`, which this
    /// follower was handed and has aligned for: `Ok(Some(reason))` if so
    /// (the capture is skipped), `Ok(None)` if it is undecided or
    /// committed. An `Err` is not an answer; the capture goes on and the
    /// acknowledgement learns the decision. Default: never (one host).
    async fn attempt_aborted(&self, _id: u64) -> Result<Option<String>> {
        Ok(None)
    }

    /// A follower says whether it holds input that only a committed
    /// checkpoint releases (a process function's rows, gated on commits):
    /// `holding` is its current state, and calls that repeat it are
    /// cheap. Only the leader originates checkpoints, and it cannot see a
    /// follower's input, so it takes one while any follower says so
    /// ([`Self::checkpoints_requested`]). Never fails: the authority
    /// publishes the state in the background and retries; a node that
    /// dies stops asking with its lease. Default: nobody to tell (one
    /// host, or a leader).
    fn request_checkpoints(&self, _holding: bool) {}

    /// On a leader: whether another node holds input that only a
    /// committed checkpoint releases ([`Self::request_checkpoints`]).
    /// While it does, a periodic checkpoint is due even if this node ran
    /// no cycle since the last one. Default: no (one host, or a follower).
    fn checkpoints_requested(&self) -> bool {
        false
    }

    /// The recorded ids, ascending. `Ok(None)` when the authority has never
    /// recorded one: the store was written without it so far (by a
    /// pipeline on one host), and its manifests count as they are; except
    /// under an authority whose checkpoints are [one cut across
    /// nodes](Self::one_cut_across_nodes), where a manifest is only one
    /// node's part of an attempt and none counts before the first commit.
    async fn committed(&self) -> Result<Option<BTreeSet<u64>>>;

    /// The largest checkpoint id this authority knows was reserved,
    /// committed or not (a cluster's attempt counter), which it will never
    /// take again: a store that reserves under it reserves above it, so a
    /// node that joined a cut later (one added to a shuffled split, which
    /// may lead it) does not offer ids the cut's records already hold.
    /// `Ok(None)`: none known. Default: none (one host).
    async fn largest_reserved(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// The store pruned every checkpoint below `id`: their records may go.
    /// An `Err` is logged by the store; stale records are harmless.
    async fn forget_below(&self, id: u64) -> Result<()>;
}
