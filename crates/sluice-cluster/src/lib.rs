//! Sluice's cluster control plane on etcd (issue 14, first slice).
//!
//! A Sluice pipeline runs across several hosts by coordinating through etcd
//! — membership, leadership, the sealed startup catalog and the vnode
//! assignment table — never through a consensus protocol of its own.
//!
//! # Architecture
//!
//! ```text
//! etcd keys of cluster C                      owner (module)      lifetime
//! /sluice/C/catalog     {fingerprint,        catalog_seal.rs     permanent, created once
//!                        objects, vnode_count}
//! /sluice/C/nodes/N     N                    membership.rs       N's lease
//! /sluice/C/leader      N (create rev = term) leader.rs           leader's lease
//! /sluice/C/assignment  {term, members,      assignment/         permanent, rewritten by
//!                        owners[vnode]}                           the leader (mod rev =
//!                                                                 generation)
//! /sluice/C/checkpoints/                      checkpoint/         (ids zero-padded to 20
//!   counter           last reserved id                            digits, so keys sort)
//!                                                                 permanent
//!   attempts/ID       {id, term, node}                            until pruned
//!   prepare/ID        {id, term, generation,                      until pruned
//!                      members, owners, digest,
//!                      deadline_ms}
//!   answers/ID/N      ack{part} | nack{reason}                    N's lease (or pruned)
//!   decisions/ID      commit{parts} | abort{reason}               until pruned
//!   committed         newest committed id                         permanent, only forward
//! ```
//!
//! Each node holds one [`Session`]: an etcd client and a lease renewed every
//! third of its TTL. Its member key and, while it leads, the leader key are
//! attached to that lease, so a node that crashes or pauses past the TTL
//! loses both at once. Every node mirrors the keys it reads with etcd
//! watches (`watch.rs`), so changes arrive as events, not by polling:
//!
//! ```text
//!  ClusterNode::start
//!    Session ──lease──► catalog_seal (check) ─► Membership::join ─► Election (campaign)
//!                                                      │                 │ term
//!                          live_members (watch) ◄──────┘                 ▼
//!                                   └──────────────► AssignmentDriver ─► publish (txn:
//!                                                    (leader only)        term + generation)
//!                          AssignmentView (watch) ◄───────────────────────┘
//! ```
//!
//! Fencing: the leader's **term** is the etcd revision that created its
//! leader key; the assignment **generation** is the etcd revision that
//! wrote the table. Leader-only writes compare both in the same etcd
//! transaction, so a deposed or stale writer is refused by etcd itself.
//!
//! Checkpoints (`checkpoint/`, sequence diagram there) follow the same
//! rule: reserve an id (term + counter revision), publish the Prepare
//! (term + generation), followers answer (Prepare + generation + their
//! member lease), the leader decides (term + generation + each ack's
//! create revision) and moves `committed` forward in the same transaction:
//!
//! ```text
//!  leader (term T)                 etcd                          follower N
//!   reserve ──[T, counter rev]──► counter=id, attempts/id
//!   admission ◄──get──────────── assignment (generation G)
//!   prepare ──[T, G, reserved]──► prepare/id ──────watch/read──► Prepare
//!                                 answers/id/N ◄──[prepare, G, member lease]── ack | nack
//!   wait (watch, ends by the deadline) ◄── answers
//!   decide ──[T, G, acks' create revs, committed rev]──► decisions/id = commit,
//!                                                        committed = id
//!       or ──[T]──► decisions/id = abort (nack, or deadline without every ack)
//!   prune ──[T, committed rev]──► delete ids < committed - K
//! ```
//!
//! Keys map to vnodes with a fixed hash (`vnodes.rs`: xxh3-64 of the
//! canonical partition key encoding, modulo the vnode count fixed in the
//! seal) and vnodes to nodes by rendezvous hashing, which moves only the
//! vnodes a membership change must move.
//!
//! # What exists, what comes next
//!
//! `sluice run --cluster` uses the control plane for active–standby runs
//! (`standby.rs`: the leader runs the whole pipeline, a standby takes over
//! from the shared store's last checkpoint; `status.rs`: `SHOW CLUSTER`).
//! There the assignment places every vnode on the leader
//! ([`assignment::Placement::Leader`]), and the streaming coordinator asks
//! the leader's [`LeaderCommitRecord`] through its cluster seam
//! (`ClusterCoordination` in `sluice-engine`): `is_leader` (only the
//! leader of the current term starts checkpoints) and
//! `checkpoint_assignment_for_admission` (an attempt is admitted under the
//! generation of the leader's own table, recorded in its manifest; its
//! commit record compares that generation in etcd). The record speaks
//! the whole checkpoint protocol below with the leader as the one owner
//! (`commit_record.rs`): the store's id is reserved in etcd, the Prepare
//! is published before any barrier, the leader acks its own manifest and
//! commits the decision. The next slices:
//!
//! 1. The leader's checkpoint protocol over etcd (`checkpoint/`: its etcd
//!    side and the leader / follower drivers exist; wiring them into the
//!    streaming coordinator's `PipelineCallback` is still to come).
//! 2. Vnode-placed operators: keyed state and process functions filed by
//!    vnode on shared object storage, `complete_pending_vnode_transition`
//!    moving vnodes at a checkpoint boundary. Process functions have the
//!    engine half: a processor placed on vnodes runs only their keys, numbers
//!    activations per vnode (vnode index in the id) and hands vnodes over
//!    with their state, timers and sequences
//!    (`sluice_engine::process::placement`, `process::benchmark::PlacedOwners`).
//! 3. Shuffle between hosts over gRPC with Arrow IPC frames, barriers in
//!    band, bounded and backpressured (the `sluice-shuffle` crate; the
//!    engine's exchanges route keyed aggregations' and joins' rows over it
//!    in a split, `DatabaseBuilder::shuffle`, checkpointed as one cut under
//!    `LeaderCommitRecord::sharing_vnodes` and `FollowerCommitRecord`; the
//!    binary's use of it and coordinated recovery are next).
//! 4. `sluice run --cluster etcd=... --node-id ...`, `SHOW CLUSTER` and
//!    metrics (leader, vnode owners, watermarks and lag per node).

pub mod assignment;
pub mod catalog_seal;
pub mod checkpoint;
mod checkpoint_requests;
pub mod client;
pub mod commit_record;
pub mod error;
pub mod follower_record;
pub mod keys;
pub mod leader;
pub mod membership;
pub mod node;
pub mod session;
pub mod split_record;
pub mod split_rescale;
pub mod standby;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod vnodes;
pub mod watch;

pub use assignment::{Assignment, AssignmentView};
pub use catalog_seal::{SealOutcome, SealedCatalog};
pub use commit_record::{CommittedCuts, LeaderCommitRecord};
pub use error::{ClusterError, Result};
pub use follower_record::FollowerCommitRecord;
pub use keys::{ClusterKeys, NodeId};
pub use leader::{Election, LeaderState};
pub use node::{ClusterNode, NodeConfig};
pub use session::Session;
pub use standby::Turn;
pub use status::ClusterStatus;
pub use vnodes::{vnode_of, VnodeCount, DEFAULT_VNODE_COUNT};
