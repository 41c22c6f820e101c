//! Faults seen from the command line: a cycle that fails must end
//! `sluice run` with status 1 and an error naming the failure, in every
//! delivery mode. It used to exit 0 under at-least-once with checkpoints,
//! with the failed cycles' rows missing from the sinks.
//!
//! The input has 20,000 rows in batches of 100; row 15,000 divides by zero.

mod support;

use std::path::Path;
use std::time::Duration;

use support::*;

const WATCHDOG: Duration = Duration::from_secs(120);

/// What the engine reports for the failed division.
const FAILURE: &str =
    "stream 'ratios': execution failed in 'operator': Arrow error: Divide by zero error";

fn setup(dir: &Path) {
    let mut csv = String::from("id,v,d,ts\n");
    for id in 1..=20_000i64 {
        let d = if id == 15_000 { 0 } else { 1 + id % 7 };
        csv.push_str(&format!(
            "{id},{},{d},{}\n",
            id * 3,
            1_700_000_000_000 + id * 10
        ));
    }
    std::fs::write(dir.join("events.csv"), csv).unwrap();
    std::fs::write(
        dir.join("pipeline.sql"),
        "CREATE SOURCE events (id BIGINT, v BIGINT, d BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH (connector = 'file', path = 'events.csv', format = 'csv', batch_size = '100');
         CREATE STREAM ratios AS SELECT id, v / d AS r FROM events;
         CREATE STREAM per_second AS SELECT tumble(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n \
             FROM events GROUP BY tumble(ts, INTERVAL '1' SECOND);
         CREATE SINK ratios_out FROM ratios WITH (connector = 'file', path = 'out/ratios.csv');
         CREATE SINK windows_out FROM per_second WITH (connector = 'file', path = 'out/windows.csv');",
    )
    .unwrap();
}

/// Run with `args`; the exit status and the `error[...]` lines of stderr.
fn run(args: &[String]) -> (tempfile::TempDir, Option<i32>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let (status, stderr) = Run::spawn(sluice(dir.path(), args)).wait(WATCHDOG);
    let errors = stderr
        .lines()
        .filter(|l| l.starts_with("error["))
        .map(String::from)
        .collect();
    (dir, status.code(), errors)
}

/// A checkpointed run under `delivery`: a deterministic failure replays the
/// same way from every checkpoint, so the CLI's recoveries end with the
/// fault, the run exits 1 and the error says they were tried.
fn fails_after_recoveries(delivery: &str) {
    let args = [
        "--state-dir",
        "state",
        "--set",
        "checkpoint_interval=50ms",
        "--set",
        &format!("delivery={delivery}"),
    ]
    .map(String::from);
    let (dir, code, errors) = run(&args);
    assert_eq!(code, Some(1), "{errors:?}");
    assert_eq!(
        errors,
        [format!(
            "error[SLC-ENG-004]: pipeline fault (recover from the last checkpoint): {FAILURE}; \
             the run was recovered from the last checkpoint 3 times and failed the same way \
             each time"
        )]
    );
    assert_eq!(temp_files(dir.path()), Vec::<std::path::PathBuf>::new());
}

#[test]
fn division_by_zero_without_checkpoints_exits_1_and_publishes_nothing() {
    let (dir, code, errors) = run(&[]);
    assert_eq!(code, Some(1));
    assert_eq!(
        errors,
        [format!("error[SLC-ENG-004]: pipeline halted: {FAILURE}")]
    );
    assert_eq!(entries(&dir.path().join("out")), Vec::<String>::new());
    assert_eq!(temp_files(dir.path()), Vec::<std::path::PathBuf>::new());
}

#[test]
fn division_by_zero_exactly_once_exits_1_after_recoveries() {
    fails_after_recoveries("exactly_once");
}

/// At-least-once must never drop input: with checkpoints the failed cycle
/// is a consistency fault, the CLI's recoveries replay it and fail the same
/// way, and the run exits 1 naming the failure (it used to exit 0 with the
/// failed cycles' rows missing).
#[test]
fn division_by_zero_at_least_once_with_checkpoints_exits_1() {
    fails_after_recoveries("at_least_once");
}

/// Run `script` in a fresh directory prepared by `prepare`; the exit status
/// and the `error[...]` lines of stderr.
fn run_script(script: &str, prepare: impl FnOnce(&Path)) -> (Option<i32>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    std::fs::write(dir.path().join("pipeline.sql"), script).unwrap();
    let (status, stderr) = Run::spawn(sluice(dir.path(), &[])).wait(WATCHDOG);
    let errors = stderr
        .lines()
        .filter(|l| l.starts_with("error["))
        .map(String::from)
        .collect();
    (status.code(), errors)
}

/// A malformed CSV row ends the run with the connector's code: it used to
/// be flattened to a string at the reader thread and reported as
/// `SLC-ENG-005`.
#[test]
fn a_malformed_csv_row_exits_1_with_the_connectors_code() {
    let (code, errors) = run_script(
        "CREATE SOURCE nums (id BIGINT, v BIGINT) \
             WITH (connector = 'file', path = 'nums.csv', format = 'csv');
         CREATE SINK nums_out FROM nums WITH (connector = 'file', path = 'out/nums.csv');",
        |dir| std::fs::write(dir.join("nums.csv"), "id,v\n1,10\n2,2O\n3,30\n").unwrap(),
    );
    assert_eq!(code, Some(1), "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert!(
        e.starts_with("error[SLC-CONN-002]: pipeline halted: source 'nums': ")
            && e.ends_with("nums.csv:3: column 'v': cannot parse '2O' as Int64"),
        "{e}"
    );
}

/// A sink whose file cannot be created ends the run with the I/O error's
/// code: it used to be reported as a catalog error and a generic halt.
#[test]
fn a_sink_io_failure_exits_1_with_the_io_code() {
    let (code, errors) = run_script(
        "CREATE SOURCE nums (id BIGINT, v BIGINT) \
             WITH (connector = 'file', path = 'nums.csv', format = 'csv');
         CREATE SINK nums_out FROM nums WITH (connector = 'file', path = 'blocker/nums.csv');",
        |dir| {
            std::fs::write(dir.join("nums.csv"), "id,v\n1,10\n").unwrap();
            // A regular file where the sink's directory would have to be.
            std::fs::write(dir.join("blocker"), "x").unwrap();
        },
    );
    assert_eq!(code, Some(1), "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert!(
        e.starts_with("error[SLC-CONN-001]: pipeline halted: sink 'nums_out': ")
            && e.contains("blocker"),
        "{e}"
    );
}
