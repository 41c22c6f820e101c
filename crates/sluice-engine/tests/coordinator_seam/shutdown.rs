//! Shutdown settlement: a final checkpoint before sinks close, aborts when it
//! fails, and discarding shutdowns.

use crate::harness::*;
use crate::scripted::*;

#[tokio::test]
async fn shutdown_settles_with_a_checkpoint_before_closing_sinks() {
    let mut h = start(|s| s.settles = true);
    h.shutdown(false).await.expect("clean shutdown");
    assert!(h.handle.status().stopped);
    h.expect_log(
        "reserve 1 | inject 1 [] | cut 1 | capture 1 flags=2 | publish 1 | \
         sinks.close | invalidate: shutdown",
    )
    .await;
}

#[tokio::test]
async fn failed_shutdown_checkpoint_aborts_sinks() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let mut h = start(|s| (s.settles, s.captures) = (true, [fail].into()));
    let e = h.shutdown(false).await.expect_err("the settlement failed");
    let want = "shutdown checkpoint did not commit: sink pre-commit failed";
    assert!(e.to_string().contains(want), "{e}");
    h.expect_log(
        "reserve 1 | inject 1 [] | cut 1 | capture 1 flags=2 | cut abort 1 | \
         checkpoint failed 1: sink pre-commit failed | sinks.abort | invalidate: shutdown",
    )
    .await;
}

#[tokio::test]
async fn failed_shutdown_checkpoint_under_exactly_once_reports_the_fault() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let mut h = start(|s| {
        (s.settles, s.captures) = (true, [fail].into());
        s.fault_on_checkpoint_failure = true;
    });
    let r = h.shutdown(false).await;
    assert_fault(r, "checkpoint 1 failed: sink pre-commit failed");
    assert_eq!(h.count("sinks.close"), 0);
    assert!(h.count("sinks.abort") >= 1);
}

#[tokio::test]
async fn discarding_shutdown_aborts_sinks_without_a_checkpoint() {
    let mut h = start(|s| s.settles = true);
    h.shutdown(true).await.expect("discarding shutdown");
    h.expect_log("sinks.abort | invalidate: shutdown").await;
}

/// A shutdown for a process that exits next settles exactly as any other,
/// then gives the operators' state up (last, once nothing else runs); a
/// plain shutdown never does, whether it settles or discards.
#[tokio::test]
async fn only_a_shutdown_for_exit_gives_the_state_up_and_only_after_settling() {
    let mut h = start(|s| s.settles = true);
    h.shutdown_for_exit(false).await.expect("clean shutdown");
    h.expect_log(
        "reserve 1 | inject 1 [] | cut 1 | capture 1 flags=2 | publish 1 | \
         sinks.close | invalidate: shutdown | forget state",
    )
    .await;

    let mut h = start(|s| s.settles = true);
    h.shutdown_for_exit(true)
        .await
        .expect("discarding shutdown");
    h.expect_log("sinks.abort | invalidate: shutdown | forget state")
        .await;

    for discard in [false, true] {
        let mut h = start(|s| s.settles = true);
        h.shutdown(discard).await.expect("shutdown");
        assert_eq!(h.count("forget state"), 0, "discard {discard}");
    }
}
