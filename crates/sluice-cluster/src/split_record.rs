//! The member list of a static split, by generation (`/sluice/C/split`).
//!
//! The first node of a split records its member list as generation 1.
//! Every node started with the same list runs that generation. A node
//! started with another list changes the split: once no member of the
//! current list is live, it records the new list as the next generation,
//! with what each old member's last checkpoint had read, in one etcd
//! transaction that compares the record it read and the absence of every
//! old member. Every node of the new list starts from that record: the
//! vnodes each one gained are read on from where their old holders
//! stopped, once (see `sluice::split::SplitHandover`).
//!
//! ```text
//!   gen 1: n1,n2  ──(all stopped; n3 starts with n1,n2,n3)──►  gen 2: n1,n2,n3
//!                    record { gen 2, members, previous: { gen 1, n1,n2, progress } }
//! ```
//!
//! The record is not lease-attached: it outlives every node, as the
//! sealed catalog does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use sluice_storage::{BlobRef, CommitAuthority, StorageError};

use crate::error::{ClusterError, Result};
use crate::keys::{ClusterKeys, NodeId};
use crate::status::{encode, read_json};

/// How far one source of a node had read, as its last checkpoint says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedProgress {
    /// The source's checkpointed offset (`None`: it had read nothing).
    pub offset: Option<String>,
    /// Whether it had read all its input.
    pub finished: bool,
}

/// The generation a split changed from, and where its members stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousSplit {
    /// Its generation.
    pub generation: u64,
    /// Its members, sorted.
    pub members: Vec<String>,
    /// By member, by source: what the member's last committed checkpoint
    /// had read (a member without a checkpoint is left out: it committed
    /// nothing).
    pub progress: BTreeMap<String, BTreeMap<String, RecordedProgress>>,
    /// For a split whose keyed rows cross between its nodes: the id of the
    /// last checkpoint the leader committed for all of them, whose parts
    /// hold the keyed state the next generation's nodes take over (fixed
    /// here, since the members that stay write newer checkpoints later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<u64>,
}

/// A split's current member list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitRecord {
    /// 1 for the first list, one more at every change.
    pub generation: u64,
    /// The members, sorted.
    pub members: Vec<String>,
    /// The generation before, for the nodes to start from (`None` for
    /// generation 1).
    pub previous: Option<PreviousSplit>,
    /// Where each member's shuffle listens (`NODE=IP:PORT,...`, sorted), for
    /// a split whose keyed rows cross between its nodes: every node of the
    /// generation runs with this list, and a node with another is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle: Option<String>,
}

/// The record and the etcd revision it was last written at (0: absent).
pub async fn read(client: &Client, keys: &ClusterKeys) -> Result<(Option<SplitRecord>, i64)> {
    read_json(client, keys.split(), "read of the split record").await
}

/// Write `record` in place of the one read at `revision` (0: none), only
/// if no node of `absent` is a member now, and drop the old generation's
/// records of finished members (`status::record_member_finished`). The
/// record's new revision; `None` when a compare failed: another node
/// changed the record first, or an old member is live.
pub async fn replace(
    client: &Client,
    keys: &ClusterKeys,
    record: &SplitRecord,
    revision: i64,
    absent: &[String],
) -> Result<Option<i64>> {
    let key = keys.split();
    let value = encode(&key, record)?;
    let mut compares = vec![Compare::mod_revision(
        key.clone(),
        CompareOp::Equal,
        revision,
    )];
    for member in absent {
        let node = NodeId::new(member)?;
        compares.push(Compare::create_revision(
            keys.node(&node),
            CompareOp::Equal,
            0,
        ));
    }
    let txn = Txn::new().when(compares).and_then([
        TxnOp::put(key, value, None),
        TxnOp::delete(
            keys.finished_members_prefix(),
            Some(DeleteOptions::new().with_prefix()),
        ),
    ]);
    let response = client
        .clone()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd("write of the split record", e))?;
    Ok(response
        .succeeded()
        .then(|| response.header().map_or(0, |h| h.revision())))
}

/// The commit authority of one node of a split (its own checkpoint
/// store's): a checkpoint counts once recorded in etcd
/// (`/sluice/C/split-commits/NODE/ID`), and is recorded only while the
/// split's record is the one the node runs under. So a node of an old
/// list that was cut off and wakes after the list changed commits
/// nothing: the new owners of its vnodes read on from its last recorded
/// checkpoint, which is the last one whose output it published.
#[derive(Clone)]
pub struct SplitCommitRecord {
    client: Client,
    keys: ClusterKeys,
    node: NodeId,
    /// The revision of the split record the node runs under (`None`: a
    /// reader, which records nothing).
    runs_under: Option<i64>,
    /// The etcd lease of the node's member key, once it joined
    /// ([`Self::bind_member_lease`]): a commit is recorded only while the
    /// key is still held under it.
    member_lease: Arc<OnceLock<i64>>,
}

