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
