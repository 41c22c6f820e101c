//! Crash recovery of the `sluice` binary: SIGKILL at random moments, restart
//! on the same state directory, and compare the sink files with an
//! uninterrupted run. `SLUICE_CRASH_KILLS` raises the number of kills.
//!
//! The process-function variant binds the built-in `activation_log` fixture,
//! whose output is its own activation log, and checks that replay after each
//! crash reproduced the same activation ids for the same callbacks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROWS: u64 = 200_000;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn write_input(dir: &Path) {
    let mut rng = Lcg(42);
    let mut out = String::with_capacity(ROWS as usize * 40);
    out.push_str("id,k,v,ts\n");
    for id in 0..ROWS {
        let k = rng.next() % 100;
        let v = rng.next() % 1000;
        // ~10 ms apart with up to 1.5 s of disorder, and a late straggler now and then.
        let base = 1_700_000_000_000 + id as i64 * 10;
        let jitter = (rng.next() % 1500) as i64;
        let ts = if id % 997 == 0 {
            base - 6_000
        } else {
            base - jitter
        };
        out.push_str(&format!("{id},{k},{v},{ts}\n"));
    }
    std::fs::write(dir.join("events.csv"), out).unwrap();
    std::fs::write(
        dir.join("pipeline.sql"),
        "CREATE SOURCE events (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) \
         WITH (connector = 'file', path = 'events.csv', format = 'csv', batch_size = '500');
         CREATE STREAM sevens AS SELECT id, k, v, ts FROM events WHERE v % 7 = 0;
         CREATE STREAM per_key AS SELECT k, tumble(ts, INTERVAL '5' SECOND) AS ws, \
             COUNT(*) AS n, SUM(v) AS total, MAX(v) AS hi \
             FROM events GROUP BY k, tumble(ts, INTERVAL '5' SECOND);
         CREATE STREAM sessions AS SELECT k, session(ts, INTERVAL '300' MILLISECOND) AS s, COUNT(*) AS n \
             FROM events WHERE k < 5 GROUP BY k, session(ts, INTERVAL '300' MILLISECOND);
         CREATE SINK sevens_out FROM sevens WITH (connector = 'file', path = 'out/sevens.csv');
         CREATE SINK agg_out FROM per_key WITH (connector = 'file', path = 'out/agg.csv');
         CREATE SINK sessions_out FROM sessions WITH (connector = 'file', path = 'out/sessions.json');",
    )
    .unwrap();
}

fn sluice(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.current_dir(dir)
        .arg("run")
        .args(args)
        .arg("pipeline.sql")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Events keyed by `key` with an `amount`, for the process-function pipeline.
fn write_process_input(dir: &Path) {
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
        "CREATE SOURCE events (key BIGINT, amount BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH (connector = 'file', path = 'events.csv', format = 'csv', batch_size = '256');
         CREATE STREAM big AS SELECT key, amount FROM events WHERE amount > 9;
         CREATE STREAM log AS PROCESS activation_log FROM big;
         CREATE SINK log_out FROM log WITH (connector = 'file', path = 'out/log.csv');",
    )
    .unwrap();
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

fn outputs(dir: &Path, files: &[&str]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|f| {
            let p = dir.join("out").join(f);
            (
                f.to_string(),
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            )
        })
        .collect()
}

fn newest_checkpoint(state: &Path) -> Option<PathBuf> {
    let root = state.join("checkpoints").join("checkpoints");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("MANIFEST").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn kill(mut child: Child) {
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
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
    let status = sluice(&reference, &[]).status().unwrap();
    assert!(status.success());
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
    let state_arg = state.display().to_string();
    let args = [
        "--state-dir",
        state_arg.as_str(),
        "--set",
        "checkpoint_interval=50ms",
        "--set",
    ];
    let delivery_arg = format!("delivery={delivery}");
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
        let mut child = sluice(&crashed, &[&args[..], &[delivery_arg.as_str()]].concat())
            .spawn()
            .unwrap();
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
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
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
        let running = matches!(child.try_wait(), Ok(None));
        let progressed = written() > before;
        kill(child);
        if running && progressed {
            killed_mid_stream += 1;
        }
        // Halfway, damage the newest checkpoint: recovery must fall back to the previous one.
        if i == kills / 2 && !corrupted {
            if let Some(cp) = newest_checkpoint(&state) {
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
    let out = sluice(&crashed, &[&args[..], &[delivery_arg.as_str()]].concat())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        killed_after_checkpoint > 0,
        "no kill happened after a checkpoint; the test proves nothing"
    );
    assert!(
        killed_mid_stream > 0,
        "no kill landed between the first output and the last; the test proves nothing"
    );
    let checkpoints = newest_checkpoint(&state)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
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
            let have: std::collections::HashSet<&str> = have.lines().collect();
            for line in want.lines() {
                assert!(
                    have.contains(line),
                    "{name}: row missing after {kills} kills: {line}"
                );
            }
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

const FILES: &[&str] = &["sevens.csv", "agg.csv", "sessions.json"];

#[test]
fn exactly_once_survives_sigkill() {
    crash_and_compare(write_input, FILES, "exactly_once", Check::Exact);
}

#[test]
fn at_least_once_loses_nothing_after_sigkill() {
    crash_and_compare(write_input, FILES, "at_least_once", Check::NothingMissing);
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
