//! The sealed startup catalog: every node of a cluster must run the same
//! statements.
//!
//! The first node to start writes `/sluice/C/catalog` if it is absent (a
//! create-only transaction, so two first nodes cannot both win); the value
//! is the catalog fingerprint, the fingerprint of every object by name, and
//! the cluster's vnode count, which is fixed from then on. Every later node
//! compares its own catalog with the sealed one and is refused, by name,
//! with the objects that differ. The key is not lease-attached: the seal
//! outlives every node, as a pipeline's identity should.

use std::collections::BTreeMap;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::keys::{ClusterKeys, NodeId};
use crate::vnodes::VnodeCount;

/// Version of the sealed value's encoding.
const SEAL_FORMAT: u32 = 1;

/// A catalog as sealed in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedCatalog {
    /// The whole catalog's fingerprint (`sluice_engine::catalog::fingerprint`).
    pub fingerprint: String,
    /// Each object's fingerprint by name.
    pub objects: BTreeMap<String, String>,
    /// The cluster's vnode count, fixed at creation.
    pub vnode_count: VnodeCount,
}

/// The JSON form stored in etcd.
#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    fingerprint: String,
    objects: BTreeMap<String, String>,
    vnode_count: u32,
    sealed_by: String,
}

/// How the seal went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealOutcome {
    /// This node sealed the catalog (it is the cluster's first node).
    Sealed,
    /// The catalog was sealed by `sealed_by` and this node's matches it.
    Matched {
        /// The node that sealed it.
        sealed_by: String,
    },
}

/// Seal `catalog` for the cluster, or check it against the sealed one.
pub async fn seal_or_verify(
    client: &Client,
    keys: &ClusterKeys,
    node: &NodeId,
    catalog: &SealedCatalog,
) -> Result<SealOutcome> {
    let key = keys.catalog();
    let stored = Stored {
        format: SEAL_FORMAT,
        fingerprint: catalog.fingerprint.clone(),
        objects: catalog.objects.clone(),
        vnode_count: catalog.vnode_count.get(),
        sealed_by: node.to_string(),
    };
    let value = serde_json::to_vec(&stored).map_err(|e| ClusterError::Corrupt {
        key: key.clone(),
        reason: format!("cannot encode the catalog: {e}"),
    })?;
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), value, None)])
        .or_else([TxnOp::get(key.clone(), None)]);
    let response = client
        .clone()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd(format!("catalog seal by node '{node}'"), e))?;
    if response.succeeded() {
        tracing::info!(cluster = keys.cluster(), node = %node, "sealed the startup catalog");
        return Ok(SealOutcome::Sealed);
    }
    let sealed_value = match response.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    };
    // The key existed at the compare; a get in the same txn sees it.
    let sealed_value = sealed_value.ok_or_else(|| ClusterError::Corrupt {
        key: key.clone(),
        reason: "the sealed catalog vanished during the seal transaction".to_string(),
    })?;
    let sealed: Stored =
        serde_json::from_slice(&sealed_value).map_err(|e| ClusterError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?;
    if sealed.format != SEAL_FORMAT {
        return Err(ClusterError::Corrupt {
            key,
            reason: format!(
                "seal format {} (this version reads {SEAL_FORMAT})",
                sealed.format
            ),
        });
    }
    let differences = differences(&sealed, catalog);
    if differences.is_empty() {
        return Ok(SealOutcome::Matched {
            sealed_by: sealed.sealed_by,
        });
    }
    Err(ClusterError::CatalogMismatch {
        cluster: keys.cluster().to_string(),
        node: node.to_string(),
        differences: differences.join("; "),
    })
}

/// What differs between the sealed catalog and a node's, in a fixed order:
/// missing objects, extra objects, changed objects, the vnode count; the
/// whole fingerprint only when nothing more precise differs.
fn differences(sealed: &Stored, ours: &SealedCatalog) -> Vec<String> {
    let names = |pick: &dyn Fn(&String) -> bool, from: &BTreeMap<String, String>| {
        from.keys().filter(|n| pick(n)).cloned().collect::<Vec<_>>()
    };
    let missing = names(&|n| !ours.objects.contains_key(n), &sealed.objects);
    let extra = names(&|n| !sealed.objects.contains_key(n), &ours.objects);
    let changed = names(
        &|n| {
            ours.objects
                .get(n)
                .is_some_and(|h| sealed.objects.get(n) != Some(h))
        },
        &sealed.objects,
    );
    let mut out = Vec::new();
    for (label, list) in [("missing", missing), ("extra", extra), ("changed", changed)] {
        if !list.is_empty() {
            out.push(format!("{label}: {}", list.join(", ")));
        }
    }
    if sealed.vnode_count != ours.vnode_count.get() {
        out.push(format!(
            "vnode count {} where the cluster has {}",
            ours.vnode_count.get(),
            sealed.vnode_count
        ));
    }
    if out.is_empty() && sealed.fingerprint != ours.fingerprint {
        out.push(format!(
            "catalog fingerprint '{}' where the cluster has '{}'",
            ours.fingerprint, sealed.fingerprint
        ));
    }
    out
}
