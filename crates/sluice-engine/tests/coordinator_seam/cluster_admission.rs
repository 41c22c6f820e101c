//! The cluster half of checkpoint admission, call by call: only a leader
//! originates an attempt; the assignment and the Prepare come after the
//! reservation and before any barrier; a refusal of either abandons the
//! attempt (its id stays burned) without injecting a barrier; and the
//! admitted fence reaches capture.

use std::time::Duration;

use crate::harness::*;

#[tokio::test]
async fn a_node_that_does_not_lead_starts_no_checkpoint() {
    let h = start(|s| s.not_leader = true);
    let refused = "this node is not the cluster leader: only the leader starts checkpoints";
    assert_eq!(checkpoint_err(h.checkpoint(async {}).await), refused);
    h.expect_log(&format!("admission failure: checkpoint failed: {refused}"))
        .await;
}

#[tokio::test]
async fn periodic_checkpoints_start_only_while_this_node_leads() {
    let h = start(|s| {
        s.not_leader = true;
        s.interval = Some(Duration::from_millis(5));
    });
    h.send(vec![batch("A", 1)]).await;
    h.wait_for("cycle wm=1 A=[1]").await;
    // Many ticks pass with a change to capture: none reserves.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.count("reserve"), 0, "{:?}", h.log());
    assert_eq!(h.count("admission failure"), 0, "{:?}", h.log());
    // Leading, the next tick checkpoints what changed.
    h.script.lock().unwrap().not_leader = false;
    h.wait_for("capture 1 flags=0").await;
}

#[tokio::test]
async fn the_admitted_fence_is_prepared_before_barriers_and_reaches_capture() {
    let h = start(|s| s.admission = Some(Ok(7)));
    let report = h.checkpoint(async {}).await.expect("committed");
    assert_eq!(report.id, 1);
    h.expect_log(
        "reserve 1 | admit g7 | prepare 1 flags=1 g7 | inject 1 [] | cut 1 | \
         capture 1 flags=1 g7 | publish 1",
    )
    .await;
}

#[tokio::test]
async fn a_refused_admission_abandons_the_attempt_before_any_barrier() {
    let h = start(|s| s.admission = Some(Err("generation 9 is not this leader's".into())));
    let want = "admitting the checkpoint: generation 9 is not this leader's";
    assert_eq!(checkpoint_err(h.checkpoint(async {}).await), want);
    h.expect_log(&format!(
        "reserve 1 | admission refused: generation 9 is not this leader's | \
         cancel 1: {want} | abandon 1 flags=1: {want}"
    ))
    .await;
    // The id stays burned: the next attempt reserves a new one.
    h.script.lock().unwrap().admission = Some(Ok(9));
    assert_eq!(h.checkpoint(async {}).await.expect("committed").id, 2);
}

#[tokio::test]
async fn a_failed_prepare_abandons_the_fenced_attempt_before_any_barrier() {
    let h = start(|s| {
        s.admission = Some(Ok(4));
        s.fail_prepare = Some("etcd did not answer".into());
    });
    let want = "publishing the checkpoint prepare: etcd did not answer";
    assert_eq!(checkpoint_err(h.checkpoint(async {}).await), want);
    h.expect_log(&format!(
        "reserve 1 | admit g4 | prepare 1 failed: etcd did not answer | \
         cancel 1: {want} | abandon 1 flags=1 g4: {want}"
    ))
    .await;
}
