//! The checkpoint admission gate while a (re)start is in flight
//! (`is_recovering`): until `Start`, a recovered checkpoint may still
//! replace the operators' state, and a checkpoint of the state before it
//! would become the newest committed one and lose what it held.

use std::time::Duration;

use sluice_engine::coordinator::ControlMsg;

use crate::harness::*;

/// Held input makes a checkpoint due every interval, but no tick takes one
/// before `Start`, and a `CHECKPOINT` asked for is refused by name. The
/// tick that came due is taken as soon as `Start` was applied, not a
/// whole interval later.
#[tokio::test]
async fn nothing_is_captured_before_the_restart_ends() {
    let h = start(|s| {
        s.start_by_control = true;
        s.interval = Some(Duration::from_millis(20));
        s.released_by_commit = 1;
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // No tick was even tried (each would be an admission failure).
    assert_eq!(h.log(), Vec::<String>::new());
    let e = checkpoint_err(h.checkpoint(async {}).await);
    assert!(
        e.contains("the pipeline has not started yet: its recovered state may still replace"),
        "{e}"
    );
    assert_eq!(h.count("reserve"), 0, "{:?}", h.log());
    let asked = std::time::Instant::now();
    bounded(h.handle.control(ControlMsg::Start))
        .await
        .expect("started");
    h.wait_for("publish 1").await;
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the due tick waited"
    );
    assert_eq!(
        h.only(&["admission", "control", "reserve", "publish"]),
        "admission failure: checkpoint failed: the pipeline has not started yet: its recovered state may still \
         replace the operators', so nothing can be captured before it has | \
         control start | reserve 1 | publish 1"
    );
}

/// A shutdown before `Start` takes no checkpoint: it would capture the
/// state before recovery. The sinks close as after a clean run.
#[tokio::test]
async fn a_shutdown_before_the_restart_ended_takes_no_checkpoint() {
    let mut h = start(|s| (s.start_by_control, s.settles) = (true, true));
    h.shutdown(false).await.expect("clean shutdown");
    assert_eq!(h.count("reserve"), 0, "{:?}", h.log());
}
