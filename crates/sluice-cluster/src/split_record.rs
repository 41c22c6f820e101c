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

use std::collections::BTreeMap;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::keys::{ClusterKeys, NodeId};
use crate::status::{decode, encode};

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
}

/// The record and the etcd revision it was last written at (0: absent).
pub async fn read(client: &Client, keys: &ClusterKeys) -> Result<(Option<SplitRecord>, i64)> {
    let key = keys.split();
    let got = client
        .clone()
        .get(key.clone(), None)
        .await
        .map_err(|e| ClusterError::etcd("read of the split record", e))?;
    match got.kvs().first() {
        Some(kv) => Ok((Some(decode(&key, kv.value())?), kv.mod_revision())),
        None => Ok((None, 0)),
    }
}

/// Write `record` in place of the one read at `revision` (0: none), only
/// if no node of `absent` is a member now, and drop the old generation's
/// records of finished members (`status::record_member_finished`). False
/// when a compare failed: another node changed the record first, or an old
/// member is live.
pub async fn replace(
    client: &Client,
    keys: &ClusterKeys,
    record: &SplitRecord,
    revision: i64,
    absent: &[String],
) -> Result<bool> {
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
    Ok(response.succeeded())
}
