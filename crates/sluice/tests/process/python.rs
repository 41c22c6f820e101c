//! Supervised Python process functions: a handler written in Python,
//! started by the engine in a bubblewrap sandbox, gives the native
//! handler's results; the sandbox holds; a dead or hung worker is
//! restarted; every failure is an error that names its cause.
//!
//! These tests need `python3` with the `sluice_worker` SDK and `bwrap`
//! (`.ci/run` installs them). Without them they fail: a missing
//! interpreter or sandbox is never a silent pass.

use std::path::PathBuf;

use proptest::prelude::*;
use sluice::process::benchmark::activation_log_descriptor;
use sluice::process::ProcessFunctionDescriptor;
use sluice::remote::PythonDeployment;

use crate::common::{
    collect, disordered_events, events_batch, open, oracle, run_log_pipeline, Event, LogRow,
};

/// `python/examples/<name>` in the repository.
pub fn example(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
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
    let rows = run_log_pipeline(&db, "py_log", events, batch_size).await;
    let stats = db.process_worker_stats("py_log").unwrap();
    assert_eq!((stats.starts, stats.errors), (1, 0), "{stats:?}");
    rows
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

/// A package in a fresh directory holding `files` (name, text).
fn package(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// A handler that does, on its first input, what its `amount` says, and
/// lets whatever that raises fail the call. If the attempt succeeds it
/// emits -1: the sandbox leaked.
const HOSTILE: &str = r#"
import os, socket
import pyarrow as pa
import sluice_worker

def attempt(what):
    if what == 1:
        open("/escaped", "w").write("x")
    elif what == 2:
        open("/sluice/package/escaped", "w").write("x")
    elif what == 3:
        socket.create_connection(("1.1.1.1", 80), timeout=2)
    elif what == 4:
        socket.create_connection(("127.0.0.1", HOST_PORT), timeout=2)
    elif what == 5:
        open("/etc/passwd").read()
    elif what == 6:
        open("HOST_SECRET").read()
    elif what == 7:
        status = open("/proc/self/status").read()
        assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status, status
        os.setuid(0)
    elif what == 8:
        open("/tmp/scratch", "w").write("fine")
        return

class Hostile(sluice_worker.Handler):
    def process(self, call):
        out = call.results()
        amounts = call.input("amount").to_pylist()
        for i, a in enumerate(amounts):
            attempt(a)
            out.emit(i, {"value": -1 if a != 8 else 8})
        return out
"#;

fn value_descriptor(name: &str) -> ProcessFunctionDescriptor {
    sluice::process::benchmark::descriptor(name)
}

/// Run one event with `amount` through a function; the pipeline's error
/// or the values it emitted.
async fn run_one(
    db: &sluice::Database,
    function: &str,
    amount: i64,
) -> Result<Vec<i64>, sluice::Error> {
    db.execute(&format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM out AS PROCESS {function} FROM ev;"
    ))
    .await?;
    let sub = db.subscribe("out").await?;
    let src = db.source("ev").await?;
    src.push(events_batch(&[(1, amount, 1_000)])).await?;
    src.finish().await.ok();
    let r = db.run_to_completion().await;
    db.shutdown().await.ok();
    let values: Vec<i64> = collect(sub)
        .await
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<sluice::arrow::array::Int64Array>()
                .map(|c| c.values().to_vec())
                .unwrap_or_default()
        })
        .collect();
    r.map(|_| values)
}

