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
    let n2 = node(&etcd, "n2").await;
    eventually("both nodes own vnodes", || {
        !n2.owned_vnodes().is_empty()
            && n1
                .assignment()
                .ok()
                .flatten()
                .is_some_and(|a| a.members().len() == 2 && a.term() == term)
    })
    .await;
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .unwrap();
    let keys = ClusterKeys::new("owners").unwrap();
    let leader = Arc::new(LeaderCommitRecord::new(client, keys, "n1").sharing_vnodes());
    leader.lead(Arc::clone(n1.election()), term);
    (etcd, n1, n2, leader)
}

pub fn follower_of(n2: &ClusterNode) -> Arc<dyn CommitAuthority> {
    Arc::new(FollowerCommitRecord::new(Arc::clone(n2.session())))
}

/// The ids of a node's committed checkpoints.
pub async fn ids(db: &Database) -> Vec<u64> {
    let list = db.checkpoints().await.unwrap();
    list.iter().map(|c| c.id).collect()
}
