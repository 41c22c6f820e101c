//! In-process recovery: with `restart_budget` set, an embedded database
//! recovers from a fault by itself (no reopen), from its last committed
//! checkpoint, and its output is that of a run without the fault; a fault
//! that recurs is reported once the budget is spent.

use std::path::Path;

use sluice_engine::fault::{FaultAction, FaultGuard};

use crate::common::*;

const ROWS: usize = 20_000;
const AT: usize = 15_000;

/// Pipeline `tag` in `mode` over a copy of `clean`, with a restart budget
/// of 2 and a transient `action` (once) at row `AT` of its stream.
fn transient(
    root: &Path,
    tag: &str,
    mode: Mode,
    clean: &Path,
    action: FaultAction,
) -> (Pipeline, FaultGuard) {
    let mut p = Pipeline::new(root, tag, mode);
    with_budget(&mut p, 2);
    std::fs::copy(clean, &p.input).unwrap();
    let fault = once_at_row(&p.stream(), action, AT as u64);
    (p, fault)
}

fn with_budget(p: &mut Pipeline, budget: u32) {
    p.extra = vec![
        ("restart_budget".into(), budget.to_string()),
        ("restart_backoff".into(), "1ms".into()),
    ];
}

/// A transient operator failure at row 15,000 (injected once) in one
/// embedded run: the database restarts itself once and completes;
/// exactly-once output is byte-for-byte the clean output, at-least-once
/// holds every row (some possibly twice), windows too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_fault_recovers_in_process_and_the_output_is_the_clean_one() {
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("clean.csv");
    write_input(&clean, ROWS, None, None);
    let (q_ref, w_ref) = reference(root.path(), "restart_once_ref", &clean).await;
    for action in [FaultAction::Fail, FaultAction::Panic] {
        for mode in [Mode::AtLeastOnce, Mode::ExactlyOnce] {
            let tag = format!("restart_once_{action:?}_{mode:?}");
            let (p, fault) = transient(root.path(), &tag, mode, &clean, action);
            let db = p.open().await;
            run_db(&db)
                .await
                .expect("the run recovers in process and completes");
            assert_eq!(fault.fired(), 1, "{action:?} {mode:?}");
            assert_eq!(db.restarts().await, 1, "{action:?} {mode:?}");
            let what = format!("{action:?} {mode:?}");
            assert_delivered(mode, &read(&p.q_file()), &q_ref, &format!("q {what}"));
            assert_delivered(mode, &read(&p.w_file()), &w_ref, &format!("w {what}"));
            assert!(hidden_files(&p.dir.join("out")).is_empty(), "{what}");
        }
    }
}

/// Division by zero recurs at every replay: the database restarts exactly
/// `restart_budget` times, then reports the fault (with its cause's code, SLC-ENG-004) naming the
/// stream; without a budget the first fault is reported (no restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurring_fault_is_reported_once_the_budget_is_spent() {
    let root = tempfile::tempdir().unwrap();
    for (budget, mode) in [(2, Mode::ExactlyOnce), (0, Mode::AtLeastOnce)] {
        let mut p = Pipeline::new(root.path(), &format!("restart_div_{budget}_{mode:?}"), mode);
        with_budget(&mut p, budget);
        write_input(&p.input, ROWS, Some(AT), None);
        let db = p.open().await;
        let e = run_db(&db).await.expect_err("the fault recurs");
        assert!(matches!(e, sluice::Error::Fault { .. }), "{e:?}");
        assert_eq!(e.code(), "SLC-ENG-004", "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("stream '{}'", p.stream())) && msg.contains("Divide by zero"),
            "{msg}"
        );
        assert_eq!(db.restarts().await, budget);
        assert!(hidden_files(&p.dir.join("out")).is_empty(), "{mode:?}");
    }
}

/// A program that only starts the pipeline (and never waits in
/// `run_to_completion`) gets the same recovery: the database supervises
/// every started pipeline, restarts it after the transient fault, and the
/// shutdown publishes exactly the clean output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_pipeline_recovers_in_process_without_run_to_completion() {
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("clean.csv");
    write_input(&clean, ROWS, None, None);
    let (q_ref, w_ref) = reference(root.path(), "restart_started_ref", &clean).await;
    let (p, fault) = transient(
        root.path(),
        "restart_started",
        Mode::ExactlyOnce,
        &clean,
        FaultAction::Fail,
    );
    let db = p.open().await;
    db.start().await.unwrap();
    bounded(async {
        loop {
            let finished = db.status().await.is_some_and(|s| s.finished);
            if finished && db.restarts().await == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    bounded(db.shutdown()).await.unwrap();
    assert_eq!(fault.fired(), 1);
    assert_delivered(Mode::ExactlyOnce, &read(&p.q_file()), &q_ref, "q");
    assert_delivered(Mode::ExactlyOnce, &read(&p.w_file()), &w_ref, "w");
    assert!(hidden_files(&p.dir.join("out")).is_empty());
}

/// Once `shutdown` or `abort` returns, nothing in the background holds the
/// database: dropping it frees the state directory, and the next open of
/// the same directory succeeds at once, after a run that finished, after
/// one that faulted for good, and after a stop during a restart's backoff
/// (which the stop cuts short instead of waiting it out). CI once failed
/// with "state directory ... is in use" because the supervisor still held
/// the database for a moment after `run_to_completion` returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_frees_its_state_directory_at_once() {
    let root = tempfile::tempdir().unwrap();
    for (case, zero_at) in [("finished", None), ("faulted", Some(500))] {
        let p = Pipeline::new(root.path(), &format!("free_{case}"), Mode::ExactlyOnce);
        write_input(&p.input, 1_000, zero_at, None);
        for round in 0..20 {
            let db = p.open().await;
            let ran = run_db(&db).await;
            assert_eq!(ran.is_ok(), zero_at.is_none(), "{case} {round}: {ran:?}");
            drop(db);
        }
    }

    let mut p = Pipeline::new(root.path(), "free_backoff", Mode::ExactlyOnce);
    p.extra = vec![
        ("restart_budget".into(), "3".into()),
        ("restart_backoff".into(), "60s".into()),
    ];
    write_input(&p.input, 1_000, Some(500), None);
    let db = p.open().await;
    db.start().await.unwrap();
    bounded(async {
        while db.restarts().await == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    // The supervisor now waits out its backoff; the stop ends that wait.
    let stop = tokio::time::timeout(std::time::Duration::from_secs(10), db.abort())
        .await
        .expect("a stop does not wait out a restart's backoff");
    assert!(stop.is_err(), "the fault stands: {stop:?}");
    assert_eq!(db.restarts().await, 1);
    drop(db);
    drop(p.open().await);
}

/// The runtime that started a pipeline (and so its supervisor) shuts down
/// while the pipeline runs on; a stop from another runtime still returns
/// and frees the state directory instead of waiting for a supervisor that
/// will never run again.
#[test]
fn a_stop_from_another_runtime_does_not_wait_for_a_dropped_supervisor() {
    let root = tempfile::tempdir().unwrap();
    let p = Pipeline::new(root.path(), "other_runtime", Mode::ExactlyOnce);
    // Long enough that the pipeline is still running at the stop.
    write_input(&p.input, 200_000, None, None);
    let first = tokio::runtime::Runtime::new().unwrap();
    let db = first.block_on(async {
        let db = p.open().await;
        db.start().await.unwrap();
        db
    });
    drop(first);
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(30), db.abort())
            .await
            .expect("the stop returns")
            .ok();
        drop(db);
        drop(p.open().await);
    });
}