/// Every escape a handler might try fails inside the sandbox, and the
/// handler's own error (its traceback) reaches the engine's log.
#[tokio::test]
async fn the_sandbox_refuses_writes_network_outside_reads_and_privileges() {
    // A secret file and a listening port of the host, outside the sandbox.
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "the engine's secret").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = HOSTILE
        .replace("HOST_PORT", &port.to_string())
        .replace("HOST_SECRET", &secret.path().display().to_string());
    let pkg = package(&[("hostile.py", &code)]);
    let cases: [(i64, &[&str]); 8] = [
        (1, &["OSError", "Read-only file system"]),
        (2, &["OSError", "Read-only file system"]),
        (3, &["OSError", "Network is unreachable"]),
        (4, &["ConnectionRefusedError"]),
        (5, &["FileNotFoundError", "/etc/passwd"]),
        (6, &["FileNotFoundError", "/tmp/"]),
        // No capabilities, no new privileges, and uid 0 does not exist in
        // the sandbox's user namespace.
        (7, &["OSError", "Invalid argument"]),
        (8, &[]),
    ];
    for (amount, words) in cases {
        let db = open(None, &[]).await;
        let deployment = PythonDeployment::new(pkg.path(), "hostile:Hostile");
        let mut d = value_descriptor("hostile");
        d.limits.max_activations_per_call = 16;
        db.register_python_process_function(d, deployment)
            .await
            .unwrap();
        let r = run_one(&db, "hostile", amount).await;
        if words.is_empty() {
            assert_eq!(r.unwrap(), vec![8], "the private /tmp is writable");
        } else {
            let e = match r {
                Ok(v) => panic!("attempt {amount} escaped the sandbox: {v:?}"),
                Err(e) => e.to_string(),
            };
            assert!(
                e.contains("SLC-RMT-011") && e.contains("handler error"),
                "attempt {amount}: {e}"
            );
            for w in words {
                assert!(e.contains(w), "attempt {amount}: missing '{w}' in {e}");
            }
            // The worker's stderr reaches the log through a reader thread,
            // which may not have caught up when the call's error returns.
            let mut log = String::new();
            for _ in 0..100 {
                log = db.python_worker_log("hostile", 50).unwrap();
                if log.contains("Traceback") && log.contains(words[0]) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            assert!(
                log.contains("Traceback") && log.contains(words[0]),
                "attempt {amount}: the log holds the handler's traceback:\n{log}"
            );
        }
    }
    drop(listener);
}

/// Crashes its worker on amount 667 and hangs on amount 666; otherwise
/// echoes the amount.
const FRAGILE: &str = r#"
import os, time
import sluice_worker

class Fragile(sluice_worker.Handler):
    def process(self, call):
        out = call.results()
        for i, a in enumerate(call.input("amount").to_pylist()):
            if a == 667:
                os._exit(3)
            if a == 666:
                time.sleep(30)
            out.emit(i, {"value": a})
        return out
"#;

/// A worker killed mid-call and a worker past its deadline: the call
/// applies nothing, the pipeline halts with the error, and the supervisor
/// starts a new worker (a crash is counted as one, a hang is killed).
#[tokio::test]
async fn a_dead_or_hung_worker_fails_its_call_and_is_restarted() {
    let pkg = package(&[("fragile.py", FRAGILE)]);
    let quick = sluice::remote::RemoteLimits {
        call_deadline: std::time::Duration::from_millis(800),
        ..sluice::remote::RemoteLimits::default()
    };
    for (amount, words, crashes, kills) in [
        (
            667,
            vec!["SLC-RMT-012", "the session with the worker at unix:"],
            1,
            0,
        ),
        (
            666,
            vec!["SLC-RMT-008", "got no answer within its deadline of 800ms"],
            0,
            1,
        ),
    ] {
        let db = open(None, &[]).await;
        let mut deployment = PythonDeployment::new(pkg.path(), "fragile:Fragile");
        deployment.max_backoff = std::time::Duration::from_millis(200);
        db.register_python_process_function_with(value_descriptor("fragile"), deployment, quick)
            .await
            .unwrap();
        let e = match run_one(&db, "fragile", amount).await {
            Ok(v) => panic!("amount {amount}: the call succeeded with {v:?}"),
            Err(e) => e.to_string(),
        };
        for w in &words {
            assert!(e.contains(w), "amount {amount}: missing '{w}' in {e}");
        }
        // The supervisor brings a new worker up.
        let mut stats = db.process_worker_stats("fragile").unwrap();
        for _ in 0..500 {
            if stats.starts >= 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            stats = db.process_worker_stats("fragile").unwrap();
        }
        assert_eq!(
            (stats.crashes, stats.kills),
            (crashes, kills),
            "amount {amount}: {stats:?}"
        );
        assert!(
            stats.starts >= 2 && stats.restarts >= 1,
            "amount {amount}: {stats:?}"
        );
        assert_eq!(
            (stats.calls, stats.errors),
            (0, 1),
            "amount {amount}: {stats:?}"
        );
    }
}

