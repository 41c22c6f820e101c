//! Crash recovery of the `sluice` binary: SIGKILL at random moments, restart
//! on the same state directory, and compare the sink files with an
//! uninterrupted run. `SLUICE_CRASH_KILLS` raises the number of kills.
//!
//! The process-function variant binds the built-in `activation_log` fixture,
//! whose output is its own activation log, and checks that replay after each
//! crash reproduced the same activation ids for the same callbacks.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::*;

const ROWS: u64 = 200_000;
/// Longest one run may take before the test fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(180);

fn write_input(dir: &Path) {
    write_events(dir, ROWS, 42);
    std::fs::write(
        dir.join("pipeline.sql"),
        format!("{EVENTS_SOURCE}\n{WINDOWS}"),
    )
    .unwrap();
}

/// Events keyed by `key` with an `amount`, for the process-function pipeline
/// (the built-in native `activation_log`).
fn write_process_input(dir: &Path) {
    write_activation_log_pipeline(dir, "", "activation_log");
}

/// The activation-log pipeline over keyed events: `declaration` declares
/// the function `name` (nothing for a built-in one).
fn write_activation_log_pipeline(dir: &Path, declaration: &str, name: &str) {
    let mut rng = Lcg(99);
    let mut out = String::from("key,amount,ts\n");
    for id in 0..PROCESS_ROWS {
        let key = rng.next() % 500;
        let amount = rng.next() % 100;
        let ts = 1_700_000_000_000 + id as i64 * 10 - (rng.next() % 800) as i64;
        out.push_str(&format!("{key},{amount},{ts}\n"));
    }
    std::fs::write(dir.join("events.csv"), out).unwrap();
    std::fs::write(
        dir.join("pipeline.sql"),
        format!(
            "{declaration}
         CREATE SOURCE events (key BIGINT, amount BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH (connector = 'file', path = 'events.csv', format = 'csv', batch_size = '256');
         CREATE STREAM big AS SELECT key, amount FROM events WHERE amount > 9;
         CREATE STREAM log AS PROCESS {name} FROM big;
         CREATE SINK log_out FROM log WITH (connector = 'file', path = 'out/log.csv');"
        ),
    )
    .unwrap();
}

/// The activation log's signature, for `CREATE PROCESS FUNCTION`.
const ACTIVATION_LOG_SIGNATURE: &str =
    "VERSION 1 (key BIGINT NOT NULL, amount BIGINT NOT NULL) KEY (key) \
     RETURNS (activation_id BIGINT NOT NULL, key BIGINT NOT NULL, callback VARCHAR NOT NULL, \
              count BIGINT NOT NULL, watermark BIGINT NOT NULL)";

/// The activation log in Python (`python/examples/activation_log`, the
/// same logic as the native fixture), which the engine runs in its
/// sandboxed, supervised worker: a SIGKILL of the engine takes the worker
/// with it (`--die-with-parent`), and the restarted engine starts a new one.
fn write_python_process_input(dir: &Path) {
    let package = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../python/examples/activation_log");
    let package = package.canonicalize().unwrap();
    write_activation_log_pipeline(
        dir,
        &format!(
            "CREATE PROCESS FUNCTION py_log {ACTIVATION_LOG_SIGNATURE} \
             WITH (runtime = 'python', path = '{}', entry = 'activation_log:ActivationLog');",
            package.display()
        ),
        "py_log",
    );
}

/// The native activation log served by a remote Rust worker in this test
/// process, on a socket in `dir`; the worker outlives every engine kill,
/// and each restarted engine opens a new session with it.
fn write_remote_process_input(dir: &Path) {
    use sluice::process::benchmark::{activation_log_descriptor, ActivationLog};
    use sluice::process::ProcessRuntime;
    use sluice::remote::{RemoteEndpoint, Worker};

    let socket = dir.join("worker.sock");
    let endpoint = format!("unix:{}", socket.display());
    let parsed: RemoteEndpoint = endpoint.parse().unwrap();
    let mut descriptor = activation_log_descriptor("remote_log");
    descriptor.runtime = ProcessRuntime::RemoteRust;
    let worker = Worker::new(descriptor, || ActivationLog { window_ms: 1_000 });
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(worker.serve(&parsed)).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the worker listens on {endpoint}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    write_activation_log_pipeline(
        dir,
        &format!(
            "CREATE PROCESS FUNCTION remote_log {ACTIVATION_LOG_SIGNATURE} \
             WITH (runtime = 'remote_rust', endpoint = '{endpoint}');"
        ),
        "remote_log",
    );
}

const PROCESS_ROWS: u64 = 50_000;

/// How a crashed run's files must relate to the uninterrupted run's.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    /// Byte-identical (exactly-once).
    Exact,
    /// Every expected row present, duplicates allowed (at-least-once).
    NothingMissing,
    /// An activation log: every id maps to one row, and the rows by id are
    /// the uninterrupted log (replay reproduced ids and callback order).
    SameActivations,
}

