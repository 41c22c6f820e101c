//! The leader's fenced write of a new assignment table.

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp, TxnOpResponse};

use super::table::{Assignment, Table};
use crate::error::{ClusterError, Result};
use crate::leader::{Election, Guarded};
use crate::vnodes::VnodeCount;

/// Write the assignment of `count` vnodes over `members`, as leader of
/// `term`, replacing the table at generation `expected` (0: no table yet).
///
/// Refused with [`ClusterError::NotLeader`] if the node no longer holds
/// `term`, and with [`ClusterError::StaleGeneration`] if the table in etcd
/// is not at `expected`. The new generation is the write's revision.
pub async fn publish(
    election: &Election,
    term: u64,
    expected: u64,
    count: VnodeCount,
    members: &[String],
) -> Result<Assignment> {
    let session = election.session();
    let node = session.node().to_string();
    let key = session.keys().assignment();
    let table = Table::place(session.keys().cluster(), term, count, members)?;
    let expected_rev = i64::try_from(expected).map_err(|_| ClusterError::StaleGeneration {
        node: node.clone(),
        expected,
        current: 0,
    })?;
    let outcome = election
        .guarded_txn(
            term,
            vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected_rev,
            )],
            vec![TxnOp::put(key.clone(), table.encode(), None::<PutOptions>)],
            vec![TxnOp::get(key.clone(), None)],
        )
        .await?;
    match outcome {
        Guarded::Committed { revision } => {
            tracing::info!(
                node = %node,
                term,
                generation = revision,
                members = ?table.members(),
                "published vnode assignment"
            );
            Ok(Assignment::new(revision, table))
        }
        Guarded::CompareFailed { response } => {
            let current = match response.op_responses().get(1) {
                Some(TxnOpResponse::Get(get)) => get
                    .kvs()
                    .first()
                    .and_then(|kv| u64::try_from(kv.mod_revision()).ok())
                    .unwrap_or(0),
                _ => 0,
            };
            Err(ClusterError::StaleGeneration {
                node,
                expected,
                current,
            })
        }
    }
}