const STALLING: &str = r#"
import os, signal, threading, time
import sluice_worker

def stop_later():
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGSTOP)

class Stalling(sluice_worker.Handler):
    def process(self, call):
        out = call.results()
        for i, a in enumerate(call.input("amount").to_pylist()):
            if a == 13:
                threading.Thread(target=stop_later, daemon=True).start()
            out.emit(i, {"value": a})
        return out
"#;

/// A worker that stops answering while no call runs (here it stops
/// itself with SIGSTOP after answering): neither a crash nor a deadline
/// sees it, the health checks do. After three failed checks in a row it is
/// killed and a new worker starts, whose checks pass.
#[tokio::test]
async fn a_worker_that_stops_answering_while_idle_is_killed_by_health_checks() {
    let pkg = package(&[("stalling.py", STALLING)]);
    let db = open(None, &[]).await;
    let mut deployment = PythonDeployment::new(pkg.path(), "stalling:Stalling");
    deployment.health_interval = std::time::Duration::from_millis(100);
    deployment.max_backoff = std::time::Duration::from_millis(200);
    db.register_python_process_function(value_descriptor("stalling"), deployment)
        .await
        .unwrap();
    assert_eq!(run_one(&db, "stalling", 13).await.unwrap(), vec![13]);
    let mut stats = db.process_worker_stats("stalling").unwrap();
    for _ in 0..1_000 {
        if stats.starts >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        stats = db.process_worker_stats("stalling").unwrap();
    }
    assert_eq!(
        (
            stats.starts,
            stats.kills,
            stats.crashes,
            stats.health_failures
        ),
        (2, 1, 0, 3),
        "{stats:?}"
    );
    // The new worker answers its checks.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let later = db.process_worker_stats("stalling").unwrap();
    assert_eq!((later.starts, later.health_failures), (2, 3), "{later:?}");
}

/// Each way a deployment can be unusable is refused when it is declared,
/// naming what is wrong; nothing is registered.
#[tokio::test]
async fn a_bad_deployment_is_refused_by_name() {
    let broken = package(&[(
        "broken.py",
        "import sluice_worker\nraise RuntimeError('cannot load my model')\n",
    )]);
    let fine = package(&[(
        "fine.py",
        "import sluice_worker\nclass H(sluice_worker.Handler):\n    pass\n",
    )]);
    let cases: Vec<(PythonDeployment, &str, Vec<&str>)> = vec![
        (
            PythonDeployment::new(fine.path(), "fine"),
            "SLC-RMT-015",
            vec!["entry 'fine' must be module:Class"],
        ),
        (
            PythonDeployment::new(fine.path(), "missing:H"),
            "SLC-RMT-015",
            vec!["no missing.py or missing/__init__.py"],
        ),
        (
            PythonDeployment::new("/nonexistent/package", "fine:H"),
            "SLC-RMT-015",
            vec!["python deployment '/nonexistent/package'"],
        ),
        (
            PythonDeployment {
                python: Some("/nonexistent/python3".into()),
                ..PythonDeployment::new(fine.path(), "fine:H")
            },
            "SLC-RMT-015",
            vec!["'/nonexistent/python3'", "cannot run the interpreter"],
        ),
        (
            PythonDeployment::new(broken.path(), "broken:Broken"),
            "SLC-RMT-017",
            vec![
                "the python worker for 'bad' did not start",
                "exited before it was ready",
                "RuntimeError: cannot load my model",
            ],
        ),
        (
            PythonDeployment::new(fine.path(), "fine:Missing"),
            "SLC-RMT-017",
            vec!["module 'fine' has no 'Missing'"],
        ),
    ];
    let db = open(None, &[]).await;
    for (deployment, code, words) in cases {
        let mut d = deployment;
        d.startup_timeout = std::time::Duration::from_secs(10);
        let shown = format!("{d:?}");
        let e = db
            .register_python_process_function(value_descriptor("bad"), d)
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{shown}: {e}");
        let text = e.to_string();
        for w in words {
            assert!(text.contains(w), "{shown}: missing '{w}' in {text}");
        }
    }
    assert!(db.process_worker_stats("bad").is_none());
    db.shutdown().await.unwrap();
}

