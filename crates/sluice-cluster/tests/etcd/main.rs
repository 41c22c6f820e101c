//! Control-plane tests against a real etcd (started per test by
//! `sluice_cluster::testing::EtcdServer`; they fail if `etcd` is missing).
//! Leases are 1 s so failover tests finish in a few seconds.

mod admission;
mod assignment;
mod catalog;
mod checkpoint;
mod checkpoint_fence;
mod checkpoint_model;
mod checkpoint_roles;
mod commit_record;
mod connection;
mod election;
mod membership;
mod owners;
mod split_record;
mod standby;
mod unreachable;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_cluster::testing::EtcdServer;
use sluice_cluster::{ClusterNode, NodeConfig, SealedCatalog, VnodeCount};

/// The lease TTL of every test node.
pub const TTL: Duration = Duration::from_secs(1);

/// Start etcd or fail the test.
pub async fn etcd() -> EtcdServer {
    EtcdServer::start()
        .await
        .expect("etcd must be installed (scripts/test.sh installs etcd-server)")
}

/// A catalog with the given objects (name, hash).
pub fn catalog(objects: &[(&str, &str)]) -> SealedCatalog {
    SealedCatalog {
        fingerprint: objects
            .iter()
            .map(|(n, h)| format!("{n}={h}"))
            .collect::<Vec<_>>()
            .join(","),
        objects: objects
            .iter()
            .map(|(n, h)| (n.to_string(), h.to_string()))
            .collect::<BTreeMap<_, _>>(),
        vnode_count: VnodeCount::default(),
    }
}

/// The catalog every node of a matching cluster uses.
pub fn standard_catalog() -> SealedCatalog {
    catalog(&[("bids", "h1"), ("avg_price", "h2")])
}

/// Start node `node` of cluster `cluster` with a 1 s lease.
pub async fn start_node(etcd: &EtcdServer, cluster: &str, node: &str) -> ClusterNode {
    try_start_node(etcd, cluster, node, standard_catalog())
        .await
        .expect("node starts")
}

/// Start node `node` with a 1 s lease, placing vnodes by `placement`.
pub async fn start_placed(
    etcd: &EtcdServer,
    cluster: &str,
    node: &str,
    placement: sluice_cluster::assignment::Placement,
) -> ClusterNode {
    let mut config = NodeConfig::new(etcd.endpoints(), cluster, node, standard_catalog());
    config.lease_ttl = TTL;
    config.placement = placement;
    ClusterNode::start(config).await.expect("node starts")
}

/// A manifest reference for commit records made without a store.
pub fn part(id: u64) -> sluice_storage::BlobRef {
    sluice_storage::BlobRef {
        name: "MANIFEST".into(),
        key: format!("checkpoints/{id:020}/MANIFEST"),
        len: 1,
        crc32: 0,
    }
}

/// Start a node, returning the error.
pub async fn try_start_node(
    etcd: &EtcdServer,
    cluster: &str,
    node: &str,
    catalog: SealedCatalog,
) -> sluice_cluster::Result<ClusterNode> {
    let mut config = NodeConfig::new(etcd.endpoints(), cluster, node, catalog);
    config.lease_ttl = TTL;
    ClusterNode::start(config).await
}

/// Wait until `cond` holds (checked every 20 ms), failing after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}
