//! Checkpoints that fail after alignment: sink pre-commit, commit after a
//! durable manifest, publication, and the subscription cut.

use sluice_engine::sources::SourceMessage;

use crate::harness::*;
use crate::scripted::*;

/// Over pending sources A and B: A's barrier, A's batch 9 (held), B's barrier.
fn held_feed() -> Vec<SourceMessage> {
    vec![
        barrier("A", 1, "a@1"),
        batch("A", 9),
        barrier("B", 1, "b@1"),
    ]
}

#[tokio::test]
async fn sink_precommit_failure_faults_under_exactly_once() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let h = start_ab(|s| (s.captures, s.fault_on_checkpoint_failure) = ([fail].into(), true));
    let r = h.checkpoint(h.answer("inject 1 [A,B]", held_feed())).await;
    assert_eq!(checkpoint_err(r), "sink pre-commit failed");
    let fault = "checkpoint 1 failed: sink pre-commit failed";
    assert_fault(h.finished().await, fault);
    assert!(h.handle.status().halted.is_none());
    // Intake stopped, and the held batch 9 never ran.
    assert!(h.tx.send(batch("A", 10)).await.is_err());
    h.expect_log(&format!(
        "reserve 1 | inject 1 [A,B] | cut 1 | capture 1 flags=1 A=a@1 B=b@1 | \
         cut abort 1 | checkpoint failed 1: sink pre-commit failed | \
         invalidate: {fault} | sinks.abort"
    ))
    .await;
}

#[tokio::test]
async fn sink_precommit_failure_without_fault_replays_held_input() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let h = start_ab(|s| s.captures = [fail].into());
    let r = h.checkpoint(h.answer("inject 1 [A,B]", held_feed())).await;
    assert!(r.is_err());
    h.wait_for("cycle wm=9 A=[9]").await;
    assert_eq!(
        h.only(&["capture", "checkpoint failed", "cycle", "sinks.abort"]),
        "capture 1 flags=1 A=a@1 B=b@1 | checkpoint failed 1: sink pre-commit failed | \
         cycle wm=9 A=[9]"
    );
    let st = h.handle.status();
    assert!(st.halted.is_none() && st.fault.is_none());
}

#[tokio::test]
async fn commit_failure_after_durable_manifest_faults() {
    let cont = Capture::ContinuationFault("committing sink out".into());
    let h = start_ab(|s| s.captures = [cont].into());
    let report = h.checkpoint(h.answer("inject 1 [A,B]", held_feed())).await;
    assert_eq!(report.expect("durable").id, 1);
    let fault = "after checkpoint 1 became durable: committing sink out";
    assert_fault(h.finished().await, fault);
    assert!(h.handle.status().halted.is_none());
    assert!(h.tx.send(batch("A", 10)).await.is_err());
    h.expect_log(&format!(
        "reserve 1 | inject 1 [A,B] | cut 1 | capture 1 flags=1 A=a@1 B=b@1 | \
         continuation fault 1: committing sink out | publish 1 | \
         fault: {fault} | invalidate: {fault} | sinks.abort"
    ))
    .await;
}

#[tokio::test]
async fn publication_failure_after_commit_is_a_continuation_fault() {
    let h = start(|s| s.fail_publish = Some("subscriber log gone".into()));
    // The caller is told the fault the failed publication caused.
    let fault = "after checkpoint 1 became durable: subscriber log gone";
    assert_eq!(checkpoint_err(h.checkpoint(async {}).await), fault);
    assert_fault(h.finished().await, fault);
    // Durable: no failure is recorded and the cut is not aborted.
    h.expect_log(&format!(
        "reserve 1 | inject 1 [] | cut 1 | capture 1 flags=1 | publish 1 | \
         continuation fault 1: subscriber log gone | \
         fault: {fault} | invalidate: {fault} | sinks.abort"
    ))
    .await;
}

#[tokio::test]
async fn subscription_cut_failure_fails_the_checkpoint_before_capture() {
    let h = start(|s| s.fail_cut = Some("log full".into()));
    let want = "cutting subscription logs: log full";
    assert_eq!(checkpoint_err(h.checkpoint(async {}).await), want);
    h.send(vec![batch("A", 1)]).await;
    h.expect_log(&format!(
        "reserve 1 | inject 1 [] | cut 1 | cut abort 1 | \
         checkpoint failed 1: {want} | cycle wm=1 A=[1] | sinks.write"
    ))
    .await;
}
