//! Barrier alignment and checkpoint ids: held input, finished sources,
//! alignment timeouts, reservation failures, periodic checkpoints.

use std::time::{Duration, Instant};

use sluice_engine::sources::SourceEvent;

use sluice_engine::EngineError;

use crate::harness::*;
use crate::scripted::*;

#[tokio::test]
async fn aligned_barrier_holds_post_barrier_input_until_capture() {
    let h = start_ab(|_| {});
    let feed = vec![
        batch("A", 1),
        barrier("A", 1, "a@1"),
        batch("A", 2),
        batch("A", 3),
        batch("B", 10),
        batch("B", 11),
        barrier("B", 1, "b@2"),
    ];
    let report = h.checkpoint(h.answer("inject 1 [A,B]", feed)).await;
    assert_eq!(report.expect("checkpoint").id, 1);
    h.expect_log(
        "reserve 1 | inject 1 [A,B] | cycle wm=1 A=[1] | sinks.write | \
         cycle wm=10 B=[10] | sinks.write | cycle wm=11 B=[11] | sinks.write | \
         cut 1 | capture 1 flags=1 A=a@1 B=b@2 | publish 1 | \
         cycle wm=11 A=[2] | sinks.write | cycle wm=11 A=[3] | sinks.write",
    )
    .await;
    assert_eq!(h.handle.status().cycles, 5);
}

#[tokio::test]
async fn finished_source_aligns_with_its_final_offset() {
    let h = start_ab(|_| {});
    let fin = msg(
        "B",
        SourceEvent::Finished {
            offset: Some("b@end".into()),
        },
    );
    let feed = vec![barrier("A", 1, "a@1"), batch("A", 5), batch("B", 3), fin];
    let report = h.checkpoint(h.answer("inject 1 [A,B]", feed)).await;
    assert_eq!(report.expect("checkpoint").id, 1);
    h.wait_for("cycle wm=5 A=[5]").await;
    assert_eq!(
        h.only(&["cycle", "finish", "capture"]),
        "cycle wm=3 B=[3] | finish B offset=b@end | cycle wm=3 | \
         capture 1 flags=1 A=a@1 B=b@end | cycle wm=5 A=[5]"
    );
}

