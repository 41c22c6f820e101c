//! The leader's record of committed checkpoints in etcd: the
//! [`CommitAuthority`] of a cluster's checkpoint store.
//!
//! A leader paused between its last check of the store's lease and its
//! manifest write wakes up and completes that write after a standby took
//! over; the store cannot refuse it, because object stores have no
//! fencing tokens. etcd can: the checkpoint counts only once its id is
//! recorded under `/sluice/C/checkpoints/stored/<id>` by a transaction that
//! compares the leader key's create revision (the leader's term). A
//! deposed leader's record is refused by etcd itself, its pipeline
//! halts, and its sinks commit nothing; the new leader reads only
//! recorded checkpoints.
//!
//! ```text
//!  leader (term T)            store                  etcd
//!   manifest ID ────────────► checkpoints/ID/…
//!   record_commit(ID) ──[leader create rev = T]──►  checkpoints/stored/ID
//!        ├ committed: the checkpoint exists, sinks commit its epochs
//!        └ NotLeader: Fenced, sinks commit nothing, readers skip the manifest
//!  any node: committed() = ids under checkpoints/stored/
//! ```
//!
//! One record exists per node process: the database is built before the
//! node joins (its catalog is sealed from it), so the record learns its
//! term when the node wins an election ([`LeaderCommitRecord::lead`]).
//! Until then, and after [`LeaderCommitRecord::stand_down`], every record
//! is refused.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, TxnOp};
use parking_lot::Mutex;
use sluice_storage::{CommitAuthority, StorageError};

use crate::checkpoint::checkpoint_assignment_for_admission;
use crate::checkpoint::mod_revision_at;
use crate::error::ClusterError;
use crate::keys::ClusterKeys;
use crate::leader::{Election, Guarded};

/// The checkpoint kind under `/sluice/C/checkpoints/` that records the
/// active leader's committed store checkpoints.
pub const STORED: &str = "stored";

/// The leader's commit record for one node process; see the module docs.
pub struct LeaderCommitRecord {
    client: Client,
    keys: ClusterKeys,
    node: String,
    /// The election and the term this node leads at, while it leads.
    leading: Mutex<Option<(Arc<Election>, u64)>>,
}

impl std::fmt::Debug for LeaderCommitRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderCommitRecord")
            .field("cluster", &self.keys.cluster())
            .field("node", &self.node)
            .field("term", &self.leading.lock().as_ref().map(|(_, t)| *t))
            .finish()
    }
}

impl LeaderCommitRecord {
    /// The record of cluster `keys`, read through `client`, written as
    /// node `node` once it leads.
    pub fn new(client: Client, keys: ClusterKeys, node: &str) -> Self {
        Self {
            client,
            keys,
            node: node.to_string(),
            leading: Mutex::new(None),
        }
    }

    /// This node leads at `term` through `election`: its records are
    /// fenced by that term from now on.
    pub fn lead(&self, election: Arc<Election>, term: u64) {
        *self.leading.lock() = Some((election, term));
    }

    /// This node no longer leads: every record is refused.
    pub fn stand_down(&self) {
        *self.leading.lock() = None;
    }

    fn leader(&self, id: u64) -> Result<(Arc<Election>, u64), StorageError> {
        self.leading
            .lock()
            .clone()
            .ok_or_else(|| StorageError::Fenced {
                id,
                source: Box::new(ClusterError::NotLeader {
                    node: self.node.clone(),
                    term: 0,
                }),
            })
    }

    fn authority(what: String, e: ClusterError) -> StorageError {
        StorageError::Authority {
            what,
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl CommitAuthority for LeaderCommitRecord {
    async fn record_commit(&self, id: u64, generation: Option<u64>) -> Result<(), StorageError> {
        let (election, term) = self.leader(id)?;
        let key = self.keys.checkpoint_record(STORED, id);
        let value = format!("{{\"term\":{term},\"node\":\"{}\"}}", self.node);
        let put = TxnOp::put(key, value, None::<PutOptions>);
        // The assignment the attempt was admitted under must still hold.
        let compares = match generation {
            Some(g) => vec![Compare::mod_revision(
                self.keys.assignment(),
                CompareOp::Equal,
                i64::try_from(g).unwrap_or(i64::MAX),
            )],
            None => vec![],
        };
        let read = vec![TxnOp::get(self.keys.assignment(), None)];
        match election.guarded_txn(term, compares, vec![put], read).await {
            Ok(Guarded::Committed { .. }) => Ok(()),
            // Only the generation compare is the caller's; the guard's own
            // failure is `NotLeader`.
            Ok(Guarded::CompareFailed { response }) => Err(StorageError::Fenced {
                id,
                source: Box::new(ClusterError::AssignmentFenceMoved {
                    action: "commit record",
                    id,
                    node: self.node.clone(),
                    expected: generation.unwrap_or(0),
                    current: mod_revision_at(&response, 1),
                }),
            }),
            Err(e @ ClusterError::NotLeader { .. }) => Err(StorageError::Fenced {
                id,
                source: Box::new(e),
            }),
            Err(e) => Err(Self::authority(format!("recording checkpoint {id}"), e)),
        }
    }

    fn may_originate(&self) -> bool {
        let leading = self.leading.lock().clone();
        leading.is_some_and(|(election, term)| election.term() == Some(term))
    }

    async fn admit(&self) -> Result<Option<u64>, StorageError> {
        let (election, term) = self.leader(0)?;
        let fence = checkpoint_assignment_for_admission(election.session())
            .await
            .map_err(|e| Self::authority("admitting a checkpoint".into(), e))?;
        let table = fence.assignment();
        let generation = fence.generation();
        let owned = table.owned_vnodes(&self.node).len();
        let reason = if table.term() != term {
            format!(
                "the table was placed in term {}, not this leader's term {term} \
                 (its own table is not written yet)",
                table.term()
            )
        } else if u32::try_from(owned).ok() != Some(table.vnode_count()) {
            format!(
                "it owns {owned} of {} vnodes; this leader runs every vnode",
                table.vnode_count()
            )
        } else {
            return Ok(Some(generation));
        };
        Err(StorageError::Authority {
            what: "admitting a checkpoint".into(),
            source: Box::new(ClusterError::AdmissionRefused {
                node: self.node.clone(),
                generation,
                reason,
            }),
        })
    }

    async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
        let dir = self.keys.checkpoint_dir(STORED);
        let mut client = self.client.clone();
        let got = client
            .get(
                dir.clone(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(|e| {
                Self::authority(
                    "reading the committed checkpoints".into(),
                    ClusterError::etcd(format!("reading {dir}"), e),
                )
            })?;
        let ids: BTreeSet<u64> = got
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter_map(|k| k.strip_prefix(dir.as_str()))
            .filter_map(|id| id.parse().ok())
            .collect();
        Ok((!ids.is_empty()).then_some(ids))
    }

    async fn forget_below(&self, id: u64) -> Result<(), StorageError> {
        let (election, term) = self.leader(id)?;
        let from = self.keys.checkpoint_record(STORED, 0);
        let to = self.keys.checkpoint_record(STORED, id);
        let delete = TxnOp::delete(from, Some(DeleteOptions::new().with_range(to)));
        match election
            .guarded_txn(term, vec![], vec![delete], vec![])
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(Self::authority(
                format!("forgetting checkpoints below {id}"),
                e,
            )),
        }
    }
}
