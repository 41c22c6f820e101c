//! A follower's part in the leader's checkpoints, call by call: it never
//! reserves, admits or prepares; a Prepare the callback admitted is
//! aligned and captured under the leader's id and fence; given up before
//! capture it is nacked (`cancel`), never abandoned; an abort the leader
//! decided first only resolves local state; nothing is followed while this
//! node leads or while every tail slot is taken.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::harness::*;
use crate::scripted::{Capture, Control, Script};

/// A follower over sources A and B, woken by the returned notify.
fn follower(setup: impl FnOnce(&mut Script)) -> (Harness, Arc<Notify>) {
    let notify = Arc::new(Notify::new());
    let wake = Arc::clone(&notify);
    let h = start_ab(|s| {
        s.not_leader = true;
        s.control_wake = Some(wake);
        setup(s)
    });
    (h, notify)
}

#[tokio::test]
async fn a_follower_aligns_and_captures_the_leaders_attempt_under_its_fence() {
    let long = Duration::from_secs(10);
    let (h, wake) = follower(|s| s.control = [Control::Started(7, Some(3), long, 0)].into());
    wake.notify_one();
    h.answer(
        "inject 7 [A,B]",
        vec![barrier("A", 7, "a@7"), barrier("B", 7, "b@7")],
    )
    .await;
    h.expect_log(
        "control: started 7 flags=0 g3 | inject 7 [A,B] | cut 7 | \
         capture 7 flags=0 g3 A=a@7 B=b@7 | publish 7",
    )
    .await;
}

#[tokio::test]
async fn a_followed_attempt_given_up_at_the_leaders_deadline_is_nacked_not_abandoned() {
    // The leader waits 200 ms for this node's answer: alignment ends then,
    // well before the node's own alignment timeout.
    let within = Duration::from_millis(200);
    let (h, wake) = follower(|s| s.control = [Control::Started(5, Some(2), within, 1)].into());
    let started = Instant::now();
    wake.notify_one();
    h.answer(
        "inject 5 [A,B]",
        vec![barrier("A", 5, "a@5"), batch("A", 2)],
    )
    .await;
    let why = "alignment timed out waiting for the barrier of B";
    // A's input after its barrier waited, and runs once the attempt is off.
    h.expect_log(&format!(
        "control: started 5 flags=1 g2 | inject 5 [A,B] | cancel 5: {why} | \
         cycle wm=2 A=[2] | sinks.write"
    ))
    .await;
    assert!(started.elapsed() >= within);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_abort_announced_before_capture_only_resolves_local_state() {
    let (h, wake) = follower(|s| s.control = [Control::Aborted(4)].into());
    wake.notify_one();
    h.wait_for("resolve abort 4").await;
    h.send(vec![batch("A", 1)]).await;
    h.expect_log("control: aborted 4 | resolve abort 4 | cycle wm=1 A=[1] | sinks.write")
        .await;
}

#[tokio::test]
async fn a_capture_the_leader_aborted_resolves_local_state_and_gives_back_the_cut() {
    let long = Duration::from_secs(10);
    let (h, wake) = follower(|s| {
        s.pending = vec![];
        s.control = [Control::Started(6, Some(1), long, 0)].into();
        s.captures = [Capture::Aborted("the leader decided abort".into())].into();
    });
    wake.notify_one();
    h.expect_log(
        "control: started 6 flags=0 g1 | inject 6 [] | cut 6 | capture 6 flags=0 g1 | \
         resolve abort 6 | cut abort 6",
    )
    .await;
}

#[tokio::test]
async fn local_state_that_cannot_be_resolved_after_an_abort_faults_for_recovery() {
    let (h, wake) = follower(|s| {
        s.control = [Control::Aborted(4)].into();
        s.fail_resolve = Some("the staged part is unreadable".into());
    });
    wake.notify_one();
    let fault = "resolving aborted checkpoint 4: the staged part is unreadable";
    assert_fault(h.finished().await, fault);
    assert_eq!(h.count("sinks.abort"), 1, "{:?}", h.log());
}

#[tokio::test]
async fn failures_are_recorded_and_the_pipeline_runs_on() {
    let (h, wake) = follower(|s| {
        s.control = [
            Control::AdmissionFailed("etcd did not answer".into()),
            Control::Failed(9, "vnode 3 is not owned here".into()),
        ]
        .into()
    });
    wake.notify_one();
    h.wait_for("control: failed 9: vnode 3 is not owned here")
        .await;
    h.send(vec![batch("B", 3)]).await;
    h.expect_log(
        "control: admission failed: etcd did not answer | \
         admission failure: following the leader's checkpoint: etcd did not answer | \
         control: failed 9: vnode 3 is not owned here | \
         checkpoint failed 9: following the leader's checkpoint: vnode 3 is not owned here | \
         cycle wm=3 B=[3] | sinks.write",
    )
    .await;
}

#[tokio::test]
async fn nothing_is_followed_while_this_node_leads_or_every_tail_slot_is_taken() {
    let long = Duration::from_secs(10);
    let (h, wake) = follower(|s| {
        s.not_leader = false;
        s.pending = vec![];
        s.control = [Control::Started(2, None, long, 0)].into();
    });
    // Leading: woken (and past several fallbacks), it asks nothing.
    wake.notify_one();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.log(), Vec::<String>::new());
    // Following, with the tail slot taken: still nothing.
    {
        let mut s = h.script.lock().unwrap();
        s.not_leader = true;
        s.tails_in_flight = 1;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.log(), Vec::<String>::new());
    // A free slot: the fallback alone (no notification) brings the attempt.
    h.script.lock().unwrap().tails_in_flight = 0;
    h.expect_log(
        "control: started 2 flags=0 | inject 2 [] | cut 2 | capture 2 flags=0 | publish 2",
    )
    .await;
}

