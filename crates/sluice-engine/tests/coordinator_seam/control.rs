//! Control messages are acknowledged with a `Result`: a statement the
//! callback refuses is reported to its caller and the pipeline runs on; a
//! failed `Start` (or `Recover`, or `AdoptMovedState`) halts it and the
//! acknowledgement carries the error, so no caller has to read the status
//! and race with the halt.

use sluice_engine::coordinator::ControlMsg;
use sluice_engine::EngineError;

use crate::harness::*;

#[tokio::test]
async fn a_refused_statement_is_reported_and_the_pipeline_runs_on() {
    let h = start(|s| s.fail_control = Some("cannot create the file".into()));
    let r = bounded(h.handle.control(ControlMsg::Drop("out".into()))).await;
    match r {
        Err(EngineError::Injected(e)) => assert_eq!(e, "cannot create the file"),
        other => panic!("expected the refusal itself, got {other:?}"),
    }
    h.send(vec![batch("A", 1)]).await;
    h.expect_log("control ddl refused: cannot create the file | cycle wm=1 A=[1] | sinks.write")
        .await;
    let st = h.handle.status();
    assert!(st.halted.is_none() && st.fault.is_none(), "{st:?}");
}

#[tokio::test]
async fn a_failed_start_halts_and_its_acknowledgement_says_why() {
    let h = start(|s| s.fail_control = Some("sink cannot be opened".into()));
    let r = bounded(h.handle.control(ControlMsg::Start)).await;
    let told = match &r {
        Err(EngineError::Halted { cause }) => cause.to_string(),
        other => panic!("expected a halt, got {other:?}"),
    };
    assert_eq!(told, "sink cannot be opened");
    // Set before the acknowledgement was sent: no window to race through.
    let halted = h.handle.status().halted.map(|e| e.to_string());
    assert_eq!(halted.as_deref(), Some("sink cannot be opened"));
    assert_halted(h.finished().await, "sink cannot be opened");
}

/// A failed `AdoptMovedState` halts too: the node's state is partly
/// adopted, and a pipeline left so would never start (its checkpoints
/// would wait for a restart that never ends).
#[tokio::test]
async fn a_failed_adoption_of_moved_state_halts() {
    use sluice_engine::process::VnodePlacement;
    use sluice_engine::split::moved::MovedState;
    let h = start(|s| s.fail_control = Some("moved state unreadable".into()));
    let adopt = ControlMsg::AdoptMovedState {
        state: std::sync::Arc::new(MovedState::new(Vec::new()).unwrap()),
        placement: VnodePlacement::all(8).unwrap(),
    };
    let r = bounded(h.handle.control(adopt)).await;
    assert!(matches!(r, Err(EngineError::Halted { .. })), "{r:?}");
    assert_halted(h.finished().await, "moved state unreadable");
}
