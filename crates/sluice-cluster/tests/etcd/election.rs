use std::time::{Duration, Instant};

use sluice_cluster::assignment::publish;
use sluice_cluster::{ClusterNode, VnodeCount};

use super::{etcd, eventually, start_node, TTL};

fn leaders(nodes: &[&ClusterNode]) -> Vec<String> {
    nodes
        .iter()
        .filter(|n| n.is_leader())
        .map(|n| n.node_id().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_failover_within_a_lease_period() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "el", "n1").await;
    let n2 = start_node(&etcd, "el", "n2").await;
    let n3 = start_node(&etcd, "el", "n3").await;
    let all = [&n1, &n2, &n3];
    eventually("one leader", Duration::from_secs(3), || {
        leaders(&all).len() == 1
    })
    .await;
    // n1 started first and found the key absent.
    assert_eq!(leaders(&all), ["n1"]);
    let old_term = n1.term().expect("n1 leads");
    // Followers know who leads, and under which term.
    let seen = n2.leader().borrow().clone();
    assert_eq!(seen.leader.as_deref(), Some("n1"));
    assert_eq!(seen.term, old_term);
    assert!(!seen.is_self);

    // The leader stops renewing its lease (a paused process).
    let paused = Instant::now();
    n1.session().stop_keep_alive();
    eventually("a new leader", Duration::from_secs(4), || {
        let l = leaders(&[&n2, &n3]);
        l.len() == 1
    })
    .await;
    let failover = paused.elapsed();
    // One lease period, plus etcd's expiry sweep (every 500 ms), plus slack
    // for a loaded 2-core machine.
    assert!(
        failover < TTL + Duration::from_millis(1500),
        "failover took {failover:?}"
    );
    // The old leader knows, by its own lease deadline, without etcd.
    assert!(!n1.is_leader());
    assert_eq!(n1.term(), None);
    let new = if n2.is_leader() { &n2 } else { &n3 };
    let new_term = new.term().expect("new leader");
    assert!(
        new_term > old_term,
        "terms grow: {old_term} then {new_term}"
    );
    // And the old leader's campaign has seen its key go.
    eventually("n1 saw its key deleted", Duration::from_secs(2), || {
        !n1.leader().borrow().is_self
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_guarded_write_is_refused() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "fence", "n1").await;
    eventually("n1 leads", Duration::from_secs(3), || n1.is_leader()).await;
    let n2 = start_node(&etcd, "fence", "n2").await;
    let old_term = n1.term().expect("n1 leads");
    eventually("first assignment", Duration::from_secs(3), || {
        n2.assignment()
            .expect("readable")
            .is_some_and(|a| a.members().len() == 2)
    })
    .await;
    let generation = n2.generation();

    n1.session().stop_keep_alive();
    eventually("n2 leads", Duration::from_secs(4), || n2.is_leader()).await;

    // The old leader writes as if nothing happened (its term, the current
    // generation): etcd refuses it on the term compare.
    let members = vec!["n1".to_string()];
    let err = publish(
        n1.election(),
        old_term,
        generation,
        VnodeCount::default(),
        &members,
    )
    .await
    .expect_err("deposed leader's write refused");
    assert_eq!(
        err.to_string(),
        format!("SLC-CLU-005: node 'n1' is not the leader of term {old_term} any more; its write was refused")
    );
    // The table is the new leader's, over n2 alone, and n1 owns nothing.
    eventually("n2 owns every vnode", Duration::from_secs(3), || {
        n2.owned_vnodes().len() == 256
    })
    .await;
    let table = n2.assignment().expect("readable").expect("a table");
    assert_eq!(table.members(), ["n2"]);
    assert_eq!(table.term(), n2.term().expect("n2 leads"));
    assert!(table.generation() > generation);
}