fn crash_and_compare(setup: fn(&Path), files: &[&str], delivery: &str, check: Check) {
    let base = tempfile::tempdir().unwrap();
    let reference = base.path().join("reference");
    let crashed = base.path().join("crashed");
    for d in [&reference, &crashed] {
        std::fs::create_dir_all(d).unwrap();
        setup(d);
    }
    let started = Instant::now();
    let (status, stderr) = Run::spawn(sluice(&reference, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let uninterrupted = started.elapsed();
    let expected = outputs(&reference, files);
    assert!(
        expected.iter().all(|(_, body)| body.lines().count() > 10),
        "the pipeline produces output"
    );

    let kills: usize = std::env::var("SLUICE_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let state = crashed.join("state");
    let args = [
        "--state-dir".to_string(),
        state.display().to_string(),
        "--set".to_string(),
        "checkpoint_interval=50ms".to_string(),
        "--set".to_string(),
        format!("delivery={delivery}"),
    ];
    let mut rng = Lcg(7);
    let window = uninterrupted.as_millis().max(200) as u64;
    let mut killed_after_checkpoint = 0;
    let mut killed_mid_stream = 0;
    let mut corrupted = false;
    let written = || -> u64 {
        files
            .iter()
            .filter_map(|f| std::fs::metadata(crashed.join("out").join(f)).ok())
            .map(|m| m.len())
            .sum()
    };
    for i in 0..kills {
        let mut run = Run::spawn(sluice(&crashed, &args));
        let before = written();
        // Odd kills at a random moment; even ones (the first included, so
        // that the first run cannot simply finish) once output appeared.
        if i % 2 == 1 {
            // Kill at a random moment.
            std::thread::sleep(Duration::from_millis(20 + rng.next() % window));
        } else {
            // Kill once this run has made progress that reached the output
            // (a committed checkpoint under exactly-once) but before the end,
            // so recovery starts mid-stream.
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && run.running() {
                if written() > before {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(rng.next() % 20));
        }
        if newest_checkpoint(&state).is_some() {
            killed_after_checkpoint += 1;
        }
        // `sluice run` exits when it is done, so a run still alive that has
        // written output since it started is killed mid-stream. (File sizes
        // alone cannot tell: at-least-once replays append duplicates.)
        let running = run.running();
        let progressed = written() > before;
        run.kill();
        if running && progressed {
            killed_mid_stream += 1;
        }
        // Halfway, damage the newest checkpoint: recovery must fall back to the previous one.
        if i == kills / 2 && !corrupted {
            if let Some(cp) = newest_checkpoint_dir(&state) {
                let blob = std::fs::read_dir(&cp)
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .find(|p| !p.ends_with("MANIFEST"));
                if let Some(blob) = blob {
                    let mut bytes = std::fs::read(&blob).unwrap();
                    if let Some(b) = bytes.last_mut() {
                        *b ^= 0xff;
                    }
                    std::fs::write(&blob, bytes).unwrap();
                    corrupted = true;
                }
            }
        }
    }
    let (status, stderr) = Run::spawn(sluice(&crashed, &args)).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    assert!(
        killed_after_checkpoint > 0,
        "no kill happened after a checkpoint; the test proves nothing"
    );
    assert!(
        killed_mid_stream > 0,
        "no kill landed between the first output and the last; the test proves nothing"
    );
    let checkpoints = newest_checkpoint(&state)
        .map(|id| id.to_string())
        .unwrap_or_default();
    eprintln!(
        "{delivery}: uninterrupted run {uninterrupted:?}; {kills} kills, {killed_after_checkpoint} after a checkpoint existed, {killed_mid_stream} with the output partly written; corrupted newest: {corrupted}; last checkpoint {checkpoints}"
    );
    let got = outputs(&crashed, files);
    for ((name, want), (_, have)) in expected.iter().zip(got.iter()) {
        if check == Check::SameActivations {
            same_activations(want, have);
        } else if check == Check::Exact {
            assert!(
                want == have,
                "{name}: differs from the uninterrupted run after {kills} kills"
            );
        } else {
            // At least once: every expected row is there (duplicates allowed).
            assert_nothing_missing(name, want, have, &format!("after {kills} kills"));
        }
    }
}

/// Compare activation logs (CSV with the id first) by activation id.
fn same_activations(want: &str, have: &str) {
    let mut by_id: std::collections::BTreeMap<i64, &str> = Default::default();
    for line in have.lines().skip(1) {
        let id: i64 = line
            .split(',')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("not an activation row: {line}"));
        if let Some(before) = by_id.insert(id, line) {
            assert_eq!(
                before, line,
                "activation {id} was replayed with a different key, callback or state"
            );
        }
    }
    let replayed: Vec<&str> = by_id.into_values().collect();
    let straight: Vec<&str> = want.lines().skip(1).collect();
    assert_eq!(
        replayed.len(),
        straight.len(),
        "activation count differs from the uninterrupted run"
    );
    for (i, (a, b)) in straight.iter().zip(&replayed).enumerate() {
        assert_eq!(a, b, "activation log differs at row {i}");
    }
}

#[test]
fn exactly_once_survives_sigkill() {
    crash_and_compare(write_input, WINDOW_FILES, "exactly_once", Check::Exact);
}

#[test]
fn at_least_once_loses_nothing_after_sigkill() {
    crash_and_compare(
        write_input,
        WINDOW_FILES,
        "at_least_once",
        Check::NothingMissing,
    );
}

#[test]
fn process_function_replays_identical_activations_after_sigkill() {
    crash_and_compare(
        write_process_input,
        &["log.csv"],
        "at_least_once",
        Check::SameActivations,
    );
}

#[test]
fn python_process_function_replays_identical_activations_after_sigkill() {
    crash_and_compare(
        write_python_process_input,
        &["log.csv"],
        "at_least_once",
        Check::SameActivations,
    );
}

#[test]
fn remote_process_function_replays_identical_activations_after_sigkill() {
    crash_and_compare(
        write_remote_process_input,
        &["log.csv"],
        "at_least_once",
        Check::SameActivations,
    );
}

/// Before any crash: the Python and remote Rust activation logs are the
/// native one, byte for byte (the same activations, ids, state and timers).
#[test]
fn every_runtime_writes_the_native_activation_log() {
    let base = tempfile::tempdir().unwrap();
    let mut logs = Vec::new();
    for (name, setup) in [
        ("native", write_process_input as fn(&Path)),
        ("python", write_python_process_input),
        ("remote", write_remote_process_input),
    ] {
        let dir = base.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        setup(&dir);
        let (status, stderr) = Run::spawn(sluice(&dir, &[])).wait(WATCHDOG);
        assert!(status.success(), "{name}: {stderr}");
        let log = std::fs::read_to_string(dir.join("out/log.csv")).unwrap();
        assert!(log.lines().count() > 1_000, "{name}: the log has rows");
        logs.push((name, log));
    }
    for (name, log) in &logs[1..] {
        assert!(
            *log == logs[0].1,
            "the {name} activation log differs from the native one"
        );
    }
}
