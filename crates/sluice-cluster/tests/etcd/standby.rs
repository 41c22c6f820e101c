//! Active–standby turns and the cluster status, against a real etcd.

use std::time::Duration;

use sluice_cluster::standby::{self, Turn};
use sluice_cluster::status::{self, Finished, Progress};
use sluice_cluster::{ClusterError, ClusterKeys};

use super::{etcd, eventually, start_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_takes_its_turn_and_the_standby_sees_the_run_finished() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "sb", "n1").await;
    let n2 = start_node(&etcd, "sb", "n2").await;
    let turn = tokio::time::timeout(Duration::from_secs(5), standby::wait_for_turn(&n1))
        .await
        .expect("n1 gets its turn")
        .expect("turn");
    let Turn::Lead { term } = turn else {
        panic!("n1 started first and leads: {turn:?}")
    };
    // The standby waits while nothing happens.
    let waiting = tokio::time::timeout(Duration::from_millis(300), standby::wait_for_turn(&n2));
    assert!(waiting.await.is_err(), "n2 stands by");

    // Progress appears in the status, with the leader and vnode counts of
    // one snapshot.
    let progress = Progress {
        rows_in: 10,
        rows_out: 4,
        watermark_ms: 1_000,
        checkpoint: 3,
        at_ms: 5,
    };
    status::publish_progress(n1.session(), &progress)
        .await
        .expect("publish");
    let client = status::connect(&etcd.endpoints()).await.expect("connect");
    let keys = ClusterKeys::new("sb").expect("keys");
    eventually("an assignment over both", Duration::from_secs(5), || {
        n1.assignment()
            .ok()
            .flatten()
            .is_some_and(|a| a.members().len() == 2)
    })
    .await;
    let s = status::read(&client, &keys).await.expect("status");
    assert_eq!(s.leader, Some(("n1".to_string(), term)));
    let rows: Vec<_> = s
        .members
        .iter()
        .map(|m| (m.node.as_str(), m.leader, m.progress.clone()))
        .collect();
    assert_eq!(
        rows,
        [("n1", true, Some(progress)), ("n2", false, None)],
        "{s:?}"
    );
    assert_eq!(s.members.iter().map(|m| m.vnodes).sum::<u32>(), 256);
    assert_eq!(s.vnode_count, 256);
    assert!(s.generation > 0);
    assert_eq!(s.finished, None);

    // Only the leader of `term` may record the end, and only once.
    let finished = Finished {
        node: "n1".into(),
        term,
        rows_in: 10,
        rows_out: 4,
    };
    let forged = Finished {
        node: "n2".into(),
        ..finished.clone()
    };
    let e = standby::record_finished(n2.election(), &forged)
        .await
        .expect_err("n2 does not lead");
    assert!(matches!(e, ClusterError::NotLeader { .. }), "{e}");
    standby::record_finished(n1.election(), &finished)
        .await
        .expect("recorded");
    // Asked again (its first answer lost), the same record is success; any
    // other record of the end is refused: the run ends once.
    standby::record_finished(n1.election(), &finished)
        .await
        .expect("the same record again");
    let other = Finished {
        rows_out: 5,
        ..finished.clone()
    };
    let e = standby::record_finished(n1.election(), &other)
        .await
        .expect_err("only once");
    assert_eq!(e.code(), "SLC-CLU-021", "{e}");
    let turn = tokio::time::timeout(Duration::from_secs(5), standby::wait_for_turn(&n2))
        .await
        .expect("n2 sees the end")
        .expect("turn");
    assert_eq!(turn, Turn::Finished(finished.clone()));
    assert_eq!(
        status::read(&client, &keys).await.expect("status").finished,
        Some(finished)
    );
    // A node that leaves takes its progress report with it.
    n1.shutdown().await.expect("leave");
    let s = status::read(&client, &keys).await.expect("status");
    assert_eq!(s.members.len(), 1);
    assert!(s.members.iter().all(|m| m.progress.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_lapses_loses_its_turn() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "sl", "n1").await;
    let n2 = start_node(&etcd, "sl", "n2").await;
    let Turn::Lead { term } = standby::wait_for_turn(&n1).await.expect("turn") else {
        panic!("n1 leads")
    };
    // A paused process: it stops renewing its lease.
    n1.session().stop_keep_alive();
    tokio::time::timeout(Duration::from_secs(5), standby::lost_leadership(&n1, term))
        .await
        .expect("n1 notices by its own lease deadline");
    let turn = tokio::time::timeout(Duration::from_secs(5), standby::wait_for_turn(&n2))
        .await
        .expect("n2 takes over")
        .expect("turn");
    let Turn::Lead { term: new } = turn else {
        panic!("n2 leads: {turn:?}")
    };
    assert!(new > term);
    // The old leader's record of the end is refused by etcd.
    let e = standby::record_finished(
        n1.election(),
        &Finished {
            node: "n1".into(),
            term,
            rows_in: 0,
            rows_out: 0,
        },
    )
    .await
    .expect_err("deposed");
    assert_eq!(e.code(), "SLC-CLU-005", "{e}");
}

/// A leader-elect whose one etcd read got no answer (etcd stalled past the
/// call timeout) asks again and takes its turn; before, the node failed
/// and handed a healthy cluster's run to a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_asks_again_when_etcd_stalls_before_its_turn() {
    let etcd = etcd().await;
    let mut config =
        sluice_cluster::NodeConfig::new(etcd.endpoints(), "stall", "n1", super::standard_catalog());
    // Outlives the stall below.
    config.lease_ttl = Duration::from_secs(20);
    let n1 = sluice_cluster::ClusterNode::start(config)
        .await
        .expect("node");
    eventually("n1 leads", Duration::from_secs(5), || n1.is_leader()).await;
    let term = n1.term().expect("term");
    etcd.pause().expect("pause etcd");
    let turn = tokio::spawn(async move { (standby::wait_for_turn(&n1).await, n1) });
    tokio::time::sleep(sluice_cluster::client::CALL_TIMEOUT + Duration::from_secs(1)).await;
    etcd.resume().expect("resume etcd");
    let (turn, n1) = tokio::time::timeout(Duration::from_secs(10), turn)
        .await
        .expect("n1 gets its turn once etcd answers")
        .expect("task");
    assert_eq!(
        turn.expect("no error for one stalled read"),
        Turn::Lead { term }
    );

    // The record of the end, stalled the same way, is written once.
    let finished = Finished {
        node: "n1".into(),
        term,
        rows_in: 1,
        rows_out: 1,
    };
    etcd.pause().expect("pause etcd");
    let record = {
        let finished = finished.clone();
        tokio::spawn(async move { standby::record_finished(n1.election(), &finished).await })
    };
    tokio::time::sleep(sluice_cluster::client::CALL_TIMEOUT + Duration::from_secs(1)).await;
    etcd.resume().expect("resume etcd");
    tokio::time::timeout(Duration::from_secs(10), record)
        .await
        .expect("recorded once etcd answers")
        .expect("task")
        .expect("no error for one stalled write");
    let client = status::connect(&etcd.endpoints()).await.expect("connect");
    let keys = ClusterKeys::new("stall").expect("keys");
    assert_eq!(
        status::read_finished(&client, &keys).await.expect("read"),
        Some(finished)
    );
}
