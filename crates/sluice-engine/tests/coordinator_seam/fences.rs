//! The production callback outside a cluster: an assignment fence (which
//! only a cluster's leader hands out) is refused by name wherever the seam
//! takes one, and nothing of the attempt is captured.

use std::time::{Duration, Instant};

use sluice_engine::coordinator::{
    BarrierOutcome, CheckpointAssignmentFence, CheckpointAttempt, CheckpointLifecycle,
    ConnectorPipelineCallback, SharedOutputs, FLAG_MANUAL,
};
use sluice_engine::EngineError;

fn callback() -> ConnectorPipelineCallback {
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    ConnectorPipelineCallback::new(
        tx,
        SharedOutputs {
            metrics: Default::default(),
            subscriptions: Default::default(),
        },
    )
}

const REFUSED: &str =
    "checkpoint failed: assignment fence 3 given, but this pipeline is not clustered";

#[tokio::test]
async fn an_assignment_fence_is_refused_by_name_outside_a_cluster() {
    let mut cb = callback();
    let attempt = CheckpointAttempt { id: 7 };
    let fence = Some(CheckpointAssignmentFence { generation: 3 });
    let now = Instant::now();
    let deadline = now + Duration::from_secs(60);
    let outcome = cb
        .checkpoint_with_barrier(Default::default(), attempt, now, deadline, 0, fence)
        .await;
    match outcome {
        BarrierOutcome::Aborted(e) => assert_eq!(e.to_string(), REFUSED),
        other => panic!("{other:?}"),
    }
    let reason = EngineError::Checkpoint("alignment timed out".into());
    let e = cb
        .abandon_checkpoint_attempt(attempt, &reason, FLAG_MANUAL, fence)
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.to_string().as_str()), ("SLC-ENG-009", REFUSED));
    // Without a fence, abandoning only withdraws the barriers.
    cb.abandon_checkpoint_attempt(attempt, &reason, FLAG_MANUAL, None)
        .await
        .unwrap();
}
