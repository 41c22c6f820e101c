//! Checkpoint admission through the leader's commit record, as an
//! active–standby pipeline uses it: the leader owns every vnode
//! (`Placement::Leader`), a checkpoint is admitted under the generation of
//! the leader's own table, and its commit is recorded only while that
//! generation holds.

use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::assignment::{publish, Placement};
use sluice_cluster::standby::{self, Turn};
use sluice_cluster::{ClusterKeys, ClusterNode, LeaderCommitRecord, VnodeCount};
use sluice_storage::{CommitAuthority, StorageError};

use super::{etcd, eventually, part, start_placed};

const LIMIT: Duration = Duration::from_secs(10);

async fn lead(node: &ClusterNode) -> u64 {
    match tokio::time::timeout(LIMIT, standby::wait_for_turn(node))
        .await
        .expect("the node gets its turn")
        .expect("turn")
    {
        Turn::Lead { term } => term,
        other => panic!("{}: {other:?}", node.node_id()),
    }
}

async fn record(
    etcd: &sluice_cluster::testing::EtcdServer,
    cluster: &str,
    node: &str,
) -> Arc<LeaderCommitRecord> {
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new(cluster).expect("keys");
    Arc::new(LeaderCommitRecord::new(client, keys, node))
}

/// The table `node` leads with at `term`, once its driver wrote it.
async fn own_table(node: &ClusterNode, term: u64) -> u64 {
    let own = standby::wait_for_own_assignment(node, term);
    let table = tokio::time::timeout(LIMIT, own)
        .await
        .expect("in time")
        .expect("table");
    assert_eq!(table.owned_vnodes(node.node_id()).len(), 256);
    table.generation()
}

fn deadline() -> u64 {
    sluice_cluster::checkpoint::now_ms() + 60_000
}

