//! Two pipelines whose vnodes are split between two nodes, through a real
//! etcd: n1 leads with the leader's checkpoint record sharing vnodes, n2
//! follows with a follower record (the `cluster_owners` and
//! `cluster_shuffle` tests).

use std::sync::Arc;
use std::time::Duration;

use sluice::{CommitAuthority, Database};
use sluice_cluster::assignment::Placement;
use sluice_cluster::standby::{self, Turn};
use sluice_cluster::testing::EtcdServer;
use sluice_cluster::{
    ClusterKeys, ClusterNode, FollowerCommitRecord, LeaderCommitRecord, NodeConfig, SealedCatalog,
};

pub const LIMIT: Duration = Duration::from_secs(20);

pub async fn node(etcd: &EtcdServer, id: &str) -> ClusterNode {
    let catalog = SealedCatalog {
        fingerprint: "s,out".into(),
        objects: Default::default(),
        vnode_count: Default::default(),
    };
    let mut config = NodeConfig::new(etcd.endpoints(), "owners", id, catalog);
    config.lease_ttl = Duration::from_secs(1);
    config.placement = Placement::Members;
    ClusterNode::start(config).await.expect("node starts")
}

pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + LIMIT;
    while !cond() {
        assert!(std::time::Instant::now() < until, "never {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two nodes over Members placement with n1 leading: (etcd, n1, n2, the
/// leader's record). Each test starts its own etcd.
pub async fn two_nodes() -> (
    EtcdServer,
    ClusterNode,
    ClusterNode,
    Arc<LeaderCommitRecord>,
) {
    let (etcd, mut nodes, leader) = nodes(2).await;
    let n2 = nodes.pop().expect("two nodes");
    let n1 = nodes.pop().expect("two nodes");
    (etcd, n1, n2, leader)
}

/// `count` nodes (n1, n2, ...) over Members placement with n1 leading:
/// (etcd, the nodes, the leader's record), once every node owns vnodes.
pub async fn nodes(count: usize) -> (EtcdServer, Vec<ClusterNode>, Arc<LeaderCommitRecord>) {
    let etcd = EtcdServer::start().await.expect("etcd");
    let n1 = node(&etcd, "n1").await;
    let term = match tokio::time::timeout(LIMIT, standby::wait_for_turn(&n1))
        .await
        .expect("in time")
        .expect("turn")
    {
        Turn::Lead { term } => term,
        other => panic!("{other:?}"),
    };
    let mut nodes = vec![n1];
    for i in 2..=count {
        nodes.push(node(&etcd, &format!("n{i}")).await);
    }
    eventually("every node owns vnodes", || {
        nodes.iter().all(|n| !n.owned_vnodes().is_empty())
            && nodes[0]
                .assignment()
                .ok()
                .flatten()
                .is_some_and(|a| a.members().len() == count && a.term() == term)
    })
    .await;
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .unwrap();
    let keys = ClusterKeys::new("owners").unwrap();
    let leader = Arc::new(LeaderCommitRecord::new(client, keys, "n1").sharing_vnodes());
    leader.lead(Arc::clone(nodes[0].election()), term);
    (etcd, nodes, leader)
}

/// A new leader's record for `n1` (which leads), as a restarted leader
/// process makes one: it leads in `n1`'s term and aborts every attempt an
/// earlier record of it left undecided.
pub async fn fresh_leader(etcd: &EtcdServer, n1: &ClusterNode) -> Arc<LeaderCommitRecord> {
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .unwrap();
    let keys = ClusterKeys::new("owners").unwrap();
    let leader = Arc::new(LeaderCommitRecord::new(client, keys, "n1").sharing_vnodes());
    let term = n1.term().expect("n1 leads");
    leader.lead(Arc::clone(n1.election()), term);
    leader.take_over().await.expect("orphans aborted");
    leader
}

pub fn follower_of(n2: &ClusterNode) -> Arc<dyn CommitAuthority> {
    Arc::new(FollowerCommitRecord::new(Arc::clone(n2.session())))
}

/// The ids of a node's committed checkpoints.
pub async fn ids(db: &Database) -> Vec<u64> {
    let list = db.checkpoints().await.unwrap();
    list.iter().map(|c| c.id).collect()
}
