//! A pipeline that stopped (halted or faulted) takes no checkpoint: its
//! uncommitted sink output is gone, but its sources moved past that input,
//! so a checkpoint would make a reopened run skip it for good.

use std::sync::Arc;

use sluice::object_store::ObjectStore;

use crate::common::{bounded, committed, faulty, Fixture, MODES};

#[tokio::test]
async fn a_stopped_pipeline_refuses_checkpoints_in_every_mode() {
    for mode in MODES {
        let fx = Fixture::new();
        // A value the BIGINT column cannot hold stops the run.
        let input = fx.dir.path().join("in.csv");
        let mut text = std::fs::read_to_string(&input).unwrap();
        text.push_str("1,not-a-number,99999\n");
        std::fs::write(&input, text).unwrap();
        let (store, _mem) = faulty();
        let db = fx.open(mode, Arc::new(store) as Arc<dyn ObjectStore>).await;
        bounded(mode, db.start()).await.unwrap();
        let stopped = bounded(mode, db.run_to_completion()).await.unwrap_err();
        let reason = stopped.to_string();
        assert!(reason.contains("not-a-number"), "{mode}: {reason}");
        let before = committed(&db).await;
        let err = bounded(mode, db.checkpoint()).await.unwrap_err();
        assert_eq!(err.code(), "SLC-ENG-009", "{mode}: {err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "checkpoint failed: no checkpoint is taken after the pipeline stopped ("
            ) && msg.contains("not-a-number")
                && msg.ends_with(
                    "): it would commit input whose output was discarded; reopen on the same \
                     state to recover from the last committed checkpoint"
                ),
            "{mode}: {msg}"
        );
        assert_eq!(committed(&db).await, before, "{mode}");
        let _ = bounded(mode, db.shutdown()).await;
    }
}