/// The refusal's whole message chain.
fn chain(e: &StorageError) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(" / ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_admits_under_its_own_table_and_commits_only_while_it_holds() {
    let etcd = etcd().await;
    let n1 = start_placed(&etcd, "adm", "n1", Placement::Leader).await;
    let r1 = record(&etcd, "adm", "n1").await;
    // Not leading: nothing is originated or admitted.
    assert!(!r1.may_originate());
    let e = r1.admit().await.expect_err("n1 does not lead yet");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");

    let term1 = lead(&n1).await;
    r1.lead(Arc::clone(n1.election()), term1);
    assert!(r1.may_originate());
    let g1 = own_table(&n1, term1).await;
    assert_eq!(r1.admit().await.expect("admitted"), Some(g1));

    // A standby joining changes nothing: it owns no vnode.
    let n2 = start_placed(&etcd, "adm", "n2", Placement::Leader).await;
    eventually("n2 is a member", LIMIT, || n1.members().borrow().len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(n1.generation(), g1);
    assert!(n2.owned_vnodes().is_empty());
    // Not admitted at that generation: no Prepare.
    let e = r1
        .prepare(1, Some(g1 + 100), deadline())
        .await
        .expect_err("not admitted");
    assert!(
        chain(&e).contains("it was not admitted at generation"),
        "{}",
        chain(&e)
    );
    r1.prepare(1, Some(g1), deadline()).await.expect("prepared");
    r1.record_commit(1, Some(g1), &part(1))
        .await
        .expect("recorded at g1");

    // The table moves (here: rewritten by hand over both members): a
    // commit admitted at g1 is refused, however its manifest got written.
    assert_eq!(r1.admit().await.expect("admitted"), Some(g1));
    r1.prepare(2, Some(g1), deadline()).await.expect("prepared");
    let moved = publish(
        n1.election(),
        term1,
        g1,
        VnodeCount::default(),
        &["n1".into(), "n2".into()],
    )
    .await
    .expect("rewritten");
    let e = r1
        .record_commit(2, Some(g1), &part(2))
        .await
        .expect_err("g1 moved");
    assert_eq!(e.code(), "SLC-STO-008", "{}", chain(&e));
    assert!(chain(&e).contains("generation"), "{}", chain(&e));
    let recorded = r1.committed().await.expect("read").expect("some");
    assert_eq!(recorded.into_iter().collect::<Vec<_>>(), vec![1]);
    // The leader's driver puts every vnode back on it, at a new generation.
    let g2 = own_table(&n1, term1).await;
    assert!(g2 > moved.generation());
    assert_eq!(r1.admit().await.expect("admitted"), Some(g2));
    // Ids only grow: one at or below the last reserved is refused.
    let e = r1
        .prepare(2, Some(g2), deadline())
        .await
        .expect_err("id 2 is taken");
    assert_eq!(e.code(), "SLC-STO-008", "{}", chain(&e));
    assert!(
        chain(&e).contains("attempt 2 is already reserved in etcd"),
        "{}",
        chain(&e)
    );
    r1.prepare(3, Some(g2), deadline()).await.expect("prepared");
    r1.record_commit(3, Some(g2), &part(3))
        .await
        .expect("recorded at g2");

    // Deposed (its lease lapses): it originates nothing, and its admission
    // is refused once the new leader's table is written.
    n1.session().stop_keep_alive();
    let term2 = lead(&n2).await;
    eventually("n1 sees it lost", LIMIT, || !r1.may_originate()).await;
    let g3 = own_table(&n2, term2).await;
    let e = r1.admit().await.expect_err("not n1's table");
    assert_eq!(e.code(), "SLC-STO-009", "{}", chain(&e));
    let words = format!("SLC-CLU-022: node 'n1' cannot admit a checkpoint at assignment generation {g3}: the table was placed in term {term2}, not this leader's term {term1}");
    assert!(chain(&e).contains(&words), "{}", chain(&e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_shares_its_vnodes_is_refused_admission_by_name() {
    let etcd = etcd().await;
    let n1 = start_placed(&etcd, "adm2", "n1", Placement::Members).await;
    let _n2 = start_placed(&etcd, "adm2", "n2", Placement::Members).await;
    let r1 = record(&etcd, "adm2", "n1").await;
    let term = lead(&n1).await;
    r1.lead(Arc::clone(n1.election()), term);
    eventually("both members placed", LIMIT, || {
        n1.assignment()
            .ok()
            .flatten()
            .is_some_and(|a| a.members().len() == 2)
    })
    .await;
    let owned = n1.owned_vnodes().len();
    assert!(owned > 0 && owned < 256, "{owned}");
    let e = r1.admit().await.expect_err("shared vnodes");
    let g = n1.generation();
    let words = format!("SLC-CLU-022: node 'n1' cannot admit a checkpoint at assignment generation {g}: it owns {owned} of 256 vnodes; this leader runs every vnode");
    assert!(chain(&e).contains(&words), "{}", chain(&e));
}

/// A static split keeps its members across leaders, and a leader sharing
/// vnodes admits only under a table placed in its own term: a new leader
/// places the same members again, in its term, and admits under that
/// table (before, the first leader's table stayed and every admission of
/// the next leader was refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_of_a_fixed_split_places_it_again_in_its_term() {
    let etcd = etcd().await;
    let fixed = Placement::Fixed(vec!["n2".into(), "n1".into()]);
    let n1 = start_placed(&etcd, "adm3", "n1", fixed.clone()).await;
    let t1 = lead(&n1).await;
    let placed_in = |node: &ClusterNode, term: u64| {
        node.assignment()
            .ok()
            .flatten()
            .is_some_and(|a| a.term() == term && a.members() == ["n1", "n2"])
    };
    eventually("the first leader's table", LIMIT, || placed_in(&n1, t1)).await;
    let first = n1.generation();
    let n2 = start_placed(&etcd, "adm3", "n2", fixed).await;
    n1.shutdown().await.expect("n1 leaves");
    let t2 = lead(&n2).await;
    assert!(t2 > t1, "{t2} after {t1}");
    eventually("the new leader's table", LIMIT, || placed_in(&n2, t2)).await;
    let second = n2.generation();
    assert!(second > first, "{second} after {first}");
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new("adm3").expect("keys");
    let r2 = LeaderCommitRecord::new(client, keys, "n2").sharing_vnodes();
    r2.lead(Arc::clone(n2.election()), t2);
    assert_eq!(r2.admit().await.expect("admitted"), Some(second));
}