#[tokio::test]
async fn one_wake_serves_every_announcement_queued_behind_it() {
    let (h, wake) = follower(|s| {
        // No fallback within the test: only the one notification.
        s.control_fallback = Some(Duration::from_secs(3600));
        s.control = [Control::Aborted(4), Control::Aborted(5)].into();
    });
    wake.notify_one();
    h.expect_log("control: aborted 4 | resolve abort 4 | control: aborted 5 | resolve abort 5")
        .await;
}

#[tokio::test]
async fn the_fallback_asks_on_schedule_under_steady_input() {
    let (h, _wake) = follower(|s| s.control = [Control::Aborted(3)].into());
    // Input every 10 ms, more often than the 50 ms fallback: never
    // notified, the announcement is still served within a few periods.
    let started = Instant::now();
    let mut v = 1;
    while h.count("resolve abort 3") == 0 {
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", h.log());
        h.send(vec![batch("A", v)]).await;
        v += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_followed_attempt_that_fails_before_its_tail_is_nacked_at_once() {
    let long = Duration::from_secs(10);
    let (h, wake) = follower(|s| {
        s.pending = vec![];
        s.control = [Control::Started(6, Some(2), long, 0)].into();
        s.captures = [Capture::Fail("sink pre-commit failed".into())].into();
    });
    wake.notify_one();
    h.expect_log(
        "control: started 6 flags=0 g2 | inject 6 [] | cut 6 | capture 6 flags=0 g2 | \
         cancel 6: sink pre-commit failed | cut abort 6 | \
         checkpoint failed 6: sink pre-commit failed",
    )
    .await;
}

#[tokio::test]
async fn a_follower_out_of_the_cluster_takes_no_part() {
    let long = Duration::from_secs(10);
    let (h, wake) = follower(|s| {
        s.intake_paused = true;
        s.control = [Control::Started(2, None, long, 0)].into();
    });
    wake.notify_one();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.log(), Vec::<String>::new());
    // Back in: the attempt is asked for (by the fallback) and followed.
    h.script.lock().unwrap().intake_paused = false;
    h.wait_for("control: started 2 flags=0").await;
}

#[tokio::test]
async fn a_follower_shuts_down_without_a_checkpoint_of_its_own() {
    let (mut h, _wake) = follower(|s| s.settles = true);
    h.send(vec![batch("A", 1)]).await;
    h.wait_for("cycle wm=1 A=[1]").await;
    h.shutdown(false).await.expect("nothing unsettled");
    assert_eq!(h.count("reserve"), 0, "{:?}", h.log());
    assert_eq!(h.count("admission failure"), 0, "{:?}", h.log());
    assert_eq!(h.count("sinks.close"), 1, "{:?}", h.log());
}

#[tokio::test]
async fn a_follower_with_output_after_the_last_checkpoint_says_it_is_not_published() {
    let (mut h, _wake) = follower(|s| {
        s.settles = true;
        s.unsettled = Some("sinks with unsettled epochs: out".into());
    });
    let e = h.shutdown(false).await.expect_err("unsettled output");
    let text = e.to_string();
    assert!(
        text.contains("this node follows the cluster leader"),
        "{text}"
    );
    assert!(text.contains("sinks with unsettled epochs: out"), "{text}");
    assert_eq!(h.count("reserve"), 0, "{:?}", h.log());
    assert_eq!(h.count("sinks.abort"), 1, "{:?}", h.log());
    assert_eq!(h.count("sinks.close"), 0, "{:?}", h.log());
}

#[tokio::test]
async fn a_failed_announcement_read_waits_for_the_fallback_instead_of_spinning() {
    let (h, wake) = follower(|s| {
        s.control_fallback = Some(Duration::from_secs(3600));
        s.control = [
            Control::AdmissionFailed("etcd did not answer".into()),
            Control::Aborted(2),
        ]
        .into();
    });
    wake.notify_one();
    h.wait_for("control: admission failed: etcd did not answer")
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.count("control: aborted 2"), 0, "{:?}", h.log());
    // The next wake asks again.
    wake.notify_one();
    h.wait_for("resolve abort 2").await;
}

#[tokio::test]
async fn a_follower_whose_intake_pauses_mid_alignment_gives_the_attempt_up() {
    let long = Duration::from_secs(10);
    let (h, wake) = follower(|s| s.control = [Control::Started(5, Some(1), long, 0)].into());
    wake.notify_one();
    h.wait_for("inject 5 [A,B]").await;
    h.script.lock().unwrap().intake_paused = true;
    h.send(vec![batch("A", 1)]).await;
    h.wait_for("cancel 5: intake paused during alignment: this node no longer takes part")
        .await;
    assert_eq!(h.count("capture"), 0, "{:?}", h.log());
}

#[tokio::test]
async fn a_deposed_leader_without_a_follower_wake_is_refused_its_shutdown_checkpoint() {
    let mut h = start(|s| {
        s.not_leader = true;
        s.settles = true;
    });
    let e = h.shutdown(false).await.expect_err("not the leader");
    assert!(
        e.to_string()
            .contains("the shutdown checkpoint did not commit"),
        "{e}"
    );
    assert_eq!(h.count("sinks.abort"), 1, "{:?}", h.log());
    assert_eq!(h.count("sinks.close"), 0, "{:?}", h.log());
}
