//! Halts, faults and panics of cycles: which wins, and that no failed cycle
//! is dropped.

use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_engine::coordinator::ControlMsg;
use sluice_engine::EngineError;

use crate::harness::*;

#[tokio::test]
async fn pending_halt_halts() {
    let h = start(|s| s.halt_on = Some(3));
    h.send(vec![batch("A", 3)]).await;
    assert_halted(h.finished().await, "halt requested");
    assert!(h.handle.status().fault.is_none());
    assert!(h.tx.send(batch("A", 4)).await.is_err());
    h.expect_log(
        "cycle wm=3 A=[3] | sinks.write | halt: halt requested | \
         invalidate: halt requested | sinks.abort",
    )
    .await;
}

#[tokio::test]
async fn halt_takes_precedence_over_fault_in_the_same_step() {
    let h = start(|s| (s.halt_on, s.fault_on) = (Some(3), Some(3)));
    h.send(vec![batch("A", 3)]).await;
    assert_halted(h.finished().await, "halt requested");
    assert!(h.handle.status().fault.is_none());
    assert_eq!(h.count("fault:"), 0, "the fault was taken too");
    assert_eq!(h.count("sinks.abort"), 1);
}

#[tokio::test]
async fn cycle_error_halts_by_default() {
    let h = start(|s| s.fail_cycle_on = Some(13));
    h.send(vec![batch("A", 13)]).await;
    assert_halted(h.finished().await, "operator blew up");
    h.expect_log(
        "cycle wm=13 A=[13] | cycle error noted | invalidate: operator blew up | sinks.abort",
    )
    .await;
    let st = h.handle.status();
    assert_eq!((st.cycles, st.fault.is_none()), (0, true));
}

#[tokio::test]
async fn cycle_error_faults_when_asked() {
    let h = start(|s| (s.fail_cycle_on, s.fault_on_cycle_error) = (Some(13), true));
    h.send(vec![batch("A", 13)]).await;
    assert_fault(h.finished().await, "operator blew up");
    assert!(h.handle.status().halted.is_none());
    h.expect_log(
        "cycle wm=13 A=[13] | cycle error noted | invalidate: operator blew up | sinks.abort",
    )
    .await;
}

/// The callback's `fault_on_cycle_error` decides, not the delivery mode:
/// a callback that has checkpoints (exactly-once here) but answers `false`
/// halts on a failed cycle.
#[tokio::test]
async fn a_callback_that_does_not_fault_on_cycle_errors_halts_with_checkpoints_on() {
    let h = start(|s| {
        (s.fail_cycle_on, s.fault_on_checkpoint_failure) = (Some(13), true);
        s.fault_on_cycle_error = false;
    });
    h.send(vec![batch("A", 13)]).await;
    assert_halted(h.finished().await, "operator blew up");
    assert!(h.handle.status().fault.is_none());
}

/// No failed cycle is ever dropped: later input is not taken in.
#[tokio::test]
async fn a_failed_cycle_is_never_dropped_and_later_input_stays_out() {
    for fault in [false, true] {
        let h = start(|s| (s.fail_cycle_on, s.fault_on_cycle_error) = (Some(13), fault));
        h.send(vec![batch("A", 13)]).await;
        let r = h.finished().await;
        if fault {
            assert_fault(r, "operator blew up");
        } else {
            assert_halted(r, "operator blew up");
        }
        assert!(h.tx.send(batch("A", 14)).await.is_err(), "intake stopped");
        h.expect_log(
            "cycle wm=13 A=[13] | cycle error noted | invalidate: operator blew up | sinks.abort",
        )
        .await;
        let st = h.handle.status();
        assert_eq!(st.cycles, 0);
    }
}

/// A panic the components did not contain stops intake from the loop:
/// a halt without checkpoints, a fault with them; the coordinator still
/// answers and shuts down.
#[tokio::test]
async fn a_panic_in_a_cycle_halts_or_faults_and_the_coordinator_lives_on() {
    let reason = "the coordinator panicked: operator exploded";
    for fault in [false, true] {
        let mut h = start(|s| (s.panic_cycle_on, s.fault_on_cycle_error) = (Some(7), fault));
        h.send(vec![batch("A", 7)]).await;
        let r = h.finished().await;
        if fault {
            assert_fault(r, reason);
        } else {
            assert_halted(r, reason);
        }
        // What the panicking cycle may have staged for subscribers is dropped.
        h.expect_log(&format!(
            "cycle wm=7 A=[7] | subscriptions.abort | invalidate: {reason} | sinks.abort"
        ))
        .await;
        let again = bounded(h.handle.control(ControlMsg::Start)).await;
        assert!(again.is_ok(), "the coordinator still answers: {again:?}");
        let r = h.shutdown(true).await;
        assert!(
            matches!(&r, Err(e) if e.to_string().contains(reason)),
            "{r:?}"
        );
    }
}

/// When a panic escapes the loop too, the thread dies, and every later
/// call says that it panicked and why, never a bare "not running".
#[tokio::test]
async fn a_dead_coordinator_reports_its_panic_on_every_later_call() {
    let mut h = start(|s| (s.panic_cycle_on, s.panic_on_abort) = (Some(7), true));
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let push = sluice_engine::sources::PushSource::new(
        Arc::from("A"),
        Arc::clone(&schema),
        h.tx.clone(),
        Default::default(),
    )
    .watching(h.handle.death());
    h.send(vec![batch("A", 7)]).await;
    let dead = |r: Result<(), EngineError>| match r {
        Err(e @ EngineError::CoordinatorPanicked(_)) => {
            assert_eq!(e.code(), "SLC-ENG-014");
            assert!(e.to_string().contains("abort exploded"), "{e}");
        }
        other => panic!("expected the coordinator's panic, got {other:?}"),
    };
    dead(h.finished().await);
    let panicked = h.handle.status().panicked;
    let message = match panicked.as_deref() {
        Some(EngineError::CoordinatorPanicked(m)) => Some(m.as_str()),
        _ => None,
    };
    assert_eq!(message, Some("abort exploded"));
    dead(bounded(h.handle.control(ControlMsg::Start)).await);
    dead(bounded(h.handle.checkpoint()).await.map(|_| ()));
    let rows = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![8]))]).unwrap();
    dead(bounded(push.push(rows)).await);
    dead(h.shutdown(false).await);
}

/// Subscribers see a cycle's output only once every consumer accepted it:
/// a cycle whose sink write failed drops what it staged for them, and one
/// that published commits it.
#[tokio::test]
async fn a_cycle_whose_sinks_refused_its_output_shows_subscribers_nothing() {
    let h = start(|_| {});
    h.send(vec![batch("A", 1)]).await;
    h.expect_log("cycle wm=1 A=[1] | sinks.write").await;
    assert_eq!(h.script.lock().unwrap().output_commits, 1);
    h.script.lock().unwrap().fail_sink_write = Some("disk full".into());
    h.send(vec![batch("A", 2)]).await;
    let r = h.finished().await;
    assert!(
        matches!(&r, Err(EngineError::Halted { cause }) if cause.to_string().ends_with("disk full")),
        "{r:?}"
    );
    assert_eq!(
        h.only(&["cycle", "sinks.write", "subscriptions"]),
        "cycle wm=1 A=[1] | sinks.write | cycle wm=2 A=[2] | sinks.write | subscriptions.abort"
    );
    assert_eq!(h.script.lock().unwrap().output_commits, 1);
}
