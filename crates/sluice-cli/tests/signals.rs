//! SIGINT and SIGTERM during `sluice run`, under each delivery mode.
//!
//! Each test signals a run once its output is growing, then checks the
//! exit status (130 / 143), the two lines printed, that no temporary sink
//! file is left, exactly what the sink folder holds, and that a rerun ends
//! with the output of an uninterrupted run: byte for byte without
//! checkpoints (it starts over) and under exactly-once (it resumes), every
//! row under at-least-once. A second signal while the clean stop waits on
//! a blocked source ends the process at once. Every wait has a watchdog.

mod support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use support::*;

const ROWS: u64 = 300_000;
/// Longest a run may take before the test fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// No state directory: sinks publish atomically at the end.
    NoCheckpoints,
    AtLeastOnce,
    ExactlyOnce,
}

impl Mode {
    fn args(self) -> Vec<String> {
        let delivery = match self {
            Mode::NoCheckpoints => return Vec::new(),
            Mode::AtLeastOnce => "delivery=at_least_once",
            Mode::ExactlyOnce => "delivery=exactly_once",
        };
        [
            "--state-dir",
            "state",
            // No periodic checkpoint before the signal: the one the stop
            // reports is the final checkpoint it took.
            "--set",
            "checkpoint_interval=1h",
            "--set",
            delivery,
        ]
        .map(String::from)
        .to_vec()
    }
}

fn setup(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    write_events(dir, ROWS, 42);
    std::fs::write(
        dir.join("pipeline.sql"),
        format!("{EVENTS_SOURCE}\n{WINDOWS}"),
    )
    .unwrap();
}

/// Whether the run's output is growing where this mode writes it: the
/// hidden temporary files without checkpoints, the staged epoch files under
/// exactly-once, the final files under at-least-once.
fn output_growing(dir: &Path, mode: Mode) -> bool {
    let out = dir.join("out");
    let hidden = |marker: &str| {
        entries(&out).iter().any(|n| {
            n.contains(marker) && std::fs::metadata(out.join(n)).is_ok_and(|m| m.len() > 0)
        })
    };
    // Under at-least-once rows are appended to the final files as they
    // come; staged files are accepted too, so the test does not depend on
    // how a sink stages them.
    match mode {
        Mode::NoCheckpoints => hidden(".tmp-"),
        Mode::ExactlyOnce => hidden(".epoch-"),
        Mode::AtLeastOnce => {
            WINDOW_FILES.iter().any(|f| has_rows(&out.join(f)))
                || hidden(".epoch-")
                || hidden(".tmp-")
        }
    }
}

