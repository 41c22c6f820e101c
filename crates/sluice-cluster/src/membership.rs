//! Cluster membership: a node is a member while its lease-attached key
//! `/sluice/C/nodes/N` exists.
//!
//! Joining creates the key only if it does not exist (a transaction on its
//! create revision), so a second process with the same node id is refused
//! by name while the first one's lease lives. The live member set is a
//! watch-driven mirror of the `nodes/` prefix: a member that leaves, or whose
//! lease expires, disappears from every node's view when etcd deletes its
//! key.

use std::collections::BTreeSet;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::sync::watch;

use crate::error::{ClusterError, Result};
use crate::session::Session;
use crate::watch as key_watch;

/// This node's membership.
#[derive(Debug)]
pub struct Membership {
    session: Arc<Session>,
}

impl Membership {
    /// Join the cluster as the session's node id. Refused with
    /// [`ClusterError::DuplicateNode`] while another lease holds the id.
    pub async fn join(session: Arc<Session>) -> Result<Self> {
        let key = session.keys().node(session.node());
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                session.node().as_str(),
                Some(PutOptions::new().with_lease(session.lease_id())),
            )]);
        let response = session
            .client()
            .txn(txn)
            .await
            .map_err(|e| ClusterError::etcd(format!("join as node '{}'", session.node()), e))?;
        if !response.succeeded() {
            return Err(ClusterError::DuplicateNode {
                cluster: session.keys().cluster().to_string(),
                node: session.node().to_string(),
            });
        }
        tracing::info!(cluster = session.keys().cluster(), node = %session.node(), "joined cluster");
        Ok(Self { session })
    }

    /// Leave now: delete the member key (only if it is still ours, i.e. on
    /// our lease) rather than waiting for the lease to expire.
    pub async fn leave(self) -> Result<()> {
        let key = self.session.keys().node(self.session.node());
        let txn = Txn::new()
            .when([Compare::lease(
                key.clone(),
                CompareOp::Equal,
                self.session.lease_id(),
            )])
            .and_then([TxnOp::delete(key, None)]);
        self.session.client().txn(txn).await.map_err(|e| {
            ClusterError::etcd(format!("leave as node '{}'", self.session.node()), e)
        })?;
        Ok(())
    }
}

/// Every node's view of the live member set (node ids, sorted).
pub fn live_members(session: &Session) -> watch::Receiver<BTreeSet<String>> {
    let prefix = session.keys().nodes_prefix();
    let mut snapshots = key_watch::spawn(session.client(), prefix.clone(), true);
    let (tx, rx) = watch::channel(BTreeSet::new());
    tokio::spawn(async move {
        loop {
            let members: BTreeSet<String> = snapshots
                .borrow_and_update()
                .entries
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
                .collect();
            tx.send_if_modified(|current| {
                let changed = *current != members;
                *current = members;
                changed
            });
            tokio::select! {
                () = tx.closed() => return,
                changed = snapshots.changed() => if changed.is_err() { return },
            }
        }
    });
    rx
}

/// Wait until every member of cluster `keys` listed now has left: its key
/// of this moment is gone (the process stopped, or its lease lapsed). A
/// member that joined again since has a new key (a later create revision)
/// and counts as gone. Returns at `until` at the latest, with the members
/// still there.
///
/// A node of a shuffled split that halted waits for this before it
/// rejoins: every member's previous run has then closed its channels, so
/// none of them reaches the server of the node's next run.
pub async fn wait_for_members_to_leave(
    client: etcd_client::Client,
    keys: &crate::keys::ClusterKeys,
    until: tokio::time::Instant,
) -> Vec<String> {
    let prefix = keys.nodes_prefix();
    let mut snapshots = key_watch::spawn(client, prefix.clone(), true);
    let mut first: Option<Vec<(String, i64)>> = None;
    loop {
        {
            let snapshot = snapshots.borrow_and_update();
            if snapshot.revision > 0 {
                let listed = first.get_or_insert_with(|| {
                    snapshot
                        .entries
                        .iter()
                        .map(|(k, e)| (k.clone(), e.create_revision))
                        .collect()
                });
                let left: Vec<String> = listed
                    .iter()
                    .filter(|(k, rev)| {
                        snapshot
                            .entries
                            .get(k)
                            .is_some_and(|e| e.create_revision == *rev)
                    })
                    .map(|(k, _)| k.strip_prefix(&prefix).unwrap_or(k).to_string())
                    .collect();
                if left.is_empty() {
                    return left;
                }
            }
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            () = tokio::time::sleep_until(until) => break,
        }
    }
    let snapshot = snapshots.borrow();
    first
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, rev)| {
            snapshot
                .entries
                .get(k)
                .is_some_and(|e| e.create_revision == *rev)
        })
        .map(|(k, _)| k.strip_prefix(&prefix).unwrap_or(&k).to_string())
        .collect()
}
