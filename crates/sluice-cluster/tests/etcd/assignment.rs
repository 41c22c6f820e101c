use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::assignment::publish;
use sluice_cluster::{ClusterNode, Election, Session, VnodeCount};

use super::{etcd, eventually, start_node, TTL};

fn owners(node: &ClusterNode) -> Vec<String> {
    let table = node.assignment().expect("readable").expect("a table");
    (0..table.vnode_count())
        .map(|v| table.owner_of(v).expect("owned").to_string())
        .collect()
}

fn members_are(node: &ClusterNode, want: &[&str]) -> bool {
    node.assignment()
        .expect("readable")
        .is_some_and(|a| a.members() == want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_move_only_the_needed_vnodes() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "asg", "n1").await;
    eventually("n1 leads", Duration::from_secs(3), || n1.is_leader()).await;
    let n2 = start_node(&etcd, "asg", "n2").await;
    eventually("table over n1, n2", Duration::from_secs(3), || {
        members_are(&n1, &["n1", "n2"]) && members_are(&n2, &["n1", "n2"])
    })
    .await;
    let g2 = n2.generation();
    let before = owners(&n2);
    // Both nodes see the same table; together they own every vnode once.
    assert_eq!(n1.generation(), g2);
    assert_eq!(n1.owned_vnodes().len() + n2.owned_vnodes().len(), 256);

    // A third node takes a share; nothing moves between n1 and n2.
    let n3 = start_node(&etcd, "asg", "n3").await;
    eventually("table over n1..n3", Duration::from_secs(3), || {
        members_are(&n3, &["n1", "n2", "n3"])
    })
    .await;
    let g3 = n3.generation();
    assert!(g3 > g2, "generation grows: {g2} then {g3}");
    let after = owners(&n3);
    let moved: Vec<usize> = (0..256).filter(|&v| before[v] != after[v]).collect();
    assert!(!moved.is_empty());
    assert!(moved.iter().all(|&v| after[v] == "n3"), "only moves to n3");
    assert_eq!(moved.len(), n3.owned_vnodes().len());

    // n2 leaves: only its vnodes move.
    n2.shutdown().await.expect("n2 leaves");
    eventually("table over n1, n3", Duration::from_secs(3), || {
        members_are(&n3, &["n1", "n3"])
    })
    .await;
    let g4 = n3.generation();
    assert!(g4 > g3);
    let last = owners(&n3);
    for v in 0..256 {
        if after[v] == "n2" {
            assert_ne!(last[v], "n2");
        } else {
            assert_eq!(last[v], after[v], "vnode {v} moved though its owner stayed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_generation_write_is_refused() {
    // An election without a driver, so no automatic write races ours.
    let etcd = etcd().await;
    let session = Arc::new(
        Session::connect(&etcd.endpoints(), "gen", "n1", TTL)
            .await
            .expect("session"),
    );
    let election = Election::start(session);
    eventually("n1 leads", Duration::from_secs(3), || election.is_leader()).await;
    let term = election.term().expect("n1 leads");
    let members = vec!["n1".to_string(), "n2".to_string()];
    let count = VnodeCount::default();
    // The first table must expect no table (generation 0).
    let first = publish(&election, term, 0, count, &members)
        .await
        .expect("first table");
    let g1 = first.generation();
    assert!(g1 > term, "the table was written after the term began");
    // A write based on the current generation succeeds and advances it.
    let second = publish(&election, term, g1, count, &members)
        .await
        .expect("current generation accepted");
    let g2 = second.generation();
    assert!(g2 > g1);
    // The same write based on the old generation is refused, naming both.
    let err = publish(&election, term, g1, count, &members)
        .await
        .expect_err("stale generation refused");
    assert_eq!(
        err.to_string(),
        format!(
            "SLC-CLU-006: assignment write by node 'n1' expected generation {g1} but the \
             table is at generation {g2}"
        )
    );
    // And "no table yet" is stale too once a table exists.
    let err = publish(&election, term, 0, count, &members)
        .await
        .expect_err("absent-table write refused");
    assert_eq!(
        err.to_string(),
        format!(
            "SLC-CLU-006: assignment write by node 'n1' expected generation 0 but the \
             table is at generation {g2}"
        )
    );
}