/// A deployment's identity is its files (by relative path), interpreter,
/// SDK and entry: a moved copy restores the checkpoint, a changed file is
/// refused by name.
#[tokio::test]
async fn state_is_restored_under_a_moved_deployment_but_not_a_changed_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ev.csv");
    std::fs::write(
        &data,
        "key,amount,ts\n1,5,1970-01-01 00:00:01\n2,6,1970-01-01 00:00:02\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let source =
        std::fs::read_to_string(example("activation_log").join("activation_log.py")).unwrap();
    let first = package(&[("activation_log.py", &source)]);
    let moved = package(&[("activation_log.py", &source)]);
    let changed = package(&[("activation_log.py", &format!("{source}\n# a change\n"))]);
    for (n, pkg) in [first.path(), moved.path(), changed.path()]
        .into_iter()
        .enumerate()
    {
        let db = open(Some(&state), &[("checkpoint_interval", "1h")]).await;
        db.register_python_process_function(
            activation_log_descriptor("py_log"),
            PythonDeployment::new(pkg, "activation_log:ActivationLog"),
        )
        .await
        .unwrap();
        db.execute(&format!(
            "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
               WITH (connector = 'file', path = '{}', format = 'csv');
             CREATE STREAM out AS PROCESS py_log FROM ev;",
            data.display()
        ))
        .await
        .unwrap();
        let r = db.run_to_completion().await;
        if n < 2 {
            r.unwrap();
            db.shutdown().await.unwrap();
        } else {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("the checkpointed state belongs to 'py_log' v1")
                    && e.contains("restoring state under a different binding is refused"),
                "{e}"
            );
            db.abort().await.ok();
        }
    }
}

/// Declared in SQL alone (as a `sluice run` script would), the vectorized
/// Python fraud detector (`python/examples/fraud`) flags exactly what the
/// built-in native one flags, on generated disordered input.
#[tokio::test]
async fn a_python_function_declared_in_sql_matches_the_native_one() {
    use sluice::process::benchmark::{descriptor, FraudDetector};
    let db = open(None, &[]).await;
    db.register_process_function(descriptor("fraud_native"), || FraudDetector {
        threshold: 1000,
        window_ms: 10_000,
    })
    .await
    .unwrap();
    db.execute(&format!(
        "CREATE PROCESS FUNCTION fraud_py VERSION 1 (key BIGINT NOT NULL, amount BIGINT NOT NULL)
           KEY (key) RETURNS (value BIGINT NOT NULL)
           WITH (runtime = 'python', path = '{}', entry = 'fraud:Detector');
         CREATE SOURCE ev (key BIGINT NOT NULL, amount BIGINT NOT NULL, ts TIMESTAMP NOT NULL,
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND);
         CREATE STREAM native AS PROCESS fraud_native FROM ev;
         CREATE STREAM py AS PROCESS fraud_py FROM ev;",
        example("fraud").display()
    ))
    .await
    .unwrap();
    // Read both outputs while the pipeline runs: a subscriber that is not
    // read slows the pipeline (backpressure) until it is.
    let native = tokio::spawn(collect(db.subscribe("native").await.unwrap()));
    let py = tokio::spawn(collect(db.subscribe("py").await.unwrap()));
    let src = db.source("ev").await.unwrap();
    // A fixed pseudo-random walk: keys 0..7, amounts 0..2000, time moving
    // forward by up to 3 s with up to 1.5 s of disorder.
    let mut x: u64 = 0x5eed;
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let mut t = 0i64;
    let mut events = Vec::new();
    for _ in 0..3_000 {
        t += next(3_000) as i64;
        events.push((
            next(7) as i64,
            next(2_000) as i64,
            (t - next(1_500) as i64).max(0),
        ));
    }
    for chunk in events.chunks(97) {
        src.push(events_batch(chunk)).await.unwrap();
    }
    src.finish().await.unwrap();
    db.run_to_completion().await.unwrap();
    db.shutdown().await.unwrap();
    let values = |batches: Vec<sluice::arrow::record_batch::RecordBatch>| -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<sluice::arrow::array::Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect()
    };
    let (want, got) = (values(native.await.unwrap()), values(py.await.unwrap()));
    assert!(want.len() > 50, "the input raises alerts: {}", want.len());
    assert_eq!(got, want);
}

