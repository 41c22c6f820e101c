//! Control messages are acknowledged with a `Result`: a statement the
//! callback refuses is reported to its caller and the pipeline runs on; a
//! failed `Start` (or `Recover`, or a vnode transition) halts it and the
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

fn staged_transition() -> ControlMsg {
    use sluice_engine::process::VnodePlacement;
    use sluice_engine::split::moved::MovedState;
    ControlMsg::StageVnodeTransition {
        state: std::sync::Arc::new(MovedState::new(Vec::new()).unwrap()),
        placement: VnodePlacement::all(8).unwrap(),
    }
}

fn recovered() -> ControlMsg {
    let manifest = sluice_storage::Manifest {
        id: 4,
        created_ms: 0,
        pipeline: "p".into(),
        watermark: 0,
        sources: Default::default(),
        sinks: Default::default(),
        blobs: Vec::new(),
        assignment_generation: None,
    };
    ControlMsg::Recover(Box::new(sluice_storage::LoadedCheckpoint {
        manifest,
        blobs: Default::default(),
    }))
}

/// A staged vnode transition completes when `Start` arrives, before it is
/// applied: after every `Recover` (even one sent after it was staged,
/// since the transition replaces what recovery restored), and before any
/// source input.
#[tokio::test]
async fn a_staged_vnode_transition_completes_after_recovery_and_before_start() {
    let h = start(|s| s.start_by_control = true);
    bounded(h.handle.control(staged_transition()))
        .await
        .expect("staged");
    bounded(h.handle.control(recovered()))
        .await
        .expect("recovered");
    assert_eq!(
        h.log().join(" | "),
        "control stage vnode transition | control recover"
    );
    bounded(h.handle.control(ControlMsg::Start))
        .await
        .expect("started");
    h.send(vec![batch("A", 1)]).await;
    h.expect_log(
        "control stage vnode transition | control recover | vnode transition | control start | \
         cycle wm=1 A=[1] | sinks.write",
    )
    .await;
}

/// A transition that fails to complete halts the pipeline, `Start` is
/// not applied, and the acknowledgement says why. A refused staging
/// changed nothing: it is refused like a statement, and the pipeline
/// runs on.
#[tokio::test]
async fn a_failed_vnode_transition_halts_before_start() {
    let h = start(|s| {
        s.start_by_control = true;
        s.fail_transition = Some("moved state unreadable".into());
    });
    bounded(h.handle.control(staged_transition()))
        .await
        .expect("staged");
    let r = bounded(h.handle.control(ControlMsg::Start)).await;
    assert!(matches!(r, Err(EngineError::Halted { .. })), "{r:?}");
    assert_halted(h.finished().await, "moved state unreadable");
    assert_eq!(h.count("control start"), 0, "{:?}", h.log());

    let h = start(|s| s.fail_control = Some("a transition is staged already".into()));
    let r = bounded(h.handle.control(staged_transition())).await;
    match r {
        Err(EngineError::Injected(e)) => assert_eq!(e, "a transition is staged already"),
        other => panic!("expected the refusal itself, got {other:?}"),
    }
    let st = h.handle.status();
    assert!(st.halted.is_none() && st.fault.is_none(), "{st:?}");
}

/// The production callback stages one transition at a time, only before
/// `Start`, and refuses a `Start` whose staged transition never completed.
#[tokio::test]
async fn the_production_callback_completes_a_staged_transition_once() {
    use sluice_engine::coordinator::{ConnectorPipelineCallback, RuntimeControl, SharedOutputs};
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let shared = SharedOutputs {
        metrics: Default::default(),
        subscriptions: Default::default(),
    };
    let mut cb = ConnectorPipelineCallback::new(tx, shared);
    assert!(!cb.complete_pending_vnode_transition().await.unwrap());
    cb.apply_control(staged_transition()).unwrap();
    let e = cb.apply_control(staged_transition()).unwrap_err();
    assert!(e.to_string().contains("is staged already"), "{e}");
    let e = cb.apply_control(ControlMsg::Start).unwrap_err();
    assert!(
        e.to_string().contains("is staged but was not completed"),
        "{e}"
    );
    assert!(cb.is_recovering());
    assert!(cb.complete_pending_vnode_transition().await.unwrap());
    assert!(!cb.complete_pending_vnode_transition().await.unwrap());
    cb.apply_control(ControlMsg::Start).unwrap();
    let e = cb.apply_control(staged_transition()).unwrap_err();
    assert!(e.to_string().contains("runs already"), "{e}");
}
