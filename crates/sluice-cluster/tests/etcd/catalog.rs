use sluice_cluster::catalog_seal::SealOutcome;
use sluice_cluster::VnodeCount;

use super::{catalog, etcd, standard_catalog, start_node, try_start_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_node_seals_and_others_must_match() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "cat", "n1").await;
    assert_eq!(n1.seal(), &SealOutcome::Sealed);
    let n2 = start_node(&etcd, "cat", "n2").await;
    assert_eq!(
        n2.seal(),
        &SealOutcome::Matched {
            sealed_by: "n1".to_string()
        }
    );

    // Sealed: bids=h1, avg_price=h2. n3 lacks bids, changes avg_price and
    // adds asks.
    let other = catalog(&[("avg_price", "h9"), ("asks", "h3")]);
    let err = try_start_node(&etcd, "cat", "n3", other)
        .await
        .expect_err("different catalog refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-004: node 'n3' is refused by cluster 'cat': its catalog differs from the \
         sealed catalog (missing: bids; extra: asks; changed: avg_price)"
    );

    // Same objects, another vnode count: refused too.
    let mut resized = standard_catalog();
    resized.vnode_count = VnodeCount::new(128).expect("count");
    let err = try_start_node(&etcd, "cat", "n4", resized)
        .await
        .expect_err("vnode count refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-004: node 'n4' is refused by cluster 'cat': its catalog differs from the \
         sealed catalog (vnode count 128 where the cluster has 256)"
    );

    // Same objects but another overall fingerprint (e.g. a changed option).
    let mut refingered = standard_catalog();
    refingered.fingerprint = "v2".to_string();
    let err = try_start_node(&etcd, "cat", "n5", refingered)
        .await
        .expect_err("fingerprint refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-004: node 'n5' is refused by cluster 'cat': its catalog differs from the \
         sealed catalog (catalog fingerprint 'v2' where the cluster has \
         'bids=h1,avg_price=h2')"
    );

    // A refused node never became a member.
    let members = n1.members();
    super::eventually("n1, n2", std::time::Duration::from_secs(2), || {
        members.borrow().iter().cloned().collect::<Vec<_>>() == ["n1", "n2"]
    })
    .await;
}
