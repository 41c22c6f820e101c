use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::membership::{live_members, Membership};
use sluice_cluster::Session;

use super::{etcd, eventually, TTL};

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn session(endpoints: &[String], node: &str) -> Arc<Session> {
    Arc::new(
        Session::connect(endpoints, "m1", node, TTL)
            .await
            .expect("session"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_leave_and_expire() {
    let etcd = etcd().await;
    let eps = etcd.endpoints();
    let (a, b, c) = (
        session(&eps, "a").await,
        session(&eps, "b").await,
        session(&eps, "c").await,
    );
    let _ma = Membership::join(Arc::clone(&a)).await.expect("a joins");
    let view = live_members(&a);
    eventually("a alone", Duration::from_secs(2), || {
        *view.borrow() == set(&["a"])
    })
    .await;
    let mb = Membership::join(Arc::clone(&b)).await.expect("b joins");
    let _mc = Membership::join(Arc::clone(&c)).await.expect("c joins");
    eventually("a, b, c", Duration::from_secs(2), || {
        *view.borrow() == set(&["a", "b", "c"])
    })
    .await;

    // b leaves cleanly: gone at once, not one TTL later.
    mb.leave().await.expect("b leaves");
    let left = eventually("b gone", Duration::from_secs(2), || {
        *view.borrow() == set(&["a", "c"])
    })
    .await;
    assert!(left < TTL, "a clean leave took {left:?}");

    // c stops renewing (a paused process): its key expires with its lease.
    c.stop_keep_alive();
    let expired = eventually("c expired", Duration::from_secs(4), || {
        *view.borrow() == set(&["a"])
    })
    .await;
    assert!(
        expired >= TTL / 2,
        "c vanished before its lease could expire ({expired:?})"
    );
    eventually("c knows", Duration::from_secs(2), || !c.lease_valid()).await;
    assert!(a.lease_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_duplicate_node_id_is_refused() {
    let etcd = etcd().await;
    let eps = etcd.endpoints();
    let first = session(&eps, "n1").await;
    let _m = Membership::join(Arc::clone(&first))
        .await
        .expect("first joins");
    let second = session(&eps, "n1").await;
    let err = Membership::join(Arc::clone(&second))
        .await
        .expect_err("duplicate refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-003: node id 'n1' is already live in cluster 'm1'; \
         stop the other node or choose another --node-id"
    );
    // Once the first one is gone, the id is free again.
    first.close().await.expect("close");
    Membership::join(second)
        .await
        .expect("rejoin after the first left");
}