fn signal_mid_run(mode: Mode, signal: i32) {
    let (name, code) = match signal {
        libc::SIGINT => ("SIGINT", 130),
        libc::SIGTERM => ("SIGTERM", 143),
        _ => unreachable!(),
    };
    let base = tempfile::tempdir().unwrap();
    let reference = base.path().join("reference");
    let dir = base.path().join("signalled");
    setup(&reference);
    setup(&dir);
    let (status, stderr) = Run::spawn(sluice(&reference, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let expected = outputs(&reference, WINDOW_FILES);

    let mut run = Run::spawn(sluice(&dir, &mode.args()));
    let deadline = Instant::now() + WATCHDOG;
    while !output_growing(&dir, mode) && run.running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        run.running(),
        "the run ended before it could be signalled: {}",
        run.stderr()
    );
    assert!(output_growing(&dir, mode), "no output within {WATCHDOG:?}");
    run.signal(signal);
    let (status, stderr) = run.wait(WATCHDOG);
    assert_eq!(
        status.code(),
        Some(code),
        "{mode:?} {name}; stderr:\n{stderr}"
    );
    assert!(!stderr.contains("error["), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sluice: "))
        .collect();
    let sinks = "sinks 'sevens_out', 'agg_out', 'sessions_out'";
    let stopped = match mode {
        Mode::NoCheckpoints => format!(
            "sluice: {name}: stopped; checkpointing is off, so the output of {sinks} was \
             discarded and no sink file was published; a rerun starts over"
        ),
        Mode::AtLeastOnce => format!(
            "sluice: {name}: stopped at checkpoint {}; the output delivered so far stays in \
             {sinks} (at_least_once); rerun with the same --state-dir to resume",
            newest_checkpoint(&dir.join("state")).unwrap()
        ),
        Mode::ExactlyOnce => format!(
            "sluice: {name}: stopped at checkpoint {}; the output of {sinks} is exactly what it \
             committed (exactly_once); rerun with the same --state-dir to resume",
            newest_checkpoint(&dir.join("state")).unwrap()
        ),
    };
    assert_eq!(
        said,
        [
            format!(
                "sluice: received {name}: stopping intake and shutting down \
                 (a second signal aborts at once)"
            ),
            stopped
        ],
        "{mode:?}"
    );
    assert_eq!(temp_files(&dir), Vec::<std::path::PathBuf>::new());
    let out = dir.join("out");
    if mode == Mode::NoCheckpoints {
        // Nothing under a final name, nothing hidden either.
        assert_eq!(entries(&out), Vec::<String>::new());
    } else {
        assert_eq!(entries(&out), WINDOW_FILES);
        // What the stop kept is the start of the uninterrupted output (the
        // run was not replayed), and the run was stopped before its end.
        let got = outputs(&dir, WINDOW_FILES);
        for ((file, want), (_, have)) in expected.iter().zip(&got) {
            assert!(
                want.starts_with(have.as_str()),
                "{mode:?} {file}: not a prefix"
            );
        }
        assert!(
            expected
                .iter()
                .zip(&got)
                .any(|((_, w), (_, h))| h.len() < w.len()),
            "{mode:?}: the signalled run wrote everything"
        );
        // The final checkpoint (the only one) committed rows.
        assert!(
            WINDOW_FILES.iter().any(|f| has_rows(&out.join(f))),
            "{mode:?}: the stop committed nothing"
        );
    }

    // The rerun completes the output.
    let (status, stderr) = Run::spawn(sluice(&dir, &mode.args())).wait(WATCHDOG);
    assert!(status.success(), "rerun: {stderr}");
    assert_eq!(temp_files(&dir), Vec::<std::path::PathBuf>::new());
    assert_eq!(entries(&out), WINDOW_FILES);
    for ((file, want), (_, have)) in expected.iter().zip(&outputs(&dir, WINDOW_FILES)) {
        match mode {
            Mode::AtLeastOnce => assert_nothing_missing(file, want, have, "after the rerun"),
            _ => assert!(
                want == have,
                "{mode:?} {file}: the rerun differs from the uninterrupted run"
            ),
        }
    }
}

#[test]
fn sigterm_without_checkpoints_publishes_nothing() {
    signal_mid_run(Mode::NoCheckpoints, libc::SIGTERM);
}

#[test]
fn sigint_without_checkpoints_publishes_nothing() {
    signal_mid_run(Mode::NoCheckpoints, libc::SIGINT);
}

#[test]
fn sigterm_at_least_once_keeps_delivered_output_and_resumes() {
    signal_mid_run(Mode::AtLeastOnce, libc::SIGTERM);
}

#[test]
fn sigint_at_least_once_keeps_delivered_output_and_resumes() {
    signal_mid_run(Mode::AtLeastOnce, libc::SIGINT);
}

#[test]
fn sigterm_exactly_once_commits_and_resumes_to_identical_bytes() {
    signal_mid_run(Mode::ExactlyOnce, libc::SIGTERM);
}

#[test]
fn sigint_exactly_once_commits_and_resumes_to_identical_bytes() {
    signal_mid_run(Mode::ExactlyOnce, libc::SIGINT);
}

/// Bytes waiting in a pipe.
fn pending(fifo: &std::fs::File) -> i32 {
    use std::os::unix::io::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer.
    let rc = unsafe { libc::ioctl(fifo.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0);
    n
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + WATCHDOG;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The source reads a FIFO that the test keeps open and quiet, so the
/// final checkpoint of the first signal waits for a barrier that cannot
/// come (for up to the 300 s alignment timeout). The second signal must end
/// the process at once, with its own conventional status.
fn second_signal_aborts(delivery: &str, first: i32, second: i32) {
    let (first_name, second_name, code) = match (first, second) {
        (libc::SIGTERM, libc::SIGINT) => ("SIGTERM", "SIGINT", 130),
        (libc::SIGINT, libc::SIGTERM) => ("SIGINT", "SIGTERM", 143),
        _ => unreachable!(),
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let fifo_path = dir.join("events.csv");
    let c_path = std::ffi::CString::new(fifo_path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Read-write, so opening does not wait for a reader and the source
    // never sees end of file.
    let mut fifo = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo_path)
        .unwrap();
    std::fs::write(
        dir.join("pipeline.sql"),
        "CREATE SOURCE events (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) \
         WITH (connector = 'file', path = 'events.csv', format = 'csv', batch_size = '1000');
         CREATE STREAM sevens AS SELECT id, k, v, ts FROM events WHERE v % 7 = 0;
         CREATE SINK sevens_out FROM sevens WITH (connector = 'file', path = 'out/sevens.csv');",
    )
    .unwrap();
    // CREATE SOURCE checks the header, then the started pipeline reads
    // the file again from its start.
    fifo.write_all(b"id,k,v,ts\n").unwrap();
    let args: Vec<String> = [
        "--state-dir",
        "state",
        "--set",
        "checkpoint_interval=1h",
        "--set",
        "checkpoint_alignment_timeout=300s",
        "--set",
        &format!("delivery={delivery}"),
    ]
    .map(String::from)
    .to_vec();
    let mut run = Run::spawn(sluice(dir, &args));
    wait_until("CREATE SOURCE read the header", || pending(&fifo) == 0);
    let mut rows = String::from("id,k,v,ts\n");
    for id in 0..1500i64 {
        rows.push_str(&format!(
            "{id},{},{},{}\n",
            id % 10,
            id % 100,
            1_700_000_000_000 + id * 10
        ));
    }
    fifo.write_all(rows.as_bytes()).unwrap();
    // The first batch (1000 rows) reaches the sink; the reader then blocks
    // reading the rest of the second.
    wait_until("the first batch reached the sink", || {
        has_rows(&dir.join("out/sevens.csv"))
            || entries(&dir.join("out"))
                .iter()
                .any(|n| n.contains(".epoch-"))
    });
    wait_until("the pipeline read the rows", || pending(&fifo) == 0);
    std::thread::sleep(Duration::from_millis(100));
    assert!(run.running(), "{}", run.stderr());

    run.signal(first);
    assert!(
        run.wait_for_stderr(&format!("received {first_name}: stopping intake"), WATCHDOG),
        "{}",
        run.stderr()
    );
    // The clean stop now waits on the source's barrier.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        run.running(),
        "the clean stop did not wait: {}",
        run.stderr()
    );
    run.signal(second);
    // Far below the 300 s the clean stop would wait.
    let (status, stderr) = run.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(code), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sluice: "))
        .collect();
    assert_eq!(
        said,
        [
            format!(
                "sluice: received {first_name}: stopping intake and shutting down \
                 (a second signal aborts at once)"
            ),
            format!(
                "sluice: received {second_name} while shutting down: aborted at once; sinks \
                 were not settled, 0 temporary sink file(s) removed; with --state-dir, a rerun \
                 resumes from the last committed checkpoint"
            ),
        ]
    );
    assert_eq!(temp_files(dir), Vec::<std::path::PathBuf>::new());
}

#[test]
fn second_signal_aborts_at_once_at_least_once() {
    second_signal_aborts("at_least_once", libc::SIGTERM, libc::SIGINT);
}

#[test]
fn second_signal_aborts_at_once_exactly_once() {
    second_signal_aborts("exactly_once", libc::SIGINT, libc::SIGTERM);
}
