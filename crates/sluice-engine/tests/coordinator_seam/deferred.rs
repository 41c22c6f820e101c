//! Deferred input (`has_runnable_deferred_input`): what a process function
//! held for a checkpoint's commit runs in cycles without source input, only
//! once the pipeline started and while intake runs, and a clean shutdown
//! runs what its last checkpoint released before the sinks close.

use std::time::Duration;

use sluice_engine::coordinator::ControlMsg;

use crate::harness::*;
use crate::scripted::Capture;

/// Nothing deferred runs before `Start` (a recovered checkpoint may still
/// replace the state, and the sinks are not open); then each runnable
/// piece runs in a cycle of its own, with no source input.
#[tokio::test]
async fn deferred_input_runs_without_source_input_only_once_started() {
    let h = start(|s| (s.start_by_control, s.deferred) = (true, 2));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.count("cycle"), 0, "{:?}", h.log());
    bounded(h.handle.control(ControlMsg::Start))
        .await
        .expect("started");
    h.expect_log("control start | cycle wm=0 | sinks.write | cycle wm=0 | sinks.write")
        .await;
}

/// While intake is fenced, deferred input waits like source input; it
/// runs at the loop's next step once the fence is down.
#[tokio::test]
async fn deferred_input_waits_while_intake_is_paused() {
    let h = start(|s| (s.intake_paused, s.deferred) = (true, 1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.count("cycle"), 0, "{:?}", h.log());
    h.script.lock().unwrap().intake_paused = false;
    // A control message wakes the loop (a paused step waits for no input).
    bounded(h.handle.control(ControlMsg::Drop("nothing".into())))
        .await
        .expect("applied");
    h.expect_log("control ddl | cycle wm=0 | sinks.write").await;
}

/// The shutdown checkpoint's commit releases the last held input: it runs,
/// and its output is written, before the sinks close.
#[tokio::test]
async fn a_clean_shutdown_runs_what_its_checkpoint_released_before_closing() {
    let mut h = start(|s| (s.settles, s.released_by_commit) = (true, 1));
    h.shutdown(false).await.expect("clean shutdown");
    h.expect_log(
        "reserve 1 | inject 1 [] | cut 1 | capture 1 flags=2 | publish 1 | cycle wm=0 | \
         sinks.write | sinks.close | invalidate: shutdown",
    )
    .await;
}

/// A discarding shutdown runs nothing more.
#[tokio::test]
async fn a_discarding_shutdown_leaves_deferred_input() {
    let mut h = start(|s| (s.settles, s.deferred) = (true, 0));
    h.script.lock().unwrap().released_by_commit = 1;
    h.shutdown(true).await.expect("discarding shutdown");
    h.expect_log("sinks.abort | invalidate: shutdown").await;
}

/// Input held for a commit makes a periodic checkpoint due though no cycle
/// ran since the last one (a failed one is taken again); once the input ran
/// and nothing is held, the ticks take none.
#[tokio::test]
async fn held_input_makes_a_periodic_checkpoint_due_without_new_cycles() {
    let h = start(|s| {
        s.interval = Some(Duration::from_millis(50));
        s.released_by_commit = 1;
        s.captures.push_back(Capture::Fail("disk full".into()));
    });
    h.wait_for("publish 2").await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    h.expect_log(
        "reserve 1 | inject 1 [] | cut 1 | capture 1 flags=0 | cut abort 1 | \
         checkpoint failed 1: disk full | \
         reserve 2 | inject 2 [] | cut 2 | capture 2 flags=0 | publish 2 | \
         cycle wm=0 | sinks.write | \
         reserve 3 | inject 3 [] | cut 3 | capture 3 flags=0 | publish 3",
    )
    .await;
}

/// While process functions hold their budget of input for a commit, no
/// source input is taken, but the periodic checkpoint whose commit releases
/// the held input runs, and so does the input it released; source input
/// runs once the budget has room again.
#[tokio::test]
async fn a_full_held_input_budget_stops_only_source_intake() {
    let h = start(|s| {
        s.held_full = true;
        s.interval = Some(Duration::from_millis(50));
        s.released_by_commit = 1;
    });
    h.send(vec![batch("A", 7)]).await;
    h.wait_for("publish 2").await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        h.only(&["publish", "cycle"]),
        "publish 1 | cycle wm=0 | publish 2",
        "the released input ran (and made a checkpoint due), the source batch waits"
    );
    h.script.lock().unwrap().held_full = false;
    h.wait_for("cycle wm=7 A=[7]").await;
    assert!(h
        .only(&["publish", "cycle"])
        .starts_with("publish 1 | cycle wm=0 | publish 2 | cycle wm=7 A=[7]"));
}

/// Work held back by a full output (here: the output a vnode transition
/// carried to the next cycle) runs before a checkpoint captures, never
/// after: the snapshot does not hold it, so a crash before the next
/// checkpoint would lose it.
#[tokio::test]
async fn held_back_work_runs_before_a_checkpoint_captures() {
    let h = start(|s| (s.output_full, s.deferred) = (true, 1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.count("cycle"), 0, "{:?}", h.log());
    h.checkpoint(async {}).await.expect("committed");
    assert_eq!(
        h.log().join(" | "),
        "reserve 1 | inject 1 [] | cycle wm=0 | sinks.write | cut 1 | capture 1 flags=1 | \
         publish 1"
    );
}
