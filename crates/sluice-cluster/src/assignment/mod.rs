//! The vnode assignment table: which live member owns each vnode, and the
//! generation that fences it.
//!
//! # Architecture
//!
//! The leader alone writes `/sluice/C/assignment` ([`publish()`]), in a
//! transaction guarded by its term *and* by the generation it read, so a
//! deposed leader and a leader acting on a stale table are both refused by
//! etcd. The **generation** is the etcd revision of that write (the key's
//! mod revision): it grows with every write and is the fencing generation
//! of `CheckpointAssignmentFence`. Every node (leader included) reads the
//! table through a watch ([`view`]); the leader's [`driver`] reacts to
//! membership changes by writing a new table placed by rendezvous hashing
//! (`vnodes.rs`), so only the vnodes of a leaver, or a joiner's share, move.
//! In active–standby mode ([`Placement::Leader`]) the table places every
//! vnode on the leader, which runs them all.
//!
//! ```text
//!  live members (watch) ──► driver (leader only) ──► publish: txn
//!                                                     if leader term == T
//!                                                     and mod_rev == G_old
//!                                                     put assignment ─► G_new
//!  every node: view (watch) ◄─────────────────────────────────┘
//! ```

pub mod driver;
pub mod publish;
pub mod table;
pub mod view;

pub use driver::{AssignmentDriver, Placement};
pub use publish::publish;
pub use table::Assignment;
pub use view::AssignmentView;
