//! Supervised Python process functions: a handler written in Python,
//! started by the engine in a bubblewrap sandbox, gives the native
//! handler's results; the sandbox holds; a dead or hung worker is
//! restarted; every failure is an error that names its cause.
//!
//! These tests need `python3` with the `sluice_worker` SDK and `bwrap`
//! (`.ci/run` installs them). Without them they fail: a missing
//! interpreter or sandbox is never a silent pass.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sluice::process::benchmark::activation_log_descriptor;
use sluice::process::ProcessFunctionDescriptor;
use sluice::remote::PythonDeployment;

use crate::common::{
    collect, disordered_events, events_batch, log_rows, open, oracle, Event, LogRow,
};

/// `python/examples/<name>` in the repository.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/examples")
        .join(name)
}

fn log_descriptor() -> ProcessFunctionDescriptor {
    activation_log_descriptor("py_log")
}

async fn run_python(events: &[Event], batch_size: usize, per_cycle: usize) -> Vec<LogRow> {
    let db = open(None, &[("max_batches_per_cycle", &per_cycle.to_string())]).await;
    db.register_python_process_function(
        log_descriptor(),
        PythonDeployment::new(example("activation_log"), "activation_log:ActivationLog"),
    )
    .await
    .unwrap();
    db.execute(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
         CREATE STREAM kept AS SELECT key, amount FROM ev WHERE amount % 3 <> 0;
         CREATE STREAM log AS PROCESS py_log FROM kept;",
    )
    .await
    .unwrap();
    let sub = db.subscribe("log").await.unwrap();
    let src = db.source("ev").await.unwrap();
    for b in events.chunks(batch_size) {
        src.push(events_batch(b)).await.unwrap();
    }
    src.finish().await.unwrap();
    db.run_to_completion().await.unwrap();
    let stats = db.process_worker_stats("py_log").unwrap();
    assert_eq!(stats.starts, 1, "{stats:?}");
    assert_eq!(stats.errors, 0, "{stats:?}");
    db.shutdown().await.unwrap();
    log_rows(&collect(sub).await)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// The Python handler's results are the native fixture's, row for row.
    #[test]
    fn a_python_handler_gives_the_native_results(
        events in disordered_events(120),
        batch_size in 1usize..12,
        per_cycle in prop::sample::select(vec![1usize, 3, 64]),
    ) {
        let batches: Vec<Vec<Event>> = events.chunks(batch_size).map(<[Event]>::to_vec).collect();
        let expected = oracle(&batches, 1_000, 1_000, |e| e.1 % 3 != 0);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let got = rt.block_on(run_python(&events, batch_size, per_cycle));
        prop_assert_eq!(got, expected);
    }
}
