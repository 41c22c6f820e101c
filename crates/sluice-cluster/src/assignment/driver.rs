//! The leader's reaction to membership changes: write a new assignment
//! whenever the live member set differs from the one the table was placed
//! on. Runs on every node; does nothing unless the node leads.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::publish::publish;
use super::table::Assignment;
use super::view::AssignmentView;
use crate::error::ClusterError;
use crate::leader::Election;
use crate::vnodes::VnodeCount;

/// How long to wait before retrying a write etcd did not answer.
const RETRY: Duration = Duration::from_millis(100);

/// Whom the leader places vnodes on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Placement {
    /// Every live member, by rendezvous hashing (vnode-placed execution).
    #[default]
    Members,
    /// The leader alone (active–standby: the leader runs every vnode and
    /// the standbys own none until one of them leads). A member joining or
    /// leaving does not change the table; a new leader does.
    Leader,
    /// These members (sorted, deduplicated), live or not: a static split,
    /// where each node reads the share of the sources its vnodes hold and
    /// a node's vnodes wait for it while it is down. Membership changes do
    /// not change the table.
    Fixed(Vec<String>),
}

/// The running driver; stops when dropped.
#[derive(Debug)]
pub struct AssignmentDriver {
    task: JoinHandle<()>,
}

impl AssignmentDriver {
    /// Start driving assignments for `election`'s node.
    pub fn start(
        election: Arc<Election>,
        members: watch::Receiver<BTreeSet<String>>,
        view: AssignmentView,
        count: VnodeCount,
        placement: Placement,
    ) -> Self {
        let task = tokio::spawn(drive(election, members, view, count, placement));
        Self { task }
    }
}

impl Drop for AssignmentDriver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn drive(
    election: Arc<Election>,
    mut members: watch::Receiver<BTreeSet<String>>,
    mut view: AssignmentView,
    count: VnodeCount,
    placement: Placement,
) {
    let mut leader = election.state();
    // The table this node last wrote: the view may lag behind it.
    let mut written: Option<Assignment> = None;
    loop {
        let live: Vec<String> = match &placement {
            Placement::Members => members.borrow_and_update().iter().cloned().collect(),
            Placement::Leader => {
                members.borrow_and_update();
                vec![election.session().node().to_string()]
            }
            Placement::Fixed(fixed) => {
                members.borrow_and_update();
                let mut fixed = fixed.clone();
                fixed.sort();
                fixed.dedup();
                fixed
            }
        };
        leader.borrow_and_update();
        if let (Some(term), false) = (election.term(), live.is_empty()) {
            let seen = view.current().unwrap_or(None);
            let current = match (seen, written.take()) {
                (Some(s), Some(w)) => Some(if s.generation() >= w.generation() {
                    s
                } else {
                    w
                }),
                (s, w) => s.or(w),
            };
            // A static split's table keeps its members across leaders, but
            // a leader admits checkpoints only under a table placed in its
            // own term (`LeaderCommitRecord::sharing_vnodes`): a new term
            // places the same members again. Only an older term does; a
            // table of a newer term means this node is already deposed.
            let fixed = matches!(placement, Placement::Fixed(_));
            let up_to_date = current.as_ref().is_some_and(|a| {
                a.members() == live.as_slice()
                    && a.vnode_count() == count.get()
                    && (!fixed || a.term() >= term)
            });
            written = current.clone();
            if !up_to_date {
                let expected = current.as_ref().map_or(0, Assignment::generation);
                match publish(&election, term, expected, count, &live).await {
                    Ok(a) => written = Some(a),
                    Err(ClusterError::Etcd { .. }) => {
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                    // A stale generation: the view will catch up; not the
                    // leader any more: the leader watch will say so.
                    Err(e) => tracing::debug!(error = %e, "assignment write refused"),
                }
            }
        }
        tokio::select! {
            changed = members.changed() => if changed.is_err() { return },
            changed = leader.changed() => if changed.is_err() { return },
            alive = view.changed() => if !alive { return },
        }
    }
}
