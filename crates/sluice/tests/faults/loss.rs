//! A failed cycle never drops input: with checkpoints it faults (recovery
//! replays from the last checkpoint), without them it halts.

use sluice::Error;
use sluice_engine::fault::FaultAction;

use crate::common::*;

const ROWS: usize = 20_000;
const AT: usize = 15_000;

/// Division by zero at row 15,000 of 20,000: a halt without checkpoints,
/// a fault with them (in both delivery modes), every time it is replayed;
/// the run never completes and no row of a failed cycle reaches a sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn division_by_zero_faults_or_halts_and_no_cycle_is_dropped() {
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("clean.csv");
    write_input(&clean, ROWS, None, None);
    let (q_ref, w_ref) = reference(root.path(), "loss_div_ref", &clean).await;
    for mode in MODES {
        let p = Pipeline::new(root.path(), &format!("loss_div_{mode:?}"), mode);
        write_input(&p.input, ROWS, Some(AT), None);
        // Like `sluice run`: recoveries are retried, and fault again.
        let attempts = if mode.checkpointed() { 3 } else { 1 };
        for attempt in 0..attempts {
            let e = p.run_once().await.expect_err("the run cannot complete");
            let (code, kind) = match mode {
                // The division's own code, halted or faulted.
                Mode::Plain => ("SLC-ENG-004", matches!(e, Error::Halted { .. })),
                _ => ("SLC-ENG-004", matches!(e, Error::Fault { .. })),
            };
            assert!(kind, "{mode:?} attempt {attempt}: {e:?}");
            assert_eq!(e.code(), code, "{mode:?}");
            let msg = e.to_string();
            let stream = format!("stream '{}'", p.stream());
            assert!(
                msg.contains(&stream) && msg.contains("Divide by zero"),
                "{msg}"
            );
        }
        match mode {
            Mode::Plain => {
                assert!(!p.q_file().exists() && !p.w_file().exists());
            }
            // Only committed epochs: a byte prefix of the clean output (or no file).
            Mode::ExactlyOnce => {
                for (file, want) in [(p.q_file(), &q_ref), (p.w_file(), &w_ref)] {
                    if file.exists() {
                        let got = read(&file);
                        assert!(want.starts_with(&got), "{}", file.display());
                        assert!(got.lines().count() <= AT, "{}", file.display());
                    }
                }
            }
            // Rows delivered so far: all from before the failing row.
            Mode::AtLeastOnce => {
                let want = sorted_rows(&q_ref);
                for row in sorted_rows(&read(&p.q_file())) {
                    let id: usize = row.split(',').next().unwrap().parse().unwrap();
                    assert!(id < AT, "row {row} is after the failure");
                    assert!(want.binary_search(&row).is_ok(), "unexpected row {row}");
                }
            }
        }
        assert!(hidden_files(&p.dir.join("out")).is_empty(), "{mode:?}");
    }
}

/// A transient operator failure at row 15,000 (injected once): the run
/// faults, and the rerun on the same state directory replays from the last
/// checkpoint and delivers every row (exactly-once: exactly the clean
/// output; at-least-once: every row, some possibly twice), windows too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_replays_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("clean.csv");
    write_input(&clean, ROWS, None, None);
    let (q_ref, w_ref) = reference(root.path(), "loss_once_ref", &clean).await;
    for action in [FaultAction::Fail, FaultAction::Panic] {
        for mode in [Mode::AtLeastOnce, Mode::ExactlyOnce] {
            let p = Pipeline::new(root.path(), &format!("loss_once_{action:?}_{mode:?}"), mode);
            std::fs::copy(&clean, &p.input).unwrap();
            let fault = once_at_row(&p.stream(), action, AT as u64);
            let e = p
                .run_once()
                .await
                .expect_err("the injected fault stops the run");
            assert!(matches!(e, Error::Fault { .. }), "{e}");
            // The injected failure's or the contained panic's own code.
            let code = match action {
                FaultAction::Panic => "SLC-ENG-015",
                _ => "SLC-ENG-017",
            };
            assert_eq!(e.code(), code, "{e}");
            let msg = e.to_string();
            let want = format!("injected fault at stream '{}'", p.stream());
            assert!(msg.contains(&format!("stream '{}'", p.stream())), "{msg}");
            assert!(msg.contains(&want), "{msg}");
            if action == FaultAction::Panic {
                let panicked = format!("stream '{}' panicked: {want}", p.stream());
                assert!(msg.contains(&panicked), "{msg}");
            }
            p.run_once().await.expect("the replay completes");
            assert_eq!(fault.fired(), 1);
            assert_delivered(mode, &read(&p.q_file()), &q_ref, "q");
            assert_delivered(mode, &read(&p.w_file()), &w_ref, "windows");
            assert!(hidden_files(&p.dir.join("out")).is_empty(), "{mode:?}");
        }
    }
}
