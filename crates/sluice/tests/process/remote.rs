//! Remote Rust process functions: a worker served over the remote protocol
//! gives exactly the native handler's activations, state, timers and
//! output on generated input; every way a worker can fail is an error that
//! names its cause and applies nothing.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluice::arrow::array::Int64Array;
use sluice::arrow::record_batch::RecordBatch;
use sluice::process::benchmark::{
    activation_log_descriptor, descriptor, output_schema, ActivationLog,
};
use sluice::process::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessFunctionDescriptor,
    ProcessFunctionLimits, ProcessRuntime, PythonEnvironmentBinding,
};
use sluice::remote::{RemoteEndpoint, RemoteLimits, Worker};
use sluice::Error;

use crate::common::{
    collect, disordered_events, events_batch, key_and_amount, open, oracle, run_log_pipeline, Event,
};

/// A worker on a Unix socket in its own thread and runtime, killed (every
/// connection dropped at once, as if the process died) when dropped or
/// when its kill switch is pulled.
pub struct RunningWorker {
    pub endpoint: String,
    kill: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl RunningWorker {
    pub fn start(worker: Worker) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.sock");
        let endpoint = format!("unix:{}", path.display());
        let parsed: RemoteEndpoint = endpoint.parse().unwrap();
        let kill = Arc::new(tokio::sync::Notify::new());
        let killed = Arc::clone(&kill);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                tokio::select! {
                    served = worker.serve(&parsed) => served.unwrap(),
                    _ = killed.notified() => {}
                }
            });
            rt.shutdown_background();
        });
        for _ in 0..500 {
            if path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(path.exists(), "the worker listens on {endpoint}");
        Self {
            endpoint,
            kill,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// What kills the worker when notified (from inside a handler).
    pub fn kill_switch(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.kill)
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.kill.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn remote(mut d: ProcessFunctionDescriptor) -> ProcessFunctionDescriptor {
    d.runtime = ProcessRuntime::RemoteRust;
    d
}

fn log_descriptor() -> ProcessFunctionDescriptor {
    remote(activation_log_descriptor("remote_log"))
}

async fn run_remote(
    worker: &RunningWorker,
    events: &[Event],
    batch_size: usize,
    per_cycle: usize,
) -> Vec<crate::common::LogRow> {
    let db = open(None, &[("max_batches_per_cycle", &per_cycle.to_string())]).await;
    db.register_remote_process_function(log_descriptor(), &worker.endpoint)
        .await
        .unwrap();
    run_log_pipeline(&db, "remote_log", events, batch_size).await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// The worker's results are the native handler's, call for call: the
    /// harness (native, batch by batch) is the oracle.
    #[test]
    fn a_remote_rust_worker_gives_the_native_results(
        events in disordered_events(120),
        batch_size in 1usize..12,
        per_cycle in prop::sample::select(vec![1usize, 3, 64]),
    ) {
        let worker = RunningWorker::start(Worker::new(log_descriptor(), || ActivationLog { window_ms: 1_000 }));
        let batches: Vec<Vec<Event>> = events.chunks(batch_size).map(<[Event]>::to_vec).collect();
        let expected = oracle(&batches, 1_000, 1_000, |e| e.1 % 3 != 0);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let got = rt.block_on(run_remote(&worker, &events, batch_size, per_cycle));
        prop_assert_eq!(got, expected);
    }
}

/// Every way a declaration is refused, with its code and words.
#[tokio::test]
async fn declaring_a_remote_function_refuses_each_bad_input_by_name() {
    let worker = RunningWorker::start(Worker::new(log_descriptor(), || ActivationLog {
        window_ms: 1_000,
    }));
    let db = open(None, &[]).await;
    let mut other_version = log_descriptor();
    other_version.version = 2;
    let python = {
        let mut d = log_descriptor();
        d.runtime = ProcessRuntime::Python(PythonEnvironmentBinding {
            package: "p".into(),
            version: "1".into(),
            files: Default::default(),
            ..Default::default()
        });
        d
    };
    let cases: Vec<(ProcessFunctionDescriptor, String, Option<&str>, Vec<String>)> = vec![
        (
            log_descriptor(),
            "tcp://10.1.2.3:9000".into(),
            Some("SLC-RMT-002"),
            vec!["'10.1.2.3:9000' is not a loopback address".into()],
        ),
        (
            log_descriptor(),
            "localhost:9000".into(),
            Some("SLC-RMT-001"),
            vec![
                "invalid remote endpoint 'localhost:9000'".into(),
                "host names are not resolved".into(),
            ],
        ),
        (
            log_descriptor(),
            "unix:/nonexistent/sluice.sock".into(),
            Some("SLC-RMT-003"),
            vec!["cannot reach the worker at unix:/nonexistent/sluice.sock".into()],
        ),
        (
            other_version,
            worker.endpoint.clone(),
            Some("SLC-RMT-006"),
            vec![
                "binding mismatch".into(),
                format!("'remote_log' version 2 (remote_rust, binding {})", {
                    let mut d = log_descriptor();
                    d.version = 2;
                    d.binding_hash()
                }),
                format!(
                    "'remote_log' version 1 (remote_rust, binding {})",
                    log_descriptor().binding_hash()
                ),
            ],
        ),
        (
            activation_log_descriptor("remote_log"),
            worker.endpoint.clone(),
            None,
            vec![
                "a remote worker serves runtime RemoteRust, but the descriptor declares native"
                    .into(),
            ],
        ),
        (
            python,
            worker.endpoint.clone(),
            None,
            vec!["but the descriptor declares python".into()],
        ),
    ];
    for (d, endpoint, code, words) in cases {
        let e = db
            .register_remote_process_function(d, &endpoint)
            .await
            .unwrap_err();
        if let Some(code) = code {
            assert_eq!(e.code(), code, "{endpoint}: {e}");
        }
        let text = format!(
            "{e} {:?}",
            std::error::Error::source(&e).map(|s| s.to_string())
        );
        for w in words {
            assert!(text.contains(&w), "{endpoint}: missing '{w}' in {text}");
        }
    }
    let shown = db.process_functions().await;
    assert!(shown.is_empty(), "nothing was registered or bound");
    db.register_remote_process_function(log_descriptor(), &worker.endpoint)
        .await
        .unwrap();
    db.shutdown().await.unwrap();
}

/// Sleeps `delay` on amount 666, kills its own worker on amount 667, and
/// echoes the key `rows_per_input` times on amount 5 and once otherwise.
struct Troublesome {
    delay: Duration,
    kill: Arc<parking_lot::Mutex<Option<Arc<tokio::sync::Notify>>>>,
    rows_per_input: usize,
}

impl NativeProcessFunction for Troublesome {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        activations
            .iter()
            .map(|a| {
                let (key, amount) = key_and_amount(&a.callback)?;
                if amount == 666 {
                    std::thread::sleep(self.delay);
                }
                if amount == 667 {
                    if let Some(k) = self.kill.lock().take() {
                        k.notify_one();
                    }
                    std::thread::sleep(Duration::from_secs(2));
                }
                Ok(ProcessActivationResult {
                    activation_id: a.id,
                    output: RecordBatch::try_new(
                        output_schema(),
                        vec![Arc::new(Int64Array::from(vec![
                            key;
                            if amount == 5 {
                                self.rows_per_input
                            } else {
                                1
                            }
                        ]))],
                    )
                    .ok(),
                    ..Default::default()
                })
            })
            .collect()
    }
}

fn troublesome_descriptor() -> ProcessFunctionDescriptor {
    let mut d = remote(descriptor("trouble"));
    d.limits = ProcessFunctionLimits {
        max_output_rows_per_activation: 4,
        ..ProcessFunctionLimits::default()
    };
    d
}

fn start_troublesome(
    delay: Duration,
    rows_per_input: usize,
    worker_limits: RemoteLimits,
) -> RunningWorker {
    let kill: Arc<parking_lot::Mutex<Option<Arc<tokio::sync::Notify>>>> = Arc::default();
    let k = Arc::clone(&kill);
    let w = RunningWorker::start(
        Worker::new(troublesome_descriptor(), move || Troublesome {
            delay,
            kill: Arc::clone(&k),
            rows_per_input,
        })
        .limits(worker_limits),
    );
    *kill.lock() = Some(w.kill_switch());
    w
}

/// Runs one good batch (delivered) and then `events` through the function;
/// returns the error the pipeline stopped with and the rows delivered after
/// the first batch.
async fn run_until_error(
    what: &str,
    worker: &RunningWorker,
    limits: RemoteLimits,
    events: &[Event],
) -> (Error, usize) {
    let db = open(None, &[]).await;
    db.register_remote_process_function_with(troublesome_descriptor(), &worker.endpoint, limits)
        .await
        .unwrap();
    db.execute(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM out AS PROCESS trouble FROM ev;",
    )
    .await
    .unwrap();
    let mut sub = db.subscribe("out").await.unwrap();
    let src = db.source("ev").await.unwrap();
    src.push(events_batch(&[(3, 1, 500)])).await.unwrap();
    let first = match tokio::time::timeout(Duration::from_secs(10), sub.next()).await {
        Ok(Ok(Some(b))) => b,
        other => panic!(
            "{what}: the first batch's row was not delivered: {other:?}; {:?}",
            db.run_to_completion().await
        ),
    };
    assert!(first.data.num_rows() >= 1);
    src.push(events_batch(events)).await.unwrap();
    src.finish().await.ok();
    let e = db.run_to_completion().await.unwrap_err();
    let later: usize = collect(sub).await.iter().map(|b| b.num_rows()).sum();
    db.shutdown().await.ok();
    (e, later)
}

#[tokio::test]
async fn each_worker_failure_halts_with_its_own_error_and_applies_nothing() {
    let quick = RemoteLimits {
        call_deadline: Duration::from_millis(300),
        ..RemoteLimits::default()
    };
    /// What fails, its worker, the engine's limits, the failing input and
    /// the words its error must contain.
    type Case = (
        &'static str,
        RunningWorker,
        RemoteLimits,
        Vec<Event>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "hangs past the deadline",
            start_troublesome(Duration::from_secs(2), 1, RemoteLimits::default()),
            quick,
            vec![(1, 1, 1_000), (2, 666, 1_000)],
            vec!["SLC-RMT-008", "got no answer within its deadline of 300ms"],
        ),
        (
            "killed mid-call",
            start_troublesome(Duration::ZERO, 1, RemoteLimits::default()),
            RemoteLimits::default(),
            vec![(1, 1, 1_000), (2, 667, 1_000)],
            vec!["SLC-RMT-012", "the session with the worker at unix:"],
        ),
        (
            "answers with more bytes than the engine accepts",
            start_troublesome(Duration::ZERO, 4, RemoteLimits::default()),
            RemoteLimits { max_message_bytes: 8_000, ..RemoteLimits::default() },
            (0..200).map(|k| (k, 5, 1_000)).collect(),
            vec!["SLC-RMT-007", "the response (bytes) is", "over the limit of 8000"],
        ),
        (
            "breaks a function limit (as a native handler would)",
            start_troublesome(Duration::ZERO, 5, RemoteLimits::default()),
            RemoteLimits::default(),
            vec![(1, 5, 1_000)],
            vec!["process function 'trouble' v1, key 010000000000000001: 5 output rows exceed max_output_rows_per_activation = 4"],
        ),
    ];
    for (what, worker, limits, events, words) in cases {
        let (e, later) = run_until_error(what, &worker, limits, &events).await;
        assert!(matches!(e, Error::Halted { .. }), "{what}: {e}");
        for w in words {
            assert!(e.to_string().contains(w), "{what}: missing '{w}' in {e}");
        }
        assert_eq!(
            later, 0,
            "{what}: nothing of the failing cycle is delivered"
        );
    }
}