/// Every option of `CREATE PROCESS FUNCTION` that is wrong is refused by
/// name before anything starts.
#[tokio::test]
async fn each_bad_process_function_option_is_refused_by_name() {
    let db = open(None, &[]).await;
    let head = "CREATE PROCESS FUNCTION f VERSION 1 (key BIGINT, amount BIGINT) KEY (key) RETURNS (value BIGINT)";
    let python = format!(
        "runtime = 'python', path = '{}', entry = 'fraud:Detector'",
        example("fraud").display()
    );
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "process function 'f' requires option 'runtime'"),
        (
            "runtime = 'jvm'".into(),
            "option 'runtime' must be 'python' or 'remote_rust', found 'jvm'",
        ),
        (
            "runtime = 'native'".into(),
            "runtime 'native' handlers are Rust code",
        ),
        (
            "runtime = 'python', entry = 'fraud:Detector'".into(),
            "requires option 'path'",
        ),
        (
            "runtime = 'remote_rust'".into(),
            "requires option 'endpoint'",
        ),
        (
            format!("{python}, endpoint = 'unix:/x'"),
            "option 'endpoint' applies to runtime 'remote_rust', not 'python'",
        ),
        (
            "runtime = 'remote_rust', endpoint = 'unix:/x', path = 'p'".into(),
            "option 'path' applies to runtime 'python', not 'remote_rust'",
        ),
        (
            format!("{python}, colour = 'red'"),
            "unknown option 'colour'",
        ),
        (
            format!("{python}, determinism = 'sometimes'"),
            "option 'determinism' must be 'replay_safe' or 'non_deterministic', found 'sometimes'",
        ),
        (
            format!("{python}, initial_state = 'zero'"),
            "option 'initial_state' must be 'absent', 'null' or a BIGINT, found 'zero'",
        ),
        (
            format!("{python}, max_timers_per_key = '-1'"),
            "option 'max_timers_per_key' must be a non-negative integer, found '-1'",
        ),
        (
            format!("{python}, call_deadline = 'soon'"),
            "option 'call_deadline' must be a duration",
        ),
        (
            format!("{python}, startup_timeout = 'later'"),
            "option 'startup_timeout' must be a duration",
        ),
        (
            format!("{python}, health_interval = 'often'"),
            "option 'health_interval' must be a duration",
        ),
        (
            format!("{python}, health_interval = '1ms'"),
            "health_interval is 1ms; it must be from 10ms to one day",
        ),
        (
            format!("{python}, startup_timeout = '2days'"),
            "startup_timeout is 172800000ms; it must be from 10ms to one day",
        ),
        (
            "runtime = 'remote_rust', endpoint = 'tcp://8.8.8.8:1'".into(),
            "'8.8.8.8:1' is not a loopback address",
        ),
    ];
    for (options, words) in cases {
        let sql = if options.is_empty() {
            head.to_string()
        } else {
            format!("{head} WITH ({options})")
        };
        let e = db.execute(&sql).await.unwrap_err().to_string();
        assert!(e.contains(words), "{sql}\n  missing '{words}' in {e}");
    }
    assert!(db.process_functions().await.is_empty());
    assert!(db.process_worker_stats("f").is_none());
    db.shutdown().await.unwrap();
}