impl std::fmt::Debug for SplitCommitRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitCommitRecord")
            .field("node", &self.node)
            .field("runs_under", &self.runs_under)
            .finish_non_exhaustive()
    }
}

impl SplitCommitRecord {
    /// The record of `node`'s checkpoints, committing while the split
    /// record stays at `revision`.
    pub fn new(client: Client, keys: ClusterKeys, node: &str, revision: i64) -> Result<Self> {
        Ok(Self {
            client,
            keys,
            node: NodeId::new(node)?,
            runs_under: Some(revision),
            member_lease: Arc::default(),
        })
    }

    /// The record of `node`'s checkpoints, to read which of them count.
    pub fn reader(client: Client, keys: ClusterKeys, node: &str) -> Result<Self> {
        Ok(Self {
            client,
            keys,
            node: NodeId::new(node)?,
            runs_under: None,
            member_lease: Arc::default(),
        })
    }

    /// The node joined the cluster under etcd lease `lease`: from now on
    /// a checkpoint is recorded only while its member key is held under
    /// that lease. A node paused (or cut off from etcd) past its lease
    /// has lost the key, and a process started again in its place holds
    /// it under another lease, so the paused one, waking with a
    /// checkpoint in hand, records nothing and publishes nothing. Checkpoints
    /// before the join (the pipeline starts after it) are refused by
    /// nothing but the split's revision. Bound once; later calls are
    /// ignored.
    pub fn bind_member_lease(&self, lease: i64) {
        let _ = self.member_lease.set(lease);
    }

    fn authority(what: String, e: impl std::error::Error + Send + Sync + 'static) -> StorageError {
        StorageError::Authority {
            what,
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl CommitAuthority for SplitCommitRecord {
    async fn record_commit(
        &self,
        id: u64,
        _generation: Option<u64>,
        manifest: &BlobRef,
    ) -> std::result::Result<(), StorageError> {
        let Some(revision) = self.runs_under else {
            return Err(StorageError::Fenced {
                id,
                source: "a reader of the split's commits records none".into(),
            });
        };
        let mut when = vec![Compare::mod_revision(
            self.keys.split(),
            CompareOp::Equal,
            revision,
        )];
        if let Some(lease) = self.member_lease.get() {
            when.push(Compare::lease(
                self.keys.node(&self.node),
                CompareOp::Equal,
                *lease,
            ));
        }
        let txn = Txn::new().when(when).and_then([TxnOp::put(
            self.keys.split_commit(&self.node, id),
            manifest.key.clone(),
            None,
        )]);
        let response = self.client.clone().txn(txn).await.map_err(|e| {
            Self::authority(
                format!("recording checkpoint {id} of node {}", self.node),
                ClusterError::etcd("split commit record", e),
            )
        })?;
        if response.succeeded() {
            return Ok(());
        }
        Err(StorageError::Fenced {
            id,
            source: format!(
                "the split's member list changed since node {} started, or its etcd lease \
                 lapsed (it was paused or cut off): another process reads on from its last \
                 recorded checkpoint",
                self.node
            )
            .into(),
        })
    }

    async fn committed(&self) -> std::result::Result<Option<BTreeSet<u64>>, StorageError> {
        let prefix = self.keys.split_commits(&self.node);
        let got = self
            .client
            .clone()
            .get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(|e| {
                Self::authority(
                    format!("reading the recorded checkpoints of node {}", self.node),
                    ClusterError::etcd("split commit record", e),
                )
            })?;
        if got.kvs().is_empty() {
            return Ok(None);
        }
        Ok(Some(
            got.kvs()
                .iter()
                .filter_map(|kv| {
                    String::from_utf8_lossy(kv.key())
                        .strip_prefix(&prefix)
                        .and_then(|id| id.parse().ok())
                })
                .collect(),
        ))
    }

    async fn forget_below(&self, id: u64) -> std::result::Result<(), StorageError> {
        let from = self.keys.split_commits(&self.node);
        let to = self.keys.split_commit(&self.node, id);
        self.client
            .clone()
            .delete(from, Some(DeleteOptions::new().with_range(to)))
            .await
            .map_err(|e| {
                Self::authority(
                    format!("forgetting checkpoints of node {} below {id}", self.node),
                    ClusterError::etcd("split commit record", e),
                )
            })?;
        Ok(())
    }
}