#[tokio::test]
async fn alignment_timeout_abandons_replays_held_input_and_never_reuses_ids() {
    let h = start_ab(|s| s.alignment_timeout = Some(Duration::from_millis(200)));
    let started = Instant::now();
    let feed = vec![barrier("A", 1, "a@1"), batch("A", 2)];
    let e = checkpoint_err(h.checkpoint(h.answer("inject 1 [A,B]", feed)).await);
    assert!(e.contains("alignment timed out"), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let why = "alignment timed out waiting for the barrier of B";
    let abandoned = format!("cancel 1: {why} | abandon 1 flags=1: {why}");
    h.expect_log(&format!(
        "reserve 1 | inject 1 [A,B] | {abandoned} | \
         cycle wm=2 A=[2] | sinks.write"
    ))
    .await;
    // The next attempt reserves a new id, and B's late barrier for attempt 1
    // does not align attempt 2.
    h.script.lock().unwrap().alignment_timeout = None;
    let driver = async {
        let (stale, a) = (barrier("B", 1, "b@stale"), barrier("A", 2, "a@2"));
        h.answer("inject 2 [A,B]", vec![stale, a, batch("B", 7)])
            .await;
        h.wait_for("cycle wm=7 B=[7]").await;
        assert_eq!(h.count("capture"), 0, "a stale barrier aligned B");
        h.send(vec![barrier("B", 2, "b@2")]).await;
    };
    assert_eq!(h.checkpoint(driver).await.expect("second checkpoint").id, 2);
    assert_eq!(
        h.only(&["reserve", "inject", "cancel", "abandon", "capture"]),
        format!(
            "reserve 1 | inject 1 [A,B] | {abandoned} | \
             reserve 2 | inject 2 [A,B] | capture 2 flags=1 A=a@2 B=b@2"
        )
    );
}

#[tokio::test]
async fn reservation_failure_injects_nothing_and_keeps_processing() {
    let h = start_ab(|s| s.fail_reserve = Some("store unavailable".into()));
    assert_eq!(
        checkpoint_err(h.checkpoint(async {}).await),
        "store unavailable"
    );
    h.send(vec![batch("A", 4)]).await;
    h.expect_log(
        "reserve failed: store unavailable | admission failure: store unavailable | \
         cycle wm=4 A=[4] | sinks.write",
    )
    .await;
    let st = h.handle.status();
    assert_eq!(
        (st.cycles, st.halted.is_none(), st.fault.is_none()),
        (1, true, true)
    );
}

#[tokio::test]
async fn periodic_checkpoints_only_follow_new_cycles() {
    let pause = || tokio::time::sleep(Duration::from_millis(250));
    let h = start(|s| s.interval = Some(Duration::from_millis(50)));
    pause().await;
    assert_eq!(h.log(), Vec::<String>::new(), "no input, no checkpoint");
    h.send(vec![batch("A", 1)]).await;
    h.wait_for("capture 1 flags=0").await;
    pause().await;
    assert_eq!(h.count("reserve"), 1, "{:#?}", h.log());
    // A failed periodic checkpoint is retried without new input.
    let fail = Capture::Fail("disk full".into());
    h.script.lock().unwrap().captures.push_back(fail);
    h.send(vec![batch("A", 2)]).await;
    h.wait_for("publish 3").await;
    pause().await;
    h.expect_log(
        "cycle wm=1 A=[1] | sinks.write | \
         reserve 1 | inject 1 [] | cut 1 | capture 1 flags=0 | publish 1 | \
         cycle wm=2 A=[2] | sinks.write | \
         reserve 2 | inject 2 [] | cut 2 | capture 2 flags=0 | cut abort 2 | \
         checkpoint failed 2: disk full | \
         reserve 3 | inject 3 [] | cut 3 | capture 3 flags=0 | publish 3",
    )
    .await;
}

#[tokio::test]
async fn source_failure_during_alignment_abandons_the_attempt() {
    let h = start_ab(|_| {});
    let failed = msg(
        "B",
        SourceEvent::Failed(EngineError::Injected("disk gone".into())),
    );
    let r = h
        .checkpoint(h.answer("inject 1 [A,B]", vec![barrier("A", 1, "a@1"), failed]))
        .await;
    checkpoint_err(r);
    let halted = h.handle.status().halted.map(|e| e.to_string());
    assert_eq!(halted.as_deref(), Some("disk gone"));
    // The reserved must be given up explicitly.
    h.wait_for("abandon 1 flags=1: the pipeline stopped during alignment")
        .await;
}

#[tokio::test]
async fn alignment_timeout_is_enforced_while_input_keeps_coming() {
    let (timeout, delay) = (Duration::from_millis(100), Duration::from_millis(40));
    let h = start_ab(|s| (s.alignment_timeout, s.cycle_delay) = (Some(timeout), delay));
    let started = Instant::now();
    // B delivers slow batches (40ms cycles) but never its barrier.
    let feed = (0..15).map(|i| batch("B", i)).collect();
    let r = h.checkpoint(h.answer("inject 1 [A,B]", feed)).await;
    assert!(r.is_err());
    let took = started.elapsed();
    assert!(took < Duration::from_millis(300), "alignment ran {took:?}");
}

/// Periodic checkpoints whose alignment outlasts the interval (a peer that
/// never sends its barrier) do not starve the idle tick: it is what notices
/// a peer that never attached and halts the pipeline, so without it a
/// leader would retry such checkpoints forever. The interval counts from
/// the end of each attempt, so an idle tick runs between any two.
#[tokio::test]
async fn failing_periodic_alignments_leave_room_for_the_idle_tick() {
    let h = start(|s| {
        s.pending = vec!["A"];
        s.interval = Some(Duration::from_millis(250));
        s.alignment_timeout = Some(Duration::from_millis(400));
        // Held input keeps a checkpoint due after every failed one.
        s.released_by_commit = 1;
        s.idle_tick = Some(Duration::from_millis(10));
        s.note_idle_ticks = true;
    });
    h.wait_for("reserve 3").await;
    let attempts = h.only(&["reserve", "idle tick"]);
    let attempts: Vec<&str> = attempts.split(" | ").collect();
    for (i, pair) in attempts.windows(2).enumerate() {
        let both_attempts = pair.iter().all(|e| e.starts_with("reserve"));
        assert!(
            !both_attempts,
            "no idle tick between attempts at {i}: {attempts:?}"
        );
    }
}
