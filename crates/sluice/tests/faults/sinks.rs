//! What sink files hold when a run fails, per delivery mode, and stale
//! temporary files of dead runs.

use std::time::Duration;

use sluice::Error;
use sluice_engine::fault::{arm, Fault, FaultAction, FaultSite, FaultTrigger};

use crate::common::*;

const ROWS: usize = 20_000;
/// Data row 15,000 is line 15,001 of the file.
const BAD: usize = 15_000;
/// A checkpoint is taken while the reader stalls before its 50th batch,
/// so it holds rows 1..=5,000 exactly.
const CHECKPOINTED: usize = 5_000;

/// The first `rows` data rows of a CSV text, with its header.
fn head(text: &str, rows: usize) -> String {
    text.lines()
        .take(rows + 1)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A malformed row at line 15,001 after a checkpoint at row 5,000.
/// Without checkpoints no sink file appears. Exactly-once: the files hold
/// exactly the committed epochs (rows 1..=5,000). At-least-once: the files
/// hold the rows delivered so far, in order, at least the checkpointed ones.
/// After the input is repaired, a rerun on the same state directory
/// continues from the checkpoint: exactly-once output is the clean output
/// byte for byte; at-least-once repeats at most rows after the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_row_leaves_exactly_what_the_mode_promises() {
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("clean.csv");
    write_input(&clean, ROWS, None, None);
    let (q_ref, w_ref) = reference(root.path(), "sinks_bad_ref", &clean).await;
    for mode in MODES {
        let mut p = Pipeline::new(root.path(), &format!("sinks_bad_{mode:?}"), mode);
        if mode.checkpointed() {
            p.extra.push(("checkpoint_interval".into(), "1h".into()));
        }
        write_input(&p.input, ROWS, None, Some(BAD));
        let _stall = arm(
            &p.source(),
            Fault {
                site: FaultSite::Source,
                action: FaultAction::Stall(Duration::from_secs(3)),
                trigger: FaultTrigger::Batch(50),
                once: true,
            },
        );
        let db = p.open().await;
        db.start().await.unwrap();
        if mode.checkpointed() {
            bounded(async {
                while db.metrics().events_ingested < (CHECKPOINTED - 100) as u64 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
            bounded(db.checkpoint())
                .await
                .expect("checkpoint at row 5,000");
        }
        let e = run_db(&db)
            .await
            .expect_err("the malformed row stops the run");
        assert!(matches!(e, Error::Halted { .. }), "{mode:?}: {e:?}");
        assert_eq!(
            e.code(),
            "SLC-CONN-002",
            "the malformed row's own code: {e}"
        );
        let msg = e.to_string();
        assert!(msg.contains(&format!("source '{}'", p.source())), "{msg}");
        assert!(msg.contains("15001"), "the line is named: {msg}");
        drop(db);
        match mode {
            Mode::Plain => assert!(!p.q_file().exists() && !p.w_file().exists()),
            Mode::ExactlyOnce => {
                assert_eq!(read(&p.q_file()), head(&q_ref, CHECKPOINTED));
                let w = read(&p.w_file());
                assert!(w.lines().count() > 1 && w_ref.starts_with(&w), "{w}");
            }
            Mode::AtLeastOnce => {
                let q = read(&p.q_file());
                let rows = q.lines().count() - 1;
                assert!((CHECKPOINTED..BAD).contains(&rows), "{rows} rows");
                assert_eq!(q, head(&q_ref, rows), "the rows so far, in order");
                assert!(w_ref.starts_with(&read(&p.w_file())));
            }
        }
        assert!(hidden_files(&p.dir.join("out")).is_empty(), "{mode:?}");
        if !mode.checkpointed() {
            continue;
        }
        // Repaired in place (same length): the rerun continues.
        std::fs::copy(&clean, &p.input).unwrap();
        p.run_once().await.expect("the rerun completes");
        let q = read(&p.q_file());
        assert_delivered(mode, &q, &q_ref, "q");
        assert_delivered(mode, &read(&p.w_file()), &w_ref, "windows");
        if mode == Mode::AtLeastOnce {
            // Only rows after the checkpoint may repeat, and at most once.
            let mut seen = std::collections::HashMap::<usize, usize>::new();
            for row in q.lines().skip(1) {
                let id: usize = row.split(',').next().unwrap().parse().unwrap();
                *seen.entry(id).or_default() += 1;
            }
            for (id, n) in seen {
                let most = if id <= CHECKPOINTED { 1 } else { 2 };
                assert!(n <= most, "row {id} delivered {n} times");
            }
        }
    }
}

/// A failure before anything committed: without checkpoints and under
/// exactly-once nothing of the run appears, not even a header-only file,
/// and a file an earlier run left at the path is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_appears_before_the_first_commit() {
    let root = tempfile::tempdir().unwrap();
    for mode in [Mode::Plain, Mode::ExactlyOnce] {
        let mut p = Pipeline::new(root.path(), &format!("sinks_none_{mode:?}"), mode);
        if mode.checkpointed() {
            p.extra.push(("checkpoint_interval".into(), "1h".into()));
        }
        write_input(&p.input, ROWS, None, Some(BAD));
        std::fs::write(p.q_file(), "earlier run\n").unwrap();
        let e = p
            .run_once()
            .await
            .expect_err("the malformed row stops the run");
        assert_eq!(e.code(), "SLC-CONN-002", "{e}");
        assert_eq!(read(&p.q_file()), "earlier run\n", "{mode:?}");
        assert!(!p.w_file().exists(), "{mode:?}");
        assert!(hidden_files(&p.dir.join("out")).is_empty(), "{mode:?}");
    }
}

/// Temp files of sinks whose process died are removed when the sinks open
/// (staged epochs of an abandoned exactly-once run too); a live process's
/// temp file is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_temp_files_of_dead_runs_are_removed() {
    let root = tempfile::tempdir().unwrap();
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let mut live = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let live_pid = live.id();
    for mode in MODES {
        let p = Pipeline::new(root.path(), &format!("sinks_stale_{mode:?}"), mode);
        write_input(&p.input, 500, None, None);
        let out = p.dir.join("out");
        let live_file = format!(".q.csv.tmp-{live_pid}-1");
        let mut stale = vec![
            format!(".q.csv.tmp-{dead_pid}-0"),
            format!(".w.csv.tmp-{dead_pid}-12"),
            live_file.clone(),
        ];
        // Staged epochs carry no pid: only an epoch sink of the same file
        // (a checkpointed run starting afresh) knows they are orphans.
        if mode.checkpointed() {
            stale.push(".q.csv.epoch-000000000007".to_string());
        }
        for name in stale {
            std::fs::write(out.join(name), "x".repeat(4096)).unwrap();
        }
        p.run_once().await.expect("the run completes");
        assert_eq!(hidden_files(&out), vec![live_file], "{mode:?}");
    }
    let _ = live.kill();
    let _ = live.wait();
}
