//! Panics and injected failures at every kind of component: each becomes a
//! halt (no checkpoints) or a fault (with checkpoints) whose error names the
//! component and carries the panic message; a transient one is recovered
//! from by rerunning on the same state directory, losing nothing.

use sluice::Error;
use sluice_engine::fault::{arm, Fault, FaultAction, FaultSite, FaultTrigger};

use crate::common::*;

const ROWS: usize = 2_000;

const SITES: [FaultSite; 5] = [
    FaultSite::Source,
    FaultSite::Stream,
    FaultSite::SinkWrite,
    FaultSite::SinkCommit,
    FaultSite::Subscription,
];

const ACTIONS: [FaultAction; 2] = [FaultAction::Panic, FaultAction::Fail];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_component_fault_stops_the_run_with_its_name_and_a_rerun_recovers() {
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("clean.csv");
    write_input(&clean, ROWS, None, None);
    let (q_ref, w_ref) = reference(root.path(), "panic_ref", &clean).await;
    for site in SITES {
        for action in ACTIONS {
            for mode in MODES {
                // Sinks commit only at checkpoints.
                if site == FaultSite::SinkCommit && !mode.checkpointed() {
                    continue;
                }
                let tag = format!("p_{site:?}_{action:?}_{mode:?}");
                let case = format!("{site:?} {action:?} {mode:?}");
                let p = Pipeline::new(root.path(), &tag, mode);
                std::fs::copy(&clean, &p.input).unwrap();
                // The fault's name, the component every error names, and
                // what a contained panic is reported as.
                let (name, component, panicked) = match site {
                    FaultSite::Source => (
                        p.source(),
                        format!("source '{}'", p.source()),
                        format!("source '{}': the reader panicked", p.source()),
                    ),
                    FaultSite::Stream => (
                        p.stream(),
                        format!("stream '{}'", p.stream()),
                        format!("stream '{}' panicked", p.stream()),
                    ),
                    FaultSite::SinkWrite | FaultSite::SinkCommit => (
                        p.sink(),
                        format!("sink '{}'", p.sink()),
                        format!("sink '{}' panicked", p.sink()),
                    ),
                    FaultSite::Subscription => (
                        p.stream(),
                        format!("subscription to '{}'", p.stream()),
                        format!("subscription delivery of '{}' panicked", p.stream()),
                    ),
                };
                // Rows, not batches: how many cycles the rows take varies.
                let trigger = match site {
                    FaultSite::SinkCommit => FaultTrigger::Batch(1),
                    _ => FaultTrigger::Row(1_000),
                };
                let fault = arm(
                    &name,
                    Fault {
                        site,
                        action,
                        trigger,
                        once: true,
                    },
                );
                let db = p.open().await;
                let mut sub = db.subscribe(&p.stream()).await.unwrap();
                let drain =
                    tokio::spawn(async move { while let Ok(Some(_)) = sub.next().await {} });
                let e = bounded(async {
                    db.run_to_completion().await?;
                    db.shutdown().await
                })
                .await
                .expect_err(&case);
                let _ = bounded(drain).await;
                // A source that fails (not panics) is an input error: a halt.
                let halts = !mode.checkpointed()
                    || (site == FaultSite::Source && action == FaultAction::Fail);
                let kind_ok = if halts {
                    matches!(e, Error::Halted { .. })
                } else {
                    matches!(e, Error::Fault { .. })
                };
                assert!(kind_ok, "{case}: {e:?}");
                let msg = e.to_string();
                assert!(msg.contains(&component), "{case}: {msg}");
                let injected = format!("injected fault at {site} '{name}'");
                assert!(msg.contains(&injected), "{case}: {msg}");
                if action == FaultAction::Panic {
                    let want = format!("{panicked}: {injected}");
                    assert!(msg.contains(&want), "{case}: {msg}");
                }
                // The database still says what happened, never "not running".
                let again = bounded(db.shutdown()).await;
                if let Err(later) = &again {
                    assert_ne!(later.code(), "SLC-ENG-006", "{case}: {later}");
                }
                drop(db);
                assert_eq!(fault.fired(), 1, "{case}");
                if mode.checkpointed() {
                    p.run_once()
                        .await
                        .unwrap_or_else(|e| panic!("{case}: rerun: {e}"));
                    assert_delivered(mode, &read(&p.q_file()), &q_ref, &case);
                    assert_delivered(mode, &read(&p.w_file()), &w_ref, &case);
                } else {
                    assert!(!p.q_file().exists() && !p.w_file().exists(), "{case}");
                }
                assert!(hidden_files(&p.dir.join("out")).is_empty(), "{case}");
            }
        }
    }
}

/// A reader that panics forever halts (or faults) every run instead of
/// leaving the pipeline waiting for its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_always_panics_never_hangs_the_run() {
    let root = tempfile::tempdir().unwrap();
    for mode in MODES {
        let p = Pipeline::new(root.path(), &format!("p_always_{mode:?}"), mode);
        write_input(&p.input, ROWS, None, None);
        let _fault = arm(
            &p.source(),
            Fault {
                site: FaultSite::Source,
                action: FaultAction::Panic,
                trigger: FaultTrigger::Batch(1),
                once: false,
            },
        );
        for _ in 0..2 {
            let e = p.run_once().await.expect_err("never completes");
            let want = format!("source '{}': the reader panicked", p.source());
            assert!(e.to_string().contains(&want), "{mode:?}: {e}");
            // A contained panic's code, halted or faulted.
            let stopped = if mode.checkpointed() {
                matches!(e, Error::Fault { .. })
            } else {
                matches!(e, Error::Halted { .. })
            };
            assert!(stopped, "{mode:?}: {e}");
            assert_eq!(e.code(), "SLC-ENG-015", "{mode:?}: {e}");
        }
    }
}
