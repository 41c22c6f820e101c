//! The leader's checkpoint protocol over etcd (issue 14, slice 1).
//!
//! # Architecture
//!
//! A checkpoint attempt moves through five records under
//! `/sluice/C/checkpoints/`, each written by one etcd transaction whose
//! compare clauses do the fencing — no write depends on a read that etcd
//! does not re-check:
//!
//! ```text
//!  leader (term T)                      etcd                       follower N
//!  reserve_checkpoint_attempt ──txn: T, counter rev──► counter=id,
//!                                                      attempts/id
//!  checkpoint_assignment_for_admission ◄─get── assignment (gen G)
//!  publish_checkpoint_prepare ──txn: T, gen G, attempt──► prepare/id
//!                                                      ───watch/read──► Prepare
//!                                       answers/id/N ◄──txn: prepare, gen G,
//!                                       (N's lease)      member lease, absent
//!  wait_for_answers ◄──watch (bounded by the deadline)──
//!  decide: commit ──txn: T, gen G, each ack's create rev,──► decisions/id,
//!                        committed rev, absent                committed=id
//!       or abort  ──txn: T, absent──────────────────────► decisions/id
//!                                                      ───wait_for_decision──►
//!  prune_checkpoints ──txn: T, committed rev──► delete ids < committed-K
//! ```
//!
//! Fencing: the term (`leader.rs`) refuses a deposed leader at every leader
//! write; the generation (`assignment/`) refuses a Prepare, answer or
//! commit made for a table that has since changed; an answer lives on its
//! follower's lease and the commit compares each ack's create revision, so
//! a follower that lost its lease neither answers nor counts. Ids come from
//! a permanent counter and are never reused, even for abandoned attempts.
//!
//! Who drives what: the functions above are single steps; two drivers
//! put them in order. [`CheckpointLeader`] (`leader.rs`, the leader node
//! only) runs one round per `run_round` call and, on taking leadership,
//! first aborts every attempt an earlier leader left undecided — the
//! authoritative abort that releases followers waiting on an orphan. A
//! [`CheckpointFollower`] (`follower.rs`, every node, the leader's too)
//! watches Prepares and drives its node's [`CheckpointPipeline`]
//! (`pipeline.rs`): capture, answer, then `committed` or `aborted` once
//! per attempt, in id order:
//!
//! ```text
//!  CheckpointLeader                       CheckpointFollower ── CheckpointPipeline
//!   take_over: abort orphans ──decisions/──► aborted(orphan)
//!   run_round: reserve, admit, Prepare ──prepare/ watch──► capture ─► ack | nack
//!              wait_for_answers ◄──answers/──────────────────────────┘
//!              commit | abort ──decisions/ watch──► committed | aborted
//!              prune (after a commit)
//!   deposed mid-round ─► SLC-CLU-018, the next leader aborts the attempt
//! ```
//!
//! The streaming pipeline does not use these drivers: there the engine's
//! coordinator drives, and the same steps are taken by the stores' commit
//! authorities, [`crate::LeaderCommitRecord`] (reserve, admit, Prepare,
//! wait for answers, decide) and [`crate::FollowerCommitRecord`] (each
//! Prepare once, its wake for `checkpoint_control_wake`, ack or nack, wait
//! for the decision). The drivers remain the protocol's reference, which
//! the model tests check.
//!
//! Recovery restores from [`last_committed`]: the committed pointer, the
//! Prepare (generation and owners) and the commit decision, which carries
//! every ack's part because answer keys vanish with follower leases.

pub mod answer;
pub mod decide;
pub mod follower;
pub mod leader;
pub mod pipeline;
pub mod prepare;
pub mod prune;
pub mod read;
pub mod record;
pub mod reserve;
#[cfg(test)]
mod testing;
pub(crate) mod txn;
pub mod wait;

pub use answer::answer_checkpoint;
pub use decide::{abort_attempt, commit_attempt, decide, verdict, Decided, Verdict};
pub use follower::{CheckpointFollower, FollowerOutcome};
pub use leader::{abort_orphaned_attempts, CheckpointLeader, RoundOutcome};
pub use pipeline::{CheckpointPipeline, PipelineError};
pub use prepare::{checkpoint_assignment_for_admission, publish_checkpoint_prepare, read_prepare};
pub use prune::prune_checkpoints;
pub use read::{
    last_committed, last_committed_id, read_answers, read_decision, require_prepare, Answers,
    CommittedCheckpoint,
};
pub use record::{
    Answer, AnswerRecord, CheckpointAssignmentFence, CheckpointAttempt, CheckpointPrepare,
    Decision, DecisionRecord, PartRef, Stored,
};
pub use reserve::{
    read_attempt_counter, reserve_after, reserve_checkpoint_attempt, reserve_given, AttemptCounter,
};
pub use txn::now_ms;
pub use wait::{wait_for_answers, wait_for_decision};
